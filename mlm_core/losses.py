"""The MLM loss on the selected rows: full, per-position loop and frequency-weighted cross-entropy, plus
an unlikelihood term against copying a word of the sequence. (Sampled softmax, the fourth way, is
``sampled_softmax``'s: it builds on the ``LossOutput`` and the helpers here.)

Every loss takes the rows that were selected for prediction only (``head.masked_lm_logits`` or
``head.masked_lm_hidden`` gather them before the head) and returns one ``LossOutput``.

Shapes: B = batch, T = sequence length, V = vocabulary, H = hidden size, M = selected (masked)
positions, K = sampled classes (``sampled_softmax``). ``logits (M, V)``, ``targets (M,)``,
``hidden (M, H)``, ``weight (V, H)``, ``bias (V,)``, with ``logits == hidden @ weight.T + bias``;
``input_ids``, ``labels`` (B, T) for ``context_candidates``. The math only: the Loss page's batch,
tables and sentences are ``lessons.loss_lab``'s.

References: PyTorch's ``F.cross_entropy`` (the full and weighted losses are its two reductions, and
the tests compare with it); Welleck et al. 2019 ("Neural text generation with unlikelihood
training", eq. 4) for the unlikelihood term.

A batch in which nothing was selected (M = 0) gives a loss of exactly 0 (still connected to the
graph, so ``backward()`` works) and ``diagnostics["empty"] = True``: ``F.cross_entropy`` would give
NaN there (a mean over zero rows), and one NaN step ruins a whole training run.

>>> import torch
>>> logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
>>> round(full_cross_entropy(logits, torch.tensor([0, 1])).loss.item(), 4)
0.3955
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import run_tokenizer
from mlm_core.masking import IGNORE_INDEX

SCHEMES = ("inverse", "inverse_sqrt", "log", "none")


@dataclass(frozen=True)
class LossOutput:
    """What every loss returns.

    ``loss`` is the scalar to call ``backward()`` on; ``per_token`` (M,) holds each selected
    position's share, scaled so that ``per_token.mean() == loss`` for every variant (for the
    weighted loss that is ``w[y] / mean(w[y]) * CE``); ``diagnostics`` says how it was computed.
    """

    loss: torch.Tensor
    per_token: torch.Tensor
    diagnostics: dict = field(default_factory=dict)


def empty_loss(reference: torch.Tensor, **diagnostics) -> LossOutput:
    """Loss 0 for M = 0, still attached to the graph (``0 * sum`` has a zero gradient)."""
    zero = reference.sum() * 0.0
    per_token = reference.new_zeros((0,), dtype=zero.dtype)
    return LossOutput(zero, per_token, {"empty": True, "M": 0, **diagnostics})


def check_rows(logits: torch.Tensor, targets: torch.Tensor) -> None:
    """Raise a ``ValueError`` a learner can act on unless ``logits`` is (M, V) and ``targets`` (M,)."""
    if logits.dim() != 2 or targets.dim() != 1 or logits.shape[0] != targets.shape[0]:
        raise ValueError(
            f"Expected logits (M, V) and targets (M,); got {tuple(logits.shape)} and {tuple(targets.shape)}. "
            "Pass only the selected rows (head.masked_lm_logits gathers them)."
        )


# --------------------------------------------------------------------------------------------
# Full cross-entropy: the reference every other variant is compared with.
# --------------------------------------------------------------------------------------------


def full_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> LossOutput:
    """Mean cross-entropy over the selected rows: ``mean(logsumexp(z) - z[y])``, as ``F.cross_entropy``.

    >>> import torch
    >>> z = torch.zeros(2, 4)
    >>> round(full_cross_entropy(z, torch.tensor([1, 3])).loss.item(), 4)  # log 4
    1.3863
    """
    check_rows(logits, targets)
    if logits.shape[0] == 0:
        return empty_loss(logits, variant="full")
    per_token = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
    return LossOutput(per_token.mean(), per_token, {"empty": False, "M": int(targets.shape[0]), "variant": "full"})


def loop_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> LossOutput:
    """The same loss, one position at a time in Python: slow but obvious (the Efficiency lesson).

    For each row: ``loss_i = log(sum_v exp(z_v)) - z_y``, with the max subtracted first so that
    ``exp`` cannot overflow.
    """
    check_rows(logits, targets)
    if logits.shape[0] == 0:
        return empty_loss(logits, variant="loop")
    rows = []
    for i in range(logits.shape[0]):
        z = logits[i].float()  # (V,)
        peak = z.max()
        log_partition = peak + torch.log(torch.exp(z - peak).sum())
        rows.append(log_partition - z[targets[i]])
    per_token = torch.stack(rows)  # (M,)
    return LossOutput(per_token.mean(), per_token, {"empty": False, "M": len(rows), "variant": "loop"})


# --------------------------------------------------------------------------------------------
# Frequency-weighted cross-entropy
# --------------------------------------------------------------------------------------------


def token_counts(tokenizer, texts: Iterable[str], vocab_size: int | None = None) -> torch.Tensor:
    """How often each id occurs in ``texts`` (special tokens not added): a (V,) long tensor.

    ``vocab_size`` defaults to ``len(tokenizer)``; pass the model's when it differs.
    """
    size = int(vocab_size if vocab_size is not None else len(tokenizer))
    texts = [t for t in texts if t and t.strip()]
    counts = torch.zeros(size, dtype=torch.long)
    if not texts:
        return counts
    encoded = run_tokenizer(tokenizer, texts, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([i for row in encoded for i in row if 0 <= i < size], dtype=torch.long)
    if len(ids):
        counts += torch.bincount(ids, minlength=size)
    return counts


def token_frequency_weights(
    counts: torch.Tensor | Sequence[int],
    scheme: str = "inverse",
    smoothing: float = 1.0,
    normalize: bool = True,
) -> torch.Tensor:
    """Class weights (V,) from token counts, so rare tokens count more in the loss.

    With smoothed counts ``c = counts + smoothing`` (every token, even one never seen, gets a
    finite weight) and ``N = sum(c)``:

    - ``"inverse"``: ``w = 1 / c`` (each token type contributes equally in expectation);
    - ``"inverse_sqrt"``: ``w = 1 / sqrt(c)`` (the milder form, as word2vec's subsampling);
    - ``"log"``: ``w = log(1 + N / c)`` (an IDF-like weight: grows only logarithmically);
    - ``"none"``: ``w = 1`` (plain cross-entropy).

    ``normalize`` rescales so that a token drawn from the corpus has weight 1 on average:
    ``sum(counts * w) / sum(counts) = 1``, over the real counts. (Averaging over the smoothed counts
    instead would count every unseen id of the vocabulary as a corpus token: with BERT's 30,522 ids,
    smoothing 1 and the workshop corpus's 24,019 tokens, more than half of that mass is unseen ids, and
    a real corpus token would weigh 0.15 on average under ``"inverse"``.) With no counts at all the
    smoothed counts stand in. The weighted loss divides by the sum of weights, so scaling never
    changes it; ``(w * CE).mean()`` then estimates the weighted risk E[w·CE] on the corpus' scale.

    >>> w = token_frequency_weights(torch.tensor([99, 0]), scheme="inverse", normalize=False)
    >>> [round(x, 3) for x in w.tolist()]
    [0.01, 1.0]
    >>> w = token_frequency_weights(torch.tensor([90, 10, 0]), scheme="inverse")
    >>> round(float((torch.tensor([90, 10, 0]) * w).sum() / 100), 6)  # a corpus token weighs 1 on average
    1.0
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}.")
    if smoothing < 0 or (smoothing == 0 and scheme != "none"):
        raise ValueError("smoothing must be > 0 so that unseen tokens get a finite weight.")
    seen = torch.as_tensor(counts, dtype=torch.float64).clamp_min(0)  # (V,) the corpus' own counts
    c = seen + smoothing  # (V,)
    total = c.sum()
    if scheme == "inverse":
        w = 1.0 / c
    elif scheme == "inverse_sqrt":
        w = c.rsqrt()
    elif scheme == "log":
        w = torch.log1p(total / c)
    else:
        w = torch.ones_like(c)
    if normalize:
        corpus = seen if seen.sum() > 0 else c  # the tokens a batch is drawn from (no counts: the smoothed ones)
        w = w * corpus.sum() / (corpus * w).sum()
    return w.float()


