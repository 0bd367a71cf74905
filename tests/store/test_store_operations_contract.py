"""The store operations' contract (docs/store-port.md): every adapter passes the same tests.

The ``adapter`` fixture yields one adapter per name in :data:`ADAPTERS`; the tests speak only the
port. To hold another adapter to the contract, add its name to that list and a branch to
:func:`make_adapter` (PostgreSQL: "postgresql"). After every batch the tests also check the store's
counters against a recount of what ``peek`` shows (:func:`run`), so the counters are checked
through every operation, not only where a test names them.

Then SQLite alone: the in-place migration of a populated version-4 file (written with the exact
DDL and inserts of the version that shipped schema 4), and the query plans of claims and due
reads (index range scans, never a scan of the backlog). Last, a Hypothesis differential test runs
random operation sequences against the memory reference and each durable adapter and compares
every result and read.
"""

from __future__ import annotations

import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pg_server
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    PARTITION_SHIFT,
    Activate,
    Activated,
    Append,
    Appended,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    DeleteEntity,
    Done,
    EntityRecord,
    ForgetMessageIds,
    Gate,
    IdsClaimed,
    MessagingStore,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionCounts,
    PartitionMeta,
    PartitionRef,
    PruneMessageIds,
    Purge,
    Purged,
    PutEntity,
    PutSessionState,
    ReleaseSession,
    RememberMessageIds,
    RememberMoveKeys,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    SessionClaimed,
    Settle,
    Settled,
    SettleFenced,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
    numbering_base,
)
from sodalite.store.postgres import PostgresStore
from sodalite.store.sqlite import SqliteStore

# The adapters held to the contract (each also a branch of make_adapter).
ADAPTERS = ["memory", "sqlite", "postgresql"]

Q = PartitionRef("queue1", 0)
DLQ = PartitionRef("queue1/$deadletterqueue", 0)
OTHER = PartitionRef("queue2", 0)
T0 = 1_700_000_000_000
OWNER = "node-a"


def tok(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def toks(*ns: int) -> tuple[uuid.UUID, ...]:
    return tuple(tok(n) for n in ns)


def msg(**changes: Any) -> MessageRecord:
    """A message to append (the store numbers it); override any field by keyword."""
    base = MessageRecord(
        sequence_number=0, enqueued_time=T0, message_id="m", session_id=None, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=None, delivery_count=0,
        state=MessageState.ACTIVE, durable=True, priority=None, annotations=b"\xa3\x01a\xa1\x01b",
        annotation_count=1, tail=b"\x00Sw\xa1\x05hello",
    )
    return replace(base, **changes)


# -- the adapters under test -----------------------------------------------------------------------


@dataclass
class Adapter:
    name: str
    make: Callable[[], MessagingStore]
    persistent: bool
    store: MessagingStore

    def reopen(self) -> MessagingStore:
        if not self.persistent:
            pytest.skip(f"the {self.name} store keeps nothing across instances")
        self.store.close()
        self.store = self.make()
        self.store.open()
        return self.store


def make_adapter(name: str, directory: Path,
                 request: pytest.FixtureRequest) -> tuple[Callable[[], MessagingStore], bool]:
    """A factory of new, unopened adapters on one fresh storage, and whether that storage persists.

    ``request`` lets a server-backed adapter reach its fixtures (``request.getfixturevalue``)."""
    if name == "memory":
        return MemoryStore, False
    if name == "sqlite":
        db = directory / "store.db"
        return (lambda: SqliteStore(db)), True
    if name == "postgresql":
        url = _pg_schema_url()
        return (lambda: PostgresStore(url)), True
    raise AssertionError(f"no such adapter: {name}")


_pg_database: list[str] = []  # this module's database on this process's server, made on first use


def _pg_schema_url() -> str:
    """A new empty schema (a fresh store) in this module's PostgreSQL database, as a URL."""
    try:
        server = pg_server.shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    if not _pg_database:
        _pg_database.append(server.create_database("contract"))
    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_database[0], autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]  # the name is ours
    return f"{_pg_database[0]}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=ADAPTERS)
def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Adapter]:
    make, persistent = make_adapter(request.param, tmp_path, request)
    store = make()
    store.open()
    harness = Adapter(request.param, make, persistent, store)
    yield harness
    harness.store.close()


@pytest.fixture
def store(adapter: Adapter) -> MessagingStore:
    return adapter.store


def everything(store: MessagingStore, ref: PartitionRef) -> tuple[StoredMessage, ...]:
    return store.peek(ref, -(2**63), 1_000_000)


def recount(store: MessagingStore, ref: PartitionRef, last: int) -> PartitionCounts:
    rows = [s.record for s in everything(store, ref)]
    return PartitionCounts(
        active=sum(m.state == MessageState.ACTIVE for m in rows),
        scheduled=sum(m.state == MessageState.SCHEDULED for m in rows),
        deferred=sum(m.state == MessageState.DEFERRED for m in rows),
        size_in_bytes=sum(m.size for m in rows),
        last_sequence_number=last,
        first_sequence_number=min((m.sequence_number for m in rows), default=None),
    )


def check_counts(store: MessagingStore, *refs: PartitionRef) -> None:
    for ref in refs:
        counts = store.counts(ref)
        assert counts == recount(store, ref, counts.last_sequence_number), ref
        rows = everything(store, ref)
        assert all(s.record.sequence_number <= counts.last_sequence_number for s in rows)
    # the batched read a node on a shared store polls says the same, partition by partition
    assert store.counts_many(refs) == tuple(replace(store.counts(ref), first_sequence_number=None) for ref in refs)


def run(store: MessagingStore, *ops: StoreOp) -> tuple[OpResult, ...]:
    """Apply one batch and check every partition's counters against a recount."""
    results = store.apply(list(ops))
    assert len(results) == len(ops)
    check_counts(store, Q, DLQ, OTHER)
    return results


def one(store: MessagingStore, op: StoreOp) -> Any:
    (result,) = run(store, op)
    return result


def numbers(messages: Sequence[StoredMessage]) -> list[int]:
    return [s.record.sequence_number for s in messages]


def append(store: MessagingStore, *messages: MessageRecord, ref: PartitionRef = Q) -> list[int]:
    result = one(store, Append(tuple(messages), ref=ref))
    assert isinstance(result, Appended)
    return list(result.sequence_numbers)


def claim(store: MessagingStore, now: int, *tokens: uuid.UUID, until: int | None = None,
          **options: Any) -> tuple[StoredMessage, ...]:
    result = one(store, Claim(now, until if until is not None else now + 30_000, OWNER, tokens, ref=Q, **options))
    assert isinstance(result, Claimed)
    return result.messages


def settle(store: MessagingStore, now: int, *items: SettleItem) -> tuple[bool, ...]:
    result = one(store, Settle(now, items, ref=Q))
    assert isinstance(result, Settled)
    return result.applied


def stored(store: MessagingStore, n: int, ref: PartitionRef = Q) -> StoredMessage | None:
    found = store.fetch(ref, [n])
    return found[0] if found else None


# -- append and sequence numbers -------------------------------------------------------------------


def test_append_assigns_increasing_numbers_never_reused_after_deletes(store: MessagingStore) -> None:
    assert append(store, msg(), msg(), msg()) == [1, 2, 3]
    run(store, MoveMessages(T0, (MoveItem(3),), target=None, ref=Q))
    assert one(store, Purge(T0, None, ref=Q)) == Purged(2)
    assert append(store, msg()) == [4]
    assert append(store, msg(), ref=OTHER) == [1]  # per partition
    a, b = store.apply([Append((msg(),), ref=Q), Append((msg(), msg()), ref=Q)])
    assert (a, b) == (Appended((5,)), Appended((6, 7)))
    assert numbers(everything(store, Q)) == [4, 5, 6, 7]
    assert store.counts(Q).last_sequence_number == 7
    assert append(store, msg(sequence_number=3)) == [8]  # the record's own number is ignored
    assert append(store) == []


def test_numbers_survive_a_reopen(adapter: Adapter) -> None:
    append(adapter.store, msg(), msg())
    run(adapter.store, MoveMessages(T0, (MoveItem(1), MoveItem(2)), target=None, ref=Q))
    store = adapter.reopen()
    assert append(store, msg()) == [3]
    assert store.counts(Q) == PartitionCounts(1, 0, 0, msg().size, 3, 3)


def test_partition_i_numbers_start_after_i_shifted_by_48(adapter: Adapter) -> None:
    """A number's upper 16 bits name its partition (PARTITION_SHIFT): partition i counts from
    (i << 48) + 1, for appends and for what a dead-letter settlement or a move numbers in a target
    partition; partition 0 is unchanged."""
    store = adapter.store
    p3, dlq3, other3 = (PartitionRef(r.entity, 3) for r in (Q, DLQ, OTHER))
    base = 3 << PARTITION_SHIFT
    assert numbering_base(p3) == base and numbering_base(Q) == 0
    assert append(store, msg(), msg(), msg(), ref=p3) == [base + 1, base + 2, base + 3]
    assert append(store, msg()) == [1]
    assert store.counts(p3).last_sequence_number == base + 3
    assert store.counts(p3).first_sequence_number == base + 1
    claimed = one(store, Claim(T0, T0 + 30_000, OWNER, toks(1, 2), ref=p3))
    assert isinstance(claimed, Claimed) and numbers(claimed.messages) == [base + 1, base + 2]
    dead = one(store, Settle(T0, (SettleItem(base + 1, tok(1), Outcome.DEAD_LETTER, target=dlq3),), ref=p3))
    assert dead == Settled((True,))
    assert numbers(everything(store, dlq3)) == [base + 1]
    moved = one(store, MoveMessages(T0, (MoveItem(base + 3),), target=other3, ref=p3))
    assert moved == Moved((base + 1,))
    assert append(store, msg(), ref=p3) == [base + 4]  # never reused
    # A counter row some other operation created at 0 (a session state, a delete) is no lower bound.
    p6 = PartitionRef(Q.entity, 6)
    run(store, PutSessionState("s", b"x", T0, ref=p6), MoveMessages(T0, (MoveItem(1),), target=None, ref=p6))
    assert append(store, msg(), ref=p6) == [(6 << PARTITION_SHIFT) + 1]
    for ref in (p3, dlq3, other3, p6):
        check_counts(store, ref)
    if adapter.persistent:
        store = adapter.reopen()
        assert append(store, msg(), ref=p3) == [base + 5]
        assert append(store, msg(), ref=dlq3) == [base + 2]


def test_appended_messages_come_back_unlocked_and_whole(store: MessagingStore) -> None:
    m = msg(message_id="x", session_id="s", partition_key="s", time_to_live=5, expires_at=T0 + 5,
            delivery_count=2, durable=None, priority=9, annotations=b"", annotation_count=0, tail=b"t")
    (n,) = append(store, m)
    assert store.fetch(Q, [n, 99]) == (StoredMessage(replace(m, sequence_number=n), None, None, None),)


def test_a_batch_is_all_or_nothing(store: MessagingStore) -> None:
    append(store, msg())
    with pytest.raises(Exception):  # noqa: B017 - the adapter's own error for an impossible value
        store.apply([Append((msg(),), ref=Q), Append((msg(priority=2**64),), ref=Q)])
    assert numbers(everything(store, Q)) == [1]
    assert append(store, msg()) == [2]


# -- claim -----------------------------------------------------------------------------------------


def test_claim_takes_ready_messages_in_order_up_to_the_tokens(store: MessagingStore) -> None:
    append(store, *(msg() for _ in range(5)))
    got = claim(store, T0, tok(1), tok(2), until=T0 + 100)
    assert numbers(got) == [1, 2]
    assert [(s.lock_token, s.locked_until, s.lock_owner, s.record.delivery_count) for s in got] == [
        (tok(1), T0 + 100, OWNER, 1), (tok(2), T0 + 100, OWNER, 1)]
    assert store.fetch(Q, [1, 2]) == got
    # locked ones are skipped
    assert numbers(claim(store, T0 + 1, tok(3), tok(4), tok(5), tok(6))) == [3, 4, 5]
    assert claim(store, T0 + 2, tok(7)) == ()
    assert store.counts(Q).active == 5  # locked messages are active


