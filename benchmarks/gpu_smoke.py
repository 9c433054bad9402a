"""GPU smoke run: a few bf16 training steps of MLM Lab's own loop, with tokens/s, peak memory and MFU.

    python benchmarks/gpu_smoke.py                      # CUDA: default model + a bert-base config, bf16
    python benchmarks/gpu_smoke.py --peak-tflops 312    # an A100's dense bf16 peak instead
    python benchmarks/gpu_smoke.py --device cpu --amp off --models tiny-random,default --steps 20
                                                        # the same measurement on a CPU

Optional (the issue says so): run it on a machine with a CUDA GPU and record its output. It never
runs in CI. The steps are `mlm_core.training.train` (masking, gathered head, full CE, AdamW), so
the number is what the Training page and `python -m mlm_core train` get.

MFU = achieved model FLOP/s / the card's dense bf16 peak. The FLOPs of one step are counted
from the shapes: 3 x (forward) for forward + backward, where the forward is the encoder's
matmuls at every token (12 L H^2 per token for attention projections and the MLP with I = 4H
in general 2 L (4 H^2 + 2 H I)), attention scores and values (4 L T H per token), and the head on
the M masked rows only (2 H^2 + 2 H V per row). Embedding look-ups count as free. The count is
`mlm_core.costs.bert_step_flops`, the one the Efficiency page and the other benchmarks use.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python benchmarks/gpu_smoke.py`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import BertConfig, BertForMaskedLM  # noqa: E402

from mlm_core.bundled import load_default_tokenizer, workshop_sentences  # noqa: E402
from mlm_core.costs import config_step_flops  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.training import TrainConfig, train  # noqa: E402

H100_H200_BF16_DENSE_TFLOPS = 989.0  # NVIDIA H100/H200 SXM, dense bf16 (the 1,979 figure is with sparsity)


def step_flops(config, batch: int, seq_len: int, tokens: float, masked: float) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward) from the config's shapes."""
    return config_step_flops(config, seq_len=seq_len, tokens=tokens, head_rows=masked)["total"]


def load(name: str, device):
    if name == "bert-base":  # bert-base-uncased's shapes with random weights: no download needed
        tokenizer = load_default_tokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer)))
        return model.to(device).eval(), tokenizer
    return load_masked_lm(None if name == "default" else name, device=device)


def measure(name: str, args) -> dict:
    device = torch.device(args.device)
    model, tokenizer = load(name, device)
    config = TrainConfig(steps=args.warmup + args.steps, batch_size=args.batch, seq_len=args.seq_len,
                         learning_rate=5e-5, warmup_steps=0, amp=args.amp,
                         gradient_checkpointing=args.checkpointing, eval_every=10**6, eval_max_chunks=8,
                         probe_sentences=("The cat sat on the [MASK].",), seed=0)
    texts = workshop_sentences() * 4  # enough chunks that no batch repeats within the run
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    wall = time.perf_counter()
    result = train(model, tokenizer, texts, config)
    wall = time.perf_counter() - wall
    timed = result.steps[args.warmup:]  # the first steps include allocator and kernel warm-up
    seconds = sum(r["tokens"] / r["tokens_per_s"] for r in timed if r.get("tokens_per_s"))
    tokens = sum(r["tokens"] for r in timed)
    masked = sum(r["masked_tokens"] for r in timed)
    row = {
        "model": name,
        "params": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
        "device": str(device),
        "amp": args.amp,
        "batch": args.batch,
        "seq_len": args.seq_len,
        "timed_steps": len(timed),
        "tokens_per_s": tokens / seconds if seconds else None,
        "step_ms": 1000 * seconds / max(1, len(timed)),
        "final_loss": result.steps[-1]["loss"],
        "wall_s": wall,
    }
    if device.type == "cuda":
        row["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        flops = sum(step_flops(model.config, args.batch, args.seq_len, r["tokens"], r["masked_tokens"])
                    for r in timed)
        row["model_tflops"] = flops / seconds / 1e12 if seconds else None
        row["mfu"] = row["model_tflops"] / args.peak_tflops if row["model_tflops"] else None
    else:
        try:
            import resource

            row["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        except ImportError:  # pragma: no cover - Windows
            pass
    del model, result
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="default,bert-base",
                        help="comma-separated: default, bert-base, tiny-random, or a local folder")
    parser.add_argument("--amp", default=None, choices=["off", "bf16", "fp16"],
                        help="default: bf16 on CUDA, off on CPU")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    parser.add_argument("--peak-tflops", type=float, default=H100_H200_BF16_DENSE_TFLOPS,
                        help="the card's dense bf16 peak, for MFU (default: H100/H200 SXM, 989)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    args.amp = args.amp or ("bf16" if args.device.startswith("cuda") else "off")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("No CUDA device here: run this on a GPU machine, or pass --device cpu.", file=sys.stderr)
        return 2

    print(f"torch {torch.__version__} · {platform.platform()}")
    if args.device.startswith("cuda"):
        print(f"GPU: {torch.cuda.get_device_name(torch.device(args.device))} · assumed dense bf16 peak "
              f"{args.peak_tflops:g} TFLOP/s (H100/H200 SXM class: {H100_H200_BF16_DENSE_TFLOPS:g}); "
              "MFU is measured against it")
    else:
        print(f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"batch {args.batch} x {args.seq_len} tokens, amp {args.amp}, {args.warmup} warm-up + "
          f"{args.steps} timed steps, checkpointing {'on' if args.checkpointing else 'off'}")
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        row = measure(name, args)
        rows.append(row)
        line = (f"{name:>12}: {row['params'] / 1e6:7.1f} M params  {row['tokens_per_s']:>10,.0f} tokens/s  "
                f"{row['step_ms']:8.1f} ms/step  loss {row['final_loss']:.3f}")
        if "peak_memory_gib" in row:
            line += f"  peak {row['peak_memory_gib']:.2f} GiB  {row['model_tflops']:.1f} TFLOP/s  MFU {row['mfu']:.1%}"
        elif "peak_rss_gib" in row:
            line += f"  peak RSS {row['peak_rss_gib']:.2f} GiB"
        print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2), encoding="utf-8")
    return 0 if all(r["tokens_per_s"] and math.isfinite(r["tokens_per_s"]) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
