"""Bug museum: every exhibit's wrong number differs from the right one; the audit flags each fault."""

import json

import pytest
import torch

from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.museum import (
    EXHIBITS,
    AuditCheck,
    Exhibit,
    audit_batch,
    batch_to_json,
    load_batch_file,
    museum_batch,
    run_exhibits,
)

TEXTS = [
    "The cat sat on the warm mat by the kitchen door.",
    "It watched the rain run down the window all afternoon.",
    "When the sun came out, it went into the garden to sleep.",
    "Every morning I drink a cup of coffee before work.",
    "The train to the city leaves at eight o'clock sharp.",
    "On the way I read the news and plan my day.",
    "Our neighbours grow tomatoes and beans in their garden.",
    "The library opens at nine and closes late on Thursdays.",
]


@pytest.fixture(scope="module")
def batch():
    from mlm_core.models import load_masked_lm

    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    return museum_batch(tokenizer, TEXTS, MaskingConfig(), seed=0, model=model)


def test_every_exhibit_differs(batch):
    exhibits = run_exhibits(batch)
    assert [e.key for e in exhibits] == list(EXHIBITS) and len(exhibits) == 10
    for e in exhibits:
        assert isinstance(e, Exhibit) and e.title and e.why and e.unit
        assert e.differs, (e.key, e.wrong_value, e.right_value)
    by = {e.key: e for e in exhibits}
    assert by["zero_selected_nan"].right_value == 0.0 and by["zero_selected_nan"].wrong_value != by["zero_selected_nan"].wrong_value
    assert by["special_ids_hardcoded"].right_value == 0 and by["special_ids_hardcoded"].wrong_value == 2 * len(TEXTS)
    assert by["in_place_masking"].right_value == 0 and by["in_place_masking"].wrong_value > 0
    assert by["random_overwritten"].wrong_value < 5 < by["random_overwritten"].right_value
    assert "[PAD]" in by["negatives_over_positions"].details["negatives (buggy)"]
    assert by["sampled_without_true_class"].details["same negatives in both"]


def test_exhibits_are_reproducible(batch):
    a = run_exhibits(batch, ["random_overwritten", "sampled_without_true_class"])
    b = run_exhibits(batch, ["random_overwritten", "sampled_without_true_class"])
    assert [(e.wrong_value, e.right_value) for e in a] == [(e.wrong_value, e.right_value) for e in b]


def test_exhibits_without_a_model(tokenizer):
    plain = museum_batch(tokenizer, TEXTS, MaskingConfig(), seed=1)
    for key in ("special_ids_hardcoded", "random_overwritten", "zero_selected_nan", "in_place_masking",
                "loss_only_at_mask"):
        assert EXHIBITS[key](plain).title
    with pytest.raises(InputError):
        EXHIBITS["weighted_mean"](plain)


# ---------------------------------------------------------------------------------------------- audit


def _good_batch(tokenizer, seed=0, repeats=6):
    enc = encode(tokenizer, TEXTS * repeats)
    result = mask_batch(tokenizer, enc, MaskingConfig(), torch.Generator().manual_seed(seed))
    return enc.input_ids, result.input_ids, result.labels, enc, result


def _failed(checks):
    return {c.name: c.exhibit for c in checks if not c.passed}


def test_audit_passes_mask_tokens_batch(tokenizer):
    for seed in range(3):
        original, inputs, labels, _, _ = _good_batch(tokenizer, seed)
        checks = audit_batch(original, inputs, labels, tokenizer=tokenizer, config=MaskingConfig())
        assert all(isinstance(c, AuditCheck) for c in checks) and len(checks) == 5
        assert _failed(checks) == {}, checks


