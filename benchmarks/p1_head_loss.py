"""P1: the MLM head and its cross-entropy, forward and backward: gathered rows against every position.

Both sides start from the same encoder output (B, T, H), computed once outside the timing:

- ours: gather the M selected rows, run the head on (M, H), mean CE (``head.masked_lm_logits``'s
  path, then ``losses.full_cross_entropy``);
- Hugging Face: the head at every position (B, T, V), then ``CrossEntropyLoss`` with
  ``ignore_index=-100``, as ``BertForMaskedLM(..., labels=...)`` does.

The backward pass goes to the hidden states and to every head weight. Ideal time ratio:
(B·T)/M ≈ 1/0.15 ≈ 6.7×. Targets: ≥ 5.3× time, ≤ 0.25× peak memory, |Δloss| ≤ 1e-5.

Run: ``python -m benchmarks.p1_head_loss`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import time

from benchmarks._common import (Result, Target, cli, compare, device, human_bytes, masked_batch, median,
                                paired_ratio, peak_memory_bytes)

import torch  # noqa: E402
from transformers import BertConfig  # noqa: E402
from transformers.models.bert.modeling_bert import BertLMPredictionHead  # noqa: E402

from mlm_core.head import encoder_states, head_parts  # noqa: E402
from mlm_core.lessons.efficiency import loss_path_functions  # noqa: E402
from mlm_core.masking import IGNORE_INDEX  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402

TIME_TARGET, MEMORY_TARGET, LOSS_TARGET = 5.3, 0.25, 1e-5


def _case(name: str, transform, decoder, params, states, labels, repeats: int) -> dict:
    fns = loss_path_functions(transform, decoder, states, labels, params)
    ours, hf = fns["gathered"], fns["vectorised"]
    loss_ours, loss_hf = ours()[0], hf()[0]  # also the warm-up
    times = compare({"ours": ours, "hf": hf}, warmup=0, repeats=repeats)
    dev = device()
    mem_ours, mem_hf = peak_memory_bytes(ours, dev), peak_memory_bytes(hf, dev)
    B, T, H = states.shape
    M = int((labels != IGNORE_INDEX).sum())
    return {
        "head": name, "B": B, "T": T, "H": H, "V": decoder.weight.shape[0], "M": M,
        "ideal_x": B * T / M,
        "ours_ms": median(times["ours"]) * 1e3, "hf_ms": median(times["hf"]) * 1e3,
        "time_x": paired_ratio(times["hf"], times["ours"]),
        "ours_peak": human_bytes(mem_ours), "hf_peak": human_bytes(mem_hf),
        "mem_ratio": mem_ours / mem_hf if mem_hf else float("nan"),
        "loss_ours": loss_ours, "loss_hf": loss_hf, "loss_diff": abs(loss_ours - loss_hf),
        "ours_peak_bytes": mem_ours, "hf_peak_bytes": mem_hf,
        "ours_times_ms": [t * 1e3 for t in times["ours"]], "hf_times_ms": [t * 1e3 for t in times["hf"]],
    }


def run(quick: bool = False, repeats: int = 3, batch_size: int = 32, seq_len: int = 128) -> Result:
    if quick:
        batch_size, seq_len, repeats = 4, 64, 2
    start = time.perf_counter()
    dev = device()
    model, tokenizer = load_masked_lm(None, device=dev)
    input_ids, attention_mask, labels, _ = masked_batch(tokenizer, batch_size, seq_len, seed=0)
    labels = labels.to(dev)
    with torch.no_grad():
        states = encoder_states(model, input_ids, attention_mask).float()  # (B, T, 384): once, outside the timing
    head = head_parts(model)
    params = list(dict.fromkeys([*head.transform.parameters(), *head.decoder.parameters()]))
    rows = [_case("default (H=384)", head.transform, head.decoder, params, states, labels, repeats)]
    del states

    # A bert-base-sized head (H=768, V=30522) with BERT's initialisation; random hidden states.
    config = BertConfig(hidden_size=768, vocab_size=30522, intermediate_size=3072)
    gen = torch.Generator().manual_seed(0)
    base = BertLMPredictionHead(config).to(dev)
    with torch.no_grad():
        for p in base.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    big_states = torch.randn(batch_size, seq_len, 768, generator=gen).to(dev)
    params = list(base.parameters())
    rows.append(_case("bert-base (H=768)", base.transform, base.decoder, params, big_states, labels, repeats))

    targets = []
    for r in rows:
        targets += [
            Target(f"P1 time ratio, {r['head']} head", r["time_x"], ">=", TIME_TARGET,
                   note=f"ideal {r['ideal_x']:.2f}×, {r['time_x'] / r['ideal_x']:.0%} of it"),
            Target(f"P1 peak-memory ratio, {r['head']} head", r["mem_ratio"], "<=", MEMORY_TARGET,
                   note=f"{r['ours_peak']} vs {r['hf_peak']}"),
            Target(f"P1 loss difference (absolute), {r['head']} head", r["loss_diff"], "<=", LOSS_TARGET, unit=""),
        ]
    return Result(
        name="p1_head_loss",
        title="P1 — head + cross-entropy, forward and backward: gathered (ours) vs every position (HF)",
        config={"B": batch_size, "T": seq_len, "mlm_probability": 0.15, "repeats": repeats, "device": str(dev),
                "quick": quick},
        rows=rows,
        columns=["head", "M", "ideal_x", "ours_ms", "hf_ms", "time_x", "ours_peak", "hf_peak", "mem_ratio",
                 "loss_diff"],
        targets=targets,
        notes=["time_x = median over rounds of hf/ours; mem_ratio = ours/hf peak memory beyond the weights",
               "ideal_x = B·T/M: the head's work scales with the rows it is applied to"],
        seconds=time.perf_counter() - start,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
