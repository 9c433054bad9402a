"""A short masked-LM training loop that reports through a callback.

Nothing in this file knows about Streamlit or about one model family (minGPT's trainer:
"nothing in this file really has anything to do with GPT"). One step reads left to right:

    texts ─▶ token chunks ─▶ masking.mask_tokens ─▶ encoder + head on the masked rows
          ─▶ losses.full / weighted / sampled ─▶ backward ─▶ clip ─▶ AdamW

`train` runs one configuration; `train_variants` runs 2-3 of them from the same initial
weights on identical batches with identical masks, step by step, so their curves race.
The same loop runs headless (`python -m mlm_core train`) and under torchrun: when a
`torch.distributed` process group is up, every rank takes its share of each global batch and
the gradients are averaged by DistributedDataParallel.

Shape legend: B = batch, T = sequence length, V = vocabulary, H = hidden size,
M = masked (selected) positions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import nn

from mlm_core.data import run_tokenizer, special_ids
from mlm_core.errors import InputError
from mlm_core.head import GatheredMaskedLM, masked_lm_logits
from mlm_core.losses import SAMPLED_SOFTMAX
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, mask_tokens
from mlm_core.precision import resolve_amp

# The choices a learner can make, named once so the page, the CLI and the messages agree.
LOSSES = ("full", "weighted", "sampled")
AMP_MODES = ("auto", "off", "bf16", "fp16")
SCHEDULES = ("linear", "cosine", "constant")
EVENT_KINDS = ("step", "eval", "probe", "done", "error")
BUCKETS = ("frequent", "medium", "rare")
# Token-frequency buckets by share of all corpus tokens, most common types first: the types that
# make up the first half of the corpus are "frequent", the next 40% "medium", the last 10% (and
# anything never seen in training) "rare". Shares of mass, not of types, so every bucket has
# enough evaluation tokens to be measured.
BUCKET_MASS = (0.5, 0.9)
MAX_VARIANTS = 4

_SEED_MASK = (1 << 63) - 1


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a run; the same config and corpus give the same curves.

    >>> TrainConfig(steps=20, learning_rate=1e-4).steps
    20
    """

    steps: int = 60  # a few minutes on a laptop CPU with the default model
    batch_size: int = 8  # sequences per optimizer step (the global batch, over all processes)
    seq_len: int = 64  # tokens per chunk, [CLS] and [SEP] included
    chunk_overlap: int | None = None  # tokens shared by consecutive windows of a long text; None: min(16, seq_len // 4)
    learning_rate: float = 5e-5  # 1e-5 to 5e-5 fine-tunes a trained model; from scratch, 1e-4 to 1e-3
    warmup_steps: int = 5  # linear warm-up from 0, as in BERT: Adam's early moments are noisy
    schedule: str = "linear"  # after warm-up: "linear" decay to 0, "cosine" decay to 0, or "constant"
    weight_decay: float = 0.01  # BERT's value; never applied to biases and LayerNorm weights
    max_grad_norm: float | None = 1.0  # clip the global gradient norm; None or 0 turns clipping off
    amp: str = "auto"  # "auto": bf16 autocast where it is measured faster (precision.auto_amp), else fp32;
    # or "off" (fp32), "bf16" (CUDA or CPU autocast), "fp16" (CUDA only, with a GradScaler)
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% slower
    grad_accum_steps: int = 1  # micro-batches per optimizer step; the loss is one mean over all their masked tokens
    loss: str = "full"  # "full", "weighted" (by token frequency) or "sampled" (sampled softmax)
    weight_scheme: str = "inverse_sqrt"  # weighted loss: how a token's count becomes its weight
    weight_smoothing: float = 1.0  # weighted loss: added to every count, so unseen tokens stay finite
    num_sampled: int = SAMPLED_SOFTMAX.num_sampled  # sampled softmax: K classes per step (losses.SAMPLED_SOFTMAX)
    sampler: str = SAMPLED_SOFTMAX.sampler  # sampled softmax: "unigram" = the training corpus' token counts
    logq_correction: bool = SAMPLED_SOFTMAX.logq_correction  # sampled softmax: importance-sampling estimate of the full loss
    masking: MaskingConfig = field(default_factory=MaskingConfig)  # BERT's 15% with 80/10/10
    # 0: dynamic masking, a fresh mask every time a chunk is drawn (RoBERTa, section 4.1). k >= 1:
    # static masking, k masks made once per chunk and reused in turn, epoch after epoch (BERT's
    # create_pretraining_data.py makes dupe_factor = 10 masked copies of its data up front).
    mask_copies: int = 0
    eval_every: int = 10  # steps between evaluations (one at step 0 and one at the end too)
    eval_fraction: float = 0.1  # share of the chunks held out for evaluation
    eval_max_chunks: int = 64  # cap on held-out chunks, so an evaluation stays a second or two
    probe_sentences: tuple[str, ...] = ()  # sentences with [MASK]; empty: a few held-out sentences
    probe_answers: tuple[str, ...] = ()  # the hidden word of each probe sentence ("" if unknown)
    probe_top_k: int = 5
    # Words whose held-out positions also get a loss of their own (`focus_loss`): a lesson's facts. The
    # held-out loss over every position can fall for other reasons (the Veldoria lesson's drop is mostly
    # the model learning to spell the invented name), so the facts' own loss says what was learned.
    eval_focus_words: tuple[str, ...] = ()
    dropout: bool = True  # False sets the model to eval mode while training (exact comparisons)
    seed: int = 0  # data order, masks, dropout and sampled classes all come from this
    # Fine-tuning: keep the word embeddings fixed. In BERT they are tied to the output projection, so the
    # decoder's weight stays fixed too (its bias still trains): the (V, H) matrix, half the default model's
    # weights, needs no gradient, no AdamW update and no weight-gradient matmul: a faster step.
    freeze_word_embeddings: bool = False

    def __post_init__(self) -> None:
        def fail(message: str) -> None:
            raise InputError(message)

        def whole(name: str, value: Any, low: int, high: int, hint: str = "") -> None:
            if isinstance(value, bool) or not isinstance(value, int):
                fail(f"{name} must be a whole number, got {value!r}.")
            if not low <= value <= high:
                fail(f"{name} must be between {low} and {high}, got {value}. {hint}".strip())

        def number(name: str, value: Any, low: float, high: float, hint: str = "") -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                fail(f"{name} must be a number, got {value!r}.")
            if not low <= value <= high:
                fail(f"{name} must be between {low:g} and {high:g}, got {value:g}. {hint}".strip())
            return float(value)

        def choice(name: str, value: Any, options: Sequence[str]) -> None:
            if value not in options:
                fail(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}.")

        whole("steps", self.steps, 1, 1_000_000, "A workshop run needs 20 to 200 steps.")
        whole("batch_size", self.batch_size, 1, 65_536, "8 to 32 sequences is typical on a CPU.")
        whole("seq_len", self.seq_len, 8, 8192, "64 or 128 tokens suits sentences.")
        if self.chunk_overlap is None:
            object.__setattr__(self, "chunk_overlap", min(16, self.seq_len // 4))
        whole("chunk_overlap", self.chunk_overlap, 0, self.seq_len - 3,
              "The overlap must leave room for new tokens in every window; 16 is typical.")
        number("learning_rate", self.learning_rate, 1e-8, 1.0,
               "Typical: 1e-5 to 5e-5 to fine-tune a trained model, 1e-4 to 1e-3 from scratch.")
        if self.learning_rate <= 0:
            fail("learning_rate must be above 0.")
        whole("warmup_steps", self.warmup_steps, 0, 1_000_000)
        choice("schedule", self.schedule, SCHEDULES)
        number("weight_decay", self.weight_decay, 0.0, 1.0, "0.01 is BERT's value.")
        if self.max_grad_norm is not None:
            number("max_grad_norm", self.max_grad_norm, 0.0, 1e6,
                   "1.0 is the usual clip; use 0 or None to turn clipping off.")
        choice("amp", self.amp, AMP_MODES)
        if not isinstance(self.freeze_word_embeddings, bool):
            fail("freeze_word_embeddings must be True or False.")
        if not isinstance(self.gradient_checkpointing, bool):
            fail("gradient_checkpointing must be True or False.")
        whole("grad_accum_steps", self.grad_accum_steps, 1, 4096)
        if self.batch_size % self.grad_accum_steps:
            fail(f"batch_size ({self.batch_size}) must be a multiple of grad_accum_steps "
                 f"({self.grad_accum_steps}): each accumulation step takes an equal share.")
        choice("loss", self.loss, LOSSES)
        from mlm_core.losses import SAMPLERS, SCHEMES

        choice("weight_scheme", self.weight_scheme, SCHEMES)
        number("weight_smoothing", self.weight_smoothing, 0.0, 1e9,
               "Smoothing is added to every token count; 1 is typical.")
        if self.weight_smoothing == 0 and self.weight_scheme != "none":
            fail("weight_smoothing must be above 0, so tokens never seen in the corpus get a finite weight.")
        whole("num_sampled", self.num_sampled, 1, 10_000_000,
              "Sampled softmax draws K classes; 64 to 4096 is typical.")
        choice("sampler", self.sampler, SAMPLERS)
        if not isinstance(self.logq_correction, bool):
            fail("logq_correction must be True or False.")
        if not isinstance(self.masking, MaskingConfig):
            fail("masking must be a MaskingConfig.")
        whole("mask_copies", self.mask_copies, 0, 1000,
              "0 masks every chunk afresh each time (dynamic); BERT made 10 static copies.")
        whole("eval_every", self.eval_every, 1, 1_000_000)
        number("eval_fraction", self.eval_fraction, 0.0, 0.5,
               "Hold out 5% to 20% of the chunks for evaluation.")
        whole("eval_max_chunks", self.eval_max_chunks, 1, 100_000)
        if isinstance(self.probe_sentences, str) or not all(
            isinstance(s, str) for s in self.probe_sentences
        ):
            fail("probe_sentences must be a list of sentences.")
        object.__setattr__(self, "probe_sentences", tuple(self.probe_sentences))
        if isinstance(self.probe_answers, str) or not all(isinstance(a, str) for a in self.probe_answers):
            fail("probe_answers must be a list of words.")
        object.__setattr__(self, "probe_answers", tuple(self.probe_answers))
        if self.probe_answers and len(self.probe_answers) != len(self.probe_sentences):
            fail(f"probe_answers has {len(self.probe_answers)} words for {len(self.probe_sentences)} "
                 "probe sentences: give one answer per sentence (\"\" where it is unknown).")
        whole("probe_top_k", self.probe_top_k, 1, 50)
        if isinstance(self.eval_focus_words, str) or not all(isinstance(w, str) for w in self.eval_focus_words):
            fail("eval_focus_words must be a list of words.")
        object.__setattr__(self, "eval_focus_words", tuple(self.eval_focus_words))
        if not isinstance(self.dropout, bool):
            fail("dropout must be True or False.")
        whole("seed", self.seed, 0, 2**63 - 1, "Any whole number from 0 up works as a seed.")
        if self.max_grad_norm is not None:
            object.__setattr__(self, "max_grad_norm", float(self.max_grad_norm))
        object.__setattr__(self, "learning_rate", float(self.learning_rate))
        object.__setattr__(self, "weight_decay", float(self.weight_decay))

    @property
    def clipping(self) -> bool:
        return bool(self.max_grad_norm)

    def to_dict(self) -> dict[str, Any]:
        """Plain values only, for JSON, YAML and CSV."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["masking"] = dataclasses.asdict(self.masking)
        out["probe_sentences"] = list(self.probe_sentences)
        out["probe_answers"] = list(self.probe_answers)
        out["eval_focus_words"] = list(self.eval_focus_words)
        return out

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Build a config from plain values (a JSON/YAML file, CLI flags); unknown keys are an error.

        >>> TrainConfig.from_dict({"steps": 5, "masking": {"mlm_probability": 0.2}}).masking.mlm_probability
        0.2
        """
        if not isinstance(values, Mapping):
            raise InputError("A training config must be a mapping of option names to values.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InputError(f"Unknown training option(s): {', '.join(unknown)}. "
                             f"Known options: {', '.join(sorted(names))}.")
        kwargs = dict(values)
        masking = kwargs.get("masking")
        if isinstance(masking, Mapping):
            mnames = {f.name for f in dataclasses.fields(MaskingConfig)}
            bad = sorted(set(masking) - mnames)
            if bad:
                raise InputError(f"Unknown masking option(s): {', '.join(bad)}. "
                                 f"Known: {', '.join(sorted(mnames))}.")
            try:
                kwargs["masking"] = MaskingConfig(**masking)
            except InputError:
                raise
            except (TypeError, ValueError) as exc:
                raise InputError(f"Bad masking settings: {exc}") from None
        for key in ("probe_sentences", "probe_answers", "eval_focus_words"):
            if key in kwargs and isinstance(kwargs[key], list):
                kwargs[key] = tuple(kwargs[key])
        try:
            return cls(**kwargs)
        except InputError:
            raise
        except (TypeError, ValueError) as exc:
            raise InputError(f"Bad training settings: {exc}") from None


# Settings that decide which tokens a step sees: variants compared side by side must share them.
# (mask_copies is not one: static and dynamic masking race on the same chunks in the same order.)
DATA_FIELDS = ("steps", "batch_size", "seq_len", "chunk_overlap", "grad_accum_steps", "masking",
               "eval_every", "eval_fraction", "eval_max_chunks", "probe_sentences", "probe_answers",
               "probe_top_k", "eval_focus_words", "seed")
# A small held-out text is scored under this many different masks (capped at eval_max_chunks rows),
# so its loss measures more than the few tokens one mask happens to select.
EVAL_MASKINGS = 4


# --------------------------------------------------------------------------------------------
# Events and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainEvent:
    """One thing that happened in a run, sent to `on_event` as it happens.

    kind "step": values has loss, grad_norm, lr, tokens_per_s, masked_tokens, tokens, elapsed_s.
    kind "eval": loss, mlm_perplexity (exp(loss): over every selected position, as Hugging Face's
    run_mlm.py reports perplexity), mask_loss (at the [MASK] positions alone), focus_loss (at the
    positions whose hidden word is one of `eval_focus_words`; None without them), top1, top5,
    masked_tokens, and per bucket `<bucket>_top1` etc.
    kind "probe": values["probes"], one dict per probe sentence (text, positions with top-k, and the
    hidden word's probability and rank when it is known).
    kind "done": the variant's summary; kind "error": values["message"].
    """

    kind: str
    variant: str
    step: int
    total_steps: int
    values: dict[str, Any]
    time: float = field(default_factory=time.time)


@dataclass
class TrainResult:
    """What a run recorded, kept even when it was stopped early."""

    name: str
    config: TrainConfig
    steps: list[dict[str, Any]] = field(default_factory=list)  # one row per optimizer step
    evals: list[dict[str, Any]] = field(default_factory=list)  # one row per evaluation
    probes: list[dict[str, Any]] = field(default_factory=list)  # {"step", "probes": [...]}
    steps_done: int = 0
    stopped: bool = False
    wall_time_s: float = 0.0
    train_time_s: float = 0.0  # time in training steps only, without evaluation
    tokens_seen: int = 0
    eval_on_train: bool = False  # True when the corpus was too small to hold any chunk out
    model: nn.Module | None = None  # the trained copy (the base model is never touched)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_seen / self.train_time_s if self.train_time_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """One row for the results table."""
        last_step = next((r for r in reversed(self.steps) if r.get("loss") is not None), {})
        last_eval = self.evals[-1] if self.evals else {}
        return {
            "variant": self.name,
            "steps": self.steps_done,
            "stopped": self.stopped,
            "final_loss": last_step.get("loss"),
            "eval_loss": last_eval.get("loss"),
            "eval_mlm_perplexity": last_eval.get("mlm_perplexity"),
            "eval_mask_loss": last_eval.get("mask_loss"),
            "eval_focus_loss": last_eval.get("focus_loss"),
            "eval_top1": last_eval.get("top1"),
            "eval_top5": last_eval.get("top5"),
            "tokens_per_s": self.tokens_per_s,
            "wall_time_s": self.wall_time_s,
        }


def smooth(values: Sequence[float | None], weight: float = 0.8) -> list[float | None]:
    """Exponential moving average with TensorBoard's debiasing; gaps (None, NaN, inf) stay gaps.

    TensorBoard's ``avg = weight * avg + (1 - weight) * v``, divided by ``1 - weight ** n``, is
    pandas' ``ewm(alpha=1 - weight, adjust=True).mean()`` over the finite values: the weighted mean
    of the values so far, the latest weighing 1, the one before ``weight``, and so on.

    >>> [None if v is None else round(v, 4) for v in smooth([1.0, 3.0, None, 5.0], weight=0.5)]
    [1.0, 2.3333, None, 3.8571]
    """
    if not 0.0 <= weight < 1.0:
        raise InputError("The smoothing weight must be at least 0 and below 1.")
    finite = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    out: list[float | None] = [None] * len(values)
    if finite:
        averaged = pd.Series([float(values[i]) for i in finite]).ewm(alpha=1.0 - weight, adjust=True).mean()
        for i, v in zip(finite, averaged.tolist()):
            out[i] = v
    return out


def curves_table(results: Mapping[str, TrainResult] | Sequence[TrainResult]) -> list[dict[str, Any]]:
    """Every curve of every variant as flat rows (variant, kind, step, metric columns), for CSV."""
    items = results.values() if isinstance(results, Mapping) else results
    rows: list[dict[str, Any]] = []
    for res in items:
        for r in res.steps:
            rows.append({"variant": res.name, "kind": "step", **r})
        for r in res.evals:
            rows.append({"variant": res.name, "kind": "eval", **r})
    return rows


# --------------------------------------------------------------------------------------------
# Seeds: every random choice is a function of (seed, what, when, which)
# --------------------------------------------------------------------------------------------


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 rounds), cheap enough to make one per example.

    Not ``seeds.generator``: that rule would give every seed other curves (tests/test_golden.py).
    """
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
        h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        h = (h * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return h & _SEED_MASK


def _generator(*parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(_mix(*parts))


# Purposes, so streams never collide.
_ORDER, _MASK, _EVAL_MASK, _SPLIT, _DROPOUT, _SAMPLED, _PROBE, _STATIC_MASK = range(1, 9)


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

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def take(self, index: torch.Tensor | Sequence[int]) -> Chunks:
        index = torch.as_tensor(index, dtype=torch.long)
        return Chunks(self.input_ids[index], self.attention_mask[index],
                      self.special_tokens_mask[index], self.word_ids[index])


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

    >>> # make_chunks(tok, ["a b c"] * 100, seq_len=16).input_ids.shape  ->  (N, 16)
    """
    texts = [t for t in (str(x).strip() for x in texts) if t]
    if not texts:
        raise InputError("The corpus is empty: give at least one sentence of text.")
    start, end, pad = _boundary_ids(tokenizer)
    room = seq_len - 2
    step = room - overlap
    enc = run_tokenizer(tokenizer, list(texts), add_special_tokens=False)
    segments: list[tuple[list[int], list[int]]] = []
    for i, ids in enumerate(enc["input_ids"]):
        try:
            words = [-1 if w is None else int(w) for w in enc.word_ids(i)]
        except (ValueError, AttributeError):  # slow tokenizers have no word ids: one word per token
            words = list(range(len(ids)))
        if not ids:
            continue
        if len(ids) <= room:
            segments.append((list(ids), words))
            continue
        starts = list(range(0, len(ids) - room, step)) + [len(ids) - room]
        for s in dict.fromkeys(starts):  # ordered, without a repeated last window
            segments.append((list(ids[s:s + room]), words[s:s + room]))
    if not segments:
        raise InputError("The corpus has no tokens after tokenization.")

    rows: list[tuple[list[int], list[int]]] = []
    cur_ids: list[int] = []
    cur_words: list[int] = []
    for ids, words in segments:
        if cur_ids and len(cur_ids) + len(ids) > room:
            rows.append((cur_ids, cur_words))
            cur_ids, cur_words = [], []
        offset = (max(cur_words) + 1) if cur_words else 0  # keep words of packed texts apart
        cur_ids = cur_ids + ids
        cur_words = cur_words + [w + offset if w >= 0 else -1 for w in words]
    rows.append((cur_ids, cur_words))

    n = len(rows)
    input_ids = torch.full((n, seq_len), pad, dtype=torch.long)  # (N, T)
    word_ids = torch.full((n, seq_len), -1, dtype=torch.long)  # (N, T)
    attention_mask = torch.zeros((n, seq_len), dtype=torch.long)  # (N, T)
    for r, (ids, words) in enumerate(rows):
        length = len(ids) + 2
        input_ids[r, :length] = torch.tensor([start, *ids, end])
        word_ids[r, 1:length - 1] = torch.tensor(words)
        attention_mask[r, :length] = 1
    specials = torch.tensor(sorted({*special_ids(tokenizer), start, end, pad}), dtype=torch.long)
    special_tokens_mask = (torch.isin(input_ids, specials) | (attention_mask == 0)).long()
    word_ids[special_tokens_mask.bool()] = -1
    return Chunks(input_ids, attention_mask, special_tokens_mask, word_ids)


def token_counts(chunks: Chunks, vocab_size: int) -> torch.Tensor:
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


def _mask_rows(chunks: Chunks, masking: MaskingConfig, *, mask_token_id: int, vocab_size: int,
               special_ids: tuple[int, ...], seeds: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each row with its own generator, so a row's mask depends on its seed only.

    That makes one process with gradient accumulation and N processes under torchrun mask the
    same example the same way. Each row's attention mask goes along: it gives the row's length, which
    Google's exact count needs (a short padded row gets round(p · its length), not round(p · T)).
    Returns (input_ids, labels), both (B, T).
    """
    inputs, labels = [], []
    for r, s in enumerate(seeds):
        # The attention mask gives each row its own length: exact-count masking counts real tokens,
        # never the padding a short row carries up to seq_len.
        result = mask_tokens(chunks.input_ids[r], chunks.special_tokens_mask[r], masking,
                             mask_token_id=mask_token_id, vocab_size=vocab_size,
                             generator=torch.Generator().manual_seed(s),
                             word_ids=chunks.word_ids[r], special_ids=special_ids,
                             attention_mask=chunks.attention_mask[r], trace=False)
        inputs.append(result.input_ids)
        labels.append(result.labels)
    return torch.stack(inputs), torch.stack(labels)


# --------------------------------------------------------------------------------------------
# The model's side of a step: encoder once, head on the masked rows only, then the loss
# --------------------------------------------------------------------------------------------


def _loss_value(cfg: TrainConfig, outputs, *, class_weights, counts, generator) -> tuple[torch.Tensor, int]:
    """The chosen loss for one micro-batch, and its number of masked rows M."""
    from mlm_core import losses

    if cfg.loss == "sampled":
        hidden, weight, bias, targets = outputs  # (M, H), (V, H), (V,), (M,)
        m = int(targets.numel())
        if m == 0:  # nothing selected: a zero that still reaches every parameter (no NaN, DDP happy)
            return hidden.sum() * 0.0 + weight.sum() * 0.0 + (bias.sum() * 0.0 if bias is not None else 0.0), 0
        out = losses.sampled_softmax_loss(
            hidden.float(), weight, bias, targets, num_sampled=cfg.num_sampled, sampler=cfg.sampler,
            counts=counts, logq_correction=cfg.logq_correction, generator=generator)
        return out.loss, m
    logits, targets = outputs  # (M, V), (M,)
    m = int(targets.numel())
    if m == 0:
        return logits.sum() * 0.0, 0
    logits = logits.float()
    if cfg.loss == "weighted":
        return losses.weighted_cross_entropy(logits, targets, class_weights).loss, m
    return losses.full_cross_entropy(logits, targets).loss, m


def _normaliser(cfg: TrainConfig, labels: torch.Tensor, class_weights: torch.Tensor | None) -> float:
    """What a micro-batch's mean loss is an average over: its masked tokens M, or for the weighted
    loss its sum of target weights Σw (the normalisation of F.cross_entropy(weight=w))."""
    targets = labels[labels != IGNORE_INDEX]  # (M,)
    if cfg.loss == "weighted" and class_weights is not None:
        return float(class_weights[targets.to(class_weights.device)].double().sum()) if targets.numel() else 0.0
    return float(targets.numel())


def _lr_at(cfg: TrainConfig, step: int) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warm-up, then the schedule."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.learning_rate
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "cosine":
        return cfg.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.learning_rate * (1.0 - progress)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay on biases and normalisation weights (BERT's optimizer does the same)."""
    decay, no_decay, seen = [], [], set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        lname = name.lower()
        if p.ndim < 2 or "norm" in lname or lname.endswith("bias"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


# BERT's optimizer (google-research/bert optimization.py, AdamWeightDecayOptimizer) uses betas
# (0.9, 0.999) and eps 1e-6 *without* bias correction; RoBERTa (Appendix, Table 9) keeps eps 1e-6.
# PyTorch's AdamW always corrects the bias of its moment estimates, and its default eps is 1e-8.
# We take BERT's betas and eps and PyTorch's bias correction: without the correction the early
# steps are several times larger (`uncorrected_adam_step_ratio`), which BERT's 10,000 warm-up steps
# hide but a 100-step run would not; eps 1e-6 keeps parameters whose gradient is only rounding
# noise (e.g. attention key biases, whose exact gradient is 0) still.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6


def uncorrected_adam_step_ratio(step: int, betas: tuple[float, float] = ADAM_BETAS) -> float:
    """How much larger Adam's step t (1-based) is without bias correction, as in BERT's optimizer:
    (1 - beta1^t) / sqrt(1 - beta2^t) (eps aside), for the same gradients.

    >>> round(uncorrected_adam_step_ratio(1), 2)  # 0.1 / sqrt(0.001)
    3.16
    >>> round(max(uncorrected_adam_step_ratio(t) for t in range(1, 1001)), 2), round(uncorrected_adam_step_ratio(1000), 2)
    (6.57, 1.26)
    """
    b1, b2 = betas
    return (1.0 - b1 ** step) / math.sqrt(1.0 - b2 ** step)


def adamw(groups: list[dict[str, Any]], lr: float) -> torch.optim.Optimizer:
    """AdamW (bias-corrected) with BERT's betas and eps; the fused kernel where the device has one."""
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS, foreach=True)


def set_checkpointing(model: nn.Module, on: bool) -> None:
    """Turn gradient checkpointing on (as `train` does) or off; a model that cannot do it gets an InputError."""
    if on:
        _enable_checkpointing(model)
        return
    disable = getattr(model, "activation_checkpointing_disable", None) or \
        getattr(model, "gradient_checkpointing_disable", None)
    if disable is not None:
        disable()
    if hasattr(model, "disable_input_require_grads"):  # the hook enabling added to the embeddings
        model.disable_input_require_grads()


def freeze_word_embeddings(model: nn.Module, frozen: bool = True) -> int:
    """Stop (or restart) training the word embeddings, and with them a tied output projection.

    Returns how many weights that concerns. The optimizer needs no rebuilding: a parameter whose
    ``requires_grad`` is off gets no ``.grad``, and AdamW and clipping skip parameters without one.
    """
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is None or not hasattr(embeddings, "weight"):
        raise InputError(f"{type(model).__name__} has no word-embedding matrix to freeze.")
    embeddings.weight.requires_grad_(not frozen)
    return embeddings.weight.numel()


def _enable_checkpointing(model: nn.Module) -> None:
    enable = getattr(model, "activation_checkpointing_enable", None)
    try:
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            raise ValueError
    except ValueError:
        raise InputError(f"{type(model).__name__} does not support gradient checkpointing; "
                         "turn it off for this model.") from None


def _autocast(device: torch.device, amp: str):
    """The autocast context of a mode; "auto" is resolved by `precision.auto_amp` (measured once per process)."""
    amp = resolve_amp(amp, device)
    if amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def _check_amp(device: torch.device, amp: str) -> None:
    amp = resolve_amp(amp, device)
    if amp == "fp16" and device.type != "cuda":
        raise InputError("fp16 mixed precision needs a CUDA GPU (it relies on a gradient scaler). "
                         "On this device choose 'bf16' or 'off'.")
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError("This GPU has no bf16 support: choose 'fp16' (with a gradient scaler) or 'off'.")


# --------------------------------------------------------------------------------------------
# Distributed context (torchrun); a single process is world size 1
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _World:
    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1


def _world() -> _World:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return _World(dist.get_rank(), dist.get_world_size())
    return _World()


def _seed_dropout(seed: int, device: torch.device) -> None:
    """Seed the global RNG that dropout draws from (inside `fork_rng`, so the caller's state returns)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index if device.index is not None
                                      else torch.cuda.current_device()].manual_seed(seed)


def _all_reduce_sum(values: list[float], device: torch.device, world: _World) -> list[float]:
    if not world.distributed:
        return values
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


# --------------------------------------------------------------------------------------------
# Evaluation and probes (full cross-entropy always, whatever the training loss)
# --------------------------------------------------------------------------------------------


@dataclass
class _EvalSet:
    input_ids: torch.Tensor  # (N, T) masked
    attention_mask: torch.Tensor  # (N, T)
    labels: torch.Tensor  # (N, T), IGNORE_INDEX where not selected
    buckets: torch.Tensor  # (V,) bucket per token id
    micro_batch: int
    mask_token_id: int | None = None  # to score the positions replaced by [MASK] on their own
    focus_ids: torch.Tensor | None = None  # (F,) token ids whose positions get a loss of their own


@torch.no_grad()
def evaluate(model: nn.Module, eval_set: _EvalSet, *, amp: str = "off") -> dict[str, Any]:
    """Held-out masked-token metrics with full cross-entropy: loss, MLM perplexity, top-1/top-5, per bucket.

    `loss` averages over every selected position, the positions Hugging Face's run_mlm.py scores
    too (its perplexity is exp of the Trainer's eval_loss, which averages per-batch means weighted
    by sequences, not by selected positions; here every position counts once, whatever
    `micro_batch` is); 10% of those positions show the model the true token and
    another 10% a random one, so `mask_loss`, over the [MASK] positions alone, is the harder number.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = torch.zeros(3, dtype=torch.float64)  # sum CE, top1 hits, top5 hits
    at_mask = torch.zeros(2, dtype=torch.float64)  # [MASK] positions, sum CE there
    at_focus = torch.zeros(2, dtype=torch.float64)  # positions hiding a focus word, sum CE there
    per_bucket = torch.zeros(len(BUCKETS), 4, dtype=torch.float64)  # n, sum CE, top1, top5
    try:
        for s in range(0, eval_set.input_ids.shape[0], eval_set.micro_batch):
            sl = slice(s, s + eval_set.micro_batch)
            labels = eval_set.labels[sl].to(device)
            if not bool((labels != IGNORE_INDEX).any()):
                continue
            with _autocast(device, amp):
                logits, targets = masked_lm_logits(model, eval_set.input_ids[sl].to(device),
                                                   eval_set.attention_mask[sl].to(device), labels)
            logits = logits.float()  # (M, V)
            ce = nn.functional.cross_entropy(logits, targets, reduction="none")  # (M,)
            if eval_set.mask_token_id is not None:  # rows come row-major, as the selected positions
                shown = eval_set.input_ids[sl].reshape(-1)[eval_set.labels[sl].reshape(-1) != IGNORE_INDEX]
                is_mask = (shown == eval_set.mask_token_id).to(device)  # (M,)
                at_mask += torch.stack([is_mask.double().sum(), ce.double()[is_mask].sum()]).cpu()
            if eval_set.focus_ids is not None:
                focus = torch.isin(targets, eval_set.focus_ids.to(device))  # (M,)
                at_focus += torch.stack([focus.double().sum(), ce.double()[focus].sum()]).cpu()
            top5 = logits.topk(min(5, logits.shape[-1]), dim=-1).indices  # (M, 5)
            hit1 = (top5[:, 0] == targets).double()
            hit5 = (top5 == targets[:, None]).any(-1).double()
            total += torch.stack([ce.double().sum(), hit1.sum(), hit5.sum()]).cpu()
            b = eval_set.buckets.to(device)[targets.clamp_max(eval_set.buckets.numel() - 1)]
            for k in range(len(BUCKETS)):
                sel = b == k
                per_bucket[k] += torch.stack([sel.double().sum(), ce.double()[sel].sum(),
                                              hit1[sel].sum(), hit5[sel].sum()]).cpu()
    finally:
        model.train(was_training)
    n = float(per_bucket[:, 0].sum())
    out: dict[str, Any] = {"masked_tokens": int(n), "mask_tokens": int(at_mask[0]),
                           "mask_loss": float(at_mask[1] / at_mask[0]) if at_mask[0] else None,
                           "focus_tokens": int(at_focus[0]),
                           "focus_loss": float(at_focus[1] / at_focus[0]) if at_focus[0] else None}
    if n == 0:
        out.update(loss=None, mlm_perplexity=None, top1=None, top5=None)
    else:
        loss = float(total[0]) / n
        out.update(loss=loss, mlm_perplexity=math.exp(min(loss, 700.0)), top1=float(total[1]) / n,
                   top5=float(total[2]) / n)
    for k, name in enumerate(BUCKETS):
        nk = float(per_bucket[k, 0])
        out[f"{name}_tokens"] = int(nk)
        out[f"{name}_loss"] = float(per_bucket[k, 1]) / nk if nk else None
        out[f"{name}_top1"] = float(per_bucket[k, 2]) / nk if nk else None
        out[f"{name}_top5"] = float(per_bucket[k, 3]) / nk if nk else None
    return out


@dataclass
class _Probe:
    text: str  # as shown to the learner, with the mask token
    input_ids: torch.Tensor  # (T,)
    positions: list[int]  # where the mask tokens are
    answers: list[str | None]  # the hidden token at each position, when known


def _focus_ids(tokenizer, words: Sequence[str]) -> torch.Tensor | None:
    """The token ids of the words that are one token of this vocabulary (others cannot be scored alone)."""
    ids = sorted({int(tokenizer.convert_tokens_to_ids(pieces[0])) for w in words
                  if len(pieces := tokenizer.tokenize(w)) == 1})
    return torch.tensor(ids, dtype=torch.long) if ids else None


def _make_probes(tokenizer, texts: Sequence[str], cfg: TrainConfig) -> list[_Probe]:
    """Probe sentences: the config's (with [MASK]), or one word masked in a few corpus sentences."""
    mask_id = tokenizer.mask_token_id
    mask_tok = tokenizer.mask_token
    probes: list[_Probe] = []
    if cfg.probe_sentences:
        answers = cfg.probe_answers or ("",) * len(cfg.probe_sentences)
        for text, answer in zip(cfg.probe_sentences, answers):
            shown = text.replace("[MASK]", mask_tok) if mask_tok != "[MASK]" else text
            ids = run_tokenizer(tokenizer, shown, truncation=True, max_length=cfg.seq_len, return_tensors="pt")["input_ids"][0]
            positions = (ids == mask_id).nonzero().flatten().tolist()
            if not positions:
                raise InputError(f"The probe sentence {text!r} has no [MASK] token: put [MASK] where "
                                 "the model should guess a word.")
            known: str | None = None
            if answer:
                pieces = tokenizer.tokenize(answer)
                if len(pieces) != 1 or len(positions) != 1:
                    raise InputError(f"The answer {answer!r} of the probe {text!r} must be one token of this "
                                     f"vocabulary at one [MASK] (it is {len(pieces)} token(s): {' '.join(pieces)}).")
                known = pieces[0]
            probes.append(_Probe(shown, ids, positions, [known] * len(positions)))
        return probes
    # No probes given: mask the middle whole-word token of up to 3 distinct short corpus sentences.
    seen: set[str] = set()
    candidates = []
    for t in texts:
        t = str(t).strip()
        if t and t not in seen and 4 <= len(t.split()) <= 25:
            seen.add(t)
            candidates.append(t)
        if len(candidates) >= 200:
            break
    if not candidates:
        return probes
    order = torch.randperm(len(candidates), generator=_generator(cfg.seed, _PROBE)).tolist()
    for i in order:
        enc = run_tokenizer(tokenizer, candidates[i], truncation=True, max_length=cfg.seq_len, return_tensors="pt")
        ids = enc["input_ids"][0].clone()
        tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
        words = enc.word_ids(0) if hasattr(enc, "word_ids") else [None] * len(tokens)
        # whole words of one alphabetic piece, 3+ letters, nearest the middle
        ok = [p for p in range(len(tokens)) if words[p] is not None and tokens[p].isalpha()
              and len(tokens[p]) >= 3 and words.count(words[p]) == 1]
        if not ok:
            continue
        mid = len(tokens) / 2
        p = min(ok, key=lambda q: abs(q - mid))
        answer = tokens[p]
        ids[p] = mask_id
        probes.append(_Probe(tokenizer.decode(ids[1:-1]), ids, [p], [answer]))
        if len(probes) == 3:
            break
    return probes


@torch.no_grad()
def _probe_predictions(model: nn.Module, tokenizer, probes: list[_Probe], top_k: int) -> list[dict[str, Any]]:
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for probe in probes:
            ids = probe.input_ids[None].to(device)  # (1, T)
            labels = torch.full_like(ids, IGNORE_INDEX)
            labels[0, probe.positions] = probe.input_ids[probe.positions].to(device)
            logits, _ = masked_lm_logits(model, ids, torch.ones_like(ids), labels)  # (M, V)
            probs = logits.float().softmax(-1)
            top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
            rows = []
            for j, pos in enumerate(probe.positions):
                row = {
                    "position": pos,
                    "answer": probe.answers[j],
                    "tokens": tokenizer.convert_ids_to_tokens(top.indices[j].tolist()),
                    "probs": [float(x) for x in top.values[j]],
                    "answer_prob": None,
                    "answer_rank": None,  # 1 = the model's first guess
                }
                answer_id = tokenizer.convert_tokens_to_ids(probe.answers[j]) if probe.answers[j] else None
                if answer_id is not None and 0 <= answer_id < probs.shape[-1]:
                    p = probs[j, answer_id]
                    row["answer_prob"] = float(p)
                    row["answer_rank"] = int((probs[j] > p).sum()) + 1
                rows.append(row)
            out.append({"text": probe.text, "predictions": rows})
    finally:
        model.train(was_training)
    return out


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


class _Optimizer:
    """One variant's weights update: AdamW with optional clipping and fp16 gradient scaling; under
    torchrun the model is wrapped in DistributedDataParallel, which averages gradients over ranks."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, device: torch.device, world: _World):
        self.cfg = cfg
        self.device = device
        if cfg.freeze_word_embeddings:  # before DDP wraps the model: it registers what needs gradients
            freeze_word_embeddings(model)
        self.module: nn.Module = GatheredMaskedLM(model, hidden=cfg.loss == "sampled")
        if world.distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [device.index if device.index is not None else torch.cuda.current_device()] \
                if device.type == "cuda" else None
            self.module = DDP(self.module, device_ids=ids)
        self.distributed = world.distributed
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = adamw(param_groups(model, cfg.weight_decay), cfg.learning_rate)
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.amp == "fp16")

    def begin(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)

    def micro_step(self, inputs, attention, labels, last: bool, loss_fn, *, share: float,
                   world_size: int) -> float:
        """Forward and backward of one micro-batch; gradients are synchronised on the last one only.

        `share` is this micro-batch's part of the global normaliser (n_a / N); DDP averages the
        gradients over the ranks, so each rank's loss is multiplied by the world size W to make the
        average a sum. Returns the micro-batch's own mean loss.
        """
        sync = contextlib.nullcontext() if (last or not self.distributed) else self.module.no_sync()
        with sync:
            with _autocast(self.device, self.cfg.amp):
                outputs = self.module(inputs, attention, labels)
            loss, _ = loss_fn(outputs)
            self.scaler.scale(loss * (share * world_size)).backward()
        return float(loss.detach())

    def finish(self, skip: bool) -> float | None:
        """Clip and update; returns the gradient norm before clipping (None when skipped or not finite)."""
        if skip:
            self.optimizer.zero_grad(set_to_none=True)
            return None
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.max_grad_norm if self.cfg.clipping else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        self.scaler.step(self.optimizer)  # skipped by the scaler if fp16 gradients overflowed
        self.scaler.update()
        return norm if math.isfinite(norm) else None


class TrainStep:
    """One optimizer step of `train`'s loop on a batch you give it: for measuring steps, not for training.

    It takes the loop's own path (`_Optimizer`: autocast, the chosen loss, backward, clipping,
    AdamW; dropout seeded per step as the loop seeds it), so the Efficiency page and the benchmarks
    time the step a run takes. ``model`` is trained in place: pass a private copy. ``configure``
    switches autocast, checkpointing and frozen word embeddings between steps without rebuilding
    the optimizer, so several set-ups can be timed round-robin on one copy.

    >>> # step = TrainStep(copy.deepcopy(model), TrainConfig(amp="off"))
    >>> # loss = step(input_ids, attention_mask, labels, seed=0)
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, device: str | torch.device | None = None):
        if cfg.loss == "sampled":
            raise InputError("TrainStep measures the full and weighted losses; the sampled softmax needs "
                             "token counts from a corpus: use train() for it.")
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        _check_amp(self.device, cfg.amp)
        self.model = model.to(self.device).train(cfg.dropout)
        set_checkpointing(model, cfg.gradient_checkpointing)
        # Built with the word embeddings trainable, so that `configure` can freeze and unfreeze them.
        self.opt = _Optimizer(model, dataclasses.replace(cfg, freeze_word_embeddings=False), self.device, _World())
        self.cfg = self.opt.cfg = cfg
        if cfg.freeze_word_embeddings:
            freeze_word_embeddings(model)
            self.opt.params = [p for p in model.parameters() if p.requires_grad]
        self.class_weights = None
        if cfg.loss == "weighted":  # no corpus here: every token weighs the same
            self.class_weights = torch.ones(model.get_output_embeddings().weight.shape[0], device=self.device)

    def configure(self, *, amp: str | None = None, gradient_checkpointing: bool | None = None,
                  freeze: bool | None = None) -> None:
        """Change the set-up for the next steps (None leaves a setting as it is)."""
        changes: dict[str, Any] = {}
        if amp is not None:
            _check_amp(self.device, amp)
            changes["amp"] = amp
        if gradient_checkpointing is not None:
            set_checkpointing(self.model, gradient_checkpointing)
            changes["gradient_checkpointing"] = gradient_checkpointing
        if freeze is not None:
            freeze_word_embeddings(self.model, freeze)
            self.opt.params = [p for p in self.model.parameters() if p.requires_grad]
            changes["freeze_word_embeddings"] = freeze
        if changes:
            self.cfg = dataclasses.replace(self.cfg, **changes)
            self.opt.cfg = self.cfg

    def release_gradients(self) -> None:
        """Free the last step's gradients now (the next step would free them first thing)."""
        self.opt.optimizer.zero_grad(set_to_none=True)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, *,
                 lr: float | None = None, seed: int = 0) -> float:
        """Forward, backward, clip and AdamW on one (B, T) batch; returns the loss before the update."""
        ids, attention, labels = (t.to(self.device) for t in (input_ids, attention_mask, labels))
        fork = [self.device.index or 0] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=fork):
            _seed_dropout(_mix(self.cfg.seed, _DROPOUT, seed), self.device)
            self.opt.begin(self.cfg.learning_rate if lr is None else lr)

            def loss_fn(outputs):
                return _loss_value(self.cfg, outputs, class_weights=self.class_weights, counts=None,
                                   generator=None)

            empty = not bool((labels != IGNORE_INDEX).any())
            # One batch is the whole step: its share of the step's normaliser is 1.
            loss = self.opt.micro_step(ids, attention, labels, True, loss_fn, share=1.0, world_size=1)
            self.opt.finish(empty)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return loss


