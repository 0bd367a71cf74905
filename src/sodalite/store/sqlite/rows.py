"""What the SQLite store's operations share: its catalogue of named statements (``queries.sql``),
the statements composed per call (a claim's filters), rows to records and back, the counters'
deltas, appends and entity records."""

from __future__ import annotations

import json
import sqlite3
import string
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store import sql_files
from sodalite.store.port import (
    SUBSCRIPTION_KIND,
    Claim,
    EntityRecord,
    PartitionRef,
    Settle,
    Settled,
    StoredMessage,
    encode_properties,
    numbering_base,
    split_rules,
)

SQL: Final = sql_files.catalogue(sql_files.read(__package__ or "sodalite.store.sqlite", "queries.sql"))

INT64_MAX: Final = 2**63 - 1
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ASCII_FOLD: Final = _ASCII_LOWER
# The ids a batch's ClaimMessageIds took: (entity as NOCASE folds it, partition, message id) -> claim.
Claims = dict[tuple[str, int, str], uuid.UUID]
# Settlements of at most this many items that are all completions take the one-statement path.
COMPLETE_ONE_BY_ONE: Final = 8

# Fragments of the statements composed per call.
MESSAGE_COLUMNS: Final = (
    "sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, "
    "expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, "
    "annotation_count, tail"
)
STORED_COLUMNS: Final = f"{MESSAGE_COLUMNS}, lock_token, locked_until, lock_owner"
_NOT_LOCKED: Final = "(locked_until IS NULL OR locked_until <= ?)"  # locked_until is NULL iff lock_token is
_NOT_EXPIRED: Final = "(expires_at IS NULL OR expires_at > ?)"


def describe(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} [{name}]" if name else f"{exc}"


def is_full(exc: BaseException) -> bool:
    """SQLITE_FULL (or an I/O error for want of space): the disk, or its quota, is full."""
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    return (isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in text \
        or "No space left" in text


def message_row(entity: str, partition: int, m: MessageRecord, number: int | None = None) -> tuple[object, ...]:
    return (
        entity,
        partition,
        m.sequence_number if number is None else number,
        m.enqueued_time,
        m.message_id,
        m.session_id,
        m.partition_key,
        m.time_to_live,
        m.expires_at,
        m.scheduled_enqueue_time,
        m.delivery_count,
        int(m.state),
        None if m.durable is None else int(m.durable),
        m.priority,
        m.annotations,
        m.annotation_count,
        m.tail,
    )


def message_from_row(row: tuple[Any, ...]) -> MessageRecord:
    (seq, enqueued, message_id, session_id, partition_key, ttl, expires_at, scheduled,
     delivery_count, state, durable, priority, annotations, annotation_count, tail) = row  # fmt: skip
    return MessageRecord(
        sequence_number=seq,
        enqueued_time=enqueued,
        message_id=message_id,
        session_id=session_id,
        partition_key=partition_key,
        time_to_live=ttl,
        expires_at=expires_at,
        scheduled_enqueue_time=scheduled,
        delivery_count=delivery_count,
        state=MessageState(state),
        durable=None if durable is None else bool(durable),
        priority=priority,
        annotations=bytes(annotations),
        annotation_count=annotation_count,
        tail=bytes(tail),
    )



def claim_statement(op: Claim) -> tuple[str, tuple[object, ...]]:
    """One UPDATE .. FROM .. RETURNING: pick the rows in order (bounded by LIMIT), number them, and
    give the i-th the i-th token (the tokens travel as one blob of 16-byte slices)."""
    where = f"entity = ?1 AND partition = ?2 AND state = ?3 AND {_NOT_LOCKED.replace('?', '?4')} " \
            f"AND {_NOT_EXPIRED.replace('?', '?4')}"
    params: list[object] = [op.ref.entity, op.ref.partition, int(op.state), op.now, len(op.tokens),
                         b"".join(t.bytes for t in op.tokens), op.locked_until, op.owner]
    if op.session_id is not None:
        params.append(op.session_id)
        where += f" AND session_id = ?{len(params)}"
    if op.sequence_numbers is not None:
        params.append(json.dumps(list(op.sequence_numbers)))
        where += f" AND sequence_number IN (SELECT value FROM json_each(?{len(params)}))"
    sql = (
        f"WITH cand AS (SELECT sequence_number FROM messages WHERE {where} ORDER BY sequence_number LIMIT ?5), "
        "picked AS (SELECT sequence_number AS seq, row_number() OVER (ORDER BY sequence_number) AS rn FROM cand) "
        "UPDATE messages SET lock_token = substr(?6, (picked.rn - 1) * 16 + 1, 16), locked_until = ?7, "
        "lock_owner = ?8, delivery_count = delivery_count + 1 "
        "FROM picked WHERE messages.entity = ?1 AND messages.partition = ?2 AND messages.sequence_number = picked.seq "
        f"RETURNING {STORED_COLUMNS}"
    )
    return sql, tuple(params)


def stored_from_row(row: tuple[Any, ...]) -> StoredMessage:
    record = message_from_row(row[:15])
    token, until, owner = row[15:]
    return StoredMessage(record, None if token is None else uuid.UUID(bytes=bytes(token)), until, owner)


class Counts:
    """Changes to one partition's counters, written in one statement (:meth:`write`)."""

    __slots__ = ("by_state", "size")

    def __init__(self) -> None:
        self.by_state = [0, 0, 0]  # indexed by MessageState: active, deferred, scheduled
        self.size = 0

    def add(self, state: int, size: int, sign: int = 1) -> None:
        self.by_state[state] += sign
        self.size += sign * size

    def move(self, old_state: int, new_state: int) -> None:
        self.by_state[old_state] -= 1
        self.by_state[new_state] += 1

    def write(self, conn: sqlite3.Connection, ref: PartitionRef) -> None:
        active, deferred, scheduled = self.by_state
        if active or deferred or scheduled or self.size:
            conn.execute(SQL["bump_counters"], (ref.entity, ref.partition, active, scheduled, deferred, self.size))


def count_records(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord]) -> None:
    counts = Counts()
    for m in records:
        counts.add(int(m.state), m.size)
    counts.write(conn, ref)


