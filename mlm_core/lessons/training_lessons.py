"""Three Training-page lessons built on the one loop's variants: the masking rate measured fairly, bugs that
train beside a clean twin, and the guess at one masked position over time (a filmstrip).

Each turns a run's recorded curves (``TrainResult``s, or a UI run's ``Curves``: rows of "step", "eval" and
"probe") into the sentences and rows the page shows. Nothing here trains or loads a model; the variants
are built from the lesson's ``TrainConfig`` by its record (``training_registry``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mlm_core.errors import InputError
from mlm_core.masking import MaskingConfig
from mlm_core.training import TrainConfig

Rows = Sequence[Mapping[str, Any]]

# --------------------------------------------------------------------------------------------
# 1. Should you mask 15%?
# --------------------------------------------------------------------------------------------

MASK_RATES = (0.15, 0.3, 0.4)  # BERT's 15%; MosaicBERT's and ModernBERT's 30%; 40% (Wettig et al. 2023)
RATE_CHOICES = (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8)
MAX_RATES = 3  # three model copies side by side: three times one run's work (benchmark P7 times it)
# Of the selected tokens: [MASK] / random / unchanged. BERT's 80/10/10 first.
SPLITS = ((0.8, 0.1), (1.0, 0.0), (0.8, 0.0), (0.8, 0.2), (0.5, 0.25))
# The frozen evaluation mask every variant is scored on: BERT's 15% with 80/10/10, token by token, as
# ModernBERT's pre-training recipe evaluates its 30% run ("We always evaluate at 15% masking for consistent
# comparison": github.com/AnswerDotAI/ModernBERT, yamls/modernbert/modernbert-base-pretrain.yaml).
EVAL_RULE = MaskingConfig()

# The run-to-run spread of the default run, measured by benchmark P7 (benchmarks/p7_lessons.py, 3 seeds, 1-3: not
# the page's default 0, so a learner's default run is not part of the spread it is set beside;
# tests/test_training_lessons.py checks these against benchmarks/results/p7_lessons.json): how far 40% ended below
# 15% on the frozen mask at the last evaluation, smallest and largest over the seeds, and in how many seeds 40%
# had the lowest loss of the three rates. Keyed by "fine-tune" (the bundled model) and "scratch" (the tiny BERT).
RATE_LEAD_SPREAD = {"fine-tune": (0.2, 0.33, 3, 3), "scratch": (0.05, 0.09, 3, 2)}
SPREAD_PAIR = ("mask 40%", "mask 15%")

PAPERS_ON_RATE = (
    "At scale: Wettig et al. (2023, EACL), \"Should You Mask 15% in Masked Language Modeling?\", find in their "
    "abstract that masking 40% outperforms 15% for BERT-large size models on GLUE and SQuAD, that 80% still "
    "preserves 95% of the fine-tuning performance, and that a higher rate has two distinct effects: more "
    "corruption (a harder task) and more predictions (which benefit optimization). MosaicBERT (Portes et al. "
    "2023) trains with a 30% masking ratio (its abstract); ModernBERT (Warner et al. 2024) trains at 30% and "
    "evaluates at 15% (its pre-training config), as this lesson does. Those are models of 100M+ parameters "
    "trained for days; this run is minutes on a CPU, so it shows the method, not their numbers."
)


def rate_name(p: float) -> str:
    """A masking-rate variant's name.

    >>> rate_name(0.3)
    'mask 30%'
    """
    return f"mask {p:.0%}"


def rate_variants(base: TrainConfig, rates: Sequence[float] = MASK_RATES,
                  split: tuple[float, float] = SPLITS[0]) -> dict[str, TrainConfig]:
    """The same model at each masking rate, on identical batches, all scored on one frozen 15% eval mask.

    Every variant keeps the base's strategy; `split` is the ([MASK], random) share of its selected tokens.

    >>> v = rate_variants(TrainConfig(steps=5))
    >>> [(n, c.masking.mlm_probability, c.held_out_masking.mlm_probability) for n, c in v.items()]
    [('mask 15%', 0.15, 0.15), ('mask 30%', 0.3, 0.15), ('mask 40%', 0.4, 0.15)]
    """
    rates = sorted(dict.fromkeys(float(p) for p in rates))
    if not rates:
        raise InputError("Choose at least one masking rate.")
    if len(rates) > MAX_RATES:
        raise InputError(f"Choose at most {MAX_RATES} masking rates: each trains its own copy of the model.")
    mask, random = split
    return {rate_name(p): replace(base, masking=replace(base.masking, mlm_probability=p, mask_replace_prob=mask,
                                                        random_replace_prob=random), eval_masking=EVAL_RULE)
            for p in rates}


def latest_common(evals: Mapping[str, Rows], key: str = "loss") -> tuple[int, dict[str, float]] | None:
    """The last evaluation step every variant has reached, and each one's `key` there."""
    steps = [{r["step"]: r.get(key) for r in rows if r.get(key) is not None} for rows in evals.values()]
    if not steps or not all(steps):
        return None
    common = set.intersection(*(set(s) for s in steps))
    if not common:
        return None
    at = max(common)
    return at, {name: s[at] for name, s in zip(evals, steps)}


