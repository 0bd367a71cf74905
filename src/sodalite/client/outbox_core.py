"""The outbox file and the message codec, shared by the sync and asyncio ``Outbox``.

Theory of operation. The outbox is one SQLite file in WAL mode with ``synchronous=FULL``: a commit
returns only after the log is fsynced, so a row the outbox acknowledged survives ``kill -9`` of
the process (and a power cut). Table ``pending`` holds the messages in acceptance order (its
``seq`` is an AUTOINCREMENT key, never reused); a forwarder reads the oldest run of rows for one
entity, sends them, and deletes them in one transaction after the send returned. A crash between
the send and the delete sends those rows again on restart, with the same MessageId (the outbox
sets one at acceptance), so a receiver's DuplicateFilter or the entity's duplicate detection drops
the second copy: at-least-once, in order. A row the broker refuses for a reason that retrying
cannot fix (too large, entity missing, unauthorized) moves to table ``failed`` with the error, so
it does not block the rows behind it.

A file that SQLite cannot read, that fails ``PRAGMA quick_check``, or that is some other
application's database raises ``OutboxCorrupt`` naming the file; the outbox never writes to it.

The forwarders' decisions live here too, so the sync and asyncio ``Outbox`` only do the I/O: a run
of rows is decoded (``decode_rows``: a row that cannot be decoded is set aside alone), sent, and a
failed send is judged by ``after_refusal``: an availability error keeps the rows and stops
forwarding; a refused batch is split to find the refused row; a refused row is set aside.
"""

from __future__ import annotations

import base64
import datetime
import enum
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from azure.servicebus import ServiceBusMessage
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from sodalite.client.failover import is_entity_not_found, is_failover_error
from sodalite.errors import ConfigurationError, OutboxCorrupt

APPLICATION_ID = 0x534F4442  # "SODB": marks a SQLite file as a Sodalite outbox
SCHEMA_VERSION = 1
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS pending (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
    "entity TEXT NOT NULL, message TEXT NOT NULL, accepted_at TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS failed (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, entity TEXT NOT NULL, "
    "message TEXT NOT NULL, accepted_at TEXT NOT NULL, error TEXT NOT NULL, failed_at TEXT NOT NULL)",
]
_EXPECTED = {"pending": {"seq", "kind", "entity", "message", "accepted_at"},
             "failed": {"seq", "kind", "entity", "message", "accepted_at", "error", "failed_at"}}


@dataclass(frozen=True, slots=True)
class PendingRow:
    seq: int
    kind: str  # "queue" or "topic"
    entity: str
    message: str  # the codec's JSON


@dataclass(frozen=True, slots=True)
class FailedMessage:
    """A message the outbox could not forward, and why."""

    seq: int
    kind: str
    entity: str
    message: ServiceBusMessage | None  # None when the stored form itself could not be decoded
    error: str


def open_outbox(path: Path) -> sqlite3.Connection:
    """Open (creating if missing) an outbox file, or raise OutboxCorrupt."""
    existed = path.exists() and path.stat().st_size > 0
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as error:
        raise OutboxCorrupt(f"the outbox file {path} cannot be opened: {error}") from error
    try:
        if existed:
            _check(db, path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        if not existed:
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        for statement in _SCHEMA:
            db.execute(statement)
    except sqlite3.DatabaseError as error:
        db.close()
        raise OutboxCorrupt(f"the outbox file {path} is corrupt or not a SQLite database: {error}") from error
    except OutboxCorrupt:
        db.close()
        raise
    db.isolation_level = "DEFERRED"
    return db


def _check(db: sqlite3.Connection, path: Path) -> None:
    verdict = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
    if verdict != ["ok"]:
        raise OutboxCorrupt(f"the outbox file {path} is corrupt (SQLite quick_check: {'; '.join(verdict[:5])})")
    application_id = db.execute("PRAGMA application_id").fetchone()[0]
    if application_id != APPLICATION_ID:
        raise OutboxCorrupt(f"the file {path} is a SQLite database but not a Sodalite outbox "
                            f"(application_id {application_id:#x})")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise OutboxCorrupt(f"the outbox file {path} has schema version {version}; this release reads "
                            f"up to {SCHEMA_VERSION}")
    for table, columns in _EXPECTED.items():
        found = {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})").fetchall()}
        if found != columns:
            raise OutboxCorrupt(f"the outbox file {path} has a damaged schema: table {table} has columns "
                                f"{sorted(found)}, expected {sorted(columns)}")


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


