"""Inside the model: where [MASK] looks, how the guess forms layer by layer, what it depends on, what training changed."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError, decision_names, encode, seeds
from mlm_core.bundled import heldout_workshop_sentences, workshop_sentences
from mlm_core.lessons import share_state
from mlm_core.lessons.share_state import DEFAULT_SENTENCE
from mlm_core.data import clip_text
from mlm_core.lessons.export import lesson_zip, masking_settings
from mlm_core.figures.inside import (
    agreement_figure,
    agreement_summary_figure,
    grid_height,
    head_attention_figure,
    head_grid_figure,
    layer_attention_figure,
    layers_height,
    lesson_figures,
    lens_comparison_figure,
    lens_figure,
    lens_profile_figure,
    loss_change_figure,
    patterns_figure,
    saliency_figure,
)
from mlm_core.figures.predictions import topk_figure
from mlm_core.inside import (
    LensUnavailable,
    Saliency,
    attention_from,
    gradient_saliency,
    layer_agreement,
    leave_one_out,
    logit_lens,
    special_positions,
)
from mlm_core.figures.training import filmstrip_figure
from mlm_core.lessons.training_lessons import comparison_frames, comparison_index, filmstrip_summary
from mlm_core.lessons.inside import agreement_over_texts, compare_models, last_word, lens_profile_on_texts, measure_head_patterns
from mlm_core.head import head_parts
from mlm_core.formatting import signed
from mlm_core.predict import mask_positions
from mlm_core.session_models import same_vocabulary

MAX_TOKENS = 64  # every view of a sentence this long answers within a second on 2 cores (benchmark P5)
MAX_CHARS = 1_000
PATTERN_SENTENCES = 32  # workshop sentences the head patterns are measured on
# Corpus-level views run on the workshop documents the bundled model never trained on (its build's held-out set,
# bundled.heldout_workshop_sentences): on sentences it trained on, its loss at [MASK] is lower (issue 25).
PROFILE_SENTENCES = 128  # held-out sentences (about 160 [MASK] positions) the lens is averaged over, masked
# with the sidebar's seed (one seed, the same masks on every page), measured once per model and seed
AGREEMENT_SENTENCES = 24  # held-out sentences for the saliency agreement (a leave-one-out each)
CORPUS_WORDS = "workshop sentences the bundled model never trained on"
KEPT_KEY = "inside_masked_kept"  # the hidden tokens, kept when the page is left (the pills' own value is not)
KEPT_POSITION_KEY = "inside_position_kept"  # the "Look from" position, kept the same way
VIEWS = {
    "attention": "👀 Where [MASK] looks",
    "lens": "🔭 How the guess forms",
    "saliency": "🎯 What the guess depends on",
    "training": "🏋️ What training changed",
}
assert tuple(VIEWS) == share_state.INSIDE_VIEWS  # the views a link may name (mlm_core.lessons.share_state.FIELDS' view=)

settings = ui.page_setup("🔬 Inside the model", link=share_state.PAGE_LINKS["inside"])
st.markdown(
    "The Predictions page shows what goes in and what comes out. This page opens the model at the one "
    "position that matters in MLM, the hidden one: **where it looks** (attention), **when the answer "
    "appears** (the logit lens, layer by layer), **which words the guess depends on** (saliency), and "
    "**what training changed**. Every number is measured on the model in the sidebar."
)
model, tokenizer = ui.model_or_stop(settings)
model, tokenizer, trained_entry = ui.trained_model_choice(model, tokenizer)
model_key = trained_entry.key if trained_entry is not None else f"model:{settings.model_name or 'default'}"


def show(fig, key: str, **kwargs):
    """``st.plotly_chart`` with the camera button's file name, and the room's chart text in presenter view.

    ``ui.room_figure`` sets every tick, axis title, legend and title (a layout font alone leaves the
    builders' own tick sizes small); subplot titles are annotations, so they are enlarged here.
    """
    if settings.presenter:
        fig.update_annotations(font_size=ui.PRESENTER_CHART_FONT_PX)
        fig.update_traces(textfont_size=ui.PRESENTER_CHART_FONT_PX, selector=dict(type="heatmap"))
    return st.plotly_chart(ui.room_figure(fig), key=key, config=ui.plotly_config(key), **kwargs)


# --------------------------------------------------------------------------- cached views (shared by reruns)
# ids: the sentence as a tuple of token ids (hashable for the cache); mlm_core.inside takes any sequence of ids.
@st.cache_data(max_entries=64, show_spinner=False)
def cached_attention(key: str, ids: tuple, position: int, _model, _tokenizer):
    return attention_from(_model, _tokenizer, ids, None, position)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_lens(key: str, ids: tuple, position: int, true_id: int, k: int, _model, _tokenizer):
    return logit_lens(_model, _tokenizer, ids, None, position, true_id, k=k)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_gradient(key: str, ids: tuple, position: int, true_id: int, _model, _tokenizer):
    return gradient_saliency(_model, _tokenizer, ids, None, position, true_id)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_leave_one_out(key: str, ids: tuple, position: int, true_id: int, _model, _tokenizer):
    return leave_one_out(_model, _tokenizer, ids, None, position, true_id,
                         skip=special_positions(_tokenizer, ids))


def cached_saliency(key: str, ids: tuple, position: int, true_id: int, _model, _tokenizer):
    return Saliency.from_parts(cached_gradient(key, ids, position, true_id, _model, _tokenizer),
                               cached_leave_one_out(key, ids, position, true_id, _model, _tokenizer))


@st.cache_data(max_entries=16, show_spinner="Measuring every head on the workshop sentences…")
def cached_patterns(key: str, n: int, _model, _tokenizer, at_mask: bool = False):
    return measure_head_patterns(_model, _tokenizer, encode(_tokenizer, workshop_sentences()[:n], max_length=64),
                                 at_mask=at_mask)


@st.cache_data(max_entries=16, show_spinner="Reading the lens on the held-out sentences (once per model and seed)…")
def cached_lens_profile(key: str, n: int, seed: int, config, _model, _tokenizer):
    return lens_profile_on_texts(_model, _tokenizer, heldout_workshop_sentences()[:n], seed=seed, config=config)


@st.cache_data(max_entries=16, show_spinner="Leave-one-out on the held-out sentences (once per model)…")
def cached_agreement(key: str, n: int, _model, _tokenizer):
    return agreement_over_texts(_model, _tokenizer, heldout_workshop_sentences()[:n])


# --------------------------------------------------------------------------- the sentence and its masks
def sentence_controls() -> str:
    state = st.session_state
    state.setdefault("inside_sentence", state.get(ui.KEYS.sentence) or DEFAULT_SENTENCE)

    def share():
        state[ui.KEYS.sentence] = state["inside_sentence"]

    return st.text_area("Sentence", key="inside_sentence", height=68, on_change=share,
                        help=f"One sentence of up to {MAX_TOKENS} tokens (shared with the Masking and Predictions pages).")


def mask_controls(tokens: list[str], special: list[bool]) -> list[int]:
    """The tokens to hide (pills, one per token); starts with the last word before the final punctuation."""
    state = st.session_state
    options = [i for i, s in enumerate(special) if not s]
    if state.get("inside_masked_for") != tokens:  # a new sentence: start from its last word
        first = last_word(tokens, special)
        state["inside_masked"] = [] if first is None else [first]
        state["inside_masked_for"] = tokens
    elif "inside_masked" not in state:  # back on the page: the pills lost their value, the page did not
        state["inside_masked"] = [p for p in state.get(KEPT_KEY, []) if p in options]
    seen: dict[str, int] = {}
    labels = {}
    for i in options:  # pills are told apart by their text: a repeated token gets its occurrence number
        seen[tokens[i]] = seen.get(tokens[i], 0) + 1
        labels[i] = tokens[i] if tokens.count(tokens[i]) == 1 else f"{tokens[i]} ({seen[tokens[i]]})"
    chosen = st.pills("Tokens to hide behind [MASK]", options, selection_mode="multi",
                      format_func=lambda i: ui.markdown_text(labels[i]),  # pill labels render markdown
                      key="inside_masked")
    state[KEPT_KEY] = sorted(chosen or [])
    return sorted(chosen or [])


text, clipped = clip_text(sentence_controls(), MAX_CHARS)
if not text.strip():
    st.warning("The sentence is empty: type one above.")
    st.stop()
ui.language_note(text, settings.model_name, model)
encoded = ui.encode_or_stop(tokenizer, text, max_tokens=MAX_TOKENS, clipped=clipped)
tokens = encoded.tokens[0]
original_ids = encoded.input_ids[0]  # (T,)
hidden = mask_controls(tokens, [bool(s) for s in encoded.special_tokens_mask[0].tolist()])
if not hidden:
    st.info("Click at least one token above to hide it from the model.")
    st.stop()
masked = mask_positions(tokenizer, original_ids, hidden, generator=seeds.generator(settings.seed))
seen_ids, labels = masked.input_ids, masked.labels  # (T,), (T,): every hidden token became [MASK]
seen_tokens = tokenizer.convert_ids_to_tokens(seen_ids.tolist())
ids_key = tuple(seen_ids.tolist())
if st.session_state.get("inside_position") not in hidden:  # back on the page, or the masks changed
    kept = st.session_state.get(KEPT_POSITION_KEY)
    st.session_state["inside_position"] = kept if kept in hidden else hidden[0]
c1, c2 = st.columns([1, 1] if settings.presenter else [1, 2])  # the room's font needs the width: "13·[MASK] (hides …)"
position = c1.selectbox("Look from", hidden, key="inside_position",
                        format_func=lambda p: f"{p}·{seen_tokens[p]} (hides “{tokens[p]}”)",
                        help="The masked position whose attention, logit lens and saliency are shown.")
st.session_state[KEPT_POSITION_KEY] = position
true_id = int(labels[position])
with c2:
    st.caption("What the model sees (the chip with the blue ring is the position we look from):")
    ui.token_chips(seen_tokens, decision_names(masked, special_tokens_mask=encoded.special_tokens_mask[0]),
                   highlight=position)

# The view travels in a share link (view=, ui.LINK_KEYS): the session's value, not a default, starts the control.
st.session_state.setdefault("inside_view", share_state.INSIDE_VIEWS[0])
view = st.segmented_control("View", list(VIEWS), format_func=VIEWS.get, required=True, key="inside_view")


# --------------------------------------------------------------------------- 1. attention
def pick_head(layers: int, heads: int) -> tuple[int, int]:
    """The enlarged head: set by a click on the grid, or by the two boxes (keyboard, tests)."""
    state = st.session_state
    kept = state.get("inside_head_kept", (1, 1))  # survives the other views, where the boxes are not drawn
    for key, top, value in (("inside_layer", layers, kept[0]), ("inside_head", heads, kept[1])):
        state.setdefault(key, value)
        if state[key] not in range(1, top + 1):
            state[key] = 1
    c1, c2, _ = st.columns([1, 1, 3])
    layer = c1.selectbox("Layer", list(range(1, layers + 1)), key="inside_layer")
    head = c2.selectbox("Head", list(range(1, heads + 1)), key="inside_head")
    state["inside_head_kept"] = (layer, head)
    return layer - 1, head - 1


def on_grid_click():
    """A click on the grid (Plotly's selection event) picks the head to enlarge."""
    event = st.session_state.get("inside_grid") or {}
    points = (event.get("selection") or {}).get("points") or []
    if not points:
        return
    point = points[0]
    layer, head = point.get("customdata") or (point.get("y", 1) - 1, point.get("x", 1) - 1)
    st.session_state["inside_layer"], st.session_state["inside_head"] = int(layer) + 1, int(head) + 1


def attention_view() -> None:
    try:
        attention = cached_attention(model_key, ids_key, position, model, tokenizer)
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    L, H, _ = attention.weights.shape
    st.markdown(
        f"Every layer has {H} attention heads. Each head gives position {position} a weight for every token "
        "(the weights add up to 1) and mixes those tokens' vectors into its own. The grid names the token each "
        "head weights most; **click a cell** to enlarge that head."
    )
    layer, head = pick_head(L, H)
    # presenter view: a row per head, a column per layer, so the cells are wide enough for room-sized labels
    room = ui.PRESENTER_CHART_FONT_PX if settings.presenter else None
    show(head_grid_figure(attention, selected=(layer, head), label_px=room,
                          height=ui.chart_height(grid_height(H if room else L))), "inside_grid",
         on_select=on_grid_click, selection_mode="points")
    show(head_attention_figure(attention, layer, head, height=ui.chart_height(380)), "inside_head_fig")
    show(layer_attention_figure(attention, height=ui.chart_height(layers_height(L))), "inside_layers_fig")

    st.subheader("Patterns: which heads do what, on this model")
    patterns = cached_patterns(model_key, PATTERN_SENTENCES, model, tokenizer)
    at_mask = cached_patterns(model_key, PATTERN_SENTENCES, model, tokenizer, at_mask=True)
    st.markdown(
        "Clark et al. (2019, §3) measured BERT-base's heads on 1,000 Wikipedia segments and found heads that "
        "attend to the previous or next token, heads that put most of their weight on `[SEP]` (§3.2: in the "
        "middle layers; they argue it works as a *no-op* when a head's job does not apply), on `[CLS]` (early "
        "layers) or on periods and commas (late layers), and heads that attend broadly (§3.3). Those are "
        "findings about BERT-base. Here is **this** model, measured on "
        f"{patterns.sentences} workshop sentences, **over every word** of the sentences as they are, without "
        "masks (\"even\": what a head spreading its attention evenly would score). The grid above shows one "
        "row of each head, the **[MASK]**'s, and at a [MASK] a head may look elsewhere: \"at a [MASK]\" is the "
        "same head measured there, with each sentence's last word hidden as on this page."
    )
    lines = []
    for p, name in enumerate(patterns.names):
        (l0, h0, best), count = patterns.top_heads(name, 1)[0], patterns.heads_above(name, 0.5)
        even = float(patterns.uniform[p])
        there = float(at_mask.scores[p, l0, h0])
        lines.append(f"- **{name}**: {count} of {L * H} heads put more than half their attention there; the "
                     f"strongest is head {l0 + 1}-{h0 + 1} ({best:.0%} over every word; even: {even:.0%}; "
                     f"at a [MASK]: {there:.0%}).")
    st.markdown("\n".join(lines) + "\n\n"
                "\"Same token elsewhere\" is our addition (not one of Clark et al.'s patterns): a head that copies "
                "what the same word looks like elsewhere in the sentence.")
    show(patterns_figure(patterns, height=1100 if settings.presenter else 520, cols=2 if settings.presenter else 4),
         "inside_patterns_fig")
    with st.expander("The patterns as a table"):
        ui.table(pd.DataFrame(patterns.records()))
    st.info(
        "**What attention is not.** A large weight says where a head copied information from, not why the "
        "model guessed what it guessed. Jain & Wallace (2019) found attention weights often disagree with "
        "gradient and leave-one-out importance (§4.1) and that very different weights can give the same "
        "prediction (§4.2); Wiegreffe & Pinter (2019) answer that this depends on what one calls an "
        "explanation, and that attention can still be informative when tested properly. And after the first "
        "layer every position already mixes the whole sentence, so a weight on a token is a weight on a "
        "mixture. The **🎯 What the guess depends on** view asks the question directly and compares the two.",
        icon="⚠️")


# --------------------------------------------------------------------------- 2. the logit lens
def lens_view() -> None:
    k = st.slider("Guesses per layer (k)", 3, 10, 5, key="inside_k")
    try:
        lens = cached_lens(model_key, ids_key, position, true_id, k, model, tokenizer)
    except LensUnavailable as exc:
        ui.show_error(exc, "info")
        return
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    st.markdown(
        "After every layer, position "
        f"{position} holds a vector. The **logit lens** feeds that vector to the model's own MLM head (the "
        "part that turns the last layer's vector into a guess) and reads what it would guess at that depth. "
        "**Caveat:** the head was trained only on the last layer's output, so the earlier rows are read through "
        "a lens those layers were never trained for: an approximation that shows *when* the answer becomes "
        "readable, not what a layer \"thinks\". The last row is exactly the model's prediction."
    )
    show(lens_figure(lens, height=ui.chart_height(130 + 46 * lens.top_ids.shape[0])), "inside_lens_fig")
    first = lens.first_top1
    last_rank = int(lens.true_rank[-1])
    if first is not None:
        st.success(f"“{ui.markdown_text(lens.true_token)}” is the first guess from **{lens.depth_labels[first]}** on.")
    else:
        st.warning(f"“{ui.markdown_text(lens.true_token)}” is not the model's first guess even after the last layer "
                   f"(rank {last_rank:,}).")
    with st.expander("Every depth as a table"):
        ui.table(pd.DataFrame(lens.records()))
    rule = ui.shared_masking_config()
    st.markdown(f"**One sentence is an anecdote.** The same lens on {PROFILE_SENTENCES} {CORPUS_WORDS} (held-out "
                f"documents of the workshop corpus), at the [MASK]s of the rule set on the Masking page "
                f"({rule.describe()}), drawn with the sidebar's seed {settings.seed}:")
    profile = cached_lens_profile(model_key, PROFILE_SENTENCES, int(settings.seed), rule, model, tokenizer)
    if profile.positions == 0:
        st.info("This rule puts no [MASK] in these sentences: raise p or the [MASK] share on the Masking page.")
        return
    show(lens_profile_figure(profile, height=ui.chart_height(340)), "inside_lens_profile_fig")


# --------------------------------------------------------------------------- 3. saliency
def saliency_view() -> None:
    st.markdown(
        f"Which tokens does the guess of “{ui.markdown_text(tokens[position])}” depend on? **Gradient × input** takes one "
        "forward and one backward pass: the gradient of log p(true token) with respect to each input "
        "embedding, times that embedding. With `[MASK]`'s embedding subtracted first, it is the first-order "
        "(linear) estimate of what **leave-one-out** measures exactly: hide each other token behind `[MASK]` "
        "in turn and see how much log p(true token) drops (one forward pass per token: the reference)."
    )
    try:
        gradient = cached_gradient(model_key, ids_key, position, true_id, model, tokenizer)
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    st.caption("Gradient × input (green: raises p(true token) to first order; red: lowers it)")
    ui.value_chips(list(seen_tokens), gradient.grad_x_input.tolist(), highlight=position,
                   titles=[signed(v, ".4f") for v in gradient.grad_x_input.tolist()])
    with st.spinner("Leave-one-out: one forward pass per token…"):
        result = Saliency.from_parts(gradient, cached_leave_one_out(model_key, ids_key, position, true_id, model,
                                                                     tokenizer))
        attention = cached_attention(model_key, ids_key, position, model, tokenizer)
    st.caption("Leave-one-out, the reference (green: the token helped the guess; red: hiding it helped; "
               "grey: not measured)")
    loo = [None if v != v else float(v) for v in result.leave_one_out.tolist()]
    ui.value_chips(list(seen_tokens), loo, highlight=position,
                   titles=[signed(v, ".3f") if v is not None else "not measured" for v in loo])
    show(saliency_figure(result, height=ui.chart_height(400)), "inside_saliency_fig")
    taus = layer_agreement(attention.weights, result.leave_one_out)
    show(agreement_figure(result, taus, height=ui.chart_height(320)), "inside_agreement_fig")
    st.markdown(
        "Kendall τ compares the order of the tokens by the **size** of their effect, whichever way each pushes: "
        "Jain & Wallace (2019, §4.1) ask the same question this way (their released code ranks absolute "
        "gradients and absolute changes in the output). On the signed scores, which also ask whether each token "
        f"pushes the same way, τ here is {result.tau_input_signed:.2f} for gradient × input against "
        f"{result.tau_input:.2f} on magnitudes. Where the gradient views disagree with leave-one-out, the model is far "
        "from linear around this sentence; where attention disagrees, a large weight was not what the guess needed."
    )
    with st.expander("Every token as a table"):
        ui.table(pd.DataFrame(result.records()))
    state = st.session_state
    if st.button(f"📊 The same comparison on {AGREEMENT_SENTENCES} {CORPUS_WORDS}", key="inside_agreement_run",
                 help="Masks each sentence's last word and runs leave-one-out on every one (once per model)."):
        state["inside_agreement_for"] = model_key
    if state.get("inside_agreement_for") == model_key:
        summary = cached_agreement(model_key, AGREEMENT_SENTENCES, model, tokenizer)
        show(agreement_summary_figure(summary, height=ui.chart_height(360)), "inside_agreement_summary_fig")
        ui.table(pd.DataFrame(summary.records()))


# --------------------------------------------------------------------------- 4. what training changed
def training_view() -> None:
    candidates = [trained_entry] if trained_entry is not None else \
        [e for e in ui.trained_models().entries() if same_vocabulary(e.tokenizer, tokenizer)]
    if not candidates:
        st.info("No model has been trained in this session yet. Train one on the Training page (a few dozen "
                "steps are enough); it then appears here beside the model it started from.")
        try:
            st.page_link("pages/training.py", label="Go to the Training page", icon="🏋️")
        except Exception:  # the Training page is not registered
            pass
        return
    if trained_entry is None and len(candidates) > 1:
        entry = st.selectbox("Trained model", candidates, format_func=lambda e: e.label, key="inside_compare")
    else:
        entry = candidates[0]
    st.markdown(f"**{ui.markdown_text(entry.label)}** beside the model it started from, on the same sentence and the same masks.")
    k = st.slider("Guesses per position (k)", 3, 10, 5, key="inside_compare_k")
    try:
        comparison = compare_models(entry.base_model, entry.model, entry.tokenizer, seen_ids, None, labels,
                                    position=position, k=k)
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    left, right = st.columns(2)
    bar = 32 if settings.presenter else 22
    with left:
        st.markdown("**Before training**")
        show(topk_figure(comparison.base, bar_height=bar), "inside_before_fig")
    with right:
        st.markdown("**After training**")
        show(topk_figure(comparison.trained, bar_height=bar), "inside_after_fig")
    # the Training page's filmstrip, two frames: the position looked from, through the base and the trained model
    frames = comparison_frames(comparison, comparison_index(comparison, position))
    show(filmstrip_figure(frames, title="The guess at the position looked from: base model, then trained", unit="",
                          label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None), "inside_film_fig")
    summary = filmstrip_summary(frames, unit="")
    if summary:
        st.markdown(ui.markdown_text(summary))
    show(loss_change_figure(comparison, height=ui.chart_height(340)), "inside_loss_change_fig")
    if comparison.base_lens is not None and comparison.trained_lens is not None:
        show(lens_comparison_figure(comparison.base_lens, comparison.trained_lens, height=ui.chart_height(360)),
             "inside_lens_change_fig")
    else:
        st.caption("The logit lens is not available for this model family, so there is no before/after lens.")
    with st.expander("Every position as a table"):
        ui.table(pd.DataFrame(comparison.records()))


{"attention": attention_view, "lens": lens_view, "saliency": saliency_view, "training": training_view}[view]()


# --------------------------------------------------------------------------- export and share
def lesson_bytes() -> bytes:
    """Every view's pictures and tables for this sentence (built only when the button is pressed)."""
    attention = cached_attention(model_key, ids_key, position, model, tokenizer)
    patterns = cached_patterns(model_key, PATTERN_SENTENCES, model, tokenizer)
    result = cached_saliency(model_key, ids_key, position, true_id, model, tokenizer)
    lens = profile = None
    if head_parts(model) is not None:
        lens = cached_lens(model_key, ids_key, position, true_id, 5, model, tokenizer)
        profile = cached_lens_profile(model_key, PROFILE_SENTENCES, int(settings.seed), ui.shared_masking_config(),
                                      model, tokenizer)
    layer, head = (n - 1 for n in st.session_state.get("inside_head_kept", (1, 1)))
    tables = {"head_patterns": patterns.records(), "saliency": result.records()}
    if lens is not None:
        tables.update(logit_lens=lens.records(), logit_lens_corpus=profile.records())
    return lesson_zip("Inside the model", link=share, tables=tables,
                      figures=lesson_figures(attention, patterns, result,
                                             layer_agreement(attention.weights, result.leave_one_out),
                                             lens=lens, profile=profile, head=(layer, head)),
                      settings=masking_settings(sentence=text, seed=settings.seed, model=settings.model_name,
                                                position=position, hidden=hidden,
                                                trained_model=trained_entry.label if trained_entry else None))


share = ui.share_link()
st.download_button("⬇ Lesson export (zip: every view's charts and tables, settings)", lesson_bytes,
                   file_name=f"mlm_lab_inside_seed{settings.seed}.zip", mime="application/zip",
                   key="inside_lesson_zip", on_click="ignore")
