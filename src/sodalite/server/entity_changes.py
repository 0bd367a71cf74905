"""The entities this node serves: loaded, created, updated and deleted, with their rules.

Rules:
- Creation, deletion and rule changes run one at a time under ``lock``, never while the follow of
  other nodes' changes runs (``server/entity_follow.py``).
- A new entity is refused if its name is taken, past the namespace's quotas (queues plus topics,
  partitioned ones, subscriptions per topic), or if a forwarding target does not exist or cannot be
  reached; its record is stored (with whatever an earlier entity of its path left removed in the
  same transaction) before it is served.
- Properties a running entity cannot change in place (RequiresSession, EnablePartitioning,
  duplicate detection's on/off) are refused with Service Bus's words; an update drops every lock
  held on the entity.
- A rule is compiled before it is stored, so a bad filter is refused with its position; each rule is
  a row of its own, and the store decides whether its name is taken.
- A deleted entity is forgotten at once (nothing new reaches it), its links are detached with
  amqp:not-found, and its messages, sub-queues and subscriptions go with it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Collection
from typing import Protocol

from sodalite.errors import EntityAlreadyExists, EntityNotFound, InvalidOperation, QuotaExceeded
from sodalite.model.config import NamespaceConfig
from sodalite.model.entities import (
    EntityKind,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
    forward_target,
    validate_entity_name,
)
from sodalite.model.quotas import namespace_full, topic_full
from sodalite.server.addresses import entity_path
from sodalite.server.entity_loader import EntityLoader, Properties, compile_rule, read_record
from sodalite.server.entity_settings import Clock
from sodalite.server.entity_times import EntityTimes
from sodalite.server.partitioned_actor import each
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity, Route, named_subscription_path
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.server.topology import Topology
from sodalite.store.port import DeleteEntity, DeleteRule, EntityRecord, PutEntity, PutRule, RuleWritten

log = logging.getLogger(__name__)


class Linked(Protocol):
    """A connection, as far as a deleted entity concerns it (``connection_handler.BrokerConnection``)."""

    def entity_deleted(self, entity: Entity) -> None: ...


class Served(Protocol):
    """What the entity changes read and change of the broker (``broker.Broker``)."""

    namespace: NamespaceConfig
    entities: dict[str, Entity]
    worker: StoreWorker
    workers: list[StoreWorker]
    loader: EntityLoader
    topology: Topology
    entity_times: EntityTimes
    clock: Clock
    max_subscriptions_per_topic: int

    @property
    def connections(self) -> Collection[Linked]: ...

    def entity(self, path: str) -> Entity | None: ...

    def route(self, entity: Entity) -> Route: ...

    def keys_changed(self) -> None: ...


class EntityChanges:
    def __init__(self, broker: Served) -> None:
        self.broker = broker
        self.lock = asyncio.Lock()  # entity creation and deletion against the follower

    def start_activations(self) -> None:
        """Topics on the core publish their due scheduled messages only once their subscriptions are
        loaded (those loaded after them at start, or taken up from another node)."""
        for entity in self.broker.entities.values():
            if isinstance(entity.actor, TopicActor | PartitionedTopicActor):
                entity.actor.start_activation()

    def _touched(self, path: str, *, created: bool = False) -> PutEntity:
        """Note an entity's creation or update now; the record to store with it."""
        return self.broker.entity_times.touched(path, self.broker.clock(), created=created)

    async def load(self, record: EntityRecord) -> None:
        """Serve the stored entity ``record`` (``server/entity_loader.py``); a subscription needs its topic."""
        properties, rules = read_record(record)
        topic = None
        if record.kind == SUBSCRIPTION:
            topic = self.broker.entity(record.path.lower().split("/subscriptions/")[0])
            if topic is None:
                log.error("subscription %s has no topic; skipped", record.path)
                return
        entity = await self.broker.loader.load(record, properties, rules, topic)
        path = record.path.lower()
        self.broker.entities[path] = entity
        if topic is not None:
            topic.subscriptions[path] = entity
        actor = entity.actor
        if isinstance(actor, TopicActor):
            actor.plan = functools.partial(self.broker.topology.copies, entity)
        elif isinstance(actor, PartitionedTopicActor):
            for number, topic_partition in enumerate(actor.topics):
                topic_partition.plan = functools.partial(self.broker.topology.copies, entity, index=number)

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        """Add a rule (compiled first, so a bad filter is refused with its position) and store it as a
        row of its own. The store decides whether the name is taken: on a store several nodes share,
        another node may have added it a moment ago (then EntityAlreadyExists, as Service Bus answers)."""
        compiled = compile_rule(rule)
        async with self.lock:  # not while the follow replaces this node's rules
            if not await self._write_rule(subscription, PutRule(subscription.name, rule.name, rule.to_json())):
                raise EntityAlreadyExists(f"the rule '{rule.name}' already exists on '{subscription.name}'")
            subscription.rules[:] = [*(r for r in subscription.rules if r.name.lower() != rule.name.lower()),
                                     compiled]

    async def remove_rule(self, subscription: Entity, name: str) -> None:
        async with self.lock:
            removed = await self._write_rule(subscription, DeleteRule(subscription.name, name))
            # Gone from the store either way (another node may have removed it a moment ago).
            subscription.rules[:] = [r for r in subscription.rules if r.name.lower() != name.lower()]
            if not removed:
                raise EntityNotFound(f"the rule '{name}' does not exist on '{subscription.name}'")

    async def replace_rule(self, subscription: Entity, rule: RuleDescription) -> None:
        """Replace the rule of the same name (the management API's update); the new one is compiled first."""
        compiled = compile_rule(rule)
        async with self.lock:
            if not await self._write_rule(subscription, PutRule(subscription.name, rule.name, rule.to_json(),
                                                                replace=True)):
                raise EntityNotFound(f"the rule '{rule.name}' does not exist on '{subscription.name}'")
            rules = [compiled if r.name.lower() == rule.name.lower() else r for r in subscription.rules]
            if compiled not in rules:  # added through another node, not followed here yet
                rules.append(compiled)
            subscription.rules[:] = rules

    async def _write_rule(self, subscription: Entity, op: PutRule | DeleteRule) -> bool:
        """Write one rule row (one transaction, not the subscription's whole record); whether the store
        applied it (see PutRule and DeleteRule)."""
        subscription.actor.note_activity()  # a rule change counts against AutoDeleteOnIdle (seed)
        (result,) = await self.broker.worker.apply([op])
        return isinstance(result, RuleWritten) and result.applied

    def _check_new_entity(self, name: str, kind: EntityKind, partitioned: bool) -> None:
        """A queue or topic named ``name`` may be created: the name is valid and free, and the namespace's
        quotas on queues plus topics, and on partitioned ones (seed: 10,000 and 100), allow one more."""
        validate_entity_name(name, kind)
        if self.broker.entity(name) is not None:
            raise EntityAlreadyExists(f"the messaging entity '{name}' already exists")
        entities = [e for e in self.broker.entities.values() if e.kind in (QUEUE, TOPIC)]
        namespace = self.broker.namespace
        refusal = namespace_full(len(entities), sum(1 for e in entities if e.partitioned), partitioned,
                                 namespace.max_entity_count, namespace.max_partitioned_entity_count)
        if refusal is not None:
            raise QuotaExceeded(refusal)

    async def create_queue(self, name: str, properties: QueueProperties) -> Entity:
        async with self.lock:
            return await self._create_queue(name, properties)

    async def _create_queue(self, name: str, properties: QueueProperties) -> Entity:
        """Create and store a queue at runtime (the management API's PUT)."""
        self._check_new_entity(name, "queue", properties.enable_partitioning)
        self._check_forward_targets(properties, new_name=name)
        return await self._serve_created(EntityRecord(name, QUEUE, properties.to_json()))

    async def update_queue(self, entity: Entity, properties: QueueProperties) -> None:
        """Store new properties and apply them; every lock held on the queue is dropped.

        Properties a running queue cannot change in place (RequiresSession, EnablePartitioning,
        duplicate detection's on/off) are refused, as Service Bus refuses them.
        """
        fixed = ("requires_session", "enable_partitioning", "requires_duplicate_detection")
        changed = [name for name in fixed if getattr(properties, name) != getattr(entity.properties, name)]
        if "requires_session" in changed:  # Service Bus's words (the Go SDK's admin tests compare them)
            raise InvalidOperation("The value for the RequiresSession property of an existing Queue cannot be changed")
        if "enable_partitioning" in changed:
            raise InvalidOperation("Partitioning cannot be changed for Queue. ")  # Service Bus's words
        if changed:
            raise InvalidOperation(f"{', '.join(changed)} cannot be changed on an existing queue")
        self._check_forward_targets(properties, entity)
        await self._store_update(entity, EntityRecord(entity.name, QUEUE, properties.to_json()), properties)
        self.broker.topology.link_dead_letter_forwarding()

    def _check_forward_targets(self, properties: QueueProperties | SubscriptionProperties,
                               source: Entity | None = None, topic: Entity | None = None,
                               new_name: str | None = None) -> None:
        """The forwarding targets exist, and the source can reach them. A queue's ForwardTo routes each
        send at once. A subscription's copies forwarded elsewhere are stored by its topic's actor, into
        any queue or subscription past the target's ForwardTo chain, in any store; dead letters
        forwarded elsewhere go in the dead-lettering's transaction or through a relay
        (``Topology.check_dead_letter_target``). ``source`` is the entity being changed (None: being
        created); ``topic``, a new subscription's topic; ``new_name``, a new queue's."""
        owner = topic if topic is not None else (source.topic if source is not None else None)
        for name in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(properties, name, None)
            if not target:
                continue
            found = self.broker.entity(entity_path(forward_target(target)))
            if found is None:
                raise EntityNotFound(f"the forwarding target '{target}' does not exist")
            if name == "forward_dead_lettered_messages_to":
                self.broker.topology.check_dead_letter_target(found)
            elif owner is not None:
                self.broker.route(found)  # a chain that names an entity that is gone is refused now

    async def create_topic(self, name: str, properties: TopicProperties) -> Entity:
        async with self.lock:
            return await self._create_topic(name, properties)

    async def _create_topic(self, name: str, properties: TopicProperties) -> Entity:
        """Create and store a topic at runtime (the management API's PUT)."""
        self._check_new_entity(name, "topic", properties.enable_partitioning)
        return await self._serve_created(EntityRecord(name, TOPIC, properties.to_json()))

    async def update_topic(self, entity: Entity, properties: TopicProperties) -> None:
        """Store new properties and apply them; partitioning and duplicate detection's on/off are fixed."""
        fixed = ("enable_partitioning", "requires_duplicate_detection")
        changed = [name for name in fixed if getattr(properties, name) != getattr(entity.properties, name)]
        if "enable_partitioning" in changed:  # Service Bus's words (the Go SDK's TestAdminClient_UpdateTopic)
            raise InvalidOperation("Partitioning cannot be changed for Topic. ")
        if changed:
            raise InvalidOperation(f"{', '.join(changed)} cannot be changed on an existing topic")
        await self._store_update(entity, EntityRecord(entity.name, TOPIC, properties.to_json()), properties)

    async def create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                  rules: list[RuleDescription]) -> Entity:
        async with self.lock:
            return await self._create_subscription(topic, name, properties, rules)

    async def _create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                   rules: list[RuleDescription]) -> Entity:
        """Create and store a subscription of ``topic`` at runtime, with its first rules."""
        validate_entity_name(name, "subscription")
        path = named_subscription_path(topic.name, name)
        if self.broker.entity(path) is not None:
            raise EntityAlreadyExists(f"the subscription '{name}' already exists on '{topic.name}'")
        refusal = topic_full(topic.name, len(topic.subscriptions), self.broker.max_subscriptions_per_topic)
        if refusal is not None:
            raise QuotaExceeded(refusal)
        self._check_forward_targets(properties, topic=topic)
        for rule in rules:
            compile_rule(rule)  # refuse a bad filter before anything is stored
        return await self._serve_created(EntityRecord(
            path, SUBSCRIPTION, {"Properties": properties.to_json(), "Rules": [r.to_json() for r in rules]}))

    async def update_subscription(self, entity: Entity, properties: SubscriptionProperties) -> None:
        """Store new properties (its rules kept) and apply them; every lock held on it is dropped."""
        if properties.requires_session != entity.requires_session:
            raise InvalidOperation("The value for the RequiresSession property of an existing Subscription cannot be "
                                   "changed")
        self._check_forward_targets(properties, entity)
        record = {"Properties": properties.to_json()}  # its rules are rows of their own, left as they are
        await self._store_update(entity, EntityRecord(entity.name, SUBSCRIPTION, record), properties)
        self.broker.topology.link_dead_letter_forwarding()

    def relink(self) -> None:
        """Point dead-letter forwarding and topic activations at the entities served now."""
        self.broker.topology.link_dead_letter_forwarding()
        self.start_activations()

    async def _serve_created(self, record: EntityRecord) -> Entity:
        """Store a new entity's record and serve it: a topic's scheduled messages activate, a queue's or
        subscription's dead letters are pointed where they go (and others' at it)."""
        await self._store_created(record)
        await self.load(record)
        if record.kind == TOPIC:
            self.start_activations()
        else:
            self.broker.topology.link_dead_letter_forwarding()
        entity = self.broker.entity(record.path)
        assert entity is not None
        return entity

    async def _store_update(self, entity: Entity, record: EntityRecord, properties: Properties) -> None:
        """Store an entity's new properties (and its times) and apply them: its actor's settings change,
        which drops every lock held on it."""
        await self.broker.worker.apply([PutEntity(record), self._touched(entity.name)])
        settings, max_message_size = self.broker.loader.settings(properties, entity.partitioned)
        entity.properties, entity.max_message_size = properties, max_message_size
        self.broker.keys_changed()
        await entity.actor.update_settings(settings)

    async def _store_created(self, record: EntityRecord) -> None:
        """Store a new entity's record, and remove whatever an earlier entity of its path left behind
        in the same transaction: another node that had not yet followed that entity's deletion may
        have stored messages for it since (a send's copies for a subscription deleted through this
        node), and they must not show up in the new one. The other stores, where a partitioned
        entity's partitions or a topic's subscriptions may lie, are cleared first (those online)."""
        for worker in self.broker.workers[1:]:
            if not worker.offline:
                await worker.apply([DeleteEntity(record.path)])
        await self.broker.worker.apply([DeleteEntity(record.path), PutEntity(record),
                                 self._touched(record.path, created=True)])

    async def drop_locally(self, entity: Entity) -> None:
        """Another node deleted ``entity`` (from the store): stop serving it here; links are detached."""
        for sub in list(entity.subscriptions.values()):
            await self.drop_locally(sub)
        await self._stop_serving(entity)
        log.info("dropped %s, deleted through another node", entity.name)

    async def _stop_serving(self, entity: Entity) -> None:
        """Forget ``entity`` here (not in the store): detach its links, close its actor."""
        self.broker.entities.pop(entity.name.lower(), None)
        if entity.topic is not None:
            entity.topic.subscriptions.pop(entity.name.lower(), None)
        for connection in list(self.broker.connections):
            connection.entity_deleted(entity)
        self.broker.keys_changed()  # its own rules went with it
        await entity.actor.close()

    async def delete_entity(self, entity: Entity) -> None:
        """Remove the entity, its messages and sub-queues; links on it are detached with amqp:not-found."""
        async with self.lock:
            await self.delete_now(entity)

    async def delete_now(self, entity: Entity) -> None:
        self.broker.entities.pop(entity.name.lower(), None)  # at once: nothing new reaches it meanwhile
        self.broker.topology.link_dead_letter_forwarding()  # nor dead letters forwarded to it (they stay)
        for sub in list(entity.subscriptions.values()):
            await self.delete_now(sub)
        await self._stop_serving(entity)
        for worker in {id(p.worker): p.worker for p in each(entity.actor)}.values():
            if worker is not self.broker.worker:
                await worker.apply([DeleteEntity(entity.name)])  # its partitions kept there
        await self.broker.worker.apply([DeleteEntity(entity.name), self.broker.entity_times.forget(entity.name)])
        log.info("deleted %s", entity.name)
