"""Figures of the Loss and Bug museum lessons. Pure functions: rows (dicts) in, plotly figure out.

Token text goes through ``html.escape``: plotly renders HTML in labels.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

from mlm_core.formatting import row_decimals
from mlm_core.lessons.loss_lab import uniform_guess, uniform_guess_label
from mlm_core.loss_registry import FULL, find

import plotly.graph_objects as go
from plotly.subplots import make_subplots

SCHEME_COLORS = {"inverse": "#e03131", "inverse_sqrt": "#f08c00", "log": "#1c7ed6", "none": "#868e96"}
CORRECTION_STYLES = {  # sampled_softmax.CORRECTIONS → (colour, dash)
    "importance": ("#2f9e44", "solid"),
    "tensorflow": ("#1c7ed6", "solid"),
    "none": ("#e03131", "dot"),
}
OTHER_COLORS = {"loop": "#868e96"}  # bars that are not a loss variant: the per-position loop


def variant_color(name: str, default: str | None = None) -> str | None:
    """A loss variant's colour, from its record (``loss_registry``): the same in every figure."""
    variant = find(name)
    return variant.color if variant is not None else OTHER_COLORS.get(name, default)


WRONG_COLOR, RIGHT_COLOR, FULL_COLOR = "#e03131", "#2f9e44", variant_color(FULL)


def _e(text) -> str:
    return html.escape(str(text), quote=False)


