"""What a message is before the store numbers it, and the names every path shares.

``MessageDraft`` is a message as a sender gave it (``server/wire.py`` parses it; the partition core
turns it into a record, ``model/partition_core.record_for``); ``Lock`` is a PeekLock grant as the
receiver links see it; the dead-letter reasons the service sets and the latest expiry a store can
hold are constants here. The version-1 in-memory ``Partition``
(messages held in heaps, ``load_partition`` at start) was deleted with the version-1 path.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"  # dead-letter reasons the service sets
TTL_EXPIRED = "TTLExpiredException"
MAX_TRANSFER_HOP_COUNT_EXCEEDED = "MaxTransferHopCountExceeded"


@dataclass(frozen=True, slots=True)
class MessageDraft:
    """A message as a sender gave it, before the broker assigned a sequence number."""

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
    ping: bool = False  # the paired-namespace ping (sodalite.message.names.PING_CONTENT_TYPE): never stored

    @property
    def size(self) -> int:
        return len(self.annotations) + len(self.tail)


@dataclass(slots=True)
class Lock:
    token: uuid.UUID
    sequence_number: int
    locked_until: int
    owner: Any  # whoever received it (a receiver link); the lock outlives it, until it expires
    deferred: bool = False  # a deferred message goes back to deferred, not to the receivable heap
    session_bound: bool = False  # held under its session's lock: no expiry of its own
    in_flight: bool = False  # taken for a transfer not yet sent: no expiry, and its end counts no delivery


# The latest expiry a store can hold (a signed 64-bit count of milliseconds): a message scheduled near
# the end of time with a TTL expires there rather than overflowing the store's column.
LAST_INSTANT_MS = 2**63 - 1
