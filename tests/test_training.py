"""The training loop: it learns, it stops, it leaves the base model and the caller's RNG alone,
variants see the same data, evaluation is full cross-entropy, and empty selections give no NaN."""

import dataclasses
import math
import random
import threading

import pytest
import torch
import torch.nn.functional as F

from mlm_core import training
from mlm_core.training import loop
from mlm_core.data import special_ids
from mlm_core.errors import InputError
from mlm_core.head import GatheredMaskedLM
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.training import TrainConfig, evaluate, make_chunks, train, train_variants
from tests.conftest import SMALL_CORPUS as CORPUS
from tests.conftest import small_model, small_tokenizer

SENTENCE = "The cat sat on the mat."

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tok():
    return small_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return small_model(tok)


def quick(**overrides):
    values = dict(steps=6, batch_size=4, seq_len=24, chunk_overlap=4, learning_rate=1e-3, warmup_steps=0,
                  eval_every=3, dropout=False, seed=1)
    values.update(overrides)
    return TrainConfig(**values)


def finite_or_none(rows, keys):
    return all(r.get(k) is None or math.isfinite(r[k]) for r in rows for k in keys)


# ---------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("bad, words", [
    (dict(steps=-1), "steps"),
    (dict(learning_rate=0), "learning_rate"),
    (dict(loss="no_such_loss"), "loss"),
    (dict(amp="fp8"), "amp"),
    (dict(batch_size=6, grad_accum_steps=4), "multiple"),
    (dict(chunk_overlap=62), "overlap"),
    (dict(sampler="zipf"), "sampler"),
    (dict(weight_scheme="odd"), "weight_scheme"),
])
def test_config_rejects_bad_values_with_a_message(bad, words):
    with pytest.raises(InputError, match=words):
        TrainConfig(**bad)


def test_config_round_trips_through_plain_values():
    cfg = TrainConfig(steps=7, masking=MaskingConfig(mlm_probability=0.2), probe_sentences=("a [MASK] b",))
    again = TrainConfig.from_dict(cfg.to_dict())
    assert again == cfg
    with pytest.raises(InputError, match="Unknown training option"):
        TrainConfig.from_dict({"stepz": 3})


# ---------------------------------------------------------------------------------------- chunks


def test_long_text_is_split_with_overlap_not_cut(tok):
    text = " ".join(CORPUS)  # one long text, far over seq_len
    ids = tok(text, add_special_tokens=False)["input_ids"]
    chunks = make_chunks(tok, [text], seq_len=24, overlap=4)
    room = 22
    assert chunks.input_ids.shape[1] == 24
    assert len(chunks) == math.ceil((len(ids) - room) / (room - 4)) + 1
    seen = chunks.input_ids[chunks.special_tokens_mask == 0].tolist()
    assert sorted(set(seen)) == sorted(set(ids))
    # the last window ends on the text's last token
    last = chunks.input_ids[-1][chunks.attention_mask[-1].bool()].tolist()
    assert last[1:-1] == ids[-room:]


def test_short_texts_are_packed(tok):
    chunks = make_chunks(tok, CORPUS, seq_len=24, overlap=4)
    n_tokens = sum(len(x) for x in tok(CORPUS, add_special_tokens=False)["input_ids"])
    assert int((chunks.special_tokens_mask == 0).sum()) == n_tokens
    assert len(chunks) < len(CORPUS)
    assert bool((chunks.word_ids[chunks.special_tokens_mask.bool()] == -1).all())


def test_exact_count_masking_counts_each_rows_own_length(tok):
    """Issue 14 item 2: a short row padded to seq_len gets round(n * p) selections for its own n
    tokens ([CLS] and [SEP] included, as Google counts), not round(seq_len * p)."""
    long_row = make_chunks(tok, [" ".join(CORPUS[:8])], seq_len=64, overlap=4).take([0])
    short_row = make_chunks(tok, [SENTENCE], seq_len=64, overlap=4)  # 7 tokens + [CLS] [SEP], 55 [PAD]
    batch = training.Chunks(*(torch.cat([getattr(long_row, f), getattr(short_row, f)])
                              for f in ("input_ids", "attention_mask", "special_tokens_mask", "word_ids")))
    config = MaskingConfig(strategy="exact_count", mlm_probability=0.15)
    _, labels = training.mask_rows(batch, config, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                    special_ids=tuple(tok.all_special_ids), row_seeds=[11, 12])
    lengths = batch.attention_mask.sum(1).tolist()
    assert lengths[1] == 9 and lengths[0] > 40
    for row, n in enumerate(lengths):
        expected = min(config.max_predictions, max(1, round(n * config.mlm_probability)))
        assert int((labels[row] != IGNORE_INDEX).sum()) == expected, (row, n)


def test_empty_corpus_is_an_input_error(tok, model):
    with pytest.raises(InputError, match="empty"):
        train(model, tok, ["  ", ""], quick())


# ---------------------------------------------------------------------------------------- training


def test_loss_on_a_repeated_sentence_falls_below_half():
    from mlm_core.models import load_masked_lm

    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    cfg = TrainConfig(steps=50, batch_size=8, seq_len=16, chunk_overlap=2, learning_rate=2e-3, warmup_steps=0,
                      schedule="constant", eval_every=50, dropout=False, seed=0)
    result = train(model, tokenizer, [SENTENCE] * 64, cfg)
    losses = [r["loss"] for r in result.steps]
    assert losses[0] > 9.0  # from scratch: about ln V = ln 30522 = 10.3
    assert min(losses[-5:]) < losses[0] / 2


def test_base_model_and_caller_rng_are_untouched(tok, model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1234)
    rng = torch.get_rng_state()
    result = train(model, tok, CORPUS, quick(dropout=True))
    assert torch.equal(rng, torch.get_rng_state())
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not model.training
    changed = result.model.state_dict()
    assert any(not torch.equal(before[k], changed[k]) for k in before)


def test_same_seed_same_curves(tok, model):
    a = train(model, tok, CORPUS, quick(dropout=True))
    b = train(model, tok, CORPUS, quick(dropout=True))
    assert [r["loss"] for r in a.steps] == [r["loss"] for r in b.steps]
    c = train(model, tok, CORPUS, quick(dropout=True, seed=2))
    assert [r["loss"] for r in a.steps] != [r["loss"] for r in c.steps]


def test_stop_ends_after_at_most_one_more_step_and_keeps_history(tok, model):
    stop = threading.Event()
    events = []

    def on_event(event):
        events.append(event)
        if event.kind == "step" and event.step == 2:
            stop.set()

    result = train(model, tok, CORPUS, quick(steps=20, eval_every=100), on_event=on_event, stop=stop)
    assert result.stopped
    assert 2 <= result.steps_done <= 3
    assert [r["step"] for r in result.steps] == list(range(1, result.steps_done + 1))
    assert result.evals and result.evals[0]["step"] == 0
    assert events[-1].kind == "done" and events[-1].values["stopped"]