def test_claim_skips_expired_deferred_and_scheduled_messages(store: MessagingStore) -> None:
    append(store, msg(expires_at=T0), msg(state=MessageState.DEFERRED),
           msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 - 1), msg(expires_at=T0 + 1), msg())
    assert numbers(claim(store, T0, *toks(1, 2, 3, 4))) == [4, 5]
    with pytest.raises(ValueError):
        Claim(T0, T0 + 1, OWNER, toks(1), state=MessageState.SCHEDULED, ref=Q)


def test_a_lapsed_lock_is_claimed_again_with_the_count_raised(store: MessagingStore) -> None:
    append(store, msg())
    claim(store, T0, tok(1), until=T0 + 10)
    assert claim(store, T0 + 9, tok(2)) == ()
    (again,) = claim(store, T0 + 10, tok(3), until=T0 + 50)
    assert (again.lock_token, again.locked_until, again.record.delivery_count) == (tok(3), T0 + 50, 2)


def test_claim_by_session(store: MessagingStore) -> None:
    append(store, msg(session_id="a"), msg(session_id="b"), msg(), msg(session_id="a"))
    assert numbers(claim(store, T0, *toks(1, 2, 3), session_id="a")) == [1, 4]
    assert claim(store, T0, tok(4), session_id="c") == ()
    assert numbers(claim(store, T0, *toks(5, 6, 7))) == [2, 3]  # None: whatever the session


def test_claim_by_sequence_numbers_takes_deferred_messages(store: MessagingStore) -> None:
    append(store, *(msg(state=MessageState.DEFERRED) for _ in range(4)), msg())
    got = claim(store, T0, *toks(1, 2, 3), sequence_numbers=(4, 2, 5, 99), state=MessageState.DEFERRED)
    assert numbers(got) == [2, 4]
    assert [s.lock_token for s in got] == [tok(1), tok(2)]
    assert all(s.record.state == MessageState.DEFERRED for s in got)
    # a locked one is skipped, not an error
    assert numbers(claim(store, T0, *toks(4, 5), sequence_numbers=(2, 3), state=MessageState.DEFERRED)) == [3]
    assert store.counts(Q).deferred == 4


def test_a_scheduled_message_is_claimed_by_number_and_completed_to_cancel_it(store: MessagingStore) -> None:
    scheduled, active = append(store, msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 60_000),
                               msg())
    before = store.counts(Q)
    assert (before.scheduled, before.active) == (1, 1)
    untouched = stored(store, active)
    # a SCHEDULED claim naming the active message takes nothing: a cancel never removes an active one
    assert claim(store, T0, tok(1), sequence_numbers=(active,), state=MessageState.SCHEDULED) == ()
    (got,) = claim(store, T0, tok(2), tok(3), sequence_numbers=(scheduled, active), state=MessageState.SCHEDULED)
    assert (got.record.sequence_number, got.record.state, got.lock_token) == (
        scheduled, MessageState.SCHEDULED, tok(2))
    assert settle(store, T0 + 1, SettleItem(scheduled, tok(2), Outcome.COMPLETE)) == (True,)
    assert stored(store, scheduled) is None
    after = store.counts(Q)
    assert (after.scheduled, after.active) == (0, 1)
    assert after.size_in_bytes == before.size_in_bytes - msg().size
    assert stored(store, active) == untouched
    assert store.next_due(Q, T0 + 1) is None  # its scheduled time no longer counts
    with pytest.raises(ValueError, match="by sequence number"):
        Claim(T0, T0 + 1, OWNER, toks(4), state=MessageState.SCHEDULED, ref=Q)


def test_cancel_scheduled_deletes_every_row_named_when_all_are_scheduled(store: MessagingStore) -> None:
    scheduled = MessageState.SCHEDULED
    a, b, c, active = append(store, msg(state=scheduled, scheduled_enqueue_time=T0 + 10),
                             msg(state=scheduled, scheduled_enqueue_time=T0 + 20),
                             msg(state=scheduled, scheduled_enqueue_time=T0 + 30), msg())
    before = store.counts(Q)
    untouched = stored(store, active)
    assert one(store, CancelScheduled(T0, (c, a, c), ref=Q)) == Unscheduled(())  # named twice: once
    assert stored(store, a) is None and stored(store, c) is None
    after = store.counts(Q)
    assert (after.scheduled, after.active) == (1, 1)
    assert after.size_in_bytes == before.size_in_bytes - 2 * msg().size
    assert after.last_sequence_number == before.last_sequence_number  # numbers are never reused
    assert stored(store, active) == untouched and stored(store, b) is not None
    assert store.next_due(Q, T0) == T0 + 20  # the cancelled times no longer count
    assert one(store, CancelScheduled(T0, (), ref=Q)) == Unscheduled(())


def test_cancel_scheduled_changes_nothing_when_one_number_is_not_a_free_scheduled_row(store: MessagingStore) -> None:
    scheduled = MessageState.SCHEDULED
    a, locked, due, active, deferred = append(
        store, msg(state=scheduled, scheduled_enqueue_time=T0 + 60_000),
        msg(state=scheduled, scheduled_enqueue_time=T0 + 60_000),
        msg(state=scheduled, scheduled_enqueue_time=T0 + 5), msg(), msg(state=MessageState.DEFERRED))
    # a row taken by number (what a cancel of an earlier release did) is not free to cancel while locked
    assert numbers(claim(store, T0, tok(1), sequence_numbers=(locked,), state=scheduled, until=T0 + 100)) == [locked]
    assert numbers(one(store, Activate(T0 + 10, 10, ref=Q)).messages) == [due]  # activated: no longer scheduled
    rows = everything(store, Q)
    counts = store.counts(Q)
    unknown = active + 1000
    result = one(store, CancelScheduled(T0 + 10, (a, active, unknown, deferred, locked, due, a), ref=Q))
    assert result == Unscheduled((active, unknown, deferred, locked, due))  # in the order asked, each once
    assert everything(store, Q) == rows and store.counts(Q) == counts  # nothing happened, a included
    assert one(store, CancelScheduled(T0 + 10, (locked,), ref=Q)) == Unscheduled((locked,))
    # once its lock lapsed, the row is a scheduled message like any other
    assert one(store, CancelScheduled(T0 + 100, (a, locked), ref=Q)) == Unscheduled(())
    assert stored(store, a) is None and stored(store, locked) is None and store.counts(Q).scheduled == 0
    # a number of another partition names no row here
    assert one(store, CancelScheduled(T0 + 100, (due,), ref=OTHER)) == Unscheduled((due,))
    assert stored(store, due) is not None


def test_cancel_scheduled_in_a_failed_batch_cancels_nothing(store: MessagingStore) -> None:
    (a,) = append(store, msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 60_000))
    with pytest.raises(Exception):  # noqa: B017 - the adapter's own error for an impossible value
        store.apply([CancelScheduled(T0, (a,), ref=Q), Append((msg(priority=2**64),), ref=Q)])
    assert stored(store, a) is not None and store.counts(Q).scheduled == 1
    check_counts(store, Q)


# -- settle ----------------------------------------------------------------------------------------


def test_settle_is_fenced_by_the_token_and_the_lock_time(store: MessagingStore) -> None:
    append(store, msg(), msg())
    claim(store, T0, tok(1), tok(2), until=T0 + 10)
    before = everything(store, Q)
    assert settle(store, T0 + 1, SettleItem(1, tok(2), Outcome.COMPLETE),  # the other message's token
                  SettleItem(2, tok(2), Outcome.ABANDON),
                  SettleItem(3, tok(1), Outcome.COMPLETE)) == (False, True, False)
    assert everything(store, Q)[0] == before[0]
    # at locked_until the lock has lapsed: nothing changes
    assert settle(store, T0 + 10, SettleItem(1, tok(1), Outcome.COMPLETE),
                  SettleItem(1, tok(1), Outcome.DEAD_LETTER, target=DLQ)) == (False, False)
    assert everything(store, Q)[0] == before[0]
    assert everything(store, DLQ) == ()


def test_a_settle_of_only_completions_is_fenced_item_by_item_and_counted(store: MessagingStore) -> None:
    # (SQLite answers a Settle of a few completions with one conditional delete per item.)
    append(store, msg(), msg(), msg(), msg())
    claim(store, T0, tok(1), tok(2), tok(3), until=T0 + 10)
    assert settle(store, T0 + 1, SettleItem(1, tok(2), Outcome.COMPLETE),  # another message's token
                  SettleItem(2, tok(2), Outcome.COMPLETE),
                  SettleItem(2, tok(2), Outcome.COMPLETE),  # settled already: no row left for it
                  SettleItem(4, tok(4), Outcome.COMPLETE),  # never locked
                  SettleItem(9, tok(9), Outcome.COMPLETE)) == (False, True, False, False, False)
    assert numbers(everything(store, Q)) == [1, 3, 4]
    check_counts(store, Q)
    assert store.counts(Q).active == 3
    # at locked_until the lock has lapsed: nothing is deleted
    assert settle(store, T0 + 10, SettleItem(1, tok(1), Outcome.COMPLETE),
                  SettleItem(3, tok(3), Outcome.COMPLETE)) == (False, False)
    assert numbers(everything(store, Q)) == [1, 3, 4]
    assert settle(store, T0 + 9, SettleItem(1, tok(1), Outcome.COMPLETE),
                  SettleItem(3, tok(3), Outcome.COMPLETE)) == (True, True)
    assert numbers(everything(store, Q)) == [4]
    check_counts(store, Q)
    assert store.counts(Q).active == 1 and store.counts(Q).size_in_bytes == msg().size


def test_an_all_or_none_settle_applies_with_the_rest_of_its_batch(store: MessagingStore) -> None:
    append(store, msg(), msg())
    claim(store, T0, tok(1), tok(2), until=T0 + 10)
    settled, sent, dead = run(store, Settle(T0 + 1, (SettleItem(1, tok(1), Outcome.COMPLETE),
                                                       SettleItem(2, tok(2), Outcome.DEAD_LETTER, target=DLQ)),
                                            all_or_none=True, ref=Q),
                              Append((msg(),), ref=OTHER), Append((msg(),), ref=DLQ))
    assert (settled, sent, dead) == (Settled((True, True)), Appended((1,)), Appended((2,)))
    assert everything(store, Q) == ()
    assert numbers(everything(store, DLQ)) == [1, 2] and numbers(everything(store, OTHER)) == [1]


def test_an_all_or_none_settle_whose_lock_another_owner_took_rolls_the_whole_batch_back(
        store: MessagingStore) -> None:
    """What an AMQP transaction on a shared store needs: node A decided its commit while its lock held
    (at T0 + 5), but the lock lapsed before the batch applied and node B claimed the message."""
    append(store, msg(), msg())
    claim(store, T0, tok(1), tok(2), until=T0 + 10)
    taken = one(store, Claim(T0 + 20, T0 + 100, "node-b", toks(5, 6), ref=Q))
    assert isinstance(taken, Claimed) and numbers(taken.messages) == [1, 2]
    before_q, before_counts = everything(store, Q), store.counts(Q)
    batch: list[StoreOp] = [Append((msg(),), ref=OTHER),
                            Settle(T0 + 5, (SettleItem(1, tok(5), Outcome.COMPLETE),  # B's token: applies
                                               SettleItem(2, tok(2), Outcome.COMPLETE)),  # A's: B holds it
                                   all_or_none=True, ref=Q),
                            Append((msg(),), ref=Q)]
    with pytest.raises(SettleFenced) as fenced:
        store.apply(batch)
    assert (fenced.value.op_index, fenced.value.item_index, fenced.value.sequence_number) == (1, 1, 2)
    assert everything(store, Q) == before_q  # message 1 not completed, no append
    assert store.counts(Q) == before_counts
    assert everything(store, OTHER) == () and store.counts(OTHER).last_sequence_number == 0
    check_counts(store, Q, DLQ, OTHER)
    # the same settlement without all_or_none applies what it can (the per-item fence)
    assert settle(store, T0 + 21, SettleItem(1, tok(5), Outcome.COMPLETE),
                  SettleItem(2, tok(2), Outcome.COMPLETE)) == (True, False)
    assert append(store, msg()) == [3]
    assert append(store, msg(), ref=OTHER) == [1]


