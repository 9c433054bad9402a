"""AppTest of the Quiz page: guess → reveal → score, the other two quizzes, shared links and presenter view."""

import html
import json

import pytest

import ui
from mlm_core import MaskingConfig
from mlm_core.bundled import workshop_sentences
from mlm_core.lessons.quiz import QUIZ_KINDS, corpus_question_sentence, pick_question, question_problem, word_shaped


def reveal_key(at) -> str:
    return next(b.key for b in at.button if b.key and b.key.startswith("quiz_reveal_"))


def score(at, label="Your score this session") -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture
def quiz(apptest):
    at = apptest("pages/quiz.py")
    at.context["url"] = "http://localhost:8501/quiz"
    return at


def page_question(tokenizer, kind, seed=0, round_number=0, config=None, sentence=None, source=None):
    """The question the page asks: a corpus sentence by (seed, round), masks of the first seed that suits."""
    if sentence is None:
        index, sentence = corpus_question_sentence(workshop_sentences(), seed, round_number, kind)
        source = f"corpus:{index}"
    return pick_question(tokenizer, kind, sentence, seed=seed, round=round_number,
                         config=config or MaskingConfig(), source=source)


def chips_html(at) -> str:
    return "".join(m.value for m in at.markdown if "mlm-chips" in m.value and "mlm-chip-wrap" in m.value)


def test_guess_reveal_score_and_next_question(quiz, tokenizer):
    at = quiz
    at.query_params.update({"seed": "5"})
    at.run()
    assert not at.exception
    question = page_question(tokenizer, "guess", seed=5)
    assert question_problem(question) is None and len(question.blanks) >= 1
    assert score(at) == "0 / 0"
    guesses = [question.answers[0].upper()] + ["zzzzqqq"] * (len(question.blanks) - 1)
    for i, guess in enumerate(guesses):
        at.text_input(key=f"quiz_guess_{question.qid}_{i}").input(guess)
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    n = len(question.blanks)
    assert score(at) == f"1 / {n}"
    assert not [t for t in at.text_input if t.key and t.key.startswith("quiz_guess_")]  # the form is gone
    assert any(f"You got 1 of {n}" in m.value for m in at.markdown)
    assert not at.dataframe  # the answers are static HTML, which wraps (a dataframe cut "answer: p…" at 1400 px)
    table = at.table[0].value
    assert list(table["answer"]) == list(question.answers)
    assert list(table["right?"]) == ["✅"] + ["❌"] * (n - 1)
    assert at.session_state["quiz_board"]["questions"][question.qid]["points"] == 1
    assert at.get("plotly_chart")  # the model's top-k
    # the next question: a new sentence, the score carries over
    at.button(key="quiz_next").click().run()
    assert not at.exception
    assert at.session_state["quiz_round"] == 1
    assert at.query_params["round"] == "1" and at.query_params["seed"] == "5"
    assert score(at) == f"1 / {n}"
    assert all(b.key != f"quiz_reveal_{question.qid}" for b in at.button)
    assert at.get("download_button")  # "My quiz results (JSON)"


def test_random_and_loss_quizzes(quiz, tokenizer):
    at = quiz
    at.query_params.update({"quiz": "random", "seed": "2"})
    at.run()
    assert not at.exception
    assert at.radio(key="quiz_kind").value == "random"
    question = page_question(tokenizer, "random", seed=2)
    random_positions, unchanged = question.positions("RANDOM"), question.positions("UNCHANGED")
    counts = next(m.value for m in at.markdown if m.value.startswith("BERT selected"))
    n_masks, n_hidden = len(question.blanks), len(question.in_loss) - len(question.blanks)
    assert f"You can see **{n_masks}** `[MASK]`{'' if n_masks == 1 else 's'}, so **{n_hidden}** selected " in counts
    assert "(s)" not in counts and ("1** `[MASK]`s" not in counts)  # "1 [MASK]s" read wrong on the projector
    assert random_positions and all(word_shaped(question.shown[i]) for i in random_positions)
    at.button_group(key=f"quiz_random_{question.qid}").set_value(list(random_positions))
    at.button_group(key=f"quiz_unchanged_{question.qid}").set_value([])
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    # nothing to find among the unchanged is worth 1 point for picking nothing (score_selection)
    points = len(random_positions) + (0 if unchanged else 1)
    assert score(at) == f"{points} / {len(random_positions) + max(len(unchanged), 1)}"

    at.radio(key="quiz_kind").set_value("loss").run()
    assert at.query_params["quiz"] == "loss"
    question = page_question(tokenizer, "loss", seed=2)
    at.button_group(key=f"quiz_loss_{question.qid}").set_value(list(question.in_loss) + [0])  # [CLS]: wrong
    at.button(key=reveal_key(at)).click().run()
    assert not at.exception
    n = len(question.in_loss)
    assert score(at, "Which positions count in the loss?") == f"{n - 1} / {n}"
    assert at.dataframe[0].value["label"][0] == -100


