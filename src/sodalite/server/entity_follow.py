"""Several nodes on one store: this node follows the entity changes the others make.

Rules:
- When the store announces another node's entity change, and every ``worker.follow_seconds`` (1 s)
  in any case, the node reads the entity records again: it takes up the entities another node
  created, drops those it deleted (their links detached), and applies the properties and
  subscription rules it changed and the namespace keys it regenerated, so every node sees a change
  within about a second.
- Never while this node creates or deletes an entity itself (the broker holds its entity lock).
- Changed properties end the locks this node holds on a queue or subscription, as on the node that
  changed them; changed rules are compiled as ``add_rule`` compiles them.
- A record this node cannot read, or rules it cannot compile, are logged once per stored version
  (the records are read every second) and the old ones kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from sodalite.errors import ConfigurationError, SodaliteError
from sodalite.model.entities import QueueProperties, RuleDescription, SubscriptionProperties, TopicProperties
from sodalite.server.entity_loader import EntityLoader, Properties, compile_rule
from sodalite.server.entity_times import EntityTimes
from sodalite.server.keys import KEY_OVERRIDES_KIND, Keys
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import EntityRecord

log = logging.getLogger(__name__)


class Followed(Protocol):
    """What the follow reads and changes of the broker (``broker.Broker``)."""

    entities: dict[str, Entity]
    worker: StoreWorker
    keys: Keys
    entity_times: EntityTimes
    loader: EntityLoader

    def keys_changed(self) -> None: ...


class EntityFollower:
    """``load`` serves a stored record, ``drop`` stops serving an entity (not in the store), and
    ``relink`` points dead-letter forwarding and topic activations at the entities served now."""

    def __init__(self, broker: Followed, *, load: Callable[[EntityRecord], Awaitable[None]],
                 drop: Callable[[Entity], Awaitable[None]], relink: Callable[[], None]) -> None:
        self.broker = broker
        self.load = load
        self.drop = drop
        self.relink = relink
        self.refused: dict[str, object] = {}  # lower-cased path -> a stored record the follow refused

    async def forever(self, changed: asyncio.Event, follow: Callable[[], Awaitable[None]]) -> None:
        """Run ``follow`` (under the broker's entity lock) whenever ``changed`` is set, and every second."""
        while True:
            try:
                await asyncio.wait_for(changed.wait(), self.broker.worker.follow_seconds)
            except TimeoutError:
                pass
            changed.clear()
            try:
                await follow()
            except SodaliteError as exc:
                log.warning("following the store's entities failed: %s", exc)
            except Exception:
                log.exception("following the store's entities failed")

    async def follow(self) -> None:
        broker = self.broker
        stored = await broker.worker.call(broker.worker.store.load_entities)
        self._follow_keys(stored)
        broker.entity_times.follow(stored)  # those of entities created or changed elsewhere
        records = {r.path.lower(): r for r in stored if r.kind in (QUEUE, TOPIC, SUBSCRIPTION)}
        for path, entity in list(broker.entities.items()):
            if path not in records and path in broker.entities:
                await self.drop(entity)
        for kind in (QUEUE, TOPIC, SUBSCRIPTION):  # a subscription needs its topic first
            for path, record in records.items():
                if record.kind != kind:
                    continue
                known = broker.entities.get(path)
                if known is None:
                    try:
                        await self.load(record)
                    except ConfigurationError as exc:  # e.g. a rule this node cannot compile
                        self._refuse(record, record.properties, f"not taken up: {exc.description}")
                        continue
                    log.info("took up %s, created through another node", record.path)
                else:
                    await self._follow_changes(known, record)
        self.relink()

    async def _follow_changes(self, known: Entity, record: EntityRecord) -> None:
        """Apply what another node changed in ``known``'s stored record: its properties and a
        subscription's rules."""
        raw: dict[str, Any] = record.properties
        try:
            if record.kind == QUEUE:
                properties: Properties = QueueProperties.from_json(raw)
            elif record.kind == TOPIC:
                properties = TopicProperties.from_json(raw)
            else:
                properties = SubscriptionProperties.from_json(raw.get("Properties", {}))
        except SodaliteError as exc:
            self._refuse(record, raw, f"changed properties not applied: {exc.description}")
            return
        if properties != known.properties:
            settings, max_message_size = self.broker.loader.settings(properties, known.partitioned)
            known.properties, known.max_message_size = properties, max_message_size
            self.broker.keys_changed()
            await known.actor.update_settings(settings)
        if record.kind == SUBSCRIPTION:
            try:
                descriptions = [RuleDescription.from_json(r) for r in raw.get("Rules", [])]
                if descriptions != [r.description for r in known.rules]:
                    known.rules[:] = [compile_rule(d) for d in descriptions]
                    log.info("applied the rules of %s, changed through another node", record.path)
            except SodaliteError as exc:
                self._refuse(record, raw, f"changed rules not applied, the old ones kept: {exc.description}")
                return
        self.refused.pop(record.path.lower(), None)

    def _refuse(self, record: EntityRecord, raw: object, problem: str) -> None:
        """Log a stored record the follow cannot apply, once per version of it."""
        path = record.path.lower()
        if self.refused.get(path) != raw:
            self.refused[path] = raw
            log.error("%s %s, changed through another node: %s", record.kind, record.path, problem)

    def _follow_keys(self, stored: Sequence[EntityRecord]) -> None:
        """Take up the namespace rules' keys another node regenerated (a queue's or topic's own keys
        are in its record, which :meth:`_follow_changes` applies)."""
        try:
            changed = self.broker.keys.follow(stored)
        except (KeyError, TypeError, AttributeError, SodaliteError) as exc:
            records = [r for r in stored if r.kind == KEY_OVERRIDES_KIND]
            self._refuse(records[0], [r.properties for r in records], f"regenerated keys not applied: {exc}")
            return
        if changed:
            log.info("applied the shared access keys regenerated through another node")
            self.broker.keys_changed()
