"""Messages as Spark rows and back: the data source's schema (docs/spark.md) over encoded AMQP messages.

Reading turns a peeked message (what ``$management`` peek returns: a header carrying the delivery
count, the broker's annotations in front of the client's, then the sections the client sent) into
one row. ``amqpMessage`` is the message as its sender encoded it, without the broker's annotations,
so the sink can send a faithful copy: typed application properties and system properties intact.

Writing builds a message from a row: from ``amqpMessage`` when present, with every other non-null
column overriding what it says, else from the columns alone. Columns only the broker sets
(sequenceNumber, enqueuedTime, state, deliveryCount, partition, the dead-letter fields) are never
sent; an application property whose string rendering equals the typed value in ``amqpMessage``
keeps its type.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any, Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, Symbol, Timestamp, UInt, ULong

SCHEMA: Final = (
    "body binary, messageId string, sessionId string, partitionKey string, correlationId string, "
    "subject string, contentType string, to string, replyTo string, replyToSessionId string, "
    "timeToLive long, scheduledEnqueueTime timestamp, enqueuedTime timestamp, sequenceNumber long, "
    "partition int, deliveryCount int, deadLetterSource string, deadLetterReason string, "
    "deadLetterErrorDescription string, applicationProperties map<string,string>, state string, "
    "amqpMessage binary"
)
COLUMNS: Final = tuple(part.strip().split(" ")[0] for part in SCHEMA.split(", "))

PARTITION_SHIFT: Final = 48  # a sequence number's upper 16 bits name its partition
SERVICE_OWNED: Final = frozenset({
    "x-opt-sequence-number", "x-opt-enqueued-time", "x-opt-locked-until", "x-opt-lock-token",
    "x-opt-deadletter-source", "x-opt-enqueue-sequence-number", "x-opt-message-state", "x-opt-partition-id",
})
PARTITION_KEY: Final = "x-opt-partition-key"
SCHEDULED_ENQUEUE_TIME: Final = "x-opt-scheduled-enqueue-time"
DEAD_LETTER_SOURCE: Final = "x-opt-deadletter-source"
DEAD_LETTER_REASON: Final = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION: Final = "DeadLetterErrorDescription"
STATES: Final = {0: "active", 1: "deferred", 2: "scheduled"}

# properties list positions (AMQP 1.0, 3.2.4)
_MESSAGE_ID, _TO, _SUBJECT, _REPLY_TO, _CORRELATION_ID, _CONTENT_TYPE = 0, 2, 3, 4, 5, 6
_SESSION_ID, _REPLY_TO_SESSION_ID = 10, 12
_PROPERTY_COLUMNS: Final = (("messageId", _MESSAGE_ID), ("to", _TO), ("subject", _SUBJECT),
                            ("replyTo", _REPLY_TO), ("correlationId", _CORRELATION_ID),
                            ("contentType", _CONTENT_TYPE), ("sessionId", _SESSION_ID),
                            ("replyToSessionId", _REPLY_TO_SESSION_ID))


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _moment(ms: Any) -> datetime.datetime | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.UTC)


def render(value: Any) -> str | None:
    """An application property as the map<string,string> column shows it: strings as they are,
    anything else as JSON (timestamps as ISO 8601, binary as hex, uuids as text)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(_jsonable(value))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Timestamp):
        moment = _moment(value)
        return moment.isoformat() if moment is not None else None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def _body(payload: bytes, sections: list[amqp_message.Section]) -> bytes:
    parts: list[bytes] = []
    for s in sections:
        if s.code == amqp_message.DATA:
            parts.append(amqp_message.binary_value(payload, s))
        elif s.code == amqp_message.AMQP_VALUE:
            value = amqp_message.section_value(payload, s)
            if isinstance(value, bytes):
                parts.append(value)
            elif isinstance(value, str):
                parts.append(value.encode("utf-8"))
            else:
                parts.append(json.dumps(_jsonable(value)).encode("utf-8"))
        elif s.code == amqp_message.AMQP_SEQUENCE:
            parts.append(json.dumps(_jsonable(amqp_message.section_value(payload, s))).encode("utf-8"))
    return b"".join(parts)