def test_stop_holds_inside_a_step_and_its_update_is_not_applied(tok, model):
    """Issue 42: a stop in the middle of step 3's forward pass ends the run there, before the step's backward and
    update: the trained weights are those of a run of 2 steps, and the curves hold 2 steps (before: the run only
    looked between steps, so one step of minutes held Stop and the time cap for minutes)."""
    import copy

    two = train(model, tok, CORPUS, quick(steps=2, eval_every=100, schedule="constant"))  # same rates as 20 steps
    stop, armed, events = threading.Event(), threading.Event(), []
    base = copy.deepcopy(model)
    layers = [m for m in base.modules() if isinstance(m, torch.nn.Linear)]

    def stop_in_step_3(module, args):  # the middle layer, in the first training forward after step 2
        if armed.is_set() and torch.is_grad_enabled():
            stop.set()

    layers[len(layers) // 2].register_forward_pre_hook(stop_in_step_3)

    def on_event(event):
        events.append(event)
        if event.kind == "step" and event.step == 2:
            armed.set()

    result = train(base, tok, CORPUS, quick(steps=20, eval_every=100, schedule="constant"), on_event=on_event,
                   stop=stop)
    assert stop.is_set() and result.stopped and result.steps_done == 2
    assert [r["loss"] for r in result.steps] == [r["loss"] for r in two.steps]
    for (name, a), b in zip(result.model.state_dict().items(), two.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert events[-1].kind == "done" and events[-1].step == 2
    assert sum(len(m._forward_pre_hooks) for m in result.model.modules()) == 1  # the run's stop hooks are gone


def test_stop_holds_inside_an_evaluation(tok, model):
    """A stop during the evaluation at step 0 ends the run before any step, and that evaluation is not reported."""
    import copy

    stop = threading.Event()
    base = copy.deepcopy(model)
    layer = next(m for m in base.modules() if isinstance(m, torch.nn.Linear))
    layer.register_forward_pre_hook(lambda m, a: stop.set())  # the run's first forward: the evaluation at step 0
    result = train(base, tok, CORPUS, quick(steps=5), stop=stop)
    assert result.stopped and result.steps_done == 0 and result.steps == [] and result.evals == []


def test_variants_see_identical_batches_and_masks(tok, model, monkeypatch):
    seen = []
    original = GatheredMaskedLM.forward

    def spy(self, input_ids, attention_mask, labels):
        seen.append((id(self), input_ids.clone(), labels.clone()))
        return original(self, input_ids, attention_mask, labels)

    monkeypatch.setattr(GatheredMaskedLM, "forward", spy)
    base = quick(steps=3, eval_every=10)
    variants = {
        "full": base,
        "weighted": TrainConfig(**{**base.to_dict(), "masking": base.masking, "loss": "weighted"}),
        "sampled": TrainConfig(**{**base.to_dict(), "masking": base.masking, "loss": "sampled", "num_sampled": 8}),
    }
    results = train_variants(model, tok, CORPUS, variants)
    by_step = [seen[i:i + 3] for i in range(0, len(seen), 3)]
    assert len(by_step) == 3
    for calls in by_step:
        assert len({c[0] for c in calls}) == 3  # three different model copies
        for _, ids, labels in calls[1:]:
            assert torch.equal(ids, calls[0][1]) and torch.equal(labels, calls[0][2])
    # identical starting weights: the first step's full-CE evaluation is the same for every variant
    first_evals = {name: r.evals[0]["loss"] for name, r in results.items()}
    assert len(set(first_evals.values())) == 1


def test_identical_variants_give_identical_curves(tok, model):
    cfg = quick(steps=4, dropout=True)
    results = train_variants(model, tok, CORPUS, {"a": cfg, "b": cfg})
    assert [r["loss"] for r in results["a"].steps] == [r["loss"] for r in results["b"].steps]


def test_static_masks_repeat_and_dynamic_masks_do_not(tok, model, monkeypatch):
    """Static masking (BERT's dupe_factor) reuses each chunk's masks epoch after epoch; dynamic masking
    (RoBERTa, section 4.1) draws new ones; both race on the same chunks in the same order."""
    seen = []
    forward = GatheredMaskedLM.forward

    def spy(self, input_ids, attention_mask, labels):
        seen.append((id(self), input_ids.clone(), labels.clone()))
        return forward(self, input_ids, attention_mask, labels)

    monkeypatch.setattr(GatheredMaskedLM, "forward", spy)
    texts = CORPUS[:8]  # one distinct sentence per chunk, so a chunk is known by its tokens
    base = quick(steps=12, batch_size=4, seq_len=12, chunk_overlap=2, eval_every=100)
    chunks = make_chunks(tok, texts, seq_len=12, overlap=2)
    assert len(chunks) == 8 and len({tuple(r.tolist()) for r in chunks.input_ids}) == 8
    variants = {"dynamic": TrainConfig(**{**base.to_dict(), "masking": base.masking, "mask_copies": 0}),
                "static": TrainConfig(**{**base.to_dict(), "masking": base.masking, "mask_copies": 1}),
                "static2": TrainConfig(**{**base.to_dict(), "masking": base.masking, "mask_copies": 2})}
    train_variants(model, tok, texts, variants)
    by_variant: dict[int, list] = {}
    for key, ids, labels in seen:
        by_variant.setdefault(key, []).append((ids, labels))
    masks = []  # per variant: [(chunk as a tuple of original ids, its selected positions), ...] in order
    for calls in by_variant.values():
        rows = []
        for ids, labels in calls:
            original = torch.where(labels != IGNORE_INDEX, labels, ids)
            rows += [(tuple(o.tolist()), tuple((l != IGNORE_INDEX).nonzero().flatten().tolist()))
                     for o, l in zip(original, labels)]
        masks.append(rows)
    dynamic, static, static2 = masks
    assert [c for c, _ in dynamic] == [c for c, _ in static] == [c for c, _ in static2]  # same chunks, same order

    def masks_per_chunk(rows):
        out: dict[tuple, list] = {}
        for chunk, positions in rows:
            out.setdefault(chunk, []).append(positions)
        return out

    for chunk, draws in masks_per_chunk(static).items():
        assert len(set(draws)) == 1, "static: one mask per chunk, every epoch"
    two = masks_per_chunk(static2)
    assert all(len(set(d)) <= 2 and d[0::2] == [d[0]] * len(d[0::2]) for d in two.values())
    repeated = [d for d in masks_per_chunk(dynamic).values() if len(d) >= 3]
    assert repeated and sum(len(set(d)) > 1 for d in repeated) >= len(repeated) * 0.8, "dynamic: fresh masks"


def test_variants_must_share_data_settings(tok, model):
    with pytest.raises(InputError, match="seq_len"):
        train_variants(model, tok, CORPUS, {"a": quick(), "b": quick(seq_len=32)})


def test_check_variants_returns_the_one_data_config_the_variants_share():
    a = quick()
    b = quick(learning_rate=1e-2, masking=MaskingConfig(mlm_probability=0.4), eval_masking=MaskingConfig())
    data = training.check_variants({"a": a, "b": b})  # other rate and learning rate, one held-out rule
    assert data == training.DataConfig.of(a) == training.DataConfig.of(b)
    assert data.held_out_masking == MaskingConfig() and (data.steps, data.seed) == (a.steps, a.seed)
    assert training.DATA_FIELDS == tuple(f.name for f in dataclasses.fields(training.DataConfig))
    with pytest.raises(InputError, match="another rule"):
        training.check_variants({"a": a, "b": quick(masking=MaskingConfig(mlm_probability=0.4))})


def test_batches_read_the_data_config_and_give_named_micro_batches(tok):
    cfg = quick(grad_accum_steps=2)  # 4 sequences a step: two micro-batches of 2
    data = training.DataConfig.of(cfg)
    chunks, _, _ = training.split_chunks(tok, CORPUS, data)
    batches = training.Batches(chunks, data, training.current_world(), 2, mask_token_id=tok.mask_token_id,
                               vocab_size=len(tok), special_ids=special_ids(tok), schemes=[training.mask_scheme(cfg)])
    try:
        (group,) = batches.get(0).values()
    finally:
        batches.close()
    assert all(isinstance(b, training.MicroBatch) for b in group) and [b.j for b in group] == [0, 1]
    assert all(b.input_ids.shape == b.attention_mask.shape == b.labels.shape == (2, cfg.seq_len) for b in group)


def test_evaluation_is_full_cross_entropy(tok, model):
    """Issue 14 item 11: the loss (and MLM perplexity) averages over every selected position, as
    Hugging Face's run_mlm.py; mask_loss is the same cross-entropy at the [MASK] positions alone."""
    chunks = make_chunks(tok, CORPUS, seq_len=24, overlap=4)
    gen = torch.Generator().manual_seed(0)
    labels = torch.where(torch.rand(chunks.input_ids.shape, generator=gen) < 0.3, chunks.input_ids,
                         torch.full_like(chunks.input_ids, IGNORE_INDEX))
    labels[chunks.special_tokens_mask.bool()] = IGNORE_INDEX
    shown_mask = (labels != IGNORE_INDEX) & (torch.rand(labels.shape, generator=gen) < 0.8)  # the rest unchanged
    inputs = torch.where(shown_mask, torch.full_like(labels, tok.mask_token_id), chunks.input_ids)
    counts = training.chunk_token_counts(chunks, len(tok))
    eval_set = training.EvalSet(inputs, chunks.attention_mask, labels, training.frequency_buckets(counts), 5,
                                 mask_token_id=tok.mask_token_id)
    got = evaluate(model, eval_set)
    with torch.no_grad():
        logits = model(input_ids=inputs, attention_mask=chunks.attention_mask).logits
    selected = labels != IGNORE_INDEX
    expected = F.cross_entropy(logits[selected], labels[selected])
    assert got["loss"] == pytest.approx(float(expected), rel=1e-5)
    assert got["mlm_perplexity"] == pytest.approx(math.exp(float(expected)), rel=1e-5)
    at_mask = F.cross_entropy(logits[shown_mask], labels[shown_mask])
    assert 0 < got["mask_tokens"] == int(shown_mask.sum()) < int(selected.sum())
    assert got["mask_loss"] == pytest.approx(float(at_mask), rel=1e-5)
    top1 = (logits[selected].argmax(-1) == labels[selected]).float().mean()
    assert got["top1"] == pytest.approx(float(top1))
    assert sum(got[f"{b}_tokens"] for b in training.BUCKETS) == got["masked_tokens"] == int(selected.sum())


def test_sampled_training_still_evaluates_with_full_ce(tok, model, monkeypatch):
    in_eval, eval_widths = [], []
    original_ce, original_eval = F.cross_entropy, loop.evaluate

    def ce_spy(logits, targets, *args, **kwargs):
        if in_eval:
            eval_widths.append(logits.shape[-1])
        return original_ce(logits, targets, *args, **kwargs)

    def eval_spy(*args, **kwargs):
        in_eval.append(True)
        try:
            return original_eval(*args, **kwargs)
        finally:
            in_eval.clear()

    monkeypatch.setattr(F, "cross_entropy", ce_spy)
    monkeypatch.setattr(loop, "evaluate", eval_spy)  # the name the loop calls
    result = train(model, tok, CORPUS, quick(steps=3, eval_every=3, loss="sampled", num_sampled=4))
    assert len(result.evals) == 2 and all(e["loss"] is not None for e in result.evals)
    assert eval_widths and all(v == len(tok) for v in eval_widths)  # every row scored against all V


@pytest.mark.parametrize("amp", ["off", "bf16"])
def test_amp_off_and_cpu_bf16_run(tok, model, amp):
    result = train(model, tok, CORPUS, quick(steps=3, amp=amp))
    assert result.steps_done == 3
    assert all(math.isfinite(r["loss"]) for r in result.steps)


def test_fp16_on_cpu_is_refused_with_advice(tok, model):
    with pytest.raises(InputError, match="bf16"):
        train(model, tok, CORPUS, quick(amp="fp16"))


def test_gradient_checkpointing_gives_the_same_losses(tok, model):
    plain = train(model, tok, CORPUS, quick(steps=3))
    ckpt = train(model, tok, CORPUS, quick(steps=3, gradient_checkpointing=True))
    assert [r["loss"] for r in ckpt.steps] == pytest.approx([r["loss"] for r in plain.steps], rel=1e-5)


def _step_gradients(monkeypatch):
    """Spy on the loop: every step's flattened gradient (before clipping) and each forward's masked count."""
    grads, masked = [], []
    clip, forward = training.Optimizer.clip, GatheredMaskedLM.forward

    def clip_spy(self):
        grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
                                for p in self.params]).clone())
        return clip(self)

    def forward_spy(self, input_ids, attention_mask, labels):
        masked.append(int((labels != IGNORE_INDEX).sum()))
        return forward(self, input_ids, attention_mask, labels)

    monkeypatch.setattr(training.Optimizer, "clip", clip_spy)
    monkeypatch.setattr(GatheredMaskedLM, "forward", forward_spy)
    return grads, masked


