"""The SQLite messaging store: one database file, WAL journal, one transaction per ``apply``.

Durability: the connection runs in WAL mode with ``PRAGMA synchronous=FULL`` unless the operator
relaxes it to ``NORMAL``. With FULL, ``apply`` returns only after the WAL has been fsynced, so
every batch it acknowledged survives a crash of the process, the OS or the power (provided the
disk honours flush requests). With NORMAL a crash of the OS or the power (not of the process) may
lose the most recent batches, but never corrupts the file. EXTRA is accepted too; OFF is not.

Group commit happens above the port: the caller hands many operations to one ``apply`` call,
which is one ``BEGIN IMMEDIATE`` .. ``COMMIT`` and so one fsync.

Every failure of SQLite, and every use after :meth:`SqliteStore.close`, raises
:class:`~sodalite.errors.StoreUnavailable`; no ``sqlite3`` type or exception crosses the port (the
original exception is kept as ``__cause__`` for the log). When ``COMMIT`` itself fails, the
outcome of the batch is unknown (the fsync may have failed after the WAL was written); the store
then closes itself, and the caller must open a new ``SqliteStore`` on the file, which recovers
whatever the disk really holds, and rebuild its partitions from it.

Disk full: a batch that fails for lack of space (``SQLITE_FULL``) was rolled back by SQLite, so
its outcome is known (nothing applied) and the connection stays usable. The store then deletes its
reserve file (``<db>.reserve``, kept preallocated beside the database) so that receives, which
still write (a delete, a delivery count), find room, and raises :class:`~sodalite.errors.StoreFull`.
:meth:`SqliteStore.maintain` (called between batches) checkpoints the WAL and truncates it, returns
freed pages to the file system (incremental auto-vacuum on files it creates), and once the disk
has room for the reserve again recreates it and reports the store as having room.

Entity paths compare case-insensitively (SQLite ``NOCASE``: ASCII letters only) in every table,
so ``Queue1`` and ``queue1`` name the same entity and the same partitions. Message ids of the
duplicate-detection history compare exactly.

Schema versions (``PRAGMA user_version``): 1 had ``messages``, ``partitions`` and ``entities``;
2 adds ``duplicate_history``; 3 adds ``session_states``; 4 adds ``move_keys``; 5 (store port v2)
adds the lock columns of ``messages`` (``lock_token``, ``locked_until``, ``lock_owner``; a lock is
cleared by setting all three NULL, so ``locked_until > now`` alone says "locked"), the counters
of the ``partitions`` row (``active``, ``scheduled``, ``deferred``, ``size_in_bytes``), the
``session_locks`` table, and the indexes of the ready, session and due scans. 6 adds the ``rules`` table: a
subscription's rules are rows of their own (``PutRule``, ``DeleteRule``), no longer a ``"Rules"``
list inside its entity record. ``open`` migrates an older file in place, in one transaction (a
version-4 file gets its counters computed once from its rows; a version-5 file's subscription
records give their rules to the ``rules`` table and keep their properties), and refuses a newer
one.

Store port v2: every operation moves the counters of the partitions it touches by the deltas it
computed, with one upsert per operation and partition in the same transaction (cheaper than row
triggers, measured); deletes are one ``DELETE .. RETURNING`` so the rows' states and sizes are
known. A claim is one ``UPDATE .. FROM .. RETURNING`` whose candidates come from a ``LIMIT``-ed
range scan of the ready (or session) index, the i-th row getting the i-th 16-byte slice of the
tokens passed as one blob. Settlements read the locks of their rows once and apply each outcome
with ``executemany``. The reads ``counts`` and ``next_due`` are index probes (``counts``: the
counters row and ``min(sequence_number)`` from the primary key).

Not thread-safe: the caller serializes calls (one worker thread per store). The connection is
opened with ``check_same_thread=False`` so that thread need not be the one that created it.
"""

from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import string
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final, assert_never

from sodalite.errors import ConfigurationError, StoreFull, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    SUBSCRIPTION_KIND,
    Activate,
    Activated,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    Done,
    EntityRecord,
    ForgetMessageIds,
    ForgetMoveKeys,
    IdleDeleted,
    IdsClaimed,
    MessageOp,
    Moved,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionCounts,
    PartitionMeta,
    PartitionRef,
    PartitionStats,
    PruneMessageIds,
    Purge,
    Purged,
    PutEntity,
    PutRule,
    PutSessionState,
    RecordActivity,
    RecordOp,
    ReleaseSession,
    RememberMessageIds,
    RememberMoveKeys,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    RuleWritten,
    SessionClaimed,
    Settle,
    Settled,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
    check_all_or_none,
    numbering_base,
    prepare_batch,
    split_rules,
)
from sodalite.store.sqlite import schema

MIN_SQLITE_VERSION: Final = (3, 35, 0)  # UPDATE .. FROM (3.33) and RETURNING (3.35)
SYNCHRONOUS_MODES: Final = ("FULL", "EXTRA", "NORMAL")
_INT64_MAX: Final = 2**63 - 1
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_SYNCHRONOUS_CODES: Final = {"NORMAL": 1, "FULL": 2, "EXTRA": 3}

# Errors that binding or executing a statement may raise besides sqlite3.Error: an int that does
# not fit 64 bits (OverflowError), a str that cannot be encoded as UTF-8 (UnicodeError).
_DRIVER_ERRORS: Final = (sqlite3.Error, OverflowError, UnicodeError)

# New databases get 16 KiB pages. Messages live in a rowid table (the primary key is a separate
# index): measured on 100-message batches, a WITHOUT ROWID table spills every message larger than
# about 1/16 of a page (~1000 bytes at 4 KiB) to its own overflow page, which halves the throughput
# of 1 KiB messages and quadruples their size on disk, and larger pages only move the cliff.
PAGE_SIZE: Final = 16384
# Preallocated beside the database and given up when the disk fills, so receives still find room.
RESERVE_BYTES: Final = 4 * 1024 * 1024
FREE_MARGIN_BYTES: Final = 4 * 1024 * 1024  # room needed beyond the reserve before sends resume
WAL_AUTOCHECKPOINT_PAGES: Final = 256  # 4 MiB of 16 KiB pages (SQLite's default is 1000)
VACUUM_PAGES_PER_CALL: Final = 2048  # 32 MiB returned to the file system per maintain() at most

# Added after the subscription's other rules, only when no rule of that name exists.
_ADD_RULE: Final = (
    "INSERT OR IGNORE INTO rules (subscription, name, position, rule) "
    "SELECT ?1, ?2, coalesce(max(position), 0) + 1, ?3 FROM rules WHERE subscription = ?1"
)
_REPLACE_RULE: Final = "UPDATE rules SET name = ?2, rule = ?3 WHERE subscription = ?1 AND name = ?2"
_DELETE_RULE: Final = "DELETE FROM rules WHERE subscription = ? AND name = ?"
_PUT_RULE_AT: Final = "INSERT OR REPLACE INTO rules (subscription, name, position, rule) VALUES (?, ?, ?, ?)"
_SELECT_RULES: Final = "SELECT subscription, rule FROM rules ORDER BY subscription, position, name"
_RECORD_ACTIVITY: Final = (
    "INSERT INTO activity (entity, node, last_activity, receivers, refreshed_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (entity, node) DO UPDATE SET last_activity = max(last_activity, excluded.last_activity), "
    "receivers = excluded.receivers, refreshed_at = excluded.refreshed_at"
)
_ACTIVITY_BUSY: Final = (
    "SELECT 1 FROM activity WHERE entity = ? AND (last_activity > ? OR (receivers > 0 AND refreshed_at > ?)) "
    "LIMIT 1"
)
# The tables that hold what is stored per partition: DeleteEntity empties them for the entity.
_PARTITION_TABLES: Final = (
    "messages", "partitions", "duplicate_history", "session_states", "move_keys", "session_locks"
)

