"""The Efficiency page's lesson: what each arrow of the flow costs, measured live on the user's own machine.

The MLM loss only needs the M selected positions (about 15% of the B × T tokens), yet the simplest
code computes the head's V scores at every position. This module measures, on a real model:

- ``loss_paths``: the per-position loop, the vectorised loss with ``ignore_index`` (what Hugging
  Face's ``BertForMaskedLM(labels=...)`` does) and gather-before-head (``head.masked_lm_logits``):
  the same loss value, three costs;
- ``loop_vs_vectorised``: the loss alone, where the loop's own cost grows with M and M² · V;
- ``amp_and_checkpointing``: a training step with bf16 autocast, gradient checkpointing and frozen
  word embeddings on and off: time per step, peak memory and the share of the step's time its matmuls take;
- ``step_time_breakdown``: where one step's time goes, from ``torch.profiler``.

How it measures (locks, medians, peak memory) is ``mlm_core.measure``; what the sizes and FLOPs
should be, by arithmetic, is ``mlm_core.costs``. No timing here is ever asserted in a test.

Shapes: B = batch, T = sequence length, H = hidden size, V = vocabulary, M = selected positions.

>>> PATH_LABELS["gathered"]
'gather before the head (MLM Lab)'
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from mlm_core import seeds
from mlm_core.bundled import workshop_sentences
from mlm_core.costs import MASK_RATE, loss_paths_bytes, masked_positions, step_gemms, train_step_bytes
from mlm_core.data import encode, mask_batch
from mlm_core.errors import InputError
from mlm_core.formatting import signed
from mlm_core.head import encoder_states, head_parts
from mlm_core.losses import full_cross_entropy, loop_cross_entropy
from mlm_core.masking import IGNORE_INDEX, MaskingConfig
from mlm_core.measure import (click_budget_bytes, exclusive_measurement, exclusive_profiler, gemm_timer, human_bytes,
                              median, median_times, paired_ratio, peak_memory_bytes)
from mlm_core.training import TrainConfig, TrainStep

LOSS_PATHS = ("loop", "vectorised", "gathered")
PATH_LABELS = {
    "loop": "per-position loop",
    "vectorised": "vectorised, ignore_index (Hugging Face)",
    "gathered": "gather before the head (MLM Lab)",
}
LOOP_MAX_ROWS = 256  # the loop's backward costs O(M² · V) (each row's grad is a full (M, V) tensor): cap it


# --------------------------------------------------------------------------------------------
# Three ways to the same loss
# --------------------------------------------------------------------------------------------


def split_head(model: nn.Module):
    """(transform, decoder) of a masked-LM head we know how to apply to M rows, from ``head``."""
    head = head_parts(model)  # head is the one place that knows each family's head
    if head is None:
        raise InputError(
            f"{type(model).__name__}'s prediction head is not one MLM Lab can split (BERT, DistilBERT, "
            "RoBERTa and ALBERT are): pick one of those models to measure the three loss paths."
        )
    return head.transform, head.decoder


def head_params(model: nn.Module) -> list[nn.Parameter]:
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

    # The full scores are let go before the backward pass (no backward needs them), so a path holds
    # one (B·T, V) tensor less at its peak (costs.loss_paths_bytes).
    def loop():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        values = logits.numel()
        rows = logits.reshape(B * T, -1).index_select(0, index)  # (M, V)
        del logits
        loss = loop_cross_entropy(rows, targets).loss  # a Python loop over the M rows
        del rows
        backward("loop", loss)
        return float(loss.detach()), values

    def vectorised():
        logits = decoder(transform(leaf))  # (B, T, V): every position
        values = logits.numel()
        loss = F.cross_entropy(logits.reshape(B * T, -1).float(), flat_labels, ignore_index=IGNORE_INDEX)
        del logits
        backward("vectorised", loss)
        return float(loss.detach()), values

    def gathered():
        rows = leaf.reshape(B * T, H).index_select(0, index)  # (M, H): gather first
        logits = decoder(transform(rows))  # (M, V): the head on M rows only
        loss = full_cross_entropy(logits, targets).loss
        backward("gathered", loss)
        return float(loss.detach()), logits.numel()

    return {"loop": loop, "vectorised": vectorised, "gathered": gathered}


def masked_batch(tokenizer, batch_size: int, seq_len: int, seed: int, mask_rate: float = MASK_RATE):
    """A (B, T) batch of workshop sentences, masked as BERT does: (input_ids, attention_mask, labels)."""

    sentences = workshop_sentences()
    text = [" ".join(sentences[(i * 7 + j) % len(sentences)] for j in range(8)) for i in range(batch_size)]
    encoded = encode(tokenizer, text, max_length=seq_len)
    result = mask_batch(tokenizer, encoded, MaskingConfig(mlm_probability=mask_rate),
                        seeds.generator(seed))  # the Loss page's stream: this seed's masks
    return result.input_ids, encoded.attention_mask, result.labels


def _check_budget(what: str, need: int, batch_size: int, seq_len: int) -> None:
    """Refuse, before anything is allocated, a measurement whose estimate is above one click's memory budget."""
    budget = click_budget_bytes()
    if need > budget:
        raise InputError(
            f"{what} at batch {batch_size} × {seq_len} tokens would hold about {human_bytes(need)} at once on this "
            f"model, more than one click may use on this server ({human_bytes(budget)}, MLMLAB_CLICK_MB): choose a "
            "smaller batch or sequence length.")


