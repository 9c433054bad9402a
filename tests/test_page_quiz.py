"""AppTest of the Quiz page: guess → reveal → score, the other two quizzes, shared links and presenter view."""

import json

import pytest

import ui
from mlm_core import MaskingConfig, classroom


def reveal_key(at) -> str:
    return next(b.key for b in at.button if b.key and b.key.startswith("quiz_reveal_"))


def score(at, label="Your score this session") -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture
def quiz(apptest):
    at = apptest("pages/quiz.py")
    at.context["url"] = "http://localhost:8501/quiz"
    return at


def test_guess_reveal_score_and_next_question(quiz, tokenizer):
    at = quiz
    at.query_params.update({"seed": "5"})
    at.run()
    assert not at.exception
    question = classroom.make_question(tokenizer, "guess", classroom.DEFAULT_SENTENCE, seed=5, config=MaskingConfig())
    assert len(question.blanks) == 2
    assert score(at) == "0 / 0"
    guesses = [question.answers[0].upper(), "zzzzqqq"]
    for i, guess in enumerate(guesses):
        at.text_input(key=f"quiz_guess_{question.qid}_{i}").input(guess)
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    assert score(at) == "1 / 2"
    assert not [t for t in at.text_input if t.key and t.key.startswith("quiz_guess_")]  # the form is gone
    assert any("You got 1 of 2" in m.value for m in at.markdown)
    table = at.dataframe[0].value
    assert list(table["answer"]) == list(question.answers)
    assert list(table["right?"]) == ["✅", "❌"]
    assert table["your guess: rank"][1] == "not one token"
    assert at.session_state["quiz_board"]["questions"][question.qid]["points"] == 1
    assert at.get("plotly_chart")  # the model's top-k
    # the next question: a new sentence, the score carries over
    at.button(key="quiz_next").click().run()
    assert not at.exception
    assert at.session_state["quiz_round"] == 1
    assert at.query_params["round"] == "1" and at.query_params["seed"] == "5"
    assert score(at) == "1 / 2"
    assert all(b.key != f"quiz_reveal_{question.qid}" for b in at.button)
    assert at.get("download_button")  # "My quiz results (JSON)"


def test_random_and_loss_quizzes(quiz, tokenizer):
    at = quiz
    at.query_params.update({"quiz": "random", "seed": "2"})
    at.run()
    assert not at.exception
    assert at.radio(key="quiz_kind").value == "random"
    question = classroom.make_question(tokenizer, "random", classroom.DEFAULT_SENTENCE, seed=2, config=MaskingConfig())
    random_positions, unchanged = question.positions("RANDOM"), question.positions("UNCHANGED")
    at.button_group(key=f"quiz_random_{question.qid}").set_value(list(random_positions))
    at.button_group(key=f"quiz_unchanged_{question.qid}").set_value([])
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    expected = len(random_positions)
    assert score(at) == f"{expected} / {len(random_positions) + len(unchanged)}"

    at.radio(key="quiz_kind").set_value("loss").run()
    assert at.query_params["quiz"] == "loss"
    question = classroom.make_question(tokenizer, "loss", classroom.DEFAULT_SENTENCE, seed=2, config=MaskingConfig())
    at.button_group(key=f"quiz_loss_{question.qid}").set_value(list(question.in_loss) + [0])  # [CLS]: wrong
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    n = len(question.in_loss)
    assert score(at, "Which positions count in the loss?") == f"{n - 1} / {n}"
    assert at.dataframe[0].value["label"][0] == -100