def delete_counted(conn: sqlite3.Connection, ref: PartitionRef, numbers: Sequence[int]) -> None:
    """Delete rows by number (one statement) and take them off the counters."""
    rows = conn.execute(SQL["delete_returning"], (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    counts = Counts()
    for state, size in rows:
        counts.add(state, size, -1)
    counts.write(conn, ref)


def append(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord],
            numbered_by: PartitionRef | None = None) -> list[int]:
    """Insert records with the next numbers of the partition, counted; the numbers, in order. With
    ``numbered_by``, numbers above both partitions' counters, both raised to the last of them: they
    take nothing either partition holds or gave."""
    if not records:
        return []
    counter = ref if numbered_by is None else numbered_by
    if numbered_by is not None:
        row = conn.execute(SQL["select_high_water_mark"], (ref.entity, ref.partition)).fetchone()
        if row is not None and row[0]:
            conn.execute(SQL["raise_high_water_mark"], (numbered_by.entity, numbered_by.partition, row[0]))
    (last,) = conn.execute(SQL["take_numbers"], (counter.entity, counter.partition, len(records),
                                           numbering_base(counter))).fetchone()
    first = last - len(records) + 1
    numbers = list(range(first, last + 1))
    if numbered_by is not None:
        conn.execute(SQL["raise_high_water_mark"], (ref.entity, ref.partition, last))
    conn.executemany(SQL["insert_message"], [
        message_row(ref.entity, ref.partition, m, n) for n, m in zip(numbers, records, strict=True)
    ])
    count_records(conn, ref, records)
    return numbers


def append_kept(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord]) -> list[int]:
    """Insert dead letters kept in their dead-letter partition under their own numbers, counted; one
    the partition holds already (numbered there by an earlier release) gets a number above its
    counter, its base and every number of ``records``, in order. The counter becomes the greatest
    number stored. The numbers, in order."""
    if not records:
        return []
    own = [m.sequence_number for m in records]
    taken = {n for (n,) in conn.execute(SQL["select_numbers_held"], (ref.entity, ref.partition, json.dumps(own)))}
    row = conn.execute(SQL["select_high_water_mark"], (ref.entity, ref.partition)).fetchone()
    above = max([0 if row is None else row[0], numbering_base(ref), *own])
    numbers = []
    for n in own:
        if n in taken:
            above += 1
            n = above
        numbers.append(n)
    conn.execute(SQL["raise_high_water_mark"], (ref.entity, ref.partition, max(numbers)))
    conn.executemany(SQL["insert_message"], [message_row(ref.entity, ref.partition, m, n)
                                       for m, n in zip(records, numbers, strict=True)])
    count_records(conn, ref, records)
    return numbers


