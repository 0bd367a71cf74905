"""A partitioned entity's routing, on real partition actors over two MemoryStores (one per half)."""

from __future__ import annotations

import asyncio

import pytest

from sodalite.errors import InvalidOperation, StoreUnavailable
from sodalite.model.partition import MessageDraft
from sodalite.server.partition_actor import EntitySettings, PartitionActor, SubQueue
from sodalite.server.partitioned_actor import PartitionedActor, partition_index, partition_key
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
BODY = b"\x00\x53\x75\xa0\x01x"


def draft(*, message_id: str | None = None, session_id: str | None = None,
          key: str | None = None) -> MessageDraft:
    return MessageDraft(message_id, session_id, key, None, None, None, None, b"", 0, BODY)


async def _entity(count: int = 4, settings: EntitySettings = SETTINGS) -> tuple[PartitionedActor, list[StoreWorker]]:
    workers = []
    for name in ("a", "b"):
        store = MemoryStore()
        store.open()
        workers.append(StoreWorker(store, name))
    actor = PartitionedActor([PartitionActor(PartitionRef("pq", i), settings, workers[i % 2], clock=lambda: 1_000)
                              for i in range(count)])
    await actor.load()
    return actor, workers


def test_the_partition_key_follows_the_seed() -> None:
    assert partition_key(draft(session_id="s", key="s"), False) == "s"
    assert partition_key(draft(key="k", message_id="m"), True) == "k"
    assert partition_key(draft(message_id="m"), True) == "m"
    assert partition_key(draft(message_id="m"), False) is None  # MessageId only under duplicate detection
    with pytest.raises(InvalidOperation, match="differs"):
        partition_key(draft(session_id="s", key="k"), False)
    assert partition_index("customer-7", 16) == partition_index("customer-7", 16) < 16


def test_sequence_numbers_carry_the_partition_and_keyless_sends_rotate() -> None:
    async def run() -> None:
        actor, _ = await _entity()
        for _ in range(8):
            await actor.send([draft()])
        numbers = [r.sequence_number for r in actor.peek(SubQueue.MAIN, 0, 100)]
        assert sorted(n >> 48 for n in numbers) == [0, 0, 1, 1, 2, 2, 3, 3]
        assert actor.counts()["active"] == 8
        keyed, _ = actor.schedule([draft(key="k"), draft(key="k")])
        await keyed
        assert {r.sequence_number >> 48 for r in actor.peek(SubQueue.MAIN, partition_index("k", 4) << 48, 100)
                if r.partition_key == "k"} == {partition_index("k", 4)}
        await actor.close()

    asyncio.run(run())


def test_an_offline_store_is_skipped_by_keyless_sends_and_refuses_pinned_ones() -> None:
    async def run() -> None:
        actor, workers = await _entity()
        workers[1].offline = True
        for partition in actor.partitions:
            if partition.worker is workers[1]:
                partition.suspend()
        for _ in range(6):
            await actor.send([draft()])
        assert {r.sequence_number >> 48 for r in actor.peek(SubQueue.MAIN, 0, 100)} == {0, 2}
        pinned = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", 4) % 2 == 1)
        with pytest.raises(StoreUnavailable):
            actor.send([draft(key=pinned)])
        assert not actor.available
        workers[1].offline = False
        for _ in range(100):  # the suspended partitions rebuild themselves once the store answers
            if actor.available:
                break
            await asyncio.sleep(0.1)
        assert actor.available
        await actor.send([draft(key=pinned)])
        assert actor.counts()["active"] == 7
        await actor.close()

    asyncio.run(run())


class DrainingConsumer:
    """A receiver that asked to drain: it must get every message any partition has before the drain ends."""

    def __init__(self, credit: int) -> None:
        self.peek_lock, self.sub_queue, self.reserved, self.session_id = True, SubQueue.MAIN, 0, None
        self._credit = credit
        self.got: list[int] = []
        self.drained_after: list[int] = []

    def credit(self) -> int:
        return self._credit

    def deliver(self, record: object, lock: object) -> None:
        self._credit -= 1
        self.got.append(record.sequence_number)

    def drain_requested(self) -> bool:
        return self._credit > 0

    def drained(self) -> None:
        self.drained_after.append(len(self.got))
        self._credit = 0


def test_a_drain_ends_only_when_no_partition_has_a_message() -> None:
    async def run() -> None:
        actor, _ = await _entity()
        last = actor.partitions[-1]
        await last.send([draft(), draft()])  # only the last partition has messages
        consumer = DrainingConsumer(credit=5)
        actor.add_consumer(consumer)  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert len(consumer.got) == 2
        assert consumer.drained_after == [2]  # drained once, after both were delivered
        await actor.close()

    asyncio.run(run())
