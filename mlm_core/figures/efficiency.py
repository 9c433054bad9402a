"""Figures of the Efficiency lesson: pure functions, measurements in, plotly figures out."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mlm_core.efficiency import PATH_LABELS, human_bytes

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


def step_settings_figure(rows: list[dict], height: int = 380) -> go.Figure:
    """Time per training step and peak memory for each (bf16 autocast, gradient checkpointing) setting."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time per step (ms)", "peak memory (MiB)"),
                        horizontal_spacing=0.12)
    names = [r["label"] for r in rows]
    colors = ["#1c7ed6" if r["amp"] == "off" else "#7048e8" for r in rows]
    patterns = ["" if not r["checkpointing"] else "/" for r in rows]
    fig.add_trace(go.Bar(x=names, y=[r["time_ms"] for r in rows], marker=dict(color=colors, pattern_shape=patterns),
                         text=[f"{r['time_ms']:.0f}" for r in rows], textposition="outside", showlegend=False),
                  row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[_mib(r["peak_bytes"]) for r in rows],
                         marker=dict(color=colors, pattern_shape=patterns),
                         text=[human_bytes(r["peak_bytes"]) for r in rows], textposition="outside", showlegend=False),
                  row=1, col=2)
    fig.update_layout(title="Mixed precision and checkpointing trade time for memory (hatched: checkpointing on)",
                      height=height, margin=dict(t=80, b=40))
    fig.update_yaxes(rangemode="tozero")
    return fig
