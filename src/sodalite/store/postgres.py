"""The PostgreSQL messaging store: one database, one transaction per ``apply``, on psycopg 3.

Theory of operation. The store keeps what the SQLite store keeps (messages, each partition's
high-water mark, duplicate-detection history, session state, move keys, entity records), in tables
prefixed ``sodalite_`` in the first schema of the connection's ``search_path``, so it can share a
database the operator already runs and backs up. One ``apply`` is one transaction sent as one
pipeline (``BEGIN``, the batch's statements, each kind of operation as one ``executemany``,
``COMMIT``, then one sync): one network round trip per batch, not one per message. Reads
(``load_partition`` and the others) are likewise one pipelined read-only snapshot each. ``apply``
returns only after PostgreSQL acknowledged the ``COMMIT``; with the server's default
``synchronous_commit = on`` that means the WAL is flushed (and replicated, if the server requires
synchronous standbys).

Sequence numbers. The partition actor assigns them today (one writer per partition); the append
transaction raises the partition's counter row (``sodalite_partitions.last_sequence_number``,
``GREATEST``), which takes that row's lock until the commit. This row, not a ``SEQUENCE`` (whose
numbers can commit out of order), is what the several-node store of issue 14/18 will draw numbers
from, so a higher number never becomes visible before a lower one.

Schema. Numbered migrations (:data:`MIGRATIONS`), recorded in ``sodalite_schema_version``, run by
``open`` in one transaction under a transaction-scoped advisory lock, so several brokers starting on
one database migrate it once. A database whose schema is newer than this code knows makes ``open``
raise StoreUnavailable naming what to do (upgrade Sodalite, or point it at another database).

Values. Entity paths compare case-insensitively (ASCII letters, like SQLite's NOCASE): every table
keys a partition by the folded path as UTF-8 bytes (``bytea``), so ranges and order are bytewise,
as in SQLite and the memory store. User text (message, session and partition-key ids, history ids,
move keys) is stored as UTF-8 ``bytea`` too, because PostgreSQL ``text`` cannot hold NUL, which
AMQP strings can. Integers are ``bigint``.

Failures. Every psycopg or pool error, and every use after :meth:`PostgresStore.close`, raises
:class:`~sodalite.errors.StoreUnavailable` (:class:`~sodalite.errors.StoreFull` for PostgreSQL's
``disk_full``), with the driver's exception as ``__cause__``; no psycopg type crosses the port. A
connection lost mid-batch is discarded by the pool and replaced on the next call, so a database
that comes back is used again without a restart. A batch whose ``COMMIT`` was sent but not
acknowledged may or may not be durable; it is reported as not applied (at-least-once: a client
retries the send), never as applied.

Not thread-safe: the server calls one store from one worker thread.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Sequence
from typing import Any, Final, assert_never
from urllib.parse import urlsplit

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from sodalite.errors import ConfigurationError, StoreFull, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    AppendMessages,
    DeleteEntity,
    DeleteMessages,
    Done,
    EntityRecord,
    ForgetMessageIds,
    ForgetMoveKeys,
    OpResult,
    PartitionCounts,
    PartitionMeta,
    PartitionRef,
    PartitionSnapshot,
    PartitionStats,
    PutEntity,
    PutSessionState,
    RememberMessageIds,
    RememberMoveKeys,
    StoredMessage,
    StoreOp,
    StoreOpV1,
    UpdateMessages,
)

URL_SCHEMES: Final = ("postgresql", "postgres")
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# Any constant shared by every Sodalite: the advisory lock that serializes migrations.
MIGRATION_LOCK_KEY: Final = 0x50D4_117E_0001
DEFAULT_CONNECT_TIMEOUT: Final = 5.0  # seconds open() waits for the database at start
# Seconds a call waits for the pooled connection while it is being re-established: short, because
# the store's one worker thread waits meanwhile, and the partitions retry their reload anyway.
CALL_WAIT: Final = 2.0

# Migration n brings a database from schema version n-1 to n. Never edit one that has shipped:
# add the next. Version 1 is the SQLite store's version 4 (messages, partition counters, entities,
# duplicate history, session states, move keys).
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE sodalite_messages (
            entity                 bytea    NOT NULL,
            partition              bigint   NOT NULL,
            sequence_number        bigint   NOT NULL,
            enqueued_time          bigint   NOT NULL,
            message_id             bytea,
            session_id             bytea,
            partition_key          bytea,
            time_to_live           bigint,
            expires_at             bigint,
            scheduled_enqueue_time bigint,
            delivery_count         bigint   NOT NULL,
            state                  smallint NOT NULL,
            durable                boolean,
            priority               bigint,
            annotations            bytea    NOT NULL,
            annotation_count       bigint   NOT NULL,
            tail                   bytea    NOT NULL,
            PRIMARY KEY (entity, partition, sequence_number)
        )
        """,
        """
        CREATE TABLE sodalite_partitions (
            entity               bytea  NOT NULL,
            partition            bigint NOT NULL,
            last_sequence_number bigint NOT NULL,
            PRIMARY KEY (entity, partition)
        )
        """,
        """
        CREATE TABLE sodalite_entities (
            path_key   bytea NOT NULL PRIMARY KEY,
            path       text  NOT NULL,
            kind       text  NOT NULL,
            properties text  NOT NULL
        )
        """,
        """
        CREATE TABLE sodalite_duplicate_history (
            entity     bytea  NOT NULL,
            partition  bigint NOT NULL,
            message_id bytea  NOT NULL,
            seen_at    bigint NOT NULL,
            PRIMARY KEY (entity, partition, message_id)
        )
        """,
        """
        CREATE TABLE sodalite_session_states (
            entity     bytea  NOT NULL,
            partition  bigint NOT NULL,
            session_id bytea  NOT NULL,
            state      bytea  NOT NULL,
            updated_at bigint NOT NULL,
            PRIMARY KEY (entity, partition, session_id)
        )
        """,
        """
        CREATE TABLE sodalite_move_keys (
            entity    bytea  NOT NULL,
            partition bigint NOT NULL,
            move_key  bytea  NOT NULL,
            PRIMARY KEY (entity, partition, move_key)
        )
        """,
        # The hot table: rows come and go all the time, so let autovacuum visit it early.
        """
        ALTER TABLE sodalite_messages SET (autovacuum_vacuum_scale_factor = 0.01,
                                           autovacuum_vacuum_insert_scale_factor = 0.05)
        """,
    ),
)
SCHEMA_VERSION: Final = len(MIGRATIONS)

