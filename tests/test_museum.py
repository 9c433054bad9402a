"""Bug museum: every exhibit's wrong number differs from the right one, its right numbers are the Loss
page's, and the audit flags each fault."""

import json
import math
import re

import pytest
import torch
import torch.nn.functional as F

from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.lessons.loss_lab import (
    LOSS_SETTINGS,
    LossBatch,
    batch_losses,
    loss_batch,
)
from mlm_core.losses import token_counts, token_frequency_weights
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.museum import (
    COSINE_BUGGY,
    COSINE_CORRECT,
    EXHIBITS,
    FULL_LOSS,
    AuditCheck,
    Exhibit,
    audit_batch,
    batch_to_json,
    exhibit_rows,
    load_batch_file,
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
    from mlm_core.bundled import workshop_sentences
    from mlm_core.models import load_masked_lm

    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    counts = token_counts(tokenizer, workshop_sentences(), model.get_output_embeddings().weight.shape[0])
    return loss_batch(model, tokenizer, TEXTS, MaskingConfig(), seed=0, counts=counts)


@pytest.fixture(scope="module")
def exhibits(batch):
    return {e.key: e for e in run_exhibits(batch)}


def test_every_exhibit_differs(batch, exhibits):
    assert list(exhibits) == list(EXHIBITS) and len(exhibits) == 10
    for e in exhibits.values():
        assert isinstance(e, Exhibit) and e.title and e.why and e.unit
        assert e.differs, (e.key, e.wrong_value, e.right_value)
    by = exhibits
    assert by["zero_selected_nan"].right_value == 0.0 and by["zero_selected_nan"].wrong_value != by["zero_selected_nan"].wrong_value
    assert by["special_ids_hardcoded"].right_value == 0 and by["special_ids_hardcoded"].wrong_value == 2 * len(TEXTS)
    assert by["in_place_masking"].right_value == 0 and by["in_place_masking"].wrong_value > 0
    assert by["random_overwritten"].wrong_value < 5 < by["random_overwritten"].right_value
    assert "[PAD]" in by["negatives_over_positions"].details["negatives (buggy)"]


def test_correct_values_are_the_loss_pages(batch, exhibits):
    """Same batch, same settings, same numbers: the museum's "correct" values are batch_losses'."""
    page = {name: float(out.loss) for name, out in batch_losses(batch).items()}
    for key in ("loss_only_at_mask", "labels_never_ignored", "wrong_ignore_index"):
        assert exhibits[key].right_value == page["full"], key
    assert exhibits["weighted_mean"].right_value == page["weighted"]
    for key in ("sampled_without_true_class", "negatives_over_positions"):
        assert exhibits[key].right_value == page["sampled"], key
        assert exhibits[key].also[FULL_LOSS] == page["full"], key


def test_sampled_exhibits_show_full_loss_and_cosines(batch, exhibits):
    """The "right" sampled value is the estimate of the full loss, shown with it and with gradient cosines."""
    outputs = batch_losses(batch)
    for key in ("sampled_without_true_class", "negatives_over_positions"):
        e = exhibits[key]
        buggy = e.also[COSINE_BUGGY]
        correct = e.also[COSINE_CORRECT]
        assert correct == outputs["sampled"].diagnostics["grad_cosine"]
        assert -1 <= buggy <= 1 and correct > buggy
        assert abs(e.right_value - e.also[FULL_LOSS]) < abs(e.wrong_value - e.also[FULL_LOSS])
    # Without the true class the gradient has nothing to do with the full loss's.
    assert abs(exhibits["sampled_without_true_class"].also[COSINE_BUGGY]) < 0.3


def test_labels_never_ignored_shows_its_parts(batch, exhibits):
    """The buggy loss is the count-weighted mean of its parts: selected (= the right loss), copying,
    [CLS]/[SEP] and padding, each shown separately."""
    e = exhibits["labels_never_ignored"]
    means = dict(e.also)
    counts = {k.removeprefix("positions: "): v for k, v in e.details.items()}
    assert set(means) == set(counts) == {"selected: the right loss", "unselected: copying", "[CLS] / [SEP]", "padding"}
    assert sum(counts.values()) == batch.original_ids.numel()
    assert counts["[CLS] / [SEP]"] == 2 * len(TEXTS) and counts["padding"] == int((batch.attention_mask == 0).sum())
    mixed = sum(counts[k] * means[k] for k in means if counts[k]) / sum(counts.values())
    assert abs(mixed - e.wrong_value) < 1e-4
    assert abs(means["selected: the right loss"] - e.right_value) < 1e-4
    assert ("above" if e.wrong_value > e.right_value else "below") in e.why


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span", "exact_count"])
def test_hard_coded_special_ids_expose_cls_and_sep_under_every_rule(tokenizer, strategy):
    """The exhibit says [CLS] and [SEP] "get masked" with the bug. Under whole-word and span masking the buggy
    draw used the tokenizer's word ids, where [CLS]/[SEP] have none (-1), so it never selected one (0 in 20
    seeds): the exhibit's own numbers contradicted its text. At p = 0.5, over 10 seeds, some are selected."""
    from mlm_core.bundled import workshop_sentences
    from mlm_core.lessons.loss_lab import pick_sentences

    selected = 0
    for seed in range(10):
        b = loss_batch(None, tokenizer, pick_sentences(workshop_sentences(), 8, seed),
                       MaskingConfig(strategy=strategy, mlm_probability=0.5), seed=seed)
        e = EXHIBITS["special_ids_hardcoded"](b)
        assert e.wrong_value == 16 and e.right_value == 0  # [CLS] and [SEP] of 8 rows left open
        selected += e.details["special tokens selected in this draw (buggy)"]
        assert e.details["special tokens selected (correct)"] == 0
    assert selected > 0


def test_random_overwritten_one_order():
    """Random first, then [MASK]: the bug leaves r(1 − m) random and (1 − r)(1 − m) unchanged; the fix in
    the same order gives r and 1 − m − r. Shares over 200 copies, within 4 standard errors."""
    from mlm_core.bundled import load_default_tokenizer

    tok = load_default_tokenizer()
    for cfg in (MaskingConfig(), MaskingConfig(mask_replace_prob=0.6, random_replace_prob=0.3)):
        b = loss_batch(None, tok, TEXTS, cfg, seed=3)
        e = EXHIBITS["random_overwritten"](b)
        r, m = cfg.random_replace_prob, cfg.mask_replace_prob
        n = e.details["selected tokens"]
        tol = lambda p: 100 * 4 * math.sqrt(p * (1 - p) / n)  # noqa: E731
        expected_wrong = {"[MASK]": m, "random": r * (1 - m), "unchanged": (1 - r) * (1 - m)}
        expected_right = {"[MASK]": m, "random": r, "unchanged": 1 - m - r}
        for k, p in expected_wrong.items():
            assert abs(e.details[f"{k} share, buggy (%)"] - 100 * p) <= tol(p), (k, e.details)
        for k, p in expected_right.items():
            assert abs(e.details[f"{k} share, correct (%)"] - 100 * p) <= tol(p), (k, e.details)
        assert e.wrong_value == e.details["random share, buggy (%)"]
        assert "first" in e.why and "0.5" not in e.why and "[MASK] first" not in e.why


def test_weighted_exhibit_shows_both_conventions(batch, exhibits):
    e = exhibits["weighted_mean"]
    weights = token_frequency_weights(batch.counts, scheme=LOSS_SETTINGS.scheme, smoothing=LOSS_SETTINGS.smoothing)
    ce = F.cross_entropy(batch.logits, batch.targets, reduction="none")
    w = weights[batch.targets]
    assert abs(e.wrong_value - float((w * ce).mean())) < 1e-5
    assert abs(e.right_value - float(F.cross_entropy(batch.logits, batch.targets, weight=weights))) < 1e-5
    assert e.labels == ("(w·CE).mean()", "Σ w·CE / Σ w") and "convention" in e.why


def test_one_vocabulary_and_readable_numbers(exhibits):
    """Every exhibit speaks the audit's vocabulary: original_ids (before masking), input_ids (what the
    model sees), labels; tables print numbers with 3-4 significant digits."""
    code = {k: e.wrong_code + "\n" + e.right_code for k, e in exhibits.items()}
    assert "torch.isin(original_ids" in code["special_ids_hardcoded"]
    assert "labels = original_ids.clone()" in code["labels_never_ignored"]
    assert "input_ids = original_ids.clone()" in code["in_place_masking"]
    assert "labels[input_ids != tokenizer.mask_token_id]" in code["loss_only_at_mask"]
    for k, text in code.items():
        assert "input_ids.clone()" not in text.replace("original_ids.clone()", ""), k  # originals are original_ids
    for e in exhibits.values():
        for row in exhibit_rows(e):
            assert not re.search(r"\d\.\d{5,}", row["value"]), (e.key, row)


def test_exhibits_are_reproducible(batch):
    a = run_exhibits(batch, ["random_overwritten", "sampled_without_true_class"])
    b = run_exhibits(batch, ["random_overwritten", "sampled_without_true_class"])
    assert [(e.wrong_value, e.right_value) for e in a] == [(e.wrong_value, e.right_value) for e in b]


def test_exhibits_without_a_model(tokenizer):
    """The mask-only exhibits compute their numbers from the masks alone; the others ask for a model."""
    from mlm_core.masking import Decision
    from mlm_core.museum import REPEATS

    plain = loss_batch(None, tokenizer, TEXTS, MaskingConfig(), seed=1)
    assert isinstance(plain, LossBatch) and plain.logits is None
    decisions = plain.result.decisions
    selected = int((plain.labels != IGNORE_INDEX).sum())
    assert selected > 0

    hardcoded = EXHIBITS["special_ids_hardcoded"](plain)
    assert (hardcoded.wrong_value, hardcoded.right_value) == (2 * len(TEXTS), 0)  # each row's [CLS] and [SEP]
    assert hardcoded.details["unprotected tokens"] == "[CLS], [SEP]"

    at_mask = EXHIBITS["loss_only_at_mask"](plain)  # without logits it counts the positions in the loss
    assert at_mask.unit == "positions in the loss"
    assert at_mask.wrong_value == int((decisions == Decision.MASK).sum()) and at_mask.right_value == selected
    assert at_mask.details["random positions dropped"] + at_mask.details["unchanged positions dropped"] \
        == selected - at_mask.wrong_value

    nan = EXHIBITS["zero_selected_nan"](plain)
    assert math.isnan(nan.wrong_value) and nan.right_value == 0.0 and nan.details["M (selected rows)"] == 0

    in_place = EXHIBITS["in_place_masking"](plain)
    changed = int(((decisions == Decision.MASK) | (decisions == Decision.RANDOM)).sum())
    assert 0 < in_place.wrong_value <= changed and in_place.right_value == 0

    overwritten = EXHIBITS["random_overwritten"](plain)  # random share: 0.1 * (1 - 0.8) buggy, 0.1 correct
    n = overwritten.details["selected tokens"]
    assert n > 5 * REPEATS  # about 15% of the batch's words, REPEATS times
    for value, p in ((overwritten.wrong_value, 0.02), (overwritten.right_value, 0.10)):
        assert abs(value / 100 - p) < 5 * math.sqrt(p * (1 - p) / n)  # 5 binomial standard errors
    assert all(e.differs for e in (hardcoded, nan, in_place, overwritten))

    for needs_model in ("weighted_mean", "labels_never_ignored", "wrong_ignore_index", "sampled_without_true_class",
                        "negatives_over_positions"):
        with pytest.raises(InputError):
            EXHIBITS[needs_model](plain)


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


@pytest.mark.parametrize("strategy", ["exact_count", "span"])
def test_audit_expects_the_rules_own_count(tokenizer, strategy):
    """A correct batch of 256 workshop sentences masked by exact count or span passes the audit with that rule.
    These rules fix each row's count from its length (Google's count: ~18.6% of the tokens of short sentences),
    so a test against p = 15% ± 4 standard errors failed 19 exact-count batches of 20 and blamed 'labels never
    ignored'. A row past its count fails (the old test let two extra labels in one row pass, for both rules)."""
    from mlm_core.bundled import workshop_sentences

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
    from mlm_core.bundled import workshop_sentences

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


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span", "exact_count"])
def test_exhibits_run_with_every_masking_rule(batch, strategy):
    """Both pages use the learner's masking rule: every exhibit runs with each strategy."""
    rule = MaskingConfig(strategy=strategy, mlm_probability=0.3)
    b = loss_batch(batch.model, batch.tokenizer, TEXTS, rule, seed=2, counts=batch.counts)
    exhibits = run_exhibits(b)
    assert len(exhibits) == 10 and b.config == rule
