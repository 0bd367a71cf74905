"""The messaging-store contract: every adapter behind the port must pass the same tests.

The ``harness`` fixture yields one adapter at a time; the tests speak only the port. To add an
adapter (PostgreSQL), add a parameter to ``harness``. Adapter-specific tests (fault injection of
the memory store, SQLite pragmas and crash durability) follow the contract, and a property test
compares each durable adapter with the memory store on random batches.

The PostgreSQL adapter runs against a real server this process starts (``tests/pg_server.py``):
one database for this module, and a schema of its own for each test (the connection URL's
``search_path``), so every test starts empty.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sodalite.errors import ConfigurationError, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.memory import MemoryStore
from sodalite.store.port import (
    Append,
    DeleteEntity,
    DeleteIdleEntity,
    EntityActivity,
    EntityRecord,
    ForgetMessageIds,
    IdleDeleted,
    MessagingStore,
    MoveItem,
    MoveMessages,
    PartitionRef,
    PartitionStats,
    PutEntity,
    RecordActivity,
    RememberMessageIds,
    StoreOp,
)
from sodalite.store.sqlite import SqliteStore

try:
    import pg_server
    from sodalite.store.postgres import PostgresStore
except ImportError:  # pragma: no cover - the postgresql extra is part of the dev install
    pg_server = None  # type: ignore[assignment]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

Q1 = PartitionRef("queue1", 0)
Q1_P1 = PartitionRef("queue1", 1)
Q2 = PartitionRef("queue2", 0)


def record(seq: int, **changes: Any) -> MessageRecord:
    """A message with every field set; override any of them by keyword."""
    base = MessageRecord(
        sequence_number=seq,
        enqueued_time=1_700_000_000_000 + seq,
        message_id=f"id-{seq}",
        session_id=None,
        partition_key=None,
        time_to_live=60_000,
        expires_at=1_700_000_060_000 + seq,
        scheduled_enqueue_time=None,
        delivery_count=0,
        state=MessageState.ACTIVE,
        durable=True,
        priority=4,
        annotations=b"\xa3\x03x-a\xa1\x01b",
        annotation_count=1,
        tail=b"\x00Sw\xa1\x05hello" + str(seq).encode(),
    )
    return replace(base, **changes)


def queue(path: str, **properties: Any) -> EntityRecord:
    return EntityRecord(path=path, kind="queue", properties=properties)


@dataclass(frozen=True)
class Loaded:
    """What a partition holds, read through the port (``peek`` and ``partition_meta``)."""

    messages: tuple[MessageRecord, ...]
    last_sequence_number: int
    duplicate_history: tuple[tuple[str, int], ...] = ()
    session_states: tuple[tuple[str, bytes, int], ...] = ()
    move_keys: tuple[str, ...] = ()


def load(store: MessagingStore, ref: PartitionRef) -> Loaded:
    meta = store.partition_meta(ref)
    return Loaded(tuple(m.record for m in store.peek(ref, 0, 1_000_000)), meta.counts.last_sequence_number,
                  meta.duplicate_history, meta.session_states, meta.move_keys)


def delete(ref: PartitionRef, numbers: tuple[int, ...]) -> MoveMessages:
    """Delete these messages (unlocked ones; none is locked here)."""
    return MoveMessages(0, tuple(MoveItem(n) for n in numbers), target=None, ref=ref)


def seqs(snapshot: Loaded) -> list[int]:
    return [m.sequence_number for m in snapshot.messages]


# -- the adapters under test -----------------------------------------------------------------------


@dataclass
class Harness:
    """One adapter under test: ``make`` builds a new, unopened adapter on the same storage."""

    name: str
    make: Callable[[], MessagingStore]
    persistent: bool  # whether a new adapter made by ``make`` sees what an earlier one stored
    store: MessagingStore

    def reopen(self) -> MessagingStore:
        """Close the current adapter and open a new one on the same storage."""
        if not self.persistent:
            pytest.skip(f"the {self.name} store keeps nothing across instances")
        self.store.close()
        self.store = self.make()
        self.store.open()
        return self.store


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this module, on this process's test server."""
    if pg_server is None:
        pytest.skip("psycopg is not installed (pip install -e '.[dev]')")
    try:
        server = pg_server.shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    url = server.create_database("contract")
    yield url
    server.drop_database(url)


def pg_schema_url(database_url: str) -> str:
    """A new empty schema in the database, as a URL whose search_path puts it first."""
    assert pg_server is not None
    return pg_server.fresh_schema_url(database_url)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    make: Callable[[], MessagingStore]
    if request.param == "memory":
        make, persistent = MemoryStore, False
    elif request.param == "sqlite":
        db = tmp_path / "store.db"

        def make() -> MessagingStore:
            return SqliteStore(db)

        persistent = True
    elif request.param == "postgresql":
        url = pg_schema_url(request.getfixturevalue("pg_database"))

        def make() -> MessagingStore:
            return PostgresStore(url)

        persistent = True
    else:  # pragma: no cover
        raise AssertionError(request.param)
    store = make()
    store.open()
    h = Harness(request.param, make, persistent, store)
    yield h
    h.store.close()


@pytest.fixture
def store(harness: Harness) -> MessagingStore:
    return harness.store


# -- lifecycle --------------------------------------------------------------------------------------


