"""Home: what masked-language modelling is, in a few sentences and one picture."""

import streamlit as st

import ui
from mlm_core.figures.home import flow_figure
from ui import share_state
from mlm_core.lessons.prose import LessonText

TEXT = LessonText("home")  # mlm_core/lessons/text/home.md
settings = ui.page_setup("🎭 MLM Lab", link=share_state.PAGE_LINKS["home"])
st.markdown(TEXT("intro"))
ui.chart(flow_figure(), "home_flow", toolbar=False, room=False)  # drawn to its own scale
st.markdown(TEXT("walk"))
