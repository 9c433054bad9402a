"""The Inside page's lesson: what the views of ``mlm_core.inside`` say across heads, sentences and training.

``mlm_core.inside`` computes the views of one position of one sentence (attention, logit lens,
saliency). This module turns them into what the page teaches:

- ``head_patterns`` / ``measure_head_patterns``: every head scored for the patterns Clark et al.
  (2019, §3) describe ([CLS], [SEP], punctuation, the previous or next token, ...), on this model;
- ``lens_profile_on_texts``: the logit lens over the [MASK] positions of many workshop sentences;
- ``agreement_over_texts``: how far gradient × input and each layer's attention agree with
  leave-one-out, over many sentences (``last_word`` picks the position the page masks first);
- ``compare_models``: a trained copy beside its base model on the same sentence and masks.

Shapes: B = batch, L = layers, H = heads, T = tokens, V = vocabulary, K = top-k, P = patterns.

>>> last_word(["[CLS]", "the", "cat", ".", "[SEP]"], [True, False, False, False, True])
2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from mlm_core import seeds
from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.head import head_parts
from mlm_core.inside import (LensProfile, LogitLens, attention_from, attention_maps, layer_agreement, layer_count,
                             lens_profile, logit_lens, one_sentence, saliency)
from mlm_core.masking import IGNORE_INDEX, Decision, MaskingConfig
from mlm_core.predict import Predictions, predict_masked


# --------------------------------------------------------------------------- head patterns (Clark et al. 2019, §3)
PATTERNS = ("[CLS]", "[SEP]", ". or ,", "previous token", "next token", "itself", "same token elsewhere")
PUNCTUATION = (".", ",")  # Clark et al. §3.2 look at periods and commas
_PIECE_MARKS = ("##", "Ġ", "▁")  # WordPiece continuation, GPT-2/RoBERTa and SentencePiece space marks


@dataclass(frozen=True)
class HeadPatterns:
    """How much each head attends to each pattern's tokens, averaged over the query tokens of some sentences.

    ``scores[p, l, h]``: the mean attention weight head (l, h) puts on pattern p's tokens (e.g. on
    [SEP]), over every query token that has such a token to look at. ``uniform[p]``: the same
    average for a head that spreads its attention evenly: the chance level to compare with.
    ``entropy[l, h]``: mean entropy of the head's rows in nats (Clark et al. §3.3: broad vs focused);
    ``uniform_entropy``: that of even attention, mean ln(T).
    """

    names: tuple[str, ...]  # (P,)
    scores: torch.Tensor  # (P, L, H)
    uniform: torch.Tensor  # (P,)
    queries: torch.Tensor  # (P,) how many query tokens each pattern was averaged over
    entropy: torch.Tensor  # (L, H)
    uniform_entropy: float
    sentences: int

    def top_heads(self, pattern: str, n: int = 3) -> list[tuple[int, int, float]]:
        """The ``n`` heads with the highest score for ``pattern``: (layer, head, score), 0-based."""
        scores = self.scores[self.names.index(pattern)]  # (L, H)
        values, index = scores.flatten().topk(min(n, scores.numel()))
        heads = scores.shape[1]
        return [(int(i) // heads, int(i) % heads, float(v)) for v, i in zip(values, index)]

    def heads_above(self, pattern: str, threshold: float = 0.5) -> int:
        """How many heads put more than ``threshold`` of their attention on ``pattern``'s tokens."""
        return int((self.scores[self.names.index(pattern)] > threshold).sum())

    def records(self, n: int = 3) -> list[dict]:
        """One row per pattern: its best heads (1-based "layer-head" names, as papers write them) and chance."""
        rows = []
        for p, name in enumerate(self.names):
            best = self.top_heads(name, n)
            rows.append({"pattern": name, "uniform_attention": float(self.uniform[p]),
                         "query_tokens": int(self.queries[p]),
                         **{f"head_{i + 1}": f"{l + 1}-{h + 1}" for i, (l, h, _) in enumerate(best)},
                         **{f"score_{i + 1}": s for i, (_, _, s) in enumerate(best)}})
        return rows


