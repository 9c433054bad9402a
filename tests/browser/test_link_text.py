"""Real browser: what a link carries is shown as text, never as an image or a link (issue 29 item 5).

`?seed=![](http://…/x)` made every browser that opened the link fetch a remote image (its address and the
time leaked; any picture could be put on the projector), and `?p=[Quiz answers](http://…)` put a clickable
link in the app's own notice. Here Chromium opens such a link on three pages: the notice shows the
characters, no <img> or <a> points at the link's host, and the browser never asks that host for anything.
"""

from urllib.parse import urlencode, urlparse

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import SLOW, open_link

EVIL = "evil.example"
LINK = {"seed": f"![](http://{EVIL}/x.png)", "p": f"[Quiz answers](http://{EVIL}/answers)",
        "strategy": f"<img src=http://{EVIL}/y.png>", "view": f"www.{EVIL}/z"}


@pytest.mark.parametrize("path", ["masking", "quiz", "inside"])
def test_a_hostile_link_is_shown_as_text(page, server, path):
    asked = []
    page.on("request", lambda request: asked.append(request.url)
            if (urlparse(request.url).hostname or "").endswith(EVIL) else None)
    open_link(page, server, f"{path}?" + urlencode(LINK))
    notice = page.locator('[data-testid="stAlert"]').filter(has_text="cannot use")
    expect(notice.first).to_be_visible(timeout=SLOW)
    text = notice.first.inner_text().replace("\u2060", "")  # the invisible word joiners that stop autolinks
    assert f"![](http://{EVIL}/x.png)" in text  # the characters, as typed
    assert "[Quiz answers](http://" in text
    made = page.evaluate("""host => ({
        images: [...document.querySelectorAll('img')].filter(i => (i.src || '').includes(host)).length,
        links: [...document.querySelectorAll('a')].filter(a => (a.href || '').includes(host)).length,
        inNotice: [...document.querySelectorAll('[data-testid="stAlert"] a, [data-testid="stAlert"] img')].length,
    })""", EVIL)
    assert made == {"images": 0, "links": 0, "inNotice": 0}, made
    page.wait_for_timeout(500)
    assert asked == []  # nothing was fetched from the link's host
