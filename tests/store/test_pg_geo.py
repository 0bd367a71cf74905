"""A forced geo promotion's counter move, in SQL, against the rule in Python: every partition the
database knows of (one with messages, one of a partitioned entity, a dead-letter sub-queue, an entity
never written to) gives its next number at the start of the epoch after next, and a second move
moves on again. A real server (tests/pg_server.py); each test has a schema of its own."""

from __future__ import annotations

import psycopg

from sodalite.model.geo import counter_after_forced_promotion
from sodalite.store.port import Append, Appended, EntityRecord, PartitionRef, PutEntity
from sodalite.store.postgres import PostgresStore
from sodalite.store.postgres import geo as pg_geo
from store.pg_rows import record

ORDERS = PartitionRef("orders", 0)
ORDERS_3 = PartitionRef("orders", 3)
ORDERS_DLQ = PartitionRef("orders/$deadletterqueue", 0)
IDLE = PartitionRef("idle", 0)
IDLE_3 = PartitionRef("idle", 3)


def next_number(store: PostgresStore, ref: PartitionRef) -> int:
    (appended,) = store.apply([Append((record(),), ref=ref)])
    assert isinstance(appended, Appended)
    return appended.sequence_numbers[0]


def move(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        return pg_geo.move_counters(conn)


def test_every_partition_moves_to_the_epoch_after_next(store: PostgresStore, url: str) -> None:
    store.apply([PutEntity(EntityRecord("Orders", "queue", "{}")), PutEntity(EntityRecord("idle", "queue", "{}"))])
    store.apply([Append(tuple(record() for _ in range(5)), ref=ORDERS)])
    store.apply([Append(tuple(record() for _ in range(2)), ref=ORDERS_3)])
    assert move(url) > 0
    expected = {ORDERS: counter_after_forced_promotion(5, 0) + 1,
                ORDERS_3: counter_after_forced_promotion((3 << 48) + 2, 3) + 1,
                ORDERS_DLQ: counter_after_forced_promotion(0, 0) + 1,
                IDLE: counter_after_forced_promotion(0, 0) + 1,
                IDLE_3: counter_after_forced_promotion(0, 3) + 1}
    assert {ref: next_number(store, ref) for ref in expected} == expected
    assert expected[ORDERS] == (2 << 32) + 1 and expected[ORDERS_3] == (3 << 48) + (2 << 32) + 1

    move(url)  # a second forced promotion moves on again, past what the first one gave
    assert next_number(store, ORDERS) == (4 << 32) + 1
