"""What each arrow of the flow costs: live measurements of time and memory, on the user's own machine.

The MLM loss only needs the M selected positions (about 15% of the B × T tokens), yet the simplest
code computes the head's V scores at every position. This module measures, on a real model:

- ``loss_paths``: the per-position loop, the vectorised loss with ``ignore_index`` (what Hugging
  Face's ``BertForMaskedLM(labels=...)`` does) and gather-before-head (``models.masked_lm_logits``):
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

from mlm_core.errors import InputError, MLMLabError
from mlm_core.masking import IGNORE_INDEX

BYTES_PER_VALUE = {"fp32": 4, "bf16": 2, "fp16": 2}
MASK_RATE = 0.15  # BERT's selection probability: the share of positions the loss needs

LOSS_PATHS = ("loop", "vectorised", "gathered")
PATH_LABELS = {
    "loop": "per-position loop",
    "vectorised": "vectorised, ignore_index (Hugging Face)",
    "gathered": "gather before the head (MLM Lab)",
}
LOOP_MAX_ROWS = 256  # the loop's backward costs O(M² · V) (each row's grad is a full (M, V) tensor): cap it
STEP_SETTINGS = (("off", False), ("bf16", False), ("off", True), ("bf16", True))  # (amp, checkpointing)


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


def median_times(fns: Mapping[str, Callable[[], Any]], *, warmup: int = 1, repeats: int = 3,
                 device: torch.device | None = None) -> dict[str, list[float]]:
    """Seconds per call of each function, ``repeats`` times, run round-robin after ``warmup`` rounds.

    Round-robin (A, B, A, B, ...) rather than A, A, ..., B, B, ...: on a shared, noisy machine a
    burst of load then hits every contender alike, so their ratio stays meaningful.
    """
    for _ in range(max(0, warmup)):
        for fn in fns.values():
            fn()
            _sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
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
    """(transform, decoder) of a masked-LM head we know how to apply to M rows, from ``models``."""
    from mlm_core.models import _head  # the one place that knows each family's head

    head = _head(model)
    if head is None:
        raise InputError(
            f"{type(model).__name__}'s prediction head is not one MLM Lab can split (BERT, DistilBERT, "
            "RoBERTa and ALBERT are): pick one of those models to measure the three loss paths."
        )
    return head.transform, head.decoder


def _head_params(model: nn.Module) -> list[nn.Parameter]:
    """Parameters of the head (transform + decoder, tied weight included), each once."""
    from mlm_core.models import _head

    head = _head(model)
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
                        params: Sequence[torch.Tensor] = ()) -> dict[str, Callable[[], tuple[float, int]]]:
    """The three paths as functions: each runs head + loss forward and backward, returns (loss, logits values).

    ``states`` (B, T, H) are the encoder's output, computed once outside; the backward pass goes
    to ``states`` and ``params`` with ``torch.autograd.grad``, so no ``.grad`` of the model is touched.
    """
    from mlm_core.losses import full_cross_entropy, loop_cross_entropy

    B, T, H = states.shape
    flat_labels = labels.reshape(-1).to(states.device)  # (B·T,)
    index = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
    targets = flat_labels.index_select(0, index)  # (M,)
    leaf = states.detach().requires_grad_(True)
    inputs = [leaf, *[p for p in params if p.requires_grad]]

    def backward(loss: torch.Tensor) -> None:
        torch.autograd.grad(loss, inputs, allow_unused=True)

    def loop():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        rows = logits.reshape(B * T, -1).index_select(0, index)  # (M, V)
        loss = loop_cross_entropy(rows, targets).loss  # a Python loop over the M rows
        backward(loss)
        return float(loss.detach()), logits.numel()

    def vectorised():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        loss = F.cross_entropy(logits.reshape(B * T, -1).float(), flat_labels, ignore_index=IGNORE_INDEX)
        backward(loss)
        return float(loss.detach()), logits.numel()

    def gathered():
        rows = leaf.reshape(B * T, H).index_select(0, index)  # (M, H): gather first
        logits = decoder(transform(rows))  # (M, V): the head on M rows only
        loss = full_cross_entropy(logits, targets).loss
        backward(loss)
        return float(loss.detach()), logits.numel()

    return {"loop": loop, "vectorised": vectorised, "gathered": gathered}


def _batch(tokenizer, batch_size: int, seq_len: int, seed: int, mask_rate: float = MASK_RATE):
    """A (B, T) batch of workshop sentences, masked as BERT does: (input_ids, attention_mask, labels)."""
    from mlm_core.bundled import workshop_sentences
    from mlm_core.data import encode, mask_batch
    from mlm_core.masking import MaskingConfig

    sentences = workshop_sentences()
    text = [" ".join(sentences[(i * 7 + j) % len(sentences)] for j in range(8)) for i in range(batch_size)]
    encoded = encode(tokenizer, text, max_length=seq_len)
    result = mask_batch(tokenizer, encoded, MaskingConfig(mlm_probability=mask_rate),
                        torch.Generator().manual_seed(seed))
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
    ``speedup`` (against the vectorised path) and ``loss_diff`` (against the gathered loss).
    The loop is left out when more than ``LOOP_MAX_ROWS`` rows are selected: its backward pass
    builds a full (M, V) gradient for every row, so its cost grows with M².
    """
    _check_sizes(batch_size, seq_len, repeats)
    transform, decoder = _split_head(model)
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = _batch(tokenizer, batch_size, seq_len, seed)
    if int((labels != IGNORE_INDEX).sum()) == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    with torch.no_grad():
        from mlm_core.models import _encode

        states = _encode(model, input_ids, attention_mask).float()  # (B, T, H), once
    fns = loss_path_functions(transform, decoder, states, labels, _head_params(model))
    if int((labels != IGNORE_INDEX).sum()) > LOOP_MAX_ROWS:
        del fns["loop"]  # minutes, not seconds: measured only for small batches
    values = {name: fn() for name, fn in fns.items()}  # also the warm-up
    times = median_times(fns, warmup=0, repeats=repeats, device=device)
    peaks = {name: peak_memory_bytes(fn, device) for name, fn in fns.items()}
    base_time = median(times["vectorised"])
    gathered_loss = values["gathered"][0]
    rows = []
    for name in [p for p in LOSS_PATHS if p in fns]:
        t = median(times[name])
        rows.append({
            "path": name, "label": PATH_LABELS[name], "loss": values[name][0],
            "loss_diff": abs(values[name][0] - gathered_loss), "time_ms": t * 1e3,
            "times_ms": [x * 1e3 for x in times[name]], "peak_bytes": peaks[name],
            "logits_values": values[name][1], "speedup": base_time / t if t > 0 else math.nan,
            "batch_size": batch_size, "seq_len": seq_len, "masked": int((labels != IGNORE_INDEX).sum()),
        })
    return rows


