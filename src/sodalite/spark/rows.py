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
from collections.abc import Mapping, Sequence
from typing import Any, Final, SupportsInt, cast

from sodalite.amqp import message as amqp_message
from sodalite.amqp.types import AmqpMap, AmqpValue, Symbol, Timestamp, UInt
from sodalite.message import arrow, sections
from sodalite.message.columns import COLUMNS as COLUMNS
from sodalite.message.columns import DEAD_LETTER_DESCRIPTION as DEAD_LETTER_DESCRIPTION
from sodalite.message.columns import DEAD_LETTER_REASON as DEAD_LETTER_REASON
from sodalite.message.columns import DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE
from sodalite.message.columns import KINDS as KINDS
from sodalite.message.columns import PARTITION_KEY as PARTITION_KEY
from sodalite.message.columns import PARTITION_SHIFT as PARTITION_SHIFT
from sodalite.message.columns import PROPERTY_COLUMNS as _PROPERTY_COLUMNS
from sodalite.message.columns import SCHEDULED_ENQUEUE_TIME as SCHEDULED_ENQUEUE_TIME
from sodalite.message.columns import SCHEMA as SCHEMA
from sodalite.message.columns import STATES as STATES
from sodalite.message.columns import application_properties as _application_column
from sodalite.message.columns import body as _body_column
from sodalite.message.columns import render as render
from sodalite.message.columns import state as _state_column
from sodalite.message.names import (
    CONTENT_TYPE as _CONTENT_TYPE,
)
from sodalite.message.names import (
    CORRELATION_ID as _CORRELATION_ID,
)
from sodalite.message.names import (
    ENQUEUED_TIME,
    MESSAGE_STATE,
    SEQUENCE_NUMBER,
)
from sodalite.message.names import (
    MESSAGE_ID as _MESSAGE_ID,
)
from sodalite.message.names import (
    REPLY_TO as _REPLY_TO,
)
from sodalite.message.names import (
    REPLY_TO_SESSION_ID as _REPLY_TO_SESSION_ID,
)
from sodalite.message.names import (
    SESSION_ID as _SESSION_ID,
)
from sodalite.message.names import (
    SUBJECT as _SUBJECT,
)
from sodalite.message.names import (
    TO as _TO,
)
from sodalite.message.names import (
    text as _text,
)
from sodalite.message.sections import number as _number

Row = tuple[object, ...]  # one row in COLUMNS order
ColumnValues = tuple[object, ...]  # one column's values, a row each


def _row(payload: bytes, application: bool, original: bool) -> Row:
    """One row in COLUMNS order, timestamps as integer microseconds; ``applicationProperties`` is
    None unless ``application``, ``amqpMessage`` None unless ``original`` (decoding only what is read)."""
    w = sections.walk(payload, application)
    header, properties, annotations = w.header, w.properties, w.annotations
    body = _body_column(payload, w.bodies)
    sequence_number = _number(annotations.get(SEQUENCE_NUMBER))
    state = _number(annotations.get(MESSAGE_STATE))
    scheduled = _number(annotations.get(SCHEDULED_ENQUEUE_TIME))
    enqueued = _number(annotations.get(ENQUEUED_TIME))
    partition_key = annotations.get(PARTITION_KEY)
    dead_letter_source = annotations.get(DEAD_LETTER_SOURCE)
    props: dict[str, str | None] = {}
    reason = description = None
    if application:
        app = w.application
        if app:
            props = _application_column(app)
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
        _number(header[2]),
        None if scheduled is None else scheduled * 1000,
        None if enqueued is None else enqueued * 1000,
        sequence_number,
        None if sequence_number is None else sequence_number >> PARTITION_SHIFT,
        _number(header[4]) or 0,
        None if dead_letter_source is None else _text(dead_letter_source),
        reason,
        description,
        props if application else None,
        _state_column(state),
        w.original() if original else None,
    )


_TIMESTAMP_COLUMNS: Final = (COLUMNS.index("scheduledEnqueueTime"), COLUMNS.index("enqueuedTime"))


def row_from_peeked(payload: bytes) -> Row:
    """One row (in COLUMNS order, timestamps as datetimes) from a message as ``$management`` peek returns it."""
    row = list(_row(payload, True, True))
    for index in _TIMESTAMP_COLUMNS:
        if row[index] is not None:
            row[index] = datetime.datetime.fromtimestamp(_integer(row[index]) / 1_000_000, datetime.UTC)
    return tuple(row)