def step_bytes(model: nn.Module, batch_size: int, seq_len: int) -> int:
    """``costs.train_step_bytes`` for this model, at the masking rate's expected M."""
    return train_step_bytes(model.config, batch_size=batch_size, seq_len=seq_len,
                            masked=masked_positions(batch_size, seq_len))


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
    transform, decoder = split_head(model)
    _check_budget("The three loss paths", loss_paths_bytes(batch_size, seq_len, decoder.weight.shape[0]),
                  batch_size, seq_len)
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = masked_batch(tokenizer, batch_size, seq_len, seed)
    if int((labels != IGNORE_INDEX).sum()) == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    with exclusive_measurement():
        with torch.no_grad():
            states = encoder_states(model, input_ids, attention_mask).float()  # (B, T, H), once
        fns = loss_path_functions(transform, decoder, states, labels, head_params(model))
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
# A training step, set up several ways: time, memory, and the share of its time its matmuls take
# --------------------------------------------------------------------------------------------

# The column and axis name of `amp_and_checkpointing`'s ``mfu``: matmul-alone time / step time. It is a share
# of the step's time, not a speed: inside the step the matmuls run at about their solo speed (the profile).
MATMUL_SHARE = "matmuls' share of the step"

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
    """The starting weights: the model's own tensors, detached (``_restore`` copies them into the private copy)."""
    return [t.detach() for t in (*model.parameters(), *model.buffers())]


@torch.no_grad()
def _restore(model: nn.Module, snapshot: list[torch.Tensor]) -> None:
    for t, saved in zip((*model.parameters(), *model.buffers()), snapshot):
        t.copy_(saved)


