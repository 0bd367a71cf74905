"""The actor that owns one partition of an entity: applies commands serially and group-commits them.

Theory of operation: every command (send, settle, credit, timer) runs to completion on the event
loop against the pure :class:`~sodalite.model.partition.Partition` of each sub-queue (the entity
itself, its dead-letter queue, its transfer dead-letter queue), which returns what must be stored
or puts leaving messages in its outbox. The store operations and the replies that depend on them
(send acknowledgements, settlement echoes, ReceiveAndDelete deliveries) wait in the open batch. One
commit is in flight at a time; everything that arrives meanwhile joins the next batch, so a burst
of pipelined sends costs one transaction, not one each (group commit). Only after a batch commits
are its replies released and its new messages made visible. A message moving to a dead-letter
queue is deleted from one sub-queue and appended to the other in the same transaction.

If a commit fails, its commands and those queued behind it fail with a retryable error and the
partition is reloaded from the store before it takes new commands, so memory never holds what
the store does not. One timer serves lock expiry, scheduled activation and message expiry.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sodalite.errors import (
    InvalidOperation,
    MessageLockLost,
    OperationTimeout,
    QuotaExceeded,
    SessionCannotBeLocked,
    SessionLockLost,
    SodaliteError,
    StoreFull,
    StoreUnavailable,
)
from sodalite.model.dedup import DuplicateDetector
from sodalite.model.message import MessageRecord, MessageState, MessageUpdate
from sodalite.model.partition import TTL_EXPIRED, DeadLettered, Lock, MessageDraft, Partition
from sodalite.model.sessions import SessionRegistry
from sodalite.server import wire
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import (
    PARTITION_SHIFT,  # a sequence number's upper 16 bits name its partition (partitioned-entities seed)
    AppendMessages,
    DeleteMessages,
    ForgetMessageIds,
    ForgetMoveKeys,
    PartitionRef,
    PutSessionState,
    RememberMessageIds,
    RememberMoveKeys,
    StoreOp,
    UpdateMessages,
)

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # ms since the epoch
RELOAD_RETRY_SECONDS = 1.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class SubQueue(enum.Enum):
    """An entity's sub-queues and the path suffix that names each (sdk-wire-contract.md 1.2)."""

    MAIN = ""
    DEAD_LETTER = "/$deadletterqueue"
    TRANSFER_DEAD_LETTER = "/$transfer/$deadletterqueue"

    @classmethod
    def split(cls, path: str) -> tuple[str, SubQueue]:
        """``queue1/$deadletterqueue`` -> (``queue1``, DEAD_LETTER); paths are lower-cased already."""
        for sub in (cls.TRANSFER_DEAD_LETTER, cls.DEAD_LETTER):
            if path.endswith(sub.value):
                return path[: -len(sub.value)], sub
        return path, cls.MAIN


class Consumer(Protocol):
    """A receiver link as the actor sees it."""

    peek_lock: bool
    sub_queue: SubQueue
    session_id: str | None  # the session this receiver holds, on a session entity
    reserved: int  # ReceiveAndDelete deliveries waiting for their delete to commit

    def credit(self) -> int: ...

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None: ...

    def drain_requested(self) -> bool: ...

    def drained(self) -> None: ...

    def session_lost(self) -> None: ...


def all_of(futures: Sequence[asyncio.Future[Any]]) -> asyncio.Future[None]:
    """One future for several: done when every one is, failed with the first failure."""
    combined: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if not futures:
        combined.set_result(None)
        return combined
    remaining = [len(futures)]

    def one_done(future: asyncio.Future[Any]) -> None:
        remaining[0] -= 1
        if not combined.done() and not future.cancelled() and future.exception() is not None:
            combined.set_exception(future.exception())  # type: ignore[arg-type]
        elif remaining[0] == 0 and not combined.done():
            combined.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return combined


@dataclass(slots=True)
class _Batch:
    ops: list[StoreOp] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    published: list[tuple[SubQueue, MessageRecord]] = field(default_factory=list)
    # Deliveries waiting for their store op: a ReceiveAndDelete's delete, a PeekLock's counted delivery.
    deliveries: list[tuple[Consumer, MessageRecord, Lock | None]] = field(default_factory=list)
    forwarded: list[tuple[PartitionActor, SubQueue, MessageRecord]] = field(default_factory=list)  # other entities


@dataclass(frozen=True, slots=True)
class FanOut:
    """A topic send's copies for one subscription."""

    actor: PartitionActor
    drafts: list[MessageDraft]
    dead_letters: list[tuple[MessageDraft, str, str]]  # (draft, reason, description)
    dead_letter_queue: SubQueue = SubQueue.DEAD_LETTER
    counts_as_use: bool = True  # False for a subscription's own copies (arrivals are not use of it)


Forwarded = tuple["PartitionActor", SubQueue, MessageRecord]  # a record another actor publishes after a commit


def fan_out_ops(targets: Sequence[FanOut], ttl_cap: int | None) -> tuple[list[StoreOp], list[Forwarded]]:
    """The store ops that put a topic send's copies into their subscriptions (numbered now), and the
    records each target publishes once they commit. ``ttl_cap`` is the topic's DefaultMessageTimeToLive."""
    ops: list[StoreOp] = []
    forwarded: list[Forwarded] = []
    for target in targets:
        if target.drafts:
            records = target.actor.accept_forwarded(target.drafts, ttl_cap, target.counts_as_use)
            ops.append(AppendMessages(target.actor.ref, tuple(records)))
            forwarded.extend((target.actor, SubQueue.MAIN, r) for r in records)
        if target.dead_letters:
            dead = target.actor.accept_dead_lettered(target.dead_letters)
            queue = target.dead_letter_queue
            ops.append(AppendMessages(target.actor.refs[queue], tuple(dead)))
            forwarded.extend((target.actor, queue, r) for r in dead)
    return ops, forwarded


