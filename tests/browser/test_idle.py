"""A started server with one idle tab stays quiet (issue 24): README's `streamlit run app.py`, no extra flags
about the file watcher, from the clone that holds README's .venv (CI makes it there)."""

import os
import time

from tests.browser.conftest import ROOT, Server, open_page

IDLE_S = 20
MAX_CORE_SHARE = 0.05  # < 5% of one core over 20 s


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (Linux /proc/PID/stat, fields 14 and 15)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_idle_server_with_one_tab_uses_under_5_percent_of_a_core(browser, tmp_path):
    server = Server({}, tmp_path / "streamlit.log")
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        open_page(page, server)  # Home, fully drawn
        page.wait_for_timeout(2000)  # let the first run's tail (plotly, the URL) settle
        t0, c0 = time.monotonic(), cpu_seconds(server.proc.pid)
        page.wait_for_timeout(IDLE_S * 1000)
        share = (cpu_seconds(server.proc.pid) - c0) / (time.monotonic() - t0)
        context.close()
    finally:
        server.stop()
    venv = (ROOT / ".venv").is_dir()
    assert share < MAX_CORE_SHARE, (f"the idle server used {share:.1%} of a core over {IDLE_S} s "
                                    f"(.venv in the clone: {venv}); .streamlit/config.toml must keep the file watcher off")
