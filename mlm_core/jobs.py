"""Training runs for a UI: a background thread per run, a snapshot to draw, caps on what runs.

A page never starts threads. It asks the global `RunManager` for a `Run`, keeps that handle in its
session, and redraws from `run.snapshot()` every 2 seconds. The run's thread calls
`training.train_variants` and writes its events into the run under a lock; `snapshot()` hands out
a copy, so drawing never races the training thread.

A run lives as long as the session that started it. The page hands `submit` an `alive()` check
(in Streamlit: is this session still connected, on any page?); a watchdog stops a run once its
session has been gone for `MLMLAB_ABANDON_S` seconds (default 60: a reloaded tab reconnects in
time) and frees its model copies. A run without an `alive()` check counts as gone when nobody
has asked for a snapshot for that long.

Limits, each an environment variable, so one student cannot hold a classroom's machine:
`MLMLAB_MAX_RUNS` runs at once (1 on a CPU machine, 2 with CUDA), a short queue behind them, at
most one queued or running run per client; `MLMLAB_MAX_STEP_TOKENS` tokens per step (batch x
sequence length, 4,096; up to 4x that with gradient checkpointing, which recomputes activations
instead of storing them); `MLMLAB_MAX_RUN_S` seconds per run (300), after which it stops with its
curves kept; `MLMLAB_TORCH_THREADS` torch threads (half the cores), set process-wide and in every
run's thread, so the pages keep the other cores.

What a learner is told comes from measured times, never from a guess: a running run's time left is its
recent step time x the steps left plus its measured evaluation time x the evaluations left, and never
runs past the time cap (``forecast``: then it says at which step the cap will stop it); a queued run
is told its place, when it should start (and at the latest, if every run ahead uses its full time) and
what it will get (``queue_forecast``; ``RunSnapshot.progress_text`` words both). `MLMLAB_TEACHER_KEY`, when set, lets whoever
knows it see and stop every run (`teacher_runs`, `teacher_stop`); without it no session can reach
another session's run; the key and the pace of guesses at it live in `mlm_core.teacher_key`.
"""

from __future__ import annotations

import heapq
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from mlm_core.costs import RUN_BYTES_PER_PARAMETER, UPDATE_BYTES_PER_PARAMETER, masked_share, run_bytes
from mlm_core.data import private_copy
from mlm_core.errors import InputError
from mlm_core.measure import background_priority, human_bytes, return_free_memory
from mlm_core.teacher_key import TeacherKeyGuard
from mlm_core.training import (Curves, TrainConfig, TrainEvent, TrainResult, check_variants, curves_table,
                               focus_token_share, train_variants)

QUEUED, RUNNING, DONE, STOPPED, ERROR = "queued", "running", "done", "stopped", "error"
FINISHED = (DONE, STOPPED, ERROR)
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


class BusyError(InputError):
    """Every training slot and every queue place is taken; the message says what to do."""


def _cuda_available() -> bool:
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
    return int(_env_number("MLMLAB_MAX_RUNS", 2 if _cuda_available() else 1, int, 1))


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


def step_tokens_problem(variants: Mapping[str, TrainConfig], max_step_tokens: int) -> str | None:
    """Why this run's batch x sequence length is too big for one step here, or None if it fits.

    >>> step_tokens_problem({"a": TrainConfig(batch_size=64, seq_len=128)}, 4096) is not None
    True
    >>> step_tokens_problem({"a": TrainConfig(batch_size=64, seq_len=128, gradient_checkpointing=True)}, 4096)
    """
    for name, cfg in variants.items():
        tokens = cfg.batch_size * cfg.seq_len
        hard = max_step_tokens * CHECKPOINTING_TOKEN_FACTOR
        if tokens > hard:
            return (f"{cfg.batch_size} x {cfg.seq_len} = {tokens:,} tokens per step is more than this server "
                    f"allows ({hard:,} with gradient checkpointing). Use a smaller batch or shorter sequences.")
        if tokens > max_step_tokens and not cfg.gradient_checkpointing:
            return (f"{cfg.batch_size} x {cfg.seq_len} = {tokens:,} tokens per step is more than "
                    f"{max_step_tokens:,}, the most this server takes without gradient checkpointing. Turn on "
                    "gradient checkpointing (More settings: it recomputes activations instead of storing "
                    f"them, up to {hard:,} tokens), or use a smaller batch or shorter sequences.")
    return None


def _focus_share(tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig]) -> float:
    """The share of the texts' tokens that are facts' words, when a variant masks them more often than the rule."""
    facts = [c for c in variants.values() if c.focus_mlm_probability > c.masking.mlm_probability]
    if not facts or tokenizer is None:
        return 0.0
    return focus_token_share(tokenizer, texts, facts[0].eval_focus_words)


def _chars(texts: Sequence[str], eval_texts: Sequence[str] | None) -> int:
    return sum(len(t) for t in texts) + sum(len(t) for t in eval_texts or ())


