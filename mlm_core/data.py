"""Text in, tensors out: tokenization with everything masking needs, and safe reading of uploads.

Shapes: B = batch, T = sequence length.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from mlm_core import seeds
from mlm_core.errors import InputError
from mlm_core.masking import MaskingConfig, MaskingResult, decision_names, mask_tokens

MAX_TEXT_CHARS = 20_000  # longer pasted text is refused: tokenizing it would stall a page
UPLOAD_EXTENSIONS = (".txt", ".csv", ".jsonl")


@dataclass
class Encoded:
    """A tokenized batch, padded to its longest row."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T) 1 on real tokens
    special_tokens_mask: torch.Tensor  # (B, T) 1 on [CLS], [SEP], padding: never selected
    word_ids: torch.Tensor  # (B, T) index of the word a piece belongs to, -1 on special/padding
    truncated: list[bool]  # was the row cut at max_length?
    tokens: list[list[str]]  # the tokens as strings, padding left out

    @property
    def n_eligible(self) -> int:
        return int((self.special_tokens_mask == 0).sum())


def special_ids(tokenizer) -> tuple[int, ...]:
    """Every id of the tokenizer's special tokens, read from the tokenizer, never hard-coded."""
    ids = set(int(i) for i in tokenizer.all_special_ids)
    return tuple(sorted(ids))


# --------------------------------------------------------------------------- one tokenizer, many sessions
# One cached tokenizer serves every session of a classroom server, from as many threads. Two things
# break when they share its Rust backend (tokenizers 0.23, transformers 5.24):
# - Settings. __call__ and tokenize() first write the truncation and padding they were asked for into
#   the backend (TokenizersBackend.set_truncation_and_padding), then encode with whatever it holds, so
#   two calls at once encode with each other's settings: rows cut at another page's max_length, or
#   "Unable to create tensor" when padding was switched off between the two steps.
# - The GIL. A backend method waits for the backend's own lock while holding the GIL; encode_batch
#   holds that lock with the GIL released while it waits for tokenizers' worker pool; the pool may be
#   busy training a vocabulary whose workers wait for the GIL. Issue 42: a class of eight froze the
#   whole server that way (benchmarks/tokenizer_stress.py reproduces it in seconds).
# ``shared_tokenizer`` makes both impossible for every tokenizer MLM Lab hands out: it puts a
# ``LockedBackend`` in front of the Rust backend, so every call takes the tokenizer's Python lock first
# (a thread waiting for a Python lock releases the GIL) and encodes with the settings its own thread
# asked for. ``tokenizer_lock`` is that lock, for sequences of calls that belong together.
_LOCKS: "weakref.WeakKeyDictionary[object, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()
# The backend's settings that one caller's request writes and its encode then reads: two set by methods, one flag
# set as an attribute (transformers writes it when a call asks split_special_tokens).
_SETTINGS = ("truncation", "padding")
_FLAGS = ("encode_special_tokens",)
_SETTERS = {"enable_truncation": "truncation", "no_truncation": "truncation",
            "enable_padding": "padding", "no_padding": "padding"}
# The backend's methods whose result depends on those settings: the backend is set to the caller's first.
_READS_SETTINGS = frozenset({"encode", "encode_batch", "encode_batch_fast", "async_encode", "async_encode_batch",
                             "async_encode_batch_fast", "post_process", "to_str", "save"})


