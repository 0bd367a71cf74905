"""Link addresses to entity paths.

The Python SDK names entities with full URIs (``amqps://host:port/queue1``), other clients with
bare paths; Service Bus matches entity names case-insensitively. Reduce every address to the path
(sdk-wire-contract.md 1.2, "Broker rule").
"""

from __future__ import annotations

import re

_SCHEME_AUTHORITY = re.compile(r"^(?:amqps?|sb)://[^/]*", re.IGNORECASE)

MANAGEMENT_SUFFIX = "/$management"
CBS_NODE = "$cbs"


def entity_path(address: object) -> str:
    """``amqps://host:5672/Queue1`` -> ``queue1``; ``$cbs`` stays ``$cbs``."""
    text = address.decode("utf-8", "replace") if isinstance(address, bytes) else str(address or "")
    return _SCHEME_AUTHORITY.sub("", text).strip("/").lower()


def management_entity(path: str) -> str | None:
    """``queue1/$management`` -> ``queue1``; None if the path is not a management node."""
    if path.endswith(MANAGEMENT_SUFFIX.lower()):
        return path[: -len(MANAGEMENT_SUFFIX)]
    return None
