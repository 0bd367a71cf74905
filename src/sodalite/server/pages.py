"""Columnar pages: messages of one partition as an Arrow IPC stream of the columns asked for.

The Spark data source reads through them (``com.sodalite:peek-partition-columns``, docs/spark.md),
so its reader hands Spark the page as it arrives and does no work per row. The page is built here,
column by column, from the stored records: the system properties the store keeps as fields
(sequence number, enqueued time, delivery count, state, time to live, and the message id, session id
and partition key as the broker rendered them at append) are taken as they are, and the
record's encoded parts are walked only as far as the columns asked for need (the properties section
for the string properties, the application properties for that map, the body sections for
``body``, the client's annotations for the partition key, scheduled time, dead-letter source and
``amqpMessage``: :mod:`sodalite.message.stored`). Values are rendered by :mod:`sodalite.message.columns`,
as the row path renders them, so both give the same rows. Each column has its named builder.

pyarrow is optional for the broker: without it :func:`available` is False, the operation answers
``amqp:not-implemented`` and the reader peeks messages instead (``com.sodalite:peek-partition``).

Building runs off the event loop (the management operation hands it to a thread); a page is bounded
by rows (:data:`MAX_ROWS`) and by the stored size of its messages (:data:`MAX_BYTES`, at least one
message whatever its size).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Final

from sodalite.amqp.errors import DecodeError
from sodalite.errors import ArgumentError
from sodalite.message import arrow
from sodalite.message import columns as c
from sodalite.message.stored import StoredAnnotations, StoredTail, original_header
from sodalite.model.message import MessageRecord

DEFAULT_ROWS: Final = 1000
MAX_ROWS: Final = 10_000  # rows in one page at most, whatever the request asks
DEFAULT_BYTES: Final = 4 << 20
MAX_BYTES: Final = 16 << 20  # stored bytes of the messages in one page at most (at least one message)
_PROPERTY_NAMES: Final = frozenset(name for name, _ in c.PROPERTY_COLUMNS) - {"messageId", "sessionId"}
_APPLICATION_NAMES: Final = frozenset({"applicationProperties", "deadLetterReason", "deadLetterErrorDescription"})
_ANNOTATION_NAMES: Final = frozenset({"partitionKey", "scheduledEnqueueTime", "deadLetterSource"})
_UINT_MAX: Final = 0xFFFFFFFF


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


class _Page:
    """The records of one page, with their parts walked once for the columns asked for."""

    __slots__ = ("apps", "notes", "records", "tails")

    def __init__(self, records: Sequence[MessageRecord], wanted: frozenset[str]) -> None:
        need_properties = not wanted.isdisjoint(_PROPERTY_NAMES)
        need_application = not wanted.isdisjoint(_APPLICATION_NAMES)
        need_body = "body" in wanted
        need_values = not wanted.isdisjoint(_ANNOTATION_NAMES)
        need_annotations = need_values or "amqpMessage" in wanted
        need_tail = need_properties or need_application or need_body or "amqpMessage" in wanted
        self.records = records
        try:
            self.tails = [StoredTail(r.tail, need_properties, need_application, need_body)
                          for r in records] if need_tail else []
            self.notes = [StoredAnnotations(r.annotations, r.annotation_count, need_values)
                          for r in records] if need_annotations else []
            self.apps = [c.application_properties(t.application) for t in self.tails] if need_application else []
        except (IndexError, KeyError, ValueError, OverflowError, RecursionError, DecodeError) as exc:
            raise ArgumentError(f"a stored message could not be read as columns: {exc}") from None


def _ttl(record: MessageRecord) -> int | None:
    """The time-to-live as the header carries it (a uint: a longer one at its maximum)."""
    return None if record.time_to_live is None else min(record.time_to_live, _UINT_MAX)


def _micros(value: object) -> int | None:
    return None if value is None else int(value) * 1000  # type: ignore[call-overload]


# ---- the column builders: each gives one column's values for a page, a row each ----------------

def _body(page: _Page) -> list[object]:
    return [c.body(t.kept, t.bodies) for t in page.tails]


def _message_id(page: _Page) -> list[object]:
    return [r.message_id for r in page.records]


def _session_id(page: _Page) -> list[object]:
    return [r.session_id for r in page.records]


def _property(index: int) -> Callable[[_Page], list[object]]:
    """The builder of a string column read from the properties list at ``index``."""
    def build(page: _Page) -> list[object]:
        return [c.text(t.properties[index]) for t in page.tails]
    return build


def _partition_key(page: _Page) -> list[object]:
    return [r.partition_key if r.partition_key is not None else c.text(a.values.get(c.PARTITION_KEY))
            for r, a in zip(page.records, page.notes, strict=True)]


def _scheduled_enqueue_time(page: _Page) -> list[object]:
    return [_micros(a.values.get(c.SCHEDULED_ENQUEUE_TIME)) for a in page.notes]


def _dead_letter_source(page: _Page) -> list[object]:
    return [c.text(a.values.get(c.DEAD_LETTER_SOURCE)) for a in page.notes]


def _time_to_live(page: _Page) -> list[object]:
    return [_ttl(r) for r in page.records]


def _enqueued_time(page: _Page) -> list[object]:
    return [r.enqueued_time * 1000 for r in page.records]


def _sequence_number(page: _Page) -> list[object]:
    return [r.sequence_number for r in page.records]


def _partition(page: _Page) -> list[object]:
    return [r.sequence_number >> c.PARTITION_SHIFT for r in page.records]


def _delivery_count(page: _Page) -> list[object]:
    return [r.delivery_count for r in page.records]


def _state(page: _Page) -> list[object]:
    return [c.state(int(r.state)) for r in page.records]


def _application_properties(page: _Page) -> list[object]:
    return list(page.apps)


def _dead_letter_reason(page: _Page) -> list[object]:
    return [a.get(c.DEAD_LETTER_REASON) for a in page.apps]


def _dead_letter_description(page: _Page) -> list[object]:
    return [a.get(c.DEAD_LETTER_DESCRIPTION) for a in page.apps]


def _amqp_message(page: _Page) -> list[object]:
    """The message as its sender encoded it: its header (no delivery count), its own annotations, the
    tail without the delivery annotations."""
    return [original_header(r.durable, r.priority, _ttl(r)) + a.section() + t.kept
            for r, a, t in zip(page.records, page.notes, page.tails, strict=True)]


_BUILDERS: Final[dict[str, Callable[[_Page], list[object]]]] = {
    "body": _body, "messageId": _message_id, "sessionId": _session_id,
    **{name: _property(index) for name, index in c.PROPERTY_COLUMNS if name in _PROPERTY_NAMES},
    "partitionKey": _partition_key, "scheduledEnqueueTime": _scheduled_enqueue_time,
    "deadLetterSource": _dead_letter_source, "timeToLive": _time_to_live, "enqueuedTime": _enqueued_time,
    "sequenceNumber": _sequence_number, "partition": _partition, "deliveryCount": _delivery_count,
    "state": _state, "applicationProperties": _application_properties, "deadLetterReason": _dead_letter_reason,
    "deadLetterErrorDescription": _dead_letter_description, "amqpMessage": _amqp_message,
}
assert set(_BUILDERS) == set(c.COLUMNS), "a column without its builder"


def build(records: Sequence[MessageRecord], names: tuple[str, ...]) -> bytes:
    """``records`` as an Arrow IPC stream of one record batch with the columns ``names``."""
    import pyarrow as pa

    page = _Page(records, frozenset(names))
    schema = arrow.schema(names)
    arrays = [arrow.array(_BUILDERS[name](page), field.type) for name, field in zip(names, schema, strict=True)]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())
