"""The loss variants, one record each (torch.optim's classes, Hugging Face's Auto* mappings).

A record says how its variant computes the loss from the head's selected rows, what it reads (logits, or
the head's input with the output layer's weights; class weights; the corpus' token counts), what its mean
is an average over, and how the pages name, colour and explain it. The training loop and its set-up (DDP,
DeepSpeed), the cost calculator, ``TrainConfig``'s checks, the CLI, the Loss page's view-model, the figures
and the gradient view ask the record; none of them compares a name. Adding a variant is one ``register``:

>>> halved = LossVariant("halved", lambda x: full_cross_entropy(x.logits / 2, x.targets), label="halved",
...                      title="Cross-entropy at temperature 2", why="The logits halved before the softmax.",
...                      color="#ae3ec9")
>>> names()
('full', 'weighted', 'sampled')
>>> _ = register(halved); names(), get("halved").normaliser is masked_tokens
(('full', 'weighted', 'sampled', 'halved'), True)
>>> _ = unregister("halved"); "halved" in NAMES
False

Shapes: V = vocabulary, H = hidden size, M = selected (masked) positions. The math itself is ``losses``'
(full, weighted) and ``sampled_softmax``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from mlm_core.errors import InputError
from mlm_core.formatting import readable, signed
from mlm_core.losses import LossOutput, check_rows, full_cross_entropy, weighted_cross_entropy
from mlm_core.sampled_softmax import (CORRECTION_LABELS, SAMPLED_SOFTMAX, SAMPLER_WORDS, Negatives,
                                      SampledSoftmaxConfig, divisor_words, sampled_logit_gradient,
                                      sampled_softmax_loss)

FULL = "full"  # the reference every other variant is compared with (and what evaluation always measures)


@dataclass(frozen=True)
class LossInputs:
    """What a variant's loss reads: ``targets`` (M,) and the head on the same M selected rows, ``logits``
    (M, V), or for a variant that ``needs_hidden`` the head's input ``hidden`` (M, H) with the output
    layer's ``weight`` (V, H) and ``bias`` (V,) (``logits == hidden @ weight.T + bias``); one weight per
    token id ``class_weights`` (V,) for a variant that ``needs_class_weights``; the sampled softmax's
    settings, the corpus' token ``counts`` (V,) it draws from, and its ``negatives`` when drawn already
    (the Loss page: one draw for both pages), else the ``generator`` that draws them."""

    targets: torch.Tensor
    logits: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    class_weights: torch.Tensor | None = None
    sampled: SampledSoftmaxConfig = SAMPLED_SOFTMAX
    counts: torch.Tensor | None = None
    negatives: Negatives | None = None
    generator: torch.Generator | None = None


@dataclass(frozen=True)
class Shown:
    """How the Loss page writes a variant's sentence: the full loss beside it, one precision for the row's numbers,
    and the class weights' scheme."""

    full: float
    decimals: int
    scheme: str

    def number(self, x: float) -> str:
        return f"{x:.{self.decimals}f}"


def masked_tokens(targets: torch.Tensor, class_weights: torch.Tensor | None = None) -> float:
    """M: what a plain mean over the selected rows divides by."""
    return float(targets.numel())


def target_weight_sum(targets: torch.Tensor, class_weights: torch.Tensor | None) -> float:
    """Σ w[y] over the selected rows: the normalisation of ``F.cross_entropy(weight=w)`` (M without weights)."""
    if class_weights is None:
        return masked_tokens(targets)
    return float(class_weights[targets.to(class_weights.device)].double().sum()) if targets.numel() else 0.0


def every_class(cfg, vocab_size: int) -> int:
    """Classes a selected row scores: the whole vocabulary."""
    return vocab_size


def softmax_gradient(logits: torch.Tensor, targets: torch.Tensor, position: int, output: LossOutput) -> torch.Tensor:
    """d(mean CE)/d(logits[position]) (V,) times M: ``softmax(z) - onehot(y)``."""
    z = logits[position].detach().float()  # (V,)
    onehot = torch.zeros_like(z)
    onehot[int(targets[position])] = 1.0
    return torch.softmax(z, -1) - onehot


