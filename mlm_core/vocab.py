"""Train a small WordPiece or BPE vocabulary and measure what its size changes.

The vocabulary decides what a "token" is (and so what whole-word masking protects), how long
sequences get, how many classes the MLM softmax has (the head's cost grows with V) and where the
loss starts (ln V, a uniform guess). This module trains vocabularies of a chosen size in memory
with Hugging Face ``tokenizers`` and measures how they cut a text. What V costs the head is
``mlm_core.costs.head_cost``; the Tokenizer page's masking demo and frequency profile are
``mlm_core.lessons.vocab``.

Shapes: B = batch, T = sequence length, H = hidden size, V = vocabulary, M = masked positions.

Both algorithms share BERT's text pipeline: lower-casing and accent stripping
(``BertNormalizer``) and splitting at spaces and punctuation (``BertPreTokenizer``), so both see
the same words (``word_ids`` and whole-word masking work the same way). Each writes its pieces in
its own notation: WordPiece marks a piece that *continues* a word ("##ing"); BPE marks the symbol
that *ends* a word ("ing</w>", the end-of-word symbol of Sennrich et al. 2016, §3.2, as their
subword-nmt code writes it). GPT-2/RoBERTa's byte-level BPE and SentencePiece mark the piece that
*starts* a word instead ("Ġ", "▁"). The marks are notation; what differs is how a word is cut:
WordPiece takes the longest piece in the vocabulary from the left, again and again, and makes a
word with an unknown character one [UNK]; BPE replays its learned merges in order and leaves only
the unknown character as [UNK] (``cut_differences`` lists the words two tokenizers cut apart).
The vocabularies themselves are learned alike: ``tokenizers``' WordPieceTrainer runs BPE's
most-frequent-pair merges (Google never released its likelihood-based trainer).

>>> texts = ["the cat sat on the mat", "the cats sat on the mats"] * 20
>>> trained = train_tokenizer(texts, 200)
>>> trained.tokenizer.tokenize("The cats")
['the', 'cats']
>>> measure(trained.tokenizer, ["the cats"]).tokens_per_word
1.0
"""

from __future__ import annotations

import hashlib
import json
import string
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from mlm_core.data import normalized, plain_encodings, pre_tokenized_words, shared_tokenizer
from mlm_core.errors import InputError
from mlm_core.server_budget import ServerBudget, env_int

ALGORITHMS = ("wordpiece", "bpe")
ALGORITHM_LABELS = {"wordpiece": "WordPiece", "bpe": "BPE"}
WORDPIECE_PREFIX = "##"  # WordPiece (BERT) marks a piece that continues a word
BPE_SUFFIX = "</w>"  # BPE as Sennrich et al. 2016 wrote it marks the symbol that ends a word
# The sizes a learner may ask for; the page offers those the corpus can reach (``reachable_sizes``).
SIZE_LADDER = (250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000)

# The order of Hugging Face's BertWordPieceTokenizer and of transformers' BertTokenizer() built
# from scratch. [PAD] must be 0: BertConfig.pad_token_id defaults to 0 and the embedding's
# padding_idx uses it. The other ids are read from the tokenizer (tokenizer.mask_token_id ...),
# never assumed. (bert-base-uncased has [UNK]=100..[MASK]=103 only because 99 [unusedN] slots
# come first; a small vocabulary has no room to spare for them.)
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = SPECIAL_TOKENS

MIN_VOCAB_SIZE = 200  # the special tokens and the ASCII alphabet alone take about 110
MAX_VOCAB_SIZE = 50_000  # a learner's corpus cannot support more; keeps training in seconds
MIN_FREQUENCY = 2  # HF BertWordPieceTokenizer's default: a merge must be seen at least twice
LIMIT_ALPHABET = 1000  # HF BertWordPieceTokenizer's default: the 1000 most frequent characters
MODEL_MAX_LENGTH = 512  # the position embeddings of the tiny and bert-base models

