"""Training jobs for the UI: the cap holds under parallel starts, abandoned runs are stopped and
freed, snapshots are copies, and a real run reports its curves."""

import gc
import threading
import time
import weakref

import pytest
import torch
from torch import nn

from mlm_core import jobs
from mlm_core.errors import InputError
from mlm_core.masking import MaskingConfig
from mlm_core.training import TrainConfig, TrainEvent, TrainResult

CFG = TrainConfig(steps=1000)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class FakeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4))


def fake_train(model, tokenizer, texts, variants, *, on_event, stop):
    """Stands in for train_variants: one "step" every 10 ms until stopped, on a copy of the model."""
    copies = {name: FakeModel() for name in variants}
    fake_train.copies.extend(weakref.ref(m) for m in copies.values())
    step = 0
    while not stop.is_set() and step < 1000:
        step += 1
        for name in variants:
            on_event(TrainEvent("step", name, step, 1000, {"step": step, "loss": 1.0 / step}))
        time.sleep(0.01)
    return {name: TrainResult(name=name, config=cfg, steps_done=step, stopped=stop.is_set(), model=copies[name])
            for name, cfg in variants.items()}


fake_train.copies = []


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_cap_holds_under_parallel_starts():
    manager = jobs.RunManager(max_runs=2, abandon_s=60, max_queue=1, watchdog=False, train_fn=fake_train)
    barrier = threading.Barrier(10)
    runs, busy, errors = [], [], []
    lock = threading.Lock()

    def start():
        barrier.wait()
        try:
            run = manager.submit(FakeModel(), None, ["text"], {"full": CFG})
            with lock:
                runs.append(run)
        except jobs.BusyError as exc:
            with lock:
                busy.append(str(exc))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert len(runs) == 3 and len(busy) == 7
        assert "busy" in busy[0] and "Try again" in busy[0]
        assert sorted(r.status for r in runs) == ["queued", "running", "running"]
        assert manager.counts() == {"running": 2, "queued": 1, "max_runs": 2}
        queued = next(r for r in runs if r.status == "queued")
        assert "Queued" in queued.snapshot().message and queued.snapshot().queue_position == 1
        first = next(r for r in runs if r.status == "running")
        first.stop()
        assert first.wait(10) and first.status == "stopped"
        assert wait_for(lambda: queued.status == "running")  # the freed slot goes to the queue
        assert manager.counts()["running"] == 2
    finally:
        manager.shutdown()
    assert all(r.status == "stopped" for r in runs)


def test_abandoned_run_is_stopped_and_its_model_freed():
    fake_train.copies.clear()
    now = [0.0]  # a clock the test moves, so a busy machine cannot make the watched run look abandoned
    manager = jobs.RunManager(max_runs=2, abandon_s=30, watch_interval_s=0.05, train_fn=fake_train,
                              clock=lambda: now[0])
    try:
        abandoned = manager.submit(FakeModel(), None, ["text"], {"full": CFG})
        watched = manager.submit(FakeModel(), None, ["text"], {"full": CFG})
        assert wait_for(lambda: abandoned.snapshot().step > 0 and watched.snapshot().step > 0)
        watched.last_polled = 100.0  # its page polled at t = 100 s ...
        now[0] = 100.0  # ... and the other page has been silent for 100 s
        assert abandoned.wait(10)  # the watchdog thread stopped it
        assert abandoned.status == "stopped"
        assert "stopped checking" in abandoned.snapshot().message
        assert abandoned.model_freed
        gc.collect()
        assert fake_train.copies[0]() is None  # nothing keeps the trained copy alive
        assert watched.status == "running"
        now[0] = 120.0
        watched.snapshot()
        assert watched.last_polled == 120.0
    finally:
        manager.shutdown()


def test_queued_run_is_dropped_when_abandoned():
    manager = jobs.RunManager(max_runs=1, abandon_s=0.2, max_queue=2, watchdog=False, train_fn=fake_train)
    try:
        running = manager.submit(FakeModel(), None, ["t"], {"a": CFG})
        queued = manager.submit(FakeModel(), None, ["t"], {"a": CFG})
        running.snapshot()
        stale = manager.reap(now=time.monotonic() + 1.0)
        assert set(stale) == {running, queued}
        assert queued.status == "stopped" and queued.model_freed
        assert manager.counts()["queued"] == 0
    finally:
        manager.shutdown()


def test_snapshot_is_a_copy_with_progress():
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=fake_train)
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": CFG, "b": CFG})
        assert wait_for(lambda: run.snapshot().step >= 3)
        snap = run.snapshot()
        assert set(snap.variants) == {"a", "b"}
        n = len(snap.variants["a"].steps)
        snap.variants["a"].steps.clear()
        assert len(run.snapshot().variants["a"].steps) >= n
        assert 0 < snap.progress < 1 and snap.eta_s is not None and snap.status == "running"
        rows = snap.curves_rows()
        assert rows and {"variant", "kind", "step", "loss"} <= set(rows[0])
    finally:
        manager.shutdown()


def test_bad_variants_are_refused_before_a_thread_starts():
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=fake_train)
    with pytest.raises(InputError):
        manager.submit(FakeModel(), None, ["t"], {"a": CFG, "b": TrainConfig(steps=5)})
    assert manager.counts()["running"] == 0


def test_errors_are_reported_in_the_snapshot():
    def broken(*args, on_event, stop, **kwargs):
        raise InputError("The corpus is empty: give at least one sentence of text.")

    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=broken)
    run = manager.submit(FakeModel(), None, [""], {"a": CFG})
    assert run.wait(10)
    snap = run.snapshot()
    assert snap.status == "error" and "corpus is empty" in snap.error
    assert manager.counts()["running"] == 0  # the slot is free again


def test_a_real_run_reports_curves_and_finishes():
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    words = "the cat sat on mat a dog ran in park .".split()
    tok = BertTokenizer(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])})
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=64,
                                           max_position_embeddings=32)).eval()
    cfg = TrainConfig(steps=4, batch_size=2, seq_len=16, eval_every=2, learning_rate=1e-3,
                      masking=MaskingConfig(mlm_probability=0.3))
    manager = jobs.RunManager(max_runs=1, watchdog=False)
    run = manager.submit(model, tok, ["The cat sat on the mat.", "A dog ran in the park."] * 4,
                         {"full": cfg, "sampled": TrainConfig(**{**cfg.to_dict(), "masking": cfg.masking,
                                                                 "loss": "sampled", "num_sampled": 4})})
    assert run.wait(120)
    snap = run.snapshot()
    assert snap.status == "done", snap.error
    assert snap.step == 4 and snap.progress == 1.0
    for curves in snap.variants.values():
        assert [r["step"] for r in curves.steps] == [1, 2, 3, 4]
        assert [r["step"] for r in curves.evals] == [0, 2, 4]
        assert curves.summary["steps"] == 4
    assert run.model_freed


def test_environment_sets_the_defaults(monkeypatch):
    monkeypatch.setenv("MLMLAB_MAX_RUNS", "3")
    monkeypatch.setenv("MLMLAB_ABANDON_S", "12.5")
    assert jobs.default_max_runs() == 3 and jobs.default_abandon_s() == 12.5
    monkeypatch.setenv("MLMLAB_MAX_RUNS", "lots")
    monkeypatch.setenv("MLMLAB_ABANDON_S", "-4")
    assert jobs.default_max_runs() == (2 if torch.cuda.is_available() else 1)
    assert jobs.default_abandon_s() == jobs.DEFAULT_ABANDON_S
    assert jobs.get_manager() is jobs.get_manager()
