"""An AMQP transaction's commit on the pure partition core (``Transact``): the settlements of the
locks this core holds and the transaction's sends, in ONE batch, answered after its commit; a lock
that is no longer usable refuses the whole transaction and changes nothing; a failed batch stores
nothing and leaves the locks held; a session's messages only while the session is held. Rule by
rule with a fake clock."""

from __future__ import annotations

import uuid

from core_harness import Harness, PartitionStore, as_ref, draft
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition_core import (
    AcceptSession,
    CoreSettings,
    Delivered,
    Landed,
    LockLost,
    PublishCopy,
    Published,
    PublishEntry,
    Receive,
    Refused,
    Send,
    SendAccepted,
    ServerBusy,
    SessionLockLost,
    Settle,
    SettlementDone,
    StoreUnavailable,
    Tick,
    Transact,
    new_view,
)
from sodalite.model.store_ops import AppendTo, ClaimMessageIds, Outcome, RememberMessageIds
from sodalite.model.store_ops import Settle as SettleOp

LOCK = 30_000
WINDOW = 60_000
HOME = "home"  # the caller's name for the deciding core's own partition


def queue(store: PartitionStore | None = None, *, dedup: bool = False, shared: bool = False) -> Harness:
    settings = CoreSettings(lock_duration=LOCK, duplicate_window=WINDOW if dedup else None, shared_store=shared)
    return Harness(new_view(settings, 0, token_seed=7), store)


def record(body: str) -> MessageRecord:
    return MessageRecord(0, 0, None, None, None, None, None, None, 0, MessageState.ACTIVE, None, None, b"", 0,
                         body.encode())


def send(message_id: str | None, *copies: tuple[str, str]) -> PublishEntry:
    return PublishEntry(message_id, tuple(PublishCopy(target, record(body)) for target, body in copies))


def bodies(store: PartitionStore) -> list[bytes]:
    return [row.record.tail for _, row in sorted(store.rows.items())]


def locked(h: Harness, *bodies_sent: str) -> list[Delivered]:
    """Send ``bodies_sent`` to the queue and receive them in PeekLock: their deliveries."""
    h.run(Send(tuple(draft(body=b.encode()) for b in bodies_sent), "sent"))
    h.drain()
    h.run(Receive("r", len(bodies_sent)))
    h.drain()
    got = [r for r in h.replies if isinstance(r, Delivered)]
    assert [d.message.tail for d in got] == [b.encode() for b in bodies_sent]
    return got


def token(delivered: Delivered) -> uuid.UUID:
    assert delivered.lock_token is not None
    return delivered.lock_token


def complete(delivered: Delivered) -> Settle:
    return Settle(token(delivered), Outcome.COMPLETE)


def test_settlements_and_sends_are_one_batch_answered_after_its_commit() -> None:
    h = queue()
    old, other = locked(h, "old", "other")
    h.at(1_000)
    replies = h.run(Transact((complete(old), Settle(token(other), Outcome.DEFER)),
                             (send(None, ("b", "b1"), (HOME, "a1")), send(None, ("topic-s1", "t1"))), "txn"))
    assert replies == []  # nothing is durable yet
    assert len(h.effects) == 1
    (_, ops), = h.effects
    assert sorted(type(op).__name__ for op in ops) == ["AppendTo", "AppendTo", "AppendTo", "Settle"]
    (settle,) = [op for op in ops if isinstance(op, SettleOp)]
    assert [(i.sequence_number, i.outcome) for i in settle.items] == [
        (old.message.sequence_number, Outcome.COMPLETE), (other.message.sequence_number, Outcome.DEFER)]
    replies = h.drain()
    (published,) = [r for r in replies if isinstance(r, Published)]
    assert published.reply_to == "txn"
    stored = dict(published.stored)
    assert [r.tail for r in stored["b"]] == [b"b1"] and [r.tail for r in stored[HOME]] == [b"a1"]
    assert bodies(h.store.other("b")) == [b"b1"] and bodies(h.store.other("topic-s1")) == [b"t1"]
    assert old.message.sequence_number not in h.store.rows  # completed
    assert h.store.rows[other.message.sequence_number].record.state is MessageState.DEFERRED
    assert h.view.locks.held == {}
    assert h.view.counts.active == 0 and h.view.counts.deferred == 1


def test_a_lock_that_lapsed_refuses_the_transaction_and_nothing_changes() -> None:
    h = queue(dedup=True)
    (held,) = locked(h, "held")
    h.at(LOCK + 1)  # the lock lapsed before the discharge
    replies = h.run(Transact((complete(held),), (send("m1", ("b", "never"), (HOME, "never")),), "txn",
                             (True,)))
    assert LockLost("txn", token(held)) in replies
    assert not any(isinstance(r, Published | SettlementDone) for r in replies)
    h.drain()
    assert "b" not in h.store.others and HOME not in h.store.others
    assert held.message.sequence_number in h.store.rows  # still there, and received again
    # The refused transaction remembered no MessageId: a later send of it is stored.
    h.run(Send((draft("m1", body=b"m1"),), "s"))
    assert any(isinstance(r, SendAccepted) and r.sequence_numbers for r in h.drain())


