"""How a run is measured: held-out masked-token metrics (always full cross-entropy, whatever the
training loss), per frequency bucket and at the focus words, and probe sentences with [MASK].

Shape legend: N = held-out rows, T = sequence length, V = vocabulary, M = masked positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mlm_core import seeds
from mlm_core.data import plain_encodings, run_tokenizer, special_ids
from mlm_core.errors import InputError
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX
from mlm_core.training.batches import Chunks, mask_rows
from mlm_core.training.config import BUCKETS, DataConfig, Stream
from mlm_core.training.optim import autocast

# A small held-out text is scored under this many different masks (capped at eval_max_chunks rows),
# so its loss measures more than the few tokens one mask happens to select.
EVAL_MASKINGS = 4


@dataclass
class EvalSet:
    input_ids: torch.Tensor  # (N, T) masked
    attention_mask: torch.Tensor  # (N, T)
    labels: torch.Tensor  # (N, T), IGNORE_INDEX where not selected
    buckets: torch.Tensor  # (V,) bucket per token id
    micro_batch: int
    mask_token_id: int | None = None  # to score the positions replaced by [MASK] on their own
    focus_ids: torch.Tensor | None = None  # (F,) token ids whose positions get a loss of their own


def _scored_batches(model: nn.Module, eval_set: EvalSet, amp: str):
    """Each micro-batch of the held-out set that has a selected position: its slice, the fp32 logits
    (M, V) at the selected rows, their targets (M,) and per-position cross-entropy (M,)."""
    device = next(model.parameters()).device
    for s in range(0, eval_set.input_ids.shape[0], eval_set.micro_batch):
        sl = slice(s, s + eval_set.micro_batch)
        labels = eval_set.labels[sl].to(device)
        if not bool((labels != IGNORE_INDEX).any()):
            continue
        with autocast(device, amp):
            logits, targets = masked_lm_logits(model, eval_set.input_ids[sl].to(device),
                                               eval_set.attention_mask[sl].to(device), labels)
        logits = logits.float()  # (M, V)
        yield sl, logits, targets, nn.functional.cross_entropy(logits, targets, reduction="none")  # (M,)


@torch.no_grad()
def evaluate(model: nn.Module, eval_set: EvalSet, *, amp: str = "off", dropout: bool = False) -> dict[str, Any]:
    """Held-out masked-token metrics with full cross-entropy: loss, MLM perplexity, top-1/top-5, per bucket.

    `loss` averages over every selected position, the positions Hugging Face's run_mlm.py scores
    too (its perplexity is exp of the Trainer's eval_loss, which averages per-batch means weighted
    by sequences, not by selected positions; here every position counts once, whatever
    `micro_batch` is); 10% of those positions show the model the true token and
    another 10% a random one, so `mask_loss`, over the [MASK] positions alone, is the harder number.
    ``dropout=True`` (the bug ``eval_dropout`` only) leaves the model in train mode: dropout stays on.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.train(dropout)
    total = torch.zeros(3, dtype=torch.float64)  # sum CE, top1 hits, top5 hits
    at_mask = torch.zeros(2, dtype=torch.float64)  # [MASK] positions, sum CE there
    at_focus = torch.zeros(2, dtype=torch.float64)  # positions hiding a focus word, sum CE there
    per_bucket = torch.zeros(len(BUCKETS), 4, dtype=torch.float64)  # n, sum CE, top1, top5
    try:
        for sl, logits, targets, ce in _scored_batches(model, eval_set, amp):
            if eval_set.mask_token_id is not None:  # rows come row-major, as the selected positions
                shown = eval_set.input_ids[sl].reshape(-1)[eval_set.labels[sl].reshape(-1) != IGNORE_INDEX]
                is_mask = (shown == eval_set.mask_token_id).to(device)  # (M,)
                at_mask += torch.stack([is_mask.double().sum(), ce.double()[is_mask].sum()]).cpu()
            if eval_set.focus_ids is not None:
                focus = torch.isin(targets, eval_set.focus_ids.to(device))  # (M,)
                at_focus += torch.stack([focus.double().sum(), ce.double()[focus].sum()]).cpu()
            top5 = logits.topk(min(5, logits.shape[-1]), dim=-1).indices  # (M, 5)
            hit1 = (top5[:, 0] == targets).double()
            hit5 = (top5 == targets[:, None]).any(-1).double()
            total += torch.stack([ce.double().sum(), hit1.sum(), hit5.sum()]).cpu()
            b = eval_set.buckets.to(device)[targets.clamp_max(eval_set.buckets.numel() - 1)]
            for k in range(len(BUCKETS)):
                sel = b == k
                per_bucket[k] += torch.stack([sel.double().sum(), ce.double()[sel].sum(),
                                              hit1[sel].sum(), hit5[sel].sum()]).cpu()
    finally:
        model.train(was_training)
    n = float(per_bucket[:, 0].sum())
    out: dict[str, Any] = {"masked_tokens": int(n), "mask_tokens": int(at_mask[0]),
                           "mask_loss": float(at_mask[1] / at_mask[0]) if at_mask[0] else None,
                           "focus_tokens": int(at_focus[0]),
                           "focus_loss": float(at_focus[1] / at_focus[0]) if at_focus[0] else None}
    if n == 0:
        out.update(loss=None, mlm_perplexity=None, top1=None, top5=None)
    else:
        loss = float(total[0]) / n
        out.update(loss=loss, mlm_perplexity=math.exp(min(loss, 700.0)), top1=float(total[1]) / n,
                   top5=float(total[2]) / n)
    for k, name in enumerate(BUCKETS):
        nk = float(per_bucket[k, 0])
        out[f"{name}_tokens"] = int(nk)
        out[f"{name}_loss"] = float(per_bucket[k, 1]) / nk if nk else None
        out[f"{name}_top1"] = float(per_bucket[k, 2]) / nk if nk else None
        out[f"{name}_top5"] = float(per_bucket[k, 3]) / nk if nk else None
    return out


