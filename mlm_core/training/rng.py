"""Dropout's randomness: the one place the library touches torch's global RNG.

``nn.Dropout`` takes no generator: it draws from torch's global one (the CPU's, and the current CUDA
device's). A training step seeds it from the run's seed (``seed_dropout``) inside
``torch.random.fork_rng(devices=rng_devices(device))``, so a run repeats for a seed and the caller's
RNG state comes back afterwards. Every other random choice takes a ``torch.Generator`` made by
``seeds.generator``.

>>> with torch.random.fork_rng(devices=rng_devices(torch.device("cpu"))):
...     seed_dropout(7, torch.device("cpu"))
...     first = torch.rand(2)
...     seed_dropout(7, torch.device("cpu"))
...     bool((torch.rand(2) == first).all())
True
"""

from __future__ import annotations

import torch


def cuda_index(device: torch.device) -> int:
    """The CUDA device a device means: its own index, or for a bare "cuda" the current device (not always 0)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def rng_devices(device: torch.device) -> list[int]:
    """The CUDA devices ``fork_rng`` must save and restore for work on ``device``: its own, or none on a CPU."""
    return [cuda_index(device)] if device.type == "cuda" else []


def seed_dropout(seed: int, device: torch.device) -> None:
    """Seed the global generators dropout draws from on ``device`` (inside ``fork_rng``, so the caller's state
    returns)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[cuda_index(device)].manual_seed(seed)
