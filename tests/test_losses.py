"""Loss variants: references, exact equalities, the sampled-softmax estimate and its K sweep, empty batches."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from mlm_core.lessons.loss_lab import LOSS_SETTINGS, gradient_rows, per_token_rows, reaches_full_loss, sweep_summary
from mlm_core.losses import (
    CORRECTIONS,
    SAMPLED_SOFTMAX,
    LossOutput,
    SampledSoftmaxConfig,
    draw_negatives,
    full_cross_entropy,
    logit_gradients,
    loop_cross_entropy,
    proposal_distribution,
    proposal_mass_report,
    sampled_softmax_from_logits,
    sampled_softmax_loss,
    sampled_softmax_sweep,
    sweep_ks,
    token_counts,
    token_frequency_weights,
    weighted_cross_entropy,
)

V_DEFAULT, H_DEFAULT = 30522, 384  # the default model's head


def _rows(M=12, V=50, H=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(M, H, generator=g)
    weight = torch.randn(V, H, generator=g)
    bias = torch.randn(V, generator=g) * 0.1
    targets = torch.randint(V, (M,), generator=g)
    return hidden, weight, bias, targets


def test_full_equals_f_cross_entropy():
    hidden, weight, bias, targets = _rows()
    logits = hidden @ weight.T + bias
    out = full_cross_entropy(logits, targets)
    assert isinstance(out, LossOutput)
    assert torch.allclose(out.loss, F.cross_entropy(logits, targets), atol=1e-6)
    assert torch.allclose(out.per_token, F.cross_entropy(logits, targets, reduction="none"), atol=1e-6)
    assert out.per_token.shape == (12,)


def test_hand_computed_2x3():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    targets = torch.tensor([0, 1])
    e = torch.e
    expected = (-(torch.log(torch.tensor(e**2 / (e**2 + 2)))) - torch.log(torch.tensor(e / (e + 2)))) / 2
    assert abs(full_cross_entropy(logits, targets).loss.item() - expected.item()) < 1e-6


def test_loop_equals_vectorised():
    hidden, weight, bias, targets = _rows(M=20, V=300)
    logits = (hidden @ weight.T + bias) * 5  # large logits: the loop must still be stable
    loop, full = loop_cross_entropy(logits, targets), full_cross_entropy(logits, targets)
    assert torch.allclose(loop.per_token, full.per_token, atol=1e-5)
    assert torch.allclose(loop.loss, full.loss, atol=1e-6)


def test_weighted_equals_f_cross_entropy_weight():
    hidden, weight, bias, targets = _rows(M=30, V=40)
    logits = hidden @ weight.T + bias
    counts = torch.randint(0, 100, (40,), generator=torch.Generator().manual_seed(1))
    for scheme in ("inverse", "inverse_sqrt", "log", "none"):
        w = token_frequency_weights(counts, scheme=scheme)
        out = weighted_cross_entropy(logits, targets, w)
        assert torch.allclose(out.loss, F.cross_entropy(logits, targets, weight=w), atol=1e-6), scheme
        assert torch.allclose(out.per_token.mean(), out.loss, atol=1e-6)


def test_weights_schemes_documented_values():
    counts = torch.tensor([99, 0, 9])
    w = token_frequency_weights(counts, scheme="inverse", smoothing=1.0, normalize=False)
    assert torch.allclose(w, torch.tensor([1 / 100, 1.0, 1 / 10]))
    w = token_frequency_weights(counts, scheme="inverse_sqrt", normalize=False)
    assert torch.allclose(w, torch.tensor([0.1, 1.0, 10 ** -0.5]))
    w = token_frequency_weights(counts, scheme="log", normalize=False)
    assert torch.allclose(w, torch.log1p(111 / torch.tensor([100.0, 1.0, 10.0])))
    assert torch.equal(token_frequency_weights(counts, scheme="none", normalize=False), torch.ones(3))
    for scheme in ("inverse", "inverse_sqrt", "log"):
        w = token_frequency_weights(counts, scheme=scheme)  # normalised: a corpus token weighs 1 on average
        assert abs(float((counts.double() * w.double()).sum() / counts.sum()) - 1) < 1e-5
        assert torch.isfinite(w).all() and (w > 0).all()
        assert w[1] > w[2] > w[0]  # rarer → heavier
    with pytest.raises(ValueError):
        token_frequency_weights(counts, scheme="bogus")
    with pytest.raises(ValueError):
        token_frequency_weights(counts, smoothing=0)


def test_a_corpus_token_weighs_one_on_average(tokenizer):
    """What the Loss page and the Bug museum say: weights are normalised so that a token drawn from the corpus
    has weight 1 on average, so (w·CE).mean() and Σ w·CE / Σ w both estimate the weighted risk E[w·CE].
    Before, the average ran over the smoothed counts, where each of the ~27,600 ids the workshop corpus never
    has counted as a corpus token: a real corpus token weighed 0.15 on average (inverse), 0.33 (inverse_sqrt),
    0.75 (log). Exact up to float rounding (1e-4)."""
    from mlm_core.bundled import workshop_sentences

    counts = token_counts(tokenizer, workshop_sentences())
    assert int((counts == 0).sum()) > int(counts.sum()), "most ids are unseen: the case that went wrong"
    for scheme in ("inverse", "inverse_sqrt", "log", "none"):
        for smoothing in (0.1, 1.0, 10.0):
            w = token_frequency_weights(counts, scheme=scheme, smoothing=smoothing).double()
            assert abs(float((counts * w).sum() / counts.sum()) - 1) < 1e-4, (scheme, smoothing)
    empty = token_frequency_weights(torch.zeros(5, dtype=torch.long), scheme="inverse")
    assert torch.allclose(empty, torch.ones(5)), "no counts: the smoothed counts stand in"


def test_token_counts():
    from mlm_core.bundled import load_default_tokenizer

    tok = load_default_tokenizer()
    counts = token_counts(tok, ["the cat", "the dog", "  "])
    assert counts.shape == (len(tok),)
    the = tok.convert_tokens_to_ids("the")
    assert counts[the] == 2 and counts.sum() == 4
    assert counts[tok.cls_token_id] == 0



def _counts(V, seed=7):
    """Skewed, Zipf-like counts with some zeros: a proposal far from uniform."""
    g = torch.Generator().manual_seed(seed)
    c = (1000.0 / torch.arange(1, V + 1).double() ** 1.2).round()
    return c[torch.randperm(V, generator=g)]


ALL = [(s, c) for s in ("uniform", "unigram", "log_uniform", "softmax") for c in CORRECTIONS]


@pytest.mark.parametrize("sampler,correction", ALL)
def test_without_replacement_k_equals_v_every_correction_is_full(sampler, correction):
    """K = V distinct classes: every class is a candidate with π = 1, so log Q = 0 and every
    correction gives the full loss and the full gradient."""
    hidden, weight, bias, targets = _rows(M=16, V=200, H=16)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    logq, on_true = CORRECTIONS[correction]
    h = hidden.clone().requires_grad_(True)
    out = sampled_softmax_loss(h, weight, bias, targets, num_sampled=200, sampler=sampler, counts=_counts(200),
                               replacement=False, logq_correction=logq, logq_on_true=on_true,
                               generator=torch.Generator().manual_seed(3))
    assert torch.allclose(out.loss, full.loss, atol=1e-5)
    assert torch.allclose(out.per_token, full.per_token, atol=1e-5)
    assert out.diagnostics["num_hits"] == 16 and out.diagnostics["K"] == 200
    assert out.diagnostics["full_softmax"] is (sampler == "softmax")
    (g_sampled,) = torch.autograd.grad(out.loss, h)
    h2 = hidden.clone().requires_grad_(True)
    (g_full,) = torch.autograd.grad(F.cross_entropy(h2 @ weight.T + bias, targets), h2)
    assert torch.allclose(g_sampled, g_full, atol=1e-6)


def test_sampled_k_equals_v_default_head_shapes():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(20, H_DEFAULT, generator=g)
    weight = torch.randn(V_DEFAULT, H_DEFAULT, generator=g) * 0.05
    bias = torch.zeros(V_DEFAULT)
    targets = torch.randint(V_DEFAULT, (20,), generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=V_DEFAULT, counts=torch.zeros(V_DEFAULT),
                               generator=g)  # the defaults: unigram, without replacement, importance sampling
    assert abs(out.loss.item() - full.loss.item()) < 1e-5


def test_sampled_without_hit_removal_counts_true_class_twice():
    hidden, weight, bias, targets = _rows(M=8, V=30, H=8)
    g = torch.Generator().manual_seed(0)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=30, sampler="uniform", replacement=False,
                               logq_correction=False, remove_accidental_hits=False, generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    assert out.diagnostics["num_hits"] == 0 and out.diagnostics["hits_found"] == 8
    assert (out.per_token > full.per_token).all()


def test_sampled_diagnostics_and_reproducible():
    hidden, weight, bias, targets = _rows(M=10, V=500)
    kwargs = dict(num_sampled=40, sampler="log_uniform")
    a = sampled_softmax_loss(hidden, weight, bias, targets, **kwargs, generator=torch.Generator().manual_seed(5))
    b = sampled_softmax_loss(hidden, weight, bias, targets, **kwargs, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.loss, b.loss) and torch.equal(a.diagnostics["sampled_ids"], b.diagnostics["sampled_ids"])
    assert a.diagnostics["sampled_ids"].shape == (40,) and a.diagnostics["K"] == 40
    assert a.diagnostics["unique_sampled"] == 40  # the default draws without replacement
    with pytest.raises(ValueError):
        sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=4, sampler="uniform", generator=None)
    with pytest.raises(ValueError):  # the default sampler needs the corpus' counts
        sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=4, generator=torch.Generator())
    with pytest.raises(ValueError):
        sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=501, sampler="uniform",
                             generator=torch.Generator())


def test_sampled_uses_only_candidate_rows_of_the_weight():
    """The loss never touches the (M, V) logits: its gradient lives on the K + M candidate rows."""
    hidden, weight, bias, targets = _rows(M=6, V=1000)
    w = weight.clone().requires_grad_(True)
    out = sampled_softmax_loss(hidden, w, bias, targets, num_sampled=10, counts=_counts(1000),
                               generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    touched = (w.grad.abs().sum(1) > 0).nonzero().flatten()
    allowed = set(out.diagnostics["sampled_ids"].tolist()) | set(targets.tolist())
    assert set(touched.tolist()) <= allowed


def test_defaults_live_in_one_place():
    """SAMPLED_SOFTMAX is what the loss, the Loss page's settings and TrainConfig use by default."""
    from mlm_core.training import TrainConfig

    assert SAMPLED_SOFTMAX == SampledSoftmaxConfig()
    assert (SAMPLED_SOFTMAX.sampler, SAMPLED_SOFTMAX.replacement, SAMPLED_SOFTMAX.correction) == (
        "unigram", False, "importance")
    assert LOSS_SETTINGS.sampled is SAMPLED_SOFTMAX
    cfg = TrainConfig()
    assert (cfg.sampler, cfg.num_sampled, cfg.logq_correction) == (
        SAMPLED_SOFTMAX.sampler, SAMPLED_SOFTMAX.num_sampled, SAMPLED_SOFTMAX.logq_correction)
    with pytest.raises(ValueError):
        SampledSoftmaxConfig(correction="bogus")
    with pytest.raises(ValueError):
        SampledSoftmaxConfig(smoothing=0)


