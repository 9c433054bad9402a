"""P7: the Training page's default run visibly teaches within a minute (issue 15).

Exactly what a learner gets by pressing Start with every setting left alone: the bundled default
model fine-tuned on the gazetteer of Veldoria (`mlm_core.lessons.training_view.default_run`), through
the page's own path (`jobs.RunManager.submit` → the run's thread → `training.train_variants`), with
the torch thread count the server uses (`jobs.default_threads()`: half the cores).

Targets:
- learning (do not depend on the machine's load): the held-out loss falls by at least 1 nat from
  step 0 to the end, and at least 3 of the 5 probes change their top-1 guess to the right word;
- timing (median of 3 runs, load average recorded before and after each): the first curve point
  (the held-out loss at step 0) and the first training-loss point come at most 5 s after Start,
  and the run ends within 90 s.

The table is the median run's curve: held-out loss, [MASK]-only loss and probes right against the
seconds since Start, so RESULTS.md shows when the learning becomes visible.

Run: ``python -m benchmarks.p7_visible_learning`` (``--quick`` for a 10-step smoke run).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Any

from benchmarks._common import Result, Target, cli, median

import torch  # noqa: E402

from mlm_core import jobs  # noqa: E402
from mlm_core.lessons.training_view import default_run, probes_right  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.precision import resolve_amp  # noqa: E402
from mlm_core.training import train_variants  # noqa: E402

LOSS_DROP = 1.0  # nats
PROBES_RIGHT = 3
FIRST_POINT_S = 5.0
RUN_S = 90.0


def _one_run(model, tokenizer, texts, variants, threads: int) -> dict[str, Any]:
    """One run through the page's path; the time of every event since Start."""
    events: list[tuple[float, Any]] = []
    start: list[float] = []

    def timed(*args, on_event, **kwargs):
        def record(event):
            events.append((time.perf_counter() - start[0], event))
            on_event(event)
        return train_variants(*args, on_event=record, **kwargs)

    manager = jobs.RunManager(max_runs=1, watchdog=False, train_fn=timed, threads=threads, max_run_s=3600)
    load_before = os.getloadavg()
    start.append(time.perf_counter())
    run = manager.submit(model, tokenizer, texts.train, variants, eval_texts=texts.held_out, label="P7")
    run.wait()
    total = time.perf_counter() - start[0]
    load_after = os.getloadavg()
    snap = run.snapshot()
    if snap.status != "done":
        raise RuntimeError(f"the default run did not finish: {snap.status} {snap.error or snap.message}")
    (name, curves), = snap.variants.items()
    norms = [e.values.get("grad_norm") for _, e in events if e.kind == "step"]
    norms = [n for n in norms if n is not None]
    clip = next(iter(variants.values())).max_grad_norm
    first_eval = next(t for t, e in events if e.kind == "eval")
    first_step = next(t for t, e in events if e.kind == "step")
    eval_times = {e.step: t for t, e in events if e.kind == "eval"}
    return {"total_s": total, "first_eval_s": first_eval, "first_step_s": first_step, "curves": curves,
            "grad_norm_max": max(norms), "grad_norm_median": median(norms),
            "clipped": sum(n > clip for n in norms) if clip else 0,
            "eval_times": eval_times, "load": (tuple(round(x, 2) for x in load_before),
                                                tuple(round(x, 2) for x in load_after))}


def _learning(run: dict[str, Any]) -> dict[str, Any]:
    curves = run["curves"]
    first, last = curves.evals[0], curves.evals[-1]
    before = {p["text"]: p["predictions"][0] for p in curves.probes[0]["probes"]}
    after = {p["text"]: p["predictions"][0] for p in curves.probes[-1]["probes"]}
    changed_right = [text for text, pred in after.items()
                     if pred["tokens"][0] == pred["answer"] and before[text]["tokens"][0] != pred["answer"]]
    rows = []
    visible_probes = visible_loss = None
    for ev, probes in zip(curves.evals, curves.probes):
        right, known = probes_right(probes)
        t = run["eval_times"].get(ev["step"])
        if visible_probes is None and right >= PROBES_RIGHT:
            visible_probes = t
        if visible_loss is None and ev["loss"] <= first["loss"] - LOSS_DROP:
            visible_loss = t
        rows.append({"step": ev["step"], "seconds since Start": t, "held-out loss": ev["loss"],
                     "[MASK]-only loss": ev.get("mask_loss"), "probes right": f"{right} of {known}"})
    return {"drop": first["loss"] - last["loss"], "loss_start": first["loss"], "loss_end": last["loss"],
            "focus_start": first.get("focus_loss"), "focus_end": last.get("focus_loss"),
            "changed_right": changed_right, "n_probes": len(after), "rows": rows,
            "visible_probes_s": visible_probes, "visible_loss_s": visible_loss,
            "before": {t: p["tokens"][0] for t, p in before.items()},
            "after": {t: p["tokens"][0] for t, p in after.items()}}


