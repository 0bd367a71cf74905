"""A partitioned queue on the version-2 core: routing and the credit split, on real CoreActors.

Four partitions, each a real ``CoreActor`` (runners, the pure core) over one of two MemoryStores,
behind ``PartitionedCoreActor``; the receivers are plain objects that count what they are given,
as a link would. The event loop's clock runs the cores' timers (lock durations of a fraction of a
second where a lapse is the point).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from failing_store import FailingStore
from peek_lock_taker import Taker
from sodalite.errors import MessageNotFound, OperationTimeout, StoreUnavailable
from sodalite.model.partition import MessageDraft
from sodalite.server import partitioned_actor
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partitioned_actor import PartitionedCoreActor, partition_index
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)
BODY = b"\x00\x53\x75\xa0\x01x"
COUNT = 4


def draft(*, session_id: str | None = None, key: str | None = None, at: int | None = None) -> MessageDraft:
    return MessageDraft(None, session_id, key, None, at, None, None, b"", 0, BODY)


async def _entity(settings: EntitySettings = SETTINGS) -> tuple[PartitionedCoreActor, list[StoreWorker]]:
    workers = []
    for name in ("a", "b"):
        store = MemoryStore()
        store.open()
        workers.append(StoreWorker(store, name))
    actor = PartitionedCoreActor([CoreActor(PartitionRef("pq", i), settings, workers[i % 2]) for i in range(COUNT)])
    await actor.load()
    return actor, workers


def run(body: Callable[[PartitionedCoreActor, list[StoreWorker]], Awaitable[None]],
        settings: EntitySettings = SETTINGS) -> None:
    async def main() -> None:
        actor, workers = await _entity(settings)
        try:
            await body(actor, workers)
        finally:
            await actor.close()

    asyncio.run(main())


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def settle_down() -> None:
    """Long enough for every runner to commit what it was given and for a pool poll to pass."""
    await asyncio.sleep(0.3)


async def fill(actor: PartitionedCoreActor, per_partition: int) -> None:
    """``per_partition`` messages in each partition (keyless sends rotate over them)."""
    for _ in range(per_partition * COUNT):
        await actor.send([draft()])


def test_keyless_sends_rotate_and_numbers_carry_the_partition() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        await fill(actor, 2)
        numbers = [r.sequence_number for r in await actor.peek(SubQueue.MAIN, 0, 100)]
        assert [n >> 48 for n in numbers] == [0, 0, 1, 1, 2, 2, 3, 3]  # partition by partition, in order
        assert [n & 0xFFFF for n in numbers] == [1, 2] * COUNT
        assert actor.counts()["active"] == 8

    run(body)


def test_a_receivers_credit_is_never_over_granted_across_partitions() -> None:
    """ReceiveAndDelete: a delivery beyond the link's credit would be lost, so the cores together
    must not claim more than the link's credit; the rest stays stored and comes with more credit."""
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        await fill(actor, 2)
        receiver = Taker(3, peek_lock=False)
        actor.add_consumer(receiver)
        await until(lambda: len(receiver.got) == 3)
        await settle_down()
        assert len(receiver.got) == 3 and receiver.link_credit == 0
        assert actor.counts()["active"] == 5  # nothing claimed beyond the credit, nothing lost
        receiver.link_credit = 10
        actor.credit_changed(receiver)
        await until(lambda: len(receiver.got) == 8)
        await settle_down()
        assert sorted(r.sequence_number for r, _ in receiver.got) == sorted(
            (i << 48) + n for i in range(COUNT) for n in (1, 2))
        assert actor.counts()["active"] == 0

    run(body)


def test_credit_waits_for_messages_and_goes_where_they_arrive() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        receiver = Taker(2)
        actor.add_consumer(receiver)
        await settle_down()
        pinned = partition_index("k", COUNT)
        await actor.send([draft(key="k")])
        await until(lambda: len(receiver.got) == 1)
        record, lock = receiver.got[0]
        assert record.sequence_number >> 48 == pinned and lock is not None
        await actor.complete(lock.token)
        await actor.send([draft(key="other")])
        await until(lambda: len(receiver.got) == 2)

    run(body)


