"""The sink's verbatim path (replicate's rows): a stored message is sent as its bytes, undecoded; the only
edit is the derived MessageId a message without one gets (no Spark needed)."""

from __future__ import annotations

import pytest

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, Symbol, ULong
from sodalite.spark import sections
from sodalite.spark.verbatim import is_verbatim, verbatim_message

SEQ = (3 << 48) + 17


def section(code: int, value: object) -> bytes:
    out = bytearray()
    encode_value(Described(ULong(code), value), out)
    return bytes(out)


HEADER = section(amqp_message.HEADER, [True, None, None])
ANNOTATIONS = section(amqp_message.MESSAGE_ANNOTATIONS, {Symbol("x-opt-partition-key"): "pk", Symbol("custom"): 5})
# Trailing nulls and a str32 where str8 would do: an encoding a re-encoder would not reproduce.
PROPERTIES_WITH_ID = (b"\x00\x53\x73\xd0" + (4 + 5 + 4 + 3).to_bytes(4, "big") + (4).to_bytes(4, "big")
                      + b"\xb1" + (4).to_bytes(4, "big") + b"id-1" + b"\x40\x40\x40")
APPLICATION = section(amqp_message.APPLICATION_PROPERTIES, {"n": 3, "s": "x"})
BODY = section(amqp_message.DATA, b"hello")


def test_a_message_with_a_message_id_goes_byte_for_byte() -> None:
    payload = HEADER + ANNOTATIONS + PROPERTIES_WITH_ID + APPLICATION + BODY
    assert sections.walk(payload).properties[0] == "id-1"  # (the hand-made section is valid AMQP)
    assert verbatim_message({"amqpMessage": payload, "sequenceNumber": SEQ, "partition": 3}, "src") is payload


def test_a_message_without_one_gets_the_derived_id_and_keeps_every_other_byte() -> None:
    properties = section(amqp_message.PROPERTIES, [None, None, "to-x", "subject"])
    payload = HEADER + ANNOTATIONS + properties + APPLICATION + BODY
    sent = verbatim_message({"amqpMessage": payload, "sequenceNumber": SEQ, "partition": 3}, "orders")
    walked = sections.walk(sent)
    assert walked.properties[:4] == ["orders:3:" + str(SEQ), None, "to-x", "subject"]
    assert sent.startswith(HEADER + ANNOTATIONS) and sent.endswith(APPLICATION + BODY)
    # The same row again (a replay) gets the same id.
    assert verbatim_message({"amqpMessage": payload, "sequenceNumber": SEQ, "partition": 3}, "orders") == sent


@pytest.mark.parametrize("before", [b"", HEADER, HEADER + ANNOTATIONS])
def test_a_message_without_properties_gets_a_properties_section_after_header_and_annotations(before: bytes) -> None:
    payload = before + APPLICATION + BODY
    sent = verbatim_message({"amqpMessage": payload, "sequenceNumber": 9, "partition": None}, "q")
    assert sent == before + section(amqp_message.PROPERTIES, ["q:0:9"]) + APPLICATION + BODY


def test_an_empty_properties_list_counts_as_no_message_id() -> None:
    payload = b"\x00\x53\x73\x45" + BODY  # list0
    sent = verbatim_message({"amqpMessage": payload, "sequenceNumber": 1, "partition": 0}, "q")
    assert sections.walk(sent).properties[0] == "q:0:1" and sent.endswith(BODY)


def test_only_rows_that_change_nothing_are_verbatim() -> None:
    payload = BODY
    assert is_verbatim({"amqpMessage": payload, "sequenceNumber": 1, "partition": 0, "entity": "t"})
    assert is_verbatim({"amqpMessage": payload, "body": None, "messageId": None})
    assert not is_verbatim({"amqpMessage": payload, "messageId": "other"})  # a column overriding it
    assert not is_verbatim({"amqpMessage": payload, "body": b"new"})
    assert not is_verbatim({"amqpMessage": None, "body": b"x"})


def test_bytes_that_are_no_message_are_refused_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="amqpMessage"):
        verbatim_message({"amqpMessage": b"\x00\x53\x73\xc0\x09", "sequenceNumber": 1}, "q")
