"""Predictions: what the model sees, what it should predict, and what it guesses at every selected position."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError, decision_names, encode, mask_batch, seeds
from mlm_core.bundled import heldout_workshop_sentences
from mlm_core.data import clip_text, mask_sentence
from mlm_core.masking import DECISION_WORDS
from mlm_core.figures.predictions import (
    decision_comparison_figure,
    fill_comparison_figure,
    loss_per_position_figure,
    probability_text,
    topk_figure,
)
from mlm_core.lessons import model_card, share_state
from mlm_core.default_model import read_build_record
from mlm_core.models import available_models, model_description
from mlm_core.predict import (
    FILL_LABELS,
    MASK_PREDICT_ITERATIONS,
    decision_comparison_text,
    default_blank,
    fill_masks,
    mask_positions,
    predict_masked,
    predict_typed_blanks,
    pseudo_log_likelihood,
    summarize_by_decision,
    typed_blanks,
    with_mask_token,
)

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
SOURCES = dict(zip(share_state.PREDICTION_SOURCES, ("Mask it here", "Take it from the Masking page")))  # in links: source=
FILL_VIEWS = ("side by side", "independent", "easy_first", "mask_predict")
SUMMARY_COLUMNS = {"decision": "what masking did", "count": "positions", "mean_true_prob": "mean p(true token)",
                   "sem_true_prob": "± standard error", "top1_accuracy": "top-1 correct", "mean_loss": "mean loss"}
PLL_KEY = "pred_pll"  # (model, ids) -> PseudoLogLikelihood, computed on request
OWN_KEY = "pred_own_sentence"  # a sentence typed here, for this page only; None: the lesson's sentence
KEPT_KEY = "pred_positions_kept"  # (tokens, positions): the clicked tokens, kept when the page is left

# "Mask it here" shows this page's own sentence when one was typed, and its link carries that one (the
# lesson's stays as it is); without one (None) the link carries the lesson's, which the page shows then
settings = ui.page_setup("🔮 Predictions: what the model guesses", link=share_state.PAGE_LINKS["predictions"],
                         shown={"sentence": OWN_KEY} if st.session_state.get("pred_source", "here") == "here"
                         else None)


def chart(figure, key: str, name: str, height: int | None = None) -> None:
    """A figure with a PNG export name; in presenter view taller and in large type."""
    if height is not None or settings.presenter:
        figure.update_layout(height=ui.chart_height(height or figure.layout.height or 450))
    if settings.presenter:  # subplot titles are annotations: room_figure leaves them
        figure.update_annotations(font_size=ui.PRESENTER_CHART_FONT_PX)
    st.plotly_chart(ui.room_figure(figure), key=key, config=ui.plotly_config(name))
st.markdown(
    "The model sees the **corrupted** sentence and must predict the **original** token at every "
    "selected position: at `[MASK]`, at a random replacement, and at a token left unchanged. "
    "Below: its top guesses, how sure it is of the true token, and the MLM loss (cross-entropy at the selected "
    "positions: what the Training page minimises; how the bundled model itself was trained is under **Model**)."
)


# --------------------------------------------------------------------------- the model
@st.cache_data(max_entries=8, show_spinner=False)
def cached_copy_checks(key: str, _model, _tokenizer):
    """The model's first guesses on a few everyday sentences (model_card.COPY_SENTENCES): one forward pass."""
    return model_card.copy_checks(_model, _tokenizer)


def how_trained(model, tokenizer) -> None:
    """How the bundled model was trained, each objective in a sentence from its build record, and what it does
    on everyday sentences, measured now."""
    record = read_build_record() or {}
    story = model_card.training_story(record)
    if story:
        st.markdown("**How it was trained** (from its build record, `assets/default_mlm/build.json`):\n"
                    + "\n".join(f"- {line}" for line in story))
    repeat = model_card.repeat_scores(record)
    if repeat is not None:
        st.caption(model_card.repeat_sentence(repeat))
    checks = cached_copy_checks(f"{settings.model_name or 'default'}:{id(model)}", model, tokenizer)
    st.markdown(model_card.copy_sentence(checks) + " " + model_card.HUB_NOTE)


