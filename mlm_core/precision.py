"""Which precision a training step runs in, and why: bf16 autocast where bf16 matmuls are clearly faster.

A training step of a small BERT spends most of its time in matrix multiplies. bf16 halves the
bytes of every operand, and chips with bf16 units (GPUs since Ampere; CPUs with AVX-512 BF16 or
AMX, such as AMD Zen 4 and Intel Sapphire Rapids) multiply bf16 about twice as fast as fp32 (this
project's 2-core AMD EPYC with AVX-512 BF16: 2.1×). On a CPU without them there is no fast bf16
kernel to call, a bf16 matmul can be slower than fp32, and autocast's casts come on top. So on a
CPU the choice is measured, not guessed: ``auto_amp`` times one
BERT-sized matmul in both dtypes (round-robin, median of several rounds, in CPU time, about 0.05 s),
once per process and thread count, and picks bf16 when it is at least ``BF16_MIN_SPEEDUP`` times faster.

``MLMLAB_AMP=off`` (or ``bf16``) in the environment overrides the choice: the test suite pins fp32
that way, so tests that compare exact numbers never depend on the machine they run on.

The weights stay fp32 either way (autocast runs the matmuls in bf16 and keeps fp32 master
weights, AdamW state and the loss), so a bf16 run's losses follow the fp32 run's closely:
``tests/test_precision.py`` checks how closely.

>>> choose = auto_amp("cpu")
>>> choose.amp in ("bf16", "off") and bool(choose.reason)
True
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import torch

from mlm_core import seeds

AMP_ENV = "MLMLAB_AMP"  # "off" or "bf16": overrides the measured choice (the tests set "off")
BF16_MIN_SPEEDUP = 1.3  # "clearly faster": below this the casts autocast adds eat most of the gain
# One feed-forward matmul of the bundled model on 256 tokens: (256 × 384) @ (384 × 1536), 0.3 GFLOP,
# a few milliseconds in fp32 on one core: big enough to reach the kernel's speed, small enough to be cheap.
BENCH_SHAPE = (256, 384, 1536)
BENCH_ROUNDS = 7  # round-robin rounds (fp32, bf16, fp32, bf16, ...); the ratio is their median

_lock = threading.Lock()
# the once-per-process measurements, by (device type, device index); tests replace it with a fresh dict
measured_choices: dict[tuple[str, int], "PrecisionChoice"] = {}


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision ``amp="auto"`` runs in on a device, with the measurement behind it."""

    amp: str  # "bf16" or "off" (fp32)
    reason: str  # one sentence a learner can read
    device: str
    fp32_gflops: float | None = None  # measured matmul throughput, GFLOP/s (CPU only)
    bf16_gflops: float | None = None
    speedup: float | None = None  # median over rounds of fp32 time / bf16 time
    threads: int = 1
    seconds: float = 0.0  # how long the micro-benchmark took

    @property
    def label(self) -> str:
        return "bf16 autocast" if self.amp == "bf16" else "fp32"


