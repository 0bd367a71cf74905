"""A topic on the pure partition core: ``Publish`` (a send's copies for the subscriptions, in one
batch with the topic's duplicate history, answered after the commit; a scheduled message that came
due published and completed in one batch) and ``Landed`` (a subscription's core told of rows the
topic stored in it), rule by rule with a fake clock."""

from __future__ import annotations

from dataclasses import replace

from core_harness import Harness, PartitionStore, draft
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition_core import (
    CoreSettings,
    Delivered,
    Landed,
    LockLost,
    Publish,
    PublishCopy,
    Published,
    PublishEntry,
    Receive,
    Schedule,
    SendAccepted,
    ServerBusy,
    SettlementDone,
    Tick,
    new_view,
)
from sodalite.model.store_ops import AppendTo, Outcome, RememberMessageIds
from sodalite.model.store_ops import Settle as SettleOp

WINDOW = 60_000


def topic(store: PartitionStore | None = None, dedup: bool = True) -> Harness:
    settings = CoreSettings(lock_duration=30_000, duplicate_window=WINDOW if dedup else None)
    return Harness(new_view(settings, 0, token_seed=5), store)


def subscription(store: PartitionStore | None = None) -> Harness:
    return Harness(new_view(CoreSettings(lock_duration=30_000), 0, token_seed=9), store)


def record(body: str, *, state: MessageState = MessageState.ACTIVE, scheduled: int | None = None) -> MessageRecord:
    return MessageRecord(0, 0, None, None, None, None, None, scheduled, 0, state, None, None, b"", 0,
                         body.encode())


def entry(message_id: str | None, *copies: tuple[str, str]) -> PublishEntry:
    return PublishEntry(message_id, tuple(PublishCopy(target, record(body)) for target, body in copies))


def bodies(store: PartitionStore) -> list[bytes]:
    return [row.record.tail for _, row in sorted(store.rows.items())]


def test_copies_go_to_their_partitions_in_one_batch_and_the_answer_waits_for_the_commit() -> None:
    h = topic()
    replies = h.run(Publish((entry("m1", ("a", "1a"), ("b", "1b")), entry("m2", ("a", "2a"))), "p"))
    assert replies == []  # nothing is durable yet
    assert len(h.effects) == 1  # one batch: both targets and the history
    (_, ops), = h.effects
    assert [type(op) for op in ops] == [AppendTo, AppendTo, RememberMessageIds]
    replies = h.drain()
    published = [r for r in replies if isinstance(r, Published)]
    assert len(published) == 1
    stored = dict(published[0].stored)
    assert [r.sequence_number for r in stored["a"]] == [1, 2]
    assert [r.tail for r in stored["a"]] == [b"1a", b"2a"]
    assert [r.sequence_number for r in stored["b"]] == [1]
    assert bodies(h.store.other("a")) == [b"1a", b"2a"]
    assert bodies(h.store.other("b")) == [b"1b"]
    assert h.store.rows == {}  # the topic itself keeps nothing of a send


def test_a_duplicate_within_the_window_stores_nothing_and_is_acknowledged() -> None:
    h = topic()
    h.run(Publish((entry("m1", ("a", "first")),), "p1"))
    h.drain()
    h.at(1_000)
    replies = h.run(Publish((entry("m1", ("a", "again")), entry("m2", ("a", "new"))), "p2")) + h.drain()
    (published,) = [r for r in replies if isinstance(r, Published)]
    assert [r.tail for r in dict(published.stored)["a"]] == [b"new"]
    assert bodies(h.store.other("a")) == [b"first", b"new"]
    # Only duplicates: acknowledged at once, nothing to commit.
    assert h.run(Publish((entry("m2", ("a", "x")),), "p3")) == [Published("p3", ())]
    assert not h.effects
    # Past the window the id is new again.
    h.at(1_000 + WINDOW + 1)
    replies = h.run(Publish((entry("m1", ("a", "later")),), "p4")) + h.drain()
    assert any(isinstance(r, Published) and r.stored for r in replies)


