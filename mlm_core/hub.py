"""The Hugging Face hub and its local cache: is it reachable, what is cached, what would a download hold.

``mlm_core.models`` loads; this module answers its questions about the hub before anything is
loaded: whether downloads are off (``offline``), where the cache is (``cache_dir``), which masked
LMs it already holds (``cached_masked_lms``), how many parameters an uncached repo's safetensors
hold (``check_repo``, from their headers, before any download), and why a request failed, in plain
words (``explain_failure``). Requests time out fast (``limit_timeouts``): a classroom without a
network should not wait on a page.

>>> is_repo_id("bert-base-uncased"), is_repo_id("no such/model name")
(True, False)
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, constants, get_safetensors_metadata, scan_cache_dir, try_to_load_from_cache
from huggingface_hub.utils import validate_repo_id
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from mlm_core import model_access
from mlm_core.errors import ModelLoadError
from mlm_core.model_access import scrub_paths, shown_name

# Without a network, a metadata request should fail fast instead of blocking a page for long.
HUB_ETAG_TIMEOUT_S = 5
HUB_DOWNLOAD_TIMEOUT_S = 10
# The small files of a repo, sized before a download (a tokenizer file is a few MB at most).
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
               "sentencepiece.bpe.model", "spiece.model", "special_tokens_map.json")


def offline() -> bool:
    """Downloads are off: ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` set now or when the hub was imported."""
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any(
        (v or "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in flags
    )


def limit_timeouts() -> None:
    """Shorten huggingface_hub's request timeouts, unless the user chose them with its variables.

    huggingface_hub reads ``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT`` once at import and
    looks the values up in ``huggingface_hub.constants`` at every request (checked in 2.4), so the
    constants are lowered there; lowering is idempotent and never raises a user's choice.
    """
    if "HF_HUB_ETAG_TIMEOUT" not in os.environ:
        constants.HF_HUB_ETAG_TIMEOUT = min(constants.HF_HUB_ETAG_TIMEOUT, HUB_ETAG_TIMEOUT_S)
    if "HF_HUB_DOWNLOAD_TIMEOUT" not in os.environ:
        constants.HF_HUB_DOWNLOAD_TIMEOUT = min(constants.HF_HUB_DOWNLOAD_TIMEOUT, HUB_DOWNLOAD_TIMEOUT_S)


def cache_dir() -> Path:
    """The hub cache folder as the environment says now (``HF_HUB_CACHE``, else ``HF_HOME``/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def is_repo_id(name: str) -> bool:
    """``name`` is shaped like a hub id (``bert-base-uncased``, ``someone/their-model``)."""
    try:
        validate_repo_id(name)
    except Exception:
        return False
    return True


def cached_snapshot(name: str) -> Path | None:
    """The snapshot folder of a hub id in the local cache, or None when its config is not cached."""
    try:
        found = try_to_load_from_cache(name, "config.json", cache_dir=str(cache_dir()))
    except Exception:
        return None
    return Path(found).parent if isinstance(found, str) else None


def short_reason(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception, trimmed, for a message a learner reads."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def explain_failure(where: str, exc: Exception, offline: bool, what: str = "model") -> str:
    """Why a hub model could not be had, in plain words, with the library's reason stripped of paths."""
    detail = scrub_paths(short_reason(exc))
    if offline:
        return (
            f"{where} is not in this server's Hugging Face cache, and downloads are off "
            f"(HF_HUB_OFFLINE is set), so its {what} cannot be loaded."
        )
    lowered = detail.lower()
    if "not found" in lowered or "does not appear" in lowered or "is not a valid model identifier" in lowered or "404" in lowered:
        return f"There is no public model {where} on the Hugging Face hub (check the spelling) ({detail})."
    return f"The {what} of {where} could not be downloaded or read ({detail})."


def check_repo(name: str, limit: int) -> None:
    """Before downloading: the repo's safetensors hold at most ``limit`` parameters, its small files are small."""
    try:
        metadata = get_safetensors_metadata(name)
    except Exception as exc:
        if type(exc).__name__ == "NotASafetensorsRepoError":
            raise ModelLoadError(
                f"{shown_name(name)} has no .safetensors weights on the Hugging Face hub. MLM Lab loads "
                "weights from safetensors only (pickled .bin files can run code when they are read)."
            ) from None
        raise ModelLoadError(explain_failure(shown_name(name), exc, False)) from None
    model_access.check_parameter_count(sum(metadata.parameter_count.values()), shown_name(name), limit)
    try:
        infos = HfApi().get_paths_info(name, list(SMALL_FILES))
    except Exception as exc:
        raise ModelLoadError(explain_failure(shown_name(name), exc, False)) from None
    for info in infos:
        if (getattr(info, "size", 0) or 0) > model_access.MAX_TOKENIZER_FILE_BYTES:
            raise ModelLoadError(f"{shown_name(name)} has a {info.path} of {info.size / 1e6:,.0f} MB; "
                                 "MLM Lab does not download it.")


def cached_masked_lms() -> list[dict[str, Any]]:
    """Masked-LM repos in the local hub cache: a snapshot whose config names a *ForMaskedLM class or an MLM model type."""
    cache = cache_dir()
    if not cache.is_dir():
        return []
    # The sidebar asks on every rerun: scan again only when a repo folder was added or removed.
    return [dict(m) for m in _scan_cache(str(cache), cache.stat().st_mtime_ns)]


@functools.lru_cache(maxsize=4)
def _scan_cache(cache: str, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    try:
        repos = [r for r in scan_cache_dir(cache).repos if r.repo_type == "model"]
    except Exception:
        return ()
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
            if has_head or (not archs and config.get("model_type") in MODEL_FOR_MASKED_LM_MAPPING_NAMES):
                found.append({"name": repo.repo_id, "size_on_disk": repo.size_on_disk})
                break
    return tuple(found)
