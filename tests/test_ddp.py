"""Two gloo processes under torchrun, each accumulating two micro-batches, reproduce one process
taking the whole batch at once.

Both runs see the same global batch and the same masks (seeded by the global example index), with
dropout off and one thread per process. The four micro-batches hold different numbers of masked
tokens, so only a loss normalised by the global count (all-reduced before the backward passes)
matches: the per-step losses agree to 1e-5 and the final weights to a relative 1e-4 (only the
order of floating-point sums differs). A mean of micro-batch means fails both.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SMALL_CORPUS as CORPUS
from tests.conftest import small_model, small_tokenizer

ROOT = Path(__file__).resolve().parent.parent
STEPS = 4


def _run(args, tmp_path, name):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ddp")
    tokenizer = small_tokenizer()
    model = small_model(tokenizer, seed=3)
    model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    common = ["train", "--model", str(tmp_path / "base"), "--corpus", str(tmp_path / "corpus.txt"),
              "--steps", str(STEPS), "--batch-size", "8", "--seq-len", "24", "--learning-rate", "1e-3",
              "--warmup-steps", "1", "--eval-every", "100", "--no-dropout", "--no-progress", "--seed", "5",
              "--device", "cpu", "--loss", "full"]
    from mlm_core import cli

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 in the torchrun processes
    try:  # in this process: one fewer interpreter start on a 2-core CI machine
        assert cli.main([*common, "--grad-accum-steps", "1", "--output", str(tmp_path / "one")]) == 0
    finally:
        torch.set_num_threads(threads)
    two = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=2",
                "-m", "mlm_core", *common, "--grad-accum-steps", "2", "--output", "two"],
               tmp_path, "2 gloo processes")
    return tmp_path, two


def _curves(path):
    return json.loads((path / "curves.json").read_text(encoding="utf-8"))


def test_two_processes_with_uneven_micro_batches_match_one_process(runs):
    tmp_path, _ = runs
    one, two = _curves(tmp_path / "one"), _curves(tmp_path / "two")
    assert two["world_size"] == 2 and one["world_size"] == 1
    loss_one = [r["loss"] for r in one["steps"]]
    loss_two = [r["loss"] for r in two["steps"]]
    assert len(loss_one) == len(loss_two) == STEPS
    assert [r["masked_tokens"] for r in one["steps"]] == [r["masked_tokens"] for r in two["steps"]]
    assert loss_two == pytest.approx(loss_one, abs=1e-5)

    from safetensors.torch import load_file

    w1 = load_file(tmp_path / "one" / "model" / "model.safetensors")
    w2 = load_file(tmp_path / "two" / "model" / "model.safetensors")
    base = load_file(tmp_path / "base" / "model.safetensors")
    assert w1.keys() == w2.keys()
    moved = 0
    for key in w1:
        # Relative 1e-4, with an absolute floor far below one AdamW step (lr 1e-3): the attention key
        # biases start at 0 and have an exact gradient of 0, so they hold only rounding noise.
        assert float((w1[key] - w2[key]).norm()) < 1e-4 * float(w1[key].norm()) + 1e-7, key
        moved += int(key in base and not torch.equal(base[key], w1[key]))
    assert moved > 0  # training changed the weights


def test_only_rank_zero_logs_and_writes(runs):
    tmp_path, two = runs
    assert two.stderr.count("done: ") == 1 and "over 2 processes" in two.stderr
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["config.json", "curves.csv", "curves.json", "model"]
