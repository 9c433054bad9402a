"""Issue 44: the class answers live. The board (mlm_core.classroom): who may write, one answer per machine, what a
student sees, its bounds, hostile answers; and the figure and table the room sees."""

import threading

import pytest

from mlm_core.bundled import load_default_tokenizer
from mlm_core.classroom import (MAX_ANSWER_CHARS, ClassBoard, Question, Reveal, Who, board_limits, check_answer)
from mlm_core.errors import InputError
from mlm_core.figures.classroom import class_answers_figure, tally_rows

TEACHER = Who("session:teacher", "t", teacher=True)
HOSTILE = [
    '<img src=x onerror="window.__xss=1">', "<script>alert(1)</script>", "[link](javascript:alert(1))",
    "![](http://evil.example/x.png)", "**bold**", "`code`", "# heading", "a\nb", "\u202egnp.exe",
    "x" * 1000, "🙂", "%00", "../../etc/passwd", "' OR 1=1 --", "{{7*7}}", "${7*7}", "\x00", "\x07",
]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def student(i: int, browser: str = "b") -> Who:
    return Who(f"ip:10.0.0.{i}", browser)


@pytest.fixture()
def word_board():
    clock = Clock()
    board = ClassBoard(max_changes=5, window_s=5.0, clock=clock)
    q = board.open(TEACHER, "predictions", "word", "What will the model guess?", context="the cat sat on the [MASK].",
                   tokenizer=load_default_tokenizer(), reveal=Reveal((("mat", 0.4), ("floor", 0.2)), truth="mat"))
    return board, q, clock


def test_only_the_teacher_opens_closes_reveals_and_clears(word_board):
    board, q, _ = word_board
    ana = student(2)
    for action in (lambda: board.open(ana, "quiz", "word", "?"), lambda: board.close(ana, q.qid),
                   lambda: board.reveal(ana, q.qid), lambda: board.clear(ana),
                   lambda: board.open(Who("ip:10.0.0.2", "b", teacher=False), "quiz", "word", "?"),
                   lambda: board.open("teacher", "quiz", "word", "?")):  # not a Who at all
        with pytest.raises(InputError, match="Only the teacher"):
            action()
    assert board.live() == q and q.is_open and board.version == 1  # nothing moved


def test_one_answer_per_machine_changed_answers_counted_once(word_board):
    board, q, clock = word_board
    for i in range(10):
        assert board.answer(student(i), q.qid, "Mat ") == "mat"
    clock.now += 10
    board.answer(student(3), q.qid, "floor")  # a change, not a second answer
    with pytest.raises(InputError, match="one answer per machine"):
        board.answer(student(4, browser="another tab"), q.qid, "rug")  # a second browser on that machine
    tally = board.tally(TEACHER, q.qid)
    assert tally.counts == (("mat", 9), ("floor", 1)) and tally.answered == 10
    per_address = ClassBoard(per_address=3)  # a class behind one address (NAT, relay): the teacher raises it
    q2 = per_address.open(TEACHER, "quiz", "choice", "?", choices=("A", "B"))
    for browser in "xyz":
        per_address.answer(Who("ip:127.0.0.1", browser), q2.qid, "a")
    with pytest.raises(InputError, match="one answer per machine"):
        per_address.answer(Who("ip:127.0.0.1", "w"), q2.qid, "a")


def test_a_student_sees_the_count_and_their_own_answer_until_the_reveal(word_board):
    board, q, _ = word_board
    board.answer(student(1), q.qid, "rug")
    board.answer(student(2), q.qid, "mat")
    mine = board.tally(student(1), q.qid)
    assert mine.counts == () and mine.reveal is None and mine.mine == "rug" and mine.answered == 2
    assert board.tally(student(9), q.qid).mine is None  # nobody else's answer
    board.close(TEACHER, q.qid)
    assert board.tally(student(1), q.qid).counts == ()  # closed is not revealed
    with pytest.raises(InputError, match="closed"):
        board.answer(student(1), q.qid, "mat")  # an answer after close changes nothing
    board.reveal(TEACHER, q.qid)
    after = board.tally(student(1), q.qid)
    assert dict(after.counts) == {"rug": 1, "mat": 1} and after.reveal.truth == "mat" and after.mine == "rug"
    assert not any("10.0.0" in str(v) for v in (after.counts, after.reveal))  # no address, no browser, no voter


