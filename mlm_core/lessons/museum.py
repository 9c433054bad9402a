"""The bug museum: ten common MLM mistakes, each run for real on the current batch.

Every exhibit runs the buggy code and the correct code on the same batch (``lessons.loss_lab.LossBatch``,
the Loss page's batch type) and returns both numbers, with one sentence on why they differ. Its
"correct" numbers are the Loss page's: ``loss_lab.batch_losses`` with the default ``LossSettings``.
One vocabulary throughout, as in the batch audit (``lessons.audit``, which checks a batch from
someone's own pipeline for the same mistakes): ``original_ids`` (before masking), ``input_ids``
(what the model sees), ``labels`` (original id where selected, -100 elsewhere).

Shapes: B = batch, T = sequence length, V = vocabulary, M = selected positions, K = sampled classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import special_ids
from mlm_core.errors import InputError
from mlm_core.formatting import readable
from mlm_core.lessons.loss_lab import LOSS_SETTINGS, LossBatch, LossSettings, batch_losses
from mlm_core.losses import full_cross_entropy, hidden_gradient_cosine, token_frequency_weights
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig, mask_tokens
from mlm_core.sampled_softmax import CORRECTION_LABELS

REPEATS = 200  # copies of the batch for the exhibit that needs a share, not a single draw
FULL_LOSS = "full softmax loss"  # the key of the reference number in Exhibit.also
COSINE_BUGGY, COSINE_CORRECT = "cosine: buggy", "cosine: correct"  # gradient cosines with the full loss's


@dataclass(frozen=True)
class Exhibit:
    """One mistake: the number the buggy code gives, the number the right code gives, and why.

    ``labels`` name the two numbers (buggy / correct, or two conventions); ``also`` holds the
    numbers a learner needs beside them to read them right (the full loss, gradient cosines, the
    parts of a mixed loss), shown at the numbers; ``details`` the rest, in a table.
    """

    title: str
    wrong_value: float
    right_value: float
    unit: str
    why: str
    details: dict = field(default_factory=dict)
    key: str = ""
    wrong_code: str = ""
    right_code: str = ""
    labels: tuple[str, str] = ("buggy code", "correct code")
    also: dict = field(default_factory=dict)

    @property
    def differs(self) -> bool:
        """True when the two numbers really differ (NaN differs from everything)."""
        a, b = self.wrong_value, self.right_value
        if math.isnan(a) or math.isnan(b):
            return not (math.isnan(a) and math.isnan(b))
        return abs(a - b) > 1e-6 * max(1.0, abs(a), abs(b))


def _special_positions(batch: LossBatch) -> torch.Tensor:
    """(B, T) True on every special token and on padding, from the tokenizer's own ids."""
    ids = batch.original_ids
    specials = torch.tensor(special_ids(batch.tokenizer), dtype=ids.dtype)
    return torch.isin(ids, specials) | (batch.attention_mask == 0)


def _full_loss(batch: LossBatch) -> float:
    """The Loss page's full loss on this batch (the correct labels)."""
    return full_cross_entropy(batch.logits, batch.targets).loss.item()


def _sampled_comparison(batch: LossBatch, wrong_fn, outputs) -> tuple[float, float, dict]:
    """(wrong value, right value, also) for a sampled-softmax exhibit: the buggy estimate, the Loss
    page's sampled estimate (``outputs = batch_losses(batch)``: same batch, same negatives), the full
    loss and both gradient cosines."""
    sampled = outputs["sampled"]
    negatives = sampled.diagnostics["negatives"]
    with torch.no_grad():
        wrong = float(wrong_fn(batch.hidden, negatives)) if len(batch.targets) else float("nan")
    also = {
        FULL_LOSS: float(outputs["full"].loss),
        COSINE_BUGGY: hidden_gradient_cosine(lambda h, w, b: wrong_fn(h, negatives), batch.hidden, batch.weight,
                                             batch.bias, batch.targets),
        COSINE_CORRECT: sampled.diagnostics["grad_cosine"],
    }
    return wrong, float(sampled.loss), also


# --------------------------------------------------------------------------------------------
# The exhibits
# --------------------------------------------------------------------------------------------


