"""The training data: texts packed into token chunks, and each step's masked micro-batches.

    texts ─▶ make_chunks ─▶ Chunks (N, T) ─▶ Batches: seeded order, mask_rows ─▶ MicroBatch, each (B, T)

Every chunk a step sees and every mask it gets is a function of the run's seed and the sample's
global number, never of the number of processes or accumulation steps.

Shape legend: N = chunks, B = batch, T = sequence length, V = vocabulary.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import torch

from mlm_core import seeds
from mlm_core.data import run_tokenizer, special_ids
from mlm_core.errors import InputError
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, mask_tokens
from mlm_core.training import bugs
from mlm_core.training.config import BUCKET_MASS, DataConfig, Stream, TrainConfig
from mlm_core.training.distributed import World

# --------------------------------------------------------------------------------------------
# Texts to chunks
# --------------------------------------------------------------------------------------------

@dataclass
class Chunks:
    """Token chunks of one length, ready to mask: every tensor is (N, T)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_tokens_mask: torch.Tensor
    word_ids: torch.Tensor  # -1 on special tokens and padding
    text_ids: torch.Tensor | None = None  # the index of each token's text in the list chunked, -1 on specials

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def take(self, index: torch.Tensor | Sequence[int]) -> Chunks:
        index = torch.as_tensor(index, dtype=torch.long)
        return Chunks(self.input_ids[index], self.attention_mask[index], self.special_tokens_mask[index],
                      self.word_ids[index], None if self.text_ids is None else self.text_ids[index])