def test_each_outcome(store: MessagingStore) -> None:
    append(store, *(msg() for _ in range(5)))
    claim(store, T0, *toks(1, 2, 3, 4, 5), until=T0 + 100)
    assert settle(store, T0 + 1,
                  SettleItem(1, tok(1), Outcome.COMPLETE),
                  SettleItem(2, tok(2), Outcome.ABANDON),
                  SettleItem(3, tok(3), Outcome.RELEASE),
                  SettleItem(4, tok(4), Outcome.DEFER),
                  SettleItem(1, tok(1), Outcome.COMPLETE),  # already settled
                  ) == (True, True, True, True, False)
    rows = {s.record.sequence_number: s for s in everything(store, Q)}
    assert sorted(rows) == [2, 3, 4, 5]
    assert (rows[2].lock_token, rows[2].locked_until, rows[2].lock_owner) == (None, None, None)
    assert (rows[2].record.delivery_count, rows[2].record.state) == (1, MessageState.ACTIVE)
    assert (rows[3].lock_token, rows[3].record.delivery_count) == (None, 0)
    assert (rows[4].lock_token, rows[4].record.delivery_count, rows[4].record.state) == (
        None, 0, MessageState.DEFERRED)  # a deferral gives the claim's count back, as a release does
    assert rows[5].lock_token == tok(5)
    assert store.counts(Q) == PartitionCounts(3, 0, 1, 4 * msg().size, 5, 2)
    # the abandoned one is ready again, the released one's count is given back once more
    assert numbers(claim(store, T0 + 2, tok(6), tok(7))) == [2, 3]
    assert settle(store, T0 + 2, SettleItem(3, tok(7), Outcome.RELEASE)) == (True,)
    assert stored(store, 3) == StoredMessage(replace(msg(), sequence_number=3), None, None, None)


def test_dead_letter_appends_to_the_dead_letter_partition_with_its_numbers(store: MessagingStore) -> None:
    append(store, msg(), ref=DLQ)
    append(store, msg(), msg(session_id="s", expires_at=T0 + 500), msg())
    claim(store, T0, *toks(1, 2, 3))
    assert settle(store, T0, SettleItem(3, tok(3), Outcome.DEAD_LETTER, target=DLQ),
                  SettleItem(2, tok(2), Outcome.DEAD_LETTER, annotations=b"\xa3\x01r", annotation_count=3,
                             target=DLQ)) == (True, True)
    assert numbers(everything(store, Q)) == [1]
    dead = everything(store, DLQ)
    assert numbers(dead) == [1, 2, 3]
    assert dead[1] == StoredMessage(replace(msg(), sequence_number=2, delivery_count=1), None, None, None)
    # A dead-lettered message has no expiry time: a dead-letter queue observes no time-to-live.
    assert dead[2] == StoredMessage(
        replace(msg(session_id="s", expires_at=None), sequence_number=3, delivery_count=1,
                annotations=b"\xa3\x01r", annotation_count=3), None, None, None)
    taken = one(store, Claim(T0 + 1000, T0 + 31_000, OWNER, toks(7, 8, 9), ref=DLQ))  # past its old expiry
    assert isinstance(taken, Claimed) and numbers(taken.messages) == [1, 2, 3]
    assert store.counts(DLQ).last_sequence_number == 3
    # A DEAD_LETTER item that names no target goes to the settled partition's dead-letter queue.
    unnamed = SettleItem(1, tok(1), Outcome.DEAD_LETTER)
    assert Settle(T0, (unnamed,), ref=Q).dead_letter_target(unnamed) == DLQ


def test_a_dead_letter_forwarded_into_another_queue_is_counted_afresh_with_its_new_times(
        store: MessagingStore) -> None:
    """ForwardDeadLetteredMessagesTo: the dead-lettered copy enters another queue's partition of the
    same store, fenced like any settlement, its delivery count reset and its enqueued and expiry times
    the item's (a plain dead letter keeps its count and never expires: the test above)."""
    target = PartitionRef("fdlq-target", 0)
    append(store, msg(), msg(expires_at=T0 + 500))
    claim(store, T0, *toks(1, 2))
    assert settle(store, T0 + 10, SettleItem(1, tok(1), Outcome.DEAD_LETTER, target=target, tail=b"why",
                                             reset_delivery_count=True, enqueued_time=T0 + 10,
                                             expires_at=T0 + 60_000),
                  SettleItem(2, tok(9), Outcome.DEAD_LETTER, target=target, reset_delivery_count=True,
                             enqueued_time=T0 + 10)) == (True, False)  # a stale token moves nothing
    assert numbers(everything(store, Q)) == [2]
    (forwarded,) = everything(store, target)
    assert forwarded == StoredMessage(replace(msg(), sequence_number=1, delivery_count=0, tail=b"why",
                                              enqueued_time=T0 + 10, expires_at=T0 + 60_000), None, None, None)
    assert store.counts(target).active == 1 and store.counts(Q).active == 1


def test_a_dead_letter_that_gives_its_delivery_back_keeps_the_count_from_before_the_claim(
        store: MessagingStore) -> None:
    """A client's dead-lettering does not count the delivery it ends (as a complete or a defer): the
    copy's count is the row's minus the claim's one (not below 0); without the flag it keeps the row's
    (an abandon that used up the deliveries counted). Into a partition of the same store as well."""
    target = PartitionRef("gb-target", 0)
    append(store, msg(), replace(msg(), delivery_count=3), msg())
    claim(store, T0, *toks(1, 2, 3))  # counts 1, 4, 1
    assert settle(store, T0, SettleItem(1, tok(1), Outcome.DEAD_LETTER, target=DLQ, keep_sequence_number=True,
                                        give_back_delivery=True),
                  SettleItem(2, tok(2), Outcome.DEAD_LETTER, target=target, give_back_delivery=True),
                  SettleItem(3, tok(3), Outcome.DEAD_LETTER, target=DLQ,
                             keep_sequence_number=True)) == (True, True, True)
    assert [m.record.delivery_count for m in everything(store, DLQ)] == [0, 1]
    assert [m.record.delivery_count for m in everything(store, target)] == [3]


def test_session_ids_lists_each_session_with_messages_of_the_states_asked_once(store: MessagingStore) -> None:
    append(store, msg(session_id="b"), msg(session_id="a"), msg(session_id="b"), msg(),
           replace(msg(session_id="c"), state=MessageState.DEFERRED))
    claim(store, T0, tok(1))  # locked messages still count
    assert store.session_ids(Q, frozenset({MessageState.ACTIVE})) == ("a", "b")
    assert store.session_ids(Q, frozenset(MessageState)) == ("a", "b", "c")
    assert store.session_ids(DLQ, frozenset(MessageState)) == ()


def test_a_dead_letter_kept_in_its_dead_letter_partition_keeps_its_number(adapter: Adapter) -> None:
    """Settle DEAD_LETTER and MoveMessages with the keep flag (the core sets it when the target is
    the entity's own dead-letter partition): the copy keeps its number there, as Service Bus keeps
    it, out of order if so; the dead-letter partition's counter becomes the greater of its own and
    the number, so ``last`` stays right; the source never gives the number again."""
    store = adapter.store
    append(store, *(msg() for _ in range(6)))
    claim(store, T0, *toks(1, 2, 3, 4))
    assert settle(store, T0, SettleItem(4, tok(4), Outcome.DEAD_LETTER, target=DLQ, tail=b"why",
                                        keep_sequence_number=True),
                  SettleItem(2, tok(2), Outcome.DEAD_LETTER, target=DLQ, keep_sequence_number=True),
                  SettleItem(3, tok(9), Outcome.DEAD_LETTER, target=DLQ,
                             keep_sequence_number=True)) == (True, True, False)  # a stale token keeps nothing
    assert numbers(everything(store, DLQ)) == [2, 4]
    assert stored(store, 4, DLQ) == StoredMessage(replace(msg(), sequence_number=4, delivery_count=1, tail=b"why"),
                                                  None, None, None)
    assert store.counts(DLQ).last_sequence_number == 4
    # Unlocked rows (expiry, MaxDeliveryCount) moved with the flag: below the counter, and above it.
    assert one(store, MoveMessages(T0 + 40_000, (MoveItem(1, tail=b"expired"), MoveItem(6), MoveItem(9)), target=DLQ,
                                   keep_sequence_numbers=True, ref=Q)) == Moved((1, 6, None))
    assert numbers(everything(store, DLQ)) == [1, 2, 4, 6]
    assert stored(store, 1, DLQ) is not None and stored(store, 1, DLQ).record.tail == b"expired"  # type: ignore[union-attr]
    assert store.counts(DLQ).last_sequence_number == 6 and store.counts(DLQ).first_sequence_number == 1
    assert numbers(everything(store, Q)) == [3, 5]
    assert append(store, msg()) == [7]  # never reused by the source
    with pytest.raises(ValueError):
        MoveMessages(T0, (MoveItem(3),), target=None, keep_sequence_numbers=True, ref=Q)
    if adapter.persistent:
        store = adapter.reopen()
        assert numbers(everything(store, DLQ)) == [1, 2, 4, 6]
        assert store.counts(DLQ).last_sequence_number == 6
        check_counts(store, Q, DLQ)


def test_kept_numbers_in_partitions_carry_their_partition(store: MessagingStore) -> None:
    """Partition i's dead letters go to partition i of the dead-letter entity and keep their numbers,
    whose upper bits name partition i; that partition's own numbers go on above them."""
    base = 2 << PARTITION_SHIFT
    p2, dlq2 = PartitionRef(Q.entity, 2), PartitionRef(DLQ.entity, 2)
    assert append(store, msg(), msg(), ref=p2) == [base + 1, base + 2]
    taken = one(store, Claim(T0, T0 + 30_000, OWNER, toks(1), ref=p2))
    assert isinstance(taken, Claimed)
    assert one(store, Settle(T0, (SettleItem(base + 1, tok(1), Outcome.DEAD_LETTER, target=dlq2,
                                                 keep_sequence_number=True),), ref=p2)) == Settled((True,))
    assert one(store, MoveMessages(T0, (MoveItem(base + 2),), target=dlq2, keep_sequence_numbers=True,
                                   ref=p2)) == Moved(
        (base + 2,))
    assert numbers(everything(store, dlq2)) == [base + 1, base + 2]
    assert store.counts(dlq2).last_sequence_number == base + 2
    assert append(store, msg(), ref=dlq2) == [base + 3]
    check_counts(store, p2, dlq2)


