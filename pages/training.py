"""Training: press Start and watch a masked LM learn facts it could not know, or race variants on identical batches.

The lesson chosen at the top is a record (``mlm_core.lessons.training_registry``): its defaults, its own choices,
the variants it races and what the page says about its run all come from there; ``ui.training_run`` draws the run."""


from dataclasses import replace

import pandas as pd
import streamlit as st

import ui
from mlm_core import InputError, MLMLabError
from mlm_core.data import clean_text, read_text_upload, split_sentences
from mlm_core.jobs import BusyError, get_manager
from ui import share_state
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons.training_lessons import LESSON_KEY, learner_probe
from mlm_core.lessons.training_registry import TRAINING_LESSONS, TrainingLesson, base_config, is_default_run
from mlm_core.lessons.training_view import (SOURCES, Texts, gazetteer_texts, usable_probes, with_learner_probe,
                                            workshop_texts)
from mlm_core.models import model_description
from mlm_core.precision import auto_amp
from mlm_core.sampled_softmax import SAMPLED_SOFTMAX
from mlm_core.teacher_key import teacher_key_set
from mlm_core.training import ADAM_BETAS, ADAM_EPS, AMP_MODES, SCHEDULES, uncorrected_adam_step_ratio
from ui.training_run import RunShown, blocks, draw_run, probe_preview_panel, teacher_panel

RUN_KEY = ui.KEYS.training_run  # the jobs.Run of this session (the sidebar shows it on every page)
SEEN_KEY = "training_seen_status"  # the status the page last drew, to redraw once when a run ends
RUN_META_KEY = "training_run_meta"  # the lesson and model kind the run was started with
MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_PASTE_CHARS = 200_000
LR_CHOICES = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2, 1e-1]
TRAINED_VOCAB = "tiny-random+vocab"  # the tiny model with the Tokenizer page's trained vocabulary
P_MIN, P_MAX = 0.05, 0.5  # the masked-share slider's range (it starts at the shared rule's p, held inside it)
# Every 2 s: each redraw rebuilds and the browser redraws about eight charts on the machine that trains (measured
# on 2 cores, default run: 35 s alone; with the page in Chromium 80 s ticking every 1 s, 53 s every 2 s).
REDRAW_S = 2.0

settings = ui.page_setup("🏋️ Training: watch a masked LM learn", link=share_state.PAGE_LINKS["training"])
TEXT = LessonText("training")  # mlm_core/lessons/text/training.md
st.markdown(TEXT("intro", redraw=REDRAW_S))
state = st.session_state


# ------------------------------------------------------------------------------------- controls
def model_controls(lesson: TrainingLesson) -> str | None:
    """The model to train: the sidebar's, the tiny random BERT, or the tiny one with your own vocabulary (as many of
    them as the lesson can use)."""
    sidebar = settings.model_name or ui.DEFAULT_MODEL
    vocab = state.get(ui.KEYS.trained_tokenizer)
    tiny = ["tiny-random"] + ([TRAINED_VOCAB] if vocab else [])
    if lesson.models == "scratch":
        options = tiny
    elif lesson.models == "reads":  # a model that already reads: no tiny random one
        options = [name for name in dict.fromkeys([ui.DEFAULT_MODEL, sidebar]) if name not in tiny]
    else:
        options = list(dict.fromkeys([ui.DEFAULT_MODEL, "tiny-random", sidebar] + tiny))
    labels = {ui.DEFAULT_MODEL: "Bundled default model: fine-tune it",
              "tiny-random": "Tiny random BERT: train from scratch"}
    if vocab:
        labels[TRAINED_VOCAB] = f"Tiny random BERT with your {vocab.label} vocabulary (Tokenizer page)"
    index = options.index(sidebar) if sidebar in options else 0
    choice = st.radio("Model", options, index=index, key=f"training_model_{lesson.key}", horizontal=True,
                      format_func=lambda v: ui.markdown_text(labels.get(v, f"{v} (sidebar): fine-tune it")),
                      help=TEXT("model_help"))
    return None if choice == ui.DEFAULT_MODEL else choice


