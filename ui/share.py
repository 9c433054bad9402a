"""Share links: the shared values (sentence, seed, masking rule, step, model...) kept in the URL.

A teacher's link opens the same lesson for the class: ``page_setup`` reads a link once per field per
session (bad values fall back to the defaults with a notice), keeps the session's values current and
writes them back to ``st.query_params`` on every run; the sidebar's "Share this view" box shows the
link. Widget values are lost when their page is left, so the link's copy also restores them.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import urlencode

import streamlit as st

from mlm_core.errors import MLMLabError
from ui import share_state
from ui.chips import markdown_text
from ui.loaders import check_model_access
from ui.settings import DEFAULT_MODEL, KEYS, STICKY_KEYS

# A shared link holds the values below (ui.share_state.FIELDS); each lives in the session under
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
    "source": "pred_source",
}
_LINK = "_mlm_link"  # session entry: {"values", "read", "fields", "keys"}
_RUN = threading.local()  # per script run: the page's link fields and shown values, the sidebar slot of the share box


def begin_page(link: tuple[str, ...] | None = None, shown: dict[str, str] | None = None) -> None:
    """Start a page's run (``page_setup``): its address and share link hold the fields ``link`` names
    (``ui.share_state.PAGE_LINKS``; None: every field), and nothing else.

    ``shown``: {field: session key} for a value this page shows from its own widget instead of the
    shared one (the Predictions page's own sentence): its link carries what the page shows, while the
    shared value every other page uses stays as it is.
    """
    _RUN.link = None if link is None else frozenset(link)
    _RUN.shown = dict(shown or {})


def _in_link(name: str) -> bool:
    link = getattr(_RUN, "link", None)
    return link is None or name in link


def _page_values(values: dict) -> dict:
    """The values this page's link shows: the shared ones, with the page's own (``begin_page(shown=...)``)."""
    shown = getattr(_RUN, "shown", {})
    if not shown:
        return values
    state = st.session_state
    fields = _link_state()["fields"]
    out = dict(values)
    for name, key in shown.items():
        if name in fields and key in state:
            try:
                out[name] = fields[name].coerce(state[key])
            except (ValueError, TypeError):  # an empty box: the shared value stands
                pass
    return out


def _default_model() -> str:
    return os.environ.get("MLMLAB_MODEL", DEFAULT_MODEL)


def _link_state() -> dict:
    state = st.session_state
    if _LINK not in state:
        state[_LINK] = {"values": share_state.defaults(), "read": set(),
                        "fields": {f.name: f for f in share_state.FIELDS}, "keys": dict(LINK_KEYS)}
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


def restore_left_widgets() -> None:
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


def read_and_sync_link(page_fields=()) -> tuple[str, ...]:
    """Read the link once per field per session, keep the canonical values current, write them back."""
    link = _link_state()
    for f, key in page_fields:
        link["fields"][f.name] = f
        link["keys"][f.name] = key
        link["values"].setdefault(f.name, f.default)
    fields = list(link["fields"].values())
    problems: tuple[str, ...] = ()
    unread = [f for f in fields if f.name not in link["read"]]
    if unread:
        decoded = share_state.decode(_query_dict(), unread, base=link["values"])
        refused = _refused_link_model(decoded)  # a link never makes the server load a model it does not offer
        for name in decoded.given:
            if not (name == "model" and refused):
                _apply(name, link["keys"][name], decoded.values[name])
        link["values"].update({f.name: decoded.values[f.name] for f in unread if not (f.name == "model" and refused)})
        link["read"].update(f.name for f in unread)
        problems = decoded.problems + ((refused,) if refused else ())
    state = st.session_state
    current = {name: state[key] for name, key in link["keys"].items() if name != "model" and key in state}
    values = share_state.from_values(current, fields, base=link["values"])
    model = (state.get(KEYS.custom_model) or "").strip() or state.get(KEYS.model) or _default_model()
    failed = state.get(KEYS.model_failed)
    if failed and failed[0] == model:  # the pages keep using the last model that loaded, and so does the link
        model = state.get(KEYS.model_in_use) or _default_model()
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
    _write_query_params(share_state.encode(_page_values(values), fields), fields)
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
    """Set this page's parameters in the URL (only when they changed) and drop the other pages' ones
    (and retired ones, such as a trained model's id), leaving any unknown others alone."""
    try:
        query = st.query_params
        for f in fields:
            want = params.get(f.name) if _in_link(f.name) else None
            have = query.get_all(f.name) if f.name in query else []
            if want is None and have:
                del query[f.name]
            elif want is not None and have != [want]:
                query[f.name] = want
        for name in share_state.RETIRED:
            if name in query:
                del query[name]
    except Exception:  # a parameter bound to a widget, or no script run context: the link stays as it is
        pass


def sync_query_params(page_fields=()) -> dict:
    """The shared values (sentence, seed, strategy, p, mask, random, model, step, quiz, round, view), kept in the URL.

    ``page_setup`` calls it, so every page reads a shared link on the session's first run (bad
    values fall back to the defaults with a notice) and writes the current state back to
    ``st.query_params`` on every run. Call it again at the end of a page that changes shared state
    in its body (not in a callback), so the URL is current. ``page_fields``: extra
    ``(ui.share_state.Field, session_key)`` pairs a page wants in its links.
    Returns a copy of the values (``ui.share_state.masking_config(values)`` gives the rule).
    """
    problems = read_and_sync_link(page_fields)
    if problems:
        link_notice(problems)
    return dict(_link_state()["values"])


def shared_masking_config():
    """The masking rule the learner set (Masking page or shared link); BERT's defaults if it cannot be used."""
    try:
        return share_state.masking_config(sync_query_params())
    except MLMLabError:
        return share_state.masking_config(share_state.defaults())


def link_notice(problems) -> None:
    """The link's values MLM Lab could not use, one per line: as text (a value like ``![](http://…)`` is shown,
    never fetched or linked)."""
    text = "This link had values MLM Lab cannot use, so defaults are shown instead:\n" + "\n".join(
        f"- {markdown_text(p)}" for p in problems)
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
    link = _link_state()
    query = urlencode({name: value for name, value in share_state.encode(
        _page_values(link["values"]), list(link["fields"].values())).items() if _in_link(name)})
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


def share_box() -> None:
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
