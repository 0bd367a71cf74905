"""The stored form of a message.

The broker never decodes and re-encodes a body. On enqueue the server slices the encoded message
into what the broker must know (system properties, header fields) and two opaque byte strings:
the client's message-annotation entries and the ``tail`` (properties, application-properties,
body sections and footer, verbatim). On delivery it writes a fresh header and an annotations map
(the broker's entries spliced in front of the client's), then the tail unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum


class MessageState(IntEnum):
    """``x-opt-message-state`` values (ServiceBusMessageState in the SDKs)."""

    ACTIVE = 0
    DEFERRED = 1
    SCHEDULED = 2


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message as a messaging store keeps it."""

    sequence_number: int
    enqueued_time: int  # ms since the Unix epoch, set by the broker
    message_id: str | None
    session_id: str | None
    partition_key: str | None
    time_to_live: int | None  # ms, from header.ttl; None = the entity default applies
    expires_at: int | None  # ms since the epoch; None = never
    scheduled_enqueue_time: int | None  # ms since the epoch, for scheduled messages
    delivery_count: int
    state: MessageState
    durable: bool | None  # header.durable as the client sent it
    priority: int | None  # header.priority as the client sent it
    annotations: bytes  # encoded map entries of the client's message-annotations
    annotation_count: int  # number of entries (keys) in ``annotations``
    tail: bytes  # properties .. footer, verbatim

    @property
    def size(self) -> int:
        """Bytes the message occupies, for quotas and statistics."""
        return len(self.annotations) + len(self.tail)

    def with_delivery_count(self, delivery_count: int) -> MessageRecord:
        return replace(self, delivery_count=delivery_count)
