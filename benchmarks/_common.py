"""The benchmark harness: set-up, timing, targets, tables and JSON.

Every benchmark measures MLM Lab against a baseline *in the same run* and reports the ratio,
because a shared machine's absolute speed changes from minute to minute. Contenders run
round-robin (A, B, A, B, ...) after a warm-up (``mlm_core.measure.median_times``), so a burst
of load from elsewhere hits both alike, and the headline ratio is the median of the per-round
ratios. Peak memory: ``torch.cuda.max_memory_allocated`` on a GPU; on a CPU, the largest running
sum of the allocation and free events that ``torch.profiler`` records with ``profile_memory=True``
(``mlm_core.measure.peak_memory_bytes``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Offline, like the tests: nothing here may reach the Hugging Face hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from mlm_core.measure import human_bytes, median, median_times, paired_ratio, peak_memory_bytes  # noqa: E402,F401


@dataclass
class Target:
    """One claim of the issue, measured: ``value`` against ``bound`` in the direction ``op``."""

    name: str  # e.g. "P1 time ratio, bert-base head"
    value: float
    op: str  # ">=", "<=" or "<"
    bound: float
    unit: str = "×"
    note: str = ""

    @property
    def met(self) -> bool:
        if self.value != self.value:  # NaN never meets a target
            return False
        return {">=": self.value >= self.bound, "<=": self.value <= self.bound,
                "<": self.value < self.bound}[self.op]

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


@dataclass
class Result:
    """What one benchmark writes: its settings, its table and its targets."""

    name: str  # "p1_head_loss"
    title: str
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    columns: list[str]
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    finished: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S %Z"))  # when the Result was built
    seconds: float = 0.0
    machine: dict[str, Any] = field(default_factory=lambda: machine_info())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["targets"] = [t.row() for t in self.targets]
        return out


def machine_info() -> dict[str, Any]:
    """The facts a reader needs to compare runs: CPU, cores, load, library versions, device."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers

    info = {
        "cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
        "platform": platform.platform(), "device": device_name(),
    }
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def compare(fns: Mapping[str, Callable[[], Any]], *, warmup: int = 1, repeats: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each contender, interleaved (see the module docstring)."""
    return median_times(fns, warmup=warmup, repeats=repeats, device=device())


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3g}"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], markdown: bool = False) -> str:
    """A plain-text (or Markdown) table of ``rows`` restricted to ``columns``."""
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


TIGHT_UNITS = ("×", "s", "%")  # written against the number (1.5×, 0.3s, 75%); any other unit after a space


def with_unit(number: str, unit: str) -> str:
    """``number`` and its unit as RESULTS.md writes them: '75%', '0.3s', '60 MB', '2.5 nats'.

    >>> with_unit("60", "MB"), with_unit("75", "%"), with_unit("3", "")
    ('60 MB', '75%', '3')
    """
    return number + (unit if unit in TIGHT_UNITS else (" " + unit if unit else ""))


def target_line(t: Target) -> str:
    value = with_unit(fmt(t.value), t.unit)
    bound = with_unit(fmt(t.bound), t.unit)
    note = f" ({t.note})" if t.note else ""
    return f"{'MET   ' if t.met else 'MISSED'}  {t.name}: {value} (target {t.op} {bound}){note}"


def report(result: Result, write: bool = True) -> Result:
    """Print the table and the targets, and write ``benchmarks/results/<name>.json``."""
    print(f"\n== {result.title} ==")
    print("config: " + ", ".join(f"{k}={v}" for k, v in result.config.items()))
    print(table(result.rows, result.columns))
    for note in result.notes:
        print("note: " + note)
    for t in result.targets:
        print(target_line(t))
    print(f"({result.seconds:.0f} s)")
    if write:
        result.config.setdefault("threads", torch.get_num_threads())
        # Smoke runs (--quick) never overwrite real results, nor land in the repository.
        folder = Path(tempfile.gettempdir()) / "mlmlab_benchmarks_quick" if result.config.get("quick") else RESULTS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{result.name}.json"
        path.write_text(json.dumps(result.to_json(), indent=2, default=_json_default) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return result


def _json_default(value: Any):
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (torch.dtype, torch.device, Path)):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def cli(run: Callable[..., Result], description: str) -> None:
    """``python -m benchmarks.pN_x [--quick] [--repeats N] [--no-write]``."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few seconds")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per contender")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write results/*.json")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own choice; `python -m benchmarks` uses 1)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kwargs: dict[str, Any] = {"quick": args.quick}
    if args.repeats is not None:
        kwargs["repeats"] = args.repeats
    start = time.perf_counter()
    result = run(**kwargs)
    result.seconds = time.perf_counter() - start
    report(result, write=not args.no_write)


def masked_batch(tokenizer, batch_size: int, seq_len: int, seed: int = 0, mlm_probability: float = 0.15):
    """Full-length rows of the workshop corpus, masked as BERT does (15%, 80/10/10).

    Returns (input_ids, attention_mask, labels, original_ids), each (B, T).
    """
    from mlm_core.bundled import workshop_sentences
    from mlm_core.data import encode, mask_batch
    from mlm_core.masking import MaskingConfig

    sentences = workshop_sentences()
    per_row = max(4, seq_len // 6)  # enough sentences to fill T tokens
    texts = [" ".join(sentences[(i * per_row + j) % len(sentences)] for j in range(per_row)) for i in range(batch_size)]
    encoded = encode(tokenizer, texts, max_length=seq_len)
    result = mask_batch(tokenizer, encoded, MaskingConfig(mlm_probability=mlm_probability),
                        torch.Generator().manual_seed(seed))
    return result.input_ids, encoded.attention_mask, result.labels, encoded.input_ids
