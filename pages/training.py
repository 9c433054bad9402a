"""Training: press Start and watch a masked LM learn facts it could not know, or race variants on identical batches."""


from dataclasses import replace

import pandas as pd
import streamlit as st

import ui
from mlm_core.lessons import share_state
from mlm_core import InputError, MLMLabError
from mlm_core.data import clean_text, read_text_upload, split_sentences
from mlm_core.formatting import metric_change
from mlm_core.lessons.export import lesson_zip
from mlm_core.lessons.prose import LessonText
from mlm_core.figures.training import (bucket_figure, eval_figure, filmstrip_figure, grad_norm_figure, loss_figure,
                                       lr_figure, probe_figure)
from mlm_core.jobs import BusyError, get_manager
from mlm_core.teacher_key import teacher_key_set
from mlm_core.precision import auto_amp
from mlm_core.lessons.training_lessons import (BUG_KEY, LESSON_KEY, MASK_RATES, MAX_RATES, PAPERS_ON_RATE,
                                               RATE_CHOICES, SPLITS, TRAINED_BUGS, YOURS, bug_of, bug_signature, filmstrip_frames,
                                               filmstrip_summary, learner_probe, probe_choices, rate_train_note,
                                               rate_verdict, reported_markdown, run_kind, split_text)
from mlm_core.lessons.training_view import (BINDING_SHARE, LESSONS, OTHER, PROBE_SET_ABOUT, SOURCES, VARIANT_LABELS,
                                            Texts, base_config, binding, binding_comparison, class_ask, lesson_twins,
                                            gazetteer_texts, is_default_run, lesson_defaults, lesson_variants,
                                            probe_preview,
                                            probe_race_rows, probe_rows, probe_set_rows, probe_set_scores, run_twins,
                                            probes_right, strings_or_facts, usable_probes, with_learner_probe,
                                            workshop_texts)
from mlm_core.sampled_softmax import SAMPLED_SOFTMAX
from mlm_core.models import model_description
from mlm_core.training import ADAM_BETAS, ADAM_EPS, AMP_MODES, SCHEDULES, uncorrected_adam_step_ratio

RUN_KEY = ui.KEYS.training_run  # the jobs.Run of this session (the sidebar shows it on every page)
SEEN_KEY = "training_seen_status"  # the status the page last drew, to redraw once when a run ends
RUN_META_KEY = "training_run_meta"  # the lesson and model kind the run was started with
MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_PASTE_CHARS = 200_000
LR_CHOICES = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2, 1e-1]
TRAINED_VOCAB = "tiny-random+vocab"
REDRAW_S = 2.0  # the live view's redraw period (see live_view below)
P_MIN, P_MAX = 0.05, 0.5  # the masked-share slider's range (it starts at the shared rule's p, held inside it)  # the tiny model with the Tokenizer page's trained vocabulary

REDRAW_S = 2.0  # how often the live view redraws (see live_view below)

settings = ui.page_setup("🏋️ Training: watch a masked LM learn", link=share_state.PAGE_LINKS["training"])
TEXT = LessonText("training")  # mlm_core/lessons/text/training.md
st.markdown(TEXT("intro", redraw=REDRAW_S))
state = st.session_state


