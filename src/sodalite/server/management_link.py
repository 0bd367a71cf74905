"""The link endpoint of an entity's ``$management`` node: requests in, responses out.

Theory of operation. Each request transfer is accepted at once, decoded, and run as a task by
``server/management.py`` against the entity's partition actor; the task checks the right its
operation needs with the connection's grants. Its response goes out on the node's response link
when the task ends, in whatever order the operations finish (the client matches responses by
correlation-id, sdk-wire-contract.md 6.1). A request that does not decode gets no response.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sodalite.amqp import events as ev
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Accepted
from sodalite.amqp.types import Int, Symbol
from sodalite.errors import SodaliteError
from sodalite.model.authorization import AccessRights
from sodalite.server import management
from sodalite.server.endpoint import ConnectionPort, ControlLink
from sodalite.server.entity_settings import SubQueue
from sodalite.server.messages import decode_request, encode_response
from sodalite.server.registry import Entity


class ManagementLink(ControlLink):
    """A link of ``<entity>[/<sub-queue>]/$management``."""

    __slots__ = ("entity", "path", "sub_queue")

    def __init__(self, connection: ConnectionPort, node: str, path: str, entity: Entity, sub_queue: SubQueue) -> None:
        super().__init__(connection, node)
        self.path = path  # the entity path the operations' rights are checked on
        self.entity = entity
        self.sub_queue = sub_queue

    def needs(self) -> tuple[str, AccessRights | None]:
        return self.path, None

    def serves(self, entity: Entity) -> bool:
        return self.entity is entity

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        conn, entity = self.connection, self.entity
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())
        try:
            request = decode_request(delivery.payload)
        except SodaliteError:
            return
        path = self.path
        context = management.Context(entity.actor, self.sub_queue, conn, entity.max_message_size, conn.broker, entity,
                                     authorise=lambda right: conn.authorise(path, right),
                                     python_sdk_decimals=conn.python_sdk_decimals)
        task = asyncio.get_running_loop().create_task(
            management.execute(context, request.application_properties.get("operation"), request.body))

        def respond(done: asyncio.Task[management.Response]) -> None:
            response = done.result()
            properties: dict[str, Any] = {"statusCode": Int(response.status),
                                          "statusDescription": response.description}
            if response.condition is not None:
                properties["errorCondition"] = Symbol(response.condition)
            self.respond(link, encode_response(request.message_id, properties, response.body), response.give_back)
            conn.flush_soon()

        task.add_done_callback(respond)
