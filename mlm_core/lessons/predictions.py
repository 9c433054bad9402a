"""The Predictions page's view-model: the sentence it scores (``MaskedExample``), the word it hides first, the
[MASK] / random / unchanged comparison on many sentences, and the rows, numbers and sentences it shows.

The flow it shows is ``mlm_core.predict``: guesses, ranks, the pseudo-log-likelihood, filling several masks.

>>> from mlm_core.bundled import load_default_tokenizer
>>> from mlm_core.data import encode
>>> tokenizer = load_default_tokenizer()
>>> encoded = encode(tokenizer, "The cat sat on the mat.")
>>> example = clicked_example(tokenizer, encoded, [2], mask_share=1.0, random_share=0.0, seed=0)
>>> example.seen_tokens(tokenizer)[:4], example.names[:4]
(['[CLS]', 'the', '[MASK]', 'sat'], ['SPECIAL', 'NOT_SELECTED', 'MASK', 'NOT_SELECTED'])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from mlm_core import seeds
from mlm_core.classroom import Ask, Reveal, model_words, word_of
from mlm_core.data import Encoded, MaskedSentence, encode, mask_batch, mask_positions
from mlm_core.formatting import probability_text
from mlm_core.masking import DECISION_WORDS, SELECTED_DECISIONS, Decision, MaskingConfig, decision_names, decision_word
from mlm_core.predict import (FILL_MODES, FillResult, Predictions, PseudoLogLikelihood, TokenPrediction, fill_masks,
                              predict_masked)

__all__ = [
    "MaskedExample", "masking_page_example", "clicked_example", "default_blank", "guesses", "guess_metrics",
    "one_masking_note", "position_rows", "pll_metrics", "pll_rows", "COMPARE_MAX_TOKENS", "compare_decisions",
    "summarize_by_decision", "decision_comparison_text", "decision_table", "FILL_LABELS", "fill_all", "fill_rows",
    "fill_note", "typed_blanks_note", "class_ask",
]


# --------------------------------------------------------------------------- the sentence the page scores
@dataclass(frozen=True)
class MaskedExample:
    """One masked sentence, as the Predictions page scores it: what the model sees and what it should predict.

    Every tensor is (T,), the sentence's own tokens and nothing else. ``drawn``: the positions were
    selected by the Masking page's random draw (its rule and seed); otherwise the learner clicked them.
    """

    tokens: list[str]
    original_ids: torch.Tensor  # the sentence as it was
    input_ids: torch.Tensor  # what the model sees: [MASK], a random token or the original at each selected position
    labels: torch.Tensor  # the original id where selected, IGNORE_INDEX elsewhere
    decisions: torch.Tensor  # Decision codes
    attention_mask: torch.Tensor
    special_tokens_mask: torch.Tensor
    drawn: bool

    @property
    def names(self) -> list[str]:
        """Each token's decision by name (``masking.decision_names``): what the chips are coloured by."""
        return decision_names(self.decisions, special_tokens_mask=self.special_tokens_mask, length=len(self.tokens))

    def seen_tokens(self, tokenizer) -> list[str]:
        """The tokens the model sees."""
        return tokenizer.convert_ids_to_tokens(self.input_ids.tolist())[: len(self.tokens)]


def masking_page_example(masked: MaskedSentence) -> MaskedExample:
    """The Masking page's masks (``data.mask_sentence``: its sentence, rule and seed), as the page scores them."""
    encoded, result = masked.encoded, masked.result
    return MaskedExample(encoded.tokens[0], encoded.input_ids[0], result.input_ids[0], result.labels[0],
                         result.decisions[0], encoded.attention_mask[0], encoded.special_tokens_mask[0], drawn=True)


def clicked_example(tokenizer, encoded: Encoded, positions: Sequence[int], *, mask_share: float, random_share: float,
                    seed: int) -> MaskedExample:
    """The tokens a learner clicked, corrupted by ``data.mask_positions`` with the given shares ([MASK], random; the
    rest unchanged), drawn from the sidebar's seed."""
    ids = encoded.input_ids[0]
    masked = mask_positions(tokenizer, ids, positions, mask_replace_prob=mask_share, random_replace_prob=random_share,
                            generator=seeds.generator(seed))
    return MaskedExample(encoded.tokens[0], ids, masked.input_ids, masked.labels, masked.decisions,
                         encoded.attention_mask[0], encoded.special_tokens_mask[0], drawn=False)


# Function words: hiding one of them teaches little, so a new sentence starts from another word.
FUNCTION_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from into onto over under about as is are was were be been "
    "being am do does did have has had it its this that these those there their they them he she his her him we "
    "our us you your i my me not no so than then too very can could will would shall should may might must "
    "while when where which who whom what how up out off down".split()
)


