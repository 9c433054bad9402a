"""What a run reports: `TrainEvent`s as they happen, a `TrainResult` at the end, and the helpers
that turn recorded curves into smoothed lines and CSV rows."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from mlm_core.errors import InputError
from mlm_core.training.config import TrainConfig

EVENT_KINDS = ("step", "eval", "probe", "done", "error")


@dataclass(frozen=True)
class TrainEvent:
    """One thing that happened in a run, sent to `on_event` as it happens.

    kind "step": values has loss, grad_norm, lr, tokens_per_s, masked_tokens, tokens, elapsed_s.
    kind "eval": loss, mlm_perplexity (exp(loss): over every selected position, as Hugging Face's
    run_mlm.py reports perplexity), mask_loss (at the [MASK] positions alone), focus_loss (at the
    positions whose hidden word is one of `eval_focus_words`; None without them), top1, top5,
    masked_tokens, and per bucket `<bucket>_top1` etc., all on the run's frozen evaluation mask; a variant
    with an evaluation bug (training.bugs) adds reported_loss and reported_mask_loss, what its buggy
    evaluation reports.
    kind "probe": values["probes"], one dict per probe sentence (text, positions with top-k, and the
    hidden word's probability and rank when it is known).
    kind "done": the variant's summary; kind "error": values["message"].
    """

    kind: str
    variant: str
    step: int
    total_steps: int
    values: dict[str, Any]
    time: float = field(default_factory=time.time)


@dataclass
class Curves:
    """Every curve one variant has recorded: a row per step, per evaluation and per probe pass.

    ``record`` is the one place an event becomes a row: the loop records into its `TrainResult`
    and a UI run (`jobs.Run`) records the same events into its own `Curves`, so the two never drift.

    >>> c = Curves("run")
    >>> c.record(TrainEvent("step", "run", 1, 2, {"step": 1, "loss": 3.0}))
    >>> c.record(TrainEvent("eval", "run", 1, 2, {"loss": 2.5}))
    >>> c.steps, c.evals, c.final
    ([{'step': 1, 'loss': 3.0}], [{'step': 1, 'loss': 2.5}], None)
    """

    name: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # one row per optimizer step
    evals: list[dict[str, Any]] = field(default_factory=list)  # one row per evaluation
    probes: list[dict[str, Any]] = field(default_factory=list)  # {"step", "probes": [...]}
    final: dict[str, Any] | None = None  # the "done" event's summary, once the variant is done

    def record(self, event: TrainEvent) -> None:
        """Add what one event reports ("error" events carry no curve: the caller keeps the message)."""
        if event.kind == "step":
            self.steps.append(dict(event.values))
        elif event.kind == "eval":
            self.evals.append({"step": event.step, **event.values})
        elif event.kind == "probe":
            self.probes.append({"step": event.step, **event.values})
        elif event.kind == "done":
            self.final = dict(event.values)

    def results_row(self, max_grad_norm: float | None = None) -> dict[str, Any]:
        """The variant's row of the Training page's results table (and its lesson export): the last
        step's training loss, the held-out numbers at the first and the last evaluation (the frozen
        mask), the steps whose gradient norm went over ``max_grad_norm``, and speed.

        >>> c = Curves("run", steps=[{"step": 1, "loss": 3.0, "grad_norm": 2.0, "elapsed_s": 1.5}],
        ...            evals=[{"step": 0, "loss": 4.0}, {"step": 1, "loss": 2.5, "top1": 0.5}])
        >>> row = c.results_row(max_grad_norm=1.0)
        >>> row["train loss (last step)"], row["held-out loss at start"], row["held-out loss"], row["steps clipped"]
        (3.0, 4.0, 2.5, 1)
        """
        last = self.last_step()
        first_eval, last_eval = (self.evals[0], self.evals[-1]) if self.evals else ({}, {})
        norms = [r["grad_norm"] for r in self.steps if r.get("grad_norm") is not None]
        final = self.final or {}
        return {"variant": self.name, "steps": len(self.steps), "train loss (last step)": last.get("loss"),
                "held-out loss at start": first_eval.get("loss"), "held-out loss": last_eval.get("loss"),
                "[MASK]-only loss": last_eval.get("mask_loss"),
                "facts' words at start": first_eval.get("focus_loss"), "facts' words": last_eval.get("focus_loss"),
                "MLM perplexity": last_eval.get("mlm_perplexity"),
                "top-1": last_eval.get("top1"), "top-5": last_eval.get("top5"),
                "steps clipped": sum(n > max_grad_norm for n in norms) if max_grad_norm else 0,
                "tokens/s": final.get("tokens_per_s") or last.get("tokens_per_s"),
                "wall time (s)": final.get("wall_time_s") or last.get("elapsed_s")}

    def last_step(self) -> dict[str, Any]:
        """The latest step that has a loss (a skipped step, with nothing selected, has none)."""
        return next((r for r in reversed(self.steps) if r.get("loss") is not None), {})

    def copy(self) -> Curves:
        """A copy whose lists the caller may keep and change (the rows themselves are shared)."""
        return Curves(self.name, list(self.steps), list(self.evals), list(self.probes),
                      dict(self.final) if self.final else None)


@dataclass
class TrainResult(Curves):
    """What a run recorded (its `Curves`), kept even when it was stopped early, and its trained copy."""

    config: TrainConfig | None = None
    steps_done: int = 0
    stopped: bool = False
    wall_time_s: float = 0.0
    train_time_s: float = 0.0  # time in training steps only, without evaluation
    tokens_seen: int = 0
    eval_on_train: bool = False  # True when the corpus was too small to hold any chunk out
    model: nn.Module | None = None  # the trained copy (the base model is never touched)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_seen / self.train_time_s if self.train_time_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The run's end in machine names: the "done" event's values and the CLI's summary (the page's
        table, with labels for a learner, is `Curves.results_row`)."""
        last_step = self.last_step()
        last_eval = self.evals[-1] if self.evals else {}
        return {
            "variant": self.name,
            "steps": self.steps_done,
            "stopped": self.stopped,
            "final_loss": last_step.get("loss"),
            "eval_loss": last_eval.get("loss"),
            "eval_mlm_perplexity": last_eval.get("mlm_perplexity"),
            "eval_mask_loss": last_eval.get("mask_loss"),
            "eval_focus_loss": last_eval.get("focus_loss"),
            "eval_top1": last_eval.get("top1"),
            "eval_top5": last_eval.get("top5"),
            "tokens_per_s": self.tokens_per_s,
            "wall_time_s": self.wall_time_s,
        }


