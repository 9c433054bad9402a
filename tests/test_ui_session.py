"""ui.session: who is asking (one run per client) and whether a session is still connected."""

import types
from unittest import mock

from streamlit import runtime
from streamlit.runtime import scriptrunner

import ui


class _Server:
    """A stand-in for Streamlit's runtime that knows each session's TCP peer (None: no client, a dropped connection)."""

    def __init__(self):
        self.peers = {}

    def get_client(self, session_id):
        if session_id not in self.peers:
            return None
        return types.SimpleNamespace(client_context=types.SimpleNamespace(remote_ip=self.peers[session_id]))


def _serve(monkeypatch, tab):
    server = _Server()
    monkeypatch.setattr(runtime, "exists", lambda: True)
    monkeypatch.setattr(runtime, "get_instance", lambda: server)
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda: types.SimpleNamespace(session_id=tab[0]))
    return server


def test_one_run_per_client_counts_local_tabs_apart_and_an_ip_once(monkeypatch):
    """Issue 16 item 7: on localhost a teacher's own tabs are told apart by their session; students on other
    machines are one client per address, whatever their tabs."""
    tab = ["tab-1"]
    server = _serve(monkeypatch, tab)
    server.peers.update({"tab-1": "127.0.0.1", "tab-2": "::1"})
    first = ui.client_id()
    tab[0] = "tab-2"
    assert (first, ui.client_id()) == ("session:tab-1", "session:tab-2")
    assert ui.session.session_is_local()
    server.peers.update({"tab-1": "10.0.0.7", "tab-2": "10.0.0.7"})
    assert ui.client_id() == "ip:10.0.0.7"
    tab[0] = "tab-1"
    assert ui.client_id() == "ip:10.0.0.7"  # five tabs of one student are one client
    assert not ui.session.session_is_local()


def test_a_session_without_an_address_is_a_student(monkeypatch):
    """Issue 29: Streamlit reports no address for a session whose connection just dropped; that session was
    treated as the server's own machine (folders, any hub id). It fails closed now: no address, a student,
    and all such sessions share one client (they get no run each)."""
    tab = ["gone"]
    server = _serve(monkeypatch, tab)
    assert server.get_client("gone") is None  # no client at all
    assert not ui.session.session_is_local()
    assert ui.client_id() == "ip:unknown"
    server.peers["gone"] = None  # a client without a peer address
    assert not ui.session.session_is_local()
    server.peers["gone"] = "not an address"
    assert not ui.session.session_is_local()


def test_a_relay_on_the_server_can_be_told_not_to_make_everyone_local(monkeypatch):
    """Behind ssh -L or a same-machine proxy every student arrives from 127.0.0.1: MLMLAB_TRUST_LOCALHOST=0 makes
    loopback a student too (one client for all of them)."""
    tab = ["tab-1"]
    server = _serve(monkeypatch, tab)
    server.peers["tab-1"] = "127.0.0.1"
    monkeypatch.setenv("MLMLAB_TRUST_LOCALHOST", "0")
    assert not ui.session.session_is_local()
    assert ui.client_id() == "ip:127.0.0.1"
    monkeypatch.setenv("MLMLAB_TRUST_LOCALHOST", "1")
    assert ui.session.session_is_local()


def test_apptest_and_bare_mode_are_the_servers_own_machine(monkeypatch):
    """AppTest's runtime is a unittest.mock stand-in and bare mode has no runtime: nobody else is connected."""
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda: None)
    assert ui.session.session_is_local()
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda: types.SimpleNamespace(session_id="t"))
    monkeypatch.setattr(runtime, "exists", lambda: True)
    monkeypatch.setattr(runtime, "get_instance", lambda: mock.MagicMock())
    assert ui.session.session_is_local() and ui.client_id() == "session:t"


def test_a_run_asks_the_server_whether_its_session_is_still_connected(monkeypatch):
    """Issue 16 item 4: the check a run gets is "is this session connected?" (on any page), asked of
    Streamlit's runtime from the watchdog's thread (here a stand-in that knows who is connected)."""
    connected = set()
    server = types.SimpleNamespace(is_active_session=lambda session_id: session_id in connected)
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda: types.SimpleNamespace(session_id="tab-1"))
    monkeypatch.setattr(runtime, "exists", lambda: False)
    assert ui.session_alive_check() is None  # bare mode: the run is kept alive by its snapshots
    monkeypatch.setattr(runtime, "exists", lambda: True)
    monkeypatch.setattr(runtime, "get_instance", lambda: server)
    alive = ui.session_alive_check()
    assert alive() is False
    connected.add("tab-1")
    assert alive() is True
