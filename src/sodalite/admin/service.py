"""The ATOM API's view of the control plane: its records as the descriptions and figures ATOM writes.

The ATOM routes (``admin.http``) ask one :class:`AtomService` per request, bound to the caller the
middleware authorized; it calls the :class:`~sodalite.admin.control.ControlPlane` (which checks the
caller's rights again, as for every face, and writes the audit line) and translates its records to
:class:`Found` entries and back. It composes no operation of its own.

Queues and topics share one name space (a topic cannot take a queue's name); subscriptions live
under their topic and rules under their subscription. Lookups answer None for what does not exist
(the HTTP layer turns that into the service's empty feed); changes raise ``EntityNotFound`` for a
missing parent or target and ``EntityAlreadyExists`` for a name in use.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from sodalite.admin.atom import Description, EntityRuntime
from sodalite.admin.control import Caller, ControlPlane, EntityCounts, EntityRecord, RuleRecord
from sodalite.model.entities import (
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
)


@dataclass(frozen=True, slots=True)
class Found:
    """An entity or rule as the management API shows it."""

    name: str  # its own spelling of its name (the entry's title, which the SDK names it after)
    description: Description
    runtime: EntityRuntime
    # What the shown MaxSizeInMegabytes was multiplied by (a partitioned entity in a Standard namespace:
    # its partition count); an update that echoes the shown value back means the stored one.
    size_factor: int = 1


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def runtime_of(record: EntityRecord) -> EntityRuntime:
    """The figures ATOM shows: a queue's or subscription's counts (locked messages count as active,
    as in Service Bus); a topic's size, scheduled count and subscription and filter counts."""
    counts, times = record.counts, record.times
    when = EntityRuntime(created_at=_time(times.created_at), updated_at=_time(times.updated_at),
                         accessed_at=None if times.accessed_at is None else _time(times.accessed_at),
                         availability=record.availability)
    figures = record.topic_figures
    if record.kind == "topic" and figures is not None:
        return replace(when, counts=EntityCounts(scheduled=counts.scheduled, size_in_bytes=counts.size_in_bytes),
                       subscription_count=figures.subscription_count, sql_filter_count=figures.sql_filter_count,
                       correlation_filter_count=figures.correlation_filter_count)
    return replace(when, counts=counts)


def _found(record: EntityRecord | None) -> Found | None:
    if record is None or record.properties is None:
        return None
    return Found(record.name, record.properties, runtime_of(record))


def subscription_path(topic: str, name: str) -> str:
    return f"{topic}/subscriptions/{name}"


class AtomService:
    """The control plane for one ATOM request's caller, in ATOM's terms."""

    def __init__(self, control: ControlPlane, caller: Caller) -> None:
        self.control = control
        self.caller = caller

    def _names(self, kind: str, topic: str | None = None) -> list[str]:
        """Sorted, case-insensitively (the order lists page through)."""
        return [r.name for r in self.control.entities(self.caller, kind, topic)]

    # ---- queues and topics ---------------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return self._names("queue")

    def _shown(self, record: EntityRecord | None) -> Found | None:
        """A queue or topic as Service Bus shows it: its MaxMessageSizeInKilobytes is the namespace's
        when it chose none (256 on Standard), and a partitioned one in a Standard namespace reports
        its MaxSizeInMegabytes times its partition count (what it can hold in all)."""
        found = _found(record)
        if found is None or record is None or not isinstance(found.description, QueueProperties | TopicProperties):
            return found
        description = found.description
        if description.max_message_size_in_kilobytes is None:
            description = replace(description, max_message_size_in_kilobytes=self.control.max_message_size_in_kilobytes)
        factor = record.partition_count if description.enable_partitioning and self.control.sku != "Premium" else 1
        if factor > 1:
            description = replace(description, max_size_in_megabytes=description.max_size_in_megabytes * factor)
        return replace(found, description=description, size_factor=factor)

    def topic_names(self) -> list[str]:
        return self._names("topic")

    def entity(self, name: str, kind: str) -> Found | None:
        """The queue or the topic (``kind``) of that name."""
        return self._shown(self.control.find(self.caller, name, kind))

    def queue_or_topic(self, name: str) -> Found | None:
        """Queues and topics share one name space: the one of that name, whichever it is."""
        return self.entity(name, "queue") or self.entity(name, "topic")

    async def put_entity(self, name: str, properties: QueueProperties | TopicProperties, create: bool) -> None:
        """Create or update a queue or a topic (its kind is its description's)."""
        if create:
            await self.control.create_entity(self.caller, name, properties)
        else:
            await self.control.update_entity(self.caller, name, properties)

    async def delete_entity(self, name: str, kind: str) -> bool:
        return await self.control.delete_entity(self.caller, name, kind, missing_ok=True)

    # ---- subscriptions ---------------------------------------------------------------------------------

    def subscription_names(self, topic: str) -> list[str]:
        """The topic's subscriptions, sorted; none for an unknown topic."""
        return self._names("subscription", topic)

    def subscription(self, topic: str, name: str) -> Found | None:
        return _found(self.control.find(self.caller, subscription_path(topic, name), "subscription"))

    async def create_subscription(self, topic: str, name: str, properties: SubscriptionProperties,
                                  default_rule: RuleDescription | None) -> None:
        """Create it with ``default_rule``, or with ``$Default`` (a TrueFilter) when that is None."""
        await self.control.create_entity(self.caller, subscription_path(topic, name), properties, default_rule)

    async def update_subscription(self, topic: str, name: str, properties: SubscriptionProperties) -> None:
        await self.control.update_entity(self.caller, subscription_path(topic, name), properties)

    async def delete_subscription(self, topic: str, name: str) -> bool:
        return await self.control.delete_entity(self.caller, subscription_path(topic, name), "subscription",
                                                missing_ok=True)

    # ---- rules -----------------------------------------------------------------------------------------

    def _subscription_record(self, topic: str, subscription: str) -> EntityRecord | None:
        return self.control.find(self.caller, subscription_path(topic, subscription), "subscription")

    def rule_names(self, topic: str, subscription: str) -> list[str]:
        """The subscription's rules in the order it evaluates them; none for an unknown subscription."""
        found = self._subscription_record(topic, subscription)
        return [] if found is None else [r.name for r in self.control.rules(self.caller, found.path)]

    def rule(self, topic: str, subscription: str, name: str) -> Found | None:
        """A rule reports its subscription's times: rules keep none of their own."""
        owner = self._subscription_record(topic, subscription)
        found: RuleRecord | None = None
        if owner is not None:
            found = self.control.find_rule(self.caller, owner.path, name)
        if owner is None or found is None:
            return None
        runtime = EntityRuntime(created_at=_time(owner.times.created_at), updated_at=_time(owner.times.updated_at))
        return Found(found.name, found.rule, runtime)

    async def create_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None:
        await self.control.put_rule(self.caller, subscription_path(topic, subscription), rule, create=True)

    async def update_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None:
        """Replaces the rule of that name. Raises EntityNotFound when there is none."""
        await self.control.put_rule(self.caller, subscription_path(topic, subscription), rule, create=False)

    async def delete_rule(self, topic: str, subscription: str, name: str) -> bool:
        return await self.control.delete_rule(self.caller, subscription_path(topic, subscription), name,
                                              missing_ok=True)
