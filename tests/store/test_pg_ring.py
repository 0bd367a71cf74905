"""The PostgreSQL store's own parts of port v2: the in-place migration from schema 1, and the ring of
message tables that keeps a queue from growing while a long transaction holds back VACUUM.

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own
in this module's database.
"""

from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace

import psycopg

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    Append,
    Appended,
    Claim,
    Claimed,
    Outcome,
    PartitionRef,
    Settle,
    Settled,
    SettleItem,
)
from sodalite.store.postgres import GENERATIONS, MIGRATIONS, SCHEMA_VERSION, PostgresStore
from store.pg_rows import cycle, one, record

Q = PartitionRef("orders", 0)
DLQ = PartitionRef("orders/$deadletterqueue", 0)
S = PartitionRef("sessions", 1)


def _record(seq: int = 0, **changes: object) -> MessageRecord:
    return record(**{"sequence_number": seq, "message_id": f"m{seq}", "tail": b"body-" + bytes(str(seq), "ascii"),
                     **changes})


_V1_INSERT = (
    "INSERT INTO sodalite_messages (entity, partition, sequence_number, enqueued_time, message_id, session_id, "
    "partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, "
    "annotations, annotation_count, tail) VALUES (%s, %s, %s, %s, %s, %s, NULL, NULL, NULL, %s, %s, %s, true, NULL, "
    "%s, 1, %s)"
)


