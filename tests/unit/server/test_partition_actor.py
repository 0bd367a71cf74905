"""The partition actor on a real MemoryStore: group commit, acknowledgement after commit, failure recovery."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sodalite.errors import MessageLockLost, StoreUnavailable
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server.partition_actor import EntitySettings, PartitionActor, SubQueue
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef, StoreOp

REF = PartitionRef("q", 0)
SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def apply(self, batch: Sequence[StoreOp]) -> None:
        super().apply(batch)
        self.batches.append(len(batch))


class FakeConsumer:
    def __init__(self, peek_lock: bool, credit: int, sub_queue: SubQueue = SubQueue.MAIN) -> None:
        self.peek_lock = peek_lock
        self.sub_queue = sub_queue
        self.reserved = 0
        self._credit = credit
        self.got: list[tuple[MessageRecord, Lock | None]] = []

    def credit(self) -> int:
        return self._credit

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        self._credit -= 1
        self.got.append((record, lock))

    def drain_requested(self) -> bool:
        return False

    def drained(self) -> None:
        pass


async def _delivered(consumer: FakeConsumer, count: int) -> None:
    """A PeekLock delivery leaves once its counted delivery has committed: a few loop turns."""
    for _ in range(200):
        if len(consumer.got) >= count:
            return
        await asyncio.sleep(0.005)


def draft(body: bytes) -> MessageDraft:
    return MessageDraft(None, None, None, None, None, None, None, b"", 0, data_section(body))


def data_section(body: bytes) -> bytes:
    return b"\x00\x53\x75\xa0" + bytes((len(body),)) + body


async def _actor(store: MemoryStore) -> PartitionActor:
    store.open()
    actor = PartitionActor(REF, SETTINGS, StoreWorker(store, "t"), clock=lambda: 1_000_000)
    await actor.load()
    return actor


def test_pipelined_sends_share_one_commit_and_are_acknowledged_after_it() -> None:
    async def run() -> None:
        store = CountingStore()
        actor = await _actor(store)
        futures = [actor.send([draft(f"m{i}".encode())]) for i in range(50)]
        assert not any(f.done() for f in futures)  # nothing acknowledged before the commit
        await asyncio.gather(*futures)
        assert store.load_partition(REF).last_sequence_number == 50
        assert len(store.batches) <= 2  # group commit: one transaction (two at most) for 50 sends
        await actor.close()

    asyncio.run(run())


def test_messages_are_receivable_only_after_their_commit() -> None:
    async def run() -> None:
        actor = await _actor(MemoryStore())
        consumer = FakeConsumer(peek_lock=True, credit=10)
        actor.add_consumer(consumer)
        future = actor.send([draft(b"a"), draft(b"b")])
        await asyncio.sleep(0)
        assert not future.done() and consumer.got == []
        await future
        await _delivered(consumer, 2)  # after the claims (durable delivery counts, 13.11) commit
        assert [r.tail for r, _ in consumer.got] == [data_section(b"a"), data_section(b"b")]
        assert all(lock is not None for _, lock in consumer.got)
        await actor.close()

    asyncio.run(run())


def test_receive_and_delete_delivers_only_after_the_delete_commits() -> None:
    async def run() -> None:
        store = MemoryStore()
        actor = await _actor(store)
        await actor.send([draft(b"x")])
        consumer = FakeConsumer(peek_lock=False, credit=1)
        actor.add_consumer(consumer)
        await asyncio.sleep(0)
        assert consumer.got == [] and consumer.reserved == 1
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert [(r.tail, lock) for r, lock in consumer.got] == [(data_section(b"x"), None)]
        assert store.load_partition(REF).messages == ()
        await actor.close()

    asyncio.run(run())


def test_failed_commit_fails_the_send_then_the_partition_recovers_without_reusing_numbers() -> None:
    async def run() -> None:
        store = MemoryStore()
        actor = await _actor(store)
        await actor.send([draft(b"kept")])
        store.fail_next_apply(StoreUnavailable("disk full"))
        failed = actor.send([draft(b"lost")])
        with pytest.raises(StoreUnavailable):
            await failed
        for _ in range(100):  # the reload runs in the background
            if not actor._reloading:
                break
            await asyncio.sleep(0.01)
        await actor.send([draft(b"after")])
        stored = store.load_partition(REF).messages
        assert [m.tail for m in stored] == [data_section(b"kept"), data_section(b"after")]
        numbers = [m.sequence_number for m in stored]
        assert numbers == sorted(numbers) and numbers[1] > 2  # 2 went to the failed send, never reused
        await actor.close()

    asyncio.run(run())


def test_complete_with_an_unknown_lock_raises_lock_lost() -> None:
    async def run() -> None:
        import uuid

        actor = await _actor(MemoryStore())
        with pytest.raises(MessageLockLost):
            actor.complete(uuid.uuid4())
        await actor.close()

    asyncio.run(run())


def test_counts_are_exact_per_state_and_sub_queue() -> None:
    async def run() -> None:
        actor = await _actor(MemoryStore())
        consumer = FakeConsumer(peek_lock=True, credit=2)
        await actor.send([draft(b"a"), draft(b"b"), draft(b"c")])
        scheduled = MessageDraft(None, None, None, None, 2_000_000, None, None, b"", 0, data_section(b"later"))
        await actor.send([scheduled])
        assert actor.counts() == {"active": 3, "scheduled": 1, "dead_letter": 0, "transfer_dead_letter": 0,
                                  "transfer": 0}
        actor.add_consumer(consumer)
        await _delivered(consumer, 2)
        (_, lock_a), (_, lock_b) = consumer.got
        assert lock_a is not None and lock_b is not None
        await actor.dead_letter(lock_a.token, "r", "d")
        await actor.complete(lock_b.token)
        assert actor.counts() == {"active": 1, "scheduled": 1, "dead_letter": 1, "transfer_dead_letter": 0,
                                  "transfer": 0}
        await actor.close()

    asyncio.run(run())