def blank_options(tokens: Sequence[str], word_ids: Sequence[int], unk_token: str | None = "[UNK]") -> list[int]:
    """The positions a learner can hide: every word piece but [UNK], whose word the vocabulary cannot spell (the
    model would be asked to guess [UNK] itself). ``word_ids``: -1 on special tokens (``data.Encoded.word_ids``).

    >>> blank_options(["[CLS]", "[UNK]", "cat", "[SEP]"], [-1, 0, 1, -1])
    [2]
    """
    return [i for i, w in enumerate(word_ids) if w >= 0 and tokens[i] != unk_token]


def default_blank(tokens: Sequence[str], word_ids: Sequence[int], unk_token: str | None = "[UNK]") -> int | None:
    """The position to hide first in a new sentence: a content word, never punctuation nor [UNK].

    The whole word (one piece) of letters, not a function word, nearest the middle of the sentence
    (ties: the longer word, then the leftmost); failing that any word of letters, then any word
    piece (``blank_options``). None when there is none (a sentence of emoji is all [UNK]).

    >>> default_blank(["[CLS]", "the", "cat", "sat", ".", "[SEP]"], [-1, 0, 1, 2, 3, -1])
    2
    >>> default_blank(["[CLS]", "[UNK]", "[SEP]"], [-1, 0, -1]) is None
    True
    """
    pieces: dict[int, int] = {}
    for w in word_ids:
        if w >= 0:
            pieces[w] = pieces.get(w, 0) + 1
    eligible = blank_options(tokens, word_ids, unk_token)
    if not eligible:
        return None
    middle = (eligible[0] + eligible[-1]) / 2

    def bare(token: str) -> str:
        return token[1:] if token[:1] in ("Ġ", "▁") and len(token) > 1 else token

    def letters(i: int) -> bool:
        return bare(tokens[i]).isalpha() and not tokens[i].startswith("##")

    tiers = (
        [i for i in eligible if pieces[word_ids[i]] == 1 and letters(i) and len(bare(tokens[i])) > 1
         and bare(tokens[i]).lower() not in FUNCTION_WORDS],
        [i for i in eligible if letters(i)],
        eligible,
    )
    for tier in tiers:
        if tier:
            return min(tier, key=lambda i: (abs(i - middle), -len(tokens[i]), i))
    return None


def typed_blanks_note(n: int, mask_code: str) -> str:
    """What the page says about blanks a learner typed (``mask_code``: the mask token, as markdown code)."""
    return (f"Your sentence has {n} typed blank{'s' if n > 1 else ''} ({mask_code}): the model predicts "
            f"{'them' if n > 1 else 'it'}. There is no true token to score, so no loss here: to see the loss, type "
            "the whole sentence and click words to hide.")


# --------------------------------------------------------------------------- its guesses, position by position
def guesses(model, tokenizer, example: MaskedExample, k: int) -> Predictions:
    """``predict.predict_masked`` at the example's selected positions: top-k, p(true token), rank and loss."""
    return predict_masked(model, tokenizer, example.input_ids, example.attention_mask, example.labels, k=k,
                          decisions=example.decisions)


def guess_metrics(predictions: Predictions) -> list[tuple[str, str, str | None]]:
    """The three numbers under the guesses, as (label, value, help)."""
    found = predictions.positions
    return [
        ("MLM loss of this sentence", f"{predictions.mean_loss:.3f}",
         "Mean of −log p(true token) over the selected positions: what training minimises. It depends on which "
         "tokens this one masking selected and how it corrupted them."),
        ("top-1 correct", f"{sum(p.correct for p in found)} of {len(found)}", None),
        # the chart's format: a tiny mean reads 6.7e-05, not "0.0%"
        ("mean p(true token)", probability_text(sum(p.true_prob for p in found) / len(found)), None),
    ]


def one_masking_note(example: MaskedExample, n: int) -> str:
    """Why the loss above is one random masking's, not a score of the sentence."""
    how = "the Masking page's random draw selected" if example.drawn else "you clicked"
    return (f"This loss comes from **one masking** of the sentence — the {n} position{'s' if n != 1 else ''} {how}: "
            "another seed, or other tokens, give another value. It is one random masking's loss, not a score of the "
            "sentence: for that, see the pseudo-log-likelihood below.")


def position_rows(predictions: Predictions) -> list[dict[str, Any]]:
    """Every position as a table row, its decision in the legend's words."""
    rows = predictions.records()
    for row in rows:
        row["decision"] = DECISION_WORDS.get(row["decision"], row["decision"])
    return rows


