"""The loop: `train_step` is one optimizer step, as nanoGPT's train.py takes it (forward, loss, backward,
clip, step), and everything that trains goes through it: `train_variants` steps 1-4 variants of a run
through the same batches, masks and dropout, step by step, so their curves race; `train` is one variant;
`TrainStep` is one step on a batch you give it, for the Efficiency page, the benchmarks and the
default-model build; the NSP lesson steps its classifier through it with a loss of its own.
`prepare_variant` sets a model up for a run's variant or a `TrainStep` (dropout, checkpointing, the
forward pass, the optimizer, class weights).

A run, as `_train_variants` reads: its data (`_corpus`: chunks, held-out set and probes, all from
the run's one `DataConfig`), its variants (`_variant`: a deep copy each), the steps (`_train_step`
on each step's `MicroBatch`es, `_evaluate` every `eval_every` steps), the end (`_finish`).

Nothing in this package knows about Streamlit or about one model family (minGPT's trainer:
"nothing in this file really has anything to do with GPT"). One step reads left to right:

    texts ─▶ token chunks ─▶ masking.mask_tokens ─▶ encoder + head on the masked rows
          ─▶ the variant's loss (loss_registry) ─▶ backward ─▶ clip ─▶ AdamW

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
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from mlm_core import loss_registry, losses, seeds
from mlm_core.data import special_ids
from mlm_core.errors import InputError
from mlm_core.head import GatheredMaskedLM
from mlm_core.loss_registry import LossInputs
from mlm_core.masking import IGNORE_INDEX
from mlm_core.training import bugs
from mlm_core.training.batches import (Batches, Chunks, MaskScheme, MicroBatch, chunk_token_counts, frequency_buckets,
                                      mask_scheme, split_chunks)
from mlm_core.training.config import DataConfig, Stream, TrainConfig, check_variants
from mlm_core.training.distributed import (DeepSpeedOptimizer, World, all_reduce_sum, current_world,
                                           deepspeed_config, stop_requested)
from mlm_core.training.evaluate import EvalSet, Probe, evaluate, make_eval_set, make_probes, probe_predictions
from mlm_core.training.events import TrainEvent, TrainResult
from mlm_core.training.optim import ADAM_BETAS, ADAM_EPS, Optimizer, check_amp, lr_at, set_checkpointing
from mlm_core.training.rng import cuda_index, rng_devices, seed_dropout

# --------------------------------------------------------------------------------------------
# One step: forward, loss, backward, clip, step
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Micro:
    """One micro-batch of a step, as `train_step` takes it: what the forward pass reads, the loss of what it
    gives, its share of the step's normaliser, and the seed of its dropout."""

    inputs: tuple  # the forward's arguments: (input_ids, attention_mask, labels), each (B, T), for a masked LM
    loss: Callable[[Any], torch.Tensor]  # the forward's outputs -> this micro-batch's mean loss
    share: float = 1.0  # n_a / N, its part of the step's normaliser (a step on one batch: 1)
    dropout_seed: int | None = None  # seeds dropout before its forward (None: the RNG as it stands)


def train_step(forward: Callable, opt: Optimizer | DeepSpeedOptimizer, micro: Sequence[Micro], *, lr: float,
               skip: bool = False, world_size: int = 1) -> tuple[list[float], float | None]:
    """One optimizer step, as nanoGPT's train.py takes it: forward, loss and backward on each micro-batch,
    then clip and step. Returns each micro-batch's mean loss and the gradient norm before clipping (None
    when skipped or not finite).

    ``forward`` is the model gathered at its masked rows (`GatheredMaskedLM`, inside DistributedDataParallel
    under torchrun, or DeepSpeed's engine: `prepare_variant` makes it), or a module a trainer steps with a
    loss of its own (the NSP lesson's classifier); ``opt`` is `Optimizer` or `DeepSpeedOptimizer`. Each loss
    is backpropagated times its share of the step, and times the world size W under DDP (which averages the
    ranks' gradients), so the step's gradient is that of one mean over the global batch. ``skip`` (nothing
    selected anywhere) drops the gradients instead of updating.
    """
    opt.begin(lr)  # the scheduled learning rate; the last step's gradients freed
    values = []
    for a, mb in enumerate(micro):
        if mb.dropout_seed is not None:
            seed_dropout(mb.dropout_seed, opt.device)
        with _sync(forward, last=a == len(micro) - 1):  # DDP: gradients all-reduced on the last micro-batch only
            with opt.autocast():
                outputs = forward(*mb.inputs)  # forward: (logits (M, V), targets (M,)) for a masked LM
            loss = mb.loss(outputs)  # loss: this micro-batch's mean, in fp32
            opt.backward(loss, mb.share * world_size)  # backward: loss x n_a / N x W, through the fp16 GradScaler
        values.append(float(loss.detach()))
    if skip:
        return values, opt.skip()
    grad_norm = opt.clip()  # clip: clip_grad_norm_ at max_grad_norm (fp16 gradients unscaled first)
    opt.step()  # step: AdamW (which the GradScaler skips if fp16 gradients overflowed)
    return values, grad_norm