def special_ids_hardcoded(batch: LossBatch) -> Exhibit:
    """Special tokens hard-coded as ids 0 and 1: for BERT that is [PAD] and [unused0]."""
    ids = batch.original_ids
    special = _special_positions(batch)
    buggy_mask = torch.isin(ids, torch.tensor([0, 1]))  # the bug: "special tokens are 0 and 1"
    right_mask = batch.encoded.special_tokens_mask.bool()  # from the tokenizer
    exposed = special & ~buggy_mask  # (B, T) special tokens the bug leaves open
    exposed_wrong = int(exposed.sum())
    exposed_right = int((special & ~right_mask).sum())
    # Whole-word and span masking select words: an exposed [CLS]/[SEP] is a word of its own to the buggy
    # pipeline (as in Hugging Face's whole-word collator, whose words come from the special-tokens mask and
    # the offsets), so it gets a word id here; the tokenizer's word ids (-1) would protect it after all.
    words = batch.encoded.word_ids.clone()
    words[exposed] = words.max() + 1 + torch.arange(exposed_wrong)
    buggy = mask_tokens(ids, buggy_mask.long(), batch.config, mask_token_id=batch.mask_id,
                        vocab_size=batch.vocab_size, generator=batch.generator("special_ids_hardcoded"),
                        word_ids=words,
                        attention_mask=batch.attention_mask, trace=False)
    exposed_tokens = sorted(set(batch.tokenizer.convert_ids_to_tokens(ids[special & ~buggy_mask].tolist())))
    return Exhibit(
        "Special tokens hard-coded as ids 0 and 1", exposed_wrong, exposed_right, "special tokens open to masking",
        "In BERT's vocabulary ids 0 and 1 are [PAD] and [unused0]; [CLS] (101) and [SEP] (102) are not "
        "protected, so they get masked and the model learns to predict them.",
        {"unprotected tokens": ", ".join(exposed_tokens),
         "special tokens selected in this draw (buggy)": int((buggy.selected & special).sum()),
         "special tokens selected (correct)": int((batch.result.selected & special).sum())},
        key="special_ids_hardcoded",
        wrong_code="special_tokens_mask = torch.isin(original_ids, torch.tensor([0, 1]))   # [CLS]=101, [SEP]=102 left open",
        right_code=("encoded = tokenizer(texts, return_special_tokens_mask=True)\n"
                    "special_tokens_mask = encoded['special_tokens_mask']"),
    )


def loss_only_at_mask(batch: LossBatch) -> Exhibit:
    """Loss only where the input is [MASK]: the random and unchanged positions are dropped."""
    original, labels = batch.original_ids, batch.labels
    buggy_labels = torch.where(batch.input_ids == batch.mask_id, original, torch.full_like(original, IGNORE_INDEX))
    n_wrong, n_right = int((buggy_labels != IGNORE_INDEX).sum()), int((labels != IGNORE_INDEX).sum())
    details = {"positions in the loss (buggy)": n_wrong, "positions in the loss (correct)": n_right,
               "random positions dropped": int((batch.result.decisions == Decision.RANDOM).sum()),
               "unchanged positions dropped": int((batch.result.decisions == Decision.UNCHANGED).sum())}
    if batch.model is not None:
        wrong = full_cross_entropy(*batch.logits_for(buggy_labels)).loss.item()
        right = _full_loss(batch)
        unit = "loss (nats)"
    else:
        wrong, right, unit = n_wrong, n_right, "positions in the loss"
    if n_wrong == n_right:
        details["note"] = "This batch happens to have no random or unchanged positions: try another seed."
    return Exhibit(
        "Loss only where the input is [MASK]", wrong, right, unit,
        "BERT predicts every selected token, also the ones replaced by a random token and the ones left "
        "unchanged; taking the loss only at [MASK] teaches the model nothing about real tokens in context.",
        details, key="loss_only_at_mask",
        wrong_code="labels[input_ids != tokenizer.mask_token_id] = -100   # input_ids: what the model sees",
        right_code="labels[~selected] = -100   # selected = [MASK] + random + unchanged",
    )


