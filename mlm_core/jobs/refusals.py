"""Why a run is refused before anything is copied: a step with too many tokens, or a run that would hold
more memory than this server allows per run (both in words that name what to lower)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from mlm_core.costs import RUN_BYTES_PER_PARAMETER, UPDATE_BYTES_PER_PARAMETER, masked_share, run_bytes
from mlm_core.jobs.limits import CHECKPOINTING_TOKEN_FACTOR
from mlm_core.measure import human_bytes
from mlm_core.training import TrainConfig, focus_token_share


def step_tokens_problem(variants: Mapping[str, TrainConfig], max_step_tokens: int) -> str | None:
    """Why this run's batch x sequence length is too big for one step here, or None if it fits.

    >>> step_tokens_problem({"a": TrainConfig(batch_size=64, seq_len=128)}, 4096) is not None
    True
    >>> step_tokens_problem({"a": TrainConfig(batch_size=64, seq_len=128, gradient_checkpointing=True)}, 4096)
    """
    for name, cfg in variants.items():
        tokens = cfg.batch_size * cfg.seq_len
        hard = max_step_tokens * CHECKPOINTING_TOKEN_FACTOR
        if tokens > hard:
            return (f"{cfg.batch_size} x {cfg.seq_len} = {tokens:,} tokens per step is more than this server "
                    f"allows ({hard:,} with gradient checkpointing). Use a smaller batch or shorter sequences.")
        if tokens > max_step_tokens and not cfg.gradient_checkpointing:
            return (f"{cfg.batch_size} x {cfg.seq_len} = {tokens:,} tokens per step is more than "
                    f"{max_step_tokens:,}, the most this server takes without gradient checkpointing. Turn on "
                    "gradient checkpointing (More settings: it recomputes activations instead of storing "
                    f"them, up to {hard:,} tokens), or use a smaller batch or shorter sequences.")
    return None


def run_focus_share(tokenizer, texts: Sequence[str], variants: Mapping[str, TrainConfig]) -> float:
    """The share of the texts' tokens that are facts' words, when a variant masks them more often than the rule."""
    facts = [c for c in variants.values() if c.focus_mlm_probability > c.masking.mlm_probability]
    if not facts or tokenizer is None:
        return 0.0
    return focus_token_share(tokenizer, texts, facts[0].eval_focus_words)


def run_text_chars(texts: Sequence[str], eval_texts: Sequence[str] | None) -> int:
    return sum(len(t) for t in texts) + sum(len(t) for t in eval_texts or ())


def run_memory_problem(model, variants: Mapping[str, TrainConfig], budget: int, *,
                       focus_share: float = 0.0, text_chars: int = 0) -> str | None:
    """Why this run would hold more memory than ``budget`` bytes, naming what to lower; None if it fits.

    The estimate is ``costs.run_bytes`` on the model's config and its own parameter count (a model without a
    config, a test's stand-in, is not estimated).

    >>> from mlm_core.models import load_masked_lm
    >>> model, _ = load_masked_lm("tiny-random")
    >>> run_memory_problem(model, {"a": TrainConfig(batch_size=64, seq_len=256)}, 2**30)[:46]
    'This run would hold about 1.5 GiB at once: 1 m'
    >>> run_memory_problem(model, {"a": TrainConfig()}, 2**30) is None
    True
    """
    config = getattr(model, "config", None)
    if config is None:
        return None
    params = sum(p.numel() for p in model.parameters())

    def need(vs) -> int:
        return run_bytes(config, vs, params=params, focus_share=focus_share, text_chars=text_chars)

    total = need(variants)
    if total <= budget:
        return None
    copies = (RUN_BYTES_PER_PARAMETER * len(variants) + UPDATE_BYTES_PER_PARAMETER) * params
    first = next(iter(variants.values()))
    ways = []
    smaller = {name: replace(c, batch_size=max(c.grad_accum_steps, c.batch_size // 2)) for name, c in variants.items()}
    while need(smaller) > budget and any(c.batch_size > c.grad_accum_steps for c in smaller.values()):
        smaller = {name: replace(c, batch_size=max(c.grad_accum_steps, c.batch_size // 2))
                   for name, c in smaller.items()}
    if need(smaller) <= budget:
        ways.append(f"a batch of {next(iter(smaller.values())).batch_size} or fewer sequences")
    ways.append("a shorter sequence length")
    if any(masked_share(c, focus_share) > 0.15 for c in variants.values()):
        ways.append("a smaller masked share")
    if not all(c.gradient_checkpointing for c in variants.values()):
        checkpointed = {name: replace(c, gradient_checkpointing=True) for name, c in variants.items()}
        if need(checkpointed) <= budget:
            ways.append("gradient checkpointing (More settings) at these sizes")
    if len(variants) > 1:
        ways.append("fewer variants side by side")
    n = len(variants)
    step = max(total - copies, 0)
    share = max(masked_share(c, focus_share) for c in variants.values())
    return (f"This run would hold about {human_bytes(total)} at once: {n} model cop{'ies' if n > 1 else 'y'} with "
            f"{'their' if n > 1 else 'its'} gradients and AdamW state ({human_bytes(copies)}), and a step of batch "
            f"{first.batch_size} × {first.seq_len} with {share:.0%} of its tokens predicted ({human_bytes(step)}). "
            f"This server allows {human_bytes(budget)} per run (MLMLAB_RUN_MB). Try "
            + ", ".join(ways[:-1]) + (" or " if len(ways) > 1 else "") + ways[-1] + ".")

