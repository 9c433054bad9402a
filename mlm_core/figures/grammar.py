"""Figures of the Grammar lesson: a minimal pair token by token, and accuracy per phenomenon beside the published models.

Pure functions, data in, plotly figure out. Token text goes through ``html.escape`` (plotly renders HTML in labels).
"""

from __future__ import annotations

import html
import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.figures import label_row_px
from mlm_core.grammar import PairScore
from mlm_core.lessons.grammar import ANCHORS, OVERALL, PLL_ANCHORS

GOOD_COLOR = "#2f9e44"
BAD_COLOR = "#e03131"
MODEL_COLORS = ("#1c7ed6", "#74c0fc")  # the measurements: on BLiMP, then on MLM Lab's pairs
SCREEN_TEXT_PX = 12  # the chart's text outside presenter view (measured in the browser: Streamlit's plotly theme)
ANCHOR_STYLE = {"5-gram": ("#adb5bd", "circle"), "LSTM": ("#868e96", "square"), "GPT-2": ("#7048e8", "diamond"),
                "human": ("#212529", "star"), "DistilBERT-base (PLL)": ("#f08c00", "triangle-down-open"),
                "BERT (PLL)": ("#e8590c", "x-thin-open"), "RoBERTa-large (PLL)": ("#c2255c", "triangle-up-open")}


def _e(text: str) -> str:
    return html.escape(str(text), quote=False)


def pair_figure(score: PairScore, height: int = 420, font_px: int = SCREEN_TEXT_PX) -> go.Figure:
    """Each token's surprisal -log P(token | the rest) for both sentences: the PLL is minus the bars' sum.

    ``font_px``: the size the chart's text will be drawn at (presenter view: ``ui.PRESENTER_CHART_FONT_PX``), which
    a long pair's layout is measured in.
    """
    # A long sentence's labels stand on their side, every one of them (plotly hides every other one when they
    # crowd: at presenter size that hid the changed word). Its bars' values stand on their side too, above the
    # bars (1.5 x the tallest bar leaves them the room): plotly shrinks an outside label to its bar's width unless
    # told not to, and on a 28-token pair in presenter view the values came out at 16 px beside 20-px ticks. The gap
    # between the rows is measured in pixels from the longest label at ``font_px``: a fraction of the height let a
    # 28-token pair's labels run into the second row's title at presenter size (both found on 2026-12-04/06 walks).
    longest = max(len(score.good.tokens), len(score.bad.tokens))
    turned = longest > 20
    labels = [[f"{i + 1}. {_e(t)}" for i, t in enumerate(pll.tokens)] for pll in (score.good, score.bad)]
    # a turned value needs a line (1.2 x the font) of its bar's slot: the plot is about 740 px wide in presenter view
    # at 1280x720 (a 38-token pair's values overlapped), so 28 tokens at the room's 20 px, 46 at the screen's 12;
    # past that the hover and the table give them
    values = longest * 1.25 * font_px <= 700
    spacing, margin_b = 0.22, 20
    if turned:
        chars = max(len(html.unescape(label)) for row in labels for label in row)
        tick_px = math.ceil(0.62 * font_px * chars) + 10  # a turned label's length, with the tick's gap
        gap_px = tick_px + 2 * font_px + 20  # the first row's labels, then the second row's title
        row_px = max(220, 12 * font_px)  # a row's bars with their turned values above them
        margin_b = tick_px + 10
        height = max(height, 50 + 2 * row_px + gap_px + margin_b)
        spacing = gap_px / (height - 50 - margin_b)
    fig = make_subplots(rows=2, cols=1, vertical_spacing=spacing, subplot_titles=(
        f"grammatical: PLL {score.good.total:.2f} nats", f"ungrammatical: PLL {score.bad.total:.2f} nats"))
    for row, (pll, color, names) in enumerate(zip((score.good, score.bad), (GOOD_COLOR, BAD_COLOR), labels), 1):
        fig.add_trace(go.Bar(x=names, y=[-lp for lp in pll.log_probs], marker_color=color, showlegend=False,
                             text=[f"{-lp:.1f}" for lp in pll.log_probs] if values else None,
                             textposition="outside", cliponaxis=False,
                             constraintext="none", textangle=-90 if turned else 0,
                             hovertemplate="%{x}: −log P = %{y:.2f} nats<extra></extra>"), row=row, col=1)
    # one scale for both sentences: the class compares bars across the two rows
    top = max([-lp for pll in (score.good, score.bad) for lp in pll.log_probs] + [1.0])
    for row in (1, 2):
        fig.update_yaxes(title_text="−log P (nats)", row=row, col=1, range=[0, (1.5 if turned else 1.2) * top])
    fig.update_xaxes(automargin=True)  # the bottom row's turned labels get the room they need below the chart
    if turned:
        fig.update_xaxes(tickangle=-90, dtick=1)
    fig.update_layout(height=height, margin=dict(t=50, b=margin_b, l=60, r=20),
                      title_text="Which tokens the model finds surprising (taller = less likely)")
    return fig