# Two rates closer than this on the frozen mask are called level, not a lead: below the run-to-run spread of one
# lesson's numbers, the range the 40%-vs-15% gap spans over benchmark P7's seeds (RATE_LEAD_SPREAD's largest minus
# smallest, for either kind; tests/test_training_lessons.py checks that LEVEL_NATS stays below both).
LEVEL_NATS = 0.03


def rate_verdict(evals: Mapping[str, Rows], kind: str, default_settings: bool = True, end_step: int | None = None,
                 finished: bool = True) -> str:
    """One sentence from the run: which rate leads on the frozen 15% mask and by how much, then 40% against 15%
    beside the spread of the default run over seeds (benchmark P7). `kind`: "fine-tune" or "scratch";
    `default_settings`: the run has the lesson's default settings (the spread was measured for those alone);
    `end_step`: the step the run was set to end at, and `finished`: it has ended. The spread is the gap at the end
    of the default run, so only a gap at `end_step` is set beside it (a run still going, or cut short by Stop or
    the time limit, is said to be so, issue 43).

    >>> rows = lambda *v: [{"step": 10 * i, "loss": x} for i, x in enumerate(v)]
    >>> print(rate_verdict({"mask 15%": rows(5.0, 3.0), "mask 40%": rows(5.0, 2.75)}, "fine-tune").split(". ")[0])
    At step 10, on the frozen 15% mask (the same positions for every variant), mask 40% leads with a held-out loss of 2.75, 0.25 nats below mask 15% (3.00 for mask 15%)
    """
    found = latest_common(evals)
    if found is None or len(found[1]) < 2:
        return ""
    at, losses = found
    order = sorted(losses, key=losses.get)
    lead = order[0]
    ref = "mask 15%" if "mask 15%" in losses and lead != "mask 15%" else order[1]
    others = ", ".join(f"{losses[n]:.2f} for {n}" for n in order[1:])
    runner = order[1]
    if at and losses[runner] - losses[lead] < LEVEL_NATS:  # too close to call a lead
        rest = ", ".join(f"{losses[n]:.2f} for {n}" for n in order[2:])  # the runner-up is named once, here
        text = (f"At step {at}, on the frozen 15% mask (the same positions for every variant), {lead} and {runner} are "
                f"level ({losses[lead]:.2f} and {losses[runner]:.2f}: less than {LEVEL_NATS} nats apart, too close to "
                f"call on one run{'; ' + rest if rest else ''})")
    else:
        text = (f"At step {at}, on the frozen 15% mask (the same positions for every variant), {lead} leads with a "
                f"held-out loss of {losses[lead]:.2f}, {losses[ref] - losses[lead]:.2f} nats below {ref} ({others})")
    spread = RATE_LEAD_SPREAD.get(kind)
    high, low = SPREAD_PAIR
    if at == 0:
        return text + ". At step 0 every variant has the same weights, so the losses are equal."
    if spread is None or high not in losses or low not in losses:
        return text + "."
    lo, hi, seeds, led = spread
    gap = losses[low] - losses[high]
    if end_step is not None and at < end_step:
        if finished:
            return text + (f". This run stopped at step {at} of {end_step} (Stop, or the time limit), so its gap is not "
                           f"set beside the spread benchmark P7 measured at the end of the default run.")
        return text + f". The spread over seeds is for the end of the run (step {end_step}): it comes then."
    text += (f". Over {seeds} other seeds of this lesson's default run (benchmark P7; not the page's seed 0), {high} "
             f"ended {lo:.2f} to {hi:.2f} "
             f"nats below {low} and had the lowest loss in {led} of them; here it is {gap:.2f} below")
    if not default_settings:
        return text + ", but this run's settings are not the defaults, so that spread says little about it."
    inside = lo - 0.005 <= gap <= hi + 0.005  # the spread's bounds are rounded to 0.01
    return text + (": within that spread." if inside else ": outside that spread.")


