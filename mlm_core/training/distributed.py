"""Training on several processes (torchrun): who this process is, sums over all of them, an agreed
stop, and the DeepSpeed back-end. A single process is world size 1 and skips all of it.

DistributedDataParallel itself wraps the forward pass in `loop.prepare_variant` (under torchrun), and
averages gradients over the ranks; `loop.py` splits each global batch over them.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from mlm_core.errors import InputError
from mlm_core.precision import resolve_amp
from mlm_core.training.config import TrainConfig
from mlm_core.training.optim import freeze_word_embeddings, param_groups


@dataclass(frozen=True)
class World:
    """This process's place among the processes torchrun started: rank 0 of 1 when alone."""

    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1


def current_world() -> World:
    """The initialised torch.distributed process group, or a world of one."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def all_reduce_sum(values: list[float], device: torch.device, world: World) -> list[float]:
    """Each value summed over every rank (in float64); alone, the values as they are."""
    if not world.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def stop_requested(stop: threading.Event, device: torch.device, world: World) -> bool:
    """Local flag, or agreed over all ranks (a rank that stopped alone would hang the others)."""
    if not world.distributed:
        return stop.is_set()
    flag = torch.tensor([1.0 if stop.is_set() else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        stop.set()
    return bool(flag.item() > 0)


class DeepSpeedOptimizer:
    """`optim.Optimizer`'s contract for `loop.train_step` through a DeepSpeed engine (ZeRO-2, optimizer state
    offloaded to the CPU); the step's forward pass is the ``engine`` itself, wrapping ``module`` (the masked LM
    gathered at its masked rows, from `loop.prepare_variant`).

    Used only by `python -m mlm_core train --deepspeed CONFIG` when the `deepspeed` package is
    installed; DeepSpeed then owns the optimizer, clipping, precision and the gradient all-reduce: its
    ``backward`` steps the engine too (which updates only at the accumulation boundary), and ``clip`` reads
    the norm it clipped.
    """

    def __init__(self, model: nn.Module, module: nn.Module, cfg: TrainConfig, device: torch.device, world: World,
                 ds_config: dict[str, Any]):
        import deepspeed  # optional dependency

        self.cfg = cfg
        self.device = device
        if cfg.freeze_word_embeddings:
            freeze_word_embeddings(model)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=module, model_parameters=param_groups(model, cfg.weight_decay), config=ds_config)

    def begin(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def autocast(self):
        return contextlib.nullcontext()  # DeepSpeed's config sets the precision

    def backward(self, loss: torch.Tensor, scale: float = 1.0) -> None:
        # The same n_a / N x W as with DDP (DeepSpeed also averages gradients over the ranks), times
        # the accumulation steps: `engine.backward` divides every loss by gradient_accumulation_steps.
        self.engine.backward(loss * (scale * self.cfg.grad_accum_steps))
        self.engine.step()  # an update happens only at the accumulation boundary

    def clip(self) -> float | None:
        """The global gradient norm DeepSpeed measured (and clipped at its ``gradient_clipping``)."""
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else None
        return norm if norm is not None and math.isfinite(norm) else None

    def step(self) -> None:
        pass  # the engine stepped in `backward`

    def skip(self) -> float | None:
        return self.clip()  # the engine has stepped already: its norm, as for any step


def deepspeed_config(template: Mapping[str, Any], cfg: TrainConfig, world_size: int) -> dict[str, Any]:
    """Fill the "auto" entries of a DeepSpeed config from a TrainConfig (as Hugging Face's Trainer does)."""
    micro = cfg.batch_size // cfg.grad_accum_steps // max(1, world_size)
    auto = {
        "train_batch_size": cfg.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": cfg.grad_accum_steps,
        "gradient_clipping": cfg.max_grad_norm or 0.0,
    }

    def fill(node, path=()):
        if isinstance(node, Mapping):
            return {k: fill(v, path + (k,)) for k, v in node.items()}
        if node != "auto":
            return node
        key = path[-1]
        amp = resolve_amp(cfg.amp, "cuda" if torch.cuda.is_available() else "cpu")
        if path[:1] == ("bf16",):
            return amp == "bf16"
        if path[:1] == ("fp16",):
            return amp == "fp16"
        if key == "lr":
            return cfg.learning_rate
        if key == "weight_decay":
            return cfg.weight_decay
        if key in auto:
            return auto[key]
        raise InputError(f"The DeepSpeed config has 'auto' at {'.'.join(path)}, which MLM Lab cannot fill.")

    return fill(dict(template))
