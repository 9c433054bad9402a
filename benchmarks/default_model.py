"""The default model of issue 26: BLiMP, unseen sentences, size and load time of the bundled masked LM.

The build record (``assets/default_mlm/build.json``, ``mlm_core.default_model.read_build_record``) holds what the
build measured on the weights it exported (``final_metrics``) and on the weights it started from
(``metrics_init``): BLiMP by pseudo-log-likelihood and the cloze sets. Those numbers are read, never re-measured
here (BLiMP alone takes minutes). Two things are measured at run time:

- the asset's size on disk (``assets/default_mlm/model.safetensors``);
- its load time: the median of 3 loads, each in a fresh Python process (this interpreter, offline,
  ``OMP_NUM_THREADS`` = this run's torch threads), timing only the call the app makes for the default model
  (``mlm_core.models.load_masked_lm(None)``, which ``ui.loaders`` caches). Importing torch, transformers and
  ``mlm_core.models`` is timed apart and reported only: it is not the asset's cost.

Targets (issue 26): BLiMP PLL accuracy >= 75%; the unseen everyday cloze set's top-5 >= 75% and its copy rate
<= 10%; the repeat-answer set's top-5 no lower than the weights the build started from; the asset <= 60 MB;
the load <= 3 s. Reported beside them, against the weights it started from: the unseen top-1, the cloze set's
top-1 and top-5 and the held-out loss.

Run: ``python -m benchmarks.default_model`` (``--quick``: one load, nothing written to ``benchmarks/results``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, Result, Target, cli, human_bytes, median

import torch  # noqa: E402

from mlm_core.default_model import WEIGHTS_FILE, default_asset_dir, lineage, read_build_record  # noqa: E402

BLIMP_TARGET = 75.0  # %, issue 26: BLiMP accuracy by PLL
UNSEEN_TOP5_TARGET = 75.0  # %, issue 26: top-5 on everyday sentences no build has seen
UNSEEN_COPY_TARGET = 10.0  # %, issue 26: top-1 guesses that copy a word of the sentence
ASSET_MB_TARGET = 60.0  # MB (10**6 bytes), issue 26
LOAD_S_TARGET = 3.0  # s, issue 26
LOADS = 3  # fresh processes; the median is the target's number
MB = 1e6

# What a fresh process runs: the imports, then the app's own call for the default model, each timed.
_CHILD = """\
import json, time
start = time.perf_counter()
import torch, transformers
from mlm_core import models
imported = time.perf_counter()
model, tokenizer = models.load_masked_lm(None)
loaded = time.perf_counter()
info = model.mlmlab_info
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported, "trained": info.get("trained"),
                  "tensors_applied": info.get("tensors_applied"), "warning": info.get("warning"),
                  "threads": torch.get_num_threads()}))