@dataclass(frozen=True)
class LossVariant:
    """One loss variant: its function and everything the loop, its set-up and the pages need to know about it.

    ``loss(LossInputs) -> LossOutput`` is the whole computation (a batch with M = 0 gives 0, still attached to
    the graph). Only the first six fields are needed; the rest default to a plain mean over the M selected
    rows of logits over the whole vocabulary, explained on the pages by ``title`` and ``why``.
    """

    name: str  # TrainConfig.loss, the CLI's --loss, every per-variant dict's key
    loss: Callable[[LossInputs], LossOutput]
    label: str  # the Loss page's short name, under its number
    title: str  # the Training page's name for a run trained with it
    why: str  # one sentence: what it is, beside the Training page's choice
    color: str  # its colour in every figure
    needs_hidden: bool = False  # reads hidden (M, H), weight (V, H), bias (V,) instead of logits (M, V)
    needs_class_weights: bool = False  # reads class_weights (V,), from the corpus' token counts
    needs_counts: bool = False  # draws from the corpus' token counts: a run has them, one lone batch (TrainStep) not
    estimates_full: bool = False  # an estimate of the full loss: compare on the held-out loss; its gradient's cosine
    # What a micro-batch's mean is an average over: masked_tokens (M) or target_weight_sum (Σw); the loop adds each
    # micro-batch's mean times its share of the step's sum, so the step is one mean over the global batch.
    normaliser: Callable[[torch.Tensor, torch.Tensor | None], float] = masked_tokens
    scored_classes: Callable[[Any, int], int] = every_class  # (TrainConfig, V) -> classes scored per row (costs)
    # (logits (M, V), targets (M,), position, its output) -> d loss / d logits[position] (V,) times M, or None
    # when it cannot say; without one, autograd through ``loss`` on the logits (the gradient view).
    logit_gradient: Callable[[torch.Tensor, torch.Tensor, int, LossOutput], torch.Tensor | None] | None = None
    sentence: Callable[[LossOutput, Shown], str] | None = None  # the Loss page's sentence at its number
    metric_help: Callable[[LossOutput], str] | None = None  # the Loss page's help under its number
    cosine_help: Callable[[LossOutput], str] | None = None  # ... under its gradient's cosine (estimates_full)
    training_note: str = ""  # the Training page's note under the loss chart when a run trains with it


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

_VARIANTS: dict[str, LossVariant] = {}


def register(variant: LossVariant) -> LossVariant:
    """Add a variant: from now on a ``TrainConfig(loss=variant.name)`` is accepted and every page shows it."""
    if not isinstance(variant, LossVariant):
        raise TypeError("register takes a LossVariant.")
    if variant.name in _VARIANTS:
        raise InputError(f"A loss named {variant.name!r} is registered already: unregister it first.")
    _VARIANTS[variant.name] = variant
    return variant


def unregister(name: str) -> LossVariant:
    """Remove a variant (a test's own, once it is done); returns its record."""
    return _VARIANTS.pop(get(name).name)


def get(name: str) -> LossVariant:
    """The record of ``name``; an InputError that lists the registered ones for any other name."""
    variant = _VARIANTS.get(name) if isinstance(name, str) else None
    if variant is None:
        raise InputError(f"loss must be one of {', '.join(map(repr, _VARIANTS))}, got {name!r}.")
    return variant


def find(name: Any) -> LossVariant | None:
    """The record of ``name``, or None (a run's stored config from before a variant was unregistered)."""
    return _VARIANTS.get(name) if isinstance(name, str) else None


def records() -> tuple[LossVariant, ...]:
    """Every registered variant, in the order registered (full, weighted, sampled first)."""
    return tuple(_VARIANTS.values())


def names() -> tuple[str, ...]:
    return tuple(_VARIANTS)


