"""What a link endpoint is, and what it may ask of its connection.

Theory of operation. Every link the broker accepts gets one endpoint object as its
``Link.context``: a producer or a consumer on an entity (``server/links.py``), a ``$cbs`` or
``$management`` node (``server/auth.py``, ``server/management_link.py``), or the transaction
coordinator (``server/transactions.py``). The connection driver (``server/connection_handler.py``)
hands each link event to the link's endpoint through the methods of :class:`Endpoint` and knows
nothing of what the endpoint does; the router (``server/router.py``) chooses the endpoint at attach.

Endpoints reach their connection only through :class:`ConnectionPort`, the broker only through
its ``broker`` (``server/broker_port.py``) and the connection's transactions only through
:class:`TransactionsPort`, so no endpoint module imports the driver, the broker or a sibling, and
the import graph runs one way: broker → driver → router → endpoints → actors.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sodalite.amqp import events as ev
from sodalite.amqp.link import SENDER, Link

if TYPE_CHECKING:
    from sodalite.model.authorization import AccessRights
    from sodalite.server.broker_port import BrokerPort
    from sodalite.server.partitioned_actor import EntityActor
    from sodalite.server.registry import Entity

log = logging.getLogger(__name__)


class SettlingConsumer(Protocol):
    """A receiver link settling in a transaction, as the transactions see it."""

    @property
    def actor(self) -> EntityActor: ...


class TransactionsPort(Protocol):
    """The connection's transactions (``server/transactions.py``) as the other endpoints see them."""

    def attach_coordinator(self, link: Link) -> None: ...

    def on_send(self, link: Link, entity: Entity, delivery: ev.Delivery) -> None:
        """A transfer in a transaction (its state is a TransactionalState)."""
        ...

    def on_settlement(self, event: ev.DeliveryUpdated, consumer: SettlingConsumer, token: uuid.UUID) -> None:
        """A disposition in a transaction (its state is a TransactionalState)."""
        ...


class ConnectionPort(Protocol):
    """The connection as its endpoints see it."""

    peer: str
    python_sdk_decimals: bool  # the client cannot read decimal128 (wire.python_sdk_decimals)

    @property
    def broker(self) -> BrokerPort: ...

    @property
    def transactions(self) -> TransactionsPort: ...

    def flush_soon(self) -> None: ...

    def authorise(self, path: str, right: AccessRights | None) -> None:
        """Raise Unauthorized unless a live token on this connection covers ``path`` with ``right``."""
        ...

    def links(self) -> list[Link]:
        """Every link of the connection, over all its sessions."""
        ...


class Endpoint:
    """A link's endpoint. Every hook does nothing unless the endpoint overrides it."""

    __slots__ = ()

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        """A complete delivery arrived on the link (the client sends)."""

    def on_delivery_updated(self, event: ev.DeliveryUpdated) -> None:
        """The client settled or updated a delivery the broker sent on the link."""

    def on_credit(self) -> None:
        """The client changed the link's credit or drain flag."""

    def on_detached(self) -> None:
        """The link is gone (detached by either side, or its session or connection ended)."""

    def on_written(self, delivery_id: int) -> None:
        """A transfer the broker sent on the link was handed to the socket."""

    def on_unsent(self, delivery_ids: tuple[int, ...]) -> None:
        """Transfers the broker queued on the link were never written (the link, its session or its
        connection went first): the peer never saw them. Called before :meth:`on_detached`."""

    def needs(self) -> tuple[str, AccessRights | None] | None:
        """The entity path the link works on and the right it needs while attached; None: no token needed."""
        return None

    def serves(self, entity: Entity) -> bool:
        """Whether the link works on ``entity`` (and so goes when the entity is deleted)."""
        return False


class EntityLink(Endpoint):
    """A link that stands for one entity while it is attached (it goes when that entity is deleted)
    and does something to the entity when it goes (:meth:`on_detached`)."""

    __slots__ = ("connection", "entity")

    def __init__(self, connection: ConnectionPort, entity: Entity) -> None:
        self.connection = connection
        self.entity = entity

    def serves(self, entity: Entity) -> bool:
        return entity is self.entity


class ControlLink(Endpoint):
    """A request or response link of a request/response node (``$cbs``, an entity's ``$management``)."""

    __slots__ = ("connection", "node", "unwritten")

    def __init__(self, connection: ConnectionPort, node: str) -> None:
        self.connection = connection
        self.node = node
        # On a response link: what to do if a response is never written (by delivery-id), e.g. put
        # back the messages a ReceiveAndDelete receive-by-sequence-number took.
        self.unwritten: dict[int, Callable[[], None]] = {}

    def respond(self, request_link: Link, payload: bytes, give_back: Callable[[], None] | None = None) -> None:
        """Send a response on the node's response link: the client's receiver on the same session
        whose address is the node itself (sdk-wire-contract.md 6.1). ``give_back`` runs if the response
        is never written (no response link, or it went before the bytes left)."""
        for link in request_link.session.links.values():
            ctx = link.context
            if link.role is SENDER and isinstance(ctx, ControlLink) and ctx.node == self.node and link.attached:
                delivery_id = link.send_transfer(payload, uuid.uuid4().bytes, settled=True)
                if give_back is not None:
                    ctx.unwritten[delivery_id] = give_back
                return
        log.warning("no response link for %s on %s", self.node, self.connection.peer)
        if give_back is not None:
            give_back()

    def on_written(self, delivery_id: int) -> None:
        if self.unwritten:
            self.unwritten.pop(delivery_id, None)

    def on_unsent(self, delivery_ids: tuple[int, ...]) -> None:
        for delivery_id in delivery_ids:
            give_back = self.unwritten.pop(delivery_id, None)
            if give_back is not None:
                give_back()


def accept_control(link: Link) -> None:
    """Accept a control link: requests flow freely, responses start at delivery-count 0."""
    if link.role is SENDER:
        link.accept(initial_delivery_count=0)
    else:
        link.auto_credit = 100
        link.accept()