def how_good(sc: dict) -> None:
    """The bundled model's scores, as its build record measured them (mlm_core.default_model.build_scores)."""
    pct = lambda key: f"{sc[key]:.0%} ± {sc[key + '_se']:.0%}" if key in sc and key + "_se" in sc else "—"  # noqa: E731
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("cloze top-1", pct("cloze_top1"), help="Answer is the first guess, on fill-in-the-blank sentences never "
              "trained on (± one standard error).")
    c2.metric("cloze top-5", pct("cloze_top5"), help="Answer among the first five guesses (± one standard error).")
    c3.metric("copies a word", f"{sc['copy_rate']:.0%}" if "copy_rate" in sc else "—",
              help="Share of those sentences where the first guess repeats a word of the sentence that is not an answer.")
    c4.metric("everyday top-5", f"{sc['everyday_top5']:.0%}" if "everyday_top5" in sc else "—",
              help="Everyday sentences whose answer does not appear in the sentence.")
    steps = f"{sc['steps']:,}" if "steps" in sc else "?"
    st.caption(f"Build record: {steps} training steps, {sc.get('hours', '?')} h on a shared 2-core CPU; "
               f"{sc.get('cloze_n', '?')} cloze sentences; the checkpoint was chosen on a separate development set.")


def model_panel(model, tokenizer) -> None:
    about = model_description(model, tokenizer)
    if about.get("trained") is False:
        st.warning(f"**{ui.markdown_text(about['label'])}**: this prediction head is untrained, so its guesses are noise "
                   "until it is trained (Training page). Details below.")
    with st.expander(f"Model: {ui.markdown_text(about['label'])}", expanded=False):  # the name a learner typed
        if about.get("warning"):
            st.info(ui.markdown_text(about["warning"]))
        if about.get("description"):
            st.caption(ui.markdown_text(about["description"]))  # may name the folder or id a learner typed
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("parameters", f"{about['params'] / 1e6:.1f} M")
        c2.metric("layers · hidden", f"{about['layers']} · {about['hidden']}")
        c3.metric("vocabulary", f"{about['vocab']:,}")
        scores = about.get("scores", {})
        if scores.get("heldout_perplexity") is not None:  # cloze scores follow in their own row
            at_mask = (f" At the [MASK] positions alone the build measured {scores['heldout_mask_perplexity']:.0f}."
                       if scores.get("heldout_mask_perplexity") is not None else "")
            c4.metric("held-out MLM perplexity", f"{scores['heldout_perplexity']:.0f}",
                      help="exp(mean MLM loss over every selected position, [MASK], random and unchanged alike: "
                           "the loss BertForMaskedLM computes from its labels) on workshop-corpus documents the build "
                           "never trained on (lower is better), masked with the build's own rule: "
                           f"{model_card.heldout_masking(read_build_record())}, not the token masking the other pages "
                           "start with. The unchanged positions are nearly free (the model sees the answer), "
                           "so this is lower than the perplexity at [MASK] positions alone." + at_mask)
        else:
            c4.metric("cloze top-5", f"{about['cloze_top5']:.0%}" if about.get("cloze_top5") is not None else "—",
                      help="Share of the bundled fill-in-the-blank sentences where the answer is in the top 5.")
        st.caption(f"Mask token {ui.inline_code(about['mask_token'])} · head: {about['head']} · {about['device']}, {about['dtype']}")
        if about.get("scores"):
            how_good(about["scores"])
            how_trained(model, tokenizer)
        st.markdown("**Models you can pick in the sidebar**")
        ui.table(
            pd.DataFrame([{"model": m["name"] or ui.DEFAULT_MODEL, "offline now": "✅" if m["offline"] else "⬇ download",
                           "note": m["note"]} for m in available_models()]))


