"""Predictions: what the model sees, what it should predict, and what it guesses at every selected position."""

import pandas as pd
import streamlit as st
import torch

import ui
from mlm_core import Decision, MaskingConfig, MLMLabError, encode, mask_batch
from mlm_core.bundled import workshop_sentences
from mlm_core.data import clip_text
from mlm_core.figures.predictions import (
    decision_comparison_figure,
    fill_comparison_figure,
    loss_per_position_figure,
    topk_figure,
)
from mlm_core.models import (
    available_models,
    fill_masks,
    mask_positions,
    model_description,
    predict_masked,
    summarize_by_decision,
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
SOURCES = ("Mask it here", "Take it from the Masking page")
FILL_VIEWS = ("side by side", "independent", "iterative")

settings = ui.page_setup("🔮 Predictions: what the model guesses")
st.markdown(
    "The model sees the **corrupted** sentence and must predict the **original** token at every "
    "selected position: at `[MASK]`, at a random replacement, and at a token left unchanged. "
    "Below: its top guesses, how sure it is of the true token, and the loss that training minimises."
)


# --------------------------------------------------------------------------- the model
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
               f"{sc.get('cloze_n', '?')} cloze sentences; the checkpoint was chosen on a separate development set. "
               "Stronger hub models (bert-base-uncased, roberta-base, …) are one click away in the sidebar's model "
               "picker when you are online.")


def model_panel(model, tokenizer) -> None:
    about = model_description(model, tokenizer)
    if about.get("trained") is False:
        st.warning(f"**{about['label']}**: this prediction head is untrained, so its guesses are noise "
                   "until it is trained (Training page). Details below.")
    with st.expander(f"Model: {about['label']}", expanded=False):
        if about.get("warning"):
            st.info(about["warning"])
        if about.get("description"):
            st.caption(about["description"])
        c1, c2, c3, c4 = st.columns(4)
        c1.metric("parameters", f"{about['params'] / 1e6:.1f} M")
        c2.metric("layers · hidden", f"{about['layers']} · {about['hidden']}")
        c3.metric("vocabulary", f"{about['vocab']:,}")
        if about.get("scores", {}).get("heldout_perplexity") is not None:  # cloze scores follow in their own row
            c4.metric("held-out perplexity", f"{about['scores']['heldout_perplexity']:.0f}",
                      help="exp(MLM loss) on workshop-corpus documents the build never trained on (lower is better).")
        else:
            c4.metric("cloze top-5", f"{about['cloze_top5']:.0%}" if about.get("cloze_top5") is not None else "—",
                      help="Share of the bundled fill-in-the-blank sentences where the answer is in the top 5.")
        st.caption(f"Mask token `{about['mask_token']}` · head: {about['head']} · {about['device']}, {about['dtype']}")
        if about.get("scores"):
            how_good(about["scores"])
        st.markdown("**Models you can pick in the sidebar**")
        st.dataframe(
            pd.DataFrame([{"model": m["name"] or ui.DEFAULT_MODEL, "offline now": "✅" if m["offline"] else "⬇ download",
                           "note": m["note"]} for m in available_models()]),
            hide_index=True, width="stretch",
        )


try:
    model, tokenizer = ui.cached_model(settings.model_name)
except MLMLabError as exc:
    ui.show_error(exc)
    st.markdown("These models work offline right now:")
    st.dataframe(pd.DataFrame([m for m in available_models() if m["offline"]]), hide_index=True)
    st.stop()
model_panel(model, tokenizer)


# --------------------------------------------------------------------------- the masked sentence
def sentence_controls() -> str:
    state = st.session_state
    state.setdefault("pred_sentence", state.get(ui.KEYS.sentence) or EXAMPLES[0])
    state.setdefault("pred_example", EXAMPLES[0])

    def use_example():
        state["pred_sentence"] = state["pred_example"]

    def share():
        state[ui.KEYS.sentence] = state["pred_sentence"]

    c1, c2 = st.columns([1, 2])
    c1.selectbox("Pick an example", EXAMPLES, key="pred_example", on_change=use_example)
    return c2.text_area("…or type your own sentence", key="pred_sentence", height=80, on_change=share)


