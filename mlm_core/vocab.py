"""Train a small WordPiece or BPE vocabulary and measure what its size changes.

The vocabulary decides what a "token" is (and so what whole-word masking protects), how long
sequences get, how many classes the MLM softmax has (the head's cost grows with V) and where the
loss starts (ln V, a uniform guess). This module trains vocabularies of a chosen size in memory
with Hugging Face ``tokenizers`` and computes those numbers.

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
import math
import string
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from mlm_core.data import plain_encodings
from mlm_core.errors import InputError

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
    from transformers import PreTrainedTokenizerFast

    vocab = tok.get_vocab()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        pad_token=PAD,
        cls_token=CLS,
        sep_token=SEP,
        mask_token=MASK,
        model_max_length=MODEL_MAX_LENGTH,
        do_lower_case=True,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # BERT's three inputs
    )


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
    """The words BERT's pipeline sees: normalised, split at whitespace and punctuation."""
    return [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))]


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


class VocabCache:
    """Trained vocabularies of one user session, keyed by (algorithm, requested size, corpus hash).

    A corpus that ran out of merges at S entries gives that same vocabulary for every size >= S
    (training is deterministic and merges come in the same order), so such a request is served
    without training again. Holds at most ``max_entries`` vocabularies, the oldest dropped first.
    """

    def __init__(self, max_entries: int = 16):
        self.max_entries = max_entries
        self._entries: dict[tuple[str, int, str], TrainedVocab] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, algorithm: str, vocab_size: int, texts_hash: str) -> TrainedVocab | None:
        """The cached vocabulary for this request, or None when it has to be trained."""
        found = self._entries.get((algorithm, vocab_size, texts_hash))
        if found is not None:
            return found
        for (alg, _, h), entry in self._entries.items():
            if alg == algorithm and h == texts_hash and entry.saturated and entry.vocab_size <= vocab_size:
                return replace(entry, requested_size=vocab_size)
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
        """The cached vocabulary, or a newly trained one (then cached)."""
        texts_hash = texts_hash or corpus_hash(texts)
        entry = self.get(algorithm, vocab_size, texts_hash)
        if entry is None:
            entry = train_tokenizer(texts, vocab_size, algorithm, on_progress=on_progress)
        self._entries.pop((algorithm, vocab_size, texts_hash), None)
        self._entries[(algorithm, vocab_size, texts_hash)] = entry
        while len(self._entries) > self.max_entries:
            self._entries.pop(next(iter(self._entries)))
        return entry


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


def _encode_plain(tokenizer, texts: Sequence[str]):
    return plain_encodings(tokenizer, texts)


def measure(tokenizer, texts: Sequence[str]) -> VocabMetrics:
    """Tokens per word, split-word share and [UNK] rate of ``tokenizer`` on ``texts``.

    >>> tok = wordpiece_from_vocab(["the", "cat", "##s"])
    >>> m = measure(tok, ["the cats sat"])  # the | cat ##s | [UNK]
    >>> m.n_words, m.n_tokens, m.n_split_words, m.n_unk
    (3, 4, 1, 1)
    """
    unk_id = tokenizer.unk_token_id
    n_words = n_tokens = n_split = n_unk = n_unk_words = 0
    for enc in _encode_plain(tokenizer, texts):
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


@dataclass(frozen=True)
class FrequencyProfile:
    """How often each vocabulary entry occurs in a text, most frequent first (Zipf's rank plot)."""

    tokens: tuple[str, ...]  # every non-special entry, by count, descending
    counts: tuple[int, ...]  # aligned with tokens

    @property
    def n_unused(self) -> int:
        """Entries never used on this text: softmax classes the head pays for anyway."""
        return sum(1 for c in self.counts if c == 0)

    def share_covered_by_top(self, fraction: float) -> float:
        """Share of all token occurrences taken by the most frequent ``fraction`` of the vocabulary."""
        total = sum(self.counts)
        k = max(1, round(len(self.counts) * fraction))
        return sum(self.counts[:k]) / total if total else float("nan")


