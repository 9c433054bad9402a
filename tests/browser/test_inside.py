"""Inside the model in a real browser: clicking a cell of the layers × heads grid enlarges that head,
and no view shows an exception box."""

import re
import time

from tests.browser.conftest import open_page, wait_idle


def _enlarged_title(page) -> str:
    titles = [t for t in page.locator("text.gtitle").all_text_contents() if t and t.startswith("Layer ")]
    return titles[0] if titles else ""


def test_click_a_head_then_every_view(page, server):
    open_page(page, server, "inside")
    assert _enlarged_title(page).startswith("Layer 1, head 1:")
    grid = page.locator('[data-testid="stPlotlyChart"]').first
    grid.scroll_into_view_if_needed()
    plot = grid.locator(".nsewdrag").first.bounding_box()  # the tiny model: 2 layers × 2 heads
    page.mouse.click(plot["x"] + plot["width"] * 0.75, plot["y"] + plot["height"] * 0.75)  # layer 2, head 2
    deadline = time.time() + 60
    while time.time() < deadline and not _enlarged_title(page).startswith("Layer 2, head 2:"):
        time.sleep(0.2)
    wait_idle(page)
    assert _enlarged_title(page).startswith("Layer 2, head 2:")
    assert page.locator('[data-testid="stException"]').count() == 0
    views = page.locator('[data-testid="stButtonGroup"]')
    for name in ("How the guess forms", "What the guess depends on", "What training changed", "Where [MASK] looks"):
        views.get_by_text(name).click()
        wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0, name
    assert page.get_by_text(re.compile("Layer 2, head 2")).count() >= 1  # the chosen head was kept
