"""The MLM loss, four ways: full, per-position loop, frequency-weighted and sampled softmax.

Every loss takes the rows that were selected for prediction only (``head.masked_lm_logits`` or
``head.masked_lm_hidden`` gather them before the head) and returns one ``LossOutput``.

Shapes: M = selected (masked) positions, V = vocabulary, H = hidden size, K = sampled classes.
``logits (M, V)``, ``targets (M,)``, ``hidden (M, H)``, ``weight (V, H)``, ``bias (V,)``,
with ``logits == hidden @ weight.T + bias``.

Sampled softmax's defaults live in ``SAMPLED_SOFTMAX`` (``SampledSoftmaxConfig``): the Loss page,
the Bug museum and ``training.TrainConfig`` all read them there. ``LossBatch`` is the one batch
type of the Loss page and the Bug museum, and ``batch_losses`` the numbers both show.

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
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import Encoded, encode, mask_batch, run_tokenizer
from mlm_core.errors import InputError
from mlm_core.head import masked_lm_hidden, masked_lm_logits
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig, MaskingResult

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
                                        "target_weights": w.detach(), "unweighted_per_token": ce.detach(),
                                        "mean_of_weighted": float((w * ce.detach()).mean())})


# --------------------------------------------------------------------------------------------
# Sampled softmax
# --------------------------------------------------------------------------------------------




# --------------------------------------------------------------------------------------------
# Sampled softmax
# --------------------------------------------------------------------------------------------
#
# Row i with target y has the full loss log Z - s_y, Z = sum_v exp(s_v) over all V classes.
# Sampled softmax computes the logits of y and of K sampled classes only, and uses them in one of
# three ways (CORRECTIONS), which differ only in where log E[count] is subtracted:
#
# - "importance" (the default): importance sampling of Z (Bengio & Senécal 2008):
#       Z ≈ exp(s_y) + sum over sampled k != y of exp(s_k) / E[count of k among the draws],
#   E[count] = K q_k with replacement and the inclusion probability π_k without. Every class's
#   term is expected once, so the estimate of Z is unbiased, and the loss log Ẑ - s_y estimates the
#   full loss (low on average, as the log of an unbiased estimate is: Jensen). Without
#   replacement it equals the full loss at K = V (π = 1 for every class).
# - "tensorflow": ``tf.nn.sampled_softmax_loss`` (Jean et al. 2015, §3; TensorFlow's
#   ``_compute_sampled_logits`` subtracts log E[count] from the true logit and the sampled ones).
#   Its value is the loss of picking the target out of its 1 + K candidates: far below the full
#   loss until K nears V. With replacement K q_y can exceed 1 and it never reaches the full loss.
# - "none": candidates as they come; a sampler that draws a class often counts it too much.

CORRECTIONS = {
    # name: (subtract log E[count] from the sampled logits, and from the target's logit too)
    "importance": (True, False),
    "tensorflow": (True, True),
    "none": (False, False),
}
CORRECTION_LABELS = {
    "importance": "importance sampling (log Q on the negatives)",
    "tensorflow": "TensorFlow (log Q on every logit)",
    "none": "no correction",
}
CORRECTION_SHORT = {"importance": "importance sampling", "tensorflow": "TensorFlow (log Q on every logit)",
                    "none": "no correction"}  # for narrow widgets


def correction_name(logq_correction: bool, logq_on_true: bool) -> str:
    """The ``CORRECTIONS`` key of a pair of flags (``logq_on_true`` counts only with ``logq_correction``)."""
    if not logq_correction:
        return "none"
    return "tensorflow" if logq_on_true else "importance"


@dataclass(frozen=True)
class SampledSoftmaxConfig:
    """How sampled softmax draws and corrects: the ONE place its defaults live.

    The Loss page, the Bug museum and ``training.TrainConfig`` read them from ``SAMPLED_SOFTMAX``.
    Measured on the bundled model (``benchmarks/p4_sampled_softmax.py``, ``sampled_softmax_check``):
    within a few % of the full loss at K = 256, gradient cosine above 0.9.
    """

    num_sampled: int = 256  # K: 256 of 30,522 classes is ~1% of the head's cost
    sampler: str = "unigram"  # the corpus' token counts: the proposal matches the vocabulary it samples
    power: float = 1.0  # unigram exponent: 1 = plain frequencies, closest to what the model predicts
    smoothing: float = 0.1  # added to every count: every id can be drawn, so the estimate stays unbiased
    replacement: bool = False  # K distinct ids, as TensorFlow's default sampler (unique=True)
    correction: str = "importance"  # a key of CORRECTIONS: the estimate of the full loss
    remove_accidental_hits: bool = True  # a sampled id equal to the target must not count it twice

    def __post_init__(self) -> None:
        if isinstance(self.num_sampled, bool) or not isinstance(self.num_sampled, int) or self.num_sampled < 1:
            raise ValueError(f"num_sampled (K) must be a whole number of at least 1; got {self.num_sampled!r}.")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {self.sampler!r}.")
        if not (isinstance(self.power, (int, float)) and 0 < self.power <= 2):
            raise ValueError(f"power must be in (0, 2]; got {self.power!r}.")
        if not (isinstance(self.smoothing, (int, float)) and self.smoothing > 0):
            raise ValueError("smoothing must be above 0, so that every id can be drawn.")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}; got {self.correction!r}.")

    @property
    def logq_correction(self) -> bool:
        return CORRECTIONS[self.correction][0]

    @property
    def logq_on_true(self) -> bool:
        return CORRECTIONS[self.correction][1]

    def loss_kwargs(self) -> dict:
        """Keyword arguments of ``sampled_softmax_loss`` for this configuration."""
        return dict(num_sampled=self.num_sampled, sampler=self.sampler, power=self.power, smoothing=self.smoothing,
                    replacement=self.replacement, remove_accidental_hits=self.remove_accidental_hits,
                    logq_correction=self.logq_correction, logq_on_true=self.logq_on_true)


SAMPLED_SOFTMAX = SampledSoftmaxConfig()


def proposal_distribution(
    sampler: str,
    vocab_size: int,
    *,
    counts: torch.Tensor | None = None,
    power: float = SAMPLED_SOFTMAX.power,
    smoothing: float = SAMPLED_SOFTMAX.smoothing,
    hidden: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """The distribution Q (V,) over the vocabulary that the negatives are drawn from (float64).

    - ``"uniform"``: ``1 / V``.
    - ``"unigram"``: ``(counts + smoothing) ** power``, normalised: the corpus' own token
      frequencies (``power = 1``; word2vec's negative sampling flattens them with 0.75), smoothed so
      every id can be drawn and has a finite ``log Q``. Needs ``counts``.
    - ``"log_uniform"``: Zipf's law by id, as TensorFlow's ``log_uniform_candidate_sampler``:
      ``Q(k) = log((k + 2) / (k + 1)) / log(V + 1)``. It assumes ids sorted by decreasing frequency;
      BERT's WordPiece ids are not (its first ids are [PAD] and ~1,000 [unused] tokens, which take
      most of this mass: ``proposal_mass_report`` measures it).
    - ``"softmax"``: the model's own detached distribution, averaged over the batch rows so one
      set of negatives serves every row. The best proposal, but it costs a full (M, V) softmax.

    >>> q = proposal_distribution("unigram", 3, counts=torch.tensor([9, 0, 0]), smoothing=1.0)
    >>> [round(x, 3) for x in q.tolist()]
    [0.833, 0.083, 0.083]
    """
    if sampler == "uniform":
        return torch.full((vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
    if sampler == "unigram":
        if counts is None:
            raise ValueError('The "unigram" sampler needs token counts (see token_counts).')
        if smoothing <= 0:
            raise ValueError("smoothing must be above 0, so that every id can be drawn.")
        c = torch.as_tensor(counts, dtype=torch.float64).cpu().clamp_min(0)
        if c.shape != (vocab_size,):
            raise ValueError(f"counts must be (V,) = ({vocab_size},); got {tuple(c.shape)}.")
        q = (c + smoothing) ** power
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


@dataclass(frozen=True)
class Negatives:
    """K classes drawn from Q once per batch (shared by every row, as TF's ``sampled_softmax_loss``).

    Without replacement the draw is an exponential race: class k arrives at ``T_k ~ Exp(q_k)``
    (its first appearance in a stream of draws with replacement) and the K first to arrive are
    the sample. That is exactly ``torch.multinomial(q, K, replacement=False)``'s law and that of
    TensorFlow's unique samplers (draws in proportion to q among the classes not drawn yet).
    ``kth_arrival`` and ``threshold`` are the K-th and (K+1)-th arrival times (``threshold`` is
    inf when the K cover every class that can be drawn; both NaN with replacement).
    """

    ids: torch.Tensor  # (K,) in draw order
    q: torch.Tensor  # (V,) float64: the proposal they were drawn from
    replacement: bool
    kth_arrival: float = math.nan
    threshold: float = math.nan

    @property
    def num_sampled(self) -> int:
        return int(self.ids.numel())

    def expected_count(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """How often each class is expected among the draws (float64): what log Q is the log of.

        With replacement ``K q``. Without, the inclusion probability given where the race stopped,
        ``π_k = 1 − exp(−q_k τ)`` with τ = ``threshold``: for a sampled class the others' K-th
        arrival is τ, and it is in the sample exactly when it arrives before that, so
        ``1[k sampled] / π_k`` has expectation 1 for every class and the importance-sampling estimate
        of Z is exactly unbiased (the idea behind priority sampling, Duffield, Lund & Thorup 2007).
        At K = V, π = 1 for every class.
        """
        q = self.q if ids is None else self.q[ids.to(self.q.device)]
        if self.replacement:
            return q * self.num_sampled
        if math.isinf(self.threshold):
            return (q > 0).double()
        return -torch.expm1(-q * self.threshold)

    def inclusion_given_others(self) -> torch.Tensor:
        """P(class k is among the K | every other class's arrival time), for all classes (V,).

        For a sampled class the others' K-th arrival is ``threshold``; for any other class it is
        ``kth_arrival``. Averaged over draws this is the exact inclusion probability π_k (which has
        no closed form for unequal q); ``tests/test_losses.py`` checks it against counted draws.
        """
        if self.replacement:
            raise ValueError("Inclusion probabilities are for sampling without replacement.")
        tau = torch.full_like(self.q, self.kth_arrival)
        tau[self.ids.to(self.q.device)] = self.threshold
        return torch.where(torch.isinf(tau), (self.q > 0).double(), -torch.expm1(-self.q * tau))


def draw_negatives(q: torch.Tensor, num_sampled: int, replacement: bool, generator: torch.Generator) -> Negatives:
    """K ids drawn from q (V,), with or without replacement (see ``Negatives``).

    >>> g = torch.Generator().manual_seed(0)
    >>> neg = draw_negatives(torch.tensor([0.5, 0.3, 0.2]), 3, replacement=False, generator=g)
    >>> sorted(neg.ids.tolist()), neg.expected_count().tolist()
    ([0, 1, 2], [1.0, 1.0, 1.0])
    """
    if generator is None:
        raise ValueError("Sampling needs a torch.Generator: the global RNG is never used.")
    if isinstance(num_sampled, bool) or int(num_sampled) < 1:
        raise ValueError(f"num_sampled must be at least 1; got {num_sampled}.")
    K = int(num_sampled)
    q = q.to(device=generator.device, dtype=torch.float64)
    if replacement:
        return Negatives(torch.multinomial(q, K, replacement=True, generator=generator), q, True)
    support = int((q > 0).sum())
    if K > support:
        raise ValueError(f"Cannot draw {K} distinct classes from {support}; lower K or sample with replacement.")
    u = torch.rand(q.shape, generator=generator, dtype=torch.float64, device=q.device)
    arrival = torch.where(q > 0, -torch.log1p(-u) / q, torch.full_like(q, math.inf))  # (V,) T_k ~ Exp(q_k)
    if K == support:
        ids = torch.argsort(arrival)[:K]
        return Negatives(ids, q, False, float(arrival[ids[-1]]), math.inf)
    first = torch.topk(arrival, K + 1, largest=False)  # ascending: the K + 1 first arrivals
    return Negatives(first.indices[:K], q, False, float(first.values[K - 1]), float(first.values[K]))


def sampled_softmax_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    num_sampled: int = SAMPLED_SOFTMAX.num_sampled,
    sampler: str = SAMPLED_SOFTMAX.sampler,
    counts: torch.Tensor | None = None,
    power: float = SAMPLED_SOFTMAX.power,
    smoothing: float = SAMPLED_SOFTMAX.smoothing,
    replacement: bool = SAMPLED_SOFTMAX.replacement,
    remove_accidental_hits: bool = SAMPLED_SOFTMAX.remove_accidental_hits,
    logq_correction: bool = SAMPLED_SOFTMAX.logq_correction,
    logq_on_true: bool = SAMPLED_SOFTMAX.logq_on_true,
    negatives: Negatives | None = None,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Softmax over the true class plus K sampled classes instead of all V (defaults: ``SAMPLED_SOFTMAX``).

    For row i the candidates are its target y_i and the K ids of ``negatives`` (drawn here from
    the ``sampler``'s proposal with ``generator`` when not given), shared by all rows. Logits are
    computed only for those: ``hidden @ weight[ids].T`` is (M, K), never (M, V) (except for the
    "softmax" sampler, whose proposal itself is a full softmax). Then, with log Q = log of each
    class's expected count among the draws (``Negatives.expected_count``):

    - ``logq_correction`` and not ``logq_on_true`` (the default, "importance"): log Q is subtracted
      from the sampled logits only. ``exp(z_y) + sum_s exp(z_s) / E[count_s]`` (hits removed) is an
      unbiased estimate of the partition function, so the loss estimates full CE: slightly low on
      average, converging as K grows, and exactly full CE at K = V without replacement.
    - ``logq_correction`` and ``logq_on_true`` ("tensorflow"): log Q is subtracted from the true
      logit too, as TensorFlow's ``sampled_softmax_loss``. The loss is then the loss of picking the
      target out of the 1 + K candidates, not an estimate of full CE (far below it at small K).
    - neither ("none"): the candidates as they are.
    - ``remove_accidental_hits``: a sampled id equal to the row's target would count the true
      class twice (once as a negative); its logit is set to -inf for that row.

    Diagnostics: ``sampled_ids`` (K,), ``num_hits``, ``K``, ``unique_sampled``, ``correction``,
    ``log_expected_sampled`` (K,), ``log_expected_true`` (M,), ``full_softmax`` (True only for
    the "softmax" sampler).
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"Expected hidden (M, H) and weight (V, H); got {tuple(hidden.shape)} and {tuple(weight.shape)}.")
    if targets.dim() != 1 or targets.shape[0] != hidden.shape[0]:
        raise ValueError(f"Expected targets (M,) = ({hidden.shape[0]},); got {tuple(targets.shape)}.")
    V = weight.shape[0]
    if negatives is None:
        q = proposal_distribution(sampler, V, counts=counts, power=power, smoothing=smoothing, hidden=hidden,
                                  weight=weight, bias=bias)
        negatives = draw_negatives(q, num_sampled, replacement, generator)
    sampled_ids = negatives.ids.to(weight.device)  # (K,)
    log_expected_sampled = torch.log(negatives.expected_count(negatives.ids)).float().to(weight.device)  # (K,)
    log_expected_true = torch.log(negatives.expected_count(targets)).float().to(weight.device)  # (M,)
    info = {"variant": "sampled", "sampler": sampler, "K": negatives.num_sampled,
            "replacement": negatives.replacement, "logq_correction": logq_correction, "logq_on_true": logq_on_true,
            "correction": correction_name(logq_correction, logq_on_true),
            "remove_accidental_hits": remove_accidental_hits, "sampled_ids": sampled_ids.detach(),
            "unique_sampled": int(sampled_ids.unique().numel()), "full_softmax": sampler == "softmax",
            "log_expected_sampled": log_expected_sampled.detach(), "negatives": negatives}
    if hidden.shape[0] == 0:
        return _empty(hidden, num_hits=0, log_expected_true=log_expected_true.detach(), **info)

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
        true_logits, sampled_logits, targets, sampled_ids, log_expected_sampled, log_expected_true,
        remove_accidental_hits=remove_accidental_hits, logq_correction=logq_correction, logq_on_true=logq_on_true,
    )
    return LossOutput(out.loss, out.per_token, {**info, **out.diagnostics})


def sampled_softmax_from_logits(
    true_logits: torch.Tensor,
    sampled_logits: torch.Tensor,
    targets: torch.Tensor,
    sampled_ids: torch.Tensor,
    log_expected_sampled: torch.Tensor,
    log_expected_true: torch.Tensor,
    *,
    remove_accidental_hits: bool = SAMPLED_SOFTMAX.remove_accidental_hits,
    logq_correction: bool = SAMPLED_SOFTMAX.logq_correction,
    logq_on_true: bool = SAMPLED_SOFTMAX.logq_on_true,
) -> LossOutput:
    """The sampled-softmax loss from candidate logits: true (M,), sampled (M, K), log Q (K,) and (M,).

    The candidate row is ``[z_y - log Q(y), z_s1 - log Q(s1), ...]`` (``- log Q(y)`` only with
    ``logq_on_true``) and the true class sits in column 0, so the loss is ``cross_entropy(candidates, 0)``.
    """
    M = true_logits.shape[0]
    if logq_correction:
        sampled_logits = sampled_logits - log_expected_sampled[None, :]
        if logq_on_true:
            true_logits = true_logits - log_expected_true
    hits = sampled_ids[None, :] == targets[:, None]  # (M, K)
    if remove_accidental_hits:
        sampled_logits = sampled_logits.masked_fill(hits, float("-inf"))
    candidates = torch.cat([true_logits[:, None], sampled_logits], dim=1)  # (M, 1 + K)
    per_token = F.cross_entropy(candidates, targets.new_zeros(M), reduction="none")  # (M,)
    return LossOutput(per_token.mean(), per_token, {
        "empty": False, "M": int(M), "num_hits": int(hits.sum()) if remove_accidental_hits else 0,
        "hits_found": int(hits.sum()), "log_expected_true": log_expected_true.detach(),
    })


def proposal_mass_report(q: torch.Tensor, tokenizer, counts: torch.Tensor | None = None) -> dict[str, float]:
    """Where a proposal puts its mass: on [unused*] ids, on special tokens, and on ids the corpus never has.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> tok = load_default_tokenizer()
    >>> r = proposal_mass_report(proposal_distribution("log_uniform", len(tok)), tok)
    >>> r["unused"] > 0.5
    True
    """
    from mlm_core.data import special_ids

    V = q.shape[0]
    names = tokenizer.convert_ids_to_tokens(list(range(min(V, len(tokenizer)))))
    unused = torch.tensor([n.startswith("[unused") for n in names] + [False] * (V - len(names)))
    special = torch.zeros(V, dtype=torch.bool)
    special[[i for i in special_ids(tokenizer) if i < V]] = True
    q = q.double().cpu()
    report = {"unused": float(q[unused].sum()), "special": float(q[special].sum())}
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id < V:
        report["pad"] = float(q[tokenizer.pad_token_id])
    if counts is not None:
        report["never_in_corpus"] = float(q[torch.as_tensor(counts).cpu() == 0].sum())
    return report


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
        row = z.clone().requires_grad_(True)
        out = sampled_softmax_from_logits(
            row[y].reshape(1), row[ids][None, :], torch.tensor([y], device=z.device), ids,
            d["log_expected_sampled"].to(z.device), d["log_expected_true"][position].reshape(1).to(z.device),
            remove_accidental_hits=d["remove_accidental_hits"], logq_correction=d["logq_correction"],
            logq_on_true=d["logq_on_true"],
        )
        (grad,) = torch.autograd.grad(out.loss, row)
        grads["sampled"] = grad
    return grads


# --------------------------------------------------------------------------------------------
# The K sweep: how each correction approaches (or not) the full loss
# --------------------------------------------------------------------------------------------


def _loss_and_grad(fn, hidden, weight, bias):
    """One forward + backward (to hidden, weight and bias): (loss, d loss / d hidden (flat), seconds)."""
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


def _full_fn(targets):
    def fn(h, w, b):
        logits = h @ w.T  # (M, V)
        return full_cross_entropy(logits if b is None else logits + b, targets)
    return fn


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(F.cosine_similarity(a.double(), b.double(), dim=0))


def sweep_ks(vocab_size: int, ks: Sequence[int] = (16, 64, 256, 1024, 4096)) -> list[int]:
    """The K values of the sweep: ``ks`` below V, then V itself (every class)."""
    return sorted({int(k) for k in ks if 0 < int(k) < vocab_size} | {int(vocab_size)})


def sampled_softmax_sweep(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    ks: Sequence[int] | None = None,
    config: SampledSoftmaxConfig = SAMPLED_SOFTMAX,
    counts: torch.Tensor | None = None,
    corrections: Sequence[str] = tuple(CORRECTIONS),
    repeats: int = 5,
    generator: torch.Generator,
) -> list[dict]:
    """Sampled softmax against the full loss for each K (default ``sweep_ks(V)``, K = V included) and
    each correction, on ``repeats`` draws of the negatives per K (every correction sees the same draws).

    ``config`` gives the sampler, its power and smoothing, replacement and hit removal. One dict per
    (K, correction): ``K``, ``correction``, ``label``, ``loss`` (mean over draws), ``loss_std``,
    ``full_loss``, ``bias`` (mean sampled − full), ``rel_bias`` (bias / full), ``abs_bias``,
    ``grad_cosine`` (mean cosine between the gradient with respect to ``hidden`` and the full one:
    the direction the encoder is pushed), ``time_ms`` (median of proposal + draw + forward + backward),
    ``full_time_ms``, ``time_ratio`` (sampled / full), ``sampler``, ``replacement``. Ready for pandas.
    """
    V = weight.shape[0]
    if hidden.shape[0] == 0:
        return []
    full_fn = _full_fn(targets)
    full_times = []
    for _ in range(max(1, repeats)):
        full_loss, full_grad, seconds = _loss_and_grad(full_fn, hidden, weight, bias)
        full_times.append(seconds)
    full_ms = float(torch.tensor(full_times).median()) * 1e3
    start = time.perf_counter()
    q = proposal_distribution(config.sampler, V, counts=counts, power=config.power, smoothing=config.smoothing,
                              hidden=hidden, weight=weight, bias=bias)
    proposal_seconds = time.perf_counter() - start
    rows = []
    for k in (sweep_ks(V) if ks is None else [int(k) for k in ks]):
        if not config.replacement and k > int((q > 0).sum()):
            continue
        measured = {c: ([], [], []) for c in corrections}
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            negatives = draw_negatives(q, k, config.replacement, generator)
            draw_seconds = proposal_seconds + time.perf_counter() - start
            for correction in corrections:
                logq, on_true = CORRECTIONS[correction]

                def fn(h, w, b, logq=logq, on_true=on_true):
                    return sampled_softmax_loss(h, w, b, targets, sampler=config.sampler, negatives=negatives,
                                                remove_accidental_hits=config.remove_accidental_hits,
                                                logq_correction=logq, logq_on_true=on_true)
                loss, grad, seconds = _loss_and_grad(fn, hidden, weight, bias)
                losses_, cosines, times = measured[correction]
                losses_.append(loss)
                cosines.append(_cosine(grad, full_grad))
                times.append(seconds + draw_seconds)
        for correction in corrections:
            losses_, cosines, times = measured[correction]
            losses_t = torch.tensor(losses_, dtype=torch.float64)
            time_ms = float(torch.tensor(times).median()) * 1e3
            mean = float(losses_t.mean())
            rows.append({
                "K": k, "correction": correction, "label": CORRECTION_LABELS[correction],
                "logq_correction": CORRECTIONS[correction][0], "logq_on_true": CORRECTIONS[correction][1],
                "sampler": config.sampler, "replacement": config.replacement,
                "loss": mean, "loss_std": float(losses_t.std()) if len(losses_) > 1 else 0.0,
                "full_loss": full_loss, "bias": mean - full_loss,
                "rel_bias": (mean - full_loss) / full_loss if full_loss else float("nan"),
                "abs_bias": float((losses_t - full_loss).abs().mean()),
                "grad_cosine": float(torch.tensor(cosines).mean()),
                "time_ms": time_ms, "full_time_ms": full_ms,
                "time_ratio": time_ms / full_ms if full_ms > 0 else float("nan"),
            })
    return rows


def sweep_table(rows: Sequence[dict]) -> list[dict]:
    """The sweep as a table for people: one row per (K, correction), 4 significant digits."""
    return [{"K": r["K"], "correction": CORRECTION_SHORT[r["correction"]], "loss": significant(r["loss"]),
             "± std": significant(r["loss_std"], 3), "full": significant(r["full_loss"]),
             "bias %": significant(100 * r["rel_bias"], 3), "grad cosine": significant(r["grad_cosine"]),
             "ms": significant(r["time_ms"], 3), "× full time": significant(r["time_ratio"], 3)} for r in rows]


def reaches_full_loss(row: dict, tolerance: float = 1e-4) -> bool:
    """True when a sweep row equals the full loss (every draw within ``tolerance`` relative, cosine 1)."""
    scale = max(1.0, abs(row["full_loss"]))
    return row["abs_bias"] <= tolerance * scale and row["grad_cosine"] >= 1 - tolerance


def sweep_summary(rows: Sequence[dict], vocab_size: int | None = None) -> list[str]:
    """One sentence per correction saying what the sweep measured at its largest K (markdown).

    Whether a correction "reaches the full loss" is read from the numbers (``reaches_full_loss``),
    never assumed: with replacement none of them is exact at K = V.
    """
    sentences = []
    for correction in dict.fromkeys(r["correction"] for r in rows):
        mine = sorted((r for r in rows if r["correction"] == correction), key=lambda r: r["K"])
        first, last = mine[0], mine[-1]
        at = "K = V" if vocab_size is not None and last["K"] == vocab_size else f"K = {last['K']:,}"
        how = "with" if last["replacement"] else "without"
        text = (f"**{CORRECTION_LABELS[correction]}**: at K = {first['K']:,}, {readable(first['loss'])} against the "
                f"full {readable(first['full_loss'])} (bias {signed(first['rel_bias'], '.1%')}, gradient cosine "
                f"{readable(first['grad_cosine'], 3)}); at {at} ({last['K']:,} draws {how} replacement), ")
        if reaches_full_loss(last):
            text += "exactly the full loss: every class is a candidate, each expected once (π = 1)."
        elif abs(last["rel_bias"]) < 0.01 and last["grad_cosine"] > 0.99:
            text += (f"{readable(last['loss'])} (bias {signed(last['rel_bias'], '.1%')}, gradient cosine "
                     f"{readable(last['grad_cosine'], 3)}): close to the full loss, not equal to it.")
        else:
            text += (f"{readable(last['loss'])} (bias {signed(last['rel_bias'], '.1%')}, gradient cosine "
                     f"{readable(last['grad_cosine'], 3)}): not the full loss.")
        sentences.append(text)
    return sentences


# --------------------------------------------------------------------------------------------
# Rows for the Loss page's tables and figures
# --------------------------------------------------------------------------------------------


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



# --------------------------------------------------------------------------------------------
# One batch for the Loss page and the Bug museum, and everything they show about it
# --------------------------------------------------------------------------------------------

NEGATIVES_PURPOSE = 3  # LossBatch.generator(...) for the sampled negatives: one draw for both pages
SWEEP_PURPOSE = 4  # ... for the K sweep and the sampled-softmax check


@dataclass
class LossBatch:
    """One masked batch through a model: what the Loss page and the Bug museum both compute on.

    One vocabulary on both pages and in the batch audit (Hugging Face's names): ``original_ids``
    (B, T) the tokens before masking, ``input_ids`` (B, T) what the model sees, ``labels`` (B, T)
    the original id where a token was selected and -100 elsewhere. ``logits (M, V)``,
    ``targets (M,)``, ``hidden (M, H)``, ``weight (V, H)`` and ``bias (V,)`` are the model's head on
    the M selected rows (row-major), detached, with ``logits == hidden @ weight.T + bias``; all None
    without a model. ``counts`` (V,) are the corpus' token counts (class weights, unigram proposal).
    ``tokens`` names each selected row ("2:5 cat"), ``decisions`` gives its decision.
    """

    tokenizer: Any
    texts: list[str]
    config: MaskingConfig
    seed: int
    encoded: Encoded
    result: MaskingResult
    counts: torch.Tensor
    model: Any = None
    logits: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    tokens: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    @property
    def original_ids(self) -> torch.Tensor:
        return self.encoded.input_ids

    @property
    def input_ids(self) -> torch.Tensor:
        return self.result.input_ids

    @property
    def labels(self) -> torch.Tensor:
        return self.result.labels

    @property
    def attention_mask(self) -> torch.Tensor:
        return self.encoded.attention_mask

    @property
    def mask_id(self) -> int:
        return int(self.tokenizer.mask_token_id)

    @property
    def vocab_size(self) -> int:
        """The tokenizer's size: where random replacements come from."""
        return len(self.tokenizer)

    def generator(self, purpose: int) -> torch.Generator:
        """A generator for one use of this batch (the negatives, an exhibit's draws): the seed, offset by ``purpose``."""
        return torch.Generator().manual_seed(int(self.seed) * 1_000 + int(purpose))

    def logits_for(self, labels: torch.Tensor, input_ids: torch.Tensor | None = None):
        """``(logits (M', V), targets (M',))`` of the model where ``labels`` are set, on ``input_ids``
        (default: what the model sees). For the museum's other label sets."""
        if self.model is None:
            raise InputError("This exhibit needs a model's logits; load a model first.")
        ids = self.input_ids if input_ids is None else input_ids
        with torch.no_grad():
            logits, targets = masked_lm_logits(self.model, ids, self.attention_mask, labels)
        return logits.float().cpu(), targets.cpu()


def loss_batch(model, tokenizer, texts: Sequence[str], config: MaskingConfig | None = None, *, seed: int,
               max_length: int = 64, counts: torch.Tensor | None = None) -> LossBatch:
    """Encode ``texts``, mask them with the rule ``config`` and ``seed`` (the Masking page's generator),
    and run ``model``'s encoder once and its head on the selected rows only (no model: masks only).

    ``counts`` default to the token counts of ``texts``; pages pass the corpus' counts.
    """
    config = config or MaskingConfig()
    texts = [t for t in texts if t and t.strip()]
    encoded = encode(tokenizer, texts, max_length=max_length)
    result = mask_batch(tokenizer, encoded, config, torch.Generator().manual_seed(int(seed)))
    selected = result.labels != IGNORE_INDEX  # (B, T)
    where = selected.nonzero().tolist()  # row-major, as masked_lm_hidden orders its rows
    decisions = [Decision(int(result.decisions[r, p])).name for r, p in where]
    names = tokenizer.convert_ids_to_tokens(result.labels[selected].tolist())
    tokens = [f"{r}:{p} {name}" for (r, p), name in zip(where, names)]
    if model is None:
        V = len(tokenizer)
        counts = token_counts(tokenizer, texts, V) if counts is None else counts
        return LossBatch(tokenizer, texts, config, int(seed), encoded, result, counts, tokens=tokens,
                         decisions=decisions)
    with torch.no_grad():
        hidden, weight, bias, targets = masked_lm_hidden(model, result.input_ids, encoded.attention_mask, result.labels)
        hidden, weight, bias = hidden.float().cpu(), weight.detach().float().cpu(), bias.detach().float().cpu()
        logits = hidden @ weight.T + bias  # (M, V): the head's output on the selected rows
    counts = token_counts(tokenizer, texts, weight.shape[0]) if counts is None else counts
    return LossBatch(tokenizer, texts, config, int(seed), encoded, result, counts, model, logits, targets.cpu(),
                     hidden, weight, bias, tokens, decisions)


@dataclass(frozen=True)
class LossSettings:
    """The Loss page's settings; the Bug museum computes its "correct" values with the defaults."""

    scheme: str = "inverse"  # weighted loss: 1 / count, so each token type counts equally in expectation
    smoothing: float = 1.0  # weighted loss: added to every count, so unseen tokens get a finite weight
    sampled: SampledSoftmaxConfig = SAMPLED_SOFTMAX


LOSS_SETTINGS = LossSettings()


def batch_losses(batch: LossBatch, settings: LossSettings = LOSS_SETTINGS) -> dict[str, LossOutput]:
    """Full, weighted and sampled losses on the batch's selected rows: the numbers both pages show.

    The sampled negatives come from ``batch.generator(NEGATIVES_PURPOSE)``, so the same batch and
    settings give the same draw on every page. The sampled output's diagnostics add
    ``grad_cosine``: the cosine between its gradient with respect to the hidden states and the
    full loss's, on this draw.
    """
    if batch.logits is None:
        raise InputError("The losses need a model; load a model first.")
    weights = token_frequency_weights(batch.counts, scheme=settings.scheme, smoothing=settings.smoothing)
    cfg = settings.sampled
    V = batch.weight.shape[0]
    q = proposal_distribution(cfg.sampler, V, counts=batch.counts, power=cfg.power, smoothing=cfg.smoothing,
                              hidden=batch.hidden, weight=batch.weight, bias=batch.bias)
    negatives = draw_negatives(q, cfg.num_sampled, cfg.replacement, batch.generator(NEGATIVES_PURPOSE))

    def sampled_fn(h, w, b):
        return sampled_softmax_loss(h, w, b, batch.targets, sampler=cfg.sampler, negatives=negatives,
                                    remove_accidental_hits=cfg.remove_accidental_hits,
                                    logq_correction=cfg.logq_correction, logq_on_true=cfg.logq_on_true)

    with torch.no_grad():
        outputs = {
            "full": full_cross_entropy(batch.logits, batch.targets),
            "weighted": weighted_cross_entropy(batch.logits, batch.targets, weights),
            "sampled": sampled_fn(batch.hidden, batch.weight, batch.bias),
        }
    cosine = float("nan")
    if len(batch.targets):
        _, full_grad, _ = _loss_and_grad(_full_fn(batch.targets), batch.hidden, batch.weight, batch.bias)
        _, sampled_grad, _ = _loss_and_grad(sampled_fn, batch.hidden, batch.weight, batch.bias)
        cosine = _cosine(sampled_grad, full_grad)
    s = outputs["sampled"]
    outputs["sampled"] = LossOutput(s.loss, s.per_token, {**s.diagnostics, "grad_cosine": cosine})
    return outputs


SAMPLER_WORDS = {
    "uniform": "every id equally likely",
    "unigram": "the corpus' token frequencies",
    "log_uniform": "Zipf's law by token id (TensorFlow's default)",
    "softmax": "the model's own predictions",
}


def loss_sentences(outputs: dict[str, LossOutput], settings: LossSettings = LOSS_SETTINGS) -> dict[str, str]:
    """One sentence per variant, at its number: what the value estimates, with this batch's numbers."""
    full = float(outputs["full"].loss)
    M = outputs["full"].diagnostics.get("M", 0)
    sentences = {"full": f"**Full softmax {readable(full)}**: the MLM loss itself, the mean over the {M} selected "
                         "tokens of −log p(true token), p a softmax over the whole vocabulary."}
    if "weighted" in outputs:
        w = outputs["weighted"]
        d = w.diagnostics
        mean_w = float(d["target_weights"].mean()) if "target_weights" in d else float("nan")
        sentences["weighted"] = (
            f"**Weighted {readable(float(w.loss))}**: the same cross-entropies averaged with weight w[y] "
            f"({settings.scheme} of the corpus count: rare tokens count more), Σ w·CE / Σ w as "
            f"`F.cross_entropy(weight=w)`. The other convention, (w·CE).mean(), gives "
            f"{readable(d.get('mean_of_weighted', float('nan')))}: with weights that average 1 over the corpus "
            f"both estimate the weighted risk E[w·CE], and they differ by this batch's mean weight, "
            f"{readable(mean_w)}.")
    if "sampled" in outputs:
        s = outputs["sampled"]
        d = s.diagnostics
        value, cos = float(s.loss), d.get("grad_cosine", float("nan"))
        how = (f"K = {d['K']:,} classes drawn {'with' if d['replacement'] else 'without'} replacement from "
               f"{SAMPLER_WORDS.get(d['sampler'], d['sampler'])}")
        off = f"{signed((value - full) / full, '.1%')} against the full loss" if full else ""
        if d["correction"] == "importance":
            sentences["sampled"] = (
                f"**Sampled {readable(value)}**: an estimate of the full loss from the true token and {how}, "
                f"each weighted by 1 / its expected count (importance sampling): {off} on this draw, and its "
                f"gradient points along the full one with cosine {readable(cos, 3)}.")
        elif d["correction"] == "tensorflow":
            sentences["sampled"] = (
                f"**Sampled {readable(value)}** (TensorFlow's correction): not an estimate of the full loss but "
                f"the loss of picking the true token out of its 1 + K candidates, with the true token and {how}; "
                f"{off}, gradient cosine {readable(cos, 3)} with the full loss's.")
        else:
            sentences["sampled"] = (
                f"**Sampled {readable(value)}** (no correction): the loss of picking the true token among "
                f"the true token and {how}, counting each drawn class as often as it was drawn; {off}, "
                f"gradient cosine {readable(cos, 3)} with the full loss's.")
    return sentences


def sampled_softmax_check(model, tokenizer, sentences: Sequence[str], *, num_sentences: int = 32,
                          max_length: int = 128, draws: int = 5, seed: int = 0,
                          config: SampledSoftmaxConfig = SAMPLED_SOFTMAX, masking: MaskingConfig | None = None,
                          max_rel_error: float = 0.10, min_cosine: float = 0.9) -> dict:
    """The sampled-softmax target on one corpus: is the default within 10% of the full loss, cosine ≥ 0.9?

    ``num_sentences`` sentences of ``sentences`` (chosen by ``seed``; at most ``max_length`` tokens
    each), masked with ``masking`` (BERT's rule) and ``seed``; counts for the proposal from all of
    ``sentences`` (the corpus being trained on); ``draws`` draws of K negatives. Returns ``M``,
    ``K``, ``draws``, ``full_loss``, ``loss`` (mean over draws), ``rel_error`` ((loss − full) / full),
    ``grad_cosine`` (mean, with respect to the hidden states) and ``meets_target``.
    """
    texts = pick_sentences(sentences, num_sentences, seed)
    V = model.get_output_embeddings().weight.shape[0]
    counts = token_counts(tokenizer, sentences, V)
    batch = loss_batch(model, tokenizer, texts, masking, seed=seed, max_length=max_length, counts=counts)
    rows = sampled_softmax_sweep(batch.hidden, batch.weight, batch.bias, batch.targets, ks=[config.num_sampled],
                                 config=config, counts=counts, corrections=[config.correction], repeats=draws,
                                 generator=batch.generator(SWEEP_PURPOSE))
    if not rows:
        raise InputError("Nothing was selected in this batch: use more sentences or another seed.")
    row = rows[0]
    return {"M": int(batch.targets.numel()), "K": config.num_sampled, "draws": draws, "correction": config.correction,
            "sampler": config.sampler, "replacement": config.replacement, "full_loss": row["full_loss"],
            "loss": row["loss"], "rel_error": row["rel_bias"], "grad_cosine": row["grad_cosine"],
            "meets_target": abs(row["rel_bias"]) <= max_rel_error and row["grad_cosine"] >= min_cosine}


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits, still a number (for tables that sort).

    >>> significant(3.3185198307037354), significant(0.000123456)
    (3.319, 0.0001235)
    """
    x = float(value)
    return x if not math.isfinite(x) or x == 0 else float(f"{x:.{digits}g}")


def readable(value, digits: int = 4) -> str:
    """A number for people: ``digits`` significant digits, thousands separators, NaN as "NaN".

    >>> readable(3.3185198307037354), readable(0.076341), readable(30522), readable(123456.7), readable(float("nan"))
    ('3.319', '0.07634', '30,522', '123,457', 'NaN')
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def uniform_guess(vocab_size: int) -> float:
    """ln V: the cross-entropy of a guess spread evenly over the V tokens (where an untrained model starts).

    >>> round(uniform_guess(30522), 3)
    10.326
    """
    return math.log(int(vocab_size))


def uniform_guess_label(vocab_size: int) -> str:
    """The uniform-guess baseline as a learner reads it, with the number and what it is.

    >>> uniform_guess_label(30522)
    'ln V = 10.33 (uniform guess over V = 30,522 tokens)'
    """
    return f"ln V = {uniform_guess(vocab_size):.2f} (uniform guess over V = {int(vocab_size):,} tokens)"


def signed(value: float, spec: str = ".2f") -> str:
    """A signed number for people: "+1.24" or "−1.24" (a true minus sign); what rounds to zero reads "0.00", never "−0.00".

    ``spec`` is a format spec without the sign (".2f", ".3g", ".1%").

    >>> signed(1.2449), signed(-1.2449), signed(-0.004), signed(0.0), signed(-0.0004, ".1%"), signed(0.031, ".0%")
    ('+1.24', '−1.24', '0.00', '0.00', '0.0%', '+3%')
    """
    x = float(value)
    text = format(abs(x), spec)
    if math.isnan(x):
        return "NaN"
    if not any(c in "123456789" for c in text.split("e")[0]) and math.isfinite(x):
        return text  # rounds to zero: no sign
    return ("+" if x > 0 else "−") + text


def metric_delta(value: float, spec: str = ".2f") -> str:
    """``signed`` for ``st.metric``'s delta: an ASCII "-", which Streamlit reads to point its arrow down.

    >>> metric_delta(-0.139, ".3g"), metric_delta(-0.0001), metric_delta(0.25, ".0%")
    ('-0.139', '0.00', '+25%')
    """
    return signed(value, spec).replace("−", "-")


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
            row[variant] = significant(value)
    return rows


def target_smoothed_counts(counts: torch.Tensor, targets: torch.Tensor, smoothing: float = 1.0) -> list[float]:
    """Corpus count + smoothing of each target (M floats): where this batch sits on the weights plot."""
    return [float(c) + smoothing for c in torch.as_tensor(counts)[targets.cpu()].tolist()]
