"""AppTest of the Tokenizer page on a small pasted corpus (offline, no model weights)."""

import random

import pytest

from mlm_core.vocab import TrainedVocab

PAGE = "pages/tokenizer.py"
# Each test starts its own app (the small corpus trains in well under a second): no test depends on
# what another one clicked, so they pass alone and in any order.


def _small_corpus(n: int = 60, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = ["the", "garden", "kitchen", "window", "morning", "tokenization", "unbelievably", "splits",
             "uncommon", "words", "into", "pieces", "cat", "sat", "on", "mat", "and", "watched", "birds"]
    return " ".join(" ".join(rng.choices(words, k=9)).capitalize() + "." for _ in range(n))


@pytest.fixture
def app(run_page):
    """A fresh Tokenizer page for each test, trained on the small pasted corpus."""
    return run_page(PAGE, state={"tokenizer_source": "paste", "tokenizer_paste": _small_corpus()})


def test_page_trains_compares_and_hands_over(app):
    at = app
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    # This small corpus cannot fill even the smallest size of the ladder: only "all it supports" is
    # offered (issue 17 item 15), with bert-base-uncased beside it.
    options = at.multiselect(key="tokenizer_sizes").options
    assert "1k" not in options and "all it supports" in " ".join(options)
    # the cost table: static HTML whose headers wrap (a dataframe cut "logits M…" at 1400 px), numbers as text
    assert not [d for d in at.dataframe if "size reached" in d.value.columns]
    table = next(t.value for t in at.table if "size reached" in t.value.columns)
    assert len(table) == 2
    assert table["vocabulary"].iloc[0].startswith("WordPiece") and table["vocabulary"].iloc[0].endswith("(all)")
    assert int(table["size reached"].iloc[0].replace(",", "")) < 250 and table["size reached"].iloc[1] == "30,522"
    assert (table["tokens per word"].astype(float) >= 1).all()
    assert any("supports at most" in i.value and "Only sizes it can fill are offered" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 3
    assert [m.value for m in at.metric][1] == "0%"  # whole-word masking never leaves part of a word visible
    # "12 words" for a sentence of 10 words: the count includes its comma and full stop, and says so
    at.text_input(key="tokenizer_sentence").input("Unbelievably, the cat sat.").run()
    assert any("tokens for 6 words and punctuation marks" in m.value for m in at.markdown)

    at.button(key="tokenizer_use").click().run()
    handed = at.session_state["trained_tokenizer"]
    assert isinstance(handed, TrainedVocab) and handed.algorithm == "wordpiece"
    assert handed.tokenizer.mask_token_id == 4 and len(handed.tokenizer) == handed.vocab_size
    assert not at.exception


def test_page_trains_both_algorithms_and_reuses_its_cache(app):
    at = app
    cache = at.session_state["tokenizer_vocab_cache"]
    before = len(cache)
    at.radio(key="tokenizer_algorithm").set_value("both").run()
    assert not at.exception, at.exception
    vocabularies = list(next(t.value for t in at.table if "vocabulary" in t.value.columns)["vocabulary"])
    assert any(v.startswith("BPE") for v in vocabularies) and any(v.startswith("WordPiece") for v in vocabularies)
    chips = " ".join(m.value for m in at.markdown if "mlm-chip" in m.value)
    assert "&lt;/w&gt;" in chips or "</w>" in chips  # BPE in its own notation
    assert any("`##ing`" in m.value and "`ing</w>`" in m.value for m in at.markdown)
    cuts = next(d.value for d in at.dataframe if "word" in d.value.columns)  # what differs once marks are set aside
    assert len(cuts) >= 1 and any(c.startswith("BPE") for c in cuts.columns)
    at.run()  # a rerun trains nothing new
    after = len(cache)
    at.run()
    assert len(cache) == after > before


def test_page_explains_bad_input(app):
    at = app
    at.multiselect(key="tokenizer_sizes").set_value(["all"]).run()
    assert not at.exception
    assert any("at least two" in w.value for w in at.warning)
    at.multiselect(key="tokenizer_sizes").set_value(["all", "bert-base-uncased"]).run()
    at.text_input(key="tokenizer_sentence").input("   ").run()
    assert not at.exception
    assert any("Type a sentence" in w.value for w in at.warning)
    at.text_area(key="tokenizer_paste").input("").run()
    assert not at.exception
    assert any("Paste some text" in i.value for i in at.info)
