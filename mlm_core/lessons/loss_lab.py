"""The Loss page's view-model: one batch through a model, every registered loss variant on it, and the rows and
sentences the page (and the Bug museum) show about them.

The math lives in ``losses`` and ``sampled_softmax``, and each variant's record in ``loss_registry``; this module
turns them into a lesson. ``LossBatch`` is the one batch type of the Loss page and the Bug museum, and
``batch_losses`` gives the numbers both show.

Shapes: B = batch, T = sequence length, V = vocabulary, H = hidden size, M = selected positions,
K = sampled classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from mlm_core import loss_registry, seeds
from mlm_core.costs import loss_page_bytes
from mlm_core.data import Encoded, encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.measure import click_budget_bytes, human_bytes
from mlm_core.formatting import metric_delta, readable, row_decimals, signed, significant
from mlm_core.head import masked_lm_hidden, masked_lm_logits
from mlm_core.loss_registry import FULL, LossInputs, Shown, head_loss
from mlm_core.losses import LossOutput, hidden_gradient_cosine, token_counts, token_frequency_weights
from mlm_core.masking import DECISION_WORDS, IGNORE_INDEX, MaskingConfig, MaskingResult, decision_names
from mlm_core.sampled_softmax import (
    CORRECTION_LABELS,
    SAMPLED_SOFTMAX,
    SampledSoftmaxConfig,
    draw_negatives,
    proposal_distribution,
    proposal_mass_report,
    sampled_softmax_sweep,
)



# --------------------------------------------------------------------------------------------
# One batch for the Loss page and the Bug museum
# --------------------------------------------------------------------------------------------


NEGATIVES_PURPOSE = "negatives"  # LossBatch.generator(...) for the sampled negatives: one draw for both pages
SWEEP_PURPOSE = "sampled_sweep"  # ... for the K sweep and the sampled-softmax check

CORRECTION_SHORT = {"importance": "importance sampling", "tensorflow": "TensorFlow (log Q on every logit)",
                    "none": "no correction"}  # for narrow widgets


@dataclass
class LossBatch:
    """One masked batch through a model: what the Loss page and the Bug museum both compute on.

    One vocabulary on both pages and in the batch audit (Hugging Face's names): ``original_ids``
    (B, T) the tokens before masking, ``input_ids`` (B, T) what the model sees, ``labels`` (B, T)
    the original id where a token was selected and -100 elsewhere. ``logits (M, V)``,
    ``targets (M,)``, ``hidden (M, H)``, ``weight (V, H)`` and ``bias (V,)`` are the model's head on
    the M selected rows (row-major), detached, with ``logits == hidden @ weight.T + bias``; all None
    without a model. ``counts`` (V,) are the corpus' token counts (class weights, unigram proposal).
    Each selected row, in the same order: ``positions`` its (row, position) in the batch,
    ``target_tokens`` its original token, ``decisions`` its decision; ``tokens`` names it for
    people ("2:5 cat").
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
    positions: list[tuple[int, int]] = field(default_factory=list)
    target_tokens: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> list[str]:
        """Each selected row as people read it: "row:position token"."""
        return [f"{r}:{p} {token}" for (r, p), token in zip(self.positions, self.target_tokens)]

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

    def generator(self, purpose: str) -> torch.Generator:
        """A generator for one use of this batch (the negatives, an exhibit's draws): ``seeds.generator``'s rule."""
        return seeds.generator(self.seed, purpose)

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
    result = mask_batch(tokenizer, encoded, config, seeds.generator(int(seed)))  # the Masking page's stream
    selected = result.labels != IGNORE_INDEX  # (B, T)
    positions = [(r, p) for r, p in selected.nonzero().tolist()]  # row-major, as masked_lm_hidden orders its rows
    names = [decision_names(result, r) for r in range(result.decisions.shape[0])]
    rows = dict(positions=positions, target_tokens=tokenizer.convert_ids_to_tokens(result.labels[selected].tolist()),
                decisions=[names[r][p] for r, p in positions])
    if model is None:
        V = len(tokenizer)
        counts = token_counts(tokenizer, texts, V) if counts is None else counts
        return LossBatch(tokenizer, texts, config, int(seed), encoded, result, counts, **rows)
    V = model.get_output_embeddings().weight.shape[0]
    need, budget = loss_page_bytes(len(positions), V), click_budget_bytes()
    if need > budget:  # refused before the model runs: a large vocabulary with a link's p = 1
        raise InputError(
            f"This batch selects {len(positions):,} tokens; with this model's {V:,}-token vocabulary the losses, their "
            f"gradients and the K sweep would hold about {human_bytes(need)} at once, more than one click may use on "
            f"this server ({human_bytes(budget)}, MLMLAB_CLICK_MB). Lower the selection probability on the Masking "
            "page, or use fewer or shorter sentences.")
    with torch.no_grad():
        hidden, weight, bias, targets = masked_lm_hidden(model, result.input_ids, encoded.attention_mask, result.labels)
        hidden, weight, bias = hidden.float().cpu(), weight.detach().float().cpu(), bias.detach().float().cpu()
        logits = hidden @ weight.T + bias  # (M, V): the head's output on the selected rows
    counts = token_counts(tokenizer, texts, weight.shape[0]) if counts is None else counts
    return LossBatch(tokenizer, texts, config, int(seed), encoded, result, counts, model=model, logits=logits,
                     targets=targets.cpu(), hidden=hidden, weight=weight, bias=bias, **rows)


def pick_sentences(sentences: Sequence[str], n: int, seed: int) -> list[str]:
    """``n`` consecutive sentences starting at a place chosen by ``seed`` (the same seed, the same batch)."""
    sentences = [s for s in sentences if s and s.strip()]
    if len(sentences) <= n:
        return list(sentences)
    start = int(torch.randint(len(sentences) - n + 1, (1,), generator=seeds.generator(int(seed), "batch_start")))
    return list(sentences[start:start + n])


# --------------------------------------------------------------------------------------------
# Every loss variant on it, and one sentence each
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LossSettings:
    """The Loss page's settings; the Bug museum computes its "correct" values with the defaults."""

    scheme: str = "inverse"  # weighted loss: 1 / count, so each token type counts equally in expectation
    smoothing: float = 1.0  # weighted loss: added to every count, so unseen tokens get a finite weight
    sampled: SampledSoftmaxConfig = SAMPLED_SOFTMAX


LOSS_SETTINGS = LossSettings()


def batch_inputs(batch: LossBatch, settings: LossSettings = LOSS_SETTINGS) -> LossInputs:
    """What every variant reads on the batch's selected rows: the head's logits and its input, the class weights
    (``settings``' scheme of the corpus counts) and the sampled negatives, drawn once from
    ``batch.generator(NEGATIVES_PURPOSE)``, so the same batch and settings give the same draw on every page."""
    if batch.logits is None:
        raise InputError("The losses need a model; load a model first.")
    weights = token_frequency_weights(batch.counts, scheme=settings.scheme, smoothing=settings.smoothing)
    cfg = settings.sampled
    V = batch.weight.shape[0]
    q = proposal_distribution(cfg.sampler, V, counts=batch.counts, power=cfg.power, smoothing=cfg.smoothing,
                              hidden=batch.hidden, weight=batch.weight, bias=batch.bias)
    negatives = draw_negatives(q, cfg.num_sampled, cfg.replacement, batch.generator(NEGATIVES_PURPOSE))
    return LossInputs(batch.targets, logits=batch.logits, hidden=batch.hidden, weight=batch.weight, bias=batch.bias,
                      class_weights=weights, sampled=cfg, counts=batch.counts, negatives=negatives)


def batch_losses(batch: LossBatch, settings: LossSettings = LOSS_SETTINGS) -> dict[str, LossOutput]:
    """Every registered variant's loss on the batch's selected rows (``batch_inputs``): the numbers both pages show.

    A variant that estimates the full loss (``LossVariant.estimates_full``, the sampled softmax) adds
    ``grad_cosine`` to its diagnostics: the cosine between its gradient with respect to the hidden
    states and the full loss's, on this draw.
    """
    inputs = batch_inputs(batch, settings)
    variants = loss_registry.records()
    with torch.no_grad():
        outputs = {v.name: v.loss(inputs) for v in variants}
    for v in variants:
        if v.estimates_full:
            cosine = hidden_gradient_cosine(head_loss(v, inputs), batch.hidden, batch.weight, batch.bias,
                                            batch.targets)
            out = outputs[v.name]
            outputs[v.name] = LossOutput(out.loss, out.per_token, {**out.diagnostics, "grad_cosine": cosine})
    return outputs


def loss_sentences(outputs: dict[str, LossOutput], settings: LossSettings = LOSS_SETTINGS) -> dict[str, str]:
    """One sentence per variant, at its number: what the value estimates, with this batch's numbers
    (``LossVariant.sentence``; a variant without one: its title and why)."""
    decimals = row_decimals([float(o.loss) for o in outputs.values()])  # the page's row of numbers: one precision
    shown = Shown(full=float(outputs[FULL].loss), decimals=decimals, scheme=settings.scheme)
    sentences = {}
    for name, out in outputs.items():
        variant = loss_registry.get(name)
        sentences[name] = (variant.sentence(out, shown) if variant.sentence is not None else
                           f"**{variant.title} {shown.number(float(out.loss))}**: {variant.why}")
    return sentences


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


K_CHOICES = (8, 16, 32, 64, 128, 256, 512, 1024, 4096)  # the K slider's stops below V


def k_choices(vocab_size: int) -> list[int]:
    """The K slider's stops for a vocabulary of ``vocab_size``: ``K_CHOICES`` below V, then V itself (every class).

    >>> k_choices(100)
    [8, 16, 32, 64, 100]
    """
    return [k for k in K_CHOICES if k < vocab_size] + [vocab_size]


def log_uniform_mass(vocab_size: int, tokenizer, counts: torch.Tensor) -> dict[str, float]:
    """Where the log-uniform proposal puts its mass in this vocabulary: ``unused`` ([unused] ids), ``pad`` ([PAD])
    and ``never`` (ids the corpus never contains), each a share of 1."""
    mass = proposal_mass_report(proposal_distribution("log_uniform", vocab_size), tokenizer, counts)
    return {"unused": mass["unused"], "pad": mass.get("pad", 0), "never": mass["never_in_corpus"]}


def loss_values(outputs: dict[str, LossOutput]) -> dict[str, float]:
    """Each variant's loss as a float, by name (the bars, the metrics and the export show these)."""
    return {name: float(out.loss) for name, out in outputs.items()}


def loss_metrics(outputs: dict[str, LossOutput], settings: LossSettings = LOSS_SETTINGS) -> list[dict[str, Any]]:
    """The row of numbers under the bars, as ``st.metric`` keywords: each variant's loss (the others against the
    full one), then the gradient cosine with the full loss's of each that estimates it, all at one precision."""
    values = loss_values(outputs)
    row = f".{row_decimals(values.values())}f"  # one precision for the row (and the bars, the sentences below)
    metrics, cosines = [], []
    for name, out in outputs.items():
        variant = loss_registry.get(name)
        metric = dict(label=variant.label, value=format(values[name], row))
        if name != FULL:
            metric.update(delta=metric_delta(values[name] - values[FULL], row) + " vs full", delta_color="off")
        metrics.append(dict(metric, help=variant.metric_help(out) if variant.metric_help else variant.why))
        if "grad_cosine" in out.diagnostics:
            cosines.append(dict(label="gradient cosine", value=format(out.diagnostics["grad_cosine"], row),
                                help=variant.cosine_help(out) if variant.cosine_help else
                                f"{variant.title} vs full: the cosine between the two gradients with respect to "
                                "the hidden states: the direction the encoder is pushed."))
    return metrics + cosines


# --------------------------------------------------------------------------------------------
# Rows for the Loss page's tables and figures
# --------------------------------------------------------------------------------------------


def per_token_table(outputs: dict[str, LossOutput], batch: LossBatch) -> list[dict]:
    """One dict per selected position: ``position`` ("row:position"), ``token``, ``decision`` and one column per variant."""
    rows = [{"position": f"{r}:{p}", "token": token, "decision": d}
            for (r, p), token, d in zip(batch.positions, batch.target_tokens, batch.decisions)]
    for variant, out in outputs.items():
        for row, value in zip(rows, out.per_token.detach().tolist()):
            row[variant] = significant(value)
    return rows


def per_token_view(outputs: dict[str, LossOutput], batch: LossBatch) -> list[dict]:
    """``per_token_table`` as the page shows it: each decision in the legend's words (``masking.DECISION_WORDS``)."""
    return [{**row, "decision": DECISION_WORDS.get(row["decision"], row["decision"])}
            for row in per_token_table(outputs, batch)]


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


def target_smoothed_counts(counts: torch.Tensor, targets: torch.Tensor, smoothing: float = 1.0) -> list[float]:
    """Corpus count + smoothing of each target (M floats): where this batch sits on the weights plot."""
    return [float(c) + smoothing for c in torch.as_tensor(counts)[targets.cpu()].tolist()]


# --------------------------------------------------------------------------------------------
# The K sweep and the sampled-softmax target, for people
# --------------------------------------------------------------------------------------------


def sweep_table(rows: Sequence[dict]) -> list[dict]:
    """The sweep as a table for people: one row per (K, correction), 4 significant digits. "mean error" is the
    mean over the draws of (sampled − full) / full with its standard error; "one draw's spread" is how far a
    single draw lands from that mean (the standard deviation over the draws), also as a share of the full loss."""
    return [{"K": r["K"], "correction": CORRECTION_SHORT[r["correction"]], "draws": r.get("draws"),
             "loss (mean)": significant(r["loss"]), "full": significant(r["full_loss"]),
             "mean error %": significant(100 * r["rel_bias"], 3),
             "± standard error %": significant(100 * r["rel_bias_se"], 2) if "rel_bias_se" in r else None,
             "one draw's spread %": significant(100 * r["rel_spread"], 2) if "rel_spread" in r else None,
             "grad cosine": significant(r["grad_cosine"]),
             "ms": significant(r["time_ms"], 3), "× full time": significant(r["time_ratio"], 3)} for r in rows]


def error_text(row: dict) -> str:
    """A sweep row's mean error as the page says it: with its standard error over the draws, and "no error
    measurable" when the mean lies within 2 standard errors of 0 (markdown, no trailing period).

    >>> error_text({"rel_bias": -0.0231, "rel_bias_se": 0.0023, "rel_spread": 0.032, "draws": 200})
    'mean error −2.31% ± 0.23% over 200 draws (one draw: ± 3.2%)'
    >>> error_text({"rel_bias": -0.0001, "rel_bias_se": 0.0045, "rel_spread": 0.032, "draws": 50})
    'no error measurable over 50 draws (−0.01% ± 0.45%; one draw: ± 3.2%)'
    >>> error_text({"rel_bias": 0.0, "rel_bias_se": 0.0, "rel_spread": 0.0, "draws": 1})
    'mean error 0.00% (exact: every draw is the whole vocabulary)'
    """
    n = row.get("draws") or 0
    se, spread = row.get("rel_bias_se"), row.get("rel_spread")
    if n <= 1 or se is None:
        return f"mean error {signed(row['rel_bias'], '.2%')}" + (" (exact: every draw is the whole vocabulary)"
                                                                  if n == 1 else "")
    plus = f"{signed(row['rel_bias'], '.2%')} ± {se:.2%}"
    if abs(row["rel_bias"]) <= 2 * se:
        return f"no error measurable over {n} draws ({plus}; one draw: ± {spread:.1%})"
    return f"mean error {plus} over {n} draws (one draw: ± {spread:.1%})"


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
                f"full {readable(first['full_loss'])} ({error_text(first)}, gradient cosine "
                f"{readable(first['grad_cosine'], 3)}); at {at} ({last['K']:,} classes drawn {how} replacement), ")
        if reaches_full_loss(last):
            text += "exactly the full loss: every class is a candidate, each expected once (π = 1)."
        elif abs(last["rel_bias"]) < 0.01 and last["grad_cosine"] > 0.99:
            text += (f"{readable(last['loss'])} ({error_text(last)}, gradient cosine "
                     f"{readable(last['grad_cosine'], 3)}): close to the full loss, not equal to it.")
        else:
            text += (f"{readable(last['loss'])} ({error_text(last)}, gradient cosine "
                     f"{readable(last['grad_cosine'], 3)}): not the full loss.")
        sentences.append(text)
    return sentences


