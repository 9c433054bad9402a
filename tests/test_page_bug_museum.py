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


def test_bug_museum_page(apptest, monkeypatch, tokenizer):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    at = apptest("pages/bug_museum.py", timeout=240)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    headings = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert len(headings) == 10
    assert len(at.metric) == 20

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


def test_bug_museum_own_text(apptest, monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    at = apptest("pages/bug_museum.py", timeout=240)
    at.run()
    at.radio(key="museum_source").set_value("Your text")
    at.run()
    at.text_area(key="museum_text").input("Hi.")
    at.run()
    assert not at.exception, at.exception
    at.text_area(key="museum_text").input("")
    at.run()
    assert not at.exception and at.warning
