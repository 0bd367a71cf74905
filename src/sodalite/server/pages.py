"""Columnar pages: messages of one partition as an Arrow IPC stream of the columns asked for.

The Spark data source reads through them (``com.sodalite:peek-partition-columns``, docs/spark.md),
so its reader hands Spark the page as it arrives and does no work per row. The page is built here,
column by column, from the stored records: the system properties the store keeps as fields
(sequence number, enqueued time, delivery count, state, time to live, and the message id, session id
and partition key as the broker rendered them at append) are taken as they are, and the
record's encoded parts are walked only as far as the columns asked for need (the properties section
for the string properties, the application properties for that map, the body sections for
``body``, the client's annotations for the partition key, scheduled time, dead-letter source and
``amqpMessage``). Values are rendered by :mod:`sodalite.amqp.columns`, as the row path renders
them, so both give the same rows.

pyarrow is optional for the broker: without it :func:`available` is False, the operation answers
``amqp:not-implemented`` and the reader peeks messages instead (``com.sodalite:peek-partition``).

Building runs off the event loop (the management operation hands it to a thread); a page is bounded
by rows (:data:`MAX_ROWS`) and by the stored size of its messages (:data:`MAX_BYTES`, at least one
message whatever its size).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any, Final

from sodalite.amqp import columns as c
from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode_value, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import UInt
from sodalite.errors import ArgumentError
from sodalite.model.message import MessageRecord

DEFAULT_ROWS: Final = 1000
MAX_ROWS: Final = 10_000  # rows in one page at most, whatever the request asks
DEFAULT_BYTES: Final = 4 << 20
MAX_BYTES: Final = 16 << 20  # stored bytes of the messages in one page at most (at least one message)
_DELIVERY_ANNOTATIONS: Final = b"\x00\x53\x71"
_PROPERTY_NAMES: Final = frozenset(name for name, _ in c.PROPERTY_COLUMNS) - {"messageId", "sessionId"}
_APPLICATION_NAMES: Final = frozenset({"applicationProperties", "deadLetterReason", "deadLetterErrorDescription"})
_ANNOTATION_NAMES: Final = frozenset({"partitionKey", "scheduledEnqueueTime", "deadLetterSource"})
_UINT_MAX: Final = 0xFFFFFFFF
_OWNED_KEYS: Final = tuple(key.encode() for key in c.SERVICE_OWNED)  # as they appear in encoded entries


@functools.cache
def available() -> bool:
    """Whether pyarrow can be imported here (it is an optional dependency of the broker)."""
    try:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        return False
    return True


def columns(value: object) -> tuple[str, ...]:
    """The ``columns`` argument checked: a non-empty list of distinct column names of the schema."""
    names = list(value) if isinstance(value, list | tuple) else None
    if not names or not all(isinstance(n, str) for n in names):
        raise ArgumentError(f"'columns' must be a non-empty list of column names ({', '.join(c.COLUMNS)})")
    unknown = [n for n in names if n not in c.KINDS]
    if unknown:
        raise ArgumentError(f"'columns': {', '.join(map(repr, unknown))} is not a column "
                            f"(columns: {', '.join(c.COLUMNS)})")
    if len(set(names)) != len(names):
        raise ArgumentError("'columns' names a column twice")
    return tuple(names)


def within(records: Sequence[MessageRecord], max_bytes: int) -> Sequence[MessageRecord]:
    """The leading records whose stored sizes total at most ``max_bytes`` (at least one)."""
    used = 0
    for index, record in enumerate(records):
        used += record.size
        if used > max_bytes and index > 0:
            return records[:index]
    return records


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    if kind == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if kind == "map<string,string>":
        return pa.map_(pa.string(), pa.string())
    return {"binary": pa.binary(), "string": pa.string(), "long": pa.int64(), "int": pa.int32()}[kind]


@functools.cache
def _schema(names: tuple[str, ...]) -> Any:
    import pyarrow as pa

    return pa.schema([pa.field(name, _arrow_type(c.KINDS[name])) for name in names])


@functools.lru_cache(maxsize=256)
def _header(durable: bool | None, priority: int | None, ttl: int | None) -> bytes:
    """The header ``amqpMessage`` carries, as the row path re-encodes it from the peeked header:
    durable, priority and ttl (no delivery count), or nothing when all three are absent."""
    if durable is None and priority is None and ttl is None:
        return b""
    value, _ = decode_value(amqp_message.encode_header(durable, priority, ttl, None, 0), 3)
    h = (list(value) + [None] * 3)[:3]
    if h[0] is None and h[1] is None and h[2] is None:
        return b""
    return amqp_message.encode_section(amqp_message.HEADER, [h[0], h[1], None if h[2] is None else UInt(h[2])])


class _Annotations:
    """A record's client annotations: the entries not set by the broker (for ``amqpMessage``) and, when
    asked for, their values by key text."""

    __slots__ = ("count", "entries", "values")

    def __init__(self, record: MessageRecord, values: bool) -> None:
        self.values: dict[str, Any] = {}
        self.entries = record.annotations
        self.count = record.annotation_count
        if not self.count or not (values or any(key in record.annotations for key in _OWNED_KEYS)):
            return
        data, pos, kept, dropped = record.annotations, 0, [], False
        for _ in range(record.annotation_count):
            key, middle = decode_value(data, pos)
            value, after = decode_value(data, middle)
            text = key if isinstance(key, str) else str(key)
            self.values[text] = value
            if text in c.SERVICE_OWNED:
                dropped = True
            else:
                kept.append(data[pos:after])
            pos = after
        if dropped:
            self.entries, self.count = b"".join(kept), len(kept)


class _Tail:
    """A record's tail (properties .. footer), walked for what the columns need."""

    __slots__ = ("application", "bodies", "kept", "properties")

    def __init__(self, tail: bytes, properties: bool, application: bool, body: bool) -> None:
        if tail.startswith(_DELIVERY_ANNOTATIONS):  # the sender's delivery annotations: not part of the message
            tail = tail[skip_value(tail, 3):]
        self.kept = tail
        self.properties: list[Any] = [None] * 13
        self.application: dict[Any, Any] = {}
        self.bodies: list[amqp_message.Section] = []
        if not (properties or application or body):
            return
        pos, n = 0, len(tail)
        while pos < n:
            if tail[pos] == 0x00 and tail[pos + 1] == 0x53:
                code, value_start = tail[pos + 2], pos + 3
            else:  # a symbolic or long descriptor: the general slicer names every section
                self._slow(tail, properties, application)
                return
            if code == amqp_message.PROPERTIES and properties:
                self.properties, end = _properties(tail, value_start)
            elif code == amqp_message.APPLICATION_PROPERTIES and application:
                value, end = decode_value(tail, value_start)
                if isinstance(value, dict):
                    self.application = value
            else:
                end = skip_value(tail, value_start)
                if code in (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE):
                    self.bodies.append(amqp_message.Section(code, pos, value_start, end))
            pos = end

    def _slow(self, tail: bytes, properties: bool, application: bool) -> None:
        self.bodies = []
        for s in amqp_message.split_sections(tail):
            if s.code == amqp_message.PROPERTIES and properties:
                value = amqp_message.section_value(tail, s)
                if isinstance(value, list):
                    self.properties = (value + [None] * 13)[:13]
            elif s.code == amqp_message.APPLICATION_PROPERTIES and application:
                value = amqp_message.section_value(tail, s)
                if isinstance(value, dict):
                    self.application = value
            elif s.code in (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE):
                self.bodies.append(s)