# --------------------------------------------------------------------------------------------
# The NSP head, for people
# --------------------------------------------------------------------------------------------


def nsp_pair_rows(pairs: Sequence, probabilities: Sequence[float]) -> list[dict]:
    """One dict per sentence pair: its two sentences, the truth (IsNext / NotNext) and the head's P(IsNext)."""
    return [{"sentence A": p.first, "sentence B": p.second, "truth": "IsNext" if p.is_next else "NotNext",
             "P(IsNext)": prob} for p, prob in zip(pairs, probabilities)]


def nsp_accuracy_metrics(before: float, after: float) -> list[dict[str, Any]]:
    """The held-out accuracy before and after training the NSP head, as ``st.metric`` keywords."""
    return [dict(label="held-out accuracy before", value=f"{before:.0%}"),
            dict(label="after", value=f"{after:.0%}", delta=metric_delta(after - before, ".0%"))]


def combined_metrics(combined: dict) -> list[dict[str, Any]]:
    """MLM, NSP and their weighted total (``nsp.combined_loss_on_pairs``) as ``st.metric`` keywords, at one
    precision."""
    row = f".{row_decimals([combined['mlm_loss'], combined['nsp_loss'], combined['total']])}f"
    return [dict(label="MLM loss", value=format(combined["mlm_loss"], row),
                 help=f"over {combined['selected']} selected tokens"),
            dict(label="NSP loss", value=format(combined["nsp_loss"], row)),
            dict(label="total", value=format(combined["total"], row),
                 help="MLM weight × MLM + NSP weight × NSP (BERT: 1 and 1)")]


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
