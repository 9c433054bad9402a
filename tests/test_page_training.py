"""AppTest of the Training page: configure, start, see progress and curve data, stop."""

import json
import time
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

PAGE = Path(__file__).resolve().parent.parent / "pages" / "training.py"


@pytest.fixture(autouse=True)
def tiny(monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def charts(at):
    """{key: plotly spec} of the charts on the page."""
    out = {}
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        out[element.proto.id] = spec
    return out


def test_start_progress_curves_stop():
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.run()
    assert not at.exception
    assert at.button(key="training_start").label == "▶ Start training"
    assert at.button(key="training_stop").label == "■ Stop run"
    at.slider(key="training_steps").set_value(200)  # long enough that we stop it
    at.select_slider(key="training_batch").set_value(2)
    at.select_slider(key="training_seq_len").set_value(32)
    at.number_input(key="training_eval_every").set_value(2)
    at.multiselect(key="training_variants").set_value(["full", "weighted"])
    at.run()
    assert not at.exception
    at.button(key="training_start").click().run()
    assert not at.exception
    run = at.session_state["training_run"]

    # AppTest does not tick run_every fragments: rerun until the run reports progress.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
        assert not at.exception
        snap = run.snapshot()
        if snap.step >= 3 and all(v.evals and len(v.evals) >= 2 for v in snap.variants.values()):
            break
    assert snap.step >= 3, snap
    at.run()
    progress = [p for p in at.get("progress")]
    assert progress and "step" in progress[0].proto.text
    specs = [s for s in charts(at).values()]
    loss = next(s for s in specs if "Training loss" in json.dumps(s.get("layout", {}).get("title", "")))
    names = {trace.get("name") for trace in loss["data"]}
    assert {"Full cross-entropy", "Weighted by frequency"} <= names
    ys = [y for trace in loss["data"] for y in (trace.get("y") or []) if y is not None]
    assert len(ys) >= 6 and all(y > 0 for y in ys)

    at.button(key="training_stop").click().run()
    assert not at.exception
    assert run.wait(120)
    assert run.status == "stopped"
    at.run()
    assert not at.exception
    assert at.session_state["training_run"].snapshot().step < 200
    assert at.get("download_button")  # the CSV export
    assert at.get("arrow_data_frame") or at.get("dataframe")
    assert at.button(key="training_start").disabled is False


def test_lesson_preset_builds_two_clipping_variants():
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.run()
    at.radio(key="training_lesson").set_value("lr_too_high").run()
    assert not at.exception
    assert any("clipping" in info.value for info in at.info)
    assert at.select_slider(key="training_lr_lr_too_high_True").value == 3e-2


def test_empty_paste_is_a_warning_not_a_crash():
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.run()
    at.radio(key="training_source").set_value("Paste text").run()
    assert not at.exception
    assert at.warning and "empty" in at.warning[0].value
    assert at.button(key="training_start").disabled


def test_a_vocabulary_from_the_tokenizer_page_trains_the_tiny_model():
    """The Tokenizer page hands a trained vocabulary over; the Training page builds a tiny model of that size."""
    import ui
    from mlm_core.bundled import workshop_sentences
    from mlm_core.vocab import train_tokenizer

    vocab = train_tokenizer(workshop_sentences()[:300], 600)
    at = AppTest.from_file(str(PAGE), default_timeout=120)
    at.session_state[ui.KEYS.trained_tokenizer] = vocab
    at.run()
    assert not at.exception
    options = at.radio(key="training_model").options
    assert any(vocab.label in o for o in options)
    at.radio(key="training_model").set_value("tiny-random+vocab").run()
    assert not at.exception
    model = ui.cached_tiny_for_vocab(vocab, f"{vocab.algorithm}-{vocab.vocab_size}-{vocab.corpus_hash}")[0]
    assert model.config.vocab_size == len(vocab.tokenizer)
