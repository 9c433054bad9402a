"""What a workshop rehearsal found on the pages (figures and AppTests; the browser half is in
tests/browser/test_rehearsal.py): charts a projector can read, labels that do not collide, the
legend's words instead of enum names, and numbers that agree with the text beside them."""

import json
import math
import re
from pathlib import Path

import pytest

import ui
from mlm_core import Decision, MaskingConfig, mask_sentence
from mlm_core.bundled import workshop_sentences
from mlm_core.figures.losses import bar_label, k_sweep_figure, museum_figure
from mlm_core.figures.masking import DECISION_WORDS, decision_counts_figure
from mlm_core.figures.predictions import loss_per_position_figure, topk_figure
from mlm_core.lessons.masking_view import masking_statistics
from mlm_core.predict import Predictions, TokenPrediction
from tests.conftest import probe_panels_label_every_candidate

ENUM_NAMES = {"MASK", "RANDOM", "UNCHANGED", "NOT_SELECTED", "SPECIAL"}


def _prediction(position: int, loss: float, k: int = 5) -> TokenPrediction:
    probs = tuple(0.1 / (i + 1) for i in range(k))
    return TokenPrediction(row=0, position=position, seen_id=103, seen_token="[MASK]", true_id=2000 + position,
                           true_token=f"w{position}", top_ids=tuple(range(1000, 1000 + k)),
                           top_tokens=tuple(f"t{i}" for i in range(k)), top_probs=probs, true_prob=math.exp(-loss),
                           true_rank=50, entropy=5.0, loss=loss, decision=Decision.MASK)


# --------------------------------------------------------------------------- figures
@pytest.mark.parametrize("revealed", [0, 1, 3])
def test_decision_counts_have_whole_token_ticks(revealed):
    """Masking: while stepping, the counts are 0 or 1: the axis says 0, 1 (it said 0, 0.2, 0.4 … tokens)."""
    counts = {"MASK": min(revealed, 1), "NOT_SELECTED": max(revealed - 2, 0), "SPECIAL": min(revealed, 1)}
    fig = decision_counts_figure(counts, revealed=revealed, total=16)
    axis = fig.layout.xaxis
    assert axis.dtick == 1 and axis.tickformat == "d"
    assert axis.range[1] >= 1  # nothing revealed yet: still an axis of whole tokens, not a fraction of one


def test_two_facets_leave_room_for_the_next_title():
    """Predictions and Quiz: with two blanks, the second facet's title ran over the first facet's tick labels."""
    predictions = Predictions(positions=(_prediction(2, 3.0), _prediction(6, 2.0)), k=5, vocab_size=30522)
    for bar_height in (22, 36):  # screen and presenter view
        fig = topk_figure(predictions, bar_height=bar_height)
        plot_height = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        gap_px = (fig.layout.yaxis.domain[0] - fig.layout.yaxis2.domain[1]) * plot_height  # facet 1 above 2
        assert gap_px >= 70, (bar_height, gap_px)


def test_loss_labels_are_not_struck_through_when_the_mean_nears_log_v():
    """Predictions: a mean loss of 9.6 beside log V = 10.3 put each label across the other line."""
    predictions = Predictions(positions=(_prediction(3, 9.6),), k=5, vocab_size=30522)
    fig = loss_per_position_figure(predictions)
    labels = {a.text.split(" ")[0]: a for a in fig.layout.annotations}
    mean, uniform = labels["MLM"], labels["ln"]
    assert uniform.text == "ln V = 10.33 (uniform guess over V = 30,522 tokens)"
    assert mean.yanchor == "top"  # below its own line, away from log V above it
    assert uniform.yanchor == "bottom"  # above its own line, away from the mean below it


def test_museum_bars_read_like_the_cards_and_fit_under_the_legend():
    """Bug museum: a bar read "3" beside a card's 2.995; the tallest label had no room above it."""
    assert [bar_label(v) for v in (2.995, 17.52, 0.005186, 3.0)] == ["3.00", "17.5", "0.00519", "3.00"]

    class Exhibit:
        def __init__(self, key, wrong, right):
            self.key, self.title, self.unit = key, key, "loss (nats)"
            self.wrong_value, self.right_value, self.labels, self.also = wrong, right, ("buggy code", "correct code"), {}

    fig = museum_figure([Exhibit("a", 17.52, 2.995), Exhibit("b", 3.243, 2.995)])
    assert list(fig.data[0].text) == ["17.5", "3.24"] and list(fig.data[1].text) == ["3.00", "3.00"]
    assert fig.layout.yaxis.range[1] >= 17.52 * 1.2
    assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1  # above the plot, never over a bar