def _boundary_ids(tokenizer) -> tuple[int, int, int]:
    """The ids that open, close and pad a sequence (BERT: [CLS] [SEP] [PAD]; RoBERTa: <s> </s> <pad>)."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id
    if start is None or end is None or pad is None or tokenizer.mask_token_id is None:
        raise InputError("This tokenizer lacks a start, end, padding or mask token, so it cannot "
                         "be used for masked-language-model training.")
    return int(start), int(end), int(pad)


def make_chunks(tokenizer, texts: Sequence[str], seq_len: int, overlap: int = 16) -> Chunks:
    """Tokenize texts and pack them into (N, seq_len) chunks, never cutting text off.

    Short texts (sentences) are packed together, in order, up to seq_len - 2 tokens, as BERT's
    pre-training data packs consecutive sentences. A text longer than that is split into windows
    of seq_len - 2 tokens, each starting `seq_len - 2 - overlap` tokens after the last, the final
    window aligned to the text's end.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> tok = load_default_tokenizer()
    >>> chunks = make_chunks(tok, ["the cat sat on the mat."] * 10, seq_len=16, overlap=4)
    >>> tuple(chunks.input_ids.shape)  # 7 tokens a sentence, two sentences to a 14-token room
    (5, 16)
    >>> " ".join(tok.convert_ids_to_tokens(chunks.input_ids[0].tolist()))
    '[CLS] the cat sat on the mat . the cat sat on the mat . [SEP]'
    """
    numbered = [(n, t) for n, t in enumerate(str(x).strip() for x in texts) if t]  # (its index in `texts`, text)
    texts = [t for _, t in numbered]
    if not texts:
        raise InputError("The corpus is empty: give at least one sentence of text.")
    start, end, pad = _boundary_ids(tokenizer)
    room = seq_len - 2
    step = room - overlap
    enc = run_tokenizer(tokenizer, list(texts), add_special_tokens=False)
    segments: list[tuple[list[int], list[int], int]] = []  # (ids, words, text index)
    for i, ids in enumerate(enc["input_ids"]):
        try:
            words = [-1 if w is None else int(w) for w in enc.word_ids(i)]
        except (ValueError, AttributeError):  # slow tokenizers have no word ids: one word per token
            words = list(range(len(ids)))
        if not ids:
            continue
        if len(ids) <= room:
            segments.append((list(ids), words, numbered[i][0]))
            continue
        starts = list(range(0, len(ids) - room, step)) + [len(ids) - room]
        for s in dict.fromkeys(starts):  # ordered, without a repeated last window
            segments.append((list(ids[s:s + room]), words[s:s + room], numbered[i][0]))
    if not segments:
        raise InputError("The corpus has no tokens after tokenization.")

    rows: list[tuple[list[int], list[int], list[int]]] = []
    cur_ids: list[int] = []
    cur_words: list[int] = []
    cur_texts: list[int] = []
    for ids, words, text in segments:
        if cur_ids and len(cur_ids) + len(ids) > room:
            rows.append((cur_ids, cur_words, cur_texts))
            cur_ids, cur_words, cur_texts = [], [], []
        offset = (max(cur_words) + 1) if cur_words else 0  # keep words of packed texts apart
        cur_ids = cur_ids + ids
        cur_words = cur_words + [w + offset if w >= 0 else -1 for w in words]
        cur_texts = cur_texts + [text] * len(ids)
    rows.append((cur_ids, cur_words, cur_texts))

    n = len(rows)
    input_ids = torch.full((n, seq_len), pad, dtype=torch.long)  # (N, T)
    word_ids = torch.full((n, seq_len), -1, dtype=torch.long)  # (N, T)
    text_ids = torch.full((n, seq_len), -1, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((n, seq_len), dtype=torch.long)  # (N, T)
    for r, (ids, words, text) in enumerate(rows):
        length = len(ids) + 2
        input_ids[r, :length] = torch.tensor([start, *ids, end])
        word_ids[r, 1:length - 1] = torch.tensor(words)
        text_ids[r, 1:length - 1] = torch.tensor(text)
        attention_mask[r, :length] = 1
    specials = torch.tensor(sorted({*special_ids(tokenizer), start, end, pad}), dtype=torch.long)
    special_tokens_mask = (torch.isin(input_ids, specials) | (attention_mask == 0)).long()
    word_ids[special_tokens_mask.bool()] = -1
    text_ids[special_tokens_mask.bool()] = -1
    return Chunks(input_ids, attention_mask, special_tokens_mask, word_ids, text_ids)


def split_chunks(tokenizer, texts: Sequence[str], cfg: DataConfig,
                 eval_texts: Sequence[str] | None = None) -> tuple[Chunks, Chunks, bool]:
    """The training chunks, the held-out chunks, and whether the held-out ones are training chunks too.

    `eval_texts`, when it has any text, is the held-out text (every chunk of `texts` then trains);
    otherwise a seeded `eval_fraction` of the chunks of `texts` is held out, or, when the corpus is
    too small to spare any, up to `eval_max_chunks` training chunks are evaluated on.
    """
    chunks = make_chunks(tokenizer, texts, cfg.seq_len, cfg.chunk_overlap)
    n = len(chunks)
    if eval_texts is not None and any(str(t).strip() for t in eval_texts):  # a held-out text of its own
        held = make_chunks(tokenizer, eval_texts, cfg.seq_len, cfg.chunk_overlap)
        return chunks, held.take(range(min(len(held), cfg.eval_max_chunks))), False
    n_eval = 0
    if cfg.eval_fraction > 0 and n >= 4:
        n_eval = max(1, min(cfg.eval_max_chunks, round(n * cfg.eval_fraction)))
    order = torch.randperm(n, generator=seeds.generator(cfg.seed, Stream.SPLIT))
    if n_eval == 0:  # too little text to hold any out: evaluate on (some of) the training chunks
        return chunks, chunks.take(order[:cfg.eval_max_chunks]), True
    return chunks.take(order[n_eval:]), chunks.take(order[:n_eval]), False


def chunk_token_counts(chunks: Chunks, vocab_size: int) -> torch.Tensor:
    """How often each token id occurs in the chunks, special tokens and padding left out: (V,)."""
    ids = chunks.input_ids[chunks.special_tokens_mask == 0]
    ids = ids[ids < vocab_size]
    return torch.bincount(ids, minlength=vocab_size).to(torch.float64)


def frequency_buckets(counts: torch.Tensor) -> torch.Tensor:
    """Bucket per token id (0 frequent, 1 medium, 2 rare) by share of the corpus: (V,) long."""
    order = torch.argsort(counts, descending=True, stable=True)
    share = torch.cumsum(counts[order], 0) / counts.sum().clamp_min(1.0)
    before = share - counts[order] / counts.sum().clamp_min(1.0)  # share before this type
    bucket_sorted = torch.full_like(order, 2)
    bucket_sorted[before < BUCKET_MASS[1]] = 1
    bucket_sorted[before < BUCKET_MASS[0]] = 0
    bucket_sorted[counts[order] == 0] = 2
    buckets = torch.empty_like(order)
    buckets[order] = bucket_sorted
    return buckets


# --------------------------------------------------------------------------------------------
# Masking: one generator per example, seeded by its global index
# --------------------------------------------------------------------------------------------


def mask_rows(chunks: Chunks, masking: MaskingConfig, *, mask_token_id: int, vocab_size: int,
               special_ids: tuple[int, ...], row_seeds: Sequence[int], focus_ids: torch.Tensor | None = None,
               focus_probability: float = 0.0, bug: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each row with its own generator, so a row's mask depends on its seed only (``row_seeds``: one
    ``seeds.seed_for(cfg.seed, Stream.X, ...)`` value per row).

    That makes one process with gradient accumulation and N processes under torchrun mask the
    same example the same way. Each row's attention mask goes along: it gives the row's length, which
    Google's exact count needs (a short padded row gets round(p · its length), not round(p · T)).

    ``focus_ids`` with ``focus_probability`` above the rule's p: a token whose id is one of them is selected
    with that probability instead (``TrainConfig.focus_mlm_probability``): the rule's selection first, then, from
    the same generator, the focus tokens it left out at (f − p) / (1 − p), replaced by the rule's 80/10/10.
    ``bug``: a masking or labels bug of ``training.bugs`` (its buggy twin draws from the same row seeds).
    Returns (input_ids, labels), both (B, T).

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> tok = load_default_tokenizer()
    >>> chunks = make_chunks(tok, ["the cat sat on the mat ."] * 40, seq_len=32, overlap=4)
    >>> cat = torch.tensor(tok.convert_tokens_to_ids(["cat"]))
    >>> _, labels = mask_rows(chunks, MaskingConfig(), mask_token_id=tok.mask_token_id, vocab_size=len(tok),
    ...                       special_ids=(), row_seeds=range(len(chunks)), focus_ids=cat, focus_probability=1.0)
    >>> bool((labels[chunks.input_ids == int(cat)] == int(cat)).all())  # every "cat" selected
    True
    """
    extra = 0.0
    if focus_ids is not None and focus_ids.numel() and focus_probability > masking.mlm_probability:
        extra = (focus_probability - masking.mlm_probability) / (1.0 - masking.mlm_probability)
    masking = bugs.buggy_masking(masking, bug)  # the clean rule unless the bug changes it
    inputs, labels = [], []
    for r, s in enumerate(row_seeds):
        generator = seeds.generator(s)
        special, words = chunks.special_tokens_mask[r], chunks.word_ids[r]
        # The attention mask gives each row its own length: exact-count masking counts real tokens,
        # never the padding a short row carries up to seq_len.
        result = mask_tokens(chunks.input_ids[r], special, masking,
                             mask_token_id=mask_token_id, vocab_size=vocab_size,
                             generator=generator,
                             word_ids=words, special_ids=special_ids,
                             attention_mask=chunks.attention_mask[r], trace=False)
        row_ids, row_labels = result.input_ids, result.labels
        if bug == "special_tokens_masked":  # only ids 0 and 1 protected: [CLS] and [SEP] become tokens to select
            row_ids, row_labels = _select_exposed_specials(chunks, r, s, row_ids, row_labels, masking,
                                                           mask_token_id=mask_token_id, vocab_size=vocab_size,
                                                           special_ids=special_ids)
        if extra > 0:
            focus = torch.isin(chunks.input_ids[r], focus_ids) & (row_labels == IGNORE_INDEX) \
                & (chunks.special_tokens_mask[r] == 0)  # (T,) focus tokens the rule left out
            if bool(focus.any()):
                more = mask_tokens(chunks.input_ids[r], (~focus).long(), replace(masking, strategy="token",
                                                                                 mlm_probability=extra),
                                   mask_token_id=mask_token_id, vocab_size=vocab_size, generator=generator,
                                   special_ids=special_ids, trace=False)
                chosen = more.labels != IGNORE_INDEX
                row_ids = torch.where(chosen, more.input_ids, row_ids)
                row_labels = torch.where(chosen, more.labels, row_labels)
        inputs.append(row_ids)
        labels.append(bugs.buggy_labels(chunks.input_ids[r], row_labels, bug))
    return torch.stack(inputs), torch.stack(labels)