def _exact_inclusion(q, K):
    """π_k of successive sampling (K draws in proportion to q among the classes not drawn yet), by enumeration."""
    q = [float(x) for x in q]
    pi = [0.0] * len(q)
    for order in itertools.permutations(range(len(q)), K):
        p, left = 1.0, 1.0
        for i in order:
            p *= q[i] / left
            left -= q[i]
        for i in order:
            pi[i] += p
    return torch.tensor(pi, dtype=torch.float64)


def test_inclusion_probabilities_match_counted_draws():
    """Without replacement, π_k has no closed form for unequal q. Exact values by enumeration (V = 6,
    K = 3) against (a) the share of 20,000 draws that contain k and (b) the mean over draws of the
    inclusion probability the estimate divides by (given the other classes' draws). Tolerance: 4
    standard errors of each Monte-Carlo mean."""
    q = torch.tensor([0.45, 0.25, 0.15, 0.08, 0.05, 0.02], dtype=torch.float64)
    exact = _exact_inclusion(q, 3)
    assert abs(float(exact.sum()) - 3) < 1e-9
    g = torch.Generator().manual_seed(0)
    N = 20_000
    hits = torch.zeros(6, dtype=torch.float64)
    given = torch.zeros(N, 6, dtype=torch.float64)
    for n in range(N):
        neg = draw_negatives(q, 3, replacement=False, generator=g)
        assert neg.ids.unique().numel() == 3
        hits[neg.ids] += 1
        given[n] = neg.inclusion_given_others()
        if n < 50:  # the estimate divides each sampled class by exactly these values
            assert torch.allclose(neg.expected_count(neg.ids), given[n][neg.ids])
    share = hits / N
    se = (exact * (1 - exact) / N).sqrt()
    assert ((share - exact).abs() <= 4 * se + 1e-12).all(), (share, exact)
    mean, se_given = given.mean(0), given.std(0) / math.sqrt(N)
    assert ((mean - exact).abs() <= 4 * se_given + 1e-9).all(), (mean, exact)
    # K·q, the with-replacement count, is no probability here: it exceeds 1 for the most frequent class.
    assert 3 * q[0] > 1 >= exact[0]


