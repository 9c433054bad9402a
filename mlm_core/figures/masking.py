"""Figures of the Masking lesson."""

from __future__ import annotations

import math
from typing import NamedTuple

import plotly.graph_objects as go

from mlm_core.masking import DECISION_WORDS, MaskingConfig


class DecisionStyle(NamedTuple):
    """How one decision looks on every page."""

    background: str  # the token chip's background
    color: str  # the chip's border, and every chart mark of this decision
    label: str  # the word learners read: mlm_core.masking.DECISION_WORDS, never the enum name


# The one style of each decision, in the legend's order: the token chips (ui.chips), their legend, the Masking and
# Predictions figures all read it; the words come from mlm_core.masking.DECISION_WORDS.
DECISION_STYLE = {
    name: DecisionStyle(background, color, DECISION_WORDS[name])
    for name, (background, color) in {
        "NOT_SELECTED": ("#f1f3f5", "#adb5bd"),
        "MASK": ("#ffe3e3", "#e03131"),
        "RANDOM": ("#fff3bf", "#f08c00"),
        "UNCHANGED": ("#d3f9d8", "#2f9e44"),
        "SPECIAL": ("#e7f5ff", "#74c0fc"),
    }.items()
}
COLORS = {name: style.color for name, style in DECISION_STYLE.items()}


def log_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick positions 1, 2, 5 × 10^k between ``low`` and ``high``, labelled in full ("1,000", "2,000").

    Plotly's own log ticks label the minor ones with a bare digit ("… 1000 2 3"); these never do.

    >>> log_ticks(90, 1200)
    ([100, 200, 500, 1000], ['100', '200', '500', '1,000'])
    """
    low, high = max(float(low), 1.0), max(float(high), 1.0)
    values = []
    for k in range(int(math.floor(math.log10(low))), int(math.ceil(math.log10(high))) + 1):
        for m in (1, 2, 5):
            v = m * 10**k
            if low <= v <= high:
                values.append(v)
    if not values:  # a range inside one 1-2-5 step: label its ends
        values = sorted({round(low), round(high)})
    return values, [f"{v:,}" for v in values]


def convergence_figure(rows: list[dict], config: MaskingConfig, *, split_unit: str = "token",
                       height: int = 420) -> go.Figure:
    """Measured selection rate and 80/10/10 shares against the number of tokens masked (log x).

    The dotted lines are what the rule predicts: p for token and whole-word masking; the rule's own
    count (exact count, span budget) over the eligible tokens for the others, which is not p on
    short sentences.
    """
    x = [r["eligible_tokens"] for r in rows]
    fixed = config.strategy in ("exact_count", "span")
    expected_rate = rows[-1]["expected_rate"] if rows and "expected_rate" in rows[-1] else config.mlm_probability
    per = "span" if split_unit == "span" else "selected token"
    series = [
        ("selection_rate", "selected / eligible tokens", expected_rate, "#1c7ed6"),
        ("mask_share", f"[MASK] share (per {per})", config.mask_replace_prob, COLORS["MASK"]),
        ("random_share", f"random share (per {per})", config.random_replace_prob, COLORS["RANDOM"]),
        ("unchanged_share", f"unchanged share (per {per})", config.unchanged_prob, COLORS["UNCHANGED"]),
    ]
    fig = go.Figure()
    for key, name, target, color in series:
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="lines", name=name, line=dict(color=color)))
        fig.add_hline(y=target, line=dict(color=color, dash="dot", width=1))
    tickvals, ticktext = log_ticks(min(x), max(x)) if x else ([], [])
    # Short titles: in presenter view (26 px) a plotly title does not wrap and would be cut.
    title = "Measured rates (lines) and the rule's own (dotted)" if fixed else "Rates settle on the configured ones (dotted)"
    fig.update_layout(
        title=title,
        xaxis=dict(title="eligible tokens masked so far", type="log", tickvals=tickvals, ticktext=ticktext,
                   range=[math.log10(max(min(x), 1)), math.log10(max(max(x), 1) * 1.05)] if x else None),
        yaxis=dict(title="rate", range=[0, 1]),
        height=height,
        legend=dict(orientation="h", y=-0.25),
        margin=dict(t=60, b=40),
    )
    return fig


def per_sentence_histogram(counts: list[int], height: int = 360) -> go.Figure:
    """How many tokens each sentence had selected, zero included."""
    top = max(counts) if counts else 0
    bins = list(range(top + 1))
    freq = [0] * (top + 1)
    for c in counts:
        freq[c] += 1
    zero_share = freq[0] / len(counts) if counts else 0.0
    fig = go.Figure(go.Bar(x=bins, y=freq, marker_color=["#e03131" if b == 0 else "#1c7ed6" for b in bins]))
    fig.update_layout(
        title=f"Selected tokens per sentence: {zero_share:.1%} got none (red)",
        xaxis=dict(title="selected tokens in the sentence", dtick=1 if top <= 20 else None),
        yaxis=dict(title="sentences"),
        height=height,
        margin=dict(t=60, b=40),
    )
    return fig


def decision_counts_figure(counts: dict[str, int], *, revealed: int | None = None, total: int | None = None,
                           height: int = 300) -> go.Figure:
    """How many tokens got each decision, in the legend's words, special tokens apart.

    ``revealed`` of ``total`` tokens: while stepping, only the decisions revealed so far are counted,
    and the title says so; the sentence's totals show once every token is revealed.
    """
    names = ["MASK", "RANDOM", "UNCHANGED", "NOT_SELECTED", "SPECIAL"]
    words = [DECISION_WORDS[n] for n in names]
    fig = go.Figure(go.Bar(x=[counts.get(n, 0) for n in names], y=words, orientation="h",
                           marker_color=[COLORS[n] for n in names], text=[counts.get(n, 0) for n in names],
                           textposition="auto"))
    if revealed is None or total is None or revealed >= total:
        title = "Decisions in this sentence"
    else:
        title = f"Decisions revealed so far: {revealed} of {total} tokens"
    # Counts are whole tokens: ticks 0, 1, 2, … while they are few (Plotly would label 0.2, 0.4, … tokens),
    # and the axis reaches at least 1 so that a chart with nothing revealed yet is not a fraction of a token wide.
    top = max([counts.get(n, 0) for n in names] + [1])
    xaxis = dict(title="tokens", rangemode="tozero", tickformat="d", range=[0, top * 1.05])
    if top <= 10:
        xaxis.update(tick0=0, dtick=1)
    fig.update_layout(title=title, height=height, xaxis=xaxis, yaxis=dict(autorange="reversed"),
                      margin=dict(t=50, b=30))
    return fig


def span_length_figure(drawn: dict[int, int], config: MaskingConfig, height: int = 340) -> go.Figure:
    """Drawn span lengths (bars) against SpanBERT's renormalised Geometric(p) over 1..span_max (dots)."""
    lengths = list(range(1, int(config.span_max) + 1))
    total = max(sum(drawn.values()), 1)
    law = config.span_length_probs()
    fig = go.Figure()
    fig.add_trace(go.Bar(x=lengths, y=[drawn.get(k, 0) / total for k in lengths], name="drawn", marker_color="#1c7ed6"))
    fig.add_trace(go.Scatter(x=lengths, y=law, mode="markers+lines", name=f"Geometric({config.span_p:g}) renormalised",
                             line=dict(color="#212529", dash="dot")))
    fig.update_layout(title=f"Drawn span lengths (law: mean {config.mean_span_length():.2f} words)",
                      xaxis=dict(title="span length (words)", dtick=1), yaxis=dict(title="share of spans"),
                      height=height, legend=dict(orientation="h", y=-0.3), margin=dict(t=60, b=40))
    return fig


