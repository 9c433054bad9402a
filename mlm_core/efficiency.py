"""What each arrow of the flow costs: live measurements of time and memory, on the user's own machine.

The MLM loss only needs the M selected positions (about 15% of the B × T tokens), yet the simplest
code computes the head's V scores at every position. This module measures, on a real model:

- ``loss_paths``: the per-position loop, the vectorised loss with ``ignore_index`` (what Hugging
  Face's ``BertForMaskedLM(labels=...)`` does) and gather-before-head (``head.masked_lm_logits``):
  the same loss value, three costs;
- ``logits_size``: how big the full ``(B, T, V)`` logits tensor is against the gathered ``(M, V)``
  one (pure arithmetic);
- ``amp_and_checkpointing``: a training step with bf16 autocast and gradient checkpointing on and
  off: time per step and peak memory.

The same timing and memory helpers (``median_times``, ``peak_memory_bytes``) serve the
benchmarks in ``benchmarks/``. No timing here is ever asserted in a test.

Shapes: B = batch, T = sequence length, H = hidden size, V = vocabulary, M = selected positions.

>>> logits_size(8, 64, 30522)["full_bytes"]  # 8 × 64 × 30,522 × 4 bytes
62509056
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mlm_core import seeds
from mlm_core.bundled import workshop_sentences
from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError, MLMLabError
from mlm_core.head import encoder_states, head_parts
from mlm_core.losses import full_cross_entropy, loop_cross_entropy
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.training import TrainConfig, TrainStep

BYTES_PER_VALUE = {"fp32": 4, "bf16": 2, "fp16": 2}
MASK_RATE = 0.15  # BERT's selection probability: the share of positions the loss needs

LOSS_PATHS = ("loop", "vectorised", "gathered")
PATH_LABELS = {
    "loop": "per-position loop",
    "vectorised": "vectorised, ignore_index (Hugging Face)",
    "gathered": "gather before the head (MLM Lab)",
}
LOOP_MAX_ROWS = 256  # the loop's backward costs O(M² · V) (each row's grad is a full (M, V) tensor): cap it


# --------------------------------------------------------------------------------------------
# One measurement at a time: many students share one server process
# --------------------------------------------------------------------------------------------


class MeasurementBusyError(MLMLabError):
    """Another session is measuring right now; the message says to try again."""


# torch.profiler is process-wide: two profilers running at once in one process crash the
# interpreter (torch 2.13: a segmentation fault, exit 139, every time). Every use in MLM Lab goes
# through ``exclusive_profiler``.
_PROFILER_LOCK = threading.Lock()
# Timed measurements share the CPU: two at once would slow each other and both report nonsense.
_MEASURE_LOCK = threading.Lock()
PROFILER_WAIT_S = 120.0  # a profiled call waits this long for another one to end
MEASURE_WAIT_S = 2.0  # a page's measurement waits this long before it says "busy"
BUSY_MESSAGE = ("Another measurement is running on this server (perhaps another student pressed Measure): "
                "measurements take turns so that their times stay honest. Try again in a few seconds.")


@contextlib.contextmanager
def exclusive_profiler(wait_s: float = PROFILER_WAIT_S) -> Iterator[None]:
    """Hold the process-wide profiler lock; raise ``MeasurementBusyError`` after ``wait_s`` seconds.

    Also refuses when a profiler that did not take this lock is already running (someone's own
    ``torch.profiler.profile`` around the server), rather than start a second one and crash.
    """
    if not _PROFILER_LOCK.acquire(timeout=wait_s):
        raise MeasurementBusyError(BUSY_MESSAGE)
    try:
        if torch.autograd.profiler._is_profiler_enabled:
            raise MeasurementBusyError("A profiler is already running in this server process: memory cannot be "
                                       "measured until it stops.")
        yield
    finally:
        _PROFILER_LOCK.release()


@contextlib.contextmanager
def exclusive_measurement(wait_s: float = MEASURE_WAIT_S) -> Iterator[None]:
    """One timed measurement at a time in this process; the second caller is told the server is busy."""
    if not _MEASURE_LOCK.acquire(timeout=wait_s):
        raise MeasurementBusyError(BUSY_MESSAGE)
    try:
        yield
    finally:
        _MEASURE_LOCK.release()


# --------------------------------------------------------------------------------------------
# Measuring: median time over interleaved repeats, and peak memory
# --------------------------------------------------------------------------------------------


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count); NaN for none."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return float("nan")
    return ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])


def paired_ratio(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Median of the per-round ratios slow[i] / fast[i]: rounds ran back to back, so they shared the load.

    >>> paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
    2.0
    """
    return median([a / b for a, b in zip(slow, fast) if b > 0])


