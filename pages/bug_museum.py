"""Bug museum: ten classic MLM mistakes, each run on the current batch, and an audit for your own batch."""

import pandas as pd
import streamlit as st

import ui
from mlm_core.lessons import share_state
from mlm_core import MLMLabError
from mlm_core.figures.losses import museum_figure
from mlm_core.formatting import readable
from mlm_core.lessons.audit import BATCH_FORMAT, audit_batch, batch_to_json, load_batch_file
from mlm_core.lessons.loss_lab import LOSS_SETTINGS
from mlm_core.lessons.museum import exhibit_rows, run_exhibits
from mlm_core.lessons.training_lessons import TRAINED_BUGS, museum_link, training_link_state
from mlm_core.sampled_softmax import CORRECTION_LABELS, SAMPLED_SOFTMAX

BATCH_SENTENCES = 8
MAX_CHARS = 4_000

settings = ui.page_setup("🐞 Bug museum", link=share_state.PAGE_LINKS["bug_museum"])
GO_TRAINING = "museum_go_training"  # set by a "Train it" button: open the Training page on that bug
if st.session_state.pop(GO_TRAINING, False):
    st.switch_page("pages/training.py")


def train_it(bug: str) -> None:
    st.session_state.update(training_link_state(bug))
    st.session_state[GO_TRAINING] = True
st.markdown(
    "Tutorials, blog posts and first attempts get the MLM loss subtly wrong. Every exhibit below runs "
    "**the buggy code and the correct code on the same batch** (the seed in the sidebar) and shows both "
    "numbers. At the bottom, audit a batch from your own pipeline for the same mistakes."
)

model, tokenizer = ui.model_or_stop(settings)
rule = ui.shared_masking_config()

batch = ui.loss_batch_controls("museum", settings, model, tokenizer, rule, n=BATCH_SENTENCES, max_chars=MAX_CHARS)
try:
    exhibits = run_exhibits(batch)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()

sampled = SAMPLED_SOFTMAX
st.caption(
    f"The batch is the Loss page's for the same seed and text, masked with the rule set on the Masking page or the "
    f"shared link ({rule.strategy.replace('_', ' ')}, p = {rule.mlm_probability:.0%}, "
    f"{rule.mask_replace_prob:.0%} / {rule.random_replace_prob:.0%} / {rule.unchanged_prob:.0%}). The correct "
    f"values are the Loss page's with its default settings: weights {LOSS_SETTINGS.scheme}, sampled softmax K = "
    f"{sampled.num_sampled} drawn {'with' if sampled.replacement else 'without'} replacement from the corpus' token "
    f"frequencies, {CORRECTION_LABELS[sampled.correction]}. Vocabulary, as in the audit below: original_ids are the "
    f"tokens before masking, input_ids what the model sees, labels the targets (-100 where nothing is predicted).")
figure = museum_figure(exhibits, height=ui.chart_height(420))
if settings.presenter:  # the legend wraps onto more lines at the room's font size: room above the plot
    figure.update_layout(margin=dict(t=130))
    figure.update_traces(textangle=-90, textfont_size=ui.PRESENTER_CHART_FONT_PX - 2,  # upright ones would collide
                         constraintext="none")
st.plotly_chart(ui.room_figure(figure), key="museum_fig", config=ui.plotly_config("bug_museum"))
st.caption("The exhibits measured as a loss, buggy beside correct (and, for the sampled-softmax ones, the full "
           "loss they estimate). The others count tokens or shares; each card below gives its own numbers.")


def _number(value: float, unit: str) -> str:
    if unit.startswith("%"):
        return f"{readable(value, 3)}%"
    return readable(value)


def show_exhibit(number: int, exhibit) -> None:
    with st.container(border=True):
        st.markdown(f"#### {number}. {exhibit.title}")
        st.caption(f"Measured on this batch: {exhibit.unit}")
        wrong_label, right_label = exhibit.labels
        buggy = wrong_label == "buggy code"
        c1, c2 = st.columns(2)
        c1.metric(f"{'❌ ' if buggy else ''}{wrong_label}", _number(exhibit.wrong_value, exhibit.unit))
        c2.metric(f"{'✅ ' if buggy else ''}{right_label}", _number(exhibit.right_value, exhibit.unit))
        if exhibit.also:
            columns = st.columns(len(exhibit.also))
            for column, (name, value) in zip(columns, exhibit.also.items()):
                column.metric(name, readable(value, 3 if "cosine" in name else 4),
                              help="Cosine between this loss's gradient with respect to the hidden states and the "
                                   "full loss's: 1 = the same direction." if "cosine" in name else None)
        st.markdown(exhibit.why)
        st.code(f"# {'❌ buggy' if buggy else wrong_label}\n{exhibit.wrong_code}\n"
                f"# {'✅ correct' if buggy else right_label}\n{exhibit.right_code}", language="python",
                wrap_lines=True)  # on a projector a long line must wrap, not scroll out of sight
        if exhibit.details:
            with st.expander("Details on this batch"):
                st.table(pd.DataFrame(exhibit_rows(exhibit)).set_index("what"))
        link = museum_link(exhibit.key)
        if link:
            st.button(link[1], key=f"museum_train_{exhibit.key}", on_click=train_it, args=(link[0],),
                      help=f"The Training page's lesson \"Bugs that train\": {TRAINED_BUGS[link[0]].title}, trained "
                      "beside a clean twin from the same weights, batches, masks and seed.")


titles = {e.key: e.title for e in exhibits}
for number, exhibit in enumerate(exhibits, 1):
    show_exhibit(number, exhibit)

trained_only = [b for b in TRAINED_BUGS.values() if not b.museum]  # bugs of the evaluation step: no batch to show
if trained_only:
    st.markdown(f"**Bugs only a run shows ({len(trained_only)}).** These are in how a run is evaluated, not in "
                "one batch: the Training page trains each beside a clean twin.")
    for column, bug in zip(st.columns(len(trained_only)), trained_only):
        column.button(f"🏋️ {bug.title}", key=f"museum_train_{bug.key}", on_click=train_it, args=(bug.key,))

# --------------------------------------------------------------------------- audit
st.subheader("Audit your batch")
st.markdown(
    "Export one batch from your own data pipeline (`original_ids`: the ids **before** masking, `input_ids`: what "
    "the model sees, and `labels`) and upload it. Each check passes or fails, and a failure names the exhibit that "
    f"explains it. Accepted formats: {BATCH_FORMAT} `.pt`, `.bin` and pickle files are refused: opening them can "
    "run code."
)
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
            st.success(f"All {len(checks)} checks passed (with this tokenizer's special tokens and the masking "
                       f"rule above: p = {rule.mlm_probability:.0%}, {rule.mask_replace_prob:.0%} / "
                       f"{rule.random_replace_prob:.0%} / {rule.unchanged_prob:.0%}).")
        st.table(pd.DataFrame([{
            "check": c.name, "result": "✅ pass" if c.passed else "❌ fail", "found": c.value, "expected": c.expected,
            "explained by exhibit": titles.get(c.exhibit, "") if c.exhibit else "",
        } for c in checks]).set_index("check"))
        st.caption(f"The batch: {tuple(arrays.input_ids.shape)} (rows × positions). Rates pass within 4 standard "
                   "errors, so a small batch is judged leniently; exact count and span fix each row's count from its "
                   "length, and that count is what is expected.")