def pattern_lines(patterns: HeadPatterns, at_mask: HeadPatterns) -> list[str]:
    """The patterns in words, one markdown line each: how many heads put more than half their attention there, and
    the strongest head's share over every word, beside an even spread's and the same head's at a [MASK]."""
    total = patterns.scores[0].numel()  # L · H heads
    lines = []
    for p, name in enumerate(patterns.names):
        (l0, h0, best), count = patterns.top_heads(name, 1)[0], patterns.heads_above(name, 0.5)
        even, there = float(patterns.uniform[p]), float(at_mask.scores[p, l0, h0])
        lines.append(f"- **{name}**: {count} of {total} heads put more than half their attention there; the "
                     f"strongest is head {l0 + 1}-{h0 + 1} ({best:.0%} over every word; even: {even:.0%}; "
                     f"at a [MASK]: {there:.0%}).")
    return lines


def _bare(token: str) -> str:
    for mark in _PIECE_MARKS:
        if token.startswith(mark) and len(token) > len(mark):
            return token[len(mark):]
    return token


def head_patterns(attention: torch.Tensor, input_ids, attention_mask, tokens: Sequence[Sequence[str]], *,
                  cls_id: int | None, sep_id: int | None, special_ids: Sequence[int] = (),
                  mask_id: int | None = None, query_mask=None) -> HeadPatterns:
    """Score every head of ``attention`` (B, L, H, T, T) for each of ``PATTERNS``.

    Query tokens: real tokens other than [CLS], [SEP] and ``special_ids`` — what words and masks
    look at — or only those where ``query_mask`` (B, T) is set (the [MASK] positions). Keys: the
    pattern's tokens (for "same token elsewhere": another position with the same id; specials and
    ``mask_id`` never count as the same word). A query counts for a pattern only if it has at least
    one such key (the first token has no previous one).
    """
    attention = attention.float()
    B, L, H, T, _ = attention.shape
    ids = torch.as_tensor(input_ids).reshape(B, T)
    real = torch.ones(B, T, dtype=torch.bool) if attention_mask is None else \
        torch.as_tensor(attention_mask).reshape(B, T).bool()
    special = torch.zeros(B, T, dtype=torch.bool)
    for i in {cls_id, sep_id, *special_ids} - {None}:
        special |= ids == i
    queries = real & ~special  # (B, T)
    words = queries & (ids != mask_id if mask_id is not None else True)  # (B, T) tokens that can repeat
    if query_mask is not None:
        queries = queries & torch.as_tensor(query_mask).reshape(B, T).bool()
    punct = torch.tensor([[_bare(t) in PUNCTUATION for t in list(row)[:T]] + [False] * (T - len(row))
                          for row in tokens], dtype=torch.bool).reshape(B, T)
    index = torch.arange(T)
    keys = {  # (B, Tq, Tk) bool: which keys belong to the pattern, for each query
        "[CLS]": (ids == cls_id if cls_id is not None else torch.zeros_like(real))[:, None, :].expand(B, T, T),
        "[SEP]": (ids == sep_id if sep_id is not None else torch.zeros_like(real))[:, None, :].expand(B, T, T),
        ". or ,": punct[:, None, :].expand(B, T, T),
        "previous token": (index[None, :] == index[:, None] - 1)[None].expand(B, T, T),
        "next token": (index[None, :] == index[:, None] + 1)[None].expand(B, T, T),
        "itself": torch.eye(T, dtype=torch.bool)[None].expand(B, T, T),
        "same token elsewhere": (ids[:, :, None] == ids[:, None, :]) & ~torch.eye(T, dtype=torch.bool)[None]
        & words[:, None, :],
    }
    scores, uniform, counts = [], [], []
    n_keys = real.sum(-1, keepdim=True).clamp(min=1)  # (B, 1) tokens a row can attend to
    for name in PATTERNS:
        target = keys[name] & real[:, None, :]  # (B, Tq, Tk) only real keys
        valid = queries & target.any(-1)  # (B, Tq) queries with something to look at
        n = valid.sum()
        mass = (attention * target[:, None, None].float()).sum(-1)  # (B, L, H, Tq)
        weight = valid[:, None, None].float()  # (B, 1, 1, Tq)
        scores.append((mass * weight).sum((0, 3)) / n.clamp(min=1))  # (L, H)
        uniform.append(((target.sum(-1) / n_keys) * valid).sum() / n.clamp(min=1))
        counts.append(n)
    rows = attention.clamp(min=1e-12)
    entropy = -(attention * rows.log()).sum(-1)  # (B, L, H, Tq)
    weight = queries[:, None, None].float()
    n_queries = queries.sum().clamp(min=1)
    mean_entropy = (entropy * weight).sum((0, 3)) / n_queries  # (L, H)
    uniform_entropy = float((n_keys.float().log().expand(B, T) * queries).sum() / n_queries)
    return HeadPatterns(PATTERNS, torch.stack(scores), torch.stack(uniform), torch.stack(counts), mean_entropy,
                        uniform_entropy, B)