_CREATE_VERSION_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS sodalite_schema_version (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version   integer NOT NULL
    )
"""
_PARTITION_TABLES: Final = ("sodalite_messages", "sodalite_partitions", "sodalite_duplicate_history",
                            "sodalite_session_states", "sodalite_move_keys")
_MESSAGE_COLUMNS: Final = (
    "sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, "
    "expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, "
    "annotation_count, tail"
)
_INSERT_MESSAGE: Final = (
    f"INSERT INTO sodalite_messages (entity, partition, {_MESSAGE_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_RAISE_COUNTER: Final = (
    "INSERT INTO sodalite_partitions AS p (entity, partition, last_sequence_number) VALUES (%s, %s, %s) "
    "ON CONFLICT (entity, partition) DO UPDATE "
    "SET last_sequence_number = GREATEST(p.last_sequence_number, excluded.last_sequence_number)"
)
_DELETE_MESSAGE: Final = (
    "DELETE FROM sodalite_messages WHERE entity = %s AND partition = %s AND sequence_number = %s"
)
_UPDATE_MESSAGE: Final = (
    "UPDATE sodalite_messages SET delivery_count = %s, state = %s "
    "WHERE entity = %s AND partition = %s AND sequence_number = %s"
)
_PUT_ENTITY: Final = (
    "INSERT INTO sodalite_entities (path_key, path, kind, properties) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (path_key) DO UPDATE SET path = excluded.path, kind = excluded.kind, "
    "properties = excluded.properties"
)
_REMEMBER_ID: Final = (
    "INSERT INTO sodalite_duplicate_history (entity, partition, message_id, seen_at) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (entity, partition, message_id) DO UPDATE SET seen_at = excluded.seen_at"
)
_FORGET_ID: Final = (
    "DELETE FROM sodalite_duplicate_history WHERE entity = %s AND partition = %s AND message_id = %s"
)
_PUT_SESSION_STATE: Final = (
    "INSERT INTO sodalite_session_states (entity, partition, session_id, state, updated_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (entity, partition, session_id) "
    "DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at"
)
_CLEAR_SESSION_STATE: Final = (
    "DELETE FROM sodalite_session_states WHERE entity = %s AND partition = %s AND session_id = %s"
)
_REMEMBER_MOVE_KEY: Final = (
    "INSERT INTO sodalite_move_keys (entity, partition, move_key) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
)
_FORGET_MOVE_KEY: Final = (
    "DELETE FROM sodalite_move_keys WHERE entity = %s AND partition = %s AND move_key = %s"
)
# An entity's own partitions and its sub-queues' ('<path>/$...'): bytewise, '$' < '%'.
_DELETE_ENTITY_ROWS: Final = tuple(
    f"DELETE FROM {table} WHERE entity = %s OR (entity >= %s AND entity < %s)" for table in _PARTITION_TABLES
)
_SELECT_MESSAGES: Final = (
    f"SELECT {_MESSAGE_COLUMNS} FROM sodalite_messages WHERE entity = %s AND partition = %s "
    "ORDER BY sequence_number"
)
_SELECT_COUNTER: Final = (
    "SELECT last_sequence_number FROM sodalite_partitions WHERE entity = %s AND partition = %s"
)
_SELECT_HISTORY: Final = (
    "SELECT message_id, seen_at FROM sodalite_duplicate_history WHERE entity = %s AND partition = %s "
    "ORDER BY seen_at, message_id"
)
_SELECT_SESSION_STATES: Final = (
    "SELECT session_id, state, updated_at FROM sodalite_session_states WHERE entity = %s AND partition = %s "
    "ORDER BY session_id"
)
_SELECT_MOVE_KEYS: Final = (
    "SELECT move_key FROM sodalite_move_keys WHERE entity = %s AND partition = %s ORDER BY move_key"
)
_SELECT_STATS: Final = (
    "SELECT count(*), coalesce(sum(length(annotations) + length(tail)), 0) "
    "FROM sodalite_messages WHERE entity = %s AND partition = %s"
)
_SELECT_ENTITIES: Final = "SELECT path, kind, properties FROM sodalite_entities ORDER BY path_key"


def check_url(url: str) -> str:
    """A PostgreSQL connection URL, or ConfigurationError saying what is wrong with it."""
    if not isinstance(url, str):
        raise ConfigurationError(f"PostgreSQL store: the URL must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ConfigurationError(f"PostgreSQL store URL {redact(url)!r} is malformed: {exc}") from None
    if parts.scheme not in URL_SCHEMES:
        raise ConfigurationError(
            f"PostgreSQL store URL {redact(url)!r}: must start with postgresql:// "
            "(for example postgresql://user:password@dbhost:5432/sodalite)")
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigurationError(
            f"PostgreSQL store URL {redact(url)!r}: name the database (postgresql://host/DATABASE)")
    return url


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _fold(path: str) -> bytes:
    """A partition's key: the entity path with ASCII letters lower-cased, as UTF-8."""
    return _utf8(path.translate(_ASCII_LOWER), "entity path")


