"""Real browser: what a teacher relies on in a workshop (issue 17 items 7, 9 and 20).

- a typed [MASK] on the Predictions page is the blank the model fills;
- a student who opens a Predictions link sees the Masking page's masks without visiting it;
- the Quiz's masks for a seed are the Masking page's masks for that seed.
"""

import re
from urllib.parse import urlencode

from playwright.sync_api import expect

from tests.browser.conftest import SLOW, chips, open_page, student, type_sentence, wait_idle
LINK = {"sentence": "Paris is the capital of France, and Berlin is the capital of Germany.", "seed": "11",
        "p": "0.4", "strategy": "whole_word"}


def masking_chips(browser, server, link: dict) -> list[str]:
    """The tokens as the model sees them on the Masking page (all decisions shown), in a fresh session."""
    with student(browser) as pg:
        open_page(pg, server, "masking?" + urlencode(link))
        expect(pg.locator("h1").first).to_contain_text("Masking", timeout=SLOW)
        wait_idle(pg)
        return chips(pg, 1)  # [0] is the legend


def test_typed_mask_is_a_blank(page, server):
    """Item 7: "[MASK]" typed into the sentence is predicted; no other word is hidden."""
    open_page(page, server, "predictions")
    type_sentence(page, "The cat sat on the [MASK] near the door.", re.compile(r"Your sentence has 1 typed blank"))
    seen = chips(page, 0)  # "What the model sees"
    assert seen.count("[MASK]") == 1 and "cat" in seen and "door" in seen  # only the typed blank is hidden
    expect(page.locator(".js-plotly-plot").first).to_contain_text("your blank", timeout=SLOW)
    assert page.get_by_text("Click the tokens to hide from the model").count() == 0
    assert page.locator('[data-testid="stException"]').count() == 0


def test_predictions_link_rebuilds_the_masks(page, browser, server):
    """Item 9: a Predictions link carries sentence, seed and rule; the masks are rebuilt from it."""
    open_page(page, server, "predictions?" + urlencode(LINK))
    expect(page.locator("h1").first).to_contain_text("Predictions", timeout=SLOW)
    page.get_by_text("Take it from the Masking page").click()
    expect(page.get_by_text(re.compile(r"From the Masking page: the shared sentence, seed 11"))).to_be_visible(
        timeout=SLOW)
    wait_idle(page)
    assert page.get_by_text(re.compile("Nothing has been masked")).count() == 0
    seen = chips(page, 0)  # "What the model sees"
    assert seen == masking_chips(browser, server, LINK)
    assert "[MASK]" in seen


def test_quiz_masks_match_the_masking_page(page, browser, server):
    """Item 20: the quiz's masks for seed S are the Masking page's masks for seed S (same sentence and rule)."""
    open_page(page, server, "quiz?quiz=loss&seed=3&round=2")
    expect(page.locator("h1").first).to_contain_text("Quiz", timeout=SLOW)
    caption = page.get_by_text(re.compile(r"masks of seed \d+")).first.inner_text()
    seed = re.search(r"masks of seed (\d+)", caption).group(1)
    page.get_by_role("button", name=re.compile("Reveal")).click()
    expect(page.get_by_role("button", name=re.compile("See these masks on the Masking page"))).to_be_visible(
        timeout=SLOW)
    wait_idle(page)
    revealed = chips(page, 0)  # "What masking did": the tokens as the model saw them
    page.get_by_role("button", name=re.compile("See these masks on the Masking page")).click()
    expect(page.locator("h1").first).to_contain_text("Masking", timeout=SLOW)
    wait_idle(page)
    assert page.get_by_text(f"Seed {seed}").count() >= 1
    assert chips(page, 1) == revealed
    assert page.locator('[data-testid="stException"]').count() == 0


def test_vote_first_hides_each_pair_until_shown_and_stays_on_across_pages(browser, server):
    """The Grammar step asks the class to vote before the model's answer shows (2026-12-06 walk and review: the
    page could not hide it; then the Show button stayed after its click, and a page switch turned Vote first off)."""
    from tests.browser.conftest import go_to

    show = "👀 Show the model's answer"
    with student(browser) as pg:
        open_page(pg, server, "grammar")
        pg.get_by_text("Vote first").click()
        wait_idle(pg)
        expect(pg.get_by_role("button", name=show)).to_be_visible()
        expect(pg.get_by_text("The model prefers the")).to_have_count(0)
        pg.get_by_role("button", name=show).click()
        wait_idle(pg)
        expect(pg.get_by_text("The model prefers the").first).to_be_visible()
        expect(pg.get_by_role("button", name=show)).to_have_count(0)
        go_to(pg, "Loss")
        go_to(pg, "Grammar", "Grammar")
        expect(pg.get_by_role("switch", name=re.compile("Vote first"))).to_be_checked()
        pg.get_by_role("button", name="🎲 Draw a pair").click()  # a new pair: hidden again
        wait_idle(pg)
        expect(pg.get_by_role("button", name=show)).to_be_visible()
        expect(pg.get_by_text("The model prefers the")).to_have_count(0)
