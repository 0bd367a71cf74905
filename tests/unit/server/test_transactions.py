"""Transactions: the partitioned-entity rules, the bookkeeping, one-batch commits on real actors and a store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from sodalite.errors import InvalidOperation, StoreUnavailable, TransactionRolledBack, TransactionUnknown
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server.partition_actor import EntitySettings, PartitionActor, SubQueue
from sodalite.server.partitioned_actor import partition_key
from sodalite.server.store_worker import StoreWorker
from sodalite.server.transactions import (
    EnlistedSettlement,
    PartitionPin,
    Transaction,
    Transactions,
    pin_partitioned_send,
    pin_transfer,
)
from sodalite.store.memory import MemoryStore
from sodalite.store.port import PartitionRef, StoreOp

SETTINGS = EntitySettings(lock_duration=60_000, default_ttl=None, max_message_size=262144)


def draft(body: bytes = b"x", *, message_id: str | None = None, session_id: str | None = None,
          partition_key: str | None = None) -> MessageDraft:
    tail = b"\x00\x53\x75\xa0" + bytes((len(body),)) + body
    return MessageDraft(message_id, session_id, partition_key, None, None, None, None, b"", 0, tail)


# ---- the seed's rules for partitioned entities ----------------------------------------------------------


def test_the_partition_key_is_session_then_partition_key_then_message_id_under_duplicate_detection() -> None:
    assert partition_key(draft(session_id="s", partition_key="s", message_id="m"), True) == "s"
    assert partition_key(draft(partition_key="p", message_id="m"), True) == "p"
    assert partition_key(draft(message_id="m"), True) == "m"
    assert partition_key(draft(message_id="m"), False) is None


def test_a_message_without_a_partition_key_is_refused() -> None:
    with pytest.raises(InvalidOperation, match="needs a partition key"):
        pin_partitioned_send(None, draft(message_id="m"), duplicate_detection=False)


def test_all_messages_of_a_transaction_share_one_key() -> None:
    pin = pin_partitioned_send(None, draft(partition_key="k"), False)
    assert pin == PartitionPin("k", None)
    assert pin_partitioned_send(pin, draft(message_id="k"), True) == pin  # the same key, from a MessageId
    with pytest.raises(InvalidOperation, match="same partition key"):
        pin_partitioned_send(pin, draft(partition_key="other"), False)


def test_session_id_and_partition_key_must_agree_and_one_session_per_transaction() -> None:
    with pytest.raises(InvalidOperation, match="differs from the SessionId"):
        pin_partitioned_send(None, draft(session_id="s", partition_key="p"), False)
    pin = pin_partitioned_send(None, draft(session_id="s1"), False)
    assert pin == PartitionPin("s1", "s1")
    with pytest.raises(InvalidOperation, match="several sessions"):
        pin_partitioned_send(pin, draft(session_id="s2"), False)
    assert pin_partitioned_send(PartitionPin("s1", None), draft(session_id="s1"), False) == PartitionPin("s1", "s1")


def test_a_transfer_passes_whole_or_not_at_all() -> None:
    with pytest.raises(InvalidOperation):
        pin_transfer(None, [draft(partition_key="a"), draft(partition_key="b")], False)
    assert pin_transfer(None, [draft(partition_key="a"), draft(session_id="a")], False) == PartitionPin("a", "a")


# ---- bookkeeping ------------------------------------------------------------------------------------


def test_declared_ids_are_distinct_and_spent_by_the_discharge() -> None:
    txns = Transactions()
    first, second = txns.declare(), txns.declare()
    assert first.txn_id != second.txn_id and len(txns) == 2
    assert txns.get(first.txn_id) is first
    assert txns.discharge(first.txn_id) is first
    with pytest.raises(TransactionUnknown):
        txns.get(first.txn_id)
    with pytest.raises(TransactionUnknown):
        txns.discharge(b"never declared")
    with pytest.raises(TransactionUnknown):
        txns.get("not binary")
    assert txns.roll_back_all() == 1 and len(txns) == 0


def test_a_transaction_cannot_span_messaging_stores() -> None:
    here, there = StoreWorker(MemoryStore(), "here"), StoreWorker(MemoryStore(), "there")
    a = PartitionActor(PartitionRef("a", 0), SETTINGS, here)
    b = PartitionActor(PartitionRef("b", 0), SETTINGS, there)
    txn = Transaction(b"t")
    txn.enlist_settlement(EnlistedSettlement(a, _token(1), lambda: None, SubQueue.MAIN, True))
    assert txn.worker is here
    with pytest.raises(InvalidOperation, match="span messaging stores"):
        txn.enlist_settlement(EnlistedSettlement(b, _token(2), lambda: None, SubQueue.MAIN, True))
    with pytest.raises(InvalidOperation, match="already settled"):
        txn.enlist_settlement(EnlistedSettlement(a, _token(1), lambda: None, SubQueue.MAIN, True))
    assert [s.actor for s in txn.settlements] == [a]
    for worker in (here, there):
        asyncio.run(worker.close())


def _token(n: int) -> Any:
    import uuid

    return uuid.UUID(int=n)


# ---- one batch for everything, on real actors -------------------------------------------------------------


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def apply(self, batch: Sequence[StoreOp]) -> None:
        super().apply(batch)
        self.batches += 1


class Holder:
    """A receiver link as the actor sees it: takes one locked message."""

    def __init__(self) -> None:
        self.peek_lock, self.sub_queue, self.session_id, self.reserved = True, SubQueue.MAIN, None, 0
        self.got: list[tuple[MessageRecord, Lock | None]] = []

    def credit(self) -> int:
        return 1 - len(self.got)

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        self.got.append((record, lock))

    def drain_requested(self) -> bool:
        return False

    def drained(self) -> None:
        pass

    def session_lost(self) -> None:
        pass


async def _two_actors(store: MemoryStore) -> tuple[PartitionActor, PartitionActor, Holder]:
    """Actors for entities 'a' and 'b' in one store; 'b' holds one message, locked by the returned holder."""
    store.open()
    worker = StoreWorker(store, "one")
    a = PartitionActor(PartitionRef("a", 0), SETTINGS, worker, clock=lambda: 1_000_000)
    b = PartitionActor(PartitionRef("b", 0), SETTINGS, worker, clock=lambda: 1_000_000)
    for actor in (a, b):
        await actor.load()
    await b.send([draft(b"held")])
    holder = Holder()
    b.add_consumer(holder)
    for _ in range(500):  # a PeekLock delivery leaves after its claim (the delivery count) is committed
        if holder.got:
            break
        await asyncio.sleep(0.01)
    assert len(holder.got) == 1
    return a, b, holder


def _prepare(a: PartitionActor, b: PartitionActor, holder: Holder) -> tuple[list[Any], list[Any]]:
    lock = holder.got[0][1]
    assert lock is not None
    ops: list[Any] = []
    forwarded: list[Any] = []
    for actor, command in ((a, lambda: a.send([draft(b"to-a")])), (b, lambda: b.send([draft(b"to-b")])),
                           (b, lambda: b.complete(lock.token))):
        step_ops, step_forwarded = actor.prepare_in_transaction(command)
        ops += step_ops
        forwarded += step_forwarded
    return ops, forwarded


def _bodies(store: MemoryStore, entity: str) -> list[bytes]:
    return [m.tail[5:] for m in store.load_partition(PartitionRef(entity, 0)).messages]


def test_a_transaction_commits_in_one_store_transaction_and_shows_only_after_it() -> None:
    async def run() -> None:
        store = CountingStore()
        a, b, holder = await _two_actors(store)
        before = store.batches
        ops, forwarded = _prepare(a, b, holder)
        assert a.partition.count(MessageState.ACTIVE) == 0  # prepared, not visible
        assert b.partition.count(MessageState.ACTIVE) == 0  # the completed message is gone, the send not shown
        future = a.commit_transaction(ops, forwarded)
        assert not future.done()
        await future
        assert store.batches == before + 1  # everything in one transaction
        assert _bodies(store, "a") == [b"to-a"] and _bodies(store, "b") == [b"to-b"]
        assert a.partition.count(MessageState.ACTIVE) == 1 and b.partition.count(MessageState.ACTIVE) == 1
        for actor in (a, b):
            await actor.close()

    asyncio.run(run())


def test_a_failed_commit_shows_nothing_and_the_actors_resynchronise() -> None:
    async def run() -> None:
        store = MemoryStore()
        a, b, holder = await _two_actors(store)
        ops, forwarded = _prepare(a, b, holder)
        store.fail_next_apply(StoreUnavailable("disk full"))
        with pytest.raises(StoreUnavailable):
            await a.commit_transaction(ops, forwarded)
        b.resynchronise()  # the lead (a) reloads itself after its failed batch
        for _ in range(200):
            if a.available and b.available:
                break
            await asyncio.sleep(0.01)
        assert _bodies(store, "a") == [] and _bodies(store, "b") == [b"held"]
        assert a.partition.count(MessageState.ACTIVE) == 0
        assert [r.tail[5:] for r in b.partition.peek(0, 10)] == [b"held"]  # back from the store
        for actor in (a, b):
            await actor.close()

    asyncio.run(run())


def test_a_transaction_not_discharged_within_two_minutes_is_rolled_back() -> None:
    txns = Transactions()
    txn = txns.declare(now=1_000)
    assert txns.get(txn.txn_id, now=1_000 + 120_000) is txn
    with pytest.raises(TransactionRolledBack, match="not discharged within 120 s"):
        txns.discharge(txn.txn_id, now=1_000 + 120_001)
    with pytest.raises(TransactionUnknown):  # and it is gone
        txns.get(txn.txn_id, now=1_000 + 120_002)