class _DeepSpeedOptimizer:
    """The same contract through a DeepSpeed engine (ZeRO-2, optimizer state offloaded to the CPU).

    Used only by `python -m mlm_core train --deepspeed CONFIG` when the `deepspeed` package is
    installed; DeepSpeed then owns the optimizer, clipping, precision and the gradient all-reduce.
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, device: torch.device, world: _World,
                 ds_config: dict[str, Any]):
        import deepspeed  # optional dependency

        self.cfg = cfg
        self.device = device
        if cfg.freeze_word_embeddings:
            freeze_word_embeddings(model)
        module = GatheredMaskedLM(model, hidden=cfg.loss == "sampled")
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=module, model_parameters=param_groups(model, cfg.weight_decay), config=ds_config)
        self.module = self.engine

    def begin(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def micro_step(self, inputs, attention, labels, last: bool, loss_fn, *, share: float,
                   world_size: int) -> float:
        outputs = self.engine(inputs, attention, labels)
        loss, _ = loss_fn(outputs)
        # The same n_a / N x W as with DDP (DeepSpeed also averages gradients over the ranks), times
        # the accumulation steps: `engine.backward` divides every loss by gradient_accumulation_steps.
        self.engine.backward(loss * (share * world_size * self.cfg.grad_accum_steps))
        self.engine.step()  # an update happens only at the accumulation boundary
        return float(loss.detach())

    def finish(self, skip: bool) -> float | None:
        norm = self.engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else None
        return norm if norm is not None and math.isfinite(norm) else None


def deepspeed_config(template: Mapping[str, Any], cfg: TrainConfig, world_size: int) -> dict[str, Any]:
    """Fill the "auto" entries of a DeepSpeed config from a TrainConfig (as Hugging Face's Trainer does)."""
    micro = cfg.batch_size // cfg.grad_accum_steps // max(1, world_size)
    auto = {
        "train_batch_size": cfg.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": cfg.grad_accum_steps,
        "gradient_clipping": cfg.max_grad_norm or 0.0,
    }

    def fill(node, path=()):
        if isinstance(node, Mapping):
            return {k: fill(v, path + (k,)) for k, v in node.items()}
        if node != "auto":
            return node
        key = path[-1]
        amp = resolve_amp(cfg.amp, "cuda" if torch.cuda.is_available() else "cpu")
        if path[:1] == ("bf16",):
            return amp == "bf16"
        if path[:1] == ("fp16",):
            return amp == "fp16"
        if key == "lr":
            return cfg.learning_rate
        if key == "weight_decay":
            return cfg.weight_decay
        if key in auto:
            return auto[key]
        raise InputError(f"The DeepSpeed config has 'auto' at {'.'.join(path)}, which MLM Lab cannot fill.")

    return fill(dict(template))


@dataclass
class _Variant:
    name: str
    cfg: TrainConfig
    model: nn.Module  # the trained copy
    opt: Any  # _Optimizer or _DeepSpeedOptimizer
    result: TrainResult
    class_weights: torch.Tensor | None = None


class _Batches:
    """Each step's micro-batches for this rank, masked, prepared one or two steps ahead in a thread.

    Global sample number s = step * batch_size + position; its chunk comes from a seeded
    permutation of the training chunks per epoch, its mask from a generator seeded by s (dynamic
    masking), or, for static masking with k copies, by (chunk, epoch mod k). Neither depends on
    the number of processes or accumulation steps. This rank's micro-batches are the global micro
    indices j = rank * A + a (a < A), holding samples [j * micro, (j + 1) * micro). Masking one
    example at a time costs a few ms per batch, so a thread does it while the model computes (on
    a GPU the step would otherwise wait for it). A step is {mask_copies: micro-batches}, one
    entry per masking scheme the variants use, all on the same chunks.
    """

    def __init__(self, chunks: Chunks, cfg: TrainConfig, world: _World, micro: int, *, mask_token_id: int,
                 vocab_size: int, special_ids: tuple[int, ...], mask_copies: Sequence[int] = (0,),
                 prefetch: int = 2):
        import queue

        self.chunks, self.cfg, self.world, self.micro = chunks, cfg, world, micro
        self.mask_copies = tuple(dict.fromkeys(mask_copies))
        self.mask_kwargs = dict(mask_token_id=mask_token_id, vocab_size=vocab_size, special_ids=special_ids)
        self.perm: dict[int, torch.Tensor] = {}
        self.queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._fill, name="mlmlab-batches", daemon=True)
        self.thread.start()

    def _chunk_index(self, sample: int) -> int:
        epoch, k = divmod(sample, len(self.chunks))
        if epoch not in self.perm:
            self.perm.clear()
            self.perm[epoch] = torch.randperm(len(self.chunks), generator=_generator(self.cfg.seed, _ORDER, epoch))
        return int(self.perm[epoch][k])

    def _mask_seed(self, sample: int, chunk: int, copies: int) -> int:
        if copies == 0:  # dynamic: every draw of a chunk gets a new mask
            return _mix(self.cfg.seed, _MASK, sample)
        epoch = sample // len(self.chunks)  # static: copy epoch mod k of this chunk's k masks
        return _mix(self.cfg.seed, _STATIC_MASK, chunk, epoch % copies)

    def make(self, step: int) -> dict[int, list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]]:
        cfg = self.cfg
        out: dict[int, list] = {k: [] for k in self.mask_copies}
        for a in range(cfg.grad_accum_steps):
            j = self.world.rank * cfg.grad_accum_steps + a
            samples = [step * cfg.batch_size + j * self.micro + i for i in range(self.micro)]
            index = [self._chunk_index(s) for s in samples]
            batch = self.chunks.take(index)
            for copies in self.mask_copies:
                seeds = [self._mask_seed(s, c, copies) for s, c in zip(samples, index)]
                inputs, labels = _mask_rows(batch, cfg.masking, seeds=seeds, **self.mask_kwargs)
                out[copies].append((j, inputs, batch.attention_mask, labels))
        return out

    def _fill(self) -> None:
        import queue

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

    def get(self, step: int):
        got, batch = self.queue.get()
        if isinstance(batch, BaseException):
            raise batch
        assert got == step, (got, step)
        return batch

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=5)