def test_open_is_idempotent(store: MessagingStore) -> None:
    store.apply([Append((record(1),), ref=Q1)])
    store.open()
    assert seqs(load(store, Q1)) == [1]


def test_a_store_that_was_never_written_is_empty(store: MessagingStore) -> None:
    assert load(store, Q1) == Loaded(messages=(), last_sequence_number=0)
    assert store.load_entities() == []
    assert store.stats(Q1) == PartitionStats(message_count=0, size_in_bytes=0)


def test_an_empty_batch_is_fine(store: MessagingStore) -> None:
    store.apply([])
    store.apply(
        [
            Append((), ref=Q1),
            delete(Q1, ()),
            RememberMessageIds((), ref=Q1),
            ForgetMessageIds((), ref=Q1),
        ]
    )
    assert load(store, Q1) == Loaded(messages=(), last_sequence_number=0)


def test_use_before_open_raises(harness: Harness) -> None:
    fresh = harness.make()
    with pytest.raises(StoreUnavailable):
        fresh.apply([Append((record(1),), ref=Q1)])
    with pytest.raises(StoreUnavailable):
        load(fresh, Q1)
    fresh.close()


def test_close_then_every_call_raises(store: MessagingStore) -> None:
    store.apply([Append((record(1),), ref=Q1)])
    store.close()
    store.close()  # closing twice is harmless
    with pytest.raises(StoreUnavailable) as info:
        store.apply([Append((record(2),), ref=Q1)])
    assert type(info.value) is StoreUnavailable
    assert "closed" in info.value.description
    with pytest.raises(StoreUnavailable):
        load(store, Q1)
    with pytest.raises(StoreUnavailable):
        store.load_entities()
    with pytest.raises(StoreUnavailable):
        store.stats(Q1)
    with pytest.raises(StoreUnavailable):
        store.open()


def test_works_from_a_thread_other_than_the_creator(store: MessagingStore) -> None:
    def work() -> list[int]:
        store.apply([Append((record(1), record(2)), ref=Q1)])
        store.apply([delete(Q1, (1,))])
        return seqs(load(store, Q1))

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(work).result() == [2]
    assert seqs(load(store, Q1)) == [2]
    assert threading.current_thread() is threading.main_thread()


# -- messages ---------------------------------------------------------------------------------------

ROUND_TRIP_CASES = {
    "all-fields-set": record(
        7,
        session_id="session-\u03b1",
        partition_key="pk",
        scheduled_enqueue_time=1_800_000_000_000,
        delivery_count=3,
        state=MessageState.SCHEDULED,
        durable=False,
        priority=9,
        annotation_count=2,
    ),
    "all-optionals-none": record(
        8,
        message_id=None,
        session_id=None,
        partition_key=None,
        time_to_live=None,
        expires_at=None,
        scheduled_enqueue_time=None,
        durable=None,
        priority=None,
    ),
    "empty-strings-and-bytes": record(
        9, message_id="", session_id="", partition_key="", annotations=b"", annotation_count=0, tail=b""
    ),
    "zero-values": record(
        10, time_to_live=0, expires_at=0, scheduled_enqueue_time=0, priority=0, enqueued_time=0
    ),
    "int64-extremes": record(
        INT64_MAX,
        enqueued_time=INT64_MAX,
        time_to_live=INT64_MAX,
        expires_at=INT64_MIN,
        scheduled_enqueue_time=INT64_MAX,
        delivery_count=INT64_MAX,
        priority=INT64_MIN,
        annotation_count=INT64_MAX,
    ),
    "unicode-and-nul": record(
        11, message_id="ünï\x00cødé 🚀", session_id="Ses\x00sion", partition_key="ключ"
    ),
    "binary-with-nul-bytes": record(12, annotations=bytes(range(256)), tail=b"\x00" * 17 + b"\xff"),
    "large-tail-1mb": record(13, tail=os.urandom(1024 * 1024), annotations=os.urandom(4096)),
    "deferred": record(14, state=MessageState.DEFERRED, delivery_count=1),
}


@pytest.mark.parametrize("message", ROUND_TRIP_CASES.values(), ids=ROUND_TRIP_CASES.keys())
def test_append_then_load_round_trips_every_field(harness: Harness, message: MessageRecord) -> None:
    harness.store.apply([Append((message,), ref=Q1)])
    _check_round_trip(harness.store, message)
    if harness.persistent:
        _check_round_trip(harness.reopen(), message)


def _check_round_trip(store: MessagingStore, message: MessageRecord) -> None:
    snapshot = load(store, Q1)
    assert snapshot.messages == (replace(message, sequence_number=1),)  # the store numbers it
    loaded = snapshot.messages[0]
    assert type(loaded.state) is MessageState
    assert type(loaded.annotations) is bytes
    assert type(loaded.tail) is bytes
    assert loaded.durable is message.durable
    assert snapshot.last_sequence_number == 1


def test_values_that_do_not_fit_64_bits_fail_the_batch(store: MessagingStore) -> None:
    for bad in (
        record(INT64_MAX + 1),
        record(1, enqueued_time=INT64_MIN - 1),
        record(1, time_to_live=2**64),
    ):
        with pytest.raises(StoreUnavailable):
            store.apply([Append((record(5),), ref=Q2), Append((bad,), ref=Q1)])
    assert load(store, Q1).messages == ()
    assert load(store, Q2).messages == ()


