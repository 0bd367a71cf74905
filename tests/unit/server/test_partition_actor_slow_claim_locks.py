"""A PeekLock lock cannot lapse while its claim commits: a message never transferred is never
dead-lettered for MaxDeliveryCount, and one that was transferred and whose lock lapsed is.

The CI failure this guards against: under load a claim's commit (the durable delivery count) can
take longer than the lock duration. The lock used to start when the message was claimed, so its
expiry could fire before the message was sent: the message was then dropped from the transfer
and, with MaxDeliveryCount 1, dead-lettered without any receiver ever seeing it.

A fake clock drives the lock expiry; a gate holds the store's commit on its worker thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server.partition_actor import EntitySettings, PartitionActor, SubQueue
from sodalite.server.store_worker import StoreWorker
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef, StoreOp, UpdateMessages

REF = PartitionRef("slow-claims", 0)
LOCK_MS = 5_000
SETTINGS = EntitySettings(lock_duration=LOCK_MS, default_ttl=None, max_message_size=262144, max_delivery_count=1)


class GatedStore(MemoryStore):
    """A store whose next commit, once ``hold`` is called, waits on the worker thread until ``let_go``."""

    def __init__(self) -> None:
        super().__init__()
        self._gate = threading.Event()
        self._gate.set()
        self.holding = threading.Event()  # set while a held commit waits

    def hold(self) -> None:
        self._gate.clear()

    def let_go(self) -> None:
        self._gate.set()

    def apply(self, batch: Sequence[StoreOp]) -> None:
        if not self._gate.is_set():
            self.holding.set()
            self._gate.wait(10)
            self.holding.clear()
        super().apply(batch)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Receiver:
    def __init__(self, credit: int) -> None:
        self.peek_lock = True
        self.sub_queue = SubQueue.MAIN
        self.session_id: str | None = None
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

    def session_lost(self) -> None:
        pass


def draft(body: bytes) -> MessageDraft:
    return MessageDraft(None, None, None, None, None, None, None, b"", 0,
                        b"\x00\x53\x75\xa0" + bytes((len(body),)) + body)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(1000):  # bounded: 10 s at most
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def ticks(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_lock_does_not_lapse_while_its_claim_commits_and_the_message_is_then_delivered() -> None:
    async def run() -> None:
        store, clock = GatedStore(), Clock()
        store.open()
        actor = PartitionActor(REF, SETTINGS, StoreWorker(store, "t"), clock=clock)
        await actor.load()
        await actor.send([draft(b"m")])
        store.hold()
        receiver = Receiver(credit=1)
        actor.add_consumer(receiver)
        await until(store.holding.is_set, "the claim's commit to start")
        clock.now += 3 * LOCK_MS  # the commit takes longer than the lock duration
        actor._on_timer()  # the timer sweep runs meanwhile (what is due on the fake clock)
        await ticks()
        assert actor.counts()["dead_letter"] == 0  # not dead-lettered: it was never sent
        store.let_go()
        await until(lambda: bool(receiver.got), "the delivery")
        (record, lock), = receiver.got
        assert lock is not None and record.tail.endswith(b"m")
        assert lock.locked_until == clock.now + LOCK_MS  # its lock runs from when it left
        assert actor.counts() == {"active": 1, "scheduled": 0, "dead_letter": 0, "transfer_dead_letter": 0,
                                  "transfer": 0}
        await actor.close()

    asyncio.run(run())


def test_a_delivered_message_whose_lock_lapses_is_dead_lettered_at_max_delivery_count_one() -> None:
    async def run() -> None:
        store, clock = GatedStore(), Clock()
        store.open()
        actor = PartitionActor(REF, SETTINGS, StoreWorker(store, "t"), clock=clock)
        await actor.load()
        await actor.send([draft(b"m")])
        receiver = Receiver(credit=1)
        actor.add_consumer(receiver)
        await until(lambda: bool(receiver.got), "the delivery")
        clock.now += LOCK_MS + 1
        actor._on_timer()  # the timer sweep, on the fake clock
        await until(lambda: actor.counts()["dead_letter"] == 1, "the lapsed lock's dead-lettering")
        dead = store.load_partition(PartitionRef(REF.entity + SubQueue.DEAD_LETTER.value, 0)).messages
        assert len(dead) == 1 and dead[0].delivery_count == 1
        assert store.load_partition(REF).messages == ()
        await actor.close()

    asyncio.run(run())


def test_a_receiver_gone_before_its_claim_committed_leaves_the_delivery_uncounted() -> None:
    async def run() -> None:
        store, clock = GatedStore(), Clock()
        store.open()
        actor = PartitionActor(REF, SETTINGS, StoreWorker(store, "t"), clock=clock)
        await actor.load()
        await actor.send([draft(b"m")])
        store.hold()
        gone = Receiver(credit=1)
        actor.add_consumer(gone)
        await until(store.holding.is_set, "the claim's commit to start")
        actor.remove_consumer(gone)
        actor.drop_owner(gone)  # its connection went: its locks end
        store.let_go()
        await until(lambda: not actor._committing, "the commits to finish")
        assert gone.got == [] and actor.counts()["dead_letter"] == 0
        stored, = store.load_partition(REF).messages
        assert stored.delivery_count == 0  # the claim's count was stored back
        receiver = Receiver(credit=1)
        actor.add_consumer(receiver)
        await until(lambda: bool(receiver.got), "the delivery to the next receiver")
        await actor.close()

    asyncio.run(run())


class OpCountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.updates: list[int] = []  # the number of messages in each UpdateMessages op

    def apply(self, batch: Sequence[StoreOp]) -> None:
        self.updates += [len(op.updates) for op in batch if isinstance(op, UpdateMessages)]
        super().apply(batch)


def test_the_claims_of_one_dispatch_round_are_stored_in_one_op() -> None:
    # SQLite pays a partition scan per UpdateMessages op: 10,000 claims one op each took seconds.
    async def run() -> None:
        store, clock = OpCountingStore(), Clock()
        store.open()
        actor = PartitionActor(REF, SETTINGS, StoreWorker(store, "t"), clock=clock)
        await actor.load()
        await actor.send([draft(f"m{i}".encode()) for i in range(50)])
        receiver = Receiver(credit=50)
        actor.add_consumer(receiver)
        await until(lambda: len(receiver.got) == 50, "the deliveries")
        assert store.updates == [50]
        stored = store.load_partition(REF).messages
        assert [m.delivery_count for m in stored] == [1] * 50  # each claim counted durably
        await actor.close()

    asyncio.run(run())