def _sync(forward: Callable, last: bool):
    """DDP all-reduces the gradients in every backward pass unless told not to: on the last micro-batch only."""
    if last or not isinstance(forward, DistributedDataParallel):
        return contextlib.nullcontext()
    return forward.no_sync()


def _variant_loss(cfg: TrainConfig, outputs, *, class_weights: torch.Tensor | None, counts: torch.Tensor | None,
                  generator: torch.Generator | None, extra_loss: Callable | None = None) -> torch.Tensor:
    """The variant's loss (its `loss_registry` record) on one micro-batch, the mean over its M masked rows.

    ``outputs`` is `GatheredMaskedLM`'s: ``(logits (M, V), targets (M,))``, or for a variant that needs the
    hidden states ``(hidden (M, H), weight (V, H), bias (V,), targets (M,))``; the loss is taken in fp32.
    ``extra_loss(*outputs)``, when given, is added (the default-model build's anti-copy term).
    """
    variant = loss_registry.get(cfg.loss)
    *head, targets = outputs
    if targets.numel() == 0:  # nothing selected: a zero that still reaches every tensor of the head (no NaN, DDP happy)
        zero = head[0].sum() * 0.0
        for t in head[1:]:
            zero = zero + (t.sum() * 0.0 if t is not None else 0.0)
        return zero
    extras = dict(class_weights=class_weights, sampled=cfg.sampled_softmax, counts=counts, generator=generator)
    if variant.needs_hidden:
        hidden, weight, bias = head
        inputs = LossInputs(targets, hidden=hidden.float(), weight=weight, bias=bias, **extras)
    else:
        (logits,) = head
        inputs = LossInputs(targets, logits=logits.float(), **extras)
    loss = variant.loss(inputs).loss
    return loss if extra_loss is None else loss + extra_loss(*outputs)


def _normaliser(cfg: TrainConfig, labels: torch.Tensor, class_weights: torch.Tensor | None) -> float:
    """What a micro-batch's mean loss is an average over (its record's normaliser): its masked tokens M, or for
    the weighted loss its sum of target weights Σw (the normalisation of F.cross_entropy(weight=w))."""
    return loss_registry.get(cfg.loss).normaliser(labels[labels != IGNORE_INDEX], class_weights)


class StopRequested(Exception):
    """Raised inside a forward or backward pass once the run's stop flag is set (``stop_hooks``)."""


def stop_hooks(model: nn.Module, stop: threading.Event) -> list:
    """Check ``stop`` at every linear layer of ``model``, forward and backward, and raise ``StopRequested`` when it
    is set: one step at batch 64 x 256 takes minutes on a laptop CPU, and Stop and the time cap must not wait for
    its end. Returns the hooks' handles (``handle.remove()``). Only for a model this run owns (its private copy).

    >>> layer, stop = nn.Linear(2, 2), threading.Event()
    >>> handles = stop_hooks(layer, stop)
    >>> out = layer(torch.ones(1, 2)); stop.set()
    >>> try:
    ...     out.sum().backward()
    ... except StopRequested:
    ...     print("stopped inside the backward pass")
    stopped inside the backward pass
    """
    def before(module, args):
        if stop.is_set():
            raise StopRequested

    def check(grad):
        if stop.is_set():
            raise StopRequested

    def after(module, args, output):
        if isinstance(output, torch.Tensor) and output.requires_grad:  # (not in a checkpointed forward: no graph)
            output.register_hook(check)

    handles = []
    for module in model.modules():
        if isinstance(module, nn.Linear):
            handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    return handles


