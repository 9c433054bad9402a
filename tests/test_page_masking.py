"""AppTest of the home and Masking pages: render, step, re-roll, and bad input without exceptions."""

import json

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto

import ui


@pytest.fixture
def masking_page(run_page):
    return run_page("pages/masking.py")


def test_app_and_home_render(run_page):
    at = run_page("app.py")
    assert any("MLM Lab" in t.value for t in at.title)


def test_step_through_and_reroll(masking_page):
    at = masking_page
    at.button(key="masking_first").click().run()
    assert at.session_state["masking_step"] == 0
    at.button(key="masking_next").click().run()
    at.button(key="masking_next").click().run()
    assert at.session_state["masking_step"] == 2
    assert any("Token 2 of" in m.value for m in at.markdown)
    at.button(key="masking_all").click().run()
    before = at.session_state[ui.KEYS.masking]["result"].decisions.clone()
    seed = at.session_state[ui.KEYS.seed]
    at.button(key="masking_reroll").click().run()
    assert not at.exception
    assert at.session_state[ui.KEYS.seed] == seed + 1
    after = at.session_state[ui.KEYS.masking]["result"].decisions
    # A different seed gives different decisions on this sentence (13 tokens; equal only by chance ~1e-3).
    at.session_state[ui.KEYS.seed] = seed
    at.run()
    assert (at.session_state[ui.KEYS.masking]["result"].decisions == before).all()
    assert not (after.shape == before.shape and bool((after == before).all()))


def n_tokens(at) -> int:
    return len(at.session_state[ui.KEYS.masking]["tokens"])


def test_reroll_keeps_the_view_mode(masking_page):
    """Issue 17.3: "Show all" stays all after a re-roll (the guide re-rolls until it sees a random token);
    while stepping, the step stays where it was."""
    at = masking_page
    at.button(key="masking_all").click().run()
    at.button(key="masking_reroll").click().run()
    assert at.session_state["masking_step"] == n_tokens(at)
    assert not any("Press **Next token" in m.value for m in at.markdown)
    at.button(key="masking_first").click().run()
    for _ in range(3):
        at.button(key="masking_next").click().run()
    at.button(key="masking_reroll").click().run()
    assert at.session_state["masking_step"] == 3
    assert any("Token 3 of" in m.value for m in at.markdown)


def counts_chart(at) -> dict:
    charts = [c for c in at.get("plotly_chart") if "Decisions" in c.proto.spec]
    assert len(charts) == 1
    figure = json.loads(charts[0].proto.spec)
    bar = figure["data"][0]
    return {"title": figure["layout"]["title"]["text"], "counts": dict(zip(bar["y"], bar["x"]))}


def test_decision_chart_counts_only_what_was_revealed(masking_page):
    """Issue 17.1/17.2: while stepping, the chart counts the revealed tokens only; after "Show all" the
    sentence's totals, in the legend's words, with [CLS]/[SEP] apart."""
    at = masking_page
    at.button(key="masking_first").click().run()
    chart = counts_chart(at)
    assert sum(chart["counts"].values()) == 0 and "0 of" in chart["title"]
    for _ in range(3):
        at.button(key="masking_next").click().run()
    chart = counts_chart(at)
    assert sum(chart["counts"].values()) == 3 and "3 of" in chart["title"]
    assert chart["counts"]["special"] == 1  # [CLS]
    at.button(key="masking_all").click().run()
    chart = counts_chart(at)
    result = at.session_state[ui.KEYS.masking]["result"]
    words = {label for _, (_, _, label) in ui.DECISION_STYLE.items()}
    assert set(chart["counts"]) == words, "the chart speaks the legend's words, never enum names"
    assert chart["counts"]["special"] == 2 and sum(chart["counts"].values()) == n_tokens(at)
    assert chart["counts"]["→ [MASK]"] == int((result.decisions == 1).sum())
    assert chart["counts"]["not selected"] == n_tokens(at) - 2 - int(result.selected.sum())


def test_hf_snippet_uses_the_sidebar_seed_and_sentence(masking_page):
    """Issue 17.4: the code shown masks the current sentence with the sidebar's seed, and says the collator's
    seed= will not reproduce MLM Lab's masks."""
    at = masking_page
    sentence = "Paris is the capital of France."
    at.text_area(key=ui.KEYS.sentence).set_value(sentence).run()
    at.session_state[ui.KEYS.seed] = 42
    at.run()
    code = " ".join(c.value for c in at.code)
    assert repr(sentence) in code and "seed=42" in code and "seed=0" not in code
    assert any("will not reproduce" in m.value for m in at.markdown)
    for strategy in ("span", "exact_count"):
        at.radio(key="masking_strategy").set_value(strategy).run()
        assert not any("DataCollatorForLanguageModeling(" in c.value for c in at.code), strategy
        assert any("no Hugging Face collator" in m.value for m in at.markdown), strategy


def test_strategy_names_say_whose_scheme_it_is(masking_page):
    """Issue 14.5: independent per-word draws are Hugging Face's scheme; Google's is the exact count."""
    at = masking_page
    at.radio(key="masking_strategy").set_value("whole_word").run()
    captions = " ".join(c.value for c in at.caption)
    assert "Hugging Face" in captions and "whole_word_mask=True" in captions
    assert "Google BERT's whole-word" not in captions and "(BERT's whole-word masking)" not in captions
    at.radio(key="masking_strategy").set_value("exact_count").run()
    assert "Google BERT's" in " ".join(c.value for c in at.caption)


