"""Real browser: predict, train and stop; two sessions training at once; no orphaned run after a reload.

The server runs with MLMLAB_MAX_RUNS=2 and MLMLAB_ABANDON_S=20 (tests/browser/conftest.py).
"""

import re
import time

from playwright.sync_api import expect

from tests.browser.conftest import open_page, wait_idle

SLOW = 120_000


def progress_text(pg) -> str:
    bars = pg.locator('[data-testid="stProgress"]')
    return bars.first.inner_text() if bars.count() else ""


def step_of(pg) -> int:
    m = re.search(r"step (\d+) of", progress_text(pg))
    return int(m.group(1)) if m else -1


def wait_for(predicate, timeout=120, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def start_long_run(pg, server):
    open_page(pg, server, "training")
    slider = pg.locator('[data-testid="stSlider"]').filter(has_text="Steps").locator('input[type="range"]')
    slider.focus()
    slider.press("End")  # 500 steps: long enough to be stopped by hand
    wait_idle(pg)
    pg.get_by_role("button", name="▶ Start training").click()
    wait_for(lambda: step_of(pg) >= 1, what="the first training steps")


def test_predict_in_the_browser(page, server):
    open_page(page, server, "predictions")
    expect(page.get_by_text("What the model sees")).to_be_visible(timeout=SLOW)
    expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=SLOW)
    assert page.locator('[data-testid="stException"]').count() == 0


def test_two_sessions_train_at_once_and_stop_independently(browser, server):
    a_ctx, b_ctx = browser.new_context(), browser.new_context()
    a, b = a_ctx.new_page(), b_ctx.new_page()
    for pg in (a, b):
        pg.set_default_timeout(SLOW)
    try:
        start_long_run(a, server)
        start_long_run(b, server)
        assert "Running" in progress_text(a) and "Running" in progress_text(b)
        expect(b.get_by_text(re.compile(r"2 of 2 training slot"))).to_be_visible(timeout=SLOW)

        a.get_by_role("button", name="■ Stop run").click()
        wait_for(lambda: "Stopped" in progress_text(a), what="session A to stop")
        a_step = step_of(a)
        b_step = step_of(b)
        wait_for(lambda: step_of(b) > b_step + 2, what="session B to keep training")
        assert "Running" in progress_text(b)
        time.sleep(3)
        assert step_of(a) == a_step, "A's curve is its own: it stays where A stopped"

        # Reload B: its run loses its page. It is stopped by the watchdog (20 s here) and its slot freed.
        b.reload()
        wait_idle(b)
        expect(b.get_by_text("Set up a run above")).to_be_visible(timeout=SLOW)

        def slots_free():
            b.reload()
            wait_idle(b)
            return b.get_by_text(re.compile(r"0 of 2 training slot")).count() > 0

        wait_for(slots_free, timeout=120, what="the orphaned run to be reclaimed")
    finally:
        a_ctx.close()
        b_ctx.close()
