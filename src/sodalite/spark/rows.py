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
import uuid
from typing import Any, Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.columns import COLUMNS as COLUMNS
from sodalite.amqp.columns import CONTENT_TYPE as _CONTENT_TYPE
from sodalite.amqp.columns import CORRELATION_ID as _CORRELATION_ID
from sodalite.amqp.columns import DEAD_LETTER_DESCRIPTION as DEAD_LETTER_DESCRIPTION
from sodalite.amqp.columns import DEAD_LETTER_REASON as DEAD_LETTER_REASON
from sodalite.amqp.columns import DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE
from sodalite.amqp.columns import KINDS as KINDS
from sodalite.amqp.columns import MESSAGE_ID as _MESSAGE_ID
from sodalite.amqp.columns import PARTITION_KEY as PARTITION_KEY
from sodalite.amqp.columns import PARTITION_SHIFT as PARTITION_SHIFT
from sodalite.amqp.columns import PROPERTY_COLUMNS as _PROPERTY_COLUMNS
from sodalite.amqp.columns import REPLY_TO as _REPLY_TO
from sodalite.amqp.columns import REPLY_TO_SESSION_ID as _REPLY_TO_SESSION_ID
from sodalite.amqp.columns import SCHEDULED_ENQUEUE_TIME as SCHEDULED_ENQUEUE_TIME
from sodalite.amqp.columns import SCHEMA as SCHEMA
from sodalite.amqp.columns import SESSION_ID as _SESSION_ID
from sodalite.amqp.columns import STATES as STATES
from sodalite.amqp.columns import SUBJECT as _SUBJECT
from sodalite.amqp.columns import TO as _TO
from sodalite.amqp.columns import body as _body_column
from sodalite.amqp.columns import render as render
from sodalite.amqp.columns import text as _text
from sodalite.amqp.types import Symbol, Timestamp, UInt
from sodalite.spark import sections


def _row(payload: bytes, application: bool, original: bool) -> tuple[Any, ...]:
    """One row in COLUMNS order, timestamps as integer microseconds; ``applicationProperties`` is
    None unless ``application``, ``amqpMessage`` None unless ``original`` (decoding only what is read)."""
    w = sections.walk(payload, application)
    header, properties, annotations = w.header, w.properties, w.annotations
    body = _body_column(payload, w.bodies)
    sequence_number = annotations.get("x-opt-sequence-number")
    state = annotations.get("x-opt-message-state")
    scheduled = annotations.get(SCHEDULED_ENQUEUE_TIME)
    enqueued = annotations.get("x-opt-enqueued-time")
    partition_key = annotations.get(PARTITION_KEY)
    dead_letter_source = annotations.get(DEAD_LETTER_SOURCE)
    props = {}
    reason = description = None
    if application:
        app = w.application
        if app:
            props = {k if isinstance(k, str) else str(k): v if v is None or isinstance(v, str) else render(v)
                     for k, v in app.items()}
            reason = props.get(DEAD_LETTER_REASON)
            description = props.get(DEAD_LETTER_DESCRIPTION)
    return (
        body,
        _text(properties[_MESSAGE_ID]),
        _text(properties[_SESSION_ID]),
        None if partition_key is None else _text(partition_key),
        _text(properties[_CORRELATION_ID]),
        _text(properties[_SUBJECT]),
        _text(properties[_CONTENT_TYPE]),
        _text(properties[_TO]),
        _text(properties[_REPLY_TO]),
        _text(properties[_REPLY_TO_SESSION_ID]),
        None if header[2] is None else int(header[2]),
        None if scheduled is None else int(scheduled) * 1000,
        None if enqueued is None else int(enqueued) * 1000,
        None if sequence_number is None else int(sequence_number),
        None if sequence_number is None else int(sequence_number) >> PARTITION_SHIFT,
        int(header[4] or 0),
        None if dead_letter_source is None else _text(dead_letter_source),
        reason,
        description,
        props if application else None,
        STATES.get(int(state), str(state)) if state is not None else "active",
        w.original() if original else None,
    )


_TIMESTAMP_COLUMNS: Final = (COLUMNS.index("scheduledEnqueueTime"), COLUMNS.index("enqueuedTime"))