# ------------------------------------------------------------------------------------- controls
def model_controls(lesson: str) -> str | None:
    """The model to train: the sidebar's, the tiny random BERT, or the tiny one with your own vocabulary."""
    sidebar = settings.model_name or ui.DEFAULT_MODEL
    vocab = state.get(ui.KEYS.trained_tokenizer)
    tiny = ["tiny-random"] + ([TRAINED_VOCAB] if vocab else [])
    if lesson == "scratch":
        options = tiny
    elif lesson == "bind":  # binding a fact to a name needs a model that already reads: no tiny random one
        options = [name for name in dict.fromkeys([ui.DEFAULT_MODEL, sidebar]) if name not in tiny]
    else:
        options = list(dict.fromkeys([ui.DEFAULT_MODEL, "tiny-random", sidebar] + tiny))
    labels = {ui.DEFAULT_MODEL: "Bundled default model: fine-tune it",
              "tiny-random": "Tiny random BERT: train from scratch"}
    if vocab:
        labels[TRAINED_VOCAB] = f"Tiny random BERT with your {vocab.label} vocabulary (Tokenizer page)"
    index = options.index(sidebar) if sidebar in options else 0
    choice = st.radio("Model", options, index=index, key=f"training_model_{lesson}", horizontal=True,
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


def run_controls(lesson: str, from_scratch: bool, texts: Texts, on_gpu: bool):
    """The variants to train, as TrainConfigs; None (with a message) when a setting is impossible."""
    defaults = lesson_defaults(lesson, from_scratch=from_scratch)
    if lesson == "filmstrip":
        texts = filmstrip_controls(texts)  # the learner's own sentence joins the probes
        if texts is None:
            return None
    suffix = f"{lesson}_{int(from_scratch)}"  # each lesson and model kind keeps its own defaults
    chosen = run_settings(defaults, suffix, from_scratch=from_scratch, on_gpu=on_gpu,
                          clip_default=1.0 if lesson == "lr_too_high" else defaults["max_grad_norm"].value)
    with st.expander("Why these defaults?", expanded=False):
        ui.table(pd.DataFrame([{"setting": name.replace("_", " "), "default": d.value, "why": d.why}
                               for name, d in defaults.items()]), key=f"training_why_{suffix}")
        peak = max(range(1, 1001), key=uncorrected_adam_step_ratio)
        st.caption(TEXT("adam", betas=ADAM_BETAS, eps=ADAM_EPS, peak=peak, ratio=uncorrected_adam_step_ratio(peak)))
    try:
        base = base_config(lesson, from_scratch=from_scratch, texts=texts, seed=int(settings.seed), **chosen)
        return lesson_choices(lesson, base, from_scratch)
    except InputError as exc:
        ui.show_error(exc)
        return None


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


def lesson_choices(lesson: str, base, from_scratch: bool):
    """The lesson's own choices (the rates to race, the bug, the losses, ...) and its variants, built from `base`."""
    if lesson == "lr_too_high":
        clip = base.max_grad_norm or 1.0
        st.info(TEXT("lr_too_high", lr=base.learning_rate, clip=clip))
        return lesson_variants(lesson, base, from_scratch=from_scratch, clip=float(clip))
    if lesson == "masking":
        copies = st.select_slider("Static masks per chunk", [1, 2, 5, 10], 1, key="training_static_copies",
                                  help=TEXT("static_masks_help"))
        st.info(TEXT("masking"))
        return lesson_variants(lesson, base, from_scratch=from_scratch, static_copies=int(copies))
    if lesson == "mask_rate":
        c1, c2 = st.columns(2)
        rates = c1.multiselect(f"Masking rates to race (1 to {MAX_RATES})", list(RATE_CHOICES), list(MASK_RATES),
                               key="training_rates", format_func=lambda p: f"{p:.0%}", help=TEXT("rates_help"))
        split = SPLITS[c2.selectbox("Of the selected: [MASK] / random / unchanged", range(len(SPLITS)),
                                    key="training_split", format_func=lambda i: split_text(*SPLITS[i]),
                                    help="BERT's 80/10/10 by default; every variant uses the same split.")]
        st.info(TEXT("mask_rate"))
        return lesson_variants(lesson, base, from_scratch=from_scratch, rates=rates, split=tuple(split))
    if lesson == "bugs":
        bug = st.selectbox("The bug", list(TRAINED_BUGS), key=BUG_KEY, format_func=lambda b: TRAINED_BUGS[b].title,
                           help="Each is a named option of the loop's masking, labels or evaluation step.")
        st.code(TRAINED_BUGS[bug].code, language="python", wrap_lines=True)
        st.caption("Reported: " + reported_markdown(TRAINED_BUGS[bug].reported) + ".")  # our text, its links
        st.info(TEXT("bugs"))
        return lesson_variants(lesson, base, from_scratch=from_scratch, bug=bug)
    if lesson == "bind":
        if from_scratch or not texts.name.startswith(SOURCES[0]):
            st.warning(TEXT("bind_needs"))
            return None
        st.info(TEXT("bind"))
        return lesson_variants(lesson, base, from_scratch=from_scratch)
    if lesson == "free":
        chosen = st.multiselect("Loss variants to race (1 to 3)", list(VARIANT_LABELS), ["full", "sampled"],
                                key="training_variants", format_func=lambda v: VARIANT_LABELS[v][0],
                                help=" · ".join(f"{label}: {why}" for label, why in VARIANT_LABELS.values()))
        return lesson_variants(lesson, base, from_scratch=from_scratch, losses=chosen)
    return lesson_variants(lesson, base, from_scratch=from_scratch)


def teacher_panel(manager) -> None:
    """Every run on this server, and a stop button for each, behind the teacher key (MLMLAB_TEACHER_KEY)."""
    with st.expander("Teacher: every run on this server", expanded=False):
        key = st.text_input("Teacher key", type="password", key="training_teacher_key",
                            help="The value of MLMLAB_TEACHER_KEY the server was started with.")
        if key:
            try:
                runs = manager.teacher_runs(key, client=ui.guess_client())
                ui.table(pd.DataFrame([[s.run_id, s.label, s.status, f"{s.step} / {s.total_steps}",
                                            round(s.elapsed_s)] for s in runs],
                                          columns=["run", "what", "status", "step", "seconds"]), key="training_teacher_runs")
                if runs:
                    target = st.selectbox("Run to stop", [s.run_id for s in runs], key="training_teacher_target")
                    if st.button("■ Stop this run", key="training_teacher_stop"):
                        manager.teacher_stop(key, target, client=ui.guess_client())
                        st.toast(f"Stopping run {target}…")
                wrong = manager.key_guard.failures()
                if wrong:
                    st.caption("Wrong teacher keys since the server started (also in the server's terminal): "
                               + "; ".join(f"{f.total} from {ui.markdown_text(f.client)}" for f in wrong[:10]) + ".")
            except InputError as exc:
                ui.show_error(exc, "warning")


# ------------------------------------------------------------------------------------- start / stop
lesson = st.radio("Lesson", list(LESSONS), key=LESSON_KEY, format_func=LESSONS.get)
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
texts = corpus_controls(from_scratch, lesson_twins(lesson, from_scratch=from_scratch))
if texts is not None:
    texts = usable_probes(texts, tokenizer)
variants = run_controls(lesson, from_scratch, texts, about["device"].startswith("cuda")) if texts else None

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
        state[RUN_META_KEY] = {"lesson": lesson, "from_scratch": from_scratch,  # how the page reads this run
                               "defaults": is_default_run(variants, lesson, from_scratch=from_scratch, texts=texts),
                               # a sentence of the learner's is the last probe (bad input never reaches Start)
                               "learner_probe": lesson == "filmstrip" and bool(
                                   (state.get("training_film_sentence") or "").strip())}
        st.rerun()  # redraw the buttons: Start off, Stop on
    except BusyError as exc:
        ui.show_error(exc, "warning")
    except MLMLabError as exc:
        ui.show_error(exc)
if stop_col.button("■ Stop run", key="training_stop", disabled=run is None or run.snapshot().finished):
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
this_lesson = run is not None and (state.get(RUN_META_KEY) or {}).get("lesson") == lesson  # its answers, revealed
ui.class_question("training", class_ask(lesson, texts, tokenizer, run.snapshot() if this_lesson else None))


# ------------------------------------------------------------------------------------- live view
def steps_by_variant(snap):
    return {name: v.steps for name, v in snap.variants.items()}


def evals_by_variant(snap):
    return {name: v.evals for name, v in snap.variants.items()}


def draw_probes(snap) -> None:
    """What the model guesses at each probe's [MASK]: bars, and a table from the first guess to now."""
    probe_steps = sorted({p["step"] for v in snap.variants.values() for p in v.probes})
    if not probe_steps:
        return
    st.subheader("Predictions sharpening")
    at = probe_steps[-1]  # while training: the latest; afterwards, any step
    if snap.finished and len(probe_steps) > 1:
        at = st.select_slider("Show the predictions at step", probe_steps, probe_steps[-1],
                              key=f"training_probe_step_{snap.run_id}")
    for name, v in snap.variants.items():
        entries = [p for p in v.probes if p["step"] <= at]
        if not entries:
            continue
        # the facts lessons: phrases it read beside questions in new words
        if probe_set_scores(entries, twins=run_twins(state.get(RUN_META_KEY))):
            draw_probe_sets(name, entries, at)
            continue
        right, known = probes_right(entries[-1])
        if known:
            first_right, _ = probes_right(entries[0])
            st.metric(f"{name}: probes answered right (top-1)", f"{right} of {known}",
                      **metric_change(right, first_right, entries[0]["step"]))
        # static HTML, whose cells wrap: at 1400 px the dataframe cut its right-hand columns off
        ui.table(pd.DataFrame(probe_rows(entries)), key=f"training_probe_table_{name}",
                 percent=("answer's probability now",), static=True)
        # presenter view: room-sized fonts, and panels tall enough that plotly labels all 5 candidates
        probe = probe_figure(entries[-1]["probes"], title=f"{name}: step {at}",
                             label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None)
        ui.chart(probe, f"training_probe_{name}")


def draw_race_probes(snap) -> None:
    """A race of variants (the masking rates, a clean run and its twin): every variant's probe scores in one
    table, and each variant's probes in full below it."""
    probes = {name: v.probes for name, v in snap.variants.items() if v.probes}
    if not probes:
        return
    st.subheader("The probes, variant by variant")
    # a room-sized row of 10+ columns runs off the screen: in presenter view one column per variant
    ui.table(pd.DataFrame(probe_race_rows(probes, twins=run_twins(state.get(RUN_META_KEY)))), key="training_probe_race",
             static=True, turn="variant")
    if not snap.finished:  # every probe of every variant once the run is done: each redraw would hold the CPU
        st.caption("Every probe of each variant appears here when the run is done.")
        return
    for name, entries in probes.items():
        with st.expander(f"{name}: every probe"):
            scores = probe_set_scores(entries, twins=run_twins(state.get(RUN_META_KEY)))
            groups = [sc.group for sc in scores] or [None]
            for group in groups:
                ui.table(pd.DataFrame(probe_set_rows(entries, group) if group else probe_rows(entries)), static=True)


def draw_filmstrip(snap, lesson_run: bool) -> None:
    """One probe's top guesses at every evaluation of the run (steps across), the hidden word's rank below."""
    with_probes = {name: v.probes for name, v in snap.variants.items() if v.probes}
    if not with_probes:
        return
    box = st.container() if lesson_run else st.expander("🎞 The guess over time: one probe, evaluation by evaluation")
    with box:
        if lesson_run:
            st.subheader("🎞 The guess over time")
        name = next(iter(with_probes))
        if len(with_probes) > 1:
            name = st.selectbox("Variant", list(with_probes), key=f"training_film_variant_{snap.run_id}")
        entries = with_probes[name]
        choices = dict(probe_choices(entries[-1]))
        if not choices:
            st.caption("No probe of this run has a known hidden word.")
            return
        groups = [p.get("group", "") for p in entries[-1]["probes"]]
        first = next((i for g in (YOURS, "new") for i in choices if groups[i] == g), next(iter(choices)))
        if (state.get(RUN_META_KEY) or {}).get("learner_probe"):
            first = max(choices)  # the learner's own sentence, the last probe
        index = st.selectbox("Probe", list(choices), index=list(choices).index(first), format_func=choices.get,
                             key=f"training_film_probe_{snap.run_id}")
        frames = filmstrip_frames(entries, index)
        figure = filmstrip_figure(frames, title=f"{name}: the guess at [MASK], evaluation by evaluation",
                                  label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None)
        ui.chart(figure, f"training_film_{snap.run_id}")
        st.markdown(ui.markdown_text(filmstrip_summary(frames)))
        st.caption(TEXT("filmstrip"))


def side_by_side(n: int):
    """n columns on a screen; in presenter view one above the other, so the room-sized tables keep every column."""
    return [st.container() for _ in range(n)] if settings.presenter else st.columns(n)


def draw_probe_sets(name: str, entries, at: int) -> None:
    """The facts lesson's probe sets side by side: top-1, top-5 and the answer's rank, from the first
    evaluation to step `at`, each probe's row, and one sentence on what the difference means."""
    scores = probe_set_scores(entries, twins=run_twins(state.get(RUN_META_KEY)))
    # two sets side by side at most (other countries and the learner's sentence go below: three columns cut the tables)
    places = [place for i in range(0, len(scores), 2) for place in side_by_side(min(2, len(scores) - i))]
    for column, score in zip(places, scores):
        with column:
            st.markdown(f"**{score.label}** ({score.probes}: {PROBE_SET_ABOUT.get(score.group, '')})")
            m1, m2 = st.columns(2)
            m1.metric("Veldoria's word first" if score.group == OTHER else "first guess right",
                      f"{score.top1_now} of {score.probes}",
                      **metric_change(score.top1_now, score.top1_then, score.step_then,
                                      fewer_is_better=score.group == OTHER))
            if score.group == "control":  # an invented country's word here is wrong: fewer is better
                m2.metric("an invented word first", f"{score.invented_now} of {score.probes}",
                          **metric_change(score.invented_now, score.invented_then, score.step_then,
                                          fewer_is_better=True))
            elif score.group == OTHER:  # Veldoria's word about another country: not learned about Veldoria
                m2.metric("Veldoria's word in the top 5", f"{score.top5_now} of {score.probes}",
                          **metric_change(score.top5_now, score.top5_then, score.step_then, fewer_is_better=True))
            else:
                m2.metric("answer in the top 5", f"{score.top5_now} of {score.probes}",
                          **metric_change(score.top5_now, score.top5_then, score.step_then))
            twin_then, twin_now = score.invented_then - score.facts_then, score.invented_now - score.facts_now
            if score.group in (OTHER, "control") and (twin_then or twin_now):  # an invented answer, not Veldoria's
                st.caption(f"A twin country's word first (an invented answer, wrong here too): {twin_now} of "
                           f"{score.probes} at step {score.step_now}, {twin_then} at step {score.step_then}.")
            if score.median_rank_then is not None and score.median_rank_now is not None:
                st.caption(f"The answer's median rank among all {len(tokenizer):,} tokens: {score.median_rank_then:,.0f} "
                           f"at step {score.step_then}, {score.median_rank_now:,.0f} at step {score.step_now} "
                           "(1 = first guess).")
            ui.table(pd.DataFrame(probe_set_rows(entries, score.group)), static=True)
    bound = binding(scores)
    if bound is not None:
        st.metric("Binding: facts named for Veldoria and not for Pellastra (questions in new words)",
                  f"{max(bound.top1_now, 0)} of {bound.probes}", help=TEXT("binding_help", share=BINDING_SHARE),
                  **metric_change(max(bound.top1_now, 0), max(bound.top1_then, 0), score.step_then))
    st.markdown(f"**{name}, step {at}:** " + strings_or_facts(scores))
    with st.expander("Each probe's five first guesses, as bars"):
        group = st.radio("Probe set", [s.group for s in scores], format_func=lambda g: next(
            s.label for s in scores if s.group == g), key=f"training_probe_set_{name}", horizontal=True)
        last = [p for p in entries[-1]["probes"] if p.get("group", "") == group]
        probe = probe_figure(last, title=f"{name}: step {at}",
                             label_px=ui.PRESENTER_CHART_FONT_PX if settings.presenter else None)
        ui.chart(probe, f"training_probe_{name}_{group}")


def draw(snap) -> None:
    """Everything the page shows about a run, from one snapshot."""
    # the time left from the measured step and evaluation times, never past the time cap; a queued run's place
    st.progress(min(1.0, snap.progress), text=snap.progress_text())
    if snap.error:
        st.error(ui.markdown_text(snap.error))
    steps = steps_by_variant(snap)
    evals = evals_by_variant(snap)
    if not any(steps.values()) and not any(evals.values()):
        st.info("The first step is on its way (the model copy and the held-out set are being prepared)…")
        return
    if not any(len(rows) > 1 for rows in evals.values()):  # one point: nothing to compare, no chart to draw yet
        cfg = next(iter((snap.configs or {}).values()), {})
        st.info(f"Step 0 is measured; the curves, the probes' before-and-after and the verdicts come with the next "
                f"evaluation (step {min(cfg.get('eval_every', 1), snap.total_steps)}). Training steps so far: "
                f"{max((len(rows) for rows in steps.values()), default=0)}.")
        return
    vocab_size = len(tokenizer) if from_scratch else None  # ln V, the uniform guess, drawn for scale
    if any(evals.values()):
        ui.chart(eval_figure(evals), "training_eval_chart")
        st.caption(TEXT("held_out"))
        focus = [(name, v.evals[0], v.evals[-1]) for name, v in snap.variants.items()
                 if v.evals and v.evals[0].get("focus_loss") is not None]
        if focus:
            name, first, last = focus[0]
            st.caption(TEXT("focus", tokens=last["focus_tokens"], focus_then=first["focus_loss"],
                            focus_now=last["focus_loss"], variant=name, then=first["loss"], now=last["loss"],
                            rest=TEXT("focus_scratch" if from_scratch else "focus_trained")))
    kind = run_kind(snap.configs)
    meta = state.get(RUN_META_KEY) or {}
    if kind == "mask_rate" and any(evals.values()):
        verdict = rate_verdict(evals, "scratch" if meta.get("from_scratch") else "fine-tune", meta.get("defaults", False),
                               end_step=snap.total_steps, finished=snap.finished)
        if verdict:
            st.markdown(f"**On this run:** {verdict}")
        st.caption(PAPERS_ON_RATE)
    if kind == "bugs" and any(evals.values()):
        bug = bug_of(snap.configs)
        signature = bug_signature(bug, steps, evals)
        if signature:
            st.markdown(f"**{TRAINED_BUGS[bug].title}, on this run:** {signature}")
    if meta.get("lesson") == "filmstrip":  # its own lesson: the filmstrip first, live; the probe tables below it
        draw_filmstrip(snap, lesson_run=True)
        draw_probes(snap)  # (not in an expander: its bars have one of their own, and expanders do not nest)
    elif kind and len(snap.variants) > 1:
        draw_race_probes(snap)
    else:
        draw_probes(snap)
    if meta.get("lesson") == "bind":  # the two runs' binding and control, in one sentence
        last = {name: v.probes for name, v in snap.variants.items() if v.probes}
        said = binding_comparison({name: probe_set_scores(entries, twins=run_twins(meta)) for name, entries in last.items()})
        if said:
            st.markdown("**What the twins did:** " + said)
    if snap.finished and meta.get("lesson") != "filmstrip":  # elsewhere once the run is done
        draw_filmstrip(snap, lesson_run=False)
    if any(steps.values()):
        ui.chart(loss_figure(steps, vocab_size=vocab_size), "training_loss_chart")
        if kind == "mask_rate":
            st.caption(rate_train_note(steps))
    if any((cfg or {}).get("loss") == "sampled" for cfg in (snap.configs or {}).values()):
        st.caption(TEXT("sampled"))
    # side by side on a laptop; one under the other in presenter view, where a third of the page is too narrow
    c1, c2 = (st.container(), st.container()) if settings.presenter else st.columns([2, 1])
    clips = {name: cfg.get("max_grad_norm") for name, cfg in (snap.configs or {}).items()}
    with c1:
        ui.chart(grad_norm_figure(steps, clip=clips), "training_grad_chart")
    with c2:
        ui.chart(lr_figure(steps), "training_lr_chart")
    if any(evals.values()):
        ui.chart(bucket_figure(evals), "training_bucket_chart")
    rows = [v.results_row(clips.get(name)) for name, v in snap.variants.items()]
    st.subheader("Results")
    # 14 columns: HTML, whose headers wrap, so none is cut at the right edge at 1400 px ("top-…" in a dataframe)
    ui.table(pd.DataFrame(rows), key="training_results", percent=("top-1", "top-5"), static=True,
             turn="variant")  # 14 columns cannot fit a room-sized font: one column per variant there
    curves = pd.DataFrame(snap.curves_rows())
    c1, c2 = st.columns(2)
    c1.download_button("⬇ Download all curves (CSV)", curves.to_csv(index=False).encode("utf-8"),
                       file_name=f"mlm_lab_curves_{snap.run_id}.csv", mime="text/csv", key="training_csv")
    export = dict(settings={"model": model_name or "default (bundled)", "seed": settings.seed,
                            "variants": snap.configs or {}},
                  curves=snap.curves_rows(), tables={"results": rows})
    room = ui.class_answers_rows("training")  # the class's answers, once revealed
    if room:
        export["tables"]["class answers"] = room
    figures = {"loss": loss_figure(steps), "held-out": eval_figure(evals) if any(evals.values()) else None}
    c2.download_button("⬇ Lesson export (zip: curves, results, charts, settings)",
                       lambda: lesson_zip("Training", figures={k: f for k, f in figures.items() if f is not None},
                                          **export),
                       file_name=f"mlm_lab_training_{snap.run_id}.zip", mime="application/zip",
                       key="training_lesson_zip", on_click="ignore")


@st.cache_data(max_entries=8, show_spinner=False)
def cached_preview(key: str, _texts: Texts, _model, _tokenizer):
    """The model's guesses at the probes before any training (one forward pass)."""
    return probe_preview(_model, _tokenizer, _texts)


run = state.get(RUN_KEY)
if texts is not None and texts.probe_groups and not from_scratch and (run is None or run.snapshot().finished):
    with st.expander("Before you press Start: what the model guesses at the probes now", expanded=run is None):
        preview = cached_preview(f"{model_name or 'default'}:{id(model)}:{hash(texts.probes)}", texts, model, tokenizer)
        st.caption(TEXT("preview"))
        sets = list(dict.fromkeys(row["probe set"] for row in preview))
        for column, name in zip(side_by_side(len(sets)), sets):
            with column:
                st.markdown(f"**{name}**")
                ui.table(pd.DataFrame([{k: v for k, v in row.items() if k != "probe set"} for row in preview
                                       if row["probe set"] == name]), static=True)
if run is None:
    st.info("Set up a run above and press **▶ Start training**.")
else:
    active = not run.snapshot().finished

    # Every 2 s: each redraw rebuilds and the browser redraws about eight charts on the machine that
    # trains (measured on 2 cores, default run: 35 s alone; with the page in Chromium 80 s ticking every 1 s, 53 s every 2 s).
    @st.fragment(run_every=REDRAW_S if active else None)
    def live_view() -> None:
        snap = run.snapshot()
        draw(snap)
        if state.get(SEEN_KEY) != snap.status and snap.finished:
            state[SEEN_KEY] = snap.status
            if active:
                st.rerun()  # redraw the whole page once: the buttons change and the ticking stops

    live_view()
