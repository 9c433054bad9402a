"""P2: a whole training step, tokens/s: MLM Lab's step against a plain ``BertForMaskedLM(labels=)`` loop.

Same model (two copies of the same weights), same batches, same masks, same optimizer (AdamW with
BERT's decay groups, fused where available) and gradient clipping at 1.0:

- ours: ``training.TrainStep``, the step ``training.train`` takes: ``head.masked_lm_logits``
  (encoder once, head on the M masked rows) → ``losses.full_cross_entropy`` → backward → clip →
  AdamW, in fp32 (``amp="off"``: both sides in the same precision; bf16 is the MFU benchmark's);
- Hugging Face: ``model(input_ids, attention_mask, labels=labels).loss`` (head at every position)
  → backward → clip → AdamW.

The ideal ratio comes from the model's matrix-multiply FLOPs (``costs.ideal_step_speedup``):
encoder + head at every position against encoder + head at the M masked positions. Target: the
measured ratio is at least 0.85 of the ideal. As a cross-check, ``training.train`` itself runs a
few steps at the same B and T and its median time per step is reported against the baseline
(measured after the interleaved rounds, so it is only a cross-check of the replica above).

Run: ``python -m benchmarks.p2_train_step`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import copy
import time

from benchmarks._common import Result, Target, cli, compare, device, masked_batch, median, paired_ratio

import torch  # noqa: E402

from mlm_core.bundled import workshop_sentences  # noqa: E402
from mlm_core.costs import ideal_step_speedup  # noqa: E402
from mlm_core.masking import IGNORE_INDEX  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.training import TrainConfig, TrainStep, adamw, param_groups, train  # noqa: E402

TARGET = 0.85  # of the FLOPs-ideal ratio


def _optimizer(model):
    return adamw(param_groups(model, 0.01), 5e-5)  # exactly what train() uses


def run(quick: bool = False, repeats: int = 3, batch_size: int = 8, seq_len: int = 128,
        train_steps: int = 4) -> Result:
    if quick:
        batch_size, seq_len, repeats, train_steps = 2, 32, 2, 2
    start = time.perf_counter()
    dev = device()
    base, tokenizer = load_masked_lm(None, device=dev)
    batches = []
    for seed in range(2):
        ids, att, labels, _ = masked_batch(tokenizer, batch_size, seq_len, seed=seed)
        batches.append((ids.to(dev), att.to(dev), labels.to(dev)))
    masked = median([float((b[2] != IGNORE_INDEX).sum()) for b in batches])
    tokens = median([float(b[1].sum()) for b in batches])

    ours_step = TrainStep(copy.deepcopy(base), TrainConfig(amp="off", learning_rate=5e-5, weight_decay=0.01,
                                                           max_grad_norm=1.0), dev)
    hf_model = copy.deepcopy(base).train()
    hf_opt = _optimizer(hf_model)
    hf_params = [p for p in hf_model.parameters() if p.requires_grad]
    state = {"ours": 0, "hf": 0}
    losses = {"ours": [], "hf": []}

    def ours():
        ids, att, labels = batches[state["ours"] % len(batches)]
        state["ours"] += 1
        losses["ours"].append(ours_step(ids, att, labels, seed=state["ours"]))

    def hf():
        ids, att, labels = batches[state["hf"] % len(batches)]
        state["hf"] += 1
        hf_opt.zero_grad(set_to_none=True)
        loss = hf_model(input_ids=ids, attention_mask=att, labels=labels).loss  # (B, T, V) logits inside
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf_params, 1.0)
        hf_opt.step()
        losses["hf"].append(float(loss.detach()))

    times = compare({"ours": ours, "hf": hf}, warmup=1, repeats=repeats)
    del ours_step, hf_model, hf_opt
    ideal = ideal_step_speedup(base.config, seq_len=seq_len, batch_size=batch_size, masked=int(round(masked)))
    measured = paired_ratio(times["hf"], times["ours"])
    rows = [
        {"step": "ours (training.TrainStep, fp32)", "ms": median(times["ours"]) * 1e3,
         "tokens_per_s": tokens / median(times["ours"]), "vs_hf_x": measured},
        {"step": "HF BertForMaskedLM(labels=)", "ms": median(times["hf"]) * 1e3,
         "tokens_per_s": tokens / median(times["hf"]), "vs_hf_x": 1.0},
    ]

    # Cross-check: training.train itself, same B and T, its own batches (per-step time excludes masking and evaluation).
    train_note = ""
    try:
        cfg = TrainConfig(steps=train_steps + 1, batch_size=batch_size, seq_len=seq_len, warmup_steps=0, amp="off",
                          eval_every=10**6, eval_max_chunks=1, eval_fraction=0.0, probe_sentences=("a [MASK] b.",))
        result = train(base, tokenizer, workshop_sentences(), cfg)
        # Step time from each record (tokens / tokens_per_s); the first step is the warm-up. Its rows
        # are packed sentences with some padding, so compare the time per (B, T) step, not tokens/s.
        step_s = median([r["tokens"] / r["tokens_per_s"] for r in result.steps[1:] if r.get("tokens_per_s")])
        rows.append({"step": "training.train (own batches, same B×T)", "ms": step_s * 1e3,
                     "tokens_per_s": tokens / step_s, "vs_hf_x": median(times["hf"]) / step_s})
    except Exception as exc:  # report, never hide
        train_note = f"training.train cross-check failed: {type(exc).__name__}: {exc}"

    result = Result(
        name="p2_train_step",
        title="P2 — whole training step, tokens/s: ours vs plain BertForMaskedLM(labels=) loop",
        config={"model": "bundled default", "B": batch_size, "T": seq_len, "M (median)": masked,
                "repeats": repeats, "device": str(dev), "quick": quick,
                "optimizer": "AdamW (training.adamw: fused where available), clip 1.0", "precision": "fp32 both"},
        rows=rows,
        columns=["step", "ms", "tokens_per_s", "vs_hf_x"],
        targets=[Target("P2 measured / FLOPs-ideal ratio", measured / ideal, ">=", TARGET,
                        note=f"measured {measured:.2f}×, ideal {ideal:.2f}×")],
        notes=[f"FLOPs-ideal ratio (encoder + head at all B·T positions over encoder + head at M): {ideal:.2f}×",
               f"final losses: ours {losses['ours'][-1]:.4f}, HF {losses['hf'][-1]:.4f} (same batches; dropout on)"]
        + ([train_note] if train_note else []),
        seconds=time.perf_counter() - start,
    )
    result.rows[0]["ideal_x"] = ideal
    return result


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
