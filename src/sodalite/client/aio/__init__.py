"""The asyncio twins of ``sodalite.client``, with the same names (on the SDK's ``azure.servicebus.aio``)."""

from sodalite.client.aio.dedup import DuplicateFilter
from sodalite.client.aio.outbox import Outbox, OutboxSender
from sodalite.client.aio.paired import PairedNamespaceClient, PairedNamespaceOptions
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
    "PairedNamespaceClient",
    "PairedNamespaceOptions",
    "ReplicatedClient",
    "ReplicatedReceiver",
    "ReplicatedRequestSender",
    "ReplicatedSender",
    "ReplicationMode",
]
