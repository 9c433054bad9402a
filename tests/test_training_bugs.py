"""Bugs that train (training.bugs) and variants at different masking rates: each bug, a named option of
the loop, reproduces its number on a hand-computed case; its clean twin is a lone clean run bit for bit;
an evaluation bug trains exactly like the clean run; variants at 15% and 40% share one frozen eval mask."""

import copy
import statistics
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from mlm_core import seeds
from mlm_core.data import special_ids
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.training import (BUGS, Batches, Stream, TrainConfig, chunk_token_counts, current_world, evaluate,
                               frequency_buckets, make_chunks, make_eval_set, mask_rows, mask_scheme, split_chunks,
                               train, train_variants)
from mlm_core.training import bugs
from tests.conftest import SMALL_CORPUS as CORPUS
from tests.test_training import model, tok  # noqa: F401  (the same small model and tokenizer fixtures)
from tests.test_training import quick as quick_run

pytestmark = pytest.mark.usefixtures("one_thread")


def quick(**overrides):
    """test_training's quick run, with dropout on (the evaluation-dropout bug needs it)."""
    return quick_run(**{"dropout": True, **overrides})


def curves(result):
    """A run's curves without the timings (which differ run to run)."""
    timing = {"tokens_per_s", "elapsed_s", "eval_s"}
    return ([{k: v for k, v in r.items() if k not in timing} for r in result.steps],
            [{k: v for k, v in r.items() if k not in timing and not k.startswith("reported")} for r in result.evals],
            result.probes)


def same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def chunk_row(tok, words="the cat sat", pad=3):
    """One (1, T) chunk: [CLS] words [SEP] and `pad` [PAD]s."""
    return make_chunks(tok, [words], seq_len=len(tok.tokenize(words)) + 2 + pad, overlap=0)


def mask_kwargs(tok):
    return dict(mask_token_id=tok.mask_token_id, vocab_size=len(tok), special_ids=special_ids(tok))


# ------------------------------------------------------------------------------------- names and config


def test_every_bug_is_a_named_option_of_one_step():
    assert set(BUGS.values()) == {bugs.MASKING, bugs.LABELS, bugs.EVALUATION}
    for name in BUGS:
        assert TrainConfig(bug=name).bug == name
    with pytest.raises(InputError, match="bug"):
        TrainConfig(bug="loss_off_by_one")
    # an evaluation bug trains on the clean masks; a masking or labels bug on its own
    assert mask_scheme(TrainConfig(bug="eval_dropout")) == mask_scheme(TrainConfig())
    assert mask_scheme(TrainConfig(bug="labels_never_ignored")) != mask_scheme(TrainConfig())


def test_eval_masking_round_trips_and_is_the_held_out_rule():
    cfg = TrainConfig(masking=MaskingConfig(mlm_probability=0.4), eval_masking=MaskingConfig())
    assert cfg.held_out_masking == MaskingConfig() and TrainConfig().held_out_masking == MaskingConfig()
    back = TrainConfig.from_dict(cfg.to_dict())
    assert back == cfg and back.eval_masking.mlm_probability == 0.15


# ------------------------------------------------------------------------------------- the clean twin


@pytest.mark.parametrize("bug", list(BUGS))
def test_the_clean_twin_is_a_lone_clean_run_bit_for_bit(model, tok, bug):
    """Same weights, batches, masks, dropout and seed: training a buggy twin beside it changes nothing."""
    cfg = quick()
    lone = train(model, tok, CORPUS, cfg)
    pair = train_variants(model, tok, CORPUS, {"clean": cfg, "twin": replace(cfg, bug=bug)})
    assert curves(pair["clean"]) == curves(lone)
    assert same_weights(pair["clean"].model, lone.model)
    if bugs.step_of(bug) == bugs.EVALUATION:  # the bug changes what it reports, never what it trains on
        assert curves(pair["twin"])[0] == curves(lone)[0] and same_weights(pair["twin"].model, lone.model)
        assert [e["loss"] for e in pair["twin"].evals] == [e["loss"] for e in lone.evals]
        assert any(e["reported_loss"] != e["loss"] for e in pair["twin"].evals)
        assert all("reported_loss" not in e for e in lone.evals)
    else:
        assert [r["loss"] for r in pair["twin"].steps] != [r["loss"] for r in lone.steps]


