# Generated from src/sodalite/client/aio/__init__.py by scripts/unasync; edit the async source.
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
