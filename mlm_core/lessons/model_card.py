"""The model panel's view-model: how the bundled default model was trained, read from its build record
(``assets/default_mlm/build.json``), and how it behaves, measured on the model in hand.

Every sentence here is built from the record or from a measurement, so it stays true when the asset is
rebuilt: which objectives each stage trained with (masked-language modelling, and the unlikelihood
"anti-copy" penalty where a stage's command set ``--anti-copy``), the masking rule of the held-out
perplexity, the repeat-answer set's scores when the record has them, and the model's own guesses on a
few everyday sentences (does it copy a word of the sentence?).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mlm_core.data import run_tokenizer
from mlm_core.default_model import is_copy, lineage
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX

# Everyday sentences a new user might type, sharing no run of 4 words with the bundled corpora the build trains on
# (tests/test_model_card.py): does the first guess repeat a word of the sentence?
COPY_SENTENCES = (
    "The sun rises in the [MASK].",
    "Bees make [MASK].",
    "We eat soup with a [MASK].",
    "Fish swim in the [MASK].",
    "She wrote a letter with a [MASK].",
    "The baby is sleeping in her [MASK].",
    "He locked the door with a [MASK].",
    "Birds build their [MASK] in trees.",
)
HUB_NOTE = ("A hub model such as bert-base-uncased (110 M parameters, pre-trained on BooksCorpus and English "
            "Wikipedia, 3.3 billion words: Devlin et al. 2019, §3.1) is far larger and read far more text, so it "
            "usually guesses better: pick it in the sidebar's model picker when you are online.")
WELLECK = "Welleck et al. 2019, \"Neural text generation with unlikelihood training\", eq. 4"
_ANTI_COPY = re.compile(r"--anti-copy[ =]([0-9.eE+-]+)")


def _anti_copy(stage: Mapping[str, Any]) -> float:
    found = _ANTI_COPY.findall(str(stage.get("command", "")))
    return float(found[-1]) if found else 0.0


def _masking_words(masking: Mapping[str, Any] | None) -> str:
    """'whole-word masking, 15% of the tokens (80% [MASK], 10% random, 10% unchanged)' from a record's masking."""
    if not masking:
        return "masking as recorded"
    p, mask, rand = masking.get("mlm_probability"), masking.get("mask"), masking.get("random")
    strategy = str(masking.get("strategy", "token")).replace("_", "-")
    text = f"{strategy} masking"
    if p is not None:
        text += f", {p:.0%} of the tokens"
    if mask is not None and rand is not None:
        text += f" ({mask:.0%} [MASK], {rand:.0%} random, {max(0.0, 1 - mask - rand):.0%} unchanged)"
    return text


def _spans(stages: Sequence[Mapping[str, Any]]) -> str:
    """'steps 2,400 to 4,400' for stages that follow each other; several ranges joined with 'and'."""
    ranges: list[list[int]] = []
    for s in stages:
        a, b = s.get("start_step"), s.get("end_step")
        if not (isinstance(a, int) and isinstance(b, int)):
            continue
        if ranges and a <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], b)
        else:
            ranges.append([a, b])
    return " and ".join(f"steps {a:,} to {b:,}" for a, b in ranges) or "one stage"


