"""MFU: how close a training step comes to this CPU's matmul speed, per dtype (fp32 and bf16 autocast).

A CPU "MFU" (model FLOPs utilisation): the step's matrix-multiply FLOPs per second over the speed at
which this machine runs *the same matrix multiplies alone*, measured in the same run
(``costs.step_gemms``: every product of the step with its own shapes and layout, timed one after
another in the step's dtype; ``measure.gemm_timer``). So MFU = matmul-alone time / step time: the
share of the step that is matmul work at full speed; the rest is softmax, dropout, layer norms,
the embedding gradient, AdamW, casts and Python.

The step is ``training.TrainStep``, the training loop's own step, on the bundled model at B = 16,
T = 64 (the size the default model was built with), four ways: fp32 and bf16 autocast, each with the
word embeddings trained and frozen (``TrainConfig.freeze_word_embeddings``). Every step starts from
the same weights; set-ups and their matmul-only timings run round-robin, and a ratio is the median of
the per-round ratios (``lessons.efficiency.amp_and_checkpointing``). With one torch thread the same figures
are also computed from the process's CPU time, which a busy machine disturbs far less. A profile of one fp32 and one bf16 step
says where the rest of the time goes (``lessons.efficiency.step_time_breakdown``).

This is not PaLM's MFU (Chowdhery et al. 2022, Appendix B), whose denominator is the chip's peak
FLOP/s: 100% here means "the step is all matmul at the speed its own small matmuls reach", not "the
core is saturated". For the PaLM-style figure the benchmark also divides the step's FLOP/s by the
best speed of one BERT-sized matmul measured in the same run (``precision.matmul_rates``, the
precision micro-benchmark): ``MFU_vs_peak``.

Targets (issue "Faster steps"): MFU ≥ 0.60 in fp32; where this CPU has fast bf16 matmuls
(``precision.auto_amp``), the bf16 step ≥ 1.5× as fast as the fp32 step.

Run: ``python -m benchmarks.mfu`` (``--quick`` for a smoke run, ``--threads 2`` for both cores).
"""

from __future__ import annotations

import time

from benchmarks._common import Result, Target, cli, device

import torch  # noqa: E402

from mlm_core.lessons.efficiency import amp_and_checkpointing, step_time_breakdown  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.precision import auto_amp, matmul_rates  # noqa: E402

MFU_TARGET, BF16_TARGET = 0.60, 1.5
SETTINGS = (("off", False, False), ("bf16", False, False), ("off", False, True), ("bf16", False, True))