class LockedBackend:
    """A ``tokenizers.Tokenizer`` that many threads can share: every call holds one re-entrant lock, and
    truncation and padding are each thread's own (the backend is set to the caller's before each call).

    ``shared_tokenizer`` installs one; code never builds it itself. The backend's components
    (``normalizer``, ``pre_tokenizer``, ``model``) are read-only here and returned as they are.

    >>> from tokenizers import Tokenizer, models
    >>> backend = LockedBackend(Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    >>> backend.enable_truncation(max_length=4)
    >>> backend.truncation["max_length"], threading.Thread(target=backend.no_truncation).start()
    (4, None)
    >>> backend.truncation["max_length"]   # another thread's setting left this thread's alone
    4
    """

    __slots__ = ("_raw", "lock", "_initial", "_local", "_applied", "_methods")

    def __init__(self, raw, lock: threading.RLock | None = None):
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "lock", lock if lock is not None else threading.RLock())
        object.__setattr__(self, "_initial", {name: getattr(raw, name) for name in _SETTINGS + _FLAGS})
        object.__setattr__(self, "_applied", dict(self._initial))  # what the backend holds now (lock held to change)
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_methods", {})  # name -> its locked wrapper, made once

    def _mine(self) -> dict:
        """This thread's truncation and padding (a new thread starts from the backend's as loaded)."""
        mine = getattr(self._local, "settings", None)
        if mine is None:
            mine = self._local.settings = dict(self._initial)
        return mine

    def _apply(self) -> None:
        """Set the backend to this thread's truncation and padding (lock held)."""
        raw, mine, applied = self._raw, self._mine(), self._applied
        if applied["truncation"] != mine["truncation"]:
            if mine["truncation"] is None:
                raw.no_truncation()
            else:
                raw.enable_truncation(**mine["truncation"])
            applied["truncation"] = raw.truncation
        if applied["padding"] != mine["padding"]:
            if mine["padding"] is None:
                raw.no_padding()
            else:
                raw.enable_padding(**mine["padding"])
            applied["padding"] = raw.padding
        for flag in _FLAGS:
            if applied[flag] != mine[flag]:
                setattr(raw, flag, mine[flag])
                applied[flag] = mine[flag]

    def _set(self, name: str, *args, **kwargs) -> None:
        """A setter: applied to a private backend state under the lock, then remembered for this thread only."""
        with self.lock:
            self._apply()
            getattr(self._raw, name)(*args, **kwargs)
            setting = _SETTERS[name]
            self._mine()[setting] = self._applied[setting] = getattr(self._raw, setting)

    def __getattr__(self, name: str):
        if name in _SETTINGS:
            value = self._mine()[name]
            return dict(value) if value is not None else None
        if name in _FLAGS:
            return self._mine()[name]
        if name in _SETTERS:
            return functools.partial(self._set, name)
        method = self._methods.get(name)
        if method is not None:
            return method
        with self.lock:
            value = getattr(self._raw, name)
        if not callable(value):
            return value
        reads_settings = name in _READS_SETTINGS

        def locked(*args, **kwargs):
            with self.lock:
                if reads_settings:
                    self._apply()
                return value(*args, **kwargs)
        self._methods[name] = locked
        return locked

    def __setattr__(self, name: str, value) -> None:
        if name in _FLAGS:  # this thread's own, applied before its next encode
            self._mine()[name] = value
            return
        with self.lock:
            setattr(self._raw, name, value)

    def __deepcopy__(self, memo) -> "LockedBackend":
        """A backend of its own, with its own lock: what ``private_copy`` gives a training run."""
        with self.lock:
            raw = Tokenizer.from_str(self._raw.to_str())
        copy = LockedBackend(raw)
        object.__setattr__(copy, "_initial", {k: (dict(v) if isinstance(v, dict) else v)
                                              for k, v in self._initial.items()})
        return copy

    def __reduce__(self):
        """Pickled with the settings it was loaded with, not whatever another thread set last."""
        with self.lock:
            return _backend_from_str, (self._raw.to_str(), self._initial)


def _backend_from_str(text: str, initial: dict | None = None) -> LockedBackend:
    if initial is not None:
        raw = Tokenizer.from_str(text)
        for name, value in initial.items():
            if name in _FLAGS:
                setattr(raw, name, value)
            elif value is None:
                getattr(raw, f"no_{name}")()
            else:
                getattr(raw, f"enable_{name}")(**value)
        return LockedBackend(raw)
    return LockedBackend(Tokenizer.from_str(text))


def _backend_parts(backend):
    """(the raw backend, the lock to hold while using its parts): a shared backend's own lock, else none."""
    if isinstance(backend, LockedBackend):
        return backend._raw, backend.lock
    return backend, contextlib.nullcontext()


