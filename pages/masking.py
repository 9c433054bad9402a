"""Masking: how BERT corrupts a sentence, decision by decision."""

import pandas as pd
import streamlit as st

import ui
from ui import share_state
from mlm_core import InputError, MaskingConfig, mask_sentence
from mlm_core.bundled import workshop_sentences
from mlm_core.data import clip_text, typed_special_tokens
from mlm_core.lessons.export import lesson_zip, masking_settings
from mlm_core.figures.masking import (
    convergence_figure, corruption_prediction_figure, decision_counts_figure, per_sentence_histogram,
    span_length_figure,
)
from mlm_core.lessons.masking_view import (
    DEFAULT_HUB_TOKENIZER, class_ask, collator_snippet, fixed_count_note, masking_statistics, measured_rates, mlm_lab_snippet,
    rate_metrics, rate_rows, running_counts, span_lengths_note, token_trace,
)
from mlm_core.lessons.prose import LessonText
from mlm_core.masking import DECISION_WORDS, SELECTED_DECISIONS, SPAN_REPLACEMENTS

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

STRATEGIES = ("token", "whole_word", "span", "exact_count")
TEXT = LessonText("masking")  # mlm_core/lessons/text/masking.md: every explanation on this page

settings = ui.page_setup("🎭 Masking: what BERT hides, and why", link=share_state.PAGE_LINKS["masking"])
st.markdown(TEXT("intro"))


def sentence_controls() -> str:
    state = st.session_state
    state.setdefault(ui.KEYS.sentence, EXAMPLES[0])
    ui.example_picker(EXAMPLES, key="masking_example", sentence_key=ui.KEYS.sentence)
    return st.text_area("…or type your own sentence", key=ui.KEYS.sentence, height=80,
                        help=f"Up to {MAX_TOKENS} tokens are masked; longer text is cut and you are told.")


def masking_controls() -> MaskingConfig | None:
    advanced = not settings.presenter
    with st.expander("Masking rule", expanded=advanced):
        strategy = st.radio("Strategy", STRATEGIES, horizontal=True, key="masking_strategy",
                            format_func=lambda s: s.replace("_", " "))
        st.caption(TEXT(f"strategy_{strategy}", max_predictions=MaskingConfig().max_predictions))
        span_replacement = "per_span"
        if strategy == "span":
            span_replacement = st.radio("80/10/10 decided", SPAN_REPLACEMENTS, horizontal=True,
                                        key="masking_span_replacement", format_func=lambda r: TEXT(f"span_{r}"))
        c1, c2, c3 = st.columns(3)
        p = c1.slider("Selection probability p", 0.0, 1.0, 0.15, 0.01, key="masking_p",
                      help="Share of tokens the model must predict. Higher: more signal per sentence, less context.")
        mask = c2.slider("→ [MASK] share", 0.0, 1.0, 0.8, 0.05, key="masking_mask",
                         help="Of the selected tokens, the share replaced by [MASK].")
        rand = c3.slider("→ random share", 0.0, 1.0, 0.1, 0.05, key="masking_random",
                         help="Of the selected tokens, the share replaced by a random token; the rest stay unchanged.")
        try:
            config = MaskingConfig(mlm_probability=p, mask_replace_prob=mask, random_replace_prob=rand,
                                   strategy=strategy, span_replacement=span_replacement)
        except InputError as exc:
            ui.show_error(exc)
            return None
        unit = "spans" if strategy == "span" and span_replacement == "per_span" else "selected tokens"
        st.caption(
            f"Of the {unit}: {config.mask_replace_prob:.0%} [MASK], {config.random_replace_prob:.0%} random, "
            f"{config.unchanged_prob:.0%} unchanged. The conditional rule: if v < {config.mask_replace_prob:g} → [MASK]; "
            f"else if w < {config.random_given_not_mask:.3g} → random; else unchanged."
        )
        return config


def reroll():
    """A new seed, same view: stepping stays at its token, "Show all" stays all (the guide re-rolls until it sees a random token)."""
    st.session_state[ui.KEYS.seed] = int(st.session_state[ui.KEYS.seed]) + 1


text = sentence_controls()
config = masking_controls()
text, clipped = clip_text(text, MAX_CHARS)
if not text:
    st.warning("The sentence is empty: pick an example or type a sentence to mask.")
    st.stop()
if config is None:
    st.stop()
if config.strategy == "span":
    with st.expander("Where MLM Lab's span masking differs from SpanBERT's code", expanded=False):
        st.markdown(TEXT("span_differences"))

tokenizer = ui.tokenizer_or_stop(settings)
try:
    masked = mask_sentence(tokenizer, text, config, settings.seed, max_length=MAX_TOKENS)
