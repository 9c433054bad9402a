"""Sampled softmax: the MLM loss over the true class plus K sampled classes instead of all V.

The output layer of a masked LM costs (M, V) logits per step; sampled softmax computes the logits of
each row's target and of K classes drawn once per batch from a proposal Q, and corrects for how
often each class is drawn. Sources: TensorFlow's ``tf.nn.sampled_softmax_loss`` (and its
``_compute_sampled_logits``), Jean et al. 2015 ("On using very large target vocabulary for neural
machine translation", §3), and Bengio & Senécal 2008 for importance sampling of the partition
function. ``sampled_softmax_sweep`` measures each correction against the full loss as K grows to V.

Shapes: B = batch, T = sequence length, V = vocabulary, H = hidden size, M = selected (masked)
positions, K = sampled classes. ``hidden (M, H)``, ``weight (V, H)``, ``bias (V,)``,
``targets (M,)``, the proposal ``q (V,)``, the negatives' ``ids (K,)``; the candidate logits are
(M, 1 + K), never (M, V) (except for the "softmax" proposal, itself a full softmax).

Its defaults live in ``SAMPLED_SOFTMAX`` (``SampledSoftmaxConfig``): the Loss page, the Bug museum
and ``training.TrainConfig`` all read them there. Every loss returns ``losses.LossOutput``; an empty
batch (M = 0) gives exactly 0, as in ``losses``.

>>> import torch
>>> from mlm_core.losses import full_cross_entropy
>>> g = torch.Generator().manual_seed(0)
>>> hidden, weight = torch.randn(4, 8, generator=g), torch.randn(50, 8, generator=g)
>>> targets = torch.tensor([1, 2, 3, 4])
>>> out = sampled_softmax_loss(hidden, weight, None, targets, num_sampled=50, sampler="uniform", generator=g)
>>> full = full_cross_entropy(hidden @ weight.T, targets)
>>> abs(out.loss.item() - full.loss.item()) < 1e-5  # K = V without replacement: exactly the full loss
True
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import special_ids
from mlm_core.losses import LossOutput, cosine, empty_loss, full_head_loss, loss_and_grad

SAMPLERS = ("uniform", "unigram", "log_uniform", "softmax")
SAMPLER_WORDS = {  # what each sampler draws from, as the pages say it
    "uniform": "every id equally likely",
    "unigram": "the corpus' token frequencies",
    "log_uniform": "Zipf's law by token id (TensorFlow's default)",
    "softmax": "the model's own predictions",
}

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


def divisor_words(replacement: bool) -> str:
    """What importance sampling divides a sampled class by, as the pages say it (``Negatives.expected_count``).

    With replacement it is the class's expected count K·q among the draws. Without replacement a class is drawn at
    most once, so its "expected count" is a probability: the chance it is among the K given where the others' race
    stopped, 1 − exp(−q·τ) (priority sampling, Duffield, Lund & Thorup 2007).

    >>> divisor_words(False)
    'its inclusion probability given the other draws, 1 − exp(−q·τ) (priority sampling)'
    """
    if replacement:
        return "its expected count among the K draws, K·q"
    return "its inclusion probability given the other draws, 1 − exp(−q·τ) (priority sampling)"


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
        no closed form for unequal q); ``tests/test_sampled_softmax.py`` checks it against counted draws.
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
        return empty_loss(hidden, num_hits=0, log_expected_true=log_expected_true.detach(), **info)

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
# The gradient sampled softmax sends to the logits of one position (the Loss page's gradient view)
# --------------------------------------------------------------------------------------------


def sampled_logit_gradient(logits: torch.Tensor, targets: torch.Tensor, position: int,
                           sampled: LossOutput) -> torch.Tensor:
    """d(loss)/d(logits[position]) (V,) of the sampled loss ``sampled``, times M: ``softmax - onehot`` over the
    candidates only (the ids in its diagnostics, with the same log Q and hit removal); every other class gets
    exactly 0. (``loss_registry.logit_gradients`` gives every variant's.)
    """
    z = logits[position].detach().float()  # (V,)
    y = int(targets[position])
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
    return grad


# --------------------------------------------------------------------------------------------
# The K sweep: how each correction approaches (or not) the full loss
# --------------------------------------------------------------------------------------------

def sweep_ks(vocab_size: int, ks: Sequence[int] = (16, 64, 256, 1024, 4096)) -> list[int]:
    """The K values of the sweep: ``ks`` below V, then V itself (every class)."""
    return sorted({int(k) for k in ks if 0 < int(k) < vocab_size} | {int(vocab_size)})


# Draws per K in the sweep: the mean error of so many draws has a standard error of spread / sqrt(50), so a
# bias of a fraction of the per-draw spread shows (5 draws gave -0.01% at K = 256 where 200 gave -2.3% ± 0.2%).
SWEEP_DRAWS = 50
SWEEP_TIMING_REPEATS = 3  # forward + backward timed per K (the three corrections do the same work)
SWEEP_COSINE_DRAWS = 10  # the gradient cosine, the dearer measurement (a (M, V) @ (V, H) product at large K)


def _hidden_gradient(g_true: torch.Tensor, g_sampled: torch.Tensor, targets: torch.Tensor, ids: torch.Tensor,
                     weight: torch.Tensor) -> torch.Tensor:
    """d loss / d hidden (C, M, H) for C losses, from their gradients at the candidate logits: the target's
    (C, M) and the sampled ids' (C, M, K). A repeated id (with replacement) adds up, as autograd would."""
    C, M, K = g_sampled.shape
    V = weight.shape[0]
    w_true = weight.index_select(0, targets)  # (M, H)
    out = g_true[..., None] * w_true[None]  # (C, M, H)
    if K < V // 4:  # few candidates: gather their rows of the output layer
        return out + g_sampled @ weight.index_select(0, ids)  # (C, M, K) @ (K, H)
    dense = torch.zeros(C * M, V, dtype=g_sampled.dtype, device=g_sampled.device)  # many: one dense matmul
    dense.index_add_(1, ids, g_sampled.reshape(C * M, K))
    return out + (dense @ weight).reshape(C, M, -1)  # (C·M, V) @ (V, H)


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
    repeats: int = SWEEP_DRAWS,
    timing_repeats: int = SWEEP_TIMING_REPEATS,
    cosine_draws: int = SWEEP_COSINE_DRAWS,
    generator: torch.Generator,
    on_progress=None,
) -> list[dict]:
    """Sampled softmax against the full loss for each K (default ``sweep_ks(V)``, K = V included) and
    each correction, on ``repeats`` draws of the negatives per K (every correction sees the same draws).

    ``config`` gives the sampler, its power and smoothing, replacement and hit removal. One dict per
    (K, correction): ``K``, ``correction``, ``label``, ``draws``, ``loss`` (mean over draws),
    ``loss_std`` (the spread of one draw), ``loss_se`` (the standard error of the mean: std / sqrt(draws)),
    ``full_loss``, ``bias`` (mean sampled − full), ``rel_bias`` (bias / full) with ``rel_bias_se``, ``rel_spread``
    (one draw's spread / full), ``abs_bias`` (mean |sampled − full|), ``grad_cosine`` (mean cosine, over the first
    ``cosine_draws`` draws, between the gradient with respect to ``hidden`` and the full one: the direction the
    encoder is pushed), ``cosine_draws``, ``time_ms``
    (median over ``timing_repeats`` of proposal + draw + forward + backward to hidden, weight and bias, for
    the default correction: the three do the same work), ``full_time_ms``, ``time_ratio`` (sampled / full),
    ``sampler``, ``replacement``. Ready for pandas.

    The values are the sampled losses of ``sampled_softmax_loss`` on the same draws (the candidates' logits
    are columns of the full logits, computed once), so many draws cost little. Without replacement at K = V
    every draw is the whole vocabulary, each class expected once (π = 1): one draw is the exact value, and the
    row says ``draws`` = 1. ``on_progress(done, what)``, when given, hears after each K how far the sweep is
    (a share from 0 to 1).
    """
    V = weight.shape[0]
    if hidden.shape[0] == 0:
        return []
    say = on_progress or (lambda done, what: None)
    ks = sweep_ks(V) if ks is None else [int(k) for k in ks]
    M = hidden.shape[0]
    full_fn = full_head_loss(targets)
    full_times = []
    for _ in range(max(1, timing_repeats)):
        full_loss, full_grad, seconds = loss_and_grad(full_fn, hidden, weight, bias)
        full_times.append(seconds)
    full_ms = float(torch.tensor(full_times).median()) * 1e3
    start = time.perf_counter()
    q = proposal_distribution(config.sampler, V, counts=counts, power=config.power, smoothing=config.smoothing,
                              hidden=hidden, weight=weight, bias=bias)
    proposal_seconds = time.perf_counter() - start
    with torch.no_grad():
        w32 = weight.detach().float()
        logits = hidden.detach().float() @ w32.T  # (M, V): every candidate's logit, once
        if bias is not None:
            logits = logits + bias.detach().float()
    rows_m = torch.arange(M, device=logits.device)
    true_col = logits[rows_m, targets]  # (M,)
    full_grad = full_grad.double()
    timed = corrections[0] if config.correction not in corrections else config.correction
    rows = []
    support = int((q > 0).sum())
    for n_k, k in enumerate(ks):
        if not config.replacement and k > support:
            continue
        losses_ = {c: [] for c in corrections}
        cosines = {c: [] for c in corrections}
        times = []
        draws = 1 if not config.replacement and k == support else max(1, repeats)  # all of V: nothing random
        for r in range(draws):
            t0 = time.perf_counter()
            negatives = draw_negatives(q, k, config.replacement, generator)
            draw_seconds = proposal_seconds + time.perf_counter() - t0
            ids = negatives.ids.to(logits.device)
            log_sampled = torch.log(negatives.expected_count(negatives.ids)).float().to(logits.device)  # (K,)
            log_true = torch.log(negatives.expected_count(targets)).float().to(logits.device)  # (M,)
            # One correction at a time: at K = V each holds (M, K) logits, their gradient and a dense (M, V) one,
            # and the three at once took a p = 1 batch past one click's memory (issue 42).
            for correction in corrections:
                logq, on_true = CORRECTIONS[correction]
                zt = true_col.clone().requires_grad_(True)  # (M,)
                zs = logits.index_select(1, ids).requires_grad_(True)  # (M, K)
                out = sampled_softmax_from_logits(zt, zs, targets, ids, log_sampled, log_true,
                                                  remove_accidental_hits=config.remove_accidental_hits,
                                                  logq_correction=logq, logq_on_true=on_true)
                losses_[correction].append(float(out.loss.detach()))
                if r < max(1, cosine_draws):
                    gt, gs = torch.autograd.grad(out.loss, [zt, zs])
                    grad = _hidden_gradient(gt[None], gs[None], targets, ids, w32)[0]  # (M, H)
                    cosines[correction].append(cosine(grad.flatten(), full_grad))
                del zs, out
            if r < max(1, timing_repeats):  # the cost of one training step's head, with this draw
                kwargs = replace(config, correction=timed).loss_kwargs()

                def fn(h, w, b, kwargs=kwargs, negatives=negatives):
                    return sampled_softmax_loss(h, w, b, targets, negatives=negatives, **kwargs)
                _, _, seconds = loss_and_grad(fn, hidden, weight, bias)
                times.append(seconds + draw_seconds)
        time_ms = float(torch.tensor(times).median()) * 1e3
        for correction in corrections:
            losses_t = torch.tensor(losses_[correction], dtype=torch.float64)
            n = len(losses_t)
            mean = float(losses_t.mean())
            std = float(losses_t.std()) if n > 1 else 0.0
            rows.append({
                "K": k, "correction": correction, "label": CORRECTION_LABELS[correction],
                "logq_correction": CORRECTIONS[correction][0], "logq_on_true": CORRECTIONS[correction][1],
                "sampler": config.sampler, "replacement": config.replacement, "draws": n,
                "loss": mean, "loss_std": std, "loss_se": std / math.sqrt(n),
                "full_loss": full_loss, "bias": mean - full_loss,
                "rel_bias": (mean - full_loss) / full_loss if full_loss else float("nan"),
                "rel_bias_se": std / math.sqrt(n) / abs(full_loss) if full_loss else float("nan"),
                "rel_spread": std / abs(full_loss) if full_loss else float("nan"),
                "abs_bias": float((losses_t - full_loss).abs().mean()),
                "grad_cosine": float(torch.tensor(cosines[correction]).mean()), "cosine_draws": len(cosines[correction]),
                "time_ms": time_ms, "full_time_ms": full_ms,
                "time_ratio": time_ms / full_ms if full_ms > 0 else float("nan"),
            })
        say((n_k + 1) / len(ks), f"K = {k:,}: {draws} draw{'s' if draws > 1 else ''}")
    return rows
