"""The reported-only evaluation sets of issue 26: their format, and that nothing leaks into them.

- ``assets/cloze_unseen.tsv``: everyday cloze sentences whose accepted answers never appear elsewhere in
  the sentence (so a guess that repeats a word of the sentence is a copy, never a right answer);
- ``assets/cloze_repeat.tsv``: cloze sentences whose right answer *does* repeat a word of the sentence
  ("Step by [MASK]" -> step), which a model trained against copying must still get;
- ``assets/grammar_pairs.tsv``: MLM Lab's own minimal pairs in BLiMP's 12 phenomenon categories.

They are reported, never used to choose anything, so none of their sentences -- nor any 8-word run of
one, with [MASK] kept or filled by any answer -- may occur in the default model's training sources or
in the other cloze sets (checked with the build's own filter, ``scripts.default_mlm_data.ClozeFilter``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mlm_core import default_model as dm
from mlm_core.bundled import load_default_tokenizer
from scripts import default_mlm_data as bd

ASSETS = Path(__file__).resolve().parent.parent / "assets"
UNSEEN = ASSETS / "cloze_unseen.tsv"
REPEAT = ASSETS / "cloze_repeat.tsv"
GRAMMAR = ASSETS / "grammar_pairs.tsv"
OLDER_CLOZE = (ASSETS / "cloze.tsv", ASSETS / "cloze_dev.tsv", ASSETS / "cloze_everyday.tsv")
# Where scripts/build_default_mlm.py keeps the npm sources (its --npm-dir default); absent on most machines.
NPM_DIR = Path("/tmp/mlmlab_npm")

BLIMP_PHENOMENA = {
    "anaphor_agreement", "argument_structure", "binding", "control_raising", "determiner_noun_agreement",
    "ellipsis", "filler_gap_dependency", "irregular_forms", "island_effects", "npi_licensing", "quantifiers",
    "subject_verb_agreement",
}
SLOTS = {"noun", "verb", "adjective", "adverb", "preposition", "pronoun", "determiner", "number", "conjunction"}
MAX_PAIR_EDITS = 3  # words inserted, deleted or replaced between a good and a bad sentence (a moved word is 2)


def header_and_rows(path: Path, columns: list[str]) -> tuple[list[str], list[list[str]]]:
    """The ``#`` header block and the data rows (split on tabs) under the column-name line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if line.strip() and not line.startswith("#")]
    assert body[0].split("\t") == columns, f"{path.name}: column line"
    return header, [line.split("\t") for line in body[1:]]


