"""Figures of the Tokenizer lesson: what the vocabulary size changes.

Data in (rows of ``mlm_core.vocab``, ``mlm_core.lessons.vocab`` and ``mlm_core.costs`` results), plotly figure out.
"""

from __future__ import annotations

import math
from typing import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.costs import HeadCost
from mlm_core.lessons.vocab import FrequencyProfile

# One colour per family of vocabularies, used on every chart of the page.
FAMILY_COLORS = {"WordPiece": "#1c7ed6", "BPE": "#e8590c", "bert-base-uncased": "#2f9e44"}
_FALLBACK_COLORS = ["#7048e8", "#c2255c", "#0c8599", "#5c940d"]


def _color(family: str, index: int = 0) -> str:
    return FAMILY_COLORS.get(family, _FALLBACK_COLORS[index % len(_FALLBACK_COLORS)])


def _families(rows: Sequence[dict]) -> list[str]:
    seen: list[str] = []
    for row in rows:
        if row["family"] not in seen:
            seen.append(row["family"])
    return seen


_NICE_SIZES = (100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 50_000, 100_000)


def _size_text(v: int) -> str:
    return f"{v // 1000}k" if v >= 1000 and v % 1000 == 0 else str(v)


def split_metrics_figure(rows: Sequence[dict], height: int = 380) -> go.Figure:
    """Tokens per word, split-word share and [UNK] rate against vocabulary size (log x).

    ``rows``: dicts with ``family`` (e.g. "WordPiece"), ``label``, ``vocab_size``,
    ``tokens_per_word``, ``split_share`` and ``unk_rate``; one line per family.
    """
    panels = [
        ("tokens_per_word", "tokens per word", None),
        ("split_share", "words cut into pieces", ".0%"),
        ("unk_rate", "[UNK] tokens", ".1%"),
    ]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title, _ in panels], horizontal_spacing=0.08)
    for index, family in enumerate(_families(rows)):
        points = sorted((r for r in rows if r["family"] == family), key=lambda r: r["vocab_size"])
        for col, (key, title, fmt) in enumerate(panels, start=1):
            fig.add_trace(
                go.Scatter(
                    x=[r["vocab_size"] for r in points],
                    y=[r[key] for r in points],
                    mode="lines+markers",
                    name=family,
                    legendgroup=family,
                    showlegend=col == 1,
                    marker=dict(size=10, color=_color(family, index)),
                    line=dict(color=_color(family, index)),
                    text=[r["label"] for r in points],
                    hovertemplate="%{text}<br>" + title + ": %{y" + (":" + fmt if fmt else ":.3f") + "}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    sizes = [r["vocab_size"] for r in rows] or [1]
    low, high = min(sizes), max(sizes)
    for col, (key, _, fmt) in enumerate(panels, start=1):
        top = max((r[key] for r in rows), default=0.0)
        # Plain ticks (250, 1k, 30k): plotly's default log ticks read "2 5 1000 2 5".
        ticks = [v for v in _NICE_SIZES if low / 2 <= v <= high * 2] or [low, high]
        fig.update_xaxes(type="log", title_text="vocabulary size V", tickvals=ticks,
                         ticktext=[_size_text(v) for v in ticks], row=1, col=col)
        # A share that is 0 everywhere ([UNK] on English text) still gets a readable small axis.
        fig.update_yaxes(tickformat=fmt or "", range=[0, max(top * 1.15, 0.01 if fmt else 1.0)], row=1, col=col)
    fig.update_layout(
        title="A bigger vocabulary cuts fewer words into pieces",
        height=height,
        legend=dict(orientation="h", y=-0.3),
        margin=dict(t=80, b=40),
    )
    return fig


def _linear_range(high: int, n: int = 60) -> list[int]:
    return sorted({max(1, round(high * i / (n - 1))) for i in range(n)})


def head_cost_figure(points: Sequence[tuple[str, str, HeadCost]], height: int = 400) -> go.Figure:
    """The MLM head's forward FLOPs and logits memory per batch, and ln V, against V (linear axes).

    The costs are linear in V, so linear axes show them as the straight lines they are (a log x
    axis would bend them into curves that look exponential).

    ``points``: (family, label, HeadCost) for the vocabularies on the page, all with the same
    H, B, T and M; the lines are the same formulas over a range of V.
    """
    if not points:
        raise ValueError("head_cost_figure needs at least one vocabulary.")
    ref = points[0][2]
    sizes = [c.vocab_size for _, _, c in points]
    curve = [ref.with_vocab(v) for v in _linear_range(int(max(sizes) * 1.1))]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=[
            "head forward GFLOPs per batch",
            "logits memory per batch (MiB)",
            "starting loss ln V (nats)",
        ],
        horizontal_spacing=0.08,
    )
    _head_cost_lines(fig, ref, curve)
    _vocabulary_markers(fig, points)
    for col in (1, 2, 3):
        fig.update_xaxes(type="linear", rangemode="tozero", title_text="vocabulary size V", row=1, col=col)
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
    fig.update_layout(
        title=(
            f"The head costs 2·H·V FLOPs per predicted position (H = {ref.hidden_size}, "
            f"B = {ref.batch_size}, T = {ref.seq_len}, {ref.bytes_per_value}-byte values)"
        ),
        height=height,
        legend=dict(orientation="h", y=-0.3),
        margin=dict(t=80, b=40),
    )
    return fig


_MIB = 2**20


def _head_cost_lines(fig: go.Figure, ref: HeadCost, curve: Sequence[HeadCost]) -> None:
    """The formulas over a range of V, one line per quantity: FLOPs and logits memory at every position (dashed)
    and at the masked ones only, and ln V."""
    lines = [
        (1, lambda c: c.flops_full / 1e9, f"every position (B·T = {ref.batch_size * ref.seq_len:,})", "#868e96", "dash"),
        (1, lambda c: c.flops_gathered / 1e9, f"masked positions only (M = {ref.masked_positions:,})", "#1c7ed6", "solid"),
        (2, lambda c: c.logits_bytes_full / _MIB, "(B, T, V) logits", "#868e96", "dash"),
        (2, lambda c: c.logits_bytes_gathered / _MIB, "(M, V) logits", "#1c7ed6", "solid"),
        (3, lambda c: c.start_loss, "ln V", "#2b8a3e", "solid"),
    ]
    shown = set()
    for col, value, name, color, dash in lines:
        fig.add_trace(
            go.Scatter(
                x=[c.vocab_size for c in curve],
                y=[value(c) for c in curve],
                mode="lines",
                name=name,
                line=dict(color=color, dash=dash),
                showlegend=name not in shown,
                hovertemplate="V=%{x:,}<br>%{y:.3g}<extra>" + name + "</extra>",
            ),
            row=1,
            col=col,
        )
        shown.add(name)


def _vocabulary_markers(fig: go.Figure, points: Sequence[tuple[str, str, HeadCost]]) -> None:
    """The page's vocabularies on the lines: one marker per vocabulary, one colour and legend entry per family."""
    families = list(dict.fromkeys(family for family, _, _ in points))
    for index, family in enumerate(families):
        mine = [(label, c) for f, label, c in points if f == family]
        for col, value in ((1, lambda c: c.flops_gathered / 1e9), (2, lambda c: c.logits_bytes_gathered / _MIB),
                           (3, lambda c: c.start_loss)):
            fig.add_trace(
                go.Scatter(
                    x=[c.vocab_size for _, c in mine],
                    y=[value(c) for _, c in mine],
                    mode="markers",
                    name=family,
                    legendgroup=family,
                    showlegend=col == 1,
                    marker=dict(size=11, color=_color(family, index), line=dict(color="white", width=1)),
                    text=[label for label, _ in mine],
                    hovertemplate="%{text}<br>%{y:.3g}<extra></extra>",
                ),
                row=1,
                col=col,
            )


_DASHES = ("solid", "dot", "dash", "dashdot", "longdash", "longdashdot")  # one per size of a family (at most 6 picked)


def _log_spaced_ranks(n: int, points: int = 300) -> list[int]:
    if n <= points:
        return list(range(n))
    return sorted({min(n - 1, round(math.exp(i * math.log(n) / (points - 1))) - 1) for i in range(points)})


def frequency_profile_figure(profiles: Sequence[tuple[str, str, FrequencyProfile]], height: int = 420) -> go.Figure:
    """Rank against count of every vocabulary entry on the text (log-log, Zipf's plot).

    ``profiles``: (family, label, FrequencyProfile). Entries never seen cannot sit on a log axis;
    the legend says how many there are among the non-special entries (the profile leaves special tokens out).
    """
    fig = go.Figure()
    seen: dict[str, int] = {}
    for index, (family, label, profile) in enumerate(profiles):
        nth = seen[family] = seen.get(family, -1) + 1  # the colour says the family, the dash which size in it
        used = [c for c in profile.counts if c > 0]
        ranks = _log_spaced_ranks(len(used))
        # frequency_profile leaves the special tokens out ([PAD], [UNK], [CLS], [SEP], [MASK]): say so, or a
        # "WordPiece 500" with "of 495 entries" looks five entries short
        name = f"{label} ({profile.n_unused:,} of {len(profile.counts):,} non-special entries unused)"
        fig.add_trace(
            go.Scatter(
                x=[r + 1 for r in ranks],
                y=[used[r] for r in ranks],
                mode="lines",
                name=name,
                line=dict(color=_color(family, index), width=2, dash=_DASHES[nth % len(_DASHES)]),
                text=[profile.tokens[r] for r in ranks],
                hovertemplate="rank %{x:,}: %{text}<br>%{y:,} times<extra>" + label + "</extra>",
            )
        )
    fig.update_layout(
        title="Few tokens are frequent, most are rare: the softmax pays for every one of them",
        xaxis=dict(title="rank of the vocabulary entry (most frequent = 1)", type="log"),
        yaxis=dict(title="occurrences in the text", type="log"),
        height=height,
        legend=dict(orientation="h", y=-0.25),
        margin=dict(t=60, b=40),
    )
    return fig