def test_competing_receivers_share_the_messages_without_stranding_credit() -> None:
    """A message two receivers' credit could take goes to one; once it is gone, the other's credit
    is not left waiting in that partition: a message in another partition reaches it."""
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        first, second = Taker(1), Taker(1)
        actor.add_consumer(first)
        actor.add_consumer(second)
        await actor.send([draft(key="a")])
        await until(lambda: len(first.got) + len(second.got) == 1)
        waiting = second if first.got else first
        key_elsewhere = next(f"b{i}" for i in range(100)
                             if partition_index(f"b{i}", COUNT) != partition_index("a", COUNT))
        await actor.send([draft(key=key_elsewhere)])
        await until(lambda: len(waiting.got) == 1)
        assert waiting.got[0][0].sequence_number >> 48 == partition_index(key_elsewhere, COUNT)

    run(body)


def test_a_lapsed_lock_brings_the_message_to_a_receiver_waiting_with_credit() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        await actor.send([draft()])
        holder = Taker(1)
        actor.add_consumer(holder)
        await until(lambda: len(holder.got) == 1)
        actor.remove_consumer(holder)  # its lock lives on until it lapses
        waiting = Taker(1)
        actor.add_consumer(waiting)
        await until(lambda: len(waiting.got) == 1, timeout=5)
        assert waiting.got[0][0].sequence_number == holder.got[0][0].sequence_number
        assert waiting.got[0][0].delivery_count == 1

    run(body, EntitySettings(lock_duration=300, default_ttl=None, max_message_size=262144))


def test_a_drain_delivers_what_is_ready_then_ends_the_credit() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        await actor.send([draft()])
        await actor.send([draft()])  # two partitions
        receiver = Taker(5)
        receiver.drain = True
        actor.add_consumer(receiver)
        actor.credit_changed(receiver)
        await until(lambda: receiver.was_drained == 1)
        assert len(receiver.got) == 2 and receiver.link_credit == 0
        await actor.send([draft()])
        await settle_down()
        assert len(receiver.got) == 2  # no credit was left behind in any core
        receiver.link_credit = 1
        actor.credit_changed(receiver)
        await until(lambda: len(receiver.got) == 3)

    run(body)


def test_next_available_session_comes_from_any_partition_and_the_other_waits_are_withdrawn() -> None:
    settings = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144, requires_session=True)

    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        a = "s-a"
        b = next(f"s-{i}" for i in range(100) if partition_index(f"s-{i}", COUNT) != partition_index(a, COUNT))
        await actor.send([draft(session_id=a)])
        await actor.send([draft(session_id=b)])
        first, second, third = Taker(0), Taker(0), Taker(0)
        granted_first = (await actor.accept_session(first, None, 5_000))[0]
        granted_second = (await actor.accept_session(second, None, 5_000))[0]
        assert {granted_first, granted_second} == {a, b}  # the waits the winners withdrew held nothing back
        with pytest.raises(OperationTimeout):
            await actor.accept_session(third, None, 300)
        first.session_id, first.link_credit = granted_first, 1
        actor.add_consumer(first)  # its messages come from the partition that granted the session
        await until(lambda: len(first.got) == 1)
        assert first.got[0][0].session_id == granted_first
        actor.remove_consumer(first)  # the session goes back, its message with it
        assert (await actor.accept_session(third, None, 5_000))[0] == granted_first

    run(body, settings)


def test_deferred_messages_by_number_across_partitions_all_or_none() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        await fill(actor, 1)
        receiver = Taker(4)
        actor.add_consumer(receiver)
        await until(lambda: len(receiver.got) == 4)
        for _, lock in receiver.got:
            assert lock is not None
            await actor.defer(lock.token)
        numbers = sorted(r.sequence_number for r, _ in receiver.got)
        missing = (1 << 48) + 99
        with pytest.raises(MessageNotFound):
            await actor.receive_deferred(SubQueue.MAIN, [numbers[0], missing], True, None)
        with pytest.raises(MessageNotFound):
            actor.receive_deferred(SubQueue.MAIN, [numbers[0], (COUNT + 1) << 48], True, None)
        taken = await actor.receive_deferred(SubQueue.MAIN, [numbers[3], numbers[0]], True, None)
        assert [r.sequence_number for r, _, _ in taken] == [numbers[3], numbers[0]]  # as asked
        for _, token, _ in taken:
            assert token is not None
            await actor.complete(token)
        assert actor.counts()["active"] == 2

    run(body)


