"""Issue 43's dev loop: which data and recipe make the facts lesson bind Veldoria's facts to its name.

    python -m benchmarks.p7_binding_dev --name contrast2 --contrast 2 --seeds 0 1
    python -m benchmarks.p7_binding_dev --name baseline --seeds 0 1

Each run is the facts lesson as the page starts it (``training_view.default_run``: the bundled model, its
defaults), changed by one or more levers, and is scored on the DEV sets only, the sets the recipe is chosen on:
the gazetteer's ``dev-probes`` (30 questions in new words about Veldoria), ``other-name-dev-probes`` (the same
30 about Quorvia, a country no text names; dev binding = the first minus Veldoria's word given for Quorvia) and
``control-dev-probes`` (15 questions about real countries: how many get a Veldoria word, how many real answers
known at step 0 are still known). The reported sets (new-words, other-name with Pellastra, control) are not
computed here: benchmark P7 reports them, for the recipe chosen here, at seeds 0, 1 and 2.

Levers (each measured alone first, then together): ``--contrast N`` adds the first N contrast countries of
``assets/contrast_countries.txt`` (other invented countries with different facts in the same kinds of sentence),
``--steps``, ``--focus`` (the facts' words' masking share), ``--lr``, ``--replay N`` (N sentences of real English
from the workshop corpus mixed in). ``default_run`` carries the lesson's twin countries now, so a run without levers
is the shipped recipe. Every run appends one JSON line to
``benchmarks/results/p7_binding_dev.jsonl``; docs/lessons.md keeps the table.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from benchmarks._common import RESULTS_DIR

import torch  # noqa: E402

from mlm_core import jobs  # noqa: E402
from mlm_core.bundled import TWINS, contrast_answers, contrast_countries, gazetteer, twin_documents  # noqa: E402
from mlm_core.lessons.training_view import contrast_sentences, probe_set_scores, workshop_texts  # noqa: E402
from mlm_core.lessons.training_registry import default_run  # noqa: E402
from mlm_core.models import load_masked_lm  # noqa: E402
from mlm_core.training import train_variants  # noqa: E402

LOG = RESULTS_DIR / "p7_binding_dev.jsonl"
DEV_SETS = {"new_dev": "dev_probes", "other_dev": "other_name_dev_probes", "control_dev": "control_dev_probes"}


def dev_scores(curves) -> dict:
    """The dev sets' counts at the first and the last evaluation of one variant's curves."""
    scores = {s.group: s for s in probe_set_scores(curves.probes)}
    new, other, control = scores["new_dev"], scores["other_dev"], scores["control_dev"]
    first, last = curves.probes[0]["probes"], curves.probes[-1]["probes"]
    known = [(b["predictions"][0], a["predictions"][0]) for b, a in zip(first, last) if a["group"] == "control_dev"]
    kept = sum(b["tokens"][0] == b["answer"] and a["tokens"][0] == a["answer"] for b, a in known)
    known_then = sum(b["tokens"][0] == b["answer"] for b, _ in known)
    loss = [e["loss"] for e in curves.evals]
    return {"new_top1": new.top1_now, "new_top5": new.top5_now, "other_veldoria_top1": other.top1_now,
            "other_veldoria_top5": other.top5_now, "binding_top1": new.top1_now - other.top1_now,
            "binding_top5": new.top5_now - other.top5_now, "probes": new.probes,
            "control_flips": control.facts_now, "control_known_then": known_then, "control_kept": kept,
            "control_probes": control.probes, "loss_start": loss[0], "loss_end": loss[-1],
            "focus_loss_end": curves.evals[-1].get("focus_loss")}


def one_run(model, tokenizer, args, seed: int) -> dict:
    texts, variants = default_run(model_is_trained=True)
    g = gazetteer()
    probes = [p for field in DEV_SETS.values() for p in getattr(g, field)]
    groups = [group for group, field in DEV_SETS.items() for _ in getattr(g, field)]
    train = list(texts.train) + contrast_sentences(args.contrast)
    if args.replay:  # replay: real English from the workshop corpus (a fixed shuffle), mixed into the batches
        import random
        pool = list(workshop_texts().train)
        random.Random(0).shuffle(pool)
        train += pool[:args.replay]
    generated = []
    if args.generated:  # experiment: countries made from templates (/tmp/gen/gen.py), not a bundled text
        import sys
        sys.path.insert(0, "/tmp/gen")
        import gen
        generated = gen.generate(args.generated)
        train += [s for _, _, docs in generated for doc in docs for s in doc]
    if args.twins:  # the lesson's twin countries (bundled.TWINS): Veldoria's own sentences, name and answers swapped
        generated = [(name, dict(enumerate(answers)), [list(s for doc in twin_documents(i) for s in doc)])
                     for i, (name, _, answers) in enumerate(TWINS[:args.twins])]
        train += [s for _, _, docs in generated for doc in docs for s in doc]
    if args.clones:  # experiment: Veldoria's own sentences, name and answers swapped
        import sys
        sys.path.insert(0, "/tmp/gen")
        import gen
        generated = gen.clones(args.clones, list(texts.train))
        train += [s for _, _, docs in generated for doc in docs for s in doc]
    (name, cfg), = variants.items()
    changes = dict(seed=seed, probe_sentences=tuple(s for s, _ in probes), probe_answers=tuple(a for _, a in probes),
                   probe_groups=tuple(groups))
    if args.steps:
        changes["steps"] = args.steps
    if args.focus is not None:
        changes["focus_mlm_probability"] = args.focus
    if args.lr:
        changes["learning_rate"] = args.lr
    if args.focus_contrast:  # the contrast countries' answers are masked as often as Veldoria's
        extra = [w for name in list(contrast_countries())[:args.contrast] for w in contrast_answers()[name]]
        extra += [w for _, facts, _ in generated for w in facts.values()]  # (twins: their answers, by index)
        changes["eval_focus_words"] = tuple(dict.fromkeys(tuple(cfg.eval_focus_words) + tuple(extra)))
    cfg = replace(cfg, **changes)
    cfg = replace(cfg, eval_every=cfg.steps)  # step 0 and the end
    started = time.perf_counter()
    result = train_variants(model, tokenizer, train, {name: cfg}, eval_texts=texts.held_out)[name]
    seconds = time.perf_counter() - started
    return {"seed": seed, "seconds": round(seconds, 1), **dev_scores(result)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="the recipe's name in the log")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--contrast", type=int, default=0, help="contrast countries added to the training text")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--focus", type=float, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--generated", type=int, default=0, help="experiment: N countries made from templates")
    parser.add_argument("--clones", type=int, default=0, help="experiment: N countries in Veldoria's own sentences")
    parser.add_argument("--twins", type=int, default=0, help="the lesson's first N twin countries (bundled.TWINS)")
    parser.add_argument("--replay", type=int, default=0, help="N workshop-corpus sentences mixed into the text")
    parser.add_argument("--focus-contrast", action="store_true",
                        help="mask the contrast countries' answers as often as Veldoria's (the facts' words)")
    args = parser.parse_args(argv)
    jobs.cap_threads(jobs.default_threads())
    model, tokenizer = load_masked_lm(None, device="cpu")
    for seed in args.seeds:
        row = {"name": args.name, "contrast": args.contrast, "steps": args.steps, "focus": args.focus, "lr": args.lr,
               "focus_contrast": args.focus_contrast, "generated": args.generated, "clones": args.clones, "twins": args.twins, "replay": args.replay, **one_run(model, tokenizer, args, seed),
               "threads": torch.get_num_threads(), "at": time.strftime("%Y-%m-%d %H:%M")}
        print(json.dumps(row), flush=True)
        Path(LOG).parent.mkdir(parents=True, exist_ok=True)
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
