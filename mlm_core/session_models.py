"""The models one learner trained: kept in their session, bounded in number and memory.

A training run (``mlm_core.jobs.Run`` with ``keep_trained=True``) trains deep copies of a base
model. When it has finished, ``TrainedModels.add_run`` takes those copies from the run and keeps
them, newest first, so the Predictions and Inside-the-model pages can use them beside the base
model. They belong to one session (the store lives in its ``st.session_state``) and go with it;
the shared cached models are never replaced or changed. The store keeps at most ``max_models``
copies and ``max_bytes`` of weights: adding one drops the oldest ones that no longer fit.

>>> from mlm_core.models import tiny_random_masked_lm
>>> base, tokenizer = tiny_random_masked_lm()
>>> store = TrainedModels(max_models=1)
>>> store.add("run1.0", "full loss, 10 steps", base, tokenizer, base)
[]
>>> store.add("run2.0", "sampled loss, 10 steps", base, tokenizer, base)
['Dropped full loss, 10 steps: this session keeps 1 trained model at most.']
>>> [m.key for m in store.entries()]
['run2.0']
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from torch import nn

from mlm_core.models import INFO_ATTR

DEFAULT_MAX_MODELS = 3  # a run races up to three loss variants: one run's worth
DEFAULT_MAX_MB = 512  # about five copies of the bundled 22M-parameter default in fp32


def model_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers, each shared tensor counted once (tied embeddings)."""
    seen: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        seen[tensor.data_ptr()] = max(seen.get(tensor.data_ptr(), 0), tensor.numel() * tensor.element_size())
    return sum(seen.values())


def same_vocabulary(a, b) -> bool:
    """True when two tokenizers give every token the same id (then a sentence encodes the same way)."""
    return a is b or (len(a) == len(b) and a.get_vocab() == b.get_vocab())


@dataclass(frozen=True)
class TrainedModel:
    """One trained copy, with the tokenizer it was trained with and the base model it started from."""

    key: str  # "<run id>.<variant index>": what widgets and share links name
    label: str  # what learners read
    model: nn.Module
    tokenizer: Any
    base_model: nn.Module
    nbytes: int


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


class TrainedModels:
    """A session's trained models, newest first, at most ``max_models`` and ``max_bytes`` of weights.

    Defaults: ``MLMLAB_TRAINED_MODELS`` (3) and ``MLMLAB_TRAINED_MB`` (512) from the environment;
    0 models keeps none.
    """

    def __init__(self, max_models: int | None = None, max_bytes: int | None = None):
        self.max_models = _env_int("MLMLAB_TRAINED_MODELS", DEFAULT_MAX_MODELS) if max_models is None else max_models
        self.max_bytes = _env_int("MLMLAB_TRAINED_MB", DEFAULT_MAX_MB) * 2**20 if max_bytes is None else max_bytes
        self._entries: list[TrainedModel] = []
        self._lock = threading.Lock()

    def add(self, key: str, label: str, model: nn.Module, tokenizer, base_model: nn.Module) -> list[str]:
        """Keep ``model`` (a copy this session owns) under ``key``; returns notes on what was dropped."""
        size = model_bytes(model)
        if self.max_models < 1 or size > self.max_bytes:
            return [f"{label} was not kept: it needs {size / 2**20:,.0f} MB and this session keeps "
                    f"{self.max_models} trained model(s) of at most {self.max_bytes / 2**20:,.0f} MB in all."]
        model.eval()  # ours: a session-owned copy, never the shared cached model
        model.requires_grad_(False)
        info = dict(getattr(model, INFO_ATTR, None) or {})
        setattr(model, INFO_ATTR, dict(info, label=label, trained=True, source="session", name=None,
                                       description=f"Trained in this session from {info.get('label', 'a base model')}."))
        notes = []
        with self._lock:
            entries = [TrainedModel(key, label, model, tokenizer, base_model, size)] + \
                [e for e in self._entries if e.key != key]
            kept, total = [], 0
            for entry in entries:
                if len(kept) < self.max_models and total + entry.nbytes <= self.max_bytes:
                    kept.append(entry)
                    total += entry.nbytes
                else:
                    notes.append(f"Dropped {entry.label}: this session keeps {self.max_models} trained model"
                                 f"{'s' if self.max_models != 1 else ''} at most.")
            self._entries = kept
        return notes

    def add_run(self, run) -> list[str]:
        """Take a finished run's trained copies (``run.take_trained()``), one entry per variant."""
        taken = run.take_trained()
        if taken is None:
            return []
        models, tokenizer, base = taken
        notes = []
        base_label = (getattr(base, INFO_ATTR, None) or {}).get("label", "its base model")
        for i, (variant, model) in reversed(list(enumerate(models.items()))):  # newest first, in the run's order
            notes += self.add(f"{run.run_id}.{i}", f"{variant}, trained from {base_label} (run {run.run_id})",
                              model, tokenizer, base)
        return notes

    def get(self, key: str | None) -> TrainedModel | None:
        with self._lock:
            return next((e for e in self._entries if e.key == key), None)

    def entries(self) -> list[TrainedModel]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self.entries())

    def clear(self) -> None:
        with self._lock:
            self._entries = []
