"""Golden outputs for fixed seeds (issue 20): masks, losses, a training curve and the build's loop
stay what ``scripts/record_golden.py`` recorded while the code around them is reshaped.

Integers (ids, labels, decisions, sampled ids, counts) must match exactly; floats within
rtol 1e-5 (plus atol 1e-6 for values near zero): one thread on CPU gives the same bits run after
run, and the tolerance only absorbs a changed order of float additions (e.g. a fused gather).
"""

import json
import math

import pytest

from scripts import record_golden

RTOL, ATOL = 1e-5, 1e-6


def _load(name: str):
    return json.loads((record_golden.GOLDEN_DIR / f"{name}.json").read_text(encoding="utf-8"))


def _differences(expected, actual, path="") -> list[str]:
    """Every place where ``actual`` leaves ``expected`` (ints and strings exactly, floats at RTOL/ATOL)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            return [f"{path}: keys {sorted(expected) if isinstance(expected, dict) else expected} != "
                    f"{sorted(actual) if isinstance(actual, dict) else actual}"]
        return [d for k in expected for d in _differences(expected[k], actual[k], f"{path}/{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return [f"{path}: length {len(expected)} != {len(actual) if isinstance(actual, list) else actual!r}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in _differences(e, a, f"{path}[{i}]")]
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)) or not math.isclose(
                float(actual), float(expected), rel_tol=RTOL, abs_tol=ATOL):
            return [f"{path}: {actual!r} != {expected!r}"]
        return []
    return [] if expected == actual and type(expected) is type(actual) else [f"{path}: {actual!r} != {expected!r}"]


def _check(name: str, actual) -> None:
    actual = json.loads(json.dumps(actual))  # the same types the file holds (tuples -> lists)
    diffs = _differences(_load(name), actual)
    assert not diffs, f"{len(diffs)} differences from tests/golden/{name}.json, first: " + "; ".join(diffs[:5])


def test_masks_match_the_golden_file(tokenizer):
    golden = _load("masks")
    assert len(golden["results"]) == 6 * len(record_golden.MASK_SEEDS)  # every strategy, both span replacements
    _check("masks", record_golden.golden_masks(tokenizer))


def test_losses_match_the_golden_file(tokenizer):
    _check("losses", record_golden.golden_losses(tokenizer))


def test_training_curve_matches_the_golden_file(tokenizer):
    golden = _load("training")
    assert all(len(run["steps"]) == record_golden.TRAIN_STEPS for run in golden.values())
    _check("training", record_golden.golden_training(tokenizer))


def test_build_loop_matches_the_golden_file(tokenizer, tmp_path):
    golden = _load("build_loop")
    assert all(len(run["losses"]) == record_golden.TRAIN_STEPS for run in golden.values())
    _check("build_loop", record_golden.golden_build_loop(tmp_path, tokenizer))


def test_the_comparison_catches_a_change():
    assert _differences({"a": [1, 2.0]}, {"a": [1, 2.0 * (1 + 2 * RTOL)]})
    assert not _differences({"a": [1, 2.0]}, {"a": [1, 2.0 * (1 + RTOL / 2)]})
    assert _differences({"a": [1, 2]}, {"a": [1, 3]}) and _differences([1], [1, 2])