def test_importance_weights_are_unbiased_without_replacement():
    """What the estimate needs: each sampled class divided by its expected count gives, for every
    class j, E[1(j sampled) / E[count_j]] = 1. Skewed proposal (log-uniform over V = 6), K = 3
    distinct draws, 10,000 draws through sampled_softmax_loss itself; tolerance 4 standard errors."""
    V, K, N = 6, 3, 10_000
    hidden, weight, bias, targets = torch.zeros(1, 2), torch.zeros(V, 2), torch.zeros(V), torch.tensor([0])
    g = torch.Generator().manual_seed(0)
    weights = torch.zeros(N, V, dtype=torch.float64)
    for n in range(N):
        d = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=K, sampler="log_uniform",
                                 replacement=False, logq_correction=True, logq_on_true=False, generator=g).diagnostics
        weights[n, d["sampled_ids"]] = torch.exp(-d["log_expected_sampled"].double())
    mean, se = weights.mean(0), weights.std(0) / math.sqrt(N)
    assert ((mean - 1).abs() <= 4 * se).all(), (mean, se)


def test_draw_negatives_law_matches_torch_multinomial():
    """The exponential race draws the same law as torch.multinomial without replacement."""
    q = torch.tensor([0.5, 0.2, 0.2, 0.1], dtype=torch.float64)
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    N = 10_000
    ours, theirs = torch.zeros(4), torch.zeros(4)
    for _ in range(N):
        ours[draw_negatives(q, 2, False, g1).ids[0]] += 1  # the first class drawn: P = q
        theirs[torch.multinomial(q, 2, replacement=False, generator=g2)[0]] += 1
    se = (q * (1 - q) / N).sqrt().float()
    assert ((ours / N - q.float()).abs() <= 4 * se).all() and ((theirs / N - q.float()).abs() <= 4 * se).all()