def phenomena_figure(rows: Sequence[dict], labels: Sequence[str], height: int = 580,
                     label_px: int | None = None) -> go.Figure:
    """Accuracy (%) per phenomenon: each measurement in ``labels`` as bars with ±1 SE (the default model on BLiMP,
    and on MLM Lab's pairs once measured), the published models as markers.

    The markers stand on the first measurement's band (they are BLiMP figures); the PLL models' are open symbols, so
    two close figures (GPT-2's 83.0 and BERT's about 84 in the overall row) both show. ``label_px`` (presenter view:
    ``ui.PRESENTER_CHART_FONT_PX``): the bars' accuracy labels at that size, each row tall enough to hold one label
    a bar. Plotly shrinks a label to fit inside its bar, so at 580 px the 13 rows' labels came out at about 8 px in
    presenter view, where the ticks beside them were 20.
    """
    names = [f"<b>{r['phenomenon']}</b>" if r.get("key") == OVERALL else r["phenomenon"] for r in rows]
    measured = [label for label in labels if any(label in r for r in rows)]
    fig = go.Figure()
    for label, color in zip(measured, MODEL_COLORS):
        fig.add_trace(go.Bar(
            y=names, x=[r.get(label) for r in rows], orientation="h", name=label, marker_color=color,
            alignmentgroup="measured", offsetgroup=label,
            error_x=dict(type="data", array=[r.get(f"{label} ± SE", 0) for r in rows], visible=True),
            text=[f"{r[label]:.0f}" if r.get(label) is not None else "" for r in rows], textposition="inside",
            insidetextanchor="start", textangle=0, textfont=dict(size=label_px) if label_px else None,
            hovertemplate="%{y}: %{x:.1f}%<extra>" + _e(label) + "</extra>"))
    # every marker is a BLiMP figure: they stand on the first measurement's band (BLiMP's, for the default model),
    # not between it and the MLM Lab pairs' bar, and the PLL models' markers are open, so GPT-2's 83.0 shows
    # through BERT's about 84 in the overall row
    band = measured[0] if measured else None
    marker_px = 11 if label_px is None else round(0.75 * label_px)
    for anchor in ANCHORS + PLL_ANCHORS:
        color, symbol = ANCHOR_STYLE[anchor]
        where = "BLiMP's results" if anchor in ANCHORS else "overall only"
        fig.add_trace(go.Scatter(y=names, x=[r.get(anchor) for r in rows], mode="markers", name=anchor,
                                 orientation="h", alignmentgroup="measured", offsetgroup=band,
                                 marker=dict(color=color, symbol=symbol, size=marker_px,
                                             line=dict(width=2 if symbol.endswith("-open") else 1,
                                                       color=color if symbol.endswith("-open") else "white")),
                                 hovertemplate="%{y}: %{x:.1f}%<extra>" + anchor + f" ({where})</extra>"))
    fig.add_vline(x=50, line_dash="dot", line_color="#868e96", annotation_text="chance", annotation_position="top")
    fig.update_layout(height=height, barmode="group", scattermode="group",
                      xaxis=dict(title="accuracy (%)", range=[0, 100]),
                      yaxis=dict(autorange="reversed"), legend=dict(orientation="h", y=-0.15),
                      margin=dict(t=40, b=60, l=10, r=20), title_text="Accuracy per phenomenon")
    text_px = label_px or SCREEN_TEXT_PX
    row_px = 2 * max(len(measured), 1) * label_row_px(text_px)  # each bar's label line, and the gap around them
    legend_px = 4 * round(1.4 * text_px)  # the legend's entries wrap into about 4 lines
    fig.update_layout(height=max(height, 60 + len(rows) * row_px + 3 * text_px + legend_px))
    if label_px is not None:
        fig.update_layout(uniformtext=dict(minsize=label_px, mode="show"))
    return fig