def _select_exposed_specials(chunks: Chunks, r: int, row_seed: int, row_ids: torch.Tensor, row_labels: torch.Tensor,
                              masking: MaskingConfig, *, mask_token_id: int, vocab_size: int,
                              special_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The bug ``special_tokens_masked`` on row ``r``, after the clean rule: the special tokens that hard-coded ids
    0 and 1 leave open ([CLS] and [SEP]) are selected at the rule's p and given its 80/10/10, from a stream of
    their own, so the buggy twin's masks differ from the clean run's only there (drawn in the same stream as the
    clean rule, the two extra tokens shifted every later draw: 189 positions differed on the lesson's run,
    issue 43)."""
    ids = chunks.input_ids[r]
    exposed = (bugs.buggy_special_tokens_mask(ids) == 0) & (chunks.special_tokens_mask[r] == 1) \
        & (chunks.attention_mask[r] == 1)  # (T,)
    if not bool(exposed.any()):
        return row_ids, row_labels
    extra = mask_tokens(ids, (~exposed).long(), replace(masking, strategy="token"), mask_token_id=mask_token_id,
                        vocab_size=vocab_size, generator=seeds.generator(row_seed, BUG_STREAM), special_ids=special_ids,
                        trace=False)
    chosen = extra.labels != IGNORE_INDEX
    return torch.where(chosen, extra.input_ids, row_ids), torch.where(chosen, extra.labels, row_labels)


BUG_STREAM = "bug_special_tokens"  # the stream of the special tokens a hard-coded special-id list leaves open


@dataclass(frozen=True)
class MaskScheme:
    """How one variant's training batches are masked: its rule, static copies (0: dynamic) and masking bug."""

    masking: MaskingConfig
    mask_copies: int = 0
    bug: str = ""  # a masking or labels bug of training.bugs ("" for the clean rule)
    learn_from_texts: int = 0  # > 0: labels only on the first N texts' tokens (the rest is context, as it was masked)


def mask_scheme(cfg: TrainConfig) -> MaskScheme:
    """The masking scheme of a variant: variants that share one share their masks exactly.

    >>> mask_scheme(TrainConfig()) == mask_scheme(TrainConfig(bug="eval_dropout"))  # an evaluation bug: same masks
    True
    """
    return MaskScheme(cfg.masking, cfg.mask_copies, cfg.bug if bugs.changes_training(cfg.bug) else "",
                      cfg.learn_from_texts)


class MicroBatch(NamedTuple):
    """One forward pass's share of a step: its global micro-batch number j and three (B, T) tensors."""

    j: int  # which micro-batch of the global batch (seeds its dropout and sampled classes)
    input_ids: torch.Tensor  # (B, T) masked
    attention_mask: torch.Tensor  # (B, T)
    labels: torch.Tensor  # (B, T), IGNORE_INDEX where nothing was selected

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(self.j, self.input_ids.to(device), self.attention_mask.to(device),
                          self.labels.to(device))


class Batches:
    """Each step's micro-batches for this rank, masked, prepared one or two steps ahead in a thread.

    Global sample number s = step * batch_size + position; its chunk comes from a seeded
    permutation of the training chunks per epoch, its mask from a generator seeded by s (dynamic
    masking), or, for static masking with k copies, by (chunk, epoch mod k). Neither depends on
    the number of processes or accumulation steps. This rank's micro-batches are the global micro
    indices j = rank * A + a (a < A), holding samples [j * micro, (j + 1) * micro). Masking one
    example at a time costs a few ms per batch, so a thread does it while the model computes (on
    a GPU the step would otherwise wait for it). A step is {MaskScheme: micro-batches}, one
    entry per masking scheme the variants use (`mask_scheme`), all on the same chunks, every scheme's
    masks drawn from the same per-sample seeds.
    """

    def __init__(self, chunks: Chunks, cfg: DataConfig, world: World, micro: int, *, mask_token_id: int,
                 vocab_size: int, special_ids: tuple[int, ...], schemes: Sequence[MaskScheme],
                 prefetch: int = 2, focus_ids: torch.Tensor | None = None):
        self.chunks, self.cfg, self.world, self.micro = chunks, cfg, world, micro
        self.schemes = tuple(dict.fromkeys(schemes))
        self.mask_kwargs = dict(mask_token_id=mask_token_id, vocab_size=vocab_size, special_ids=special_ids,
                                focus_ids=focus_ids, focus_probability=cfg.focus_mlm_probability)
        self.perm: dict[int, torch.Tensor] = {}
        self.queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._fill, name="mlmlab-batches", daemon=True)
        self.thread.start()

    def _chunk_index(self, sample: int) -> int:
        epoch, k = divmod(sample, len(self.chunks))
        if epoch not in self.perm:
            self.perm.clear()
            self.perm[epoch] = torch.randperm(len(self.chunks), generator=seeds.generator(self.cfg.seed, Stream.ORDER, epoch))
        return int(self.perm[epoch][k])

    def _mask_seed(self, sample: int, chunk: int, copies: int) -> int:
        if copies == 0:  # dynamic: every draw of a chunk gets a new mask
            return seeds.seed_for(self.cfg.seed, Stream.MASK, sample)
        epoch = sample // len(self.chunks)  # static: copy epoch mod k of this chunk's k masks
        return seeds.seed_for(self.cfg.seed, Stream.STATIC_MASK, chunk, epoch % copies)

    def make(self, step: int) -> dict[MaskScheme, list[MicroBatch]]:
        cfg = self.cfg
        out: dict[MaskScheme, list[MicroBatch]] = {k: [] for k in self.schemes}
        for a in range(cfg.grad_accum_steps):
            j = self.world.rank * cfg.grad_accum_steps + a
            samples = [step * cfg.batch_size + j * self.micro + i for i in range(self.micro)]
            index = [self._chunk_index(s) for s in samples]
            batch = self.chunks.take(index)
            for scheme in self.schemes:
                row_seeds = [self._mask_seed(s, c, scheme.mask_copies) for s, c in zip(samples, index)]
                inputs, labels = mask_rows(batch, scheme.masking, row_seeds=row_seeds, bug=scheme.bug,
                                           **self.mask_kwargs)
                if scheme.learn_from_texts and batch.text_ids is not None:  # the same inputs, fewer answers asked
                    labels = labels.masked_fill(~batch.text_ids.lt(scheme.learn_from_texts) | batch.text_ids.lt(0),
                                                IGNORE_INDEX)
                out[scheme].append(MicroBatch(j, inputs, batch.attention_mask, labels))
        return out

    def _fill(self) -> None:
        for step in range(self.cfg.steps):
            try:
                item = (step, self.make(step))
            except BaseException as exc:  # handed to the training loop, which raises it
                item = (step, exc)
            while not self.closed.is_set():
                try:
                    self.queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if self.closed.is_set() or isinstance(item[1], BaseException):
                return

    def get(self, step: int) -> dict[MaskScheme, list[MicroBatch]]:
        got, batch = self.queue.get()
        if isinstance(batch, BaseException):
            raise batch
        assert got == step, (got, step)
        return batch

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=5)
