"""P7, the three lessons of issue 27: each lesson's default run finishes within 90 s, and what it showed.

Each lesson's run is what a learner gets by choosing the lesson and pressing Start with every other setting
left alone (the bundled default model, the gazetteer of Veldoria), built by the page's own view-model
(`training_view.base_config` / `lesson_variants`) and run through the page's path (`jobs.RunManager.submit` →
the run's thread → `training.train_variants`) with the server's torch thread count (`jobs.default_threads()`:
half the cores, 1 on this 2-core machine). Three seeds each (1, 2, 3: the sidebar's seed), none of them the page's
default 0, so the spread a learner's default run is set beside does not contain that run (issue 43 §4.5); the
times are the median and the range; what each lesson showed is given for every seed and its median.

- "Should you mask 15%?": 15%, 30% and 40% on one frozen 15% eval mask; the lead of the best rate over 15%
  (its smallest and largest over the seeds is the run-to-run spread the page's sentence quotes,
  `training_lessons.RATE_LEAD_SPREAD`), for the bundled model and for the tiny model from scratch.
- "Bugs that train": the default bug's twin (timed), and every other bug's twin (what each showed).
- "The guess over time": the facts lesson, shorter, an evaluation every 5 steps; when each question in new
  words first became the first guess.

Run: ``python -m benchmarks.p7_lessons`` (``--quick``: 6 steps, 1 seed).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace
from typing import Any

from benchmarks._common import Result, Target, cli, median

import torch  # noqa: E402

from mlm_core import jobs  # noqa: E402
from mlm_core.lessons import training_lessons  # noqa: E402
from mlm_core.lessons.training_lessons import (CLEAN, DEFAULT_BUG, SPREAD_PAIR, TRAINED_BUGS, TWIN,  # noqa: E402
                                               bug_signature, filmstrip_frames, filmstrip_summary, rate_verdict)
from mlm_core.lessons.training_view import gazetteer_texts, probe_race_rows, usable_probes  # noqa: E402
from mlm_core.lessons.training_registry import base_config, lesson_variants  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.training import train_variants  # noqa: E402

RUN_S = 90.0
SEEDS = (1, 2, 3)  # not the page's default seed (0): the spread must not contain the run it is compared with


def _run(model, tokenizer, lesson: str, seed: int, threads: int, *, from_scratch: bool = False,
         quick: bool = False, **choices) -> dict[str, Any]:
    texts = usable_probes(gazetteer_texts(from_scratch), tokenizer)
    base = base_config(lesson, from_scratch=from_scratch, texts=texts, seed=seed)
    if quick:
        base = replace(base, steps=6, eval_every=3)
    variants = lesson_variants(lesson, base, from_scratch=from_scratch, **choices)
    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=train_variants, threads=threads, max_run_s=3600)
    load_before = os.getloadavg()
    start = time.perf_counter()
    run = manager.submit(model, tokenizer, texts.train, variants, eval_texts=texts.held_out, label="P7 lessons")
    run.wait()
    total = time.perf_counter() - start
    snap = run.snapshot()
    if snap.status != "done":
        raise RuntimeError(f"{lesson} did not finish: {snap.status} {snap.error or snap.message}")
    return {"total_s": total, "variants": snap.variants, "steps": base.steps, "eval_every": base.eval_every,
            "load": (tuple(round(x, 2) for x in load_before), tuple(round(x, 2) for x in os.getloadavg()))}


def _tail(rows, window=10):
    values = [r["loss"] for r in rows if r.get("loss") is not None][-window:]
    return sum(values) / len(values)


def _spread(values) -> str:
    return f"{median(values):.2f} (range {min(values):.2f} to {max(values):.2f})"


def run(quick: bool = False) -> Result:
    threads = jobs.default_threads()
    before_threads = torch.get_num_threads()
    seeds = SEEDS[:1] if quick else SEEDS
    model, tokenizer = load_masked_lm(None, device="cpu")
    tiny, tiny_tok = load_masked_lm("tiny-random", device="cpu")
    rows, notes, targets = [], [], []
    rate_spread: dict[str, Any] = {}
    try:
        jobs.cap_threads(threads)
        # ---------------------------------------------------------------- 1. the masking rate
        for kind, (m, tok, scratch) in {"fine-tune": (model, tokenizer, False),
                                         "scratch": (tiny, tiny_tok, True)}.items():
            runs = [_run(m, tok, "mask_rate", s, threads, from_scratch=scratch, quick=quick) for s in seeds]
            finals = [{n: c.evals[-1]["loss"] for n, c in r["variants"].items()} for r in runs]
            leads = [min(f, key=f.get) for f in finals]
            gaps = [f["mask 15%"] - f[lead] for f, lead in zip(finals, leads)]
            times = [r["total_s"] for r in runs]
            mid = sorted(range(len(runs)), key=lambda i: gaps[i])[len(runs) // 2]
            evals = {n: c.evals for n, c in runs[mid]["variants"].items()}
            label = "bundled model, fine-tuned" if kind == "fine-tune" else "tiny model from scratch"
            rows.append({"lesson": f"Should you mask 15%? ({label})", "steps": runs[0]["steps"],
                         "Start to done (s)": _spread(times),
                         "what it showed (median of the seeds)":
                             f"leader on the frozen 15% mask: {', '.join(leads)}; its lead over 15%: {_spread(gaps)} "
                             "nats; final frozen-mask losses "
                             + "; ".join(f"{n} {_spread([f[n] for f in finals])}" for n in finals[0])})
            high, low = SPREAD_PAIR
            below = [f[low] - f[high] for f in finals]  # how far 40% ended below 15%, seed by seed
            spread = (round(min(below), 2), round(max(below), 2), len(below), sum(lead == high for lead in leads))
            rate_spread[kind] = {"spread": list(spread), "below_by_seed": [round(b, 4) for b in below],
                                 "leaders": leads, "final_losses": finals}
            training_lessons.RATE_LEAD_SPREAD[kind] = spread  # the sentence below quotes this run's spread
            notes.append(f"RATE_LEAD_SPREAD[{kind!r}] = {spread} (training_lessons.RATE_LEAD_SPREAD must equal it)")
            notes.append(f"Masking rate, {label}, every seed: " + "; ".join(
                f"seed {s}: " + ", ".join(f"{n} {v:.3f}" for n, v in f.items()) + f" ({t:.1f} s, load "
                f"{r['load'][0]} → {r['load'][1]})" for s, f, t, r in zip(seeds, finals, times, runs))
                + f". The page says (median seed): {rate_verdict(evals, kind)}")
            notes.append(f"Masking rate, {label}, probes at the end (median seed): " + "; ".join(
                f"{row['variant']}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k not in ('variant', 'step'))
                for row in probe_race_rows({n: c.probes for n, c in runs[mid]["variants"].items()})))
            if kind == "fine-tune":
                targets.append(Target("P7 lesson 'Should you mask 15%?', Start to done (median)", median(times), "<=",
                                      RUN_S, unit="s", note=f"median of {len(times)} seeds, 3 model copies"))
        # ---------------------------------------------------------------- 2. bugs that train
        for bug in TRAINED_BUGS:
            runs = [_run(model, tokenizer, "bugs", s, threads, quick=quick, bug=bug) for s in seeds]
            times = [r["total_s"] for r in runs]
            c_train = [_tail(r["variants"][CLEAN].steps) for r in runs]
            t_train = [_tail(r["variants"][TWIN].steps) for r in runs]
            c_held = [r["variants"][CLEAN].evals[-1]["loss"] for r in runs]
            t_held = [r["variants"][TWIN].evals[-1]["loss"] for r in runs]
            showed = (f"training loss (last 10 steps) clean {_spread(c_train)}, twin {_spread(t_train)}; held-out "
                      f"on the frozen mask clean {_spread(c_held)}, twin {_spread(t_held)}")
            reported = [[e["reported_loss"] - e["loss"] for e in r["variants"][TWIN].evals if "reported_loss" in e]
                        for r in runs]
            if any(reported):
                flat = [g for gs in reported for g in gs]
                showed += (f"; what the buggy evaluation reports minus the frozen loss, over every evaluation of "
                           f"every seed: {min(flat):+.2f} to {max(flat):+.2f} (mean {statistics.fmean(flat):+.2f})")
            mid = sorted(range(len(runs)), key=lambda i: times[i])[len(runs) // 2]
            r = runs[mid]
            sentence = bug_signature(bug, {n: c.steps for n, c in r["variants"].items()},
                                     {n: c.evals for n, c in r["variants"].items()})
            rows.append({"lesson": f"Bugs that train: {TRAINED_BUGS[bug].title}", "steps": r["steps"],
                         "Start to done (s)": _spread(times), "what it showed (median of the seeds)": showed})
            notes.append(f"Bug {bug}: the page says (median seed): {sentence}")
            if bug == DEFAULT_BUG:
                targets.append(Target("P7 lesson 'Bugs that train' (default bug), Start to done (median)",
                                      median(times), "<=", RUN_S, unit="s",
                                      note=f"median of {len(times)} seeds, 2 model copies"))
        # ---------------------------------------------------------------- 3. the guess over time
        runs = [_run(model, tokenizer, "filmstrip", s, threads, quick=quick) for s in seeds]
        times = [r["total_s"] for r in runs]
        firsts: dict[str, list[int | None]] = {}
        summaries = []
        for r in runs:
            (name, curves), = r["variants"].items()
            probes = curves.probes
            for i, probe in enumerate(probes[-1]["probes"]):
                if probe.get("group") != "new":
                    continue
                frames = filmstrip_frames(probes, i)
                top = next((int(f.label) for f in frames if f.answer_rank == 1), None)
                firsts.setdefault(probe["text"], []).append(top)
                if r is runs[0] and len(summaries) < 3:
                    summaries.append(filmstrip_summary(frames))
        reached = [statistics.median([t for t in v if t is not None]) for v in firsts.values()
                   if all(t is not None for t in v)]
        rows.append({"lesson": "The guess over time (the facts lesson, an evaluation every 5 steps)",
                     "steps": runs[0]["steps"], "Start to done (s)": _spread(times),
                     "what it showed (median of the seeds)":
                         f"{len(reached)} of {len(firsts)} questions in new words became the first guess in every "
                         f"seed; the median step at which they first did: "
                         f"{statistics.median(reached) if reached else '–'}"})
        notes.append("The guess over time, first step at which each question in new words became the first guess, "
                     "seeds 0, 1, 2: " + "; ".join(f"\"{t}\" {v}" for t, v in firsts.items()))
        notes.append("What the page says, seed 0, the first three questions: " + " ".join(summaries))
        targets.append(Target("P7 lesson 'The guess over time', Start to done (median)", median(times), "<=", RUN_S,
                              unit="s", note=f"median of {len(times)} seeds"))
    finally:
        torch.set_num_threads(before_threads)
    notes.append(f"Every run: torch threads = {threads} (jobs.default_threads(): half the cores) on "
                 f"{os.cpu_count()} cores; the load average before → after each run is given above: above the core "
                 "count, other work (a background build, other sessions' tests) shared the cores and the times are "
                 "pessimistic.")
    if quick:
        notes.insert(0, "QUICK smoke run: 6 steps, 1 seed; the targets are not meant to be met.")
    return Result(name="p7_lessons", title="P7, the three lessons of issue 27 — each finishes within 90 s, and what it showed",
                  config={"quick": quick, "rate_lead_spread": rate_spread, "model": "bundled default (and the tiny model from scratch for the masking "
                          "rate's second row)", "texts": "Veldoria gazetteer", "seeds": list(seeds), "threads": threads},
                  rows=rows, columns=["lesson", "steps", "Start to done (s)", "what it showed (median of the seeds)"],
                  targets=targets, notes=notes)


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
