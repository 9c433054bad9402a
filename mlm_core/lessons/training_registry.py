"""The Training page's lessons, one record each: what a lesson starts with and why, the variants it races, the
choices a learner makes for it, what the page says before and after its run, and the question it asks the class.

The page and the view-model ask a lesson's record (``TRAINING_LESSONS[key]``), never its name: a new lesson is
one more record here (and, if it draws something of its own, its figure). A record's functions take plain values
(a ``TrainConfig``, a run's snapshot and the page's record of it) and return plain values (variants, ``Block``s of
text, an ``Ask``), so tests and benchmarks build a learner's run exactly as the page does.

>>> TRAINING_LESSONS["mask_rate"].title
'Should you mask 15%? The same model at 15%, 30% and 40%'
>>> sorted(lesson_variants("bugs", TrainConfig(steps=5), from_scratch=True, bug="eval_dropout"))
['buggy twin', 'clean run']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mlm_core.bundled import TWINS, gazetteer
from mlm_core.classroom import Ask, Reveal, model_words
from mlm_core.errors import InputError
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons.training_lessons import (BUG_KEY, DEFAULT_BUG, LEVEL_NATS, MASK_RATES, MAX_RATES,
                                               PAPERS_ON_RATE, RATE_CHOICES, SPLITS, TRAINED_BUGS, bug_of,
                                               bug_signature, bug_variants, latest_common, rate_train_note, rate_verdict,
                                               rate_variants, reported_markdown, split_text)
from mlm_core.lessons.training_view import (FACT_MASKING, SOURCES, TWIN_COUNTRIES, Default, Texts,
                                            binding_comparison, common_defaults, gazetteer_texts, probe_set_scores)
from mlm_core.loss_registry import FULL, NAMES, get, records
from mlm_core.training import TrainConfig, check_variants

TEXT = LessonText("training")  # mlm_core/lessons/text/training.md: the lessons' longer explanations
Block = tuple[str, str]  # (how the page shows it: "markdown", "caption", "info", "warning" or "code"; its text)


@dataclass(frozen=True)
class Choice:
    """One widget of a lesson's own (the rates to race, the bug, ...): the page draws it, and its value goes to the
    record's ``variants`` as ``choices[arg]``."""

    arg: str  # the keyword its value is passed as
    kind: str  # "multiselect", "selectbox" or "select_slider" (Streamlit's widget of that name)
    label: str
    key: str  # the widget's session-state key
    options: Sequence[Any]
    default: Any = None  # None: the first option (selectbox)
    help: str | Callable[[], str] = ""  # or a function of nothing, for a help that lists what is registered now
    format: Callable[[Any], str] = str
    value: Callable[[Any], Any] = lambda v: v  # the widget's value -> the choice (an index -> a split)


def _nothing(*args: Any, **kwargs: Any) -> list:
    return []


def _no_defaults(from_scratch: bool) -> dict[str, Default]:
    return {}


def _no_problem(texts: Texts | None, from_scratch: bool) -> str:
    return ""


@dataclass(frozen=True)
class RunView:
    """What a lesson's verdict reads about a run: its snapshot's curves by variant and the page's record of it."""

    steps: Mapping[str, Sequence[Mapping[str, Any]]]
    evals: Mapping[str, Sequence[Mapping[str, Any]]]
    probes: Mapping[str, Sequence[Mapping[str, Any]]]
    configs: Mapping[str, Mapping[str, Any]]
    total_steps: int
    finished: bool
    from_scratch: bool = False
    default_settings: bool = False
    twins: int = 0  # the twin countries the run read (its probe scores count their answers as invented)

    @classmethod
    def of(cls, snap, meta: Mapping[str, Any] | None) -> "RunView":
        """A ``jobs`` run's snapshot and the page's record of the run (its lesson, from scratch, defaults)."""
        meta = meta or {}
        return cls({n: v.steps for n, v in snap.variants.items()}, {n: v.evals for n, v in snap.variants.items()},
                   {n: v.probes for n, v in snap.variants.items() if v.probes}, snap.configs or {},
                   snap.total_steps, snap.finished, bool(meta.get("from_scratch")), bool(meta.get("defaults", False)),
                   run_twins(meta))


