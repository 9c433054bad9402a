"""Audit your own batch: a batch from someone's own pipeline, checked for the Bug museum's mistakes.

``load_batch_file`` reads the batch safely (JSON or CSV, never a pickle) as three (B, T) tensors in
the museum's vocabulary: ``original_ids`` (before masking), ``input_ids`` (what the model sees),
``labels`` (original id where selected, -100 elsewhere). ``audit_batch`` checks them against the
masking rule; a failed check names the exhibit of ``lessons.museum`` that explains it.

Shapes: B = batch, T = sequence length, V = vocabulary.

>>> from mlm_core.bundled import load_default_tokenizer
>>> b = load_batch_file("b.json", b'{"original_ids": [[101, 1996, 4937, 102]], "input_ids": [[101, 103, 4937, 102]], '
...                     b'"labels": [[-100, 1996, -100, -100]]}')
>>> [c.name for c in audit_batch(b.original_ids, b.input_ids, b.labels, tokenizer=load_default_tokenizer())][:2]
['Ignore index', 'Selection rate']
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import torch

from mlm_core.data import parse_json, read_csv, special_ids
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX, MaskingConfig


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


def _independent_units(selected: torch.Tensor) -> float:
    """The effective number of independent decisions when each run of consecutive selected tokens shares one.

    With runs of L_i tokens, a per-token share has the variance of (Σ L_i)² / Σ L_i² independent draws (the
    design effect of clusters). Runs, not spans: touching spans count as one run, which only widens the test.
    """
    lengths = []
    for row in selected.tolist():
        run = 0
        for chosen in row + [False]:
            if chosen:
                run += 1
            elif run:
                lengths.append(run)
                run = 0
    total = sum(lengths)
    return total * total / max(1, sum(n * n for n in lengths))


def audit_batch(original_ids, input_ids, labels, *, tokenizer, config: MaskingConfig | None = None) -> list[AuditCheck]:
    """Check a batch from your own pipeline for the museum's mistakes.

    ``original_ids``: the token ids before masking; ``input_ids``: what the model sees;
    ``labels``: the targets (B, T). Statistical checks pass within 4 standard errors of the
    configured rates, so small batches are judged leniently.
    """
    config = config or MaskingConfig()
    original = _as_tensor(original_ids, "original_ids")
    inputs = _as_tensor(input_ids, "input_ids")
    labels = _as_tensor(labels, "labels")
    if not (original.shape == inputs.shape == labels.shape):
        raise InputError(f"original_ids {tuple(original.shape)}, input_ids {tuple(inputs.shape)} and labels "
                         f"{tuple(labels.shape)} must have the same shape.")
    mask_id, pad_id = tokenizer.mask_token_id, tokenizer.pad_token_id
    special = torch.isin(original, torch.tensor(special_ids(tokenizer), dtype=torch.long))  # (B, T) with padding
    padding = original == pad_id if pad_id is not None else torch.zeros_like(special)
    ignore, labelled = _ignore_index_check(labels, original, len(tokenizer), pad_id)
    selection, selected, rate = _selection_check(labelled, special, padding, config)
    return [ignore, selection, _split_check(inputs, original, selected, config, mask_id),
            _special_check(labelled, special, padding, rate), _label_check(labels, original, inputs, labelled, mask_id)]


SHOWN_VALUES = 5  # a table cell lists this many values, then how many there are (a crafted batch had 400,000)


def first_values(values, shown: int = SHOWN_VALUES) -> str:
    """The first ``shown`` values, then the count of all of them when there are more: one short table cell.

    >>> first_values([-100]), first_values(range(-9, 0))
    ('-100', '-9, -8, -7, -6, -5 … (9 values)')
    """
    values = list(values)
    head = ", ".join(str(v) for v in values[:shown])
    return head if len(values) <= shown else f"{head} … ({len(values):,} values)"


def _ignore_index_check(labels, original, V: int, pad_id: int | None) -> tuple[AuditCheck, torch.Tensor]:
    """Label values that are not token ids: -100 and nothing else (a pad id on real tokens is a wrong filler).
    Also returns where a label is set (B, T)."""
    not_ids = sorted(set(labels[(labels < 0) | (labels >= V)].tolist()))
    zero_filler = pad_id is not None and int(((labels == pad_id) & (original != pad_id)).sum()) > 0
    if not_ids == [IGNORE_INDEX] and not zero_filler:
        check = AuditCheck("Ignore index", True, "-100", "-100")
    elif zero_filler:
        n = int(((labels == pad_id) & (original != pad_id)).sum())
        check = AuditCheck("Ignore index", False, f"{pad_id} ({n} labels of real tokens)", "-100", "wrong_ignore_index")
    elif not not_ids:
        check = AuditCheck("Ignore index", False, "none: every position has a label", "-100", "labels_never_ignored")
    else:
        check = AuditCheck("Ignore index", False, first_values(not_ids), "-100", "wrong_ignore_index")
    ignore_values = set(not_ids) | ({pad_id} if zero_filler else set())
    labelled = ~torch.isin(labels, torch.tensor(sorted(ignore_values) or [IGNORE_INDEX]))  # (B, T)
    return check, labelled


def _selection_check(labelled, special, padding, config: MaskingConfig) -> tuple[AuditCheck, torch.Tensor, float]:
    """The selection rate over the eligible (non-special) tokens. Exact count and span fix each row's count
    (``MaskingConfig.selection_budget``, from the row's length): on short rows that is not p (Google's exact count
    selects ~18.6% of the workshop sentences' tokens), so the rule's own count is expected. Also returns the selected
    tokens (B, T) and the rate."""
    eligible = ~special
    n_eligible = int(eligible.sum())
    selected = labelled & eligible
    rate = int(selected.sum()) / max(1, n_eligible)
    p = config.mlm_probability
    tol = _tolerance(p, n_eligible)
    lengths, eligible_rows = (~padding).sum(1).tolist(), eligible.sum(1).tolist()  # (B,) [CLS]/[SEP] counted
    budgets = [config.selection_budget(int(n), int(e)) for n, e in zip(lengths, eligible_rows)]
    fixed = all(b is not None for b in budgets)
    if int(labelled.sum()) == 0:
        return (AuditCheck("Selection rate", False, "0 (nothing selected: the loss is NaN)", f"{p:.1%} ± {tol:.1%}",
                           "zero_selected_nan"), selected, rate)
    if fixed:
        per_row = selected.sum(1).tolist()
        expected_rate = sum(budgets) / max(1, n_eligible)
        if config.strategy == "exact_count":  # Google's count, row by row
            ok = per_row == budgets
            expected = f"{expected_rate:.1%}: min({config.max_predictions}, max(1, round(n × {p:g}))) in each row"
        else:  # span: never past a row's budget, short of it by less than a word
            ok = all(s <= b for s, b in zip(per_row, budgets)) and rate >= expected_rate - _tolerance(expected_rate,
                                                                                                    n_eligible)
            expected = f"{expected_rate:.1%}: each row's budget round({p:g} × its eligible tokens), never more"
        return (AuditCheck("Selection rate", ok, f"{rate:.1%} of {n_eligible} tokens", expected,
                           None if ok else ("labels_never_ignored" if rate > expected_rate else "loss_only_at_mask")),
                selected, rate)
    ok = abs(rate - p) <= tol
    return (AuditCheck("Selection rate", ok, f"{rate:.1%} of {n_eligible} tokens", f"{p:.1%} ± {tol:.1%}",
                       None if ok else ("labels_never_ignored" if rate > p else "loss_only_at_mask")), selected, rate)


def _split_check(inputs, original, selected, config: MaskingConfig, mask_id: int | None) -> AuditCheck:
    """The 80/10/10 split among the selected tokens, and which mistake leaves a wrong split's fingerprint."""
    n_sel = int(selected.sum())
    if not n_sel:
        return AuditCheck("80/10/10 split", False, "no selected tokens", "80% / 10% / 10%", "zero_selected_nan")
    s_in, s_orig = inputs[selected], original[selected]
    shares = {"[MASK]": float((s_in == mask_id).float().mean()),
              "random": float(((s_in != mask_id) & (s_in != s_orig)).float().mean()),
              "unchanged": float((s_in == s_orig).float().mean())}
    wanted = {"[MASK]": config.mask_replace_prob, "random": config.random_replace_prob,
              "unchanged": config.unchanged_prob}
    n_units = n_sel  # tokens decided independently
    if config.strategy == "span" and config.span_replacement == "per_span":
        n_units = _independent_units(selected)  # a span shares one decision: fewer independent draws
    bad = [k for k in shares if abs(shares[k] - wanted[k]) > _tolerance(wanted[k], n_units)]
    exhibit = None
    if bad:  # which mistake leaves this fingerprint?
        if shares["[MASK]"] > 0.99 and wanted["[MASK]"] < 0.99:
            exhibit = "loss_only_at_mask"  # only [MASK] positions labelled
        elif shares["unchanged"] > 0.5 > wanted["unchanged"]:
            exhibit = "labels_never_ignored"  # labels on (almost) every token
        else:
            exhibit = "random_overwritten"
    return AuditCheck("80/10/10 split", not bad, " / ".join(f"{shares[k]:.0%}" for k in shares),
                      " / ".join(f"{wanted[k]:.0%}" for k in wanted) + f" (of {n_sel} selected)", exhibit)


def _special_check(labelled, special, padding, rate: float) -> AuditCheck:
    """Special and padding tokens must never be selected."""
    bad_special = int((labelled & special).sum())
    n_pad = int((labelled & padding).sum())
    if bad_special == 0:
        exhibit = None
    else:
        exhibit = "labels_never_ignored" if (n_pad or rate > 0.5) else "special_ids_hardcoded"
    return AuditCheck("Special or padding tokens selected", bad_special == 0, f"{bad_special} ({n_pad} padding)", "0",
                      exhibit)


def _label_check(labels, original, inputs, labelled, mask_id: int | None) -> AuditCheck:
    """Labels: the original token wherever set; every changed position labelled; no [MASK] in the originals."""
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
    return AuditCheck(
        "Label/-100 consistency", ok,
        f"{label_mismatch} labels ≠ original, {changed_unlabelled} changed tokens without a label, "
        f"{originals_masked} [MASK] in the originals",
        "labels = original where selected, -100 elsewhere", exhibit)


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