def matmul_rates(shape: tuple[int, int, int] = BENCH_SHAPE, rounds: int = BENCH_ROUNDS,
                 device: str | torch.device = "cpu") -> dict[str, float]:
    """GFLOP per second of one ``(m × k) @ (k × n)`` matmul in fp32 and in bf16 (CPU: per second of CPU
    time), and their speed ratio.

    Each round times one fp32 and one bf16 product back to back (after one warm-up of each), so a
    burst of load from elsewhere hits both; the ratio is the median of the per-round ratios. On a
    CPU the clock is the process's CPU time, which other programs on a busy machine (a classroom
    laptop, a shared server) disturb far less than wall time; on a GPU it is wall time.

    >>> r = matmul_rates((16, 16, 16), rounds=3)
    >>> sorted(r), r["fp32_gflops"] > 0
    (['bf16_gflops', 'fp32_gflops', 'speedup'], True)
    """
    m, k, n = shape
    device = torch.device(device)
    gen = seeds.generator(0, "matmul_operands")
    a32 = torch.randn(m, k, generator=gen).to(device)
    b32 = torch.randn(k, n, generator=gen).to(device)
    pairs = {"fp32": (a32, b32), "bf16": (a32.bfloat16(), b32.bfloat16())}
    times: dict[str, list[float]] = {"fp32": [], "bf16": []}

    # CPU: this thread's CPU time when torch computes on it alone (other sessions' threads in the same
    # server process do not count), else the whole process's (the matmul runs on several threads).
    clock = time.perf_counter if device.type == "cuda" else (
        time.thread_time if torch.get_num_threads() == 1 else time.process_time)

    def once(name: str) -> float:
        a, b = pairs[name]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = clock()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return clock() - start

    for name in pairs:  # warm-up: the first call of a kernel pays for its set-up
        once(name)
    for _ in range(max(1, rounds)):
        for name in pairs:
            times[name].append(once(name))
    flops = 2.0 * m * k * n

    def mid(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2]

    ratios = [f / b for f, b in zip(times["fp32"], times["bf16"]) if b > 0]
    return {"fp32_gflops": flops / mid(times["fp32"]) / 1e9, "bf16_gflops": flops / mid(times["bf16"]) / 1e9,
            "speedup": mid(ratios) if ratios else float("nan")}


def _bf16_units() -> str:
    """What oneDNN reports about this CPU's bf16 support, for the explanation only."""
    try:
        return "has" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "lacks"
    except (AttributeError, RuntimeError):  # not every build has oneDNN
        return "may lack"


def auto_amp(device: str | torch.device | None = None) -> PrecisionChoice:
    """What ``amp="auto"`` means on ``device`` now: bf16 autocast or fp32, and why.

    CUDA: bf16 where the GPU supports it. CPU: measured by ``matmul_rates`` once per process and
    torch thread count (cached; later calls are free). ``MLMLAB_AMP`` overrides both.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    threads = torch.get_num_threads()
    forced = os.environ.get(AMP_ENV, "").strip().lower()
    if forced in ("off", "bf16"):
        return PrecisionChoice(forced, f"set by the environment variable {AMP_ENV}={forced}.", device.type,
                               threads=threads)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return PrecisionChoice("bf16", "this GPU has bf16 units: bf16 autocast is the usual choice.", "cuda",
                                   threads=threads)
        return PrecisionChoice("off", "this GPU has no bf16 support, so training runs in fp32.", "cuda",
                               threads=threads)
    if device.type != "cpu":
        return PrecisionChoice("off", f"no bf16 measurement for {device.type} devices: fp32.", device.type,
                               threads=threads)
    key = ("cpu", threads)
    with _lock:  # one measurement per process and thread count, even with many sessions at once
        if key not in measured_choices:
            start = time.perf_counter()
            rates = matmul_rates()
            seconds = time.perf_counter() - start
            fast = rates["speedup"] >= BF16_MIN_SPEEDUP
            units = _bf16_units()
            unit = "GFLOP/s, 1 thread" if threads == 1 else f"GFLOP per CPU second, {threads} threads"
            reason = (f"a bf16 matmul ran {rates['speedup']:.1f}× as fast as fp32 on this CPU "
                      f"({rates['bf16_gflops']:.0f} vs {rates['fp32_gflops']:.0f} {unit}; "
                      f"oneDNN says it {units} bf16 units)")
            reason += (", so training uses bf16 autocast." if fast else
                       f", less than the {BF16_MIN_SPEEDUP:g}× it takes to pay for autocast's casts, so training "
                       "stays in fp32.")
            measured_choices[key] = PrecisionChoice("bf16" if fast else "off", reason, "cpu", rates["fp32_gflops"],
                                                    rates["bf16_gflops"], rates["speedup"], threads, seconds)
        return measured_choices[key]


def resolve_amp(amp: str, device: str | torch.device | None = None) -> str:
    """``"auto"`` → what ``auto_amp`` picks on ``device``; any other mode is returned as it is.

    >>> resolve_amp("off"), resolve_amp("bf16")
    ('off', 'bf16')
    """
    return auto_amp(device).amp if amp == "auto" else amp