except InputError as exc:
    ui.show_error(exc, "warning")
    st.stop()
encoded, result, tokens = masked.encoded, masked.result, masked.tokens
if clipped or encoded.truncated[0]:
    st.info(f"Your text is longer than {MAX_TOKENS} tokens: only the first {MAX_TOKENS} (with [CLS] and [SEP]) are masked.")
typed = typed_special_tokens(tokenizer, tokens)
if typed:
    names = ", ".join(dict.fromkeys(ui.inline_code(t) for t in typed))
    st.caption(TEXT("typed_special", names=names))
if encoded.n_eligible == 0:
    st.warning("This text has no tokens that can be masked (only special tokens).")
    st.stop()

row = {name: value[0] for name, value in vars(result).items() if name != "draws"}
row["draws"] = {name: value[0] for name, value in result.draws.items()}
special_row = encoded.special_tokens_mask[0]
shown = tokenizer.convert_ids_to_tokens(row["input_ids"][: len(tokens)].tolist())
decisions = masked.decisions
trace = token_trace(tokens, {"special_tokens_mask": special_row, "word_ids": encoded.word_ids[0]}, row, config,
                    tokenizer.convert_ids_to_tokens)
st.session_state[ui.KEYS.masking] = {
    "sentence": text, "tokens": tokens, "encoded": encoded, "result": result, "config": config, "seed": settings.seed,
}

st.subheader("The sentence, as the model will see it")
c1, c2 = st.columns([2, 1])  # room for "🎲 Re-roll (new seed)" on one line at a projector's 1280 px
c1.caption(f"Seed {settings.seed} (set it in the sidebar) · {len(tokens)} tokens · strategy: {config.strategy.replace('_', ' ')}")
c2.button("🎲 Re-roll (new seed)", on_click=reroll, key="masking_reroll", width="stretch")
ui.decision_legend()
ui.class_question("masking", class_ask(text, row["decisions"][: len(tokens)], special_row[: len(tokens)], config,
                                       settings.seed), hold=True)  # the room guesses, the step-through reveals

# Step-through: reveal decisions left to right. "Show all" is remembered as a mode, so a new sentence
# or a re-roll keeps showing every token.
state = st.session_state
state.setdefault("masking_step", len(tokens))
if state.get("_masking_all") and int(state["masking_step"]) >= int(state.get("_masking_len", 0)):
    state["masking_step"] = len(tokens)
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
state["_masking_all"], state["_masking_len"] = step >= len(tokens), len(tokens)

visible = [shown[i] if i < step else tokens[i] for i in range(len(tokens))]
originals = [tokens[i] if i < step and shown[i] != tokens[i] else None for i in range(len(tokens))]
ui.token_chips(
    visible,
    [decisions[i] if i < step else "NOT_SELECTED" for i in range(len(tokens))],
    originals,
    highlight=step - 1 if 0 < step else None,
    titles=[t["rule"] for t in trace],
)
with ui.room_large("masking_draw"):  # the draw line: what the room votes on, read from the back row
    if 0 < step:
        current = trace[step - 1]
        st.markdown(f"**Token {step} of {len(tokens)}: {ui.inline_code(current['token'])}** — "
                    f"{ui.markdown_text(current['rule'])}")
    else:
        st.markdown("Press **Next token ▶** to walk through the decisions one token at a time.")
counts = running_counts(row["decisions"], step, special_row)
m1, m2, m3, m4 = st.columns(4)
m1.metric("selected so far", counts["MASK"] + counts["RANDOM"] + counts["UNCHANGED"])
for column, name in zip((m2, m3, m4), SELECTED_DECISIONS):
    column.metric(DECISION_WORDS[name], counts[name])

# Only what has been revealed: the chart must not give away what the room is voting on.
counts_figure = decision_counts_figure(counts, revealed=step, total=len(tokens))
ui.chart(counts_figure, "masking_counts_fig", name="masking_decision_counts")
table = pd.DataFrame(trace)
with ui.advanced("masking_table"):
    with st.expander("Every decision as a table", expanded=False):
        ui.table(table)
    st.download_button("⬇ Decisions as CSV", table.to_csv(index=False), file_name=f"masking_seed{settings.seed}.csv",
                       mime="text/csv", key="masking_csv")

# --------------------------------------------------------------------------- many sentences
st.subheader("Many sentences: does the rule do what it says?")
st.markdown(TEXT("many_random" if config.strategy in ("token", "whole_word") else "many_fixed"))
n_tokens = st.select_slider("Tokens to mask", [1_000, 5_000, 10_000, 50_000, 100_000], value=10_000,
                            key="masking_stats_tokens", format_func=lambda n: f"{n:,}")