@dataclass(frozen=True)
class TrainingLesson:
    """Everything the page and the view-model need about one Training lesson."""

    key: str
    title: str  # the lesson's line in the page's list
    variants: Callable[..., dict[str, TrainConfig]]  # (base, from_scratch=, **choices) -> {name: TrainConfig}
    defaults: Callable[[bool], dict[str, Default]] = _no_defaults  # from_scratch -> what it sets apart from the common
    models: str = "any"  # "any"; "scratch": only a tiny random model; "reads": only a model that reads English
    twins: int = 0  # the gazetteer's twin countries its text carries when it fine-tunes
    choices: tuple[Choice, ...] = ()
    intro: Callable[[TrainConfig, Mapping[str, Any]], list[Block]] = _nothing  # shown under the choices
    problem: Callable[[Texts | None, bool], str] = _no_problem  # (texts, from_scratch) -> why it cannot run ("": ok)
    learner_probe: bool = False  # a sentence of the learner's joins the probes, and the filmstrip follows it
    probes: str = "each"  # how the run's probes are shown: "each" variant's, a "race" table, or the "filmstrip" first
    verdict: Callable[[RunView], list[Block]] = _nothing  # under the held-out curves: what this run showed
    summary: Callable[[RunView], list[Block]] = _nothing  # under the probes
    loss_note: Callable[[RunView], list[Block]] = _nothing  # under the training-loss chart
    ask: Callable[..., Ask | None] = lambda texts, tokenizer, snap=None: None  # the class's question

    def lesson_twins(self, from_scratch: bool) -> int:
        """How many twin countries this lesson's gazetteer text carries (none from scratch)."""
        return 0 if from_scratch else self.twins

    def all_defaults(self, from_scratch: bool) -> dict[str, Default]:
        """The settings it starts with (TrainConfig field -> Default): the common ones, then its own."""
        return {**common_defaults(from_scratch), **self.defaults(from_scratch)}

    def export(self, view: RunView) -> list[dict[str, str]]:
        """What the lesson zip keeps of the page's sentences about the run: one row each."""
        return [{"said": text} for _, text in self.verdict(view) + self.summary(view) + self.loss_note(view) if text]


# --------------------------------------------------------------------------------------------
# Each lesson's own defaults (over training_view.common_defaults)
# --------------------------------------------------------------------------------------------


def _focus(from_scratch: bool) -> dict[str, Default]:
    """The facts' own words masked more often (the lessons on the gazetteer's facts, when fine-tuning)."""
    d: dict[str, Default] = {}
    if not from_scratch:
        d["focus_mlm_probability"] = Default(
            FACT_MASKING, f"The facts' own words (the gazetteer's {len(gazetteer().facts)} answers, and the twin "
            "countries' in the facts lessons) are selected for "
            f"prediction {FACT_MASKING:.0%} of the time, every other token at the rule's 15%: each step then asks for "
            "the facts far more often. Like REALM's \"salient span masking\" of names and dates (Guu et al. 2020). "
            "Chosen on the gazetteer's dev probes (issue 25); set it to 0 to train with the rule alone and compare "
            "the questions in new words.")
    return d


def _facts_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    if not from_scratch:
        d["steps"] = Default(320, f"Binding a fact to a name takes longer than learning which word answers a kind of "
                             f"question: with Veldoria and {TWIN_COUNTRIES} twin countries to tell apart, 320 steps "
                             "(about two minutes on one laptop CPU core; benchmark P7 measures it) bound half the "
                             "questions in new words or more on the dev sets, 160 steps about a quarter.")
        d["eval_every"] = Default(40, "An evaluation every 40 steps: nine points on the curves; each one asks all 60 "
                                  "probes, so more would slow the run down.")
    return {**d, **_focus(from_scratch)}