def test_a_lock_settled_outside_the_transaction_refuses_it() -> None:
    h = queue()
    (held,) = locked(h, "held")
    h.run(Settle(token(held), Outcome.ABANDON, "abandon"))
    h.drain()
    replies = h.run(Transact((complete(held),), (send(None, ("b", "x")),), "txn"))
    assert replies == [LockLost("txn", token(held))]
    h.drain()
    assert "b" not in h.store.others


def test_one_lock_cannot_be_settled_twice_in_one_transaction() -> None:
    h = queue()
    (held,) = locked(h, "held")
    replies = h.run(Transact((complete(held), complete(held)), (), "txn"))
    assert [type(r) for r in replies] == [Refused]
    assert h.effects == type(h.effects)()  # nothing to apply
    h.drain()
    assert held.message.sequence_number in h.store.rows


def test_a_failed_batch_stores_nothing_and_the_locks_stay_held() -> None:
    h = queue(dedup=True)
    (held,) = locked(h, "held")
    h.run(Transact((complete(held),), (send("m1", ("b", "b1")),), "txn", (True,)))
    assert h.step(fail=True) == [ServerBusy("txn")]
    assert "b" not in h.store.others or bodies(h.store.other("b")) == []
    assert held.message.sequence_number in h.store.rows
    # Still this receiver's lock: the retried transaction commits, and the MessageId was forgotten.
    replies = h.run(Transact((complete(held),), (send("m1", ("b", "b1")),), "txn2", (True,))) + h.drain()
    assert any(isinstance(r, Published) and r.reply_to == "txn2" for r in replies)
    assert bodies(h.store.other("b")) == [b"b1"]
    assert held.message.sequence_number not in h.store.rows


def test_settlements_only_are_answered_by_the_last_settlement_after_the_commit() -> None:
    h = queue()
    first, second = locked(h, "first", "second")
    replies = h.run(Transact((complete(first), complete(second)), (), "txn"))
    assert replies == []
    replies = h.drain()
    assert [r for r in replies if isinstance(r, SettlementDone)] == [
        SettlementDone("txn", token(second), Outcome.COMPLETE)]
    assert h.store.rows == {}


def test_this_entitys_duplicate_detection_applies_to_the_sends_marked_for_it() -> None:
    h = queue(dedup=True)
    h.run(Send((draft("seen", body=b"seen"),), "s"))
    h.drain()
    replies = h.run(Transact((), (send("seen", (HOME, "dup")), send("new", (HOME, "new")),
                                  send("new", (HOME, "twice")), send("seen", ("b", "not-checked"))),
                             "txn", (True, True, True, False))) + h.drain()
    (published,) = [r for r in replies if isinstance(r, Published)]
    assert [r.tail for r in dict(published.stored)[HOME]] == [b"new"]
    assert [r.tail for r in dict(published.stored)["b"]] == [b"not-checked"]
    assert any(isinstance(op, RememberMessageIds) and op.entries == (("new", 0),) for op in h.ops)
    # Only duplicates: nothing to store but nothing to remember either, answered at once.
    assert h.run(Transact((), (send("new", (HOME, "again")),), "txn2", (True,))) == [Published("txn2", ())]


def test_sends_into_this_partition_are_taken_in_when_they_landed() -> None:
    h = queue(PartitionStore(ref=as_ref(HOME)))
    h.run(Receive("r", 5))
    h.drain()
    h.run(Transact((), (send(None, (HOME, "t1"), (HOME, "t2")),), "txn"))
    assert not [r for r in h.drain() if isinstance(r, Delivered)]  # not before the caller says they landed
    (published,) = [r for r in h.replies if isinstance(r, Published)]
    # The caller names HOME, this partition: the copies are stored here, and the core is told they landed.
    landed = dict(published.stored)[HOME]
    assert sorted(h.store.rows) == [r.sequence_number for r in landed]
    replies = h.run(Landed(landed)) + h.drain()
    assert [r.message.tail for r in replies if isinstance(r, Delivered)] == [b"t1", b"t2"]


def test_an_offline_store_answers_busy_and_holds_nothing() -> None:
    h = queue()
    (held,) = locked(h, "held")
    h.run(StoreUnavailable())
    assert h.run(Transact((complete(held),), (send(None, ("b", "x")),), "txn")) == [ServerBusy("txn")]
    assert not [op for op in h.ops if isinstance(op, AppendTo)]


