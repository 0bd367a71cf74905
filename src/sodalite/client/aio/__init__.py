"""The asyncio twins of ``sodalite.client`` (same names, on the SDK's ``azure.servicebus.aio``)."""

from sodalite.client.aio.paired import PairedNamespaceClient, PairedNamespaceOptions

__all__ = ["PairedNamespaceClient", "PairedNamespaceOptions"]