@pytest.mark.parametrize("loss", ["full", "weighted"])
def test_accumulation_matches_one_big_batch(tok, model, monkeypatch, loss):
    """Issue 14 item 9: 4 micro-batches of uneven masked counts give one batch's loss and gradient."""
    grads, masked = _step_gradients(monkeypatch)
    cfg = dict(steps=2, batch_size=8, loss=loss, dropout=False, amp="off", max_grad_norm=None)
    one = train(model, tok, CORPUS, quick(**cfg))
    one_grads = list(grads)
    grads.clear(), masked.clear()
    acc = train(model, tok, CORPUS, quick(**cfg, grad_accum_steps=4))
    assert len(set(masked[:4])) > 1, f"the test needs micro-batches of uneven size, got {masked[:4]}"
    assert [r["masked_tokens"] for r in acc.steps] == [r["masked_tokens"] for r in one.steps]
    assert [r["loss"] for r in acc.steps] == pytest.approx([r["loss"] for r in one.steps], abs=1e-5)
    for g_one, g_acc in zip(one_grads, grads, strict=True):
        assert float((g_one - g_acc).norm() / g_one.norm()) < 1e-5


def test_exact_count_masks_each_row_by_its_own_length(tok, model):
    """Issue 14.2 in the loop: Google's exact count is min(20, max(1, round(p · n))) with n the row's own
    length ([CLS]/[SEP] included, padding not). Training used to call mask_tokens without the attention
    mask, so exact_count stopped with an InputError (and before that counted every padded row as T long)."""
    chunks = make_chunks(tok, ["The cat sat.", " ".join(CORPUS)], seq_len=48, overlap=4)
    lengths = chunks.attention_mask.sum(1)
    assert int(lengths.min()) < 48, "a short, padded row"
    masking = MaskingConfig(strategy="exact_count")
    _, labels = training.mask_rows(chunks, masking, mask_token_id=tok.mask_token_id, vocab_size=len(tok),
                                    special_ids=special_ids(tok), row_seeds=range(len(chunks)))
    expected = [min(20, max(1, round(0.15 * int(n)))) for n in lengths]
    assert (labels != IGNORE_INDEX).sum(1).tolist() == expected
    result = train(model, tok, CORPUS, quick(steps=2, masking=masking))
    assert all(math.isfinite(r["loss"]) for r in result.steps if not r["skipped"])


