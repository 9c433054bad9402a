"""Record golden outputs for fixed seeds: what the issue-20 redesign must keep unchanged.

    OMP_NUM_THREADS=1 python scripts/record_golden.py          # writes tests/golden/*.json

Each ``golden_*`` function returns plain JSON data computed through ``mlm_core``'s public names;
``tests/test_golden.py`` recomputes them and compares with the files (ints exactly, floats at
rtol 1e-5). Rerun this script only when a change of behaviour is intended, and say so in the commit.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from mlm_core import build_default  # noqa: E402
from mlm_core.bundled import load_default_tokenizer, workshop_sentences  # noqa: E402
from mlm_core.data import encode, mask_batch  # noqa: E402
from mlm_core.lessons.loss_lab import loss_batch  # noqa: E402
from mlm_core.losses import (  # noqa: E402
    CORRECTIONS, SAMPLERS, SCHEMES, full_cross_entropy, loop_cross_entropy, sampled_softmax_loss,
    token_frequency_weights, weighted_cross_entropy,
)
from mlm_core.masking import SPAN_REPLACEMENTS, STRATEGIES, MaskingConfig  # noqa: E402
from mlm_core.models import tiny_random_masked_lm  # noqa: E402
from mlm_core.training import LOSSES, TrainConfig, train_variants  # noqa: E402

SENTENCES = (
    "The cat sat on the mat because it was unbelievably warm.",
    "Masked language models learn by guessing hidden words.",
    "She poured a cup of coffee, then read the morning newspaper.",
)
MASK_SEEDS = (0, 144, 148, 151)  # 144, 148, 151: the seeds docs/workshop.md tells a room to type
TRAIN_STEPS = 20


def _floats(t: torch.Tensor) -> list:
    return [float(x) for x in t.detach().double().flatten().tolist()]


def golden_masks(tokenizer) -> dict:
    """input_ids, labels and decisions of every strategy (and span replacement) for each seed."""
    encoded = encode(tokenizer, list(SENTENCES), max_length=64)
    configs = {s: MaskingConfig(strategy=s) for s in STRATEGIES if s != "span"}
    configs.update({f"span/{r}": MaskingConfig(strategy="span", span_replacement=r) for r in SPAN_REPLACEMENTS})
    configs["token/p0.4"] = MaskingConfig(mlm_probability=0.4)  # more of every decision in a short batch
    out = {}
    for name, config in configs.items():
        for seed in MASK_SEEDS:
            r = mask_batch(tokenizer, encoded, config, torch.Generator().manual_seed(seed))
            out[f"{name}/seed{seed}"] = {"input_ids": r.input_ids.tolist(), "labels": r.labels.tolist(),
                                         "decisions": r.decisions.tolist()}
    return {"sentences": list(SENTENCES), "results": out}


def golden_losses(tokenizer) -> dict:
    """Each loss variant on one masked batch through the tiny random model (seed 0)."""
    model, _ = tiny_random_masked_lm(tokenizer)
    batch = loss_batch(model, tokenizer, list(SENTENCES), MaskingConfig(mlm_probability=0.3), seed=0)
    logits, targets = batch.logits, batch.targets
    out = {"targets": targets.tolist()}
    for name, fn in (("full", full_cross_entropy), ("loop", loop_cross_entropy)):
        o = fn(logits, targets)
        out[name] = {"loss": float(o.loss), "per_token": _floats(o.per_token)}
    for scheme in SCHEMES:
        w = token_frequency_weights(batch.counts, scheme=scheme, smoothing=1.0)
        o = weighted_cross_entropy(logits, targets, w)
        out[f"weighted/{scheme}"] = {"loss": float(o.loss), "per_token": _floats(o.per_token)}
    for sampler in SAMPLERS:
        for correction, (logq, on_true) in CORRECTIONS.items():
            for replacement in (False, True):
                for hits in (True, False):
                    o = sampled_softmax_loss(
                        batch.hidden, batch.weight, batch.bias, targets, num_sampled=64, sampler=sampler,
                        counts=batch.counts, replacement=replacement, remove_accidental_hits=hits,
                        logq_correction=logq, logq_on_true=on_true, generator=torch.Generator().manual_seed(7))
                    key = f"sampled/{sampler}/{correction}/{'repl' if replacement else 'norepl'}/{'hits' if hits else 'keep'}"
                    out[key] = {"loss": float(o.loss), "per_token": _floats(o.per_token),
                                "sampled_ids": o.diagnostics["sampled_ids"].tolist()}
    return out


def golden_training(tokenizer) -> dict:
    """The first 20 steps of training.train_variants: the tiny model, one variant per loss, dropout on."""
    model, _ = tiny_random_masked_lm(tokenizer)
    texts = workshop_sentences()[:200]
    base = dict(steps=TRAIN_STEPS, batch_size=4, seq_len=32, learning_rate=1e-3, warmup_steps=2, amp="off",
                eval_every=10, eval_max_chunks=8, seed=3)
    variants = {loss: TrainConfig(loss=loss, num_sampled=64, **base) for loss in LOSSES}
    results = train_variants(model, tokenizer, texts, variants)
    out = {}
    for name, res in results.items():
        out[name] = {
            "steps": [{k: r[k] for k in ("loss", "grad_norm", "lr", "masked_tokens", "tokens")} for r in res.steps],
            "evals": [{k: v for k, v in r.items() if isinstance(v, (int, float)) and k != "eval_s"}
                      for r in res.evals],
        }
    return out


def golden_build_loop(tmp: Path, tokenizer) -> dict:
    """The first 20 losses of ``python -m mlm_core.build_default``'s loop on a tiny setting, read by
    wrapping ``build_default.masked_loss``: workshop corpus only, 2 x 32 tokens, no cloze sets, once
    plain and once with the anti-copy term of the shipped build.

    The tiny random BERT stands in for the 22M-parameter encoder the build starts from (20 steps of
    that take ~15 s on one thread, ~0.7 s a step); evaluations, checkpoints and the export are
    stubbed out: they do not change the losses."""
    runs = {}
    for name, extra in (("plain", []), ("anti_copy", ["--anti-copy", "2.0"])):
        losses: list[float] = []
        real = build_default.masked_loss

        def recording(model, ids, att, labels, reduction="mean", **kw):
            loss, m = real(model, ids, att, labels, reduction=reduction, **kw)
            if torch.is_grad_enabled() and reduction == "mean":  # the training step, not the held-out loss
                losses.append(float(loss.detach()))
            return loss, m

        missing = str(tmp / "none.tsv")
        argv = ["--out", str(tmp / "out"), "--ckpt-dir", str(tmp / name), "--steps", str(TRAIN_STEPS),
                "--batch", "2", "--seq-len", "32", "--warmup", "5", "--threads", "1", "--mix", "workshop=1",
                "--no-wordnet", "--cloze", missing, "--dev", missing, "--everyday", missing,
                "--eval-every", "1000", "--ckpt-every", "1000", "--export-every", "0", *extra]
        threads = torch.get_num_threads()
        with mock.patch.object(build_default, "masked_loss", recording), \
                mock.patch.object(build_default.dm, "build_untrained",
                                  lambda: tiny_random_masked_lm(tokenizer)[0]), \
                mock.patch.object(build_default, "evaluate", lambda *a, **k: {}), \
                mock.patch.object(build_default, "save_checkpoint", lambda *a, **k: None), \
                mock.patch.object(build_default, "export_asset", lambda *a, **k: {}), \
                mock.patch("builtins.print", lambda *a, **k: None), \
                torch.random.fork_rng(devices=[]):  # main() seeds the global RNG: give the caller's back
            try:
                build_default.main(argv)
            finally:
                torch.set_num_threads(threads)
        runs[name] = {"argv": [a.replace(str(tmp), "<tmp>") for a in argv[4:]], "losses": losses}
    return runs


def record_all() -> dict[str, dict]:
    tokenizer = load_default_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        return {"masks": golden_masks(tokenizer), "losses": golden_losses(tokenizer),
                "training": golden_training(tokenizer), "build_loop": golden_build_loop(Path(tmp), tokenizer)}


def _check_finite(data) -> None:
    if isinstance(data, float) and not math.isfinite(data):
        raise ValueError("golden outputs must be finite")
    for v in data.values() if isinstance(data, dict) else data if isinstance(data, list) else ():
        _check_finite(v)


def main() -> int:
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for name, data in record_all().items():
        _check_finite(data)
        (GOLDEN_DIR / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote tests/golden/{name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
