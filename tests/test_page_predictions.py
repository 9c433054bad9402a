"""AppTest of the Predictions page with the tiny random BERT: mask, predict, switch fill modes."""

import pytest

import ui


@pytest.fixture
def page(apptest):
    at = apptest("pages/predictions.py")
    at.session_state[ui.KEYS.model] = "tiny-random"
    at.run()
    assert not at.exception
    return at


def _chart_keys(at):
    return {c.proto.id for c in at.get("plotly_chart")}


def test_mask_predict_and_switch_fill_modes(page):
    at = page
    assert not at.error
    headers = [h.value for h in at.subheader]
    assert headers.index("What the model sees") < headers.index("What it should predict")
    assert any(m.label == "MLM loss of this sentence" for m in at.metric)

    pills = at.pills(key="pred_positions")
    tokens_picked = list(pills.value)
    assert len(tokens_picked) == 1  # one word is hidden to start with
    pills.set_value(tokens_picked + [1, 2]).run()  # click two more tokens
    assert not at.exception
    assert sorted(at.session_state["pred_positions"]) == sorted(set(tokens_picked + [1, 2]))

    for corruption in ("a random token", "left unchanged", "BERT's 80/10/10 draw", "[MASK]"):
        at.radio(key="pred_corruption").set_value(corruption).run()
        assert not at.exception

    for view in ("independent", "iterative", "side by side"):
        at.radio(key="pred_fill_mode").set_value(view).run()
        assert not at.exception
    assert any("iterative" in m.value for m in at.markdown)

    at.slider(key="pred_k").set_value(8).run()
    assert not at.exception


def test_typed_sentence_and_no_tokens_picked(page):
    at = page
    at.text_area(key="pred_sentence").set_value("A <b>bold</b> claim about 5 dogs.").run()
    assert not at.exception
    at.pills(key="pred_positions").set_value([]).run()
    assert not at.exception
    assert any("Click at least one token" in i.value for i in at.info)
    at.text_area(key="pred_sentence").set_value("   ").run()
    assert not at.exception
    assert any("empty" in w.value for w in at.warning)


def test_sentence_from_the_masking_page_and_corpus_comparison(apptest):
    at = apptest("pages/masking.py")
    at.session_state[ui.KEYS.model] = "tiny-random"
    at.run()
    assert not at.exception
    shared = at.session_state[ui.KEYS.masking]

    page = apptest("pages/predictions.py")
    page.session_state[ui.KEYS.model] = "tiny-random"
    page.session_state[ui.KEYS.masking] = shared
    page.session_state["pred_source"] = "Take it from the Masking page"
    page.run()
    assert not page.exception
    assert any("From the Masking page" in c.value for c in page.caption)

    page.select_slider(key="pred_corpus_n").set_value(32)
    page.button(key="pred_corpus_run").click().run()
    assert not page.exception
    assert page.session_state["pred_corpus"][3].positions


def test_nothing_from_the_masking_page_falls_back(apptest):
    at = apptest("pages/predictions.py")
    at.session_state[ui.KEYS.model] = "tiny-random"
    at.session_state["pred_source"] = "Take it from the Masking page"
    at.run()
    assert not at.exception
    assert any("Nothing has been masked" in i.value for i in at.info)


def test_a_model_that_cannot_load_shows_an_error_not_a_traceback(apptest, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    at = apptest("pages/predictions.py")
    at.session_state[ui.KEYS.model] = "tiny-random"
    at.session_state[ui.KEYS.custom_model] = "nobody-here/no-such-model"
    at.run()
    assert not at.exception
    assert any("tiny-random" in e.value and "no-such-model" in e.value for e in at.error)
