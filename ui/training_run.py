"""The Training page's live view of a run: its curves, its probes, what its lesson says about it, its results and
downloads, drawn from one snapshot (``jobs`` run) and the page's record of the run (``RunShown``).

Nothing here knows a lesson by name: the run's lesson record (``training_registry``) says how its probes are shown
and what is said about the run; every number comes from ``mlm_core`` (the view-models and the run's curves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from mlm_core.figures.training import (bucket_figure, eval_figure, filmstrip_figure, grad_norm_figure, loss_figure,
                                       lr_figure, probe_figure)
from mlm_core.errors import InputError
from mlm_core.formatting import metric_change
from mlm_core.lessons.export import lesson_zip
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons.training_lessons import YOURS, filmstrip_frames, filmstrip_summary, probe_choices
from mlm_core.lessons.training_registry import Block, RunView, TrainingLesson, run_lesson, run_twins
from mlm_core.lessons.training_view import (BINDING_SHARE, OTHER, PROBE_SET_ABOUT, Texts, binding, probe_preview,
                                            probe_race_rows, probe_rows, probe_set_rows, probe_set_scores,
                                            probes_right, strings_or_facts)
from mlm_core.loss_registry import find
from ui.chips import markdown_text
from ui.live_class import class_answers_rows
from ui.messages import show_error
from ui.presenter import PRESENTER_CHART_FONT_PX, chart, table
from ui.session import guess_client

TEXT = LessonText("training")  # mlm_core/lessons/text/training.md


@dataclass(frozen=True)
class RunShown:
    """How the page draws a run: the page's record of it (``meta``: its lesson, from scratch, defaults, the learner's
    probe) and what the page knows around it."""

    meta: Mapping[str, Any]
    vocab_size: int  # the tokenizer's: the answer's rank is among this many tokens
    presenter: bool
    model_label: str  # the export's "model"
    seed: int

    @property
    def lesson(self) -> TrainingLesson:
        return run_lesson(self.meta)

    @property
    def twins(self) -> int:
        return run_twins(self.meta)

    @property
    def label_px(self) -> int | None:
        return PRESENTER_CHART_FONT_PX if self.presenter else None


def blocks(shown: list[Block]) -> None:
    """A lesson's sentences, each as its kind says (markdown, caption, info, warning or Python code)."""
    for kind, text in shown:
        if kind == "code":
            st.code(text, language="python", wrap_lines=True)
        else:
            getattr(st, kind)(text)


def side_by_side(n: int, presenter: bool):
    """n columns on a screen; in presenter view one above the other, so the room-sized tables keep every column."""
    return [st.container() for _ in range(n)] if presenter else st.columns(n)


def draw_probes(snap, shown: RunShown) -> None:
    """What the model guesses at each probe's [MASK]: bars, and a table from the first guess to now."""
    probe_steps = sorted({p["step"] for v in snap.variants.values() for p in v.probes})
    if not probe_steps:
        return
    st.subheader("Predictions sharpening")
    at = probe_steps[-1]  # while training: the latest; afterwards, any step
    if snap.finished and len(probe_steps) > 1:
        at = st.select_slider("Show the predictions at step", probe_steps, probe_steps[-1],
                              key=f"training_probe_step_{snap.run_id}")
    for name, v in snap.variants.items():
        entries = [p for p in v.probes if p["step"] <= at]
        if not entries:
            continue
        # the facts lessons: phrases it read beside questions in new words
        scores = probe_set_scores(entries, twins=shown.twins)
        if scores:
            draw_probe_sets(name, entries, at, scores, shown)
            continue
        right, known = probes_right(entries[-1])
        if known:
            first_right, _ = probes_right(entries[0])
            st.metric(f"{name}: probes answered right (top-1)", f"{right} of {known}",
                      **metric_change(right, first_right, entries[0]["step"]))
        # static HTML, whose cells wrap: at 1400 px the dataframe cut its right-hand columns off
        table(pd.DataFrame(probe_rows(entries)), key=f"training_probe_table_{name}",
              percent=("answer's probability now",), static=True)
        # presenter view: room-sized fonts, and panels tall enough that plotly labels all 5 candidates
        probe = probe_figure(entries[-1]["probes"], title=f"{name}: step {at}", label_px=shown.label_px)
        chart(probe, f"training_probe_{name}")