def weighted_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, class_weights: torch.Tensor) -> LossOutput:
    """``sum(w[y] * CE) / sum(w[y])``: the normalisation of ``F.cross_entropy(weight=w)``.

    Two conventions exist. ``(w[y] * CE).mean()`` divides by M: with weights normalised so that a
    corpus token has weight 1 on average (``token_frequency_weights(normalize=True)``) it is an
    unbiased estimate of the weighted risk E[w·CE], but its scale moves with the batch's mean
    weight. Dividing by ``sum(w[y])`` (this function, and ``F.cross_entropy(weight=w)``) is a
    weighted *average*: its scale stays that of a cross-entropy, and it estimates the same risk
    when the weights average 1. ``diagnostics["mean_of_weighted"]`` holds the ``.mean()`` value.
    ``per_token`` is ``w[y] / mean(w[y]) * CE``, so its mean is the loss.
    """
    check_rows(logits, targets)
    if class_weights.dim() != 1 or class_weights.shape[0] != logits.shape[1]:
        raise ValueError(f"class_weights must be (V,) = ({logits.shape[1]},); got {tuple(class_weights.shape)}.")
    if logits.shape[0] == 0:
        return empty_loss(logits, variant="weighted")
    ce = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
    w = class_weights.to(device=logits.device, dtype=torch.float32)[targets]  # (M,)
    total = w.sum()
    if not bool(total > 0):
        # Every target has weight 0: nothing to learn from, like an empty batch.
        return LossOutput(ce.sum() * 0.0, ce * 0.0, {"empty": True, "M": int(targets.shape[0]),
                                                     "variant": "weighted", "zero_weight": True})
    loss = (w * ce).sum() / total
    per_token = w / w.mean() * ce
    return LossOutput(loss, per_token, {"empty": False, "M": int(targets.shape[0]), "variant": "weighted",
                                        "target_weights": w.detach(), "unweighted_per_token": ce.detach(),
                                        "mean_of_weighted": float((w * ce.detach()).mean())})