# -- high-water mark --------------------------------------------------------------------------------


def test_put_entity_then_load_ordered_by_path(store: MessagingStore) -> None:
    props: dict[str, Any] = {
        "lock_duration_ms": 60_000,
        "requires_session": False,
        "forward_to": None,
        "ratio": 0.5,
        "nested": {"list": [1, "two", {"three": 3}], "ünï": "cødé"},
    }
    store.apply([PutEntity(queue("b-queue")), PutEntity(EntityRecord("a-queue", "queue", props))])
    store.apply([PutEntity(queue("C-queue", x=1))])
    assert store.load_entities() == [
        EntityRecord("a-queue", "queue", props),
        queue("b-queue"),
        queue("C-queue", x=1),
    ]


def test_loaded_entities_are_copies(store: MessagingStore) -> None:
    store.apply([PutEntity(queue("q", tags=["a"]))])
    loaded = store.load_entities()
    loaded[0].properties["tags"].append("b")
    assert store.load_entities() == [queue("q", tags=["a"])]


def test_put_entity_replaces_case_insensitively(store: MessagingStore) -> None:
    store.apply([PutEntity(queue("Orders", max_delivery_count=10))])
    store.apply([PutEntity(EntityRecord("orders", "queue", {"max_delivery_count": 3}))])
    assert store.load_entities() == [queue("orders", max_delivery_count=3)]
    store.apply([PutEntity(queue("ORDERS", a=1)), PutEntity(queue("orders", a=2))])
    assert store.load_entities() == [queue("orders", a=2)]


def test_delete_entity_is_case_insensitive_and_ignores_unknown_paths(store: MessagingStore) -> None:
    store.apply([PutEntity(queue("Orders")), PutEntity(queue("other"))])
    store.apply([DeleteEntity("ORDERS"), DeleteEntity("never-existed")])
    assert store.load_entities() == [queue("other")]


def test_delete_entity_removes_messages_of_every_partition(store: MessagingStore) -> None:
    other = PartitionRef("queue10", 0)
    store.apply(
        [
            PutEntity(queue("queue1")),
            PutEntity(queue("queue10")),
            Append((record(1), record(2)), ref=Q1),
            Append((record(5),), ref=Q1_P1),
            Append((record(3),), ref=PartitionRef("queue1", 7)),
            Append((record(1),), ref=other),
        ]
    )
    store.apply([DeleteEntity("Queue1")])
    empty = Loaded(messages=(), last_sequence_number=0)
    for ref in (Q1, Q1_P1, PartitionRef("queue1", 7)):
        assert load(store, ref) == empty  # messages and high-water mark gone
        assert store.stats(ref) == PartitionStats(0, 0)
    assert load(store, other) == Loaded(messages=(record(1),), last_sequence_number=1)
    assert store.load_entities() == [queue("queue10")]
    # A re-created entity starts afresh.
    store.apply([PutEntity(queue("queue1")), Append((record(1),), ref=Q1)])
    assert load(store, Q1) == Loaded(messages=(record(1),), last_sequence_number=1)


def test_properties_that_are_not_json_fail_the_batch(store: MessagingStore) -> None:
    for bad in ({"when": object()}, {"x": float("nan")}):
        with pytest.raises(StoreUnavailable):
            store.apply([Append((record(1),), ref=Q1), PutEntity(EntityRecord("q", "queue", bad))])
    assert store.load_entities() == []
    assert load(store, Q1).messages == ()


# -- duplicate-detection history --------------------------------------------------------------------


def history(store: MessagingStore, ref: PartitionRef = Q1) -> tuple[tuple[str, int], ...]:
    return load(store, ref).duplicate_history


def test_remember_then_load_orders_by_time_then_id(store: MessagingStore) -> None:
    store.apply([RememberMessageIds((("b", 20), ("a", 20), ("z", 10), ("ünï\x00cødé 🚀", 30), ("", 5)), ref=Q1)])
    assert history(store) == (("", 5), ("z", 10), ("a", 20), ("b", 20), ("ünï\x00cødé 🚀", 30))
    assert load(store, Q1) == Loaded(
        messages=(), last_sequence_number=0, duplicate_history=history(store)
    )
    assert store.stats(Q1) == PartitionStats(0, 0)  # history is not a message


def test_remember_is_an_upsert_and_ids_compare_exactly(store: MessagingStore) -> None:
    store.apply([RememberMessageIds((("a", 10), ("A", 11)), ref=Q1)])
    store.apply([RememberMessageIds((("a", 50),), ref=Q1)])
    assert history(store) == (("A", 11), ("a", 50))
    store.apply([RememberMessageIds((("a", 5),), ref=Q1)])  # the new time wins, even an earlier one
    assert history(store) == (("a", 5), ("A", 11))
    store.apply([RememberMessageIds((("x", 1), ("x", 3), ("x", 2)), ref=Q1)])  # within one op, the last wins
    assert history(store) == (("x", 2), ("a", 5), ("A", 11))


