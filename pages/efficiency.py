"""Efficiency: what the masked-only loss saves, measured live on this machine and model."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.efficiency import LOOP_MAX_ROWS, amp_and_checkpointing, human_bytes, logits_size, loss_paths
from mlm_core.errors import MLMLabError
from mlm_core.figures.efficiency import logits_size_figure, loss_paths_figure, step_settings_figure

VOCABS = [1_000, 8_000, 30_522, 50_265, 128_000, 250_002]  # toy, small, BERT, RoBERTa, Llama 3, XLM-R
SEQ_LENS = [32, 64, 128, 256, 512]

settings = ui.page_setup("⚡ Efficiency: what the masked-only loss saves")
height = 600 if settings.presenter else 380
st.markdown(
    "The MLM loss only looks at the **selected** positions, about 15% of the tokens. The head that turns a "
    "hidden state into V scores is the most expensive layer of a small model, so running it only on those "
    "rows (*gather before the head*) saves most of its time and memory. The numbers below are measured "
    "**now, on this machine**, with the model chosen in the sidebar."
)

# --------------------------------------------------------------------------- 1. the size picture
st.subheader("1 · How big are the logits?")


def size_controls() -> tuple[int, int, int, str]:
    c1, c2, c3, c4 = st.columns(4)
    b = c1.slider("Batch size B", 1, 256, 32, key="eff_size_b")
    t = c2.select_slider("Sequence length T", SEQ_LENS, value=128, key="eff_size_t")
    v = c3.select_slider("Vocabulary V", VOCABS, value=30_522, key="eff_size_v",
                         format_func=lambda x: f"{x:,}")
    dtype = c4.radio("Scores stored as", ["fp32", "bf16"], horizontal=True, key="eff_size_dtype")
    return b, t, v, dtype


b, t, v, dtype = size_controls()
size = logits_size(b, t, v, dtype=dtype)
st.plotly_chart(logits_size_figure(size, height=height), key="eff_size_fig")
st.caption(
    f"**What it teaches:** the full logits hold B × T × V = {size['full_values']:,} scores "
    f"({human_bytes(size['full_bytes'])}), but only the M ≈ 15% selected rows enter the loss: "
    f"{size['gathered_values']:,} scores ({human_bytes(size['gathered_bytes'])}), {size['ratio']:.1f}× less, "
    "and the vocabulary multiplies both."
)

# --------------------------------------------------------------------------- the model, and measurement sizes
model, tokenizer = ui.model_or_stop(settings)

st.subheader("2 · Measure it live")
st.markdown(
    "Small sizes answer in seconds on a laptop CPU; larger ones make the differences clearer. "
    "Each measurement runs a masked batch of the workshop corpus (BERT's 15% and 80/10/10)."
)
c1, c2, c3 = st.columns(3)
mb = c1.select_slider("Batch size", [1, 2, 4, 8, 16], value=4, key="eff_batch")
mt = c2.select_slider("Sequence length", [16, 32, 64, 128], value=64, key="eff_seq")
repeats = c3.select_slider("Timed repeats", [1, 2, 3, 5], value=3, key="eff_repeats",
                           help="Each time is the median of this many runs, after one warm-up run.")
state = st.session_state
here = (settings.model_name, mb, mt, repeats, settings.seed)

# --------------------------------------------------------------------------- 3. three loss paths
st.markdown("#### Three ways to the same loss")
st.markdown(
    "- **per-position loop**: scores at every position, then a Python loop over the selected ones;\n"
    "- **vectorised, `ignore_index`**: scores at every position, one `cross_entropy` call that skips "
    "the unselected labels (what Hugging Face's `BertForMaskedLM(labels=...)` does);\n"
    "- **gather before the head**: pick the selected rows first, then score only those (MLM Lab, fairseq, NVIDIA's BERT).\n\n"
    "The encoder runs once, outside the clock; each path runs the head and the loss, forward and backward."
)
if st.button("⏱ Measure the three loss paths", key="eff_paths_run"):
    with st.spinner("Running the head and the loss three ways…"):
        try:
            state["eff_paths"] = (here, loss_paths(model, tokenizer, batch_size=mb, seq_len=mt, repeats=repeats,
                                                   seed=settings.seed))
        except MLMLabError as exc:
            ui.show_error(exc)
paths = state.get("eff_paths")
if paths is not None:
    measured_for, rows = paths
    if measured_for != here:
        st.caption("The model, sizes or seed changed since this was measured: press the button again.")
    st.plotly_chart(loss_paths_figure(rows, height=height), key="eff_paths_fig")
    by = {r["path"]: r for r in rows}
    if "loop" not in by:
        st.caption(f"The loop was left out: with more than {LOOP_MAX_ROWS} selected rows it takes minutes, because "
                   "its backward pass builds a full gradient tensor for every single row.")
    st.caption(
        f"**What it teaches:** the three losses agree (largest difference {max(r['loss_diff'] for r in rows):.1e}); "
        f"gathering first is {by['gathered']['speedup']:.1f}× faster than the vectorised loss here "
        f"with {rows[0]['masked']} of {mb * mt} positions selected, because the head's work scales with the rows it scores."
    )
    st.dataframe(pd.DataFrame([{
        "path": r["label"], "loss": r["loss"], "time (ms)": round(r["time_ms"], 1),
        "peak memory": human_bytes(r["peak_bytes"]), "scores computed": r["logits_values"],
        "vs vectorised": f"{r['speedup']:.2f}×"} for r in rows]), hide_index=True, width="stretch")

# --------------------------------------------------------------------------- 4. bf16 and checkpointing
st.markdown("#### Mixed precision (bf16) and gradient checkpointing")
st.markdown(
    "A whole training step (encoder, head on the selected rows, loss, backward, AdamW) on a private copy "
    "of the model, four ways (nine steps in all: this one takes longer). **bf16 autocast** runs matrix multiplies in 16-bit; **gradient checkpointing** "
    "keeps fewer activations and recomputes them during the backward pass."
)
if st.button("⏱ Measure bf16 and checkpointing", key="eff_steps_run"):
    with st.spinner("Training a copy of the model for a few steps, four ways…"):
        try:
            state["eff_steps"] = (here, amp_and_checkpointing(model, tokenizer, batch_size=mb, seq_len=mt,
                                                              repeats=1 if repeats < 5 else 2, seed=settings.seed))
        except MLMLabError as exc:
            ui.show_error(exc)
steps = state.get("eff_steps")
if steps is not None:
    measured_for, rows = steps
    if measured_for != here:
        st.caption("The model, sizes or seed changed since this was measured: press the button again.")
    st.plotly_chart(step_settings_figure(rows, height=height), key="eff_steps_fig")
    base = rows[0]
    ckpt = next((r for r in rows if r["checkpointing"] and r["amp"] == "off"), None)
    bf16 = next((r for r in rows if not r["checkpointing"] and r["amp"] == "bf16"), None)
    parts = []
    if ckpt is not None:
        mem = ckpt["peak_bytes"] / max(base["peak_bytes"], 1)
        parts.append(f"checkpointing changed peak memory {mem:.2f}× and time {ckpt['time_ms'] / base['time_ms']:.2f}×"
                     + (" (at this size the gradients of the weights, not the activations, set the peak: "
                        "try a larger batch or sequence)" if mem > 0.9 else ""))
    if bf16 is not None:
        parts.append(f"bf16 changed time {bf16['time_ms'] / base['time_ms']:.2f}× "
                     "(fast on GPUs and CPUs with bf16 units, often slower on other CPUs)")
    st.caption("**What it teaches:** memory and time trade against each other: " + "; ".join(parts) + ".")
    st.dataframe(pd.DataFrame([{
        "setting": r["label"], "time per step (ms)": round(r["time_ms"], 1),
        "peak memory": human_bytes(r["peak_bytes"]), "loss": r["loss"]} for r in rows]),
        hide_index=True, width="stretch")

st.caption("Peak memory: on a GPU, torch.cuda.max_memory_allocated; on a CPU, the largest running total of the "
           "allocations torch.profiler records (tensors that existed before, like the weights, are not counted). "
           "The full benchmarks against Hugging Face are in benchmarks/RESULTS.md.")
