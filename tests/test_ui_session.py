"""ui.session: who is asking (one run per client) and whether a session is still connected."""

import types
from unittest import mock

import streamlit as st
from streamlit import runtime
from streamlit.runtime import scriptrunner

import ui


def test_one_run_per_client_counts_local_tabs_apart_and_an_ip_once(monkeypatch):
    """Issue 16 item 7: st.context.ip_address is None on localhost, so a teacher's own tabs (and the
    tests) are told apart by their session; students on other machines are one client per address."""
    address, tab = [None], ["tab-1"]
    monkeypatch.setattr(type(st.context), "ip_address", property(lambda self: address[0]))
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda: types.SimpleNamespace(session_id=tab[0]))
    first = ui.client_id()
    tab[0] = "tab-2"
    assert (first, ui.client_id()) == ("session:tab-1", "session:tab-2")
    address[0] = mock.MagicMock()  # AppTest's stand-in runtime: not an address either
    assert ui.client_id() == "session:tab-2"
    address[0] = "10.0.0.7"
    assert ui.client_id() == "ip:10.0.0.7"
    tab[0] = "tab-1"
    assert ui.client_id() == "ip:10.0.0.7"  # five tabs of one student are one client


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