def _mask_rate_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    d["steps"] = Default(300 if from_scratch else 30,
                         "Three copies of the tiny model, 300 steps each, on one loop: three times the work of "
                         "one run (benchmark P7 measures the time, benchmarks/RESULTS.md)." if from_scratch else
                         "Three copies of the model train side by side, 30 steps each: three times the work of one "
                         "run, the slowest lesson here (benchmark P7 measures its time, benchmarks/RESULTS.md), "
                         "and the frozen-mask losses have separated by then.")
    if not from_scratch:
        d["eval_every"] = Default(5, "An evaluation every five steps draws the frozen-mask curves with seven points.")
    return d


def _bugs_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    d["steps"] = Default(300 if from_scratch else 40,
                         "Two copies of the tiny model, 300 steps each: twice the work of one run."
                         if from_scratch else
                         "The clean run and its twin train side by side, 40 steps each: twice the work of one run "
                         "(benchmark P7 measures the time, benchmarks/RESULTS.md), long enough for each bug's "
                         "signature to show.")
    if not from_scratch:
        d["eval_every"] = Default(5, "An evaluation every five steps: nine points, enough to see a held-out curve "
                                  "that jumps (the re-masking bug) or sits too high (dropout left on).")
    return d


def _filmstrip_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    d["steps"] = Default(300 if from_scratch else 60,
                         "300 steps of the tiny model take about 15 s." if from_scratch else
                         "The facts lesson's run without the twin countries, shorter: 60 steps with an evaluation "
                         "every five fit in about a minute, and the filmstrip shows when the hidden word becomes "
                         "the first guess (docs/workshop.md gives the step at the guide's seed).")
    if not from_scratch:
        d["eval_every"] = Default(5, "An evaluation every five steps: one frame of the filmstrip each, 13 in all.")
    return {**d, **_focus(from_scratch)}


def _lr_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    d["steps"] = Default(150 if from_scratch else 25,
                         "The loss blows up within five steps; 25 steps of three model copies fit in about "
                         "a minute, so the lesson does not hold the training slot for long.")
    d["learning_rate"] = Default(3e-2 if from_scratch else 1e-2,
                                 "Far above the sensible rate on purpose: watch the held-out loss.")
    d["warmup_steps"] = Default(0, "No warm-up, so the first steps already take the full learning rate.")
    d["eval_every"] = Default(5, "Frequent evaluations show when the held-out loss starts to climb.")
    d["max_grad_norm"] = Default(1.0, "BERT's clipping norm (google-research/bert optimization.py clips the global "
                                 "gradient norm at 1.0): the clipped variants use it, against one with clipping off.")
    return d


def _masking_defaults(from_scratch: bool) -> dict[str, Default]:
    d: dict[str, Default] = {}
    d["steps"] = Default(600 if from_scratch else 40,
                         "About seven passes over the gazetteer: enough for static masks to repeat several "
                         "times, and for two model copies to finish in about a minute.")
    return d


# --------------------------------------------------------------------------------------------
# The variants each lesson races, all from one base (the same data, masks and seed unless the lesson is about them)
# --------------------------------------------------------------------------------------------


def _one_run(base: TrainConfig, *, from_scratch: bool, **choices: Any) -> dict[str, TrainConfig]:
    return {get(FULL).title: base}


def _rates(base: TrainConfig, *, from_scratch: bool, rates: Sequence[float] = MASK_RATES,
           split: tuple[float, float] = SPLITS[0], **choices: Any) -> dict[str, TrainConfig]:
    return rate_variants(base, rates, split)


def _bugs(base: TrainConfig, *, from_scratch: bool, bug: str = DEFAULT_BUG, **choices: Any) -> dict[str, TrainConfig]:
    return bug_variants(base, bug)


def sane_learning_rate(from_scratch: bool) -> float:
    """The facts or scratch lesson's learning rate: the reference line of the "too high" lesson."""
    return lesson_defaults("facts", from_scratch=from_scratch)["learning_rate"].value