def training_story(record: Mapping[str, Any] | None) -> list[str]:
    """One sentence per objective the build trained with, and for the weights it started from (markdown).

    >>> story = training_story({"steps": 100, "masking": {"strategy": "whole_word", "mlm_probability": 0.15,
    ...     "mask": 0.8, "random": 0.1}, "stages": [{"command": "x --steps 60", "start_step": 0, "end_step": 60},
    ...     {"command": "x --anti-copy 2.0", "start_step": 60, "end_step": 100}]})
    >>> story[0][:60]
    '**Masked-language modelling** at every step: cross-entropy a'
    >>> "steps 60 to 100" in story[1] and "weight 2" in story[1]
    True
    """
    record = record or {}
    if not record:
        return []
    steps = record.get("steps")
    out = [f"**Masked-language modelling** at every step: cross-entropy at the selected positions, "
           f"{_masking_words(record.get('masking'))}: the loss the Training page minimises"
           + (f" ({steps:,} steps in this build)." if isinstance(steps, int) else ".")]
    stages = [s for s in record.get("stages") or [] if isinstance(s, Mapping)]
    with_penalty = [(s, _anti_copy(s)) for s in stages if _anti_copy(s) > 0]
    if not stages and float((record.get("settings") or {}).get("anti_copy") or 0) > 0:
        with_penalty = [({"start_step": 0, "end_step": steps}, float(record["settings"]["anti_copy"]))]
    if with_penalty:
        weights = sorted({w for _, w in with_penalty})
        out.append(f"**Plus an \"anti-copy\" penalty** in {_spans([s for s, _ in with_penalty])}: the unlikelihood "
                   f"−Σ log(1 − p(c)) of every other word c of the sentence at each selected position, weight "
                   f"{', '.join(f'{w:g}' for w in weights)} ({WELLECK}). It pushes down guesses that repeat a word "
                   "of the sentence, and with them right answers that happen to repeat one (a copy rate cannot see "
                   "that cost; a set of sentences whose answer repeats a word of the sentence can).")
    elif stages:
        out.append("No stage of this build added a penalty to the masked-language-modelling loss (no `--anti-copy`).")
    output_lr = float((record.get("settings") or {}).get("output_lr") or 0)
    if "untied" in str(record.get("trained", "")):
        out.append("The word embeddings stayed as the encoder had them. The output layer, which BERT ties to them, "
                   "was given a copy of them of its own"
                   + (f" and trained at learning rate {output_lr:g}" if output_lr > 0 else "")
                   + "; everything else trained.")
    elif record.get("settings", {}).get("emb_lr") == 0.0 or "frozen" in str(record.get("trained", "")):
        out.append("The word embeddings (and the output layer BERT ties to them) stayed as the encoder had them; "
                   "everything else trained.")
    earlier = lineage(dict(record))  # the builds it started from, and theirs (default_model.lineage)
    if earlier:
        counted = [e.get("steps") for e in earlier]
        steps_before = sum(counted) if all(isinstance(n, int) for n in counted) else None
        # one build's weights, whatever its own history: "an earlier build", and the chain behind it
        chain = "" if len(earlier) == 1 else f"a chain of {len(earlier)} builds, each started from the one before"
        if steps_before is not None:
            start = (f"It started from the weights of an earlier build ({steps_before:,} steps"
                     + (f" in all, over {chain})" if chain else ")"))
        else:
            start = "It started from the weights of an earlier build" + (f" (the last of {chain})" if chain else "")
        known = [s for e in earlier for s in e.get("stages") or [] if isinstance(s, Mapping)]
        listed = all(e.get("stages") for e in earlier)
        if any(_anti_copy(s) > 0 for s in known):
            out.append(start + (", which trained with the anti-copy penalty too." if len(earlier) == 1 else
                                ", at least one of which trained with the anti-copy penalty."))
        elif known and listed:
            out.append(start + ", which trained with masked-language modelling alone.")
        else:
            out.append(start + "; this record does not list that build's objectives (its own build.json does).")
    return out


def heldout_masking(record: Mapping[str, Any] | None) -> str:
    """How the build's held-out perplexity was masked, in words (the app's default is token masking)."""
    return _masking_words((record or {}).get("masking"))


