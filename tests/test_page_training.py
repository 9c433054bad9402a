"""AppTest of the Training page: the default lesson, start, progress, probes and curve data, stop;
the other lessons' variants; limits and the teacher view; the run's status in every page's sidebar."""

import json
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from tests.conftest import probe_panels_label_every_candidate

PAGE = Path(__file__).resolve().parent.parent / "pages" / "training.py"
HOME = Path(__file__).resolve().parent.parent / "pages" / "home.py"


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def charts(at):
    """{key: plotly spec} of the charts on the page."""
    out = {}
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        out[element.proto.id] = spec
    return out


def frame(at, *columns):
    """The first table on the page that has these columns, sortable or static (AppTest finds them by position)."""
    for element in [*at.dataframe, *at.table]:
        if set(columns) <= set(element.value.columns):
            return element.value
    raise AssertionError(f"no table with columns {columns}")


def page(**state):
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception
    return at


def short_facts_run(at, variant: int, steps: int, eval_every: int, timeout: float):
    """Start the facts lesson with a few small steps (its `variant`-th settings block) and wait for it to end."""
    at.slider(key=f"training_steps_facts_{variant}").set_value(steps)
    at.select_slider(key="training_batch").set_value(2)
    at.select_slider(key="training_seq_len").set_value(32)
    at.number_input(key=f"training_eval_every_facts_{variant}").set_value(eval_every)
    at.run()
    at.button(key="training_start").click().run()
    run = at.session_state["training_run"]
    assert run.wait(timeout)
    at.run()
    assert not at.exception
    return run


def poll(at, run, done, timeout=240):
    """AppTest does not tick run_every fragments: rerun until `done(snapshot)`."""
    deadline = time.monotonic() + timeout
    snap = run.snapshot()
    while time.monotonic() < deadline and not done(snap):
        time.sleep(0.5)
        at.run()
        assert not at.exception
        snap = run.snapshot()
    return snap


def test_default_lesson_is_the_gazetteer_with_its_probes():
    at = page()
    assert at.radio(key="training_lesson").value == "facts"
    assert at.radio(key="training_source").value == "Veldoria gazetteer"
    assert any("Veldoria" in c.value and "never used to build the default model" in c.value for c in at.caption)
    # the tiny model (this test's sidebar model) gets the from-scratch defaults, each with its reason
    assert at.select_slider(key="training_lr_facts_1").value == 1e-3
    why = frame(at, "setting", "default", "why")
    assert {"steps", "learning rate", "warmup steps", "max grad norm"} <= set(why["setting"])
    assert why["why"].str.len().min() > 30


def test_start_progress_probes_curves_stop():
    at = page()
    at.slider(key="training_steps_facts_1").set_value(300)  # long enough that we stop it
    at.select_slider(key="training_batch").set_value(2)
    at.select_slider(key="training_seq_len").set_value(32)
    at.number_input(key="training_eval_every_facts_1").set_value(2)
    at.run()
    at.button(key="training_start").click().run()
    assert not at.exception
    run = at.session_state["training_run"]
    snap = poll(at, run, lambda s: s.step >= 3 and all(len(v.evals) >= 2 for v in s.variants.values()))
    assert snap.step >= 3, snap
    at.run()
    progress = [p for p in at.get("progress")]
    assert progress and any("step" in p.proto.text for p in progress)
    specs = list(charts(at).values())
    loss = next(s for s in specs if "Training loss" in json.dumps(s.get("layout", {}).get("title", "")))
    ys = [y for trace in loss["data"] for y in (trace.get("y") or []) if y is not None]
    assert len(ys) >= 3 and all(y > 0 for y in ys)
    held = next(s for s in specs if "held-out loss" in json.dumps(s.get("layout", {})))
    assert any("[MASK] positions only" in (t.get("name") or "") for t in held["data"])
    # the probes: the gazetteer's from-scratch probes, with the hidden word's rank
    table = frame(at, "sentence", "answer", "answer's rank now")
    assert list(table["answer"]) == ["the", ".", "the", "of", "whistle"]
    assert min(int(str(r).replace(",", "")) for r in table["answer's rank now"]) >= 1
    # static HTML whose cells wrap (issue 24: a dataframe cut the probe table off at the right at 1400 px)
    assert not [d for d in at.dataframe if "answer's rank now" in d.value.columns]
    assert any("probes answered right" in m.label for m in at.metric)

    at.button(key="training_stop").click().run()
    assert not at.exception
    assert run.wait(120)
    assert run.status == "stopped"
    at.run()
    assert not at.exception
    assert at.session_state["training_run"].snapshot().step < 300
    assert at.get("download_button")  # the CSV export
    results = frame(at, "variant", "held-out loss")
    # 14 columns: static HTML whose headers wrap (a dataframe cut "top-…" at the right edge at 1400 px)
    assert not [d for d in at.dataframe if "held-out loss" in d.value.columns]
    assert {"[MASK]-only loss", "MLM perplexity", "held-out loss at start", "steps clipped",
            "facts' words at start", "facts' words"} <= set(results.columns)
    # the held-out fall, split: the loss at the gazetteer's fact words, said in words beside the chart
    assert any("What the fall is made of" in c.value and "common" in c.value for c in at.caption)
    assert at.button(key="training_start").disabled is False


