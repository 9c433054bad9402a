"""The Tokenizer page's lesson: what a vocabulary does to masking, and how its entries are used.

``whole_word_demo`` masks one sentence many times with token and whole-word masking and watches
the word cut into the most pieces: token masking often hides only some of its pieces, whole-word
masking all of them or none. ``frequency_profile`` counts every vocabulary entry on a text (Zipf's
rank plot): the entries never used are softmax classes the head pays for anyway. Training and
measuring the tokenizers themselves is ``mlm_core.vocab``; what V costs the head is
``mlm_core.costs.head_cost``.

>>> from mlm_core.vocab import wordpiece_from_vocab
>>> demo = whole_word_demo(wordpiece_from_vocab(["the", "cat", "##s"]), "the cats", n_draws=50)
>>> demo.word, demo.word_positions, demo.hit_share["whole_word"] <= 1.0
('cats', (2, 3), True)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from mlm_core import seeds
from mlm_core.costs import HeadCost
from mlm_core.data import encode, mask_batch, normalized, plain_encodings
from mlm_core.errors import InputError
from mlm_core.masking import Decision, MaskingConfig, decision_names
from mlm_core.vocab import ALGORITHM_LABELS, MIN_FREQUENCY, MODEL_MAX_LENGTH, SIZE_LADDER, most_split_word, sentence_words

@dataclass(frozen=True)
class FrequencyProfile:
    """How often each vocabulary entry occurs in a text, most frequent first (Zipf's rank plot)."""

    tokens: tuple[str, ...]  # every non-special entry, by count, descending
    counts: tuple[int, ...]  # aligned with tokens

    @property
    def n_unused(self) -> int:
        """Entries never used on this text: softmax classes the head pays for anyway."""
        return sum(1 for c in self.counts if c == 0)


def frequency_profile(tokenizer, texts: Sequence[str]) -> FrequencyProfile:
    """Count every vocabulary entry on ``texts`` (special tokens left out).

    >>> from mlm_core.vocab import wordpiece_from_vocab
    >>> p = frequency_profile(wordpiece_from_vocab(["the", "cat", "##s"]), ["the cat the"])
    >>> p.tokens, p.counts
    (('the', 'cat', '##s'), (2, 1, 0))
    """
    counts: Counter = Counter()
    for enc in plain_encodings(tokenizer, texts):
        counts.update(enc.ids)
    special = set(tokenizer.all_special_ids)
    id_to_token = {i: t for t, i in tokenizer.get_vocab().items()}
    ids = [i for i in range(len(tokenizer)) if i not in special and i in id_to_token]
    ids.sort(key=lambda i: (-counts[i], i))
    return FrequencyProfile(tuple(id_to_token[i] for i in ids), tuple(counts[i] for i in ids))


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
    if n_draws < 1:
        raise InputError("n_draws must be at least 1.")
    encoded = encode(tokenizer, [sentence], max_length=MODEL_MAX_LENGTH)
    normalised = sentence_words(tokenizer, sentence)
    if word is None:
        word = most_split_word(tokenizer, sentence)
    target = normalized(tokenizer.backend_tokenizer, word or "").strip()
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
        generator = seeds.generator(seed, "whole_word_demo", offset)
        copies = {"input_ids": input_ids, "special_tokens_mask": special, "word_ids": words,
                  "attention_mask": encoded.attention_mask.expand(n_draws, -1)}
        result = mask_batch(tokenizer, copies, MaskingConfig(mlm_probability=mlm_probability, strategy=strategy),
                            generator, trace=False)
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


# --------------------------------------------------------------------------- what the page shows of the vocabularies
class PageVocab(NamedTuple):
    """One vocabulary on the Tokenizer page."""

    family: str  # "WordPiece", "BPE" or "bert-base-uncased": its colour in the charts
    label: str  # "WordPiece 2k", "BPE 8,137 (all)"
    tokenizer: Any
    trained: Any  # the trained vocabulary (``vocab.TrainedVocab``), None for bert-base-uncased
    key: tuple  # what its measurements are cached under


def size_label(size: int) -> str:
    """'2k' for 2,000, '750' for 750.

    >>> size_label(2000), size_label(750)
    ('2k', '750')
    """
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def supported_note(name: str, n_train: int, largest: dict[str, int]) -> str:
    """Which sizes a corpus can fill, and why no larger one is offered (markdown; ``name``: already escaped)."""
    supported = min(largest.values())
    return (f"{name} ({n_train:,} training sentences) supports at most "
            + " and ".join(f"{n:,} {ALGORITHM_LABELS[a]}" for a, n in largest.items())
            + f" entries: by then every piece seen at least {MIN_FREQUENCY} times is in, so a larger size would give "
            "the same vocabulary. Only sizes it can fill are offered"
            + (f" (not {', '.join(size_label(v) for v in SIZE_LADDER if v >= supported)})"
               if supported <= SIZE_LADDER[-1] else "")
            + ". Upload more text for larger ones; bert-base-uncased's 30,522 were learned from Wikipedia and books.")


def vocab_table(rows: Sequence[dict], costs: Sequence[HeadCost]) -> list[dict[str, Any]]:
    """One row per vocabulary: its measurements (``vocab.measure``' dicts, with its label) beside the head's cost."""
    return [{
        "vocabulary": r["label"],
        "size reached": r["vocab_size"],
        "tokens per word": round(r["tokens_per_word"], 3),
        "words split": f"{r['split_share']:.1%}",
        "[UNK] rate": f"{r['unk_rate']:.2%}",
        "head GFLOPs (masked only)": round(c.flops_gathered / 1e9, 2),
        "head GFLOPs (every position)": round(c.flops_full / 1e9, 2),
        "logits MiB (masked only)": round(c.logits_bytes_gathered / 2**20, 1),
        "logits MiB (every position)": round(c.logits_bytes_full / 2**20, 1),
        "start loss ln V": round(c.start_loss, 2),
    } for r, c in zip(rows, costs)]
