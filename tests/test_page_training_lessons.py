"""AppTest of issue 27's three Training lessons (the masking rate on a frozen eval mask, a bug beside its clean twin,
the guess over time), the Bug museum's links to the trained bugs, and Inside the model's base-vs-trained filmstrip.

Every sentence a lesson shows about its run is checked against the view-model's function applied to the run's own
snapshot: the page computes it from the run, not from text written in advance."""

import json
from pathlib import Path

import pytest
import torch

import ui
from streamlit.testing.v1 import AppTest

from mlm_core.lessons.training_lessons import (CLEAN, PAPERS_ON_RATE, TRAINED_BUGS, TWIN, bug_signature,
                                               filmstrip_frames, filmstrip_summary, rate_train_note, rate_verdict)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "pages" / "training.py"


from tests.test_page_training import tiny  # noqa: F401, E402  (autouse: the tiny model, one torch thread)


def charts(at):
    """{key: plotly spec} of the charts on the page (an element's id ends with its key)."""
    return {e.proto.id.rsplit("-", 1)[-1]: json.loads(e.proto.spec) for e in at.get("plotly_chart")}


def start_lesson(lesson: str, steps: int = 10, eval_every: int = 5, **state):
    """The page on `lesson` with the tiny model (from scratch), a short run started and finished."""
    at = AppTest.from_file(str(PAGE), default_timeout=180)
    at.session_state["training_lesson"] = lesson
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    at.slider(key=f"training_steps_{lesson}_1").set_value(steps)
    at.select_slider(key="training_batch").set_value(2)
    at.select_slider(key="training_seq_len").set_value(32)
    at.number_input(key=f"training_eval_every_{lesson}_1").set_value(eval_every)
    at.run()
    at.button(key="training_start").click().run()
    assert not at.exception, at.exception
    run = at.session_state["training_run"]
    assert run.wait(240)
    at.run()
    assert not at.exception, at.exception
    snap = run.snapshot()
    assert snap.status == "done", (snap.status, snap.error)
    return at, snap


