"""Trained models kept in a session: a finished run hands its copies over once, the store stays
within its count and memory bounds, and nothing here touches the base model."""

from __future__ import annotations

import gc
import time
import weakref

import torch
from torch import nn

from mlm_core import jobs
from mlm_core.models import INFO_ATTR
from mlm_core.server_budget import ServerBudget
from mlm_core.session_models import TrainedModels, model_bytes, same_vocabulary, trained_models_budget
from mlm_core.training import TrainConfig, TrainResult

CFG = TrainConfig(steps=3)


class Weights(nn.Module):
    def __init__(self, n: int = 256):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n))


def quick_train(model, tokenizer, texts, variants, *, on_event, stop):
    """Stands in for train_variants: a fresh copy per variant, no steps."""
    quick_train.copies = {name: Weights() for name in variants}
    return {name: TrainResult(name=name, config=cfg, steps_done=cfg.steps, model=quick_train.copies[name])
            for name, cfg in variants.items()}


def _finished_run(keep: bool, variants=("full", "sampled")):
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=quick_train)
    base = Weights()
    run = manager.submit(base, "tokenizer", ["text"], {v: CFG for v in variants}, keep_trained=keep)
    assert run.wait(30) and run.status == "done"
    return run, base


def test_a_kept_run_hands_its_copies_over_once():
    run, base = _finished_run(keep=True)
    assert not run.model_freed  # kept until taken
    models, tokenizer, base_model = run.take_trained()
    assert set(models) == {"full", "sampled"} and tokenizer == "tokenizer" and base_model is base
    assert run.model_freed
    assert run.take_trained() is None  # only once


def test_a_run_without_keep_frees_its_copies_as_before():
    run, _ = _finished_run(keep=False)
    copy = weakref.ref(quick_train.copies["full"])
    quick_train.copies = {}
    assert run.model_freed and run.take_trained() is None
    gc.collect()
    assert copy() is None


def test_nothing_is_taken_while_the_run_is_going():
    def slow_train(model, tokenizer, texts, variants, *, on_event, stop):
        while not stop.is_set():
            time.sleep(0.01)
        return {name: TrainResult(name=name, config=cfg, stopped=True, model=Weights()) for name, cfg in variants.items()}

    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=slow_train)
    run = manager.submit(Weights(), None, ["text"], {"full": CFG}, keep_trained=True)
    try:
        assert run.take_trained() is None
    finally:
        run.stop()
        assert run.wait(30)
    assert run.take_trained() is not None  # a stopped run's partly trained copy is kept too


def test_store_takes_a_run_and_labels_its_models():
    run, base = _finished_run(keep=True)
    setattr(base, INFO_ATTR, {"label": "Tiny base"})
    store = TrainedModels(max_models=3, max_bytes=10**9)
    assert store.add_run(run) == []
    keys = [e.key for e in store.entries()]
    assert keys == [f"{run.run_id}.0", f"{run.run_id}.1"]
    entry = store.get(keys[0])
    assert "full" in entry.label and "Tiny base" in entry.label and entry.base_model is base
    info = getattr(entry.model, INFO_ATTR)
    assert info["trained"] is True and info["source"] == "session"
    assert not entry.model.training and not any(p.requires_grad for p in entry.model.parameters())
    assert store.add_run(run) == []  # taken already: nothing new
    assert len(store) == 2 and store.get("nope") is None


def test_store_stays_within_its_count_and_memory():
    one = model_bytes(Weights())
    assert one == 256 * 4
    store = TrainedModels(max_models=2, max_bytes=10 * one)
    for i in range(3):
        store.add(f"k{i}", f"model {i}", Weights(), None, None)
    assert [e.key for e in store.entries()] == ["k2", "k1"]  # newest first, the oldest dropped
    small = TrainedModels(max_models=5, max_bytes=int(2.5 * one))
    small.add("a", "a", Weights(), None, None)
    small.add("b", "b", Weights(), None, None)
    notes = small.add("c", "c", Weights(), None, None)
    assert [e.key for e in small.entries()] == ["c", "b"] and notes
    refused = small.add("big", "big", Weights(4096), None, None)
    assert "not kept" in refused[0] and small.get("big") is None
    none = TrainedModels(max_models=0)
    assert none.add("x", "x", Weights(), None, None) and len(none) == 0


