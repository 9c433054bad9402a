"""Presenter view: the same lesson readable from a room's back row.

Charts, tables and text grow (``room_figure``, ``chart_height``, ``table``, ``PRESENTER_CSS``), and
advanced controls are hidden (``advanced``); the figure builders in ``mlm_core.figures`` stay free of UI
settings.
"""

from __future__ import annotations

import html
import re

import pandas as pd
import streamlit as st

from mlm_core.formatting import readable
from mlm_core.lessons.export import safe_name
from ui.settings import KEYS


PRESENTER_TOKEN_PX = 30  # chips readable from the back row (issue: at least 28 px)
PRESENTER_CHART_HEIGHT = 600  # charts at least this tall in presenter view
PRESENTER_TABLE_PX = 22  # table text in presenter view: as large as the page's body text there (1.25rem = 20 px) or larger
PRESENTER_CHART_FONT_PX = 20  # ticks, axis titles, legends and bar labels in presenter view
PRESENTER_CHART_TITLE_PX = 26
PRESENTER_TITLE_CHARS = 55  # a chart title this long fits one line at PRESENTER_CHART_TITLE_PX on a 1280-px projector
PRESENTER_SUB_PX = 22  # "was: …" under a chip
PRESENTER_LEGEND_PX = 20  # the chips of the colour key
PRESENTER_LARGE_PX = 26  # text in a ``room_large_*`` container (the Masking page's draw line)

PRESENTER_CSS = f"""
<style>
.mlm-chips .mlm-chip {{ font-size: {PRESENTER_TOKEN_PX}px !important; padding: 8px 12px !important; }}
.mlm-chips .mlm-sub {{ font-size: {PRESENTER_SUB_PX}px !important; line-height: 1.2; }}
/* the colour key is read once, not from the back row every step: smaller than the tokens, so it takes one line */
.mlm-legend .mlm-chips .mlm-chip {{ font-size: {PRESENTER_LEGEND_PX}px !important; padding: 3px 9px !important; }}
div[data-testid="stMarkdownContainer"] p, div[data-testid="stMarkdownContainer"] li {{ font-size: 1.25rem; }}
/* what the room reads at each step (the Masking page's draw line): larger than the body text */
div[class*="st-key-room_large_"] div[data-testid="stMarkdownContainer"] p {{ font-size: {PRESENTER_LARGE_PX}px !important;
  line-height: 1.35; }}
/* 20 px labels with room to spare: at 1280 px "◀ Previous token" and "Re-roll (new seed)" fit on one line */
div.stButton button, div.stFormSubmitButton button, div.stDownloadButton button {{
  font-size: 1.25rem; padding: 0.45rem 0.8rem; min-height: 3rem; }}
div.stButton button p, div.stFormSubmitButton button p, div.stDownloadButton button p {{ font-size: 1.25rem; }}
div[data-testid="stButtonGroup"] button {{ min-height: 2.8rem; padding: 0.3rem 1rem; }}
div[data-testid="stButtonGroup"] button p, div[data-testid="stRadioOption"] p {{ font-size: 1.35rem; }}
div[data-testid="stTextInput"] input, div[data-testid="stTextArea"] textarea {{ font-size: 1.4rem !important; }}
/* the values of number inputs (the seed) and of the page's select boxes ("Look from", a head): as large as
   their labels; the sidebar's model box keeps its size, or "Bundled default (offline)" would be cut */
[data-testid="stMain"] div[data-testid="stSelectbox"] input, [data-testid="stMain"] div[data-testid="stMultiSelect"] input,
div[data-testid="stNumberInput"] input {{ font-size: 1.25rem !important; }}
div[data-testid="stMetricValue"], div[data-testid="stMetricValue"] p {{ font-size: 2.8rem !important; line-height: 1.25; }}
div[data-testid="stMetricLabel"] p, div[data-testid="stMetricDelta"] p, div[data-testid="stMetricDelta"] {{
  font-size: 1.3rem !important; }}
div[data-testid="stCaptionContainer"], div[data-testid="stCaptionContainer"] p {{ font-size: 1.15rem; }}
div[data-testid="stCaptionContainer"] code, div[data-testid="stMarkdownContainer"] p code {{ font-size: 0.9em !important; }}
div[data-baseweb="select"] div, div[data-testid="stExpander"] summary p {{ font-size: 1.25rem; }}
/* a button's label or a metric wraps onto a second line rather than being cut ("Re-roll (new s…") */
div.stButton button *, div.stFormSubmitButton button *, div.stDownloadButton button *, div[data-testid="stMetric"] * {{
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; max-width: none !important; }}
div[class*="st-key-advanced_"] {{ display: none !important; }}
/* code (the Bug museum's, the Masking page's snippets): wrapped by st.code(wrap_lines=True), and large */
div[data-testid="stCode"] code, div[data-testid="stCode"] pre {{ font-size: 1.1rem !important; }}
/* tables (ui.table draws them as HTML in presenter view: a dataframe is a canvas CSS cannot enlarge) */
div[data-testid="stTable"] table, div[data-testid="stTable"] th, div[data-testid="stTable"] td {{
  font-size: {PRESENTER_TABLE_PX}px !important; line-height: 1.35; }}
</style>
"""


