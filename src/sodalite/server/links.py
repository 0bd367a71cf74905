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

from sodalite.amqp import events as ev
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import Accepted, Rejected, Released, Source, TransactionalState
from sodalite.amqp.states import LinkState
from sodalite.amqp.types import Described, Long, Symbol
from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    InvalidOperation,
    MessageLockLost,
    MessageSizeExceeded,
    QuotaExceeded,
    SessionLockLost,
    SodaliteError,
    StoreUnavailable,
)
from sodalite.model.authorization import AccessRights
from sodalite.model.copies import with_claim_counted
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.model.partitioning import partition_index, partition_key
from sodalite.model.routing import hop_limit_dead_letter, without_pings
from sodalite.server import delivery_trace, outcomes, test_defects, wire
from sodalite.server.amqp_errors import client_error
from sodalite.server.endpoint import ConnectionPort, Endpoint
from sodalite.server.entity_settings import SubQueue
from sodalite.server.registry import TOPIC, Entity, Route

if TYPE_CHECKING:
    from sodalite.server.broker_port import BrokerPort
    from sodalite.server.metrics import Tally
    from sodalite.server.partitioned_actor import EntityActor

RECEIVE_AND_DELETE = 1  # snd-settle-mode "settled": the client receives pre-settled messages
SESSION_FILTER = "com.microsoft:session-filter"  # plain str id, or null for the next available (4.3)
SESSION_TIMEOUT = "com.microsoft:timeout"  # uint ms a next-available session receiver waits
LOCKED_UNTIL_UTC = "com.microsoft:locked-until-utc"  # .NET ticks, on the session attach reply
DOTNET_EPOCH_TICKS = 621355968000000000  # ticks at the Unix epoch (contract pitfall 5)
DEFAULT_SESSION_WAIT_MS = 60_000
PRODUCER_CREDIT = 1000  # ignored by the Python SDK (contract 1.7), honoured by other clients
BATCH_ENVELOPE_SLACK = 64 * 1024  # room for the batch envelope around a full-size message
SETTLE_RETRY_SECONDS = 0.25  # a settlement on the link refused for now (store offline) is carried out again


# ---- the client's sender ---------------------------------------------------------------------------


class _Run:
    """One transfer's messages waiting in a producer's group: its delivery-id (None when it came settled)."""

    __slots__ = ("delivery_id", "drafts", "sent")

    def __init__(self, delivery_id: int | None, drafts: list[MessageDraft]) -> None:
        self.delivery_id = delivery_id
        self.drafts = drafts
        self.sent: asyncio.Future[None] | None = None  # the send its messages went with (None: refused already)


