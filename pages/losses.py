"""Loss: full, weighted and sampled-softmax cross-entropy side by side on one batch, plus NSP."""

import pandas as pd
import streamlit as st

import ui
from ui import share_state
from mlm_core import MLMLabError, decision_names, seeds
from mlm_core.bundled import workshop_documents
from mlm_core.lessons.export import lesson_zip, masking_settings
from mlm_core.figures.losses import (
    gradient_figure,
    k_sweep_figure,
    loss_bars,
    nsp_accuracy_figure,
    per_token_figure,
    weights_figure,
)
from mlm_core.lessons.loss_lab import (
    CORRECTION_SHORT,
    LOSS_SETTINGS,
    SWEEP_PURPOSE,
    LossSettings,
    batch_losses,
    combined_metrics,
    gradient_rows,
    k_choices,
    log_uniform_mass,
    loss_metrics,
    loss_sentences,
    loss_values,
    nsp_accuracy_metrics,
    nsp_pair_rows,
    per_token_rows,
    per_token_table,
    per_token_view,
    sweep_summary,
    sweep_table,
    target_smoothed_counts,
    uniform_guess_label,
    weight_curve_rows,
)
from mlm_core.lessons.nsp import AFTER_BERT as NSP_AFTER_BERT
from mlm_core.lessons.nsp import combined_loss_on_pairs, is_next_probabilities, train_nsp_head
from mlm_core.lessons.prose import LessonText
from mlm_core.loss_registry import logit_gradients
from mlm_core.losses import SCHEMES, loop_cross_entropy
from mlm_core.sampled_softmax import (
    CORRECTIONS,
    SAMPLED_SOFTMAX,
    SAMPLER_WORDS,
    SAMPLERS,
    SWEEP_COSINE_DRAWS,
    SWEEP_DRAWS,
    SampledSoftmaxConfig,
    sampled_softmax_sweep,
    sweep_ks,
)

BATCH_SENTENCES = 8  # one small batch: every number on the page comes from it
MAX_CHARS = 4_000
NSP_STEPS = 40

TEXT = LessonText("losses")  # mlm_core/lessons/text/losses.md
settings = ui.page_setup("📉 Loss: full, weighted and sampled softmax", link=share_state.PAGE_LINKS["losses"])
st.markdown(TEXT("intro"))

model, tokenizer = ui.model_or_stop(settings)
rule = ui.shared_masking_config()

# --------------------------------------------------------------------------- the batch
batch = ui.loss_batch_controls("loss", settings, model, tokenizer, rule, n=BATCH_SENTENCES, max_chars=MAX_CHARS)
vocab_size, counts = model.get_output_embeddings().weight.shape[0], batch.counts  # counts: the corpus' (V,)
st.caption(f"Masking rule (from the Masking page or the shared link): {rule.describe()}.")
with st.expander(f"The batch: {len(batch.texts)} sentences, {len(batch.targets)} selected tokens (seed {settings.seed})"):
    for row, tokens in enumerate(batch.encoded.tokens):
        ui.token_chips(tokens, decision_names(batch.result, row, special_tokens_mask=batch.encoded.special_tokens_mask,
                                              length=len(tokens)))
    ui.decision_legend()
if len(batch.targets) == 0:
    st.info(TEXT("nothing_selected"))
    st.stop()


