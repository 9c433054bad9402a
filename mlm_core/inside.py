"""Inside the model: where a masked position looks, how its guess forms layer by layer, what it depends on.

Three views of one position of one sentence (a [MASK] by default), each a plain function that
returns tensors in a frozen dataclass:

- ``attention_from``: the attention weights from the position to every token, every layer and
  head, (L, H, T);
- ``logit_lens``: the model's own MLM head applied to the position's hidden state after every
  layer, (L+1, K) (nostalgebraist's "logit lens", 2020);
- ``saliency``: gradient × input and leave-one-out, (T,), and how far they agree.

``lens_profile`` summarises the lens over many masked positions. What the Inside page makes of
these views (head patterns, agreement over many sentences, a trained copy beside its base model)
is ``mlm_core.lessons.inside``.

Attention weights and many sessions. Hugging Face models pick their attention function on every
forward from ``model.config._attn_implementation`` (transformers 5.24,
``ALL_ATTENTION_FUNCTIONS.get_interface`` in every ``*SelfAttention.forward``); "sdpa", the default,
returns no weights (``sdpa_attention_forward`` only warns when ``output_attentions=True``). The
config is shared by every session using the cached model, so switching it to "eager" would change
what other sessions run while we run. Instead, ``attention_maps`` runs the unchanged SDPA forward
inside a ``torch.overrides.TorchFunctionMode`` that sees each call of
``F.scaled_dot_product_attention`` (query, key, mask, scale, exactly as SDPA gets them) and
computes the weights the way PyTorch documents SDPA: softmax(q kᵀ · scale + mask). Torch function
modes live on a per-thread stack, so other threads (other sessions) never enter it, and the model,
its config and its hooks stay as they are. A model loaded with ``attn_implementation="eager"``
returns its weights itself (``output_attentions=True``, which transformers records per call
through a ``ContextVar``).

Shapes: B = batch, L = layers, H = heads, T = tokens, E = embedding size, V = vocabulary,
K = top-k, P = patterns.

>>> from mlm_core.models import tiny_random_masked_lm
>>> model, tokenizer = tiny_random_masked_lm()
>>> ids = torch.tensor([101, 1996, 103, 2938, 1012, 102])
>>> attention = attention_from(model, tokenizer, ids, None, position=2)
>>> tuple(attention.weights.shape)  # (L, H, T)
(2, 2, 6)
>>> round(float(attention.weights.sum(-1).min()), 4)  # every row is a distribution
1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from mlm_core.errors import InputError
from mlm_core.head import SCORES_AT_ONCE, head_parts, masked_lm_logits
from mlm_core.masking import IGNORE_INDEX

__all__ = [
    "AttentionUnavailable",
    "LensUnavailable",
    "attention_maps",
    "PositionAttention",
    "attention_from",
    "one_sentence",
    "check_position",
    "layer_count",
    "LogitLens",
    "logit_lens",
    "LensProfile",
    "lens_profile",
    "gradient_x_input",
    "leave_one_out",
    "GradientSaliency",
    "gradient_saliency",
    "special_positions",
    "Saliency",
    "saliency",
    "agreement_tau",
    "kendall_tau",
    "layer_agreement",
]

MAX_TOKENS = 128  # one sentence; leave-one-out runs T forward rows, so keep it a sentence
LOO_CHUNK = 64  # leave-one-out rows per forward pass: bounds memory for long sentences


class AttentionUnavailable(InputError):
    """This model's attention implementation gives no weights we can read (e.g. flash attention)."""


class LensUnavailable(InputError):
    """The logit lens needs a head split into transform and projection, known for four families."""


# --------------------------------------------------------------------------- attention, per call
def _sdpa_weights(query, key, value=None, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False) -> torch.Tensor:
    """The weights ``F.scaled_dot_product_attention`` applies, (B, H, Tq, Tk), in fp32.

    PyTorch's reference for SDPA (its docstring): bias from ``is_causal`` and ``attn_mask`` (bool:
    True = may attend; float: added), softmax(q kᵀ · scale + bias). Dropout is not applied (eval).
    """
    query, key = query.float(), key.float()
    if enable_gqa:  # grouped-query attention: each key head serves several query heads
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale  # (B, H, Tq, Tk)
    if is_causal:
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    return scores.softmax(-1).nan_to_num(0.0)  # a row with nothing to attend to: all zeros


