"""benchmarks/default_model.py (issue 26): its targets and table are the build record's numbers, and its section
reaches RESULTS.md. No model is loaded: the fresh-process load is replaced by a fake one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import __main__ as bench
from benchmarks import default_model as dmb

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "benchmarks" / "results" / "default_model.json"
RECORD = ROOT / "assets" / "default_mlm" / "build.json"
FAKE_LOADS = [{"import_s": 4.0, "load_s": s, "trained": True, "tensors_applied": 7, "warning": None, "threads": 1}
              for s in (0.9, 0.5, 2.0)]  # median 0.9, mean 1.13, last 2.0: a wrong statistic shows


def fake_record(blimp=0.80, unseen_top5=0.78, unseen_copy=0.05, repeat=0.70, repeat_init=0.65):
    """A small record in build.json's shape: final_metrics, metrics_init, eval_sets, asset and a lineage."""
    final = {"blimp": {"n_pairs": 120, "overall": blimp, "overall_se": 0.01,
                       "by_phenomenon": {"binding": {"accuracy": 0.9, "se": 0.05, "n": 60}}},
             "unseen_n": 40, "unseen_top1": 0.30, "unseen_top5": unseen_top5, "unseen_top5_se": 0.06,
             "unseen_copy_rate": unseen_copy, "repeat_n": 20, "repeat_top5": repeat,
             "cloze_n": 30, "cloze_top1": 0.40, "cloze_top5": 0.70, "heldout_loss": 2.5, "step": 90}
    init = {"blimp": {"n_pairs": 120, "overall": 0.70, "overall_se": 0.01,
                      "by_phenomenon": {"binding": {"accuracy": 0.8, "se": 0.05, "n": 60}}},
            "unseen_top1": 0.25, "unseen_top5": 0.60, "unseen_copy_rate": 0.08, "repeat_top5": repeat_init,
            "cloze_top1": 0.35, "cloze_top5": 0.72, "heldout_loss": 3.0}
    return {"created": "2026-01-01T00:00:00+00:00", "steps": 100, "wall_time_s": 360.0,
            "final_metrics": final, "metrics_init": init,
            "eval_sets": {"blimp": {"pairs": 120, "per_paradigm": 30, "sample": "smallest sha1",
                                    "score": "PLL", "use": "reported only: never trained on"},
                          "dev": {"use": "chooses the exported checkpoint"}, "unseen": {"use": "reported only"}},
            "selected": {"on": "dev"}, "asset": {"bytes": 1234, "tensors": 7, "dtype": "float16"},
            "init_asset": {"build": {"steps": 50, "wall_time_s": 100.0, "lineage": [{"steps": 25, "wall_time_s": 40.0}]}}}


def by_name(targets):
    return {t.name: t for t in targets}


def test_blimp_target_is_the_records_overall_and_reads_missed_or_met():
    missed = by_name(dmb.record_targets(fake_record(blimp=0.70)))["Default model BLiMP PLL accuracy"]
    met = by_name(dmb.record_targets(fake_record(blimp=0.80)))["Default model BLiMP PLL accuracy"]
    assert (missed.value, missed.bound, missed.met) == (70.0, dmb.BLIMP_TARGET, False)
    assert (met.value, met.met) == (80.0, True)
    assert "120 pairs" in met.note and "± 1" in met.note and "30 per paradigm" in met.note


def test_unseen_targets_read_top5_and_copy_rate_in_their_directions():
    good = by_name(dmb.record_targets(fake_record(unseen_top5=0.78, unseen_copy=0.05)))
    bad = by_name(dmb.record_targets(fake_record(unseen_top5=0.60, unseen_copy=0.12)))
    top5, copy = "Default model unseen everyday cloze, top-5", "Default model unseen everyday cloze, copy rate"
    assert good[top5].met and good[copy].met and not bad[top5].met and not bad[copy].met
    assert bad[copy].value == 12.0 and bad[copy].op == "<=" and "n = 40" in good[top5].note


def test_repeat_target_compares_with_the_weights_it_started_from():
    name = "Default model repeat-answer cloze top-5, no loss"
    lost = by_name(dmb.record_targets(fake_record(repeat=0.60, repeat_init=0.65)))[name]
    kept = by_name(dmb.record_targets(fake_record(repeat=0.65, repeat_init=0.65)))[name]
    assert (lost.value, lost.bound, lost.met) == (60.0, 65.0, False)
    assert kept.met and "65.0%" in kept.note


def test_reported_rows_are_bounded_by_the_starting_weights():
    targets = by_name(dmb.record_targets(fake_record()))
    loss = targets["Default model held-out loss (reported)"]
    assert (loss.value, loss.op, loss.bound, loss.met) == (2.5, "<=", 3.0, True)
    cloze5 = targets["Default model cloze set, top-5 (reported)"]
    assert (cloze5.value, cloze5.bound, cloze5.met) == (70.0, 72.0, False)


def test_a_record_without_blimp_meets_no_blimp_target():
    record = fake_record()
    del record["final_metrics"]["blimp"]
    assert not by_name(dmb.record_targets(record))["Default model BLiMP PLL accuracy"].met


