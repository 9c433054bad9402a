"""Masking: how BERT corrupts a sentence, decision by decision."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.lessons import share_state
from mlm_core import InputError, MaskingConfig, mask_sentence
from mlm_core.bundled import workshop_sentences
from mlm_core.data import clip_text, typed_special_tokens
from mlm_core.lessons.export import lesson_zip, masking_settings
from mlm_core.figures.masking import (
    convergence_figure, corruption_prediction_figure, decision_counts_figure, per_sentence_histogram,
    span_length_figure,
)
from mlm_core.formatting import signed
from mlm_core.lessons.masking_view import (
    DEFAULT_HUB_TOKENIZER, collator_snippet, masking_statistics, measured_rates, mlm_lab_snippet, rate_rows,
    running_counts, token_trace,
)
from mlm_core.masking import SPAN_REPLACEMENTS

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
    "token": "Each token on its own, with probability p (the BERT paper; Hugging Face's "
             "`DataCollatorForLanguageModeling`).",
    "whole_word": "Each *word* on its own, with probability p; all its pieces go together (Hugging Face's "
                  "`whole_word_mask=True`). Google's whole-word masking is another rule: it fills the exact "
                  "count with whole words.",
    "span": "SpanBERT (Joshi et al. 2020, §3.1): spans of whole words, lengths drawn from Geometric(0.2) "
            "renormalised over 1–10 words (mean 3.8), until round(p·n) of the n eligible tokens are selected, "
            "never more.",
    "exact_count": f"Exactly min({MaskingConfig().max_predictions}, max(1, round(n·p))) tokens, n counting every "
                   "token, [CLS] and [SEP] included (Google BERT's `create_pretraining_data.py`, without its "
                   "whole-word flag).",
}
SPAN_REPLACEMENT_HELP = {
    "per_span": "per span: a whole span becomes [MASK], or random tokens, or stays (SpanBERT paper, §3.1)",
    "per_token": "per token, as BERT does (the default of SpanBERT's released code: --replacement-method word_piece)",
}
SPAN_DIFFERENCES = """
MLM Lab follows the paper (§3.1) and differs from SpanBERT's released code
(`pretraining/fairseq/data/masking.py`, `PairWithSpanMaskingScheme`) here:
- **Budget**: the code rounds up (`ceil(n · 0.15)`); MLM Lab rounds to the nearest (`round(n · p)`).
- **Whole words**: the code stops at its budget even inside a word; MLM Lab never cuts a word: a span stops
  before a word that would pass the budget, and the sentence is done when no free word fits, so it may fall
  short of the budget by less than one word (on the workshop corpus it never does).
- **Where a span starts**: the code picks a start *token* (a word of 3 pieces is 3 times as likely) and lets
  spans run over tokens already masked; MLM Lab picks a start *word* among the free words that fit, and a span
  stops at a word already taken. So kept spans are often shorter than drawn ones.
- **Touching spans**: the code merges them before replacing, so they share one decision; MLM Lab keeps one
  decision per drawn span.