_u32u32: Final = struct.Struct(">II")


def _properties(tail: bytes, pos: int) -> tuple[list[Any], int]:
    """The properties list (13 fields, padded) and where it ends: nulls and short strings and symbols
    (nearly every field a client sets) read here, anything else by the codec, as the row path reads it."""
    code = tail[pos]
    if code == 0xC0:
        size, count, at = tail[pos + 1], tail[pos + 2], pos + 3
        end = pos + 2 + size
    elif code == 0xD0:
        size, count = _u32u32.unpack_from(tail, pos + 1)
        at, end = pos + 9, pos + 5 + size
    else:
        value, end = decode_value(tail, pos)
        return ((value + [None] * 13)[:13] if isinstance(value, list) else [None] * 13), end
    fields: list[Any] = [None] * max(13, count)
    for index in range(count):
        kind = tail[at]
        if kind == 0x40:
            at += 1
        elif kind == 0xA1 or kind == 0xA3:
            length = tail[at + 1]
            fields[index] = tail[at + 2 : at + 2 + length].decode("utf-8" if kind == 0xA1 else "ascii")
            at += 2 + length
        else:
            fields[index], at = decode_value(tail, at)
    if at != end:
        raise DecodeError("the properties list's size does not match its fields")
    return fields[:13], end


