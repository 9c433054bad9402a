"""The precision choice: bf16 autocast where a once-per-process micro-benchmark says bf16 matmuls are
clearly faster, fp32 otherwise; and a bf16 run's losses follow the fp32 run's closely."""

import dataclasses

import pytest
import torch

from mlm_core import precision
from mlm_core.precision import AMP_ENV, BF16_MIN_SPEEDUP, auto_amp, matmul_rates, resolve_amp
from mlm_core.training import TrainConfig, TrainStep, train


@pytest.fixture
def measured(monkeypatch):
    """The real choice (the suite pins fp32 through MLMLAB_AMP), with a fresh cache."""
    monkeypatch.delenv(AMP_ENV, raising=False)
    monkeypatch.setattr(precision, "measured_choices", {})
    return monkeypatch


def fake_rates(speedup, calls):
    def rates(*args, **kwargs):
        calls.append(1)
        return {"fp32_gflops": 100.0, "bf16_gflops": 100.0 * speedup, "speedup": speedup}
    return rates


def test_the_default_precision_is_auto():
    assert TrainConfig().amp == "auto"
    assert TrainConfig(amp="off").amp == "off"


@pytest.mark.parametrize("speedup, amp", [(2.1, "bf16"), (BF16_MIN_SPEEDUP, "bf16"), (1.1, "off"), (0.4, "off")])
def test_auto_picks_bf16_only_where_it_is_clearly_faster(measured, speedup, amp):
    calls = []
    measured.setattr(precision, "matmul_rates", fake_rates(speedup, calls))
    choice = auto_amp("cpu")
    assert choice.amp == amp and resolve_amp("auto", "cpu") == amp
    assert f"{speedup:.1f}×" in choice.reason and ("bf16 autocast" if amp == "bf16" else "fp32") in choice.reason
    assert resolve_amp("off", "cpu") == "off" and resolve_amp("bf16", "cpu") == "bf16"  # explicit modes stay


def test_the_micro_benchmark_runs_once_per_process_and_thread_count(measured):
    calls = []
    measured.setattr(precision, "matmul_rates", fake_rates(2.0, calls))
    threads = torch.get_num_threads()
    try:
        first = auto_amp("cpu")
        assert auto_amp("cpu") is first and resolve_amp("auto") == "bf16" and len(calls) == 1
        torch.set_num_threads(1 if threads != 1 else 2)
        auto_amp("cpu")
        assert len(calls) == 2  # another thread count is another machine, as far as speed goes
    finally:
        torch.set_num_threads(threads)


def test_the_environment_overrides_the_measurement(measured):
    calls = []
    measured.setattr(precision, "matmul_rates", fake_rates(2.0, calls))
    measured.setenv(AMP_ENV, "off")
    choice = auto_amp("cpu")
    assert choice.amp == "off" and AMP_ENV in choice.reason and not calls


def test_the_real_micro_benchmark_is_sane(measured):
    # How long it takes is the benchmarks' business (a timed assertion fails on a loaded machine).
    rates = matmul_rates()
    assert rates["fp32_gflops"] > 0 and rates["bf16_gflops"] > 0 and rates["speedup"] > 0
    choice = auto_amp("cpu")
    assert choice.amp in ("bf16", "off") and choice.seconds > 0
    assert (choice.amp == "bf16") == (choice.speedup >= BF16_MIN_SPEEDUP)


# ------------------------------------------------------------------ bf16 against fp32, and "auto" wired through
CORPUS = ["The cat sat on the mat by the door.", "A dog ran in the park after the ball.",
          "We ate bread and cheese at noon.", "The river runs past the old mill in the valley.",
          "She reads a book by the window every evening."] * 8
BF16_TOLERANCE = 5e-3  # relative, per step: bf16 keeps 8 significant bits (0.4%), but the matmuls
# accumulate in fp32 and weights, AdamW state and the loss stay fp32; measured on the bundled model
# over 8 steps: at most 0.23% (tiny model: 0.005%)


def short_run(model, tok, amp):
    cfg = TrainConfig(steps=5, batch_size=4, seq_len=24, learning_rate=1e-3, warmup_steps=0, eval_every=5,
                      amp=amp, dropout=False, seed=3, probe_sentences=("the [MASK] sat on the mat.",))
    return train(model, tok, CORPUS, cfg)


def losses(result):
    return [r["loss"] for r in result.steps] + [r["loss"] for r in result.evals]


def test_a_short_bf16_run_follows_the_fp32_run(tiny):
    model, tok = tiny
    fp32, bf16 = losses(short_run(model, tok, "off")), losses(short_run(model, tok, "bf16"))
    assert fp32 != bf16  # bf16 really ran: not one loss is bit-identical to fp32's ...
    assert bf16 == pytest.approx(fp32, rel=BF16_TOLERANCE)  # ... yet every one is within 0.5%


@pytest.mark.parametrize("speedup", [2.0, 1.0])
def test_auto_trains_in_the_precision_it_reports(tiny, measured, speedup):
    model, tok = tiny
    measured.setattr(precision, "matmul_rates", fake_rates(speedup, []))
    expected = "bf16" if speedup >= BF16_MIN_SPEEDUP else "off"
    assert losses(short_run(model, tok, "auto")) == losses(short_run(model, tok, expected))


# ------------------------------------------------------------------ frozen word embeddings
def test_freezing_word_embeddings_keeps_them_and_the_tied_decoder_fixed(tiny):
    import copy

    model, tok = tiny
    work = copy.deepcopy(model)
    step = TrainStep(work, TrainConfig(amp="off", learning_rate=1e-2, freeze_word_embeddings=True, dropout=False))
    emb = work.get_input_embeddings().weight
    assert work.get_output_embeddings().weight is emb  # tied: one matrix
    before, others = emb.detach().clone(), {n: p.detach().clone() for n, p in work.named_parameters()}
    ids = tok(["the cat sat on the mat ."] * 2, return_tensors="pt")["input_ids"]
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    step(ids, torch.ones_like(ids), labels)
    assert torch.equal(emb, before) and emb.grad is None and not emb.requires_grad
    changed = [n for n, p in work.named_parameters() if not torch.equal(p, others[n])]
    assert "cls.predictions.bias" in changed and any("encoder.layer.0" in n for n in changed)
    step.configure(freeze=False)  # and back: the same optimizer now updates it
    step(ids, torch.ones_like(ids), labels)
    assert not torch.equal(emb, before)
    assert dataclasses.replace(step.cfg).freeze_word_embeddings is False


def test_a_run_with_frozen_word_embeddings_never_changes_them(tiny):
    model, tok = tiny
    cfg = TrainConfig(steps=3, batch_size=4, seq_len=24, learning_rate=1e-2, warmup_steps=0, eval_every=3,
                      amp="off", freeze_word_embeddings=True, probe_sentences=("the [MASK] sat.",))
    result = train(model, tok, CORPUS, cfg)
    trained = result.model
    assert torch.equal(trained.get_input_embeddings().weight, model.get_input_embeddings().weight)
    assert not torch.equal(trained.cls.predictions.bias, model.cls.predictions.bias)  # the bias still trains
    assert model.get_input_embeddings().weight.requires_grad  # the base model is not touched