if config.strategy == "span" and n_tokens > MAX_SPAN_TOKENS:
    st.caption(f"Span masking draws its spans one by one: a click masks {MAX_SPAN_TOKENS:,} tokens at most, "
               "so the page stays quick for everyone on the server.")
    n_tokens = MAX_SPAN_TOKENS
if st.button("📊 Mask the corpus", key="masking_stats_run"):
    with st.spinner("Masking…"):
        state["masking_stats"] = (config, settings.seed, ui.heavy_click(lambda: masking_statistics(
            tokenizer, workshop_sentences(), config, target_tokens=n_tokens, seed=settings.seed)))
stats = None
if state.get("masking_stats") is not None:
    stats_config, stats_seed, stats = state["masking_stats"]
    if (stats_config, stats_seed) != (config, settings.seed):
        st.caption("The rule or seed changed since the corpus was masked: press the button again.")
        stats = None
if stats is not None:
    ui.chart(convergence_figure(stats.convergence, config, split_unit=stats.split_unit), "masking_conv_fig",
             name="masking_convergence")
    ui.metric_row(rate_metrics(stats))
    note = fixed_count_note(stats, config)
    if note is not None:
        st.markdown(note)
    st.caption(TEXT("chi2", per="span" if stats.split_unit == "span" else "token"))
    if config.strategy == "span" and stats.span_lengths:
        st.markdown(span_lengths_note(stats, config))
        ui.chart(span_length_figure(stats.span_lengths, config), "masking_span_fig", name="masking_span_lengths")
    ui.chart(per_sentence_histogram(stats.per_sentence), "masking_hist_fig", name="masking_per_sentence")
    with ui.advanced("masking_stats_table"):
        ui.table(pd.DataFrame(stats.convergence))

# --------------------------------------------------------------------------- corruption vs prediction
st.subheader("Two rates in one: what the model must predict, and what it sees corrupted")
# the sentence's own numbers only once every decision is revealed (the room may still be voting)
measured = measured_rates(counts, encoded.n_eligible) if step >= len(tokens) else None
st.markdown(
    "The masking rate p sets two things at once: how many tokens the model **predicts** (every selected one: "
    "[MASK], random and unchanged) and how many it sees **corrupted** ([MASK] or random: the unchanged 10% are "
    "predicted but shown as they are). Wettig et al. (2023, EACL, *Should You Mask 15% in Masked Language "
    "Modeling?*) separate these two effects of a higher rate in their abstract: more corruption makes the task "
    "harder, more predictions benefit optimization. The Training page's lesson *Should you mask 15%?* trains "
    "the same model at 15%, 30% and 40%."
    + (f" **This sentence:** {measured[0]:.0f} of every 100 eligible tokens predicted, {measured[1]:.0f} corrupted."
       if measured else " (Reveal every token above to see this sentence's own numbers.)"))
ui.chart(corruption_prediction_figure(rate_rows(config)), "masking_rates_fig", name="masking_corruption_prediction",
         height=340)

with ui.advanced("masking_hf"):
    st.subheader("The same masks in code")
    model = settings.model_name if settings.model_name not in (None, "tiny-random") else None
    st.caption(f"MLM Lab, in Python: the same sentence, rule and seed {settings.seed} give the masks above.")
    st.code(mlm_lab_snippet(config, text, settings.seed, model, max_length=MAX_TOKENS), language="python",
            wrap_lines=True)
    st.markdown("**The same settings in Hugging Face** (transformers 5.24)")
    code, notes = collator_snippet(config, text, settings.seed, model or DEFAULT_HUB_TOKENIZER, max_length=MAX_TOKENS)
    if code is not None:
        st.code(code, language="python", wrap_lines=True)
    for note in notes:
        st.markdown(f"- {note}")

# Export and share (the zip is built only when clicked, outside this run: give it plain values)

share = ui.share_link()  # brings the URL up to date (the step buttons above) and shows the link in the sidebar
lesson_figures = {"decision counts": counts_figure}
if stats is not None:
    lesson_figures["rates converging"] = convergence_figure(stats.convergence, config, split_unit=stats.split_unit)
lesson = dict(settings=masking_settings(sentence=text, seed=settings.seed, model=settings.model_name, config=config),
              decisions=trace, curves=stats.convergence if stats is not None else None, link=share)
room = ui.class_answers_rows("masking")  # the class's answers, once revealed
if room:
    lesson["tables"] = {"class answers": room}
st.download_button("⬇ Lesson export (zip: decisions, rates, charts, settings)", lambda: lesson_zip(
    "Masking", figures=lesson_figures, **lesson), file_name=f"mlm_lab_masking_seed{settings.seed}.zip",
    mime="application/zip", key="masking_lesson_zip", on_click="ignore")
