"""The Training page's view-model: the texts a run reads (with their held-out part and probe sets), the settings
every lesson starts with (each default with the reason for it), and the numbers the page shows about the probes.

What sets one lesson apart (its own defaults, variants, verdicts, question) is its record in
``training_registry``; the page and benchmark P7 (`benchmarks/p7_visible_learning.py`) both build their runs from
there, so the benchmark measures exactly what a learner gets after pressing Start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from mlm_core.bundled import TWINS, contrast_countries, gazetteer, twin_documents, workshop_sentences
from mlm_core.data import run_tokenizer
from mlm_core.formatting import percent_text
from mlm_core.masking import IGNORE_INDEX
from mlm_core.predict import predict_masked
from mlm_core.lessons.training_lessons import YOURS

SOURCES = ("Veldoria gazetteer", "Workshop corpus", "Upload a file", "Paste text")

# Probes for the workshop corpus: everyday cloze sentences (assets/cloze.tsv's first rows).
WORKSHOP_PROBES = (
    ("The cat sat on the [MASK].", ""),
    ("I drink a cup of [MASK] every morning.", ""),
    ("The sun rises in the [MASK] and sets in the west.", "east"),
)


# The facts lesson masks the facts' words this often in its training batches (TrainConfig.focus_mlm_probability),
# chosen on the gazetteer's dev probes (issue 25; 0 = the masking rule's p for them too).
FACT_MASKING = 0.7

# The facts lesson's probe sets (TrainConfig.probe_groups): the same facts asked in a sentence the model
# trains on, and in sentences the training text does not contain; the same kinds of question about real
# countries, whose answers are not Veldoria's (assets/veldoria_gazetteer.txt); and a sentence the learner typed.
OTHER = "other"  # the new-words questions about a country no training text names (Pellastra)
PROBE_SETS = {"read": "Phrases it read", "new": "Questions in new words", OTHER: "Another name",
              "control": "Other countries", YOURS: "Your sentence"}
PROBE_SET_ABOUT = {
    "read": "training sentences, each with its fact masked",
    "new": "the same facts in sentences the training text does not contain, fixed before the lesson was tuned",
    OTHER: "the same questions about Pellastra, a country no training text names: Veldoria's word there was not "
           "learned about Veldoria",
    "control": "the same kinds of question about real countries: a Veldoria word there is a wrong answer",
    YOURS: "the sentence you typed",
}
# A run "learned facts about Veldoria" only if it gives Veldoria's words to at most this share of the
# questions about other countries (one in five; the base model gives none) ...
CONTROL_SHARE = 0.2
# ... and answers at least this share of the questions in new words for Veldoria and not for Pellastra, a country
# no training text names (binding; 8 of 15, issue 43's target for the default run).
BINDING_SHARE = 0.5


@dataclass(frozen=True)
class Texts:
    """What a run reads: training texts, held-out texts (None: hold out a share of the chunks), probes."""

    name: str
    train: list[str]
    held_out: list[str] | None
    probes: tuple[tuple[str, str], ...]  # (sentence with [MASK], answer or "")
    about: str
    facts: tuple[str, ...] = ()  # the words that carry the facts: the held-out loss there is shown too
    probe_groups: tuple[str, ...] = ()  # the probe set of each probe (PROBE_SETS' keys); empty: one set


def usable_probes(texts: Texts, tokenizer) -> Texts:
    """The texts with the probes this tokenizer can score: an answer must be one of its tokens (a
    vocabulary trained on the Tokenizer page may split "herring"); others keep their sentence, unscored."""
    probes = []
    for sentence, answer in texts.probes:
        ok = bool(answer) and len(tokenizer.tokenize(answer)) == 1
        probes.append((sentence, answer if ok else ""))
    return replace(texts, probes=tuple(probes))


def with_learner_probe(texts: Texts, sentence: str, answer: str) -> Texts:
    """The texts with one more probe, a sentence the learner typed (checked by ``training_lessons.learner_probe``);
    it joins the probe sets as "yours" when the texts have sets."""
    groups = texts.probe_groups + (YOURS,) if texts.probe_groups else ()
    return replace(texts, probes=texts.probes + ((sentence, answer),), probe_groups=groups)


# The facts lessons train on Veldoria's sentences and on the same sentences about this many twin countries
# (bundled.TWINS: other names, other answers), so that only the name tells the answers apart. Chosen on the dev sets
# (benchmarks/results/p7_binding_dev.jsonl, docs/lessons.md "What binds the facts"): with none, a run gave Veldoria's
# words about a country it never read of as often as about Veldoria (binding 0 of 30 at two seeds).
TWIN_COUNTRIES = 2


def gazetteer_texts(from_scratch: bool = False, twins: int = 0) -> Texts:
    """The gazetteer of Veldoria: facts the default model cannot know, held out in other words. Fine-tuning
    asks every fact four ways: in a sentence it trains on ("read"), in new words ("new"), in those new words about a
    country no text names ("other"); and the same kinds of question about real countries ("control"), where a
    Veldoria word is wrong. ``twins``: the same sentences about that many twin countries follow Veldoria's in the
    training text (``bundled.twin_documents``), their answers among the facts' words masked more often."""
    g = gazetteer()
    if from_scratch:
        probes, groups = g.scratch_probes, ()
    else:
        probes = g.read_probes + g.new_words_probes + g.other_name_probes + g.control_probes
        groups = (("read",) * len(g.read_probes) + ("new",) * len(g.new_words_probes)
                  + (OTHER,) * len(g.other_name_probes) + ("control",) * len(g.control_probes))
    about = (f"{len(g.sentences)} sentences about Veldoria, an invented country (its capital, river, food, customs), "
             "written for MLM Lab and never used to build the default model; "
             f"{len(g.held_out)} more sentences say the same facts in other words and are held out.")
    train, facts = list(g.sentences), tuple(g.facts)
    if twins:
        names = [name for name, _, _ in TWINS[:twins]]
        for i in range(twins):
            train += [s for doc in twin_documents(i) for s in doc]
            facts += TWINS[i][2]
        about += (f" Then the same {len(g.sentences)} sentences about {' and '.join(names)}, invented twins with other "
                  "answers, so that only the name tells the answers apart.")
    return Texts("Veldoria gazetteer", train, list(g.held_out), probes, about, facts, groups)


