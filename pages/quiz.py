"""Quiz: guess the hidden token, spot the random replacement, and say which positions count in the loss."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError
from mlm_core.bundled import workshop_sentences
from mlm_core.lessons.export import lesson_json
from mlm_core.masking import DECISION_WORDS
from mlm_core.figures.predictions import topk_figure
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons import quiz
from ui import share_state
from mlm_core.masking import RANDOM_REPLACEMENT_SOURCE
from mlm_core.models import model_description
from mlm_core.predict import predict_masked

TOP_K = 5

QS_FIELD = share_state.Field("qs", "text", None, max_chars=quiz.QUESTION_ID_CHARS, label="teacher's question")
QS_KEY = "quiz_qs"  # the bank id of the teacher's own sentence (question 1), shared by link as qs=

TEXT = LessonText("quiz")  # mlm_core/lessons/text/quiz.md
# The sentence stays out of this page's address and share link: it would give the answers away.
settings = ui.page_setup("❓ Quiz: think before the answer appears", link=share_state.PAGE_LINKS["quiz"])
GO_MASKING = "quiz_go_masking"
if st.session_state.pop(GO_MASKING, False):
    st.switch_page("pages/masking.py")
st.markdown(TEXT("intro"))
state = st.session_state
state.setdefault("quiz_round", 0)
state.setdefault("quiz_board", {})
state.setdefault("quiz_answers", {})  # question id -> what was answered (kept for the reveal)
score_slot = st.container()


@st.cache_resource
def question_bank() -> quiz.QuestionBank:
    """Teachers' own sentences, one bank for the whole server: a link carries only their random id."""
    return quiz.QuestionBank()


@st.cache_resource(max_entries=256, show_spinner="Finding a question…")
def cached_question(_tokenizer, model_name, kind, sentence, source, seed, round_number, config):
    """The question (shared by every session: never changed after it is made)."""
    return quiz.pick_question(_tokenizer, kind, sentence, seed=seed, round=round_number, config=config,
                              source=source)


# --------------------------------------------------------------------------- controls
def next_question():
    state["quiz_round"] = int(state.get("quiz_round", 0)) + 1


def shared_question():
    state["quiz_round"] = 0


def reset_score():
    state["quiz_board"] = {}
    state["quiz_answers"] = {}


def use_own_sentence():
    text = str(state.get("quiz_own_text") or "").strip()[: share_state.MAX_SENTENCE_CHARS]
    if text:  # the teacher's (the server's own machine) are kept; a student's count against their own few
        state[QS_KEY] = question_bank().add(text, client=ui.client_id(), keep=ui.session.session_is_local())
        state["quiz_round"] = 0
    state["quiz_own_text"] = ""  # the box never shows the sentence again: a student may open it


def use_corpus():
    state.pop(QS_KEY, None)
    state["quiz_round"] = 0


def quiz_controls() -> tuple[str, int]:
    kind = st.radio("Quiz", share_state.QUIZ_KINDS, format_func=quiz.QUIZ_TITLES.get, horizontal=True,
                    key="quiz_kind")
    c1, c2 = st.columns(2)
    c1.button("Next question ▶", key="quiz_next", on_click=next_question, width="stretch",
              help="A new sentence from the workshop corpus, the same for everyone with the same seed.")
    c2.button("⟲ Back to question 1", key="quiz_shared", on_click=shared_question, width="stretch",
              disabled=int(state["quiz_round"]) == 0)
    return kind, int(state["quiz_round"])


def settings_controls() -> None:
    with ui.advanced("quiz_settings"), st.expander("Question settings (teacher)", expanded=False):
        st.text_area("Ask question 1 about your own sentence", key="quiz_own_text", height=68,
                     placeholder="Type or paste it here: it is kept on this server, never in the link or on the page.",
                     help=TEXT("own_sentence_help"))
        c1, c2 = st.columns(2)
        c1.button("Use my sentence for question 1", key="quiz_use_own", on_click=use_own_sentence)
        c2.button("Corpus sentences only", key="quiz_use_corpus", on_click=use_corpus, disabled=not state.get(QS_KEY))
        if state.get(QS_KEY):
            st.caption("Question 1 asks about your own sentence (hidden here on purpose).")
        st.caption(TEXT("rule_note"))
        st.button("Reset my score", key="quiz_reset", on_click=reset_score)