def _train_step(state: list[_Variant], micro_batches, step: int, first: TrainConfig, world: _World,
                device: torch.device, counts_dev: torch.Tensor, started: float, emit) -> int:
    """One optimizer step of every variant on the same micro-batches; returns the steps done.

    The step's loss is one average over every masked token of the global batch (all micro-batches,
    all ranks), exactly what one big batch would give: micro-batch a adds (its mean) x (its share
    n_a / N of the global normaliser N), where N (masked tokens, or Σw for the weighted loss) is
    all-reduced before any forward pass. A mean of micro-batch means would weight a micro-batch
    with 5 masked tokens as much as one with 10.
    """
    mine = [micro_batches[v.cfg.mask_copies] for v in state]  # each variant's masks (static or dynamic)
    local_tokens = sum(int(b[2].sum()) for b in mine[0])
    norms = [[_normaliser(v.cfg, b[3], v.class_weights) for b in batches] for v, batches in zip(state, mine)]
    masked = [float(sum(int((b[3] != IGNORE_INDEX).sum()) for b in batches)) for batches in mine]
    reduced = _all_reduce_sum([sum(n) for n in norms] + masked + [float(local_tokens)], device, world)
    totals, masked_counts, tokens_all = reduced[:len(state)], reduced[len(state):-1], reduced[-1]
    for v, batches, v_norms, total, masked_all in zip(state, mine, norms, totals, masked_counts):
        t0 = time.perf_counter()
        lr = _lr_at(v.cfg, step)
        v.opt.begin(lr)
        loss_sum = 0.0
        # Nothing selected anywhere: no loss to learn from, so no update (and no NaN in the curve).
        skip = masked_all == 0 or total <= 0
        for a, (j, inputs, attention, labels) in enumerate(batches):
            _seed_dropout(_mix(first.seed, _DROPOUT, step, j), device)  # same dropout for every variant

            def loss_fn(outputs, v=v, j=j):
                return _loss_value(v.cfg, outputs, class_weights=v.class_weights, counts=counts_dev,
                                   generator=_generator(first.seed, _SAMPLED, step, j))

            share = v_norms[a] / total if total > 0 else 0.0  # n_a / N
            value = v.opt.micro_step(inputs, attention, labels, a == len(batches) - 1, loss_fn,
                                     share=share, world_size=world.size)
            loss_sum += value * share
        (loss_sum,) = _all_reduce_sum([loss_sum], device, world)
        record: dict[str, Any] = {"step": step + 1, "lr": lr, "masked_tokens": int(masked_all),
                                  "tokens": int(tokens_all)}
        grad_norm = v.opt.finish(skip)
        record.update(loss=None if skip else loss_sum, grad_norm=grad_norm, skipped=skip)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        v.result.train_time_s += dt
        v.result.tokens_seen += int(tokens_all)
        record["tokens_per_s"] = tokens_all / dt if dt > 0 else None
        record["elapsed_s"] = time.perf_counter() - started
        v.result.steps.append(record)
        v.result.steps_done = step + 1
        emit(TrainEvent("step", v.name, step + 1, first.steps, record))
    return step + 1


