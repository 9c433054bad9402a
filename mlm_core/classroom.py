"""The class answers live: the teacher asks, every student answers from their own browser, the room sees the tally.

One ``ClassBoard`` per server holds the questions and their answers (what the class shares on purpose, in the
house plan's words). It is bounded, locked, and written only through methods that check who may write:

- only a ``Who`` with ``teacher=True`` (the server's own machine, or whoever typed the teacher key: the UI
  decides) opens, closes, reveals and clears a question; a student's call is refused with a message;
- a student answers the open question once per machine (``Who.client``, an IP address) and may change that
  answer until the teacher closes it; a second browser on the same address is refused unless the server allows
  more per address (a class behind one NAT or relay); the answer is normalised and checked (``check_answer``)
  before it is counted, and nothing else changes when it is refused;
- a student sees the class's answers only once the teacher reveals them, and never who gave which;
- at most ``max_questions`` questions are kept (the oldest go first), ``max_answers`` answers each, and one
  browser's answers are rate-limited (``max_changes`` in ``window_s``); nothing is written to disk, and the
  board lives in the server's memory only: a restart starts an empty board, by design.

>>> board = ClassBoard()
>>> teacher, ana, ben = Who("session:t", "t", teacher=True), Who("ip:10.0.0.2", "a"), Who("ip:10.0.0.3", "b")
>>> q = board.open(teacher, "grammar", "choice", "Which sentence does the model prefer?", choices=("A", "B"))
>>> board.answer(ana, q.qid, " a "), board.answer(ben, q.qid, "B"), board.answer(ana, q.qid, "b")
('A', 'B', 'B')
>>> board.tally(ben, q.qid).counts, board.tally(teacher, q.qid).counts   # a student sees nothing before the reveal
((), (('B', 2),))
>>> board.open(ana, "grammar", "choice", "?", choices=("A", "B"))
Traceback (most recent call last):
...
mlm_core.errors.InputError: Only the teacher (on the server's own machine) can open, close or reveal a question.
"""

from __future__ import annotations

import secrets
import threading
import time
import unicodedata
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from mlm_core.data import token_pieces
from mlm_core.errors import InputError
from mlm_core.server_budget import env_int

__all__ = ["class_board", "reset_class_board", "KINDS", "PAGES", "MAX_ANSWER_CHARS", "Who", "Reveal", "Ask", "Question", "Tally", "ClassBoard",
           "check_answer", "word_of", "model_words", "board_limits"]

KINDS = ("word", "choice", "number")
PAGES = ("quiz", "predictions", "grammar", "training", "masking")  # the pages that ask the class
MAX_ANSWER_CHARS = 40  # one word or a number; the box takes no more
MAX_PROMPT_CHARS = 300
MAX_CONTEXT_CHARS = 600
MAX_CHOICES = 6
TOP_K_SHOWN = 10  # the model's candidates shown beside the class's words
PRESENCE_S = 30.0  # a browser whose page asked within this long counts as connected
ENV_QUESTIONS, ENV_ANSWERS, ENV_PER_ADDRESS = "MLMLAB_CLASS_QUESTIONS", "MLMLAB_CLASS_ANSWERS", "MLMLAB_CLASS_PER_ADDRESS"
ONLY_TEACHER = "Only the teacher (on the server's own machine) can open, close or reveal a question."


@dataclass(frozen=True)
class Who:
    """Who is calling: the machine (``client``, "ip:…" for a student), the browser on it, and whether it leads."""

    client: str
    browser: str
    teacher: bool = False

    @property
    def voter(self) -> str:
        return f"{self.client}|{self.browser}"


@dataclass(frozen=True)
class Reveal:
    """What the model said, shown beside the class's answers once revealed.

    ``model``: for a word question the model's top candidates as (word, probability); for a choice or a number
    the model's pick as ((choice, score), …). ``truth``: the right answer, if there is one. ``note``: one sentence
    from the page (a PLL margin, how many tokens the rule selected).
    """

    model: tuple[tuple[str, float], ...] = ()
    truth: str = ""
    note: str = ""


@dataclass(frozen=True)
class Ask:
    """The question a page would ask the class now (its view-model makes it), and what the model says when the
    page already knows it."""

    kind: str
    prompt: str
    context: str = ""
    choices: tuple[str, ...] = ()
    max_number: int = 0
    tokenizer: Any = field(default=None, compare=False, repr=False)
    reveal: Reveal | None = None  # None: the page cannot say yet (a run still training)
    waiting: str = ""  # why it cannot say yet


