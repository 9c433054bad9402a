"""What a masked LM knows about grammar: which sentence of a minimal pair it prefers.

A minimal pair is two sentences that differ in one place, one acceptable and one not ("The cats annoy
Tim." / "*The cats annoys Tim."). A masked LM scores a sentence by its pseudo-log-likelihood, every token
masked in turn (``predict.pseudo_log_likelihoods``; Salazar et al. 2020, "Masked Language Model Scoring",
ACL), and is right on a pair when PLL(good) > PLL(bad): a forced choice with no threshold and nothing
trained, as BLiMP scores its language models (Warstadt et al. 2020, "BLiMP: The Benchmark of Linguistic
Minimal Pairs for English", TACL 8, sec. 5).

BLiMP (github.com/alexwarstadt/blimp, ``data/*.jsonl``) is 67 paradigms x 1,000 generated pairs in 12
phenomena. It is not bundled with MLM Lab (see README, "What does the model know about grammar?"): point
``MLMLAB_BLIMP_DIR`` at a copy's ``data`` folder, or pass the folder. The default model's build reports a
fixed subsample of it (``subsample``: the same pairs for every model), and never trains or chooses on it.

>>> from mlm_core.models import tiny_random_masked_lm
>>> model, tokenizer = tiny_random_masked_lm()
>>> [pair] = score_pairs(model, tokenizer, [("The cats sleep.", "The cats sleeps.")])
>>> pair.good.tokens, round(pair.good.total, 6) == round(sum(pair.good.log_probs), 6)
(('the', 'cats', 'sleep', '.'), True)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from mlm_core.data import run_tokenizer
from mlm_core.errors import InputError
from mlm_core.predict import PseudoLogLikelihood, pseudo_log_likelihoods

__all__ = [
    "MAX_SENTENCE_CHARS",
    "MAX_SENTENCE_TOKENS",
    "PairScore",
    "check_sentence",
    "score_pairs",
    "LabPair",
    "LAB_PAIRS_PATH",
    "read_lab_pairs",
    "BlimpPair",
    "PHENOMENA",
    "PHENOMENON_OF_TERM",
    "PUBLISHED",
    "blimp_folder",
    "read_blimp",
    "subsample",
    "GrammarReport",
    "accuracy",
    "evaluate_blimp",
]

MAX_SENTENCE_CHARS = 200  # a typed sentence; BLiMP's longest good sentence has 26 words
MAX_SENTENCE_TOKENS = 64  # its PLL is one masked copy per token: 64 rows at most, well under a second on 2 cores


@dataclass(frozen=True)
class PairScore:
    """Both sentences' PLLs; the model prefers the one with the higher total (ties count as wrong)."""

    good: PseudoLogLikelihood
    bad: PseudoLogLikelihood

    @property
    def margin(self) -> float:
        """PLL(good) - PLL(bad), in nats: > 0 when the model prefers the acceptable sentence."""
        return self.good.total - self.bad.total

    @property
    def prefers_good(self) -> bool:
        return self.margin > 0


def check_sentence(text: str, name: str = "This sentence") -> str:
    """The sentence stripped, or an ``InputError`` a learner can act on (``name``: which box, in the message)."""
    text = (text or "").strip()
    if not text:
        raise InputError("Type a sentence in both boxes.")
    if len(text) > MAX_SENTENCE_CHARS:
        raise InputError(f"{name} has {len(text)} characters: a sentence may have at most {MAX_SENTENCE_CHARS}.")
    return text


def _encode(tokenizer, text: str) -> list[int]:
    """The sentence's ids with the tokenizer's specials; a sentence over MAX_SENTENCE_TOKENS is refused, never
    cut (a PLL of the first 64 tokens shown as the sentence's would be wrong)."""
    ids = list(run_tokenizer(tokenizer, text, add_special_tokens=True)["input_ids"])
    n = len(ids) - tokenizer.num_special_tokens_to_add()
    if n > MAX_SENTENCE_TOKENS:
        start = text if len(text) <= 40 else text[:40] + "…"
        raise InputError(f"The sentence “{start}” is {n} tokens long; a pair is scored one masked copy per token, "
                         f"up to {MAX_SENTENCE_TOKENS} tokens a sentence. Shorten it.")
    return ids


