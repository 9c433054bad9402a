"""What a training run tells its learner (issue 24 §3 item 1): the time left from the measured step and
evaluation times, never past the time cap, and, for a queued run, its place, when it should start and
what it will get. A fake clock and a train function the test drives event by event: nothing sleeps."""

from __future__ import annotations

import threading

import pytest

from mlm_core import jobs
from mlm_core.training import TrainConfig, TrainEvent, TrainResult

STEPS, EVAL_EVERY = 80, 10
CFG = TrainConfig(steps=STEPS, eval_every=EVAL_EVERY)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Driven:
    """A train function the test drives: each run's ``on_event`` is handed to the test, and the run's
    thread waits until the test lets it end (``finish``)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.runs: list[dict] = []
        self.ready = threading.Condition()

    def __call__(self, model, tokenizer, texts, variants, *, on_event, stop, eval_texts=None):
        entry = {"on_event": on_event, "variants": list(variants), "done": threading.Event(), "steps": 0,
                 "started": self.clock.now}
        with self.ready:
            self.runs.append(entry)
            self.ready.notify_all()
        entry["done"].wait(30)
        return {name: TrainResult(name=name, config=cfg, steps_done=entry["steps"], stopped=stop.is_set())
                for name, cfg in variants.items()}

    def wait_for(self, n: int) -> dict:
        with self.ready:
            assert self.ready.wait_for(lambda: len(self.runs) >= n, 10)
        return self.runs[n - 1]

    def evaluate(self, run: dict, step: int, seconds: float, probe_s: float = 0.0) -> None:
        for name in run["variants"]:
            self.clock.now += seconds
            run["on_event"](TrainEvent("eval", name, step, STEPS, {"loss": 1.0, "eval_s": seconds}))
            self.clock.now += probe_s
            run["on_event"](TrainEvent("probe", name, step, STEPS, {"probes": []}))

    def steps(self, run: dict, n: int, seconds: float, eval_s: float, probe_s: float = 0.0) -> None:
        """``n`` steps of ``seconds`` each (every variant), with the loop's evaluations in between."""
        for _ in range(n):
            run["steps"] += 1
            step = run["steps"]
            for name in run["variants"]:
                self.clock.now += seconds / len(run["variants"])
                run["on_event"](TrainEvent("step", name, step, STEPS,
                                           {"step": step, "loss": 1.0, "elapsed_s": self.clock.now - run["started"]}))
            if step % EVAL_EVERY == 0 or step == STEPS:
                self.evaluate(run, step, eval_s, probe_s)

    def finish(self, run: dict) -> None:
        run["done"].set()


@pytest.fixture
def setup():
    clock = Clock()
    driven = Driven(clock)
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=driven, clock=clock, max_run_s=300)
    yield clock, driven, manager
    for run in driven.runs:
        run["done"].set()
    manager.shutdown(5)


def _submit(manager, client):
    return manager.submit(object(), None, ["text"], {"full": CFG}, label="default lesson", client=client)


def test_the_time_left_counts_the_evaluations_still_to_come(setup):
    """At step 2 the rehearsal read "about 69 s left" where 142 s were needed: steps only, no evaluations."""
    clock, driven, manager = setup
    run = _submit(manager, "a")
    work = driven.wait_for(1)
    driven.evaluate(work, 0, 6.0, probe_s=1.0)  # the evaluation before the first step: 7 s with its probes
    driven.steps(work, 2, 1.0, eval_s=6.0, probe_s=1.0)
    snap = run.snapshot()
    assert snap.step == 2 and snap.step_s == pytest.approx(1.0)
    expected = (STEPS - 2) * 1.0 + len(jobs.eval_points(STEPS, EVAL_EVERY)) * 7.0  # 78 steps + 8 evaluations
    assert snap.eta_s == pytest.approx(expected, rel=0.01)
    assert not snap.stops_at_cap and snap.final_step == STEPS
    assert "about 2 min left" in snap.progress_text()
    driven.steps(work, 38, 1.0, eval_s=6.0, probe_s=1.0)  # the estimate holds as the run goes on
    snap = run.snapshot()
    assert snap.eta_s == pytest.approx(40 * 1.0 + 4 * 7.0, rel=0.01)


def test_the_time_left_follows_a_slower_pace_within_a_few_steps(setup):
    """A second run on the same cores slows the first: the estimate uses the recent steps."""
    clock, driven, manager = setup
    run = _submit(manager, "a")
    work = driven.wait_for(1)
    driven.evaluate(work, 0, 2.0)
    driven.steps(work, 20, 0.5, eval_s=2.0)
    driven.steps(work, jobs.PACE_STEPS, 1.5, eval_s=2.0)
    assert run.snapshot().step_s == pytest.approx(1.5)