def arrow_schema(names: tuple[str, ...] = COLUMNS) -> Any:
    """The columns ``names`` of SCHEMA as a pyarrow schema (timestamps in microseconds, UTC)."""
    return arrow.schema(names)


def peeked_batch(payloads: list[bytes], names: tuple[str, ...] = COLUMNS,
                 extra: Mapping[str, object] | None = None) -> Any:
    """Peeked messages as one pyarrow RecordBatch of the columns ``names`` (SCHEMA's, in any order, plus
    any in ``extra``: a column name to the value every row takes), built column by column and
    decoding only what those columns need."""
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = arrow.schema(names, frozenset(extra or ()))
    application = "applicationProperties" in names or "deadLetterReason" in names \
        or "deadLetterErrorDescription" in names
    original = "amqpMessage" in names
    columns: list[ColumnValues] = list(zip(*[_row(p, application, original) for p in payloads], strict=True)) \
        if payloads else [()] * len(COLUMNS)
    arrays = []
    for name, field in zip(names, schema, strict=True):
        if extra and name in extra:
            arrays.append(pa.array([extra[name]] * len(payloads), type=field.type))
        else:
            index = _INDEX[name]
            arrays.append(arrow.array(columns[index], field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_INDEX: Final = {name: i for i, name in enumerate(COLUMNS)}


def record_batch(batch: Sequence[Row]) -> Any:
    """Rows (COLUMNS order, as :func:`row_from_peeked` gives them) as one pyarrow RecordBatch."""
    import pyarrow as pa

    schema = arrow_schema()
    columns = list(zip(*batch, strict=True))
    return pa.RecordBatch.from_arrays(
        [arrow.array(c, f.type) for c, f in zip(columns, schema, strict=True)],
        schema=schema)


# ---- writing ----------------------------------------------------------------------------------


def _millis(value: object) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:  # Spark hands timestamps over as naive local times
            value = value.astimezone()
        return int(value.timestamp() * 1000)
    return _integer(value)


def _integer(value: object) -> int:
    """A row's number as ``int()`` reads it (a value that is none raises, naming its type)."""
    return int(cast(SupportsInt, value))


def _as_bytes(value: object, column: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"column '{column}' must be binary or string, not {type(value).__name__}")


def derived_message_id(source: str, row: Mapping[str, object]) -> str | None:
    """A MessageId that a replay of the same source message reproduces: source entity, partition and
    sequence number. None when the row does not say where it came from."""
    sequence_number = row.get("sequenceNumber")
    if sequence_number is None:
        return None
    partition = row.get("partition")
    if partition is None:
        partition = _integer(sequence_number) >> PARTITION_SHIFT
    return f"{source}:{partition}:{sequence_number}"


def message_from_row(row: Mapping[str, object], source: str) -> bytes:
    """The encoded message a row describes (see the module docstring); raises ValueError without a body."""
    original = row.get("amqpMessage")
    body = row.get("body")
    if body is None and original is None:
        raise ValueError("the row has no 'body' (a null body and no amqpMessage)")
    header: list[AmqpValue] = [None, None, None]
    annotations: AmqpMap = {}
    properties: list[AmqpValue] = [None] * 13
    application: AmqpMap = {}
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
            properties[index] = Symbol(value) if index == _CONTENT_TYPE else value  # type: ignore[call-overload]
    if properties[_MESSAGE_ID] is None:
        properties[_MESSAGE_ID] = derived_message_id(source, row) or str(uuid.uuid4())
    partition_key = row.get("partitionKey")
    if partition_key is not None:
        annotations[Symbol(PARTITION_KEY)] = partition_key  # type: ignore[assignment]
    if row.get("scheduledEnqueueTime") is not None:
        annotations[Symbol(SCHEDULED_ENQUEUE_TIME)] = Timestamp(_millis(row["scheduledEnqueueTime"]))
    if row.get("timeToLive") is not None:
        header[2] = UInt(min(_integer(row["timeToLive"]), 0xFFFFFFFF))
    given: Mapping[str, AmqpValue] = row.get("applicationProperties") or {}  # type: ignore[assignment]
    for key, value in given.items():
        if render(application.get(key)) != value:
            application[key] = value
    return sections.assemble(header, annotations, properties, application, b"".join(bodies) + b"".join(footer))


def _body_of(sections: list[bytes]) -> bytes:
    joined = b"".join(sections)
    return _body_column(joined, amqp_message.split_sections(joined)) if joined else b""