def score_pairs(model, tokenizer, pairs: Sequence[tuple[str, str]], *, batch_size: int = 64,
                word_l2r: bool = False) -> list[PairScore]:
    """PLL of both sentences of every ``(good, bad)`` pair, all masked copies packed into shared batches;
    ``word_l2r``: PLL-word-l2r instead (``predict.pseudo_log_likelihoods``' ``word_ids``: Kauf & Ivanova 2023)."""
    sentences = [_encode(tokenizer, s) for pair in pairs for s in pair]
    words = [run_tokenizer(tokenizer, s, add_special_tokens=True).word_ids() for pair in pairs for s in pair] \
        if word_l2r else None
    scores = pseudo_log_likelihoods(model, tokenizer, sentences, batch_size=batch_size, word_ids=words)
    return [PairScore(scores[2 * i], scores[2 * i + 1]) for i in range(len(pairs))]


# --------------------------------------------------------------------------- MLM Lab's own pairs (bundled)
LAB_PAIRS_PATH = Path(__file__).resolve().parent.parent / "assets" / "grammar_pairs.tsv"


@dataclass(frozen=True)
class LabPair:
    """One of MLM Lab's own minimal pairs (``assets/grammar_pairs.tsv``, CC0): written for the offline lesson in
    the style of BLiMP's phenomena, not BLiMP data. The default model's build chooses with them (a dev set)."""

    phenomenon: str  # one of PHENOMENA
    good: str
    bad: str
    note: str  # what changed, in a few words


def read_lab_pairs(path: str | Path = LAB_PAIRS_PATH) -> list[LabPair]:
    """Rows ``phenomenon<TAB>good<TAB>bad<TAB>note`` (``#`` lines and blank lines skipped)."""
    pairs = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if parts[0] == "phenomenon":  # a header row
            continue
        if len(parts) < 3 or parts[0] not in PHENOMENA:
            raise InputError(f"{Path(path).name}, line {number}: expected phenomenon<TAB>good<TAB>bad<TAB>note")
        pairs.append(LabPair(parts[0], parts[1].strip(), parts[2].strip(), parts[3].strip() if len(parts) > 3 else ""))
    return pairs


# --------------------------------------------------------------------------- BLiMP
@dataclass(frozen=True)
class BlimpPair:
    uid: str  # the paradigm, e.g. "regular_plural_subject_verb_agreement_1"
    phenomenon: str  # one of PHENOMENA (BLiMP's Table 3 columns)
    pair_id: int
    good: str
    bad: str


# BLiMP's 12 phenomena in the order of its Table 3 (TACL version), with the short names the table uses.
PHENOMENA = {
    "anaphor_agreement": "anaphor agreement (ANA. AGR)",
    "argument_structure": "argument structure (ARG. STR)",
    "binding": "binding",
    "control_raising": "control / raising (CTRL. RAIS.)",
    "determiner_noun_agreement": "determiner-noun agreement (D-N AGR)",
    "ellipsis": "ellipsis",
    "filler_gap_dependency": "filler-gap (FILLER. GAP)",
    "irregular_forms": "irregular forms",
    "island_effects": "island effects",
    "npi_licensing": "NPI licensing",
    "quantifiers": "quantifiers",
    "subject_verb_agreement": "subject-verb agreement (S-V AGR)",
}
# The data files' ``linguistics_term`` is Table 3's phenomenon, except that the two animate_subject paradigms
# say "s-selection": the paper lists them under argument structure (its appendix table of paradigms).
PHENOMENON_OF_TERM = {**{p: p for p in PHENOMENA}, "s-selection": "argument_structure"}

