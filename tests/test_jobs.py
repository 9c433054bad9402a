"""Training jobs for the UI: the cap holds under parallel starts, a run lives as long as its session
and no longer, the classroom limits (one run per client, tokens per step, time per run, threads)
hold, only the teacher key reaches other sessions' runs, snapshots are copies, and a real run
reports its curves."""

import gc
import threading
import time
import weakref

import pytest
import torch
from torch import nn

from mlm_core import jobs, teacher_key
from mlm_core.errors import InputError
from mlm_core.masking import MaskingConfig
from mlm_core.training import TrainConfig, TrainEvent, TrainResult

CFG = TrainConfig(steps=1000)


pytestmark = pytest.mark.usefixtures("one_thread")


class FakeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4))


def fake_train(model, tokenizer, texts, variants, *, on_event, stop, eval_texts=None):
    """Stands in for train_variants: one "step" every 10 ms until stopped, on a copy of the model."""
    fake_train.threads.append(torch.get_num_threads())
    fake_train.eval_texts.append(eval_texts)
    copies = {name: FakeModel() for name in variants}
    # keyed by the run's thread: two runs train at once, so the order of their copies is a race
    fake_train.copies.setdefault(threading.current_thread().name, []).extend(
        weakref.ref(m) for m in copies.values())
    step = 0
    while not stop.is_set() and step < 1000:
        step += 1
        for name in variants:
            on_event(TrainEvent("step", name, step, 1000, {"step": step, "loss": 1.0 / step}))
        time.sleep(0.01)
    return {name: TrainResult(name=name, config=cfg, steps_done=step, stopped=stop.is_set(), model=copies[name])
            for name, cfg in variants.items()}


fake_train.copies = {}
fake_train.threads = []
fake_train.eval_texts = []


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
        assert "gone" in abandoned.snapshot().message
        assert abandoned.model_freed
        gc.collect()
        abandoned_copies = fake_train.copies[f"mlmlab-run-{abandoned.run_id}"]
        assert abandoned_copies and all(ref() is None for ref in abandoned_copies)  # nothing keeps them alive
        watched_copies = fake_train.copies[f"mlmlab-run-{watched.run_id}"]
        assert all(ref() is not None for ref in watched_copies)  # the watched run still trains its own
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
        assert curves.final["steps"] == 4
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


# ------------------------------------------------------------------ a run lives with its session


def test_a_run_lives_while_its_session_is_alive_on_any_page():
    """Issue 16 item 4: a session on another page polls nothing, but it is alive, so its run goes on;
    once the session is gone for abandon_s, the run is stopped and freed."""
    now = [0.0]
    session = {"alive": True}
    manager = jobs.RunManager(max_runs=1, abandon_s=60, watchdog=False, train_fn=fake_train,
                              clock=lambda: now[0], max_run_s=3600)
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, alive=lambda: session["alive"])
        assert wait_for(lambda: run.snapshot().step > 0)
        for t in range(0, 600, 5):  # ten minutes on the Predictions page: nobody asks for a snapshot
            now[0] = float(t)
            assert manager.reap() == []
        assert run.status == "running"
        session["alive"] = False  # the tab is closed
        now[0] = 640.0
        assert manager.reap() == []  # a reload reconnects within abandon_s
        now[0] = 661.0
        assert manager.reap() == [run]
        assert run.wait(10) and run.status == "stopped" and "gone" in run.snapshot().message
        assert run.model_freed and run.alive is None
    finally:
        manager.shutdown()


def test_a_broken_session_check_does_not_keep_a_run_forever():
    now = [0.0]

    def broken():
        raise RuntimeError("no runtime")

    manager = jobs.RunManager(max_runs=1, abandon_s=10, watchdog=False, train_fn=fake_train, clock=lambda: now[0])
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, alive=broken)
        now[0] = 11.0
        assert manager.reap() == [run]
    finally:
        manager.shutdown()


# ------------------------------------------------------------------ classroom limits


def test_one_queued_or_running_run_per_client():
    """Issue 16 item 7: five tabs of one student hold one run, not the slot and the whole queue."""
    manager = jobs.RunManager(max_runs=1, max_queue=4, watchdog=False, train_fn=fake_train)
    try:
        first = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, client="ip:10.0.0.7")
        for _ in range(4):
            with pytest.raises(jobs.BusyError, match="already have a training run"):
                manager.submit(FakeModel(), None, ["t"], {"a": CFG}, client="ip:10.0.0.7")
        other = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, client="ip:10.0.0.8")
        assert other.status == "queued" and manager.counts()["queued"] == 1
        first.stop()
        assert first.wait(10)
        again = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, client="ip:10.0.0.7")  # its turn again
        assert again.status == "queued"
    finally:
        manager.shutdown()


@pytest.mark.parametrize("batch, seq_len, checkpointing, ok", [
    (8, 64, False, True), (16, 256, False, True), (32, 256, False, False), (32, 256, True, True),
    (64, 256, True, True), (64, 512, True, False)])