class _SDPARecorder(TorchFunctionMode):
    """Inside ``with``: every ``F.scaled_dot_product_attention`` call of THIS thread also records its weights.

    The call itself runs unchanged (same kernel, same output); the weights are computed beside it.
    """

    def __init__(self):
        super().__init__()
        self.weights: list[torch.Tensor] = []  # one (B, H, T, T) per call, in call order (= layer order)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            with torch.no_grad():
                self.weights.append(_sdpa_weights(*args, **kwargs))
        return func(*args, **kwargs)


def layer_count(model: nn.Module) -> int | None:
    """The encoder's layer count from the config (BERT's ``num_hidden_layers``, DistilBERT's ``n_layers``)."""
    config = model.config
    return getattr(config, "num_hidden_layers", None) or getattr(config, "n_layers", None)


def _forward_inside(model: nn.Module, input_ids, attention_mask) -> torch.Tensor:
    """One encoder forward that records every attention map: (B, L, H, T, T) fp32 on the CPU."""
    implementation = getattr(model.config, "_attn_implementation", None) or "eager"
    device = model.device
    kwargs = dict(input_ids=input_ids.to(device),
                  attention_mask=None if attention_mask is None else torch.as_tensor(attention_mask).to(device))
    with torch.no_grad():
        if implementation == "eager":  # the model returns its weights itself, recorded per call
            out = model.base_model(**kwargs, output_attentions=True)
            maps = list(out.attentions or ())
        elif implementation == "sdpa":
            recorder = _SDPARecorder()
            with recorder:
                out = model.base_model(**kwargs)
            maps = recorder.weights
        else:
            raise AttentionUnavailable(
                f"This model runs {implementation!r} attention, which gives no attention weights to show. "
                "Load it with attn_implementation='sdpa' or 'eager' to see them.")
    layers = layer_count(model)
    if not maps or (layers is not None and len(maps) != layers):
        raise AttentionUnavailable(
            f"{type(model).__name__} gave {len(maps)} attention maps for {layers} layers: its attention "
            "does not go through PyTorch's scaled_dot_product_attention, so its weights cannot be read here.")
    return torch.stack([m.float().cpu() for m in maps], dim=1)  # (B, L, H, T, T)


def attention_maps(model: nn.Module, input_ids, attention_mask=None) -> torch.Tensor:
    """Every layer's and head's attention weights, (B, L, H, T, T) fp32: row i = where token i looks.

    Thread-safe on a shared model: nothing on the model, its config or its hooks changes (see the
    module docstring). Raises ``AttentionUnavailable`` for implementations without weights.
    """
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:  # one sentence (T,) -> a batch of one (1, T)
        input_ids = input_ids[None]
        attention_mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(1, -1)
    return _forward_inside(model, input_ids, attention_mask)


@dataclass(frozen=True)
class PositionAttention:
    """Where one position looks: its attention row in every layer and head."""

    position: int
    tokens: tuple[str, ...]  # the T tokens the model saw
    weights: torch.Tensor  # (L, H, T): from ``position`` to every token; each (layer, head) row sums to 1

    @property
    def layer_mean(self) -> torch.Tensor:
        """(L, T): the average over the heads of each layer."""
        return self.weights.mean(1)

    def top(self, layer: int, head: int, n: int = 3) -> list[tuple[int, str, float]]:
        """The ``n`` tokens head (layer, head) attends to most: (position, token, weight), largest first."""
        row = self.weights[layer, head]  # (T,)
        values, index = row.topk(min(n, row.numel()))
        return [(int(i), self.tokens[int(i)], float(v)) for v, i in zip(values, index)]


