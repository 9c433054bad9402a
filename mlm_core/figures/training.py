"""Figures of the Training lesson: live loss curves, gradient norms, evaluation and probe predictions.

Pure functions: per-variant lists of the dict rows that `training.train` records (or that a
`jobs.RunSnapshot` copies out) go in, a plotly figure comes out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.figures import label_row_px
from mlm_core.figures.masking import log_ticks
from mlm_core.formatting import percent_text
from mlm_core.lessons.loss_lab import uniform_guess, uniform_guess_label
from mlm_core.training import BUCKETS, smooth

PALETTE = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9")
BUCKET_COLORS = {"frequent": "#1c7ed6", "medium": "#f08c00", "rare": "#e03131"}

Rows = Sequence[Mapping[str, Any]]


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _value(row: Mapping[str, Any], key: str) -> float | None:
    """A finite number, or None (a gap in the line): skipped steps and diverged losses draw as gaps."""
    v = row.get(key)
    if v is None or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def loss_figure(steps: Mapping[str, Rows], *, smoothing: float = 0.8, vocab_size: int | None = None,
                height: int = 380) -> go.Figure:
    """Training loss per step, one colour per variant: raw (faint) and smoothed (bold).

    `vocab_size` draws ln V, the loss of a model that guesses uniformly over the vocabulary.
    """
    fig = go.Figure()
    for i, (name, rows) in enumerate(steps.items()):
        x = [r["step"] for r in rows]
        raw = [_value(r, "loss") for r in rows]
        color = _color(i)
        fig.add_trace(go.Scatter(x=x, y=raw, mode="lines", name=f"{name} (raw)", legendgroup=name,
                                 line=dict(color=_rgba(color, 0.3), width=1), connectgaps=False,
                                 showlegend=False))
        fig.add_trace(go.Scatter(x=x, y=smooth(raw, smoothing), mode="lines", name=name, legendgroup=name,
                                 line=dict(color=color, width=2.5), connectgaps=False))
    if vocab_size:
        fig.add_hline(y=uniform_guess(vocab_size), line=dict(color="#868e96", dash="dot", width=1),
                      annotation_text=uniform_guess_label(vocab_size), annotation_position="top right")
    fig.update_layout(title="Training loss (faint: every step; bold: smoothed)", height=height,
                      xaxis=dict(title="step", rangemode="tozero"), yaxis=dict(title="loss (nats per masked token)"),
                      legend=dict(orientation="h", y=-0.2), margin=dict(t=60, b=40))
    return fig


def grad_norm_figure(steps: Mapping[str, Rows], *, clip: Mapping[str, float | None] | None = None,
                     height: int = 320) -> go.Figure:
    """Gradient norm before clipping, per step, on a log axis, with each variant's clipping threshold."""
    fig = go.Figure()
    thresholds: dict[float, list[int]] = {}
    for i, (name, rows) in enumerate(steps.items()):
        fig.add_trace(go.Scatter(x=[r["step"] for r in rows], y=[_value(r, "grad_norm") for r in rows],
                                 mode="lines+markers", marker=dict(size=4), name=name,
                                 line=dict(color=_color(i), width=1.5)))
        threshold = (clip or {}).get(name)
        if threshold:
            thresholds.setdefault(float(threshold), []).append(i)
    for threshold, owners in thresholds.items():  # one line per threshold, however many variants share it
        color = _color(owners[0]) if len(owners) == 1 else "#868e96"
        # The label is placed by hand: on a log axis plotly reads an annotation's y as log10(y), so
        # add_hline's own annotation at y = 25 stretched the axis to 1e25.
        fig.add_hline(y=threshold, line=dict(color=color, dash="dash", width=1))
        fig.add_annotation(x=1, xref="x domain", xanchor="right", y=math.log10(threshold), yanchor="top",
                           text=f"clip at {threshold:g}", showarrow=False)
    values = [v for trace in fig.data for v in trace.y if v is not None and math.isfinite(v) and v > 0]
    values += list(thresholds)
    yaxis = dict(title="‖g‖", type="log")
    if values:  # a decade of room around what is drawn: the norms and the thresholds
        yaxis["range"] = [math.floor(math.log10(min(values))) - 0.2, math.ceil(math.log10(max(values))) + 0.2]
        # 1, 2, 5 × 10^k labelled in full: plotly's own minor ticks read "5" and "2" for 50 and 20
        yaxis["tickvals"], yaxis["ticktext"] = log_ticks(10 ** yaxis["range"][0], 10 ** yaxis["range"][1])
    fig.update_layout(title="Gradient norm ‖g‖ before clipping", height=height,
                      xaxis=dict(title="step", rangemode="tozero"), yaxis=yaxis,
                      legend=dict(orientation="h", y=-0.25), margin=dict(t=60, b=40))
    return fig


