"""The names Service Bus gives a message's parts: annotations, application properties, positions."""

from __future__ import annotations

from typing import Final

SEQUENCE_NUMBER: Final = "x-opt-sequence-number"
ENQUEUED_TIME: Final = "x-opt-enqueued-time"
LOCKED_UNTIL: Final = "x-opt-locked-until"
LOCK_TOKEN: Final = "x-opt-lock-token"
MESSAGE_STATE: Final = "x-opt-message-state"
SCHEDULED_ENQUEUE_TIME: Final = "x-opt-scheduled-enqueue-time"
# A JMS message with a delivery delay (Apache Qpid JMS: milliseconds since the epoch, a long) is a
# scheduled message, as Service Bus treats it.
JMS_DELIVERY_TIME: Final = "x-opt-delivery-time"
PARTITION_KEY: Final = "x-opt-partition-key"
DEAD_LETTER_SOURCE: Final = "x-opt-deadletter-source"
# Message annotations only the service sets: stripped from what a sender sends ("ignored on input").
SERVICE_OWNED_ANNOTATIONS: Final = frozenset({
    SEQUENCE_NUMBER, ENQUEUED_TIME, LOCKED_UNTIL, LOCK_TOKEN, DEAD_LETTER_SOURCE, "x-opt-enqueue-sequence-number",
    MESSAGE_STATE, "x-opt-partition-id",
})

# Application properties the service sets on a dead-lettered message.
DEAD_LETTER_REASON: Final = "DeadLetterReason"
DEAD_LETTER_DESCRIPTION: Final = "DeadLetterErrorDescription"

# The paired-namespace ping: every entity accepts it, session-enabled ones without a SessionId, and it
# is then dropped: never stored, delivered, peeked, counted, fanned out, forwarded, scheduled or
# dead-lettered. It counts only as a send for authorization and idle time.
PING_CONTENT_TYPE: Final = "application/vnd.ms-servicebus-ping"

# Positions in the properties list (AMQP 1.0 part 3, 3.2.4).
MESSAGE_ID, USER_ID, TO, SUBJECT, REPLY_TO, CORRELATION_ID, CONTENT_TYPE = 0, 1, 2, 3, 4, 5, 6
SESSION_ID, REPLY_TO_SESSION_ID = 10, 12
PROPERTY_FIELDS: Final = 13
PROPERTY_NAMES: Final = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                         "content_encoding", "absolute_expiry_time", "creation_time", "session_id",
                         "group_sequence", "reply_to_session_id")

# ``x-opt-message-state`` values.
STATES: Final = {0: "active", 1: "deferred", 2: "scheduled"}


def text(value: object) -> str | None:
    """An id or property as text: binary as hex, anything else as its string (Service Bus ids are
    strings; other AMQP id types are rendered canonically)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    return str(value)
