"""The bug museum: ten common MLM mistakes, each run for real on the current batch.

Every exhibit runs the buggy code and the correct code on the same batch and returns both
numbers, with one sentence on why they differ. ``audit_batch`` checks a batch from someone's
own pipeline for the same mistakes, and ``load_batch_file`` reads such a batch safely.

Shapes: B = batch, T = sequence length, V = vocabulary, M = selected positions, K = sampled classes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from mlm_core.data import parse_json, read_csv
from mlm_core.errors import InputError
from mlm_core.losses import (
    draw_candidates,
    full_cross_entropy,
    proposal_distribution,
    sampled_softmax_loss,
    token_counts,
    token_frequency_weights,
    weighted_cross_entropy,
)
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig, MaskingResult, mask_tokens

LogitsFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]  # (input_ids, attention_mask, labels)
NEGATIVES = 64  # K for the negative-sampling exhibits
REPEATS = 200  # copies of the batch for the exhibit that needs a share, not a single draw


@dataclass(frozen=True)
class Exhibit:
    """One mistake: the number the buggy code gives, the number the right code gives, and why."""

    title: str
    wrong_value: float
    right_value: float
    unit: str
    why: str
    details: dict = field(default_factory=dict)
    key: str = ""
    wrong_code: str = ""
    right_code: str = ""

    @property
    def differs(self) -> bool:
        """True when the two numbers really differ (NaN differs from everything)."""
        a, b = self.wrong_value, self.right_value
        if math.isnan(a) or math.isnan(b):
            return not (math.isnan(a) and math.isnan(b))
        return abs(a - b) > 1e-6 * max(1.0, abs(a), abs(b))


@dataclass
class MuseumBatch:
    """The batch every exhibit runs on: texts, their encoding, BERT's masking and the model.

    ``logits_fn(input_ids, attention_mask, labels) -> (logits (M, V), targets (M,))`` and
    ``hidden_fn(...) -> (hidden, weight, bias, targets)`` are ``models.masked_lm_logits`` /
    ``masked_lm_hidden`` bound to a model (see ``museum_batch``); exhibits that need a model say
    so when they are None.
    """

    tokenizer: object
    texts: list[str]
    config: MaskingConfig
    seed: int
    encoded: object  # data.Encoded
    result: MaskingResult  # the correct masking of ``encoded``
    logits_fn: LogitsFn | None = None
    hidden_fn: LogitsFn | None = None
    counts: torch.Tensor | None = None  # token counts for the weighted loss (default: the texts')

    def generator(self, salt: int) -> torch.Generator:
        """A generator for one exhibit: the page's seed, offset so exhibits do not share draws."""
        return torch.Generator().manual_seed(int(self.seed) * 1_000 + salt)

    @property
    def mask_id(self) -> int:
        return int(self.tokenizer.mask_token_id)

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def logits(self, labels: torch.Tensor, input_ids: torch.Tensor | None = None):
        if self.logits_fn is None:
            raise InputError("This exhibit needs a model's logits; load a model first.")
        ids = self.result.input_ids if input_ids is None else input_ids
        with torch.no_grad():
            logits, targets = self.logits_fn(ids, self.encoded.attention_mask, labels)
        return logits.float().cpu(), targets.cpu()

    def hidden(self):
        if self.hidden_fn is None:
            raise InputError("This exhibit needs the model's head; load a model first.")
        with torch.no_grad():
            hidden, weight, bias, targets = self.hidden_fn(
                self.result.input_ids, self.encoded.attention_mask, self.result.labels)
        return hidden.float().cpu(), weight.float().cpu(), bias.float().cpu(), targets.cpu()


def museum_batch(tokenizer, texts: Sequence[str], config: MaskingConfig, *, seed: int, model=None,
                 logits_fn: LogitsFn | None = None, hidden_fn: LogitsFn | None = None,
                 counts: torch.Tensor | None = None, max_length: int = 64) -> MuseumBatch:
    """Encode and mask ``texts`` (with ``seed``), binding ``model`` for the exhibits that need logits."""
    from mlm_core.data import encode, mask_batch

    texts = [t for t in texts if t and t.strip()]
    encoded = encode(tokenizer, texts, max_length=max_length)
    result = mask_batch(tokenizer, encoded, config, torch.Generator().manual_seed(int(seed)))
    if model is not None:
        from mlm_core.models import masked_lm_hidden, masked_lm_logits

        logits_fn = logits_fn or (lambda i, a, l: masked_lm_logits(model, i, a, l))
        hidden_fn = hidden_fn or (lambda i, a, l: masked_lm_hidden(model, i, a, l))
    return MuseumBatch(tokenizer, texts, config, int(seed), encoded, result, logits_fn, hidden_fn, counts)


