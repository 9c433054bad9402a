"""AppTest of the Efficiency page with the tiny random model: renders, sliders, both measurements."""

import pytest


@pytest.fixture
def page(apptest, monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    at = apptest("pages/efficiency.py")
    at.session_state["model_name"] = "tiny-random"
    at.run()
    assert not at.exception
    return at


def test_page_renders_the_size_picture_and_follows_the_sliders(page):
    at = page
    assert any("Efficiency" in t.value for t in at.title)
    assert len(at.get("plotly_chart")) == 1  # the size picture; measurements wait for a button
    at.slider(key="eff_size_b").set_value(8).run()
    at.select_slider(key="eff_size_v").set_value(1_000).run()
    assert not at.exception
    # B × T × V = 8 × 128 × 1,000 and M = round(0.15 × 8 × 128) = 154 rows of 1,000 scores
    assert any("1,024,000" in c.value and "154,000" in c.value for c in at.caption)


def test_measurement_buttons_run_without_exception(page):
    at = page
    at.select_slider(key="eff_batch").set_value(1)
    at.select_slider(key="eff_seq").set_value(16)
    at.select_slider(key="eff_repeats").set_value(1)
    at.button(key="eff_paths_run").click().run()
    assert not at.exception and not at.error
    measured_for, rows = at.session_state["eff_paths"]
    assert [r["path"] for r in rows] == ["loop", "vectorised", "gathered"]
    assert len(at.get("plotly_chart")) == 2
    at.button(key="eff_steps_run").click().run()
    assert not at.exception and not at.error
    assert len(at.session_state["eff_steps"][1]) == 4
    assert len(at.get("plotly_chart")) == 3
