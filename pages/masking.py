"""Masking: how BERT corrupts a sentence, decision by decision."""

import pandas as pd
import streamlit as st
import torch

import ui
from mlm_core import Decision, InputError, MaskingConfig, encode, mask_batch
from mlm_core.data import clip_text
from mlm_core.figures.masking import convergence_figure, decision_counts_figure, per_sentence_histogram
from mlm_core.masking_stats import collator_snippet, masking_statistics, running_counts, token_trace
from mlm_core.bundled import workshop_sentences
from mlm_core.export import lesson_zip, masking_settings

MAX_TOKENS = 128  # what one sentence may use here: BERT's usual pre-training length
MAX_CHARS = 4_000  # longer text is clipped before tokenizing (128 tokens never need more)
# Span selection is a Python loop: 100k tokens at p = 1 held one core (and the GIL) for 10 s per click.
MAX_SPAN_TOKENS = 20_000

EXAMPLES = [
    "The cat sat on the mat and watched the birds in the garden.",
    "Masked language models learn by predicting the words that were hidden from them.",
    "Unbelievably, the tokenizer splits rare words into several word pieces.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "I drink a cup of coffee every morning before I walk to work.",
]

STRATEGY_HELP = {
    "token": "Each token is selected on its own with probability p (BERT, Hugging Face's collator).",
    "whole_word": "Whole words are selected: all pieces of a word share one draw (BERT's whole-word masking).",
    "span": "Contiguous spans of words, lengths ~ Geometric(0.2) clipped at 10 (SpanBERT), until p of the tokens are selected.",
    "exact_count": "Exactly min(max_predictions, max(1, round(n·p))) tokens per sentence (Google BERT's create_pretraining_data).",
}

settings = ui.page_setup("🎭 Masking: what BERT hides, and why")
st.markdown(
    "BERT **selects 15%** of the tokens. Of those, **80%** become `[MASK]`, **10%** a random token and "
    "**10%** stay unchanged, and the model must predict the original at *every* selected position. "
    "Step through the decisions below, then mask thousands of sentences to watch the rates emerge."
)


def sentence_controls() -> str:
    state = st.session_state
    state.setdefault(ui.KEYS.sentence, EXAMPLES[0])
    state.setdefault("masking_example", EXAMPLES[0])

    def use_example():
        state[ui.KEYS.sentence] = state["masking_example"]

    st.selectbox("Pick an example", EXAMPLES, key="masking_example", on_change=use_example)
    return st.text_area("…or type your own sentence", key=ui.KEYS.sentence, height=80,
                        help=f"Up to {MAX_TOKENS} tokens are masked; longer text is cut and you are told.")


def masking_controls() -> MaskingConfig | None:
    advanced = not settings.presenter
    with st.expander("Masking rule", expanded=advanced):
        strategy = st.radio("Strategy", list(STRATEGY_HELP), horizontal=True, key="masking_strategy",
                            format_func=lambda s: s.replace("_", " "))
        st.caption(STRATEGY_HELP[strategy])
        c1, c2, c3 = st.columns(3)
        p = c1.slider("Selection probability p", 0.0, 1.0, 0.15, 0.01, key="masking_p",
                      help="Share of tokens the model must predict. Higher: more signal per sentence, less context.")
        mask = c2.slider("→ [MASK] share", 0.0, 1.0, 0.8, 0.05, key="masking_mask",
                         help="Of the selected tokens, the share replaced by [MASK].")
        rand = c3.slider("→ random share", 0.0, 1.0, 0.1, 0.05, key="masking_random",
                         help="Of the selected tokens, the share replaced by a random token; the rest stay unchanged.")
        try:
            config = MaskingConfig(mlm_probability=p, mask_replace_prob=mask, random_replace_prob=rand, strategy=strategy)
        except InputError as exc:
            st.error(str(exc))
            return None
        st.caption(
            f"Of the selected tokens: {config.mask_replace_prob:.0%} [MASK], {config.random_replace_prob:.0%} random, "
            f"{config.unchanged_prob:.0%} unchanged. The conditional rule: if v < {config.mask_replace_prob:g} → [MASK]; "
            f"else if w < {config.random_given_not_mask:.3g} → random; else unchanged."
        )
        return config


