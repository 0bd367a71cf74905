"""Topic consumers (JMS): a receiver attached to a topic reads from a subscription made for it.

Theory of operation. A JMS client (Apache Qpid JMS) consumes from a topic by attaching a receiver whose
source address is the topic itself; Service Bus serves it from a subscription of that topic. The link
says which kind of JMS subscription it is:

* durable (source ``expiry-policy`` ``never`` / durable terminus): the subscription is named after the
  JMS subscription name (the link name up to its first ``|``, which Qpid JMS appends for shared and
  client-id-less subscriptions) and stays when the consumer or connection goes; a later consumer of that
  name reads what arrived meanwhile;
* non-durable and shared (capability ``shared``): one subscription per JMS subscription name, named
  ``jms-volatile-<name>``, removed when its last consumer's link goes;
* non-durable, not shared: a subscription of its own, ``jms-volatile-<random>``, removed with its link.

Names are cut to Service Bus's 50 characters with characters a subscription name cannot hold replaced by
``-``. A consumer's JMS selector becomes the new subscription's rule (a SQL filter); an existing
durable subscription keeps the rule it was made with. Making a subscription needs Manage on the topic
(reading an existing one needs Listen). What a broker that stopped abruptly left of the non-durable
ones is removed at its next start (``left_behind``). ``Session.unsubscribe`` attaches a receiver with no
source, named as the durable consumer's link was: the subscription of that name goes when that link does
(``unsubscribe``; Manage needed).
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid

from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Source
from sodalite.amqp.states import LinkState
from sodalite.amqp.types import Array, Symbol
from sodalite.errors import EntityNotFound, SodaliteError
from sodalite.model.authorization import AccessRights
from sodalite.model.entities import DEFAULT_RULE_NAME, RuleDescription, SubscriptionProperties, TrueFilter
from sodalite.server import links, selectors
from sodalite.server.amqp_errors import client_error
from sodalite.server.endpoint import ConnectionPort, EntityLink
from sodalite.server.entity_settings import SubQueue
from sodalite.server.registry import SUBSCRIPTION, Entity, named_subscription_path

log = logging.getLogger(__name__)

VOLATILE_PREFIX = "jms-volatile-"
MAX_NAME = 50  # Service Bus subscription names
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


def symbols(value: object) -> set[str]:
    if value is None:
        return set()
    if isinstance(value, str):
        return {value}
    try:
        return {str(v) for v in value}  # type: ignore[attr-defined]
    except TypeError:
        return set()


def capabilities(source: Source) -> set[str]:
    return symbols(source.capabilities)


def subscription_name(link_name: str, source: Source) -> tuple[str, bool]:
    """The subscription a topic receiver reads from, and whether it is durable."""
    durable = bool(source.durable) or str(source.expiry_policy or "") == "never"
    shared = "shared" in capabilities(source)
    base = _NOT_IN_NAME.sub("-", link_name.split("|", 1)[0]) or "jms"
    if durable:
        return base[:MAX_NAME], True
    if shared:
        return (VOLATILE_PREFIX + base)[:MAX_NAME], False
    return VOLATILE_PREFIX + uuid.uuid4().hex, False


def attach(connection: ConnectionPort, link: Link, topic: Entity) -> None:
    """Serve a receiver attached to ``topic`` from its subscription, made first if there is none."""
    remote = link.remote_attach
    assert remote is not None and remote.source is not None
    broker = connection.broker
    name, durable = subscription_name(link.name, remote.source)
    path = named_subscription_path(topic.name, name)

    def serve(subscription: Entity) -> None:
        links.attach_consumer(connection, link, subscription, SubQueue.MAIN)
        if not durable:
            broker.volatile_subscriptions.setdefault(subscription.name.lower(), set()).add(id(link))
            consumer = link.context
            if isinstance(consumer, links.LinkConsumer):
                consumer.on_gone = lambda: _release(connection, subscription, id(link))
        connection.flush_soon()

    existing = broker.entity(path)
    if existing is not None:
        serve(existing)
        return
    try:
        connection.authorise(topic.name, AccessRights.MANAGE)
        selector = selectors.selector_of(remote.source)
        rule_filter = selectors.sql_filter(selector) if selector is not None else TrueFilter()
        RuleDescription(DEFAULT_RULE_NAME, rule_filter)
    except SodaliteError as exc:
        link.refuse(client_error(exc, broker.metrics, connection.peer, path))
        return

    async def make() -> None:
        try:
            found = broker.entity(path)
            subscription = found if found is not None else await broker.create_subscription(
                topic, name, SubscriptionProperties(), [RuleDescription(DEFAULT_RULE_NAME, rule_filter)])
        except SodaliteError as exc:
            if link.state is LinkState.ATTACH_RECEIVED:
                link.refuse(client_error(exc, broker.metrics, connection.peer, path))
                connection.flush_soon()
            return
        if link.state is LinkState.ATTACH_RECEIVED:
            serve(subscription)
        elif not durable:
            await _delete_if_unused(connection, subscription)  # the consumer left while it was made

    asyncio.get_running_loop().create_task(make())


def _release(connection: ConnectionPort, subscription: Entity, link_id: int) -> None:
    holders = connection.broker.volatile_subscriptions.get(subscription.name.lower())
    if holders is None:
        return
    holders.discard(link_id)
    if not holders:
        asyncio.get_running_loop().create_task(_delete_if_unused(connection, subscription))


async def _delete_if_unused(connection: ConnectionPort, subscription: Entity) -> None:
    broker = connection.broker
    key = subscription.name.lower()
    if broker.volatile_subscriptions.get(key):
        return
    broker.volatile_subscriptions.pop(key, None)
    if broker.entity(subscription.name) is subscription:
        try:
            await broker.delete_entity(subscription)
        except SodaliteError as exc:
            log.warning("could not remove the non-durable subscription %s: %s", subscription.name, exc)


def left_behind(entities: list[Entity]) -> list[Entity]:
    """The non-durable topic-consumer subscriptions among ``entities`` (a stopped broker's, at start)."""
    return [e for e in entities if e.kind == SUBSCRIPTION
            and e.name.rsplit("/", 1)[-1].lower().startswith(VOLATILE_PREFIX)]


# ---- Session.unsubscribe ------------------------------------------------------------------------------


class Unsubscriber(EntityLink):
    """The link of a JMS ``unsubscribe``: when it goes, the durable subscription it named (its
    entity) is deleted."""

    __slots__ = ()

    def on_detached(self) -> None:
        broker = self.connection.broker
        if broker.entity(self.entity.name) is self.entity:
            asyncio.get_running_loop().create_task(broker.delete_entity(self.entity))


def unsubscribe(connection: ConnectionPort, link: Link) -> None:
    """A receiver with no source names a durable subscription by its link name (Qpid JMS's unsubscribe):
    answered with the subscription's topic as source if there is one (and Manage on it), with no source
    if there is none (the client then reports that the subscription does not exist)."""
    broker = connection.broker
    name = _NOT_IN_NAME.sub("-", link.name.split("|", 1)[0]).lower()[:MAX_NAME]
    found = [e for e in broker.entities.values() if e.kind == SUBSCRIPTION and e.topic is not None
             and e.name.rsplit("/", 1)[-1].lower() == name and not name.startswith(VOLATILE_PREFIX)]
    if len(found) != 1:
        problem = (f"no durable subscription named '{name}'" if not found else
                   f"the subscription name '{name}' is used on several topics: delete it through the management API")
        link.refuse(client_error(EntityNotFound(problem), broker.metrics, connection.peer, name))
        return
    subscription = found[0]
    topic = subscription.topic
    assert topic is not None
    try:
        connection.authorise(topic.name, AccessRights.MANAGE)
    except SodaliteError as exc:
        link.refuse(client_error(exc, broker.metrics, connection.peer, subscription.name))
        return
    link.context = Unsubscriber(connection, subscription)
    link.accept(source=Source(topic.name, durable=2, expiry_policy=Symbol("never"),
                              capabilities=Array("symbol", (Symbol("topic"),))),
                initial_delivery_count=0, max_message_size=0)