def test_forget_removes_only_the_named_ids_and_ignores_unknown_ones(store: MessagingStore) -> None:
    store.apply([RememberMessageIds((("a", 1), ("b", 2), ("c", 3)), ref=Q1)])
    store.apply([ForgetMessageIds(("b", "nope", "A"), ref=Q1), ForgetMessageIds(("a",), ref=PartitionRef("nowhere",
                                                                                                         2))])
    assert history(store) == (("a", 1), ("c", 3))
    assert history(store, PartitionRef("nowhere", 2)) == ()


def test_history_ops_apply_in_order_within_a_batch(store: MessagingStore) -> None:
    store.apply(
        [
            RememberMessageIds((("a", 1), ("b", 2)), ref=Q1),
            ForgetMessageIds(("a",), ref=Q1),
            RememberMessageIds((("a", 9),), ref=Q1),
            ForgetMessageIds(("b",), ref=Q1),
        ]
    )
    assert history(store) == (("a", 9),)


def test_history_is_isolated_per_partition_and_entity_paths_fold_case(store: MessagingStore) -> None:
    store.apply(
        [
            RememberMessageIds((("a", 1),), ref=Q1),
            RememberMessageIds((("a", 2), ("b", 2)), ref=Q1_P1),
            RememberMessageIds((("c", 3),), ref=Q2),
            Append((record(1),), ref=Q1),
        ]
    )
    store.apply(
        [
            ForgetMessageIds(("a",), ref=PartitionRef("QUEUE1", 1)),
            RememberMessageIds((("d", 4),), ref=PartitionRef("Queue1", 0)),
        ]
    )
    assert history(store) == (("a", 1), ("d", 4))
    assert history(store, Q1_P1) == (("b", 2),)
    assert history(store, Q2) == (("c", 3),)
    assert history(store, PartitionRef("queue1", 2)) == ()
    assert history(store, PartitionRef("queue", 0)) == ()
    assert load(store, Q1).messages == (record(1),)  # messages and history do not mix
    store.apply([delete(Q1, (1,))])
    assert history(store) == (("a", 1), ("d", 4))


def test_history_survives_reopen(harness: Harness) -> None:
    harness.store.apply(
        [
            Append((record(1),), ref=Q1),
            RememberMessageIds((("id-1", 1_700_000_000_001), ("gone", 5)), ref=Q1),
            RememberMessageIds((("p1", INT64_MAX), ("min", INT64_MIN)), ref=Q1_P1),
        ]
    )
    harness.store.apply([ForgetMessageIds(("gone",), ref=Q1)])
    store = harness.reopen()
    assert history(store) == (("id-1", 1_700_000_000_001),)
    assert history(store, Q1_P1) == (("min", INT64_MIN), ("p1", INT64_MAX))
    store.apply([RememberMessageIds((("id-1", 7),), ref=Q1)])
    assert history(harness.reopen()) == (("id-1", 7),)


def test_history_values_that_cannot_be_stored_fail_the_batch(store: MessagingStore) -> None:
    for bad in (
        RememberMessageIds((("a", 1), ("b", INT64_MAX + 1)), ref=Q1),
        RememberMessageIds((("a", 1), ("b", INT64_MIN - 1)), ref=Q1),
        RememberMessageIds((("lone \ud800 surrogate", 1),), ref=Q1),
        ForgetMessageIds(("lone \udfff surrogate",), ref=Q1),
        RememberMessageIds((("a", 1),), ref=PartitionRef("queue1", 2**63)),
    ):
        with pytest.raises(StoreUnavailable):
            store.apply([RememberMessageIds((("q2", 1),), ref=Q2), Append((record(1),), ref=Q2), bad])
    assert load(store, Q1) == Loaded(messages=(), last_sequence_number=0)
    assert load(store, Q2) == Loaded(messages=(), last_sequence_number=0)


def test_history_ops_are_atomic_with_the_rest_of_a_failing_batch(harness: Harness) -> None:
    store = harness.store
    store.apply([Append((record(1),), ref=Q1), RememberMessageIds((("a", 1), ("b", 2)), ref=Q1)])
    before = load(store, Q1)
    with pytest.raises(StoreUnavailable):
        store.apply(
            [
                RememberMessageIds((("c", 3), ("a", 9)), ref=Q1),
                ForgetMessageIds(("b",), ref=Q1),
                RememberMessageIds((("q2", 1),), ref=Q2),
                Append((record(1, enqueued_time=INT64_MIN - 1),), ref=Q1),  # does not fit: the whole batch fails
            ]
        )
    assert load(store, Q1) == before
    assert history(store, Q2) == ()
    if harness.persistent:
        assert load(harness.reopen(), Q1) == before


def test_delete_entity_removes_the_history_of_every_partition(store: MessagingStore) -> None:
    store.apply(
        [
            PutEntity(queue("queue1")),
            RememberMessageIds((("a", 1),), ref=Q1),
            RememberMessageIds((("b", 2),), ref=Q1_P1),
            RememberMessageIds((("c", 3),), ref=PartitionRef("queue10", 0)),
        ]
    )
    store.apply([DeleteEntity("QUEUE1")])
    assert history(store) == ()
    assert history(store, Q1_P1) == ()
    assert history(store, PartitionRef("queue10", 0)) == (("c", 3),)
    store.apply([RememberMessageIds((("a", 4),), ref=Q1)])  # a re-created entity starts afresh
    assert history(store) == (("a", 4),)


