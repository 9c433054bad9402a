"""ui.chips: token and user text reaches the page's HTML only escaped, and markdown shows it as typed."""

import html

import pytest
from streamlit.testing.v1 import AppTest

import ui
import ui.chips
from mlm_core.figures import masking as figures

HOSTILE = "<img src=x onerror=alert(1)>"  # a token (or a learner's text) that would run script as HTML


def test_chip_html_escapes_token_text():
    out = ui.chip_html('<img src=x onerror="alert(1)">', "MASK", original="<script>x</script>", title='"><b>')
    assert "<img" not in out and "<script>" not in out and '"><b>' not in out
    assert "&lt;img" in out and "&lt;script&gt;" in out


def chips_app():
    import streamlit as st

    import ui

    token = st.session_state["token"]
    ui.token_chips(["[CLS]", token, "##" + token], ["SPECIAL", "MASK", "RANDOM"], originals=[None, token, None],
                   highlight=1, titles=[token, token, token])
    ui.value_chips([token, "cat"], [0.5, None], highlight=0, titles=[token, f'"{token}'])
    ui.decision_legend()


@pytest.mark.parametrize("token", [HOSTILE, "<script>alert(1)</script>", '" onmouseover="alert(1)'])
def test_every_chip_row_escapes_a_hostile_token(token):
    at = AppTest.from_function(chips_app, default_timeout=60)
    at.session_state["token"] = token
    at.run()
    assert not at.exception
    rows = [m.value for m in at.markdown if 'class="mlm-chips"' in m.value]
    assert len(rows) == 3  # token chips, value chips, legend
    for row in rows:
        assert "<img" not in row and "<script" not in row and 'onmouseover="' not in row, row
    assert html.escape(token) in rows[0] and html.escape(token) in rows[1]  # shown, as text


def test_markdown_helpers_show_text_as_typed():
    assert ui.markdown_text("v = 0.1 < 0.8 → [MASK] *x*") == r"v = 0\.1 \< 0\.8 → \[MASK\] \*x\*"
    assert ui.inline_code("<") == "`<`" and ui.inline_code("`") == "`` ` ``"
    assert ui.markdown_text(HOSTILE) == r"\<img src=x onerror=alert\(1\)\>"


def test_chips_and_figures_share_one_decision_style():
    """Review fix: one style table (mlm_core.figures.masking): a chip's border is the chart's colour, its word the legend's."""
    assert ui.chips.DECISION_STYLE is figures.DECISION_STYLE
    for name, (_, color, word) in figures.DECISION_STYLE.items():
        assert figures.COLORS[name] == color and figures.DECISION_WORDS[name] == word
        assert f"border:1px solid {color}" in ui.chips.chip_html("x", name)