def row_from_peeked(payload: bytes) -> tuple[Any, ...]:
    """One row (in COLUMNS order) from a message as ``$management`` peek returns it."""
    sections = amqp_message.split_sections(payload)
    header: list[Any] = []
    annotations: dict[str, Any] = {}
    properties: list[Any] = []
    application: dict[str, Any] = {}
    kept: list[bytes] = []
    client_annotations: dict[Any, Any] = {}
    for s in sections:
        if s.code == amqp_message.HEADER:
            value = amqp_message.section_value(payload, s)
            header = list(value) if isinstance(value, list) else []
        elif s.code == amqp_message.MESSAGE_ANNOTATIONS:
            value = amqp_message.section_value(payload, s)
            if isinstance(value, dict):
                annotations = {str(k): v for k, v in value.items()}
                client_annotations = {k: v for k, v in value.items() if str(k) not in SERVICE_OWNED}
        elif s.code == amqp_message.DELIVERY_ANNOTATIONS:
            continue
        else:
            if s.code == amqp_message.PROPERTIES:
                value = amqp_message.section_value(payload, s)
                properties = list(value) if isinstance(value, list) else []
            elif s.code == amqp_message.APPLICATION_PROPERTIES:
                value = amqp_message.section_value(payload, s)
                if isinstance(value, dict):
                    application = {str(k): v for k, v in value.items()}
            kept.append(payload[s.start : s.end])
    header += [None] * (5 - len(header))
    properties += [None] * (13 - len(properties))
    original = bytearray()
    if any(v is not None for v in header[:3]):
        original += amqp_message.encode_section(amqp_message.HEADER, [header[0], header[1],
                                                                      None if header[2] is None else UInt(header[2])])
    if client_annotations:
        original += amqp_message.encode_annotations(amqp_message.map_entries(client_annotations),
                                                    len(client_annotations))
    original += b"".join(kept)
    sequence_number = annotations.get("x-opt-sequence-number")
    state = annotations.get("x-opt-message-state")
    reason = application.get(DEAD_LETTER_REASON)
    description = application.get(DEAD_LETTER_DESCRIPTION)
    return (
        _body(payload, sections),
        _text(properties[_MESSAGE_ID]),
        _text(properties[_SESSION_ID]),
        _text(annotations.get(PARTITION_KEY)),
        _text(properties[_CORRELATION_ID]),
        _text(properties[_SUBJECT]),
        _text(properties[_CONTENT_TYPE]),
        _text(properties[_TO]),
        _text(properties[_REPLY_TO]),
        _text(properties[_REPLY_TO_SESSION_ID]),
        None if header[2] is None else int(header[2]),
        _moment(annotations.get(SCHEDULED_ENQUEUE_TIME)),
        _moment(annotations.get("x-opt-enqueued-time")),
        None if sequence_number is None else int(sequence_number),
        None if sequence_number is None else int(sequence_number) >> PARTITION_SHIFT,
        int(header[4] or 0),
        _text(annotations.get(DEAD_LETTER_SOURCE)),
        None if reason is None else str(reason),
        None if description is None else str(description),
        {k: render(v) for k, v in application.items()},
        STATES.get(int(state), str(state)) if state is not None else "active",
        bytes(original),
    )


_ARROW_TYPES: Final = {"binary": "binary", "string": "string", "long": "int64", "int": "int32",
                       "timestamp": "timestamp", "map<string,string>": "map"}