def train(model: nn.Module, tokenizer, texts: Sequence[str], config: TrainConfig, *,
          on_event: Callable[[TrainEvent], None] | None = None,
          stop: threading.Event | None = None,
          eval_texts: Sequence[str] | None = None) -> TrainResult:
    """Train a copy of `model` on `texts`; the base model and the caller's RNG stay untouched.

    >>> # result = train(model, tok, ["the cat sat on the mat."] * 64, TrainConfig(steps=50))
    >>> # result.steps[-1]["loss"] < result.steps[0]["loss"]
    """
    return train_variants(model, tokenizer, texts, {"run": config}, on_event=on_event, stop=stop,
                          eval_texts=eval_texts)["run"]


def check_variants(variants: Mapping[str, TrainConfig]) -> None:
    """Variants compared side by side must see the same data: same steps, batches, masks and seed."""
    if not isinstance(variants, Mapping) or not variants:
        raise InputError("Choose at least one variant to train.")
    if len(variants) > MAX_VARIANTS:
        raise InputError(f"At most {MAX_VARIANTS} variants can train side by side "
                         "(each holds its own copy of the model).")
    for name, cfg in variants.items():
        if not isinstance(name, str) or not name.strip():
            raise InputError("Every variant needs a name.")
        if not isinstance(cfg, TrainConfig):
            raise InputError(f"Variant {name!r} needs a TrainConfig.")
    first = next(iter(variants.values()))
    for name, cfg in variants.items():
        differ = [f for f in DATA_FIELDS if getattr(cfg, f) != getattr(first, f)]
        if differ:
            raise InputError(f"Variant {name!r} differs in {', '.join(differ)}: variants must share "
                             "these settings so they see identical batches and masks.")


