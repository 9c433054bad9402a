"""ui.controls: on_demand keeps a button's result with the inputs it was computed for (changed inputs get a
note, an explainable failure shows its message and keeps the last result); the batch picker returns the
seed's workshop sentences or the learner's own, clipped."""

from streamlit.testing.v1 import AppTest


def app():
    import streamlit as st

    import ui
    from mlm_core.errors import InputError

    inputs = st.session_state.get("inputs", 1)

    def compute():
        if inputs < 0:
            raise InputError("negative inputs")
        return inputs * 10

    result = ui.on_demand("Measure", "demo", "measuring…", inputs, compute)
    st.write(f"result={result}")


def _texts(at):
    return [m.value for m in at.markdown] + [c.value for c in at.caption]


def test_result_is_kept_with_its_inputs_and_a_change_is_noted():
    at = AppTest.from_function(app, default_timeout=60).run()
    assert "result=None" in _texts(at)
    at.button(key="demo_run").click().run()
    assert "result=10" in _texts(at) and not at.caption
    at.session_state["inputs"] = 2
    at.run()
    assert "result=10" in _texts(at)  # still the measured one ...
    assert any("changed since this was measured" in c.value for c in at.caption)  # ... and said to be stale
    at.button(key="demo_run").click().run()
    assert "result=20" in _texts(at) and not at.caption


def test_a_failure_is_shown_and_the_last_result_stays():
    at = AppTest.from_function(app, default_timeout=60).run()
    at.button(key="demo_run").click().run()
    at.session_state["inputs"] = -1
    at.button(key="demo_run").click().run()
    assert [e.value for e in at.error] == ["negative inputs"]
    assert "result=10" in _texts(at) and not at.exception


def batch_app():
    import streamlit as st

    import ui

    st.session_state["batch"] = ui.batch_sentences_controls("demo", st.session_state.get("seed_for_test", 0), n=3,
                                                            max_chars=40)


def test_the_batch_is_the_seeds_workshop_sentences_or_the_learners_own_clipped():
    from mlm_core.bundled import workshop_sentences
    from mlm_core.lessons.loss_lab import pick_sentences

    at = AppTest.from_function(batch_app, default_timeout=60).run()
    assert at.session_state["batch"] == pick_sentences(workshop_sentences(), 3, 0)
    at.session_state["seed_for_test"] = 5
    at.run()
    assert at.session_state["batch"] == pick_sentences(workshop_sentences(), 3, 5)
    at.radio(key="demo_source").set_value("Your text").run()
    at.text_area(key="demo_text").input("The cat sat. A dog ran. Birds sing at dawn, and the sun is up.").run()
    assert at.session_state["batch"] == ["The cat sat.", "A dog ran.", "Birds sing at"]  # cut at a word, <= 40
    assert any("first 40 characters" in i.value for i in at.info)


def encode_app():
    import streamlit as st

    import ui
    from mlm_core.bundled import load_default_tokenizer

    encoded = ui.encode_or_stop(load_default_tokenizer(), st.session_state["text"], max_tokens=8)
    st.write(f"tokens={len(encoded.tokens[0])}")


def test_encode_or_stop_notes_a_cut_and_stops_on_a_problem():
    at = AppTest.from_function(encode_app, default_timeout=60)
    at.session_state["text"] = "the cat sat"
    at.run()
    assert "tokens=5" in _texts(at) and not at.info  # [CLS] the cat sat [SEP]
    at.session_state["text"] = "the cat sat on the mat by the door"
    at.run()
    assert "tokens=8" in _texts(at) and any("first 8 tokens" in i.value for i in at.info)
    at.session_state["text"] = "   "
    at.run()
    assert not at.exception and at.error and not any(t.startswith("tokens=") for t in _texts(at))