def _empty(message: str, height: int = 220) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(height=height, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return fig


def loss_bars(losses: dict[str, float], *, notes: dict[str, str] | None = None,
              vocab_size: int | None = None) -> go.Figure:
    """One bar per loss variant, its value written on it; with ``vocab_size``, the uniform guess ln V drawn for scale."""
    if not losses:
        return _empty("No losses to show.")
    names = list(losses)
    decimals = row_decimals(losses.values())  # the bars read like the Loss page's row of numbers under them
    fig = go.Figure(go.Bar(
        x=[_e(n) for n in names], y=[losses[n] for n in names],
        marker_color=[variant_color(n, "#495057") for n in names],
        text=[f"{losses[n]:.{decimals}f}" for n in names], textposition="outside",
        hovertext=[_e((notes or {}).get(n, "")) for n in names],
    ))
    fig.update_layout(yaxis_title="loss (nats)", height=320, margin=dict(t=30, b=40), showlegend=False)
    if vocab_size:
        fig.add_hline(y=uniform_guess(vocab_size), line=dict(dash="dot", color="#868e96"),
                      annotation_text=_e(uniform_guess_label(vocab_size)), annotation_position="bottom right")
        fig.update_yaxes(range=[0, 1.15 * max(uniform_guess(vocab_size), *[v for v in losses.values() if math.isfinite(v)])])
    return fig


def per_token_figure(rows: Sequence[dict]) -> go.Figure:
    """Per-token loss for each variant: grouped bars, one group per selected position.

    ``rows``: dicts with ``token``, ``variant`` and ``loss`` (``loss_lab.per_token_rows``).
    """
    if not rows:
        return _empty("Nothing was selected in this batch, so there are no per-token losses.")
    fig = go.Figure()
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        fig.add_trace(go.Bar(name=_e(variant), x=[_e(r["token"]) for r in mine], y=[r["loss"] for r in mine],
                             marker_color=variant_color(variant)))
    fig.update_layout(barmode="group", yaxis_title="loss (nats)", xaxis_title="selected position (row:position token)",
                      height=380, margin=dict(t=30), legend=dict(orientation="h", y=1.1))
    return fig


def gradient_figure(rows: Sequence[dict], *, title: str = "") -> go.Figure:
    """d loss / d logits for one position, per variant, on the classes with the largest gradients.

    ``rows``: dicts with ``token``, ``variant``, ``gradient`` and ``is_target`` (``loss_lab.gradient_rows``).
    The target's bar is negative (its probability should rise), the others positive.
    """
    if not rows:
        return _empty("No position to show.")
    fig = go.Figure()
    labels = {}
    for r in rows:
        labels.setdefault(r["token_id"], f"<b>{_e(r['token'])}</b> (target)" if r["is_target"] else _e(r["token"]))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        fig.add_trace(go.Bar(name=_e(variant), x=[labels[r["token_id"]] for r in mine], y=[r["gradient"] for r in mine],
                             marker_color=variant_color(variant)))
    fig.add_hline(y=0, line_color="#495057", line_width=1)
    fig.update_layout(barmode="group", yaxis_title="∂loss/∂logit (× M)", title=_e(title) if title else None,
                      height=380, margin=dict(t=50 if title else 30), legend=dict(orientation="h", y=1.12))
    return fig


def weights_figure(rows: Sequence[dict], *, batch_counts: Sequence[float] | None = None) -> go.Figure:
    """Class weight against corpus frequency (both on log axes), one line per scheme.

    ``rows``: dicts with ``scheme``, ``smoothed_count``, ``weight``, ``n_tokens``
    (``loss_lab.weight_curve_rows``). ``batch_counts``: smoothed counts of this batch's targets, drawn as
    ticks on the x axis.
    """
    if not rows:
        return _empty("No token counts.")
    fig = go.Figure()
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = sorted((r for r in rows if r["scheme"] == scheme), key=lambda r: r["smoothed_count"])
        fig.add_trace(go.Scatter(
            name=_e(scheme), x=[r["smoothed_count"] for r in mine], y=[r["weight"] for r in mine],
            mode="lines+markers", marker=dict(size=4), line=dict(color=SCHEME_COLORS.get(scheme)),
            customdata=[[r["count"], r["n_tokens"]] for r in mine],
            hovertemplate="count %{customdata[0]} (%{customdata[1]} ids): weight %{y:.3g}<extra>" + _e(scheme) + "</extra>",
        ))
    if batch_counts:
        for c in sorted(set(batch_counts)):
            fig.add_vline(x=c, line_color="#adb5bd", line_width=1, line_dash="dot")
    fig.update_layout(xaxis=dict(type="log", dtick=1, title="count in the corpus + smoothing (log)"),
                      yaxis=dict(type="log", dtick=1, title="class weight (log)"), height=380, margin=dict(t=30),
                      legend=dict(orientation="h", y=1.1))
    return fig


def k_sweep_figure(rows: Sequence[dict], *, vocab_size: int | None = None) -> go.Figure:
    """Four panels against K (log axis): loss, relative bias, gradient cosine and time per call, one
    line per correction; a dotted line marks K = V (every class).

    ``rows``: ``sampled_softmax.sampled_softmax_sweep`` output.
    """
    if not rows:
        return _empty("Nothing to sweep: the batch has no selected tokens.")
    fig = make_subplots(rows=2, cols=2, subplot_titles=(
        "sampled loss (bars: one draw's spread)", "mean error (sampled − full) / full, ± 2 SE",
        "gradient cosine with full softmax (hidden states)", "time per call, forward + backward (ms)"),
        horizontal_spacing=0.1, vertical_spacing=0.16)
    for correction in dict.fromkeys(r["correction"] for r in rows):
        mine = sorted((r for r in rows if r["correction"] == correction), key=lambda r: r["K"])
        name = _e(mine[0].get("label", correction))
        ks = [r["K"] for r in mine]
        color, dash = CORRECTION_STYLES.get(correction, ("#495057", "dash"))
        common = dict(mode="lines+markers", line=dict(color=color, dash=dash), legendgroup=name)
        fig.add_trace(go.Scatter(x=ks, y=[r["loss"] for r in mine], name=name,
                                 error_y=dict(type="data", array=[r.get("loss_std", 0) for r in mine], visible=True),
                                 **common), 1, 1)
        fig.add_trace(go.Scatter(x=ks, y=[r["rel_bias"] for r in mine], name=name, showlegend=False,
                                 error_y=dict(type="data", array=[2 * r.get("rel_bias_se", 0) for r in mine], visible=True),
                                 **common), 1, 2)
        fig.add_trace(go.Scatter(x=ks, y=[r["grad_cosine"] for r in mine], name=name, showlegend=False, **common), 2, 1)
        fig.add_trace(go.Scatter(x=ks, y=[r["time_ms"] for r in mine], name=name, showlegend=False, **common), 2, 2)
    first = rows[0]
    fig.add_hline(y=first["full_loss"], line_dash="dash", line_color=variant_color(FULL), row=1, col=1)
    fig.add_hline(y=0, line_color="#495057", line_width=1, row=1, col=2)
    fig.add_hline(y=1, line_dash="dash", line_color=variant_color(FULL), row=2, col=1)
    fig.add_hline(y=first["full_time_ms"], line_dash="dash", line_color=variant_color(FULL), row=2, col=2)
    if vocab_size:
        for row, col in ((1, 1), (1, 2), (2, 1), (2, 2)):
            fig.add_vline(x=vocab_size, line_dash="dot", line_color="#868e96", row=row, col=col)
        fig.add_annotation(x=math.log10(vocab_size), y=1, xref="x", yref="paper", text="K = V", showarrow=False,
                           yanchor="bottom", font=dict(color="#495057"))
    fig.update_xaxes(type="log", dtick=1, title_text="K (sampled classes)")  # 10, 100, 1000: no bare "2 5" minor labels
    fig.update_yaxes(tickformat=".0%", row=1, col=2)
    fig.update_layout(height=640, margin=dict(t=90), legend=dict(orientation="h", y=1.16))
    return fig


def nsp_accuracy_figure(records: Sequence[dict], *, heldout_before: float | None = None,
                        heldout_after: float | None = None) -> go.Figure:
    """NSP accuracy per training step (raw and smoothed), chance at 0.5, held-out before/after."""
    if not records:
        return _empty("Train the NSP head to see its accuracy.")
    steps = [r["step"] for r in records]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[r["accuracy"] for r in records], name="batch accuracy",
                             mode="markers", marker=dict(color="#adb5bd")))
    fig.add_trace(go.Scatter(x=steps, y=[r["accuracy_smoothed"] for r in records], name="running mean (5 steps)",
                             mode="lines", line=dict(color="#1c7ed6", width=3)))
    fig.add_hline(y=0.5, line_dash="dash", line_color="#868e96", annotation_text="chance")
    if heldout_before is not None and heldout_after is not None:
        fig.add_trace(go.Scatter(x=[0, steps[-1]], y=[heldout_before, heldout_after], name="held-out pairs",
                                 mode="markers+lines", line=dict(color="#2f9e44", dash="dot"), marker=dict(size=10)))
    fig.update_layout(xaxis_title="training step", yaxis=dict(title="accuracy", range=[0, 1.05]), height=340,
                      margin=dict(t=30), legend=dict(orientation="h", y=1.12))
    return fig


