"""The prediction head, run only where it is needed: gather the selected rows first, then project.

A masked LM is an encoder plus a head. The head maps every position's hidden state to V scores,
but the loss only needs the M selected positions (about 15% of the tokens), so the head's big
(H, V) projection is applied to those rows only: gather first, then project, as fairseq's RoBERTa
(``masked_tokens`` in ``RobertaLMHead``) and NVIDIA's BERT (``masked_lm_positions``) do.

Shapes: B = batch, T = sequence length, H = encoder hidden size, E = head size (H, or ALBERT's
embedding size), V = vocabulary, M = selected positions (``labels != IGNORE_INDEX``).

>>> from mlm_core.models import load_masked_lm
>>> model, tokenizer = load_masked_lm("tiny-random", device="cpu")
>>> ids = torch.tensor([[101, 1996, 103, 2938, 102]])
>>> labels = torch.tensor([[-100, -100, 4937, -100, -100]])
>>> logits, targets = masked_lm_logits(model, ids, torch.ones_like(ids), labels)
>>> tuple(logits.shape), targets.tolist()
((1, 30522), [4937])
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from transformers.activations import gelu  # the function RobertaLMHead.forward calls

from mlm_core.errors import InputError, ModelLoadError
from mlm_core.masking import IGNORE_INDEX

__all__ = [
    "HeadParts",
    "head_parts",
    "encoder_states",
    "gathered_head_family",
    "HeadFallbackWarning",
    "check_shapes",
    "selected_index",
    "masked_lm_hidden",
    "masked_lm_logits",
    "GatheredMaskedLM",
    "SCORES_AT_ONCE",
    "row_groups",
]


# --------------------------------------------------------------------------- the head of each family
@dataclass(frozen=True)
class HeadParts:
    """A masked-LM head split at its output projection: logits = decoder(transform(hidden))."""

    family: str
    transform: Callable[[torch.Tensor], torch.Tensor]  # (M, H) -> (M, E): dense, activation, LayerNorm
    decoder: nn.Linear  # weight (V, E), bias (V,): the projection onto the vocabulary
    modules: tuple[nn.Module, ...] = ()  # every module of the head (their parameters are the head's)


def head_parts(model: nn.Module) -> HeadParts | None:
    """The head of a known family split at its output projection (family, transform, decoder,
    modules), or None for heads ``masked_lm_logits`` does not know (then the full logits are computed
    and gathered). ``encoder_states`` gives its input."""
    model_type = getattr(model.config, "model_type", None)
    if model_type == "bert" and hasattr(model, "cls"):  # BertForMaskedLM: cls.predictions
        predictions = model.cls.predictions
        return HeadParts("bert", predictions.transform, predictions.decoder, (predictions,))
    if model_type == "distilbert":  # four modules on the model itself
        return HeadParts(
            "distilbert",
            lambda h: model.vocab_layer_norm(model.activation(model.vocab_transform(h))),
            model.vocab_projector,
            (model.vocab_transform, model.vocab_layer_norm, model.vocab_projector),
        )
    if model_type in ("roberta", "xlm-roberta", "camembert") and hasattr(model, "lm_head"):
        head = model.lm_head
        return HeadParts("roberta", lambda h: head.layer_norm(gelu(head.dense(h))), head.decoder, (head,))
    if model_type == "albert" and hasattr(model, "predictions"):  # ALBERT projects H -> E first
        p = model.predictions
        return HeadParts("albert", lambda h: p.LayerNorm(p.activation(p.dense(h))), p.decoder, (p,))
    return None


def gathered_head_family(model: nn.Module) -> str | None:
    """``"bert"``, ``"distilbert"``, ``"roberta"`` or ``"albert"`` when ``masked_lm_logits`` applies the
    head to the selected rows only; ``None`` when it falls back to full logits (and warns once)."""
    head = head_parts(model)
    return head.family if head else None


class HeadFallbackWarning(UserWarning):
    """``masked_lm_logits`` did not know this head and computed logits for every position."""


def _fallback_warning(model: nn.Module) -> None:
    # Python's default warning filter shows each distinct message once per call site.
    warnings.warn(
        f"masked_lm_logits does not know the head of {type(model).__name__}: it computed logits "
        "for every position and gathered the selected rows afterwards (same numbers, more work).",
        HeadFallbackWarning,
        stacklevel=3,
    )


def selected_index(labels: torch.Tensor) -> torch.Tensor:
    """Flat indices of the selected positions, (M,): row-major over (B, T)."""
    # The one host sync: M depends on the data, so the size of what follows is known only now.
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)


def check_shapes(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, labels: torch.Tensor):
    """``(input_ids, attention_mask, labels)`` as a batch: one sentence (T,) becomes (1, T); shapes must agree."""
    if input_ids.dim() == 1:  # one sentence (T,) -> a batch of one (1, T)
        input_ids = input_ids.unsqueeze(0)
        labels = labels.reshape(1, -1)
        attention_mask = None if attention_mask is None else attention_mask.reshape(1, -1)
    if labels.shape != input_ids.shape or (attention_mask is not None and attention_mask.shape != input_ids.shape):
        raise InputError(
            f"input_ids {tuple(input_ids.shape)}, attention_mask "
            f"{None if attention_mask is None else tuple(attention_mask.shape)} and labels "
            f"{tuple(labels.shape)} must have the same shape."
        )
    return input_ids, attention_mask, labels


def encoder_states(model: nn.Module, input_ids, attention_mask) -> torch.Tensor:
    """The encoder's last hidden states (B, T, H): what the head reads."""
    device = model.device
    out = model.base_model(
        input_ids=input_ids.to(device),
        attention_mask=None if attention_mask is None else attention_mask.to(device),
    )
    return out[0]  # last_hidden_state (B, T, H)


