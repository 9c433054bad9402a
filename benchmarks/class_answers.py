"""The class answers live, under load (issue 44): a class of 30 answers a question within 10 s while a run trains.

    python -m benchmarks.class_answers                 # 30 students; writes RESULTS.md's "live class" section
    python -m benchmarks.class_answers --students 10 --quick   # smoke (RESULTS.md untouched)

One ``streamlit run app.py`` server (the browser tests' ``Server``) started as behind a relay
(``MLMLAB_TRUST_LOCALHOST=0``: every browser here comes from 127.0.0.1, so the board tells students apart by their
browser's cookie, and the teacher leads with ``MLMLAB_TEACHER_KEY``), Debian's Chromium with one browser context per
person, driven at once by Playwright's async API:

- a trainer starts the Training page's default run (the facts lesson on the bundled model) and leaves it training;
- the teacher opens Grammar's question ("Which sentence does the model prefer, A or B?") on a 1280x720 page;
- every student opens Grammar, waits for the answer box, then answers at a moment drawn uniformly within the same
  10 s window (choices drawn from a seeded generator); a fifth of them change their answer once, 2 s later;
- the teacher's page is read every 0.1 s: its "N of M answered" line and, at the end, its table.

Measured, for RESULTS.md: answers counted (must equal the students, each choice's count exactly the last answers
given: none lost, none counted twice); the teacher's refresh latency (from a student's confirmed answer to the first
moment the teacher's count includes it; target p95 <= 3 s); the students' own confirmation latency; exceptions on any
page or in the server's log (must be 0); the training run still going or done. Latencies are absolute times on a
shared machine: compare them within one run. Nothing here is a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.classroom_load import idle, niced_chromium, percentile, write_section  # noqa: E402
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Server  # noqa: E402

RESULTS_JSON = ROOT / "benchmarks" / "results" / "class_answers.json"
BEGIN, END = "<!-- live-class:begin -->", "<!-- live-class:end -->"
KEY = "benchmark-teacher-key-0123"
WINDOW_S = 10.0
CHANGE_AFTER_S = 2.0
T0 = time.monotonic()


def log(text: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {text}", file=sys.stderr, flush=True)


async def open_page(page, url: str) -> None:
    await page.goto(url, timeout=240_000)  # thirty browsers starting on the server's two cores
    await idle(page, 240)


async def start_run(context, url: str) -> dict:
    page = await context.new_page()
    await open_page(page, url + "/training")
    await page.get_by_role("button", name=re.compile("Start training")).click()
    await page.locator('[data-testid="stMain"] [data-testid="stProgress"]').first.wait_for(timeout=240_000)
    log("the run is training")
    return {"page": page}


async def lead(context, url: str):
    page = await context.new_page()
    await open_page(page, url + "/grammar")
    panel = page.locator('[data-testid="stExpander"]').filter(has_text="Ask the class (teacher)")
    await panel.locator("summary").click()
    box = panel.get_by_role("textbox", name="Teacher key")
    await box.fill(KEY)
    await box.press("Enter")
    await idle(page, 240)
    title = page.locator('[data-testid="stExpander"] summary').filter(has_text="🙋 Ask the class").first
    await title.wait_for(timeout=240_000)
    button = page.get_by_role("button", name="🙋 Ask the class")
    if not await button.is_visible():
        await title.click()
    await button.click()
    await page.get_by_text("🙋 The teacher asks (open)").wait_for(timeout=240_000)
    log("the teacher opened the question")
    return page


async def watch_teacher(page, seen: list, stop: asyncio.Event) -> None:
    """(time, answered) each time the teacher's "N of M answered" line changes."""
    last = -1
    while not stop.is_set():
        try:
            text = await page.evaluate("() => document.body.innerText")
            found = re.search(r"(\d+) of (\d+) answered", text)
            n = int(found.group(1)) if found else 0
            if n != last:
                seen.append((time.monotonic(), n))
                last = n
        except Exception:  # noqa: BLE001 - a redraw in progress
            pass
        await asyncio.sleep(0.1)