@torch.no_grad()
def loss_by_group(model: nn.Module, eval_set: EvalSet, groups: Mapping[str, torch.Tensor], *,
                  amp: str = "off") -> dict[str, dict[str, float]]:
    """The held-out loss split by the hidden token: for each group of token ids (a position goes to the
    first group that holds its token) and "rest", the positions, their mean loss, and their `part` of
    the mean over every position (their summed loss / all positions), so the parts add up to
    `evaluate`'s `loss` and the parts of a fall add up to the fall.
    """
    was_training = model.training
    model.eval()
    names = [*groups, "rest"]
    sums = torch.zeros(len(names), 2, dtype=torch.float64)  # positions, summed CE
    try:
        for _, _, targets, ce in _scored_batches(model, eval_set, amp):
            ce = ce.double().cpu()  # (M,)
            free = torch.ones_like(ce, dtype=torch.bool)  # (M,) not yet in a group
            for k, ids in enumerate(groups.values()):
                at = free & torch.isin(targets.cpu(), ids.cpu())
                sums[k] += torch.stack([at.double().sum(), ce[at].sum()])
                free &= ~at
            sums[-1] += torch.stack([free.double().sum(), ce[free].sum()])
    finally:
        model.train(was_training)
    n = float(sums[:, 0].sum())
    return {name: {"tokens": int(sums[k, 0]), "loss": float(sums[k, 1] / sums[k, 0]) if sums[k, 0] else None,
                   "part": float(sums[k, 1]) / n if n else None} for k, name in enumerate(names)}


def word_piece_ids(tokenizer, words: Sequence[str]) -> torch.Tensor:
    """The token ids of every piece of `words` (an invented name is several pieces: ve ##ld ##oria)."""
    return torch.tensor(sorted({int(i) for w in words for i in tokenizer.convert_tokens_to_ids(tokenizer.tokenize(w))}),
                        dtype=torch.long)


def focus_ids(tokenizer, words: Sequence[str]) -> torch.Tensor | None:
    """The token ids of the words that are one token of this vocabulary (others cannot be scored alone)."""
    ids = sorted({int(tokenizer.convert_tokens_to_ids(pieces[0])) for w in words
                  if len(pieces := tokenizer.tokenize(w)) == 1})
    return torch.tensor(ids, dtype=torch.long) if ids else None