def _special_positions(batch: MuseumBatch) -> torch.Tensor:
    """(B, T) True on every special token and on padding, from the tokenizer's own ids."""
    from mlm_core.data import special_ids

    ids = batch.encoded.input_ids
    specials = torch.tensor(special_ids(batch.tokenizer), dtype=ids.dtype)
    return torch.isin(ids, specials) | (batch.encoded.attention_mask == 0)


# --------------------------------------------------------------------------------------------
# The exhibits
# --------------------------------------------------------------------------------------------


def special_ids_hardcoded(batch: MuseumBatch) -> Exhibit:
    """Special tokens hard-coded as ids 0 and 1: for BERT that is [PAD] and [unused0]."""
    ids = batch.encoded.input_ids
    special = _special_positions(batch)
    buggy_mask = torch.isin(ids, torch.tensor([0, 1]))  # the bug: "special tokens are 0 and 1"
    right_mask = batch.encoded.special_tokens_mask.bool()  # from the tokenizer
    exposed_wrong = int((special & ~buggy_mask).sum())
    exposed_right = int((special & ~right_mask).sum())
    buggy = mask_tokens(ids, buggy_mask.long(), batch.config, mask_token_id=batch.mask_id,
                        vocab_size=batch.vocab_size, generator=batch.generator(1), trace=False)
    exposed_tokens = sorted(set(batch.tokenizer.convert_ids_to_tokens(ids[special & ~buggy_mask].tolist())))
    return Exhibit(
        "Special tokens hard-coded as ids 0 and 1", exposed_wrong, exposed_right, "special tokens open to masking",
        "In BERT's vocabulary ids 0 and 1 are [PAD] and [unused0]; [CLS] (101) and [SEP] (102) are not "
        "protected, so they get masked and the model learns to predict them.",
        {"unprotected tokens": exposed_tokens,
         "special tokens selected in this draw (buggy)": int((buggy.selected & special).sum()),
         "special tokens selected (right)": int((batch.result.selected & special).sum())},
        key="special_ids_hardcoded",
        wrong_code="special_tokens_mask = torch.isin(input_ids, torch.tensor([0, 1]))",
        right_code="special_tokens_mask = tokenizer(..., return_special_tokens_mask=True)['special_tokens_mask']",
    )


def loss_only_at_mask(batch: MuseumBatch) -> Exhibit:
    """Loss only where the input is [MASK]: the 10% random and 10% unchanged positions are dropped."""
    original, labels = batch.encoded.input_ids, batch.result.labels
    buggy_labels = torch.where(batch.result.input_ids == batch.mask_id, original, torch.full_like(original, IGNORE_INDEX))
    n_wrong, n_right = int((buggy_labels != IGNORE_INDEX).sum()), int((labels != IGNORE_INDEX).sum())
    details = {"positions in the loss (buggy)": n_wrong, "positions in the loss (right)": n_right,
               "random positions dropped": int((batch.result.decisions == Decision.RANDOM).sum()),
               "unchanged positions dropped": int((batch.result.decisions == Decision.UNCHANGED).sum())}
    if batch.logits_fn is not None:
        wrong = full_cross_entropy(*batch.logits(buggy_labels)).loss.item()
        right = full_cross_entropy(*batch.logits(labels)).loss.item()
        unit = "loss (nats)"
    else:
        wrong, right, unit = n_wrong, n_right, "positions in the loss"
    if n_wrong == n_right:
        details["note"] = "This batch happens to have no random or unchanged positions: try another seed."
    return Exhibit(
        "Loss only where the input is [MASK]", wrong, right, unit,
        "BERT predicts every selected token, also the 10% replaced by a random token and the 10% left "
        "unchanged; taking the loss only at [MASK] teaches the model nothing about real tokens in context.",
        details, key="loss_only_at_mask",
        wrong_code="labels[input_ids != tokenizer.mask_token_id] = -100",
        right_code="labels[~selected] = -100   # selected = masked + random + unchanged",
    )


