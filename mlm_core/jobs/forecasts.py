"""How long a run has left and when a queued run starts, from measured step and evaluation times.

A running run's time left is its recent step time x the steps left plus its measured evaluation time x
the evaluations left, and never runs past the time cap (``forecast``: then it says at which step the cap
will stop it); a queued run is told its place, when it should start (and at the latest, if every run
ahead uses its full time) and what it will get (``queue_forecast``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

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