def test_k_sweep_labels_only_powers_of_ten():
    """Loss: the log K axis read "10 2 5 100 2 5 1000"."""
    rows = [dict(K=k, correction="logq", label="importance sampling", loss=2.0, loss_std=0.1, rel_bias=-0.1,
                 grad_cosine=0.9, time_ms=1.0, full_loss=2.2, full_time_ms=2.0) for k in (16, 64, 256, 1024)]
    fig = k_sweep_figure(rows, vocab_size=30522)
    assert all(fig.layout[name].dtick == 1 for name in ("xaxis", "xaxis2", "xaxis3", "xaxis4"))


def test_wrap_title():
    text = "Which heads do what, measured on 32 sentences: mean share of attention on each pattern's tokens"
    lines = ui.wrap_title(text).split("<br>")
    assert len(lines) == 2 and all(len(line) <= ui.PRESENTER_TITLE_CHARS for line in lines)
    assert " ".join(lines) == text
    assert ui.wrap_title("short <b>bold</b> &lt;mask&gt;") == "short <b>bold</b> &lt;mask&gt;"


# --------------------------------------------------------------------------- pages
def _specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _presenter(at):
    at.session_state[ui.KEYS.presenter] = True
    return at


def test_inside_charts_are_room_sized_in_presenter_view(apptest):
    """Inside the model: in presenter view the charts kept 10-14 px ticks and titles; long titles ran off."""
    at = apptest("pages/inside.py")
    _presenter(at).run()
    assert not at.exception
    specs = _specs(at)
    assert specs
    for spec in specs:
        layout = spec["layout"]
        assert layout["xaxis"]["tickfont"]["size"] == ui.PRESENTER_CHART_FONT_PX
        assert layout["title"]["font"]["size"] == ui.PRESENTER_CHART_TITLE_PX
        title = layout["title"]["text"]
        assert all(len(line) <= ui.PRESENTER_TITLE_CHARS + 10 for line in title.split("<br>")), title
    patterns = next(s for s in specs if "Which heads do what" in s["layout"]["title"]["text"])
    assert "xaxis3" in patterns["layout"] and patterns["layout"]["xaxis"]["domain"][1] > 0.4  # 2 maps a row
    at.segmented_control(key="inside_view").set_value("lens").run()
    lens = _specs(at)[0]
    subtitles = [a["text"] for a in lens["layout"]["annotations"]]
    assert not any("green: the true token" in t for t in subtitles)  # every cell is green: the ✓ marks it


def test_home_flow_keeps_its_own_scale_in_presenter_view(apptest):
    """Home's flow picture went through the room-sizing chart helper (issue 28): at the room's font its step labels
    ran off the left edge ("4. head + loss" lost its "4") and [MASK] overflowed its box. It stays as drawn, as on main."""
    from mlm_core.figures.home import flow_figure

    at = _presenter(apptest("pages/home.py"))
    at.run()
    assert not at.exception
    (spec,) = _specs(at)
    drawn = json.loads(flow_figure().to_json())
    sizes = [[a.get("font", {}).get("size") for a in f["layout"]["annotations"]] for f in (spec, drawn)]
    assert sizes[0] == sizes[1] and 13 in sizes[0]
    assert spec["layout"]["height"] == drawn["layout"]["height"]


def test_loss_charts_are_room_sized_in_presenter_view(apptest):
    """The Loss page's charts stayed 320-380 px tall in presenter view (the guide says at least 600)."""
    at = _presenter(apptest("pages/losses.py", timeout=240))
    at.run()
    assert not at.exception
    heights = [spec["layout"]["height"] for spec in _specs(at)]
    assert heights and min(heights) >= ui.PRESENTER_CHART_HEIGHT, heights


