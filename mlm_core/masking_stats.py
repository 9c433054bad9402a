"""Masking, explained: per-token traces, convergence of the rates, and the HF collator equivalent.

The Masking page reads these: they turn a ``MaskingResult`` into the sentences and tables a learner
steps through, and mask many sentences to show the 15% and 80/10/10 emerging as N grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from scipy import stats

from mlm_core.data import Encoded, encode, mask_batch
from mlm_core.masking import Decision, MaskingConfig, MaskingResult


def token_trace(tokens: list[str], encoded_row: dict, result_row: dict, config: MaskingConfig, id_to_token) -> list[dict]:
    """One row per token: the decision, the draws behind it and the rule applied, in words.

    ``encoded_row`` holds 1-D tensors ``input_ids``, ``special_tokens_mask`` for one sentence,
    ``result_row`` the same sentence's ``input_ids``, ``labels``, ``decisions`` and ``draws``.
    """
    rows = []
    draws = result_row["draws"]
    p, m, r = config.mlm_probability, config.mask_replace_prob, config.random_given_not_mask
    for i, token in enumerate(tokens):
        decision = Decision(int(result_row["decisions"][i]))
        special = bool(encoded_row["special_tokens_mask"][i])
        u = _draw(draws, "select", i)
        v = _draw(draws, "replace", i)
        w = _draw(draws, "random", i)
        shown = id_to_token(int(result_row["input_ids"][i]))
        if special:
            rule = "special token: never selected"
        elif decision == Decision.NOT_SELECTED:
            rule = _selection_rule(config, u, selected=False)
        else:
            rule = _selection_rule(config, u, selected=True)
            if decision == Decision.MASK:
                rule += f"; v = {v:.3f} < {m:g} → [MASK]"
            elif decision == Decision.RANDOM:
                rule += f"; v = {v:.3f} ≥ {m:g} → not [MASK]; w = {w:.3f} < {r:.3g} → random: {shown}"
            else:
                rule += f"; v = {v:.3f} ≥ {m:g} → not [MASK]; w = {w:.3f} ≥ {r:.3g} → unchanged"
        rows.append(
            {
                "position": i,
                "token": token,
                "decision": decision.name,
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


def _selection_rule(config: MaskingConfig, u, selected: bool) -> str:
    p = config.mlm_probability
    if config.strategy == "exact_count":
        return (
            f"u = {u:.3f} ranks among the lowest draws → selected (exact count)"
            if selected
            else f"u = {u:.3f} not among the lowest draws → not selected (exact count)"
        )
    if config.strategy == "span":
        return "inside a sampled span → selected" if selected else "outside every span → not selected"
    unit = "word's u" if config.strategy == "whole_word" else "u"
    return f"{unit} = {u:.3f} < {p:g} → selected" if selected else f"{unit} = {u:.3f} ≥ {p:g} → not selected"


def running_counts(decisions: torch.Tensor, upto: int) -> dict[str, int]:
    """Decision counts over the first ``upto`` tokens of one sentence (for the step-through)."""
    part = decisions[:upto]
    return {d.name: int((part == d).sum()) for d in Decision}


@dataclass
class MaskingStatistics:
    """Empirical rates as more and more sentences are masked."""

    convergence: list[dict]  # one row per checkpoint: tokens, selection rate, shares of the split
    per_sentence: list[int]  # masked tokens per sentence (zeros included)
    split_counts: dict[str, int]  # MASK / RANDOM / UNCHANGED counts over everything
    eligible: int
    selected: int
    chi2: float
    p_value: float  # chi-square goodness of fit of the split to the configured 80/10/10
    selection_z: float  # (rate - p) / standard error


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
    generator = torch.Generator().manual_seed(seed)
    eligible = selected = 0
    split = {Decision.MASK: 0, Decision.RANDOM: 0, Decision.UNCHANGED: 0}
    convergence, per_sentence = [], []
    next_checkpoint = 100
    start = 0
    n = encoded.input_ids.shape[0]
    while eligible < target_tokens:
        rows = torch.arange(start, start + batch_size) % n
        start += batch_size
        part = Encoded(
            encoded.input_ids[rows],
            encoded.attention_mask[rows],
            encoded.special_tokens_mask[rows],
            encoded.word_ids[rows],
            [],
            [],
        )
        result = mask_batch(tokenizer, part, config, generator, trace=False)
        row_eligible = (part.special_tokens_mask == 0).sum(1)
        row_selected = result.selected.sum(1)
        for e, s, dec in zip(row_eligible.tolist(), row_selected.tolist(), result.decisions):
            eligible += e
            selected += s
            per_sentence.append(s)
            for d in split:
                split[d] += int((dec == d).sum())
            if eligible >= next_checkpoint or eligible >= target_tokens:
                convergence.append(_checkpoint(eligible, selected, split, len(per_sentence)))
                while next_checkpoint <= eligible:
                    next_checkpoint = int(next_checkpoint * 1.25) + 1
            if eligible >= target_tokens:
                break
    chi2, p_value = split_chisquare(split, config)
    se = (config.mlm_probability * (1 - config.mlm_probability) / max(eligible, 1)) ** 0.5
    z = (selected / max(eligible, 1) - config.mlm_probability) / se if se > 0 else 0.0
    return MaskingStatistics(
        convergence, per_sentence, {d.name: c for d, c in split.items()}, eligible, selected, chi2, p_value, z
    )


def _checkpoint(eligible, selected, split, sentences) -> dict:
    total = max(sum(split.values()), 1)
    return {
        "sentences": sentences,
        "eligible_tokens": eligible,
        "selection_rate": selected / eligible,
        "mask_share": split[Decision.MASK] / total,
        "random_share": split[Decision.RANDOM] / total,
        "unchanged_share": split[Decision.UNCHANGED] / total,
    }


def split_chisquare(split: dict, config: MaskingConfig) -> tuple[float, float]:
    """Chi-square goodness of fit of the MASK/RANDOM/UNCHANGED counts to the configured shares.

    Categories with an expected share of 0 are left out (their count must then be 0).
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