def smooth(values: Sequence[float | None], weight: float = 0.8) -> list[float | None]:
    """Exponential moving average with TensorBoard's debiasing; gaps (None, NaN, inf) stay gaps.

    TensorBoard's ``avg = weight * avg + (1 - weight) * v``, divided by ``1 - weight ** n``, is
    pandas' ``ewm(alpha=1 - weight, adjust=True).mean()`` over the finite values: the weighted mean
    of the values so far, the latest weighing 1, the one before ``weight``, and so on.

    >>> [None if v is None else round(v, 4) for v in smooth([1.0, 3.0, None, 5.0], weight=0.5)]
    [1.0, 2.3333, None, 3.8571]
    """
    if not 0.0 <= weight < 1.0:
        raise InputError("The smoothing weight must be at least 0 and below 1.")
    finite = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    out: list[float | None] = [None] * len(values)
    if finite:
        # pandas only here: the default-model build imports mlm_core.training on a GPU machine that has
        # torch and transformers but no pandas (docs/gpu_build.md), and never smooths a curve there.
        import pandas as pd

        averaged = pd.Series([float(values[i]) for i in finite]).ewm(alpha=1.0 - weight, adjust=True).mean()
        for i, v in zip(finite, averaged.tolist()):
            out[i] = v
    return out


def curves_table(results: Mapping[str, Curves] | Sequence[Curves]) -> list[dict[str, Any]]:
    """Every curve of every variant (`TrainResult`s or a UI run's `Curves`) as flat rows (variant,
    kind, step, metric columns), for a table or a CSV."""
    items = results.values() if isinstance(results, Mapping) else results
    rows: list[dict[str, Any]] = []
    for res in items:
        for r in res.steps:
            rows.append({"variant": res.name, "kind": "step", **r})
        for r in res.evals:
            rows.append({"variant": res.name, "kind": "eval", **r})
    return rows
