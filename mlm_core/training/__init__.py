"""Masked-LM training: one loop that reports through a callback, read in the order of a run.

- ``config``: ``TrainConfig`` (what defines a run, with its checks), ``DataConfig`` (what its variants share)
  and the seed rule of its streams.
- ``batches``: texts packed into token chunks, the held-out split, each step's masked ``MicroBatch``es.
- ``bugs``: named bugs of the masking, labels and evaluation steps (the "bugs that train" lesson's twins).
- ``optim``: learning-rate schedule, AdamW, mixed precision, gradient checkpointing, one variant's update.
- ``rng``: dropout's randomness, the one use of torch's global RNG (seeded per step, inside ``fork_rng``).
- ``distributed``: torchrun ranks, sums over them, an agreed stop, the DeepSpeed back-end.
- ``evaluate``: held-out metrics (full cross-entropy), frequency buckets, focus words, probes.
- ``events``: ``TrainEvent``s as they happen, ``TrainResult`` at the end, curve helpers.
- ``loop``: ``train_step`` (one step: forward, loss, backward, clip, step), ``train_variants`` (1-4 variants
  racing on identical batches), ``train``, ``TrainStep``, and ``prepare_variant``, the set-up both share.

The names below are the package's public face: ``from mlm_core.training import TrainConfig, train``.
"""

from mlm_core.training.batches import (Batches, Chunks, MaskScheme, MicroBatch, chunk_token_counts, frequency_buckets,
                                      make_chunks, mask_rows, mask_scheme, split_chunks)
from mlm_core.training.bugs import BUGS
from mlm_core.training.config import (AMP_MODES, BUCKET_MASS, BUCKETS, DATA_FIELDS, LOSSES, MAX_VARIANTS, SCHEDULES,
                                      DataConfig, Stream, TrainConfig, check_variants)
from mlm_core.training.distributed import DeepSpeedOptimizer, World, current_world, deepspeed_config
from mlm_core.training.evaluate import (EVAL_MASKINGS, EvalSet, Probe, evaluate, focus_ids, focus_token_share,
                                        loss_by_group, make_eval_set, make_probes, probe_predictions, word_piece_ids)
from mlm_core.training.events import EVENT_KINDS, Curves, TrainEvent, TrainResult, curves_table, smooth
from mlm_core.training.loop import Micro, Prepared, TrainStep, prepare_variant, train, train_step, train_variants
from mlm_core.training.optim import (ADAM_BETAS, ADAM_EPS, Optimizer, adamw, autocast, check_amp, freeze_word_embeddings,
                                     lr_at, param_groups, set_checkpointing, uncorrected_adam_step_ratio)
from mlm_core.training.rng import cuda_index, rng_devices, seed_dropout

__all__ = [
    "ADAM_BETAS", "ADAM_EPS", "AMP_MODES", "BUGS", "BUCKETS", "BUCKET_MASS", "DATA_FIELDS", "EVAL_MASKINGS", "EVENT_KINDS",
    "LOSSES", "MAX_VARIANTS", "SCHEDULES",
    "Batches", "Chunks", "Curves", "DataConfig", "MaskScheme", "Micro", "MicroBatch", "DeepSpeedOptimizer", "EvalSet", "Optimizer", "Prepared", "Probe", "Stream", "TrainConfig", "TrainEvent",
    "TrainResult", "TrainStep", "World",
    "adamw", "autocast", "check_amp", "check_variants", "chunk_token_counts", "cuda_index", "current_world", "curves_table", "deepspeed_config", "evaluate",
    "focus_ids", "focus_token_share", "freeze_word_embeddings", "frequency_buckets", "loss_by_group", "lr_at", "make_chunks", "make_eval_set", "make_probes",
    "mask_rows", "mask_scheme", "param_groups", "prepare_variant", "probe_predictions", "rng_devices", "seed_dropout",
    "set_checkpointing", "smooth", "split_chunks", "train", "train_step", "train_variants", "uncorrected_adam_step_ratio",
    "word_piece_ids",
]
