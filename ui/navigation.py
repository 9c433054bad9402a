"""Every page runs through app.py's ``st.navigation``, also on a first deep link to a fresh server.

The one place that touches Streamlit internals (checked against streamlit 1.67.0, the version
requirements.txt pins; tests/test_ui_navigation.py fails loudly when either name below is gone):

- ``PagesManager.uses_pages_directory`` (streamlit/runtime/pages_manager.py): set once per server,
  True when a ``pages/`` folder sits beside the main script. While it is True, every run goes through
- ``script_runner._mpa_v1`` (streamlit/runtime/scriptrunner/script_runner.py), the old-style
  multipage runner: it runs the page file without app.py (wrong titles, layout and a sidebar that
  lists file names). ``st.navigation`` switches the flag off, but only once app.py has run.

There is no public switch for this mode. The public way out is a page folder with another name
(Streamlit only looks for ``pages/``): st.Page takes any path. Renaming ``pages/`` touches every
page test, the docs and the benchmarks, so it is left to one commit of its own; until then this
module keeps the work-around in one place.
"""

from __future__ import annotations

import traceback

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

OLD_STYLE_RUNNER = "_mpa_v1"  # the function name of Streamlit's old-style multipage runner


def ensure_app_navigation() -> None:
    """Rerun through app.py when this run came through Streamlit's old-style multipage runner.

    The flag is global: when two students open a deep link on a fresh server at once, the first
    switches it off while the second's run is already inside the old-style runner. That run must
    rerun too, or its sidebar lists the file names (found by benchmarks/classroom_load.py).
    """
    if PagesManager.uses_pages_directory or inside_old_style_runner():
        PagesManager.uses_pages_directory = False
        st.rerun()


def inside_old_style_runner() -> bool:
    """This script run was started by Streamlit's old-style multipage runner, not by app.py.

    >>> inside_old_style_runner()
    False
    """
    return any(frame.f_code.co_name == OLD_STYLE_RUNNER for frame, _ in traceback.walk_stack(None))
