"""The view-model of issue 27's lessons (mlm_core.lessons.training_lessons): the sentences come from the run's
numbers, the quoted run-to-run spread is benchmark P7's, the sources link, and the museum's exhibits exist."""

import json
from pathlib import Path

import pytest

from mlm_core.lessons import museum
from mlm_core.lessons.training_lessons import (CLEAN, MUSEUM_TO_BUG, RATE_LEAD_SPREAD, TRAINED_BUGS, TWIN, Frame,
                                               bug_signature, filmstrip_frames, filmstrip_summary, rate_verdict,
                                               reported_markdown)
from mlm_core.lessons.training_view import gazetteer_texts
from mlm_core.lessons.training_registry import base_config, is_default_run, lesson_variants

P7 = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "p7_lessons.json"


def rows(*values, key="loss"):
    return [{"step": 10 * i, key: v} for i, v in enumerate(values)]


def test_the_quoted_spread_is_benchmark_p7s():
    """The page quotes RATE_LEAD_SPREAD as measured; it must be what the committed P7 run measured."""
    if not RATE_LEAD_SPREAD:  # nothing quoted: the page then says no spread
        return
    measured = json.loads(P7.read_text())["config"]["rate_lead_spread"]
    assert set(measured) == set(RATE_LEAD_SPREAD)
    for kind, spread in RATE_LEAD_SPREAD.items():
        assert list(spread) == measured[kind]["spread"], kind
        below = measured[kind]["below_by_seed"]
        assert (round(min(below), 2), round(max(below), 2), len(below)) == spread[:3]


def test_the_rate_sentence_is_computed_from_the_run(monkeypatch):
    from mlm_core.lessons import training_lessons

    lo, hi, seeds, led = 0.20, 0.30, 3, 2  # a spread as P7 writes it (the logic, not the measured values)
    monkeypatch.setitem(training_lessons.RATE_LEAD_SPREAD, "fine-tune", (lo, hi, seeds, led))
    inside = round((lo + hi) / 2, 2)
    evals = {"mask 15%": rows(5.0, 3.0), "mask 30%": rows(5.0, 2.95), "mask 40%": rows(5.0, 3.0 - inside)}
    text = rate_verdict(evals, "fine-tune")
    assert text.startswith(f"At step 10, on the frozen 15% mask (the same positions for every variant), mask 40% "
                           f"leads with a held-out loss of {3.0 - inside:.2f}")
    assert (f"Over 3 other seeds of this lesson's default run (benchmark P7; not the page's seed 0), mask 40% ended "
            "0.20 to 0.30 nats below mask 15% and had the lowest loss in 2 of them") in text
    assert text.endswith(f"here it is {3.0 - (3.0 - inside):.2f} below: within that spread.")
    far = {**evals, "mask 40%": rows(5.0, 3.0 - hi - 0.2)}
    assert rate_verdict(far, "fine-tune").endswith("outside that spread.")
    assert "not the defaults" in rate_verdict(evals, "fine-tune", default_settings=False)
    behind = {**evals, "mask 40%": rows(5.0, 3.3)}
    assert "mask 30% leads" in rate_verdict(behind, "fine-tune") and "here it is -0.30 below" in rate_verdict(
        behind, "fine-tune")
    assert rate_verdict({n: r[:1] for n, r in evals.items()}, "fine-tune").endswith("so the losses are equal.")
    # rehearsal: 2.87 vs 2.88 was called a lead; two rates under LEVEL_NATS apart are level
    close = {**evals, "mask 30%": rows(5.0, 3.0 - inside + 0.01)}
    said = rate_verdict(close, "fine-tune")
    assert "mask 40% and mask 30% are level" in said and "leads" not in said
    assert said.count("mask 30%") == 1 and "for mask 15%" in said  # the runner-up named once (issue 43 §4.5)
    assert rate_verdict({"mask 15%": rows(5.0)}, "fine-tune") == ""  # one variant: nothing to compare


def test_level_is_below_the_run_to_run_spread_of_either_kind():
    """Issue 43 §4.7: LEVEL_NATS's comment named a 0.05-nat range the spread no longer had; it is checked here."""
    from mlm_core.lessons.training_lessons import LEVEL_NATS, RATE_LEAD_SPREAD

    assert all(LEVEL_NATS < hi - lo for lo, hi, _, _ in RATE_LEAD_SPREAD.values())


