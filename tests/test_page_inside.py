"""AppTest of the Inside-the-model page with the tiny random BERT: every view, a head picked, a
trained model beside its base, and a link that names a trained model another session has."""

import copy
import json

import pytest
import torch

import ui
from mlm_core.models import load_masked_lm
from mlm_core.session_models import TrainedModels


@pytest.fixture
def page(run_page):
    return run_page("pages/inside.py")


def _markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_every_view_and_a_head_picked(page):
    at = page
    assert not at.error
    assert at.segmented_control(key="inside_view").value == "attention"
    assert "heads put more than half their attention" in _markdown(at)
    assert any("What attention is not" in i.value for i in at.info)
    assert at.get("download_button")  # the lesson export (its contents: test_lesson_export_holds_every_picture)
    at.selectbox(key="inside_layer").set_value(2).run()
    at.selectbox(key="inside_head").set_value(2).run()
    assert not at.exception
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("Layer 2, head 2" in spec for spec in titles)  # the enlarged head follows the choice
    for view in ("lens", "saliency", "training", "attention"):
        at.segmented_control(key="inside_view").set_value(view).run()
        assert not at.exception and not at.error, view
    assert at.selectbox(key="inside_layer").value == 2  # the chosen head survives the other views
    at.segmented_control(key="inside_view").set_value("lens").run()
    assert any("Caveat" in m.value and "trained only on the last layer" in m.value for m in at.markdown)
    at.segmented_control(key="inside_view").set_value("training").run()
    assert any("No model has been trained" in i.value for i in at.info)


def test_new_sentence_masks_and_position(page):
    at = page
    at.text_area(key="inside_sentence").set_value("Paris is the capital of France.").run()
    assert not at.exception
    hidden = at.pills(key="inside_masked").value
    assert len(hidden) == 1  # the last word, to start with
    at.pills(key="inside_masked").set_value([1, *hidden]).run()
    assert not at.exception
    assert len(at.selectbox(key="inside_position").options) == 2  # look from either hidden token
    at.selectbox(key="inside_position").set_value(1).run()
    at.segmented_control(key="inside_view").set_value("saliency").run()
    assert not at.exception and not at.error
    at.button(key="inside_agreement_run").click().run()
    assert not at.exception and not at.error
    assert any("Over 24 sentences" in c.proto.spec for c in at.get("plotly_chart"))
    at.pills(key="inside_masked").set_value([]).run()
    assert any("Click at least one token" in i.value for i in at.info)
    at.text_area(key="inside_sentence").set_value("  ").run()
    assert any("empty" in w.value for w in at.warning)


def _store_with_a_trained_copy():
    base, tokenizer = load_masked_lm("tiny-random")
    trained = copy.deepcopy(base)
    with torch.no_grad():
        trained.cls.predictions.bias += torch.linspace(0, 1, trained.cls.predictions.bias.numel())
    store = TrainedModels()
    store.add("abc123.0", "full loss, trained from Tiny random BERT (run abc123)", trained, tokenizer, base)
    return store


def test_a_trained_model_beside_its_base(run_page):
    at = run_page("pages/inside.py", state={ui.KEYS.trained_models: _store_with_a_trained_copy()})
    choice = at.selectbox(key=ui.KEYS.trained_choice)
    assert choice.options[0].endswith("(sidebar)") and "Trained" in choice.options[1]
    at.segmented_control(key="inside_view").set_value("training").run()
    assert not at.exception and not at.error
    assert any("beside the model it started from" in m.value for m in at.markdown)
    assert {c.proto.id for c in at.get("plotly_chart")} and len(at.get("plotly_chart")) >= 4  # top-k ×2, loss, lens
    at.selectbox(key=ui.KEYS.trained_choice).set_value("abc123.0").run()  # look inside the trained copy itself
    assert not at.exception and not at.error
    assert "trained" not in at.query_params  # a trained model lives in this session only: never in a link
    for view in ("attention", "lens", "saliency"):
        at.segmented_control(key="inside_view").set_value(view).run()
        assert not at.exception and not at.error, view


def test_an_old_link_naming_a_trained_model_shows_the_sidebar_model(apptest):
    """Links no longer carry trained= (issue 24 item 8: a private id); an old one opens the sidebar's model."""
    at = apptest("pages/inside.py")
    at.query_params["trained"] = "ffff0000.1"
    at.run()
    assert not at.exception
    assert at.session_state[ui.KEYS.trained_choice] == ui.BASE_CHOICE
    assert "trained" not in at.query_params  # dropped from the address


