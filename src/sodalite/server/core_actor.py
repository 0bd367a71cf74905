"""A queue run on the partition core and the store port v2 (``sodalite serve --core v2``).

Theory of operation (storage-and-scale.md sections 1-3). The store holds every message and every
lock; the pure core (``model/partition_core/``) decides; one :class:`PartitionRunner` per
sub-queue (the queue, its dead-letter queue, its transfer dead-letter queue) carries out the core's
store batches in order on the store's worker thread, group-committing batches queued back to back,
and arms the core's timers. This class is only the adapter between the broker's endpoints and the
runners: it turns calls from links and ``$management`` into core commands, keyed by a request
number, and the core's replies back into the futures and deliveries the endpoints wait for. A reply
that says something happened comes only after its batch committed (the core's rule), so a send is
acknowledged, a settlement echoed and a renewal answered once it is durable.

Credit: a receiver link's credit is handed to the core as ``Receive`` commands (the difference
between the link's credit and what the core was given). A delivery the link can no longer take (its
credit was lowered, or it detached) is released back at once, which gives the delivery count back;
a ReceiveAndDelete one (deleted already) is put back in place (``core.Unsent``, :meth:`unsent`), as
are those the link took but whose transfers were never written (``links.LinkConsumer``).
A drain is answered once the runner's effects are done: whatever was ready was delivered by then.

Moves between sub-queues (dead-lettering) are one store transaction of the source runner; the
runner reports them (``on_moved``) and the target runner is told ``Arrived``, so it reads them.
Resubmits, moves and purges (``server/moves.py``) select rows from the store (:meth:`peek`,
:meth:`fetch`: never from memory) and hand them to the source sub-queue's core as ``MoveOut``
(:meth:`move_out`), one fenced ``MoveMessages`` into a queue, subscription or topic on the core in
the same store, or a delete; after it committed the target is told ``Arrived`` (:meth:`arrived`).
A move that cannot be one transaction (from another store, or into a partitioned entity) appends here
under move keys first (:meth:`append_moved`, outside the core, which is told ``Arrived``); the keys
are forgotten once the source copies are gone (:meth:`forget_move_keys`). Such a move into a topic
stores the copies a topic plans for it, with their keys, by one transaction of each store
(:meth:`store_keyed`, made by an actor there, as :meth:`store_copies` is for a send's copies).

Several nodes (a store other nodes write, ``StoreWorker.shared``: PostgreSQL): rows another node
appended are not in this node's window. Each sub-queue watches its partition on the store worker:
when another node commits messages made ready there (announced by the store's change feed,
LISTEN/NOTIFY), its core is told ``Arrived(0)`` and reads the store again. What no announcement
covers (a lock held by a dead node lapsing) is found by a poll: while a receiver here waits with
credit, the core is told ``Arrived(0)`` every ``worker.poll_seconds`` (fast without a live feed,
slow with one). Messages another node scheduled are announced with their time, and the store
worker reads every watched partition's ``next_due`` every ``worker.due_seconds`` besides, in one
read (the scheduling node may have died unannounced): the core is told ``DueInStore`` and activates
what is due then (fenced by the store).
Claims and session locks are fenced by the store (``FOR UPDATE SKIP LOCKED``), so
two nodes never lock the same message or session. The counts management reads (:meth:`counts`,
:meth:`size_in_bytes`) are the cores' views, which see only this node's batches: the store worker
reads every watched partition's counters back in one read every ``SHARED_COUNTS_SECONDS``
(store_worker.py) and, where they differ from a core's, the core reads them again in order among its
batches (``RefreshCounts``), so they follow other nodes' sends and settlements too. Duplicate detection is the store's
(``CoreSettings.shared_store``: the batch that appends claims the MessageIds).

Copies into other entities (``Publish``): a topic's send, and a send whose forwarding ended here at
the hop limit (:meth:`send_to_transfer_dead_letter`), are stored by this entity's core in one batch
of ``AppendTo`` ops; once it committed each destination's core is told the rows landed
(:meth:`land`). A topic's copies for another store are stored, before the topic's own batch, by a
target's core there (:meth:`store_copies`, ``server/topic_actor.py``). A queue's ForwardTo needs
nothing here: the broker routes each send when it arrives.

An update of the entity's properties (:meth:`update_settings`, here or, on a shared store, through
another node) is ``UpdateSettings`` to every sub-queue's core: the locks it granted end (released in
the store in one fenced batch; a topic keeps its activator's), and their tokens are forgotten here
when ``SettingsUpdated`` answers. The cores' clock is the broker's (``Broker(clock=...)``, the wall
clock by default), so idleness and every timer follow one time.

AMQP transactions (``server/core_transactions.py``): the core holding a transaction's locks (or
its first send's partition) commits it as one ``Transact`` (:meth:`transact`): the settlements and
every copy the transaction sends in one batch; once it committed the copies land as a ``Publish``'s do.

ForwardDeadLetteredMessagesTo (:meth:`forward_dead_letters`, resolved by the broker): the main
queue's core dead-letters into the target queue's partition (same store) instead of its own
dead-letter queue, in the same fenced settle or move; the runner reports the move (``on_moved``)
and the target's core is told ``Arrived``. A target in another store (:meth:`relay_dead_letters`):
the core forwards into this entity's own dead-letter queue, each copy marked with its
``x-opt-deadletter-source``, and ``on_dead_letters`` tells the broker's relay
(``server/dead_letter_relay.py``), which appends them to the target under move keys
(:meth:`append_keyed`) and then removes them here.

The broker runs queues on it, a partitioned queue as one CoreActor per partition
(``server/partitioned_actor.py``, which splits a receiver's credit over them with ``ready``,
``given``, ``withdraw_credit`` and ``caught_up``), and topics (``server/topic_actor.py``): every
entity runs on it. What a core cannot do at runtime is answered with ``amqp:not-implemented``
rather than faked.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar, cast

from sodalite.amqp.types import AmqpValue
from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    OperationTimeout,
    QuotaExceeded,
    SessionCannotBeLocked,
    SessionLockLost,
    SodaliteError,
    StoreFull,
    StoreUnavailable,
)
from sodalite.model import partition_core as core
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MAX_TRANSFER_HOP_COUNT_EXCEEDED, Lock, MessageDraft
from sodalite.model.quotas import entity_full
from sodalite.model.store_ops import MoveItem, Outcome, StoredMessage
from sodalite.server import delivery_trace, wire
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partition_runner import Clock, LoopClock, PartitionRunner
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import (
    Append,
    ForgetMoveKeys,
    PartitionCounts,
    PartitionRef,
    RememberMoveKeys,
    numbering_base,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# The annotations a client asks abandon or defer to set (``modified.message-annotations``, or
# ``properties-to-modify`` in update-disposition), as decoded.
AnnotationEdits = Mapping[AmqpValue, AmqpValue]

ALL_STATES = frozenset(MessageState)
_ACTIVE_ONLY = frozenset({MessageState.ACTIVE})  # list-sessions: the sessions with active messages
Taken = tuple[MessageRecord, uuid.UUID | None, int | None]  # a message received by number: record, lock token, until
Copy = tuple["CoreActor", SubQueue, MessageRecord]
"""A message to store in a sub-queue of an entity on the core (a topic's copy, a transfer dead letter), unnumbered."""
KeyedCopy = tuple[Copy, str]
"""A copy a move stores, with its move key (``CoreActor.store_keyed``, server/moves.py)."""


def core_settings(settings: EntitySettings, sub: SubQueue, owner: str,
                  forward: core.DeadLetterForward | None = None, shared: bool = False) -> core.CoreSettings:
    """The core's settings for one sub-queue of an entity. A dead-letter queue observes no
    time-to-live, never dead-letters and keeps no duplicate history (Service Bus DLQ overview).
    ``forward`` (ForwardDeadLetteredMessagesTo) applies to the entity's own queue only. ``shared``:
    other nodes write the store, which then decides duplicates."""
    if sub is not SubQueue.MAIN:
        return core.CoreSettings(lock_duration=settings.lock_duration, default_ttl=None,
                                 max_delivery_count=1 << 30, dead_letter_on_expiration=False,
                                 owner=owner, abandon_counts=False)
    return core.CoreSettings(
        lock_duration=settings.lock_duration, default_ttl=settings.default_ttl,
        max_delivery_count=settings.max_delivery_count if settings.max_delivery_count is not None else 1 << 30,
        dead_letter_on_expiration=settings.dead_lettering_on_message_expiration,
        duplicate_window=settings.duplicate_detection_window,
        requires_session=settings.requires_session, owner=owner, forward_dead_letters=forward,
        shared_store=shared)


def as_delivered(record: MessageRecord) -> MessageRecord:
    """The record as a receiver is shown it: the store counted this delivery when it claimed the
    message (issue 13.11), while the header's delivery-count is the number of earlier ones."""
    if record.delivery_count <= 0:
        return record
    return replace(record, delivery_count=record.delivery_count - 1)


def _selects(consumer: object) -> Callable[[MessageRecord], bool] | None:
    """A JMS consumer's selector (``links.LinkConsumer.selects``), if it has one."""
    selects = getattr(consumer, "selects", None)
    return selects if callable(selects) else None


class Receiver(Hashable, Protocol):
    """A receiver as a core actor sees it: a client's receiver link (``links.LinkConsumer``), one
    partition's share of one (``partitioned_actor._Share``) or a topic's own activator. The actor
    hands it to the core as the core's opaque consumer id, and the core hands it back with each
    delivery."""

    @property
    def sub_queue(self) -> SubQueue: ...

    @property
    def peek_lock(self) -> bool: ...

    @property
    def session_id(self) -> str | None: ...  # the session it holds, on a session entity

    def credit(self) -> int: ...

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None: ...

    def drain_requested(self) -> bool: ...

    def drained(self) -> None: ...

    def session_lost(self) -> None: ...


class _Sessions:
    """What links.py does to an actor's session registry: release a late grant."""

    def __init__(self, actor: CoreActor) -> None:
        self._actor = actor

    def release(self, owner: Receiver) -> None:
        self._actor.remove_consumer(owner)


class CoreActor:
    """One non-partitioned queue on the core (see the module docstring)."""

    partitions: list[CoreActor]

    def __init__(self, ref: PartitionRef, settings: EntitySettings, worker: StoreWorker,
                 clock: Clock | None = None, node_id: str = "node") -> None:
        self.ref = ref
        self.settings = settings
        self.worker = worker
        self.clock: Clock = clock if clock is not None else LoopClock()
        self.node_id = node_id
        self.refs = {sub: PartitionRef(ref.entity + sub.value, ref.partition) for sub in SubQueue}
        self.runners: dict[SubQueue, PartitionRunner] = {}
        self.sessions = _Sessions(self)
        # ForwardDeadLetteredMessagesTo, resolved by the broker (forward_dead_letters): where the
        # main queue's dead letters go, and the actor whose core is told they arrived.
        self._forward: core.DeadLetterForward | None = None
        self._forward_actor: CoreActor | None = None
        self.on_dead_letters: Callable[[], None] | None = None  # rows came into the dead-letter queue (a relay)
        self.last_activity = self.clock.now()
        self._used = False  # AccessedAt stays unset until the entity is used (_note_use)
        self._requests = itertools.count(1)
        # Requests waiting for their reply, by reply-to key. Each future's value is the type its
        # request's public method promises (an int, a list of numbers, ...): the table holds them all.
        self._futures: dict[Hashable, asyncio.Future[Any]] = {}
        self._given: dict[Receiver, int] = {}  # credit handed to the core, per receiver (a links.LinkConsumer)
        self._consumers: set[Receiver] = set()
        self._holders: dict[uuid.UUID, SubQueue] = {}  # lock token -> the sub-queue whose core holds it
        self._draining: set[Receiver] = set()
        self._available = True
        self._closed = False
        self._poller: asyncio.Task[None] | None = None
        self._targets: dict[PartitionRef, tuple[CoreActor, SubQueue]] = {}  # where Publish copies land
        self._unwatch: list[Callable[[], None]] = []  # stop the store worker's wake-ups, one per sub-queue
        self._session_waits: dict[Receiver, Hashable] = {}  # owner -> request key of its accept-next-session

    # ---- life -------------------------------------------------------------------------------------

    async def load(self) -> None:
        """Start a runner per sub-queue from the store's counters and metadata (no messages)."""
        for sub in SubQueue:
            runner = await PartitionRunner.start(
                self.refs[sub], core_settings(self.settings, sub, self.node_id, self._forward, self.worker.shared),
                self.worker, self.clock,
                functools.partial(self._on_reply, sub))
            runner.on_moved = self._on_moved
            self.runners[sub] = runner
            if self.worker.shared:  # another node made messages ready here: read again
                self._unwatch.append(self.worker.watch(self.refs[sub], functools.partial(self._arrived, sub),
                                                       functools.partial(self._due_in_store, sub)))
        self._available = True
        if self.worker.shared and self._poller is None:
            loop = asyncio.get_running_loop()
            self._poller = loop.create_task(self._poll_shared(), name=f"shared-store poll {self.ref.entity}")
            for sub, ref in self.refs.items():
                self._unwatch.append(self.worker.watch_counts(ref, functools.partial(self._counts_read, sub)))

    def suspend(self) -> None:
        """The store went offline (or is at start): the cores answer ServerBusy until it is back."""
        self._available = False
        for runner in self.runners.values():
            runner.submit(core.StoreUnavailable())

    def resume(self) -> None:
        """The store is back: serve again (start the runners if the store was offline at start)."""
        if not self.runners:
            asyncio.get_running_loop().create_task(self.load())
            return
        self._available = True
        for runner in self.runners.values():
            runner.submit(core.StoreAvailable())
            runner.submit(core.Arrived(0))  # read the window again: the store is the truth

    async def drained(self, timeout: float = 5.0) -> None:
        """Wait (each runner at most ``timeout`` seconds) until the store work queued so far committed
        and was answered; the actor keeps running."""
        for runner in list(self.runners.values()):
            try:
                await asyncio.wait_for(runner.drained(), timeout)
            except Exception:  # a runner that stopped or is slow: close() says so
                return

    async def close(self) -> None:
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch.clear()
        for runner in self.runners.values():
            try:
                await asyncio.wait_for(runner.drained(), 5)
            except Exception:  # closing regardless: the store stays the truth
                log.warning("queue %s: closing with store work in flight", self.ref.entity)
            await runner.close()
        for future in self._futures.values():
            if not future.done():
                future.set_exception(StoreUnavailable("the queue is closing; retry"))
        self._futures.clear()

    @property
    def available(self) -> bool:
        # Closed (the broker stopping): links torn down afterwards ask nothing more of the runners.
        return self._available and not self._closed and not self.worker.offline

    # ---- requests and replies ---------------------------------------------------------------------

    def _runner(self, sub: SubQueue = SubQueue.MAIN) -> PartitionRunner:
        if not self.available or sub not in self.runners:
            raise StoreUnavailable(f"the messaging store '{self.worker.name}' is unavailable; retry shortly")
        return self.runners[sub]

    def _request(self, sub: SubQueue, make: Callable[[int], core.Command]) -> asyncio.Future[Any]:
        """Submit ``make(reply_to)`` to ``sub``'s core; the future its reply resolves (with the value
        :meth:`_on_reply` gives that reply: the caller's method names its type)."""
        runner = self._runner(sub)
        key = next(self._requests)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[key] = future
        runner.submit(make(key))
        return future

    def _resolve(self, key: Hashable, value: object = None, error: SodaliteError | None = None) -> None:
        future = self._futures.pop(key, None)
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def _on_reply(self, sub: SubQueue, reply: core.Reply) -> None:
        match reply:
            case core.Delivered():
                self._deliver(sub, reply)
            case core.Published():
                for target, records in reply.stored:
                    found = self._targets.get(target) if isinstance(target, PartitionRef) else None
                    if found is not None:
                        found[0].land(found[1], records)
                self._resolve(reply.reply_to)
            case core.SendAccepted():
                self._resolve(reply.reply_to, list(reply.sequence_numbers))
            case core.SettlementDone():
                self._holders.pop(reply.token, None)
                self._resolve(reply.reply_to)
            case core.LockLost():
                self._holders.pop(reply.token, None)
                self._resolve(reply.reply_to, error=MessageLockLost(LOCK_SUPPLIED_INVALID))
            case core.LockRenewed():
                self._resolve(reply.reply_to, reply.locked_until)
            case core.ScheduledCancelled():
                self._resolve(reply.reply_to, list(reply.sequence_numbers))
            case core.ServerBusy():
                # A batch the store refused for lack of disk space made the worker full before this
                # answer: the sender hears it as the quota error v1 gives, not as a retryable busy.
                self._resolve(reply.reply_to, error=StoreFull(
                    f"the messaging store '{self.worker.name}' is full: new messages are refused until space "
                    "is freed (receiving and settling go on)") if self.worker.full else StoreUnavailable(
                    f"the messaging store '{self.worker.name}' did not take the request; retry shortly"))
            case core.Refused():
                self._resolve(reply.reply_to, error=InvalidOperation(reply.reason))
            case core.IdleExpired():
                pass  # the broker's idle sweep asks is_idle()
            case core.SessionAccepted():
                self._resolve(reply.reply_to, (reply.session_id, reply.locked_until))
            case core.SessionCannotBeLocked():
                self._resolve(reply.reply_to, error=SessionCannotBeLocked(
                    f"the session '{reply.session_id}' is locked by another receiver"))
            case core.NoSessionAvailable():
                self._resolve(reply.reply_to, error=OperationTimeout("no session became available in time"))
            case core.SessionLockLost():
                if reply.token is not None:
                    self._holders.pop(reply.token, None)
                self._resolve(reply.reply_to, error=SessionLockLost(
                    f"the lock on session '{reply.session_id}' was lost"))
            case core.SessionLost():
                # (the core hands back the receiver this actor gave it)
                cast(Receiver, reply.consumer).session_lost()
            case core.SessionRenewed():
                self._resolve(reply.reply_to, reply.locked_until)
            case core.SessionState():
                self._resolve(reply.reply_to, reply.state)
            case core.SessionStateSet():
                self._resolve(reply.reply_to)
            case core.DeferredReceived():
                taken: list[Taken] = []
                for item in reply.messages:
                    if item.lock_token is not None:
                        self._holders[item.lock_token] = sub
                    taken.append((as_delivered(item.message), item.lock_token, item.locked_until))
                self._resolve(reply.reply_to, taken)
            case core.MessageNotFound():
                # Service Bus's words for a cancel of an unknown number (Azure/azure-service-bus#239)
                missing = ", ".join(str(n) for n in reply.sequence_numbers)
                self._resolve(reply.reply_to, error=MessageNotFound(
                    f"Messages not found. Missing sequence numbers: {missing} "
                    "(no deferred or scheduled message free to take has them; nothing was done)"))
            case core.CompletedThrough():
                self._resolve(reply.reply_to, reply.count)
            case core.MovedOut():
                self._resolve(reply.reply_to, reply.sequence_numbers)
            case core.SettingsUpdated():
                for token in reply.dropped:  # a settlement with one of them is refused at once
                    self._holders.pop(token, None)
                self._resolve(reply.reply_to)

    def _deliver(self, sub: SubQueue, reply: core.Delivered) -> None:
        consumer = cast(Receiver, reply.consumer)  # as this actor gave it to the core
        given = self._given.get(consumer)
        if given is not None:
            self._given[consumer] = max(given - 1, 0)
        token = reply.lock_token
        if consumer not in self._consumers or consumer.credit() <= 0:
            # The link can no longer take it: give it back. A release returns the delivery count; a
            # ReceiveAndDelete message (deleted already, its transfer never written) is put back in place.
            if token is not None:
                self.runners[sub].submit(core.Settle(token, Outcome.RELEASE))
            else:
                self.unsent(sub, (reply.message,))
            return
        message = as_delivered(reply.message)
        if token is None:
            consumer.deliver(message, None)
            return
        self._holders[token] = sub
        locked_until = reply.locked_until if reply.locked_until is not None else 0
        consumer.deliver(message, Lock(token, message.sequence_number, locked_until, consumer))

    def _counts_read(self, sub: SubQueue, counts: PartitionCounts) -> None:
        """The store's counters of ``sub``, read back with every other watched partition's (other
        nodes send to and settle in this store): where they differ from the core's, the core reads
        them again in order among its batches (``RefreshCounts``) and takes them."""
        runner = self.runners.get(sub)
        if runner is None or self._closed or not self.available:
            return
        mine = runner.view.counts
        if ((counts.active, counts.scheduled, counts.deferred) != (mine.active, mine.scheduled, mine.deferred)
                or counts.size_in_bytes != runner.size_in_bytes):
            runner.refresh_counts()

    async def _poll_shared(self) -> None:
        """Other nodes append to this store: while a receiver here waits, read from the cursor on."""
        while not self._closed:
            await asyncio.sleep(self.worker.poll_seconds)
            if not self.available:
                continue
            waiting = {c.sub_queue for c in self._consumers if self._given.get(c, 0) > 0}
            if self.settings.requires_session and (self._consumers or self._futures):
                waiting.add(SubQueue.MAIN)  # session holders, and accepts waiting for a session
            for sub in waiting:
                runner = self.runners.get(sub)
                if runner is not None:
                    runner.submit(core.Arrived(0))

    def _due_in_store(self, sub: SubQueue, at: int) -> None:
        runner = self.runners.get(sub)
        if runner is not None and self.available and not self._closed:
            runner.submit(core.DueInStore(at))

    def land(self, sub: SubQueue, records: tuple[MessageRecord, ...]) -> None:
        """Rows a topic's committed batch stored in ``sub`` (its copies for this subscription): the
        sub-queue's core takes them in. Closed or offline, nothing to do: the store is the truth,
        and the window is read again when the runners start or the store is back."""
        runner = self.runners.get(sub)
        if runner is None or self._closed or not self._available:
            return
        runner.submit(core.Landed(records))
        runner.note_landed(sum(r.size for r in records))
        if sub is SubQueue.DEAD_LETTER and self.on_dead_letters is not None:
            self.on_dead_letters()

    def _arrived(self, sub: SubQueue) -> None:
        runner = self.runners.get(sub)
        if runner is not None and self.available and not self._closed:
            runner.submit(core.Arrived(0))

    def _on_moved(self, target: PartitionRef, count: int) -> None:
        for sub, ref in self.refs.items():
            if ref == target and sub in self.runners:
                runner = self.runners[sub]
                runner.submit(core.Arrived(count))
                runner.refresh_size()  # rows another batch moved in: their bytes show at the next read
                if sub is SubQueue.DEAD_LETTER and count and self.on_dead_letters is not None:
                    self.on_dead_letters()
                return
        forward = self._forward_actor
        if forward is not None and forward is not self and target in forward.refs.values():
            forward.arrived(target, count)  # dead letters forwarded there (ForwardDeadLetteredMessagesTo)

    def forward_dead_letters(self, target: CoreActor | None, sub: SubQueue = SubQueue.MAIN, *, source: str = "",
                             hop_limit: str | None = None) -> None:
        """ForwardDeadLetteredMessagesTo, as the broker resolved it: the main queue's dead letters go
        to ``target``'s sub-queue ``sub`` (a queue on the core in this store; its transfer dead-letter
        queue, with ``hop_limit``'s description, where the forwarding chain reached the hop limit),
        in the same store transaction as the dead-lettering; None: to this entity's dead-letter queue."""
        if target is not None and target.worker is not self.worker:
            raise ValueError(f"{self.ref.entity}: dead letters can be forwarded only within one messaging store")
        self._forward_actor = target
        self._forward = None if target is None else core.DeadLetterForward(
            (target.refs[sub].entity, target.refs[sub].partition), source,
            None if hop_limit is not None else target.settings.default_ttl, hop_limit)
        runner = self.runners.get(SubQueue.MAIN)
        if runner is not None:
            runner.view.settings = core_settings(self.settings, SubQueue.MAIN, self.node_id, self._forward,
                                                 self.worker.shared)

    def relay_dead_letters(self, source: str, default_ttl: int | None, hop_limit: str | None = None) -> None:
        """ForwardDeadLetteredMessagesTo a target in another store: the main queue's dead letters go
        to this entity's own dead-letter queue as forwarded copies (named after ``source``, counted
        afresh, not expiring there; at the ``hop_limit``, with that reason), for the broker's relay to
        carry over (module docstring), which gives them their expiry by the target's ``default_ttl``."""
        self._forward_actor = self
        self._forward = core.DeadLetterForward(
            (self.refs[SubQueue.DEAD_LETTER].entity, self.refs[SubQueue.DEAD_LETTER].partition), source,
            None if hop_limit is not None else default_ttl, hop_limit, relayed=True)
        runner = self.runners.get(SubQueue.MAIN)
        if runner is not None:
            runner.view.settings = core_settings(self.settings, SubQueue.MAIN, self.node_id, self._forward,
                                                 self.worker.shared)

    def dead_letter_copy(self, record: MessageRecord, now: int) -> Copy:
        """Where a dead letter another batch makes for this entity goes (a topic's copy that failed
        its filter): the dead-letter queue, or where ForwardDeadLetteredMessagesTo sends it, naming
        this entity as its source, counted afresh and expiring as :func:`core.forwarded_expiry` says."""
        forward, actor = self._forward, self._forward_actor
        if forward is None or actor is None:
            return (self, SubQueue.DEAD_LETTER, record)
        if forward.hop_limit is not None:
            record = wire.dead_lettered(record, MAX_TRANSFER_HOP_COUNT_EXCEEDED, forward.hop_limit)
        annotations, count = wire.with_dead_letter_source(record.annotations, record.annotation_count, forward.source)
        copy = replace(record, annotations=annotations, annotation_count=count, delivery_count=0, enqueued_time=now,
                       expires_at=core.forwarded_expiry(forward, record.time_to_live, now))
        sub = next(s for s, ref in actor.refs.items() if (ref.entity, ref.partition) == forward.target)
        return (actor, sub, copy)

    # ---- sending ----------------------------------------------------------------------------------

    def _check_send(self, drafts: Sequence[MessageDraft]) -> None:
        self._note_use()
        if self.worker.full:
            raise StoreFull(f"the messaging store '{self.worker.name}' is full: new messages are refused "
                            "until space is freed (receiving and settling go on)")
        refusal = entity_full(self.ref.entity, self._size, sum(d.size for d in drafts), self.settings.max_size_in_bytes)
        if refusal is not None:
            raise QuotaExceeded(refusal)

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        self._check_send(drafts)
        future = self._request(SubQueue.MAIN, lambda key: core.Send(tuple(drafts), key))
        return _without_value(future)

    def schedule(self, drafts: list[MessageDraft]) -> asyncio.Future[list[int]]:
        """ScheduleMessage: the future gives the sequence numbers once the messages are durable."""
        self._check_send(drafts)
        return self._request(SubQueue.MAIN, lambda key: core.Schedule(tuple(drafts), key))

    def cancel_scheduled(self, sequence_numbers: list[int]) -> asyncio.Future[None]:
        """All or none: MessageNotFound (nothing cancelled) unless every number is a scheduled message."""
        future = self._request(SubQueue.MAIN, lambda key: core.CancelScheduled(tuple(sequence_numbers), key))
        return _without_value(future)

    def note_activity(self) -> None:
        self._note_use()
        if self.available and SubQueue.MAIN in self.runners:
            self.runners[SubQueue.MAIN].submit(core.Touch())

    # ---- settling ---------------------------------------------------------------------------------

    def holds(self, token: uuid.UUID) -> bool:
        return token in self._holders

    def _settle(self, token: uuid.UUID, outcome: Outcome, properties: AnnotationEdits | None = None,
                reason: str | None = None, description: str | None = None) -> asyncio.Future[None]:
        sub = self._holders.get(token)
        if sub is None:
            raise MessageLockLost(LOCK_SUPPLIED_INVALID)
        edits = tuple((str(k), v) for k, v in (properties or {}).items())
        return self._request(sub, lambda key: core.Settle(token, outcome, key, edits, reason, description))

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]:
        return self._settle(token, Outcome.COMPLETE)

    def abandon(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self._settle(token, Outcome.ABANDON, properties_to_modify)

    def defer(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self._settle(token, Outcome.DEFER, properties_to_modify)

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None,
                    properties_to_modify: AnnotationEdits | None = None) -> asyncio.Future[None]:
        return self._settle(token, Outcome.DEAD_LETTER, properties_to_modify, reason, description)

    def release(self, token: uuid.UUID) -> None:
        sub = self._holders.get(token)
        if sub is not None and self.available:
            self.runners[sub].submit(core.Settle(token, Outcome.RELEASE))

    def unsent(self, sub: SubQueue, records: Sequence[MessageRecord]) -> None:
        """ReceiveAndDelete messages taken for a receiver whose transfers were never written (its link,
        session or connection went away first): put back in place (``core.Unsent``), each with the
        record its delivery carried."""
        runner = self.runners.get(sub)
        if runner is None or not records:
            return
        runner.submit(core.Unsent(tuple(records)))
        trace = delivery_trace.current()
        if trace is not None:
            for record in records:
                trace.restored(self.refs[sub].entity, record.sequence_number)

    def renew_lock(self, token: uuid.UUID) -> asyncio.Future[int]:
        sub = self._holders.get(token)
        if sub is None:
            raise MessageLockLost(LOCK_SUPPLIED_INVALID)
        return self._request(sub, lambda key: core.RenewLock(token, key))

    # ---- by sequence number -------------------------------------------------------------------------

    async def peek(self, sub: SubQueue, from_sequence_number: int, count: int,
                   session_id: str | None = None, states: frozenset[MessageState] = ALL_STATES) -> list[MessageRecord]:
        """Messages (of ``states``) from a number on, read from the store (locks as the store has them)."""
        self.note_activity()
        self._runner(sub)
        ref, worker = self.refs[sub], self.worker
        rows = await worker.call(lambda: worker.store.peek(ref, from_sequence_number, count, states, session_id))
        now = self.clock.now()
        # A message out on a delivery shows the count of earlier deliveries, as its receiver sees it.
        return [as_delivered(row.record) if row.locked_at(now) else row.record for row in rows]

    def receive_deferred(self, sub: SubQueue, sequence_numbers: list[int], peek_lock: bool,
                         session_id: str | None) -> asyncio.Future[list[Taken]]:
        """Receive deferred messages by number, all or none: (record, lock token, locked until) each."""
        self.note_activity()
        mode = core.ReceiveMode.PEEK_LOCK if peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE
        return self._request(sub, lambda key: core.ReceiveDeferred(tuple(sequence_numbers), key, mode, session_id))

    def complete_through(self, sub: SubQueue, sequence_number: int) -> asyncio.Future[int]:
        """Remove the unlocked messages numbered ``sequence_number`` or lower (docs/spark.md); the
        future gives how many went, once that is durable."""
        self.note_activity()
        return self._request(sub, lambda key: core.CompleteThrough(sequence_number, key))

    async def bounds(self, sub: SubQueue) -> tuple[int | None, int]:
        """(first stored number or None, the number after the highest made visible)."""
        self._runner(sub)
        ref, worker = self.refs[sub], self.worker
        counts = await worker.call(lambda: worker.store.counts(ref))
        # Partition i numbers from (i << 48) + 1 (port.numbering_base), before its first message too.
        return counts.first_sequence_number, max(counts.last_sequence_number, numbering_base(ref)) + 1

    # ---- moving rows out: resubmit, move, purge (server/moves.py) -----------------------------------

    async def fetch(self, sub: SubQueue, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        """The stored rows with these numbers, with their locks (missing ones omitted), from the store."""
        self._runner(sub)
        ref, worker, numbers = self.refs[sub], self.worker, tuple(sequence_numbers)
        return await worker.call(lambda: worker.store.fetch(ref, numbers))

    def move_out(self, sub: SubQueue, items: Sequence[MoveItem],
                 target: PartitionRef | None) -> asyncio.Future[tuple[int | None, ...]]:
        """Move the rows not locked into ``target`` (a partition of this store) or delete them; the
        future gives, per item, its number in the target (or its own, deleted) or None, once durable."""
        self.note_activity()
        into = None if target is None else (target.entity, target.partition)
        return self._request(sub, lambda key: core.MoveOut(tuple(items), key, into))

    async def append_moved(self, drafts: Sequence[MessageDraft], keys: Sequence[str]) -> int:
        """Messages moved in by a move that is not one transaction with its source (from another
        store, or into a partitioned entity): appended to the main queue together with
        their move keys (``<source store>/<source partition>/<sequence number>``) in one transaction,
        outside the core (as another node's rows; the core is told ``Arrived``). A key already here
        means an earlier attempt appended it: skipped, so a retry after a crash between this commit and
        the source's delete does not double it. The target's duplicate detection does not apply; a
        topic's own partition takes them as it takes scheduled messages that came due (its activator
        fans them out). Returns how many were appended."""
        self._runner(SubQueue.MAIN)  # available, or StoreUnavailable
        self._note_use()
        now = self.clock.now()
        records = [core.record_for(d, now, self.settings.default_ttl) for d in drafts]
        return await self.append_keyed(SubQueue.MAIN, records, keys)

    async def append_keyed(self, sub: SubQueue, records: Sequence[MessageRecord], keys: Sequence[str]) -> int:
        """:meth:`append_moved`'s transaction for unnumbered ``records`` into ``sub``: those whose key
        is not here yet, with their keys, outside the core (which is told ``Arrived``)."""
        self._runner(sub)  # available, or StoreUnavailable
        appended = await self.store_keyed([((self, sub, r), k) for r, k in zip(records, keys, strict=True)])
        return sum(appended.values())

    async def store_keyed(self, copies: Sequence[KeyedCopy]) -> dict[PartitionRef, int]:
        """ONE transaction of this entity's store holding copies that a move brings in from another
        transaction (each into a sub-queue of an entity on the core in this store, with its move key):
        per partition, the copies whose key it does not have yet are appended and their keys
        remembered, and a key it has means an earlier attempt stored them, so they are skipped (a
        message's copies in one partition share its key: all or none of them). Outside the cores,
        as another node's rows: each partition's core is told ``Arrived`` after the commit. A
        dead-letter copy is numbered by its entity's partition, as a ``Publish`` numbers it. Every
        partition is checked available first (StoreUnavailable, nothing stored). Returns how many
        copies each partition took now."""
        worker = self.worker
        groups: dict[PartitionRef, tuple[CoreActor, SubQueue, list[tuple[MessageRecord, str]]]] = {}
        for (actor, sub, record), key in copies:
            if actor.worker is not worker:
                raise ValueError(f"{actor.ref.entity} is not in the messaging store '{worker.name}'")
            actor._runner(sub)  # available, or StoreUnavailable
            groups.setdefault(actor.refs[sub], (actor, sub, []))[2].append((record, key))

        def append() -> dict[PartitionRef, int]:
            ops: list[Append | RememberMoveKeys] = []
            taken: dict[PartitionRef, int] = {}
            for ref, (actor, sub, items) in groups.items():
                known = set(worker.store.partition_meta(ref).move_keys)
                fresh = [(r, k) for r, k in items if k not in known]
                if not fresh:
                    continue
                numbered_by = actor.refs[SubQueue.MAIN] if sub is SubQueue.DEAD_LETTER else None
                ops.append(Append(tuple(r for r, _ in fresh), numbered_by=numbered_by, ref=ref))
                ops.append(RememberMoveKeys(tuple(dict.fromkeys(k for _, k in fresh)), ref=ref))
                taken[ref] = len(fresh)
            if ops:
                worker.store.apply(ops)
            return taken

        taken = await worker.call(append)
        for ref, count in taken.items():
            groups[ref][0].arrived(ref, count)
        return taken

    async def forget_move_keys(self, keys: Sequence[str], sub: SubQueue = SubQueue.MAIN) -> None:
        """The source copies of moved messages are gone: their keys are no longer needed."""
        await self.worker.apply([ForgetMoveKeys(tuple(keys), ref=self.refs[sub])])

    def arrived(self, target: PartitionRef, count: int) -> None:
        """``count`` rows were moved into ``target`` (one of this queue's sub-queues) and committed."""
        self._on_moved(target, count)

    # ---- consumers --------------------------------------------------------------------------------

    def add_consumer(self, consumer: Receiver) -> None:
        self._note_use(consumer)
        self._consumers.add(consumer)
        self._given.setdefault(consumer, 0)
        self.credit_changed(consumer)

    def remove_consumer(self, consumer: Receiver) -> None:
        """A receiver left: its credit ends; its locks live on in the store until they expire (a
        session receiver's session is released, and the messages riding on it with it)."""
        self._consumers.discard(consumer)
        self._given.pop(consumer, None)
        self._draining.discard(consumer)
        runner = self.runners.get(consumer.sub_queue if hasattr(consumer, "sub_queue") else SubQueue.MAIN)
        if runner is not None and self.available:
            runner.submit(core.CloseConsumer(consumer))

    def credit_changed(self, consumer: Receiver) -> None:
        self._note_use(consumer)
        if consumer not in self._consumers or not self.available:
            return
        runner = self.runners[consumer.sub_queue]
        given = self._given.get(consumer, 0)
        more = consumer.credit() - given
        mode = core.ReceiveMode.PEEK_LOCK if consumer.peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE
        if more > 0:
            self._given[consumer] = given + more
            runner.submit(core.Receive(consumer, more, mode, _selects(consumer)))
        elif consumer.session_id is not None:
            runner.submit(core.Receive(consumer, 0, mode))  # asking renews the session
        if consumer.drain_requested() and consumer not in self._draining:
            self._draining.add(consumer)
            asyncio.get_running_loop().create_task(self._drain(consumer, runner))

    def ready(self, sub: SubQueue) -> int:
        """How many messages the core could hand out now (its window of ready ones); a partitioned
        queue gives a receiver's credit only where this is above 0."""
        runner = self.runners.get(sub)
        return len(runner.view.window.order) if runner is not None and self.available else 0

    def given(self, consumer: Receiver) -> int:
        """The credit ``consumer`` gave the core that it has not delivered on yet, claimed or not."""
        return self._given.get(consumer, 0)

    def withdraw_credit(self, consumer: Receiver) -> int:
        """Take back the credit ``consumer`` (not a session receiver) gave this core and the core has
        not used for a claim yet; claims already in flight still deliver. Returns how much."""
        runner = self.runners.get(consumer.sub_queue)
        if runner is None or consumer not in self._consumers or not self.available:
            return 0
        held = runner.view.credit.get(consumer)
        unclaimed = held.count if held is not None else 0
        if unclaimed <= 0:
            return 0
        mode = core.ReceiveMode.PEEK_LOCK if consumer.peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE
        runner.submit(core.CloseConsumer(consumer))  # its credit goes ...
        runner.submit(core.Receive(consumer, 0, mode, _selects(consumer)))  # ... and it is known again
        self._given[consumer] = max(self._given.get(consumer, 0) - unclaimed, 0)
        return unclaimed

    async def caught_up(self, sub: SubQueue) -> None:
        """Wait until ``sub``'s runner has carried out everything decided so far (claims delivered)."""
        runner = self.runners.get(sub)
        if runner is not None:
            await runner.drained()

    async def _drain(self, consumer: Receiver, runner: PartitionRunner) -> None:
        """Answer a drain once everything ready was delivered: the rest of the credit is spent."""
        try:
            await runner.drained()
        finally:
            self._draining.discard(consumer)
        if consumer in self._consumers and consumer.drain_requested():
            self._given[consumer] = 0
            if consumer.session_id is None:
                runner.submit(core.CloseConsumer(consumer))  # no credit left with the core
            consumer.drained()

    # ---- sessions ---------------------------------------------------------------------------------

    def accept_session(self, owner: Receiver, session_id: str | None,
                       timeout_ms: int) -> asyncio.Future[tuple[str, int]]:
        self._note_use()
        wait_until = self.clock.now() + timeout_ms if session_id is None else None
        # The core grants sessions to receivers it knows: register this one (no credit yet).
        peek_lock = getattr(owner, "peek_lock", True)
        mode = core.ReceiveMode.PEEK_LOCK if peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE
        self._runner(SubQueue.MAIN).submit(core.Receive(owner, 0, mode))
        keys: list[Hashable] = []

        def accept(key: Hashable) -> core.AcceptSession:
            keys.append(key)
            return core.AcceptSession(owner, session_id, key, wait_until)

        future = self._request(SubQueue.MAIN, accept)
        if session_id is None and not future.done():
            self._session_waits[owner] = keys[0]
            future.add_done_callback(lambda _: self._session_waits.pop(owner, None))
        return future

    def cancel_session_wait(self, owner: Receiver) -> None:
        """Withdraw ``owner``'s wait for the next session (another partition granted it one): the
        core forgets the receiver (a session granted meanwhile is released) and the wait's future
        ends with OperationTimeout, so nothing waits for a reply that will not come."""
        key = self._session_waits.pop(owner, None)
        self.remove_consumer(owner)
        if key is not None:
            self._resolve(key, error=OperationTimeout("another partition granted the session"))

    def renew_session_lock(self, session_id: str) -> asyncio.Future[int]:
        return self._request(SubQueue.MAIN, lambda key: core.RenewSessionLock(session_id, key))

    def get_session_state(self, session_id: str) -> asyncio.Future[bytes | None]:
        held = self._request(SubQueue.MAIN, lambda key: core.GetSessionState(session_id, key))
        if not self.worker.shared:
            return held
        # Several nodes on one store: another node may have set the state since this node's core read it
        # (the core checked that the session is held here); the store has the state the last set committed.
        ref, worker = self.refs[SubQueue.MAIN], self.worker

        async def from_store() -> bytes | None:
            await held
            meta = await worker.call(lambda: worker.store.partition_meta(ref))
            return next((state or None for sid, state, _at in meta.session_states if sid == session_id), None)
        return asyncio.ensure_future(from_store())

    def set_session_state(self, session_id: str, state: bytes | None) -> asyncio.Future[None]:
        return _without_value(self._request(SubQueue.MAIN, lambda key: core.SetSessionState(session_id, state, key)))

    async def list_sessions(self, updated_after: int | None) -> list[str]:
        """With ``updated_after``: the sessions whose state changed after it, as the core keeps them.
        Without (the SDKs' default, DateTime.MaxValue): every session that has active messages, read
        from the store, or a state (Service Bus lists both)."""
        self.note_activity()
        runner = self._runner(SubQueue.MAIN)
        states = runner.view.sessions.states
        if updated_after is not None:
            return sorted(sid for sid, (_, at) in states.items() if at > updated_after)
        ref, worker = self.refs[SubQueue.MAIN], self.worker
        with_messages = await worker.call(lambda: worker.store.session_ids(ref, _ACTIVE_ONLY))
        return sorted({*with_messages, *runner.view.sessions.states})

    # ---- what the broker reads --------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Counts as Service Bus reports them (locked messages count as active), from the cores' views,
        which follow the store's counters batch by batch."""
        def view(sub: SubQueue) -> core.Counts:
            runner = self.runners.get(sub)
            return runner.view.counts if runner is not None else core.Counts()

        main = view(SubQueue.MAIN)
        return {"active": main.active + main.deferred, "scheduled": main.scheduled,
                "dead_letter": view(SubQueue.DEAD_LETTER).active + view(SubQueue.DEAD_LETTER).deferred,
                "transfer_dead_letter": view(SubQueue.TRANSFER_DEAD_LETTER).active, "transfer": 0}

    def deferred_count(self) -> int:
        runner = self.runners.get(SubQueue.MAIN)
        return runner.view.counts.deferred if runner is not None else 0

    @property
    def _size(self) -> int:
        return sum(runner.size_in_bytes for runner in self.runners.values())

    def size_in_bytes(self) -> int:
        return self._size

    def activity(self) -> tuple[int, int]:
        """(last activity in ms, receivers attached here): what this node registers for AutoDeleteOnIdle."""
        runner = self.runners.get(SubQueue.MAIN)
        last = self.last_activity if runner is None else max(self.last_activity, runner.view.last_activity)
        return last, len(self._consumers)

    def _note_use(self, consumer: Receiver | None = None) -> None:
        """Something used the entity (a send, a receiver, credit, a session, a browse): it is active,
        and it has been accessed unless the receiver is the broker's own (a topic's activator)."""
        self.last_activity = self.clock.now()
        if consumer is None or not self._own_consumer(consumer):
            self._used = True

    def _own_consumer(self, consumer: Receiver) -> bool:
        """Whether ``consumer`` is the broker's own, not a client's (a topic's activator: TopicActor)."""
        return False

    @property
    def accessed_at(self) -> int | None:
        """When the entity was last used (sent to, received from, browsed), None if not since this
        actor opened it: Service Bus's AccessedAt is zero (0001-01-01) until the entity is used."""
        return self.activity()[0] if self._used else None

    def is_idle(self, now: int, idle_for: int) -> bool:
        runner = self.runners.get(SubQueue.MAIN)
        if runner is None or self._consumers:
            return False
        last = max(self.last_activity, runner.view.last_activity)
        return now - last >= idle_for and runner.view.counts.scheduled == 0

    drops_locks_on_update = True  # a topic's own locks (its activator's) are no receiver's: kept

    def update_settings(self, settings: EntitySettings) -> asyncio.Future[None]:
        """The entity's properties changed (here, or through another node on a shared store): they
        apply from now on, and every lock this node's cores granted on the entity ends, as Service
        Bus ends them on an update (``core.UpdateSettings``): message locks as lapsed ones (the
        delivery counts), released in the store so the message is free at once; session holders
        lose their sessions. The future resolves once every sub-queue's core has dropped them."""
        self.settings = settings
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        for sub, runner in self.runners.items():
            key = next(self._requests)
            future: asyncio.Future[None] = loop.create_future()
            self._futures[key] = future
            waits.append(future)
            runner.submit(core.UpdateSettings(
                core_settings(settings, sub, self.node_id, self._forward, self.worker.shared), key,
                drop_locks=self.drops_locks_on_update))
        if not waits:  # not loaded (its store offline at start): load() takes the settings
            done: asyncio.Future[None] = loop.create_future()
            done.set_result(None)
            return done
        return _without_value(asyncio.gather(*waits))

    # ---- copies stored by this entity's transaction into others -----------------------------------

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str,
                                     description: str) -> asyncio.Future[None]:
        """Messages whose forwarding ended here (the hop limit): into the transfer dead-letter queue,
        with the reason, acknowledged once stored."""
        self._check_send(drafts)
        now = self.clock.now()
        planned = [(None, [(self, SubQueue.TRANSFER_DEAD_LETTER,
                            wire.dead_lettered(core.record_for(d, now, None), reason, description))])
                   for d in drafts if not d.ping]
        entries = self.publish_entries(planned)
        return _without_value(self._request(SubQueue.MAIN, lambda key: core.Publish(entries, key)))

    def store_copies(self, copies: Sequence[Copy]) -> asyncio.Future[None]:
        """Copies a topic in another store sends into this store (each into a sub-queue of an entity on
        the core here: this one or another), as ONE batch of this store made by this entity's core (a
        ``Publish`` without MessageIds: the topic applied its duplicate detection); the future resolves
        once durable (the rows then land in their cores), or fails as a send here would."""
        self._check_send([])
        entries = self.publish_entries([(None, copies)])
        return _without_value(self._request(SubQueue.MAIN, lambda key: core.Publish(entries, key)))

    def publish_entries(self, planned: Sequence[tuple[str | None, Sequence[Copy]]]) -> tuple[core.PublishEntry, ...]:
        """The core's entries for (MessageId, copies) pairs; each copy's destination is remembered, so
        once the ``Publish`` committed its core is told the rows landed (``Published``)."""
        entries = []
        for message_id, copies in planned:
            made = []
            for actor, sub, record in copies:
                target = actor.refs[sub]
                self._targets[target] = (actor, sub)  # the destination's actor as it is now
                # A dead letter made for an entity is numbered by the entity's partition (as on version 1),
                # so it never takes a number a message dead-lettered there keeps.
                made.append(core.PublishCopy(target, record,
                                             actor.refs[SubQueue.MAIN] if sub is SubQueue.DEAD_LETTER else None))
            entries.append(core.PublishEntry(message_id, tuple(made)))
        return tuple(entries)

    # ---- AMQP transactions (server/core_transactions.py) ------------------------------------------

    def transactional_lock(self, token: uuid.UUID) -> SubQueue:
        """The sub-queue whose core holds ``token``, checked live now (MessageLockLost otherwise); the
        core checks again when the transaction commits."""
        sub = self._holders.get(token)
        runner = self.runners.get(sub) if sub is not None else None
        lock = runner.view.locks.held.get(token) if runner is not None else None
        if sub is None or lock is None or lock.settling or lock.locked_until <= self.clock.now():
            raise MessageLockLost(LOCK_SUPPLIED_INVALID)
        self._runner(sub)  # StoreUnavailable while the store is offline
        return sub

    def check_transactional_send(self, drafts: Sequence[MessageDraft], stored_here: bool = True) -> None:
        """What a send checks before it is accepted, for messages a transaction stores at its commit
        (``stored_here`` False: a topic's, or a transfer dead letter's, availability and room only)."""
        self._runner(SubQueue.MAIN)
        if not stored_here:
            self._check_send([])
            return
        if self.settings.requires_session and any(d.session_id is None for d in drafts):
            raise InvalidOperation("the entity requires sessions: every message needs a SessionId")
        self._check_send(drafts)

    def transact(self, sub: SubQueue, settles: Sequence[core.Settle],
                 planned: Sequence[tuple[str | None, Sequence[Copy]]],
                 deduplicate: Sequence[bool]) -> asyncio.Future[None]:
        """Commit a transaction on ``sub``'s core (``core.Transact``): the settlements of its locks and
        the planned copies in one batch; the future resolves once durable (the copies then land)."""
        entries = self.publish_entries(planned)
        future = self._request(sub, lambda key: core.Transact(tuple(settles), entries, key, tuple(deduplicate)))

        def settled(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is None:
                for settle in settles:
                    self._holders.pop(settle.token, None)

        future.add_done_callback(settled)
        return _without_value(future)


def _without_value(future: asyncio.Future[T]) -> asyncio.Future[None]:
    out: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(f: asyncio.Future[T]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif f.exception() is not None:
            out.set_exception(f.exception())  # type: ignore[arg-type]
        else:
            out.set_result(None)

    future.add_done_callback(done)
    return out