def word_edits(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two word lists.

    >>> word_edits("how tall is he".split(), "how is he tall".split())
    2
    """
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def grammar_pairs() -> list[tuple[str, str, str, str]]:
    return [tuple(row) for row in header_and_rows(GRAMMAR, ["phenomenon", "good", "bad", "note"])[1]]


@pytest.fixture(scope="module")
def unseen():
    return dm.read_cloze(UNSEEN)


@pytest.fixture(scope="module")
def repeat():
    return dm.read_cloze(REPEAT)


@pytest.fixture(scope="module")
def tokenizer():
    return load_default_tokenizer()


# --- format ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, columns",
    [(UNSEEN, ["sentence", "answers", "slot"]), (REPEAT, ["sentence", "answers"]),
     (GRAMMAR, ["phenomenon", "good", "bad", "note"])],
)
def test_files_have_their_header_block_and_columns(path, columns):
    text = path.read_text(encoding="utf-8")
    assert text.isascii(), "plain ASCII punctuation only"
    header, rows = header_and_rows(path, columns)
    block = " ".join(line.lstrip("# ") for line in header)
    assert "CC0 1.0" in block and "written by hand for mlm lab on 2026-12-01" in block.lower()
    if path == GRAMMAR:  # the build's grammar dev set: it chooses, BLiMP reports
        assert "A dev set: the default model's build chooses" in block and "BLiMP, never used to choose" in block
    else:
        assert "Reported only: never used to choose a checkpoint, weight or recipe." in block
    assert all(len(row) == len(columns) and all(f.strip() == f and f for f in row) for row in rows), path.name
    if path == GRAMMAR:
        assert "in the style of BLiMP's 12 phenomena (Warstadt et al. 2020, TACL), not BLiMP data" in block


@pytest.mark.parametrize("path", [UNSEEN, REPEAT])
def test_read_cloze_reads_every_row(path):
    """``read_cloze`` (what the build and the app read) drops no row: each has one [MASK] and answers."""
    _, rows = header_and_rows(path, ["sentence", "answers"] + (["slot"] if path == UNSEEN else []))
    read = dm.read_cloze(path)
    assert [s for s, _ in read] == [row[0] for row in rows]
    for sentence, answers in read:
        assert sentence.count("[MASK]") == 1, sentence
        assert len(set(answers)) == len(answers) and all(a.isalpha() and a == a.lower() for a in answers), sentence


def test_row_counts(unseen, repeat):
    assert len(unseen) >= 150
    assert len(repeat) >= 40
    counts = Counter(p for p, *_ in grammar_pairs())
    assert set(counts) == BLIMP_PHENOMENA
    assert min(counts.values()) >= 8 and sum(counts.values()) >= 96


def test_every_answer_is_one_wordpiece(unseen, repeat, tokenizer):
    vocab = tokenizer.get_vocab()
    assert len(vocab) == 30522, "bert-base-uncased vocabulary"
    bad = [(s, a, tokenizer.tokenize(a)) for s, answers in unseen + repeat for a in answers
           if a not in vocab or tokenizer.tokenize(a) != [a]]
    assert not bad


# --- the unseen set ----------------------------------------------------------------------


def test_unseen_answers_never_appear_in_their_sentence(unseen):
    present = [(s, set(answers) & dm.sentence_words(s)) for s, answers in unseen]
    assert not [p for p in present if p[1]]


def test_unseen_rows_vary_in_length_answers_and_slot(unseen):
    _, rows = header_and_rows(UNSEEN, ["sentence", "answers", "slot"])
    for sentence, answers in unseen:
        assert 6 <= len(sentence.split()) <= 20, sentence
        assert 3 <= len(answers) <= 10, sentence
    slots = Counter(row[2] for row in rows)
    assert set(slots) <= SLOTS
    assert 1 - slots["noun"] / len(rows) >= 0.30, slots
    assert slots["noun"] / len(rows) >= 0.25, "noun slots, where copying happens, stay well represented"


def test_repeat_answers_repeat_a_word_of_their_sentence(repeat):
    """The first listed answer is the repeated word (the header says so)."""
    assert not [(s, answers[0]) for s, answers in repeat if answers[0] not in dm.sentence_words(s)]


def test_answer_in_sentence_checks_can_fail():
    """The two checks above see what they are meant to see."""
    assert "sun" in dm.sentence_words("The sun rises in the [MASK].")
    assert "mask" not in dm.sentence_words("The sun rises in the [MASK].")
    assert not {"step"} & dm.sentence_words("Little by [MASK].")


# --- no duplicates, no shared sentences --------------------------------------------------


def test_no_sentence_repeated_within_or_across_the_cloze_sets(unseen, repeat):
    sentences = [s for s, _ in unseen + repeat] + [s for path in OLDER_CLOZE for s, _ in dm.read_cloze(path)]
    assert [s for s, n in Counter(sentences).items() if n > 1] == []


def test_new_cloze_sets_share_no_run_with_the_older_ones(unseen, repeat):
    """No 8-word run (or whole short sentence) of a new row, [MASK] kept or filled, in an older set's row."""
    filt = bd.ClozeFilter(all_new_rows(unseen, repeat))
    older = [row for path in OLDER_CLOZE for row in dm.read_cloze(path)]
    hits = [v for s, answers in older for v in [s] + [s.replace("[MASK]", a) for a in answers] if filt.hits(v)]
    assert not hits
    back = bd.ClozeFilter(older)
    hits = [v for s, answers in unseen + repeat for v in [s] + [s.replace("[MASK]", a) for a in answers] if back.hits(v)]
    assert not hits


def test_grammar_pairs_are_distinct_minimal_pairs():
    pairs = grammar_pairs()
    goods, bads = [g for _, g, _, _ in pairs], [b for _, _, b, _ in pairs]
    assert len(set(goods)) == len(goods) and len(set(bads)) == len(bads)
    assert not set(goods) & set(bads), "no sentence is good in one pair and bad in another"
    for phenomenon, good, bad, note in pairs:
        assert good != bad, good
        for s in (good, bad):
            assert s[0].isupper() and s[-1] in ".?!" and "[MASK]" not in s, s
        edits = word_edits(bd.words(good), bd.words(bad))
        assert 1 <= edits <= MAX_PAIR_EDITS, (good, bad, edits)
        assert 2 <= len(note.split()) <= 12, note


# --- no overlap with the build's training sources -----------------------------------------


def all_new_rows(unseen, repeat):
    pairs = grammar_pairs()
    return unseen + repeat + [(g, []) for _, g, _, _ in pairs] + [(b, []) for _, _, b, _ in pairs]


def leaked(filt: bd.ClozeFilter, docs: list[list[str]]) -> list[str]:
    """Documents (joined, so runs across a sentence boundary count) that share a run with a row."""
    return [" ".join(d)[:120] for d in docs if filt.hits(" ".join(d))]


def test_overlap_filter_sees_a_shared_run():
    filt = bd.ClozeFilter([("Could we split the [MASK]? I only had a salad.", ["bill"]), ("How tall is your brother?", [])])
    assert filt.hits("Could we split the bill? I only had a salad, so.")
    assert filt.hits("I asked: how tall is your brother?")
    assert not filt.hits("Could we split the cost? I had soup.")


def test_no_new_row_in_the_workshop_or_daily_life_corpus(unseen, repeat):
    filt = bd.ClozeFilter(all_new_rows(unseen, repeat))
    docs = [d for path in (bd.CORPUS_PATH, bd.DAILY_PATH, bd.DAILY2_PATH) for d in bd.read_workshop_documents(path)]
    assert len(docs) > 550
    assert not leaked(filt, docs)


def test_no_new_row_in_wordnet(unseen, repeat):
    if not (bd.WORDNET_DIR / "data.noun").is_file():
        pytest.skip("WordNet data files are not installed (Debian wordnet-base)")
    assert not leaked(bd.ClozeFilter(all_new_rows(unseen, repeat)), bd.read_wordnet_documents(bd.WORDNET_DIR))


@pytest.mark.parametrize("source", sorted(bd.NPM_SOURCES))
def test_no_new_row_in_the_npm_sources(unseen, repeat, source):
    name, version = bd.NPM_SOURCES[source]
    tgz = NPM_DIR / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tgz.is_file():
        pytest.skip(f"{tgz} is absent (scripts/build_default_mlm.py fetches it with npm pack)")
    docs = bd.read_sotu_documents(tgz) if source == "sotu" else bd.read_moby_documents(tgz)
    assert not leaked(bd.ClozeFilter(all_new_rows(unseen, repeat)), docs)