def normalized(backend, text: str) -> str:
    """``text`` as a tokenizer's normaliser leaves it (lower case, accents stripped for BERT), its backend's lock held
    when it is shared (``backend``: ``tokenizer.backend_tokenizer``, or a ``tokenizers.Tokenizer`` of one's own).

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> normalized(load_default_tokenizer().backend_tokenizer, "The Café")
    'the cafe'
    """
    raw, lock = _backend_parts(backend)
    with lock:
        return raw.normalizer.normalize_str(text) if raw.normalizer is not None else text


def pre_tokenized_words(backend, text: str) -> list[str]:
    """The words a tokenizer's pipeline sees: normalised, then split at whitespace and punctuation (its
    pre-tokeniser), its backend's lock held when it is shared.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> pre_tokenized_words(load_default_tokenizer().backend_tokenizer, "The cat's mat.")
    ['the', 'cat', "'", 's', 'mat', '.']
    """
    raw, lock = _backend_parts(backend)
    with lock:
        text = raw.normalizer.normalize_str(text) if raw.normalizer is not None else text
        if raw.pre_tokenizer is None:
            return text.split()
        return [w for w, _ in raw.pre_tokenizer.pre_tokenize_str(text)]


def shared_tokenizer(tokenizer):
    """``tokenizer``, made safe to share between threads (``LockedBackend``); every loader of MLM Lab
    returns its tokenizers through here. Tokenizers without a Rust backend are returned as they are.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> isinstance(load_default_tokenizer().backend_tokenizer, LockedBackend)
    True
    """
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and not isinstance(backend, LockedBackend):
        tokenizer._tokenizer = LockedBackend(backend, tokenizer_lock(tokenizer))
    return tokenizer


def private_copy(tokenizer):
    """A deep copy of ``tokenizer`` with its own backend and lock: a training run's, so that its thread
    never waits for the pages, nor they for it.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> shared = load_default_tokenizer()
    >>> mine = private_copy(shared)
    >>> tokenizer_lock(mine) is tokenizer_lock(shared), mine.tokenize("the cats")
    (False, ['the', 'cats'])
    """
    if getattr(tokenizer, "_tokenizer", None) is None:  # nothing Rust-backed to share (a test's stand-in)
        return tokenizer
    with tokenizer_lock(tokenizer):
        copy = deepcopy(tokenizer)
    return shared_tokenizer(copy)


def typed_special_ids(tokenizer) -> tuple[int, ...]:
    """The special ids that stay special when the text itself holds them (a typed ``[MASK]``): all but [UNK].

    Hugging Face's ``DataCollatorForLanguageModeling``, given no ``special_tokens_mask``, never selects
    any id of ``all_special_ids`` (``get_special_tokens_mask(..., already_has_special_tokens=True)``,
    transformers 5.24). MLM Lab does the same, except for [UNK]: it stands for a word of the text the
    vocabulary cannot spell, and stays a word that can be masked.
    """
    return tuple(i for i in special_ids(tokenizer) if i != tokenizer.unk_token_id)


def typed_special_tokens(tokenizer, tokens) -> list[str]:
    """The special tokens written in the text itself (``[MASK]`` typed), not the ones the tokenizer adds.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> typed_special_tokens(load_default_tokenizer(), ["[CLS]", "the", "[MASK]", ".", "[SEP]"])
    ['[MASK]']
    """
    special = set(tokenizer.convert_ids_to_tokens(list(typed_special_ids(tokenizer))))
    return [t for t in list(tokens)[1:-1] if t in special]


def tokenizer_lock(tokenizer) -> threading.RLock:
    """The lock that gives one caller at a time ``tokenizer``'s backend settings (one lock per tokenizer).

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> tok = load_default_tokenizer()
    >>> tokenizer_lock(tok) is tokenizer_lock(tok)
    True
    """
    backend = getattr(tokenizer, "_tokenizer", None)
    if isinstance(backend, LockedBackend):
        return backend.lock
    with _LOCKS_GUARD:
        lock = _LOCKS.get(tokenizer)
        if lock is None:
            lock = _LOCKS[tokenizer] = threading.RLock()
        return lock