def _negative_ids(batch: MuseumBatch, salt: int, k: int) -> torch.Tensor:
    q = proposal_distribution("uniform", batch.vocab_size)
    return draw_candidates(q, k, True, batch.generator(salt))


def sampled_without_true_class(batch: MuseumBatch) -> Exhibit:
    """"Negative sampling" that gathers the sampled logits but forgets to put the true class first."""
    hidden, weight, bias, targets = batch.hidden()
    k = min(NEGATIVES, weight.shape[0] - 1)
    sampled_ids = _negative_ids(batch, 3, k)  # (K,) the same negatives for both versions
    # The bug: column 0 is taken to be the true class, but it is just the first negative.
    sampled_logits = hidden @ weight[sampled_ids].T + bias[sampled_ids]  # (M, K)
    wrong = F.cross_entropy(sampled_logits, torch.zeros_like(targets)).item() if len(targets) else float("nan")
    right_out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=k, sampler="uniform",
                                     replacement=True, generator=batch.generator(3))
    full = full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()
    return Exhibit(
        "Negative sampling without the true class", wrong, right_out.loss.item(), "loss (nats)",
        "The candidate set must be [true class, K negatives] with the label pointing at the true class; "
        "without it the model is trained to predict whichever negative came first.",
        {"K": k, "same negatives in both": bool(torch.equal(sampled_ids, right_out.diagnostics["sampled_ids"])),
         "full softmax loss": full, "first negative": batch.tokenizer.convert_ids_to_tokens([int(sampled_ids[0])])[0]},
        key="sampled_without_true_class",
        wrong_code="loss = F.cross_entropy(hidden @ W[neg].T, torch.zeros(M))",
        right_code="loss = F.cross_entropy(torch.cat([true_logit, hidden @ W[neg].T], 1), torch.zeros(M))",
    )


def weighted_mean(batch: MuseumBatch) -> Exhibit:
    """Weighted loss divided by M (``.mean()``) instead of by the sum of the weights."""
    logits, targets = batch.logits(batch.result.labels)
    counts = batch.counts if batch.counts is not None else token_counts(batch.tokenizer, batch.texts, logits.shape[1])
    weights = token_frequency_weights(counts, scheme="inverse")
    per_token = F.cross_entropy(logits, targets, reduction="none")  # (M,)
    w = weights[targets]  # (M,)
    wrong = (w * per_token).mean().item() if len(targets) else float("nan")  # the bug
    right = weighted_cross_entropy(logits, targets, weights).loss.item()
    return Exhibit(
        "Weighted loss with .mean()", wrong, right, "loss (nats)",
        "F.cross_entropy(weight=w) divides by the sum of the weights of the targets, not by M; with .mean() "
        "the loss scale moves with whichever tokens happen to be in the batch.",
        {"mean weight of the targets": float(w.mean()) if len(w) else float("nan"),
         "F.cross_entropy(weight=w)": F.cross_entropy(logits, targets, weight=weights).item() if len(targets) else 0.0},
        key="weighted_mean",
        wrong_code="loss = (w[y] * F.cross_entropy(logits, y, reduction='none')).mean()",
        right_code="loss = (w[y] * ce).sum() / w[y].sum()   # = F.cross_entropy(logits, y, weight=w)",
    )


def labels_never_ignored(batch: MuseumBatch) -> Exhibit:
    """Labels = a copy of the input ids, unselected positions never set to -100: loss on every token."""
    buggy_labels = batch.encoded.input_ids.clone()  # the bug: labels = input_ids.clone(), and nothing else
    wrong_logits, wrong_targets = batch.logits(buggy_labels)
    wrong = full_cross_entropy(wrong_logits, wrong_targets).loss.item()
    right = full_cross_entropy(*batch.logits(batch.result.labels)).loss.item()
    return Exhibit(
        "Loss over every token (labels never set to -100)", wrong, right, "loss (nats)",
        "Unselected tokens are visible in the input, so predicting them is copying: the loss looks low and "
        "the gradient is dominated by a task that teaches nothing.",
        {"positions in the loss (buggy)": int(wrong_targets.numel()),
         "positions in the loss (right)": int((batch.result.labels != IGNORE_INDEX).sum()),
         "of which padding (buggy)": int((batch.encoded.attention_mask == 0).sum())},
        key="labels_never_ignored",
        wrong_code="labels = input_ids.clone()",
        right_code="labels = input_ids.clone(); labels[~selected] = -100",
    )