# --------------------------------------------------------------------------------------------
# Unlikelihood: push probability away from tokens the model should not copy
# --------------------------------------------------------------------------------------------


def context_candidates(input_ids: torch.Tensor, special_tokens_mask: torch.Tensor, labels: torch.Tensor,
                       vocab_size: int) -> torch.Tensor:
    """(M, V) bool: for each selected position, the tokens of its own sequence other than its answer.

    Welleck et al. 2019 ("Neural text generation with unlikelihood training", eq. 4) push down a set
    of negative candidates C, there the previous context tokens. A masked LM sees the whole sequence,
    so here C is every token of the sequence (``input_ids`` before masking, special tokens left out)
    except the true one: what a model that copies a word of the sentence would guess. Rows come in
    the row-major order of ``head.masked_lm_logits``.

    >>> ids = torch.tensor([[101, 7, 8, 7, 102]])  # [CLS] a b a [SEP], b hidden
    >>> special = torch.tensor([[1, 0, 0, 0, 1]])
    >>> labels = torch.tensor([[-100, -100, 8, -100, -100]])
    >>> context_candidates(ids, special, labels, vocab_size=200).nonzero().tolist()  # row 0: token 7 only
    [[0, 7]]
    """
    bag = torch.zeros(input_ids.shape[0], vocab_size, dtype=torch.bool, device=input_ids.device)  # (B, V)
    rows, cols = (special_tokens_mask == 0).nonzero(as_tuple=True)
    bag[rows, input_ids[rows, cols]] = True  # the tokens each sequence holds
    selected = labels != IGNORE_INDEX  # (B, T)
    candidates = bag[selected.nonzero(as_tuple=True)[0]]  # (M, V): the bag of each selected row's sequence
    candidates[torch.arange(candidates.shape[0], device=bag.device), labels[selected]] = False  # never the answer
    return candidates


