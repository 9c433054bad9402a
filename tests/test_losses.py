"""Loss variants: references, exact equalities, the K-sweep's bias trend and empty batches."""

import pytest
import torch
import torch.nn.functional as F

from mlm_core.losses import (
    LossOutput,
    compare_losses,
    expected_counts,
    full_cross_entropy,
    gradient_rows,
    logit_gradients,
    loop_cross_entropy,
    per_token_rows,
    proposal_distribution,
    sampled_softmax_loss,
    sampled_softmax_sweep,
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
        w = token_frequency_weights(counts, scheme=scheme)  # normalised: corpus-average weight 1
        c = counts.double() + 1
        assert abs(float((c * w.double()).sum() / c.sum()) - 1) < 1e-5
        assert torch.isfinite(w).all() and (w > 0).all()
        assert w[1] > w[2] > w[0]  # rarer → heavier
    with pytest.raises(ValueError):
        token_frequency_weights(counts, scheme="bogus")
    with pytest.raises(ValueError):
        token_frequency_weights(counts, smoothing=0)


def test_token_counts():
    from mlm_core.bundled import load_default_tokenizer

    tok = load_default_tokenizer()
    counts = token_counts(tok, ["the cat", "the dog", "  "])
    assert counts.shape == (len(tok),)
    the = tok.convert_tokens_to_ids("the")
    assert counts[the] == 2 and counts.sum() == 4
    assert counts[tok.cls_token_id] == 0


@pytest.mark.parametrize("sampler", ["uniform", "unigram", "log_uniform", "softmax"])
def test_sampled_k_equals_v_is_full(sampler):
    hidden, weight, bias, targets = _rows(M=16, V=200, H=16)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    counts = torch.arange(200)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=200, sampler=sampler, counts=counts,
                               replacement=False, logq_correction=False, remove_accidental_hits=True,
                               generator=torch.Generator().manual_seed(3))
    assert torch.allclose(out.loss, full.loss, atol=1e-5)
    assert torch.allclose(out.per_token, full.per_token, atol=1e-5)
    assert out.diagnostics["num_hits"] == 16 and out.diagnostics["K"] == 200
    assert out.diagnostics["full_softmax"] is (sampler == "softmax")
    # log Q without replacement at K = V: every class certain, log Q = 0, still exact.
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=200, sampler=sampler, counts=counts,
                               replacement=False, logq_correction=True, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(out.loss, full.loss, atol=1e-5)


def test_sampled_k_equals_v_default_head_shapes():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(20, H_DEFAULT, generator=g)
    weight = torch.randn(V_DEFAULT, H_DEFAULT, generator=g) * 0.05
    bias = torch.zeros(V_DEFAULT)
    targets = torch.randint(V_DEFAULT, (20,), generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=V_DEFAULT, replacement=False,
                               logq_correction=False, generator=g)
    assert abs(out.loss.item() - full.loss.item()) < 1e-5


def test_sampled_without_hit_removal_counts_true_class_twice():
    hidden, weight, bias, targets = _rows(M=8, V=30, H=8)
    g = torch.Generator().manual_seed(0)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=30, replacement=False,
                               logq_correction=False, remove_accidental_hits=False, generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets)
    assert out.diagnostics["num_hits"] == 0 and out.diagnostics["hits_found"] == 8
    assert (out.per_token > full.per_token).all()


def test_sampled_diagnostics_and_reproducible():
    hidden, weight, bias, targets = _rows(M=10, V=500)
    kwargs = dict(num_sampled=40, sampler="log_uniform", generator=None)
    a = sampled_softmax_loss(hidden, weight, bias, targets, **{**kwargs, "generator": torch.Generator().manual_seed(5)})
    b = sampled_softmax_loss(hidden, weight, bias, targets, **{**kwargs, "generator": torch.Generator().manual_seed(5)})
    assert torch.equal(a.loss, b.loss) and torch.equal(a.diagnostics["sampled_ids"], b.diagnostics["sampled_ids"])
    assert a.diagnostics["sampled_ids"].shape == (40,) and a.diagnostics["K"] == 40
    with pytest.raises(ValueError):
        sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=4, generator=None)
    with pytest.raises(ValueError):
        sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=4, sampler="unigram",
                             generator=torch.Generator())