def wrong_ignore_index(batch: MuseumBatch) -> Exhibit:
    """Unselected labels filled with 0 (or -1) while the loss ignores -100."""
    original, selected = batch.encoded.input_ids, batch.result.selected
    zero_labels = torch.where(selected, original, torch.zeros_like(original))  # the bug: 0 as "ignore"
    wrong = full_cross_entropy(*batch.logits(zero_labels)).loss.item()
    right = full_cross_entropy(*batch.logits(batch.result.labels)).loss.item()
    minus_one = torch.where(selected, original, torch.full_like(original, -1))
    logits_all, targets_all = batch.logits(minus_one)
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


def random_overwritten(batch: MuseumBatch) -> Exhibit:
    """Random replacements drawn first, then overwritten by the [MASK] step: random shrinks to 2%."""
    cfg = batch.config
    ids = batch.encoded.input_ids.repeat(REPEATS, 1)  # (R*B, T): many draws of the same batch
    special = batch.encoded.special_tokens_mask.repeat(REPEATS, 1).bool()
    g = batch.generator(7)
    # The bug: both replacement steps look only at `selected`, so [MASK] overwrites some random ones.
    selected = ~special & (torch.rand(ids.shape, generator=g) < cfg.mlm_probability)
    corrupted = ids.clone()
    random_here = selected & (torch.rand(ids.shape, generator=g) < cfg.random_replace_prob)
    corrupted[random_here] = torch.randint(batch.vocab_size, ids.shape, generator=g)[random_here]
    mask_here = selected & (torch.rand(ids.shape, generator=g) < cfg.mask_replace_prob)
    corrupted[mask_here] = batch.mask_id
    random_final = selected & (corrupted != batch.mask_id) & (corrupted != ids)
    wrong = 100.0 * int(random_final.sum()) / max(1, int(selected.sum()))
    right_result = mask_tokens(ids, special.long(), cfg, mask_token_id=batch.mask_id, vocab_size=batch.vocab_size,
                               generator=batch.generator(8), special_ids=_special_id_list(batch), trace=False)
    right = 100.0 * int((right_result.decisions == Decision.RANDOM).sum()) / max(1, int(right_result.selected.sum()))
    return Exhibit(
        "Random replacements overwritten by the mask step", wrong, right, "% of selected tokens that are random",
        "The [MASK] step must only draw among tokens not already replaced (BERT: random with "
        "probability 0.1 / 0.2 = 0.5 among the non-[MASK] ones); done independently, it overwrites "
        "most random tokens and leaves about 10% × 20% = 2%.",
        {"draws of the batch": REPEATS, "selected tokens (buggy)": int(selected.sum()),
         "[MASK] share (buggy, %)": 100.0 * int((corrupted[selected] == batch.mask_id).sum()) / max(1, int(selected.sum()))},
        key="random_overwritten",
        wrong_code="ids[sel & (u1 < 0.1)] = random; ids[sel & (u2 < 0.8)] = MASK",
        right_code="mask = sel & (v < 0.8); rand = sel & ~mask & (w < 0.5)",
    )


def _special_id_list(batch: MuseumBatch) -> tuple[int, ...]:
    from mlm_core.data import special_ids

    return special_ids(batch.tokenizer)