class Producer(Endpoint):
    """A client sender link on an entity: the broker receives.

    Transfers that arrive back to back on the link (the same event-loop turn: one read from the
    socket holds many) are stored as one send per partition: their messages go to the partition's
    core together, so they are one append in one commit, the cost of a batched send rather than one
    decision, one store batch, one future and one disposition each. Each transfer keeps its own
    outcome: it is answered ``accepted`` once the commit of every partition holding its messages is
    durable (one disposition frame per range of consecutive delivery-ids), ``rejected`` alone when it
    alone is refused (a malformed message, a SessionId missing where the entity requires one, a
    quota its own size passes). A transfer that does not join the group (one in a transaction, or one
    refused as a whole by the entity: a message without a SessionId where sessions are required) is
    handled after the group before it was submitted, so the link's order holds. When the entity
    forwards over too long a chain, each transfer of the group goes to the dead-letter queue on its own.
    """

    __slots__ = ("_flush_scheduled", "_pending", "connection", "entity")

    def __init__(self, connection: ConnectionPort, entity: Entity) -> None:
        self.connection = connection
        self.entity = entity
        self._pending: list[tuple[Link, _Run]] = []
        self._flush_scheduled = False

    def needs(self) -> tuple[str, AccessRights | None]:
        return self.entity.name.lower(), AccessRights.SEND

    def serves(self, entity: Entity) -> bool:
        return self.entity is entity

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        entity, conn = self.entity, self.connection
        broker = conn.broker
        if isinstance(delivery.state, TransactionalState):
            self.submit_pending()  # what came before it on the link goes first
            conn.transactions.on_send(link, entity, delivery)
            return
        try:
            if delivery.oversize:
                raise MessageSizeExceeded(f"the message exceeds the entity limit of {entity.max_message_size} bytes")
            drafts = wire.received_messages(delivery.payload, delivery.message_format, entity.max_message_size)
            drafts, pinged = without_pings(drafts)
            if pinged:
                entity.actor.note_activity()
            if drafts and _groupable(entity, drafts):
                self._pending.append((link, _Run(None if delivery.settled else delivery.delivery_id, drafts)))
                if not self._flush_scheduled:
                    self._flush_scheduled = True  # at the end of this turn: the transfers read with it join
                    asyncio.get_running_loop().call_soon(self.submit_pending)
                return
            self.submit_pending()
            route = broker.route(entity)
            if test_defects.ACTIVE and test_defects.on("ack-before-commit") and not delivery.settled:
                link.settle(delivery.delivery_id, Accepted())  # test-only defect: acknowledged before the commit
                if test_defects.every(4):
                    drafts = []  # ... and the commit lost
            future = _send(broker, route, drafts) if drafts else _done()
        except SodaliteError as exc:
            if not delivery.settled:
                link.settle(delivery.delivery_id, Rejected(client_error(exc, broker.metrics, conn.peer,
                                                                        entity.name, "rejected")))
            return
        broker.metrics.count_in(future, entity.name, len(drafts))
        if delivery.settled or test_defects.on("ack-before-commit"):
            return
        run = _Run(delivery.delivery_id, drafts)
        run.sent = future
        self._answer_when_done([(link, run)])

    def submit_pending(self) -> None:
        """Send the transfers gathered so far: one send per partition they go to (see the class docstring)."""
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            route = self.connection.broker.route(self.entity)
        except SodaliteError:
            route = None
        if route is None or hop_limit_dead_letter(route.hops, route.exceeded) is not None:  # each transfer on its own
            for link, run in pending:
                self._submit([(link, run)])
        else:
            for runs, refusal in _shards(route.entity, pending):
                if refusal is not None:
                    self._refuse(runs, refusal)
                else:
                    self._submit(runs)
        self._answer_when_done(pending)

    def _submit(self, runs: list[tuple[Link, _Run]]) -> None:
        """One send of ``runs``' messages (one partition's share, or one transfer). When the send is
        refused before anything is stored only because of the messages together (a quota), each
        transfer is tried on its own, so each gets the answer it would have got alone."""
        conn = self.connection
        broker = conn.broker
        drafts = [d for _, run in runs for d in run.drafts]
        try:
            future = _send(broker, broker.route(self.entity), drafts)
        except QuotaExceeded as exc:
            if len(runs) > 1:
                for each in runs:
                    self._submit([each])
            else:
                self._refuse(runs, exc)
            return
        except SodaliteError as exc:
            self._refuse(runs, exc)
            return
        broker.metrics.count_in(future, self.entity.name, len(drafts))
        for _, run in runs:
            run.sent = future

    def _refuse(self, runs: list[tuple[Link, _Run]], exc: BaseException) -> None:
        conn = self.connection
        for link, run in runs:
            if run.delivery_id is not None and link.attached:
                link.settle(run.delivery_id, Rejected(client_error(exc, conn.broker.metrics, conn.peer,
                                                                   self.entity.name, "rejected")))
        conn.flush_soon()

    def _answer_when_done(self, runs: list[tuple[Link, _Run]]) -> None:
        """Once every send of ``runs`` is done (each after its commit), answer each unsettled
        transfer with its own send's outcome, in delivery order: the accepted ones one disposition
        per range of consecutive delivery-ids."""
        answered = [(link, run) for link, run in runs if run.delivery_id is not None and run.sent is not None]
        waiting = {id(run.sent): run.sent for _, run in answered if run.sent is not None}
        if not waiting:
            return
        left = [len(waiting)]

        def one_done(_: asyncio.Future[None]) -> None:
            left[0] -= 1
            if left[0] == 0:
                self._answer(answered)

        for future in waiting.values():
            future.add_done_callback(one_done)

    def _answer(self, answered: list[tuple[Link, _Run]]) -> None:
        conn = self.connection
        accepted: list[tuple[Link, int]] = []
        for link, run in answered:
            assert run.sent is not None and run.delivery_id is not None
            exc = None if run.sent.cancelled() else run.sent.exception()
            if exc is None and not run.sent.cancelled():
                accepted.append((link, run.delivery_id))
            elif link.attached:
                failure = exc if exc is not None else StoreUnavailable("the send was cancelled; retry")
                link.settle(run.delivery_id, Rejected(client_error(failure, conn.broker.metrics, conn.peer,
                                                                   self.entity.name, "rejected")))
        _settle_ranges(accepted, Accepted())
        conn.flush_soon()


def _send(broker: BrokerPort, route: Route, drafts: list[MessageDraft]) -> asyncio.Future[None]:
    """Send ``drafts`` where ``route`` leads: to its transfer dead-letter queue when the forwarding
    chain is too long, to the topic's subscriptions, or to the queue or subscription itself."""
    limit = hop_limit_dead_letter(route.hops, route.exceeded)
    if limit is not None:
        return route.entity.actor.send_to_transfer_dead_letter(drafts, *limit)
    if route.entity.kind == TOPIC:
        return broker.publish(route.entity, drafts)
    return route.entity.actor.send(drafts)


def _groupable(entity: Entity, drafts: list[MessageDraft]) -> bool:
    """Whether a transfer's messages may join the link's group: not under a test defect that
    acknowledges before the commit, and not refused for lacking a SessionId (refused alone)."""
    if test_defects.ACTIVE and test_defects.on("ack-before-commit"):
        return False
    return not (entity.requires_session and any(d.session_id is None for d in drafts))