def _utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreUnavailable(f"{what} {value!r} cannot be stored as UTF-8 text ({exc})") from exc


def _opt_utf8(value: str | None, what: str) -> bytes | None:
    return None if value is None else _utf8(value, what)


def _int64(value: int | None, what: str) -> int | None:
    if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
        raise StoreUnavailable(f"{what} {value} does not fit a signed 64-bit integer")
    return value


def _text(value: bytes | memoryview | None) -> str | None:
    return None if value is None else bytes(value).decode("utf-8")


def _message_row(entity: bytes, ref: PartitionRef, m: MessageRecord) -> tuple[Any, ...]:
    where = f"message {m.sequence_number} of {ref.entity!r} partition {ref.partition}:"
    return (
        entity,
        ref.partition,
        _int64(m.sequence_number, f"{where} sequence_number"),
        _int64(m.enqueued_time, f"{where} enqueued_time"),
        _opt_utf8(m.message_id, f"{where} message_id"),
        _opt_utf8(m.session_id, f"{where} session_id"),
        _opt_utf8(m.partition_key, f"{where} partition_key"),
        _int64(m.time_to_live, f"{where} time_to_live"),
        _int64(m.expires_at, f"{where} expires_at"),
        _int64(m.scheduled_enqueue_time, f"{where} scheduled_enqueue_time"),
        _int64(m.delivery_count, f"{where} delivery_count"),
        int(m.state),
        m.durable,
        _int64(m.priority, f"{where} priority"),
        bytes(m.annotations),
        _int64(m.annotation_count, f"{where} annotation_count"),
        bytes(m.tail),
    )