def test_tokens_per_step_budget_offers_checkpointing(batch, seq_len, checkpointing, ok):
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=fake_train, max_step_tokens=4096)
    cfg = TrainConfig(steps=5, batch_size=batch, seq_len=seq_len, gradient_checkpointing=checkpointing)
    try:
        if ok:
            manager.submit(FakeModel(), None, ["t"], {"a": cfg}).stop()
        else:
            with pytest.raises(InputError, match="tokens per step") as info:
                manager.submit(FakeModel(), None, ["t"], {"a": cfg})
            assert ("checkpointing" in str(info.value)) and manager.counts()["running"] == 0
    finally:
        manager.shutdown()


def test_a_run_stops_at_the_wall_time_cap_and_keeps_its_curves():
    manager = jobs.RunManager(max_runs=1, watch_interval_s=0.05, train_fn=fake_train, max_run_s=0.5)
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": CFG})
        assert run.wait(20)
        snap = run.snapshot()
        assert snap.status == "stopped" and "time limit" in snap.message
        assert 0 < snap.step < 1000 and len(snap.variants["a"].steps) == snap.step
    finally:
        manager.shutdown()


def test_runs_use_the_capped_thread_count_and_get_their_held_out_text():
    """The run's thread sets the server's cap itself (2 here, while this thread has 1: with 1 and 1 the
    test could not tell a run that sets it from one that inherits it)."""
    fake_train.threads.clear(), fake_train.eval_texts.clear()
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=fake_train, threads=2)
    before = torch.get_num_threads()
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, eval_texts=["held out."])
        assert wait_for(lambda: fake_train.threads)
        run.stop()
        assert fake_train.threads == [2] and fake_train.eval_texts == [["held out."]]
    finally:
        manager.shutdown()
    assert jobs.cap_threads(before) == before == torch.get_num_threads()


def test_environment_sets_the_limits(monkeypatch):
    monkeypatch.setenv("MLMLAB_MAX_STEP_TOKENS", "2048")
    monkeypatch.setenv("MLMLAB_MAX_RUN_S", "90")
    monkeypatch.setenv("MLMLAB_TORCH_THREADS", "3")
    assert (jobs.default_max_step_tokens(), jobs.default_max_run_s(), jobs.default_threads()) == (2048, 90.0, 3)
    monkeypatch.delenv("MLMLAB_TORCH_THREADS")
    assert 1 <= jobs.default_threads() <= max(1, (jobs.available_cores() + 1) // 2)


# ------------------------------------------------------------------ the teacher's view


def test_only_the_teacher_key_sees_and_stops_other_sessions_runs(monkeypatch):
    monkeypatch.delenv(teacher_key.TEACHER_KEY_ENV, raising=False)
    now = [0.0]
    manager = jobs.RunManager(max_runs=2, watchdog=False, train_fn=fake_train, clock=lambda: now[0])
    try:
        a = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, label="student A", client="ip:10.0.0.1")
        b = manager.submit(FakeModel(), None, ["t"], {"a": CFG}, label="student B", client="ip:10.0.0.2")
        with pytest.raises(InputError, match="No teacher key"):
            manager.teacher_runs("")
        monkeypatch.setenv(teacher_key.TEACHER_KEY_ENV, "s3cret-key")
        for wrong in (None, "", "s3cret", "S3CRET-KEY"):
            with pytest.raises(InputError, match="Wrong teacher key"):
                manager.teacher_runs(wrong)
            with pytest.raises(InputError, match="Wrong teacher key"):
                manager.teacher_stop(wrong, a.run_id)
        assert a.status == "running"
        now[0] = 50.0
        seen = manager.teacher_runs("s3cret-key")
        assert {s.label for s in seen} == {"student A", "student B"}
        assert a.last_polled == 0.0  # the teacher looking does not keep a run alive
        assert manager.teacher_stop("s3cret-key", a.run_id) is True
        assert a.wait(10) and a.status == "stopped" and "teacher" in a.snapshot().message
        assert b.status == "running"
        assert manager.teacher_stop("s3cret-key", "nosuchid") is False
    finally:
        manager.shutdown()


