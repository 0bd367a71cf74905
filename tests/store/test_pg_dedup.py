"""The PostgreSQL store's duplicate-detection history (schema version 4): decided in the appending
transaction, so two stores (two broker nodes) taking one MessageId at once store it once; kept in a
ring of its own, so a long transaction does not grow it; a schema-3 database is migrated in place.

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own
in this module's database.
"""

from __future__ import annotations

import random
import threading
import uuid

import psycopg

from sodalite.store.port import (
    Append,
    Appended,
    ClaimMessageIds,
    ForgetMessageIds,
    Gate,
    IdsClaimed,
    PartitionRef,
    RememberMessageIds,
)
from sodalite.store.postgres import GENERATIONS, HISTORY_ROTATE_BYTES, MIGRATIONS, SCHEMA_VERSION, PostgresStore
from store.pg_rows import one, record

Q = PartitionRef("orders", 0)
_HISTORY_BYTES = "SELECT " + " + ".join(
    f"pg_total_relation_size('sodalite_duplicate_history_g{g}')" for g in range(GENERATIONS))


def _send(store: PostgresStore, now: int, *ids: str, window: int = 60_000) -> tuple[IdsClaimed, Appended]:
    """A send with duplicate detection as the core makes it: claim the ids, append what they gate."""
    claim = uuid.uuid4()
    claimed, appended = store.apply([ClaimMessageIds(now, window, claim, ids, ref=Q),
                                     Append(tuple(record(message_id=i) for i in ids), Gate(claim, ids, ref=Q), ref=Q)])
    assert isinstance(claimed, IdsClaimed) and isinstance(appended, Appended)
    return claimed, appended


def test_two_stores_taking_the_same_ids_at_once_store_each_once(url: str) -> None:
    """Two stores (as two nodes) send the same 200 ids, in different orders, one or three per batch:
    every id is taken by exactly one batch, and exactly one message per id is stored."""
    stores = [PostgresStore(url, application_name=f"node-{n}") for n in "ab"]
    for store in stores:
        store.open()
    ids = [f"id-{i}" for i in range(200)]
    taken: dict[str, list[str]] = {"a": [], "b": []}
    numbers: list[int] = []
    lock = threading.Lock()

    def run(store: PostgresStore, name: str, seed: int) -> None:
        order = ids[:]
        random.Random(seed).shuffle(order)
        step = 1 if name == "a" else 3
        for start in range(0, len(order), step):
            chunk = tuple(order[start:start + step])
            claimed, appended = _send(store, 1_000, *chunk)
            with lock:
                taken[name] += [mid for mid, fresh in zip(chunk, claimed.fresh, strict=True) if fresh]
                numbers.extend(n for n in appended.sequence_numbers if n)
            assert [bool(n) for n in appended.sequence_numbers] == list(claimed.fresh)

    threads = [threading.Thread(target=run, args=(store, name, seed))
               for store, name, seed in ((stores[0], "a", 1), (stores[1], "b", 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(taken["a"] + taken["b"]) == sorted(ids)
    assert taken["a"] and taken["b"]  # both really raced
    stored = stores[0].peek(Q, 0, 1_000)
    assert sorted(str(s.record.message_id) for s in stored) == sorted(ids)
    assert sorted(numbers) == [s.record.sequence_number for s in stored]
    assert stores[1].counts(Q).active == 200
    for store in stores:
        store.close()


def test_a_long_transaction_does_not_grow_the_history(url: str) -> None:
    """With a REPEATABLE READ transaction held open, 120,000 ids come and go (taken, then forgotten
    once past a 1 s window, as the core prunes them): the history's tables stay within a few times
    HISTORY_ROTATE_BYTES, because drained generations are truncated, while an id that stays (within
    its window) moves on with its generation and is still a duplicate. (Without the ring the
    deleted rows' versions stay: the tables grew to 17 MiB here.)"""
    store = PostgresStore(url)
    store.open()
    now = 1_000_000
    assert _send(store, now, "keeper")[0] == IdsClaimed((True,))
    recent: list[tuple[int, tuple[str, ...]]] = []
    with psycopg.connect(url, autocommit=True) as monitor, psycopg.connect(url) as reporter:
        monitor.execute("CREATE TABLE report_data (id int PRIMARY KEY, amount int)")
        monitor.execute("INSERT INTO report_data SELECT g, g FROM generate_series(1, 100) g")
        reporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reporter.execute("SELECT sum(amount) FROM report_data").fetchone()
        sizes = []
        for batch in range(1_200):
            now += 100
            ids = tuple(f"m{batch}-{i}" for i in range(100))
            store.apply([RememberMessageIds(tuple((mid, now) for mid in ids), ref=Q)])
            recent.append((now, ids))
            gone = [mids for at, mids in recent if at < now - 1_000]
            recent = [(at, mids) for at, mids in recent if at >= now - 1_000]
            if gone:
                store.apply([ForgetMessageIds(tuple(m for mids in gone for m in mids), now - 1_000, ref=Q)])
            if batch % 10 == 0:
                store.maintain()
                sizes.append(one(monitor, _HISTORY_BYTES))
        horizon = monitor.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                  (reporter.info.backend_pid,)).fetchone()
        assert horizon is not None and horizon[0] is not None  # the snapshot really was held throughout
        reporter.rollback()
    assert store.history_switches >= 3 and store.history_truncations >= 3
    assert max(sizes) <= 8 * HISTORY_ROTATE_BYTES, sizes
    history = dict(store.partition_meta(Q).duplicate_history)
    assert history["keeper"] == 1_000_000 and len(history) == 1 + 100 * len(recent)
    # still a duplicate within a window that covers it
    assert _send(store, now, "keeper", window=10**9) == (IdsClaimed((False,)), Appended((0,)))
    store.close()


def test_a_schema_3_database_is_migrated_in_place_with_its_history(url: str) -> None:
    """A database as the schema-3 store left it: its history is kept (an id within its window is a
    duplicate), new ids go into the history's ring, and forgetting works on both."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE sodalite_schema_version (singleton boolean PRIMARY KEY DEFAULT true "
                     "CHECK (singleton), version integer NOT NULL)")
        for statements in MIGRATIONS[:3]:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (3)")
        conn.execute("INSERT INTO sodalite_duplicate_history VALUES (%s, 0, %s, 5000), (%s, 0, %s, 100)",
                     (b"orders", b"old", b"orders", b"older"))
    store = PostgresStore(url)
    store.open()
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT version FROM sodalite_schema_version").fetchone() == (SCHEMA_VERSION,)
            assert conn.execute("SELECT generation, history_generation FROM sodalite_ring").fetchone() == (0, 0)
        assert store.partition_meta(Q).duplicate_history == (("older", 100), ("old", 5000))
        claim = uuid.uuid4()
        claimed, appended = store.apply([
            ClaimMessageIds(61_000, 60_000, claim, ("old", "older", "new"), ref=Q),
            Append((record(message_id="old"), record(message_id="older"), record(message_id="new")),
                   Gate(claim, ("old", "older", "new"), ref=Q), ref=Q)])
        assert claimed == IdsClaimed((False, True, True))  # "older" was past the window
        assert appended == Appended((0, 1, 2))
        assert store.partition_meta(Q).duplicate_history == (("old", 5000), ("new", 61_000), ("older", 61_000))
        store.apply([ForgetMessageIds(("old", "older"), 10_000, ref=Q)])
        assert store.partition_meta(Q).duplicate_history == (("new", 61_000), ("older", 61_000))
    finally:
        store.close()
