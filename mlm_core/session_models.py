"""The models one learner trained: kept in their session, bounded in number and memory.

A training run (``mlm_core.jobs.Run`` with ``keep_trained=True``) trains deep copies of a base
model. When it has finished, ``TrainedModels.add_run`` takes those copies from the run and keeps
them, newest first, so the Predictions and Inside-the-model pages can use them beside the base
model. They belong to one session (the store lives in its ``st.session_state``) and go with it;
the shared cached models are never replaced or changed. The store keeps at most ``max_models``
copies and ``max_bytes`` of weights: adding one drops the oldest ones that no longer fit.

Many sessions share one server, so every store also belongs to one ``server_budget.ServerBudget``
(``trained_models_budget``): all sessions' trained models together stay within
``MLMLAB_SERVER_TRAINED_MODELS`` (12) and ``MLMLAB_SERVER_TRAINED_MB`` (1024). When a new one does not fit,
the budget drops the least recently used model of the client (IP address) that holds the most, and that
session is told (``TrainedModels.take_notes``): a student keeping runs in four tabs loses their own first.

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

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from mlm_core.models import INFO_ATTR
from mlm_core.server_budget import ServerBudget, env_int

DEFAULT_MAX_MODELS = 3  # a run races up to three loss variants: one run's worth
DEFAULT_MAX_MB = 512  # about five copies of the bundled 22M-parameter default in fp32
DEFAULT_SERVER_MODELS = 12  # every session together: four students' three-variant runs
DEFAULT_SERVER_MB = 1024  # every session together: about eleven copies of the bundled default (90 MB each)


def trained_models_budget() -> ServerBudget:
    """The server's budget for every session's trained models: ``MLMLAB_SERVER_TRAINED_MODELS`` (12) and
    ``MLMLAB_SERVER_TRAINED_MB`` (1024); 0 models keeps none anywhere."""
    return ServerBudget("trained models", env_int("MLMLAB_SERVER_TRAINED_MODELS", DEFAULT_SERVER_MODELS),
                        env_int("MLMLAB_SERVER_TRAINED_MB", DEFAULT_SERVER_MB) * 2**20)


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
    used: list[float] = field(default_factory=lambda: [time.monotonic()], compare=False)  # when last shown


class TrainedModels:
    """A session's trained models, newest first, at most ``max_models`` and ``max_bytes`` of weights.

    Defaults: ``MLMLAB_TRAINED_MODELS`` (3) and ``MLMLAB_TRAINED_MB`` (512) from the environment;
    0 models keeps none. With a ``budget`` (the server's ``ServerBudget``) the session's models also
    count against every session's together; ``client`` says whose they are.
    """

    def __init__(self, max_models: int | None = None, max_bytes: int | None = None, *,
                 budget: ServerBudget | None = None, client: str = ""):
        self.max_models = env_int("MLMLAB_TRAINED_MODELS", DEFAULT_MAX_MODELS) if max_models is None else max_models
        self.max_bytes = env_int("MLMLAB_TRAINED_MB", DEFAULT_MAX_MB) * 2**20 if max_bytes is None else max_bytes
        self.client = client
        self.budget = budget
        self._entries: list[TrainedModel] = []
        self._notes: list[str] = []
        self._lock = threading.Lock()
        if budget is not None:
            budget.register(self)

    def add(self, key: str, label: str, model: nn.Module, tokenizer, base_model: nn.Module) -> list[str]:
        """Keep ``model`` (a copy this session owns) under ``key``; returns notes on what was dropped."""
        size = model_bytes(model)
        server = self.budget
        if self.max_models < 1 or size > self.max_bytes or (server is not None and (
                server.max_models < 1 or size > server.max_bytes)):
            limit = (f"this session keeps {self.max_models} trained model(s) of at most "
                     f"{self.max_bytes / 2**20:,.0f} MB in all")
            if server is not None:
                limit += f", the server {server.max_models} ({server.max_bytes / 2**20:,.0f} MB) for everyone"
            return [f"{label} was not kept: it needs {size / 2**20:,.0f} MB and {limit}."]
        model.eval()  # ours: a session-owned copy, never the shared cached model
        model.requires_grad_(False)
        model.zero_grad(set_to_none=True)  # gradients left by training would double what model_bytes counts
        info = dict(getattr(model, INFO_ATTR, None) or {})
        setattr(model, INFO_ATTR, dict(info, label=label, trained=True, source="session", name=None,
                                       description=f"Trained in this session from {info.get('label', 'a base model')}."))
        notes = []
        with server.lock if server is not None else contextlib.nullcontext():
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
                self._entries = kept[1:]  # the new one is not counted while room is made for it
            if server is not None:
                server.make_room(size, self)
            with self._lock:
                self._entries = [kept[0], *self._entries]
        notes += self.take_notes()
        return notes

    def drop(self, key: str, note: str) -> None:
        """The server's budget took this model away (``ServerBudget.make_room``): say so to the session."""
        with self._lock:
            before = len(self._entries)
            self._entries = [e for e in self._entries if e.key != key]
            if len(self._entries) < before:
                self._notes.append(note)

    def take_notes(self) -> list[str]:
        """What the server's budget dropped since the last call (each said once)."""
        with self._lock:
            notes, self._notes = self._notes, []
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
        """The model kept under ``key`` (now its most recent use), or None."""
        with self._lock:
            entry = next((e for e in self._entries if e.key == key), None)
        if entry is not None:
            entry.used[0] = time.monotonic()
        return entry

    def entries(self) -> list[TrainedModel]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        return len(self.entries())

    def clear(self) -> None:
        with self._lock:
            self._entries = []

