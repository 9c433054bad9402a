"""AppTests of what a teacher tripped over in the workshop rehearsal (issue 24 §3): share links that hold
what their page needs, the Predictions page's own sentence, pages that remember what was hidden."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

import ui
from mlm_core.lessons.share_state import PAGE_LINKS

LESSON_SENTENCE = "Unbelievably, the tokenizer splits rare words into several word pieces."
# A link carrying every page's state, and a trained model's id (a quiz link of the rehearsal had view=, trained=, step=)
EVERYTHING = {"sentence": LESSON_SENTENCE, "seed": "144", "p": "0.3", "step": "3", "view": "lens",
              "quiz": "loss", "round": "2", "trained": "78f70589.0", "source": "masking"}


def _link_names(at) -> set[str]:
    return {name for name, value in at.query_params.items() if value not in (None, "", [])}


def _share_box(at) -> str:
    return next(c.value for c in at.code if "?" in c.value or c.value.startswith("http"))


@pytest.fixture
def app(apptest):
    at = apptest("app.py")
    at.context["url"] = "http://localhost:8501/"
    return at


@pytest.mark.parametrize("page", sorted(PAGE_LINKS))
def test_a_pages_link_holds_what_the_page_needs_and_nothing_else(apptest, page):
    """Item 8: every page's address and share box hold its own fields only, never a trained model's id."""
    at = apptest(f"pages/{page}.py", query=dict(EVERYTHING))
    at.context["url"] = f"http://localhost:8501/{page}"
    at.run()
    assert not at.exception
    names = _link_names(at)
    assert names <= set(PAGE_LINKS[page]), f"{page}: {names - set(PAGE_LINKS[page])}"
    assert "trained" not in names
    shared = set(parse_qs(urlsplit(_share_box(at)).query))
    assert shared <= set(PAGE_LINKS[page]) and "trained" not in shared, f"{page}: {shared}"


def test_a_quiz_link_after_the_other_pages_has_no_other_pages_state(app):
    """Item 8, as rehearsed: Masking (step), Inside (view), then the Quiz's link: quiz?…&view=…&step=…"""
    app.query_params.update({"sentence": LESSON_SENTENCE, "seed": "144", "step": "1", "view": "lens"})
    app.run()
    assert not _link_names(app) & {"step", "view"}  # Home shows neither
    for page, own in (("pages/masking.py", "step"), ("pages/inside.py", "view"), ("pages/quiz.py", None),
                      ("pages/masking.py", "step")):
        app.switch_page(page).run()
        assert not app.exception, page
        names = _link_names(app)
        assert names <= set(PAGE_LINKS[page.split("/")[1][:-3]]) and "seed" in names, (page, names)
        if own:  # the page's own state is kept in the session, and back in its link
            assert {"step": "1", "view": "lens"}[own] in (app.query_params[own], [app.query_params[own]]), page
    app.switch_page("pages/quiz.py").run()
    assert not _link_names(app) & {"step", "view", "trained", "sentence"}


def test_a_predictions_link_carries_take_it_from_the_masking_page(apptest):
    """Item 2: the teacher's choice travels in the link, so students see the projector's masks."""
    at = apptest("pages/predictions.py", query={"sentence": LESSON_SENTENCE, "seed": "144"})
    at.context["url"] = "http://localhost:8501/predictions"
    at.run()
    at.radio(key="pred_source").set_value("masking").run()
    assert not at.exception
    assert at.query_params["source"] in ("masking", ["masking"])
    link = {k: v for k, v in parse_qs(urlsplit(_share_box(at)).query).items()}
    assert link["source"] == ["masking"] and link["seed"] == ["144"]
    student = apptest("pages/predictions.py", query={k: v[-1] for k, v in link.items()})
    student.run()
    assert not student.exception
    assert student.radio(key="pred_source").value == "masking"
    assert any("From the Masking page" in c.value for c in student.caption)