def _lr_too_high(base: TrainConfig, *, from_scratch: bool, clip: float | None = None,
                 **choices: Any) -> dict[str, TrainConfig]:
    clip = clip or base.max_grad_norm or 1.0
    sane = sane_learning_rate(from_scratch)
    return {f"lr {base.learning_rate:g}, no clipping": replace(base, max_grad_norm=None),
            f"lr {base.learning_rate:g}, clipped at {clip:g}": replace(base, max_grad_norm=float(clip)),
            f"sensible lr {sane:g}, clipped at {clip:g}": replace(base, learning_rate=sane, max_grad_norm=float(clip))}


def _static_or_dynamic(base: TrainConfig, *, from_scratch: bool, static_copies: int = 1,
                       **choices: Any) -> dict[str, TrainConfig]:
    return {"dynamic: a fresh mask every epoch": replace(base, mask_copies=0),
            f"static: {static_copies} mask(s) per chunk, reused": replace(base, mask_copies=int(static_copies))}


BIND_VARIANTS = ("Veldoria alone", "Veldoria and its twins")  # the "What did it learn?" lesson's two runs


def _alone_or_with_twins(base: TrainConfig, *, from_scratch: bool, **choices: Any) -> dict[str, TrainConfig]:
    """The same batches: one learns from Veldoria's sentences alone, the other from every country's."""
    if from_scratch:
        raise InputError("What did it learn? needs a model that already reads English: one trained from scratch "
                         "knows no words yet to tie a fact to.")
    alone = len(gazetteer().sentences)
    return {BIND_VARIANTS[0]: replace(base, learn_from_texts=alone), BIND_VARIANTS[1]: base}


def _losses(base: TrainConfig, *, from_scratch: bool, losses: Sequence[str] = ("full",),
            **choices: Any) -> dict[str, TrainConfig]:
    if not losses:
        raise InputError("Choose at least one loss variant.")
    return {get(name).title: replace(base, loss=name) for name in losses}


# --------------------------------------------------------------------------------------------
# What the page says about a run
# --------------------------------------------------------------------------------------------


def _rate_verdict(view: RunView) -> list[Block]:
    """Which rate leads on the frozen mask, beside benchmark P7's spread; then what the papers found."""
    if len(view.configs) < 2 or not any(view.evals.values()):  # one rate: nothing races
        return []
    verdict = rate_verdict(view.evals, "scratch" if view.from_scratch else "fine-tune", view.default_settings,
                           end_step=view.total_steps, finished=view.finished)
    return ([("markdown", f"**On this run:** {verdict}")] if verdict else []) + [("caption", PAPERS_ON_RATE)]


def _rate_loss_note(view: RunView) -> list[Block]:
    """Why the rates' training losses are not comparable, with this run's numbers."""
    return [("caption", rate_train_note(view.steps))] if len(view.configs) > 1 else []


def _bug_verdict(view: RunView) -> list[Block]:
    """The bug's signature in this run's numbers."""
    bug = bug_of(view.configs)
    if not bug or not any(view.evals.values()):
        return []
    signature = bug_signature(bug, view.steps, view.evals)
    return [("markdown", f"**{TRAINED_BUGS[bug].title}, on this run:** {signature}")] if signature else []


def _bind_summary(view: RunView) -> list[Block]:
    """The two runs' binding and control, in one sentence."""
    said = binding_comparison({name: probe_set_scores(entries, twins=view.twins) for name, entries in view.probes.items()})
    return [("markdown", "**What the twins did:** " + said)] if said else []


# --------------------------------------------------------------------------------------------
# What the page shows under a lesson's choices, and when a lesson cannot run
# --------------------------------------------------------------------------------------------


def _bug_intro(base: TrainConfig, choices: Mapping[str, Any]) -> list[Block]:
    bug = TRAINED_BUGS[choices.get("bug", DEFAULT_BUG)]
    reported = "Reported: " + reported_markdown(bug.reported) + "."  # our text, its links
    return [("code", bug.code), ("caption", reported),
            ("info", TEXT("bugs"))]


def _lr_intro(base: TrainConfig, choices: Mapping[str, Any]) -> list[Block]:
    return [("info", TEXT("lr_too_high", lr=base.learning_rate, clip=base.max_grad_norm or 1.0))]


