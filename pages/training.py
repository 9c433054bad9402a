"""Training: press Start and watch a masked LM learn, with loss variants racing on identical batches."""

import math

import pandas as pd
import streamlit as st

import ui
from mlm_core.export import lesson_zip
from mlm_core import InputError, MaskingConfig, MLMLabError
from mlm_core.bundled import workshop_sentences
from mlm_core.data import clean_text, read_text_upload, split_sentences
from mlm_core.figures.training import (bucket_figure, eval_figure, grad_norm_figure, loss_figure, lr_figure,
                                       probe_figure)
from mlm_core.jobs import BusyError, get_manager
from mlm_core.precision import auto_amp
from mlm_core.models import model_description
from mlm_core.training import TrainConfig

RUN_KEY = ui.KEYS.training_run  # the jobs.Run of this session
SEEN_KEY = "training_seen_status"  # the status the page last drew, to redraw once when a run ends
MAX_UPLOAD_BYTES = 5 * 1024 * 1024
MAX_PASTE_CHARS = 200_000
PROBES = (
    "The cat sat on the [MASK].",
    "I drink a cup of [MASK] every morning.",
    "The sun rises in the [MASK] and sets in the west.",
)
VARIANTS = {
    "full": ("Full cross-entropy", "The softmax over the whole vocabulary: BERT's loss, the reference."),
    "weighted": ("Weighted by frequency", "Rare tokens count more (1/√count): watch the 'rare' bars."),
    "sampled": ("Sampled softmax", "Only the true word and K sampled words in the softmax: cheaper, "
                "slightly biased."),
}
LESSONS = {
    "free": "Free run: your settings, up to three loss variants side by side",
    "lr_too_high": "Lesson: learning rate too high (clipping off vs on)",
}
LR_CHOICES = [1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 3e-2, 1e-1]

settings = ui.page_setup("🏋️ Training: watch a masked LM learn")
st.markdown(
    "Press **Start** and the model trains in the background while the curves below update every "
    "second. Each step masks fresh tokens, runs the encoder once, scores only the masked positions, "
    "and takes one AdamW step. Variants start from the **same weights** and see **identical batches "
    "and masks**, so any difference between their curves comes from the loss alone. Evaluation on "
    "held-out text always uses the full cross-entropy, so the variants are compared fairly."
)
state = st.session_state


# ------------------------------------------------------------------------------------- controls
TRAINED_VOCAB = "tiny-random+vocab"  # the tiny model with the Tokenizer page's trained vocabulary


def model_controls() -> str | None:
    """The model to train: the sidebar's, the tiny random BERT, or the tiny one with your own vocabulary."""
    sidebar = settings.model_name or ui.DEFAULT_MODEL
    vocab = state.get(ui.KEYS.trained_tokenizer)
    options = list(dict.fromkeys([ui.DEFAULT_MODEL, "tiny-random", sidebar] + ([TRAINED_VOCAB] if vocab else [])))
    labels = {ui.DEFAULT_MODEL: "Bundled default model: fine-tune it",
              "tiny-random": "Tiny random BERT: train from scratch"}
    if vocab:
        labels[TRAINED_VOCAB] = f"Tiny random BERT with your {vocab.label} vocabulary (Tokenizer page)"
    choice = st.radio("Model", options, index=options.index(sidebar), key="training_model", horizontal=True,
                      format_func=lambda v: labels.get(v, f"{v} (sidebar): fine-tune it"),
                      help="A trained model starts near its held-out loss and improves slowly; the tiny "
                      "random one starts near ln V ≈ 10.3 (a uniform guess over 30,522 tokens) and falls fast.")
    return None if choice == ui.DEFAULT_MODEL else choice


def corpus_controls() -> list[str] | None:
    """The training text as a list of texts, or None with a message shown."""
    source = st.radio("Text to train on", ["Workshop corpus", "Upload a file", "Paste text"], key="training_source",
                      horizontal=True, help="Long texts are split into sequence-length chunks with an overlap, "
                      "never cut off.")
    try:
        if source == "Workshop corpus":
            texts = workshop_sentences()
            st.caption(f"{len(texts):,} everyday sentences written for MLM Lab (bundled, offline).")
            return texts
        if source == "Upload a file":
            upload = st.file_uploader("A .txt, .csv or .jsonl file (one text per line)", type=["txt", "csv", "jsonl"],
                                      key="training_upload")
            if upload is None:
                st.info("Choose a file to train on.")
                return None
            text = read_text_upload(upload.name, upload.getvalue(), max_bytes=MAX_UPLOAD_BYTES)
        else:
            text = clean_text(st.text_area("Your text", key="training_paste", height=140,
                                           placeholder="Paste a few paragraphs…"),
                              max_chars=MAX_PASTE_CHARS, what="The pasted text")
        texts = [line for line in text.splitlines() if line.strip()] or split_sentences(text)
        st.caption(f"{len(texts):,} lines, {sum(len(t) for t in texts):,} characters.")
        return texts
    except InputError as exc:
        st.warning(str(exc))
        return None