def reroll():
    st.session_state[ui.KEYS.seed] = int(st.session_state[ui.KEYS.seed]) + 1
    st.session_state["masking_step"] = 0


text = sentence_controls()
config = masking_controls()
text, clipped = clip_text(text, MAX_CHARS)
if not text:
    st.warning("The sentence is empty: pick an example or type a sentence to mask.")
    st.stop()
if config is None:
    st.stop()

tokenizer = ui.tokenizer_or_stop(settings)
try:
    encoded = encode(tokenizer, text, max_length=MAX_TOKENS)
except InputError as exc:
    st.warning(str(exc))
    st.stop()
if clipped or encoded.truncated[0]:
    st.info(f"Your text is longer than {MAX_TOKENS} tokens: only the first {MAX_TOKENS} (with [CLS] and [SEP]) are masked.")
if encoded.n_eligible == 0:
    st.warning("This text has no tokens that can be masked (only special tokens).")
    st.stop()

generator = torch.Generator().manual_seed(settings.seed)
result = mask_batch(tokenizer, encoded, config, generator)
tokens = encoded.tokens[0]
row = {name: value[0] for name, value in vars(result).items() if name != "draws"}
row["draws"] = {name: value[0] for name, value in result.draws.items()}
special_row = encoded.special_tokens_mask[0]
shown = tokenizer.convert_ids_to_tokens(row["input_ids"][: len(tokens)].tolist())
decisions = ["SPECIAL" if special_row[i] else Decision(int(row["decisions"][i])).name for i in range(len(tokens))]
trace = token_trace(tokens, {"special_tokens_mask": special_row}, row, config, tokenizer.convert_ids_to_tokens)
st.session_state[ui.KEYS.masking] = {
    "sentence": text, "tokens": tokens, "encoded": encoded, "result": result, "config": config, "seed": settings.seed,
}

st.subheader("The sentence, as the model will see it")
c1, c2 = st.columns([3, 1])
c1.caption(f"Seed {settings.seed} (set it in the sidebar) · {len(tokens)} tokens · strategy: {config.strategy.replace('_', ' ')}")
c2.button("🎲 Re-roll (new seed)", on_click=reroll, key="masking_reroll", width="stretch")
ui.decision_legend()

# Step-through: reveal decisions left to right.
state = st.session_state
state.setdefault("masking_step", len(tokens))
step = min(int(state["masking_step"]), len(tokens))
b1, b2, b3, b4 = st.columns(4)
if b1.button("⏮ Start over", key="masking_first", width="stretch"):
    step = 0
if b2.button("◀ Previous token", key="masking_prev", width="stretch"):
    step = max(0, step - 1)
if b3.button("Next token ▶", key="masking_next", width="stretch"):
    step = min(len(tokens), step + 1)
if b4.button("⏭ Show all", key="masking_all", width="stretch"):
    step = len(tokens)
state["masking_step"] = step

visible = [shown[i] if i < step else tokens[i] for i in range(len(tokens))]
originals = [tokens[i] if i < step and shown[i] != tokens[i] else None for i in range(len(tokens))]
ui.token_chips(
    visible,
    [decisions[i] if i < step else "NOT_SELECTED" for i in range(len(tokens))],
    originals,
    highlight=step - 1 if 0 < step else None,
    titles=[t["rule"] for t in trace],
)
if 0 < step:
    current = trace[step - 1]
    st.markdown(f"**Token {step} of {len(tokens)}: {ui.inline_code(current['token'])}** — {ui.markdown_text(current['rule'])}")
else:
    st.markdown("Press **Next token ▶** to walk through the decisions one token at a time.")
counts = running_counts(row["decisions"], step)
m1, m2, m3, m4 = st.columns(4)
m1.metric("selected so far", counts["MASK"] + counts["RANDOM"] + counts["UNCHANGED"])
m2.metric("→ [MASK]", counts["MASK"])
m3.metric("→ random", counts["RANDOM"])
m4.metric("unchanged", counts["UNCHANGED"])