class _Names(Sequence):
    """The registered names, read afresh at every use: a variant registered later is in it (``NAMES``)."""

    def __getitem__(self, index):
        return names()[index]

    def __len__(self) -> int:
        return len(_VARIANTS)

    def __contains__(self, name) -> bool:
        return find(name) is not None

    def __repr__(self) -> str:
        return repr(names())


NAMES: Sequence[str] = _Names()  # training.LOSSES, the CLI's choices


def logit_gradients(logits: torch.Tensor, targets: torch.Tensor, position: int,
                    outputs: dict[str, LossOutput]) -> dict[str, torch.Tensor]:
    """d(loss)/d(logits[position]) (V,) times M for each variant in ``outputs`` (so full = softmax − one-hot).

    Each record gives its own (``LossVariant.logit_gradient``); a variant on the logits without one gets
    autograd through its loss. A variant that cannot say is left out.
    """
    check_rows(logits, targets)
    M = logits.shape[0]
    if not 0 <= position < M:
        raise ValueError(f"position must be between 0 and {M - 1}; got {position}.")
    grads = {}
    for name, output in outputs.items():
        variant = get(name)
        if variant.logit_gradient is not None:
            grad = variant.logit_gradient(logits, targets, position, output)
        elif not variant.needs_hidden and not variant.needs_class_weights:
            z = logits.detach().float().requires_grad_(True)  # (M, V)
            (grad,) = torch.autograd.grad(variant.loss(LossInputs(targets, logits=z)).loss, z)
            grad = grad[position] * M
        else:
            grad = None
        if grad is not None:
            grads[name] = grad
    return grads


# --------------------------------------------------------------------------------------------
# Full cross-entropy: the reference
# --------------------------------------------------------------------------------------------


def _full_sentence(out: LossOutput, shown: Shown) -> str:
    return (f"**Full softmax {shown.number(float(out.loss))}**: the MLM loss itself, the mean over the "
            f"{out.diagnostics.get('M', 0)} selected tokens of −log p(true token), p a softmax over the whole "
            "vocabulary.")


register(LossVariant(
    FULL, lambda x: full_cross_entropy(x.logits, x.targets),
    label="full softmax", title="Full cross-entropy",
    why="The softmax over the whole vocabulary: BERT's loss, the reference.", color="#1c7ed6",
    logit_gradient=softmax_gradient, sentence=_full_sentence,
    metric_help=lambda out: "mean over the selected tokens of −log p(true token)"))


# --------------------------------------------------------------------------------------------
# Frequency-weighted cross-entropy: Σ w·CE / Σ w
# --------------------------------------------------------------------------------------------


def _weighted_gradient(logits, targets, position, output: LossOutput) -> torch.Tensor | None:
    """The full gradient times ``w[y] / mean(w[y])``: the weighted loss' per-token scale."""
    w = output.diagnostics.get("target_weights")  # (M,) w[targets], as the loss used them
    if w is None:
        return None
    return softmax_gradient(logits, targets, position, output) * (w[position] / w.mean())


def _weighted_sentence(out: LossOutput, shown: Shown) -> str:
    d = out.diagnostics
    mean_w = float(d["target_weights"].mean()) if "target_weights" in d else float("nan")
    return (f"**Weighted {shown.number(float(out.loss))}**: the same cross-entropies averaged with weight w[y] "
            f"({shown.scheme} of the corpus count: rare tokens count more), Σ w·CE / Σ w as "
            f"`F.cross_entropy(weight=w)`. The other convention, (w·CE).mean(), gives "
            f"{readable(d.get('mean_of_weighted', float('nan')))}: with weights that average 1 over the corpus "
            f"both estimate the weighted risk E[w·CE], and they differ by a factor of this batch's mean weight, "
            f"{readable(mean_w)}: (w·CE).mean() = Σ w·CE / M = (Σ w / M) × Σ w·CE / Σ w.")


