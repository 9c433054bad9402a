"""Command line: `python -m mlm_core train ...`, the Training page's loop without the page.

    python -m mlm_core train --model tiny-random --corpus workshop --steps 200 --output runs/tiny
    python -m mlm_core train --config my_run.yaml --learning-rate 3e-4
    torchrun --standalone --nproc_per_node=2 -m mlm_core train --config my_run.yaml

Options come from the defaults of `TrainConfig`, then a JSON/YAML config file, then flags (the
last wins). The output folder receives `config.json`, `curves.csv`, `curves.json` and `model/`
(`save_pretrained`: safetensors weights, config and tokenizer). Under torchrun every rank trains
on its share of each global batch (DistributedDataParallel: gloo on CPU, NCCL on CUDA), and only
rank 0 logs and writes. A bad config prints one clear line on stderr and exits with code 2;
Ctrl-C stops within the current step (alone: its update is not applied; under torchrun: after it), saves
what was trained, and exits with code 130.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from tqdm import tqdm

from mlm_core import loss_registry, models
from mlm_core.bundled import workshop_sentences
from mlm_core.data import read_text_upload
from mlm_core.errors import InputError, MLMLabError
from mlm_core.losses import SCHEMES
from mlm_core.masking import STRATEGIES, MaskingConfig
from mlm_core.sampled_softmax import SAMPLERS
from mlm_core.training.bugs import BUGS
from mlm_core.training import AMP_MODES, SCHEDULES, TrainConfig, curves_table, train_variants

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MAX_CORPUS_BYTES = 512 * 1024 * 1024  # a CLI may read far more than the page's upload limit
DEEPSPEED_ZERO2 = Path(__file__).with_name("deepspeed_zero2.json")
BUILD_COMMAND = "python scripts/build_default_mlm.py"  # builds assets/default_mlm through mlm_core.training

# One help line per TrainConfig option; `--help` shows them all (a test checks none is missing).
OPTION_HELP = {
    "steps": "optimizer steps to train (default %(default)s)",
    "batch_size": "sequences per optimizer step, summed over all processes and accumulation steps",
    "seq_len": "tokens per chunk, [CLS] and [SEP] included; long texts are split, never cut",
    "chunk_overlap": "tokens shared by consecutive windows of a long text (default: min(16, seq_len / 4))",
    "learning_rate": "peak learning rate: 1e-5 to 5e-5 fine-tunes a trained model; 1e-4 to 1e-3 from scratch",
    "warmup_steps": "steps of linear warm-up from 0 to the peak learning rate",
    "schedule": "learning-rate decay after warm-up",
    "min_lr_ratio": "fraction of the peak learning rate that linear and cosine decay end at (default 0)",
    "weight_decay": "AdamW weight decay (not applied to biases and LayerNorm weights)",
    "max_grad_norm": "clip the global gradient norm to this value; 0 turns clipping off",
    "amp": "mixed precision: auto (bf16 where this machine's bf16 matmuls are measured faster, else fp32), "
           "off, bf16 (CUDA or CPU) or fp16 (CUDA, with a gradient scaler)",
    "freeze_word_embeddings": "fine-tuning: keep the word embeddings (and a tied decoder weight) fixed: faster steps",
    "gradient_checkpointing": "recompute activations in backward: less memory, slower",
    "grad_accum_steps": "micro-batches per optimizer step (one process can reproduce an N-process batch)",
    "loss": "training loss; evaluation always uses full cross-entropy",
    "weight_scheme": "weighted loss: how token counts become class weights",
    "weight_smoothing": "weighted loss: added to every token count",
    "num_sampled": "sampled softmax: K sampled classes",
    "sampler": "sampled softmax: proposal distribution",
    "logq_correction": "sampled softmax: subtract log Q from the sampled logits",
    "mask_copies": "0: a fresh mask each time a chunk is drawn (dynamic, as RoBERTa); k: k masks made once per "
                   "chunk and reused in turn (static, as BERT's dupe_factor)",
    "masking": "(set through --mlm-probability, --mask-replace-prob, --random-replace-prob, "
               "--masking-strategy, or a 'masking:' section in the config file)",
    "eval_every": "steps between evaluations on the held-out chunks",
    "eval_fraction": "share of the chunks held out for evaluation",
    "eval_max_chunks": "most held-out chunks evaluated",
    "probe_sentences": "a sentence with [MASK] whose top-k predictions are recorded at each evaluation "
                       "(repeat the flag for several)",
    "probe_answers": "the hidden word of each --probe, in the same order (repeat the flag); its rank and "
                     "probability are recorded",
    "probe_groups": "the probe set of each --probe, in the same order (repeat the flag), e.g. read / new: each set "
                    "is scored on its own",
    "probe_top_k": "predictions recorded per probe position",
    "eval_focus_words": "a word whose held-out positions get a loss of their own, e.g. a fact the run should "
                        "learn (repeat the flag for several)",
    "focus_mlm_probability": "share of the --eval-focus-words' tokens selected for prediction in the training batches "
                             "(0: the masking rule's p, like every token)",
    "eval_masking": "mask the held-out text at this selection probability instead of the training rule's (the rest "
                    "of the rule as trained; or an 'eval_masking:' section in the config file), e.g. 0.15 while "
                    "training at 0.4: one frozen evaluation mask, comparable across masking rates",
    "bug": "train with one named bug of the masking, labels or evaluation step (the Training page's buggy twin; "
           "default: none, the clean loop)",
    "learn_from_texts": "labels on the first N texts' tokens only; later texts are read as context, never asked "
                        "(0: every text is learned from)",
    "dropout": "dropout while training (--no-dropout for exact comparisons)",
    "seed": "seed of data order, masks, dropout and sampled classes",
}
MASKING_FLAGS = {  # flag dest -> MaskingConfig field
    "mlm_probability": "mlm_probability",
    "mask_replace_prob": "mask_replace_prob",
    "random_replace_prob": "random_replace_prob",
    "masking_strategy": "strategy",
}
RUN_KEYS = ("model", "corpus", "output", "device", "deepspeed")  # config-file keys that are not TrainConfig's


class UsageError(InputError):
    """A bad command line or config file (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: same format, same exit code
        self.print_usage(sys.stderr)
        raise UsageError(message)


# ------------------------------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:

    parser = _Parser(prog="python -m mlm_core", description="MLM Lab from the command line.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("train", help="train a masked LM (also under torchrun)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run = p.add_argument_group("what to train, on what, and where to write")
    run.add_argument("--config", metavar="FILE", help="JSON or YAML file with any of the options below "
                     "(flag names with _ instead of -, plus model, corpus, output, device, deepspeed)")
    run.add_argument("--model", help="'default' (the bundled model), 'tiny-random' (from scratch), "
                     "a Hugging Face id or a local folder (default: default)")
    run.add_argument("--corpus", action="append", metavar="PATH",
                     help="a .txt, .csv or .jsonl file (one text per line), or 'workshop' for the bundled "
                     "workshop corpus; repeat for several (default: workshop)")
    run.add_argument("--output", metavar="DIR", help="output folder (default: runs/mlm)")
    run.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: CUDA if present; under torchrun "
                     "cuda:LOCAL_RANK)")
    run.add_argument("--deepspeed", metavar="JSON", nargs="?", const=str(DEEPSPEED_ZERO2),
                     help="train through DeepSpeed with this config (without a value: the bundled ZeRO-2 "
                     "optimizer-offload config, mlm_core/deepspeed_zero2.json); needs `pip install deepspeed`")
    run.add_argument("--overwrite", action="store_true",
                     help="write into an --output folder that is not empty (its config.json, curves and "
                     "model/ are replaced); without it a non-empty folder is refused before training")
    run.add_argument("--no-progress", action="store_true", help="no progress bar (logs one line per evaluation)")

    opts = p.add_argument_group("training options (TrainConfig)")
    defaults = TrainConfig()
    choices = {"schedule": SCHEDULES, "amp": AMP_MODES, "loss": loss_registry.names(), "weight_scheme": SCHEMES,
               "sampler": SAMPLERS, "bug": tuple(BUGS)}
    for f in dataclasses.fields(TrainConfig):
        if f.name == "masking":
            continue
        if f.name == "eval_masking":
            opts.add_argument("--eval-masking", dest="eval_masking", type=float, default=argparse.SUPPRESS,
                              metavar="FLOAT", help=OPTION_HELP[f.name])
            continue
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        help_text = OPTION_HELP[f.name] + ("" if "default" in OPTION_HELP[f.name] else f" (default {default})")
        help_text = help_text.replace("%(default)s", str(default))
        if isinstance(default, bool):
            opts.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                              default=argparse.SUPPRESS, help=help_text)
        elif f.name == "probe_sentences":
            opts.add_argument("--probe", dest=f.name, action="append", default=argparse.SUPPRESS,
                              metavar="SENTENCE", help=OPTION_HELP[f.name])
        elif f.name in ("probe_answers", "probe_groups", "eval_focus_words"):
            opts.add_argument(flag, dest=f.name, action="append", default=argparse.SUPPRESS,
                              metavar="WORD", help=OPTION_HELP[f.name])
        else:
            kind = float if f.name in ("learning_rate", "weight_decay", "max_grad_norm", "eval_fraction",
                                       "weight_smoothing", "focus_mlm_probability") else (
                int if isinstance(default, int) else str)
            opts.add_argument(flag, dest=f.name, type=kind, default=argparse.SUPPRESS,
                              metavar=None if f.name in choices else kind.__name__.upper(),
                              choices=choices.get(f.name), help=help_text)
    masking = p.add_argument_group("masking options (MaskingConfig)")
    masking.add_argument("--mlm-probability", type=float, default=argparse.SUPPRESS, metavar="FLOAT",
                         help="share of tokens selected for prediction (default 0.15)")
    masking.add_argument("--mask-replace-prob", type=float, default=argparse.SUPPRESS, metavar="FLOAT",
                         help="share of selected tokens replaced by [MASK] (default 0.8)")
    masking.add_argument("--random-replace-prob", type=float, default=argparse.SUPPRESS, metavar="FLOAT",
                         help="share of selected tokens replaced by a random token (default 0.1)")
    masking.add_argument("--masking-strategy", choices=STRATEGIES, default=argparse.SUPPRESS,
                         help="token, whole_word, span or exact_count (default token)")

    b = sub.add_parser("build-default", add_help=False,  # kept to say where the build went
                       help=f"moved: the bundled default model is rebuilt with `{BUILD_COMMAND} --help`")
    b.add_argument("args", nargs=argparse.REMAINDER)
    return parser