async def student(browser, url: str, number: int, choice: str, change: str | None, start_at: float,
                  out: dict, arrive_at: float) -> None:
    record = out.setdefault(number, {"answers": []})
    await asyncio.sleep(max(0.0, arrive_at - time.monotonic()))  # a class comes in over a minute, not at once
    context = await browser.new_context(viewport={"width": 1280, "height": 720})
    record["context"] = context
    page = await context.new_page()
    record["page"] = page
    try:
        await open_page(page, url + "/grammar")
        form = page.locator('[data-testid="stForm"]').filter(has_text="Your answer").first
        await form.wait_for(timeout=240_000)
        record["ready"] = time.monotonic()
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        for i, pick in enumerate([choice] + ([change] if change else [])):
            if i:
                await asyncio.sleep(CHANGE_AFTER_S)
            sent = time.monotonic()
            await form.get_by_text(pick, exact=True).click()
            await form.get_by_role("button", name="Send my answer").click()
            await page.get_by_text(re.compile(rf"^(Counted|Your answer): {pick}\.")).first.wait_for(timeout=120_000)
            record["answers"].append({"choice": pick, "sent": sent, "confirmed": time.monotonic()})
    except Exception as exc:  # noqa: BLE001 - reported, never raised: the others go on
        record["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log(f"student {number}: {record['error']}")


async def run(args) -> dict:
    from playwright.async_api import async_playwright

    log_path = Path(tempfile.mkdtemp(prefix="mlmlab_class_")) / "streamlit.log"
    server = Server({"MLMLAB_TRUST_LOCALHOST": "0", "MLMLAB_TEACHER_KEY": KEY, "MLMLAB_MODEL": args.model,
                     "MLMLAB_MAX_RUNS": "1"}, log_path)
    rng = random.Random(args.seed)
    out: dict = {}
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=niced_chromium(args.browser_nice), args=CHROMIUM_ARGS,
                                              headless=True)
            trainer = await browser.new_context(viewport={"width": 1280, "height": 720})
            teacher_context = await browser.new_context(viewport={"width": 1280, "height": 720})
            run_info = await start_run(trainer, server.url) if args.train else None
            teacher = await lead(teacher_context, server.url)
            choices = [rng.choice("AB") for _ in range(args.students)]
            changes = [("B" if c == "A" else "A") if rng.random() < args.change_share else None for c in choices]
            seen: list = []
            stop = asyncio.Event()
            watcher = asyncio.create_task(watch_teacher(teacher, seen, stop))
            # everyone loads the page first; the answers then come within one window
            start = time.monotonic()
            ready_by = start + args.load_s
            offsets = [rng.uniform(0.0, WINDOW_S) for _ in range(args.students)]
            arrivals = [start + args.arrive_s * i / max(1, args.students) for i in range(args.students)]
            tasks = [asyncio.create_task(student(browser, server.url, i, choices[i], changes[i], ready_by + offsets[i],
                                                 out, arrivals[i])) for i in range(args.students)]
            await asyncio.gather(*tasks)
            await asyncio.sleep(5.0)  # the teacher's last refresh
            stop.set()
            await watcher
            table = await teacher.locator('[data-testid="stTable"]').filter(has_text="the class").first.inner_text()
            pages = [teacher] + [r["page"] for r in out.values() if "page" in r] + ([run_info["page"]] if run_info else [])
            exceptions = 0
            for page in pages:
                exceptions += await page.locator('[data-testid="stException"]').count()
            shot = log_path.parent / "teacher.png"
            await teacher.screenshot(path=str(shot), full_page=True)
            training = ""
            if run_info:
                bars = run_info["page"].locator('[data-testid="stMain"] [data-testid="stProgress"]')
                training = (await bars.first.inner_text()) if await bars.count() else ""
            await browser.close()
    finally:
        server.stop()
    server_log = log_path.read_text(encoding="utf-8", errors="replace")
    late = [r["ready"] for r in out.values() if "ready" in r]
    return {"choices": choices, "changes": changes, "students": out, "seen": seen, "table": table,
            "exceptions": exceptions, "tracebacks": server_log.count("Traceback"), "training": training,
            "screenshot": str(shot), "late_ready": sum(t > ready_by for t in late)}