def draw_race_probes(snap, shown: RunShown) -> None:
    """A race of variants (the masking rates, a clean run and its twin): every variant's probe scores in one
    table, and each variant's probes in full below it."""
    probes = {name: v.probes for name, v in snap.variants.items() if v.probes}
    if not probes:
        return
    st.subheader("The probes, variant by variant")
    # a room-sized row of 10+ columns runs off the screen: in presenter view one column per variant
    table(pd.DataFrame(probe_race_rows(probes, twins=shown.twins)), key="training_probe_race", static=True,
          turn="variant")
    if not snap.finished:  # every probe of every variant once the run is done: each redraw would hold the CPU
        st.caption("Every probe of each variant appears here when the run is done.")
        return
    for name, entries in probes.items():
        with st.expander(f"{name}: every probe"):
            scores = probe_set_scores(entries, twins=shown.twins)
            groups = [sc.group for sc in scores] or [None]
            for group in groups:
                table(pd.DataFrame(probe_set_rows(entries, group) if group else probe_rows(entries)), static=True)


def draw_filmstrip(snap, shown: RunShown, lesson_run: bool) -> None:
    """One probe's top guesses at every evaluation of the run (steps across), the hidden word's rank below."""
    with_probes = {name: v.probes for name, v in snap.variants.items() if v.probes}
    if not with_probes:
        return
    box = st.container() if lesson_run else st.expander("🎞 The guess over time: one probe, evaluation by evaluation")
    with box:
        if lesson_run:
            st.subheader("🎞 The guess over time")
        name = next(iter(with_probes))
        if len(with_probes) > 1:
            name = st.selectbox("Variant", list(with_probes), key=f"training_film_variant_{snap.run_id}")
        entries = with_probes[name]
        choices = dict(probe_choices(entries[-1]))
        if not choices:
            st.caption("No probe of this run has a known hidden word.")
            return
        groups = [p.get("group", "") for p in entries[-1]["probes"]]
        first = next((i for g in (YOURS, "new") for i in choices if groups[i] == g), next(iter(choices)))
        if shown.meta.get("learner_probe"):
            first = max(choices)  # the learner's own sentence, the last probe
        index = st.selectbox("Probe", list(choices), index=list(choices).index(first), format_func=choices.get,
                             key=f"training_film_probe_{snap.run_id}")
        frames = filmstrip_frames(entries, index)
        figure = filmstrip_figure(frames, title=f"{name}: the guess at [MASK], evaluation by evaluation",
                                  label_px=shown.label_px)
        chart(figure, f"training_film_{snap.run_id}")
        st.markdown(markdown_text(filmstrip_summary(frames)))
        st.caption(TEXT("filmstrip"))


def draw_probe_sets(name: str, entries, at: int, scores, shown: RunShown) -> None:
    """The facts lesson's probe sets side by side: top-1, top-5 and the answer's rank, from the first
    evaluation to step `at` (``scores``: ``probe_set_scores`` of ``entries``), each probe's row, and one sentence on
    what the difference means."""
    # two sets side by side at most (other countries and the learner's sentence go below: three columns cut the tables)
    places = [place for i in range(0, len(scores), 2) for place in side_by_side(min(2, len(scores) - i),
                                                                                 shown.presenter)]
    for column, score in zip(places, scores):
        with column:
            st.markdown(f"**{score.label}** ({score.probes}: {PROBE_SET_ABOUT.get(score.group, '')})")
            m1, m2 = st.columns(2)
            m1.metric("Veldoria's word first" if score.group == OTHER else "first guess right",
                      f"{score.top1_now} of {score.probes}",
                      **metric_change(score.top1_now, score.top1_then, score.step_then,
                                      fewer_is_better=score.group == OTHER))
            if score.group == "control":  # an invented country's word here is wrong: fewer is better
                m2.metric("an invented word first", f"{score.invented_now} of {score.probes}",
                          **metric_change(score.invented_now, score.invented_then, score.step_then,
                                          fewer_is_better=True))
            elif score.group == OTHER:  # Veldoria's word about another country: not learned about Veldoria
                m2.metric("Veldoria's word in the top 5", f"{score.top5_now} of {score.probes}",
                          **metric_change(score.top5_now, score.top5_then, score.step_then, fewer_is_better=True))
            else:
                m2.metric("answer in the top 5", f"{score.top5_now} of {score.probes}",
                          **metric_change(score.top5_now, score.top5_then, score.step_then))
            twin_then, twin_now = score.invented_then - score.facts_then, score.invented_now - score.facts_now
            if score.group in (OTHER, "control") and (twin_then or twin_now):  # an invented answer, not Veldoria's
                st.caption(f"A twin country's word first (an invented answer, wrong here too): {twin_now} of "
                           f"{score.probes} at step {score.step_now}, {twin_then} at step {score.step_then}.")
            if score.median_rank_then is not None and score.median_rank_now is not None:
                st.caption(f"The answer's median rank among all {shown.vocab_size:,} tokens: "
                           f"{score.median_rank_then:,.0f} at step {score.step_then}, {score.median_rank_now:,.0f} at "
                           f"step {score.step_now} (1 = first guess).")
            table(pd.DataFrame(probe_set_rows(entries, score.group)), static=True)
    bound = binding(scores)
    if bound is not None:
        st.metric("Binding: facts named for Veldoria and not for Pellastra (questions in new words)",
                  f"{max(bound.top1_now, 0)} of {bound.probes}", help=TEXT("binding_help", share=BINDING_SHARE),
                  **metric_change(max(bound.top1_now, 0), max(bound.top1_then, 0), score.step_then))
    st.markdown(f"**{name}, step {at}:** " + strings_or_facts(scores))
    with st.expander("Each probe's five first guesses, as bars"):
        group = st.radio("Probe set", [s.group for s in scores], format_func=lambda g: next(
            s.label for s in scores if s.group == g), key=f"training_probe_set_{name}", horizontal=True)
        last = [p for p in entries[-1]["probes"] if p.get("group", "") == group]
        probe = probe_figure(last, title=f"{name}: step {at}", label_px=shown.label_px)
        chart(probe, f"training_probe_{name}_{group}")