def zero_selected_nan(batch: MuseumBatch) -> Exhibit:
    """A batch in which nothing was selected: ``F.cross_entropy`` averages over zero rows → NaN."""
    nothing = torch.full_like(batch.encoded.input_ids, IGNORE_INDEX)
    if batch.logits_fn is not None:
        logits, targets = batch.logits(nothing, batch.encoded.input_ids)
    else:
        logits, targets = torch.zeros(0, batch.vocab_size), torch.zeros(0, dtype=torch.long)
    wrong = F.cross_entropy(logits, targets).item()  # the bug: mean over zero rows
    right_out = full_cross_entropy(logits, targets)
    return Exhibit(
        "A batch with nothing selected gives NaN", wrong, right_out.loss.item(), "loss",
        "With 15% selection a short sentence often has no selected token; the mean over zero rows is 0/0 = "
        "NaN, and one NaN step turns every weight into NaN. Guard it: loss 0 when M = 0.",
        {"M (selected rows)": int(targets.numel()), "flag": right_out.diagnostics.get("empty"),
         "P(no token selected) for a 6-token sentence": round((1 - batch.config.mlm_probability) ** 6, 3)},
        key="zero_selected_nan",
        wrong_code="loss = F.cross_entropy(logits, targets)   # M = 0 → nan",
        right_code="loss = F.cross_entropy(...) if M > 0 else logits.sum() * 0.0",
    )


def in_place_masking(batch: MuseumBatch) -> Exhibit:
    """Masking that writes into the caller's ``input_ids``: the "original" shown later is corrupted."""
    original = batch.encoded.input_ids
    callers_ids = original.clone()  # what the caller holds and will later show as "the original"
    decisions = batch.result.decisions

    def buggy_mask(input_ids):  # the bug: no .clone()
        input_ids[decisions == Decision.MASK] = batch.mask_id
        input_ids[decisions == Decision.RANDOM] = batch.result.input_ids[decisions == Decision.RANDOM]
        return input_ids

    buggy_mask(callers_ids)
    corrupted = int((callers_ids != original).sum())
    labels_after = torch.where(batch.result.selected, callers_ids, torch.full_like(original, IGNORE_INDEX))
    mask_labels = int((labels_after == batch.mask_id).sum())
    kept = original.clone()
    mask_tokens(kept, batch.encoded.special_tokens_mask, batch.config, mask_token_id=batch.mask_id,
                vocab_size=batch.vocab_size, generator=batch.generator(9), special_ids=_special_id_list(batch))
    return Exhibit(
        "Masking that edits the caller's input_ids", corrupted, int((kept != original).sum()),
        "original tokens overwritten",
        "Tensors are passed by reference: masking in place corrupts the caller's copy, so the \"original\" "
        "shown later, and labels built from it afterwards, already contain [MASK].",
        {"labels that became [MASK] if built afterwards": mask_labels,
         "selected positions": int(batch.result.selected.sum())},
        key="in_place_masking",
        wrong_code="input_ids[to_mask] = mask_id   # writes into the caller's tensor",
        right_code="corrupted = input_ids.clone(); corrupted[to_mask] = mask_id",
    )


def negatives_over_positions(batch: MuseumBatch) -> Exhibit:
    """Negatives drawn over the positions of the batch, then used as token ids."""
    hidden, weight, bias, targets = batch.hidden()
    T = batch.encoded.input_ids.shape[1]
    k = min(NEGATIVES, weight.shape[0] - 1)
    g = batch.generator(10)
    # The bug: a distribution over positions 0..T-1 (here the attention mask), used as vocabulary ids.
    position_ids = torch.multinomial(batch.encoded.attention_mask[0].float(), k, replacement=True, generator=g)
    vocab_ids = _negative_ids(batch, 10, k)

    def loss_with(negatives):
        if len(targets) == 0:
            return float("nan")
        true_logit = (hidden * weight[targets]).sum(-1) + bias[targets]  # (M,)
        neg_logits = hidden @ weight[negatives].T + bias[negatives]  # (M, K)
        neg_logits = neg_logits.masked_fill(negatives[None, :] == targets[:, None], float("-inf"))
        candidates = torch.cat([true_logit[:, None], neg_logits], 1)  # (M, 1 + K)
        return F.cross_entropy(candidates, torch.zeros_like(targets)).item()

    names = batch.tokenizer.convert_ids_to_tokens(sorted(set(position_ids.tolist()))[:6])
    return Exhibit(
        "Negatives drawn over positions, not the vocabulary", loss_with(position_ids), loss_with(vocab_ids),
        "loss (nats)",
        f"Sampling from the {T} positions of the sequence gives ids 0..{T - 1}, which in BERT's vocabulary are "
        "[PAD] and [unused] tokens the model never predicts: the negatives are trivially easy and the "
        "loss looks far too good.",
        {"negatives (buggy)": names, "K": k, "full softmax loss": full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()},
        key="negatives_over_positions",
        wrong_code="neg = torch.multinomial(attention_mask[0].float(), K)   # positions!",
        right_code="neg = torch.multinomial(q_over_vocabulary, K)",
    )