def test_a_sessions_messages_commit_while_the_session_is_held_and_are_refused_once_it_is_lost() -> None:
    h = Harness(new_view(CoreSettings(lock_duration=LOCK, requires_session=True), 0, token_seed=11))
    h.run(Send((draft(None, session="s", body=b"one"), draft(None, session="s", body=b"two")), "sent"))
    h.drain()
    h.run(Receive("r", 0))
    h.run(AcceptSession("r", "s", "accept"))
    h.drain()
    h.run(Receive("r", 2))
    one, two = [r for r in h.drain() if isinstance(r, Delivered)]
    replies = h.run(Transact((complete(one),), (send(None, ("b", "reply")),), "txn")) + h.drain()
    assert any(isinstance(r, Published) and r.reply_to == "txn" for r in replies)
    assert one.message.sequence_number not in h.store.rows and bodies(h.store.other("b")) == [b"reply"]
    h.at(LOCK + 1)  # the session lock lapsed: its messages' locks with it
    h.run(Tick())
    h.drain()
    replies = h.run(Transact((complete(two),), (send(None, ("b", "never")),), "txn2"))
    assert [type(r) for r in replies] == [SessionLockLost]
    h.drain()
    assert two.message.sequence_number in h.store.rows and bodies(h.store.other("b")) == [b"reply"]


def test_a_lock_another_node_took_before_the_batch_applied_rolls_the_whole_transaction_back() -> None:
    """On a store several nodes share: the core decided the commit while its lock held, but before the
    batch applied the lock lapsed and another node claimed the message. The store's all-or-none
    settlement fails the batch: no send is stored, no settlement applied, the lock is lost, the
    discharge is answered as a lost lock (the transaction rolls back)."""
    h = queue(dedup=True)
    taken, kept = locked(h, "taken", "kept")
    h.at(LOCK - 10)
    assert h.run(Transact((complete(taken), Settle(token(kept), Outcome.DEFER)),
                          (send("m1", ("b", "never"), (HOME, "never")),), "txn", (True,))) == []
    (_, ops), = h.effects
    (settle,) = [op for op in ops if isinstance(op, SettleOp)]
    assert settle.all_or_none and settle.now == LOCK - 10
    # Node B, whose clock says the lock lapsed, claims the message first.
    h.store.lock_elsewhere(taken.message.sequence_number, uuid.UUID(int=999), LOCK + 60_000, owner="node-b")
    replies = h.drain()
    assert LockLost("txn", token(taken)) in replies
    assert not any(isinstance(r, Published | SettlementDone | ServerBusy) for r in replies)
    assert "b" not in h.store.others and HOME not in h.store.others  # no send stored
    assert h.store.rows[kept.message.sequence_number].record.state is MessageState.ACTIVE  # not deferred
    assert h.store.rows[taken.message.sequence_number].lock_owner == "node-b"
    assert token(taken) not in h.view.locks.held
    assert token(kept) in h.view.locks.held  # the other lock is still this receiver's
    replies = h.run(Settle(token(kept), Outcome.COMPLETE, "complete")) + h.drain()
    assert SettlementDone("complete", token(kept), Outcome.COMPLETE) in replies
    # The rolled-back transaction's MessageId was forgotten: a later send of it is stored.
    h.run(Send((draft("m1", body=b"m1"),), "s"))
    assert any(isinstance(r, SendAccepted) and r.sequence_numbers for r in h.drain())


def test_a_session_message_another_node_took_rolls_the_transaction_back_as_a_lost_session() -> None:
    h = Harness(new_view(CoreSettings(lock_duration=LOCK, requires_session=True), 0, token_seed=11))
    h.run(Send((draft(None, session="s", body=b"one"),), "sent"))
    h.drain()
    h.run(Receive("r", 0))
    h.run(AcceptSession("r", "s", "accept"))
    h.drain()
    h.run(Receive("r", 1))
    (one,) = [r for r in h.drain() if isinstance(r, Delivered)]
    h.run(Transact((complete(one),), (send(None, ("b", "never")),), "txn"))
    h.store.lock_elsewhere(one.message.sequence_number, uuid.UUID(int=999), LOCK * 3, now=h.now)
    replies = h.drain()
    assert SessionLockLost("txn", "s", token(one)) in replies
    assert "b" not in h.store.others and one.message.sequence_number in h.store.rows


def test_on_a_shared_store_the_store_decides_the_transactions_duplicates() -> None:
    """Another node stored MessageId "seen" (the store's history has it, this core's detector not):
    the batch takes the ids and gates the copies, so the duplicate is left out, as for a send."""
    h = queue(dedup=True, shared=True)
    (held,) = locked(h, "held")
    h.store.remember_ids(("seen", 0))
    h.run(Transact((complete(held),), (send("seen", (HOME, "dup")), send("new", (HOME, "new"))), "txn",
                   (True, True)))
    (_, ops), = h.effects
    assert [type(op).__name__ for op in ops] == ["Settle", "ClaimMessageIds", "AppendTo"]
    (claim,) = [op for op in ops if isinstance(op, ClaimMessageIds)]
    assert claim.message_ids == ("seen", "new")
    assert not any(isinstance(op, RememberMessageIds) for op in ops)
    replies = h.drain()
    (published,) = [r for r in replies if isinstance(r, Published)]
    assert [r.tail for r in dict(published.stored)[HOME]] == [b"new"]
    assert bodies(h.store.other(HOME)) == [b"new"]
    assert held.message.sequence_number not in h.store.rows