def test_store_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("MLMLAB_TRAINED_MODELS", "1")
    monkeypatch.setenv("MLMLAB_TRAINED_MB", "7")
    store = TrainedModels()
    assert store.max_models == 1 and store.max_bytes == 7 * 2**20



def test_the_server_keeps_every_sessions_trained_models_within_one_budget():
    """Issue 29 item 2: 3 models / 512 MB per session and no server-wide cap: four tabs of one student, each
    keeping a 3-variant run, took the server from 616 MB to 2.8 GB (30 students about 15 GB). Now all sessions
    together stay within the server's budget; the machine holding the most loses its least recently used first,
    and that session is told."""
    one = model_bytes(Weights())
    budget = ServerBudget("trained models", max_entries=5, max_bytes=100 * one)
    tabs = [TrainedModels(max_models=3, max_bytes=10**9, budget=budget, client="ip:10.0.0.9") for _ in range(4)]
    quiet = TrainedModels(max_models=3, max_bytes=10**9, budget=budget, client="ip:10.0.0.2")
    quiet.add("q0", "the quiet student's model", Weights(), None, None)
    for t, tab in enumerate(tabs):
        for v in range(3):
            tab.add(f"t{t}.{v}", f"tab {t} variant {v}", Weights(), None, None)
    assert budget.held() == (5, 5 * one)  # was 13 models, and 4 x 3 with one more student
    assert quiet.get("q0") is not None  # the busy machine paid for its own runs
    assert [e.key for e in tabs[3].entries()] == ["t3.2", "t3.1", "t3.0"]
    assert len(tabs[0]) == 0
    notes = tabs[0].take_notes()
    assert len(notes) == 3 and "dropped to make room" in notes[0] and "tab 0 variant 0" in notes[0]
    assert tabs[0].take_notes() == []  # each said once
    assert [e.key for e in tabs[2].entries()] == ["t2.2"]
    tabs[2].get("t2.2")  # looked at: now the most recently used of the busy machine, so t3.0 goes next
    tabs[3].add("t3.3", "tab 3 variant 3", Weights(), None, None)
    assert tabs[2].get("t2.2") is not None and tabs[3].get("t3.0") is None and quiet.get("q0") is not None
    big = quiet.add("huge", "a model bigger than the server keeps", Weights(200 * 256), None, None)
    assert "not kept" in big[0] and "for everyone" in big[0]


def test_the_server_budget_forgets_sessions_that_ended():
    budget = ServerBudget("trained models", max_entries=2, max_bytes=10**9)
    gone = TrainedModels(budget=budget, client="ip:10.0.0.9")
    gone.add("a", "a", Weights(), None, None)
    del gone
    gc.collect()
    assert budget.held() == (0, 0)


def test_server_budget_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("MLMLAB_SERVER_TRAINED_MODELS", "4")
    monkeypatch.setenv("MLMLAB_SERVER_TRAINED_MB", "64")
    budget = trained_models_budget()
    assert budget.max_models == 4 and budget.max_bytes == 64 * 2**20

def test_vocabularies_compare(tokenizer):
    from transformers import BertTokenizer

    other = BertTokenizer(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat"])})
    assert same_vocabulary(tokenizer, tokenizer)
    assert not same_vocabulary(tokenizer, other)


def test_a_kept_model_holds_no_gradients(tokenizer):
    """Issue 42 review: a run's copies kept their last step's gradients, as large as the weights, which the budget
    (parameters and buffers) did not count: a finished run's copies and any model a session keeps hold none."""
    from mlm_core.models import load_masked_lm
    from mlm_core.training import TrainConfig, train

    model, tok = load_masked_lm("tiny-random")
    result = train(model, tok, ["the cat sat on the mat ."] * 8, TrainConfig(steps=2, batch_size=2, seq_len=16,
                                                                              warmup_steps=0, amp="off"))
    assert all(p.grad is None for p in result.model.parameters())
    trained = Weights()
    trained.w.grad = torch.ones_like(trained.w)
    TrainedModels(max_models=1, max_bytes=10**9).add("k", "k", trained, None, None)
    assert trained.w.grad is None
