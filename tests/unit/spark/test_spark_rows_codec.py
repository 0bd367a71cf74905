"""The Spark row codec: a peeked message to a row and back (no Spark needed; it is plain Python)."""

from __future__ import annotations

from typing import Any

import pytest

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, Symbol, Timestamp, ULong
from sodalite.model.message import MessageRecord, MessageState
from sodalite.server import wire
from sodalite.spark.rows import COLUMNS, message_from_row, row_from_peeked

SEQ = (3 << 48) + 17


def sent() -> bytes:
    out = bytearray()
    encode_value(Described(ULong(amqp_message.MESSAGE_ANNOTATIONS), {Symbol("x-opt-partition-key"): "pk",
                                                                     Symbol("custom"): 5}), out)
    encode_value(Described(ULong(amqp_message.PROPERTIES), ["id-1", None, "to-x", "subj", None, "corr",
                                                            Symbol("text/plain")]), out)
    encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), {"n": 3, "s": "x", "t": Timestamp(0)}), out)
    encode_value(Described(ULong(amqp_message.DATA), b"hello"), out)
    return bytes(out)


def peeked(payload: bytes) -> bytes:
    d = wire.parse_message(payload, 1 << 20)
    record = MessageRecord(SEQ, 1_700_000_000_000, d.message_id, d.session_id, d.partition_key, 60_000, None, None,
                           2, MessageState.DEFERRED, d.durable, d.priority, d.annotations, d.annotation_count, d.tail)
    return wire.delivery_payload(record, None, with_state=True)


def row() -> dict[str, Any]:
    return dict(zip(COLUMNS, row_from_peeked(peeked(sent())), strict=True))


def test_a_peeked_message_becomes_a_row() -> None:
    r = row()
    assert (r["body"], r["messageId"], r["to"], r["subject"], r["correlationId"], r["contentType"]) == (
        b"hello", "id-1", "to-x", "subj", "corr", "text/plain")
    assert (r["partitionKey"], r["sequenceNumber"], r["partition"], r["deliveryCount"], r["state"]) == (
        "pk", SEQ, 3, 2, "deferred")
    assert r["timeToLive"] == 60_000
    assert r["applicationProperties"] == {"n": "3", "s": "x", "t": '"1970-01-01T00:00:00+00:00"'}
    again = wire.parse_message(r["amqpMessage"], 1 << 20)  # the broker's annotations are gone
    assert b"x-opt-sequence-number" not in r["amqpMessage"] and again.partition_key == "pk"


def test_the_row_sends_a_faithful_copy() -> None:
    original = wire.parse_message(sent(), 1 << 20)
    copy = wire.parse_message(message_from_row(row(), "src"), 1 << 20)
    assert copy.tail == original.tail  # properties, typed application properties and body, byte for byte
    assert copy.annotations == original.annotations and copy.time_to_live == 60_000


def test_columns_override_and_an_unchanged_property_keeps_its_type() -> None:
    r = row()
    r.update(subject="new", body=b"changed", applicationProperties={"n": "3", "s": "y"})
    copy = wire.parse_message(message_from_row(r, "src"), 1 << 20)
    values = {s.code: amqp_message.section_value(copy.tail, s) for s in amqp_message.split_sections(copy.tail)}
    assert values[amqp_message.PROPERTIES][3] == "new"
    assert values[amqp_message.APPLICATION_PROPERTIES]["n"] == 3  # rendered the same: stays an integer
    assert values[amqp_message.APPLICATION_PROPERTIES]["s"] == "y"
    assert values[amqp_message.DATA] == b"changed"


def test_a_row_without_message_id_gets_one_derived_from_its_source() -> None:
    payload = message_from_row({"body": b"x", "sequenceNumber": SEQ, "partition": 3}, "orders")
    assert wire.parse_message(payload, 1 << 20).message_id == f"orders:3:{SEQ}"
    with pytest.raises(ValueError, match="'body'"):
        message_from_row({"messageId": "m"}, "orders")