@dataclass(frozen=True)
class Question:
    qid: str
    page: str
    kind: str
    prompt: str
    context: str = ""  # the sentence or setting the question is about, shown with it
    choices: tuple[str, ...] = ()
    max_number: int = 0
    opened: float = 0.0
    status: str = "open"  # open → closed (answers kept, none taken) → revealed (everyone sees the tally)
    reveal: Reveal | None = None  # kept hidden from students until status is "revealed"
    tokenizer: Any = field(default=None, compare=False, repr=False)  # a word's check: the model's own pieces

    @property
    def is_open(self) -> bool:
        return self.status == "open"

    @property
    def revealed(self) -> bool:
        return self.status == "revealed"


@dataclass(frozen=True)
class Tally:
    """One question's answers as a viewer may see them: counts by answer (none for a student before the reveal)."""

    question: Question
    counts: tuple[tuple[str, int], ...]  # most given first
    answered: int  # machines that answered (shown to everyone: it says the room is answering)
    connected: int  # browsers whose pages asked lately (students only)
    mine: str | None  # this viewer's own answer
    reveal: Reveal | None  # the model's answer, for the teacher always, for students once revealed


def board_limits(relay: bool = False) -> dict[str, int]:
    """The board's limits as the server was started: questions kept, answers per question, answers per address
    (``relay``: every student arrives from one address, so by default that address may give every answer).

    >>> board_limits()["per_address"], board_limits(relay=True)["per_address"] == board_limits()["max_answers"]
    (1, True)
    """
    answers = max(1, env_int(ENV_ANSWERS, 200))
    return {"max_questions": max(1, env_int(ENV_QUESTIONS, 20)), "max_answers": answers,
            "per_address": max(1, env_int(ENV_PER_ADDRESS, answers if relay else 1))}


def _visible(text: str) -> str:
    """The text with control and format characters (zero-width spaces, bidi overrides) taken out."""
    return "".join(c for c in text if unicodedata.category(c)[0] != "C")


def check_answer(question: Question, text: Any) -> str:
    """A student's answer as it is counted, or an ``InputError`` that says what the question takes.

    A word is one word of the model's vocabulary, compared as the model writes it (case folded where the
    tokenizer folds it, no ``##``); a choice is one of the choices (any case); a number is a whole number from
    0 to the question's largest.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> q = Question("q", "predictions", "word", "What will the model guess?", tokenizer=load_default_tokenizer())
    >>> check_answer(q, "  Paris "), check_answer(Question("n", "masking", "number", "How many?", max_number=12), " 3")
    ('paris', '3')
    >>> check_answer(q, "Veldoria")
    Traceback (most recent call last):
    ...
    mlm_core.errors.InputError: The model reads 'Veldoria' as 3 pieces (ve ##ld ##oria): it can only guess one piece at a [MASK], so answer with one word it knows.
    """
    if not isinstance(text, str):
        raise InputError("Type an answer first.")
    if len(text) > 4 * MAX_ANSWER_CHARS:
        raise InputError(f"An answer is at most {MAX_ANSWER_CHARS} characters.")
    raw = " ".join(_visible(" ".join(unicodedata.normalize("NFKC", text).split())).split())  # a new line is a space
    if not raw:
        raise InputError("Type an answer first.")
    if len(raw) > MAX_ANSWER_CHARS:
        raise InputError(f"An answer is at most {MAX_ANSWER_CHARS} characters.")
    if question.kind == "choice":
        for choice in question.choices:
            if raw.casefold() == choice.casefold():
                return choice
        raise InputError("Answer with one of: " + ", ".join(repr(c) for c in question.choices) + ".")
    if question.kind == "number":
        if not raw.isdigit() or not raw.isascii():
            raise InputError(f"Answer with a whole number from 0 to {question.max_number}.")
        value = int(raw)
        if value > question.max_number:
            raise InputError(f"Answer with a whole number from 0 to {question.max_number}.")
        return str(value)
    if " " in raw:
        raise InputError("One word, please: the model fills one [MASK] with one word.")
    tokenizer = question.tokenizer
    if tokenizer is None:
        return raw.lower()
    pieces = token_pieces(tokenizer, raw)
    unknown = getattr(tokenizer, "unk_token", None)
    if set(pieces) & set(getattr(tokenizer, "all_special_tokens", ())) - {unknown}:
        raise InputError(f"{raw!r} is one of the model's special tokens, not a word: answer with a word.")
    if len(pieces) != 1 or pieces[0] == unknown:
        shown = " ".join(pieces[:6]) + (" …" if len(pieces) > 6 else "")
        if len(pieces) == 1:
            raise InputError(f"The model does not know {raw!r}: it reads it as {shown}. Answer with a word it knows.")
        raise InputError(f"The model reads {raw!r} as {len(pieces)} pieces ({shown}): it can only guess one piece at "
                         "a [MASK], so answer with one word it knows.")
    with_space = token_pieces(tokenizer, " " + raw)  # a byte-level BPE marks a word start ("Ġparis"): either counts
    piece = pieces[0] if len(with_space) != 1 else with_space[0]
    return word_of(tokenizer, piece)