def test_hostile_answers_get_a_message_and_change_nothing(word_board):
    board, q, clock = word_board
    board.answer(student(1), q.qid, "mat")
    before = board.tally(TEACHER, q.qid)
    for i, text in enumerate(HOSTILE + [None, 42, ["mat"]]):
        clock.now += 10  # not the rate limit: each is refused for what it is
        with pytest.raises(InputError):
            board.answer(student(1), q.qid, text)
    with pytest.raises(InputError, match="gone"):
        board.answer(student(1), "not-a-question-id", "mat")  # a tampered link's id
    with pytest.raises(InputError, match="gone"):
        board.answer(student(1), {"qid": q.qid}, "mat")
    assert board.tally(TEACHER, q.qid) == before and board.tally(student(1), q.qid).mine == "mat"


def test_a_flood_from_one_machine_is_slowed_and_changes_nothing_else(word_board):
    board, q, clock = word_board
    board.answer(student(2), q.qid, "mat")
    refused = 0
    for i in range(100):  # 100 answers in one second from one machine
        clock.now += 0.01
        try:
            board.answer(student(1), q.qid, "rug" if i % 2 else "floor")
        except InputError as exc:
            assert "Too many answers" in str(exc)
            refused += 1
    assert refused == 95
    tally = board.tally(TEACHER, q.qid)
    assert tally.answered == 2 and dict(tally.counts)["mat"] == 1  # the flood moved its own one answer only
    clock.now += 6
    assert board.answer(student(1), q.qid, "rug") == "rug"  # after the wait it answers again


def test_words_are_normalised_and_checked_against_the_models_vocabulary(word_board):
    _, q, _ = word_board
    assert check_answer(q, "  MAT\u200b ") == "mat"  # case, spaces, zero-width characters
    assert check_answer(q, "ｍａｔ") == "mat"  # full-width letters (NFKC)
    with pytest.raises(InputError, match="One word"):
        check_answer(q, "the mat")
    with pytest.raises(InputError, match="pieces"):
        check_answer(q, "Veldoria")
    with pytest.raises(InputError, match=f"at most {MAX_ANSWER_CHARS}"):
        check_answer(q, "m" * (MAX_ANSWER_CHARS + 1))
    number = Question("n", "masking", "number", "How many?", max_number=12)
    assert check_answer(number, "007") == "7"
    for bad in ("13", "-1", "2.5", "٣", "two"):  # above the largest, negative, not whole, not ASCII digits
        with pytest.raises(InputError, match="whole number"):
            check_answer(number, bad)
    choice = Question("c", "grammar", "choice", "A or B?", choices=("A", "B"))
    assert check_answer(choice, " b ") == "B"
    with pytest.raises(InputError, match="one of"):
        check_answer(choice, "C")


def test_the_board_is_bounded_and_a_new_question_closes_the_open_one(monkeypatch):
    board = ClassBoard(max_questions=3, max_answers=4)
    first = board.open(TEACHER, "quiz", "choice", "?", choices=("A", "B"))
    for i in range(4):
        board.answer(student(i), first.qid, "A")
    with pytest.raises(InputError, match="taken its 4 answers"):
        board.answer(student(9), first.qid, "A")
    second = board.open(TEACHER, "grammar", "choice", "?", choices=("A", "B"))
    assert board.question(first.qid).status == "closed" and board.live() == second
    for _ in range(3):
        board.open(TEACHER, "masking", "number", "?", max_number=5)
    assert board.question(first.qid) is None and len([q for q in (first, second) if board.question(q.qid)]) == 0
    with pytest.raises(InputError, match="gone"):
        board.reveal(TEACHER, first.qid)
    board.clear(TEACHER)
    assert board.live() is None
    monkeypatch.setenv("MLMLAB_CLASS_QUESTIONS", "5")
    monkeypatch.setenv("MLMLAB_CLASS_ANSWERS", "oops")  # not a number: the default
    assert board_limits() == {"max_questions": 5, "max_answers": 200, "per_address": 1}