def _shards(target: Entity, pending: list[tuple[Link, _Run]]
            ) -> list[tuple[list[tuple[Link, _Run]], BaseException | None]]:
    """``pending`` split by the partition of ``target`` its messages go to (one part for an entity
    without partitions), in order; a transfer whose messages name several partitions or whose keys
    conflict is a part of its own (with the refusal, for conflicting keys)."""
    actor: Any = target.actor
    partitions = getattr(actor, "partitions", None)
    if not partitions or len(partitions) < 2:
        return [(pending, None)]
    dedup = actor.settings.duplicate_detection_window is not None
    count = len(partitions)
    parts: dict[object, list[tuple[Link, _Run]]] = {}
    alone: list[tuple[list[tuple[Link, _Run]], BaseException | None]] = []
    for link, run in pending:
        try:
            keys = {partition_key(d, dedup) for d in run.drafts}
        except SodaliteError as exc:
            alone.append(([(link, run)], exc))
            continue
        if len(keys) != 1:
            alone.append(([(link, run)], None))
            continue
        key = keys.pop()
        parts.setdefault(None if key is None else partition_index(key, count), []).append((link, run))
    return [(runs, None) for runs in parts.values()] + alone


def _settle_ranges(answered: list[tuple[Link, int]], outcome: Any) -> None:
    """Settle each delivery with ``outcome``: one disposition per run of consecutive delivery-ids of one link."""
    i, n = 0, len(answered)
    while i < n:
        link, first = answered[i]
        last = first
        while i + 1 < n and answered[i + 1][0] is link and answered[i + 1][1] == last + 1:
            i += 1
            last += 1
        i += 1
        if not link.attached:
            continue
        if last == first:
            link.settle(first, outcome)
        else:
            link.session.disposition(link.role, first, last, True, outcome)


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
        self._counters: tuple[Tally, Tally] | None = None  # deliveries, messages out (labelled once)
        # Deliveries queued on the link and not written to the socket yet, by delivery-id: given
        # back if they never are (a ReceiveAndDelete message put back in place, a lock released).
        self.unwritten: dict[int, tuple[MessageRecord, Lock | None]] = {}
        self.on_gone: Callable[[], None] | None = None  # after the link went (a topic consumer's subscription)
        self.selects: Callable[[MessageRecord], bool] | None = None  # a JMS selector: only what it selects

    def counters(self) -> tuple[Tally, Tally]:
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
        messages put back in place. ``record`` is as the receiver would have been shown it; the core's
        Unsent takes it with the claim counted, and gives the claim back itself (model.copies rule 1)."""
        records = []
        for record, lock in taken:
            if lock is not None:
                self.actor.release(lock.token)
            else:
                records.append(with_claim_counted(record))
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
        except SodaliteError as exc:
            if not event.settled:
                link.settle(delivery_id, Rejected(client_error(exc, metrics, conn.peer, actor.ref.entity,
                                                               "rejected")))
            return
        echo = outcomes.echo_of(state)
        removed = self.counters()[1] if settlement.removes else None
        loop = asyncio.get_running_loop()
        # The lock was last renewed before this settlement came: it has lapsed one lock duration from now.
        lapsed = loop.time() + actor.settings.lock_duration / 1000

        def refused(exc: SodaliteError) -> None:
            if event.settled or not link.attached:
                return
            if exc.retryable:
                # Not done, and not now (the store offline, a timeout): carried out again, its outcome held
                # back until then. Any outcome settles the delivery on the client's side: the Go SDK retries
                # a retryable rejection as a no-op and reports success, and the message came back when its
                # lock lapsed. Once the lock has surely lapsed, that is the answer.
                if loop.time() < lapsed:
                    loop.call_later(SETTLE_RETRY_SECONDS, again)
                    return
                exc = MessageLockLost(LOCK_SUPPLIED_INVALID)
            link.settle(delivery_id, Rejected(client_error(exc, metrics, conn.peer, actor.ref.entity, "rejected")))
            conn.flush_soon()

        def confirm(f: asyncio.Future[None]) -> None:
            # One callback per settlement: it counts the removal (once committed) and answers.
            if f.cancelled():
                return
            exc = f.exception()
            if exc is None and removed is not None:
                removed.inc()
            if not link.attached:
                return
            if exc is None:
                link.settle(delivery_id, echo)  # the SDK waits for this exact outcome (contract 5.1)
                conn.flush_soon()
            elif isinstance(exc, SodaliteError):
                refused(exc)

        def attempt() -> None:
            try:
                future = outcomes.carry_out(actor, token, settlement)
            except SodaliteError as exc:
                refused(exc)
                return
            if future is None:  # a release: done at once, confirmed only if the client asked
                if not event.settled:
                    link.settle(delivery_id, Released())
                return
            if event.settled:
                if removed is not None:
                    metrics.count_out_to(future, removed)
                return
            future.add_done_callback(confirm)

        def again() -> None:
            if link.attached:
                attempt()
                conn.flush_soon()

        attempt()


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
