"""Bug museum: every exhibit's wrong number differs from the right one, and its right numbers are the
Loss page's."""

import math
import re

import pytest
import torch.nn.functional as F

from mlm_core.errors import InputError
from mlm_core.lessons.loss_lab import (
    LOSS_SETTINGS,
    LossBatch,
    batch_losses,
    loss_batch,
)
from mlm_core.lessons.museum import (
    COSINE_BUGGY,
    COSINE_CORRECT,
    EXHIBITS,
    FULL_LOSS,
    REPEATS,
    Exhibit,
    exhibit_rows,
    run_exhibits,
)
from mlm_core.losses import token_counts, token_frequency_weights
from mlm_core.masking import IGNORE_INDEX, MaskingConfig

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
    # Issue 25 §3.4: a ratio (12.137 / 7.214 = 1.683 on the default batch), so "differ by a factor of" it
    assert abs(e.wrong_value / e.right_value - float(w.mean())) < 1e-4 and "differ by a factor of" in e.why


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


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span", "exact_count"])
def test_exhibits_run_with_every_masking_rule(batch, strategy):
    """Both pages use the learner's masking rule: every exhibit runs with each strategy."""
    rule = MaskingConfig(strategy=strategy, mlm_probability=0.3)
    b = loss_batch(batch.model, batch.tokenizer, TEXTS, rule, seed=2, counts=batch.counts)
    exhibits = run_exhibits(b)
    assert len(exhibits) == 10 and b.config == rule