counts_figure = decision_counts_figure(result.counts(), height=ui.chart_height(300))
st.plotly_chart(counts_figure, key="masking_counts_fig",
                config=ui.plotly_config("masking_decision_counts"))
table = pd.DataFrame(trace)
with ui.advanced("masking_table"):
    with st.expander("Every decision as a table", expanded=False):
        st.dataframe(table, hide_index=True, width="stretch")
    st.download_button("⬇ Decisions as CSV", table.to_csv(index=False), file_name=f"masking_seed{settings.seed}.csv",
                       mime="text/csv", key="masking_csv")

st.subheader("Many sentences: do the rates come out right?")
st.markdown(
    "One sentence is noisy: it may get no selected token at all. Mask the workshop corpus over and over "
    "and the empirical rates settle on the configured ones."
)
n_tokens = st.select_slider("Tokens to mask", [1_000, 5_000, 10_000, 50_000, 100_000], value=10_000,
                            key="masking_stats_tokens")
if config.strategy == "span" and n_tokens > MAX_SPAN_TOKENS:
    st.caption(f"Span masking draws its spans one by one: a click masks {MAX_SPAN_TOKENS:,} tokens at most, "
               "so the page stays quick for everyone on the server.")
    n_tokens = MAX_SPAN_TOKENS
if st.button("📊 Mask the corpus", key="masking_stats_run"):
    with st.spinner("Masking…"):
        state["masking_stats"] = (config, settings.seed, masking_statistics(
            tokenizer, workshop_sentences(), config, target_tokens=n_tokens, seed=settings.seed))
stats = None
if state.get("masking_stats") is not None:
    stats_config, stats_seed, stats = state["masking_stats"]
    if (stats_config, stats_seed) != (config, settings.seed):
        st.caption("The rule or seed changed since the corpus was masked: press the button again.")
        stats = None
if stats is not None:
    st.plotly_chart(convergence_figure(stats.convergence, config, height=ui.chart_height(420)),
                    key="masking_conv_fig", config=ui.plotly_config("masking_convergence"))
    c1, c2, c3 = st.columns(3)
    c1.metric("selection rate", f"{stats.selected / max(stats.eligible, 1):.4f}", f"z = {stats.selection_z:+.2f}",
              delta_color="off")
    c2.metric("80/10/10 χ² p-value", f"{stats.p_value:.3f}")
    c3.metric("eligible tokens", f"{stats.eligible:,}")
    st.caption("A p-value far below 0.05 would say the split is off; values anywhere between 0 and 1 are "
               "normal when the rule is implemented right.")
    st.plotly_chart(per_sentence_histogram(stats.per_sentence, height=ui.chart_height(360)), key="masking_hist_fig",
                    config=ui.plotly_config("masking_per_sentence"))
    st.dataframe(pd.DataFrame(stats.convergence), hide_index=True, width="stretch")

with ui.advanced("masking_hf"):
    st.subheader("The same settings in Hugging Face")
    code, notes = collator_snippet(config)
    st.code(code, language="python")
    for note in notes:
        st.markdown(f"- {note}")

# Export and share (the zip is built only when clicked, outside this run: give it plain values)

share = ui.share_link()  # brings the URL up to date (the step buttons above) and shows the link in the sidebar
lesson_figures = {"decision counts": counts_figure}
if stats is not None:
    lesson_figures["rates converging"] = convergence_figure(stats.convergence, config)
lesson = dict(settings=masking_settings(sentence=text, seed=settings.seed, model=settings.model_name, config=config),
              decisions=trace, curves=stats.convergence if stats is not None else None, link=share)
st.download_button("⬇ Lesson export (zip: decisions, rates, charts, settings)", lambda: lesson_zip(
    "Masking", figures=lesson_figures, **lesson), file_name=f"mlm_lab_masking_seed{settings.seed}.zip",
    mime="application/zip", key="masking_lesson_zip", on_click="ignore")
