"""A browsing receiver: a link whose source asks for ``distribution-mode`` ``copy`` (AMQP 1.0 3.5.3).

Theory of operation. A JMS ``QueueBrowser`` (Apache Qpid JMS) attaches a receiver with distribution-mode
``copy``: it wants to see the messages, not take them. As Service Bus serves a browser, that is a peek:
this endpoint reads the entity's messages in sequence-number order from a cursor, as the link's credit
allows, and sends each pre-settled without a lock, so nothing changes in the entity (no lock, no delivery
count). When the client drains the link (Qpid JMS does, to learn that the browse is over) and the read
finds no more, the link is drained. A JMS selector on the link (``server/selectors.py``) shows only the
messages it selects. One read is in flight at a time; credit that arrives meanwhile is
served when it ends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from sodalite.amqp.link import Link
from sodalite.model.authorization import AccessRights
from sodalite.server import wire
from sodalite.server.endpoint import ConnectionPort, Endpoint
from sodalite.server.entity_settings import SubQueue
from sodalite.server.registry import Entity
from sodalite.server.selectors import Selector

log = logging.getLogger(__name__)

COPY = "copy"
PAGE = 100  # messages one read asks the store for at most


class Browser(Endpoint):
    """A receiver that peeks: every message of the entity once, in order, none taken."""

    __slots__ = ("_reading", "connection", "cursor", "entity", "link", "selector", "sub_queue")

    def __init__(self, connection: ConnectionPort, link: Link, entity: Entity, sub_queue: SubQueue,
                 selector: Selector | None = None) -> None:
        self.connection = connection
        self.selector = selector  # a JMS selector: only the messages it selects are shown
        self.link = link
        self.entity = entity
        self.sub_queue = sub_queue
        self.cursor = 0  # the next sequence number to read from
        self._reading: asyncio.Task[None] | None = None

    def needs(self) -> tuple[str, AccessRights | None]:
        return self.entity.name, AccessRights.LISTEN

    def serves(self, entity: Entity) -> bool:
        return entity is self.entity

    def on_credit(self) -> None:
        if self._reading is None and self.link.attached and self.link.link_credit > 0:
            self._reading = asyncio.get_running_loop().create_task(self._read())

    def on_detached(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None

    async def _read(self) -> None:
        link, conn = self.link, self.connection
        try:
            while link.attached and link.link_credit > 0:
                count = min(PAGE, link.link_credit)
                records = await self.entity.actor.peek(self.sub_queue, self.cursor, count)
                if not link.attached:
                    return
                for record in records:
                    self.cursor = record.sequence_number + 1
                    if self.selector is not None and not self.selector.matches(record):
                        continue
                    payload = wire.delivery_payload(record, None, python_sdk_decimals=conn.python_sdk_decimals)
                    link.send_transfer(payload, uuid.uuid4().bytes_le, settled=True)
                conn.flush_soon()
                if len(records) < count:  # nothing more for now
                    if link.drain and link.link_credit > 0:
                        link.drained()
                        conn.flush_soon()
                    return
        except Exception:  # a failed read ends this pass; the next credit tries again
            log.exception("browsing %s for %s failed", self.entity.name, conn.peer)
        finally:
            self._reading = None