def train_variants(model: nn.Module, tokenizer, texts: Sequence[str],
                   variants: Mapping[str, TrainConfig], *,
                   on_event: Callable[[TrainEvent], None] | None = None,
                   stop: threading.Event | None = None,
                   device: str | torch.device | None = None,
                   deepspeed: Mapping[str, Any] | None = None,
                   eval_texts: Sequence[str] | None = None) -> dict[str, TrainResult]:
    """Train 1-4 variants from the same initial weights on identical batches and masks, step by step.

    `eval_texts`, when given, is the held-out text (every chunk of `texts` is then trained on);
    otherwise `eval_fraction` of the chunks of `texts` is held out.

    Each variant trains its own deep copy of `model` (in fp32; AMP handles low precision). Under an
    initialised torch.distributed process group the global batch is split over the ranks, a stop
    on any rank stops all of them, and evaluation and probes run on rank 0 only. `deepspeed` is a
    DeepSpeed config (see `deepspeed_config`), used instead of DDP + AdamW when given.

    Randomness: dropout draws from torch's global RNG, which is seeded per step and restored
    afterwards (`fork_rng`); two runs training at once in one process share that RNG, so only
    their dropout masks (never their data or masks) may then differ from a lone run.
    """
    check_variants(variants)
    emit = on_event or (lambda event: None)
    stop = stop or threading.Event()
    first = next(iter(variants.values()))
    try:
        dev = torch.device(device) if device is not None else next(model.parameters()).device
        fork_devices = [dev.index if dev.index is not None else torch.cuda.current_device()] \
            if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=fork_devices):
            return _train_variants(model, tokenizer, texts, dict(variants), first, emit, stop, dev, deepspeed,
                                   eval_texts)
    except Exception as exc:
        message = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        for name in variants:
            emit(TrainEvent("error", name, 0, first.steps, {"message": message}))
        raise


