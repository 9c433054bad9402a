"""Home: what masked-language modelling is, in a few sentences and one picture."""

import streamlit as st

import ui
from mlm_core.lessons import share_state
from mlm_core.figures.home import flow_figure

settings = ui.page_setup("🎭 MLM Lab", link=share_state.PAGE_LINKS["home"])
st.markdown(
    """
**Masked-language modelling (MLM)** is how BERT and its relatives learn language without labels:
hide some tokens of a sentence, and train the model to predict them from both sides of the context.
BERT selects 15% of the tokens; of those, 80% become `[MASK]`, 10% a random token and 10% stay as
they are. The loss is the cross-entropy of the model's prediction **at the selected positions only**.

MLM Lab lets you watch every step of that flow, on a real tokenizer and a real model, offline:
"""
)
st.plotly_chart(flow_figure(), key="home_flow", config={"displayModeBar": False})
st.markdown(
    """
Walk the pages in order, from the sidebar:
1. **Masking** — which tokens are selected and what replaces them, decision by decision.
2. **Predictions** — what the model guesses at each selected position, and how sure it is.
3. **Inside the model** — where [MASK] looks, which layer knows the answer, and what the guess depends on.
4. **Grammar** — which sentence of a minimal pair the model finds more likely, scored by pseudo-log-likelihood.
5. **Loss** and **Bug museum** — full, weighted and sampled-softmax losses, and the classic mistakes.
6. **Tokenizer** — how the vocabulary decides what a token is, and what the head costs.
7. **Training** — fine-tune live and watch the loss fall, variants side by side.
8. **Efficiency** — why scoring only the masked rows is faster, measured on your machine.
9. **Quiz** — guess the masked token, spot the random one, and keep score.

Every page is reproducible from the **seed** in the sidebar.
"""
)
