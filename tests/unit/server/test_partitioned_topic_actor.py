"""A partitioned topic on the version-2 core: routing, per-partition publishing, schedules and a
failing store, on real TopicActors and CoreActors.

Four topic partitions (``TopicActor``) and a subscription of four partitions (``CoreActor`` behind
``PartitionedCoreActor``), partition i of each over MemoryStore i mod 2, as the broker places them.
Each topic partition's plan copies a message into the subscription's partition of the same index,
as ``Broker._core_copies(index=i)`` does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

from failing_store import FailingStore
from peek_lock_taker import Taker
from sodalite.errors import StoreUnavailable
from sodalite.model import partition_core as core
from sodalite.model.partition import MessageDraft
from sodalite.server import partitioned_actor
from sodalite.server.core_actor import Copy, CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partitioned_actor import PartitionedCoreActor, partition_index
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
DEDUP = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144,
                       duplicate_detection_window=600_000)
BODY = b"\x00\x53\x75\xa0\x01x"
COUNT = 4


def draft(*, key: str | None = None, message_id: str | None = None, at: int | None = None) -> MessageDraft:
    return MessageDraft(message_id, None, key, None, at, None, None, b"", 0, BODY)


def _plan(subscription: PartitionedCoreActor, index: int) -> Callable[[Sequence[MessageDraft], int], list[list[Copy]]]:
    def plan(drafts: Sequence[MessageDraft], now: int) -> list[list[Copy]]:
        return [[(subscription.partitions[index], SubQueue.MAIN, core.record_for(d, now, None))] for d in drafts]

    return plan


async def _entities(stores: Sequence[MemoryStore],
                    settings: EntitySettings = SETTINGS) -> tuple[PartitionedTopicActor, PartitionedCoreActor]:
    workers = []
    for i, store in enumerate(stores):
        store.open()
        workers.append(StoreWorker(store, f"s{i}"))
    topic = PartitionedTopicActor([TopicActor(PartitionRef("t", i), settings, workers[i % 2]) for i in range(COUNT)])
    subscription = PartitionedCoreActor([CoreActor(PartitionRef("t/subscriptions/s", i), SETTINGS, workers[i % 2])
                                         for i in range(COUNT)])
    await topic.load()
    await subscription.load()
    for index, partition in enumerate(topic.topics):
        partition.plan = _plan(subscription, index)
    topic.start_activation()
    return topic, subscription


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_copies_go_to_the_subscription_partition_of_the_topic_partition_the_key_picks() -> None:
    async def main() -> None:
        topic, subscription = await _entities([MemoryStore(), MemoryStore()])
        try:
            keys = [f"k{i}" for i in range(12)]
            for key in keys:
                await topic.publish([draft(key=key)])
            for _ in range(COUNT):
                await topic.publish([draft(), draft()])  # keyless: a send's messages together, sends rotate
            receiver = Taker(100, peek_lock=False)
            subscription.add_consumer(receiver)
            await until(lambda: len(receiver.records) == len(keys) + 2 * COUNT)
            keyed = [r for r in receiver.records if r.partition_key is not None]
            assert sorted(r.partition_key or "" for r in keyed) == sorted(keys)
            assert all(r.sequence_number >> 48 == partition_index(r.partition_key or "", COUNT) for r in keyed)
            keyless = [r.sequence_number >> 48 for r in receiver.records if r.partition_key is None]
            assert sorted(keyless) == sorted([i for i in range(COUNT) for _ in range(2)])
            assert topic.counts()["active"] == 0  # the topic keeps nothing of a plain send
        finally:
            await subscription.close()
            await topic.close()

    asyncio.run(main())


def test_duplicate_detection_is_each_topic_partitions_own() -> None:
    async def main() -> None:
        topic, subscription = await _entities([MemoryStore(), MemoryStore()], DEDUP)
        try:
            other = next(f"p{i}" for i in range(100) if partition_index(f"p{i}", COUNT) != partition_index("q", COUNT))
            await topic.publish([draft(message_id="m1"), draft(message_id="m1")])
            await topic.publish([draft(message_id="m2", key="q")])
            await topic.publish([draft(message_id="m2", key="q")])
            await topic.publish([draft(message_id="m2", key=other)])  # another partition: another history
            await until(lambda: subscription.counts()["active"] == 3)
            receiver = Taker(10, peek_lock=False)
            subscription.add_consumer(receiver)
            await until(lambda: len(receiver.records) == 3)
            await asyncio.sleep(0.2)
            assert sorted((str(r.message_id), r.sequence_number >> 48) for r in receiver.records) == sorted([
                ("m1", partition_index("m1", COUNT)), ("m2", partition_index("q", COUNT)),
                ("m2", partition_index(other, COUNT))])
        finally:
            await subscription.close()
            await topic.close()

    asyncio.run(main())


def test_a_scheduled_message_waits_in_its_topic_partition_and_is_published_there_when_due() -> None:
    async def main() -> None:
        topic, subscription = await _entities([MemoryStore(), MemoryStore()])
        try:
            due = topic.topics[0].clock.now() + 200
            numbers = await topic.schedule([draft(key=f"s{i}", at=due) for i in range(4)])
            assert [n >> 48 for n in numbers] == [partition_index(f"s{i}", COUNT) for i in range(4)]
            await topic.cancel_scheduled([numbers[0]])
            assert topic.counts()["scheduled"] == 3
            receiver = Taker(10, peek_lock=False)
            subscription.add_consumer(receiver)
            await until(lambda: len(receiver.records) == 3)
            assert sorted((r.partition_key or "", r.sequence_number >> 48) for r in receiver.records) == sorted(
                (f"s{i}", partition_index(f"s{i}", COUNT)) for i in range(1, 4))
            await until(lambda: topic.counts()["scheduled"] == 0 and topic.counts()["active"] == 0)
        finally:
            await subscription.close()
            await topic.close()

    asyncio.run(main())


def test_a_store_that_fails_a_publish_takes_only_its_topic_partitions_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitioned_actor, "RECHECK_SECONDS", 0.05)

    async def main() -> None:
        bad = FailingStore()
        topic, subscription = await _entities([MemoryStore(), bad])
        try:
            pinned = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", COUNT) % 2 == 1)
            bad.down = True
            with pytest.raises(StoreUnavailable):
                await topic.publish([draft(key=pinned)])  # nothing stored; its partitions go out
            assert not topic.available
            assert [p.available for p in topic.partitions] == [True, False, True, False]
            for _ in range(6):
                await topic.publish([draft()])  # keyless: the other store's partitions take them
            with pytest.raises(StoreUnavailable):
                topic.publish([draft(key=pinned)])
            bad.down = False
            await until(lambda: topic.available)
            await topic.publish([draft(key=pinned)])
            receiver = Taker(20, peek_lock=False)
            await until(lambda: all(p.available for p in subscription.partitions))
            subscription.add_consumer(receiver)
            await until(lambda: len(receiver.records) == 7)
            await asyncio.sleep(0.2)
            partitions = [r.sequence_number >> 48 for r in receiver.records]
            assert len(partitions) == 7 and partitions.count(partition_index(pinned, COUNT)) == 1
            assert set(partitions) - {partition_index(pinned, COUNT)} == {0, 2}
        finally:
            await subscription.close()
            await topic.close()

    asyncio.run(main())