def amp_and_checkpointing(model: nn.Module, tokenizer, *, batch_size: int = 4, seq_len: int = 64,
                          repeats: int = 3, seed: int = 0,
                          settings: Sequence[Sequence] = STEP_SETTINGS, mfu: bool = True) -> list[dict[str, Any]]:
    """One training step set up several ways (bf16 autocast, gradient checkpointing, frozen word
    embeddings): time per step, peak memory, loss, and the share of the step's time its matmuls take.

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
    _check_budget("A training step", step_bytes(model, batch_size, seq_len), batch_size, seq_len)
    input_ids, attention_mask, labels = masked_batch(tokenizer, batch_size, seq_len, seed)
    masked = int((labels != IGNORE_INDEX).sum())
    if masked == 0:
        raise InputError("No token of this batch was selected for prediction: try another seed.")
    gemms = _setting_gemms(model, chosen, batch_size, seq_len, masked) if mfu else {}
    measured = _time_settings(model, chosen, (input_ids, attention_mask, labels), gemms, repeats=repeats, seed=seed)
    return _step_rows(chosen, measured, gemms, batch_size=batch_size, seq_len=seq_len, masked=masked)


def _setting_gemms(model: nn.Module, chosen, batch_size: int, seq_len: int, masked: int) -> dict[bool, list]:
    """The step's matrix multiplies, with the word embeddings frozen or trained; {} for a model that is not
    BERT-shaped (then times and memory only)."""
    try:
        return {frozen: step_gemms(model.config, batch_size=batch_size, seq_len=seq_len, masked=masked,
                                   word_embeddings_trained=not frozen) for _, _, frozen in chosen}
    except InputError:
        return {}


@dataclass
class _Measured:
    """What `_time_settings` measured, by setting index: step times (wall and CPU), peak memory, losses, and the
    matmul-alone times of each (amp, frozen) pair."""

    times: dict[str, list[float]]
    cpu_times: dict[str, list[float]]
    peaks: dict[int, int]
    losses: dict[int, list[float]]
    gemm_times: dict[tuple[str, bool], list[tuple[float, float]]]


def _time_settings(model: nn.Module, chosen, batch, gemms, *, repeats: int, seed: int) -> _Measured:
    """Time one `TrainStep` per setting, round-robin, on one private copy put back to the starting weights before
    every step (see `amp_and_checkpointing`)."""
    input_ids, attention_mask, labels = batch
    device = next(model.parameters()).device
    with exclusive_measurement():
        work = copy.deepcopy(model).to(device=device, dtype=torch.float32)
        start = _snapshot(model)  # the caller's own tensors (read, never written): no second copy held
        step = TrainStep(work, TrainConfig(amp=chosen[0][0], learning_rate=1e-5, seed=seed), device)
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
    return _Measured(times, cpu_times, peaks, losses, gemm_times)


def _step_rows(chosen, m: _Measured, gemms, *, batch_size: int, seq_len: int, masked: int) -> list[dict[str, Any]]:
    """One row per setting: its times and memory as ratios against the first setting, its loss, and its matmul
    share (``mfu``) where the matmuls were timed."""
    base, cpu_base = m.times["0"], m.cpu_times["0"]
    rows = []
    for i, (amp, ckpt, frozen) in enumerate(chosen):
        t, c = m.times[str(i)], m.cpu_times[str(i)]
        row = {
            "amp": amp, "checkpointing": ckpt, "frozen": frozen, "label": step_label(amp, ckpt, frozen),
            "time_ms": median(t) * 1e3, "times_ms": [x * 1e3 for x in t], "time_x": paired_ratio(t, base),
            "cpu_time_ms": median(c) * 1e3, "cpu_time_x": paired_ratio(c, cpu_base),
            "peak_bytes": m.peaks[i], "mem_x": m.peaks[i] / m.peaks[0] if m.peaks[0] else math.nan,
            "loss": m.losses[i][-1], "losses": list(m.losses[i]), "batch_size": batch_size, "seq_len": seq_len,
            "masked": masked,
        }
        if (amp, frozen) in m.gemm_times:
            # one total per round, measured in the same rounds as the steps
            g = [w for w, _ in m.gemm_times[(amp, frozen)]]
            gc = [x for _, x in m.gemm_times[(amp, frozen)]]
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
    _check_sizes(batch_size, seq_len, 1)
    amp, _, frozen = _setting((amp, False, frozen))
    _check_budget("A profiled training step", step_bytes(model, batch_size, seq_len), batch_size, seq_len)
    device = next(model.parameters()).device
    input_ids, attention_mask, labels = masked_batch(tokenizer, batch_size, seq_len, seed)
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
# What the page says about the measurements, and their tables
# --------------------------------------------------------------------------------------------


def size_note(size: dict) -> str:
    """What the logits' sizes teach (``costs.logits_size``), in numbers (markdown)."""
    return (f"**What it teaches:** the full logits hold B × T × V = {size['full_values']:,} scores "
            f"({human_bytes(size['full_bytes'])}), but only the M ≈ 15% selected rows enter the loss: "
            f"{size['gathered_values']:,} scores ({human_bytes(size['gathered_bytes'])}), {size['ratio']:.1f}× less, "
            "and the vocabulary multiplies both.")


def paths_notes(rows: Sequence[dict], *, repeats: int, positions: int) -> list[str]:
    """What ``loss_paths`` measured, as the page's captions (markdown): why the loop is missing, when it is, then what
    the three paths teach at ``positions`` (B × T) positions."""
    by = {r["path"]: r for r in rows}
    notes = []
    if "loop" not in by:
        notes.append(f"The loop was left out: with more than {LOOP_MAX_ROWS} selected rows it takes minutes, because "
                     "its backward pass builds a full gradient tensor for every single row.")
    loop, honest = by.get("loop"), ""
    if loop is not None:
        extra = loop["time_ms"] / by["vectorised"]["time_ms"] - 1
        honest = (f" The loop and the vectorised loss cost about the same here (the loop {signed(extra, '.0%')}): both "
                  f"compute the head's {by['vectorised']['logits_values']:,} scores first, and that, not the loss, is "
                  "most of the work at this size. The next measurement takes the head away to show where the loop "
                  "itself hurts." if loop["speedup"] > 0.67 else
                  f" The loop is {1 / loop['speedup']:.1f}× slower than the vectorised loss here.")
    notes.append(
        f"**What it teaches:** the three losses agree (largest difference {max(r['loss_diff'] for r in rows):.1e}); "
        f"gathering first is {by['gathered']['speedup']:.1f}× faster than the vectorised loss here "
        f"with {rows[0]['masked']} of {positions} positions selected, because the head's work scales with the rows "
        f"it scores.{honest} Times are medians of {repeats} rounds run round-robin; ratios are medians of the "
        "per-round ratios.")
    return notes


def paths_table(rows: Sequence[dict]) -> list[dict]:
    """``loss_paths``' rows as the page's table: loss, time, peak memory, scores computed, against the vectorised."""
    return [{"path": r["label"], "loss": r["loss"], "time (ms)": round(r["time_ms"], 1),
             "peak memory": human_bytes(r["peak_bytes"]), "scores computed": r["logits_values"],
             "vs vectorised": f"{r['speedup']:.2f}×"} for r in rows]