"""


# --------------------------------------------------------------------------- measured here
def load_once(threads: int) -> dict[str, Any]:
    """One load of the default model in a fresh process: ``{"import_s", "load_s", "trained", ...}``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode:
        raise RuntimeError(f"the load exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["trained"]:  # the untrained fallback's load time is not the asset's
        raise RuntimeError(f"the default model loaded untrained: {out['warning']}")
    return out


# --------------------------------------------------------------------------- read from the record
def _pct(x: Any) -> float:
    """A recorded share (0.6891) as a percentage (68.91); NaN when not recorded (it then meets no target)."""
    return float("nan") if x is None else round(100 * x, 2)


def _nats(x: Any) -> float:
    """A recorded loss as it is; NaN when not recorded (it then meets no target)."""
    return float("nan") if x is None else x


def _shown(x: Any, se: Any = None) -> str:
    """'68.9% ± 0.9' (a share and its standard error, in points); '' when not recorded."""
    if x is None:
        return ""
    return f"{100 * x:.1f}%" + (f" ± {100 * se:.1f}" if se is not None else "")


def _se(se: Any) -> str:
    """'± 0.9 (SE), ' (a standard error in points); '' when not recorded."""
    return "" if se is None else f"± {100 * se:.1f} (SE), "


def _sets(record: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The exported weights' metrics, the starting weights', and the BLiMP results of each."""
    final = record.get("final_metrics") or {}
    init = record.get("metrics_init") or {}
    return final, init, final.get("blimp") or {}, init.get("blimp") or {}


def record_targets(record: dict[str, Any]) -> list[Target]:
    """The issue's targets that the build record answers, and the reported rows beside them."""
    final, init, blimp, blimp_init = _sets(record)
    per_paradigm = ((record.get("eval_sets") or {}).get("blimp") or {}).get("per_paradigm")
    started = "the weights it started from"
    return [
        Target("Default model BLiMP PLL accuracy", _pct(blimp.get("overall")), ">=", BLIMP_TARGET, unit="%",
               note=f"{_se(blimp.get('overall_se'))}{blimp.get('n_pairs')} pairs, {per_paradigm} per "
                    f"paradigm; {started}: {_shown(blimp_init.get('overall'))}"),
        Target("Default model unseen everyday cloze, top-5", _pct(final.get("unseen_top5")), ">=",
               UNSEEN_TOP5_TARGET, unit="%",
               note=f"{_se(final.get('unseen_top5_se'))}n = {final.get('unseen_n')}; "
                    f"{started}: {_shown(init.get('unseen_top5'))}"),
        Target("Default model unseen everyday cloze, copy rate", _pct(final.get("unseen_copy_rate")), "<=",
               UNSEEN_COPY_TARGET, unit="%",
               note=f"n = {final.get('unseen_n')}; {started}: {_shown(init.get('unseen_copy_rate'))}"),
        Target("Default model repeat-answer cloze top-5, no loss", _pct(final.get("repeat_top5")), ">=",
               _pct(init.get("repeat_top5")), unit="%",
               note=f"the bound is {started}: {_shown(init.get('repeat_top5'))}; n = {final.get('repeat_n')}"),
    ] + [
        Target(f"Default model {name} (reported)", value(final.get(key)), op, value(init.get(key)), unit=unit,
               note=f"no target in the issue; the bound is {started}")
        for name, key, op, unit, value in (("unseen everyday cloze, top-1", "unseen_top1", ">=", "%", _pct),
                                           ("cloze set, top-1", "cloze_top1", ">=", "%", _pct),
                                           ("cloze set, top-5", "cloze_top5", ">=", "%", _pct),
                                           ("held-out loss", "heldout_loss", "<=", "nats", _nats))
    ]


def asset_targets(record: dict[str, Any], size_bytes: int, loads: list[dict[str, Any]]) -> list[Target]:
    """The size on disk and the median load time, against the issue's bounds."""
    asset = record.get("asset") or {}
    recorded = asset.get("bytes")
    size_note = f"{human_bytes(size_bytes)}; {asset.get('tensors')} tensors in {asset.get('dtype')}, the rest " \
                "rebuilt from the installed encoder package"
    if recorded is not None and recorded != size_bytes:
        size_note += f"; the record says {recorded:,} bytes"
    times = ", ".join(f"{x['load_s']:.2f}" for x in loads)
    return [
        Target("Default model asset size", round(size_bytes / MB, 2), "<=", ASSET_MB_TARGET, unit="MB",
               note=size_note),
        Target("Default model load time (median)", median([x["load_s"] for x in loads]), "<=", LOAD_S_TARGET,
               unit="s", note=f"{_count(len(loads), 'fresh process', 'es')}: {times} s; imports excluded"),
    ]


def build_totals(record: dict[str, Any]) -> dict[str, Any]:
    """This build's steps and wall time, and the sums over it and the builds it started from (``lineage``)."""
    earlier = lineage(record)
    steps, wall = record.get("steps"), record.get("wall_time_s")
    return {"steps": steps, "wall_time_s": wall, "earlier_builds": len(earlier),
            "all_steps": None if steps is None else steps + sum(e.get("steps") or 0 for e in earlier),
            "all_wall_time_s": None if wall is None else wall + sum(e.get("wall_time_s") or 0 for e in earlier)}


def build_note(record: dict[str, Any]) -> str:
    """The build's steps and wall time, alone and with the builds it started from."""
    t = build_totals(record)
    if t["steps"] is None or t["wall_time_s"] is None:
        return "Build: the record holds no `steps` or `wall_time_s`."
    return (f"Build: {t['steps']:,} steps in {t['wall_time_s']:,.0f} s (the record's `steps`, `wall_time_s`); with "
            f"the {_count(t['earlier_builds'], 'build')} it started from (`mlm_core.default_model.lineage`): "
            f"{t['all_steps']:,} steps in {t['all_wall_time_s']:,.0f} s ({t['all_wall_time_s'] / 3600:.1f} h).")


def _use(record: dict[str, Any], name: str) -> str:
    """'chooses the checkpoint' or 'reported only', as the record's ``eval_sets`` says."""
    use = ((record.get("eval_sets") or {}).get(name) or {}).get("use", "")
    return "chooses the checkpoint" if use.startswith("choose") else "reported only" if use else ""


def record_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The section's table from the record: each measure for the exported weights and the ones it started from."""
    final, init, blimp, blimp_init = _sets(record)
    rows = [{"measure": "BLiMP PLL accuracy, overall", "this asset": _shown(blimp.get("overall"), blimp.get(
        "overall_se")), "weights it started from": _shown(blimp_init.get("overall"), blimp_init.get("overall_se")),
             "n": blimp.get("n_pairs"), "used for": _use(record, "blimp")}]
    before = blimp_init.get("by_phenomenon") or {}
    for name, score in (blimp.get("by_phenomenon") or {}).items():
        rows.append({"measure": f"BLiMP: {name}", "this asset": _shown(score.get("accuracy"), score.get("se")),
                     "weights it started from": _shown((before.get(name) or {}).get("accuracy")),
                     "n": score.get("n"), "used for": _use(record, "blimp")})
    for key, label in (("unseen", "unseen everyday cloze"), ("repeat", "repeat-answer cloze"),
                       ("everyday", "everyday cloze"), ("cloze", "cloze set"), ("dev", "dev cloze set")):
        for metric, what in (("top1", "top-1"), ("top5", "top-5"), ("copy_rate", "copy rate")):
            if final.get(f"{key}_{metric}") is None:
                continue
            rows.append({"measure": f"{label}, {what}", "n": final.get(f"{key}_n"), "used for": _use(record, key),
                         "this asset": _shown(final[f"{key}_{metric}"], final.get(f"{key}_{metric}_se")),
                         "weights it started from": _shown(init.get(f"{key}_{metric}"),
                                                           init.get(f"{key}_{metric}_se"))})
    if final.get("grammar_dev_acc") is not None:
        rows.append({"measure": "grammar dev pairs (MLM Lab's own)", "this asset": _shown(final["grammar_dev_acc"]),
                     "weights it started from": _shown(init.get("grammar_dev_acc")),
                     "n": final.get("grammar_dev_n"), "used for": _use(record, "grammar_dev")})
    for key, label in (("heldout_loss", "held-out loss (nats)"), ("heldout_mask_loss", "held-out [MASK]-only loss")):
        if final.get(key) is not None:
            rows.append({"measure": label, "this asset": f"{final[key]:.3f}", "used for": "reported only",
                         "weights it started from": "" if init.get(key) is None else f"{init[key]:.3f}"})
    return rows


def measured_rows(record: dict[str, Any], size_bytes: int, loads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows measured at run time (size, load, imports) and the build's steps and time."""
    totals = build_totals(record)
    rows = [
        {"measure": "asset size on disk", "this asset": f"{size_bytes / MB:.1f} MB ({human_bytes(size_bytes)})"},
        {"measure": "load time, median (load_masked_lm of the default)",
         "this asset": f"{median([x['load_s'] for x in loads]):.2f} s", "n": len(loads)},
        {"measure": "load time, the first (cold) process (reported only)", "this asset": f"{loads[0]['load_s']:.2f} s"},
        {"measure": "import of torch, transformers, mlm_core.models (reported only)",
         "this asset": f"{median([x['import_s'] for x in loads]):.2f} s", "n": len(loads)},
        {"measure": "import + load, median: a fresh process's wait for the model (reported only)",
         "this asset": f"{median([x['import_s'] + x['load_s'] for x in loads]):.2f} s", "n": len(loads)},
    ]
    earlier = f"with the {_count(totals['earlier_builds'], 'build')} it started from"
    if totals["steps"] is not None:
        rows.append({"measure": f"build steps (this build; {earlier})",
                     "this asset": f"{totals['steps']:,}; {totals['all_steps']:,}"})
    if totals["wall_time_s"] is not None:
        rows.append({"measure": f"build wall time (this build; {earlier})",
                     "this asset": f"{totals['wall_time_s'] / 3600:.2f} h; {totals['all_wall_time_s'] / 3600:.2f} h"})
    return rows


def method_note(record: dict[str, Any], asset_dir: Path, loads: int) -> str:
    """How the numbers were made, from the record's own account of its evaluation sets."""
    sets = record.get("eval_sets") or {}
    blimp = sets.get("blimp") or {}
    final = record.get("final_metrics") or {}
    selected = record.get("selected") or {}
    return (f"Method: the BLiMP and cloze numbers are the build record's (`{_shown_path(asset_dir)}/build.json`, "
            f"created {record.get('created')}, exported step {final.get('step', record.get('steps'))}), measured "
            "by the build on the weights it exported and on the weights it started from (`metrics_init`). BLiMP "
            f"(Warstadt et al. 2020): a subsample of {blimp.get('per_paradigm')} pairs per paradigm "
            f"({blimp.get('pairs')} in all), chosen by sha1 ({blimp.get('sample')}); scored by {blimp.get('score')}; "
            f"{blimp.get('use')}. Checkpoints are chosen on the dev sets alone ({selected.get('on')}); every other "
            "set is reported only. Size and load time are measured here: the weights file's size on disk, and the "
            f"median of {loads} load{'s' if loads != 1 else ''}, each in a fresh Python process timing only "
            "`mlm_core.models.load_masked_lm(None)` (the app's call for the default model; the imports before it are "
            "timed apart).")


def _count(n: int, word: str, plural: str = "s") -> str:
    """'1 build', '4 builds'."""
    return f"{n} {word}{plural if n != 1 else ''}"


def _shown_path(path: Path) -> str:
    """A path relative to the repository when it lies inside it (never the server's absolute path otherwise)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return Path(path).name


def run(quick: bool = False, repeats: int = LOADS) -> Result:
    asset_dir = default_asset_dir()
    record = read_build_record(asset_dir)
    if record is None:
        raise RuntimeError(f"no readable build record in {_shown_path(asset_dir)}")
    weights = asset_dir / WEIGHTS_FILE
    size_bytes = weights.stat().st_size
    threads = torch.get_num_threads()
    loads = [load_once(threads) for _ in range(1 if quick else max(1, repeats))]
    notes = [method_note(record, asset_dir, len(loads)),
             f"Loads, each in a fresh process with {_count(loads[0]['threads'], 'torch thread')}: " + "; ".join(
                 f"load {x['load_s']:.2f} s after importing for {x['import_s']:.2f} s, {x['tensors_applied']} "
                 "tensors applied" for x in loads) + ".",
             build_note(record)]
    if quick:
        notes.insert(0, "QUICK smoke run: one load; the load-time median is of one.")
    return Result(
        name="default_model",
        title="Default model (issue 26) — BLiMP, unseen sentences, size and load time",
        config={"quick": quick, "asset": f"{_shown_path(weights)}", "record created": record.get("created"),
                "loads": len(loads), "threads": threads},
        rows=record_rows(record) + measured_rows(record, size_bytes, loads),
        columns=["measure", "this asset", "weights it started from", "n", "used for"],
        targets=record_targets(record) + asset_targets(record, size_bytes, loads),
        notes=notes,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