def test_a_dead_letter_numbered_by_its_entity_never_meets_a_kept_number(adapter: Adapter) -> None:
    """``Append(numbered_by=...)``: a topic's fan-out puts a dead letter straight into a subscription's
    dead-letter partition, numbered by the subscription's counter (as version 1 numbers it), so a
    message dead-lettered later keeps its number without meeting it. Gated appends too."""
    store = adapter.store
    assert one(store, Append((msg(), msg()), numbered_by=Q, ref=DLQ)) == Appended((1, 2))
    assert append(store, msg(), msg()) == [3, 4]
    claim(store, T0, tok(3))
    assert settle(store, T0, SettleItem(3, tok(3), Outcome.DEAD_LETTER, target=DLQ,
                                        keep_sequence_number=True)) == (True,)
    assert numbers(everything(store, DLQ)) == [1, 2, 3]
    assert store.counts(DLQ).last_sequence_number == 3 and store.counts(Q).last_sequence_number == 4
    claim_id = tok(50)
    results = run(store, ClaimMessageIds(T0, 1000, claim_id, ("a",), ref=OTHER),
                  Append((msg(message_id="a"), msg(message_id="b"), msg()),
                         Gate(claim_id, ("a", "b", None), ref=OTHER), numbered_by=Q, ref=DLQ))
    assert results[1] == Appended((5, 0, 6))
    assert numbers(everything(store, DLQ)) == [1, 2, 3, 5, 6]
    assert store.counts(Q).last_sequence_number == 6 and store.counts(DLQ).last_sequence_number == 6
    assert append(store, msg()) == [7]
    check_counts(store, Q, DLQ)
    if adapter.persistent:
        store = adapter.reopen()
        assert store.counts(DLQ).last_sequence_number == 6
        assert append(store, msg()) == [8]


def test_a_kept_number_the_dead_letter_partition_holds_already_is_replaced_above_everything(adapter: Adapter) -> None:
    """A dead-letter partition an earlier release wrote (it numbered dead letters with that partition's
    own counter) may hold a number a dead letter would keep: that one gets a number above the
    counter and every number the operation keeps, in item order; no batch fails. ``numbered_by``
    numbers above both counters."""
    store = adapter.store
    assert append(store, msg(tail=b"old"), msg(tail=b"old"), ref=DLQ) == [1, 2]  # the earlier release's
    append(store, *(msg() for _ in range(4)))
    claim(store, T0, *toks(1, 2, 3, 4))
    assert settle(store, T0, SettleItem(2, tok(2), Outcome.DEAD_LETTER, target=DLQ, keep_sequence_number=True),
                  SettleItem(4, tok(4), Outcome.DEAD_LETTER, target=DLQ,
                             keep_sequence_number=True)) == (True, True)
    assert numbers(everything(store, DLQ)) == [1, 2, 4, 5]
    assert [s.record.tail for s in everything(store, DLQ)] == [b"old", b"old", msg().tail, msg().tail]
    assert store.counts(DLQ).last_sequence_number == 5
    assert one(store, MoveMessages(T0 + 40_000, (MoveItem(1), MoveItem(3)), target=DLQ,
                                   keep_sequence_numbers=True, ref=Q)) == Moved((6, 3))
    assert numbers(everything(store, DLQ)) == [1, 2, 3, 4, 5, 6]
    assert store.counts(DLQ).last_sequence_number == 6
    # Numbered by the queue's counter (4) too, but above the dead-letter partition's (6): 7.
    assert one(store, Append((msg(),), numbered_by=Q, ref=DLQ)) == Appended((7,))
    assert store.counts(Q).last_sequence_number == 7
    assert append(store, msg()) == [8]
    check_counts(store, Q, DLQ)


def test_annotations_replaced_before_abandon_and_defer(store: MessagingStore) -> None:
    append(store, msg(), msg())
    claim(store, T0, tok(1), tok(2))
    settle(store, T0, SettleItem(1, tok(1), Outcome.ABANDON, annotations=b"new-annotations", annotation_count=2),
           SettleItem(2, tok(2), Outcome.DEFER, annotations=b"", annotation_count=0))
    first, second = everything(store, Q)
    assert (first.record.annotations, first.record.annotation_count) == (b"new-annotations", 2)
    assert (second.record.annotations, second.record.annotation_count) == (b"", 0)


def test_dead_letter_with_a_new_tail_carries_it_into_the_dead_letter_partition(store: MessagingStore) -> None:
    append(store, msg(), msg(), msg())
    claim(store, T0, *toks(1, 2, 3))
    reason_tail = msg().tail + b" and a dead-letter reason"  # opaque to the store; longer than msg()'s
    assert settle(store, T0, SettleItem(1, tok(1), Outcome.DEAD_LETTER, target=DLQ, tail=reason_tail),
                  SettleItem(2, tok(2), Outcome.DEAD_LETTER, annotations=b"\xa3\x01r", annotation_count=3,
                             target=DLQ, tail=b"t"),
                  SettleItem(3, tok(3), Outcome.DEAD_LETTER, target=DLQ, tail=b"")) == (True, True, True)
    assert everything(store, Q) == ()
    dead = [s.record for s in everything(store, DLQ)]
    assert dead == [replace(msg(), sequence_number=1, delivery_count=1, tail=reason_tail),
                    replace(msg(), sequence_number=2, delivery_count=1, annotations=b"\xa3\x01r", annotation_count=3,
                            tail=b"t"),
                    replace(msg(), sequence_number=3, delivery_count=1, tail=b"")]
    annotations = len(msg().annotations)
    assert store.counts(Q) == PartitionCounts(0, 0, 0, 0, 3, None)
    assert store.counts(DLQ) == PartitionCounts(
        3, 0, 0, annotations + len(reason_tail) + 3 + 1 + annotations, 3, 1)


def test_tail_replaced_before_abandon_and_defer_and_counted_at_its_new_size(store: MessagingStore) -> None:
    append(store, msg(), msg(), msg())
    claim(store, T0, *toks(1, 2, 3))
    assert settle(store, T0, SettleItem(1, tok(1), Outcome.ABANDON, tail=b"a much longer tail than before"),
                  SettleItem(2, tok(2), Outcome.DEFER, annotations=b"", annotation_count=0, tail=b"x"),
                  SettleItem(3, tok(3), Outcome.ABANDON)) == (True, True, True)
    first, second, third = (s.record for s in everything(store, Q))
    assert (first.annotations, first.tail, first.state) == (msg().annotations, b"a much longer tail than before",
                                                            MessageState.ACTIVE)
    assert (second.annotations, second.annotation_count, second.tail, second.state) == (
        b"", 0, b"x", MessageState.DEFERRED)
    assert third == replace(msg(), sequence_number=3, delivery_count=1)  # no tail given: kept
    assert store.counts(Q) == PartitionCounts(
        2, 0, 1, len(msg().annotations) + 30 + 1 + msg().size, 3, 1)
    # a stale token changes nothing, tail included
    assert settle(store, T0, SettleItem(3, tok(9), Outcome.ABANDON, tail=b"never")) == (False,)
    assert stored(store, 3).record.tail == msg().tail  # type: ignore[union-attr]


def test_move_with_a_new_tail(store: MessagingStore) -> None:
    append(store, msg(), msg(), msg())
    claim(store, T0, tok(1), until=T0 + 10)  # 1 locked: it stays, tail untouched
    result = one(store, MoveMessages(T0, (MoveItem(1, tail=b"no"), MoveItem(2, tail=b"dead-lettered tail"),
                                             MoveItem(3, annotations=b"r", annotation_count=1,
                                                      tail=b"")), target=DLQ, ref=Q))
    assert result == Moved((None, 1, 2))
    assert stored(store, 1).record.tail == msg().tail  # type: ignore[union-attr]
    dead = [s.record for s in everything(store, DLQ)]
    assert dead == [replace(msg(), sequence_number=1, tail=b"dead-lettered tail"),
                    replace(msg(), sequence_number=2, annotations=b"r", annotation_count=1, tail=b"")]
    assert store.counts(Q).size_in_bytes == msg().size
    assert store.counts(DLQ) == PartitionCounts(2, 0, 0, len(msg().annotations) + 18 + 1, 2, 1)
    # without a target, a tail changes nothing (the message is gone)
    assert one(store, MoveMessages(T0 + 10, (MoveItem(1, tail=b"gone"),), target=None, ref=Q)) == Moved((1,))
    assert store.counts(Q) == PartitionCounts(0, 0, 0, 0, 3, None)


def test_renew_locks(store: MessagingStore) -> None:
    append(store, msg(), msg())
    claim(store, T0, tok(1), tok(2), until=T0 + 10)
    result = one(store, RenewLocks(T0 + 5, T0 + 50, ((1, tok(1)), (2, tok(1)), (3, tok(3))), ref=Q))
    assert result == Renewed((True, False, False))
    assert stored(store, 1).locked_until == T0 + 50  # type: ignore[union-attr]
    assert stored(store, 2).locked_until == T0 + 10  # type: ignore[union-attr]
    assert one(store, RenewLocks(T0 + 10, T0 + 60, ((2, tok(2)),), ref=Q)) == Renewed((False,))  # lapsed
    assert settle(store, T0 + 20, SettleItem(1, tok(1), Outcome.COMPLETE)) == (True,)


# -- move, activate, purge -------------------------------------------------------------------------


def test_move_to_a_target_and_delete_without_one(store: MessagingStore) -> None:
    append(store, msg(), msg(expires_at=T0 + 5), msg(), msg(state=MessageState.DEFERRED, delivery_count=4))
    append(store, msg(), ref=OTHER)
    claim(store, T0, tok(1), until=T0 + 10)  # 1 locked
    result = one(store, MoveMessages(T0, (MoveItem(1), MoveItem(2), MoveItem(9),
                                             MoveItem(4, annotations=b"r", annotation_count=1,
                                                      reset_delivery_count=True)), target=OTHER, ref=Q))
    assert result == Moved((None, 2, None, 3))
    assert numbers(everything(store, Q)) == [1, 3]
    moved = everything(store, OTHER)
    assert moved[-1].record == replace(msg(), sequence_number=3, delivery_count=0, state=MessageState.ACTIVE,
                                       annotations=b"r", annotation_count=1)
    assert moved[-2].record == replace(msg(), sequence_number=2)  # moved, it has no expiry time any more
    assert one(store, MoveMessages(T0, (MoveItem(3), MoveItem(3)), target=None, ref=Q)) == Moved((3, None))
    assert one(store, MoveMessages(T0 + 10, (MoveItem(1),), target=None, ref=Q)) == Moved((1,))  # the lock lapsed
    assert everything(store, Q) == ()


def test_a_move_into_another_queue_restamps_the_copy_when_asked(store: MessagingStore) -> None:
    """A resubmit or move into a queue (not a dead-letter queue): the copy gets the item's enqueued
    time and expiry time, its count reset, state ACTIVE, in the same transaction as the delete."""
    append(store, msg(state=MessageState.DEFERRED, delivery_count=3),
           msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 99), msg(expires_at=T0 + 7))
    result = one(store, MoveMessages(T0 + 20, (
        MoveItem(1, reset_delivery_count=True, enqueued_time=T0 + 20, expires_at=T0 + 80),
        MoveItem(2, reset_delivery_count=True, enqueued_time=T0 + 20),
        MoveItem(3, tail=b"t")), target=OTHER, ref=Q))
    assert result == Moved((1, 2, 3))
    first, second, third = (s.record for s in everything(store, OTHER))
    assert first == replace(msg(), sequence_number=1, enqueued_time=T0 + 20, expires_at=T0 + 80)
    assert second == replace(msg(), sequence_number=2, enqueued_time=T0 + 20, scheduled_enqueue_time=T0 + 99)
    assert third == replace(msg(), sequence_number=3, tail=b"t")  # no times given: enqueued kept, no expiry
    assert store.counts(Q) == PartitionCounts(0, 0, 0, 0, 3, None)
    assert store.counts(OTHER) == PartitionCounts(3, 0, 0, 2 * msg().size + len(msg().annotations) + 1, 3, 1)
    assert store.next_due(OTHER, T0 + 20) == T0 + 80


