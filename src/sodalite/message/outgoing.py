"""A message as a client writes it from a few named fields (``sodalite send``, the console's send).

The sections are the ones the SDK writes: a header for the time-to-live, message annotations for
the partition key and the scheduled time, properties (a MessageId always: a fresh uuid when none is
given), application properties, and one data section for the body.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass, field

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import AmqpMap, Described, Symbol, Timestamp, UInt, ULong
from sodalite.message.names import PARTITION_KEY, SCHEDULED_ENQUEUE_TIME


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    body: bytes
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    subject: str | None = None
    correlation_id: str | None = None
    content_type: str | None = None
    time_to_live: datetime.timedelta | None = None
    scheduled_enqueue_time: datetime.datetime | None = None
    application_properties: dict[str, object] = field(default_factory=dict)


def _millis(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


def encode_message(message: OutgoingMessage) -> bytes:
    out = bytearray()
    if message.time_to_live is not None:
        ttl_ms = int(message.time_to_live.total_seconds() * 1000)
        encode_value(Described(ULong(amqp_message.HEADER), [True, None, UInt(min(ttl_ms, 0xFFFFFFFF))]), out)
    annotations: AmqpMap = {}
    if message.partition_key is not None:
        annotations[Symbol(PARTITION_KEY)] = message.partition_key
    if message.scheduled_enqueue_time is not None:
        annotations[Symbol(SCHEDULED_ENQUEUE_TIME)] = Timestamp(_millis(message.scheduled_enqueue_time))
    if annotations:
        encode_value(Described(ULong(amqp_message.MESSAGE_ANNOTATIONS), annotations), out)
    message_id = message.message_id if message.message_id is not None else str(uuid.uuid4())
    encode_value(Described(ULong(amqp_message.PROPERTIES), [
        message_id, None, None, message.subject, None, message.correlation_id,
        Symbol(message.content_type) if message.content_type is not None else None,
        None, None, None, message.session_id]), out)
    if message.application_properties:
        encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), message.application_properties), out)
    encode_value(Described(ULong(amqp_message.DATA), message.body), out)
    return bytes(out)