def test_zero_selection_batch_gives_no_nan(tok, model):
    result = train(model, tok, CORPUS, quick(steps=3, masking=MaskingConfig(mlm_probability=0.0)))
    keys = ("loss", "grad_norm", "lr", "tokens_per_s")
    assert finite_or_none(result.steps, keys)
    assert all(r["skipped"] and r["loss"] is None for r in result.steps)
    assert finite_or_none(result.evals, ("loss", "mlm_perplexity", "mask_loss", "top1", "top5"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), result.model.state_dict().values()))


def test_sparse_selection_mixes_empty_and_full_steps_without_nan(tok, model):
    cfg = quick(steps=8, batch_size=2, seq_len=12, chunk_overlap=2,
                masking=MaskingConfig(mlm_probability=0.04))
    for loss in ("full", "weighted", "sampled"):
        result = train(model, tok, [SENTENCE] * 8, TrainConfig(**{**cfg.to_dict(), "masking": cfg.masking,
                                                                   "loss": loss, "num_sampled": 4}))
        assert finite_or_none(result.steps, ("loss", "grad_norm"))


def test_events_and_probes(tok, model):
    events = []
    result = train(model, tok, CORPUS, quick(probe_sentences=("the cat sat on the [MASK] .",)),
                   on_event=events.append)
    kinds = [e.kind for e in events]
    assert kinds.count("step") == 6 and kinds.count("eval") == 3 and kinds[-1] == "done"
    step = next(e for e in events if e.kind == "step").values
    assert {"loss", "grad_norm", "lr", "tokens_per_s", "masked_tokens"} <= set(step)
    probe = result.probes[-1]["probes"][0]
    assert probe["predictions"][0]["position"] == 6
    assert len(probe["predictions"][0]["tokens"]) == 5
    with pytest.raises(InputError, match="MASK"):
        train(model, tok, CORPUS, quick(probe_sentences=("no mask here",)))


def test_clipping_bounds_the_update_but_reports_the_raw_norm(tok, model):
    clipped = train(model, tok, CORPUS, quick(steps=2, max_grad_norm=1e-3, learning_rate=0.5))
    free = train(model, tok, CORPUS, quick(steps=2, max_grad_norm=None, learning_rate=0.5))
    assert clipped.steps[0]["grad_norm"] == pytest.approx(free.steps[0]["grad_norm"], rel=1e-5)
    assert clipped.steps[1]["loss"] != free.steps[1]["loss"]


def _tensorboard_smooth(values, weight):
    """TensorBoard's debiased EMA, written out: the reference ``smooth`` (pandas' ewm) must match."""
    out, avg, n = [], 0.0, 0
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(None)
            continue
        avg = weight * avg + (1 - weight) * v
        n += 1
        out.append(avg / (1 - weight**n))
    return out


def test_smooth_is_tensorboards_debiased_average():
    rng = random.Random(0)
    values = [rng.uniform(2, 10) for _ in range(200)]
    for i in (0, 5, 6, 50, 199):
        values[i] = None
    values[70], values[71] = math.nan, math.inf
    for weight in (0.0, 0.3, 0.8, 0.99):
        got, want = training.smooth(values, weight), _tensorboard_smooth(values, weight)
        assert [g is None for g in got] == [w is None for w in want]
        assert [g for g in got if g is not None] == pytest.approx([w for w in want if w is not None], rel=1e-12)
    assert training.smooth([], 0.5) == [] and training.smooth([None, math.nan], 0.5) == [None, None]
    with pytest.raises(InputError):
        training.smooth([1.0], 1.0)


def test_smooth_and_lr_schedule():
    assert training.smooth([2.0, None, 2.0], 0.5) == [2.0, None, 2.0]
    cfg = TrainConfig(steps=10, warmup_steps=2, learning_rate=1.0, schedule="linear")
    lrs = [training.lr_at(cfg, s) for s in range(10)]
    assert lrs[0] == 0.5 and lrs[1] == 1.0 and lrs[-1] < lrs[2]


