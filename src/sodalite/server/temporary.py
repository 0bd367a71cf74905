"""Temporary queues and topics (JMS): made by a dynamic attach, owned by its connection, gone with it.

Theory of operation. A JMS client (Apache Qpid JMS) creates a ``TemporaryQueue`` or ``TemporaryTopic`` by
attaching a sender whose target is ``dynamic`` with the capability ``temporary-queue`` or
``temporary-topic``; the broker makes the entity, names it in the target of its attach answer, and keeps
it while that link lives: when the link goes (``TemporaryQueue.delete()``, or the connection closing or
breaking) the entity is deleted. Names are ``jms-temp-<random>``, so what a broker that was killed left
behind is recognised and deleted at its next start (``left_behind``). Making one needs Manage; only the
connection that made it may consume from it, as JMS requires.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Target
from sodalite.amqp.states import LinkState
from sodalite.errors import SodaliteError, Unauthorized
from sodalite.model.authorization import AccessRights
from sodalite.model.entities import QueueProperties, TopicProperties
from sodalite.server.amqp_errors import client_error
from sodalite.server.endpoint import ConnectionPort, EntityLink
from sodalite.server.registry import QUEUE, TOPIC, Entity
from sodalite.server.topic_consumers import symbols

log = logging.getLogger(__name__)

PREFIX = "jms-temp-"
TEMPORARY_TOPIC = "temporary-topic"


def is_dynamic(target: object) -> bool:
    return isinstance(target, Target) and bool(target.dynamic)


class TemporaryDestination(EntityLink):
    """The link that keeps a temporary queue or topic alive; its entity goes with it."""

    __slots__ = ()

    def on_detached(self) -> None:
        broker = self.connection.broker
        broker.temporary_owners.pop(self.entity.name.lower(), None)
        asyncio.get_running_loop().create_task(_delete(self.connection, self.entity))


async def _delete(connection: ConnectionPort, entity: Entity) -> None:
    broker = connection.broker
    if broker.entity(entity.name) is entity:
        try:
            await broker.delete_entity(entity)
        except SodaliteError as exc:
            log.warning("could not delete the temporary %s %s: %s", entity.kind, entity.name, exc)


def attach(connection: ConnectionPort, link: Link) -> None:
    """Make the temporary queue or topic a dynamic attach asks for; answer with its name."""
    remote = link.remote_attach
    assert remote is not None and isinstance(remote.target, Target)
    broker = connection.broker
    capabilities = remote.target.capabilities
    topic = TEMPORARY_TOPIC in symbols(capabilities)
    name = PREFIX + uuid.uuid4().hex
    try:
        connection.authorise("", AccessRights.MANAGE)
    except SodaliteError as exc:
        link.refuse(client_error(exc, broker.metrics, connection.peer, name))
        return

    async def make() -> None:
        try:
            entity = await (broker.create_topic(name, TopicProperties()) if topic
                            else broker.create_queue(name, QueueProperties()))
        except SodaliteError as exc:
            if link.state is LinkState.ATTACH_RECEIVED:
                link.refuse(client_error(exc, broker.metrics, connection.peer, name))
                connection.flush_soon()
            return
        if link.state is not LinkState.ATTACH_RECEIVED:  # the client left meanwhile
            await _delete(connection, entity)
            return
        broker.temporary_owners[entity.name.lower()] = id(connection)
        link.context = TemporaryDestination(connection, entity)
        link.accept(target=Target(name, dynamic=True, capabilities=capabilities))
        connection.flush_soon()

    asyncio.get_running_loop().create_task(make())


def check_owner(connection: ConnectionPort, entity: Entity) -> None:
    """Only the connection that made a temporary queue or topic may consume from it (JMS)."""
    path = entity.topic.name if entity.topic is not None else entity.name
    owner = connection.broker.temporary_owners.get(path.lower())
    if owner is not None and owner != id(connection):
        raise Unauthorized(f"'{path}' is another connection's temporary destination")


def left_behind(entities: list[Entity]) -> list[Entity]:
    """The temporary queues and topics among ``entities`` (those a stopped broker left, at start)."""
    return [e for e in entities if e.kind in (QUEUE, TOPIC) and e.name.lower().startswith(PREFIX)]