def unlikelihood_loss(logits: torch.Tensor, candidates: torch.Tensor) -> LossOutput:
    """Mean over the selected rows of ``-sum over c in C of log(1 - p(c))`` (Welleck et al. 2019, eq. 4).

    Added to the cross-entropy with a weight (the default-model build's ``--anti-copy``), it lowers
    the probability of every candidate (``context_candidates``) without touching the answer's.

    >>> logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    >>> round(unlikelihood_loss(logits, torch.tensor([[False, True, False]])).loss.item(), 4)  # -log(1 - 0.25)
    0.2877
    """
    if logits.dim() != 2 or candidates.shape != logits.shape:
        raise ValueError(f"Expected logits (M, V) and candidates (M, V); got {tuple(logits.shape)} and "
                         f"{tuple(candidates.shape)}.")
    if logits.shape[0] == 0:
        return empty_loss(logits, variant="unlikelihood")
    p = logits.float().softmax(-1)  # (M, V)
    # p(c) = 1 would give log 0: the clamp keeps the term (and its gradient) finite.
    per_token = -(torch.log1p(-p.clamp(max=1 - 1e-6)) * candidates).sum(-1)  # (M,)
    return LossOutput(per_token.mean(), per_token, {"empty": False, "M": int(logits.shape[0]),
                                                    "variant": "unlikelihood"})


# --------------------------------------------------------------------------------------------
# Does a cheaper (or buggy) loss push the encoder the same way as the full one?
# --------------------------------------------------------------------------------------------


def loss_and_grad(fn, hidden, weight, bias):
    """One forward + backward (to hidden, weight and bias) of ``fn(hidden, weight, bias)``, a ``LossOutput``
    or a scalar tensor: (loss, d loss / d hidden (flat), seconds)."""
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)
    b = None if bias is None else bias.detach().requires_grad_(True)
    start = time.perf_counter()
    out = fn(h, w, b)
    loss = out.loss if isinstance(out, LossOutput) else out
    params = [h, w] + ([] if b is None else [b])
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    seconds = time.perf_counter() - start
    grad_h = grads[0] if grads[0] is not None else torch.zeros_like(h)
    return float(loss.detach()), grad_h.flatten(), seconds


def full_head_loss(targets):
    """``fn(hidden, weight, bias)``: the full cross-entropy of the head on ``targets`` (M,), for ``loss_and_grad``."""
    def fn(h, w, b):
        logits = h @ w.T  # (M, V)
        return full_cross_entropy(logits if b is None else logits + b, targets)
    return fn


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two flat tensors, computed in float64."""
    return float(F.cosine_similarity(a.double(), b.double(), dim=0))


def hidden_gradient_cosine(loss_fn, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                           targets: torch.Tensor) -> float:
    """Cosine between the gradient of ``loss_fn(hidden, weight, bias)`` (a ``LossOutput`` or a scalar
    tensor) with respect to ``hidden`` (M, H) and the full loss's: does a cheaper (or buggy) loss push
    the encoder the same way? NaN when M = 0.

    >>> h, w = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), torch.eye(4)
    >>> full = lambda h, w, b: full_cross_entropy(h @ w.T, torch.tensor([0, 1, 2]))
    >>> round(hidden_gradient_cosine(full, h, w, None, torch.tensor([0, 1, 2])), 6)
    1.0
    """
    if len(targets) == 0:
        return float("nan")
    _, full_grad, _ = loss_and_grad(full_head_loss(targets), hidden, weight, bias)
    _, grad, _ = loss_and_grad(loss_fn, hidden, weight, bias)
    return cosine(grad, full_grad)

