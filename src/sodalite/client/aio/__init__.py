"""The asyncio twins of ``sodalite.client``, with the same names."""

from sodalite.client.aio.dedup import DuplicateFilter
from sodalite.client.aio.outbox import Outbox, OutboxSender
from sodalite.client.aio.replication import (
    ReplicatedClient,
    ReplicatedReceiver,
    ReplicatedRequestSender,
    ReplicatedSender,
    ReplicationMode,
)

__all__ = [
    "DuplicateFilter",
    "Outbox",
    "OutboxSender",
    "ReplicatedClient",
    "ReplicatedReceiver",
    "ReplicatedRequestSender",
    "ReplicatedSender",
    "ReplicationMode",
]