_MESSAGE_COLUMNS: Final = (
    "sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, "
    "expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, "
    "annotation_count, tail"
)
_INSERT_MESSAGE: Final = (
    f"INSERT INTO messages (entity, partition, {_MESSAGE_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_RAISE_HIGH_WATER_MARK: Final = (
    "INSERT INTO partitions (entity, partition, last_sequence_number) VALUES (?, ?, ?) "
    "ON CONFLICT (entity, partition) DO UPDATE "
    "SET last_sequence_number = max(last_sequence_number, excluded.last_sequence_number)"
)
_PUT_ENTITY: Final = "INSERT OR REPLACE INTO entities (path, kind, properties) VALUES (?, ?, ?)"
_REMEMBER_ID: Final = (
    "INSERT INTO duplicate_history (entity, partition, message_id, seen_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (entity, partition, message_id) DO UPDATE SET seen_at = excluded.seen_at"
)
_FORGET_ID: Final = "DELETE FROM duplicate_history WHERE entity = ? AND partition = ? AND message_id = ?"
_FORGET_ID_SEEN_BEFORE: Final = _FORGET_ID + " AND seen_at < ?"
_PRUNE_IDS: Final = "DELETE FROM duplicate_history WHERE entity = ? AND partition = ? AND seen_at < ?"
_SEEN_AT: Final = "SELECT seen_at FROM duplicate_history WHERE entity = ? AND partition = ? AND message_id = ?"
_ASCII_FOLD: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# The ids a batch's ClaimMessageIds took: (entity as NOCASE folds it, partition, message id) -> claim.
_Claims = dict[tuple[str, int, str], uuid.UUID]
_PUT_SESSION_STATE: Final = (
    "INSERT INTO session_states (entity, partition, session_id, state, updated_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (entity, partition, session_id) DO UPDATE SET state = excluded.state, "
    "updated_at = excluded.updated_at"
)
_REMEMBER_MOVE_KEY: Final = "INSERT OR IGNORE INTO move_keys (entity, partition, move_key) VALUES (?, ?, ?)"
_FORGET_MOVE_KEY: Final = "DELETE FROM move_keys WHERE entity = ? AND partition = ? AND move_key = ?"
_SELECT_MOVE_KEYS: Final = "SELECT move_key FROM move_keys WHERE entity = ? AND partition = ? ORDER BY move_key"
_CLEAR_SESSION_STATE: Final = "DELETE FROM session_states WHERE entity = ? AND partition = ? AND session_id = ?"
_SELECT_SESSION_STATES: Final = (
    "SELECT session_id, state, updated_at FROM session_states WHERE entity = ? AND partition = ? "
    "ORDER BY session_id"
)
# An entity's own partitions, then its sub-queues': entity >= '<path>/$' AND entity < '<path>/%'
# (under NOCASE) is exactly "starts with <path>/$", and the range uses the primary-key index.
_DELETE_ENTITY_ROWS: Final = {
    table: (
        f"DELETE FROM {table} WHERE entity = ?",
        f"DELETE FROM {table} WHERE entity >= ? AND entity < ?",
    )
    for table in _PARTITION_TABLES
}
_SELECT_HIGH_WATER_MARK: Final = (
    "SELECT last_sequence_number FROM partitions WHERE entity = ? AND partition = ?"
)
_SELECT_HISTORY: Final = (
    "SELECT message_id, seen_at FROM duplicate_history WHERE entity = ? AND partition = ? ORDER BY seen_at, message_id"
)
_SELECT_STATS: Final = (
    "SELECT count(*), coalesce(sum(length(annotations) + length(tail)), 0) "
    "FROM messages WHERE entity = ? AND partition = ?"
)
_SELECT_ENTITIES: Final = "SELECT path, kind, properties FROM entities ORDER BY path"


def _describe(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} [{name}]" if name else f"{exc}"