def test_teacher_key_guesses_are_slowed_per_client_and_logged(monkeypatch, caplog):
    """Issue 29 item 4: 41 guesses in 50 s from one tab, with no delay, lockout or log. Now: three free, then a
    wait that doubles; while waiting, even the right key is refused unread; every tab of one address shares the
    count; another client is not held up; a right key clears the count; every wrong key is logged and listed."""
    monkeypatch.setenv(teacher_key.TEACHER_KEY_ENV, "s3cret-key")
    now = [0.0]
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=fake_train, clock=lambda: now[0])
    student, other = "ip:10.0.0.5", "ip:10.0.0.6"
    with caplog.at_level("WARNING", logger="mlm_core.teacher_key"):
        for guess in ("a", "b", "c"):
            with pytest.raises(InputError, match="^Wrong teacher key.$"):
                manager.teacher_runs(guess, client=student)
        with pytest.raises(InputError, match="Wait 1 s"):
            manager.teacher_runs("d", client=student)  # the fourth: 1 s, then 2, 4, ...
        with pytest.raises(InputError, match="Too many wrong teacher keys"):
            manager.teacher_runs("s3cret-key", client=student)  # even the right key waits: nothing is learnt
        with pytest.raises(InputError, match="Too many wrong teacher keys"):
            manager.teacher_stop("s3cret-key", "x", client=student)
        assert manager.teacher_runs("s3cret-key", client=other) == []  # another machine is not held up
        now[0] = 1.5
        with pytest.raises(InputError, match="Wait 2 s"):
            manager.teacher_runs("e", client=student)
        now[0] = 4.0
        with pytest.raises(InputError, match="^Wrong teacher key.$"):
            manager.teacher_runs("e", client=student)  # the same wrong key again (a redraw): not a new guess
        assert manager.key_guard.wait_s(student) == 0
        guesses = 5
        for i in range(40):  # the attack: as fast as the answers come, for an hour at most
            now[0] += max(manager.key_guard.wait_s(student), 0.1)
            if now[0] > 3600:
                break
            with pytest.raises(InputError):
                manager.teacher_runs(f"guess {i}", client=student)
            guesses += 1
        assert guesses < 20, guesses  # was: about 3,000 in an hour at 41 per 50 s
    wrong = [r for r in caplog.records if "Wrong teacher key from ip:10.0.0.5" in r.getMessage()]
    assert len(wrong) == guesses
    listed = manager.key_guard.failures()
    assert [(f.client, f.total) for f in listed] == [(student, guesses)]
    now[0] += manager.key_guard.wait_s(student)
    manager.teacher_runs("s3cret-key", client=student)
    assert manager.key_guard.wait_s(student) == 0 and manager.key_guard.failures()[0].count == 0


def test_teacher_key_comparison_is_constant_time(monkeypatch):
    """Issue 29 item 4: the key is compared with hmac.compare_digest on hashes of both sides (so the length does
    not show either), never with ==."""
    monkeypatch.setenv(teacher_key.TEACHER_KEY_ENV, "s3cret-key")
    calls = []
    real = teacher_key.hmac.compare_digest
    monkeypatch.setattr(teacher_key.hmac, "compare_digest", lambda a, b: calls.append((len(a), len(b))) or real(a, b))
    assert teacher_key.teacher_key_ok("s3cret-key") and not teacher_key.teacher_key_ok("s")
    assert calls == [(32, 32), (32, 32)]



def test_the_time_cap_holds_inside_a_step_that_takes_minutes():
    """Issue 42: a real run whose every linear layer sleeps 0.5 s (one step: 7 s forward) is stopped by the 1-s time cap
    within a few seconds, in its first step; the progress bar says the step is slow before that (before, the run
    only looked between steps: the masking-rate race at batch 64 x 256 was still on step 0 at 417 s)."""
    from transformers import BertConfig, BertForMaskedLM

    from mlm_core.bundled import load_default_tokenizer

    tok = load_default_tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=64,
                                           max_position_embeddings=32)).eval()
    for layer in model.modules():
        if isinstance(layer, nn.Linear):  # deep copies keep the hook: every variant's step is slow
            layer.register_forward_pre_hook(lambda m, a: time.sleep(0.5) if torch.is_grad_enabled() else None)
    cfg = TrainConfig(steps=5, batch_size=2, seq_len=16, eval_every=100, learning_rate=1e-3)
    manager = jobs.RunManager(max_runs=1, watch_interval_s=0.05, max_run_s=1.0)
    try:
        started = time.monotonic()
        run = manager.submit(model, tok, ["The cat sat on the mat.", "A dog ran in the park."] * 4, {"a": cfg})
        assert run.wait(60)
        took = time.monotonic() - started
        snap = run.snapshot()
        assert snap.status == "stopped" and "time limit" in snap.message and snap.step == 0, snap
        assert took < 4.0, took  # one step's forward alone takes 7 s: 14 linear layers x 0.5 s
    finally:
        manager.shutdown()


def test_a_slow_step_is_named_on_the_progress_bar():
    clock = [0.0]
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=lambda *a, stop, **k: stop.wait(30) or {},
                              clock=lambda: clock[0])
    try:
        run = manager.submit(FakeModel(), None, ["t"], {"a": TrainConfig(steps=5, batch_size=64, seq_len=256,
                                                                        gradient_checkpointing=True)})
        assert "Nothing has finished" not in run.snapshot().progress_text()
        clock[0] = 45.0
        text = run.snapshot().progress_text()
        assert "Nothing has finished for 45 s" in text and "batch 64 × 256" in text and "Stop" in text, text
    finally:
        manager.shutdown()
