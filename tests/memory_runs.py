"""A training run's peak memory, measured, for tests/test_memory_budget.py and the estimate's calibration.

    python -m tests.memory_runs '{"lesson": "mask_rate", "batch_size": 16, "seq_len": 128, "mlm_p": 0.5}'

In a fresh process: the bundled default model is loaded, a short run of the lesson (its variants, from the
Training page's own ``lesson_variants``) is trained once at a tiny size (lazy set-up is not the run's), then
the resident high-water mark is reset and the run trains ``steps`` steps with an evaluation before and after
(``mlm_core.measure.peak_rss_above``), as ``jobs.Run`` does: on a private copy of the tokenizer, deep copies
of the model. Prints one JSON line: the settings, the measured peak above the loaded model and
``costs.run_bytes``' estimate.
"""

from __future__ import annotations

import gc
import json
import sys
from dataclasses import replace

import torch

LESSON_DEFAULTS = dict(lesson="facts", batch_size=8, seq_len=64, mlm_p=0.15, checkpointing=False, amp="off",
                       steps=1, loss="full", num_sampled=256, focus=None, bug=None, rates=None, losses=None,
                       upload_mb=0)


def training_text(spec: dict, texts) -> list[str]:
    """The run's training text: the gazetteer's, and with ``upload_mb`` that many MB of an upload (the Training page
    takes 5 MB): workshop sentences, numbered so none repeats."""
    from mlm_core.bundled import workshop_sentences

    train = list(texts.train)
    size, k, base = 0, 0, workshop_sentences()
    while size < spec.get("upload_mb", 0) * 1_000_000:
        line = f"{base[k % len(base)]} {k}"
        train.append(line)
        size += len(line) + 1
        k += 1
    return train
# The widest each lesson's controls allow (pages/training.py): the largest K, a masked share of 50%, the facts'
# words always masked, the fastest masking rates, the bug that puts a label on every token, all three losses.
WIDEST = {
    "facts": dict(mlm_p=0.5, focus=1.0),
    "mask_rate": dict(rates=[0.5, 0.6, 0.8]),
    "bugs": dict(mlm_p=0.5, bug="labels_never_ignored"),
    "free": dict(mlm_p=0.5, losses=["full", "weighted", "sampled"], num_sampled=4096),
    "lr_too_high": dict(mlm_p=0.5),
}
BATCHES, SEQ_LENS = (64, 32, 16, 8, 4, 2), (256, 128, 64, 32)  # the Training page's choices


def settings_variants(spec: dict, texts, *, small: bool = False):
    """The lesson's variants at the spec's settings (or at a tiny size for the warm-up)."""
    from mlm_core.lessons.training_registry import base_config, lesson_variants

    s = {**LESSON_DEFAULTS, **spec}
    overrides = dict(steps=1 if small else int(s["steps"]), batch_size=2 if small else int(s["batch_size"]),
                     seq_len=32 if small else int(s["seq_len"]), amp=s["amp"], eval_every=1,
                     gradient_checkpointing=bool(s["checkpointing"]), loss=s["loss"],
                     num_sampled=int(s["num_sampled"]), warmup_steps=0)
    base = base_config(s["lesson"], from_scratch=False, texts=texts, **overrides)
    base = replace(base, masking=replace(base.masking, mlm_probability=float(s["mlm_p"])))
    if s["focus"] is not None:
        base = replace(base, focus_mlm_probability=float(s["focus"]))
    kwargs = {"losses": tuple(s["losses"] or (s["loss"],))}
    if s["bug"]:
        kwargs["bug"] = s["bug"]
    if s["rates"]:
        kwargs["rates"] = tuple(s["rates"])
    return lesson_variants(s["lesson"], base, from_scratch=False, **kwargs)


def widest_allowed(lesson: str, budget: int) -> dict:
    """The spec of ``lesson`` at the most tokens per step the server's run budget admits (``jobs`` estimate),
    checkpointing on or off, from the page's batch and sequence choices; None when nothing fits."""
    from mlm_core.jobs import RunManager
    from mlm_core.lessons.training_view import gazetteer_texts
    from mlm_core.models import load_masked_lm

    model, tok = load_masked_lm(None, device="cpu")
    texts = gazetteer_texts()
    manager = RunManager(max_runs=1, watchdog=False, max_run_bytes=budget, max_step_tokens=10**9)
    sizes = sorted(((b, t, c) for b in BATCHES for t in SEQ_LENS for c in (False, True)),
                   key=lambda x: (-x[0] * x[1], -x[1], x[2]))  # at equal tokens the longest rows (attention) first
    for b, t, c in sizes:
        spec = {"lesson": lesson, **WIDEST[lesson], "batch_size": b, "seq_len": t, "checkpointing": c}
        if manager.memory_problem(model, tok, texts.train, settings_variants(spec, texts), texts.held_out) is None:
            return spec
    return None


def run(spec: dict) -> dict:
    from mlm_core.data import private_copy
    from mlm_core.jobs import RunManager
    from mlm_core.lessons.training_view import gazetteer_texts
    from mlm_core.measure import peak_rss_above
    from mlm_core.models import load_masked_lm
    from mlm_core.training import train_variants

    torch.set_num_threads(1)
    model, tok = load_masked_lm(None, device="cpu")
    texts = gazetteer_texts()

    train_texts = training_text(spec, texts)

    def train(small: bool):
        variants = settings_variants(spec, texts, small=small)
        train_variants(model, private_copy(tok), train_texts if not small else texts.train, variants,
                       eval_texts=texts.held_out)
        return variants

    train(True)
    gc.collect()
    variants, peak = peak_rss_above(lambda: train(False))
    manager = RunManager(max_runs=1, watchdog=False, max_run_bytes=1, max_step_tokens=10**9)
    estimate = manager.run_estimate(model, tok, train_texts, variants, texts.held_out)
    return {"spec": spec, "variants": len(variants), "peak_bytes": peak, "estimate": estimate}


if __name__ == "__main__":
    if sys.argv[1] == "--widest":  # python -m tests.memory_runs --widest LESSON [BUDGET_BYTES]
        print(json.dumps(widest_allowed(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2048 * 2**20)))
    else:
        print(json.dumps(run(json.loads(sys.argv[1]))))
