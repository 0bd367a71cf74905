"""AMQP transactions on the entities' partition cores.

Theory of operation. The connection's side is ``server/transactions.py`` (declare, enlist, discharge,
roll back); this module is what it calls to plan, check and commit a transaction on the partition
cores. Decisions are the core's (``model/partition_core/``, ``Transact``).

* Enlisting a settlement finds the partition core holding the lock (:func:`lock_holder`) and checks
  the lock is live; the message stays locked. Enlisting a send plans it (:func:`plan_send`) as a
  send would be checked and stored (the entity, its ForwardTo route, a partitioned queue's partition,
  a topic's copies for its subscriptions as ``TopicActor.plan`` makes them, the hop limit's transfer
  dead-letter queue) and stores nothing. Both check at once what can be known then
  (:func:`check`), so a refusal is immediate and the transaction stays usable.
* The commit is decided by ONE core, the transaction's *home*: the core of the partition (sub-queue)
  whose locks it settles, or, settling none, the partition its first send is addressed to. The sends
  are planned again (the routes and rules as they are now) and handed to that core as one
  ``Transact``: it checks every lock is still usable (else nothing happens: the discharge fails with
  TransactionRolledBack), applies its own duplicate detection to the sends addressed to it, and
  emits the settlements and every copy (``AppendTo``, its own partition included) as one batch of
  its store. The discharge is accepted once that batch committed; then every target core is told
  its rows landed, in one event-loop step, so receivers and peeks see all of it at once. A failed
  batch stores nothing and leaves the locks held.

What the core cannot do here is refused with NotImplementedOperation (``amqp:not-implemented``), never
faked: settlements of locks held by two different partition cores (two queues, two partitions of a
partitioned queue, a queue and its dead-letter queue) in one transaction, and sends to an entity
with duplicate detection other than the home (whose history lives in another core). A transaction
spans one messaging store (InvalidOperation).

Several nodes on one PostgreSQL database: the settlements are fenced by the store at the time the
home core decided; on one node nothing else takes those locks before the batch applies, but another
node may claim a message whose lock lapsed meanwhile. The core's ``Settle`` is therefore
all-or-none: the store checks every lock before it commits and otherwise rolls the whole batch back
(``SettleFenced``), so the copies are stored exactly when every settlement applied; the discharge
then fails with TransactionRolledBack (the lock lost), as when the lock had lapsed before it. The
home's duplicate detection is then the store's (the ids taken in the same batch), as for a send.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    EntityNotFound,
    InvalidOperation,
    MessageLockLost,
    NotImplementedOperation,
)
from sodalite.model import partition_core as core
from sodalite.model.copies import lock_usable
from sodalite.model.partition import MessageDraft
from sodalite.model.routing import hop_limit_dead_letter
from sodalite.model.settlement import Settlement, Verb
from sodalite.model.store_ops import Outcome
from sodalite.server import wire
from sodalite.server.core_actor import Copy, CoreActor
from sodalite.server.core_requests import Done
from sodalite.server.entity_settings import SubQueue
from sodalite.server.partitioned_actor import EntityActor, PartitionedCoreActor, each
from sodalite.server.registry import TOPIC, Entity, Route
from sodalite.server.topic_actor import TopicActor

if TYPE_CHECKING:
    import asyncio

class Routes(Protocol):
    """What planning asks of the broker."""

    def entity(self, path: str) -> Entity | None: ...

    def route(self, entity: Entity) -> Route: ...


Home = tuple[CoreActor, SubQueue]
"""The partition core (an entity's partition actor and one of its sub-queues) that decides a commit."""

_OUTCOMES = {Verb.COMPLETE: Outcome.COMPLETE, Verb.ABANDON: Outcome.ABANDON, Verb.DEFER: Outcome.DEFER,
             Verb.DEAD_LETTER: Outcome.DEAD_LETTER, Verb.RELEASE: Outcome.RELEASE}


@dataclass(frozen=True, slots=True)
class CoreSettlement:
    """An enlisted settlement: the lock's partition core and the settlement it commits."""

    actor: CoreActor
    sub_queue: SubQueue
    settle: core.Settle
    removes: bool  # complete or dead-letter: counted as a message out once committed


@dataclass(frozen=True, slots=True)
class PlannedSend:
    """One message a transaction sends, planned: its copies (unnumbered), the partition it is
    addressed to, and the entity whose duplicate detection applies to its MessageId (or None)."""

    message_id: str | None
    copies: tuple[Copy, ...]
    addressed: Home
    deduplicated_by: CoreActor | None


def core_settle(token: uuid.UUID, settlement: Settlement) -> core.Settle:
    """The core's settlement for what a transactional disposition asked."""
    props = tuple((str(k), v) for k, v in (settlement.properties_to_modify or {}).items())
    return core.Settle(token, _OUTCOMES[settlement.verb], None, props, settlement.dead_letter_reason,
                       settlement.dead_letter_description)


def lock_holder(actor: EntityActor, token: uuid.UUID) -> Home:
    """The partition core holding ``token`` among those behind a receiver's actor, the lock live now
    (``model.copies.lock_usable``; the core checks again when the transaction commits)."""
    for partition in each(actor):
        sub = partition.holders.get(token) if isinstance(partition, CoreActor) else None
        if sub is None:
            continue
        runner = partition.runners.get(sub)
        if runner is None or not lock_usable(runner.view.locks.held.get(token), partition.clock.now()):
            break
        partition._runner(sub)  # StoreUnavailable while the store is offline
        return partition, sub
    raise MessageLockLost(LOCK_SUPPLIED_INVALID)


def check_send(actor: CoreActor, drafts: Sequence[MessageDraft], stored_here: bool = True) -> None:
    """What a send to ``actor`` checks before it is accepted, for messages a transaction stores at its
    commit (``stored_here`` False: a topic's, or a transfer dead letter's, availability and room only)."""
    actor._runner(SubQueue.MAIN)
    if not stored_here:
        actor._check_send([])
        return
    if actor.settings.requires_session and any(d.session_id is None for d in drafts):
        raise InvalidOperation("the entity requires sessions: every message needs a SessionId")
    actor._check_send(drafts)


def _partition(actor: EntityActor, draft: MessageDraft) -> CoreActor:
    if isinstance(actor, PartitionedCoreActor):
        return actor.route([draft])[0][0]
    return actor


def plan_send(broker: Routes, entity: Entity, drafts: Sequence[MessageDraft]) -> list[PlannedSend]:
    """Route and check a transactional send as a send would be, storing nothing: per draft, its copies."""
    if broker.entity(entity.name) is not entity:
        raise EntityNotFound(f"the messaging entity '{entity.name}' was deleted")
    route = broker.route(entity)
    destination = route.entity
    planned: list[PlannedSend] = []
    for draft in drafts:
        part = _partition(destination.actor, draft)
        now = part.clock.now()
        limit = hop_limit_dead_letter(route.hops, route.exceeded)
        if limit is not None:
            check_send(part, [draft], stored_here=False)
            dead = wire.dead_lettered(core.record_for(draft, now, None), *limit)
            planned.append(PlannedSend(draft.message_id, ((part, SubQueue.TRANSFER_DEAD_LETTER, dead),),
                                       (part, SubQueue.MAIN), None))
        elif destination.kind == TOPIC:
            if not isinstance(part, TopicActor) or part.plan is None:
                raise NotImplementedOperation(f"a transaction cannot send to the topic '{destination.name}' yet")
            check_send(part, [draft], stored_here=False)
            [copies] = part.plan([draft], now)
            for target, _, _ in copies:
                check_send(target, [], stored_here=False)
            planned.append(PlannedSend(draft.message_id, tuple(copies), (part, SubQueue.MAIN), _deduplicating(part)))
        else:
            check_send(part, [draft])
            record = core.record_for(draft, now, part.settings.default_ttl)
            planned.append(PlannedSend(draft.message_id, ((part, SubQueue.MAIN, record),), (part, SubQueue.MAIN),
                                       _deduplicating(part)))
    return planned


def _deduplicating(actor: CoreActor) -> CoreActor | None:
    return actor if actor.settings.duplicate_detection_window is not None else None


def home_of(settlements: Sequence[CoreSettlement], planned: Sequence[PlannedSend]) -> Home | None:
    """The core that decides the commit: the settled locks' partition, else the first send's."""
    if settlements:
        return settlements[0].actor, settlements[0].sub_queue
    if planned:
        return planned[0].addressed
    return None


def check(settlements: Sequence[CoreSettlement], planned: Sequence[PlannedSend]) -> Home | None:
    """What the home core can commit as one batch: its own locks, its own duplicate detection, its
    own store (see the module docstring); returns the home."""
    home = home_of(settlements, planned)
    if home is None:
        return None
    actor, sub = home
    for settlement in settlements:
        if settlement.actor is not actor or settlement.sub_queue is not sub:
            raise NotImplementedOperation(
                "a transaction settles messages of one queue, subscription or partition "
                "only (of one sub-queue, too): settling messages held by two of them is not available yet")
    for send in planned:
        if send.deduplicated_by is not None and (send.deduplicated_by is not actor or sub is not SubQueue.MAIN):
            raise NotImplementedOperation(
                f"a transaction sends to '{send.deduplicated_by.ref.entity}', which detects "
                "duplicates, only when that is the entity (and partition) whose messages it settles, or its first "
                "send's: not available yet otherwise")
        for target, _, _ in send.copies:
            if target.worker is not actor.worker:
                raise InvalidOperation("a transaction cannot span messaging stores")
    return home


def commit(settlements: Sequence[CoreSettlement], planned: Sequence[PlannedSend]) -> asyncio.Future[None] | None:
    """Hand the transaction to its home core as one ``Transact``; the future resolves once it is
    durable (fails with the core's refusal: a lock lost, the store busy). None: nothing to commit."""
    home = check(settlements, planned)
    if home is None:
        return None
    actor, sub = home
    settles = tuple(s.settle for s in settlements)
    entries = actor.landing.entries([(send.message_id, send.copies) for send in planned])
    deduplicate = tuple(send.deduplicated_by is actor and sub is SubQueue.MAIN for send in planned)
    done = Done()
    actor._ask(sub, done, core.Transact(settles, entries, done, deduplicate))

    def settled(f: asyncio.Future[None]) -> None:
        if not f.cancelled() and f.exception() is None:
            for settle in settles:
                actor.holders.pop(settle.token, None)

    done.add_done_callback(settled)
    return done