# ------------------------------------------------------------------------------------- hand-computed cases


def test_labels_never_ignored_makes_every_position_a_target(tok):
    chunks = chunk_row(tok)
    ids = chunks.input_ids[0].tolist()  # [CLS] the cat sat [SEP] [PAD] [PAD] [PAD]
    for seed in range(5):
        _, clean = mask_rows(chunks, MaskingConfig(), row_seeds=[seed], **mask_kwargs(tok))
        _, buggy = mask_rows(chunks, MaskingConfig(), row_seeds=[seed], bug="labels_never_ignored", **mask_kwargs(tok))
        assert buggy[0].tolist() == ids  # [CLS], [SEP] and padding are targets too
        assert all(clean[0, p] == IGNORE_INDEX for p in (0, 4, 5, 6, 7))


def test_labels_never_ignored_trains_on_the_loss_over_every_position(model, tok):
    """The twin's first training loss is the mean cross-entropy over all B x T positions of its batch (the
    museum's exhibit 5 number), computed here by hand from the model's logits at every position."""
    cfg = quick(dropout=False, steps=1, eval_every=1)
    result = train_variants(model, tok, CORPUS, {"twin": replace(cfg, bug="labels_never_ignored")})["twin"]
    train_chunks, _, _ = split_chunks(tok, CORPUS, cfg)
    clean_scheme, buggy_scheme = mask_scheme(cfg), mask_scheme(replace(cfg, bug="labels_never_ignored"))
    batches = Batches(train_chunks, cfg, current_world(), cfg.batch_size, schemes=[clean_scheme, buggy_scheme],
                      **mask_kwargs(tok))
    try:
        step = batches.get(0)
    finally:
        batches.close()
    (_, inputs, attention, clean_labels), = step[clean_scheme]
    (_, buggy_inputs, _, labels), = step[buggy_scheme]
    original = torch.where(clean_labels != IGNORE_INDEX, clean_labels, inputs)  # (B, T) the ids before masking
    assert torch.equal(buggy_inputs, inputs) and torch.equal(labels, original)
    with torch.no_grad():
        logits = model(input_ids=inputs, attention_mask=attention).logits  # (B, T, V)
    by_hand = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), original.reshape(-1)).item()
    assert result.steps[0]["masked_tokens"] == inputs.numel()
    assert result.steps[0]["loss"] == pytest.approx(by_hand, rel=1e-5)
    # the clean loss of the same batch averages over the selected positions only: another number
    clean = F.cross_entropy(logits[clean_labels != IGNORE_INDEX], clean_labels[clean_labels != IGNORE_INDEX]).item()
    assert abs(clean - by_hand) > 0.01


def test_special_tokens_masked_selects_cls_and_sep(tok):
    """Ids 0 and 1 hard-coded as the special tokens: with every eligible token selected (p = 1), [CLS] and
    [SEP] are selected too, 2 per row (the museum's exhibit 1), padding (id 0) is not; the clean rule: 0."""
    chunks = chunk_row(tok)
    everything = MaskingConfig(mlm_probability=1.0)
    for strategy in ("token", "whole_word"):
        rule = replace(everything, strategy=strategy)
        _, clean = mask_rows(chunks, rule, row_seeds=[0], **mask_kwargs(tok))
        _, buggy = mask_rows(chunks, rule, row_seeds=[0], bug="special_tokens_masked", **mask_kwargs(tok))
        special = torch.tensor([tok.cls_token_id, tok.sep_token_id])
        assert int(torch.isin(buggy[0], special).sum()) == 2 and int(torch.isin(clean[0], special).sum()) == 0
        assert (buggy[0] != IGNORE_INDEX).sum() == 5 and (clean[0] != IGNORE_INDEX).sum() == 3  # padding never