EXHIBITS: dict[str, Callable[[MuseumBatch], Exhibit]] = {
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


def run_exhibits(batch: MuseumBatch, keys: Sequence[str] | None = None) -> list[Exhibit]:
    """Run the exhibits (all, in museum order, or the named ones) on one batch."""
    return [EXHIBITS[key](batch) for key in (keys or list(EXHIBITS))]


# --------------------------------------------------------------------------------------------
# Audit your own batch
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditCheck:
    """One check of an uploaded batch: passed or not, the value found, what was expected."""

    name: str
    passed: bool
    value: str
    expected: str
    exhibit: str | None = None  # key in EXHIBITS that explains a failure


@dataclass(frozen=True)
class BatchArrays:
    """A batch read from a file: three (B, T) long tensors."""

    original_ids: torch.Tensor
    input_ids: torch.Tensor
    labels: torch.Tensor


def _as_tensor(values, name: str) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        t = values.long()
    else:
        try:
            t = torch.tensor(values, dtype=torch.long)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(f"{name} must be a list of rows of whole numbers, all rows the same length "
                             "(a padded batch, as fed to the model).") from None
    if t.dim() == 1:
        t = t[None]
    if t.dim() != 2 or t.numel() == 0:
        raise InputError(f"{name} must be a non-empty (batch, length) table of token ids.")
    return t


def _tolerance(p: float, n: int) -> float:
    """Four standard errors of a share p measured on n items (at least 1 point)."""
    return max(0.01, 4.0 * math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1)))