# -- the codec: ServiceBusMessage <-> JSON text, with typed application property values ---------------

def _value(value: object) -> object:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {"timedelta": value.total_seconds()}
    raise TypeError(f"the outbox cannot store an application property of type {type(value).__name__}")


def _unvalue(value: object) -> Any:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"a stored property value is a string, null or a tagged object, not {value!r}")
    [(tag, inner)] = value.items()
    if tag == "bool":
        return bool(inner)
    if tag == "int":
        return int(inner)
    if tag == "float":
        return float(inner)
    if tag == "bytes":
        return base64.b64decode(inner)
    if tag == "uuid":
        return uuid.UUID(inner)
    if tag == "datetime":
        return datetime.datetime.fromisoformat(inner)
    if tag == "timedelta":
        return datetime.timedelta(seconds=inner)
    raise ValueError(f"unknown value tag {tag!r}")


_TEXT_FIELDS = ("message_id", "session_id", "content_type", "correlation_id", "subject", "to", "reply_to",
                "reply_to_session_id", "partition_key")


def encode(message: ServiceBusMessage) -> str:
    """The message as JSON; it must have a data body (the SDK's default for str and bytes)."""
    if not isinstance(message, ServiceBusMessage):
        raise TypeError(f"the outbox stores ServiceBusMessage objects, not {type(message).__name__}")
    if message.body_type is not AmqpMessageBodyType.DATA:
        raise TypeError("the outbox stores messages with a data body (str or bytes); this one has a "
                        f"{message.body_type.value} body")
    body = b"".join(bytes(chunk) for chunk in message.body)
    fields: dict[str, object] = {"body": base64.b64encode(body).decode("ascii")}
    for name in _TEXT_FIELDS:
        value = getattr(message, name)
        if value is not None:
            fields[name] = str(value)
    if message.time_to_live is not None:
        fields["time_to_live"] = message.time_to_live.total_seconds()
    if message.scheduled_enqueue_time_utc is not None:
        fields["scheduled_enqueue_time_utc"] = message.scheduled_enqueue_time_utc.isoformat()
    if message.application_properties:
        fields["application_properties"] = [
            [key.decode("utf-8") if isinstance(key, bytes) else str(key), _value(value)]
            for key, value in message.application_properties.items()]
    return json.dumps(fields, separators=(",", ":"))


def decode(text: str) -> ServiceBusMessage:
    fields = json.loads(text)
    message = ServiceBusMessage(base64.b64decode(fields["body"]))
    for name in _TEXT_FIELDS:
        if name in fields:
            setattr(message, name, fields[name])
    if "time_to_live" in fields:
        message.time_to_live = datetime.timedelta(seconds=fields["time_to_live"])
    if "scheduled_enqueue_time_utc" in fields:
        message.scheduled_enqueue_time_utc = datetime.datetime.fromisoformat(fields["scheduled_enqueue_time_utc"])
    if "application_properties" in fields:
        message.application_properties = {key: _unvalue(value) for key, value in fields["application_properties"]}
    return message


class OutboxStore:
    """The outbox file's operations, each one short transaction; thread-safe (one lock)."""

    def __init__(self, path: Path, batch_size: int) -> None:
        self.path = path
        self.batch_size = batch_size
        self._db = open_outbox(path)
        self._lock = threading.Lock()

    def accept(self, kind: str, entity: str, messages: list[ServiceBusMessage]) -> None:
        """Store ``messages`` (a MessageId set where missing); returns once they are durable."""
        for each in messages:
            if isinstance(each, ServiceBusMessage) and each.message_id is None:
                each.message_id = str(uuid.uuid4())  # so a resend after a crash can be recognised
        rows = [(kind, entity, encode(each), now_text()) for each in messages]
        with self._lock, self._db:
            self._db.executemany("INSERT INTO pending (kind, entity, message, accepted_at) VALUES (?, ?, ?, ?)", rows)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pending").fetchone()[0])

    def head(self) -> list[PendingRow]:
        """The oldest run of rows for one entity, at most ``batch_size``."""
        with self._lock:
            rows = self._db.execute("SELECT seq, kind, entity, message FROM pending ORDER BY seq LIMIT ?",
                                    (self.batch_size,)).fetchall()
        run: list[PendingRow] = []
        for seq, kind, entity, text in rows:
            if run and (kind, entity) != (run[0].kind, run[0].entity):
                break
            run.append(PendingRow(int(seq), str(kind), str(entity), str(text)))
        return run

    def forwarded(self, rows: list[PendingRow]) -> None:
        with self._lock, self._db:
            self._db.executemany("DELETE FROM pending WHERE seq = ?", [(row.seq,) for row in rows])

    def fail(self, rows: list[PendingRow], error: str) -> None:
        with self._lock, self._db:
            for row in rows:
                self._db.execute("INSERT INTO failed (seq, kind, entity, message, accepted_at, error, failed_at) "
                                 "SELECT seq, kind, entity, message, accepted_at, ?, ? FROM pending WHERE seq = ?",
                                 (error, now_text(), row.seq))
                self._db.execute("DELETE FROM pending WHERE seq = ?", (row.seq,))

    def failed(self) -> list[FailedMessage]:
        with self._lock:
            rows = self._db.execute("SELECT seq, kind, entity, message, error FROM failed ORDER BY seq").fetchall()
        result = []
        for seq, kind, entity, text, error in rows:
            try:
                message: ServiceBusMessage | None = decode(text)
            except Exception:
                message = None
            result.append(FailedMessage(int(seq), str(kind), str(entity), message, str(error)))
        return result

    def close(self) -> None:
        with self._lock:
            self._db.close()