def one_sentence(input_ids, attention_mask):
    """One sentence as (T,) ids and (T,) mask or None; refuses an empty one or one over ``MAX_TOKENS``."""
    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    if ids.numel() == 0:
        raise InputError("The sentence has no tokens.")
    if ids.numel() > MAX_TOKENS:
        raise InputError(f"Inside the model looks at one sentence of at most {MAX_TOKENS} tokens; "
                         f"this one has {ids.numel()}.")
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(-1)  # (T,)
    return ids, mask


def check_position(position: int, length: int) -> int:
    """``position`` as an int, refused when it lies outside a sentence of ``length`` tokens."""
    if not 0 <= int(position) < length:
        raise InputError(f"Position {position} is outside the sentence (it has {length} tokens).")
    return int(position)


def attention_from(model: nn.Module, tokenizer, input_ids, attention_mask, position: int) -> PositionAttention:
    """The attention from ``position`` to every token of one sentence (T,), every layer and head: (L, H, T)."""
    ids, mask = one_sentence(input_ids, attention_mask)
    position = check_position(position, ids.numel())
    maps = _forward_inside(model, ids[None], None if mask is None else mask[None])  # (1, L, H, T, T)
    return PositionAttention(position, tuple(tokenizer.convert_ids_to_tokens(ids.tolist())), maps[0, :, :, position])




# --------------------------------------------------------------------------- the logit lens
@dataclass(frozen=True)
class LogitLens:
    """The MLM head read off one position after every layer: row 0 = the embeddings, row l = after layer l."""

    position: int
    true_id: int | None
    true_token: str | None
    top_ids: torch.Tensor  # (L+1, K)
    top_probs: torch.Tensor  # (L+1, K)
    top_tokens: tuple[tuple[str, ...], ...]  # (L+1) x K
    true_prob: torch.Tensor  # (L+1,) p(true token) at each depth (NaN without a true token)
    true_rank: torch.Tensor  # (L+1,) 1 = the head's first choice
    entropy: torch.Tensor  # (L+1,) nats

    @property
    def depth_labels(self) -> tuple[str, ...]:
        return ("embeddings",) + tuple(f"layer {i}" for i in range(1, self.top_ids.shape[0]))

    @property
    def first_top1(self) -> int | None:
        """The first depth from which the true token stays the first choice to the last layer (None: never)."""
        if self.true_id is None:
            return None
        first = None
        for depth in range(self.true_rank.numel() - 1, -1, -1):
            if int(self.true_rank[depth]) != 1:
                break
            first = depth
        return first

    def records(self) -> list[dict]:
        return [{"depth": label, "top": " ".join(self.top_tokens[d]),
                 "p_top1": float(self.top_probs[d, 0]), "true_rank": int(self.true_rank[d]),
                 "p_true": float(self.true_prob[d]), "entropy": float(self.entropy[d])}
                for d, label in enumerate(self.depth_labels)]


def logit_lens(model: nn.Module, tokenizer, input_ids, attention_mask, position: int, true_id: int | None = None,
               *, k: int = 5) -> LogitLens:
    """The model's own MLM head (transform + projection) on ``position``'s hidden state after every layer.

    The head was trained only on the last layer's output, so earlier rows read it through a lens it
    never saw: an approximation that shows when the answer becomes readable, not what the layer
    "thinks". The last row equals ``predict_masked``. Raises ``LensUnavailable`` for heads
    ``mlm_core.head.head_parts`` does not know (it needs the head split into its parts).
    """
    head = head_parts(model)
    if head is None:
        raise LensUnavailable(
            f"The logit lens is not available for {type(model).__name__}: it needs the MLM head split into its "
            "transform and its output projection, which MLM Lab knows for BERT, DistilBERT, RoBERTa and ALBERT.")
    ids, mask = one_sentence(input_ids, attention_mask)
    position = check_position(position, ids.numel())
    device = model.device
    with torch.no_grad():
        out = model.base_model(input_ids=ids[None].to(device),
                               attention_mask=None if mask is None else mask[None].to(device),
                               output_hidden_states=True)
        rows = torch.stack([h[0, position] for h in out.hidden_states])  # (L+1, H)
        log_probs = F.log_softmax(head.decoder(head.transform(rows)).float(), dim=-1).cpu()  # (L+1, V)
    return _lens_result(log_probs, position, true_id, tokenizer, k)