def audit_batch(original_ids, input_ids, labels, *, tokenizer, config: MaskingConfig | None = None) -> list[AuditCheck]:
    """Check a batch from your own pipeline for the museum's mistakes.

    ``original_ids``: the token ids before masking; ``input_ids``: what the model sees;
    ``labels``: the targets (B, T). Statistical checks pass within 4 standard errors of the
    configured rates, so small batches are judged leniently.
    """
    from mlm_core.data import special_ids

    config = config or MaskingConfig()
    original = _as_tensor(original_ids, "original_ids")
    inputs = _as_tensor(input_ids, "input_ids")
    labels = _as_tensor(labels, "labels")
    if not (original.shape == inputs.shape == labels.shape):
        raise InputError(f"original_ids {tuple(original.shape)}, input_ids {tuple(inputs.shape)} and labels "
                         f"{tuple(labels.shape)} must have the same shape.")
    V = len(tokenizer)
    mask_id = tokenizer.mask_token_id
    pad_id = tokenizer.pad_token_id
    specials = torch.tensor(special_ids(tokenizer), dtype=torch.long)
    special = torch.isin(original, specials)  # (B, T) includes padding
    padding = original == pad_id if pad_id is not None else torch.zeros_like(special)
    checks = []

    # Ignore index: label values that are not token ids.
    not_ids = sorted(set(labels[(labels < 0) | (labels >= V)].tolist()))
    zero_filler = pad_id is not None and int(((labels == pad_id) & (original != pad_id)).sum()) > 0
    if not_ids == [IGNORE_INDEX] and not zero_filler:
        checks.append(AuditCheck("Ignore index", True, "-100", "-100"))
    elif zero_filler:
        n = int(((labels == pad_id) & (original != pad_id)).sum())
        checks.append(AuditCheck("Ignore index", False, f"{pad_id} ({n} labels of real tokens)", "-100",
                                 "wrong_ignore_index"))
    elif not not_ids:
        checks.append(AuditCheck("Ignore index", False, "none: every position has a label", "-100",
                                 "labels_never_ignored"))
    else:
        checks.append(AuditCheck("Ignore index", False, ", ".join(str(v) for v in not_ids), "-100",
                                 "wrong_ignore_index"))
    ignore_values = set(not_ids) | ({pad_id} if zero_filler else set())
    labelled = ~torch.isin(labels, torch.tensor(sorted(ignore_values) or [IGNORE_INDEX]))  # (B, T)

    # Selection rate over the eligible (non-special) tokens.
    eligible = ~special
    n_eligible = int(eligible.sum())
    selected = labelled & eligible
    rate = int(selected.sum()) / max(1, n_eligible)
    p = config.mlm_probability
    tol = _tolerance(p, n_eligible)
    if int(labelled.sum()) == 0:
        checks.append(AuditCheck("Selection rate", False, "0 (nothing selected: the loss is NaN)",
                                 f"{p:.1%} ± {tol:.1%}", "zero_selected_nan"))
    else:
        ok = abs(rate - p) <= tol
        checks.append(AuditCheck("Selection rate", ok, f"{rate:.1%} of {n_eligible} tokens", f"{p:.1%} ± {tol:.1%}",
                                 None if ok else ("labels_never_ignored" if rate > p else "loss_only_at_mask")))

    # The 80/10/10 split among the selected tokens.
    n_sel = int(selected.sum())
    if n_sel:
        s_in, s_orig = inputs[selected], original[selected]
        shares = {"[MASK]": float((s_in == mask_id).float().mean()),
                  "random": float(((s_in != mask_id) & (s_in != s_orig)).float().mean()),
                  "unchanged": float((s_in == s_orig).float().mean())}
        wanted = {"[MASK]": config.mask_replace_prob, "random": config.random_replace_prob,
                  "unchanged": config.unchanged_prob}
        bad = [k for k in shares if abs(shares[k] - wanted[k]) > _tolerance(wanted[k], n_sel)]
        exhibit = None
        if bad:  # which mistake leaves this fingerprint?
            if shares["[MASK]"] > 0.99 and wanted["[MASK]"] < 0.99:
                exhibit = "loss_only_at_mask"  # only [MASK] positions labelled
            elif shares["unchanged"] > 0.5 > wanted["unchanged"]:
                exhibit = "labels_never_ignored"  # labels on (almost) every token
            else:
                exhibit = "random_overwritten"
        checks.append(AuditCheck(
            "80/10/10 split", not bad, " / ".join(f"{shares[k]:.0%}" for k in shares),
            " / ".join(f"{wanted[k]:.0%}" for k in wanted) + f" (of {n_sel} selected)", exhibit))
    else:
        checks.append(AuditCheck("80/10/10 split", False, "no selected tokens", "80% / 10% / 10%", "zero_selected_nan"))

    # Special and padding tokens must never be selected.
    bad_special = int((labelled & special).sum())
    n_pad = int((labelled & padding).sum())
    if bad_special == 0:
        exhibit = None
    else:
        exhibit = "labels_never_ignored" if (n_pad or rate > 0.5) else "special_ids_hardcoded"
    checks.append(AuditCheck("Special or padding tokens selected", bad_special == 0,
                             f"{bad_special} ({n_pad} padding)", "0", exhibit))

    # Labels: the original token wherever set; every changed position labelled.
    label_mismatch = int((labelled & (labels != original)).sum())
    changed_unlabelled = int(((inputs != original) & ~labelled).sum())
    originals_masked = int((original == mask_id).sum()) if mask_id is not None else 0
    ok = label_mismatch == 0 and changed_unlabelled == 0 and originals_masked == 0
    if ok:
        exhibit = None
    elif originals_masked or (mask_id is not None and int((labelled & (labels == mask_id)).sum())):
        exhibit = "in_place_masking"
    else:
        exhibit = "labels_never_ignored" if changed_unlabelled == 0 else "loss_only_at_mask"
    checks.append(AuditCheck(
        "Label/-100 consistency", ok,
        f"{label_mismatch} labels ≠ original, {changed_unlabelled} changed tokens without a label, "
        f"{originals_masked} [MASK] in the originals",
        "labels = original where selected, -100 elsewhere", exhibit))
    return checks


MAX_UPLOAD_BYTES = 5_000_000
REFUSED_EXTENSIONS = (".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt", ".npy", ".npz", ".joblib")
BATCH_FORMAT = (
    'JSON: {"original_ids": [[...]], "input_ids": [[...]], "labels": [[...]]} (rows of equal length, '
    "a padded batch); CSV: a header row, then columns row, position, original_id, input_id, label "
    "(one line per token)."
)