# --------------------------------------------------------------------------------------------
# One variant's set-up, for the loop's copies and for TrainStep alike
# --------------------------------------------------------------------------------------------


class Prepared(NamedTuple):
    """A model set up to train (`prepare_variant`): what `train_step` takes, and the class weights of its loss."""

    forward: nn.Module  # the model gathered at its masked rows (in DDP under torchrun; DeepSpeed's engine)
    opt: Optimizer | DeepSpeedOptimizer
    class_weights: torch.Tensor | None  # (V,) for a loss that needs them (the weighted one), else None


def prepare_variant(model: nn.Module, cfg: TrainConfig, device: torch.device, *, counts: torch.Tensor | None = None,
                    world: World = World(), ds_config: dict[str, Any] | None = None,
                    groups: list[dict[str, Any]] | None = None, betas: tuple[float, float] = ADAM_BETAS,
                    eps: float = ADAM_EPS) -> Prepared:
    """Set `model` up, in place, to train under `cfg`: its forward pass, its optimizer and its loss' class weights.

    Dropout on or off (``cfg.dropout``), gradient checkpointing, the forward pass (`GatheredMaskedLM`: the
    head on the masked rows only, its logits or, for a loss that needs them, its input and weights; in
    DistributedDataParallel when `world` is distributed), the optimizer (`Optimizer`, or DeepSpeed's
    engine when `ds_config` is given; ``groups``, ``betas`` and ``eps`` go to `Optimizer`), and for a
    loss that needs them (the weighted one) one weight per token id (V,), from the corpus' token `counts`
    (V,), or 1 for every token without a corpus.
    """
    if ds_config is not None and (groups is not None or (betas, eps) != (ADAM_BETAS, ADAM_EPS)):
        raise InputError("DeepSpeed builds its own optimizer from its config: groups, betas and eps go to "
                         "Optimizer only.")
    variant = loss_registry.get(cfg.loss)
    model.train(cfg.dropout)
    set_checkpointing(model, cfg.gradient_checkpointing)
    forward: nn.Module = GatheredMaskedLM(model, hidden=variant.needs_hidden)
    if ds_config is not None:
        opt: Optimizer | DeepSpeedOptimizer = DeepSpeedOptimizer(model, forward, cfg, device, world, ds_config)
        forward = opt.engine
    else:
        opt = Optimizer(model, cfg, device, distributed=world.distributed, groups=groups, betas=betas, eps=eps)
        if world.distributed:  # after Optimizer froze what stays frozen: DDP registers what needs gradients
            forward = DistributedDataParallel(forward, device_ids=[cuda_index(device)] if device.type == "cuda"
                                              else None)
    class_weights = None
    if variant.needs_class_weights:
        class_weights = (torch.ones(model.get_output_embeddings().weight.shape[0]) if counts is None else
                         losses.token_frequency_weights(counts.float(), scheme=cfg.weight_scheme,
                                                        smoothing=cfg.weight_smoothing)).to(device)
    return Prepared(forward, opt, class_weights)