def collator_snippet(config: MaskingConfig, tokenizer_name: str = "bert-base-uncased") -> tuple[str, list[str]]:
    """A ready-to-paste ``DataCollatorForLanguageModeling`` call and where MLM Lab differs from it."""
    whole_word = config.strategy == "whole_word"
    code = (
        "from transformers import AutoTokenizer, DataCollatorForLanguageModeling\n\n"
        f'tokenizer = AutoTokenizer.from_pretrained("{tokenizer_name}")\n'
        "collator = DataCollatorForLanguageModeling(\n"
        "    tokenizer=tokenizer,\n"
        "    mlm=True,\n"
        f"    mlm_probability={config.mlm_probability:g},\n"
        f"    mask_replace_prob={config.mask_replace_prob:g},\n"
        f"    random_replace_prob={config.random_replace_prob:g},\n"
        + ("    whole_word_mask=True,\n" if whole_word else "")
        + "    seed=0,\n"
        ")\n"
        'batch = collator([tokenizer("The cat sat on the mat.")])'
    )
    notes = [
        "Random replacements: the collator may draw any id of the vocabulary, [PAD], [CLS] and [MASK] "
        "included; MLM Lab draws only non-special ids.",
        "Randomness: the collator uses its own seed or the global RNG; MLM Lab takes a torch.Generator "
        "and records every draw.",
    ]
    if config.strategy == "span":
        notes.append("Span masking (SpanBERT) has no collator equivalent; the call above masks single tokens.")
    if config.strategy == "exact_count":
        notes.append(
            "Exact count (Google BERT's create_pretraining_data) selects exactly "
            f"min({config.max_predictions}, max(1, round(n × {config.mlm_probability:g}))) tokens per sentence; "
            "the collator selects each token independently, so the count varies."
        )
    if whole_word:
        notes.append("whole_word_mask needs a transformers version that has it (5.x); older ones had "
                     "a separate DataCollatorForWholeWordMask.")
    return code, notes