def frequency_profile(tokenizer, texts: Sequence[str]) -> FrequencyProfile:
    """Count every vocabulary entry on ``texts`` (special tokens left out).

    >>> p = frequency_profile(wordpiece_from_vocab(["the", "cat", "##s"]), ["the cat the"])
    >>> p.tokens, p.counts
    (('the', 'cat', '##s'), (2, 1, 0))
    """
    counts: Counter = Counter()
    for enc in _encode_plain(tokenizer, texts):
        counts.update(enc.ids)
    special = set(tokenizer.all_special_ids)
    id_to_token = {i: t for t, i in tokenizer.get_vocab().items()}
    ids = [i for i in range(len(tokenizer)) if i not in special and i in id_to_token]
    ids.sort(key=lambda i: (-counts[i], i))
    return FrequencyProfile(tuple(id_to_token[i] for i in ids), tuple(counts[i] for i in ids))


@dataclass(frozen=True)
class HeadCost:
    """What V costs the MLM head for one batch: the decoder is an (H → V) matmul per position.

    Forward FLOPs only (a multiply-add counts 2; backward is about twice more). The H→H transform
    before the decoder does not depend on V and is left out.
    """

    vocab_size: int
    hidden_size: int
    batch_size: int
    seq_len: int
    masked_positions: int  # M = round(mlm_probability * B * T)
    bytes_per_value: int

    @property
    def flops_per_position(self) -> int:
        return 2 * self.hidden_size * self.vocab_size

    @property
    def flops_full(self) -> int:
        """Head at every position, as BertForMaskedLM(labels=...) computes it."""
        return self.flops_per_position * self.batch_size * self.seq_len

    @property
    def flops_gathered(self) -> int:
        """Head at the M masked positions only."""
        return self.flops_per_position * self.masked_positions

    @property
    def logits_bytes_full(self) -> int:
        """The (B, T, V) logits tensor."""
        return self.batch_size * self.seq_len * self.vocab_size * self.bytes_per_value

    @property
    def logits_bytes_gathered(self) -> int:
        """The (M, V) logits tensor."""
        return self.masked_positions * self.vocab_size * self.bytes_per_value

    @property
    def head_parameters(self) -> int:
        """Decoder weight (V, H), tied to the word embeddings, plus its bias (V,)."""
        return self.vocab_size * self.hidden_size + self.vocab_size

    @property
    def start_loss(self) -> float:
        """ln V: the cross-entropy of a model that has not learnt anything yet (uniform guess)."""
        return math.log(self.vocab_size)


def head_cost(
    vocab_size: int,
    *,
    hidden_size: int = 768,
    batch_size: int = 32,
    seq_len: int = 128,
    mlm_probability: float = 0.15,
    bytes_per_value: int = 4,
) -> HeadCost:
    """The head's cost for a vocabulary of ``vocab_size`` (defaults: bert-base, B=32, T=128, fp32).

    >>> c = head_cost(30522)
    >>> c.flops_per_position, c.masked_positions, round(c.logits_bytes_full / 2**20)
    (46881792, 614, 477)
    """
    if vocab_size < 1 or hidden_size < 1 or batch_size < 1 or seq_len < 1:
        raise InputError("Vocabulary, hidden size, batch size and sequence length must all be positive.")
    if not 0.0 <= mlm_probability <= 1.0:
        raise InputError(f"mlm_probability must be between 0 and 1, got {mlm_probability!r}.")
    masked = round(mlm_probability * batch_size * seq_len)
    return HeadCost(vocab_size, hidden_size, batch_size, seq_len, masked, bytes_per_value)


# --- tokens and masking demo -----------------------------------------------------------------


def tokenize_words(tokenizer, sentence: str) -> list[list[str]]:
    """The sentence's words, each as the list of its pieces (no special tokens).

    >>> tokenize_words(wordpiece_from_vocab(["the", "cat", "##s"]), "The cats")
    [['the'], ['cat', '##s']]
    """
    enc = _encode_plain(tokenizer, [sentence])[0]
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


@dataclass(frozen=True)
class MaskingExample:
    """One draw of one strategy, ready for token chips."""

    strategy: str
    draw: int  # which of the draws this is
    tokens: list[str]  # what the model sees after masking
    originals: list[str]  # the tokens before masking
    decisions: list[str]  # masking.decision_names: "MASK", "NOT_SELECTED", ..., "SPECIAL" on [CLS] and [SEP]
    special: list[bool]  # [CLS], [SEP]: never selected
    word_hidden: int  # how many pieces of the watched word were selected in this draw


