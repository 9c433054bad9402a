"""The Training lessons' registry (issue 45): a lesson is one record, and the page asks the record.

A lesson registered from this file alone (the same run with and without warm-up) appears in the page's list with its
own choice, its explanation under it, its variants, and a verdict computed from its run; nothing else is edited.
No module outside the registry tests a lesson's name."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mlm_core.lessons import training_registry as registry
from mlm_core.lessons.training_registry import Choice, RunView, TrainingLesson
from mlm_core.lessons.training_view import gazetteer_texts
from tests.test_page_training import tiny  # noqa: F401  (autouse: the tiny model, one torch thread)
from tests.test_page_training_lessons import start_lesson

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "training.py"
TOY = "toy_warmup"  # not a key a real lesson might take


def _toy_variants(base, *, from_scratch, warmup=10, **choices):
    return {"with warm-up": replace(base, warmup_steps=int(warmup)), "no warm-up": replace(base, warmup_steps=0)}


def _toy_verdict(view: RunView):
    """Which variant ends lower on the held-out set, from the run's own last evaluation."""
    last = {name: rows[-1]["loss"] for name, rows in view.evals.items() if rows}
    if len(last) < 2:
        return []
    lead = min(last, key=last.get)
    return [("markdown", f"**Warm-up, on this run:** {lead} ends lower ({last[lead]:.4f}).")]


@pytest.fixture
def toy_lesson():
    """A fourth-kind lesson, registered from this test file alone; removed afterwards."""
    record = registry.register(TrainingLesson(
        TOY, "Warm-up or none: the same run with and without warm-up", _toy_variants,
        choices=(Choice("warmup", "select_slider", "Warm-up steps to race", "training_toy_warmup", [2, 4, 8], 4,
                        "How many warm-up steps the first variant takes."),),
        intro=lambda base, choices: [("info", f"Both variants start from the same weights; one warms up over "
                                              f"{choices['warmup']} steps.")],
        probes="race", verdict=_toy_verdict))
    yield record
    registry.unregister(TOY)
    assert TOY not in registry.TRAINING_LESSONS


def test_a_lesson_registered_from_a_test_file_trains_on_the_page(toy_lesson):
    at = AppTest.from_file(str(PAGE), default_timeout=180)
    at.session_state["training_lesson"] = TOY
    at.run()
    assert not at.exception, at.exception
    assert toy_lesson.title in at.radio(key="training_lesson").options and at.radio(key="training_lesson").value == TOY
    assert at.select_slider(key="training_toy_warmup").value == 4
    assert any("one warms up over 4 steps" in i.value for i in at.info)
    at, snap = start_lesson(TOY, steps=6, eval_every=3, training_toy_warmup=2)
    assert any("one warms up over 2 steps" in i.value for i in at.info)
    assert {n: c["warmup_steps"] for n, c in snap.configs.items()} == {"with warm-up": 2, "no warm-up": 0}
    assert at.session_state["training_run_meta"]["lesson"] == TOY
    verdict = _toy_verdict(RunView.of(snap, at.session_state["training_run_meta"]))[0][1]
    assert verdict in [m.value for m in at.markdown]  # computed from the run, shown by the page
    assert toy_lesson.export(RunView.of(snap, {})) == [{"said": verdict}]  # and kept in the lesson zip
    assert any(t.value.columns[0] == "variant" and len(t.value) == 2 for t in at.table)  # its probes, raced


def test_the_view_model_builds_a_registered_lesson_like_the_others(toy_lesson):
    texts = gazetteer_texts()
    base = registry.base_config(TOY, from_scratch=False, texts=texts, seed=3)
    variants = registry.lesson_variants(TOY, base, from_scratch=False, warmup=8)
    assert [c.warmup_steps for c in variants.values()] == [8, 0]
    assert registry.is_default_run(registry.lesson_variants(TOY, base, from_scratch=False), TOY,
                                   from_scratch=False, texts=texts)
    assert not registry.is_default_run(variants, TOY, from_scratch=False, texts=texts)


def test_an_unknown_lesson_is_a_message():
    with pytest.raises(registry.InputError, match="Unknown lesson 'nap'"):
        registry.lesson("nap")
    assert registry.run_lesson({"lesson": "nap"}) is registry.PLAIN_RUN  # a run's record: nothing said but its curves
    with pytest.raises(registry.InputError, match="registered already"):  # a lesson is never replaced silently
        registry.register(registry.TRAINING_LESSONS["facts"])


LESSON_TEST = re.compile(r"""(lesson\w*|kind|\.get\("lesson"\)|\["lesson"\])\s*(==|!=|in|not in)\s*[(\["']*("""
                         + "|".join(registry.TRAINING_LESSONS) + r""")\b""")


def test_no_module_outside_the_registry_tests_a_lessons_name():
    """The smell the registry removes: `if lesson == "bugs"` in the page, the view or the UI."""
    found = []
    for folder in ("pages", "ui", "mlm_core"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "training_registry.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if LESSON_TEST.search(line.split("#")[0]):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, found


def test_a_registered_loss_is_offered_by_the_free_lesson():
    """The free lesson's choice lists the loss registry as it is now: a fourth loss appears without an edit here."""
    from tests.test_loss_registry import NAME, SMOOTHED
    from mlm_core import loss_registry

    loss_registry.register(SMOOTHED)
    try:
        at = AppTest.from_file(str(PAGE), default_timeout=120)
        at.session_state["training_lesson"] = "free"
        at.run()
        assert not at.exception, at.exception
        choice = at.multiselect(key="training_variants")
        assert NAME in choice.options or SMOOTHED.title in choice.options, choice.options
        assert SMOOTHED.why in choice.help
    finally:
        loss_registry.unregister(NAME)
