"""Real browser: issue 27's three Training lessons run to the end and say what their run showed (the tiny model,
the shortest run the Steps slider allows), and the Bug museum's "Train it" opens the Training page on that bug."""

import re
import time

from playwright.sync_api import expect

from tests.browser.conftest import SLOW, open_page, wait_idle


def progress_text(pg) -> str:
    bars = pg.locator('[data-testid="stMain"] [data-testid="stProgress"]')
    return bars.first.inner_text() if bars.count() else ""


def wait_done(pg, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if progress_text(pg).startswith("Done"):
            wait_idle(pg)
            return
        time.sleep(0.5)
    raise AssertionError(f"the run did not finish: {progress_text(pg)!r}")


def choose_lesson(pg, server, label: str) -> None:
    open_page(pg, server, "training")
    pg.locator('[data-testid="stRadio"]').filter(has_text="Lesson").get_by_text(label).click()
    wait_idle(pg)
    slider = pg.locator('[data-testid="stSlider"]').filter(has_text="Steps").locator('input[type="range"]')
    slider.focus()
    slider.press("Home")  # 5 steps: the shortest run
    wait_idle(pg)


def start(pg) -> None:
    pg.get_by_role("button", name="▶ Start training").click()
    wait_done(pg)
    assert pg.locator('[data-testid="stException"]').count() == 0


def test_the_masking_rate_lesson_says_which_rate_leads_on_the_frozen_mask(page, server):
    choose_lesson(page, server, "Should you mask 15%?")
    expect(page.get_by_text("frozen evaluation mask").first).to_be_visible()
    start(page)
    verdict = page.get_by_text(re.compile(r"On this run:.*on the frozen 15% mask"))
    expect(verdict).to_be_visible(timeout=SLOW)
    # a lead, or two rates under LEVEL_NATS apart called level (training_lessons.rate_verdict)
    assert re.search(r"mask (15|30|40)% leads with a held-out loss of \d+\.\d\d|"
                     r"mask (15|30|40)% and mask (15|30|40)% are level \(\d+\.\d\d and \d+\.\d\d",
                     verdict.inner_text())
    expect(page.get_by_text(re.compile(r"Wettig et al\. \(2023, EACL\)")).first).to_be_visible()


def test_a_bug_trains_beside_its_clean_twin(page, server):
    choose_lesson(page, server, "Bugs that train")
    expect(page.get_by_role("link", name="huggingface/transformers#20797")).to_be_visible()
    start(page)
    signature = page.get_by_text(re.compile(r"on this run:.*At step \d+, the buggy twin's training loss is"))
    expect(signature).to_be_visible(timeout=SLOW)
    expect(page.get_by_text("The probes, variant by variant")).to_be_visible()


def test_the_guess_over_time_of_the_learners_sentence(page, server):
    choose_lesson(page, server, "The guess over time")
    page.get_by_label("Your own sentence with one [MASK] (optional)").fill("The [MASK] sat on the mat.")
    page.get_by_label("Its hidden word").fill("cat")
    page.get_by_label("Its hidden word").press("Enter")
    wait_idle(page)
    start(page)
    expect(page.locator(".js-plotly-plot .gtitle").filter(has_text="the guess at [MASK]")).to_be_visible(timeout=SLOW)
    expect(page.get_by_text(re.compile(r"The hidden word 'cat' went from rank [\d,]+ at step 0"))).to_be_visible()


def test_the_museum_opens_the_training_page_on_its_bug(page, server):
    open_page(page, server, "bug_museum")
    page.get_by_role("button", name=re.compile("Train it")).first.click()
    expect(page.locator("h1").first).to_contain_text("Training", timeout=SLOW)
    wait_idle(page)
    lesson = page.locator('[data-testid="stRadio"]').filter(has_text="Lesson")
    expect(lesson.get_by_role("radio", name=re.compile("Bugs that train"))).to_be_checked()
    assert page.locator('[data-testid="stException"]').count() == 0


def test_what_did_it_learn_puts_veldoria_alone_beside_its_twins(page, server):
    """Issue 43 §3: the lesson offers only models that already read (the bundled one here, though the server's
    sidebar default is the tiny random BERT), asks the class's question before Start, and after the run says what
    the twins did, beside both runs' binding in the probes table."""
    choose_lesson(page, server, "What did it learn?")
    model = page.locator('[data-testid="stRadio"]').filter(has_text="Model")
    expect(model.get_by_text("Bundled default model: fine-tune it")).to_be_visible()
    assert model.get_by_text("Tiny random BERT").count() == 0
    expect(page.get_by_text(re.compile(r"Pellastra, a country\s+it has never heard of\. What will it say\?"))).to_be_visible()
    start(page)
    said = page.get_by_text(re.compile(r"What the twins did:.*Learning from Veldoria alone, it names \d+ of 15 facts"))
    expect(said).to_be_visible(timeout=SLOW)
    expect(page.get_by_text("The probes, variant by variant")).to_be_visible()
    race = page.locator('[data-testid="stTable"]').filter(has_text="Binding")
    expect(race.first).to_be_visible()
    assert "Veldoria alone" in race.first.inner_text() and "Veldoria and its twins" in race.first.inner_text()