def corpus_controls(from_scratch: bool, twins: int = 0) -> Texts | None:
    """The texts to train on, with their held-out part and probes; None with a message shown. ``twins``: the
    gazetteer's twin countries the lesson trains on too (``training_view.lesson_twins``)."""
    source = st.radio("Text to train on", SOURCES, key="training_source", horizontal=True,
                      help="Long texts are split into sequence-length chunks with an overlap, never cut off.")
    try:
        if source == SOURCES[0]:
            texts = gazetteer_texts(from_scratch, twins=twins)
        elif source == SOURCES[1]:
            texts = workshop_texts()
        else:
            if source == SOURCES[2]:
                upload = st.file_uploader("A .txt, .csv or .jsonl file (one text per line)",
                                          type=["txt", "csv", "jsonl"], key="training_upload")
                if upload is None:
                    st.info("Choose a file to train on.")
                    return None
                text = read_text_upload(upload.name, upload.getvalue(), max_bytes=MAX_UPLOAD_BYTES)
            else:
                text = clean_text(st.text_area("Your text", key="training_paste", height=140,
                                               placeholder="Paste a few paragraphs…"),
                                  max_chars=MAX_PASTE_CHARS, what="The pasted text")
            lines = [line for line in text.splitlines() if line.strip()] or split_sentences(text)
            texts = Texts("Your text", lines, None, (), f"{len(lines):,} lines, {sum(map(len, lines)):,} characters; "
                          "a tenth of it is held out, and the probes are words masked in a few of its sentences.")
        st.caption(texts.about)
        return texts
    except InputError as exc:
        ui.show_error(exc, "warning")
        return None


def filmstrip_controls(texts: Texts) -> Texts | None:
    """A sentence of the learner's with one [MASK] and its hidden word, added to the probes (None: bad input)."""
    c1, c2 = st.columns([3, 1])
    sentence = c1.text_input("Your own sentence with one [MASK] (optional)", key="training_film_sentence",
                             placeholder="The capital of Veldoria is [MASK].", max_chars=300)
    answer = c2.text_input("Its hidden word", key="training_film_answer", placeholder="calder", max_chars=40)
    if not sentence.strip() and not answer.strip():
        return texts
    try:
        return with_learner_probe(texts, *learner_probe(sentence, answer, tokenizer))
    except InputError as exc:
        ui.show_error(exc, "warning")
        return None


def lesson_choices(lesson: TrainingLesson) -> dict:
    """The lesson's own widgets (the rates to race, the bug, the losses, ...), side by side; their values by name."""
    places = st.columns(len(lesson.choices)) if len(lesson.choices) > 1 else [st] * len(lesson.choices)
    values = {}
    for place, c in zip(places, lesson.choices):
        widget = getattr(place, c.kind)  # st.multiselect, st.selectbox or st.select_slider
        options, help = list(c.options), c.help() if callable(c.help) else c.help  # what is registered now
        if c.kind == "selectbox":
            value = widget(c.label, options, key=c.key, format_func=c.format, help=help)
        else:
            value = widget(c.label, options, c.default, key=c.key, format_func=c.format, help=help)
        values[c.arg] = c.value(value)
    return values


