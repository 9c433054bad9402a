"""The Grammar page's view-model: one minimal pair scored token by token, a pair drawn by phenomenon, and a
model's accuracy per phenomenon beside the published figures.

>>> from mlm_core.grammar import LabPair
>>> pairs = [LabPair("subject_verb_agreement", "The dogs bark.", "The dogs barks.", "verb number")]
>>> draw_pair(pairs, "subject_verb_agreement", seed=0).good
'The dogs bark.'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from mlm_core import seeds
from mlm_core.classroom import Ask, Reveal
from mlm_core.grammar import PHENOMENA, PUBLISHED, GrammarReport, LabPair, PairScore, accuracy, score_pairs
from mlm_core.predict import PseudoLogLikelihood

__all__ = [
    "class_ask",
    "FIRST_PAIR",
    "ANCHORS",
    "PLL_ANCHORS",
    "OVERALL",
    "Drawn",
    "draw_pair",
    "verdict",
    "split_changed_words",
    "token_rows",
    "lab_pairs_report",
    "report_label",
    "phenomenon_rows",
    "default_model_blimp",
    "pair_source_note",
    "pll_line",
    "blimp_source",
    "lab_source",
    "markers_note",
    "phenomenon_table",
]

# The pair the Grammar page opens with: agreement across an intervening noun ("the cabinet" is singular).
FIRST_PAIR = ("The keys to the cabinet are on the table.", "The keys to the cabinet is on the table.")
# The published models drawn beside a measured one (BLiMP's results file), weakest to strongest.
ANCHORS = ("5-gram", "LSTM", "GPT-2", "human")
# Masked LMs scored by PLL as the page scores them; only their overall figures are published, so they stand in the
# chart's overall row alone (weakest to strongest).
PLL_ANCHORS = ("DistilBERT-base (PLL)", "BERT (PLL)", "RoBERTa-large (PLL)")
OVERALL = "overall"  # the key of phenomenon_rows' first row


@dataclass(frozen=True)
class Drawn:
    """A pair to show: its sentences, phenomenon, and where it came from (BLiMP's paradigm, or MLM Lab's note)."""

    phenomenon: str
    good: str
    bad: str
    source: str  # "BLiMP adjunct_island #17" or "MLM Lab's pairs: verb number"


def draw_pair(pairs: Sequence, phenomenon: str, seed: int, draw: int = 0) -> Drawn:
    """The ``draw``-th pair of ``phenomenon`` for ``seed`` (BLiMP pairs or ``LabPair``s), the same every time."""
    pool = [p for p in pairs if p.phenomenon == phenomenon]
    if not pool:
        raise ValueError(f"no pairs for {phenomenon!r}")
    g = seeds.generator(seed, "grammar_pair", draw)
    pick = pool[int(torch.randint(len(pool), (1,), generator=g))]
    if isinstance(pick, LabPair):
        return Drawn(pick.phenomenon, pick.good, pick.bad, f"MLM Lab's pairs ({pick.note})" if pick.note else "MLM Lab's pairs")
    return Drawn(pick.phenomenon, pick.good, pick.bad, f"BLiMP, {pick.uid} #{pick.pair_id}")


# Under this margin (e^0.5 ≈ 1.65 times as likely) the verdict calls a preference weak: a teaching line, not a
# statistical test (the first pair's 0.03 nats is a near-tie whichever way it falls).
WEAK_MARGIN = 0.5


def verdict(score: PairScore, escape: Callable[[str], str] = str, word_l2r: PairScore | None = None) -> str:
    """One sentence: which sentence the model prefers and by how much, in nats of PLL; the same tokens are a tie,
    and a margin under WEAK_MARGIN is said to be weak. Markdown: ``escape`` makes token text safe to show in it
    (the page's ``ui.markdown_text``). ``word_l2r``: the pair under PLL-word-l2r (``grammar.score_pairs``), said
    beside the note on split words: what the fix does to this pair.

    >>> from mlm_core.predict import PseudoLogLikelihood as P
    >>> same = P((1, 2), ("a", "b"), (-4.0, -5.0))
    >>> verdict(PairScore(same, same))
    'The two sentences are the same tokens to this model (PLL -9.00 nats each): there is nothing to prefer.'
    """
    g, b = score.good.total, score.bad.total
    unknown = sum(t in ("[UNK]", "<unk>") for pll in (score.good, score.bad) for t in pll.tokens)
    note = (f" ({unknown} token{'s' if unknown > 1 else ''} of the pair {'are' if unknown > 1 else 'is'} [UNK]: "
            "words this vocabulary cannot spell, which the model cannot tell apart.)") if unknown else ""
    split = split_changed_words(score)
    if split:  # "lo ##aves" against "loaf ##s": the pieces' scores are not about grammar
        note += (f" Where the sentences differ, words are split into pieces ({escape(' / '.join(split))}): "
                 "PLL scores each piece with the others visible, so a piece that the others give away scores high "
                 "whatever the grammar (Kauf & Ivanova 2023, \"A Better Way to Do Masked Language Model Scoring\", "
                 "ACL).")
        if word_l2r is not None:
            same_way = (word_l2r.margin > 0) == (score.margin > 0)
            note += (f" Their fix, PLL-word-l2r (a piece scored with its word's later pieces masked too), gives a "
                     f"margin of {word_l2r.margin:+.2f} nats for the grammatical sentence: "
                     + ("the same preference, so here the pieces are not what decides it." if same_way else
                        "the other preference, so here the pieces decided it."))
    if tuple(score.good.tokens) == tuple(score.bad.tokens):
        return (f"The two sentences are the same tokens to this model (PLL {g:.2f} nats each): there is nothing to "
                f"prefer.{note}")
    weak = abs(score.margin) < WEAK_MARGIN
    how = (f" That is a weak preference: under {WEAK_MARGIN} nats, less than {math.exp(WEAK_MARGIN):.2f} times as "
           "likely." if weak else "")
    if score.prefers_good:
        shown = round(score.margin, 2)  # the margin as printed: the ratio is e^(this), not e^(the unrounded one)
        return (f"The model prefers the **grammatical** sentence: PLL {g:.2f} vs {b:.2f} nats, a margin of "
                f"{shown:.2f} nats (e^{shown:.2f} ≈ {_ratio(shown)} times as likely, by this score)."
                + how + note)
    return (f"The model prefers the **ungrammatical** sentence: PLL {b:.2f} vs {g:.2f} nats for the grammatical one, "
            f"a margin of {-score.margin:.2f} nats the wrong way." + how + note)


def split_changed_words(score: PairScore) -> list[str]:
    """The words split into WordPiece pieces in the stretch where the two sentences differ (each sentence's).

    >>> from mlm_core.predict import PseudoLogLikelihood as P
    >>> def pll(*tokens): return P(tuple(range(len(tokens))), tokens, (-1.0,) * len(tokens))
    >>> split_changed_words(PairScore(pll("two", "lo", "##aves", "."), pll("two", "loaf", "##s", ".")))
    ['lo ##aves', 'loaf ##s']
    >>> split_changed_words(PairScore(pll("dogs", "bark", "."), pll("dogs", "barks", ".")))
    []
    >>> split_changed_words(PairScore(pll("who", "did", "you", "see", "lo", "##aves"),
    ...                               pll("who", "you", "did", "see", "lo", "##aves")))
    []
    >>> split_changed_words(PairScore(pll("a", "un", "##tidy", "b", "c"), pll("a", "c", "un", "##tidy", "b")))
    ['un ##tidy']
    """
    a, b = score.good.tokens, score.bad.tokens
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0  # tokens shared at the end, after the shared start
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    words = []
    for tokens in (a, b):
        lo, hi = start, len(tokens) - end
        while 0 < lo < len(tokens) and tokens[lo].startswith("##"):  # back to the word's first piece
            lo -= 1
        while hi < len(tokens) and tokens[hi].startswith("##"):  # on to its last
            hi += 1
        pieces: list[list[str]] = []
        for token in tokens[lo:hi]:  # the changed stretch as words: a "##" piece continues the word before it
            if token.startswith("##") and pieces:
                pieces[-1].append(token)
            else:
                pieces.append([token])
        words += [" ".join(word) for word in pieces if len(word) > 1]
    return list(dict.fromkeys(words))  # a split word that moved is named once


def _ratio(margin: float) -> str:
    """e^margin to two significant figures, for the margin as the verdict shows it (to 0.01 nats): a third figure, or
    the unrounded margin, disagreed with e^(the margin shown) (e^6.17 is 478.0; the unrounded 6.1664 gave "476.4").
    From a million on, as a power of ten.

    >>> [_ratio(m) for m in (0.04, 0.83, 2.3, 6.17, 8.51, 13.82, 14.0, 60.0, 2000.0)]
    ['1.0', '2.3', '10', '480', '5,000', '1.0 × 10^6', '1.2 × 10^6', '1.1 × 10^26', '3.9 × 10^868']
    """
    exponent = margin / math.log(10)  # log10 of the ratio: no overflow however large the margin
    if exponent < 6:
        value = float(f"{10 ** exponent:.2g}")
        if value < 1e6:
            return f"{value:.1f}" if value < 10 else f"{value:,.0f}"
    power = math.floor(exponent)
    mantissa = round(10 ** (exponent - power), 1)
    if mantissa >= 10:  # 9.96 rounds up to the next power
        mantissa, power = mantissa / 10, power + 1
    return f"{mantissa:.1f} × 10^{power}"


def token_rows(score: PairScore) -> list[dict]:
    """A table: every token of both sentences with log P(token | the rest) and its share of the PLL."""
    rows = []
    for name, pll in (("grammatical", score.good), ("ungrammatical", score.bad)):
        for i, (token, lp) in enumerate(zip(pll.tokens, pll.log_probs)):
            rows.append({"sentence": name, "position": i + 1, "token": token, "log P": round(lp, 3),
                         "share of PLL": round(lp / pll.total, 3) if pll.total else 0.0})
    return rows


def lab_pairs_report(model, tokenizer, pairs: Sequence[LabPair]) -> GrammarReport:
    """Accuracy on MLM Lab's own pairs, one 'paradigm' per phenomenon (its 8+ pairs)."""
    was_training = model.training
    model.eval()
    try:
        scores = score_pairs(model, tokenizer, [(p.good, p.bad) for p in pairs])
    finally:
        model.train(was_training)
    as_blimp = [_AsParadigm(p.phenomenon, p.phenomenon) for p in pairs]
    return accuracy(as_blimp, [s.prefers_good for s in scores])


@dataclass(frozen=True)
class _AsParadigm:
    uid: str
    phenomenon: str


def report_label(model_label: str, on_blimp: bool) -> str:
    """The name a measurement goes by in the chart and the table: the model and the pairs it was measured on.

    >>> report_label("default model", True), report_label("default model", False)
    ('default model on BLiMP', "default model on MLM Lab's pairs")
    """
    return f"{model_label} on BLiMP" if on_blimp else f"{model_label} on MLM Lab's pairs"


def phenomenon_rows(reports: Mapping[str, GrammarReport | None]) -> list[dict]:
    """An overall row, then one row per phenomenon: each measured report (keyed by its label: accuracy, ``± SE``
    and ``pairs`` columns of its own) and the published anchors (%). Only the overall row has the masked LMs scored
    by PLL (``PLL_ANCHORS``): the papers give no per-phenomenon figures for them.

    >>> rows = phenomenon_rows({})
    >>> rows[0]["phenomenon"], rows[0]["GPT-2"], rows[0]["RoBERTa-large (PLL)"], "RoBERTa-large (PLL)" in rows[1]
    ('overall', 83.0, 86.5, False)
    """
    reports = {label: report for label, report in reports.items() if report is not None}
    overall = {"phenomenon": OVERALL, "key": OVERALL}
    for label, report in reports.items():
        overall.update({label: round(100 * report.overall, 1), f"{label} ± SE": round(100 * report.overall_se, 1),
                        f"{label} pairs": report.n_pairs})
    overall.update({anchor: PUBLISHED[anchor]["overall"] for anchor in ANCHORS + PLL_ANCHORS})
    rows = [overall]
    for key, name in PHENOMENA.items():
        row = {"phenomenon": name, "key": key}
        for label, report in reports.items():
            if key in report.by_phenomenon:
                acc, se, n = report.by_phenomenon[key]
                row.update({label: round(100 * acc, 1), f"{label} ± SE": round(100 * se, 1), f"{label} pairs": n})
        for anchor in ANCHORS:
            row[anchor] = PUBLISHED[anchor]["by_phenomenon"][key]
        rows.append(row)
    return rows


def default_model_blimp(record: dict | None) -> GrammarReport | None:
    """The BLiMP report a default-model build measured (``build.json``'s final_metrics["blimp"]), or None."""
    blimp = ((record or {}).get("final_metrics") or {}).get("blimp")
    if not blimp:
        return None
    return GrammarReport(
        n_pairs=blimp["n_pairs"], overall=blimp["overall"], overall_se=blimp["overall_se"],
        by_phenomenon={k: (v["accuracy"], v["se"], v["n"]) for k, v in blimp["by_phenomenon"].items()},
        by_paradigm={k: (v["accuracy"], v["n"]) for k, v in blimp.get("by_paradigm", {}).items()},
    )


# --------------------------------------------------------------------------- the page's sentences and tables
LAB_PAIRS_SOURCE = ("MLM Lab’s own pairs (assets/grammar_pairs.tsv, written for this app in the style of BLiMP’s "
                    "phenomena; BLiMP itself is not bundled: see README)")


def pair_source_note(from_blimp: bool, source: str | None = None) -> str:
    """Where the page's pairs are drawn from (BLiMP or MLM Lab's own), and where the shown one came from (``source``,
    already escaped for markdown by the page: it may come from a data file)."""
    text = f"Pairs are drawn from {'BLiMP (MLMLAB_BLIMP_DIR)' if from_blimp else LAB_PAIRS_SOURCE}."
    return text + (f" This one: {source}." if source else "")


def pll_line(name: str, pll: PseudoLogLikelihood) -> str:
    """The line above a sentence's chips: its PLL, over how many tokens, and how to read the colours (markdown).

    >>> from mlm_core.predict import PseudoLogLikelihood
    >>> pll_line("Grammatical", PseudoLogLikelihood(positions=(1, 2), tokens=("the", "dog"), log_probs=(-1.0, -2.5)))
    '**Grammatical**: PLL -3.50 nats over 2 tokens (darker red = less likely)'
    """
    return f"**{name}**: PLL {pll.total:.2f} nats over {len(pll.tokens)} tokens (darker red = less likely)"


def blimp_source(report: GrammarReport) -> str:
    """What the default model's BLiMP figures are: how many pairs, when measured, overall accuracy ± SE."""
    return (f"BLiMP, {report.n_pairs:,} pairs (a fixed sample of every paradigm), measured when the default "
            f"model was built (assets/default_mlm/build.json): overall {100 * report.overall:.1f}% "
            f"± {100 * report.overall_se:.1f}")


def lab_source(report: GrammarReport, chosen_on: bool = False) -> str:
    """What a measurement on MLM Lab's own pairs is (not BLiMP), overall accuracy ± SE; ``chosen_on``: the model is
    the bundled default, whose build chose its checkpoint with these pairs (a dev set: the number flatters it)."""
    dev = (" — the pairs the default model's build chose its checkpoint with, so this number flatters it: BLiMP "
           "above is the fair one") if chosen_on else ""
    return (f"MLM Lab's {report.n_pairs} pairs (not BLiMP: the markers are BLiMP's): "
            f"overall {100 * report.overall:.1f}% ± {100 * report.overall_se:.1f}{dev}")


def markers_note() -> str:
    """What the markers are: BLiMP's published results overall and three masked LMs by PLL."""
    return ("Markers: BLiMP's models by forced choice on all 67,000 pairs, from its maintainers' results file "
            "(revised in 2021: the TACL version's Table 3 mis-reported some results), and human as individual "
            "annotators' agreement (about 100 annotations of each paradigm, the paper's section 3.4): overall "
            + ", ".join(f"{name} {PUBLISHED[name]['overall']}%" for name in ANCHORS)
            + f" (the table's Transformer-XL, {PUBLISHED['Transformer-XL']['overall']}%, is not drawn: it would sit on "
            "the LSTM). Masked LMs by PLL, as this page scores (overall row only: no per-phenomenon figures are "
            "published): "
            f"RoBERTa-large {PUBLISHED['RoBERTa-large (PLL)']['overall']}% (Salazar et al. 2020, their repository "
            f"github.com/awslabs/mlm-scoring), DistilBERT-base {PUBLISHED['DistilBERT-base (PLL)']['overall']}% (the "
            f"same repository, after the paper), BERT about {PUBLISHED['BERT (PLL)']['overall']:.0f}% (a rounded "
            "figure from the paper's first author, the repository's issue #2).")


def phenomenon_table(rows: Sequence[dict], labels: Sequence[str]) -> list[dict]:
    """``phenomenon_rows`` as the page's table: each measurement in ``labels`` as one column, "69.3 ± 0.9 (270)"
    (accuracy % ± SE, pairs), then BLiMP's Table 3 models; without the overall-only PLL markers (the caption gives
    them). One column a measurement keeps the table inside a presenter's screen (three each were 884 px in 820).

    >>> report = GrammarReport(n_pairs=96, overall=0.8333, overall_se=0.038, by_phenomenon={}, by_paradigm={})
    >>> row = phenomenon_table(phenomenon_rows({"m": report}), ["m"])[0]
    >>> row["m (± SE, pairs)"], row["GPT-2"], "RoBERTa-large (PLL)" in row
    ('83.3 ± 3.8 (96)', 83.0, False)
    """
    table = []
    for r in rows:
        row = {"phenomenon": r["phenomenon"]}
        for label in labels:
            row[f"{label} (± SE, pairs)"] = (f"{r[label]:.1f} ± {r[f'{label} ± SE']:.1f} ({r[f'{label} pairs']:,})"
                                           if label in r else None)
        row.update({anchor: r[anchor] for anchor in ANCHORS})
        table.append(row)
    return table


def class_ask(score: PairScore, seed: int) -> Ask:
    """"Which sentence does the model prefer?", A or B: the pair in an order drawn from the seed (A is not always the
    grammatical one), and, for the reveal, the model's pick and its PLL margin.

    >>> from mlm_core.predict import PseudoLogLikelihood as P
    >>> s = PairScore(P((1, 2, 3), ("the", "dogs", "bark"), (-1.0, -2.0, -3.0)),
    ...               P((1, 2, 3), ("the", "dogs", "barks"), (-1.0, -2.0, -5.0)))
    >>> [class_ask(s, seed).reveal.model[0][0] for seed in range(4)]  # the model's pick, wherever it stands
    ['A', 'B', 'B', 'A']
    """
    flip = bool(torch.randint(2, (1,), generator=seeds.generator(seed, "class_pair")).item())
    first, second = (score.bad, score.good) if flip else (score.good, score.bad)
    words = [" ".join(pll.tokens).replace(" ##", "") for pll in (first, second)]
    if score.margin == 0:
        pick, note = "", f"both sentences score the same PLL ({first.total:.2f} nats): it prefers neither."
    else:
        pick = "A" if (first.total > second.total) else "B"
        grammatical = "the grammatical one" if score.prefers_good else "the ungrammatical one"
        note = (f"it prefers {pick}, {grammatical}, by {abs(score.margin):.2f} nats of pseudo-log-likelihood "
                f"(A: {first.total:.2f}, B: {second.total:.2f}).")
    grammatical = "B" if flip else "A"
    return Ask("choice", "Which sentence does the model prefer, A or B?", context=f"A: {words[0]}   B: {words[1]}",
               choices=("A", "B"), reveal=Reveal(((pick, 1.0),) if pick else (), truth=pick,
                                                 note=note + f" The grammatical sentence is {grammatical}."))
