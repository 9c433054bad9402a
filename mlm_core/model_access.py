"""Which models a session may load, and how big a model may be: checked before anything is loaded.

One server serves a whole class, so a model name is untrusted input. It may be hostile (a
300-character name, ``~nosuchuser/x``, a path that probes the server's folders) or heavy (a 1 KB
``config.json`` asking for 20 million tokens makes transformers allocate 20 GB). So:

- every name is checked first (length, characters) and every problem with it becomes one kind of
  ``ModelLoadError`` that never shows a server path;
- the parameter count is estimated from the config, and read from the safetensors headers, before
  any weight is allocated or downloaded, and refused above ``MLMLAB_MAX_PARAMS``; then the model is built
  on PyTorch's ``meta`` device (shapes, no memory) and what it would really allocate is counted, and its
  depth (layers one forward pass runs: ALBERT's shared layers × inner groups) is capped by
  ``MLMLAB_MAX_LAYERS``, so no config field we do not read (inner groups, position buckets) slips by;
- a session that is not on the server's own machine (a student on a classroom server) may load only
  the bundled default, the tiny random BERT, models already in the server's Hugging Face cache and
  the teacher's list ``MLMLAB_ALLOWED_MODELS``; ``MLMLAB_ALLOW_ANY_MODEL=1`` lifts that. A model
  named in a shared link is held to that list always: a link is someone else's choice.

>>> check_model_name("  bert-base-uncased ")
'bert-base-uncased'
>>> from transformers import BertConfig
>>> round(estimate_parameters(BertConfig()) / 1e6)  # bert-base-uncased: 109.5M with its MLM head
110
"""

from __future__ import annotations

import os
import re
import unicodedata
from typing import Iterable

import torch
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING

from mlm_core.errors import ModelLoadError

__all__ = [
    "MAX_NAME_CHARS",
    "DEFAULT_MAX_PARAMS",
    "check_model_name",
    "shown_name",
    "scrub_paths",
    "max_params",
    "allowed_models",
    "any_model_allowed",
    "is_builtin",
    "check_access",
    "estimate_parameters",
    "check_parameter_count",
    "DEFAULT_MAX_LAYERS",
    "max_layers",
    "forward_depth",
    "parameters_on_meta",
    "check_built_size",
]

# Hub ids are at most 96 characters; local folders get some room beyond that.
MAX_NAME_CHARS = 200
# A laptop holds bert-large (335M parameters) and xlm-roberta-large (560M, 2.2 GB in fp32) with room
# to spare; a training run needs about four copies' worth (weights, gradients, AdamW's two moments).
DEFAULT_MAX_PARAMS = 600_000_000
# Layers one forward pass runs: bert-large and xlm-roberta-large run 24, ALBERT-xxlarge 12 (one shared group).
DEFAULT_MAX_LAYERS = 48
# Read before transformers parses it: a real config.json is a few KB.
MAX_CONFIG_BYTES = 1_000_000
# tokenizer.json of xlm-roberta-large is 17 MB; anything far above is not a tokenizer file.
MAX_TOKENIZER_FILE_BYTES = 64_000_000

BUILTIN_NAMES = ("", "default", "tiny-random")


# --------------------------------------------------------------------------- names
def shown_name(name: str, limit: int = 60) -> str:
    """The name as the learner typed it, clipped and without control characters, for a message."""
    text = "".join(c if unicodedata.category(c)[0] != "C" else "?" for c in str(name)[: limit + 1])
    return repr(text if len(text) <= limit else text[:limit] + "…")


def check_model_name(name) -> str:
    """The name stripped, or ``ModelLoadError`` when it cannot be a model id or folder name."""
    text = str(name if name is not None else "")
    if len(text) > MAX_NAME_CHARS + 100:  # never even strip a pasted book
        text = text[: MAX_NAME_CHARS + 100]
    text = text.strip()
    if len(text) > MAX_NAME_CHARS:
        raise ModelLoadError(
            f"{shown_name(text)} is not a model name MLM Lab can load: names have at most "
            f"{MAX_NAME_CHARS} characters (Hugging Face ids at most 96)."
        )
    if any(unicodedata.category(c)[0] == "C" for c in text):
        raise ModelLoadError(
            f"{shown_name(text)} is not a model name MLM Lab can load: it holds control characters."
        )
    return text