try:
    model, tokenizer = ui.cached_model(settings.model_name)
except MLMLabError as exc:
    ui.show_error(exc)
    st.markdown("These models work offline right now:")
    st.dataframe(pd.DataFrame([m for m in available_models() if m["offline"]]), hide_index=True)
    st.stop()
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
    lesson = state.get(ui.KEYS.sentence) or EXAMPLES[0]
    own = state.get(OWN_KEY)
    state["pred_sentence"] = lesson if own is None else own

    def adopt():
        text = state.get("pred_sentence") or ""
        state[OWN_KEY] = None if text.strip() == lesson.strip() else text

    def back():
        state[OWN_KEY] = None

    def make_lesson():
        state[ui.KEYS.sentence], state[OWN_KEY] = state[OWN_KEY], None

    c1, c2 = st.columns([1, 2])
    ui.example_picker(EXAMPLES, key="pred_example", sentence_key="pred_sentence", container=c1, on_pick=adopt)
    text = c2.text_area("…or type your own sentence", key="pred_sentence", height=80, on_change=adopt)
    if own is not None:
        st.caption(f"✏️ A sentence of this page only. The other pages (Masking, Inside the model, Quiz) keep the "
                   f"lesson's sentence: “{ui.markdown_text(lesson)}”")
        b1, b2, _ = st.columns([1, 1, 1])
        b1.button("↩ Back to the lesson's sentence", key="pred_own_back", on_click=back, width="stretch")
        b2.button("📌 Use it on every page", key="pred_own_share", on_click=make_lesson, width="stretch",
                  help="Make it the lesson's sentence: the Masking page and the others show it too.")
    return text


def pick_controls(tokens: list[str], word_ids: list[int]) -> tuple[list[int], tuple[float, float]]:
    """Which tokens to hide (clicked), and how: returns (positions, (mask share, random share))."""
    state = st.session_state
    options = [i for i, w in enumerate(word_ids) if w >= 0]
    kept_for, kept = state.get(KEPT_KEY, (None, []))
    if "pred_positions" in state and state.get("pred_positions_for") == tokens:
        picked = state["pred_positions"]  # this visit's clicks
    elif kept_for == tokens:
        picked = kept  # back on the page: the pills lost their value, the page did not
    else:  # a new sentence
        first = default_blank(tokens, word_ids)  # a content word, never punctuation
        picked = [first] if first is not None else []
    picked = [p for p in picked if p in options]
    state["pred_positions"] = picked
    state["pred_positions_for"] = tokens
    # Pills are told apart by their text, so a repeated token gets its occurrence number: the (2).
    seen: dict[str, int] = {}
    labels = {}
    for i in options:
        seen[tokens[i]] = seen.get(tokens[i], 0) + 1
        labels[i] = tokens[i] if tokens.count(tokens[i]) == 1 else f"{tokens[i]} ({seen[tokens[i]]})"
    chosen = st.pills("Click the tokens to hide from the model", options, selection_mode="multi",
                      format_func=lambda i: ui.markdown_text(labels[i]), key="pred_positions")  # markdown labels
    state[KEPT_KEY] = (tokens, sorted(chosen or []))
    how = st.radio("The clicked tokens become", list(CORRUPTIONS), horizontal=True, key="pred_corruption",
                   help="BERT's draw: each clicked token becomes [MASK] with 80%, a random token with 10%, "
                        "or stays as it is with 10% (seeded by the sidebar's seed).")
    return sorted(chosen or []), CORRUPTIONS[how]