def run_controls(lesson: str, from_scratch: bool, on_gpu: bool) -> dict[str, TrainConfig] | None:
    """The variants to train, as TrainConfigs; None (with a message) when a setting is impossible."""
    c1, c2, c3, c4 = st.columns(4)
    steps = c1.slider("Steps", 5, 500, 60, 5, key="training_steps",
                      help="Optimizer steps. On a laptop CPU the bundled model does a few steps a second.")
    batch = c2.select_slider("Batch (sequences)", [2, 4, 8, 16, 32, 64], 8, key="training_batch",
                             help="More sequences per step: smoother curves, slower steps.")
    seq_len = c3.select_slider("Sequence length", [32, 64, 128, 256], 64, key="training_seq_len",
                               help="Tokens per chunk. Sentences are packed together up to this length.")
    default_lr = 1e-3 if from_scratch else 5e-5
    if lesson == "lr_too_high":
        default_lr = 3e-2 if from_scratch else 1e-2
    lr = c4.select_slider("Learning rate", LR_CHOICES, default_lr, key=f"training_lr_{lesson}_{from_scratch}",
                          format_func=lambda v: f"{v:g}",
                          help="Typical: 1e-5 to 5e-5 to fine-tune a trained model; 1e-4 to 1e-3 from scratch.")
    with st.expander("More settings", expanded=False):
        a1, a2, a3 = st.columns(3)
        warmup = a1.number_input("Warm-up steps", 0, 500, 0 if lesson == "lr_too_high" else 5,
                                 key=f"training_warmup_{lesson}", help="Linear warm-up from 0 to the learning rate.")
        schedule = a1.selectbox("Then", ["linear", "cosine", "constant"], key="training_schedule",
                                help="How the learning rate decays after warm-up.")
        clip = a2.number_input("Clip gradient norm at (0 = off)", 0.0, 100.0, 1.0, 0.5, key="training_clip",
                               help="Rescales the whole gradient when its norm is larger: stops one bad batch "
                               "from throwing the weights far away.")
        amp_modes = ["auto", "off", "bf16", "fp16"] if on_gpu else ["auto", "off", "bf16"]
        amp = a2.selectbox("Mixed precision", amp_modes, key="training_amp",
                           help="auto: " + auto_amp("cuda" if on_gpu else "cpu").reason + " off: fp32. bf16: "
                           "bf16 autocast (CUDA, or CPU); fp16 needs CUDA and a gradient scaler.")
        checkpointing = a3.toggle("Gradient checkpointing", False, key="training_ckpt",
                                  help="Recompute activations in the backward pass: less memory, ~30% slower.")
        freeze = a3.toggle("Freeze word embeddings", False, key="training_freeze",
                           disabled=from_scratch,
                           help="Fine-tuning only: keep the word embeddings, and the output layer that BERT ties "
                           "to them, fixed. That matrix (vocabulary × hidden) is half the default model's weights: "
                           "no gradient, no AdamW update, a faster step. A model trained from scratch needs them.")
        mlm_p = a3.slider("Masked share", 0.05, 0.5, 0.15, 0.01, key="training_mlm_p",
                          help="BERT masks 15% of the tokens, with 80/10/10 replacement.")
        eval_every = a1.number_input("Evaluate every … steps", 1, 500, 10, key="training_eval_every",
                                     help="Held-out loss, accuracy and the probe predictions are measured this often.")
        num_sampled = a2.select_slider("Sampled softmax: K", [16, 64, 256, 1024, 4096], 256, key="training_k",
                                       help="Classes in each sampled softmax (besides the true one).")
    common = dict(steps=int(steps), batch_size=int(batch), seq_len=int(seq_len), learning_rate=float(lr),
                  warmup_steps=int(warmup), schedule=schedule, amp=amp, gradient_checkpointing=bool(checkpointing),
                  masking=MaskingConfig(mlm_probability=float(mlm_p)), eval_every=int(eval_every),
                  probe_sentences=PROBES, seed=int(settings.seed), num_sampled=int(num_sampled))
    common["freeze_word_embeddings"] = bool(freeze) and not from_scratch
    try:
        if lesson == "lr_too_high":
            sane = 1e-3 if from_scratch else 5e-5
            st.info(f"Three runs from the same weights on the same batches: the learning rate above ({lr:g}) "
                    f"without clipping, the same with the gradient norm clipped at {clip or 1.0:g}, and a sensible "
                    f"{sane:g} for reference. Watch the gradient-norm spikes and the held-out loss: a trained "
                    "model forgets what it knew within a few steps. Clipping caps each step's gradient, but "
                    "Adam rescales gradients anyway, so it softens the damage without curing it: the cure is "
                    "a smaller learning rate (and warm-up).")
            return {"too high, clipping off": TrainConfig(**common, max_grad_norm=None),
                    f"too high, clipped at {clip or 1.0:g}": TrainConfig(**common, max_grad_norm=float(clip or 1.0)),
                    f"sensible lr {sane:g}": TrainConfig(**{**common, "learning_rate": sane},
                                                         max_grad_norm=float(clip or 1.0))}
        chosen = st.multiselect("Loss variants to race (1 to 3)", list(VARIANTS), ["full", "sampled"],
                                key="training_variants", format_func=lambda v: VARIANTS[v][0],
                                help=" · ".join(f"{label}: {why}" for label, why in VARIANTS.values()))
        if not chosen:
            st.warning("Choose at least one loss variant.")
            return None
        return {VARIANTS[v][0]: TrainConfig(**common, loss=v, max_grad_norm=float(clip) or None) for v in chosen}
    except InputError as exc:
        st.error(str(exc))
        return None


