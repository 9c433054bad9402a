"""How a page says that something failed: our own errors in their words, anything else briefly."""

from __future__ import annotations

import streamlit as st

from mlm_core import language
from mlm_core.errors import MLMLabError


def show_error(exc: BaseException) -> None:
    """A clear message for a problem we can explain, a short generic one for anything else."""
    if isinstance(exc, MLMLabError):
        st.error(str(exc))
    else:
        st.error(f"Something went wrong: {type(exc).__name__}: {exc}")


def language_note(text: str, model_name: str | None, model) -> None:
    """A note when ``text`` does not look English and the model learned English only (``mlm_core.language``)."""
    label = (getattr(model, "mlmlab_info", None) or {}).get("label")
    note = language.language_note(text, model_name, label)
    if note:
        st.info(note, icon="🌐")