kind, round_number = quiz_controls()
settings_controls()
values = ui.sync_query_params(page_fields=[(QS_FIELD, QS_KEY)])
try:
    config = share_state.masking_config(values)
except MLMLabError:
    config = share_state.masking_config(share_state.defaults())

tokenizer = ui.tokenizer_or_stop(settings)

own = question_bank().get(state.get(QS_KEY))
if state.get(QS_KEY) and own is None:
    st.warning(TEXT("lost_sentence"))
if round_number == 0 and own is not None:
    sentence, source, where = own, f"teacher:{state[QS_KEY]}", "the teacher's sentence"
else:
    index, sentence = quiz.corpus_question_sentence(workshop_sentences(), settings.seed, round_number, kind)
    source, where = f"corpus:{index}", "a sentence of the workshop corpus"
try:
    question = cached_question(tokenizer, settings.model_name, kind, sentence, source, settings.seed,
                               round_number, config)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()

qid = question.qid
revealed = qid in state["quiz_answers"]
problem = quiz.question_problem(question)
seed_note = (f"masks of seed {question.seed}" if question.seed == settings.seed else
             f"masks of seed {question.seed}: seed {settings.seed} gave masks this quiz cannot ask about, so the "
             "next seeds were tried, as 🎲 Re-roll on the Masking page does")
st.caption(f"Question {round_number + 1} · {where} · {seed_note} · question id `{qid}`")
if problem is not None:
    st.info(f"Here {problem}, with every seed tried: press **Next question ▶**, or use another sentence.")
if question.truncated:
    st.info(f"The sentence is long: the quiz uses its first {quiz.MASKING_MAX_TOKENS} tokens.")


def show_on_masking_page(sentence: str, seed: int, length: int):
    state[ui.KEYS.sentence] = sentence
    state[ui.KEYS.seed] = seed
    state["masking_step"] = length
    state[GO_MASKING] = True  # the next run (with the new seed: another question id) switches page


def masking_page_button() -> None:
    """After the reveal: the same masks on the Masking page (same sentence, seed and rule)."""
    st.button("🎭 See these masks on the Masking page", key="quiz_to_masking", on_click=show_on_masking_page,
              args=(question.sentence, question.seed, len(question.tokens)),
              help="Opens the Masking page with this sentence and seed: the same selection and decisions.")


def labels_for(positions) -> dict[int, str]:
    """Pill labels: the token as the model sees it, with its position (pills need distinct labels)."""
    return {i: f"{ui.markdown_text(question.shown[i])} ({i})" for i in positions}  # pills render markdown


def neutral(decisions):
    """What a student may see before the reveal: [MASK] and special tokens, nothing else."""
    return [d if d in ("MASK", "SPECIAL") else "NOT_SELECTED" for d in decisions]


def record(question_id: str, quiz_kind: str, points: int, max_points: int, answer) -> None:
    state["quiz_board"] = quiz.record_score(state.get("quiz_board"), question_id, quiz_kind, points, max_points)
    state["quiz_answers"] = {**state.get("quiz_answers", {}), question_id: answer}


# The Reveal buttons score in a callback, before the script runs, so the run after a reveal shows the
# answers (and no longer the form) and the score at the top is already up to date.
def reveal_guess(question_id: str, answers: tuple[str, ...], lowercase: bool) -> None:
    guesses = [state.get(f"quiz_guess_{question_id}_{i}", "") or "" for i in range(len(answers))]
    score = quiz.score_guesses(answers, guesses, lowercase=lowercase)
    record(question_id, "guess", score.points, score.max_points, guesses)