def _lens_result(log_probs: torch.Tensor, position: int, true_id: int | None, tokenizer, k: int) -> LogitLens:
    probs = log_probs.exp()  # (L+1, V)
    k = max(1, min(int(k), probs.shape[-1]))
    top_probs, top_ids = probs.topk(k, dim=-1)  # (L+1, K)
    entropy = -(probs * log_probs).nan_to_num().sum(-1)  # (L+1,)
    if true_id is not None:
        true_log = log_probs[:, int(true_id)]  # (L+1,)
        true_prob = true_log.exp()
        true_rank = (log_probs > true_log[:, None]).sum(-1) + 1  # (L+1,) ties in the true token's favour
    else:
        true_prob = torch.full((probs.shape[0],), float("nan"))
        true_rank = torch.zeros(probs.shape[0], dtype=torch.long)
    return LogitLens(
        position=position, true_id=None if true_id is None else int(true_id),
        true_token=None if true_id is None else tokenizer.convert_ids_to_tokens(int(true_id)),
        top_ids=top_ids, top_probs=top_probs,
        top_tokens=tuple(tuple(tokenizer.convert_ids_to_tokens(row)) for row in top_ids.tolist()),
        true_prob=true_prob, true_rank=true_rank, entropy=entropy,
    )


@dataclass(frozen=True)
class LensProfile:
    """The logit lens over many masked positions: how often the head, read at each depth, gets the answer."""

    top1: torch.Tensor  # (L+1,) share of positions whose true token is the first guess at that depth
    top5: torch.Tensor  # (L+1,) ... among the first five
    mean_log_prob: torch.Tensor  # (L+1,) mean log p(true token)
    positions: int  # M, the masked positions averaged over

    @property
    def depth_labels(self) -> tuple[str, ...]:
        return ("embeddings",) + tuple(f"layer {i}" for i in range(1, self.top1.numel()))

    def records(self) -> list[dict]:
        return [{"depth": label, "top1": float(self.top1[d]), "top5": float(self.top5[d]),
                 "mean_log_prob": float(self.mean_log_prob[d])} for d, label in enumerate(self.depth_labels)]