def median_times(fns: Mapping[str, Callable[[], Any]], *, warmup: int = 1, repeats: int = 3,
                 device: torch.device | None = None,
                 before: Mapping[str, Callable[[], Any]] | None = None,
                 cpu_times: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Seconds per call of each function, ``repeats`` times, run round-robin after ``warmup`` rounds.

    Round-robin (A, B, A, B, ...) rather than A, A, ..., B, B, ...: on a shared, noisy machine a
    burst of load then hits every contender alike, so their ratio stays meaningful. ``before[name]``,
    when given, runs before each call of ``fns[name]``, outside the clock (to reset its state).
    ``cpu_times``, when given, is filled with the process's CPU seconds per call as well: with one
    torch thread, CPU time hardly depends on what else the machine runs (wall time does).
    """
    before = before or {}
    for _ in range(max(0, warmup)):
        for name, fn in fns.items():
            if name in before:
                before[name]()
            fn()
            _sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            if name in before:
                before[name]()
            _sync(device)
            cpu, start = time.process_time(), time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
            if cpu_times is not None:
                cpu_times.setdefault(name, []).append(time.process_time() - cpu)
    return times


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device | str | None = None) -> int:
    """The most memory ``fn`` holds at once beyond what was allocated before it started, in bytes.

    CUDA: ``torch.cuda.max_memory_allocated`` after resetting the peak. CPU: the allocator has no
    peak counter, so ``fn`` runs under ``torch.profiler`` with ``profile_memory=True``, which
    records every allocation (+bytes) and free (−bytes) as an event; the peak is the largest
    running sum of those events in time order. Tensors that existed before (the weights) do not
    count; what ``fn`` returns counts while it is alive. The profiler runs under
    ``exclusive_profiler``: a second thread waits for the first (two at once would crash the process).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        result = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        del result
        return int(peak)
    from torch.profiler import ProfilerActivity, profile

    with exclusive_profiler():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False) as prof:
            result = fn()
            del result
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
              and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        running += int(event.nbytes())
        peak = max(peak, running)
    return int(peak)


