"""Loss: full, weighted and sampled-softmax cross-entropy side by side on one batch, plus NSP."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.lessons import share_state
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
from mlm_core.masking import DECISION_WORDS
from mlm_core.formatting import metric_delta, row_decimals
from mlm_core.lessons.loss_lab import (
    CORRECTION_SHORT,
    LOSS_SETTINGS,
    SAMPLER_WORDS,
    SWEEP_PURPOSE,
    LossSettings,
    batch_losses,
    gradient_rows,
    loss_sentences,
    per_token_rows,
    per_token_table,
    sweep_summary,
    sweep_table,
    target_smoothed_counts,
    uniform_guess_label,
    weight_curve_rows,
)
from mlm_core.lessons.nsp import AFTER_BERT as NSP_AFTER_BERT
from mlm_core.lessons.nsp import combined_loss_on_pairs, is_next_probabilities, train_nsp_head
from mlm_core.losses import SCHEMES, loop_cross_entropy, token_frequency_weights
from mlm_core.sampled_softmax import (
    CORRECTION_LABELS,
    CORRECTIONS,
    SAMPLED_SOFTMAX,
    SAMPLERS,
    SWEEP_COSINE_DRAWS,
    SWEEP_DRAWS,
    SampledSoftmaxConfig,
    logit_gradients,
    proposal_distribution,
    proposal_mass_report,
    sampled_softmax_sweep,
    sweep_ks,
)

BATCH_SENTENCES = 8  # one small batch: every number on the page comes from it
MAX_CHARS = 4_000
K_CHOICES = (8, 16, 32, 64, 128, 256, 512, 1024, 4096)  # and V, added for the loaded model
NSP_STEPS = 40

settings = ui.page_setup("📉 Loss: full, weighted and sampled softmax", link=share_state.PAGE_LINKS["losses"])
st.markdown(
    "The MLM loss is the cross-entropy of the model's prediction at the **selected** positions. Below, "
    "three ways to compute it run on **the same batch and the same seed**: the full softmax over all "
    "V tokens, a version that weights rare tokens up, and sampled softmax, which looks at the true "
    "token and only K sampled ones. The Bug museum runs on this batch too and shows the same numbers."
)

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
    st.info("Nothing was selected in this batch, so every loss is 0 (and F.cross_entropy would give NaN: "
            "see the Bug museum). Change the seed or add text.")
    st.stop()


# --------------------------------------------------------------------------- the controls
def loss_controls() -> LossSettings:
    defaults = LOSS_SETTINGS
    k_choices = [k for k in K_CHOICES if k < vocab_size] + [vocab_size]
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
            "K sampled classes", k_choices, value=SAMPLED_SOFTMAX.num_sampled, key="loss_k",
            format_func=lambda k: f"V = {k:,} (all)" if k == vocab_size else f"{k:,}")
        sampler = st.selectbox("Drawn from", SAMPLERS, index=SAMPLERS.index(SAMPLED_SOFTMAX.sampler),
                               key="loss_sampler", format_func=lambda s: s.replace("_", " "),
                               help=" · ".join(f"{k.replace('_', ' ')}: {v}" for k, v in SAMPLER_WORDS.items()))
    with c3:
        st.markdown("**Options**")
        correction = st.selectbox(
            "Correction", list(CORRECTIONS), index=list(CORRECTIONS).index(SAMPLED_SOFTMAX.correction),
            key="loss_logq", format_func=CORRECTION_SHORT.get,
            help="log Q = log of what a class is expected to count among the K draws: K·q with replacement; "
                 "without, its inclusion probability given the other draws, 1 − exp(−q·τ) (priority sampling). "
                 "Importance sampling subtracts it "
                 "from the sampled logits only: an estimate of the full loss. TensorFlow's sampled_softmax_loss "
                 "subtracts it from every logit, the true one included: the loss of picking the target among "
                 "the candidates. The sentence under the numbers gives each one's value on this batch.")
        hits = st.toggle("Remove accidental hits", SAMPLED_SOFTMAX.remove_accidental_hits, key="loss_hits",
                         help="A sampled id equal to the target would count the true class twice.")
        replacement = st.toggle("With replacement", SAMPLED_SOFTMAX.replacement, key="loss_replacement",
                                help="Sample with replacement. Off (the default, as TensorFlow's samplers): K distinct classes.")
    sampled = SampledSoftmaxConfig(num_sampled=int(num_sampled), sampler=sampler, replacement=replacement,
                                   correction=correction, remove_accidental_hits=hits)
    return LossSettings(scheme=scheme, smoothing=float(smoothing), sampled=sampled)


options = loss_controls()
if options.sampled.sampler == "softmax":
    st.caption("⚠️ The softmax sampler computes the full (M, V) softmax to draw its negatives: it is the "
               "reference proposal, not a saving.")
if options.sampled.sampler == "log_uniform":
    mass = proposal_mass_report(proposal_distribution("log_uniform", vocab_size), tokenizer, counts)
    st.caption(f"⚠️ Log-uniform by id assumes ids sorted by frequency. In this vocabulary "
               f"{mass['unused']:.0%} of its mass falls on [unused] ids, {mass.get('pad', 0):.0%} on [PAD], "
               f"and {mass['never_in_corpus']:.0%} on ids the workshop corpus never contains.")
outputs = batch_losses(batch, options)
weights = token_frequency_weights(counts, scheme=options.scheme, smoothing=options.smoothing)

# --------------------------------------------------------------------------- the three losses
st.subheader("The three losses")
values = {name: float(out.loss) for name, out in outputs.items()}
sampled_diag = outputs["sampled"].diagnostics
ui.chart(loss_bars(values, notes={"sampled": f"K = {sampled_diag['K']}, {options.sampled.sampler}"},
                                         vocab_size=vocab_size), "loss_bars_fig")
c1, c2, c3, c4 = st.columns(4)
row = f".{row_decimals(values.values())}f"  # one precision for the row (and the bars above, the sentences below)
c1.metric("full softmax", format(values["full"], row), help="mean over the selected tokens of −log p(true token)")
c2.metric("weighted", format(values["weighted"], row), metric_delta(values['weighted'] - values['full'], row) + " vs full",
          delta_color="off", help="Σ w[y]·loss / Σ w[y], as F.cross_entropy(weight=w)")
c3.metric("sampled", format(values["sampled"], row), metric_delta(values['sampled'] - values['full'], row) + " vs full",
          delta_color="off", help=CORRECTION_LABELS[options.sampled.correction])
c4.metric("gradient cosine", format(sampled_diag["grad_cosine"], row),
          help="Sampled vs full: the cosine between the two gradients with respect to the hidden states: the direction the encoder "
               f"is pushed. {sampled_diag['num_hits']} accidental hits removed; {sampled_diag['unique_sampled']} "
               f"distinct ids among the K = {sampled_diag['K']} draws.")
st.caption(f"For scale, the dotted line: {uniform_guess_label(vocab_size)}, the loss of a model that has learnt "
           "nothing (V from this model's output layer).")
for sentence in loss_sentences(outputs, options).values():
    st.markdown(sentence)
loop = loop_cross_entropy(batch.logits, batch.targets)
st.caption(f"The per-position Python loop gives {float(loop.loss):.6f}, the vectorised loss {values['full']:.6f}: "
           "the same number (the Efficiency page shows how much slower the loop is).")

st.subheader("Per token")
ui.chart(per_token_figure(per_token_rows(outputs, batch.tokens)), "loss_per_token_fig")
per_token = pd.DataFrame(per_token_table(outputs, batch))
if "decision" in per_token:
    per_token["decision"] = per_token["decision"].map(lambda d: DECISION_WORDS.get(d, d))  # the legend's words
ui.table(per_token)
st.caption("Each variant's per-token values average to its loss: the weighted ones are w[y] / mean(w[y]) × CE.")

# --------------------------------------------------------------------------- gradient
st.subheader("What each variant pushes on: the gradient with respect to the logits")
position = st.selectbox("Position", list(range(len(batch.tokens))), format_func=lambda i: batch.tokens[i],
                        key="loss_position")
grads = logit_gradients(batch.logits, batch.targets, position, class_weights=weights, sampled=outputs["sampled"])
ui.chart(gradient_figure(gradient_rows(grads, batch.targets[position], tokenizer=tokenizer),
                                title=f"position {batch.tokens[position]}"), "loss_grad_fig")
st.caption("Full softmax: softmax − one-hot, on every class. Weighted: the same direction, scaled by the "
           "target's weight. Sampled: only the true class and the K sampled ones get a gradient; every other "
           "class gets exactly 0.")

# --------------------------------------------------------------------------- weights
st.subheader("The weights: rare tokens count more")
target_counts = target_smoothed_counts(counts, batch.targets, options.smoothing)
ui.chart(weights_figure(weight_curve_rows(counts, smoothing=options.smoothing), batch_counts=target_counts),
                "loss_weights_fig")
st.caption("Counts come from the workshop corpus; dotted lines mark this batch's target tokens. Every scheme is "
           "normalised so that a token drawn from the corpus has weight 1 on average.")

# --------------------------------------------------------------------------- K sweep
st.subheader("Sampled softmax against K")
st.markdown("How close is each correction's sampled loss to the full one as K grows, up to K = V (every class), "
            "does its gradient point the same way, and what does it cost? "
            f"{SWEEP_DRAWS} draws of the negatives per K, the same draws for every correction, with the sampler and "
            "replacement set above: the **mean error** comes with its standard error (a mean within two standard "
            "errors of 0 is no error the draws can show), beside **one draw's spread**, how far a single draw, "
            f"one training step, lands from it. The gradient cosine is the mean of the first {SWEEP_COSINE_DRAWS} "
            "draws. Without replacement K = V draws every class, so one draw is exact there.")
signature = (settings.model_name, settings.seed, tuple(batch.texts), rule, options.sampled)
if st.button("Run the K sweep", key="loss_sweep_button"):
    bar = st.progress(0.0, text="Sweeping K…")
    rows = sampled_softmax_sweep(batch.hidden, batch.weight, batch.bias, batch.targets, ks=sweep_ks(vocab_size),
                                 config=options.sampled, counts=counts, generator=batch.generator(SWEEP_PURPOSE),
                                 on_progress=lambda done, what: bar.progress(done, text=f"Sweeping K… {what} done"))
    bar.empty()
    st.session_state["loss_sweep"] = {"signature": signature, "rows": rows}
sweep = st.session_state.get("loss_sweep")
if sweep and sweep["signature"] == signature:
    ui.chart(k_sweep_figure(sweep["rows"], vocab_size=vocab_size), "loss_sweep_fig")
    for sentence in sweep_summary(sweep["rows"], vocab_size):
        st.markdown(f"- {sentence}")
    ui.table(pd.DataFrame(sweep_table(sweep["rows"])))
    st.caption("Why: importance sampling divides each sampled class by how often the draws are expected to hold it "
               "(K·q with replacement; without, its inclusion probability given the other draws, 1 − exp(−q·τ), as in "
               "priority sampling), so the sum estimates "
               "the partition function without bias (the loss, its log, is low on average). TensorFlow also "
               "divides the true class, which turns the loss into 'pick the target among the candidates'. Without "
               "replacement every class is a candidate at K = V, so every correction is exact there; with "
               "replacement, K·q of a frequent class exceeds 1 and the draws never cover the vocabulary.")
else:
    st.caption("Press the button to run the sweep on this batch: it takes several seconds (longer on a busy "
               "machine), and a bar shows how far it is.")

# --------------------------------------------------------------------------- NSP
st.subheader("Next-sentence prediction: BERT's second task")
st.markdown(
    "BERT was pre-trained on MLM **plus** NSP: given `[CLS] A [SEP] B [SEP]`, is B the sentence that "
    "follows A (IsNext), or one from another document (NotNext)? Half the pairs are each. This model "
    "has no trained NSP head, so we add one (pooler + classifier, through Hugging Face's "
    "`BertPreTrainingHeads`) and train it here, with the encoder frozen."
)
st.caption(NSP_AFTER_BERT)
nsp_signature = (settings.model_name, settings.seed)
if st.button(f"Train the NSP head ({NSP_STEPS} steps)", key="loss_nsp_button"):
    progress = st.progress(0.0, text="Starting…")
    try:
        result = train_nsp_head(model, tokenizer, workshop_documents(), steps=NSP_STEPS,
                                generator=seeds.generator(settings.seed, "nsp_head"),
                                on_progress=lambda f, text: progress.progress(min(1.0, f), text=text))
        st.session_state["loss_nsp"] = {"signature": nsp_signature, "result": result}
    except MLMLabError as exc:
        ui.show_error(exc)
    progress.empty()
nsp = st.session_state.get("loss_nsp")
if nsp and nsp["signature"] == nsp_signature:
    result = nsp["result"]
    ui.chart(nsp_accuracy_figure(result.records(), heldout_before=result.heldout_before,
                                        heldout_after=result.heldout_after), "loss_nsp_fig")
    c1, c2 = st.columns(2)
    c1.metric("held-out accuracy before", f"{result.heldout_before:.0%}")
    c2.metric("after", f"{result.heldout_after:.0%}", metric_delta(result.heldout_after - result.heldout_before, ".0%"))
    pairs = result.heldout_pairs[:6]
    probs = is_next_probabilities(result.model, tokenizer, pairs)
    ui.table(pd.DataFrame([{"sentence A": p.first, "sentence B": p.second,
                                "truth": "IsNext" if p.is_next else "NotNext", "P(IsNext)": prob}
                               for p, prob in zip(pairs, probs)]),
                 column_config={"P(IsNext)": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")})
    st.markdown("**MLM + NSP on these pairs** (masked with the masking rule above, the same seed)")
    c1, c2 = st.columns(2)
    mlm_weight = c1.number_input("MLM weight", 0.0, 10.0, 1.0, 0.1, key="loss_mlm_weight")
    nsp_weight = c2.number_input("NSP weight", 0.0, 10.0, 1.0, 0.1, key="loss_nsp_weight")
    combined = combined_loss_on_pairs(result.model, tokenizer, pairs, rule,
                                      generator=seeds.generator(settings.seed),  # the masks of this seed
                                      mlm_weight=mlm_weight, nsp_weight=nsp_weight)
    c1, c2, c3 = st.columns(3)
    nsp_row = f".{row_decimals([combined['mlm_loss'], combined['nsp_loss'], combined['total']])}f"
    c1.metric("MLM loss", format(combined["mlm_loss"], nsp_row), help=f"over {combined['selected']} selected tokens")
    c2.metric("NSP loss", format(combined["nsp_loss"], nsp_row))
    c3.metric("total", format(combined["total"], nsp_row), help="MLM weight × MLM + NSP weight × NSP (BERT: 1 and 1)")
else:
    st.caption("Press the button: a few dozen steps on workshop-corpus pairs, accuracy rising from chance.")

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