def draw_run(snap, shown: RunShown, *, from_scratch: bool) -> None:
    """Everything the page shows about a run, from one snapshot."""
    # the time left from the measured step and evaluation times, never past the time cap; a queued run's place
    st.progress(min(1.0, snap.progress), text=snap.progress_text())
    if snap.error:
        st.error(markdown_text(snap.error))
    view, lesson = RunView.of(snap, shown.meta), shown.lesson
    steps, evals = view.steps, view.evals
    if not any(steps.values()) and not any(evals.values()):
        st.info("The first step is on its way (the model copy and the held-out set are being prepared)…")
        return
    if not any(len(rows) > 1 for rows in evals.values()):  # one point: nothing to compare, no chart to draw yet
        cfg = next(iter((snap.configs or {}).values()), {})
        st.info(f"Step 0 is measured; the curves, the probes' before-and-after and the verdicts come with the next "
                f"evaluation (step {min(cfg.get('eval_every', 1), snap.total_steps)}). Training steps so far: "
                f"{max((len(rows) for rows in steps.values()), default=0)}.")
        return
    vocab_size = shown.vocab_size if from_scratch else None  # ln V, the uniform guess, drawn for scale
    if any(evals.values()):
        chart(eval_figure(evals), "training_eval_chart")
        st.caption(TEXT("held_out"))
        focus = [(name, v.evals[0], v.evals[-1]) for name, v in snap.variants.items()
                 if v.evals and v.evals[0].get("focus_loss") is not None]
        if focus:
            name, first, last = focus[0]
            st.caption(TEXT("focus", tokens=last["focus_tokens"], focus_then=first["focus_loss"],
                            focus_now=last["focus_loss"], variant=name, then=first["loss"], now=last["loss"],
                            rest=TEXT("focus_scratch" if from_scratch else "focus_trained")))
    blocks(lesson.verdict(view))
    if lesson.probes == "filmstrip":  # its own lesson: the filmstrip first, live; the probe tables below it
        draw_filmstrip(snap, shown, lesson_run=True)
        draw_probes(snap, shown)  # (not in an expander: its bars have one of their own, and expanders do not nest)
    elif lesson.probes == "race" and len(snap.variants) > 1:
        draw_race_probes(snap, shown)
    else:
        draw_probes(snap, shown)
    blocks(lesson.summary(view))
    if snap.finished and lesson.probes != "filmstrip":  # elsewhere once the run is done
        draw_filmstrip(snap, shown, lesson_run=False)
    if any(steps.values()):
        chart(loss_figure(steps, vocab_size=vocab_size), "training_loss_chart")
        blocks(lesson.loss_note(view))
    trained_with = (find((cfg or {}).get("loss")) for cfg in (snap.configs or {}).values())
    for note in dict.fromkeys(v.training_note for v in trained_with if v is not None and v.training_note):
        st.caption(note)  # what a variant's own training loss means (the sampled softmax's: an estimate)
    draw_results(snap, shown, view)