def test_audit_flags_each_planted_fault(tokenizer):
    original, inputs, labels, enc, result = _good_batch(tokenizer)
    audit = lambda o, i, l: _failed(audit_batch(o, i, l, tokenizer=tokenizer))  # noqa: E731
    mask_id = tokenizer.mask_token_id

    # Special tokens selectable: [CLS] labelled and masked.
    l2, i2 = labels.clone(), inputs.clone()
    l2[:, 0] = original[:, 0]
    i2[:, 0] = mask_id
    assert audit(original, i2, l2).get("Special or padding tokens selected") == "special_ids_hardcoded"

    # Loss only where the input is [MASK].
    l3 = torch.where(inputs == mask_id, original, torch.full_like(labels, IGNORE_INDEX))
    failed = audit(original, inputs, l3)
    assert failed.get("80/10/10 split") == "loss_only_at_mask"
    assert failed.get("Label/-100 consistency") == "loss_only_at_mask"

    # Labels never set to -100.
    failed = audit(original, inputs, original.clone())
    assert failed.get("Ignore index") == "labels_never_ignored"
    assert failed.get("Selection rate") == "labels_never_ignored"

    # Wrong ignore index: -1 and 0.
    assert audit(original, inputs, torch.where(labels == IGNORE_INDEX, -1, labels)).get("Ignore index") == "wrong_ignore_index"
    assert audit(original, inputs, torch.where(labels == IGNORE_INDEX, 0, labels)).get("Ignore index") == "wrong_ignore_index"

    # Random replacements overwritten by the [MASK] step (a larger batch, so the 2% vs 10% is clear).
    big = encode(tokenizer, TEXTS * 30)
    g = torch.Generator().manual_seed(0)
    ids, special = big.input_ids, big.special_tokens_mask.bool()
    sel = ~special & (torch.rand(ids.shape, generator=g) < 0.15)
    bad = ids.clone()
    rnd = sel & (torch.rand(ids.shape, generator=g) < 0.1)
    bad[rnd] = torch.randint(1000, 30000, ids.shape, generator=g)[rnd]
    bad[sel & (torch.rand(ids.shape, generator=g) < 0.8)] = mask_id
    failed = audit(ids, bad, torch.where(sel, ids, IGNORE_INDEX))
    assert failed.get("80/10/10 split") == "random_overwritten", failed

    # Nothing selected.
    assert audit(original, original, torch.full_like(labels, IGNORE_INDEX)).get("Selection rate") == "zero_selected_nan"

    # Masked in place: the "originals" already hold [MASK], labels built from them.
    assert audit(inputs, inputs, torch.where(labels != IGNORE_INDEX, inputs, labels)).get(
        "Label/-100 consistency") == "in_place_masking"


def test_audit_rejects_mismatched_shapes(tokenizer):
    with pytest.raises(InputError):
        audit_batch([[1, 2, 3]], [[1, 2]], [[1, 2, 3]], tokenizer=tokenizer)


# ---------------------------------------------------------------------------------------------- files


def test_load_batch_json_and_csv(tokenizer):
    original, inputs, labels, _, _ = _good_batch(tokenizer, repeats=1)
    loaded = load_batch_file("batch.json", batch_to_json(original, inputs, labels).encode())
    assert torch.equal(loaded.original_ids, original) and torch.equal(loaded.labels, labels)
    rows = ["row,position,original_id,input_id,label"]
    for r in range(original.shape[0]):
        for p in range(original.shape[1]):
            rows.append(f"{r},{p},{original[r, p]},{inputs[r, p]},{labels[r, p]}")
    loaded = load_batch_file("batch.CSV", "\n".join(rows).encode())
    assert torch.equal(loaded.input_ids, inputs) and torch.equal(loaded.labels, labels)


@pytest.mark.parametrize("name,data", [
    ("batch.pt", b"\x80\x04\x95whatever"),
    ("batch.bin", b"anything"),
    ("batch.pkl", b"anything"),
    ("batch.json", b"\x80\x04\x95 pickled"),
    ("batch.txt", b"{}"),
    ("batch.json", b"{not json"),
    ("batch.json", json.dumps({"input_ids": [[1]]}).encode()),
    ("batch.json", json.dumps({"original_ids": [[1, 2]], "input_ids": [[1]], "labels": [[1, 2]]}).encode()),
    ("batch.json", json.dumps({"original_ids": [[1, 2], [1]], "input_ids": [[1, 2], [1]], "labels": [[1, 2], [1]]}).encode()),
    ("batch.json", json.dumps({"original_ids": [["a"]], "input_ids": [[1]], "labels": [[1]]}).encode()),
    ("batch.csv", b"a,b\n1,2\n"),
    ("batch.csv", b"row,position,original_id,input_id,label\n0,0,1,x,1\n"),
    ("batch.csv", b"row,position,original_id,input_id,label\n0,0,1,1,1\n1,1,1,1,1\n"),
    ("batch.csv", b"\xff\xfe\x00"),
])
def test_load_batch_refuses_bad_files(name, data):
    with pytest.raises(InputError) as info:
        load_batch_file(name, data)
    assert str(info.value)
    if name.endswith((".pt", ".bin", ".pkl")):
        assert "never loads" in str(info.value)
