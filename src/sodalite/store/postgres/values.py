"""The PostgreSQL store's settings, its URL checks, and values to columns and back (paths folded, text as
UTF-8 ``bytea``, integers checked to fit ``bigint``).

Values. Entity paths compare case-insensitively (ASCII letters, like SQLite's NOCASE): every table
keys a partition by the folded path as UTF-8 bytes (``bytea``), so ranges and order are bytewise,
as in SQLite and the memory store. User text (message, session and partition-key ids, history ids,
move keys) is stored as UTF-8 ``bytea`` too, because PostgreSQL ``text`` cannot hold NUL, which
AMQP strings can. Integers are ``bigint``.
"""

from __future__ import annotations

import logging
import string
from typing import Final
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import TupleRow

from sodalite.errors import ConfigurationError, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    PartitionRef,
    StoredMessage,
)
from sodalite.store.postgres.failover import check_hosts

log = logging.getLogger("sodalite.store.postgres")


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


GENERATIONS: Final = 4  # tables in the ring of message tables


# The current generation's table is left for the next once it is this large (and the next is empty).
DEFAULT_ROTATE_BYTES: Final = 2 * 1024 * 1024


MOVE_LIMIT: Final = 1000  # a generation holding at most this many live rows is moved on and truncated


ANALYZE_AFTER: Final = 1000  # rows changed in the current generation before maintain() re-analyzes it


LOCK_TIMEOUT_MS: Final = 100  # how long the maintenance waits for the lock TRUNCATE needs


# The current generation is also left for the next once its counter table is this large: a run of
# settlements that only delete (a backlog drained under a long transaction) grows it, not the messages.
COUNTER_ROTATE_BYTES: Final = 64 * 1024


# The duplicate-detection history has a ring of its own (its rows drain by the window, not by
# consumption): new ids go to the next table once the current one is this large and the next is empty.
HISTORY_ROTATE_BYTES: Final = 256 * 1024


# LISTEN/NOTIFY: how long the listening thread waits for notifications before it looks whether it
# should stop, and the longest pause between two attempts to reconnect after the connection is lost.
LISTEN_POLL: Final = 0.5


LISTEN_RETRY_MAX: Final = 2.0


# What a commit waits for before the server acknowledges it. ``on`` (the server's default) and
# ``remote_apply`` flush the WAL locally (and wait for synchronous standbys); ``off``, ``local`` and
# ``remote_write`` would let an acknowledged send be lost with the server or with its disk. A
# database, role or server configured weaker is overruled for the broker's own sessions.
DURABLE_COMMITS: Final = ("on", "remote_apply")


def durable_commits(conn: psycopg.Connection[TupleRow]) -> None:
    """Make ``conn``'s commits wait for the WAL flush (a pool's ``configure`` hook; autocommit)."""
    row = conn.execute("SHOW synchronous_commit").fetchone()
    if row is None or row[0] not in DURABLE_COMMITS:
        conn.execute("SET synchronous_commit = on")


def check_url(url: str) -> str:
    """A PostgreSQL connection URL, or ConfigurationError saying what is wrong with it."""
    if not isinstance(url, str):
        raise ConfigurationError(f"PostgreSQL store: the URL must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        check_hosts(parts.netloc)  # several hosts: host:port,host:port (each port a number)
        if "," not in parts.netloc:
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


def _message_from_row(row: TupleRow) -> MessageRecord:
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




def _key(ref: PartitionRef) -> tuple[bytes, int]:
    partition = _int64(ref.partition, f"partition number of {ref.entity!r}")
    assert partition is not None
    return _fold(ref.entity), partition


def _describe(exc: BaseException) -> str:
    sqlstate = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{text} [{sqlstate}]" if sqlstate else text


_Rows = list[TupleRow]


_Params = tuple[object, ...] | dict[str, object]  # one execution's parameters: positional or named


def _stored_from_row(row: TupleRow) -> StoredMessage:
    *message, token, until, owner = row
    return StoredMessage(record=_message_from_row(tuple(message)), lock_token=token, locked_until=until,
                         lock_owner=owner)


def _partition_params(ref: PartitionRef) -> dict[str, object]:
    entity, partition = _key(ref)
    return {"e": entity, "p": partition}


def _time(value: int, what: str) -> int:
    checked = _int64(value, what)
    assert checked is not None
    return checked
