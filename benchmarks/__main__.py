"""Run P1–P5, MFU, P7 and the default model's targets (P6 where CUDA is present); write ``benchmarks/RESULTS.md``.

    python -m benchmarks            # the full run (several minutes on a 2-core CPU)
    python -m benchmarks --quick    # small sizes: checks that everything runs (RESULTS.md untouched)
    python -m benchmarks --only p1 p3   # some of them (RESULTS.md untouched)

Every figure is a ratio against a baseline measured in the same run. Each benchmark also writes
``benchmarks/results/<name>.json``. A benchmark that fails is reported as failed in RESULTS.md,
and the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import time
import traceback

from benchmarks._common import (RESULTS_DIR, ROOT, Result, Target, device_name, fmt, machine_info, report, table,
                                target_line, with_unit)

import torch  # noqa: E402

BENCHMARKS = [
    ("p1", "benchmarks.p1_head_loss"),
    ("p2", "benchmarks.p2_train_step"),
    ("p3", "benchmarks.p3_masking"),
    ("p4", "benchmarks.p4_sampled_softmax"),
    ("p5", "benchmarks.p5_app_latency"),
    ("mfu", "benchmarks.mfu"),
    ("p7", "benchmarks.p7_visible_learning"),
    ("p7_lessons", "benchmarks.p7_lessons"),
    ("two_runs", "benchmarks.two_runs"),
    ("default_model", "benchmarks.default_model"),
]
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
DEFAULT_THREADS = 1  # see THREADS below

MISS_NOTES = {
    "P7_LESSONS": "P7's three lessons of issue 27 are timed as a learner gets them on this 2-core machine, one torch "
                  "thread: on a quiet machine (2026-12-02 06:31-06:45 UTC, load 0.4-2.7, the stage-D model) 'Should "
                  "you mask 15%?' took 41 s, the default 'Bugs that train' 42 s and 'The guess over time' 25 s; at a "
                  "load average of 4-8 (other sessions' tests, servers and browsers on top of a background build, "
                  "2026-12-01) the first two took 275 s and 128 s. A miss here means the cores were shared: "
                  "re-measure on a quiet machine before changing the lessons' default steps.",
    "P4": "P4's gradient cosine on the workshop batch: 0.893 against >= 0.9 on the stage-O default model (0.898 on stage G, 0.897 on "
          "stage D; the Veldoria batch's 0.920 and both loss errors, -6.9% and -6.3%, meet their targets). The "
          "estimator and its settings (unigram proposal, no replacement, importance sampling, K = 256) did not "
          "change: the model's hidden states and head did; on the stage-B model the same batch gave 0.931. "
          "docs/lessons.md (Loss) says the cosine half is missed narrowly at some seeds (0.891-0.917 over seeds 0-4).",
    "DEFAULT_MODEL": "Default model (issue 26): BLiMP and unseen top-5 are missed. Over the last four shipped stages "
                     "(B, D, G and O: about 4.8M training tokens on one CPU core, then stage O's 4.1M token positions, G's "
                     "recipe on a 6,500-step schedule, exported at its best dev evaluation, step 4,000) BLiMP stayed level "
                     "within its standard error (69.3%, 68.9%, 69.4%, 69.35%) while unseen top-5 rose from 59.0% "
                     "to 62.6%, so more steps of the same data are not the lever for grammar; stage "
                     "H (the daily-life corpus part 2 at a quarter of each batch, 2,000 steps) raised dev to 0.7295 "
                     "and was measured but not shipped, and so were stages I1, I2, J, K (learning rates doubled), L (halved), M (mailing-list "
                     "e-mail) and N (no WordNet) and a soup of I1 and I2 (2026-12-02/03; BLiMP 68.9%, 69.2%, 69.0% and "
                     "69.5% where measured; docs/lessons.md, "
                     "'Stages tried'); so were eight stages from O (2026-12-04): P (more literary prose), R (Wikipedia "
                     "lead summaries in place of the speeches and the Bible) and T (no learning-rate restart) stayed "
                     "below O's dev score, and so did S, the "
                     "control (O's recipe continued with a new seed, no change: dev 0.699-0.723 against O's 0.7347, the "
                     "best of O's 13 evaluations); Q (Wikipedia lead summaries in place of WordNet) beat it on dev "
                     "(0.7398) but not on the reported sets (BLiMP 68.5%, unseen top-5 61.2%, repeat-answer top-5 59.3% "
                     "against 68.5%); U (the output layer untied and trained) and V (a moving average of the "
                     "weights) stayed below O's dev score, and W (no learning-rate restart with the moving average) "
                     "beat it by 0.0016 (0.7363) with BLiMP 69.9% and unseen top-5 64.8%, but repeat-answer top-5 "
                     "64.8% (35 of 54 against 37): not shipped; X (30% of the tokens selected, 2026-12-04), Y (token-level "
                     "masking, the rule the PLL score's one-token masks match) and Z (4x the tokens per step, batch 64, "
                     "learning rates x2; both 2026-12-06) stayed below O's dev score, and their last weights, measured "
                     "for the record, score 68.7% and 69.5% on BLiMP; AA, W's recipe with a new seed, stayed below O too "
                     "(0.714-0.733), so W's +0.0016 did not replicate, and so did BB (the lower 3 layers frozen) and CC (40% "
                     "of the tokens selected). "
                     "Within one run the dev score moves by about 0.01 from "
                     "one evaluation to the "
                     "next, the size of the differences between stages. What is left is data and "
                     "compute on a scale this 2-core machine does not give: an estimate, not a measurement. The "
                     "reported-only cloze rows compare with the weights the stage started from, measured on that "
                     "stage's own held-out packing; they are not targets.",
    "TWO_RUNS": "Two runs at once (issue 24 §3.1): the queued run's *expected* start was told as about 3 min "
                "and it really started after 108 s (told / real 1.48, the 25% bound missed): at 6 s the "
                "forecast came from the run ahead's first steps (1.5 s a step; it sped up to 1.05 s a step by "
                "step 75 as the machine's load fell from 6.8), and a pace that changes is what a forecast cannot "
                "know in advance. The *latest* start it was told (about 5 min, if the run ahead "
                "uses its full time) was kept, and both runs finished all 80 steps within the 300 s cap. With "
                "`--max-runs 2` (both training at once) every forecast was within 7% "
                "(`benchmarks/results/two_runs_2.json`).",
    "P3": "P3 (masking): ours and Hugging Face's collator are level, within this machine's noise (repeated "
          "runs of P3 alone gave 0.90-1.08× with the trace on), so the ≥ 1.0× target is met in some runs and "
          "missed in others. Before two changes to `mlm_core/masking.py` (11:55), found by profiling, ours was "
          "0.1-0.3× with 2 threads and 0.67-0.8× with one: `allowed[pick]` (advanced indexing with a (B, T) "
          "index) is a parallel kernel that cost ~10 ms whenever the second core was busy "
          "(`allowed.index_select(0, pick.reshape(-1)).view_as(pick)` costs 0.03 ms), and five boolean-mask "
          "assignments each ran a `nonzero` (now `torch.where` / `masked_fill`). What remains is per-call "
          "overhead on a small batch (4,096 tokens): both sides make three uniform draws and one randint; the "
          "trace itself only keeps references to tensors already computed.",
    "MFU": "MFU: the bf16 step's share is reported, not targeted. bf16 makes the matrix multiplies about 2× "
           "faster while dropout, the embedding gradient, AdamW and autocast's casts of the weights stay as they "
           "were, so those take a larger share of a faster step (see the profile rows). The largest is dropout "
           "(6% of the fp32 step, 9% of the bf16 one): drawing its masks (`bernoulli_`) costs about 6 ns per "
           "element on this CPU (one thread), 25× a multiply. The wall-clock figures need a quiet machine; the CPU-time columns (one torch thread) are what a busy machine still measures "
           "reliably.",
    "2 threads": "The 2-thread column: with the second core shared, every parallelised small operation waits "
                 "for it (see Method). That hits the contender with more small operations (the gathered path, "
                 "sampled softmax, our masking) much harder than the one dominated by a few large matrix "
                 "products, so these ratios say more about the machine's load than about the code.",
}

METHOD = """\
## Method