@pytest.mark.parametrize("strategy", ["token", "whole_word"])
def test_special_tokens_masked_differs_from_the_clean_masks_only_at_cls_and_sep(tok, strategy):
    """Issue 43 §4.1: drawn in the clean rule's own stream, the two extra "words" shifted every later draw (189
    positions of the lesson's run differed, 13 of them [CLS]/[SEP]). Now the clean rule's decisions come first and
    [CLS]/[SEP] are selected from a stream of their own: the twins differ only there, and they are selected at p."""
    chunks = make_chunks(tok, CORPUS * 6, seq_len=24, overlap=4)
    rule = MaskingConfig(mlm_probability=0.3, strategy=strategy)
    seeds_ = range(len(chunks))
    clean_ids, clean = mask_rows(chunks, rule, row_seeds=seeds_, **mask_kwargs(tok))
    bug_ids, buggy = mask_rows(chunks, rule, row_seeds=seeds_, bug="special_tokens_masked", **mask_kwargs(tok))
    specials = torch.isin(chunks.input_ids, torch.tensor([tok.cls_token_id, tok.sep_token_id]))
    differ = (clean != buggy) | (clean_ids != bug_ids)
    assert bool(differ.any()) and not bool((differ & ~specials).any())
    share = float((buggy[specials] != IGNORE_INDEX).float().mean())
    assert 0.15 < share < 0.45, share  # about p = 0.3 of the exposed [CLS] and [SEP]


def _replacement_by_hand(tok, ids, special, row_seed, p, random_given_not_mask):
    """BERT's replacement written out for one row (the draws in mask_tokens' order: select, replace, random,
    random token), with the conditional P(random | not [MASK]) given."""
    g = seeds.generator(row_seed)
    T = ids.numel()
    u, v, w = torch.rand(T, generator=g), torch.rand(T, generator=g), torch.rand(T, generator=g)
    allowed = torch.tensor([i for i in range(len(tok)) if i not in set(special_ids(tok))])
    pick = torch.randint(len(allowed), (T,), generator=g)
    selected = (special == 0) & (u < p)
    to_mask = selected & (v < 0.8)
    to_random = selected & ~to_mask & (w < random_given_not_mask)
    return torch.where(to_random, allowed[pick], ids.masked_fill(to_mask, tok.mask_token_id)), to_random


def test_random_share_misread_draws_random_with_the_unconditional_share(tok):
    """The line `indices_random = bernoulli(0.1) & selected & ~indices_replaced` (0.5 "fixed" to 0.1): the
    buggy option is that line exactly, and the clean rule is the same line with 0.5."""
    chunks = make_chunks(tok, CORPUS, seq_len=24, overlap=4)
    rule = MaskingConfig(mlm_probability=0.5)
    for r in range(len(chunks)):
        row = chunks.take([r])
        ids, special = row.input_ids[0], row.special_tokens_mask[0]
        for bug, conditional in (("random_share_misread", 0.1), ("", 0.5)):
            got, _ = mask_rows(row, rule, row_seeds=[100 + r], bug=bug, **mask_kwargs(tok))
            expected, _ = _replacement_by_hand(tok, ids, special, 100 + r, 0.5, conditional)
            assert torch.equal(got[0], expected), (bug, r)