def _is_full(exc: BaseException) -> bool:
    """SQLITE_FULL (or an I/O error for want of space): the disk, or its quota, is full."""
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc)
    return (isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in text \
        or "No space left" in text


def _message_row(entity: str, partition: int, m: MessageRecord, number: int | None = None) -> tuple[Any, ...]:
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


def _message_from_row(row: tuple[Any, ...]) -> MessageRecord:
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


# ---- version 2 -------------------------------------------------------------------------------------------

_STORED_COLUMNS: Final = f"{_MESSAGE_COLUMNS}, lock_token, locked_until, lock_owner"
_KEY: Final = "entity = ? AND partition = ?"
_IN_JSON: Final = "sequence_number IN (SELECT value FROM json_each(?))"
_FETCH: Final = f"SELECT {_STORED_COLUMNS} FROM messages WHERE {_KEY} AND {_IN_JSON} ORDER BY sequence_number"
_NOT_LOCKED: Final = "(locked_until IS NULL OR locked_until <= ?)"  # locked_until is NULL iff lock_token is
_NOT_EXPIRED: Final = "(expires_at IS NULL OR expires_at > ?)"
# Assign the next numbers: the counter row goes up by n and says where it ended. Partition i's numbers
# start after i << PARTITION_SHIFT (?4), so a number's upper bits name its partition (port.py).
_TAKE_NUMBERS: Final = (
    "INSERT INTO partitions (entity, partition, last_sequence_number) VALUES (?1, ?2, ?4 + ?3) "
    "ON CONFLICT (entity, partition) DO UPDATE "
    "SET last_sequence_number = max(last_sequence_number, ?4) + ?3 "
    "RETURNING last_sequence_number"
)
_CLEAR_LOCK: Final = "lock_token = NULL, locked_until = NULL, lock_owner = NULL"
_SETTLE: Final = {
    Outcome.COMPLETE: f"DELETE FROM messages WHERE {_KEY} AND sequence_number = ?",
    Outcome.ABANDON: f"UPDATE messages SET {_CLEAR_LOCK} WHERE {_KEY} AND sequence_number = ?",
    Outcome.RELEASE: (f"UPDATE messages SET {_CLEAR_LOCK}, delivery_count = max(delivery_count - 1, 0) "
                      f"WHERE {_KEY} AND sequence_number = ?"),
    Outcome.DEFER: (f"UPDATE messages SET {_CLEAR_LOCK}, state = {int(MessageState.DEFERRED):d}, "
                    f"delivery_count = max(delivery_count - 1, 0) WHERE {_KEY} AND sequence_number = ?"),
    Outcome.DEAD_LETTER: f"DELETE FROM messages WHERE {_KEY} AND sequence_number = ?",
}
# A settlement's replacements, each kept as it is when NULL (annotations and their count go together).
_SET_PARTS: Final = (
    "UPDATE messages SET annotations = coalesce(?1, annotations), annotation_count = coalesce(?2, annotation_count), "
    "tail = coalesce(?3, tail) WHERE entity = ?4 AND partition = ?5 AND sequence_number = ?6"
)
# What a settlement needs to know of each row: its lock, and its state and sizes for the counters
# (length() of a blob is read from the record header, without the blob).
_SELECT_LOCKS: Final = (
    "SELECT sequence_number, lock_token, locked_until, state, length(annotations), length(tail) "
    f"FROM messages WHERE {_KEY} AND {_IN_JSON}"
)
# A completion of a row this lock still holds: its state and size (for the counters) only if the
# token matches and the lock has not lapsed, then the delete by key. (Not one DELETE .. RETURNING:
# SQLite opens, unlinks and closes a temporary file for that every time, measured.)
_LOCKED_ROW: Final = (
    "SELECT state, length(annotations) + length(tail) FROM messages WHERE entity = ?1 AND partition = ?2 "
    "AND sequence_number = ?3 AND lock_token = ?4 AND locked_until > ?5"
)
# Settlements of at most this many items that are all completions take the one-statement path.
COMPLETE_ONE_BY_ONE: Final = 8
_DELETE_RETURNING: Final = (
    f"DELETE FROM messages WHERE {_KEY} AND {_IN_JSON} RETURNING state, length(annotations) + length(tail)"
)
# The counters row moves by deltas the operation computed, once per operation and partition.
_BUMP_COUNTERS: Final = (
    "INSERT INTO partitions (entity, partition, last_sequence_number, active, scheduled, deferred, size_in_bytes) "
    "VALUES (?, ?, 0, ?, ?, ?, ?) ON CONFLICT (entity, partition) DO UPDATE SET "
    "active = active + excluded.active, scheduled = scheduled + excluded.scheduled, "
    "deferred = deferred + excluded.deferred, size_in_bytes = size_in_bytes + excluded.size_in_bytes"
)
_RENEW_LOCK: Final = f"UPDATE messages SET locked_until = ? WHERE {_KEY} AND sequence_number = ?"
_ACTIVATE: Final = (
    f"WITH picked AS (SELECT sequence_number FROM messages WHERE {_KEY} AND state = {int(MessageState.SCHEDULED):d} "
    "AND scheduled_enqueue_time <= ? ORDER BY scheduled_enqueue_time, sequence_number LIMIT ?) "
    f"UPDATE messages SET state = {int(MessageState.ACTIVE):d} "
    f"WHERE {_KEY} AND sequence_number IN picked RETURNING {_STORED_COLUMNS}"
)
_PURGE: Final = (
    f"DELETE FROM messages WHERE {_KEY} AND sequence_number <= ? AND {_NOT_LOCKED} "
    "RETURNING state, length(annotations) + length(tail)"
)
_TAKE_SESSION: Final = (
    "INSERT INTO session_locks (entity, partition, session_id, token, locked_until, owner) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entity, partition, session_id) DO UPDATE "
    "SET token = excluded.token, locked_until = excluded.locked_until, owner = excluded.owner "
    "WHERE session_locks.locked_until <= ? RETURNING session_id"
)
_NEXT_FREE_SESSION: Final = (
    f"SELECT m.session_id FROM messages m WHERE m.entity = ?2 AND m.partition = ?3 "
    f"AND m.state = {int(MessageState.ACTIVE):d} AND m.session_id IS NOT NULL "
    "AND (m.locked_until IS NULL OR m.locked_until <= ?1) AND (m.expires_at IS NULL OR m.expires_at > ?1) "
    "AND NOT EXISTS (SELECT 1 FROM session_locks s WHERE s.entity = m.entity AND s.partition = m.partition "
    "AND s.session_id = m.session_id AND s.locked_until > ?1) ORDER BY m.sequence_number LIMIT 1"
)
_RENEW_SESSION: Final = (
    f"UPDATE session_locks SET locked_until = ? WHERE {_KEY} AND session_id = ? AND token = ? AND locked_until > ?"
)
_RELEASE_SESSION: Final = f"DELETE FROM session_locks WHERE {_KEY} AND session_id = ? AND token = ?"
_SELECT_COUNTS: Final = (
    "SELECT coalesce(p.active, 0), coalesce(p.scheduled, 0), coalesce(p.deferred, 0), "
    "coalesce(p.size_in_bytes, 0), coalesce(p.last_sequence_number, 0), "
    "(SELECT min(sequence_number) FROM messages WHERE entity = ?1 AND partition = ?2) "
    "FROM (SELECT 1) LEFT JOIN partitions p ON p.entity = ?1 AND p.partition = ?2"
)
_SELECT_COUNTS_ONLY: Final = (  # counts_many: without the first number's index probe
    "SELECT coalesce(p.active, 0), coalesce(p.scheduled, 0), coalesce(p.deferred, 0), "
    "coalesce(p.size_in_bytes, 0), coalesce(p.last_sequence_number, 0) "
    "FROM (SELECT 1) LEFT JOIN partitions p ON p.entity = ?1 AND p.partition = ?2"
)
# Each branch is one index probe: scheduled (partial index), the first expiry of an unlocked row
# (the expiry index covers the lock test, and the walk skips only rows locked now), the first lock
# to lapse, the first session lock to lapse.
_SELECT_NEXT_DUE: Final = (
    "SELECT min(t) FROM ("
    f"SELECT min(scheduled_enqueue_time) AS t FROM messages WHERE entity = ?1 AND partition = ?2 "
    f"AND state = {int(MessageState.SCHEDULED):d} "
    "UNION ALL SELECT (SELECT expires_at FROM messages WHERE entity = ?1 AND partition = ?2 "
    "AND expires_at IS NOT NULL AND (locked_until IS NULL OR locked_until <= ?3) ORDER BY expires_at LIMIT 1) "
    "UNION ALL SELECT min(locked_until) FROM messages WHERE entity = ?1 AND partition = ?2 AND locked_until > ?3 "
    "UNION ALL SELECT min(locked_until) FROM session_locks WHERE entity = ?1 AND partition = ?2 "
    "AND locked_until > ?3)"
)


def _claim_statement(op: Claim) -> tuple[str, tuple[Any, ...]]:
    """One UPDATE .. FROM .. RETURNING: pick the rows in order (bounded by LIMIT), number them, and
    give the i-th the i-th token (the tokens travel as one blob of 16-byte slices)."""
    where = f"entity = ?1 AND partition = ?2 AND state = ?3 AND {_NOT_LOCKED.replace('?', '?4')} " \
            f"AND {_NOT_EXPIRED.replace('?', '?4')}"
    params: list[Any] = [op.ref.entity, op.ref.partition, int(op.state), op.now, len(op.tokens),
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
        f"RETURNING {_STORED_COLUMNS}"
    )
    return sql, tuple(params)


def _stored_from_row(row: tuple[Any, ...]) -> StoredMessage:
    record = _message_from_row(row[:15])
    token, until, owner = row[15:]
    return StoredMessage(record, None if token is None else uuid.UUID(bytes=bytes(token)), until, owner)


class _Counts:
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
            conn.execute(_BUMP_COUNTERS, (ref.entity, ref.partition, active, scheduled, deferred, self.size))


def _count_records(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord]) -> None:
    counts = _Counts()
    for m in records:
        counts.add(int(m.state), m.size)
    counts.write(conn, ref)