# ------------------------------------------------------------------------------------------ config


def _read_config_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"Config file not found: {path}")
    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        elif file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            raise UsageError(f"Config file {path} must end in .json, .yaml or .yml.")
    except UsageError:
        raise
    except Exception as exc:  # JSON or YAML syntax
        raise UsageError(f"Config file {path} could not be read: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"Config file {path} must hold a mapping of option names to values.")
    return data


def resolve(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """(TrainConfig, run options) from defaults, the config file and the flags, in that order."""

    values = _read_config_file(args.config) if args.config else {}
    run = {k: values.pop(k) for k in RUN_KEYS if k in values}
    masking = dict(values.pop("masking", None) or {})
    flags = vars(args)
    for dest, field_name in MASKING_FLAGS.items():
        if dest in flags:
            masking[field_name] = flags[dest]
    for f in dataclasses.fields(TrainConfig):
        if f.name in flags and f.name not in ("masking", "eval_masking"):
            values[f.name] = flags[f.name]
    if masking:
        values["masking"] = masking
    if "eval_masking" in flags:  # the training rule at another selection probability
        rule = values.get("masking") or {}
        rule = dataclasses.asdict(rule) if isinstance(rule, MaskingConfig) else dict(rule)
        values["eval_masking"] = {**rule, **dict(values.get("eval_masking") or {}),
                                  "mlm_probability": flags["eval_masking"]}
    if "max_grad_norm" in values and not values["max_grad_norm"]:
        values["max_grad_norm"] = None
    for key in ("probe_sentences", "probe_answers", "probe_groups", "eval_focus_words"):
        if isinstance(values.get(key), str):
            values[key] = [values[key]]
    for key in RUN_KEYS:
        if flags.get(key) is not None:
            run[key] = flags[key]
    run.setdefault("model", "default")
    run.setdefault("corpus", ["workshop"])
    run.setdefault("output", "runs/mlm")
    if isinstance(run["corpus"], str):
        run["corpus"] = [run["corpus"]]
    config = TrainConfig.from_dict(values)
    return config, run


def read_corpus(paths: Sequence[str]) -> list[str]:
    """Texts from files (one per non-empty line) or the bundled workshop corpus."""

    texts: list[str] = []
    for path in paths:
        if str(path).strip().lower() == "workshop":

            texts.extend(workshop_sentences())
            continue
        file = Path(path)
        try:
            if not file.is_file():
                raise UsageError(f"Corpus file not found: {path}")
            size = file.stat().st_size
            if size > MAX_CORPUS_BYTES:  # checked before reading: the file is never loaded whole
                raise UsageError(f"Corpus file {path} is {size / 1e6:,.0f} MB; the limit is "
                                 f"{MAX_CORPUS_BYTES / 1e6:,.0f} MB. Split it, or train on a part of it.")
            data = file.read_bytes()
        except OSError as exc:
            raise UsageError(f"Corpus file {path} cannot be read: {exc.strerror or exc}") from None
        text = read_text_upload(file.name, data, max_bytes=MAX_CORPUS_BYTES)
        texts.extend(line.strip() for line in text.splitlines() if line.strip())
    if not texts:
        raise UsageError("The corpus is empty.")
    return texts


def prepare_output(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Check the output folder before any training and create it: a run never trains for an hour and
    then fails to save. Refuses a file, and a folder that is not empty unless ``overwrite``."""
    out = Path(path)
    try:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--output {path} is a file, not a folder: pick a folder name.")
        if out.is_dir() and any(out.iterdir()) and not overwrite:
            raise UsageError(f"--output {path} is not empty: pass --overwrite to write into it (its "
                             "config.json, curves and model/ are replaced), or pick another folder.")
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".mlmlab-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--output {path} cannot be written: {exc.strerror or exc}.") from None
    return out


# ------------------------------------------------------------------------------------------ running


def _distributed_setup(device_arg: str | None, use_deepspeed: bool):
    """(device, rank, world size, whether we initialised a process group) from torchrun's environment."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_arg:
        device = torch.device(device_arg)
    elif torch.cuda.is_available():
        device = torch.device("cuda", local if world > 1 else torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if device.type == "cuda" and world > 1 and device.index is None:
        device = torch.device("cuda", local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    initialised = False
    if world > 1 or use_deepspeed:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if use_deepspeed:
            import deepspeed

            deepspeed.init_distributed(dist_backend=backend)
        elif not dist.is_initialized():
            dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
        initialised = True
        rank, world = dist.get_rank(), dist.get_world_size()
    return device, rank, world, initialised


def _write_outputs(out: Path, result, tokenizer, config, run: dict[str, Any], world: int) -> None:

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"train": config.to_dict(), "run": run, "world_size": world},
                                                indent=2), encoding="utf-8")
    rows = curves_table([result])
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with open(out / "curves.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    payload = {"summary": result.summary(), "steps": result.steps, "evals": result.evals, "probes": result.probes,
               "config": config.to_dict(), "world_size": world}
    (out / "curves.json").write_text(json.dumps(_json_safe(payload), indent=1, allow_nan=False),
                                     encoding="utf-8")
    if result.model is not None:
        result.model.save_pretrained(out / "model", safe_serialization=True)
        tokenizer.save_pretrained(out / "model")


def _json_safe(node):
    """Strict JSON: a diverged loss (inf, NaN) becomes null; anything exotic becomes its string."""

    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, dict):
        return {str(k): _json_safe(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_json_safe(v) for v in node]
    if node is None or isinstance(node, (str, int, bool)):
        return node
    return str(node)


def progress_reporter(rank: int, total: int, enabled: bool):
    """(on_event, close) for rank 0: a tqdm bar, or one log line per evaluation."""
    if rank != 0:
        return (lambda event: None), (lambda: None)
    bar = None
    if enabled:
        bar = tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)

    def say(text: str) -> None:
        if bar is not None:
            bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def on_event(event) -> None:
        v = event.values
        if event.kind == "step" and bar is not None:
            bar.update(event.step - bar.n)
            loss = "—" if v.get("loss") is None else f"{v['loss']:.3f}"
            tps = v.get("tokens_per_s") or 0
            bar.set_postfix_str(f"loss {loss}  lr {v['lr']:.2e}  {tps:,.0f} tok/s", refresh=False)
        elif event.kind == "eval" and v.get("loss") is not None:
            mask_loss = "—" if v.get("mask_loss") is None else f"{v['mask_loss']:.4f}"
            say(f"step {event.step:>5}: eval loss {v['loss']:.4f} (MLM perplexity {v['mlm_perplexity']:.2f}; "
                f"[MASK] positions alone {mask_loss})  top-1 {v['top1']:.1%}  top-5 {v['top5']:.1%}")
        elif event.kind == "probe":
            for probe in v["probes"]:
                tops = ", ".join(p["tokens"][0] for p in probe["predictions"])
                say(f"            {probe['text']}  →  {tops}")

    def close() -> None:
        if bar is not None:
            bar.close()

    return on_event, close


def run_train(args: argparse.Namespace) -> int:
    config, run = resolve(args)
    if int(os.environ.get("RANK", "0")) == 0:  # only rank 0 writes (the rank is known before any setup)
        prepare_output(run["output"], overwrite=bool(getattr(args, "overwrite", False)))
    texts = read_corpus(run["corpus"])
    ds_template = None
    if run.get("deepspeed"):
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise UsageError("--deepspeed needs the deepspeed package: pip install deepspeed "
                             "(or drop --deepspeed to train with PyTorch DDP).") from None
        path = Path(run["deepspeed"])
        if not path.is_file():
            raise UsageError(f"DeepSpeed config not found: {path}")
        ds_template = json.loads(path.read_text(encoding="utf-8"))


    device, rank, world, initialised = _distributed_setup(run.get("device"), ds_template is not None)
    stop = threading.Event()
    previous = None

    def on_sigint(signum, frame):  # first Ctrl-C (or SIGTERM): stop and save what was trained; second: abort
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if rank == 0:
            print("\nStopping and saving what was trained (Ctrl-C again to abort)…", file=sys.stderr, flush=True)

    if threading.current_thread() is threading.main_thread():
        # torchrun passes Ctrl-C on to its workers as SIGTERM: both mean "stop cleanly".
        previous = {sig: signal.signal(sig, on_sigint) for sig in (signal.SIGINT, signal.SIGTERM)}
    close = lambda: None  # noqa: E731
    try:
        name = None if run["model"] in ("default", "", None) else run["model"]
        model, tokenizer = models.load_masked_lm(name, device=device)
        on_event, close = progress_reporter(rank, config.steps, not args.no_progress)
        results = train_variants(model, tokenizer, texts, {"run": config}, on_event=on_event, stop=stop,
                                 device=device, deepspeed=ds_template)
        close()
        result = results["run"]
        if rank == 0:
            out = Path(run["output"])
            _write_outputs(out, result, tokenizer, config, run, world)
            s = result.summary()
            state = "stopped early" if result.stopped else "done"
            print(f"{state}: {result.steps_done} steps, {s['tokens_per_s']:,.0f} tokens/s"
                  + ("" if world == 1 else f" over {world} processes")
                  + (f", eval loss {s['eval_loss']:.4f}" if s["eval_loss"] is not None else "")
                  + f"; wrote {out}/", file=sys.stderr)
        return EXIT_INTERRUPTED if result.stopped and stop.is_set() else EXIT_OK
    finally:
        close()
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)
        if initialised:
            if dist.is_initialized():
                dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m mlm_core`; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        if argv[:1] == ["build-default"]:  # the build is a script now: the app and this package never import it
            print(f"The default-model build moved out of the package: run `{BUILD_COMMAND} "
                  f"{' '.join(argv[1:]) or '--help'}` from the repository root.", file=sys.stderr)
            return EXIT_USAGE
        args = parser.parse_args(argv)
        if args.command == "train":
            return run_train(args)
        parser.error(f"unknown command {args.command!r}")
    except (UsageError, MLMLabError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_FAILED