def _cls_sep(tokenizer) -> tuple[int | None, int | None]:
    cls = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return cls, sep


def measure_head_patterns(model: nn.Module, tokenizer, encoded, *, at_mask: bool = False) -> HeadPatterns:
    """``head_patterns`` of ``model`` on a tokenized batch (``mlm_core.data.Encoded``): one forward pass.

    By default over every word of the sentences as they are (no [MASK]). ``at_mask``: each sentence's
    last word (``last_word``, where the Inside page puts its first [MASK]) hidden behind [MASK], and
    the heads measured at that position only: what the page's grid shows, one row per head.
    """
    ids, queries = encoded.input_ids, None
    if at_mask:
        ids = ids.clone()  # (B, T): never the caller's tensor
        queries = torch.zeros_like(ids, dtype=torch.bool)
        for row, tokens in enumerate(encoded.tokens):
            special = [bool(x) for x in encoded.special_tokens_mask[row, : len(tokens)].tolist()]
            position = last_word(tokens, special)
            if position is not None:
                ids[row, position] = tokenizer.mask_token_id
                queries[row, position] = True
    attention = attention_maps(model, ids, encoded.attention_mask)  # (B, L, H, T, T)
    cls, sep = _cls_sep(tokenizer)
    special = [i for i in tokenizer.all_special_ids if i != tokenizer.mask_token_id]
    return head_patterns(attention, ids, encoded.attention_mask, encoded.tokens,
                         cls_id=cls, sep_id=sep, special_ids=special, mask_id=tokenizer.mask_token_id,
                         query_mask=queries)


def lens_profile_on_texts(model: nn.Module, tokenizer, texts: Sequence[str], *, seed: int = 0,
                          config: MaskingConfig | None = None, max_length: int = 64) -> LensProfile:
    """``lens_profile`` at the [MASK] positions of ``texts`` masked by ``config`` (default BERT's: 15%,
    80/10/10) from ``seed``.

    Only [MASK] positions count: at an unchanged token the embedding already holds the answer, and
    at a random one it holds a wrong word, so neither says when the answer *forms*.
    """
    batch = encode(tokenizer, list(texts), max_length=max_length)
    masked = mask_batch(tokenizer, batch, config or MaskingConfig(), seeds.generator(seed), trace=False)
    labels = torch.where(masked.decisions == int(Decision.MASK), masked.labels, IGNORE_INDEX)  # (B, T)
    return lens_profile(model, masked.input_ids, batch.attention_mask, labels)


def last_word(tokens: Sequence[str], special: Sequence[bool]) -> int | None:
    """The position of the last token that has a letter or digit (the last word piece before the final
    punctuation), or the last non-special token, or None: where the page puts its first [MASK].

    >>> last_word(["[CLS]", "the", "cat", ".", "[SEP]"], [True, False, False, False, True])
    2
    """
    options = [i for i, s in enumerate(special) if not s]
    words = [i for i in options if any(ch.isalnum() for ch in tokens[i])]
    return words[-1] if words else (options[-1] if options else None)


SIGNED = ", signed"  # the name suffix of a τ on the signed scores (the others compare magnitudes)


@dataclass(frozen=True)
class AgreementSummary:
    """Kendall τ with leave-one-out over many sentences (last word masked): gradient views and each layer's
    attention, on magnitudes (Jain & Wallace's comparison, ``inside.agreement_tau``), and the gradient views on
    their signed scores too."""

    names: tuple[str, ...]  # "gradient × input", "gradient × (input − [MASK])", "attention, layer 1", ...
    taus: torch.Tensor  # (N, 2 + L) one row per sentence, on magnitudes; NaN where τ is undefined
    signed_taus: torch.Tensor | None = None  # (N, 2): the two gradient views' τ on signed scores

    def records(self) -> list[dict]:
        columns = [(name, self.taus[:, i]) for i, name in enumerate(self.names)]
        if self.signed_taus is not None:
            columns += [(name + SIGNED, self.signed_taus[:, i]) for i, name in enumerate(self.names[:2])]
        rows = []
        for name, column in columns:
            column = column[column.isfinite()]
            rows.append({"measure": name, "compares": "signed scores" if name.endswith(SIGNED) else "magnitudes",
                         "sentences": int(column.numel()),
                         "mean_tau": float(column.mean()) if column.numel() else float("nan"),
                         "median_tau": float(column.median()) if column.numel() else float("nan")})
        return rows


