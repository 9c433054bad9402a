"""How the weights move: the learning-rate schedule, AdamW and its parameter groups, mixed precision,
gradient checkpointing, frozen word embeddings, and `Optimizer`, one variant's update.

Nothing here knows where the batches come from or what the model computes: `loop.train_step` runs the
forward pass and the loss, and calls `Optimizer.begin`, `backward` on each micro-batch's loss, then
`clip` and `step` (nanoGPT's order: zero, backward, unscale and clip, step, update the scaler).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any

import torch
from torch import nn

from mlm_core.errors import InputError
from mlm_core.precision import resolve_amp
from mlm_core.training.config import TrainConfig


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warm-up, then the schedule, which
    decays from the peak to `min_lr_ratio` of it.

    >>> [lr_at(TrainConfig(steps=4, warmup_steps=2, learning_rate=1.0), s) for s in range(4)]
    [0.5, 1.0, 1.0, 0.5]
    >>> cfg = TrainConfig(steps=3, warmup_steps=1, learning_rate=1.0, schedule="cosine", min_lr_ratio=0.2)
    >>> [round(lr_at(cfg, s), 4) for s in range(1, 4)]  # cosine from 1 to the floor 0.2
    [1.0, 0.6, 0.2]
    """
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.learning_rate
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "cosine":
        decayed = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        decayed = 1.0 - progress
    floor = cfg.min_lr_ratio
    return cfg.learning_rate * (floor + (1.0 - floor) * decayed)  # floor 0: exactly the plain decay


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay on biases and normalisation weights (BERT's optimizer does the same)."""
    decay, no_decay, seen = [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        lname = name.lower()
        if p.ndim < 2 or "norm" in lname or lname.endswith("bias"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


# BERT's optimizer (google-research/bert optimization.py, AdamWeightDecayOptimizer) uses betas
# (0.9, 0.999) and eps 1e-6 *without* bias correction; RoBERTa (Appendix, Table 9) keeps eps 1e-6.
# PyTorch's AdamW always corrects the bias of its moment estimates, and its default eps is 1e-8.
# We take BERT's betas and eps and PyTorch's bias correction: without the correction the early
# steps are several times larger (`uncorrected_adam_step_ratio`), which BERT's 10,000 warm-up steps
# hide but a 100-step run would not; eps 1e-6 keeps parameters whose gradient is only rounding
# noise (e.g. attention key biases, whose exact gradient is 0) still.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6


def uncorrected_adam_step_ratio(step: int, betas: tuple[float, float] = ADAM_BETAS) -> float:
    """How much larger Adam's step t (1-based) is without bias correction, as in BERT's optimizer:
    (1 - beta1^t) / sqrt(1 - beta2^t) (eps aside), for the same gradients.

    >>> round(uncorrected_adam_step_ratio(1), 2)  # 0.1 / sqrt(0.001)
    3.16
    >>> round(max(uncorrected_adam_step_ratio(t) for t in range(1, 1001)), 2), round(uncorrected_adam_step_ratio(1000), 2)
    (6.57, 1.26)
    """
    b1, b2 = betas
    return (1.0 - b1 ** step) / math.sqrt(1.0 - b2 ** step)


def adamw(groups: list[dict[str, Any]], lr: float, betas: tuple[float, float] = ADAM_BETAS,
          eps: float = ADAM_EPS) -> torch.optim.Optimizer:
    """AdamW (bias-corrected), by default with BERT's betas and eps; the fused kernel where the device has one."""
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=True)


def set_checkpointing(model: nn.Module, on: bool) -> None:
    """Turn gradient checkpointing on (as `train` does) or off; a model that cannot do it gets an InputError."""
    if on:
        _enable_checkpointing(model)
        return
    disable = getattr(model, "activation_checkpointing_disable", None) or \
        getattr(model, "gradient_checkpointing_disable", None)
    if disable is not None:
        disable()
    if hasattr(model, "disable_input_require_grads"):  # the hook enabling added to the embeddings
        model.disable_input_require_grads()


def freeze_word_embeddings(model: nn.Module, frozen: bool = True) -> int:
    """Stop (or restart) training the word embeddings, and with them a tied output projection.

    Returns how many weights that concerns. The optimizer needs no rebuilding: a parameter whose
    ``requires_grad`` is off gets no ``.grad``, and AdamW and clipping skip parameters without one.
    """
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is None or not hasattr(embeddings, "weight"):
        raise InputError(f"{type(model).__name__} has no word-embedding matrix to freeze.")
    embeddings.weight.requires_grad_(not frozen)
    return embeddings.weight.numel()


def _enable_checkpointing(model: nn.Module) -> None:
    enable = getattr(model, "activation_checkpointing_enable", None)
    try:
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            raise ValueError
    except ValueError:
        raise InputError(f"{type(model).__name__} does not support gradient checkpointing; "
                         "turn it off for this model.") from None


def autocast(device: torch.device, amp: str):
    """The autocast context of a mode; "auto" is resolved by `precision.auto_amp` (measured once per process)."""
    amp = resolve_amp(amp, device)
    if amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def check_amp(device: torch.device, amp: str) -> None:
    amp = resolve_amp(amp, device)
    if amp == "fp16" and device.type != "cuda":
        raise InputError("fp16 mixed precision needs a CUDA GPU (it relies on a gradient scaler). "
                         "On this device choose 'bf16' or 'off'.")
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError("This GPU has no bf16 support: choose 'fp16' (with a gradient scaler) or 'off'.")


# What `Optimizer.set_config` may change between steps (TrainStep.configure): the rest shapes the optimizer itself.
SWITCHABLE = ("amp", "max_grad_norm", "freeze_word_embeddings", "gradient_checkpointing")


class Optimizer:
    """One variant's weights update: AdamW with optional clipping and fp16 gradient scaling. Under torchrun
    (``distributed``) the forward pass goes through DistributedDataParallel (`loop.prepare_variant` wraps it),
    which averages the gradients over the ranks; the weights frozen then stay frozen.

    ``groups`` replaces `param_groups`' two groups (decay, no decay) by the caller's own; a group's
    ``lr_scale`` (default 1) multiplies the scheduled rate, so a head can learn faster than the body
    (the default-model build). ``betas`` and ``eps`` default to BERT's (``ADAM_BETAS``, ``ADAM_EPS``).
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, device: torch.device, *, distributed: bool = False,
                 groups: list[dict[str, Any]] | None = None, betas: tuple[float, float] = ADAM_BETAS,
                 eps: float = ADAM_EPS):
        self.cfg = cfg
        self.device = device
        self.model = model
        self.distributed = distributed
        # The groups hold every weight that can train, the word embeddings too, so `set_config` can freeze and
        # unfreeze them on the same optimizer: a frozen weight gets no .grad, and AdamW skips a weight without one.
        groups = param_groups(model, cfg.weight_decay) if groups is None else groups
        if cfg.freeze_word_embeddings:  # before DDP wraps the model: it registers what needs gradients
            freeze_word_embeddings(model)
        self.refresh_params()
        self.optimizer = adamw(groups, cfg.learning_rate, betas, eps)
        self._scalers: dict[bool, torch.amp.GradScaler] = {}
        self.scaler = self._scaler(cfg.amp)

    def _scaler(self, amp: str) -> torch.amp.GradScaler:
        """The gradient scaler for `amp`: on for fp16 (one, kept with its learned scale), off otherwise."""
        fp16 = amp == "fp16"
        if fp16 not in self._scalers:
            self._scalers[fp16] = torch.amp.GradScaler(self.device.type, enabled=fp16)
        return self._scalers[fp16]

    def refresh_params(self) -> None:
        """Clip over the weights that train now (call it after changing a weight's ``requires_grad``)."""
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def set_config(self, cfg: TrainConfig) -> None:
        """Take the next steps under `cfg`: its autocast, clipping and frozen word embeddings; AdamW's state stays.
        fp16 steps go through the one fp16 gradient scaler (made on the first switch, kept, with its learned scale,
        when the precision switches away and back). Any other setting is fixed when the optimizer is built: a
        `cfg` that changes one is refused.
        """
        changed = [f.name for f in dataclasses.fields(cfg) if f.name not in SWITCHABLE
                   and getattr(cfg, f.name) != getattr(self.cfg, f.name)]
        if changed:
            raise InputError(f"An optimizer's {', '.join(changed)} are fixed when it is built: start a new "
                             "TrainStep (or run) to change them.")
        if cfg.freeze_word_embeddings != self.cfg.freeze_word_embeddings:
            if self.distributed:
                raise InputError("Under torchrun the frozen weights are fixed when DDP wraps the model: "
                                 "start a new run to freeze or unfreeze the word embeddings.")
            freeze_word_embeddings(self.model, cfg.freeze_word_embeddings)
        self.scaler = self._scaler(cfg.amp)  # the same one again unless the switch is to or from fp16
        self.cfg = cfg
        self.refresh_params()

    def begin(self, lr: float) -> None:
        """Start a step: every group at the scheduled rate (times its ``lr_scale``), the last step's gradients freed."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr
        self.optimizer.zero_grad(set_to_none=True)

    def autocast(self):
        """The forward pass's autocast context under this config's precision (`autocast`)."""
        return autocast(self.device, self.cfg.amp)

    def backward(self, loss: torch.Tensor, scale: float = 1.0) -> None:
        """Backward of a micro-batch's mean loss times ``scale``, its share of the step (x W under DDP), through the
        fp16 gradient scaler when there is one. A whole step on one batch has scale 1."""
        self.scaler.scale(loss * scale).backward()

    def clip(self) -> float | None:
        """Unscale the fp16 gradients and clip their global norm at ``max_grad_norm`` (``clip_grad_norm_``); returns
        the norm before clipping (None when not finite)."""
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.max_grad_norm if self.cfg.clipping else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        return norm if math.isfinite(norm) else None

    def step(self) -> None:
        """AdamW's update (skipped by the scaler if fp16 gradients overflowed), then the scaler's."""
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def skip(self) -> None:
        """No update this step (nothing to learn from): its gradients are dropped."""
        self.optimizer.zero_grad(set_to_none=True)
        return None
