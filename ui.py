"""The one shared UI module: page set-up and sidebar, cached loaders, token chips, session-state keys.

Pages call ``settings = ui.page_setup("Title")`` first; everything else they need from the library
comes from ``mlm_core``. Lesson content lives in the pages, not here.
"""

from __future__ import annotations

import html
import os
import re
import sys
import threading
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from mlm_core.errors import MLMLabError

DEFAULT_MODEL = "default"  # the widget value for the bundled offline model (model_name None)
MAX_MODEL_NAME_CHARS = 200  # mlm_core.model_access.MAX_NAME_CHARS: longer names are refused anyway
DEFAULT_SEED = 0


class KEYS:
    """Names of the session-state entries several pages share (one place, no typos)."""

    model = "model_name"  # sidebar: "default", "tiny-random", a hub id or a local folder
    custom_model = "custom_model"  # sidebar: text of the "other model" box
    seed = "seed"  # sidebar: the seed every page uses
    presenter = "presenter"  # sidebar: large tokens and charts for a projector
    sentence = "sentence"  # the current sentence, shared by Masking, Predictions and Quiz
    masking = "masking"  # the Masking page's last result: dict(tokens, encoded, result, config, seed)
    trained_tokenizer = "trained_tokenizer"  # Tokenizer page → Training page: a mlm_core.vocab.TrainedVocab
    training_run = "training_run"  # the Training page's mlm_core.jobs.Run; the sidebar shows it on every page
    trained_models = "trained_models"  # models trained in this session: mlm_core.session_models.TrainedModels
    trained_choice = "trained_choice"  # Predictions / Inside the model: "base" or a trained model's key


@dataclass(frozen=True)
class Settings:
    model_name: str | None  # None = the bundled default model
    seed: int
    presenter: bool


DECISION_STYLE = {
    # decision name: (background, border, label shown to learners)
    "NOT_SELECTED": ("#f1f3f5", "#ced4da", "not selected"),
    "MASK": ("#ffe3e3", "#e03131", "→ [MASK]"),
    "RANDOM": ("#fff3bf", "#f08c00", "→ random"),
    "UNCHANGED": ("#d3f9d8", "#2f9e44", "unchanged"),
    "SPECIAL": ("#e7f5ff", "#74c0fc", "special"),
}


def _model_options() -> list[tuple[str, str]]:
    """(value, label) pairs for the model picker, offline ones first; downloads only for whoever may load them."""
    from mlm_core.model_access import allowed_models, any_model_allowed
    from mlm_core.models import available_models

    open_to_all = session_is_local() or any_model_allowed()
    allowed = allowed_models()
    options = [(m["name"] or DEFAULT_MODEL, m["label"]) for m in available_models()
               if open_to_all or m["offline"] or m["name"] in allowed]
    listed = {value for value, _ in options}
    return options + [(name, f"{name} (teacher's list)") for name in sorted(allowed) if name not in listed]


def _ensure_app_navigation() -> None:
    """Run every page through app.py's navigation, also on a deep link to a fresh server.

    Streamlit treats an app with a ``pages/`` folder as an old-style multipage app until app.py has
    called ``st.navigation`` once; a first visit to /masking would then run the page without app.py
    (wrong titles and layout). Switching that mode off and rerunning goes through app.py.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without it has no such mode
        return
    # The flag is global: when two students open a deep link on a fresh server at once, the first
    # switches it off while the second's run is already inside the old-style runner. That run must
    # rerun too, or its sidebar lists the file names (found by benchmarks/classroom_load.py).
    if PagesManager.uses_pages_directory or _inside_old_style_runner():
        PagesManager.uses_pages_directory = False
        st.rerun()


def _inside_old_style_runner() -> bool:
    """This script run was started by Streamlit's old-style multipage runner (``_mpa_v1``), not app.py."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_mpa_v1":
            return True
        frame = frame.f_back
    return False


def page_setup(title: str, private: tuple[str, ...] = ()) -> Settings:
    """Shared defaults, the sidebar and the page title; returns the settings every page uses.

    ``private``: link fields this page keeps out of its address and share link (the Quiz keeps
    ``sentence`` out: the address would give its answers away). They stay in the session.
    """
    _RUN.private = frozenset(private)
    _ensure_app_navigation()
    _cap_torch_threads()
    state = st.session_state
    _restore_left_widgets()  # classroom: sidebar and page widgets lose their values on a page switch
    state.setdefault(KEYS.model, os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL))
    state.setdefault(KEYS.seed, DEFAULT_SEED)
    state.setdefault(KEYS.presenter, False)
    state.setdefault(KEYS.custom_model, "")
    link_problems = _read_and_sync_link()  # classroom: a shared link sets the state before any widget
    settings = _sidebar()
    _share_box()
    if settings.presenter:
        st.markdown(_PRESENTER_CSS, unsafe_allow_html=True)
    st.title(title)
    if link_problems:
        _link_notice(link_problems)
    return settings


