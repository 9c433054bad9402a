"""mlm_core.head: the gathered head equals the full head then gather, for every family it knows; an unknown
head falls back to full logits and says so; two threads on one shared fallback model get their own rows."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from mlm_core.errors import InputError
from mlm_core.head import (
    GatheredMaskedLM,
    HeadFallbackWarning,
    gathered_head_family,
    head_parts,
    masked_lm_hidden,
    masked_lm_logits,
)
from mlm_core.masking import IGNORE_INDEX
from mlm_core.models import model_description


def _full_then_gather(model, input_ids, attention_mask, labels):
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
    selected = labels != IGNORE_INDEX
    return full[selected], labels[selected]


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta", "albert", "xlm-roberta", "camembert"])
def test_gathered_head_equals_full_logits_then_gather(tiny_mlms, arch):
    model = tiny_mlms.model(arch)
    assert gathered_head_family(model) is not None
    input_ids, attention_mask, labels = tiny_mlms.batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeadFallbackWarning)  # a known head must not fall back
        with torch.no_grad():
            logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    expected, expected_targets = _full_then_gather(model, input_ids, attention_mask, labels)
    assert logits.shape == (int((labels != IGNORE_INDEX).sum()), tiny_mlms.VOCAB)
    assert torch.equal(targets, expected_targets)
    assert expected.std() > 0.1  # the comparison is not between near-constant numbers
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)

    with torch.no_grad():
        hidden, weight, bias, targets_h = masked_lm_hidden(model, input_ids, attention_mask, labels)
    assert hidden.shape[0] == logits.shape[0] and weight.shape == (tiny_mlms.VOCAB, hidden.shape[1]) and bias.shape == (tiny_mlms.VOCAB,)
    assert torch.equal(targets_h, targets)
    torch.testing.assert_close(hidden @ weight.T + bias, logits, atol=1e-5, rtol=1e-5)

    parts = head_parts(model)  # the head's modules hold exactly the head's parameters
    head_params = {id(p) for m in parts.modules for p in m.parameters()}
    assert id(parts.decoder.weight) in head_params
    encoder_params = {id(p) for p in model.base_model.parameters()}
    assert {id(p) for p in model.parameters()} <= head_params | encoder_params


def test_unknown_head_falls_back_to_full_logits_and_says_so(tiny_mlms):
    model = tiny_mlms.model("electra")
    assert gathered_head_family(model) is None
    input_ids, attention_mask, labels = tiny_mlms.batch(seed=1)
    with pytest.warns(HeadFallbackWarning, match="ElectraForMaskedLM"):
        with torch.no_grad():
            logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    expected, expected_targets = _full_then_gather(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(targets, expected_targets)
    with torch.no_grad():
        hidden, weight, bias, _ = masked_lm_hidden(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(hidden @ weight.T + bias, expected, atol=1e-5, rtol=1e-5)
    assert "full logits" in model_description(model)["head"]


def test_gradients_flow_through_the_gathered_head(tiny_mlms):
    model = tiny_mlms.model("bert").train()
    input_ids, attention_mask, labels = tiny_mlms.batch(seed=2)
    logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    F.cross_entropy(logits, targets).backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.cls.predictions.transform.dense.weight.grad.abs().sum() > 0


def test_gathered_module_gives_the_same_logits(tiny_mlms):
    model = tiny_mlms.model("distilbert")
    input_ids, attention_mask, labels = tiny_mlms.batch(seed=5)
    with torch.no_grad():
        expected, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
        got, got_targets = GatheredMaskedLM(model)(input_ids, attention_mask, labels)
        hidden = masked_lm_hidden(model, input_ids, attention_mask, labels)
        got_hidden = GatheredMaskedLM(model, hidden=True)(input_ids, attention_mask, labels)
    assert torch.equal(got, expected) and torch.equal(got_targets, targets)
    assert len(got_hidden) == 4 and all(torch.equal(a, b) for a, b in zip(got_hidden, hidden))


def test_nothing_selected_gives_empty_rows_and_one_sentence_works(tiny_mlms):
    model = tiny_mlms.model("bert")
    input_ids, attention_mask, _ = tiny_mlms.batch()
    with torch.no_grad():
        logits, targets = masked_lm_logits(model, input_ids, attention_mask, torch.full((tiny_mlms.B, tiny_mlms.T), IGNORE_INDEX))
        assert logits.shape == (0, tiny_mlms.VOCAB) and targets.shape == (0,)
        labels = torch.full((tiny_mlms.T,), IGNORE_INDEX)
        labels[3] = 7
        logits, targets = masked_lm_logits(model, input_ids[0], attention_mask[0], labels)  # (T,) input
    assert logits.shape == (1, tiny_mlms.VOCAB) and targets.tolist() == [7]
    with pytest.raises(InputError):
        masked_lm_logits(model, input_ids, attention_mask, labels)  # shapes disagree


def test_fallback_capture_keeps_each_threads_own_hidden_states(tiny_mlms):
    """Two sessions on one shared ELECTRA (a head captured with a hook) get their own rows (issue 16, item 3).

    The test pins the interleaving that went wrong: session B's forward has passed the decoder and B's
    capture is still registered when session A's forward passes the decoder. Before the fix, A's
    states landed last in B's capture, so B got A's hidden states (108 of 3,318 calls in the review).
    """
    import threading

    model = tiny_mlms.model("electra")
    decoder = model.get_output_embeddings()
    batches = {"A": tiny_mlms.batch(seed=5, rate=0.5), "B": tiny_mlms.batch(seed=6, rate=0.5)}
    with torch.no_grad():
        alone = {name: masked_lm_hidden(model, *batch)[0] for name, batch in batches.items()}
    assert alone["A"].shape != alone["B"].shape or not torch.equal(alone["A"], alone["B"])
    b_passed_decoder, a_done = threading.Event(), threading.Event()
    got, errors = {}, []

    def pause_b_after_decoder(module, args, output):
        if threading.current_thread().name == "B":
            b_passed_decoder.set()
            a_done.wait(timeout=30)

    def session(name):
        try:
            if name == "A":
                b_passed_decoder.wait(timeout=30)
            with torch.no_grad():
                got[name] = masked_lm_hidden(model, *batches[name])[0]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if name == "A":
                a_done.set()

    pause = decoder.register_forward_hook(pause_b_after_decoder)
    try:
        threads = [threading.Thread(target=session, args=(name,), name=name) for name in ("B", "A")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        pause.remove()
    assert not errors and b_passed_decoder.is_set() and a_done.is_set()
    for name in ("A", "B"):
        assert got[name].shape == alone[name].shape and torch.equal(got[name], alone[name]), f"session {name}"
    assert not decoder._forward_pre_hooks and not decoder._forward_hooks  # nothing left on the shared model
