"""One message through every path of the message layer: written as the CLI and the console write it,
received as the broker receives it, delivered, walked as the Spark reader walks it, shown as the CLI
shows it. Each path reads the same fields back, and the layer needs no model: the draft type here is
the test's own."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

import pytest

from sodalite.errors import ArgumentError, MessageSizeExceeded
from sodalite.message import columns, delivery, received, sections
from sodalite.message.outgoing import OutgoingMessage, encode_message
from sodalite.message.plain import describe_message, shown_tail
from sodalite.message.requests import decode_control, decode_request, encode_request, encode_response


@dataclass(frozen=True)
class Draft:
    message_id: str | None
    session_id: str | None
    partition_key: str | None
    time_to_live: int | None
    scheduled_enqueue_time: int | None
    durable: bool | None
    priority: int | None
    annotations: bytes
    annotation_count: int
    tail: bytes
    ping: bool = False


@dataclass(frozen=True)
class Stored:
    """A stored message as a store gives it back (the fields a delivery is built from)."""

    sequence_number: int
    enqueued_time: int
    delivery_count: int
    state: int
    durable: bool | None
    priority: int | None
    time_to_live: int | None
    annotations: bytes
    annotation_count: int
    tail: bytes


SCHEDULED = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def written() -> bytes:
    return encode_message(OutgoingMessage(
        body=b"hello", message_id="id-1", session_id="s-1", partition_key="s-1", subject="subj",
        correlation_id="corr", content_type="text/plain", time_to_live=datetime.timedelta(seconds=90),
        scheduled_enqueue_time=SCHEDULED, application_properties={"n": 3, "kind": "order"}))


def test_a_written_message_is_received_with_its_fields_into_the_callers_draft_type() -> None:
    [draft] = received.parse_transfer(written(), 0, 1 << 20, Draft, True)
    assert isinstance(draft, Draft)
    assert (draft.message_id, draft.session_id, draft.partition_key) == ("id-1", "s-1", "s-1")
    assert (draft.time_to_live, draft.durable, draft.ping) == (90_000, True, False)
    assert draft.scheduled_enqueue_time == int(SCHEDULED.timestamp() * 1000)
    assert draft.annotation_count == 2  # the partition key and the scheduled time, as sent


def test_a_message_without_a_message_id_is_given_one_only_when_asked() -> None:
    payload = encode_message(OutgoingMessage(body=b"x", message_id=None))
    # encode_message always writes one; strip it to a message that has none
    walked = sections.walk(payload)
    walked.properties[0] = None
    bare = sections.assemble(walked.header[:3], walked.client_annotations, walked.properties, walked.application,
                             b"".join(walked.body_bytes()))
    assert received.parse_message(bare, 1 << 20, Draft).message_id is None
    given = received.parse_message(bare, 1 << 20, Draft, assign_id=True)
    assert given.message_id is not None and len(given.message_id) == 32
    assert sections.walk(given.tail).properties[0] == given.message_id


def test_the_delivery_of_the_stored_message_reads_back_the_same_everywhere() -> None:
    draft = received.parse_message(written(), 1 << 20, Draft)
    stored = Stored(sequence_number=(2 << 48) + 7, enqueued_time=1_700_000_000_000, delivery_count=1, state=0,
                    durable=draft.durable, priority=draft.priority, time_to_live=draft.time_to_live,
                    annotations=draft.annotations, annotation_count=draft.annotation_count, tail=draft.tail)
    token = uuid.uuid4()
    payload = delivery.delivery_payload(stored, 1_700_000_030_000, lock_token=token)

    shown = describe_message(payload)  # as `sodalite peek` shows it
    assert (shown["message_id"], shown["session_id"], shown["subject"], shown["correlation_id"]) == \
        ("id-1", "s-1", "subj", "corr")
    assert (shown["sequence_number"], shown["delivery_count"], shown["body"]) == ((2 << 48) + 7, 1, "hello")
    assert shown["application_properties"] == {"n": 3, "kind": "order"}

    walked = sections.walk(payload)  # as the Spark reader walks it
    assert walked.annotations["x-opt-sequence-number"] == (2 << 48) + 7
    assert walked.annotations["x-opt-partition-key"] == "s-1"
    assert columns.application_properties(walked.application) == {"n": "3", "kind": "order"}
    assert columns.body(payload, walked.bodies) == b"hello"
    assert "x-opt-sequence-number" not in {str(k) for k in walked.client_annotations}

    browsed = shown_tail(stored.tail)  # as the console's browser shows it
    assert (browsed.properties[0], browsed.body, browsed.application_properties) == \
        ("id-1", b"hello", {"n": 3, "kind": "order"})


def test_bad_input_is_refused_with_the_service_bus_errors() -> None:
    with pytest.raises(MessageSizeExceeded):
        received.parse_message(written(), 10, Draft)
    with pytest.raises(ArgumentError, match="not valid AMQP"):
        received.parse_transfer(b"\x00\x53\x75\xb0\xff", 0, 1 << 20, Draft)
    with pytest.raises(ArgumentError, match="malformed request"):
        decode_request(b"\x01\x02")


def test_a_request_and_its_reply_round_trip_with_the_message_id_as_the_correlation_id() -> None:
    message_id = uuid.uuid4()
    request = decode_request(encode_request(message_id, "reply-link", {"operation": "peek"}, {"count": 1}))
    assert (request.message_id, request.reply_to, request.application_properties, request.body) == \
        (message_id, "reply-link", {"operation": "peek"}, {"count": 1})
    reply = decode_control(encode_response(request.message_id, {"statusCode": 200}, ["ok"]))
    assert (reply.application_properties, reply.body) == ({"statusCode": 200}, ["ok"])
