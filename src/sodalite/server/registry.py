"""The entities a broker serves: kinds, paths, and the record each is kept in."""

from __future__ import annotations

from dataclasses import dataclass, field

from sodalite.model.entities import QueueProperties, SubscriptionProperties, TopicProperties
from sodalite.server.fanout import CompiledRule
from sodalite.server.partitioned_actor import AnyPartitioned, EntityActor

QUEUE = "queue"
TOPIC = "topic"
SUBSCRIPTION = "subscription"


def subscription_path(topic: str, subscription: str) -> str:
    """The path the SDK addresses a subscription by, lower-cased (contract 1.2: 'Subscriptions')."""
    return named_subscription_path(topic, subscription).lower()


def named_subscription_path(topic: str, subscription: str) -> str:
    """A subscription's path with its names as they were given (what is stored and shown)."""
    return f"{topic}/subscriptions/{subscription}"


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message sent to an entity ends up after following ForwardTo."""

    entity: Entity  # the destination, or the entity where the hop limit was reached
    hops: int
    exceeded: bool  # True: the message goes to ``entity``'s transfer dead-letter queue


@dataclass(slots=True)
class Entity:
    """A queue, a topic or a subscription, as the broker serves it.

    A topic's actor holds no messages: it filters each send into its subscriptions and commits
    every copy in one transaction. A subscription behaves as a queue that only its topic feeds.
    """

    name: str  # the path as created: 'queue1', 'Topic1', 'Topic1/subscriptions/Sub1' (looked up case-insensitively)
    properties: QueueProperties | TopicProperties | SubscriptionProperties
    max_message_size: int
    actor: EntityActor
    kind: str = QUEUE
    subscriptions: dict[str, Entity] = field(default_factory=dict)  # topics: by lower-cased name
    rules: list[CompiledRule] = field(default_factory=list)  # subscriptions
    topic: Entity | None = None  # subscriptions

    @property
    def partitioned(self) -> bool:
        return isinstance(self.actor, AnyPartitioned)

    @property
    def requires_session(self) -> bool:
        return bool(getattr(self.properties, "requires_session", False))

    @property
    def forward_to(self) -> str | None:
        value = getattr(self.properties, "forward_to", None)
        return value if isinstance(value, str) else None