def _sidebar() -> Settings:
    state = st.session_state
    with st.sidebar:
        st.header("Shared settings")
        options = _model_options()
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
        _training_run_status()
    name = custom.strip() or state[KEYS.model]
    return Settings(
        model_name=None if name == DEFAULT_MODEL else name,
        seed=int(state[KEYS.seed]),
        presenter=bool(state[KEYS.presenter]),
    )


def _training_run_status() -> None:
    """This session's training run, on every page: progress and a link back (a run lives while its
    session does, on any page)."""
    run = st.session_state.get(KEYS.training_run)
    if run is None:
        return

    @st.fragment(run_every=None if run.snapshot().finished else 2.0)
    def status() -> None:
        snap = run.snapshot()
        st.progress(min(1.0, snap.progress), text=f"Training run: {snap.status}, step {snap.step} of {snap.total_steps}")
        try:
            st.page_link("pages/training.py", label="Open the Training page", icon="🏋️")
        except Exception:  # a page run on its own (tests) has no navigation to link into
            pass

    status()


@st.cache_resource(show_spinner=False)
def _cap_torch_threads() -> int:
    """Once per server: torch's thread count (mlm_core.jobs.cap_threads), so a background training run
    and every page's forward passes share the cores instead of each taking all of them."""
    from mlm_core.jobs import cap_threads

    return cap_threads()


def client_id() -> str:
    """Who is asking, for "one run per client": the IP address, or the session for local connections
    (st.context.ip_address is None on localhost, and a teacher's tabs are not one student)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ip = st.context.ip_address
    if isinstance(ip, str) and ip:  # AppTest's stand-in runtime answers with a mock: not an address
        return f"ip:{ip}"
    ctx = get_script_run_ctx()
    return f"session:{ctx.session_id if ctx else 'unknown'}"


def session_alive_check():
    """A thread-safe "is this session still connected (on any page)?" for mlm_core.jobs, or None
    where there is no server runtime (bare mode), so the run falls back to being polled."""
    from streamlit import runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    instance, session_id = runtime.get_instance(), ctx.session_id
    return lambda: instance.is_active_session(session_id)


PRESENTER_TOKEN_PX = 30  # chips readable from the back row (issue: at least 28 px)
PRESENTER_CHART_HEIGHT = 600  # charts at least this tall in presenter view
PRESENTER_TABLE_PX = 22  # table text in presenter view: as large as the page's body text there (1.25rem = 20 px) or larger

_PRESENTER_CSS = f"""
<style>
.mlm-chips .mlm-chip {{ font-size: {PRESENTER_TOKEN_PX}px !important; padding: 8px 12px !important; }}
.mlm-chips .mlm-sub {{ font-size: 18px !important; }}
div[data-testid="stMarkdownContainer"] p, div[data-testid="stMarkdownContainer"] li {{ font-size: 1.25rem; }}
div.stButton button, div.stFormSubmitButton button, div.stDownloadButton button {{
  font-size: 1.4rem; padding: 0.6rem 1.4rem; min-height: 3.2rem; }}
div.stButton button p, div.stFormSubmitButton button p, div.stDownloadButton button p {{ font-size: 1.4rem; }}
div[data-testid="stButtonGroup"] button {{ min-height: 2.8rem; padding: 0.3rem 1rem; }}
div[data-testid="stButtonGroup"] button p, div[data-testid="stRadioOption"] p {{ font-size: 1.35rem; }}
div[data-testid="stTextInput"] input, div[data-testid="stTextArea"] textarea {{ font-size: 1.4rem !important; }}
/* the values of number inputs (the seed) and of the page's select boxes ("Look from", a head): as large as
   their labels; the sidebar's model box keeps its size, or "Bundled default (offline)" would be cut */
[data-testid="stMain"] div[data-testid="stSelectbox"] input, [data-testid="stMain"] div[data-testid="stMultiSelect"] input,
div[data-testid="stNumberInput"] input {{ font-size: 1.25rem !important; }}
div[data-testid="stMetricValue"], div[data-testid="stMetricValue"] p {{ font-size: 2.8rem !important; line-height: 1.25; }}
div[data-testid="stMetricLabel"] p, div[data-testid="stMetricDelta"] p, div[data-testid="stMetricDelta"] {{
  font-size: 1.3rem !important; }}
