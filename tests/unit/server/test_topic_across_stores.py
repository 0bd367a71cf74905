"""A topic on the version-2 core whose copies land in another messaging store, on real TopicActors
and CoreActors (``server/topic_actor.py``, "Copies in other messaging stores").

The topic and its subscription live in store A; the queue its plan forwards copies into lives in
store B. Each store is a MemoryStore (B one that can be made to fail every commit, as a database
that went away) served by its own StoreWorker, as the broker serves several ``MessagingStores``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

from peek_lock_taker import Taker
from sodalite.errors import StoreUnavailable
from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.server import partitioned_actor
from sodalite.server.core_actor import Copy, CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partitioned_actor import partition_index
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.store.memory import MemoryStore
from sodalite.store.port import OpResult, PartitionRef, StoreOp

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
DEDUP = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144,
                       duplicate_detection_window=600_000)
BODY = b"\x00\x53\x75\xa0\x01x"


def draft(body: str = "x", *, message_id: str | None = None, key: str | None = None) -> MessageDraft:
    return MessageDraft(message_id, None, key, None, None, None, None, b"", 0, BODY + body.encode())


class FailingStore(MemoryStore):
    """A memory store that can be made to fail every commit, as a database that went away."""

    down = False

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        if self.down:
            raise StoreUnavailable("the database went away")
        return super().apply(batch)


def _worker(store: MemoryStore, name: str) -> StoreWorker:
    store.open()
    return StoreWorker(store, name)


def _plan(*targets: CoreActor) -> Callable[[Sequence[MessageDraft], int], list[list[Copy]]]:
    def plan(drafts: Sequence[MessageDraft], now: int) -> list[list[Copy]]:
        return [[(t, SubQueue.MAIN, core.record_for(d, now, None)) for t in targets] for d in drafts]

    return plan


async def _drain(actor: CoreActor, want: int) -> list[MessageRecord]:
    receiver = Taker(100, peek_lock=False)
    actor.add_consumer(receiver)
    deadline = time.monotonic() + 5
    while len(receiver.records) < want and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # nothing more may come
    actor.remove_consumer(receiver)
    return receiver.records


def _bodies(records: Sequence[MessageRecord]) -> list[bytes]:
    return sorted(r.tail for r in records)


async def _topic(settings: EntitySettings, a: StoreWorker, b: StoreWorker) -> tuple[TopicActor, CoreActor, CoreActor]:
    topic = TopicActor(PartitionRef("t", 0), settings, a)
    near = CoreActor(PartitionRef("t/subscriptions/near", 0), SETTINGS, a)
    far = CoreActor(PartitionRef("far", 0), SETTINGS, b)
    for actor in (topic, near, far):
        await actor.load()
    topic.plan = _plan(near, far)
    topic.start_activation()
    return topic, near, far


def test_copies_in_another_store_are_stored_and_a_failure_there_stores_nothing_here() -> None:
    async def main() -> None:
        b_store = FailingStore()
        topic, near, far = await _topic(SETTINGS, _worker(MemoryStore(), "a"), _worker(b_store, "b"))
        try:
            await topic.publish([draft("one"), draft("two")])
            b_store.down = True
            with pytest.raises(StoreUnavailable):
                await topic.publish([draft("refused")])
            assert topic.available  # the topic's own store did not fail
            b_store.down = False
            await asyncio.sleep(0.2)
            await topic.publish([draft("three")])
            expected = sorted(BODY + b for b in (b"one", b"two", b"three"))
            assert _bodies(await _drain(near, 3)) == expected  # "refused" reached neither store
            assert _bodies(await _drain(far, 3)) == expected
        finally:
            for actor in (topic, near, far):
                await actor.close()

    asyncio.run(main())


def test_the_topics_own_commit_comes_last() -> None:
    """The topic's store fails after the other store committed: the send fails (not acknowledged),
    the other store keeps its copy (a retry stores it again: at least once), nothing is in the
    topic's store."""
    async def main() -> None:
        a_store = FailingStore()
        topic, near, far = await _topic(SETTINGS, _worker(a_store, "a"), _worker(MemoryStore(), "b"))
        try:
            a_store.down = True
            with pytest.raises(StoreUnavailable):
                await topic.publish([draft("first try")])
            a_store.down = False
            await asyncio.sleep(0.2)
            await topic.publish([draft("first try")])  # the client's retry
            assert _bodies(await _drain(near, 1)) == [BODY + b"first try"]
            assert _bodies(await _drain(far, 2)) == [BODY + b"first try"] * 2
        finally:
            for actor in (topic, near, far):
                await actor.close()

    asyncio.run(main())


