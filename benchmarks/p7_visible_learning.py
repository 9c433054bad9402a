"""P7: the Training page's default run visibly teaches within a minute (issues 15, 25).

Exactly what a learner gets by pressing Start with every setting left alone: the bundled default
model fine-tuned on the gazetteer of Veldoria (`mlm_core.lessons.training_view.default_run`), through
the page's own path (`jobs.RunManager.submit` → the run's thread → `training.train_variants`), with
the torch thread count the server uses (`jobs.default_threads()`: half the cores).

Three runs, at the page's default seed (0) and at two more fixed in advance (1, 2): a claim of learning must
hold at seeds nobody chose. Targets (issue 43):
- learning (do not depend on the machine's load), every seed: the held-out loss falls by at least 1 nat from
  step 0 to the end; binding (``training_view.binding``: the questions in new words answered first about
  Veldoria, minus the same questions about Pellastra, a country no training text names, given Veldoria's word
  first) reaches at least 8 of 15; at most 3 of the 15 questions about real countries get a Veldoria word first,
  and the real answers the model knew at step 0 are reported with how many it still knows. The questions in new
  words, the phrases it read and the other name are reported beside them;
- timing (median of the 3 runs, load average recorded before and after each): the first curve point
  (the held-out loss at step 0) and the first training-loss point come at most 5 s after Start,
  and the run ends within 150 s: issue 43 allows 150 s where binding needs more than 90, with the page saying why
  (binding needs the 320 steps: 160 bound about a quarter of the questions on the dev sets; the steps setting's
  explanation says so, and the progress bar counts the 320).

The table is the median run's curve: held-out loss, [MASK]-only loss and each probe set's top-1 / top-5
against the seconds since Start, so RESULTS.md shows when the learning becomes visible.

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
from mlm_core.lessons.training_view import (OTHER, PROBE_SETS, binding, probe_set_scores, probes_in_top,  # noqa: E402
                                            probes_right, strings_or_facts)
from mlm_core.lessons.training_registry import default_run  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.precision import resolve_amp  # noqa: E402
from mlm_core.training import train_variants  # noqa: E402

LOSS_DROP = 1.0  # nats
BINDING_TOP1 = 8  # of 15 questions in new words answered for Veldoria and not for Pellastra (issue 43)
CONTROL_FLIPS = 3  # of 15 questions about real countries given a Veldoria word first, at most
SEEDS = (0, 1, 2)  # the page's default seed and two more, fixed in advance (issue 43)
FIRST_POINT_S = 5.0
RUN_S = 150.0  # issue 43: <= 90 s, or <= 150 s where binding needs more and the page says why


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


REPORTED_SETS = {g: PROBE_SETS[g] for g in ("read", "new", OTHER, "control")}  # the default run's sets


def _learning(run: dict[str, Any]) -> dict[str, Any]:
    curves = run["curves"]
    first, last = curves.evals[0], curves.evals[-1]
    rows = []
    visible_new = visible_loss = None
    for ev, probes in zip(curves.evals, curves.probes):
        t = run["eval_times"].get(ev["step"])
        bound = binding(probe_set_scores([curves.probes[0], probes]))
        if visible_new is None and bound is not None and bound.top1_now >= BINDING_TOP1:
            visible_new = t
        if visible_loss is None and ev["loss"] <= first["loss"] - LOSS_DROP:
            visible_loss = t
        row = {"step": ev["step"], "seconds since Start": t, "held-out loss": ev["loss"],
               "[MASK]-only loss": ev.get("mask_loss")}
        for group, label in REPORTED_SETS.items():
            r1, n = probes_right(probes, group)
            r5, _ = probes_in_top(probes, 5, group)
            row[f"{label.lower()}: top-1 / top-5"] = f"{r1} / {r5} of {n}"
        rows.append(row)
    scores = {s.group: s for s in probe_set_scores(curves.probes)}
    control = [(b["predictions"][0], a["predictions"][0]) for b, a in zip(curves.probes[0]["probes"],
                                                                          curves.probes[-1]["probes"])
               if a.get("group") == "control"]
    known_then = [b["tokens"][0] == b["answer"] for b, _ in control]
    kept = sum(k and a["tokens"][0] == a["answer"] for k, (_, a) in zip(known_then, control))
    near_then = [(b["answer_rank"] or 10**9) <= 5 for b, _ in control]  # the real answer among the first five guesses
    near_kept = sum(k and (a["answer_rank"] or 10**9) <= 5 for k, (_, a) in zip(near_then, control))
    guesses: dict[str, list[str]] = {}
    for before, after in zip(curves.probes[0]["probes"], curves.probes[-1]["probes"]):
        b, a = before["predictions"][0], after["predictions"][0]
        guesses.setdefault(after.get("group", ""), []).append(
            f"\"{after['text']}\" {b['tokens'][0]} → {a['tokens'][0]} (rank {b['answer_rank']} → {a['answer_rank']})")
    return {"drop": first["loss"] - last["loss"], "loss_start": first["loss"], "loss_end": last["loss"],
            "focus_start": first.get("focus_loss"), "focus_end": last.get("focus_loss"), "rows": rows,
            "scores": scores, "sentence": strings_or_facts(list(scores.values())), "guesses": guesses,
            "binding": binding(list(scores.values())), "control_known_then": sum(known_then), "control_kept": kept,
            "control_top5_then": sum(near_then), "control_top5_kept": near_kept,
            "visible_new_s": visible_new, "visible_loss_s": visible_loss}


def run(quick: bool = False, seeds=SEEDS) -> Result:
    threads = jobs.default_threads()
    before_threads = torch.get_num_threads()
    model, tokenizer = load_masked_lm(None, device="cpu")  # the page has it cached before Start
    texts, variants = default_run(model_is_trained=True)
    if quick:
        seeds = seeds[:1]
        variants = {name: replace(cfg, steps=10, eval_every=5) for name, cfg in variants.items()}
    try:
        jobs.cap_threads(threads)
        runs = [_one_run(model, tokenizer, texts, {name: replace(cfg, seed=seed) for name, cfg in variants.items()},
                         threads) for seed in seeds]
    finally:
        torch.set_num_threads(before_threads)
    totals = [r["total_s"] for r in runs]
    order = sorted(range(len(runs)), key=lambda i: totals[i])
    learned = [_learning(r) for r in runs]
    lm = learned[order[len(order) // 2]]  # the median run (by total time)
    cfg = next(iter(variants.values()))
    firsts = ", ".join(f"{r['first_eval_s']:.2f}" for r in runs)
    first_steps = ", ".join(f"{r['first_step_s']:.2f}" for r in runs)
    loads = "; ".join(f"{r['load'][0]} → {r['load'][1]}" for r in runs)
    notes = [
        f"Runs: {len(runs)}, at seeds {', '.join(map(str, seeds))}; total seconds {', '.join(f'{t:.1f}' for t in totals)}; first curve point "
        f"{firsts} s; first training-loss point {first_steps} s; load average (1, 5, 15 min) before → after "
        f"{loads}.",
        "Gradient norm (healthy run, before clipping): median "
        + ", ".join(f"{r['grad_norm_median']:.1f}" for r in runs) + "; largest "
        + ", ".join(f"{r['grad_norm_max']:.1f}" for r in runs) + f"; steps clipped at {cfg.max_grad_norm:g}: "
        + ", ".join(str(r["clipped"]) for r in runs) + ".",
        f"Held-out loss {lm['loss_start']:.3f} → {lm['loss_end']:.3f} (every run: "
        + ", ".join(f"{x['loss_start']:.3f} → {x['loss_end']:.3f}" for x in learned) + ").",
        "Held-out loss at the facts' words alone (the positions hiding one of the gazetteer's 15 answers; much "
        "of the fall over every position is the model learning to spell 'Veldoria'): "
        + ", ".join(f"{x['focus_start']:.2f} → {x['focus_end']:.2f}" for x in learned
                    if x["focus_start"] is not None) + ".",
        "Every run, top-1 and top-5 from step 0 to the end: " + "; ".join(
            f"run {i + 1}: " + ", ".join(f"{s.label.lower()} {s.top1_then} → {s.top1_now} and {s.top5_then} → "
                                         f"{s.top5_now} of {s.probes}" for s in x["scores"].values())
            for i, x in enumerate(learned)) + ".",
        "Questions in new words (the reported set), first guess before → after: "
        + "; ".join(lm["guesses"].get("new", [])) + ".",
        "Phrases it read, first guess before → after: " + "; ".join(lm["guesses"].get("read", [])) + ".",
        "Other countries (the control set: the same kinds of question about real countries, whose answers are not "
        "Veldoria's), first guess before → after: " + "; ".join(lm["guesses"].get("control", [])) + ".",
        "Other countries, first guesses that are one of Veldoria's answers, step 0 → the end, and the real answers "
        "known at step 0 (first, or in the top 5) still known at the end: " + ", ".join(
            f"seed {seed}: {x['scores']['control'].facts_then} → {x['scores']['control'].facts_now} of "
            f"{x['scores']['control'].probes}, {x['control_kept']} of {x['control_known_then']} still known first and "
            f"{x['control_top5_kept']} of {x['control_top5_then']} in the top 5 still there"
            for seed, x in zip(seeds, learned) if "control" in x["scores"]) + ".",
        "A twin country's word first (an invented answer, not Veldoria's: the binding does not count it, the "
        "control does, issue 43's review), step 0 → the end, about Pellastra and about real countries: " + ", ".join(
            f"seed {seed}: {x['scores'][OTHER].invented_then - x['scores'][OTHER].facts_then} → "
            f"{x['scores'][OTHER].invented_now - x['scores'][OTHER].facts_now} and "
            f"{x['scores']['control'].invented_then - x['scores']['control'].facts_then} → "
            f"{x['scores']['control'].invented_now - x['scores']['control'].facts_now} of "
            f"{x['scores']['control'].probes}" for seed, x in zip(seeds, learned)
            if OTHER in x["scores"] and "control" in x["scores"]) + ".",
        "Another name (the questions in new words about Pellastra, a country no training text names), first guess "
        "before → after: " + "; ".join(lm["guesses"].get(OTHER, [])) + ".",
        "Binding (questions in new words answered first for Veldoria minus those given Veldoria's word for "
        "Pellastra), top-1 and top-5, step 0 → the end: " + ", ".join(
            f"seed {seed}: {x['binding'].top1_then} → {x['binding'].top1_now} and {x['binding'].top5_then} → "
            f"{x['binding'].top5_now} of {x['binding'].probes}" for seed, x in zip(seeds, learned)
            if x["binding"] is not None) + ".",
        f"What the page says at the end (median run): {lm['sentence']}",
        f"Learning visible (median run): held-out loss 1 nat below its start at "
        f"{lm['visible_loss_s'] if lm['visible_loss_s'] is None else round(lm['visible_loss_s'], 1)} s; the questions "
        f"bound to Veldoria at the binding target at "
        f"{lm['visible_new_s'] if lm['visible_new_s'] is None else round(lm['visible_new_s'], 1)} s after Start.",
        "The lesson's recipe (issue 25), chosen on the gazetteer's dev-probes alone: the facts' words are selected "
        f"with probability {cfg.focus_mlm_probability:g} in the training batches (every other token by the rule's "
        f"{cfg.masking.mlm_probability:.0%}), and the training text states each fact in more varied sentences.",
    ]
    worst_drop = min(x["drop"] for x in learned)
    bindings = [x["binding"] for x in learned]
    n_new = bindings[0].probes
    controls = [x["scores"]["control"] for x in learned]
    targets = [
        Target("P7 held-out loss fall (nats), every seed", worst_drop, ">=", LOSS_DROP, unit="nats"),
        Target("P7 binding, top-1, every seed", min(b.top1_now for b in bindings), ">=", BINDING_TOP1,
               unit=f"of {n_new}", note="questions in new words answered for Veldoria and not for Pellastra; "
               + ", ".join(f"seed {seed}: {b.top1_now}" for seed, b in zip(seeds, bindings))),
        Target("P7 questions about real countries given a Veldoria word, every seed", max(c.facts_now for c in controls),
               "<=", CONTROL_FLIPS, unit=f"of {controls[0].probes}",
               note=", ".join(f"seed {seed}: {c.facts_now}" for seed, c in zip(seeds, controls))),
        Target("P7 questions about real countries given an invented country's word (Veldoria's or a twin's), every seed",
               max(c.invented_now for c in controls), "<=", CONTROL_FLIPS, unit=f"of {controls[0].probes}",
               note="what the page's control counts; " + ", ".join(f"seed {seed}: {c.invented_now}"
                                                                  for seed, c in zip(seeds, controls))),
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
                "focus_mlm_probability": cfg.focus_mlm_probability,
                "amp": f"{cfg.amp} → {resolve_amp(cfg.amp, 'cpu')}" if cfg.amp == "auto" else cfg.amp,
                "runs": len(runs), "threads": threads},
        rows=lm["rows"],
        columns=["step", "seconds since Start", "held-out loss", "[MASK]-only loss"]
        + [f"{label.lower()}: top-1 / top-5" for label in REPORTED_SETS.values()],
        targets=targets,
        notes=notes,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