def run_tokenizer(tokenizer, *texts, **options):
    """``tokenizer(*texts, **options)`` (texts, or pairs of texts) with the backend to ourselves, so its
    settings are the ones asked for.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> run_tokenizer(load_default_tokenizer(), ["the cat"], add_special_tokens=False)["input_ids"]
    [[1996, 4937]]
    """
    with tokenizer_lock(tokenizer):
        return tokenizer(*texts, **options)


def token_pieces(tokenizer, text: str) -> list[str]:
    """``tokenizer.tokenize(text)`` under the tokenizer's lock (it rewrites the backend settings too)."""
    with tokenizer_lock(tokenizer):
        return tokenizer.tokenize(text)


def plain_encodings(tokenizer, texts) -> list:
    """The Rust backend's encodings of ``texts``: no special tokens, no truncation, no padding.

    Calling ``backend_tokenizer.encode_batch`` directly uses whatever truncation and padding the last
    caller left there (the bundled tokenizer is even saved with padding and truncation at 128), so
    they are switched off first, under the lock.
    """
    if isinstance(texts, str):
        texts = [texts]
    with tokenizer_lock(tokenizer):
        backend = tokenizer.backend_tokenizer
        if backend.truncation is not None:
            backend.no_truncation()
        if backend.padding is not None:
            backend.no_padding()
        return backend.encode_batch(list(texts), add_special_tokens=False)


def encode(tokenizer, texts: str | list[str], max_length: int = 128) -> Encoded:
    """Tokenize texts with special tokens, padding, word ids and a flag for each truncated row.

    Safe to call from many sessions at once on one shared tokenizer (``tokenizer_lock``). A special
    token typed into the text (``[MASK]``) is special too, never selected (``typed_special_ids``).

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> enc = encode(load_default_tokenizer(), ["The cat sat."])
    >>> enc.tokens[0], enc.word_ids[0].tolist()
    (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], [-1, 0, 1, 2, 3, -1])
    >>> encode(load_default_tokenizer(), "The [MASK] sat.").special_tokens_mask[0].tolist()
    [1, 0, 1, 0, 0, 1]
    """
    if isinstance(texts, str):
        texts = [texts]
    if not texts or not any(t.strip() for t in texts):
        raise InputError("There is no text to tokenize: type or paste a sentence first.")
    options = dict(add_special_tokens=True, truncation=True, max_length=max_length, padding=True,
                   return_special_tokens_mask=True, return_tensors="pt")
    with tokenizer_lock(tokenizer):
        batch = tokenizer(list(texts), **options)
        if batch.encodings is not None:  # fast tokenizers: what truncation cut off is kept beside each row
            truncated = [bool(e.overflowing) for e in batch.encodings]
        else:
            full = tokenizer(list(texts), add_special_tokens=True, truncation=False)
            truncated = [len(ids) > max_length for ids in full["input_ids"]]
    attention = batch["attention_mask"]
    typed = torch.tensor(typed_special_ids(tokenizer), dtype=batch["input_ids"].dtype)
    special = batch["special_tokens_mask"].bool() | (attention == 0) | torch.isin(batch["input_ids"], typed)
    words = torch.full_like(batch["input_ids"], -1)
    for row in range(len(texts)):
        for position, word in enumerate(batch.word_ids(row)):
            if word is not None and not special[row, position]:
                words[row, position] = word
    tokens = [
        tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())
        for ids, mask in zip(batch["input_ids"], attention)
    ]
    return Encoded(batch["input_ids"], attention, special.long(), words, truncated, tokens)