def row_from_peeked(payload: bytes) -> tuple[Any, ...]:
    """One row (in COLUMNS order, timestamps as datetimes) from a message as ``$management`` peek returns it."""
    row = list(_row(payload, True, True))
    for index in _TIMESTAMP_COLUMNS:
        if row[index] is not None:
            row[index] = datetime.datetime.fromtimestamp(row[index] / 1_000_000, datetime.UTC)
    return tuple(row)


_ARROW_TYPES: Final = {"binary": "binary", "string": "string", "long": "int64", "int": "int32",
                       "timestamp": "timestamp", "map<string,string>": "map"}


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    arrow = _ARROW_TYPES[kind]
    if arrow == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if arrow == "map":
        return pa.map_(pa.string(), pa.string())
    return pa.type_for_alias(arrow)


def arrow_schema(names: tuple[str, ...] = COLUMNS) -> Any:
    """The columns ``names`` of SCHEMA as a pyarrow schema (timestamps in microseconds, UTC)."""
    import pyarrow as pa

    return pa.schema([pa.field(name, _arrow_type(KINDS[name])) for name in names])


_MAP_COLUMN: Final = COLUMNS.index("applicationProperties")
_ORIGINAL_COLUMN: Final = COLUMNS.index("amqpMessage")
_schemas: dict[tuple[str, ...], Any] = {}


def _arrow_column(values: tuple[Any, ...], kind: Any, is_map: bool) -> Any:
    import pyarrow as pa

    if not is_map:
        return pa.array(values, type=kind)
    offsets = [0]
    keys: list[str] = []
    items: list[str | None] = []
    for m in values:
        keys.extend(m)
        items.extend(m.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=pa.string()),
                                   pa.array(items, type=pa.string()))


def peeked_batch(payloads: list[bytes], names: tuple[str, ...] = COLUMNS, extra: dict[str, Any] | None = None) -> Any:
    """Peeked messages as one pyarrow RecordBatch of the columns ``names`` (SCHEMA's, in any order, plus
    any in ``extra``: a column name to the value every row takes), built column by column and
    decoding only what those columns need."""
    import pyarrow as pa

    key = names
    schema = _schemas.get(key)
    if schema is None:
        fields = [pa.field(n, pa.string() if extra and n in extra else _arrow_type(KINDS[n])) for n in names]
        schema = _schemas[key] = pa.schema(fields)
    application = "applicationProperties" in names or "deadLetterReason" in names \
        or "deadLetterErrorDescription" in names
    original = "amqpMessage" in names
    columns = list(zip(*[_row(p, application, original) for p in payloads], strict=True)) if payloads \
        else [()] * len(COLUMNS)
    arrays = []
    for name, field in zip(names, schema, strict=True):
        if extra and name in extra:
            arrays.append(pa.array([extra[name]] * len(payloads), type=field.type))
        else:
            index = _INDEX[name]
            arrays.append(_arrow_column(columns[index], field.type, index == _MAP_COLUMN))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_INDEX: Final = {name: i for i, name in enumerate(COLUMNS)}


def record_batch(batch: list[tuple[Any, ...]]) -> Any:
    """Rows (COLUMNS order, as :func:`row_from_peeked` gives them) as one pyarrow RecordBatch."""
    import pyarrow as pa

    schema = arrow_schema()
    columns = list(zip(*batch, strict=True))
    return pa.RecordBatch.from_arrays(
        [_arrow_column(c, f.type, i == _MAP_COLUMN) for i, (c, f) in enumerate(zip(columns, schema, strict=True))],
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
        w = sections.walk(_as_bytes(original, "amqpMessage"))
        header = w.header[:3]
        annotations = w.client_annotations
        properties = list(w.properties)
        application = dict(w.application)
        bodies = w.body_bytes()
        footer = [w.footer] if w.footer else []
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
    return sections.assemble(header, annotations, properties, application, b"".join(bodies) + b"".join(footer))


def _body_of(sections: list[bytes]) -> bytes:
    joined = b"".join(sections)
    return _body_column(joined, amqp_message.split_sections(joined)) if joined else b""