def test_delete_entity_removes_its_sub_queues_but_not_other_entities(store: MessagingStore) -> None:
    own = [
        PartitionRef("orders", 0),
        PartitionRef("orders", 1),
        PartitionRef("orders/$deadletterqueue", 0),
        PartitionRef("Orders/$DeadLetterQueue", 1),
        PartitionRef("ORDERS/$Transfer/$DeadLetterQueue", 0),
    ]
    others = [
        PartitionRef("orders10", 0),
        PartitionRef("orders10/$deadletterqueue", 0),
        PartitionRef("orders/eu", 0),  # a queue of its own: entity paths may contain slashes
        PartitionRef("orders/eu/$deadletterqueue", 0),
        PartitionRef("order", 0),
        PartitionRef("order/$deadletterqueue", 0),
    ]
    store.apply([PutEntity(queue("orders")), PutEntity(queue("orders/eu")), PutEntity(queue("orders10"))])
    for i, ref in enumerate(own + others, start=1):
        store.apply([Append((record(i),), ref=ref), RememberMessageIds(((f"id-{i}", i),), ref=ref)])
    store.apply([DeleteEntity("oRdErS")])
    empty = Loaded(messages=(), last_sequence_number=0)
    for ref in own:
        assert load(store, ref) == empty, ref
        assert store.stats(ref) == PartitionStats(0, 0)
    for i, ref in enumerate(others, start=len(own) + 1):
        assert load(store, ref) == Loaded(  # each the first message of its partition: numbered 1
            messages=(replace(record(i), sequence_number=1),), last_sequence_number=1,
            duplicate_history=((f"id-{i}", i),)
        ), ref
    assert store.load_entities() == [queue("orders/eu"), queue("orders10")]
    # Deleting a sub-queue path removes that sub-queue only.
    store.apply([DeleteEntity("orders/eu/$DEADLETTERQUEUE")])
    assert load(store, PartitionRef("orders/eu/$deadletterqueue", 0)) == empty
    assert seqs(load(store, PartitionRef("orders/eu", 0))) == [1]


# -- atomicity --------------------------------------------------------------------------------------


def _populate(store: MessagingStore) -> None:
    store.apply(
        [
            PutEntity(queue("queue1")),
            PutEntity(queue("queue2")),
            PutEntity(queue("doomed")),
            Append((record(1), record(2)), ref=Q1),
            Append((record(1),), ref=Q2),
            Append((record(1),), ref=PartitionRef("doomed", 0)),
            RememberMessageIds((("m-1", 100), ("m-2", 200)), ref=Q1),
            RememberMessageIds((("d-1", 100),), ref=PartitionRef("doomed", 0)),
        ]
    )


def _state(store: MessagingStore) -> tuple[object, ...]:
    refs = (Q1, Q1_P1, Q2, PartitionRef("doomed", 0))
    return (
        tuple(load(store, r) for r in refs),
        tuple(store.stats(r) for r in refs),
        tuple(store.load_entities()),
    )


def _mixed_batch(tail: list[StoreOp]) -> list[StoreOp]:
    return [
        PutEntity(queue("new-queue")),
        PutEntity(queue("QUEUE1", changed=True)),
        Append((record(3), record(4)), ref=Q1),
        Append((record(1),), ref=Q1_P1),
        delete(Q2, (1,)),
        DeleteEntity("doomed"),
        RememberMessageIds((("m-3", 300), ("m-1", 400)), ref=Q1),
        ForgetMessageIds(("m-2",), ref=Q1),
        RememberMessageIds((("p-1", 500),), ref=Q1_P1),
        *tail,
    ]


def test_memory_store_injected_failure_applies_nothing() -> None:
    store = MemoryStore()
    store.open()
    _populate(store)
    before = _state(store)
    cause = OSError("disk on fire")
    store.fail_next_apply(cause)
    with pytest.raises(StoreUnavailable) as info:
        store.apply(_mixed_batch([]))
    assert info.value.__cause__ is cause
    assert _state(store) == before
    store.apply(_mixed_batch([]))  # only the next apply fails
    assert seqs(load(store, Q1)) == [1, 2, 3, 4]

    injected = StoreUnavailable("partition store offline")
    store.fail_next_apply(injected)
    with pytest.raises(StoreUnavailable) as info:
        store.apply([Append((record(9),), ref=Q1)])
    assert info.value is injected
    assert seqs(load(store, Q1)) == [1, 2, 3, 4]


# -- statistics -------------------------------------------------------------------------------------


def test_stats_count_messages_and_their_size(store: MessagingStore) -> None:
    a = record(1, annotations=b"12345", tail=b"x" * 100)
    b = record(2, annotations=b"", tail=b"y" * 1000)
    c = record(3, annotations=b"ab", tail=b"")
    store.apply([Append((a, b, c), ref=Q1), Append((record(1, tail=b"z" * 7),), ref=Q2)])
    assert store.stats(Q1) == PartitionStats(message_count=3, size_in_bytes=a.size + b.size + c.size)
    assert store.stats(Q1) == PartitionStats(3, 1107)
    store.apply([delete(Q1, (2,))])
    assert store.stats(Q1) == PartitionStats(2, 107)
    assert store.stats(Q2) == PartitionStats(1, record(1, tail=b"z" * 7).size)
    assert store.stats(Q1_P1) == PartitionStats(0, 0)


