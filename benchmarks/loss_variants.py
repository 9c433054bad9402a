"""Loss variants on one batch of the default model: the numbers behind the Loss page's lessons.

Prints, for one masked batch of workshop-corpus sentences through the bundled default model:
the full, weighted and sampled losses; the sampled-softmax bias (mean over 20 seeds of
sampled − full, and of |sampled − full|) at K = 64, 256, 1024, 4096 and V for each sampler, each
correction, with and without replacement; the gradient cosines; and time ratios (forward +
backward to hidden, weight and bias, median of repeats) against full CE.

Run: ``python -m benchmarks.loss_variants [--sentences 32] [--seeds 20] [--repeats 7] [--threads 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from mlm_core.bundled import workshop_sentences
from mlm_core.lessons.loss_lab import loss_batch, pick_sentences
from mlm_core.losses import (
    full_cross_entropy,
    loop_cross_entropy,
    token_counts,
    token_frequency_weights,
    weighted_cross_entropy,
)
from mlm_core.masking import MaskingConfig
from mlm_core.models import load_masked_lm
from mlm_core.sampled_softmax import (
    CORRECTIONS,
    SampledSoftmaxConfig,
    sampled_softmax_loss,
    sampled_softmax_sweep,
)

KS = (64, 256, 1024, 4096)


def timed(fn, hidden, weight, bias, repeats):
    """Median seconds of forward + backward (to hidden, weight and bias)."""
    times = []
    for _ in range(repeats):
        h = hidden.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        b = bias.detach().requires_grad_(True)
        start = time.perf_counter()
        loss = fn(h, w, b)
        torch.autograd.grad(loss, [h, w, b], allow_unused=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1 by default: on a shared 2-core machine 2 threads spin and time noise)")
    parser.add_argument("--json", default=None, help="also write the numbers here")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    model, tokenizer = load_masked_lm(None, device="cpu")
    info = getattr(model, "mlmlab_info", {})
    texts = pick_sentences(workshop_sentences(), args.sentences, args.seed)
    batch = loss_batch(model, tokenizer, texts, MaskingConfig(), seed=args.seed)
    hidden, weight, bias, targets = batch.hidden, batch.weight, batch.bias, batch.targets
    counts = token_counts(tokenizer, workshop_sentences(), weight.shape[0])
    weights = token_frequency_weights(counts, scheme="inverse")
    M, V, H = hidden.shape[0], weight.shape[0], weight.shape[1]
    out = {"model": info.get("label"), "trained": info.get("trained"), "B": len(texts), "M": M, "V": V, "H": H,
           "threads": torch.get_num_threads(), "loadavg": os.getloadavg()}

    full = full_cross_entropy(batch.logits, targets).loss.item()
    out["full"] = full
    out["loop"] = loop_cross_entropy(batch.logits, targets).loss.item()
    out["weighted_inverse"] = weighted_cross_entropy(batch.logits, targets, weights).loss.item()
    out["weighted_inverse_sqrt"] = weighted_cross_entropy(
        batch.logits, targets, token_frequency_weights(counts, scheme="inverse_sqrt")).loss.item()
    for sampler in ("uniform", "unigram", "log_uniform"):
        out[f"sampled_K64_{sampler}"] = sampled_softmax_loss(
            hidden, weight, bias, targets, counts=counts, generator=torch.Generator().manual_seed(args.seed),
            **SampledSoftmaxConfig(num_sampled=64, sampler=sampler).loss_kwargs()).loss.item()

    bias_rows = []
    for sampler in ("uniform", "unigram", "log_uniform"):
        for replacement in (False, True):
            for correction in CORRECTIONS:
                for k in (*KS, V):
                    kwargs = SampledSoftmaxConfig(num_sampled=k, sampler=sampler, replacement=replacement,
                                                  correction=correction).loss_kwargs()
                    values = [sampled_softmax_loss(hidden, weight, bias, targets, counts=counts,
                                                   generator=torch.Generator().manual_seed(s), **kwargs).loss.item()
                              for s in range(args.seeds)]
                    bias_rows.append({"sampler": sampler, "replacement": replacement, "correction": correction,
                                      "K": k, "bias": statistics.mean(values) - full,
                                      "abs_bias": statistics.mean(abs(v - full) for v in values)})
    out["bias"] = bias_rows
    sweep = {}
    for sampler in ("uniform", "unigram"):
        rows = sampled_softmax_sweep(hidden, weight, bias, targets, ks=(*KS, V), counts=counts, repeats=5,
                                     config=SampledSoftmaxConfig(sampler=sampler),
                                     generator=torch.Generator().manual_seed(args.seed))
        sweep[sampler] = [{k: r[k] for k in ("K", "correction", "grad_cosine")} for r in rows]
    out["grad_cosine"] = sweep

    g = torch.Generator().manual_seed(args.seed)
    t_full = timed(lambda h, w, b: full_cross_entropy(h @ w.T + b, targets).loss, hidden, weight, bias, args.repeats)
    t_weighted = timed(lambda h, w, b: weighted_cross_entropy(h @ w.T + b, targets, weights).loss,
                       hidden, weight, bias, args.repeats)
    t_loop = timed(lambda h, w, b: loop_cross_entropy(h @ w.T + b, targets).loss, hidden, weight, bias, args.repeats)
    timing = {"full_ms": t_full * 1e3, "weighted_over_full": t_weighted / t_full, "loop_over_full": t_loop / t_full}
    for k in KS:
        t = timed(lambda h, w, b, k=k: sampled_softmax_loss(h, w, b, targets, num_sampled=k, counts=counts,
                                                            generator=g).loss,
                  hidden, weight, bias, args.repeats)
        timing[f"full_over_sampled_K{k}"] = t_full / t
    t = timed(lambda h, w, b: sampled_softmax_loss(h, w, b, targets, num_sampled=1024, sampler="softmax",
                                                   generator=g).loss, hidden, weight, bias, args.repeats)
    timing["full_over_sampled_K1024_softmax_sampler"] = t_full / t
    out["timing"] = timing

    print(f"model: {out['model']} (trained={out['trained']}), B={out['B']} sentences, M={M}, V={V}, H={H}, "
          f"threads={out['threads']}, load average {out['loadavg'][0]:.1f}")
    print(f"full CE {full:.4f} | loop {out['loop']:.4f} | weighted (inverse) {out['weighted_inverse']:.4f} | "
          f"weighted (inverse_sqrt) {out['weighted_inverse_sqrt']:.4f}")
    print("sampled, K=64: " + " | ".join(f"{s} {out[f'sampled_K64_{s}']:.4f}" for s in ("uniform", "unigram", "log_uniform")))
    print(f"\nbias over {args.seeds} seeds (mean sampled − full; mean |sampled − full|):")
    for sampler in ("uniform", "unigram", "log_uniform"):
        for replacement in (False, True):
            for correction in CORRECTIONS:
                rows = [r for r in bias_rows if r["sampler"] == sampler and r["correction"] == correction
                        and r["replacement"] == replacement]
                print(f"  {sampler:11s} {'with' if replacement else 'without':7s} {correction:10s} " + "  ".join(
                    f"K={r['K']}: {r['bias']:+.3f} ({r['abs_bias']:.3f})" for r in rows))
    print("\ngradient cosine with full CE (d loss / d hidden), mean of 5 draws:")
    for sampler, rows in sweep.items():
        for correction in CORRECTIONS:
            print(f"  {sampler:11s} {correction:10s} " + "  ".join(
                f"K={r['K']}: {r['grad_cosine']:.3f}" for r in rows if r["correction"] == correction))
    print("\ntiming, forward + backward, median of", args.repeats)
    for name, value in timing.items():
        print(f"  {name}: {value:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