def said(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_the_masking_rate_lesson_scores_every_rate_on_one_frozen_mask():
    at, snap = start_lesson("mask_rate")
    assert set(snap.variants) == {"mask 15%", "mask 30%", "mask 40%"}
    rates = {n: (c["masking"]["mlm_probability"], c["eval_masking"]["mlm_probability"]) for n, c in snap.configs.items()}
    assert rates == {"mask 15%": (0.15, 0.15), "mask 30%": (0.3, 0.15), "mask 40%": (0.4, 0.15)}
    evals = {n: v.evals for n, v in snap.variants.items()}
    # step 0: the same weights on the same frozen positions, so one loss for all three
    assert len({round(e[0]["loss"], 9) for e in evals.values()}) == 1
    verdict = rate_verdict(evals, "scratch", default_settings=False)  # 10 steps: not the lesson's defaults
    assert "At step 10" in verdict and "not the defaults" in verdict
    assert f"**On this run:** {verdict}" in said(at)
    assert any(c.value == PAPERS_ON_RATE for c in at.caption)
    note = rate_train_note({n: v.steps for n, v in snap.variants.items()})
    assert note and any(c.value == note for c in at.caption)
    held = charts(at)["training_eval_chart"]
    names = " | ".join(t.get("name") or "" for t in held["data"])
    assert all(n in names for n in ("mask 15%", "mask 30%", "mask 40%")), names
    assert any(t.value.columns[0] == "variant" and len(t.value) == 3 for t in at.table)  # the probes, by variant


def test_too_many_rates_is_a_message_not_a_run():
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.session_state["training_lesson"] = "mask_rate"
    at.run()
    at.multiselect(key="training_rates").set_value([0.1, 0.15, 0.3, 0.4]).run()
    assert not at.exception
    assert any("at most 3" in e.value for e in at.error)
    assert at.button(key="training_start").disabled


@pytest.mark.parametrize("bug", ["labels_never_ignored", "eval_remasked"])
def test_a_bug_trains_beside_its_clean_twin_with_its_signature_and_source(bug):
    at, snap = start_lesson("bugs", training_bug=bug)
    assert list(snap.variants) == [CLEAN, TWIN]
    assert snap.configs[CLEAN]["bug"] == "" and snap.configs[TWIN]["bug"] == bug
    info = TRAINED_BUGS[bug]
    assert any(c.value == info.code for c in at.code)
    reported = next(c.value for c in at.caption if c.value.startswith("Reported: "))
    repo, number = info.reported.split(":")[0].split("#")
    assert f"(https://github.com/{repo}/issues/{number})" in reported
    steps = {n: v.steps for n, v in snap.variants.items()}
    evals = {n: v.evals for n, v in snap.variants.items()}
    signature = bug_signature(bug, steps, evals)
    assert signature and f"**{info.title}, on this run:** {signature}" in said(at)
    if bug == "eval_remasked":  # the twin trains exactly as the clean run: only what it reports differs
        assert [r["loss"] for r in steps[CLEAN]] == [r["loss"] for r in steps[TWIN]]
        assert any(abs(e["reported_loss"] - e["loss"]) > 1e-6 for e in evals[TWIN])
    else:  # its training loss is over every token: lower than the clean run's at the end
        assert steps[TWIN][-1]["loss"] < steps[CLEAN][-1]["loss"]


def test_the_guess_over_time_follows_the_learners_sentence():
    state = {"training_film_sentence": "The [MASK] sat on the mat.", "training_film_answer": "cat"}
    at, snap = start_lesson("filmstrip", steps=10, eval_every=2, **state)
    (name, curves), = snap.variants.items()
    probes = curves.probes
    assert [p["step"] for p in probes] == [0, 2, 4, 6, 8, 10]
    index = len(probes[-1]["probes"]) - 1  # the learner's sentence, the last probe
    assert probes[-1]["probes"][index]["text"] == "The [MASK] sat on the mat."
    assert at.selectbox(key=f"training_film_probe_{snap.run_id}").value == index  # the learner's sentence first
    film = charts(at)[f"training_film_{snap.run_id}"]
    heat = next(t for t in film["data"] if t["type"] == "heatmap")
    assert heat["x"] == ["0", "2", "4", "6", "8", "10"] and len(heat["y"]) == 5
    frames = filmstrip_frames(probes, index)
    assert frames[0].answer == "cat"
    summary = filmstrip_summary(frames)
    assert summary.startswith("The hidden word 'cat' went from rank") and ui.markdown_text(summary) in said(at)


def test_a_sentence_without_one_mask_is_a_message():
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.session_state["training_lesson"] = "filmstrip"
    at.session_state["training_film_sentence"] = "No mask here."
    at.session_state["training_film_answer"] = "cat"
    at.run()
    assert not at.exception
    assert any("exactly one \\[MASK\\]" in w.value for w in at.warning), [w.value for w in at.warning]
    assert at.button(key="training_start").disabled


def test_the_museum_opens_the_training_page_on_its_bug(apptest):
    at = apptest("app.py", timeout=240)
    at.run()
    at.switch_page("pages/bug_museum.py").run()
    assert not at.exception, at.exception
    buttons = {b.key for b in at.button if (b.key or "").startswith("museum_train_")}
    assert buttons == {f"museum_train_{b.museum or b.key}" for b in TRAINED_BUGS.values()}
    at.button(key="museum_train_random_overwritten").click().run()
    assert not at.exception, at.exception
    assert at.radio(key="training_lesson").value == "bugs"
    assert at.selectbox(key="training_bug").value == "random_share_misread"


def test_the_masking_page_draws_the_corruption_and_prediction_rates(apptest):
    at = apptest("pages/masking.py").run()
    assert not at.exception, at.exception
    assert any("Two rates in one" in h.value for h in at.subheader)
    spec = charts(at)["masking_rates_fig"]
    label = next(t for t in spec["data"] if t.get("mode") == "text")
    assert any(t.strip() == "predicted 15.0, corrupted 13.5" for t in label["text"])  # BERT's rule, and the default
    assert any("Wettig et al. (2023, EACL" in m.value for m in at.markdown)
