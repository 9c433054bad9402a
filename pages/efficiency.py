"""Efficiency: what the masked-only loss saves, measured live on this machine and model."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.costs import logits_size
from mlm_core.figures.efficiency import (logits_size_figure, loop_sweep_figure, loss_paths_figure,
                                         step_breakdown_figure, step_settings_figure)
from ui import share_state
from mlm_core.lessons.efficiency import (LOOP_SWEEP_ROWS, amp_and_checkpointing, loop_vs_vectorised, loss_paths,
                                         paths_notes, paths_table, profile_note, size_note, step_time_breakdown,
                                         steps_note, steps_table, sweep_note, sweep_table, sweep_vocabs)
from mlm_core.lessons.prose import LessonText
from mlm_core.models import model_description
from mlm_core.precision import auto_amp

VOCABS = [1_000, 8_000, 30_522, 50_265, 128_000, 250_002]  # toy, small, BERT, RoBERTa, Llama 3, XLM-R
SEQ_LENS = [32, 64, 128, 256, 512]

TEXT = LessonText("efficiency")  # mlm_core/lessons/text/efficiency.md

settings = ui.page_setup("⚡ Efficiency: what the masked-only loss saves", link=share_state.PAGE_LINKS["efficiency"])
height = 600 if settings.presenter else 380
st.markdown(TEXT("intro"))

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
st.caption(size_note(size))

# --------------------------------------------------------------------------- the model, and measurement sizes
model, tokenizer = ui.model_or_stop(settings)

st.subheader("2 · Measure it live")
st.markdown(TEXT("measure"))
c1, c2, c3 = st.columns(3)
mb = c1.select_slider("Batch size", [1, 2, 4, 8, 16], value=4, key="eff_batch")
mt = c2.select_slider("Sequence length", [16, 32, 64, 128], value=64, key="eff_seq")
repeats = c3.select_slider("Timed repeats", [1, 2, 3, 5], value=3, key="eff_repeats",
                           help="Each time is the median of this many runs, after one warm-up run.")
here = (settings.model_name, mb, mt, repeats, settings.seed)

# --------------------------------------------------------------------------- 3. three loss paths
st.markdown("#### Three ways to the same loss")
st.markdown(TEXT("paths"))
rows = ui.on_demand("⏱ Measure the three loss paths", "eff_paths", "Running the head and the loss three ways…", here,
                    lambda: loss_paths(model, tokenizer, batch_size=mb, seq_len=mt, repeats=repeats, seed=settings.seed))
if rows is not None:
    ui.chart(loss_paths_figure(rows, height=height), "eff_paths_fig")
    for note in paths_notes(rows, repeats=repeats, positions=mb * mt):
        st.caption(note)
    ui.table(pd.DataFrame(paths_table(rows)))

st.markdown("#### Where the loop hurts: the loss alone")
vocab = int(model_description(model)["vocab"] or 30_522)
vocabs = sweep_vocabs(vocab)
st.markdown(TEXT("sweep", rows=", ".join(map(str, LOOP_SWEEP_ROWS)), vocabs=" and ".join(f"{v:,}" for v in vocabs)))
rows = ui.on_demand("⏱ Measure the loop against one call", "eff_sweep", "Timing the loss alone, two ways, six sizes…",
                    (vocabs, repeats, settings.seed),
                    lambda: loop_vs_vectorised(vocab_sizes=vocabs, repeats=repeats, seed=settings.seed))
if rows is not None:
    ui.chart(loop_sweep_figure(rows, height=height), "eff_sweep_fig")
    st.caption(sweep_note(rows))
    ui.table(pd.DataFrame(sweep_table(rows)))

# --------------------------------------------------------------------------- 4. a training step, five ways
st.markdown("#### A training step: bf16, checkpointing, frozen word embeddings")
choice = auto_amp(model_description(model)["device"])
st.info(TEXT("precision", label=choice.label, reason=choice.reason))
st.markdown(TEXT("steps"))
rows = ui.on_demand("⏱ Measure the training step five ways", "eff_steps",
                    "Training a copy of the model, one step at a time, five ways…", here,
                    lambda: amp_and_checkpointing(model, tokenizer, batch_size=mb, seq_len=mt, repeats=repeats,
                                                  seed=settings.seed))
if rows is not None:
    ui.chart(step_settings_figure(rows, height=height), "eff_steps_fig")
    st.caption(TEXT("steps_legend"))
    st.caption(steps_note(rows, repeats=repeats))
    ui.table(pd.DataFrame(steps_table(rows)))

# --------------------------------------------------------------------------- 5. where the time goes
st.markdown("#### Where a step's time goes")
st.markdown(TEXT("profile"))
breakdowns = ui.on_demand(
    "⏱ Profile one step", "eff_profile", "Profiling one step in fp32 and one in bf16…", here,
    lambda: {label: step_time_breakdown(model, tokenizer, amp=amp, batch_size=mb, seq_len=mt, seed=settings.seed)
             for label, amp in (("fp32", "off"), ("bf16", "bf16"))})
if breakdowns is not None:
    ui.chart(step_breakdown_figure(breakdowns, height=height), "eff_profile_fig")
    st.caption(profile_note(breakdowns))

st.caption(TEXT("peak_memory"))