# ------------------------------------------------------------------------------------- start / stop
lesson = st.radio("What to run", list(LESSONS), key="training_lesson", format_func=LESSONS.get)
model_name = model_controls()
texts = corpus_controls()
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
st.caption(f"{about['label']}: {about['params']:,} parameters, {about['layers']} layers, "
           f"on {about['device']}. " + ("" if about.get("trained") is not False else
                                        "Untrained: its first loss is near ln V, a uniform guess."))
variants = run_controls(lesson, about.get("trained") is False, about["device"].startswith("cuda"))

run = state.get(RUN_KEY)
busy_here = run is not None and not run.snapshot().finished
start_col, stop_col, info_col = st.columns([1, 1, 3])
if start_col.button("▶ Start training", key="training_start", type="primary",
                    disabled=busy_here or variants is None or texts is None):
    try:
        run = get_manager().submit(model, tokenizer, texts, variants, keep_trained=True,  # for Predictions/Inside
                                   label=f"{about['label']} · {', '.join(variants)}")
        state[RUN_KEY] = run
        state[SEEN_KEY] = None
        st.rerun()  # redraw the buttons: Start off, Stop on
    except BusyError as exc:
        st.warning(str(exc))
    except MLMLabError as exc:
        ui.show_error(exc)
if stop_col.button("■ Stop run", key="training_stop", disabled=run is None or run.snapshot().finished):
    run.stop("Stopped by you.")
    st.toast("Stopping after the current step…")
counts = get_manager().counts()
info_col.caption(f"Machine: {counts['running']} of {counts['max_runs']} training slot(s) in use, "
                 f"{counts['queued']} waiting. A run nobody watches for a minute is stopped to free memory.")


# ------------------------------------------------------------------------------------- live view
def steps_by_variant(snap):
    return {name: v.steps for name, v in snap.variants.items()}


def evals_by_variant(snap):
    return {name: v.evals for name, v in snap.variants.items()}


