"""Two students press Start on the default lesson at once (issue 24 §3 item 1).

Both runs go through the Training page's own path (``jobs.RunManager.submit`` with the server's limits:
``MLMLAB_MAX_RUNS`` runs at once, ``MLMLAB_MAX_RUN_S`` seconds each, ``jobs.default_threads()`` torch
threads), the second submitted right after the first, as two clients. Every second a watcher reads both
snapshots, as the page does, and records what a learner is told: the time left and the step the run
will end at (``RunSnapshot.eta_s`` / ``final_step``), and for the queued run its expected and latest
start (``RunSnapshot.queue``). At the end the forecasts are compared with what happened.

Two settings: the server's default (one run at a time on a CPU: the second waits in the queue) and
``--max-runs 2`` (both train at once, sharing the cores).

Targets (forecasts, not speed: a busy machine moves the times, not whether they are told right):
- every run of the default lesson ends all its steps within the time cap, or its forecast said from
  its 10th step on where the cap would stop it (``stops_at_cap``);
- the time left told at the 10th step and at half-way is within 25% of what it really took;
- the queued run's latest start (``start_max_s``) is never earlier than its real start (a bound told
  is a bound kept), and its expected start is within 25% of its real start.

Run: ``python -m benchmarks.two_runs`` (``--max-runs 2``; ``--quick``: 12 steps).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import replace
from typing import Any

from benchmarks._common import Result, Target, report

import torch  # noqa: E402

from mlm_core import jobs  # noqa: E402
from mlm_core.lessons.training_registry import default_run  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.training import check_variants  # noqa: E402

TOLERANCE = 0.25  # a forecast within 25% of what happened


def _watch(runs: dict[str, jobs.Run], t0: float, log: list[dict], stop: threading.Event) -> None:
    while not stop.is_set():
        now = time.perf_counter() - t0
        for name, run in runs.items():
            s = run.snapshot()
            q = s.queue
            log.append({"t": now, "run": name, "status": s.status, "step": s.step, "eta_s": s.eta_s, "step_s": s.step_s,
                        "final_step": s.final_step, "stops_at_cap": s.stops_at_cap,
                        "start_s": q.start_s if q else None, "start_max_s": q.start_max_s if q else None,
                        "text": s.progress_text()})
        stop.wait(1.0)


def _told_at(log: list[dict], name: str, step: int) -> dict | None:
    """The first record of ``name`` at or after ``step`` with a time left."""
    return next((r for r in log if r["run"] == name and r["step"] >= step and r["eta_s"] is not None), None)


def run(quick: bool = False, max_runs: int | None = None) -> Result:
    threads = jobs.default_threads()
    before_threads = torch.get_num_threads()
    model, tokenizer = load_masked_lm(None, device="cpu")  # the server has it cached before Start
    texts, variants = default_run(model_is_trained=True)
    if quick:
        variants = {name: replace(cfg, steps=12, eval_every=5) for name, cfg in variants.items()}
    cfg = check_variants(variants)  # the data settings the variants share: steps, batch, sequence length, ...
    manager = jobs.RunManager(max_runs=max_runs, threads=threads)  # the server's limits (environment), the watchdog on
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    runs: dict[str, jobs.Run] = {}
    log: list[dict] = []
    stop = threading.Event()
    try:
        jobs.cap_threads(threads)
        for name in ("first", "second"):
            runs[name] = manager.submit(model, tokenizer, texts.train, variants, eval_texts=texts.held_out,
                                        label="default lesson", client=name)
        watcher = threading.Thread(target=_watch, args=(runs, t0, log, stop), daemon=True)
        watcher.start()
        while not all(r.status in jobs.FINISHED for r in runs.values()):
            now = time.perf_counter() - t0
            for name, r in runs.items():
                if name not in starts and r.status != jobs.QUEUED:
                    starts[name] = now
                if name not in ends and r.status in jobs.FINISHED:
                    ends[name] = now
            time.sleep(0.05)
        now = time.perf_counter() - t0
        for name in runs:
            ends.setdefault(name, now)
            starts.setdefault(name, now)
    finally:
        stop.set()
        manager.shutdown()
        torch.set_num_threads(before_threads)
    load_after = os.getloadavg()

    rows, targets, notes = [], [], []
    for name, r in runs.items():
        snap = r.snapshot()
        took = ends[name] - starts[name]
        at10 = _told_at(log, name, min(10, cfg.steps))
        half = _told_at(log, name, cfg.steps // 2)
        row = {"run": name, "waited (s)": starts[name], "trained (s)": took, "status": snap.status,
               "steps": f"{snap.step} of {snap.total_steps}", "message": snap.message}
        for label, told in (("at step 10", at10), ("at half-way", half)):
            if told is None:
                continue
            real = ends[name] - told["t"]
            row[f"told {label} (s left)"] = told["eta_s"]
            row[f"really left {label} (s)"] = real
            if told["stops_at_cap"]:
                row[f"told {label}"] = f"the cap stops it near step {told['final_step']}"
            if real > 5:  # a forecast of a few seconds says little as a ratio
                targets.append(Target(f"{name}: time left told {label} / real", told["eta_s"] / real, "<=",
                                      1 + TOLERANCE, unit="×", note=f"and >= {1 - TOLERANCE:.2f}"))
                targets.append(Target(f"{name}: time left told {label} / real (lower)", told["eta_s"] / real, ">=",
                                      1 - TOLERANCE, unit="×"))
        finished_all = snap.step >= snap.total_steps
        warned = at10 is not None and at10["stops_at_cap"]
        targets.append(Target(f"{name}: all steps within the cap, or warned from step 10", float(finished_all or warned),
                              ">=", 1.0, unit="", note=f"{snap.step} of {snap.total_steps} steps, "
                              f"{'warned' if warned else 'not warned'}"))
        queued = [x for x in log if x["run"] == name and x["start_max_s"] is not None]
        if queued:
            first = queued[0]
            row["told when queued: at the latest in (s)"] = first["start_max_s"]
            row["really started after (s)"] = starts[name] - first["t"]
            notes.append(f"{name}, queued, was told first: {first['text']}")
            targets.append(Target(f"{name}: latest start told - real start", first["start_max_s"] - (starts[name] - first["t"]),
                                  ">=", 0.0, unit="s"))
            known = next((x for x in queued if x["start_s"] is not None), None)
            if known is not None:
                real_start = starts[name] - known["t"]
                row["told at"] = known["t"]
                row["told: start in (s)"] = known["start_s"]
                row["really started after that (s)"] = real_start
                notes.append(f"{name}, queued, was told at {known['t']:.0f} s: {known['text']}")
                if real_start > 5:
                    ratio = max(known["start_s"], 1e-9) / real_start
                    targets.append(Target(f"{name}: expected start told / real", ratio, "<=", 1 + TOLERANCE, unit="×"))
                    targets.append(Target(f"{name}: expected start told / real (lower)", ratio, ">=", 1 - TOLERANCE,
                                          unit="×"))
        if at10 is not None:
            notes.append(f"{name} at step {at10['step']} was told: {at10['text']}")
        paces = [(_told_at(log, name, k) or {}).get("step_s") for k in (10, cfg.steps // 2, cfg.steps - 5)]
        notes.append(f"{name}: measured seconds per step at steps 10, {cfg.steps // 2} and {cfg.steps - 5}: "
                     + ", ".join("—" if x is None else f"{x:.2f}" for x in paces)
                     + " (a pace that changes is what a forecast cannot know in advance: the machine's load)")
        rows.append(row)
    notes.insert(0, f"Load average (1, 5, 15 min) before → after: {tuple(round(x, 2) for x in load_before)} → "
                    f"{tuple(round(x, 2) for x in load_after)}; {os.cpu_count()} cores, {threads} torch thread(s) "
                    f"per run, {manager.max_runs} run(s) at once, {manager.max_run_s:.0f} s per run.")
    if quick:
        notes.insert(0, "QUICK smoke run: 12 steps; the targets are not meant to be met.")
    columns = list(dict.fromkeys(k for r in rows for k in r if k != "message"))
    return Result(
        name="two_runs" + ("" if max_runs in (None, 1) else f"_{max_runs}"),
        title=f"Two default runs at once ({manager.max_runs} training slot{'s' if manager.max_runs > 1 else ''})",
        config={"quick": quick, "steps": cfg.steps, "batch_size": cfg.batch_size, "seq_len": cfg.seq_len,
                "eval_every": cfg.eval_every, "max_runs": manager.max_runs, "max_run_s": manager.max_run_s,
                "threads": threads},
        rows=rows, columns=columns, targets=targets, notes=notes,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-runs", type=int, default=None, help="training slots (default: the server's)")
    args = parser.parse_args()
    report(run(quick=args.quick, max_runs=args.max_runs), write=not args.quick)
