"""mask_tokens: exact invariants, statistics with stated tolerances, and parity with Hugging Face."""

import math

import pytest
import torch

from mlm_core import IGNORE_INDEX, Decision, InputError, MaskingConfig, encode, mask_batch, mask_tokens
from mlm_core.data import special_ids
from mlm_core.masking_stats import collator_snippet, masking_statistics, split_chisquare, token_trace

MASK_ID, PAD_ID, CLS_ID, SEP_ID, UNK_ID, V = 103, 0, 101, 102, 100, 30522
SPECIAL = (PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID)


def synthetic_batch(B=64, T=32, seed=0):
    """Rows of random ordinary ids framed by [CLS] ... [SEP], then padding of varied length."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, V, (B, T), generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    special = torch.zeros(B, T, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        ids[b, 0], ids[b, n - 1] = CLS_ID, SEP_ID
        ids[b, n:] = PAD_ID
        special[b, 0] = special[b, n - 1] = 1
        special[b, n:] = 1
    # word ids: pairs of tokens form a word, -1 on special tokens
    word_ids = (torch.arange(T) // 2).expand(B, T).clone()
    word_ids[special.bool()] = -1
    attention = (ids != PAD_ID).long()
    return ids, special, word_ids, attention


def run(config, seed=0, batch=None, **kw):
    ids, special, word_ids, attention = batch or synthetic_batch()
    return mask_tokens(ids, special, config, mask_token_id=MASK_ID, vocab_size=V,
                       generator=torch.Generator().manual_seed(seed), word_ids=word_ids,
                       special_ids=SPECIAL, attention_mask=attention, **kw)


STRATEGIES = ["token", "whole_word", "span", "exact_count"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_exact_invariants(strategy):
    batch = synthetic_batch()
    ids, special, word_ids, _ = batch
    before = ids.clone()
    r = run(MaskingConfig(mlm_probability=0.3, strategy=strategy), batch=batch)
    assert torch.equal(ids, before), "inputs must never be edited in place"
    selected = r.decisions != Decision.NOT_SELECTED
    assert torch.equal(r.labels == IGNORE_INDEX, ~selected), "labels are -100 exactly where NOT_SELECTED"
    assert torch.equal(r.labels[selected], ids[selected])
    assert not selected[special.bool()].any(), "special tokens and padding are never selected"
    assert (r.input_ids[r.decisions == Decision.MASK] == MASK_ID).all()
    unchanged = r.decisions == Decision.UNCHANGED
    assert torch.equal(r.input_ids[unchanged], ids[unchanged])
    random_ids = r.input_ids[r.decisions == Decision.RANDOM]
    assert not torch.isin(random_ids, torch.tensor(SPECIAL)).any(), "random replacements are non-special ids"
    not_selected = ~selected
    assert torch.equal(r.input_ids[not_selected], ids[not_selected])
    assert selected.any() and (r.decisions == Decision.MASK).any()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_same_seed_same_result_and_global_rng_untouched(strategy):
    config = MaskingConfig(strategy=strategy)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = run(config, seed=7), run(config, seed=7)
    assert torch.equal(torch.get_rng_state(), state), "the global RNG must not be used"
    for name in ("input_ids", "labels", "decisions"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert a.draws.keys() == b.draws.keys()
    for name in a.draws:
        assert torch.equal(a.draws[name], b.draws[name])
    c = run(config, seed=8)
    assert not torch.equal(a.decisions, c.decisions)


def test_single_sentence_matches_rank():
    ids, special, word_ids, attention = synthetic_batch(B=1)
    r = mask_tokens(ids[0], special[0], MaskingConfig(mlm_probability=0.5), mask_token_id=MASK_ID,
                    vocab_size=V, generator=torch.Generator().manual_seed(0), special_ids=SPECIAL)
    assert r.input_ids.shape == ids[0].shape and r.decisions.dim() == 1
    assert all(d.shape == ids[0].shape for d in r.draws.values())


def test_draws_explain_each_decision():
    config = MaskingConfig(mlm_probability=0.3)
    r = run(config)
    u, v, w = r.draws["select"], r.draws["replace"], r.draws["random"]
    eligible = synthetic_batch()[1] == 0
    assert torch.equal(r.decisions != Decision.NOT_SELECTED, eligible & (u < 0.3))
    sel = r.decisions != Decision.NOT_SELECTED
    assert torch.equal(r.decisions[sel] == Decision.MASK, v[sel] < 0.8)
    rest = sel & (v >= 0.8)
    assert torch.equal(r.decisions[rest] == Decision.RANDOM, w[rest] < 0.5)  # 0.1 / 0.2


def test_trace_off_gives_same_decisions_without_draws():
    config = MaskingConfig()
    a, b = run(config, trace=True), run(config, trace=False)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.decisions, b.decisions)
    assert b.draws == {} and "select" in a.draws


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mlm_probability=1.5), "between 0 and 1"),
        (dict(mlm_probability=-0.1), "between 0 and 1"),
        (dict(mask_replace_prob=0.8, random_replace_prob=0.3), "more than 1"),
        (dict(strategy="sentence"), "strategy"),
        (dict(mlm_probability=float("nan")), "between 0 and 1"),
    ],
)
def test_config_rejects_impossible_values(kwargs, message):
    with pytest.raises(InputError, match=message):
        MaskingConfig(**kwargs)


def test_conditional_random_probability_is_derived():
    assert MaskingConfig().random_given_not_mask == pytest.approx(0.5)
    assert MaskingConfig(mask_replace_prob=0.5, random_replace_prob=0.25).random_given_not_mask == pytest.approx(0.5)
    assert MaskingConfig(mask_replace_prob=1.0, random_replace_prob=0.0).random_given_not_mask == 0.0
    assert MaskingConfig().unchanged_prob == pytest.approx(0.1)


def test_probability_zero_selects_nothing_and_one_selects_all():
    batch = synthetic_batch()
    for strategy in STRATEGIES:
        r = run(MaskingConfig(mlm_probability=0.0, strategy=strategy), batch=batch)
        assert (r.decisions == Decision.NOT_SELECTED).all(), strategy
        assert (r.labels == IGNORE_INDEX).all()
    r = run(MaskingConfig(mlm_probability=1.0), batch=batch)
    assert torch.equal(r.decisions != Decision.NOT_SELECTED, batch[1] == 0)


def within_se(observed, expected, n, k=4.0):
    se = math.sqrt(expected * (1 - expected) / n)
    return abs(observed - expected) <= k * se, (observed, expected, k * se)


@pytest.mark.parametrize("p, mask, rand", [(0.15, 0.8, 0.1), (0.3, 0.5, 0.25)])
def test_rates_within_four_standard_errors(p, mask, rand):
    """Over >= 200k eligible tokens, the selection rate and each share are within 4 SE."""
    batch = synthetic_batch(B=2200, T=128, seed=1)
    r = run(MaskingConfig(mlm_probability=p, mask_replace_prob=mask, random_replace_prob=rand), seed=2, batch=batch)
    eligible = int((batch[1] == 0).sum())
    assert eligible >= 200_000
    selected = int((r.decisions != Decision.NOT_SELECTED).sum())
    ok, info = within_se(selected / eligible, p, eligible)
    assert ok, info
    for decision, share in [(Decision.MASK, mask), (Decision.RANDOM, rand), (Decision.UNCHANGED, 1 - mask - rand)]:
        ok, info = within_se(int((r.decisions == decision).sum()) / selected, share, selected)
        assert ok, (decision, info)


def test_whole_word_pieces_share_one_decision_and_rate():
    batch = synthetic_batch(B=1000, T=128, seed=3)
    ids, special, word_ids, _ = batch
    r = run(MaskingConfig(strategy="whole_word"), batch=batch)
    sel = r.decisions != Decision.NOT_SELECTED
    # Every word's pieces are all selected or all not (whole-word decision)...
    n_words = n_selected_words = 0
    for b in range(0, 1000, 50):
        for w in word_ids[b].unique().tolist():
            if w < 0:
                continue
            pieces = sel[b][(word_ids[b] == w) & (special[b] == 0)]
            assert pieces.all() or not pieces.any()
    # ... and the share of selected words is p (within 4 SE over all words).
    draws = r.draws["select"]
    for b in range(1000):
        words = word_ids[b][word_ids[b] >= 0].unique()
        n_words += len(words)
        n_selected_words += sum(bool(sel[b][word_ids[b] == w].any()) for w in words.tolist()) if b < 200 else 0
        assert torch.equal(sel[b][word_ids[b] >= 0], draws[b][word_ids[b] >= 0] < 0.15)
    ok, info = within_se(int(sel.sum()) / int((special == 0).sum()), 0.15, int((special == 0).sum()) // 2)
    assert ok, info


def clipped_geometric_mean(p, cap):
    return sum(k * ((1 - p) ** (k - 1) * p if k < cap else (1 - p) ** (cap - 1)) for k in range(1, cap + 1))


def test_span_masking_contiguous_spans_with_geometric_lengths():
    T = 512
    ids = torch.randint(1000, V, (40, T), generator=torch.Generator().manual_seed(4))
    special = torch.zeros_like(ids)
    special[:, 0] = special[:, -1] = 1
    words = torch.arange(T).expand(40, T).clone() - 1  # one token per word
    words[special.bool()] = -1
    config = MaskingConfig(strategy="span")
    r = mask_tokens(ids, special, config, mask_token_id=MASK_ID, vocab_size=V,
                    generator=torch.Generator().manual_seed(5), word_ids=words, special_ids=SPECIAL)
    span_id, span_len = r.draws["span_id"], r.draws["span_length"]
    lengths = []
    for b in range(40):
        for s in span_id[b].unique().tolist():
            if s < 0:
                continue
            where = (span_id[b] == s).nonzero().squeeze(1)
            assert (where.diff() == 1).all(), "a span is contiguous"
            assert len(where) == int(span_len[b][where[0]]), "a span covers its drawn length"
            lengths.append(len(where))
        selected = int((r.decisions[b] != Decision.NOT_SELECTED).sum())
        budget = round(0.15 * (T - 2))
        assert budget <= selected < budget + config.span_max
    assert max(lengths) <= 10 and min(lengths) >= 1
    mean, expected = sum(lengths) / len(lengths), clipped_geometric_mean(0.2, 10)
    var = sum((x - mean) ** 2 for x in lengths) / len(lengths)
    assert abs(mean - expected) < 4 * math.sqrt(var / len(lengths)), (mean, expected, len(lengths))
    share_one = lengths.count(1) / len(lengths)
    assert abs(share_one - 0.2) < 4 * math.sqrt(0.2 * 0.8 / len(lengths))


def test_exact_count_selects_googles_number():
    batch = synthetic_batch(B=200, T=64, seed=6)
    ids, special, _, attention = batch
    for p in (0.15, 0.5):
        r = run(MaskingConfig(strategy="exact_count", mlm_probability=p), batch=batch)
        n = attention.sum(1).double()  # every token counts, [CLS] and [SEP] included
        expected = torch.clamp(torch.clamp(torch.round(n * p), min=1), max=20).long()
        assert torch.equal((r.decisions != Decision.NOT_SELECTED).sum(1), expected)
    short = mask_tokens(torch.tensor([CLS_ID, 2000, 2001, SEP_ID]), torch.tensor([1, 0, 0, 1]),
                        MaskingConfig(strategy="exact_count"), mask_token_id=MASK_ID, vocab_size=V,
                        generator=torch.Generator().manual_seed(0))
    assert int((short.decisions != 0).sum()) == 1  # max(1, round(4 * 0.15)) = 1


def test_whole_word_needs_word_ids():
    ids, special, _, _ = synthetic_batch(B=2)
    with pytest.raises(InputError, match="word_ids"):
        mask_tokens(ids, special, MaskingConfig(strategy="whole_word"), mask_token_id=MASK_ID,
                    vocab_size=V, generator=torch.Generator())


def test_parity_with_hugging_face_collator(tokenizer):
    """Same text, >= 200k eligible tokens: selection within 0.5 pt, each share within 1.5 pt."""
    from transformers import DataCollatorForLanguageModeling

    from mlm_core.bundled import workshop_sentences

    sentences = workshop_sentences()
    enc = encode(tokenizer, sentences, max_length=128)
    repeats = max(1, math.ceil(200_000 / enc.n_eligible))
    ours = {"eligible": 0, "selected": 0, Decision.MASK: 0, Decision.RANDOM: 0, Decision.UNCHANGED: 0}
    theirs = dict(ours)
    g = torch.Generator().manual_seed(0)
    collator = DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm_probability=0.15, seed=0)
    features = [{"input_ids": row[m.bool()].tolist()} for row, m in zip(enc.input_ids, enc.attention_mask)]
    for _ in range(repeats):
        r = mask_batch(tokenizer, enc, MaskingConfig(), g, trace=False)
        ours["eligible"] += enc.n_eligible
        ours["selected"] += int(r.selected.sum())
        for d in (Decision.MASK, Decision.RANDOM, Decision.UNCHANGED):
            ours[d] += int((r.decisions == d).sum())
        batch = collator(features)
        labels, inputs = batch["labels"], batch["input_ids"]
        selected = labels != IGNORE_INDEX
        theirs["eligible"] += enc.n_eligible
        theirs["selected"] += int(selected.sum())
        theirs[Decision.MASK] += int((selected & (inputs == tokenizer.mask_token_id)).sum())
        theirs[Decision.UNCHANGED] += int((selected & (inputs == labels)).sum())
        theirs[Decision.RANDOM] += int((selected & (inputs != labels) & (inputs != tokenizer.mask_token_id)).sum())
    assert ours["eligible"] >= 200_000
    rate = lambda c: c["selected"] / c["eligible"]  # noqa: E731
    assert abs(rate(ours) - rate(theirs)) < 0.005, (rate(ours), rate(theirs))
    for d in (Decision.MASK, Decision.RANDOM, Decision.UNCHANGED):
        share_ours, share_theirs = ours[d] / ours["selected"], theirs[d] / theirs["selected"]
        assert abs(share_ours - share_theirs) < 0.015, (d, share_ours, share_theirs)


def test_mask_batch_never_selects_tokenizer_specials(tokenizer):
    enc = encode(tokenizer, ["The cat sat on the mat.", "A much longer sentence, with padding for the other one!"])
    r = mask_batch(tokenizer, enc, MaskingConfig(mlm_probability=1.0), torch.Generator().manual_seed(0))
    special_positions = torch.isin(enc.input_ids, torch.tensor(special_ids(tokenizer)))
    assert not r.selected[special_positions].any()
    assert r.selected[~special_positions].all()
    assert tokenizer.pad_token_id in special_ids(tokenizer) and tokenizer.cls_token_id in special_ids(tokenizer)


def test_token_trace_states_the_rule(tokenizer):
    config = MaskingConfig(mlm_probability=0.5)
    enc = encode(tokenizer, "the quick brown fox jumps over the lazy dog again and again")
    r = mask_batch(tokenizer, enc, config, torch.Generator().manual_seed(3))
    row = {"input_ids": r.input_ids[0], "labels": r.labels[0], "decisions": r.decisions[0],
           "draws": {k: v[0] for k, v in r.draws.items()}}
    trace = token_trace(enc.tokens[0], {"special_tokens_mask": enc.special_tokens_mask[0]}, row, config,
                        tokenizer.convert_ids_to_tokens)
    assert trace[0]["rule"].startswith("special")
    for t in trace[1:-1]:
        if t["decision"] == "NOT_SELECTED":
            assert "≥ 0.5 → not selected" in t["rule"]
        else:
            assert "< 0.5 → selected" in t["rule"]
        if t["decision"] == "MASK":
            assert "→ [MASK]" in t["rule"] and t["model_sees"] == "[MASK]"


def test_masking_statistics_and_chisquare(tokenizer):
    stats = masking_statistics(tokenizer, ["The cat sat on the mat.", "Dogs bark at night."], MaskingConfig(),
                               target_tokens=20_000, seed=0)
    assert stats.eligible >= 20_000
    assert abs(stats.selected / stats.eligible - 0.15) < 4 * math.sqrt(0.15 * 0.85 / stats.eligible)
    assert len(stats.per_sentence) == stats.convergence[-1]["sentences"]
    assert 0 in stats.per_sentence  # short sentences often get no selected token
    assert stats.p_value > 1e-4
    # A split far from 80/10/10 is rejected.
    _, p = split_chisquare({Decision.MASK: 500, Decision.RANDOM: 250, Decision.UNCHANGED: 250}, MaskingConfig())
    assert p < 1e-6


def test_collator_snippet_is_valid_python_with_our_settings():
    code, notes = collator_snippet(MaskingConfig(mlm_probability=0.2, mask_replace_prob=0.7, random_replace_prob=0.2))
    compile(code, "<snippet>", "exec")
    assert "mlm_probability=0.2" in code and "mask_replace_prob=0.7" in code and "random_replace_prob=0.2" in code
    assert any("[PAD]" in n for n in notes)
