"""Audit your own batch: a correct batch passes, each planted fault is flagged with the exhibit that
explains it, and uploads are read safely (JSON or CSV, never a pickle)."""

import json

import pytest
import torch

from mlm_core.bundled import workshop_sentences
from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.lessons.audit import AuditCheck, audit_batch, batch_to_json, load_batch_file
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from tests.test_museum import TEXTS


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


@pytest.mark.parametrize("strategy", ["exact_count", "span"])
def test_audit_expects_the_rules_own_count(tokenizer, strategy):
    """A correct batch of 256 workshop sentences masked by exact count or span passes the audit with that rule.
    These rules fix each row's count from its length (Google's count: ~18.6% of the tokens of short sentences),
    so a test against p = 15% ± 4 standard errors failed 19 exact-count batches of 20 and blamed 'labels never
    ignored'. A row past its count fails (the old test let two extra labels in one row pass, for both rules)."""
    config = MaskingConfig(strategy=strategy)
    enc = encode(tokenizer, workshop_sentences()[:256], max_length=64)
    for seed in range(3):
        result = mask_batch(tokenizer, enc, config, torch.Generator().manual_seed(seed))
        assert _failed(audit_batch(enc.input_ids, result.input_ids, result.labels, tokenizer=tokenizer,
                                   config=config)) == {}
    labels = result.labels.clone()
    row = 0
    extra = ((labels[row] == IGNORE_INDEX) & (enc.special_tokens_mask[row] == 0)).nonzero().flatten()[:2]
    labels[row, extra] = enc.input_ids[row, extra]  # two more selected tokens (left as they are) in row 0
    failed = _failed(audit_batch(enc.input_ids, result.input_ids, labels, tokenizer=tokenizer, config=config))
    assert failed.get("Selection rate") == "labels_never_ignored"


def test_audit_tests_the_split_per_span_when_a_span_shares_one_decision(tokenizer):
    """Per-span replacement (SpanBERT §3.1): the tokens of a span share one decision, so the per-token
    [MASK]/random/unchanged shares vary more than a per-token binomial says. On 64 workshop passages of ~100
    tokens (spans kept ~3 words long), correct batches failed the 80/10/10 check 15 times in 100 seeds;
    with the spread of the runs' decisions (design effect), at most 2 of 60 may fail (before: ~9 expected).
    A real fault (every selected token [MASK]) still fails."""
    texts, current, n = [], [], 0
    for sentence in workshop_sentences():
        current.append(sentence)
        n += len(tokenizer.tokenize(sentence))
        if n >= 100:
            texts.append(" ".join(current))
            current, n = [], 0
        if len(texts) == 64:
            break
    enc = encode(tokenizer, texts, max_length=128)
    config = MaskingConfig(strategy="span")
    failures = 0
    for seed in range(60):
        result = mask_batch(tokenizer, enc, config, torch.Generator().manual_seed(seed), trace=False)
        failures += "80/10/10 split" in _failed(audit_batch(enc.input_ids, result.input_ids, result.labels,
                                                            tokenizer=tokenizer, config=config))
    assert failures <= 2, failures
    all_mask = torch.where(result.labels != IGNORE_INDEX, torch.full_like(result.input_ids, tokenizer.mask_token_id),
                           result.input_ids)
    failed = _failed(audit_batch(enc.input_ids, all_mask, result.labels, tokenizer=tokenizer, config=config))
    assert failed.get("80/10/10 split") == "loss_only_at_mask"


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


def test_a_crafted_batch_gets_short_table_cells(tokenizer):
    """Issue 42 §3.5: 40,000 distinct label values that are not token ids (a crafted upload had 400,000 in 5 MB)
    made one table cell of every value (3.3 MB in a student's browser); now the first values and their count."""
    n = 40_000
    original = torch.full((1, n), 1996)
    labels = -torch.arange(1, n + 1)[None, :] - 200  # -201, -202, ...: none is -100, none a token id
    checks = audit_batch(original, original.clone(), labels, tokenizer=tokenizer, config=MaskingConfig())
    cells = [c.value for c in checks] + [c.expected for c in checks]
    assert max(len(c) for c in cells) < 200, max(cells, key=len)[:300]
    ignore = next(c for c in checks if c.name == "Ignore index")
    assert not ignore.passed and ignore.value.endswith("(40,000 values)") and ignore.value.startswith("-40200, ")