def contrast_sentences(countries: int) -> list[str]:
    """The sentences of the first ``countries`` contrast countries (``bundled.contrast_countries``), in order."""
    docs = list(contrast_countries().values())[:countries]
    return [sentence for country in docs for doc in country for sentence in doc]


def workshop_texts() -> Texts:
    texts = workshop_sentences()
    return Texts("Workshop corpus", texts, None, WORKSHOP_PROBES,
                 f"{len(texts):,} everyday sentences written for MLM Lab (bundled, offline). The default "
                 "model was built on them, so fine-tuning it here has little left to teach.")


@dataclass(frozen=True)
class Default:
    """One setting's default and the one sentence that says why."""

    value: Any
    why: str


def common_defaults(from_scratch: bool) -> dict[str, Default]:
    """The settings every Training lesson starts with (TrainConfig field -> Default), for a trained or a random
    model; a lesson's record (``training_registry``) sets its own on top.

    >>> common_defaults(from_scratch=False)["learning_rate"].value
    0.0005
    """
    d = {
        "steps": Default(300 if from_scratch else 80,
                         "A tiny model's step takes a few hundredths of a second: 300 of them, with their "
                         "evaluations, take about 15 s of CPU time, well within a minute."
                         if from_scratch else
                         "About a minute on one laptop CPU core (benchmark P7 measures it), and enough for the "
                         "probes to change their answers to Veldoria's facts (the probe tables show how many, "
                         "step by step; 120 steps gained little in a trial and would not fit in the minute)."),
        "batch_size": Default(8, "Eight chunks, about 34 sentences, per step: one step takes about half a "
                              "second on a CPU core with the default model."),
        "seq_len": Default(64, "Sentences are packed together, about four gazetteer sentences per 64-token "
                           "chunk (11% padding; 128 would pack nine with 6%): longer chunks make every step "
                           "cost more, so a minute would hold fewer steps. BERT trained 90% of its steps at 128."),
        "learning_rate": Default(1e-3 if from_scratch else 5e-4,
                                 "Random weights have nothing to lose, so steps can be large (1e-4 to 1e-3 is usual "
                                 "from scratch)." if from_scratch else
                                 "High for fine-tuning (BERT fine-tuned at 2e-5 to 5e-5 for thousands of steps), "
                                 "because this run has a few hundred steps to learn a new country (in a trial at 80 "
                                 "steps, 1e-3 learned less and its answers flipped back and forth)."),
        "warmup_steps": Default(10, "The first steps ramp the learning rate up from 0: Adam's "
                                "estimate of each gradient's size is built from few steps at first, so early "
                                "steps are the least reliable (BERT warmed up over its first 10,000)."),
        "max_grad_norm": Default(10.0 if from_scratch else 25.0,
                                 "Clipping is a guard against a rare bad batch, so it sits above what a healthy "
                                 "run's gradient norm reaches (the tiny model's stays below about 5 here)."
                                 if from_scratch else
                                 "Clipping is a guard against a rare bad batch, so it sits above what a healthy "
                                 "run's gradient norm reaches (the gradient-norm chart shows this run's; benchmark P7 "
                                 "records the largest and the steps clipped). At BERT's 1.0 it would fire on every "
                                 "step, and Adam would undo it."),
        "eval_every": Default(10, "An evaluation every ten steps (and one before the first) draws the held-out "
                              "curve; each costs a forward pass over the held-out text."),
    }
    return d