def test_figures_draw_gaps_not_nans():
    from mlm_core.figures import training as figs

    steps = {"a": [{"step": 1, "loss": 2.0, "grad_norm": 1.5, "lr": 1e-3},
                   {"step": 2, "loss": None, "grad_norm": None, "lr": 1e-3},
                   {"step": 3, "loss": float("nan"), "grad_norm": float("inf"), "lr": 1e-3}],
             "b": [{"step": 1, "loss": 1.0, "grad_norm": 0.5, "lr": 1e-3}]}
    loss = figs.loss_figure(steps, vocab_size=30522)
    assert loss.layout.annotations[0].text == "ln V = 10.33 (uniform guess over V = 30,522 tokens)"
    assert [t.y for t in loss.data if t.name == "a (raw)"][0] == (2.0, None, None)
    grad = figs.grad_norm_figure(steps, clip={"a": 1.0, "b": 1.0})
    assert len(grad.layout.shapes) == 1  # one shared clipping line
    # the log axis spans the norms and the threshold, not 1e25 (plotly reads a log axis's annotation
    # y as log10(y): add_hline's own label at y = 25 once stretched the Training page's axis to 1e25)
    healthy = figs.grad_norm_figure({"a": [{"step": s, "grad_norm": 6.0 + s} for s in range(1, 9)]}, clip={"a": 25.0})
    low, high = healthy.layout.yaxis.range
    assert 10 ** low <= 6.0 and 25.0 <= 10 ** high <= 1000
    assert healthy.layout.annotations[0].text == "clip at 25" and healthy.layout.annotations[0].y == math.log10(25)
    # the chart sits in two thirds of the page: at presenter size a 62-character title ran off its edge
    assert len(healthy.layout.title.text) <= 40
    evals = {"a": [{"step": 0, "loss": 3.0, "top1": 0.1, "top5": 0.3, "frequent_top1": 0.2, "frequent_tokens": 5,
                    "medium_top1": None, "medium_tokens": 0, "rare_top1": 0.0, "rare_tokens": 2}]}
    assert len(figs.eval_figure(evals).data) == 3
    assert figs.bucket_figure(evals).data[0].y == (0.2, None, 0.0)
    probe = [{"text": "the [MASK] sat", "predictions": [{"position": 2, "answer": "cat", "tokens": ["dog", "cat"],
                                                          "probs": [0.6, 0.3]}]}]
    fig = figs.probe_figure(probe)
    assert fig.data[0].marker.color == ("#2f9e44", "#1c7ed6")  # the hidden word in green
    # an untrained model's tiny probabilities stay readable: the axis fits them, the rank is in the title
    tiny = [{"text": "the [MASK] sat", "predictions": [{"position": 2, "answer": "cat", "tokens": ["the", "."],
                                                         "probs": [4e-5, 3e-5], "answer_prob": 1e-5,
                                                         "answer_rank": 812}]}]
    fig = figs.probe_figure(tiny)
    assert fig.layout.xaxis.range[1] < 1e-4 and fig.data[0].text == ("3.0e-05", "4.0e-05")
    assert "rank 812" in fig.layout.annotations[0].text
    evals["a"][0]["mask_loss"] = 3.5
    assert any("[MASK] positions only" in t.name for t in figs.eval_figure(evals).data)


# ---------------------------------------------------------------------------------------- lessons


def test_every_lesson_builds_its_variants_from_defaults_that_say_why():
    from mlm_core.lessons import training_registry as L
    from mlm_core.lessons.training_view import gazetteer_texts

    texts = gazetteer_texts()
    for lesson in L.TRAINING_LESSONS:
        for scratch in (False, True):
            defaults = L.lesson_defaults(lesson, from_scratch=scratch)
            assert all(len(d.why) > 30 for d in defaults.values())
            base = L.base_config(lesson, from_scratch=scratch, texts=texts)
            if lesson == "bind" and scratch:  # issue 43: a model that reads no words yet has nothing to bind
                with pytest.raises(InputError, match="already reads English"):
                    L.lesson_variants(lesson, base, from_scratch=scratch)
                continue
            variants = L.lesson_variants(lesson, base, from_scratch=scratch, losses=("full", "sampled"))
            training.check_variants(variants)  # same data for every variant
    base = L.base_config("lr_too_high", from_scratch=False, texts=texts)
    lr = L.lesson_variants("lr_too_high", base, from_scratch=False, clip=1.0)
    assert [c.max_grad_norm for c in lr.values()] == [None, 1.0, 1.0]
    assert sorted({c.learning_rate for c in lr.values()}) == [L.sane_learning_rate(False), base.learning_rate]
    masks = L.lesson_variants("masking", base, from_scratch=False, static_copies=10)
    assert sorted(c.mask_copies for c in masks.values()) == [0, 10]
    texts, variants = L.default_run()
    (cfg,) = variants.values()
    assert texts.name == "Veldoria gazetteer" and texts.held_out and cfg.loss == "full"
    assert cfg.probe_answers == tuple(a for _, a in texts.probes) and len(cfg.probe_answers) == 60
    # issue 25: the facts asked in a sentence it read and in new words, and the same questions about other countries;
    # issue 43: and the questions in new words about a country no training text names
    assert cfg.probe_groups == ("read",) * 15 + ("new",) * 15 + ("other",) * 15 + ("control",) * 15
    with pytest.raises(InputError, match="lesson"):
        L.lesson_defaults("nap", from_scratch=False)


def test_probe_rows_report_the_first_and_latest_guess_and_the_answers_rank():
    from mlm_core.lessons.training_view import probe_rows, probes_right

    def entry(step, top, rank):
        return {"step": step, "probes": [{"text": "the capital is [MASK] .", "predictions": [
            {"answer": "marrow", "tokens": [top, "x"], "probs": [0.4, 0.1], "answer_prob": 0.05, "answer_rank": rank}]}]}

    rows = probe_rows([entry(0, "rome", 4619), entry(10, "city", 7), entry(80, "marrow", 1)])
    assert rows == [{"sentence": "the capital is [MASK] .", "answer": "marrow", "top-1 at step 0": "rome (40.0%)",
                     "top-1 at step 80": "marrow (40.0%)", "answer's rank then": 4619, "answer's rank now": 1,
                     "answer's probability now": 0.05, "right now": True}]
    assert probes_right(entry(80, "marrow", 1)) == (1, 1) and probes_right(entry(0, "rome", 9)) == (0, 1)


