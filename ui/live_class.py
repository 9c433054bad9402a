"""The class answers live: the teacher's "Ask the class" panel, each student's answer box, the room's chart.

A page that asks the class calls ``class_question(page, ask)`` with the question it would ask now (``Ask``: the
kind, the prompt, the sentence, and what the model says when the page knows it); every page calls
``live_pointer()`` from the sidebar, which points students to the page of the open question. The board
(``mlm_core.classroom.ClassBoard``) is one per server; who may lead is decided here: the server's own machine
(``session.session_is_local``), or a session that typed the teacher key (``MLMLAB_TEACHER_KEY``, held to the key's
pace of guesses). Everything a student typed is drawn as escaped text, never markdown or HTML.
"""

from __future__ import annotations

import hashlib
import html
import io
import socket
import threading

import pandas as pd
import streamlit as st
from streamlit.runtime import scriptrunner

from mlm_core import classroom
from mlm_core.classroom import PAGES, Ask, ClassBoard, Question, Tally, Who
from mlm_core.errors import InputError
from mlm_core.figures.classroom import class_answers_figure, tally_rows
from mlm_core.jobs import get_manager
from mlm_core.teacher_key import teacher_key_set
from ui import session
from ui.chips import markdown_text
from ui.presenter import PRESENTER_CHART_FONT_PX, chart, table
from ui.settings import KEYS

REFRESH_S = 2.0  # a student's answer box (and, after the reveal, the room) redraws by itself this often
TEACHER_REFRESH_S = 1.0  # the teacher's chart: within 3 s of an answer at p95 with 30 answering (benchmarks.class_answers)
POINTER_REFRESH_S = 4.0  # the sidebar's "the teacher asked" line
PAGE_FILES = {"quiz": "pages/quiz.py", "predictions": "pages/predictions.py", "grammar": "pages/grammar.py",
              "training": "pages/training.py", "masking": "pages/masking.py"}
PAGE_TITLES = {"quiz": "Quiz", "predictions": "Predictions", "grammar": "Grammar", "training": "Training",
               "masking": "Masking"}
TEACHER_OK_KEY = "live_class_teacher"  # session state: this session typed the right teacher key
SHOWN_KEY = "live_class_shown"  # session state: (page, question, held back) as this page run drew them
MAX_LEADERS = 8  # browsers that typed the right key, remembered (a reload keeps the lead), the oldest forgotten first
_leaders: list[str] = []  # those browsers' ids (browser_id), newest last
_leaders_lock = threading.Lock()
XSRF_COOKIE = "_streamlit_xsrf"


def class_board() -> ClassBoard:
    """The one board of this server (``mlm_core.classroom.class_board``: in memory only, a restart clears it; behind
    a relay, with localhost not trusted, every student is 127.0.0.1, so that address may give every answer)."""
    return classroom.class_board(relay=not session.localhost_trusted())


def classroom_mode() -> bool:
    """True when the server listens beyond this machine (``--server.address 0.0.0.0`` or an address)."""
    address = str(st.get_option("server.address") or "").strip()
    return address not in ("", "127.0.0.1", "localhost", "::1")


def browser_of(cookie: str) -> str:
    """A browser's id from its XSRF cookie ("2|mask|masked token|time", hex): the token unmasked and hashed, so
    every tab of the browser (each sent the cookie with a new mask) is one; "" when there is no token.

    >>> browser_of("2|01020304|0b0a0908|1") == browser_of("2|00000000|0a080a0c|2") != ""   # one token, two masks
    True
    """
    parts = str(cookie or "").strip("\"'").split("|")
    try:
        if len(parts) == 4 and parts[0] == "2":
            mask, masked = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
            token = bytes(b ^ mask[i % len(mask)] for i, b in enumerate(masked)) if mask else masked
        else:
            token = str(cookie or "").encode()
    except ValueError:
        token = b""
    return hashlib.sha256(token).hexdigest()[:16] if token else ""