def sampled_without_true_class(batch: LossBatch) -> Exhibit:
    """"Negative sampling" that gathers the sampled logits but forgets to put the true class first."""
    if batch.model is None:
        raise InputError("This exhibit needs the model's head; load a model first.")

    def wrong_fn(h, negatives):
        # The bug: column 0 is taken to be the true class, but it is just the first negative.
        ids = negatives.ids
        return F.cross_entropy(h @ batch.weight[ids].T + batch.bias[ids], torch.zeros_like(batch.targets))

    outputs = batch_losses(batch)
    wrong, right, also = _sampled_comparison(batch, wrong_fn, outputs)
    negatives = outputs["sampled"].diagnostics["negatives"]
    k = negatives.num_sampled
    return Exhibit(
        "Negative sampling without the true class", wrong, right, "loss (nats)",
        f"The candidate set must be [true class, K negatives] with the label pointing at the true class; "
        f"without it the model is trained to predict whichever negative came first, and its gradient has "
        f"nothing to do with the full loss's (cosine {readable(also[COSINE_BUGGY], 3)}). "
        f"The correct number is the Loss page's sampled estimate of the full loss (same batch, same K = {k} "
        f"negatives), beside the full loss it estimates.",
        {"K": k, "first negative": batch.tokenizer.convert_ids_to_tokens([int(negatives.ids[0])])[0]},
        key="sampled_without_true_class",
        wrong_code="loss = F.cross_entropy(hidden @ W[neg].T, torch.zeros(M))",
        right_code=("logits = torch.cat([true_logit, hidden @ W[neg].T - log_expected_count[neg]], 1)\n"
                    "loss = F.cross_entropy(logits, torch.zeros(M))   # sampled_softmax.sampled_softmax_loss"),
        also=also,
    )


def weighted_mean(batch: LossBatch) -> Exhibit:
    """Two conventions for a weighted loss: ``(w·CE).mean()`` and ``Σ w·CE / Σ w`` (``F.cross_entropy(weight=)``)."""
    if batch.model is None:
        raise InputError("This exhibit needs a model's logits; load a model first.")
    logits, targets = batch.logits, batch.targets
    weights = token_frequency_weights(batch.counts, scheme=LOSS_SETTINGS.scheme, smoothing=LOSS_SETTINGS.smoothing)
    per_token = F.cross_entropy(logits, targets, reduction="none")  # (M,)
    w = weights[targets]  # (M,)
    wrong = (w * per_token).mean().item() if len(targets) else float("nan")  # divide by M
    right = batch_losses(batch)["weighted"].loss.item()  # divide by the sum of the weights: the Loss page's
    mean_w = float(w.mean()) if len(w) else float("nan")
    return Exhibit(
        "Weighted loss: .mean() or divide by Σw?", wrong, right, "loss (nats)",
        f"Two conventions, not one right answer. The weights ({LOSS_SETTINGS.scheme} of the corpus count) are "
        f"normalised so a corpus token weighs 1 on average; then (w·CE).mean() is an unbiased estimate of the "
        f"weighted risk E[w·CE], and Σ w·CE / Σ w, what F.cross_entropy(weight=w) computes (and the Loss page "
        f"and training use), estimates the same risk as a weighted average whose scale stays that of a "
        f"cross-entropy. On one batch they differ by a factor of its mean weight (Σ w / M), here {readable(mean_w)}. The bug is "
        f"mixing them: swapping F.cross_entropy(weight=w) for (w·CE).mean() rescales the loss, and with it the "
        f"step size, batch by batch.",
        {"mean weight of this batch's targets": mean_w,
         "F.cross_entropy(weight=w)": F.cross_entropy(logits, targets, weight=weights).item() if len(targets) else 0.0},
        key="weighted_mean",
        wrong_code="loss = (w[targets] * F.cross_entropy(logits, targets, reduction='none')).mean()   # targets: labels[selected]",
        right_code="loss = (w[targets] * ce).sum() / w[targets].sum()   # = F.cross_entropy(logits, targets, weight=w)",
        labels=("(w·CE).mean()", "Σ w·CE / Σ w"),
        also={FULL_LOSS: _full_loss(batch)},
    )