def test_probes_report_the_hidden_words_rank_and_probability(tok, model):
    result = train(model, tok, CORPUS, quick(steps=2, probe_sentences=("the cat sat on the [MASK] .",),
                                             probe_answers=("mat",)))
    pred = result.probes[-1]["probes"][0]["predictions"][0]
    with torch.no_grad():
        ids = tok("the cat sat on the [MASK] .", return_tensors="pt")["input_ids"]
        probs = result.model(input_ids=ids).logits[0, pred["position"]].softmax(-1)
    mat = tok.convert_tokens_to_ids("mat")
    assert pred["answer"] == "mat" and pred["answer_prob"] == pytest.approx(float(probs[mat]), rel=1e-4)
    assert pred["answer_rank"] == int((probs > probs[mat]).sum()) + 1
    with pytest.raises(InputError, match="one token"):
        train(model, tok, CORPUS, quick(probe_sentences=("the [MASK] sat .",), probe_answers=("cat dog",)))
    with pytest.raises(InputError, match="one answer per sentence"):
        quick(probe_sentences=("the [MASK] sat .",), probe_answers=("cat", "dog"))


def _d3(fmt: str, value: float) -> str:
    """The two d3 formats the probe chart uses, as plotly renders them."""
    digits = int(fmt[1:-1])
    return f"{value * 100:.{digits}f}%" if fmt.endswith("%") else f"{value:.{digits}e}"


@pytest.mark.parametrize("top", [0.6, 0.03, 2e-3, 3.3e-05, 1e-7])
def test_probe_chart_axis_reads_the_probabilities_it_shows(top):
    """Issue 15: an untrained model's probe bars (~3e-05) sat on an axis ticked '0.00%, 0.00%, ...'."""
    from mlm_core.figures.training import probe_figure

    probe = {"text": "a [MASK] b", "predictions": [{"position": 1, "answer": "c", "tokens": ["c", "d"],
                                                    "probs": [top, top / 2], "answer_prob": top, "answer_rank": 1}]}
    fmt = probe_figure([probe]).layout.xaxis.tickformat
    ticks = [_d3(fmt, top * k / 4) for k in range(1, 5)]
    assert len(set(ticks)) == 4 and not any(set(t) <= set("0.%") for t in ticks), ticks


def _all_masked_chunks(tok):
    """The corpus as chunks with 40% of the non-special positions selected, every one shown as [MASK]."""
    chunks = make_chunks(tok, CORPUS, seq_len=24, overlap=4)
    gen = torch.Generator().manual_seed(1)
    labels = torch.where(torch.rand(chunks.input_ids.shape, generator=gen) < 0.4, chunks.input_ids,
                         torch.full_like(chunks.input_ids, IGNORE_INDEX))
    labels[chunks.special_tokens_mask.bool()] = IGNORE_INDEX
    inputs = torch.where(labels != IGNORE_INDEX, torch.full_like(labels, tok.mask_token_id), chunks.input_ids)
    return chunks, inputs, labels


def test_evaluation_scores_the_focus_words_on_their_own(tok, model):
    """The Veldoria lesson's held-out loss falls mostly because the model learns to spell the invented name;
    `focus_loss` is the same cross-entropy at the positions that hide one of the lesson's fact words."""
    chunks, inputs, labels = _all_masked_chunks(tok)
    counts = training.chunk_token_counts(chunks, len(tok))
    focus = training.focus_ids(tok, ["cat", "river", "not-a-token-of-this-vocabulary"])
    assert focus.tolist() == sorted(tok.convert_tokens_to_ids(["cat", "river"]))
    eval_set = training.EvalSet(inputs, chunks.attention_mask, labels, training.frequency_buckets(counts), 3,
                                 mask_token_id=tok.mask_token_id, focus_ids=focus)
    got = evaluate(model, eval_set)
    with torch.no_grad():
        logits = model(input_ids=inputs, attention_mask=chunks.attention_mask).logits
    at = (labels != IGNORE_INDEX) & torch.isin(labels, focus)
    assert 0 < got["focus_tokens"] == int(at.sum()) < got["masked_tokens"]
    assert got["focus_loss"] == pytest.approx(float(F.cross_entropy(logits[at], labels[at])), rel=1e-5)
    plain = evaluate(model, training.EvalSet(inputs, chunks.attention_mask, labels,
                                              training.frequency_buckets(counts), 3))
    assert plain["focus_loss"] is None and plain["focus_tokens"] == 0 and plain["loss"] == got["loss"]
    result = train(model, tok, CORPUS, quick(steps=2, eval_focus_words=("the", "a", "in")))
    assert all(e["focus_loss"] is not None for e in result.evals)
    assert TrainConfig.from_dict(quick(eval_focus_words=("cat",)).to_dict()).eval_focus_words == ("cat",)


def test_loss_by_group_splits_the_held_out_loss_into_parts_that_add_up(tok, model):
    """The facts lesson splits its held-out loss by the hidden token (the name's pieces, the facts' words,
    the rest): each group's mean is cross-entropy at its positions, and the parts add up to the loss."""
    chunks, inputs, labels = _all_masked_chunks(tok)
    eval_set = training.EvalSet(inputs, chunks.attention_mask, labels,
                                training.frequency_buckets(training.chunk_token_counts(chunks, len(tok))), 3)
    cat, river = tok.convert_tokens_to_ids(["cat", "river"])
    groups = {"cat": torch.tensor([cat]), "cat or river": torch.tensor([cat, river])}  # the first group wins
    split = training.loss_by_group(model, eval_set, groups)
    whole = evaluate(model, eval_set)
    with torch.no_grad():
        logits = model(input_ids=inputs, attention_mask=chunks.attention_mask).logits
    selected = labels != IGNORE_INDEX
    for name, at in (("cat", selected & (labels == cat)), ("cat or river", selected & (labels == river)),
                     ("rest", selected & (labels != cat) & (labels != river))):
        assert 0 < split[name]["tokens"] == int(at.sum())
        ce = F.cross_entropy(logits[at], labels[at], reduction="sum")
        assert split[name]["loss"] == pytest.approx(float(ce) / int(at.sum()), rel=1e-5)
        assert split[name]["part"] == pytest.approx(float(ce) / whole["masked_tokens"], rel=1e-5)
    assert sum(g["tokens"] for g in split.values()) == whole["masked_tokens"]
    assert sum(g["part"] for g in split.values()) == pytest.approx(whole["loss"], rel=1e-6)
    was = model.training
    model.train(True)
    training.loss_by_group(model, eval_set, groups)
    assert model.training  # the model's mode is given back
    model.train(was)
    ids = training.word_piece_ids(tok, ["cat", "river"])
    assert ids.tolist() == sorted({cat, river})


def _probe_entry(step, group_results):
    """A probe pass: group -> list of (answer, top-1 guess, answer's rank)."""
    return {"step": step, "probes": [
        {"text": f"{g} {i} [MASK] .", "group": g, "predictions": [
            {"answer": answer, "tokens": [top, "x"], "probs": [0.4, 0.1], "answer_prob": 0.1, "answer_rank": rank}]}
        for g, rows in group_results.items() for i, (answer, top, rank) in enumerate(rows)]}


