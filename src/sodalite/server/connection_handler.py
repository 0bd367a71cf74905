"""One client connection: the driver around the sans-IO AMQP connection.

Theory of operation: bytes from the socket go into :class:`~sodalite.amqp.connection.Connection`;
each event it returns is handed on. A link the client attaches goes to the router
(``server/router.py``), which checks it with the auth step (``server/auth.py``) and gives it an
endpoint (``server/endpoint.py``: entity links in ``server/links.py``, ``$cbs``, ``$management``,
the transaction coordinator); every later event of that link (transfer, disposition, credit,
detach) goes to its endpoint. This module owns only what belongs to the whole connection: the
socket, output flushing (once per loop iteration, however many frames were produced, so pipelined
work leaves in few writes), the heartbeat and handshake timers, the connection limit, and the
detaching of links whose entity is deleted. A malformed frame closes only this connection (the
AMQP layer answers with a close carrying the error); the broker goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from sodalite.amqp import events as ev
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import Link
from sodalite.amqp.sasl import SaslServerConfig
from sodalite.amqp.states import ConnectionState
from sodalite.errors import EntityNotFound, QuotaExceeded
from sodalite.model.authorization import AccessRights
from sodalite.server import wire
from sodalite.server.amqp_errors import client_error
from sodalite.server.auth import ConnectionAuth
from sodalite.server.endpoint import Endpoint
from sodalite.server.registry import Entity
from sodalite.server.router import route_attach
from sodalite.server.transactions import ConnectionTransactions

if TYPE_CHECKING:
    from sodalite.server.broker import Broker

log = logging.getLogger(__name__)

HANDSHAKE_RECHECK_S = 15.0  # before open no heartbeat is due; the timer looks again this often
MIN_TICK_S = 0.05


class BrokerConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        limits = broker.limits
        self.amqp = Connection(
            server=True, container_id=broker.container_id, max_frame_size=broker.max_frame_size,
            channel_max=max(0, limits.max_sessions - 1),  # one session more closes the connection
            idle_timeout_ms=broker.idle_timeout_ms, sasl_server=SaslServerConfig(),
            silence_heartbeat_s=broker.silence_heartbeat_s,
            first_outgoing_id=0x80000000,  # keeps our delivery-ids apart from the SDK's (pitfall 6)
        )
        self.transport: asyncio.Transport | None = None
        self.auth = ConnectionAuth(self)  # the grants of this connection's put-tokens
        self._flush_scheduled = False
        self._heartbeat: asyncio.TimerHandle | None = None
        self.peer = "?"
        self.python_sdk_decimals = False  # the client cannot read decimal128 (wire.python_sdk_decimals)
        self.transactions = ConnectionTransactions(self)  # AMQP transactions belong to the connection
        self._handshake: asyncio.TimerHandle | None = None
        self.over_limit = False  # past max_connections: closed with an error once its open arrives

    # ---- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        limits = self.broker.limits
        self._handshake = asyncio.get_running_loop().call_later(limits.handshake_timeout, self._handshake_expired)
        if len(self.broker.connections) >= limits.max_connections:
            self.over_limit = True  # not counted: it lives only until its handshake ends
            return
        self.broker.connections.add(self)
        self.broker.metrics.connection_opened()
        self._arm_heartbeat()

    def data_received(self, data: bytes) -> None:
        self._handle(self.amqp.receive_data(data, time.monotonic()))
        self.flush()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        # Locks taken on this connection (by its receivers or by receive-by-sequence-number) outlive it.
        self._handle(self.amqp.connection_lost())
        self.transactions.connection_lost()  # its open transactions roll back
        self.broker.connections.discard(self)
        if self._handshake is not None:
            self._handshake.cancel()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.auth.cancel()

    # ---- output ----------------------------------------------------------------------------------

    def flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None:
            return
        data = self.amqp.data_to_send(time.monotonic())
        if data and not transport.is_closing():
            transport.write(data)
        if self.amqp.closed and not transport.is_closing():
            transport.close()

    def _arm_heartbeat(self) -> None:
        """One timer per connection, at the next moment the AMQP layer has a heartbeat or idle check due.

        Traffic in between only moves that moment later, so a timer that fires early just re-arms.
        Before open there is nothing due; the timer looks again after a while.
        """
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        delay = self.amqp.next_tick(time.monotonic())
        delay = HANDSHAKE_RECHECK_S if delay is None else max(delay, MIN_TICK_S)
        self._heartbeat = asyncio.get_running_loop().call_later(delay, self._on_heartbeat)

    def _handshake_expired(self) -> None:
        """No open within the handshake deadline: the connection goes (it has proved nothing)."""
        self._handshake = None
        if (self.amqp.phase is ConnectionState.OPENED and not self.over_limit) or self.transport is None:
            return  # (a refused connection goes at the deadline even if it never answers our close)
        log.info("closing connection %s: no AMQP open within %.0f s of connecting", self.peer,
                 self.broker.limits.handshake_timeout, extra={"connection": self.peer, "kind": "connection"})
        self.transport.abort()

    def _on_opened(self) -> None:
        if self._handshake is not None and not self.over_limit:
            self._handshake.cancel()
            self._handshake = None
        if self.over_limit:
            limit = self.broker.limits.max_connections
            self.amqp.close(client_error(QuotaExceeded(
                f"the broker has reached its limit of {limit} connections; try again later"),
                self.broker.metrics, self.peer, None))

    def _on_heartbeat(self) -> None:
        self._heartbeat = None
        self._handle(self.amqp.tick(time.monotonic()))
        self.flush()
        if not self.amqp.closed:
            self._arm_heartbeat()

    # ---- events ----------------------------------------------------------------------------------

    def _handle(self, events: list[ev.Event]) -> None:
        for event in events:
            try:
                self._dispatch(event)
            except Exception:  # one bad request must not take the connection's other links down
                log.exception("error handling %s from %s", type(event).__name__, self.peer)

    def _dispatch(self, event: ev.Event) -> None:
        if isinstance(event, ev.TransferReceived):
            endpoint = event.link.context
            if isinstance(endpoint, Endpoint):
                endpoint.on_transfer(event.link, event.delivery)
        elif isinstance(event, ev.DeliveryUpdated):
            endpoint = event.link.context
            if isinstance(endpoint, Endpoint):
                endpoint.on_delivery_updated(event)
        elif isinstance(event, ev.CreditChanged):
            endpoint = event.link.context
            if isinstance(endpoint, Endpoint):
                endpoint.on_credit()
        elif isinstance(event, ev.ConnectionOpened):
            self.python_sdk_decimals = wire.python_sdk_decimals(event.remote.properties)
            asyncio.get_running_loop().call_soon(self._arm_heartbeat)  # the peer's idle-time-out is known now
            self._on_opened()  # the handshake deadline ends; past max-connections, the refusal
        elif isinstance(event, ev.LinkAttachRequested):
            self._on_attach(event.link)
        elif isinstance(event, ev.LinkDetached):
            endpoint = event.link.context
            if isinstance(endpoint, Endpoint):
                endpoint.on_detached()
        elif isinstance(event, ev.ConnectionClosed) and event.error is not None and not event.by_peer:
            log.warning("closing connection %s: %s %s", self.peer, event.error.condition, event.error.description,
                        extra={"condition": event.error.condition, "connection": self.peer, "kind": "connection"})
            self.broker.metrics.error_sent(event.error.condition)

    def _on_attach(self, link: Link) -> None:
        held = sum(len(session.links) for session in self.amqp.sessions.values())
        hostname = (self.amqp.remote_open.hostname if self.amqp.remote_open else None) or ""
        fatal = route_attach(self, self.auth, link, held, hostname)
        if fatal is not None:
            self.amqp.close(fatal)

    # ---- for the endpoints (server.endpoint.ConnectionPort) -------------------------------------------

    def authorise(self, path: str, right: AccessRights | None) -> None:
        """Raise Unauthorized unless a live token on this connection covers ``path`` with ``right``."""
        self.auth.authorise(path, right)

    def links(self) -> list[Link]:
        return [link for session in list(self.amqp.sessions.values()) for link in list(session.links.values())]

    # ---- from the broker ------------------------------------------------------------------------------

    def entity_deleted(self, entity: Entity) -> None:
        """Detach every link on a deleted entity; the SDK raises MessagingEntityNotFoundError."""
        error = client_error(EntityNotFound(f"the messaging entity '{entity.name}' was deleted"),
                             self.broker.metrics, self.peer, entity.name)
        for link in self.links():
            endpoint = link.context
            if isinstance(endpoint, Endpoint) and endpoint.serves(entity):
                link.detach(error)
        self.flush_soon()
