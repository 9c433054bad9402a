"""Figures of the Masking lesson."""

from __future__ import annotations

import plotly.graph_objects as go

from mlm_core.masking import MaskingConfig

COLORS = {"MASK": "#e03131", "RANDOM": "#f08c00", "UNCHANGED": "#2f9e44", "NOT_SELECTED": "#adb5bd"}


def convergence_figure(rows: list[dict], config: MaskingConfig, height: int = 420) -> go.Figure:
    """Empirical selection rate and 80/10/10 shares against the number of tokens masked (log x)."""
    x = [r["eligible_tokens"] for r in rows]
    fig = go.Figure()
    series = [
        ("selection_rate", "selected / eligible", config.mlm_probability, "#1c7ed6"),
        ("mask_share", "[MASK] / selected", config.mask_replace_prob, COLORS["MASK"]),
        ("random_share", "random / selected", config.random_replace_prob, COLORS["RANDOM"]),
        ("unchanged_share", "unchanged / selected", config.unchanged_prob, COLORS["UNCHANGED"]),
    ]
    for key, name, target, color in series:
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="lines", name=name, line=dict(color=color)))
        fig.add_hline(y=target, line=dict(color=color, dash="dot", width=1))
    fig.update_layout(
        title="Empirical rates converge to the configured ones (dotted) as more tokens are masked",
        xaxis=dict(title="eligible tokens masked so far", type="log"),
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
        title=f"Selected tokens per sentence — {zero_share:.1%} of sentences got none (red)",
        xaxis=dict(title="selected tokens in the sentence", dtick=1 if top <= 20 else None),
        yaxis=dict(title="sentences"),
        height=height,
        margin=dict(t=60, b=40),
    )
    return fig


def decision_counts_figure(counts: dict[str, int], height: int = 300) -> go.Figure:
    """Bar chart of how many tokens got each decision in one sentence."""
    names = ["MASK", "RANDOM", "UNCHANGED", "NOT_SELECTED"]
    fig = go.Figure(go.Bar(x=[counts.get(n, 0) for n in names], y=names, orientation="h",
                           marker_color=[COLORS[n] for n in names]))
    fig.update_layout(title="Decisions in this sentence", height=height, xaxis=dict(title="tokens"),
                      margin=dict(t=50, b=30))
    return fig
