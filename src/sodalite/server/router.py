"""The router: which endpoint a link the client attaches is for.

Theory of operation. Every attach the client asks for comes here once, and leaves either accepted
with an endpoint object as its ``Link.context`` or refused with a Service Bus error (an attach
with null terminus and a closing detach, sdk-wire-contract.md 1.6). The address decides:

========================================  ==========================================================
terminus                                  endpoint
========================================  ==========================================================
target is a ``Coordinator``               the connection's transactions (``server/transactions.py``)
``$cbs``                                  :class:`~sodalite.server.auth.CbsLink` (no token needed;
                                          one sender and one receiver at a time)
``<entity>[/<sub-queue>]/$management``    :class:`~sodalite.server.management_link.ManagementLink`
                                          (a token covering the entity; rights per operation)
``<entity>`` (client sender)              :class:`~sodalite.server.links.Producer` (Send right)
``<entity>[/<sub-queue>]`` (receiver)     :class:`~sodalite.server.links.LinkConsumer` (Listen right)
the same, distribution-mode ``copy``      :class:`~sodalite.server.browser.Browser` (Listen; peeks)
``<topic>`` (receiver, capability topic)  a subscription made for it (``server/topic_consumers.py``)
dynamic target (client sender)            a temporary queue or topic (``server/temporary.py``)
========================================  ==========================================================

A client cannot send to a sub-queue or a subscription, nor receive from a topic (except a JMS topic
consumer, which names the topic with the capability ``topic``). Past the
connection's link limit an attach is refused, and a peer that keeps attaching regardless (each
refusal waits for its detach) loses the connection.
"""

from __future__ import annotations

from sodalite.amqp.link import RECEIVER, Link
from sodalite.amqp.performatives import Coordinator, Error
from sodalite.errors import InvalidOperation, NotImplementedOperation, QuotaExceeded, SodaliteError
from sodalite.model.authorization import AccessRights
from sodalite.server import links, selectors, temporary, topic_consumers
from sodalite.server.addresses import CBS_NODE, entity_path, management_entity
from sodalite.server.amqp_errors import client_error
from sodalite.server.auth import CbsLink, ConnectionAuth
from sodalite.server.browser import COPY, Browser
from sodalite.server.endpoint import ConnectionPort, accept_control
from sodalite.server.entity_settings import SubQueue
from sodalite.server.management_link import ManagementLink
from sodalite.server.registry import SUBSCRIPTION, TOPIC, Entity

REFUSED_LINKS_SLACK = 100  # refused attaches a peer may leave undetached before it is disconnected


def route_attach(connection: ConnectionPort, auth: ConnectionAuth, link: Link, links_held: int,
                 hostname: str) -> Error | None:
    """Give the peer's attach its endpoint, or refuse it. Returns the error to close the whole
    connection with when the peer is so far past the link limit that refusing is not enough."""
    remote = link.remote_attach
    assert remote is not None
    coordinator = isinstance(remote.target, Coordinator)
    terminus = remote.target if link.role is RECEIVER else remote.source
    path = "" if coordinator else entity_path(getattr(terminus, "address", None))
    broker = connection.broker
    limit = broker.limits.max_links
    if links_held > limit:  # transaction coordinators count too
        error = client_error(QuotaExceeded(f"a connection may attach at most {limit} links"),
                             broker.metrics, connection.peer, path)
        if links_held > limit + REFUSED_LINKS_SLACK:
            return error
        link.refuse(error)
        return None
    if coordinator:
        connection.transactions.attach_coordinator(link)
        return None
    if link.role is RECEIVER and temporary.is_dynamic(remote.target):
        temporary.attach(connection, link)  # a JMS temporary queue or topic, alive while this link is
        return None
    if link.role is not RECEIVER and remote.source is None:
        topic_consumers.unsubscribe(connection, link)  # a JMS unsubscribe names a durable subscription
        return None
    try:
        found = _entity_link(connection, auth, link, path, hostname)
    except SodaliteError as exc:
        link.refuse(client_error(exc, broker.metrics, connection.peer, path))
        return None
    if found is not None:
        _attach_entity_link(connection, link, path, *found)
    return None