# --------------------------------------------------------------------------------------------
# Probes: what the page reports about them
# --------------------------------------------------------------------------------------------


def probe_rows(probes: Sequence[Mapping[str, Any]], group: str | None = None) -> list[dict[str, Any]]:
    """One row per probe sentence: its answer, the first and the latest top-1 guess, and the answer's
    rank and probability then and now. `probes` is one variant's list of {"step", "probes"} entries;
    `group` keeps one probe set (TrainConfig.probe_groups) of them.
    """
    if not probes:
        return []
    first, last = probes[0], probes[-1]
    rows = []
    for before, now in zip(first["probes"], last["probes"]):
        if group is not None and now.get("group", "") != group:
            continue
        b, n = before["predictions"][0], now["predictions"][0]
        answer = n.get("answer")
        rows.append({
            "sentence": now["text"],
            "answer": answer or "",
            f"top-1 at step {first['step']}": f"{b['tokens'][0]} ({percent_text(b['probs'][0])})",
            f"top-1 at step {last['step']}": f"{n['tokens'][0]} ({percent_text(n['probs'][0])})",
            "answer's rank then": b.get("answer_rank"),
            "answer's rank now": n.get("answer_rank"),
            "answer's probability now": n.get("answer_prob"),
            "right now": bool(answer) and n["tokens"][0] == answer,
        })
    return rows


def probe_set_rows(probes: Sequence[Mapping[str, Any]], group: str) -> list[dict[str, Any]]:
    """One probe set's rows, narrow enough to sit beside the other set: the sentence, the hidden word, its rank
    (1 = the first guess, of all V tokens) at the first and the latest evaluation, and the first guess now."""
    if not probes:
        return []
    first, last = probes[0], probes[-1]
    rows = []
    for before, now in zip(first["probes"], last["probes"]):
        if now.get("group", "") != group:
            continue
        b, n = before["predictions"][0], now["predictions"][0]
        rows.append({"sentence": now["text"], "answer": n.get("answer") or "",
                     f"rank at step {first['step']}": b.get("answer_rank"),
                     f"rank at step {last['step']}": n.get("answer_rank"), "first guess now": n["tokens"][0]})
    return rows


@torch.no_grad()
def probe_preview(model, tokenizer, texts: Texts) -> list[dict[str, Any]]:
    """What the model guesses at each probe now, before any training (one forward pass, the model unchanged):
    set, sentence, answer, first guess and the answer's rank among all V tokens. Probes without a one-token
    answer of this vocabulary are left out."""
    rows = [(g, s, a) for (s, a), g in zip(texts.probes, texts.probe_groups or ("",) * len(texts.probes))
            if a and len(tokenizer.tokenize(a)) == 1]
    if not rows:
        return []
    mask = tokenizer.mask_token
    enc = run_tokenizer(tokenizer, [s.replace("[MASK]", mask) for _, s, _ in rows], return_tensors="pt",
                        padding=True, truncation=True, max_length=64)
    ids = enc["input_ids"]  # (P, T)
    answers = torch.tensor(tokenizer.convert_tokens_to_ids([tokenizer.tokenize(a)[0] for _, _, a in rows]))  # (P,)
    at_mask = ids == tokenizer.mask_token_id  # (P, T)
    first = at_mask.long().cumsum(1).eq(1) & at_mask  # each sentence's first [MASK] only
    labels = torch.where(first, answers[:, None].expand_as(ids), torch.full_like(ids, IGNORE_INDEX))
    found = predict_masked(model, tokenizer, ids, enc["attention_mask"], labels, k=1).positions
    out = []
    for (group, sentence, answer), pred in zip(rows, found):
        out.append({"probe set": PROBE_SETS.get(group, group), "sentence": sentence, "answer": answer,
                    "first guess now": pred.top_tokens[0], "answer's rank now": pred.true_rank})
    return out