def test_efficiency_chart_is_room_sized_in_presenter_view(apptest):
    """The Efficiency page's charts skipped ui.room_figure: 11 px ticks on the projector."""
    at = _presenter(apptest("pages/efficiency.py"))
    at.run()
    assert not at.exception
    layout = _specs(at)[0]["layout"]
    assert layout["height"] >= ui.PRESENTER_CHART_HEIGHT
    assert layout["yaxis"]["tickfont"]["size"] == ui.PRESENTER_CHART_FONT_PX


def test_museum_chart_is_room_sized_in_presenter_view(apptest):
    at = _presenter(apptest("pages/bug_museum.py", timeout=240))
    at.run()
    assert not at.exception
    layout = _specs(at)[0]["layout"]
    assert layout["height"] >= ui.PRESENTER_CHART_HEIGHT
    assert layout["yaxis"]["tickfont"]["size"] == ui.PRESENTER_CHART_FONT_PX


def _words_only(values) -> None:
    values = [v for v in values if v is not None]
    assert values and not set(values) & ENUM_NAMES, values
    assert set(values) <= set(DECISION_WORDS.values()), values


def test_predictions_tables_use_the_legends_words(apptest):
    at = apptest("pages/predictions.py")
    at.run()
    at.select_slider(key="pred_corpus_n").set_value(32)
    at.button(key="pred_corpus_run").click().run()
    assert not at.exception
    tables = [d.value for d in at.dataframe]
    summary = next(t for t in tables if "what masking did" in t.columns)
    _words_only(list(summary["what masking did"]))
    assert "mean_true_prob" not in summary.columns
    positions = next(t for t in tables if "true_token" in t.columns)
    _words_only(list(positions["decision"]))


def test_a_tiny_mean_probability_is_not_zero_percent(run_page):
    """Predictions: the metric read "0.0%" beside a chart bar labelled 6.7e-05 (the tiny model guesses at ~1/V)."""
    at = run_page("pages/predictions.py")
    value = next(m.value for m in at.metric if m.label == "mean p(true token)")
    assert any(c in "123456789" for c in value), value


def test_loss_table_uses_the_legends_words(run_page):
    at = run_page("pages/losses.py", timeout=240)
    table = next(d.value for d in at.dataframe if "decision" in d.value.columns)
    _words_only(list(table["decision"]))


def test_loss_quiz_table_uses_the_legends_words(apptest, tokenizer):
    at = apptest("pages/quiz.py")
    at.context["url"] = "http://localhost:8501/quiz"
    at.query_params.update({"quiz": "loss", "seed": "2"})
    at.run()
    key = next(b.key for b in at.button if b.key and b.key.startswith("quiz_reveal_"))
    at.button(key=key).click().run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "decision" in d.value.columns)
    _words_only(list(table["decision"]))


# --------------------------------------------------------------------------- the workshop guide's numbers
GUIDE_SENTENCE = "Unbelievably, the tokenizer splits rare words into several word pieces."


def _decisions(tokenizer, strategy: str, seed: int) -> dict[str, str]:
    masked = mask_sentence(tokenizer, GUIDE_SENTENCE, MaskingConfig(strategy=strategy), seed)
    shown = tokenizer.convert_ids_to_tokens(masked.result.input_ids[0][: len(masked.tokens)].tolist())
    return {f"{t}@{i}": (d if d != "RANDOM" else f"RANDOM:{shown[i]}")
            for i, (t, d) in enumerate(zip(masked.tokens, masked.decisions)) if d not in ("NOT_SELECTED", "SPECIAL")}


def test_the_guides_sentence_and_seeds(tokenizer):
    """docs/workshop.md, Before the class (4) and Masking (3): the example, its pieces and the seeds it names."""
    assert GUIDE_SENTENCE in (Path(__file__).parents[1] / "pages" / "masking.py").read_text()  # "the third example"
    assert tokenizer.tokenize("Unbelievably") == ["un", "##bel", "##ie", "##va", "##bly"]
    assert _decisions(tokenizer, "token", 144) == {
        "##bel@2": "MASK", "##va@4": "RANDOM:onset", "token@8": "MASK", "splits@10": "MASK",
        "rare@11": "UNCHANGED", "pieces@16": "UNCHANGED"}
    assert {k.split("@")[0] for k in _decisions(tokenizer, "whole_word", 148)} >= {"token", "##izer"}
    seed151 = _decisions(tokenizer, "whole_word", 151)
    assert all(f"{p}@{i}" in seed151 for i, p in enumerate(["un", "##bel", "##ie", "##va", "##bly"], 1))
    assert seed151["##ie@3"] == "UNCHANGED"  # selected per word, replaced per token


