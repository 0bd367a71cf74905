"""Client-side resilience on the official azure-servicebus SDK (issue 15): works against any Service Bus."""

from sodalite.client.paired import PairedNamespaceClient, PairedNamespaceOptions

__all__ = ["PairedNamespaceClient", "PairedNamespaceOptions"]