def corruption_prediction_figure(rows, *, height: int = 340) -> go.Figure:
    """Per 100 tokens, for each rule (``masking_view.rate_rows``): the tokens the model must predict, split into
    [MASK], random and unchanged, beside the tokens whose input is corrupted ([MASK] + random). The two rates
    a higher masking rate raises together, which Wettig et al. (2023) separate."""
    labels = [label for label, _ in rows][::-1]
    shares = [s for _, s in rows][::-1]
    fig = go.Figure()
    for name, key, color in (("[MASK]", "masked", "#e8590c"), ("random", "random", "#ae3ec9"),
                             ("unchanged", "unchanged", "#2f9e44")):
        fig.add_trace(go.Bar(y=labels, x=[getattr(s, key) for s in shares], name=name, orientation="h",
                             marker_color=color, legendgroup="predicted"))
    # the tick's number goes beside the bar's (under the tick it ran into the next row's bar)
    fig.add_trace(go.Scatter(y=labels, x=[s.corrupted for s in shares], mode="markers", name="corrupted",
                             marker=dict(symbol="line-ns-open", size=26, line=dict(width=3, color="#212529")),
                             hovertemplate="corrupted %{x:.1f} per 100<extra></extra>"))
    fig.add_trace(go.Scatter(y=labels, x=[s.predicted for s in shares], mode="text", showlegend=False,
                             text=[f"  predicted {s.predicted:.1f}, corrupted {s.corrupted:.1f}" for s in shares],
                             textposition="middle right", cliponaxis=False, hoverinfo="skip"))
    top = max((s.predicted for s in shares), default=15.0)
    fig.update_layout(barmode="stack", height=height, title="Per 100 tokens: predicted (bars) and corrupted (the tick)",
                      xaxis=dict(title="tokens per 100", range=[0, top * 2.0]),  # room for the label at room size
                      legend=dict(orientation="h", y=-0.25), margin=dict(t=50, b=40, l=210))
    return fig
