"""ui.on_demand: a button's result is kept with the inputs it was computed for; changed inputs get a
note, an explainable failure shows its message and keeps the last result."""

from streamlit.testing.v1 import AppTest


def app():
    import streamlit as st

    import ui
    from mlm_core.errors import InputError

    inputs = st.session_state.get("inputs", 1)

    def compute():
        if inputs < 0:
            raise InputError("negative inputs")
        return inputs * 10

    result = ui.on_demand("Measure", "demo", "measuring…", inputs, compute)
    st.write(f"result={result}")


def _texts(at):
    return [m.value for m in at.markdown] + [c.value for c in at.caption]


def test_result_is_kept_with_its_inputs_and_a_change_is_noted():
    at = AppTest.from_function(app, default_timeout=60).run()
    assert "result=None" in _texts(at)
    at.button(key="demo_run").click().run()
    assert "result=10" in _texts(at) and not at.caption
    at.session_state["inputs"] = 2
    at.run()
    assert "result=10" in _texts(at)  # still the measured one ...
    assert any("changed since this was measured" in c.value for c in at.caption)  # ... and said to be stale
    at.button(key="demo_run").click().run()
    assert "result=20" in _texts(at) and not at.caption


def test_a_failure_is_shown_and_the_last_result_stays():
    at = AppTest.from_function(app, default_timeout=60).run()
    at.button(key="demo_run").click().run()
    at.session_state["inputs"] = -1
    at.button(key="demo_run").click().run()
    assert [e.value for e in at.error] == ["negative inputs"]
    assert "result=10" in _texts(at) and not at.exception
