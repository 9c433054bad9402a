"""Inside the model: where [MASK] looks, how the guess forms layer by layer, what it depends on, what training changed."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError, decision_names, encode, seeds
from mlm_core.bundled import heldout_workshop_sentences, workshop_sentences
from ui import share_state
from ui.share_state import DEFAULT_SENTENCE
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
from mlm_core.lessons.inside import (agreement_over_texts, compare_models, last_word, lens_profile_on_texts,
                                     measure_head_patterns, pattern_lines)
from mlm_core.lessons.prose import LessonText
from mlm_core.head import head_parts
from mlm_core.formatting import signed
from mlm_core.data import mask_positions
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
assert tuple(VIEWS) == share_state.INSIDE_VIEWS  # the views a link may name (ui.share_state.FIELDS' view=)

TEXT = LessonText("inside")  # mlm_core/lessons/text/inside.md
settings = ui.page_setup("🔬 Inside the model", link=share_state.PAGE_LINKS["inside"])
st.markdown(TEXT("intro"))
model, tokenizer = ui.model_or_stop(settings)
model, tokenizer, trained_entry = ui.trained_model_choice(model, tokenizer)
model_key = trained_entry.key if trained_entry is not None else f"model:{settings.model_name or 'default'}"


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
    state[KEPT_KEY] = ui.token_pills("Tokens to hide behind [MASK]", tokens, options, key="inside_masked")
    return state[KEPT_KEY]


text, encoded = ui.sentence_or_stop(tokenizer, sentence_controls(), max_chars=MAX_CHARS, max_tokens=MAX_TOKENS,
                                    settings=settings, model=model)
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
    st.markdown(TEXT("attention", heads=H, position=position))
    layer, head = pick_head(L, H)
    # presenter view: a row per head, a column per layer, so the cells are wide enough for room-sized labels
    room = ui.PRESENTER_CHART_FONT_PX if settings.presenter else None
    ui.chart(head_grid_figure(attention, selected=(layer, head), label_px=room,
                          height=ui.chart_height(grid_height(H if room else L))), "inside_grid",
         on_select=on_grid_click, selection_mode="points")
    ui.chart(head_attention_figure(attention, layer, head, height=ui.chart_height(380)), "inside_head_fig")
    ui.chart(layer_attention_figure(attention, height=ui.chart_height(layers_height(L))), "inside_layers_fig")

    st.subheader("Patterns: which heads do what, on this model")
    patterns = cached_patterns(model_key, PATTERN_SENTENCES, model, tokenizer)
    at_mask = cached_patterns(model_key, PATTERN_SENTENCES, model, tokenizer, at_mask=True)
    st.markdown(TEXT("patterns", sentences=patterns.sentences))
    st.markdown("\n".join(pattern_lines(patterns, at_mask)) + "\n\n" + TEXT("same_token"))
    ui.chart(patterns_figure(patterns, height=1100 if settings.presenter else 520, cols=2 if settings.presenter else 4),
         "inside_patterns_fig")
    with st.expander("The patterns as a table"):
        ui.table(pd.DataFrame(patterns.records()))
    st.info(TEXT("attention_is_not"), icon="⚠️")


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
    st.markdown(TEXT("lens", position=position))
    ui.chart(lens_figure(lens, height=ui.chart_height(130 + 46 * lens.top_ids.shape[0])), "inside_lens_fig")
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
    st.markdown(TEXT("lens_profile", n=PROFILE_SENTENCES, corpus=CORPUS_WORDS, rule=rule.describe(),
                     seed=settings.seed))
    profile = cached_lens_profile(model_key, PROFILE_SENTENCES, int(settings.seed), rule, model, tokenizer)
    if profile.positions == 0:
        st.info("This rule puts no [MASK] in these sentences: raise p or the [MASK] share on the Masking page.")
        return
    ui.chart(lens_profile_figure(profile, height=ui.chart_height(340)), "inside_lens_profile_fig")


# --------------------------------------------------------------------------- 3. saliency
def saliency_view() -> None:
    st.markdown(TEXT("saliency", token=ui.markdown_text(tokens[position])))
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
    ui.chart(saliency_figure(result, height=ui.chart_height(400)), "inside_saliency_fig")
    taus = layer_agreement(attention.weights, result.leave_one_out)
    ui.chart(agreement_figure(result, taus, height=ui.chart_height(320)), "inside_agreement_fig")
    st.markdown(TEXT("agreement", signed=result.tau_input_signed, magnitude=result.tau_input))
    with st.expander("Every token as a table"):
        ui.table(pd.DataFrame(result.records()))
    state = st.session_state
    if st.button(f"📊 The same comparison on {AGREEMENT_SENTENCES} {CORPUS_WORDS}", key="inside_agreement_run",
                 help="Masks each sentence's last word and runs leave-one-out on every one (once per model)."):
        state["inside_agreement_for"] = model_key
        # computed here, in the click's turn (cached: later visits read it)
        ui.heavy_click(lambda: cached_agreement(model_key, AGREEMENT_SENTENCES, model, tokenizer))
    if state.get("inside_agreement_for") == model_key:
        summary = cached_agreement(model_key, AGREEMENT_SENTENCES, model, tokenizer)
        ui.chart(agreement_summary_figure(summary, height=ui.chart_height(360)), "inside_agreement_summary_fig")
        ui.table(pd.DataFrame(summary.records()))


# --------------------------------------------------------------------------- 4. what training changed
def training_view() -> None:
    candidates = [trained_entry] if trained_entry is not None else \
        [e for e in ui.trained_models().entries() if same_vocabulary(e.tokenizer, tokenizer)]
    if not candidates:
        st.info(TEXT("no_trained_model"))
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
        ui.chart(topk_figure(comparison.base, bar_height=bar), "inside_before_fig")
    with right:
        st.markdown("**After training**")
        ui.chart(topk_figure(comparison.trained, bar_height=bar), "inside_after_fig")
    # the Training page's filmstrip, two frames: the position looked from, through the base and the trained model
    frames = comparison_frames(comparison, comparison_index(comparison, position))
    ui.chart(filmstrip_figure(frames, title="The guess at the position looked from: base model, then trained", unit="",
                              label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None), "inside_film_fig")
    summary = filmstrip_summary(frames, unit="")
    if summary:
        st.markdown(ui.markdown_text(summary))
    ui.chart(loss_change_figure(comparison, height=ui.chart_height(340)), "inside_loss_change_fig")
    if comparison.base_lens is not None and comparison.trained_lens is not None:
        ui.chart(lens_comparison_figure(comparison.base_lens, comparison.trained_lens, height=ui.chart_height(360)),
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