def test_shared_link_is_applied_and_written_back(quiz):
    at = quiz
    link = {"sentence": "Paris is the capital of France.", "seed": "7", "strategy": "whole_word", "p": "0.3",
            "mask": "0.5", "random": "0.25", "quiz": "loss", "round": "0", "step": "4"}
    at.query_params.update(link)
    at.run()
    assert not at.exception
    state = at.session_state
    assert state[ui.KEYS.seed] == 7 and state[ui.KEYS.sentence] == link["sentence"]
    assert (state["masking_strategy"], state["masking_p"], state["masking_mask"], state["masking_random"]) == \
        ("whole_word", 0.3, 0.5, 0.25)
    assert state["masking_step"] == 4 and state["quiz_kind"] == "loss"
    assert not at.info  # a good link gives no notice
    written = {k: v for k, v in at.query_params.items() if v}
    assert written == {k: v for k, v in link.items() if k != "round"}  # round 0 is the default: left out
    shared = [c.value for c in at.code if c.value.startswith("http://localhost:8501/quiz?")]
    assert shared and "seed=7" in shared[0] and "strategy=whole_word" in shared[0]
    # the question uses the link's rule
    assert any("seed 7" in c.value for c in at.caption)


def test_tampered_link_falls_back_with_a_notice(quiz):
    at = quiz
    at.query_params.update({"seed": "-5", "p": "NaN", "strategy": "<script>", "model": "/etc/passwd",
                            "mask": "0.9", "random": "0.9", "quiz": "exam", "sentence": "\x00"})
    at.run()
    assert not at.exception
    assert len(at.info) == 1
    notice = at.info[0].value
    for label in ("seed", "selection probability", "masking strategy", "model", "quiz", "sentence", "more than 1"):
        assert label in notice
    assert at.session_state[ui.KEYS.seed] == 0
    assert at.radio(key="quiz_kind").value == "guess"
    assert not any(k in at.query_params for k in ("seed", "p", "strategy", "model", "quiz", "sentence"))
    at.run()  # the notice is shown once
    assert not at.info


def test_presenter_view(quiz, tokenizer):
    at = quiz
    at.run()
    assert not any("<style>" in m.value for m in at.markdown)
    at.toggle(key=ui.KEYS.presenter).set_value(True).run()
    assert not at.exception
    css = next(m.value for m in at.markdown if "<style>" in m.value)
    size = int(css.split(".mlm-chip {")[1].split("font-size:")[1].split("px")[0])
    assert size >= 28
    assert "st-key-advanced_" in css and "stButton" in css
    question = classroom.make_question(tokenizer, "guess", classroom.DEFAULT_SENTENCE, seed=0, config=MaskingConfig())
    at.text_input(key=f"quiz_guess_{question.qid}_0").input(question.answers[0])
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    chart = at.get("plotly_chart")[0].proto
    assert json.loads(chart.spec)["layout"]["height"] >= ui.PRESENTER_CHART_HEIGHT
    config = json.loads(chart.config)
    assert config["toImageButtonOptions"]["format"] == "png"
    assert config["toImageButtonOptions"]["filename"] == "quiz_model_guesses"


def test_shared_state_survives_page_switches(apptest):
    """The sidebar's seed and presenter view, and the link's rule, stay the same on every page."""
    at = apptest("app.py")
    at.query_params.update({"seed": "7", "p": "0.3", "strategy": "whole_word"})
    at.run()
    assert not at.exception
    at.toggle(key=ui.KEYS.presenter).set_value(True).run()
    for page in ("pages/masking.py", "pages/quiz.py", "pages/home.py", "pages/masking.py"):
        at.switch_page(page).run()
        assert not at.exception, page
        assert at.number_input(key=ui.KEYS.seed).value == 7, page
        assert at.toggle(key=ui.KEYS.presenter).value is True, page
        assert at.query_params["seed"] == "7" and at.query_params["p"] == "0.3", page
    assert at.slider(key="masking_p").value == 0.3
    assert at.radio(key="masking_strategy").value == "whole_word"
    at.number_input(key=ui.KEYS.seed).set_value(9).run()
    at.switch_page("pages/quiz.py").run()
    assert at.number_input(key=ui.KEYS.seed).value == 9
    assert any("seed 9" in c.value for c in at.caption)
