"""The broker as the management plane's AdminService: the CLI wires the two layers together."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from sodalite.admin.atom import EntityRuntime
from sodalite.admin.service import Found
from sodalite.errors import EntityNotFound
from sodalite.model.entities import (
    DEFAULT_RULE_NAME,
    CorrelationFilter,
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
)
from sodalite.server.broker import Broker
from sodalite.server.registry import QUEUE, SUBSCRIPTION, TOPIC, Entity, subscription_path


def _availability(entity: Entity) -> str:
    """Limited while a store holding any of its partitions is unavailable (partitioned-entities seed)."""
    return "Available" if entity.actor.available else "Limited"


class BrokerAdmin:
    """Reads and changes the broker's entities for the management API.

    Creation and update times are the broker's (stored with the entities; an entity from before
    they were kept counts as created when this broker first saw it); ``AccessedAt`` is the
    entity's last activity.
    """

    def __init__(self, broker: Broker, started: datetime.datetime) -> None:
        self.broker = broker
        self.namespace = broker.namespace.name
        self.sku = broker.namespace.sku
        self.max_message_size_in_kilobytes = broker.namespace.max_message_size_in_kilobytes
        self._started = started

    def sas_keys(self) -> Mapping[str, tuple[str, ...]]:
        return self.broker.sas_keys

    # ---- lookups ---------------------------------------------------------------------------------

    def _of_kind(self, path: str, kind: str) -> Entity | None:
        entity = self.broker.entity(path)
        return entity if entity is not None and entity.kind == kind else None

    def _require(self, path: str, kind: str, what: str) -> Entity:
        entity = self._of_kind(path, kind)
        if entity is None:
            raise EntityNotFound(f"the {what} '{path}' does not exist")
        return entity

    def _names(self, kind: str) -> list[str]:
        return sorted((e.name for e in self.broker.entities.values() if e.kind == kind), key=str.lower)

    def _accessed(self, entity: Entity) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(entity.actor.last_activity / 1000, datetime.UTC)

    def _times(self, entity: Entity) -> tuple[datetime.datetime, datetime.datetime]:
        """(created, last updated), as the broker keeps them; a rule reports its subscription's, as
        rules keep no times of their own."""
        times = self.broker.times_of(entity)
        if times is None:
            return self._started, self._started
        return (datetime.datetime.fromtimestamp(times[0] / 1000, datetime.UTC),
                datetime.datetime.fromtimestamp(times[1] / 1000, datetime.UTC))

    def _runtime(self, entity: Entity) -> EntityRuntime:
        """A queue's or subscription's counts (locked messages count as active, as in Service Bus)."""
        counts = entity.actor.counts()
        created, updated = self._times(entity)
        return EntityRuntime(
            active=counts["active"], dead_letter=counts["dead_letter"], scheduled=counts["scheduled"],
            transfer=counts["transfer"], transfer_dead_letter=counts["transfer_dead_letter"],
            size_in_bytes=entity.actor.size_in_bytes(), created_at=created, updated_at=updated,
            accessed_at=self._accessed(entity), availability=_availability(entity))

    def _topic_runtime(self, topic: Entity) -> EntityRuntime:
        """A topic's figures, from its subscriptions: its messages are stored there.

        Its size is every subscription's stored bytes (the topic's quota covers them). A message
        scheduled on the topic is copied into each subscription it matches, so the scheduled count
        is the largest subscription's, plus any the topic holds itself (``schedule_messages``).
        """
        subscriptions = list(topic.subscriptions.values())
        rules = [rule.description for sub in subscriptions for rule in sub.rules]
        correlation = sum(isinstance(rule.filter, CorrelationFilter) for rule in rules)
        scheduled = max((sub.actor.counts()["scheduled"] for sub in subscriptions), default=0)
        created, updated = self._times(topic)
        return EntityRuntime(
            scheduled=topic.actor.counts()["scheduled"] + scheduled,
            size_in_bytes=topic.actor.size_in_bytes() + sum(sub.actor.size_in_bytes() for sub in subscriptions),
            subscription_count=len(subscriptions),
            sql_filter_count=len(rules) - correlation,  # TrueFilter and FalseFilter are SQL filters in .NET
            correlation_filter_count=correlation,
            created_at=created, updated_at=updated, accessed_at=self._accessed(topic),
            availability=_availability(topic))

    # ---- queues ----------------------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return self._names(QUEUE)

    def queue(self, name: str) -> Found | None:
        entity = self._of_kind(name, QUEUE)
        if entity is None or not isinstance(entity.properties, QueueProperties):
            return None
        return Found(entity.name, entity.properties, self._runtime(entity))

    async def create_queue(self, name: str, properties: QueueProperties) -> None:
        await self.broker.create_queue(name, properties)

    async def update_queue(self, name: str, properties: QueueProperties) -> None:
        await self.broker.update_queue(self._require(name, QUEUE, "queue"), properties)

    async def delete_queue(self, name: str) -> bool:
        return await self._delete(self._of_kind(name, QUEUE))

    async def _delete(self, entity: Entity | None) -> bool:
        if entity is None:
            return False
        await self.broker.delete_entity(entity)
        return True

    # ---- topics ----------------------------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return self._names(TOPIC)

    def topic(self, name: str) -> Found | None:
        entity = self._of_kind(name, TOPIC)
        if entity is None or not isinstance(entity.properties, TopicProperties):
            return None
        return Found(entity.name, entity.properties, self._topic_runtime(entity))

    async def create_topic(self, name: str, properties: TopicProperties) -> None:
        await self.broker.create_topic(name, properties)

    async def update_topic(self, name: str, properties: TopicProperties) -> None:
        await self.broker.update_topic(self._require(name, TOPIC, "topic"), properties)

    async def delete_topic(self, name: str) -> bool:
        return await self._delete(self._of_kind(name, TOPIC))  # delete_entity takes its subscriptions

    # ---- subscriptions ---------------------------------------------------------------------------

    @staticmethod
    def _short_name(subscription: Entity) -> str:
        return subscription.name.rpartition("/subscriptions/")[2]

    def subscription_names(self, topic: str) -> list[str]:
        entity = self._of_kind(topic, TOPIC)
        if entity is None:
            return []
        return sorted(self._short_name(sub) for sub in entity.subscriptions.values())

    def _subscription(self, topic: str, name: str) -> Entity | None:
        return self._of_kind(subscription_path(topic, name), SUBSCRIPTION)

    def _require_subscription(self, topic: str, name: str) -> Entity:
        self._require(topic, TOPIC, "topic")
        return self._require(subscription_path(topic, name), SUBSCRIPTION, "subscription")

    def subscription(self, topic: str, name: str) -> Found | None:
        entity = self._subscription(topic, name)
        if entity is None or not isinstance(entity.properties, SubscriptionProperties):
            return None
        return Found(self._short_name(entity), entity.properties, self._runtime(entity))

    async def create_subscription(self, topic: str, name: str, properties: SubscriptionProperties,
                                  default_rule: RuleDescription | None) -> None:
        owner = self._require(topic, TOPIC, "topic")
        rule = default_rule if default_rule is not None else RuleDescription(DEFAULT_RULE_NAME)
        await self.broker.create_subscription(owner, name, properties, [rule])

    async def update_subscription(self, topic: str, name: str, properties: SubscriptionProperties) -> None:
        await self.broker.update_subscription(self._require_subscription(topic, name), properties)

    async def delete_subscription(self, topic: str, name: str) -> bool:
        return await self._delete(self._subscription(topic, name))

    # ---- rules -----------------------------------------------------------------------------------

    def rule_names(self, topic: str, subscription: str) -> list[str]:
        entity = self._subscription(topic, subscription)
        return [] if entity is None else [rule.name for rule in entity.rules]

    def rule(self, topic: str, subscription: str, name: str) -> Found | None:
        entity = self._subscription(topic, subscription)
        if entity is None:
            return None
        for rule in entity.rules:
            if rule.name.lower() == name.lower():
                created, updated = self._times(entity)
                runtime = EntityRuntime(created_at=created, updated_at=updated)
                return Found(rule.name, rule.description, runtime)
        return None

    async def create_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None:
        await self.broker.add_rule(self._require_subscription(topic, subscription), rule)

    async def update_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None:
        await self.broker.replace_rule(self._require_subscription(topic, subscription), rule)

    async def delete_rule(self, topic: str, subscription: str, name: str) -> bool:
        entity = self._subscription(topic, subscription)
        if entity is None or all(rule.name.lower() != name.lower() for rule in entity.rules):
            return False
        await self.broker.remove_rule(entity, name)
        return True
