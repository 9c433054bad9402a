"""Real-browser fixtures: a live `streamlit run app.py` server and Debian's Chromium driven by Playwright.

No browser is downloaded: Playwright launches /usr/bin/chromium. A failing test leaves a full-page
screenshot in its temporary folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import expect

from ui.settings import SERVER_ENVIRONMENT

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("MLMLAB_CHROMIUM", "/usr/bin/chromium")
SLOW = 120_000  # ms: first runs load torch and the model on a busy 2-core machine
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (apt-get install chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamlit run app.py` on a free port, with its log kept for failure reports."""

    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        # The server starts with what a teacher's shell has: nothing of the server's own environment
        # (ui.settings.SERVER_ENVIRONMENT), which the test process holds and the app must set itself (issue 42).
        inherited = {k: v for k, v in os.environ.items() if k not in SERVER_ENVIRONMENT}
        full_env = {**inherited, "HF_HUB_OFFLINE": "1", "MLMLAB_MODEL": "tiny-random", **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(self.port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],  # the file watcher is off in .streamlit/config.toml, as users get it
            cwd=ROOT, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited early:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(self.url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"streamlit did not become healthy in 120 s:\n{log.read_text()}")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    s = Server({"MLMLAB_MAX_RUNS": "2", "MLMLAB_ABANDON_S": "20"}, tmp_path_factory.mktemp("server") / "streamlit.log")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, request, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    yield pg
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        try:
            pg.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
            print(f"screenshot of the failure: {tmp_path / 'failure.png'}")
        except Exception as exc:  # the page may be gone
            print(f"no screenshot: {exc}")
    context.close()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def wait_idle(pg, timeout: float = 90):
    """Wait until the app is connected and its script run has finished (stable for half a second)."""
    pg.wait_for_selector('[data-testid="stApp"]', timeout=timeout * 1000)
    state = """() => { const a = document.querySelector('[data-testid="stApp"]');
        return a.getAttribute('data-test-script-state') + '/' + a.getAttribute('data-test-connection-state'); }"""
    deadline = time.time() + timeout
    quiet_since = None
    while time.time() < deadline:
        if pg.evaluate(state) == "notRunning/CONNECTED":
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since > 0.5:
                return
        else:
            quiet_since = None
        time.sleep(0.1)
    raise TimeoutError(f"the app did not become idle in {timeout} s (state {pg.evaluate(state)})")


def open_page(pg, server, path: str = "", timeout: float = 120):
    pg.goto(f"{server.url}/{path}")
    wait_idle(pg, timeout)
    assert pg.locator('[data-testid="stException"]').count() == 0, "the page shows an exception"


def open_link(pg, server, path: str) -> None:
    """``open_page``, then wait for the page's title (a link's first run loads the model)."""
    open_page(pg, server, path)
    expect(pg.locator("h1").first).to_be_visible(timeout=SLOW)
    wait_idle(pg)


@contextmanager
def student(browser, width: int = 1400, height: int = 1000):
    """Another student's browser (a session of its own), closed at the end of the ``with``."""
    context = browser.new_context(viewport={"width": width, "height": height})
    pg = context.new_page()
    pg.set_default_timeout(SLOW)
    try:
        yield pg
    finally:
        context.close()


def go_to(pg, title: str, heading: str | None = None, settle_ms: int = 500) -> None:
    """Open a page from the sidebar's navigation and wait for its run (``heading``: its title, when not ``title``)."""
    pg.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    expect(pg.locator("h1").first).to_contain_text(heading or title, timeout=SLOW)
    wait_idle(pg)
    pg.wait_for_timeout(settle_ms)  # plotly draws, and the URL updates, after the run's last message
    assert pg.locator('[data-testid="stException"]').count() == 0, f"{title} shows an exception"


def presenter_view(pg) -> None:
    """Switch the sidebar's presenter view on and wait for the run."""
    pg.locator('[data-testid="stSidebar"]').get_by_text("Presenter view").click()
    wait_idle(pg)


def type_sentence(pg, text: str, shown) -> None:
    """Type a sentence into the Predictions page's box and wait until ``shown`` (a text or pattern) appears."""
    expect(pg.locator("h1").first).to_contain_text("Predictions", timeout=SLOW)
    box = pg.get_by_label("…or type your own sentence")
    box.fill(text)
    box.press("Control+Enter")
    expect(pg.get_by_text(shown)).to_be_visible(timeout=SLOW)
    wait_idle(pg)


def chips(pg, nth: int = 0) -> list[str]:
    """The token texts of the ``nth`` row of chips on the page."""
    return pg.locator(".mlm-chips").nth(nth).locator(".mlm-chip").all_inner_texts()


# Font sizes and cut text of what a room reads: metrics, buttons, chart ticks and titles.
ROOM_CHECK = """() => {
  const px = e => parseFloat(getComputedStyle(e).fontSize);
  const out = {metrics: [], buttons: [], ticks: [], titles: []};
  const cut = e => e.scrollWidth > e.clientWidth + 1;
  document.querySelectorAll('[data-testid="stMetricValue"] p').forEach(e => out.metrics.push(px(e)));
  out.metricsCut = Array.from(document.querySelectorAll('[data-testid="stMetric"] p')).filter(cut).map(e => e.textContent);
  document.querySelectorAll('[data-testid="stMain"] .stButton button').forEach(b => {
    const label = b.querySelector('p') || b;
    out.buttons.push({text: label.textContent, font: px(label), cut: label.scrollWidth > label.clientWidth + 1
      || b.scrollWidth > b.clientWidth + 1});
  });
  document.querySelectorAll('.js-plotly-plot .xtick text, .js-plotly-plot .ytick text')
    .forEach(t => out.ticks.push(parseFloat(t.style.fontSize)));
  document.querySelectorAll('.js-plotly-plot .gtitle').forEach(t => out.titles.push({text: t.textContent,
    font: parseFloat(t.style.fontSize), cut: t.getBoundingClientRect().right > t.closest('.js-plotly-plot')
      .getBoundingClientRect().right + 1}));
  return out;
}"""


def has_chromium() -> bool:
    return shutil.which(CHROMIUM) is not None or Path(CHROMIUM).exists()