def draw(snap) -> None:
    """Everything the page shows about a run, from one snapshot."""
    eta = f", about {snap.eta_s:.0f} s left" if snap.eta_s is not None else ""
    st.progress(min(1.0, snap.progress),
                text=f"{snap.status.capitalize()}: step {snap.step} of {snap.total_steps} "
                     f"({snap.elapsed_s:.0f} s{eta}). {snap.message}")
    if snap.error:
        st.error(snap.error)
    steps = steps_by_variant(snap)
    if not any(steps.values()):
        st.info("The first step is on its way (the model copy and the held-out set are being prepared)…")
        return
    log_v = math.log(len(tokenizer)) if about.get("trained") is False else None
    st.plotly_chart(loss_figure(steps, log_v=log_v), key="training_loss_chart")
    if any((cfg or {}).get("loss") == "sampled" for cfg in (snap.configs or {}).values()):
        st.caption("The sampled-softmax training loss is a softmax over the true word and K sampled words "
                   "only, so it sits lower than the full loss: compare the variants on the held-out chart "
                   "below, which scores every variant with the full cross-entropy.")
    c1, c2 = st.columns([2, 1])
    clips = {name: cfg.get("max_grad_norm") for name, cfg in (snap.configs or {}).items()}
    c1.plotly_chart(grad_norm_figure(steps, clip=clips), key="training_grad_chart")
    c2.plotly_chart(lr_figure(steps), key="training_lr_chart")
    evals = evals_by_variant(snap)
    if any(evals.values()):
        st.plotly_chart(eval_figure(evals), key="training_eval_chart")
        st.plotly_chart(bucket_figure(evals), key="training_bucket_chart")
    probe_steps = sorted({p["step"] for v in snap.variants.values() for p in v.probes})
    if probe_steps:
        st.subheader("Predictions sharpening")
        at = probe_steps[-1]  # while training: the latest; afterwards, any step
        if snap.finished and len(probe_steps) > 1:
            at = st.select_slider("Show the predictions at step", probe_steps, probe_steps[-1],
                                  key=f"training_probe_step_{snap.run_id}")
        cols = st.columns(len(snap.variants))
        for col, (name, v) in zip(cols, snap.variants.items()):
            entry = next((p for p in v.probes if p["step"] == at), None)
            if entry:
                col.plotly_chart(probe_figure(entry["probes"], title=f"{name}: step {at}"),
                                 key=f"training_probe_{name}")
    rows = []
    for name, v in snap.variants.items():
        last = next((r for r in reversed(v.steps) if r.get("loss") is not None), {})
        last_eval = v.evals[-1] if v.evals else {}
        rows.append({"variant": name, "steps": len(v.steps), "train loss": last.get("loss"),
                     "held-out loss": last_eval.get("loss"), "perplexity": last_eval.get("perplexity"),
                     "top-1": last_eval.get("top1"), "top-5": last_eval.get("top5"),
                     "tokens/s": (v.summary or {}).get("tokens_per_s") or last.get("tokens_per_s"),
                     "wall time (s)": (v.summary or {}).get("wall_time_s") or last.get("elapsed_s")})
    st.subheader("Results")
    st.dataframe(pd.DataFrame(rows), hide_index=True, key="training_results",
                 column_config={"top-1": st.column_config.NumberColumn(format="percent"),
                                "top-5": st.column_config.NumberColumn(format="percent")})
    curves = pd.DataFrame(snap.curves_rows())
    c1, c2 = st.columns(2)
    c1.download_button("⬇ Download all curves (CSV)", curves.to_csv(index=False).encode("utf-8"),
                       file_name=f"mlm_lab_curves_{snap.run_id}.csv", mime="text/csv", key="training_csv")
    lesson = dict(settings={"model": model_name or "default (bundled)", "seed": settings.seed,
                            "variants": snap.configs or {}},
                  curves=snap.curves_rows(), tables={"results": rows})
    figures = {"loss": loss_figure(steps), "held-out": eval_figure(evals) if any(evals.values()) else None}
    c2.download_button("⬇ Lesson export (zip: curves, results, charts, settings)",
                       lambda: lesson_zip("Training", figures={k: f for k, f in figures.items() if f is not None},
                                          **lesson),
                       file_name=f"mlm_lab_training_{snap.run_id}.zip", mime="application/zip",
                       key="training_lesson_zip", on_click="ignore")


run = state.get(RUN_KEY)
if run is None:
    st.info("Set up a run above and press **▶ Start training**.")
else:
    active = not run.snapshot().finished

    @st.fragment(run_every=1.0 if active else None)
    def live_view() -> None:
        snap = run.snapshot()
        draw(snap)
        if state.get(SEEN_KEY) != snap.status and snap.finished:
            state[SEEN_KEY] = snap.status
            if active:
                st.rerun()  # redraw the whole page once: the buttons change and the ticking stops

    live_view()
