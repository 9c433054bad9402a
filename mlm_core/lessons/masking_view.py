"""The Masking page's view-model: per-token traces, the rates over many sentences, and the same masks elsewhere.

The Masking page reads these (and the tests of its claims check the masking rule with them): they turn a ``MaskingResult`` into the sentences and tables a learner
steps through, mask many sentences to compare what each rule promises with what it did, and write
the code that masks the same sentence in MLM Lab and (where one exists) with Hugging Face's collator.

Which statistic is valid depends on the rule (``selection_check``):

- ``token``: one independent draw per token, so the selected count is binomial per token: a z-score
  of the rate against p.
- ``whole_word``: one draw per *word*: binomial per word (the token count is not: a word's pieces
  go together).
- ``exact_count`` and ``span``: the count is fixed by the rule (Google's exact count; SpanBERT's
  budget), so there is no sampling error to test: the rule's expected count stands beside the
  measured one.

The 80/10/10 split is tested with a χ² over the units that are drawn independently: tokens, or
spans when a span shares one decision (SpanBERT §3.1).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from scipy import stats

from mlm_core import seeds
from mlm_core.classroom import Ask, Reveal
from mlm_core.data import Encoded, encode, mask_batch
from mlm_core.formatting import signed
from mlm_core.masking import SPECIAL, Decision, MaskingConfig, decision_names

SPLIT = (Decision.MASK, Decision.RANDOM, Decision.UNCHANGED)


# --------------------------------------------------------------------------- one sentence, token by token
def token_trace(tokens: list[str], encoded_row: dict, result_row: dict, config: MaskingConfig, id_to_token) -> list[dict]:
    """One row per token: the decision, the draws behind it and the rule applied, in words.

    ``encoded_row`` holds 1-D tensors ``special_tokens_mask`` (and, for whole-word and span rules,
    ``word_ids``) for one sentence; ``result_row`` the same sentence's ``input_ids``, ``labels``,
    ``decisions`` and ``draws``.
    """
    rows = []
    draws = result_row["draws"]
    m, r = config.mask_replace_prob, config.random_given_not_mask
    per_span = config.strategy == "span" and config.span_replacement == "per_span"
    span_words = _kept_span_words(draws, encoded_row.get("word_ids"))
    names = decision_names(result_row["decisions"], special_tokens_mask=encoded_row["special_tokens_mask"],
                           length=len(tokens))  # what the chips show: SPECIAL on [CLS] and [SEP]
    for i, token in enumerate(tokens):
        decision = Decision(int(result_row["decisions"][i]))
        special = bool(encoded_row["special_tokens_mask"][i])
        u = _draw(draws, "select", i)
        v = _draw(draws, "replace", i)
        w = _draw(draws, "random", i)
        shown = id_to_token(int(result_row["input_ids"][i]))
        if special:
            rule = "special token: never selected"
        else:
            rule = _selection_rule(config, u, draws, i, span_words, selected=decision != Decision.NOT_SELECTED)
            whose = " (the span's draw)" if per_span else ""
            if decision == Decision.MASK:
                rule += f"; v{whose} = {v:.3f} < {m:g} → [MASK]"
            elif decision == Decision.RANDOM:
                rule += f"; v{whose} = {v:.3f} ≥ {m:g} → not [MASK]; w = {w:.3f} < {r:.3g} → random: {shown}"
            elif decision == Decision.UNCHANGED:
                rule += f"; v{whose} = {v:.3f} ≥ {m:g} → not [MASK]; w = {w:.3f} ≥ {r:.3g} → unchanged"
        rows.append(
            {
                "position": i,
                "token": token,
                "decision": names[i],
                "special": special,
                "model_sees": shown,
                "label": int(result_row["labels"][i]),
                "u_select": u,
                "v_replace": v if decision != Decision.NOT_SELECTED else None,
                "w_random": w if decision in (Decision.RANDOM, Decision.UNCHANGED) else None,
                "rule": rule,
            }
        )
    return rows


def _draw(draws: dict, name: str, i: int):
    value = draws.get(name)
    return None if value is None else float(value[i])


def _kept_span_words(draws: dict, word_ids) -> dict[int, int]:
    """span id -> how many words the span kept (its drawn length may be longer)."""
    span_id = draws.get("span_id")
    if span_id is None or word_ids is None:
        return {}
    kept: dict[int, set] = {}
    for s, w in zip(span_id.tolist(), word_ids.tolist()):
        if s >= 0:
            kept.setdefault(s, set()).add(w)
    return {s: len(words) for s, words in kept.items()}


def _selection_rule(config: MaskingConfig, u, draws: dict, i: int, span_words: dict, selected: bool) -> str:
    p = config.mlm_probability
    if config.strategy == "exact_count":
        return (
            f"u = {u:.3f} ranks among the lowest draws → selected (exact count)"
            if selected
            else f"u = {u:.3f} not among the lowest draws → not selected (exact count)"
        )
    if config.strategy == "span":
        budget = _draw(draws, "span_budget", i)
        budget_text = "" if budget is None else f" (this sentence's budget: {int(budget)} tokens)"
        if not selected:
            return f"outside every span → not selected{budget_text}"
        span, drawn = int(_draw(draws, "span_id", i)), int(_draw(draws, "span_length", i))
        kept = span_words.get(span)
        cut = "" if kept is None or kept == drawn else f", kept {kept} (cut by the budget, the end or another span)"
        return f"in span {span + 1}: drawn length {drawn} word{'s' if drawn != 1 else ''}{cut} → selected{budget_text}"
    unit = "word's u" if config.strategy == "whole_word" else "u"
    return f"{unit} = {u:.3f} < {p:g} → selected" if selected else f"{unit} = {u:.3f} ≥ {p:g} → not selected"


def class_ask(sentence: str, decisions: torch.Tensor, special_tokens_mask: torch.Tensor, config: MaskingConfig,
              seed: int) -> Ask:
    """"How many of these tokens will be selected?", a number the step-through reveals: the sentence, its rule
    and seed, and, for the reveal, the count this draw selected beside what p predicts.

    >>> ask = class_ask("a b c", torch.tensor([0, 1, 0, 2, 0]), torch.tensor([1, 0, 0, 0, 1]), MaskingConfig(), 7)
    >>> ask.prompt, ask.max_number, ask.reveal.truth
    ('How many of these 3 tokens will the rule select?', 3, '2')
    """
    counts = running_counts(decisions, len(decisions), special_tokens_mask)
    eligible = len(decisions) - counts[SPECIAL]
    selected = eligible - counts["NOT_SELECTED"]
    expected = config.mlm_probability * eligible
    how = (f"exactly {selected}: this rule selects a fixed share" if config.strategy == "exact_count"
           else f"{selected}; on average a rule with p = {config.mlm_probability:g} selects {expected:.1f} of "
                f"{eligible}, and any one draw scatters around that")
    return Ask("number", f"How many of these {eligible} tokens will the rule select?",
               context=f"{sentence} · p = {config.mlm_probability:g}, {config.strategy.replace('_', ' ')}, seed {seed}",
               max_number=eligible, reveal=Reveal(truth=str(selected), note=f"this draw selected {how}."))


def running_counts(decisions: torch.Tensor, upto: int, special_tokens_mask: torch.Tensor | None = None) -> dict[str, int]:
    """Decision counts over the first ``upto`` tokens of one sentence (the step-through reveals them left to right).

    With ``special_tokens_mask``, special tokens ([CLS], [SEP]) are counted apart as ``SPECIAL``
    instead of as ``NOT_SELECTED``.

    >>> running_counts(torch.tensor([0, 1, 0, 3, 0]), 4, torch.tensor([1, 0, 0, 0, 1]))
    {'NOT_SELECTED': 1, 'MASK': 1, 'RANDOM': 0, 'UNCHANGED': 1, 'SPECIAL': 1}
    """
    seen = Counter(decision_names(decisions, special_tokens_mask=special_tokens_mask, length=upto))
    counts = {d.name: seen[d.name] for d in Decision}
    if special_tokens_mask is not None:
        counts[SPECIAL] = seen[SPECIAL]
    return counts


# --------------------------------------------------------------------------- many sentences
@dataclass(frozen=True)
class SelectionCheck:
    """What can be said about the selected count under a rule, in the units where it holds.

    ``kind == "binomial"``: ``selected`` of ``units`` (tokens or words) were drawn with probability p
    each; ``z`` is (rate − p) / its standard error. ``kind == "fixed"``: the rule fixes each row's
    count (exact count, span budget): ``expected`` is the sum of the rule's counts, ``selected``
    the measured sum, and there is no z (no sampling error to test).
    """

    kind: str  # "binomial" | "fixed"
    unit: str  # "token" | "word" (binomial); "token" (fixed)
    units: int  # tokens or words that could be selected
    selected: int  # of those, selected
    expected: float  # p · units (binomial) or the sum of the rule's counts (fixed)
    rows: int  # sentences
    rows_short: int = 0  # fixed: rows whose count fell short of the rule's (span: less than one word)
    z: float | None = None  # binomial only

    @property
    def rate(self) -> float:
        return self.selected / max(self.units, 1)

    @property
    def expected_rate(self) -> float:
        return self.expected / max(self.units, 1)


@dataclass
class MaskingStatistics:
    """Empirical rates as more and more sentences are masked, with the checks valid for the rule."""

    convergence: list[dict]  # one row per checkpoint: tokens, selection rate and its expected value, shares
    per_sentence: list[int]  # selected tokens per sentence (zeros included)
    eligible: int  # tokens that could be selected
    selected: int  # tokens selected
    selection: SelectionCheck
    split_unit: str  # "token", or "span" when a span shares one decision
    split_counts: dict[str, int]  # MASK / RANDOM / UNCHANGED counts, in split_unit
    chi2: float
    p_value: float  # chi-square goodness of fit of the split to the configured 80/10/10
    span_lengths: dict[int, int] = field(default_factory=dict)  # span: drawn length (words) -> spans
    span_kept_mean: float | None = None  # span: mean length kept (the budget and the row cut spans)


def masking_statistics(
    tokenizer,
    sentences: list[str],
    config: MaskingConfig,
    *,
    target_tokens: int,
    seed: int,
    max_length: int = 128,
    batch_size: int = 256,
) -> MaskingStatistics:
    """Mask sentences (cycling through them) until about ``target_tokens`` eligible tokens are seen."""
    if not sentences:
        raise ValueError("masking_statistics needs at least one sentence")
    encoded = encode(tokenizer, sentences, max_length=max_length)
    generator = seeds.generator(seed)
    span = config.strategy == "span"
    per_span = span and config.span_replacement == "per_span"
    lengths = encoded.attention_mask.sum(1)  # (N,) real tokens, [CLS] and [SEP] included
    eligible_rows = (encoded.special_tokens_mask == 0).sum(1)  # (N,)
    word_starts = _word_starts(encoded)  # (N, T) first piece of each eligible word
    budgets = [config.selection_budget(int(n), int(e)) for n, e in zip(lengths.tolist(), eligible_rows.tolist())]

    eligible = selected = words = selected_words = expected = short = 0
    split = Counter()
    drawn_lengths, kept = Counter(), []
    convergence, per_sentence = [], []
    next_checkpoint = 100
    start = 0
    n = encoded.input_ids.shape[0]
    while eligible < target_tokens:
        rows = torch.arange(start, start + batch_size) % n
        start += batch_size
        part = Encoded(encoded.input_ids[rows], encoded.attention_mask[rows], encoded.special_tokens_mask[rows],
                       encoded.word_ids[rows], [], [])
        result = mask_batch(tokenizer, part, config, generator, trace=span)
        chosen = result.selected  # (b, T)
        firsts = _span_starts(result.draws["span_id"]) if span else None  # (b, T)
        for j, row in enumerate(rows.tolist()):
            e, s = int(eligible_rows[row]), int(chosen[j].sum())
            eligible += e
            selected += s
            per_sentence.append(s)
            words += int(word_starts[row].sum())
            selected_words += int((word_starts[row] & chosen[j]).sum())
            if budgets[row] is not None:
                expected += budgets[row]
                short += s < budgets[row]
            decisions = result.decisions[j]
            if per_span:
                decisions = decisions[firsts[j]]
            split.update(int(d) for d in decisions[decisions != Decision.NOT_SELECTED].tolist())
            if span:
                starts = firsts[j]
                drawn_lengths.update(result.draws["span_length"][j][starts].tolist())
                kept.extend(_kept_lengths(result.draws["span_id"][j], part.word_ids[j]))
            if eligible >= next_checkpoint or eligible >= target_tokens:
                expected_rate = config.mlm_probability if budgets[row] is None else expected / eligible
                convergence.append(_checkpoint(eligible, selected, expected_rate, split, len(per_sentence)))
                while next_checkpoint <= eligible:
                    next_checkpoint = int(next_checkpoint * 1.25) + 1
            if eligible >= target_tokens:
                break
    counts = {d: split.get(int(d), 0) for d in SPLIT}
    chi2, p_value = split_chisquare(counts, config)
    rows_seen = len(per_sentence)
    p = config.mlm_probability
    if config.strategy == "token":
        selection = _binomial("token", eligible, selected, p, rows_seen)
    elif config.strategy == "whole_word":
        selection = _binomial("word", words, selected_words, p, rows_seen)
    else:
        selection = SelectionCheck("fixed", "token", eligible, selected, float(expected), rows_seen, rows_short=short)
    return MaskingStatistics(
        convergence, per_sentence, eligible, selected, selection, "span" if per_span else "token",
        {d.name: c for d, c in counts.items()}, chi2, p_value,
        span_lengths=dict(sorted(drawn_lengths.items())),
        span_kept_mean=(sum(kept) / len(kept)) if kept else None,
    )


def _binomial(unit: str, units: int, selected: int, p: float, rows: int) -> SelectionCheck:
    se = math.sqrt(p * (1 - p) / max(units, 1))
    z = (selected / max(units, 1) - p) / se if se > 0 else 0.0
    return SelectionCheck("binomial", unit, units, selected, p * units, rows, z=z)


def _word_starts(encoded: Encoded) -> torch.Tensor:
    """(B, T) True on the first eligible piece of each word."""
    words = encoded.word_ids
    ok = (encoded.special_tokens_mask == 0) & (words >= 0)
    previous = torch.cat([torch.full_like(words[:, :1], -2), words[:, :-1]], dim=1)
    return ok & (words != previous)


def _span_starts(span_id: torch.Tensor) -> torch.Tensor:
    """(B, T) True on the first piece of each span (spans are contiguous and numbered apart)."""
    previous = torch.cat([torch.full_like(span_id[:, :1], -1), span_id[:, :-1]], dim=1)
    return (span_id >= 0) & (span_id != previous)


def _kept_lengths(span_id: torch.Tensor, word_ids: torch.Tensor) -> list[int]:
    """Words kept by each span of one row."""
    spans: dict[int, set] = {}
    for s, w in zip(span_id.tolist(), word_ids.tolist()):
        if s >= 0:
            spans.setdefault(s, set()).add(w)
    return [len(w) for w in spans.values()]


def _checkpoint(eligible, selected, expected_rate, split, sentences) -> dict:
    total = max(sum(split.get(int(d), 0) for d in SPLIT), 1)
    return {
        "sentences": sentences,
        "eligible_tokens": eligible,
        "selection_rate": selected / eligible,
        "expected_rate": expected_rate,
        "mask_share": split.get(int(Decision.MASK), 0) / total,
        "random_share": split.get(int(Decision.RANDOM), 0) / total,
        "unchanged_share": split.get(int(Decision.UNCHANGED), 0) / total,
    }


def split_chisquare(split: dict, config: MaskingConfig) -> tuple[float, float]:
    """Chi-square goodness of fit of the MASK/RANDOM/UNCHANGED counts to the configured shares.

    Valid when the counted units are decided independently (tokens; spans under per-span
    replacement). Categories with an expected share of 0 are left out (their count must then be 0).
    Returns (statistic, p-value); (0, 1) when there is nothing to test.
    """
    counts = [split[Decision.MASK], split[Decision.RANDOM], split[Decision.UNCHANGED]]
    shares = [config.mask_replace_prob, config.random_replace_prob, config.unchanged_prob]
    kept = [(c, s) for c, s in zip(counts, shares) if s > 0]
    total = sum(counts)
    if total == 0 or len(kept) < 2:
        return 0.0, 1.0
    observed = [c for c, _ in kept]
    scale = sum(s for _, s in kept)
    expected = [total * s / scale for _, s in kept]
    chi2, p_value = stats.chisquare(observed, expected)
    return float(chi2), float(p_value)


# --------------------------------------------------------------------------- the same masks elsewhere
def rate_metrics(measured: MaskingStatistics) -> list[dict[str, Any]]:
    """The numbers beside the rates' chart, as ``st.metric`` keywords: the selection (a z-score where the count is
    random, the rule's own count where it is fixed), the 80/10/10 χ² p-value and the eligible tokens."""
    check, per = measured.selection, "span" if measured.split_unit == "span" else "token"
    if check.kind == "binomial":
        unit = "tokens" if check.unit == "token" else "words"
        metrics = [dict(label=f"{unit} selected", value=f"{check.rate:.2%}", delta=f"z = {signed(check.z)}",
                        delta_color="off", delta_arrow="off",
                        help=f"{check.selected:,} of {check.units:,} {unit}; z = (rate − p) / standard error, with one "
                             f"independent draw per {check.unit}. When the rule is followed, |z| is above 3 in about 3 "
                             "draws of 1,000; far above (say 6) would say it is not.")]
    else:
        metrics = [dict(label="the rule selects", value=f"{check.expected_rate:.2%}",
                        help=f"The rule's counts sum to {check.expected:,.0f} tokens of {check.units:,}. A fixed count "
                             "has no sampling error, so there is no z-score to show."),
                   dict(label="measured", value=f"{check.rate:.2%}",
                        help=f"{check.selected:,} tokens selected; {check.rows_short:,} of {check.rows:,} sentences fell "
                             "short of the rule's count.")]
    return metrics + [dict(label=f"80/10/10 χ² p-value (per {per})", value=f"{measured.p_value:.3f}"),
                      dict(label="eligible tokens", value=f"{measured.eligible:,}")]


