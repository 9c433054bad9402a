"""Predictions: what the model sees, what it should predict, and what it guesses at every selected position."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError
from mlm_core.bundled import heldout_workshop_sentences
from mlm_core.data import clip_text, mask_sentence
from mlm_core.default_model import read_build_record
from mlm_core.figures.predictions import (
    decision_comparison_figure,
    fill_comparison_figure,
    loss_per_position_figure,
    topk_figure,
)
from mlm_core.lessons import model_card
from ui import share_state
from mlm_core.lessons import predictions as lesson  # the page's view-model
from mlm_core.lessons.prose import LessonText
from mlm_core.models import available_models, model_description
from mlm_core.predict import MASK_PREDICT_ITERATIONS, predict_typed_blanks, pseudo_log_likelihood, typed_blanks

MAX_TOKENS = 128  # one sentence: BERT's usual pre-training length
MAX_CHARS = 4_000
MAX_FILL = 8  # iterative filling runs the model once per position

EXAMPLES = [
    "The cat sat on the mat and watched the birds in the garden.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "I drink a cup of coffee every morning before I walk to work.",
    "Masked language models learn by predicting the words that were hidden from them.",
    "She opened the door, turned on the light and sat down to read a book.",
]
# How the tokens you click are corrupted: (share → [MASK], share → random); the rest stay unchanged.
CORRUPTIONS = {
    "[MASK]": (1.0, 0.0),
    "a random token": (0.0, 1.0),
    "left unchanged": (0.0, 0.0),
    "BERT's 80/10/10 draw": (0.8, 0.1),
}
# in links: source=
SOURCES = dict(zip(share_state.PREDICTION_SOURCES, ("Mask it here", "Take it from the Masking page")))
FILL_VIEWS = ("side by side", "independent", "easy_first", "mask_predict")
PLL_KEY = "pred_pll"  # (model, ids) -> PseudoLogLikelihood, computed on request
OWN_KEY = "pred_own_sentence"  # a sentence typed here, for this page only; None: the lesson's sentence
KEPT_KEY = "pred_positions_kept"  # (tokens, positions): the clicked tokens, kept when the page is left
TEXT = LessonText("predictions")  # mlm_core/lessons/text/predictions.md

# "Mask it here" shows this page's own sentence when one was typed, and its link carries that one (the
# lesson's stays as it is); without one (None) the link carries the lesson's, which the page shows then
settings = ui.page_setup("🔮 Predictions: what the model guesses", link=share_state.PAGE_LINKS["predictions"],
                         shown={"sentence": OWN_KEY} if st.session_state.get("pred_source", "here") == "here"
                         else None)
st.markdown(TEXT("intro"))


# --------------------------------------------------------------------------- the model
@st.cache_data(max_entries=8, show_spinner=False)
def cached_copy_checks(key: str, _model, _tokenizer):
    """The model's first guesses on a few everyday sentences (model_card.COPY_SENTENCES): one forward pass."""
    return model_card.copy_checks(_model, _tokenizer)


def how_trained(model, tokenizer, record) -> None:
    """How the bundled model was trained, each objective in a sentence from its build record, and what it does
    on everyday sentences, measured now."""
    story = model_card.training_story(record)
    if story:
        st.markdown("**How it was trained** (from its build record, `assets/default_mlm/build.json`):\n"
                    + "\n".join(f"- {line}" for line in story))
    repeat = model_card.repeat_scores(record)
    if repeat is not None:
        st.caption(model_card.repeat_sentence(repeat))
    checks = cached_copy_checks(f"{settings.model_name or 'default'}:{id(model)}", model, tokenizer)
    st.markdown(model_card.copy_sentence(checks) + " " + model_card.HUB_NOTE)


def model_panel(model, tokenizer) -> None:
    """The model's facts and, for the bundled one, its build record's scores and how it was trained."""
    about = model_description(model, tokenizer)
    label = ui.markdown_text(about["label"])  # the name a learner typed
    if about.get("trained") is False:
        st.warning(f"**{label}**: this prediction head is untrained, so its guesses are noise until it is trained "
                   "(Training page). Details below.")
    with st.expander(f"Model: {label}", expanded=False):
        if about.get("warning"):
            st.info(ui.markdown_text(about["warning"]))
        if about.get("description"):
            st.caption(ui.markdown_text(about["description"]))  # may name the folder or id a learner typed
        record = read_build_record()
        ui.metric_row(model_card.model_metrics(about, record))
        st.caption(f"Mask token {ui.inline_code(about['mask_token'])} · head: {about['head']} · {about['device']}, "
                   f"{about['dtype']}")
        if about.get("scores"):
            ui.metric_row(model_card.score_metrics(about["scores"]))
            if model_card.benchmark_metrics(about["scores"]):
                ui.metric_row(model_card.benchmark_metrics(about["scores"]))
                st.caption(model_card.BENCHMARK_CAPTION)
            st.caption(model_card.build_caption(about["scores"]))
            how_trained(model, tokenizer, record)
        st.markdown("**Models you can pick in the sidebar**")
        ui.table(pd.DataFrame([{"model": m["name"] or ui.DEFAULT_MODEL, "offline now": "✅" if m["offline"] else
                                "⬇ download", "note": m["note"]} for m in available_models()]))


