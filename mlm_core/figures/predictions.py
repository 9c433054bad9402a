"""Figures of the Predictions lesson: what the model guesses at each selected position.

Pure functions: ``Predictions`` / ``FillResult`` in, plotly figure out. Token text goes through
``html.escape`` because plotly renders HTML in labels (RoBERTa's ``<mask>`` would vanish).
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.figures.masking import COLORS
from mlm_core.formatting import probability_text
from mlm_core.lessons.loss_lab import uniform_guess, uniform_guess_label
from mlm_core.lessons.predictions import FILL_LABELS
from mlm_core.masking import DECISION_WORDS, SELECTED_DECISIONS
from mlm_core.predict import Predictions, TokenPrediction

TRUE_COLOR = "#2f9e44"  # the token the model should predict
OTHER_COLOR = "#adb5bd"  # the model's other guesses
MISSED_COLOR = "#e8590c"  # the true token, shown after the top-k because it ranked lower
MODE_COLORS = {"independent": "#1c7ed6", "easy_first": "#ae3ec9", "mask_predict": "#e8590c"}


def _e(text: str) -> str:
    return html.escape(str(text), quote=False)


def _facet_title(p: TokenPrediction, known_truth: bool = True) -> str:
    if not known_truth:
        return f"position {p.position}: your blank <b>{_e(p.seen_token)}</b>"
    decision = f" · {DECISION_WORDS.get(p.decision.name, p.decision.name)}" if p.decision is not None else ""
    return f"position {p.position}: saw <b>{_e(p.seen_token)}</b>, should predict <b>{_e(p.true_token)}</b>{decision}"


def topk_figure(predictions: Predictions, *, max_positions: int = 8, bar_height: int = 22) -> go.Figure:
    """One facet per selected position: the top-k probabilities, the true token in green.

    When the true token is not among the top-k it gets an extra orange bar below them, labelled
    with its rank, so "how wrong" is visible too.
    """
    shown = predictions.positions[:max_positions]
    if not shown:
        fig = go.Figure()
        fig.add_annotation(text="No selected positions: mask at least one token.", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(height=200, xaxis=dict(visible=False), yaxis=dict(visible=False))
        return fig
    truth = predictions.known_truth
    height = 80 + (60 + bar_height * (predictions.k + 1)) * len(shown)
    # The gap between facets in pixels, not as a share of the figure: it must hold one facet's tick labels
    # and the next facet's title, whatever the number of facets (a share of a short 2-facet figure let the
    # title run over the ticks above it). Presenter view draws both larger, so the gap grows with the bars.
    gap_px = 70 + 2 * max(0, bar_height - 22)
    spacing = min(gap_px / max(height - 100, 1), 0.9 / max(len(shown) - 1, 1)) if len(shown) > 1 else 0.0
    fig = make_subplots(rows=len(shown), cols=1, subplot_titles=[_facet_title(p, truth) for p in shown],
                        vertical_spacing=spacing)
    for row, p in enumerate(shown, start=1):
        labels = [f"{_e(t)}" for t in p.top_tokens]
        values = list(p.top_probs)
        colors = [TRUE_COLOR if truth and i == p.true_id else OTHER_COLOR for i in p.top_ids]
        texts = [probability_text(q) for q in values]
        if truth and p.true_rank > len(p.top_ids):  # the true token ranked below the top-k: show it anyway
            labels.append(f"{_e(p.true_token)} (rank {p.true_rank:,})")
            values.append(p.true_prob)
            colors.append(MISSED_COLOR)
            texts.append(f"{probability_text(p.true_prob)} · rank {p.true_rank:,}")
        fig.add_trace(
            go.Bar(
                x=values, y=labels, orientation="h", marker_color=colors, text=texts, textposition="outside",
                cliponaxis=False, showlegend=False,
                hovertemplate="%{y}: p = %{x:.4f}<extra></extra>",
            ),
            row=row, col=1,
        )
        fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=labels, row=row, col=1)  # best on top
        fig.update_xaxes(range=[0, 1.15], tickformat=".0%", row=row, col=1,
                         title_text="probability" if row == len(shown) else None)
    fig.update_layout(
        height=height,
        margin=dict(t=60, b=40, l=10, r=30),
        title=(f"Top-{predictions.k} guesses at each selected position (green: the true token)" if truth else
               f"Top-{predictions.k} guesses at each blank you typed (there is no true token to compare with)"),
    )
    if len(predictions.positions) > len(shown):
        fig.add_annotation(text=f"first {len(shown)} of {len(predictions.positions)} positions",
                           showarrow=False, xref="paper", yref="paper", x=1, y=1.0, yanchor="bottom",
                           xanchor="right", yshift=30)
    return fig


def decision_comparison_figure(predictions: Predictions, *, height: int = 380) -> go.Figure:
    """p(true token) at each selected position, grouped by what masking did to it.

    At [MASK] positions the model must guess from context; at unchanged ones it can copy what it
    sees; at random ones it must notice that what it sees is wrong.
    """
    fig = go.Figure()
    for name in SELECTED_DECISIONS:
        label = DECISION_WORDS[name]
        items = [p for p in predictions.positions if p.decision is not None and p.decision.name == name]
        if not items:
            continue
        mean = sum(p.true_prob for p in items) / len(items)
        fig.add_trace(go.Box(
            y=[p.true_prob for p in items],
            name=f"{label}<br>n = {len(items)}, mean {mean:.2f}",
            boxpoints="all", jitter=0.4, pointpos=0, marker=dict(color=COLORS[name], size=7),
            line=dict(color=COLORS[name]), fillcolor="rgba(0,0,0,0)",
            text=[f"saw {_e(p.seen_token)} → {_e(p.true_token)}" for p in items],
            hovertemplate="%{text}<br>p(true) = %{y:.3f}<extra></extra>",
            boxmean=True,
        ))
    fig.update_layout(
        title="How sure is the model of the true token? By what masking did to it",
        yaxis=dict(title="p(true token)", range=[-0.02, 1.02], tickformat=".0%"),
        showlegend=False, height=height, margin=dict(t=60, b=40),
    )
    if not fig.data:
        fig.add_annotation(text="No decisions to compare.", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def loss_per_position_figure(predictions: Predictions, *, height: int = 320) -> go.Figure:
    """-log p(true) at each selected position, and their mean: the sentence's MLM loss."""
    items = predictions.positions
    labels = [f"{p.position}: {_e(p.true_token)}" for p in items]
    names = [p.decision.name if p.decision is not None else None for p in items]
    colors = [COLORS[name] if name in SELECTED_DECISIONS else OTHER_COLOR for name in names]
    fig = go.Figure(go.Bar(
        x=labels, y=[p.loss for p in items], marker_color=colors,
        text=[f"{p.loss:.2f}" for p in items], textposition="outside", cliponaxis=False,
        hovertemplate="%{x}<br>-log p(true) = %{y:.3f}<extra></extra>",
    ))
    if items:
        uniform = uniform_guess(predictions.vocab_size)
        # Each label sits on the side of its line away from the other line, so neither is struck through
        # when the mean loss comes close to log V (an untrained or badly wrong guess).
        mean_below = predictions.mean_loss <= uniform
        fig.add_hline(y=predictions.mean_loss, line=dict(dash="dash", color="#495057"),
                      annotation_text=f"MLM loss (mean) = {predictions.mean_loss:.2f}",
                      annotation_position="bottom left" if mean_below else "top left")
        fig.add_hline(y=uniform, line=dict(dash="dot", color="#adb5bd"),
                      annotation_text=uniform_guess_label(predictions.vocab_size),
                      annotation_position="top right" if mean_below else "bottom right")
    fig.update_layout(
        title="Per-token loss −log p(true token); the MLM loss is their mean",
        yaxis=dict(title="−log p(true)", rangemode="tozero"), xaxis=dict(title="position: true token"),
        height=height, margin=dict(t=60, b=40), showlegend=False, bargap=0.7 if len(items) < 4 else 0.3,
    )
    return fig