def test_scheduled_numbers_in_the_drafts_order_and_cancel_by_their_partition() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        later = int(time.time() * 1000) + 60_000
        keys = [f"k{i}" for i in range(6)]
        numbers = await actor.schedule([draft(key=k, at=later) for k in keys])
        assert [n >> 48 for n in numbers] == [partition_index(k, COUNT) for k in keys]
        assert actor.counts()["scheduled"] == 6
        await actor.cancel_scheduled(numbers[:3])
        assert actor.counts()["scheduled"] == 3

    run(body)


def test_an_offline_store_is_skipped_by_keyless_sends_and_refuses_pinned_ones() -> None:
    async def body(actor: PartitionedCoreActor, workers: list[StoreWorker]) -> None:
        workers[1].offline = True
        for partition in actor.partitions:
            if partition.worker is workers[1]:
                partition.suspend()
        for _ in range(6):
            await actor.send([draft()])
        assert {r.sequence_number >> 48 for r in await actor.peek(SubQueue.MAIN, 0, 100)} == {0, 2}
        pinned = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", COUNT) % 2 == 1)
        with pytest.raises(StoreUnavailable):
            actor.send([draft(key=pinned)])
        assert not actor.available
        workers[1].offline = False
        for partition in actor.partitions:
            if partition.worker is workers[1]:
                partition.resume()
        await until(lambda: actor.available)
        await actor.send([draft(key=pinned)])
        assert actor.counts()["active"] == 7

    run(body)


def test_a_store_that_fails_a_commit_takes_its_partitions_out_until_it_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As version 1's partitions reload after a failed commit: keyless sends go to the other
    partitions at once, a pinned one gets the retryable error, and the partitions come back by
    themselves once their store answers; nothing acknowledged is lost."""
    monkeypatch.setattr(partitioned_actor, "RECHECK_SECONDS", 0.05)

    async def main() -> None:
        good, bad = MemoryStore(), FailingStore()
        workers = [StoreWorker(good, "a"), StoreWorker(bad, "b")]
        for store in (good, bad):
            store.open()
        actor = PartitionedCoreActor([CoreActor(PartitionRef("pq", i), SETTINGS, workers[i % 2])
                                      for i in range(COUNT)])
        await actor.load()
        try:
            pinned = next(f"k{i}" for i in range(100) if partition_index(f"k{i}", COUNT) % 2 == 1)
            bad.down = True
            with pytest.raises(StoreUnavailable):
                await actor.send([draft(key=pinned)])  # the commit fails: the partition goes out
            assert not actor.available
            for _ in range(8):
                await actor.send([draft()])  # every one accepted, by the partitions in store a
            with pytest.raises(StoreUnavailable):
                actor.send([draft(key=pinned)])  # refused at once now
            bad.down = False
            await until(lambda: actor.available)
            await actor.send([draft(key=pinned)])
            numbers = [r.sequence_number for r in await actor.peek(SubQueue.MAIN, 0, 100)]
            assert len(numbers) == 9  # the failed commit stored nothing; everything acknowledged is there
            partitions = [n >> 48 for n in numbers]
            assert partitions.count(partition_index(pinned, COUNT)) == 1
            assert set(partitions) - {partition_index(pinned, COUNT)} == {0, 2}  # store a's partitions
        finally:
            await actor.close()

    asyncio.run(main())


def test_a_lock_token_no_partition_holds_is_lost() -> None:
    async def body(actor: PartitionedCoreActor, _workers: list[StoreWorker]) -> None:
        from sodalite.errors import MessageLockLost

        with pytest.raises(MessageLockLost):
            actor.complete(uuid.uuid4())

    run(body)