class TrainStep:
    """One optimizer step of `train`'s loop on a batch you give it.

    It takes the loop's own path (`prepare_variant`, then `train_step`: autocast, the chosen loss,
    backward, clipping, AdamW; dropout seeded per step as the loop seeds it), so the Efficiency page
    and the benchmarks time the step a run takes, and the default-model build
    (``scripts/build_default_mlm.py``), which draws its own batches, trains with it. ``model`` is
    trained in place: pass a private copy. ``configure`` switches autocast, checkpointing and frozen
    word embeddings between steps without rebuilding the optimizer, so several set-ups can be timed
    round-robin on one copy. ``groups``, ``betas`` and ``eps`` go to `Optimizer` (per-group learning
    rates, other AdamW constants).

    >>> from mlm_core.models import load_masked_lm
    >>> model, tok = load_masked_lm("tiny-random", device="cpu")
    >>> cfg = TrainConfig(steps=2, warmup_steps=0, amp="off")
    >>> step = TrainStep(copy.deepcopy(model), cfg)
    >>> batch = tok(["the cat sat on the mat."], return_tensors="pt")
    >>> labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)  # (1, T): one position to predict
    >>> labels[0, 2] = batch["input_ids"][0, 2]
    >>> losses = [step(batch["input_ids"], batch["attention_mask"], labels, lr=lr_at(cfg, s), seed=s)
    ...           for s in range(cfg.steps)]
    >>> all(isinstance(loss, float) and loss > 0 for loss in losses), step.grad_norm > 0
    (True, True)
    """

    def __init__(self, model: nn.Module, cfg: TrainConfig, device: str | torch.device | None = None, *,
                 groups: list[dict[str, Any]] | None = None, betas: tuple[float, float] = ADAM_BETAS,
                 eps: float = ADAM_EPS):
        if loss_registry.get(cfg.loss).needs_counts:
            raise InputError(f"TrainStep trains on one batch without a corpus; the {cfg.loss} loss needs the "
                             "corpus' token counts: use train() for it.")
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        check_amp(self.device, cfg.amp)
        self.model, self.cfg = model.to(self.device), cfg
        self.forward, self.opt, self.class_weights = prepare_variant(
            self.model, cfg, self.device, groups=groups, betas=betas, eps=eps)  # no corpus: every token weighs the same
        self.grad_norm: float | None = None  # the last step's gradient norm before clipping

    def configure(self, *, amp: str | None = None, gradient_checkpointing: bool | None = None,
                  freeze: bool | None = None) -> None:
        """Change the set-up for the next steps (None leaves a setting as it is)."""
        changes: dict[str, Any] = {}
        if amp is not None:
            check_amp(self.device, amp)
            changes["amp"] = amp
        if gradient_checkpointing is not None:
            set_checkpointing(self.model, gradient_checkpointing)
            changes["gradient_checkpointing"] = gradient_checkpointing
        if freeze is not None:
            changes["freeze_word_embeddings"] = freeze
        if changes:
            self.cfg = dataclasses.replace(self.cfg, **changes)
            self.opt.set_config(self.cfg)  # freezes or unfreezes the word embeddings on the same AdamW

    def release_gradients(self) -> None:
        """Free the last step's gradients now (the next step would free them first thing)."""
        self.opt.optimizer.zero_grad(set_to_none=True)

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, *,
                 lr: float | None = None, seed: int = 0,
                 extra_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> float:
        """Forward, backward, clip and AdamW on one (B, T) batch; returns the loss before the update.

        ``extra_loss(logits (M, V), targets (M,))``, when given, is added to the configured loss
        (the build's anti-copy term, ``losses.unlikelihood_loss``); ``seed`` picks the dropout.
        """
        ids, attention, labels = (t.to(self.device) for t in (input_ids, attention_mask, labels))
        loss = functools.partial(_variant_loss, self.cfg, class_weights=self.class_weights, counts=None,
                                 generator=None, extra_loss=extra_loss)
        # One batch is the whole step: its share of the step's normaliser is 1.
        micro = Micro((ids, attention, labels), loss, dropout_seed=seeds.seed_for(self.cfg.seed, Stream.DROPOUT, seed))
        empty = not bool((labels != IGNORE_INDEX).any())
        with torch.random.fork_rng(devices=rng_devices(self.device)):
            (value,), self.grad_norm = train_step(self.forward, self.opt, [micro], skip=empty,
                                                  lr=self.cfg.learning_rate if lr is None else lr)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return value


# --------------------------------------------------------------------------------------------
# The loop: a run's data, its variants, the steps, the end
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Run:
    """What every step and evaluation of a run shares: its data settings, processes and device, the
    corpus' token counts (the sampled softmax draws from them), its start time and where events go."""

    data: DataConfig
    world: World
    device: torch.device
    counts: torch.Tensor  # (V,) float, on `device`
    started: float  # time.perf_counter() at the start
    emit: Callable[[TrainEvent], None]


@dataclass(frozen=True)
class _Corpus:
    """A run's data, all drawn from its seed: the training chunks, their token counts and frequency
    buckets, the held-out chunks and their frozen mask, the probes, and what masking needs."""

    tokenizer: Any
    train_chunks: Chunks
    eval_chunks: Chunks
    eval_on_train: bool  # too little text to hold any out: the held-out chunks are training chunks
    counts: torch.Tensor  # (V,) token counts of the training chunks
    buckets: torch.Tensor  # (V,) frequency bucket per token id
    eval_set: EvalSet
    probes: list[Probe]
    micro: int  # examples in one forward pass on one rank
    mask_vocab: int  # random replacements are real tokenizer tokens: min(tokenizer, model vocabulary)


