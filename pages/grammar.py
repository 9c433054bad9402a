"""Grammar: which of two sentences the model prefers (pseudo-log-likelihood), and how it does per phenomenon."""

import streamlit as st

import ui
from mlm_core import MLMLabError
from mlm_core.default_model import read_build_record
from ui import share_state
from mlm_core.figures.grammar import SCREEN_TEXT_PX, pair_figure, phenomena_figure
from mlm_core.grammar import PHENOMENA, check_sentence
from mlm_core.lessons.grammar import (FIRST_PAIR, class_ask, blimp_source, default_model_blimp, draw_pair, lab_pairs_report,
                                      lab_source, markers_note, pair_source_note, phenomenon_rows, phenomenon_table,
                                      pll_line, report_label, split_changed_words, token_rows, verdict)
from mlm_core.lessons.prose import LessonText

GOOD, BAD, VOTE, PHENOMENON = "grammar_good", "grammar_bad", "grammar_vote_first", "grammar_phenomenon"
SHADOW = "_grammar_widgets"  # a copy of those widgets' values: a page switch drops them
REVEALED = "_grammar_revealed"  # (model, pair) whose answer was shown while "Vote first" is on
TEXT = LessonText("grammar")  # mlm_core/lessons/text/grammar.md

settings = ui.page_setup("📐 Grammar: what the model knows about English", link=share_state.PAGE_LINKS["grammar"])
st.markdown(TEXT("intro"))
model, tokenizer = ui.model_or_stop(settings)
model, tokenizer, trained_entry = ui.trained_model_choice(model, tokenizer)
model_label = trained_entry.label if trained_entry is not None else (settings.model_name or "default model")
model_key = trained_entry.key if trained_entry is not None else f"model:{settings.model_name or 'default'}"
blimp = ui.cached_blimp()  # None unless MLMLAB_BLIMP_DIR names a copy of BLiMP's data folder
lab = ui.cached_lab_pairs()
state = st.session_state
state.setdefault(SHADOW, {GOOD: FIRST_PAIR[0], BAD: FIRST_PAIR[1], VOTE: False, PHENOMENON: next(iter(PHENOMENA))})
for key, value in state[SHADOW].items():
    state.setdefault(key, value)  # a page switch dropped the widgets' values: give them back from the copy

# --------------------------------------------------------------------------- one pair
st.subheader("One pair, token by token")
pick, draw = st.columns([3, 1], vertical_alignment="bottom")
phenomenon = pick.selectbox("Draw a pair of this phenomenon", list(PHENOMENA), format_func=PHENOMENA.get,
                            key=PHENOMENON)
if draw.button("🎲 Draw a pair", key="grammar_draw", width="stretch"):
    state["grammar_draws"] = state.get("grammar_draws", 0) + 1
    drawn = draw_pair(blimp or lab, phenomenon, settings.seed, state["grammar_draws"])
    state[GOOD], state[BAD] = drawn.good, drawn.bad
    state["grammar_source"] = (drawn.good, drawn.bad, drawn.source)
# where the pair in the boxes came from, while it is the drawn one (typed sentences have no source)
drawn_good, drawn_bad, drawn_source = state.get("grammar_source") or (None, None, None)
if (state.get(GOOD), state.get(BAD)) != (drawn_good, drawn_bad):
    drawn_source = None
st.caption(pair_source_note(bool(blimp), ui.markdown_text(drawn_source) if drawn_source else None))
vote_first = st.toggle("🙈 Vote first: hide the model's answer until I show it", key=VOTE,
                       help="For a class: read the pair aloud, let everyone vote, then show the model's answer.")
left, right = st.columns(2)
# no max_chars: the box would cut a longer sentence unseen; check_sentence gives it a message
good = left.text_input("✅ Grammatical sentence", key=GOOD)
bad = right.text_input("❌ Ungrammatical sentence", key=BAD)
state[SHADOW] = {key: state[key] for key in (GOOD, BAD, VOTE, PHENOMENON)}

try:
    pair = (check_sentence(good, "The grammatical sentence"), check_sentence(bad, "The ungrammatical sentence"))
    score = ui.cached_pair_score(model_key, pair, model, tokenizer)
except MLMLabError as exc:
    ui.show_error(exc)
    score = None
if score is not None:
    ui.class_question("grammar", class_ask(score, settings.seed), hold=True)  # the room votes from its own browsers
if score is not None and vote_first and state.get(REVEALED) != (model_key, pair):  # a new pair or model: hidden
    st.info(TEXT("vote_first"))
    # a callback: the click's run then draws the answer without the button (st.button's True comes one run late)
    st.button("👀 Show the model's answer", key="grammar_reveal", type="primary",
              on_click=state.__setitem__, args=(REVEALED, (model_key, pair)))
elif score is not None:
    shown = st.info if score.good.tokens == score.bad.tokens else st.success if score.prefers_good else st.warning
    # split words where the pair differs: the same pair under PLL-word-l2r, said beside the note (Kauf & Ivanova 2023)
    word_l2r = ui.cached_pair_score(model_key, pair, model, tokenizer, word_l2r=True) if split_changed_words(score) \
        else None
    shown(verdict(score, escape=ui.markdown_text, word_l2r=word_l2r))
    ui.chart(pair_figure(score, font_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else SCREEN_TEXT_PX),
             "grammar_pair_chart", name="grammar_pair")
    shade = max((abs(lp) for pll in (score.good, score.bad) for lp in pll.log_probs), default=1.0)  # one scale
    for name, pll in (("Grammatical", score.good), ("Ungrammatical", score.bad)):
        st.markdown(pll_line(name, pll))
        ui.value_chips(list(pll.tokens), list(pll.log_probs),
                       titles=[f"log P = {lp:.2f}" for lp in pll.log_probs], scale=shade)
    with ui.advanced("Every token's log-probability"):
        ui.table(token_rows(score), key="grammar_tokens")

# --------------------------------------------------------------------------- per phenomenon
st.subheader("Per phenomenon, beside the published models")
is_default = settings.model_name is None and trained_entry is None
reports, sources = {}, []
if is_default:  # the build's BLiMP sample: the fair figure, which a measurement on MLM Lab's pairs joins, not replaces
    blimp_report = default_model_blimp(read_build_record())
    if blimp_report is not None:
        reports[report_label(model_label, on_blimp=True)] = blimp_report
        sources.append(blimp_source(blimp_report))
# a slot per model: a measurement kept for another model is never drawn under this one's name
measured = ui.on_demand(f"Measure {model_label} on MLM Lab's {len(lab)} pairs", f"grammar_lab_report:{model_key}",
                        "Scoring every pair…", (model_key,), lambda: lab_pairs_report(model, tokenizer, lab))
if measured is not None:
    reports[report_label(model_label, on_blimp=False)] = measured
    sources.append(lab_source(measured, chosen_on=is_default))
if not reports:
    st.caption(TEXT("measure_wait"))
for source in sources:
    st.caption(f"{model_label}: {source}.")
rows = phenomenon_rows(reports)
ui.chart(phenomena_figure(rows, list(reports), label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None),
         "grammar_phenomena_chart", name="grammar_phenomena")
st.caption(markers_note())
ui.table(phenomenon_table(rows, list(reports)), key="grammar_phenomena_table", decimals=1, height="content")
