"""AppTest of the Grammar page: a pair scored token by token, a drawn pair, bad input, per-phenomenon accuracy,
on the tiny random BERT and on the bundled default model (issue 26)."""

import pytest

from mlm_core import grammar
from mlm_core.lessons.grammar import default_model_blimp
from mlm_core.default_model import read_build_record


def _text(at) -> str:
    return "\n".join([m.value for m in at.markdown] + [s.value for s in at.success] + [w.value for w in at.warning]
                     + [c.value for c in at.caption])


def _measure_button(at):
    [button] = [b for b in at.button if b.label.startswith("Measure")]
    return button


def test_a_pair_is_scored_and_its_plls_are_shown(run_page):
    at = run_page("pages/grammar.py")
    assert not at.error
    text = _text(at)
    assert "PLL" in text and ("prefers the **grammatical**" in text or "prefers the **ungrammatical**" in text)
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the pair token by token; accuracy per phenomenon
    assert "grammatical: PLL" in charts[0].proto.spec


def test_a_drawn_pair_fills_both_boxes_and_a_page_switch_keeps_them(run_page):
    at = run_page("pages/grammar.py")
    at.selectbox(key="grammar_phenomenon").set_value("irregular_forms").run()
    at.button(key="grammar_draw").click().run()
    assert not at.exception and not at.error
    good, bad = at.text_input(key="grammar_good").value, at.text_input(key="grammar_bad").value
    lab = {(p.good, p.bad) for p in grammar.read_lab_pairs() if p.phenomenon == "irregular_forms"}
    assert (good, bad) in lab
    assert "MLM Lab's pairs" in _text(at)


@pytest.mark.parametrize("good, bad", [("", "The cats sleeps."), ("The cats sleep.", "   ")])
def test_bad_input_gets_a_message_not_a_traceback(run_page, good, bad):
    at = run_page("pages/grammar.py", state={"grammar_good": good, "grammar_bad": bad})
    assert any("both boxes" in e.value for e in at.error)  # longer than 200 characters: test_grammar
    assert len(at.get("plotly_chart")) == 1  # the per-phenomenon chart still draws


def test_measuring_on_the_lab_pairs_fills_the_chart_with_the_model(run_page):
    at = run_page("pages/grammar.py")
    _measure_button(at).click().run()
    assert not at.exception and not at.error
    spec = at.get("plotly_chart")[1].proto.spec
    assert "tiny-random" in spec and "error_x" in spec
    assert "MLM Lab's 96 pairs (not BLiMP" in _text(at)


def test_the_default_model_renders_with_its_build_measured_blimp(run_page, monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "default")
    at = run_page("pages/grammar.py", timeout=300)
    assert not at.error
    report = default_model_blimp(read_build_record())
    text = _text(at)
    if report is not None:
        assert f"overall {100 * report.overall:.1f}%" in text and "measured when the default model was built" in text
    else:
        assert "Press the button" in text


def test_measuring_the_default_model_adds_its_lab_score_beside_blimp(run_page, monkeypatch):
    """The 2026-12-06 walk: Measure on the default model replaced BLiMP's bars and caption with its score on MLM
    Lab's pairs (the pairs that chose its checkpoint), under the same label. Both stand now."""
    monkeypatch.setenv("MLMLAB_MODEL", "default")
    at = run_page("pages/grammar.py", timeout=300)
    report = default_model_blimp(read_build_record())
    if report is None:
        pytest.skip("no BLiMP figures in this build record")
    _measure_button(at).click().run(timeout=300)
    assert not at.exception and not at.error
    text = _text(at)
    assert f"overall {100 * report.overall:.1f}%" in text and "chose its checkpoint" in text
    spec = at.get("plotly_chart")[1].proto.spec
    assert "default model on BLiMP" in spec and "default model on MLM Lab's pairs" in spec


def test_vote_first_hides_the_answer_until_it_is_shown_and_again_for_a_new_pair(run_page):
    at = run_page("pages/grammar.py")
    at.toggle(key="grammar_vote_first").set_value(True).run()
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 1 and "prefers the" not in _text(at)  # only the per-phenomenon chart
    assert any("Let the class vote" in i.value for i in at.info)
    at.button(key="grammar_reveal").click().run()
    assert len(at.get("plotly_chart")) == 2 and "prefers the" in _text(at)
    assert not [b for b in at.button if b.key == "grammar_reveal"]  # the run of the click draws no button (review)
    at.text_input(key="grammar_bad").set_value("The keys to the cabinet was on the table.").run()
    assert len(at.get("plotly_chart")) == 1 and "prefers the" not in _text(at)  # a new pair: hidden again


def test_a_sentence_over_the_limit_gets_a_message_naming_its_box(run_page):
    """The walk: the box took 200 characters and cut a longer paste unseen; the PLL of the cut sentence was shown."""
    at = run_page("pages/grammar.py")
    assert not at.text_input(key="grammar_good").proto.max_chars  # the box cuts nothing: the page says why
    at.text_input(key="grammar_good").set_value("The cats sleep " * 20).run()
    assert any("The grammatical sentence has 299 characters" in e.value and "at most 200" in e.value
               for e in at.error)
    assert len(at.get("plotly_chart")) == 1


def test_a_measurement_is_never_shown_under_another_models_name(run_page):
    """Review: Measure on the tiny model, then switch to the default model: the tiny model's 45.8% stood as "default
    model on MLM Lab's pairs", with the caption saying it flatters the default model."""
    at = run_page("pages/grammar.py")
    _measure_button(at).click().run()
    assert "tiny-random" in at.get("plotly_chart")[1].proto.spec
    at.selectbox(key="model_name").set_value("default").run(timeout=300)
    assert not at.exception
    assert "MLM Lab's pairs" not in at.get("plotly_chart")[-1].proto.spec
    assert not any("flatters" in c.value for c in at.caption)


def test_vote_first_hides_the_answer_again_for_another_model(run_page, monkeypatch):
    """Review: the shown pair was remembered without its model, so switching the model showed the new model's answer
    to the same pair before any vote."""
    at = run_page("pages/grammar.py")
    at.toggle(key="grammar_vote_first").set_value(True).run()
    at.button(key="grammar_reveal").click().run()
    assert len(at.get("plotly_chart")) == 2
    at.selectbox(key="model_name").set_value("default").run(timeout=300)
    assert not at.exception
    assert len(at.get("plotly_chart")) == 1 and [b for b in at.button if b.key == "grammar_reveal"]