def check_kind(kind: str) -> None:
    if kind not in ("queue", "topic"):
        raise ConfigurationError(f"kind must be 'queue' or 'topic', not {kind!r}")


def batch_of(message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> list[ServiceBusMessage]:
    return [message] if isinstance(message, ServiceBusMessage) else list(message)


# ---- forwarding decisions, shared by the sync and asyncio forwarders -----------------------------

class ForwardingClient(Protocol):
    """What an outbox forwards through: a ServiceBusClient or a ReplicatedClient, sync or asyncio."""

    def get_queue_sender(self, queue_name: str) -> object: ...
    def get_topic_sender(self, topic_name: str) -> object: ...


def check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ConfigurationError(f"Outbox batch_size must be at least 1, not {batch_size}")


def check_can_forward(client: ForwardingClient | None) -> ForwardingClient:
    if client is None:
        raise ConfigurationError("this Outbox has no client to forward through")
    return client


def make_sender(client: ForwardingClient, kind: str, entity: str) -> object:
    """The SDK sender for ``entity`` (making one opens nothing: the SDK connects on the first send)."""
    return client.get_queue_sender(entity) if kind == "queue" else client.get_topic_sender(entity)


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A stored row that cannot be decoded: it goes to ``failed`` with ``error`` so it blocks nothing."""

    row: PendingRow
    error: str


def decode_rows(rows: list[PendingRow]) -> list[ServiceBusMessage] | Undecodable:
    """The messages of ``rows`` in order, or the first row that cannot be decoded."""
    messages: list[ServiceBusMessage] = []
    for row in rows:
        try:
            messages.append(decode(row.message))
        except Exception as error:  # a damaged row must not block the rest
            return Undecodable(row, f"the stored message cannot be decoded: {error}")
    return messages


def send_payload(messages: list[ServiceBusMessage]) -> ServiceBusMessage | list[ServiceBusMessage]:
    """What one send carries: a lone message as itself (the SDK sends it unbatched), else the list."""
    return messages if len(messages) > 1 else messages[0]


class AfterRefusal(enum.Enum):
    """What a forwarder does when a send of ``rows`` failed."""

    KEEP = "keep"  # the namespace may be unavailable: stop forwarding, keep the rows (raise the error)
    SPLIT = "split"  # a batch was refused: send its first row alone to find the one the broker refuses
    SET_ASIDE = "set-aside"  # one row refused for good: move it to ``failed`` with ``refusal_text``


def after_refusal(rows: list[PendingRow], error: BaseException) -> AfterRefusal:
    if is_failover_error(error):
        return AfterRefusal.KEEP
    return AfterRefusal.SPLIT if len(rows) > 1 else AfterRefusal.SET_ASIDE


def refusal_text(error: BaseException) -> str:
    if is_entity_not_found(error) and not isinstance(error, MessagingEntityNotFoundError):
        # The put-token was answered 404: the SDK says only "authentication", the answer says which entity.
        inner = getattr(error, "inner_exception", None) or error
        said = " ".join(str(inner).split())
        return f"MessagingEntityNotFound: the entity does not exist (its put-token was answered 404): {said}"
    return f"{type(error).__name__}: {error}"