def fixed_count_note(measured: MaskingStatistics, config: MaskingConfig) -> str | None:
    """For a rule that fixes each sentence's count: what it asked for per sentence, what was selected, and why that
    is not p (markdown). None for the rules whose count is random."""
    check = measured.selection
    if check.kind != "fixed":
        return None
    per_row, measured_row = check.expected / max(check.rows, 1), check.selected / max(check.rows, 1)
    why = ("Google counts [CLS] and [SEP] in n and selects at least one token, so short sentences get more than p"
           if config.strategy == "exact_count" else
           "each sentence's budget is round(p · its eligible tokens); rounding on short sentences moves the rate off p")
    return (f"Per sentence: the rule asks for **{per_row:.2f}** tokens on average, **{measured_row:.2f}** were "
            f"selected; {why}.")


def span_lengths_note(measured: MaskingStatistics, config: MaskingConfig) -> str:
    """Drawn against kept span lengths (markdown)."""
    drawn = sum(k * n for k, n in measured.span_lengths.items()) / sum(measured.span_lengths.values())
    return (f"Span lengths: **{drawn:.2f}** words drawn on average (the law: {config.mean_span_length():.2f}); "
            f"**{measured.span_kept_mean:.2f}** kept, because the budget, the end of the sentence and other spans cut "
            "them.")


