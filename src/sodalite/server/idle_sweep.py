"""AutoDeleteOnIdle: the sweep that deletes idle entities, and this node's activity registrations.

Rules:
- An entity with an AutoDeleteOnIdle is idle when nothing happened on it (nor, for a topic, on any
  of its subscriptions) for that long; the sweep deletes it.
- Auto-forwarding counts as a receiver at work: an entity that forwards is never idle.
- Scheduled messages keep an entity alive.
- Several nodes on one store: each node writes its registrations (per entity, its last activity and
  the receivers attached there) every ``activity_seconds``; the store decides a deletion from every
  node's registrations (``DeleteIdleEntity``), a node's counting no more after ``ACTIVITY_LAPSE``
  intervals without a refresh; a fenced store deletes it once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Protocol

from sodalite.errors import SodaliteError
from sodalite.model.entities import TIMESPAN_MAX
from sodalite.server.entity_settings import Clock
from sodalite.server.partitioned_actor import each
from sodalite.server.registry import Entity
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import DeleteIdleEntity, EntityActivity, IdleDeleted, RecordActivity

log = logging.getLogger(__name__)

IDLE_SWEEP_SECONDS = 15.0  # AutoDeleteOnIdle is at least 5 minutes, so this is precise enough
# Several nodes: each refreshes its AutoDeleteOnIdle registrations (last activity, receivers attached)
# in the store this often; a node's receivers stop counting after ACTIVITY_LAPSE intervals without one.
ACTIVITY_SECONDS = 5.0
ACTIVITY_LAPSE = 3


class Swept(Protocol):
    """What the sweep reads of the broker (``broker.Broker``); read at each use, so a test may move them."""

    entities: dict[str, Entity]
    worker: StoreWorker
    clock: Clock
    node_id: str
    idle_sweep_seconds: float
    activity_seconds: float

    async def delete_entity(self, entity: Entity) -> None: ...


class IdleSweep:
    def __init__(self, broker: Swept) -> None:
        self.broker = broker

    async def sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.broker.idle_sweep_seconds)
            try:
                await self.sweep()
            except Exception:  # the sweeper must outlive one bad deletion
                log.exception("idle sweep failed")

    async def sweep(self) -> list[str]:
        """Delete every entity idle for its AutoDeleteOnIdle; return their names."""
        broker = self.broker
        if broker.worker.shared:
            await self.record_activity()  # this node's own registrations are current for the decision
        now = broker.clock()
        deleted = []
        for entity in self._candidates():
            if entity.name.lower() not in broker.entities:
                continue  # went with its topic in this sweep
            idle_ms = int(entity.properties.auto_delete_on_idle.total_seconds() * 1000)
            # A topic is idle only if nothing happened on any of its subscriptions either (seed).
            if not (entity.actor.is_idle(now, idle_ms) and all(
                    sub.actor.is_idle(now, idle_ms) for sub in entity.subscriptions.values())):
                continue
            if broker.worker.shared and not await self._deleted_in_store(entity, now, idle_ms):
                continue
            await broker.delete_entity(entity)
            deleted.append(entity.name)
        return deleted

    async def _deleted_in_store(self, entity: Entity, now: int, idle_ms: int) -> bool:
        """Several nodes: the store decides, from every node's registrations (clarifications.md, 18); a
        node whose registrations lapsed no longer counts. Fenced: deleted once."""
        if await self._scheduled_in_store(entity):
            return False
        lapse_ms = int(ACTIVITY_LAPSE * self.broker.activity_seconds * 1000)
        (result,) = await self.broker.worker.apply([DeleteIdleEntity(entity.name, now - idle_ms, now - lapse_ms)])
        return isinstance(result, IdleDeleted) and result.deleted

    def _candidates(self) -> list[Entity]:
        """The entities with an AutoDeleteOnIdle; forwarding counts as receiving (expiration seed)."""
        return [e for e in self.broker.entities.values()
                if e.properties.auto_delete_on_idle < TIMESPAN_MAX and not e.forward_to]

    @staticmethod
    async def _scheduled_in_store(entity: Entity) -> bool:
        """Scheduled messages keep an entity alive; another node's are in the store, not in this node's counts."""
        for actor in [entity.actor, *(sub.actor for sub in entity.subscriptions.values())]:
            for partition in each(actor):
                counts = await partition.worker.call(functools.partial(partition.worker.store.counts, partition.ref))
                if counts.scheduled > 0:
                    return True
        return False

    async def record_activity(self) -> None:
        """Write this node's registrations: per entity with an idle time, its last activity and the
        receivers attached here, a topic's with its subscriptions'."""
        entries = []
        for entity in self._candidates():
            last, receivers = 0, 0
            for actor in [entity.actor, *(sub.actor for sub in entity.subscriptions.values())]:
                for partition in each(actor):
                    at, attached = partition.activity()
                    last, receivers = max(last, at), receivers + attached
            entries.append(EntityActivity(entity.name, last, receivers))
        if entries:
            await self.broker.worker.apply([RecordActivity(self.broker.node_id, self.broker.clock(), tuple(entries))])

    async def record_activity_forever(self) -> None:
        while True:
            await asyncio.sleep(self.broker.activity_seconds)
            try:
                await self.record_activity()
            except SodaliteError as exc:  # the store is away: the next refresh tries again
                log.warning("AutoDeleteOnIdle registrations not refreshed: %s", exc)