def rate_train_note(steps: Mapping[str, Rows], window: int = 10) -> str:
    """Why the training curves of different rates are not comparable, with this run's numbers.

    >>> rows = lambda v: [{"step": i + 1, "loss": v, "masked_tokens": 10} for i in range(12)]
    >>> rate_train_note({"mask 15%": rows(3.0), "mask 40%": rows(3.4)}).split(":")[0]
    'Training loss, mean of the last 10 steps'
    """
    parts = []
    for name, rows in steps.items():
        losses = [r["loss"] for r in rows if r.get("loss") is not None][-window:]
        masked = [r.get("masked_tokens") for r in rows[-window:] if r.get("masked_tokens")]
        if losses:
            parts.append(f"{name} {sum(losses) / len(losses):.2f}"
                         + (f" over about {sum(masked) / len(masked):.0f} positions a step" if masked else ""))
    if len(parts) < 2:
        return ""
    rates = [name.removeprefix("mask ").removesuffix("%") for name in steps]
    share = ", ".join(rates[:-1]) + f" or {rates[-1]}"
    return (f"Training loss, mean of the last {window} steps: " + "; ".join(parts) + ". These are not comparable: "
            f"each is a mean over its own positions ({share} of every 100 tokens), and at a higher rate each guess "
            "has fewer of its neighbours to go on, a harder question. Compare the variants on the frozen mask.")


# --------------------------------------------------------------------------------------------
# 2. Bugs that train
# --------------------------------------------------------------------------------------------

CLEAN, TWIN = "clean run", "buggy twin"


@dataclass(frozen=True)
class TrainedBug:
    """A bug of `training.bugs`, as the lesson shows it."""

    key: str
    title: str
    code: str  # the buggy line, as it was written
    reported: str  # where it was reported (library issue or tutorial), checked to exist
    museum: str  # the Bug museum exhibit it trains ("" when the museum has none)
    look_for: str  # what to look for in a real run's curves