_PATH = re.compile(r"(?<![\w:/.])(?:~[\w.-]*|[A-Za-z]:\\|/)[^\s'\"(),;]*")


def scrub_paths(text: str) -> str:
    """``text`` with every file-system path replaced by ``…`` (error messages of libraries name them).

    >>> scrub_paths("Can't load '/home/teacher/models/x' (see https://huggingface.co/x).")
    "Can't load '…' (see https://huggingface.co/x)."
    """
    return _PATH.sub("…", str(text))


# --------------------------------------------------------------------------- settings
def max_params() -> int:
    """``MLMLAB_MAX_PARAMS`` (a count such as ``600000000`` or ``600M``), else ``DEFAULT_MAX_PARAMS``."""
    raw = (os.environ.get("MLMLAB_MAX_PARAMS") or "").strip().upper().replace("_", "").replace(",", "")
    if not raw:
        return DEFAULT_MAX_PARAMS
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}.get(raw[-1], 1)
    try:
        value = float(raw[:-1] if scale != 1 else raw) * scale
    except ValueError:
        return DEFAULT_MAX_PARAMS
    return int(value) if value > 0 else DEFAULT_MAX_PARAMS


def allowed_models() -> frozenset[str]:
    """The teacher's list, ``MLMLAB_ALLOWED_MODELS``: ids or folders separated by commas or spaces."""
    raw = os.environ.get("MLMLAB_ALLOWED_MODELS") or ""
    return frozenset(part for part in re.split(r"[,\s]+", raw) if part)


def any_model_allowed() -> bool:
    """``MLMLAB_ALLOW_ANY_MODEL=1``: every session may load any hub id or server folder."""
    return (os.environ.get("MLMLAB_ALLOW_ANY_MODEL") or "").strip().lower() in ("1", "true", "yes", "on")


def is_builtin(name: str | None) -> bool:
    """The bundled default or the tiny random BERT: always there, always small."""
    return name is None or str(name).strip() in BUILTIN_NAMES


def check_access(name: str | None, *, trusted: bool, from_link: bool = False,
                 cached: Iterable[str] = ()) -> None:
    """``ModelLoadError`` unless this session may load ``name`` (see the module docstring).

    ``trusted``: the session runs on the server's own machine, or ``MLMLAB_ALLOW_ANY_MODEL`` is set.
    ``cached``: masked LMs already in the server's Hugging Face cache.

    >>> check_access("tiny-random", trusted=False)
    >>> check_access("someone/huge", trusted=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    mlm_core.errors.ModelLoadError: 'someone/huge' is not available on this shared server. ...
    """
    if is_builtin(name):
        return
    name = check_model_name(name)
    if name in allowed_models() or name in set(cached):
        return
    if from_link:
        raise ModelLoadError(
            f"The link names the model {shown_name(name)}, which this server does not offer, so the "
            "bundled default is used. Links can name the bundled default, tiny-random, models already "
            "in the server's cache, or the teacher's list (MLMLAB_ALLOWED_MODELS)."
        )
    if trusted or any_model_allowed():
        return
    raise ModelLoadError(
        f"{shown_name(name)} is not available on this shared server. Students can pick the bundled "
        "default, tiny-random, and the models in the model list (already on the server, or on the "
        "teacher's list MLMLAB_ALLOWED_MODELS); other hub ids and folders are for the teacher, on the "
        "server's own machine."
    )


# --------------------------------------------------------------------------- size, before loading
def _positive_int(config, *names: str, default: int | None = None) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
            raise ModelLoadError(f"The model's config has an impossible {name} ({shown_name(str(value), 30)}).")
        return int(value)
    return default