DEFAULT_HUB_TOKENIZER = "bert-base-uncased"  # the bundled tokenizer's files are bert-base-uncased's


def mlm_lab_snippet(config: MaskingConfig, sentence: str, seed: int, model_name: str | None = None,
                    max_length: int = 128) -> str:
    """Python that masks ``sentence`` exactly as the Masking page does (same seed, same masks)."""
    fields = [f"mlm_probability={config.mlm_probability:g}", f"mask_replace_prob={config.mask_replace_prob:g}",
              f"random_replace_prob={config.random_replace_prob:g}", f"strategy={config.strategy!r}"]
    if config.strategy == "span":
        fields += [f"span_p={config.span_p:g}", f"span_max={config.span_max}",
                   f"span_replacement={config.span_replacement!r}"]
    if config.strategy == "exact_count":
        fields.append(f"max_predictions={config.max_predictions}")
    load = ("tokenizer = load_default_tokenizer()  # bert-base-uncased WordPiece, bundled" if model_name is None
            else f"tokenizer = AutoTokenizer.from_pretrained({model_name!r})")
    imports = "from mlm_core import MaskingConfig, load_default_tokenizer, mask_sentence\n"
    if model_name is not None:
        imports = "from transformers import AutoTokenizer\n\nfrom mlm_core import MaskingConfig, mask_sentence\n"
    return (
        imports + "\n"
        + load + "\n"
        + "config = MaskingConfig(" + ", ".join(fields) + ")\n"
        + f"masked = mask_sentence(tokenizer, {sentence!r}, config, seed={int(seed)}, max_length={max_length})\n"
        + "for token, decision in zip(masked.tokens, masked.decisions):\n"
        + "    print(token, decision)"
    )


