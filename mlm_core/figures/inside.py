"""Figures of the Inside-the-model lesson: attention from one position, head patterns, the logit lens,
saliency, and a trained model beside its base.

Pure functions: ``mlm_core.inside`` and ``mlm_core.lessons.inside`` results in, plotly figure out. Token text goes through
``html.escape`` (plotly renders HTML in labels: RoBERTa's ``<mask>`` would vanish). Tokens on an
axis are labelled ``"position·token"``, so a repeated word keeps its own column.
"""

from __future__ import annotations

import html
import math
from typing import Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from mlm_core.inside import LensProfile, LogitLens, PositionAttention, Saliency
from mlm_core.lessons.inside import AgreementSummary, HeadPatterns, ModelComparison
from mlm_core.formatting import signed

ATTENTION_SCALE = "Blues"
PROB_SCALE = "Greens"
TRUE_COLOR = "#2f9e44"
SELF_COLOR = "#e03131"  # the position we look from
OTHER_COLOR = "#74c0fc"
BASE_COLOR = "#868e96"
TRAINED_COLOR = "#1c7ed6"
SALIENCY_COLORS = {"leave-one-out (exact)": "#2b8a3e", "gradient × input": "#f08c00",
                   "gradient × (input − [MASK])": "#ae3ec9"}


def _e(text) -> str:
    return html.escape(str(text), quote=False)


def _percent(q: float) -> str:
    """12% for visible probabilities, 0.31% or 2e-05 for the small ones an untrained model gives."""
    return f"{q:.0%}" if q >= 0.01 else (f"{q:.2%}" if q >= 1e-4 else f"{q:.0e}")


def _rank_ticks(top: float) -> dict:
    """Log-axis ticks at 1, 10, 100, ... only (plotly labels the 2s and 5s between them too)."""
    values = [10**i for i in range(int(math.log10(max(top, 10))) + 1)]
    return dict(tickvals=values, ticktext=[f"{v:,}" for v in values])


def _short(token: str, limit: int = 9) -> str:
    return token if len(token) <= limit else token[: limit - 1] + "…"


def token_axis(tokens: Sequence[str]) -> list[str]:
    """Unique, escaped category labels for a token axis: ``"3·cat"``."""
    return [f"{i}·{_e(t)}" for i, t in enumerate(tokens)]


def grid_height(layers: int) -> int:
    """Pixels for a layers × heads grid: readable cells even for a 2-layer model."""
    return 110 + 42 * max(layers, 4)


def layers_height(layers: int) -> int:
    """Pixels for a layers × tokens heatmap."""
    return 130 + 30 * max(layers, 4)