def labels_never_ignored(batch: LossBatch) -> Exhibit:
    """Labels = a copy of the original ids, unselected positions never set to -100: loss on every token."""
    if batch.model is None:
        raise InputError("This exhibit needs a model's logits; load a model first.")
    buggy_labels = batch.original_ids.clone()  # the bug: labels = original_ids.clone(), and nothing else
    logits, targets = batch.logits_for(buggy_labels)  # every (B, T) position, row-major
    ce = F.cross_entropy(logits, targets, reduction="none").reshape(buggy_labels.shape)  # (B, T)
    wrong = float(ce.mean())
    right = _full_loss(batch)
    padding = batch.attention_mask == 0
    special = _special_positions(batch) & ~padding
    selected = batch.labels != IGNORE_INDEX
    copying = ~selected & ~special & ~padding
    parts = {"selected: the right loss": selected, "unselected: copying": copying, "[CLS] / [SEP]": special,
             "padding": padding}
    means = {name: float(ce[where].mean()) if bool(where.any()) else float("nan") for name, where in parts.items()}
    counts = {name: int(where.sum()) for name, where in parts.items()}
    total = float(ce.sum())
    useless = float(ce[special | padding].sum()) / total if total else float("nan")
    side = "above" if wrong > right else "below"
    why = (f"The buggy loss averages four kinds of targets (their mean losses above): the "
           f"{counts['selected: the right loss']} selected tokens ({readable(means['selected: the right loss'])}), "
           f"{counts['unselected: copying']} unselected tokens the model sees in its input and only "
           f"has to copy ({readable(means['unselected: copying'])}), "
           f"{counts['[CLS] / [SEP]']} [CLS]/[SEP] ({readable(means['[CLS] / [SEP]'])}) and "
           f"{counts['padding']} padding positions ({readable(means['padding'])}). Copying is nearly free; special "
           f"and padding targets are hard and meaningless. So the buggy number can land above or below the right "
           f"one, depending on how much padding the batch has (here {side}), and {useless:.0%} of it comes from "
           f"targets that teach nothing.")
    return Exhibit(
        "Loss over every token (labels never set to -100)", wrong, right, "loss (nats)", why,
        {f"positions: {name}": n for name, n in counts.items()},
        key="labels_never_ignored",
        wrong_code="labels = original_ids.clone()",
        right_code="labels = original_ids.clone(); labels[~selected] = -100",
        also=dict(means),  # the mean loss of each kind of target
    )


def wrong_ignore_index(batch: LossBatch) -> Exhibit:
    """Unselected labels filled with 0 (or -1) while the loss ignores -100."""
    if batch.model is None:
        raise InputError("This exhibit needs a model's logits; load a model first.")
    original, selected = batch.original_ids, batch.result.selected
    zero_labels = torch.where(selected, original, torch.zeros_like(original))  # the bug: 0 as "ignore"
    wrong = full_cross_entropy(*batch.logits_for(zero_labels)).loss.item()
    right = _full_loss(batch)
    minus_one = torch.where(selected, original, torch.full_like(original, -1))
    logits_all, targets_all = batch.logits_for(minus_one)
    try:
        F.cross_entropy(logits_all, targets_all)
        minus_one_result = "no error (and a wrong loss)"
    except (IndexError, RuntimeError) as exc:
        minus_one_result = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    zero_token = batch.tokenizer.convert_ids_to_tokens([0])[0]
    return Exhibit(
        "Wrong ignore index (0 instead of -100)", wrong, right, "loss (nats)",
        f"F.cross_entropy skips -100 only; labels of 0 make every unselected position a target for id 0 "
        f"({zero_token}), and labels of -1 crash.",
        {"label 0 means": zero_token, "positions with label 0": int((~selected).sum()),
         "with -1 instead": minus_one_result},
        key="wrong_ignore_index",
        wrong_code="labels[~selected] = 0   # or -1",
        right_code="labels[~selected] = -100   # F.cross_entropy's ignore_index",
    )


