"""A run as a page sees it: its status, progress and curves copied out of the training thread, and the
words that tell a learner where it stands (``RunSnapshot.progress_text``, ``queue_text``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlm_core.jobs.forecasts import QueueForecast
from mlm_core.training import Curves, curves_table

QUEUED, RUNNING, DONE, STOPPED, ERROR = "queued", "running", "done", "stopped", "error"
FINISHED = (DONE, STOPPED, ERROR)
SLOW_STEP_S = 20.0  # a step or evaluation that runs this long is said to be slow on the progress bar


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

