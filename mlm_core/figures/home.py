"""The home page's picture: the MLM flow on one sentence."""

from __future__ import annotations

import plotly.graph_objects as go

_ORIGINAL = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
_CORRUPTED = ["[CLS]", "the", "[MASK]", "sat", "on", "the", "mat", "[SEP]"]
_ROWS = [  # (y, label, tokens, colour of token 2)
    (3.0, "1. text → tokens", _ORIGINAL, "#f1f3f5"),
    (2.0, "2. mask 15% (80/10/10)", _CORRUPTED, "#ffe3e3"),
    (1.0, "3. encoder reads all tokens", ["h"] * 8, "#e7f5ff"),
    (0.0, "4. head + loss at selected rows", ["", "", "cat?", "", "", "", "", ""], "#d3f9d8"),
]


def flow_figure(height: int = 360) -> go.Figure:
    """Boxes for the tokens at each stage of the flow, the masked position highlighted."""
    fig = go.Figure()
    for y, label, tokens, colour in _ROWS:
        fig.add_annotation(x=-0.6, y=y, text=f"<b>{label}</b>", showarrow=False, xanchor="right", font=dict(size=13))
        for x, token in enumerate(tokens):
            if not token:
                continue
            highlight = x == 2
            fig.add_shape(type="rect", x0=x - 0.42, x1=x + 0.42, y0=y - 0.3, y1=y + 0.3,
                          fillcolor=colour if highlight else "#ffffff",
                          line=dict(color="#e03131" if highlight else "#adb5bd", width=2 if highlight else 1))
            fig.add_annotation(x=x, y=y, text=token, showarrow=False, font=dict(family="monospace", size=13))
    fig.add_annotation(x=2, y=-0.75, showarrow=False, font=dict(size=13),
                       text="loss = −log p(<b>cat</b> | context): only where a token was selected")
    for y in (2.6, 1.6, 0.6):
        fig.add_annotation(x=2, y=y - 0.2, ax=2, ay=y + 0.05, xref="x", yref="y", axref="x", ayref="y",
                           showarrow=True, arrowhead=2, arrowcolor="#495057", text="")
    fig.update_xaxes(visible=False, range=[-4.2, 7.6])
    fig.update_yaxes(visible=False, range=[-1.1, 3.5])
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=10, b=10), plot_bgcolor="white", showlegend=False)
    return fig