model, tokenizer = ui.model_or_stop(settings)
model, tokenizer, trained_entry = ui.trained_model_choice(model, tokenizer)  # a model trained here, if chosen
# What a kept result was computed on: the sidebar's model, or which trained one (never the base's numbers for it).
model_key = (settings.model_name, trained_entry.key if trained_entry is not None else None)
model_panel(model, tokenizer)


# --------------------------------------------------------------------------- the masked sentence
def sentence_controls() -> str:
    """The sentence to mask here: the lesson's (Masking page, link), or one typed here for this page only.

    A sentence typed or picked here never silently becomes the lesson's sentence on the other pages: it
    is marked as this page's own, with a button back to the lesson's and one to make it the lesson's.
    """
    state = st.session_state
    shared = state.get(ui.KEYS.sentence) or EXAMPLES[0]
    own = state.get(OWN_KEY)
    state["pred_sentence"] = shared if own is None else own

    def adopt():
        text = state.get("pred_sentence") or ""
        state[OWN_KEY] = None if text.strip() == shared.strip() else text

    def back():
        state[OWN_KEY] = None

    def make_lesson():
        state[ui.KEYS.sentence], state[OWN_KEY] = state[OWN_KEY], None

    c1, c2 = st.columns([1, 2])
    ui.example_picker(EXAMPLES, key="pred_example", sentence_key="pred_sentence", container=c1, on_pick=adopt)
    text = c2.text_area("…or type your own sentence", key="pred_sentence", height=80, on_change=adopt)
    if own is not None:
        st.caption(TEXT("own_sentence", lesson=ui.markdown_text(shared)))
        b1, b2, _ = st.columns([1, 1, 1])
        b1.button("↩ Back to the lesson's sentence", key="pred_own_back", on_click=back, width="stretch")
        b2.button("📌 Use it on every page", key="pred_own_share", on_click=make_lesson, width="stretch",
                  help="Make it the lesson's sentence: the Masking page and the others show it too.")
    return text


def pick_controls(tokens: list[str], word_ids: list[int]) -> tuple[list[int], tuple[float, float]]:
    """Which tokens to hide (clicked), and how: returns (positions, (mask share, random share))."""
    state = st.session_state
    options = lesson.blank_options(tokens, word_ids, tokenizer.unk_token)
    if not options:
        st.info(TEXT("no_blank", unk=ui.markdown_text(tokenizer.unk_token or "[UNK]")))
        st.stop()
    kept_for, kept = state.get(KEPT_KEY, (None, []))
    if "pred_positions" in state and state.get("pred_positions_for") == tokens:
        picked = state["pred_positions"]  # this visit's clicks
    elif kept_for == tokens:
        picked = kept  # back on the page: the pills lost their value, the page did not
    else:  # a new sentence
        first = lesson.default_blank(tokens, word_ids, tokenizer.unk_token)  # a content word: no punctuation, no [UNK]
        picked = [first] if first is not None else []
    state["pred_positions"] = [p for p in picked if p in options]
    state["pred_positions_for"] = tokens
    chosen = ui.token_pills("Click the tokens to hide from the model", tokens, options, key="pred_positions")
    state[KEPT_KEY] = (tokens, chosen)
    how = st.radio("The clicked tokens become", list(CORRUPTIONS), horizontal=True, key="pred_corruption",
                   help=TEXT("corruption_help"))
    return chosen, CORRUPTIONS[how]


