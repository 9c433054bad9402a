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
from typing import Sequence

import torch

from mlm_core import seeds
from mlm_core.grammar import PHENOMENA, PUBLISHED, GrammarReport, LabPair, PairScore, accuracy, score_pairs

__all__ = [
    "FIRST_PAIR",
    "ANCHORS",
    "Drawn",
    "draw_pair",
    "verdict",
    "token_rows",
    "lab_pairs_report",
    "phenomenon_rows",
    "default_model_blimp",
]

# The pair the Grammar page opens with: agreement across an intervening noun ("the cabinet" is singular).
FIRST_PAIR = ("The keys to the cabinet are on the table.", "The keys to the cabinet is on the table.")
# The published models drawn beside a measured one (BLiMP Table 3), weakest to strongest.
ANCHORS = ("5-gram", "LSTM", "GPT-2", "human")


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


def verdict(score: PairScore) -> str:
    """One sentence: which sentence the model prefers and by how much, in nats of PLL."""
    g, b = score.good.total, score.bad.total
    if score.prefers_good:
        return (f"The model prefers the **grammatical** sentence: PLL {g:.2f} vs {b:.2f} nats, a margin of "
                f"{score.margin:.2f} nats (e^{score.margin:.2f} ≈ {_ratio(score.margin)} times as likely, by this score).")
    return (f"The model prefers the **ungrammatical** sentence: PLL {b:.2f} vs {g:.2f} nats for the grammatical one, "
            f"a margin of {-score.margin:.2f} nats the wrong way.")


def _ratio(margin: float) -> str:
    value = math.exp(min(margin, 50.0))
    return f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


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


def phenomenon_rows(report: GrammarReport | None, label: str) -> list[dict]:
    """One row per phenomenon: the measured model (``label``, with its standard error) and the published anchors (%)."""
    rows = []
    for key, name in PHENOMENA.items():
        row = {"phenomenon": name, "key": key}
        if report is not None and key in report.by_phenomenon:
            acc, se, n = report.by_phenomenon[key]
            row.update({label: round(100 * acc, 1), f"{label} ± SE": round(100 * se, 1), "pairs": n})
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