TRAINED_BUGS: dict[str, TrainedBug] = {b.key: b for b in (
    TrainedBug("labels_never_ignored", "Loss over every token (labels never set to -100)",
               "labels = original_ids.clone()   # and never labels[~selected] = -100 (original_ids: before masking)",
               "huggingface/transformers#20797: a user who had not set the unselected labels to -100 saw training "
               "losses of 0.10-0.20, about 1.6 once fixed; #2946 asks why the collator sets labels[~masked] = -100",
               "labels_never_ignored",
               "a training loss far below the held-out loss from the first steps, while the held-out loss is no "
               "better: most targets are tokens the model can see in its input (and padding)."),
    TrainedBug("special_tokens_masked", "Special tokens hard-coded as ids 0 and 1",
               "special_tokens_mask = torch.isin(original_ids, torch.tensor([0, 1]))   # [CLS]=101, [SEP]=102 left open",
               "huggingface/transformers#1395: run_lm_finetuning.py masked [CLS] and [SEP] too (BERT and RoBERTa); "
               "AnswerDotAI/ModernBERT#212 (open) reports that its mlm_masking treats special tokens as candidates, "
               "and PR #218 (open, not merged) would exclude them",
               "special_ids_hardcoded",
               "a twin above the clean run for the first steps (a hidden [CLS] or [SEP] costs the model about 11 "
               "nats until it learns where they go), then curves that stay together: [CLS] and [SEP] are 2 of every "
               "~60 tokens and easy once learned, so it shows in the batch (the museum's audit), not in the late "
               "loss."),
    TrainedBug("random_share_misread", "The conditional 0.5 read as \"50% random\" and \"fixed\" to 0.1",
               "indices_random = torch.bernoulli(torch.full(shape, 0.1)).bool() & masked & ~indices_replaced",
               "huggingface/transformers#10285 and #11838 read the 0.5 as 50% random; PR #21629 proposed 0.1 and was "
               "closed unmerged after the maintainer answered it would give \"10% of the remaining 20%\"",
               "random_overwritten",
               "a training loss below the clean twin's while the held-out loss is not: 18% of the selected tokens "
               "are shown unchanged (the answer is in the input), only 2% are random."),
    TrainedBug("eval_remasked", "Evaluation re-masked at random on every pass",
               "eval_batch = collator(held_out)   # a fresh random mask at every evaluation",
               "facebookresearch/XLM#151: at evaluation time XLM always uses the same random generator \"so the "
               "evaluation perplexities are comparable\"; huggingface/transformers PR #1633 masked the evaluation "
               "\"using just the same masked scheme as in a training code\"",
               "",
               "a held-out curve that jumps up and down between evaluations by more than the model changes: the "
               "positions it is scored on change every time."),
    TrainedBug("eval_dropout", "Dropout left on at evaluation (no model.eval())",
               "loss = evaluate(model, held_out)   # model still in train mode: dropout on",
               "google-research/pegasus#134: evaluation results changed on every run of the same checkpoint; the "
               "maintainer: \"If training is True, the dropout layers may cause non-deterministic outcome\"",
               "",
               "a held-out loss above what the model really does, at every evaluation, and a different number each "
               "time the same weights are evaluated."),
)}
_REF = re.compile(r"(?:(?P<repo>[A-Za-z0-9-]+/[A-Za-z0-9._-]+)(?: PR )?|(?<![\w/])(?:PR )?)#(?P<n>\d+)")


def reported_markdown(text: str) -> str:
    """A bug's `reported` text with each reference ("owner/repo#N", "owner/repo PR #N", and a bare "#N" or
    "PR #N" after one, in the same repository) as a markdown link to its GitHub issue or pull request
    (GitHub's issues/N address opens a pull request too).

    >>> reported_markdown("huggingface/transformers#20797 saw it; #2946 asks why")
    '[huggingface/transformers#20797](https://github.com/huggingface/transformers/issues/20797) saw it; [#2946](https://github.com/huggingface/transformers/issues/2946) asks why'
    """
    repo = [None]

    def link(m: re.Match) -> str:
        repo[0] = m.group("repo") or repo[0]
        if repo[0] is None:
            return m.group(0)
        return f"[{m.group(0)}](https://github.com/{repo[0]}/issues/{m.group('n')})"

    return _REF.sub(link, text)


MUSEUM_TO_BUG = {b.museum: b.key for b in TRAINED_BUGS.values() if b.museum}
DEFAULT_BUG = "labels_never_ignored"
# The Training page's widgets a link from the Bug museum sets (pages/training.py uses the same keys).
LESSON_KEY, BUG_KEY = "training_lesson", "training_bug"


