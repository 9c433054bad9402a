"""P4: sampled softmax against full cross-entropy over the same masked rows: fidelity and speed.

**Target (the default configuration, ``sampled_softmax.SAMPLED_SOFTMAX``).** On the bundled default
model, a batch of 32 corpus sentences (one per row, ≤ 128 tokens), masked with BERT's rule,
K = 256, counts for the unigram proposal from the corpus being trained on, mean over 5 draws:
the sampled loss within 10% of the full loss and the gradient cosine (with respect to the hidden
states) ≥ 0.9. ``loss_lab.sampled_softmax_check`` measures it, on every bundled training corpus;
the same check with TensorFlow's defaults (log-uniform ids, 256 draws with replacement, log Q on
every logit: the Training page's configuration before) is printed beside it.

**Speed.** The M masked rows of a (B, T) = (32, 128) batch of full-length rows: ``hidden`` (M, H),
``weight`` (V, H) and ``bias`` (V,) from the default model, and the same rows projected to a
bert-base-sized head (H = 768, V = 30522, random weights: timing only). For K in {64, 256, 1024,
4096}: forward + backward (to ``hidden``, ``weight`` and ``bias``) of full CE over the time of
``sampled_softmax.sampled_softmax_loss`` with the default configuration, and (default model) its loss
error and gradient cosines, mean over ``draws`` draws. Target: ≥ 5× faster than full CE at K = 1024.

Run: ``python -m benchmarks.p4_sampled_softmax`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import dataclasses
import time

from benchmarks._common import Result, Target, cli, compare, device, masked_batch, median, paired_ratio

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mlm_core import bundled  # noqa: E402
from mlm_core.head import masked_lm_hidden  # noqa: E402
from mlm_core.lessons.loss_lab import sampled_softmax_check  # noqa: E402
from mlm_core.losses import full_cross_entropy, token_counts  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.sampled_softmax import SAMPLED_SOFTMAX, SampledSoftmaxConfig, sampled_softmax_loss  # noqa: E402

TARGET_K, TARGET = 1024, 5.0
KS = (64, 256, 1024, 4096)
MAX_REL_ERROR, MIN_COSINE = 0.10, 0.9


def training_corpora() -> dict[str, list[str]]:
    """The bundled corpora a run can train on, by name: sentences each."""
    corpora = {"workshop": bundled.workshop_sentences()}
    gazetteer = getattr(bundled, "gazetteer", None)  # the Training page's corpus (Veldoria), once merged
    if gazetteer is not None:
        corpora["veldoria"] = gazetteer().sentences
    return corpora


def before_config():
    """TensorFlow's sampled_softmax_loss defaults: the Training page's sampled softmax before this change."""
    return SampledSoftmaxConfig(sampler="log_uniform", replacement=True, correction="tensorflow")


def _grads(loss_fn, hidden, weight, bias):
    """(loss, d/d hidden, d/d weight) for one call."""
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)
    b = bias.detach().requires_grad_(True)
    loss = loss_fn(h, w, b)
    gh, gw, _ = torch.autograd.grad(loss, [h, w, b], allow_unused=True)
    gw = torch.zeros_like(w) if gw is None else gw
    return float(loss.detach()), gh.flatten(), gw.flatten()


def run(quick: bool = False, repeats: int = 3, batch_size: int = 32, seq_len: int = 128, draws: int = 5) -> Result:
    ks = KS
    if quick:
        batch_size, seq_len, repeats, draws, ks = 4, 64, 2, 2, (64, 1024)
    start = time.perf_counter()
    dev = device()
    model, tokenizer = load_masked_lm(None, device=dev)
    corpora = training_corpora()

    rows, targets_ = [], []
    for name, sentences in corpora.items():
        for label, config in (("default", SAMPLED_SOFTMAX), ("before (TF defaults)", before_config())):
            check = sampled_softmax_check(model, tokenizer, sentences, draws=draws, config=config,
                                          num_sentences=8 if quick else 32)
            rows.append({"part": f"target, {name} corpus", "config": label, "K": check["K"], "M": check["M"],
                         "full_loss": check["full_loss"], "sampled_loss": check["loss"],
                         "rel_loss_err": check["rel_error"], "cos_grad_hidden": check["grad_cosine"]})
            if label == "default":
                targets_.append(Target(f"P4 default sampled loss vs full, {name} corpus (|rel. error|)",
                                       abs(check["rel_error"]), "<=", MAX_REL_ERROR, unit="",
                                       note=f"{check['loss']:.3f} vs {check['full_loss']:.3f}, M = {check['M']}"))
                targets_.append(Target(f"P4 default gradient cosine (hidden), {name} corpus", check["grad_cosine"],
                                       ">=", MIN_COSINE, unit=""))

    ids, att, labels, _ = masked_batch(tokenizer, batch_size, seq_len, seed=0)
    with torch.no_grad():
        hidden, weight, bias, targets = masked_lm_hidden(model, ids, att, labels)  # (M, H), (V, H), (V,), (M,)
    hidden, weight, bias = hidden.float().detach(), weight.float().detach(), bias.float().detach()
    M = hidden.shape[0]
    counts = token_counts(tokenizer, corpora["workshop"], weight.shape[0])
    gen = torch.Generator().manual_seed(1)
    big_hidden = torch.randn(M, 768, generator=gen).to(dev)
    big_weight = (torch.randn(weight.shape[0], 768, generator=gen) * 0.02).to(dev)
    big_bias = torch.zeros(weight.shape[0], device=dev)

    def full(h, w, b):
        return full_cross_entropy(h @ w.T + b, targets).loss  # (M, V) logits

    generator = torch.Generator().manual_seed(0)

    def sampled(k):
        def fn(h, w, b):
            return sampled_softmax_loss(h, w, b, targets, num_sampled=k, counts=counts, generator=generator).loss
        return fn

    for head, (h, w, b) in (("default (H=384)", (hidden, weight, bias)),
                            ("bert-base (H=768)", (big_hidden, big_weight, big_bias))):
        fns = {"full": lambda: _grads(full, h, w, b)}
        for k in ks:
            fns[f"K={k}"] = (lambda k=k: _grads(sampled(k), h, w, b))
        times = compare(fns, warmup=1, repeats=repeats)
        fidelity = {}
        if head.startswith("default"):
            loss_full, gh_full, gw_full = _grads(full, h, w, b)
            for k in ks:
                errs, cos_h, cos_w = [], [], []
                for _ in range(draws):
                    loss_s, gh, gw = _grads(sampled(k), h, w, b)
                    errs.append((loss_s - loss_full) / loss_full)
                    cos_h.append(float(F.cosine_similarity(gh, gh_full, dim=0)))
                    cos_w.append(float(F.cosine_similarity(gw, gw_full, dim=0)))
                fidelity[k] = (sum(errs) / draws, sum(cos_h) / draws, sum(cos_w) / draws)
        for k in ks:
            row = {"part": f"speed, {head}", "config": "default", "K": k, "M": M,
                   "full_ms": median(times["full"]) * 1e3, "sampled_ms": median(times[f"K={k}"]) * 1e3,
                   "speedup_x": paired_ratio(times["full"], times[f"K={k}"])}
            if k in fidelity:
                row["rel_loss_err"], row["cos_grad_hidden"], row["cos_grad_weight"] = fidelity[k]
            rows.append(row)
            if k == TARGET_K:
                targets_.append(Target(
                    f"P4 speed-up at K={TARGET_K}, {head} head", row["speedup_x"], ">=", TARGET,
                    note=(f"rel. loss error {row['rel_loss_err']:+.3f}, grad cosine hidden {row['cos_grad_hidden']:.3f}, "
                          f"weight {row['cos_grad_weight']:.3f}") if "rel_loss_err" in row else "timing only"))
    return Result(
        name="p4_sampled_softmax",
        title="P4 — sampled softmax vs full cross-entropy on the same masked rows",
        config={"target batch": "32 sentences of the corpus, one per row, ≤ 128 tokens, seed 0",
                "speed batch": f"B={batch_size}, T={seq_len} full-length rows, M={M}", "V": weight.shape[0],
                "sampled softmax": dataclasses.asdict(SAMPLED_SOFTMAX),
                "draws": draws, "repeats": repeats, "device": str(dev), "quick": quick},
        rows=rows,
        columns=["part", "config", "K", "M", "full_loss", "sampled_loss", "full_ms", "sampled_ms", "speedup_x",
                 "rel_loss_err", "cos_grad_hidden", "cos_grad_weight"],
        targets=targets_,
        notes=["target rows: loss_lab.sampled_softmax_check (counts from the whole corpus, mean over draws); "
               "'before' is TensorFlow's defaults (log-uniform ids, with replacement, log Q on every logit)",
               "speed rows: forward + backward to hidden, weight and bias; speedup_x = median over rounds of "
               "full/sampled; the bert-base-sized head has random weights, so only its timing means anything"],
        seconds=time.perf_counter() - start,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
