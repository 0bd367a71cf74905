"""A message's values as the Spark data source's columns show them (docs/spark.md, "Schema").

Shared by the two ways a read is served: the data source's row path (``sodalite.spark.rows``, which
decodes a peeked message in the Spark worker) and the broker's columnar pages
(``sodalite.server.pages``, which builds the same columns from the stored message). Both render
values with these functions, so a page and the row path give the same rows.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.types import AmqpMap, Timestamp

SCHEMA: Final = (
    "body binary, messageId string, sessionId string, partitionKey string, correlationId string, "
    "subject string, contentType string, to string, replyTo string, replyToSessionId string, "
    "timeToLive long, scheduledEnqueueTime timestamp, enqueuedTime timestamp, sequenceNumber long, "
    "partition int, deliveryCount int, deadLetterSource string, deadLetterReason string, "
    "deadLetterErrorDescription string, applicationProperties map<string,string>, state string, "
    "amqpMessage binary"
)
COLUMNS: Final = tuple(part.strip().split(" ")[0] for part in SCHEMA.split(", "))
KINDS: Final = {part.strip().split(" ", 1)[0]: part.strip().split(" ", 1)[1] for part in SCHEMA.split(", ")}

PARTITION_SHIFT: Final = 48  # a sequence number's upper 16 bits name its partition
PARTITION_KEY: Final = "x-opt-partition-key"
SCHEDULED_ENQUEUE_TIME: Final = "x-opt-scheduled-enqueue-time"
DEAD_LETTER_SOURCE: Final = "x-opt-deadletter-source"
DEAD_LETTER_REASON: Final = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION: Final = "DeadLetterErrorDescription"
STATES: Final = {0: "active", 1: "deferred", 2: "scheduled"}
# The message annotations the broker sets: never part of ``amqpMessage`` (the message as its sender encoded it).
SERVICE_OWNED: Final = frozenset({
    "x-opt-sequence-number", "x-opt-enqueued-time", "x-opt-locked-until", "x-opt-lock-token",
    "x-opt-deadletter-source", "x-opt-enqueue-sequence-number", "x-opt-message-state", "x-opt-partition-id",
})

# properties list positions (AMQP 1.0, 3.2.4)
MESSAGE_ID, TO, SUBJECT, REPLY_TO, CORRELATION_ID, CONTENT_TYPE = 0, 2, 3, 4, 5, 6
SESSION_ID, REPLY_TO_SESSION_ID = 10, 12
# The string columns read from the properties section, with their positions in it.
PROPERTY_COLUMNS: Final = (("messageId", MESSAGE_ID), ("to", TO), ("subject", SUBJECT), ("replyTo", REPLY_TO),
                           ("correlationId", CORRELATION_ID), ("contentType", CONTENT_TYPE),
                           ("sessionId", SESSION_ID), ("replyToSessionId", REPLY_TO_SESSION_ID))


def text(value: object) -> str | None:
    """A property as a string column shows it: binary as hex, anything else as its text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def moment(ms: int | None) -> datetime.datetime | None:
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(int(ms) / 1000, datetime.UTC)


def render(value: object) -> str | None:
    """An application property as the map<string,string> column shows it: strings as they are,
    anything else as JSON (timestamps as ISO 8601, binary as hex, uuids as text)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(jsonable(value))


def jsonable(value: object) -> object:
    if isinstance(value, Timestamp):
        at = moment(value)
        return at.isoformat() if at is not None else None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def application_properties(app: AmqpMap) -> dict[str, str | None]:
    """The application properties as the map<string,string> column holds them (keys as text)."""
    return {k if isinstance(k, str) else str(k): v if v is None or isinstance(v, str) else render(v)
            for k, v in app.items()}


def body(payload: bytes, sections: list[amqp_message.Section]) -> bytes:
    """The ``body`` column: a data section's bytes as they are; several data sections joined; an
    amqp-value's string as UTF-8 (binary as it is, anything else as JSON); an amqp-sequence as JSON."""
    if len(sections) == 1 and sections[0].code == amqp_message.DATA:
        return amqp_message.binary_value(payload, sections[0])
    parts: list[bytes] = []
    for s in sections:
        if s.code == amqp_message.DATA:
            parts.append(amqp_message.binary_value(payload, s))
        elif s.code == amqp_message.AMQP_VALUE:
            value = amqp_message.section_value(payload, s)
            if isinstance(value, bytes):
                parts.append(value)
            elif isinstance(value, str):
                parts.append(value.encode("utf-8"))
            else:
                parts.append(json.dumps(jsonable(value)).encode("utf-8"))
        elif s.code == amqp_message.AMQP_SEQUENCE:
            parts.append(json.dumps(jsonable(amqp_message.section_value(payload, s))).encode("utf-8"))
    return b"".join(parts)


def state(value: int | None) -> str:
    """The ``state`` column from ``x-opt-message-state`` (absent: active)."""
    return STATES.get(int(value), str(value)) if value is not None else "active"