def _entity_link(connection: ConnectionPort, auth: ConnectionAuth, link: Link, path: str,
                 hostname: str) -> tuple[Entity, SubQueue] | None:
    """Attach a ``$cbs`` or ``$management`` node's link, or a JMS topic consumer's, here (None); for any
    other address, the entity and sub-queue the link works on, checked against the token and the
    direction. Raises what the attach is refused with."""
    if path == CBS_NODE:
        _attach_cbs(connection, auth, link, hostname)
        return None
    mgmt = management_entity(path)
    if mgmt is not None:
        entity, sub_queue = auth.authorised_entity(mgmt, None)  # each operation checks its right
        link.context = ManagementLink(connection, path, mgmt, entity, sub_queue)
        accept_control(link)
        return None
    sends = link.role is RECEIVER  # the client sends on it
    entity, sub_queue = auth.authorised_entity(path, AccessRights.SEND if sends else AccessRights.LISTEN)
    if sends:
        _check_send_target(entity, sub_queue)
        return entity, sub_queue
    temporary.check_owner(connection, entity)
    if entity.kind == TOPIC:
        remote = link.remote_attach
        assert remote is not None
        if remote.source is None or not {"topic", temporary.TEMPORARY_TOPIC} & topic_consumers.capabilities(
                remote.source):
            raise InvalidOperation("messages cannot be received from a topic; receive from a subscription")
        topic_consumers.attach(connection, link, entity)  # a JMS topic consumer: its subscription
        return None
    return entity, sub_queue


def _attach_cbs(connection: ConnectionPort, auth: ConnectionAuth, link: Link, hostname: str) -> None:
    if any(other is not link and other.role is link.role and other.attached
           and isinstance(other.context, CbsLink) for other in connection.links()):
        # As Service Bus: one $cbs sender and one receiver at a time on a connection (the Go SDK
        # opens a fresh pair per token, detaching the last one first, and starts a new connection
        # when refused). A link whose detach was processed no longer counts.
        raise InvalidOperation(f"a {'sender' if link.role is RECEIVER else 'receiver'} link to $cbs is "
                               "already attached on this connection; detach it first")
    link.context = CbsLink(connection, CBS_NODE, auth, hostname)
    accept_control(link)


def _check_send_target(entity: Entity, sub_queue: SubQueue) -> None:
    """A client sends to a queue or a topic only, never to a sub-queue or a subscription."""
    if sub_queue is not SubQueue.MAIN:
        raise InvalidOperation("messages cannot be sent to a dead-letter queue")
    if entity.kind == SUBSCRIPTION:
        raise InvalidOperation("messages cannot be sent to a subscription; send to its topic")


def _attach_entity_link(connection: ConnectionPort, link: Link, path: str, entity: Entity,
                        sub_queue: SubQueue) -> None:
    """A producer, a browser (distribution-mode copy, not durable: JMS QueueBrowser), a consumer with a
    message selector, or a plain consumer; a selector that does not compile refuses the attach."""
    remote = link.remote_attach
    assert remote is not None
    if link.role is RECEIVER:
        links.attach_producer(connection, link, entity)
        return
    source = remote.source
    browses = source is not None and source.distribution_mode == COPY and not source.durable
    selector = selectors.selector_of(source)
    try:
        if selector is not None and not browses and (entity.partitioned or entity.requires_session):
            raise NotImplementedOperation("message selectors are not supported on partitioned or "
                                          "session-enabled entities")
        compiled = selectors.Selector(selector) if selector is not None else None
    except SodaliteError as exc:
        link.refuse(client_error(exc, connection.broker.metrics, connection.peer, path))
        return
    if browses:
        link.context = Browser(connection, link, entity, sub_queue, compiled)  # a browser peeks (JMS QueueBrowser)
        link.accept(source=source, initial_delivery_count=0, max_message_size=0)
    elif compiled is not None:
        links.attach_consumer(connection, link, entity, sub_queue, compiled.matches)
    else:
        links.attach_consumer(connection, link, entity, sub_queue)
