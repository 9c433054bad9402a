"""Classroom load test: one MLM Lab server, N real browsers doing a workshop at the same time.

    python -m benchmarks.classroom_load              # 8 students for 4 minutes; writes RESULTS.md's section
    python -m benchmarks.classroom_load --quick      # smoke: 8 students for 60 s (RESULTS.md untouched)
    python -m benchmarks.classroom_load --students 12 --duration 300

One ``streamlit run app.py`` server (127.0.0.1, like a teacher's laptop; MLMLAB_MAX_RUNS=2) and one
Debian Chromium with one browser context (one Streamlit session) per student, all driven at once
by Playwright's async API. Every student loops through the workshop flow: Masking (re-roll twice,
start over, step through three tokens), Predictions, Quiz (type a guess into each blank and
reveal). On top of that, student 0 first visits every page once (pressing Masking's "Mask the
corpus" and Predictions' "Compare on many sentences") and makes one Efficiency measurement, and students 1 and 2 each
start a training run at the beginning, leave it for the other pages, come back to it between
rounds, and download its curves at the end. The last ``--heavy-students`` (default 1) do only
the costliest clicks the pages allow, again and again, while the others work: the Efficiency page's
three loss paths at batch 16 × 128, its training step five ways and the profile at the widest size the
page accepts (8 × 64 on the bundled model), Predictions' "Compare on many sentences" on 256 sentences
with a link's p = 1 (every token selected), the Tokenizer page's training on a 2 MB upload and the Loss
page's NSP head (issue 42's freeze needed those three pages at once). One more, light, student
(``--no-light`` leaves it out) opens Home, Masking and Quiz in new tabs, one after another, and each load is
timed. The server's health endpoint is asked every 2 s: 30 s without an answer is a stall, 180 s ends the run.

    python -m benchmarks.classroom_load --heavy-students 5 --duration 600   # issue 42: a class clicking heavy things

Measured, for RESULTS.md: stalls; the light student's p50/p95 page load; the server's peak RSS; the other
students' p95 latency while the heavy ones click; interactions completed; p50/p95 latency per interaction (from the click
to the end of the script run it caused, read from the page's own ``data-test-script-state``);
exceptions (Streamlit exception boxes, browser page errors, tracebacks in the server log, a server
that died: all must be 0); the server's resident memory (RSS) over time; both training runs
finished with intact curves (steps 1..N in order for every variant, every loss finite); and the
largest WebSocket message the server sent (for ``server.maxMessageSize``).

Latencies are absolute times on a shared machine: compare them within one run, not across runs.
Nothing here is a test: it asserts nothing, it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, Server  # noqa: E402  (the browser tests' server)

RESULTS_JSON = ROOT / "benchmarks" / "results" / "classroom_load.json"
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- classroom-load:begin -->", "<!-- classroom-load:end -->"
TRAINERS = (1, 2)  # the students who each start a training run
MEASURER = 0  # the student who makes the Efficiency measurement

# A MutationObserver on the whole document keeps every change of the app's script state with its
# time (performance.now()); the app's root element may be drawn anew on a page switch.
OBSERVER = """() => {
  if (window.__mlm) return;
  window.__mlm = [];
  new MutationObserver(changes => {
    for (const c of changes) {
      if (c.target.getAttribute && c.target.getAttribute('data-testid') === 'stApp')
        window.__mlm.push([c.target.getAttribute('data-test-script-state'), performance.now()]);
    }
  }).observe(document.documentElement, {attributes: true, subtree: true, attributeFilter: ['data-test-script-state']});
}"""
NO_RUN_S = 10.0  # no "running" state seen by then, but messages came back: timed by the server's messages
FRAMES: dict[int, list[float]] = {}  # per page: when each WebSocket message from the server arrived


T0 = time.monotonic()
VERBOSE = True
SHOTS: Path | None = Path(tempfile.mkdtemp(prefix="mlmlab_load_shots_"))


def log(text: str) -> None:
    """A progress line on stderr (the load test takes minutes)."""
    if VERBOSE:
        print(f"[{time.monotonic() - T0:6.1f} s] {text}", file=sys.stderr, flush=True)


class Stats:
    """Everything the students record, shared by all of them (one asyncio thread: no locks needed)."""

    def __init__(self):
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.failed: dict[str, int] = defaultdict(int)
        self.problems: list[str] = []
        self.page_errors: list[str] = []
        self.max_frame = 0
        self.max_frame_where = ""
        self.frames = 0
        self.timed_by_messages = 0  # interactions whose run never showed as "running" in the page
        self.runs: dict[int, dict] = {}
        self.students_stopped = 0  # students whose flow ended early on an error (must be 0)
        self.stalls = 0  # times the health endpoint was silent for STALL_S
        self.longest_health_gap = 0.0
        self.aborted = False  # the server stopped answering for ABORT_S


async def idle(page, timeout: float = 180.0) -> None:
    """Until the app is connected and no script runs (stable for 0.3 s)."""
    state = """() => { const a = document.querySelector('[data-testid="stApp"]');
        return a ? a.getAttribute('data-test-script-state') + '/' + a.getAttribute('data-test-connection-state') : ''; }"""
    deadline = time.monotonic() + timeout
    quiet = None
    while time.monotonic() < deadline:
        if await page.evaluate(state) == "notRunning/CONNECTED":
            quiet = quiet or time.monotonic()
            if time.monotonic() - quiet > 0.3:
                return
        else:
            quiet = None
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the app did not become idle in {timeout:.0f} s")


async def problem(page, stats: Stats, name: str, text: str) -> None:
    """Record a failed interaction with its whole message in the log and a screenshot."""
    stats.failed[name] += 1
    stats.problems.append(f"{name}: {text[:300]}")
    log(f"{name}: FAILED {text[:2000]}")
    if SHOTS is not None:
        try:
            shot = SHOTS / f"failed_{len(stats.problems):03d}_{re.sub(r'[^a-z]+', '_', name)}.png"
            await page.screenshot(path=str(shot), full_page=True)
            log(f"screenshot: {shot}")
        except Exception:  # noqa: BLE001 - the page may be gone
            pass


async def timed(page, stats: Stats, name: str, action, timeout: float = 180.0) -> None:
    """Do ``action`` (a click) and record how long until the script run it caused has finished."""
    await page.evaluate(OBSERVER)
    # The state at the click counts too: a click during a run (a rerun queued behind it) shows no new "running".
    mark = await page.evaluate("""() => { const t = performance.now(); window.__mlm_mark = t;
        const a = document.querySelector('[data-testid="stApp"]');
        window.__mlm.push([a ? a.getAttribute('data-test-script-state') : 'unknown', t]); return t; }""")
    frames = FRAMES.setdefault(id(page), [])
    try:
        await action()
        clicked = time.monotonic()
        done = None
        while time.monotonic() < clicked + timeout:
            events = await page.evaluate("() => window.__mlm.filter(e => e[1] >= window.__mlm_mark)")
            started = next((i for i, (s, _) in enumerate(events) if s == "running"), None)
            if started is not None:
                done = next((t for s, t in events[started:] if s == "notRunning"), None)
                if done is not None:
                    break
            elif time.monotonic() > clicked + NO_RUN_S and any(t >= clicked for t in frames):
                break  # the server answered, but the page never showed "running": timed by its messages
            # nothing back yet: a starved server answers late, and a late answer is a slow interaction
            await asyncio.sleep(0.05)
        if done is not None:
            await idle(page, timeout)
            seconds = (done - mark) / 1000.0
        else:
            # A browser starved of CPU can apply "running" and "notRunning" in one render, so the state
            # never shows; then the run is timed by the last message the server sent for it.
            await idle(page, timeout)
            answered = [t for t in frames if t >= clicked]
            if not answered:
                raise TimeoutError(f"the click started no script run in {timeout:.0f} s (no message came back)")
            seconds = answered[-1] - clicked
            stats.timed_by_messages += 1
        stats.latency[name].append(seconds)
        log(f"{name}: {seconds:.2f} s")
    except Exception as exc:  # noqa: BLE001 - reported, never raised: the others go on
        await problem(page, stats, name, f"{type(exc).__name__}: {exc}")
        return
    exceptions = await page.locator('[data-testid="stException"]').count()
    if exceptions:
        text = await page.locator('[data-testid="stException"]').first.inner_text()
        stats.problems.append(f"{name}: the page shows an exception: {text[:300]}")


PATHS = {"Home": "", "Masking": "masking", "Predictions": "predictions", "Inside the model": "inside", "Loss": "losses", "Bug museum": "bug_museum",
         "Tokenizer": "tokenizer", "Training": "training", "Efficiency": "efficiency", "Quiz": "quiz"}


async def go(page, stats: Stats, title: str) -> None:
    """Open a page through the sidebar's navigation (a page switch in the same session)."""
    if page.url.split("?")[0].rstrip("/").rsplit("/", 1)[-1] == PATHS[title] and PATHS[title]:
        return  # already there: its link starts no run
    link = page.locator('[data-testid="stSidebarNav"] a').filter(has_text=re.compile(rf"{re.escape(title)}\s*$"))
    await timed(page, stats, f"open {title}", lambda: link.first.click())