# Every ASCII letter and digit is kept, as a word start and as a "##" continuation, and ASCII
# punctuation as a word of its own (BertPreTokenizer splits it off), so plain English text
# never becomes [UNK] whatever corpus the vocabulary was trained on.
_ASCII_WORD_CHARS = string.ascii_lowercase + string.digits
_ASCII_ALPHABET = _ASCII_WORD_CHARS + string.punctuation

ProgressCallback = Callable[[float, str], None]


@dataclass(frozen=True)
class TrainedVocab:
    """A trained tokenizer with what was asked for and what the corpus supported."""

    tokenizer: object  # transformers PreTrainedTokenizerFast, BERT special tokens set
    algorithm: str  # "wordpiece" | "bpe"
    requested_size: int
    corpus_hash: str  # corpus_hash(texts) of the training text
    n_sentences: int
    seconds: float

    @property
    def vocab_size(self) -> int:
        """The size reached: smaller than requested when the corpus ran out of merges."""
        return len(self.tokenizer)

    @property
    def saturated(self) -> bool:
        """True when the corpus could not fill the requested size."""
        return self.vocab_size < self.requested_size

    @property
    def label(self) -> str:
        return f"{ALGORITHM_LABELS[self.algorithm]} {self.vocab_size:,}"


def corpus_hash(texts: Sequence[str]) -> str:
    """A short fingerprint of a corpus, for cache keys.

    >>> corpus_hash(["a b", "c"]) == corpus_hash(["a b", "c"]) != corpus_hash(["a", "b c"])
    True
    """
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()[:16]


def _bert_pipeline(model, algorithm: str = "wordpiece") -> Tokenizer:
    """A Tokenizer with BERT's normaliser and pre-tokeniser around ``model``, and the decoder of its marks."""
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = (decoders.WordPiece(prefix=WORDPIECE_PREFIX) if algorithm == "wordpiece"
                   else decoders.BPEDecoder(suffix=BPE_SUFFIX))
    return tok


def _wrap(tok: Tokenizer):
    """A transformers tokenizer with BERT's [CLS] A [SEP] (B [SEP]) template and special tokens."""
    vocab = tok.get_vocab()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    return shared_tokenizer(PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
        model_max_length=MODEL_MAX_LENGTH,
        do_lower_case=True,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # BERT's three inputs
    ))


