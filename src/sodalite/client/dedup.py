"""DuplicateFilter: the receiver's memory of the MessageIds it has already processed.

Theory of operation. Active and passive replication put two copies of a message in two
namespaces; the receiver must let the first through and drop the second (seed:
outages-and-disasters, "the receiver must maintain a list of messages that it has already
received"). The filter is that list, bounded two ways: an entry is forgotten once it is older than
``window`` and, when more than ``max_entries`` are held, the oldest go first. A copy that arrives
after its id was forgotten is delivered again, so the window must cover the longest time the two
copies can be apart (an outage of one namespace).

What is recorded, and when, is the receiver's business (clarification 15): an id is recorded when
a copy is completed (or, in ReceiveAndDelete, handed to the application); an abandoned copy
records nothing. The filter itself only answers "recorded?" and "record".

With ``path``, the entries live in a SQLite file too (WAL, synchronous=FULL): ``record`` returns
only once the entry is on disk, so a receiver restarted after a crash still drops the copies it
had completed before. The in-memory map mirrors the file and answers every lookup.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import TracebackType

from sodalite.errors import ConfigurationError

_SCHEMA = "CREATE TABLE IF NOT EXISTS recorded (message_id TEXT PRIMARY KEY, recorded_at REAL NOT NULL)"


class DuplicateFilter:
    """A bounded, time-windowed set of MessageIds, optionally persisted in a SQLite file.

    ``window``: how long an id is remembered; ``max_entries``: at most this many ids are held
    (the oldest are forgotten first); ``path``: a SQLite file that keeps the ids across restarts;
    ``clock``: seconds since the epoch (tests pass a fake one).
    """

    def __init__(self, *, window: timedelta = timedelta(hours=1), max_entries: int = 100_000,
                 path: str | Path | None = None, clock: Callable[[], float] = time.time) -> None:
        if window <= timedelta(0):
            raise ConfigurationError(f"DuplicateFilter window must be positive, not {window}")
        if max_entries < 1:
            raise ConfigurationError(f"DuplicateFilter max_entries must be at least 1, not {max_entries}")
        self.window = window
        self.max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, float] = OrderedDict()  # message id -> recorded at, oldest first
        self._db: sqlite3.Connection | None = None
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self._db = _open(self.path)
            now = self._clock()
            rows = self._db.execute("SELECT message_id, recorded_at FROM recorded WHERE recorded_at > ? "
                                    "ORDER BY recorded_at DESC LIMIT ?",
                                    (now - window.total_seconds(), max_entries)).fetchall()
            for message_id, recorded_at in reversed(rows):
                self._entries[str(message_id)] = float(recorded_at)
            with self._db:
                self._db.execute("DELETE FROM recorded WHERE recorded_at <= ?", (now - window.total_seconds(),))

    def __contains__(self, message_id: object) -> bool:
        if not isinstance(message_id, str):
            return False
        with self._lock:
            self._expire(self._clock())
            return message_id in self._entries

    def seen(self, message_id: str) -> bool:
        """True if ``message_id`` was recorded within the window."""
        return message_id in self

    def record(self, message_id: str) -> None:
        """Remember ``message_id`` from now on; with a file, returns once the entry is durable."""
        now = self._clock()
        with self._lock:
            self._entries.pop(message_id, None)
            self._entries[message_id] = now
            evicted = self._expire(now)
            if self._db is not None:
                with self._db:
                    self._db.execute("INSERT OR REPLACE INTO recorded (message_id, recorded_at) VALUES (?, ?)",
                                     (message_id, now))
                    if evicted:
                        self._db.executemany("DELETE FROM recorded WHERE message_id = ?",
                                             [(e,) for e in evicted])

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._entries)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> DuplicateFilter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _expire(self, now: float) -> list[str]:
        """Forget ids past the window or over the bound; returns them (the caller holds the lock)."""
        horizon = now - self.window.total_seconds()
        evicted: list[str] = []
        while self._entries:
            oldest, recorded_at = next(iter(self._entries.items()))
            if recorded_at > horizon and len(self._entries) <= self.max_entries:
                break
            del self._entries[oldest]
            evicted.append(oldest)
        return evicted


def _open(path: Path) -> sqlite3.Connection:
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(_SCHEMA)
        db.execute("SELECT message_id, recorded_at FROM recorded LIMIT 1").fetchall()
    except sqlite3.DatabaseError as error:
        raise ConfigurationError(f"the duplicate filter file {path} is not a usable SQLite database: {error}"
                                 ) from error
    db.isolation_level = "DEFERRED"  # transactions per `with db:` from here on
    return db
