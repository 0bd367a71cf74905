"""AMQP transactions (AMQP 1.0 part 4) as Service Bus runs them: sends and settlements applied at once.

Theory of operation. A client attaches a link whose target is a ``Coordinator``; the broker is its
receiver. A ``Declare`` message gets a fresh opaque txn-id back (``Declared``); the transaction
belongs to the connection, and when the connection goes its open transactions roll back.

* A transfer whose state is ``TransactionalState(txn-id)`` is *enlisted*: it is checked as a send is
  (size, sessions, quota, the entity, its availability) and answered ``TransactionalState(txn-id,
  Accepted)``, but nothing is stored or shown yet.
* A disposition whose state is ``TransactionalState(txn-id, outcome)`` enlists that settlement; the
  message stays locked, and is echoed with the same state.
* ``Discharge(fail=False)`` commits: the sends are planned again (routed past ForwardTo, a topic's
  copies made) and the whole transaction is decided by ONE partition core as one ``Transact``
  (``server/core_transactions.py``): the core of the partition holding its locks, or its sends'
  home, checks every lock and every target and commits everything in one store transaction. Only
  when it is durable is the discharge accepted and is everything published, so a receiver or a
  peek sees all of it or none.
* ``Discharge(fail=True)``, and a lost connection, roll back: enlisted sends are dropped and enlisted
  settlements leave their messages locked as they were (the client may abandon them or let the lock
  expire).

Partitioned entities follow the seed's rules ("Use transactions with partitioned entities"): see
:func:`pin_partitioned_send`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sodalite.amqp.errors import ProtocolError
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import (
    Accepted,
    Declare,
    Declared,
    Discharge,
    Rejected,
    TransactionalState,
    lift,
)
from sodalite.errors import (
    ArgumentError,
    InvalidOperation,
    MessageSizeExceeded,
    NotImplementedOperation,
    SodaliteError,
    TransactionRolledBack,
    TransactionUnknown,
)
from sodalite.model.partition import MessageDraft
from sodalite.model.partitioning import partition_key
from sodalite.model.settlement import Settlement
from sodalite.server import core_transactions as on_core
from sodalite.server import outcomes, wire
from sodalite.server.amqp_errors import client_error
from sodalite.server.endpoint import ConnectionPort, Endpoint, SettlingConsumer
from sodalite.server.messages import decode_request
from sodalite.server.registry import Entity

if TYPE_CHECKING:
    from sodalite.amqp import events as ev
    from sodalite.server.broker_port import BrokerPort

log = logging.getLogger(__name__)

COORDINATOR_CREDIT = 100  # Declare/Discharge messages a controller may have in flight
TRANSACTION_TIMEOUT_MS = 120_000  # Service Bus aborts a transaction not discharged within 2 minutes

Command = Callable[[], object]


# ---- the partitioned-entity rules (pure) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionPin:
    """The partition key the transaction's messages to partitioned entities share, and their session."""

    key: str
    session_id: str | None


def pin_partitioned_send(pin: PartitionPin | None, draft: MessageDraft, duplicate_detection: bool) -> PartitionPin:
    """Check one message a transaction sends to a partitioned entity; return the transaction's pin.

    Seed: the message needs a partition key; all messages of the transaction the same key; a
    transaction sends to one session only; SessionId and PartitionKey, when both set, are equal.
    """
    if draft.session_id is not None and draft.partition_key is not None and draft.session_id != draft.partition_key:
        raise InvalidOperation(f"the PartitionKey '{draft.partition_key}' differs from the SessionId "
                               f"'{draft.session_id}'; in a transaction they must be equal")
    key = partition_key(draft, duplicate_detection)  # the seed's key, as any send to the entity uses
    if key is None:
        raise InvalidOperation("a message sent in a transaction to a partitioned entity needs a partition key: "
                               "a SessionId, a PartitionKey, or a MessageId when duplicate detection is on")
    if pin is None:
        return PartitionPin(key, draft.session_id)
    if draft.session_id is not None and pin.session_id is not None and draft.session_id != pin.session_id:
        raise InvalidOperation(f"a transaction cannot send to several sessions of a partitioned entity "
                               f"('{pin.session_id}' and '{draft.session_id}')")
    if key != pin.key:
        raise InvalidOperation(f"all messages of a transaction need the same partition key: '{key}' differs "
                               f"from '{pin.key}'")
    return PartitionPin(key, pin.session_id if pin.session_id is not None else draft.session_id)


def pin_transfer(pin: PartitionPin | None, drafts: Iterable[MessageDraft],
                 duplicate_detection: bool) -> PartitionPin | None:
    """The pin after every message of one transfer (all or none of them pass)."""
    for draft in drafts:
        pin = pin_partitioned_send(pin, draft, duplicate_detection)
    return pin


def is_partitioned(entity: Entity) -> bool:
    return bool(getattr(entity.properties, "enable_partitioning", False))


# ---- bookkeeping ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnlistedSend:
    entity: Entity  # as the client addressed it; routed again at commit
    drafts: list[MessageDraft]