def test_presenter_view_enlarges_the_curves():
    """At a 1280x720 projector the Training curves kept 11 px ticks: they skipped ui.room_figure."""
    import ui

    at = page(**{ui.KEYS.presenter: True})
    short_facts_run(at, 1, steps=4, eval_every=2, timeout=120)
    specs = [s for s in charts(at).values() if "Probe" not in json.dumps(s.get("layout", {}).get("title", ""))]
    curves = [s for s in specs if any(w in json.dumps(s["layout"].get("title", "")) for w in
                                      ("Training loss", "Gradient norm", "Learning rate", "by token frequency"))]
    assert len(curves) == 4, [s["layout"].get("title") for s in specs]
    for spec in curves:
        assert spec["layout"]["height"] >= ui.PRESENTER_CHART_HEIGHT
        assert spec["layout"]["xaxis"]["tickfont"]["size"] == ui.PRESENTER_CHART_FONT_PX
    # subplot titles are annotations: the held-out and loss charts' kept plotly's 16 px (they skipped ui.chart)
    titled = [s for s in specs if s["layout"].get("annotations")]
    assert titled, [s["layout"].get("title") for s in specs]
    for spec in titled:
        assert {a.get("font", {}).get("size") for a in spec["layout"]["annotations"]} == {ui.PRESENTER_CHART_FONT_PX}
    # the probe bars: 11 px text on the projector; at 20 px in 190-px panels plotly hid every other candidate
    probes = [spec for key, spec in charts(at).items() if "training_probe_" in key]
    assert probes, list(charts(at))
    for spec in probes:
        assert spec["layout"]["yaxis"]["tickfont"]["size"] == ui.PRESENTER_CHART_FONT_PX
        k = max(len(trace["y"]) for trace in spec["data"])
        probe_panels_label_every_candidate(spec["layout"], k, ui.PRESENTER_CHART_FONT_PX)


def test_lr_lesson_races_clipping_off_on_and_a_sensible_rate():
    at = page()
    at.radio(key="training_lesson").set_value("lr_too_high").run()
    assert not at.exception
    assert any("clipped" in info.value for info in at.info)
    assert at.select_slider(key="training_lr_lr_too_high_1").value == 3e-2


def test_masking_lesson_races_static_against_dynamic_masks():
    at = page()
    at.radio(key="training_lesson").set_value("masking").run()
    at.slider(key="training_steps_masking_1").set_value(20)
    at.select_slider(key="training_static_copies").set_value(2)
    at.run()
    at.button(key="training_start").click().run()
    assert not at.exception
    run = at.session_state["training_run"]
    configs = run.snapshot().configs
    run.stop()
    assert run.wait(120)
    assert sorted(c["mask_copies"] for c in configs.values()) == [0, 2]


def test_a_step_over_the_token_budget_is_refused_with_advice():
    at = page()
    at.select_slider(key="training_batch").set_value(64)
    at.select_slider(key="training_seq_len").set_value(256)
    at.run()
    at.button(key="training_start").click().run()
    assert not at.exception
    assert any("gradient checkpointing" in e.value for e in at.error)
    assert "training_run" not in at.session_state