def random_overwritten(batch: LossBatch) -> Exhibit:
    """Random replacements drawn first, then overwritten by an independent [MASK] step."""
    cfg = batch.config
    r, m = cfg.random_replace_prob, cfg.mask_replace_prob
    ids = batch.original_ids.repeat(REPEATS, 1)  # (R*B, T): many draws of the same batch
    special = batch.encoded.special_tokens_mask.repeat(REPEATS, 1).bool()
    g = batch.generator("random_overwritten")
    selected = ~special & (torch.rand(ids.shape, generator=g) < cfg.mlm_probability)
    u1, u2 = torch.rand(ids.shape, generator=g), torch.rand(ids.shape, generator=g)
    random_ids = torch.randint(batch.vocab_size, ids.shape, generator=g)
    # One order for both: random replacements first, then [MASK].
    rand = selected & (u1 < r)
    mask_rest = m / (1.0 - r) if r < 1 else 0.0  # of the tokens not made random, the share that becomes [MASK]
    buggy_mask = selected & (u2 < m)  # the bug: drawn over every selected token, random ones included
    fixed_mask = selected & ~rand & (u2 < mask_rest)

    def shares(mask_here):
        corrupted = torch.where(rand, random_ids, ids)
        corrupted = torch.where(mask_here, torch.full_like(ids, batch.mask_id), corrupted)
        n = max(1, int(selected.sum()))
        return {"[MASK]": 100.0 * int((selected & (corrupted == batch.mask_id)).sum()) / n,
                "random": 100.0 * int((selected & (corrupted != batch.mask_id) & (corrupted != ids)).sum()) / n,
                "unchanged": 100.0 * int((selected & (corrupted == ids)).sum()) / n}

    wrong, right = shares(buggy_mask), shares(fixed_mask)
    return Exhibit(
        "Random replacements overwritten by the [MASK] step", wrong["random"], right["random"],
        "% of selected tokens that are random",
        f"This code draws the random replacements first, for {r:.0%} of the selected tokens, then [MASK] for "
        f"{m:.0%} of the selected tokens without looking at which are already random. The [MASK] step overwrites "
        f"{m:.0%} of the random tokens, so only {r:.0%} × {1 - m:.0%} = {r * (1 - m):.0%} stay random, and "
        f"unchanged grows to {(1 - r) * (1 - m):.0%}. The fix keeps the order: the [MASK] step draws only among "
        f"the tokens not made random, with probability {m:.0%} / {1 - r:.0%} = {mask_rest:.3g}, so [MASK] is "
        f"{m:.0%} of all selected tokens, random {r:.0%} and unchanged {1 - m - r:.0%}.",
        {"draws of the batch": REPEATS, "selected tokens": int(selected.sum()),
         **{f"{k} share, buggy (%)": v for k, v in wrong.items()},
         **{f"{k} share, correct (%)": v for k, v in right.items()}},
        key="random_overwritten",
        wrong_code=f"input_ids[sel & (u1 < {r:g})] = random_ids\ninput_ids[sel & (u2 < {m:g})] = mask_id",
        right_code=(f"rand = sel & (u1 < {r:g}); input_ids[rand] = random_ids\n"
                    f"input_ids[sel & ~rand & (u2 < {m:g} / {1 - r:g})] = mask_id"),
    )


def zero_selected_nan(batch: LossBatch) -> Exhibit:
    """A batch in which nothing was selected: ``F.cross_entropy`` averages over zero rows → NaN."""
    nothing = torch.full_like(batch.original_ids, IGNORE_INDEX)
    if batch.model is not None:
        logits, targets = batch.logits_for(nothing, batch.original_ids)
    else:
        logits, targets = torch.zeros(0, batch.vocab_size), torch.zeros(0, dtype=torch.long)
    wrong = F.cross_entropy(logits, targets).item()  # the bug: mean over zero rows
    right_out = full_cross_entropy(logits, targets)
    return Exhibit(
        "A batch with nothing selected gives NaN", wrong, right_out.loss.item(), "loss",
        "With 15% selection a short sentence often has no selected token; the mean over zero rows is 0/0 = "
        "NaN, and one NaN step turns every weight into NaN. Guard it: loss 0 when M = 0.",
        {"M (selected rows)": int(targets.numel()), "flag": right_out.diagnostics.get("empty"),
         "P(no token selected) for a 6-token sentence": (1 - batch.config.mlm_probability) ** 6},
        key="zero_selected_nan",
        wrong_code="loss = F.cross_entropy(logits, targets)   # M = 0 → nan",
        right_code="loss = F.cross_entropy(...) if M > 0 else logits.sum() * 0.0",
    )


