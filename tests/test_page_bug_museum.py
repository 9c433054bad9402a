"""AppTest of the Bug museum: all ten exhibits render, and the audit accepts JSON/CSV and refuses .pt."""

import json

import torch

from mlm_core.data import encode, mask_batch
from mlm_core.masking import MaskingConfig

TEXTS = ["The cat sat on the warm mat by the kitchen door.", "Every morning I drink a cup of coffee."] * 20


def _batch_json(tokenizer, *, break_it=False):
    enc = encode(tokenizer, TEXTS)
    result = mask_batch(tokenizer, enc, MaskingConfig(), torch.Generator().manual_seed(0))
    labels = enc.input_ids if break_it else result.labels  # the "labels never set to -100" bug
    return json.dumps({"original_ids": enc.input_ids.tolist(), "input_ids": result.input_ids.tolist(),
                       "labels": labels.tolist()}).encode()


def test_bug_museum_page(tokenizer, run_page):
    at = run_page("pages/bug_museum.py", timeout=240)
    assert not at.error, [e.value for e in at.error]
    headings = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert len(headings) == 10
    assert len(at.metric) >= 20
    codes = at.get("code")
    assert len(codes) >= 10 and all(c.proto.wrap_lines for c in codes)  # a long line wraps on a projector

    at.file_uploader(key="museum_upload").set_value(("good.json", _batch_json(tokenizer), "application/json"))
    at.run()
    assert not at.exception, at.exception
    assert at.success and not at.error

    at.file_uploader(key="museum_upload").set_value(("bad.json", _batch_json(tokenizer, break_it=True),
                                                      "application/json"))
    at.run()
    assert not at.exception, at.exception
    assert at.error and "checks failed" in at.error[0].value

    # A .pt file never reaches the page (st.file_uploader(type=[json, csv]) refuses it); a pickle
    # renamed to .json does, and load_batch_file refuses it.
    at.file_uploader(key="museum_upload").set_value(("batch.json", b"\x80\x04\x95pickle", "application/json"))
    at.run()
    assert not at.exception, at.exception
    assert at.error and "pickle" in at.error[0].value

    at.file_uploader(key="museum_upload").set_value(("batch.csv", b"row,position\n0,0\n", "text/csv"))
    at.run()
    assert not at.exception and at.error


def _metric(at, label_start):
    return next(m.value for m in at.metric if m.label.startswith(label_start))


def test_museum_shows_the_loss_pages_numbers(apptest):
    """Same batch, same settings, same numbers on both pages, with the masking rule from a shared link."""
    link = {"seed": "3", "strategy": "whole_word", "p": "0.3"}
    loss = apptest("pages/losses.py", timeout=240)
    loss.query_params.update(link)
    loss.run()
    assert not loss.exception, loss.exception
    museum = apptest("pages/bug_museum.py", timeout=240)
    museum.query_params.update(link)
    museum.run()
    assert not museum.exception, museum.exception
    assert any("whole word masking, p = 30%" in c.value for c in loss.caption)
    assert any("whole word, p = 30%" in c.value for c in museum.caption)
    full = _metric(loss, "full softmax")
    correct = [m.value for m in museum.metric if m.label == "✅ correct code"]
    assert full in correct  # loss only at [MASK], labels never ignored, wrong ignore index
    assert _metric(museum, "Σ w·CE / Σ w") == _metric(loss, "weighted")
    assert _metric(loss, "sampled") in correct  # the two sampled-softmax exhibits
    assert [m.value for m in museum.metric if m.label == "full softmax loss"][0] == full