def test_empty_paste_is_a_warning_not_a_crash():
    at = page()
    at.radio(key="training_source").set_value("Paste text").run()
    assert not at.exception
    assert at.warning and "empty" in at.warning[0].value
    assert at.button(key="training_start").disabled


def test_the_teacher_view_needs_the_key(monkeypatch):
    assert not any("Teacher" in e.label for e in page().expander)  # no key set: no teacher view at all
    monkeypatch.setenv("MLMLAB_TEACHER_KEY", "k3y")
    at = page()
    assert any("Teacher" in e.label for e in at.expander)
    at.text_input(key="training_teacher_key").set_value("wrong").run()
    assert any("Wrong teacher key" in w.value for w in at.warning)
    at.text_input(key="training_teacher_key").set_value("k3y").run()
    assert not at.exception
    assert frame(at, "run", "what", "status") is not None


def test_every_page_shows_the_runs_status_in_the_sidebar():
    """Issue 16 item 4: the run's progress is in the sidebar of another page, which keeps polling it."""
    from mlm_core import jobs
    from mlm_core.training import TrainConfig, TrainEvent, TrainResult

    def slow_train(model, tokenizer, texts, variants, *, on_event, stop, **kwargs):
        step = 0
        while not stop.is_set() and step < 500:
            step += 1
            for name in variants:
                on_event(TrainEvent("step", name, step, 500, {"step": step, "loss": 1.0}))
            time.sleep(0.01)
        return {name: TrainResult(name=name, config=cfg, steps_done=step, stopped=True) for name, cfg in variants.items()}

    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=slow_train)
    run = manager.submit(None, None, ["t"], {"a": TrainConfig(steps=500)})
    try:
        at = AppTest.from_file(str(HOME), default_timeout=120)
        at.session_state["training_run"] = run
        run.last_polled = -1e9
        at.run()
        assert not at.exception
        assert any("Training run: running" in p.proto.text for p in at.sidebar.get("progress"))
        assert run.last_polled > 0  # the other page's sidebar looked at the run
    finally:
        manager.shutdown()


def test_the_run_trains_with_the_learners_masking_rule(monkeypatch):
    """Review fix: the run's masking is the shared rule (strategy and 80/10/10 shares), p from the slider,
    which starts at the rule's p; before, the page built MaskingConfig(p) and dropped the strategy."""
    from mlm_core import jobs

    submitted = {}

    def capture(self, model, tokenizer, texts, variants, **kwargs):
        submitted.update(variants)
        raise jobs.BusyError("captured")  # nothing trains: only the submitted configs matter here

    monkeypatch.setattr(jobs.RunManager, "submit", capture)
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.query_params.update({"p": "0.5", "strategy": "whole_word", "mask": "0.6", "random": "0.2"})
    at.run()
    assert not at.exception
    assert at.slider(key="training_mlm_p").value == 0.5
    at.button(key="training_start").click().run()
    assert not at.exception
    assert submitted
    for cfg in submitted.values():
        assert (cfg.masking.strategy, cfg.masking.mlm_probability) == ("whole_word", 0.5)
        assert (cfg.masking.mask_replace_prob, cfg.masking.random_replace_prob) == (0.6, 0.2)
    submitted.clear()
    at.slider(key="training_mlm_p").set_value(0.2).run()
    at.button(key="training_start").click().run()
    assert not at.exception
    assert {(c.masking.strategy, c.masking.mlm_probability) for c in submitted.values()} == {("whole_word", 0.2)}
    assert not [w for w in at.warning if "Session State API" in w.value]