def run(quick: bool = False, repeats: int = 3) -> Result:
    threads = jobs.default_threads()
    before_threads = torch.get_num_threads()
    model, tokenizer = load_masked_lm(None, device="cpu")  # the page has it cached before Start
    texts, variants = default_run(model_is_trained=True)
    if quick:
        repeats = 1
        variants = {name: replace(cfg, steps=10, eval_every=5) for name, cfg in variants.items()}
    try:
        jobs.cap_threads(threads)
        runs = [_one_run(model, tokenizer, texts, variants, threads) for _ in range(max(1, repeats))]
    finally:
        torch.set_num_threads(before_threads)
    totals = [r["total_s"] for r in runs]
    order = sorted(range(len(runs)), key=lambda i: totals[i])
    mid = runs[order[len(order) // 2]]  # the median run (by total time)
    learned = [_learning(r) for r in runs]
    lm = learned[order[len(order) // 2]]
    cfg = next(iter(variants.values()))
    firsts = ", ".join(f"{r['first_eval_s']:.2f}" for r in runs)
    first_steps = ", ".join(f"{r['first_step_s']:.2f}" for r in runs)
    loads = "; ".join(f"{r['load'][0]} → {r['load'][1]}" for r in runs)
    notes = [
        f"Runs: {len(runs)}; total seconds {', '.join(f'{t:.1f}' for t in totals)}; first curve point "
        f"{firsts} s; first training-loss point {first_steps} s; load average (1, 5, 15 min) before → after "
        f"{loads}.",
        "Gradient norm (healthy run, before clipping): median "
        + ", ".join(f"{r['grad_norm_median']:.1f}" for r in runs) + "; largest "
        + ", ".join(f"{r['grad_norm_max']:.1f}" for r in runs) + f"; steps clipped at {cfg.max_grad_norm:g}: "
        + ", ".join(str(r["clipped"]) for r in runs) + ".",
        f"Held-out loss {lm['loss_start']:.3f} → {lm['loss_end']:.3f} (every run: "
        + ", ".join(f"{x['loss_start']:.3f} → {x['loss_end']:.3f}" for x in learned) + ").",
        "Held-out loss at the facts' words alone (the positions hiding one of the gazetteer's 15 answers; most "
        "of the fall over every position is the model learning to spell 'Veldoria'): "
        + ", ".join(f"{x['focus_start']:.2f} → {x['focus_end']:.2f}" for x in learned
                    if x["focus_start"] is not None) + ".",
        "Probes, top-1 before → after: " + "; ".join(f"\"{t}\" {lm['before'][t]} → {lm['after'][t]}"
                                                      for t in lm["after"]) + ".",
        f"Learning visible (median run): held-out loss 1 nat below its start at "
        f"{lm['visible_loss_s'] if lm['visible_loss_s'] is None else round(lm['visible_loss_s'], 1)} s, "
        f"{PROBES_RIGHT}+ probes right at "
        f"{lm['visible_probes_s'] if lm['visible_probes_s'] is None else round(lm['visible_probes_s'], 1)} s "
        "after Start.",
    ]
    worst_drop = min(x["drop"] for x in learned)
    worst_right = min(len(x["changed_right"]) for x in learned)
    targets = [
        Target("P7 held-out loss fall (nats), every run", worst_drop, ">=", LOSS_DROP, unit="nats"),
        Target("P7 probes whose top-1 changed to the right word, every run", worst_right, ">=", PROBES_RIGHT,
               unit=f"of {lm['n_probes']}"),
        Target("P7 first curve point after Start (median)", median([r["first_eval_s"] for r in runs]), "<=",
               FIRST_POINT_S, unit="s", note="the held-out loss at step 0"),
        Target("P7 first training-loss point after Start (median)", median([r["first_step_s"] for r in runs]),
               "<=", FIRST_POINT_S, unit="s"),
        Target("P7 default run, Start to done (median)", median(totals), "<=", RUN_S, unit="s",
               note=f"median of {len(runs)}"),
    ]
    if quick:
        notes.insert(0, "QUICK smoke run: 10 steps, 1 run; the targets are not meant to be met.")
    return Result(
        name="p7_visible_learning",
        title="P7 — the default Training run visibly teaches within a minute",
        config={"quick": quick, "model": "bundled default", "texts": texts.name, "variants": list(variants),
                "steps": cfg.steps, "batch_size": cfg.batch_size, "seq_len": cfg.seq_len,
                "learning_rate": cfg.learning_rate, "warmup_steps": cfg.warmup_steps,
                "max_grad_norm": cfg.max_grad_norm, "eval_every": cfg.eval_every,
                "amp": f"{cfg.amp} → {resolve_amp(cfg.amp, 'cpu')}" if cfg.amp == "auto" else cfg.amp,
                "runs": len(runs), "threads": threads},
        rows=lm["rows"],
        columns=["step", "seconds since Start", "held-out loss", "[MASK]-only loss", "probes right"],
        targets=targets,
        notes=notes,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