def room_styles() -> None:
    """The presenter view's stylesheet on this page (a constant: no learner text goes into it)."""
    st.markdown(PRESENTER_CSS, unsafe_allow_html=True)


def chart_height(default: int = 450) -> int:
    """A chart's height: ``default``, or at least 600 px in presenter view. Use as ``fig.update_layout(height=...)``."""
    if st.session_state.get(KEYS.presenter):
        return max(int(default), PRESENTER_CHART_HEIGHT)
    return int(default)


def wrap_title(text: str, width: int = PRESENTER_TITLE_CHARS) -> str:
    """``text`` broken into lines of at most ``width`` visible characters (HTML tags and entities not counted).

    Plotly never wraps a title: at presenter size a long one runs off the chart's right edge.

    >>> wrap_title("Where position 16 looks: the token each head attends to most (click a cell)", 40)
    'Where position 16 looks: the token each<br>head attends to most (click a cell)'
    >>> wrap_title("Short <b>title</b>")
    'Short <b>title</b>'
    """
    lines, line, used = [], [], 0
    for word in str(text).split(" "):
        visible = len(html.unescape(re.sub(r"<[^>]*>", "", word)))
        if line and used + 1 + visible > width:
            lines.append(" ".join(line))
            line, used = [], 0
        used += visible + (1 if line else 0)
        line.append(word)
    lines.append(" ".join(line))
    return "<br>".join(lines)


def room_figure(fig):
    """``fig`` with fonts a room can read in presenter view (every tick, label and title) and at least
    ``PRESENTER_CHART_HEIGHT`` tall, else as it is.

    ``st.plotly_chart(ui.room_figure(fig), ...)``: the figure builders stay free of UI settings. A long
    title is wrapped, each of its lines on its own (with room above the plot for them), instead of running off
    the chart.
    """
    if st.session_state.get(KEYS.presenter):
        size = PRESENTER_CHART_FONT_PX
        title = fig.layout.title.text
        wrapped = "<br>".join(wrap_title(line) for line in str(title).split("<br>")) if title else title
        if title and wrapped != title:  # each line of a long title wrapped (a figure's own <br> lines too)
            top = fig.layout.margin.t if fig.layout.margin.t is not None else 80
            added = wrapped.count("<br>") - str(title).count("<br>")
            fig.update_layout(title=dict(text=wrapped, yref="container", y=1, yanchor="top",
                                         pad=dict(t=PRESENTER_CHART_TITLE_PX + 14)),  # the first line's height
                              margin=dict(t=top + added * (PRESENTER_CHART_TITLE_PX + 8) + 12))
        # the workshop guide promises charts at least 600 px tall in presenter view: the Loss page's were 320-380
        fig.update_layout(height=max(int(fig.layout.height or 450), PRESENTER_CHART_HEIGHT))
        fig.update_layout(font=dict(size=size), title=dict(font=dict(size=PRESENTER_CHART_TITLE_PX)),
                          legend=dict(font=dict(size=size)), hoverlabel=dict(font=dict(size=size)))
        fig.update_xaxes(automargin=True, title_font=dict(size=size), tickfont=dict(size=size))
        fig.update_yaxes(automargin=True, title_font=dict(size=size), tickfont=dict(size=size))
    return fig


def chart(fig, key: str, *, name: str | None = None, height: int | None = None, toolbar: bool = True,
          room: bool = True, **kwargs):
    """Every page's chart: ``st.plotly_chart`` with the camera button's PNG named ``name`` (else ``key``) and,
    in presenter view, text a room can read.

    ``room_figure`` sets every tick, axis title, legend and title; subplot titles are annotations and
    heatmap cells carry their own text size, so those are enlarged here. ``height``: the chart's height
    (``chart_height``: at least 600 px in presenter view). ``toolbar=False`` hides Plotly's toolbar (a
    picture with nothing to zoom). ``room=False`` leaves a picture drawn to its own scale as it is in presenter
    view (Home's flow: its labels and tokens are annotations placed for their size, and would overflow their boxes
    and the left edge at the room's). ``kwargs`` go to ``st.plotly_chart`` (``on_select``, ``selection_mode``).
    Returns what ``st.plotly_chart`` returns (the selection, with ``on_select``).
    """
    if height is not None:
        fig.update_layout(height=chart_height(height) if room else height)
    if room and st.session_state.get(KEYS.presenter):
        fig.update_annotations(font_size=PRESENTER_CHART_FONT_PX)
        fig.update_traces(textfont_size=PRESENTER_CHART_FONT_PX, selector=dict(type="heatmap"))
        fig = room_figure(fig)
    config = plotly_config(name or key) if toolbar else {"displayModeBar": False}
    return st.plotly_chart(fig, key=key, config=config, **kwargs)


