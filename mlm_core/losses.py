"""The MLM loss, four ways: full, per-position loop, frequency-weighted and sampled softmax.

Every loss takes the rows that were selected for prediction only (``models.masked_lm_logits`` or
``models.masked_lm_hidden`` gather them before the head) and returns one ``LossOutput``.

Shapes: M = selected (masked) positions, V = vocabulary, H = hidden size, K = sampled classes.
``logits (M, V)``, ``targets (M,)``, ``hidden (M, H)``, ``weight (V, H)``, ``bias (V,)``,
with ``logits == hidden @ weight.T + bias``.

A batch in which nothing was selected (M = 0) gives a loss of exactly 0 (still connected to the
graph, so ``backward()`` works) and ``diagnostics["empty"] = True``: ``F.cross_entropy`` would give
NaN there (a mean over zero rows), and one NaN step ruins a whole training run.

>>> import torch
>>> logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
>>> round(full_cross_entropy(logits, torch.tensor([0, 1])).loss.item(), 4)
0.3955
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import run_tokenizer

SCHEMES = ("inverse", "inverse_sqrt", "log", "none")
SAMPLERS = ("uniform", "unigram", "log_uniform", "softmax")


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


def _empty(reference: torch.Tensor, **diagnostics) -> LossOutput:
    """Loss 0 for M = 0, still attached to the graph (``0 * sum`` has a zero gradient)."""
    zero = reference.sum() * 0.0
    per_token = reference.new_zeros((0,), dtype=zero.dtype)
    return LossOutput(zero, per_token, {"empty": True, "M": 0, **diagnostics})


def _check_rows(logits: torch.Tensor, targets: torch.Tensor) -> None:
    if logits.dim() != 2 or targets.dim() != 1 or logits.shape[0] != targets.shape[0]:
        raise ValueError(
            f"Expected logits (M, V) and targets (M,); got {tuple(logits.shape)} and {tuple(targets.shape)}. "
            "Pass only the selected rows (models.masked_lm_logits gathers them)."
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
    _check_rows(logits, targets)
    if logits.shape[0] == 0:
        return _empty(logits, variant="full")
    per_token = F.cross_entropy(logits.float(), targets, reduction="none")  # (M,)
    return LossOutput(per_token.mean(), per_token, {"empty": False, "M": int(targets.shape[0]), "variant": "full"})


def loop_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> LossOutput:
    """The same loss, one position at a time in Python: slow but obvious (the Efficiency lesson).

    For each row: ``loss_i = log(sum_v exp(z_v)) - z_y``, with the max subtracted first so that
    ``exp`` cannot overflow.
    """
    _check_rows(logits, targets)
    if logits.shape[0] == 0:
        return _empty(logits, variant="loop")
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

    ``normalize`` rescales so that the corpus-average weight ``sum(c * w) / N`` is 1: a token
    drawn from the corpus has weight 1 on average, so the weighted loss stays on the scale of the
    plain one. (The weighted loss divides by the sum of weights, so scaling never changes it.)

    >>> w = token_frequency_weights(torch.tensor([99, 0]), scheme="inverse", normalize=False)
    >>> [round(x, 3) for x in w.tolist()]
    [0.01, 1.0]
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}.")
    if smoothing < 0 or (smoothing == 0 and scheme != "none"):
        raise ValueError("smoothing must be > 0 so that unseen tokens get a finite weight.")
    c = torch.as_tensor(counts, dtype=torch.float64).clamp_min(0) + smoothing  # (V,)
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
        w = w * total / (c * w).sum()
    return w.float()


def weighted_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, class_weights: torch.Tensor) -> LossOutput:
    """``sum(w[y] * CE) / sum(w[y])``: the normalisation of ``F.cross_entropy(weight=w)``.

    Dividing by the sum of the weights (not by M) keeps the loss a weighted *average*; a
    ``.mean()`` would make its scale depend on which tokens happen to be in the batch.
    ``per_token`` is ``w[y] / mean(w[y]) * CE``, so its mean is the loss.
    """
    _check_rows(logits, targets)
    if class_weights.dim() != 1 or class_weights.shape[0] != logits.shape[1]:
        raise ValueError(f"class_weights must be (V,) = ({logits.shape[1]},); got {tuple(class_weights.shape)}.")
    if logits.shape[0] == 0:
        return _empty(logits, variant="weighted")
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
                                        "target_weights": w.detach(), "unweighted_per_token": ce.detach()})


# --------------------------------------------------------------------------------------------
# Sampled softmax
# --------------------------------------------------------------------------------------------


def proposal_distribution(
    sampler: str,
    vocab_size: int,
    *,
    counts: torch.Tensor | None = None,
    power: float = 0.75,
    hidden: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The distribution Q (V,) over the vocabulary that the negatives are drawn from (float64).

    - ``"uniform"``: ``1 / V``.
    - ``"unigram"``: ``(counts + 1) ** power``, normalised (word2vec's 0.75; add-one smoothing so
      every id can be drawn and has a finite ``log Q``). Needs ``counts``.
    - ``"log_uniform"``: Zipf's law by id, as TensorFlow's ``log_uniform_candidate_sampler``:
      ``Q(k) = log((k + 2) / (k + 1)) / log(V + 1)``. It assumes ids are sorted by decreasing
      frequency, which holds only roughly for BERT's WordPiece vocabulary.
    - ``"softmax"``: the model's own detached distribution, averaged over the batch rows so one
      set of negatives serves every row. The best proposal, but it costs a full (M, V) softmax.
    """
    if sampler == "uniform":
        return torch.full((vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
    if sampler == "unigram":
        if counts is None:
            raise ValueError('The "unigram" sampler needs token counts (see token_counts).')
        c = torch.as_tensor(counts, dtype=torch.float64).cpu().clamp_min(0)
        if c.shape != (vocab_size,):
            raise ValueError(f"counts must be (V,) = ({vocab_size},); got {tuple(c.shape)}.")
        q = (c + 1.0) ** power
        return q / q.sum()
    if sampler == "log_uniform":
        k = torch.arange(vocab_size, dtype=torch.float64)
        return torch.log((k + 2.0) / (k + 1.0)) / math.log(vocab_size + 1.0)
    if sampler == "softmax":
        if hidden is None or weight is None:
            raise ValueError('The "softmax" sampler needs hidden and weight.')
        with torch.no_grad():
            logits = hidden.detach().float() @ weight.detach().float().T  # (M, V): the full cost
            if bias is not None:
                logits = logits + bias.detach().float()
            q = torch.softmax(logits.double(), dim=-1).mean(0) if len(logits) else torch.full(
                (vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
        q = q.cpu().clamp_min(1e-30)
        return q / q.sum()
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}.")


def expected_counts(q: torch.Tensor, num_sampled: int, replacement: bool) -> torch.Tensor:
    """How many times each class is expected among the K draws (V,), the ``Q`` in ``log Q``.

    With replacement this is ``K * q``. Without replacement (K distinct classes) it is the
    inclusion probability; like TensorFlow's unique candidate samplers we use
    ``1 - (1 - q) ** n``, the chance of appearing in n draws with replacement, and take n as the
    number of draws at which K distinct classes are expected (solved by bisection), so the
    expected counts add up to exactly K. For uniform q this is exactly ``K / V``; for K = V every
    class is certain (count 1, ``log Q = 0``).
    """
    q = q.double()
    V = q.shape[0]
    if replacement:
        return q * num_sampled
    support = int((q > 0).sum())
    if num_sampled >= support:
        return (q > 0).double()
    log1m = torch.log1p(-q.clamp(max=1 - 1e-16))  # (V,) log(1 - q)
    # f(n) = sum(1 - (1 - q)^n) is increasing and concave in n, and f(K) <= K: Newton's method
    # started at n = K climbs to the root from below without overshooting.
    n = float(num_sampled)
    for _ in range(200):
        stay = torch.exp(n * log1m)  # (V,) P(not drawn in n tries)
        gap = num_sampled - float((1.0 - stay).sum())
        if gap <= 1e-9 * num_sampled:
            break
        slope = float((-log1m * stay).sum())
        n += gap / slope
    return -torch.expm1(n * log1m)


def draw_candidates(q: torch.Tensor, num_sampled: int, replacement: bool, generator: torch.Generator) -> torch.Tensor:
    """K ids (K,) drawn from q, once for the whole batch (shared negatives, as TF's sampled_softmax_loss).

    Without replacement, ``torch.multinomial`` draws K distinct ids one after another: the same
    law as TensorFlow's "draw with replacement until K distinct ids" samplers.
    """
    if generator is None:
        raise ValueError("Sampling needs a torch.Generator: the global RNG is never used.")
    if num_sampled < 1:
        raise ValueError(f"num_sampled must be at least 1; got {num_sampled}.")
    support = int((q > 0).sum())
    if not replacement and num_sampled > support:
        raise ValueError(f"Cannot draw {num_sampled} distinct classes from {support}; lower K or sample with replacement.")
    q = q.to(device=generator.device, dtype=torch.float64)
    return torch.multinomial(q, num_sampled, replacement=replacement, generator=generator)


def sampled_softmax_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    num_sampled: int,
    sampler: str = "uniform",
    counts: torch.Tensor | None = None,
    power: float = 0.75,
    replacement: bool = True,
    remove_accidental_hits: bool = True,
    logq_correction: bool = True,
    logq_on_true: bool = True,
    generator: torch.Generator,
) -> LossOutput:
    """Softmax over the true class plus K sampled classes instead of all V (Jean et al. 2015).

    For row i the candidates are its target y_i and K ids drawn once per batch from Q
    (shared by all rows, as TensorFlow's ``sampled_softmax_loss``). Logits are computed only for
    those: ``hidden @ weight[ids].T`` is (M, K), never (M, V) (except for the "softmax" sampler,
    whose proposal itself is a full softmax). Then:

    - ``logq_correction``: subtract ``log Q``, the log of each class's expected count among the
      K draws (see ``expected_counts``), from the sampled logits. It undoes the proposal's
      preference: without it, a sampler that draws frequent tokens often makes them count more
      in the partition function than they should.
    - ``logq_on_true`` (with ``logq_correction``): subtract it from the true class's logit too,
      so *every* candidate logit is corrected, as TensorFlow's ``sampled_softmax_loss`` does
      (its candidate-sampling note: which candidate is the target, given the set). The loss is
      then the log-probability of picking the target out of the candidates, an underestimate of
      full CE that converges slowly, and for the uniform sampler log Q is the same constant on
      every candidate and cancels. With ``logq_on_true=False`` only the negatives are corrected
      (Bengio & Senécal's importance sampling, as in Blanc & Rendle 2018): ``exp(z_y) +
      sum_s exp(z_s) / (K Q(s))`` is an unbiased estimate of the partition function (hits
      removed), so the loss approaches full CE quickly as K grows (still slightly low: the log
      of an unbiased estimate is biased low).
    - ``remove_accidental_hits``: a sampled id equal to the row's target would count the true
      class twice (once as a negative); its logit is set to -inf for that row.

    With K = V drawn without replacement, no log Q and hits removed, the candidates are the whole
    vocabulary and the loss equals ``full_cross_entropy`` exactly.
    Diagnostics: ``sampled_ids`` (K,), ``num_hits``, ``K``, ``unique_sampled``, and
    ``full_softmax`` (True only for the "softmax" sampler).
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"Expected hidden (M, H) and weight (V, H); got {tuple(hidden.shape)} and {tuple(weight.shape)}.")
    if targets.dim() != 1 or targets.shape[0] != hidden.shape[0]:
        raise ValueError(f"Expected targets (M,) = ({hidden.shape[0]},); got {tuple(targets.shape)}.")
    V = weight.shape[0]
    q = proposal_distribution(sampler, V, counts=counts, power=power, hidden=hidden, weight=weight, bias=bias)
    sampled_ids = draw_candidates(q, num_sampled, replacement, generator).to(weight.device)  # (K,)
    log_expected = torch.log(expected_counts(q, num_sampled, replacement)).float().to(weight.device)  # (V,)
    info = {"variant": "sampled", "sampler": sampler, "K": int(num_sampled), "replacement": replacement,
            "logq_correction": logq_correction, "logq_on_true": logq_on_true,
            "remove_accidental_hits": remove_accidental_hits,
            "sampled_ids": sampled_ids.detach(), "unique_sampled": int(sampled_ids.unique().numel()),
            "full_softmax": sampler == "softmax", "log_expected_sampled": log_expected[sampled_ids].detach()}
    if hidden.shape[0] == 0:
        return _empty(hidden, num_hits=0, log_expected_true=log_expected[targets].detach(), **info)

    M = hidden.shape[0]
    h = hidden.float()
    # One gather for all candidate rows of the output layer: its backward is one sparse update.
    candidate_ids = torch.cat([targets.to(weight.device), sampled_ids])  # (M + K,)
    w = weight.index_select(0, candidate_ids).float()  # (M + K, H)
    true_logits = (h * w[:M]).sum(-1)  # (M,)
    sampled_logits = h @ w[M:].T  # (M, K)
    if bias is not None:
        b = bias.index_select(0, candidate_ids).float()  # (M + K,)
        true_logits = true_logits + b[:M]
        sampled_logits = sampled_logits + b[M:]
    out = sampled_softmax_from_logits(
        true_logits, sampled_logits, targets, sampled_ids, log_expected,
        remove_accidental_hits=remove_accidental_hits, logq_correction=logq_correction, logq_on_true=logq_on_true,
    )
    return LossOutput(out.loss, out.per_token, {**info, **out.diagnostics})


def sampled_softmax_from_logits(
    true_logits: torch.Tensor,
    sampled_logits: torch.Tensor,
    targets: torch.Tensor,
    sampled_ids: torch.Tensor,
    log_expected: torch.Tensor,
    *,
    remove_accidental_hits: bool = True,
    logq_correction: bool = True,
    logq_on_true: bool = True,
) -> LossOutput:
    """The sampled-softmax loss from candidate logits: true (M,), sampled (M, K), log Q (V,).

    The candidate row is ``[z_y - log Q(y), z_s1 - log Q(s1), ...]`` (``- log Q(y)`` only with
    ``logq_on_true``) and the true class sits in column 0, so the loss is ``cross_entropy(candidates, 0)``.
    """
    M = true_logits.shape[0]
    if logq_correction:
        sampled_logits = sampled_logits - log_expected[sampled_ids][None, :]
        if logq_on_true:
            true_logits = true_logits - log_expected[targets]
    hits = sampled_ids[None, :] == targets[:, None]  # (M, K)
    if remove_accidental_hits:
        sampled_logits = sampled_logits.masked_fill(hits, float("-inf"))
    candidates = torch.cat([true_logits[:, None], sampled_logits], dim=1)  # (M, 1 + K)
    per_token = F.cross_entropy(candidates, targets.new_zeros(M), reduction="none")  # (M,)
    return LossOutput(per_token.mean(), per_token, {
        "empty": False, "M": int(M), "num_hits": int(hits.sum()) if remove_accidental_hits else 0,
        "hits_found": int(hits.sum()), "log_expected_true": log_expected[targets].detach(),
    })


# --------------------------------------------------------------------------------------------
# The gradient each variant sends to the logits of one position
# --------------------------------------------------------------------------------------------


def logit_gradients(
    logits: torch.Tensor,
    targets: torch.Tensor,
    position: int,
    *,
    class_weights: torch.Tensor | None = None,
    sampled: LossOutput | None = None,
) -> dict[str, torch.Tensor]:
    """d(loss)/d(logits[position]) (V,) for each variant, times M (so full = softmax − one-hot).

    Full: ``softmax(z) - onehot(y)``. Weighted: the same, times ``w[y] / mean(w[y])``.
    Sampled: ``softmax - onehot`` over the candidates only (the ids in ``sampled``'s diagnostics,
    with the same log Q and hit removal); every other class gets exactly 0.
    """
    _check_rows(logits, targets)
    M = logits.shape[0]
    if not 0 <= position < M:
        raise ValueError(f"position must be between 0 and {M - 1}; got {position}.")
    z = logits[position].detach().float()  # (V,)
    y = int(targets[position])
    onehot = torch.zeros_like(z)
    onehot[y] = 1.0
    full = torch.softmax(z, -1) - onehot
    grads = {"full": full}
    if class_weights is not None:
        w = class_weights.to(z.device, torch.float32)[targets]
        grads["weighted"] = full * (w[position] / w.mean())
    if sampled is not None:
        d = sampled.diagnostics
        ids = d["sampled_ids"].to(z.device)
        lq = torch.zeros_like(z)
        lq[ids] = d["log_expected_sampled"].to(z.device)
        lq[y] = d["log_expected_true"][position].to(z.device) if "log_expected_true" in d else lq[y]
        row = z.clone().requires_grad_(True)
        out = sampled_softmax_from_logits(
            row[y].reshape(1), row[ids][None, :], torch.tensor([y], device=z.device), ids, lq,
            remove_accidental_hits=d["remove_accidental_hits"], logq_correction=d["logq_correction"],
            logq_on_true=d.get("logq_on_true", True),
        )
        (grad,) = torch.autograd.grad(out.loss, row)
        grads["sampled"] = grad
    return grads


# --------------------------------------------------------------------------------------------
# The K sweep: how sampled softmax approaches the full loss
# --------------------------------------------------------------------------------------------


def _timed_loss_and_grad(fn, hidden, weight, bias):
    """One forward + backward (to hidden, weight and bias): (loss, d loss / d hidden, seconds)."""
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)
    b = None if bias is None else bias.detach().requires_grad_(True)
    start = time.perf_counter()
    out = fn(h, w, b)
    params = [h, w] + ([] if b is None else [b])
    grads = torch.autograd.grad(out.loss, params, allow_unused=True)
    seconds = time.perf_counter() - start
    grad_h = grads[0] if grads[0] is not None else torch.zeros_like(h)
    return float(out.loss.detach()), grad_h.flatten(), seconds


CORRECTIONS = {
    # name: (logq_correction, logq_on_true)
    "log Q on every logit (TF)": (True, True),
    "log Q on the negatives": (True, False),
    "no log Q": (False, False),
}


def sampled_softmax_sweep(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    ks: Sequence[int] = (16, 64, 256, 1024, 4096),
    sampler: str = "uniform",
    counts: torch.Tensor | None = None,
    power: float = 0.75,
    replacement: bool = True,
    corrections: Sequence[str] = tuple(CORRECTIONS),
    repeats: int = 5,
    generator: torch.Generator,
) -> list[dict]:
    """Sampled softmax against the full loss for each K and each log Q correction (``CORRECTIONS``).

    Each (K, correction) pair is run ``repeats`` times with fresh negatives. One dict per pair:
    ``K``, ``correction``, ``logq_correction``, ``logq_on_true``, ``loss`` (mean over repeats)
    and ``loss_std``, ``full_loss``, ``bias`` (mean sampled − full), ``abs_bias`` (mean
    |sampled − full|), ``grad_cosine`` (mean cosine between the gradient with respect to
    ``hidden`` and the full one: the direction the encoder is pushed), ``time_ms`` (median
    forward + backward to hidden, weight and bias), ``full_time_ms`` and ``time_ratio``
    (sampled / full). Ready for ``pandas.DataFrame``.
    """
    V = weight.shape[0]
    if hidden.shape[0] == 0:
        return []

    def full_fn(h, w, b):
        logits = h @ w.T  # (M, V)
        return full_cross_entropy(logits if b is None else logits + b, targets)

    full_times, full_loss, full_grad = [], None, None
    for _ in range(max(1, repeats)):
        full_loss, full_grad, seconds = _timed_loss_and_grad(full_fn, hidden, weight, bias)
        full_times.append(seconds)
    full_time = float(torch.tensor(full_times).median())
    rows = []
    for k in ks:
        k = int(k)
        if not replacement and k > V:
            continue
        for correction in corrections:
            logq, on_true = CORRECTIONS[correction]
            losses, cosines, times = [], [], []
            for _ in range(max(1, repeats)):
                def fn(h, w, b, k=k, logq=logq, on_true=on_true):
                    return sampled_softmax_loss(h, w, b, targets, num_sampled=k, sampler=sampler, counts=counts,
                                                power=power, replacement=replacement, logq_correction=logq,
                                                logq_on_true=on_true, generator=generator)
                loss, grad, seconds = _timed_loss_and_grad(fn, hidden, weight, bias)
                losses.append(loss)
                cosines.append(float(F.cosine_similarity(grad, full_grad, dim=0)))
                times.append(seconds)
            losses_t = torch.tensor(losses, dtype=torch.float64)
            time_ms = float(torch.tensor(times).median()) * 1e3
            rows.append({
                "K": k, "correction": correction, "logq_correction": logq, "logq_on_true": on_true,
                "sampler": sampler,
                "loss": float(losses_t.mean()), "loss_std": float(losses_t.std()) if len(losses) > 1 else 0.0,
                "full_loss": full_loss, "bias": float(losses_t.mean()) - full_loss,
                "abs_bias": float((losses_t - full_loss).abs().mean()),
                "grad_cosine": float(torch.tensor(cosines).mean()),
                "time_ms": time_ms, "full_time_ms": full_time * 1e3,
                "time_ratio": time_ms / (full_time * 1e3) if full_time > 0 else float("nan"),
            })
    return rows


# --------------------------------------------------------------------------------------------
# Everything a page shows for one batch
# --------------------------------------------------------------------------------------------


def compare_losses(
    logits: torch.Tensor,
    targets: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    class_weights: torch.Tensor,
    num_sampled: int,
    sampler: str = "uniform",
    counts: torch.Tensor | None = None,
    power: float = 0.75,
    replacement: bool = True,
    remove_accidental_hits: bool = True,
    logq_correction: bool = True,
    logq_on_true: bool = True,
    generator: torch.Generator,
) -> dict[str, LossOutput]:
    """Full, weighted and sampled losses on the same rows (and the same negatives for every call)."""
    with torch.no_grad():
        return {
            "full": full_cross_entropy(logits, targets),
            "weighted": weighted_cross_entropy(logits, targets, class_weights),
            "sampled": sampled_softmax_loss(
                hidden, weight, bias, targets, num_sampled=num_sampled, sampler=sampler, counts=counts,
                power=power, replacement=replacement, remove_accidental_hits=remove_accidental_hits,
                logq_correction=logq_correction, logq_on_true=logq_on_true, generator=generator),
        }


def per_token_rows(outputs: dict[str, LossOutput], tokens: Sequence[str]) -> list[dict]:
    """One dict per (position, variant): ``position``, ``token``, ``variant``, ``loss``."""
    rows = []
    for variant, out in outputs.items():
        for i, value in enumerate(out.per_token.detach().tolist()):
            rows.append({"position": i, "token": tokens[i] if i < len(tokens) else str(i),
                         "variant": variant, "loss": value})
    return rows


def gradient_rows(
    grads: dict[str, torch.Tensor], target: int | torch.Tensor, *, top: int = 12, tokenizer=None
) -> list[dict]:
    """The classes with the largest gradients (the target always included), one dict per (class, variant)."""
    target = int(target)
    stacked = torch.stack([g.abs() for g in grads.values()]).amax(0)  # (V,)
    stacked[target] = float("inf")
    ids = stacked.topk(min(top, stacked.numel())).indices.tolist()
    names = tokenizer.convert_ids_to_tokens(ids) if tokenizer is not None else [str(i) for i in ids]
    return [{"token_id": i, "token": name, "variant": variant, "gradient": float(g[i]), "is_target": i == target}
            for variant, g in grads.items() for i, name in zip(ids, names)]


def weight_curve_rows(
    counts: torch.Tensor, schemes: Sequence[str] = ("inverse", "inverse_sqrt", "log"), smoothing: float = 1.0
) -> list[dict]:
    """Weight against corpus count, one dict per (scheme, distinct count): ``scheme``, ``count``,
    ``smoothed_count`` (what the log axis shows), ``weight`` and ``n_tokens`` (ids with that count)."""
    counts = torch.as_tensor(counts).long()
    values, n_ids = torch.unique(counts, return_counts=True)
    rows = []
    for scheme in schemes:
        w = token_frequency_weights(counts, scheme=scheme, smoothing=smoothing)
        first = {}
        for i, c in enumerate(counts.tolist()):
            first.setdefault(c, i)
            if len(first) == len(values):
                break
        for value, n in zip(values.tolist(), n_ids.tolist()):
            rows.append({"scheme": scheme, "count": value, "smoothed_count": value + smoothing,
                         "weight": float(w[first[value]]), "n_tokens": n})
    return rows


@dataclass
class LossBatch:
    """One masked batch through a model, ready for every loss: what the Loss page works on.

    ``logits (M, V)``, ``targets (M,)``, ``hidden (M, H)``, ``weight (V, H)``, ``bias (V,)`` are
    detached; ``tokens`` names each of the M rows ("row 0 · cat").
    """

    encoded: object  # data.Encoded
    result: object  # masking.MaskingResult
    logits: torch.Tensor
    targets: torch.Tensor
    hidden: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    tokens: list[str]
    decisions: list[str]


def loss_batch(model, tokenizer, texts: Sequence[str], config, *, seed: int, max_length: int = 64) -> LossBatch:
    """Encode ``texts``, mask them with ``seed``, and run the model's head on the selected rows."""
    from mlm_core.data import encode, mask_batch
    from mlm_core.masking import Decision
    from mlm_core.models import masked_lm_hidden, masked_lm_logits

    encoded = encode(tokenizer, list(texts), max_length=max_length)
    result = mask_batch(tokenizer, encoded, config, torch.Generator().manual_seed(int(seed)))
    with torch.no_grad():
        logits, targets = masked_lm_logits(model, result.input_ids, encoded.attention_mask, result.labels)
        hidden, weight, bias, _ = masked_lm_hidden(model, result.input_ids, encoded.attention_mask, result.labels)
    selected = result.labels != -100  # (B, T)
    where = selected.nonzero().tolist()  # row-major, as masked_lm_logits orders its rows
    names = tokenizer.convert_ids_to_tokens(targets.tolist())
    tokens = [f"{r}:{p} {name}" for (r, p), name in zip(where, names)]
    decisions = [Decision(int(result.decisions[r, p])).name for r, p in where]
    return LossBatch(encoded, result, logits.float().cpu(), targets.cpu(), hidden.float().cpu(),
                     weight.detach().float().cpu(), bias.detach().float().cpu(), tokens, decisions)


def pick_sentences(sentences: Sequence[str], n: int, seed: int) -> list[str]:
    """``n`` consecutive sentences starting at a place chosen by ``seed`` (the same seed, the same batch)."""
    sentences = [s for s in sentences if s and s.strip()]
    if len(sentences) <= n:
        return list(sentences)
    start = int(torch.randint(len(sentences) - n + 1, (1,), generator=torch.Generator().manual_seed(int(seed))))
    return list(sentences[start:start + n])


def per_token_table(outputs: dict[str, LossOutput], tokens: Sequence[str], decisions: Sequence[str]) -> list[dict]:
    """One dict per selected position: ``position``, ``token``, ``decision`` and one column per variant."""
    rows = [{"position": t.split(" ", 1)[0], "token": t.split(" ", 1)[-1], "decision": d}
            for t, d in zip(tokens, decisions)]
    for variant, out in outputs.items():
        for row, value in zip(rows, out.per_token.detach().tolist()):
            row[variant] = value
    return rows


def target_smoothed_counts(counts: torch.Tensor, targets: torch.Tensor, smoothing: float = 1.0) -> list[float]:
    """Corpus count + smoothing of each target (M floats): where this batch sits on the weights plot."""
    return [float(c) + smoothing for c in torch.as_tensor(counts)[targets.cpu()].tolist()]