def _bind_problem(texts: Texts | None, from_scratch: bool) -> str:
    """It binds the gazetteer's facts to a name: a model that reads, on the gazetteer."""
    if from_scratch or texts is None or not texts.name.startswith(SOURCES[0]):
        return TEXT("bind_needs")
    return ""


# --------------------------------------------------------------------------------------------
# The class's question
# --------------------------------------------------------------------------------------------

RATE_CHOICE_TEXTS = tuple(f"{rate:.0%}" for rate in MASK_RATES)
WAIT_FOR_END = "Reveal once the run has ended: the answer is read from its last evaluation."


def _finished(snap) -> bool:
    return snap is not None and snap.finished and any(v.evals for v in snap.variants.values())


def _rate_ask(texts: Texts | None, tokenizer, snap=None) -> Ask:
    """"Which masking rate will lead?", revealed from the run's last evaluation once it has ended."""
    reveal = None
    found = latest_common({n: v.evals for n, v in snap.variants.items()}) if _finished(snap) else None
    if found is not None and len(found[1]) > 1 and all(n.startswith("mask ") for n in found[1]):
        at, losses = found
        order = sorted(losses, key=losses.get)
        lead = order[0].removeprefix("mask ")
        level = losses[order[1]] - losses[order[0]] < LEVEL_NATS
        reveal = Reveal(tuple((n.removeprefix("mask "), 1.0 if n == order[0] else 0.0) for n in order[:1]),
                        truth=lead, note=f"at step {at}, on the frozen 15% mask, {lead} leads with a held-out loss "
                        f"of {losses[order[0]]:.2f} ("
                        + ", ".join(f"{n.removeprefix('mask ')}: {losses[n]:.2f}" for n in order[1:]) + ")"
                        + (f"; less than {LEVEL_NATS} nats ahead, too close to call on one run." if level else "."))
    return Ask("choice", "Which masking rate will lead at the end of the run (the lowest held-out loss)?",
               context="The same model, the same batches, masked at " + ", ".join(RATE_CHOICE_TEXTS) + ".",
               choices=RATE_CHOICE_TEXTS, reveal=reveal, waiting=WAIT_FOR_END)

def _name_ask(variant: int) -> Callable[..., Ask | None]:
    """What the model will answer about Pellastra, a country no training text names (the first such probe), revealed
    from the run's own probe at its last evaluation in the `variant`-th variant (the bind lesson's: with its twins),
    and judged only when it answers the same question about Veldoria."""
    def ask(texts: Texts | None, tokenizer, snap=None) -> Ask | None:
        if texts is None or "other" not in texts.probe_groups:
            return None
        index = texts.probe_groups.index("other")
        asked_about_veldoria = texts.probe_groups.index("new") if "new" in texts.probe_groups else None
        sentence, veldorias = texts.probes[index]
        reveal = None
        if _finished(snap):
            entries = snap.variants[list(snap.variants)[variant]].probes
            if entries and index < len(entries[-1]["probes"]):
                last = entries[-1]["probes"]
                guess = last[index]["predictions"][0]
                words = model_words(tokenizer, guess["tokens"], guess["probs"])
                first = words[0][0] if words else ""
                twin = next((country for country, _, answers in TWINS[:TWIN_COUNTRIES] if first in answers), None)
                knows = (asked_about_veldoria is not None and
                         last[asked_about_veldoria]["predictions"][0]["tokens"][0] == veldorias)
                if not knows:
                    verdict = (f"but it does not yet answer the same question about Veldoria with {veldorias!r}, so "
                               "this says little about what it tied to the name")
                elif first == veldorias:
                    verdict = "Veldoria's answer: there the fact went with the sentence, not with the name"
                elif twin:
                    verdict = (f"{twin}'s answer, a twin country it read: it tells Veldoria from the names it read, "
                               "and gives a name it never read one of theirs")
                else:
                    verdict = "neither Veldoria's answer nor a twin's"
                reveal = Reveal(words, truth="", note=f"after step {entries[-1]['step']}, about "
                                f"Pellastra its first guess is {first!r}, {verdict} (Veldoria's answer here is "
                                f"{veldorias!r}; no text gives Pellastra's).")
        return Ask("word", "Pellastra is a country no training text names. After the run, what will the model answer "
                           "here? One word.", context=sentence, tokenizer=tokenizer, reveal=reveal,
                   waiting=WAIT_FOR_END)
    return ask