def human_bytes(n: float) -> str:
    """1536 → '1.5 KiB' (binary units, as memory is counted)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# --------------------------------------------------------------------------------------------
# The size picture: full logits against gathered logits (pure arithmetic)
# --------------------------------------------------------------------------------------------


def logits_size(batch_size: int, seq_len: int, vocab_size: int, *, mask_rate: float = MASK_RATE,
                masked: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """Bytes of the full ``(B, T, V)`` logits against the gathered ``(M, V)`` ones.

    ``M`` is ``masked`` when given, else ``round(B × T × mask_rate)`` (the expected count). The
    backward pass holds a gradient of the same shape again, so each number doubles in training.

    >>> s = logits_size(2, 4, 10, masked=1)
    >>> s["full_values"], s["gathered_values"], s["full_bytes"], s["ratio"]
    (80, 10, 320, 8.0)
    """
    for name, value in (("batch size", batch_size), ("sequence length", seq_len), ("vocabulary size", vocab_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"The {name} must be a whole number of at least 1, got {value!r}.")
    if dtype not in BYTES_PER_VALUE:
        raise InputError(f"dtype must be one of {', '.join(BYTES_PER_VALUE)}, got {dtype!r}.")
    if masked is None:
        if not 0.0 <= mask_rate <= 1.0:
            raise InputError(f"mask_rate must be between 0 and 1, got {mask_rate!r}.")
        masked = int(round(batch_size * seq_len * mask_rate))
    if not 0 <= masked <= batch_size * seq_len:
        raise InputError(f"masked must be between 0 and B × T = {batch_size * seq_len}, got {masked}.")
    per = BYTES_PER_VALUE[dtype]
    full_values = batch_size * seq_len * vocab_size
    gathered_values = masked * vocab_size
    return {
        "batch_size": batch_size, "seq_len": seq_len, "vocab_size": vocab_size, "masked": masked,
        "dtype": dtype, "bytes_per_value": per,
        "full_values": full_values, "gathered_values": gathered_values,
        "full_bytes": full_values * per, "gathered_bytes": gathered_values * per,
        "ratio": full_values / gathered_values if gathered_values else math.inf,
    }


# --------------------------------------------------------------------------------------------
# Three ways to the same loss
# --------------------------------------------------------------------------------------------


def _split_head(model: nn.Module):
    """(transform, decoder) of a masked-LM head we know how to apply to M rows, from ``head``."""
    head = head_parts(model)  # head is the one place that knows each family's head
    if head is None:
        raise InputError(
            f"{type(model).__name__}'s prediction head is not one MLM Lab can split (BERT, DistilBERT, "
            "RoBERTa and ALBERT are): pick one of those models to measure the three loss paths."
        )
    return head.transform, head.decoder


def _head_params(model: nn.Module) -> list[nn.Parameter]:
    """Parameters of the head (transform + decoder, tied weight included), each once."""
    head = head_parts(model)
    params, seen = [], set()
    modules = [head.decoder]
    owner = getattr(head.transform, "__self__", None)
    if isinstance(head.transform, nn.Module):
        modules.append(head.transform)
    elif isinstance(owner, nn.Module):
        modules.append(owner)
    for module in modules:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def loss_path_functions(transform: Callable, decoder: nn.Module, states: torch.Tensor, labels: torch.Tensor,
                        params: Sequence[torch.Tensor] = (), grads: dict | None = None,
                        ) -> dict[str, Callable[[], tuple[float, int]]]:
    """The three paths as functions: each runs head + loss forward and backward, returns (loss, logits values).

    ``states`` (B, T, H) are the encoder's output, computed once outside; the backward pass goes
    to ``states`` and ``params`` with ``torch.autograd.grad``, so no ``.grad`` of the model is touched.
    With a ``grads`` dict, each path stores its gradients there under its name: ``[d states, d param...]``
    (None for a parameter the loss does not reach), so a test can compare them.
    """

    B, T, H = states.shape
    flat_labels = labels.reshape(-1).to(states.device)  # (B·T,)
    index = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
    targets = flat_labels.index_select(0, index)  # (M,)
    leaf = states.detach().requires_grad_(True)
    inputs = [leaf, *[p for p in params if p.requires_grad]]

    def backward(name: str, loss: torch.Tensor) -> None:
        found = torch.autograd.grad(loss, inputs, allow_unused=True)
        if grads is not None:
            grads[name] = list(found)

    def loop():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        rows = logits.reshape(B * T, -1).index_select(0, index)  # (M, V)
        loss = loop_cross_entropy(rows, targets).loss  # a Python loop over the M rows
        backward("loop", loss)
        return float(loss.detach()), logits.numel()

    def vectorised():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        loss = F.cross_entropy(logits.reshape(B * T, -1).float(), flat_labels, ignore_index=IGNORE_INDEX)
        backward("vectorised", loss)
        return float(loss.detach()), logits.numel()

    def gathered():
        rows = leaf.reshape(B * T, H).index_select(0, index)  # (M, H): gather first
        logits = decoder(transform(rows))  # (M, V): the head on M rows only
        loss = full_cross_entropy(logits, targets).loss
        backward("gathered", loss)
        return float(loss.detach()), logits.numel()

    return {"loop": loop, "vectorised": vectorised, "gathered": gathered}


def _batch(tokenizer, batch_size: int, seq_len: int, seed: int, mask_rate: float = MASK_RATE):
    """A (B, T) batch of workshop sentences, masked as BERT does: (input_ids, attention_mask, labels)."""

    sentences = workshop_sentences()
    text = [" ".join(sentences[(i * 7 + j) % len(sentences)] for j in range(8)) for i in range(batch_size)]
    encoded = encode(tokenizer, text, max_length=seq_len)
    result = mask_batch(tokenizer, encoded, MaskingConfig(mlm_probability=mask_rate),
                        seeds.generator(seed))  # the Loss page's stream: this seed's masks
    return result.input_ids, encoded.attention_mask, result.labels


def _check_sizes(batch_size: int, seq_len: int, repeats: int) -> None:
    if not 1 <= batch_size <= 256:
        raise InputError(f"Batch size must be between 1 and 256, got {batch_size}.")
    if not 8 <= seq_len <= 512:
        raise InputError(f"Sequence length must be between 8 and 512, got {seq_len}.")
    if not 1 <= repeats <= 50:
        raise InputError(f"Repeats must be between 1 and 50, got {repeats}.")


def loss_paths(model: nn.Module, tokenizer, *, batch_size: int = 4, seq_len: int = 64, repeats: int = 3,
               seed: int = 0) -> list[dict[str, Any]]:
    """Time and peak memory of the three loss paths on one masked batch of the workshop corpus.

    The encoder runs once, outside the measurement; each path then runs the head and the loss,
    forward and backward. Returns one dict per path: ``path``, ``label``, ``loss``, ``time_ms``
    (median), ``times_ms``, ``peak_bytes``, ``logits_values`` (how many scores it computed),
    ``speedup`` (against the vectorised path: the median of the per-round ratios, contenders run
    round-robin) and ``loss_diff`` (against the gathered loss).
    The loop is left out when more than ``LOOP_MAX_ROWS`` rows are selected: its backward pass
    builds a full (M, V) gradient for every row, so its cost grows with M².
    """
    _check_sizes(batch_size, seq_len, repeats)
    transform, decoder = _split_head(model)
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = _batch(tokenizer, batch_size, seq_len, seed)
    if int((labels != IGNORE_INDEX).sum()) == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    with exclusive_measurement():
        with torch.no_grad():
            states = encoder_states(model, input_ids, attention_mask).float()  # (B, T, H), once
        fns = loss_path_functions(transform, decoder, states, labels, _head_params(model))
        if int((labels != IGNORE_INDEX).sum()) > LOOP_MAX_ROWS:
            del fns["loop"]  # minutes, not seconds: measured only for small batches
        values = {name: fn() for name, fn in fns.items()}  # also the warm-up
        times = median_times(fns, warmup=0, repeats=repeats, device=device)
        peaks = {name: peak_memory_bytes(fn, device) for name, fn in fns.items()}
    gathered_loss = values["gathered"][0]
    rows = []
    for name in [p for p in LOSS_PATHS if p in fns]:
        t = median(times[name])
        rows.append({
            "path": name, "label": PATH_LABELS[name], "loss": values[name][0],
            "loss_diff": abs(values[name][0] - gathered_loss), "time_ms": t * 1e3,
            "times_ms": [x * 1e3 for x in times[name]], "peak_bytes": peaks[name],
            "logits_values": values[name][1], "speedup": paired_ratio(times["vectorised"], times[name]),
            "batch_size": batch_size, "seq_len": seq_len, "masked": int((labels != IGNORE_INDEX).sum()),
        })
    return rows


# --------------------------------------------------------------------------------------------
# The loop's own cost: the loss alone, where it grows
# --------------------------------------------------------------------------------------------

LOOP_SWEEP_ROWS = (8, 32, 128)  # M: selected rows (a batch of 4 × 64 tokens selects about 38)
LOOP_SWEEP_VOCABS = (1_000, 30_522)  # a toy vocabulary and BERT's
LOOP_SWEEP_BUDGET = 2**29  # M² · V: the loop's backward writes that many zeros; 128² × 30,522 is 0.5 G


def loop_vs_vectorised(*, rows: Sequence[int] = LOOP_SWEEP_ROWS, vocab_sizes: Sequence[int] = LOOP_SWEEP_VOCABS,
                       repeats: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """Cross-entropy on (M, V) scores, forward and backward: the per-position loop against one call.

    No encoder and no head here, only the loss, so the loop's own cost shows. It grows two ways:
    with M, because each row is one Python iteration of about six small kernels forward and as
    many backward; and with M² · V, because the backward of ``logits[i]`` (autograd's
    ``select_backward``) writes a full (M, V) tensor of zeros with one row filled, for each of the
    M rows. The vectorised loss makes one pass over the M · V scores. Returns one row per (V, M):
    ``loop_ms``, ``vectorised_ms`` (medians), ``ratio`` (median of the per-round ratios, loop and
    vectorised run round-robin) and ``loss_diff``. Sizes with M² · V above ``LOOP_SWEEP_BUDGET``
    are refused (seconds per call).

    >>> [r["rows"] for r in loop_vs_vectorised(rows=(2, 4), vocab_sizes=(10,), repeats=1)]
    [2, 4]
    """

    if not 1 <= repeats <= 50:
        raise InputError(f"Repeats must be between 1 and 50, got {repeats}.")
    for m in rows:
        for v in vocab_sizes:
            if isinstance(m, bool) or isinstance(v, bool) or not (isinstance(m, int) and isinstance(v, int)) \
                    or m < 1 or v < 2:
                raise InputError(f"Rows and vocabulary sizes must be whole numbers (M ≥ 1, V ≥ 2), got {m} and {v}.")
            if m * m * v > LOOP_SWEEP_BUDGET:
                raise InputError(f"M = {m} rows with V = {v:,} would make the loop's backward write {m * m * v:,} "
                                 f"zeros (the limit is {LOOP_SWEEP_BUDGET:,}): choose fewer rows or a smaller vocabulary.")
    out = []
    with exclusive_measurement():
        for v in vocab_sizes:
            for m in rows:
                gen = seeds.generator(seed, "loop_sweep", m, v)
                logits = torch.randn(m, v, generator=gen).requires_grad_(True)  # (M, V)
                targets = torch.randint(0, v, (m,), generator=gen)  # (M,)
                losses: dict[str, float] = {}

                def run(name: str, fn: Callable) -> Callable[[], None]:
                    def go() -> None:
                        loss = fn(logits, targets).loss
                        torch.autograd.grad(loss, [logits])
                        losses[name] = float(loss.detach())
                    return go

                times = median_times({"loop": run("loop", loop_cross_entropy),
                                      "vectorised": run("vectorised", full_cross_entropy)},
                                     warmup=1, repeats=repeats)
                out.append({"rows": m, "vocab": v, "loop_ms": median(times["loop"]) * 1e3,
                            "vectorised_ms": median(times["vectorised"]) * 1e3,
                            "ratio": paired_ratio(times["loop"], times["vectorised"]),
                            "loss_diff": abs(losses["loop"] - losses["vectorised"])})
    return out


# --------------------------------------------------------------------------------------------
# A training step, set up several ways: time, memory, and its share of the machine's matmul speed
# --------------------------------------------------------------------------------------------

# (amp, gradient checkpointing, word embeddings frozen)
STEP_SETTINGS = (("off", False, False), ("bf16", False, False), ("off", True, False), ("bf16", True, False),
                 ("off", False, True))


def step_label(amp: str, checkpointing: bool, frozen: bool = False) -> str:
    """A setting as a table shows it: 'bf16, checkpointing on', 'fp32, word embeddings frozen'."""
    label = "bf16" if amp == "bf16" else "fp32"
    if checkpointing:
        label += ", checkpointing on"
    if frozen:
        label += ", word embeddings frozen"
    if not checkpointing and not frozen:
        label += ", checkpointing off"
    return label


def _setting(value: Sequence) -> tuple[str, bool, bool]:
    amp, ckpt, *rest = value
    frozen = bool(rest[0]) if rest else False
    if amp not in ("off", "bf16"):
        raise InputError(f"amp must be 'off' or 'bf16' here, got {amp!r}.")
    return amp, bool(ckpt), frozen


def _snapshot(model: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in (*model.parameters(), *model.buffers())]


@torch.no_grad()
def _restore(model: nn.Module, snapshot: list[torch.Tensor]) -> None:
    for t, saved in zip((*model.parameters(), *model.buffers()), snapshot):
        t.copy_(saved)


def amp_and_checkpointing(model: nn.Module, tokenizer, *, batch_size: int = 4, seq_len: int = 64,
                          repeats: int = 3, seed: int = 0,
                          settings: Sequence[Sequence] = STEP_SETTINGS, mfu: bool = True) -> list[dict[str, Any]]:
    """One training step set up several ways (bf16 autocast, gradient checkpointing, frozen word
    embeddings): time per step, peak memory, loss, and the step's share of the matmul speed.

    Every step is ``training.TrainStep``, the loop's own step (encoder, head on the selected rows,
    loss, backward, clipping, AdamW; dropout seeded as the loop seeds it), on one private copy of
    ``model`` (the caller's model is never changed). Before every step the copy's weights are
    put back to the starting ones, untimed: every set-up, in every round, steps from the same
    weights on the same batch, so the losses differ only by what the set-up changes. One warm-up
    step (AdamW's state is allocated there), one step per setting under the memory profiler (also
    that setting's warm-up), then ``repeats`` rounds, round-robin over the settings. ``time_x`` is
    the median of the per-round ratios against the first setting.

    With ``mfu`` (and a BERT-shaped config), each round also times the step's own matrix
    multiplies alone (``step_gemms``, in the setting's dtype): ``mfu`` is the step's matmul FLOPs
    per second over that matmul-only speed, i.e. matmul-alone time / step time (model FLOPs only:
    checkpointing's recomputed forward is work the model did not need, so it lowers the share).
    ``cpu_time_ms``, ``cpu_time_x`` and ``cpu_mfu`` are the same from the process's CPU time, which a
    busy machine disturbs far less than wall time (meaningful with one torch thread).
    """

    _check_sizes(batch_size, seq_len, repeats)
    chosen = [_setting(s) for s in settings]
    if not chosen:
        raise InputError("Choose at least one setting to measure.")
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = _batch(tokenizer, batch_size, seq_len, seed)
    masked = int((labels != IGNORE_INDEX).sum())
    if masked == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    gemms = {}
    if mfu:
        try:
            for _, _, frozen in chosen:
                gemms[frozen] = step_gemms(model.config, batch_size=batch_size, seq_len=seq_len, masked=masked,
                                           word_embeddings_trained=not frozen)
        except InputError:
            gemms = {}  # not a BERT-shaped model: times and memory only
    with exclusive_measurement():
        work = copy.deepcopy(model).to(device=device, dtype=torch.float32)
        start = _snapshot(work)
        first_amp, first_ckpt, first_frozen = chosen[0]
        step = TrainStep(work, TrainConfig(amp=first_amp, learning_rate=1e-5, seed=seed), device)
        losses: dict[int, list[float]] = {i: [] for i in range(len(chosen))}

        def prepare(i: int) -> Callable[[], None]:
            amp, ckpt, frozen = chosen[i]

            def before() -> None:
                step.configure(amp=amp, gradient_checkpointing=ckpt, freeze=frozen)
                _restore(work, start)
                step.release_gradients()  # so the memory profiler sees no frees of older tensors
            return before

        def run(i: int) -> Callable[[], None]:
            return lambda: losses[i].append(step(input_ids, attention_mask, labels, seed=seed))

        try:
            prepare(0)()
            step(input_ids, attention_mask, labels, seed=seed)  # warm-up: AdamW's state is allocated here
            peaks = {}
            for i in range(len(chosen)):
                prepare(i)()
                peaks[i] = peak_memory_bytes(run(i), device)  # also this setting's warm-up
            fns: dict[str, Callable[[], Any]] = {str(i): run(i) for i in range(len(chosen))}
            before = {str(i): prepare(i) for i in range(len(chosen))}
            timers = {}
            for amp, _, frozen in chosen:
                if frozen in gemms and (amp, frozen) not in timers:
                    timers[(amp, frozen)] = gemm_timer(gemms[frozen], torch.bfloat16 if amp == "bf16" else torch.float32,
                                                       device=device)
            for timer in timers.values():
                timer()  # warm-up: the first call of each product pays for its set-up
            gemm_times: dict[tuple[str, bool], list[tuple[float, float]]] = {key: [] for key in timers}
            for key, timer in timers.items():
                fns[f"gemm {key}"] = (lambda k=key, t=timer: gemm_times[k].append(t()))
            cpu_times: dict[str, list[float]] = {}
            times = median_times(fns, warmup=0, repeats=repeats, device=device, before=before, cpu_times=cpu_times)
        finally:
            del work, step
    base, cpu_base = times["0"], cpu_times["0"]
    rows = []
    for i, (amp, ckpt, frozen) in enumerate(chosen):
        t, c = times[str(i)], cpu_times[str(i)]
        row = {
            "amp": amp, "checkpointing": ckpt, "frozen": frozen, "label": step_label(amp, ckpt, frozen),
            "time_ms": median(t) * 1e3, "times_ms": [x * 1e3 for x in t], "time_x": paired_ratio(t, base),
            "cpu_time_ms": median(c) * 1e3, "cpu_time_x": paired_ratio(c, cpu_base),
            "peak_bytes": peaks[i], "mem_x": peaks[i] / peaks[0] if peaks[0] else math.nan,
            "loss": losses[i][-1], "losses": list(losses[i]), "batch_size": batch_size, "seq_len": seq_len,
            "masked": masked,
        }
        if (amp, frozen) in gemm_times:
            # one total per round, measured in the same rounds as the steps
            g = [w for w, _ in gemm_times[(amp, frozen)]]
            gc = [x for _, x in gemm_times[(amp, frozen)]]
            flops = sum(x.flops for x in gemms[frozen])
            row.update(flops=flops, gemm_ms=median(g) * 1e3, achieved_gflops=flops / median(t) / 1e9,
                       matmul_gflops=flops / median(g) / 1e9, mfu=median([a / b for a, b in zip(g, t) if b > 0]),
                       cpu_mfu=median([a / b for a, b in zip(gc, c) if b > 0]))
        rows.append(row)
    return rows


def step_time_breakdown(model: nn.Module, tokenizer, *, amp: str = "off", batch_size: int = 4, seq_len: int = 64,
                        seed: int = 0, frozen: bool = False) -> list[dict[str, Any]]:
    """Where one training step's time goes, from ``torch.profiler``: matmuls, softmax, dropout, ...

    One warm-up step, then one step (``training.TrainStep``, as in ``amp_and_checkpointing``) under
    the profiler. Each operator's own time (its children's excluded) goes to one category
    (``STEP_CATEGORIES``); what no operator accounts for is Python and framework overhead. Returns
    one row per category, largest first: ``category``, ``ms``, ``share`` (of the profiled step).
    The profiler adds some overhead of its own, mostly to the many small operators.
    """
    from torch.profiler import ProfilerActivity, profile

    _check_sizes(batch_size, seq_len, 1)
    amp, _, frozen = _setting((amp, False, frozen))
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = _batch(tokenizer, batch_size, seq_len, seed)
    if int((labels != IGNORE_INDEX).sum()) == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    with exclusive_measurement():
        work = copy.deepcopy(model).to(device=device, dtype=torch.float32)
        step = TrainStep(work, TrainConfig(amp=amp, learning_rate=1e-5, seed=seed,
                                           freeze_word_embeddings=frozen), device)
        step(input_ids, attention_mask, labels, seed=seed)  # warm-up
        with exclusive_profiler():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                started = time.perf_counter()
                step(input_ids, attention_mask, labels, seed=seed)
                wall = time.perf_counter() - started
        del work, step
    return _categorise(prof.events(), wall)


STEP_CATEGORIES = ("matrix multiplies", "softmax (attention) and cross-entropy", "dropout", "layer norm", "GELU",
                   "embedding gradient", "optimizer (AdamW)", "gradient clipping", "casts and copies",
                   "other tensor operations", "Python and framework overhead")
_OPS = {
    "matrix multiplies": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                          "aten::_scaled_dot_product_flash_attention_for_cpu",
                          "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    "softmax (attention) and cross-entropy": ("aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
                                  "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                                  "aten::nll_loss_backward"),
    "dropout": ("aten::bernoulli_", "aten::native_dropout", "aten::native_dropout_backward"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "GELU": ("aten::gelu", "aten::gelu_backward"),
    "embedding gradient": ("aten::embedding_dense_backward", "aten::embedding_backward"),
    "gradient clipping": ("aten::_foreach_norm", "aten::linalg_vector_norm", "aten::_foreach_mul_"),
    "casts and copies": ("aten::copy_", "aten::_to_copy", "aten::clone"),
}
_CATEGORY_OF = {op: category for category, ops in _OPS.items() for op in ops}
# Composite operators: what runs inside them belongs to them (SDPA's _safe_softmax checks rows with
# `all`, dropout multiplies by its mask, ...), unless it has a category of its own (a cast is a cast).
_PARENTS = {
    "softmax (attention) and cross-entropy": ("aten::_safe_softmax", "aten::softmax", "aten::log_softmax",
                                              "aten::cross_entropy_loss", "aten::nll_loss", "aten::nll_loss_nd"),
    "dropout": ("aten::dropout", "aten::native_dropout", "aten::feature_dropout"),
    "layer norm": ("aten::layer_norm",),
    "GELU": ("aten::gelu",),
}
_PARENT_CATEGORY = {op: category for category, ops in _PARENTS.items() for op in ops}


def _categorise(events, wall_s: float) -> list[dict[str, Any]]:
    """Sum the operators' own times by category; walk up the call tree for optimizer and embedding work."""
    totals = dict.fromkeys(STEP_CATEGORIES, 0.0)
    covered = 0.0
    for event in events:
        if getattr(event, "device_type", None) is not None and event.device_type != torch.autograd.DeviceType.CPU:
            continue
        own = event.self_cpu_time_total / 1e6  # seconds
        if event.cpu_parent is None:
            covered += event.cpu_time_total / 1e6
        if own <= 0:
            continue
        category = _CATEGORY_OF.get(event.name)
        parent = event.cpu_parent
        while parent is not None and category != "embedding gradient":
            if parent.name.startswith("Optimizer."):
                category = "optimizer (AdamW)"
                break
            if "EmbeddingBackward" in parent.name:
                category = "embedding gradient"
                break
            category = category or _PARENT_CATEGORY.get(parent.name)  # the nearest composite that has one
            parent = parent.cpu_parent
        if event.name.startswith("Optimizer."):
            category = "optimizer (AdamW)"
        totals[category or "other tensor operations"] += own
    totals["Python and framework overhead"] = max(0.0, wall_s - covered)
    rows = [{"category": c, "ms": totals[c] * 1e3, "share": totals[c] / wall_s if wall_s > 0 else math.nan}
            for c in STEP_CATEGORIES]
    return sorted(rows, key=lambda r: -r["ms"])


# --------------------------------------------------------------------------------------------
# FLOPs: what the gathered head saves in a whole training step, ideally
# --------------------------------------------------------------------------------------------


def bert_step_flops(*, hidden: int, layers: int, intermediate: int, vocab: int, seq_len: int,
                    tokens: int, head_rows: int) -> dict[str, float]:
    """Matrix-multiply FLOPs of one training step (forward + backward ≈ 3 × forward) of a BERT MLM.

    Per token and layer, forward: Q, K, V and output projections ``8·H²``, the feed-forward
    ``4·H·I``, attention scores and their use ``4·T·H``. The head per row: transform ``2·H²`` and
    decoder ``2·H·V``. The encoder runs on all ``tokens``; the head on ``head_rows`` of them
    (all of them for Hugging Face's ``labels=`` path, M for the gathered one). Per token this is
    PaLM's count (Chowdhery et al. 2022, Appendix B: 6N + 12·L·H·Q·T, attention's Q·Kᵀ and P·V both
    counted, none halved: BERT attends both ways); Kaplan et al. 2020, Table 1 counts one attention
    product (2·n_layer·n_ctx·d_attn forward), half our attention term. Embedding look-ups are no matmul.

    >>> f = bert_step_flops(hidden=2, layers=1, intermediate=4, vocab=10, seq_len=3, tokens=3, head_rows=1)
    >>> f["encoder"], f["head"]
    (792.0, 144.0)
    """
    per_token_layer = 8 * hidden * hidden + 4 * hidden * intermediate + 4 * seq_len * hidden
    per_head_row = 2 * hidden * hidden + 2 * hidden * vocab
    encoder = 3.0 * layers * per_token_layer * tokens
    head = 3.0 * per_head_row * head_rows
    return {"encoder": encoder, "head": head, "total": encoder + head}


def ideal_step_speedup(config, *, seq_len: int, batch_size: int, masked: int) -> float:
    """FLOPs of a step with the head at every position over FLOPs with the head on the M masked rows."""
    sizes = dict(hidden=config.hidden_size, layers=config.num_hidden_layers,
                 intermediate=config.intermediate_size, vocab=config.vocab_size, seq_len=seq_len,
                 tokens=batch_size * seq_len)
    full = bert_step_flops(**sizes, head_rows=batch_size * seq_len)["total"]
    gathered = bert_step_flops(**sizes, head_rows=masked)["total"]
    return full / gathered


# --------------------------------------------------------------------------------------------
# The matrix multiplies of a step, and how fast this machine runs them alone (the MFU denominator)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """One matrix multiply of a training step: ``batch`` products of (m × k) @ (k × n), ``count`` times a step.

    ``a_transposed`` / ``b_transposed``: that operand is a transposed view, as autograd hands it
    over (a weight gradient multiplies by Xᵀ; a forward ``linear`` by Wᵀ).

    >>> Gemm("toy", 2, 3, 4, count=5).flops
    240.0
    """

    what: str
    m: int
    k: int
    n: int
    batch: int = 1
    count: int = 1
    a_transposed: bool = False
    b_transposed: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n * self.count


def _linear_gemms(what: str, rows: int, fan_in: int, fan_out: int, count: int, weight_grad: bool = True) -> list[Gemm]:
    """A linear layer's three products: forward X·Wᵀ, input gradient dY·W, weight gradient dYᵀ·X."""
    out = [Gemm(f"{what}: forward", rows, fan_in, fan_out, count=count, b_transposed=True),
           Gemm(f"{what}: input gradient", rows, fan_out, fan_in, count=count)]
    if weight_grad:
        out.append(Gemm(f"{what}: weight gradient", fan_out, rows, fan_in, count=count, a_transposed=True))
    return out


def step_gemms(config, *, batch_size: int, seq_len: int, masked: int,
               word_embeddings_trained: bool = True) -> list[Gemm]:
    """Every matrix multiply of one BERT-style training step (encoder on B·T tokens, head on M rows).

    Per layer: the Q, K, V and output projections and the two feed-forward layers (three products
    each: forward, input gradient, weight gradient), and attention's Q·Kᵀ and P·V per head
    (three each). The head: its transform and the decoder onto the vocabulary, on the M selected
    rows; with frozen word embeddings (tied to the decoder) the decoder's weight gradient is not
    computed. Their FLOPs add up to ``bert_step_flops`` (checked in the tests).

    >>> from transformers import BertConfig
    >>> g = step_gemms(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                intermediate_size=16, vocab_size=50), batch_size=2, seq_len=4, masked=3)
    >>> len(g), sum(x.flops for x in g) == bert_step_flops(hidden=8, layers=1, intermediate=16, vocab=50,
    ...                                                     seq_len=4, tokens=8, head_rows=3)["total"]
    (21, True)
    """
    names = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    if any(not isinstance(getattr(config, n, None), int) for n in names) or \
            getattr(config, "embedding_size", config.hidden_size) != config.hidden_size:
        raise InputError(f"{type(config).__name__} is not BERT-shaped (hidden_size, num_hidden_layers, "
                         "intermediate_size, num_attention_heads): its matrix multiplies are not listed here.")
    H, L, I, V = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    heads = config.num_attention_heads
    d, N, T = H // heads, batch_size * seq_len, seq_len
    g = (_linear_gemms("attention Q, K, V and output projections", N, H, H, 4 * L)
         + _linear_gemms("feed-forward in", N, H, I, L) + _linear_gemms("feed-forward out", N, I, H, L))
    bh = batch_size * heads
    g += [Gemm("attention scores Q·Kᵀ: forward", T, d, T, batch=bh, count=L, b_transposed=True),
          Gemm("attention scores: gradient of Q", T, T, d, batch=bh, count=L),
          Gemm("attention scores: gradient of K", T, T, d, batch=bh, count=L, a_transposed=True),
          Gemm("attention mix P·V: forward", T, T, d, batch=bh, count=L),
          Gemm("attention mix: gradient of P", T, d, T, batch=bh, count=L, b_transposed=True),
          Gemm("attention mix: gradient of V", T, T, d, batch=bh, count=L, a_transposed=True)]
    g += _linear_gemms("head transform", masked, H, H, 1)
    g += _linear_gemms("decoder onto the vocabulary", masked, H, V, 1, weight_grad=word_embeddings_trained)
    return [x for x in g if x.m and x.k and x.n]


def gemm_timer(gemms: Sequence[Gemm], dtype: torch.dtype = torch.float32, *,
               device: torch.device | str | None = None) -> Callable[[], tuple[float, float]]:
    """A function that runs each product once and returns the seconds they take per step (× count):
    (wall-clock seconds, process CPU seconds).

    Operands are made once, here (random, from a fixed seed); each call times only the products,
    one after another, as the step runs them. Total FLOPs over that time is this machine's matmul
    speed on exactly this step's shapes and dtype: the denominator of a step's MFU.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    gen = seeds.generator(0, "matmul_operands")

    def operand(rows: int, cols: int, batch: int, transposed: bool) -> torch.Tensor:
        shape = (batch, cols, rows) if transposed else (batch, rows, cols)
        t = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)
        t = t.transpose(1, 2) if transposed else t
        return t[0] if batch == 1 else t

    pairs = [(x, operand(x.m, x.k, x.batch, x.a_transposed), operand(x.k, x.n, x.batch, x.b_transposed))
             for x in gemms]

    def run() -> tuple[float, float]:
        wall = cpu = 0.0
        for x, a, b in pairs:
            _sync(device)
            cpu_start, start = time.process_time(), time.perf_counter()
            torch.matmul(a, b)
            _sync(device)
            wall += (time.perf_counter() - start) * x.count
            cpu += (time.process_time() - cpu_start) * x.count
        return wall, cpu

    return run