def test_activate_due_scheduled_messages_in_time_order(store: MessagingStore) -> None:
    scheduled = MessageState.SCHEDULED
    append(store, msg(state=scheduled, scheduled_enqueue_time=T0 + 30),
           msg(state=scheduled, scheduled_enqueue_time=T0 + 10),
           msg(state=scheduled, scheduled_enqueue_time=T0 + 10),
           msg(state=scheduled, scheduled_enqueue_time=T0 + 99), msg())
    assert claim(store, T0 + 50, tok(1), tok(2)) != ()  # only the active one: 5
    result = one(store, Activate(T0 + 30, 2, ref=Q))
    assert isinstance(result, Activated)
    assert numbers(result.messages) == [2, 3]
    assert all(s.record.state == MessageState.ACTIVE and s.lock_token is None for s in result.messages)
    assert numbers(one(store, Activate(T0 + 30, 10, ref=Q)).messages) == [1]
    assert one(store, Activate(T0 + 30, 10, ref=Q)) == Activated(())
    assert one(store, Activate(T0 + 1000, 0, ref=Q)) == Activated(())
    assert store.counts(Q).scheduled == 1
    assert numbers(claim(store, T0 + 50, *toks(3, 4, 5, 6))) == [1, 2, 3]


def test_purge_spares_locked_messages(store: MessagingStore) -> None:
    append(store, msg(), msg(state=MessageState.DEFERRED), msg(state=MessageState.SCHEDULED,
                                                              scheduled_enqueue_time=T0), msg(), msg())
    claim(store, T0, tok(1), until=T0 + 10)
    assert one(store, Purge(T0, 4, ref=Q)) == Purged(3)
    assert numbers(everything(store, Q)) == [1, 5]
    assert one(store, Purge(T0 + 10, None, ref=Q)) == Purged(2)
    assert store.counts(Q) == PartitionCounts(0, 0, 0, 0, 5, None)
    assert one(store, Purge(T0, None, ref=Q)) == Purged(0)


# -- restore (a ReceiveAndDelete delivery never written) -------------------------------------------


def test_restore_puts_a_taken_message_back_in_place_as_it_was(adapter: Adapter) -> None:
    store = adapter.store
    append(store, msg(message_id="a"), msg(message_id="b", delivery_count=2), msg(message_id="c"))
    before = [s.record for s in everything(store, Q)]
    # ReceiveAndDelete: claim then delete in one batch (the delivery count went up with the claim)
    results = run(store, Claim(T0, T0 + 30_000, OWNER, toks(1, 2), ref=Q),
                  Settle(T0, (SettleItem(1, tok(1), Outcome.COMPLETE), SettleItem(2, tok(2), Outcome.COMPLETE)), ref=Q))
    assert results[1] == Settled((True, True))
    assert numbers(everything(store, Q)) == [3]
    # the transfer of 2 was never written: back under its number, with its count as before the claim
    assert one(store, Restore((before[1],), ref=Q)) == Restored((True,))
    assert [s.record for s in everything(store, Q)] == [before[1], before[2]]
    back = stored(store, 2)
    assert back is not None and back.lock_token is None and back.record.delivery_count == 2
    # a number held already is left as it is; numbers are not reused by the next append
    assert one(store, Restore((before[2], before[0]), ref=Q)) == Restored((False, True))
    assert append(store, msg(message_id="d")) == [4]
    assert store.counts(Q) == PartitionCounts(4, 0, 0, 4 * msg().size, 4, 1)
    # durable, and claimable again in order
    store = adapter.reopen() if adapter.persistent else store
    assert numbers(everything(store, Q)) == [1, 2, 3, 4]
    assert numbers(claim(store, T0 + 1, tok(5), tok(6))) == [1, 2]


def test_restore_keeps_the_state_and_counts_it(store: MessagingStore) -> None:
    append(store, msg(state=MessageState.DEFERRED), msg())
    deferred = everything(store, Q)[0].record
    run(store, MoveMessages(T0, (MoveItem(1),), target=None, ref=Q))
    assert one(store, Restore((deferred, deferred), ref=Q)) == Restored((True, False))
    assert store.counts(Q) == PartitionCounts(1, 0, 1, 2 * msg().size, 2, 1)
    assert one(store, Restore((), ref=Q)) == Restored(())


# -- session locks ---------------------------------------------------------------------------------


def test_claim_session_by_id(store: MessagingStore) -> None:
    take = ClaimSession(T0, tok(1), T0 + 10, OWNER, "a", ref=Q)
    assert one(store, take) == SessionClaimed("a")  # the session need not have messages
    assert one(store, replace(take, token=tok(2))) == SessionClaimed(None)
    assert one(store, replace(take, now=T0 + 10, token=tok(2), locked_until=T0 + 40)) == SessionClaimed("a")
    assert one(store, RenewSession(T0 + 11, "a", tok(1), T0 + 90, ref=Q)) == Renewed((False,))
    assert one(store, RenewSession(T0 + 11, "a", tok(2), T0 + 90, ref=Q)) == Renewed((True,))
    assert store.next_due(Q, T0 + 11) == T0 + 90
    assert one(store, RenewSession(T0 + 90, "a", tok(2), T0 + 99, ref=Q)) == Renewed((False,))  # lapsed
    assert one(store, ReleaseSession("a", tok(1), ref=Q)) == Renewed((False,))
    assert one(store, ReleaseSession("a", tok(2), ref=Q)) == Renewed((True,))  # by token only
    assert one(store, ReleaseSession("a", tok(2), ref=Q)) == Renewed((False,))
    assert one(store, replace(take, token=tok(3))) == SessionClaimed("a")


def test_claim_the_next_available_session(store: MessagingStore) -> None:
    append(store, msg(), msg(session_id="x", expires_at=T0), msg(session_id="b", state=MessageState.DEFERRED),
           msg(session_id="c"), msg(session_id="b"), msg(session_id="d"))
    claim(store, T0, tok(9), sequence_numbers=(4,))  # c's only message is locked
    take = ClaimSession(T0, tok(1), T0 + 10, OWNER, None, ref=Q)
    assert one(store, take) == SessionClaimed("b")
    assert one(store, replace(take, token=tok(2))) == SessionClaimed("d")
    assert one(store, replace(take, token=tok(3))) == SessionClaimed(None)
    assert numbers(claim(store, T0, tok(4), tok(5), session_id="b", until=T0 + 10)) == [5]
    assert one(store, replace(take, now=T0 + 10, token=tok(6))) == SessionClaimed("b")  # lapsed: b is free


# -- reads -----------------------------------------------------------------------------------------


def test_peek_filters_and_fetch(store: MessagingStore) -> None:
    append(store, msg(session_id="a"), msg(state=MessageState.DEFERRED), msg(session_id="a"),
           msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0), msg())
    claim(store, T0, tok(1))
    assert numbers(store.peek(Q, 2, 2)) == [2, 3]
    assert numbers(store.peek(Q, 0, 10, states=frozenset({MessageState.DEFERRED, MessageState.SCHEDULED}))) == [2, 4]
    assert numbers(store.peek(Q, 2, 10, session_id="a")) == [3]
    assert numbers(store.peek(Q, 0, 10, states=frozenset({MessageState.ACTIVE}), session_id="a")) == [1, 3]
    assert store.peek(Q, 0, 10, states=frozenset()) == ()
    assert store.peek(Q, 0, 0) == ()
    assert store.peek(Q, 0, 10)[0].lock_token == tok(1)
    assert numbers(store.fetch(Q, [5, 1, 5, 42])) == [1, 5]
    assert store.fetch(Q, []) == ()
    assert store.peek(OTHER, 0, 10) == () and store.fetch(OTHER, [1]) == ()


def test_counts_of_an_unknown_partition(store: MessagingStore) -> None:
    assert store.counts(Q) == PartitionCounts(0, 0, 0, 0, 0, None)
    assert store.counts_many([]) == ()
    assert store.counts_many([Q, OTHER, Q]) == (PartitionCounts(0, 0, 0, 0, 0, None),) * 3
    assert store.next_due(Q, T0) is None
    assert store.partition_meta(Q) == PartitionMeta(PartitionCounts(0, 0, 0, 0, 0, None), (), (), ())


def next_due(store: MessagingStore, ref: PartitionRef, now: int) -> int | None:
    """``next_due``, checked against ``next_due_many`` of the partitions the tests use."""
    due = store.next_due(ref, now)
    refs = [Q, DLQ, OTHER, ref]
    assert store.next_due_many(refs, now) == tuple(store.next_due(r, now) for r in refs)
    return due


def test_next_due_from_each_source(store: MessagingStore) -> None:
    append(store, msg(expires_at=T0 + 500))
    assert next_due(store, Q, T0) == T0 + 500  # expiry of an unlocked message
    append(store, msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 400))
    assert next_due(store, Q, T0) == T0 + 400  # scheduled
    claim(store, T0, tok(1), until=T0 + 300)
    assert next_due(store, Q, T0) == T0 + 300  # a lock lapsing (the locked one's expiry waits)
    assert next_due(store, Q, T0 + 300) == T0 + 400  # lapsed: its expiry counts again
    one(store, ClaimSession(T0, tok(2), T0 + 200, OWNER, "s", ref=Q))
    assert next_due(store, Q, T0) == T0 + 200  # a session lock lapsing
    append(store, msg(expires_at=T0 - 5, state=MessageState.DEFERRED))
    assert next_due(store, Q, T0) == T0 - 5  # already due
    assert next_due(store, OTHER, T0) is None
    append(store, msg(state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 50), ref=OTHER)
    assert next_due(store, OTHER, T0) == T0 + 50
    assert store.next_due_many([], T0) == ()
    assert store.next_due_many([OTHER, Q, OTHER], T0) == (T0 + 50, T0 - 5, T0 + 50)


def test_partition_meta(adapter: Adapter) -> None:
    store = adapter.store
    append(store, msg(), msg(state=MessageState.DEFERRED))
    run(store, RememberMessageIds((("b", 2), ("a", 2), ("c", 1)), ref=Q), PutSessionState("s2", b"two", 7, ref=Q),
        PutSessionState("s1", b"one", 9, ref=Q), RememberMoveKeys(("k2", "k1"), ref=Q),
        PutEntity(EntityRecord("queue1", "queue", {})))
    expected = PartitionMeta(PartitionCounts(1, 0, 1, 2 * msg().size, 2, 1), (("c", 1), ("a", 2), ("b", 2)),
                             (("s1", b"one", 9), ("s2", b"two", 7)), ("k1", "k2"))
    assert store.partition_meta(Q) == expected
    if adapter.persistent:
        assert adapter.reopen().partition_meta(Q) == expected


# -- duplicate detection decided by the store ---------------------------------------------------------

TOPIC = PartitionRef("topic1", 0)  # a history kept apart from the partitions it gates (a topic's)


def history(store: MessagingStore, ref: PartitionRef = Q) -> tuple[tuple[str, int], ...]:
    return store.partition_meta(ref).duplicate_history


def test_claim_message_ids_takes_new_ids_and_refuses_those_seen_within_the_window(adapter: Adapter) -> None:
    store = adapter.store
    assert one(store, ClaimMessageIds(T0, 1000, tok(1), ("a", "b", "a"), ref=Q)) == IdsClaimed((True, True, False))
    assert history(store) == (("a", T0), ("b", T0))
    # the window's edge still counts; a new id beside them is taken
    assert one(store, ClaimMessageIds(T0 + 1000, 1000, tok(2), ("a", "c"), ref=Q)) == IdsClaimed((False, True))
    # past the window an id is taken again, seen at the new time
    assert one(store, ClaimMessageIds(T0 + 1001, 1000, tok(3), ("b",), ref=Q)) == IdsClaimed((True,))
    assert history(store) == (("a", T0), ("c", T0 + 1000), ("b", T0 + 1001))
    assert one(store, ClaimMessageIds(T0, 1000, tok(4), (), ref=Q)) == IdsClaimed(())
    if adapter.persistent:
        assert history(adapter.reopen()) == (("a", T0), ("c", T0 + 1000), ("b", T0 + 1001))


