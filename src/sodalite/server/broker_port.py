"""What the connections and their link endpoints may ask of the broker.

The broker (``server/broker.py``) composes everything: stores, entities, listeners. The endpoints
(``links``, ``auth``, ``management_link``, ``transactions``, the router's attach helpers) reach it
through their connection as :class:`BrokerPort` only: the routes and entities they serve, the
authorization of a token, the clock, the metrics and the limits, and the few entity changes a link
itself causes (JMS temporary destinations and non-durable topic consumers' subscriptions). No
endpoint module imports the broker, so the server's import graph runs one way: broker -> driver ->
router -> endpoints -> actors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from sodalite.model.authorization import Authorization, AuthorizationRule
from sodalite.model.entities import QueueProperties, RuleDescription, SubscriptionProperties, TopicProperties
from sodalite.model.partition import MessageDraft
from sodalite.server.entity_settings import Clock
from sodalite.server.limits import ConnectionLimits
from sodalite.server.metrics import BrokerMetrics
from sodalite.server.registry import Entity, Route
from sodalite.server.store_worker import StoreWorker


class BrokerPort(Protocol):
    """The broker as its connections' endpoints see it (``broker.Broker`` is the one implementation)."""

    metrics: BrokerMetrics
    limits: ConnectionLimits
    clock: Clock  # ms since the epoch; the cores' time
    worker: StoreWorker  # the store that keeps the entity records (``worker.shared``: several nodes)
    entities: dict[str, Entity]  # by lower-cased path
    # JMS temporary queues and topics (lower-cased path) -> id() of the connection that made them.
    temporary_owners: dict[str, int]
    # Non-durable JMS topic consumers' subscriptions (lower-cased path) -> id() of the links reading them.
    volatile_subscriptions: dict[str, set[int]]

    @property
    def authorization_rules(self) -> tuple[AuthorizationRule, ...]:
        """The namespace's rules, with the keys regenerated since the configuration."""
        ...

    def entity(self, path: str) -> Entity | None: ...

    def route(self, entity: Entity) -> Route:
        """Where a message sent to ``entity`` lands, past its ForwardTo chain."""
        ...

    def publish(self, topic: Entity, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to a topic: each subscription's copies, committed together."""
        ...

    def authorize(self, token: str, target_path: str, host: str = "") -> Authorization: ...

    def entity_scopes(self) -> list[tuple[str, Sequence[AuthorizationRule]]]:
        """Every queue and topic that has rules of its own (lower-cased path), with those rules."""
        ...

    async def follow_entities(self) -> None:
        """Take up the entity changes other nodes made in the shared store now."""

    async def create_queue(self, name: str, properties: QueueProperties) -> Entity: ...

    async def create_topic(self, name: str, properties: TopicProperties) -> Entity: ...

    async def create_subscription(self, topic: Entity, name: str, properties: SubscriptionProperties,
                                  rules: list[RuleDescription]) -> Entity: ...

    async def delete_entity(self, entity: Entity) -> None: ...

    async def add_rule(self, subscription: Entity, rule: RuleDescription) -> None: ...

    async def remove_rule(self, subscription: Entity, name: str) -> None: ...