def from_masking_page() -> lesson.MaskedExample | None:
    """The Masking page's masks, rebuilt from the shared sentence, seed and rule (the link's, or this session's).

    Through the Masking page's own path (``mask_sentence``): a student who opens a Predictions link gets the
    masks the class stepped through, without visiting the Masking page first.
    """
    values = ui.sync_query_params()
    text, _ = clip_text(values.get("sentence") or "", MAX_CHARS)
    if not text:
        st.info("The shared sentence is empty: type one on the Masking page, or mask one here.")
        return None
    ui.language_note(text, settings.model_name, model)
    try:
        config = share_state.masking_config(values)
        masked = mask_sentence(tokenizer, text, config, settings.seed, max_length=MAX_TOKENS)
    except MLMLabError as exc:
        ui.show_error(exc)
        return None
    st.caption(TEXT("from_masking_page", seed=settings.seed, strategy=config.strategy.replace("_", " "),
                    p=config.mlm_probability))
    return lesson.masking_page_example(masked)


def typed_blank_lesson(tokens: list[str], encoded, blanks: list[int]) -> None:
    """A sentence with blanks the learner typed: the model's guesses there (no true token, so no loss)."""
    st.info(lesson.typed_blanks_note(len(blanks), ui.inline_code(tokenizer.mask_token)))
    k = st.slider("How many guesses to show (k)", 1, 10, 5, key="pred_k")
    try:
        found = predict_typed_blanks(model, tokenizer, encoded.input_ids[0], encoded.attention_mask[0], blanks, k=k)
    except MLMLabError as exc:
        ui.show_error(exc)
        st.stop()
    st.subheader("What the model sees")
    ui.token_chips(tokens, ["MASK" if i in blanks else "NOT_SELECTED" for i in range(len(tokens))])
    st.subheader("Its guesses at your blanks")
    ui.chart(topk_figure(found, bar_height=36 if settings.presenter else 22), "pred_topk_fig",
             name="predictions_blanks")
    if len(blanks) > 1:
        fill_lesson(tokens, encoded.input_ids[0], encoded.attention_mask[0], blanks[:MAX_FILL])


def show_fill(result, tokens: list[str]) -> None:
    st.markdown(lesson.fill_title(result))
    ui.token_chips(*lesson.filled_chips(result, tokens))


def fill_lesson(tokens, original_ids, attention_mask, fill_positions) -> None:
    """Several masks: independent, greedy easy-first and Mask-Predict filling of the same positions."""
    st.subheader("Several masks: all at once, one at a time, or predict and revise?")
    st.markdown(TEXT("fill_modes"))
    st.caption(lesson.fill_note(len(fill_positions), MAX_FILL))
    c1, c2 = st.columns([3, 1])
    view = c1.radio("Show", FILL_VIEWS, horizontal=True, key="pred_fill_mode",
                    format_func=lambda v: lesson.FILL_LABELS.get(v, v))
    iterations = c2.slider("Mask-Predict iterations T", 1, 10, MASK_PREDICT_ITERATIONS, key="pred_fill_iterations")
    try:
        fills = lesson.fill_all(model, tokenizer, original_ids, attention_mask, fill_positions, iterations=iterations)
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    if view != "side by side":
        show_fill(fills[view], tokens)
        ui.table(pd.DataFrame(lesson.fill_rows(fills[view], tokens)), static=True)  # its cells wrap: no value is cut
        return
    # The sentences side by side; the tables below them at full width (in a third of the page they were cut).
    for column, result in zip(st.columns(len(fills)), fills.values()):
        with column:
            show_fill(result, tokens)
    ui.chart(fill_comparison_figure(list(fills.values()), tokens,
                                    label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None),
             "pred_fill_fig", name="predictions_filling")
    for mode, result in fills.items():
        st.markdown(f"**{lesson.FILL_LABELS[mode]}**: step by step")
        ui.table(pd.DataFrame(lesson.fill_rows(result, tokens)), static=True)


source = st.radio("Masked sentence", list(SOURCES), horizontal=True, key="pred_source", format_func=SOURCES.get,
                  help=TEXT("source_help"))
example = from_masking_page() if source == "masking" else None
if example is None:
    text, encoded = ui.sentence_or_stop(tokenizer, sentence_controls(), max_chars=MAX_CHARS, max_tokens=MAX_TOKENS,
                                        settings=settings, model=model, typed_blanks=True,
                                        empty="The sentence is empty: pick an example or type a sentence.")
    tokens = encoded.tokens[0]
    blanks = [b for b in typed_blanks(tokenizer, encoded.input_ids[0]) if b < len(tokens)]
    if blanks:
        typed_blank_lesson(tokens, encoded, blanks)
        st.stop()
    positions, (mask_share, random_share) = pick_controls(tokens, encoded.word_ids[0].tolist()[: len(tokens)])
    if not positions:
        st.info("Click at least one token above to hide it from the model.")
        st.stop()
    example = lesson.clicked_example(tokenizer, encoded, positions, mask_share=mask_share, random_share=random_share,
                              seed=settings.seed)
