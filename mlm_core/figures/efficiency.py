"""Figures of the Efficiency lesson: pure functions, measurements in, plotly figures out."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.lessons.efficiency import MATMUL_SHARE, PATH_LABELS
from mlm_core.measure import human_bytes

PATH_COLORS = {"loop": "#adb5bd", "vectorised": "#f08c00", "gathered": "#2f9e44"}
FULL_COLOR, GATHERED_COLOR = "#f08c00", "#2f9e44"


def _mib(n: float) -> float:
    return n / 2**20


def loss_paths_figure(rows: list[dict], height: int = 380) -> go.Figure:
    """Time and peak memory of the three loss paths, side by side; the loss value in the hover."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time, forward + backward (ms)", "peak memory (MiB)"),
                        horizontal_spacing=0.12)
    names = [PATH_LABELS.get(r["path"], r["path"]) for r in rows]
    colors = [PATH_COLORS.get(r["path"], "#1c7ed6") for r in rows]
    hover = [f"loss {r['loss']:.6f}<br>{r['logits_values']:,} scores computed" for r in rows]
    fig.add_trace(go.Bar(x=names, y=[r["time_ms"] for r in rows], marker_color=colors, hovertext=hover,
                         text=[f"{r['time_ms']:.0f} ms" for r in rows], textposition="outside", showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[_mib(r["peak_bytes"]) for r in rows], marker_color=colors, hovertext=hover,
                         text=[human_bytes(r["peak_bytes"]) for r in rows], textposition="outside", showlegend=False),
                  row=1, col=2)
    loss = rows[0]["loss"] if rows else float("nan")
    fig.update_layout(title=f"Same loss ({loss:.5f}), three costs", height=height, margin=dict(t=80, b=40))
    fig.update_yaxes(rangemode="tozero")
    return fig


def logits_size_figure(size: dict, height: int = 360) -> go.Figure:
    """Full (B × T × V) against gathered (M × V) logits, as bars in MiB, with the ratio in the title."""
    labels = [f"full: {size['batch_size']}×{size['seq_len']}×{size['vocab_size']:,}",
              f"gathered: {size['masked']}×{size['vocab_size']:,}"]
    values = [size["full_bytes"], size["gathered_bytes"]]
    fig = go.Figure(go.Bar(
        x=[_mib(v) for v in values], y=labels, orientation="h", marker_color=[FULL_COLOR, GATHERED_COLOR],
        text=[human_bytes(v) for v in values], textposition="auto",
    ))
    ratio = size["ratio"]
    fig.update_layout(
        title=f"The full logits are {ratio:.1f}× the gathered ones ({size['dtype']}, {size['bytes_per_value']} bytes a score)",
        xaxis=dict(title="MiB (the gradient in backward needs as much again)"),
        yaxis=dict(autorange="reversed"), height=height, margin=dict(t=60, b=40, l=10),
    )
    return fig


def _short(row: dict) -> str:
    """An axis label: 'fp32', 'bf16 + ckpt', 'fp32, frozen emb.'."""
    label = "bf16" if row["amp"] == "bf16" else "fp32"
    if row["checkpointing"]:
        label += " + ckpt"
    if row.get("frozen"):
        label += ", frozen emb."
    return label


