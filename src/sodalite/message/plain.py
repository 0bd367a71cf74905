"""A message as plain values, for people: what ``sodalite peek`` prints and the console's browser shows.

Every value becomes something JSON can hold: timestamps as ISO 8601 text, binary as UTF-8 text where
it is some (else ``base64:`` and its base64), uuids as text, described values as their value. The
broker's own annotations are named (sequence number, enqueued time, state); the expiry is the
enqueued time plus the time-to-live, none when the time-to-live is the header's maximum.
"""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sodalite.amqp import message as amqp_message
from sodalite.amqp.types import AmqpValue, Described, Timestamp
from sodalite.message.names import (
    ENQUEUED_TIME,
    LOCKED_UNTIL,
    MESSAGE_STATE,
    PROPERTY_FIELDS,
    PROPERTY_NAMES,
    SEQUENCE_NUMBER,
)

PlainValue = str | int | float | bool | None | list["PlainValue"] | dict[str, "PlainValue"]

_STATES = {0: "Active", 1: "Deferred", 2: "Scheduled"}
_BODIES = (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE)


def plain_value(value: object) -> PlainValue:
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
    """Every section of an encoded message as plain values, with the broker's annotations named
    (a ``PlainValue`` each; typed loosely for the command line that reads them back)."""
    shown: dict[str, Any] = {}
    bodies: list[PlainValue] = []
    ttl: AmqpValue = None
    for section in amqp_message.split_sections(payload):
        value = amqp_message.section_value(payload, section)
        if section.code == amqp_message.HEADER and isinstance(value, list) and len(value) > 4:
            shown["delivery_count"] = value[4]
            ttl = value[2]
        elif section.code == amqp_message.MESSAGE_ANNOTATIONS and isinstance(value, dict):
            annotations = {str(k): v for k, v in value.items()}
            shown["sequence_number"] = annotations.pop(SEQUENCE_NUMBER, None)
            shown["enqueued_time"] = plain_value(annotations.pop(ENQUEUED_TIME, None))
            state = annotations.pop(MESSAGE_STATE, None)
            if state is not None:
                shown["state"] = _STATES.get(int(state), str(state))
            annotations.pop(LOCKED_UNTIL, None)
            if annotations:
                shown["annotations"] = plain_value(annotations)
        elif section.code == amqp_message.PROPERTIES and isinstance(value, list):
            for name, item in zip(PROPERTY_NAMES, value, strict=False):
                if item is not None:
                    shown[name] = plain_value(item)
        elif section.code == amqp_message.APPLICATION_PROPERTIES and isinstance(value, dict):
            shown["application_properties"] = plain_value(value)
        elif section.code in _BODIES:
            bodies.append(plain_value(value))
    shown["body"] = bodies[0] if len(bodies) == 1 else bodies
    shown["expires_at"] = _expiry(shown.get("enqueued_time"), ttl)
    return shown


def _expiry(enqueued: PlainValue, ttl: AmqpValue) -> str | None:
    """When the message expires: enqueued time plus time-to-live; None when it never does.

    A time-to-live at the header's maximum (about 49.7 days, what a longer one is shown as) counts as
    never: the broker writes that for TimeSpan.MaxValue and for anything longer than a uint holds.
    """
    if not isinstance(ttl, int) or ttl >= 0xFFFFFFFF or not isinstance(enqueued, str):
        return None
    return (datetime.datetime.fromisoformat(enqueued) + datetime.timedelta(milliseconds=ttl)).isoformat()


@dataclass(slots=True)
class ShownTail:
    """A stored tail as the browser shows it: the properties list (padded), the application
    properties as plain values, and the body: the data sections' bytes, or an AMQP value's JSON text."""

    properties: list[AmqpValue] = field(default_factory=lambda: [None] * PROPERTY_FIELDS)
    application_properties: dict[str, PlainValue] = field(default_factory=dict)
    body: bytes = b""


def shown_tail(tail: bytes) -> ShownTail:
    """The properties, application properties and body of a stored tail, for the browser."""
    fields, user = amqp_message.properties_of(tail)
    body = bytearray()
    for section in amqp_message.split_sections(tail):
        if section.code == amqp_message.DATA:
            body += amqp_message.binary_value(tail, section)
        elif section.code in (amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE):
            body += json.dumps(plain_value(amqp_message.section_value(tail, section))).encode()
    return ShownTail(fields, {name: plain_value(value) for name, value in user.items()}, bytes(body))
