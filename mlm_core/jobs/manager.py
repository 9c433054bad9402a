"""The server's runs: a cap on how many train at once, a short queue, one run per client, the teacher's
view, and a watchdog that stops the runs nobody watches any more.

A page never starts threads. It asks the global `RunManager` (``get_manager``) for a `Run`, keeps that
handle in its session, and redraws from `run.snapshot()` every 2 seconds. A run lives as long as the
session that started it: the page hands `submit` an `alive()` check (in Streamlit: is this session still
connected, on any page?); the watchdog stops a run once its session has been gone for `MLMLAB_ABANDON_S`
seconds and frees its model copies. A run without an `alive()` check counts as gone when nobody has asked
for a snapshot for that long. `MLMLAB_TEACHER_KEY`, when set, lets whoever knows it see and stop every run
(`teacher_runs`, `teacher_stop`); without it no session can reach another session's run; the key and the
pace of guesses at it live in `mlm_core.teacher_key`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from mlm_core.costs import run_bytes
from mlm_core.errors import InputError
from mlm_core.jobs.forecasts import QueueForecast, queue_forecast
from mlm_core.jobs.limits import (DEFAULT_MAX_QUEUE, cap_threads, default_abandon_s, default_max_run_s,
                                  default_max_runs, default_max_step_tokens, default_run_bytes)
from mlm_core.jobs.refusals import run_focus_share, run_memory_problem, run_text_chars, step_tokens_problem
from mlm_core.jobs.run import Run, TrainFn
from mlm_core.jobs.snapshot import DONE, FINISHED, QUEUED, RUNNING, STOPPED, RunSnapshot
from mlm_core.measure import return_free_memory
from mlm_core.teacher_key import TeacherKeyGuard
from mlm_core.training import TrainConfig, train_variants

TRIM_EVERY_S = 60.0  # the watchdog gives freed memory back to the system this often (measure.return_free_memory)


class BusyError(InputError):
    """Every training slot and every queue place is taken; the message says what to do."""


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
                  threads=self.threads, keep_trained=keep_trained, on_finish=self._finished,
                  queue_forecast=self.queue_forecast)
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
                                  focus_share=run_focus_share(tokenizer, texts, variants),
                                  text_chars=run_text_chars(texts, eval_texts))

    def run_estimate(self, model, tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig],
                     eval_texts: Sequence[str] | None = None) -> int:
        """``costs.run_bytes`` of a run, as ``memory_problem`` checks it."""
        return run_bytes(model.config, variants, params=sum(p.numel() for p in model.parameters()),
                         focus_share=run_focus_share(tokenizer, texts, variants), text_chars=run_text_chars(texts, eval_texts))

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