def repeat_scores(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The repeat-answer set's scores (sentences whose right answer repeats a word of the sentence), when the
    build measured them: ``{"n", "top1", "top5"}`` from ``final_metrics["repeat_n"]``, ``["repeat_top1"]``,
    ``["repeat_top5"]``; None for a record without them.

    >>> repeat_scores({"final_metrics": {"repeat_n": 40, "repeat_top1": 0.2, "repeat_top5": 0.5}})
    {'n': 40, 'top1': 0.2, 'top5': 0.5}
    >>> repeat_scores({"final_metrics": {}}) is None
    True
    """
    final = (record or {}).get("final_metrics") or {}
    if final.get("repeat_top1") is None or final.get("repeat_top5") is None:
        return None
    return {"n": final.get("repeat_n"), "top1": final["repeat_top1"], "top5": final["repeat_top5"]}


def repeat_sentence(repeat: Mapping[str, Any]) -> str:
    """The repeat-answer set's scores in a sentence (``repeat_scores``' dict).

    >>> print(repeat_sentence({"n": 40, "top1": 0.2, "top5": 0.5}))
    On the build's repeat-answer set (40 sentences whose right answer repeats a word of the sentence): top-1 20%, top-5 50%. The copy rate cannot show this: it counts wrong copies only.
    """
    n = f"{repeat['n']} sentences" if repeat.get("n") else "sentences"
    return (f"On the build's repeat-answer set ({n} whose right answer repeats a word of the sentence): top-1 "
            f"{repeat['top1']:.0%}, top-5 {repeat['top5']:.0%}. The copy rate cannot show this: it counts wrong "
            "copies only.")


@dataclass(frozen=True)
class CopyCheck:
    sentence: str
    guess: str  # the model's first guess at the [MASK]
    copies: bool  # the guess is a word of the sentence (default_model.is_copy)


@torch.no_grad()
def copy_checks(model: nn.Module, tokenizer, sentences: Sequence[str] = COPY_SENTENCES) -> list[CopyCheck]:
    """The model's first guess at each sentence's one [MASK], and whether it repeats a word of the sentence."""
    mask = tokenizer.mask_token
    texts = [s.replace("[MASK]", mask) for s in sentences]
    enc = run_tokenizer(tokenizer, texts, return_tensors="pt", padding=True, truncation=True, max_length=64)
    ids, attention = enc["input_ids"], enc["attention_mask"]  # (B, T)
    labels = torch.where(ids == tokenizer.mask_token_id, ids, torch.full_like(ids, IGNORE_INDEX))  # (B, T)
    device = next(model.parameters()).device  # a shared cached model: in eval mode already, never switched here
    logits, _ = masked_lm_logits(model, ids.to(device), attention.to(device), labels.to(device))  # (M, V)
    rows = (labels != IGNORE_INDEX).nonzero()[:, 0].tolist()  # the sentence of each [MASK] row
    first = {}
    for r, top in zip(rows, logits.argmax(-1).tolist()):
        first.setdefault(r, top)  # a sentence's first [MASK]
    out = []
    for i, sentence in enumerate(sentences):
        guess = tokenizer.convert_ids_to_tokens(first[i]) if i in first else ""
        out.append(CopyCheck(sentence, guess, bool(guess) and is_copy(sentence, [], guess)))
    return out


def copy_sentence(checks: Sequence[CopyCheck]) -> str:
    """What the copy checks show, plainly (markdown).

    >>> copy_sentence([CopyCheck("Bees make [MASK].", "bees", True), CopyCheck("Fish swim in the [MASK].", "sea", False)])
    'On everyday sentences a new user might type, its first guess repeats a word of the sentence in 1 of 2: *Bees make [MASK].* → **bees**. A model that copies has learnt that a word of the sentence is often a safe guess, not what the blank means.'
    """
    if not checks:
        return ""
    copied = [c for c in checks if c.copies]
    if not copied:
        return (f"On {len(checks)} everyday sentences a new user might type, none of its first guesses repeats a "
                "word of the sentence.")
    shown = "; ".join(f"*{c.sentence}* → **{c.guess}**" for c in copied)
    return (f"On everyday sentences a new user might type, its first guess repeats a word of the sentence in "
            f"{len(copied)} of {len(checks)}: {shown}. A model that copies has learnt that a word of the sentence is "
            "often a safe guess, not what the blank means.")


Metric = tuple[str, str, "str | None"]  # (label, value, help) of one st.metric


def model_metrics(about: Mapping[str, Any], record: Mapping[str, Any] | None) -> list[Metric]:
    """The model panel's first row (``models.model_description``'s facts): size, shape, vocabulary, and the held-out
    perplexity its build record measured (else the bundled cloze top-5)."""
    metrics: list[Metric] = [("parameters", f"{about['params'] / 1e6:.1f} M", None),
                             ("layers · hidden", f"{about['layers']} · {about['hidden']}", None),
                             ("vocabulary", f"{about['vocab']:,}", None)]
    scores = about.get("scores", {})
    if scores.get("heldout_perplexity") is not None:  # cloze scores follow in their own row
        at_mask = (f" At the [MASK] positions alone the build measured {scores['heldout_mask_perplexity']:.0f}."
                   if scores.get("heldout_mask_perplexity") is not None else "")
        metrics.append(("held-out MLM perplexity", f"{scores['heldout_perplexity']:.0f}",
                        "exp(mean MLM loss over every selected position, [MASK], random and unchanged alike: "
                        "the loss BertForMaskedLM computes from its labels) on workshop-corpus documents the build "
                        "never trained on (lower is better), masked with the build's own rule: "
                        f"{heldout_masking(record)}, not the token masking the other pages "
                        "start with. The unchanged positions are nearly free (the model sees the answer), "
                        "so this is lower than the perplexity at [MASK] positions alone." + at_mask))
    else:
        metrics.append(("cloze top-5", f"{about['cloze_top5']:.0%}" if about.get("cloze_top5") is not None else "—",
                        "Share of the bundled fill-in-the-blank sentences where the answer is in the top 5."))
    return metrics


def score_metrics(scores: Mapping[str, Any]) -> list[Metric]:
    """The bundled model's scores as its build record measured them (``default_model.build_scores``), one row.

    >>> [v for _, v, _ in score_metrics({"cloze_top1": 0.4, "cloze_top1_se": 0.02, "copy_rate": 0.09})]
    ['40% ± 2%', '—', '9%', '—']
    """
    def pct(key: str) -> str:
        return f"{scores[key]:.0%} ± {scores[key + '_se']:.0%}" if key in scores and key + "_se" in scores else "—"

    return [
        ("cloze top-1", pct("cloze_top1"), "Answer is the first guess, on fill-in-the-blank sentences never "
         "trained on (± one standard error)."),
        ("cloze top-5", pct("cloze_top5"), "Answer among the first five guesses (± one standard error)."),
        ("copies a word", _copy_range(scores),
         "Share of sentences where the first guess repeats a word of the sentence that is not an answer, on each set "
         "the build measured (" + ", ".join(f"{name} {rate:.1%}" for name, rate in (scores.get("copy_rates") or
                                                                                   {}).items())
         + "). On fresh everyday sentences it copies more often: see the guesses under How it was trained, "
         "measured now."),
        ("everyday top-5", f"{scores['everyday_top5']:.0%}" if "everyday_top5" in scores else "—",
         "Everyday sentences whose answer does not appear in the sentence."),
    ]


def _copy_range(scores: Mapping[str, Any]) -> str:
    """The copy rate over the build's sets, as a range (one set: its rate; none: a dash).

    >>> _copy_range({"copy_rates": {"cloze": 0.1208, "unseen": 0.0661}}), _copy_range({"copy_rate": 0.09})
    ('7–12%', '9%')
    """
    rates = list((scores.get("copy_rates") or {}).values())
    if len(rates) > 1:
        return f"{100 * min(rates):.0f}–{100 * max(rates):.0f}%"
    if rates or "copy_rate" in scores:
        return f"{(rates or [scores['copy_rate']])[0]:.0%}"
    return "—"


def benchmark_metrics(scores: Mapping[str, Any]) -> list[Metric]:
    """The bundled model on sets nothing chose it by (``default_model.build_scores``): BLiMP, the unseen everyday
    sentences and the repeat-answer set, as its build record measured them. Empty for a record without them.

    >>> [v for _, v, _ in benchmark_metrics({"blimp_overall": 0.693, "blimp_overall_se": 0.0086, "blimp_pairs": 2010,
    ...                                      "unseen_top5": 0.5947, "unseen_copy_rate": 0.0925, "repeat_top5": 0.648})]
    ['69.3% ± 0.9%', '59%', '9%', '65%']
    """
    if "blimp_overall" not in scores and "unseen_top5" not in scores:
        return []
    se = scores.get("blimp_overall_se")
    blimp = (f"{100 * scores['blimp_overall']:.1f}%" + (f" ± {100 * se:.1f}%" if se is not None else "")
             if "blimp_overall" in scores else "—")
    pct = lambda key: f"{scores[key]:.0%}" if key in scores else "—"  # noqa: E731
    return [
        ("BLiMP (PLL)", blimp, f"Grammatical sentence preferred by pseudo-log-likelihood on {scores.get('blimp_pairs', '?'):,} "
         "BLiMP pairs (Warstadt et al. 2020; a fixed sample of every paradigm, mean over paradigms ± stratified SE), "
         "never trained on and not what chose the checkpoint, though stages were turned down when they fell on it. BLiMP's published results (its results file, revised 2021): LSTM "
         "69.8%, GPT-2 83.0%, human 88.6%."),
        ("unseen everyday top-5", pct("unseen_top5"), f"{scores.get('unseen_n', '?')} everyday sentences written for "
         "issue 26 that no build source contains, the answer not in the sentence (assets/cloze_unseen.tsv): reported "
         "only."),
        ("copies a word (unseen)", pct("unseen_copy_rate"), "Share of those unseen sentences where the first guess "
         "repeats a word of the sentence."),
        ("repeat-answer top-5", pct("repeat_top5"), "Sentences whose answer is a word of the sentence "
         "(assets/cloze_repeat.tsv): what a model taught never to copy would miss."),
    ]


BENCHMARK_CAPTION = ("The row above is measured on sets the checkpoint was not chosen on (BLiMP, and everyday sentences "
                     "written fresh for issue 26 that no build source contains): quote these rather than the cloze "
                     "row. They are not untouched: a stage that fell on them was not shipped (docs/lessons.md, "
                     "'Stages tried'). The cloze row before it comes from sets close to the one that chose the "
                     "checkpoint (issue 26 found its numbers do not carry over to unseen sentences).")


def build_caption(scores: Mapping[str, Any]) -> str:
    """Under the scores: how long the build trained, on how many cloze sentences it was scored."""
    steps = f"{scores['steps']:,}" if "steps" in scores else "?"
    run = f"{scores['steps_run']:,}" if "steps_run" in scores else "?"
    return (f"Build record: {run} training steps run in {scores.get('hours', '?')} h on a shared 2-core CPU; the "
            f"shipped weights descend from {steps} of them (each stage exported its best checkpoint and trained on "
            f"past it); {scores.get('cloze_n', '?')} cloze sentences; the checkpoint was chosen on a separate "
            "development set.")