def _corpus(base: nn.Module, tokenizer, texts: Sequence[str], eval_texts: Sequence[str] | None,
            data: DataConfig, world: World) -> _Corpus:
    """Check the sizes against the model and the processes, then chunk, split, count, mask the held-out set."""
    max_pos = getattr(getattr(base, "config", None), "max_position_embeddings", None)
    if max_pos is not None and data.seq_len > max_pos:
        raise InputError(f"seq_len {data.seq_len} is longer than this model's {max_pos} positions.")
    per_rank = data.batch_size // data.grad_accum_steps
    if per_rank % world.size:
        raise InputError(f"batch_size / grad_accum_steps ({per_rank}) must be a multiple of the "
                         f"number of processes ({world.size}).")
    micro = per_rank // world.size
    out_emb = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    vocab_size = int(out_emb.weight.shape[0]) if out_emb is not None else len(tokenizer)
    mask_vocab = min(len(tokenizer), vocab_size)
    train_chunks, eval_chunks, eval_on_train = split_chunks(tokenizer, texts, data, eval_texts)
    counts = chunk_token_counts(train_chunks, vocab_size)
    buckets = frequency_buckets(counts)
    eval_set = make_eval_set(eval_chunks, data, tokenizer, buckets=buckets, micro_batch=max(1, micro),
                             vocab_size=mask_vocab)
    return _Corpus(tokenizer, train_chunks, eval_chunks, eval_on_train, counts, buckets, eval_set,
                   make_probes(tokenizer, texts, data), micro, mask_vocab)


@dataclass
class _Variant:
    name: str
    cfg: TrainConfig
    model: nn.Module  # the trained copy
    forward: Any  # its forward pass (`Prepared.forward`)
    opt: Any  # Optimizer or DeepSpeedOptimizer
    result: TrainResult
    class_weights: torch.Tensor | None = None


def _variant(name: str, cfg: TrainConfig, base: nn.Module, corpus: _Corpus, run: _Run,
             ds_template: Mapping[str, Any] | None) -> _Variant:
    """A deep copy of the base model (fp32 master weights; AMP handles low precision), set up to train."""
    model = copy.deepcopy(base).to(device=run.device, dtype=torch.float32)
    ds_config = None if ds_template is None else deepspeed_config(ds_template, cfg, run.world.size)
    forward, opt, class_weights = prepare_variant(model, cfg, run.device, counts=corpus.counts, world=run.world,
                                                  ds_config=ds_config)
    result = TrainResult(name=name, config=cfg, eval_on_train=corpus.eval_on_train, model=model)
    return _Variant(name, cfg, model, forward, opt, result, class_weights)


def _report(v: _Variant, event: TrainEvent, emit) -> None:
    """Record an event in the variant's result (`Curves.record`), then send it to the caller."""
    v.result.record(event)
    emit(event)