def select_locks(conn: sqlite3.Connection, ref: PartitionRef,
                  numbers: Sequence[int]) -> dict[int, tuple[bytes | None, int | None, int, int, int]]:
    """Per existing number: (token bytes, locked_until, state, annotations length, tail length)."""
    rows = conn.execute(SQL["select_locks"], (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    return {n: (None if token is None else bytes(token), until, state, annotations, tail)
            for n, token, until, state, annotations, tail in rows}


def complete_locked(conn: sqlite3.Connection, op: Settle) -> Settled:
    """A Settle of only completions (the common case: one message a receiver completes): per item a
    read of the row under the item's unexpired lock and, if found, its delete by key; then the
    counters. Two statements for one item instead of the general path's four, with the same outcome
    as its read of the locks and delete by number (a second item for the same number finds no row)."""
    ref = op.ref
    counts = Counts()
    applied: list[bool] = []
    for item in op.items:
        key = (ref.entity, ref.partition, item.sequence_number)
        row = conn.execute(SQL["locked_row"], (*key, item.lock_token.bytes, op.now)).fetchone()
        applied.append(row is not None)
        if row is not None:
            conn.execute(SQL["settle_complete"], key)
            counts.add(row[0], row[1], -1)
    counts.write(conn, ref)
    return Settled(tuple(applied))


def select_rows(conn: sqlite3.Connection, ref: PartitionRef,
                 numbers: Sequence[int]) -> dict[int, StoredMessage]:
    rows = conn.execute(SQL["fetch"], (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    return {r[0]: stored_from_row(r) for r in rows}


def replaced(record: MessageRecord, annotations: bytes | None, annotation_count: int,
              tail: bytes | None) -> MessageRecord:
    """The record with a settle or move item's replacements (each when not None)."""
    if annotations is not None:
        record = replace(record, annotations=annotations, annotation_count=annotation_count)
    if tail is not None:
        record = replace(record, tail=tail)
    return record


def claim_key(ref: PartitionRef, message_id: str) -> tuple[str, int, str]:
    return (ref.entity.translate(_ASCII_FOLD), ref.partition, message_id)



def fold(path: str) -> str:
    """A path as NOCASE compares it: ASCII letters lower-cased."""
    return path.translate(_ASCII_LOWER)


def move_rules_out_of_records(conn: sqlite3.Connection) -> None:
    """Schema 6: each subscription record's ``"Rules"`` become rule rows; the record keeps the rest."""
    rows = conn.execute(SQL["select_subscription_records"], (SUBSCRIPTION_KIND,)).fetchall()
    for path, kind, text in rows:
        record = EntityRecord(path, kind, json.loads(text))
        properties, rules = split_rules(record)
        if rules is None:
            continue
        put_entity(conn, EntityRecord(path, kind, properties))
        put_rules(conn, record, rules)


def put_rules(conn: sqlite3.Connection, entity: EntityRecord, rules: list[tuple[str, dict[str, object]]]) -> None:
    conn.execute(SQL["delete_entity_rules"], (entity.path,))
    conn.executemany(SQL["put_rule_at"], [(entity.path, name, position, encode_properties(entity, rule))
                                    for position, (name, rule) in enumerate(rules, start=1)])


def put_entity(conn: sqlite3.Connection, entity: EntityRecord) -> None:
    properties, rules = split_rules(entity)
    conn.execute(SQL["put_entity"], (entity.path, entity.kind, encode_properties(entity, properties)))
    if rules is not None:
        put_rules(conn, entity, rules)