div[data-testid="stCaptionContainer"], div[data-testid="stCaptionContainer"] p {{ font-size: 1.15rem; }}
div[data-testid="stCaptionContainer"] code, div[data-testid="stMarkdownContainer"] p code {{ font-size: 0.9em !important; }}
div[data-baseweb="select"] div, div[data-testid="stExpander"] summary p {{ font-size: 1.25rem; }}
/* a button's label or a metric wraps onto a second line rather than being cut ("Re-roll (new s…") */
div.stButton button *, div.stFormSubmitButton button *, div.stDownloadButton button *, div[data-testid="stMetric"] * {{
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; max-width: none !important; }}
div[class*="st-key-advanced_"] {{ display: none !important; }}
/* code (the Bug museum's, the Masking page's snippets): wrapped by st.code(wrap_lines=True), and large */
div[data-testid="stCode"] code, div[data-testid="stCode"] pre {{ font-size: 1.1rem !important; }}
/* tables (ui.table draws them as HTML in presenter view: a dataframe is a canvas CSS cannot enlarge) */
div[data-testid="stTable"] table, div[data-testid="stTable"] th, div[data-testid="stTable"] td {{
  font-size: {PRESENTER_TABLE_PX}px !important; line-height: 1.35; }}
</style>
"""


def session_is_local() -> bool:
    """The browser runs on the server's own machine (Streamlit gives no IP address for localhost)."""
    try:
        ip = st.context.ip_address  # None for 127.0.0.1 and ::1 (the TCP peer, not a header)
    except Exception:  # no script run context (bare mode): nobody else is connected
        return True
    return not isinstance(ip, str)  # AppTest has no client address at all


def check_model_access(model_name: str | None, *, from_link: bool = False) -> None:
    """ModelLoadError unless this session may load the model (mlm_core.model_access: students on a
    classroom server get the default, tiny-random, cached models and MLMLAB_ALLOWED_MODELS)."""
    from mlm_core.model_access import any_model_allowed, check_access, is_builtin

    if is_builtin(model_name) or (model_name and model_name == os.environ.get("MLMLAB_MODEL")):
        return  # always there, or the teacher's own choice of default
    from mlm_core.models import available_models

    cached = [m["name"] for m in available_models() if m["offline"] and m["name"]]
    check_access(model_name, trusted=session_is_local() or any_model_allowed(), from_link=from_link, cached=cached)


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _load_model(model_name: str | None):
    from mlm_core.models import load_masked_lm

    return load_masked_lm(model_name)


def cached_model(model_name: str | None):
    """(model, tokenizer) for a name, loaded once per server; pages must never change the model.

    The access check runs for every session before the cache is asked: a folder the teacher loaded
    is not thereby open to every student.
    """
    check_model_access(model_name)
    return _load_model(model_name)


@st.cache_resource(show_spinner="Loading the tokenizer…", max_entries=4)
def _load_default_tokenizer():
    from mlm_core.bundled import load_default_tokenizer

    return load_default_tokenizer()


def cached_tokenizer(model_name: str | None):
    """The tokenizer of a model; the offline ones without loading any weights."""
    if model_name in (None, DEFAULT_MODEL, "tiny-random"):
        return _load_default_tokenizer()
    return cached_model(model_name)[1]


@st.cache_resource(show_spinner="Building a tiny model for your vocabulary…", max_entries=4)
def cached_tiny_for_vocab(_vocab, vocab_key: str):
    """A tiny random BERT sized to a vocabulary trained on the Tokenizer page (keyed by ``vocab_key``)."""
    from mlm_core.models import load_masked_lm

    return load_masked_lm("tiny-random", tokenizer=_vocab.tokenizer)


@st.cache_resource(show_spinner="Counting tokens in the workshop corpus…", max_entries=4)
def cached_corpus_counts(model_name: str | None, vocab_size: int, _tokenizer):
    """Token counts (V,) of the workshop corpus, the Loss and Bug museum pages' class weights and proposal."""
    from mlm_core.bundled import workshop_sentences
    from mlm_core.losses import token_counts

    return token_counts(_tokenizer, workshop_sentences(), vocab_size)


def shared_masking_config():
    """The masking rule the learner set (Masking page or shared link); BERT's defaults if it cannot be used."""
    from mlm_core.lessons import share_state as classroom

    try:
        return classroom.masking_config(sync_query_params())
    except MLMLabError:
        return classroom.masking_config(classroom.defaults())


def model_or_stop(settings: Settings):
    """(model, tokenizer) of the sidebar's model, or a clear message and the end of this page run."""
    try:
        return cached_model(settings.model_name)
    except Exception as exc:  # a bad id, no internet, a corrupt checkpoint: say so, never a traceback
        show_error(exc)
        st.stop()


def tokenizer_or_stop(settings: Settings):
    """The sidebar model's tokenizer, or a clear message and the end of this page run."""
    try:
        return cached_tokenizer(settings.model_name)
    except Exception as exc:
        show_error(exc)
        st.stop()


BATCH_SOURCES = ("Workshop corpus", "Your text")