def _message_from_row(row: tuple[Any, ...]) -> MessageRecord:
    (seq, enqueued, message_id, session_id, partition_key, ttl, expires_at, scheduled,
     delivery_count, state, durable, priority, annotations, annotation_count, tail) = row  # fmt: skip
    return MessageRecord(
        sequence_number=seq,
        enqueued_time=enqueued,
        message_id=_text(message_id),
        session_id=_text(session_id),
        partition_key=_text(partition_key),
        time_to_live=ttl,
        expires_at=expires_at,
        scheduled_enqueue_time=scheduled,
        delivery_count=delivery_count,
        state=MessageState(state),
        durable=durable,
        priority=priority,
        annotations=bytes(annotations),
        annotation_count=annotation_count,
        tail=bytes(tail),
    )


def _encode_properties(entity: EntityRecord) -> str:
    try:
        return json.dumps(entity.properties, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreUnavailable(
            f"cannot store entity {entity.path!r}: its properties are not JSON-serializable ({exc})"
        ) from exc


def _key(ref: PartitionRef) -> tuple[bytes, int]:
    partition = _int64(ref.partition, f"partition number of {ref.entity!r}")
    assert partition is not None
    return _fold(ref.entity), partition


_Statements = dict[str, list[tuple[Any, ...]]]


def _statements(op: StoreOpV1) -> Iterable[tuple[str, list[tuple[Any, ...]]]]:
    """The statements one operation becomes, each with its parameter rows (run with executemany)."""
    if isinstance(op, AppendMessages):
        if not op.messages:
            return
        entity, partition = _key(op.ref)
        yield _INSERT_MESSAGE, [_message_row(entity, op.ref, m) for m in op.messages]
        top = max(m.sequence_number for m in op.messages)
        yield _RAISE_COUNTER, [(entity, partition, max(top, 0))]
    elif isinstance(op, DeleteMessages):
        if op.sequence_numbers:
            entity, partition = _key(op.ref)
            yield _DELETE_MESSAGE, [(entity, partition, _int64(n, "sequence number")) for n in op.sequence_numbers]
    elif isinstance(op, UpdateMessages):
        if op.updates:
            entity, partition = _key(op.ref)
            yield _UPDATE_MESSAGE, [
                (_int64(u.delivery_count, f"delivery_count of message {u.sequence_number}"), int(u.state),
                 entity, partition, _int64(u.sequence_number, "sequence number"))
                for u in op.updates
            ]
    elif isinstance(op, PutEntity):
        e = op.entity
        yield _PUT_ENTITY, [(_fold(e.path), e.path, e.kind, _encode_properties(e))]
    elif isinstance(op, DeleteEntity):
        folded = _fold(op.path)
        for statement in _DELETE_ENTITY_ROWS:
            yield statement, [(folded, folded + b"/$", folded + b"/%")]
        yield "DELETE FROM sodalite_entities WHERE path_key = %s", [(folded,)]
    elif isinstance(op, RememberMessageIds):
        if op.entries:
            entity, partition = _key(op.ref)
            yield _REMEMBER_ID, [
                (entity, partition, _utf8(mid, "message id"), _int64(at, f"seen-at time of message id {mid!r}"))
                for mid, at in op.entries
            ]
    elif isinstance(op, ForgetMessageIds):
        if op.message_ids:
            entity, partition = _key(op.ref)
            yield _FORGET_ID, [(entity, partition, _utf8(mid, "message id")) for mid in op.message_ids]
    elif isinstance(op, PutSessionState):
        entity, partition = _key(op.ref)
        sid = _utf8(op.session_id, "session id")
        if op.state is None:
            yield _CLEAR_SESSION_STATE, [(entity, partition, sid)]
        else:
            updated = _int64(op.updated_at, f"update time of session {op.session_id!r}")
            yield _PUT_SESSION_STATE, [(entity, partition, sid, bytes(op.state), updated)]
    elif isinstance(op, RememberMoveKeys | ForgetMoveKeys):
        if op.keys:
            entity, partition = _key(op.ref)
            rows: list[tuple[Any, ...]] = [(entity, partition, _utf8(k, "move key")) for k in op.keys]
            yield (_REMEMBER_MOVE_KEY if isinstance(op, RememberMoveKeys) else _FORGET_MOVE_KEY), rows
    else:
        assert_never(op)


def _describe(exc: BaseException) -> str:
    sqlstate = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{text} [{sqlstate}]" if sqlstate else text


class PostgresStore:
    """The store port over one PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 application_name: str = "sodalite") -> None:
        self._url = check_url(url)
        self._shown = redact(url)
        if connect_timeout <= 0:
            raise ConfigurationError(f"connect_timeout: must be > 0, got {connect_timeout}")
        self._timeout = connect_timeout
        self._application_name = application_name
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None
        self._closed = False

    @property
    def url(self) -> str:
        """The URL without its password."""
        return self._shown

    # -- the port ---------------------------------------------------------------------------------

    def open(self) -> None:
        if self._closed:
            raise self._unavailable()
        if self._pool is not None:
            return
        pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self._url, min_size=1, max_size=1, open=False, timeout=min(self._timeout, CALL_WAIT),
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout)),
                    "application_name": self._application_name},
            # A failed reconnection is not retried in the background: the next call asks for a connection
            # and so tries again (the partitions' reload loop makes those calls while the database is away).
            reconnect_timeout=0,
            name=f"sodalite-{self._shown}",
        )
        try:
            # The first connection decides: an unreachable database fails here, with what to do.
            with psycopg.connect(self._url, autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                 application_name=self._application_name) as conn:
                self._migrate(conn)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: cannot connect: {_describe(exc)}; check that the server "
                "is running and reachable, and that the URL's user, password and database are right"
            ) from exc
        pool.open(wait=False)
        self._pool = pool

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        pool = self._require()
        grouped: list[tuple[str, list[tuple[Any, ...]]]] = []
        for op in batch:  # validate and encode everything before touching the database
            if not isinstance(op, StoreOpV1):
                raise NotImplementedError(f"store port v2: {type(op).__name__} (PostgreSQL: not built yet)")
            grouped.extend(_statements(op))
        done = tuple(Done() for _ in batch)
        if not grouped:
            return done
        try:
            with pool.connection() as conn:
                # BEGIN, the statements and COMMIT go out together, and one sync brings every result
                # back: one round trip. A statement that fails makes the server skip the rest up to
                # the sync (the COMMIT included), so nothing of the batch is applied.
                try:
                    with conn.pipeline(), conn.cursor() as cur:
                        cur.execute("BEGIN")
                        for statement, rows in grouped:
                            cur.executemany(statement, rows)
                        cur.execute("COMMIT")
                except BaseException:
                    self._rollback(conn)
                    raise
        except (psycopg.Error, PoolTimeout) as exc:
            if isinstance(exc, psycopg.errors.DiskFull):
                raise StoreFull(
                    f"PostgreSQL store {self._shown}: the database's disk is full: new messages are refused "
                    f"until space is freed; nothing of this batch was stored ({_describe(exc)})") from exc
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: batch not applied: {_describe(exc)}") from exc
        return done

    def load_partition(self, ref: PartitionRef) -> PartitionSnapshot:
        key = _key(ref)
        rows, mark, history, states, move_keys = self._read(
            f"load {ref.entity!r} partition {ref.partition}",
            [(_SELECT_MESSAGES, key), (_SELECT_COUNTER, key), (_SELECT_HISTORY, key),
             (_SELECT_SESSION_STATES, key), (_SELECT_MOVE_KEYS, key)])
        messages = tuple(_message_from_row(r) for r in rows)
        last = mark[0][0] if mark else 0
        if messages:
            last = max(last, messages[-1].sequence_number)
        return PartitionSnapshot(
            messages=messages,
            last_sequence_number=last,
            duplicate_history=tuple((bytes(mid).decode("utf-8"), at) for mid, at in history),
            session_states=tuple((bytes(sid).decode("utf-8"), bytes(state), at) for sid, state, at in states),
            move_keys=tuple(bytes(k).decode("utf-8") for (k,) in move_keys),
        )

    def load_entities(self) -> list[EntityRecord]:
        (rows,) = self._read("load entities", [(_SELECT_ENTITIES, ())])
        records: list[EntityRecord] = []
        for path, kind, properties in rows:
            try:
                decoded = json.loads(properties)
            except ValueError as exc:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: entity {path!r} has corrupt properties: {exc}") from exc
            records.append(EntityRecord(path=path, kind=kind, properties=decoded))
        return records

    def stats(self, ref: PartitionRef) -> PartitionStats:
        (rows,) = self._read(f"read statistics of {ref.entity!r} partition {ref.partition}",
                             [(_SELECT_STATS, _key(ref))])
        count, size = rows[0]
        return PartitionStats(message_count=int(count), size_in_bytes=int(size))

    # -- version 2 reads (not yet built in this adapter) ------------------------------------------

    def peek(self, ref: PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[StoredMessage, ...]:
        raise NotImplementedError("store port v2: peek")

    def fetch(self, ref: PartitionRef, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        raise NotImplementedError("store port v2: fetch")

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        raise NotImplementedError("store port v2: counts")

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        raise NotImplementedError("store port v2: next_due")

    def partition_meta(self, ref: PartitionRef) -> PartitionMeta:
        raise NotImplementedError("store port v2: partition_meta")

    def maintain(self) -> bool:
        self._require()
        return True  # autovacuum does the housekeeping; disk-full recovery is the server's

    def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5)

    # -- internals --------------------------------------------------------------------------------

    def _read(self, what: str, queries: Sequence[tuple[str, tuple[Any, ...]]]) -> list[list[tuple[Any, ...]]]:
        """Run read queries in one snapshot (one pipeline); their rows in order."""
        pool = self._require()
        try:
            with pool.connection() as conn:
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                        cursors = [conn.execute(statement, params) for statement, params in queries]
                        conn.execute("COMMIT")
                except BaseException:
                    self._rollback(conn)
                    raise
                return [cur.fetchall() for cur in cursors]
        except (psycopg.Error, PoolTimeout, UnicodeDecodeError) as exc:
            raise StoreUnavailable(f"PostgreSQL store {self._shown}: cannot {what}: {_describe(exc)}") from exc

    @staticmethod
    def _rollback(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """End a failed transaction so the pooled connection is clean; a broken one the pool discards."""
        if conn.broken or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _migrate(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(_CREATE_VERSION_TABLE)
            row = conn.execute("SELECT version FROM sodalite_schema_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: the database's Sodalite schema is version {version}, "
                    f"newer than this Sodalite knows ({SCHEMA_VERSION}): a newer Sodalite has used it. "
                    "Upgrade this Sodalite to that release (or newer), or point it at another database")
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement)
            if version == 0:
                conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                conn.execute("UPDATE sodalite_schema_version SET version = %s", (SCHEMA_VERSION,))

    def _unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(f"PostgreSQL store {self._shown} is closed")

    def _require(self) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise self._unavailable()
        raise StoreUnavailable(f"PostgreSQL store {self._shown} is not open: call open() first")