def from_masking_page():
    """(tokens, original ids, corrupted ids, labels, decisions, attention): the Masking page's masks.

    Rebuilt from the shared sentence, seed and rule (the link's, or this session's), through the
    Masking page's own path (``mask_sentence``): a student who opens a Predictions link gets the
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
        encoded, result = masked.encoded, masked.result
    except MLMLabError as exc:
        ui.show_error(exc)
        return None
    st.caption(f"From the Masking page: the shared sentence, seed {settings.seed}, strategy "
               f"{config.strategy.replace('_', ' ')}, p = {config.mlm_probability:g} — rebuilt from the link, so "
               "everyone who opens it sees the same masks.")
    return encoded.tokens[0], encoded.input_ids[0], result.input_ids[0], result.labels[0], result.decisions[0], \
        encoded.attention_mask[0], encoded.special_tokens_mask[0]


def typed_blank_lesson(tokens: list[str], encoded, blanks: list[int]) -> None:
    """A sentence with blanks the learner typed: the model's guesses there (no true token, so no loss)."""
    st.info(f"Your sentence has {len(blanks)} typed blank{'s' if len(blanks) > 1 else ''} "
            f"({ui.inline_code(tokenizer.mask_token)}): the model predicts {'them' if len(blanks) > 1 else 'it'}. There is no "
            "true token to score, so no loss here: to see the loss, type the whole sentence and click words to hide.")
    k = st.slider("How many guesses to show (k)", 1, 10, 5, key="pred_k")
    try:
        found = predict_typed_blanks(model, tokenizer, encoded.input_ids[0], encoded.attention_mask[0], blanks, k=k)
    except MLMLabError as exc:
        ui.show_error(exc)
        st.stop()
    st.subheader("What the model sees")
    ui.token_chips(tokens, ["MASK" if i in blanks else "NOT_SELECTED" for i in range(len(tokens))])
    st.subheader("Its guesses at your blanks")
    chart(topk_figure(found, bar_height=36 if settings.presenter else 22), "pred_topk_fig", "predictions_blanks")
    if len(blanks) > 1:
        fill_lesson(tokens, encoded.input_ids[0], encoded.attention_mask[0], blanks[:MAX_FILL])