def class_ask(example: MaskedExample, predictions: Predictions, tokenizer) -> Ask | None:
    """"What will the model guess here?" at the first [MASK] the model sees (else the first selected position):
    the sentence as the model sees it, and, for the reveal, its top guesses and the hidden word.

    >>> from mlm_core.models import load_masked_lm
    >>> model, tokenizer = load_masked_lm()  # the bundled default
    >>> example = clicked_example(tokenizer, encode(tokenizer, "The cat sat on the mat."), [6], mask_share=1.0,
    ...                           random_share=0.0, seed=0)
    >>> ask = class_ask(example, guesses(model, tokenizer, example, 5), tokenizer)
    >>> ask.context, ask.reveal.truth, len(ask.reveal.model)
    ('the cat sat on the [MASK].', 'mat', 5)
    """
    found = predictions.positions
    if not found:
        return None
    asked = next((p for p in found if p.decision == Decision.MASK and p.row == 0), found[0])
    seen = example.seen_tokens(tokenizer)
    special = example.special_tokens_mask[: len(seen)].tolist()
    shown = [tokenizer.mask_token if i == asked.position else t for i, t in enumerate(seen) if not special[i]]
    context = tokenizer.convert_tokens_to_string(shown).replace(" ##", "")
    truth = word_of(tokenizer, asked.true_token)
    rank = f"rank {asked.true_rank:,}" if asked.true_rank > 1 else "its first guess"
    return Ask("word", "What will the model guess at [MASK]? One word.", context=context, tokenizer=tokenizer,
               reveal=Reveal(model_words(tokenizer, asked.top_tokens, asked.top_probs), truth=truth,
                             note=f"the hidden word {truth!r} is {rank}, at p = {probability_text(asked.true_prob)}."))


# --------------------------------------------------------------------------- a score without a draw
def pll_metrics(score: PseudoLogLikelihood) -> list[tuple[str, str, str | None]]:
    """The pseudo-log-likelihood's three numbers, as (label, value, help)."""
    return [
        ("PLL (nats)", f"{score.total:.2f}", "Σ log p(true token), each token masked alone."),
        ("−PLL / N", f"{score.mean_loss:.3f}", f"N = {len(score.positions)} tokens ([CLS]/[SEP] left out)."),
        ("pseudo-perplexity", f"{score.pseudo_perplexity:.1f}", "exp(−PLL / N)."),
    ]


def pll_rows(score: PseudoLogLikelihood) -> dict[str, list]:
    """Every token's log p, masked alone, as table columns."""
    return {"position": list(score.positions), "token": list(score.tokens),
            "log p (token masked alone)": [round(v, 3) for v in score.log_probs]}


# --------------------------------------------------------------------------- [MASK] vs random vs unchanged
COMPARE_MAX_TOKENS = 64  # each corpus sentence, cut to this many tokens


def compare_decisions(model, tokenizer, sentences: Sequence[str], rule: MaskingConfig, seed: int) -> Predictions:
    """Many sentences masked with the learner's rule (``data.mask_batch``, the sidebar's seed), and the model's first
    guess at every selected position, each tagged with its decision."""
    batch = encode(tokenizer, list(sentences), max_length=COMPARE_MAX_TOKENS)
    masked = mask_batch(tokenizer, batch, rule, seeds.generator(seed), trace=False)
    return predict_masked(model, tokenizer, masked.input_ids, batch.attention_mask, masked.labels, k=1,
                          decisions=masked.decisions)


def summarize_by_decision(predictions: Predictions) -> list[dict[str, Any]]:
    """Per decision (MASK, RANDOM, UNCHANGED): count, mean p(true), its standard error, top-1 accuracy, mean loss."""
    groups: dict[Decision, list[TokenPrediction]] = {}
    for p in predictions.positions:
        if p.decision is not None and p.decision != Decision.NOT_SELECTED:
            groups.setdefault(p.decision, []).append(p)
    summary = []
    for decision in (Decision[name] for name in SELECTED_DECISIONS):
        items = groups.get(decision, [])
        n = len(items)
        mean = sum(p.true_prob for p in items) / n if n else float("nan")
        # standard error of the mean over positions (positions of one sentence are not independent,
        # so this is a lower bound on the real uncertainty)
        sem = math.sqrt(sum((p.true_prob - mean) ** 2 for p in items) / (n - 1) / n) if n > 1 else float("nan")
        summary.append({
            "decision": decision.name,
            "count": n,
            "mean_true_prob": mean,
            "sem_true_prob": sem,
            "top1_accuracy": sum(p.correct for p in items) / n if n else float("nan"),
            "mean_loss": sum(p.loss for p in items) / n if n else float("nan"),
        })
    return summary


