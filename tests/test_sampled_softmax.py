"""Sampled softmax: exact at K = V, the importance-sampling estimate of Z, the draws' law, the K sweep,
the gradient each variant sends to the logits, and the Loss page's figures built on them."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from mlm_core.lessons.loss_lab import LOSS_SETTINGS, gradient_rows, per_token_rows, reaches_full_loss, sweep_summary
from dataclasses import replace

from mlm_core.loss_registry import logit_gradients
from mlm_core.losses import (cosine, full_cross_entropy, full_head_loss, loss_and_grad, token_counts,
                             token_frequency_weights, weighted_cross_entropy)
from mlm_core.sampled_softmax import (
    CORRECTIONS,
    SAMPLED_SOFTMAX,
    SampledSoftmaxConfig,
    draw_negatives,
    proposal_distribution,
    proposal_mass_report,
    sampled_softmax_from_logits,
    sampled_softmax_loss,
    sampled_softmax_sweep,
    sweep_ks,
)

V_DEFAULT, H_DEFAULT = 30522, 384  # the default model's head


def _counts(V, seed=7):
    """Skewed, Zipf-like counts with some zeros: a proposal far from uniform."""
    g = torch.Generator().manual_seed(seed)
    c = (1000.0 / torch.arange(1, V + 1).double() ** 1.2).round()
    return c[torch.randperm(V, generator=g)]


ALL = [(s, c) for s in ("uniform", "unigram", "log_uniform", "softmax") for c in CORRECTIONS]


@pytest.mark.parametrize("sampler,correction", ALL)
def test_without_replacement_k_equals_v_every_correction_is_full(sampler, correction, head_rows):
    """K = V distinct classes: every class is a candidate with π = 1, so log Q = 0 and every
    correction gives the full loss and the full gradient."""
    hidden, weight, bias, targets = head_rows(M=16, V=200, H=16)
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


def test_sampled_without_hit_removal_counts_true_class_twice(head_rows):
    hidden, weight, bias, targets = head_rows(M=8, V=30, H=8)
    g = torch.Generator().manual_seed(0)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=30, sampler="uniform", replacement=False,
                               logq_correction=False, remove_accidental_hits=False, generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    assert out.diagnostics["num_hits"] == 0 and out.diagnostics["hits_found"] == 8
    assert (out.per_token > full.per_token).all()


def test_sampled_diagnostics_and_reproducible(head_rows):
    hidden, weight, bias, targets = head_rows(M=10, V=500)
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


def test_sampled_uses_only_candidate_rows_of_the_weight(head_rows):
    """The loss never touches the (M, V) logits: its gradient lives on the K + M candidate rows."""
    hidden, weight, bias, targets = head_rows(M=6, V=1000)
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
def test_default_estimate_of_z_is_unbiased(replacement, head_rows):
    """The default sampled softmax estimates Z = Σ exp(s_v) without bias, with a skewed proposal
    (unigram of skewed counts) and a small exact case (V = 12, K = 4): the mean of 6,000 draws is
    within 4 standard errors of Z, for every row. TensorFlow's value is not such an estimate."""
    hidden, weight, bias, targets = head_rows(M=4, V=12, H=6, seed=4)
    weight = weight * 0.6
    z = torch.logsumexp((hidden @ weight.T + bias).double(), 1).exp()  # (M,)
    counts = _counts(12, seed=3)
    est = _z_hats(hidden, weight, bias, targets, 6_000, num_sampled=4, counts=counts, replacement=replacement)
    mean, se = est.mean(0), est.std(0) / math.sqrt(len(est))
    assert ((mean - z).abs() <= 4 * se).all(), (mean, z, se)
    tf = _z_hats(hidden, weight, bias, targets, 2_000, num_sampled=4, counts=counts, replacement=replacement,
                 logq_on_true=True)
    assert ((tf.mean(0) - z).abs() > 10 * tf.std(0) / math.sqrt(len(tf))).any()


def test_default_loss_is_consistent_as_k_grows(head_rows):
    """E[log Ẑ] ≤ log Z (Jensen): low on average, and the gap closes as K grows; zero at K = V."""
    hidden, weight, bias, targets = head_rows(M=6, V=60, H=6, seed=4)
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
    """M = 0 with every sampler: exactly 0 (F.cross_entropy gives NaN there), still attached to the graph."""
    V, H = 20, 4
    hidden = torch.zeros(0, H, requires_grad=True)
    targets = torch.zeros(0, dtype=torch.long)
    outs = [
        sampled_softmax_loss(hidden, torch.randn(V, H), torch.zeros(V), targets,
                             num_sampled=5, counts=torch.ones(V), generator=torch.Generator().manual_seed(0)),
    ]
    for sampler in ("unigram", "softmax", "log_uniform", "uniform"):
        outs.append(sampled_softmax_loss(torch.zeros(0, H), torch.randn(V, H), None, targets, num_sampled=5,
                                         sampler=sampler, counts=torch.ones(V), generator=torch.Generator()))
    for out in outs:
        assert out.loss.item() == 0.0 and not torch.isnan(out.loss)
        assert out.diagnostics["empty"] is True and out.per_token.shape == (0,)
    outs[0].loss.backward()
    assert hidden.grad is not None and (hidden.grad == 0).all()