def test_duplicate_detection_spares_the_other_store_sequential_and_concurrent_resends() -> None:
    async def main() -> None:
        topic, near, far = await _topic(DEDUP, _worker(MemoryStore(), "a"), _worker(MemoryStore(), "b"))
        try:
            await topic.publish([draft("m1", message_id="m1"), draft("m1 again", message_id="m1")])
            await topic.publish([draft("m1 later", message_id="m1")])
            await asyncio.gather(*(topic.publish([draft(f"m2 {i}", message_id="m2")]) for i in range(5)))
            assert [r.message_id for r in await _drain(far, 2)] in (["m1", "m2"], ["m2", "m1"])
            assert sorted(str(r.message_id) for r in await _drain(near, 2)) == ["m1", "m2"]
        finally:
            for actor in (topic, near, far):
                await actor.close()

    asyncio.run(main())


def test_another_stores_failure_keeps_a_partitioned_topics_partitions_in_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition i of the topic in store i mod 2 (A, B); its copies go to a queue in store C. C failing
    a commit fails the send, but no topic partition goes out of service (only their own store's
    failure takes them out)."""
    monkeypatch.setattr(partitioned_actor, "RECHECK_SECONDS", 0.05)

    async def main() -> None:
        c_store = FailingStore()
        a, b, c = _worker(MemoryStore(), "a"), _worker(MemoryStore(), "b"), _worker(c_store, "c")
        topic = PartitionedTopicActor([TopicActor(PartitionRef("pt", i), SETTINGS, (a, b)[i % 2]) for i in range(4)])
        far = CoreActor(PartitionRef("far", 0), SETTINGS, c)
        await topic.load()
        await far.load()
        for partition in topic.topics:
            partition.plan = _plan(far)
        topic.start_activation()
        try:
            c_store.down = True
            for key in ("k1", "k2", "k3", "k4"):
                with pytest.raises(StoreUnavailable):
                    await topic.publish([draft(key, key=key)])
            assert {partition_index(k, 4) % 2 for k in ("k1", "k2", "k3", "k4")} == {0, 1}
            assert all(p.available for p in topic.partitions)
            c_store.down = False
            await asyncio.sleep(0.2)
            await topic.publish([draft("k1", key="k1")])
            assert _bodies(await _drain(far, 1)) == [BODY + b"k1"]
        finally:
            await topic.close()
            await far.close()

    asyncio.run(main())


def test_a_partitioned_topics_send_is_never_half_taken_when_another_store_is_out() -> None:
    """One send, two keys: one pinned to a topic partition whose copies stay in its store, one to a
    partition whose copies go to a queue in a store that is out (suspended, as the broker suspends
    the entities of a store switched offline). Every share is checked before any is submitted: the
    send fails whole, and the first partition stored nothing either."""
    async def main() -> None:
        a, b, c = _worker(MemoryStore(), "a"), _worker(MemoryStore(), "b"), _worker(MemoryStore(), "c")
        topic = PartitionedTopicActor([TopicActor(PartitionRef("pt", i), SETTINGS, (a, b)[i % 2]) for i in range(4)])
        near = CoreActor(PartitionRef("near", 0), SETTINGS, a)
        far = CoreActor(PartitionRef("far", 0), SETTINGS, c)
        await topic.load()
        for actor in (near, far):
            await actor.load()
        for index, partition in enumerate(topic.topics):
            partition.plan = _plan(near if index % 2 == 0 else far)
        topic.start_activation()
        try:
            local = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", 4) % 2 == 0)
            remote = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", 4) % 2 == 1)
            far.suspend()
            with pytest.raises(StoreUnavailable):
                topic.publish([draft("local", key=local), draft("remote", key=remote)])
            assert all(p.available for p in topic.partitions)
            far.resume()
            await topic.publish([draft("local again", key=local), draft("remote again", key=remote)])
            assert _bodies(await _drain(near, 1)) == [BODY + b"local again"]
            assert _bodies(await _drain(far, 1)) == [BODY + b"remote again"]
        finally:
            await topic.close()
            for actor in (near, far):
                await actor.close()

    asyncio.run(main())