def test_a_schema_1_database_is_migrated_in_place_with_its_numbers_and_counts(url: str) -> None:
    """A database as the schema-1 store left it (written here with that schema's own SQL, as the
    schema-1 adapter wrote it): entities, active, scheduled, deferred, dead-lettered and session
    messages, duplicate history, session state, and a high-water mark above the highest stored
    number (a deleted message). The new store finds all of it, counts it, and numbers on."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sodalite_schema_version (singleton boolean PRIMARY KEY DEFAULT true "
                     "CHECK (singleton), version integer NOT NULL)")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (1)")
        rows = [
            (b"orders", 0, 1, 1_000, b"m1", None, None, 0, 0, b"a", b"one"),
            (b"orders", 0, 2, 1_001, b"m2", None, 9_000, 0, 2, b"a", b"two"),  # scheduled
            (b"orders", 0, 4, 1_002, b"m4", None, None, 3, 1, b"a", b"four"),  # deferred
            (b"orders/$deadletterqueue", 0, 1, 1_003, b"d1", None, None, 10, 0, b"a", b"dead"),
            (b"sessions", 1, 7, 1_004, b"s7", b"sess-a", None, 1, 0, b"a", b"in a session"),
        ]
        for row in rows:
            conn.execute(_V1_INSERT, row)
        conn.execute("INSERT INTO sodalite_partitions VALUES (%s, 0, 5), (%s, 0, 1), (%s, 1, 7)",
                     (b"orders", b"orders/$deadletterqueue", b"sessions"))
        conn.execute("INSERT INTO sodalite_entities VALUES (%s, 'Orders', 'queue', '{\"LockDuration\":30000}')",
                     (b"orders",))
        conn.execute("INSERT INTO sodalite_duplicate_history VALUES (%s, 0, %s, 1000)", (b"orders", b"m1"))
        conn.execute("INSERT INTO sodalite_session_states VALUES (%s, 1, %s, %s, 1004)",
                     (b"sessions", b"sess-a", b"state"))

    store = PostgresStore(url)
    store.open()
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT version FROM sodalite_schema_version").fetchone() == (SCHEMA_VERSION,)
        meta = store.partition_meta(Q)
        snapshot = SimpleNamespace(messages=[m.record for m in store.peek(Q, 0, 100)],
                                   last_sequence_number=meta.counts.last_sequence_number,
                                   duplicate_history=meta.duplicate_history)
        assert [(m.sequence_number, m.state, m.delivery_count, m.tail) for m in snapshot.messages] == [
            (1, MessageState.ACTIVE, 0, b"one"), (2, MessageState.SCHEDULED, 0, b"two"),
            (4, MessageState.DEFERRED, 3, b"four")]
        assert snapshot.last_sequence_number == 5
        assert snapshot.duplicate_history == (("m1", 1000),)
        counts = store.counts(Q)
        assert (counts.active, counts.scheduled, counts.deferred, counts.last_sequence_number,
                counts.first_sequence_number) == (1, 1, 1, 5, 1)
        assert counts.size_in_bytes == sum(m.size for m in snapshot.messages)
        assert store.counts(DLQ).active == 1
        [dead] = store.fetch(DLQ, [1])
        assert dead.record.delivery_count == 10 and dead.lock_token is None
        meta = store.partition_meta(S)
        assert meta.session_states == (("sess-a", b"state", 1004),)
        assert [m.record.session_id for m in store.peek(S, 0, 10, session_id="sess-a")] == ["sess-a"]
        assert [e.path for e in store.load_entities()] == ["Orders"]
        # Numbering goes on above the high-water mark, not above the highest stored number.
        (appended,) = store.apply([Append((_record(), _record()), ref=Q)])
        assert appended == Appended((6, 7))
        assert store.counts(Q).active == 3
    finally:
        store.close()


def _ring_bytes(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    return one(conn, " + ".join(f"pg_total_relation_size('sodalite_messages_g{g}')"
                                for g in range(GENERATIONS)).join(("SELECT ", "")))


def test_the_ring_turns_while_a_long_transaction_holds_back_vacuum_and_keeps_every_live_message(url: str) -> None:
    """With a REPEATABLE READ transaction on the user's own table held open, the cycle goes on: the
    ring switches generations and truncates drained ones (moving the few live rows on), so the
    message tables stay small, and a deferred message and a locked one survive every move with
    their numbers, state, lock and counts."""
    store = PostgresStore(url, rotate_bytes=64 * 1024)
    store.open()
    now = 1_000_000
    with psycopg.connect(url, autocommit=True) as monitor, psycopg.connect(url) as reporter:
        monitor.execute("CREATE TABLE report_data (id int PRIMARY KEY, amount int)")
        monitor.execute("INSERT INTO report_data SELECT g, g FROM generate_series(1, 100) g")
        # Two messages that stay: one deferred, one locked by a receiver that has not settled yet.
        store.apply([Append((_record(message_id="stays-deferred"), _record(message_id="stays-locked")), ref=Q)])
        first, second = uuid.uuid4(), uuid.uuid4()
        (claimed,) = store.apply([Claim(now=now, locked_until=now + 10**9, owner="t", tokens=(first, second), ref=Q)])
        assert isinstance(claimed, Claimed)
        deferred, locked = (m.record.sequence_number for m in claimed.messages)
        store.apply([Settle(now=now, items=(SettleItem(deferred, first, Outcome.DEFER),), ref=Q)])

        reporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reporter.execute("SELECT sum(amount) FROM report_data").fetchone()
        sizes = []
        for _round in range(40):
            for _ in range(3):
                now += 10
                cycle(store, Q, now, 50, _record)
            store.maintain()
            sizes.append(_ring_bytes(monitor))
        horizon = monitor.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                  (reporter.info.backend_pid,)).fetchone()
        assert horizon is not None and horizon[0] is not None  # the snapshot really was held throughout
        reporter.rollback()

    # 6,000 messages went through, each leaving dead versions VACUUM may not remove: the tables hold
    # a bounded few generations of them (without the ring they grow past 2 MiB here, and on).
    assert max(sizes) < 2**20, sizes
    assert store.ring_switches >= 3 and store.truncations >= 3
    [still_deferred] = store.fetch(Q, [deferred])
    assert still_deferred.record.state == MessageState.DEFERRED and still_deferred.record.message_id == "stays-deferred"
    [still_locked] = store.fetch(Q, [locked])
    assert (still_locked.lock_token, still_locked.record.delivery_count) == (second, 1)
    counts = store.counts(Q)
    assert (counts.active, counts.deferred, counts.scheduled) == (1, 1, 0)
    # The lock survived the moves: its holder can still settle with it.
    (settled,) = store.apply([Settle(now=now, items=(SettleItem(locked, second, Outcome.COMPLETE),), ref=Q)])
    assert settled == Settled((True,))
    store.close()


def test_truncation_gives_way_to_a_reader_of_sodalite_tables_and_comes_back_later(url: str) -> None:
    """A transaction that has read Sodalite's message table holds a lock TRUNCATE must wait for: the
    maintenance does not queue behind it (which would block every operation queued behind the
    TRUNCATE), it gives up after its lock_timeout and truncates once the reader is gone; batches go
    on meanwhile."""
    store = PostgresStore(url, rotate_bytes=16 * 1024)
    store.open()
    now = 1_000_000
    with psycopg.connect(url) as reader:
        for _ in range(3):
            now += 10
            cycle(store, Q, now, 50, _record)
            store.maintain()  # the ring switches: the previous generation now waits to be truncated
        assert store.ring_switches >= 1
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sodalite_messages").fetchone()
        put_off = store.lock_timeouts
        finished = threading.Event()

        def maintain() -> None:
            store.maintain()
            finished.set()

        worker = threading.Thread(target=maintain, daemon=True)
        worker.start()
        worker.join(30)
        assert finished.is_set(), "maintain() queued behind the reader"
        assert store.lock_timeouts > put_off
        now += 10
        cycle(store, Q, now, 10, _record)  # the store still works while the reader holds its lock
        reader.rollback()
    truncated = store.truncations
    store.maintain()
    assert store.truncations > truncated
    store.close()