def _z_hats(hidden, weight, bias, targets, draws, **kwargs):
    """Ẑ per row for each draw, read back from the default (importance) loss: loss_i = log Ẑ_i − s_y."""
    s_y = (hidden @ weight.T + bias).gather(1, targets[:, None]).squeeze(1)
    g = torch.Generator().manual_seed(11)
    return torch.stack([torch.exp(sampled_softmax_loss(hidden, weight, bias, targets, generator=g, **kwargs).per_token
                                  .double() + s_y.double()) for _ in range(draws)])  # (draws, M)


@pytest.mark.parametrize("replacement", [False, True])
def test_default_estimate_of_z_is_unbiased(replacement):
    """The default sampled softmax estimates Z = Σ exp(s_v) without bias, with a skewed proposal
    (unigram of skewed counts) and a small exact case (V = 12, K = 4): the mean of 6,000 draws is
    within 4 standard errors of Z, for every row. TensorFlow's value is not such an estimate."""
    hidden, weight, bias, targets = _rows(M=4, V=12, H=6, seed=4)
    weight = weight * 0.6
    z = torch.logsumexp((hidden @ weight.T + bias).double(), 1).exp()  # (M,)
    counts = _counts(12, seed=3)
    est = _z_hats(hidden, weight, bias, targets, 6_000, num_sampled=4, counts=counts, replacement=replacement)
    mean, se = est.mean(0), est.std(0) / math.sqrt(len(est))
    assert ((mean - z).abs() <= 4 * se).all(), (mean, z, se)
    tf = _z_hats(hidden, weight, bias, targets, 2_000, num_sampled=4, counts=counts, replacement=replacement,
                 logq_on_true=True)
    assert ((tf.mean(0) - z).abs() > 10 * tf.std(0) / math.sqrt(len(tf))).any()


