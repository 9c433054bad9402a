"""What every session keeps, together: one budget per kind of thing a class's sessions hold on one server.

A session keeps what it made (trained models, ``session_models.TrainedModels``; vocabularies trained on the
Tokenizer page, ``vocab.VocabCache``) in its own store, which goes with the session. Many sessions share one
server, so every store also registers with its kind's ``ServerBudget``: all sessions' entries together stay
within a count and a number of bytes. When a new entry does not fit, the budget drops the least recently used
entry of the client (IP address) that holds the most, and that session is told (its store's notes): a student
keeping things in four tabs loses their own first.

A store is anything with ``client`` (who it belongs to), ``entries()`` (each with ``key``, ``label``,
``nbytes`` and ``used``, a one-item list holding when it was last used) and ``drop(key, note)``.

>>> class Store:
...     def __init__(self, client): self.client, self.kept, self.notes = client, [], []
...     def entries(self): return list(self.kept)
...     def drop(self, key, note): self.kept = [e for e in self.kept if e.key != key]; self.notes.append(note)
>>> from types import SimpleNamespace as Entry
>>> budget = ServerBudget("vocabularies", max_entries=2, max_bytes=100)
>>> a, b = Store("ip:1"), Store("ip:2")
>>> budget.register(a); budget.register(b)
>>> a.kept = [Entry(key="x", label="WordPiece 500", nbytes=40, used=[1.0]), Entry(key="y", label="BPE 500", nbytes=40, used=[2.0])]
>>> budget.make_room(30, keep=b)  # ip:1 holds the most: its least recently used goes
>>> [e.key for e in a.kept], a.notes[0][:44]
(['y'], 'WordPiece 500 was dropped to make room: the ')
"""

from __future__ import annotations

import os
import threading
import weakref


def env_int(name: str, default: int) -> int:
    """A whole number from the environment, or ``default`` when it is unset or not one."""
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else default


class ServerBudget:
    """Every session's entries of one kind together: at most ``max_entries`` and ``max_bytes`` on the server.

    Stores register here (weakly: a store that ended with its session is gone). ``make_room`` drops, one at a
    time, the least recently used entry of the client holding the most bytes, until the new one fits; its
    session gets a note. ``what`` names the kind in that note ("trained models"); 0 entries keeps none.
    """

    def __init__(self, what: str, max_entries: int, max_bytes: int):
        self.what = what
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.lock = threading.RLock()  # taken before any store's own lock, never after
        self._stores: weakref.WeakSet = weakref.WeakSet()

    @property
    def max_models(self) -> int:  # the trained models' store reads its budget's count under this name
        return self.max_entries

    def register(self, store) -> None:
        with self.lock:
            self._stores.add(store)

    def held(self) -> tuple[int, int]:
        """(entries, bytes) kept by every session now."""
        with self.lock:
            entries = [e for store in list(self._stores) for e in store.entries()]
        return len(entries), sum(e.nbytes for e in entries)

    def make_room(self, nbytes: int, keep) -> None:
        """Drop entries of other sessions (or ``keep``'s own oldest) until one more of ``nbytes`` fits."""
        with self.lock:
            while True:
                held = [(store, e) for store in list(self._stores) for e in store.entries()]
                if len(held) + 1 <= self.max_entries and sum(e.nbytes for _, e in held) + nbytes <= self.max_bytes:
                    return
                if not held:
                    return
                by_client: dict[str, int] = {}
                for store, e in held:
                    by_client[store.client] = by_client.get(store.client, 0) + e.nbytes
                biggest = max(by_client.values())
                store, victim = min(((st, e) for st, e in held if by_client[st.client] == biggest),
                                    key=lambda pair: pair[1].used[0])
                store.drop(victim.key, f"{victim.label} was dropped to make room: the server keeps "
                           f"{self.max_entries} {self.what} ({self.max_bytes / 2**20:,.0f} MB) for the whole "
                           "class, and it was the least recently used of the machine holding the most. "
                           "Make it again to get it back.")