def run_settings(defaults, suffix: str, *, from_scratch: bool, on_gpu: bool, clip_default: float) -> dict:
    """The run's settings a learner can change (steps, batch, learning rate, and under "More settings" the rest),
    as `TrainConfig` fields; each starts at the lesson's default, whose reason is its help."""
    rule = ui.shared_masking_config()  # the learner's rule (Masking page or link): strategy, 80/10/10, p
    c1, c2, c3, c4 = st.columns(4)
    steps = c1.slider("Steps", 5, 1000, defaults["steps"].value, 5, key=f"training_steps_{suffix}",
                      help=defaults["steps"].why)
    batch = c2.select_slider("Batch (sequences)", [2, 4, 8, 16, 32, 64], defaults["batch_size"].value,
                             key="training_batch", help=defaults["batch_size"].why)
    seq_len = c3.select_slider("Sequence length", [32, 64, 128, 256], defaults["seq_len"].value,
                               key="training_seq_len", help=defaults["seq_len"].why)
    lr = c4.select_slider("Learning rate", LR_CHOICES, defaults["learning_rate"].value, key=f"training_lr_{suffix}",
                          format_func=lambda v: f"{v:g}", help=defaults["learning_rate"].why)
    with st.expander("More settings", expanded=False):
        a1, a2, a3 = st.columns(3)
        warmup = a1.number_input("Warm-up steps", 0, 500, defaults["warmup_steps"].value,
                                 key=f"training_warmup_{suffix}", help=defaults["warmup_steps"].why)
        schedule = a1.selectbox("Then", SCHEDULES, key="training_schedule",
                                help="How the learning rate decays after warm-up.")
        clip = a2.number_input("Clip gradient norm at (0 = off)", 0.0, 100.0, clip_default, 0.5,
                               key=f"training_clip_{suffix}", help=defaults["max_grad_norm"].why)
        amp = a2.selectbox("Mixed precision", [m for m in AMP_MODES if on_gpu or m != "fp16"],  # fp16 needs CUDA
                           key="training_amp", help=TEXT("amp_help", reason=auto_amp("cuda" if on_gpu else "cpu").reason))
        checkpointing = a3.toggle("Gradient checkpointing", False, key="training_ckpt", help=TEXT("checkpointing_help"))
        freeze = a3.toggle("Freeze word embeddings", False, key="training_freeze", disabled=from_scratch,
                           help=TEXT("freeze_help"))
        mlm_p = a3.slider("Masked share", P_MIN, P_MAX, min(max(round(rule.mlm_probability, 2), P_MIN), P_MAX), 0.01,
                          key="training_mlm_p",
                          help=TEXT("masked_share_help", strategy=rule.strategy.replace("_", " "),
                                    mask=rule.mask_replace_prob, random=rule.random_replace_prob,
                                    unchanged=rule.unchanged_prob))
        eval_every = a1.number_input("Evaluate every … steps", 1, 500, defaults["eval_every"].value,
                                     key=f"training_eval_every_{suffix}", help=defaults["eval_every"].why)
        num_sampled = a2.select_slider("Sampled softmax: K", [16, 64, 256, 1024, 4096], SAMPLED_SOFTMAX.num_sampled,
                                       key="training_k",
                                       help="Classes in each sampled softmax (besides the true one).")
        focus_p = 0.0
        if "focus_mlm_probability" in defaults:  # the facts lesson: how often the facts' own words are masked
            focus_p = a3.select_slider("Facts' words masked", [0.0, 0.3, 0.5, 0.7, 1.0],
                                       defaults["focus_mlm_probability"].value, key=f"training_focus_{suffix}",
                                       format_func=lambda v: "as every token (the rule)" if v == 0 else f"{v:.0%}",
                                       help=defaults["focus_mlm_probability"].why)
    return dict(steps=int(steps), batch_size=int(batch), seq_len=int(seq_len), learning_rate=float(lr),
                warmup_steps=int(warmup), schedule=schedule, amp=amp, gradient_checkpointing=bool(checkpointing),
                max_grad_norm=float(clip) or None, masking=replace(rule, mlm_probability=float(mlm_p)),
                eval_every=int(eval_every), num_sampled=int(num_sampled),
                freeze_word_embeddings=bool(freeze) and not from_scratch, focus_mlm_probability=float(focus_p))


def run_controls(lesson: TrainingLesson, from_scratch: bool, texts: Texts, on_gpu: bool):
    """The variants to train, as TrainConfigs; None (with a message) when a setting is impossible."""
    defaults = lesson.all_defaults(from_scratch)
    if lesson.learner_probe:
        texts = filmstrip_controls(texts)  # the learner's own sentence joins the probes
        if texts is None:
            return None
    suffix = f"{lesson.key}_{int(from_scratch)}"  # each lesson and model kind keeps its own defaults
    chosen = run_settings(defaults, suffix, from_scratch=from_scratch, on_gpu=on_gpu,
                          clip_default=defaults["max_grad_norm"].value)
    with st.expander("Why these defaults?", expanded=False):
        ui.table(pd.DataFrame([{"setting": name.replace("_", " "), "default": d.value, "why": d.why}
                               for name, d in defaults.items()]), key=f"training_why_{suffix}")
        peak = max(range(1, 1001), key=uncorrected_adam_step_ratio)
        st.caption(TEXT("adam", betas=ADAM_BETAS, eps=ADAM_EPS, peak=peak, ratio=uncorrected_adam_step_ratio(peak)))
    try:
        base = base_config(lesson.key, from_scratch=from_scratch, texts=texts, seed=int(settings.seed), **chosen)
        choices = lesson_choices(lesson)
        problem = lesson.problem(texts, from_scratch)
        if problem:
            st.warning(problem)
            return None
        blocks(lesson.intro(base, choices))
        return lesson.variants(base, from_scratch=from_scratch, **choices)
    except InputError as exc:
        ui.show_error(exc)
        return None


# ------------------------------------------------------------------------------------- the lesson, the model, the text
lesson = TRAINING_LESSONS[st.radio("Lesson", list(TRAINING_LESSONS), key=LESSON_KEY,
                                   format_func=lambda key: TRAINING_LESSONS[key].title)]