def estimate_parameters(config) -> int:
    """About how many parameters a masked LM built from ``config`` has, without building it.

    Embeddings (vocabulary, positions, segment types) + layers (attention: 4 H×H, feed-forward:
    2 H×I, biases and LayerNorms) + the MLM head (H×E transform, V output biases; the output
    projection is tied to the word embeddings). ALBERT counts its shared layer groups once.
    Within a few percent of the real count for BERT, RoBERTa, DistilBERT, ALBERT and ELECTRA.
    """
    vocab = _positive_int(config, "vocab_size")
    hidden = _positive_int(config, "hidden_size", "dim", "d_model", "n_embd")
    if not vocab or not hidden:
        raise ModelLoadError("The model's config does not say its vocabulary and hidden sizes, so its size "
                             "cannot be checked before loading; MLM Lab does not load it.")
    layers = _positive_int(config, "num_hidden_layers", "n_layers", "num_layers", "n_layer", default=12)
    inner = _positive_int(config, "intermediate_size", "hidden_dim", "ffn_dim", default=4 * hidden)
    positions = _positive_int(config, "max_position_embeddings", "n_positions", default=512)
    types = _positive_int(config, "type_vocab_size", default=2)
    embed = _positive_int(config, "embedding_size", default=hidden)
    if getattr(config, "model_type", None) == "albert":
        layers = min(layers, _positive_int(config, "num_hidden_groups", default=1) or 1)
    embeddings = (vocab + positions + types) * embed + 2 * embed + (embed * hidden + hidden if embed != hidden else 0)
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inner + inner + hidden + 4 * hidden
    head = hidden * embed + embed + 2 * embed + vocab
    return embeddings + layers * layer + head


def max_layers() -> int:
    """``MLMLAB_MAX_LAYERS`` (a count), else ``DEFAULT_MAX_LAYERS``: the most layers one forward pass may run."""
    raw = (os.environ.get("MLMLAB_MAX_LAYERS") or "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_LAYERS


_DEPTH_FIELDS = ("num_hidden_layers", "n_layers", "num_layers", "n_layer", "encoder_layers")


def forward_depth(config) -> int:
    """How many transformer layers one forward pass runs, from the config alone, before anything is built.

    ALBERT shares its layers: ``num_hidden_layers`` passes, each through ``inner_group_num`` layers (and it
    builds ``num_hidden_groups × inner_group_num`` of them); Funnel sums its ``block_sizes``.

    >>> from transformers import AlbertConfig
    >>> forward_depth(AlbertConfig(num_hidden_layers=12, inner_group_num=60))
    720
    """
    layers = max([_positive_int(config, name, default=0) or 0 for name in _DEPTH_FIELDS] + [1])
    inner = _positive_int(config, "inner_group_num", default=1) or 1
    groups = _positive_int(config, "num_hidden_groups", default=1) or 1
    blocks = getattr(config, "block_sizes", None)
    funnel = sum(int(b) for b in blocks) if isinstance(blocks, (list, tuple)) and all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in blocks) else 0
    return max(layers * inner, groups * inner, funnel)


def parameters_on_meta(config) -> int:
    """The parameters the masked LM of ``config`` really allocates (each shared tensor once), counted on a model
    built on PyTorch's ``meta`` device: shapes only, no memory, no weights read."""
    cls = MODEL_FOR_MASKED_LM_MAPPING.get(type(config), None)
    if cls is None:
        raise ModelLoadError(f"A {shown_name(str(getattr(config, 'model_type', '?')), 30)!s} model has no masked-LM "
                             "class in Hugging Face Transformers.")
    try:
        with torch.device("meta"):
            model = cls(config)
    except Exception:
        raise ModelLoadError("The model's config cannot be built to check its size before loading (an impossible "
                             "combination of sizes), so MLM Lab does not load it.") from None
    return sum({id(p): p.numel() for p in (*model.parameters(), *model.buffers())}.values())


def check_built_size(config, what: str, limit: int | None = None) -> None:
    """``ModelLoadError`` when the model of ``config`` runs more than ``MLMLAB_MAX_LAYERS`` layers per forward
    pass, or allocates more than ``MLMLAB_MAX_PARAMS`` numbers (counted on the meta device); depth first,
    since building a model of a million layers, even without memory, takes the server's time."""
    depth, most = forward_depth(config), max_layers()
    if depth > most:
        raise ModelLoadError(
            f"{what} runs {depth:,} layers per forward pass (its config's layers × inner groups); this server runs "
            f"models of up to {most:,} (MLMLAB_MAX_LAYERS), so it does not load it."
        )
    check_parameter_count(parameters_on_meta(config), what, limit)


def check_parameter_count(count: int, what: str, limit: int | None = None) -> None:
    """``ModelLoadError`` when ``count`` parameters are more than the server allows."""
    limit = max_params() if limit is None else int(limit)
    if count > limit:
        raise ModelLoadError(
            f"{what} has about {count / 1e6:,.0f} million parameters; this server loads models of up to "
            f"{limit / 1e6:,.0f} million (MLMLAB_MAX_PARAMS), so it does not load it."
        )
