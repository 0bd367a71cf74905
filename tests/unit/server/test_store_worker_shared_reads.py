"""The store worker's reads for a store other nodes write (server/store_worker.py): one read of every
watched partition's counters, and one of their next due times, instead of a read per partition. On
the memory store, with the real asyncio loop and the worker's real periods (0.5 s and 1 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from sodalite.model.message import MessageRecord, MessageState
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import Append, PartitionCounts, PartitionRef

A, B, QUIET = PartitionRef("a"), PartitionRef("b", 1), PartitionRef("quiet")
NOW = int(time.time() * 1000)


def _message(state: MessageState = MessageState.ACTIVE, scheduled: int | None = None) -> MessageRecord:
    return MessageRecord(
        sequence_number=0, enqueued_time=NOW, message_id="m", session_id=None, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=scheduled, delivery_count=0, state=state,
        durable=True, priority=None, annotations=b"", annotation_count=0, tail=b"\x00Sw\xa1\x01x")


class _Counting(MemoryStore):
    """Records the reads the worker asks for (the memory store's batched reads loop over the single
    ones underneath, which are then not the worker's)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self._inside = False

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        if not self._inside:
            self.reads.append("counts")
        return super().counts(ref)

    def counts_many(self, refs: Sequence[PartitionRef]) -> tuple[PartitionCounts, ...]:
        self.reads.append("counts_many")
        self._inside = True
        try:
            return super().counts_many(refs)
        finally:
            self._inside = False

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        if not self._inside:
            self.reads.append("next_due")
        return super().next_due(ref, now)

    def next_due_many(self, refs: Sequence[PartitionRef], now: int) -> tuple[int | None, ...]:
        self.reads.append("next_due_many")
        self._inside = True
        try:
            return super().next_due_many(refs, now)
        finally:
            self._inside = False


def test_every_watched_partition_gets_its_counters_and_due_time_from_one_read_each() -> None:
    async def scenario() -> tuple[dict[str, list[PartitionCounts]], dict[str, list[int]], list[str]]:
        store = _Counting()
        store.open()
        store.apply([Append((_message(), _message()), ref=A),
                     Append((_message(MessageState.SCHEDULED, scheduled=NOW + 60_000),), ref=B)])
        worker = StoreWorker(store, "default")
        worker.shared = True
        counts: dict[str, list[PartitionCounts]] = {"a": [], "b": [], "quiet": []}
        dues: dict[str, list[int]] = {"a": [], "b": [], "quiet": []}
        for name, ref in (("a", A), ("b", B), ("quiet", QUIET)):
            worker.watch_counts(ref, counts[name].append)
            worker.watch(ref, lambda: None, dues[name].append)
        deadline = time.monotonic() + 30
        while (not dues["b"] or not counts["a"]) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        store.reads.append("stop")
        await worker.close()
        return counts, dues, store.reads

    counts, dues, reads = asyncio.run(scenario())
    assert counts["a"][0].active == 2 and counts["b"][0].scheduled == 1 and counts["quiet"][0].active == 0
    assert dues["b"][0] == NOW + 60_000
    assert dues["a"] == dues["quiet"] == []  # nothing falls due there: not told
    before = reads[:reads.index("stop")]
    assert "counts" not in before and "next_due" not in before  # never one partition at a time
    assert before.count("counts_many") >= 1 and before.count("next_due_many") >= 1