def agreement_over_texts(model: nn.Module, tokenizer, texts: Sequence[str], *, max_length: int = 64) -> AgreementSummary:
    """For each text: mask its last word, then τ(gradient views, leave-one-out) and τ(each layer's attention, leave-one-out).

    One sentence is an anecdote; this is the same comparison on many (Jain & Wallace 2019, §4.1, do
    it over whole datasets, on magnitudes). Costs a leave-one-out per text.
    """
    rows, signed = [], []
    for text in texts:
        encoded = encode(tokenizer, text, max_length=max_length)
        position = last_word(encoded.tokens[0], [bool(x) for x in encoded.special_tokens_mask[0].tolist()])
        if position is None:
            continue
        ids = encoded.input_ids[0].clone()  # (T,)
        true_id = int(ids[position])
        ids[position] = tokenizer.mask_token_id
        result = saliency(model, tokenizer, ids, None, position, true_id)
        attention = attention_from(model, tokenizer, ids, None, position)
        rows.append([result.tau_input, result.tau_delta, *layer_agreement(attention.weights, result.leave_one_out)])
        signed.append([result.tau_input_signed, result.tau_delta_signed])
    layers = layer_count(model) or (len(rows[0]) - 2 if rows else 0)
    names = ("gradient × input", "gradient × (input − [MASK])") + tuple(f"attention, layer {i + 1}" for i in range(layers))
    return AgreementSummary(names, torch.tensor(rows, dtype=torch.float32).reshape(len(rows), len(names)),
                            torch.tensor(signed, dtype=torch.float32).reshape(len(signed), 2))


# --------------------------------------------------------------------------- what training changed
@dataclass(frozen=True)
class ModelComparison:
    """The same sentence and masks through a base model and a trained copy of it."""

    base: Predictions
    trained: Predictions
    loss_change: tuple[float, ...]  # (M,) trained − base loss at each selected position: negative = better
    base_lens: LogitLens | None  # at ``position`` (None when the lens is not available)
    trained_lens: LogitLens | None

    def records(self) -> list[dict]:
        return [{"position": b.position, "true_token": b.true_token,
                 "base_top": " ".join(b.top_tokens), "trained_top": " ".join(t.top_tokens),
                 "base_loss": b.loss, "trained_loss": t.loss, "loss_change": d,
                 "base_rank": b.true_rank, "trained_rank": t.true_rank}
                for b, t, d in zip(self.base.positions, self.trained.positions, self.loss_change)]


def compare_models(base: nn.Module, trained: nn.Module, tokenizer, input_ids, attention_mask, labels, *,
                   position: int | None = None, k: int = 5) -> ModelComparison:
    """Top-k, loss per selected position and (at ``position``) the logit lens, for both models.

    Both must share ``tokenizer`` (a trained copy does). ``labels`` (T,): the true ids at the
    selected positions, ``IGNORE_INDEX`` elsewhere.
    """
    ids, mask = one_sentence(input_ids, attention_mask)
    labels = torch.as_tensor(labels).reshape(-1)
    if labels.shape != ids.shape:
        raise InputError(f"labels {tuple(labels.shape)} and input_ids {tuple(ids.shape)} must have the same shape.")
    before = predict_masked(base, tokenizer, ids, mask, labels, k=k)
    after = predict_masked(trained, tokenizer, ids, mask, labels, k=k)
    change = tuple(a.loss - b.loss for b, a in zip(before.positions, after.positions))
    lenses: list[LogitLens | None] = [None, None]
    if position is not None and int(labels[position]) != IGNORE_INDEX:
        for i, model in enumerate((base, trained)):
            if head_parts(model) is not None:
                lenses[i] = logit_lens(model, tokenizer, ids, mask, position, int(labels[position]), k=k)
    return ModelComparison(before, after, change, lenses[0], lenses[1])
