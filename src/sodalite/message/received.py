"""A received transfer as the drafts the broker stores: one, or each inner message of a batch.

Only header, delivery- and message-annotations and properties are decoded; application-properties,
body and footer are sliced verbatim into the draft's tail. A client's delivery-annotations are kept,
re-encoded as the first section of the tail (Service Bus delivers them with the message).
Annotations that only the service may set are stripped, as the protocol guide says of
``x-opt-enqueued-time`` ("Ignored on input"). A message without a MessageId is given one (the JS
SDK refuses to settle a message without one); only its properties section is re-encoded.

The draft type is the caller's (``make``: the model's ``MessageDraft``, called once per message with
its fields in order), so this layer needs nothing of the model's.
"""

from __future__ import annotations

import uuid
from typing import Protocol, TypeVar

from sodalite.amqp import message as amqp_message
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import AmqpMap, AmqpValue
from sodalite.errors import ArgumentError, MessageSizeExceeded
from sodalite.message.edits import properties_position
from sodalite.message.names import (
    JMS_DELIVERY_TIME,
    PARTITION_KEY,
    PING_CONTENT_TYPE,
    SCHEDULED_ENQUEUE_TIME,
    SERVICE_OWNED_ANNOTATIONS,
    text,
)

Draft_co = TypeVar("Draft_co", covariant=True)

_UBYTE_MAX = 0xFF
_UINT_MAX = 0xFFFF_FFFF
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class DraftFactory(Protocol[Draft_co]):
    """Makes a draft from a received message's fields (the model's ``MessageDraft`` is one)."""

    def __call__(self, message_id: str | None, session_id: str | None, partition_key: str | None,
                 time_to_live: int | None, scheduled_enqueue_time: int | None, durable: bool | None,
                 priority: int | None, annotations: bytes, annotation_count: int, tail: bytes,
                 ping: bool = ..., /) -> Draft_co: ...


message_id_text = text  # Service Bus message ids are strings; other AMQP id types are rendered canonically


def _ranged(value: AmqpValue, high: int, what: str, low: int = 0) -> int | None:
    """An integer field as an int; None if it is absent or not an integer.

    A value outside the field's AMQP range (a long where a uint belongs) is refused: it could be
    neither written back on delivery nor kept by a store, and would fail everyone's group commit.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not low <= value <= high:
        raise ArgumentError(f"{what} {value} is out of range")
    return int(value)


def parse_transfer(payload: bytes, message_format: int, max_message_size: int, make: DraftFactory[Draft_co],
                   assign_ids: bool = False) -> list[Draft_co]:
    """Drafts for every message in a transfer: one, or each inner message of a batch; ``assign_ids``
    gives each message without a MessageId a fresh one."""
    try:
        if message_format == amqp_message.BATCH_MESSAGE_FORMAT:
            envelope = amqp_message.split_sections(payload)
            inner = [amqp_message.binary_value(payload, s) for s in envelope if s.code == amqp_message.DATA]
            if not inner:
                raise ArgumentError("a batch transfer holds no messages")
            return [parse_message(m, max_message_size, make, assign_ids) for m in inner]
        return [parse_message(payload, max_message_size, make, assign_ids)]
    except DecodeError as exc:
        raise ArgumentError(f"the message is not valid AMQP: {exc.description}") from None


def parse_message(payload: bytes, max_message_size: int, make: DraftFactory[Draft_co],
                  assign_id: bool = False) -> Draft_co:
    """One message as a draft (see the module docstring); DecodeError if it is not AMQP."""
    if len(payload) > max_message_size:
        raise MessageSizeExceeded(
            f"the message is {len(payload)} bytes; the entity allows {max_message_size}")
    sections = amqp_message.split_sections(payload)
    durable: bool | None = None
    priority: int | None = None
    ttl: int | None = None
    message_id: str | None = None
    session_id: str | None = None
    annotations = b""
    annotation_count = 0
    scheduled: int | None = None
    partition_key: str | None = None
    delivery_annotations: AmqpMap = {}
    tail: list[bytes] = []
    ping = False
    for s in sections:
        code = s.code
        if code == amqp_message.HEADER:
            fields = amqp_message.section_value(payload, s)
            if not isinstance(fields, list):
                raise ArgumentError("the message header is not a list")
            fields = fields + [None] * (5 - len(fields))
            durable = fields[0] if isinstance(fields[0], bool) else None
            priority = _ranged(fields[1], _UBYTE_MAX, "header priority")
            ttl = _ranged(fields[2], _UINT_MAX, "header ttl")
        elif code == amqp_message.MESSAGE_ANNOTATIONS:
            value = amqp_message.section_value(payload, s)
            if not isinstance(value, dict):
                raise ArgumentError("message-annotations is not a map")
            kept = {k: v for k, v in value.items() if str(k) not in SERVICE_OWNED_ANNOTATIONS}
            when = kept.get(SCHEDULED_ENQUEUE_TIME)
            scheduled = _ranged(when, _INT64_MAX, SCHEDULED_ENQUEUE_TIME, _INT64_MIN)
            if scheduled is None:
                scheduled = _ranged(kept.get(JMS_DELIVERY_TIME), _INT64_MAX, JMS_DELIVERY_TIME, _INT64_MIN)
            key = kept.get(PARTITION_KEY)
            partition_key = key if isinstance(key, str) else None
            annotations = amqp_message.map_entries(kept)
            annotation_count = len(kept)
        elif code == amqp_message.PROPERTIES:
            fields = amqp_message.section_value(payload, s)
            if not isinstance(fields, list):
                raise ArgumentError("message properties is not a list")
            fields = fields + [None] * (13 - len(fields))
            message_id = message_id_text(fields[0])
            session_id = fields[10] if isinstance(fields[10], str) else None
            ping = fields[6] == PING_CONTENT_TYPE
            tail.append(payload[s.start : s.end])
        elif code == amqp_message.DELIVERY_ANNOTATIONS:
            value = amqp_message.section_value(payload, s)
            if not isinstance(value, dict):
                raise ArgumentError("delivery-annotations is not a map")
            delivery_annotations.update(
                (k, v) for k, v in value.items() if str(k) not in SERVICE_OWNED_ANNOTATIONS)
        else:
            tail.append(payload[s.start : s.end])
    if delivery_annotations:
        tail.insert(0, amqp_message.encode_section(amqp_message.DELIVERY_ANNOTATIONS, delivery_annotations))
    joined = b"".join(tail)
    if assign_id and message_id is None:
        message_id, joined = given_message_id(joined)
    return make(message_id, session_id, partition_key, ttl, scheduled, durable, priority, annotations,
                annotation_count, joined, ping)


def given_message_id(tail: bytes) -> tuple[str, bytes]:
    """A fresh MessageId, and ``tail`` (which has none) carrying it: only the properties section is
    re-encoded (or one is placed, after the kept delivery-annotations); the body is untouched."""
    message_id = uuid.uuid4().hex
    existing = next((s for s in amqp_message.split_sections(tail) if s.code == amqp_message.PROPERTIES), None)
    if existing is None:
        at = properties_position(tail)
        return message_id, tail[:at] + amqp_message.encode_section(amqp_message.PROPERTIES, [message_id]) + tail[at:]
    fields = amqp_message.section_value(tail, existing)
    fields = [message_id, *(fields[1:] if isinstance(fields, list) else [])]
    return message_id, (tail[: existing.start] + amqp_message.encode_section(amqp_message.PROPERTIES, fields)
                        + tail[existing.end :])