model_name = model_controls(lesson)
try:
    if model_name == TRAINED_VOCAB:
        vocab = state[ui.KEYS.trained_tokenizer]
        model, tokenizer = ui.cached_tiny_for_vocab(vocab, f"{vocab.algorithm}-{vocab.vocab_size}-{vocab.corpus_hash}")
    else:
        model, tokenizer = ui.cached_model(model_name)
    about = model_description(model, tokenizer)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()
from_scratch = about.get("trained") is False
st.caption(f"{ui.markdown_text(about['label'])}: {about['params']:,} parameters, {about['layers']} layers, on {about['device']}. "
           + ("Untrained: its first loss is near ln V, a uniform guess." if from_scratch else ""))
texts = corpus_controls(from_scratch, lesson.lesson_twins(from_scratch))
if texts is not None:
    texts = usable_probes(texts, tokenizer)
variants = run_controls(lesson, from_scratch, texts, about["device"].startswith("cuda")) if texts else None

# ------------------------------------------------------------------------------------- start / stop
manager = get_manager()
run = state.get(RUN_KEY)
busy_here = run is not None and not run.snapshot().finished
start_col, stop_col, info_col = st.columns([1.3, 1, 2.7])  # "▶ Start training" on one line at 1280 px, presenter view
if start_col.button("▶ Start training", key="training_start", type="primary",
                    disabled=busy_here or variants is None or texts is None):
    try:
        run = manager.submit(model, tokenizer, texts.train, variants, eval_texts=texts.held_out,
                             label=f"{about['label']} · {texts.name} · {', '.join(variants)}",
                             client=ui.client_id(), alive=ui.session_alive_check(),
                             keep_trained=True)  # for the Predictions and Inside pages
        state[RUN_KEY] = run
        state[SEEN_KEY] = None
        state[RUN_META_KEY] = {"lesson": lesson.key, "from_scratch": from_scratch,  # how the page reads this run
                               "defaults": is_default_run(variants, lesson.key, from_scratch=from_scratch, texts=texts),
                               # a sentence of the learner's is the last probe (bad input never reaches Start)
                               "learner_probe": lesson.learner_probe and bool(
                                   (state.get("training_film_sentence") or "").strip())}
        st.rerun()  # redraw the buttons: Start off, Stop on
    except BusyError as exc:
        ui.show_error(exc, "warning")
    except MLMLabError as exc:
        ui.show_error(exc)
if stop_col.button("■ Stop run", key="training_stop", disabled=not busy_here):
    run.stop("Stopped by you.")
    st.toast("Stopping…")
counts = manager.counts()
info_col.caption(f"Machine: {counts['running']} of {counts['max_runs']} training slot(s) in use, "
                 f"{counts['queued']} waiting. One run per person; a run stops after {manager.max_run_s:.0f} s, "
                 f"and when its session has been gone for {manager.abandon_s:.0f} s. A step holds at most "
                 f"{manager.max_step_tokens:,} tokens (batch × sequence length; 4× with gradient checkpointing), "
                 f"and a run at most {manager.max_run_bytes / 2**30:.1f} GiB of memory (estimated before it starts).")

if teacher_key_set():
    teacher_panel(manager)
snap = run.snapshot() if run is not None else None  # the run as this rerun draws it (Stop may have just been pressed)
this_lesson = snap is not None and (state.get(RUN_META_KEY) or {}).get("lesson") == lesson.key  # its answers, revealed
ui.class_question("training", lesson.ask(texts, tokenizer, snap if this_lesson else None))

# ------------------------------------------------------------------------------------- live view
if texts is not None and texts.probe_groups and not from_scratch and (snap is None or snap.finished):
    probe_preview_panel(model_name, model, tokenizer, texts, expanded=run is None, presenter=settings.presenter)
if run is None:
    st.info("Set up a run above and press **▶ Start training**.")
else:
    active = not snap.finished
    shown = RunShown(state.get(RUN_META_KEY) or {}, len(tokenizer), settings.presenter,
                     model_name or "default (bundled)", settings.seed)

    @st.fragment(run_every=REDRAW_S if active else None)
    def live_view() -> None:
        snap = run.snapshot()
        draw_run(snap, shown, from_scratch=from_scratch)
        if state.get(SEEN_KEY) != snap.status and snap.finished:
            state[SEEN_KEY] = snap.status
            if active:
                st.rerun()  # redraw the whole page once: the buttons change and the ticking stops

    live_view()