def test_a_gated_append_stores_only_the_messages_whose_id_its_batch_took(store: MessagingStore) -> None:
    one(store, ClaimMessageIds(T0, 1000, tok(1), ("old",), ref=Q))
    claimed, appended = run(store, ClaimMessageIds(T0 + 1, 1000, tok(2), ("x", "old", "y"), ref=Q),
                            Append((msg(message_id="x"), msg(message_id=None), msg(message_id="old"),
                                       msg(message_id="y")), Gate(tok(2), ("x", None, "old", "y"), ref=Q), ref=Q))
    assert claimed == IdsClaimed((True, False, True))
    assert appended == Appended((1, 2, 0, 3))
    assert [s.record.message_id for s in everything(store, Q)] == ["x", None, "y"]
    # the same ids again (another node's send, say): nothing but the id-less message is stored
    claimed, appended = run(store, ClaimMessageIds(T0 + 2, 1000, tok(3), ("x", "y"), ref=Q),
                            Append((msg(message_id="y"), msg(message_id=None), msg(message_id="x")),
                                   Gate(tok(3), ("y", None, "x"), ref=Q), ref=Q))
    assert claimed == IdsClaimed((False, False))
    assert appended == Appended((0, 4, 0))
    # a message is checked under its gate id, not its own (a topic's copy renamed by a rule action)
    claimed, appended = run(store, ClaimMessageIds(T0 + 3, 1000, tok(4), ("z",), ref=Q),
                            Append((msg(message_id="renamed"), msg(message_id="x")),
                                   Gate(tok(4), ("z", "x"), ref=Q), ref=Q))
    assert (claimed, appended) == (IdsClaimed((True,)), Appended((5, 0)))
    assert store.counts(Q).active == 5 and store.counts(Q).last_sequence_number == 5
    with pytest.raises(ValueError, match="one id"):
        Append((msg(),), Gate(tok(5), (), ref=Q), ref=Q)


def test_a_topic_history_gates_the_copies_in_each_subscription(store: MessagingStore) -> None:
    def publish(claim: uuid.UUID, now: int, *ids: str) -> tuple[OpResult, ...]:
        gate = Gate(claim, ids, ref=TOPIC)
        return run(store, ClaimMessageIds(now, 500, claim, ids, ref=TOPIC),
                   Append(tuple(msg(message_id=i) for i in ids), gate, ref=Q),
                   Append(tuple(msg(message_id=i) for i in ids), gate, ref=OTHER))

    assert publish(tok(1), T0, "p", "q") == (IdsClaimed((True, True)), Appended((1, 2)), Appended((1, 2)))
    assert publish(tok(2), T0 + 10, "q", "r") == (IdsClaimed((False, True)), Appended((0, 3)), Appended((0, 3)))
    assert history(store, TOPIC) == (("p", T0), ("q", T0), ("r", T0 + 10))
    assert history(store, Q) == () and store.counts(TOPIC).message_count == 0


def test_forget_message_ids_spares_entries_seen_since(store: MessagingStore) -> None:
    run(store, ClaimMessageIds(T0, 100, tok(1), ("a", "b"), ref=Q), ClaimMessageIds(T0 + 200, 100, tok(2), ("b", "c"),
                                                                                    ref=Q))
    assert history(store) == (("a", T0), ("b", T0 + 200), ("c", T0 + 200))
    # a node that saw "a" and "b" at T0 prunes them past their window; "b" was taken again since
    one(store, ForgetMessageIds(("a", "b", "unknown"), seen_before=T0 + 101, ref=Q))
    assert history(store) == (("b", T0 + 200), ("c", T0 + 200))
    one(store, ForgetMessageIds(("b",), ref=Q))
    assert history(store) == (("c", T0 + 200),)


def test_prune_message_ids_drops_every_entry_seen_before(store: MessagingStore) -> None:
    run(store, ClaimMessageIds(T0, 100, tok(1), ("a", "b"), ref=Q), ClaimMessageIds(T0 + 50, 100, tok(2), ("c",),
                                                                                    ref=Q),
        ClaimMessageIds(T0, 100, tok(3), ("a",), ref=OTHER))
    assert one(store, PruneMessageIds(T0 + 50, ref=Q)) == Done()
    assert history(store) == (("c", T0 + 50),)
    assert history(store, OTHER) == (("a", T0),)  # another partition's history is its own
    one(store, PruneMessageIds(T0 + 51, ref=Q))
    assert history(store) == ()


def test_locks_and_session_locks_survive_a_reopen(adapter: Adapter) -> None:
    append(adapter.store, msg(session_id="s"))
    claim(adapter.store, T0, tok(1), until=T0 + 100)
    one(adapter.store, ClaimSession(T0, tok(2), T0 + 100, OWNER, "s", ref=Q))
    store = adapter.reopen()
    assert settle(store, T0 + 1, SettleItem(1, tok(1), Outcome.ABANDON)) == (True,)
    assert one(store, RenewSession(T0 + 1, "s", tok(2), T0 + 200, ref=Q)) == Renewed((True,))


def test_delete_entity_drops_session_locks(store: MessagingStore) -> None:
    one(store, ClaimSession(T0, tok(1), T0 + 100, OWNER, "s", ref=Q))
    run(store, DeleteEntity("queue1"))
    assert store.next_due(Q, T0) is None
    assert one(store, ClaimSession(T0, tok(2), T0 + 100, OWNER, "s", ref=Q)) == SessionClaimed("s")


def test_v1_ops_return_done(store: MessagingStore) -> None:
    assert store.apply([PutEntity(EntityRecord("queue1", "queue", {})), ForgetMessageIds((), ref=Q)]) == (Done(),
                                                                                                          Done())
    assert store.apply([]) == ()


# -- SQLite: migration from schema 4 -----------------------------------------------------------------