def step_settings_figure(rows: list[dict], height: int = 380) -> go.Figure:
    """Time per training step, peak memory and the matmuls' share of the step's time (a CPU MFU) for each set-up."""
    with_mfu = all(r.get("mfu") is not None for r in rows)
    titles = ("time per step (ms)", "peak memory (MiB)") + ((f"{MATMUL_SHARE} (MFU)",) if with_mfu else ())
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.08)
    names = [_short(r) for r in rows]
    colors = ["#1c7ed6" if r["amp"] == "off" else "#7048e8" for r in rows]
    patterns = ["/" if r["checkpointing"] else ("." if r.get("frozen") else "") for r in rows]
    marker = dict(color=colors, pattern_shape=patterns)
    fig.add_trace(go.Bar(x=names, y=[r["time_ms"] for r in rows], marker=marker,
                         text=[f"{r['time_ms']:.0f}" for r in rows], textposition="outside", showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[_mib(r["peak_bytes"]) for r in rows], marker=marker,
                         text=[human_bytes(r["peak_bytes"]) for r in rows], textposition="outside", showlegend=False),
                  row=1, col=2)
    if with_mfu:
        fig.add_trace(go.Bar(x=names, y=[r["mfu"] for r in rows], marker=marker,
                             text=[f"{r['mfu']:.0%}" for r in rows], textposition="outside", showlegend=False),
                      row=1, col=3)
        fig.update_yaxes(tickformat=".0%", row=1, col=3)
    fig.update_layout(title=f"One training step, {len(rows)} set-ups, the same starting weights",
                      height=height, margin=dict(t=80, b=40))
    fig.update_yaxes(rangemode="tozero")
    return fig


def loop_sweep_figure(rows: list[dict], height: int = 380) -> go.Figure:
    """How many times slower the per-position loop is than one vectorised call, against M, one line per V."""
    fig = go.Figure()
    for i, vocab in enumerate(sorted({r["vocab"] for r in rows})):
        mine = sorted((r for r in rows if r["vocab"] == vocab), key=lambda r: r["rows"])
        fig.add_trace(go.Scatter(
            x=[r["rows"] for r in mine], y=[r["ratio"] for r in mine], mode="lines+markers+text",
            name=f"V = {vocab:,}", text=[f"{r['ratio']:.0f}×" for r in mine],
            textposition="top left" if i % 2 else "bottom right",
            line=dict(color=("#adb5bd", "#f08c00", "#7048e8")[i % 3], width=3),
            hovertext=[f"loop {r['loop_ms']:.1f} ms, vectorised {r['vectorised_ms']:.2f} ms" for r in mine],
        ))
    fig.add_hline(y=1, line_dash="dot", line_color="#868e96")
    fig.update_layout(title="The loss alone: the loop's cost grows with M (and with V)", height=height,
                      xaxis=dict(title="selected rows M", type="log", tickvals=sorted({r["rows"] for r in rows})),
                      yaxis=dict(title="loop time ÷ vectorised time", rangemode="tozero"),
                      margin=dict(t=60, b=40), legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


BREAKDOWN_COLORS = {
    "matrix multiplies": "#1c7ed6", "softmax (attention) and cross-entropy": "#f08c00", "dropout": "#e64980",
    "layer norm": "#74b816", "GELU": "#15aabf", "embedding gradient": "#fa5252", "optimizer (AdamW)": "#7048e8",
    "gradient clipping": "#be4bdb", "casts and copies": "#fab005", "other tensor operations": "#adb5bd",
    "Python and framework overhead": "#495057",
}


def step_breakdown_figure(breakdowns: dict[str, list[dict]], height: int = 380) -> go.Figure:
    """Stacked bars, one per precision: where a training step's time goes (ms per category)."""
    fig = go.Figure()
    names = list(breakdowns)
    order = [r["category"] for r in next(iter(breakdowns.values()), [])]
    for category in order:
        values, shares = [], []
        for name in names:
            hit = next((r for r in breakdowns[name] if r["category"] == category), {"ms": 0.0, "share": 0.0})
            values.append(hit["ms"])
            shares.append(hit["share"])
        fig.add_trace(go.Bar(x=values, y=names, orientation="h", name=category,
                             marker_color=BREAKDOWN_COLORS.get(category, "#adb5bd"),
                             hovertext=[f"{category}: {v:.0f} ms ({s:.0%})" for v, s in zip(values, shares)],
                             text=[f"{s:.0%}" if s >= 0.06 else "" for s in shares], textposition="inside"))
    fig.update_layout(barmode="stack", title="Where one training step's time goes (torch.profiler)", height=height,
                      xaxis=dict(title="ms in one step (profiled: small operators look slower than they are)"),
                      yaxis=dict(autorange="reversed"), margin=dict(t=60, b=40, l=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig
