"""The Efficiency lesson's library: exact size arithmetic, one loss three ways, sane measurements.

No timing is asserted here (timings belong in benchmarks/): only values, shapes and structures.
"""

import math

import time

import pytest
import torch

from mlm_core.costs import BYTES_PER_VALUE, bert_step_flops, ideal_step_speedup, logits_size
from mlm_core.lessons.efficiency import (LOSS_PATHS, STEP_CATEGORIES, STEP_SETTINGS, amp_and_checkpointing,
                                         loop_vs_vectorised, loss_path_functions, loss_paths, step_time_breakdown)
from mlm_core.measure import human_bytes, median, median_times, paired_ratio, peak_memory_bytes
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX
from mlm_core.head import encoder_states, head_parts


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
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 2000, (3, 12), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 2], labels[1, 5], labels[2, 7], labels[2, 8] = 11, 22, 33, 44
    with torch.no_grad():
        states = encoder_states(model, ids, torch.ones_like(ids))
    head = head_parts(model)
    params = [p for p in model.cls.parameters() if p.requires_grad]
    grads: dict = {}
    fns = loss_path_functions(head.transform, head.decoder, states, labels, params, grads=grads)
    values = {name: fn() for name, fn in fns.items()}
    # the reference: the model's own head on every position, cross-entropy with ignore_index, autograd
    leaf = states.detach().requires_grad_(True)
    reference = torch.nn.functional.cross_entropy(
        model.cls(leaf).reshape(-1, model.config.vocab_size), labels.reshape(-1))
    expected = torch.autograd.grad(reference, [leaf, *params], allow_unused=True)
    for name, (loss, n_scores) in values.items():
        assert loss == pytest.approx(reference.item(), abs=1e-5), name
        assert len(grads[name]) == len(expected) == 1 + len(params)
        for got, want in zip(grads[name], expected):
            if want is None:
                assert got is None or not got.any(), name
                continue
            # float32 sums in another order: equal to 1e-6 of the tensor's largest entry
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6 * float(want.abs().max())), name
            assert float(torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)) > 1 - 1e-5, name
    assert grads["gathered"][0][labels == IGNORE_INDEX].abs().max() == 0  # no gradient where nothing is predicted
    assert grads["gathered"][0][labels != IGNORE_INDEX].abs().min() > 0
    assert values["gathered"][1] == 4 * model.config.vocab_size  # M × V scores only
    assert values["vectorised"][1] == values["loop"][1] == 3 * 12 * model.config.vocab_size


def test_loss_paths_returns_one_sane_row_per_path(tiny):
    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = loss_paths(model, tokenizer, batch_size=2, seq_len=16, repeats=1)
    assert [r["path"] for r in rows] == list(LOSS_PATHS)
    for r in rows:
        assert r["time_ms"] > 0 and math.isfinite(r["loss"])
        assert r["loss_diff"] < 1e-4 and len(r["times_ms"]) == 1 and r["masked"] > 0
        # the float32 scores a path computes are alive at its peak (with their gradient, and the head's)
        assert r["peak_bytes"] >= r["logits_values"] * BYTES_PER_VALUE["fp32"]
    peak = {r["path"]: r["peak_bytes"] for r in rows}
    assert peak["gathered"] < peak["vectorised"]  # M × V scores instead of B × T × V
    assert all(p.grad is None for p in model.parameters())  # the shared model is never touched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(InputError):
        loss_paths(model, tokenizer, batch_size=0)


