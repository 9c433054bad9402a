"""mlm_core.vocab: trained vocabularies, their special tokens, and the metrics of the Tokenizer lesson."""

import math
import random
import string
import threading

import pytest
import torch

from mlm_core.bundled import workshop_sentences
from mlm_core.data import encode, mask_batch, special_ids
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.models import load_masked_lm
from mlm_core.costs import head_cost
from mlm_core.lessons.vocab import frequency_profile, whole_word_demo
from mlm_core.vocab import (
    SPECIAL_TOKENS,
    VocabCache,
    holdout_split,
    measure,
    most_split_word,
    normalize_text,
    sentence_words,
    tokenize_words,
    train_tokenizer,
    wordpiece_from_vocab,
)


def _generated_corpus(n_sentences: int = 2000, seed: int = 0) -> list[str]:
    """Sentences of made-up words built from syllables (used if the workshop corpus is small)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "en", "al", "or", "un", "ing", "ed", "ver", "st"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(4000)]
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf-like word frequencies
    return [" ".join(rng.choices(words, weights, k=12)) + "." for _ in range(n_sentences)]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    sentences = workshop_sentences()
    return sentences if len(sentences) >= 1000 else _generated_corpus()


@pytest.fixture(scope="module")
def trained(corpus):
    """(algorithm, requested size) -> TrainedVocab, each trained once for the whole module."""
    cache = {}

    def get(algorithm, size):
        if (algorithm, size) not in cache:
            cache[(algorithm, size)] = train_tokenizer(corpus, size, algorithm)
        return cache[(algorithm, size)]

    return get


# --- special tokens where BERT's code expects them -------------------------------------------


@pytest.mark.parametrize("algorithm", ["wordpiece", "bpe"])
def test_special_tokens_sit_where_bert_expects_them(trained, algorithm):
    tok = trained(algorithm, 1000).tokenizer
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (
        0, 1, 2, 3, 4)  # [PAD] = 0 is BertConfig.pad_token_id; the rest are read from the tokenizer
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == list(SPECIAL_TOKENS)
    assert set(tok.all_special_ids) == {0, 1, 2, 3, 4}
    assert special_ids(tok) == (0, 1, 2, 3, 4)
    assert len(tok) == 1000

    single = tok("the garden")
    assert single["input_ids"][0] == tok.cls_token_id and single["input_ids"][-1] == tok.sep_token_id
    assert tok.get_special_tokens_mask(single["input_ids"], already_has_special_tokens=True) == (
        [1] + [0] * (len(single["input_ids"]) - 2) + [1])
    pair = tok("the garden", "a door")
    ids, types = pair["input_ids"], pair["token_type_ids"]
    first_sep = ids.index(tok.sep_token_id)
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    if hasattr(tok, "build_inputs_with_special_tokens"):  # gone from fast tokenizers in transformers 5
        assert tok.build_inputs_with_special_tokens([7, 8]) == [tok.cls_token_id, 7, 8, tok.sep_token_id]


def test_trained_tokenizer_works_with_encode_masking_and_a_bert_model(trained):
    from transformers import BertConfig, BertForMaskedLM

    tok = trained("wordpiece", 1000).tokenizer
    enc = encode(tok, ["The kitchen window looks out over the garden.", "A short one."])
    assert enc.tokens[0][0] == "[CLS]" and enc.tokens[0][-1] == "[SEP]"
    assert (enc.word_ids[enc.special_tokens_mask.bool()] == -1).all()
    result = mask_batch(tok, enc, MaskingConfig(mlm_probability=0.5), torch.Generator().manual_seed(0))
    assert (result.labels[enc.special_tokens_mask.bool()] == IGNORE_INDEX).all()
    assert int(result.input_ids.max()) < len(tok)

    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = BertForMaskedLM(config).eval()
    with torch.no_grad():
        out = model(input_ids=result.input_ids, attention_mask=enc.attention_mask, labels=result.labels)
    # An untrained model guesses uniformly: its loss starts at ln V (init std 0.02 keeps logits near 0).
    assert out.logits.shape[-1] == len(tok)
    assert abs(float(out.loss) - head_cost(len(tok)).start_loss) < 0.3


def test_trained_tokenizer_builds_the_tiny_model():
    tok = train_tokenizer(["the cat sat on the mat", "a dog sat on a log"] * 10, 300).tokenizer
    model, returned = load_masked_lm("tiny-random", tokenizer=tok)
    assert returned is tok
    assert model.config.vocab_size == len(tok)


def test_save_and_reload_keeps_the_vocabulary(tmp_path):
    from transformers import AutoTokenizer

    tok = train_tokenizer(["the cat sat on the mat", "a dog sat on a log"] * 10, 300, "bpe").tokenizer
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "The cat sat on a log."
    assert again(text)["input_ids"] == tok(text)["input_ids"]
    assert again.mask_token_id == tok.mask_token_id == 4


# --- round trip ------------------------------------------------------------------------------


def _ascii_texts(n: int, seed: int = 0) -> list[str]:
    """Plain ASCII: words of letters and digits in any case, odd whitespace, . , ! ? after words."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            word = "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(1, 14)))
            if rng.random() < 0.2:
                word += rng.choice(".,!?")
            parts.append(word)
        glue = [rng.choice([" ", "  ", "\t", "\n", " \n "]) for _ in parts]
        texts.append(rng.choice(["", " ", "\n"]) + "".join(p + g for p, g in zip(parts, glue)))
    return texts