def in_place_masking(batch: LossBatch) -> Exhibit:
    """Masking that writes into the caller's ``original_ids``: the "original" shown later is corrupted."""
    original = batch.original_ids
    callers_ids = original.clone()  # what the caller holds and will later show as "the original"
    decisions = batch.result.decisions

    def buggy_mask(ids):  # the bug: no .clone()
        ids[decisions == Decision.MASK] = batch.mask_id
        ids[decisions == Decision.RANDOM] = batch.input_ids[decisions == Decision.RANDOM]
        return ids

    buggy_mask(callers_ids)
    corrupted = int((callers_ids != original).sum())
    labels_after = torch.where(batch.result.selected, callers_ids, torch.full_like(original, IGNORE_INDEX))
    mask_labels = int((labels_after == batch.mask_id).sum())
    kept = original.clone()
    mask_tokens(kept, batch.encoded.special_tokens_mask, batch.config, mask_token_id=batch.mask_id,
                vocab_size=batch.vocab_size, generator=batch.generator("in_place_masking"),
                special_ids=special_ids(batch.tokenizer),
                word_ids=batch.encoded.word_ids, attention_mask=batch.attention_mask, trace=False)
    return Exhibit(
        "Masking that edits the caller's original_ids", corrupted, int((kept != original).sum()),
        "original tokens overwritten",
        "Tensors are passed by reference: masking in place corrupts the caller's original_ids, so the "
        "\"original\" shown later, and labels built from it afterwards, already contain [MASK].",
        {"labels that became [MASK] if built afterwards": mask_labels,
         "selected positions": int(batch.result.selected.sum())},
        key="in_place_masking",
        wrong_code="input_ids = original_ids; input_ids[to_mask] = mask_id   # writes into original_ids",
        right_code="input_ids = original_ids.clone(); input_ids[to_mask] = mask_id",
    )


def negatives_over_positions(batch: LossBatch) -> Exhibit:
    """Negatives drawn over the positions of the batch, then used as token ids."""
    if batch.model is None:
        raise InputError("This exhibit needs the model's head; load a model first.")
    T = batch.original_ids.shape[1]
    outputs = batch_losses(batch)
    k = outputs["sampled"].diagnostics["K"]
    # The bug: a distribution over positions 0..T-1 (here the attention mask), used as vocabulary ids.
    position_ids = torch.multinomial(batch.attention_mask[0].float(), k, replacement=True,
                                     generator=batch.generator("negatives_over_positions"))

    def wrong_fn(h, negatives):  # the Loss page's negatives are ignored: the bug draws its own
        true_logit = (h * batch.weight[batch.targets]).sum(-1) + batch.bias[batch.targets]  # (M,)
        neg = h @ batch.weight[position_ids].T + batch.bias[position_ids]  # (M, K)
        neg = neg.masked_fill(position_ids[None, :] == batch.targets[:, None], float("-inf"))
        return F.cross_entropy(torch.cat([true_logit[:, None], neg], 1), torch.zeros_like(batch.targets))

    wrong, right, also = _sampled_comparison(batch, wrong_fn, outputs)
    names = batch.tokenizer.convert_ids_to_tokens(sorted(set(position_ids.tolist()))[:6])
    return Exhibit(
        "Negatives drawn over positions, not the vocabulary", wrong, right, "loss (nats)",
        f"Sampling from the {T} positions of the sequence gives ids 0..{T - 1}, which in BERT's vocabulary are "
        f"[PAD] and [unused] tokens the model never predicts: the negatives are trivially easy, the loss looks "
        f"far too good, and the gradient barely follows the full loss's "
        f"(cosine {readable(also[COSINE_BUGGY], 3)}). The correct number draws K = {k} "
        f"negatives over the vocabulary and estimates the full loss (the Loss page's sampled value).",
        {"negatives (buggy)": ", ".join(names), "K": k},
        key="negatives_over_positions",
        wrong_code="neg = torch.multinomial(attention_mask[0].float(), K)   # positions!",
        right_code="neg = torch.multinomial(q_over_vocabulary, K)   # and log Q on the negatives",
        also=also,
    )


EXHIBITS: dict[str, Callable[[LossBatch], Exhibit]] = {
    "special_ids_hardcoded": special_ids_hardcoded,
    "loss_only_at_mask": loss_only_at_mask,
    "sampled_without_true_class": sampled_without_true_class,
    "weighted_mean": weighted_mean,
    "labels_never_ignored": labels_never_ignored,
    "wrong_ignore_index": wrong_ignore_index,
    "random_overwritten": random_overwritten,
    "zero_selected_nan": zero_selected_nan,
    "in_place_masking": in_place_masking,
    "negatives_over_positions": negatives_over_positions,
}


def run_exhibits(batch: LossBatch, keys: Sequence[str] | None = None) -> list[Exhibit]:
    """Run the exhibits (all, in museum order, or the named ones) on one batch."""
    return [EXHIBITS[key](batch) for key in (keys or list(EXHIBITS))]