def batch_sentences_controls(prefix: str, seed: int, *, n: int = 8, max_chars: int = 4_000) -> list[str]:
    """The batch a lesson page computes on: n workshop sentences chosen by the seed, or the learner's own."""
    from mlm_core.bundled import workshop_sentences
    from mlm_core.data import clip_text, split_sentences
    from mlm_core.lessons.loss_lab import pick_sentences

    source = st.radio("Batch", BATCH_SOURCES, horizontal=True, key=f"{prefix}_source",
                      help=f"The workshop batch is {n} consecutive corpus sentences, chosen by the seed.")
    if source == BATCH_SOURCES[0]:
        return pick_sentences(workshop_sentences(), n, seed)
    st.session_state.setdefault(f"{prefix}_text", st.session_state.get(KEYS.sentence) or "")
    text, clipped = clip_text(st.text_area("Your sentences (one batch row per sentence)", key=f"{prefix}_text",
                                           height=100), max_chars)
    if clipped:
        st.info(f"Only the first {max_chars:,} characters are used.")
    return split_sentences(text)[:n]


_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$&])")


def markdown_text(text: str) -> str:
    """Token or user text for ``st.markdown``, shown as typed: markdown punctuation backslash-escaped.

    ``st.markdown`` without ``unsafe_allow_html`` never renders HTML, so ``html.escape`` here would show
    ``&lt;`` for ``<`` (the escape is applied twice).
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", str(text))


def inline_code(text: str) -> str:
    """``text`` as a markdown code span, whatever backticks it holds (code spans show text verbatim)."""
    text = str(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def show_error(exc: BaseException) -> None:
    """A clear message for a problem we can explain, a short generic one for anything else."""
    if isinstance(exc, MLMLabError):
        st.error(str(exc))
    else:
        st.error(f"Something went wrong: {type(exc).__name__}: {exc}")


STALE_MEASUREMENT = "The model, sizes or seed changed since this was measured: press the button again."


def on_demand(label: str, key: str, spinner: str, inputs, compute):
    """A button that runs ``compute()`` and keeps its result in the session with the ``inputs`` it
    was computed for; returns the kept result (or None), with a note when the inputs have changed
    since. A problem we can explain is shown and the last result stays."""
    state = st.session_state
    if st.button(label, key=f"{key}_run"):
        with st.spinner(spinner):
            try:
                state[key] = (inputs, compute())
            except MLMLabError as exc:
                show_error(exc)
    kept = state.get(key)
    if kept is None:
        return None
    measured_for, result = kept
    if measured_for != inputs:
        st.caption(STALE_MEASUREMENT)
    return result


def chip_html(token: str, decision: str = "NOT_SELECTED", original: str | None = None,
              highlight: bool = False, title: str | None = None) -> str:
    """One token as an escaped HTML chip; ``##`` pieces are drawn joined to the chip before them."""
    background, border, label = DECISION_STYLE.get(decision, DECISION_STYLE["NOT_SELECTED"])
    piece = token.startswith("##") and len(token) > 2
    text = token[2:] if piece else token
    margin = "margin-left:-3px;border-left:2px dotted #868e96;border-top-left-radius:0;border-bottom-left-radius:0;" if piece else "margin-left:6px;"
    outline = "box-shadow:0 0 0 3px #1c7ed6;" if highlight else ""
    sub = f'<div class="mlm-sub" style="font-size:11px;color:#495057">was: {html.escape(original)}</div>' if original else ""
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return (
        f'<span class="mlm-chip-wrap" style="display:inline-block;vertical-align:top;margin-bottom:6px;{margin}"{tip}>'
        f'<span class="mlm-chip" style="display:inline-block;padding:3px 7px;border-radius:6px;'
        f'font-family:monospace;font-size:15px;background:{background};border:1px solid {border};{outline}">'
        f'{"##" if piece else ""}{html.escape(text)}</span>{sub}</span>'
    )


def token_chips(tokens: list[str], decisions: list[str] | None = None, originals: list[str | None] | None = None,
                highlight: int | None = None, titles: list[str] | None = None) -> None:
    """Render tokens as chips coloured by decision (escaped: token text is never trusted as HTML)."""
    parts = []
    for i, token in enumerate(tokens):
        decision = decisions[i] if decisions else "NOT_SELECTED"
        original = originals[i] if originals else None
        parts.append(chip_html(token, decision, original, highlight == i, titles[i] if titles else None))
    st.markdown(f'<div class="mlm-chips" style="line-height:2.2">{"".join(parts)}</div>', unsafe_allow_html=True)


CUSTOM_SENTENCE = "✏️ your own sentence"  # the example picker's choice when the sentence is none of its examples


def example_picker(examples: list[str], *, key: str, sentence_key: str, container=None) -> None:
    """The "Pick an example" select box, in step with the sentence it fills (``st.session_state[sentence_key]``).

    It shows the example the sentence is (also when a shared link brought the sentence), or
    "your own sentence" when it is none of them; picking an example puts it into the sentence.
    """
    state = st.session_state
    text = (state.get(sentence_key) or "").strip()
    state[key] = next((e for e in examples if e == text), CUSTOM_SENTENCE)

    def use_example():
        if state[key] != CUSTOM_SENTENCE:
            state[sentence_key] = state[key]

    (container or st).selectbox("Pick an example", [*examples, CUSTOM_SENTENCE], key=key, on_change=use_example)


