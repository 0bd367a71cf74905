"""One client connection: the driver around the sans-IO AMQP connection.

Theory of operation: bytes from the socket go into :class:`~sodalite.amqp.connection.Connection`;
each event it returns is handed on. A link the client attaches goes to the router
(``server/router.py``), which checks it with the auth step (``server/auth.py``) and gives it an
endpoint (``server/endpoint.py``: entity links in ``server/links.py``, ``$cbs``, ``$management``,
the transaction coordinator); every later event of that link (transfer, disposition, credit,
detach) goes to its endpoint. This module owns only what belongs to the whole connection: the
socket, output flushing (once per loop iteration, however many frames were produced, so pipelined
work leaves in few writes; held in the AMQP connection while the transport is paused, so transfers
not yet written can still be taken back; each endpoint told which of its transfers were written),
the heartbeat and handshake timers, the connection limit, the authentication deadline and the
allowance of connections not yet authenticated (``server/limits.py``: a connection is authenticated
once a token was accepted on ``$cbs``, seen as a grant on its ``ConnectionAuth`` after a transfer,
or once its SASL PLAIN login with a key succeeded; until then it is in ``broker.unauthenticated``),
and the detaching of links whose entity is deleted. A malformed frame closes only this connection (the
AMQP layer answers with a close carrying the error); the broker goes on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from typing import Protocol, cast

from sodalite.amqp import events as ev
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Error
from sodalite.amqp.sasl import SaslServerConfig
from sodalite.amqp.states import ConnectionState
from sodalite.errors import EntityNotFound, QuotaExceeded, SodaliteError, Unauthorized
from sodalite.model.authorization import AccessRights
from sodalite.server import wire
from sodalite.server.amqp_errors import client_error
from sodalite.server.auth import ConnectionAuth
from sodalite.server.broker_port import BrokerPort
from sodalite.server.endpoint import Endpoint
from sodalite.server.limits import Admission, admit
from sodalite.server.registry import Entity
from sodalite.server.router import route_attach
from sodalite.server.transactions import ConnectionTransactions

log = logging.getLogger(__name__)

# What the open offers. JMS clients (Apache Qpid JMS) look for DELAYED_DELIVERY before they send a
# message with a delivery delay (the broker schedules it: wire.py reads its x-opt-delivery-time), and for
# SHARED-SUBS before they make a shared topic consumer (server/topic_consumers.py).
OFFERED_CAPABILITIES = ("DELAYED_DELIVERY", "SHARED-SUBS")
HANDSHAKE_RECHECK_S = 15.0  # before open no heartbeat is due; the timer looks again this often
MIN_TICK_S = 0.05
CLOSE_GRACE_S = 2.0  # after the broker's close, a peer that does not answer it is dropped


#: What a connection is closed with when the broker stops (AMQP 1.0 2.8.15, "an operator intervened"):
#: retryable for the SDKs (pyamqp's retry policy and ServiceBusConnectionError), which reconnect.
SHUTDOWN_CONDITION = "amqp:connection:forced"


class ConnectionHost(BrokerPort, Protocol):
    """The broker as its connections see it (``broker.Broker``): what endpoints may ask, and the
    connection table, the limits and the settings of the AMQP connection."""

    connections: set[BrokerConnection]
    # Those with no token accepted yet, oldest first, with when each was accepted (monotonic seconds).
    unauthenticated: dict[BrokerConnection, float]
    refusal: SodaliteError | None  # set while this node does not serve: every new connection is refused
    container_id: str
    max_frame_size: int
    idle_timeout_ms: int | None
    silence_heartbeat_s: float | None
    plain_sasl_without_tls: bool


class BrokerConnection(asyncio.Protocol):
    def __init__(self, broker: ConnectionHost) -> None:
        self.broker = broker
        limits = broker.limits
        self.amqp = Connection(
            server=True, container_id=broker.container_id, max_frame_size=broker.max_frame_size,
            channel_max=max(0, limits.max_sessions - 1),  # one session more closes the connection
            idle_timeout_ms=broker.idle_timeout_ms, sasl_server=self._sasl_config(plain=True),
            silence_heartbeat_s=broker.silence_heartbeat_s,
            first_outgoing_id=0x80000000,  # keeps our delivery-ids apart from the SDK's (pitfall 6)
            offered_capabilities=OFFERED_CAPABILITIES,
        )
        self.amqp.track_written = True  # transfers written or never written: the endpoints hear of both
        self.transport: asyncio.Transport | None = None
        self.auth = ConnectionAuth(self)  # the grants of this connection's put-tokens
        self._flush_scheduled = False
        # The transport's buffer is past its high-water mark (asyncio flow control): output waits in the
        # AMQP connection, where a transfer whose link goes before it leaves is taken back, not lost.
        self._paused = False
        self._heartbeat: asyncio.TimerHandle | None = None
        self.peer = "?"
        self.python_sdk_decimals = False  # the client cannot read decimal128 (wire.python_sdk_decimals)
        self.transactions = ConnectionTransactions(self)  # AMQP transactions belong to the connection
        self._handshake: asyncio.TimerHandle | None = None
        self.over_limit = False  # refused at accept: closed with ``refusal`` once its open arrives
        self.refusal: SodaliteError | None = None
        self._authentication: asyncio.TimerHandle | None = None  # the deadline for a first accepted token
        self._drop: asyncio.TimerHandle | None = None  # after the broker's close, if the peer never answers

    # ---- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not derive from asyncio.Transport, hence no isinstance check).
        self.transport = cast("asyncio.Transport", transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not (transport.get_extra_info("ssl_object") is not None or _loopback(peer)
                or self.broker.plain_sasl_without_tls):
            self.amqp.sasl_server = self._sasl_config(plain=False)  # no key in clear over the network
        limits = self.broker.limits
        self._handshake = asyncio.get_running_loop().call_later(limits.handshake_timeout, self._handshake_expired)
        if self.broker.refusal is not None:  # the node does not serve now: closed at its open, retryably
            self.over_limit = True
            self.refusal = self.broker.refusal
            return
        waiting = self.broker.unauthenticated
        now = time.monotonic()
        oldest = self._oldest_waiting()
        decision = admit(limits, len(self.broker.connections), len(waiting),
                         None if oldest is None else now - waiting[oldest])
        if decision is Admission.EVICT_OLDEST and oldest is not None:
            oldest.give_way()
        elif decision is not Admission.ADMIT:
            self.over_limit = True  # not counted: it lives only until its handshake ends
            if decision is Admission.REFUSE_UNAUTHENTICATED:
                self.refusal = QuotaExceeded(
                    f"the broker has {len(waiting)} connections waiting to authenticate, its limit; "
                    "try again later")
            else:
                self.refusal = QuotaExceeded(
                    f"the broker has reached its limit of {limits.max_connections} connections; try again later")
            return
        self.broker.connections.add(self)
        waiting[self] = now
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
        self.broker.unauthenticated.pop(self, None)
        for timer in (self._authentication, self._drop, self._handshake, self._heartbeat):
            if timer is not None:
                timer.cancel()
        self.auth.cancel()

    # ---- graceful stop ---------------------------------------------------------------------------

    def stop_reading(self) -> None:
        """The broker is stopping: take no more frames from this client; what it sent is still carried out."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            try:
                transport.pause_reading()
            except (AttributeError, NotImplementedError, RuntimeError):  # a transport that cannot pause
                pass

    def close_for_shutdown(self, description: str) -> None:
        """Close with ``amqp:connection:forced``: after the replies already owed (they go first), the
        client is told the broker is going away, which the SDKs treat as retryable: they reconnect."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self.amqp.phase is ConnectionState.OPENED:
            self.amqp.close(Error(SHUTDOWN_CONDITION, description, None))
            self.broker.metrics.error_sent(SHUTDOWN_CONDITION)
            self.flush()
        if not transport.is_closing():
            transport.close()  # after what is buffered has been written

    # ---- SASL ----------------------------------------------------------------------------------------

    def _sasl_config(self, *, plain: bool) -> SaslServerConfig:
        """MSSBCBS and ANONYMOUS (then ``$cbs`` tokens), and PLAIN (a rule's key name and key) where offered."""
        if plain:
            return SaslServerConfig(plain_validator=self._key_login)
        return SaslServerConfig(mechanisms=("MSSBCBS", "ANONYMOUS"))

    def _key_login(self, key_name: str, key: str) -> bool:
        if self.auth.key_login(key_name, key):
            self._check_authenticated()  # a key proved: no longer waiting to authenticate
            return True
        log.info("refused SASL PLAIN from %s: '%s' is not a key name with that key", self.peer, key_name,
                 extra={"connection": self.peer, "kind": "connection"})
        self.broker.metrics.error_sent("amqp:unauthorized-access")
        return False

    def check_key_login(self) -> None:
        """Close this connection if the key it logged in with no longer grants what it granted."""
        if self.auth.key_still_valid() or self.amqp.closed:
            return
        self.amqp.close(client_error(Unauthorized(
            f"the key '{self.auth.key_name}' this connection logged in with was regenerated or its rule changed"),
            self.broker.metrics, self.peer, None))
        self.flush_soon()

    # ---- output ----------------------------------------------------------------------------------

    def flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self.flush()

    def flush(self) -> None:
        self._flush_scheduled = False
        transport = self.transport
        if transport is None or (self._paused and not self.amqp.closed):
            return
        data = self.amqp.data_to_send(time.monotonic())
        written = not transport.is_closing()
        if data and written:
            transport.write(data)
        if self.amqp.written or self.amqp.dropped:
            self._report_written(written)
        if self.amqp.closed and not transport.is_closing():
            transport.close()

    def _report_written(self, written: bool) -> None:
        """Tell each link's endpoint which of its transfers left (handed to the socket) or, the
        transport closing, never will."""
        sent, self.amqp.written = self.amqp.written, []
        dropped, self.amqp.dropped = self.amqp.dropped, []
        for link, delivery_id in dropped:
            if isinstance(link.context, Endpoint):
                link.context.on_unsent((delivery_id,))
        for link, delivery_id in sent:
            endpoint = link.context
            if isinstance(endpoint, Endpoint):
                if written:
                    endpoint.on_written(delivery_id)
                else:
                    endpoint.on_unsent((delivery_id,))

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
            refusal = self.refusal or QuotaExceeded("the broker takes no more connections now; try again later")
            self.amqp.close(client_error(refusal, self.broker.metrics, self.peer, None))
        elif self in self.broker.unauthenticated:
            self._authentication = asyncio.get_running_loop().call_later(
                self.broker.limits.authentication_deadline, self._authentication_expired)

    # ---- authentication: the deadline and the allowance (server/limits.py) ---------------------------

    def _check_authenticated(self) -> bool:
        """Leave the unauthenticated allowance once a token was accepted (a grant exists); True if so."""
        if self not in self.broker.unauthenticated:
            return True
        if not self.auth.grants:
            return False
        del self.broker.unauthenticated[self]
        if self._authentication is not None:
            self._authentication.cancel()
            self._authentication = None
        return True

    def _oldest_waiting(self) -> BrokerConnection | None:
        """The unauthenticated connection that has waited longest (those found authenticated leave)."""
        waiting = self.broker.unauthenticated
        while waiting:
            oldest = next(iter(waiting))
            if not oldest._check_authenticated():
                return oldest
        return None

    def _authentication_expired(self) -> None:
        self._authentication = None
        if self._check_authenticated() or self.transport is None:
            return
        deadline = self.broker.limits.authentication_deadline
        log.info("closing connection %s: no token accepted on $cbs within %g s of its open", self.peer, deadline,
                 extra={"connection": self.peer, "kind": "connection"})
        self._close_and_drop(Unauthorized(
            f"no token was accepted on $cbs within {deadline:g} s of the connection's open; put a token "
            "to $cbs right after opening"))

    def give_way(self) -> None:
        """The allowance of unauthenticated connections is full and this one waited longest: it goes."""
        self.broker.unauthenticated.pop(self, None)
        self.broker.connections.discard(self)
        if self._authentication is not None:
            self._authentication.cancel()
            self._authentication = None
        log.info("closing connection %s: still not authenticated while the allowance of connections waiting "
                 "to authenticate is full", self.peer, extra={"connection": self.peer, "kind": "connection"})
        if self.transport is None:
            return
        if self.amqp.phase is not ConnectionState.OPENED:
            self.transport.abort()
            return
        self._close_and_drop(QuotaExceeded(
            "the connection did not authenticate, and other connections waiting to authenticate need its place; "
            "put a token to $cbs right after opening"))

    def _close_and_drop(self, error: SodaliteError) -> None:
        """Close with ``error``; a peer that does not answer the close within the grace is dropped."""
        self.amqp.close(client_error(error, self.broker.metrics, self.peer, None))
        self.flush()
        if self.transport is not None and not self.transport.is_closing():
            self._drop = asyncio.get_running_loop().call_later(CLOSE_GRACE_S, self._drop_now)

    def _drop_now(self) -> None:
        self._drop = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

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
                if self in self.broker.unauthenticated:
                    self._check_authenticated()  # a put-token to $cbs accepted: no longer waiting
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
                if event.unsent:
                    endpoint.on_unsent(event.unsent)
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


def _loopback(peer: object) -> bool:
    if not isinstance(peer, tuple) or not peer:
        return False
    try:
        return ipaddress.ip_address(str(peer[0]).split("%")[0]).is_loopback
    except ValueError:
        return False
