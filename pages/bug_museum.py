"""Bug museum: ten classic MLM mistakes, each run on the current batch, and an audit for your own batch."""

import pandas as pd
import streamlit as st

import ui
from mlm_core import MaskingConfig, MLMLabError
from mlm_core.figures.losses import museum_figure
from mlm_core.museum import (
    BATCH_FORMAT,
    audit_batch,
    batch_to_json,
    load_batch_file,
    museum_batch,
    run_exhibits,
)

BATCH_SENTENCES = 8
MAX_CHARS = 4_000

settings = ui.page_setup("🐞 Bug museum")
st.markdown(
    "Tutorials, blog posts and first attempts get the MLM loss subtly wrong. Every exhibit below runs "
    "**the buggy code and the correct code on the same batch** (the seed in the sidebar) and shows both "
    "numbers. At the bottom, audit a batch from your own pipeline for the same mistakes."
)

model, tokenizer = ui.model_or_stop(settings)


texts = ui.batch_sentences_controls("museum", settings.seed, n=BATCH_SENTENCES, max_chars=MAX_CHARS)
if not texts:
    st.warning("There is no text: type at least one sentence, or use the workshop corpus.")
    st.stop()
try:
    batch = museum_batch(tokenizer, texts, MaskingConfig(), seed=settings.seed, model=model)
    exhibits = run_exhibits(batch)
except MLMLabError as exc:
    ui.show_error(exc)
    st.stop()

st.plotly_chart(museum_figure(exhibits), key="museum_fig")
st.caption("The exhibits measured as a loss, buggy beside correct. The others count tokens or shares; "
           "each card below gives its own numbers.")


def _number(value: float, unit: str) -> str:
    if value != value:  # NaN
        return "NaN"
    if unit.startswith("loss"):
        return f"{value:.3f}"
    if unit.startswith("%"):
        return f"{value:.1f}%"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.3f}"


def show_exhibit(number: int, exhibit) -> None:
    with st.container(border=True):
        st.markdown(f"#### {number}. {exhibit.title}")
        c1, c2 = st.columns(2)
        c1.metric(f"❌ buggy code · {exhibit.unit}", _number(exhibit.wrong_value, exhibit.unit))
        c2.metric(f"✅ correct code · {exhibit.unit}", _number(exhibit.right_value, exhibit.unit))
        st.markdown(exhibit.why)
        st.code(f"# ❌ buggy\n{exhibit.wrong_code}\n# ✅ correct\n{exhibit.right_code}", language="python")
        if exhibit.details:
            with st.expander("Details on this batch"):
                st.dataframe(pd.DataFrame([{"what": k, "value": str(v)} for k, v in exhibit.details.items()]),
                             hide_index=True, width="stretch")


titles = {e.key: e.title for e in exhibits}
for number, exhibit in enumerate(exhibits, 1):
    show_exhibit(number, exhibit)

# --------------------------------------------------------------------------- audit
st.subheader("Audit your batch")
st.markdown(
    "Export one batch from your own data pipeline (the ids **before** masking, what the model sees, and the "
    "labels) and upload it. Each check passes or fails, and a failure names the exhibit that explains it. "
    f"Accepted formats: {BATCH_FORMAT} `.pt`, `.bin` and pickle files are refused: opening them can run code."
)
st.download_button("Example: this page's batch as JSON", batch_to_json(
    batch.encoded.input_ids, batch.result.input_ids, batch.result.labels), file_name="mlm_batch.json",
    mime="application/json", key="museum_example")
upload = st.file_uploader("Your batch (.json or .csv)", type=["json", "csv"], key="museum_upload")
if upload is not None:
    try:
        arrays = load_batch_file(upload.name, upload.getvalue())
        checks = audit_batch(arrays.original_ids, arrays.input_ids, arrays.labels, tokenizer=tokenizer,
                             config=MaskingConfig())
    except MLMLabError as exc:
        ui.show_error(exc)
    else:
        failed = [c for c in checks if not c.passed]
        if failed:
            st.error(f"{len(failed)} of {len(checks)} checks failed.")
        else:
            st.success(f"All {len(checks)} checks passed (with this tokenizer's special tokens and BERT's "
                       "15% / 80-10-10 rates).")
        st.dataframe(pd.DataFrame([{
            "check": c.name, "result": "✅ pass" if c.passed else "❌ fail", "found": c.value, "expected": c.expected,
            "explained by exhibit": titles.get(c.exhibit, "") if c.exhibit else "",
        } for c in checks]), hide_index=True, width="stretch")
        st.caption(f"The batch: {tuple(arrays.input_ids.shape)} (rows × positions). Rates pass within 4 standard "
                   "errors, so a small batch is judged leniently.")