def sweep_vocabs(vocab: int) -> tuple[int, ...]:
    """The vocabularies the loop sweep runs for a model of vocabulary ``vocab``: a toy one and the model's (at most
    RoBERTa's).

    >>> sweep_vocabs(30_522), sweep_vocabs(250_002), sweep_vocabs(1_000)
    ((1000, 30522), (1000, 50265), (1000,))
    """
    return tuple(sorted({1_000, min(vocab, 50_265)}))


def sweep_note(rows: Sequence[dict]) -> str:
    """What ``loop_vs_vectorised`` measured, at its smallest and largest size, and how many rows a batch of
    32 × 128 tokens selects (markdown)."""
    low = min(rows, key=lambda r: (r["rows"], r["vocab"]))
    high = max(rows, key=lambda r: (r["rows"], r["vocab"]))
    return (f"**What it teaches:** with M = {low['rows']} rows and V = {low['vocab']:,} the loop is {low['ratio']:.1f}× "
            f"the vectorised loss; with M = {high['rows']} and V = {high['vocab']:,} it is {high['ratio']:.0f}× "
            f"({high['loop_ms']:.0f} ms against {high['vectorised_ms']:.1f} ms). The same losses "
            f"(largest difference {max(r['loss_diff'] for r in rows):.1e}): only the cost differs. A batch of "
            f"32 × 128 tokens selects about {masked_positions(32, 128)} rows.")


def sweep_table(rows: Sequence[dict]) -> list[dict]:
    """``loop_vs_vectorised``' rows as the page's table."""
    return [{"V": f"{r['vocab']:,}", "M": r["rows"], "loop (ms)": round(r["loop_ms"], 2),
             "vectorised (ms)": round(r["vectorised_ms"], 2), "loop ÷ vectorised": f"{r['ratio']:.1f}×"} for r in rows]


def steps_note(rows: Sequence[dict], *, repeats: int) -> str:
    """What ``amp_and_checkpointing`` measured: bf16, checkpointing and frozen embeddings against fp32, and the fp32
    step's matmul share (markdown)."""
    base = rows[0]
    ckpt = next((r for r in rows if r["checkpointing"] and r["amp"] == "off"), None)
    bf16 = next((r for r in rows if not r["checkpointing"] and r["amp"] == "bf16" and not r["frozen"]), None)
    frozen = next((r for r in rows if r["frozen"] and r["amp"] == "off"), None)
    parts = []
    if bf16 is not None:
        parts.append(f"bf16 took {bf16['time_x']:.2f}× the fp32 time"
                     + (" (this CPU multiplies bf16 faster)" if bf16["time_x"] < 0.9 else
                        " (no gain: this CPU, or these small matrices, do not profit from bf16)"))
    if ckpt is not None:
        parts.append(f"checkpointing changed peak memory {ckpt['mem_x']:.2f}× and time {ckpt['time_x']:.2f}×"
                     + (" (at this size the gradients of the weights, not the activations, set the peak: "
                        "try a larger batch or sequence)" if ckpt["mem_x"] > 0.9 else ""))
    if frozen is not None:
        parts.append(f"frozen word embeddings took {frozen['time_x']:.2f}× the time and {frozen['mem_x']:.2f}× the "
                     "memory")
    if base.get("mfu") is not None:
        parts.append(f"the fp32 step's matrix multiplies, timed alone, take {base['mfu']:.0%} of its time")
    return ("**What it teaches:** memory and time trade against each other: " + "; ".join(parts) + ". "
            f"Times: medians of {repeats} rounds; ratios: medians of the per-round ratios.")


def steps_table(rows: Sequence[dict]) -> list[dict]:
    """``amp_and_checkpointing``'s rows as the page's table."""
    return [{"setting": r["label"], "time per step (ms)": round(r["time_ms"], 1), "vs fp32": f"{r['time_x']:.2f}×",
             "peak memory": human_bytes(r["peak_bytes"]),
             MATMUL_SHARE: f"{r['mfu']:.0%}" if r.get("mfu") is not None else "–", "loss": r["loss"]} for r in rows]


def profile_note(breakdowns: dict[str, list[dict]]) -> str:
    """What ``step_time_breakdown`` found for each precision: the matmuls' share and the largest other cost
    (markdown)."""
    share = {name: next(r["share"] for r in rows if r["category"] == "matrix multiplies")
             for name, rows in breakdowns.items()}
    other = {name: next(r for r in rows if r["category"] != "matrix multiplies") for name, rows in breakdowns.items()}
    return ("**What it teaches:** " + "; ".join(
        f"in {name}, matrix multiplies take {share[name]:.0%} of the step and the largest other cost is "
        f"{other[name]['category']} ({other[name]['share']:.0%})" for name in breakdowns)
        + ". bf16 shrinks the matrix multiplies, so everything else weighs more: that is why a step gains less "
        "than the matmuls do.")