def fill_lesson(tokens, original_ids, attention_mask, fill_positions) -> None:
    """Several masks: independent, greedy easy-first and Mask-Predict filling of the same positions."""
    st.subheader("Several masks: all at once, one at a time, or predict and revise?")
    st.markdown(
        "- **Independent**: every position takes its first choice from one forward pass; the choices cannot "
        "see each other, so two masks may both pick the same word.\n"
        "- **Greedy easy-first**: fill the one position the model is most sure of, run the model again with "
        "it filled in, repeat. A filled token is never revised.\n"
        "- **Mask-Predict** (Ghazvininejad et al. 2019, §3.2): predict every position at once, then for "
        "iterations t = 1 … T−1 put the mask back on the ⌊N·(T−t)/T⌋ positions the model is least sure of "
        "and predict those again, so an early mistake can still be corrected.\n\n"
        "Special tokens are never chosen."
    )
    n = len(fill_positions)
    st.caption(f"Here the {n} position{'s' if n != 1 else ''} scored above ([MASK], random and unchanged alike) "
               "all start as [MASK] in the original sentence, so an unchanged or random token is hidden too "
               "and its fill can differ from the guess above.")
    if len(fill_positions) == MAX_FILL:
        st.caption(f"Only the first {MAX_FILL} positions are filled.")
    c1, c2 = st.columns([3, 1])
    view = c1.radio("Show", FILL_VIEWS, horizontal=True, key="pred_fill_mode",
                    format_func=lambda v: FILL_LABELS.get(v, v))
    iterations = c2.slider("Mask-Predict iterations T", 1, 10, MASK_PREDICT_ITERATIONS, key="pred_fill_iterations")
    try:
        fills = {mode: fill_masks(model, tokenizer, original_ids, attention_mask, fill_positions, mode=mode, k=3,
                                  iterations=iterations)
                 for mode in ("independent", "easy_first", "mask_predict")}
    except MLMLabError as exc:
        ui.show_error(exc)
        return

    def show_fill(result) -> None:
        filled = set(result.order)
        st.markdown(f"**{FILL_LABELS[result.mode]}** · total log p = {result.log_prob:.2f} · "
                    f"{len(result.rounds)} model pass{'es' if len(result.rounds) != 1 else ''}")
        ui.token_chips(list(result.tokens[: len(tokens)]),
                       ["MASK" if i in filled else "NOT_SELECTED" for i in range(len(tokens))],
                       originals=[tokens[i] if i in filled else None for i in range(len(tokens))])

    def fill_table(result) -> None:
        """The steps (or Mask-Predict's iterations) as a static table: its cells wrap, so no value is cut."""
        if result.mode == "mask_predict":
            targets = sorted(set(result.order))
            ui.table(pd.DataFrame([{
                "iteration": t, "predicted again": ", ".join(str(p) for p in done),
                **{f"{p}: {tokens[p]}": f"{tok} {q:.2f}" for p, tok, q in zip(targets, toks, probs)},
            } for t, (done, toks, probs) in enumerate(zip(result.rounds, result.round_tokens, result.round_probs))]),
                static=True)
            return
        ui.table(pd.DataFrame([{
            "step": n + 1, "position": s.position, "original": tokens[s.position], "chose": s.token,
            "p": round(s.prob, 4), "other candidates": ", ".join(f"{t} {q:.2f}" for t, q in s.candidates[1:]),
        } for n, s in enumerate(result.steps)]), static=True)

    if view == "side by side":
        # The sentences side by side; the tables below them at full width (in a third of the page they were cut).
        columns = st.columns(3)
        for column, mode in zip(columns, ("independent", "easy_first", "mask_predict")):
            with column:
                show_fill(fills[mode])
        chart(fill_comparison_figure(list(fills.values()), tokens,
                                     label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None),
              "pred_fill_fig", "predictions_filling")
        for mode in ("independent", "easy_first", "mask_predict"):
            st.markdown(f"**{FILL_LABELS[mode]}**: step by step")
            fill_table(fills[mode])
    else:
        show_fill(fills[view])
        fill_table(fills[view])


source = st.radio("Masked sentence", list(SOURCES), horizontal=True, key="pred_source", format_func=SOURCES.get,
                  help="The Masking page's masks are rebuilt from the shared sentence, seed and rule, and the "
                       "share link carries this choice.")
picked = from_masking_page() if source == "masking" else None
shared_masks = picked is not None
if picked is None:
    text, clipped = clip_text(sentence_controls(), MAX_CHARS)
    if not text:
        st.warning("The sentence is empty: pick an example or type a sentence.")
        st.stop()
    ui.language_note(text, settings.model_name, model)
    encoded = ui.encode_or_stop(tokenizer, with_mask_token(tokenizer, text), max_tokens=MAX_TOKENS, clipped=clipped)
    tokens = encoded.tokens[0]
    blanks = [b for b in typed_blanks(tokenizer, encoded.input_ids[0]) if b < len(tokens)]
    if blanks:
        typed_blank_lesson(tokens, encoded, blanks)
        st.stop()
    positions, (mask_share, random_share) = pick_controls(tokens, encoded.word_ids[0].tolist()[: len(tokens)])
    if not positions:
        st.info("Click at least one token above to hide it from the model.")
        st.stop()
    masked = mask_positions(tokenizer, encoded.input_ids[0], positions, mask_replace_prob=mask_share,
                            random_replace_prob=random_share,
                            generator=seeds.generator(settings.seed))
    picked = (tokens, encoded.input_ids[0], masked.input_ids, masked.labels, masked.decisions,
              encoded.attention_mask[0], encoded.special_tokens_mask[0])
tokens, original_ids, seen_ids, labels, decisions, attention_mask, special = picked

