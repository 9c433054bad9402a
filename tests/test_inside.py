"""mlm_core.inside on tiny models of every family: attention rows are distributions and equal the eager
weights, the path is thread-safe on a shared model, the lens ends at predict_masked, leave-one-out
equals a direct recomputation, gradient × input has its closed form on a linear toy."""

from __future__ import annotations

import math
import threading

import pytest
import scipy.stats
import torch
from torch import nn

from mlm_core import inside
from mlm_core.data import encode
from mlm_core.errors import InputError
from mlm_core.lessons import inside as lesson
from mlm_core.models import TINY_FAMILIES, tiny_random_masked_lm
from mlm_core.data import mask_positions
from mlm_core.predict import predict_masked

SENTENCE = "The cat sat on the mat, and the cat watched the birds."
KNOWN_HEADS = ("bert", "distilbert", "roberta", "albert")


pytestmark = pytest.mark.usefixtures("one_thread")


def _strong(model: nn.Module, seed: int = 0) -> nn.Module:
    """Larger random weights than BERT's init, so attention is far from uniform and tokens differ a lot."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


@pytest.fixture(scope="module")
def models(tokenizer):
    return {family: _strong(tiny_random_masked_lm(tokenizer, family=family)[0]) for family in TINY_FAMILIES}


@pytest.fixture(scope="module")
def sentence(tokenizer):
    encoded = encode(tokenizer, SENTENCE)
    ids = encoded.input_ids[0]  # (T,)
    masked = mask_positions(tokenizer, ids, [6], generator=torch.Generator().manual_seed(0))  # "mat"
    return encoded, masked.input_ids, masked.labels


def _eager_twin(model: nn.Module) -> nn.Module:
    """The same weights in a model built for eager attention (only the test's own copy is eager)."""
    from transformers import AutoModelForMaskedLM

    config = type(model.config).from_dict(model.config.to_dict())
    with torch.random.fork_rng(devices=[]):
        twin = AutoModelForMaskedLM.from_config(config, attn_implementation="eager")
    twin.load_state_dict(model.state_dict())
    return twin.eval()


# --------------------------------------------------------------------------- attention
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_attention_rows_are_distributions_and_equal_the_eager_weights(models, tokenizer, family):
    model = models[family]
    assert model.config._attn_implementation == "sdpa"
    batch = encode(tokenizer, [SENTENCE, "A dog ran."])  # a padded second row
    maps = inside.attention_maps(model, batch.input_ids, batch.attention_mask)  # (B, L, H, T, T)
    B, T = batch.input_ids.shape
    assert maps.shape == (B, 2, 2, T, T)
    real = batch.attention_mask.bool()
    rows = maps.sum(-1)  # (B, L, H, T)
    assert torch.allclose(rows[real[:, None, None, :].expand_as(rows)], torch.ones(()), atol=1e-5)
    short = maps[1][:, :, real[1]][..., ~real[1]]  # the short row's real tokens never look at padding
    assert short.numel() > 0 and float(short.abs().max()) == 0.0
    with torch.no_grad():
        eager = _eager_twin(model).base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                              output_attentions=True).attentions
    reference = torch.stack(eager, dim=1)  # (B, L, H, T, T)
    queries = lambda m: m.permute(0, 3, 1, 2, 4)[real]  # (real tokens, L, H, T)  # noqa: E731
    assert torch.allclose(queries(maps), queries(reference), atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # the shared model's config is untouched


def test_attention_from_a_position_and_no_trace_on_the_model(models, tokenizer, sentence):
    model = models["bert"]
    hooks_before = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    _, seen, _ = sentence
    result = inside.attention_from(model, tokenizer, seen, None, position=6)
    full = inside.attention_maps(model, seen)  # (1, L, H, T, T)
    assert result.weights.shape == (2, 2, seen.numel())
    assert torch.equal(result.weights, full[0, :, :, 6])
    assert torch.allclose(result.layer_mean, full[0, :, :, 6].mean(1))
    top = result.top(1, 0, 2)
    assert top[0][2] >= top[1][2] and top[0][1] == result.tokens[top[0][0]]
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == hooks_before
    with pytest.raises(InputError):
        inside.attention_from(model, tokenizer, seen, None, position=seen.numel())


def test_attention_is_refused_for_implementations_without_weights(tokenizer):
    model, _ = tiny_random_masked_lm(tokenizer)
    model.config._attn_implementation = "flash_attention_2"  # this test's own model
    with pytest.raises(inside.AttentionUnavailable, match="flash_attention_2"):
        inside.attention_maps(model, torch.tensor([101, 1996, 102]))


def test_attention_path_is_thread_safe_on_a_shared_model(tokenizer, sentence):
    """Another thread's SDPA forwards give exactly what they give alone while attention, the lens and
    saliency are read here (the lens's first call also installs transformers' output hooks, mid-race)."""
    model = _strong(tiny_random_masked_lm(tokenizer)[0], seed=3)
    encoded, seen, labels = sentence
    ids = encoded.input_ids  # (1, T)
    with torch.no_grad():
        alone = model(input_ids=ids).logits.clone()
    weights_alone = inside.attention_from(model, tokenizer, seen, None, 6).weights
    start = threading.Barrier(2)
    stop = threading.Event()
    outputs, weights, errors = [], [], []

    def plain_forwards():
        try:
            start.wait()
            while not stop.is_set() or len(outputs) < 20:
                with torch.no_grad():
                    outputs.append(model(input_ids=ids).logits)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=plain_forwards)
    thread.start()
    try:
        start.wait()
        for i in range(20):
            weights.append(inside.attention_from(model, tokenizer, seen, None, 6).weights)
            if i % 4 == 0:
                inside.logit_lens(model, tokenizer, seen, None, 6, int(labels[6]))
                inside.saliency(model, tokenizer, seen, None, 6, int(labels[6]))
    finally:
        stop.set()
        thread.join(60)
    assert not errors
    assert len(outputs) >= 20
    assert all(torch.equal(out, alone) for out in outputs)  # bit for bit: nothing leaked into the other thread
    assert all(torch.equal(w, weights_alone) for w in weights)
    assert model.config._attn_implementation == "sdpa"


