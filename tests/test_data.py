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


# --------------------------------------------------------------------------- one tokenizer, many sessions
def _same_encoding(a, b) -> bool:
    return (a.input_ids.shape == b.input_ids.shape and bool((a.input_ids == b.input_ids).all())
            and bool((a.word_ids == b.word_ids).all()) and a.truncated == b.truncated and a.tokens == b.tokens)


def test_settings_left_in_the_backend_do_not_reach_the_next_caller(tokenizer):
    """An encode cut at 4 tokens must not cut the vocabulary lesson's counts (the backend keeps its last settings)."""
    from mlm_core.lessons.vocab import frequency_profile
    from mlm_core.vocab import measure

    long_text = "the cat sat on the mat and looked at the garden " * 3
    alone = measure(tokenizer, [long_text])
    encode(tokenizer, ["a b c d e f g"], max_length=4)  # leaves truncation at 4 in the Rust backend
    assert measure(tokenizer, [long_text]) == alone and alone.n_tokens == 33
    profile = frequency_profile(tokenizer, [long_text])
    assert dict(zip(profile.tokens, profile.counts))["the"] == 9


def test_shared_tokenizer_gives_every_thread_its_own_answer(tokenizer):
    """Pages and a training run tokenizing at once on the one cached tokenizer (issue 16, item 2).

    Before the lock: "Unable to create tensor" errors and rows cut at another caller's max_length.
    """
    import threading

    from mlm_core.training import make_chunks
    from mlm_core.vocab import measure

    long_texts = ["word " * 300, "a short one"]
    short_texts = ["the cat sat on the mat and then some more words here", "a b"]
    corpus = ["the quick brown fox jumps over the lazy dog " * 20] * 4
    jobs = {
        "long": lambda: encode(tokenizer, long_texts, max_length=512),
        "short": lambda: encode(tokenizer, short_texts, max_length=6),
        "chunks": lambda: make_chunks(tokenizer, corpus, seq_len=64).input_ids,
        "measure": lambda: measure(tokenizer, long_texts),
    }
    alone = {name: job() for name, job in jobs.items()}
    same = {"long": _same_encoding, "short": _same_encoding, "measure": lambda a, b: a == b,
            "chunks": lambda a, b: a.shape == b.shape and bool((a == b).all())}
    problems: list[str] = []
    start = threading.Barrier(len(jobs) * 2)

    def worker(name):
        start.wait()
        for _ in range(60):
            try:
                if not same[name](jobs[name](), alone[name]):
                    problems.append(f"{name}: a different answer")
            except Exception as exc:  # noqa: BLE001 - any error is a failure of the test
                problems.append(f"{name}: {type(exc).__name__}: {exc}"[:120])

    threads = [threading.Thread(target=worker, args=(name,)) for name in jobs for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not problems, f"{len(problems)} of {60 * len(threads)} calls went wrong, e.g. {problems[:3]}"


def test_encode_flags_truncation_exactly_at_max_length(tokenizer):
    # 6 words + [CLS] + [SEP] = 8 tokens fit in 8; 7 words do not.
    assert encode(tokenizer, "cat " * 6, max_length=8).truncated == [False]
    assert encode(tokenizer, "cat " * 7, max_length=8).truncated == [True]


# --------------------------------------------------------------------------- malformed uploads (issue 16, item 9)
DEEP = b"[" * 100_000 + b"]" * 100_000  # RecursionError in json, before
LONG_NUMBER = b"9" * 5_000  # ValueError: more than 4,300 digits, before
BATCH_HEADER = b"row,position,original_id,input_id,label\n"

HOSTILE_TEXT_UPLOADS = [
    ("deep.jsonl", DEEP, "nested too deeply"),
    ("number.jsonl", b'{"text": "a", "n": ' + LONG_NUMBER + b"}", "number too long"),
    ("notes.csv", b'text\n"the cat sat\nmore lines\n', "never closed"),  # swallowed the rest silently, before
    ("notes.csv", b"text\n" + b"x" * 140_000 + b"\n", "longer than 131,072"),  # csv.Error, before
    ("notes.csv", b'text\n"' + b"x\n" * 70_000, "never closed"),
]


@pytest.mark.parametrize("name, data, message", HOSTILE_TEXT_UPLOADS, ids=[f"{n}: {m}" for n, _, m in HOSTILE_TEXT_UPLOADS])
def test_malformed_text_uploads_are_input_errors(name, data, message):
    with pytest.raises(InputError, match=message):
        read_text_upload(name, data, max_bytes=5_000_000)


HOSTILE_BATCHES = [
    ("deep.json", DEEP, "nested too deeply"),
    ("number.json", b'{"original_ids": [[' + LONG_NUMBER + b']], "input_ids": [[1]], "labels": [[1]]}', "number too long"),
    ("nested.json", b'{"original_ids": ' + b"[" * 500 + b"1" + b"]" * 500 + b', "input_ids": [[1]], "labels": [[1]]}',
     "rows of whole numbers"),
    ("quote.csv", BATCH_HEADER + b'"0,0,1,1,1\n', "never closed"),
    ("field.csv", BATCH_HEADER + b"1" * 140_000 + b",0,1,1,1\n", "longer than 131,072"),
    ("number.csv", BATCH_HEADER + b"0,0," + LONG_NUMBER + b",1,1\n", "not a whole number"),
    ("big.csv", BATCH_HEADER + b"0,0," + b"9" * 30 + b",1,1\n", "too large"),  # torch overflow, before
]


@pytest.mark.parametrize("name, data, message", HOSTILE_BATCHES, ids=[f"{n}: {m}" for n, _, m in HOSTILE_BATCHES])
def test_malformed_batch_uploads_are_input_errors(name, data, message):
    from mlm_core.lessons.audit import load_batch_file

    with pytest.raises(InputError, match=message):
        load_batch_file(name, data)


def test_csv_batch_still_reads_blank_lines_and_any_column_order():
    from mlm_core.lessons.audit import load_batch_file

    batch = load_batch_file("b.csv", b"label,row,position,original_id,input_id\n-100,0,0,5,5\n\n6,0,1,6,103\n")
    assert batch.labels.tolist() == [[-100, 6]] and batch.input_ids.tolist() == [[5, 103]]