# Head scores computed at once when predicting (rows × V): 64 MiB in fp32, a few copies per click. Above glibc's
# largest heap block (32 MiB), so each chunk gets its own mapping and goes back whole when freed: chunks just
# under it came from the heap, and small tensors kept between them grew it by a chunk each time.
SCORES_AT_ONCE = 2**24


def row_groups(labels: torch.Tensor, vocab_size: int, *, gathered: bool = True,
               budget: int = SCORES_AT_ONCE) -> list[slice]:
    """Consecutive groups of a batch's rows (``labels`` (B, T)) whose head scores stay within ``budget`` values.

    A gathered head scores the selected positions only (M_group × V); a head ``head_parts`` does not know
    scores every position (B_group × T × V). A row that alone is over the budget is a group of its own.
    Predicting group by group bounds what a page holds at once, whatever the batch and the masking rate.

    >>> labels = torch.full((4, 3), IGNORE_INDEX); labels[:, 1] = 7  # one selected position per row
    >>> row_groups(labels, vocab_size=10, budget=20), row_groups(labels, vocab_size=10, budget=20, gathered=False)
    ([slice(0, 2, None), slice(2, 4, None)], [slice(0, 1, None), slice(1, 2, None), slice(2, 3, None), slice(3, 4, None)])
    """
    labels = torch.as_tensor(labels)
    labels = labels.reshape(1, -1) if labels.dim() == 1 else labels
    per_row = ((labels != IGNORE_INDEX).sum(-1) if gathered else torch.full((labels.shape[0],), labels.shape[-1]))
    groups, start, used = [], 0, 0
    for row, count in enumerate((per_row * int(vocab_size)).tolist()):
        if row > start and used + count > budget:
            groups.append(slice(start, row))
            start, used = row, 0
        used += count
    groups.append(slice(start, labels.shape[0]))
    return groups


