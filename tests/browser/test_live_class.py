"""Issue 44 in real browsers: a teacher and ten students, each in a browser context of their own (its own cookies,
as a laptop of its own), answer a choice, a word and a number; the teacher's table counts exactly the answers
given: none lost, none counted twice, a changed answer counted once.

The server runs as behind a relay (``MLMLAB_TRUST_LOCALHOST=0``): every browser here comes from 127.0.0.1, so
nobody is the server's own machine, the teacher leads with the teacher key, and the board tells the students'
browsers apart by their cookie (README, Classroom).
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SLOW, Server, go_to, open_page, wait_idle

KEY = "a-teacher-key-for-the-test"
STUDENTS = 10


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    s = Server({"MLMLAB_TRUST_LOCALHOST": "0", "MLMLAB_TEACHER_KEY": KEY},
               tmp_path_factory.mktemp("class") / "streamlit.log")
    yield s
    s.stop()


def room_counts(pg) -> dict[str, str]:
    """The teacher's table: answer -> "n of N"."""
    table = pg.locator('[data-testid="stTable"]').filter(has_text="the class").first
    rows = table.locator("tbody tr").all()
    counts = {}
    for row in rows:
        cells = [c.inner_text().strip() for c in row.locator("td, th").all()]
        cells = [c for c in cells if c]
        if len(cells) >= 2 and " of " in cells[1]:
            counts[cells[0]] = cells[1]
        elif len(cells) >= 3 and " of " in cells[2]:  # an index column first
            counts[cells[1]] = cells[2]
    return counts


def panel_title(pg):
    return pg.locator('[data-testid="stExpander"] summary').filter(has_text="🙋 Ask the class").first


def counts_become(pg, expected: dict[str, str], timeout: float = 60) -> dict[str, str]:
    """The teacher's table once it shows ``expected`` (it redraws every 2 s), or what it shows at the timeout."""
    deadline = time.time() + timeout
    counts = room_counts(pg)
    while counts != expected and time.time() < deadline:
        pg.wait_for_timeout(500)
        counts = room_counts(pg)
    return counts


def ask(teacher, title: str) -> None:
    go_to(teacher, title, heading=title)  # through the app's navigation: the key is this session's
    button = teacher.get_by_role("button", name="🙋 Ask the class")
    if not button.is_visible():
        panel_title(teacher).click()  # open the panel
    button.click()
    wait_idle(teacher)
    expect(teacher.get_by_text("🙋 The teacher asks (open)")).to_be_visible(timeout=SLOW)


def answer(student, text: str | None = None, choice: str | None = None, counted: str | None = None) -> None:
    """Answer in the student's form and wait until the page says it was counted (as ``counted``)."""
    form = student.locator('[data-testid="stForm"]').filter(has_text="Your answer").first
    expect(form).to_be_visible(timeout=SLOW)
    if choice is not None:
        form.get_by_text(choice, exact=True).click()
    else:
        form.get_by_role("textbox").fill(text)
    form.get_by_role("button", name="Send my answer").click()
    shown = re.escape(counted or choice or text.strip().lower())
    expect(student.get_by_text(re.compile(rf"^(Counted|Your answer): {shown}\.")).first).to_be_visible(timeout=SLOW)


def test_a_teacher_and_ten_students_answer_a_choice_a_word_and_a_number(browser, class_server, tmp_path):
    contexts = [browser.new_context(viewport={"width": 1280, "height": 720}) for _ in range(STUDENTS + 1)]
    try:
        teacher, *students = [c.new_page() for c in contexts]
        for pg in contexts:
            pg.set_default_timeout(90_000)
        # the teacher leads from a machine that is not the server's, with the key
        open_page(teacher, class_server, "grammar")
        key_panel = teacher.locator('[data-testid="stExpander"]').filter(has_text="Ask the class (teacher)")
        key_panel.locator("summary").click()
        key_panel.get_by_role("textbox", name="Teacher key").fill(KEY)
        key_panel.get_by_role("textbox", name="Teacher key").press("Enter")
        wait_idle(teacher)
        expect(panel_title(teacher)).to_be_visible(timeout=SLOW)  # the teacher's panel

        # 1. a choice: A or B
        ask(teacher, "Grammar")
        for i, student in enumerate(students):
            open_page(student, class_server, "grammar")
            assert student.get_by_role("button", name="🙋 Ask the class").count() == 0  # students open nothing
            answer(student, choice="A" if i % 2 == 0 else "B")
        answer(students[0], choice="B")  # a changed answer: counted once, as its last
        expect(teacher.get_by_text(re.compile(r"10 of \d+ answered"))).to_be_visible(timeout=SLOW)
        assert counts_become(teacher, {"A": "4 of 10", "B": "6 of 10"}) == {"A": "4 of 10", "B": "6 of 10"}
        # before the reveal a student sees how many answered, never what
        assert students[1].locator('[data-testid="stTable"]').filter(has_text="the class").count() == 0

        # 2. a word, on the page the pointer leads to
        ask(teacher, "Predictions")
        words = ["mat", "Mat", " rug ", "floor", "mat", "bed", "MAT", "chair", "floor", "mat"]
        for student, word in zip(students, words):
            pointer = student.get_by_role("link", name=re.compile("Answer on Predictions"))
            expect(pointer).to_be_visible(timeout=SLOW)  # the sidebar points there by itself
            pointer.click()
            wait_idle(student)
            answer(student, text=word)
        expect(teacher.get_by_text(re.compile(r"10 of \d+ answered"))).to_be_visible(timeout=SLOW)
        words_given = {"mat": "5 of 10", "rug": "1 of 10", "floor": "2 of 10", "bed": "1 of 10", "chair": "1 of 10"}
        counts_become(teacher, words_given)  # (the model's own guesses are rows too, at "0 of 10")
        counts = room_counts(teacher)
        assert {k: counts.get(k) for k in words_given} == words_given
        assert all(v == "0 of 10" for k, v in counts.items() if k not in words_given)

        # 3. a number, revealed to everyone
        ask(teacher, "Masking")
        for i, student in enumerate(students):
            open_page(student, class_server, "masking")
            answer(student, text=str(1 + i % 3))
        expect(teacher.get_by_text(re.compile(r"10 of \d+ answered"))).to_be_visible(timeout=SLOW)
        numbers = {"1": "4 of 10", "2": "3 of 10", "3": "3 of 10"}
        assert counts_become(teacher, numbers) == numbers
        teacher.get_by_role("button", name="Reveal").click()
        wait_idle(teacher)
        table = students[5].locator('[data-testid="stTable"]').filter(has_text="the class")
        expect(table.first).to_be_visible(timeout=SLOW)  # the student's page shows the room by itself
        assert "4 of 10" in table.first.inner_text()
        for pg in (teacher, *students):
            assert pg.locator('[data-testid="stException"]').count() == 0
        teacher.screenshot(path=str(tmp_path / "teacher.png"), full_page=True)
    finally:
        for c in contexts:
            c.close()