def collator_snippet(config: MaskingConfig, sentence: str = "The cat sat on the mat.", seed: int = 0,
                     tokenizer_name: str = DEFAULT_HUB_TOKENIZER, max_length: int = 128) -> tuple[str | None, list[str]]:
    """A ``DataCollatorForLanguageModeling`` call that runs as pasted (transformers 5.24), and what still differs.

    Returns ``(None, notes)`` for span and exact-count masking: the collator has no equivalent.
    """
    notes = [
        f"`seed={int(seed)}` (the sidebar's seed) makes the collator reproducible, but it will not reproduce "
        "MLM Lab's masks: both use a `torch.Generator` seeded the same way, but draw in a different order "
        "(the collator: a Bernoulli per position, then the replacement draws, then a random id per position), "
        "so the same seed gives other tokens. Compare rates over many sentences, not single masks.",
        "Random replacements: the collator draws any id of the vocabulary, [PAD], [CLS] and [MASK] included; "
        "MLM Lab draws only non-special ids.",
    ]
    if config.strategy == "span":
        return None, [
            "Span masking (SpanBERT) has no Hugging Face collator: `DataCollatorForLanguageModeling` draws each "
            "token (or each word) on its own and cannot fill a per-sentence budget with spans. The code above "
            "is MLM Lab's; a Hugging Face pipeline would need its own collator."
        ]
    if config.strategy == "exact_count":
        return None, [
            "Exact-count masking (Google BERT's create_pretraining_data) has no Hugging Face collator: "
            "`DataCollatorForLanguageModeling` draws each token on its own, so its count per sentence varies; "
            f"Google's selects exactly min({config.max_predictions}, max(1, round(n × {config.mlm_probability:g}))). "
            "The code above is MLM Lab's."
        ]
    whole_word = config.strategy == "whole_word"
    if whole_word:
        rates = (
            "    # whole_word_mask=True: transformers 5.24 turns every selected token into [MASK]; asked for\n"
            "    # less, it sets mask_replace_prob=1 and random_replace_prob=0 itself (with a warning).\n"
            "    mask_replace_prob=1.0,\n"
            "    random_replace_prob=0.0,\n"
        )
        features = (f"features = [tokenizer({sentence!r}, return_offsets_mapping=True,  # words come from the offsets\n"
                    f"                      return_special_tokens_mask=True, truncation=True, max_length={max_length})]\n")
    else:
        rates = (f"    mask_replace_prob={config.mask_replace_prob:g},\n"
                 f"    random_replace_prob={config.random_replace_prob:g},\n")
        features = (f"features = [tokenizer({sentence!r}, return_special_tokens_mask=True, truncation=True, "
                    f"max_length={max_length})]\n")
    code = (
        "from transformers import AutoTokenizer, DataCollatorForLanguageModeling\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({tokenizer_name!r})\n"
        "collator = DataCollatorForLanguageModeling(\n"
        "    tokenizer=tokenizer,\n"
        "    mlm=True,\n"
        + ("    whole_word_mask=True,\n" if whole_word else "")
        + f"    mlm_probability={config.mlm_probability:g},\n"
        + rates
        + f"    seed={int(seed)},  # reproducible, but not MLM Lab's masks (another order of draws)\n"
        ")\n"
        + features
        + "batch = collator(features)\n"
        "print(tokenizer.convert_ids_to_tokens(batch[\"input_ids\"][0]))\n"
        "print(batch[\"labels\"][0].tolist())  # -100 where nothing is predicted"
    )
    if whole_word:
        if config.mask_replace_prob < 1:
            notes.insert(0, f"Not 80/10/10: with `whole_word_mask=True` the collator replaces every selected token by "
                            f"[MASK] (transformers 5.24 overrides mask_replace_prob={config.mask_replace_prob:g} and "
                            f"random_replace_prob={config.random_replace_prob:g} with 1 and 0, and only warns). "
                            "MLM Lab keeps your shares for whole words.")
        notes.insert(1, "Words: the collator starts a new word wherever a token does not touch the one before it "
                        "(character offsets), so \"mat.\" or \"unbelievably,\" is one word there; MLM Lab uses the "
                        "tokenizer's word ids, where punctuation is a word of its own, as in BERT's pre-tokenizer "
                        "and Google's `##` rule. Without `return_offsets_mapping=True` the collator raises IndexError.")
    return code, notes