def test_amp_and_checkpointing_leaves_the_model_alone(tiny):
    model, tokenizer = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = amp_and_checkpointing(model, tokenizer, batch_size=2, seq_len=16, repeats=2)
    assert [(r["amp"], r["checkpointing"], r["frozen"]) for r in rows] == list(STEP_SETTINGS)
    for r in rows:
        assert r["time_ms"] > 0 and r["peak_bytes"] > 0 and math.isfinite(r["loss"]) and r["label"]
        assert len(r["times_ms"]) == 2 and r["time_x"] > 0 and 0 < r["mfu"] < 10 and 0 < r["cpu_mfu"] < 10
    assert not model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_every_setting_steps_from_the_same_weights(tiny):
    """The table's losses differ only by what a setting changes (they used to fall row by row)."""
    model, tokenizer = tiny
    rows = {(r["amp"], r["checkpointing"], r["frozen"]): r
            for r in amp_and_checkpointing(model, tokenizer, batch_size=2, seq_len=16, repeats=2)}
    for r in rows.values():  # every round of a setting steps from the same weights on the same batch
        assert len(set(r["losses"])) == 1 and len(r["losses"]) == 3  # the memory round, then 2 timed rounds
    fp32 = rows[("off", False, False)]["loss"]
    # the same forward in fp32: checkpointing recomputes it, freezing only skips gradients
    assert rows[("off", True, False)]["loss"] == pytest.approx(fp32, rel=1e-6)
    assert rows[("off", False, True)]["loss"] == fp32
    for key in (("bf16", False, False), ("bf16", True, False)):
        assert rows[key]["loss"] != fp32 and rows[key]["loss"] == pytest.approx(fp32, rel=5e-3)
    # no gradient for the (V, H) embedding matrix and no decoder weight gradient
    assert rows[("off", False, True)]["peak_bytes"] < rows[("off", False, False)]["peak_bytes"]
    assert rows[("off", False, True)]["flops"] < rows[("off", False, False)]["flops"]


def test_step_gemms_add_up_to_the_flops_formula():
    from transformers import BertConfig

    from mlm_core.costs import step_gemms
    from mlm_core.measure import gemm_timer

    cfg = BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                     vocab_size=30522)
    gemms = step_gemms(cfg, batch_size=16, seq_len=64, masked=150)
    ideal = bert_step_flops(hidden=384, layers=6, intermediate=1536, vocab=30522, seq_len=64, tokens=16 * 64,
                            head_rows=150)["total"]
    assert sum(g.flops for g in gemms) == ideal
    frozen = step_gemms(cfg, batch_size=16, seq_len=64, masked=150, word_embeddings_trained=False)
    assert ideal - sum(g.flops for g in frozen) == 2 * 150 * 384 * 30522  # the decoder's weight gradient
    small = step_gemms(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                                  vocab_size=20), batch_size=2, seq_len=4, masked=3)
    assert min(gemm_timer(small)()) > 0 and min(gemm_timer(small, torch.bfloat16)()) >= 0
    from transformers import AlbertConfig

    with pytest.raises(InputError, match="BERT-shaped"):
        step_gemms(AlbertConfig(embedding_size=16, hidden_size=32), batch_size=1, seq_len=8, masked=1)


def test_loop_against_vectorised_agree_and_the_loop_is_bounded():
    rows = loop_vs_vectorised(rows=(2, 8), vocab_sizes=(50, 200), repeats=1)
    assert [(r["vocab"], r["rows"]) for r in rows] == [(50, 2), (50, 8), (200, 2), (200, 8)]
    for r in rows:
        assert r["loss_diff"] < 1e-5 and r["loop_ms"] > 0 and r["vectorised_ms"] > 0 and r["ratio"] > 0
    with pytest.raises(InputError, match="zeros"):
        loop_vs_vectorised(rows=(1024,), vocab_sizes=(30522,))


