"""Bug museum: ten classic MLM mistakes, each run on the current batch, and an audit for your own batch."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MLMLabError
from mlm_core.figures.losses import museum_figure
from ui import share_state
from mlm_core.lessons.audit import BATCH_FORMAT, audit_batch, batch_to_json, load_batch_file
from mlm_core.lessons.museum import (also_metrics, audit_rows, correct_values, exhibit_code, exhibit_metrics,
                                     exhibit_rows, rule_values, run_exhibits)
from mlm_core.lessons.prose import LessonText
from mlm_core.lessons.training_lessons import TRAINED_BUGS, museum_link, training_link_state

BATCH_SENTENCES = 8
MAX_CHARS = 4_000

TEXT = LessonText("bug_museum")  # mlm_core/lessons/text/bug_museum.md
settings = ui.page_setup("🐞 Bug museum", link=share_state.PAGE_LINKS["bug_museum"])
GO_TRAINING = "museum_go_training"  # set by a "Train it" button: open the Training page on that bug
if st.session_state.pop(GO_TRAINING, False):
    st.switch_page("pages/training.py")


def train_it(bug: str) -> None:
    st.session_state.update(training_link_state(bug))
    st.session_state[GO_TRAINING] = True


st.markdown(TEXT("intro"))

model, tokenizer = ui.model_or_stop(settings)
rule = ui.shared_masking_config()

batch = ui.loss_batch_controls("museum", settings, model, tokenizer, rule, n=BATCH_SENTENCES, max_chars=MAX_CHARS)
try:
    exhibits = run_exhibits(batch)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()

st.caption(TEXT("batch", **rule_values(rule), **correct_values()))
figure = museum_figure(exhibits)
if settings.presenter:  # the legend wraps onto more lines at the room's font size: room above the plot
    figure.update_layout(margin=dict(t=130))
    figure.update_traces(textangle=-90, textfont_size=ui.PRESENTER_CHART_FONT_PX - 2,  # upright ones would collide
                         constraintext="none")
ui.chart(figure, "museum_fig", name="bug_museum")
st.caption(TEXT("figure"))

for number, exhibit in enumerate(exhibits, 1):
    with st.container(border=True):
        st.markdown(f"#### {number}. {exhibit.title}")
        st.caption(f"Measured on this batch: {exhibit.unit}")
        ui.metric_row(exhibit_metrics(exhibit))
        if exhibit.also:
            ui.metric_row(also_metrics(exhibit))
        st.markdown(exhibit.why)
        st.code(exhibit_code(exhibit), language="python",
                wrap_lines=True)  # on a projector a long line must wrap, not scroll out of sight
        if exhibit.details:
            with st.expander("Details on this batch"):
                st.table(pd.DataFrame(exhibit_rows(exhibit)).set_index("what"))
        link = museum_link(exhibit.key)
        if link:
            st.button(link[1], key=f"museum_train_{exhibit.key}", on_click=train_it, args=(link[0],),
                      help=f"The Training page's lesson \"Bugs that train\": {TRAINED_BUGS[link[0]].title}, trained "
                      "beside a clean twin from the same weights, batches, masks and seed.")


trained_only = [b for b in TRAINED_BUGS.values() if not b.museum]  # bugs of the evaluation step: no batch to show
if trained_only:
    st.markdown(f"**Bugs only a run shows ({len(trained_only)}).** These are in how a run is evaluated, not in "
                "one batch: the Training page trains each beside a clean twin.")
    for column, bug in zip(st.columns(len(trained_only)), trained_only):
        column.button(f"🏋️ {bug.title}", key=f"museum_train_{bug.key}", on_click=train_it, args=(bug.key,))

# --------------------------------------------------------------------------- audit
st.subheader("Audit your batch")
st.markdown(TEXT("audit", formats=BATCH_FORMAT))
st.download_button("Example: this page's batch as JSON", batch_to_json(
    batch.original_ids, batch.input_ids, batch.labels), file_name="mlm_batch.json",
    mime="application/json", key="museum_example")
upload = st.file_uploader("Your batch (.json or .csv)", type=["json", "csv"], key="museum_upload")
if upload is not None:
    try:
        arrays = load_batch_file(upload.name, upload.getvalue())
        checks = audit_batch(arrays.original_ids, arrays.input_ids, arrays.labels, tokenizer=tokenizer, config=rule)
    except MLMLabError as exc:
        ui.show_error(exc)
    else:
        failed = [c for c in checks if not c.passed]
        if failed:
            st.error(f"{len(failed)} of {len(checks)} checks failed.")
        else:
            st.success(TEXT("passed", n=len(checks), **rule_values(rule)))
        st.table(pd.DataFrame(audit_rows(checks, exhibits)).set_index("check"))
        st.caption(TEXT("audit_shape", shape=tuple(arrays.input_ids.shape)))