def test_a_message_no_subscription_takes_is_still_remembered_and_answered_after_its_commit() -> None:
    h = topic()
    assert h.run(Publish((entry("m1"),), "p")) == []
    (_, ops), = h.effects
    assert [type(op) for op in ops] == [RememberMessageIds]
    assert h.drain() == [Published("p", ())]
    assert h.run(Publish((entry("m1", ("a", "dup")),), "q")) == [Published("q", ())]


def test_without_duplicate_detection_every_entry_is_stored() -> None:
    h = topic(dedup=False)
    h.run(Publish((entry("m1", ("a", "1")), entry("m1", ("a", "2"))), "p"))
    h.drain()
    assert bodies(h.store.other("a")) == [b"1", b"2"]
    assert h.run(Publish((entry(None),), "q")) == [Published("q", ())]


def test_a_failed_batch_answers_busy_stores_nothing_and_forgets_the_ids() -> None:
    h = topic()
    h.run(Publish((entry("m1", ("a", "1")), entry("m2")), "p"))
    assert h.step(fail=True) == [ServerBusy("p")]
    assert "a" not in h.store.others or bodies(h.store.other("a")) == []
    replies = h.run(Publish((entry("m1", ("a", "retry")),), "p2")) + h.drain()
    assert any(isinstance(r, Published) and r.stored for r in replies)
    assert bodies(h.store.other("a")) == [b"retry"]
    # A history-only publish that failed forgets its ids too.
    h.run(Publish((entry("m3"),), "p3"))
    assert h.step(fail=True) == [ServerBusy("p3")]
    replies = h.run(Publish((entry("m3", ("a", "m3")),), "p4")) + h.drain()
    assert any(isinstance(r, Published) and r.stored for r in replies)


def test_the_topic_store_being_down_answers_busy() -> None:
    from sodalite.model.partition_core import StoreUnavailable
    h = topic()
    h.run(StoreUnavailable())
    assert h.run(Publish((entry("m1", ("a", "1")),), "p")) == [ServerBusy("p")]
    assert not h.effects


def _due_message(h: Harness) -> Delivered:
    """Schedule a message on the topic for t=1000, let it come due, and take it as the topic's
    activator does (a PeekLock consumer)."""
    replies = h.run(Schedule((draft("s1", scheduled=1_000, body=b"sched"),), "s")) + h.drain()
    assert [r.sequence_numbers for r in replies if isinstance(r, SendAccepted)] == [(1,)]
    h.run(Receive("activator", 10))
    h.drain()
    h.at(1_000)
    replies = h.run(Tick()) + h.drain()
    (delivered,) = [r for r in replies if isinstance(r, Delivered)]
    return delivered


def test_a_due_scheduled_message_is_published_and_completed_in_one_batch() -> None:
    h = topic()
    delivered = _due_message(h)
    token = delivered.lock_token
    assert token is not None
    copies = (PublishCopy("a", replace(delivered.message, sequence_number=0)),)
    # Its duplicate detection applied when it was scheduled: the same id publishes now.
    assert h.run(Publish((PublishEntry("s1", copies),), "p", complete=token)) == []
    (_, ops), = h.effects
    assert [type(op) for op in ops] == [AppendTo, SettleOp]
    replies = h.drain()
    assert [type(r) for r in replies] == [Published]
    assert h.store.rows == {}  # left the topic
    assert bodies(h.store.other("a")) == [b"sched"]
    assert h.view.counts.scheduled == 0 and h.view.counts.active == 0


def test_a_due_message_no_subscription_takes_is_completed_and_the_settlement_answers() -> None:
    h = topic()
    delivered = _due_message(h)
    assert delivered.lock_token is not None
    h.run(Publish((PublishEntry("s1", ()),), "p", complete=delivered.lock_token))
    replies = h.drain()
    assert [type(r) for r in replies] == [SettlementDone]
    assert h.store.rows == {}