- **One torch thread** (`torch.set_num_threads(1)`) for the headline numbers. This machine's 2
  cores are shared with other work; with 2 threads every parallelised operation waits for the
  busy second core (profiled: a 596×384 by 384×64 matrix product, about 30 MFLOP, took 15.7 ms
  with 2 threads; sampled softmax at K = 64 took 430 ms with 2 threads and 54 ms with one, while
  full cross-entropy took 1.45 s either way, and one `allowed[pick]` gather in masking took
  9.4 ms with 2 threads and 0.05 ms with one). Both contenders always run under the
  same setting, so the ratio stays fair; with one thread it no longer depends on what else the
  machine is doing. The column "2 threads" repeats the targets from an earlier full run at
  torch's default of 2 threads, for comparison.
- Every number that matters is a **ratio against a baseline measured in the same run**, on the
  same inputs: this machine is shared and its absolute speed changes from minute to minute.
- Contenders run **round-robin** (A, B, A, B, …) after one warm-up round; a time is the median
  over rounds, and a ratio is the median of the per-round ratios.
- **Peak memory** is what a contender allocates beyond what existed before it started (weights
  and inputs excluded). On a GPU: `torch.cuda.max_memory_allocated` after
  `reset_peak_memory_stats`. On a CPU, which keeps no peak counter: the contender runs once under
  `torch.profiler.profile(profile_memory=True)`, and the peak is the largest running sum of the
  allocation (+bytes) and free (−bytes) events in time order
  (`mlm_core.measure.peak_memory_bytes`).