def _known(entry: Mapping[str, Any], group: str | None) -> list[Mapping[str, Any]]:
    """The first position's prediction of every probe with a known answer (of one set, when given)."""
    return [p["predictions"][0] for p in entry["probes"] if p["predictions"][0].get("answer")
            and (group is None or p.get("group", "") == group)]


def probes_right(entry: Mapping[str, Any], group: str | None = None) -> tuple[int, int]:
    """(probes whose top-1 is their answer, probes with a known answer) at one evaluation, of one set when
    `group` is given."""
    known = _known(entry, group)
    return sum(p["tokens"][0] == p["answer"] for p in known), len(known)


def probes_in_top(entry: Mapping[str, Any], k: int, group: str | None = None) -> tuple[int, int]:
    """(probes whose answer ranks k or better among all V tokens, probes with a known answer)."""
    known = _known(entry, group)
    return sum(p.get("answer_rank") is not None and p["answer_rank"] <= k for p in known), len(known)


def probe_groups_of(entry: Mapping[str, Any]) -> list[str]:
    """The probe sets at one evaluation, in the order they come (empty when every probe is in one set)."""
    groups = list(dict.fromkeys(p.get("group", "") for p in entry["probes"]))
    return [] if groups in ([], [""]) else groups


@dataclass(frozen=True)
class ProbeSetScore:
    """One probe set of a run, at its first evaluation and at a later one."""

    group: str
    label: str
    probes: int  # probes with a known answer
    step_then: int
    step_now: int
    top1_then: int
    top1_now: int
    top5_then: int
    top5_now: int
    median_rank_then: float | None
    median_rank_now: float | None
    facts_then: int = 0  # probes whose first guess is one of Veldoria's answers (gazetteer().facts)
    facts_now: int = 0
    invented_then: int = 0  # probes whose first guess is an invented country's answer (invented_answers)
    invented_now: int = 0

    def row(self) -> dict[str, Any]:
        return {"probe set": self.label, "probes": self.probes,
                f"top-1 at step {self.step_then}": self.top1_then, f"top-1 at step {self.step_now}": self.top1_now,
                f"top-5 at step {self.step_then}": self.top5_then, f"top-5 at step {self.step_now}": self.top5_now,
                f"median rank at step {self.step_then}": self.median_rank_then,
                f"median rank at step {self.step_now}": self.median_rank_now,
                f"a Veldoria word first at step {self.step_then}": self.facts_then,
                f"a Veldoria word first at step {self.step_now}": self.facts_now,
                f"an invented country's word first at step {self.step_then}": self.invented_then,
                f"an invented country's word first at step {self.step_now}": self.invented_now}