def reveal_random(question_id: str, random_truth: tuple[int, ...], unchanged_truth: tuple[int, ...]) -> None:
    picked = {"random": list(state.get(f"quiz_random_{question_id}") or []),
              "unchanged": list(state.get(f"quiz_unchanged_{question_id}") or [])}
    a = quiz.score_selection(picked["random"], random_truth)
    b = quiz.score_selection(picked["unchanged"], unchanged_truth)
    record(question_id, "random", a.points + b.points, a.max_points + b.max_points, picked)


def reveal_loss(question_id: str, truth: tuple[int, ...]) -> None:
    picked = list(state.get(f"quiz_loss_{question_id}") or [])
    score = quiz.score_selection(picked, truth)
    record(question_id, "loss", score.points, score.max_points, picked)


# --------------------------------------------------------------------------- guess the token
def guess_quiz() -> None:
    blanks = question.blanks
    lowercase = bool(getattr(tokenizer, "do_lower_case", True))
    if not blanks:
        st.info("These masks have no [MASK] to guess: press **Next question ▶**.")
        return
    st.subheader(f"Fill in the {len(blanks)} blank{'s' if len(blanks) > 1 else ''}")
    ui.token_chips(list(question.shown), neutral(question.decisions))
    if not revealed:
        with st.form(key=f"quiz_form_{qid}"):
            columns = st.columns(min(len(blanks), 3))
            for i, position in enumerate(blanks):
                columns[i % len(columns)].text_input(f"Blank {i + 1} (token {position})", key=f"quiz_guess_{qid}_{i}",
                                                     max_chars=40, placeholder="your guess")
            st.form_submit_button("✨ Reveal the answers", key=f"quiz_reveal_{qid}", type="primary",
                                  on_click=reveal_guess, args=(qid, question.answers, lowercase))
        st.caption("Type one word per blank, then reveal. Case does not matter.")
        return
    guesses = state["quiz_answers"][qid]
    st.subheader("The answers")
    ui.token_chips(list(question.tokens), neutral(question.decisions),
                   originals=[None] * len(question.tokens), highlight=None)
    model, _ = ui.model_or_stop(settings)
    try:
        reports = quiz.rank_guesses(model, tokenizer, question, guesses, lowercase=lowercase)
        predictions = predict_masked(model, tokenizer, question.input_ids, question.attention_mask,
                                     question.labels, k=TOP_K, decisions=question.decision_codes)
        about = model_description(model, tokenizer)
    except MLMLabError as exc:
        ui.show_error(exc)
        return
    right = sum(r.correct for r in reports)
    st.markdown(f"**You got {right} of {len(reports)}.**")
    # HTML, it wraps: a dataframe cut "answer: p…" at 1400 px
    ui.table(pd.DataFrame(quiz.guess_rows(reports, predictions, TOP_K)), static=True)
    st.caption(TEXT("rank_note"))
    if about.get("trained") is False:
        st.warning(TEXT("untrained"))
    ui.chart(topk_figure(predictions, bar_height=36 if settings.presenter else 22), "quiz_topk_fig",
             name="quiz_model_guesses")
    masking_page_button()


# --------------------------------------------------------------------------- which one was random?
def random_quiz() -> None:
    selected = question.in_loss
    masks = question.blanks
    st.subheader("Which tokens were replaced by a random token? Which were left unchanged?")
    ui.token_chips(list(question.shown), neutral(question.decisions))
    st.markdown(quiz.hidden_in_plain_sight(len(selected), len(masks)))
    st.caption(TEXT("random_fair", source=RANDOM_REPLACEMENT_SOURCE))
    options = list(question.candidates)
    names = labels_for(options)
    if not revealed:
        with st.form(key=f"quiz_form_{qid}"):
            st.pills("Random replacements", options, selection_mode="multi", format_func=names.get,
                     key=f"quiz_random_{qid}")
            st.pills("Selected but left unchanged", options, selection_mode="multi", format_func=names.get,
                     key=f"quiz_unchanged_{qid}")
            st.form_submit_button("✨ Reveal", key=f"quiz_reveal_{qid}", type="primary", on_click=reveal_random,
                                  args=(qid, question.positions("RANDOM"), question.positions("UNCHANGED")))
        return
    answer = state["quiz_answers"][qid]
    a = quiz.score_selection(answer["random"], question.positions("RANDOM"))
    b = quiz.score_selection(answer["unchanged"], question.positions("UNCHANGED"))
    st.subheader("What really happened")
    ui.token_chips(list(question.shown), list(question.decisions),
                   originals=[question.tokens[i] if question.decisions[i] == "RANDOM" else None
                              for i in range(len(question.tokens))])
    ui.decision_legend()
    c1, c2 = st.columns(2)
    for column, title, score in ((c1, "random", a), (c2, "unchanged", b)):
        column.metric(f"{title}: points", f"{score.points} of {score.max_points}")
        column.caption(quiz.selection_caption(score, names))
    st.markdown(TEXT("unchanged_point"))
    masking_page_button()


