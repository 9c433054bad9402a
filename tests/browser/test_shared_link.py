"""Real browser: one shared link opens the same state on every page of the guide (draft for tests/browser/)."""

import re
from urllib.parse import parse_qs, urlencode, urlparse

from playwright.sync_api import expect

from tests.browser.conftest import SLOW, chips, go_to, open_link, student, wait_idle

LINK = {"sentence": "Paris is the capital of France, and Berlin is the capital of Germany.", "seed": "7",
        "strategy": "whole_word", "p": "0.3", "mask": "0.5", "random": "0.25", "step": "5"}
CORE = {k: v for k, v in LINK.items() if k != "step"}
BIG_CHIPS = ("() => { const c = Array.from(document.querySelectorAll('.mlm-chip')).find(e => !e.closest('.mlm-legend'));"
             " return c && parseFloat(getComputedStyle(c).fontSize) >= 28; }")  # tokens (the colour key is smaller)
TITLES = {"Masking": "Masking", "Predictions": "Predictions", "Quiz": "Quiz", "Home": "MLM Lab"}


def url_params(pg) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(pg.url).query, keep_blank_values=True).items()}


def go_to_page(pg, title: str) -> None:
    go_to(pg, title, heading=TITLES[title], settle_ms=300)  # the URL update arrives with the run's last messages


def share_box(pg) -> str:
    sidebar = pg.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Share this view").click()
    return sidebar.locator('[data-testid="stCode"] code').inner_text().strip()


def test_one_link_walks_the_pages(page, server):
    open_link(page, server, "masking?" + urlencode(LINK))
    expect(page.locator('[data-testid="stTextArea"] textarea').first).to_have_value(LINK["sentence"], timeout=SLOW)
    assert page.locator('[data-testid="stSidebar"] [data-testid="stNumberInput"] input').input_value() == "7"
    assert page.get_by_text(re.compile(r"Token 5 of \d+")).count() == 1
    assert page.get_by_text("strategy: whole word").count() >= 1
    first = chips(page, 1)  # [0] is the legend
    assert "paris" in " ".join(first)
    assert url_params(page).items() >= LINK.items()
    link = share_box(page)
    assert link.startswith(f"{server.url}/masking?") and "seed=7" in link and "strategy=whole_word" in link

    for title in ("Predictions", "Quiz", "Home"):
        go_to_page(page, title)
        if title == "Quiz":  # the quiz keeps the sentence out of its address: it would give answers away
            assert "sentence" not in url_params(page)
            assert url_params(page).items() >= {k: v for k, v in CORE.items() if k != "sentence"}.items()
            assert page.get_by_text(re.compile(r"seed 7")).count() >= 1
            continue
        assert url_params(page).items() >= CORE.items(), title
        if title == "Predictions":
            page.get_by_text("Take it from the Masking page").click()
            wait_idle(page)
            assert page.get_by_text("seed 7").count() >= 1

    go_to_page(page, "Masking")  # back again: the link's rule and sentence are still there
    assert page.get_by_text("strategy: whole word").count() >= 1
    assert chips(page, 1)[:3] == first[:3]


def test_two_students_see_the_same_masks_and_question(browser, server):
    seen = []
    for _ in range(2):
        with student(browser) as pg:
            open_link(pg, server, "masking?" + urlencode(CORE))
            masks = chips(pg, 1)
            go_to_page(pg, "Quiz")
            question = pg.get_by_text(re.compile(r"question id")).inner_text()
            seen.append((masks, question))
    assert seen[0] == seen[1]


def test_a_tampered_link_falls_back_with_a_notice(page, server):
    open_link(page, server, "quiz?seed=-1&p=NaN&strategy=%3Cscript%3E&model=/etc/passwd&quiz=exam")
    assert page.get_by_text("This link had values MLM Lab cannot use").count() == 1
    assert page.locator('[data-testid="stSidebar"] [data-testid="stNumberInput"] input').input_value() == "0"
    assert not set(url_params(page)) & {"seed", "p", "strategy", "model", "quiz"}


def test_presenter_view(page, server):
    open_link(page, server, "quiz")
    page.locator('[data-testid="stSidebar"]').get_by_text("Presenter view").click()
    page.wait_for_function(BIG_CHIPS, timeout=SLOW)  # tokens of at least 28 px
    wait_idle(page)
    assert not page.locator('[class*="st-key-advanced_quiz_settings"]').is_visible()
    page.get_by_role("button", name=re.compile("Reveal the answers")).click()
    page.wait_for_selector('.js-plotly-plot, [data-testid="stException"]', timeout=SLOW)
    wait_idle(page)
    assert page.locator('[data-testid="stException"]').count() == 0
    height = page.evaluate("() => document.querySelector('.js-plotly-plot').getBoundingClientRect().height")
    assert height >= 600
    button = page.get_by_role("button", name=re.compile("Next question")).bounding_box()
    assert button["height"] >= 48
    page.locator(".js-plotly-plot").first.hover()
    assert page.locator(".js-plotly-plot .modebar-btn[data-title*='png' i]").count() >= 1  # the camera button
    go_to_page(page, "Masking")  # presenter view stays on across pages
    page.wait_for_function(BIG_CHIPS, timeout=SLOW)