def test_strategy_rates_and_statistics(masking_page):
    at = masking_page
    at.radio(key="masking_strategy").set_value("whole_word").run()
    at.slider(key="masking_p").set_value(0.3).run()
    assert at.session_state[ui.KEYS.masking]["config"].mlm_probability == 0.3
    at.slider(key="masking_random").set_value(0.5).run()  # 0.8 + 0.5 > 1
    assert not at.exception
    assert any("more than 1" in e.value for e in at.error)
    at.slider(key="masking_random").set_value(0.1).run()
    at.select_slider(key="masking_stats_tokens").set_value(1_000).run()
    at.button(key="masking_stats_run").click().run()
    assert not at.exception
    labels = [m.label for m in at.metric]
    assert "80/10/10 χ² p-value (per token)" in labels


def metric(at, label):
    found = [m for m in at.metric if m.label == label]
    assert found, [m.label for m in at.metric]
    return found[0]


@pytest.mark.parametrize("strategy, rate_label, split_label, has_z", [
    ("token", "tokens selected", "80/10/10 χ² p-value (per token)", True),
    ("whole_word", "words selected", "80/10/10 χ² p-value (per token)", True),
    ("exact_count", "measured", "80/10/10 χ² p-value (per token)", False),
    ("span", "measured", "80/10/10 χ² p-value (per span)", False),
])
def test_rate_statistics_only_where_valid(masking_page, strategy, rate_label, split_label, has_z):
    """Issue 14.3: a z-score only where the count is binomial (per token, per word); the rule's expected count
    beside the measured one for exact count and span; the 80/10/10 χ² per span when a span shares one decision.
    Issue 17.5: the z badge carries no trend arrow."""
    at = masking_page
    at.radio(key="masking_strategy").set_value(strategy).run()
    at.select_slider(key="masking_stats_tokens").set_value(1_000).run()
    at.button(key="masking_stats_run").click().run()
    assert not at.exception
    rate = metric(at, rate_label)
    metric(at, split_label)
    if has_z:
        assert rate.proto.delta.startswith("z = ")
        assert rate.proto.direction == MetricProto.MetricDirection.NONE, "a z-score is not a trend: no arrow"
    else:
        assert not rate.proto.delta and not any("z = " in m.proto.delta for m in at.metric)
        stats = at.session_state["masking_stats"][2]
        assert rate.value == f"{stats.selection.rate:.2%}"
        assert metric(at, "the rule selects").value == f"{stats.selection.expected_rate:.2%}"


@pytest.mark.parametrize(
    "text, expect",
    [
        ("", "empty"),
        ("    \n  ", "empty"),
        ("word " * 5000, "longer than 128 tokens"),
        ("🙂 猫はマットの上に座った。 القطة جلست على الحصيرة", None),
        ("<script>alert(1)</script> <img src=x onerror=alert(2)>", None),
    ],
)
def test_bad_and_strange_input(masking_page, text, expect):
    at = masking_page
    at.text_area(key=ui.KEYS.sentence).set_value(text).run()
    assert not at.exception
    messages = " ".join(x.value for x in list(at.warning) + list(at.info) + list(at.error))
    if expect:
        assert expect in messages
    else:
        html = " ".join(m.value for m in at.markdown)
        assert "<script>" not in html and "<img" not in html
        if "script" in text:
            assert "&lt;" in html


@pytest.mark.parametrize("strategy", ["token", "span"])
def test_page_masks_with_mask_sentence(masking_page, tokenizer, strategy):
    """Issue 17.20: the page's masks are mlm_core.mask_sentence(tokenizer, sentence, config, seed), the one
    path every page (the Quiz too) calls."""
    import torch

    from mlm_core import mask_sentence

    at = masking_page
    at.radio(key="masking_strategy").set_value(strategy).run()
    shared = at.session_state[ui.KEYS.masking]
    masked = mask_sentence(tokenizer, shared["sentence"], shared["config"], shared["seed"])
    assert torch.equal(shared["result"].input_ids, masked.result.input_ids)
    assert torch.equal(shared["result"].decisions, masked.result.decisions)


def test_link_carries_the_span_replacement(apptest):
    """The whole rule travels in a shared link, span replacement included."""
    at = apptest("pages/masking.py")
    at.query_params.update({"strategy": "span", "span_replace": "per_token", "seed": "5"})
    at.run()
    assert not at.exception
    config = at.session_state[ui.KEYS.masking]["config"]
    assert (config.strategy, config.span_replacement) == ("span", "per_token")
    at.radio(key="masking_span_replacement").set_value("per_span").run()
    assert "span_replace" not in at.query_params  # the default is left out of the link
    at.radio(key="masking_span_replacement").set_value("per_token").run()
    assert at.query_params["span_replace"] == ["per_token"] or at.query_params["span_replace"] == "per_token"


@pytest.mark.parametrize("page, key", [("pages/masking.py", "masking_example"), ("pages/predictions.py", "pred_example")])
def test_example_picker_follows_a_shared_sentence(apptest, page, key):
    """A link's sentence that is one of the examples shows in the picker; another sentence shows 'your own'."""
    listed = _examples(page)
    for sentence, expected in [(listed[2], listed[2]), ("A sentence of my own.", ui.CUSTOM_SENTENCE)]:
        at = apptest(page)
        at.query_params.update({"sentence": sentence})
        at.run()
        assert not at.exception
        assert at.selectbox(key=key).value == expected
        assert ui.CUSTOM_SENTENCE in at.selectbox(key=key).options


def _examples(page: str) -> list[str]:
    """A page's EXAMPLES list, read from its source (importing a page would run it)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(page).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "EXAMPLES")
    return ast.literal_eval(node.value)