# --------------------------------------------------------------------------- head patterns
def test_head_patterns_score_hand_made_heads():
    """Head 0 looks at the previous token, head 1 at [SEP], head 2 evenly; scores and chance levels follow."""
    ids = torch.tensor([[101, 7, 8, 1012, 7, 102]])  # [CLS] a b . a [SEP]
    tokens = [["[CLS]", "a", "b", ".", "a", "[SEP]"]]
    T = ids.shape[1]
    attention = torch.zeros(1, 1, 3, T, T)
    for i in range(T):
        attention[0, 0, 0, i, max(i - 1, 0)] = 1.0
    attention[0, 0, 1, :, T - 1] = 1.0
    attention[0, 0, 2] = 1.0 / T
    result = lesson.head_patterns(attention, ids, None, tokens, cls_id=101, sep_id=102)
    score = {name: result.scores[result.names.index(name), 0] for name in result.names}
    assert score["previous token"].tolist() == pytest.approx([1.0, 0.0, 1 / T])
    assert score["[SEP]"].tolist() == pytest.approx([0.0, 1.0, 1 / T])
    assert score["next token"].tolist() == pytest.approx([0.0, 0.25, 1 / T])  # the last "a" is followed by [SEP]
    assert score[". or ,"].tolist() == pytest.approx([0.25, 0.0, 1 / T])  # of 4 queries, the "a" after "." looks at it
    assert score["same token elsewhere"].tolist() == pytest.approx([0.0, 0.0, 1 / T])
    assert result.uniform[result.names.index("[SEP]")] == pytest.approx(1 / T)
    assert result.top_heads("[SEP]", 1)[0][:2] == (0, 1)
    assert result.heads_above("previous token", 0.5) == 1
    assert result.entropy[0].tolist() == pytest.approx([0.0, 0.0, math.log(T)], abs=1e-5)
    assert result.uniform_entropy == pytest.approx(math.log(T))


def test_head_patterns_of_a_model_on_a_batch(models, tokenizer):
    batch = encode(tokenizer, [SENTENCE, "Paris is big, and Berlin is big."])
    result = lesson.measure_head_patterns(models["roberta"], tokenizer, batch)
    assert result.scores.shape == (len(lesson.PATTERNS), 2, 2)
    assert bool(((result.scores >= 0) & (result.scores <= 1 + 1e-6)).all())
    assert result.sentences == 2 and int(result.queries[lesson.PATTERNS.index("[SEP]")]) > 0
    assert {r["pattern"] for r in result.records()} == set(lesson.PATTERNS)


