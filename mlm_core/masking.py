"""BERT's masking, decision by decision.

Selection picks ``mlm_probability`` of the eligible tokens (15% in BERT). Each selected token is then
replaced by [MASK] (80%), by a random token (10%) or left unchanged (10%), and the model must
predict the original at every selected position. Every decision and the uniform draw behind it is
returned, so a learner can step through them.

Four selection rules (``MaskingConfig.strategy``), each named after the code it follows:

- ``token``: each token on its own with probability p (BERT's paper; Hugging Face's
  ``DataCollatorForLanguageModeling``).
- ``whole_word``: each *word* on its own with probability p, all its pieces together (Hugging Face's
  ``whole_word_mask=True``; Google's whole-word masking is different: it fills the exact count below
  with whole words).
- ``span``: SpanBERT (Joshi et al. 2020, §3.1): contiguous spans of whole words, lengths drawn from
  Geometric(0.2) renormalised over 1..10 words, until a per-row budget of round(p · n) tokens is
  reached, never passed; 80/10/10 decided once per span.
- ``exact_count``: Google BERT's ``create_pretraining_data.py``: exactly
  min(max_predictions, max(1, round(p · n))) tokens, n counting every real token ([CLS], [SEP] too).

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

import bisect
import enum
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from mlm_core.errors import InputError

IGNORE_INDEX = -100  # what F.cross_entropy and Hugging Face skip: labels of unselected tokens

STRATEGIES = ("token", "whole_word", "span", "exact_count")
# Where a random replacement comes from, as the pages say it (checked: tests/test_masking.py::
# test_random_replacement_sources_are_quoted_from_the_code). Google's line is quoted from
# github.com/google-research/bert create_pretraining_data.py (commit eedf571); Hugging Face's from the
# installed transformers' data/data_collator.py.
RANDOM_REPLACEMENT_SOURCE = (
    "A random replacement can be any entry of the vocabulary, word pieces (“##rew”) and `[unused]` slots "
    "included: Google's `create_pretraining_data.py` (function `create_masked_lm_predictions`) takes "
    "`vocab_words[rng.randint(0, len(vocab_words) - 1)]` from `vocab_words = list(tokenizer.vocab.keys())`, and "
    "Hugging Face's `transformers/data/data_collator.py` (`DataCollatorForLanguageModeling.torch_mask_tokens`) takes "
    "`torch.randint(len(self.tokenizer), ...)`. Both draw special tokens too; MLM Lab draws any id except the "
    "special ones."
)
SPAN_REPLACEMENTS = ("per_span", "per_token")  # SpanBERT §3.1 / its code's default --replacement-method word_piece


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
    span_p: float = 0.2  # SpanBERT §3.1: span lengths (in words) ~ Geometric(0.2) ...
    span_max: int = 10  # ... renormalised over 1..10 (not clipped): mean 3.8 words
    # SpanBERT §3.1 decides 80/10/10 once per span ("per_span"); its released code's default
    # (--replacement-method word_piece) decides per token ("per_token").
    span_replacement: str = "per_span"
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
        if self.span_replacement not in SPAN_REPLACEMENTS:
            raise InputError(
                f"span_replacement must be one of {', '.join(SPAN_REPLACEMENTS)}; got {self.span_replacement!r}."
            )
        if int(self.max_predictions) < 0:
            raise InputError(f"max_predictions cannot be negative, got {self.max_predictions!r}.")

    def describe(self) -> str:
        """The rule in the words the pages use.

        >>> MaskingConfig().describe()
        'token masking, p = 15%, 80% [MASK] / 10% random / 10% unchanged'
        """
        return (f"{self.strategy.replace('_', ' ')} masking, p = {self.mlm_probability:.0%}, "
                f"{self.mask_replace_prob:.0%} [MASK] / {self.random_replace_prob:.0%} random / "
                f"{self.unchanged_prob:.0%} unchanged")

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

    def span_length_probs(self) -> list[float]:
        """P(length = k words) for k = 1..span_max: Geometric(span_p) renormalised over 1..span_max.

        SpanBERT's ``PairWithSpanMaskingScheme``: ``p (1 - p)^(k - 1)``, divided by the sum over
        1..span_max, so long spans are not piled up at the maximum as clipping would.

        >>> probs = MaskingConfig().span_length_probs()
        >>> round(sum(k * q for k, q in enumerate(probs, 1)), 2), round(probs[-1], 3)
        (3.8, 0.03)
        """
        raw = [self.span_p * (1.0 - self.span_p) ** (k - 1) for k in range(1, int(self.span_max) + 1)]
        total = sum(raw)
        return [r / total for r in raw]

    def mean_span_length(self) -> float:
        """Expected span length in words (SpanBERT §3.1: 3.8 for p = 0.2, at most 10)."""
        return sum(k * q for k, q in enumerate(self.span_length_probs(), 1))

    def selection_budget(self, n_tokens: int, n_eligible: int) -> int | None:
        """How many tokens the rule selects in a row with ``n_tokens`` real tokens, ``n_eligible`` of them eligible.

        ``exact_count``: Google's min(max_predictions, max(1, round(p · n_tokens))), at most the eligible ones;
        ``span``: round(p · n_eligible), the budget the spans fill (they may fall short of it by less
        than one word, never pass it). ``None`` for ``token`` and ``whole_word``: their count is random.
        ``round`` is Python 3's, as in Google's ``int(round(len(tokens) * masked_lm_prob))`` (halves to even).

        >>> MaskingConfig(strategy="exact_count").selection_budget(9, 7), MaskingConfig(strategy="span").selection_budget(22, 20)
        (1, 3)
        """
        if self.strategy == "exact_count":
            if self.mlm_probability == 0:
                return 0
            k = min(int(self.max_predictions), max(1, round(n_tokens * self.mlm_probability)))
            return min(k, int(n_eligible))
        if self.strategy == "span":
            return min(round(n_eligible * self.mlm_probability), int(n_eligible))
        return None


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


SPECIAL = "SPECIAL"  # the name a page shows on [CLS], [SEP] and the like: never a Decision, never selected

# The words a learner reads for each name ``decision_names`` gives: the chips and their legend, tables, figures and
# sentences all take them from here (``mlm_core.figures.masking.DECISION_STYLE`` adds the colours).
DECISION_WORDS = {
    "NOT_SELECTED": "not selected",
    "MASK": "→ [MASK]",
    "RANDOM": "→ random",
    "UNCHANGED": "unchanged",
    SPECIAL: "special",
}
SELECTED_DECISIONS = ("MASK", "RANDOM", "UNCHANGED")  # what a selected token became: where the loss is computed


def decision_word(name: str, *, noun: bool = False) -> str:
    """What a learner reads for a decision name: the legend's word, or with ``noun`` the word a sentence uses
    ("surer at **[MASK]** than at **random** positions"). A name it does not know comes back as it is.

    >>> decision_word("RANDOM"), decision_word("MASK", noun=True), decision_word("UNCHANGED", noun=True)
    ('→ random', '[MASK]', 'unchanged')
    """
    word = DECISION_WORDS.get(name, name)
    return word.removeprefix("→ ") if noun else word


def decision_names(
    result_or_codes: MaskingResult | torch.Tensor | Sequence[int],
    row: int = 0,
    *,
    special_tokens_mask: torch.Tensor | Sequence[int] | None = None,
    length: int | None = None,
) -> list[str]:
    """The decision of each token of one row, by name: what every page colours its token chips with.

    ``result_or_codes`` is a ``MaskingResult`` or its ``decisions`` ((T,) or (B, T) codes); ``row``
    picks the row of a batch. Positions where ``special_tokens_mask`` (same shape) is set are named
    ``"SPECIAL"``; ``length`` keeps the first ``length`` positions (the row's real tokens, no padding).

    >>> codes = torch.tensor([[0, 1, 2, 3, 0, 0], [0, 0, 1, 0, 0, 0]])  # (B, T), padded
    >>> special = torch.tensor([[1, 0, 0, 0, 1, 1], [1, 0, 0, 0, 1, 1]])
    >>> decision_names(codes, 0, special_tokens_mask=special, length=5)
    ['SPECIAL', 'MASK', 'RANDOM', 'UNCHANGED', 'SPECIAL']
    >>> decision_names(codes[1], length=3)
    ['NOT_SELECTED', 'NOT_SELECTED', 'MASK']
    """
    codes = result_or_codes.decisions if isinstance(result_or_codes, MaskingResult) else result_or_codes
    codes = torch.as_tensor(codes)
    special = None if special_tokens_mask is None else torch.as_tensor(special_tokens_mask)
    if codes.dim() == 2:
        codes = codes[row]
        special = None if special is None or special.dim() == 1 else special[row]
    elif codes.dim() != 1:
        raise InputError(f"decisions must be (T,) or (B, T); got {tuple(codes.shape)}.")
    n = len(codes) if length is None else min(int(length), len(codes))
    codes = codes[:n].tolist()
    special = [False] * n if special is None else [bool(s) for s in special[:n].tolist()]
    return [SPECIAL if s else Decision(c).name for c, s in zip(codes, special)]


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

    Inputs, all (T,) for one sentence or (B, T) for a batch:

    - ``special_tokens_mask``: 1 where a token may never be selected ([CLS], [SEP], padding).
    - ``word_ids``: the word each piece belongs to (-1 on special tokens and padding); needed by
      ``whole_word`` and ``span``.
    - ``attention_mask``: 1 on real tokens, 0 on padding. It gives each row's length, and only
      ``exact_count`` counts by length (Google's n includes [CLS] and [SEP], so the special-tokens
      mask cannot tell it); ``exact_count`` refuses to run without it, because a padded row would
      otherwise get round(T · p) selections. The other strategies count eligible tokens and ignore it.
    - ``special_ids``: ids never drawn as random replacements.

    With ``trace=False`` the draws are not kept (the decisions are the same).
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
    selected, span_first = _select(input_ids, eligible, config, generator, draws, word_ids, attention_mask)
    corrupted, labels, decisions = _replace(input_ids, selected, span_first, config, generator, draws,
                                            mask_token_id=mask_token_id, vocab_size=vocab_size, special_ids=special_ids)
    if not trace:
        draws = {}
    if single:
        corrupted, labels, decisions = corrupted[0], labels[0], decisions[0]
        draws = {name: value[0] for name, value in draws.items()}
    return MaskingResult(corrupted, labels, decisions, draws)


def _select(input_ids, eligible, config: MaskingConfig, generator, draws, word_ids, attention_mask):
    """Step 1, selection by the config's strategy: the (B, T) selected positions, and for SpanBERT's per-span
    replacement the position of each piece's span start (else None). Records its draws in ``draws``."""
    device = input_ids.device
    span_first = None  # (B, T) for per-span replacement: the position of each piece's span start
    if config.strategy == "token":
        selected = _select_tokens(eligible, config, generator, draws)
    elif config.strategy == "whole_word":
        selected = _select_whole_words(eligible, word_ids.to(device), config, generator, draws)
    elif config.strategy == "span":
        selected, span_first = _select_spans(eligible, word_ids.to(device), config, generator, draws)
        if config.span_replacement != "per_span":
            span_first = None
    else:
        if attention_mask is None or attention_mask.shape != input_ids.shape:
            raise InputError(
                "The 'exact_count' strategy needs the attention_mask (1 on real tokens, 0 on padding), shaped "
                "like input_ids: it selects round(p · n) tokens where n is each row's length."
            )
        lengths = attention_mask.to(device).sum(1)  # (B,) real tokens, [CLS] and [SEP] included
        selected = _select_exact_count(eligible, lengths, config, generator, draws)
    return selected, span_first


def _replace(input_ids, selected, span_first, config: MaskingConfig, generator, draws, *, mask_token_id: int,
             vocab_size: int, special_ids: Sequence[int]):
    """Step 2, replacement of the selected tokens (80/10/10 by default): the corrupted ids, the labels (-100 where
    nothing was selected) and each position's `Decision`. Records its draws in ``draws``."""
    device = input_ids.device
    # Replacement: one draw decides [MASK] (v < 0.8); among the rest a second draw decides
    # random (w < 0.5) or unchanged. Drawn for every token so a result never depends on B.
    v = _uniform(input_ids.shape, generator, device)
    w = _uniform(input_ids.shape, generator, device)
    if span_first is not None:  # SpanBERT §3.1: every piece of a span takes its first piece's draws
        v, w = v.gather(1, span_first), w.gather(1, span_first)
    to_mask = selected & (v < config.mask_replace_prob)
    rest = selected & ~to_mask  # selected, not [MASK]: random or unchanged
    to_random = rest & (w < config.random_given_not_mask)
    unchanged = rest & ~to_random

    allowed = _replacement_ids(vocab_size, special_ids, device)  # (V',) non-special ids
    pick = torch.randint(len(allowed), input_ids.shape, generator=generator, device=generator.device)
    random_ids = allowed.index_select(0, pick.to(device).reshape(-1)).view_as(pick)  # (B, T) one per token

    # torch.where builds each tensor in one pass (boolean-mask assignment would run a nonzero each time).
    corrupted = torch.where(to_random, random_ids, input_ids.masked_fill(to_mask, mask_token_id))  # new tensor
    labels = input_ids.masked_fill(~selected, IGNORE_INDEX)
    decisions = (
        to_mask.long() * Decision.MASK + to_random.long() * Decision.RANDOM + unchanged.long() * Decision.UNCHANGED
    )
    draws["replace"] = v
    draws["random"] = w
    draws["random_token"] = random_ids
    return corrupted, labels, decisions


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
    """Each word independently; all its pieces share the word's draw (Hugging Face's whole_word_mask=True)."""
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
    """SpanBERT (§3.1): spans of whole words until round(p · n) tokens are selected, never more.

    Each span: a length L ~ Geometric(span_p) renormalised over 1..span_max (one draw), and a start
    word drawn uniformly among the words that are still free and fit in what is left of the budget
    (a second draw). The span then takes up to L words to the right, and stops early at the end of
    the row, at a special token (a pair's middle [SEP]), at a word already taken, or at a word that
    would pass the budget. The row is done when
    no free word fits: it then falls short of its budget by less than one word (usually not at all).

    Returns (selected, span_first): span_first (B, T) holds, on each piece of a span, the position
    of the span's first piece (elsewhere the position itself), for per-span replacement.
    Draws: ``span_length`` is the *drawn* L on the span's pieces (0 elsewhere: the kept length can be
    shorter); ``span_id`` numbers the spans in the order drawn (-1 outside them); ``select`` holds
    the start draw; ``span_budget`` the row's budget on every position.
    """
    B, T = eligible.shape
    cdf = list(itertools.accumulate(config.span_length_probs()))
    u_select = torch.ones(B, T)
    span_length = torch.zeros(B, T, dtype=torch.long)
    span_id = torch.full((B, T), -1, dtype=torch.long)
    span_first = torch.arange(T).expand(B, T).clone()
    budgets = torch.zeros(B, T, dtype=torch.long)
    selected = torch.zeros(B, T, dtype=torch.bool)
    eligible_cpu, words_cpu = eligible.cpu(), word_ids.cpu()
    for b in range(B):
        ok = eligible_cpu[b] & (words_cpu[b] >= 0)
        pieces: dict[int, list[int]] = {}  # word id -> its eligible positions, in order
        for position, word in zip(ok.nonzero().flatten().tolist(), words_cpu[b][ok].tolist()):
            pieces.setdefault(word, []).append(position)
        words = sorted(pieces, key=lambda w: pieces[w][0])  # words in reading order
        budget = config.selection_budget(T, int(eligible_cpu[b].sum()))
        budgets[b] = budget
        taken = [False] * len(words)
        left, spans = budget, 0
        while left > 0:
            free = [i for i, w in enumerate(words) if not taken[i] and len(pieces[w]) <= left]
            if not free:
                break
            u_len, u_start = torch.rand(2, generator=generator).tolist()
            length = min(bisect.bisect_right(cdf, u_len) + 1, len(cdf))  # inverse CDF, 1..span_max
            i = free[min(int(u_start * len(free)), len(free) - 1)]
            first = pieces[words[i]][0]
            kept, end = 0, first - 1
            # A span runs over the next words as long as they touch it: it never jumps a special token
            # (the [SEP] between the two sentences of a pair), a taken word or the budget.
            while (kept < length and i < len(words) and not taken[i] and len(pieces[words[i]]) <= left
                   and pieces[words[i]][0] == end + 1):
                where = pieces[words[i]]
                end = where[-1]
                taken[i] = True
                left -= len(where)
                selected[b, where] = True
                u_select[b, where] = u_start
                span_length[b, where] = length
                span_id[b, where] = spans
                span_first[b, where] = first
                kept += 1
                i += 1
            spans += 1
    device = eligible.device
    draws["select"] = u_select.to(device)
    draws["span_length"] = span_length.to(device)
    draws["span_id"] = span_id.to(device)
    draws["span_budget"] = budgets.to(device)
    return selected.to(device), span_first.to(device)