def summarise(outcome: dict, args) -> dict:
    # what each student's page confirmed last (a student whose page never loaded gave nothing: counted apart)
    final = [r["answers"][-1]["choice"] for r in outcome["students"].values() if r["answers"]]
    expected = {c: final.count(c) for c in "AB"}
    planned = len(outcome["choices"])
    counted = {c: int(m.group(1)) for c in "AB"
               for m in [re.search(rf"(?m)^\s*(?:\d+\s+)?{c}\s+(\d+) of \d+", outcome["table"])] if m}
    confirmed = sorted(a["confirmed"] for r in outcome["students"].values() for a in r["answers"][:1])
    seen = outcome["seen"]
    refresh = []  # for the k-th first answer confirmed: when the teacher's count first reached k
    for k, at in enumerate(confirmed, start=1):
        shown = next((t for t, n in seen if n >= k and t >= at), None)
        if shown is None:  # the teacher's count already included it when the student's page confirmed it
            shown = next((t for t, n in seen if n >= k), None)
            refresh.append(0.0 if shown is not None and shown <= at else float("nan"))
        else:
            refresh.append(shown - at)
    own = [a["confirmed"] - a["sent"] for r in outcome["students"].values() for a in r["answers"]]
    errors = [f"student {i}: {r['error']}" for i, r in outcome["students"].items() if "error" in r]
    finite = [x for x in refresh if x == x]
    return {
        "students": args.students, "answered": len(final), "not_answered": planned - len(final),
        "changed": sum(c is not None for c in outcome["changes"]), "model": args.model,
        "training": args.train, "training_progress": outcome["training"][:160], "expected": expected,
        "counted": counted, "all_counted": counted == expected, "answered_shown": max((n for _, n in seen), default=0),
        "refresh_p50_s": round(percentile(finite, 0.5), 2), "refresh_p95_s": round(percentile(finite, 0.95), 2),
        "refresh_max_s": round(max(finite, default=float("nan")), 2), "refresh_missing": len(refresh) - len(finite),
        "own_p50_s": round(percentile(own, 0.5), 2), "own_p95_s": round(percentile(own, 0.95), 2),
        "exceptions": outcome["exceptions"] + outcome["tracebacks"] + len(errors), "errors": errors[:10],
        "late_ready": outcome["late_ready"], "note": args.note, "finished": time.strftime("%Y-%m-%d %H:%M"),
    }


def markdown(s: dict) -> str:
    ok = "MET" if s["refresh_p95_s"] <= 3.0 else "MISSED"
    lines = [BEGIN, "## The class answers live (issue 44): a class answering while a run trains", "",
             f"`python -m benchmarks.class_answers`, finished {s['finished']}. {s['students']} students in their own "
             f"browser contexts answered Grammar's A-or-B question within {WINDOW_S:.0f} s ({s['changed']} changed "
             f"their answer once), while {'a training run (the facts lesson, bundled model) trained' if s['training'] else 'nothing trained'}"
             f"; the teacher's page was read every 0.1 s. {s['note']}".rstrip(), "",
             "| measure | value |", "|---|---|",
             f"| students whose answer their page confirmed | {s['answered']} of {s['students']} |",
             f"| answers counted (A, B) | {s['counted'].get('A')}, {s['counted'].get('B')} of {s['expected'].get('A')}, "
             f"{s['expected'].get('B')} given: {'every one, none twice' if s['all_counted'] else 'NOT EXACT'} |",
             f"| the teacher's count, most shown | {s['answered_shown']} |",
             f"| the teacher's refresh after an answer, p50 / p95 / max | {s['refresh_p50_s']} / {s['refresh_p95_s']} / "
             f"{s['refresh_max_s']} s (target p95 <= 3 s: {ok}) |",
             f"| a student's own confirmation, p50 / p95 | {s['own_p50_s']} / {s['own_p95_s']} s |",
             f"| exceptions (pages, server log, students stopped) | {s['exceptions']} |",
             f"| the run at the end | {s['training_progress'] or '-'} |", "",
             "JSON: `benchmarks/results/class_answers.json`.", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--model", default="default", help="the pages' model (default: the bundled default)")
    parser.add_argument("--no-train", dest="train", action="store_false", help="no training run meanwhile")
    parser.add_argument("--change-share", type=float, default=0.2, help="share of students who change their answer")
    parser.add_argument("--load-s", type=float, default=180.0, help="seconds from the first arrival to the answers")
    parser.add_argument("--arrive-s", type=float, default=60.0, help="the students arrive over this many seconds")
    parser.add_argument("--browser-nice", type=int, default=5,
                        help="run Chromium at this nice value (default 5): in a class the browsers are the students' "
                             "own machines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: results to a temporary folder")
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    summary = summarise(asyncio.run(run(args)), args)
    section = markdown(summary)
    print(section)
    target = (Path(tempfile.gettempdir()) / "mlmlab_benchmarks_quick" / RESULTS_JSON.name) if args.quick else RESULTS_JSON
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    if not args.quick:
        write_section(section, BEGIN, END)
    return 0 if summary["all_counted"] and summary["exceptions"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