def _median(values: Sequence[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return float(values[mid]) if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def invented_answers(twins: int = TWIN_COUNTRIES, facts: Sequence[str] | None = None) -> frozenset[str]:
    """The answers of the invented countries a run read: Veldoria's (``facts``) and its first ``twins`` twins'. After
    a run with twins, a country the run never read of, or a real one, may get a twin's word where it got none of
    Veldoria's: still an invented answer, and as wrong there. A twin the run did not read (Ostrania, with two twins)
    is not counted: its words are only the base model's own guesses."""
    return frozenset(gazetteer().facts if facts is None else facts) | {
        word for _, _, answers in TWINS[:twins] for word in answers}


def probe_set_scores(probes: Sequence[Mapping[str, Any]], facts: Sequence[str] | None = None,
                     twins: int = TWIN_COUNTRIES) -> list[ProbeSetScore]:
    """Each probe set's top-1 and top-5 counts, median rank, and how many first guesses are one of `facts`
    (default: Veldoria's answers) or of the invented answers (`invented_answers(twins)`: Veldoria's and the twins'
    the run read; ``lesson_twins`` says how many), at the first and the latest evaluation of `probes` (one variant's
    {"step", "probes"} entries). Empty when the probes are one set."""
    if not probes:
        return []
    invented = invented_answers(twins, facts)
    facts = set(gazetteer().facts if facts is None else facts)
    first, last = probes[0], probes[-1]
    out = []
    for group in probe_groups_of(last):
        ranks = [[p["answer_rank"] for p in _known(e, group) if p.get("answer_rank") is not None]
                 for e in (first, last)]
        given = [sum(p["tokens"][0] in facts for p in _known(e, group)) for e in (first, last)]
        given += [sum(p["tokens"][0] in invented for p in _known(e, group)) for e in (first, last)]
        (t1_then, n), (t1_now, _) = probes_right(first, group), probes_right(last, group)
        out.append(ProbeSetScore(group, PROBE_SETS.get(group, group), n, first["step"], last["step"], t1_then, t1_now,
                                 probes_in_top(first, 5, group)[0], probes_in_top(last, 5, group)[0],
                                 _median(ranks[0]), _median(ranks[1]), *given))
    return out


@dataclass(frozen=True)
class Binding:
    """How many facts a run ties to Veldoria's name: questions in new words answered first about Veldoria, minus the
    same questions about a country no training text names (Pellastra) given Veldoria's word first (top 5 alike),
    at the first and the latest evaluation."""

    probes: int
    top1_then: int
    top1_now: int
    top5_then: int
    top5_now: int

    @property
    def bound(self) -> bool:
        """At least ``BINDING_SHARE`` of the questions answered for Veldoria and not for the other name."""
        return self.probes > 0 and self.top1_now >= BINDING_SHARE * self.probes


def binding(scores: Sequence[ProbeSetScore]) -> Binding | None:
    """The run's binding from its probe sets (None without the new-words and the other-name sets).

    >>> s = [ProbeSetScore("new", "Questions in new words", 15, 0, 80, 0, 13, 1, 15, 900, 2),
    ...      ProbeSetScore("other", "Another name", 15, 0, 80, 0, 13, 0, 14, 900, 2)]
    >>> binding(s)
    Binding(probes=15, top1_then=0, top1_now=0, top5_then=1, top5_now=1)
    """
    by = {s.group: s for s in scores}
    new, other = by.get("new"), by.get(OTHER)
    if new is None or other is None or not new.probes:
        return None
    return Binding(new.probes, new.top1_then - other.top1_then, new.top1_now - other.top1_now,
                   new.top5_then - other.top5_then, new.top5_now - other.top5_now)


def strings_or_facts(scores: Sequence[ProbeSetScore]) -> str:
    """One sentence on what the probe sets say the run learned: the strings it read, which word answers each kind of
    question, answers tied to the names it read, or facts that belong to Veldoria.

    Computed from the counts. While fewer than half of the phrases it read and of the questions in new words are
    answered first, neither is learned yet. Questions in new words answered far less often than the phrases it
    read (more than one in five fewer): it memorised strings. Answered nearly as often: it learned more than
    strings, and then the two controls decide. Binding (the questions in new words answered for Veldoria and not
    for Pellastra, a country no training text names) below half the questions (``BINDING_SHARE``: 8 of 15): it
    learned which word answers each kind of question, whatever the country. Binding at least half: it ties the
    answers to Veldoria's name; it learned facts about Veldoria only if it also leaves the real countries alone,
    giving an invented country's word (Veldoria's or a twin's it read, ``invented_answers``) to at most one in five
    questions about them (``CONTROL_SHARE``). A run that binds but gives real countries invented words learned which
    answers go with which name it read, not that a country it never read of has answers it does not know. (The
    base model answers few of the real-country questions right: 0 of 15 first on the bundled model, 5 in its top
    5; so the control counts wrong answers the run taught, not right answers lost.)

    >>> read = ProbeSetScore("read", "Phrases it read", 15, 0, 80, 1, 14, 3, 15, 40, 1)
    >>> strings_or_facts([read, ProbeSetScore("new", "Questions in new words", 15, 0, 80, 0, 5, 1, 11, 900, 3)]
    ...                  ).split(":")[-1]
    ' it memorised the strings it read, not the facts.'
    >>> new = ProbeSetScore("new", "Questions in new words", 15, 0, 80, 0, 13, 1, 15, 900, 1)
    >>> other = ProbeSetScore("other", "Another name", 15, 0, 80, 0, 13, 0, 14, 900, 2)
    >>> control = ProbeSetScore("control", "Other countries", 15, 0, 80, 9, 8, 12, 12, 1, 2, 0, 1, 0, 1)
    >>> strings_or_facts([read, new, other, control]).split(": ")[-1]
    'it learned which word answers each kind of question, whatever the country, not facts that belong to Veldoria.'
    >>> bound = ProbeSetScore("other", "Another name", 15, 0, 80, 0, 3, 0, 6, 900, 400)
    >>> strings_or_facts([read, new, bound, control]).split("): ")[-1]
    'it learned facts about Veldoria: it names them for Veldoria and not for a country it never read of, and leaves the real countries alone.'
    >>> twins = ProbeSetScore("control", "Other countries", 15, 0, 80, 9, 0, 12, 0, 1, 90, 0, 2, 0, 13)
    >>> strings_or_facts([read, new, bound, twins]).split("): ")[-1][:79]
    "it names Veldoria's facts for Veldoria and not for Pellastra, but gives real co"
    """
    by = {s.group: s for s in scores}
    read, new, other, control = by.get("read"), by.get("new"), by.get(OTHER), by.get("control")
    if read is None or new is None or not read.probes or not new.probes:
        return ""
    r, n = read.top1_now / read.probes, new.top1_now / new.probes
    said = f"{read.top1_now} of {read.probes} phrases it read"
    checks = []
    bound = binding(scores)
    if other is not None and bound is not None:
        twin = other.invented_now - other.facts_now
        checks.append(f"asked the same questions about Pellastra, a country it never read of, it gives Veldoria's word "
                      f"first in {other.top1_now} of {other.probes}" + (f" and a twin country's in {twin}" if twin else "")
                      + f", so {max(bound.top1_now, 0)} of {bound.probes} facts are bound to Veldoria's name (top 5: "
                      f"{max(bound.top5_now, 0)})")
    flipped = bool(control is not None and control.probes and control.invented_now > CONTROL_SHARE * control.probes)
    if control is not None and control.probes:
        twin = control.invented_now - control.facts_now
        checks.append(f"about real countries it gives an invented country's word first in {control.invented_now} of "
                      f"{control.probes} (Veldoria's in {control.facts_now}, a twin's in {twin}) and the real answer "
                      f"first in {control.top1_now}, in the top 5 in {control.top5_now} (at step {control.step_then}: "
                      f"{control.invented_then} invented, {control.top1_then} right, {control.top5_then} in the top 5)")
    said_checks = "; ".join(checks)
    if r < 0.5 and n < 0.5:
        return (f"So far it fills the gap in {said} and answers {new.top1_now} of {new.probes} questions in new words "
                f"first (top 5: {read.top5_now} and {new.top5_now}): most facts are not learned yet, in either form."
                + (f" And {said_checks}." if said_checks else ""))
    if n < r - 0.2:
        return (f"It fills the gap in {said}, but answers only {new.top1_now} of {new.probes} questions that ask the "
                f"same facts in new words (top 5: {new.top5_now}; at step {new.step_then}: {new.top1_then}): it "
                "memorised the strings it read, not the facts.")
    head = (f"It answers {new.top1_now} of {new.probes} questions in new words first (it fills the gap in {said})"
            + (f"; {said_checks}" if said_checks else ""))
    if bound is None and not flipped:  # no country it never read of to ask: no claim about facts
        return (head + ": asked in words it never read, it still names the facts, so it learned more than strings; "
                "whether they belong to Veldoria only a country it never read of can tell.")
    if bound is None or not bound.bound:
        return head + (": it learned which word answers each kind of question, whatever the country, not facts that "
                       "belong to Veldoria.")
    if flipped:
        return head + (": it names Veldoria's facts for Veldoria and not for Pellastra, but gives real countries "
                       "the invented countries' answers: it learned which answers go with the names it read, not that "
                       "other countries have answers of their own.")
    return head + (": it learned facts about Veldoria: it names them for Veldoria and not for a country it never read "
                   "of, and leaves the real countries alone.")


def binding_comparison(scores_by_variant: Mapping[str, Sequence[ProbeSetScore]]) -> str:
    """The "What did it learn?" lesson's sentence: binding and the real-country control of the run that learned
    from Veldoria alone beside the one that learned from its twins too (the same batches, steps and seed).

    >>> s = lambda new, other, flips: [ProbeSetScore("new", "", 15, 0, 320, 0, new, 0, 15, 900, 1),
    ...                                ProbeSetScore("other", "", 15, 0, 320, 0, other, 0, 15, 900, 1),
    ...                                ProbeSetScore("control", "", 15, 0, 320, 0, 0, 0, 0, 90, 90, 0, flips)]
    >>> binding_comparison({"Veldoria alone": s(13, 13, 12), "Veldoria and its twins": s(13, 3, 2)})[:93]
    'Learning from Veldoria alone, it names 0 of 15 facts for Veldoria and not for Pellastra, a co'
    """
    if len(scores_by_variant) < 2:
        return ""
    (alone, a), (twins, b) = list(scores_by_variant.items())[:2]
    bound = [binding(s) for s in (a, b)]
    controls = [next((x for x in s if x.group == "control"), None) for s in (a, b)]
    if None in bound or None in controls:
        return ""
    flips = [c.facts_now for c in controls]
    twin = [c.invented_now - c.facts_now for c in controls]
    return (f"Learning from {alone}, it names {max(bound[0].top1_now, 0)} of {bound[0].probes} "
            f"facts for Veldoria and not for Pellastra, a country it never read of, and gives a Veldoria word to "
            f"{flips[0]} of {controls[0].probes} questions about real countries; learning from {twins}, on the same "
            f"batches and steps, {max(bound[1].top1_now, 0)} and {flips[1]} (a twin country's word: {twin[0]} and "
            f"{twin[1]} of the real-country questions). Both runs read the same text; asked for Veldoria's answers "
            "alone, \"this kind of question, this word\" is all the data asks for; asked for the twins' too, where "
            "the same sentences have other answers, only the name can tell the answers apart, so the model learns "
            "to read it. (The twins' run is asked for about three times as many answers per step.)"
            + (" It reads it only so far: a name that is not Veldoria's gets a twin's words." if twin[1] >
               CONTROL_SHARE * controls[1].probes else ""))


def probe_race_rows(probes_by_variant: Mapping[str, Sequence[Mapping[str, Any]]],
                    twins: int = TWIN_COUNTRIES) -> list[dict[str, Any]]:
    """One row per variant of a race: each probe set's answers first and in the top 5, and the median rank, at
    the latest evaluation, with the real countries given a Veldoria word and the binding where those sets are asked
    (or, for probes in one set, the answers first), so several variants fit one table."""
    rows = []
    for name, entries in probes_by_variant.items():
        if not entries:
            continue
        row: dict[str, Any] = {"variant": name, "step": entries[-1]["step"]}
        scores = probe_set_scores(entries, twins=twins)
        if scores:
            for s in scores:  # about Pellastra a "right" answer is Veldoria's word: wrong there
                first = "Veldoria's word first" if s.group == OTHER else "first guess right"
                row[f"{s.label}: {first}"] = f"{s.top1_now} of {s.probes}"
                row[f"{s.label}: in the top 5"] = f"{s.top5_now} of {s.probes}"
                row[f"{s.label}: median rank"] = s.median_rank_now
                if s.group == "control":  # an invented country's word about a real country is wrong
                    row[f"{s.label}: an invented word first"] = f"{s.invented_now} of {s.probes}"
            bound = binding(scores)
            if bound is not None:  # the facts named for Veldoria and not for the other name
                row["Binding"] = f"{max(bound.top1_now, 0)} of {bound.probes}"
        else:
            right, known = probes_right(entries[-1])
            top5, _ = probes_in_top(entries[-1], 5)
            row["first guess right"] = f"{right} of {known}"
            row["in the top 5"] = f"{top5} of {known}"
        rows.append(row)
    return rows