def wordpiece_from_vocab(tokens: Sequence[str]):
    """A BERT-style tokenizer from a hand-written WordPiece vocabulary (ids in list order).

    The five special tokens are put first when missing, so hand-made examples stay short.

    >>> tok = wordpiece_from_vocab(["the", "cat", "##s"])
    >>> tok.tokenize("The cats"), tok.mask_token_id
    (['the', 'cat', '##s'], 4)
    """
    ordered = [t for t in SPECIAL_TOKENS if t not in tokens] + list(tokens)
    vocab = {token: i for i, token in enumerate(ordered)}
    if len(vocab) != len(ordered):
        raise InputError("The vocabulary lists a token twice.")
    tok = _bert_pipeline(models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##"))
    return _wrap(tok)


def _words(tok: Tokenizer, text: str) -> list[str]:
    """The words BERT's pipeline sees: normalised, split at whitespace and punctuation (``data.pre_tokenized_words``:
    a shared tokenizer's backend under its lock)."""
    return pre_tokenized_words(tok, text)


def _check_request(texts: Sequence[str], vocab_size: int, algorithm: str) -> list[str]:
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {algorithm!r}.")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise InputError(f"The vocabulary size must be a whole number, got {vocab_size!r}.")
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise InputError(
            f"Pick a vocabulary size between {MIN_VOCAB_SIZE:,} and {MAX_VOCAB_SIZE:,} (got {vocab_size:,})."
        )
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise InputError("The corpus is empty: paste or upload some sentences to train a vocabulary on.")
    return texts


def train_tokenizer(
    texts: Sequence[str],
    vocab_size: int,
    algorithm: str = "wordpiece",
    *,
    min_frequency: int = MIN_FREQUENCY,
    on_progress: ProgressCallback | None = None,
) -> TrainedVocab:
    """Train a WordPiece or BPE vocabulary of (at most) ``vocab_size`` entries on ``texts``.

    Special tokens take ids 0-4 ([PAD], [UNK], [CLS], [SEP], [MASK]); every ASCII letter and
    digit is always in the vocabulary. A small corpus runs out of merges before a large size:
    ``TrainedVocab.vocab_size`` is the size reached. ``on_progress(fraction, message)`` is called
    from the calling thread only (a Streamlit progress bar can take it).
    """
    texts = _check_request(texts, vocab_size, algorithm)
    report = on_progress or (lambda fraction, message: None)
    started = time.perf_counter()

    if algorithm == "wordpiece":
        model = models.WordPiece(unk_token=UNK, continuing_subword_prefix=WORDPIECE_PREFIX)
        trainer_class = trainers.WordPieceTrainer
        marks = dict(continuing_subword_prefix=WORDPIECE_PREFIX)
    else:  # Sennrich et al. 2016: the symbol that ends a word carries the end-of-word mark
        model = models.BPE(unk_token=UNK, end_of_word_suffix=BPE_SUFFIX)
        trainer_class = trainers.BpeTrainer
        marks = dict(end_of_word_suffix=BPE_SUFFIX)
    tok = _bert_pipeline(model, algorithm)

    # Pass 1, in Python on this thread (the Rust trainer reads its input on worker threads, where
    # a progress callback could not reach a UI): which characters continue or end a word?
    chars: Counter = Counter()
    continuing: set[str] = set()
    ending: set[str] = set()
    step = max(1, len(texts) // 20)
    for i, text in enumerate(texts):
        for word in _words(tok, text):
            chars.update(word)
            continuing.update(word[1:])
            ending.add(word[-1])
        if i % step == 0:
            report(0.5 * i / len(texts), f"Reading the corpus: {i:,} of {len(texts):,} sentences")
    alphabet = {c for c, _ in chars.most_common(LIMIT_ALPHABET)} | set(_ASCII_ALPHABET)
    # The marked single characters ("##e" for WordPiece, "e</w>" for BPE) are reserved up front, in
    # sorted order, next to the special tokens. The trainer would otherwise create them in hash-map
    # order, and their ids break ties between equally frequent merges, so the same corpus gave a
    # different vocabulary on every run (huggingface/tokenizers#1794). Reserved here, training is
    # reproducible.
    if algorithm == "wordpiece":
        pieces = sorted(f"{WORDPIECE_PREFIX}{c}" for c in (continuing & alphabet) | set(_ASCII_WORD_CHARS))
    else:
        pieces = sorted(f"{c}{BPE_SUFFIX}" for c in (ending & alphabet) | set(_ASCII_ALPHABET))

    report(0.5, f"Learning up to {vocab_size:,} {ALGORITHM_LABELS[algorithm]} tokens…")
    trainer = trainer_class(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS) + pieces,
        limit_alphabet=LIMIT_ALPHABET,
        initial_alphabet=list(_ASCII_ALPHABET),
        show_progress=False,
        **marks,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok = _unmark_special(tok, pieces)
    report(1.0, f"Done: {tok.get_vocab_size():,} tokens")
    return TrainedVocab(
        tokenizer=_wrap(tok),
        algorithm=algorithm,
        requested_size=vocab_size,
        corpus_hash=corpus_hash(texts),
        n_sentences=len(texts),
        seconds=time.perf_counter() - started,
    )


def _unmark_special(tok: Tokenizer, pieces: Sequence[str]) -> Tokenizer:
    """Keep ``pieces`` in the vocabulary but as ordinary word pieces, not special tokens."""
    state = json.loads(tok.to_str())
    drop = set(pieces)
    state["added_tokens"] = [t for t in state["added_tokens"] if t["content"] not in drop]
    return Tokenizer.from_str(json.dumps(state))


def reachable_sizes(largest: int, ladder: Sequence[int] = SIZE_LADDER) -> list[int]:
    """The sizes of ``ladder`` a corpus can fill: those below ``largest``, the size a training run
    reaches when asked for ``MAX_VOCAB_SIZE`` (every piece seen ``MIN_FREQUENCY`` times is in by then).

    >>> reachable_sizes(3013)
    [250, 500, 1000, 2000]
    """
    return [size for size in ladder if size < largest]


def strip_marks(piece: str) -> str:
    """A piece without its notation: "##ing", "ing</w>", "Ġing" and "▁ing" all give "ing".

    >>> [strip_marks(p) for p in ("##ing", "ing</w>", "Ġing", "▁ing", "ing")]
    ['ing', 'ing', 'ing', 'ing', 'ing']
    """
    if piece.startswith(WORDPIECE_PREFIX) and len(piece) > len(WORDPIECE_PREFIX):
        piece = piece[len(WORDPIECE_PREFIX):]
    if piece.endswith(BPE_SUFFIX) and len(piece) > len(BPE_SUFFIX):
        piece = piece[: -len(BPE_SUFFIX)]
    if piece[:1] in ("Ġ", "▁") and len(piece) > 1:
        piece = piece[1:]
    return piece


def cut_differences(first, second, sentence: str) -> list[tuple[str, list[str], list[str]]]:
    """The words of ``sentence`` that two tokenizers cut into different pieces, marks left aside.

    Returns (word, pieces of ``first``, pieces of ``second``) for each such word: what really
    differs once the notation ("##", "</w>") is set apart.
    """
    words = _words(first.backend_tokenizer, sentence)
    a, b = tokenize_words(first, sentence), tokenize_words(second, sentence)
    if len(a) != len(b):  # different pre-tokenisers: compare nothing rather than misalign
        return []
    return [(word, pa, pb) for word, pa, pb in zip(words, a, b)
            if [strip_marks(p) for p in pa] != [strip_marks(p) for p in pb]]


VOCAB_BYTES_PER_ENTRY = 256  # what a trained vocabulary holds per entry (Rust maps, merges, added tokens), measured
DEFAULT_SERVER_VOCABS = 64  # every session together: four students' Tokenizer page, both algorithms, all sizes
DEFAULT_SERVER_VOCAB_MB = 256


def vocab_bytes(entry: TrainedVocab) -> int:
    """About the memory a trained vocabulary holds (``VOCAB_BYTES_PER_ENTRY`` per entry; 2-4 MB measured for
    8,000-16,000 entries trained on 2 MB of WordNet glosses).

    >>> vocab_bytes(train_tokenizer(["the cats sat on the mats"] * 10, 200))
    51200
    """
    return VOCAB_BYTES_PER_ENTRY * max(entry.vocab_size, 200)


def vocabularies_budget() -> ServerBudget:
    """The server's budget for every session's trained vocabularies: ``MLMLAB_SERVER_VOCABS`` (64) and
    ``MLMLAB_SERVER_VOCAB_MB`` (256)."""
    return ServerBudget("trained vocabularies", env_int("MLMLAB_SERVER_VOCABS", DEFAULT_SERVER_VOCABS),
                        env_int("MLMLAB_SERVER_VOCAB_MB", DEFAULT_SERVER_VOCAB_MB) * 2**20)


@dataclass
class _Kept:
    """A vocabulary a cache holds, as its server budget sees it."""

    key: tuple[str, int, str]
    label: str
    nbytes: int
    used: list[float]
    entry: TrainedVocab


class VocabCache:
    """Trained vocabularies of one user session, keyed by (algorithm, requested size, corpus hash).

    A corpus that ran out of merges at S entries gives that same vocabulary for every size >= S
    (training is deterministic and merges come in the same order), so such a request is served
    without training again. Holds at most ``max_entries`` vocabularies, the least recently used dropped
    first. With a ``budget`` (``vocabularies_budget``, one per server) every session's vocabularies count
    together; what the budget took from this session is said once by ``take_notes``. Thread-safe.
    """

    def __init__(self, max_entries: int = 16, *, budget: ServerBudget | None = None, client: str = ""):
        self.max_entries = max_entries
        self.client = client
        self.budget = budget
        self._entries: dict[tuple[str, int, str], _Kept] = {}
        self._notes: list[str] = []
        self._lock = threading.Lock()
        if budget is not None:
            budget.register(self)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entries(self) -> list[_Kept]:
        with self._lock:
            return list(self._entries.values())

    def drop(self, key, note: str) -> None:
        """The server's budget took this vocabulary away: it is trained again when asked for, and the page says so."""
        with self._lock:
            if self._entries.pop(key, None) is not None:
                self._notes.append(note)

    def take_notes(self) -> list[str]:
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def get(self, algorithm: str, vocab_size: int, texts_hash: str) -> TrainedVocab | None:
        """The cached vocabulary for this request, or None when it has to be trained."""
        with self._lock:
            found = self._entries.get((algorithm, vocab_size, texts_hash))
            if found is not None:
                found.used[0] = time.monotonic()
                return found.entry
            for (alg, _, h), kept in self._entries.items():
                if alg == algorithm and h == texts_hash and kept.entry.saturated and kept.entry.vocab_size <= vocab_size:
                    kept.used[0] = time.monotonic()
                    return replace(kept.entry, requested_size=vocab_size)
        return None

    def get_or_train(
        self,
        texts: Sequence[str],
        vocab_size: int,
        algorithm: str = "wordpiece",
        *,
        texts_hash: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TrainedVocab:
        """The cached vocabulary, or a newly trained one (then cached, room made for it in the server's budget)."""
        texts_hash = texts_hash or corpus_hash(texts)
        key = (algorithm, vocab_size, texts_hash)
        entry = self.get(algorithm, vocab_size, texts_hash)
        if entry is not None:
            return entry
        entry = train_tokenizer(texts, vocab_size, algorithm, on_progress=on_progress)
        kept = _Kept(key, entry.label, vocab_bytes(entry), [time.monotonic()], entry)
        if self.budget is not None:
            with self.budget.lock:  # the budget's lock before this cache's own, never after
                self.budget.make_room(kept.nbytes, self)
                self._keep(kept)
        else:
            self._keep(kept)
        return entry

    def _keep(self, kept: _Kept) -> None:
        with self._lock:
            self._entries[kept.key] = kept
            while len(self._entries) > self.max_entries:
                oldest = min(self._entries, key=lambda k: self._entries[k].used[0])
                self._entries.pop(oldest)


# --- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class VocabMetrics:
    """How a vocabulary cuts a text. A "word" is what BERT's pre-tokeniser yields (punctuation
    marks count as words), the unit whole-word masking keeps together."""

    vocab_size: int
    n_words: int
    n_tokens: int  # without [CLS]/[SEP]
    n_split_words: int  # words cut into two or more pieces
    n_unk: int  # [UNK] tokens
    n_unk_words: int  # words with at least one [UNK]

    @property
    def tokens_per_word(self) -> float:
        return self.n_tokens / self.n_words if self.n_words else float("nan")

    @property
    def split_share(self) -> float:
        return self.n_split_words / self.n_words if self.n_words else float("nan")

    @property
    def unk_rate(self) -> float:
        """Share of tokens that are [UNK]."""
        return self.n_unk / self.n_tokens if self.n_tokens else float("nan")

    @property
    def unk_word_share(self) -> float:
        return self.n_unk_words / self.n_words if self.n_words else float("nan")

    def as_dict(self) -> dict:
        return {
            "vocab_size": self.vocab_size,
            "words": self.n_words,
            "tokens": self.n_tokens,
            "tokens_per_word": self.tokens_per_word,
            "split_share": self.split_share,
            "unk_rate": self.unk_rate,
            "unk_word_share": self.unk_word_share,
        }




def measure(tokenizer, texts: Sequence[str]) -> VocabMetrics:
    """Tokens per word, split-word share and [UNK] rate of ``tokenizer`` on ``texts``.

    >>> tok = wordpiece_from_vocab(["the", "cat", "##s"])
    >>> m = measure(tok, ["the cats sat"])  # the | cat ##s | [UNK]
    >>> m.n_words, m.n_tokens, m.n_split_words, m.n_unk
    (3, 4, 1, 1)
    """
    unk_id = tokenizer.unk_token_id
    n_words = n_tokens = n_split = n_unk = n_unk_words = 0
    for enc in plain_encodings(tokenizer, texts):
        pieces: Counter = Counter()
        unk_words = set()
        for token_id, word in zip(enc.ids, enc.word_ids):
            if word is None:
                continue
            pieces[word] += 1
            if token_id == unk_id:
                unk_words.add(word)
                n_unk += 1
        n_words += len(pieces)
        n_tokens += sum(pieces.values())
        n_split += sum(1 for count in pieces.values() if count > 1)
        n_unk_words += len(unk_words)
    return VocabMetrics(len(tokenizer), n_words, n_tokens, n_split, n_unk, n_unk_words)


# --- words and their pieces ------------------------------------------------------------------


def tokenize_words(tokenizer, sentence: str) -> list[list[str]]:
    """The sentence's words, each as the list of its pieces (no special tokens).

    >>> tokenize_words(wordpiece_from_vocab(["the", "cat", "##s"]), "The cats")
    [['the'], ['cat', '##s']]
    """
    enc = plain_encodings(tokenizer, [sentence])[0]
    words: dict[int, list[str]] = {}
    for token, word in zip(enc.tokens, enc.word_ids):
        if word is not None:
            words.setdefault(word, []).append(token)
    return [words[w] for w in sorted(words)]


def sentence_words(tokenizer, sentence: str) -> list[str]:
    """The words of ``sentence`` as the tokenizer's pipeline sees them (normalised, punctuation apart).

    >>> sentence_words(wordpiece_from_vocab(["the"]), "The Café, open.")
    ['the', 'cafe', ',', 'open', '.']
    """
    return _words(tokenizer.backend_tokenizer, sentence)


def most_split_word(tokenizer, sentence: str) -> str | None:
    """The word of ``sentence`` cut into the most pieces (the first such word), in normalised form.

    >>> most_split_word(wordpiece_from_vocab(["the", "cat", "##s"]), "the cats")
    'cats'
    """
    words = tokenize_words(tokenizer, sentence)
    if not words:
        return None
    normalised = _words(tokenizer.backend_tokenizer, sentence)
    best = max(range(len(words)), key=lambda i: (len(words[i]), -i))
    return normalised[best]




def normalize_text(tokenizer, text: str) -> str:
    """``text`` as the tokenizer's normaliser leaves it, whitespace collapsed (round-trip target).

    >>> normalize_text(wordpiece_from_vocab(["the"]), "  The   Café ")
    'the cafe'
    """
    return " ".join(normalized(tokenizer.backend_tokenizer, text).split())


def holdout_split(texts: Sequence[str], every: int = 10, min_sentences: int = 50) -> tuple[list[str], list[str]]:
    """Training sentences and held-out sentences (every ``every``-th one) for honest metrics.

    A corpus smaller than ``min_sentences`` is used whole for both (and the page says so).

    >>> train, test = holdout_split([str(i) for i in range(100)])
    >>> len(train), test[:3]
    (90, ['9', '19', '29'])
    """
    texts = list(texts)
    if len(texts) < min_sentences:
        return texts, texts
    held = [t for i, t in enumerate(texts) if i % every == every - 1]
    kept = [t for i, t in enumerate(texts) if i % every != every - 1]
    return kept, held
