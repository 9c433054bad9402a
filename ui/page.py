"""A page's set-up: its run through app.py, the shared sidebar, the share box and the title.

Pages call ``settings = ui.page_setup("Title")`` first; everything else they need from the library
comes from ``mlm_core``.
"""

from __future__ import annotations

import os

import streamlit as st

from mlm_core.jobs import cap_threads
from mlm_core.model_access import allowed_models, any_model_allowed
from mlm_core.models import available_models
from ui import session, share
from ui.controls import trained_models
from ui.navigation import ensure_app_navigation
from ui.presenter import room_styles
from ui.settings import DEFAULT_MODEL, DEFAULT_SEED, KEYS, MAX_MODEL_NAME_CHARS, Settings

TRAINING_PAGE = "pages/training.py"  # the sidebar's link back to a running training run


def page_setup(title: str, private: tuple[str, ...] = ()) -> Settings:
    """Shared defaults, the sidebar and the page title; returns the settings every page uses.

    ``private``: link fields this page keeps out of its address and share link (the Quiz keeps
    ``sentence`` out: the address would give its answers away). They stay in the session.
    """
    share.begin_page(private)
    ensure_app_navigation()
    cap_torch_threads()
    state = st.session_state
    share.restore_left_widgets()  # classroom: sidebar and page widgets lose their values on a page switch
    state.setdefault(KEYS.model, os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL))
    state.setdefault(KEYS.seed, DEFAULT_SEED)
    state.setdefault(KEYS.presenter, False)
    state.setdefault(KEYS.custom_model, "")
    link_problems = share.read_and_sync_link()  # classroom: a shared link sets the state before any widget
    settings = sidebar()
    share.share_box()
    if settings.presenter:
        room_styles()
    st.title(title)
    if link_problems:
        share.link_notice(link_problems)
    return settings


def model_options() -> list[tuple[str, str]]:
    """(value, label) pairs for the model picker, offline ones first; downloads only for whoever may load them."""
    open_to_all = session.session_is_local() or any_model_allowed()
    allowed = allowed_models()
    options = [(m["name"] or DEFAULT_MODEL, m["label"]) for m in available_models()
               if open_to_all or m["offline"] or m["name"] in allowed]
    listed = {value for value, _ in options}
    return options + [(name, f"{name} (teacher's list)") for name in sorted(allowed) if name not in listed]


def sidebar() -> Settings:
    """The shared settings in the sidebar (model, seed, presenter view) and this session's training run."""
    state = st.session_state
    with st.sidebar:
        st.header("Shared settings")
        options = model_options()
        values = [value for value, _ in options]
        labels = dict(options)
        current = state[KEYS.model]
        if current not in values:  # a hub id typed earlier, or one from a shared link
            values.append(current)
            labels[current] = current
        st.selectbox(
            "Model and tokenizer",
            values,
            format_func=lambda v: labels.get(v, v),
            key=KEYS.model,
            help="The bundled default and the tiny random BERT work offline. Hub models need internet "
            "the first time (then they are cached).",
        )
        custom = st.text_input(
            "Other Hugging Face id or local folder",
            key=KEYS.custom_model,
            placeholder="e.g. bert-base-uncased",
            max_chars=MAX_MODEL_NAME_CHARS,
            help="Any masked LM on the Hugging Face hub (BERT, DistilBERT, RoBERTa, ALBERT…) or a local "
            "folder (./my-model). On a shared classroom server, students get the models in the list above "
            "and the teacher's list (MLMLAB_ALLOWED_MODELS).",
        )
        st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key=KEYS.seed,
                        help="Every random choice on every page comes from this seed.")
        st.toggle("Presenter view", key=KEYS.presenter, help="Large tokens and charts for a projector.")
        training_run_status()
    name = custom.strip() or state[KEYS.model]
    return Settings(
        model_name=None if name == DEFAULT_MODEL else name,
        seed=int(state[KEYS.seed]),
        presenter=bool(state[KEYS.presenter]),
    )


def training_run_status() -> None:
    """This session's training run, on every page: progress and a link back (a run lives while its
    session does, on any page)."""
    run = st.session_state.get(KEYS.training_run)
    if run is None:
        return
    if getattr(run, "keep_trained", False) and run.snapshot(touch=False).finished:
        trained_models()  # the finished run's copies go to the session's store, where the server's budget counts them

    @st.fragment(run_every=None if run.snapshot().finished else 2.0)
    def status() -> None:
        snap = run.snapshot()
        st.progress(min(1.0, snap.progress), text=f"Training run: {snap.status}, step {snap.step} of {snap.total_steps}")
        try:
            st.page_link(TRAINING_PAGE, label="Open the Training page", icon="🏋️")
        except Exception:  # a page run on its own (tests) has no navigation to link into
            pass

    status()


@st.cache_resource(show_spinner=False)
def cap_torch_threads() -> int:
    """Once per server: torch's thread count (mlm_core.jobs.cap_threads), so a background training run
    and every page's forward passes share the cores instead of each taking all of them."""
    return cap_threads()
