"""AppTest of the Efficiency page with the tiny random model: renders, sliders, both measurements."""

import pytest


@pytest.fixture
def page(run_page):
    return run_page("pages/efficiency.py")


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
    assert any("Training runs in" in i.value for i in at.info)  # which precision, and why
    at.button(key="eff_paths_run").click().run()
    assert not at.exception and not at.error
    measured_for, rows = at.session_state["eff_paths"]
    assert [r["path"] for r in rows] == ["loop", "vectorised", "gathered"]
    assert len(at.get("plotly_chart")) == 2
    at.button(key="eff_sweep_run").click().run()
    assert not at.exception and not at.error
    sweep = at.session_state["eff_sweep"][1]
    assert len(sweep) == 6 and {r["vocab"] for r in sweep} == {1_000, 30_522}
    assert len(at.get("plotly_chart")) == 3
    at.button(key="eff_steps_run").click().run()
    assert not at.exception and not at.error
    rows = at.session_state["eff_steps"][1]
    assert len(rows) == 5 and all(r["mfu"] > 0 for r in rows)
    # Issue 25 §3.1: the number is matmul-alone time / step time, a share of the step, not a speed the matmuls
    # reach ("ran its matrix multiplies at N% of the speed they reach alone" before)
    said = next(c.value for c in at.caption if "memory and time trade" in c.value)
    assert f"timed alone, take {rows[0]['mfu']:.0%} of its time" in said and "speed they reach" not in said
    assert not any("share of matmul speed" in c.value for c in at.caption)
    assert len(at.get("plotly_chart")) == 4
    at.button(key="eff_profile_run").click().run()
    assert not at.exception and not at.error
    assert set(at.session_state["eff_profile"][1]) == {"fp32", "bf16"}
    assert len(at.get("plotly_chart")) == 5


def test_a_second_session_measuring_at_once_waits_for_its_turn(page, monkeypatch):
    """Two students pressing Measure at the same moment: the second waits in line, is told how many are ahead,
    and measures once the first is done (issue 29 item 3: it used to be told "busy" after 2 s)."""
    import threading

    import ui.controls
    from mlm_core.measure import measurement_turn

    at = page
    at.select_slider(key="eff_batch").set_value(1)
    at.select_slider(key="eff_seq").set_value(16)
    at.select_slider(key="eff_repeats").set_value(1)
    inside, release = threading.Event(), threading.Event()
    shown = []
    real_empty = ui.controls.st.empty

    class Notice:  # the page's "waiting for your turn" box, recorded (AppTest keeps only the final page)
        def __init__(self):
            self.box = real_empty()

        def info(self, text, **kwargs):
            shown.append(text)
            release.set()  # the other session finishes once this one has been told to wait
            return self.box.info(text, **kwargs)

        def empty(self):
            return self.box.empty()

    monkeypatch.setattr(ui.controls.st, "empty", Notice)

    def other_session():
        with measurement_turn("ip:10.0.0.99"):
            inside.set()
            release.wait(60)

    holder = threading.Thread(target=other_session)
    holder.start()
    try:
        assert inside.wait(10)
        at.button(key="eff_paths_run").click().run()
    finally:
        release.set()
        holder.join()
    assert not at.exception and not at.error
    assert shown and "1 heavy computation ahead of you" in shown[0]
    assert [r["path"] for r in at.session_state["eff_paths"][1]] == ["loop", "vectorised", "gathered"]