def test_probe_sets_are_scored_apart_and_the_sentence_follows_the_numbers():
    """Issue 25 §1: the facts lesson asks each fact in a sentence it read and in new words; each set gets its
    own top-1 / top-5 / rank before and after, and one sentence says what the difference means."""
    from mlm_core.lessons import training_view
    from mlm_core.lessons.training_view import probe_rows, probe_set_scores, probes_in_top, probes_right, strings_or_facts

    before = _probe_entry(0, {"read": [("marrow", "rome", 900), ("harp", "piano", 40)],
                              "new": [("marrow", "paris", 1200), ("harp", "the", 300)]})
    memorised = _probe_entry(80, {"read": [("marrow", "marrow", 1), ("harp", "harp", 1)],
                                  "new": [("marrow", "city", 40), ("harp", "music", 90)]})
    scores = {s.group: s for s in probe_set_scores([before, memorised])}
    assert set(scores) == {"read", "new"} and scores["read"].label == "Phrases it read"
    r, n = scores["read"], scores["new"]
    assert (r.top1_then, r.top1_now, r.top5_now, r.median_rank_then, r.median_rank_now) == (0, 2, 2, 470.0, 1.0)
    assert (n.top1_now, n.top5_now, n.median_rank_now) == (0, 0, 65.0)
    assert probes_right(memorised, "new") == (0, 2) and probes_in_top(memorised, 50, "new") == (1, 2)
    assert len(probe_rows([before, memorised], group="read")) == 2
    said = strings_or_facts(list(scores.values()))
    assert "2 of 2 phrases it read" in said and "answers only 0 of 2" in said and "memorised the strings" in said
    learned = _probe_entry(80, {"read": [("marrow", "marrow", 1), ("harp", "harp", 1)],
                                "new": [("marrow", "marrow", 1), ("harp", "harp", 1)]})
    said = strings_or_facts(probe_set_scores([before, learned]))
    assert "learned more than strings" in said and "belong to Veldoria only a country" in said  # no claim: no controls
    # the control set: the same kinds of question about other countries, where a Veldoria word is wrong
    ctrl_before = {"control": [("paris", "paris", 1), ("red", "red", 1), ("rose", "lily", 3)]}
    ctrl_flipped = {"control": [("paris", "marrow", 40), ("red", "green", 9), ("rose", "lily", 3)]}
    ctrl_kept = {"control": [("paris", "paris", 1), ("red", "red", 1), ("rose", "thistle", 2)]}
    start = _probe_entry(0, {**{g: [("marrow", "x", 900), ("harp", "x", 40)] for g in ("read", "new")}, **ctrl_before})
    flipped = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                           | ctrl_flipped)
    kept = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")} | ctrl_kept)
    facts = ("marrow", "harp", "green", "thistle")
    c = {s.group: s for s in probe_set_scores([start, flipped], facts=facts)}["control"]
    assert (c.top1_then, c.top1_now, c.facts_then, c.facts_now) == (2, 0, 0, 2)
    said = strings_or_facts(probe_set_scores([start, flipped], facts=facts))
    assert "an invented country's word first in 2 of 3 (Veldoria's in 2" in said
    assert "not facts that belong to Veldoria" in said
    said = strings_or_facts(probe_set_scores([start, kept], facts=facts))  # 1 of 3 > one in five: still no
    assert "an invented country's word first in 1 of 3" in said and "not facts that belong to Veldoria" in said
    kept = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                        | {"control": [("paris", "paris", 1), ("red", "red", 1), ("rose", "rose", 1)]})
    said = strings_or_facts(probe_set_scores([start, kept], facts=facts))  # the control holds, binding unknown
    assert "an invented country's word first in 0 of 3" in said and "learned facts about Veldoria" not in said
    assert "only a country it never read of can tell" in said
    # issue 43: the same questions about Pellastra, a country no training text names, decide with the control
    start = _probe_entry(0, {**{g: [("marrow", "x", 900), ("harp", "x", 40)] for g in ("read", "new", "other")},
                             **ctrl_before})
    unbound = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new", "other")}
                           | {"control": ctrl_before["control"]})
    scores = probe_set_scores([start, unbound], facts=facts)
    said = strings_or_facts(scores)
    assert training_view.binding(scores).top1_now == 0 and "Pellastra" in said
    assert "gives Veldoria's word first in 2 of 2" in said and "whatever the country" in said
    bound = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                         | {"other": [("marrow", "paris", 30), ("harp", "harp", 1)], "control": ctrl_before["control"]})
    scores = probe_set_scores([start, bound], facts=facts)
    assert training_view.binding(scores).top1_now == 1  # 1 of 2: the share BINDING_SHARE asks for
    assert "learned facts about Veldoria" in strings_or_facts(scores)
    assert "a twin country's in" not in strings_or_facts(scores)  # no twin's word about Pellastra
    # bound, but Pellastra and the real countries get a twin's answers (Tavonia's): the control counts them, so
    # issue 43's review: "learned facts" would be false; it tied the answers to the names it read, no more
    tavonia = training_view.TWINS[0][2]
    stray = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                         | {"other": [("marrow", tavonia[0], 30), ("harp", tavonia[8], 3)],
                            "control": [("paris", tavonia[0], 4), ("red", "red", 1), ("rose", tavonia[14], 2)]})
    scores = {s.group: s for s in probe_set_scores([start, stray], facts=facts)}
    assert (scores["other"].invented_now, scores["control"].invented_now, scores["control"].facts_now) == (2, 2, 0)
    said = strings_or_facts(list(scores.values()))
    assert "learned facts about Veldoria" not in said and "answers go with the names it read" in said
    assert "Veldoria's word first in 0 of 2 and a twin country's in 2" in said
    assert "an invented country's word first in 2 of 3 (Veldoria's in 0, a twin's in 2)" in said
    ostrania = training_view.TWINS[2][2]  # a twin the run did not read: its words are the base model's own guesses
    unread = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                          | {"other": [("marrow", "paris", 30), ("harp", "piano", 3)],
                             "control": [("paris", ostrania[0], 4), ("red", "red", 1), ("rose", ostrania[14], 2)]})
    assert {s.group: s for s in probe_set_scores([start, unread], facts=facts)}["control"].invented_now == 0
    assert {s.group: s for s in probe_set_scores([start, stray], facts=facts, twins=0)}["control"].invented_now == 0
    flips = _probe_entry(80, {g: [("marrow", "marrow", 1), ("harp", "harp", 1)] for g in ("read", "new")}
                         | {"other": [("marrow", "paris", 30), ("harp", "piano", 3)]} | ctrl_flipped)
    said = strings_or_facts(probe_set_scores([start, flips], facts=facts))  # bound, but real countries flipped
    assert "other countries have answers of their own" in said and "learned facts about Veldoria" not in said
    partly = _probe_entry(80, {"read": [("marrow", "marrow", 1), ("harp", "harp", 1)],
                               "new": [("marrow", "marrow", 1), ("harp", "music", 2)]})
    said = strings_or_facts(probe_set_scores([before, partly]))
    assert "answers only 1 of 2 questions" in said and "memorised the strings" in said
    early = _probe_entry(10, {"read": [("marrow", "rome", 9), ("harp", "harp", 1), ("a", "b", 9)],
                              "new": [("marrow", "marrow", 1), ("harp", "x", 7), ("a", "b", 9)]})
    before3 = _probe_entry(0, {g: [("marrow", "x", 900), ("harp", "x", 40), ("a", "x", 9)] for g in ("read", "new")})
    said = strings_or_facts(probe_set_scores([before3, early]))
    assert "not learned yet" in said and "learned facts" not in said  # 1 of 3 each: too early to call it
    assert probe_set_scores([_probe_entry(0, {"": [("a", "b", 3)]})]) == []  # one set: nothing to compare


