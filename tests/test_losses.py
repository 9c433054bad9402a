"""Loss variants: references, exact equalities, frequency weights, the unlikelihood term, empty batches.

Sampled softmax (its estimate, draws and K sweep) is tested in ``tests/test_sampled_softmax.py``.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from mlm_core.losses import (
    LossOutput,
    context_candidates,
    full_cross_entropy,
    loop_cross_entropy,
    token_counts,
    token_frequency_weights,
    unlikelihood_loss,
    weighted_cross_entropy,
)


def test_full_equals_f_cross_entropy(head_rows):
    hidden, weight, bias, targets = head_rows()
    logits = hidden @ weight.T + bias
    out = full_cross_entropy(logits, targets)
    assert isinstance(out, LossOutput)
    assert torch.allclose(out.loss, F.cross_entropy(logits, targets), atol=1e-6)
    assert torch.allclose(out.per_token, F.cross_entropy(logits, targets, reduction="none"), atol=1e-6)
    assert out.per_token.shape == (12,)


def test_hand_computed_2x3():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    targets = torch.tensor([0, 1])
    e = torch.e
    expected = (-(torch.log(torch.tensor(e**2 / (e**2 + 2)))) - torch.log(torch.tensor(e / (e + 2)))) / 2
    assert abs(full_cross_entropy(logits, targets).loss.item() - expected.item()) < 1e-6


def test_loop_equals_vectorised(head_rows):
    hidden, weight, bias, targets = head_rows(M=20, V=300)
    logits = (hidden @ weight.T + bias) * 5  # large logits: the loop must still be stable
    loop, full = loop_cross_entropy(logits, targets), full_cross_entropy(logits, targets)
    assert torch.allclose(loop.per_token, full.per_token, atol=1e-5)
    assert torch.allclose(loop.loss, full.loss, atol=1e-6)


def test_weighted_equals_f_cross_entropy_weight(head_rows):
    hidden, weight, bias, targets = head_rows(M=30, V=40)
    logits = hidden @ weight.T + bias
    counts = torch.randint(0, 100, (40,), generator=torch.Generator().manual_seed(1))
    for scheme in ("inverse", "inverse_sqrt", "log", "none"):
        w = token_frequency_weights(counts, scheme=scheme)
        out = weighted_cross_entropy(logits, targets, w)
        assert torch.allclose(out.loss, F.cross_entropy(logits, targets, weight=w), atol=1e-6), scheme
        assert torch.allclose(out.per_token.mean(), out.loss, atol=1e-6)


def test_weights_schemes_documented_values():
    counts = torch.tensor([99, 0, 9])
    w = token_frequency_weights(counts, scheme="inverse", smoothing=1.0, normalize=False)
    assert torch.allclose(w, torch.tensor([1 / 100, 1.0, 1 / 10]))
    w = token_frequency_weights(counts, scheme="inverse_sqrt", normalize=False)
    assert torch.allclose(w, torch.tensor([0.1, 1.0, 10 ** -0.5]))
    w = token_frequency_weights(counts, scheme="log", normalize=False)
    assert torch.allclose(w, torch.log1p(111 / torch.tensor([100.0, 1.0, 10.0])))
    assert torch.equal(token_frequency_weights(counts, scheme="none", normalize=False), torch.ones(3))
    for scheme in ("inverse", "inverse_sqrt", "log"):
        w = token_frequency_weights(counts, scheme=scheme)  # normalised: a corpus token weighs 1 on average
        assert abs(float((counts.double() * w.double()).sum() / counts.sum()) - 1) < 1e-5
        assert torch.isfinite(w).all() and (w > 0).all()
        assert w[1] > w[2] > w[0]  # rarer → heavier
    with pytest.raises(ValueError):
        token_frequency_weights(counts, scheme="bogus")
    with pytest.raises(ValueError):
        token_frequency_weights(counts, smoothing=0)


def test_a_corpus_token_weighs_one_on_average(tokenizer):
    """What the Loss page and the Bug museum say: weights are normalised so that a token drawn from the corpus
    has weight 1 on average, so (w·CE).mean() and Σ w·CE / Σ w both estimate the weighted risk E[w·CE].
    Before, the average ran over the smoothed counts, where each of the ~27,600 ids the workshop corpus never
    has counted as a corpus token: a real corpus token weighed 0.15 on average (inverse), 0.33 (inverse_sqrt),
    0.75 (log). Exact up to float rounding (1e-4)."""
    from mlm_core.bundled import workshop_sentences

    counts = token_counts(tokenizer, workshop_sentences())
    assert int((counts == 0).sum()) > int(counts.sum()), "most ids are unseen: the case that went wrong"
    for scheme in ("inverse", "inverse_sqrt", "log", "none"):
        for smoothing in (0.1, 1.0, 10.0):
            w = token_frequency_weights(counts, scheme=scheme, smoothing=smoothing).double()
            assert abs(float((counts * w).sum() / counts.sum()) - 1) < 1e-4, (scheme, smoothing)
    empty = token_frequency_weights(torch.zeros(5, dtype=torch.long), scheme="inverse")
    assert torch.allclose(empty, torch.ones(5)), "no counts: the smoothed counts stand in"


def test_token_counts():
    from mlm_core.bundled import load_default_tokenizer

    tok = load_default_tokenizer()
    counts = token_counts(tok, ["the cat", "the dog", "  "])
    assert counts.shape == (len(tok),)
    the = tok.convert_tokens_to_ids("the")
    assert counts[the] == 2 and counts.sum() == 4
    assert counts[tok.cls_token_id] == 0


def test_empty_batch_gives_zero_not_nan():
    V = 20
    logits = torch.zeros(0, V, requires_grad=True)
    targets = torch.zeros(0, dtype=torch.long)
    assert torch.isnan(F.cross_entropy(logits, targets))  # the bug the museum shows
    outs = [
        full_cross_entropy(logits, targets),
        loop_cross_entropy(logits, targets),
        weighted_cross_entropy(logits, targets, torch.ones(V)),
        unlikelihood_loss(logits, torch.zeros(0, V, dtype=torch.bool)),
    ]
    for out in outs:
        assert out.loss.item() == 0.0 and not torch.isnan(out.loss)
        assert out.diagnostics["empty"] is True and out.per_token.shape == (0,)
    outs[0].loss.backward()
    assert logits.grad is not None and (logits.grad == 0).all()


def test_loss_bars_label_the_uniform_guess_for_a_learner():
    """The Loss page's baseline reads "ln V = 10.33 (uniform guess over V = 30,522 tokens)", from the model's V."""
    from mlm_core.figures.losses import loss_bars
    from mlm_core.lessons.loss_lab import uniform_guess_label

    fig = loss_bars({"full": 3.0, "weighted": 3.3, "sampled": 2.9}, vocab_size=30522)
    assert [a.text for a in fig.layout.annotations] == ["ln V = 10.33 (uniform guess over V = 30,522 tokens)"]
    assert fig.layout.shapes[0].y0 == math.log(30522) and fig.layout.yaxis.range[1] > math.log(30522)
    assert uniform_guess_label(8) == "ln V = 2.08 (uniform guess over V = 8 tokens)"
    assert not loss_bars({"full": 3.0}).layout.annotations  # no V given: no line


# --------------------------------------------------------------------------------------------
# Unlikelihood (the default-model build's anti-copy term)
# --------------------------------------------------------------------------------------------


def test_unlikelihood_is_the_log_of_one_minus_each_other_token_of_the_sequence(tokenizer):
    """By hand on the tiny model: "coffee" hidden, "milk" (twice) and "her" are what it could copy."""
    from mlm_core.head import masked_lm_logits
    from mlm_core.models import tiny_random_masked_lm

    model, _ = tiny_random_masked_lm(tokenizer)
    a, b, c = tokenizer.convert_tokens_to_ids(["milk", "coffee", "her"])
    ids = torch.tensor([[tokenizer.cls_token_id, a, b, c, a, tokenizer.sep_token_id]])
    special = torch.tensor([[True, False, False, False, False, True]])
    labels = torch.full_like(ids, -100)
    labels[0, 2] = b
    corrupted = ids.clone()
    corrupted[0, 2] = tokenizer.mask_token_id
    with torch.no_grad():
        logits, _ = masked_lm_logits(model, corrupted, torch.ones_like(ids), labels)  # (1, V)
    candidates = context_candidates(ids, special, labels, logits.shape[-1])
    assert candidates.shape == logits.shape and candidates[0].nonzero().flatten().tolist() == sorted([a, c])
    p = logits.float().softmax(-1)[0]
    expected = -(torch.log1p(-p[a]) + torch.log1p(-p[c]))  # each other token once; not the answer, not [CLS]/[SEP]
    assert float(unlikelihood_loss(logits, candidates).loss) == pytest.approx(float(expected), rel=1e-6)


def test_unlikelihood_rows_follow_the_selected_positions_and_an_empty_batch_is_zero():
    ids = torch.tensor([[1, 5, 6, 2], [1, 7, 7, 2]])
    special = torch.tensor([[1, 0, 0, 1], [1, 0, 0, 1]])
    labels = torch.tensor([[-100, 5, -100, -100], [-100, -100, 7, -100]])
    cands = context_candidates(ids, special, labels, vocab_size=8)  # (2, 8), row-major
    assert cands.nonzero().tolist() == [[0, 6]]  # row 1's only other token is its own answer
    logits = torch.zeros(2, 8)
    out = unlikelihood_loss(logits, cands)
    assert out.per_token.tolist() == pytest.approx([-math.log(1 - 1 / 8), 0.0])
    empty = unlikelihood_loss(torch.zeros(0, 8, requires_grad=True), torch.zeros(0, 8, dtype=torch.bool))
    assert float(empty.loss.detach()) == 0.0 and empty.diagnostics["empty"]
