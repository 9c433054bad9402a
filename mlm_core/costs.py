"""What a step of the flow costs, by arithmetic alone: FLOPs, bytes of logits, the matrix multiplies.

One calculator for every page and benchmark that states a cost: the Tokenizer page's head-cost
chart (``head_cost``), the Efficiency page (``logits_size``, ``step_gemms``) and the benchmarks
(``bert_step_flops``, ``ideal_step_speedup``). Everything here is counted, not measured: the
measurements (time, peak memory) live in ``mlm_core.measure``.

Two counts underlie all of it, both for the forward pass (a multiply-add counts 2 FLOPs; a
training step's backward pass costs about twice the forward, so a step is about 3 × forward):

- ``encoder_flops_per_token``: one encoder layer on one token, ``8·H² + 4·H·I + 4·T·H``;
- ``head_flops_per_row``: the prediction head on one row, transform ``2·H²`` and decoder ``2·H·V``.

Shapes: B = batch, T = sequence length, H = hidden size, I = feed-forward (intermediate) size,
L = layers, V = vocabulary, M = selected (masked) positions.

>>> logits_size(8, 64, 30522)["full_bytes"]  # 8 × 64 × 30,522 × 4 bytes
62509056
>>> head_cost(30522).flops_per_position == head_flops_per_row(768, 30522, transform=False)
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from mlm_core import loss_registry
from mlm_core.errors import InputError
from mlm_core.model_access import estimate_parameters  # the one parameter count from a config

BYTES_PER_VALUE = {"fp32": 4, "bf16": 2, "fp16": 2}
MASK_RATE = 0.15  # BERT's selection probability (Devlin et al. 2019, §3.1): the share of positions the loss needs


def _check_whole(**sizes: Any) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"The {name.replace('_', ' ')} must be a whole number of at least 1, got {value!r}.")


def _check_rate(mask_rate: float) -> None:
    if not 0.0 <= mask_rate <= 1.0:
        raise InputError(f"The masking probability must be between 0 and 1, got {mask_rate!r}.")


def masked_positions(batch_size: int, seq_len: int, mask_rate: float = MASK_RATE) -> int:
    """M, the expected count of selected positions in a (B, T) batch: ``round(B × T × mask_rate)``.

    >>> masked_positions(32, 128)
    614
    """
    return int(round(batch_size * seq_len * mask_rate))


def encoder_flops_per_token(hidden: int, intermediate: int, seq_len: int) -> int:
    """Forward FLOPs of one encoder layer on one token.

    Q, K, V and output projections ``8·H²``, the feed-forward ``4·H·I``, attention scores and their
    use ``4·T·H``. This is PaLM's count per token (Chowdhery et al. 2022, Appendix B: 6N + 12·L·H·Q·T
    for a step, attention's Q·Kᵀ and P·V both counted, none halved: BERT attends both ways); Kaplan
    et al. 2020, Table 1 counts one attention product (2·n_layer·n_ctx·d_attn forward), half our
    attention term. Embedding look-ups are no matmul.

    >>> encoder_flops_per_token(2, 4, 3)  # 8·4 + 4·2·4 + 4·3·2
    88
    """
    return 8 * hidden * hidden + 4 * hidden * intermediate + 4 * seq_len * hidden


def head_flops_per_row(hidden: int, vocab: int, *, transform: bool = True) -> int:
    """Forward FLOPs of the masked-LM head on one row: the H→H transform ``2·H²`` (unless
    ``transform=False``) and the decoder onto the vocabulary ``2·H·V``.

    >>> head_flops_per_row(2, 10), head_flops_per_row(2, 10, transform=False)
    (48, 40)
    """
    return (2 * hidden * hidden if transform else 0) + 2 * hidden * vocab


# --------------------------------------------------------------------------------------------
# The logits: full (B, T, V) against gathered (M, V)
# --------------------------------------------------------------------------------------------


def logits_size(batch_size: int, seq_len: int, vocab_size: int, *, mask_rate: float = MASK_RATE,
                masked: int | None = None, dtype: str = "fp32") -> dict[str, Any]:
    """Bytes of the full ``(B, T, V)`` logits against the gathered ``(M, V)`` ones.

    ``M`` is ``masked`` when given, else ``masked_positions(B, T, mask_rate)`` (the expected count).
    The backward pass holds a gradient of the same shape again, so each number doubles in training.

    >>> s = logits_size(2, 4, 10, masked=1)
    >>> s["full_values"], s["gathered_values"], s["full_bytes"], s["ratio"]
    (80, 10, 320, 8.0)
    """
    _check_whole(batch_size=batch_size, sequence_length=seq_len, vocabulary_size=vocab_size)
    if dtype not in BYTES_PER_VALUE:
        raise InputError(f"dtype must be one of {', '.join(BYTES_PER_VALUE)}, got {dtype!r}.")
    if masked is None:
        _check_rate(mask_rate)
        masked = masked_positions(batch_size, seq_len, mask_rate)
    if not 0 <= masked <= batch_size * seq_len:
        raise InputError(f"masked must be between 0 and B × T = {batch_size * seq_len}, got {masked}.")
    per = BYTES_PER_VALUE[dtype]
    full_values = batch_size * seq_len * vocab_size
    gathered_values = masked * vocab_size
    return {
        "batch_size": batch_size, "seq_len": seq_len, "vocab_size": vocab_size, "masked": masked,
        "dtype": dtype, "bytes_per_value": per,
        "full_values": full_values, "gathered_values": gathered_values,
        "full_bytes": full_values * per, "gathered_bytes": gathered_values * per,
        "ratio": full_values / gathered_values if gathered_values else math.inf,
    }


# --------------------------------------------------------------------------------------------
# Memory a measurement holds at once: what a server checks before it runs one
# --------------------------------------------------------------------------------------------

LOSS_PATH_COPIES = 3.5  # (B·T, V) fp32 tensors at once: log-softmax, its gradient, the scores' gradient, and slack
STEP_BYTES_PER_PARAMETER = 28  # the private copy, its gradients, AdamW's two moments, foreach temporaries (fp32)
SCORE_COPIES = 3  # (M, V) scores, their softmax and their gradient in a training step


def loss_paths_bytes(batch_size: int, seq_len: int, vocab_size: int) -> int:
    """About the most the Efficiency page's three loss paths hold at once: ``LOSS_PATH_COPIES`` full (B·T, V)
    fp32 tensors (the vectorised path: the scores are dropped once their log-softmax exists, the backward
    pass then holds that log-softmax, its gradient and the scores' gradient). Checked against measured
    peaks in ``tests/test_memory_budget.py``.

    >>> round(loss_paths_bytes(16, 128, 30522) / 2**20)  # MiB: the page's widest batch, BERT's vocabulary
    835
    """
    _check_whole(batch_size=batch_size, sequence_length=seq_len, vocabulary_size=vocab_size)
    return int(LOSS_PATH_COPIES * batch_size * seq_len * vocab_size * BYTES_PER_VALUE["fp32"])


# (M, V) fp32 tensors the Loss page and the Bug museum hold at once, K sweep up to V included, on a fresh server (the
# first sweep's kernels and caches count): 12.9 measured at M = 496, V = 30,522 (tests/memory_clicks.py loss_page)
LOSS_PAGE_COPIES = 14


def loss_page_bytes(masked: int, vocab_size: int) -> int:
    """About the most the Loss page (and the Bug museum, on the same batch) holds at once: ``LOSS_PAGE_COPIES``
    (M, V) fp32 tensors (the scores, three losses and their softmaxes, the gradients, a sampled softmax with
    K = V drawn from the full softmax). Checked against measured peaks in ``tests/test_memory_budget.py``.

    >>> round(loss_page_bytes(496, 30522) / 2**20)  # MiB: 8 sentences of 64 tokens, every one selected
    809
    """
    _check_whole(vocabulary_size=vocab_size)
    return int(LOSS_PAGE_COPIES * max(0, int(masked)) * vocab_size * BYTES_PER_VALUE["fp32"])


def train_step_bytes(config, *, batch_size: int, seq_len: int, masked: int) -> int:
    """About the most one measured training step holds beyond the model it copies (fp32, no checkpointing).

    ``STEP_BYTES_PER_PARAMETER`` per parameter (a private copy, its gradients, AdamW's two moments and the
    temporaries of its foreach update), what autograd keeps per token and layer with the gradients flowing
    back through it (about ``40·H + 6·I`` values, plus ``6·heads·T`` for attention scores; the largest of the
    five set-ups, bf16 and checkpointing included, fitted to the default model's measured peaks), and
    ``SCORE_COPIES`` (M, V) tensors for the head. Checked against measured peaks in
    ``tests/test_memory_budget.py``.

    >>> from transformers import BertConfig
    >>> small = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
    ...                    intermediate_size=1536)
    >>> round(train_step_bytes(small, batch_size=8, seq_len=64, masked=77) / 2**20)  # MiB: the default model's shape
    976
    """
    _check_whole(batch_size=batch_size, sequence_length=seq_len)
    params = estimate_parameters(config)
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "dim", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", 0) or 0)
    inner = int(getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 0) or 4 * hidden)
    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", 0) or 1)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    per_token_layer = 40 * hidden + 6 * inner + 6 * heads * seq_len
    activations = batch_size * seq_len * layers * per_token_layer * BYTES_PER_VALUE["fp32"]
    scores = SCORE_COPIES * max(0, int(masked)) * vocab * BYTES_PER_VALUE["fp32"]
    return int(STEP_BYTES_PER_PARAMETER * params + activations + scores)


def _shape(config) -> tuple[int, int, int, int, int]:
    """(H, L, I, heads, V) of a model config, under BERT's or DistilBERT's names."""
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "dim", 0) or 0)
    layers = int(getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", 0) or 0)
    inner = int(getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 0) or 4 * hidden)
    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "n_heads", 0) or 1)
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    return hidden, layers, inner, heads, vocab


# A training run (the Training page's jobs.Run): what it holds at once, checked before it starts. Fitted to the
# bundled model's measured peaks (tests/memory_runs.py: 25 runs, 1-3 variants, batch 8-32, sequences 64-256,
# masked share 5-100%, with and without checkpointing) and kept above every one of them.
RUN_BYTES_PER_PARAMETER = 16  # each variant's copy, its gradients and AdamW's two moments, held for the whole run
UPDATE_BYTES_PER_PARAMETER = 4  # the AdamW update's and the clipping's temporaries, one variant at a time
RUN_FIXED_BYTES = 64 * 2**20  # the run's tokenizer copy, its chunks, the frozen held-out masks, the batches in flight
# (M, V) fp32 tensors of a run's step: scores, log-softmax, their gradient, allocator slack (3.7 measured on a tiny
# model with a 50,000-token vocabulary, where the scores are nearly all of it)
RUN_SCORE_COPIES = 4.0
TEXT_BYTES_PER_CHAR = 70  # a run's training text as Python strings, encodings and chunks: a 5 MB upload held ~330 MB
EVAL_SCORE_COPIES = 3  # (M, V) scores, their log-softmax and softmax in an evaluation (no gradients)


def kept_values_per_token(config, seq_len: int, *, checkpointing: bool) -> int:
    """fp32 values autograd keeps per token of a micro-batch until the backward pass: per layer about
    ``12·H + 3·I`` (the projections' inputs and outputs, the feed-forward's, the layer norms', dropout's masks)
    and ``3·heads·T`` (attention scores, their softmax, its dropout); with gradient checkpointing, each layer's
    input and one layer recomputed at a time.

    >>> from transformers import BertConfig
    >>> tiny = BertConfig(hidden_size=4, num_hidden_layers=2, num_attention_heads=2, intermediate_size=8)
    >>> kept_values_per_token(tiny, 16, checkpointing=False), kept_values_per_token(tiny, 16, checkpointing=True)
    (336, 176)
    """
    hidden, layers, inner, heads, _ = _shape(config)
    layer = 12 * hidden + 3 * inner + 3 * heads * seq_len
    return layers * hidden + layer if checkpointing else layers * layer


def masked_share(cfg, focus_share: float = 0.0) -> float:
    """The share of a batch's tokens a variant's loss reads (M / (B·T)), an upper bound: the rule's p, the
    facts' words at their own share (``focus_share`` of the tokens are facts' words), every token when the
    labels bug leaves none ignored.

    >>> from mlm_core.training import TrainConfig
    >>> masked_share(TrainConfig(focus_mlm_probability=0.7), focus_share=0.1)  # 0.15 + 0.1 x (0.7 - 0.15)
    0.205
    >>> masked_share(TrainConfig(bug="labels_never_ignored"))
    1.0
    """
    if cfg.bug == "labels_never_ignored":
        return 1.0
    p = cfg.masking.mlm_probability
    return round(p + focus_share * max(0.0, cfg.focus_mlm_probability - p), 6)


def run_step_bytes(config, cfg, *, focus_share: float = 0.0) -> int:
    """About the most one variant's training step holds beyond the run's weights and optimizer state: what
    autograd keeps for one micro-batch (``kept_values_per_token``) and ``RUN_SCORE_COPIES`` (M, V) scores (M, K + 1
    for the sampled softmax)."""
    *_, vocab = _shape(config)
    tokens = max(1, cfg.batch_size // cfg.grad_accum_steps) * cfg.seq_len
    masked = math.ceil(tokens * masked_share(cfg, focus_share))
    classes = loss_registry.get(cfg.loss).scored_classes(cfg, vocab)  # V, or 1 + K for the sampled softmax
    kept = kept_values_per_token(config, cfg.seq_len, checkpointing=cfg.gradient_checkpointing)
    return int((tokens * kept + RUN_SCORE_COPIES * masked * classes) * BYTES_PER_VALUE["fp32"])


def run_eval_bytes(config, cfg) -> int:
    """About the most an evaluation holds: a micro-batch's (M, V) scores at the held-out rule's masked share,
    ``EVAL_SCORE_COPIES`` times (no gradients: the encoder's activations are freed layer by layer)."""
    *_, vocab = _shape(config)
    tokens = max(1, cfg.batch_size // cfg.grad_accum_steps) * cfg.seq_len
    masked = math.ceil(tokens * cfg.held_out_masking.mlm_probability)
    return int(EVAL_SCORE_COPIES * masked * vocab * BYTES_PER_VALUE["fp32"])


def run_bytes(config, variants, *, params: int | None = None, focus_share: float = 0.0, text_chars: int = 0) -> int:
    """About the most a training run holds at once beyond the model it copies: every variant's copy with its
    gradients and AdamW's moments (``RUN_BYTES_PER_PARAMETER``), the update's temporaries
    (``UPDATE_BYTES_PER_PARAMETER``), ``RUN_FIXED_BYTES``, ``TEXT_BYTES_PER_CHAR`` for each character of its text
    (``text_chars``), and the largest step (``run_step_bytes``) or evaluation (``run_eval_bytes``) of any variant
    (variants step one after the other). ``params``: the model's own count (default: from ``config``). Checked against measured peaks in
    ``tests/test_memory_budget.py``; ``jobs.RunManager.submit`` refuses a run above ``MLMLAB_RUN_MB``.

    >>> from transformers import BertConfig
    >>> from mlm_core.training import TrainConfig
    >>> small = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
    ...                    intermediate_size=1536)
    >>> round(run_bytes(small, {"run": TrainConfig(batch_size=8, seq_len=64)}) / 2**20)  # MiB: one default run
    669
    """
    params = estimate_parameters(config) if params is None else int(params)
    configs = list(variants.values())
    transient = max(max(run_step_bytes(config, c, focus_share=focus_share), run_eval_bytes(config, c))
                    for c in configs)
    return int((RUN_BYTES_PER_PARAMETER * len(configs) + UPDATE_BYTES_PER_PARAMETER) * params
               + RUN_FIXED_BYTES + TEXT_BYTES_PER_CHAR * max(0, int(text_chars)) + transient)


# --------------------------------------------------------------------------------------------
# What V costs the head (the Tokenizer page)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadCost:
    """What V costs the MLM head for one batch: the decoder is an (H → V) matmul per position.

    Forward FLOPs only (a multiply-add counts 2; backward is about twice more). The H→H transform
    before the decoder does not depend on V and is left out. ``with_vocab(v)`` is the same batch
    with another vocabulary (the chart's lines).
    """

    vocab_size: int
    hidden_size: int
    batch_size: int
    seq_len: int
    masked_positions: int  # M = masked_positions(B, T, mlm_probability)
    bytes_per_value: int

    @property
    def flops_per_position(self) -> int:
        return head_flops_per_row(self.hidden_size, self.vocab_size, transform=False)

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
    def start_loss(self) -> float:
        """ln V: the cross-entropy of a model that has not learnt anything yet (uniform guess)."""
        return math.log(self.vocab_size)

    def with_vocab(self, vocab_size: int) -> HeadCost:
        """The same batch and hidden size with a vocabulary of ``vocab_size``."""
        _check_whole(vocabulary_size=vocab_size)
        return replace(self, vocab_size=vocab_size)


def head_cost(
    vocab_size: int,
    *,
    hidden_size: int = 768,
    batch_size: int = 32,
    seq_len: int = 128,
    mlm_probability: float = MASK_RATE,
    bytes_per_value: int = 4,
) -> HeadCost:
    """The head's cost for a vocabulary of ``vocab_size`` (defaults: bert-base, B=32, T=128, fp32).

    >>> c = head_cost(30522)
    >>> c.flops_per_position, c.masked_positions, round(c.logits_bytes_full / 2**20)
    (46881792, 614, 477)
    """
    _check_whole(vocabulary_size=vocab_size, hidden_size=hidden_size, batch_size=batch_size, sequence_length=seq_len)
    _check_rate(mlm_probability)
    masked = masked_positions(batch_size, seq_len, mlm_probability)
    return HeadCost(vocab_size, hidden_size, batch_size, seq_len, masked, bytes_per_value)


# --------------------------------------------------------------------------------------------
# FLOPs of a whole training step, and what the gathered head saves, ideally
# --------------------------------------------------------------------------------------------


def bert_step_flops(*, hidden: int, layers: int, intermediate: int, vocab: int, seq_len: int,
                    tokens: float, head_rows: float) -> dict[str, float]:
    """Matrix-multiply FLOPs of one training step (forward + backward ≈ 3 × forward) of a BERT MLM.

    The encoder runs on all ``tokens`` (``encoder_flops_per_token`` per layer); the head on
    ``head_rows`` of them (``head_flops_per_row``: all of them for Hugging Face's ``labels=`` path,
    M for the gathered one). ``tokens`` and ``head_rows`` may be averages over batches.

    >>> f = bert_step_flops(hidden=2, layers=1, intermediate=4, vocab=10, seq_len=3, tokens=3, head_rows=1)
    >>> f["encoder"], f["head"]
    (792.0, 144.0)
    """
    encoder = 3.0 * layers * encoder_flops_per_token(hidden, intermediate, seq_len) * tokens
    head = 3.0 * head_flops_per_row(hidden, vocab) * head_rows
    return {"encoder": encoder, "head": head, "total": encoder + head}


def config_step_flops(config, *, seq_len: int, tokens: float, head_rows: float) -> dict[str, float]:
    """``bert_step_flops`` with the sizes read from a model config (BERT's names; I defaults to 4·H)."""
    return bert_step_flops(hidden=config.hidden_size, layers=config.num_hidden_layers,
                           intermediate=getattr(config, "intermediate_size", 4 * config.hidden_size),
                           vocab=config.vocab_size, seq_len=seq_len, tokens=tokens, head_rows=head_rows)


def ideal_step_speedup(config, *, seq_len: int, batch_size: int, masked: int) -> float:
    """FLOPs of a step with the head at every position over FLOPs with the head on the M masked rows."""
    tokens = batch_size * seq_len
    full = config_step_flops(config, seq_len=seq_len, tokens=tokens, head_rows=tokens)["total"]
    gathered = config_step_flops(config, seq_len=seq_len, tokens=tokens, head_rows=masked)["total"]
    return full / gathered


# --------------------------------------------------------------------------------------------
# The matrix multiplies of a step, one by one (the MFU numerator; ``measure.gemm_timer`` times them)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """One matrix multiply of a training step: ``batch`` products of (m × k) @ (k × n), ``count`` times a step.

    ``a_transposed`` / ``b_transposed``: that operand is a transposed view, as autograd hands it
    over (a weight gradient multiplies by Xᵀ; a forward ``linear`` by Wᵀ).

    >>> Gemm("toy", 2, 3, 4, count=5).flops
    240.0
    """

    what: str
    m: int
    k: int
    n: int
    batch: int = 1
    count: int = 1
    a_transposed: bool = False
    b_transposed: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n * self.count


def _linear_gemms(what: str, rows: int, fan_in: int, fan_out: int, count: int, weight_grad: bool = True) -> list[Gemm]:
    """A linear layer's three products: forward X·Wᵀ, input gradient dY·W, weight gradient dYᵀ·X."""
    out = [Gemm(f"{what}: forward", rows, fan_in, fan_out, count=count, b_transposed=True),
           Gemm(f"{what}: input gradient", rows, fan_out, fan_in, count=count)]
    if weight_grad:
        out.append(Gemm(f"{what}: weight gradient", fan_out, rows, fan_in, count=count, a_transposed=True))
    return out


def step_gemms(config, *, batch_size: int, seq_len: int, masked: int,
               word_embeddings_trained: bool = True) -> list[Gemm]:
    """Every matrix multiply of one BERT-style training step (encoder on B·T tokens, head on M rows).

    Per layer: the Q, K, V and output projections and the two feed-forward layers (three products
    each: forward, input gradient, weight gradient), and attention's Q·Kᵀ and P·V per head
    (three each). The head: its transform and the decoder onto the vocabulary, on the M selected
    rows; with frozen word embeddings (tied to the decoder) the decoder's weight gradient is not
    computed. Their FLOPs add up to ``bert_step_flops`` (checked here and in the tests).

    >>> from transformers import BertConfig
    >>> g = step_gemms(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                intermediate_size=16, vocab_size=50), batch_size=2, seq_len=4, masked=3)
    >>> len(g), sum(x.flops for x in g) == bert_step_flops(hidden=8, layers=1, intermediate=16, vocab=50,
    ...                                                     seq_len=4, tokens=8, head_rows=3)["total"]
    (21, True)
    """
    names = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size", "num_attention_heads")
    if any(not isinstance(getattr(config, n, None), int) for n in names) or \
            getattr(config, "embedding_size", config.hidden_size) != config.hidden_size:
        raise InputError(f"{type(config).__name__} is not BERT-shaped (hidden_size, num_hidden_layers, "
                         "intermediate_size, num_attention_heads): its matrix multiplies are not listed here.")
    H, L, I, V = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    heads = config.num_attention_heads
    d, N, T = H // heads, batch_size * seq_len, seq_len
    g = (_linear_gemms("attention Q, K, V and output projections", N, H, H, 4 * L)
         + _linear_gemms("feed-forward in", N, H, I, L) + _linear_gemms("feed-forward out", N, I, H, L))
    bh = batch_size * heads
    g += [Gemm("attention scores Q·Kᵀ: forward", T, d, T, batch=bh, count=L, b_transposed=True),
          Gemm("attention scores: gradient of Q", T, T, d, batch=bh, count=L),
          Gemm("attention scores: gradient of K", T, T, d, batch=bh, count=L, a_transposed=True),
          Gemm("attention mix P·V: forward", T, T, d, batch=bh, count=L),
          Gemm("attention mix: gradient of P", T, d, T, batch=bh, count=L, b_transposed=True),
          Gemm("attention mix: gradient of V", T, T, d, batch=bh, count=L, a_transposed=True)]
    g += _linear_gemms("head transform", masked, H, H, 1)
    g += _linear_gemms("decoder onto the vocabulary", masked, H, V, 1, weight_grad=word_embeddings_trained)
    return [x for x in g if x.m and x.k and x.n]
