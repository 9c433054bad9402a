"""Who is connected: a local browser or a student's, the client behind a run, whether the session is alive."""

from __future__ import annotations

import streamlit as st
from streamlit import runtime
from streamlit.runtime import scriptrunner  # scriptrunner.get_script_run_ctx: a test may stand in for it


def session_is_local() -> bool:
    """The browser runs on the server's own machine (Streamlit gives no IP address for localhost)."""
    try:
        ip = st.context.ip_address  # None for 127.0.0.1 and ::1 (the TCP peer, not a header)
    except Exception:  # no script run context (bare mode): nobody else is connected
        return True
    return not isinstance(ip, str)  # AppTest has no client address at all


def client_id() -> str:
    """Who is asking, for "one run per client": the IP address, or the session for local connections
    (st.context.ip_address is None on localhost, and a teacher's tabs are not one student)."""
    ip = st.context.ip_address
    if isinstance(ip, str) and ip:  # AppTest's stand-in runtime answers with a mock: not an address
        return f"ip:{ip}"
    ctx = scriptrunner.get_script_run_ctx()
    return f"session:{ctx.session_id if ctx else 'unknown'}"


def session_alive_check():
    """A thread-safe "is this session still connected (on any page)?" for mlm_core.jobs, or None
    where there is no server runtime (bare mode), so the run falls back to being polled."""
    ctx = scriptrunner.get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    instance, session_id = runtime.get_instance(), ctx.session_id
    return lambda: instance.is_active_session(session_id)