def test_sampled_uses_only_candidate_rows_of_the_weight():
    """The loss never touches the (M, V) logits: its gradient lives on the K + M candidate rows."""
    hidden, weight, bias, targets = _rows(M=6, V=1000)
    w = weight.clone().requires_grad_(True)
    out = sampled_softmax_loss(hidden, w, bias, targets, num_sampled=10, generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    touched = (w.grad.abs().sum(1) > 0).nonzero().flatten()
    allowed = set(out.diagnostics["sampled_ids"].tolist()) | set(targets.tolist())
    assert set(touched.tolist()) <= allowed


def test_expected_counts():
    q = proposal_distribution("uniform", 100)
    assert torch.allclose(expected_counts(q, 10, replacement=False), torch.full((100,), 0.1, dtype=torch.float64))
    q = proposal_distribution("log_uniform", 1000)
    assert abs(q.sum().item() - 1) < 1e-9
    for k in (5, 100, 999):
        e = expected_counts(q, k, replacement=False)
        assert abs(e.sum().item() - k) < 1e-4 and (e <= 1).all()
    assert torch.allclose(expected_counts(q, 7, replacement=True), 7 * q)


def test_sampled_bias_shrinks_with_k_default_head():
    """Over 20 seeds, |sampled − full| at K = 4096 is less than half of that at K = 64."""
    g = torch.Generator().manual_seed(0)
    M = 24
    hidden = torch.randn(M, H_DEFAULT, generator=g)
    weight = torch.randn(V_DEFAULT, H_DEFAULT, generator=g) * 0.1
    bias = torch.randn(V_DEFAULT, generator=g) * 0.1
    targets = torch.randint(V_DEFAULT, (M,), generator=g)
    full = full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()
    for sampler in ("uniform",):
        bias_at = {}
        for k in (64, 4096):
            errors = []
            for seed in range(20):
                out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=k, sampler=sampler,
                                           generator=torch.Generator().manual_seed(seed))
                errors.append(abs(out.loss.item() - full))
            bias_at[k] = sum(errors) / len(errors)
        assert bias_at[4096] < 0.5 * bias_at[64], (sampler, bias_at)


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
                             num_sampled=5, generator=torch.Generator().manual_seed(0)),
    ]
    for sampler in ("unigram", "softmax", "log_uniform"):
        outs.append(sampled_softmax_loss(torch.zeros(0, H), torch.randn(V, H), None, targets, num_sampled=5,
                                         sampler=sampler, counts=torch.ones(V), generator=torch.Generator()))
    for out in outs:
        assert out.loss.item() == 0.0 and not torch.isnan(out.loss)
        assert out.diagnostics["empty"] is True and out.per_token.shape == (0,)
    outs[0].loss.backward()
    assert logits.grad is not None and (logits.grad == 0).all()


def test_logit_gradients():
    hidden, weight, bias, targets = _rows(M=5, V=30)
    logits = hidden @ weight.T + bias
    w = token_frequency_weights(torch.arange(30), scheme="inverse")
    sampled = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=8, sampler="log_uniform",
                                   generator=torch.Generator().manual_seed(0))
    grads = logit_gradients(logits, targets, 2, class_weights=w, sampled=sampled)
    # Full: autograd of the mean loss, times M.
    z = logits.clone().requires_grad_(True)
    F.cross_entropy(z, targets).backward()
    assert torch.allclose(grads["full"], z.grad[2] * 5, atol=1e-6)
    z = logits.clone().requires_grad_(True)
    F.cross_entropy(z, targets, weight=w).backward()
    assert torch.allclose(grads["weighted"], z.grad[2] * 5, atol=1e-5)
    # Sampled: zero outside the candidates, sums to 0.
    candidates = set(sampled.diagnostics["sampled_ids"].tolist()) | {int(targets[2])}
    outside = [i for i in range(30) if i not in candidates]
    assert (grads["sampled"][outside] == 0).all()
    assert abs(grads["sampled"].sum().item()) < 1e-5 and abs(grads["full"].sum().item()) < 1e-5
    # Sampled gradient equals autograd through the sampled loss itself.
    h = hidden.clone()
    zz = (h @ weight.T + bias).requires_grad_(True)
    d = sampled.diagnostics
    from mlm_core.losses import sampled_softmax_from_logits, expected_counts as ec
    lq = torch.log(ec(proposal_distribution("log_uniform", 30), 8, True)).float()
    out = sampled_softmax_from_logits(zz.gather(1, targets[:, None]).squeeze(1), zz[:, d["sampled_ids"]], targets,
                                      d["sampled_ids"], lq)
    out.loss.backward()
    assert torch.allclose(grads["sampled"], zz.grad[2] * 5, atol=1e-5)
    rows = gradient_rows(grads, int(targets[2]), top=6)
    assert len(rows) == 6 * 3 and any(r["is_target"] for r in rows)


