"""What the management plane needs from the broker, as an interface the broker's owner implements.

The admin layer imports only the model, the store port and errors (architecture.md), so it
cannot reach the server; the CLI hands it an object with these methods, backed by the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from sodalite.admin.atom import QueueRuntime
from sodalite.model.entities import QueueProperties


class QueueManager(Protocol):
    namespace: str

    def sas_keys(self) -> Mapping[str, tuple[str, ...]]: ...

    def queue_names(self) -> list[str]: ...

    def queue(self, name: str) -> tuple[str, QueueProperties, QueueRuntime] | None:
        """(the queue's own name spelling, its properties, its runtime counts), or None."""

    async def create_queue(self, name: str, properties: QueueProperties) -> None:
        """Raises EntityAlreadyExists when a queue or topic of that name exists."""

    async def update_queue(self, name: str, properties: QueueProperties) -> None:
        """Raises EntityNotFound for an unknown queue."""

    async def delete_queue(self, name: str) -> bool:
        """True if it existed."""