# -- SQLite specifics -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["OFF", "", "FULLY", "2", "normal; DROP TABLE messages"])
def test_sqlite_rejects_unsafe_or_unknown_synchronous_modes(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        SqliteStore(tmp_path / "x.db", synchronous=bad)
    assert "synchronous" in info.value.description
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("mode", ["FULL", "full", "NORMAL", "EXTRA"])
def test_sqlite_accepts_durable_synchronous_modes(tmp_path: Path, mode: str) -> None:
    store = SqliteStore(tmp_path / "x.db", synchronous=mode)
    assert store.synchronous == mode.upper()
    store.open()
    store.apply([Append((record(1),), ref=Q1)])
    assert seqs(load(store, Q1)) == [1]
    store.close()


def test_sqlite_defaults_to_full_and_uses_wal_with_a_schema_version(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    store = SqliteStore(db)
    assert store.synchronous == "FULL"
    store.open()
    store.close()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("PRAGMA user_version").fetchone() == (6,)
        assert raw.execute("PRAGMA page_size").fetchone() == (16384,)
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"messages", "partitions", "entities", "duplicate_history", "session_states"} <= tables
    finally:
        raw.close()


def test_sqlite_migrates_a_version_1_file(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    store = SqliteStore(db)
    store.open()
    store.apply([PutEntity(queue("queue1")), Append((record(1), record(2)), ref=Q1), delete(Q1, (2,))])
    store.close()
    # Make it the file a version-1 Sodalite left: no duplicate_history or session_states, user_version 1.
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE duplicate_history")
    raw.execute("DROP TABLE session_states")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()

    store = SqliteStore(db)
    store.open()
    try:
        assert load(store, Q1) == Loaded(messages=(record(1),), last_sequence_number=2)
        assert store.load_entities() == [queue("queue1")]
        store.apply([RememberMessageIds((("a", 1),), ref=Q1)])
        assert history(store) == (("a", 1),)
    finally:
        store.close()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (6,)
    finally:
        raw.close()
    store = SqliteStore(db)
    store.open()  # opening a current file again changes nothing
    try:
        assert history(store) == (("a", 1),)
        assert seqs(load(store, Q1)) == [1]
    finally:
        store.close()


def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(StoreUnavailable) as info:
        SqliteStore(db).open()
    assert "99" in info.value.description


def test_sqlite_unopenable_file_raises_store_unavailable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "missing-dir" / "x.db")
    with pytest.raises(StoreUnavailable) as info:
        store.open()
    assert type(info.value) is StoreUnavailable
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable):
        SqliteStore(tmp_path / "garbage.db").open()


