"""The teacher key: who may see and stop every session's training run, and how guessing it is slowed down.

`MLMLAB_TEACHER_KEY`, when the server is started with it, lets whoever knows it see and stop every run
(`jobs.RunManager.teacher_runs`, `teacher_stop`). Keys are compared in constant time (both sides hashed
first), and wrong ones are slowed down per client (`TeacherKeyGuard`: a few free, then a wait that
doubles with each one) and logged to the server's terminal.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import threading
import time
from dataclasses import dataclass

from mlm_core.errors import InputError

TEACHER_KEY_ENV = "MLMLAB_TEACHER_KEY"
KEY_FREE_GUESSES = 3  # wrong teacher keys a client may type before it has to wait (typos happen)
KEY_FIRST_WAIT_S = 1.0  # the wait after the first guess past the free ones; it doubles with each next one
KEY_MAX_WAIT_S = 900.0  # a quarter of an hour: at most four guesses an hour, once a client is that deep in

log = logging.getLogger(__name__)  # wrong teacher keys go to the server's terminal (Python's stderr handler)


def teacher_key_set() -> bool:
    """True when the server was started with a teacher key (`MLMLAB_TEACHER_KEY`)."""
    return bool(os.environ.get(TEACHER_KEY_ENV, "").strip())


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def teacher_key_ok(key: str | None) -> bool:
    """Constant time: both sides are hashed first, so not even the key's length shows in the time taken."""
    expected = os.environ.get(TEACHER_KEY_ENV, "").strip()
    return bool(expected) and isinstance(key, str) and hmac.compare_digest(_digest(key), _digest(expected))


@dataclass
class KeyFailures:
    """One client's wrong teacher keys: how many in a row, when the next guess is allowed, the last one's hash."""

    client: str
    count: int = 0
    total: int = 0
    next_allowed: float = 0.0
    last_at: float = 0.0
    last_digest: bytes = b""


class TeacherKeyGuard:
    """Slows down guessing the teacher key, per client (an IP address: every tab of a machine together).

    The first ``KEY_FREE_GUESSES`` wrong keys cost nothing; after that each wrong key makes the
    client wait ``KEY_FIRST_WAIT_S`` seconds, doubling with every next one up to ``KEY_MAX_WAIT_S``.
    While a client waits, every key it sends, right or wrong, is refused unread, so the answer says
    nothing about the key. The same wrong key again (a page redrawn with it still in the box) counts
    once. A right key clears the client's count. Every wrong key is logged (``logging``, to the
    server's terminal) and kept for the teacher view (``failures``). Thread-safe.

    >>> now = [0.0]
    >>> guard = TeacherKeyGuard(clock=lambda: now[0])
    >>> [guard.record_wrong("ip:10.0.0.9", key) for key in ("a", "b", "c", "d", "e", "f")]  # seconds to wait
    [0.0, 0.0, 0.0, 1.0, 2.0, 4.0]
    """

    MAX_CLIENTS = 4096  # a bound on what the guard remembers; the quietest clients are forgotten first

    def __init__(self, *, free: int = KEY_FREE_GUESSES, first_wait_s: float = KEY_FIRST_WAIT_S,
                 max_wait_s: float = KEY_MAX_WAIT_S, clock=time.monotonic):
        self.free, self.first_wait_s, self.max_wait_s = int(free), float(first_wait_s), float(max_wait_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[str, KeyFailures] = {}

    def wait_s(self, client: str) -> float:
        """Seconds until ``client`` may try a key again (0: now)."""
        with self._lock:
            entry = self._clients.get(client)
            return max(0.0, entry.next_allowed - self._clock()) if entry else 0.0

    def repeated(self, client: str, key: str) -> bool:
        """True when ``key`` is the client's last wrong key again (it is not a new guess)."""
        with self._lock:
            entry = self._clients.get(client)
            return entry is not None and bool(entry.last_digest) and hmac.compare_digest(entry.last_digest, _digest(key))

    def record_wrong(self, client: str, key: str) -> float:
        """Count a wrong key from ``client``; returns the seconds it must now wait."""
        now = self._clock()
        with self._lock:
            entry = self._clients.pop(client, None) or KeyFailures(client)
            self._clients[client] = entry  # most recent last: the oldest are forgotten first
            while len(self._clients) > self.MAX_CLIENTS:
                self._clients.pop(next(iter(self._clients)))
            entry.count += 1
            entry.total += 1
            entry.last_at = now
            entry.last_digest = _digest(key)
            over = entry.count - self.free
            wait = 0.0 if over <= 0 else min(self.max_wait_s, self.first_wait_s * 2 ** (over - 1))
            entry.next_allowed = now + wait
            count, total = entry.count, entry.total
        log.warning("Wrong teacher key from %s (%d in a row, %d in all); its next try is allowed in %.0f s.",
                    client, count, total, wait)
        return wait

    def record_right(self, client: str) -> None:
        with self._lock:
            entry = self._clients.get(client)
            if entry is not None:
                entry.count, entry.next_allowed, entry.last_digest = 0, 0.0, b""

    def failures(self) -> list[KeyFailures]:
        """Every client that typed a wrong key since the server started, most recent first (copies)."""
        with self._lock:
            return [KeyFailures(**vars(e)) for e in sorted(self._clients.values(), key=lambda e: -e.last_at)
                    if e.total]

    def check(self, key: str | None, client: str | None) -> None:
        """Pass if ``key`` is the teacher key and ``client`` may try now; else an ``InputError`` that says why."""
        if not teacher_key_set():
            raise InputError(f"No teacher key is set: start the server with {TEACHER_KEY_ENV}=... to use this.")
        client = client or "unknown"
        wait = self.wait_s(client)
        if wait > 0:
            raise InputError(f"Too many wrong teacher keys from this machine: wait {math.ceil(wait):.0f} s before "
                             "the next try.")
        if teacher_key_ok(key):
            self.record_right(client)
            return
        if isinstance(key, str) and key and not self.repeated(client, key):
            wait = self.record_wrong(client, key)
            if wait > 0:
                raise InputError(f"Wrong teacher key. Wait {math.ceil(wait):.0f} s before the next try.")
        raise InputError("Wrong teacher key.")