async def masking_round(page, stats: Stats) -> None:
    await go(page, stats, "Masking")
    for _ in range(2):
        await timed(page, stats, "masking re-roll",
                    lambda: page.get_by_role("button", name=re.compile("Re-roll")).click())
    await timed(page, stats, "masking start over", lambda: page.get_by_role("button", name=re.compile("Start over")).click())
    for _ in range(3):
        await timed(page, stats, "masking next token",
                    lambda: page.get_by_role("button", name=re.compile("Next token")).click())


async def predictions_round(page, stats: Stats) -> None:
    await go(page, stats, "Predictions")


async def quiz_round(page, stats: Stats, student: int, round_number: int) -> None:
    await go(page, stats, "Quiz")
    await timed(page, stats, "quiz next question", lambda: page.get_by_role("button", name=re.compile("Next question")).click())
    blanks = page.get_by_placeholder("your guess")
    for i in range(await blanks.count()):
        word = ["the", "cat", "is", "a", "of"][(student + round_number + i) % 5]
        for attempt in (1, 2):  # a blank that cannot be typed into is a failed interaction, not a lost student
            try:
                await blanks.nth(i).fill(word, timeout=30_000)
                break
            except Exception as exc:  # noqa: BLE001 - reported; the student goes on
                await problem(page, stats, "quiz type a guess", f"blank {i + 1}, attempt {attempt}: {exc}")
                await idle(page)
    reveal = page.get_by_role("button", name=re.compile("Reveal"))
    if await reveal.count():
        await timed(page, stats, "quiz reveal", lambda: reveal.first.click())