def decision_legend() -> None:
    """The colour key of the chips."""
    items = [chip_html(label, name) for name, (_, _, label) in DECISION_STYLE.items()]
    st.markdown(f'<div class="mlm-chips">{"".join(items)}</div>', unsafe_allow_html=True)


# --------------------------------------------------------------------------- classroom: links, presenter, export
# A shared link holds the values below (mlm_core.lessons.share_state.FIELDS); each lives in the session under
# this key. Widget values are lost when their page is left, so the link's copy ("canonical values")
# also restores them when their page comes back.
LINK_KEYS = {
    "sentence": KEYS.sentence,
    "seed": KEYS.seed,
    "model": KEYS.model,
    "strategy": "masking_strategy",
    "p": "masking_p",
    "mask": "masking_mask",
    "random": "masking_random",
    "span_replace": "masking_span_replacement",
    "step": "masking_step",
    "quiz": "quiz_kind",
    "round": "quiz_round",
    "view": "inside_view",
}
_LINK = "_mlm_link"  # session entry: {"values", "read", "fields", "keys"}
_RUN = threading.local()  # per script run: the sidebar slot of the share box


def _default_model() -> str:
    return os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL)


def _link_state() -> dict:
    from mlm_core.lessons import share_state as classroom

    state = st.session_state
    if _LINK not in state:
        state[_LINK] = {"values": classroom.defaults(), "read": set(),
                        "fields": {f.name: f for f in classroom.FIELDS}, "keys": dict(LINK_KEYS)}
    return state[_LINK]


def _query_dict() -> dict[str, list[str]]:
    try:
        return {name: st.query_params.get_all(name) for name in st.query_params}
    except Exception:  # no script run context (bare mode): no link to read
        return {}


def _apply(name: str, key: str, value) -> None:
    """Put a link's value into the session, where the page's widget will pick it up."""
    state = st.session_state
    if name == "model":
        state[KEYS.model] = value
        state[KEYS.custom_model] = ""
    elif isinstance(value, tuple):
        state[key] = list(value)
    else:
        state[key] = value


STICKY_KEYS = (KEYS.presenter,)  # kept across page switches too, but never put in a link


def _restore_left_widgets() -> None:
    """Keep the shared values across page switches (the sidebar's included), and give back lost ones.

    A page switch draws every widget anew, and Streamlit gives a widget on the new page its default
    instead of the value the same key had on the last page. Setting each shared key to its own value
    through the Session State API, before any widget is drawn, makes the new widget start from it
    (Streamlit's documented work-around). A value already dropped comes back from the link's copy.
    """
    link = st.session_state.get(_LINK)
    if link is None:  # the session's first run: nothing to keep yet
        return
    state = st.session_state
    for key in [*link["keys"].values(), KEYS.custom_model, *STICKY_KEYS]:
        if key in state:
            state[key] = state[key]
    for name, key in link["keys"].items():
        value = link["values"].get(name)
        if key in state or value is None or value == link["fields"][name].default:
            continue
        _apply(name, key, value)
    for key, value in link.get("sticky", {}).items():
        if key not in state:
            state[key] = value


def _read_and_sync_link(page_fields=()) -> tuple[str, ...]:
    """Read the link once per field per session, keep the canonical values current, write them back."""
    from mlm_core.lessons import share_state as classroom

    link = _link_state()
    for f, key in page_fields:
        link["fields"][f.name] = f
        link["keys"][f.name] = key
        link["values"].setdefault(f.name, f.default)
    fields = list(link["fields"].values())
    problems: tuple[str, ...] = ()
    unread = [f for f in fields if f.name not in link["read"]]
    if unread:
        decoded = classroom.decode(_query_dict(), unread, base=link["values"])
        refused = _refused_link_model(decoded)  # a link never makes the server load a model it does not offer
        for name in decoded.given:
            if not (name == "model" and refused):
                _apply(name, link["keys"][name], decoded.values[name])
        link["values"].update({f.name: decoded.values[f.name] for f in unread if not (f.name == "model" and refused)})
        link["read"].update(f.name for f in unread)
        problems = decoded.problems + ((refused,) if refused else ())
    state = st.session_state
    current = {name: state[key] for name, key in link["keys"].items() if name != "model" and key in state}
    values = classroom.from_values(current, fields, base=link["values"])
    model = (state.get(KEYS.custom_model) or "").strip() or state.get(KEYS.model) or _default_model()
    try:
        values["model"] = None if model == _default_model() else link["fields"]["model"].coerce(model)
    except ValueError:  # an absolute local folder: it cannot travel in a link
        values["model"] = None
    link["values"] = values
    link["sticky"] = {key: state[key] for key in STICKY_KEYS if key in state}
    for name, key in link["keys"].items():  # a widget whose page was left lost its value: restore it
        value = values.get(name)
        if name != "model" and key not in state and value is not None and value != link["fields"][name].default:
            _apply(name, key, value)  # (a default needs no restoring: the page's widget starts there)
    _write_query_params(classroom.encode(values, fields), fields)
    return problems


