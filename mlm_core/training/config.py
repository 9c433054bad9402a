"""What defines a training run: `TrainConfig` and its checks, `DataConfig` (the settings variants
must share), and the rule that turns the run's seed into every random stream it uses.

A config is a frozen dataclass (nanoGPT's GPTConfig): defaults carry a comment that says why, and
`__post_init__` refuses impossible values with a message a workshop participant can act on.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


from mlm_core.errors import InputError
from mlm_core.loss_registry import NAMES as LOSS_NAMES
from mlm_core.losses import SCHEMES
from mlm_core.masking import MaskingConfig
from mlm_core.sampled_softmax import SAMPLED_SOFTMAX, SAMPLERS, SampledSoftmaxConfig, correction_name
from mlm_core.training.bugs import BUGS

# The choices a learner can make, named once so the page, the CLI and the messages agree. The losses are
# loss_registry's records, read at every check: a variant registered later is accepted.
LOSSES = LOSS_NAMES
AMP_MODES = ("auto", "off", "bf16", "fp16")
SCHEDULES = ("linear", "cosine", "constant")
BUCKETS = ("frequent", "medium", "rare")
# Token-frequency buckets by share of all corpus tokens, most common types first: the types that
# make up the first half of the corpus are "frequent", the next 40% "medium", the last 10% (and
# anything never seen in training) "rare". Shares of mass, not of types, so every bucket has
# enough evaluation tokens to be measured.
BUCKET_MASS = (0.5, 0.9)
MAX_VARIANTS = 4


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


# The checks behind TrainConfig.__post_init__: each refuses a value with a message a participant can act on.
def _fail(message: str) -> None:
    raise InputError(message)


def _whole(name: str, value: Any, low: int, high: int, hint: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(f"{name} must be a whole number, got {value!r}.")
    if not low <= value <= high:
        _fail(f"{name} must be between {low} and {high}, got {value}. {hint}".strip())


def _number(name: str, value: Any, low: float, high: float, hint: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(f"{name} must be a number, got {value!r}.")
    if not low <= value <= high:
        _fail(f"{name} must be between {low:g} and {high:g}, got {value:g}. {hint}".strip())
    return float(value)


def _choice(name: str, value: Any, options: Sequence[str]) -> None:
    if value not in options:
        _fail(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}.")


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        _fail(f"{name} must be True or False.")


def _strings(cfg: Any, name: str, what: str) -> None:  # a list of strings, kept as a tuple (the config stays hashable)
    value = getattr(cfg, name)
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        _fail(f"{name} must be a list of {what}.")
    object.__setattr__(cfg, name, tuple(value))


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
    # The fraction of the peak rate that "linear" and "cosine" decay to instead of 0 (the default-model
    # build keeps 0.05: its last steps still learn from the sources it has seen least).
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.01  # BERT's value; never applied to biases and LayerNorm weights
    max_grad_norm: float | None = 1.0  # clip the global gradient norm; None or 0 turns clipping off
    amp: str = "auto"  # "auto": bf16 autocast where it is measured faster (precision.auto_amp), else fp32;
    # or "off" (fp32), "bf16" (CUDA or CPU autocast), "fp16" (CUDA only, with a GradScaler)
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% slower
    grad_accum_steps: int = 1  # micro-batches per optimizer step; the loss is one mean over all their masked tokens
    loss: str = "full"  # a loss_registry name: "full", "weighted" (by token frequency), "sampled" (sampled softmax)
    weight_scheme: str = "inverse_sqrt"  # weighted loss: how a token's count becomes its weight
    weight_smoothing: float = 1.0  # weighted loss: added to every count, so unseen tokens stay finite
    num_sampled: int = SAMPLED_SOFTMAX.num_sampled  # sampled softmax: K classes per step (sampled_softmax.SAMPLED_SOFTMAX)
    sampler: str = SAMPLED_SOFTMAX.sampler  # sampled softmax: "unigram" = the training corpus' token counts
    logq_correction: bool = SAMPLED_SOFTMAX.logq_correction  # sampled softmax: importance-sampling estimate of the full loss
    masking: MaskingConfig = field(default_factory=MaskingConfig)  # BERT's 15% with 80/10/10
    # The held-out set's rule (None: `masking`). Variants that train at different rates (the masking-rate
    # lesson: 15%, 30%, 40%) are all scored on one frozen mask of this rule, the same positions for every one.
    eval_masking: MaskingConfig | None = None
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
    # The probe set each probe sentence belongs to (one name per sentence; empty: one set). The facts
    # lesson asks training sentences ("read") and the same facts in new words ("new") side by side.
    probe_groups: tuple[str, ...] = ()
    # Words whose held-out positions also get a loss of their own (`focus_loss`): a lesson's facts. The
    # held-out loss over every position can fall for other reasons (the Veldoria lesson's drop is mostly
    # the model learning to spell the invented name), so the facts' own loss says what was learned.
    eval_focus_words: tuple[str, ...] = ()
    # The share of the focus words' tokens selected for prediction in the training batches (0: the masking
    # rule's p, like every token). Above p it masks the words that carry a lesson's facts more often, as
    # REALM's "salient span masking" hides named entities and dates (Guu et al. 2020); the other tokens
    # keep the rule, and the held-out set is masked by the rule alone.
    focus_mlm_probability: float = 0.0
    dropout: bool = True  # False sets the model to eval mode while training (exact comparisons)
    # A named bug of the masking, labels or evaluation step (training.bugs.BUGS), for the "bugs that train"
    # lesson's buggy twin; "" is the clean loop.
    bug: str = ""
    seed: int = 0  # data order, masks, dropout and sampled classes all come from this
    # Fine-tuning: keep the word embeddings fixed. In BERT they are tied to the output projection, so the
    # decoder's weight stays fixed too (its bias still trains): the (V, H) matrix, half the default model's
    # weights, needs no gradient, no AdamW update and no weight-gradient matmul: a faster step.
    freeze_word_embeddings: bool = False
    # > 0: this variant learns from the first N training texts only: the others stay in its batches as context, the
    # same inputs as every variant's, but are never asked for (the facts lesson's side by side, issue 43: one run
    # learns from Veldoria's sentences alone, its twin from the twin countries' too, on the same batches).
    learn_from_texts: int = 0

    def __post_init__(self) -> None:
        self._check_run()
        self._check_loss()
        self._check_masking()
        self._check_evaluation()
        _flag("dropout", self.dropout)
        _whole("seed", self.seed, 0, 2**63 - 1, "Any whole number from 0 up works as a seed.")
        if self.max_grad_norm is not None:
            object.__setattr__(self, "max_grad_norm", float(self.max_grad_norm))
        object.__setattr__(self, "learning_rate", float(self.learning_rate))
        object.__setattr__(self, "weight_decay", float(self.weight_decay))

    def _check_run(self) -> None:
        """The run's size and its optimiser: steps, batch, sequence, learning rate and schedule, clipping, precision."""
        _whole("steps", self.steps, 1, 1_000_000, "A workshop run needs 20 to 200 steps.")
        _whole("batch_size", self.batch_size, 1, 65_536, "8 to 32 sequences is typical on a CPU.")
        _whole("seq_len", self.seq_len, 8, 8192, "64 or 128 tokens suits sentences.")
        if self.chunk_overlap is None:
            object.__setattr__(self, "chunk_overlap", min(16, self.seq_len // 4))
        _whole("chunk_overlap", self.chunk_overlap, 0, self.seq_len - 3,
               "The overlap must leave room for new tokens in every window; 16 is typical.")
        _number("learning_rate", self.learning_rate, 1e-8, 1.0,
                "Typical: 1e-5 to 5e-5 to fine-tune a trained model, 1e-4 to 1e-3 from scratch.")
        if self.learning_rate <= 0:
            _fail("learning_rate must be above 0.")
        _whole("warmup_steps", self.warmup_steps, 0, 1_000_000)
        _choice("schedule", self.schedule, SCHEDULES)
        _number("min_lr_ratio", self.min_lr_ratio, 0.0, 1.0, "0 decays to nothing; 0.05 keeps 5% of the peak rate.")
        _number("weight_decay", self.weight_decay, 0.0, 1.0, "0.01 is BERT's value.")
        if self.max_grad_norm is not None:
            _number("max_grad_norm", self.max_grad_norm, 0.0, 1e6,
                    "1.0 is the usual clip; use 0 or None to turn clipping off.")
        _choice("amp", self.amp, AMP_MODES)
        _flag("freeze_word_embeddings", self.freeze_word_embeddings)
        _whole("learn_from_texts", self.learn_from_texts, 0, 10**9, "0 learns from every text.")
        _flag("gradient_checkpointing", self.gradient_checkpointing)
        _whole("grad_accum_steps", self.grad_accum_steps, 1, 4096)
        if self.batch_size % self.grad_accum_steps:
            _fail(f"batch_size ({self.batch_size}) must be a multiple of grad_accum_steps "
                  f"({self.grad_accum_steps}): each accumulation step takes an equal share.")

    def _check_loss(self) -> None:
        """The loss (a registered variant: full, frequency-weighted, sampled, ...) and each one's settings."""
        _choice("loss", self.loss, LOSSES)
        _choice("weight_scheme", self.weight_scheme, SCHEMES)
        _number("weight_smoothing", self.weight_smoothing, 0.0, 1e9,
                "Smoothing is added to every token count; 1 is typical.")
        if self.weight_smoothing == 0 and self.weight_scheme != "none":
            _fail("weight_smoothing must be above 0, so tokens never seen in the corpus get a finite weight.")
        _whole("num_sampled", self.num_sampled, 1, 10_000_000,
               "Sampled softmax draws K classes; 64 to 4096 is typical.")
        _choice("sampler", self.sampler, SAMPLERS)
        _flag("logq_correction", self.logq_correction)

    def _check_masking(self) -> None:
        """The training rule, the held-out set's rule, a named bug, static mask copies."""
        if not isinstance(self.masking, MaskingConfig):
            _fail("masking must be a MaskingConfig.")
        if self.eval_masking is not None and not isinstance(self.eval_masking, MaskingConfig):
            _fail("eval_masking must be a MaskingConfig, or None to mask the held-out text with the training rule.")
        if self.bug:
            _choice("bug", self.bug, tuple(BUGS))
        _whole("mask_copies", self.mask_copies, 0, 1000,
               "0 masks every chunk afresh each time (dynamic); BERT made 10 static copies.")

    def _check_evaluation(self) -> None:
        """Evaluation and probes: how often, how much is held out, the probe sentences, answers and sets."""
        _whole("eval_every", self.eval_every, 1, 1_000_000)
        _number("eval_fraction", self.eval_fraction, 0.0, 0.5,
                "Hold out 5% to 20% of the chunks for evaluation.")
        _whole("eval_max_chunks", self.eval_max_chunks, 1, 100_000)
        _strings(self, "probe_sentences", "sentences")
        _strings(self, "probe_answers", "words")
        if self.probe_answers and len(self.probe_answers) != len(self.probe_sentences):
            _fail(f"probe_answers has {len(self.probe_answers)} words for {len(self.probe_sentences)} "
                  "probe sentences: give one answer per sentence (\"\" where it is unknown).")
        _strings(self, "probe_groups", "names")
        if self.probe_groups and len(self.probe_groups) != len(self.probe_sentences):
            _fail(f"probe_groups has {len(self.probe_groups)} names for {len(self.probe_sentences)} probe sentences: "
                  "give one set name per sentence.")
        _whole("probe_top_k", self.probe_top_k, 1, 50)
        _strings(self, "eval_focus_words", "words")
        _number("focus_mlm_probability", self.focus_mlm_probability, 0.0, 1.0,
                "The share of the facts' words to mask: 0 keeps the rule's p for them too.")

    @property
    def held_out_masking(self) -> MaskingConfig:
        """The rule the held-out set is masked with: `eval_masking`, else the training rule."""
        return self.masking if self.eval_masking is None else self.eval_masking

    @property
    def clipping(self) -> bool:
        return bool(self.max_grad_norm)

    @property
    def sampled_softmax(self) -> SampledSoftmaxConfig:
        """The sampled softmax's settings as its functions take them: K, the sampler and the correction
        (importance sampling, or none) from this config, the rest ``SAMPLED_SOFTMAX``'s."""
        return dataclasses.replace(SAMPLED_SOFTMAX, num_sampled=self.num_sampled, sampler=self.sampler,
                                   correction=correction_name(self.logq_correction, False))

    def to_dict(self) -> dict[str, Any]:
        """Plain values only, for JSON, YAML and CSV."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["masking"] = dataclasses.asdict(self.masking)
        out["eval_masking"] = None if self.eval_masking is None else dataclasses.asdict(self.eval_masking)
        out["probe_sentences"] = list(self.probe_sentences)
        out["probe_answers"] = list(self.probe_answers)
        out["probe_groups"] = list(self.probe_groups)
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
        for key in ("masking", "eval_masking"):
            masking = kwargs.get(key)
            if isinstance(masking, Mapping):
                mnames = {f.name for f in dataclasses.fields(MaskingConfig)}
                bad = sorted(set(masking) - mnames)
                if bad:
                    raise InputError(f"Unknown masking option(s): {', '.join(bad)}. "
                                     f"Known: {', '.join(sorted(mnames))}.")
                try:
                    kwargs[key] = MaskingConfig(**masking)
                except InputError:
                    raise
                except (TypeError, ValueError) as exc:
                    raise InputError(f"Bad masking settings: {exc}") from None
        for key in ("probe_sentences", "probe_answers", "probe_groups", "eval_focus_words"):
            if key in kwargs and isinstance(kwargs[key], list):
                kwargs[key] = tuple(kwargs[key])
        try:
            return cls(**kwargs)
        except InputError:
            raise
        except (TypeError, ValueError) as exc:
            raise InputError(f"Bad training settings: {exc}") from None


@dataclass(frozen=True)
class DataConfig:
    """The settings that decide which tokens a step sees and what it is measured on: one per run.

    Variants compared side by side must share them, so a run has one (`check_variants` returns it)
    and the loop, its batches, its held-out set and its probes read only these. The training rule
    `masking`, `mask_copies` and `bug` are not here: static and dynamic masking, 15% and 40%, a clean
    run and its buggy twin race on the same chunks in the same order, each with its own masks drawn
    from the same per-sample seeds. The held-out set's rule is here, so every variant is scored on the
    same frozen mask. Built from a checked config by `DataConfig.of` (a TrainConfig has every one of
    these fields too, so the helpers that take a DataConfig take a TrainConfig as well).

    >>> DataConfig.of(TrainConfig(steps=20, seed=3)).steps, DataConfig.of(TrainConfig(seed=3)).seed
    (20, 3)
    """

    steps: int
    batch_size: int
    seq_len: int
    chunk_overlap: int
    grad_accum_steps: int
    held_out_masking: MaskingConfig  # TrainConfig.eval_masking, else the training rule
    eval_every: int
    eval_fraction: float
    eval_max_chunks: int
    probe_sentences: tuple[str, ...]
    probe_answers: tuple[str, ...]
    probe_groups: tuple[str, ...]
    probe_top_k: int
    eval_focus_words: tuple[str, ...]
    focus_mlm_probability: float
    seed: int

    @classmethod
    def of(cls, cfg: TrainConfig) -> DataConfig:
        """The data settings of one variant's config."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})


DATA_FIELDS = tuple(f.name for f in dataclasses.fields(DataConfig))


def check_variants(variants: Mapping[str, TrainConfig]) -> DataConfig:
    """Variants compared side by side must see the same data: same steps, batches, masks and seed.

    Returns the data settings they share, the run's one `DataConfig`.

    >>> check_variants({"a": TrainConfig(steps=5), "b": TrainConfig(steps=5, learning_rate=1e-3)}).steps
    5
    """
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
    shared = DataConfig.of(next(iter(variants.values())))  # the first variant's; every other must match it
    for name, cfg in variants.items():
        mine = DataConfig.of(cfg)
        differ = [f for f in DATA_FIELDS if getattr(mine, f) != getattr(shared, f)]
        if differ == ["held_out_masking"]:
            raise InputError(f"Variant {name!r} masks the held-out text with another rule: variants that train with "
                             "different masking rules must share one eval_masking, so every variant is scored on "
                             "the same frozen mask.")
        if differ:
            raise InputError(f"Variant {name!r} differs in {', '.join(differ)}: variants must share "
                             "these settings so they see identical batches and masks.")
    return shared


# --------------------------------------------------------------------------------------------
# Seeds: every random choice is seeds.generator(seed, Stream.X, *when): (seed, what, when, which)
# --------------------------------------------------------------------------------------------

class Stream(str, enum.Enum):
    """A training run's derived streams: the purpose of ``seeds.generator(seed, purpose, *index)``."""

    ORDER = "train_order"  # the order of the training chunks, per epoch
    MASK = "train_mask"  # dynamic masking: one mask per drawn sample
    EVAL_MASK = "eval_mask"  # the held-out chunks' masks, made once
    SPLIT = "train_split"  # which chunks are held out
    DROPOUT = "dropout"  # dropout, per step and micro-batch
    SAMPLED = "train_sampled"  # the sampled softmax's classes, per step and micro-batch
    PROBE = "probe"  # which corpus sentences become probes
    STATIC_MASK = "static_mask"  # static masking: copy k of a chunk's masks
    EVAL_REMASK = "eval_remask"  # bug eval_remasked: the held-out set's fresh mask at each evaluation
    EVAL_DROPOUT = "eval_dropout"  # bug eval_dropout: the dropout drawn while evaluating
