"""Sodalite's own small AMQP client, on its AMQP layer: used by the command line and the Spark data source.

It sits beside the server (it imports the AMQP layer, the message layer and the model, never the
server), so both the ``cli`` layer and the ``spark`` package can use it.

The client is imported on first use, so ``from sodalite.amqpclient import connection_string`` (what
the command line's parser needs) does not load the AMQP layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sodalite.amqpclient.client import AmqpClient, ClientError, ManagementReply

__all__ = ["AmqpClient", "ClientError", "ManagementReply"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("sodalite.amqpclient.client"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