# --------------------------------------------------------------------------- the controls
def loss_controls() -> LossSettings:
    defaults = LOSS_SETTINGS
    c1, c2, c3 = st.columns(3)
    with c1:
        st.markdown("**Weighted**")
        scheme = st.selectbox("Weights from corpus counts", SCHEMES, index=SCHEMES.index(defaults.scheme),
                              key="loss_scheme", help="inverse: 1/c · inverse_sqrt: 1/√c · log: log(1 + N/c) · none: 1")
        smoothing = st.number_input("Smoothing (added to every count)", 0.1, 1000.0, defaults.smoothing,
                                    key="loss_smoothing",
                                    help="So tokens never seen in the corpus still get a finite weight.")
    with c2:
        st.markdown("**Sampled softmax**")
        num_sampled = st.select_slider(
            "K sampled classes", k_choices(vocab_size), value=SAMPLED_SOFTMAX.num_sampled, key="loss_k",
            format_func=lambda k: f"V = {k:,} (all)" if k == vocab_size else f"{k:,}")
        sampler = st.selectbox("Drawn from", SAMPLERS, index=SAMPLERS.index(SAMPLED_SOFTMAX.sampler),
                               key="loss_sampler", format_func=lambda s: s.replace("_", " "),
                               help=" · ".join(f"{k.replace('_', ' ')}: {v}" for k, v in SAMPLER_WORDS.items()))
    with c3:
        st.markdown("**Options**")
        correction = st.selectbox(
            "Correction", list(CORRECTIONS), index=list(CORRECTIONS).index(SAMPLED_SOFTMAX.correction),
            key="loss_logq", format_func=CORRECTION_SHORT.get, help=TEXT("correction_help"))
        hits = st.toggle("Remove accidental hits", SAMPLED_SOFTMAX.remove_accidental_hits, key="loss_hits",
                         help="A sampled id equal to the target would count the true class twice.")
        replacement = st.toggle("With replacement", SAMPLED_SOFTMAX.replacement, key="loss_replacement",
                                help="Sample with replacement. Off (the default, as TensorFlow's samplers): K distinct classes.")
    sampled = SampledSoftmaxConfig(num_sampled=int(num_sampled), sampler=sampler, replacement=replacement,
                                   correction=correction, remove_accidental_hits=hits)
    return LossSettings(scheme=scheme, smoothing=float(smoothing), sampled=sampled)


options = loss_controls()
if options.sampled.sampler == "softmax":
    st.caption(TEXT("softmax_sampler"))
if options.sampled.sampler == "log_uniform":
    st.caption(TEXT("log_uniform", **log_uniform_mass(vocab_size, tokenizer, counts)))
outputs = batch_losses(batch, options)  # every loss variant (loss_registry), its class weights and negatives drawn once

# --------------------------------------------------------------------------- the three losses
st.subheader("The three losses")
values = loss_values(outputs)
ui.chart(loss_bars(values, notes={"sampled": f"K = {outputs['sampled'].diagnostics['K']}, {options.sampled.sampler}"},
                   vocab_size=vocab_size), "loss_bars_fig")
ui.metric_row(loss_metrics(outputs, options))
st.caption(TEXT("uniform", uniform=uniform_guess_label(vocab_size)))
for sentence in loss_sentences(outputs, options).values():
    st.markdown(sentence)
loop = loop_cross_entropy(batch.logits, batch.targets)
st.caption(TEXT("loop", loop=float(loop.loss), full=values["full"]))

st.subheader("Per token")
ui.chart(per_token_figure(per_token_rows(outputs, batch.tokens)), "loss_per_token_fig")
ui.table(pd.DataFrame(per_token_view(outputs, batch)))
st.caption(TEXT("per_token"))

# --------------------------------------------------------------------------- gradient
st.subheader("What each variant pushes on: the gradient with respect to the logits")
position = st.selectbox("Position", list(range(len(batch.tokens))), format_func=lambda i: batch.tokens[i],
                        key="loss_position")
grads = logit_gradients(batch.logits, batch.targets, position, outputs)  # each variant's record gives its own
ui.chart(gradient_figure(gradient_rows(grads, batch.targets[position], tokenizer=tokenizer),
                         title=f"position {batch.tokens[position]}"), "loss_grad_fig")
st.caption(TEXT("gradient"))

# --------------------------------------------------------------------------- weights
st.subheader("The weights: rare tokens count more")
target_counts = target_smoothed_counts(counts, batch.targets, options.smoothing)
ui.chart(weights_figure(weight_curve_rows(counts, smoothing=options.smoothing), batch_counts=target_counts),
         "loss_weights_fig")
st.caption(TEXT("weights"))

