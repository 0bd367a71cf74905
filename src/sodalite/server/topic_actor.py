"""A topic on the partition core: a send's copies for every subscription, stored together.

Rules (docs/partition-core.md, "Topics", "Partitioned topics" and "Forwarding groups across
stores", tells the why):

1. A topic stores nothing of a plain send: the broker plans each message's copies (``plan``: the
   subscriptions' rules and actions, ``model/fanout.py``; forwarding within the hop limit; filter
   errors and copies a session subscription cannot take to its dead-letter queue, numbered by the
   subscription's partition; ``DeadLetterForwarding.copy`` where it forwards its dead letters), and
   the topic's core stores them as ONE ``Publish`` batch with its duplicate history. The send is
   acknowledged when that batch committed; only then are the subscriptions' cores told the rows
   ``Landed``. A message no subscription takes is acknowledged and goes nowhere.
2. A scheduled message (``ScheduleMessage`` on the topic) waits in the topic's own partition. When
   due, the topic's core hands it to this actor's activator (a PeekLock receiver that never
   leaves); its copies are planned then, by the rules as they are at that moment, and published with
   the topic's lock completed in the same batch: once or not at all (a lapsed lock hands it out
   again: at least once, never lost). A send with ScheduledEnqueueTimeUtc is a plain send whose
   copies wait, scheduled, in each subscription.
3. Copies in other messaging stores cannot share the topic's transaction: every store involved is
   checked available first (nothing stored, the retryable server-busy at once), each other store's
   copies are stored by one batch of that store (``core_copies.store_copies``), and the topic's own
   batch commits last: nothing acknowledged is lost; a failure between the steps may store another
   store's copies twice when the client retries. With duplicate detection such publishes go one at
   a time per topic (partition), each checked against the history the one before committed
   (``DuplicateDetector.unseen``).
4. A partitioned topic (:class:`PartitionedTopicActor`) is one ``TopicActor`` per partition behind
   the partitioned queue's routing; partition i publishes into partition i of every subscription.
   A send over several partitions has every share planned and checked before any is submitted.
5. A move into the topic from a queue in its store enters the topic's own partition and fans out as
   a scheduled message that came due; any other move keeps nothing in the topic: its copies are
   planned as a send's (no duplicate detection) and stored under the message's move key by one
   batch of each store (``store_moved``, ``move_keys.store_keyed_copies``).
6. A transaction's send to the topic is planned the same way and stored by the core that commits
   the transaction (``core_transactions``); one whose copies land in another store is refused.
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
from sodalite.model.routing import without_pings
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
        planned = self._planned(without_pings(drafts)[0])  # a ping is accepted, never stored
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
