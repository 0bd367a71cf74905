"""The broker process: its namespace, its messaging store, its entities and its listener.

Startup writes the configured entities into the store (the configuration wins over what was
stored), then loads every stored entity and its messages, and only then starts listening, so a
client never reaches a half-loaded broker. Shutdown stops accepting, lets in-flight commits
finish, and closes the store.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sodalite.errors import ConfigurationError, EntityNotFound, InvalidOperation
from sodalite.model.config import NamespaceConfig
from sodalite.model.entities import TIMESPAN_MAX, QueueProperties
from sodalite.server.addresses import entity_path
from sodalite.server.connection_handler import BrokerConnection
from sodalite.server.partition_actor import Clock, EntitySettings, PartitionActor, wall_clock_ms
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import DeleteEntity, EntityRecord, MessagingStore, PartitionRef, PutEntity
from sodalite.store.sqlite import SqliteStore

log = logging.getLogger(__name__)

QUEUE = "queue"
IDLE_SWEEP_SECONDS = 15.0  # AutoDeleteOnIdle is at least 5 minutes, so this is precise enough
MAX_TRANSFER_HOPS = 4  # Service Bus forwards a message at most this many times (DLQ overview)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message sent to an entity ends up after following ForwardTo."""

    entity: QueueEntity  # the destination, or the entity where the hop limit was reached
    hops: int
    exceeded: bool  # True: the message goes to ``entity``'s transfer dead-letter queue


@dataclass(slots=True)
class QueueEntity:
    name: str
    properties: QueueProperties
    max_message_size: int
    actor: PartitionActor


def _ms(value: timedelta) -> int | None:
    return None if value >= TIMESPAN_MAX else int(value.total_seconds() * 1000)