TOUR = ("Home", "Masking", "Predictions", "Inside the model", "Loss", "Bug museum", "Tokenizer", "Training", "Efficiency", "Quiz")


async def tour(page, stats: Stats) -> None:
    """Every page once, and the two corpus-wide buttons: the app's largest messages (server.maxMessageSize)."""
    for title in TOUR:
        await go(page, stats, title)
        if title == "Masking":
            await timed(page, stats, "masking: mask the corpus",
                        lambda: page.get_by_role("button", name=re.compile("Mask the corpus")).click(), timeout=600)
        if title == "Predictions":
            await timed(page, stats, "predictions: compare on many sentences",
                        lambda: page.get_by_role("button", name=re.compile("Compare on many sentences")).click(), timeout=600)


async def efficiency_measurement(page, stats: Stats) -> None:
    await go(page, stats, "Efficiency")
    await timed(page, stats, "efficiency measure",
                lambda: page.get_by_role("button", name=re.compile("Measure the three loss paths")).click(), timeout=600)


HEAVY = "heavy: "  # the costliest-clicks students' interactions: kept out of the others' latencies
LIGHT = "light: "  # the light student's page loads
STALL_S = 30.0  # the health endpoint silent this long: a stall
ABORT_S = 180.0  # ... this long: the server is frozen, the run ends


async def widest(page, key: str, steps_back: int = 0) -> None:
    """A select slider (its Streamlit key) to its largest value, then ``steps_back`` values down, from the keyboard."""
    thumb = page.locator(f".st-key-{key} input[type='range']").first  # the slider's keyboard handle
    await thumb.focus()
    await thumb.press("End")
    for _ in range(steps_back):
        await thumb.press("ArrowLeft")
    await idle(page)


