"""Tokenization for masking, and the refusal of bad uploads with messages a learner can act on."""

import json

import pytest
import torch

from mlm_core import InputError, encode, read_text_upload, split_sentences
from mlm_core.bundled import parse_corpus, workshop_documents, workshop_sentences
from mlm_core.data import clean_text, clip_text


def test_encode_marks_specials_padding_and_words(tokenizer):
    enc = encode(tokenizer, ["The cat sat.", "Unbelievably long tokenization!"])
    assert enc.tokens[0] == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert enc.word_ids[0].tolist()[:6] == [-1, 0, 1, 2, 3, -1]
    # Padding and special tokens are flagged, and get word id -1.
    pad = enc.attention_mask == 0
    assert pad[0].any() and enc.special_tokens_mask[pad].all() and (enc.word_ids[pad] == -1).all()
    # Word pieces of one word share its word id.
    pieces = [t for t in enc.tokens[1] if t.startswith("##")]
    assert pieces
    assert enc.truncated == [False, False]


def test_encode_truncates_and_says_so(tokenizer):
    enc = encode(tokenizer, "word " * 500, max_length=32)
    assert enc.input_ids.shape == (1, 32) and enc.truncated == [True]
    assert enc.tokens[0][-1] == "[SEP]"


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_encode_refuses_empty_text(tokenizer, text):
    with pytest.raises(InputError, match="no text"):
        encode(tokenizer, text)


def test_clean_and_clip_text():
    with pytest.raises(InputError, match="empty"):
        clean_text("  ")
    with pytest.raises(InputError, match="limit"):
        clean_text("x" * 100_001)
    text, cut = clip_text("hello world " * 1000, 100)
    assert cut and len(text) <= 100 and not text.endswith(" ")
    assert clip_text(" short ", 100) == ("short", False)


def test_split_sentences():
    assert split_sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]


def test_read_text_upload_formats():
    assert read_text_upload("a.txt", "hello\nworld".encode(), max_bytes=1000) == "hello\nworld"
    assert read_text_upload("a.csv", b"text,n\nthe cat,1\n", max_bytes=1000) == "text n\nthe cat 1"
    jsonl = "\n".join(json.dumps({"text": t}) for t in ["one", "two"]).encode()
    assert read_text_upload("a.jsonl", jsonl, max_bytes=1000) == "one\ntwo"


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("model.pt", b"PK\x03\x04", "upload a .txt"),
        ("a.txt", b"\x00\x01\x02binary", "binary"),
        ("a.txt", b"caf\xe9 au lait", "not valid UTF-8"),
        ("a.txt", b"x" * 2000, "limit"),
        ("a.txt", b"   \n ", "holds no text"),
        ("a.jsonl", b'{"text": "ok"}\nnot json', "Line 2"),
        ("a.jsonl", b'{"words": "ok"}', "no \"text\""),
    ],
)
def test_read_text_upload_refuses_bad_files(name, data, message):
    with pytest.raises(InputError, match=message):
        read_text_upload(name, data, max_bytes=1000)


def test_parse_corpus_and_bundled_corpus():
    assert parse_corpus("# c\nA.\nB.\n\n\nC.\n") == [["A.", "B."], ["C."]]
    docs = workshop_documents()
    assert docs and all(docs) and len(workshop_sentences()) == sum(len(d) for d in docs)
    docs[0].append("changed")  # callers get a copy
    assert workshop_documents()[0][-1] != "changed"