def test_the_guides_z_scores(tokenizer):
    """docs/workshop.md, Masking (4): at 10,000 tokens seed 144 gives z = −0.00 and seed 3 gives z = +3.24."""
    z = {seed: masking_statistics(tokenizer, workshop_sentences(), MaskingConfig(), target_tokens=10_000,
                                  seed=seed).selection.z for seed in (144, 3)}
    assert f"{z[144]:+.2f}" == "-0.00" and f"{z[3]:+.2f}" == "+3.24"


def test_home_lists_every_lesson_page_in_the_sidebars_order(run_page):
    """Home's "walk the pages in order" list left out Inside the model."""
    import ast
    from pathlib import Path

    app = ast.parse((Path(__file__).resolve().parent.parent / "app.py").read_text())
    pages = next(ast.literal_eval(node.value) for node in app.body
                 if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PAGES")
    titles = [title for _, title, _ in pages if title != "Home"]
    at = run_page("pages/home.py")
    listing = next(m.value for m in at.markdown if "Walk the pages in order" in m.value)
    found = [t for t in titles if f"**{t}**" in listing]
    assert found == titles, found
    assert sorted(titles, key=lambda t: listing.index(f"**{t}**")) == titles


# --------------------------------------------------------------------------- second rehearsal: small defects
PROBABILITY = re.compile(r"\d+\.\d%|\d\.\de-\d\d")  # figures.predictions.probability_text's two forms


def _frames(at) -> list:
    """Every table on the page, sortable or static, as a frame."""
    return [d.value for d in at.dataframe] + [t.value for t in at.table]


def _frame(at, column):
    return next(f for f in _frames(at) if column in f.columns)


def test_quiz_reveal_writes_each_probability_as_the_chart_does(apptest):
    """Quiz reveal: one probability read "school 12%", "12.06%" and "12.1%" in the table and the chart."""
    from mlm_core.figures.predictions import probability_text

    at = apptest("pages/quiz.py")
    at.context["url"] = "http://localhost:8501/quiz"
    at.query_params.update({"seed": "5"})
    at.run()
    at.button(key=next(b.key for b in at.button if b.key and b.key.startswith("quiz_reveal_"))).click().run()
    assert not at.exception
    table = _frame(at, "answer: p")
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    texts = {t.split(" · ")[0] for trace in chart["data"] for t in trace.get("text") or []}
    for p in table["answer: p"]:
        assert PROBABILITY.fullmatch(p) and p in texts, (p, texts)  # the chart's bar says the same
    for cell in list(table["model's top 5"]) + [p for p in table["your guess: p"] if p != "—"]:
        for item in cell.split(", "):
            assert PROBABILITY.fullmatch(item.rsplit(" ", 1)[-1]), cell
    assert probability_text(0.1206) == "12.1%"


def _decimals(text: str) -> int:
    number = text.replace("−", "-").replace("+", "").split(" ")[0]
    return len(number.split(".")[1]) if "." in number else 0


def test_loss_number_row_has_one_precision(run_page):
    """Loss: the row read full 2.24, sampled 2.09 next to weighted 4.523 (and cosine 0.873 beside 10.33)."""
    at = run_page("pages/losses.py", timeout=240)
    row = {m.label: m for m in at.metric if m.label in ("full softmax", "weighted", "sampled", "gradient cosine")}
    assert len(row) == 4
    places = {label: _decimals(m.value) for label, m in row.items()}
    places.update({f"{label} delta": _decimals(m.proto.delta) for label, m in row.items() if m.proto.delta})
    assert len(set(places.values())) == 1, {label: m.value for label, m in row.items()}
    bars = next(s for s in _specs(at) if s["data"] and list(s["data"][0].get("x") or [])[:3] == ["full", "weighted", "sampled"])
    assert sorted(bars["data"][0]["text"][:3]) == sorted(row[n].value for n in ("full softmax", "weighted", "sampled"))


def test_frequency_legend_says_the_count_leaves_the_special_tokens_out():
    """Tokenizer: "WordPiece 500 (53 of 495 entries unused)": the 5 missing entries are the special tokens."""
    from mlm_core.figures.vocab import frequency_profile_figure
    from mlm_core.lessons.vocab import frequency_profile
    from mlm_core.vocab import SPECIAL_TOKENS, wordpiece_from_vocab

    tok = wordpiece_from_vocab(["the", "cat", "##s"])
    profile = frequency_profile(tok, ["the cat the"])
    assert len(profile.counts) + len(SPECIAL_TOKENS) == len(tok) == 8
    assert set(tok.all_special_tokens) == set(SPECIAL_TOKENS) and not set(profile.tokens) & set(SPECIAL_TOKENS)
    fig = frequency_profile_figure([("wordpiece", "WordPiece 8", profile)])
    assert fig.data[0].name == "WordPiece 8 (1 of 3 non-special entries unused)"


def test_clearing_the_sentence_drops_the_step_from_the_link(apptest):
    """Masking: a cleared sentence left "step=2" in the share link while "sentence" was dropped."""
    at = apptest("pages/masking.py")
    at.query_params.update({"seed": "3"})
    at.run()
    at.button(key="masking_first").click().run()
    at.button(key="masking_next").click().run()
    at.button(key="masking_next").click().run()
    assert at.query_params["step"] in ("2", ["2"])
    at.text_area(key=ui.KEYS.sentence).set_value("").run()
    assert not at.exception
    assert "step" not in at.query_params, dict(at.query_params)
    assert at.query_params["seed"] in ("3", ["3"])  # the rest of the link stays
    at.text_area(key=ui.KEYS.sentence).set_value("A dog ran.").run()  # a new sentence: the step comes back
    assert at.query_params["sentence"] in ("A dog ran.", ["A dog ran."])


def test_probe_panels_label_every_candidate_at_room_size():
    """Training: at 20 px the probe panels (190 px each, gaps included) showed every other candidate."""
    from mlm_core.figures.training import probe_figure

    probes = [{"text": f"Veldoria sentence {i} with its [MASK] word.",
               "predictions": [{"position": 5, "answer": "c", "tokens": ["a", "b", "c", "d", "e"],
                                "probs": [0.3, 0.2, 0.1, 0.05, 0.01], "answer_prob": 0.1, "answer_rank": 3}]}
              for i in range(5)]
    fig = probe_figure(probes, title="facts: step 40", label_px=ui.PRESENTER_CHART_FONT_PX)
    layout = fig.to_plotly_json()["layout"]
    probe_panels_label_every_candidate(layout, 5, ui.PRESENTER_CHART_FONT_PX)
    assert all(a["font"]["size"] == ui.PRESENTER_CHART_FONT_PX for a in layout["annotations"])  # panel titles
    assert all(t.textfont.size == ui.PRESENTER_CHART_FONT_PX for t in fig.data)  # bar labels
    assert probe_figure(probes).layout.height == 140 + 190 * 5  # the screen layout is kept


def test_room_figure_wraps_each_line_of_a_title_that_has_its_own_lines():
    """The filmstrip's presenter title is a long first line and "<br>N of M evaluations": room_figure left any title
    with a <br> as it was, and its first line ran off the chart, hiding the hidden word at its end."""
    import plotly.graph_objects as go
    import streamlit as st

    from ui.settings import KEYS

    title = ("Variant: the guess at [MASK], evaluation by evaluation (hidden word <b>marrow</b>)"
             "<br>7 of 13 evaluations, evenly spaced (presenter view)")
    fig = go.Figure().update_layout(title=title, margin=dict(t=80))
    st.session_state[KEYS.presenter] = True
    try:
        ui.room_figure(fig)
    finally:
        del st.session_state[KEYS.presenter]
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) > 2 and lines[-1] == "7 of 13 evaluations, evenly spaced (presenter view)"
    assert all(len(re.sub(r"<[^>]*>", "", line)) <= ui.PRESENTER_TITLE_CHARS for line in lines)
    assert "marrow" in fig.layout.title.text and fig.layout.margin.t > 80  # room above the plot for the new line