def lens_profile(model: nn.Module, input_ids, attention_mask, labels) -> LensProfile:
    """The logit lens at every position where ``labels != IGNORE_INDEX`` of a batch (B, T), summarised per depth.

    One encoder pass with every hidden state; the head on the M selected rows at each depth.
    Raises ``LensUnavailable`` for heads ``head_parts`` does not know.
    """
    head = head_parts(model)
    if head is None:
        raise LensUnavailable(f"The logit lens is not available for {type(model).__name__}.")
    device = model.device
    labels = torch.as_tensor(labels)
    selected = labels.reshape(-1) != IGNORE_INDEX  # (B*T,)
    targets = labels.reshape(-1)[selected].to(device)  # (M,)
    top1, top5, mean_lp = [], [], []
    with torch.no_grad():
        out = model.base_model(input_ids=torch.as_tensor(input_ids).to(device),
                               attention_mask=None if attention_mask is None else torch.as_tensor(attention_mask).to(device),
                               output_hidden_states=True)
        chunk = max(1, SCORES_AT_ONCE // head.decoder.weight.shape[0])  # rows scored at once: (chunk, V) stays small
        for states in out.hidden_states:  # (B, T, H) at each depth
            rows = states.reshape(-1, states.shape[-1])[selected.to(device)]  # (M, H)
            # filled chunk by chunk: nothing small is kept between the chunks' large scores (see head.SCORES_AT_ONCE)
            true = torch.empty(rows.shape[0], 1, device=device)  # (M, 1)
            rank = torch.empty(rows.shape[0], dtype=torch.long, device=device)  # (M,)
            for start in range(0, rows.shape[0], chunk):
                log_probs = F.log_softmax(head.decoder(head.transform(rows[start:start + chunk])).float(), dim=-1)
                true[start:start + chunk] = log_probs.gather(1, targets[start:start + chunk, None])  # (chunk, 1)
                rank[start:start + chunk] = (log_probs > true[start:start + chunk]).sum(-1) + 1  # (chunk,)
                del log_probs
            top1.append((rank == 1).float().mean())
            top5.append((rank <= 5).float().mean())
            mean_lp.append(true.mean())
    return LensProfile(torch.stack(top1).cpu(), torch.stack(top5).cpu(), torch.stack(mean_lp).cpu(), int(targets.numel()))



# --------------------------------------------------------------------------- saliency
def gradient_x_input(score_fn: Callable[[torch.Tensor], torch.Tensor], embeds: torch.Tensor,
                     baseline: torch.Tensor | None = None) -> torch.Tensor:
    """Gradient × (input − baseline), summed over the embedding: one number per token, (T,).

    ``score_fn`` maps embeddings (T, E) to a scalar. ``torch.autograd.grad`` asks for the gradient
    of ``embeds`` only, so no parameter's ``.grad`` is written (the model may be shared).

    >>> w = torch.tensor([[1.0, 2.0], [0.5, -1.0]])  # a linear score: sum of w * x
    >>> x = torch.tensor([[3.0, 1.0], [2.0, 2.0]])
    >>> gradient_x_input(lambda e: (w * e).sum(), x).tolist()
    [5.0, -1.0]
    """
    _, grad = _input_gradient(score_fn, embeds)
    delta = embeds.detach() if baseline is None else embeds.detach() - baseline
    return (grad * delta).sum(-1).float().cpu()


def _input_gradient(score_fn, embeds: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(score, d score / d embeds (T, E)), without touching any parameter's ``.grad``."""
    embeds = embeds.detach().requires_grad_(True)
    with torch.enable_grad():
        score = score_fn(embeds)
        (grad,) = torch.autograd.grad(score, embeds)
    return float(score.detach()), grad.detach()


def _log_prob_fn(model: nn.Module, attention_mask, position: int, true_id: int):
    """score(embeds (T, E)) = log p(true_id) at ``position``, through the gathered head where known."""
    head = head_parts(model)
    mask = None if attention_mask is None else attention_mask[None].to(model.device)

    def score(embeds: torch.Tensor) -> torch.Tensor:
        if head is not None:
            states = model.base_model(inputs_embeds=embeds[None], attention_mask=mask)[0]  # (1, T, H)
            logits = head.decoder(head.transform(states[0, position]))  # (V,)
        else:
            logits = model(inputs_embeds=embeds[None], attention_mask=mask).logits[0, position]  # (V,)
        return F.log_softmax(logits.float(), dim=-1)[true_id]

    return score


def leave_one_out(model: nn.Module, tokenizer, input_ids, attention_mask, position: int, true_id: int,
                  skip: Sequence[int] = ()) -> torch.Tensor:
    """log p(true | sentence) − log p(true | sentence with token j replaced by [MASK]), for every j: (T,).

    Positive: hiding token j makes the true token less likely, so the guess used it. NaN at
    ``position`` itself and at ``skip`` (special tokens). Tokens already [MASK] score 0. All rows in
    one batched forward (chunks of ``LOO_CHUNK``), the head on the one position only.
    """
    ids, mask = one_sentence(input_ids, attention_mask)
    position = check_position(position, ids.numel())
    T = ids.numel()
    measured = [j for j in range(T) if j != position and j not in set(skip) and (mask is None or int(mask[j]) == 1)]
    already = [j for j in measured if int(ids[j]) == tokenizer.mask_token_id]  # masking them again changes nothing
    candidates = [j for j in measured if j not in already]
    rows = ids[None].repeat(len(candidates) + 1, 1)  # (R, T): row 0 = the sentence as it is
    for r, j in enumerate(candidates, start=1):
        rows[r, j] = tokenizer.mask_token_id
    labels = torch.full_like(rows, IGNORE_INDEX)
    labels[:, position] = int(true_id)
    row_mask = None if mask is None else mask[None].expand_as(rows)
    log_p = []
    with torch.inference_mode():
        for start in range(0, rows.shape[0], LOO_CHUNK):
            part = slice(start, start + LOO_CHUNK)
            logits, targets = masked_lm_logits(model, rows[part], None if row_mask is None else row_mask[part],
                                               labels[part])  # (r, V), (r,)
            log_p.append(F.log_softmax(logits.float(), -1).gather(1, targets[:, None]).squeeze(1).cpu())
    log_p = torch.cat(log_p)  # (R,)
    result = torch.full((T,), float("nan"))
    result[already] = 0.0
    result[candidates] = log_p[0] - log_p[1:]
    return result


def kendall_tau(a: torch.Tensor, b: torch.Tensor) -> float:
    """Kendall's τ-b between two 1-D tensors, over the entries where both are finite (NaN: < 2 such, or constant).

    The rank correlation Jain & Wallace (2019, §4.1) use to compare attention with feature importance; they rank
    magnitudes (``agreement_tau``), this function ranks whatever it is given.

    >>> kendall_tau(torch.tensor([1., 2., 3., 4.]), torch.tensor([10., 20., 30., 40.]))
    1.0
    >>> kendall_tau(torch.tensor([1., 2., 3.]), torch.tensor([3., 2., 1.]))
    -1.0
    """
    a, b = torch.as_tensor(a).double().reshape(-1), torch.as_tensor(b).double().reshape(-1)
    keep = a.isfinite() & b.isfinite()
    a, b = a[keep], b[keep]
    if a.numel() < 2:
        return float("nan")
    upper = torch.triu(torch.ones(a.numel(), a.numel(), dtype=torch.bool), diagonal=1)
    sa = torch.sign(a[:, None] - a[None, :])[upper]
    sb = torch.sign(b[:, None] - b[None, :])[upper]
    denominator = math.sqrt(float((sa != 0).sum()) * float((sb != 0).sum()))
    return float((sa * sb).sum()) / denominator if denominator > 0 else float("nan")


def agreement_tau(a: torch.Tensor, b: torch.Tensor) -> float:
    """Kendall τ-b between the magnitudes |a| and |b|: how far two importance scores rank the tokens alike,
    whichever way each token pushes. Jain & Wallace (2019, §4.1) compare importance this way: their released code
    (github.com/successar/AttentionExplanation, ``Trainers/PlottingBC.py``: ``np.abs`` of gradient × embedding,
    ``np.abs(y_new − ŷ)`` for leave-one-out) ranks absolute values with ``scipy.stats.kendalltau``.

    >>> agreement_tau(torch.tensor([-3., 1., 2.]), torch.tensor([3., -1., 2.]))
    1.0
    >>> kendall_tau(torch.tensor([-3., 1., 2.]), torch.tensor([3., -1., 2.]))  # signed: another order
    -0.3333333333333333
    """
    return kendall_tau(torch.as_tensor(a).double().abs(), torch.as_tensor(b).double().abs())


def layer_agreement(attention: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``agreement_tau`` between each layer's head-averaged attention row, (L, H, T) → (L, T), and ``reference``
    (T,): (L,). Attention is never negative; the reference (leave-one-out) counts by its magnitude.

    Only tokens where ``reference`` is finite count (leave-one-out is NaN at the position and at
    special tokens).
    """
    mean = attention.float().mean(1)  # (L, T)
    return torch.tensor([agreement_tau(row, reference) for row in mean])


@dataclass(frozen=True)
class GradientSaliency:
    """Gradient × input for the true token at ``position``: one forward and one backward pass."""

    position: int
    true_id: int
    true_token: str
    tokens: tuple[str, ...]
    grad_x_input: torch.Tensor  # (T,) gradient · embedding (the usual gradient × input)
    grad_x_delta: torch.Tensor  # (T,) gradient · (embedding − [MASK]'s): the first-order guess of leave-one-out
    log_prob: float  # log p(true) on the sentence as it is


@dataclass(frozen=True)
class Saliency(GradientSaliency):
    """Which input tokens the guess at ``position`` depends on, measured two ways, and how far they agree."""

    leave_one_out: torch.Tensor = None  # (T,) drop in log p(true) when token j becomes [MASK]; NaN: not measured
    tau_input: float = float("nan")  # agreement_tau(grad_x_input, leave_one_out): magnitudes, as Jain & Wallace
    tau_delta: float = float("nan")  # agreement_tau(grad_x_delta, leave_one_out)
    tau_input_signed: float = float("nan")  # kendall_tau on the signed scores (which way each token pushes too)
    tau_delta_signed: float = float("nan")

    @classmethod
    def from_parts(cls, gradient: GradientSaliency, leave_one_out: torch.Tensor) -> "Saliency":
        """Both views together, with their agreement (Kendall τ over the tokens leave-one-out measured): on
        magnitudes (Jain & Wallace's comparison) and on the signed scores."""
        gxi, gxd = gradient.grad_x_input, gradient.grad_x_delta
        return cls(gradient.position, gradient.true_id, gradient.true_token, gradient.tokens, gxi, gxd,
                   gradient.log_prob, leave_one_out, agreement_tau(gxi, leave_one_out), agreement_tau(gxd, leave_one_out),
                   kendall_tau(gxi, leave_one_out), kendall_tau(gxd, leave_one_out))

    def records(self) -> list[dict]:
        return [{"position": j, "token": t, "leave_one_out": _finite(self.leave_one_out[j]),
                 "grad_x_input": float(self.grad_x_input[j]), "grad_x_delta": float(self.grad_x_delta[j])}
                for j, t in enumerate(self.tokens)]


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def special_positions(tokenizer, input_ids) -> list[int]:
    """Positions of special tokens other than [MASK] ([CLS], [SEP], padding): leave-one-out skips them."""
    special = set(int(i) for i in tokenizer.all_special_ids) - {tokenizer.mask_token_id}
    return [j for j, i in enumerate(torch.as_tensor(input_ids).reshape(-1).tolist()) if i in special]


def gradient_saliency(model: nn.Module, tokenizer, input_ids, attention_mask, position: int,
                      true_id: int) -> GradientSaliency:
    """Gradient × input (and × (input − [MASK])) of log p(true token) at ``position`` of one sentence (T,)."""
    ids, mask = one_sentence(input_ids, attention_mask)
    position = check_position(position, ids.numel())
    table = model.get_input_embeddings()
    with torch.no_grad():
        embeds = table(ids.to(model.device))  # (T, E)
        mask_embed = table.weight[tokenizer.mask_token_id].detach()  # (E,) (a view of a parameter keeps requires_grad)
    log_prob, grad = _input_gradient(_log_prob_fn(model, mask, position, int(true_id)), embeds)  # grad (T, E)
    gxi = (grad * embeds).sum(-1).float().cpu()  # (T,)
    gxd = (grad * (embeds - mask_embed)).sum(-1).float().cpu()  # (T,)
    return GradientSaliency(position, int(true_id), tokenizer.convert_ids_to_tokens(int(true_id)),
                            tuple(tokenizer.convert_ids_to_tokens(ids.tolist())), gxi, gxd, log_prob)


def saliency(model: nn.Module, tokenizer, input_ids, attention_mask, position: int, true_id: int) -> Saliency:
    """Leave-one-out (the reference) and gradient × input for the true token at ``position`` of one sentence (T,).

    Gradient × input needs one forward and one backward pass; leave-one-out one batched forward of
    T rows (its cost grows with T²). Special tokens get NaN in leave-one-out and are left out of τ.
    """
    gradient = gradient_saliency(model, tokenizer, input_ids, attention_mask, position, true_id)
    loo = leave_one_out(model, tokenizer, input_ids, attention_mask, position, true_id,
                        skip=special_positions(tokenizer, input_ids))  # (T,)
    return Saliency.from_parts(gradient, loo)