async def heavy_round(page, stats: Stats, server: Server, stop_at: float) -> None:
    """The costliest clicks the pages allow, one after another (each waits for its turn in the queue of heavy
    clicks); the round ends early once the test's time is up (a queue of five takes minutes per click)."""
    def over() -> bool:
        return time.monotonic() >= stop_at or stats.aborted

    await go(page, stats, "Efficiency")
    await widest(page, "eff_seq")
    await widest(page, "eff_batch")
    await timed(page, stats, HEAVY + "efficiency loss paths 16 × 128",
                lambda: page.get_by_role("button", name=re.compile("Measure the three loss paths")).click(), timeout=900)
    if over():
        return
    await widest(page, "eff_seq", 1)
    await widest(page, "eff_batch", 1)
    await timed(page, stats, HEAVY + "efficiency step five ways 8 × 64",
                lambda: page.get_by_role("button", name=re.compile("Measure the training step five ways")).click(),
                timeout=900)
    if over():
        return
    await timed(page, stats, HEAVY + "efficiency profile 8 × 64",
                lambda: page.get_by_role("button", name=re.compile("Profile one step")).click(), timeout=900)
    if over():
        return
    await page.goto(server.url + "/predictions?p=1&mask=1&random=0", timeout=300_000)  # a link's widest rule
    await idle(page, 300)
    await page.evaluate(OBSERVER)
    await widest(page, "pred_corpus_n")
    await timed(page, stats, HEAVY + "predictions compare 256 sentences, p = 1",
                lambda: page.get_by_role("button", name=re.compile("Compare on many sentences")).click(), timeout=900)
    if over():
        return
    await page.goto(server.url + "/masking", timeout=300_000)  # back to the default rule for the other pages
    await idle(page, 300)
    await page.evaluate(OBSERVER)
    await tokenizer_upload(page, stats)
    if over():
        return
    await loss_nsp(page, stats)


UPLOAD_BYTES = 2_000_000  # the Tokenizer page's largest upload


def upload_file() -> Path:
    """A 2 MB text file of WordNet glosses (diverse words: a vocabulary of thousands), or of the workshop corpus."""
    path = Path(tempfile.gettempdir()) / "mlmlab_load_upload.txt"
    if not path.exists():
        glosses = Path("/usr/share/wordnet/data.noun")
        if glosses.exists():
            lines = [line.split("|", 1)[1].strip() for line in glosses.read_text(encoding="latin-1").splitlines()
                     if "|" in line]
        else:
            from mlm_core.bundled import workshop_sentences

            lines = [f"{s} {i}" for i, s in enumerate(workshop_sentences() * 50)]
        text, size = [], 0
        for line in lines:
            if size + len(line) + 1 > UPLOAD_BYTES - 1000:
                break
            text.append(line)
            size += len(line) + 1
        path.write_text("\n".join(text), encoding="utf-8")
    return path


async def tokenizer_upload(page, stats: Stats) -> None:
    """The Tokenizer page: a 2 MB upload, both algorithms, the page's sizes (the freeze of issue 42 needed one)."""
    await go(page, stats, "Tokenizer")
    await timed(page, stats, HEAVY + "tokenizer: upload source",
                lambda: page.locator(".st-key-tokenizer_source label").filter(has_text="Upload").first.click())
    chooser = page.locator(".st-key-tokenizer_upload input[type='file']").first
    await timed(page, stats, HEAVY + "tokenizer: train on a 2 MB upload",
                lambda: chooser.set_input_files(str(upload_file())), timeout=900)


async def loss_nsp(page, stats: Stats) -> None:
    """The Loss page's NSP head: an encode of sentence pairs on the shared tokenizer, then training."""
    await go(page, stats, "Loss")
    await timed(page, stats, HEAVY + "loss: train the NSP head",
                lambda: page.get_by_role("button", name=re.compile("Train the NSP head")).click(), timeout=900)