register(LossVariant(
    "weighted", lambda x: weighted_cross_entropy(x.logits, x.targets, x.class_weights),
    label="weighted", title="Weighted by frequency",
    why="Rare tokens count more (1/sqrt(count)): watch the 'rare' bars.", color="#f08c00",
    needs_class_weights=True, normaliser=target_weight_sum, logit_gradient=_weighted_gradient,
    sentence=_weighted_sentence, metric_help=lambda out: "Σ w[y]·loss / Σ w[y], as F.cross_entropy(weight=w)"))


# --------------------------------------------------------------------------------------------
# Sampled softmax: the true class and K sampled ones
# --------------------------------------------------------------------------------------------


def _sampled_loss(x: LossInputs) -> LossOutput:
    return sampled_softmax_loss(x.hidden, x.weight, x.bias, x.targets, counts=x.counts, negatives=x.negatives,
                                generator=x.generator, **x.sampled.loss_kwargs())


def _sampled_sentence(out: LossOutput, shown: Shown) -> str:
    d = out.diagnostics
    value, cos, full, number = float(out.loss), d.get("grad_cosine", float("nan")), shown.full, shown.number
    how = (f"K = {d['K']:,} classes drawn {'with' if d['replacement'] else 'without'} replacement from "
           f"{SAMPLER_WORDS.get(d['sampler'], d['sampler'])}")
    off = f"{signed((value - full) / full, '.1%')} against the full loss" if full else ""
    if d["correction"] == "importance":
        return (f"**Sampled {number(value)}**: an estimate of the full loss from the true token and {how}, "
                f"each weighted by 1 / {divisor_words(d['replacement'])}, importance sampling: {off} on this "
                f"draw, and its "
                f"gradient points along the full one with cosine {number(cos)}.")
    if d["correction"] == "tensorflow":
        return (f"**Sampled {number(value)}** (TensorFlow's correction): not an estimate of the full loss but "
                f"the loss of picking the true token out of its 1 + K candidates, with the true token and {how}; "
                f"{off}, gradient cosine {number(cos)} with the full loss's.")
    return (f"**Sampled {number(value)}** (no correction): the loss of picking the true token among "
            f"the true token and {how}, counting each drawn class as often as it was drawn; {off}, "
            f"gradient cosine {number(cos)} with the full loss's.")


def _sampled_cosine_help(out: LossOutput) -> str:
    d = out.diagnostics
    return ("Sampled vs full: the cosine between the two gradients with respect to the hidden states: the "
            f"direction the encoder is pushed. {d['num_hits']} accidental hits removed; "
            f"{d['unique_sampled']} distinct ids among the K = {d['K']} draws.")


register(LossVariant(
    "sampled", _sampled_loss,
    label="sampled", title="Sampled softmax",
    why="Only the true word and K sampled words in the softmax: cheaper; an estimate of the full loss.",
    color="#2f9e44", needs_hidden=True, needs_counts=True, estimates_full=True,
    scored_classes=lambda cfg, vocab_size: min(vocab_size, cfg.num_sampled + 1),  # the true class and K sampled
    logit_gradient=sampled_logit_gradient,
    sentence=_sampled_sentence, metric_help=lambda out: CORRECTION_LABELS[out.diagnostics["correction"]],
    cosine_help=_sampled_cosine_help,
    training_note="The sampled-softmax training loss is an estimate of the full loss from the true word and K "
                  "sampled words: compare the variants on the held-out chart, which scores every variant with the "
                  "full cross-entropy."))


def head_loss(variant: LossVariant, inputs: LossInputs) -> Callable:
    """``fn(hidden, weight, bias) -> LossOutput``: ``variant``'s loss on ``inputs`` with the head given anew (its
    logits recomputed for a variant on the logits), for ``losses.hidden_gradient_cosine``."""
    def fn(hidden, weight, bias):
        if variant.needs_hidden:
            return variant.loss(replace(inputs, hidden=hidden, weight=weight, bias=bias))
        logits = hidden @ weight.T  # (M, V)
        return variant.loss(replace(inputs, logits=logits if bias is None else logits + bias))
    return fn
