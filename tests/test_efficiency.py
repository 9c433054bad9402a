"""The Efficiency lesson's library: exact size arithmetic, one loss three ways, sane measurements.

No timing is asserted here (timings belong in benchmarks/): only values, shapes and structures.
"""

import math

import pytest
import torch

from mlm_core.efficiency import (BYTES_PER_VALUE, LOSS_PATHS, STEP_SETTINGS, amp_and_checkpointing, bert_step_flops,
                                 human_bytes, ideal_step_speedup, logits_size, loss_path_functions, loss_paths,
                                 median, median_times, peak_memory_bytes)
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX


@pytest.fixture(scope="module")
def tiny():
    from mlm_core.models import load_masked_lm

    return load_masked_lm("tiny-random", device="cpu")


# ------------------------------------------------------------------ size arithmetic (exact)
@pytest.mark.parametrize("dtype", list(BYTES_PER_VALUE))
def test_logits_size_is_exact(dtype):
    per = BYTES_PER_VALUE[dtype]
    s = logits_size(32, 128, 30522, dtype=dtype)
    assert s["masked"] == round(32 * 128 * 0.15) == 614
    assert s["full_values"] == 32 * 128 * 30522 == 125_018_112
    assert s["gathered_values"] == 614 * 30522
    assert s["full_bytes"] == 125_018_112 * per
    assert s["gathered_bytes"] == 614 * 30522 * per
    assert s["ratio"] == pytest.approx(32 * 128 / 614)


def test_logits_size_with_a_given_count_and_edge_cases():
    s = logits_size(2, 4, 10, masked=1)
    assert (s["full_values"], s["gathered_values"], s["full_bytes"], s["gathered_bytes"]) == (80, 10, 320, 40)
    assert s["ratio"] == 8.0
    assert logits_size(1, 8, 5, masked=0)["ratio"] == math.inf
    for bad in (dict(batch_size=0, seq_len=4, vocab_size=10), dict(batch_size=2, seq_len=4, vocab_size=1.5),
                dict(batch_size=2, seq_len=4, vocab_size=10, masked=9),
                dict(batch_size=2, seq_len=4, vocab_size=10, dtype="int8"),
                dict(batch_size=2, seq_len=4, vocab_size=10, mask_rate=1.5)):
        with pytest.raises(InputError):
            logits_size(**bad)


def test_flops_arithmetic_and_ideal_ratio():
    f = bert_step_flops(hidden=2, layers=1, intermediate=4, vocab=10, seq_len=3, tokens=3, head_rows=1)
    # per token and layer: 8·4 + 4·2·4 + 4·3·2 = 88; ×3 tokens ×3 (fwd+bwd); head: (2·4 + 2·2·10)·3
    assert f == {"encoder": 792.0, "head": 144.0, "total": 936.0}
    from transformers import BertConfig

    cfg = BertConfig(hidden_size=8, num_hidden_layers=1, intermediate_size=16, vocab_size=100)
    assert ideal_step_speedup(cfg, seq_len=4, batch_size=2, masked=8) == pytest.approx(1.0)
    assert ideal_step_speedup(cfg, seq_len=4, batch_size=2, masked=1) > 1.0


def test_human_bytes_and_median():
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 2**20) == "3.0 MiB"
    assert median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5 and math.isnan(median([]))


# ------------------------------------------------------------------ the three loss paths agree
def test_three_paths_give_the_same_loss_and_gradients(tiny):
    model, tokenizer = tiny
    from mlm_core.models import _encode, _head
    from transformers.models.bert.modeling_bert import BertForMaskedLM  # noqa: F401

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (3, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 5], labels[2, 7], labels[2, 8] = 11, 22, 33, 44
    with torch.no_grad():
        states = _encode(model, ids, torch.ones_like(ids))
    head = _head(model)
    fns = loss_path_functions(head.transform, head.decoder, states, labels)
    values = {name: fn() for name, fn in fns.items()}
    reference = torch.nn.functional.cross_entropy(
        model.cls(states).reshape(-1, model.config.vocab_size), labels.reshape(-1)).item()
    for name, (loss, n_scores) in values.items():
        assert loss == pytest.approx(reference, abs=1e-5), name
    assert values["gathered"][1] == 4 * model.config.vocab_size  # M × V scores only
    assert values["vectorised"][1] == values["loop"][1] == 3 * 12 * model.config.vocab_size


def test_loss_paths_returns_one_sane_row_per_path(tiny):
    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = loss_paths(model, tokenizer, batch_size=2, seq_len=16, repeats=1)
    assert [r["path"] for r in rows] == list(LOSS_PATHS)
    for r in rows:
        assert r["time_ms"] > 0 and r["peak_bytes"] >= 0 and math.isfinite(r["loss"])
        assert r["loss_diff"] < 1e-4 and len(r["times_ms"]) == 1 and r["masked"] > 0
    assert all(p.grad is None for p in model.parameters())  # the shared model is never touched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(InputError):
        loss_paths(model, tokenizer, batch_size=0)


def test_amp_and_checkpointing_leaves_the_model_alone(tiny):
    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = amp_and_checkpointing(model, tokenizer, batch_size=2, seq_len=16, repeats=1)
    assert [(r["amp"], r["checkpointing"]) for r in rows] == list(STEP_SETTINGS)
    for r in rows:
        assert r["time_ms"] > 0 and r["peak_bytes"] > 0 and math.isfinite(r["loss"]) and r["label"]
    assert not model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ------------------------------------------------------------------ the measuring helpers
def test_peak_memory_sees_a_large_temporary():
    n = 1_000_000  # 4 MB of float32

    def make():
        x = torch.ones(n)
        y = x * 2  # 8 MB alive at once
        return float(y.sum())

    peak = peak_memory_bytes(make)
    assert 8 * 10**6 <= peak < 64 * 10**6
    assert peak_memory_bytes(lambda: None) < 10**6


def test_median_times_runs_each_function_round_robin():
    calls = []
    times = median_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=1, repeats=2)
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert set(times) == {"a", "b"} and all(len(v) == 2 and min(v) >= 0 for v in times.values())


# ------------------------------------------------------------------ many sessions, one process (issue 16, item 1)
TWO_PROFILERS = """
import threading
from mlm_core.efficiency import peak_memory_bytes

def work():
    import torch
    x = torch.ones(10_000)
    return float((x * 2).sum())

errors = []
def measure():
    try:
        for _ in range(10):
            assert peak_memory_bytes(work) >= 80_000
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=measure) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("done", errors)
"""


def test_two_simultaneous_memory_measurements_do_not_crash_the_process():
    """Two threads profiling at once segfaulted the interpreter (exit 139): run it in a child process."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", TWO_PROFILERS], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done []" in proc.stdout


def test_a_second_measurement_is_told_the_server_is_busy():
    import threading

    from mlm_core.efficiency import MeasurementBusyError, exclusive_measurement

    inside, release = threading.Event(), threading.Event()

    def hold():
        with exclusive_measurement():
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        with pytest.raises(MeasurementBusyError, match="Another measurement is running"):
            with exclusive_measurement(wait_s=0.05):
                pass
    finally:
        release.set()
        holder.join()
    with exclusive_measurement(wait_s=0.05):  # free again once the first one ended
        pass