# --------------------------------------------------------------------------------------------
# A training step with bf16 autocast and gradient checkpointing, on and off
# --------------------------------------------------------------------------------------------


def _checkpointing(model: nn.Module, on: bool) -> None:
    """Turn gradient (activation) checkpointing on or off, with transformers' newer names when present."""
    enable = getattr(model, "activation_checkpointing_enable", None) or getattr(model, "gradient_checkpointing_enable", None)
    disable = getattr(model, "activation_checkpointing_disable", None) or getattr(model, "gradient_checkpointing_disable", None)
    if on:
        if enable is None or not getattr(model, "supports_gradient_checkpointing", False):
            raise InputError(f"{type(model).__name__} does not support gradient checkpointing.")
        kwargs = {"use_reentrant": False}
        if enable.__name__.startswith("activation"):
            enable(activation_checkpointing_kwargs=kwargs)
        else:
            enable(gradient_checkpointing_kwargs=kwargs)
    elif disable is not None:
        disable()


def amp_and_checkpointing(model: nn.Module, tokenizer, *, batch_size: int = 4, seq_len: int = 64,
                          repeats: int = 1, seed: int = 0,
                          settings: Sequence[tuple[str, bool]] = STEP_SETTINGS) -> list[dict[str, Any]]:
    """Time per training step and peak memory with bf16 autocast and gradient checkpointing on and off.

    A step is what ``training.train`` does: encoder, head on the masked rows, full cross-entropy,
    backward, AdamW. It runs on a private copy of ``model`` (the caller's model is never changed).
    One warm-up step first (AdamW's state is allocated there, so it never counts); then, per
    setting, one step under the memory profiler (which also warms that setting up) and ``repeats``
    timed steps: ``1 + len(settings) × (1 + repeats)`` steps in all. Peak memory counts
    activations and gradients. Returns one dict per setting: ``amp``,
    ``checkpointing``, ``label``, ``time_ms`` (median), ``times_ms``, ``peak_bytes``, ``loss``.
    """
    from mlm_core.losses import full_cross_entropy
    from mlm_core.models import masked_lm_logits

    _check_sizes(batch_size, seq_len, repeats)
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = _batch(tokenizer, batch_size, seq_len, seed)
    if int((labels != IGNORE_INDEX).sum()) == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    input_ids, attention_mask, labels = (t.to(device) for t in (input_ids, attention_mask, labels))
    work = copy.deepcopy(model).to(dtype=torch.float32)
    work.train()  # checkpointing (and dropout) only act in training mode
    optimizer = torch.optim.AdamW([p for p in work.parameters() if p.requires_grad], lr=1e-5, foreach=True)
    rows = []
    try:
        for amp, ckpt in settings:
            if amp not in ("off", "bf16"):
                raise InputError(f"amp must be 'off' or 'bf16' here, got {amp!r}.")
            _checkpointing(work, ckpt)
            losses: list[float] = []

            def step():
                optimizer.zero_grad(set_to_none=True)
                context = torch.autocast(device.type, dtype=torch.bfloat16) if amp == "bf16" else contextlib.nullcontext()
                with context:
                    logits, targets = masked_lm_logits(work, input_ids, attention_mask, labels)  # (M, V)
                loss = full_cross_entropy(logits.float(), targets).loss
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))

            if not rows:
                step()  # one warm-up step for all settings: AdamW's state is allocated here
            peak = peak_memory_bytes(step, device)  # also this setting's warm-up (autocast, checkpointing hooks)
            times = median_times({"step": step}, warmup=0, repeats=repeats, device=device)["step"]
            rows.append({
                "amp": amp, "checkpointing": ckpt,
                "label": f"{'bf16' if amp == 'bf16' else 'fp32'}, checkpointing {'on' if ckpt else 'off'}",
                "time_ms": median(times) * 1e3, "times_ms": [x * 1e3 for x in times], "peak_bytes": peak,
                "loss": losses[-1], "batch_size": batch_size, "seq_len": seq_len,
            })
    finally:
        del work, optimizer
    return rows


# --------------------------------------------------------------------------------------------
# FLOPs: what the gathered head saves in a whole training step, ideally
# --------------------------------------------------------------------------------------------


def bert_step_flops(*, hidden: int, layers: int, intermediate: int, vocab: int, seq_len: int,
                    tokens: int, head_rows: int) -> dict[str, float]:
    """Matrix-multiply FLOPs of one training step (forward + backward ≈ 3 × forward) of a BERT MLM.

    Per token and layer, forward: Q, K, V and output projections ``8·H²``, the feed-forward
    ``4·H·I``, attention scores and their use ``4·T·H``. The head per row: transform ``2·H²`` and
    decoder ``2·H·V``. The encoder runs on all ``tokens``; the head on ``head_rows`` of them
    (all of them for Hugging Face's ``labels=`` path, M for the gathered one).

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