@pytest.mark.parametrize("algorithm", ["wordpiece", "bpe"])
def test_ascii_round_trips_after_normalisation(trained, algorithm):
    tok = trained(algorithm, 1000).tokenizer
    examples = ["The Quick brown FOX jumps over the lazy dog.", "Hello, world! Is it 42?", "  spaced   out\twords \n"]
    for text in examples + _ascii_texts(200):
        ids = tok(text)["input_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == _decoded(tok, algorithm, text), text
        assert tok.unk_token_id not in ids


@pytest.mark.parametrize("algorithm", ["wordpiece", "bpe"])
def test_every_ascii_letter_is_kept_even_if_the_corpus_lacks_it(algorithm):
    tok = train_tokenizer(["abc abc cab", "bca cab abc"] * 5, 200, algorithm).tokenizer
    for text in _ascii_texts(50, seed=1):
        ids = tok(text)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == _decoded(tok, algorithm, text)


def _decoded(tok, algorithm, text):
    """What decoding gives back: WordPiece's decoder glues punctuation to the word before it; BPE's
    end-of-word decoder puts one space after every word, punctuation marks included."""
    return normalize_text(tok, text) if algorithm == "wordpiece" else " ".join(sentence_words(tok, text))


def test_normalisation_is_berts():
    tok = wordpiece_from_vocab(["the"])
    assert normalize_text(tok, "  Ça  VA,\tNaïve  Café ") == "ca va, naive cafe"
    assert sentence_words(tok, "Don't stop!") == ["don", "'", "t", "stop", "!"]


# --- training --------------------------------------------------------------------------------


def test_training_is_reproducible(corpus):
    # The tokenizers trainer numbers its "##" pieces in hash-map order, which changes merges on
    # ties (huggingface/tokenizers#1794); train_tokenizer reserves them up front.
    for algorithm in ("wordpiece", "bpe"):
        first = train_tokenizer(corpus[:600], 700, algorithm).tokenizer.get_vocab()
        second = train_tokenizer(corpus[:600], 700, algorithm).tokenizer.get_vocab()
        assert first == second


def test_progress_is_reported_in_order_from_the_calling_thread():
    calls = []
    train_tokenizer(_generated_corpus(300), 300, on_progress=lambda f, m: calls.append((f, m, threading.get_ident())))
    fractions = [f for f, _, _ in calls]
    assert fractions == sorted(fractions) and fractions[0] >= 0.0 and fractions[-1] == 1.0
    assert {thread for _, _, thread in calls} == {threading.get_ident()}
    assert all(isinstance(m, str) and m for _, m, _ in calls)


@pytest.mark.parametrize(
    "texts, size, algorithm",
    [([], 1000, "wordpiece"), (["   ", ""], 1000, "wordpiece"), (["a b"], 10, "wordpiece"),
     (["a b"], 10**6, "bpe"), (["a b"], 1000, "unigram"), (["a b"], 1000.5, "bpe")],
)
def test_bad_requests_are_refused_with_a_message(texts, size, algorithm):
    with pytest.raises(InputError):
        train_tokenizer(texts, size, algorithm)


def test_small_corpus_reports_the_size_it_reached():
    trained = train_tokenizer(["the cat sat on the mat"] * 5, 5000)
    assert trained.saturated and trained.vocab_size < 5000 and trained.vocab_size == len(trained.tokenizer)
    assert trained.requested_size == 5000 and str(trained.vocab_size) in trained.label.replace(",", "")


def test_cache_trains_once_and_reuses_a_saturated_vocabulary(monkeypatch):
    import mlm_core.vocab as vocab

    calls = []
    real = vocab.train_tokenizer
    monkeypatch.setattr(vocab, "train_tokenizer", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    texts = ["the cat sat on the mat", "a dog sat on a log"] * 10
    cache = VocabCache()
    small = cache.get_or_train(texts, 300, "wordpiece")
    assert cache.get_or_train(texts, 300, "wordpiece") is small
    assert small.saturated
    bigger = cache.get_or_train(texts, 4000, "wordpiece")  # same corpus, already exhausted
    assert bigger.tokenizer is small.tokenizer and bigger.requested_size == 4000
    cache.get_or_train(texts, 300, "bpe")
    cache.get_or_train(texts[:4], 300, "wordpiece")  # another corpus
    assert calls == [300, 300, 300]


# --- metrics ---------------------------------------------------------------------------------

HAND_VOCAB = ["the", "cat", "##s", "sat", "on", ".", "m", "##a", "##t", "dog"]
HAND_TEXTS = ["The cats sat on the mat.", "Cows sat!"]
# the | cat ##s | sat | on | the | m ##a ##t | .      7 words, 10 tokens, 2 split
# [UNK] (c... not in vocab: WordPiece makes the whole word [UNK]) | sat | [UNK] (!)
#                                                     3 words,  3 tokens, 0 split, 2 [UNK]


def test_metrics_on_a_hand_made_corpus():
    tok = wordpiece_from_vocab(HAND_VOCAB)
    assert tokenize_words(tok, HAND_TEXTS[0]) == [
        ["the"], ["cat", "##s"], ["sat"], ["on"], ["the"], ["m", "##a", "##t"], ["."]]
    m = measure(tok, HAND_TEXTS)
    assert (m.n_words, m.n_tokens, m.n_split_words, m.n_unk, m.n_unk_words) == (10, 13, 2, 2, 2)
    assert m.vocab_size == 15
    assert m.tokens_per_word == pytest.approx(13 / 10)
    assert m.split_share == pytest.approx(2 / 10)
    assert m.unk_rate == pytest.approx(2 / 13)
    assert m.unk_word_share == pytest.approx(2 / 10)


def test_frequency_profile_on_a_hand_made_corpus():
    tok = wordpiece_from_vocab(HAND_VOCAB)
    profile = frequency_profile(tok, HAND_TEXTS)
    # the 2, sat 2, then the ones seen once in id order, then dog (never); [UNK] is special: left out.
    assert profile.tokens == ("the", "sat", "cat", "##s", "on", ".", "m", "##a", "##t", "dog")
    assert profile.counts == (2, 2, 1, 1, 1, 1, 1, 1, 1, 0)
    assert profile.n_unused == 1


def test_head_cost_by_hand():
    c = head_cost(1000, hidden_size=4, batch_size=2, seq_len=10, mlm_probability=0.15, bytes_per_value=4)
    assert c.masked_positions == 3  # round(0.15 * 2 * 10)
    assert c.flops_per_position == 2 * 4 * 1000
    assert c.flops_full == 8000 * 20 and c.flops_gathered == 8000 * 3
    assert c.logits_bytes_full == 2 * 10 * 1000 * 4 and c.logits_bytes_gathered == 3 * 1000 * 4
    uniform = torch.nn.functional.cross_entropy(torch.zeros(3, 1000), torch.tensor([0, 5, 999]))
    assert c.start_loss == pytest.approx(float(uniform)) == pytest.approx(math.log(1000))
    with pytest.raises(InputError):
        head_cost(0)


@pytest.mark.parametrize("algorithm", ["wordpiece", "bpe"])
def test_tokens_per_word_falls_with_vocabulary_size(corpus, trained, algorithm):
    sizes = [500, 1000, 2000, 4000, 8000]
    vocabs = [trained(algorithm, size) for size in sizes]
    reached = [v.vocab_size for v in vocabs]
    assert reached == sorted(reached)
    cap = reached[-1]  # what this corpus supports (8000 is more than it can fill)
    assert cap > 1000, "the test corpus must support more than 1k tokens"
    tpw = [measure(v.tokenizer, corpus).tokens_per_word for v in vocabs]
    assert all(later <= earlier for earlier, later in zip(tpw, tpw[1:])), tpw
    at_1k, at_4k = tpw[1], tpw[3]  # 4k is capped at what the corpus supports
    assert at_4k < at_1k


def test_bundled_bert_vocabulary_can_be_measured(tokenizer):
    m = measure(tokenizer, ["The kitchen window looks out over the garden."])
    assert m.vocab_size == 30522 and m.n_words == 9 and m.tokens_per_word == 1.0 and m.unk_rate == 0.0


def test_holdout_split():
    texts = [f"s{i}" for i in range(100)]
    train, test = holdout_split(texts)
    assert len(train) == 90 and len(test) == 10 and not set(train) & set(test)
    small = texts[:10]
    assert holdout_split(small) == (small, small)


# --- whole-word vs token masking --------------------------------------------------------------


def test_whole_word_masking_never_leaves_part_of_a_word_visible():
    tok = wordpiece_from_vocab(HAND_VOCAB + ["u", "##n", "##e", "##o"])
    sentence = "the cat sat on the mat unseat"  # unseat -> u ##n ##s ##e ##a ##t
    assert most_split_word(tok, sentence) == "unseat"
    demo = whole_word_demo(tok, sentence, seed=3, n_draws=400)
    assert demo.word == "unseat" and len(demo.word_positions) == 6
    assert demo.partial_share["whole_word"] == 0.0
    assert demo.partial_share["token"] > 0.9  # 6 pieces at 15% each: hardly ever all of them
    assert 0.4 < demo.hit_share["token"] < 0.8  # 1 - 0.85**6 = 0.62
    assert 0.07 < demo.hit_share["whole_word"] < 0.25  # 0.15
    ww, tk = demo.examples["whole_word"], demo.examples["token"]
    assert all(ww.decisions[p] != "NOT_SELECTED" for p in demo.word_positions)
    hidden = [tk.decisions[p] != "NOT_SELECTED" for p in demo.word_positions]
    assert any(hidden) and not all(hidden)
    assert ww.originals == tk.originals and ww.originals[0] == "[CLS]" and ww.special[0] and ww.special[-1]
    assert demo == whole_word_demo(tok, sentence, seed=3, n_draws=400)  # same seed, same demo
    with pytest.raises(InputError):
        whole_word_demo(tok, sentence, "elephant")


# --- figures ---------------------------------------------------------------------------------


def test_figures_are_built_from_plain_results():
    from mlm_core.figures.vocab import frequency_profile_figure, head_cost_figure, split_metrics_figure

    tok = wordpiece_from_vocab(HAND_VOCAB)
    m = measure(tok, HAND_TEXTS)
    rows = [{"family": "WordPiece", "label": "hand 15", **m.as_dict()},
            {"family": "bert-base-uncased", "label": "bert", **{**m.as_dict(), "vocab_size": 30522, "unk_rate": 0.0}}]
    fig = split_metrics_figure(rows)
    assert len(fig.data) == 6  # 2 families x 3 panels
    assert fig.data[2].y == (pytest.approx(2 / 13),)

    costs = [("WordPiece", "1k", head_cost(1000)), ("bert-base-uncased", "bert", head_cost(30522))]
    fig = head_cost_figure(costs)
    markers = [t for t in fig.data if t.mode == "markers"]
    assert len(markers) == 6 and markers[-1].y == (pytest.approx(math.log(30522)),)

    fig = frequency_profile_figure([("WordPiece", "hand", frequency_profile(tok, HAND_TEXTS))])
    assert fig.data[0].y == (2, 2, 1, 1, 1, 1, 1, 1, 1) and "1 of 10 non-special entries unused" in fig.data[0].name


# --- issue 17: sizes the corpus can reach, each scheme's notation, a linear cost axis ----------


def test_offered_sizes_are_all_reached_on_the_workshop_corpus():
    """Issue 17 item 15: every size the page offers for the bundled corpus is really reached."""
    from mlm_core.bundled import workshop_sentences
    from mlm_core.vocab import MAX_VOCAB_SIZE, SIZE_LADDER, holdout_split, reachable_sizes

    train, _ = holdout_split(workshop_sentences())
    largest = {a: train_tokenizer(train, MAX_VOCAB_SIZE, a).vocab_size for a in ("wordpiece", "bpe")}
    offered = reachable_sizes(min(largest.values()))
    assert offered and offered[-1] < min(largest.values()) and len(offered) < len(SIZE_LADDER)
    for size in (offered[-1],):  # the largest offered size is filled exactly (smaller ones too, by the ladder)
        for algorithm in ("wordpiece", "bpe"):
            reached = train_tokenizer(train, size, algorithm)
            assert not reached.saturated and reached.vocab_size == size
    assert reachable_sizes(10**9) == list(SIZE_LADDER)


def test_each_scheme_writes_its_own_notation(trained):
    """Issue 17 item 16: WordPiece marks continuing pieces (##), BPE the piece that ends a word (</w>)."""
    from mlm_core.vocab import BPE_SUFFIX, cut_differences, strip_marks, tokenize_words

    wp, bpe = trained("wordpiece", 1000).tokenizer, trained("bpe", 1000).tokenizer
    sentence = "Tokenization splits unbelievably uncommon words into several pieces."
    for pieces in tokenize_words(bpe, sentence):
        assert pieces[-1].endswith(BPE_SUFFIX) and not any(p.endswith(BPE_SUFFIX) for p in pieces[:-1])
        assert not any(p.startswith("##") for p in pieces)
    for pieces in tokenize_words(wp, sentence):
        assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
        assert not any(BPE_SUFFIX in p for p in pieces)
    differences = cut_differences(wp, bpe, sentence)
    for word, a, b in differences:
        assert "".join(strip_marks(p) for p in a) == "".join(strip_marks(p) for p in b) == word
        assert [strip_marks(p) for p in a] != [strip_marks(p) for p in b]
    assert cut_differences(wp, wp, sentence) == []


def test_head_cost_is_drawn_on_linear_axes():
    """Issue 17 item 17: a cost linear in V is drawn as a straight line, not bent by a log axis."""
    from mlm_core.figures.vocab import head_cost_figure

    fig = head_cost_figure([("WordPiece", "1k", head_cost(1000)), ("bert-base-uncased", "bert", head_cost(30522))])
    for axis in ("xaxis", "xaxis2", "xaxis3"):
        assert fig.layout[axis].type == "linear"
    line = next(t for t in fig.data if t.mode == "lines" and "masked positions only" in t.name)
    ratios = [y / x for x, y in zip(line.x, line.y)]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-9)  # cost / V is constant: a straight line


def test_every_sessions_vocabularies_stay_within_one_server_budget():
    """Issue 42 §3.2: the Tokenizer page kept up to 16 vocabularies per session and nothing bounded them all
    together (four 2 MB uploads took a server from 532 to 1,164 MB). Now every session's vocabularies count in one
    budget: the machine holding the most loses its least recently used first, its session is told, and a session
    that ended is forgotten."""
    import gc

    from mlm_core.server_budget import ServerBudget
    from mlm_core.vocab import VocabCache, vocab_bytes

    texts = [f"the {w} sat on the mat near the {w}s" for w in ("cat", "dog", "hen", "fox", "owl")] * 8
    one = vocab_bytes(train_tokenizer(texts, 200))
    budget = ServerBudget("trained vocabularies", max_entries=5, max_bytes=100 * one)
    tabs = [VocabCache(budget=budget, client="ip:10.0.0.9") for _ in range(3)]
    quiet = VocabCache(budget=budget, client="ip:10.0.0.2")
    quiet.get_or_train(texts, 200, "wordpiece")
    for t, tab in enumerate(tabs):
        for size in (200, 210, 220):
            tab.get_or_train([*texts, f"tab {t} size {size}"], size, "bpe")  # a new corpus: trained
    assert budget.held()[0] == 5  # 10 asked for
    assert len(quiet) == 1 and quiet.take_notes() == []  # the busy machine paid for its own
    notes = tabs[0].take_notes()
    assert len(tabs[0]) == 0 and len(notes) == 3 and "dropped to make room" in notes[0]
    assert "trained vocabularies" in notes[0] and tabs[0].take_notes() == []
    del tabs, tab
    gc.collect()
    assert budget.held() == (1, one)
