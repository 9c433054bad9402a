"""Issue 44, AppTest: each page that asks the class opens its question from the teacher's session, a student's
session answers it, and the teacher's chart and table count that answer; the student sees the room after the reveal."""

import pytest

import ui
from mlm_core.classroom import Who, reset_class_board
from ui import live_class


@pytest.fixture()
def as_student(monkeypatch):
    """Switch an AppTest between the teacher (the server's own machine) and a student on another machine."""
    reset_class_board()  # a fresh board: the server's outlives one test
    people = {"who": None}

    def who():
        return people["who"] or Who("session:teacher", "teacher", teacher=True)

    monkeypatch.setattr(live_class, "who", who)

    def switch(machine: int | None):
        people["who"] = None if machine is None else Who(f"ip:10.0.0.{machine}", f"browser{machine}")

    yield switch
    reset_class_board()


def open_and_answer(at, page: str, switch, answer_with):
    at.button(key=f"live_open_{page}").click().run()
    assert not at.exception, at.exception
    board = live_class.class_board()
    question = board.live()
    assert question is not None and question.page == page and question.is_open
    switch(1)
    at.run()
    assert not at.exception, at.exception
    assert any(b.label == "Send my answer" for b in at.button)  # a student gets the answer box
    assert not any(b.key == f"live_open_{page}" for b in at.button if b.key)  # and no teacher button
    answer_with(at, question)
    next(b for b in at.button if b.label == "Send my answer").click().run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("Counted:") for m in at.success), [w.value for w in at.warning]
    switch(None)
    at.run()
    return question


def type_word(word):
    def answer(at, question):
        at.text_input(key=f"live_text_{question.qid}").input(word)
    return answer


def pick(choice):
    def answer(at, question):
        at.radio(key=f"live_choice_{question.qid}").set_value(choice)
    return answer


def counted(at, page: str) -> list[dict]:
    table = next(t for t in at.table if "the class" in t.value.columns)
    return table.value.to_dict("records")


def test_predictions_asks_what_the_model_will_guess_and_reveals_its_top_k(apptest, as_student, monkeypatch):
    monkeypatch.delenv("MLMLAB_MODEL")  # the bundled model: a real vocabulary and real guesses
    at = apptest("pages/predictions.py").run()
    question = open_and_answer(at, "predictions", as_student, type_word(" Watched "))
    assert "[MASK]" in question.context and question.reveal.truth
    rows = counted(at, "predictions")
    assert {"answer": "watched", "the class": "1 of 1"}.items() <= rows[0].items()
    assert len([r for r in rows if r["the model"]]) >= 5  # the model's top-k beside the class's word
    at.button(key="live_reveal_predictions").click().run()
    as_student(2)
    at.run()
    assert any(t for t in at.table if "the class" in t.value.columns)  # revealed: every student sees the room
    assert any(m.value.startswith("**The model:**") for m in at.markdown)


def test_a_word_the_model_cannot_guess_gets_a_message_and_is_not_counted(apptest, as_student, monkeypatch):
    monkeypatch.delenv("MLMLAB_MODEL")
    at = apptest("pages/predictions.py").run()
    at.button(key="live_open_predictions").click().run()
    question = live_class.class_board().live()
    as_student(1)
    at.run()
    at.text_input(key=f"live_text_{question.qid}").input("<script>alert(1)</script>")
    next(b for b in at.button if b.label == "Send my answer").click().run()
    assert not at.exception
    assert any("pieces" in w.value for w in at.warning)
    assert not any("<script>" in m.value for m in at.markdown)  # shown escaped, never as HTML or markdown
    assert live_class.class_board().tally(Who("t", "t", teacher=True), question.qid).answered == 0


def test_grammar_asks_which_sentence_the_model_prefers(apptest, as_student):
    at = apptest("pages/grammar.py").run()
    question = open_and_answer(at, "grammar", as_student, pick("B"))
    assert question.choices == ("A", "B") and question.context.startswith("A: ")
    rows = counted(at, "grammar")
    assert [r["answer"] for r in rows] == ["A", "B"] and rows[1]["the class"] == "1 of 1"
    assert question.reveal.truth in ("A", "B") and "nats" in question.reveal.note


def test_masking_asks_how_many_tokens_the_rule_selects(apptest, as_student):
    at = apptest("pages/masking.py").run()
    question = open_and_answer(at, "masking", as_student, type_word("2"))
    assert question.kind == "number" and question.max_number > 0
    assert int(question.reveal.truth) <= question.max_number
    assert {"answer": "2", "the class": "1 of 1"}.items() <= counted(at, "masking")[0].items()


def test_quiz_asks_for_the_hidden_word(apptest, as_student, monkeypatch):
    monkeypatch.delenv("MLMLAB_MODEL")
    at = apptest("pages/quiz.py").run()
    question = live_class.class_board().live()
    assert question is None
    at.button(key="live_open_quiz").click().run()
    question = live_class.class_board().live()
    assert question.kind == "word" and question.reveal.truth and "[MASK]" in question.context


def test_training_asks_which_rate_will_lead_and_reveals_only_after_the_run(apptest, as_student):
    at = apptest("pages/training.py", state={"training_lesson": "mask_rate"}).run()
    question = open_and_answer(at, "training", as_student, pick("40%"))
    assert question.choices == ("15%", "30%", "40%")
    assert at.button(key="live_reveal_training").disabled  # no run has ended: nothing to reveal yet
    assert any("Reveal once the run has ended" in c.value for c in at.caption)


def test_a_student_sees_where_the_open_question_is_from_any_page(apptest, as_student):
    at = apptest("pages/grammar.py").run()
    at.button(key="live_open_grammar").click().run()
    as_student(3)
    other = apptest("pages/masking.py").run()
    assert any(m.value.startswith("**🙋 The teacher asks on Grammar:**") for m in other.sidebar.markdown)
    assert not any(b.key and b.key.startswith("live_open") for b in other.button)  # a student opens nothing


def test_a_students_page_holds_the_answer_back_until_the_reveal(apptest, as_student):
    """Issue 44 rehearsal: a student's Predictions page showed the hidden word and the model's guesses under the
    open question. While it is open the page stops after the question; after the reveal it is whole again."""
    at = apptest("pages/predictions.py").run()
    at.button(key="live_open_predictions").click().run()
    as_student(4)
    at.run()
    assert not at.exception
    headers = [h.value for h in at.subheader]
    assert "What the model sees" in headers and "What it should predict" not in headers
    assert any("appears here when the teacher reveals" in i.value for i in at.info)
    as_student(None)
    at.run()
    assert "Its guesses, position by position" in [h.value for h in at.subheader]  # the teacher sees everything
    at.button(key="live_reveal_predictions").click().run()
    as_student(4)
    at.run()
    assert "Its guesses, position by position" in [h.value for h in at.subheader]
