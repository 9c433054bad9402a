"""Training runs for a UI: a background thread per run, a snapshot to draw, a cap on how many run.

A page never starts threads. It asks the global `RunManager` for a `Run`, keeps that handle in its
session, and redraws from `run.snapshot()` every second. The run's thread calls
`training.train_variants` and writes its events into the run under a lock; `snapshot()` hands out
a copy, so drawing never races the training thread.

Streamlit has no "session ended" hook, so a watchdog stops any run whose page has not asked for a
snapshot for `MLMLAB_ABANDON_S` seconds (default 60) and frees its model copies (and the GPU
cache). `MLMLAB_MAX_RUNS` caps simultaneous runs (default 1 on a CPU machine, 2 with CUDA);
further runs wait in a short queue, and beyond that the learner gets a clear "busy" message.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlm_core.errors import InputError
from mlm_core.training import TrainConfig, TrainEvent, TrainResult, check_variants, train_variants

QUEUED, RUNNING, DONE, STOPPED, ERROR = "queued", "running", "done", "stopped", "error"
FINISHED = (DONE, STOPPED, ERROR)
DEFAULT_ABANDON_S = 60.0
DEFAULT_MAX_QUEUE = 4


class BusyError(InputError):
    """Every training slot and every queue place is taken; the message says what to do."""


def _cuda_available() -> bool:
    try:
        import torch

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
    """`MLMLAB_ABANDON_S`: seconds without a snapshot after which a run counts as abandoned."""
    return float(_env_number("MLMLAB_ABANDON_S", DEFAULT_ABANDON_S, float, 0.001))


@dataclass(frozen=True)
class VariantCurves:
    """Everything one variant has recorded so far (copies, safe to keep and draw)."""

    name: str
    steps: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    summary: dict[str, Any] | None  # set when the variant is done


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
    eta_s: float | None
    queue_position: int | None
    variants: dict[str, VariantCurves]
    error: str | None = None
    configs: dict[str, dict[str, Any]] | None = None  # each variant's TrainConfig as plain values

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 0.0

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def curves_rows(self) -> list[dict[str, Any]]:
        """All curves as flat rows (variant, kind, step, metrics) for a table or a CSV export."""
        rows: list[dict[str, Any]] = []
        for v in self.variants.values():
            rows.extend({"variant": v.name, "kind": "step", **r} for r in v.steps)
            rows.extend({"variant": v.name, "kind": "eval", **r} for r in v.evals)
        return rows


TrainFn = Callable[..., Mapping[str, TrainResult]]


class Run:
    """One training job: its thread, its event log, its stop switch. Create it through a RunManager."""

    def __init__(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig], *,
                 label: str = "", train_fn: TrainFn = train_variants, clock=time.monotonic,
                 keep_trained: bool = False):
        check_variants(variants)
        self.run_id = uuid.uuid4().hex[:8]
        self.label = label
        self.keep_trained = keep_trained  # hold the trained copies after the run, until take_trained()
        self._model = model
        self._tokenizer = tokenizer
        self._texts = list(texts)
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
        self._curves = {name: {"steps": [], "evals": [], "probes": [], "summary": None} for name in variants}
        self.total_steps = next(iter(variants.values())).steps
        self.results: dict[str, TrainResult] = {}
        self.last_polled = clock()
        self.queue_position: int | None = None
        self._on_finish: Callable[[Run], None] | None = None

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

    def snapshot(self) -> RunSnapshot:
        """A copy of everything recorded so far; also tells the watchdog the page is still there."""
        now = self._clock()
        with self._lock:
            self.last_polled = now
            variants = {
                name: VariantCurves(name, list(c["steps"]), list(c["evals"]), list(c["probes"]),
                                    dict(c["summary"]) if c["summary"] else None)
                for name, c in self._curves.items()
            }
            step = min((c["steps"][-1]["step"] if c["steps"] else 0) for c in self._curves.values())
            elapsed = 0.0
            if self._started_at is not None:
                elapsed = (self._finished_at or now) - self._started_at
            eta = None
            slowest = min(self._curves.values(), key=lambda c: len(c["steps"]))["steps"]
            if self._status == RUNNING and step > 0:
                first, last = (slowest[0].get("elapsed_s"), slowest[-1].get("elapsed_s")) if slowest else (None, None)
                if len(slowest) >= 2 and first is not None and last is not None and last > first:
                    # the pace since the first step: the set-up before it says nothing about the rest
                    eta = (last - first) / (len(slowest) - 1) * (self.total_steps - step)
                else:
                    eta = elapsed / step * (self.total_steps - step)
            return RunSnapshot(self.run_id, self.label, self._status, self._message, step,
                               self.total_steps, elapsed, eta, self.queue_position, variants, self._error,
                               {name: dict(c) for name, c in self._configs.items()})

    def stop(self, reason: str = "Stopped by you.") -> None:
        """Ask the run to stop after its current step (a queued run never starts)."""
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
            self.queue_position = None
            self._thread = threading.Thread(target=self._work, name=f"mlmlab-run-{self.run_id}", daemon=True)
        self._thread.start()
        return True

    def _on_event(self, event: TrainEvent) -> None:
        with self._lock:
            curves = self._curves.get(event.variant)
            if curves is None:
                return
            if event.kind == "step":
                curves["steps"].append(dict(event.values))
            elif event.kind == "eval":
                curves["evals"].append({"step": event.step, **event.values})
            elif event.kind == "probe":
                curves["probes"].append({"step": event.step, **event.values})
            elif event.kind == "done":
                curves["summary"] = dict(event.values)
            elif event.kind == "error":
                self._error = event.values.get("message")

    def _work(self) -> None:
        try:
            results = self._train_fn(self._model, self._tokenizer, self._texts, self._variants,
                                     on_event=self._on_event, stop=self._stop)
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
        for result in self.results.values():
            result.model = None


def _free_memory() -> None:
    gc.collect()
    if _cuda_available():
        import torch

        torch.cuda.empty_cache()


class RunManager:
    """Starts runs up to a cap, queues a few more, and stops the ones nobody watches any more."""

    def __init__(self, max_runs: int | None = None, abandon_s: float | None = None, *,
                 max_queue: int = DEFAULT_MAX_QUEUE, watch_interval_s: float | None = None,
                 train_fn: TrainFn = train_variants, clock=time.monotonic, watchdog: bool = True):
        self.max_runs = int(max_runs if max_runs is not None else default_max_runs())
        self.abandon_s = float(abandon_s if abandon_s is not None else default_abandon_s())
        if self.max_runs < 1 or self.abandon_s <= 0 or max_queue < 0:
            raise InputError("max_runs must be at least 1, abandon_s above 0 and max_queue at least 0.")
        self.max_queue = max_queue
        self.watch_interval_s = watch_interval_s or max(0.05, min(5.0, self.abandon_s / 4))
        self._train_fn = train_fn
        self._clock = clock
        self._lock = threading.Lock()
        self._running: list[Run] = []
        self._queue: list[Run] = []
        self._closed = threading.Event()
        self._watchdog_on = watchdog
        self._watchdog: threading.Thread | None = None

    def submit(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig], *,
               label: str = "", keep_trained: bool = False) -> Run:
        """A new run: started now if a slot is free, queued if not, BusyError when the queue is full.

        ``keep_trained``: the finished run holds its trained copies until ``run.take_trained()``.
        """
        run = Run(model, tokenizer, texts, variants, label=label, train_fn=self._train_fn, clock=self._clock,
                  keep_trained=keep_trained)
        run._on_finish = self._finished
        with self._lock:
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

    def active(self) -> list[Run]:
        with self._lock:
            return list(self._running) + list(self._queue)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"running": len(self._running), "queued": len(self._queue), "max_runs": self.max_runs}

    def reap(self, now: float | None = None) -> list[Run]:
        """Stop every run (running or queued) whose page has not polled it for `abandon_s`."""
        now = self._clock() if now is None else now
        stale = [r for r in self.active() if now - r.last_polled > self.abandon_s and r.status not in FINISHED]
        for run in stale:
            run.stop(f"Stopped: the page stopped checking on this run for {self.abandon_s:.0f} s "
                     "(tab closed?), so its memory was freed.")
        with self._lock:
            dropped = [r for r in self._queue if r.status in FINISHED]
            self._queue = [r for r in self._queue if r.status not in FINISHED]
            if dropped:
                self._renumber()
        return stale

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
            run._message = (f"Queued: {i} run(s) ahead of you wait for one of {self.max_runs} "
                            "training slot(s). It starts by itself.")

    def _finished(self, run: Run) -> None:
        nxt: list[Run] = []
        with self._lock:
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

    def _ensure_watchdog(self) -> None:
        if not self._watchdog_on or (self._watchdog is not None and self._watchdog.is_alive()):
            return
        self._watchdog = threading.Thread(target=self._watch, name="mlmlab-run-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._closed.wait(self.watch_interval_s):
            try:
                self.reap()
            except Exception:  # pragma: no cover - the watchdog must outlive any one bad run
                pass


_manager: RunManager | None = None
_manager_lock = threading.Lock()


def get_manager() -> RunManager:
    """The one manager of this process (the Streamlit server), made on first use from the environment."""
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = RunManager()
        return _manager
