"""The server's limits on training runs, each read from an environment variable: runs at once, how long a
session may be gone, tokens per step, seconds and memory per run, and torch threads.

One student cannot hold a classroom's machine: `MLMLAB_MAX_RUNS` runs at once (1 on a CPU machine, 2 with
CUDA), a short queue behind them; `MLMLAB_ABANDON_S` seconds a run's session may be gone (60: a reloaded
tab reconnects in time); `MLMLAB_MAX_STEP_TOKENS` tokens per step (batch x sequence length, 4,096; up to
4x that with gradient checkpointing, which recomputes activations instead of storing them);
`MLMLAB_MAX_RUN_S` seconds per run (300), after which it stops with its curves kept; `MLMLAB_RUN_MB`
memory per run; `MLMLAB_TORCH_THREADS` torch threads (half the cores), set process-wide and in every
run's thread, so the pages keep the other cores.
"""

from __future__ import annotations

import os

import torch

DEFAULT_ABANDON_S = 60.0
DEFAULT_MAX_QUEUE = 4
# Batch x sequence length per optimizer step. 4,096 tokens on the default model take ~2 GB of
# activations in fp32 (batch 64 x 256 = 16,384 took ~9 GB), which fits a laptop next to the server.
DEFAULT_MAX_STEP_TOKENS = 4096
CHECKPOINTING_TOKEN_FACTOR = 4  # gradient checkpointing stores one tensor per layer, not every activation
DEFAULT_MAX_RUN_S = 300.0  # a workshop run is a minute or two; five minutes is the most one run holds a slot
# What one run may hold at once (costs.run_bytes, checked before it starts). A 16 GB laptop serving a class:
# the server and its cached models (~1 GB), trained models (MLMLAB_SERVER_TRAINED_MB, 1 GB), a few clicks at
# MLMLAB_CLICK_MB (1 GB each), one run at a time on a CPU, and the teacher's own browser and system beside them.
DEFAULT_RUN_MB = 2048


def cuda_available() -> bool:
    try:
        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


def _env_number(name: str, default: float, cast=float, minimum: float = 0.0) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = cast(raw)
    except ValueError:
        return default
    return value if value >= minimum else default


def default_max_runs() -> int:
    """`MLMLAB_MAX_RUNS`, else 1 on a CPU machine and 2 with CUDA."""
    return int(_env_number("MLMLAB_MAX_RUNS", 2 if cuda_available() else 1, int, 1))


def default_abandon_s() -> float:
    """`MLMLAB_ABANDON_S`: seconds a run's session may be gone before the run is stopped."""
    return float(_env_number("MLMLAB_ABANDON_S", DEFAULT_ABANDON_S, float, 0.001))


def default_max_step_tokens() -> int:
    """`MLMLAB_MAX_STEP_TOKENS`: most batch x sequence-length tokens per step without checkpointing."""
    return int(_env_number("MLMLAB_MAX_STEP_TOKENS", DEFAULT_MAX_STEP_TOKENS, int, 16))


def default_max_run_s() -> float:
    """`MLMLAB_MAX_RUN_S`: wall-clock seconds after which a run is stopped (its curves are kept)."""
    return float(_env_number("MLMLAB_MAX_RUN_S", DEFAULT_MAX_RUN_S, float, 1.0))


def default_run_bytes() -> int:
    """`MLMLAB_RUN_MB` (default 2048) in bytes: the most one training run may hold at once (``costs.run_bytes``)."""
    return int(_env_number("MLMLAB_RUN_MB", DEFAULT_RUN_MB, int, 1)) * 2**20


def available_cores() -> int:
    """The cores this process may run on (its affinity set on Linux, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """`MLMLAB_TORCH_THREADS`, else half the cores (at least 1): the rest stay free for the pages."""
    return int(_env_number("MLMLAB_TORCH_THREADS", max(1, available_cores() // 2), int, 1))


def cap_threads(threads: int | None = None) -> int:
    """Set torch's intra-op thread count. With OpenMP it applies to the calling thread and to every
    thread started afterwards (Streamlit starts one per script run), so setting it once in the
    server caps the pages, and each run sets it again in its own thread."""
    n = int(threads if threads is not None else default_threads())
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n