def fill_comparison_figure(results, tokens: list[str], *, height: int = 360, label_px: int | None = None) -> go.Figure:
    """p(chosen token) at each filled position, one group of bars per filling mode; labels show the token.

    ``results``: FillResults of the same positions (independent, easy-first, Mask-Predict).
    ``label_px``: bar labels of that size, for a room (presenter view): the bars then lie across, one
    row each, so a label never has to fit a narrow bar (plotly shrinks an outside label to the bar's
    width, and side by side they overlapped).
    """
    fig = go.Figure()
    across = label_px is not None
    positions = 0
    for result in results:
        steps = sorted(result.steps, key=lambda s: s.position)
        positions = max(positions, len(steps))
        order = {position: i + 1 for i, position in enumerate(result.order)}
        text = [f"{_e(s.token)}" + (f" (#{order[s.position]})" if result.mode == "easy_first" else "") for s in steps]
        where = [f"{s.position}: {_e(tokens[s.position]) if s.position < len(tokens) else ''}" for s in steps]
        probs = [s.prob for s in steps]
        fig.add_trace(go.Bar(
            name=FILL_LABELS.get(result.mode, result.mode),
            x=probs if across else where, y=where if across else probs, orientation="h" if across else "v",
            text=text, textposition="outside", cliponaxis=False,
            textfont=dict(size=label_px) if across else None,
            marker_color=MODE_COLORS.get(result.mode, OTHER_COLOR),
            hovertemplate=("%{y}<br>chose %{text}, p = %{x:.3f}" if across else
                           "%{x}<br>chose %{text}, p = %{y:.3f}") + "<extra></extra>",
        ))
    title = "Filling several masks: the chosen token and its probability (#n = easy-first fill order)"
    if across:
        bars = max(1, positions) * max(1, len(results))
        fig.update_layout(
            barmode="group", title=title, bargap=0.25, bargroupgap=0.05,
            xaxis=dict(title="p(chosen token)", range=[0, 1.35], tickformat=".0%",  # room for labels right of 100%
                       tickvals=[0, 0.25, 0.5, 0.75, 1.0]),
            yaxis=dict(title="position: original token", autorange="reversed"),
            legend=dict(orientation="h", y=-0.2), height=max(height, 160 + bars * int(label_px * 1.9)),
            margin=dict(t=60, b=40),
        )
        return fig
    fig.update_layout(
        barmode="group",
        title=title,
        yaxis=dict(title="p(chosen token)", range=[0, 1.1], tickformat=".0%"),
        xaxis=dict(title="position: original token"),
        legend=dict(orientation="h", y=-0.3), height=height, margin=dict(t=60, b=40),
    )
    return fig
