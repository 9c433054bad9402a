"""Real browser: what a workshop rehearsal at a projector's 1280x720 tripped over.

- presenter view: the sidebar's seed, the page's select boxes, and the Inside-the-model and Bug-museum
  charts are as large as the rest of the room's text; no select box cuts its value and no chart title
  runs off its chart;
- two typed blanks on the Predictions page: the second facet's title never covers the first's ticks;
- the Masking page counts whole tokens while stepping (no 0.2, 0.4 … tick labels).
"""

import re

from tests.browser.conftest import ROOM_CHECK, go_to, open_page, presenter_view, student, type_sentence, wait_idle

INPUT_VALUES = """() => {
  const px = sel => Array.from(document.querySelectorAll(sel)).map(e => parseFloat(getComputedStyle(e).fontSize));
  const cut = Array.from(document.querySelectorAll('[data-testid="stSelectbox"] input'))
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.value);
  return {seed: px('[data-testid="stSidebar"] [data-testid="stNumberInput"] input'),
          selects: px('[data-testid="stMain"] [data-testid="stSelectbox"] input'), cut: cut};
}"""

OVERLAPS = """() => {
  const plot = document.querySelector('.js-plotly-plot');
  const boxes = sel => Array.from(plot.querySelectorAll(sel)).map(e => e.getBoundingClientRect())
    .filter(r => r.width > 0 && r.height > 0);
  const titles = boxes('.annotation-text'), ticks = boxes('.xtick text');
  const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  return {titles: titles.length, ticks: ticks.length, overlaps: titles.filter(t => ticks.some(k => hit(t, k))).length};
}"""

X_TICKS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(p => p.textContent.includes('Decisions'))
  .flatMap(p => Array.from(p.querySelectorAll('.xtick text')).map(t => t.textContent))"""


def assert_room_sized(room: dict, page_name: str) -> None:
    assert room["ticks"] and min(room["ticks"]) >= 18, (page_name, sorted(room["ticks"])[:5])
    assert room["titles"] and min(t["font"] for t in room["titles"]) >= 24, (page_name, room["titles"])
    assert not [t for t in room["titles"] if t["cut"]], (page_name, room["titles"])


def test_presenter_view_sidebar_inside_and_museum(browser, server):
    with student(browser, 1280, 720) as page:
        open_page(page, server, "inside")
        presenter_view(page)
        page.wait_for_timeout(500)
        inputs = page.evaluate(INPUT_VALUES)
        assert inputs["seed"] and min(inputs["seed"]) >= 18, inputs  # the seed, as large as its label
        assert inputs["selects"] and min(inputs["selects"]) >= 18, inputs  # "Look from", the layer, the head
        assert not inputs["cut"], inputs  # no select box cuts its value ("Bundled default (offlin")
        assert_room_sized(page.evaluate(ROOM_CHECK), "Inside the model")
        go_to(page, "Bug museum")
        assert_room_sized(page.evaluate(ROOM_CHECK), "Bug museum")


def test_two_blank_facets_leave_the_ticks_readable(page, server):
    open_page(page, server, "predictions")
    type_sentence(page, "The [MASK] sat on the [MASK] near the door.", re.compile(r"Your sentence has 2 typed blanks"))
    page.wait_for_timeout(500)
    found = page.evaluate(OVERLAPS)
    assert found["titles"] >= 2 and found["ticks"] >= 6, found
    assert found["overlaps"] == 0, found


def test_stepping_counts_whole_tokens(page, server):
    open_page(page, server, "masking?seed=3&step=0")
    page.get_by_role("button", name=re.compile("Next token")).click()
    wait_idle(page)
    page.wait_for_timeout(500)
    ticks = page.evaluate(X_TICKS)
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks
