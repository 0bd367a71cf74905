"""A topic on the partition core (``sodalite serve --core v2``): a send's copies for every
subscription in one store transaction.

Theory of operation. A topic stores nothing of a plain send: the message's copies go to its
subscriptions, each a queue on the core (:class:`~sodalite.server.core_actor.CoreActor`) kept in
the topic's messaging store. The broker plans the copies (``plan``: each subscription's rules and
actions, filter errors to the subscription's dead-letter queue, copies a session-enabled
subscription cannot take likewise, numbered by the subscription's partition as on version 1, so they
never meet the numbers its dead-lettered messages keep; ``server/fanout.py``), and this actor hands them to the topic's
own core as one :class:`~sodalite.model.partition_core.Publish`: the core applies the topic's
duplicate detection and emits one batch holding every copy (``AppendTo`` each subscription's
partition) and the duplicate history. The send is acknowledged when that batch committed
(:class:`~sodalite.model.partition_core.Published`); only then is each subscription's core told
that rows landed in it (:class:`~sodalite.model.partition_core.Landed`), so a receiver waiting
there gets them at once. A message no subscription takes is acknowledged and goes nowhere, as in
Service Bus.

Scheduled messages (``ScheduleMessage`` on the topic) are the exception: they wait in the topic's
own partition (the inherited queue path: numbers returned, cancel by number, the topic's
duplicate detection) until their time. When one comes due the topic's core hands it to this
actor's activator, a PeekLock receiver that never leaves; the copies are planned then, with the
rules as they are at that moment, and published with the topic's lock completed in the same batch
(``Publish(complete=token)``), so a crash publishes it once or not at all (the lock lapses and it
is handed out again). Should the topic's lock lapse while that batch waits (a store stalled for the
whole lock duration), the completion is refused but the copies in the same batch are still stored,
and the message is published again when it is handed out anew: at least once, never lost.

A message sent with a ScheduledEnqueueTimeUtc annotation is a plain send: its copies wait,
scheduled, in each subscription.

A subscription that forwards (ForwardTo) has its copies planned into where its chain of ForwardTo
leads: a queue, or another topic's subscriptions, each on the core, within the hop limit (beyond
it, into the transfer dead-letter queue where it was reached); those in the topic's store in the
same batch. A partitioned entity reached from a non-partitioned topic takes each copy in the
partition the copy's key picks, as a send's routing picks it (keyless ones round-robin).

Copies in other messaging stores (a forwarding target whose home is another store; from a
partitioned topic's partition i, a non-partitioned target outside store i; from a non-partitioned
topic, the partition of a partitioned target its key picks) cannot be in the topic's transaction.
They are stored FIRST, by one batch of each other store (``core_copies.store_copies`` on a target
there: a ``Publish`` without MessageIds), and only once all of those committed does the topic's own
batch commit: its own copies, its duplicate history and, for a scheduled message that came due, its
completion. The send is acknowledged after that last commit. Every store involved is checked
available first, so a known outage (a store switched offline, a partition suspended) fails the
send at once with the retryable store error (``com.microsoft:server-busy``) and stores nothing; a
batch that fails in another store fails the send the same way (noted in ``failed_elsewhere``, so it
does not suspend the topic's own partitions). The at-least-once window: when another store's batch
committed and then the topic's batch fails or the broker dies before it commits, the send was not
acknowledged, the client sends again, and the other store's copies are stored twice (those in the
topic's store once); with a scheduled message whose lock lapsed meanwhile, it is published again
when handed out anew, likewise. Nothing acknowledged is lost, since the topic's commit (and with it
the acknowledgement, the duplicate history and a due message's completion) comes last. With
duplicate detection such publishes go one at a time per topic (partition), each checked against
the history the one before committed, so a resend within the window stores no copy in another store
either; on a store several nodes share, a resend through another node is caught only by the store at
the topic's commit, and its copies in other stores are then stored again.

A partitioned topic (EnablePartitioning) is :class:`PartitionedTopicActor`: a ``TopicActor`` per
partition behind the routing of ``PartitionedCoreActor``, each subscription a ``PartitionedCoreActor``
of as many ``CoreActor`` partitions, partition i of each in messaging store i mod the stores. A send
is pinned to a topic partition as a partitioned queue's (SessionId, else PartitionKey, else MessageId
under duplicate detection; keyless ones round-robin over the available partitions) and that
partition's core publishes it as above, its copies into partition i of each subscription (and of a
partitioned entity a subscription forwards into): one transaction of that partition's store, after
the batches of other stores for a non-partitioned entity a subscription forwards into that lives
elsewhere. A send whose messages go to several partitions has every share planned and checked
(``TopicActor.prepare``) before any is submitted, so it is never half taken because some store is
out. Duplicate detection and scheduled messages are each partition's own; a store that fails a
publish suspends the topic's partitions in it, as a partitioned queue's.

A transactional send to the topic (``server/core_transactions.py``) is planned the same way and its
copies stored by the core that commits the transaction, in that one batch.

A subscription that forwards its dead letters (ForwardDeadLetteredMessagesTo) has a copy that fails
its filter planned into that target (``CoreActor.dead_letter_copy``), in the same batch.

Moves into the topic (server/moves.py). From a queue on the core in the topic's store, the
messages enter the topic's own partition, ACTIVE, in that queue's transaction; the activator takes
them like scheduled messages that came due, so each fans out to the subscriptions with the rules as
they are then, its copies and its completion in one batch. A move that is not one transaction (from
another store; into a partitioned topic from anywhere) keeps nothing in the topic: ``store_moved``
plans each message's copies as a send's (``plan_moved``: the same plan and the same checks of every
store they go to; no duplicate detection, a move is not a send; a partitioned topic routes each
message to a partition first, as a send is pinned) and ``store_keyed_copies`` stores them by one
batch of each store, as the copies of a send in other stores are (``move_keys.store_keyed``): every
partition keeps the message's move key beside its copies and skips a key it already has, so a repeat
after the source's delete failed stores nothing twice. The mover forgets the keys once the source
copies are gone.

Not on the core yet: a transaction's send whose copies land in another store is refused
(``core_transactions.check``: one store per transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
import weakref
from collections.abc import Callable, Sequence

from sodalite.errors import SodaliteError, StoreUnavailable
from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock, MessageDraft
from sodalite.server import wire
from sodalite.server.core_actor import Copy, CoreActor, KeyedCopy, Receiver
from sodalite.server.core_copies import store_copies
from sodalite.server.entity_settings import EntitySettings, SubQueue, all_of
from sodalite.server.move_keys import MovedKeys, store_keyed_copies
from sodalite.server.partition_runner import Clock
from sodalite.server.partitioned_actor import PartitionedCoreActor
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef

log = logging.getLogger(__name__)

ACTIVATION_CREDIT = 64  # due scheduled messages the activator takes at a time

Plan = Callable[[Sequence[MessageDraft], int], list[list[Copy]]]
"""The broker's plan: per draft, in order, its copies (rules applied) at ``now``."""


class _Activator:
    """The topic's own receiver: scheduled messages that came due, to be published."""

    sub_queue = SubQueue.MAIN
    peek_lock = True
    session_id = None

    def __init__(self, topic: TopicActor) -> None:
        self._topic = topic

    def credit(self) -> int:
        return ACTIVATION_CREDIT

    def drain_requested(self) -> bool:
        return False

    def deliver(self, message: MessageRecord, lock: Lock | None) -> None:
        self._topic._activated(message, lock)

    def drained(self) -> None:
        pass  # never asked to drain

    def session_lost(self) -> None:
        pass


class TopicActor(CoreActor):
    """A non-partitioned topic on the core (see the module docstring)."""

    plan: Plan | None = None  # set by the broker once the topic's entity exists
    drops_locks_on_update = False  # its locks are its activator's (scheduled messages coming due), no receiver's

    def __init__(self, ref: PartitionRef, settings: EntitySettings, worker: StoreWorker,
                 clock: Clock | None = None, node_id: str = "node") -> None:
        super().__init__(ref, settings, worker, clock, node_id)
        self._activator = _Activator(self)
        self._activating = False
        self._across_lock = asyncio.Lock()  # duplicate detection: publishes with copies elsewhere, one at a time
        # Publishes that failed because another store did (not this one): weakly held, read by _sent.
        self.failed_elsewhere: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()

    def _own_consumer(self, consumer: Receiver) -> bool:
        return consumer is self._activator  # its credit is no client's use of the topic

    async def load(self) -> None:
        await super().load()
        if self._activating and self._activator not in self.credit.receivers:
            self.add_consumer(self._activator)

    def start_activation(self) -> None:
        """Publish scheduled messages as they come due, from now on. The broker calls it once the
        topic's subscriptions are loaded: a message published before would reach none of them."""
        self._activating = True
        if self.runners and self._activator not in self.credit.receivers:
            self.add_consumer(self._activator)

    # ---- sending ----------------------------------------------------------------------------------

    def publish(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to the topic: acknowledged once every subscription's copies are durable."""
        return self.prepare(drafts)()

    def prepare(self, drafts: list[MessageDraft]) -> Callable[[], asyncio.Future[None]]:
        """Plan and check a send (every store its copies go to available, with room) without storing
        anything; what it returns submits it. A partitioned topic prepares every partition's share of
        a send before it submits any, so a send is never half taken."""
        self._check_send(drafts)
        planned = self._planned([d for d in drafts if not d.ping])  # a ping is accepted, never stored
        self._runner(SubQueue.MAIN)
        if self._elsewhere(planned):
            self._split(planned)  # StoreUnavailable / StoreFull now, before anything is stored
            return lambda: asyncio.ensure_future(self._across(planned, None))
        entries = self.landing.entries(planned)
        return lambda: self.submit_publish(entries)

    def _planned(self, drafts: Sequence[MessageDraft]) -> list[tuple[str | None, list[Copy]]]:
        """Per draft, its MessageId and its copies as the broker plans them now."""
        if not drafts:
            return []
        if self.plan is None:
            raise RuntimeError(f"topic {self.ref.entity}: no fan-out plan (the broker sets it when it loads the topic)")
        planned = self.plan(drafts, self.clock.now())
        return [(d.message_id, copies) for d, copies in zip(drafts, planned, strict=True)]

    def _entries(self, drafts: Sequence[MessageDraft]) -> tuple[core.PublishEntry, ...]:
        return self.landing.entries(self._planned(drafts))

    # ---- copies in other messaging stores ---------------------------------------------------------

    def _elsewhere(self, planned: Sequence[tuple[str | None, Sequence[Copy]]]) -> bool:
        return any(actor.worker is not self.worker for _, copies in planned for actor, _, _ in copies)

    def _publish_across(self, planned: list[tuple[str | None, list[Copy]]],
                        complete: uuid.UUID | None = None) -> asyncio.Future[None]:
        """A publish some of whose copies live in other stores (module docstring, "Copies in other
        messaging stores"): every store involved is checked available first (the retryable store
        error at once, nothing stored), then each other store's copies are stored by one batch of
        that store, then the topic's own batch (its copies, duplicate history, a due message's
        completion) commits; the future resolves after it."""
        self._runner(SubQueue.MAIN)
        self._split(planned)  # StoreUnavailable / StoreFull now, before anything is stored
        return asyncio.ensure_future(self._across(planned, complete))

    def _split(self, planned: Sequence[tuple[str | None, Sequence[Copy]]]
               ) -> tuple[list[tuple[str | None, list[Copy]]], dict[StoreWorker, list[Copy]]]:
        """The copies this store's batch takes (per entry, with its MessageId) and those of each other
        store, every destination checked available and with room for new messages."""
        here: list[tuple[str | None, list[Copy]]] = []
        elsewhere: dict[StoreWorker, list[Copy]] = {}
        for message_id, copies in planned:
            own: list[Copy] = []
            for copy in copies:
                actor, sub, _ = copy
                if actor.worker is self.worker:
                    own.append(copy)
                    continue
                actor._runner(sub)  # StoreUnavailable while its store (or partition) is out
                actor._check_send([])  # StoreFull
                elsewhere.setdefault(actor.worker, []).append(copy)
            here.append((message_id, own))
        return here, elsewhere

    async def _across(self, planned: list[tuple[str | None, list[Copy]]], complete: uuid.UUID | None) -> None:
        # The other stores' batches and the topic's own are one cross-store operation for a backup
        # (server/backup.py): it finds the send's copies everywhere or nowhere.
        async with self.worker.gate.spanning():
            await self._across_now(planned, complete)

    async def _across_now(self, planned: list[tuple[str | None, list[Copy]]], complete: uuid.UUID | None) -> None:
        deduplicating = complete is None and self.settings.duplicate_detection_window is not None
        # With duplicate detection, sends with copies elsewhere go one at a time, each checked against
        # the history the one before committed: a resend stores no copy in another store either.
        async with self._across_lock if deduplicating else contextlib.nullcontext():
            if deduplicating:
                planned = self._not_duplicates(planned)
            try:
                here, elsewhere = self._split(planned)
                await all_of([store_copies(copies[0][0], copies) for copies in elsewhere.values()])
            except StoreUnavailable:
                # Not the topic's store: its partitions stay in service (PartitionedTopicActor._sent).
                task = asyncio.current_task()
                if task is not None:
                    self.failed_elsewhere.add(task)
                raise
            await self.submit_publish(self.landing.entries(here), complete)

    def _not_duplicates(self, planned: list[tuple[str | None, list[Copy]]]) -> list[tuple[str | None, list[Copy]]]:
        """The entries whose MessageId the topic's duplicate detection has not seen within its window
        (nor earlier in this send): the core decides again at its commit, this only spares the other
        stores' copies of a resend."""
        runner = self.runners.get(SubQueue.MAIN)
        dedup = runner.view.dedup.detector if runner is not None else None
        if dedup is None:
            return planned
        keep = dedup.unseen((message_id for message_id, _ in planned), self.clock.now())
        return [entry for entry, kept in zip(planned, keep, strict=True) if kept]

    # ---- moves into the topic from another transaction (server/moves.py) ---------------------------

    def plan_moved(self, drafts: Sequence[MessageDraft], keys: Sequence[str]) -> list[KeyedCopy]:
        """A move's messages as this topic's copies, planned as a send's (the rules and actions as they
        are now, forwarding, filter dead letters; no duplicate detection: a move is not a send), each
        copy under its message's move key; every store they go to checked available and with room, as
        for a send, before anything is stored."""
        self._runner(SubQueue.MAIN)
        self._check_send([])
        planned = self._planned(drafts)
        self._split(planned)  # StoreUnavailable / StoreFull now, for the copies in other stores
        return [(copy, key) for (_, copies), key in zip(planned, keys, strict=True) for copy in copies]

    async def store_moved(self, drafts: Sequence[MessageDraft], keys: Sequence[str]) -> list[MovedKeys]:
        """Store a move's messages in the subscriptions (module docstring, "Moves into the topic"):
        one keyed batch of each store the copies go to; returns where each store keeps their keys."""
        return await store_keyed_copies(self.plan_moved(drafts, keys))

    # ---- scheduled messages that came due ---------------------------------------------------------

    def _activated(self, message: MessageRecord, lock: Lock | None) -> None:
        self.credit_changed(self._activator)  # the activator takes the next one too
        if lock is None:  # the activator receives in PeekLock: never without a lock
            return
        token = lock.token
        try:
            planned = self._planned([wire.forwarded_draft(message)])
            if self._elsewhere(planned):
                future = self._publish_across(planned, complete=token)
            else:
                future = self.submit_publish(self.landing.entries(planned), token)
        except SodaliteError as exc:  # a store its copies go to is out (another store's, too): expected
            log.warning("topic %s: scheduled message %d not published (%s); it comes back when its lock "
                        "lapses", self.ref.entity, message.sequence_number, exc)
            return
        except Exception:
            log.exception("topic %s: publishing scheduled message %d failed; it comes back when its lock "
                          "lapses", self.ref.entity, message.sequence_number)
            return

        def done(f: asyncio.Future[None]) -> None:
            self.holders.pop(token, None)
            if not f.cancelled() and f.exception() is not None:
                log.warning("topic %s: scheduled message %d not published (%s); it comes back when its lock "
                            "lapses", self.ref.entity, message.sequence_number, f.exception())

        future.add_done_callback(done)

    # ---- what the broker reads --------------------------------------------------------------------

    def activity(self) -> tuple[int, int]:
        last, _ = super().activity()
        return last, sum(1 for c in self.credit.receivers if c is not self._activator)

    def is_idle(self, now: int, idle_for: int) -> bool:
        """Idle as a queue is, the activator aside (it is the topic's own, not a receiver)."""
        runner = self.runners.get(SubQueue.MAIN)
        if runner is None or any(c is not self._activator for c in self.credit.receivers):
            return False
        last = max(self.last_activity, runner.view.last_activity)
        return now - last >= idle_for and runner.view.counts.scheduled == 0


class PartitionedTopicActor(PartitionedCoreActor):
    """A partitioned topic on the core: one :class:`TopicActor` per partition (module docstring)."""

    def __init__(self, partitions: Sequence[TopicActor]) -> None:
        super().__init__(partitions)
        self.topics: list[TopicActor] = list(partitions)

    def publish(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """A send to the topic: each message to the partition its key pins it to (keyless ones of a
        send together), acknowledged once every partition's copies are durable."""
        prepared = []
        for partition, indexes in self.route(drafts):
            assert isinstance(partition, TopicActor)
            prepared.append((partition, partition.prepare([drafts[i] for i in indexes])))
        futures = []
        for partition, submit in prepared:  # every share checked before any is submitted
            future = submit()
            future.add_done_callback(functools.partial(self._sent, partition))
            futures.append(future)
        return all_of(futures)

    def _sent(self, partition: CoreActor, future: asyncio.Future[None]) -> None:
        if isinstance(partition, TopicActor) and future in partition.failed_elsewhere:
            return  # another store failed, not this partition's
        super()._sent(partition, future)

    async def store_moved(self, drafts: Sequence[MessageDraft], keys: Sequence[str]) -> list[MovedKeys]:
        """Store a move's messages in the subscriptions: each message planned by the topic partition its
        key picks (keyless ones round robin), as a send is pinned, into that partition of every
        subscription; every partition's share planned and checked before any is stored, then one
        keyed batch of each store."""
        copies: list[KeyedCopy] = []
        for partition, indexes in self.route(list(drafts)):
            assert isinstance(partition, TopicActor)
            copies += partition.plan_moved([drafts[i] for i in indexes], [keys[i] for i in indexes])
        return await store_keyed_copies(copies)

    def start_activation(self) -> None:
        for topic in self.topics:
            topic.start_activation()