def test_default_loss_is_consistent_as_k_grows():
    """E[log Ẑ] ≤ log Z (Jensen): low on average, and the gap closes as K grows; zero at K = V."""
    hidden, weight, bias, targets = _rows(M=6, V=60, H=6, seed=4)
    full = full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()
    counts = _counts(60)
    gap = {}
    for k in (4, 16, 60):
        g = torch.Generator().manual_seed(0)
        values = [sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=k, counts=counts, generator=g)
                  .loss.item() for _ in range(300)]
        gap[k] = full - sum(values) / len(values)
    assert gap[4] > gap[16] > 0 and abs(gap[60]) < 1e-5, gap


def test_sampled_bias_shrinks_with_k_default_head():
    """Over 20 seeds, |sampled − full| at K = 4096 is less than half of that at K = 64 (uniform proposal)."""
    g = torch.Generator().manual_seed(0)
    M = 24
    hidden = torch.randn(M, H_DEFAULT, generator=g)
    weight = torch.randn(V_DEFAULT, H_DEFAULT, generator=g) * 0.1
    bias = torch.randn(V_DEFAULT, generator=g) * 0.1
    targets = torch.randint(V_DEFAULT, (M,), generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()
    bias_at = {}
    for k in (64, 4096):
        errors = [abs(sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=k, sampler="uniform",
                                           generator=torch.Generator().manual_seed(seed)).loss.item() - full)
                  for seed in range(20)]
        bias_at[k] = sum(errors) / len(errors)
    assert bias_at[4096] < 0.5 * bias_at[64], bias_at


def test_log_uniform_mass_falls_on_unused_ids(tokenizer):
    """TensorFlow's log-uniform proposal assumes ids sorted by frequency; BERT's are not: most of its
    mass lands on [unused*] ids and [PAD], which the corpus never has. The unigram proposal does not."""
    from mlm_core.bundled import workshop_sentences

    V = len(tokenizer)
    counts = token_counts(tokenizer, workshop_sentences(), V)
    log_uniform = proposal_mass_report(proposal_distribution("log_uniform", V), tokenizer, counts)
    assert log_uniform["unused"] > 0.5 and log_uniform["pad"] > 0.05 and log_uniform["never_in_corpus"] > 0.9
    unigram = proposal_mass_report(proposal_distribution("unigram", V, counts=counts), tokenizer, counts)
    assert unigram["unused"] < 0.05 and unigram["never_in_corpus"] < 0.15


def test_empty_batch_gives_zero_not_nan():
    V, H = 20, 4
    logits = torch.zeros(0, V, requires_grad=True)
    targets = torch.zeros(0, dtype=torch.long)
    assert torch.isnan(F.cross_entropy(logits, targets))  # the bug the museum shows
    outs = [
        full_cross_entropy(logits, targets),
        loop_cross_entropy(logits, targets),
        weighted_cross_entropy(logits, targets, torch.ones(V)),
        sampled_softmax_loss(torch.zeros(0, H, requires_grad=True), torch.randn(V, H), torch.zeros(V), targets,
                             num_sampled=5, counts=torch.ones(V), generator=torch.Generator().manual_seed(0)),
    ]
    for sampler in ("unigram", "softmax", "log_uniform", "uniform"):
        outs.append(sampled_softmax_loss(torch.zeros(0, H), torch.randn(V, H), None, targets, num_sampled=5,
                                         sampler=sampler, counts=torch.ones(V), generator=torch.Generator()))
    for out in outs:
        assert out.loss.item() == 0.0 and not torch.isnan(out.loss)
        assert out.diagnostics["empty"] is True and out.per_token.shape == (0,)
    outs[0].loss.backward()
    assert logits.grad is not None and (logits.grad == 0).all()


