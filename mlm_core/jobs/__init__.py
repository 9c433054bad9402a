"""Training runs for a UI: a background thread per run, a snapshot to draw, caps on what runs.

One idea per module, in the order a run meets them:

- ``limits``: the server's limits, each an environment variable (runs at once, tokens per step, seconds,
  memory and torch threads per run; ``cap_threads``)
- ``refusals``: why a run is refused before it starts (a step too big, a run that would hold too much memory)
- ``forecasts``: how long a run has left and when a queued run starts, from measured times
- ``snapshot``: a run as a page sees it (``RunSnapshot``) and the words that tell a learner where it stands
- ``run``: one run (``Run``): its thread, its event log, its stop switch
- ``manager``: the server's runs (``RunManager``, ``get_manager``): the cap, the queue, one run per client,
  the teacher's view and the watchdog

The names below are the ones callers use (``from mlm_core.jobs import get_manager``, ``jobs.RunManager``).
"""

from mlm_core.jobs.forecasts import PACE_STEPS, Forecast, QueueForecast, eval_points, forecast, queue_forecast
from mlm_core.jobs.limits import (
    CHECKPOINTING_TOKEN_FACTOR,
    DEFAULT_ABANDON_S,
    DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_RUN_S,
    DEFAULT_MAX_STEP_TOKENS,
    DEFAULT_RUN_MB,
    available_cores,
    cap_threads,
    default_abandon_s,
    default_max_run_s,
    default_max_runs,
    default_max_step_tokens,
    default_run_bytes,
    default_threads,
)
from mlm_core.jobs.manager import TRIM_EVERY_S, BusyError, RunManager, get_manager
from mlm_core.jobs.refusals import run_memory_problem, step_tokens_problem
from mlm_core.jobs.run import Run, TrainFn
from mlm_core.jobs.snapshot import (
    DONE,
    ERROR,
    FINISHED,
    QUEUED,
    RUNNING,
    SLOW_STEP_S,
    STOPPED,
    RunSnapshot,
    queue_text,
)

__all__ = [
    "BusyError", "CHECKPOINTING_TOKEN_FACTOR", "DEFAULT_ABANDON_S", "DEFAULT_MAX_QUEUE", "DEFAULT_MAX_RUN_S",
    "DEFAULT_MAX_STEP_TOKENS", "DEFAULT_RUN_MB", "DONE", "ERROR", "FINISHED", "Forecast", "PACE_STEPS", "QUEUED",
    "QueueForecast", "RUNNING", "Run", "RunManager", "RunSnapshot", "SLOW_STEP_S", "STOPPED", "TRIM_EVERY_S",
    "TrainFn", "available_cores", "cap_threads", "default_abandon_s", "default_max_run_s", "default_max_runs",
    "default_max_step_tokens", "default_run_bytes", "default_threads", "eval_points", "forecast",
    "get_manager", "queue_forecast", "queue_text", "run_memory_problem", "step_tokens_problem",
]