def _micros(value: Any) -> int | None:
    return None if value is None else int(value) * 1000


def build(records: Sequence[MessageRecord], names: tuple[str, ...]) -> bytes:
    """``records`` as an Arrow IPC stream of one record batch with the columns ``names``."""
    import pyarrow as pa

    wanted = frozenset(names)
    need_properties = not wanted.isdisjoint(_PROPERTY_NAMES)
    need_application = not wanted.isdisjoint(_APPLICATION_NAMES)
    need_body = "body" in wanted
    need_values = not wanted.isdisjoint(_ANNOTATION_NAMES)
    need_annotations = need_values or "amqpMessage" in wanted
    need_tail = need_properties or need_application or need_body or "amqpMessage" in wanted
    values: dict[str, list[Any]] = {name: [] for name in names}
    try:
        tails = [_Tail(r.tail, need_properties, need_application, need_body) for r in records] if need_tail else []
        notes = [_Annotations(r, need_values) for r in records] if need_annotations else []
        apps = [c.application_properties(t.application) for t in tails] if need_application else []
    except (IndexError, KeyError, ValueError, OverflowError, RecursionError, DecodeError) as exc:
        raise ArgumentError(f"a stored message could not be read as columns: {exc}") from None
    for name in names:
        out = values[name]
        if name == "body":
            out.extend(c.body(t.kept, t.bodies) for t in tails)
        elif name == "messageId":
            out.extend(r.message_id for r in records)
        elif name == "sessionId":
            out.extend(r.session_id for r in records)
        elif name in _PROPERTY_NAMES:
            index = dict(c.PROPERTY_COLUMNS)[name]
            out.extend(c.text(t.properties[index]) for t in tails)
        elif name == "partitionKey":
            out.extend(r.partition_key if r.partition_key is not None else c.text(a.values.get(c.PARTITION_KEY))
                       for r, a in zip(records, notes, strict=True))
        elif name == "scheduledEnqueueTime":
            out.extend(_micros(a.values.get(c.SCHEDULED_ENQUEUE_TIME)) for a in notes)
        elif name == "deadLetterSource":
            out.extend(c.text(a.values.get(c.DEAD_LETTER_SOURCE)) for a in notes)
        elif name == "timeToLive":
            out.extend(None if r.time_to_live is None else min(r.time_to_live, _UINT_MAX) for r in records)
        elif name == "enqueuedTime":
            out.extend(r.enqueued_time * 1000 for r in records)
        elif name == "sequenceNumber":
            out.extend(r.sequence_number for r in records)
        elif name == "partition":
            out.extend(r.sequence_number >> c.PARTITION_SHIFT for r in records)
        elif name == "deliveryCount":
            out.extend(r.delivery_count for r in records)
        elif name == "state":
            out.extend(c.state(int(r.state)) for r in records)
        elif name == "applicationProperties":
            out.extend(apps)
        elif name == "deadLetterReason":
            out.extend(a.get(c.DEAD_LETTER_REASON) for a in apps)
        elif name == "deadLetterErrorDescription":
            out.extend(a.get(c.DEAD_LETTER_DESCRIPTION) for a in apps)
        elif name == "amqpMessage":
            out.extend(_header(r.durable, r.priority, None if r.time_to_live is None else
                               min(r.time_to_live, _UINT_MAX))
                       + amqp_message.encode_annotations(a.entries, a.count) + t.kept
                       for r, a, t in zip(records, notes, tails, strict=True))
    schema = _schema(names)
    arrays = [_array(values[name], field.type) for name, field in zip(names, schema, strict=True)]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _array(values: list[Any], kind: Any) -> Any:
    import pyarrow as pa

    if not pa.types.is_map(kind):
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