k = st.slider("How many guesses to show (k)", 1, 10, 5, key="pred_k")
try:
    predictions = predict_masked(model, tokenizer, seen_ids, attention_mask, labels, k=k, decisions=decisions)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()
if not predictions.positions:
    st.info("No token of this sentence was selected: re-roll on the Masking page, or mask tokens here.")
    st.stop()

names = decision_names(decisions, special_tokens_mask=special, length=len(tokens))
seen_tokens = tokenizer.convert_ids_to_tokens(seen_ids.tolist())[: len(tokens)]
st.subheader("What the model sees")
ui.token_chips(seen_tokens, names)
st.subheader("What it should predict")
st.caption("The original token at every selected position, [MASK], random and unchanged alike.")
ui.token_chips(tokens, names)
ui.decision_legend()

# --------------------------------------------------------------------------- the guesses
st.subheader("Its guesses, position by position")
chart(topk_figure(predictions, bar_height=36 if settings.presenter else 22), "pred_topk_fig", "predictions_topk")
c1, c2, c3 = st.columns(3)
c1.metric("MLM loss of this sentence", f"{predictions.mean_loss:.3f}",
          help="Mean of −log p(true token) over the selected positions: what training minimises. It depends on "
               "which tokens this one masking selected and how it corrupted them.")
c2.metric("top-1 correct", f"{sum(p.correct for p in predictions.positions)} of {len(predictions.positions)}")
c3.metric("mean p(true token)",  # the chart's format: a tiny mean reads 6.7e-05, not "0.0%"
          probability_text(sum(p.true_prob for p in predictions.positions) / len(predictions.positions)))
st.caption(f"This loss comes from **one masking** of the sentence — the {len(predictions.positions)} position"
           f"{'s' if len(predictions.positions) != 1 else ''} "
           + ("the Masking page's random draw selected" if shared_masks else "you clicked")
           + ": another seed, or other tokens, give another value. It is one random masking's loss, not a score of "
           "the sentence: for that, see the pseudo-log-likelihood below.")
chart(loss_per_position_figure(predictions), "pred_loss_fig", "predictions_loss")
try:
    st.page_link("pages/losses.py", label="How this loss is computed, and its variants: the Loss page", icon="📉")
except Exception:  # the Loss page is not registered (yet)
    st.caption("The Loss page shows how this loss is computed and compares its variants.")
with st.expander("Every position as a table"):
    records = pd.DataFrame(predictions.records())
    records["decision"] = records["decision"].map(lambda d: DECISION_WORDS.get(d, d))  # the legend's words
    ui.table(records)

# --------------------------------------------------------------------------- a score without a draw
st.subheader("A score of the sentence that needs no random draw")
st.markdown(
    "The **pseudo-log-likelihood** (Salazar et al. 2020, *Masked Language Model Scoring*, §2) masks every "
    "token in turn, one copy of the sentence per token, and adds up log p(true token | the rest): "
    "PLL = Σₜ log P(wₜ | the sentence without wₜ). Nothing is drawn, so the same sentence always gets the same "
    "score; −PLL / N is on the scale of the MLM loss above."
)
pll_key = (model_key, tuple(int(i) for i in original_ids.tolist()))
n_scored = sum(1 for t in tokens if t not in tokenizer.all_special_tokens)
if st.button(f"Score the sentence: mask each of its {n_scored} tokens in turn",
             key="pred_pll_run"):
    with st.spinner("One forward pass per token…"):
        try:
            st.session_state[PLL_KEY] = (pll_key, pseudo_log_likelihood(model, tokenizer, original_ids,
                                                                        attention_mask))
        except MLMLabError as exc:
            ui.show_error(exc)
