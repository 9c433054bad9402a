"""A page's set-up: its run through app.py, the shared sidebar, the share box and the title.

Pages call ``settings = ui.page_setup("Title")`` first; everything else they need from the library
comes from ``mlm_core``.
"""

from __future__ import annotations

import os

import streamlit as st

from dataclasses import replace

from mlm_core.errors import MLMLabError
from mlm_core.jobs import cap_threads, get_manager
from mlm_core.model_access import allowed_models, any_model_allowed, is_builtin
from mlm_core.models import available_models
from mlm_core.seeds import MAX_SEED
from ui import session, share
from ui.live_class import join_panel, live_pointer
from ui.loaders import cached_tokenizer
from ui.chips import markdown_text
from ui.controls import trained_models
from ui.navigation import ensure_app_navigation
from ui.presenter import room_styles
from ui.settings import DEFAULT_MODEL, DEFAULT_SEED, KEYS, MAX_MODEL_NAME_CHARS, SERVER_ENVIRONMENT, Settings

TRAINING_PAGE = "pages/training.py"  # the sidebar's link back to a running training run


def page_setup(title: str, link: tuple[str, ...] | None = None, shown: dict[str, str] | None = None) -> Settings:
    """Shared defaults, the sidebar and the page title; returns the settings every page uses.

    ``link``: the fields this page's address and share link hold
    (``ui.share_state.PAGE_LINKS[page]``); the others stay in the session, for the pages
    that show them. ``shown``: see ``ui.share.begin_page``.
    """
    share.begin_page(link, shown)
    ensure_app_navigation()
    configure_server()
    state = st.session_state
    share.restore_left_widgets()  # classroom: sidebar and page widgets lose their values on a page switch
    state.setdefault(KEYS.model, os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL))
    state.setdefault(KEYS.seed, DEFAULT_SEED)
    state.setdefault(KEYS.presenter, False)
    state.setdefault(KEYS.custom_model, "")
    link_problems = share.read_and_sync_link()  # classroom: a shared link sets the state before any widget
    settings = sidebar()
    settings, model_problem = usable_model(settings)
    if model_problem:
        share.read_and_sync_link()  # the address names the model the pages use, not the one that failed
    share.share_box()
    live_pointer()  # where the class's open question is (redrawn by itself)
    if settings.presenter:
        room_styles()
    st.title(title)
    join_panel()  # presenter view in classroom mode: the address and its QR code
    if link_problems:
        share.link_notice(link_problems)
    if model_problem:
        st.error(markdown_text(model_problem))  # it names what was typed: shown as text (issue 29)
    return settings


def usable_model(settings: Settings) -> tuple[Settings, str | None]:
    """The sidebar's model if it loads, else the last one that did, with a message saying so.

    A hub id that cannot be loaded (misspelt, not in this server's cache, not allowed) used to stop
    every page until the box was cleared; the pages now keep working on the model they had. A failed
    name is not tried again on every rerun (a download attempt each time); typing another name is.
    """
    state = st.session_state
    name = settings.model_name
    failed = state.get(KEYS.model_failed)
    if is_builtin(name):
        state[KEYS.model_in_use] = name
        return settings, None
    if not (failed and failed[0] == name):
        try:
            cached_tokenizer(name)  # a hub model's tokenizer comes with its model: this loads it, once per server
            state[KEYS.model_in_use] = name
            state.pop(KEYS.model_failed, None)
            return settings, None
        except Exception as exc:  # a bad id, no internet, not allowed here: said below, never a traceback
            failed = state[KEYS.model_failed] = (name, str(exc) if isinstance(exc, MLMLabError) else
                                                 f"{type(exc).__name__}: {exc}")
    previous = state.get(KEYS.model_in_use)
    label = next((m["label"] for m in available_models() if m["name"] == previous), previous) or "the bundled default"
    return replace(settings, model_name=previous), (
        f"{failed[1]} The pages keep using {label} until the sidebar's box holds a model that loads "
        "(clear it to go back to the list above it).")


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
        st.number_input("Seed", min_value=0, max_value=MAX_SEED, step=1, key=KEYS.seed,
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
        where = f", {snap.queue.place} in line" if snap.queue is not None else ""
        st.progress(min(1.0, snap.progress),
                    text=f"Training run: {snap.status}{where}, step {snap.step} of {snap.total_steps}")
        try:
            st.page_link(TRAINING_PAGE, label="Open the Training page", icon="🏋️")
        except Exception:  # a page run on its own (tests) has no navigation to link into
            pass

    status()


@st.cache_resource(show_spinner=False)
def configure_server() -> int:
    """Once per server, before any page uses a model: what the server needs, whatever the shell it starts in.

    - torch's thread count (mlm_core.jobs.cap_threads), so a background training run and every page's
      forward passes share the cores instead of each taking all of them;
    - ``TOKENIZERS_PARALLELISM=false``: the sessions are the server's parallelism. Every shared tokenizer
      is safe either way (``mlm_core.data.shared_tokenizer``; benchmarks/tokenizer_stress.py runs both),
      but a Rust worker pool that waits for the GIL is how issue 42's server froze, and encoding a few
      sentences gains nothing from one.
    """
    os.environ.update(SERVER_ENVIRONMENT)
    threads = cap_threads()
    get_manager().watch()  # garbage collected and memory returned every minute (postScriptGC is off: config.toml)
    session.guard_cache_clearing()  # a student's "clear cache" clears their own state, not the class's models
    return threads
