"""Real browser: predict, train and stop; two sessions training at once; a run follows its session
to other pages (with its status in the sidebar) and is reclaimed only once the session is gone.

The server runs with MLMLAB_MAX_RUNS=2 and MLMLAB_ABANDON_S=20 (tests/browser/conftest.py).
"""

import re
import time

from playwright.sync_api import expect

from tests.browser.conftest import SLOW, open_page, wait_idle


def progress_text(pg) -> str:
    """The Training page's own progress bar (the sidebar has one too, on every page)."""
    bars = pg.locator('[data-testid="stMain"] [data-testid="stProgress"]')
    return bars.first.inner_text() if bars.count() else ""


def sidebar_status(pg) -> str:
    bars = pg.locator('[data-testid="stSidebar"] [data-testid="stProgress"]')
    return bars.first.inner_text() if bars.count() else ""


def sidebar_step(pg) -> int:
    m = re.search(r"step (\d+) of", sidebar_status(pg))
    return int(m.group(1)) if m else -1


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
    slider.press("End")  # 1,000 steps: long enough to be stopped by hand
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


def test_a_run_follows_its_session_to_other_pages(browser, server):
    """Issue 16 item 4: the teacher starts a run and shows other pages for longer than MLMLAB_ABANDON_S
    (20 s here); the run keeps training, its progress is in every page's sidebar, and the sidebar's
    link leads back to the Training page and the same run."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    pg.set_default_timeout(SLOW)
    try:
        start_long_run(pg, server)
        pg.locator('[data-testid="stSidebarNav"]').get_by_text("Predictions").click()
        expect(pg.get_by_text("What the model sees")).to_be_visible(timeout=SLOW)
        wait_for(lambda: "running" in sidebar_status(pg), what="the run's status in the sidebar")
        first = sidebar_step(pg)
        time.sleep(30)  # longer than MLMLAB_ABANDON_S on a page that never asks for the run's curves
        pg.locator('[data-testid="stSidebarNav"]').get_by_text("Loss").click()
        wait_idle(pg)
        wait_for(lambda: sidebar_step(pg) > first and "running" in sidebar_status(pg), timeout=60,
                 what="the run to keep training while its session is on other pages")
        pg.locator('[data-testid="stSidebar"]').get_by_text("Open the Training page").click()
        wait_for(lambda: "Running" in progress_text(pg), what="the Training page to show the same run")
        assert step_of(pg) >= first
        pg.get_by_role("button", name="■ Stop run").click()
        wait_for(lambda: "Stopped" in progress_text(pg), what="the run to stop")
    finally:
        ctx.close()