def test_size_and_load_time_targets_use_the_measurements():
    small = by_name(dmb.asset_targets(fake_record(), 22_000_000, FAKE_LOADS))
    assert small["Default model load time (median)"].value == 0.9 and small["Default model load time (median)"].met
    assert small["Default model asset size"].value == 22.0 and "the record says 1,234 bytes" in \
        small["Default model asset size"].note
    big = by_name(dmb.asset_targets(fake_record(), 70_000_000, [dict(FAKE_LOADS[0], load_s=3.5)]))
    assert not big["Default model asset size"].met and not big["Default model load time (median)"].met


def test_build_totals_add_the_lineage():
    assert dmb.build_totals(fake_record()) == {"steps": 100, "wall_time_s": 360.0, "earlier_builds": 2,
                                               "all_steps": 175, "all_wall_time_s": 500.0}


def test_table_rows_show_this_asset_beside_the_starting_weights():
    rows = {r["measure"]: r for r in dmb.record_rows(fake_record())}
    assert rows["BLiMP PLL accuracy, overall"]["this asset"] == "80.0% ± 1.0"
    assert rows["BLiMP PLL accuracy, overall"]["weights it started from"] == "70.0% ± 1.0"
    assert rows["BLiMP: binding"]["this asset"] == "90.0% ± 5.0" and rows["BLiMP: binding"]["n"] == 60
    assert rows["unseen everyday cloze, top-5"]["used for"] == "reported only"


@pytest.fixture
def fake_asset(tmp_path, monkeypatch):
    """A fake asset folder (record + a 2,000-byte weights file) and a fake fresh-process load."""
    (tmp_path / "build.json").write_text(json.dumps(fake_record(blimp=0.70)), encoding="utf-8")
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 2000)
    monkeypatch.setenv("MLMLAB_DEFAULT_MLM_DIR", str(tmp_path))
    loads = iter(FAKE_LOADS)
    monkeypatch.setattr(dmb, "load_once", lambda threads: next(loads))
    return tmp_path


def test_the_section_reaches_results_md(fake_asset, tmp_path, monkeypatch):
    assert ("default_model", "benchmarks.default_model") in bench.BENCHMARKS
    result = dmb.run()
    assert result.config["loads"] == 3 and "30 pairs per paradigm" in result.notes[0]
    out = tmp_path / "RESULTS.md"
    monkeypatch.setattr(bench, "RESULTS_MD", out)
    bench.write_results({"default_model": result}, {}, "not run", False, "now", (0, 0, 0), (0, 0, 0), 1.0)
    text = out.read_text(encoding="utf-8")
    assert "## Default model (issue 26) — BLiMP, unseen sentences, size and load time" in text
    assert "| Default model BLiMP PLL accuracy | 70.0% — " in text and "| >= 75% | ❌ missed |" in text
    assert "| Default model load time (median) | 0.9s — 3 fresh processes: 0.90, 0.50, 2.00 s" in text
    assert "| <= 60 MB | ✅ met |" in text  # the bound with its unit (it read "<= 60")
    assert "| load time, the first (cold) process (reported only) | 0.90 s |" in text
    assert "| import + load, median: a fresh process's wait for the model (reported only) | 4.90 s |" in text
    assert "| build steps (this build; with the 2 builds it started from) | 100; 175 |" in text


def test_committed_result_is_the_committed_records():
    """benchmarks/results/default_model.json must be rerun when the asset's record changes."""
    result, record = json.loads(COMMITTED.read_text()), json.loads(RECORD.read_text())
    assert result["config"]["record created"] == record["created"], "rerun python -m benchmarks.default_model"
    committed = {t["name"]: t["value"] for t in result["targets"]}
    size = round((RECORD.parent / "model.safetensors").stat().st_size / dmb.MB, 2)  # fixed by the file
    assert committed == pytest.approx({t.name: t.value for t in dmb.record_targets(record)} | {
        "Default model asset size": size, "Default model load time (median)": committed.get(
            "Default model load time (median)")})  # only the load time is the machine's


def test_a_record_without_standard_errors_writes_none():
    record = fake_record()
    del record["final_metrics"]["blimp"]["overall_se"], record["final_metrics"]["unseen_top5_se"]
    notes = " ".join(t.note for t in dmb.record_targets(record))
    assert "nan" not in notes and "120 pairs" in notes


class FakeProc:
    def __init__(self, stdout, returncode=0, stderr=""):
        self.stdout, self.returncode, self.stderr = stdout, returncode, stderr


def test_load_once_reads_the_childs_last_line_and_refuses_an_untrained_load(monkeypatch):
    """The fresh process prints one json line; the untrained fallback's load time is not the asset's."""
    seen = {}

    def fake_run(cmd, **kwargs):
        seen.update(kwargs["env"])
        line = json.dumps({"import_s": 4.0, "load_s": 0.5, "trained": trained, "tensors_applied": 7,
                           "warning": "no weights", "threads": 1})
        return FakeProc("a warning line\n" + line + "\n")

    monkeypatch.setattr(dmb.subprocess, "run", fake_run)
    trained = True
    assert dmb.load_once(2)["load_s"] == 0.5
    assert (seen["OMP_NUM_THREADS"], seen["HF_HUB_OFFLINE"]) == ("2", "1")
    trained = False
    with pytest.raises(RuntimeError, match="loaded untrained: no weights"):
        dmb.load_once(1)
    monkeypatch.setattr(dmb.subprocess, "run", lambda cmd, **kw: FakeProc("", 1, "Traceback: boom"))
    with pytest.raises(RuntimeError, match="exited 1: Traceback: boom"):
        dmb.load_once(1)