# --------------------------------------------------------------------------- masking encoded text
# Three entry points, each ``masking.mask_tokens`` with a tokenizer's mask id, vocabulary and special ids:
# mask_batch (a batch, one generator), mask_sentence (one sentence, from a seed: what every page shows) and
# mask_positions (the positions a learner chose, no selection draw). training.mask_rows masks training rows,
# each from its own seed.
def mask_batch(
    tokenizer, encoded: Encoded | Mapping[str, torch.Tensor], config: MaskingConfig, generator: torch.Generator,
    trace: bool = True,
) -> MaskingResult:
    """``masking.mask_tokens`` on an encoded batch, with the mask id, vocabulary and special ids of its tokenizer.

    ``encoded``: an ``Encoded`` (``encode``), or a dict with the same tensors (``input_ids``,
    ``special_tokens_mask``, ``word_ids``, ``attention_mask``), such as ``lessons.nsp.encode_pairs``' sentence
    pairs. Every rule works on both: word ids for whole-word and span masking, the attention mask for exact count.
    """
    if tokenizer.mask_token_id is None:
        raise InputError("This tokenizer has no mask token, so it cannot be used for masked-LM training.")
    field = encoded.__getitem__ if isinstance(encoded, Mapping) else functools.partial(getattr, encoded)
    return mask_tokens(
        field("input_ids"),
        field("special_tokens_mask"),
        config,
        mask_token_id=tokenizer.mask_token_id,
        vocab_size=len(tokenizer),
        generator=generator,
        word_ids=field("word_ids"),
        special_ids=special_ids(tokenizer),
        attention_mask=field("attention_mask"),
        trace=trace,
    )


@dataclass
class MaskedSentence:
    """One sentence, masked: what every page shows for (tokenizer, sentence, rule, seed)."""

    sentence: str
    encoded: Encoded  # a batch of one row
    result: MaskingResult  # (1, T) tensors, draws included
    config: MaskingConfig
    seed: int

    @property
    def tokens(self) -> list[str]:
        return self.encoded.tokens[0]

    @property
    def decisions(self) -> list[str]:
        """One name per token: a ``Decision`` name, or ``"SPECIAL"`` for [CLS], [SEP] and the like."""
        return decision_names(self.result, 0, special_tokens_mask=self.encoded.special_tokens_mask,
                              length=len(self.tokens))


def mask_sentence(tokenizer, sentence: str, config: MaskingConfig, seed: int, *, max_length: int = 128) -> MaskedSentence:
    """Mask one sentence the way every page does: one seed gives one selection and one decision per token.

    ``encode`` then ``mask_batch`` with ``seeds.generator(seed)``. The generator is ``seeds.generator(seed)``, the learner's own stream: exactly
    ``torch.Generator().manual_seed(seed)``, used for this sentence only, so the
    Masking page, the Quiz and the Predictions page show the same masks for the same seed.
    Raises ``InputError`` for empty text or a tokenizer without a mask token.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> m = mask_sentence(load_default_tokenizer(), "The cat sat on the mat.", MaskingConfig(mlm_probability=0.5), seed=0)
    >>> m.tokens[:3], len(m.decisions) == len(m.tokens), m.decisions[0]
    (['[CLS]', 'the', 'cat'], True, 'SPECIAL')
    """
    encoded = encode(tokenizer, sentence, max_length=max_length)
    result = mask_batch(tokenizer, encoded, config, seeds.generator(int(seed)))
    return MaskedSentence(sentence, encoded, result, config, int(seed))


def mask_positions(tokenizer, input_ids, positions: Sequence[int], *, mask_replace_prob: float = 1.0,
                   random_replace_prob: float = 0.0, generator: torch.Generator):
    """Corrupt exactly the chosen ``positions`` of one sentence (T,), by BERT's replacement rule: the tokens a
    learner clicked (the Predictions and Inside pages), where ``mask_sentence`` draws which ones.

    ``masking.mask_tokens`` with every other token treated as special and a selection probability of 1:
    the chosen tokens are all selected, then each becomes [MASK] / random / unchanged with the
    given shares (1, 0: all [MASK]; 0.8, 0.1: BERT's 80/10/10). Returns a ``MaskingResult`` (T,).
    """
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