def lr_figure(steps: Mapping[str, Rows], height: int = 220) -> go.Figure:
    """The learning-rate schedule actually used (warm-up, then decay)."""
    fig = go.Figure()
    for i, (name, rows) in enumerate(steps.items()):
        fig.add_trace(go.Scatter(x=[r["step"] for r in rows], y=[_value(r, "lr") for r in rows], mode="lines",
                                 name=name, line=dict(color=_color(i))))
    fig.update_layout(title="Learning rate", height=height, xaxis=dict(title="step"),
                      yaxis=dict(title="lr", exponentformat="e"), showlegend=len(steps) > 1,
                      margin=dict(t=50, b=40))
    return fig


def eval_figure(evals: Mapping[str, Rows], height: int = 420) -> go.Figure:
    """Held-out evaluation (always full cross-entropy): loss over every selected position (solid) and at
    the [MASK] positions alone (dashed), and top-1 / top-5 accuracy, per variant."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("held-out loss (full CE; dashed: [MASK] only)",
                                                        "held-out accuracy (dotted: top-5)"))
    for i, (name, rows) in enumerate(evals.items()):
        x = [r["step"] for r in rows]
        color = _color(i)
        fig.add_trace(go.Scatter(x=x, y=[_value(r, "loss") for r in rows], mode="lines+markers", name=name,
                                 legendgroup=name, line=dict(color=color)), row=1, col=1)
        if any(_value(r, "reported_loss") is not None for r in rows):  # a twin with an evaluation bug
            fig.add_trace(go.Scatter(x=x, y=[_value(r, "reported_loss") for r in rows], mode="lines+markers",
                                     name=f"{name}: what its buggy evaluation reports", legendgroup=name,
                                     marker=dict(symbol="x", size=9), line=dict(color=color, dash="dot", width=3)),
                          row=1, col=1)
        if any(_value(r, "mask_loss") is not None for r in rows):
            fig.add_trace(go.Scatter(x=x, y=[_value(r, "mask_loss") for r in rows], mode="lines",
                                     name=f"{name}: [MASK] positions only", legendgroup=name,
                                     line=dict(color=color, dash="dash")), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[_value(r, "top1") for r in rows], mode="lines+markers",
                                 name=f"{name} top-1", legendgroup=name, line=dict(color=color)), row=1, col=2)
        fig.add_trace(go.Scatter(x=x, y=[_value(r, "top5") for r in rows], mode="lines+markers",
                                 name=f"{name} top-5", legendgroup=name, line=dict(color=color, dash="dot")),
                      row=1, col=2)
    # short axis titles (a room-sized font cuts long ones off): the legend names each line's kind
    fig.update_yaxes(title_text="loss (nats)", row=1, col=1)
    fig.update_yaxes(title_text="accuracy", tickformat=".0%", row=1, col=2)
    fig.update_xaxes(title_text="step")
    fig.update_layout(height=height, legend=dict(orientation="h", y=-0.25), margin=dict(t=60, b=40))
    return fig


def bucket_figure(evals: Mapping[str, Rows], metric: str = "top1", height: int = 340) -> go.Figure:
    """The latest evaluation's accuracy on frequent, medium and rare tokens, per variant.

    This is where a frequency-weighted loss should show its effect: on the rare tokens.
    """
    fig = go.Figure()
    for i, (name, rows) in enumerate(evals.items()):
        if not rows:
            continue
        last = rows[-1]
        # the count once per group, in its name: every variant is scored on the same frozen positions, and one
        # label per bar collided ("29 tokens29 tokens29 tokens") at presenter size
        groups = [f"{b} ({last.get(f'{b}_tokens', 0)} tokens)" for b in BUCKETS]
        fig.add_trace(go.Bar(x=groups, y=[_value(last, f"{b}_{metric}") for b in BUCKETS], name=name,
                             marker_color=_color(i)))
    label = {"top1": "top-1 accuracy", "top5": "top-5 accuracy", "loss": "loss"}.get(metric, metric)
    fig.update_layout(title=f"Held-out {label} by token frequency (latest evaluation)", barmode="group",
                      height=height, yaxis=dict(title=label, tickformat=".0%" if metric != "loss" else None),
                      xaxis=dict(title="tokens, by how common they are in the training text"),
                      legend=dict(orientation="h", y=-0.25), margin=dict(t=60, b=40))
    return fig


def _probe_title(text: str, pred: Mapping[str, Any]) -> str:
    answer, rank = pred.get("answer"), pred.get("answer_rank")
    if not answer or rank is None:
        return _short(text)
    return f"{_short(text, 60)}<br>hidden word \"{html.escape(answer)}\": rank {rank:,}, {percent_text(pred['answer_prob'])}"


def probability_tickformat(top: float) -> str:
    """A d3 tick format that shows probabilities up to ``top`` as numbers, never a row of "0.00%"
    (an untrained model's guesses are ~3e-05).

    >>> probability_tickformat(0.4), probability_tickformat(0.01), probability_tickformat(3e-05)
    ('.0%', '.2%', '.1e')
    """
    if top >= 0.05:
        return ".0%"
    return ".2%" if top >= 5e-4 else ".1e"


def probe_figure(probes: Sequence[Mapping[str, Any]], title: str = "", height: int | None = None,
                 label_px: int | None = None) -> go.Figure:
    """Top-k predictions at each [MASK] of the probe sentences at one step, with their real probabilities
    (the axis fits the largest, so an untrained model's tiny ones stay visible); the hidden word in
    green, and its rank among all V tokens in the panel title.

    ``label_px``: the font size the chart is drawn at (presenter view: ``ui.PRESENTER_CHART_FONT_PX``).
    Each panel then gets the height its candidates need at that size: plotly labels a category axis
    every ceil(k · 1.2 · font / panel height) rows, so at 20 px the 190-px panels lost every other
    candidate. Without it the screen layout (13 px bar labels, 190 px a panel) is kept.
    """
    # Token text goes through html.escape: plotly reads <b>, <a href=…> and entities in labels.
    panels = [(html.escape(p["text"]), pred) for p in probes for pred in p["predictions"]]
    n = max(1, len(panels))
    if label_px is None:
        spacing, margin_t = min(0.12, 0.6 / n), 80
        height = height or 140 + 190 * n
    else:
        k = max((len(pred["tokens"]) for _, pred in panels), default=1)
        panel_px = math.ceil(1.5 * label_row_px(label_px) * k)  # every candidate labelled, with room
        gap_px = 5 * label_px + 10  # the x ticks of the panel above, then this panel's two-line title
        margin_t = 60 + 3 * label_px  # the chart title, then the first panel's two-line title
        plot_px = n * panel_px + (n - 1) * gap_px
        spacing = gap_px / plot_px if n > 1 else 0.0
        height = height or margin_t + 30 + plot_px
    fig = make_subplots(rows=n, cols=1, subplot_titles=[_probe_title(text, pred) for text, pred in panels] or [""],
                        vertical_spacing=spacing)
    for r, (_, pred) in enumerate(panels, 1):
        raw = list(pred["tokens"])[::-1]
        probs = list(pred["probs"])[::-1]
        colors = ["#2f9e44" if t == pred.get("answer") else "#1c7ed6" for t in raw]
        tokens = [html.escape(t) for t in raw]
        fig.add_trace(go.Bar(x=probs, y=tokens, orientation="h", marker_color=colors, showlegend=False,
                             text=[percent_text(p) for p in probs], textposition="outside",
                             textfont=dict(size=label_px or 13), cliponaxis=False), row=r, col=1)
        top = max(probs, default=1.0)
        fig.update_xaxes(range=[0, min(1.15, top * 1.3) if top > 0 else 1.0],
                         tickformat=probability_tickformat(top), row=r, col=1)
    if label_px is not None:  # subplot titles are annotations: a room-sized layout font does not reach them
        fig.update_annotations(font_size=label_px)
    fig.update_layout(title=title or "What the model guesses at [MASK]", height=height,
                      margin=dict(t=margin_t, b=30, l=110))
    return fig


def _short(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


FILMSTRIP_ANSWER = "#2f9e44"


ROOM_FRAMES = 7  # the most filmstrip frames drawn at room size (presenter view)


def filmstrip_figure(frames: Sequence[Any], *, title: str = "", unit: str = "step", label_px: int | None = None,
                     height: int | None = None) -> go.Figure:
    """One masked position, frame by frame (``training_lessons.Frame``s: evaluation steps, or base and trained):
    the top guesses with their probabilities in columns across (darker = likelier), the hidden word's cells
    outlined in green, and below, the hidden word's rank among all V tokens as a line (1 at the top, log axis).
    """
    font = label_px or 12
    shown_all = len(frames)
    if label_px and len(frames) > ROOM_FRAMES:  # room-sized text: 13 columns of five guesses overlap at 1280 px
        keep = sorted({round(i * (len(frames) - 1) / (ROOM_FRAMES - 1)) for i in range(ROOM_FRAMES)})
        frames = [frames[i] for i in keep]  # evenly spaced, the first and the last kept
    labels = [html.escape(f.label) for f in frames]
    k = max((len(f.tokens) for f in frames), default=1)
    places = [f"{i + 1}." for i in range(k)]
    z = [[f.probs[i] if i < len(f.probs) else None for f in frames] for i in range(k)]  # (k, frames)
    text = [[(f"<b>{html.escape(f.tokens[i])}</b>" if f.tokens[i] == f.answer else html.escape(f.tokens[i]))
             + f"<br>{percent_text(f.probs[i])}" if i < len(f.tokens) else "" for f in frames] for i in range(k)]
    has_rank = any(f.answer_rank is not None for f in frames)
    fig = make_subplots(rows=2 if has_rank else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.66, 0.34] if has_rank else [1.0])
    fig.add_trace(go.Heatmap(x=labels, y=places, z=z, text=text, texttemplate="%{text}",
                             textfont=dict(size=font), colorscale="Blues", zmin=0.0, zmax=1.0, showscale=False,
                             hovertemplate="%{x}: guess %{y} %{text}<extra></extra>", xgap=2, ygap=2), row=1, col=1)
    hit = [(labels[c], places[i]) for c, f in enumerate(frames) for i, t in enumerate(f.tokens) if t == f.answer]
    if hit:
        fig.add_trace(go.Scatter(x=[h[0] for h in hit], y=[h[1] for h in hit], mode="markers", showlegend=False,
                                 marker=dict(symbol="square-open", size=2.6 * font + 14, color=FILMSTRIP_ANSWER,
                                             line=dict(width=3)), hoverinfo="skip"), row=1, col=1)
    fig.update_yaxes(autorange="reversed", title_text="guess", row=1, col=1)
    if has_rank:
        ranks = [f.answer_rank for f in frames]
        fig.add_trace(go.Scatter(x=labels, y=ranks, mode="lines+markers+text", showlegend=False,
                                 text=[f"{r:,}" if r is not None else "" for r in ranks], textposition="top center",
                                 textfont=dict(size=font, color=FILMSTRIP_ANSWER),
                                 line=dict(color=FILMSTRIP_ANSWER, width=2.5), marker=dict(size=8)), row=2, col=1)
        top = max((r for r in ranks if r is not None), default=1)
        # -0.8: room above rank 1 for its label (at -0.35 the "1" was cut off at the top)
        fig.update_yaxes(type="log", range=[math.log10(max(top, 10) * 4), -0.8], title_text="rank of the hidden word",
                         row=2, col=1)
    answer = next((f.answer for f in frames if f.answer), None)
    fig.update_xaxes(type="category", title_text=unit if unit else None, row=2 if has_rank else 1, col=1)
    heading = title or "The guess over time"
    if answer:
        heading += f" (hidden word: \"{html.escape(answer)}\", outlined in green)"
    if len(frames) < shown_all:
        heading += f"<br>{len(frames)} of {shown_all} evaluations, evenly spaced (presenter view)"
    fig.update_layout(title=heading, height=height or (180 + 46 * k + (170 if has_rank else 0)) * font // 12,
                      margin=dict(t=60 + font, b=40, l=70, r=20), font=dict(size=font) if label_px else None)
    return fig