def pick_controls(tokens: list[str], special: list[bool]) -> tuple[list[int], tuple[float, float]]:
    """Which tokens to hide (clicked), and how: returns (positions, (mask share, random share))."""
    state = st.session_state
    options = [i for i, s in enumerate(special) if not s]
    picked = [p for p in state.get("pred_positions", []) if p in options]
    if not picked and options and state.get("pred_positions_for") != tokens:
        picked = [options[len(options) // 2]]  # a word in the middle, to start with
    state["pred_positions"] = picked
    state["pred_positions_for"] = tokens
    # Pills are told apart by their text, so a repeated token gets its occurrence number: the (2).
    seen: dict[str, int] = {}
    labels = {}
    for i in options:
        seen[tokens[i]] = seen.get(tokens[i], 0) + 1
        labels[i] = tokens[i] if tokens.count(tokens[i]) == 1 else f"{tokens[i]} ({seen[tokens[i]]})"
    chosen = st.pills("Click the tokens to hide from the model", options, selection_mode="multi",
                      format_func=labels.__getitem__, key="pred_positions")
    how = st.radio("The clicked tokens become", list(CORRUPTIONS), horizontal=True, key="pred_corruption",
                   help="BERT's draw: each clicked token becomes [MASK] with 80%, a random token with 10%, "
                        "or stays as it is with 10% (seeded by the sidebar's seed).")
    return sorted(chosen or []), CORRUPTIONS[how]


def from_masking_page():
    """(tokens, original ids, MaskingResult row, attention) from the Masking page, or None with a note."""
    shared = st.session_state.get(ui.KEYS.masking)
    if not shared:
        st.info("Nothing has been masked on the Masking page yet in this session: mask a sentence there, "
                "or mask one here.")
        return None
    encoded, result = shared["encoded"], shared["result"]
    again = encode(tokenizer, shared["sentence"], max_length=MAX_TOKENS)
    if again.tokens[0] != encoded.tokens[0]:
        st.warning("The Masking page used another tokenizer (the model changed since): mask the sentence "
                   "again there, or mask it here.")
        return None
    st.caption(f"From the Masking page: seed {shared.get('seed')}, strategy "
               f"{shared['config'].strategy.replace('_', ' ')}.")
    return encoded.tokens[0], encoded.input_ids[0], result.input_ids[0], result.labels[0], result.decisions[0], \
        encoded.attention_mask[0]


source = st.radio("Masked sentence", SOURCES, horizontal=True, key="pred_source")
picked = from_masking_page() if source == SOURCES[1] else None
if picked is None:
    text, clipped = clip_text(sentence_controls(), MAX_CHARS)
    if not text:
        st.warning("The sentence is empty: pick an example or type a sentence.")
        st.stop()
    try:
        encoded = encode(tokenizer, text, max_length=MAX_TOKENS)
    except MLMLabError as exc:
        ui.show_error(exc)
        st.stop()
    if clipped or encoded.truncated[0]:
        st.info(f"Only the first {MAX_TOKENS} tokens are used.")
    tokens = encoded.tokens[0]
    special = [bool(s) for s in encoded.special_tokens_mask[0].tolist()]
    positions, (mask_share, random_share) = pick_controls(tokens, special)
    if not positions:
        st.info("Click at least one token above to hide it from the model.")
        st.stop()
    masked = mask_positions(tokenizer, encoded.input_ids[0], positions, mask_replace_prob=mask_share,
                            random_replace_prob=random_share,
                            generator=torch.Generator().manual_seed(settings.seed))
    picked = (tokens, encoded.input_ids[0], masked.input_ids, masked.labels, masked.decisions,
              encoded.attention_mask[0])
tokens, original_ids, seen_ids, labels, decisions, attention_mask = picked

k = st.slider("How many guesses to show (k)", 1, 10, 5, key="pred_k")
try:
    predictions = predict_masked(model, tokenizer, seen_ids, attention_mask, labels, k=k, decisions=decisions)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()
if not predictions.positions:
    st.info("No token of this sentence was selected: re-roll on the Masking page, or mask tokens here.")
    st.stop()

names = [Decision(int(d)).name for d in decisions.tolist()]
seen_tokens = tokenizer.convert_ids_to_tokens(seen_ids.tolist())[: len(tokens)]
st.subheader("What the model sees")
ui.token_chips(seen_tokens, names[: len(tokens)])
st.subheader("What it should predict")
st.caption("The original token at every selected position, [MASK], random and unchanged alike.")
ui.token_chips(tokens, names[: len(tokens)])
ui.decision_legend()

# --------------------------------------------------------------------------- the guesses
st.subheader("Its guesses, position by position")
st.plotly_chart(topk_figure(predictions, bar_height=32 if settings.presenter else 22), key="pred_topk_fig")
c1, c2, c3 = st.columns(3)
c1.metric("MLM loss of this sentence", f"{predictions.mean_loss:.3f}",
          help="Mean of −log p(true token) over the selected positions: what training minimises.")
c2.metric("top-1 correct", f"{sum(p.correct for p in predictions.positions)} of {len(predictions.positions)}")
c3.metric("mean p(true token)", f"{sum(p.true_prob for p in predictions.positions) / len(predictions.positions):.1%}")
st.plotly_chart(loss_per_position_figure(predictions), key="pred_loss_fig")
try:
    st.page_link("pages/losses.py", label="How this loss is computed, and its variants: the Loss page", icon="📉")
except Exception:  # the Loss page is not registered (yet)
    st.caption("The Loss page shows how this loss is computed and compares its variants.")
with st.expander("Every position as a table"):
    st.dataframe(pd.DataFrame(predictions.records()), hide_index=True, width="stretch")

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
    "The BERT paper's ablation (appendix C.2) found 80/10/10 better than always `[MASK]`, most clearly "
    "when the model's features are used without fine-tuning. A trained model is usually most sure at "
    "unchanged positions, less at `[MASK]`, and least at random ones."
)
st.plotly_chart(decision_comparison_figure(predictions), key="pred_decision_fig")
n_sentences = st.select_slider("Sentences of the workshop corpus", [32, 64, 128, 256], value=64,
                               key="pred_corpus_n")
if st.button("📊 Compare on many sentences (BERT's 15% and 80/10/10)", key="pred_corpus_run"):
    sentences = workshop_sentences()[:n_sentences]
    with st.spinner("Masking and predicting…"):
        try:
            batch = encode(tokenizer, sentences, max_length=64)
            corpus_masked = mask_batch(tokenizer, batch, MaskingConfig(),
                                       torch.Generator().manual_seed(settings.seed), trace=False)
            st.session_state["pred_corpus"] = (settings.model_name, settings.seed, n_sentences, predict_masked(
                model, tokenizer, corpus_masked.input_ids, batch.attention_mask, corpus_masked.labels, k=1,
                decisions=corpus_masked.decisions))
        except MLMLabError as exc:
            ui.show_error(exc)
corpus = st.session_state.get("pred_corpus")
if corpus is not None and corpus[:3] == (settings.model_name, settings.seed, n_sentences):
    st.plotly_chart(decision_comparison_figure(corpus[3], height=460 if settings.presenter else 380),
                    key="pred_corpus_fig")
    st.dataframe(pd.DataFrame(summarize_by_decision(corpus[3])), hide_index=True, width="stretch")

# --------------------------------------------------------------------------- several masks at once
st.subheader("Several masks: all at once, or one at a time?")
st.markdown(
    "**Independent** filling takes every position's first choice from one forward pass: the choices "
    "cannot see each other, so two masks may both pick the same word. **Iterative** filling fills the "
    "position the model is most sure of, runs the model again with it filled in, and repeats "
    "(as mask-predict decoding does). Special tokens are never chosen."
)
fill_positions = [p.position for p in predictions.positions if p.row == 0][:MAX_FILL]
if len(predictions.positions) > MAX_FILL:
    st.caption(f"Only the first {MAX_FILL} selected positions are filled.")
view = st.radio("Show", FILL_VIEWS, horizontal=True, key="pred_fill_mode")
try:
    fills = {mode: fill_masks(model, tokenizer, original_ids, attention_mask, fill_positions, mode=mode, k=3)
             for mode in ("independent", "iterative")}
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()


def show_fill(result) -> None:
    filled = set(result.order)
    st.markdown(f"**{result.mode}** · total log p = {result.log_prob:.2f}")
    ui.token_chips(list(result.tokens[: len(tokens)]),
                   ["MASK" if i in filled else "NOT_SELECTED" for i in range(len(tokens))],
                   originals=[tokens[i] if i in filled else None for i in range(len(tokens))])
    st.dataframe(pd.DataFrame([{
        "step": n + 1, "position": s.position, "original": tokens[s.position], "chose": s.token,
        "p": round(s.prob, 4), "other candidates": ", ".join(f"{t} {q:.2f}" for t, q in s.candidates[1:]),
    } for n, s in enumerate(result.steps)]), hide_index=True, width="stretch")


if view == "side by side":
    left, right = st.columns(2)
    with left:
        show_fill(fills["independent"])
    with right:
        show_fill(fills["iterative"])
    st.plotly_chart(fill_comparison_figure(fills["independent"], fills["iterative"], tokens), key="pred_fill_fig")
else:
    show_fill(fills[view])
