"""Request and reply messages of ``$cbs`` and ``$management``: small, decoded and encoded whole.

These are control messages of a few hundred bytes, so unlike entity messages they are fully
decoded. A request carries its message-id and reply-to in the properties, the operation's
arguments as application properties and an AMQP value body. A reply keeps the request's
message-id, type included, as the correlation-id: the Python SDK matches them by decoded value, so
a uuid must come back as a uuid (contract 2 and 6.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.errors import ProtocolError
from sodalite.amqp.types import AmqpValue, Described, ULong
from sodalite.errors import ArgumentError
from sodalite.message.names import MESSAGE_ID, REPLY_TO


@dataclass(frozen=True, slots=True)
class Request:
    message_id: AmqpValue
    reply_to: str | None
    application_properties: dict[str, AmqpValue]
    body: AmqpValue


def decode_control(payload: bytes) -> Request:
    """A request or a reply, decoded whole (its properties' message-id and reply-to, its application
    properties with keys as text, its AMQP value or data body); ProtocolError if it is not a message."""
    message_id: AmqpValue = None
    reply_to: str | None = None
    app: dict[str, AmqpValue] = {}
    body: AmqpValue = None
    for s in amqp_message.split_sections(payload):
        if s.code == amqp_message.PROPERTIES:
            fields = amqp_message.section_value(payload, s)
            if isinstance(fields, list) and fields:
                message_id = fields[MESSAGE_ID]
                reply_to = fields[REPLY_TO] if len(fields) > REPLY_TO and isinstance(fields[REPLY_TO], str) else None
        elif s.code == amqp_message.APPLICATION_PROPERTIES:
            value = amqp_message.section_value(payload, s)
            if isinstance(value, dict):
                app = {str(k): v for k, v in value.items()}
        elif s.code in (amqp_message.AMQP_VALUE, amqp_message.DATA):
            body = amqp_message.section_value(payload, s)
    return Request(message_id, reply_to, app, body)


def decode_request(payload: bytes) -> Request:
    """A request as the broker reads it; a malformed one is an ``ArgumentError``."""
    try:
        return decode_control(payload)
    except ProtocolError as exc:
        raise ArgumentError(f"malformed request message: {exc.description}") from None


def _encode(properties: list[AmqpValue], application_properties: dict[str, AmqpValue], body: object) -> bytes:
    out = bytearray()
    encode_value(Described(ULong(amqp_message.PROPERTIES), properties), out)
    encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), application_properties), out)
    encode_value(Described(ULong(amqp_message.AMQP_VALUE), body), out)
    return bytes(out)


def encode_request(message_id: AmqpValue, reply_to: str, application_properties: dict[str, AmqpValue],
                   body: object) -> bytes:
    """A request to ``$cbs`` or ``$management``, its reply to come to the link ``reply_to``."""
    return _encode([message_id, None, None, None, reply_to], application_properties, body)


def encode_response(correlation_id: AmqpValue, application_properties: dict[str, AmqpValue],
                    body: object) -> bytes:
    """A reply to a request whose message-id was ``correlation_id``; ``body`` is any value the AMQP
    encoder takes (the management layer's own values among them)."""
    return _encode([None, None, None, None, None, correlation_id], application_properties, body)