def _refused_link_model(decoded) -> str | None:
    """Why the model a link names may not be loaded, or None when it may (or the link names none)."""
    if "model" not in decoded.given:
        return None
    try:
        check_model_access(decoded.values.get("model"), from_link=True)
    except MLMLabError as exc:
        return str(exc)
    return None


def _write_query_params(params: dict[str, str], fields) -> None:
    """Set our parameters in the URL (only when they changed), leaving any others alone."""
    private = getattr(_RUN, "private", frozenset())
    try:
        query = st.query_params
        for f in fields:
            want = None if f.name in private else params.get(f.name)
            have = query.get_all(f.name) if f.name in query else []
            if want is None and have:
                del query[f.name]
            elif want is not None and have != [want]:
                query[f.name] = want
    except Exception:  # a parameter bound to a widget, or no script run context: the link stays as it is
        pass


def sync_query_params(page_fields=()) -> dict:
    """The shared values (sentence, seed, strategy, p, mask, random, model, step, quiz, round, view), kept in the URL.

    ``page_setup`` calls it, so every page reads a shared link on the session's first run (bad
    values fall back to the defaults with a notice) and writes the current state back to
    ``st.query_params`` on every run. Call it again at the end of a page that changes shared state
    in its body (not in a callback), so the URL is current. ``page_fields``: extra
    ``(mlm_core.lessons.share_state.Field, session_key)`` pairs a page wants in its links.
    Returns a copy of the values (``mlm_core.lessons.share_state.masking_config(values)`` gives the rule).
    """
    problems = _read_and_sync_link(page_fields)
    if problems:
        _link_notice(problems)
    return dict(_link_state()["values"])


def _link_notice(problems) -> None:
    text = "This link had values MLM Lab cannot use, so defaults are shown instead:\n" + "\n".join(
        f"- {p}" for p in problems)
    try:
        st.toast("Some link values were ignored: see the note at the top of the page.", icon="⚠️")
    except Exception:
        pass
    st.info(text, icon="🔗")


def _base_url() -> str:
    """This page's address in the user's browser, without the query ('' when unknown)."""
    try:
        url = st.context.url
    except Exception:
        url = None
    if url:
        return url.split("?")[0]
    try:
        host = st.context.headers.get("Host")
    except Exception:
        host = None
    if host and all(c.isalnum() or c in ".-:[]" for c in host):
        return f"http://{host}/"
    return ""


def share_url() -> str:
    """The link that reproduces the current view: this page's URL with the shared values as its query."""
    from urllib.parse import urlencode

    from mlm_core.lessons import share_state as classroom

    link = _link_state()
    private = getattr(_RUN, "private", frozenset())
    query = urlencode({name: value for name, value in classroom.encode(
        link["values"], list(link["fields"].values())).items() if name not in private})
    base = _base_url()
    return f"{base}?{query}" if query else (base or "?")


def _render_share(url: str) -> None:
    with st.expander("🔗 Share this view", expanded=False):
        st.caption("Send this link to the class: it opens this page with the same sentence, seed, masking "
                   "rule and step. Copy it with the button at the right of the box.")
        st.code(url, language=None, wrap_lines=True)
        if "://localhost" in url or "://127.0.0.1" in url:
            st.caption("This link works on this machine only: by default MLM Lab listens on 127.0.0.1. For a "
                       "class, start it in classroom mode (`streamlit run app.py --server.address 0.0.0.0`, "
                       "see the README's Classroom section) and share the Network URL Streamlit prints.")


def _share_box() -> None:
    slot = st.sidebar.empty()
    _RUN.slot = slot
    with slot.container():
        _render_share(share_url())


def share_link() -> str:
    """Bring the link up to date at the end of a page and show it (sidebar "Share this view"); returns it.

    Call it last on pages that change shared state in their body (the Masking page's step buttons),
    so the URL and the copy box show the final state of the run.
    """
    sync_query_params()
    url = share_url()
    slot = getattr(_RUN, "slot", None)
    try:
        if slot is None:
            raise RuntimeError("no sidebar slot this run")
        with slot.container():
            _render_share(url)
    except Exception:  # inside a fragment, or page_setup was not called: show it here
        _render_share(url)
    return url


def chart_height(default: int = 450) -> int:
    """A chart's height: ``default``, or at least 600 px in presenter view. Use as ``fig.update_layout(height=...)``."""
    if st.session_state.get(KEYS.presenter):
        return max(int(default), PRESENTER_CHART_HEIGHT)
    return int(default)


PRESENTER_CHART_FONT_PX = 20  # ticks, axis titles, legends and bar labels in presenter view
PRESENTER_CHART_TITLE_PX = 26