@dataclass(slots=True)
class Transaction:
    txn_id: bytes
    sends: list[EnlistedSend] = field(default_factory=list)
    pin: PartitionPin | None = None
    declared_at: int = 0  # ms, the connection's clock
    # Its settlements, and its sends as planned when enlisted (for the checks; the commit plans them again).
    core_settlements: list[on_core.CoreSettlement] = field(default_factory=list)
    core_planned: list[on_core.PlannedSend] = field(default_factory=list)

class Transactions:
    """A connection's open transactions: declare, look up, discharge (no I/O here)."""

    def __init__(self) -> None:
        self._open: dict[bytes, Transaction] = {}

    def declare(self, now: int = 0) -> Transaction:
        txn = Transaction(uuid.uuid4().bytes, declared_at=now)  # opaque, and unique across the broker in practice
        self._open[txn.txn_id] = txn
        return txn

    def get(self, txn_id: Any, now: int = 0) -> Transaction:
        """The open transaction; one older than the timeout is rolled back (TransactionRolledBack)."""
        txn = self._open.get(txn_id) if isinstance(txn_id, bytes) else None
        if txn is None:
            raise TransactionUnknown("the transaction id is unknown on this connection, or it was discharged")
        if now - txn.declared_at > TRANSACTION_TIMEOUT_MS:
            del self._open[txn.txn_id]
            raise TransactionRolledBack(
                f"the transaction was rolled back: it was not discharged within {TRANSACTION_TIMEOUT_MS // 1000} s")
        return txn

    def discharge(self, txn_id: Any, now: int = 0) -> Transaction:
        """Take the transaction out: from now on its id is unknown, whether it commits or not."""
        txn = self.get(txn_id, now)
        del self._open[txn.txn_id]
        return txn

    def roll_back_all(self) -> int:
        count = len(self._open)
        self._open.clear()
        return count

    def __len__(self) -> int:
        return len(self._open)


# ---- planning and committing --------------------------------------------------------------------------


def enlist_send(broker: BrokerPort, txn: Transaction, entity: Entity, drafts: list[MessageDraft]) -> None:
    """Check a transactional send now (refusals are immediate, the transaction stays usable); keep it."""
    pin = txn.pin
    destination = broker.route(entity).entity
    for checked in (entity,) if destination is entity else (entity, destination):
        if is_partitioned(checked):
            dedup = bool(getattr(checked.properties, "requires_duplicate_detection", False))
            pin = pin_transfer(pin, drafts, dedup)
    planned = on_core.plan_send(broker, entity, drafts)
    on_core.check(txn.core_settlements, [*txn.core_planned, *planned])
    txn.pin = pin
    txn.core_planned += planned
    txn.sends.append(EnlistedSend(entity, drafts))


def commit(broker: BrokerPort, txn: Transaction) -> asyncio.Future[None]:
    """Apply everything ``txn`` enlisted in one store transaction, planned again and decided by one
    core; the future resolves once it is durable.

    Raises TransactionRolledBack, having applied nothing, when a check fails; the future fails with
    it when the store transaction does.
    """
    try:
        planned = [p for send in txn.sends for p in on_core.plan_send(broker, send.entity, send.drafts)]
        future = on_core.commit(txn.core_settlements, planned)
    except SodaliteError as exc:
        raise TransactionRolledBack(f"the transaction was rolled back: {exc.description}") from exc
    if future is None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
    result = _rolled_back_unless(future)
    for send in txn.sends:
        broker.metrics.count_in(result, send.entity.name, len(send.drafts))
    for settlement in txn.core_settlements:
        if settlement.removes:
            broker.metrics.count_out(result, settlement.actor, settlement.sub_queue)
    return result


def _rolled_back_unless(future: asyncio.Future[None]) -> asyncio.Future[None]:
    """A future that resolves when ``future`` does, and fails with TransactionRolledBack when it fails."""
    result: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def answer(f: asyncio.Future[None]) -> None:
        if f.cancelled():
            result.set_exception(TransactionRolledBack("the transaction was rolled back: the commit was cancelled"))
        elif (exc := f.exception()) is not None:
            description = exc.description if isinstance(exc, SodaliteError) else str(exc)
            result.set_exception(TransactionRolledBack(f"the transaction was rolled back: {description}"))
        else:
            result.set_result(None)

    future.add_done_callback(answer)
    return result


def transactional_settlement(outcome: object) -> Settlement:
    """The settlement a transactional disposition's outcome asks for, read as the plain disposition path
    reads it (``server/outcomes.py``); a transactional state must carry an outcome."""
    if outcome is None:
        raise NotImplementedOperation("unsupported transactional outcome NoneType")
    return outcomes.settlement_of(outcome)


# ---- the connection's side: coordinator link, hooks for sends and settlements ---------------------------


def _control_body(payload: bytes) -> Any:
    """A coordinator message's amqp-value body, lifted to Declare or Discharge when it is one."""
    try:
        return lift(decode_request(payload).body)
    except ProtocolError as exc:
        raise ArgumentError(f"malformed coordinator message: {exc}") from None


