"""The Masking page in front of a class (issue 17: items 1, 3 and 6), in a real browser."""

import re

import pytest

from tests.browser.conftest import ROOM_CHECK, open_page, presenter_view, student, wait_idle

CHART_TITLE = """() => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle')).map(t => t.textContent)"""


def chart_titles(page) -> list[str]:
    return page.evaluate(CHART_TITLE)


def test_chart_counts_only_revealed_tokens(page, server):
    """Issue 17.1: while stepping, the chart counts what was revealed; the totals come with "Show all"."""
    open_page(page, server, "masking?seed=3")
    page.get_by_role("button", name=re.compile("Start over")).click()
    wait_idle(page)
    for _ in range(2):
        page.get_by_role("button", name=re.compile("Next token")).click()
        wait_idle(page)
    titles = chart_titles(page)
    assert any(re.fullmatch(r"Decisions revealed so far: 2 of \d+ tokens", t) for t in titles), titles
    page.get_by_role("button", name=re.compile("Show all")).click()
    wait_idle(page)
    assert "Decisions in this sentence" in chart_titles(page)


def test_reroll_keeps_show_all(page, server):
    """Issue 17.3: after "Show all", a re-roll keeps every decision visible (the guide re-rolls until a random
    and an unchanged token appear)."""
    open_page(page, server, "masking?seed=3")
    page.get_by_role("button", name=re.compile("Show all")).click()
    wait_idle(page)
    n_tokens = int(re.search(r"(\d+) tokens", page.get_by_text(re.compile(r"^Seed 3 ")).inner_text()).group(1))
    assert page.get_by_text(f"Token {n_tokens} of {n_tokens}").count() == 1
    page.get_by_role("button", name=re.compile("Re-roll")).click()
    wait_idle(page)
    assert page.get_by_text(re.compile(r"^Seed 4 ")).count() == 1
    assert page.get_by_text(f"Token {n_tokens} of {n_tokens}").count() == 1
    assert page.get_by_text("Press Next token").count() == 0


@pytest.mark.parametrize("strategy", ["token", "span"])
def test_presenter_view_is_readable_at_1280x720(browser, server, strategy):
    """Issue 17.6: at a projector's 1280x720, the key numbers, buttons, ticks and chart titles are large, and no
    button label, number or chart title is cut."""
    with student(browser, 1280, 720) as page:
        open_page(page, server, f"masking?seed=3&strategy={strategy}")
        presenter_view(page)
        page.get_by_role("button", name=re.compile("Mask the corpus")).click()
        wait_idle(page)
        page.wait_for_timeout(500)
        room = page.evaluate(ROOM_CHECK)
        assert len(room["metrics"]) >= 7 and min(room["metrics"]) >= 40, room["metrics"]
        assert not room["metricsCut"], room["metricsCut"]
        assert room["buttons"] and not [b for b in room["buttons"] if b["cut"]], room["buttons"]
        assert min(b["font"] for b in room["buttons"]) >= 20, room["buttons"]
        assert room["ticks"] and min(room["ticks"]) >= 18, room["ticks"]
        assert room["titles"] and min(t["font"] for t in room["titles"]) >= 24, room["titles"]
        assert not [t for t in room["titles"] if t["cut"]], room["titles"]
