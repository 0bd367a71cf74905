"""A delivery trace for tests (``sodalite serve --delivery-trace PATH``, hidden from ``--help``).

Theory of operation. ReceiveAndDelete is at most once: a message is deleted before its transfer
and counts as received once its transfer is written. The SDKs drop what they prefetched when a
receiver closes, so a test cannot count received messages on the client alone; it counts them
against this trace, which the broker appends to as things happen, one JSON object per line:

- ``{"event": "written", "entity": ..., "sequence_number": n, "link": name}``: a ReceiveAndDelete
  transfer was handed to the socket (the connection's write);
- ``{"event": "detached", "entity": ..., "link": name}``: the broker processed that receiver link's
  detach (its own or the peer's, or the end of its session or connection); a transfer written
  for the link after this line crossed the peer's detach;
- ``{"event": "restored", "entity": ..., "sequence_number": n}``: a ReceiveAndDelete message whose
  transfer was never written was handed back to be put back in place.

Test-only: each line is written and flushed at once (no fsync), which costs time no production
broker should pay. Nothing here is read by the broker.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TextIO


class DeliveryTrace:
    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def _line(self, entry: dict[str, object]) -> None:
        with self._lock:
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def written(self, entity: str, sequence_number: int, link: str) -> None:
        self._line({"event": "written", "entity": entity, "sequence_number": sequence_number, "link": link})

    def detached(self, entity: str, link: str) -> None:
        self._line({"event": "detached", "entity": entity, "link": link})

    def restored(self, entity: str, sequence_number: int) -> None:
        self._line({"event": "restored", "entity": entity, "sequence_number": sequence_number})

    def close(self) -> None:
        with self._lock:
            self._file.close()


_current: DeliveryTrace | None = None


def current() -> DeliveryTrace | None:
    """The trace this process writes, or None (the default: no trace)."""
    return _current


def start(path: Path) -> DeliveryTrace:
    global _current
    _current = DeliveryTrace(path)
    return _current