class CoordinatorLink(Endpoint):
    """The endpoint of a link whose target is the Coordinator."""

    __slots__ = ("transactions",)

    def __init__(self, transactions: ConnectionTransactions) -> None:
        self.transactions = transactions

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        self.transactions.on_coordinator_transfer(link, delivery)


class ConnectionTransactions:
    """One connection's transactions on the wire: the coordinator link and the enlisting hooks."""

    def __init__(self, connection: ConnectionPort) -> None:
        self.connection = connection
        self.open = Transactions()

    @property
    def broker(self) -> BrokerPort:
        return self.connection.broker

    def _rejected(self, exc: BaseException, entity: str | None) -> Rejected:
        return Rejected(client_error(exc, self.broker.metrics, self.connection.peer, entity, "rejected"))

    def attach_coordinator(self, link: Link) -> None:
        link.context = CoordinatorLink(self)
        link.auto_credit = COORDINATOR_CREDIT
        link.accept()

    def on_coordinator_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        if delivery.settled:
            log.info("pre-settled coordinator message from %s ignored: it cannot be answered", self.connection.peer)
            return
        delivery_id = delivery.delivery_id
        try:
            body = _control_body(delivery.payload)
            if isinstance(body, Declare):
                if body.global_id is not None:
                    raise NotImplementedOperation("distributed transactions are not supported; declare a local one")
                link.settle(delivery_id, Declared(self.open.declare(self.broker.clock()).txn_id))
                return
            if not isinstance(body, Discharge):
                raise ArgumentError("the coordinator takes Declare and Discharge messages only")
            txn = self.open.discharge(body.txn_id, self.broker.clock())
            if body.fail:
                link.settle(delivery_id, Accepted())  # nothing was applied: dropping it is the rollback
                return
            committed = commit(self.broker, txn)
        except SodaliteError as exc:
            link.settle(delivery_id, self._rejected(exc, None))
            return

        def answer(f: asyncio.Future[None]) -> None:
            if not link.attached:
                return
            exc = f.exception()
            link.settle(delivery_id, Accepted() if exc is None else self._rejected(exc, None))
            self.connection.flush_soon()

        committed.add_done_callback(answer)

    def on_send(self, link: Link, entity: Entity, delivery: ev.Delivery) -> None:
        """A transfer in a transaction: checked and enlisted now, stored and shown at commit."""
        state = delivery.state
        assert isinstance(state, TransactionalState)
        try:
            txn = self.open.get(state.txn_id, self.broker.clock())
            if delivery.oversize:
                raise MessageSizeExceeded(f"the message exceeds the entity limit of {entity.max_message_size} bytes")
            drafts = wire.received_messages(delivery.payload, delivery.message_format, entity.max_message_size)
            drafts = [d for d in drafts if not d.ping]  # a ping is never stored (PING_CONTENT_TYPE)
            if drafts:
                enlist_send(self.broker, txn, entity, drafts)
            else:
                entity.actor.note_activity()
        except SodaliteError as exc:
            if not delivery.settled:
                link.settle(delivery.delivery_id, self._rejected(exc, entity.name))
            return
        if not delivery.settled:
            link.settle(delivery.delivery_id, TransactionalState(txn.txn_id, Accepted()))

    def on_settlement(self, event: ev.DeliveryUpdated, consumer: SettlingConsumer, token: uuid.UUID) -> None:
        """A disposition in a transaction: the message stays locked until the discharge."""
        state = event.state
        assert isinstance(state, TransactionalState)
        try:
            txn = self.open.get(state.txn_id, self.broker.clock())
            self._enlist_core_settlement(txn, consumer, token, transactional_settlement(state.outcome))
        except SodaliteError as exc:
            if not event.settled:
                event.link.settle(event.delivery_id, self._rejected(exc, consumer.actor.ref.entity))
            return
        if not event.settled:
            # Echoed unsettled: the delivery stays open on the link, so after a rollback the client can
            # still settle it there (abandon it, say) while its lock lasts.
            event.link.settle(event.delivery_id, state, settled=False)

    @staticmethod
    def _enlist_core_settlement(txn: Transaction, consumer: SettlingConsumer, token: uuid.UUID,
                                settlement: Settlement) -> None:
        """A settlement: checked now, kept for the commit."""
        actor, sub = on_core.lock_holder(consumer.actor, token)
        if any(s.settle.token == token for s in txn.core_settlements):
            raise InvalidOperation("the message is already settled in this transaction")
        enlisted = on_core.CoreSettlement(actor, sub, on_core.core_settle(token, settlement), settlement.removes)
        on_core.check([*txn.core_settlements, enlisted], txn.core_planned)
        txn.core_settlements.append(enlisted)

    def connection_lost(self) -> None:
        rolled_back = self.open.roll_back_all()
        if rolled_back:
            log.info("connection %s lost: %d open transaction(s) rolled back", self.connection.peer, rolled_back)
