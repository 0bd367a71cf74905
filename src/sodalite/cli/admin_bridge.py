"""The broker as the management plane's QueueManager: the CLI wires the two layers together."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from sodalite.admin.atom import QueueRuntime
from sodalite.errors import EntityNotFound
from sodalite.model.entities import QueueProperties
from sodalite.server.broker import Broker
from sodalite.server.registry import QUEUE, Entity


class BrokerQueues:
    def __init__(self, broker: Broker, started: datetime.datetime) -> None:
        self.broker = broker
        self.namespace = broker.namespace.name
        self._started = started

    def sas_keys(self) -> Mapping[str, tuple[str, ...]]:
        return self.broker.sas_keys

    def _queue(self, name: str) -> Entity | None:
        entity = self.broker.entity(name)
        return entity if entity is not None and entity.kind == QUEUE else None

    def queue_names(self) -> list[str]:
        return sorted(e.name for e in self.broker.entities.values() if e.kind == QUEUE)

    def queue(self, name: str) -> tuple[str, QueueProperties, QueueRuntime] | None:
        entity = self._queue(name)
        if entity is None or not isinstance(entity.properties, QueueProperties):
            return None
        counts = entity.actor.counts()
        accessed = datetime.datetime.fromtimestamp(entity.actor.last_activity / 1000, datetime.UTC)
        runtime = QueueRuntime(
            active=counts["active"], dead_letter=counts["dead_letter"], scheduled=counts["scheduled"],
            transfer=counts["transfer"], transfer_dead_letter=counts["transfer_dead_letter"],
            size_in_bytes=entity.actor.size_in_bytes(), created_at=self._started, updated_at=self._started,
            accessed_at=accessed)
        return entity.name, entity.properties, runtime

    async def create_queue(self, name: str, properties: QueueProperties) -> None:
        await self.broker.create_queue(name, properties)

    async def update_queue(self, name: str, properties: QueueProperties) -> None:
        entity = self._queue(name)
        if entity is None:
            raise EntityNotFound(f"the queue '{name}' does not exist")
        await self.broker.update_queue(entity, properties)

    async def delete_queue(self, name: str) -> bool:
        entity = self._queue(name)
        if entity is None:
            return False
        await self.broker.delete_entity(entity)
        return True