def _train_step(state: list[_Variant], micro_batches: Mapping[MaskScheme, list[MicroBatch]], step: int,
                run: _Run) -> int:
    """One optimizer step of every variant on the same micro-batches; returns the steps done.

    The step's loss is one average over every masked token of the global batch (all micro-batches,
    all ranks), exactly what one big batch would give: micro-batch a adds (its mean) x (its share
    n_a / N of the global normaliser N), where N (masked tokens, or Σw for the weighted loss) is
    all-reduced before any forward pass. A mean of micro-batch means would weight a micro-batch
    with 5 masked tokens as much as one with 10.
    """
    data, device, world = run.data, run.device, run.world
    mine = [micro_batches[mask_scheme(v.cfg)] for v in state]  # each variant's masks (its rule, static or dynamic)
    local_tokens = sum(int(b.attention_mask.sum()) for b in mine[0])
    norms = [[_normaliser(v.cfg, b.labels, v.class_weights) for b in batches] for v, batches in zip(state, mine)]
    masked = [float(sum(int((b.labels != IGNORE_INDEX).sum()) for b in batches)) for batches in mine]
    reduced = all_reduce_sum([sum(n) for n in norms] + masked + [float(local_tokens)], device, world)
    totals, masked_counts, tokens_all = reduced[:len(state)], reduced[len(state):-1], reduced[-1]
    for v, batches, v_norms, total, masked_all in zip(state, mine, norms, totals, masked_counts):
        t0 = time.perf_counter()
        lr = lr_at(v.cfg, step)
        micro = [Micro((b.input_ids, b.attention_mask, b.labels),
                       functools.partial(_variant_loss, v.cfg, class_weights=v.class_weights, counts=run.counts,
                                         generator=seeds.generator(data.seed, Stream.SAMPLED, step, b.j)),
                       share=n / total if total > 0 else 0.0,  # n_a / N
                       dropout_seed=seeds.seed_for(data.seed, Stream.DROPOUT, step, b.j))  # the same for every variant
                 for b, n in zip(batches, v_norms)]
        # Nothing selected anywhere: no loss to learn from, so no update (and no NaN in the curve).
        skip = masked_all == 0 or total <= 0
        values, grad_norm = train_step(v.forward, v.opt, micro, lr=lr, skip=skip, world_size=world.size)
        loss_sum = 0.0
        for value, mb in zip(values, micro):
            loss_sum += value * mb.share
        (loss_sum,) = all_reduce_sum([loss_sum], device, world)
        record: dict[str, Any] = {"step": step + 1, "lr": lr, "masked_tokens": int(masked_all),
                                  "tokens": int(tokens_all), "loss": None if skip else loss_sum,
                                  "grad_norm": grad_norm, "skipped": skip}
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        v.result.train_time_s += dt
        v.result.tokens_seen += int(tokens_all)
        record["tokens_per_s"] = tokens_all / dt if dt > 0 else None
        record["elapsed_s"] = time.perf_counter() - run.started
        v.result.steps_done = step + 1
        _report(v, TrainEvent("step", v.name, step + 1, data.steps, record), run.emit)
    return step + 1


def _evaluate(state: list[_Variant], corpus: _Corpus, run: _Run, step: int) -> None:
    """Every variant on the frozen held-out mask (comparable across variants), then its probes; rank 0 only."""
    if run.world.rank != 0:
        return
    for v in state:
        t0 = time.perf_counter()
        values = evaluate(v.model, corpus.eval_set, amp=v.cfg.amp)
        if bugs.step_of(v.cfg.bug) == bugs.EVALUATION:  # and what the buggy evaluation would report
            values.update(_buggy_evaluation(v, corpus, run, step))
        values["eval_s"] = time.perf_counter() - t0
        values["eval_on_train"] = corpus.eval_on_train
        _report(v, TrainEvent("eval", v.name, step, run.data.steps, values), run.emit)
        if corpus.probes:
            preds = probe_predictions(v.model, corpus.tokenizer, corpus.probes, run.data.probe_top_k)
            _report(v, TrainEvent("probe", v.name, step, run.data.steps, {"probes": preds}), run.emit)


def _buggy_evaluation(v: _Variant, corpus: _Corpus, run: _Run, step: int) -> dict[str, Any]:
    """The held-out loss a pipeline with the variant's evaluation bug reports at this step."""
    if v.cfg.bug == "eval_remasked":  # a fresh random mask of the held-out text on every pass
        fresh = make_eval_set(corpus.eval_chunks, run.data, corpus.tokenizer, buckets=corpus.buckets,
                              micro_batch=max(1, corpus.micro), vocab_size=corpus.mask_vocab, redraw=step)
        reported = evaluate(v.model, fresh, amp=v.cfg.amp)
    else:  # "eval_dropout": the model left in train mode, its dropout seeded per evaluation
        seed_dropout(seeds.seed_for(run.data.seed, Stream.EVAL_DROPOUT, step), run.device)
        reported = evaluate(v.model, corpus.eval_set, amp=v.cfg.amp, dropout=True)
    return {"reported_loss": reported["loss"], "reported_mask_loss": reported["mask_loss"]}


def _finish(state: list[_Variant], run: _Run) -> dict[str, TrainResult]:
    """Each variant's result, its trained copy back in eval mode, its optimizer dropped; a "done" event each.
    A stop inside a step leaves the variants that had finished it one step ahead (``result.steps_done``)."""
    for v in state:
        steps_done = v.result.steps_done
        v.result.stopped = steps_done < run.data.steps
        v.result.wall_time_s = time.perf_counter() - run.started
        v.model.train(False)
        if v.cfg.gradient_checkpointing:
            set_checkpointing(v.model, False)
        v.opt = v.forward = None  # drop the optimizer state and any DDP/DeepSpeed wrapper now
        v.model.zero_grad(set_to_none=True)  # and the last step's gradients: a kept copy holds its weights alone
        _report(v, TrainEvent("done", v.name, steps_done, run.data.steps, v.result.summary()), run.emit)
    return {v.name: v.result for v in state}


