"""The Loss page's view-model (``mlm_core.lessons.loss_lab``): one encoder pass per batch, tables from numbers,
the three losses and their sentences, the sampled-softmax target."""

import pytest
import torch
import torch.nn.functional as F

from mlm_core import loss_registry
from mlm_core.bundled import workshop_sentences
from mlm_core.formatting import row_decimals, significant
from mlm_core.lessons.loss_lab import (
    LossSettings,
    batch_losses,
    loss_batch,
    loss_sentences,
    per_token_rows,
    per_token_table,
    sampled_softmax_check,
)
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig
from mlm_core.models import load_masked_lm
from mlm_core.sampled_softmax import SAMPLED_SOFTMAX, SampledSoftmaxConfig

TEXTS = ["The cat sat on the warm mat by the kitchen door.", "Every morning I drink a cup of coffee."] * 3


def test_loss_batch_runs_the_encoder_once(tiny):
    model, tokenizer = tiny
    calls = []
    handle = model.base_model.register_forward_hook(lambda *args: calls.append(1))
    try:
        batch = loss_batch(model, tokenizer, TEXTS, MaskingConfig(), seed=0)
    finally:
        handle.remove()
    assert len(calls) == 1
    assert batch.logits.shape == (len(batch.targets), batch.weight.shape[0])
    assert torch.allclose(batch.logits, batch.hidden @ batch.weight.T + batch.bias)


def test_per_token_table_is_built_from_positions_not_parsed_labels(tiny):
    model, tokenizer = tiny
    batch = loss_batch(model, tokenizer, TEXTS, MaskingConfig(mlm_probability=0.3), seed=1)
    selected = batch.labels != IGNORE_INDEX
    expected = [tuple(p) for p in selected.nonzero().tolist()]  # row-major, the order of the head's rows
    assert batch.positions == expected and len(expected) == len(batch.targets) > 0
    assert batch.target_tokens == tokenizer.convert_ids_to_tokens(batch.targets.tolist())
    assert batch.decisions == [Decision(int(batch.result.decisions[r, p])).name for r, p in expected]
    assert batch.tokens == [f"{r}:{p} {t}" for (r, p), t in zip(expected, batch.target_tokens)]

    outputs = batch_losses(batch)
    table = per_token_table(outputs, batch)
    assert [row["position"] for row in table] == [f"{r}:{p}" for r, p in expected]
    assert [row["token"] for row in table] == batch.target_tokens
    assert [row["decision"] for row in table] == batch.decisions
    for variant, out in outputs.items():
        assert [row[variant] for row in table] == [significant(v) for v in out.per_token.tolist()]
    rows = per_token_rows(outputs, batch.tokens)
    assert len(rows) == len(outputs) * len(batch.targets) and rows[0]["token"] == batch.tokens[0]


def test_a_batch_without_a_model_still_names_its_rows(tokenizer):
    batch = loss_batch(None, tokenizer, TEXTS, MaskingConfig(), seed=2)
    assert batch.logits is None and len(batch.positions) == len(batch.target_tokens) == len(batch.decisions) > 0
    assert batch.target_tokens == tokenizer.convert_ids_to_tokens(batch.labels[batch.labels != IGNORE_INDEX].tolist())


def test_batch_losses_and_sentences():
    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    texts = ["The cat sat on the warm mat by the kitchen door.", "Every morning I drink a cup of coffee."] * 4
    batch = loss_batch(model, tokenizer, texts, seed=0)
    assert torch.allclose(batch.logits, batch.logits_for(batch.labels)[0], atol=1e-4)  # one head, two ways
    assert torch.equal(batch.original_ids, batch.encoded.input_ids) and torch.equal(batch.labels, batch.result.labels)
    outputs = batch_losses(batch)
    again = batch_losses(batch)
    assert {k: float(v.loss) for k, v in outputs.items()} == {k: float(v.loss) for k, v in again.items()}
    assert torch.allclose(outputs["full"].loss, F.cross_entropy(batch.logits, batch.targets))
    d = outputs["weighted"].diagnostics
    assert abs(d["mean_of_weighted"] - float((d["target_weights"] * d["unweighted_per_token"]).mean())) < 1e-6
    s = outputs["sampled"].diagnostics
    assert s["correction"] == "importance" and s["K"] == SAMPLED_SOFTMAX.num_sampled and not s["replacement"]
    assert -1 <= s["grad_cosine"] <= 1
    sentences = loss_sentences(outputs)
    assert set(sentences) == set(loss_registry.names()) >= {"full", "weighted", "sampled"}
    row = row_decimals([float(o.loss) for o in outputs.values()])  # the page's row of numbers: one precision
    assert f"**Sampled {float(outputs['sampled'].loss):.{row}f}**" in sentences["sampled"] and "estimate of the full loss" in sentences["sampled"]
    tf = batch_losses(batch, LossSettings(sampled=SampledSoftmaxConfig(correction="tensorflow")))
    assert "not an estimate of the full loss" in loss_sentences(tf)["sampled"]
    # Issue 25 §3.4: the two weighted conventions are a ratio apart, the batch's mean weight: "a factor of"
    mean_w = float(d["target_weights"].mean())
    assert d["mean_of_weighted"] / float(outputs["weighted"].loss) == pytest.approx(mean_w, rel=1e-5)
    assert "differ by a factor of this batch's mean weight" in sentences["weighted"]
    # Issue 25 §3.8: drawn without replacement, the divisor is an inclusion probability, 1 − exp(−q·τ), not a count
    assert "inclusion probability given the other draws, 1 − exp(−q·τ)" in sentences["sampled"]
    assert "expected count" not in sentences["sampled"]
    with_replacement = loss_sentences(batch_losses(batch, LossSettings(sampled=SampledSoftmaxConfig(replacement=True))))
    assert "expected count among the K draws, K·q" in with_replacement["sampled"]


def test_sampled_softmax_check_on_a_tiny_model():
    """The benchmark's target helper: the default is closer to the full loss than TensorFlow's defaults."""
    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    sentences = workshop_sentences()[:400]
    after = sampled_softmax_check(model, tokenizer, sentences, num_sentences=16, draws=2)
    before = sampled_softmax_check(model, tokenizer, sentences, num_sentences=16, draws=2,
                                   config=SampledSoftmaxConfig(sampler="log_uniform", replacement=True,
                                                               correction="tensorflow"))
    assert after["M"] == before["M"] > 0 and after["full_loss"] == before["full_loss"]
    assert abs(after["rel_error"]) < 0.10 and after["meets_target"] in (True, False)
    assert abs(after["rel_error"]) < abs(before["rel_error"])