# The schema-4 DDL exactly as the release that wrote schema 4 created it (c2faee8 store/sqlite.py).
V4_DDL = (
    """
    CREATE TABLE IF NOT EXISTS messages (
        entity                 TEXT    NOT NULL COLLATE NOCASE,
        partition              INTEGER NOT NULL,
        sequence_number        INTEGER NOT NULL,
        enqueued_time          INTEGER NOT NULL,
        message_id             TEXT,
        session_id             TEXT,
        partition_key          TEXT,
        time_to_live           INTEGER,
        expires_at             INTEGER,
        scheduled_enqueue_time INTEGER,
        delivery_count         INTEGER NOT NULL,
        state                  INTEGER NOT NULL,
        durable                INTEGER,
        priority               INTEGER,
        annotations            BLOB    NOT NULL,
        annotation_count       INTEGER NOT NULL,
        tail                   BLOB    NOT NULL,
        PRIMARY KEY (entity, partition, sequence_number)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS partitions (
        entity               TEXT    NOT NULL COLLATE NOCASE,
        partition            INTEGER NOT NULL,
        last_sequence_number INTEGER NOT NULL,
        PRIMARY KEY (entity, partition)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS entities (
        path       TEXT NOT NULL PRIMARY KEY COLLATE NOCASE,
        kind       TEXT NOT NULL,
        properties TEXT NOT NULL
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS duplicate_history (
        entity     TEXT    NOT NULL COLLATE NOCASE,
        partition  INTEGER NOT NULL,
        message_id TEXT    NOT NULL,
        seen_at    INTEGER NOT NULL,
        PRIMARY KEY (entity, partition, message_id)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS session_states (
        entity     TEXT    NOT NULL COLLATE NOCASE,
        partition  INTEGER NOT NULL,
        session_id TEXT    NOT NULL,
        state      BLOB    NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (entity, partition, session_id)
    ) WITHOUT ROWID
    """,
    """
    CREATE TABLE IF NOT EXISTS move_keys (
        entity    TEXT    NOT NULL COLLATE NOCASE,
        partition INTEGER NOT NULL,
        move_key  TEXT    NOT NULL,
        PRIMARY KEY (entity, partition, move_key)
    ) WITHOUT ROWID
    """,
)
V4_INSERT_MESSAGE = (
    "INSERT INTO messages (entity, partition, sequence_number, enqueued_time, message_id, session_id, "
    "partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, "
    "annotations, annotation_count, tail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
V4_RAISE_HIGH_WATER_MARK = (
    "INSERT INTO partitions (entity, partition, last_sequence_number) VALUES (?, ?, ?) "
    "ON CONFLICT (entity, partition) DO UPDATE "
    "SET last_sequence_number = max(last_sequence_number, excluded.last_sequence_number)"
)
SUB = PartitionRef("topic1/Subscriptions/sub1", 0)
SUB_DLQ = PartitionRef("topic1/Subscriptions/sub1/$deadletterqueue", 0)


def v4_row(ref: PartitionRef, m: MessageRecord) -> tuple[Any, ...]:
    return (ref.entity, ref.partition, m.sequence_number, m.enqueued_time, m.message_id, m.session_id,
            m.partition_key, m.time_to_live, m.expires_at, m.scheduled_enqueue_time, m.delivery_count,
            int(m.state), None if m.durable is None else int(m.durable), m.priority, m.annotations,
            m.annotation_count, m.tail)


def test_sqlite_migrates_a_populated_version_4_file(tmp_path: Path) -> None:
    db = tmp_path / "v4.db"
    queue_messages = [
        replace(msg(message_id="active", expires_at=T0 + 60_000), sequence_number=1),
        replace(msg(message_id="scheduled", state=MessageState.SCHEDULED, scheduled_enqueue_time=T0 + 5_000),
                sequence_number=2),
        replace(msg(message_id="deferred", state=MessageState.DEFERRED, delivery_count=1), sequence_number=4),
        replace(msg(message_id="s1", session_id="s-1", tail=b"longer tail" * 10), sequence_number=6),
        replace(msg(message_id="s2", session_id="s-1"), sequence_number=7),
    ]
    dead = [replace(msg(message_id="dead", delivery_count=10), sequence_number=1)]
    sub_messages = [replace(msg(message_id="fanned"), sequence_number=3)]
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("PRAGMA page_size = 16384")
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("BEGIN IMMEDIATE")
    for statement in V4_DDL:
        raw.execute(statement)
    raw.execute("PRAGMA user_version = 4")
    raw.executemany("INSERT OR REPLACE INTO entities (path, kind, properties) VALUES (?, ?, ?)", [
        ("queue1", "queue", '{"requires_session":false,"max_delivery_count":10}'),
        ("topic1", "topic", "{}"),
        ("topic1/Subscriptions/sub1", "subscription", "{}"),
        ("topic1/Subscriptions/sub1/Rules/$Default", "rule", '{"filter":"1=1"}'),
    ])
    for ref, rows, mark in ((Q, queue_messages, 8), (DLQ, dead, 1), (SUB, sub_messages, 3)):
        raw.executemany(V4_INSERT_MESSAGE, [v4_row(ref, m) for m in rows])
        raw.execute(V4_RAISE_HIGH_WATER_MARK, (ref.entity, ref.partition, mark))
    raw.execute("INSERT INTO partitions (entity, partition, last_sequence_number) VALUES (?, ?, ?)",
                (SUB_DLQ.entity, 0, 0))
    raw.execute("INSERT INTO duplicate_history (entity, partition, message_id, seen_at) VALUES (?, ?, ?, ?)",
                ("queue1", 0, "active", T0))
    raw.execute("INSERT INTO session_states (entity, partition, session_id, state, updated_at) VALUES (?, ?, ?, ?, ?)",
                ("queue1", 0, "s-1", b"state", T0 + 1))
    raw.execute("INSERT OR IGNORE INTO move_keys (entity, partition, move_key) VALUES (?, ?, ?)",
                ("queue1", 0, "other/queue9/0/12"))
    raw.execute("COMMIT")
    raw.close()

    store = SqliteStore(db)
    store.open()
    try:
        assert [e.path for e in store.load_entities()] == [
            "queue1", "topic1", "topic1/Subscriptions/sub1", "topic1/Subscriptions/sub1/Rules/$Default"]
        assert store.load_entities()[0].properties == {"requires_session": False, "max_delivery_count": 10}
        assert everything(store, Q) == tuple(StoredMessage(m, None, None, None) for m in queue_messages)
        assert everything(store, DLQ) == (StoredMessage(dead[0], None, None, None),)
        assert numbers(everything(store, SUB)) == [3]
        size = sum(m.size for m in queue_messages)
        assert store.partition_meta(Q) == PartitionMeta(
            PartitionCounts(active=3, scheduled=1, deferred=1, size_in_bytes=size, last_sequence_number=8,
                            first_sequence_number=1),
            (("active", T0),), (("s-1", b"state", T0 + 1),), ("other/queue9/0/12",))
        assert store.counts(DLQ) == PartitionCounts(1, 0, 0, dead[0].size, 1, 1)
        assert store.counts(SUB) == PartitionCounts(1, 0, 0, sub_messages[0].size, 3, 3)
        assert store.counts(SUB_DLQ) == PartitionCounts(0, 0, 0, 0, 0, None)
        assert store.next_due(Q, T0) == T0 + 5_000
        # the operations work on the migrated rows, and numbering goes on after the old high-water mark
        assert store.apply([Append((msg(),), ref=Q)]) == (Appended((9,)),)
        got = store.apply([Claim(T0, T0 + 100, OWNER, toks(1, 2, 3), session_id="s-1", ref=Q)])
        assert got == (Claimed((StoredMessage(replace(queue_messages[3], delivery_count=1), tok(1), T0 + 100, OWNER),
                                StoredMessage(replace(queue_messages[4], delivery_count=1), tok(2), T0 + 100, OWNER))),)
        assert store.apply([Settle(T0, (SettleItem(6, tok(1), Outcome.DEAD_LETTER, target=DLQ),), ref=Q)]) == (
            Settled((True,)),)
        assert numbers(everything(store, DLQ)) == [1, 2]
        check_counts(store, Q, DLQ, SUB)
        # every migrated row is read back through the port
        assert [m.record.message_id for m in store.peek(Q, 0, 100)] == [
            "active", "scheduled", "deferred", "s2", "m"]
    finally:
        store.close()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (6,)
    finally:
        raw.close()
    store = SqliteStore(db)
    store.open()  # opening a version-5 file again recomputes nothing and changes nothing
    try:
        check_counts(store, Q, DLQ, SUB)
        assert store.counts(Q).last_sequence_number == 9
    finally:
        store.close()


# -- SQLite: claims and due reads are index range scans ---------------------------------------------


def test_sqlite_claims_and_due_reads_use_indexes(tmp_path: Path) -> None:
    from sodalite.store.sqlite.rows import SQL, claim_statement

    store = SqliteStore(tmp_path / "plan.db")
    store.open()
    store.close()
    raw = sqlite3.connect(tmp_path / "plan.db")
    try:
        claim_sql, claim_params = claim_statement(Claim(T0, T0 + 1, OWNER, toks(1, 2), ref=Q))
        session_sql, session_params = claim_statement(Claim(T0, T0 + 1, OWNER, toks(1), session_id="s", ref=Q))
        queries: list[tuple[str, tuple[Any, ...]]] = [
            (claim_sql, claim_params), (session_sql, session_params),
            (SQL["select_next_due"], (Q.entity, Q.partition, T0)),
            (SQL["activate"], (Q.entity, Q.partition, T0, 10, Q.entity, Q.partition)),
            (SQL["next_free_session"], (T0, Q.entity, Q.partition)),
            (SQL["select_counts"], (Q.entity, Q.partition)),
        ]
        by_numbers = [SQL["fetch"], SQL["select_locks"], SQL["delete_returning"]]
        queries += [(sql, (Q.entity, Q.partition, "[1, 2]")) for sql in by_numbers]
        for sql, params in queries:
            plan = [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            scans = [step for step in plan if step.startswith("SCAN") and "messages" in step.split()[1:2]
                     and "USING" not in step]
            if sql in by_numbers:  # a lookup by a list of numbers seeks each one, not the whole partition
                scans += [step for step in plan if step.startswith("SEARCH") and "messages" in step.split()[1:2]
                          and "(entity=? AND partition=?)" in step]
            assert scans == [], (sql, plan)
    finally:
        raw.close()


# -- differential: random operation sequences, memory against each durable adapter ------------------

DURABLE = [name for name in ADAPTERS if name != "memory"]
SESSIONS = (None, "a", "b")
STATES = st.sampled_from([MessageState.ACTIVE] * 4 + [MessageState.DEFERRED, MessageState.SCHEDULED])
TTLS = st.sampled_from([None, None, None, -5, 0, 40, 120, 300])
MAYBE_SESSION = st.sampled_from([None, None, None, "a", "b"])
PICK = st.integers(0, 50)  # the n-th (mod how many there are) lock or session lock the run knows

# Commands are data drawn before the run; a command that refers to a lock names it by index into
# the locks the reference shows at that moment (true token, or a wrong one when asked), so most
# settlements and renewals meet a real lock.
APPEND = st.tuples(st.just("append"), st.sampled_from((Q, Q, Q, DLQ)), st.lists(st.tuples(
    MAYBE_SESSION, STATES, TTLS, st.integers(0, 300), st.binary(max_size=8), st.integers(0, 3)),
    min_size=1, max_size=4))
HOLD = st.sampled_from([1, 30, 100, 200, 1000])
CLAIM = st.tuples(st.just("claim"), st.integers(1, 5), HOLD, MAYBE_SESSION,
                  st.sampled_from([MessageState.ACTIVE] * 3 + [MessageState.DEFERRED, MessageState.SCHEDULED]),
                  st.sampled_from([None, None, None, (2, 4), (1, 3, 5, 7), (11, 12)]))
TAIL = st.one_of(st.none(), st.none(), st.binary(max_size=24))  # a replacement tail, shorter or longer
SETTLE = st.tuples(st.just("settle"), st.lists(st.tuples(
    PICK, st.sampled_from([True] * 5 + [False]), st.sampled_from(list(Outcome)),
    st.one_of(st.none(), st.binary(max_size=6)), TAIL), min_size=1, max_size=4))
# A transaction's settlements: all or none (a stale item fails the batch, SettleFenced).
SETTLE_ALL = SETTLE.map(lambda command: ("settle_all", *command[1:]))
RENEW = st.tuples(st.just("renew"), st.lists(st.tuples(PICK, st.sampled_from([True] * 5 + [False])), max_size=3),
                  st.integers(1, 200))
MOVE = st.tuples(st.just("move"), st.lists(st.integers(1, 20), max_size=4), st.sampled_from((None, DLQ, OTHER)),
                 st.booleans(), st.one_of(st.none(), st.binary(max_size=4)), TAIL,
                 st.one_of(st.none(), st.integers(0, 100)), st.one_of(st.none(), st.integers(0, 300)))
ACTIVATE = st.tuples(st.just("activate"), st.integers(0, 3))
PURGE = st.tuples(st.just("purge"), st.sampled_from([None, 2, 5, 8, 12]))
CLAIM_SESSION = st.tuples(st.just("claim_session"), st.sampled_from(SESSIONS), st.integers(1, 200))
SESSION_LOCK = st.tuples(st.just("session_lock"), PICK, st.sampled_from([True] * 3 + [False]), st.booleans(),
                         st.integers(1, 200))
DELETE = st.tuples(st.just("delete"), st.lists(st.integers(1, 20), max_size=3))
# A cancel: picks among the scheduled rows the reference shows, and perhaps one more number (any row, or none).
CANCEL = st.tuples(st.just("cancel"), st.lists(PICK, max_size=3), st.one_of(st.none(), st.integers(1, 25)))
TICK = st.tuples(st.just("tick"), st.integers(0, 150))
# ReceiveAndDelete whose transfers were not all written: claim and delete up to n in one batch, then
# put back (Restore) those the mask picks, as they were before the claim, plus perhaps a number held.
TAKE_RESTORE = st.tuples(st.just("take_restore"), st.integers(1, 4), st.lists(st.booleans(), min_size=4, max_size=4),
                         st.booleans())
# A send with duplicate detection: the ids claimed (None: a message without one), the window, and
# whose history gates it (the partition's own, or another's: a topic's copies).
DEDUP = st.tuples(st.just("dedup"), st.lists(st.sampled_from([None, "a", "b", "c", "d"]), min_size=1, max_size=4),
                  st.sampled_from([1, 50, 200]), st.sampled_from([(Q, Q), (Q, Q), (OTHER, Q), (DLQ, OTHER)]))
FORGET = st.tuples(st.just("forget"), st.lists(st.sampled_from(["a", "b", "c", "x"]), max_size=3),
                   st.one_of(st.none(), st.integers(0, 200)))
# A round exercises every kind once in a plausible order; single commands mix the order up.
ROUND = st.tuples(APPEND, CLAIM, RENEW, SETTLE, TICK, CLAIM_SESSION, SESSION_LOCK, MOVE, ACTIVATE, CLAIM, SETTLE,
                  TICK).map(list)
SINGLE = st.one_of(APPEND, CLAIM, SETTLE, RENEW, MOVE, ACTIVATE, PURGE, CLAIM_SESSION, SESSION_LOCK, DELETE,
                   TICK, DEDUP, FORGET, SETTLE_ALL, CANCEL, TAKE_RESTORE).map(lambda command: [command])
COMMANDS = st.lists(st.one_of(ROUND, SINGLE), min_size=2, max_size=8).map(
    lambda chunks: [command for chunk in chunks for command in chunk])


def _unique(numbers: Sequence[int]) -> bool:
    return len(set(numbers)) == len(numbers)


class Differential:
    """Runs commands against the memory reference and a durable adapter; every result and read
    must be equal. The clock is the run's own (``tick``)."""

    def __init__(self, durable: MessagingStore) -> None:
        self.reference: MessagingStore = MemoryStore()
        self.reference.open()
        self.durable = durable
        self.now = T0
        self.next_token = 1
        self.session_tokens: list[tuple[str, uuid.UUID]] = []
        self.applied: dict[str, int] = {}
        # Every run starts from a small mixed backlog, so that claims find something whatever the draw.
        self.both(Append(tuple(
            msg(session_id=(None, "a", "b")[i % 3], expires_at=T0 + 100 * i if i % 4 == 3 else None,
                state=MessageState.SCHEDULED if i == 5 else MessageState.ACTIVE,
                scheduled_enqueue_time=T0 + 50 if i == 5 else None)
            for i in range(10)), ref=Q))

    def tokens(self, n: int) -> tuple[uuid.UUID, ...]:
        first = self.next_token
        self.next_token += n
        return toks(*range(first, first + n))

    def both(self, op: StoreOp) -> OpResult:
        try:
            expected = self.reference.apply([op])
        except SettleFenced as fenced:  # nothing applied: the reads after it compare the same state
            with pytest.raises(SettleFenced) as durable:
                self.durable.apply([op])
            assert (durable.value.op_index, durable.value.item_index, durable.value.sequence_number) == (
                fenced.op_index, fenced.item_index, fenced.sequence_number), op
            self.applied["SettleFenced"] = self.applied.get("SettleFenced", 0) + 1
            return Settled(())
        assert self.durable.apply([op]) == expected, op
        (result,) = expected
        if (getattr(result, "applied", ()) and any(result.applied)) or getattr(result, "messages", ()) \
                or getattr(result, "session_id", None) or any(getattr(result, "sequence_numbers", ())) \
                or getattr(result, "count", 0):
            self.applied[type(op).__name__] = self.applied.get(type(op).__name__, 0) + 1
        return result

    def lock(self, pick: int, true_token: bool) -> tuple[int, uuid.UUID]:
        rows = self.reference.peek(Q, 0, 1000)
        # mostly locks held now; sometimes (pick odd) any lock shown, lapsed ones included
        shown = [(s.record.sequence_number, s.lock_token) for s in rows
                 if s.lock_token is not None and (pick % 2 or s.locked_at(self.now))]
        if not shown:
            return (pick % 20 + 1, tok(10_000))
        n, token = shown[pick % len(shown)]
        assert token is not None
        return (n, token if true_token else tok(20_000 + pick))

    def run(self, command: tuple[Any, ...]) -> None:
        kind, *args = command
        if kind == "append":
            ref, items = args
            # Into the dead-letter partition, an even-sized append is numbered by the queue's counter
            # (a fan-out's dead letters), unless a number it would take is already there.
            last = self.reference.counts(Q).last_sequence_number
            numbered_by = Q if ref == DLQ and len(items) % 2 == 0 and not self.reference.fetch(
                DLQ, list(range(last + 1, last + 1 + len(items)))) else None
            self.both(Append(tuple(
                msg(session_id=sid, state=state, expires_at=None if ttl is None else self.now + ttl,
                    scheduled_enqueue_time=self.now + delay if state == MessageState.SCHEDULED else None,
                    annotations=annotations, delivery_count=count)
                for sid, state, ttl, delay, annotations, count in items), numbered_by=numbered_by, ref=ref))
        elif kind == "claim":
            n, hold, session, state, numbers = args
            if state == MessageState.SCHEDULED and numbers is None:  # scheduled: by number only (cancel)
                state = MessageState.ACTIVE
            self.both(Claim(self.now, self.now + hold, OWNER, self.tokens(n), session_id=session,
                            sequence_numbers=None if numbers is None else tuple(numbers), state=state, ref=Q))
        elif kind in ("settle", "settle_all"):
            picked = [(self.lock(pick, true_token), outcome, annotations, tail)
                      for pick, true_token, outcome, annotations, tail in args[0]]
            # Mostly the dead letters of a settlement keep their numbers (all of them, as the core
            # asks), unless the dead-letter partition holds one already.
            keep = args[0][0][0] % 3 != 0 and not self.reference.fetch(DLQ, [n for (n, _), *_ in picked])
            items = [SettleItem(n, token, outcome, annotations=annotations, annotation_count=len(annotations or b""),
                                target=DLQ if outcome is Outcome.DEAD_LETTER else None, tail=tail,
                                keep_sequence_number=keep and outcome is Outcome.DEAD_LETTER)
                     for (n, token), outcome, annotations, tail in picked]
            self.both(Settle(self.now, tuple(items), all_or_none=kind == "settle_all", ref=Q))
        elif kind == "renew":
            picks, hold = args
            self.both(RenewLocks(self.now, self.now + hold, tuple(self.lock(p, t) for p, t in picks), ref=Q))
        elif kind == "move":
            numbers, target, reset, annotations, tail, *times = args
            enqueued, ttl = times if times else (None, None)
            # Into the dead-letter partition the rows mostly keep their numbers (expiry,
            # MaxDeliveryCount), unless one of them is there already.
            keep = target == DLQ and not reset and not self.reference.fetch(DLQ, numbers) and _unique(numbers)
            self.both(MoveMessages(self.now, tuple(
                MoveItem(n, annotations=annotations, annotation_count=2, reset_delivery_count=reset, tail=tail,
                         enqueued_time=None if enqueued is None else self.now - enqueued,
                         expires_at=None if ttl is None else self.now + ttl) for n in numbers), target=target,
                keep_sequence_numbers=keep, ref=Q))
        elif kind == "activate":
            self.both(Activate(self.now, args[0], ref=Q))
        elif kind == "purge":
            self.both(Purge(self.now, args[0], ref=Q))
        elif kind == "claim_session":
            session, hold = args
            token = self.tokens(1)[0]
            result = self.both(ClaimSession(self.now, token, self.now + hold, OWNER, session, ref=Q))
            assert isinstance(result, SessionClaimed)
            if result.session_id is not None:
                self.session_tokens.append((result.session_id, token))
        elif kind == "session_lock":
            pick, true_token, release, hold = args
            session, token = self.session_tokens[pick % len(self.session_tokens)] if self.session_tokens \
                else ("a", tok(30_000))
            token = token if true_token else tok(30_000 + pick)
            if release:
                self.both(ReleaseSession(session, token, ref=Q))
            else:
                self.both(RenewSession(self.now, session, token, self.now + hold, ref=Q))
        elif kind == "delete":
            self.both(MoveMessages(self.now, tuple(MoveItem(n) for n in args[0]), target=None, ref=Q))
        elif kind == "dedup":
            ids, window, (target, gate) = args
            claim = self.tokens(1)[0]
            batch: list[StoreOp] = [
                ClaimMessageIds(self.now, window, claim, tuple(i for i in ids if i is not None), ref=gate),
                Append(tuple(msg(message_id=i) for i in ids), Gate(claim, tuple(ids), ref=gate), ref=target)]
            expected = self.reference.apply(batch)
            assert self.durable.apply(batch) == expected, batch
            if any(expected[1].sequence_numbers):  # type: ignore[union-attr]
                self.applied["ClaimMessageIds"] = self.applied.get("ClaimMessageIds", 0) + 1
        elif kind == "forget":
            ids, before = args
            self.both(ForgetMessageIds(tuple(ids), None if before is None else self.now - before, ref=Q))
        elif kind == "cancel":
            picks, extra = args
            scheduled = [s.record.sequence_number
                         for s in self.reference.peek(Q, 0, 1000, frozenset({MessageState.SCHEDULED}))]
            asked = [scheduled[p % len(scheduled)] for p in picks] if scheduled else []
            if extra is not None or not asked:
                asked.append(extra or 1)
            result = self.both(CancelScheduled(self.now, tuple(asked), ref=Q))
            if result == Unscheduled(()):
                self.applied["CancelScheduled"] = self.applied.get("CancelScheduled", 0) + 1
        elif kind == "take_restore":
            n, mask, held = args
            before = {s.record.sequence_number: s.record for s in self.reference.peek(Q, 0, 1000)}
            tokens = self.tokens(n)
            batch = [Claim(self.now, self.now + 100, OWNER, tokens, ref=Q)]
            expected = self.reference.apply(batch)
            assert self.durable.apply(batch) == expected, batch
            taken = expected[0].messages  # type: ignore[union-attr]
            delete = Settle(self.now, tuple(SettleItem(s.record.sequence_number, s.lock_token, Outcome.COMPLETE)
                                               for s in taken if s.lock_token is not None), ref=Q)
            self.both(delete)
            back = [before[s.record.sequence_number] for s, keep in zip(taken, mask, strict=False) if keep]
            if held and before:
                back.append(next(iter(before.values())))  # held still, or taken and put back just before
            self.both(Restore(tuple(back), ref=Q))
        elif kind == "tick":
            self.now += args[0]
        else:  # pragma: no cover
            raise AssertionError(kind)
        self.check_reads()

    def check_reads(self) -> None:
        for ref in (Q, DLQ, OTHER):
            assert self.durable.peek(ref, 0, 1000) == self.reference.peek(ref, 0, 1000)
            assert self.durable.partition_meta(ref) == self.reference.partition_meta(ref)
            assert self.durable.next_due(ref, self.now) == self.reference.next_due(ref, self.now)
        for session in ("a", "b"):
            active = frozenset({MessageState.ACTIVE})
            assert self.durable.peek(Q, 2, 3, active, session) == self.reference.peek(Q, 2, 3, active, session)
        assert self.durable.fetch(Q, [3, 1, 7]) == self.reference.fetch(Q, [3, 1, 7])
        counts = self.reference.counts(Q)
        assert counts == recount(self.reference, Q, counts.last_sequence_number)


@pytest.mark.parametrize("adapter", DURABLE)
def test_durable_adapters_match_the_memory_reference(adapter: str, request: pytest.FixtureRequest) -> None:
    seen: dict[str, int] = {}

    # Derandomized: the same sequences every run, so the coverage check below cannot flake.
    @settings(max_examples=50, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(commands=COMMANDS)
    def differential(commands: list[tuple[Any, ...]]) -> None:
        with tempfile.TemporaryDirectory() as directory:
            make, _ = make_adapter(adapter, Path(directory), request)
            durable = make()
            durable.open()
            try:
                run = Differential(durable)
                for command in commands:
                    run.run(command)
                for name, count in run.applied.items():
                    seen[name] = seen.get(name, 0) + count
            finally:
                durable.close()

    differential()
    # The random runs did settle real locks (else the comparison would prove little).
    assert seen.get("Claim", 0) > 0 and seen.get("Settle", 0) > 0, repr(sorted(seen.items()))


# One fixed tour through the same comparison that makes every kind of operation take effect.
TOUR: list[tuple[Any, ...]] = [
    ("append", Q, [(None, MessageState.ACTIVE, None, 0, b"x", 0)]),
    ("take_restore", 2, [False, True, False, False], True),
    ("claim", 3, 100, None, MessageState.ACTIVE, None),
    ("renew", [(0, True), (2, True)], 200),
    ("settle", [(0, True, Outcome.DEAD_LETTER, b"why", b"a dead-letter reason in a longer tail"),
                (2, True, Outcome.DEFER, None, b"short")]),
    ("claim", 2, 100, None, MessageState.DEFERRED, (2, 4)),
    ("settle", [(0, True, Outcome.RELEASE, None, b"released"), (1, True, Outcome.COMPLETE, None, b"gone")]),
    ("claim", 1, 100, None, MessageState.ACTIVE, None),
    ("settle", [(0, True, Outcome.ABANDON, None, b"")]),
    ("claim_session", None, 100),
    ("session_lock", 0, True, False, 300),
    ("session_lock", 0, True, True, 0),
    ("tick", 60),
    ("activate", 3),
    ("move", [6, 7, 8], DLQ, True, b"moved", b"expired: the reason in the tail"),
    ("purge", 9),
    ("tick", 400),
    ("move", [10, 11], None, False, None, None),
    ("move", [12, 13], OTHER, True, None, None, 5, 50),
    ("append", Q, [(None, MessageState.ACTIVE, None, 0, b"z", 0)]),
    ("move", [12], DLQ, False, None, b"kept: its own number in the dead-letter partition"),
]


# Cancels that take effect and cancels refused, among activations, claims and lapses.
CANCEL_TOUR: list[tuple[Any, ...]] = [
    ("append", Q, [(None, MessageState.SCHEDULED, None, 80, b"s", 0), (None, MessageState.SCHEDULED, None, 300, b"", 0),
                   (None, MessageState.SCHEDULED, 40, 500, b"t", 0), (None, MessageState.ACTIVE, None, 0, b"", 0)]),
    ("cancel", [0, 1], 3),  # a scheduled row and an active one: refused, nothing cancelled
    ("cancel", [1], None),
    ("claim", 1, 100, None, MessageState.SCHEDULED, (11, 12, 13)),  # one scheduled row locked by number
    ("cancel", [0, 1, 2], None),  # the locked one among them: refused
    ("tick", 120),
    ("activate", 5),  # row 6 (the backlog's scheduled one) and row 11 came due
    ("cancel", [0], 6),  # 6 is active now: refused
    ("cancel", [0, 1, 2, 3], None),
    ("cancel", [], 99),
]


@pytest.mark.parametrize("adapter", DURABLE)
def test_durable_adapters_match_the_memory_reference_on_cancels(adapter: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    make, _ = make_adapter(adapter, tmp_path, request)
    durable = make()
    durable.open()
    try:
        run = Differential(durable)
        for command in CANCEL_TOUR:
            run.run(command)
    finally:
        durable.close()
    assert run.applied.get("CancelScheduled", 0) >= 2, run.applied


@pytest.mark.parametrize("adapter", DURABLE)
def test_durable_adapters_match_the_memory_reference_on_a_tour(adapter: str, tmp_path: Path,
                                                                request: pytest.FixtureRequest) -> None:
    make, _ = make_adapter(adapter, tmp_path, request)
    durable = make()
    durable.open()
    try:
        run = Differential(durable)
        for command in TOUR:
            run.run(command)
    finally:
        durable.close()
    assert set(run.applied) == {"Append", "Claim", "Settle", "RenewLocks", "MoveMessages", "Activate",
                                "ClaimSession", "RenewSession", "ReleaseSession", "Purge", "Restore"}, run.applied