def test_step_time_breakdown_accounts_for_the_step(tiny):
    model, tokenizer = tiny
    rows = step_time_breakdown(model, tokenizer, batch_size=2, seq_len=16)
    assert sorted(r["category"] for r in rows) == sorted(STEP_CATEGORIES)
    by = {r["category"]: r for r in rows}
    assert by["matrix multiplies"]["ms"] > 0 and by["optimizer (AdamW)"]["ms"] > 0
    assert by["embedding gradient"]["ms"] > 0 and by["layer norm"]["ms"] > 0
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=0.05)
    assert rows == sorted(rows, key=lambda r: -r["ms"])


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
    times = median_times({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, warmup=1, repeats=2,
                         before={"b": lambda: calls.append("reset b")})
    assert calls == ["a", "reset b", "b"] * 3
    cpu = {}
    median_times({"a": lambda: sum(range(10_000))}, warmup=0, repeats=3, cpu_times=cpu)
    assert len(cpu["a"]) == 3 and min(cpu["a"]) >= 0
    assert set(times) == {"a", "b"} and all(len(v) == 2 and min(v) >= 0 for v in times.values())
    assert paired_ratio([2.0, 9.0, 4.0], [1.0, 3.0, 2.0]) == 2.0


# ------------------------------------------------------------------ many sessions, one process (issue 16, item 1)
TWO_PROFILERS = """
import threading
from mlm_core.measure import peak_memory_bytes

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


def test_a_second_measurement_waits_in_line_and_is_told_busy_only_after_its_wait():
    import threading

    from mlm_core.measure import MeasurementBusyError, exclusive_measurement

    inside, release = threading.Event(), threading.Event()

    def hold():
        with exclusive_measurement():
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        with pytest.raises(MeasurementBusyError, match="Another heavy computation is running"):
            with exclusive_measurement(wait_s=0.05):
                pass
    finally:
        release.set()
        holder.join()
    with exclusive_measurement(wait_s=0.05):  # free again once the first one ended
        pass


def test_measurements_take_fair_turns_one_place_per_client():
    """Issue 29 item 3: one global lock, a 2 s wait, then "busy": a student pressing a 55 s measurement again and
    again kept every other student out. Now a queue: first come, first served, one place per client (tabs do
    not buy turns), a client who presses again goes behind those who waited, and each waiter is told how many
    are ahead."""
    import threading

    from mlm_core.measure import MeasurementBusyError, MeasurementQueue

    queue = MeasurementQueue()
    order, told = [], {}
    hog_inside, hog_release = threading.Event(), threading.Event()

    def measure(client, hold=None, inside=None):
        with queue.turn(client, wait_s=30, on_wait=lambda ahead: told.setdefault(client, []).append(ahead)):
            order.append(client)
            if inside is not None:
                inside.set()
            if hold is not None:
                hold.wait(30)

    hog = threading.Thread(target=measure, args=("ip:hog", hog_release, hog_inside))
    hog.start()
    assert hog_inside.wait(10)
    with pytest.raises(MeasurementBusyError, match="already have a heavy computation"):  # a second tab of the hog
        with queue.turn("ip:hog", wait_s=30):
            pass
    waiters = []
    for name in ("ip:a", "ip:b"):
        t = threading.Thread(target=measure, args=(name,))
        t.start()
        waiters.append(t)
        for _ in range(200):  # until it is in line
            if queue.waiting() == len(waiters):
                break
            time.sleep(0.01)
    assert queue.waiting() == 2
    hog_release.set()
    hog.join(10)
    again = threading.Thread(target=measure, args=("ip:hog",))  # presses again at once: goes to the back
    again.start()
    for t in (*waiters, again):
        t.join(30)
    assert order[0] == "ip:hog" and order[1:3] == ["ip:a", "ip:b"]
    assert told["ip:a"][0] == 1 and told["ip:b"][0] == 2  # then fewer ahead, as those ahead are done
    assert told["ip:b"] == sorted(told["ip:b"], reverse=True)
    assert queue.waiting() == 0


def test_a_full_queue_says_so_and_a_turn_can_be_reentered():
    import threading

    from mlm_core.measure import MeasurementBusyError, MeasurementQueue

    queue = MeasurementQueue(max_waiting=1)
    inside, release = threading.Event(), threading.Event()

    def hold():
        with queue.turn("ip:1"):
            with queue.turn("ip:1"):  # the lesson's own turn, inside the page's: the same thread goes on
                inside.set()
                release.wait(10)

    threads = [threading.Thread(target=hold)]
    threads[0].start()
    assert inside.wait(10)
    threads.append(threading.Thread(target=lambda: queue.turn("ip:2", wait_s=10).__enter__()))
    threads[1].start()
    for _ in range(200):
        if queue.waiting() == 1:
            break
        time.sleep(0.01)
    with pytest.raises(MeasurementBusyError, match="already waiting"):
        with queue.turn("ip:3"):
            pass
    release.set()
    for t in threads:
        t.join(10)