def metric_row(metrics) -> None:
    """A view-model's numbers as one row of ``st.metric``, a column each: ``(label, value, help)`` triples, or dicts
    of ``st.metric``'s keywords (a delta, its colour)."""
    metrics = list(metrics)
    for column, metric in zip(st.columns(len(metrics)), metrics):
        if isinstance(metric, dict):
            column.metric(**metric)
        else:
            label, value, help = metric
            column.metric(label, value, help=help)


def plotly_config(filename: str) -> dict:
    """``st.plotly_chart(fig, config=ui.plotly_config("masking_counts"))``: the camera button saves a PNG.

    The PNG is made by Plotly in the browser (no server-side image export), at twice the screen
    resolution so it stays sharp on a slide.
    """
    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": safe_name(filename, "chart"), "scale": 2},
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    }


def table(data, *, key: str | None = None, column_config: dict | None = None, percent: tuple[str, ...] = (),
          static: bool = False, turn: str | None = None, decimals: int | None = None,
          height: int | str = "auto") -> None:
    """A table a learner reads: sortable ``st.dataframe`` normally; a static ``st.table`` in presenter view or with ``static``.

    ``st.dataframe`` draws on a canvas: its font stays small whatever the presenter CSS says, and a
    column narrower than its values cuts them ("garden 0.4…"). ``st.table`` is HTML: its cells wrap,
    so every value shows in full, and the presenter CSS makes it large. ``percent``: columns shown as
    percentages there (what ``column_config``'s ``format="percent"`` does in the dataframe). ``turn``: a table
    too wide for a room-sized font is turned in presenter view, one column per value of that column (a variant)
    and one row per measure, after its cells became text (a turned column mixes numbers and words). ``decimals``:
    every float column with that many decimals, in both views ("83.0" beside "83.3", not "83"). ``height``:
    ``st.dataframe``'s ("content": every row, no scrolling inside the table).
    """
    presenter = st.session_state.get(KEYS.presenter)
    if static or presenter:
        frame = readable_frame(data, percent, decimals)
        if presenter and turn in frame:
            frame = frame.set_index(turn).T.reset_index(names="")
        st.table(frame, hide_index=True)
        return
    if decimals is not None:
        floats = [c for c, kind in pd.DataFrame(data).dtypes.items() if kind.kind == "f" and c not in percent]
        column_config = {**{c: st.column_config.NumberColumn(format=f"%.{decimals}f") for c in floats},
                         **(column_config or {})}
    st.dataframe(data, hide_index=True, width="stretch", height=height, key=key, column_config=column_config)


def readable_frame(data, percent: tuple[str, ...] = (), decimals: int | None = None) -> pd.DataFrame:
    """``data`` as a frame of text for a static table: floats to 4 significant digits (or ``decimals`` places),
    ``percent`` columns as "45%", a missing value (None, NaN) as "—" (what a dataframe leaves blank).

    >>> readable_frame([{"loss": 3.3185198307037354, "top-1": 0.4512, "n": 30522}], percent=("top-1",)).iloc[0].tolist()
    ['3.319', '45.1%', '30,522']
    >>> readable_frame([{"loss": 2.5, "top-1": 0.25}, {"loss": None, "top-1": None}], percent=("top-1",))["loss"].tolist()
    ['2.5', '—']
    >>> readable_frame([{"acc": 83.0, "n": 30}, {"acc": 83.25, "n": 60}], decimals=1)["acc"].tolist()
    ['83.0', '83.2']
    """
    frame = pd.DataFrame(data).reset_index(drop=True)
    for column in frame.columns:
        missing = frame[column].isna().tolist()
        if column in percent:
            texts = [v if not isinstance(v, (int, float)) else f"{100 * v:.3g}%" for v in frame[column]]
        elif frame[column].dtype.kind == "f" and decimals is not None:
            texts = [f"{v:.{decimals}f}" for v in frame[column]]
        elif frame[column].dtype.kind in "fiu":
            texts = [readable(v.item() if hasattr(v, "item") else v) for v in frame[column]]
        else:
            texts = list(frame[column])
        frame[column] = ["—" if gone else text for gone, text in zip(missing, texts)]
    return frame


def room_large(name: str):
    """A container whose text is large in presenter view: ``with ui.room_large("masking_draw"): st.markdown(...)``."""
    return st.container(key=f"room_large_{name}")


def advanced(name: str):
    """A container for advanced controls, hidden in presenter view: ``with ui.advanced("masking_rates"): ...``."""
    return st.container(key=f"advanced_{name}")