PRESENTER_TITLE_CHARS = 55  # a chart title this long fits one line at PRESENTER_CHART_TITLE_PX on a 1280-px projector


def wrap_title(text: str, width: int = PRESENTER_TITLE_CHARS) -> str:
    """``text`` broken into lines of at most ``width`` visible characters (HTML tags and entities not counted).

    Plotly never wraps a title: at presenter size a long one runs off the chart's right edge.

    >>> wrap_title("Where position 16 looks: the token each head attends to most (click a cell)", 40)
    'Where position 16 looks: the token each<br>head attends to most (click a cell)'
    >>> wrap_title("Short <b>title</b>")
    'Short <b>title</b>'
    """
    lines, line, used = [], [], 0
    for word in str(text).split(" "):
        visible = len(html.unescape(re.sub(r"<[^>]*>", "", word)))
        if line and used + 1 + visible > width:
            lines.append(" ".join(line))
            line, used = [], 0
        used += visible + (1 if line else 0)
        line.append(word)
    lines.append(" ".join(line))
    return "<br>".join(lines)


def room_figure(fig):
    """``fig`` with fonts a room can read in presenter view (every tick, label and title) and at least
    ``PRESENTER_CHART_HEIGHT`` tall, else as it is.

    ``st.plotly_chart(ui.room_figure(fig), ...)``: the figure builders stay free of UI settings. A long
    title is wrapped onto two lines (with room above the plot for it) instead of running off the chart.
    """
    if st.session_state.get(KEYS.presenter):
        size = PRESENTER_CHART_FONT_PX
        title = fig.layout.title.text
        if title and "<br>" not in title and len(title) > PRESENTER_TITLE_CHARS:
            wrapped = wrap_title(title)
            lines = wrapped.count("<br>") + 1
            if lines > 1:
                top = fig.layout.margin.t if fig.layout.margin.t is not None else 80
                fig.update_layout(title=dict(text=wrapped, yref="container", y=1, yanchor="top",
                                             pad=dict(t=PRESENTER_CHART_TITLE_PX + 14)),  # the first line's height
                                  margin=dict(t=top + (lines - 1) * (PRESENTER_CHART_TITLE_PX + 8) + 12))
        # the workshop guide promises charts at least 600 px tall in presenter view: the Loss page's were 320-380
        fig.update_layout(height=max(int(fig.layout.height or 450), PRESENTER_CHART_HEIGHT))
        fig.update_layout(font=dict(size=size), title=dict(font=dict(size=PRESENTER_CHART_TITLE_PX)),
                          legend=dict(font=dict(size=size)), hoverlabel=dict(font=dict(size=size)))
        fig.update_xaxes(automargin=True, title_font=dict(size=size), tickfont=dict(size=size))
        fig.update_yaxes(automargin=True, title_font=dict(size=size), tickfont=dict(size=size))
    return fig