def test_sqlite_reports_a_locked_database_as_unavailable(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    store = SqliteStore(db, busy_timeout_ms=50)
    store.open()
    locker = sqlite3.connect(db, isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable) as info:
            store.apply([Append((record(1),), ref=Q1)])
        assert "locked" in info.value.description
        locker.execute("ROLLBACK")
        store.apply([Append((record(1),), ref=Q1)])  # usable again once the lock is gone
        assert seqs(load(store, Q1)) == [1]
    finally:
        locker.close()
        store.close()


class _CommitFails:
    """Wraps a connection so that COMMIT fails, as an fsync error would make it."""

    def __init__(self, inner: sqlite3.Connection) -> None:
        self._inner = inner

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._inner.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_sqlite_failed_commit_closes_the_store(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    store = SqliteStore(db)
    store.open()
    store.apply([Append((record(1),), ref=Q1)])
    store._conn = cast(sqlite3.Connection, _CommitFails(cast(sqlite3.Connection, store._conn)))
    with pytest.raises(StoreUnavailable) as info:
        store.apply([Append((record(2),), ref=Q1)])
    assert "may or may not" in info.value.description
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(StoreUnavailable) as info:
        load(store, Q1)  # the connection is gone: the caller must reopen and reload
    assert "closed" in info.value.description
    store.close()
    reopened = SqliteStore(db)
    reopened.open()
    try:
        assert seqs(load(reopened, Q1)) == [1]
    finally:
        reopened.close()


_CHILD = r"""
import sys
import time

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, PartitionRef, RememberMessageIds
from sodalite.store.sqlite import SqliteStore

path, batches, per_batch, report_each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
store = SqliteStore(path)
store.open()
ref = PartitionRef("durable", 0)
seq = 0
for b in range(batches):
    messages = []
    for _ in range(per_batch):
        seq += 1
        messages.append(MessageRecord(
            sequence_number=seq, enqueued_time=1000 + seq, message_id=f"m{seq}", session_id=None,
            partition_key=None, time_to_live=None, expires_at=None, scheduled_enqueue_time=None,
            delivery_count=0, state=MessageState.ACTIVE, durable=True, priority=None,
            annotations=b"", annotation_count=0, tail=(b"%d;" % seq) * 50,
        ))
    store.apply([
        Append(tuple(messages), ref=ref),
        RememberMessageIds(tuple((m.message_id, m.enqueued_time) for m in messages), ref=ref),
    ])
    if report_each:
        print("committed", seq, flush=True)
if not report_each:
    print("committed", seq, flush=True)
time.sleep(600)
"""


def _spawn_child(db: Path, batches: int, per_batch: int, report_each: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(db), str(batches), str(per_batch), "1" if report_each else "0"],
        stdout=subprocess.PIPE,
        text=True,
    )


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert proc.stdout is not None
    proc.stdout.close()


def _expected_tail(seq: int) -> bytes:
    return (b"%d;" % seq) * 50


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sqlite_committed_batches_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "durable.db"
    proc = _spawn_child(db, batches=7, per_batch=13, report_each=False)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "committed 91\n"
    finally:
        _kill(proc)
    store = SqliteStore(db)
    store.open()
    try:
        snapshot = load(store, PartitionRef("durable", 0))
        assert seqs(snapshot) == list(range(1, 92))
        assert snapshot.last_sequence_number == 91
        assert all(m.tail == _expected_tail(m.sequence_number) for m in snapshot.messages)
        assert all(m.message_id == f"m{m.sequence_number}" for m in snapshot.messages)
        assert snapshot.duplicate_history == tuple((f"m{n}", 1000 + n) for n in range(1, 92))
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sqlite_sigkill_mid_stream_keeps_whole_batches_only(tmp_path: Path) -> None:
    db = tmp_path / "durable.db"
    per_batch = 10
    proc = _spawn_child(db, batches=100_000, per_batch=per_batch, report_each=True)
    try:
        assert proc.stdout is not None
        acknowledged = 0
        for _ in range(25):
            acknowledged = int(proc.stdout.readline().split()[1])
    finally:
        _kill(proc)  # while it is writing further batches
    store = SqliteStore(db)
    store.open()
    try:
        snapshot = load(store, PartitionRef("durable", 0))
        found = seqs(snapshot)
        assert len(found) >= acknowledged == 25 * per_batch
        assert found == list(range(1, len(found) + 1))
        assert len(found) % per_batch == 0  # no batch is half there
        assert snapshot.last_sequence_number == len(found)
        # The history was written in the same batches as the messages: exactly as much of it is there.
        assert snapshot.duplicate_history == tuple((f"m{n}", 1000 + n) for n in found)
    finally:
        store.close()


# -- durable adapters behave like the memory store --------------------------------------------------

_PATHS = st.sampled_from(
    ["q1", "Q1", "q2", "topic/Subscriptions/s", "q1/$DeadLetterQueue", "Q1/$transfer/$deadletterqueue", "q1/x"]
)
_REFS = st.builds(PartitionRef, _PATHS, st.integers(0, 1))
_SEQ = st.integers(1, 12)
_I64 = st.integers(INT64_MIN, 2**63)  # 2**63 does not fit: such batches must fail everywhere
_OPT_I64 = st.none() | _I64
_OPT_TEXT = st.none() | st.text(max_size=4)
_STATES = st.sampled_from(MessageState)
_MESSAGE_IDS = st.sampled_from(["a", "b", "B", "ü", ""])

_RECORDS = st.builds(
    MessageRecord,
    sequence_number=_SEQ,
    enqueued_time=st.integers(0, 2**41),
    message_id=_OPT_TEXT,
    session_id=_OPT_TEXT,
    partition_key=_OPT_TEXT,
    time_to_live=_OPT_I64,
    expires_at=st.none() | st.integers(0, 2**41),
    scheduled_enqueue_time=st.none() | st.integers(0, 2**41),
    delivery_count=st.integers(0, 10),
    state=_STATES,
    durable=st.none() | st.booleans(),
    priority=st.none() | st.integers(0, 255),
    annotations=st.binary(max_size=8),
    annotation_count=st.integers(0, 3),
    tail=st.binary(max_size=16),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_OPS: st.SearchStrategy[StoreOp] = st.one_of(
    st.builds(Append, st.lists(_RECORDS, min_size=1, max_size=3).map(tuple), ref=_REFS),
    st.builds(delete, _REFS, st.lists(_SEQ, max_size=4).map(tuple)),
    st.builds(
        PutEntity,
        st.builds(
            EntityRecord,
            _PATHS,
            st.sampled_from(["queue", "topic"]),
            st.dictionaries(st.text(max_size=4), _JSON, max_size=3),
        ),
    ),
    st.builds(DeleteEntity, _PATHS),
    st.builds(
        RememberMessageIds,
        st.lists(st.tuples(_MESSAGE_IDS, st.integers(-5, 5) | _I64), max_size=4).map(tuple),
        ref=_REFS,
    ),
    st.builds(ForgetMessageIds, st.lists(_MESSAGE_IDS, max_size=3).map(tuple), ref=_REFS),
)
_BATCHES = st.lists(st.lists(_OPS, min_size=0, max_size=5), min_size=1, max_size=12)
_ALL_REFS = [
    PartitionRef(p, n)
    for p in ("q1", "Q1", "q2", "topic/subscriptions/S", "Q1/$deadletterqueue", "q1/$Transfer/$DeadLetterQueue", "q1/x")
    for n in (0, 1, 2)
]


def _observe(store: MessagingStore) -> tuple[object, ...]:
    return (
        [load(store, r) for r in _ALL_REFS],
        [store.stats(r) for r in _ALL_REFS],
        store.load_entities(),
    )


def _outcome(store: MessagingStore, batch: list[StoreOp]) -> str:
    try:
        store.apply(batch)
    except StoreUnavailable:
        return "failed"
    return "applied"


# NORMAL only to keep the examples fast; the semantics do not depend on it.
# PostgreSQL: a new schema of the module's database for each example.
_DURABLE: dict[str, Callable[[Path, pytest.FixtureRequest], MessagingStore]] = {
    "sqlite": lambda tmp, _: SqliteStore(tmp / "p.db", synchronous="NORMAL"),
    "postgresql": lambda _, request: PostgresStore(pg_schema_url(request.getfixturevalue("pg_database"))),
}


@pytest.mark.parametrize("adapter", _DURABLE)
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=_BATCHES)
def test_durable_adapter_matches_the_memory_store(adapter: str, batches: list[list[StoreOp]],
                                                  request: pytest.FixtureRequest) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        reference = MemoryStore()
        durable = _DURABLE[adapter](Path(tmp), request)
        reference.open()
        durable.open()
        try:
            for batch in batches:
                assert _outcome(durable, batch) == _outcome(reference, batch)
                assert _observe(durable) == _observe(reference)
        finally:
            durable.close()
            reference.close()


# ---- session state ----------------------------------------------------------------------------------


def test_session_state_is_set_replaced_cleared_and_kept_per_partition(store: MessagingStore) -> None:
    from sodalite.store.port import PutSessionState

    q = PartitionRef("sessq", 0)
    other = PartitionRef("sessq", 1)
    store.apply([PutSessionState("b", b"two", 20, ref=q), PutSessionState("a", b"one", 10, ref=q),
                 PutSessionState("a", b"elsewhere", 5, ref=other)])
    assert load(store, q).session_states == (("a", b"one", 10), ("b", b"two", 20))
    store.apply([PutSessionState("a", b"uno", 30, ref=q), PutSessionState("b", None, 40, ref=q)])
    assert load(store, q).session_states == (("a", b"uno", 30),)
    assert load(store, other).session_states == (("a", b"elsewhere", 5),)
    store.apply([DeleteEntity("SESSQ")])
    assert load(store, q).session_states == () and load(store, other).session_states == ()


def test_sqlite_session_state_survives_reopen(tmp_path: Path) -> None:
    from sodalite.store.port import PutSessionState

    db = tmp_path / "s.db"
    first = SqliteStore(db)
    first.open()
    first.apply([PutSessionState("s", b"\x00state", 7, ref=PartitionRef("q"))])
    first.close()
    second = SqliteStore(db)
    second.open()
    assert load(second, PartitionRef("q")).session_states == (("s", b"\x00state", 7),)
    second.close()


def test_maintain_keeps_everything_and_reports_room(store: MessagingStore) -> None:
    # Housekeeping (SQLite: WAL checkpoint and truncation, freed pages returned) loses nothing (13.12).
    store.apply([Append(tuple(record(n) for n in range(1, 6)), ref=Q1)])
    store.apply([delete(Q1, (1, 2))])
    assert store.maintain() is True
    assert seqs(load(store, Q1)) == [3, 4, 5]


# -- AutoDeleteOnIdle registrations (several nodes; clarifications.md, 18) --------------------------


def test_the_idle_deletion_is_decided_from_every_nodes_registrations(store: MessagingStore) -> None:
    store.apply([PutEntity(queue("Idle"))])
    store.apply([RecordActivity("node-a", 1_000, (EntityActivity("idle", 900, 0),)),
                 RecordActivity("node-b", 1_000, (EntityActivity("IDLE", 500, 1),))])
    # node b serves a receiver and refreshed at 1,000: alive after 990
    assert store.apply([DeleteIdleEntity("idle", 950, 990)]) == (IdleDeleted(False),)
    # node b lapsed (refreshed at or before 1,000), but node a was active at 900, after 800
    assert store.apply([DeleteIdleEntity("idle", 800, 1_000)]) == (IdleDeleted(False),)
    assert [e.path for e in store.load_entities()] == ["Idle"]
    # a refresh with an older last activity does not lower it; its receivers left
    store.apply([RecordActivity("node-b", 1_100, (EntityActivity("idle", 100, 0),))])
    assert store.apply([DeleteIdleEntity("idle", 450, 2_000)]) == (IdleDeleted(False),)  # 500 > 450
    # idle on both nodes since 900, no receivers: deleted, once
    assert store.apply([DeleteIdleEntity("IDLE", 900, 1_050)]) == (IdleDeleted(True),)
    assert store.load_entities() == []
    assert store.apply([DeleteIdleEntity("idle", 900, 1_050)]) == (IdleDeleted(False),)


def test_an_idle_deletion_needs_the_definition_and_forgets_the_registrations(harness: Harness) -> None:
    store = harness.store
    assert store.apply([DeleteIdleEntity("never", 0, 0)]) == (IdleDeleted(False),)
    store.apply([PutEntity(queue("q")), RecordActivity("a", 5_000, (EntityActivity("q", 4_000, 2),))])
    if harness.persistent:
        store = harness.reopen()  # registrations are stored
    assert store.apply([DeleteIdleEntity("q", 4_500, 4_000)]) == (IdleDeleted(False),)  # receivers, alive
    store.apply([DeleteEntity("q"), PutEntity(queue("q"))])  # deleting the entity drops its rows
    assert store.apply([DeleteIdleEntity("q", 0, 0)]) == (IdleDeleted(True),)