def browser_id() -> str:
    """This browser, the same in each of its tabs (``browser_of`` Streamlit's XSRF cookie), else this session (no
    cookie: XSRF protection off)."""
    try:
        cookie = str(st.context.cookies.get(XSRF_COOKIE) or "")
    except Exception:
        cookie = ""
    found = browser_of(cookie)
    if found:
        return found
    ctx = scriptrunner.get_script_run_ctx()
    return f"session:{ctx.session_id if ctx else 'unknown'}"


def who() -> Who:
    """This session as the board sees it: its machine, its browser, and whether it leads the class (the server's own
    machine, or a browser that typed the teacher key: remembered, so a reload keeps it)."""
    browser = browser_id()
    with _leaders_lock:
        led = browser in _leaders
    teacher = session.session_is_local() or bool(st.session_state.get(TEACHER_OK_KEY)) or led
    return Who(client=session.guess_client(), browser=browser, teacher=teacher)


def _key_client() -> str:
    """Who is guessing the teacher key: the machine (its address), or behind a relay, where every browser shares
    127.0.0.1, the browser, so that one student's wrong guesses cannot lock the teacher out."""
    client = session.guess_client()
    return client if session.localhost_trusted() else f"{client}|{browser_id()}"


def network_url() -> str:
    """The address students type: this machine's network address and the server's port (what Streamlit prints)."""
    port = st.get_option("server.port") or 8501
    address = str(st.get_option("server.address") or "").strip()
    if address in ("", "0.0.0.0", "::"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # no packet is sent
                probe.connect(("192.0.2.1", 80))
                address = probe.getsockname()[0]
        except OSError:
            address = socket.gethostname()
    return f"http://{address}:{port}"


def qr_png(url: str) -> bytes:
    """A QR code of ``url`` as a PNG, made here (segno; no service)."""
    import segno  # the Join panel's only need: the rest of the app runs without it

    buffer = io.BytesIO()
    segno.make(url, error="m").save(buffer, kind="png", scale=10, border=2)
    return buffer.getvalue()


def join_panel() -> None:
    """Presenter view in classroom mode, for the teacher: the address in large type and its QR code."""
    if not (classroom_mode() and st.session_state.get(KEYS.presenter) and who().teacher):
        return
    url = network_url()
    with st.expander("📱 Join the class", expanded=True):
        left, right = st.columns([1, 2])
        try:
            left.image(qr_png(url), width=220, caption="Scan to join")
        except ImportError:
            left.caption("Install segno (requirements.txt) for a QR code.")
        right.markdown(f"<div style='font-size:2.6rem;font-weight:700;word-break:break-all'>"
                       f"{html.escape(url)}</div>", unsafe_allow_html=True)
        right.caption("Open this address on your laptop or phone, on the same network. Answers to a question "
                      "are counted one per machine; nobody sees who answered what.")


def _teacher_key_box() -> None:
    """A teacher away from the server's machine (behind a relay) leads with the teacher key."""
    if session.session_is_local() or not teacher_key_set() or st.session_state.get(TEACHER_OK_KEY):
        return
    key = st.text_input("Teacher key", type="password", key="live_class_key",
                        help="The value of MLMLAB_TEACHER_KEY the server was started with: lead the class's questions "
                             "from this browser.")
    if key:
        try:
            get_manager().key_guard.check(key, _key_client())
            st.session_state[TEACHER_OK_KEY] = True
            browser = browser_id()
            with _leaders_lock:
                if browser in _leaders:
                    _leaders.remove(browser)
                _leaders.append(browser)
                del _leaders[:-MAX_LEADERS]
            st.rerun()
        except InputError as exc:
            st.warning(str(exc))


def _run(action) -> None:
    try:
        action()
    except InputError as exc:
        st.session_state["live_class_problem"] = str(exc)


def _teacher_buttons(page: str, ask: Ask | None, live: Question | None, me: Who) -> None:
    board = class_board()
    here = live is not None and live.page == page
    cols = st.columns(4)
    if cols[0].button("🙋 Ask the class", key=f"live_open_{page}", disabled=ask is None,
                      help=None if ask is None else f"Opens: {ask.prompt}"):
        _run(lambda: board.open(me, page, ask.kind, ask.prompt, context=ask.context, choices=ask.choices,
                                max_number=ask.max_number, reveal=ask.reveal, tokenizer=ask.tokenizer))
        st.rerun()
    if cols[1].button("Close answers", key=f"live_close_{page}", disabled=not (here and live.is_open)):
        _run(lambda: board.close(me, live.qid))
        st.rerun()
    reveal = live.reveal if here and live.reveal is not None else None
    if reveal is None and here and ask is not None and ask.context == live.context:
        reveal = ask.reveal  # the page knows it now (a run that ended)
    if cols[2].button("Reveal", key=f"live_reveal_{page}", disabled=not here or live.revealed or reveal is None,
                      help=(ask.waiting or None) if ask is not None and reveal is None else
                      "Shows every student the class's answers beside the model's"):
        _run(lambda: board.reveal(me, live.qid, reveal))
        st.rerun()
    if cols[3].button("Clear the board", key=f"live_clear_{page}", disabled=live is None):
        _run(lambda: board.clear(me))
        st.rerun()
    problem = st.session_state.pop("live_class_problem", None)
    if problem:
        st.warning(markdown_text(problem))
    if ask is not None and here and reveal is None and ask.waiting:
        st.caption(markdown_text(ask.waiting))


def _answer_box(live: Question, tally: Tally, me: Who) -> None:
    if not live.is_open:
        st.caption("Answers are closed." + (f" Yours: {markdown_text(tally.mine)}." if tally.mine else ""))
        return
    with st.form(f"live_answer_{live.qid}", clear_on_submit=False, border=False):
        placeholder = {"word": "one word", "choice": " / ".join(live.choices), "number": f"0 to {live.max_number}"}
        if live.kind == "choice":
            text = st.radio("Your answer", live.choices, index=None, horizontal=True, key=f"live_choice_{live.qid}")
        else:
            text = st.text_input("Your answer", max_chars=40, placeholder=placeholder[live.kind],
                                 key=f"live_text_{live.qid}")
        sent = st.form_submit_button("Send my answer")
    said = f"live_said_{live.qid}"  # the last send's outcome, kept until the next: the fragment redraws every 2 s
    if sent:
        try:
            counted = class_board().answer(me, live.qid, text if text is not None else "")
            st.session_state[said] = ("success", f"Counted: {markdown_text(counted)}. You can change it until the "
                                                 "teacher closes the question.")
        except InputError as exc:
            st.session_state[said] = ("warning", markdown_text(str(exc)) + (
                f" Your answer stays {markdown_text(tally.mine)}." if tally.mine else " Nothing was counted."))
    kind, message = st.session_state.get(said, (None, None))
    if kind == "success":
        st.success(message)
    elif kind == "warning":
        st.warning(message)
    if tally.mine and kind != "success":
        st.caption(f"Your answer: {markdown_text(tally.mine)}. You can change it until the teacher closes the question.")


def _room(tally: Tally, page: str) -> None:
    presenter = bool(st.session_state.get(KEYS.presenter))
    fig = class_answers_figure(tally, height=460 if presenter else 360,
                               font_px=PRESENTER_CHART_FONT_PX if presenter else None)
    chart(fig, f"live_chart_{page}", name="class_answers")
    rows = [{**row, "answer": markdown_text(row["answer"])} for row in tally_rows(tally)]  # st.table reads markdown
    if rows:
        table(pd.DataFrame(rows), key=f"live_table_{page}", static=True)
    if tally.reveal is not None and tally.reveal.note:
        st.markdown(f"**The model:** {markdown_text(tally.reveal.note)}")


def _held(page: str, live: Question | None, me: Who) -> tuple:
    """What this page run showed a student: (page, question, whether the page's answer was held back)."""
    on_page = live is not None and live.page == page
    return page, live.qid if on_page else None, on_page and not me.teacher and not live.revealed


def _live_view(page: str) -> None:
    board, me = class_board(), who()
    board.here(me)
    live = board.live()
    if not me.teacher and st.session_state.get(SHOWN_KEY) != _held(page, live, me):
        st.rerun(scope="app")  # a new question for this page, or its reveal: the whole page redraws once
    if live is None or live.page != page:
        return
    tally = board.tally(me, live.qid)
    st.markdown(f"**🙋 The teacher asks** ({live.status}): {markdown_text(live.prompt)}")
    if live.context:
        st.markdown(f"> {markdown_text(live.context)}")
    if not me.teacher:
        _answer_box(live, tally, me)
    if me.teacher or live.revealed:
        _room(tally, page)
    else:
        st.caption(f"{tally.answered} answered so far. The class's answers appear here when the teacher reveals them.")


def class_question(page: str, ask: Ask | None, *, hold: bool = False) -> None:
    """The page's part in the class's live question: the teacher's panel, the answer box, the chart.

    ``ask``: the question this page would open now, or None when it has nothing to ask yet. ``hold``: while this
    page's question is open, a student's page stops here (the rest of it would show the model's answer) and says
    why; it redraws in full when the teacher reveals.
    """
    assert page in PAGES, page
    me = who()
    live = class_board().live()
    shown = st.session_state[SHOWN_KEY] = _held(page, live, me)
    if me.teacher or (live is not None and live.page == page):
        with st.expander("🙋 Ask the class" if me.teacher else "🙋 The class's question",
                         expanded=live is not None and live.page == page):
            if me.teacher:
                if not classroom_mode():
                    st.caption("Students answer from their own browsers once the server runs in classroom mode "
                               "(README, Classroom).")
                if ask is not None:
                    st.caption(f"This page asks: {markdown_text(ask.prompt)}")
                _teacher_buttons(page, ask, live, me)
            st.fragment(_live_view, run_every=TEACHER_REFRESH_S if me.teacher else REFRESH_S)(page)
    elif teacher_key_set() and not session.session_is_local():
        with st.expander("🙋 Ask the class (teacher)", expanded=False):
            _teacher_key_box()
    if hold and shown[2]:
        st.info("The rest of this page would give the answer away: it appears here when the teacher reveals the "
                "class's answers.")
        st.stop()


def _pointer() -> None:
    board, me = class_board(), who()
    live = board.live()
    shown = st.session_state.get(SHOWN_KEY)
    if (not me.teacher and shown is not None and live is not None and live.page == shown[0]
            and live.qid != shown[1]):
        st.rerun(scope="app")  # the teacher just asked on the page this student is on: show it now
    if live is None or not live.is_open:
        return
    board.here(me)
    st.markdown(f"**🙋 The teacher asks on {PAGE_TITLES[live.page]}:** {markdown_text(live.prompt)}")
    try:
        st.page_link(PAGE_FILES[live.page], label=f"Answer on {PAGE_TITLES[live.page]} →")
    except Exception:  # a page run on its own (AppTest) has no navigation to link into
        pass


def live_pointer() -> None:
    """The sidebar's line on every page: where the open question is (redrawn by itself)."""
    st.session_state.pop(SHOWN_KEY, None)  # set again by the page, if it asks the class
    with st.sidebar:
        st.fragment(_pointer, run_every=POINTER_REFRESH_S)()


def class_answers_rows(page: str) -> list[dict]:
    """The page's latest revealed question as table rows, for the lesson export (nothing before the reveal)."""
    board = class_board()
    live = board.live()
    if live is None or live.page != page or not live.revealed:
        return []
    tally = board.tally(who(), live.qid)
    return [{"question": live.prompt, **row} for row in tally_rows(tally)] if tally else []