_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences at ., ! or ? followed by space, and at line breaks.

    >>> split_sentences("One. Two!  Three?\\nFour")
    ['One.', 'Two!', 'Three?', 'Four']
    """
    sentences = []
    for line in text.splitlines():
        sentences.extend(part.strip() for part in _SENTENCE_END.split(line) if part.strip())
    return sentences


def clean_text(text: str, *, max_chars: int = MAX_TEXT_CHARS, what: str = "The text") -> str:
    """Validate pasted text: not empty, not too long. Returns it stripped."""
    if text is None or not text.strip():
        raise InputError(f"{what} is empty: type or paste at least one sentence.")
    text = text.strip()
    if len(text) > max_chars:
        raise InputError(
            f"{what} has {len(text):,} characters; the limit is {max_chars:,}. Paste a shorter part, "
            "or upload it as a .txt file on the Training page."
        )
    return text


def clip_text(text: str, max_chars: int) -> tuple[str, bool]:
    """The text stripped and cut to ``max_chars`` characters (at a space when one is near), and whether it was cut.

    Pages that only look at the first tokens of a text clip it first, so pasting a whole book
    stays fast and tokenizing never stalls.
    """
    text = (text or "").strip()
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    space = cut.rfind(" ", max(0, max_chars - 100))
    return (cut[:space] if space > 0 else cut), True


CSV_FIELD_LIMIT = csv.field_size_limit()  # Python's csv module: 131,072 characters per cell


def read_csv(text: str, name: str) -> list[list[str]]:
    """The rows of a CSV text, or an ``InputError`` that says which line is wrong and why.

    Strict quoting: a quote that opens a cell and never closes would silently swallow the rest of
    the file (or fail at Python's 131,072-character cell limit with csv.Error).

    >>> read_csv('text,n\\n"a, b",1\\n', "a.csv")
    [['text', 'n'], ['a, b', '1']]
    """
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        return list(reader)
    except csv.Error as exc:
        reason = str(exc)
        if "field limit" in reason:
            reason = (f"a cell is longer than {CSV_FIELD_LIMIT:,} characters, which usually means a quote (\") "
                      "opens a cell and is never closed")
        elif "unexpected end of data" in reason:
            reason = "a quote (\") opens a cell and is never closed"
        raise InputError(
            f"Line {reader.line_num} of {name!r} cannot be read as CSV: {reason}. Check the quotes around that "
            "line, save the file again from your spreadsheet program, or upload the text as .txt."
        ) from None


def parse_json(text: str, name: str, line: int | None = None):
    """``json.loads(text)``, or an ``InputError`` for anything it cannot read (not only a syntax error).

    Deeply nested arrays raise RecursionError and a number of more than 4,300 digits ValueError in
    Python's json module; a learner gets one plain message for each.
    """
    where = f"Line {line} of {name!r}" if line is not None else repr(name)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON (line {exc.lineno}: {exc.msg}).") from None
    except RecursionError:
        raise InputError(f"{where} is nested too deeply to read (lists inside lists, hundreds of levels).") from None
    except ValueError:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(f"{where} holds a number too long to read (thousands of digits).") from None


def read_text_upload(name: str, data: bytes, *, max_bytes: int) -> str:
    """Text from an uploaded .txt, .csv (all cells) or .jsonl ("text" fields) file.

    Refuses, with a message a learner can act on: other extensions, files over ``max_bytes``,
    binary data and invalid UTF-8, and files with no text in them.
    """
    lower = (name or "").lower()
    if not lower.endswith(UPLOAD_EXTENSIONS):
        raise InputError(
            f"{name!r} is not a text file MLM Lab reads: upload a .txt, .csv or .jsonl file."
        )
    if len(data) > max_bytes:
        raise InputError(
            f"{name!r} is {len(data) / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.1f} MB. Upload a smaller part of it."
        )
    if b"\x00" in data[:8192]:
        raise InputError(f"{name!r} looks like a binary file, not text. Upload plain UTF-8 text.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{name!r} is not valid UTF-8 text (byte {exc.start} cannot be read). Save it as UTF-8 and try again."
        ) from None
    if lower.endswith(".csv"):
        rows = read_csv(text, name)
        text = "\n".join(" ".join(cell.strip() for cell in row if cell.strip()) for row in rows)
    elif lower.endswith(".jsonl"):
        lines = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            record = parse_json(line, name, number)
            value = record.get("text") if isinstance(record, dict) else record
            if not isinstance(value, str):
                raise InputError(f"Line {number} of {name!r} has no \"text\" string field.")
            lines.append(value)
        text = "\n".join(lines)
    if not text.strip():
        raise InputError(f"{name!r} holds no text.")
    return text
