"""Client-side resilience on top of the official azure-servicebus SDK (issue 15)."""

from sodalite.client.dedup import DuplicateFilter
from sodalite.client.outbox import Outbox, OutboxSender
from sodalite.client.replication import (
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