- Sizes: P1, P3 and P4 use B = 32, T = 128 with BERT's 15% and 80/10/10 on workshop-corpus text;
  P2 uses B = 8, T = 128 to keep a full step within seconds on 2 cores; MFU uses B = 16, T = 64
  (the size the bundled model was built with).
- **MFU** (a CPU "model FLOPs utilisation"): the step's matrix-multiply FLOPs per second over the
  speed of the same matrix multiplies (the step's own shapes and layouts,
  `mlm_core.costs.step_gemms`) timed alone in the same run and dtype, i.e. matmul-alone time
  over step time. With one torch thread it is also computed from the process's CPU time, which
  other work on a busy machine disturbs far less than wall time.
- Reproduce: `python -m benchmarks` (all, writes this file), or one of them, for example
  `python -m benchmarks.p1_head_loss` (prints its table, writes `benchmarks/results/p1_head_loss.json`).
"""


def _run_one(key: str, module: str, quick: bool) -> tuple[Result | None, str]:
    mod = importlib.import_module(module)
    start = time.perf_counter()
    try:
        result = mod.run(quick=quick)
    except Exception:
        return None, traceback.format_exc()
    result.seconds = time.perf_counter() - start
    report(result)
    return result, ""


def _plain(name: str) -> str:
    """A target's name without its thread count, to match runs made with different counts."""
    name = re.sub(r"\(\d+ threads?, reported\)", "(reported)", name)
    return re.sub(r" \(\d+ threads?\)", "", name)


def results_threads(results) -> str:
    threads = sorted({r.machine.get("torch_threads") for r in results.values() if r})
    return ", ".join(f"{n} thread{'s' if n != 1 else ''}" for n in threads)


