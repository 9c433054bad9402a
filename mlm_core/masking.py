"""BERT's masking, decision by decision.

Selection picks ``mlm_probability`` of the eligible tokens (15% in BERT). Each selected token is then
replaced by [MASK] (80%), by a random token (10%) or left unchanged (10%), and the model must
predict the original at every selected position. Every decision and the uniform draw behind it is
returned, so a learner can step through them.

Shapes: B = batch, T = sequence length. A single sentence (T,) works as well as a batch (B, T).

>>> import torch
>>> g = torch.Generator().manual_seed(0)
>>> ids = torch.tensor([101, 1996, 4937, 2938, 2006, 1996, 13523, 1012, 102])
>>> special = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0, 1])
>>> r = mask_tokens(ids, special, MaskingConfig(mlm_probability=0.5), mask_token_id=103,
...                 vocab_size=30522, generator=g, special_ids=(0, 100, 101, 102, 103))
>>> r.labels.shape == ids.shape and bool((r.labels[special.bool()] == IGNORE_INDEX).all())
True
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from mlm_core.errors import InputError

IGNORE_INDEX = -100  # what F.cross_entropy and Hugging Face skip: labels of unselected tokens

STRATEGIES = ("token", "whole_word", "span", "exact_count")


class Decision(enum.IntEnum):
    """What happened to one token."""

    NOT_SELECTED = 0
    MASK = 1  # replaced by [MASK]
    RANDOM = 2  # replaced by a random (non-special) token
    UNCHANGED = 3  # selected, kept as it was: the model must still predict it


@dataclass(frozen=True)
class MaskingConfig:
    """How tokens are selected and replaced; the defaults are BERT's.

    The replacement fractions are unconditional shares of the *selected* tokens, as the BERT
    paper states them: 80% [MASK], 10% random, and the remaining 10% unchanged.
    """

    mlm_probability: float = 0.15  # BERT: 15% of tokens are selected for prediction
    mask_replace_prob: float = 0.8  # share of selected tokens replaced by [MASK]
    random_replace_prob: float = 0.1  # share of selected tokens replaced by a random token
    strategy: str = "token"  # "token" | "whole_word" | "span" | "exact_count"
    span_p: float = 0.2  # SpanBERT: span lengths (in words) ~ Geometric(0.2) ...
    span_max: int = 10  # ... clipped at 10, mean about 3.8 words
    max_predictions: int = 20  # Google BERT's max_predictions_per_seq for 128-token sequences

    def __post_init__(self):
        for name in ("mlm_probability", "mask_replace_prob", "random_replace_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
                raise InputError(f"{name} must be a probability between 0 and 1, got {value!r}.")
        if self.mask_replace_prob + self.random_replace_prob > 1.0 + 1e-9:
            raise InputError(
                f"mask ({self.mask_replace_prob:g}) + random ({self.random_replace_prob:g}) "
                f"= {self.mask_replace_prob + self.random_replace_prob:g} is more than 1: together they "
                "are shares of the same selected tokens. Lower one of them (BERT uses 0.8 + 0.1; "
                "the rest stays unchanged)."
            )
        if self.strategy not in STRATEGIES:
            raise InputError(f"strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}.")
        if not 0.0 < self.span_p <= 1.0:
            raise InputError(f"span_p must be in (0, 1], got {self.span_p!r}.")
        if int(self.span_max) < 1:
            raise InputError(f"span_max must be at least 1, got {self.span_max!r}.")
        if int(self.max_predictions) < 0:
            raise InputError(f"max_predictions cannot be negative, got {self.max_predictions!r}.")

    @property
    def unchanged_prob(self) -> float:
        """Share of selected tokens left as they are (BERT: 1 - 0.8 - 0.1 = 0.1)."""
        return max(0.0, 1.0 - self.mask_replace_prob - self.random_replace_prob)

    @property
    def random_given_not_mask(self) -> float:
        """P(random | selected, not [MASK]): the one conditional probability, derived here only.

        BERT draws [MASK] first (0.8); of the remaining 0.2, half (0.1 / 0.2 = 0.5) become random.
        """
        rest = 1.0 - self.mask_replace_prob
        return 0.0 if rest <= 0 else min(1.0, self.random_replace_prob / rest)


@dataclass
class MaskingResult:
    """The corrupted batch and the trace of how it was made (all tensors shaped like the input)."""

    input_ids: torch.Tensor  # what the model sees
    labels: torch.Tensor  # original id where selected, IGNORE_INDEX elsewhere
    decisions: torch.Tensor  # Decision codes
    draws: dict[str, torch.Tensor] = field(default_factory=dict)  # the uniform draws behind them

    @property
    def selected(self) -> torch.Tensor:
        return self.decisions != Decision.NOT_SELECTED

    def counts(self) -> dict[str, int]:
        """How many tokens got each decision."""
        return {d.name: int((self.decisions == d).sum()) for d in Decision}


def mask_tokens(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    config: MaskingConfig,
    *,
    mask_token_id: int,
    vocab_size: int,
    generator: torch.Generator,
    word_ids: torch.Tensor | None = None,
    special_ids: Sequence[int] = (),
    attention_mask: torch.Tensor | None = None,
    trace: bool = True,
) -> MaskingResult:
    """Select, then replace, as BERT does; returns new tensors and leaves the inputs untouched.

    ``special_tokens_mask`` marks tokens that may never be selected ([CLS], [SEP], padding);
    ``special_ids`` are ids never drawn as random replacements; ``word_ids`` (-1 on special tokens)
    are needed by the whole-word and span strategies. ``attention_mask`` (1 on real tokens) only
    tells the exact-count strategy the length of each row; without it, every position counts.
    With ``trace=False`` the draws are not kept.
    """
    if generator is None:
        raise InputError("mask_tokens needs a torch.Generator: the global RNG is never used.")
    single = input_ids.dim() == 1
    if single:
        input_ids, special_tokens_mask = input_ids[None], special_tokens_mask[None]
        word_ids = None if word_ids is None else word_ids[None]
        attention_mask = None if attention_mask is None else attention_mask[None]
    if input_ids.dim() != 2 or special_tokens_mask.shape != input_ids.shape:
        raise InputError(
            f"input_ids must be (T,) or (B, T) with a special_tokens_mask of the same shape; got "
            f"{tuple(input_ids.shape)} and {tuple(special_tokens_mask.shape)}."
        )
    device = input_ids.device
    eligible = ~special_tokens_mask.to(device=device, dtype=torch.bool)  # (B, T)
    if config.strategy in ("whole_word", "span") and word_ids is None:
        raise InputError(f"The {config.strategy!r} strategy needs word_ids (from the tokenizer).")

    draws: dict[str, torch.Tensor] = {}
    if config.strategy == "token":
        selected = _select_tokens(eligible, config, generator, draws)
    elif config.strategy == "whole_word":
        selected = _select_whole_words(eligible, word_ids.to(device), config, generator, draws)
    elif config.strategy == "span":
        selected = _select_spans(eligible, word_ids.to(device), config, generator, draws)
    else:
        lengths = (
            torch.full((input_ids.shape[0],), input_ids.shape[1], device=device)
            if attention_mask is None
            else attention_mask.to(device).sum(1)
        )
        selected = _select_exact_count(eligible, lengths, config, generator, draws)

    # Replacement: one draw decides [MASK] (v < 0.8); among the rest a second draw decides
    # random (w < 0.5) or unchanged. Drawn for every token so a result never depends on B.
    v = _uniform(input_ids.shape, generator, device)
    w = _uniform(input_ids.shape, generator, device)
    to_mask = selected & (v < config.mask_replace_prob)
    rest = selected & ~to_mask  # selected, not [MASK]: random or unchanged
    to_random = rest & (w < config.random_given_not_mask)
    unchanged = rest & ~to_random

    allowed = _replacement_ids(vocab_size, special_ids, device)  # (V',) non-special ids
    pick = torch.randint(len(allowed), input_ids.shape, generator=generator, device=generator.device)
    random_ids = allowed.index_select(0, pick.to(device).reshape(-1)).view_as(pick)  # (B, T)

    # torch.where builds each tensor in one pass (boolean-mask assignment would run a nonzero each time).
    corrupted = torch.where(to_random, random_ids, input_ids.masked_fill(to_mask, mask_token_id))  # new tensor
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    decisions = (
        to_mask.long() * Decision.MASK + to_random.long() * Decision.RANDOM + unchanged.long() * Decision.UNCHANGED
    )

    if trace:
        draws["replace"] = v
        draws["random"] = w
        draws["random_token"] = random_ids
    else:
        draws = {}
    if single:
        corrupted, labels, decisions = corrupted[0], labels[0], decisions[0]
        draws = {name: value[0] for name, value in draws.items()}
    return MaskingResult(corrupted, labels, decisions, draws)


def _uniform(shape, generator: torch.Generator, device) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=generator.device).to(device)


def _replacement_ids(vocab_size: int, special_ids: Sequence[int], device) -> torch.Tensor:
    return _allowed_ids(int(vocab_size), tuple(sorted({int(i) for i in special_ids})), str(device))


@functools.lru_cache(maxsize=32)
def _allowed_ids(vocab_size: int, special_ids: tuple[int, ...], device: str) -> torch.Tensor:
    """Non-special ids (V',), built once per vocabulary: masking one example at a time stays cheap."""
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    special = [i for i in special_ids if 0 <= i < vocab_size]
    if special:
        allowed[torch.tensor(special, dtype=torch.long)] = False
    ids = allowed.nonzero().squeeze(1)
    if len(ids) == 0:
        raise InputError("Every id of the vocabulary is special: there is nothing to draw random tokens from.")
    return ids.to(device)


def _select_tokens(eligible, config, generator, draws):
    """Each eligible token independently, with probability mlm_probability (BERT, HF's collator)."""
    u = _uniform(eligible.shape, generator, eligible.device)  # (B, T)
    draws["select"] = u
    return eligible & (u < config.mlm_probability)


def _select_whole_words(eligible, word_ids, config, generator, draws):
    """Each word independently; all its pieces share the word's draw (Google BERT's whole-word masking)."""
    B = eligible.shape[0]
    n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
    word_u = _uniform((B, max(n_words, 1)), generator, eligible.device)  # (B, W)
    u = torch.gather(word_u, 1, word_ids.clamp(min=0))  # (B, T): the word's draw on each piece
    u = torch.where(word_ids >= 0, u, torch.ones_like(u))
    draws["select"] = u
    return eligible & (word_ids >= 0) & (u < config.mlm_probability)


def _select_exact_count(eligible, lengths, config, generator, draws):
    """Google BERT's create_pretraining_data: exactly min(max_predictions, max(1, round(n * p))) tokens.

    n counts every (non-padding) token as Google does, [CLS] and [SEP] included; only non-special
    tokens are candidates. The candidates are shuffled (here: ranked by a uniform draw).
    """
    u = _uniform(eligible.shape, generator, eligible.device)  # (B, T)
    draws["select"] = u
    if config.mlm_probability == 0:
        return torch.zeros_like(eligible)
    # n (lengths): tokens of the sequence, special included, padding excluded.
    key = torch.where(eligible, u, torch.full_like(u, 2.0))
    rank = key.argsort(dim=1).argsort(dim=1)  # (B, T): 0 for the smallest draw
    k = torch.clamp(torch.round(lengths.to(torch.float64) * config.mlm_probability), min=1)
    k = torch.clamp(k, max=config.max_predictions).to(rank.dtype)  # (B,)
    return eligible & (rank < k[:, None])


def _select_spans(eligible, word_ids, config, generator, draws):
    """SpanBERT: contiguous spans of whole words, length ~ Geometric(span_p) clipped at span_max.

    Spans are drawn until mlm_probability of the row's eligible tokens is selected; a span that
    would overlap an earlier one is drawn again. ``draws['span_length']`` holds each span's length
    (in words) on its pieces and ``draws['span_id']`` numbers the spans (-1 outside them).
    """
    B, T = eligible.shape
    u_select = torch.ones(B, T)
    span_length = torch.zeros(B, T, dtype=torch.long)
    span_id = torch.full((B, T), -1, dtype=torch.long)
    selected = torch.zeros(B, T, dtype=torch.bool)
    log_q = math.log(1.0 - config.span_p) if config.span_p < 1 else None
    eligible_cpu, words_cpu = eligible.cpu(), word_ids.cpu()
    for b in range(B):
        words = words_cpu[b]
        row_words = sorted({int(w) for w in words[eligible_cpu[b] & (words >= 0)].tolist()})
        n_tokens = int(eligible_cpu[b].sum())
        budget = round(n_tokens * config.mlm_probability)
        if not row_words or budget == 0:
            continue
        positions = {w: (words == w) & eligible_cpu[b] for w in row_words}
        taken = torch.zeros(len(row_words), dtype=torch.bool)
        n_selected, spans, attempts = 0, 0, 0
        while n_selected < budget and attempts < 50 * len(row_words) and not bool(taken.all()):
            attempts += 1
            u_len, u_start = torch.rand(2, generator=generator).tolist()
            # Inverse CDF of Geometric(p) on {1, 2, ...}: ceil(log(1 - u) / log(1 - p)).
            length = 1 if log_q is None else max(1, math.ceil(math.log(1.0 - u_len) / log_q))
            length = min(length, config.span_max, len(row_words))
            start = int(u_start * (len(row_words) - length + 1))
            if bool(taken[start : start + length].any()):
                continue
            taken[start : start + length] = True
            for w in row_words[start : start + length]:
                where = positions[w]
                selected[b] |= where
                u_select[b][where] = u_start
                span_length[b][where] = length
                span_id[b][where] = spans
                n_selected += int(where.sum())
            spans += 1
    draws["select"] = u_select.to(eligible.device)
    draws["span_length"] = span_length.to(eligible.device)
    draws["span_id"] = span_id.to(eligible.device)
    return selected.to(eligible.device)
