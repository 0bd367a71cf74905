"""Columnar pages (server/pages.py) against the row path (spark/rows.py) on the same stored records: every
column, row for row, including the shapes the official SDKs rarely send (non-string message ids, typed
and nested application properties, every body kind, delivery annotations, footers, header fields, a
time to live past a uint, broker-owned annotations kept in the record)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Decimal128, Described, Long, Symbol, Timestamp, UByte, ULong
from sodalite.errors import ArgumentError
from sodalite.model.message import MessageRecord, MessageState
from sodalite.server import pages, wire

pa = pytest.importorskip("pyarrow")
from sodalite.spark import rows  # noqa: E402


def section(code: int, value: Any) -> bytes:
    out = bytearray()
    encode_value(Described(ULong(code), value), out)
    return bytes(out)


def message(*parts: bytes) -> bytes:
    return b"".join(parts)


SENT = [
    message(section(amqp_message.DATA, b"plain")),
    message(section(amqp_message.HEADER, [True, UByte(9), None]),
            section(amqp_message.DELIVERY_ANNOTATIONS, {Symbol("x-da"): "kept apart"}),
            section(amqp_message.MESSAGE_ANNOTATIONS, {Symbol("x-opt-partition-key"): "pk", Symbol("custom"): 5,
                                                       Symbol("x-opt-scheduled-enqueue-time"): Timestamp(1234)}),
            section(amqp_message.PROPERTIES, [uuid.UUID(int=7), None, "to", "subj", "reply", ULong(42),
                                              Symbol("application/json"), None, None, None, "group", None, "rg"]),
            section(amqp_message.APPLICATION_PROPERTIES, {
                "s": "x", "n": Long(-3), "f": 2.5, "b": False, "t": Timestamp(86_400_000), "u": uuid.UUID(int=1),
                "bin": b"\x00\xff", "none": None, "d": Decimal128(bytes(16)), Symbol("sym"): "k",
                "DeadLetterReason": "Because", "DeadLetterErrorDescription": Long(3)}),
            section(amqp_message.DATA, b"one "), section(amqp_message.DATA, b"two"),
            section(amqp_message.FOOTER, {Symbol("x-f"): 1})),
    message(section(amqp_message.PROPERTIES, [b"\x01\x02"]), section(amqp_message.AMQP_VALUE, {"k": [1, None]})),
    message(section(amqp_message.AMQP_VALUE, "text value")),
    message(section(amqp_message.AMQP_VALUE, b"binary value")),
    message(section(amqp_message.AMQP_SEQUENCE, [1, "two"]), section(amqp_message.AMQP_SEQUENCE, [3.5])),
    message(section(amqp_message.HEADER, [False, None, None]), section(amqp_message.DATA, b"")),
]


def records() -> list[MessageRecord]:
    out = []
    for i, payload in enumerate(SENT):
        d = wire.parse_message(payload, 1 << 20)
        state = (MessageState.ACTIVE, MessageState.DEFERRED, MessageState.SCHEDULED)[i % 3]
        ttl = (None, 60_000, 2**40)[i % 3]
        out.append(MessageRecord((5 << 48) + i + 1, 1_700_000_000_000 + i, d.message_id, d.session_id,
                                 d.partition_key, ttl, None, d.scheduled_enqueue_time, i % 4, state, d.durable,
                                 d.priority, d.annotations, d.annotation_count, d.tail))
    # A dead-lettered copy: the broker keeps the dead-letter source in the record's annotations.
    dead = out[1]
    source = amqp_message.annotation_entry("x-opt-deadletter-source", "orders")
    out.append(MessageRecord(dead.sequence_number + 100, dead.enqueued_time, dead.message_id, dead.session_id,
                             dead.partition_key, dead.time_to_live, None, None, 1, MessageState.ACTIVE, dead.durable,
                             dead.priority, dead.annotations + source, dead.annotation_count + 1, dead.tail))
    return out


def row_path(names: tuple[str, ...]) -> Any:
    return pa.Table.from_batches([rows.peeked_batch([wire.delivery_payload(r, None, with_state=True)
                                                     for r in records()], names)])


def page(names: tuple[str, ...], of: list[MessageRecord] | None = None) -> Any:
    return pa.ipc.open_stream(pages.build(records() if of is None else of, names)).read_all()


@pytest.mark.parametrize("names", [
    rows.COLUMNS,
    ("body", "messageId", "sequenceNumber", "enqueuedTime"),
    ("amqpMessage", "sequenceNumber", "partition"),
    ("deadLetterSource", "deadLetterErrorDescription", "state", "scheduledEnqueueTime", "partitionKey"),
    tuple(reversed(rows.COLUMNS)),
])
def test_a_page_is_the_row_path_row_for_row(names: tuple[str, ...]) -> None:
    expected, got = row_path(names), page(names)
    assert got.schema.equals(expected.schema)
    for index, (want, have) in enumerate(zip(expected.to_pylist(), got.to_pylist(), strict=True)):
        assert have == want, f"row {index}: {sorted(k for k in want if want[k] != have[k])}"
    assert got.equals(expected)


def test_what_the_odd_rows_show() -> None:
    got = page(rows.COLUMNS).to_pylist()
    assert got[1]["messageId"] == str(uuid.UUID(int=7)) and got[1]["correlationId"] == "42"
    assert got[1]["body"] == b"one two" and got[1]["timeToLive"] == 60_000
    assert got[2]["messageId"] == "0102" and got[2]["timeToLive"] == 2**32 - 1  # header.ttl is a uint
    assert got[-1]["deadLetterSource"] == "orders" and got[-1]["deadLetterReason"] == "Because"
    assert b"x-opt-deadletter-source" not in got[-1]["amqpMessage"]


def test_an_empty_page_has_the_columns() -> None:
    table = page(("body", "sequenceNumber"), of=[])
    assert table.num_rows == 0 and table.column_names == ["body", "sequenceNumber"]


def test_columns_are_checked() -> None:
    assert pages.columns(["body", "state"]) == ("body", "state")
    for bad in ([], None, "body", ["body", "body"], ["nope"], [3]):
        with pytest.raises(ArgumentError):
            pages.columns(bad)


def test_a_page_is_cut_at_its_bytes_but_keeps_one_message() -> None:
    stored = records()
    sizes = [r.size for r in stored]
    assert pages.within(stored, sizes[0] + sizes[1]) == stored[:2]
    assert pages.within(stored, 1) == stored[:1]
    assert pages.within(stored, sum(sizes)) == stored