# --------------------------------------------------------------------------------------------
# The lessons
# --------------------------------------------------------------------------------------------

_rate_choices = (
    Choice("rates", "multiselect", f"Masking rates to race (1 to {MAX_RATES})", "training_rates", list(RATE_CHOICES),
           list(MASK_RATES), TEXT("rates_help"), format=lambda p: f"{p:.0%}"),
    Choice("split", "selectbox", "Of the selected: [MASK] / random / unchanged", "training_split", range(len(SPLITS)),
           help="BERT's 80/10/10 by default; every variant uses the same split.",
           format=lambda i: split_text(*SPLITS[i]), value=lambda i: tuple(SPLITS[i])),
)

TRAINING_LESSONS: dict[str, TrainingLesson] = {lesson.key: lesson for lesson in (
    TrainingLesson("facts", "Teach it facts it cannot know (fine-tune on the gazetteer of Veldoria)", _one_run,
                   _facts_defaults, twins=TWIN_COUNTRIES, ask=_name_ask(variant=0)),
    TrainingLesson("bind", "What did it learn? One country, or twin countries too, side by side", _alone_or_with_twins,
                   _facts_defaults, models="reads", twins=TWIN_COUNTRIES,
                   intro=lambda base, choices: [("info", TEXT("bind"))], problem=_bind_problem,
                   probes="race", summary=_bind_summary, ask=_name_ask(variant=-1)),
    TrainingLesson("scratch", "Train the tiny model from scratch", _one_run, models="scratch"),
    TrainingLesson("mask_rate", "Should you mask 15%? The same model at 15%, 30% and 40%", _rates, _mask_rate_defaults,
                   choices=_rate_choices, intro=lambda base, choices: [("info", TEXT("mask_rate"))], probes="race",
                   verdict=_rate_verdict,
                   loss_note=_rate_loss_note, ask=_rate_ask),
    TrainingLesson("bugs", "Bugs that train: a buggy twin beside a clean run", _bugs, _bugs_defaults,
                   choices=(Choice("bug", "selectbox", "The bug", BUG_KEY, list(TRAINED_BUGS),
                                   help="Each is a named option of the loop's masking, labels or evaluation step.",
                                   format=lambda b: TRAINED_BUGS[b].title),),
                   intro=_bug_intro, probes="race", verdict=_bug_verdict),
    TrainingLesson("filmstrip", "The guess over time: one masked word, evaluation by evaluation", _one_run,
                   _filmstrip_defaults, learner_probe=True, probes="filmstrip"),
    TrainingLesson("lr_too_high", "Learning rate too high: clipping off vs on", _lr_too_high, _lr_defaults,
                   intro=_lr_intro),
    TrainingLesson("masking", "Static masks (BERT) vs dynamic masking (RoBERTa)", _static_or_dynamic,
                   _masking_defaults,
                   choices=(Choice("static_copies", "select_slider", "Static masks per chunk", "training_static_copies",
                                   [1, 2, 5, 10], 1, TEXT("static_masks_help")),),
                   intro=lambda base, choices: [("info", TEXT("masking"))]),
    TrainingLesson("free", "Free run: your settings, up to three loss variants side by side", _losses,
                   choices=(Choice("losses", "multiselect", "Loss variants to race (1 to 3)", "training_variants",
                                   NAMES, [FULL, "sampled"],  # every registered loss, read at each rerun
                                   lambda: " · ".join(f"{v.title}: {v.why}" for v in records()),
                                   format=lambda name: get(name).title),)),
)}
PLAIN_RUN = TrainingLesson("", "A run", _one_run)  # a run no lesson started: nothing said about it but its curves


def register(record: TrainingLesson) -> TrainingLesson:
    """Add a lesson: the page lists it, after the others, from the next rerun. A key taken already is refused (as
    ``loss_registry.register`` refuses a name): replacing a lesson silently would hide the one it replaced."""
    if record.key in TRAINING_LESSONS:
        raise InputError(f"A lesson with the key {record.key!r} is registered already: unregister it first.")
    TRAINING_LESSONS[record.key] = record
    return record


