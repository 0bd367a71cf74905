"""The PostgreSQL store's counters in the ring (schema version 3): a long transaction does not make
them grow; numbering still takes the partition's row; a schema-2 database is migrated in place.

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own
in this module's database.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from sodalite.model.message import MessageState
from sodalite.store.port import (
    Append,
    Appended,
    Claim,
    Claimed,
    Moved,
    MoveItem,
    MoveMessages,
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
# Every table that holds counters, in any schema version (to_regclass: NULL for a missing one).
_COUNTER_TABLES = ("sodalite_partitions", *(f"sodalite_counters_g{g}" for g in range(GENERATIONS)))
_COUNTER_BYTES = "SELECT " + " + ".join(
    f"coalesce(pg_total_relation_size(to_regclass('{t}')), 0)" for t in _COUNTER_TABLES)


def test_a_long_transaction_does_not_grow_the_counters(url: str) -> None:
    """With a REPEATABLE READ transaction held open (VACUUM may remove nothing newer), 600 cycles
    (1,200 batches that change the partition's counters) leave the counter tables about the size
    they were: the partition's base row gets no new version at all, and the versions the
    generations' counter rows leave go with their generation's TRUNCATE. (Schema 2's counter row,
    updated in place, left one version per batch: its table grew from 32 to 152 KiB here.)"""
    store = PostgresStore(url, rotate_bytes=64 * 1024)
    store.open()
    now = 1_000_000
    with psycopg.connect(url, autocommit=True) as monitor, psycopg.connect(url) as reporter:
        monitor.execute("CREATE TABLE report_data (id int PRIMARY KEY, amount int)")
        monitor.execute("INSERT INTO report_data SELECT g, g FROM generate_series(1, 100) g")
        cycle(store, Q, now, 5)
        store.maintain()
        base_bytes = one(monitor, "SELECT pg_relation_size('sodalite_partitions')")
        before = one(monitor, _COUNTER_BYTES)
        reporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reporter.execute("SELECT sum(amount) FROM report_data").fetchone()
        sizes = []
        for _round in range(40):
            for _ in range(15):
                now += 10
                cycle(store, Q, now, 5)
            store.maintain()
            sizes.append(one(monitor, _COUNTER_BYTES))
        counts = store.counts(Q)
        horizon = monitor.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                  (reporter.info.backend_pid,)).fetchone()
        assert horizon is not None and horizon[0] is not None  # the snapshot really was held throughout
        assert one(monitor, "SELECT pg_relation_size('sodalite_partitions')") == base_bytes
        reporter.rollback()
    assert max(sizes) <= before + 64 * 1024, (before, sizes)
    assert store.truncations >= 3
    assert (counts.active, counts.scheduled, counts.deferred, counts.size_in_bytes) == (0, 0, 0, 0)
    assert counts.last_sequence_number == 5 * 601
    store.close()


def test_counters_stay_exact_through_ring_turns_moves_and_dead_letters(url: str) -> None:
    """Counts and numbers summed from the base row and the generations' rows are exact whichever
    generation each change went to, through switches and truncations (which fold a retired
    generation's rows into the current one's), dead-letters into another partition and a move back."""
    store = PostgresStore(url, rotate_bytes=8 * 1024)
    store.open()
    now = 1_000_000
    store.apply([Append((record(state=MessageState.SCHEDULED, scheduled_enqueue_time=10**12),
                            record(tail=b"x" * 100)), ref=Q)])
    tokens = (uuid.uuid4(),)
    (claimed,) = store.apply([Claim(now=now, locked_until=now + 10**9, owner="t", tokens=tokens, ref=Q)])
    assert isinstance(claimed, Claimed)
    kept = claimed.messages[0].record.sequence_number
    store.apply([Settle(now=now, items=(SettleItem(kept, tokens[0], Outcome.DEFER),), ref=Q)])
    for _ in range(30):
        now += 10
        cycle(store, Q, now, 10)
        store.maintain()
    assert store.ring_switches >= 2 and store.truncations >= 2
    # Two dead-lettered, then one of them moved back into the queue with a new number.
    store.apply([Append((record(), record()), ref=Q)])
    tokens = (uuid.uuid4(), uuid.uuid4())
    (claimed,) = store.apply([Claim(now=now, locked_until=now + 60_000, owner="t", tokens=tokens, ref=Q)])
    assert isinstance(claimed, Claimed) and len(claimed.messages) == 2
    (settled,) = store.apply([Settle(now=now, items=tuple(
        SettleItem(m.record.sequence_number, tokens[i], Outcome.DEAD_LETTER, target=DLQ)
        for i, m in enumerate(claimed.messages)), ref=Q)])
    assert settled == Settled((True, True))
    (moved,) = store.apply([MoveMessages(now=now, items=(MoveItem(1),), target=Q, ref=DLQ)])
    assert moved == Moved((2 + 300 + 2 + 1,))
    store.maintain()
    for ref in (Q, DLQ):
        stored = store.peek(ref, 0, 1000)
        counts = store.counts(ref)
        assert counts.active == sum(1 for m in stored if m.record.state == MessageState.ACTIVE)
        assert counts.scheduled == sum(1 for m in stored if m.record.state == MessageState.SCHEDULED)
        assert counts.deferred == sum(1 for m in stored if m.record.state == MessageState.DEFERRED)
        assert counts.size_in_bytes == sum(m.record.size for m in stored)
    assert (store.counts(Q).active, store.counts(Q).last_sequence_number) == (1, 305)
    assert (store.counts(DLQ).active, store.counts(DLQ).last_sequence_number) == (1, 2)
    assert store.counts(Q).last_sequence_number == 305
    store.close()


def test_numbering_takes_the_partition_row_and_two_stores_never_share_a_number(url: str) -> None:
    """An append waits for the partition's row (held FOR UPDATE elsewhere here) rather than
    numbering without it; two stores appending to one partition at once get every number once,
    each its own in increasing order."""
    first, second = PostgresStore(url, application_name="counter-a"), PostgresStore(url, application_name="b")
    first.open()
    second.open()
    first.apply([Append((record(),), ref=Q)])
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as monitor:
        holder.execute("SELECT 1 FROM sodalite_partitions WHERE partition = 0 FOR UPDATE").fetchall()
        results: list[object] = []
        worker = threading.Thread(target=lambda: results.append(first.apply([Append((record(),), ref=Q)])[0]))
        worker.start()
        for _ in range(300):
            waiting = monitor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'counter-a' "
                                      "AND wait_event_type = 'Lock'").fetchone()
            if waiting is not None and waiting[0] == 1:
                break
            threading.Event().wait(0.05)
        else:
            pytest.fail("the append did not wait for the partition's row")
        assert not results
        holder.rollback()
        worker.join(30)
        assert results == [Appended((2,))]

    got: dict[str, list[int]] = {"a": [], "b": []}

    def append(store: PostgresStore, name: str) -> None:
        for _ in range(40):
            (appended,) = store.apply([Append((record(), record(), record()), ref=Q)])
            assert isinstance(appended, Appended)
            got[name].extend(appended.sequence_numbers)

    threads = [threading.Thread(target=append, args=(s, n)) for s, n in ((first, "a"), (second, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(got["a"] + got["b"]) == list(range(3, 3 + 240))
    assert got["a"] == sorted(got["a"]) and got["b"] == sorted(got["b"])
    assert first.counts(Q).active == 242
    first.close()
    second.close()


_V2_INSERT = (
    "INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time, message_id, "
    "session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, "
    "priority, annotations, annotation_count, tail, lock_token, locked_until, lock_owner) "
    "VALUES (%s, %s, 0, %s, 1000, %s, NULL, NULL, NULL, NULL, %s, %s, %s, true, NULL, 'a', 1, %s, %s, %s, %s)"
)


def test_a_schema_2_database_is_migrated_in_place_with_its_counters_and_locks(url: str) -> None:
    """A database as the schema-2 store left it (its counters in sodalite_partitions, messages in
    two generations of the ring, one locked): the new store keeps its counts and numbers on above
    its high-water mark, the locked message settles with its token, and the ring folds and
    truncates the old generation."""
    token = uuid.uuid4()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sodalite_schema_version (singleton boolean PRIMARY KEY DEFAULT true "
                     "CHECK (singleton), version integer NOT NULL)")
        for statements in MIGRATIONS[:2]:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (2)")
        conn.execute("UPDATE sodalite_ring SET generation = 1")
        for row in [
            (0, b"orders", 3, b"m3", None, 0, 0, b"three", None, None, None),
            (0, b"orders", 4, b"m4", 9_000, 0, 2, b"four", None, None, None),  # scheduled
            (1, b"orders", 6, b"m6", None, 2, 1, b"six", None, None, None),  # deferred
            (1, b"orders", 7, b"m7", None, 1, 0, b"seven", token, 10**15, "receiver"),  # locked
            (1, b"orders/$deadletterqueue", 1, b"d1", None, 10, 0, b"dead", None, None, None),
        ]:
            conn.execute(_V2_INSERT, row)
        size = len(b"a") * 4 + len(b"three" + b"four" + b"six" + b"seven")
        conn.execute("INSERT INTO sodalite_partitions VALUES (%s, 0, 9, 2, 1, 1, %s), (%s, 0, 1, 1, 0, 0, 5)",
                     (b"orders", size, b"orders/$deadletterqueue"))

    store = PostgresStore(url)
    store.open()
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT version FROM sodalite_schema_version").fetchone() == (SCHEMA_VERSION,)
        counts = store.counts(Q)
        assert (counts.active, counts.scheduled, counts.deferred, counts.size_in_bytes,
                counts.last_sequence_number, counts.first_sequence_number) == (2, 1, 1, size, 9, 3)
        assert store.counts(DLQ).active == 1
        assert store.counts(Q).last_sequence_number == 9
        (appended,) = store.apply([Append((record(),), ref=Q)])
        assert appended == Appended((10,))
        (settled,) = store.apply([Settle(now=1, items=(SettleItem(7, token, Outcome.COMPLETE),), ref=Q)])
        assert settled == Settled((True,))
        store.maintain()  # generation 0 (two messages) is moved on and truncated
        assert store.truncations >= 1
        counts = store.counts(Q)
        assert (counts.active, counts.scheduled, counts.deferred, counts.last_sequence_number) == (2, 1, 1, 10)
        assert [m.record.sequence_number for m in store.peek(Q, 0, 10)] == [3, 4, 6, 10]
    finally:
        store.close()