def decision_comparison_text(summary: Sequence[dict[str, Any]], n_sentences: int) -> str:
    """What a ``summarize_by_decision`` table shows, in one paragraph, with its uncertainty.

    Two groups are called different only when their means are more than two standard errors of the
    difference apart; otherwise the text says the sample cannot tell them apart.
    """
    rows = [r for r in summary if r["count"] > 0]
    if not rows:
        return "No selected positions to compare."

    def name(row) -> str:
        return decision_word(row["decision"], noun=True)

    parts = [f"{name(r)} {r['mean_true_prob']:.2f} ± {r['sem_true_prob']:.2f} (n = {r['count']})"
             if r["count"] > 1 else f"{name(r)} {r['mean_true_prob']:.2f} (n = 1)" for r in rows]
    ranked = sorted(rows, key=lambda r: -r["mean_true_prob"])
    findings = []
    for a, b in zip(ranked, ranked[1:]):
        se = math.sqrt((a["sem_true_prob"] if a["count"] > 1 else float("inf")) ** 2
                       + (b["sem_true_prob"] if b["count"] > 1 else float("inf")) ** 2)
        gap = a["mean_true_prob"] - b["mean_true_prob"]
        if math.isfinite(se) and gap > 2 * se:
            findings.append(f"the model is surer at **{name(a)}** than at **{name(b)}** "
                            f"positions (difference {gap:.2f}, more than twice its standard error {se:.2f})")
        else:
            findings.append(f"**{name(a)}** and **{name(b)}** cannot be told apart on "
                            f"this sample (difference {gap:.2f}, standard error {se:.2f})" if math.isfinite(se) else
                            f"**{name(a)}** and **{name(b)}** cannot be compared "
                            "(one of them has a single position)")
    return (f"Mean p(true token) ± standard error over the selected positions of {n_sentences} sentences: "
            + ", ".join(parts) + ". So " + "; ".join(findings) + ".")


SUMMARY_COLUMNS = {"decision": "what masking did", "count": "positions", "mean_true_prob": "mean p(true token)",
                   "sem_true_prob": "± standard error", "top1_accuracy": "top-1 correct", "mean_loss": "mean loss"}


def decision_table(summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary as table rows: the legend's words, not enum names, numbers to 3 decimals."""
    return [{SUMMARY_COLUMNS[key]: DECISION_WORDS[value] if key == "decision" else
             (round(value, 3) if isinstance(value, float) else value) for key, value in row.items()} for row in summary]


# --------------------------------------------------------------------------- several masks at once
FILL_LABELS = {
    "independent": "independent (one pass)",
    "easy_first": "greedy easy-first (one at a time)",
    "mask_predict": "Mask-Predict (re-mask the least sure)",
}


def fill_all(model, tokenizer, input_ids, attention_mask, positions: Sequence[int], *, iterations: int,
             k: int = 3) -> dict[str, FillResult]:
    """The same positions filled each way (``predict.fill_masks``: independent, easy-first, Mask-Predict)."""
    return {mode: fill_masks(model, tokenizer, input_ids, attention_mask, positions, mode=mode, k=k,
                             iterations=iterations) for mode in FILL_MODES}


def fill_note(n: int, limit: int) -> str:
    """Why a fill can differ from the guess above: every scored position starts as [MASK]."""
    note = (f"Here the {n} position{'s' if n != 1 else ''} scored above ([MASK], random and unchanged alike) all "
            "start as [MASK] in the original sentence, so an unchanged or random token is hidden too and its fill can "
            "differ from the guess above.")
    return note + (f" Only the first {limit} positions are filled." if n == limit else "")


def fill_rows(result: FillResult, tokens: Sequence[str]) -> list[dict[str, Any]]:
    """A fill's steps as table rows; Mask-Predict's iterations, with every position's token and p after each."""
    if result.mode == "mask_predict":
        targets = sorted(set(result.order))
        return [{"iteration": t, "predicted again": ", ".join(str(p) for p in done),
                 **{f"{p}: {tokens[p]}": f"{tok} {q:.2f}" for p, tok, q in zip(targets, toks, probs)}}
                for t, (done, toks, probs) in enumerate(zip(result.rounds, result.round_tokens, result.round_probs))]
    return [{"step": n + 1, "position": s.position, "original": tokens[s.position], "chose": s.token,
             "p": round(s.prob, 4), "other candidates": ", ".join(f"{t} {q:.2f}" for t, q in s.candidates[1:])}
            for n, s in enumerate(result.steps)]


def fill_title(result: FillResult) -> str:
    """The line above a filled sentence (markdown)."""
    passes = len(result.rounds)
    return (f"**{FILL_LABELS[result.mode]}** · total log p = {result.log_prob:.2f} · "
            f"{passes} model pass{'es' if passes != 1 else ''}")


def filled_chips(result: FillResult, tokens: Sequence[str]) -> tuple[list[str], list[str], list[str | None]]:
    """A filled sentence as chips: (tokens, decision names: the filled ones as MASK, originals under them)."""
    filled = set(result.order)
    n = len(tokens)
    return (list(result.tokens[:n]), ["MASK" if i in filled else "NOT_SELECTED" for i in range(n)],
            [tokens[i] if i in filled else None for i in range(n)])