# --------------------------------------------------------------------------- the logit lens
@pytest.mark.parametrize("family", KNOWN_HEADS)
def test_lens_at_the_last_layer_is_predict_masked(models, tokenizer, sentence, family):
    model = models[family]
    _, seen, labels = sentence
    true_id = int(labels[6])
    lens = inside.logit_lens(model, tokenizer, seen, None, 6, true_id, k=4)
    layers = 2
    assert lens.top_ids.shape == (layers + 1, 4) and lens.top_probs.shape == (layers + 1, 4)
    assert lens.depth_labels == ("embeddings", "layer 1", "layer 2")
    prediction = predict_masked(model, tokenizer, seen, None, labels, k=4).positions[0]
    assert lens.top_ids[-1].tolist() == list(prediction.top_ids)
    assert lens.top_probs[-1].tolist() == pytest.approx(list(prediction.top_probs), rel=1e-5, abs=1e-7)
    assert float(lens.true_prob[-1]) == pytest.approx(prediction.true_prob, rel=1e-5)
    assert int(lens.true_rank[-1]) == prediction.true_rank
    assert bool((lens.top_probs[:, :-1] >= lens.top_probs[:, 1:]).all())  # best first at every depth


def test_lens_is_refused_for_an_unknown_head(models, tokenizer, sentence):
    _, seen, labels = sentence
    with pytest.raises(inside.LensUnavailable, match="not available for ElectraForMaskedLM"):
        inside.logit_lens(models["electra"], tokenizer, seen, None, 6, int(labels[6]))


def test_first_top1_is_the_depth_from_which_the_answer_stays_first(tokenizer):
    ranks = torch.tensor([5, 1, 3, 1, 1])
    lens = inside.LogitLens(0, 7, "x", torch.zeros(5, 1, dtype=torch.long), torch.zeros(5, 1), (("a",),) * 5,
                            torch.zeros(5), ranks, torch.zeros(5))
    assert lens.first_top1 == 3
    never = inside.LogitLens(0, 7, "x", torch.zeros(2, 1, dtype=torch.long), torch.zeros(2, 1), (("a",),) * 2,
                             torch.zeros(2), torch.tensor([1, 2]), torch.zeros(2))
    assert never.first_top1 is None


# --------------------------------------------------------------------------- saliency
@pytest.mark.parametrize("family", ["bert", "roberta", "electra"])
def test_leave_one_out_equals_a_direct_recomputation(models, tokenizer, sentence, family):
    model = models[family]
    _, seen, labels = sentence
    true_id = int(labels[6])
    skip = [0, seen.numel() - 1]
    loo = inside.leave_one_out(model, tokenizer, seen, None, 6, true_id, skip=skip)
    base = predict_masked(model, tokenizer, seen, None, labels).positions[0].loss  # -log p(true)
    for j in range(seen.numel()):
        if j in skip or j == 6:
            assert math.isnan(float(loo[j]))
            continue
        hidden = seen.clone()
        hidden[j] = tokenizer.mask_token_id
        again = predict_masked(model, tokenizer, hidden, None, labels).positions[0].loss
        assert float(loo[j]) == pytest.approx(again - base, abs=2e-5)  # log p drop = loss rise


def test_leave_one_out_of_another_mask_is_zero(models, tokenizer, sentence):
    _, seen, labels = sentence
    two = seen.clone()
    two[2] = tokenizer.mask_token_id
    loo = inside.leave_one_out(models["bert"], tokenizer, two, None, 6, int(labels[6]))
    assert float(loo[2]) == 0.0


