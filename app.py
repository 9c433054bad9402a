"""MLM Lab: navigation and page config only. Run with `streamlit run app.py`."""

import streamlit as st

st.set_page_config(page_title="MLM Lab", page_icon="🎭", layout="wide")

# (file, title, icon) in the order a lesson walks them: the flow, left to right.
PAGES = [
    ("pages/home.py", "Home", "🏠"),
    ("pages/masking.py", "Masking", "🎭"),
    ("pages/predictions.py", "Predictions", "🔮"),
    ("pages/inside.py", "Inside the model", "🔬"),
    ("pages/grammar.py", "Grammar", "📐"),
    ("pages/losses.py", "Loss", "📉"),
    ("pages/bug_museum.py", "Bug museum", "🐞"),
    ("pages/tokenizer.py", "Tokenizer", "🧩"),
    ("pages/training.py", "Training", "🏋️"),
    ("pages/efficiency.py", "Efficiency", "⚡"),
    ("pages/quiz.py", "Quiz", "❓"),
]

navigation = st.navigation([st.Page(path, title=title, icon=icon) for path, title, icon in PAGES])
navigation.run()