def museum_link(exhibit_key: str) -> tuple[str, str] | None:
    """(bug, button label) for a Bug museum exhibit that the Training page trains beside a clean twin, else None.

    >>> print(museum_link("labels_never_ignored")[1])
    🏋️ Train it: watch this bug's curves beside a clean twin (Training page)
    >>> museum_link("weighted_mean") is None
    True
    """
    bug = MUSEUM_TO_BUG.get(exhibit_key)
    return None if bug is None else (bug, "🏋️ Train it: watch this bug's curves beside a clean twin (Training page)")


def training_link_state(bug: str) -> dict[str, str]:
    """The session-state values that open the Training page on the lesson "Bugs that train" with `bug` chosen.

    >>> training_link_state("eval_dropout")
    {'training_lesson': 'bugs', 'training_bug': 'eval_dropout'}
    """
    if bug not in TRAINED_BUGS:
        raise InputError(f"Unknown bug {bug!r}; choose one of {', '.join(TRAINED_BUGS)}.")
    return {LESSON_KEY: "bugs", BUG_KEY: bug}


def bug_variants(base: TrainConfig, bug: str) -> dict[str, TrainConfig]:
    """A clean run and its buggy twin: same weights, batches, masks and seed; only the bug differs.

    >>> v = bug_variants(TrainConfig(steps=5), "eval_dropout")
    >>> list(v), v["buggy twin"].bug
    (['clean run', 'buggy twin'], 'eval_dropout')
    """
    if bug not in TRAINED_BUGS:
        raise InputError(f"Unknown bug {bug!r}; choose one of {', '.join(TRAINED_BUGS)}.")
    return {CLEAN: replace(base, bug=""), TWIN: replace(base, bug=bug)}


def _tail_mean(rows: Rows, key: str = "loss", window: int = 10, upto: int | None = None) -> float | None:
    """The mean of the last ``window`` values of ``key`` (up to step ``upto``, when given)."""
    values = [r[key] for r in rows if r.get(key) is not None and math.isfinite(r[key])
              and (upto is None or r["step"] <= upto)][-window:]
    return sum(values) / len(values) if values else None


EARLY_STEPS = 10  # the first steps, where a twin that must learn something new (hidden [CLS]/[SEP]) runs above