def _stop_requested(stop: threading.Event, device: torch.device, world: _World) -> bool:
    """Local flag, or agreed over all ranks (a rank that stopped alone would hang the others)."""
    if not world.distributed:
        return stop.is_set()
    import torch.distributed as dist

    flag = torch.tensor([1.0 if stop.is_set() else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        stop.set()
    return bool(flag.item() > 0)


def _train_variants(base: nn.Module, tokenizer, texts, variants: dict[str, TrainConfig],
                    first: TrainConfig, emit, stop: threading.Event, device: torch.device,
                    ds_template: Mapping[str, Any] | None, eval_texts: Sequence[str] | None = None):
    world = _world()
    started = time.perf_counter()
    for cfg in variants.values():
        _check_amp(device, cfg.amp)
    max_pos = getattr(getattr(base, "config", None), "max_position_embeddings", None)
    if max_pos is not None and first.seq_len > max_pos:
        raise InputError(f"seq_len {first.seq_len} is longer than this model's {max_pos} positions.")
    per_rank = first.batch_size // first.grad_accum_steps
    if per_rank % world.size:
        raise InputError(f"batch_size / grad_accum_steps ({per_rank}) must be a multiple of the "
                         f"number of processes ({world.size}).")
    micro = per_rank // world.size  # examples in one forward pass on one rank
    out_emb = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    vocab_size = int(out_emb.weight.shape[0]) if out_emb is not None else len(tokenizer)
    mask_vocab = min(len(tokenizer), vocab_size)  # random replacements are real tokenizer tokens
    special = special_ids(tokenizer)

    # Data: chunks, a held-out split, token counts, eval masks and probes: all from the seed.
    chunks = make_chunks(tokenizer, texts, first.seq_len, first.chunk_overlap)
    n = len(chunks)
    if eval_texts is not None and any(str(t).strip() for t in eval_texts):  # a held-out text of its own
        held = make_chunks(tokenizer, eval_texts, first.seq_len, first.chunk_overlap)
        train_chunks, eval_chunks = chunks, held.take(range(min(len(held), first.eval_max_chunks)))
        eval_on_train = False
    else:
        n_eval = 0
        if first.eval_fraction > 0 and n >= 4:
            n_eval = max(1, min(first.eval_max_chunks, round(n * first.eval_fraction)))
        order = torch.randperm(n, generator=_generator(first.seed, _SPLIT))
        eval_on_train = n_eval == 0
        if eval_on_train:  # too little text to hold any out: evaluate on (some of) the training chunks
            train_chunks, eval_chunks = chunks, chunks.take(order[:first.eval_max_chunks])
        else:
            train_chunks, eval_chunks = chunks.take(order[n_eval:]), chunks.take(order[:n_eval])
    counts = token_counts(train_chunks, vocab_size)
    buckets = frequency_buckets(counts)
    # Each held-out chunk under up to EVAL_MASKINGS different masks, at most eval_max_chunks rows.
    copies = max(1, min(EVAL_MASKINGS, first.eval_max_chunks // max(1, len(eval_chunks))))
    eval_chunks = eval_chunks.take([i for _ in range(copies) for i in range(len(eval_chunks))])
    e_seeds = [_mix(first.seed, _EVAL_MASK, r) for r in range(len(eval_chunks))]
    e_inputs, e_labels = _mask_rows(eval_chunks, first.masking, mask_token_id=tokenizer.mask_token_id,
                                    vocab_size=mask_vocab, special_ids=special, seeds=e_seeds)
    eval_set = _EvalSet(e_inputs, eval_chunks.attention_mask, e_labels, buckets, max(1, micro),
                        mask_token_id=tokenizer.mask_token_id, focus_ids=_focus_ids(tokenizer, first.eval_focus_words))
    probes = _make_probes(tokenizer, texts, first)

    # Variants: a deep copy each (fp32 master weights), its own optimizer.
    state: list[_Variant] = []
    for name, cfg in variants.items():
        m = copy.deepcopy(base).to(device=device, dtype=torch.float32)
        m.train(cfg.dropout)
        if cfg.gradient_checkpointing:
            _enable_checkpointing(m)
        if ds_template is not None:
            opt = _DeepSpeedOptimizer(m, cfg, device, world, deepspeed_config(ds_template, cfg, world.size))
        else:
            opt = _Optimizer(m, cfg, device, world)
        class_weights = None
        if cfg.loss == "weighted":
            from mlm_core import losses

            class_weights = losses.token_frequency_weights(
                counts.float(), scheme=cfg.weight_scheme, smoothing=cfg.weight_smoothing).to(device)
        result = TrainResult(name=name, config=cfg, eval_on_train=eval_on_train, model=m)
        state.append(_Variant(name, cfg, m, opt, result, class_weights))

    def do_eval(step: int) -> None:
        if world.rank != 0:
            return
        for v in state:
            t0 = time.perf_counter()
            values = evaluate(v.model, eval_set, amp=v.cfg.amp)
            values["eval_s"] = time.perf_counter() - t0
            values["eval_on_train"] = eval_on_train
            v.result.evals.append({"step": step, **values})
            emit(TrainEvent("eval", v.name, step, first.steps, values))
            if probes:
                preds = _probe_predictions(v.model, tokenizer, probes, first.probe_top_k)
                v.result.probes.append({"step": step, "probes": preds})
                emit(TrainEvent("probe", v.name, step, first.steps, {"probes": preds}))

    do_eval(0)
    counts_dev = counts.float().to(device)
    batches = _Batches(train_chunks, first, world, micro, mask_token_id=tokenizer.mask_token_id,
                       vocab_size=mask_vocab, special_ids=special,
                       mask_copies=[cfg.mask_copies for cfg in variants.values()])
    steps_done = 0
    try:
        for step in range(first.steps):
            if _stop_requested(stop, device, world):
                break
            micro_batches = {copies: [(j, inputs.to(device), attention.to(device), labels.to(device))
                                      for j, inputs, attention, labels in group]
                             for copies, group in batches.get(step).items()}
            steps_done = _train_step(state, micro_batches, step, first, world, device, counts_dev, started, emit)
            if not stop.is_set() and (steps_done % first.eval_every == 0 or steps_done == first.steps):
                do_eval(steps_done)
    finally:
        batches.close()

    stopped = steps_done < first.steps
    for v in state:
        v.result.stopped = stopped
        v.result.wall_time_s = time.perf_counter() - started
        v.model.train(False)
        if v.cfg.gradient_checkpointing:
            disable = getattr(v.model, "activation_checkpointing_disable", None) or \
                getattr(v.model, "gradient_checkpointing_disable", None)
            if disable is not None:
                disable()
        v.opt = None  # drop the optimizer state (and any DDP/DeepSpeed wrapper) now
        emit(TrainEvent("done", v.name, steps_done, first.steps, v.result.summary()))
    return {v.name: v.result for v in state}