def test_the_time_left_never_runs_past_the_cap_and_says_where_the_cap_stops_it(setup):
    """The rehearsal read "about 387 s left" although runs stop at 300 s."""
    clock, driven, manager = setup
    run = _submit(manager, "a")
    work = driven.wait_for(1)
    driven.evaluate(work, 0, 2.0)
    driven.steps(work, 10, 4.5, eval_s=2.0)
    snap = run.snapshot()
    assert snap.elapsed_s + snap.eta_s <= 300.0 + 1e-6
    assert snap.stops_at_cap and 10 < snap.final_step < STEPS
    # the step the cap stops it at, by hand: from step 10 at 47 s, 4.5 s a step and 2 s per evaluation
    t, step = snap.elapsed_s, 10
    while True:
        t += 4.5
        step += 1
        if t >= 300:
            break
        t += 2.0 if step % EVAL_EVERY == 0 else 0.0
        if t >= 300:
            break
    assert snap.final_step == step
    text = snap.progress_text()
    assert "300 s limit" in text and f"near step {step} of {STEPS}" in text and "kept" in text


def test_a_queued_run_says_where_it_is_and_what_it_will_get(setup):
    clock, driven, manager = setup
    first = _submit(manager, "a")
    work = driven.wait_for(1)
    driven.evaluate(work, 0, 2.0)
    driven.steps(work, 20, 0.5, eval_s=2.0)  # 16 s so far; 60 steps and 6 evaluations to go: 42 s
    second = _submit(manager, "b")
    third = _submit(manager, "c")
    q2, q3 = second.snapshot().queue, third.snapshot().queue
    assert (q2.place, q3.place, q2.running, q2.slots) == (1, 2, 1, 1)
    assert q2.start_s == pytest.approx(first.snapshot().eta_s)
    assert q2.start_max_s == pytest.approx(300.0 - first.snapshot().elapsed_s)  # if the first uses all its time
    # the third waits for the second too: as long as the first took with the same settings, at most the cap
    assert q3.start_max_s == pytest.approx(q2.start_max_s + 300.0)
    assert q3.start_s == pytest.approx(q2.start_s + first.snapshot().elapsed_s + first.snapshot().eta_s)
    text = second.snapshot().progress_text()
    assert "Next in line" in text and "should start in about 45 s" in text and "up to 300 s" in text
    # what it will get, before any run with these settings ended: the running one's forecast, said as one
    assert "the run training now has the same settings and should take about 60 s" in text and "took" not in text
    assert "Number 2 in line (1 queued ahead)" in third.snapshot().progress_text()

    driven.steps(work, 60, 0.5, eval_s=2.0)  # the first run ends: 2 + 80 x 0.5 + 8 x 2 = 58 s for all 80 steps
    driven.finish(work)
    assert first.wait(10)
    work2 = driven.wait_for(2)
    assert second.snapshot().status == "running" and third.snapshot().queue.place == 1
    assert third.snapshot().queue.start_s == pytest.approx(58.0)  # the second is expected to take as long
    text = third.snapshot().progress_text()
    assert "a run with these settings took about 60 s for all 80 steps" in text
    driven.finish(work2)


def test_a_queued_run_behind_an_unmeasured_run_is_told_only_the_latest_start(setup):
    """Before the run ahead has measured a step, "start in about 5 min" would be a guess: only the bound is told."""
    clock, driven, manager = setup
    _submit(manager, "a")
    driven.wait_for(1)
    queued = _submit(manager, "b")
    q = queued.snapshot().queue
    assert q.start_s is None and q.start_max_s == pytest.approx(300.0)
    text = queued.snapshot().progress_text()
    assert "at the latest in about 5 min" in text and "should start" not in text


def test_the_queue_message_counts_the_runs_ahead_right(setup):
    """"Queued: 1 run(s) ahead of you" was said to the first in line, with nobody queued ahead."""
    clock, driven, manager = setup
    _submit(manager, "a")
    driven.wait_for(1)
    queued = _submit(manager, "b")
    assert "next in line" in queued.snapshot().message and "ahead of you" not in queued.snapshot().message


def test_the_training_page_shows_the_forecast_and_the_queue(setup, apptest):
    """The page's progress bar and the sidebar say it, for the learner whose run waits and the one who trains."""
    clock, driven, manager = setup
    first = _submit(manager, "a")
    work = driven.wait_for(1)
    driven.evaluate(work, 0, 2.0)
    driven.steps(work, 20, 0.5, eval_s=2.0)
    second = _submit(manager, "b")
    at = apptest("pages/training.py", state={"training_run": second})
    at.run()
    assert not at.exception
    bars = [p.proto.text for p in at.get("progress")]
    assert any("Next in line for the training slot" in t and "up to 300 s" in t for t in bars), bars
    assert any("1 in line" in p.proto.text for p in at.sidebar.get("progress"))
    at = apptest("pages/training.py", state={"training_run": first})
    at.run()
    assert any("about 45 s left" in p.proto.text for p in at.get("progress"))
    assert any("update every 2 seconds" in m.value for m in at.markdown)  # item 7: the page redraws every 2 s