@pytest.mark.parametrize("correction", list(CORRECTIONS))
def test_logit_gradients(correction):
    hidden, weight, bias, targets = _rows(M=5, V=30)
    logits = hidden @ weight.T + bias
    w = token_frequency_weights(torch.arange(30), scheme="inverse")
    logq, on_true = CORRECTIONS[correction]
    sampled = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=8, sampler="log_uniform",
                                   logq_correction=logq, logq_on_true=on_true,
                                   generator=torch.Generator().manual_seed(0))
    grads = logit_gradients(logits, targets, 2, class_weights=w, sampled=sampled)
    z = logits.clone().requires_grad_(True)
    F.cross_entropy(z, targets).backward()
    assert torch.allclose(grads["full"], z.grad[2] * 5, atol=1e-6)
    z = logits.clone().requires_grad_(True)
    F.cross_entropy(z, targets, weight=w).backward()
    assert torch.allclose(grads["weighted"], z.grad[2] * 5, atol=1e-5)
    candidates = set(sampled.diagnostics["sampled_ids"].tolist()) | {int(targets[2])}
    outside = [i for i in range(30) if i not in candidates]
    assert (grads["sampled"][outside] == 0).all()
    assert abs(grads["sampled"].sum().item()) < 1e-5 and abs(grads["full"].sum().item()) < 1e-5
    # The sampled gradient equals autograd through the sampled loss itself.
    zz = logits.clone().requires_grad_(True)
    d = sampled.diagnostics
    out = sampled_softmax_from_logits(zz.gather(1, targets[:, None]).squeeze(1), zz[:, d["sampled_ids"]], targets,
                                      d["sampled_ids"], d["log_expected_sampled"], d["log_expected_true"],
                                      logq_correction=logq, logq_on_true=on_true)
    out.loss.backward()
    assert torch.allclose(grads["sampled"], zz.grad[2] * 5, atol=1e-5)
    rows = gradient_rows(grads, int(targets[2]), top=6)
    assert len(rows) == 6 * 3 and any(r["is_target"] for r in rows)


def test_sweep_reaches_v_and_says_what_it_measured():
    """The sweep's default K values end at K = V. Without replacement every correction is exactly the
    full loss there; with replacement none is, and the summary says so instead of claiming convergence."""
    hidden, weight, bias, targets = _rows(M=10, V=300, H=16)
    counts = _counts(300)
    assert sweep_ks(300) == [16, 64, 256, 300]
    config = SampledSoftmaxConfig(num_sampled=16)
    rows = sampled_softmax_sweep(hidden, weight, bias, targets, config=config, counts=counts, repeats=2,
                                 generator=torch.Generator().manual_seed(0))
    assert len(rows) == 4 * 3
    keys = {"K", "correction", "label", "loss", "full_loss", "bias", "rel_bias", "abs_bias", "grad_cosine", "time_ms",
            "time_ratio", "replacement"}
    assert keys <= set(rows[0])
    at_v = [r for r in rows if r["K"] == 300]
    assert {r["correction"] for r in at_v} == set(CORRECTIONS)
    assert all(reaches_full_loss(r) and abs(r["loss"] - r["full_loss"]) < 1e-5 for r in at_v)
    assert all(-1.0001 <= r["grad_cosine"] <= 1.0001 for r in rows)
    summary = sweep_summary(rows, 300)
    assert len(summary) == 3 and all("exactly the full loss" in s for s in summary)

    with_replacement = SampledSoftmaxConfig(num_sampled=16, replacement=True)
    rows = sampled_softmax_sweep(hidden, weight, bias, targets, config=with_replacement, counts=counts, repeats=2,
                                 generator=torch.Generator().manual_seed(0))
    tf_at_v = next(r for r in rows if r["K"] == 300 and r["correction"] == "tensorflow")
    assert not reaches_full_loss(tf_at_v) and abs(tf_at_v["bias"]) > 0.05
    assert any("not the full loss" in s for s in sweep_summary(rows, 300))


def test_figures_build():
    import plotly.graph_objects as go

    from mlm_core.figures.losses import (
        gradient_figure,
        k_sweep_figure,
        loss_bars,
        museum_figure,
        nsp_accuracy_figure,
        per_token_figure,
        weights_figure,
    )
    from mlm_core.lessons.loss_lab import weight_curve_rows

    hidden, weight, bias, targets = _rows(M=6, V=300, H=8)
    logits = hidden @ weight.T + bias
    sampled = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=16, counts=_counts(300),
                                   generator=torch.Generator().manual_seed(0))
    outs = {"full": full_cross_entropy(logits, targets),
            "weighted": weighted_cross_entropy(logits, targets, torch.ones(300)), "sampled": sampled}
    grads = logit_gradients(logits, targets, 0, class_weights=torch.ones(300), sampled=outs["sampled"])
    sweep = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(8, 64, 300), counts=_counts(300), repeats=1,
                                  generator=torch.Generator().manual_seed(0))
    figures = [
        loss_bars({k: float(v.loss) for k, v in outs.items()}),
        per_token_figure(per_token_rows(outs, ["<b>x</b>"] * 6)),
        gradient_figure(gradient_rows(grads, targets[0]), title="a <script>"),
        weights_figure(weight_curve_rows(torch.arange(300) % 7), batch_counts=[1.0, 3.0]),
        k_sweep_figure(sweep, vocab_size=300),
        nsp_accuracy_figure([{"step": 1, "accuracy": 0.5, "accuracy_smoothed": 0.5, "loss": 0.7}], heldout_before=0.5,
                            heldout_after=0.6),
        museum_figure([]),
    ]
    for empty in (loss_bars({}), per_token_figure([]), gradient_figure([]), weights_figure([]), k_sweep_figure([]),
                  nsp_accuracy_figure([])):
        figures.append(empty)
    assert all(isinstance(f, go.Figure) for f in figures)
    assert "<b>x</b>" not in str(figures[1].to_dict())  # token text is escaped
    assert len(figures[4].data) == 3 * 4  # three corrections × four panels