def draw_results(snap, shown: RunShown, view: RunView) -> None:
    """The gradient-norm, learning-rate and frequency-bucket charts, the results table and the downloads."""
    steps, evals = view.steps, view.evals
    # side by side on a laptop; one under the other in presenter view, where a third of the page is too narrow
    c1, c2 = (st.container(), st.container()) if shown.presenter else st.columns([2, 1])
    clips = {name: cfg.get("max_grad_norm") for name, cfg in (snap.configs or {}).items()}
    with c1:
        chart(grad_norm_figure(steps, clip=clips), "training_grad_chart")
    with c2:
        chart(lr_figure(steps), "training_lr_chart")
    if any(evals.values()):
        chart(bucket_figure(evals), "training_bucket_chart")
    rows = [v.results_row(clips.get(name)) for name, v in snap.variants.items()]
    st.subheader("Results")
    # 14 columns: HTML, whose headers wrap, so none is cut at the right edge at 1400 px ("top-…" in a dataframe)
    table(pd.DataFrame(rows), key="training_results", percent=("top-1", "top-5"), static=True,
          turn="variant")  # 14 columns cannot fit a room-sized font: one column per variant there
    curves = snap.curves_rows()  # one copy of every event, for the CSV and the zip
    c1, c2 = st.columns(2)
    c1.download_button("⬇ Download all curves (CSV)", pd.DataFrame(curves).to_csv(index=False).encode("utf-8"),
                       file_name=f"mlm_lab_curves_{snap.run_id}.csv", mime="text/csv", key="training_csv")
    export = dict(settings={"model": shown.model_label, "seed": shown.seed, "variants": snap.configs or {}},
                  curves=curves, tables={"results": rows})
    said = shown.lesson.export(view)  # what the page said about the run, sentence by sentence
    if said:
        export["tables"]["said on the page"] = said
    room = class_answers_rows("training")  # the class's answers, once revealed
    if room:
        export["tables"]["class answers"] = room
    figures = {"loss": loss_figure(steps), "held-out": eval_figure(evals) if any(evals.values()) else None}
    c2.download_button("⬇ Lesson export (zip: curves, results, charts, settings)",
                       lambda: lesson_zip("Training", figures={k: f for k, f in figures.items() if f is not None},
                                          **export),
                       file_name=f"mlm_lab_training_{snap.run_id}.zip", mime="application/zip",
                       key="training_lesson_zip", on_click="ignore")


@st.cache_data(max_entries=8, show_spinner=False)
def cached_preview(key: str, _texts: Texts, _model, _tokenizer):
    """The model's guesses at the probes before any training (one forward pass)."""
    return probe_preview(_model, _tokenizer, _texts)


def probe_preview_panel(model_name: str | None, model, tokenizer, texts: Texts, *, expanded: bool,
                        presenter: bool) -> None:
    """What the model guesses at the probes now, before any training, one table per probe set."""
    with st.expander("Before you press Start: what the model guesses at the probes now", expanded=expanded):
        preview = cached_preview(f"{model_name or 'default'}:{id(model)}:{hash(texts.probes)}", texts, model, tokenizer)
        st.caption(TEXT("preview"))
        sets = list(dict.fromkeys(row["probe set"] for row in preview))
        for column, name in zip(side_by_side(len(sets), presenter), sets):
            with column:
                st.markdown(f"**{name}**")
                table(pd.DataFrame([{k: v for k, v in row.items() if k != "probe set"} for row in preview
                                    if row["probe set"] == name]), static=True)


def teacher_panel(manager) -> None:
    """Every run on this server, and a stop button for each, behind the teacher key (MLMLAB_TEACHER_KEY)."""
    with st.expander("Teacher: every run on this server", expanded=False):
        key = st.text_input("Teacher key", type="password", key="training_teacher_key",
                            help="The value of MLMLAB_TEACHER_KEY the server was started with.")
        if key:
            try:
                runs = manager.teacher_runs(key, client=guess_client())
                rows = [[s.run_id, s.label, s.status, f"{s.step} / {s.total_steps}", round(s.elapsed_s)] for s in runs]
                table(pd.DataFrame(rows, columns=["run", "what", "status", "step", "seconds"]),
                      key="training_teacher_runs")
                if runs:
                    target = st.selectbox("Run to stop", [s.run_id for s in runs], key="training_teacher_target")
                    if st.button("■ Stop this run", key="training_teacher_stop"):
                        manager.teacher_stop(key, target, client=guess_client())
                        st.toast(f"Stopping run {target}…")
                wrong = manager.key_guard.failures()
                if wrong:
                    st.caption("Wrong teacher keys since the server started (also in the server's terminal): "
                               + "; ".join(f"{f.total} from {markdown_text(f.client)}" for f in wrong[:10]) + ".")
            except InputError as exc:
                show_error(exc, "warning")
