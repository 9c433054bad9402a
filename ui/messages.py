"""How a page says that something failed: our own errors in their words, anything else briefly.

A message may hold what a learner typed or a link carried (a model name, a file name, a value), so it
is shown as text: its markdown punctuation is escaped (``ui.chips.markdown_text``).
"""

from __future__ import annotations

import streamlit as st

from mlm_core import language
from mlm_core.errors import MLMLabError
from ui.chips import markdown_text


def show_error(exc: BaseException, kind: str = "error") -> None:
    """A clear message for a problem we can explain, a short generic one for anything else, shown as text.

    ``kind``: ``"error"``, ``"warning"`` or ``"info"`` (the box it is shown in).
    """
    box = {"error": st.error, "warning": st.warning, "info": st.info}[kind]
    if isinstance(exc, MLMLabError):
        box(markdown_text(str(exc)))
    else:
        box(markdown_text(f"Something went wrong: {type(exc).__name__}: {exc}"))


def language_note(text: str, model_name: str | None, model) -> None:
    """A note when ``text`` does not look English and the model learned English only (``mlm_core.language``)."""
    label = (getattr(model, "mlmlab_info", None) or {}).get("label")
    note = language.language_note(text, model_name, label)
    if note:
        st.info(note, icon="🌐")
