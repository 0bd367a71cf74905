"""Duplicate detection of one partition (RequiresDuplicateDetection). Pure and clock-free.

Theory of operation: the detector remembers, for every MessageId it accepted, when it first saw it
(ms). A message whose id was seen within the history window (DuplicateDetectionHistoryTimeWindow,
20 s to 7 days in Service Bus, 10 min by default) is a duplicate: the send acknowledges it and the
broker drops it. A message without a MessageId never is one.

An entry seen at ``t`` counts while ``now - window <= t``, the edge included; from
``t + window + 1`` on it does not count, and :meth:`DuplicateDetector.prune` drops it. Pruning is
only garbage collection: an entry past its window never makes a duplicate, pruned or not, so the
caller may prune whenever it likes (on each send is cheap). A min-heap by time keeps pruning
amortised O(log n) per entry; entries replaced by a later :meth:`~DuplicateDetector.remember` of
the same id stay in the heap as stale entries, skipped when they reach the top and swept out when
they outnumber the live ones.

The detector mirrors what the store holds: build it from the partition snapshot's
``duplicate_history``, and for every :meth:`~DuplicateDetector.remember` and every id
:meth:`~DuplicateDetector.prune` returns, add the matching store operation to the same batch
(``RememberMessageIds`` upserts, ``ForgetMessageIds`` deletes). When a batch fails, rebuild the
detector from the store, as the partition itself is rebuilt.

Time is always an argument (ms); nothing here reads a clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from sodalite.errors import ConfigurationError

_COMPACT_SLACK = 64  # stale heap entries tolerated beyond as many as there are live ones


class DuplicateDetector:
    """The MessageIds one partition has seen within its duplicate-detection window."""

    __slots__ = ("_heap", "_seen", "_window")

    def __init__(self, window_ms: int, history: Iterable[tuple[str, int]] = ()) -> None:
        """``history``: (message id, first-seen time in ms) pairs, e.g. a snapshot's
        ``duplicate_history``; entries already past the window are kept until :meth:`prune`.
        Should an id appear more than once, its latest time wins."""
        if window_ms <= 0:
            raise ConfigurationError(f"duplicate detection history time window: must be > 0 ms, got {window_ms}")
        self._window = window_ms
        self._seen: dict[str, int] = {}
        for message_id, seen_at in history:
            previous = self._seen.get(message_id)
            if previous is None or seen_at > previous:
                self._seen[message_id] = seen_at
        self._heap: list[tuple[int, str]] = [(seen_at, message_id) for message_id, seen_at in self._seen.items()]
        heapq.heapify(self._heap)

    @property
    def window_ms(self) -> int:
        return self._window

    def __len__(self) -> int:
        """Ids held, including ones past their window that :meth:`prune` has not dropped yet."""
        return len(self._seen)

    def is_duplicate(self, message_id: str | None, now: int) -> bool:
        """Whether a message with this id was seen at or after ``now - window``; never for ``None``."""
        if message_id is None:
            return False
        seen_at = self._seen.get(message_id)
        return seen_at is not None and seen_at >= now - self._window

    def remember(self, message_id: str, now: int) -> None:
        """Record ``message_id`` as seen at ``now``, replacing any earlier entry (as the store's upsert does).

        The caller remembers an id only once :meth:`is_duplicate` said no, so a later message with
        the same id, in the same send or not, is a duplicate."""
        previous = self._seen.get(message_id)
        self._seen[message_id] = now
        if previous != now:
            heapq.heappush(self._heap, (now, message_id))
            if len(self._heap) > 2 * len(self._seen) + _COMPACT_SLACK:
                self._heap = [(seen_at, mid) for mid, seen_at in self._seen.items()]
                heapq.heapify(self._heap)

    def admit(self, message_id: str | None, now: int) -> bool:
        """``True`` for a message to keep (its id, if any, now remembered); ``False`` for a duplicate."""
        if message_id is None:
            return True
        if self.is_duplicate(message_id, now):
            return False
        self.remember(message_id, now)
        return True

    def unseen(self, message_ids: Iterable[str | None], now: int) -> list[bool]:
        """Per id, whether a send of these messages now keeps it: not a duplicate within the window,
        nor of an id earlier in the same send. Remembers nothing (the caller's commit does)."""
        seen: set[str] = set()
        kept = []
        for message_id in message_ids:
            if message_id is None:
                kept.append(True)
                continue
            kept.append(message_id not in seen and not self.is_duplicate(message_id, now))
            seen.add(message_id)
        return kept

    def prune(self, now: int) -> list[str]:
        """Drop and return, oldest first, the ids whose window has passed (seen before ``now - window``)."""
        cutoff = now - self._window
        heap, seen = self._heap, self._seen
        dropped: list[str] = []
        while heap and heap[0][0] < cutoff:
            seen_at, message_id = heapq.heappop(heap)
            if seen.get(message_id) == seen_at:  # otherwise a stale entry: the id was remembered again
                del seen[message_id]
                dropped.append(message_id)
        return dropped

    def next_expiry(self) -> int | None:
        """The earliest ``now`` at which :meth:`prune` drops something; ``None`` when nothing is held."""
        heap, seen = self._heap, self._seen
        while heap and seen.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] + self._window + 1 if heap else None

    def history(self) -> list[tuple[str, int]]:
        """Every (id, seen-at) pair held, oldest first: rebuild with another window from this."""
        return sorted(self._seen.items(), key=lambda item: (item[1], item[0]))