def arrow_schema() -> Any:
    """SCHEMA as a pyarrow schema (timestamps in microseconds, UTC)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    fields = []
    for part in SCHEMA.split(", "):
        name, kind = part.strip().split(" ", 1)
        arrow = _ARROW_TYPES[kind]
        if arrow == "timestamp":
            fields.append(pa.field(name, pa.timestamp("us", tz="UTC")))
        elif arrow == "map":
            fields.append(pa.field(name, pa.map_(pa.string(), pa.string())))
        else:
            fields.append(pa.field(name, pa.type_for_alias(arrow)))
    return pa.schema(fields)


_MAP_COLUMN: Final = COLUMNS.index("applicationProperties")
_schema_cache: list[Any] = []


def record_batch(batch: list[tuple[Any, ...]]) -> Any:
    """Rows (COLUMNS order) as one pyarrow RecordBatch of :func:`arrow_schema`."""
    import pyarrow as pa

    if not _schema_cache:
        _schema_cache.append(arrow_schema())
    schema = _schema_cache[0]
    columns = list(zip(*batch, strict=True))
    columns[_MAP_COLUMN] = tuple(None if m is None else list(m.items()) for m in columns[_MAP_COLUMN])
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                                      schema=schema)


# ---- writing ----------------------------------------------------------------------------------


def _millis(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:  # Spark hands timestamps over as naive local times
            value = value.astimezone()
        return int(value.timestamp() * 1000)
    return int(value)


def _as_bytes(value: Any, column: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"column '{column}' must be binary or string, not {type(value).__name__}")


def derived_message_id(source: str, row: dict[str, Any]) -> str | None:
    """A MessageId that a replay of the same source message reproduces: source entity, partition and
    sequence number. None when the row does not say where it came from."""
    sequence_number = row.get("sequenceNumber")
    if sequence_number is None:
        return None
    partition = row.get("partition")
    if partition is None:
        partition = int(sequence_number) >> PARTITION_SHIFT
    return f"{source}:{partition}:{sequence_number}"


def message_from_row(row: dict[str, Any], source: str) -> bytes:
    """The encoded message a row describes (see the module docstring); raises ValueError without a body."""
    original = row.get("amqpMessage")
    body = row.get("body")
    if body is None and original is None:
        raise ValueError("the row has no 'body' (a null body and no amqpMessage)")
    header: list[Any] = [None, None, None]
    annotations: dict[Any, Any] = {}
    properties: list[Any] = [None] * 13
    application: dict[Any, Any] = {}
    bodies: list[bytes] = []
    footer: list[bytes] = []
    if original is not None:
        payload = _as_bytes(original, "amqpMessage")
        for s in amqp_message.split_sections(payload):
            if s.code == amqp_message.HEADER:
                value = amqp_message.section_value(payload, s)
                if isinstance(value, list):
                    header = (list(value) + [None] * 3)[:3]
            elif s.code == amqp_message.MESSAGE_ANNOTATIONS:
                value = amqp_message.section_value(payload, s)
                if isinstance(value, dict):
                    annotations = {k: v for k, v in value.items() if str(k) not in SERVICE_OWNED}
            elif s.code == amqp_message.PROPERTIES:
                value = amqp_message.section_value(payload, s)
                if isinstance(value, list):
                    properties = (list(value) + [None] * 13)[:13]
            elif s.code == amqp_message.APPLICATION_PROPERTIES:
                value = amqp_message.section_value(payload, s)
                if isinstance(value, dict):
                    application = dict(value)
            elif s.code in (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE):
                bodies.append(payload[s.start : s.end])
            elif s.code == amqp_message.FOOTER:
                footer.append(payload[s.start : s.end])
    if body is not None:
        new_body = _as_bytes(body, "body")
        if original is None or _body_of(bodies) != new_body:
            bodies = [amqp_message.encode_section(amqp_message.DATA, new_body)]
    for column, index in _PROPERTY_COLUMNS:
        value = row.get(column)
        if value is not None and _text(properties[index]) != value:
            properties[index] = Symbol(value) if index == _CONTENT_TYPE else value
    if properties[_MESSAGE_ID] is None:
        properties[_MESSAGE_ID] = derived_message_id(source, row) or str(uuid.uuid4())
    if row.get("partitionKey") is not None:
        annotations[Symbol(PARTITION_KEY)] = row["partitionKey"]
    if row.get("scheduledEnqueueTime") is not None:
        annotations[Symbol(SCHEDULED_ENQUEUE_TIME)] = Timestamp(_millis(row["scheduledEnqueueTime"]))
    if row.get("timeToLive") is not None:
        header[2] = UInt(min(int(row["timeToLive"]), 0xFFFFFFFF))
    for key, value in (row.get("applicationProperties") or {}).items():
        if render(application.get(key)) != value:
            application[key] = value
    out = bytearray()
    if any(v is not None for v in header):
        out += amqp_message.encode_section(amqp_message.HEADER, header)
    if annotations:
        out += amqp_message.encode_annotations(amqp_message.map_entries(annotations), len(annotations))
    encode_value(Described(ULong(amqp_message.PROPERTIES), _trimmed(properties)), out)
    if application:
        encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), application), out)
    out += b"".join(bodies) + b"".join(footer)
    return bytes(out)


def _body_of(sections: list[bytes]) -> bytes:
    joined = b"".join(sections)
    return _body(joined, amqp_message.split_sections(joined)) if joined else b""


def _trimmed(fields: list[Any]) -> list[Any]:
    end = len(fields)
    while end and fields[end - 1] is None:
        end -= 1
    return fields[:end]