def bar_label(value: float) -> str:
    """A bar's label: 3 significant digits, trailing zeros kept, so 2.995 reads "3.00", never an exact-looking "3".

    >>> [bar_label(v) for v in (2.995, 17.52, 0.005186, 100.0)]
    ['3.00', '17.5', '0.00519', '100']
    """
    return f"{float(value):#.3g}".rstrip(".")


def museum_figure(exhibits: Sequence, *, height: int = 420) -> go.Figure:
    """Buggy vs correct for the exhibits measured as a loss, with the full softmax loss beside them
    where the exhibit is an estimate of it (the sampled-softmax ones). Bar labels keep 3 significant
    digits with their trailing zeros ("3.00" beside a card's "2.995"): short enough for three bars a group."""
    shown = [e for e in exhibits if e.unit.startswith("loss") and e.wrong_value == e.wrong_value
             and tuple(e.labels) == ("buggy code", "correct code")]
    if not shown:
        return _empty("No loss-valued exhibits on this batch.")
    names = [_e(e.title) for e in shown]
    bars = [
        go.Bar(name="buggy code", x=names, y=[e.wrong_value for e in shown], marker_color=WRONG_COLOR,
               text=[bar_label(e.wrong_value) for e in shown], textposition="outside", cliponaxis=False),
        go.Bar(name="correct code", x=names, y=[e.right_value for e in shown], marker_color=RIGHT_COLOR,
               text=[bar_label(e.right_value) for e in shown], textposition="outside", cliponaxis=False),
    ]
    full = [e.also.get("full softmax loss") if e.key.startswith(("sampled", "negatives")) else None for e in shown]
    if any(v is not None for v in full):
        bars.append(go.Bar(name="full softmax loss (what sampled softmax estimates)", x=names, y=full,
                           marker_color=FULL_COLOR, text=[bar_label(v) if v is not None else "" for v in full],
                           textposition="outside", cliponaxis=False))
    fig = go.Figure(bars)
    top = max([e.wrong_value for e in shown] + [e.right_value for e in shown] + [v for v in full if v is not None])
    fig.update_yaxes(range=[0, top * 1.25])  # headroom for the labels above the tallest bar
    # The legend sits above the plot (anchored at its bottom), so however many lines it wraps to it never
    # covers a bar; the page gives it more room in presenter view.
    fig.update_layout(barmode="group", yaxis_title="loss (nats)", height=height, margin=dict(t=60, b=140),
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"), xaxis_tickangle=-20)
    return fig
