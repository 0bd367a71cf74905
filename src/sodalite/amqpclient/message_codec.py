"""Messages as the command line writes (``sodalite send``) and shows (``sodalite peek``) them.

Sending builds the sections the SDK would: properties, application properties, message
annotations for the partition key and scheduled time, a header for the time-to-live, and one
data section for the body. Showing decodes every section of a peeked message into plain values.
"""

from __future__ import annotations

import base64
import datetime
import uuid
from dataclasses import dataclass, field
from typing import Any

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.types import Described, Symbol, Timestamp, UInt, ULong

_PROPERTY_NAMES = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                   "content_encoding", "absolute_expiry_time", "creation_time", "session_id", "group_sequence",
                   "reply_to_session_id")
_STATES = {0: "Active", 1: "Deferred", 2: "Scheduled"}


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
    application_properties: dict[str, Any] = field(default_factory=dict)


def _millis(moment: datetime.datetime) -> int:
    return int(moment.timestamp() * 1000)


def encode_message(message: OutgoingMessage) -> bytes:
    out = bytearray()
    if message.time_to_live is not None:
        ttl_ms = int(message.time_to_live.total_seconds() * 1000)
        encode_value(Described(ULong(amqp_message.HEADER), [True, None, UInt(min(ttl_ms, 0xFFFFFFFF))]), out)
    annotations: dict[Symbol, Any] = {}
    if message.partition_key is not None:
        annotations[Symbol("x-opt-partition-key")] = message.partition_key
    if message.scheduled_enqueue_time is not None:
        annotations[Symbol("x-opt-scheduled-enqueue-time")] = Timestamp(_millis(message.scheduled_enqueue_time))
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


def plain_value(value: Any) -> Any:
    """A JSON-able spelling of a decoded AMQP value."""
    if isinstance(value, Timestamp):
        return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC).isoformat()
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    if isinstance(value, Described):
        return plain_value(value.value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def describe_message(payload: bytes) -> dict[str, Any]:
    """Every section of an encoded message as plain values, with the broker's annotations named."""
    shown: dict[str, Any] = {}
    bodies: list[Any] = []
    ttl: Any = None
    for section in amqp_message.split_sections(payload):
        value = amqp_message.section_value(payload, section)
        if section.code == amqp_message.HEADER and isinstance(value, list) and len(value) > 4:
            shown["delivery_count"] = value[4]
            ttl = value[2]
        elif section.code == amqp_message.MESSAGE_ANNOTATIONS and isinstance(value, dict):
            annotations = {str(k): v for k, v in value.items()}
            shown["sequence_number"] = annotations.pop("x-opt-sequence-number", None)
            shown["enqueued_time"] = plain_value(annotations.pop("x-opt-enqueued-time", None))
            state = annotations.pop("x-opt-message-state", None)
            if state is not None:
                shown["state"] = _STATES.get(int(state), str(state))
            annotations.pop("x-opt-locked-until", None)
            if annotations:
                shown["annotations"] = plain_value(annotations)
        elif section.code == amqp_message.PROPERTIES and isinstance(value, list):
            for name, item in zip(_PROPERTY_NAMES, value, strict=False):
                if item is not None:
                    shown[name] = plain_value(item)
        elif section.code == amqp_message.APPLICATION_PROPERTIES and isinstance(value, dict):
            shown["application_properties"] = plain_value(value)
        elif section.code in (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE):
            bodies.append(plain_value(value))
    shown["body"] = bodies[0] if len(bodies) == 1 else bodies
    shown["expires_at"] = _expiry(shown.get("enqueued_time"), ttl)
    return shown


def _expiry(enqueued: Any, ttl: Any) -> str | None:
    """When the message expires: enqueued time plus time-to-live; None when it never does.

    A time-to-live at the header's maximum (about 49.7 days, what a longer one is shown as) counts as
    never: the broker writes that for TimeSpan.MaxValue and for anything longer than a uint holds.
    """
    if not isinstance(ttl, int) or ttl >= 0xFFFFFFFF or not isinstance(enqueued, str):
        return None
    return (datetime.datetime.fromisoformat(enqueued) + datetime.timedelta(milliseconds=ttl)).isoformat()
