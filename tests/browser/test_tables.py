"""Real browser: tables a room can read (rehearsal leftovers of issues 14 and 17).

- Predictions, "Several masks": the step tables show every value in full, at 1400x900 and in presenter
  view at 1280x720 (in a third of the page, st.dataframe's canvas cut columns and values);
- presenter view: tables are drawn as HTML at room size (a dataframe's canvas ignores the CSS).
"""

import re

from playwright.sync_api import expect

from tests.browser.conftest import SLOW, go_to, open_page, presenter_view, student, type_sentence, wait_idle

# Every static table: its font size, and whether it or any cell is wider than the space it has.
TABLES = """() => Array.from(document.querySelectorAll('[data-testid="stMain"] [data-testid="stTable"]')).map(t => {
  const table = t.querySelector('table');
  const cells = Array.from(t.querySelectorAll('td, th'));
  return {font: Math.min(...cells.map(c => parseFloat(getComputedStyle(c).fontSize))),
          wider: table.getBoundingClientRect().width > t.getBoundingClientRect().width + 1
                 || t.scrollWidth > t.clientWidth + 1,
          cutCells: cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent)};
})"""
DATAFRAMES = """() => document.querySelectorAll('[data-testid="stMain"] [data-testid="stDataFrame"]').length"""


def several_masks(pg) -> None:
    """Two typed blanks: the page shows the "Several masks" lesson in its side-by-side view."""
    type_sentence(pg, "The [MASK] sat on the [MASK] near the door of the old [MASK] house.",
                  re.compile(r"Your sentence has 3 typed blanks"))
    expect(pg.get_by_role("heading", name=re.compile("Several masks")).first).to_be_visible(timeout=SLOW)
    pg.wait_for_timeout(500)


def assert_full_tables(tables: list[dict], at_least: int, min_font: float = 0) -> None:
    assert len(tables) >= at_least, tables
    assert not [t for t in tables if t["wider"] or t["cutCells"]], tables
    assert min(t["font"] for t in tables) >= min_font, tables


def test_several_masks_tables_show_full_values(page, server):
    page.set_viewport_size({"width": 1400, "height": 900})
    open_page(page, server, "predictions")
    several_masks(page)
    assert_full_tables(page.evaluate(TABLES), 3)  # independent, easy-first, Mask-Predict


def test_presenter_tables_are_large_and_whole(browser, server):
    with student(browser, 1280, 720) as page:
        open_page(page, server, "predictions")
        presenter_view(page)
        several_masks(page)
        assert_full_tables(page.evaluate(TABLES), 3, min_font=20)
        assert page.evaluate(DATAFRAMES) == 0  # every table on the page is drawn at room size
        go_to(page, "Loss", settle_ms=0)
        assert_full_tables(page.evaluate(TABLES), 1, min_font=20)  # the per-token table
        assert page.evaluate(DATAFRAMES) == 0


def test_tokenizer_cost_table_is_whole_at_1400(page, server):
    """Second rehearsal: at 1400x900 in normal view the cost table's dataframe cut "logits M…" at the right edge."""
    page.set_viewport_size({"width": 1400, "height": 900})
    open_page(page, server, "tokenizer")
    expect(page.locator("h1").first).to_contain_text("Tokenizer", timeout=SLOW)
    expect(page.get_by_text("head GFLOPs (masked only)").first).to_be_visible(timeout=SLOW)
    wait_idle(page)
    tables = [t for t in page.evaluate(TABLES_WITH_HEADERS) if "logits MiB (every position)" in t["headers"]]
    assert_full_tables(tables, 1)


def test_quiz_answers_are_whole_at_1400(page, server):
    """Second rehearsal: at 1400x900 the Quiz answers' dataframe cut "answer: p…" at the right edge."""
    page.set_viewport_size({"width": 1400, "height": 900})
    open_page(page, server, "quiz")
    page.get_by_role("button", name=re.compile("Reveal the answers")).click()
    expect(page.get_by_text("answer: p", exact=True).first).to_be_visible(timeout=SLOW)
    wait_idle(page)
    tables = [t for t in page.evaluate(TABLES_WITH_HEADERS) if "answer: p" in t["headers"]]
    assert_full_tables(tables, 1)


TABLES_WITH_HEADERS = TABLES.replace("return {font:", "return {headers: Array.from(t.querySelectorAll('th')).map(c => c.textContent), font:")