def test_a_trained_model_the_session_no_longer_keeps_falls_back_with_a_notice(apptest):
    at = apptest("pages/inside.py", state={ui.KEYS.trained_choice: "ffff0000.1"})
    at.run()
    assert not at.exception
    assert any("no longer keeps" in i.value for i in at.info)
    assert at.session_state[ui.KEYS.trained_choice] == ui.BASE_CHOICE


def test_predictions_page_offers_the_trained_model(run_page):
    at = run_page("pages/predictions.py", state={ui.KEYS.trained_models: _store_with_a_trained_copy()})
    at.selectbox(key=ui.KEYS.trained_choice).set_value("abc123.0").run()
    assert not at.exception and not at.error
    assert any("full loss, trained from" in e.label for e in at.expander)  # the model panel names it


def test_a_link_carries_the_view(apptest):
    """view= in a share link opens the same view; choosing another view updates the link."""
    at = apptest("pages/inside.py")
    at.query_params["view"] = "lens"
    at.run()
    assert not at.exception
    assert not any("Session State API" in w.value for w in at.warning)  # no "default and session value" clash
    assert at.segmented_control(key="inside_view").value == "lens"
    at.segmented_control(key="inside_view").set_value("saliency").run()
    assert not at.exception
    assert at.query_params.get("view") in ("saliency", ["saliency"])
    at.segmented_control(key="inside_view").set_value("attention").run()
    assert "view" not in at.query_params  # the default is left out of the link


def test_the_lens_profile_masks_with_the_learners_rule(apptest):
    """The logit lens over many sentences reads the [MASK]s of the rule the link sets, not BERT's 15%."""
    at = apptest("pages/inside.py")
    at.query_params.update({"p": "0.5", "strategy": "whole_word", "view": "lens"})
    at.run()
    assert not at.exception
    assert "the rule set on the Masking page (whole word masking, p = 50%" in _markdown(at)
    nothing = apptest("pages/inside.py")  # a link whose rule masks nothing
    nothing.query_params.update({"p": "0", "view": "lens"})
    nothing.run()
    assert not nothing.exception
    assert any("puts no [MASK]" in i.value for i in nothing.info)


def test_the_lens_profile_uses_the_sidebars_seed_on_held_out_sentences(apptest):
    """Issue 24 §3.7 / 25 §3.5: the curve over many sentences said "seed 0" while the sidebar said 144, and ran on
    workshop sentences the bundled model had trained on. It now masks with the sidebar's seed the held-out
    sentences (the build's held-out documents), and says both."""
    import json

    from mlm_core.bundled import heldout_workshop_sentences
    from mlm_core.lessons.inside import lens_profile_on_texts
    from mlm_core.masking import MaskingConfig
    from mlm_core.models import load_masked_lm

    at = apptest("pages/inside.py")
    at.query_params.update({"seed": "144", "view": "lens"})
    at.run()
    assert not at.exception
    said = _markdown(at)
    assert "drawn with the sidebar's seed 144" in said and "seed 0" not in said
    assert "never trained on" in said
    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    expected = lens_profile_on_texts(model, tokenizer, heldout_workshop_sentences()[:128], seed=144,
                                     config=MaskingConfig())
    spec = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.id.endswith("inside_lens_profile_fig")
                or "inside_lens_profile_fig" in c.proto.id)
    top5 = next(trace["y"] for trace in spec["data"] if "top 5" in (trace.get("name") or ""))
    assert [round(v, 6) for v in top5] == [round(float(v), 6) for v in expected.top5]


def test_the_filmstrip_of_the_position_looked_from_base_then_trained(run_page):
    """Issue 27 §3: the Training page's filmstrip on Inside the model, two frames: the base model, then the trained."""
    at = run_page("pages/inside.py", state={ui.KEYS.trained_models: _store_with_a_trained_copy()})
    at.segmented_control(key="inside_view").set_value("training").run()
    assert not at.exception and not at.error
    film = next(json.loads(e.proto.spec) for e in at.get("plotly_chart") if e.proto.id.endswith("inside_film_fig"))
    heat = next(t for t in film["data"] if t["type"] == "heatmap")
    assert heat["x"] == ["base", "trained"] and len(heat["y"]) == 5
    ranks = next(t for t in film["data"] if t["type"] == "scatter" and t.get("mode") == "lines+markers+text")["y"]
    summary = next(m.value for m in at.markdown if m.value.startswith("The hidden word"))
    assert f"rank {ranks[0]:,} at the base model to rank {ranks[1]:,} at the trained model" in summary.replace("\\", "")