def bug_signature(bug: str, steps: Mapping[str, Rows], evals: Mapping[str, Rows]) -> str:
    """One sentence from the run on the bug's signature: the numbers of the two twins, then what to look for.

    >>> steps = {CLEAN: [{"step": 1, "loss": 2.3}], TWIN: [{"step": 1, "loss": 0.5}]}
    >>> evals = {CLEAN: [{"step": 0, "loss": 4.9}, {"step": 10, "loss": 2.5}],
    ...          TWIN: [{"step": 0, "loss": 4.9}, {"step": 10, "loss": 2.4}]}
    >>> bug_signature("labels_never_ignored", steps, evals).split("; h")[0]
    "At step 10, the buggy twin's training loss is 0.50 (the clean run 2.30; each the mean of the last steps up to 10) and its held-out loss on the frozen mask 2.40 (the clean run 2.50)"
    """
    info = TRAINED_BUGS.get(bug)
    clean_steps, twin_steps = steps.get(CLEAN) or [], steps.get(TWIN) or []
    clean_evals, twin_evals = evals.get(CLEAN) or [], evals.get(TWIN) or []
    if info is None or not twin_evals or not clean_evals:
        return ""
    at = min(clean_evals[-1]["step"], twin_evals[-1]["step"])  # the last evaluation both have: compare like with like
    c_train, t_train = _tail_mean(clean_steps, upto=at), _tail_mean(twin_steps, upto=at)
    c_held = next((e.get("loss") for e in reversed(clean_evals) if e["step"] == at), None)
    t_held = next((e.get("loss") for e in reversed(twin_evals) if e["step"] == at), None)
    if bug in ("eval_remasked", "eval_dropout"):
        pairs = [(e["step"], e["reported_loss"] - e["loss"]) for e in twin_evals
                 if e.get("reported_loss") is not None and e.get("loss") is not None]
        if not pairs:
            return ""
        gaps = [g for _, g in pairs]
        same = (c_train is not None and t_train is not None and abs(c_train - t_train) < 1e-9)
        head = ("Its training is the clean run's, step for step (the same weights: the bug is only in what it "
                "reports). " if same else "")
        text = (f"{head}At the same weights, the buggy evaluation reported {min(gaps):+.2f} to {max(gaps):+.2f} nats "
                f"from the frozen mask's held-out loss over {len(gaps)} evaluations")
        if bug == "eval_remasked":
            flips = sum((a > 0) != (b > 0) for a, b in zip(gaps, gaps[1:]))
            # Two checkpoints' reported losses differ by their gaps' difference on top of what the model changed: up
            # to the widest spread of the gaps, max - min (not the largest gap alone).
            text += (f" (above and below it: the sign changed {flips} time{'s' if flips != 1 else ''}), so a held-out "
                     "gain smaller than "
                     f"{max(gaps) - min(gaps):.2f} nats between two checkpoints could be the mask alone.")
        else:
            text += f" (on average {sum(gaps) / len(gaps):+.2f}): dropout switched off part of the model it scored."
        return f"{text} Look for {info.look_for}"
    if None in (c_train, t_train, c_held, t_held) or not at:
        return ""
    text = (f"At step {at}, the buggy twin's training loss is {t_train:.2f} (the clean run {c_train:.2f}; each the mean "
            f"of the last steps up to {at}) and its held-out loss on the frozen mask {t_held:.2f} (the clean run "
            f"{c_held:.2f}); held-out minus training loss: {t_held - t_train:+.2f} for the twin, {c_held - c_train:+.2f} "
            "for the clean run.")
    if bug == "special_tokens_masked":
        clean_by = {r["step"]: r["loss"] for r in clean_steps if r.get("loss") is not None}
        gaps = [(r["step"], r["loss"] - clean_by[r["step"]]) for r in twin_steps
                if r.get("loss") is not None and r["step"] in clean_by]
        early = [g for s, g in gaps if s <= EARLY_STEPS]
        late = [g for s, g in gaps if s <= at][-EARLY_STEPS:]
        if early and late and gaps[-1][0] > EARLY_STEPS:
            text += (f" Over the first {EARLY_STEPS} steps the twin ran up to {max(early):+.2f} nats above the clean "
                     f"run; over the last {len(late)} up to step {at}, {sum(late) / len(late):+.2f} on average.")
    return f"{text} Look for {info.look_for}"


# --------------------------------------------------------------------------------------------
# 3. The guess over time
# --------------------------------------------------------------------------------------------

FILMSTRIP_TOP = 5
YOURS = "yours"  # the probe set of a sentence the learner types (TrainConfig.probe_groups)


@dataclass(frozen=True)
class Frame:
    """The model's top guesses at one masked position at one moment (an evaluation step, or "base"/"trained")."""

    label: str  # "0", "10", ... or a model's name
    tokens: tuple[str, ...]
    probs: tuple[float, ...]
    answer: str | None
    answer_rank: int | None  # 1 = the first guess, among all V tokens
    answer_prob: float | None