# --------------------------------------------------------------------------- K sweep
st.subheader("Sampled softmax against K")
st.markdown(TEXT("sweep", draws=SWEEP_DRAWS, cosine_draws=SWEEP_COSINE_DRAWS))
signature = (settings.model_name, settings.seed, tuple(batch.texts), rule, options.sampled)
if st.button("Run the K sweep", key="loss_sweep_button"):
    bar = st.progress(0.0, text="Sweeping K…")
    rows = ui.heavy_click(lambda: sampled_softmax_sweep(
        batch.hidden, batch.weight, batch.bias, batch.targets, ks=sweep_ks(vocab_size), config=options.sampled,
        counts=counts, generator=batch.generator(SWEEP_PURPOSE),
        on_progress=lambda done, what: bar.progress(done, text=f"Sweeping K… {what} done")))
    bar.empty()
    st.session_state["loss_sweep"] = {"signature": signature, "rows": rows}
sweep = st.session_state.get("loss_sweep")
if sweep and sweep["signature"] == signature:
    ui.chart(k_sweep_figure(sweep["rows"], vocab_size=vocab_size), "loss_sweep_fig")
    for sentence in sweep_summary(sweep["rows"], vocab_size):
        st.markdown(f"- {sentence}")
    ui.table(pd.DataFrame(sweep_table(sweep["rows"])))
    st.caption(TEXT("sweep_why"))
else:
    st.caption(TEXT("sweep_wait"))

# --------------------------------------------------------------------------- NSP
st.subheader("Next-sentence prediction: BERT's second task")
st.markdown(TEXT("nsp"))
st.caption(NSP_AFTER_BERT)
nsp_signature = (settings.model_name, settings.seed)
if st.button(f"Train the NSP head ({NSP_STEPS} steps)", key="loss_nsp_button"):
    progress = st.progress(0.0, text="Starting…")
    try:
        result = ui.heavy_click(lambda: train_nsp_head(
            model, tokenizer, workshop_documents(), steps=NSP_STEPS, generator=seeds.generator(settings.seed, "nsp_head"),
            on_progress=lambda f, text: progress.progress(min(1.0, f), text=text)))
        st.session_state["loss_nsp"] = {"signature": nsp_signature, "result": result}
    except MLMLabError as exc:
        ui.show_error(exc)
    progress.empty()
nsp = st.session_state.get("loss_nsp")
if nsp and nsp["signature"] == nsp_signature:
    result = nsp["result"]
    ui.chart(nsp_accuracy_figure(result.records(), heldout_before=result.heldout_before,
                                 heldout_after=result.heldout_after), "loss_nsp_fig")
    ui.metric_row(nsp_accuracy_metrics(result.heldout_before, result.heldout_after))
    pairs = result.heldout_pairs[:6]
    ui.table(pd.DataFrame(nsp_pair_rows(pairs, is_next_probabilities(result.model, tokenizer, pairs))),
             column_config={"P(IsNext)": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")})
    st.markdown("**MLM + NSP on these pairs** (masked with the masking rule above, the same seed)")
    c1, c2 = st.columns(2)
    mlm_weight = c1.number_input("MLM weight", 0.0, 10.0, 1.0, 0.1, key="loss_mlm_weight")
    nsp_weight = c2.number_input("NSP weight", 0.0, 10.0, 1.0, 0.1, key="loss_nsp_weight")
    combined = combined_loss_on_pairs(result.model, tokenizer, pairs, rule,
                                      generator=seeds.generator(settings.seed),  # the masks of this seed
                                      mlm_weight=mlm_weight, nsp_weight=nsp_weight)
    ui.metric_row(combined_metrics(combined))
else:
    st.caption(TEXT("nsp_wait"))

# --------------------------------------------------------------------------- export and share
share = ui.share_link()
loss_figures = {"losses": loss_bars(values), "per token": per_token_figure(per_token_rows(outputs, batch.tokens))}
lesson = dict(
    settings=masking_settings(seed=settings.seed, model=settings.model_name, config=rule, scheme=options.scheme,
                              smoothing=options.smoothing, sampled_softmax=options.sampled),
    losses=[{"variant": name, "loss": value} for name, value in values.items()],
    tables={"per token": per_token_table(outputs, batch)},
    link=share,
)
st.download_button("⬇ Lesson export (zip: losses, per-token table, charts, settings)",
                   lambda: lesson_zip("Loss", figures=loss_figures, **lesson),
                   file_name=f"mlm_lab_loss_seed{settings.seed}.zip", mime="application/zip",
                   key="loss_lesson_zip", on_click="ignore")