@pytest.mark.parametrize("correction", list(CORRECTIONS))
def test_logit_gradients(correction, head_rows):
    hidden, weight, bias, targets = head_rows(M=5, V=30)
    logits = hidden @ weight.T + bias
    w = token_frequency_weights(torch.arange(30), scheme="inverse")
    logq, on_true = CORRECTIONS[correction]
    sampled = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=8, sampler="log_uniform",
                                   logq_correction=logq, logq_on_true=on_true,
                                   generator=torch.Generator().manual_seed(0))
    outputs = {"full": full_cross_entropy(logits, targets), "weighted": weighted_cross_entropy(logits, targets, w),
               "sampled": sampled}
    grads = logit_gradients(logits, targets, 2, outputs)
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


def test_sweep_reaches_v_and_says_what_it_measured(head_rows):
    """The sweep's default K values end at K = V. Without replacement every correction is exactly the
    full loss there; with replacement none is, and the summary says so instead of claiming convergence."""
    hidden, weight, bias, targets = head_rows(M=10, V=300, H=16)
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


def test_figures_build(head_rows):
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

    hidden, weight, bias, targets = head_rows(M=6, V=300, H=8)
    logits = hidden @ weight.T + bias
    sampled = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=16, counts=_counts(300),
                                   generator=torch.Generator().manual_seed(0))
    outs = {"full": full_cross_entropy(logits, targets),
            "weighted": weighted_cross_entropy(logits, targets, torch.ones(300)), "sampled": sampled}
    grads = logit_gradients(logits, targets, 0, outs)
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


def test_sweep_rows_are_the_sampled_losses_of_its_draws_with_their_standard_error(head_rows):
    """Issue 25 §3.2: the sweep's "bias" was the mean of 5 draws with no error bar. Each row is now the mean of
    SWEEP_DRAWS (>= 50) draws of sampled_softmax_loss on exactly those draws (the sweep takes the candidates'
    logits from the full logits: same values to 1e-5), its standard error std / sqrt(n) and one draw's spread;
    the gradient cosine is loss_and_grad's on the first draws."""
    from mlm_core.sampled_softmax import SWEEP_COSINE_DRAWS, SWEEP_DRAWS

    assert SWEEP_DRAWS >= 50
    hidden, weight, bias, targets = head_rows(M=10, V=300, H=16)
    counts = _counts(300)
    for replacement in (False, True):
        config = SampledSoftmaxConfig(num_sampled=16, replacement=replacement)
        rows = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(8, 64), config=config, counts=counts,
                                     generator=torch.Generator().manual_seed(3))
        q = proposal_distribution(config.sampler, 300, counts=counts, power=config.power, smoothing=config.smoothing)
        gen = torch.Generator().manual_seed(3)
        full_fn = full_head_loss(targets)
        full, full_grad, _ = loss_and_grad(full_fn, hidden, weight, bias)
        for k in (8, 64):
            draws = [draw_negatives(q, k, replacement, gen) for _ in range(SWEEP_DRAWS)]
            for correction in CORRECTIONS:
                kwargs = replace(config, correction=correction).loss_kwargs()
                values, cosines = [], []
                for i, neg in enumerate(draws):
                    fn = (lambda h, w, b, neg=neg: sampled_softmax_loss(h, w, b, targets, negatives=neg, **kwargs))
                    loss, grad, _ = loss_and_grad(fn, hidden, weight, bias)
                    values.append(loss)
                    if i < SWEEP_COSINE_DRAWS:
                        cosines.append(cosine(grad, full_grad))
                row = next(r for r in rows if r["K"] == k and r["correction"] == correction)
                v = torch.tensor(values, dtype=torch.float64)
                assert row["draws"] == SWEEP_DRAWS and row["cosine_draws"] == SWEEP_COSINE_DRAWS
                assert abs(row["loss"] - float(v.mean())) < 1e-5 and abs(row["loss_std"] - float(v.std())) < 1e-5
                assert abs(row["loss_se"] - float(v.std()) / SWEEP_DRAWS ** 0.5) < 1e-6
                assert abs(row["rel_bias"] - (float(v.mean()) - full) / full) < 1e-5
                assert abs(row["rel_bias_se"] - row["loss_se"] / abs(full)) < 1e-9
                assert abs(row["rel_spread"] - row["loss_std"] / abs(full)) < 1e-9
                assert abs(row["grad_cosine"] - sum(cosines) / len(cosines)) < 1e-5


def test_sweep_reports_its_progress_and_draws_once_where_nothing_is_random(head_rows):
    hidden, weight, bias, targets = head_rows(M=6, V=120, H=8)
    heard = []
    rows = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(16, 120), counts=_counts(120), repeats=50,
                                 generator=torch.Generator().manual_seed(0), on_progress=lambda d, w: heard.append((d, w)))
    assert [d for d, _ in heard] == [0.5, 1.0] and "K = 120" in heard[-1][1]
    at_v = [r for r in rows if r["K"] == 120]
    assert all(r["draws"] == 1 and r["loss_std"] == 0 and reaches_full_loss(r) for r in at_v)