def train(model: nn.Module, tokenizer, texts: Sequence[str], config: TrainConfig, *,
          on_event: Callable[[TrainEvent], None] | None = None,
          stop: threading.Event | None = None,
          eval_texts: Sequence[str] | None = None) -> TrainResult:
    """Train a copy of `model` on `texts`; the base model and the caller's RNG stay untouched.

    >>> from mlm_core.models import load_masked_lm
    >>> model, tok = load_masked_lm("tiny-random", device="cpu")
    >>> cfg = TrainConfig(steps=30, batch_size=4, seq_len=16, learning_rate=1e-2, warmup_steps=0, eval_every=30,
    ...                   amp="off")
    >>> result = train(model, tok, ["the cat sat on the mat."] * 16, cfg)
    >>> len(result.steps), result.steps[-1]["loss"] < result.steps[0]["loss"] / 2  # it learns the one sentence
    (30, True)
    """
    return train_variants(model, tokenizer, texts, {"run": config}, on_event=on_event, stop=stop,
                          eval_texts=eval_texts)["run"]


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
    data = check_variants(variants)  # a public entry: checked here too (jobs.Run checks at submit, to refuse at once)
    emit = on_event or (lambda event: None)
    stop = stop or threading.Event()
    try:
        dev = torch.device(device) if device is not None else next(model.parameters()).device
        with torch.random.fork_rng(devices=rng_devices(dev)):
            return _train_variants(model, tokenizer, texts, eval_texts, dict(variants), data, dev, deepspeed,
                                   emit, stop)
    except Exception as exc:
        message = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        for name in variants:
            emit(TrainEvent("error", name, 0, data.steps, {"message": message}))
        raise


def _train_variants(base: nn.Module, tokenizer, texts: Sequence[str], eval_texts: Sequence[str] | None,
                    variants: dict[str, TrainConfig], data: DataConfig, device: torch.device,
                    ds_template: Mapping[str, Any] | None, emit, stop: threading.Event) -> dict[str, TrainResult]:
    """The run, top to bottom: its data, its variants, an evaluation at step 0, the steps, the end."""
    started = time.perf_counter()
    world = current_world()
    for cfg in variants.values():
        check_amp(device, cfg.amp)
    corpus = _corpus(base, tokenizer, texts, eval_texts, data, world)  # chunks, held-out set, probes: from the seed
    run = _Run(data, world, device, corpus.counts.float().to(device), started, emit)
    state = [_variant(name, cfg, base, corpus, run, ds_template) for name, cfg in variants.items()]
    # One process: Stop holds inside a step or an evaluation too. Under torchrun the ranks agree on a stop
    # between steps (stop_requested), since one rank leaving a collective would hang the others.
    hooks = [h for v in state for h in stop_hooks(v.model, stop)] if not world.distributed else []
    batches = Batches(corpus.train_chunks, data, world, corpus.micro, mask_token_id=tokenizer.mask_token_id,
                      vocab_size=corpus.mask_vocab, special_ids=special_ids(tokenizer),
                      schemes=[mask_scheme(cfg) for cfg in variants.values()],
                      focus_ids=corpus.eval_set.focus_ids if data.focus_mlm_probability > 0 else None)
    try:
        _evaluate(state, corpus, run, 0)
        for step in range(data.steps):
            if stop_requested(stop, device, world):
                break
            micro_batches = {scheme: [b.to(device) for b in group] for scheme, group in batches.get(step).items()}
            steps_done = _train_step(state, micro_batches, step, run)
            if not stop.is_set() and (steps_done % data.eval_every == 0 or steps_done == data.steps):
                _evaluate(state, corpus, run, steps_done)
    except StopRequested:  # inside a step (its update not applied) or an evaluation (not reported)
        pass
    finally:
        batches.close()
        for handle in hooks:
            handle.remove()
    return _finish(state, run)