async def light_student(browser, server: Server, stats: Stats, stop_at: float) -> None:
    """A student who only opens light pages, one after another, as a new tab each time: how long a page takes to
    load while the others click (``light:`` rows; the issue-42 target is p95 under 5 s)."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        while time.monotonic() < stop_at and not stats.aborted:
            for path in ("", "masking", "quiz", "home"):
                page = await context.new_page()
                page.set_default_timeout(180_000)
                started = time.monotonic()
                try:
                    await page.goto(f"{server.url}/{path}", timeout=180_000)
                    await idle(page, 180)
                    stats.latency[LIGHT + f"open {path or 'home'} (new tab)"].append(time.monotonic() - started)
                except Exception as exc:  # noqa: BLE001 - reported; the light student goes on
                    await problem(page, stats, LIGHT + f"open {path or 'home'}", f"{type(exc).__name__}: {exc}")
                finally:
                    await page.close()
                await asyncio.sleep(2.0)
                if time.monotonic() >= stop_at or stats.aborted:
                    break
    finally:
        await context.close()


async def watch_health(server: Server, stats: Stats, stop: asyncio.Event, every: float = 2.0) -> None:
    """Ask the server's health endpoint every 2 s: a gap of STALL_S without an answer is a stall, and one of
    ABORT_S ends the run (a frozen server answers nothing; issue 42's only needed SIGKILL)."""
    import urllib.request

    def ask() -> bool:
        try:
            with urllib.request.urlopen(server.url + "/_stcore/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    last = time.monotonic()
    in_stall = False
    while not stop.is_set():
        ok = await asyncio.to_thread(ask)
        now = time.monotonic()
        if ok:
            last, in_stall = now, False
        stats.longest_health_gap = max(stats.longest_health_gap, now - last)
        if now - last > STALL_S and not in_stall:
            in_stall = True
            stats.stalls += 1
            log(f"STALL: the health endpoint has not answered for {now - last:.0f} s")
        if now - last > ABORT_S:
            stats.aborted = True
            stats.problems.append(f"the server stopped answering for {now - last:.0f} s: the run was ended")
            return
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


async def start_training(page, stats: Stats, train_model: str) -> None:
    await go(page, stats, "Training")
    option = page.get_by_role("radio", name=re.compile("Tiny random BERT: train from scratch" if train_model == "tiny-random"
                                                        else "Bundled default model"))
    await option.first.wait_for(state="attached", timeout=180_000)  # the page may still be drawing
    if not await option.first.is_checked():
        await timed(page, stats, "training pick model", lambda: option.first.click(force=True))
    await timed(page, stats, "training start", lambda: page.get_by_role("button", name=re.compile("Start training")).click())


async def progress(page) -> str:
    """The Training page's own progress bar (the sidebar's run status, on every page, comes first)."""
    bars = page.locator('[data-testid="stMain"] [data-testid="stProgress"]')
    return (await bars.first.inner_text()) if await bars.count() else ""


async def finish_training(page, stats: Stats, student: int, timeout: float) -> None:
    """Back on the Training page: wait for the run to end, then download its curves and check them."""
    record = stats.runs.setdefault(student, {})
    try:
        await go(page, stats, "Training")
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = await progress(page)
            if re.match(r"\s*(Done|Stopped|Error)", text, re.I):  # pages/training.py: the run's status
                break
            await asyncio.sleep(2.0)
        record["status"] = text.split(":")[0].strip() or "unknown"
        record["progress"] = text.strip()[:160]
        await idle(page)
        async with page.expect_download(timeout=120_000) as info:
            await page.get_by_role("button", name=re.compile("Download all curves")).click()
        download = await info.value
        rows = list(csv.DictReader(io.StringIO(Path(await download.path()).read_text(encoding="utf-8"))))
        record.update(check_curves(rows))
    except Exception as exc:  # noqa: BLE001
        record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        stats.problems.append(f"training run of student {student}: {record['error']}")


def check_curves(rows: list[dict]) -> dict:
    """Steps 1..N in order for every variant, every training loss finite: the curve is intact."""
    by_variant: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row.get("kind") == "step":
            by_variant[row.get("variant") or row.get("name") or "run"].append(row)
    out = {"variants": {}, "intact": bool(by_variant)}
    for variant, steps in by_variant.items():
        numbers = [int(float(r["step"])) for r in steps]
        losses = [float(r["loss"]) for r in steps if r.get("loss") not in (None, "")]
        intact = numbers == list(range(1, len(numbers) + 1)) and len(losses) == len(steps) and all(map(math.isfinite, losses))
        out["variants"][variant] = {"steps": len(steps), "intact": intact,
                                    "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}
        out["intact"] = out["intact"] and intact
    return out


def heavy_students(args) -> list[int]:
    """The last ``--heavy-students`` students that neither train nor tour: a heavy round opens a link (a new
    session), and a run lives with the session that started it."""
    free = [n for n in range(args.students) if n not in TRAINERS and n != MEASURER]
    return free[len(free) - min(args.heavy_students, len(free)):] if args.heavy_students else []


def niced_chromium(nice: int) -> str:
    """A launcher that starts Debian's Chromium at ``nice``: in a class the browsers run on the students' own
    machines, here on the server's two cores; at a lower priority they take what the server leaves."""
    if nice <= 0:
        return CHROMIUM
    path = Path(tempfile.gettempdir()) / f"mlmlab_chromium_nice{nice}.sh"
    path.write_text(f'#!/bin/sh\nexec nice -n {nice} {CHROMIUM} "$@"\n', encoding="utf-8")
    path.chmod(0o755)
    return str(path)


async def student(browser, server: Server, stats: Stats, number: int, stop_at: float, args) -> None:
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(180_000)
    page.on("pageerror", lambda error: stats.page_errors.append(f"student {number}: {str(error)[:200]}"))

    def frame(payload):
        FRAMES.setdefault(id(page), []).append(time.monotonic())
        size = len(payload)
        stats.frames += 1
        if size > stats.max_frame:
            stats.max_frame, stats.max_frame_where = size, page.url.split("?")[0].rsplit("/", 1)[-1] or "home"

    page.on("websocket", lambda ws: ws.on("framereceived", frame))
    try:
        await page.goto(server.url + "/masking", timeout=300_000)
        await idle(page, 300)
        await page.evaluate(OBSERVER)
        if number in TRAINERS:
            await start_training(page, stats, args.train_model)
        if number in heavy_students(args):
            while not stats.aborted:  # at least one round, then as many as fit
                await heavy_round(page, stats, server, stop_at)
                if time.monotonic() >= stop_at:
                    break
            stop_at = 0.0  # no workshop rounds for this one
        if number == MEASURER:
            await tour(page, stats)
            await efficiency_measurement(page, stats)
        round_number = 0
        while time.monotonic() < stop_at and not stats.aborted:
            await masking_round(page, stats)
            if time.monotonic() >= stop_at:
                break
            await predictions_round(page, stats)
            if time.monotonic() >= stop_at:
                break
            await quiz_round(page, stats, number, round_number)
            if number in TRAINERS and time.monotonic() < stop_at:
                await go(page, stats, "Training")  # look in on the run
            round_number += 1
    except Exception as exc:  # noqa: BLE001
        stats.students_stopped += 1
        stats.problems.append(f"student {number} stopped: {type(exc).__name__}: {str(exc)[:300]}")
        log(f"student {number} stopped: {type(exc).__name__}: {str(exc)[:2000]}")
    try:
        if number in TRAINERS:  # the run is checked even when the student's rounds stopped early
            await finish_training(page, stats, number, args.run_timeout)
    finally:
        await context.close()


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def sample_rss(pid: int, samples: list, stop: asyncio.Event, every: float = 2.0) -> None:
    start = time.monotonic()
    while not stop.is_set():
        samples.append((round(time.monotonic() - start, 1), rss_mib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


async def classroom(args) -> dict:
    from playwright.async_api import async_playwright

    log = Path(tempfile.mkdtemp(prefix="mlmlab_load_")) / "streamlit.log"
    env = {"MLMLAB_MAX_RUNS": "2", "MLMLAB_MODEL": args.model, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_before = [round(x, 2) for x in os.getloadavg()]
    server = Server(env, log)
    stats, rss, stop = Stats(), [], asyncio.Event()
    sampler = asyncio.create_task(sample_rss(server.proc.pid, rss, stop))
    health = asyncio.create_task(watch_health(server, stats, stop))
    t0 = time.monotonic()
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=niced_chromium(args.browser_nice), args=CHROMIUM_ARGS,
                                              headless=True)
            stop_at = time.monotonic() + args.duration
            students = [student(browser, server, stats, n, stop_at, args) for n in range(args.students)]
            if args.light:
                students.append(light_student(browser, server, stats, stop_at))
            run = asyncio.gather(*students)
            while not run.done():  # a frozen server: end the run instead of waiting out every timeout
                await asyncio.wait([run], timeout=2.0)
                if stats.aborted:
                    run.cancel()
                    break
            try:
                await run
            except asyncio.CancelledError:
                pass
            await browser.close()
    finally:
        stop.set()
        await sampler
        await health
        alive = server.proc.poll() is None
        exit_code = server.proc.returncode
        server.stop()
    log_text = log.read_text(encoding="utf-8", errors="replace")
    tracebacks = log_text.count("Traceback (most recent call last)")
    return {"started": started, "seconds": round(time.monotonic() - t0, 1), "stats": stats, "rss": rss,
            "server_alive_at_end": alive, "server_exit_code": exit_code, "tracebacks_in_log": tracebacks,
            "log_excerpt": _excerpt(log_text) if tracebacks else "", "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()]}


def _excerpt(text: str) -> str:
    at = text.find("Traceback (most recent call last)")
    return text[at:at + 3000]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def summarise(outcome: dict, args) -> dict:
    stats: Stats = outcome["stats"]
    rows = []
    for name in sorted(stats.latency, key=lambda n: (-len(stats.latency[n]), n)):
        values = stats.latency[name]
        rows.append({"interaction": name, "completed": len(values), "failed": stats.failed.get(name, 0),
                     "p50_s": round(statistics.median(values), 3), "p95_s": round(percentile(values, 0.95), 3),
                     "max_s": round(max(values), 3)})
    for name, count in stats.failed.items():
        if name not in stats.latency:
            rows.append({"interaction": name, "completed": 0, "failed": count, "p50_s": None, "p95_s": None, "max_s": None})
    rss = [m for _, m in outcome["rss"] if m is not None]
    others = [x for name, values in stats.latency.items() if not name.startswith((HEAVY, LIGHT)) for x in values]
    light = [x for name, values in stats.latency.items() if name.startswith(LIGHT) for x in values]
    exceptions = (len([p for p in stats.problems if "exception" in p]) + len(stats.page_errors)
                  + outcome["tracebacks_in_log"] + (0 if outcome["server_alive_at_end"] else 1))
    return {
        "settings": {"students": args.students, "heavy_students": args.heavy_students, "light": args.light,
                     "browser_nice": args.browser_nice,
                     "duration_s": args.duration, "model": args.model,
                     "train_model": args.train_model, "quick": args.quick},
        "note": args.note,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "started": outcome["started"], "seconds": outcome["seconds"],
        "load_average_before": outcome["load_before"], "load_average_after": outcome["load_after"],
        "heavy_student": bool(args.heavy),
        "others_p50_s": round(statistics.median(others), 3) if others else None,
        "others_p95_s": round(percentile(others, 0.95), 3) if others else None,
        "light_loads": len(light),
        "light_p50_s": round(statistics.median(light), 3) if light else None,
        "light_p95_s": round(percentile(light, 0.95), 3) if light else None,
        "stalls": stats.stalls, "longest_health_gap_s": round(stats.longest_health_gap, 1),
        "aborted_frozen": stats.aborted,
        "heavy_students": args.heavy_students,
        "interactions_completed": sum(len(v) for v in stats.latency.values()),
        "interactions_failed": sum(stats.failed.values()),
        "students_stopped_early": stats.students_stopped,
        "latency": rows,
        "exceptions": exceptions,
        "problems": stats.problems[:50],
        "page_errors": stats.page_errors[:20],
        "server_alive_at_end": outcome["server_alive_at_end"],
        "tracebacks_in_server_log": outcome["tracebacks_in_log"],
        "log_excerpt": outcome["log_excerpt"],
        "rss_mib": {"start": rss[0] if rss else None, "max": max(rss) if rss else None, "end": rss[-1] if rss else None,
                    "samples": outcome["rss"]},
        "training_runs": {str(k): v for k, v in sorted(stats.runs.items())},
        "largest_websocket_message_bytes": stats.max_frame, "largest_message_page": stats.max_frame_where,
        "websocket_messages": stats.frames,
        "timed_by_messages": stats.timed_by_messages,
    }


def markdown(summary: dict) -> str:
    s = summary["settings"]
    rss = summary["rss_mib"]
    samples = summary["rss_mib"]["samples"]
    step = max(1, len(samples) // 12)
    runs = summary["training_runs"]
    lines = [
        BEGIN,
        "## Classroom load test",
        "",
        f"`python -m benchmarks.classroom_load --students {s['students']} --duration {s['duration_s']:.0f}` on "
        f"{summary['started']}: one server, {s['students']} Chromium sessions at once for {s['duration_s']:.0f} s "
        f"(pages on the {s['model']!r} model, training runs on {s['train_model']!r}; Chromium at nice "
        f"{s.get('browser_nice', 0)}, standing in for the students' own machines); load average before "
        f"{tuple(summary['load_average_before'])}, after {tuple(summary['load_average_after'])} on "
        f"{summary['cores']} cores. Latencies are absolute times on this machine: a load average above the "
        "core count means every process, the server and the browsers included, waited for a core."
        + (f" {summary['note']}" if summary.get("note") else ""),
        "",
        f"- Interactions completed: **{summary['interactions_completed']}** ({summary['interactions_failed']} failed; "
        f"{summary['timed_by_messages']} timed by the server's last message because the page never showed them running; "
        f"students whose flow stopped early: {summary['students_stopped_early']}).",
        f"- Stalls (the health endpoint silent for {STALL_S:.0f} s): **{summary['stalls']}**; the longest silence "
        f"{summary['longest_health_gap_s']} s" + ("; **the server froze and the run was ended**." if summary["aborted_frozen"]
                                                 else "."),
        (f"- A light student opening Home, Masking and Quiz in new tabs while {summary['heavy_students']} student(s) "
         f"clicked only heavy things: **{summary['light_p50_s']} s median, {summary['light_p95_s']} s at p95** "
         f"({summary['light_loads']} page loads)." if summary["light_loads"] else "- No light student."),
        f"- Exceptions: **{summary['exceptions']}** (exception boxes, browser page errors, tracebacks in the "
        f"server log: {summary['tracebacks_in_server_log']}; server alive at the end: {summary['server_alive_at_end']}).",
        f"- Server memory (RSS): {rss['start']:.0f} MiB at the start, **{rss['max']:.0f} MiB at most**, {rss['end']:.0f} MiB at "
        "the end." if rss["start"] is not None else "- Server memory: not sampled.",
        (f"- With {summary['heavy_students']} student(s) doing only the costliest allowed clicks (rows marked `heavy:`), the other students' "
         f"interactions took **{summary['others_p95_s']} s at p95** ({summary['others_p50_s']} s median)."
         if summary["heavy_student"] else f"- The students' interactions: {summary['others_p95_s']} s at p95."),
        f"- Largest WebSocket message from the server: {summary['largest_websocket_message_bytes'] / 1e6:.2f} MB "
        f"(on {summary['largest_message_page']}), of {summary['websocket_messages']:,} messages.",
        "",
        "| interaction | completed | failed | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|---|",
    ]
    for row in summary["latency"]:
        lines.append(f"| {row['interaction']} | {row['completed']} | {row['failed']} | {row['p50_s']} | {row['p95_s']} | {row['max_s']} |")
    lines += ["", "Training runs (two students, started at the beginning, watched between rounds):", ""]
    for student, run in runs.items():
        variants = ", ".join(f"{name}: {v['steps']} steps, loss {v['first_loss']:.3g} → {v['last_loss']:.3g}"
                             + ("" if v["intact"] else " (NOT intact)")
                             for name, v in run.get("variants", {}).items() if v["first_loss"] is not None)
        lines.append(f"- student {student}: {run.get('progress') or run.get('status', '?')}; curves "
                     f"{'intact' if run.get('intact') else 'NOT intact'}" + (f" ({variants})" if variants else "")
                     + (f"; error: {run['error']}" if run.get("error") else ""))
    lines += ["", "Server RSS over time (s: MiB): " + ", ".join(
        f"{t:.0f}: {m:.0f}" for t, m in samples[::step] if m is not None) + "."]
    if summary["problems"]:
        lines += ["", "Problems seen:", ""] + [f"- {p}" for p in summary["problems"][:15]]
    lines += ["", "JSON: `benchmarks/results/classroom_load.json`.", END]
    return "\n".join(lines)


def write_section(section: str, begin: str = BEGIN, end: str = END) -> None:
    """Put ``section`` between RESULTS.md's ``begin`` and ``end`` markers (or at its end, the first time)."""
    text = RESULTS_MD.read_text(encoding="utf-8") if RESULTS_MD.exists() else "# MLM Lab benchmarks\n"
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS_MD.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=8, help="browser sessions at once (default 8)")
    parser.add_argument("--duration", type=float, default=240, help="seconds of workshop rounds (default 240)")
    parser.add_argument("--model", default="default", help="the pages' model (default: the bundled default)")
    parser.add_argument("--train-model", default="tiny-random", choices=["tiny-random", "default"],
                        help="what the two training runs train (default tiny-random: a run ends within the test)")
    parser.add_argument("--run-timeout", type=float, default=600, help="seconds to wait for a run to end")
    parser.add_argument("--quick", action="store_true", help="smoke run: 60 s; results go to a temporary folder")
    parser.add_argument("--heavy-students", type=int, default=1,
                        help="the last N students do only the costliest clicks (default 1; 0: none)")
    parser.add_argument("--browser-nice", type=int, default=5,
                        help="run Chromium at this nice value (default 5; 0: as the server): in a class the "
                             "browsers are the students' own machines")
    parser.add_argument("--no-light", dest="light", action="store_false",
                        help="leave out the extra student who only opens light pages and times their loads")
    parser.add_argument("--note", default="", help="a sentence about the machine's state for RESULTS.md "
                        "(other work running at the same time, ...)")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = min(args.duration, 60)
        args.run_timeout = min(args.run_timeout, 300)
    if not Path(CHROMIUM).exists():
        print(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    args.heavy = args.heavy_students > 0
    summary = summarise(asyncio.run(classroom(args)), args)
    section = markdown(summary)
    print(section)
    target = Path(tempfile.gettempdir()) / "mlmlab_benchmarks_quick" / RESULTS_JSON.name if args.quick else RESULTS_JSON
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    if not args.quick:
        write_section(section)
        print(f"wrote the classroom section of {RESULTS_MD}")
    return 0 if summary["exceptions"] == 0 and summary["stalls"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