def exhibit_rows(exhibit: Exhibit) -> list[dict]:
    """The exhibit's details as table rows, numbers formatted for people (``formatting.readable``)."""
    return [{"what": k, "value": v if isinstance(v, str) else readable(v)} for k, v in exhibit.details.items()]


# --------------------------------------------------------------------------------------------
# The page's cards, for people
# --------------------------------------------------------------------------------------------


def rule_values(config: MaskingConfig) -> dict[str, str]:
    """The masking rule's words for the page's sentences: ``strategy``, ``p`` and the ``mask`` / ``random`` /
    ``unchanged`` shares, as percentages.

    >>> rule_values(MaskingConfig())["p"], rule_values(MaskingConfig())["mask"]
    ('15%', '80%')
    """
    return {"strategy": config.strategy.replace("_", " "), "p": f"{config.mlm_probability:.0%}",
            "mask": f"{config.mask_replace_prob:.0%}", "random": f"{config.random_replace_prob:.0%}",
            "unchanged": f"{config.unchanged_prob:.0%}"}


def correct_values(settings: LossSettings = LOSS_SETTINGS) -> dict[str, str]:
    """What the exhibits' correct values are computed with (the Loss page's defaults), for the page's sentence:
    ``scheme``, ``k``, ``replacement`` ("with" / "without") and ``correction`` in words."""
    sampled = settings.sampled
    return {"scheme": settings.scheme, "k": str(sampled.num_sampled),
            "replacement": "with" if sampled.replacement else "without",
            "correction": CORRECTION_LABELS[sampled.correction]}


def exhibit_number(value: float, unit: str) -> str:
    """An exhibit's number as its card shows it: a share with 3 significant digits and a % sign, else ``readable``.

    >>> exhibit_number(12.3456, "% of the selected tokens"), exhibit_number(2.345678, "loss (nats)")
    ('12.3%', '2.346')
    """
    if unit.startswith("%"):
        return f"{readable(value, 3)}%"
    return readable(value)


def is_bug(exhibit: Exhibit) -> bool:
    """True when the exhibit's two numbers are buggy and correct code (not two conventions)."""
    return exhibit.labels[0] == "buggy code"


def exhibit_metrics(exhibit: Exhibit) -> list[dict]:
    """The card's two numbers, as ``st.metric`` keywords: buggy (❌) beside correct (✅), or the two conventions."""
    bug = is_bug(exhibit)
    wrong_label, right_label = exhibit.labels
    return [dict(label=f"{'❌ ' if bug else ''}{wrong_label}", value=exhibit_number(exhibit.wrong_value, exhibit.unit)),
            dict(label=f"{'✅ ' if bug else ''}{right_label}", value=exhibit_number(exhibit.right_value, exhibit.unit))]


COSINE_HELP = "Cosine between this loss's gradient with respect to the hidden states and the full loss's: 1 = the same direction."


def also_metrics(exhibit: Exhibit) -> list[dict]:
    """The numbers a card shows beside its two (``Exhibit.also``), as ``st.metric`` keywords; cosines with 3
    significant digits and what a cosine means."""
    return [dict(label=name, value=readable(value, 3 if "cosine" in name else 4),
                 help=COSINE_HELP if "cosine" in name else None) for name, value in exhibit.also.items()]


def exhibit_code(exhibit: Exhibit) -> str:
    """The card's code: the buggy (or first convention's) lines, then the correct (or second) ones, each headed."""
    bug = is_bug(exhibit)
    return (f"# {'❌ buggy' if bug else exhibit.labels[0]}\n{exhibit.wrong_code}\n"
            f"# {'✅ correct' if bug else exhibit.labels[1]}\n{exhibit.right_code}")


def audit_rows(checks: Sequence, exhibits: Sequence[Exhibit]) -> list[dict]:
    """The audit's table, one row per check (``audit.audit_batch``): its result, what was found and expected, and the
    title of the exhibit that explains a failure."""
    titles = {e.key: e.title for e in exhibits}
    return [{"check": c.name, "result": "✅ pass" if c.passed else "❌ fail", "found": c.value, "expected": c.expected,
             "explained by exhibit": titles.get(c.exhibit, "") if c.exhibit else ""} for c in checks]
