"""Small request/response messages for ``$cbs`` and ``$management``, decoded whole.

These are control messages of a few hundred bytes, so unlike entity messages they are fully
decoded. Responses keep the request's message-id, type included, as the correlation-id: the
Python SDK matches them by decoded value, so a uuid must come back as a uuid (contract 2 and 6.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.errors import ProtocolError
from sodalite.amqp.types import Described, ULong
from sodalite.errors import ArgumentError


@dataclass(frozen=True, slots=True)
class Request:
    message_id: Any
    reply_to: str | None
    application_properties: dict[str, Any]
    body: Any


def decode_request(payload: bytes) -> Request:
    try:
        return _decode_request(payload)
    except ProtocolError as exc:
        raise ArgumentError(f"malformed request message: {exc.description}") from None


def _decode_request(payload: bytes) -> Request:
    message_id: Any = None
    reply_to: str | None = None
    app: dict[str, Any] = {}
    body: Any = None
    for s in amqp_message.split_sections(payload):
        if s.code == amqp_message.PROPERTIES:
            fields = amqp_message.section_value(payload, s)
            if isinstance(fields, list) and fields:
                message_id = fields[0]
                reply_to = fields[4] if len(fields) > 4 and isinstance(fields[4], str) else None
        elif s.code == amqp_message.APPLICATION_PROPERTIES:
            value = amqp_message.section_value(payload, s)
            if isinstance(value, dict):
                app = {str(k): v for k, v in value.items()}
        elif s.code in (amqp_message.AMQP_VALUE, amqp_message.DATA):
            body = amqp_message.section_value(payload, s)
    return Request(message_id, reply_to, app, body)


def encode_response(correlation_id: Any, application_properties: dict[str, Any], body: Any) -> bytes:
    out = bytearray()
    encode_value(Described(ULong(amqp_message.PROPERTIES), [None, None, None, None, None, correlation_id]), out)
    encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), application_properties), out)
    encode_value(Described(ULong(amqp_message.AMQP_VALUE), body), out)
    return bytes(out)
