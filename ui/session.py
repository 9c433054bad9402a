"""Who is connected: a local browser or a student's, the client behind a run, whether the session is alive.

"Local" (the teacher, on the server's own machine) is decided from the connection's TCP peer as
Streamlit's server saw it, and it fails closed: a session without a known peer (its connection
just dropped, or Streamlit has no client for it) is a student. ``MLMLAB_TRUST_LOCALHOST=0`` makes
loopback connections students too, for servers behind a relay on the same machine (``ssh -L``, a
reverse proxy that does not pass the client's address): there every student arrives as 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import os
from unittest import mock

from streamlit import runtime
from streamlit.runtime import scriptrunner  # scriptrunner.get_script_run_ctx: a test may stand in for it
from streamlit.runtime.app_session import AppSession

TRUST_LOCALHOST_ENV = "MLMLAB_TRUST_LOCALHOST"


def _is_apptest() -> bool:
    """Streamlit's AppTest runs pages on a stand-in runtime (a ``unittest.mock`` object): the test is the
    server's own machine. A real server's runtime is never a mock."""
    try:
        return runtime.exists() and isinstance(runtime.get_instance(), mock.Mock)
    except Exception:
        return False


def peer_address() -> str | None:
    """The TCP peer of this session's connection as the server saw it ('127.0.0.1' on this machine), or
    None when there is none: no script run, no client (a connection that just dropped), AppTest.

    Streamlit's ``st.context.ip_address`` answers None both for localhost and for "no client", so it
    cannot fail closed; this reads the same field Streamlit's own loopback check reads
    (``runtime.get_instance().get_client(session_id).client_context.remote_ip``).
    """
    ctx = scriptrunner.get_script_run_ctx()
    if ctx is None or not runtime.exists() or _is_apptest():
        return None
    try:
        client = runtime.get_instance().get_client(ctx.session_id)
        remote = client.client_context.remote_ip if client is not None and client.client_context is not None else None
    except Exception:
        return None
    return remote if isinstance(remote, str) and remote else None


def _loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def localhost_trusted() -> bool:
    """False when the server was started with ``MLMLAB_TRUST_LOCALHOST=0`` (behind a same-machine relay)."""
    return os.environ.get(TRUST_LOCALHOST_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def session_is_local() -> bool:
    """The browser runs on the server's own machine: its connection comes from a loopback address.

    Fails closed: no known peer (a dropped connection) is a student. Outside a server (bare mode, a
    script) and in AppTest nobody else is connected, so that counts as local.
    """
    if scriptrunner.get_script_run_ctx() is None or not runtime.exists() or _is_apptest():
        return True
    return localhost_trusted() and _loopback(peer_address())


def client_id() -> str:
    """Who is asking, for "one run per client": the peer's address, or the session for local connections
    (a teacher's tabs are not one student). A session with no known peer is one unknown student
    ("ip:unknown", shared by all such sessions): it never gets a client of its own."""
    ctx = scriptrunner.get_script_run_ctx()
    if session_is_local():
        return f"session:{ctx.session_id if ctx else 'unknown'}"
    peer = peer_address()
    return f"ip:{peer or 'unknown'}"


def guess_client() -> str:
    """Who is guessing the teacher key: the peer's address, for local tabs too ("ip:127.0.0.1"), so that
    tabs, and students behind one relay, share one allowance of guesses."""
    if _is_apptest():
        ctx = scriptrunner.get_script_run_ctx()
        return f"session:{ctx.session_id if ctx else 'unknown'}"
    return f"ip:{peer_address() or 'unknown'}"


def session_alive_check():
    """A thread-safe "is this session still connected (on any page)?" for mlm_core.jobs, or None
    where there is no server runtime (bare mode), so the run falls back to being polled."""
    ctx = scriptrunner.get_script_run_ctx()
    if ctx is None or not runtime.exists():
        return None
    instance, session_id = runtime.get_instance(), ctx.session_id
    return lambda: instance.is_active_session(session_id)


def guard_cache_clearing() -> None:
    """Let only the server's own machine clear the server's caches.

    Streamlit clears every cache of the server (every session's models and tokenizers) for any browser that sends
    its "clear cache" message (the toolbar's hidden menu, or one line in the browser's console: issue 44's attack
    review). A student's request now clears only that student's own session state; the server's machine keeps
    Streamlit's behaviour. Patched once per process (``AppSession._handle_clear_cache_request``, streamlit 1.67).
    """
    original = AppSession._handle_clear_cache_request
    if getattr(original, "_mlmlab_guarded", False):
        return

    def guarded(app_session) -> None:
        try:
            client = runtime.get_instance().get_client(app_session.id)
            remote = client.client_context.remote_ip if client is not None and client.client_context else None
        except Exception:
            remote = None
        if localhost_trusted() and _loopback(remote):
            original(app_session)
        else:
            app_session._session_state.clear()  # their own state only: nothing the class shares

    guarded._mlmlab_guarded = True
    AppSession._handle_clear_cache_request = guarded