def load_result(path) -> Result:
    """A Result back from its JSON file (for ``--from-json``)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    targets = [Target(**{k: v for k, v in t.items() if k != "met"}) for t in data.pop("targets", [])]
    return Result(**data, targets=targets)


def _gpu_smoke(quick: bool) -> str:
    """P6: benchmarks/gpu_smoke.py (the training issue's), only where CUDA is present; its output verbatim."""
    script = ROOT / "benchmarks" / "gpu_smoke.py"
    if not torch.cuda.is_available():
        return "Not run: no CUDA device on this machine (P6 runs only where one is present)."
    if not script.exists():
        return "Not run: benchmarks/gpu_smoke.py is missing."
    cmd = [sys.executable, str(script)] + (["--steps", "3", "--warmup", "1", "--batch", "8"] if quick else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    out = (proc.stdout + ("\n" + proc.stderr if proc.returncode else "")).strip()
    return f"`{' '.join(cmd[1:])}` exited {proc.returncode}:\n\n```\n{out[-6000:]}\n```"


def _other_runs() -> dict[str, Result]:
    """Results of an earlier full run kept for comparison (``benchmarks/results/threads-2/``)."""
    out = {}
    for key, module in BENCHMARKS:
        path = RESULTS_DIR / "threads-2" / f"{module.rsplit('.', 1)[1]}.json"
        if path.exists():
            out[key] = load_result(path)
    return out


def _p7_picture() -> list[str]:
    """The Training page at the end of the default run (`python -m benchmarks.p7_screenshot`), if taken."""
    record = RESULTS_MD.parent / "results" / "p7_training_page.json"
    if not record.exists():
        return []
    shot = json.loads(record.read_text(encoding="utf-8"))
    return [f"- The page at the end of the default run, in Chromium ({shot['taken']}, load average "
            f"{tuple(shot['load_average'])}): \"{shot['status']}\" {shot['seconds_click_to_done']} s after the click "
            "on Start. That is longer than the run alone above: the server redraws the page's live charts every "
            "2 s in the run's process, and Chromium draws them on the same 2 cores (80 s when it redrew every second). "
            "`python -m benchmarks.p7_screenshot` retakes it.",
            "", "![Training page at the end of the default run](results/p7_training_page.png)", ""]


def write_results(results: dict[str, Result | None], errors: dict[str, str], p6: str, quick: bool,
                  started: str, load_before, load_after, seconds: float) -> None:
    others = _other_runs()
    # assembled from JSON: the machine the runs were made on (the newest run's), not the one assembling them
    ran = [r for r in results.values() if r and r.machine.get("platform")]
    info = max(ran, key=lambda r: r.finished or "").machine if "assembled" in started and ran else machine_info()
    lines = [
        "# MLM Lab benchmarks",
        "",
        ("Assembled by `python -m benchmarks --from-json` from runs made" if "assembled" in started
         else "Written by `python -m benchmarks`") + (" **--quick (small sizes: not the real numbers)**" if quick else "")
        + f" on {started}, in {seconds / 60:.1f} minutes of benchmarking.",
        "",
        "## Machine",
        "",
        f"- CPU: {info['cpu']}, {info['cores']} cores (torch uses {info['torch_threads']} thread{'s' if info['torch_threads'] != 1 else ''}); device: {device_name()}",
        f"- Python {info['python']}, torch {info['torch']}, transformers {info['transformers']}",
        f"- {info['platform']}",
        f"- Load average (1, 5, 15 min) at the start: {load_before}; at the end: {load_after}. The machine is shared with "
        "other work: absolute times vary, ratios much less.",
        "",
        "## Targets",
        "",
        f"| benchmark | measured ({results_threads(results)}) | target | | 2 threads"
        + (f" (earlier run, {min(r.finished for r in others.values())})" if others else "") + " |",
        "|---|---|---|---|---|",
    ]
    for key, result in results.items():
        if result is None:
            lines.append(f"| {key.upper()} | failed to run (see below) | | ❌ | |")
            continue
        other = {_plain(t.name): t for t in (others[key].targets if key in others else [])}
        for t in result.targets:
            o = other.get(_plain(t.name))
            o_text = f"{with_unit(fmt(o.value), o.unit)} {'✅' if o.met else '❌'}" if o else ""
            line = target_line(t)
            measured = line.split(f"{t.name}: ", 1)[1].split(" (target ")[0]  # names may hold ": "
            lines.append(f"| {t.name} | {measured}{' — ' + t.note if t.note else ''} | {t.op} {with_unit(f'{t.bound:g}', t.unit)} | "
                         f"{'✅ met' if t.met else '❌ missed'} | {o_text} |")
    missed = [key for key, r in results.items() if r and any(not t.met for t in r.targets)]
    lines += ["", "## Why a target is missed", ""]
    lines += [f"- {MISS_NOTES[key.upper()]}" for key in missed if key.upper() in MISS_NOTES]
    if others:
        lines.append(f"- {MISS_NOTES['2 threads']}")
    lines += ["", METHOD]
    for key, result in results.items():
        if result is None:
            lines += [f"## {key.upper()} — failed", "", "```", errors.get(key, "")[-3000:], "```", ""]
            continue
        load = result.machine.get("load_average")
        lines += [f"## {result.title}", "",
                  f"Finished {result.finished}" + (f", load average {tuple(load)}" if load else "") + ". Settings: " + ", ".join(f"{k} = {v}" for k, v in result.config.items()) + ".", "",
                  table(result.rows, result.columns, markdown=True), ""]
        lines += [f"- {note}" for note in result.notes]
        if key == "p7":
            lines += _p7_picture()
        lines += [f"- {target_line(t)}" for t in result.targets]
        lines += [f"- {result.seconds:.0f} s; JSON: `benchmarks/results/{result.name}.json`", ""]
    lines += ["## P6 — GPU (optional, reported separately)", "", p6, ""]
    lines += kept_sections()  # the classroom load test's, issue 42's, the live class's: written by their own runs
    RESULTS_MD.write_text("\n".join(lines), encoding="utf-8")
    print(f"\nwrote {RESULTS_MD}")


def kept_sections() -> list[str]:
    """Every ``<!-- name:begin --> … <!-- name:end -->`` section of RESULTS.md, in order: sections other scripts
    write (``benchmarks.classroom_load``, issue 42's measurements), kept when this one rewrites the file."""
    if not RESULTS_MD.exists():
        return []
    text = RESULTS_MD.read_text(encoding="utf-8")
    return [part for m in re.finditer(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->", text, flags=re.S)
            for part in ("", m.group(0), "")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run MLM Lab's benchmarks and write benchmarks/RESULTS.md.")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not the real numbers")
    parser.add_argument("--only", nargs="*", choices=[k for k, _ in BENCHMARKS], help="run only these")
    parser.add_argument("--no-markdown", action="store_true", help="do not (re)write RESULTS.md")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch intra-op threads for every benchmark (default 1: see RESULTS.md, Method)")
    parser.add_argument("--from-json", action="store_true",
                        help="run nothing: write RESULTS.md from benchmarks/results/*.json of earlier full runs")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.from_json:
        results, errors = {}, {}
        for key, module in BENCHMARKS:
            path = RESULTS_DIR / f"{module.rsplit('.', 1)[1]}.json"
            if path.exists():
                results[key] = load_result(path)
            else:
                results[key], errors[key] = None, f"no {path.relative_to(ROOT)}: run python -m {module}"
        started = ", ".join(sorted({r.finished for r in results.values() if r})) + " (assembled)"
        loads = [tuple(r.machine.get("load_average", ())) for r in results.values() if r]
        write_results(results, errors, _gpu_smoke(False), False, started, loads[0] if loads else "?",
                      loads[-1] if loads else "?", sum(r.seconds for r in results.values() if r))
        return 0

    load_before = tuple(round(x, 2) for x in os.getloadavg())
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    start = time.perf_counter()
    results: dict[str, Result | None] = {}
    errors: dict[str, str] = {}
    for key, module in BENCHMARKS:
        if args.only and key not in args.only:
            continue
        print(f"\n--- {key}: {module} ---", flush=True)
        results[key], errors[key] = _run_one(key, module, args.quick)
        if results[key] is None:
            print(errors[key], file=sys.stderr)
    p6 = _gpu_smoke(args.quick) if not args.only else "Not run (--only)."
    print("\n== P6 ==\n" + p6)
    load_after = tuple(round(x, 2) for x in os.getloadavg())
    print("\n== Targets ==")
    for result in results.values():
        for t in (result.targets if result else []):
            print(target_line(t))
    if args.only or args.quick:
        print("\n(RESULTS.md is written only by a full run of every benchmark, without --quick)")
    elif not args.no_markdown:
        write_results(results, errors, p6, args.quick, started, load_before, load_after, time.perf_counter() - start)
    return 0 if all(r is not None for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