def probe_choices(entry: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(index, label) of every probe with a known answer at one evaluation (`{"step", "probes"}`)."""
    out = []
    for i, probe in enumerate(entry.get("probes", [])):
        pred = probe["predictions"][0]
        if pred.get("answer"):
            out.append((i, f"{probe['text']}  →  {pred['answer']}"))
    return out


def filmstrip_frames(probes: Rows, index: int) -> list[Frame]:
    """One probe's first masked position at every evaluation of a run (one variant's `{"step", "probes"}` rows)."""
    frames = []
    for entry in probes:
        if index >= len(entry["probes"]):
            continue
        p = entry["probes"][index]["predictions"][0]
        frames.append(Frame(str(entry["step"]), tuple(p["tokens"][:FILMSTRIP_TOP]),
                            tuple(p["probs"][:FILMSTRIP_TOP]), p.get("answer"), p.get("answer_rank"),
                            p.get("answer_prob")))
    return frames


def comparison_index(comparison, position: int | None) -> int:
    """The index, among a ``ModelComparison``'s selected positions, of sequence position `position` (0 if absent)."""
    return next((i for i, p in enumerate(comparison.base.positions) if p.position == position), 0)


def comparison_frames(comparison, position_index: int, labels: tuple[str, str] = ("base", "trained")) -> list[Frame]:
    """Two frames, before and after training, from ``lessons.inside.compare_models``'s `ModelComparison`."""
    frames = []
    for label, preds in zip(labels, (comparison.base, comparison.trained)):
        p = preds.positions[position_index]
        answer = p.true_token if preds.known_truth else None
        frames.append(Frame(label, tuple(p.top_tokens[:FILMSTRIP_TOP]), tuple(p.top_probs[:FILMSTRIP_TOP]),
                            answer, p.true_rank if answer else None, p.true_prob if answer else None))
    return frames


def filmstrip_summary(frames: Sequence[Frame], unit: str = "step") -> str:
    """One sentence on the climb: the answer's rank first and last, and when it first became the first guess.

    >>> f = [Frame(s, ("a",), (0.5,), "x", r, 0.1) for s, r in (("0", 2000), ("10", 3), ("20", 1), ("30", 1))]
    >>> filmstrip_summary(f)
    "The hidden word 'x' went from rank 2,000 at step 0 to rank 1 at step 30; it first became the first guess at step 20."
    """
    ranked = [f for f in frames if f.answer_rank is not None]
    if not ranked:
        return ""
    first, last = ranked[0], ranked[-1]
    where = (lambda f: f"{unit} {f.label}") if unit else (lambda f: f"the {f.label} model")
    text = (f"The hidden word '{first.answer}' went from rank {first.answer_rank:,} at {where(first)} to rank "
            f"{last.answer_rank:,} at {where(last)}")
    top = next((f for f in ranked if f.answer_rank == 1), None)
    if top is None:
        return text + "; it never became the first guess."
    if top is first:
        return text + "; it was the first guess from the start."
    return text + f"; it first became the first guess at {where(top)}."


def learner_probe(sentence: str, answer: str, tokenizer) -> tuple[str, str]:
    """A learner's probe: a sentence with exactly one [MASK] and its hidden word, one token of this vocabulary.

    Raises InputError with a message a learner can act on.
    """
    sentence, answer = (sentence or "").strip(), (answer or "").strip()
    if sentence.count("[MASK]") != 1:
        raise InputError("Type a sentence with exactly one [MASK] where the hidden word goes.")
    if len(sentence) > 300:
        raise InputError("Keep the sentence under 300 characters.")
    pieces = tokenizer.tokenize(answer) if answer else []
    if len(pieces) != 1:
        raise InputError(f"The hidden word {answer!r} must be one token of this vocabulary "
                         f"(it is {len(pieces)} token(s){': ' + ' '.join(pieces) if pieces else ''}); try a "
                         "shorter or more common word.")
    return sentence, pieces[0]


def bug_of(configs: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The bug a run's twin carries ("" for none)."""
    return next((c["bug"] for c in (configs or {}).values() if c.get("bug")), "")


def split_text(mask: float, random: float) -> str:
    """A replacement split as the page says it.

    >>> split_text(0.8, 0.1)
    '80 / 10 / 10'
    """
    return f"{mask:.0%} / {random:.0%} / {max(0.0, 1.0 - mask - random):.0%}".replace("%", "")