# Published accuracies (%), overall and per phenomenon, in PHENOMENA's order: the four models by forced choice on all
# 67,000 pairs, from the maintainers' results file (raw_results/summary/models_summary.jsonl, revised on 16 August
# 2021: "Some results in Tables 3 and 4 were mis-reported in the published TACL version", their README says; every
# model value below is the file's, rounded; "human" is the mean of raw_results/summary/human_validation_summary.csv
# per phenomenon, the corrected paper's Table 3 row), individual annotators' agreement with the labels, from about 100 annotations of each paradigm (20 validators rated 5 pairs of each paradigm:
# the paper's section 3.4). Salazar et al. 2020 score
# masked LMs by PLL; the figures below are the overall ones their repository's BLiMP example reports
# (github.com/awslabs/mlm-scoring, examples/lingacc-blimp/README.md).
_TABLE3 = {
    "5-gram": (61.2, [47.9, 71.9, 64.4, 68.5, 70.0, 36.9, 60.2, 79.5, 57.2, 45.5, 53.5, 60.3]),
    "LSTM": (69.8, [91.7, 73.2, 73.5, 67.0, 85.4, 67.6, 73.9, 89.1, 46.6, 51.7, 64.5, 80.1]),
    "Transformer-XL": (69.6, [94.1, 72.2, 74.7, 71.5, 83.0, 77.2, 66.6, 78.2, 48.3, 55.2, 69.3, 76.0]),  # islands: the file's 48.34
    "GPT-2": (83.0, [99.3, 81.8, 80.9, 81.9, 95.8, 89.3, 81.3, 91.9, 72.7, 76.8, 79.0, 86.4]),
    "human": (88.6, [97.5, 90.0, 87.3, 83.9, 92.2, 85.0, 86.9, 97.0, 84.9, 88.1, 86.6, 90.9]),
}
BLIMP_RESULTS = ("BLiMP's results file (github.com/alexwarstadt/blimp, raw_results/summary/models_summary.jsonl, "
                 "revised 2021: the TACL version's Table 3 mis-reported some results)")
PUBLISHED = {
    **{name: {"overall": overall, "by_phenomenon": dict(zip(PHENOMENA, per)),
              "source": ("BLiMP's human validation file (raw_results/summary/human_validation_summary.csv), the "
                         "corrected paper's Table 3 (arXiv 1912.00582)" if name == "human" else BLIMP_RESULTS)}
    for name, (overall, per) in _TABLE3.items()},
    "RoBERTa-large (PLL)": {"overall": 86.5, "by_phenomenon": {},
                            "source": "Salazar et al. 2020, Masked Language Model Scoring (ACL): "
                                      "github.com/awslabs/mlm-scoring, examples/lingacc-blimp"},
    "GPT-2 345M (log-prob)": {"overall": 82.6, "by_phenomenon": {},
                              "source": "Salazar et al. 2020, Masked Language Model Scoring (ACL): "
                                        "github.com/awslabs/mlm-scoring, examples/lingacc-blimp"},
    # measured by the same repository after the paper (its README: "distilbert-base-cased gives 78.3%"); the
    # comparison with BERT is the paper's first author's, rounded, in the repository's issue #2 (2020-10-11):
    # DistilBERT "is much worse on BLiMP (78% vs 84%)". The paper's own table is not quoted here.
    "DistilBERT-base (PLL)": {"overall": 78.3, "by_phenomenon": {},
                              "source": "github.com/awslabs/mlm-scoring, examples/lingacc-blimp/README.md "
                                        "(distilbert-base-cased, measured after the paper)"},
    "BERT (PLL)": {"overall": 84.0, "approximate": True, "by_phenomenon": {},
                   "source": "github.com/awslabs/mlm-scoring issue #2, Salazar (2020-10-11): DistilBERT "
                             "\"much worse on BLiMP (78% vs 84%)\" than BERT; a rounded figure"},
}


def blimp_folder(folder: str | Path | None = None) -> Path | None:
    """BLiMP's ``data`` folder: ``folder``, else ``$MLMLAB_BLIMP_DIR``; None when neither holds its files."""
    for candidate in (folder, os.environ.get("MLMLAB_BLIMP_DIR")):
        if candidate:
            path = Path(candidate).expanduser()
            if path.is_dir() and any(path.glob("*.jsonl")):
                return path
    return None


def read_blimp(folder: str | Path) -> list[BlimpPair]:
    """Every pair of every ``*.jsonl`` paradigm file in ``folder``, in file and line order."""
    pairs = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            term = row["linguistics_term"]
            if term not in PHENOMENON_OF_TERM:
                raise InputError(f"{path.name}: unknown BLiMP phenomenon {term!r}")
            pairs.append(BlimpPair(row["UID"], PHENOMENON_OF_TERM[term], int(row["pairID"]),
                                   row["sentence_good"], row["sentence_bad"]))
    return pairs


