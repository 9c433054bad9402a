"""P7's picture: the Training page at the end of the default run, as a learner sees it (issue 15).

Starts the app on the bundled default model, opens the Training page in Debian's Chromium, presses
"Start training" with every setting left alone, waits for the run to end and takes a full-page
screenshot (1400 wide) into ``benchmarks/results/p7_training_page.png``; P7's section of RESULTS.md
links it, with the time from the click to "Done" in the browser (which includes the page drawing its
live charts in the same process, so it is longer than P7's own timing on a busy 2-core machine).

Run: ``python -m benchmarks.p7_screenshot`` (needs /usr/bin/chromium and pip's playwright).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Server  # noqa: E402  (the browser tests' server)

SHOT = ROOT / "benchmarks" / "results" / "p7_training_page.png"
RECORD = SHOT.with_suffix(".json")  # when and how the picture was taken; RESULTS.md's P7 section reads it
TIMEOUT_S = 600


def main() -> int:
    from playwright.sync_api import sync_playwright

    log = Path(tempfile.mkdtemp(prefix="mlmlab_p7_")) / "streamlit.log"
    server = Server({"MLMLAB_MODEL": "default"}, log)  # ui.DEFAULT_MODEL: the bundled model
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(server.url + "/training", timeout=180_000)
            start = page.get_by_role("button", name=re.compile("Start training"))
            start.wait_for(timeout=180_000)
            clicked = time.perf_counter()
            start.click()
            bars = page.locator('[data-testid="stMain"] [data-testid="stProgress"]')
            text, deadline = "", time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                text = bars.first.inner_text() if bars.count() else ""
                if re.match(r"\s*(Done|Stopped|Error)", text, re.I):
                    break
                time.sleep(1.0)
            seconds = time.perf_counter() - clicked
            page.wait_for_timeout(3000)  # the last fragment rerun draws the final curves
            # Streamlit scrolls inside its main block, so a full-page shot needs a window as tall as it
            height = page.evaluate("""() => Math.max(...[...document.querySelectorAll(
                '[data-testid="stMain"], [data-testid="stMainBlockContainer"]')].map(e => e.scrollHeight))""")
            page.set_viewport_size({"width": 1400, "height": min(int(height) + 100, 12000)})
            page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollTo(0, 0)")
            page.wait_for_timeout(2000)  # charts redraw at the new size
            page.screenshot(path=str(SHOT), full_page=True)
            browser.close()
        RECORD.write_text(json.dumps({
            "status": text.strip()[:120], "seconds_click_to_done": round(seconds, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "taken": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "viewport": "1400 wide"}, indent=1))
        print(f"{text.strip()[:120]!r} after {seconds:.1f} s in the browser "
              f"(load average {tuple(round(x, 2) for x in os.getloadavg())}); screenshot: {SHOT.relative_to(ROOT)}")
        return 0 if text.strip().lower().startswith("done") else 1
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
