"""Efficiency: what the masked-only loss saves, measured live on this machine and model."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.lessons import share_state
from mlm_core.costs import logits_size
from mlm_core.lessons.efficiency import (LOOP_MAX_ROWS, LOOP_SWEEP_ROWS, MATMUL_SHARE, amp_and_checkpointing,
                                         loop_vs_vectorised, loss_paths, step_time_breakdown)
from mlm_core.measure import human_bytes
from mlm_core.figures.efficiency import (logits_size_figure, loop_sweep_figure, loss_paths_figure,
                                         step_breakdown_figure, step_settings_figure)
from mlm_core.models import model_description
from mlm_core.formatting import signed
from mlm_core.precision import auto_amp

VOCABS = [1_000, 8_000, 30_522, 50_265, 128_000, 250_002]  # toy, small, BERT, RoBERTa, Llama 3, XLM-R
SEQ_LENS = [32, 64, 128, 256, 512]

settings = ui.page_setup("⚡ Efficiency: what the masked-only loss saves", link=share_state.PAGE_LINKS["efficiency"])
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
ui.chart(logits_size_figure(size, height=height), "eff_size_fig")
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
here = (settings.model_name, mb, mt, repeats, settings.seed)

# --------------------------------------------------------------------------- 3. three loss paths
st.markdown("#### Three ways to the same loss")
st.markdown(
    "- **per-position loop**: scores at every position, then a Python loop over the selected ones;\n"
    "- **vectorised, `ignore_index`**: scores at every position, one `cross_entropy` call that skips "
    "the unselected labels (what Hugging Face's `BertForMaskedLM(labels=...)` does);\n"
    "- **gather before the head**: pick the selected rows first, then score only those (MLM Lab; fairseq's "
    "`RobertaLMHead` with `masked_tokens`; NVIDIA's MLPerf BERT with `--dense_seq_output`).\n\n"
    "The encoder runs once, outside the clock; each path runs the head and the loss, forward and backward."
)
rows = ui.on_demand("⏱ Measure the three loss paths", "eff_paths", "Running the head and the loss three ways…", here,
                    lambda: loss_paths(model, tokenizer, batch_size=mb, seq_len=mt, repeats=repeats, seed=settings.seed),
                    queued=True)
if rows is not None:
    ui.chart(loss_paths_figure(rows, height=height), "eff_paths_fig")
    by = {r["path"]: r for r in rows}
    if "loop" not in by:
        st.caption(f"The loop was left out: with more than {LOOP_MAX_ROWS} selected rows it takes minutes, because "
                   "its backward pass builds a full gradient tensor for every single row.")
    loop = by.get("loop")
    honest = ""
    if loop is not None:
        extra = loop["time_ms"] / by["vectorised"]["time_ms"] - 1
        honest = (f" The loop and the vectorised loss cost about the same here (the loop {signed(extra, '.0%')}): both "
                  f"compute the head's {by['vectorised']['logits_values']:,} scores first, and that, not the loss, is "
                  "most of the work at this size. The next measurement takes the head away to show where the loop "
                  "itself hurts." if loop["speedup"] > 0.67 else
                  f" The loop is {1 / loop['speedup']:.1f}× slower than the vectorised loss here.")
    st.caption(
        f"**What it teaches:** the three losses agree (largest difference {max(r['loss_diff'] for r in rows):.1e}); "
        f"gathering first is {by['gathered']['speedup']:.1f}× faster than the vectorised loss here "
        f"with {rows[0]['masked']} of {mb * mt} positions selected, because the head's work scales with the rows "
        f"it scores.{honest} Times are medians of {repeats} rounds run round-robin; ratios are medians of the "
        "per-round ratios."
    )
    ui.table(pd.DataFrame([{
        "path": r["label"], "loss": r["loss"], "time (ms)": round(r["time_ms"], 1),
        "peak memory": human_bytes(r["peak_bytes"]), "scores computed": r["logits_values"],
        "vs vectorised": f"{r['speedup']:.2f}×"} for r in rows]))

st.markdown("#### Where the loop hurts: the loss alone")
vocab = int(model_description(model)["vocab"] or 30_522)
sweep_vocabs = tuple(sorted({1_000, min(vocab, 50_265)}))
st.markdown(
    f"Now only the loss, on ready-made (M, V) scores: the loop against one `cross_entropy` call, for "
    f"M = {', '.join(map(str, LOOP_SWEEP_ROWS))} selected rows and V = {' and '.join(f'{v:,}' for v in sweep_vocabs)}. "
    "The loop pays twice: **per row** (one Python iteration of about six small operations, forward and backward), "
    "and **M² · V** in the backward pass (indexing `logits[i]` hands each row's gradient back as a full (M, V) "
    "tensor of zeros with one row filled). Both grow with M; the second also with V."
)
rows = ui.on_demand("⏱ Measure the loop against one call", "eff_sweep", "Timing the loss alone, two ways, six sizes…",
                    (sweep_vocabs, repeats, settings.seed),
                    lambda: loop_vs_vectorised(vocab_sizes=sweep_vocabs, repeats=repeats, seed=settings.seed),
                    queued=True)
if rows is not None:
    ui.chart(loop_sweep_figure(rows, height=height), "eff_sweep_fig")
    low = min(rows, key=lambda r: (r["rows"], r["vocab"]))
    high = max(rows, key=lambda r: (r["rows"], r["vocab"]))
    st.caption(
        f"**What it teaches:** with M = {low['rows']} rows and V = {low['vocab']:,} the loop is {low['ratio']:.1f}× "
        f"the vectorised loss; with M = {high['rows']} and V = {high['vocab']:,} it is {high['ratio']:.0f}× "
        f"({high['loop_ms']:.0f} ms against {high['vectorised_ms']:.1f} ms). The same losses "
        f"(largest difference {max(r['loss_diff'] for r in rows):.1e}): only the cost differs. A batch of "
        f"32 × 128 tokens selects about {logits_size(32, 128, vocab)['masked']} rows."
    )
    ui.table(pd.DataFrame([{
        "V": f"{r['vocab']:,}", "M": r["rows"], "loop (ms)": round(r["loop_ms"], 2),
        "vectorised (ms)": round(r["vectorised_ms"], 2), "loop ÷ vectorised": f"{r['ratio']:.1f}×"}
        for r in rows]))

# --------------------------------------------------------------------------- 4. a training step, five ways
st.markdown("#### A training step: bf16, checkpointing, frozen word embeddings")
choice = auto_amp(model_description(model)["device"])
st.info(f"**Training runs in {choice.label} on this machine** (the Training page's precision setting "
        f"\"auto\"): {choice.reason}")
st.markdown(
    "One training step, exactly the Training page's (encoder, head on the selected rows, loss, backward, clipping, "
    "AdamW), on a private copy of the model, set up five ways. **bf16 autocast** runs the matrix multiplies in "
    "16-bit; **gradient checkpointing** keeps fewer activations and recomputes them in the backward pass; "
    "**frozen word embeddings** (a fine-tuning choice) skip the gradient and the AdamW update of the "
    "(V × H) embedding matrix, which BERT shares with the output layer. Before every step the weights go back to "
    "the same starting point, so the losses differ only by what a set-up changes; the set-ups take turns, "
    "round after round. **Matmul share of the step**: the step's own matrix multiplies, timed alone in the same "
    "run, as a share of the whole step's time (a CPU \"MFU\": inside the step they run at about their solo speed, "
    "so the rest of the time is softmax, dropout, layer norms, AdamW and Python)."
)
rows = ui.on_demand("⏱ Measure the training step five ways", "eff_steps",
                    "Training a copy of the model, one step at a time, five ways…", here,
                    lambda: amp_and_checkpointing(model, tokenizer, batch_size=mb, seq_len=mt, repeats=repeats,
                                                  seed=settings.seed), queued=True)
if rows is not None:
    ui.chart(step_settings_figure(rows, height=height), "eff_steps_fig")
    st.caption("Blue: fp32; purple: bf16 autocast; hatched: gradient checkpointing; dotted: word embeddings frozen.")
    base = rows[0]
    ckpt = next((r for r in rows if r["checkpointing"] and r["amp"] == "off"), None)
    bf16 = next((r for r in rows if not r["checkpointing"] and r["amp"] == "bf16" and not r["frozen"]), None)
    frozen = next((r for r in rows if r["frozen"] and r["amp"] == "off"), None)
    parts = []
    if bf16 is not None:
        parts.append(f"bf16 took {bf16['time_x']:.2f}× the fp32 time"
                     + (" (this CPU multiplies bf16 faster)" if bf16["time_x"] < 0.9 else
                        " (no gain: this CPU, or these small matrices, do not profit from bf16)"))
    if ckpt is not None:
        parts.append(f"checkpointing changed peak memory {ckpt['mem_x']:.2f}× and time {ckpt['time_x']:.2f}×"
                     + (" (at this size the gradients of the weights, not the activations, set the peak: "
                        "try a larger batch or sequence)" if ckpt["mem_x"] > 0.9 else ""))
    if frozen is not None:
        parts.append(f"frozen word embeddings took {frozen['time_x']:.2f}× the time and {frozen['mem_x']:.2f}× the "
                     "memory")
    if base.get("mfu") is not None:
        parts.append(f"the fp32 step's matrix multiplies, timed alone, take {base['mfu']:.0%} of its time")
    st.caption("**What it teaches:** memory and time trade against each other: " + "; ".join(parts) + ". "
               f"Times: medians of {repeats} rounds; ratios: medians of the per-round ratios.")
    ui.table(pd.DataFrame([{
        "setting": r["label"], "time per step (ms)": round(r["time_ms"], 1), "vs fp32": f"{r['time_x']:.2f}×",
        "peak memory": human_bytes(r["peak_bytes"]),
        MATMUL_SHARE: f"{r['mfu']:.0%}" if r.get("mfu") is not None else "–",
        "loss": r["loss"]} for r in rows]))

# --------------------------------------------------------------------------- 5. where the time goes
st.markdown("#### Where a step's time goes")
st.markdown(
    "The same step once under `torch.profiler`, in fp32 and in bf16: every operation's own time, grouped. "
    "Whatever is not a matrix multiply is time the machine's fastest units sit idle."
)
breakdowns = ui.on_demand(
    "⏱ Profile one step", "eff_profile", "Profiling one step in fp32 and one in bf16…", here,
    lambda: {label: step_time_breakdown(model, tokenizer, amp=amp, batch_size=mb, seq_len=mt, seed=settings.seed)
             for label, amp in (("fp32", "off"), ("bf16", "bf16"))}, queued=True)
if breakdowns is not None:
    ui.chart(step_breakdown_figure(breakdowns, height=height), "eff_profile_fig")
    share = {name: next(r["share"] for r in rows if r["category"] == "matrix multiplies")
             for name, rows in breakdowns.items()}
    other = {name: next(r for r in rows if r["category"] != "matrix multiplies") for name, rows in breakdowns.items()}
    st.caption(
        "**What it teaches:** " + "; ".join(
            f"in {name}, matrix multiplies take {share[name]:.0%} of the step and the largest other cost is "
            f"{other[name]['category']} ({other[name]['share']:.0%})" for name in breakdowns)
        + ". bf16 shrinks the matrix multiplies, so everything else weighs more: that is why a step gains less "
        "than the matmuls do."
    )

st.caption("Peak memory: on a GPU, torch.cuda.max_memory_allocated; on a CPU, the largest running total of the "
           "allocations torch.profiler records (tensors that existed before, like the weights, are not counted). "
           "The full benchmarks against Hugging Face are in benchmarks/RESULTS.md.")