def test_thirty_students_at_once_are_all_counted_once():
    board = ClassBoard()
    q = board.open(TEACHER, "training", "choice", "Which rate leads?", choices=("15%", "30%", "40%"))
    choices = ("15%", "30%", "40%")

    def answer(i):
        board.answer(student(i), q.qid, choices[i % 3])
        board.answer(student(i), q.qid, choices[(i + 1) % 3])  # each changes its mind once

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tally = board.tally(TEACHER, q.qid)
    assert tally.answered == 30 and dict(tally.counts) == {c: 10 for c in choices}


def test_the_room_chart_and_table_show_the_class_beside_the_model(word_board):
    board, q, _ = word_board
    for i, word in enumerate(["mat", "mat", "rug", "<b>x</b>" if False else "floor"]):
        board.answer(student(i), q.qid, word)
    board.reveal(TEACHER, q.qid)
    tally = board.tally(student(0), q.qid)
    fig = class_answers_figure(tally)
    class_bars, model_bars = fig.data
    assert list(class_bars.y) == ["mat", "floor", "rug"] or list(class_bars.y) == ["mat", "floor", "rug"][:3]
    assert list(class_bars.x) == [2, 1, 1] and list(model_bars.y) == ["mat", "floor"]
    assert class_bars.marker.color[0] == model_bars.marker.color[0]  # the right answer: one colour on both sides
    assert "4 of" in fig.layout.annotations[0].text
    rows = tally_rows(tally)
    assert rows[0] == {"answer": "mat", "the class": "2 of 4", "the model": "40.0%", "right answer": "✓"}


def test_answers_in_the_figure_are_escaped():
    board = ClassBoard()
    q = board.open(TEACHER, "grammar", "choice", "?", choices=("<b>A</b>", "B"))
    board.answer(student(1), q.qid, "<b>a</b>")
    fig = class_answers_figure(board.tally(TEACHER, q.qid))
    assert "&lt;b&gt;A&lt;/b&gt;" in list(fig.data[0].y) and not any("<b>" in y for y in fig.data[0].y)


def test_review_findings_special_tokens_full_question_close_after_reveal(word_board):
    """Issue 44's attack review: [MASK] and [SEP] are not words; a full question says so before "one per machine";
    a Close from a second teacher tab after the Reveal leaves it revealed."""
    board, q, clock = word_board
    for special in ("[MASK]", "[SEP]", "[CLS]", "[PAD]"):
        with pytest.raises(InputError, match="special tokens"):
            check_answer(q, special)
    board.reveal(TEACHER, q.qid)
    assert board.close(TEACHER, q.qid).status == "revealed"
    full = ClassBoard(max_answers=1)
    q2 = full.open(TEACHER, "quiz", "choice", "?", choices=("A", "B"))
    full.answer(student(1), q2.qid, "A")
    with pytest.raises(InputError, match="taken its 1 answers"):
        full.answer(Who("ip:10.0.0.1", "another browser"), q2.qid, "B")


def test_a_students_clear_cache_clears_only_their_own_state():
    """Streamlit clears every cache for any browser that asks; the server's guard lets only its own machine do so."""
    import streamlit as st
    from streamlit.runtime.app_session import AppSession

    from ui.session import guard_cache_clearing

    guard_cache_clearing()
    calls = []

    @st.cache_resource
    def shared():
        calls.append(1)
        return object()

    first = shared()

    class Student:
        id = "no-such-session"  # no client on record: not the server's machine

        class _session_state:  # noqa: N801 - stands in for the session's state
            cleared = False

            @classmethod
            def clear(cls):
                cls.cleared = True

    AppSession._handle_clear_cache_request(Student())
    assert Student._session_state.cleared and shared() is first and calls == [1]
    guard_cache_clearing()  # idempotent
    assert getattr(AppSession._handle_clear_cache_request, "_mlmlab_guarded", False)
