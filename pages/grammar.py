"""Grammar: which of two sentences the model prefers (pseudo-log-likelihood), and how it does per phenomenon."""

import streamlit as st

import ui
from mlm_core import MLMLabError
from mlm_core.default_model import read_build_record
from mlm_core.lessons import share_state
from mlm_core.figures.grammar import pair_figure, phenomena_figure
from mlm_core.grammar import MAX_SENTENCE_CHARS, PHENOMENA, PUBLISHED, check_sentence
from mlm_core.lessons.grammar import FIRST_PAIR, default_model_blimp, draw_pair, lab_pairs_report, phenomenon_rows, token_rows, verdict

GOOD, BAD, SHADOW = "grammar_good", "grammar_bad", "_grammar_pair"  # the boxes, and their copy across page switches

settings = ui.page_setup("📐 Grammar: what the model knows about English", link=share_state.PAGE_LINKS["grammar"])
st.markdown(
    "Does the model know English grammar? Give it a **minimal pair**: two sentences that differ in one place, "
    "one grammatical and one not. The model scores each by its **pseudo-log-likelihood** (PLL): every token "
    "masked in turn, the log-probabilities of the true tokens summed (Salazar et al. 2020). It *prefers* the "
    "sentence with the higher PLL. Nothing is trained and there is no threshold: this is how BLiMP "
    "(Warstadt et al. 2020) tests language models on 67 kinds of pairs in 12 phenomena."
)
model, tokenizer = ui.model_or_stop(settings)
model, tokenizer, trained_entry = ui.trained_model_choice(model, tokenizer)
model_label = trained_entry.label if trained_entry is not None else (settings.model_name or "default model")
model_key = trained_entry.key if trained_entry is not None else f"model:{settings.model_name or 'default'}"
blimp = ui.cached_blimp()  # None unless MLMLAB_BLIMP_DIR names a copy of BLiMP's data folder
lab = ui.cached_lab_pairs()
state = st.session_state
state.setdefault(SHADOW, FIRST_PAIR)
for key, value in zip((GOOD, BAD), state[SHADOW]):
    state.setdefault(key, value)  # a page switch drops the boxes' values: give them back from the copy

# --------------------------------------------------------------------------- one pair
st.subheader("One pair, token by token")
pick, draw = st.columns([3, 1], vertical_alignment="bottom")
phenomenon = pick.selectbox("Draw a pair of this phenomenon", list(PHENOMENA), format_func=PHENOMENA.get,
                            key="grammar_phenomenon")
if draw.button("🎲 Draw a pair", key="grammar_draw", width="stretch"):
    state["grammar_draws"] = state.get("grammar_draws", 0) + 1
    drawn = draw_pair(blimp or lab, phenomenon, settings.seed, state["grammar_draws"])
    state[GOOD], state[BAD], state["grammar_source"] = drawn.good, drawn.bad, drawn.source
st.caption(f"Pairs are drawn from {'BLiMP (MLMLAB_BLIMP_DIR)' if blimp else 'MLM Lab’s own pairs (assets/grammar_pairs.tsv, written for this app in the style of BLiMP’s phenomena; BLiMP itself is not bundled: see README)'}."
           + (f" This one: {ui.markdown_text(state['grammar_source'])}." if state.get("grammar_source") else ""))
left, right = st.columns(2)
good = left.text_input("✅ Grammatical sentence", key=GOOD, max_chars=MAX_SENTENCE_CHARS)
bad = right.text_input("❌ Ungrammatical sentence", key=BAD, max_chars=MAX_SENTENCE_CHARS)
state[SHADOW] = (good, bad)

try:
    pair = (check_sentence(good), check_sentence(bad))
    score = ui.cached_pair_score(model_key, pair, model, tokenizer)
except MLMLabError as exc:
    ui.show_error(exc)
    score = None
if score is not None:
    (st.success if score.prefers_good else st.warning)(verdict(score))
    st.plotly_chart(ui.room_figure(pair_figure(score, height=ui.chart_height(420))), key="grammar_pair_chart",
                    config=ui.plotly_config("grammar_pair"))
    for name, pll in (("Grammatical", score.good), ("Ungrammatical", score.bad)):
        st.markdown(f"**{name}**: PLL {pll.total:.2f} nats over {len(pll.tokens)} tokens (darker red = less likely)")
        ui.value_chips(list(pll.tokens), list(pll.log_probs),
                       titles=[f"log P = {lp:.2f}" for lp in pll.log_probs])
    with ui.advanced("Every token's log-probability"):
        ui.table(token_rows(score), key="grammar_tokens")

# --------------------------------------------------------------------------- per phenomenon
st.subheader("Per phenomenon, beside the published models")
report, source = None, ""
if settings.model_name is None and trained_entry is None:
    report = default_model_blimp(read_build_record())
    if report is not None:
        source = (f"BLiMP, {report.n_pairs:,} pairs (a fixed sample of every paradigm), measured when the default "
                  f"model was built (assets/default_mlm/build.json): overall {100 * report.overall:.1f}% "
                  f"± {100 * report.overall_se:.1f}")
measured = ui.on_demand(f"Measure {model_label} on MLM Lab's {len(lab)} pairs", "grammar_lab_report",
                        "Scoring every pair…", (model_key,), lambda: lab_pairs_report(model, tokenizer, lab))
if measured is not None:
    report, source = measured, (f"MLM Lab's {measured.n_pairs} pairs (not BLiMP: the markers are BLiMP's): "
                                f"overall {100 * measured.overall:.1f}% ± {100 * measured.overall_se:.1f}")
if report is None:
    st.caption("Press the button to measure this model; the markers are the published models on BLiMP.")
else:
    st.caption(f"{model_label}: {source}.")
rows = phenomenon_rows(report, model_label)
st.plotly_chart(ui.room_figure(phenomena_figure(rows, model_label, height=ui.chart_height(520))),
                key="grammar_phenomena_chart", config=ui.plotly_config("grammar_phenomena"))
st.caption("Markers: BLiMP's Table 3 (Warstadt et al. 2020, TACL), forced choice on all 67,000 pairs: overall "
           + ", ".join(f"{name} {PUBLISHED[name]['overall']}%" for name in ("5-gram", "LSTM", "Transformer-XL", "GPT-2", "human"))
           + f". Masked LMs by PLL (Salazar et al. 2020): RoBERTa-large {PUBLISHED['RoBERTa-large (PLL)']['overall']}%.")
ui.table([{k: v for k, v in r.items() if k != "key"} for r in rows], key="grammar_phenomena_table")