def test_loss_quiz_hides_the_decision_colours_until_the_reveal(quiz, tokenizer):
    """Issue 17 item 19: before the reveal, random and unchanged tokens look like any other."""
    at = quiz
    at.query_params.update({"quiz": "loss", "seed": "1"})
    at.run()
    assert not at.exception
    question = page_question(tokenizer, "loss", seed=1)
    assert question.positions("RANDOM", "UNCHANGED")  # there is something the colours would give away
    random_bg, unchanged_bg = ui.DECISION_STYLE["RANDOM"][0], ui.DECISION_STYLE["UNCHANGED"][0]
    before = chips_html(at)
    assert random_bg not in before and unchanged_bg not in before
    assert not any("not selected" in m.value and "unchanged" in m.value for m in at.markdown)  # no legend
    at.button_group(key=f"quiz_loss_{question.qid}").set_value(list(question.blanks))
    at.button(key=reveal_key(at)).click().run()
    after = chips_html(at)
    shown = {ui.DECISION_STYLE[d][0] for d in question.decisions if d in ("RANDOM", "UNCHANGED")}
    assert all(colour in after for colour in shown)


@pytest.mark.parametrize("kind", QUIZ_KINDS)
def test_quiz_masks_are_the_masking_pages_for_the_same_seed(apptest, quiz, tokenizer, kind):
    """Issue 17 item 20: one seed, one selection and one decision per token, on both pages."""
    at = quiz
    at.query_params.update({"quiz": kind, "seed": "3", "round": "2"})
    at.run()
    assert not at.exception
    question = page_question(tokenizer, kind, seed=3, round_number=2)
    assert any(f"masks of seed {question.seed}" in c.value for c in at.caption)
    masking = apptest("pages/masking.py")
    masking.query_params.update({"sentence": question.sentence, "seed": str(question.seed)})
    masking.run()
    assert not masking.exception
    result = masking.session_state[ui.KEYS.masking]["result"]
    length = len(question.tokens)
    assert result.decisions[0, :length].tolist() == question.decision_codes[0].tolist()
    assert result.input_ids[0, :length].tolist() == question.input_ids[0].tolist()


def test_the_link_and_the_teacher_panel_never_show_the_hidden_words(apptest, quiz, tokenizer):
    """Issue 16 item 12: no sentence= in a quiz link, no answer in the teacher's panel."""
    secret = "Zanzibar merchants export cloves, nutmeg and cinnamon to Oslo."
    at = quiz
    at.query_params.update({"sentence": "Paris is the capital of France.", "seed": "4"})  # an old-style link
    at.run()
    assert not at.exception
    assert "sentence" not in at.query_params
    at.text_area(key="quiz_own_text").input(secret)
    at.button(key="quiz_use_own").click().run()
    assert not at.exception
    qs = at.query_params["qs"]
    assert qs and "sentence" not in at.query_params
    assert at.text_area(key="quiz_own_text").value == ""
    link = next(c.value for c in at.code if c.value.startswith("http://localhost:8501/quiz?"))
    assert f"qs={qs}" in link and "sentence=" not in link
    texts = [str(getattr(e, "value", "")) for kind in ("markdown", "caption", "code", "text_area", "info")
             for e in at.get(kind)]
    assert not any(secret in t for t in texts)
    question = page_question(tokenizer, "guess", seed=4, sentence=secret, source=f"teacher:{qs}")
    assert question.blanks
    outside_chips = " ".join(t for t in texts if "mlm-chip-wrap" not in t).lower()
    for word in question.answers:
        assert len(word) < 4 or word.lower() not in outside_chips
    chips = chips_html(at)
    assert all(f">{html.escape(question.tokens[i])}<" not in chips for i in question.blanks
               if question.tokens.count(question.tokens[i]) == 1)
    # a student who opens the link gets the same question
    student = apptest("pages/quiz.py")
    student.context["url"] = "http://localhost:8501/quiz"
    student.query_params.update({"seed": "4", "qs": qs})
    student.run()
    assert not student.exception
    assert any(f"`{question.qid}`" in c.value for c in student.caption)
    assert ui.KEYS.sentence not in student.session_state or student.session_state[ui.KEYS.sentence] != secret


def test_shared_link_is_applied_and_written_back(quiz):
    at = quiz
    link = {"seed": "7", "strategy": "whole_word", "p": "0.3", "mask": "0.5", "random": "0.25", "quiz": "loss",
            "round": "0", "step": "4"}
    at.query_params.update(link)
    at.run()
    assert not at.exception
    state = at.session_state
    assert state[ui.KEYS.seed] == 7
    assert (state["masking_strategy"], state["masking_p"], state["masking_mask"], state["masking_random"]) == \
        ("whole_word", 0.3, 0.5, 0.25)
    assert state["masking_step"] == 4 and state["quiz_kind"] == "loss"
    assert not at.info  # a good link gives no notice
    written = {k: v for k, v in at.query_params.items() if v}
    # round 0 is the default: left out; step= is the Masking page's (kept in the session, not in a quiz link)
    assert written == {k: v for k, v in link.items() if k not in ("round", "step")}
    shared = [c.value for c in at.code if c.value.startswith("http://localhost:8501/quiz?")]
    assert shared and "seed=7" in shared[0] and "strategy=whole_word" in shared[0]


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
    question = page_question(tokenizer, "guess", seed=0)
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