def _delete_counted(conn: sqlite3.Connection, ref: PartitionRef, numbers: Sequence[int]) -> None:
    """Delete rows by number (one statement) and take them off the counters."""
    rows = conn.execute(_DELETE_RETURNING, (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    counts = _Counts()
    for state, size in rows:
        counts.add(state, size, -1)
    counts.write(conn, ref)


def _append(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord],
            numbered_by: PartitionRef | None = None) -> list[int]:
    """Insert records with the next numbers of the partition, counted; the numbers, in order. With
    ``numbered_by``, numbers above both partitions' counters, both raised to the last of them: they
    take nothing either partition holds or gave."""
    if not records:
        return []
    counter = ref if numbered_by is None else numbered_by
    if numbered_by is not None:
        row = conn.execute(_SELECT_HIGH_WATER_MARK, (ref.entity, ref.partition)).fetchone()
        if row is not None and row[0]:
            conn.execute(_RAISE_HIGH_WATER_MARK, (numbered_by.entity, numbered_by.partition, row[0]))
    (last,) = conn.execute(_TAKE_NUMBERS, (counter.entity, counter.partition, len(records),
                                           numbering_base(counter))).fetchone()
    first = last - len(records) + 1
    numbers = list(range(first, last + 1))
    if numbered_by is not None:
        conn.execute(_RAISE_HIGH_WATER_MARK, (ref.entity, ref.partition, last))
    conn.executemany(_INSERT_MESSAGE, [
        _message_row(ref.entity, ref.partition, m, n) for n, m in zip(numbers, records, strict=True)
    ])
    _count_records(conn, ref, records)
    return numbers


def _append_kept(conn: sqlite3.Connection, ref: PartitionRef, records: Sequence[MessageRecord]) -> list[int]:
    """Insert dead letters kept in their dead-letter partition under their own numbers, counted; one
    the partition holds already (numbered there by an earlier release) gets a number above its
    counter, its base and every number of ``records``, in order. The counter becomes the greatest
    number stored. The numbers, in order."""
    if not records:
        return []
    own = [m.sequence_number for m in records]
    taken = {n for (n,) in conn.execute(
        f"SELECT sequence_number FROM messages WHERE {_KEY} AND {_IN_JSON}",
        (ref.entity, ref.partition, json.dumps(own))).fetchall()}
    row = conn.execute(_SELECT_HIGH_WATER_MARK, (ref.entity, ref.partition)).fetchone()
    above = max([0 if row is None else row[0], numbering_base(ref), *own])
    numbers = []
    for n in own:
        if n in taken:
            above += 1
            n = above
        numbers.append(n)
    conn.execute(_RAISE_HIGH_WATER_MARK, (ref.entity, ref.partition, max(numbers)))
    conn.executemany(_INSERT_MESSAGE, [_message_row(ref.entity, ref.partition, m, n)
                                       for m, n in zip(records, numbers, strict=True)])
    _count_records(conn, ref, records)
    return numbers


def _select_locks(conn: sqlite3.Connection, ref: PartitionRef,
                  numbers: Sequence[int]) -> dict[int, tuple[Any, int | None, int, int, int]]:
    """Per existing number: (token bytes, locked_until, state, annotations length, tail length)."""
    rows = conn.execute(_SELECT_LOCKS, (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    return {n: (None if token is None else bytes(token), until, state, annotations, tail)
            for n, token, until, state, annotations, tail in rows}


def _complete_locked(conn: sqlite3.Connection, op: Settle) -> Settled:
    """A Settle of only completions (the common case: one message a receiver completes): per item a
    read of the row under the item's unexpired lock and, if found, its delete by key; then the
    counters. Two statements for one item instead of the general path's four, with the same outcome
    as its read of the locks and delete by number (a second item for the same number finds no row)."""
    ref = op.ref
    counts = _Counts()
    applied: list[bool] = []
    for item in op.items:
        key = (ref.entity, ref.partition, item.sequence_number)
        row = conn.execute(_LOCKED_ROW, (*key, item.lock_token.bytes, op.now)).fetchone()
        applied.append(row is not None)
        if row is not None:
            conn.execute(_SETTLE[Outcome.COMPLETE], key)
            counts.add(row[0], row[1], -1)
    counts.write(conn, ref)
    return Settled(tuple(applied))


def _select_rows(conn: sqlite3.Connection, ref: PartitionRef,
                 numbers: Sequence[int]) -> dict[int, StoredMessage]:
    rows = conn.execute(_FETCH, (ref.entity, ref.partition, json.dumps(list(numbers)))).fetchall()
    return {r[0]: _stored_from_row(r) for r in rows}


def _replaced(record: MessageRecord, annotations: bytes | None, annotation_count: int,
              tail: bytes | None) -> MessageRecord:
    """The record with a settle or move item's replacements (each when not None)."""
    if annotations is not None:
        record = replace(record, annotations=annotations, annotation_count=annotation_count)
    if tail is not None:
        record = replace(record, tail=tail)
    return record


def _delete_idle(conn: sqlite3.Connection, op: DeleteIdleEntity) -> IdleDeleted:
    if conn.execute(_ACTIVITY_BUSY, (op.path, op.active_after, op.live_after)).fetchone() is not None:
        return IdleDeleted(False)
    if conn.execute("DELETE FROM entities WHERE path = ?", (op.path,)).rowcount != 1:
        return IdleDeleted(False)
    conn.execute("DELETE FROM activity WHERE entity = ?", (op.path,))
    return IdleDeleted(True)


def _claim_key(ref: PartitionRef, message_id: str) -> tuple[str, int, str]:
    return (ref.entity.translate(_ASCII_FOLD), ref.partition, message_id)


def _apply_message_op(conn: sqlite3.Connection, op: MessageOp, claims: _Claims) -> OpResult:
    ref = op.ref
    key = (ref.entity, ref.partition)
    if isinstance(op, Append):
        gate = op.gate
        if gate is None:
            return Appended(tuple(_append(conn, ref, op.messages, op.numbered_by)))
        passes = [gate_id is None or claims.get(_claim_key(gate.ref, gate_id)) == gate.claim
                  for gate_id in gate.message_ids]
        numbers = iter(_append(conn, ref, [m for m, ok in zip(op.messages, passes, strict=True) if ok],
                               op.numbered_by))
        return Appended(tuple(next(numbers) if ok else 0 for ok in passes))
    if isinstance(op, PruneMessageIds):
        conn.execute(_PRUNE_IDS, (*key, op.seen_before))
        return Done()
    if isinstance(op, ClaimMessageIds):
        fresh: list[bool] = []
        for message_id in op.message_ids:
            row = conn.execute(_SEEN_AT, (*key, message_id)).fetchone()
            if row is not None and row[0] >= op.now - op.window_ms:
                fresh.append(False)
                continue
            conn.execute(_REMEMBER_ID, (*key, message_id, op.now))
            claims[_claim_key(ref, message_id)] = op.claim
            fresh.append(True)
        return IdsClaimed(tuple(fresh))
    if isinstance(op, Claim):
        if not op.tokens:
            return Claimed(())
        rows = conn.execute(*_claim_statement(op)).fetchall()
        return Claimed(tuple(sorted((_stored_from_row(r) for r in rows), key=lambda s: s.record.sequence_number)))
    if isinstance(op, Settle) and len(op.items) <= COMPLETE_ONE_BY_ONE \
            and all(item.outcome is Outcome.COMPLETE for item in op.items):
        return _complete_locked(conn, op)
    if isinstance(op, Settle):
        locks = _select_locks(conn, ref, [item.sequence_number for item in op.items])
        applied: list[bool] = []
        by_outcome: dict[Outcome, list[tuple[Any, ...]]] = {}
        annotate: list[tuple[Any, ...]] = []
        dead: list[SettleItem] = []
        counts = _Counts()
        for item in op.items:
            n = item.sequence_number
            token, until, state, annotations_size, tail_size = locks.get(n, (None, None, 0, 0, 0))
            ok = token == item.lock_token.bytes and until is not None and until > op.now
            applied.append(ok)
            if not ok:
                continue
            del locks[n]  # settled: a second item for it finds no lock
            by_outcome.setdefault(item.outcome, []).append((*key, n))
            if item.outcome in (Outcome.COMPLETE, Outcome.DEAD_LETTER):
                # the row leaves as it is; a dead-lettered copy takes the replacements (below)
                counts.add(state, annotations_size + tail_size, -1)
            elif item.annotations is not None or item.tail is not None:
                annotate.append((item.annotations, None if item.annotations is None else item.annotation_count,
                                 item.tail, *key, n))
                if item.annotations is not None:
                    counts.size += len(item.annotations) - annotations_size
                if item.tail is not None:
                    counts.size += len(item.tail) - tail_size
            if item.outcome is Outcome.DEFER:
                counts.move(state, int(MessageState.DEFERRED))
            if item.outcome is Outcome.DEAD_LETTER:
                dead.append(item)
        conn.executemany(_SET_PARTS, annotate)
        dying = _select_rows(conn, ref, [item.sequence_number for item in dead]) if dead else {}
        for outcome, params in by_outcome.items():
            conn.executemany(_SETTLE[outcome], params)
        counts.write(conn, ref)
        kept: dict[PartitionRef, list[MessageRecord]] = {}
        for item in dead:
            target = op.dead_letter_target(item)
            record = _replaced(dying[item.sequence_number].record, item.annotations, item.annotation_count,
                               item.tail)
            copy = replace(
                record, state=MessageState.ACTIVE, expires_at=item.expires_at,
                enqueued_time=record.enqueued_time if item.enqueued_time is None else item.enqueued_time,
                delivery_count=0 if item.reset_delivery_count
                else max(0, record.delivery_count - 1) if item.give_back_delivery else record.delivery_count)
            if item.keep_sequence_number:
                kept.setdefault(target, []).append(copy)
            else:
                _append(conn, target, [copy])
        for target, copies in kept.items():  # each target's kept numbers together (their numbers decide)
            _append_kept(conn, target, copies)
        return Settled(tuple(applied))
    if isinstance(op, RenewLocks):
        locks = _select_locks(conn, ref, [n for n, _ in op.items])
        renewed: list[bool] = []
        for n, token in op.items:
            held, until, *rest = locks.get(n, (None, None, 0, 0, 0))
            ok = held == token.bytes and until is not None and until > op.now
            renewed.append(ok)
            if ok:
                locks[n] = (held, op.locked_until, *rest)
        conn.executemany(_RENEW_LOCK, [(op.locked_until, *key, n)
                                       for (n, _), ok in zip(op.items, renewed, strict=True) if ok])
        return Renewed(tuple(renewed))
    if isinstance(op, MoveMessages):
        destination = op.destination
        present = _select_rows(conn, ref, [item.sequence_number for item in op.items])
        moved: list[int | None] = []
        leaving: list[MessageRecord] = []
        for move in op.items:
            stored = present.pop(move.sequence_number, None)
            if stored is None or stored.locked_at(op.now):
                moved.append(None)
                continue
            moved.append(move.sequence_number)
            record = _replaced(stored.record, move.annotations, move.annotation_count, move.tail)
            leaving.append(replace(record, state=MessageState.ACTIVE,
                                   expires_at=move.expires_at if destination is not None else record.expires_at,
                                   enqueued_time=record.enqueued_time if move.enqueued_time is None
                                   else move.enqueued_time,
                                   delivery_count=0 if move.reset_delivery_count else record.delivery_count))
        if leaving:
            _delete_counted(conn, ref, [m.sequence_number for m in leaving])
        if destination is None:
            return Moved(tuple(moved))
        numbers = iter((_append_kept if op.keep_sequence_numbers else _append)(conn, destination, leaving))
        return Moved(tuple(None if n is None else next(numbers) for n in moved))
    if isinstance(op, Activate):
        if op.limit <= 0:
            return Activated(())
        rows = conn.execute(_ACTIVATE, (*key, op.now, op.limit, *key)).fetchall()
        stored_rows = [_stored_from_row(r) for r in rows]
        counts = _Counts()
        for _ in stored_rows:
            counts.move(int(MessageState.SCHEDULED), int(MessageState.ACTIVE))
        counts.write(conn, ref)
        stored_rows.sort(key=lambda s: (s.record.scheduled_enqueue_time or 0, s.record.sequence_number))
        return Activated(tuple(stored_rows))
    if isinstance(op, Purge):
        through = _INT64_MAX if op.through_sequence_number is None else op.through_sequence_number
        counts = _Counts()
        purged = conn.execute(_PURGE, (*key, through, op.now)).fetchall()
        for state, size in purged:
            counts.add(state, size, -1)
        counts.write(conn, ref)
        return Purged(len(purged))
    if isinstance(op, Restore):
        own = [m.sequence_number for m in op.messages]
        held = {n for (n,) in conn.execute(
            f"SELECT sequence_number FROM messages WHERE {_KEY} AND {_IN_JSON}",
            (ref.entity, ref.partition, json.dumps(own))).fetchall()} if own else set()
        back: list[MessageRecord] = []
        restored: list[bool] = []
        for m in op.messages:
            ok = m.sequence_number > 0 and m.sequence_number not in held
            restored.append(ok)
            if ok:
                held.add(m.sequence_number)
                back.append(m)
        if back:
            conn.execute(_RAISE_HIGH_WATER_MARK, (ref.entity, ref.partition, max(m.sequence_number for m in back)))
            conn.executemany(_INSERT_MESSAGE, [_message_row(ref.entity, ref.partition, m) for m in back])
            _count_records(conn, ref, back)
        return Restored(tuple(restored))
    if isinstance(op, CancelScheduled):
        # Under the write transaction (BEGIN IMMEDIATE): nothing changes the rows between the check and the delete.
        asked = list(dict.fromkeys(op.sequence_numbers))
        found = _select_locks(conn, ref, asked)

        def cancellable(n: int) -> bool:
            if n not in found:
                return False
            token, until, state, _, _ = found[n]
            return state == int(MessageState.SCHEDULED) and (token is None or until is None or until <= op.now)

        missing = tuple(n for n in asked if not cancellable(n))
        if not missing and asked:
            _delete_counted(conn, ref, asked)
        return Unscheduled(missing)
    if isinstance(op, ClaimSession):
        session_id = op.session_id
        if session_id is None:
            row = conn.execute(_NEXT_FREE_SESSION, (op.now, *key)).fetchone()
            if row is None:
                return SessionClaimed(None)
            session_id = row[0]
        taken = conn.execute(_TAKE_SESSION, (*key, session_id, op.token.bytes, op.locked_until, op.owner,
                                             op.now)).fetchone()
        return SessionClaimed(session_id if taken is not None else None)
    if isinstance(op, RenewSession):
        cur = conn.execute(_RENEW_SESSION, (op.locked_until, *key, op.session_id, op.token.bytes, op.now))
        return Renewed((cur.rowcount == 1,))
    if isinstance(op, ReleaseSession):
        cur = conn.execute(_RELEASE_SESSION, (*key, op.session_id, op.token.bytes))
        return Renewed((cur.rowcount == 1,))
    assert_never(op)


def _fold(path: str) -> str:
    """A path as NOCASE compares it: ASCII letters lower-cased."""
    return path.translate(_ASCII_LOWER)


def _apply_rule(conn: sqlite3.Connection, op: PutRule | DeleteRule) -> RuleWritten:
    if isinstance(op, DeleteRule):
        cur = conn.execute(_DELETE_RULE, (op.subscription, op.name))
    else:
        rule = _encode_properties(EntityRecord(op.subscription, SUBSCRIPTION_KIND, {}), op.rule)
        cur = conn.execute(_REPLACE_RULE if op.replace else _ADD_RULE, (op.subscription, op.name, rule))
    return RuleWritten(cur.rowcount == 1)


def _move_rules_out_of_records(conn: sqlite3.Connection) -> None:
    """Schema 6: each subscription record's ``"Rules"`` become rule rows; the record keeps the rest."""
    rows = conn.execute("SELECT path, kind, properties FROM entities WHERE kind = ?", (SUBSCRIPTION_KIND,)).fetchall()
    for path, kind, text in rows:
        record = EntityRecord(path, kind, json.loads(text))
        properties, rules = split_rules(record)
        if rules is None:
            continue
        _put_entity(conn, EntityRecord(path, kind, properties))
        _put_rules(conn, record, rules)


def _put_rules(conn: sqlite3.Connection, entity: EntityRecord, rules: list[tuple[str, dict[str, Any]]]) -> None:
    conn.execute("DELETE FROM rules WHERE subscription = ?", (entity.path,))
    conn.executemany(_PUT_RULE_AT, [(entity.path, name, position, _encode_properties(entity, rule))
                                    for position, (name, rule) in enumerate(rules, start=1)])


def _put_entity(conn: sqlite3.Connection, entity: EntityRecord) -> None:
    properties, rules = split_rules(entity)
    conn.execute(_PUT_ENTITY, (entity.path, entity.kind, _encode_properties(entity, properties)))
    if rules is not None:
        _put_rules(conn, entity, rules)


def _encode_properties(entity: EntityRecord, value: object = None) -> str:
    try:
        return json.dumps(entity.properties if value is None else value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreUnavailable(
            f"cannot store entity {entity.path!r}: its properties are not JSON-serializable ({exc})"
        ) from exc


class SqliteStore:
    """The store port over one SQLite database file (see the module docstring)."""

    def __init__(
        self,
        path: str | pathlib.Path,
        synchronous: str = "FULL",
        *,
        busy_timeout_ms: int = 5000,
    ) -> None:
        mode = synchronous.strip().upper() if isinstance(synchronous, str) else ""
        if mode not in SYNCHRONOUS_MODES:
            raise ConfigurationError(
                f"synchronous: {synchronous!r} is not allowed for a messaging store; "
                f"use one of {', '.join(SYNCHRONOUS_MODES)} (FULL is the durable default)"
            )
        if busy_timeout_ms < 0:
            raise ConfigurationError(f"busy_timeout_ms: must be >= 0, got {busy_timeout_ms}")
        self._path = pathlib.Path(path)
        self._synchronous = mode
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._reserve = self._path.with_name(self._path.name + ".reserve")
        self.full = False  # a batch failed for lack of space and no room has come back since
        self._closed = False
        self._closed_reason = "the store was closed"
        self._snapshots_open = 0  # backups reading a snapshot of this file now (snapshot())
        self._snapshots_lock = threading.Lock()

    @property
    def path(self) -> pathlib.Path:
        return self._path

    @property
    def synchronous(self) -> str:
        return self._synchronous

    # -- the port ---------------------------------------------------------------------------------

    def open(self) -> None:
        if self._closed:
            raise self._unavailable()
        if self._conn is not None:
            return
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms:d}")
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE:d}")  # takes effect only on a new file
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # likewise: only a new file
            (journal_mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(journal_mode).lower() != "wal":
                raise StoreUnavailable(
                    f"SQLite store {self._path}: cannot switch the journal to WAL (got {journal_mode!r})"
                )
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES:d}")
            conn.execute(f"PRAGMA journal_size_limit = {WAL_AUTOCHECKPOINT_PAGES * PAGE_SIZE:d}")
            (sync_code,) = conn.execute("PRAGMA synchronous").fetchone()
            if sync_code != _SYNCHRONOUS_CODES[self._synchronous]:
                raise StoreUnavailable(
                    f"SQLite store {self._path}: PRAGMA synchronous={self._synchronous} did not take"
                )
            if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
                raise StoreUnavailable(
                    f"SQLite store {self._path}: SQLite {sqlite3.sqlite_version} is too old; the store needs "
                    f"{'.'.join(map(str, MIN_SQLITE_VERSION))} or newer (UPDATE .. RETURNING)"
                )
            schema.migrate(conn, str(self._path), {6: _move_rules_out_of_records})
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(f"SQLite store {self._path}: cannot open: {_describe(exc)}") from exc
            raise
        self._sync_directory()
        self._conn = conn
        self.full = not self._make_reserve()

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        conn = self._require()
        batch = prepare_batch(batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot begin a write transaction: {_describe(exc)}"
            ) from exc
        try:
            results: list[OpResult] = []
            claims: _Claims = {}
            for index, op in enumerate(batch):
                if isinstance(op, DeleteIdleEntity):
                    results.append(_delete_idle(conn, op))
                elif isinstance(op, PutRule | DeleteRule):
                    results.append(_apply_rule(conn, op))
                elif isinstance(op, RecordOp):
                    self._apply_one(conn, op)
                    results.append(Done())
                else:
                    results.append(_apply_message_op(conn, op.as_append() if isinstance(op, AppendTo) else op, claims))
                    check_all_or_none(index, op, results[-1])  # SettleFenced: rolled back below
        except BaseException as exc:
            self._rollback(conn)
            if _is_full(exc):
                raise self._now_full(exc) from exc
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(
                    f"SQLite store {self._path}: batch rolled back, nothing applied: {_describe(exc)}"
                ) from exc
            raise
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            if _is_full(exc):  # SQLite rolled the transaction back: nothing of it is on disk
                self._rollback(conn)
                raise self._now_full(exc) from exc
            # The batch may or may not be on disk. Do not keep using a connection whose view of
            # the file is in doubt: close it, so that the caller reopens and reloads.
            self._rollback(conn)
            reason = f"COMMIT failed, the batch may or may not be durable: {_describe(exc)}"
            self._abandon(reason)
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(f"SQLite store {self._path}: {reason}") from exc
            raise
        return tuple(results)

    def load_entities(self) -> list[EntityRecord]:
        conn = self._require()
        try:
            conn.execute("BEGIN")  # one read snapshot for both queries
            rows = conn.execute(_SELECT_ENTITIES).fetchall()
            rule_rows = conn.execute(_SELECT_RULES).fetchall()
            conn.execute("COMMIT")
        except _DRIVER_ERRORS as exc:
            self._rollback(conn)
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot load entities: {_describe(exc)}"
            ) from exc
        records: list[EntityRecord] = []
        rules: dict[str, list[Any]] = {}
        for subscription, rule in rule_rows:
            try:
                rules.setdefault(_fold(subscription), []).append(json.loads(rule))
            except ValueError as exc:
                raise StoreUnavailable(
                    f"SQLite store {self._path}: a rule of {subscription!r} is corrupt: {exc}") from exc
        for path, kind, properties in rows:
            try:
                decoded = json.loads(properties)
            except ValueError as exc:
                raise StoreUnavailable(
                    f"SQLite store {self._path}: entity {path!r} has corrupt properties: {exc}"
                ) from exc
            if kind == SUBSCRIPTION_KIND:
                decoded["Rules"] = rules.get(_fold(path), [])
            records.append(EntityRecord(path=path, kind=kind, properties=decoded))
        return records

    def stats(self, ref: PartitionRef) -> PartitionStats:
        conn = self._require()
        try:
            count, size = conn.execute(_SELECT_STATS, (ref.entity, ref.partition)).fetchone()
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot read statistics of {ref.entity!r} partition "
                f"{ref.partition}: {_describe(exc)}"
            ) from exc
        return PartitionStats(message_count=count, size_in_bytes=size)

    # -- version 2 reads ----------------------------------------------------------------------------

    def peek(self, ref: PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[StoredMessage, ...]:
        if count <= 0:
            return ()
        sql = f"SELECT {_STORED_COLUMNS} FROM messages WHERE entity = ? AND partition = ? AND sequence_number >= ?"
        params: list[Any] = [ref.entity, ref.partition, from_sequence_number]
        if states is not None:
            sql += f" AND state IN ({', '.join(str(int(state)) for state in sorted(states)) or 'NULL'})"
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        sql += " ORDER BY sequence_number LIMIT ?"
        params.append(count)
        (rows,) = self._read(f"peek {ref.entity!r} partition {ref.partition}", [(sql, tuple(params))])
        return tuple(_stored_from_row(r) for r in rows)

    def session_ids(self, ref: PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        sql = ("SELECT DISTINCT session_id FROM messages WHERE entity = ? AND partition = ? AND session_id IS NOT NULL "
               f"AND state IN ({', '.join(str(int(state)) for state in sorted(states)) or 'NULL'}) ORDER BY session_id")
        (rows,) = self._read(f"list the sessions of {ref.entity!r} partition {ref.partition}",
                             [(sql, (ref.entity, ref.partition))])
        return tuple(str(sid) for (sid,) in rows)

    def fetch(self, ref: PartitionRef, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        (rows,) = self._read(f"fetch from {ref.entity!r} partition {ref.partition}",
                             [(_FETCH, (ref.entity, ref.partition, json.dumps(list(sequence_numbers))))])
        return tuple(_stored_from_row(r) for r in rows)

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        (rows,) = self._read(f"count {ref.entity!r} partition {ref.partition}",
                             [(_SELECT_COUNTS, (ref.entity, ref.partition))])
        return PartitionCounts(*rows[0])

    def next_due_many(self, refs: Sequence[PartitionRef], now: int) -> tuple[int | None, ...]:
        if not refs:
            return ()
        rows = self._read(f"read the next due times of {len(refs)} partitions",
                          [(_SELECT_NEXT_DUE, (ref.entity, ref.partition, now)) for ref in refs])
        return tuple(found[0][0] for found in rows)

    def counts_many(self, refs: Sequence[PartitionRef]) -> tuple[PartitionCounts, ...]:
        if not refs:
            return ()
        rows = self._read(f"count {len(refs)} partitions",
                          [(_SELECT_COUNTS_ONLY, (ref.entity, ref.partition)) for ref in refs])
        return tuple(PartitionCounts(active=a, scheduled=s, deferred=d, size_in_bytes=b, last_sequence_number=last,
                                     first_sequence_number=None) for ((a, s, d, b, last),) in rows)

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        (rows,) = self._read(f"read the next due time of {ref.entity!r} partition {ref.partition}",
                             [(_SELECT_NEXT_DUE, (ref.entity, ref.partition, now))])
        due: int | None = rows[0][0]
        return due

    def partition_meta(self, ref: PartitionRef) -> PartitionMeta:
        key = (ref.entity, ref.partition)
        counts, history, states, move_keys = self._read(
            f"read {ref.entity!r} partition {ref.partition}",
            [(_SELECT_COUNTS, key), (_SELECT_HISTORY, key), (_SELECT_SESSION_STATES, key), (_SELECT_MOVE_KEYS, key)])
        return PartitionMeta(
            counts=PartitionCounts(*counts[0]),
            duplicate_history=tuple((message_id, seen_at) for message_id, seen_at in history),
            session_states=tuple((sid, bytes(state), at) for sid, state, at in states),
            move_keys=tuple(k for (k,) in move_keys),
        )

    def _read(self, what: str, queries: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
        """Run read queries in one snapshot; their rows in order."""
        conn = self._require()
        try:
            if len(queries) == 1:
                sql, params = queries[0]
                return [conn.execute(sql, params).fetchall()]
            conn.execute("BEGIN")
            results = [conn.execute(sql, params).fetchall() for sql, params in queries]
            conn.execute("COMMIT")
            return results
        except _DRIVER_ERRORS as exc:
            self._rollback(conn)
            raise StoreUnavailable(f"SQLite store {self._path}: cannot {what}: {_describe(exc)}") from exc

    def drop_locks_of_earlier_runs(self) -> int:
        """:class:`~sodalite.store.port.ServedByOneProcess`: one process serves a SQLite file."""
        conn = self._require()
        try:
            conn.execute("BEGIN IMMEDIATE")
            dropped = conn.execute(f"UPDATE messages SET {_CLEAR_LOCK} WHERE locked_until IS NOT NULL").rowcount
            dropped += conn.execute("DELETE FROM session_locks").rowcount
            conn.execute("COMMIT")
        except _DRIVER_ERRORS as exc:
            self._rollback(conn)
            raise StoreUnavailable(f"SQLite store {self._path}: cannot drop the locks of an earlier run: "
                                   f"{_describe(exc)}") from exc
        return dropped

    def maintain(self) -> bool:
        conn = self._require()
        try:
            # The driver's execute() steps this pragma once (one page); executescript runs it through.
            # Then the checkpoint shrinks the file and empties the WAL.
            conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES_PER_CALL:d});")
            # TRUNCATE waits (busy timeout) for every reader of the WAL: while a backup's snapshot
            # reads, that would hold this thread, and every commit behind it, for the whole copy.
            mode = "PASSIVE" if self._snapshots_open else "TRUNCATE"
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        except _DRIVER_ERRORS:
            self._rollback(conn)  # housekeeping only: the next call tries again
        if self.full and self._has_room() and self._make_reserve():
            self.full = False
        return not self.full

    def snapshot(self) -> SqliteSnapshot:
        """This file as it is now, held by a read transaction of a connection of its own (WAL: the
        store keeps committing meanwhile); call between transactions, on the store's thread."""
        self._require()
        try:
            conn = sqlite3.connect(self._path, timeout=self._busy_timeout_ms / 1000, isolation_level=None,
                                   check_same_thread=False)
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(f"cannot open {self._path} for a backup: {_describe(exc)}") from exc
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the read transaction starts here
        except _DRIVER_ERRORS as exc:
            conn.close()
            raise StoreUnavailable(f"cannot read {self._path} for a backup: {_describe(exc)}") from exc
        with self._snapshots_lock:
            self._snapshots_open += 1
        return SqliteSnapshot(conn, self._path, self._snapshot_closed)

    def _snapshot_closed(self) -> None:
        with self._snapshots_lock:
            self._snapshots_open -= 1

    def close(self) -> None:
        self._abandon("the store was closed")

    # -- disk full --------------------------------------------------------------------------------

    def _now_full(self, exc: BaseException) -> StoreFull:
        self.full = True
        try:
            self._reserve.unlink(missing_ok=True)  # room for receives: deletes and counts still write
        except OSError:
            pass
        return StoreFull(f"the messaging store's disk is full ({self._path.parent}): new messages are "
                         f"refused until space is freed; nothing of this batch was stored ({_describe(exc)})")

    def _has_room(self) -> bool:
        try:
            stat = os.statvfs(self._path.parent)
        except OSError:
            return False
        return stat.f_bavail * stat.f_frsize >= RESERVE_BYTES + FREE_MARGIN_BYTES

    def _make_reserve(self) -> bool:
        """Preallocate the reserve file (kept if it is already whole); False if the disk has no room."""
        try:
            if self._reserve.exists() and self._reserve.stat().st_size >= RESERVE_BYTES:
                return True
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            finally:
                os.close(fd)
            return True
        except OSError:
            try:
                self._reserve.unlink(missing_ok=True)
            except OSError:
                pass
            return False

    # -- internals --------------------------------------------------------------------------------

    @staticmethod
    def _apply_one(conn: sqlite3.Connection, op: RecordOp) -> None:
        if isinstance(op, PutEntity):
            _put_entity(conn, op.entity)
        elif isinstance(op, DeleteEntity):
            path = op.path
            for exact, sub_queues in _DELETE_ENTITY_ROWS.values():
                conn.execute(exact, (path,))
                conn.execute(sub_queues, (path + "/$", path + "/%"))
            conn.execute("DELETE FROM entities WHERE path = ?", (path,))
            conn.execute("DELETE FROM rules WHERE subscription = ?", (path,))
            conn.execute("DELETE FROM activity WHERE entity = ?", (path,))
        elif isinstance(op, RecordActivity):
            conn.executemany(_RECORD_ACTIVITY, [(e.path, op.node, e.last_activity, e.receivers, op.now)
                                                for e in op.entries])
        elif isinstance(op, RememberMessageIds):
            entity, partition = op.ref.entity, op.ref.partition
            conn.executemany(
                _REMEMBER_ID, [(entity, partition, message_id, seen_at) for message_id, seen_at in op.entries]
            )
        elif isinstance(op, ForgetMessageIds):
            entity, partition = op.ref.entity, op.ref.partition
            if op.seen_before is None:
                conn.executemany(_FORGET_ID, [(entity, partition, message_id) for message_id in op.message_ids])
            else:
                conn.executemany(_FORGET_ID_SEEN_BEFORE,
                                 [(entity, partition, message_id, op.seen_before) for message_id in op.message_ids])
        elif isinstance(op, PutSessionState):
            key = (op.ref.entity, op.ref.partition, op.session_id)
            if op.state is None:
                conn.execute(_CLEAR_SESSION_STATE, key)
            else:
                conn.execute(_PUT_SESSION_STATE, (*key, op.state, op.updated_at))
        elif isinstance(op, RememberMoveKeys):
            conn.executemany(_REMEMBER_MOVE_KEY, [(op.ref.entity, op.ref.partition, k) for k in op.keys])
        elif isinstance(op, ForgetMoveKeys):
            conn.executemany(_FORGET_MOVE_KEY, [(op.ref.entity, op.ref.partition, k) for k in op.keys])
        else:
            assert_never(op)

    def _sync_directory(self) -> None:
        """Make the database file's directory entry durable (it may have just been created)."""
        if os.name != "posix":
            return
        try:
            fd = os.open(self._path.resolve().parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            # Some file systems refuse to fsync a directory; SQLite syncs it when it creates the
            # WAL file anyway, so this is belt and braces, not a reason to refuse service.
            pass

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except _DRIVER_ERRORS:
            pass

    def _abandon(self, reason: str) -> None:
        conn, self._conn = self._conn, None
        if not self._closed:
            self._closed = True
            self._closed_reason = reason
        if conn is not None:
            try:
                conn.close()
            except _DRIVER_ERRORS:
                pass

    def _unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(f"SQLite store {self._path} is closed: {self._closed_reason}")

    def _require(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self._closed:
            raise self._unavailable()
        raise StoreUnavailable(f"SQLite store {self._path} is not open: call open() first")


class SqliteSnapshot:
    """A read transaction on a store's file: :meth:`copy_to` copies the database as that transaction
    sees it through SQLite's backup API in ONE step (all pages at once under the transaction's
    snapshot, so the store's writers, which go on, never make it start over)."""

    def __init__(self, conn: sqlite3.Connection, path: pathlib.Path, on_close: Callable[[], None]) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._on_close = on_close

    def copy_to(self, destination: str) -> None:
        if self._conn is None:
            raise StoreUnavailable(f"the snapshot of {self._path} was closed")
        try:
            target = sqlite3.connect(destination, isolation_level=None)
            try:
                self._conn.backup(target, pages=-1)
                target.execute("PRAGMA journal_mode = DELETE").fetchone()  # one self-contained file
            finally:
                target.close()
            with open(destination, "rb") as copied:
                os.fsync(copied.fileno())
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(f"cannot copy {self._path} into {destination}: {_describe(exc)}") from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.close()
        except _DRIVER_ERRORS:
            pass
        self._on_close()
