"""P4: sampled softmax against full cross-entropy over the same masked rows: speed and fidelity.

The rows are the M masked positions of a (B, T) = (32, 128) batch, 15% masked: ``hidden`` (M, H),
the output projection ``weight`` (V, H) and ``bias`` (V,) from ``models.masked_lm_hidden`` on the
bundled default model (real hidden states), and the same rows projected to a bert-base-sized head
(H = 768, V = 30522, random weights: timing only). For K in {64, 256, 1024, 4096}:

- time ratio: forward + backward (to ``hidden``, ``weight`` and ``bias``) of full CE over the
  time of ``losses.sampled_softmax_loss`` (K negatives drawn once per batch, shared by all rows);
- fidelity (default model): the relative loss error |sampled − full| / full, and the cosine
  between the sampled and full gradients with respect to ``hidden`` and to ``weight``, averaged
  over ``draws`` independent draws of the negatives.

Target: ≥ 5× faster than full CE at K = 1024, with the fidelity reported.

Run: ``python -m benchmarks.p4_sampled_softmax`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import time

from benchmarks._common import Result, Target, cli, compare, device, masked_batch, median, paired_ratio

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TARGET_K, TARGET = 1024, 5.0
KS = (64, 256, 1024, 4096)


def _grads(loss_fn, hidden, weight, bias):
    """(loss, d/d hidden, d/d weight) for one call."""
    h = hidden.detach().requires_grad_(True)
    w = weight.detach().requires_grad_(True)
    b = bias.detach().requires_grad_(True)
    loss = loss_fn(h, w, b)
    gh, gw, _ = torch.autograd.grad(loss, [h, w, b], allow_unused=True)
    gw = torch.zeros_like(w) if gw is None else gw
    return float(loss.detach()), gh.flatten(), gw.flatten()


def _functions(hidden, weight, bias, targets, sampler, seed):
    from mlm_core.losses import full_cross_entropy, sampled_softmax_loss

    def full(h, w, b):
        return full_cross_entropy(h @ w.T + b, targets).loss  # (M, V) logits

    generator = torch.Generator().manual_seed(seed)

    def sampled(k):
        def fn(h, w, b):
            return sampled_softmax_loss(h, w, b, targets, num_sampled=k, sampler=sampler, generator=generator).loss
        return fn

    return full, sampled


def run(quick: bool = False, repeats: int = 3, batch_size: int = 32, seq_len: int = 128, draws: int = 5,
        sampler: str = "log_uniform") -> Result:
    from mlm_core.models import load_masked_lm, masked_lm_hidden

    ks = KS
    if quick:
        batch_size, seq_len, repeats, draws, ks = 4, 64, 2, 2, (64, 1024)
    start = time.perf_counter()
    dev = device()
    model, tokenizer = load_masked_lm(None, device=dev)
    ids, att, labels, _ = masked_batch(tokenizer, batch_size, seq_len, seed=0)
    with torch.no_grad():
        hidden, weight, bias, targets = masked_lm_hidden(model, ids, att, labels)  # (M, H), (V, H), (V,), (M,)
    hidden, weight, bias = hidden.float().detach(), weight.float().detach(), bias.float().detach()
    M, H = hidden.shape
    gen = torch.Generator().manual_seed(1)
    big_hidden = torch.randn(M, 768, generator=gen).to(dev)
    big_weight = (torch.randn(weight.shape[0], 768, generator=gen) * 0.02).to(dev)
    big_bias = torch.zeros(weight.shape[0], device=dev)

    rows = []
    for head, (h, w, b) in (("default (H=384)", (hidden, weight, bias)), ("bert-base (H=768)", (big_hidden, big_weight, big_bias))):
        full, sampled = _functions(h, w, b, targets, sampler, seed=0)
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
                    errs.append(abs(loss_s - loss_full) / loss_full)
                    cos_h.append(float(F.cosine_similarity(gh, gh_full, dim=0)))
                    cos_w.append(float(F.cosine_similarity(gw, gw_full, dim=0)))
                fidelity[k] = (sum(errs) / draws, sum(cos_h) / draws, sum(cos_w) / draws)
        for k in ks:
            row = {"head": head, "K": k, "full_ms": median(times["full"]) * 1e3,
                   "sampled_ms": median(times[f"K={k}"]) * 1e3,
                   "speedup_x": paired_ratio(times["full"], times[f"K={k}"])}
            if k in fidelity:
                row["rel_loss_err"], row["cos_grad_hidden"], row["cos_grad_weight"] = fidelity[k]
            rows.append(row)

    targets_ = [Target(f"P4 speed-up at K={TARGET_K}, {r['head']} head", r["speedup_x"], ">=", TARGET,
                       note=(f"rel. loss error {r['rel_loss_err']:.3f}, grad cosine hidden {r['cos_grad_hidden']:.3f}, "
                             f"weight {r['cos_grad_weight']:.3f}") if "rel_loss_err" in r else "timing only")
                for r in rows if r["K"] == TARGET_K]
    return Result(
        name="p4_sampled_softmax",
        title="P4 — sampled softmax vs full cross-entropy on the same masked rows",
        config={"B": batch_size, "T": seq_len, "M": M, "V": weight.shape[0], "sampler": sampler,
                "logq_correction": True, "draws": draws, "repeats": repeats, "device": str(dev), "quick": quick},
        rows=rows,
        columns=["head", "K", "full_ms", "sampled_ms", "speedup_x", "rel_loss_err", "cos_grad_hidden",
                 "cos_grad_weight"],
        targets=targets_,
        notes=["forward + backward to hidden, weight and bias; speedup_x = median over rounds of full/sampled",
               "fidelity on the default model's real hidden states, mean over draws of fresh negatives; "
               "the bert-base-sized head has random weights, so only its timing means anything"],
        seconds=time.perf_counter() - start,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
