"""How a stored entity record becomes a served entity.

Rules:
- A record's properties are read as its kind's (a subscription's under "Properties", with its rules
  under "Rules"); a record that cannot be read, or a rule that does not compile, is a configuration
  error naming the entity.
- The actor's settings come from any kind's properties; absent ones take the queue defaults, and a
  message size of 0 the namespace's. A Premium namespace caps a partitioned entity's messages at 1 MB.
- A subscription is partitioned as its topic is.
- Partition ``i`` of a partitioned entity lives in store ``i`` modulo the stores, so a partitioned
  topic's partition ``i`` and its subscriptions' partitions ``i`` share a store (and existing data
  stays put). A non-partitioned entity lives in the store its name picks, the same on every start; a
  subscription lives with its topic, so a send's copies commit in one transaction.
- A partition whose store is offline is suspended, and loads itself once the store is back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sodalite.errors import ConfigurationError, SodaliteError
from sodalite.model.config import NamespaceConfig
from sodalite.model.entities import (
    TIMESPAN_MAX,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
)
from sodalite.model.partitioning import partition_index
from sodalite.server.core_actor import CoreActor
from sodalite.server.entity_settings import EntitySettings
from sodalite.server.fanout import CompiledRule
from sodalite.server.partition_runner import LoopClock
from sodalite.server.partitioned_actor import EntityActor, PartitionedCoreActor, each
from sodalite.server.registry import QUEUE, TOPIC, Entity
from sodalite.server.store_worker import StoreWorker
from sodalite.server.topic_actor import PartitionedTopicActor, TopicActor
from sodalite.store.port import EntityRecord, PartitionRef

log = logging.getLogger(__name__)

PREMIUM_PARTITIONED_MESSAGE_SIZE = 1024 * 1024  # partitioned entities of a Premium-like namespace (seed)

Properties = QueueProperties | TopicProperties | SubscriptionProperties


def _ms(value: timedelta) -> int | None:
    return None if value >= TIMESPAN_MAX else int(value.total_seconds() * 1000)


def compile_rule(rule: RuleDescription) -> CompiledRule:
    """The rule compiled; a bad filter or action is refused naming the rule (and its position)."""
    try:
        return CompiledRule.compile(rule)
    except SodaliteError as exc:
        raise type(exc)(f"rule '{rule.name}': {exc.description}") from None


def read_record(record: EntityRecord) -> tuple[Properties, list[CompiledRule]]:
    """A stored entity's properties and compiled rules; raises ConfigurationError."""
    try:
        if record.kind == QUEUE:
            return QueueProperties.from_json(record.properties), []
        if record.kind == TOPIC:
            return TopicProperties.from_json(record.properties), []
        properties = SubscriptionProperties.from_json(record.properties.get("Properties", {}))
        return properties, [compile_rule(RuleDescription.from_json(r)) for r in record.properties.get("Rules", [])]
    except SodaliteError as exc:
        raise ConfigurationError(f"{record.kind} '{record.path}': {exc.description}") from None


class EntityLoader:
    """Builds the actors of the entities this node serves, in its stores (``workers``)."""

    def __init__(self, namespace: NamespaceConfig, workers: Sequence[StoreWorker], core_clock: LoopClock,
                 node_id: str) -> None:
        self.namespace = namespace
        self.workers = workers
        self.core_clock = core_clock
        self.node_id = node_id

    def home_store(self, path: str) -> StoreWorker:
        """The store a non-partitioned entity lives in: its name picks one, the same on every start."""
        return self.workers[partition_index(path.lower(), len(self.workers))]

    def settings(self, properties: Properties, partitioned: bool = False) -> tuple[EntitySettings, int]:
        """The actor's settings from any entity kind's properties, and the entity's maximum message size."""
        defaults = QueueProperties()

        def get(name: str) -> Any:
            return getattr(properties, name, getattr(defaults, name))

        kilobytes = get("max_message_size_in_kilobytes") or self.namespace.max_message_size_in_kilobytes
        max_size = getattr(properties, "max_size_in_megabytes", None)
        settings = EntitySettings(
            lock_duration=int(get("lock_duration").total_seconds() * 1000),
            default_ttl=_ms(get("default_message_time_to_live")),
            max_message_size=kilobytes * 1024,
            max_delivery_count=get("max_delivery_count"),
            dead_lettering_on_message_expiration=get("dead_lettering_on_message_expiration"),
            requires_session=get("requires_session"),
            max_size_in_bytes=max_size * 1024 * 1024 if max_size is not None else None,
            duplicate_detection_window=int(get("duplicate_detection_history_time_window").total_seconds() * 1000)
            if get("requires_duplicate_detection") else None,
        )
        max_bytes = kilobytes * 1024
        if partitioned and self.namespace.sku == "Premium":
            max_bytes = min(max_bytes, PREMIUM_PARTITIONED_MESSAGE_SIZE)
            settings = replace(settings, max_message_size=max_bytes)
        return settings, max_bytes

    async def load(self, record: EntityRecord, properties: Properties, rules: list[CompiledRule],
                   topic: Entity | None) -> Entity:
        """The entity of ``record`` (a subscription of ``topic``), its actor built and its messages loaded."""
        path = record.path.lower()
        partitioned = (topic.partitioned if topic is not None
                       else bool(getattr(properties, "enable_partitioning", False)))
        settings, max_message_size = self.settings(properties, partitioned)
        actor: EntityActor
        if partitioned:
            kind_of_partition = TopicActor if record.kind == TOPIC else CoreActor
            partitions = [kind_of_partition(PartitionRef(path, i), settings, self.workers[i % len(self.workers)],
                                            self.core_clock, node_id=self.node_id)
                          for i in range(self.namespace.partition_count)]
            actor = (PartitionedTopicActor([p for p in partitions if isinstance(p, TopicActor)])
                     if record.kind == TOPIC else PartitionedCoreActor(partitions))
        else:
            worker = self.home_store(topic.name if topic is not None else path)
            kind_of_actor = TopicActor if record.kind == TOPIC else CoreActor
            actor = kind_of_actor(PartitionRef(path, 0), settings, worker, self.core_clock, node_id=self.node_id)
        log.info("serving %s (%d partitions)", record.path, len(each(actor)))
        for partition in each(actor):
            if partition.worker.offline:
                partition.suspend()  # loads itself once its store is back
            else:
                await partition.load()
        return Entity(record.path, properties, max_message_size, actor, record.kind, rules=rules, topic=topic)