def run(quick: bool = False, repeats: int = 5, batch_size: int = 16, seq_len: int = 64) -> Result:
    if quick:
        batch_size, seq_len, repeats = 4, 32, 2
    start = time.perf_counter()
    dev = device()
    model, tokenizer = load_masked_lm(None, device=dev)
    choice = auto_amp(dev)
    rows = amp_and_checkpointing(model, tokenizer, batch_size=batch_size, seq_len=seq_len, repeats=repeats,
                                 settings=SETTINGS)
    peak = matmul_rates(rounds=15)  # one BERT-sized matmul per dtype: the PaLM-style denominator
    peak_gflops = {"off": peak["fp32_gflops"], "bf16": peak["bf16_gflops"]}
    by = {(r["amp"], r["frozen"]): r for r in rows}
    fp32, bf16 = by[("off", False)], by[("bf16", False)]
    table = []
    for r in rows:
        table.append({
            "step": r["label"].replace(", checkpointing off", ""), "step_ms": r["time_ms"],
            "matmul_alone_ms": r["gemm_ms"], "GFLOP": r["flops"] / 1e9,
            "achieved_GFLOP/s": r["achieved_gflops"], "matmul_GFLOP/s": r["matmul_gflops"], "MFU": r["mfu"],
            # CPU time on both sides: matmul_rates times its matmul in CPU time too
            "MFU_vs_peak": r["flops"] / (r["cpu_time_ms"] / 1e3) / 1e9 / peak_gflops[r["amp"]],
            "speed_vs_fp32": 1.0 / r["time_x"], "cpu_step_ms": r["cpu_time_ms"], "MFU_cpu": r["cpu_mfu"],
            "speed_vs_fp32_cpu": 1.0 / r["cpu_time_x"], "loss": r["loss"],
        })
    breakdown = {amp: step_time_breakdown(model, tokenizer, amp=amp, batch_size=batch_size, seq_len=seq_len)
                 for amp in ("off", "bf16")}
    for category in [r["category"] for r in breakdown["off"]]:
        row = {"step": f"profile: {category}"}
        for amp, name in (("off", "fp32"), ("bf16", "bf16")):
            hit = next(r for r in breakdown[amp] if r["category"] == category)
            row[f"{name}_ms"], row[f"{name}_share"] = hit["ms"], hit["share"]
        table.append(row)

    bf16_speedup = 1.0 / bf16["time_x"]
    one_thread = torch.get_num_threads() == 1
    cpu_targets = [
        Target("MFU, fp32 step, from CPU time (reported)", fp32["cpu_mfu"], ">=", MFU_TARGET, unit=""),
        Target("bf16 step speed-up over fp32, from CPU time (reported)", 1.0 / bf16["cpu_time_x"], ">=", BF16_TARGET),
    ] if one_thread else []
    targets = [
        Target("MFU, fp32 step", fp32["mfu"], ">=", MFU_TARGET, unit="",
               note=f"{fp32['achieved_gflops']:.0f} of {fp32['matmul_gflops']:.0f} GFLOP/s"),
        Target("MFU, bf16 step (reported)", bf16["mfu"], ">=", MFU_TARGET, unit="",
               note=f"{bf16['achieved_gflops']:.0f} of {bf16['matmul_gflops']:.0f} GFLOP/s"),
    ]
    if choice.amp == "bf16" or choice.speedup is None:
        targets.append(Target("bf16 step speed-up over fp32", bf16_speedup, ">=", BF16_TARGET,
                              note=f"micro-benchmark: bf16 matmul {choice.speedup or float('nan'):.2f}× fp32"))
    else:
        targets.append(Target("bf16 step speed-up over fp32 (reported: this CPU has no fast bf16)", bf16_speedup,
                              ">=", BF16_TARGET, note=choice.reason))
    targets.append(Target("frozen word embeddings, fp32 step speed-up (reported)", 1.0 / by[("off", True)]["time_x"],
                          ">=", 1.0))
    targets += cpu_targets
    return Result(
        name="mfu",
        title="MFU — a training step's share of this CPU's matmul speed, fp32 and bf16",
        config={"model": "bundled default", "B": batch_size, "T": seq_len, "M": fp32["masked"], "repeats": repeats,
                "device": str(dev), "quick": quick, "threads": torch.get_num_threads(),
                "auto precision": f"{choice.amp} ({choice.reason})"},
        rows=table,
        columns=["step", "step_ms", "matmul_alone_ms", "GFLOP", "achieved_GFLOP/s", "matmul_GFLOP/s", "MFU",
                 "MFU_vs_peak",
                 "speed_vs_fp32", "MFU_cpu", "speed_vs_fp32_cpu", "fp32_ms", "fp32_share", "bf16_ms", "bf16_share"],
        targets=targets,
        notes=["MFU = step FLOPs / step time ÷ (same FLOPs / time of the step's matmuls alone, same dtype, same run) "
               "= matmul-alone time / step time; medians over round-robin rounds",
               f"MFU_vs_peak: the step's FLOPs per CPU second over one BERT-sized (256×384)@(384×1536) "
               f"matmul's, same run ({peak['fp32_gflops']:.0f} GFLOP/s fp32, {peak['bf16_gflops']:.0f} bf16): the PaLM-style figure "
               "(Appendix B divides by the chip's peak); the MFU column divides by the step's own matmuls timed alone",
               "profile rows: one step under torch.profiler (which slows small operators): each operator's own "
               "time by category; 'Python and framework overhead' is the time no operator accounts for",
               "every set-up steps from the same weights on the same batch: the losses differ only by precision",
               "MFU_cpu, speed_vs_fp32_cpu: the same from the process's CPU time (one torch thread only), which other "
               "work on a busy machine disturbs far less than wall time; the headline figures are wall-clock"],
        seconds=time.perf_counter() - start,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