def test_only_the_lessons_own_defaults_count_as_the_measured_run(tokenizer):
    texts = gazetteer_texts(False)
    for lesson in ("mask_rate", "bugs"):
        base = base_config(lesson, from_scratch=False, texts=texts, seed=3)
        variants = lesson_variants(lesson, base, from_scratch=False)
        assert is_default_run(variants, lesson, from_scratch=False, texts=texts)
        longer = lesson_variants(lesson, base_config(lesson, from_scratch=False, texts=texts, steps=base.steps + 5),
                                 from_scratch=False)
        assert not is_default_run(longer, lesson, from_scratch=False, texts=texts)
    assert not is_default_run(lesson_variants("mask_rate", base, from_scratch=False, rates=(0.15, 0.5)), "mask_rate",
                              from_scratch=False, texts=texts)


def test_the_remasked_evaluations_signature_counts_the_sign_changes():
    steps = {CLEAN: [{"step": 1, "loss": 3.0}], TWIN: [{"step": 1, "loss": 3.0}]}
    frozen = [4.0, 3.5, 3.2, 3.1]
    reported = [4.1, 3.3, 3.4, 3.0]  # +0.1, -0.2, +0.2, -0.1: the sign changed 3 times
    evals = {CLEAN: rows(*frozen), TWIN: [{"step": 10 * i, "loss": f, "reported_loss": r}
                                          for i, (f, r) in enumerate(zip(frozen, reported))]}
    text = bug_signature("eval_remasked", steps, evals)
    assert text.startswith("Its training is the clean run's, step for step")
    assert "reported -0.20 to +0.20 nats from the frozen mask's held-out loss over 4 evaluations" in text
    # issue 43 §4.7: two checkpoints' reported losses can differ by the gaps' whole spread, max - min (not 0.20)
    assert "the sign changed 3 times" in text and "smaller than 0.40 nats" in text
    assert text.endswith(TRAINED_BUGS["eval_remasked"].look_for)


def test_the_filmstrip_reads_one_probe_at_every_evaluation():
    def entry(step, tokens, probs, rank):
        return {"step": step, "probes": [
            {"text": "x [MASK]", "predictions": [{"tokens": ["a"], "probs": [0.9], "answer": "a", "answer_rank": 1}]},
            {"text": "the capital is [MASK].", "predictions": [
                {"tokens": tokens, "probs": probs, "answer": "calder", "answer_rank": rank, "answer_prob": 0.01}]}]}

    probes = [entry(0, ["the", "a", "it", "x", "y", "z"], [0.3, 0.2, 0.1, 0.05, 0.04, 0.01], 14492),
              entry(5, ["port", "calder", "the", "x", "y"], [0.4, 0.3, 0.1, 0.05, 0.04], 2),
              entry(10, ["calder", "port", "the", "x", "y"], [0.7, 0.1, 0.1, 0.05, 0.04], 1)]
    frames = filmstrip_frames(probes, 1)
    assert [f.label for f in frames] == ["0", "5", "10"] and len(frames[0].tokens) == 5  # the top 5 only
    assert [f.answer_rank for f in frames] == [14492, 2, 1]
    assert filmstrip_summary(frames) == ("The hidden word 'calder' went from rank 14,492 at step 0 to rank 1 at "
                                         "step 10; it first became the first guess at step 10.")
    base = [Frame("base", ("a",), (0.5,), "calder", 300, 0.0), Frame("trained", ("calder",), (0.6,), "calder", 1, 0.6)]
    assert filmstrip_summary(base, unit="").endswith("at the trained model; it first became the first guess at the "
                                                     "trained model.")


@pytest.mark.parametrize("bug", list(TRAINED_BUGS))
def test_every_bug_cites_a_linked_source(bug):
    text = reported_markdown(TRAINED_BUGS[bug].reported)
    assert "](https://github.com/" in text
    assert text.count("](https://github.com/") == TRAINED_BUGS[bug].reported.count("#")  # every reference links


def test_the_museum_exhibits_the_trained_bugs_link_to_exist():
    source = Path(museum.__file__).read_text()
    for exhibit in MUSEUM_TO_BUG:
        assert f'key="{exhibit}"' in source, exhibit


def test_the_corruption_and_prediction_picture_draws_each_rules_two_rates():
    """The Masking page's picture (Wettig et al. 2023 separate the two rates): per 100 tokens, the bars stack to the
    prediction rate, the tick sits at the corruption rate, and its label says both."""
    from mlm_core.figures.masking import corruption_prediction_figure
    from mlm_core.lessons.masking_view import rate_rows
    from mlm_core.masking import MaskingConfig

    rows = rate_rows(MaskingConfig(mlm_probability=0.4, mask_replace_prob=0.8, random_replace_prob=0.1))
    fig = corruption_prediction_figure(rows)
    bars = {t.name: list(t.x) for t in fig.data if t.type == "bar"}
    tick = next(t for t in fig.data if t.name == "corrupted")
    label = next(t for t in fig.data if t.type == "scatter" and t.mode == "text")
    yours = list(tick.y).index(rows[0][0])
    assert [round(bars[k][yours], 6) for k in ("[MASK]", "random", "unchanged")] == [32.0, 4.0, 4.0]
    assert round(tick.x[yours], 6) == 36.0  # corrupted: [MASK] + random, 40 x (0.8 + 0.1)
    assert label.text[yours].strip() == "predicted 40.0, corrupted 36.0"
    for i, (name, shares) in enumerate(reversed(rows)):  # the chart lists the rules bottom-up
        assert tick.y[i] == name and abs(sum(bars[k][i] for k in bars) - shares.predicted) < 1e-9