def test_probe_groups_reach_every_probe_prediction(tok, model):
    result = train(model, tok, CORPUS, quick(steps=2, probe_sentences=("the cat sat on the [MASK] .", "a [MASK] b ."),
                                             probe_answers=("mat", ""), probe_groups=("read", "new")))
    assert [p["group"] for p in result.probes[-1]["probes"]] == ["read", "new"]
    with pytest.raises(InputError, match="probe_groups"):
        quick(probe_sentences=("the [MASK] sat .",), probe_groups=("read", "new"))


def test_batched_probe_predictions_equal_one_sentence_at_a_time(tok, model):
    """The probes go through the encoder as one padded batch: the same top-k and ranks as one by one."""
    from mlm_core.training import make_probes, probe_predictions

    cfg = quick(probe_sentences=("the cat sat on the [MASK] .", "a [MASK] b .", "[MASK] dogs bark at the [MASK] ."),
                probe_answers=("mat", "", ""))
    probes = make_probes(tok, CORPUS, cfg)
    together = probe_predictions(model, tok, probes, 5)
    alone = [probe_predictions(model, tok, [p], 5)[0] for p in probes]
    for a, b in zip(together, alone):
        assert [r["tokens"] for r in a["predictions"]] == [r["tokens"] for r in b["predictions"]]
        assert all(abs(x - y) < 1e-5 for ra, rb in zip(a["predictions"], b["predictions"])
                   for x, y in zip(ra["probs"], rb["probs"]))
        assert [r["answer_rank"] for r in a["predictions"]] == [r["answer_rank"] for r in b["predictions"]]


def test_focus_words_are_masked_at_their_own_rate(tok):
    """Issue 25: the facts lesson selects its focus words (the facts' answers) with focus_mlm_probability, every
    other token with the rule's p, and replaces the extra ones by the rule's 80/10/10. Rates within 4 standard
    errors over >= 1,000 draws of each kind."""
    from mlm_core.masking import MaskingConfig
    from mlm_core.training import make_chunks, mask_rows

    chunks = make_chunks(tok, ["the cat sat on the mat by the door ."] * 1200, seq_len=32, overlap=4)
    cat = torch.tensor(tok.convert_tokens_to_ids(["cat", "door"]))
    rule = MaskingConfig()
    inputs, labels = mask_rows(chunks, rule, mask_token_id=tok.mask_token_id, vocab_size=len(tok), special_ids=(),
                               row_seeds=range(len(chunks)), focus_ids=cat, focus_probability=0.6)
    real = chunks.special_tokens_mask == 0
    focus = torch.isin(chunks.input_ids, cat) & real
    other = real & ~focus
    for where, p in ((focus, 0.6), (other, rule.mlm_probability)):
        n = int(where.sum())
        rate = float((labels[where] != -100).float().mean())
        assert n >= 1000 and abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n), (rate, p, n)
    chosen = focus & (labels != -100)
    as_mask = float((inputs[chosen] == tok.mask_token_id).float().mean())
    assert abs(as_mask - 0.8) < 4 * math.sqrt(0.16 / int(chosen.sum()))
    # off (0) or at most the rule's p: exactly the rule's masks
    plain = mask_rows(chunks, rule, mask_token_id=tok.mask_token_id, vocab_size=len(tok), special_ids=(),
                      row_seeds=range(len(chunks)))
    same = mask_rows(chunks, rule, mask_token_id=tok.mask_token_id, vocab_size=len(tok), special_ids=(),
                     row_seeds=range(len(chunks)), focus_ids=cat, focus_probability=0.1)
    assert torch.equal(plain[1], same[1]) and torch.equal(plain[0], same[0])
    # the lesson's default asks for it; the held-out set is masked by the rule alone (the same eval masks either way)
    from mlm_core.lessons.training_view import FACT_MASKING, gazetteer_texts
    from mlm_core.lessons.training_registry import base_config

    cfg = base_config("facts", from_scratch=False, texts=gazetteer_texts())
    assert cfg.focus_mlm_probability == FACT_MASKING > rule.mlm_probability
    assert base_config("masking", from_scratch=False, texts=gazetteer_texts()).focus_mlm_probability == 0.0


def test_switching_to_fp16_builds_a_gradient_scaler():
    """TrainStep.configure(amp=...) goes through Optimizer.set_config: fp16 needs loss scaling, so after a switch
    the scaler is on exactly when the precision is fp16 (it stayed off before), and settings the optimizer was
    built with are refused rather than stored and ignored."""
    import copy
    import dataclasses

    from mlm_core.models import load_masked_lm
    from mlm_core.training.optim import Optimizer

    model, _ = load_masked_lm("tiny-random", device="cpu")
    cfg = TrainConfig(amp="off")
    opt = Optimizer(copy.deepcopy(model), cfg, torch.device("cpu"))
    assert not opt.scaler.is_enabled()
    opt.set_config(dataclasses.replace(cfg, amp="fp16"))
    fp16_scaler = opt.scaler
    assert fp16_scaler.is_enabled()
    opt.set_config(cfg)
    assert not opt.scaler.is_enabled()
    opt.set_config(dataclasses.replace(cfg, amp="fp16"))
    assert opt.scaler is fp16_scaler  # back to fp16: the same scaler, with the scale it learned
    # what shapes the optimizer itself (its groups' decay, the head's output) cannot change between steps
    for change in ({"weight_decay": 0.5}, {"loss": "sampled"}):
        with pytest.raises(InputError, match="fixed when it is built"):
            opt.set_config(dataclasses.replace(cfg, **change))
