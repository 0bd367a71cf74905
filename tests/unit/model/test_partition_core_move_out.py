"""The partition core's MoveOut (resubmit, move and purge by number), rule by rule, with a fake clock
against the memory store (tests/core_harness.py): one fenced MoveMessages, the reply
only after it committed, locked rows skipped, the window and the counts kept right."""

from __future__ import annotations

import uuid

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    CoreSettings,
    CountsRead,
    Delivered,
    MovedOut,
    MoveOut,
    ReadCounts,
    Receive,
    Schedule,
    Send,
    SendAccepted,
    ServerBusy,
    Settle,
    SettlementDone,
    new_view,
)
from sodalite.model.store_ops import MoveItem, MoveMessages, Outcome

LOCK = 30_000
OTHER = ("orders", 0)


def harness(store: PartitionStore | None = None, **settings: object) -> Harness:
    base: dict[str, object] = {"lock_duration": LOCK, "max_delivery_count": 5}
    base.update(settings)
    return Harness(new_view(CoreSettings(**base), 0, token_seed=17), store)  # type: ignore[arg-type]


def send(h: Harness, *bodies: str) -> list[int]:
    replies = h.run(Send(tuple(draft(b) for b in bodies), "s")) + h.drain()
    return [n for r in replies if isinstance(r, SendAccepted) for n in r.sequence_numbers]


def receive(h: Harness, n: int = 1, consumer: str = "c") -> list[Delivered]:
    return [r for r in h.run(Receive(consumer, n)) + h.drain() if isinstance(r, Delivered)]


def counts(h: Harness) -> tuple[int, int, int]:
    c = h.view.counts
    return c.active, c.scheduled, c.deferred


def items(*numbers: int) -> tuple[MoveItem, ...]:
    return tuple(MoveItem(n, reset_delivery_count=True) for n in numbers)


def test_a_purge_by_number_takes_every_state_skips_the_locked_and_answers_after_the_commit() -> None:
    h = harness()
    a, b, c, d = send(h, "a", "b", "c", "d")
    (sch,) = [n for r in h.run(Schedule((draft("s", scheduled=60_000),), "sch")) + h.drain()
              if isinstance(r, SendAccepted) for n in r.sequence_numbers]
    got = receive(h, 2)  # a, b locked
    assert [x.message.sequence_number for x in got] == [a, b]
    token = got[1].lock_token
    assert token is not None
    assert any(isinstance(r, SettlementDone) for r in h.run(Settle(token, Outcome.DEFER, "t")) + h.drain())
    assert counts(h) == (3, 1, 1)
    assert h.run(MoveOut(items(a, b, c, sch, 99), "purge")) == []  # nothing is durable yet
    ((_, ops),) = [e for e in h.effects if isinstance(e, tuple)]
    # a is locked here: not even asked for; b (deferred), c, the scheduled one and 99 are
    assert ops == (MoveMessages(h.now, items(b, c, sch, 99), False, None),)
    assert h.step() == [MovedOut("purge", (None, b, c, sch, None))]
    assert set(h.store.rows) == {a, d}
    assert h.effects and isinstance(h.effects[0], ReadCounts)  # the states were the store's: read them back
    h.drain()
    assert counts(h) == (2, 0, 0) and not h.view.counts.stale_after and not h.view.scheduled.heap
    assert [x.message.sequence_number for x in receive(h, 5)] == [d]  # c never delivered
    assert h.view.locks.held and all(lock.record.sequence_number in (a, d) for lock in h.view.locks.held.values())


def test_a_move_into_a_target_carries_the_items_and_names_the_new_numbers() -> None:
    h = harness()
    a, b = send(h, "a", "b")
    moved = (MoveItem(a, annotations=b"ann", annotation_count=1, tail=b"tail", reset_delivery_count=True,
                      enqueued_time=5, expires_at=500), MoveItem(b))
    h.run(MoveOut(moved, "mv", OTHER))
    ((_, ops),) = [e for e in h.effects if isinstance(e, tuple)]
    assert ops == (MoveMessages(h.now, moved, False, OTHER),)
    assert h.drain() == [MovedOut("mv", (1, 2))]
    assert [(target, record.sequence_number, item) for target, record, item in h.store.moved_out] == [
        (OTHER, a, moved[0]), (OTHER, b, moved[1])]
    assert h.store.gone == {a: "moved", b: "moved"} and counts(h) == (0, 0, 0)


def test_a_row_in_the_window_is_not_delivered_while_its_move_is_in_flight() -> None:
    h = harness()
    a, b = send(h, "a", "b")
    h.run(Receive("c", 0))
    h.drain()
    assert set(h.view.window.records) == {a, b}
    h.run(MoveOut(items(a), "mv", OTHER))
    assert a not in h.view.window.records
    delivered = [r for r in h.run(Receive("c", 5)) + h.drain() if isinstance(r, Delivered)]
    assert [x.message.sequence_number for x in delivered] == [b]


def test_a_failed_move_answers_server_busy_and_loses_nothing() -> None:
    h = harness()
    a, b = send(h, "a", "b")
    h.run(Receive("c", 0))
    h.drain()
    h.run(MoveOut(items(a, b), "mv", OTHER))
    assert h.step(fail=True) == [ServerBusy("mv")]
    assert set(h.store.rows) == {a, b} and counts(h) == (2, 0, 0)
    assert [x.message.sequence_number for x in receive(h, 5)] == [a, b]  # read again from the store


def test_a_row_locked_by_someone_else_stays_and_is_read_again() -> None:
    store = PartitionStore()
    h = harness(store)
    a, b = send(h, "a", "b")
    h.run(Receive("c", 0))
    h.drain()
    # another node locks a behind this core's back (a shared store)
    store.lock_elsewhere(a, uuid.UUID(int=1), LOCK)
    h.run(MoveOut(items(a, b), "mv"))
    assert h.drain() == [MovedOut("mv", (None, b))]
    assert a in store.rows and counts(h) == (1, 0, 0)
    assert h.view.window.rescan_at == LOCK  # read again: found locked, so looked at again when the lock lapses
    h.at(LOCK + 1)
    assert [x.message.sequence_number for x in receive(h, 5)] == [a]


def test_naming_nothing_movable_answers_at_once_without_a_batch() -> None:
    h = harness()
    (a,) = send(h, "a")
    receive(h, 1)  # locked here
    assert h.run(MoveOut(items(a, a), "mv")) == [MovedOut("mv", (None, None))]
    assert not [e for e in h.effects if isinstance(e, tuple)]


def test_a_number_named_twice_is_moved_once() -> None:
    h = harness()
    (a,) = send(h, "a")
    h.run(MoveOut(items(a, a), "mv", OTHER))
    ((_, ops),) = [e for e in h.effects if isinstance(e, tuple)]
    assert isinstance(ops[0], MoveMessages) and len(ops[0].items) == 1
    assert h.drain() == [MovedOut("mv", (1, None))]


def test_counts_come_back_from_the_store_after_a_move() -> None:
    h = harness()
    send(h, "a", "b", "c")
    h.run(MoveOut(items(1, 3), "mv", OTHER))
    h.step()
    read = h.effects.popleft()
    assert isinstance(read, ReadCounts) and h.view.counts.stale_after
    h.run(CountsRead(h.store.counts()))
    assert counts(h) == (1, 0, 0) and not h.view.counts.stale_after
    assert h.store.rows[2].record.state is MessageState.ACTIVE