def masked_lm_hidden(model: nn.Module, input_ids, attention_mask, labels):
    """``(hidden (M, E), weight (V, E), bias (V,), targets (M,))`` with ``hidden @ weight.T + bias`` the logits.

    The encoder runs once; the head's transform runs on the selected rows only. For heads we do not
    know, the full model runs and the input of its output projection is captured with a hook.
    """
    input_ids, attention_mask, labels = check_shapes(input_ids, attention_mask, labels)
    head = head_parts(model)
    index = selected_index(labels.to(model.device))  # (M,)
    targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
    if head is not None:
        states = encoder_states(model, input_ids, attention_mask)  # (B, T, H)
        rows = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, H)
        hidden = head.transform(rows)  # (M, E)
        decoder = head.decoder
    else:
        decoder = model.get_output_embeddings()
        if not isinstance(decoder, nn.Linear):
            raise ModelLoadError(f"{type(model).__name__} has no linear output projection to split the head at.")
        # The model is shared by every session: another thread's forward may pass through this hook
        # while it is registered, so it keeps only what this thread's own forward gave the decoder.
        captured, caller = [], threading.get_ident()

        def capture(module, args):
            if threading.get_ident() == caller:
                captured.append(args[0])

        hook = decoder.register_forward_pre_hook(capture)
        try:
            model(input_ids=input_ids.to(model.device),
                  attention_mask=None if attention_mask is None else attention_mask.to(model.device))
        finally:
            hook.remove()
        states = captured[-1]  # (B, T, E): what the projection received
        hidden = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, E)
    weight = decoder.weight  # (V, E)
    bias = decoder.bias if decoder.bias is not None else torch.zeros_like(weight[:, 0])  # (V,)
    return hidden, weight, bias, targets


def masked_lm_logits(model: nn.Module, input_ids, attention_mask, labels):
    """``(logits (M, V), targets (M,))`` at the positions where ``labels != IGNORE_INDEX``.

    Rows come in row-major order of the (B, T) batch. Gradients flow (call it under
    ``torch.no_grad()`` to predict). Unknown heads: full logits, then gather, and a
    ``HeadFallbackWarning`` once; ``gathered_head_family(model)`` says which path a model takes.
    """
    input_ids, attention_mask, labels = check_shapes(input_ids, attention_mask, labels)
    head = head_parts(model)
    if head is None:
        _fallback_warning(model)
        index = selected_index(labels.to(model.device))  # (M,)
        out = model(input_ids=input_ids.to(model.device),
                    attention_mask=None if attention_mask is None else attention_mask.to(model.device))
        full = out.logits  # (B, T, V): the cost we avoid for known heads
        logits = full.reshape(-1, full.shape[-1]).index_select(0, index)  # (M, V)
        targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
        return logits, targets
    index = selected_index(labels.to(model.device))  # (M,)
    states = encoder_states(model, input_ids, attention_mask)  # (B, T, H)
    rows = states.reshape(-1, states.shape[-1]).index_select(0, index)  # (M, H)
    logits = head.decoder(head.transform(rows))  # (M, E) -> (M, V)
    targets = labels.to(model.device).reshape(-1).index_select(0, index)  # (M,)
    return logits, targets


class GatheredMaskedLM(nn.Module):
    """``masked_lm_logits`` as a module (``masked_lm_hidden`` with ``hidden=True``), so a wrapper such as
    DistributedDataParallel or DeepSpeed can wrap it.

    DDP synchronises gradients only through its own ``forward``; calling ``masked_lm_logits`` on
    ``ddp.module`` would skip that. Wrap this instead: ``DDP(GatheredMaskedLM(model))(ids, mask, labels)``.
    The training loop steps through it (``hidden=True`` for the sampled softmax, which needs the head's
    input and weights rather than its logits).
    """

    def __init__(self, model: nn.Module, hidden: bool = False):
        super().__init__()
        self.model = model
        self.hidden = hidden

    def forward(self, input_ids, attention_mask, labels):
        if self.hidden:
            return masked_lm_hidden(self.model, input_ids, attention_mask, labels)  # (M, E), (V, E), (V,), (M,)
        return masked_lm_logits(self.model, input_ids, attention_mask, labels)  # (M, V), (M,)