def test_loss_bars_label_the_uniform_guess_for_a_learner():
    """The Loss page's baseline reads "ln V = 10.33 (uniform guess over V = 30,522 tokens)", from the model's V."""
    import math

    from mlm_core.figures.losses import loss_bars
    from mlm_core.lessons.loss_lab import uniform_guess_label

    fig = loss_bars({"full": 3.0, "weighted": 3.3, "sampled": 2.9}, vocab_size=30522)
    assert [a.text for a in fig.layout.annotations] == ["ln V = 10.33 (uniform guess over V = 30,522 tokens)"]
    assert fig.layout.shapes[0].y0 == math.log(30522) and fig.layout.yaxis.range[1] > math.log(30522)
    assert uniform_guess_label(8) == "ln V = 2.08 (uniform guess over V = 8 tokens)"
    assert not loss_bars({"full": 3.0}).layout.annotations  # no V given: no line


# --------------------------------------------------------------------------------------------
# Unlikelihood (the default-model build's anti-copy term)
# --------------------------------------------------------------------------------------------


def test_unlikelihood_is_the_log_of_one_minus_each_other_token_of_the_sequence(tokenizer):
    """By hand on the tiny model: "coffee" hidden, "milk" (twice) and "her" are what it could copy."""
    from mlm_core.head import masked_lm_logits
    from mlm_core.losses import context_candidates, unlikelihood_loss
    from mlm_core.models import tiny_random_masked_lm

    model, _ = tiny_random_masked_lm(tokenizer)
    a, b, c = tokenizer.convert_tokens_to_ids(["milk", "coffee", "her"])
    ids = torch.tensor([[tokenizer.cls_token_id, a, b, c, a, tokenizer.sep_token_id]])
    special = torch.tensor([[True, False, False, False, False, True]])
    labels = torch.full_like(ids, -100)
    labels[0, 2] = b
    corrupted = ids.clone()
    corrupted[0, 2] = tokenizer.mask_token_id
    with torch.no_grad():
        logits, _ = masked_lm_logits(model, corrupted, torch.ones_like(ids), labels)  # (1, V)
    candidates = context_candidates(ids, special, labels, logits.shape[-1])
    assert candidates.shape == logits.shape and candidates[0].nonzero().flatten().tolist() == sorted([a, c])
    p = logits.float().softmax(-1)[0]
    expected = -(torch.log1p(-p[a]) + torch.log1p(-p[c]))  # each other token once; not the answer, not [CLS]/[SEP]
    assert float(unlikelihood_loss(logits, candidates).loss) == pytest.approx(float(expected), rel=1e-6)


def test_unlikelihood_rows_follow_the_selected_positions_and_an_empty_batch_is_zero():
    from mlm_core.losses import context_candidates, unlikelihood_loss

    ids = torch.tensor([[1, 5, 6, 2], [1, 7, 7, 2]])
    special = torch.tensor([[1, 0, 0, 1], [1, 0, 0, 1]])
    labels = torch.tensor([[-100, 5, -100, -100], [-100, -100, 7, -100]])
    cands = context_candidates(ids, special, labels, vocab_size=8)  # (2, 8), row-major
    assert cands.nonzero().tolist() == [[0, 6]]  # row 1's only other token is its own answer
    logits = torch.zeros(2, 8)
    out = unlikelihood_loss(logits, cands)
    assert out.per_token.tolist() == pytest.approx([-math.log(1 - 1 / 8), 0.0])
    empty = unlikelihood_loss(torch.zeros(0, 8, requires_grad=True), torch.zeros(0, 8, dtype=torch.bool))
    assert float(empty.loss.detach()) == 0.0 and empty.diagnostics["empty"]