def word_of(tokenizer, piece: str) -> str:
    """A vocabulary piece as the room reads it: no ``##``, ``Ġ`` or ``▁`` marks (the model's candidates and the
    class's words are compared in this form)."""
    word = tokenizer.convert_tokens_to_string([piece]).strip() if tokenizer is not None else piece
    return (word[2:] if word.startswith("##") and len(word) > 2 else word) or piece


def model_words(tokenizer, tokens: Sequence[str], probs: Sequence[float]) -> tuple[tuple[str, float], ...]:
    """The model's candidates as the room reads them (``word_of``), most likely first: pieces that are one word to
    the room ("paris" and "Ġparis") are one candidate, their probabilities summed."""
    merged: dict[str, float] = {}
    for token, p in zip(tokens, probs):
        word = word_of(tokenizer, token)
        merged[word] = merged.get(word, 0.0) + float(p)
    return tuple(merged.items())


class ClassBoard:
    """The questions the teacher asked on this server and the class's answers: bounded, locked, in memory only."""

    def __init__(self, max_questions: int = 20, max_answers: int = 200, per_address: int = 1, *,
                 max_changes: int = 5, window_s: float = 5.0, clock=time.monotonic):
        self.max_questions, self.max_answers, self.per_address = max_questions, max_answers, per_address
        self.max_changes, self.window_s = max_changes, window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._questions: dict[str, Question] = {}  # oldest first
        self._answers: dict[str, dict[str, tuple[str, str]]] = {}  # qid -> voter -> (client, answer)
        self._recent: dict[str, deque] = {}  # voter -> times of its latest answers (the rate limit)
        self._seen: dict[str, float] = {}  # student voter -> last time its page asked
        self.version = 0  # bumped by every change (what a test or a benchmark watches)

    # ------------------------------------------------------------------ the teacher
    @staticmethod
    def _check_teacher(who: Who) -> None:
        if not (isinstance(who, Who) and who.teacher):
            raise InputError(ONLY_TEACHER)

    def open(self, who: Who, page: str, kind: str, prompt: str, *, context: str = "", choices: Sequence[str] = (),
             max_number: int = 0, reveal: Reveal | None = None, tokenizer=None) -> Question:
        """Ask the class: the new question is the live one (an open one before it is closed, its answers kept)."""
        self._check_teacher(who)
        if page not in PAGES or kind not in KINDS:
            raise InputError(f"A question belongs to one of the pages {', '.join(PAGES)} and is a {', '.join(KINDS)}.")
        choices = tuple(str(c)[:MAX_ANSWER_CHARS] for c in choices)[:MAX_CHOICES]
        if kind == "choice" and len(set(c.casefold() for c in choices)) < 2:
            raise InputError("A choice question needs two different choices or more.")
        with self._lock:
            qid = secrets.token_hex(6)
            for old, q in list(self._questions.items()):
                if q.is_open:
                    self._questions[old] = replace(q, status="closed")
            self._questions[qid] = Question(qid, page, kind, str(prompt)[:MAX_PROMPT_CHARS],
                                            str(context)[:MAX_CONTEXT_CHARS], choices, max(0, int(max_number)),
                                            self._clock(), "open", reveal, tokenizer)
            self._answers[qid] = {}
            while len(self._questions) > self.max_questions:
                oldest = next(iter(self._questions))
                del self._questions[oldest]
                self._answers.pop(oldest, None)
            self.version += 1
            return self._questions[qid]

    def _set(self, who: Who, qid: str, change) -> Question:
        """``change(question)`` → the question as it is now, read and written under one lock (two teacher tabs)."""
        self._check_teacher(who)
        with self._lock:
            q = self._questions.get(str(qid))
            if q is None:
                raise InputError("That question is gone: the board keeps the newest "
                                 f"{self.max_questions} (or it was cleared).")
            q = self._questions[q.qid] = change(q)
            self.version += 1
            return q

    def close(self, who: Who, qid: str) -> Question:
        """No more answers; the tally stays with the teacher until the reveal (a revealed question stays revealed)."""
        return self._set(who, qid, lambda q: q if q.revealed else replace(q, status="closed"))

    def reveal(self, who: Who, qid: str, reveal: Reveal | None = None) -> Question:
        """Close it and show everyone the class's answers beside what the model said (``reveal``, or the one given
        when it was opened)."""
        return self._set(who, qid, lambda q: replace(q, status="revealed", reveal=reveal if reveal is not None
                                                     else q.reveal))

    def clear(self, who: Who) -> None:
        """Every question and answer gone (a new lesson)."""
        self._check_teacher(who)
        with self._lock:
            self._questions.clear()
            self._answers.clear()
            self._recent.clear()
            self._seen.clear()
            self.version += 1

    # ------------------------------------------------------------------ the class
    def answer(self, who: Who, qid: str, text: Any) -> str:
        """Count this machine's answer (or change it) while the question is open; returns it as counted."""
        if not isinstance(who, Who):
            raise InputError("Only a connected browser can answer.")
        with self._lock:
            q = self._questions.get(str(qid))
        if q is None:
            raise InputError("That question is gone.")
        if not q.is_open:
            raise InputError("The teacher has closed this question: your answer stays as it was.")
        answer = check_answer(q, text)  # outside the lock: the tokenizer takes its own
        with self._lock:
            q = self._questions.get(q.qid)
            if q is None or not q.is_open:
                raise InputError("The teacher has closed this question: your answer stays as it was.")
            answers = self._answers[q.qid]
            now = self._clock()
            recent = self._recent.setdefault(who.voter, deque(maxlen=self.max_changes))
            if len(recent) == self.max_changes and now - recent[0] < self.window_s:
                raise InputError(f"Too many answers from this browser: wait {self.window_s:.0f} seconds, then answer "
                                 "again. Your last answer is still counted.")
            if who.voter not in answers:
                if len(answers) >= self.max_answers:
                    raise InputError(f"This question has taken its {self.max_answers} answers.")
                if sum(client == who.client for client, _ in answers.values()) >= self.per_address:
                    raise InputError("This machine has answered already (from another browser or tab): one answer "
                                     "per machine, which that browser can change.")
            recent.append(now)
            if len(self._recent) > 4 * self.max_answers:  # the limiter remembers recent machines only
                for voter in [v for v, times in self._recent.items() if not times or now - times[-1] > self.window_s]:
                    del self._recent[voter]
            answers[who.voter] = (who.client, answer)
            self.version += 1
            return answer

    def here(self, who: Who) -> None:
        """This student's page is open: it counts among the connected for ``PRESENCE_S`` seconds."""
        if who.teacher:
            return
        with self._lock:
            now = self._clock()
            self._seen[who.voter] = now
            if len(self._seen) > 4 * self.max_answers:
                for voter in [v for v, t in self._seen.items() if now - t > PRESENCE_S]:
                    del self._seen[voter]

    # ------------------------------------------------------------------ reading
    def question(self, qid: str | None) -> Question | None:
        with self._lock:
            return self._questions.get(str(qid)) if qid else None

    def live(self) -> Question | None:
        """The newest question (open, closed or revealed), the one every page points to."""
        with self._lock:
            return next(reversed(self._questions.values()), None)

    def tally(self, who: Who, qid: str) -> Tally | None:
        """The answers as ``who`` may see them (a student: only the count before the reveal, and their own)."""
        with self._lock:
            q = self._questions.get(str(qid))
            if q is None:
                return None
            answers = list(self._answers.get(q.qid, {}).items())  # a copy: answers arrive while the chart is drawn
            now = self._clock()
            connected = sum(now - t <= PRESENCE_S for t in self._seen.values())
            mine = dict(answers).get(who.voter, (None, None))[1] if isinstance(who, Who) else None
            sees = isinstance(who, Who) and (who.teacher or q.revealed)
        counts: dict[str, int] = {}
        for _, (_, answer) in answers:
            counts[answer] = counts.get(answer, 0) + 1
        order = tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) if sees else ()
        return Tally(q, order, len(answers), max(connected, len(answers)), mine, q.reveal if sees else None)


_board: ClassBoard | None = None
_board_lock = threading.Lock()


def class_board(relay: bool = False) -> ClassBoard:
    """The one board of this process (the server), made on first use from the environment (``board_limits``; the
    first caller says whether the server is behind a relay). Not in Streamlit's ``cache_resource``: any browser may
    ask Streamlit to clear every cache, and a student must not wipe the class's questions."""
    global _board
    with _board_lock:
        if _board is None:
            _board = ClassBoard(**board_limits(relay))
        return _board


def reset_class_board(**limits) -> ClassBoard:
    """A fresh, empty board (tests; a server restart does the same): ``limits`` as ``ClassBoard`` takes them."""
    global _board
    with _board_lock:
        _board = ClassBoard(**{**board_limits(), **limits})
        return _board