@dataclass(frozen=True)
class WholeWordDemo:
    """Token vs whole-word masking on a sentence, seen from one word cut into several pieces."""

    word: str
    word_positions: tuple[int, ...]  # positions of its pieces in ``examples[...].tokens``
    n_draws: int
    examples: dict  # strategy -> MaskingExample: a draw in which the word was hit
    hit_share: dict  # strategy -> share of draws selecting at least one of its pieces
    partial_share: dict  # strategy -> share of those draws that left some of its pieces visible


def whole_word_demo(
    tokenizer,
    sentence: str,
    word: str | None = None,
    *,
    seed: int = 0,
    n_draws: int = 400,
    mlm_probability: float = 0.15,
) -> WholeWordDemo:
    """Mask ``sentence`` ``n_draws`` times with each strategy and watch ``word`` (default: the most
    split word). Token masking often hides only some pieces of it, so the model can read the rest
    of the word from the visible pieces; whole-word masking hides all of them or none.

    The example shown for each strategy is the first draw that hits the word (for token masking,
    the first that hits it only partly, when there is one): chosen by rule, from one seeded
    generator, so the same seed always shows the same example.
    """
    from mlm_core.data import encode, special_ids
    from mlm_core.masking import Decision, MaskingConfig, decision_names, mask_tokens

    if n_draws < 1:
        raise InputError("n_draws must be at least 1.")
    encoded = encode(tokenizer, [sentence], max_length=MODEL_MAX_LENGTH)
    normalised = _words(tokenizer.backend_tokenizer, sentence)
    if word is None:
        word = most_split_word(tokenizer, sentence)
    target = tokenizer.backend_tokenizer.normalizer.normalize_str(word or "").strip()
    if target not in normalised:
        raise InputError(f"{word!r} is not a word of the sentence; pick one of: {', '.join(normalised)}.")
    word_index = normalised.index(target)
    word_ids = encoded.word_ids[0]  # (T,)
    positions = tuple(int(p) for p in (word_ids == word_index).nonzero().flatten())

    # n_draws copies of the sentence: one row per independent draw, one generator for all.
    input_ids = encoded.input_ids.expand(n_draws, -1)  # (N, T)
    special = encoded.special_tokens_mask.expand(n_draws, -1)
    words = encoded.word_ids.expand(n_draws, -1)
    in_word = (word_ids == word_index)[None, :]  # (1, T)
    originals = encoded.tokens[0]

    examples, hit_share, partial_share = {}, {}, {}
    for offset, strategy in enumerate(("token", "whole_word")):
        generator = torch.Generator().manual_seed(seed * 2 + offset)
        result = mask_tokens(
            input_ids,
            special,
            MaskingConfig(mlm_probability=mlm_probability, strategy=strategy),
            mask_token_id=tokenizer.mask_token_id,
            vocab_size=len(tokenizer),
            generator=generator,
            word_ids=words,
            special_ids=special_ids(tokenizer),
            attention_mask=encoded.attention_mask.expand(n_draws, -1),
            trace=False,
        )
        selected = result.decisions != Decision.NOT_SELECTED  # (N, T)
        n_hit = (selected & in_word).sum(1)  # (N,) pieces of the word selected per draw
        hit = n_hit > 0
        partial = hit & (n_hit < len(positions))
        hit_share[strategy] = float(hit.float().mean())
        partial_share[strategy] = float(partial.sum() / hit.sum()) if bool(hit.any()) else 0.0
        candidates = partial.nonzero().flatten() if bool(partial.any()) else hit.nonzero().flatten()
        row = int(candidates[0]) if len(candidates) else 0
        examples[strategy] = MaskingExample(
            strategy=strategy,
            draw=row,
            tokens=tokenizer.convert_ids_to_tokens(result.input_ids[row].tolist()),
            originals=list(originals),
            decisions=decision_names(result, row, special_tokens_mask=special),
            special=[bool(x) for x in encoded.special_tokens_mask[0].tolist()],
            word_hidden=int(n_hit[row]),
        )
    return WholeWordDemo(target, positions, n_draws, examples, hit_share, partial_share)


def normalize_text(tokenizer, text: str) -> str:
    """``text`` as the tokenizer's normaliser leaves it, whitespace collapsed (round-trip target).

    >>> normalize_text(wordpiece_from_vocab(["the"]), "  The   Café ")
    'the cafe'
    """
    return " ".join(tokenizer.backend_tokenizer.normalizer.normalize_str(text).split())


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