# --------------------------------------------------------------------------- which positions count in the loss?
def loss_quiz() -> None:
    st.subheader("Which positions does the MLM loss use?")
    # What the model sees, without the decision colours: only [MASK] shows, as it does to the model.
    ui.token_chips(list(question.shown), neutral(question.decisions))
    st.markdown(TEXT("loss_question"))
    st.caption(TEXT("loss_fair", source=RANDOM_REPLACEMENT_SOURCE))
    options = list(range(len(question.tokens)))
    names = labels_for(options)
    if not revealed:
        with st.form(key=f"quiz_form_{qid}"):
            st.pills("Positions in the loss", options, selection_mode="multi", format_func=names.get,
                     key=f"quiz_loss_{qid}")
            st.form_submit_button("✨ Reveal", key=f"quiz_reveal_{qid}", type="primary", on_click=reveal_loss,
                                  args=(qid, question.in_loss))
        return
    picked = state["quiz_answers"][qid]
    score = quiz.score_selection(picked, question.in_loss)
    st.subheader("What masking did")
    ui.token_chips(list(question.shown), list(question.decisions),
                   originals=[question.tokens[i] if question.shown[i] != question.tokens[i] else None
                              for i in range(len(question.tokens))])
    ui.decision_legend()
    st.metric("points", f"{score.points} of {score.max_points}")
    st.markdown(quiz.loss_answer(len(question.in_loss), score, names))
    table = pd.DataFrame({
        "position": options,
        "model sees": list(question.shown),
        "decision": [DECISION_WORDS.get(d, d) for d in question.decisions],  # the legend's words
        "label": question.labels[0].tolist(),
        "in the loss": ["✅" if i in question.in_loss else "" for i in options],
    })
    ui.table(table)
    masking_page_button()


if kind == "guess":  # the room answers the first blank from its own browsers, the teacher reveals
    ui.class_question("quiz", quiz.class_ask(question, ui.model_or_stop(settings)[0], tokenizer))
{"guess": guess_quiz, "random": random_quiz, "loss": loss_quiz}[kind]()

# --------------------------------------------------------------------------- the running score
totals = quiz.score_totals(state["quiz_board"])
with score_slot:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Your score this session", f"{totals['points']} / {totals['max_points']}",
              help=f"{totals['questions']} question(s) answered. Each question counts once: your first answer.")
    for column, name in zip((c2, c3, c4), share_state.QUIZ_KINDS):
        part = totals["by_kind"][name]
        column.metric(quiz.QUIZ_TITLES[name], f"{part['points']} / {part['max_points']}")

if totals["questions"]:
    st.download_button(
        "⬇ My quiz results (JSON)",
        lesson_json("Quiz", settings={"seed": settings.seed, "model": settings.model_name or "default",
                                      "masking": config},
                    tables={"scores": [{"question": q, **item} for q, item in state["quiz_board"]["questions"].items()],
                            **({"class answers": room} if (room := ui.class_answers_rows("quiz")) else {})},
                    link=ui.share_url()),
        file_name="mlm_lab_quiz.json", mime="application/json", key="quiz_export",
    )
ui.share_link()