def test_random_share_misread_gives_2_percent_random(tok):
    """Over many rows the share of selected tokens that are random is 0.2 x 0.1 = 2% (BERT's rule: 10%),
    within 4 standard errors."""
    chunks = make_chunks(tok, CORPUS * 40, seq_len=24, overlap=4)
    rule = MaskingConfig(mlm_probability=0.5)
    shares = {}
    for bug in ("random_share_misread", ""):
        randoms = selected = 0
        for r in range(len(chunks)):
            row = chunks.take([r])
            ids, special = row.input_ids[0], row.special_tokens_mask[0]
            _, is_random = _replacement_by_hand(tok, ids, special, r, 0.5, 0.1 if bug else 0.5)
            _, labels = mask_rows(row, rule, row_seeds=[r], bug=bug, **mask_kwargs(tok))
            randoms += int(is_random.sum())
            selected += int((labels != IGNORE_INDEX).sum())
        shares[bug] = (randoms / selected, selected)
    for bug, expected in (("random_share_misread", 0.02), ("", 0.10)):
        share, n = shares[bug]
        assert abs(share - expected) < 4 * (expected * (1 - expected) / n) ** 0.5, (bug, share, n)


def _eval_parts(tok, cfg):
    train_chunks, eval_chunks, _ = split_chunks(tok, CORPUS, cfg)
    buckets = frequency_buckets(chunk_token_counts(train_chunks, len(tok)))
    make = lambda redraw=None: make_eval_set(eval_chunks, cfg, tok, buckets=buckets, micro_batch=cfg.batch_size,  # noqa: E731
                                             vocab_size=len(tok), redraw=redraw)
    return make


def test_eval_remasked_moves_the_same_models_loss(model, tok):
    """The frozen mask gives one number for one model; masking the held-out text afresh gives another at
    every pass, with the model unchanged: the noise the bug adds to a held-out curve."""
    cfg = quick(dropout=False)
    make = _eval_parts(tok, cfg)
    frozen = [evaluate(model, make())["loss"] for _ in range(3)]
    assert len(set(frozen)) == 1 and torch.equal(make().labels, make().labels)
    remasked = [evaluate(model, make(redraw=k))["loss"] for k in range(8)]
    assert statistics.pstdev(remasked) > 0.01
    # the twin reports, at step 0 (weights still the base model's), the loss on redraw 0
    twin = train_variants(model, tok, CORPUS, {"twin": replace(cfg, bug="eval_remasked")})["twin"]
    assert twin.evals[0]["reported_loss"] == pytest.approx(remasked[0], rel=1e-6)
    assert twin.evals[0]["loss"] == pytest.approx(frozen[0], rel=1e-6)


def test_eval_dropout_reports_the_loss_with_dropout_on(model, tok):
    """At step 0 the twin reports the held-out loss of the base model in train mode, dropout seeded as the
    loop seeds it, computed here by hand from full forward passes; the frozen loss is dropout-free."""
    cfg = quick(dropout=False)
    make = _eval_parts(tok, cfg)
    eval_set = make()
    twin = train_variants(model, tok, CORPUS, {"twin": replace(cfg, bug="eval_dropout")})["twin"]
    m = copy.deepcopy(model).train(True)
    total, n = 0.0, 0
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seeds.seed_for(cfg.seed, Stream.EVAL_DROPOUT, 0))
        for s in range(0, eval_set.input_ids.shape[0], eval_set.micro_batch):
            labels = eval_set.labels[s:s + eval_set.micro_batch]
            if not bool((labels != IGNORE_INDEX).any()):
                continue
            logits = m(input_ids=eval_set.input_ids[s:s + eval_set.micro_batch],
                       attention_mask=eval_set.attention_mask[s:s + eval_set.micro_batch]).logits
            at = labels != IGNORE_INDEX
            total += F.cross_entropy(logits[at], labels[at], reduction="sum").item()
            n += int(at.sum())
    assert twin.evals[0]["reported_loss"] == pytest.approx(total / n, rel=1e-5)
    assert twin.evals[0]["loss"] == pytest.approx(evaluate(model, eval_set)["loss"], rel=1e-6)
    assert abs(twin.evals[0]["reported_loss"] - twin.evals[0]["loss"]) > 1e-3


# ------------------------------------------------------------------------------------- masking rates