def load_batch_file(name: str, data: bytes) -> BatchArrays:
    """A batch from an uploaded .json or .csv file (see ``BATCH_FORMAT``); never unpickles anything.

    >>> b = load_batch_file("b.json", b'{"original_ids": [[1, 2]], "input_ids": [[1, 9]], "labels": [[-100, 2]]}')
    >>> b.labels.tolist()
    [[-100, 2]]
    """
    lower = (name or "").lower()
    if lower.endswith(REFUSED_EXTENSIONS):
        raise InputError(
            f"{name!r} is refused: .pt, .bin and pickle files can run arbitrary code when they are opened, so "
            f"MLM Lab never loads them. Save your batch as JSON or CSV instead. {BATCH_FORMAT}")
    if not lower.endswith((".json", ".csv")):
        raise InputError(f"{name!r} is neither .json nor .csv. {BATCH_FORMAT}")
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(f"{name!r} is {len(data) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES / 1e6:.0f} MB. "
                         "Upload a few batches, not a dataset.")
    if data[:2] == b"\x80\x04" or b"\x00" in data[:4096]:
        raise InputError(f"{name!r} looks like a binary (pickle) file, not text. {BATCH_FORMAT}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{name!r} is not UTF-8 text. {BATCH_FORMAT}") from None
    if lower.endswith(".json"):
        try:
            record = parse_json(text, name)
        except InputError as exc:
            raise InputError(f"{exc} {BATCH_FORMAT}") from None
        if not isinstance(record, dict) or not {"original_ids", "input_ids", "labels"} <= set(record):
            raise InputError(f"{name!r} needs the keys original_ids, input_ids and labels. {BATCH_FORMAT}")
        arrays = [_as_tensor(record[k], k) for k in ("original_ids", "input_ids", "labels")]
    else:
        arrays = _read_batch_csv(name, text)
    if not (arrays[0].shape == arrays[1].shape == arrays[2].shape):
        raise InputError(f"original_ids, input_ids and labels must have the same shape; got "
                         f"{', '.join(str(tuple(a.shape)) for a in arrays)}.")
    return BatchArrays(*arrays)


def _read_batch_csv(name: str, text: str) -> list[torch.Tensor]:
    columns = ("row", "position", "original_id", "input_id", "label")
    table_rows = read_csv(text, name)
    header = [c.strip().lower() for c in table_rows[0]] if table_rows else []
    if not set(columns) <= set(header):
        raise InputError(f"{name!r} needs the columns {', '.join(columns)}. {BATCH_FORMAT}")
    where = [header.index(c) for c in columns]
    cells = {}
    for line, record in enumerate(table_rows[1:], 2):
        if not any(cell.strip() for cell in record):
            continue  # a blank line
        try:
            values = [int(record[i].strip()) for i in where]
        except (IndexError, ValueError):
            raise InputError(f"Line {line} of {name!r} has a value that is not a whole number.") from None
        row, position = values[0], values[1]
        if row < 0 or position < 0:
            raise InputError(f"Line {line} of {name!r}: row and position must not be negative.")
        cells[(row, position)] = values[2:]
    if not cells:
        raise InputError(f"{name!r} has no tokens. {BATCH_FORMAT}")
    rows = sorted({r for r, _ in cells})
    length = max(p for _, p in cells) + 1
    if len(cells) != len(rows) * length or len(cells) > 2_000_000:
        raise InputError(f"{name!r} must give every row the same positions 0..{length - 1} (a padded batch).")
    try:
        table = torch.tensor([[cells[(r, p)] for p in range(length)] for r in rows], dtype=torch.long)  # (B, T, 3)
    except (OverflowError, RuntimeError, ValueError):  # a number beyond 64 bits
        raise InputError(f"{name!r} holds a number too large for a token id.") from None
    return [table[..., 0], table[..., 1], table[..., 2]]


def batch_to_json(original_ids: torch.Tensor, input_ids: torch.Tensor, labels: torch.Tensor) -> str:
    """The JSON format ``load_batch_file`` reads (for an example download)."""
    return json.dumps({"original_ids": original_ids.tolist(), "input_ids": input_ids.tolist(),
                       "labels": labels.tolist()})
