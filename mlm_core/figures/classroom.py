"""The room beside the model: the class's answers to a live question, and what the model said.

Pure functions, data in, plotly figure out. Every answer and candidate goes through ``html.escape`` (plotly
renders HTML in labels, and a student typed these).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.classroom import Tally, TOP_K_SHOWN

CLASS_COLOR = "#7048e8"
MODEL_COLOR = "#1c7ed6"
TRUTH_COLOR = "#2f9e44"
WORDS_SHOWN = 10  # the class's most given words; the rest are summed as "other words"


def _e(text: str) -> str:
    return html.escape(str(text), quote=False)


def tally_rows(tally: Tally) -> list[dict]:
    """The table under the chart: each answer the class gave or the model proposed, with both sides' numbers.

    >>> from mlm_core.classroom import Question, Reveal
    >>> t = Tally(Question("q", "predictions", "word", "?"), (("mat", 3), ("rug", 1)), 4, 5, None,
    ...           Reveal((("floor", 0.4), ("mat", 0.3)), truth="mat"))
    >>> [(r["answer"], r["the class"], r["the model"]) for r in tally_rows(t)]
    [('mat', '3 of 4', '30.0%'), ('rug', '1 of 4', ''), ('floor', '0 of 4', '40.0%')]
    """
    model = dict(tally.reveal.model) if tally.reveal else {}
    truth = tally.reveal.truth if tally.reveal else ""
    answers = [a for a, _ in tally.counts]
    if tally.question.kind == "choice":
        answers = list(tally.question.choices)
    answers += [a for a in model if a not in answers]
    counts = dict(tally.counts)
    rows = []
    for answer in answers:
        row = {"answer": answer, "the class": f"{counts.get(answer, 0)} of {tally.answered}",
               "the model": f"{model[answer]:.1%}" if answer in model and tally.question.kind == "word"
               else ("its pick" if answer in model else "")}
        if truth:
            row["right answer"] = "✓" if answer == truth else ""
        rows.append(row)
    return rows


def class_answers_figure(tally: Tally, *, height: int = 380, font_px: int | None = None) -> go.Figure:
    """The class's answers by count (a word question: beside the model's top candidates by probability).

    The right answer, once revealed, is green on both sides; the title says how many answered.
    """
    q, reveal = tally.question, tally.reveal
    truth = reveal.truth if reveal else ""
    title = f"{tally.answered} of {tally.connected} answered" if tally.counts or tally.answered else "No answers yet"
    counts = list(tally.counts)
    if q.kind == "choice":
        given = dict(counts)
        counts = [(c, given.get(c, 0)) for c in q.choices]
    elif q.kind == "number":
        counts = sorted(counts, key=lambda kv: int(kv[0]))
    elif len(counts) > WORDS_SHOWN:
        counts = counts[:WORDS_SHOWN] + [("other words", sum(n for _, n in counts[WORDS_SHOWN:]))]
    colors = [TRUTH_COLOR if a == truth else CLASS_COLOR for a, _ in counts]
    class_bar = dict(x=[n for _, n in counts], y=[_e(a) for a, _ in counts], orientation="h", marker_color=colors,
                     text=[n for _, n in counts], textposition="auto", name="the class",
                     hovertemplate="%{y}: %{x} answers<extra></extra>")
    model = list(reveal.model)[:TOP_K_SHOWN] if reveal and q.kind == "word" else []
    if model:
        fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.18,
                            subplot_titles=(f"The class: {title}", "The model: its top guesses"))
        fig.add_trace(go.Bar(**class_bar), row=1, col=1)
        fig.add_trace(go.Bar(x=[p for _, p in model], y=[_e(w) for w, _ in model], orientation="h",
                             marker_color=[TRUTH_COLOR if w == truth else MODEL_COLOR for w, _ in model],
                             text=[f"{p:.0%}" for _, p in model], textposition="auto", name="the model",
                             hovertemplate="%{y}: %{x:.1%}<extra></extra>"), row=1, col=2)
        fig.update_yaxes(autorange="reversed", type="category", row=1, col=2)  # "1990" is a word here
        fig.update_xaxes(title_text="probability", tickformat=".0%", row=1, col=2)
    else:
        fig = go.Figure(go.Bar(**class_bar))
        picks = ", ".join(_e(a) for a, _ in (reveal.model if reveal else ()))
        fig.update_layout(title=f"The class: {title}" + (f" · the model: {picks}" if picks else ""))
    axes = dict(row=1, col=1) if model else {}
    fig.update_yaxes(autorange="reversed", type="category", **axes)
    fig.update_xaxes(title_text="answers", rangemode="tozero", dtick=1 if max([n for _, n in counts] or [0]) < 10
                     else None, **axes)
    fig.update_layout(height=height, showlegend=False, margin=dict(l=10, r=10, t=60, b=40))
    if font_px:
        fig.update_layout(font=dict(size=font_px))
        fig.update_annotations(font_size=font_px + 2)
    return fig
