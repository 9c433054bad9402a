"""One training run: a background thread that trains its own copies, records every event under a lock
and hands out snapshots, with a stop switch.

The run's thread calls `training.train_variants` and writes its events into the run under a lock;
`snapshot()` hands out a copy, so drawing never races the training thread. Create a run through
`RunManager.submit` (``manager``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from mlm_core.data import private_copy
from mlm_core.errors import InputError
from mlm_core.jobs.forecasts import PACE_STEPS, Forecast, QueueForecast, eval_points, forecast
from mlm_core.jobs.limits import cap_threads, cuda_available
from mlm_core.jobs.snapshot import DONE, ERROR, FINISHED, QUEUED, RUNNING, STOPPED, RunSnapshot
from mlm_core.measure import background_priority, return_free_memory
from mlm_core.training import Curves, TrainConfig, TrainEvent, TrainResult, check_variants, train_variants

TrainFn = Callable[..., Mapping[str, TrainResult]]


class Run:
    """One training job: its thread, its event log, its stop switch. Create it through a RunManager."""

    def __init__(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig], *,
                 label: str = "", train_fn: TrainFn = train_variants, clock=time.monotonic,
                 eval_texts: Sequence[str] | None = None, client: str | None = None,
                 alive: Callable[[], bool] | None = None, max_seconds: float | None = None,
                 threads: int | None = None, keep_trained: bool = False,
                 on_finish: Callable[[Run], None] | None = None,
                 queue_forecast: Callable[[Run], QueueForecast | None] | None = None):
        """``on_finish(run)`` is called once the run has ended; ``queue_forecast(run)`` says, while it is queued,
        when it should start (the manager that queues it gives both)."""
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
        self._on_finish = on_finish
        self._queue_forecast = queue_forecast  # for a queued run's place and start
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
        if status == QUEUED and self._queue_forecast is not None:  # outside the run's lock: it reads other runs
            snap = replace(snap, queue=self._queue_forecast(self))
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
    if cuda_available():
        torch.cuda.empty_cache()

