"""One client connection: drives the sans-IO AMQP connection and routes its links.

Theory of operation: bytes from the socket go into :class:`~sodalite.amqp.connection.Connection`;
each event it returns is routed by link address: ``$cbs`` (claims-based security), an entity's
``$management`` node, or an entity itself, where a client sender becomes a :class:`Producer` and
a client receiver a :class:`LinkConsumer` of the entity's partition actor. Output is flushed once
per loop iteration, however many frames were produced, so pipelined work leaves in few writes.

Authorisation: an entity link is accepted only if a put-token on this connection granted an
audience covering the entity, signed by a key with the right the link needs (Send for a sender,
Listen for a receiver; ``$management`` operations check theirs per request), and that token has not
expired. When the last token covering a link expires without a renewing put-token, the link is
detached with ``amqp:unauthorized-access`` (one timer per connection, at the earliest expiry).
A malformed frame closes only this connection (the AMQP layer answers with a close carrying
the error); the broker goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sodalite.amqp import events as ev
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import (
    Accepted,
    Coordinator,
    Error,
    Modified,
    Rejected,
    Released,
    Source,
    TransactionalState,
)
from sodalite.amqp.sasl import SaslServerConfig
from sodalite.amqp.types import Int, Long, Symbol
from sodalite.errors import (
    EntityNotFound,
    InvalidOperation,
    MessageSizeExceeded,
    NotImplementedOperation,
    QuotaExceeded,
    SessionLockLost,
    SodaliteError,
    Unauthorized,
)
from sodalite.model import sas
from sodalite.model.authorization import AccessRights, Authorization, missing_right
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, Lock, MessageDraft
from sodalite.server import management, wire
from sodalite.server.addresses import CBS_NODE, entity_path, management_entity
from sodalite.server.amqp_errors import client_error, report
from sodalite.server.messages import decode_request, encode_response
from sodalite.server.partition_actor import SubQueue
from sodalite.server.partitioned_actor import PartitionedActor
from sodalite.server.registry import SUBSCRIPTION, TOPIC, Entity
from sodalite.server.transactions import ConnectionTransactions, CoordinatorLink

if TYPE_CHECKING:
    from sodalite.server.broker import Broker
    from sodalite.server.partition_actor import PartitionActor

log = logging.getLogger(__name__)

RECEIVE_AND_DELETE = 1  # snd-settle-mode "settled": the client receives pre-settled messages
SESSION_FILTER = "com.microsoft:session-filter"  # plain str id, or null for the next available (4.3)
SESSION_TIMEOUT = "com.microsoft:timeout"  # uint ms a next-available session receiver waits
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"  # .NET ticks, on the session attach reply
DOTNET_EPOCH_TICKS = 621355968000000000  # ticks at the Unix epoch (contract pitfall 5)
DEFAULT_SESSION_WAIT_MS = 60_000
PRODUCER_CREDIT = 1000  # ignored by the Python SDK (contract 1.7), honoured by other clients
BATCH_ENVELOPE_SLACK = 64 * 1024  # room for the batch envelope around a full-size message
REFUSED_LINKS_SLACK = 100  # refused attaches a peer may leave undetached before it is disconnected
HANDSHAKE_RECHECK_S = 15.0  # before open no heartbeat is due; the timer looks again this often
MIN_TICK_S = 0.05


class Producer:
    __slots__ = ("entity",)

    def __init__(self, entity: Entity) -> None:
        self.entity = entity


class ControlLink:
    """A ``$cbs`` or ``$management`` request or response link."""

    __slots__ = ("entity", "node", "sub_queue")

    def __init__(self, node: str, entity: Entity | None, sub_queue: SubQueue = SubQueue.MAIN) -> None:
        self.node = node
        self.entity = entity
        self.sub_queue = sub_queue


class LinkConsumer:
    """A client receiver link, as the partition actor sees it."""

    __slots__ = ("actor", "handler", "link", "peek_lock", "reserved", "session_id", "sub_queue")

    def __init__(self, handler: BrokerConnection, link: Link, actor: PartitionActor | PartitionedActor,
                 sub_queue: SubQueue,
                 peek_lock: bool) -> None:
        self.handler = handler
        self.link = link
        self.actor = actor
        self.sub_queue = sub_queue
        self.session_id: str | None = None
        self.peek_lock = peek_lock
        self.reserved = 0

    def credit(self) -> int:
        return self.link.link_credit if self.link.attached else 0

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        if lock is not None:
            payload = wire.delivery_payload(record, lock.locked_until, lock_token=lock.token,
                                            decimals_as_text=self.handler.decimals_as_text)
            self.link.send_transfer(payload, wire.lock_token_tag(lock.token), settled=False)
        else:
            payload = wire.delivery_payload(record, None, decimals_as_text=self.handler.decimals_as_text)
            self.link.send_transfer(payload, uuid.uuid4().bytes_le, settled=True)
        self.handler.broker.metrics.delivered(self.actor, self.sub_queue, removed=lock is None)
        self.handler.flush_soon()

    def drain_requested(self) -> bool:
        return self.link.attached and self.link.drain and self.link.link_credit > 0

    def drained(self) -> None:
        self.link.drained()
        self.handler.flush_soon()

    def session_lost(self) -> None:
        """The session lock expired: the SDK raises SessionLockLostError and drops the receiver (4.3)."""
        self.link.detach(client_error(SessionLockLost(f"the lock on session '{self.session_id}' expired"),
                                      self.handler.broker.metrics, self.handler.peer, self.actor.ref.entity))
        self.handler.flush_soon()


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
        self.grants: list[Authorization] = []  # from this connection's put-tokens
        self._expiry: asyncio.TimerHandle | None = None
        self.consumers: list[LinkConsumer] = []
        self._flush_scheduled = False
        self._heartbeat: asyncio.TimerHandle | None = None
        self.peer = "?"
        self.decimals_as_text = False  # the client cannot read decimal128 (wire.decimals_as_text)
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
        if self._expiry is not None:
            self._expiry.cancel()

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
        if (self.amqp.phase == "opened" and not self.over_limit) or self.transport is None:
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
            self._on_transfer(event.link, event.delivery)
        elif isinstance(event, ev.DeliveryUpdated):
            self._on_delivery_updated(event)
        elif isinstance(event, ev.CreditChanged):
            consumer = event.link.context
            if isinstance(consumer, LinkConsumer):
                consumer.actor.credit_changed(consumer)
        elif isinstance(event, ev.ConnectionOpened):
            self.decimals_as_text = wire.decimals_as_text(event.remote.properties)
            asyncio.get_running_loop().call_soon(self._arm_heartbeat)  # the peer's idle-time-out is known now
            self._on_opened()  # the handshake deadline ends; past max-connections, the refusal
        elif isinstance(event, ev.LinkAttachRequested):
            self._on_attach(event.link)
        elif isinstance(event, ev.LinkDetached):
            self._on_detached(event.link)
        elif isinstance(event, ev.ConnectionClosed) and event.error is not None and not event.by_peer:
            log.warning("closing connection %s: %s %s", self.peer, event.error.condition, event.error.description,
                        extra={"condition": event.error.condition, "connection": self.peer, "kind": "connection"})
            self.broker.metrics.error_sent(event.error.condition)

    # ---- attach ----------------------------------------------------------------------------------

    def _on_attach(self, link: Link) -> None:
        remote = link.remote_attach
        assert remote is not None
        if isinstance(remote.target, Coordinator):
            self.transactions.attach_coordinator(link)
            return
        terminus = remote.target if link.role is RECEIVER else remote.source
        path = entity_path(terminus.address if terminus is not None else None)
        if self._too_many_links(link, path):
            return
        try:
            if path == CBS_NODE:
                link.context = ControlLink(CBS_NODE, None)
                self._accept_control(link)
                return
            mgmt = management_entity(path)
            if mgmt is not None:
                entity, sub_queue = self._authorised_entity(mgmt, None)  # each operation checks its right
                link.context = ControlLink(path, entity, sub_queue)
                self._accept_control(link)
                return
            entity, sub_queue = self._authorised_entity(
                path, AccessRights.SEND if link.role is RECEIVER else AccessRights.LISTEN)
            if link.role is RECEIVER and sub_queue is not SubQueue.MAIN:
                raise InvalidOperation("messages cannot be sent to a dead-letter queue")
            if link.role is RECEIVER and entity.kind == SUBSCRIPTION:
                raise InvalidOperation("messages cannot be sent to a subscription; send to its topic")
            if link.role is SENDER and entity.kind == TOPIC:
                raise InvalidOperation("messages cannot be received from a topic; receive from a subscription")
        except SodaliteError as exc:
            link.refuse(client_error(exc, self.broker.metrics, self.peer, path))
            return
        if link.role is RECEIVER:
            link.context = Producer(entity)
            limit = entity.max_message_size
            link.auto_credit = PRODUCER_CREDIT
            link.max_message_size = limit + BATCH_ENVELOPE_SLACK
            link.accept(max_message_size=limit)
        else:
            self._attach_consumer(link, entity, sub_queue)

    def _too_many_links(self, link: Link, path: str | None) -> bool:
        """Past max_links on this connection the link is refused; a peer that keeps attaching anyway
        (each refusal waits for its detach) is disconnected."""
        limit = self.broker.limits.max_links
        held = sum(len(session.links) for session in self.amqp.sessions.values())
        if held <= limit:
            return False
        error = client_error(QuotaExceeded(f"a connection may attach at most {limit} links"),
                             self.broker.metrics, self.peer, path)
        if held > limit + REFUSED_LINKS_SLACK:
            self.amqp.close(error)
        else:
            link.refuse(error)
        return True

    def _attach_consumer(self, link: Link, entity: Entity, sub_queue: SubQueue) -> None:
        remote = link.remote_attach
        assert remote is not None
        source = remote.source if remote.source is not None else Source(None)
        consumer = LinkConsumer(self, link, entity.actor, sub_queue,
                                peek_lock=remote.snd_settle_mode != RECEIVE_AND_DELETE)
        link.context = consumer
        filters = {str(k): v for k, v in (source.filter or {}).items()}
        wants_session = SESSION_FILTER in filters
        sessionful = entity.requires_session and sub_queue is SubQueue.MAIN
        if wants_session != sessionful:
            link.refuse(client_error(InvalidOperation(
                "the entity requires sessions: use a session receiver" if sessionful
                else "the entity does not support sessions"), self.broker.metrics, self.peer, entity.name))
            return
        if not sessionful:
            link.accept(source=source, initial_delivery_count=0, max_message_size=0)
            self._start_consuming(consumer)
            return
        requested = filters[SESSION_FILTER]
        properties = {str(k): v for k, v in (remote.properties or {}).items()}
        timeout = properties.get(SESSION_TIMEOUT)
        timeout_ms = int(timeout) if isinstance(timeout, int) and timeout > 0 else DEFAULT_SESSION_WAIT_MS
        try:
            granted = entity.actor.accept_session(consumer, requested if isinstance(requested, str) else None,
                                                  timeout_ms)
        except SodaliteError as exc:
            link.refuse(client_error(exc, self.broker.metrics, self.peer, entity.name))
            return

        def on_granted(future: asyncio.Future[tuple[str, int]]) -> None:
            if future.cancelled():
                return
            if link.state != "attach-received":
                if future.exception() is None:
                    entity.actor.sessions.release(consumer)  # the receiver left while it waited
                return
            exc = future.exception()
            if exc is not None:
                link.refuse(client_error(exc, self.broker.metrics, self.peer, entity.name))
            else:
                session_id, locked_until = future.result()
                consumer.session_id = session_id
                link.accept(
                    source=replace(source, filter={Symbol(SESSION_FILTER): session_id}),
                    properties={Symbol(LOCKED_UNTIL_UTC): Long(DOTNET_EPOCH_TICKS + locked_until * 10_000)},
                    initial_delivery_count=0, max_message_size=0)
                self._start_consuming(consumer)
            self.flush_soon()

        granted.add_done_callback(on_granted)

    def _start_consuming(self, consumer: LinkConsumer) -> None:
        self.consumers.append(consumer)
        consumer.actor.add_consumer(consumer)

    def _accept_control(self, link: Link) -> None:
        if link.role is RECEIVER:
            link.auto_credit = 100
            link.accept()
        else:
            link.accept(initial_delivery_count=0)

    def authorise(self, path: str, right: AccessRights | None) -> None:
        """Raise Unauthorized unless a live token on this connection covers ``path`` with ``right``."""
        now = time.time()
        covering = [g for g in self.grants if g.expires_at > now and g.covers(path)]
        if not covering:
            raise Unauthorized(f"no valid token covers '{path}'; send a put-token to $cbs first")
        if right is not None and not any(g.allows(right) for g in covering):
            raise missing_right(right)

    def _authorised_entity(self, path: str, right: AccessRights | None) -> tuple[Entity, SubQueue]:
        """The entity and sub-queue ``path`` names, if a live token on this connection covers the path."""
        self.authorise(path, right)
        main, sub_queue = SubQueue.split(path)
        entity = self.broker.entity(main)
        if entity is None:
            raise EntityNotFound(f"the messaging entity '{path}' could not be found")
        return entity, sub_queue

    def entity_deleted(self, entity: Entity) -> None:
        """Detach every link on a deleted entity; the SDK raises MessagingEntityNotFoundError."""
        error = client_error(EntityNotFound(f"the messaging entity '{entity.name}' was deleted"),
                             self.broker.metrics, self.peer, entity.name)
        for session in list(self.amqp.sessions.values()):
            for link in list(session.links.values()):
                ctx = link.context
                on_it = ((isinstance(ctx, Producer) and ctx.entity is entity)
                         or (isinstance(ctx, LinkConsumer) and ctx.actor is entity.actor)
                         or (isinstance(ctx, ControlLink) and ctx.entity is entity))
                if on_it:
                    if isinstance(ctx, LinkConsumer) and ctx in self.consumers:
                        self.consumers.remove(ctx)
                    link.detach(error)
        self.flush_soon()

    def _on_detached(self, link: Link) -> None:
        consumer = link.context
        if isinstance(consumer, LinkConsumer):
            if consumer in self.consumers:
                self.consumers.remove(consumer)
            consumer.actor.remove_consumer(consumer)  # also ends a session wait or a session lock

    # ---- transfers -------------------------------------------------------------------------------

    def _on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        context = link.context
        if isinstance(context, Producer):
            self._on_send(link, context, delivery)
        elif isinstance(context, ControlLink):
            if context.node == CBS_NODE:
                self._on_put_token(link, delivery)
            else:
                self._on_management(link, context, delivery)
        elif isinstance(context, CoordinatorLink):
            self.transactions.on_coordinator_transfer(link, delivery)

    def _on_send(self, link: Link, producer: Producer, delivery: ev.Delivery) -> None:
        entity = producer.entity
        if isinstance(delivery.state, TransactionalState):
            self.transactions.on_send(link, entity, delivery)
            return
        try:
            if delivery.oversize:
                raise MessageSizeExceeded(f"the message exceeds the entity limit of {entity.max_message_size} bytes")
            drafts = wire.received_messages(delivery.payload, delivery.message_format, entity.max_message_size)
            drafts = self._without_pings(entity, drafts)
            route = self.broker.route(entity)
            if not drafts:
                future = _done()
            elif route.exceeded:
                future = route.entity.actor.send_to_transfer_dead_letter(
                    drafts, MAX_TRANSFER_HOP_COUNT_EXCEEDED, f"forwarded {route.hops} times")
            elif route.entity.kind == TOPIC:
                future = self.broker.publish(route.entity, drafts)
            else:
                future = route.entity.actor.send(drafts)
        except SodaliteError as exc:
            if not delivery.settled:
                link.settle(delivery.delivery_id, Rejected(client_error(exc, self.broker.metrics, self.peer,
                                                                        entity.name, "rejected")))
            return
        self.broker.metrics.count_in(future, entity.name, len(drafts))
        if delivery.settled:
            return
        delivery_id = delivery.delivery_id

        def acknowledge(f: asyncio.Future[None]) -> None:
            if not link.attached:
                return
            exc = f.exception()
            if exc is None:
                link.settle(delivery_id, Accepted())
            else:
                link.settle(delivery_id, Rejected(client_error(exc, self.broker.metrics, self.peer, entity.name,
                                                               "rejected")))
            self.flush_soon()

        future.add_done_callback(acknowledge)

    @staticmethod
    def _without_pings(entity: Entity, drafts: list[MessageDraft]) -> list[MessageDraft]:
        """The drafts less any paired-namespace pings, which end here: the link's Send right has been
        checked, the entity counts as used (AutoDeleteOnIdle), and nothing is stored or routed."""
        if not any(d.ping for d in drafts):
            return drafts
        entity.actor.note_activity()
        return [d for d in drafts if not d.ping]

    # ---- settlement ------------------------------------------------------------------------------

    def _on_delivery_updated(self, event: ev.DeliveryUpdated) -> None:
        consumer = event.link.context
        if not isinstance(consumer, LinkConsumer) or not consumer.peek_lock:
            return
        token = wire.tag_lock_token(event.delivery_tag)
        if token is None:
            return
        actor = consumer.actor
        state: Any = event.state
        link, delivery_id = event.link, event.delivery_id
        if isinstance(state, TransactionalState):
            self.transactions.on_settlement(event, consumer, token)
            return
        try:
            if isinstance(state, Released) or state is None:
                actor.release(token)
                if not event.settled:
                    link.settle(delivery_id, Released())
                return
            if isinstance(state, Accepted):
                future = actor.complete(token)
                self.broker.metrics.count_out(future, actor, consumer.sub_queue)
            elif isinstance(state, Modified) and not state.undeliverable_here:
                future = actor.abandon(token, state.message_annotations)
            elif isinstance(state, Modified):
                future = actor.defer(token, state.message_annotations)
            elif isinstance(state, Rejected):
                reason, description = _dead_letter_details(state.error)
                future = actor.dead_letter(token, reason, description)
                state = Rejected(None)  # the SDK treats a rejected echo carrying an error as a failure (5.1)
            else:
                raise NotImplementedOperation(f"unsupported outcome {type(state).__name__}")
        except SodaliteError as exc:
            if not event.settled:
                link.settle(delivery_id, Rejected(client_error(exc, self.broker.metrics, self.peer,
                                                               actor.ref.entity, "rejected")))
            return
        if event.settled:
            return

        def echo(f: asyncio.Future[None]) -> None:
            if not link.attached:
                return
            exc = f.exception()
            if exc is None:
                link.settle(delivery_id, state)  # the SDK waits for this exact outcome (contract 5.1)
            elif isinstance(exc, SodaliteError):
                link.settle(delivery_id, Rejected(client_error(exc, self.broker.metrics, self.peer,
                                                               actor.ref.entity, "rejected")))
            self.flush_soon()

        future.add_done_callback(echo)

    # ---- $cbs ------------------------------------------------------------------------------------

    def _respond(self, request_link: Link, node: str, payload: bytes) -> None:
        for link in request_link.session.links.values():
            ctx = link.context
            if link.role is SENDER and isinstance(ctx, ControlLink) and ctx.node == node and link.attached:
                link.send_transfer(payload, uuid.uuid4().bytes, settled=True)
                return
        log.warning("no response link for %s on %s", node, self.peer)

    def _on_put_token(self, link: Link, delivery: ev.Delivery) -> None:
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())  # never reject a put-token (contract 2)
        try:
            request = decode_request(delivery.payload)
        except SodaliteError as exc:
            log.info("malformed put-token from %s: %s", self.peer, exc)
            return
        status, description = 202, "Accepted"
        try:
            self._put_token(request.application_properties, request.body)
        except SodaliteError as exc:
            status, description = exc.http_status, report(exc, self.broker.metrics, self.peer, None, "cbs")[1]
        self._respond(link, CBS_NODE, encode_response(
            request.message_id, {"status-code": Int(status), "status-description": description}, None))

    def _put_token(self, props: dict[str, Any], body: Any) -> None:
        if props.get("operation") != "put-token":
            raise Unauthorized(f"unsupported $cbs operation {props.get('operation')!r}")
        if not isinstance(body, str):
            raise Unauthorized("the token must be a string")
        name = str(props.get("name") or "")
        token = sas.parse_token(body)
        token_host, token_path = sas.audience_path(token.audience)
        name_host, name_path = sas.audience_path(name) if name else (token_host, token_path)
        grant = self.broker.authorize(body, name_path)  # the namespace's keys, or the named entity's own
        hostname = (self.amqp.remote_open.hostname if self.amqp.remote_open else None) or ""
        if token_host != name_host or (hostname and token_host and token_host != hostname.lower()):
            raise Unauthorized(f"the audience '{token.audience}' is outside this namespace")
        if not sas.covers(token_path, name_path):
            raise Unauthorized(f"the token for '{token.audience}' does not cover '{name}'")
        self.grants = [g for g in self.grants if g.expires_at > time.time()]
        self.grants.append(grant)
        self._arm_expiry()

    # ---- token expiry ----------------------------------------------------------------------------

    def _arm_expiry(self) -> None:
        """One timer, at the earliest expiry of a live grant: then links no grant covers any more go."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        now = time.time()
        live = [g.expires_at for g in self.grants if g.expires_at > now]
        if live:
            self._expiry = asyncio.get_running_loop().call_later(min(live) - now + 0.05, self._on_expiry)

    def _on_expiry(self) -> None:
        self._expiry = None
        now = time.time()
        self.grants = [g for g in self.grants if g.expires_at > now]
        for session in list(self.amqp.sessions.values()):
            for link in list(session.links.values()):
                needs = _link_needs(link)
                if needs is None or not link.attached:
                    continue
                try:
                    self.authorise(*needs)
                except Unauthorized as exc:
                    error = Unauthorized(f"the token for '{needs[0]}' expired: {exc.description}")
                    if isinstance(link.context, LinkConsumer) and link.context in self.consumers:
                        self.consumers.remove(link.context)
                        link.context.actor.remove_consumer(link.context)
                    link.detach(client_error(error, self.broker.metrics, self.peer, needs[0]))
        self.flush_soon()
        self._arm_expiry()

    # ---- $management -----------------------------------------------------------------------------

    def _on_management(self, link: Link, control: ControlLink, delivery: ev.Delivery) -> None:
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())
        try:
            request = decode_request(delivery.payload)
        except SodaliteError:
            return
        assert control.entity is not None
        mgmt_path = management_entity(control.node) or control.entity.name
        context = management.Context(control.entity.actor, control.sub_queue, self, control.entity.max_message_size,
                                     self.broker, control.entity,
                                     authorise=lambda right: self.authorise(mgmt_path, right),
                                     decimals_as_text=self.decimals_as_text)
        task = asyncio.get_running_loop().create_task(
            management.execute(context, request.application_properties.get("operation"), request.body))

        def respond(done: asyncio.Task[management.Response]) -> None:
            response = done.result()
            properties: dict[str, Any] = {"statusCode": Int(response.status),
                                          "statusDescription": response.description}
            if response.condition is not None:
                properties["errorCondition"] = Symbol(response.condition)
            self._respond(link, control.node, encode_response(request.message_id, properties, response.body))
            self.flush_soon()

        task.add_done_callback(respond)


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _link_needs(link: Link) -> tuple[str, AccessRights | None] | None:
    """The entity path an entity link works on and the right it needs; None for ``$cbs`` links."""
    ctx = link.context
    if isinstance(ctx, Producer):
        return ctx.entity.name.lower(), AccessRights.SEND
    if isinstance(ctx, LinkConsumer):
        return ctx.actor.ref.entity, AccessRights.LISTEN
    if isinstance(ctx, ControlLink) and ctx.entity is not None:
        return management_entity(ctx.node) or ctx.entity.name.lower(), None
    return None


def _dead_letter_details(error: Error | None) -> tuple[str | None, str | None]:
    """DeadLetterReason and DeadLetterErrorDescription from a dead-letter rejection (contract 5.1)."""
    if error is None or not error.info:
        return None, error.description if error is not None else None
    info = {str(k): v for k, v in error.info.items()}
    reason = info.get("DeadLetterReason")
    description = info.get("DeadLetterErrorDescription", error.description)
    return (reason if isinstance(reason, str) else None,
            description if isinstance(description, str) else None)