def test_the_facts_lesson_shows_both_probe_sets_side_by_side(monkeypatch):
    """Issue 25 §1 (and 24 §3.7): with the bundled model the facts lesson asks every fact as a phrase it read and as
    a question in new words. Before Start the page shows what the model guesses now (the guide sends the teacher
    there; before, that table only appeared after Start); after a run, both sets side by side with top-1, top-5
    and the answer's rank then and now, and one sentence on the difference."""
    monkeypatch.delenv("MLMLAB_MODEL", raising=False)  # the bundled default model (a few seconds to load)
    at = page()
    previews = [t.value for t in at.table if "first guess now" in t.value.columns and "answer's rank now" in t.value.columns]
    assert len(previews) == 4 and [len(p) for p in previews] == [15, 15, 15, 15]  # the four sets, side by side
    assert any("Phrases it read" in m.value for m in at.markdown) and any("Questions in new words" in m.value
                                                                          for m in at.markdown)
    assert all(p["answer's rank now"].str.replace(",", "").astype(int).min() >= 1 for p in previews)  # static: text
    run = short_facts_run(at, 0, steps=5, eval_every=5, timeout=240)
    labels = [m.label for m in at.metric]
    assert labels.count("first guess right") == 3 and labels.count("answer in the top 5") == 2
    assert labels.count("an invented word first") == 1  # the control set: about other countries, Veldoria's is wrong
    # issue 43: the questions about Pellastra, where Veldoria's word was not learned about Veldoria, and binding
    assert labels.count("Veldoria's word first") == 1 and labels.count("Veldoria's word in the top 5") == 1
    assert sum(label.startswith("Binding: facts named for Veldoria and not for Pellastra") for label in labels) == 1
    tables = [t.value for t in at.table if "rank at step 0" in t.value.columns]
    assert len(tables) == 4 and all(len(t) == 15 and "rank at step 5" in t.columns for t in tables)
    assert {tuple(t["answer"]) for t in tables[:3]} == {tuple(t["answer"]) for t in tables[:1]}  # the same facts
    assert not set(tables[3]["answer"]) & set(tables[0]["answer"])  # other countries: other answers
    said = " ".join(m.value for m in at.markdown)
    assert "Phrases it read" in said and "Questions in new words" in said and "phrases it read" in said
    assert "Another name" in said and "Other countries" in said
    assert "about real countries it gives an invented country's word first in" in said and "Pellastra" in said


def test_what_did_it_learn_runs_veldoria_alone_beside_its_twins(monkeypatch):
    """Issue 43 §3: "What did it learn?" trains two copies of the bundled model from the same weights on the same
    batches, one learning from Veldoria's sentences alone, one from its twins' too, and shows each run's four probe
    sets, its binding and its real-country control in one table, and the sentence on what the twins did, computed
    from the run's own probes."""
    from mlm_core.lessons.training_view import binding_comparison, probe_set_scores
    from mlm_core.lessons.training_registry import BIND_VARIANTS
    monkeypatch.delenv("MLMLAB_MODEL", raising=False)  # the lesson needs the trained model: its twins, its probes
    at = page(training_lesson="bind")
    assert any("Pellastra" in i.value and "What will it say?" in i.value for i in at.info)  # the vote, before Start
    at.slider(key="training_steps_bind_0").set_value(5)
    at.select_slider(key="training_batch").set_value(2)
    at.select_slider(key="training_seq_len").set_value(32)
    at.number_input(key="training_eval_every_bind_0").set_value(5)
    at.run()
    at.button(key="training_start").click().run()
    run = at.session_state["training_run"]
    assert run.wait(300)
    at.run()
    assert not at.exception, at.exception
    snap = run.snapshot()
    assert snap.status == "done", (snap.status, snap.error)
    assert list(snap.variants) == list(BIND_VARIANTS)
    alone, twins = (snap.configs[name] for name in BIND_VARIANTS)
    assert alone["learn_from_texts"] > 0 and twins["learn_from_texts"] == 0
    assert {k: v for k, v in alone.items() if k != "learn_from_texts"} == {k: v for k, v in twins.items()
                                                                            if k != "learn_from_texts"}
    evals = [snap.variants[name].evals for name in BIND_VARIANTS]
    assert evals[0][0]["loss"] == pytest.approx(evals[1][0]["loss"], abs=1e-6)  # the same weights, the same mask
    race = frame(at, "variant", "Binding")
    assert list(race["variant"]) == list(BIND_VARIANTS)
    for label in ("Phrases it read", "Questions in new words", "Other countries"):
        assert f"{label}: first guess right" in race.columns
    assert "Another name: Veldoria's word first" in race.columns  # wrong about Pellastra: never "right"
    assert "Other countries: an invented word first" in race.columns
    said = binding_comparison({name: probe_set_scores(snap.variants[name].probes) for name in BIND_VARIANTS})
    assert said and f"**What the twins did:** {said}" in [m.value for m in at.markdown]
