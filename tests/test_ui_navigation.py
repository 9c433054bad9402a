"""ui.navigation: a run that Streamlit's old-style multipage runner started is rerun through app.py.

The module relies on two Streamlit internals (checked against streamlit 1.67.0): these tests fail
loudly when an upgrade removes either, instead of the app silently showing pages without app.py.
"""

import pytest
import streamlit as st
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import script_runner

from ui import navigation


def test_the_streamlit_internals_it_relies_on_are_still_there():
    assert hasattr(PagesManager, "uses_pages_directory"), "streamlit no longer has PagesManager.uses_pages_directory"
    assert callable(getattr(script_runner, navigation.OLD_STYLE_RUNNER, None)), (
        f"streamlit no longer runs old-style pages through script_runner.{navigation.OLD_STYLE_RUNNER}")


class Rerun(Exception):
    pass


@pytest.fixture
def reruns(monkeypatch):
    """st.rerun raises Rerun (outside a script run it has nothing to rerun)."""
    monkeypatch.setattr(st, "rerun", lambda: (_ for _ in ()).throw(Rerun()))


def test_a_run_under_app_py_is_left_alone(monkeypatch, reruns):
    monkeypatch.setattr(PagesManager, "uses_pages_directory", False)
    navigation.ensure_app_navigation()


def test_the_old_style_mode_is_switched_off_and_the_run_repeated(monkeypatch, reruns):
    monkeypatch.setattr(PagesManager, "uses_pages_directory", True)
    with pytest.raises(Rerun):
        navigation.ensure_app_navigation()
    assert PagesManager.uses_pages_directory is False


def test_a_run_started_by_the_old_style_runner_reruns_through_app_py(monkeypatch, reruns):
    """Two students open /masking on a fresh server at once: the second run started in Streamlit's
    old-style runner after the first switched the global flag off; it must rerun too."""
    monkeypatch.setattr(PagesManager, "uses_pages_directory", False)  # the other session switched it off

    def _mpa_v1():  # the name of Streamlit's old-style runner
        navigation.ensure_app_navigation()

    assert _mpa_v1.__name__ == navigation.OLD_STYLE_RUNNER
    with pytest.raises(Rerun):
        _mpa_v1()