def unregister(key: str) -> TrainingLesson:
    """Remove a lesson (a test's own, once it is done); returns its record."""
    return TRAINING_LESSONS.pop(lesson(key).key)


def lesson(key: str) -> TrainingLesson:
    """A lesson's record; an unknown key is an InputError that lists the lessons."""
    if key not in TRAINING_LESSONS:
        raise InputError(f"Unknown lesson {key!r}; choose one of {', '.join(TRAINING_LESSONS)}.")
    return TRAINING_LESSONS[key]


# --------------------------------------------------------------------------------------------
# A lesson's run, as the page, the benchmarks and the tests build it
# --------------------------------------------------------------------------------------------


def lesson_defaults(key: str, *, from_scratch: bool) -> dict[str, Default]:
    """The settings a lesson starts with (TrainConfig field -> Default), for a trained or a random model.

    >>> lesson_defaults("facts", from_scratch=False)["learning_rate"].value
    0.0005
    """
    return lesson(key).all_defaults(from_scratch)


def base_config(key: str, *, from_scratch: bool, texts: Texts, seed: int = 0, **overrides: Any) -> TrainConfig:
    """The lesson's TrainConfig: its defaults, the texts' probes, then any of the learner's settings."""
    values = {name: d.value for name, d in lesson_defaults(key, from_scratch=from_scratch).items()}
    values.update(probe_sentences=tuple(p for p, _ in texts.probes),
                  probe_answers=tuple(a for _, a in texts.probes), probe_groups=texts.probe_groups,
                  eval_focus_words=texts.facts, seed=seed)
    values.update(overrides)
    return TrainConfig(**values)


def lesson_variants(key: str, base: TrainConfig, *, from_scratch: bool, **choices: Any) -> dict[str, TrainConfig]:
    """The variants a lesson races, all from `base`; ``choices`` are its own (``rates``, ``bug``, ...), each
    defaulting to the lesson's default."""
    return lesson(key).variants(base, from_scratch=from_scratch, **choices)


def lesson_twins(key: str, *, from_scratch: bool) -> int:
    """How many twin countries a lesson's gazetteer text carries."""
    return lesson(key).lesson_twins(from_scratch)


def run_lesson(meta: Mapping[str, Any] | None) -> TrainingLesson:
    """The record of a run's lesson, from the page's record of the run (a plain one-run lesson when it has none)."""
    return TRAINING_LESSONS.get(str((meta or {}).get("lesson", "")), PLAIN_RUN)


def run_twins(meta: Mapping[str, Any] | None) -> int:
    """How many twin countries a run read, from the page's record of it (its lesson, whether from scratch)."""
    return run_lesson(meta).lesson_twins(bool((meta or {}).get("from_scratch")))


def is_default_run(variants: Mapping[str, TrainConfig], key: str, *, from_scratch: bool, texts: Texts) -> bool:
    """True when a lesson's variants are exactly its defaults (any seed): what the benchmark measured."""
    if key not in TRAINING_LESSONS or not variants:
        return False
    try:
        seed = check_variants(variants).seed
        expected = lesson_variants(key, base_config(key, from_scratch=from_scratch, texts=texts, seed=seed),
                                   from_scratch=from_scratch)
    except InputError:
        return False
    return dict(variants) == expected


def default_run(model_is_trained: bool = True) -> tuple[Texts, dict[str, TrainConfig]]:
    """What Start does with every setting left alone: the facts lesson (or, for a model that is not
    trained, the from-scratch lesson) on the gazetteer."""
    key = "facts" if model_is_trained else "scratch"
    texts = gazetteer_texts(from_scratch=not model_is_trained,
                            twins=lesson_twins("facts", from_scratch=not model_is_trained))
    base = base_config(key, from_scratch=not model_is_trained, texts=texts)
    return texts, lesson_variants(key, base, from_scratch=not model_is_trained)