def test_gradient_x_input_on_a_linear_model_is_its_closed_form():
    """score(E) = Σ_j a_j · e_j: the gradient for token j is a_j, so gradient × input is a_j · e_j exactly."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 5, generator=g, dtype=torch.float64)
    e = torch.randn(7, 5, generator=g, dtype=torch.float64)
    baseline = torch.randn(5, generator=g, dtype=torch.float64)
    got = inside.gradient_x_input(lambda x: (a * x).sum(), e)
    assert torch.allclose(got.double(), (a * e).sum(-1).float().double(), atol=1e-6)
    delta = inside.gradient_x_input(lambda x: (a * x).sum(), e, baseline)
    assert torch.allclose(delta.double(), (a * (e - baseline)).sum(-1).float().double(), atol=1e-6)
    # for a linear score, gradient × (input − baseline) IS the change from replacing e_j by the baseline
    for j in range(7):
        replaced = e.clone()
        replaced[j] = baseline
        assert float(delta[j]) == pytest.approx(float((a * e).sum() - (a * replaced).sum()), abs=1e-5)


@pytest.mark.parametrize("family", ["bert", "albert", "electra"])
def test_saliency_shapes_and_no_gradients_left_on_the_model(models, tokenizer, sentence, family):
    model = models[family]
    _, seen, labels = sentence
    result = inside.saliency(model, tokenizer, seen, None, 6, int(labels[6]))
    T = seen.numel()
    assert result.leave_one_out.shape == result.grad_x_input.shape == result.grad_x_delta.shape == (T,)
    assert math.isnan(float(result.leave_one_out[0])) and math.isnan(float(result.leave_one_out[T - 1]))
    assert float(result.grad_x_delta[6]) == 0.0  # the position is [MASK] itself: no difference to [MASK]
    assert result.log_prob == pytest.approx(
        -predict_masked(model, tokenizer, seen, None, labels).positions[0].loss, abs=1e-4)
    assert -1.0 <= result.tau_input <= 1.0 and -1.0 <= result.tau_delta <= 1.0
    assert all(p.grad is None for p in model.parameters())  # the shared model got no .grad
    assert len(result.records()) == T


def test_kendall_tau_matches_scipy_with_ties():
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        a = torch.randint(0, 5, (15,), generator=g).double()  # many ties
        b = torch.randn(15, generator=g, dtype=torch.float64)
        b[::4] = b[0]
        expected = scipy.stats.kendalltau(a.numpy(), b.numpy()).statistic  # τ-b
        assert inside.kendall_tau(a, b) == pytest.approx(expected, abs=1e-12)


def test_kendall_tau_ignores_nan_and_needs_two_values():
    a = torch.tensor([1.0, float("nan"), 2.0, 3.0])
    b = torch.tensor([3.0, 0.0, 2.0, 1.0])
    assert inside.kendall_tau(a, b) == -1.0
    assert math.isnan(inside.kendall_tau(torch.tensor([1.0]), torch.tensor([2.0])))
    assert math.isnan(inside.kendall_tau(torch.ones(4), torch.arange(4.0)))  # a constant has no order
    taus = inside.layer_agreement(torch.rand(3, 2, 4), torch.tensor([float("nan"), 1.0, 2.0, 3.0]))
    assert taus.shape == (3,)


# --------------------------------------------------------------------------- what training changed
def test_compare_models_base_against_a_changed_copy(models, tokenizer, sentence):
    import copy

    base = models["bert"]
    _, seen, labels = sentence
    same = lesson.compare_models(base, base, tokenizer, seen, None, labels, position=6, k=3)
    assert same.loss_change == (0.0,)
    assert torch.equal(same.base_lens.true_rank, same.trained_lens.true_rank)
    changed = copy.deepcopy(base)
    with torch.no_grad():
        changed.cls.predictions.bias[int(labels[6])] += 5.0  # "training" that favours the true token
    result = lesson.compare_models(base, changed, tokenizer, seen, None, labels, position=6, k=3)
    assert result.loss_change[0] < -1.0
    assert int(result.trained_lens.true_rank[-1]) <= int(result.base_lens.true_rank[-1])
    assert result.records()[0]["loss_change"] == result.loss_change[0]
    with pytest.raises(InputError):
        lesson.compare_models(base, changed, tokenizer, seen, None, labels[:3])


def test_too_long_a_sentence_is_refused(models, tokenizer):
    ids = torch.full((inside.MAX_TOKENS + 1,), 1996)
    with pytest.raises(InputError, match="at most"):
        inside.attention_from(models["bert"], tokenizer, ids, None, 0)


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_lens_profile_matches_the_lens_and_predictions(models, tokenizer, family):
    model = models[family]
    batch = encode(tokenizer, [SENTENCE, "Paris is the capital of France, and Berlin is big."])
    g = torch.Generator().manual_seed(0)
    labels = torch.where(torch.rand(batch.input_ids.shape, generator=g) < 0.4, batch.input_ids, -100)
    labels[batch.special_tokens_mask.bool()] = -100
    labels[0, 6] = int(batch.input_ids[0, 6])  # at least one position
    profile = inside.lens_profile(model, batch.input_ids, batch.attention_mask, labels)
    predictions = predict_masked(model, tokenizer, batch.input_ids, batch.attention_mask, labels, k=5)
    M = len(predictions.positions)
    assert profile.positions == M and profile.top1.shape == (3,)
    assert float(profile.top1[-1]) == pytest.approx(sum(p.true_rank == 1 for p in predictions.positions) / M)
    assert float(profile.top5[-1]) == pytest.approx(sum(p.true_rank <= 5 for p in predictions.positions) / M)
    assert float(profile.mean_log_prob[-1]) == pytest.approx(-predictions.mean_loss, abs=1e-4)
    one = torch.full_like(labels, -100)
    one[0, 6] = labels[0, 6]
    single = inside.lens_profile(model, batch.input_ids, batch.attention_mask, one)
    lens = inside.logit_lens(model, tokenizer, batch.input_ids[0], batch.attention_mask[0], 6, int(labels[0, 6]))
    assert single.top1.tolist() == (lens.true_rank == 1).float().tolist()
    assert single.mean_log_prob.tolist() == pytest.approx(lens.true_prob.log().tolist(), abs=1e-4)


def test_lens_profile_on_texts_counts_mask_positions_only(models, tokenizer):
    texts = [SENTENCE, "Paris is the capital of France, and Berlin is big.", "A dog ran in the park today."] * 4
    profile = lesson.lens_profile_on_texts(models["roberta"], tokenizer, texts, seed=3)
    from mlm_core.data import mask_batch
    from mlm_core.masking import Decision, MaskingConfig

    batch = encode(tokenizer, texts)
    masked = mask_batch(tokenizer, batch, MaskingConfig(), torch.Generator().manual_seed(3), trace=False)
    assert profile.positions == int((masked.decisions == int(Decision.MASK)).sum()) > 0
    assert bool(((profile.top1 <= profile.top5) & (profile.top5 <= 1)).all())


def test_agreement_over_texts_is_the_per_sentence_comparison(models, tokenizer):
    texts = ["The cat sat on the mat.", "Paris is the capital of France."]
    summary = lesson.agreement_over_texts(models["bert"], tokenizer, texts)
    assert summary.taus.shape == (2, 2 + 2) and summary.names[0] == "gradient × input"
    encoded = encode(tokenizer, texts[1])
    tokens, special = encoded.tokens[0], [bool(x) for x in encoded.special_tokens_mask[0].tolist()]
    position = lesson.last_word(tokens, special)
    assert tokens[position] == "france"
    ids = encoded.input_ids[0].clone()
    true_id = int(ids[position])
    ids[position] = tokenizer.mask_token_id
    direct = inside.saliency(models["bert"], tokenizer, ids, None, position, true_id)
    assert float(summary.taus[1, 0]) == pytest.approx(direct.tau_input, nan_ok=True)
    assert float(summary.taus[1, 1]) == pytest.approx(direct.tau_delta, nan_ok=True)
    assert [r["sentences"] for r in summary.records()][:2] == [int(summary.taus[:, 0].isfinite().sum()),
                                                               int(summary.taus[:, 1].isfinite().sum())]


def test_lesson_export_holds_every_picture(models, tokenizer, sentence):
    from mlm_core.lessons.export import zip_contents, lesson_zip
    from mlm_core.figures.inside import lesson_figures

    model = models["bert"]
    _, seen, labels = sentence
    true_id = int(labels[6])
    attention = inside.attention_from(model, tokenizer, seen, None, 6)
    patterns = lesson.measure_head_patterns(model, tokenizer, encode(tokenizer, [SENTENCE]))
    result = inside.saliency(model, tokenizer, seen, None, 6, true_id)
    lens = inside.logit_lens(model, tokenizer, seen, None, 6, true_id)
    taus = inside.layer_agreement(attention.weights, result.leave_one_out)  # the caller computes, the figure draws
    figures = lesson_figures(attention, patterns, result, taus, lens=lens, head=(1, 1))
    drawn = figures["agreement"].data[0].y[2:]
    assert [v if v is None else pytest.approx(v) for v in drawn] == \
        [t if t == t else None for t in taus.tolist()]
    names = zip_contents(lesson_zip("Inside the model", figures=figures, html=False,
                                    tables={"saliency": result.records()}))
    for chart in ("head_grid", "enlarged_head", "layer_averages", "head_patterns", "saliency", "agreement",
                  "logit_lens"):
        assert f"charts/{chart}.json" in names
    assert "saliency.csv" in names and "lesson.json" in names


def test_an_eager_model_gives_its_own_weights(models, tokenizer):
    twin = _eager_twin(models["distilbert"])
    batch = encode(tokenizer, [SENTENCE, "A dog ran."])
    maps = inside.attention_maps(twin, batch.input_ids, batch.attention_mask)
    sdpa = inside.attention_maps(models["distilbert"], batch.input_ids, batch.attention_mask)
    real = batch.attention_mask.bool()
    assert twin.config._attn_implementation == "eager"
    assert torch.allclose(maps.permute(0, 3, 1, 2, 4)[real], sdpa.permute(0, 3, 1, 2, 4)[real], atol=1e-5)


def test_every_view_takes_the_ids_as_a_plain_tuple(models, tokenizer, sentence):
    """The Inside page caches on a tuple of ids and passes it as it is: the same answers as a tensor gives."""
    model = models["bert"]
    _, seen, labels = sentence
    ids, true_id = tuple(seen.tolist()), int(labels[6])
    assert torch.equal(inside.attention_from(model, tokenizer, ids, None, 6).weights,
                       inside.attention_from(model, tokenizer, seen, None, 6).weights)
    assert torch.allclose(inside.gradient_saliency(model, tokenizer, ids, None, 6, true_id).grad_x_input,
                          inside.gradient_saliency(model, tokenizer, seen, None, 6, true_id).grad_x_input)
    skip = inside.special_positions(tokenizer, ids)
    assert torch.allclose(inside.leave_one_out(model, tokenizer, ids, None, 6, true_id, skip=skip),
                          inside.leave_one_out(model, tokenizer, seen, None, 6, true_id, skip=skip), equal_nan=True)
    lens, same = (inside.logit_lens(model, tokenizer, i, None, 6, true_id, k=3) for i in (ids, seen))
    assert torch.equal(lens.top_ids, same.top_ids) and torch.allclose(lens.true_prob, same.true_prob)


def test_lens_profile_scores_its_rows_a_few_at_a_time_with_the_same_result(models, tokenizer, monkeypatch):
    """Issue 29 item 1: with a link's p = 1 the lens held (M, V) scores for ~5,000 rows per depth (1.4 GB); now
    it scores at most SCORES_AT_ONCE values at a time, with the same numbers."""
    model = models["bert"]
    batch = encode(tokenizer, [SENTENCE, "Paris is the capital of France, and Berlin is big."])
    labels = torch.where(batch.special_tokens_mask.bool(), -100, batch.input_ids)  # every token
    whole = inside.lens_profile(model, batch.input_ids, batch.attention_mask, labels)
    monkeypatch.setattr(inside, "SCORES_AT_ONCE", 3 * model.config.vocab_size)  # three rows at a time
    chunked = inside.lens_profile(model, batch.input_ids, batch.attention_mask, labels)
    assert chunked.positions == whole.positions > 3
    assert chunked.top1.tolist() == whole.top1.tolist() and chunked.top5.tolist() == whole.top5.tolist()
    assert chunked.mean_log_prob.tolist() == pytest.approx(whole.mean_log_prob.tolist(), abs=1e-6)


def test_agreement_ranks_magnitudes_as_jain_and_wallace_do(models, tokenizer):
    """Issue 25 §3.3: the τ credited to Jain & Wallace (2019, §4.1) ranked the signed scores; their released
    code (successar/AttentionExplanation, Trainers/PlottingBC.py) ranks absolute gradients and absolute changes
    in the output. Here a gradient that flips the sign of every leave-one-out effect but keeps their sizes
    agrees fully on magnitudes (τ = 1) and not at all on signed scores; both are reported."""
    loo = torch.tensor([float("nan"), 0.9, -0.5, 0.1, -0.02, float("nan")])
    grad = torch.tensor([0.3, -0.9, 0.5, -0.1, 0.02, 0.0])
    gradient = inside.GradientSaliency(3, 5, "x", tuple("abcdef"), grad, grad * 2, -1.0)
    result = inside.Saliency.from_parts(gradient, loo)
    assert result.tau_input == pytest.approx(1.0) and result.tau_delta == pytest.approx(1.0)
    assert result.tau_input_signed == pytest.approx(scipy.stats.kendalltau(grad[1:5], loo[1:5]).statistic)
    assert result.tau_input_signed < 0
    attention = torch.tensor([0.1, 0.5, 0.3, 0.05, 0.01, 0.04]).reshape(1, 1, 6)  # (L, H, T)
    assert float(inside.layer_agreement(attention, loo)[0]) == pytest.approx(1.0)  # attention vs |leave-one-out|
    texts = ["The cat sat on the mat.", "Paris is the capital of France."]
    summary = lesson.agreement_over_texts(models["bert"], tokenizer, texts)
    measures = {r["measure"]: r for r in summary.records()}
    assert measures["gradient × input"]["compares"] == "magnitudes"
    assert measures["gradient × input, signed"]["compares"] == "signed scores"
    assert summary.signed_taus.shape == (2, 2)