pll = st.session_state.get(PLL_KEY)
if pll is not None and pll[0] == pll_key:
    score = pll[1]
    c1, c2, c3 = st.columns(3)
    c1.metric("PLL (nats)", f"{score.total:.2f}", help="Σ log p(true token), each token masked alone.")
    c2.metric("−PLL / N", f"{score.mean_loss:.3f}", help=f"N = {len(score.positions)} tokens ([CLS]/[SEP] left out).")
    c3.metric("pseudo-perplexity", f"{score.pseudo_perplexity:.1f}", help="exp(−PLL / N).")
    with st.expander("Every token's log p, masked alone"):
        ui.table(pd.DataFrame({"position": score.positions, "token": score.tokens,
                                   "log p (token masked alone)": [round(v, 3) for v in score.log_probs]}))

# --------------------------------------------------------------------------- [MASK] vs random vs unchanged
st.subheader("[MASK] vs random vs unchanged")
st.markdown(
    "BERT asks for the original token at *every* selected position, not only at `[MASK]`, because "
    "`[MASK]` never appears when the model is used later (fine-tuning, or embedding real text):\n"
    "- **unchanged** (10%): the token it sees may be the answer, so its representation of a real "
    "word must stay faithful to that word;\n"
    "- **random** (10%): what it sees may be wrong, so it cannot copy blindly and must check every "
    "token against its context; it is only 1.5% of all tokens (10% of 15%), too few to hurt;\n"
    "- **[MASK]** (80%): the real cloze task, guessing from context alone.\n\n"
    "What the BERT paper's ablation shows (Devlin et al. 2019, Table 8, appendix C.2): on MNLI, 80/10/10 and "
    "always-`[MASK]` tie (84.2 vs 84.3 dev accuracy); on NER, 80/10/10 is better, by 0.5 points fine-tuned "
    "(95.4 vs 94.9) and by 0.9 points with the features used as they are (94.9 vs 94.0) — the case where the "
    "mismatch of a `[MASK]` that never appears later matters most.\n\n"
    "Where is the model most sure? Measure it on many sentences:"
)
HELDOUT = heldout_workshop_sentences()  # the workshop documents the bundled model never trained on
n_sentences = st.select_slider("Held-out workshop sentences (the bundled model never trained on them)",
                               sorted({32, 64, 128, len(HELDOUT)}), value=64, key="pred_corpus_n")
rule = ui.shared_masking_config()  # the learner's rule (Masking page or link), BERT's by default
corpus_key = (model_key, settings.seed, n_sentences, rule)
if st.button(f"📊 Compare on many sentences ({rule.describe()})", key="pred_corpus_run"):
    sentences = HELDOUT[:n_sentences]
    with st.spinner("Masking and predicting…"):
        try:
            batch = encode(tokenizer, sentences, max_length=64)
            corpus_masked = mask_batch(tokenizer, batch, rule,
                                       seeds.generator(settings.seed), trace=False)
            st.session_state["pred_corpus"] = (*corpus_key, predict_masked(
                model, tokenizer, corpus_masked.input_ids, batch.attention_mask, corpus_masked.labels, k=1,
                decisions=corpus_masked.decisions))
        except MLMLabError as exc:
            ui.show_error(exc)
corpus = st.session_state.get("pred_corpus")
if corpus is not None and corpus[:4] == corpus_key:
    summary = summarize_by_decision(corpus[4])
    st.markdown(decision_comparison_text(summary, n_sentences))
    chart(decision_comparison_figure(corpus[4]), "pred_corpus_fig", "predictions_by_decision", height=380)
    table = pd.DataFrame(summary).rename(columns=SUMMARY_COLUMNS)
    table["what masking did"] = table["what masking did"].map(DECISION_WORDS)  # the legend's words, not enum names
    ui.table(table.round(3))

# --------------------------------------------------------------------------- several masks at once
fill_positions = [p.position for p in predictions.positions if p.row == 0][:MAX_FILL]
if len(predictions.positions) > MAX_FILL:
    st.caption(f"Only the first {MAX_FILL} selected positions are filled below.")
fill_lesson(tokens, original_ids, attention_mask, fill_positions)
