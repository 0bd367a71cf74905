"""Client-side resilience on the official azure-servicebus SDK: works against any Service Bus.

``sodalite.client.aio`` has the asyncio classes (on the SDK's ``azure.servicebus.aio``);
``sodalite.client`` the same names for sync code, generated from them. Needs the SDK, the ``client``
extra; without it the import says which command installs it.
"""

try:
    import azure.servicebus  # noqa: F401
except ImportError as _missing:
    from sodalite.extras import MissingExtra

    raise MissingExtra("client", "sodalite.client (the client library)", _missing) from None

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