def run_memory_problem(model, variants: Mapping[str, TrainConfig], budget: int, *,
                       focus_share: float = 0.0, text_chars: int = 0) -> str | None:
    """Why this run would hold more memory than ``budget`` bytes, naming what to lower; None if it fits.

    The estimate is ``costs.run_bytes`` on the model's config and its own parameter count (a model without a
    config, a test's stand-in, is not estimated).

    >>> from mlm_core.models import load_masked_lm
    >>> model, _ = load_masked_lm("tiny-random")
    >>> run_memory_problem(model, {"a": TrainConfig(batch_size=64, seq_len=256)}, 2**30)[:46]
    'This run would hold about 1.5 GiB at once: 1 m'
    >>> run_memory_problem(model, {"a": TrainConfig()}, 2**30) is None
    True
    """
    config = getattr(model, "config", None)
    if config is None:
        return None
    params = sum(p.numel() for p in model.parameters())

    def need(vs) -> int:
        return run_bytes(config, vs, params=params, focus_share=focus_share, text_chars=text_chars)

    total = need(variants)
    if total <= budget:
        return None
    copies = (RUN_BYTES_PER_PARAMETER * len(variants) + UPDATE_BYTES_PER_PARAMETER) * params
    first = next(iter(variants.values()))
    ways = []
    smaller = {name: replace(c, batch_size=max(c.grad_accum_steps, c.batch_size // 2)) for name, c in variants.items()}
    while need(smaller) > budget and any(c.batch_size > c.grad_accum_steps for c in smaller.values()):
        smaller = {name: replace(c, batch_size=max(c.grad_accum_steps, c.batch_size // 2))
                   for name, c in smaller.items()}
    if need(smaller) <= budget:
        ways.append(f"a batch of {next(iter(smaller.values())).batch_size} or fewer sequences")
    ways.append("a shorter sequence length")
    if any(masked_share(c, focus_share) > 0.15 for c in variants.values()):
        ways.append("a smaller masked share")
    if not all(c.gradient_checkpointing for c in variants.values()):
        checkpointed = {name: replace(c, gradient_checkpointing=True) for name, c in variants.items()}
        if need(checkpointed) <= budget:
            ways.append("gradient checkpointing (More settings) at these sizes")
    if len(variants) > 1:
        ways.append("fewer variants side by side")
    n = len(variants)
    step = max(total - copies, 0)
    share = max(masked_share(c, focus_share) for c in variants.values())
    return (f"This run would hold about {human_bytes(total)} at once: {n} model cop{'ies' if n > 1 else 'y'} with "
            f"{'their' if n > 1 else 'its'} gradients and AdamW state ({human_bytes(copies)}), and a step of batch "
            f"{first.batch_size} × {first.seq_len} with {share:.0%} of its tokens predicted ({human_bytes(step)}). "
            f"This server allows {human_bytes(budget)} per run (MLMLAB_RUN_MB). Try "
            + ", ".join(ways[:-1]) + (" or " if len(ways) > 1 else "") + ways[-1] + ".")


TRIM_EVERY_S = 60.0  # the watchdog gives freed memory back to the system this often (measure.return_free_memory)
SLOW_STEP_S = 20.0  # a step or evaluation that runs this long is said to be slow on the progress bar
PACE_STEPS = 10  # the time left uses the mean of the last steps: a run that starts sharing the machine slows down


def eval_points(total_steps: int, eval_every: int) -> list[int]:
    """The steps after which the loop evaluates: every ``eval_every`` steps and after the last one.

    (The evaluation before the first step has happened by the time a step is measured.)

    >>> eval_points(25, 10)
    [10, 20, 25]
    """
    every = max(1, int(eval_every))
    points = list(range(every, total_steps + 1, every))
    return points if points and points[-1] == total_steps else points + [total_steps]


@dataclass(frozen=True)
class Forecast:
    """Where a running run will end: seconds left (never past the cap), the step it ends at, and whether
    the time cap is what ends it."""

    eta_s: float
    final_step: int
    stops_at_cap: bool


def forecast(step: int, total_steps: int, step_s: float, eval_s: float, evals_left: Sequence[int],
             elapsed_s: float, max_seconds: float | None) -> Forecast:
    """The rest of a run at its measured pace: each step takes ``step_s``, each evaluation still to come
    (``evals_left``: the steps after which one runs) ``eval_s``; the cap stops it after the step in
    progress at ``max_seconds``, with no evaluation after that step.

    >>> forecast(2, 80, 0.5, 2.0, [10, 20, 30, 40, 50, 60, 70, 80], 10.0, 300.0)
    Forecast(eta_s=55.0, final_step=80, stops_at_cap=False)
    >>> forecast(2, 80, 4.0, 2.0, [10, 20, 30, 40, 50, 60, 70, 80], 10.0, 300.0)
    Forecast(eta_s=290.0, final_step=71, stops_at_cap=True)
    """
    evals = set(evals_left)
    left = math.inf if max_seconds is None else max(0.0, max_seconds - elapsed_s)
    t, s = 0.0, step
    while s < total_steps:
        t += step_s
        s += 1
        if t >= left:  # the watchdog stops it after the step in progress
            return Forecast(left, s, True)
        if s in evals:
            t += eval_s
            if t >= left and s < total_steps:  # ... or after the evaluation in progress
                return Forecast(left, s, True)
    return Forecast(min(t, left), total_steps, False)  # (the last evaluation always runs to its end)


@dataclass(frozen=True)
class QueueForecast:
    """What a queued run is told: its place, when it should start, at the latest, and what it will get."""

    place: int  # 1 = next in line
    running: int  # runs training now
    slots: int
    start_s: float | None  # the expected wait, from the measured pace of the runs ahead (None: not measured yet)
    start_max_s: float  # the wait if every run ahead uses its full time
    max_seconds: float  # the time it will have once it starts
    expected_s: float | None = None  # its own run time: what a run with the same settings took (or will take)
    expected_steps: int | None = None  # the step it should reach in that time (all of them, or where the cap stops it)
    expected_done: bool = True  # expected_s was measured on a run that ended (else: the forecast of one still going)


def queue_forecast(running_left: Sequence[tuple[float | None, float]], ahead: Sequence[tuple[float | None, float]],
                   slots: int, place: int, max_seconds: float, mine: tuple[float, int] | None = None,
                   mine_done: bool = True) -> QueueForecast:
    """When the queued run at ``place`` should start: slots free as the running runs end
    (``running_left``: (expected, at most) seconds each) and the queued runs ahead take theirs
    (``ahead``: (expected, at most) run seconds each, in queue order). An expected time that was not
    measured yet (None) leaves the expected start unknown; the latest start is always known. ``mine``:
    (seconds, final step) a run with the same settings took, when one was measured (``mine_done``), or the
    forecast of one still training.

    >>> queue_forecast([(40.0, 250.0)], [], slots=1, place=1, max_seconds=300.0)
    QueueForecast(place=1, running=1, slots=1, start_s=40.0, start_max_s=250.0, max_seconds=300.0, expected_s=None, expected_steps=None, expected_done=True)
    >>> queue_forecast([(40.0, 250.0)], [(70.0, 300.0)], slots=1, place=2, max_seconds=300.0).start_max_s
    550.0
    """
    def wait(column: int) -> float | None:
        if any(r[column] is None for r in [*running_left, *ahead]):
            return None
        free = sorted(r[column] for r in running_left)[:slots]
        free += [0.0] * (slots - len(free))
        heapq.heapify(free)
        for run in ahead:
            heapq.heappush(free, heapq.heappop(free) + run[column])
        return free[0]

    expected_s, expected_steps = mine if mine is not None else (None, None)
    return QueueForecast(place, len(running_left), slots, wait(0), wait(1), max_seconds, expected_s, expected_steps,
                         mine_done)


def _seconds(s: float) -> str:
    """A wait or a duration in words: "about 45 s", "about 4 min"."""
    s = max(0.0, s)
    if s < 90:
        return f"{max(5, int(math.ceil(s / 5.0)) * 5)} s"
    return f"{s / 60:.0f} min" if s < 3600 else f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class RunSnapshot:
    """A run as it is now: status, progress and every curve, copied out of the training thread."""

    run_id: str
    label: str
    status: str
    message: str
    step: int
    total_steps: int
    elapsed_s: float
    eta_s: float | None  # seconds left at the measured pace, never past the time cap; None until measured
    queue_position: int | None
    variants: dict[str, Curves]  # copies, safe to keep and draw
    error: str | None = None
    configs: dict[str, dict[str, Any]] | None = None  # each variant's TrainConfig as plain values
    final_step: int | None = None  # the step it should end at: total_steps, or where the time cap stops it
    stops_at_cap: bool = False  # the time cap will stop it before its last step
    max_seconds: float | None = None  # the time cap of this run
    step_s: float | None = None  # the measured time of one step (recent steps, every variant)
    queue: QueueForecast | None = None  # for a queued run
    waiting_s: float = 0.0  # a running run: seconds since its last step or evaluation ended

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 0.0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def progress_text(self) -> str:
        """What the run is doing, in words, from what was measured (the Training page's progress bar).

        >>> snap = RunSnapshot("r", "", "running", "Training…", 2, 80, 12.0, 290.0, None, {}, final_step=71,
        ...                    stops_at_cap=True, max_seconds=300.0, step_s=4.0)
        >>> snap.progress_text()
        'Running: step 2 of 80 (12 s). At the pace so far (4.0 s a step) the 300 s limit per run stops it in about 5 min, near step 71 of 80: the curves so far are kept.'
        """
        head = f"{self.status.capitalize()}: step {self.step} of {self.total_steps} ({self.elapsed_s:.0f} s)."
        if self.status == QUEUED and self.queue is not None:
            return f"{head} {queue_text(self.queue, self.total_steps)}"
        if self.status != RUNNING:
            return f"{head} {self.message}"
        if self.waiting_s >= SLOW_STEP_S:
            return f"{head} {self.slow_text()}"
        if self.eta_s is None:
            return f"{head} Measuring the pace of the first steps…"
        pace = f"At the pace so far ({self.step_s:.1f} s a step)" if self.step_s else "At the pace so far"
        if self.stops_at_cap:
            return (f"{head} {pace} the {self.max_seconds:.0f} s limit per run stops it in about "
                    f"{_seconds(self.eta_s)}, near step {self.final_step} of {self.total_steps}: the curves so far "
                    "are kept.")
        return f"{head} {pace} about {_seconds(self.eta_s)} left."

    def slow_text(self) -> str:
        """What a learner is told while one step (or evaluation) has run for ``SLOW_STEP_S`` or more.

        >>> size = {"batch_size": 64, "seq_len": 256}
        >>> snap = RunSnapshot("r", "", "running", "", 0, 40, 95.0, None, None, {}, max_seconds=300.0, waiting_s=95.0,
        ...                    configs={"clean": size, "twin": size})
        >>> snap.slow_text()
        'Nothing has finished for 95 s: one step of 2 model copies at batch 64 × 256 takes that long on this machine. Stop, and the 300 s limit per run, still end it within seconds; a smaller batch or shorter sequences make every step faster.'
        """
        configs = list((self.configs or {}).values())
        what = ""
        if configs:
            n, c = len(configs), configs[0]
            what = (f" of {n} model cop{'ies' if n > 1 else 'y'} at batch {c.get('batch_size')} × "
                    f"{c.get('seq_len')}")
        cap = f", and the {self.max_seconds:.0f} s limit per run," if self.max_seconds else ""
        return (f"Nothing has finished for {self.waiting_s:.0f} s: one step{what} takes that long on this machine. "
                f"Stop{cap} still end it within seconds; a smaller batch or shorter sequences make every step faster.")

    def curves_rows(self) -> list[dict[str, Any]]:
        """All curves as flat rows (variant, kind, step, metrics) for a table or a CSV export."""
        return curves_table(self.variants)


def queue_text(q: QueueForecast, total_steps: int) -> str:
    """A queued run's place, expected start and what it will get, in words.

    >>> print(queue_text(QueueForecast(1, 1, 1, 40.0, 250.0, 300.0, 70.0, 80), 80))
    Next in line for the training slot (1 run is training). It should start in about 40 s (at the latest in about 4 min, if the run ahead uses its full time). Then it trains for up to 300 s: a run with these settings took about 70 s for all 80 steps here.
    """
    where = "Next in line" if q.place == 1 else f"Number {q.place} in line ({q.place - 1} queued ahead)"
    slots = "the training slot" if q.slots == 1 else f"one of {q.slots} training slots"
    busy = f"{q.running} run{'s are' if q.running != 1 else ' is'} training"
    one_ahead = q.running + q.place - 1 == 1
    ahead = "the run ahead uses its" if one_ahead else "the runs ahead use their"
    if q.start_s is None:  # the run ahead has not measured its pace yet
        text = (f"{where} for {slots} ({busy}). It starts at the latest in about {_seconds(q.start_max_s)}, if "
                f"{ahead} full time; how much sooner, the first steps of the run ahead will tell.")
    else:
        text = (f"{where} for {slots} ({busy}). It should start in about {_seconds(q.start_s)} (at the latest "
                f"in about {_seconds(q.start_max_s)}, if {ahead} full time).")
    then = f"Then it trains for up to {q.max_seconds:.0f} s"
    if q.expected_s is None:
        return f"{text} {then}."
    if q.expected_steps is not None and q.expected_steps < total_steps:
        return (f"{text} {then}: at the pace measured for these settings the limit stops it near step "
                f"{q.expected_steps} of {total_steps}.")
    if not q.expected_done:
        return (f"{text} {then}: the run training now has the same settings and should take about "
                f"{_seconds(q.expected_s)} for all {total_steps} steps.")
    return f"{text} {then}: a run with these settings took about {_seconds(q.expected_s)} for all {total_steps} steps here."


TrainFn = Callable[..., Mapping[str, TrainResult]]


class Run:
    """One training job: its thread, its event log, its stop switch. Create it through a RunManager."""

    def __init__(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig], *,
                 label: str = "", train_fn: TrainFn = train_variants, clock=time.monotonic,
                 eval_texts: Sequence[str] | None = None, client: str | None = None,
                 alive: Callable[[], bool] | None = None, max_seconds: float | None = None,
                 threads: int | None = None, keep_trained: bool = False):
        self.data = check_variants(variants)  # at submit, so a bad run is refused now, not when its turn comes
        self.run_id = uuid.uuid4().hex[:8]
        self.label = label
        self.client = client  # who started it: one queued or running run per client
        self.alive = alive  # is the session that started it still there (on any page)?
        self.max_seconds = max_seconds
        self.threads = threads
        self.keep_trained = keep_trained  # hold the trained copies after the run, until take_trained()
        self._model = model
        self._tokenizer = tokenizer
        self._texts = list(texts)
        self._eval_texts = list(eval_texts) if eval_texts is not None else None
        self._variants = dict(variants)
        self._configs = {name: cfg.to_dict() for name, cfg in variants.items()}
        self._train_fn = train_fn
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = QUEUED
        self._message = "Waiting for a free training slot…"
        self._error: str | None = None
        self._stop_reason: str | None = None
        self._started_at: float | None = None
        self._finished_at: float | None = None
        self._curves = {name: Curves(name) for name in variants}
        self.total_steps = self.data.steps
        self.results: dict[str, TrainResult] = {}
        self.last_polled = clock()
        self.queue_position: int | None = None
        self._on_finish: Callable[[Run], None] | None = None
        self._manager: RunManager | None = None  # for a queued run's forecast
        # the measured pace (lock held): wall seconds of each finished step (every variant) and evaluation
        self._mark: float | None = None  # when the last event arrived
        self._step_wall: dict[int, list] = {}  # step -> [seconds so far, variants reported]
        self._eval_wall: dict[int, float] = {}  # step -> seconds of its evaluations and probes
        self._eval_points = eval_points(self.total_steps, self.data.eval_every)

    @property
    def settings_key(self) -> tuple:
        """What makes two runs take the same time: the label (model, text, variants) and every setting."""
        return self.label, tuple(sorted((name, tuple(sorted(map(repr, c.items())))) for name, c in self._configs.items()))

    # -- state ---------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        with self._lock:
            return self._status

    @property
    def model_freed(self) -> bool:
        """True once the run holds no model: neither the base model nor a trained copy."""
        with self._lock:
            return self._model is None and all(r.model is None for r in self.results.values())

    @property
    def elapsed_s(self) -> float:
        with self._lock:
            if self._started_at is None:
                return 0.0
            return (self._finished_at or self._clock()) - self._started_at

    def pace(self) -> tuple[float | None, float]:
        """(seconds per step, seconds per evaluation) as measured so far (None: no step measured yet).

        A step's time is the mean of the last ``PACE_STEPS`` steps (every variant's part of it), so a
        run that starts sharing the machine with another is re-estimated within a few steps. The first
        step is left out: it may hold the set-up (copying the model, masking the held-out set).
        """
        with self._lock:
            n = len(self._curves)
            done = [wall for step, (wall, count) in sorted(self._step_wall.items()) if count >= n and step > 1]
            step_s = sum(done[-PACE_STEPS:]) / len(done[-PACE_STEPS:]) if done else None
            eval_s = sum(self._eval_wall.values()) / len(self._eval_wall) if self._eval_wall else 0.0
            return step_s, eval_s

    def snapshot(self, touch: bool = True) -> RunSnapshot:
        """A copy of everything recorded so far; with `touch`, also tells the watchdog someone looks."""
        now = self._clock()
        step_s, eval_s = self.pace()
        with self._lock:
            if touch:
                self.last_polled = now
            variants = {name: c.copy() for name, c in self._curves.items()}
            step = min((c.steps[-1]["step"] if c.steps else 0) for c in self._curves.values())
            elapsed = 0.0
            if self._started_at is not None:
                elapsed = (self._finished_at or now) - self._started_at
            status = self._status
            ahead = None
            if status == RUNNING and step_s is not None:
                # forecast from the last event; the time since belongs to the step (or evaluation) in progress
                since = max(0.0, now - self._mark) if self._mark is not None else 0.0
                evals_left = [k for k in self._eval_points if k >= step and k not in self._eval_wall]
                ahead = forecast(step, self.total_steps, step_s, eval_s, evals_left, elapsed - since,
                                 self.max_seconds)
                ahead = Forecast(max(0.0, ahead.eta_s - since), ahead.final_step, ahead.stops_at_cap)
            snap = RunSnapshot(self.run_id, self.label, status, self._message, step, self.total_steps, elapsed,
                               ahead.eta_s if ahead else None, self.queue_position, variants, self._error,
                               {name: dict(c) for name, c in self._configs.items()},
                               final_step=ahead.final_step if ahead else None,
                               stops_at_cap=bool(ahead and ahead.stops_at_cap), max_seconds=self.max_seconds,
                               step_s=step_s, waiting_s=(max(0.0, now - self._mark) if status == RUNNING
                                                         and self._mark is not None else 0.0))
        manager = self._manager
        if status == QUEUED and manager is not None:  # outside the run's lock: the manager reads other runs
            snap = replace(snap, queue=manager.queue_forecast(self))
        return snap

    def stop(self, reason: str = "Stopped by you.") -> None:
        """Ask the run to stop: within its current step or evaluation (``training.loop.stop_hooks``; a queued run
        never starts)."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._stop.set()
            if self._status == QUEUED:
                self._status = STOPPED
                self._message = reason
                self._release_model()

    def take_trained(self) -> tuple[dict[str, Any], Any, Any] | None:
        """``({variant: trained model}, tokenizer, base model)`` of a finished ``keep_trained`` run, once.

        The run lets go of them (the caller owns the copies from now on, e.g. the learner's
        session); None while it runs, when it kept nothing, or when they were taken already.
        """
        with self._lock:
            if self._status not in FINISHED:
                return None
            models = {name: r.model for name, r in self.results.items() if r.model is not None}
            taken = (models, self._tokenizer, self._model) if models else None
            self._release_model()
            return taken

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has finished (True) or the timeout passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            thread = self._thread
            if thread is not None:
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                return not thread.is_alive()
            if self.status in FINISHED:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    # -- the thread ----------------------------------------------------------------------------
    def _start(self) -> bool:
        """Start the thread (called by the manager); False if the run was stopped while queued."""
        with self._lock:
            if self._status != QUEUED:
                return False
            self._status = RUNNING
            self._message = "Training…"
            self._started_at = self._clock()
            self._mark = self._started_at
            self.queue_position = None
            self._thread = threading.Thread(target=self._work, name=f"mlmlab-run-{self.run_id}", daemon=True)
        self._thread.start()
        return True

    def _on_event(self, event: TrainEvent) -> None:
        now = self._clock()
        with self._lock:
            curves = self._curves.get(event.variant)
            if curves is None:
                return
            curves.record(event)
            gap = max(0.0, now - (self._mark if self._mark is not None else now))
            self._mark = now
            if event.kind == "step":
                wall = self._step_wall.setdefault(event.step, [0.0, 0])
                wall[0] += gap
                wall[1] += 1
            elif event.kind in ("eval", "probe"):
                # the loop times its evaluation (eval_s); the gap before the first one also holds the set-up
                cost = event.values.get("eval_s", gap) if event.kind == "eval" else gap
                self._eval_wall[event.step] = self._eval_wall.get(event.step, 0.0) + float(cost)
            if event.kind == "error":
                self._error = event.values.get("message")

    def _work(self) -> None:
        try:
            if self.threads is not None:
                cap_threads(self.threads)  # this thread's own OpenMP setting
            extra = {} if self._eval_texts is None else {"eval_texts": self._eval_texts}
            # The run tokenizes with a copy of its own: the pages' tokenizer is shared by every session,
            # and a run's thousands of calls would make them wait (issue 42).
            tokenizer = private_copy(self._tokenizer)
            with background_priority():  # the pages of a class come first; the run takes what they leave
                results = self._train_fn(self._model, tokenizer, self._texts, self._variants,
                                         on_event=self._on_event, stop=self._stop, **extra)
            with self._lock:
                self.results = dict(results)
                if self._stop.is_set() and any(r.stopped for r in self.results.values()):
                    self._status = STOPPED
                    self._message = self._stop_reason or "Stopped."
                else:
                    self._status = DONE
                    self._message = "Finished."
        except Exception as exc:  # reported in the snapshot; the page shows it
            with self._lock:
                self._status = ERROR
                self._error = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
                self._message = self._error
        finally:
            with self._lock:
                self._finished_at = self._clock()
                if not (self.keep_trained and self.results):  # else kept until take_trained()
                    self._release_model()
            _free_memory()
            if self._on_finish is not None:
                self._on_finish(self)

    def _release_model(self) -> None:
        """Drop every reference to model weights (lock held): the trained copies and the base model."""
        self._model = None
        self._tokenizer = None
        self.alive = None  # the session check may hold the session; a finished run needs neither
        for result in self.results.values():
            result.model = None


def _free_memory() -> None:
    return_free_memory()
    if _cuda_available():
        torch.cuda.empty_cache()


class RunManager:
    """Starts runs up to a cap, queues a few more, and stops the ones nobody watches any more."""

    def __init__(self, max_runs: int | None = None, abandon_s: float | None = None, *,
                 max_queue: int = DEFAULT_MAX_QUEUE, watch_interval_s: float | None = None,
                 train_fn: TrainFn = train_variants, clock=time.monotonic, watchdog: bool = True,
                 max_step_tokens: int | None = None, max_run_s: float | None = None,
                 threads: int | None = None, max_run_bytes: int | None = None):
        self.max_runs = int(max_runs if max_runs is not None else default_max_runs())
        self.abandon_s = float(abandon_s if abandon_s is not None else default_abandon_s())
        self.max_step_tokens = int(max_step_tokens if max_step_tokens is not None else default_max_step_tokens())
        self.max_run_s = float(max_run_s if max_run_s is not None else default_max_run_s())
        self.max_run_bytes = int(max_run_bytes if max_run_bytes is not None else default_run_bytes())
        self.threads = threads  # None: leave each run thread's torch setting as it is
        if self.max_runs < 1 or self.abandon_s <= 0 or max_queue < 0 or self.max_run_s <= 0:
            raise InputError("max_runs must be at least 1, abandon_s and max_run_s above 0 and max_queue at least 0.")
        self.max_queue = max_queue
        self.watch_interval_s = watch_interval_s or max(0.05, min(5.0, self.abandon_s / 4))
        self._train_fn = train_fn
        self._clock = clock
        self._lock = threading.Lock()
        self._running: list[Run] = []
        self._queue: list[Run] = []
        self._measured: dict[tuple, tuple[float, int]] = {}  # settings -> (seconds, last step) of the last run that ended
        self._closed = threading.Event()
        self._watchdog_on = watchdog
        self._watchdog: threading.Thread | None = None
        self.key_guard = TeacherKeyGuard(clock=clock)

    def submit(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig], *,
               label: str = "", eval_texts: Sequence[str] | None = None, client: str | None = None,
               alive: Callable[[], bool] | None = None, keep_trained: bool = False) -> Run:
        """A new run: started now if a slot is free, queued if not; BusyError when the queue is full
        or this client already has a run; InputError when a step would be too big for this server.

        `client` names who asks (an IP address, or a session for local connections); `alive()` says
        whether the session that owns the run is still there. ``keep_trained``: the finished run
        holds its trained copies until ``run.take_trained()``.
        """
        problem = step_tokens_problem(variants, self.max_step_tokens) or self.memory_problem(
            model, tokenizer, texts, variants, eval_texts)
        if problem:
            raise InputError(problem)
        run = Run(model, tokenizer, texts, variants, label=label, train_fn=self._train_fn, clock=self._clock,
                  eval_texts=eval_texts, client=client, alive=alive, max_seconds=self.max_run_s,
                  threads=self.threads, keep_trained=keep_trained)
        run._on_finish = self._finished
        run._manager = self
        with self._lock:
            mine = [r for r in self._running + self._queue
                    if client is not None and r.client == client and r.status not in FINISHED]
            if mine:
                raise BusyError("You already have a training run going (perhaps from another tab): stop it "
                                "or let it finish before starting another. One run per person keeps the "
                                "machine fair for everyone.")
            if len(self._running) < self.max_runs:
                self._running.append(run)
                start = True
            elif len(self._queue) < self.max_queue:
                self._queue.append(run)
                self._renumber()
                start = False
            else:
                raise BusyError(
                    f"The machine is busy: {len(self._running)} training run(s) are going and "
                    f"{len(self._queue)} are waiting, the most it takes at once. Try again in a minute, "
                    "or make your run shorter (fewer steps, a smaller batch).")
            self._ensure_watchdog()
        if start:
            run._start()
        return run

    def memory_problem(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig],
                       eval_texts: Sequence[str] | None = None) -> str | None:
        """Why the run would hold more than ``max_run_bytes`` (``run_memory_problem``), before anything is copied."""
        return run_memory_problem(model, variants, self.max_run_bytes,
                                  focus_share=_focus_share(tokenizer, texts, variants),
                                  text_chars=_chars(texts, eval_texts))

    def run_estimate(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig],
                     eval_texts: Sequence[str] | None = None) -> int:
        """``costs.run_bytes`` of a run, as ``memory_problem`` checks it."""
        return run_bytes(model.config, variants, params=sum(p.numel() for p in model.parameters()),
                         focus_share=_focus_share(tokenizer, texts, variants), text_chars=_chars(texts, eval_texts))

    def active(self) -> list[Run]:
        with self._lock:
            return list(self._running) + list(self._queue)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"running": len(self._running), "queued": len(self._queue), "max_runs": self.max_runs}

    def queue_forecast(self, run: Run) -> QueueForecast | None:
        """When a queued ``run`` should start and what it will get, from the measured pace of the runs
        ahead (``queue_forecast``); None once it is no longer queued.

        A running run is expected to end at its forecast (at the latest at its time cap); a queued run
        ahead, or this one, is expected to take what the last run with the same settings took on this
        server (else, and at the latest, the full time cap).
        """
        with self._lock:
            if run not in self._queue:
                return None
            running, ahead = list(self._running), self._queue[: self._queue.index(run)]
            measured = dict(self._measured)
        cap = self.max_run_s
        done = set(measured)  # settings measured on runs that ended
        left = []
        for other in running:
            snap = other.snapshot(touch=False)
            most = max(0.0, (other.max_seconds or cap) - snap.elapsed_s)
            if snap.eta_s is not None:
                expected = min(snap.eta_s, most)
            elif other.settings_key in measured:  # not measured yet: what the same settings took before
                expected = min(max(0.0, measured[other.settings_key][0] - snap.elapsed_s), most)
            else:
                expected = None
            left.append((expected, most))
            if snap.eta_s is not None and not snap.stops_at_cap:  # a run with these settings, still going
                measured.setdefault(other.settings_key, (snap.elapsed_s + snap.eta_s, snap.total_steps))
        queued = [(min(measured[r.settings_key][0], cap) if r.settings_key in measured else None, cap) for r in ahead]
        return queue_forecast(left, queued, self.max_runs, len(ahead) + 1, run.max_seconds or cap,
                              measured.get(run.settings_key), mine_done=run.settings_key in done)

    def reap(self, now: float | None = None) -> list[Run]:
        """Stop every run whose session has been gone for `abandon_s`, and every run past `max_run_s`.

        A run with an `alive()` check is seen while its session is connected, on any page; one
        without is seen when someone asks for its snapshot.
        """
        now = self._clock() if now is None else now
        stale = []
        for run in self.active():
            if run.status in FINISHED:
                continue
            alive = run.alive
            if alive is not None:
                try:
                    if alive():
                        run.last_polled = max(run.last_polled, now)
                except Exception:  # a broken check must not keep a run forever, nor kill the watchdog
                    pass
            if now - run.last_polled > self.abandon_s:
                stale.append(run)
                run.stop(f"Stopped: the session that started this run was gone for {self.abandon_s:.0f} s "
                         "(tab closed?), so its memory was freed.")
            elif run.status == RUNNING and run.max_seconds is not None and run.elapsed_s > run.max_seconds:
                run.stop(f"Stopped at the time limit of {run.max_seconds:.0f} s per run (MLMLAB_MAX_RUN_S), "
                         "so others get their turn. The curves so far are kept.")
        with self._lock:
            dropped = [r for r in self._queue if r.status in FINISHED]
            self._queue = [r for r in self._queue if r.status not in FINISHED]
            if dropped:
                self._renumber()
        return stale

    def teacher_runs(self, key: str | None, client: str | None = None) -> list[RunSnapshot]:
        """Every queued or running run on the server, for whoever knows `MLMLAB_TEACHER_KEY`.

        The snapshots do not count as a look from the run's owner. A wrong or missing key (or no key
        set on the server) is an InputError: without it, nobody sees other sessions' runs. ``client``
        (who asks: ``ui.session.guess_client``) is held to ``key_guard``'s pace of guesses.
        """
        self.key_guard.check(key, client)
        return [run.snapshot(touch=False) for run in self.active()]

    def teacher_stop(self, key: str | None, run_id: str, client: str | None = None) -> bool:
        """Stop any run by its id (teacher key needed); True if it was found and not finished."""
        self.key_guard.check(key, client)
        for run in self.active():
            if run.run_id == run_id and run.status not in FINISHED:
                run.stop("Stopped by the teacher.")
                return True
        return False

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every run and the watchdog (tests, interpreter exit)."""
        self._closed.set()
        for run in self.active():
            run.stop("Stopped: the server is shutting down.")
        for run in self.active():
            run.wait(timeout)

    # -- internals -------------------------------------------------------------------------------
    def _renumber(self) -> None:
        for i, run in enumerate(self._queue, 1):
            run.queue_position = i
            ahead = "next in line" if i == 1 else f"number {i} in line"
            run._message = (f"Queued: {ahead} for {'the' if self.max_runs == 1 else f'one of {self.max_runs}'} "
                            f"training slot{'s' if self.max_runs > 1 else ''}. It starts by itself.")

    def _finished(self, run: Run) -> None:
        nxt: list[Run] = []
        snap = run.snapshot(touch=False)
        with self._lock:
            if snap.step > 0 and run.status in (DONE, STOPPED) and snap.elapsed_s > 0:
                # what these settings took here (a run stopped early by its owner says less: only a full or capped run)
                if snap.step >= snap.total_steps or snap.elapsed_s >= (run.max_seconds or self.max_run_s):
                    self._measured[run.settings_key] = (snap.elapsed_s, snap.step)
            if run in self._running:
                self._running.remove(run)
            while self._queue and len(self._running) + len(nxt) < self.max_runs:
                candidate = self._queue.pop(0)
                if candidate.status == QUEUED:
                    nxt.append(candidate)
            self._running.extend(nxt)
            self._renumber()
        for candidate in nxt:
            if not candidate._start():
                self._finished(candidate)

    def watch(self) -> None:
        """Start the watchdog now (the server does at its first page): it reaps abandoned runs and, every
        ``TRIM_EVERY_S``, collects garbage and gives freed memory back (Streamlit's collection after every script
        run is off, ``.streamlit/config.toml``)."""
        with self._lock:
            self._ensure_watchdog()

    def _ensure_watchdog(self) -> None:
        if not self._watchdog_on or (self._watchdog is not None and self._watchdog.is_alive()):
            return
        self._watchdog = threading.Thread(target=self._watch, name="mlmlab-run-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        trimmed = self._clock()
        while not self._closed.wait(self.watch_interval_s):
            try:
                self.reap()
                if self._clock() - trimmed >= TRIM_EVERY_S:  # what closed sessions freed goes back to the system
                    trimmed = self._clock()
                    return_free_memory()
            except Exception:  # pragma: no cover - the watchdog must outlive any one bad run
                pass


_manager: RunManager | None = None
_manager_lock = threading.Lock()


def get_manager() -> RunManager:
    """The one manager of this process (the Streamlit server), made on first use from the environment.

    Making it also caps torch's threads for the whole server (`cap_threads`).
    """
    global _manager
    with _manager_lock:
        if _manager is None:
            threads = cap_threads()
            _manager = RunManager(threads=threads)
        return _manager