class Broker:
    def __init__(self, namespace: NamespaceConfig, store: MessagingStore, *, max_frame_size: int = 262144,
                 idle_timeout_ms: int | None = 120_000, clock: Clock = wall_clock_ms) -> None:
        self.namespace = namespace
        self.clock = clock
        self.worker = StoreWorker(store, "0")
        self.max_frame_size = max_frame_size
        self.idle_timeout_ms = idle_timeout_ms
        self.container_id = f"sodalite-{namespace.name}"
        self.entities: dict[str, QueueEntity] = {}
        self.connections: set[BrokerConnection] = set()
        self.sas_keys: dict[str, tuple[str, ...]] = {
            rule.key_name: tuple(k for k in (rule.primary_key, rule.secondary_key) if k)
            for rule in namespace.authorization_rules
        }
        self._server: asyncio.Server | None = None
        self._idle_sweeper: asyncio.Task[None] | None = None

    @classmethod
    def with_sqlite(cls, namespace: NamespaceConfig, data_dir: Path, synchronous: str = "FULL") -> Broker:
        data_dir.mkdir(parents=True, exist_ok=True)
        return cls(namespace, SqliteStore(data_dir / "messages.db", synchronous=synchronous))

    def entity(self, path: str) -> QueueEntity | None:
        return self.entities.get(path.lower())

    def route(self, entity: QueueEntity) -> Route:
        """Follow ForwardTo from ``entity``: a chain longer than the hop limit, or a loop, stops there."""
        current, hops = entity, 0
        while current.properties.forward_to:
            target = self.entity(entity_path(current.properties.forward_to))
            if target is None:
                raise EntityNotFound(f"'{current.name}' forwards to '{current.properties.forward_to}', "
                                     "which this broker does not serve")
            if hops == MAX_TRANSFER_HOPS:
                return Route(current, hops, exceeded=True)
            current, hops = target, hops + 1
        return Route(current, hops, exceeded=False)

    def _link_dead_letter_forwarding(self) -> None:
        """Point each entity with ForwardDeadLetteredMessagesTo at where those messages end up."""
        for entity in self.entities.values():
            target_name = entity.properties.forward_dead_lettered_messages_to
            target = self.entity(entity_path(target_name)) if target_name else None
            if target_name and target is None:
                log.warning("%s forwards dead-lettered messages to unknown %s; keeping them", entity.name,
                            target_name)
            if target is not None:
                route = self.route(target)
                target = None if route.exceeded else route.entity
            entity.actor.dead_letter_target = target.actor if target is not None else None

    async def start(self, host: str, port: int) -> int:
        """Load everything, then listen; return the port actually bound."""
        await self.worker.call(self.worker.store.open)
        if self.namespace.topics:
            log.warning("topics are not served yet; ignoring %s",
                        ", ".join(t.name for t in self.namespace.topics))
        await self.worker.apply([
            PutEntity(EntityRecord(q.name, QUEUE, q.properties.to_json())) for q in self.namespace.queues
        ])
        for record in await self.worker.call(self.worker.store.load_entities):
            if record.kind == QUEUE:
                await self._load_queue(record)
        self._link_dead_letter_forwarding()
        loop = asyncio.get_running_loop()
        self._idle_sweeper = loop.create_task(self._sweep_idle_forever())
        self._server = await loop.create_server(lambda: BrokerConnection(self), host, port)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def _settings(self, properties: QueueProperties) -> tuple[EntitySettings, int]:
        kilobytes = properties.max_message_size_in_kilobytes or self.namespace.max_message_size_in_kilobytes
        window = properties.duplicate_detection_history_time_window
        settings = EntitySettings(
            lock_duration=int(properties.lock_duration.total_seconds() * 1000),
            default_ttl=_ms(properties.default_message_time_to_live),
            max_message_size=kilobytes * 1024,
            max_delivery_count=properties.max_delivery_count,
            dead_lettering_on_message_expiration=properties.dead_lettering_on_message_expiration,
            requires_session=properties.requires_session,
            max_size_in_bytes=properties.max_size_in_megabytes * 1024 * 1024,
            duplicate_detection_window=int(window.total_seconds() * 1000)
            if properties.requires_duplicate_detection else None,
        )
        return settings, kilobytes * 1024

    async def _load_queue(self, record: EntityRecord) -> None:
        try:
            properties = QueueProperties.from_json(record.properties)
        except ConfigurationError as exc:
            log.error("stored queue %s has invalid properties, skipped: %s", record.path, exc)
            return
        settings, max_message_size = self._settings(properties)
        actor = PartitionActor(PartitionRef(record.path.lower(), 0), settings, self.worker, clock=self.clock)
        await actor.load()
        self.entities[record.path.lower()] = QueueEntity(record.path, properties, max_message_size, actor)

    async def update_queue(self, entity: QueueEntity, properties: QueueProperties) -> None:
        """Store new properties and apply them; every lock held on the queue is dropped.

        Properties a running queue cannot change in place (RequiresSession, EnablePartitioning,
        duplicate detection's on/off) are refused, as Service Bus refuses them.
        """
        fixed = ("requires_session", "enable_partitioning", "requires_duplicate_detection")
        changed = [name for name in fixed if getattr(properties, name) != getattr(entity.properties, name)]
        if changed:
            raise InvalidOperation(f"{', '.join(changed)} cannot be changed on an existing queue")
        await self.worker.apply([PutEntity(EntityRecord(entity.name, QUEUE, properties.to_json()))])
        settings, max_message_size = self._settings(properties)
        entity.properties, entity.max_message_size = properties, max_message_size
        entity.actor.update_settings(settings)
        self._link_dead_letter_forwarding()

    # ---- AutoDeleteOnIdle ----------------------------------------------------------------------------

    async def _sweep_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SWEEP_SECONDS)
            try:
                await self.sweep_idle()
            except Exception:  # the sweeper must outlive one bad deletion
                log.exception("idle sweep failed")

    async def sweep_idle(self) -> list[str]:
        """Delete every entity idle for its AutoDeleteOnIdle; return their names.

        Auto-forwarding counts as a receiver at work, so an entity that forwards is never idle
        (expiration seed).
        """
        now = self.clock()
        deleted = []
        for entity in list(self.entities.values()):
            idle_for = entity.properties.auto_delete_on_idle
            if idle_for >= TIMESPAN_MAX or entity.properties.forward_to:
                continue
            if entity.actor.is_idle(now, int(idle_for.total_seconds() * 1000)):
                await self.delete_entity(entity)
                deleted.append(entity.name)
        return deleted

    async def delete_entity(self, entity: QueueEntity) -> None:
        """Remove the entity, its messages and sub-queues; links on it are detached with amqp:not-found."""
        self.entities.pop(entity.name.lower(), None)
        for connection in list(self.connections):
            connection.entity_deleted(entity)
        await entity.actor.close()
        await self.worker.apply([DeleteEntity(entity.name)])
        log.info("deleted %s", entity.name)

    async def stop(self) -> None:
        if self._idle_sweeper is not None:
            self._idle_sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        for entity in self.entities.values():
            await entity.actor.close()
        await self.worker.close()