def head_grid_figure(attention: PositionAttention, *, selected: tuple[int, int] | None = None,
                     height: int | None = None, label_px: int | None = None) -> go.Figure:
    """Layers × heads: each cell names the token that head's row from the position attends to most.

    Colour: that token's weight (1 = all attention on one token). A transparent marker per cell
    carries ``customdata = [layer, head]`` (0-based), so a click selects the cell
    (``st.plotly_chart(on_select=...)``: Streamlit 1.67 reports clicks through Plotly's selection
    events, which heatmaps do not send, so the clickable layer is a scatter trace).

    ``label_px``: cell labels of that size, for a room (presenter view). The grid then has a row per
    head and a column per layer: 12 heads side by side left about 50 px a cell at a projector's 1280 px,
    too narrow for "several" at 20 px; 6 layers side by side leave twice that.
    """
    weights = attention.weights  # (L, H, T)
    L, H, _ = weights.shape
    top_w, top_i = weights.max(-1)  # (L, H)
    names = [[_e(_short(attention.tokens[int(top_i[l, h])])) for h in range(H)] for l in range(L)]
    hover = [[f"layer {l + 1}, head {h + 1}<br>attends most to: "
              + ", ".join(f"{_e(t)} {w:.2f}" for _, t, w in attention.top(l, h, 3)) + "<br>click to enlarge"
              for h in range(H)] for l in range(L)]
    heads, layers = list(range(1, H + 1)), list(range(1, L + 1))
    by_head = label_px is not None  # rows: heads, columns: layers
    z, text = top_w.tolist(), names
    if by_head:
        z, text = top_w.T.tolist(), [list(row) for row in zip(*names)]
    cells = [(l, h) for h in range(H) for l in range(L)] if by_head else [(l, h) for l in range(L) for h in range(H)]
    cx = [l + 1 if by_head else h + 1 for l, h in cells]
    cy = [h + 1 if by_head else l + 1 for l, h in cells]
    fig = go.Figure(go.Heatmap(
        z=z, x=layers if by_head else heads, y=heads if by_head else layers, text=text, texttemplate="%{text}",
        zmin=0, zmax=1, colorscale=ATTENTION_SCALE, colorbar=dict(title="weight", thickness=12), hoverinfo="skip",
        xgap=2, ygap=2, textfont=dict(size=label_px or 11),
    ))
    fig.add_trace(go.Scatter(
        x=cx, y=cy, mode="markers",
        marker=dict(size=28, symbol="square", color="rgba(0,0,0,0)"),
        customdata=[[l, h] for l, h in cells], text=[hover[l][h] for l, h in cells],
        hovertemplate="%{text}<extra></extra>", showlegend=False,
        selected=dict(marker=dict(opacity=1)), unselected=dict(marker=dict(opacity=1)),
    ))
    if selected is not None and 0 <= selected[0] < L and 0 <= selected[1] < H:
        layer, head = selected
        col, row = (layer, head) if by_head else (head, layer)
        fig.add_shape(type="rect", x0=col + 0.5, x1=col + 1.5, y0=row + 0.5, y1=row + 1.5,
                      line=dict(color=SELF_COLOR, width=3))
    x_axis, y_axis = ("layer", "head") if by_head else ("head", "layer")
    fig.update_layout(
        title=f"Where position {attention.position} ({_e(attention.tokens[attention.position])}) looks: "
              "the token each head attends to most (click a cell)",
        xaxis=dict(title=x_axis, tickmode="array", tickvals=layers if by_head else heads, showgrid=False,
                   zeroline=False),
        yaxis=dict(title=y_axis, tickmode="array", tickvals=heads if by_head else layers, autorange="reversed",
                   showgrid=False, zeroline=False),
        height=height or (grid_height(H) if by_head else grid_height(L)), margin=dict(t=60, b=40, l=50, r=20),
        dragmode=False,
    )
    return fig


def head_attention_figure(attention: PositionAttention, layer: int, head: int, *, height: int = 380) -> go.Figure:
    """One head enlarged: the weight from the position to every token, and its layer's head average."""
    tokens = token_axis(attention.tokens)
    row = attention.weights[layer, head].tolist()  # (T,)
    mean = attention.layer_mean[layer].tolist()  # (T,)
    colors = [SELF_COLOR if i == attention.position else OTHER_COLOR for i in range(len(tokens))]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=tokens, y=row, marker_color=colors, name=f"head {head + 1}",
                         hovertemplate="%{x}: %{y:.3f}<extra>head</extra>"))
    fig.add_trace(go.Scatter(x=tokens, y=mean, mode="lines+markers", name=f"layer {layer + 1}, mean of its heads",
                             line=dict(color="#495057", dash="dot"), hovertemplate="%{x}: %{y:.3f}<extra>mean</extra>"))
    fig.update_layout(
        title=f"Layer {layer + 1}, head {head + 1}: attention from {attention.position}·"
              f"{_e(attention.tokens[attention.position])} (red) to every token",
        yaxis=dict(title="attention weight", range=[0, 1.05]), xaxis=dict(title="token", tickangle=-45),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        height=height, margin=dict(t=80, b=60),
    )
    return fig


def layer_attention_figure(attention: PositionAttention, *, height: int | None = None) -> go.Figure:
    """Layers × tokens: the attention from the position, averaged over each layer's heads."""
    mean = attention.layer_mean  # (L, T)
    L = mean.shape[0]
    fig = go.Figure(go.Heatmap(
        z=mean.tolist(), x=token_axis(attention.tokens), y=[f"layer {l + 1}" for l in range(L)],
        colorscale=ATTENTION_SCALE, zmin=0, zmax=max(0.05, float(mean.max())),
        colorbar=dict(title="weight", thickness=12),
        hovertemplate="%{y}, %{x}: %{z:.3f}<extra></extra>",
    ))
    fig.update_layout(
        title=f"The average over each layer's heads: where {attention.position}·"
              f"{_e(attention.tokens[attention.position])} looks, layer by layer",
        yaxis=dict(autorange="reversed"), xaxis=dict(tickangle=-45),
        height=height or layers_height(L), margin=dict(t=60, b=60),
    )
    return fig


