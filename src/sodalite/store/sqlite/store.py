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

The schema and its migrations are SQL files (:mod:`sodalite.store.sqlite.schema`); the statements
are the catalogue ``queries.sql``; each operation has its handler (:mod:`sodalite.store.sqlite.handlers`).

Every operation moves the counters of the partitions it touches by the deltas it
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
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from sodalite.errors import ConfigurationError, StoreFull, StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.store import port
from sodalite.store.lifecycle import OpenOnce
from sodalite.store.sqlite import handlers, schema
from sodalite.store.sqlite.rows import (
    SQL,
    STORED_COLUMNS,
    Claims,
    describe,
    fold,
    is_full,
    move_rules_out_of_records,
    stored_from_row,
)

MIN_SQLITE_VERSION: Final = (3, 35, 0)  # UPDATE .. FROM (3.33) and RETURNING (3.35)
SYNCHRONOUS_MODES: Final = ("FULL", "EXTRA", "NORMAL")
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

class SqliteStore(OpenOnce):
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
        self._label = f"SQLite store {self._path}"
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
        if self._is_open(self._conn):
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
            schema.migrate(conn, str(self._path), {6: move_rules_out_of_records})
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(f"SQLite store {self._path}: cannot open: {describe(exc)}") from exc
            raise
        self._sync_directory()
        self._conn = conn
        self.full = not self._make_reserve()

    def apply(self, batch: Sequence[port.StoreOp]) -> tuple[port.OpResult, ...]:
        conn = self._require()
        batch = port.prepare_batch(batch)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot begin a write transaction: {describe(exc)}"
            ) from exc
        try:
            results: list[port.OpResult] = []
            claims: Claims = {}
            for index, op in enumerate(batch):
                results.append(handlers.apply(conn, op, claims))
                port.check_all_or_none(index, op, results[-1])  # SettleFenced: rolled back below
        except BaseException as exc:
            self._rollback(conn)
            if is_full(exc):
                raise self._now_full(exc) from exc
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(
                    f"SQLite store {self._path}: batch rolled back, nothing applied: {describe(exc)}"
                ) from exc
            raise
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            if is_full(exc):  # SQLite rolled the transaction back: nothing of it is on disk
                self._rollback(conn)
                raise self._now_full(exc) from exc
            # The batch may or may not be on disk. Do not keep using a connection whose view of
            # the file is in doubt: close it, so that the caller reopens and reloads.
            self._rollback(conn)
            reason = f"COMMIT failed, the batch may or may not be durable: {describe(exc)}"
            self._abandon(reason)
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreUnavailable(f"SQLite store {self._path}: {reason}") from exc
            raise
        return tuple(results)

    def load_entities(self) -> list[port.EntityRecord]:
        conn = self._require()
        try:
            conn.execute("BEGIN")  # one read snapshot for both queries
            rows = conn.execute(SQL["select_entities"]).fetchall()
            rule_rows = conn.execute(SQL["select_rules"]).fetchall()
            conn.execute("COMMIT")
        except _DRIVER_ERRORS as exc:
            self._rollback(conn)
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot load entities: {describe(exc)}"
            ) from exc
        records: list[port.EntityRecord] = []
        rules: dict[str, list[object]] = {}
        for subscription, rule in rule_rows:
            try:
                rules.setdefault(fold(subscription), []).append(json.loads(rule))
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
            if kind == port.SUBSCRIPTION_KIND:
                decoded["Rules"] = rules.get(fold(path), [])
            records.append(port.EntityRecord(path=path, kind=kind, properties=decoded))
        return records

    def stats(self, ref: port.PartitionRef) -> port.PartitionStats:
        conn = self._require()
        try:
            count, size = conn.execute(SQL["select_stats"], (ref.entity, ref.partition)).fetchone()
        except _DRIVER_ERRORS as exc:
            raise StoreUnavailable(
                f"SQLite store {self._path}: cannot read statistics of {ref.entity!r} partition "
                f"{ref.partition}: {describe(exc)}"
            ) from exc
        return port.PartitionStats(message_count=count, size_in_bytes=size)

    # -- reads ------------------------------------------------------------------------------------

    def peek(self, ref: port.PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[port.StoredMessage, ...]:
        if count <= 0:
            return ()
        sql = f"SELECT {STORED_COLUMNS} FROM messages WHERE entity = ? AND partition = ? AND sequence_number >= ?"
        params: list[object] = [ref.entity, ref.partition, from_sequence_number]
        if states is not None:
            sql += f" AND state IN ({', '.join(str(int(state)) for state in sorted(states)) or 'NULL'})"
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        sql += " ORDER BY sequence_number LIMIT ?"
        params.append(count)
        (rows,) = self._read(f"peek {ref.entity!r} partition {ref.partition}", [(sql, tuple(params))])
        return tuple(stored_from_row(r) for r in rows)

    def session_ids(self, ref: port.PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        sql = ("SELECT DISTINCT session_id FROM messages WHERE entity = ? AND partition = ? AND session_id IS NOT NULL "
               f"AND state IN ({', '.join(str(int(state)) for state in sorted(states)) or 'NULL'}) ORDER BY session_id")
        (rows,) = self._read(f"list the sessions of {ref.entity!r} partition {ref.partition}",
                             [(sql, (ref.entity, ref.partition))])
        return tuple(str(sid) for (sid,) in rows)

    def fetch(self, ref: port.PartitionRef, sequence_numbers: Sequence[int]) -> tuple[port.StoredMessage, ...]:
        (rows,) = self._read(f"fetch from {ref.entity!r} partition {ref.partition}",
                             [(SQL["fetch"], (ref.entity, ref.partition, json.dumps(list(sequence_numbers))))])
        return tuple(stored_from_row(r) for r in rows)

    def counts(self, ref: port.PartitionRef) -> port.PartitionCounts:
        (rows,) = self._read(f"count {ref.entity!r} partition {ref.partition}",
                             [(SQL["select_counts"], (ref.entity, ref.partition))])
        return port.PartitionCounts(*rows[0])

    def next_due_many(self, refs: Sequence[port.PartitionRef], now: int) -> tuple[int | None, ...]:
        if not refs:
            return ()
        rows = self._read(f"read the next due times of {len(refs)} partitions",
                          [(SQL["select_next_due"], (ref.entity, ref.partition, now)) for ref in refs])
        return tuple(found[0][0] for found in rows)

    def counts_many(self, refs: Sequence[port.PartitionRef]) -> tuple[port.PartitionCounts, ...]:
        if not refs:
            return ()
        rows = self._read(f"count {len(refs)} partitions",
                          [(SQL["select_counts_only"], (ref.entity, ref.partition)) for ref in refs])
        return tuple(port.PartitionCounts(active=a, scheduled=s, deferred=d, size_in_bytes=b, last_sequence_number=last,
                                          first_sequence_number=None) for ((a, s, d, b, last),) in rows)

    def next_due(self, ref: port.PartitionRef, now: int) -> int | None:
        (rows,) = self._read(f"read the next due time of {ref.entity!r} partition {ref.partition}",
                             [(SQL["select_next_due"], (ref.entity, ref.partition, now))])
        due: int | None = rows[0][0]
        return due

    def partition_meta(self, ref: port.PartitionRef) -> port.PartitionMeta:
        key = (ref.entity, ref.partition)
        counts, history, states, move_keys = self._read(
            f"read {ref.entity!r} partition {ref.partition}",
            [(SQL["select_counts"], key), (SQL["select_history"], key), (SQL["select_session_states"], key),
             (SQL["select_move_keys"], key)])
        return port.PartitionMeta(
            counts=port.PartitionCounts(*counts[0]),
            duplicate_history=tuple((message_id, seen_at) for message_id, seen_at in history),
            session_states=tuple((sid, bytes(state), at) for sid, state, at in states),
            move_keys=tuple(k for (k,) in move_keys),
        )

    def _read(self, what: str, queries: Sequence[tuple[str, tuple[object, ...]]]) -> list[list[tuple[Any, ...]]]:
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
            raise StoreUnavailable(f"SQLite store {self._path}: cannot {what}: {describe(exc)}") from exc

    def drop_locks_of_earlier_runs(self) -> int:
        """:class:`~sodalite.store.port.ServedByOneProcess`: one process serves a SQLite file."""
        conn = self._require()
        try:
            conn.execute("BEGIN IMMEDIATE")
            dropped = conn.execute(SQL["drop_message_locks"]).rowcount
            dropped += conn.execute(SQL["drop_session_locks"]).rowcount
            conn.execute("COMMIT")
        except _DRIVER_ERRORS as exc:
            self._rollback(conn)
            raise StoreUnavailable(f"SQLite store {self._path}: cannot drop the locks of an earlier run: "
                                   f"{describe(exc)}") from exc
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
            raise StoreUnavailable(f"cannot open {self._path} for a backup: {describe(exc)}") from exc
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the read transaction starts here
        except _DRIVER_ERRORS as exc:
            conn.close()
            raise StoreUnavailable(f"cannot read {self._path} for a backup: {describe(exc)}") from exc
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
                         f"refused until space is freed; nothing of this batch was stored ({describe(exc)})")

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
        return StoreUnavailable(f"{self._label} is closed: {self._closed_reason}")

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise self._missing()
        return self._conn


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
            raise StoreUnavailable(f"cannot copy {self._path} into {destination}: {describe(exc)}") from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.close()
        except _DRIVER_ERRORS:
            pass
        self._on_close()