def test_a_sentence_typed_on_predictions_stays_there_visibly_and_undoably(app):
    """Item 3: a throwaway sentence on Predictions is not silently the lesson's sentence on every page."""
    app.query_params.update({"sentence": LESSON_SENTENCE, "seed": "144"})
    app.run()
    app.switch_page("pages/predictions.py").run()
    assert app.text_area(key="pred_sentence").value == LESSON_SENTENCE  # it starts from the lesson's sentence
    app.text_area(key="pred_sentence").set_value("The cat sat on the [MASK].").run()
    assert not app.exception
    assert any("A sentence of this page only" in c.value for c in app.caption)  # visible
    assert app.query_params["sentence"] in ("The cat sat on the [MASK].", ["The cat sat on the [MASK]."])
    for page in ("pages/masking.py", "pages/inside.py", "pages/home.py"):
        app.switch_page(page).run()
        assert not app.exception, page
        assert app.session_state[ui.KEYS.sentence] == LESSON_SENTENCE, page
        assert app.query_params["sentence"] in (LESSON_SENTENCE, [LESSON_SENTENCE]), page
        if page == "pages/masking.py":
            assert app.text_area(key=ui.KEYS.sentence).value == LESSON_SENTENCE
    app.switch_page("pages/predictions.py").run()
    assert app.text_area(key="pred_sentence").value == "The cat sat on the [MASK]."  # still there, still marked
    app.button(key="pred_own_back").click().run()  # undoable
    assert app.text_area(key="pred_sentence").value == LESSON_SENTENCE
    assert not any("A sentence of this page only" in c.value for c in app.caption)
    app.text_area(key="pred_sentence").set_value("A dog ran in the park.").run()
    app.button(key="pred_own_share").click().run()  # or made the lesson's on purpose
    app.switch_page("pages/masking.py").run()
    assert app.text_area(key=ui.KEYS.sentence).value == "A dog ran in the park."


def test_a_typed_mask_on_the_masking_page_is_special_not_a_grey_chip(apptest):
    """Item 3: a literal [MASK] is a special token (never selected, as for Hugging Face's collator), and said so."""
    at = apptest("pages/masking.py", query={"sentence": "The cat sat on the [MASK] today.", "p": "1.0"})
    at.run()
    assert not at.exception
    shared = at.session_state[ui.KEYS.masking]
    tokens, encoded, result = shared["tokens"], shared["encoded"], shared["result"]
    position = tokens.index("[MASK]")
    assert int(encoded.special_tokens_mask[0, position]) == 1
    assert int(result.decisions[0, position]) == 0  # never selected, even at p = 1
    assert int(result.decisions[0, tokens.index("cat")]) != 0  # the words are
    chips = next(m.value for m in at.markdown if "mlm-chip" in m.value and "[MASK]" in m.value and "cat" in m.value)
    assert "not selected" not in chips.split("[MASK]")[0][-400:]  # its chip is styled as special
    assert any("typed" in c.value and "[MASK]" in c.value for c in at.caption)


def test_predictions_remembers_the_hidden_tokens_when_you_come_back(app):
    """Item 4: coming back showed only "Click at least one token above to hide it"."""
    app.run()
    app.switch_page("pages/predictions.py").run()
    app.pills(key="pred_positions").set_value([1, 2]).run()
    assert not app.exception
    app.switch_page("pages/home.py").run()
    app.switch_page("pages/predictions.py").run()
    assert not app.exception
    assert sorted(app.pills(key="pred_positions").value) == [1, 2]
    assert not any("Click at least one token" in i.value for i in app.info)


def test_inside_remembers_the_hidden_tokens_and_position_when_you_come_back(app):
    """Item 4: Inside the model came back with no views."""
    app.run()
    app.switch_page("pages/inside.py").run()
    first = list(app.pills(key="inside_masked").value)
    app.pills(key="inside_masked").set_value(sorted({1, *first})).run()
    app.selectbox(key="inside_position").set_value(1).run()
    assert not app.exception
    app.switch_page("pages/masking.py").run()
    app.switch_page("pages/inside.py").run()
    assert not app.exception
    assert sorted(app.pills(key="inside_masked").value) == sorted({1, *first})
    assert app.selectbox(key="inside_position").value == 1
    assert not any("Click at least one token" in i.value for i in app.info)