def test_publishing_under_a_lock_this_core_does_not_hold_publishes_nothing() -> None:
    h = topic()
    delivered = _due_message(h)
    assert delivered.lock_token is not None
    h.run(Publish((PublishEntry("s1", ()),), "first", complete=delivered.lock_token))
    h.drain()
    replies = h.run(Publish((entry("s1", ("a", "twice")),), "second", complete=delivered.lock_token))
    assert [type(r) for r in replies] == [LockLost]
    assert not h.effects
    assert "a" not in h.store.others


def _landed_in(h: Harness, *bodies_: str, state: MessageState = MessageState.ACTIVE,
               scheduled: int | None = None) -> tuple[MessageRecord, ...]:
    """Append rows to the subscription's store as a topic's batch would, and tell its core."""
    numbered = []
    for body in bodies_:
        rec = record(body, state=state, scheduled=scheduled)
        (seq,) = h.store.apply((_append(rec),))[0].sequence_numbers  # type: ignore[union-attr]
        numbered.append(replace(rec, sequence_number=seq))
    return tuple(numbered)


def _append(rec: MessageRecord) -> object:
    from sodalite.model.store_ops import Append
    return Append((rec,))


def test_landed_rows_reach_a_waiting_receiver_and_are_counted() -> None:
    h = subscription()
    h.run(Receive("r", 5))
    h.drain()
    rows = _landed_in(h, "x", "y")
    replies = h.run(Landed(rows)) + h.drain()
    assert [r.message.tail for r in replies if isinstance(r, Delivered)] == [b"x", b"y"]
    assert h.view.counts.active == 2


def test_landed_scheduled_rows_activate_at_their_time() -> None:
    h = subscription()
    h.run(Receive("r", 5))
    h.drain()
    rows = _landed_in(h, "later", state=MessageState.SCHEDULED, scheduled=5_000)
    h.run(Landed(rows))
    h.drain()
    assert h.view.counts.scheduled == 1
    assert h.next_due is not None and h.next_due <= 5_000
    h.at(5_000)
    replies = h.run(Tick()) + h.drain()
    assert [r.message.tail for r in replies if isinstance(r, Delivered)] == [b"later"]


def test_rows_that_land_while_a_read_is_in_flight_are_not_skipped() -> None:
    """The read may have run before the topic's commit: its shortness must not hide the rows."""
    store = PartitionStore()
    h = subscription(store)
    for i in range(3):  # a backlog, so the core reads (it is not at the tail)
        h.store.apply((_append(record(f"old{i}")),))
    h.view = new_view(CoreSettings(lock_duration=30_000), 0, token_seed=9, active=3, last_sequence_number=3)
    h.run(Receive("r", 100))
    read = h.effects.popleft()  # the read the receive asked for, answered below from before the landing
    rows_before = store.peek(1, 1_000)
    landed = _landed_in(h, "new")
    h.run(Landed(landed))
    from sodalite.model.partition_core import ReadWindow, WindowRead
    assert isinstance(read, ReadWindow)
    replies = h.run(WindowRead(rows_before)) + h.drain()
    got = [r.message.tail for r in h.replies if isinstance(r, Delivered)]
    assert got == [b"old0", b"old1", b"old2", b"new"], (got, replies)


def test_landed_rows_below_the_cursor_join_the_window_at_once() -> None:
    h = subscription()
    h.run(Receive("r", 0))
    h.drain()
    assert h.view.window.at_tail
    rows = _landed_in(h, "a")
    h.run(Landed(rows))
    h.drain()
    assert h.view.counts.active == 1
    replies = h.run(Receive("r", 1)) + h.drain()
    assert [r.message.tail for r in replies if isinstance(r, Delivered)] == [b"a"]
    # Completing it leaves the store empty, counted as such.
    (d,) = [r for r in replies if isinstance(r, Delivered)]
    assert d.lock_token is not None
    from sodalite.model.partition_core import Settle
    h.run(Settle(d.lock_token, Outcome.COMPLETE, "c"))
    h.drain()
    assert h.view.counts.active == 0 and h.store.rows == {}
