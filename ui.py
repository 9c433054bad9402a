"""The one shared UI module: page set-up and sidebar, cached loaders, token chips, session-state keys.

Pages call ``settings = ui.page_setup("Title")`` first; everything else they need from the library
comes from ``mlm_core``. Lesson content lives in the pages, not here.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass

import streamlit as st

from mlm_core.errors import MLMLabError

DEFAULT_MODEL = "default"  # the widget value for the bundled offline model (model_name None)
DEFAULT_SEED = 0


class KEYS:
    """Names of the session-state entries several pages share (one place, no typos)."""

    model = "model_name"  # sidebar: "default", "tiny-random", a hub id or a local folder
    custom_model = "custom_model"  # sidebar: text of the "other model" box
    seed = "seed"  # sidebar: the seed every page uses
    presenter = "presenter"  # sidebar: large tokens and charts for a projector
    sentence = "sentence"  # the current sentence, shared by Masking, Predictions and Quiz
    masking = "masking"  # the Masking page's last result: dict(tokens, encoded, result, config, seed)


@dataclass(frozen=True)
class Settings:
    model_name: str | None  # None = the bundled default model
    seed: int
    presenter: bool


DECISION_STYLE = {
    # decision name: (background, border, label shown to learners)
    "NOT_SELECTED": ("#f1f3f5", "#ced4da", "not selected"),
    "MASK": ("#ffe3e3", "#e03131", "→ [MASK]"),
    "RANDOM": ("#fff3bf", "#f08c00", "→ random"),
    "UNCHANGED": ("#d3f9d8", "#2f9e44", "unchanged"),
    "SPECIAL": ("#e7f5ff", "#74c0fc", "special"),
}


def _model_options() -> list[tuple[str, str]]:
    """(value, label) pairs for the model picker, offline ones first."""
    try:
        from mlm_core.models import available_models

        return [(m["name"] or DEFAULT_MODEL, m["label"]) for m in available_models()]
    except Exception:  # models not importable yet: the two that always work offline
        return [(DEFAULT_MODEL, "Bundled default (offline)"), ("tiny-random", "Tiny random BERT (offline)")]


def page_setup(title: str) -> Settings:
    """Shared defaults, the sidebar and the page title; returns the settings every page uses."""
    state = st.session_state
    state.setdefault(KEYS.model, os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL))
    state.setdefault(KEYS.seed, DEFAULT_SEED)
    state.setdefault(KEYS.presenter, False)
    state.setdefault(KEYS.custom_model, "")
    settings = _sidebar()
    if settings.presenter:
        st.markdown(_PRESENTER_CSS, unsafe_allow_html=True)
    st.title(title)
    return settings


def _sidebar() -> Settings:
    state = st.session_state
    with st.sidebar:
        st.header("Shared settings")
        options = _model_options()
        values = [value for value, _ in options]
        labels = dict(options)
        current = state[KEYS.model]
        if current not in values:  # a hub id typed earlier, or one from a shared link
            values.append(current)
            labels[current] = current
        st.selectbox(
            "Model and tokenizer",
            values,
            format_func=lambda v: labels.get(v, v),
            key=KEYS.model,
            help="The bundled default and the tiny random BERT work offline. Hub models need internet "
            "the first time (then they are cached).",
        )
        custom = st.text_input(
            "Other Hugging Face id or local folder",
            key=KEYS.custom_model,
            placeholder="e.g. bert-base-uncased",
            help="Any masked-LM on the Hugging Face hub (BERT, DistilBERT, RoBERTa, ALBERT…) or a local folder.",
        )
        st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key=KEYS.seed,
                        help="Every random choice on every page comes from this seed.")
        st.toggle("Presenter view", key=KEYS.presenter, help="Large tokens and charts for a projector.")
    name = custom.strip() or state[KEYS.model]
    return Settings(
        model_name=None if name == DEFAULT_MODEL else name,
        seed=int(state[KEYS.seed]),
        presenter=bool(state[KEYS.presenter]),
    )


_PRESENTER_CSS = """
<style>
.mlm-chips .mlm-chip { font-size: 30px !important; padding: 8px 12px !important; }
.mlm-chips .mlm-sub { font-size: 18px !important; }
div[data-testid="stMarkdownContainer"] p { font-size: 1.25rem; }
div.stButton > button { font-size: 1.4rem; padding: 0.6rem 1.4rem; min-height: 3.2rem; }
</style>
"""


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def cached_model(model_name: str | None):
    """(model, tokenizer) for a name, loaded once per server; pages must never change the model."""
    from mlm_core.models import load_masked_lm

    return load_masked_lm(model_name)


@st.cache_resource(show_spinner="Loading the tokenizer…", max_entries=4)
def cached_tokenizer(model_name: str | None):
    """The tokenizer of a model; the offline ones without loading any weights."""
    if model_name in (None, DEFAULT_MODEL, "tiny-random"):
        from mlm_core.bundled import load_default_tokenizer

        return load_default_tokenizer()
    return cached_model(model_name)[1]


def show_error(exc: BaseException) -> None:
    """A clear message for a problem we can explain, a short generic one for anything else."""
    if isinstance(exc, MLMLabError):
        st.error(str(exc))
    else:
        st.error(f"Something went wrong: {type(exc).__name__}: {exc}")


def chip_html(token: str, decision: str = "NOT_SELECTED", original: str | None = None,
              highlight: bool = False, title: str | None = None) -> str:
    """One token as an escaped HTML chip; ``##`` pieces are drawn joined to the chip before them."""
    background, border, label = DECISION_STYLE.get(decision, DECISION_STYLE["NOT_SELECTED"])
    piece = token.startswith("##") and len(token) > 2
    text = token[2:] if piece else token
    margin = "margin-left:-3px;border-left:2px dotted #868e96;border-top-left-radius:0;border-bottom-left-radius:0;" if piece else "margin-left:6px;"
    outline = "box-shadow:0 0 0 3px #1c7ed6;" if highlight else ""
    sub = f'<div class="mlm-sub" style="font-size:11px;color:#495057">was: {html.escape(original)}</div>' if original else ""
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return (
        f'<span class="mlm-chip-wrap" style="display:inline-block;vertical-align:top;margin-bottom:6px;{margin}"{tip}>'
        f'<span class="mlm-chip" style="display:inline-block;padding:3px 7px;border-radius:6px;'
        f'font-family:monospace;font-size:15px;background:{background};border:1px solid {border};{outline}">'
        f'{"##" if piece else ""}{html.escape(text)}</span>{sub}</span>'
    )


def token_chips(tokens: list[str], decisions: list[str] | None = None, originals: list[str | None] | None = None,
                highlight: int | None = None, titles: list[str] | None = None) -> None:
    """Render tokens as chips coloured by decision (escaped: token text is never trusted as HTML)."""
    parts = []
    for i, token in enumerate(tokens):
        decision = decisions[i] if decisions else "NOT_SELECTED"
        original = originals[i] if originals else None
        parts.append(chip_html(token, decision, original, highlight == i, titles[i] if titles else None))
    st.markdown(f'<div class="mlm-chips" style="line-height:2.2">{"".join(parts)}</div>', unsafe_allow_html=True)


def decision_legend() -> None:
    """The colour key of the chips."""
    items = [chip_html(label, name) for name, (_, _, label) in DECISION_STYLE.items()]
    st.markdown(f'<div class="mlm-chips">{"".join(items)}</div>', unsafe_allow_html=True)
