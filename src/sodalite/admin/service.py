"""What the management plane needs from the broker, as an interface the broker's owner implements.

The admin layer imports only the model, the store port and errors (architecture.md), so it
cannot reach the server; the CLI hands it an object with these methods, backed by the broker.

Queues and topics share one name space (a topic cannot take a queue's name); subscriptions live
under their topic and rules under their subscription. Lookups answer None for what does not exist
(the HTTP layer turns that into the service's empty feed); changes raise ``EntityNotFound`` for a
missing parent or target and ``EntityAlreadyExists`` for a name in use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sodalite.admin.atom import Description, EntityRuntime
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


class AdminService(Protocol):
    namespace: str
    sku: str  # Basic, Standard or Premium (only Premium lets an entity choose its message size)
    max_message_size_in_kilobytes: int  # the namespace's message size limit

    def sas_keys(self) -> Mapping[str, tuple[str, ...]]: ...

    # ---- queues ----------------------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        """Every queue's name, sorted (the order lists page through)."""

    def queue(self, name: str) -> Found | None: ...

    async def create_queue(self, name: str, properties: QueueProperties) -> None:
        """Raises EntityAlreadyExists when a queue or topic of that name exists."""

    async def update_queue(self, name: str, properties: QueueProperties) -> None:
        """Raises EntityNotFound for an unknown queue."""

    async def delete_queue(self, name: str) -> bool:
        """True if it existed."""

    # ---- topics ----------------------------------------------------------------------------------

    def topic_names(self) -> list[str]: ...

    def topic(self, name: str) -> Found | None: ...

    async def create_topic(self, name: str, properties: TopicProperties) -> None:
        """Raises EntityAlreadyExists when a queue or topic of that name exists."""

    async def update_topic(self, name: str, properties: TopicProperties) -> None:
        """Raises EntityNotFound for an unknown topic."""

    async def delete_topic(self, name: str) -> bool:
        """Deletes its subscriptions with it; True if it existed."""

    # ---- subscriptions ---------------------------------------------------------------------------

    def subscription_names(self, topic: str) -> list[str]:
        """The topic's subscriptions, sorted; none for an unknown topic."""

    def subscription(self, topic: str, name: str) -> Found | None: ...

    async def create_subscription(self, topic: str, name: str, properties: SubscriptionProperties,
                                  default_rule: RuleDescription | None) -> None:
        """Create it with ``default_rule``, or with ``$Default`` (a TrueFilter) when that is None."""

    async def update_subscription(self, topic: str, name: str, properties: SubscriptionProperties) -> None:
        """Its rules are kept. Raises EntityNotFound for an unknown topic or subscription."""

    async def delete_subscription(self, topic: str, name: str) -> bool: ...

    # ---- rules -----------------------------------------------------------------------------------

    def rule_names(self, topic: str, subscription: str) -> list[str]:
        """The subscription's rules in the order it evaluates them; none for an unknown subscription."""

    def rule(self, topic: str, subscription: str, name: str) -> Found | None: ...

    async def create_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None: ...

    async def update_rule(self, topic: str, subscription: str, rule: RuleDescription) -> None:
        """Replaces the rule of that name. Raises EntityNotFound when there is none."""

    async def delete_rule(self, topic: str, subscription: str, name: str) -> bool: ...