@dataclass(frozen=True)
class RateShares:
    """What one masking rule does to every 100 tokens: how many the model must predict, how many it sees corrupted."""

    predicted: float  # selected: the loss is taken there ([MASK], random and unchanged)
    corrupted: float  # the input changed: [MASK] or a random token
    masked: float  # [MASK]
    random: float
    unchanged: float  # predicted, but shown as they are


def rate_shares(rule: MaskingConfig) -> RateShares:
    """Per 100 tokens, the rule's prediction rate and corruption rate: Wettig et al. (2023, EACL, "Should You Mask
    15% in Masked Language Modeling?") separate the two effects of a higher masking rate in their abstract,
    more corruption (a harder task) and more predictions (which benefit optimization).

    >>> s = rate_shares(MaskingConfig())
    >>> round(s.predicted, 1), round(s.corrupted, 1), round(s.unchanged, 1)
    (15.0, 13.5, 1.5)
    """
    p = 100.0 * rule.mlm_probability
    return RateShares(p, p * (rule.mask_replace_prob + rule.random_replace_prob), p * rule.mask_replace_prob,
                      p * rule.random_replace_prob, p * rule.unchanged_prob)

# The rules the Masking page sets beside the learner's: BERT's, the 30% of MosaicBERT and ModernBERT, 40% (Wettig
# et al.'s BERT-large finding), and 40% without the 80/10/10 split (every selected token is [MASK]).
RATE_EXAMPLES = (
    ("BERT: 15%, 80/10/10", MaskingConfig()),
    ("MosaicBERT, ModernBERT: 30%", MaskingConfig(mlm_probability=0.3)),
    ("40%, 80/10/10", MaskingConfig(mlm_probability=0.4)),
    ("40%, all [MASK]", MaskingConfig(mlm_probability=0.4, mask_replace_prob=1.0, random_replace_prob=0.0)),
)


def rate_rows(config: MaskingConfig) -> list[tuple[str, RateShares]]:
    """The learner's rule first, then the examples: (label, shares per 100 tokens) for the picture."""
    rows = [(f"Yours: {config.mlm_probability:.0%}, {config.mask_replace_prob:.0%}/{config.random_replace_prob:.0%}/"
             f"{config.unchanged_prob:.0%}", rate_shares(config))]
    return rows + [(label, rate_shares(rule)) for label, rule in RATE_EXAMPLES]


def measured_rates(counts: dict[str, int], eligible: int) -> tuple[float, float] | None:
    """(prediction rate, corruption rate) in % of the eligible tokens of one masked sentence.

    >>> measured_rates({"MASK": 2, "RANDOM": 1, "UNCHANGED": 1}, 20)
    (20.0, 15.0)
    """
    if eligible <= 0:
        return None
    selected = counts.get("MASK", 0) + counts.get("RANDOM", 0) + counts.get("UNCHANGED", 0)
    return 100.0 * selected / eligible, 100.0 * (counts.get("MASK", 0) + counts.get("RANDOM", 0)) / eligible