tokens = example.tokens

k = st.slider("How many guesses to show (k)", 1, 10, 5, key="pred_k")
try:
    predictions = lesson.guesses(model, tokenizer, example, k)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()
if not predictions.positions:
    st.info("No token of this sentence was selected: re-roll on the Masking page, or mask tokens here.")
    st.stop()

st.subheader("What the model sees")
ui.token_chips(example.seen_tokens(tokenizer), example.names)
# the room guesses first: while the question is open a student's page stops here (the rest gives the answer)
ui.class_question("predictions", lesson.class_ask(example, predictions, tokenizer), hold=True)
st.subheader("What it should predict")
st.caption("The original token at every selected position, [MASK], random and unchanged alike.")
ui.token_chips(tokens, example.names)
ui.decision_legend()

# --------------------------------------------------------------------------- the guesses
st.subheader("Its guesses, position by position")
ui.chart(topk_figure(predictions, bar_height=36 if settings.presenter else 22), "pred_topk_fig",
         name="predictions_topk")
ui.metric_row(lesson.guess_metrics(predictions))
st.caption(lesson.one_masking_note(example, len(predictions.positions)))
ui.chart(loss_per_position_figure(predictions), "pred_loss_fig", name="predictions_loss")
try:
    st.page_link("pages/losses.py", label="How this loss is computed, and its variants: the Loss page", icon="📉")
except Exception:  # the Loss page is not registered (yet)
    st.caption("The Loss page shows how this loss is computed and compares its variants.")
with st.expander("Every position as a table"):
    ui.table(pd.DataFrame(lesson.position_rows(predictions)))

# --------------------------------------------------------------------------- a score without a draw
st.subheader("A score of the sentence that needs no random draw")
st.markdown(TEXT("pll"))
pll_key = (model_key, tuple(int(i) for i in example.original_ids.tolist()))
n_scored = sum(1 for t in tokens if t not in tokenizer.all_special_tokens)
if st.button(f"Score the sentence: mask each of its {n_scored} tokens in turn", key="pred_pll_run"):
    with st.spinner("One forward pass per token…"):
        try:
            st.session_state[PLL_KEY] = (pll_key, ui.heavy_click(lambda: pseudo_log_likelihood(
                model, tokenizer, example.original_ids, example.attention_mask)))
        except MLMLabError as exc:
            ui.show_error(exc)
pll = st.session_state.get(PLL_KEY)
if pll is not None and pll[0] == pll_key:
    ui.metric_row(lesson.pll_metrics(pll[1]))
    with st.expander("Every token's log p, masked alone"):
        ui.table(pd.DataFrame(lesson.pll_rows(pll[1])))

# --------------------------------------------------------------------------- [MASK] vs random vs unchanged
st.subheader("[MASK] vs random vs unchanged")
st.markdown(TEXT("decisions"))
HELDOUT = heldout_workshop_sentences()  # the workshop documents the bundled model never trained on
n_sentences = st.select_slider("Held-out workshop sentences (the bundled model never trained on them)",
                               sorted({32, 64, 128, len(HELDOUT)}), value=64, key="pred_corpus_n")
rule = ui.shared_masking_config()  # the learner's rule (Masking page or link), BERT's by default
corpus_key = (model_key, settings.seed, n_sentences, rule)
if st.button(f"📊 Compare on many sentences ({rule.describe()})", key="pred_corpus_run"):
    with st.spinner("Masking and predicting…"):
        try:
            compared = ui.heavy_click(lambda: lesson.compare_decisions(model, tokenizer, HELDOUT[:n_sentences], rule,
                                                                       settings.seed))
            st.session_state["pred_corpus"] = (*corpus_key, compared)
        except MLMLabError as exc:
            ui.show_error(exc)
corpus = st.session_state.get("pred_corpus")
if corpus is not None and corpus[:4] == corpus_key:
    summary = lesson.summarize_by_decision(corpus[4])
    st.markdown(lesson.decision_comparison_text(summary, n_sentences))
    ui.chart(decision_comparison_figure(corpus[4]), "pred_corpus_fig", name="predictions_by_decision", height=380)
    ui.table(pd.DataFrame(lesson.decision_table(summary)))

# --------------------------------------------------------------------------- several masks at once
fill_positions = [p.position for p in predictions.positions if p.row == 0][:MAX_FILL]
if len(predictions.positions) > MAX_FILL:
    st.caption(f"Only the first {MAX_FILL} selected positions are filled below.")
fill_lesson(tokens, example.original_ids, example.attention_mask, fill_positions)