def plotly_config(filename: str) -> dict:
    """``st.plotly_chart(fig, config=ui.plotly_config("masking_counts"))``: the camera button saves a PNG.

    The PNG is made by Plotly in the browser (no server-side image export), at twice the screen
    resolution so it stays sharp on a slide.
    """
    from mlm_core.lessons.export import safe_name

    return {
        "displaylogo": False,
        "toImageButtonOptions": {"format": "png", "filename": safe_name(filename, "chart"), "scale": 2},
        "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    }


def table(data, *, key: str | None = None, column_config: dict | None = None, percent: tuple[str, ...] = (),
          static: bool = False) -> None:
    """A table a learner reads: sortable ``st.dataframe`` normally; a static ``st.table`` in presenter view or with ``static``.

    ``st.dataframe`` draws on a canvas: its font stays small whatever the presenter CSS says, and a
    column narrower than its values cuts them ("garden 0.4…"). ``st.table`` is HTML: its cells wrap,
    so every value shows in full, and the presenter CSS makes it large. ``percent``: columns shown as
    percentages there (what ``column_config``'s ``format="percent"`` does in the dataframe).
    """
    if static or st.session_state.get(KEYS.presenter):
        st.table(readable_frame(data, percent), hide_index=True)
        return
    st.dataframe(data, hide_index=True, width="stretch", key=key, column_config=column_config)


def readable_frame(data, percent: tuple[str, ...] = ()) -> pd.DataFrame:
    """``data`` as a frame of text for a static table: floats to 4 significant digits, ``percent`` columns as "45%",
    a missing value (None, NaN) as "—" (what a dataframe leaves blank).

    >>> readable_frame([{"loss": 3.3185198307037354, "top-1": 0.4512, "n": 30522}], percent=("top-1",)).iloc[0].tolist()
    ['3.319', '45.1%', '30,522']
    >>> readable_frame([{"loss": 2.5, "top-1": 0.25}, {"loss": None, "top-1": None}], percent=("top-1",))["loss"].tolist()
    ['2.5', '—']
    """
    from mlm_core.formatting import readable

    frame = pd.DataFrame(data).reset_index(drop=True)
    for column in frame.columns:
        missing = frame[column].isna().tolist()
        if column in percent:
            texts = [v if not isinstance(v, (int, float)) else f"{100 * v:.3g}%" for v in frame[column]]
        elif frame[column].dtype.kind in "fiu":
            texts = [readable(v.item() if hasattr(v, "item") else v) for v in frame[column]]
        else:
            texts = list(frame[column])
        frame[column] = ["—" if gone else text for gone, text in zip(missing, texts)]
    return frame


def advanced(name: str):
    """A container for advanced controls, hidden in presenter view: ``with ui.advanced("masking_rates"): ...``."""
    return st.container(key=f"advanced_{name}")


# --------------------------------------------------------------------------- models trained in this session
BASE_CHOICE = "base"  # the sidebar's model, in the trained-model picker


def trained_models():
    """This session's trained models (``mlm_core.session_models.TrainedModels``), a finished Training run's included.

    The store lives in the session, so the copies go with it; the shared cached models are never replaced.
    """
    from mlm_core.session_models import TrainedModels

    state = st.session_state
    store = state.get(KEYS.trained_models)
    if store is None:
        store = state[KEYS.trained_models] = TrainedModels()
    run = state.get(KEYS.training_run)
    if run is not None and getattr(run, "keep_trained", False):
        for note in store.add_run(run):  # takes the copies once the run has finished, then nothing
            st.toast(note, icon="🧠")
    return store


def trained_model_choice(model, tokenizer):
    """The page's model: the sidebar's, or one trained in this session. Returns ``(model, tokenizer, entry)``.

    The picker shows only when the session has trained models; ``entry`` is the chosen
    ``TrainedModel`` or None. A share link carries the choice (``trained=``); in another session no
    such model exists, so the page falls back to the sidebar's model with a notice.
    """
    from mlm_core.lessons.share_state import Field

    state = st.session_state
    field = Field("trained", "text", default=BASE_CHOICE, max_chars=40, label="trained model")
    state.setdefault(KEYS.trained_choice, BASE_CHOICE)
    sync_query_params([(field, KEYS.trained_choice)])  # reads a link's trained= once per session
    entries = {e.key: e for e in trained_models().entries()}
    if state.get(KEYS.trained_choice, BASE_CHOICE) not in (BASE_CHOICE, *entries):
        st.info("This view names a model trained in another session, or one this session no longer keeps. "
                "Trained models live only in the session that trained them, so the sidebar's model is shown "
                "instead.", icon="🔗")
        state[KEYS.trained_choice] = BASE_CHOICE
        sync_query_params([(field, KEYS.trained_choice)])
    if not entries:
        return model, tokenizer, None
    labels = {BASE_CHOICE: f"{(getattr(model, 'mlmlab_info', None) or {}).get('label', 'The sidebar model')} (sidebar)",
              **{key: f"Trained: {e.label}" for key, e in entries.items()}}
    st.selectbox("Model on this page", list(labels), key=KEYS.trained_choice, format_func=labels.get,
                 help="Models you trained on the Training page stay in your session (the last few), beside "
                 "the sidebar's model. They are yours only: a shared link shows others the sidebar's model.")
    entry = entries.get(state[KEYS.trained_choice])
    return (model, tokenizer, None) if entry is None else (entry.model, entry.tokenizer, entry)


def value_chips(tokens: list[str], values: list[float | None], *, highlight: int | None = None,
                titles: list[str] | None = None) -> None:
    """Tokens as escaped chips shaded by a value: green for positive, red for negative, grey where None.

    Shades are scaled to the largest |value| of the row.
    """
    finite = [abs(v) for v in values if v is not None and v == v]
    top = max(finite) if finite and max(finite) > 0 else 1.0
    parts = []
    for i, (token, value) in enumerate(zip(tokens, values)):
        if value is None or value != value:
            background = "#f1f3f5"
        else:
            share = min(1.0, abs(value) / top)
            rgb = "47,158,68" if value >= 0 else "224,49,49"
            background = f"rgba({rgb},{0.08 + 0.6 * share:.2f})"
        outline = "box-shadow:0 0 0 3px #1c7ed6;" if highlight == i else ""
        tip = f' title="{html.escape(titles[i], quote=True)}"' if titles else ""
        parts.append(
            f'<span class="mlm-chip-wrap" style="display:inline-block;margin:0 0 6px 6px"{tip}>'
            f'<span class="mlm-chip" style="display:inline-block;padding:3px 7px;border-radius:6px;font-family:monospace;'
            f'font-size:15px;background:{background};border:1px solid #ced4da;{outline}">{html.escape(token)}</span></span>')
    st.markdown(f'<div class="mlm-chips" style="line-height:2.2">{"".join(parts)}</div>', unsafe_allow_html=True)