def patterns_figure(patterns: HeadPatterns, *, height: int = 520, cols: int = 4) -> go.Figure:
    """One small layers × heads map per pattern (share of attention on its tokens), and each head's entropy.

    ``cols`` maps per row: 4 on a screen; 2 in presenter view, where large tick labels and titles need the width.
    """
    P = len(patterns.names)
    rows = math.ceil((P + 1) / cols)
    titles = [f"{_e(n)} (even: {float(u):.2f})" for n, u in zip(patterns.names, patterns.uniform)]
    titles.append(f"entropy, nats (even: {patterns.uniform_entropy:.1f})")
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.04 if cols > 2 else 0.1,
                        vertical_spacing=0.14 if rows <= 2 else 0.32 / rows)
    L, H = patterns.entropy.shape
    for p in range(P + 1):
        r, c = p // cols + 1, p % cols + 1
        entropy = p == P
        z = (patterns.entropy if entropy else patterns.scores[p]).tolist()
        fig.add_trace(go.Heatmap(
            z=z, x=list(range(1, H + 1)), y=list(range(1, L + 1)),
            coloraxis="coloraxis2" if entropy else "coloraxis",
            hovertemplate=("layer %{y}, head %{x}: " + ("%{z:.2f} nats" if entropy else "%{z:.2f}")
                           + "<extra></extra>"),
        ), row=r, col=c)
        fig.update_yaxes(autorange="reversed", showticklabels=c == 1, title_text="layer" if c == 1 else None,
                         dtick=1 if L <= 12 else 2, row=r, col=c)
        fig.update_xaxes(showticklabels=r == rows, title_text="head" if r == rows else None,
                         dtick=1 if H <= 12 else 2, row=r, col=c)
    fig.update_layout(
        title=f"Which heads do what, measured on {patterns.sentences} sentences: mean share of attention on each "
              "pattern's tokens",
        coloraxis=dict(colorscale=ATTENTION_SCALE, cmin=0, cmax=1, colorbar=dict(title="share", x=1.0, len=0.45, y=0.78)),
        coloraxis2=dict(colorscale="Purples", cmin=0, cmax=max(0.1, float(patterns.entropy.max())),
                        colorbar=dict(title="nats", x=1.0, len=0.45, y=0.22, tickformat=".1f")),
        height=height, margin=dict(t=80, b=40),
    )
    for annotation in fig.layout.annotations:
        annotation.font.size = 12
    return fig


