"""Client-side resilience on the official azure-servicebus SDK (issue 15): works against any Service Bus."""

from sodalite.client.dedup import DuplicateFilter
from sodalite.client.outbox import Outbox, OutboxSender
from sodalite.client.paired import PairedNamespaceClient, PairedNamespaceOptions
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
    "PairedNamespaceClient",
    "PairedNamespaceOptions",
    "ReplicatedClient",
    "ReplicatedReceiver",
    "ReplicatedRequestSender",
    "ReplicatedSender",
    "ReplicationMode",
]
