"""The entity link endpoints: a client's sender (a :class:`Producer`) and receiver (a :class:`LinkConsumer`).

Theory of operation. The router (``server/router.py``) has checked the address and the token and
calls :func:`attach_producer` or :func:`attach_consumer`.

* A producer takes each complete transfer, decodes its message or batch, and hands it to the
  entity's partition actor (or the topic's fan-out, or the transfer dead-letter queue when the
  forwarding chain is too long). The transfer is answered ``accepted`` only once the store has it,
  ``rejected`` with the Service Bus error otherwise. Transfers in a transaction go to the
  connection's transactions.
* A consumer is what the partition actor delivers to. In PeekLock each delivery's tag is its lock
  token; the client's disposition is read by ``server/outcomes.py`` and carried out by the actor,
  and the broker echoes the outcome only once it is durable (sdk-wire-contract.md 5.1). It keeps
  each delivery until the connection reports its transfer written to the socket; one never written
  (the link, its session or its connection went first: the AMQP layer takes such transfers back) is
  given back: a ReceiveAndDelete message put back in place, a PeekLock lock released. A session
  receiver's attach is answered only when the actor grants it a session, which may take up to the
  client's timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter

from sodalite.amqp import events as ev
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Accepted, Rejected, Released, Source, TransactionalState
from sodalite.amqp.states import LinkState
from sodalite.amqp.types import Described, Long, Symbol
from sodalite.errors import InvalidOperation, MessageSizeExceeded, SessionLockLost, SodaliteError
from sodalite.model.authorization import AccessRights
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, Lock
from sodalite.model.routing import past_hop_limit, without_pings
from sodalite.server import delivery_trace, outcomes, test_defects, wire
from sodalite.server.amqp_errors import client_error
from sodalite.server.endpoint import ConnectionPort, Endpoint
from sodalite.server.entity_settings import SubQueue
from sodalite.server.registry import TOPIC, Entity

if TYPE_CHECKING:
    from sodalite.server.partitioned_actor import EntityActor

RECEIVE_AND_DELETE = 1  # snd-settle-mode "settled": the client receives pre-settled messages
SESSION_FILTER = "com.microsoft:session-filter"  # plain str id, or null for the next available (4.3)
SESSION_TIMEOUT = "com.microsoft:timeout"  # uint ms a next-available session receiver waits
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"  # .NET ticks, on the session attach reply
DOTNET_EPOCH_TICKS = 621355968000000000  # ticks at the Unix epoch (contract pitfall 5)
DEFAULT_SESSION_WAIT_MS = 60_000
PRODUCER_CREDIT = 1000  # ignored by the Python SDK (contract 1.7), honoured by other clients
BATCH_ENVELOPE_SLACK = 64 * 1024  # room for the batch envelope around a full-size message


# ---- the client's sender ---------------------------------------------------------------------------


class Producer(Endpoint):
    """A client sender link on an entity: the broker receives."""

    __slots__ = ("connection", "entity")

    def __init__(self, connection: ConnectionPort, entity: Entity) -> None:
        self.connection = connection
        self.entity = entity

    def needs(self) -> tuple[str, AccessRights | None]:
        return self.entity.name.lower(), AccessRights.SEND

    def serves(self, entity: Entity) -> bool:
        return self.entity is entity

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        entity, conn = self.entity, self.connection
        broker = conn.broker
        if isinstance(delivery.state, TransactionalState):
            conn.transactions.on_send(link, entity, delivery)
            return
        try:
            if delivery.oversize:
                raise MessageSizeExceeded(f"the message exceeds the entity limit of {entity.max_message_size} bytes")
            drafts = wire.received_messages(delivery.payload, delivery.message_format, entity.max_message_size)
            drafts, pinged = without_pings(drafts)
            if pinged:
                entity.actor.note_activity()
            route = broker.route(entity)
            limit = past_hop_limit(route.hops, route.exceeded)
            if test_defects.ACTIVE and test_defects.on("ack-before-commit") and not delivery.settled:
                link.settle(delivery.delivery_id, Accepted())  # test-only defect: acknowledged before the commit
                if test_defects.every(4):
                    drafts = []  # ... and the commit lost
            if not drafts:
                future = _done()
            elif limit is not None:
                future = route.entity.actor.send_to_transfer_dead_letter(drafts, MAX_TRANSFER_HOP_COUNT_EXCEEDED, limit)
            elif route.entity.kind == TOPIC:
                future = broker.publish(route.entity, drafts)
            else:
                future = route.entity.actor.send(drafts)
        except SodaliteError as exc:
            if not delivery.settled:
                link.settle(delivery.delivery_id, Rejected(client_error(exc, broker.metrics, conn.peer,
                                                                        entity.name, "rejected")))
            return
        broker.metrics.count_in(future, entity.name, len(drafts))
        if delivery.settled or test_defects.on("ack-before-commit"):
            return
        delivery_id = delivery.delivery_id

        def acknowledge(f: asyncio.Future[None]) -> None:
            if not link.attached:
                return
            exc = f.exception()
            if exc is None:
                link.settle(delivery_id, Accepted())
            else:
                link.settle(delivery_id, Rejected(client_error(exc, broker.metrics, conn.peer, entity.name,
                                                               "rejected")))
            conn.flush_soon()

        future.add_done_callback(acknowledge)


def attach_producer(connection: ConnectionPort, link: Link, entity: Entity) -> None:
    link.context = Producer(connection, entity)
    limit = entity.max_message_size
    link.auto_credit = PRODUCER_CREDIT
    link.max_message_size = limit + BATCH_ENVELOPE_SLACK
    link.accept(max_message_size=limit)


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


# ---- the client's receiver -------------------------------------------------------------------------


class LinkConsumer(Endpoint):
    """A client receiver link, as the partition actor sees it (``entity_settings.Consumer``)."""

    __slots__ = ("_counters", "actor", "connection", "link", "on_gone", "peek_lock", "reserved", "selects",
                 "session_id", "sub_queue", "unwritten")

    def __init__(self, connection: ConnectionPort, link: Link, actor: EntityActor,
                 sub_queue: SubQueue, peek_lock: bool) -> None:
        self.connection = connection
        self.link = link
        self.actor = actor
        self.sub_queue = sub_queue
        self.session_id: str | None = None
        self.peek_lock = peek_lock
        self.reserved = 0
        self._counters: tuple[Counter, Counter] | None = None  # deliveries, messages out (labelled once)
        # Deliveries queued on the link and not written to the socket yet, by delivery-id: given
        # back if they never are (a ReceiveAndDelete message put back in place, a lock released).
        self.unwritten: dict[int, tuple[MessageRecord, Lock | None]] = {}
        self.on_gone: Callable[[], None] | None = None  # after the link went (a topic consumer's subscription)
        self.selects: Callable[[MessageRecord], bool] | None = None  # a JMS selector: only what it selects

    def counters(self) -> tuple[Counter, Counter]:
        if self._counters is None:
            self._counters = self.connection.broker.metrics.consumer_counters(self.actor, self.sub_queue)
        return self._counters

    # -- as the actor sees it

    def credit(self) -> int:
        return self.link.link_credit if self.link.attached else 0

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        if not self.link.attached:  # gone since the actor looked: never written
            self._give_back([(record, lock)])
            return
        python_sdk_decimals = self.connection.python_sdk_decimals
        if lock is not None:
            payload = wire.delivery_payload(record, lock.locked_until, lock_token=lock.token,
                                            python_sdk_decimals=python_sdk_decimals)
            delivery_id = self.link.send_transfer(payload, wire.lock_token_tag(lock.token), settled=False)
        else:
            # ReceiveAndDelete: no lock token, but a delivery-annotations section all the same (empty
            # when the sender put none there), as Service Bus sends it: the SDKs read it as {}.
            payload = wire.delivery_payload(record, None, python_sdk_decimals=python_sdk_decimals,
                                            delivery_annotations=True)
            delivery_id = self.link.send_transfer(payload, uuid.uuid4().bytes_le, settled=True)
        self.unwritten[delivery_id] = (record, lock)
        deliveries, messages_out = self.counters()
        deliveries.inc()
        if lock is None:  # received in ReceiveAndDelete: removed already (committed)
            messages_out.inc()
        self.connection.flush_soon()

    def _give_back(self, taken: list[tuple[MessageRecord, Lock | None]]) -> None:
        """Deliveries never written: locks released (the delivery count given back), ReceiveAndDelete
        messages put back in place."""
        records = []
        for record, lock in taken:
            if lock is not None:
                self.actor.release(lock.token)
            else:
                records.append(record)
        if records:
            self.actor.unsent(self.sub_queue, records)

    def drain_requested(self) -> bool:
        return self.link.attached and self.link.drain and self.link.link_credit > 0

    def drained(self) -> None:
        self.link.drained()
        self.connection.flush_soon()

    def session_lost(self) -> None:
        """The session lock expired: the SDK raises SessionLockLostError and drops the receiver (4.3)."""
        conn = self.connection
        self.link.detach(client_error(SessionLockLost(f"the lock on session '{self.session_id}' expired"),
                                      conn.broker.metrics, conn.peer, self.actor.ref.entity))
        conn.flush_soon()

    # -- as the connection sees it

    def needs(self) -> tuple[str, AccessRights | None]:
        return self.actor.ref.entity, AccessRights.LISTEN

    def serves(self, entity: Entity) -> bool:
        return self.actor is entity.actor

    def on_credit(self) -> None:
        self.actor.credit_changed(self)

    def on_written(self, delivery_id: int) -> None:
        entry = self.unwritten.pop(delivery_id, None)
        if entry is not None and entry[1] is None:
            trace = delivery_trace.current()
            if trace is not None:
                trace.written(self.actor.ref.entity + self.sub_queue.value, entry[0].sequence_number, self.link.name)

    def on_unsent(self, delivery_ids: tuple[int, ...]) -> None:
        taken = [entry for entry in (self.unwritten.pop(i, None) for i in delivery_ids) if entry is not None]
        if taken:
            self._give_back(taken)

    def on_detached(self) -> None:
        trace = delivery_trace.current()
        if trace is not None and not self.peek_lock:
            trace.detached(self.actor.ref.entity + self.sub_queue.value, self.link.name)
        self.actor.remove_consumer(self)  # also ends a session wait or a session lock
        gone, self.on_gone = self.on_gone, None
        if gone is not None:
            gone()

    def on_delivery_updated(self, event: ev.DeliveryUpdated) -> None:
        if not self.peek_lock:
            return
        token = wire.tag_lock_token(event.delivery_tag)
        if token is None:
            return
        conn, actor = self.connection, self.actor
        metrics = conn.broker.metrics
        state: Any = event.state
        link, delivery_id = event.link, event.delivery_id
        if isinstance(state, TransactionalState):
            conn.transactions.on_settlement(event, self, token)
            return
        if (test_defects.ACTIVE and test_defects.on("complete-not-committed") and isinstance(state, Accepted)
                and test_defects.every(3)):
            if not event.settled:  # test-only defect: the complete acknowledged, never carried out
                link.settle(delivery_id, Accepted())
            return
        try:
            settlement = outcomes.settlement_of(state)
            future = outcomes.carry_out(actor, token, settlement)
            if future is None:  # a release: done at once, confirmed only if the client asked
                if not event.settled:
                    link.settle(delivery_id, Released())
                return
            if settlement.removes:
                metrics.count_out_to(future, self.counters()[1])
            echo = outcomes.echo_of(state)
        except SodaliteError as exc:
            if not event.settled:
                link.settle(delivery_id, Rejected(client_error(exc, metrics, conn.peer, actor.ref.entity,
                                                               "rejected")))
            return
        if event.settled:
            return

        def confirm(f: asyncio.Future[None]) -> None:
            if not link.attached:
                return
            exc = f.exception()
            if exc is None:
                link.settle(delivery_id, echo)  # the SDK waits for this exact outcome (contract 5.1)
            elif isinstance(exc, SodaliteError):
                link.settle(delivery_id, Rejected(client_error(exc, metrics, conn.peer, actor.ref.entity,
                                                               "rejected")))
            conn.flush_soon()

        future.add_done_callback(confirm)


def attach_consumer(connection: ConnectionPort, link: Link, entity: Entity, sub_queue: SubQueue,
                    selects: Callable[[MessageRecord], bool] | None = None) -> None:
    """Accept a receiver on ``entity``; a session receiver waits for the actor to grant a session.
    ``selects`` (a JMS selector) limits what it is given to the messages it selects."""
    remote = link.remote_attach
    assert remote is not None
    metrics, peer = connection.broker.metrics, connection.peer
    source = remote.source if remote.source is not None else Source(None)
    consumer = LinkConsumer(connection, link, entity.actor, sub_queue,
                            peek_lock=remote.snd_settle_mode != RECEIVE_AND_DELETE)
    consumer.selects = selects
    link.context = consumer
    filters = {str(k): v for k, v in (source.filter or {}).items()}
    wants_session = SESSION_FILTER in filters
    sessionful = entity.requires_session and sub_queue is SubQueue.MAIN
    if wants_session != sessionful:
        link.refuse(client_error(InvalidOperation(
            # Service Bus's words, which the Go SDK's TestSessionReceiver_NonSessionReceiver compares
            "It is not possible for an entity that requires sessions to create a non-sessionful message receiver."
            if sessionful
            else "the entity does not support sessions"), metrics, peer, entity.name))
        return
    if not sessionful:
        link.accept(source=source, initial_delivery_count=0, max_message_size=0)
        consumer.actor.add_consumer(consumer)
        return
    # The Python SDK sends the session id (or null) plain; Go, Java and .NET send it as a described value
    # (AMQP filter-set entries are described types): the reply echoes the form the client used.
    asked = filters[SESSION_FILTER]
    requested = asked.value if isinstance(asked, Described) else asked
    if isinstance(requested, bytes):
        requested = requested.decode("utf-8", "replace")
    properties = {str(k): v for k, v in (remote.properties or {}).items()}
    timeout = properties.get(SESSION_TIMEOUT)
    timeout_ms = int(timeout) if isinstance(timeout, int) and timeout > 0 else DEFAULT_SESSION_WAIT_MS
    try:
        granted = entity.actor.accept_session(consumer, requested if isinstance(requested, str) else None,
                                              timeout_ms)
    except SodaliteError as exc:
        link.refuse(client_error(exc, metrics, peer, entity.name))
        return

    def on_granted(future: asyncio.Future[tuple[str, int]]) -> None:
        if future.cancelled():
            return
        if link.state is not LinkState.ATTACH_RECEIVED:
            if future.exception() is None:
                entity.actor.sessions.release(consumer)  # the receiver left while it waited
            return
        exc = future.exception()
        if exc is not None:
            link.refuse(client_error(exc, metrics, peer, entity.name))
        else:
            session_id, locked_until = future.result()
            consumer.session_id = session_id
            link.accept(
                source=replace(source, filter={Symbol(SESSION_FILTER): Described(asked.descriptor, session_id)
                                               if isinstance(asked, Described) else session_id}),
                properties={Symbol(LOCKED_UNTIL_UTC): Long(DOTNET_EPOCH_TICKS + locked_until * 10_000)},
                initial_delivery_count=0, max_message_size=0)
            consumer.actor.add_consumer(consumer)
        connection.flush_soon()

    granted.add_done_callback(on_granted)