def test_sweep_and_compare():
    hidden, weight, bias, targets = _rows(M=10, V=2000, H=16)
    rows = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(16, 256, 2000), sampler="log_uniform",
                                 repeats=2, generator=torch.Generator().manual_seed(0))
    assert len(rows) == 9
    keys = {"K", "correction", "logq_correction", "loss", "full_loss", "bias", "abs_bias", "grad_cosine", "time_ms",
            "time_ratio"}
    assert keys <= set(rows[0])
    by = {(r["K"], r["correction"]): r for r in rows}
    tf = "log Q on every logit (TF)"
    assert by[(2000, tf)]["grad_cosine"] > by[(16, tf)]["grad_cosine"]
    assert all(-1.0001 <= r["grad_cosine"] <= 1.0001 for r in rows)
    outs = compare_losses(hidden @ weight.T + bias, targets, hidden, weight, bias,
                          class_weights=torch.ones(2000), num_sampled=32, generator=torch.Generator().manual_seed(0))
    assert set(outs) == {"full", "weighted", "sampled"}
    assert torch.allclose(outs["full"].loss, outs["weighted"].loss, atol=1e-6)  # all weights 1
    table = per_token_rows(outs, [f"t{i}" for i in range(10)])
    assert len(table) == 30 and table[0]["token"] == "t0"


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "unigram"])
def test_logq_on_negatives_converges_to_full(sampler):
    """log Q on the negatives only, hits removed: exp(z_y) + sum_s exp(z_s) / (K Q(s)) is an unbiased
    estimate of the partition function, so with many draws the loss is the full loss. TensorFlow's
    convention (log Q on the true class too) is off by about log(K Q(y)) instead."""
    hidden, weight, bias, targets = _rows(M=6, V=60, H=6, seed=4)
    weight = weight * 0.5  # logits within a few nats: importance weights stay tame
    full = full_cross_entropy(hidden @ weight.T + bias, targets).loss.item()
    counts = torch.arange(60)
    kwargs = dict(num_sampled=50_000, sampler=sampler, counts=counts, replacement=True,
                  generator=torch.Generator().manual_seed(0))
    negatives_only = sampled_softmax_loss(hidden, weight, bias, targets, logq_on_true=False, **kwargs)
    assert abs(negatives_only.loss.item() - full) < 0.05  # Monte Carlo error of 50k draws: about 0.01
    tf = sampled_softmax_loss(hidden, weight, bias, targets, logq_on_true=True, **kwargs)
    assert tf.loss.item() - full > 1.0, (tf.loss.item(), full)


def test_logq_on_negatives_without_replacement_unbiased():
    """Without replacement (uniform: inclusion probability K / V exactly) the estimate of Z is unbiased too."""
    hidden, weight, bias, targets = _rows(M=4, V=60, H=6, seed=4)
    weight = weight * 0.5  # tame importance weights: 200 draws give a standard error of about 0.01
    logits = hidden @ weight.T + bias
    g = torch.Generator().manual_seed(0)
    estimates = []
    for _ in range(200):
        out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=50, replacement=False,
                                   logq_on_true=False, generator=g)
        estimates.append(torch.exp(out.per_token + logits.gather(1, targets[:, None]).squeeze(1)))  # Z-hat
    assert torch.allclose(torch.stack(estimates).mean(0).log(), torch.logsumexp(logits, 1), atol=0.04)
    out = sampled_softmax_loss(hidden, weight, bias, targets, num_sampled=60, replacement=False,
                               logq_on_true=False, generator=g)
    assert torch.allclose(out.loss, full_cross_entropy(logits, targets).loss, atol=1e-5)


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
    from mlm_core.losses import weight_curve_rows

    hidden, weight, bias, targets = _rows(M=6, V=300, H=8)
    logits = hidden @ weight.T + bias
    outs = compare_losses(logits, targets, hidden, weight, bias, class_weights=torch.ones(300), num_sampled=16,
                          generator=torch.Generator().manual_seed(0))
    grads = logit_gradients(logits, targets, 0, class_weights=torch.ones(300), sampled=outs["sampled"])
    sweep = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(8, 64), repeats=1,
                                  generator=torch.Generator().manual_seed(0))
    figures = [
        loss_bars({k: float(v.loss) for k, v in outs.items()}),
        per_token_figure(per_token_rows(outs, ["<b>x</b>"] * 6)),
        gradient_figure(gradient_rows(grads, targets[0]), title="a <script>"),
        weights_figure(weight_curve_rows(torch.arange(300) % 7), batch_counts=[1.0, 3.0]),
        k_sweep_figure(sweep),
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