def test_the_filmstrip_keeps_seven_evenly_spaced_frames_at_room_size():
    """Rehearsal: 13 frames of five guesses overlapped at presenter size (1280 px). At room size at most seven are
    drawn, the first and the last among them, and the title says how many of how many."""
    from mlm_core.figures.training import ROOM_FRAMES, filmstrip_figure
    from mlm_core.lessons.training_lessons import Frame

    frames = [Frame(f"step {5 * i}", ("a", "b"), (0.5, 0.2), "a", 1, 0.5) for i in range(13)]
    desk = filmstrip_figure(frames)
    room = filmstrip_figure(frames, label_px=24)
    assert list(desk.data[0].x) == [f.label for f in frames]
    shown = list(room.data[0].x)
    assert len(shown) == ROOM_FRAMES and shown[0] == "step 0" and shown[-1] == "step 60"
    assert f"{ROOM_FRAMES} of 13 evaluations" in room.layout.title.text


def test_trained_bugs_speak_the_museums_vocabulary():
    """The museum links to these twins: the same bug is written with the same names (original_ids: the ids
    before masking; input_ids: what the model sees), so the two pages never show two versions of one line."""
    for key in ("labels_never_ignored", "special_tokens_masked"):
        code = TRAINED_BUGS[key].code
        assert "original_ids" in code and "input_ids" not in code, code


def test_a_bug_signature_compares_like_with_like_and_names_the_early_gap():
    """Issue 43 §4.1 and §4.6: the twin of 'special tokens hard-coded' runs above the clean run early (a hidden [CLS]
    or [SEP] costs ~11 nats until learned) and the sentence says so beside the late gap; and a run cut short is read
    at the last evaluation both twins have, with the training loss up to that step (it set a step-10 training loss
    beside a step-5 held-out loss)."""
    clean = [{"step": s, "loss": 3.0} for s in range(1, 31)]
    twin = [{"step": s, "loss": 3.0 + (0.5 if s <= 4 else 0.01)} for s in range(1, 31)]
    evals = {CLEAN: rows(4.9, 3.2, 3.1, 3.0), TWIN: rows(4.9, 3.2, 3.1, 3.0)}
    text = bug_signature("special_tokens_masked", {CLEAN: clean, TWIN: twin}, evals)
    assert text.startswith("At step 30,") and "up to +0.50 nats above the clean run" in text
    assert "over the last 10 up to step 30, +0.01 on average" in text
    cut = {CLEAN: rows(4.9, 3.2), TWIN: rows(4.9)}  # the twin's step-10 evaluation never came
    early_steps = [{"step": s, "loss": 9.0 - s} for s in range(1, 8)]
    text = bug_signature("labels_never_ignored", {CLEAN: early_steps, TWIN: early_steps}, cut)
    assert text == ""  # nothing both twins have past step 0: no comparison
    cut = {CLEAN: rows(4.9, 3.2, 3.0), TWIN: rows(4.9, 3.3)}
    text = bug_signature("labels_never_ignored", {CLEAN: early_steps * 1 + [{"step": 20, "loss": 0.1}],
                                                  TWIN: early_steps}, cut)
    assert text.startswith("At step 10,") and "held-out loss on the frozen mask 3.30 (the clean run 3.20)" in text


def test_the_rate_verdict_sets_only_an_end_of_run_gap_beside_the_spread():
    """Issue 43 §4.6: a run cut short (or still going) compared its step-10 gap with the end-of-run spread."""
    evals = {"mask 15%": rows(5.0, 3.0), "mask 40%": rows(5.0, 2.75)}
    assert "within that spread" in rate_verdict(evals, "fine-tune", end_step=10)
    cut = rate_verdict(evals, "fine-tune", end_step=30, finished=True)
    assert "stopped at step 10 of 30" in cut and "spread" in cut and "within" not in cut and "outside" not in cut
    going = rate_verdict(evals, "fine-tune", end_step=30, finished=False)
    assert going.endswith("(step 30): it comes then.")