def test_variants_at_other_rates_need_one_frozen_eval_mask(model, tok):
    cfg = quick(steps=2)
    rates = {f"{p:.0%}": replace(cfg, masking=MaskingConfig(mlm_probability=p)) for p in (0.15, 0.4)}
    with pytest.raises(InputError, match="eval_masking"):
        train_variants(model, tok, CORPUS, rates)
    fair = {name: replace(c, eval_masking=MaskingConfig()) for name, c in rates.items()}
    results = train_variants(model, tok, CORPUS, fair)
    first = [r.evals[0] for r in results.values()]  # the same weights on the same frozen 15% mask
    assert first[0]["loss"] == first[1]["loss"] and first[0]["masked_tokens"] == first[1]["masked_tokens"]
    steps = [r.steps[0]["masked_tokens"] for r in results.values()]
    assert steps[1] > 1.5 * steps[0]  # the 40% run predicts more positions of the same chunks (2.7x expected)


@pytest.mark.parametrize("strategy", ["token", "whole_word", "exact_count"])
def test_masks_at_higher_rates_contain_the_lower_rates_masks(tok, strategy):
    """The same per-sample seeds: a token selected at 15% is selected at 30% and at 40% too, on the same chunks
    (span masking draws its spans one after another, so there it does not hold: the page says so, issue 43)."""
    cfg = quick()
    train_chunks, _, _ = split_chunks(tok, CORPUS, cfg)
    schemes = [mask_scheme(replace(cfg, masking=MaskingConfig(mlm_probability=p, strategy=strategy)))
               for p in (0.15, 0.3, 0.4)]
    batches = Batches(train_chunks, cfg, current_world(), cfg.batch_size, schemes=schemes, **mask_kwargs(tok))
    try:
        for step in range(3):
            got = batches.get(step)
            picked = [got[s][0].labels != IGNORE_INDEX for s in schemes]  # (B, T) each
            attention = [got[s][0].attention_mask for s in schemes]
            assert all(torch.equal(a, attention[0]) for a in attention)
            assert bool((picked[0] <= picked[1]).all()) and bool((picked[1] <= picked[2]).all())
            assert int(picked[2].sum()) > int(picked[0].sum())
    finally:
        batches.close()


def test_a_variant_that_learns_from_the_first_texts_gets_the_same_inputs_and_fewer_answers(tok):
    """Issue 43 §3: one run of the side by side learns from Veldoria's sentences alone, its twin from the twin
    countries' too, on the same batches: the same masked inputs, labels only on the first N texts' tokens."""
    first = ["the cat sat on the mat .", "a dog ran in the park ."] * 3
    rest = ["the sun rose over the hills .", "fish swim in the sea ."] * 3
    cfg = quick(learn_from_texts=len(first))
    chunks = make_chunks(tok, first + rest, seq_len=24, overlap=4)
    assert set(chunks.text_ids[chunks.special_tokens_mask == 0].tolist()) == set(range(len(first + rest)))
    schemes = [mask_scheme(replace(cfg, learn_from_texts=0)), mask_scheme(cfg)]
    batches = Batches(chunks, cfg, current_world(), cfg.batch_size, schemes=schemes, **mask_kwargs(tok))
    try:
        for step in range(4):
            got = batches.get(step)
            every, few = got[schemes[0]][0], got[schemes[1]][0]
            assert torch.equal(every.input_ids, few.input_ids)
            asked = few.labels != IGNORE_INDEX
            assert bool((few.labels[asked] == every.labels[asked]).all())
            late = torch.zeros_like(asked)
            for r, index in enumerate(batches._chunk_index(step * cfg.batch_size + i) for i in range(cfg.batch_size)):
                late[r] = chunks.text_ids[index] >= len(first)
            assert not bool((asked & late).any()) and bool(((every.labels != IGNORE_INDEX) & late).any() or step)
    finally:
        batches.close()