@dataclass(frozen=True, slots=True)
class EntitySettings:
    """What the actor needs of its entity's properties, in milliseconds and bytes."""

    lock_duration: int
    default_ttl: int | None
    max_message_size: int
    max_delivery_count: int | None = None
    dead_lettering_on_message_expiration: bool = False
    requires_session: bool = False
    max_size_in_bytes: int | None = None  # MaxSizeInMegabytes
    duplicate_detection_window: int | None = None  # ms, when RequiresDuplicateDetection is on


@dataclass(slots=True)
class _SessionWaiter:
    """A next-available-session receiver waiting for a session with messages."""

    owner: Any
    future: asyncio.Future[tuple[str, int]]
    timer: asyncio.TimerHandle | None = None


class PartitionActor:
    def __init__(self, ref: PartitionRef, settings: EntitySettings, worker: StoreWorker,
                 clock: Clock = wall_clock_ms) -> None:
        self.ref = ref
        self.settings = settings
        self.worker = worker
        self.clock = clock
        self.refs = {sub: PartitionRef(ref.entity + sub.value, ref.partition) for sub in SubQueue}
        self.queues: dict[SubQueue, Partition] = {sub: self._new_partition(sub, (), 0) for sub in SubQueue}
        self.consumers: dict[SubQueue, list[Consumer]] = {sub: [] for sub in SubQueue}
        self._next_consumer = 0
        self._batch = _Batch()
        self._committing = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._closed = False
        self._reloading = False
        self._reloader: asyncio.Task[None] | None = None
        self.sessions = SessionRegistry()
        self._waiters: list[_SessionWaiter] = []
        # ForwardDeadLetteredMessagesTo, resolved by the broker: dead-lettered messages go there instead.
        self.dead_letter_target: PartitionActor | None = None
        self._pending_bytes = 0
        self.dedup: DuplicateDetector | None = None
        self.move_keys: set[str] = set()  # messages moved in from another store (see server/moves.py)
        self.last_activity = clock()  # for AutoDeleteOnIdle; a restart counts as activity
        # A partition of a partitioned entity: whether its sibling partitions still have messages for a
        # receiver, which is drained only when none has (set by PartitionedActor).
        self.siblings_have_available: Callable[[SubQueue, str | None], bool] | None = None
        # A topic's: its scheduled messages, once due, become its subscriptions' copies (set by the broker).
        self.on_activated: Callable[[list[MessageDraft]], list[FanOut]] | None = None

    @property
    def partition(self) -> Partition:
        """The entity's own (main) sub-queue."""
        return self.queues[SubQueue.MAIN]

    def _new_partition(self, sub: SubQueue, records: Iterable[MessageRecord], last: int) -> Partition:
        # The service enforces MaxDeliveryCount on the entity only; a dead-letter queue keeps its messages.
        max_delivery = self.settings.max_delivery_count if sub is SubQueue.MAIN else None
        sessions = self.settings.requires_session and sub is SubQueue.MAIN  # dead-letter queues are sessionless
        # Numbers are issued per partition, with the partition id in the upper bits (0 for an unpartitioned entity).
        base = self.ref.partition << PARTITION_SHIFT
        return Partition(records, max(last, base), max_delivery_count=max_delivery, sessions=sessions)

    async def load(self) -> None:
        for sub in SubQueue:
            snapshot = await self.worker.load_partition(self.refs[sub])
            # Never let the high-water mark go back: numbers handed out before a failed commit stay used.
            last = max(snapshot.last_sequence_number, self.queues[sub].last_sequence_number)
            self.queues[sub] = self._new_partition(sub, snapshot.messages, last)
            if sub is SubQueue.MAIN:
                states = {sid: (state, at) for sid, state, at in snapshot.session_states}
                locks = self.sessions.locks
                self.sessions = SessionRegistry(states)
                self.sessions.locks = locks  # session locks are volatile but survive a reload of memory
                window = self.settings.duplicate_detection_window
                self.dedup = None if window is None else DuplicateDetector(window, snapshot.duplicate_history)
                self.move_keys = set(snapshot.move_keys)
        self._arm_timer()

    @property
    def available(self) -> bool:
        """False while the partition's store is offline or the partition is being rebuilt from it."""
        return not self._reloading and not self.worker.offline

    def holds(self, token: uuid.UUID) -> bool:
        return any(token in queue.locks for queue in self.queues.values())

    def suspend(self) -> None:
        """The store went offline: stop serving until it answers again, then rebuild from it (locks,
        which are not stored, are lost; every committed message is still there)."""
        if not self._closed:
            self._start_reload()

    def _start_reload(self) -> asyncio.Task[None]:
        """One rebuild at a time, whoever asks (a failed commit, or the store going offline)."""
        if self._reloader is None or self._reloader.done():
            self._reloading = True
            self._reloader = asyncio.get_running_loop().create_task(self._reload())
        return self._reloader

    def _check_available(self) -> None:
        if self._reloading:
            raise StoreUnavailable("the partition is recovering from a store failure; retry shortly")

    def _check_room(self) -> None:
        """New messages need room in the store; stored ones can still be received when it is full."""
        if self.worker.full:
            raise StoreFull(f"the messaging store '{self.worker.name}' is full: new messages are refused "
                            "until space is freed (receiving and settling go on)")

    # ---- sending and scheduling ---------------------------------------------------------------------

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """Enqueue messages (scheduled ones included); the future resolves once they are durable."""
        return self._enqueue(drafts)[0]

    def schedule(self, drafts: list[MessageDraft]) -> tuple[asyncio.Future[None], list[int]]:
        """Like send, returning the sequence numbers (for schedule-message and its cancel)."""
        return self._enqueue(drafts)

    def _enqueue(self, drafts: list[MessageDraft]) -> tuple[asyncio.Future[None], list[int]]:
        """Accept messages; the future (always in the batch, so a duplicate's acknowledgement never
        overtakes its original's commit) resolves once they are durable."""
        self._touch()
        self._check_room()
        self._check_available()
        if self.settings.requires_session and any(d.session_id is None for d in drafts):
            raise InvalidOperation("the entity requires sessions: every message needs a SessionId")
        self._check_quota(sum(d.size for d in drafts))
        now = self.clock()
        batch = self._batch
        drafts = self.deduplicate(drafts)  # a duplicate is accepted and dropped
        records = self.partition.accept(drafts, now, self.settings.default_ttl)
        if records:
            batch.ops.append(AppendMessages(self.ref, tuple(records)))
            batch.published.extend((SubQueue.MAIN, r) for r in records)
        pending = sum(r.size for r in records)
        self._pending_bytes += pending
        future = self._future_in_batch()
        future.add_done_callback(lambda _: self._settle_pending(pending))
        return future, [r.sequence_number for r in records]

    def _settle_pending(self, size: int) -> None:
        self._pending_bytes -= size

    # ---- entity updates -----------------------------------------------------------------------------

    def update_settings(self, settings: EntitySettings) -> None:
        """The entity's properties changed: every lock held on it is dropped, as Service Bus does.

        Message locks end as expired ones do (the delivery counts); session holders lose their
        sessions. Partitions are rebuilt only if a setting they hold changed.
        """
        self._touch()
        for lock in list(self.sessions.locks.values()):
            lost = getattr(lock.owner, "session_lost", None)
            if callable(lost):
                lost()
        self.sessions.locks.clear()
        for sub, queue in self.queues.items():
            for owner in {lock.owner for lock in queue.locks.values()}:
                self._store_updates(sub, queue.drop_owner(owner))
            self._drain_outbox(sub)
        if self.dedup is not None and settings.duplicate_detection_window is not None:
            self.dedup = DuplicateDetector(settings.duplicate_detection_window, self.dedup.history())
        self.settings = settings
        for sub, queue in self.queues.items():
            queue.max_delivery_count = settings.max_delivery_count if sub is SubQueue.MAIN else None
        self._dispatch_soon()

    # ---- idleness (AutoDeleteOnIdle) -----------------------------------------------------------------

    def _touch(self) -> None:
        self.last_activity = self.clock()

    def note_activity(self) -> None:
        """Something outside the actor counts as use of the entity (a rule change, say)."""
        self._touch()

    def activity(self) -> tuple[int, int]:
        """(last activity in ms, receivers attached here): what this node registers for AutoDeleteOnIdle."""
        return self.last_activity, sum(len(c) for c in self.consumers.values()) + len(self._waiters)

    def is_idle(self, now: int, idle_for: int) -> bool:
        """Idle as the expiration seed defines it for a queue: no sends, receives, peeks or management
        for ``idle_for``, no scheduled message waiting, and no receiver attached (an open receiver is
        receiving)."""
        return (now - self.last_activity >= idle_for
                and self.partition.count(MessageState.SCHEDULED) == 0
                and not any(self.consumers.values()) and not self._waiters)

    def size_in_bytes(self) -> int:
        """Stored bytes over every sub-queue, plus sends accepted but not yet committed."""
        return sum(q.size_in_bytes for q in self.queues.values()) + self._pending_bytes

    def _check_quota(self, incoming: int) -> None:
        limit = self.settings.max_size_in_bytes
        if limit is not None and self.size_in_bytes() + incoming > limit:
            raise QuotaExceeded(f"the entity is full: {self.size_in_bytes()} of {limit} bytes used "
                                "(MaxSizeInMegabytes)")

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str,
                                     description: str) -> asyncio.Future[None]:
        """Messages that could not be forwarded: straight into the transfer dead-letter queue."""
        self._touch()
        self._check_room()
        self._check_available()
        records = self.partition.accept(drafts, self.clock(), None)
        self.partition.forget_unpublished(r.sequence_number for r in records)  # published in the sub-queue
        moved = tuple(wire.dead_lettered(r, reason, description) for r in records)
        sub = SubQueue.TRANSFER_DEAD_LETTER
        self._batch.ops.append(AppendMessages(self.refs[sub], moved))
        self._batch.published.extend((sub, r) for r in moved)
        return self._future_in_batch()

    def accept_forwarded(self, drafts: list[MessageDraft], ttl_cap: int | None = None,
                         counts_as_use: bool = True) -> list[MessageRecord]:
        """Assign numbers to messages another actor is moving in; it stores them and then calls publish.

        ``ttl_cap`` is the sending topic's DefaultMessageTimeToLive: when smaller, it applies. A copy
        arriving in a subscription is no use of it (expiration seed), so ``counts_as_use`` is False then.
        """
        if counts_as_use:
            self._touch()
        default = self.settings.default_ttl
        if ttl_cap is not None:
            default = ttl_cap if default is None else min(default, ttl_cap)
        return self.partition.accept(drafts, self.clock(), default)

    def accept_dead_lettered(self, drafts: list[tuple[MessageDraft, str, str]]) -> list[MessageRecord]:
        """Numbers for messages another actor puts straight into this entity's dead-letter queue."""
        records = self.partition.accept([d for d, _, _ in drafts], self.clock(), None)
        self.partition.forget_unpublished(r.sequence_number for r in records)  # published in the sub-queue
        return [wire.dead_lettered(r, reason, description) for r, (_, reason, description) in zip(records, drafts,
                                                                                                 strict=True)]

    def publish_forwarded(self, records: list[MessageRecord], sub: SubQueue = SubQueue.MAIN) -> None:
        self.queues[sub].publish(records)
        self._grant_waiters()
        self._dispatch_soon()

    def fan_out(self, targets: list[FanOut]) -> asyncio.Future[None]:
        """A topic's send: every subscription's copies in this actor's batch, so one transaction holds
        them all (all copies or none), acknowledged once that commits."""
        self._check_room()
        self._check_available()
        self._touch()
        # A target kept in another messaging store cannot share this store's transaction: it commits
        # its copies itself, and the send is acknowledged when both have.
        elsewhere = [t for t in targets if t.actor.worker is not self.worker]
        for target in elsewhere:
            target.actor._check_room()
            target.actor._check_available()
        self._append_fan_out([t for t in targets if t.actor.worker is self.worker])
        own = self._future_in_batch()
        if not elsewhere:
            return own
        futures = [own, *(t.actor._fan_in(t) for t in elsewhere)]
        return all_of(futures)

    def _fan_in(self, target: FanOut) -> asyncio.Future[None]:
        """Another store's fan-out copies for this actor, in this actor's own batch."""
        self._append_fan_out([target])
        return self._future_in_batch()

    def _append_fan_out(self, targets: list[FanOut]) -> None:
        ops, forwarded = fan_out_ops(targets, self.settings.default_ttl)
        self._batch.ops.extend(ops)
        self._batch.forwarded.extend(forwarded)

    def deduplicate(self, drafts: list[MessageDraft]) -> list[MessageDraft]:
        """Drop drafts whose MessageId was seen inside the window (for a topic's send)."""
        dedup = self.dedup
        if dedup is None:
            return drafts
        now = self.clock()
        batch = self._batch
        expired = dedup.prune(now)
        if expired:
            batch.ops.append(ForgetMessageIds(self.ref, tuple(expired)))
        kept = [d for d in drafts if dedup.admit(d.message_id, now)]
        seen = tuple((d.message_id, now) for d in kept if d.message_id is not None)
        if seen:
            batch.ops.append(RememberMessageIds(self.ref, seen))
        return kept

    def cancel_scheduled(self, sequence_numbers: list[int]) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        removed = self.partition.cancel_scheduled(sequence_numbers)
        self._batch.ops.append(DeleteMessages(self.ref, tuple(removed)))
        return self._future_in_batch()

    # ---- settlement ---------------------------------------------------------------------------------

    def _holder(self, token: uuid.UUID) -> SubQueue:
        """The sub-queue holding the lock; on a session entity, the message's session must be held too."""
        for sub, queue in self.queues.items():
            lock = queue.locks.get(token)
            if lock is not None:
                if sub is SubQueue.MAIN and self.settings.requires_session:
                    session_id = queue.messages[lock.sequence_number].session_id
                    if session_id is not None:
                        self.sessions.check(session_id, None, self.clock())
                return sub
        raise MessageLockLost("the lock token is unknown or the lock was lost")

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        sub = self._holder(token)
        seq = self.queues[sub].complete(token, self.clock())
        self._batch.ops.append(DeleteMessages(self.refs[sub], (seq,)))
        return self._after_settlement(sub)

    def abandon(self, token: uuid.UUID, properties_to_modify: dict[Any, Any] | None = None) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        sub = self._holder(token)
        self._modify(sub, token, properties_to_modify)
        update = self.queues[sub].abandon(token, self.clock())
        self._batch.ops.append(UpdateMessages(self.refs[sub], (update,)))
        return self._after_settlement(sub)

    def defer(self, token: uuid.UUID, properties_to_modify: dict[Any, Any] | None = None) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        sub = self._holder(token)
        self._modify(sub, token, properties_to_modify)
        update = self.queues[sub].defer(token, self.clock())
        self._batch.ops.append(UpdateMessages(self.refs[sub], (update,)))
        return self._after_settlement(sub)

    def _modify(self, sub: SubQueue, token: uuid.UUID, properties: dict[Any, Any] | None) -> None:
        """Properties to modify, as .NET clients send with abandon and defer: stored before the unlock."""
        if not properties:
            return
        queue = self.queues[sub]
        current = queue.messages[queue.locks[token].sequence_number]
        annotations, count = wire.merged_annotations(current, properties)
        record = queue.modify_locked(token, self.clock(), annotations, count)
        # Replace the stored record: delete and append it again, in this batch.
        self._batch.ops.append(DeleteMessages(self.refs[sub], (record.sequence_number,)))
        self._batch.ops.append(AppendMessages(self.refs[sub], (record,)))

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        sub = self._holder(token)
        if sub is not SubQueue.MAIN:
            raise InvalidOperation("a message in a dead-letter queue cannot be dead-lettered again")
        record = self.queues[sub].dead_letter(token, self.clock())
        self._move_to_dead_letter(sub, record, reason, description)
        return self._after_settlement(sub)

    def release(self, token: uuid.UUID) -> None:
        self._touch()
        for sub, queue in self.queues.items():
            if token in queue.locks:
                self._store_release(sub, token)  # the claimed delivery did not happen: uncount it
        self._dispatch_soon()

    def renew_lock(self, token: uuid.UUID) -> int:
        self._touch()
        sub = self._holder(token)
        locked_until = self.queues[sub].renew(token, self.clock(), self.settings.lock_duration)
        self._arm_timer()
        return locked_until

    def _after_settlement(self, sub: SubQueue) -> asyncio.Future[None]:
        self._drain_outbox(sub)
        self._dispatch_soon()
        return self._future_in_batch()

    # ---- transactions (server/transactions.py drives these) ------------------------------------------

    def check_transactional_send(self, drafts: list[MessageDraft], stored_here: bool = True) -> None:
        """What a send checks before it is accepted, for messages a transaction sends at its commit.

        ``stored_here`` False (a topic, a transfer dead-letter route) checks availability only."""
        self._check_room()
        self._check_available()
        if not stored_here:
            return
        if self.settings.requires_session and any(d.session_id is None for d in drafts):
            raise InvalidOperation("the entity requires sessions: every message needs a SessionId")
        self._check_quota(sum(d.size for d in drafts))

    def check_transactional_lock(self, token: uuid.UUID) -> None:
        """Raise MessageLockLost unless ``token`` is a live lock here (and its session is held, if any)."""
        self._check_available()
        lock = self.queues[self._holder(token)].locks[token]
        if lock.locked_until <= self.clock():
            raise MessageLockLost("the lock has expired")

    def prepare_in_transaction(
            self, command: Callable[[], object]) -> tuple[list[StoreOp], list[tuple[PartitionActor, SubQueue,
                                                                                    MessageRecord]]]:
        """Run one command (send, fan_out, complete, abandon, defer, dead_letter ...) for a committing
        transaction. Its memory changes happen now, as they always do; the store ops it queued and the
        records it would publish after its commit are handed back, for the one batch that commits the
        whole transaction (``commit_transaction``), instead of staying in this actor's own batch."""
        saved, self._batch = self._batch, _Batch()
        try:
            command()
        finally:
            captured, self._batch = self._batch, saved
        assert not captured.deliveries  # receives run from _dispatch, never inside a command
        for future in captured.futures:
            future.cancel()  # the transaction's own future stands for them
        forwarded = [(self, sub, record) for sub, record in captured.published] + captured.forwarded
        return captured.ops, forwarded

    def commit_transaction(self, ops: list[StoreOp],
                           forwarded: list[tuple[PartitionActor, SubQueue, MessageRecord]]) -> asyncio.Future[None]:
        """A transaction's ops, prepared on every actor it touched (all in this actor's store), in this
        actor's next batch: one store transaction. As with fan_out, the records are published only
        after it commits; if it fails, this actor reloads and the caller resynchronises the others."""
        self._check_available()
        self._batch.ops.extend(ops)
        self._batch.forwarded.extend(forwarded)
        return self._future_in_batch()

    def resynchronise(self) -> None:
        """A transaction that changed this actor's memory did not commit: rebuild it from the store."""
        if not self._closed:
            self._start_reload()

    # ---- by sequence number -------------------------------------------------------------------------

    def peek(self, sub: SubQueue, from_sequence_number: int, count: int,
             session_id: str | None = None) -> list[MessageRecord]:
        self._touch()
        self._check_available()
        return self.queues[sub].peek(from_sequence_number, count, session_id)

    def complete_through(self, sub: SubQueue, sequence_number: int) -> tuple[asyncio.Future[None], int]:
        """Remove the unlocked messages numbered ``sequence_number`` or lower (a Sodalite extension,
        docs/spark.md); the future resolves once the delete is durable. Returns it and the count."""
        self._touch()
        self._check_available()
        removed = self.queues[sub].complete_through(sequence_number)
        if removed:
            self._batch.ops.append(DeleteMessages(self.refs[sub], tuple(removed)))
        return self._after_settlement(sub), len(removed)

    def bounds(self, sub: SubQueue) -> tuple[int | None, int]:
        """(first stored sequence number or None, the number after the highest ever made visible)."""
        self._check_available()
        queue = self.queues[sub]
        return queue.first_sequence_number(), queue.next_visible

    def lock_deferred(self, sub: SubQueue, sequence_numbers: list[int],
                      owner: Any) -> tuple[asyncio.Future[None], list[tuple[MessageRecord, Lock]]]:
        """Lock deferred messages by number; hand them out once the future says their delivery is
        counted durably."""
        self._touch()
        self._check_available()
        bound = sub is SubQueue.MAIN and self.settings.requires_session
        queue = self.queues[sub]
        taken = queue.lock_deferred(sequence_numbers, self.clock(), self.settings.lock_duration, owner,
                                    self._session_until if bound else None)
        if taken:
            self._batch.ops.append(UpdateMessages(self.refs[sub], tuple(queue.claim(r) for r, _ in taken)))
        self._arm_timer()
        return self._future_in_batch(), taken

    def take_deferred(self, sub: SubQueue,
                      sequence_numbers: list[int]) -> tuple[asyncio.Future[None], list[MessageRecord]]:
        self._touch()
        self._check_available()
        records = self.queues[sub].take_deferred(sequence_numbers)
        self._batch.ops.append(DeleteMessages(self.refs[sub], tuple(r.sequence_number for r in records)))
        return self._future_in_batch(), records

    # ---- moves and purges (server/moves.py drives these) -------------------------------------------------

    def take_for_move(self, sub: SubQueue, sequence_numbers: Sequence[int],
                      states: frozenset[MessageState] | None = None) -> list[MessageRecord]:
        """Take unlocked messages out of memory for a move or purge; the caller commits their delete
        (``commit_transaction``), and a failed commit rebuilds this actor from the store."""
        self._touch()
        self._check_available()
        return self.queues[sub].take_unlocked(sequence_numbers, states)

    def append_moved(self, drafts: list[MessageDraft], keys: list[str]) -> tuple[asyncio.Future[None], int]:
        """Messages moved in from another store, each with its move key, appended with their keys in
        one transaction; a key already here means an earlier attempt appended it: skipped. Returns
        the future of the commit and how many were appended."""
        self._check_available()
        fresh = [(d, k) for d, k in zip(drafts, keys, strict=True) if k not in self.move_keys]
        if fresh:
            records = self.accept_forwarded([d for d, _ in fresh])
            self._batch.ops.append(AppendMessages(self.ref, tuple(records)))
            self._batch.ops.append(RememberMoveKeys(self.ref, tuple(k for _, k in fresh)))
            self._batch.published.extend((SubQueue.MAIN, r) for r in records)
            self.move_keys.update(k for _, k in fresh)
        return self._future_in_batch(), len(fresh)

    def append_moved_copies(self, copies: Sequence[tuple[str, FanOut]], ttl_cap: int | None) -> asyncio.Future[None]:
        """A topic's copies of messages moved in from another store, for this actor (``FanOut.actor``
        is this actor), each group under its source message's move key, appended with their keys in one
        transaction; a group whose key is already here was appended by an earlier attempt: skipped."""
        self._check_available()
        fresh = [(key, target) for key, target in copies if key not in self.move_keys]
        if fresh:
            ops, forwarded = fan_out_ops([target for _, target in fresh], ttl_cap)
            keys = tuple(dict.fromkeys(key for key, _ in fresh))
            self._batch.ops.extend(ops)
            self._batch.ops.append(RememberMoveKeys(self.ref, keys))
            self._batch.forwarded.extend(forwarded)
            self.move_keys.update(keys)
        return self._future_in_batch()

    def forget_move_keys(self, keys: list[str]) -> asyncio.Future[None]:
        """The source copies are gone: their keys are no longer needed."""
        self.move_keys.difference_update(keys)
        self._batch.ops.append(ForgetMoveKeys(self.ref, tuple(keys)))
        return self._future_in_batch()

    # ---- consumers ----------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self._touch()
        self.consumers[consumer.sub_queue].append(consumer)
        self._dispatch_soon()

    def remove_consumer(self, consumer: Consumer) -> None:
        """A receiver link went away. Its message locks stay until they expire, as in Service Bus: the
        messages can still be settled by lock token through ``$management``. A session receiver's
        session is released, and with it the messages it held (they ride on the session lock)."""
        consumers = self.consumers[consumer.sub_queue]
        if consumer in consumers:
            consumers.remove(consumer)
        self.cancel_session_wait(consumer)
        for session_id in self.sessions.release(consumer):
            self._drop_session(session_id)
        self._grant_waiters()
        self._dispatch_soon()

    def _drop_session(self, session_id: str) -> None:
        """The session's lock ended: the messages riding on it are unlocked (the delivery counts)."""
        self._store_updates(SubQueue.MAIN, self.queues[SubQueue.MAIN].drop_session(session_id))
        self._drain_outbox(SubQueue.MAIN)

    def drop_owner(self, owner: Any) -> None:
        """Whoever held locks is gone: its locks end as expired ones do."""
        for sub, queue in self.queues.items():
            self._store_updates(sub, queue.drop_owner(owner))
            self._drain_outbox(sub)
        self._dispatch_soon()

    def credit_changed(self, consumer: Consumer) -> None:
        """The receiver asked for messages. A session holder asking is receiving from its session,
        which extends the session lock as a delivery does (a receiver waiting on an empty session
        keeps it while it keeps asking)."""
        self._touch()
        session_id = consumer.session_id
        if session_id is not None and consumer.sub_queue is SubQueue.MAIN and self.settings.requires_session:
            self._extend_session(session_id, consumer, self.clock())
        self._dispatch_soon()

    # ---- sessions -----------------------------------------------------------------------------------

    def accept_session(self, owner: Any, session_id: str | None, timeout_ms: int) -> asyncio.Future[tuple[str, int]]:
        """Lock a named session, or the next session with messages (waiting up to ``timeout_ms``).

        The future gives (session id, locked until); it fails with SessionCannotBeLocked for a
        named session another receiver holds, or OperationTimeout when no session came in time.
        """
        self._touch()
        self._check_available()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[str, int]] = loop.create_future()
        if session_id is not None:
            lock = self.sessions.lock(session_id, owner, self.clock(), self.settings.lock_duration)
            future.set_result((session_id, lock.locked_until))
            self._arm_timer()
            return future
        waiter = _SessionWaiter(owner, future)
        self._waiters.append(waiter)
        self._grant_waiters()
        if not future.done():
            waiter.timer = loop.call_later(timeout_ms / 1000.0, self._session_wait_timed_out, waiter)
        return future

    def cancel_session_wait(self, owner: Any) -> None:
        for waiter in [w for w in self._waiters if w.owner is owner]:
            self._waiters.remove(waiter)
            if waiter.timer is not None:
                waiter.timer.cancel()
            if not waiter.future.done():
                waiter.future.cancel()

    def _session_wait_timed_out(self, waiter: _SessionWaiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if not waiter.future.done():
            waiter.future.set_exception(OperationTimeout("no session with messages became available in time"))

    def _grant_waiters(self) -> None:
        if not self._waiters or self._reloading:
            return
        now = self.clock()
        for session_id in self.partition.sessions_with_messages():
            if not self._waiters:
                break
            if not self.sessions.is_free(session_id, now):
                continue
            waiter = self._waiters.pop(0)
            if waiter.timer is not None:
                waiter.timer.cancel()
            try:
                lock = self.sessions.lock(session_id, waiter.owner, now, self.settings.lock_duration)
            except SessionCannotBeLocked:
                continue
            if not waiter.future.done():
                waiter.future.set_result((session_id, lock.locked_until))
        self._arm_timer()

    def renew_session_lock(self, session_id: str) -> int:
        self._touch()
        locked_until = self.sessions.renew(session_id, None, self.clock(), self.settings.lock_duration)
        self.queues[SubQueue.MAIN].extend_session(session_id, locked_until)
        self._arm_timer()
        return locked_until

    def _extend_session(self, session_id: str, holder: Any, now: int) -> int | None:
        """Delivering from a session extends its lock, and its messages' with it; None if not held."""
        try:
            locked_until = self.sessions.renew(session_id, holder, now, self.settings.lock_duration)
        except SessionLockLost:
            return None
        self.queues[SubQueue.MAIN].extend_session(session_id, locked_until)
        return locked_until

    def _session_until(self, session_id: str) -> int:
        """The held session's locked-until, for a session message locked by sequence number."""
        return self.sessions.check(session_id, None, self.clock()).locked_until

    def get_session_state(self, session_id: str) -> bytes | None:
        self._touch()
        self.sessions.check(session_id, None, self.clock())
        return self.sessions.get_state(session_id)

    def set_session_state(self, session_id: str, state: bytes | None) -> asyncio.Future[None]:
        self._touch()
        self._check_available()
        now = self.clock()
        self.sessions.check(session_id, None, now)
        self.sessions.set_state(session_id, state, now)
        self._batch.ops.append(PutSessionState(self.ref, session_id, state, now))
        return self._future_in_batch()

    def list_sessions(self, updated_after: int | None) -> list[str]:
        """Sessions with messages or state (default listing), or whose state changed after a time."""
        self._touch()
        with_state = self.sessions.sessions_with_state(updated_after)
        if updated_after is not None:
            return with_state
        return sorted(self.partition.session_ids() | set(with_state))

    def counts(self) -> dict[str, int]:
        """Message counts as Service Bus reports them (locked messages count as active)."""
        main = self.partition
        return {
            "active": main.count(MessageState.ACTIVE) + main.count(MessageState.DEFERRED),
            "scheduled": main.count(MessageState.SCHEDULED),
            "dead_letter": len(self.queues[SubQueue.DEAD_LETTER].messages),
            "transfer_dead_letter": len(self.queues[SubQueue.TRANSFER_DEAD_LETTER].messages),
            "transfer": 0,
        }

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        while self._committing or self._batch.ops:
            if not self._committing:
                await self._commit()
            else:
                await asyncio.sleep(0.005)

    # ---- delivery -----------------------------------------------------------------------------------

    def _dispatch_soon(self) -> None:
        asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        if self._reloading:
            return
        for sub, consumers in self.consumers.items():
            if consumers:
                self._dispatch_to(sub, consumers)
        self._arm_timer()

    def _dispatch_to(self, sub: SubQueue, consumers: list[Consumer]) -> None:
        """Hand out messages one per consumer per round, so competing receivers share fairly."""
        queue = self.queues[sub]
        by_session = queue.sessions
        now = self.clock()
        # One store op each for the round's claims and ReceiveAndDelete removals, not one per message.
        claims: list[MessageUpdate] = []
        removals: list[int] = []
        progress = True
        while progress and queue.has_available():
            progress = False
            start = self._next_consumer % len(consumers)
            for consumer in consumers[start:] + consumers[:start]:
                if consumer.credit() - consumer.reserved <= 0:
                    continue
                session_id = consumer.session_id if by_session else None
                if by_session and (session_id is None or not queue.has_available(session_id)):
                    continue
                session_until = None
                if by_session and session_id is not None:
                    session_until = self._extend_session(session_id, consumer, now)
                    if session_until is None:
                        continue
                if consumer.peek_lock:
                    taken = queue.lock_next(now, self.settings.lock_duration, consumer, session_id, session_until,
                                            in_flight=True)
                    if taken is None:
                        continue
                    # The delivery counts durably before the message leaves (claims of one turn share a commit);
                    # the lock is in flight until then: it cannot lapse, and if it ends the delivery does not count.
                    consumer.reserved += 1
                    claims.append(queue.claim(taken[0]))
                    self._batch.deliveries.append((consumer, taken[0], taken[1]))
                else:
                    record = queue.take_next(now, session_id)
                    if record is None:
                        continue
                    consumer.reserved += 1
                    removals.append(record.sequence_number)
                    self._batch.deliveries.append((consumer, record, None))
                progress = True
            self._next_consumer = start + 1
        if claims:
            self._batch.ops.append(UpdateMessages(self.refs[sub], tuple(claims)))
            self._schedule_commit()
        if removals:
            self._batch.ops.append(DeleteMessages(self.refs[sub], tuple(removals)))
            self._schedule_commit()
        self._drain_outbox(sub)
        for consumer in consumers:
            session_id = consumer.session_id if by_session else None
            if consumer.drain_requested() and not queue.has_available(session_id) and not consumer.reserved \
                    and not (self.siblings_have_available and self.siblings_have_available(sub, session_id)):
                consumer.drained()

    # ---- messages leaving a sub-queue -----------------------------------------------------------------

    def _drain_outbox(self, sub: SubQueue) -> None:
        for effect in self.queues[sub].take_outbox():
            record = effect.record
            if isinstance(effect, DeadLettered):
                self._move_to_dead_letter(sub, record, effect.reason, effect.description)
            elif sub is SubQueue.MAIN and self.settings.dead_lettering_on_message_expiration:
                self._move_to_dead_letter(sub, record, TTL_EXPIRED, "the message expired")
            else:
                self._batch.ops.append(DeleteMessages(self.refs[sub], (record.sequence_number,)))
                self._schedule_commit()

    def _move_to_dead_letter(self, source: SubQueue, record: MessageRecord, reason: str | None,
                             description: str | None) -> None:
        """Delete from ``source`` and append to the dead-letter queue, in the same transaction.

        With ForwardDeadLetteredMessagesTo the message goes into that entity instead, marked with
        ``x-opt-deadletter-source``; both entities live in this store, so one transaction still holds.
        """
        moved = wire.dead_lettered(record, reason, description)
        batch = self._batch
        target = self.dead_letter_target
        if target is not None and source is SubQueue.MAIN and target.worker is not self.worker:
            self._forward_dead_letter_elsewhere(target, record, moved)
            return
        batch.ops.append(DeleteMessages(self.refs[source], (record.sequence_number,)))
        if target is not None and source is SubQueue.MAIN:
            records = target.accept_forwarded([wire.forwarded_draft(moved, dead_letter_source=self.ref.entity)])
            batch.ops.append(AppendMessages(target.ref, tuple(records)))
            batch.forwarded.extend((target, SubQueue.MAIN, r) for r in records)
        else:
            batch.ops.append(AppendMessages(self.refs[SubQueue.DEAD_LETTER], (moved,)))
            batch.published.append((SubQueue.DEAD_LETTER, moved))
        self._schedule_commit()

    def _forward_dead_letter_elsewhere(self, target: PartitionActor, record: MessageRecord,
                                       moved: MessageRecord) -> None:
        """ForwardDeadLetteredMessagesTo an entity in another store: the target commits the message
        first, then this store forgets it. A crash in between leaves a duplicate, never a loss; if the
        target refuses it, it stays here, in the dead-letter queue."""
        def keep_here() -> None:
            self._batch.ops.append(DeleteMessages(self.refs[SubQueue.MAIN], (record.sequence_number,)))
            self._batch.ops.append(AppendMessages(self.refs[SubQueue.DEAD_LETTER], (moved,)))
            self._batch.published.append((SubQueue.DEAD_LETTER, moved))
            self._schedule_commit()

        def forwarded(future: asyncio.Future[None]) -> None:
            if future.cancelled() or future.exception() is not None:
                keep_here()
                return
            self._batch.ops.append(DeleteMessages(self.refs[SubQueue.MAIN], (record.sequence_number,)))
            self._schedule_commit()

        try:
            future = target._fan_in(FanOut(target, [wire.forwarded_draft(moved, dead_letter_source=self.ref.entity)],
                                           []))
        except SodaliteError:
            keep_here()
            return
        future.add_done_callback(forwarded)

    # ---- time ---------------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        dues = [q.next_due() for q in self.queues.values()] + [self.sessions.next_expiry()]
        due = min((t for t in dues if t is not None), default=None)
        if due is None or self._closed:
            return
        if self._timer is not None and self._timer_at is not None and self._timer_at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, (due - self.clock()) / 1000.0)
        self._timer_at = due
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if self._reloading:
            return  # the reload re-arms it
        now = self.clock()
        for lock in self.sessions.expire(now):
            # The holder lost the session: its messages' locks go too, and it is told (SessionLockLost).
            self._drop_session(lock.session_id)
            lost = getattr(lock.owner, "session_lost", None)
            if callable(lost):
                lost()
        for sub, queue in self.queues.items():
            self._store_updates(sub, queue.on_time(now))
            self._drain_outbox(sub)
        if self.on_activated is not None:
            self._publish_due(self.on_activated, now)
        self._grant_waiters()
        self._dispatch()

    def _publish_due(self, on_activated: Callable[[list[MessageDraft]], list[FanOut]], now: int) -> None:
        """A topic's scheduled messages that came due leave it for its subscriptions, as a send would,
        in the same transaction (nobody receives from a topic, so every active message here is one)."""
        main = self.queues[SubQueue.MAIN]
        due: list[MessageRecord] = []
        while (record := main.take_next(now)) is not None:
            due.append(record)
        if not due:
            return
        self._batch.ops.append(DeleteMessages(self.refs[SubQueue.MAIN], tuple(r.sequence_number for r in due)))
        self._append_fan_out(on_activated([wire.forwarded_draft(r) for r in due]))
        self._schedule_commit()

    def _store_updates(self, sub: SubQueue, updates: list[MessageUpdate]) -> None:
        if updates:
            self._batch.ops.append(UpdateMessages(self.refs[sub], tuple(updates)))
            self._schedule_commit()

    # ---- group commit -------------------------------------------------------------------------------

    def _future_in_batch(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._batch.futures.append(future)
        self._schedule_commit()
        return future

    def _schedule_commit(self) -> None:
        if not self._committing:
            self._committing = True
            asyncio.get_running_loop().create_task(self._commit_loop())

    async def _commit_loop(self) -> None:
        try:
            while self._batch.ops or self._batch.futures:
                await self._commit()
        finally:
            self._committing = False

    async def _commit(self) -> None:
        batch, self._batch = self._batch, _Batch()
        try:
            if batch.ops:
                await self.worker.apply(batch.ops)
        except Exception as exc:
            if not isinstance(exc, SodaliteError):  # an adapter bug must not leave senders waiting forever
                log.exception("store commit failed for %s", self.ref)
                exc = StoreUnavailable(f"store commit failed: {exc}")
            # What was queued behind the failed batch was decided against memory that is now suspect:
            # fail it too, and rebuild memory from the store before taking new commands.
            queued, self._batch = self._batch, _Batch()
            self._fail_batch(batch, exc)
            self._fail_batch(queued, exc)
            await self._start_reload()
            return
        for sub, record in batch.published:
            self.queues[sub].publish([record])
        for consumer, record, lock in batch.deliveries:
            consumer.reserved -= 1
            if lock is None or self._still_held(consumer, lock):
                consumer.deliver(record, lock)
        for target, sub, record in batch.forwarded:
            target.publish_forwarded([record], sub)
        for future in batch.futures:
            if not future.done():
                future.set_result(None)
        self._grant_waiters()
        self._dispatch()

    def _still_held(self, consumer: Consumer, lock: Lock) -> bool:
        """A claimed message whose lock ended while its claim committed (the entity changed, the
        session went) is not sent; one whose receiver left meanwhile is released for others. One that
        is sent leaves now, and its lock runs from now (it could not lapse while its claim committed)."""
        queue = self.queues[consumer.sub_queue]
        if queue.locks.get(lock.token) is not lock:
            return False
        if consumer.credit() <= 0 and consumer not in self.consumers[consumer.sub_queue]:
            self._store_release(consumer.sub_queue, lock.token)
            self._dispatch_soon()
            return False
        queue.sent(lock.token, self.clock(), self.settings.lock_duration)
        return True

    def _store_release(self, sub: SubQueue, token: uuid.UUID) -> None:
        update = self.queues[sub].release(token)
        if update is not None:
            self._store_updates(sub, [update])

    def _fail_batch(self, batch: _Batch, exc: SodaliteError) -> None:
        for future in batch.futures:
            if not future.done():
                future.set_exception(exc)
        for target, _, record in batch.forwarded:  # numbers they took that will never be published
            target.partition.forget_unpublished((record.sequence_number,))
        for consumer, _, _ in batch.deliveries:
            consumer.reserved -= 1  # not sent: the op did not commit, the reload brings the message back

    async def _reload(self) -> None:
        self._reloading = True
        await asyncio.sleep(0)  # let a commit already on the store thread finish or fail first
        while not self._closed:
            try:
                await self.load()
                break
            except SodaliteError:
                log.warning("partition %s cannot be reloaded yet; retrying", self.ref)
                await asyncio.sleep(RELOAD_RETRY_SECONDS)
        self._reloading = False
        self._dispatch()