def focus_token_share(tokenizer, texts: Sequence[str], words: Sequence[str]) -> float:
    """The share of the tokens of ``texts`` that are one of ``words`` (those that are one token: ``focus_ids``),
    what a run's facts' masking raises above the rule (``costs.masked_share``).

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> focus_token_share(load_default_tokenizer(), ["the cat sat on the mat"], ["cat", "mat"])
    0.3333333333333333
    """
    ids = focus_ids(tokenizer, words)
    encodings = plain_encodings(tokenizer, list(texts)) if ids is not None and texts else []
    total = sum(len(e.ids) for e in encodings)
    if not total:
        return 0.0
    hits = sum(int(torch.isin(torch.tensor(e.ids, dtype=torch.long), ids).sum()) for e in encodings if e.ids)
    return hits / total


def make_eval_set(eval_chunks: Chunks, cfg: DataConfig, tokenizer, *, buckets: torch.Tensor, micro_batch: int,
                  vocab_size: int, redraw: int | None = None) -> EvalSet:
    """The frozen evaluation mask: the held-out chunks masked once from the seed with the held-out rule
    (`DataConfig.held_out_masking`), each under up to EVAL_MASKINGS different masks, at most eval_max_chunks
    rows; the same positions for every variant of a run, at every evaluation. `vocab_size` bounds the random
    replacements (real tokenizer tokens).

    ``redraw`` (the bug ``eval_remasked`` only): a fresh mask of the same text for evaluation number
    ``redraw``, the noisy held-out set of a pipeline that masks its evaluation data at random on every pass.
    """
    copies = max(1, min(EVAL_MASKINGS, cfg.eval_max_chunks // max(1, len(eval_chunks))))
    eval_chunks = eval_chunks.take([i for _ in range(copies) for i in range(len(eval_chunks))])
    if redraw is None:
        row_seeds = [seeds.seed_for(cfg.seed, Stream.EVAL_MASK, r) for r in range(len(eval_chunks))]
    else:
        row_seeds = [seeds.seed_for(cfg.seed, Stream.EVAL_REMASK, redraw, r) for r in range(len(eval_chunks))]
    inputs, labels = mask_rows(eval_chunks, cfg.held_out_masking, mask_token_id=tokenizer.mask_token_id,
                               vocab_size=vocab_size, special_ids=special_ids(tokenizer), row_seeds=row_seeds)
    return EvalSet(inputs, eval_chunks.attention_mask, labels, buckets, micro_batch,
                   mask_token_id=tokenizer.mask_token_id, focus_ids=focus_ids(tokenizer, cfg.eval_focus_words))


@dataclass
class Probe:
    text: str  # as shown to the learner, with the mask token
    input_ids: torch.Tensor  # (T,)
    positions: list[int]  # where the mask tokens are
    answers: list[str | None]  # the hidden token at each position, when known
    group: str = ""  # the probe set it belongs to (TrainConfig.probe_groups), "" for one set


def make_probes(tokenizer, texts: Sequence[str], cfg: DataConfig) -> list[Probe]:
    """Probe sentences: the config's (with [MASK]), or one word masked in a few corpus sentences."""
    mask_id = tokenizer.mask_token_id
    mask_tok = tokenizer.mask_token
    probes: list[Probe] = []
    if cfg.probe_sentences:
        answers = cfg.probe_answers or ("",) * len(cfg.probe_sentences)
        groups = cfg.probe_groups or ("",) * len(cfg.probe_sentences)
        for text, answer, group in zip(cfg.probe_sentences, answers, groups):
            shown = text.replace("[MASK]", mask_tok) if mask_tok != "[MASK]" else text
            ids = run_tokenizer(tokenizer, shown, truncation=True, max_length=cfg.seq_len, return_tensors="pt")["input_ids"][0]
            positions = (ids == mask_id).nonzero().flatten().tolist()
            if not positions:
                raise InputError(f"The probe sentence {text!r} has no [MASK] token: put [MASK] where "
                                 "the model should guess a word.")
            known: str | None = None
            if answer:
                pieces = tokenizer.tokenize(answer)
                if len(pieces) != 1 or len(positions) != 1:
                    raise InputError(f"The answer {answer!r} of the probe {text!r} must be one token of this "
                                     f"vocabulary at one [MASK] (it is {len(pieces)} token(s): {' '.join(pieces)}).")
                known = pieces[0]
            probes.append(Probe(shown, ids, positions, [known] * len(positions), group))
        return probes
    # No probes given: mask the middle whole-word token of up to 3 distinct short corpus sentences.
    seen: set[str] = set()
    candidates = []
    for t in texts:
        t = str(t).strip()
        if t and t not in seen and 4 <= len(t.split()) <= 25:
            seen.add(t)
            candidates.append(t)
        if len(candidates) >= 200:
            break
    if not candidates:
        return probes
    order = torch.randperm(len(candidates), generator=seeds.generator(cfg.seed, Stream.PROBE)).tolist()
    for i in order:
        enc = run_tokenizer(tokenizer, candidates[i], truncation=True, max_length=cfg.seq_len, return_tensors="pt")
        ids = enc["input_ids"][0].clone()
        tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
        words = enc.word_ids(0) if hasattr(enc, "word_ids") else [None] * len(tokens)
        # whole words of one alphabetic piece, 3+ letters, nearest the middle
        ok = [p for p in range(len(tokens)) if words[p] is not None and tokens[p].isalpha()
              and len(tokens[p]) >= 3 and words.count(words[p]) == 1]
        if not ok:
            continue
        mid = len(tokens) / 2
        p = min(ok, key=lambda q: abs(q - mid))
        answer = tokens[p]
        ids[p] = mask_id
        probes.append(Probe(tokenizer.decode(ids[1:-1]), ids, [p], [answer]))
        if len(probes) == 3:
            break
    return probes


@torch.no_grad()
def probe_predictions(model: nn.Module, tokenizer, probes: list[Probe], top_k: int) -> list[dict[str, Any]]:
    """The model's top-k at every probe's [MASK], and the hidden word's probability and rank (1 = its
    first guess): one dict per probe (text, group, predictions). The probes go through the encoder
    as one padded batch (a second set of probes costs one forward, not one per sentence)."""
    if not probes:
        return []
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    length = max(int(p.input_ids.numel()) for p in probes)
    ids = torch.full((len(probes), length), pad, dtype=torch.long)  # (P, T)
    attention = torch.zeros_like(ids)  # (P, T)
    labels = torch.full_like(ids, IGNORE_INDEX)  # (P, T): the probes' [MASK] positions
    for r, probe in enumerate(probes):
        n = int(probe.input_ids.numel())
        ids[r, :n], attention[r, :n] = probe.input_ids, 1
        labels[r, probe.positions] = probe.input_ids[probe.positions]
    out = []
    try:
        logits, _ = masked_lm_logits(model, ids.to(device), attention.to(device), labels.to(device))  # (M, V)
        probs = logits.float().softmax(-1)  # rows in row-major order: probe by probe, position by position
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        row = 0
        for probe in probes:
            rows = []
            for j, pos in enumerate(probe.positions):
                entry = {
                    "position": pos,
                    "answer": probe.answers[j],
                    "tokens": tokenizer.convert_ids_to_tokens(top.indices[row].tolist()),
                    "probs": [float(x) for x in top.values[row]],
                    "answer_prob": None,
                    "answer_rank": None,  # 1 = the model's first guess
                }
                answer_id = tokenizer.convert_tokens_to_ids(probe.answers[j]) if probe.answers[j] else None
                if answer_id is not None and 0 <= answer_id < probs.shape[-1]:
                    p = probs[row, answer_id]
                    entry["answer_prob"] = float(p)
                    entry["answer_rank"] = int((probs[row] > p).sum()) + 1
                rows.append(entry)
                row += 1
            out.append({"text": probe.text, "group": probe.group, "predictions": rows})
    finally:
        model.train(was_training)
    return out