def subsample(pairs: Iterable[BlimpPair], per_paradigm: int) -> list[BlimpPair]:
    """A fixed sample: the ``per_paradigm`` pairs of each paradigm with the smallest sha1("uid:pairID").

    No generator and no model is involved, so the sample is the same on every machine, for every model and
    whatever the order of the files; it never depends on how a model scores the pairs.
    """
    by_uid: dict[str, list[BlimpPair]] = defaultdict(list)
    for pair in pairs:
        by_uid[pair.uid].append(pair)
    key = lambda p: hashlib.sha1(f"{p.uid}:{p.pair_id}".encode()).hexdigest()  # noqa: E731
    return [p for uid in sorted(by_uid) for p in sorted(by_uid[uid], key=key)[:per_paradigm]]


@dataclass(frozen=True)
class GrammarReport:
    """Accuracy (0-1) overall, per phenomenon and per paradigm, each with its standard error.

    BLiMP weighs its 67 paradigms equally (each has 1,000 pairs), so overall and per-phenomenon accuracy
    are means over paradigms; their standard errors treat the sample as stratified by paradigm:
    SE = sqrt(sum_p a_p (1 - a_p) / n_p) / P.
    """

    n_pairs: int
    overall: float
    overall_se: float
    by_phenomenon: dict[str, tuple[float, float, int]]  # phenomenon -> (accuracy, SE, pairs)
    by_paradigm: dict[str, tuple[float, int]]  # uid -> (accuracy, pairs)

    def as_dict(self) -> dict:
        return {"n_pairs": self.n_pairs, "overall": round(self.overall, 4), "overall_se": round(self.overall_se, 4),
                "by_phenomenon": {k: {"accuracy": round(a, 4), "se": round(se, 4), "n": n}
                                  for k, (a, se, n) in self.by_phenomenon.items()},
                "by_paradigm": {k: {"accuracy": round(a, 4), "n": n} for k, (a, n) in self.by_paradigm.items()}}


def _stratified(paradigms: list[tuple[float, int]]) -> tuple[float, float]:
    mean = sum(a for a, _ in paradigms) / len(paradigms)
    se = math.sqrt(sum(a * (1 - a) / n for a, n in paradigms)) / len(paradigms)
    return mean, se


def accuracy(pairs: Sequence[BlimpPair], right: Sequence[bool]) -> GrammarReport:
    """A ``GrammarReport`` from each pair's outcome (True: the model preferred the good sentence)."""
    if len(pairs) != len(right) or not pairs:
        raise ValueError("one outcome per pair, and at least one pair")
    per_uid: dict[str, list[bool]] = defaultdict(list)
    phenomenon_of: dict[str, str] = {}
    for pair, ok in zip(pairs, right):
        per_uid[pair.uid].append(bool(ok))
        phenomenon_of[pair.uid] = pair.phenomenon
    by_paradigm = {uid: (sum(v) / len(v), len(v)) for uid, v in sorted(per_uid.items())}
    overall, overall_se = _stratified(list(by_paradigm.values()))
    by_phenomenon = {}
    for phenomenon in PHENOMENA:
        members = [acc for uid, acc in by_paradigm.items() if phenomenon_of[uid] == phenomenon]
        if members:
            mean, se = _stratified(members)
            by_phenomenon[phenomenon] = (mean, se, sum(n for _, n in members))
    return GrammarReport(len(pairs), overall, overall_se, by_phenomenon, by_paradigm)


def evaluate_blimp(model, tokenizer, pairs: Sequence[BlimpPair], *, batch_size: int = 64) -> GrammarReport:
    """Score every pair (``score_pairs``) and report the accuracy; the model is put in eval mode."""
    was_training = model.training
    model.eval()
    try:
        scores = score_pairs(model, tokenizer, [(p.good, p.bad) for p in pairs], batch_size=batch_size)
    finally:
        model.train(was_training)
    return accuracy(pairs, [s.prefers_good for s in scores])
