"""AppTest of the Loss page on the tiny random model: losses, gradient, K sweep and NSP training."""

def test_loss_page_end_to_end(apptest, monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    at = apptest("pages/losses.py", timeout=240)
    at.run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    labels = [m.label for m in at.metric]
    assert {"full softmax", "weighted", "sampled"} <= set(labels)
    # Change variant settings: weighting scheme, sampler, K.
    at.selectbox(key="loss_scheme").set_value("log")
    at.selectbox(key="loss_sampler").set_value("unigram")
    at.select_slider(key="loss_k").set_value(256)
    at.selectbox(key="loss_logq").set_value("log Q on the negatives")
    at.run()
    assert not at.exception, at.exception
    at.selectbox(key="loss_position").set_value(1)
    at.run()
    assert not at.exception, at.exception
    # The K sweep.
    at.button(key="loss_sweep_button").click()
    at.run()
    assert not at.exception, at.exception
    assert len(at.dataframe) >= 2
    # NSP training, then the combined loss.
    at.button(key="loss_nsp_button").click()
    at.run()
    assert not at.exception, at.exception
    labels = [m.label for m in at.metric]
    assert "NSP loss" in labels and "held-out accuracy before" in labels
    at.number_input(key="loss_nsp_weight").set_value(0.5)
    at.run()
    assert not at.exception, at.exception


def test_loss_page_own_text_and_empty(apptest, monkeypatch):
    monkeypatch.setenv("MLMLAB_MODEL", "tiny-random")
    at = apptest("pages/losses.py", timeout=240)
    at.run()
    at.radio(key="loss_source").set_value("Your text")
    at.run()
    assert not at.exception, at.exception
    at.text_area(key="loss_text").input("   ")
    at.run()
    assert not at.exception and at.warning
    at.text_area(key="loss_text").input("<script>alert(1)</script> The cat sat on the mat. Dogs bark at night.")
    at.run()
    assert not at.exception, at.exception