def lens_figure(lens: LogitLens, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Depth down, the head's top-k across (colour = probability), and the true token's rank at each depth."""
    depths = list(lens.depth_labels)
    K = lens.top_ids.shape[1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.66, 0.34], shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=(f"top {K} at each depth (✓: the true token)",
                                        "rank of the true token" if lens.true_id is not None
                                        else "no true token given"))
    text = [[(("<b>✓ " + _e(t) + "</b>") if lens.true_id is not None and i == lens.true_id else _e(t))
             + "<br>" + _percent(q)
             for t, i, q in zip(lens.top_tokens[d], lens.top_ids[d].tolist(), lens.top_probs[d].tolist())]
            for d in range(len(depths))]
    fig.add_trace(go.Heatmap(
        z=lens.top_probs.tolist(), x=[f"#{k + 1}" for k in range(K)], y=depths, text=text,
        texttemplate="%{text}", colorscale=PROB_SCALE, zmin=0, zmax=max(0.05, float(lens.top_probs.max())),
        showscale=False, xgap=2, ygap=2, hovertemplate="%{y}, %{x}: p = %{z:.3f}<extra></extra>",
    ), row=1, col=1)
    if lens.true_id is not None:
        fig.add_trace(go.Scatter(
            x=lens.true_rank.tolist(), y=depths, mode="lines+markers+text",
            text=[f"{int(r):,} · {float(p):.1%}" if float(p) >= 0.001 else f"{int(r):,}"
                  for r, p in zip(lens.true_rank, lens.true_prob)],
            textposition="middle right", marker=dict(color=TRUE_COLOR, size=9), line=dict(color=TRUE_COLOR),
            cliponaxis=False, showlegend=False,
            hovertemplate="%{y}: rank %{x:,}<extra>" + _e(lens.true_token) + "</extra>",
        ), row=1, col=2)
        top = max(10.0, float(lens.true_rank.max()) * 3)
        fig.update_xaxes(type="log", range=[math.log10(top), -0.1], title_text="rank (log scale; 1 = first guess)", row=1, col=2,
                         **_rank_ticks(top))
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_layout(
        title=title or (f"The logit lens at position {lens.position}: the model's own head read after every layer"
                        + (f" (true token: {_e(lens.true_token)})" if lens.true_token else "")),
        # r: room for the rank-1 label ("1 · 6.2%"), drawn right of the axis' end, at presenter size too
        height=height or 130 + 46 * len(depths), margin=dict(t=90, b=40, r=110),
    )
    return fig


def lens_profile_figure(profile: LensProfile, *, height: int = 340, texts: str = "held-out workshop sentences") -> go.Figure:
    """Over many [MASK] positions: how often the head, read at each depth, has the answer first / in its top 5.
    ``texts`` says what they are (the page's: the workshop sentences the bundled model never trained on)."""
    depths = list(profile.depth_labels)
    fig = go.Figure()
    for values, name, color in ((profile.top5, "true token in the top 5", "#8ce99a"),
                                (profile.top1, "true token first", TRUE_COLOR)):
        fig.add_trace(go.Scatter(x=depths, y=values.tolist(), mode="lines+markers+text", name=name,
                                 line=dict(color=color, width=3), text=[f"{float(v):.0%}" for v in values],
                                 textposition="top center", hovertemplate="%{x}: %{y:.1%}<extra>" + name + "</extra>"))
    fig.update_layout(
        title=f"Over {profile.positions} [MASK] positions of {_e(texts)}: when does the answer appear?",
        yaxis=dict(title="share of positions", range=[0, 1.05], tickformat=".0%"),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        height=height, margin=dict(t=80, b=40),
    )
    return fig


def lens_comparison_figure(base: LogitLens, trained: LogitLens, *, height: int = 360) -> go.Figure:
    """The true token's rank at each depth, base model vs trained copy: where training moved the answer."""
    fig = go.Figure()
    for lens, name, color in ((base, "base", BASE_COLOR), (trained, "trained", TRAINED_COLOR)):
        fig.add_trace(go.Scatter(
            x=list(lens.depth_labels), y=lens.true_rank.tolist(), mode="lines+markers", name=name,
            line=dict(color=color), customdata=lens.true_prob.tolist(),
            hovertemplate="%{x}: rank %{y:,}, p = %{customdata:.3f}<extra>" + name + "</extra>",
        ))
    top = max(10.0, float(torch.cat([base.true_rank, trained.true_rank]).max()) * 3)
    fig.update_layout(
        title=f"Logit lens before and after training: rank of {_e(base.true_token)} at each depth",
        yaxis=dict(type="log", range=[math.log10(top), -0.1], title="rank (log, 1 at the top)", **_rank_ticks(top)),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        height=height, margin=dict(t=80, b=40),
    )
    return fig


def _scaled(values: torch.Tensor) -> list[float | None]:
    finite = values[values.isfinite()]
    top = float(finite.abs().max()) if finite.numel() else 0.0
    return [None if not math.isfinite(float(v)) else (float(v) / top if top > 0 else 0.0) for v in values]


def saliency_figure(result: Saliency, *, height: int = 400) -> go.Figure:
    """Each token's importance for the guess, three ways, each scaled to its largest |value|."""
    tokens = token_axis(result.tokens)
    series = (("leave-one-out (exact)", result.leave_one_out),
              ("gradient × input", result.grad_x_input),
              ("gradient × (input − [MASK])", result.grad_x_delta))
    fig = go.Figure()
    for name, values in series:
        fig.add_trace(go.Bar(x=tokens, y=_scaled(values), name=name, marker_color=SALIENCY_COLORS[name],
                             customdata=[None if not math.isfinite(float(v)) else float(v) for v in values],
                             hovertemplate="%{x}: %{customdata:.4f}<extra>" + name + "</extra>"))
    fig.update_layout(
        barmode="group",
        title=f"What the guess at {result.position}·{_e(result.tokens[result.position])} (true token: "
              f"{_e(result.true_token)}) depends on; τ with leave-one-out on magnitudes: gradient × input "
              f"{result.tau_input:.2f}, × (input − [MASK]) {result.tau_delta:.2f} (signed: {result.tau_input_signed:.2f}, "
              f"{result.tau_delta_signed:.2f})",
        yaxis=dict(title="scaled to the largest |value|", range=[-1.1, 1.1]), xaxis=dict(tickangle=-45),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        height=height, margin=dict(t=90, b=60),
    )
    return fig


def agreement_figure(result: Saliency, layer_tau: torch.Tensor, *, height: int = 320) -> go.Figure:
    """Kendall τ with leave-one-out: the gradient views, and each layer's head-averaged attention."""
    names = ["gradient × input", "gradient × (input − [MASK])"] + [f"attention, layer {l + 1}"
                                                                    for l in range(layer_tau.numel())]
    values = [result.tau_input, result.tau_delta] + layer_tau.tolist()
    colors = [SALIENCY_COLORS["gradient × input"], SALIENCY_COLORS["gradient × (input − [MASK])"]] + \
        [OTHER_COLOR] * layer_tau.numel()
    fig = go.Figure(go.Bar(x=names, y=[v if math.isfinite(v) else None for v in values], marker_color=colors,
                           text=[f"{v:.2f}" if math.isfinite(v) else "n/a" for v in values], textposition="outside",
                           cliponaxis=False, hovertemplate="%{x}: τ = %{y:.3f}<extra></extra>"))
    fig.update_layout(
        title="Does it rank the tokens by size as leave-one-out does? Kendall τ of the magnitudes (1 = same order, "
              "0 = unrelated)",
        yaxis=dict(title="Kendall τ", range=[-1.1, 1.2], zeroline=True), height=height, margin=dict(t=60, b=60),
    )
    return fig


def agreement_summary_figure(summary: AgreementSummary, *, height: int = 360) -> go.Figure:
    """Kendall τ with leave-one-out, one point per sentence, for each gradient view and each layer's attention."""
    fig = go.Figure()
    colors = [SALIENCY_COLORS["gradient × input"], SALIENCY_COLORS["gradient × (input − [MASK])"]] + \
        [OTHER_COLOR] * (len(summary.names) - 2)
    for i, (name, color) in enumerate(zip(summary.names, colors)):
        values = [v for v in summary.taus[:, i].tolist() if math.isfinite(v)]
        fig.add_trace(go.Box(y=values, name=_e(name), marker_color=color, boxpoints="all", jitter=0.4, pointpos=0,
                             boxmean=True, hovertemplate="τ = %{y:.2f}<extra>" + _e(name) + "</extra>"))
    fig.update_layout(
        title=f"Over {summary.taus.shape[0]} sentences (last word masked): Kendall τ with leave-one-out, on magnitudes",
        yaxis=dict(title="Kendall τ", range=[-1.05, 1.05], zeroline=True), showlegend=False,
        height=height, margin=dict(t=60, b=60),
    )
    return fig


def loss_change_figure(comparison: ModelComparison, *, height: int = 340) -> go.Figure:
    """−log p(true) at each selected position, base vs trained, with the change written on top."""
    fig = go.Figure()
    labels = [f"{p.position}·{_e(p.true_token)}" for p in comparison.base.positions]
    for preds, name, color in ((comparison.base, "base", BASE_COLOR), (comparison.trained, "trained", TRAINED_COLOR)):
        fig.add_trace(go.Bar(x=labels, y=[p.loss for p in preds.positions], name=name, marker_color=color,
                             hovertemplate="%{x}: loss %{y:.3f}<extra>" + name + "</extra>"))
    for label, base, trained, change in zip(labels, comparison.base.positions, comparison.trained.positions,
                                            comparison.loss_change):
        fig.add_annotation(x=label, y=max(base.loss, trained.loss, 0), text=f"change {signed(change)}", showarrow=False,
                           yshift=14, font=dict(color=TRUE_COLOR if change < 0 else SELF_COLOR))
    fig.update_layout(
        barmode="group", bargap=0.5 if len(labels) < 3 else 0.25,
        title="Per-position loss −log p(true), before and after training (negative change = better)",
        yaxis=dict(title="−log p(true)", rangemode="tozero"),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        height=height, margin=dict(t=80, b=40),
    )
    return fig


def lesson_figures(attention: PositionAttention, patterns: HeadPatterns, saliency: Saliency, layer_tau: torch.Tensor,
                   *, lens: LogitLens | None = None, profile: LensProfile | None = None,
                   head: tuple[int, int] = (0, 0)) -> dict[str, go.Figure]:
    """Every picture of the page for one sentence, named, for ``mlm_core.lessons.export.lesson_zip``.

    ``layer_tau``: each layer's Kendall τ with leave-one-out (``mlm_core.inside.layer_agreement``), (L,).
    """
    figures = {
        "head grid": head_grid_figure(attention, selected=head),
        "enlarged head": head_attention_figure(attention, *head),
        "layer averages": layer_attention_figure(attention),
        "head patterns": patterns_figure(patterns),
        "saliency": saliency_figure(saliency),
        "agreement": agreement_figure(saliency, layer_tau),
    }
    if lens is not None:
        figures["logit lens"] = lens_figure(lens)
    if profile is not None:
        figures["logit lens over the corpus"] = lens_profile_figure(profile)
    return figures