- **Replacement**: the paper decides 80/10/10 per span (MLM Lab's default); the code's default
  (`--replacement-method word_piece`) decides per token (the *per token* option). Its default
  `--geometric-p` is 0.3; the paper's, used here, is 0.2.
- **Random tokens**: the code draws them from the corpus ("according to input distribution"); MLM Lab draws
  them uniformly from the non-special vocabulary, as for every rule here.
"""

settings = ui.page_setup("🎭 Masking: what BERT hides, and why", link=share_state.PAGE_LINKS["masking"])
st.markdown(
    "BERT **selects 15%** of the tokens. Of those, **80%** become `[MASK]`, **10%** a random token and "
    "**10%** stay unchanged, and the model must predict the original at *every* selected position. "
    "Step through the decisions below, then mask thousands of sentences to compare each rule with what it promises."
)


def sentence_controls() -> str:
    state = st.session_state
    state.setdefault(ui.KEYS.sentence, EXAMPLES[0])
    ui.example_picker(EXAMPLES, key="masking_example", sentence_key=ui.KEYS.sentence)
    return st.text_area("…or type your own sentence", key=ui.KEYS.sentence, height=80,
                        help=f"Up to {MAX_TOKENS} tokens are masked; longer text is cut and you are told.")


def masking_controls() -> MaskingConfig | None:
    advanced = not settings.presenter
    with st.expander("Masking rule", expanded=advanced):
        strategy = st.radio("Strategy", list(STRATEGY_HELP), horizontal=True, key="masking_strategy",
                            format_func=lambda s: s.replace("_", " "))
        st.caption(STRATEGY_HELP[strategy])
        span_replacement = "per_span"
        if strategy == "span":
            span_replacement = st.radio("80/10/10 decided", SPAN_REPLACEMENTS, horizontal=True,
                                        key="masking_span_replacement", format_func=SPAN_REPLACEMENT_HELP.get)
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
        st.markdown(SPAN_DIFFERENCES)

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
    st.caption(f"Your sentence has a typed {names}: like [CLS] and [SEP] it is a special token here, so no rule "
               "selects it (Hugging Face's collator never selects special tokens either). To have the model fill "
               "a blank you typed, open the Predictions page.")
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
m2.metric("→ [MASK]", counts["MASK"])
m3.metric("→ random", counts["RANDOM"])
m4.metric("unchanged", counts["UNCHANGED"])

# Only what has been revealed: the chart must not give away what the room is voting on.
counts_figure = decision_counts_figure(counts, revealed=step, total=len(tokens), height=ui.chart_height(300))
st.plotly_chart(ui.room_figure(counts_figure), key="masking_counts_fig",
                config=ui.plotly_config("masking_decision_counts"))
table = pd.DataFrame(trace)
with ui.advanced("masking_table"):
    with st.expander("Every decision as a table", expanded=False):
        ui.table(table)
    st.download_button("⬇ Decisions as CSV", table.to_csv(index=False), file_name=f"masking_seed{settings.seed}.csv",
                       mime="text/csv", key="masking_csv")

# --------------------------------------------------------------------------- many sentences
st.subheader("Many sentences: does the rule do what it says?")
if config.strategy in ("token", "whole_word"):
    st.markdown(
        "One sentence is noisy: it may get no selected token at all. Mask the workshop corpus over and over "
        "and the measured rates settle on the configured ones."
    )
else:
    st.markdown(
        "This rule fixes how many tokens each sentence gets (Google's exact count, SpanBERT's budget), so there is "
        "no noise in the count to average away: the rate is what the rule computes from each sentence's length, "
        "which on short sentences is not p. Compare the two below."
    )
n_tokens = st.select_slider("Tokens to mask", [1_000, 5_000, 10_000, 50_000, 100_000], value=10_000,
                            key="masking_stats_tokens", format_func=lambda n: f"{n:,}")
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
    check = stats.selection
    st.plotly_chart(ui.room_figure(convergence_figure(stats.convergence, config, split_unit=stats.split_unit,
                                                      height=ui.chart_height(420))),
                    key="masking_conv_fig", config=ui.plotly_config("masking_convergence"))
    per = "span" if stats.split_unit == "span" else "token"
    if check.kind == "binomial":
        c1, c2, c3 = st.columns(3)
        unit = "tokens" if check.unit == "token" else "words"
        c1.metric(f"{unit} selected", f"{check.rate:.2%}", f"z = {signed(check.z)}", delta_color="off", delta_arrow="off",
                  help=f"{check.selected:,} of {check.units:,} {unit}; z = (rate − p) / standard error, with one "
                       f"independent draw per {check.unit}. When the rule is followed, |z| is above 3 in about 3 "
                       "draws of 1,000; far above (say 6) would say it is not.")
    else:
        c0, c1, c2, c3 = st.columns(4)
        c0.metric("the rule selects", f"{check.expected_rate:.2%}",
                  help=f"The rule's counts sum to {check.expected:,.0f} tokens of {check.units:,}. A fixed count has "
                       "no sampling error, so there is no z-score to show.")
        c1.metric("measured", f"{check.rate:.2%}",
                  help=f"{check.selected:,} tokens selected; {check.rows_short:,} of {check.rows:,} sentences fell short "
                       "of the rule's count.")
    c2.metric(f"80/10/10 χ² p-value (per {per})", f"{stats.p_value:.3f}")
    c3.metric("eligible tokens", f"{stats.eligible:,}")
    if check.kind == "fixed":
        per_row = check.expected / max(check.rows, 1)
        measured_row = check.selected / max(check.rows, 1)
        why = ("Google counts [CLS] and [SEP] in n and selects at least one token, so short sentences get more than p"
               if config.strategy == "exact_count" else
               "each sentence's budget is round(p · its eligible tokens); rounding on short sentences moves the rate off p")
        st.markdown(f"Per sentence: the rule asks for **{per_row:.2f}** tokens on average, **{measured_row:.2f}** "
                    f"were selected; {why}.")
    st.caption(f"The 80/10/10 χ² counts one decision per {per} (the units drawn independently). A p-value far "
               "below 0.05 would say the split is off; values anywhere between 0 and 1 are normal when the rule is "
               "implemented right.")
    if config.strategy == "span" and stats.span_lengths:
        drawn = sum(k * n for k, n in stats.span_lengths.items()) / sum(stats.span_lengths.values())
        st.markdown(f"Span lengths: **{drawn:.2f}** words drawn on average (the law: {config.mean_span_length():.2f}); "
                    f"**{stats.span_kept_mean:.2f}** kept, because the budget, the end of the sentence and other "
                    "spans cut them.")
        st.plotly_chart(ui.room_figure(span_length_figure(stats.span_lengths, config, height=ui.chart_height(340))),
                        key="masking_span_fig", config=ui.plotly_config("masking_span_lengths"))
    st.plotly_chart(ui.room_figure(per_sentence_histogram(stats.per_sentence, height=ui.chart_height(360))),
                    key="masking_hist_fig", config=ui.plotly_config("masking_per_sentence"))
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
st.plotly_chart(ui.room_figure(corruption_prediction_figure(rate_rows(config), height=ui.chart_height(340))),
                key="masking_rates_fig", config=ui.plotly_config("masking_corruption_prediction"))

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
st.download_button("⬇ Lesson export (zip: decisions, rates, charts, settings)", lambda: lesson_zip(
    "Masking", figures=lesson_figures, **lesson), file_name=f"mlm_lab_masking_seed{settings.seed}.zip",
    mime="application/zip", key="masking_lesson_zip", on_click="ignore")
