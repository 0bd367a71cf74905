"""One entity's partition on the core: the adapter between the broker's endpoints and the cores.

Rules (docs/partition-core.md tells the why, docs/architecture.md one message's path):

1. The store holds every message and every lock; the pure core (``model/partition_core/``)
   decides; one :class:`PartitionRunner` per sub-queue (the queue, its dead-letter queue, its
   transfer dead-letter queue) carries out the core's batches and arms its timers. This actor
   decides nothing about a message: it turns the endpoints' calls into core commands and the
   core's replies into the answers and deliveries the endpoints wait for.
2. Each verb is one command; its request is the future of the class its answer takes
   (``server/core_requests.py``), and the core's refusals become the client's errors there too.
3. An answer that says something happened comes only after its batch committed (the core's
   rule): a send is acknowledged, a settlement echoed and a renewal answered once durable.
4. A lock is settled on the sub-queue whose core granted it (:attr:`CoreActor.holders`); a token
   not held here is MessageLockLost at once.
5. A send is refused before the core sees it when the store is full or the entity at its quota
   (``model.quotas``); the store unavailable is StoreUnavailable, retryable.
6. Rows another core's batch stored or moved here (a topic's copies, dead letters, a move) reach
   this core as ``Landed`` or ``Arrived`` only after that batch committed.
7. An update of the entity's properties is ``UpdateSettings`` to every sub-queue's core: the
   locks it granted end (a topic keeps its activator's), and its answer comes once they did.
8. The cores' clock is the broker's, so idleness and every timer follow one time. What a core
   cannot do at runtime is answered with ``amqp:not-implemented`` rather than faked.

Beside it, by subject: receivers' credit (``core_credit``), copies into other entities
(``core_copies``), keyed appends of moves (``move_keys``), ForwardDeadLetteredMessagesTo
(``dead_letter_forwarding``), other nodes' writes (``shared_store_watch``), AMQP transactions
(``core_transactions``). A partitioned entity is one CoreActor per partition
(``partitioned_actor``), a topic a :class:`~sodalite.server.topic_actor.TopicActor`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar, cast

from sodalite.amqp.types import AmqpValue
from sodalite.errors import (
    LOCK_SUPPLIED_INVALID,
    MessageLockLost,
    OperationTimeout,
    QuotaExceeded,
    StoreFull,
    StoreUnavailable,
)
from sodalite.model import partition_core as core
from sodalite.model.copies import NEVER, as_delivered, sub_queue_settings
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.model.quotas import entity_full
from sodalite.model.routing import without_pings
from sodalite.model.store_ops import MoveItem, Outcome, StoredMessage
from sodalite.server import delivery_trace, test_defects, wire
from sodalite.server.core_copies import Copy, KeyedCopy, Landing
from sodalite.server.core_credit import Credit, Receiver, mode_of
from sodalite.server.core_requests import (
    Count,
    Done,
    Granted,
    MovedOut,
    Numbers,
    Pending,
    Received,
    Refusal,
    Request,
    StateRead,
    Taken,
    Until,
    refusal,
)
from sodalite.server.dead_letter_forwarding import DeadLetterForwarding
from sodalite.server.entity_settings import EntitySettings, SubQueue
from sodalite.server.partition_runner import Clock, LoopClock, PartitionRunner
from sodalite.server.shared_store_watch import SharedStoreWatch
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import PartitionRef, numbering_base

__all__ = ["ALL_STATES", "AnnotationEdits", "Copy", "CoreActor", "KeyedCopy", "Receiver", "Taken", "core_settings"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R", bound=Request)

# The annotations a client asks abandon or defer to set (``modified.message-annotations``, or
# ``properties-to-modify`` in update-disposition), as decoded.
AnnotationEdits = Mapping[AmqpValue, AmqpValue]

ALL_STATES = frozenset(MessageState)
_ACTIVE_ONLY = frozenset({MessageState.ACTIVE})  # list-sessions: the sessions with active messages


def core_settings(settings: EntitySettings, sub: SubQueue, owner: str,
                  forward: core.DeadLetterForward | None = None, shared: bool = False) -> core.CoreSettings:
    """The core's settings for one sub-queue of an entity (``model.copies.sub_queue_settings``).
    ``forward``: ForwardDeadLetteredMessagesTo; ``shared``: other nodes write the store, which then
    decides duplicates."""
    main = core.CoreSettings(
        lock_duration=settings.lock_duration, default_ttl=settings.default_ttl,
        max_delivery_count=settings.max_delivery_count if settings.max_delivery_count is not None else NEVER,
        dead_letter_on_expiration=settings.dead_lettering_on_message_expiration,
        duplicate_window=settings.duplicate_detection_window,
        requires_session=settings.requires_session, owner=owner, forward_dead_letters=forward,
        shared_store=shared)
    return sub_queue_settings(main, sub is not SubQueue.MAIN)


class _Sessions:
    """What links.py does to an actor's session registry: release a late grant."""

    def __init__(self, actor: CoreActor) -> None:
        self._actor = actor

    def release(self, owner: Receiver) -> None:
        self._actor.remove_consumer(owner)


class CoreActor:
    """One non-partitioned entity (or one partition of a partitioned one) on the core (see the module docstring)."""

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
        self.credit = Credit(self)
        self.landing = Landing()  # where the copies of this core's Publish batches land
        self.dead_letters = DeadLetterForwarding(self)
        self.on_dead_letters: Callable[[], None] | None = None  # rows came into the dead-letter queue (a relay)
        self.requests = Pending()  # requests waiting for their answer (core_requests.py)
        self.holders: dict[uuid.UUID, SubQueue] = {}  # lock token -> the sub-queue whose core holds it
        self.last_activity = self.clock.now()
        self.closed = False
        self._used = False  # AccessedAt stays unset until the entity is used (_note_use)
        self._available = True
        self._watch = SharedStoreWatch(self) if worker.shared else None
        self._session_waits: dict[Receiver, Granted] = {}  # owner -> its accept-next-session

    # ---- life -------------------------------------------------------------------------------------

    def _core_settings(self, sub: SubQueue) -> core.CoreSettings:
        return core_settings(self.settings, sub, self.node_id, self.dead_letters.forward, self.worker.shared)

    async def load(self) -> None:
        """Start a runner per sub-queue from the store's counters and metadata (no messages)."""
        for sub in SubQueue:
            runner = await PartitionRunner.start(self.refs[sub], self._core_settings(sub), self.worker, self.clock,
                                                 functools.partial(self._on_reply, sub))
            runner.on_moved = self.arrived
            self.runners[sub] = runner
            if self._watch is not None:
                self._watch.watch(sub)
        self._available = True
        if self._watch is not None:
            self._watch.start()

    def settings_changed(self) -> None:
        """Where the main queue's dead letters go changed (``dead_letter_forwarding``): its core decides by it now."""
        runner = self.runners.get(SubQueue.MAIN)
        if runner is not None:
            runner.view.settings = self._core_settings(SubQueue.MAIN)

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
        self.closed = True
        if self._watch is not None:
            self._watch.stop()
        for runner in self.runners.values():
            try:
                await asyncio.wait_for(runner.drained(), 5)
            except Exception:  # closing regardless: the store stays the truth
                log.warning("queue %s: closing with store work in flight", self.ref.entity)
            await runner.close()
        self.requests.fail_all(StoreUnavailable("the queue is closing; retry"))

    @property
    def available(self) -> bool:
        # Closed (the broker stopping): links torn down afterwards ask nothing more of the runners.
        return self._available and not self.closed and not self.worker.offline

    # ---- requests and replies ---------------------------------------------------------------------

    def _runner(self, sub: SubQueue = SubQueue.MAIN) -> PartitionRunner:
        if not self.available or sub not in self.runners:
            raise StoreUnavailable(f"the messaging store '{self.worker.name}' is unavailable; retry shortly")
        return self.runners[sub]

    def _ask(self, sub: SubQueue, request: R, command: core.Command) -> R:
        """Submit ``command``, whose ``reply_to`` is ``request``, to ``sub``'s core (rule 2)."""
        runner = self._runner(sub)
        self.requests.add(request)
        runner.submit(command)
        return request

    def _on_reply(self, sub: SubQueue, reply: core.Reply) -> None:
        requests = self.requests
        match reply:
            case core.Delivered():
                self.credit.deliver(sub, reply)
            case core.SendAccepted():
                if isinstance(reply.reply_to, Numbers):
                    requests.answer(reply.reply_to, Numbers, list(reply.sequence_numbers))
                else:
                    requests.answer(reply.reply_to, Done, None)
            case core.SettlementDone():
                self.holders.pop(reply.token, None)
                requests.answer(reply.reply_to, Done, None)
            case core.Published():
                self.landing.landed(reply)
                requests.answer(reply.reply_to, Done, None)
            case core.LockRenewed() | core.SessionRenewed():
                requests.answer(reply.reply_to, Until, reply.locked_until)
            case core.ScheduledCancelled() | core.SessionStateSet():
                requests.answer(reply.reply_to, Done, None)
            case core.SessionAccepted():
                requests.answer(reply.reply_to, Granted, (reply.session_id, reply.locked_until))
            case core.SessionState():
                requests.answer(reply.reply_to, StateRead, reply.state)
            case core.DeferredReceived():
                requests.answer(reply.reply_to, Received, self._taken(sub, reply))
            case core.CompletedThrough():
                requests.answer(reply.reply_to, Count, reply.count)
            case core.MovedOut():
                requests.answer(reply.reply_to, MovedOut, reply.sequence_numbers)
            case core.SettingsUpdated():
                for token in reply.dropped:  # a settlement with one of them is refused at once
                    self.holders.pop(token, None)
                requests.answer(reply.reply_to, Done, None)
            case core.SessionLost():
                self._session_lost(reply)
            case (core.LockLost() | core.ServerBusy() | core.Refused() | core.SessionCannotBeLocked()
                  | core.NoSessionAvailable() | core.SessionLockLost() | core.MessageNotFound()):
                self._refused(reply)
            case core.IdleExpired():
                pass  # the broker's idle sweep asks is_idle()

    def _refused(self, reply: Refusal) -> None:
        """A reply refusing its request: the lock it names is no longer held here; the request fails."""
        if isinstance(reply, core.LockLost | core.SessionLockLost) and reply.token is not None:
            self.holders.pop(reply.token, None)
        self.requests.fail(reply.reply_to, refusal(reply, self.worker.name, self.worker.full))

    @staticmethod
    def _session_lost(reply: core.SessionLost) -> None:
        cast(Receiver, reply.consumer).session_lost()  # the receiver this actor gave the core

    def _taken(self, sub: SubQueue, reply: core.DeferredReceived) -> list[Taken]:
        taken: list[Taken] = []
        for item in reply.messages:
            if item.lock_token is not None:
                self.holders[item.lock_token] = sub
            taken.append((as_delivered(item.message), item.lock_token, item.locked_until))
        return taken

    def land(self, sub: SubQueue, records: tuple[MessageRecord, ...]) -> None:
        """Rows another core's committed batch stored in ``sub`` (rule 6). Closed or offline, nothing
        to do: the store is the truth, and the window is read again when the runners start or the
        store is back."""
        runner = self.runners.get(sub)
        if runner is None or self.closed or not self._available:
            return
        runner.submit(core.Landed(records))
        runner.note_landed(sum(r.size for r in records))
        if sub is SubQueue.DEAD_LETTER and self.on_dead_letters is not None:
            self.on_dead_letters()

    def arrived(self, target: PartitionRef, count: int) -> None:
        """``count`` rows were moved into ``target`` and committed (rule 6): one of this entity's
        sub-queues, or where its dead letters are forwarded."""
        for sub, ref in self.refs.items():
            if ref == target and sub in self.runners:
                runner = self.runners[sub]
                runner.submit(core.Arrived(count))
                if not (test_defects.ACTIVE and test_defects.on("size-after-move")):  # test-only: the old defect
                    runner.refresh_size()  # rows another batch moved in: their bytes show at the next read
                if sub is SubQueue.DEAD_LETTER and count and self.on_dead_letters is not None:
                    self.on_dead_letters()
                return
        forward = self.dead_letters.target
        if forward is not None and forward is not self and target in forward.refs.values():
            forward.arrived(target, count)  # dead letters forwarded there (ForwardDeadLetteredMessagesTo)

    # ---- sending ----------------------------------------------------------------------------------

    def _check_send(self, drafts: Sequence[MessageDraft]) -> None:
        """Rule 5."""
        self._note_use()
        if self.worker.full:
            raise StoreFull(f"the messaging store '{self.worker.name}' is full: new messages are refused "
                            "until space is freed (receiving and settling go on)")
        full = entity_full(self.ref.entity, self.size_in_bytes(), sum(d.size for d in drafts),
                           self.settings.max_size_in_bytes)
        if full is not None:
            raise QuotaExceeded(full)

    def send(self, drafts: list[MessageDraft]) -> Done:
        self._check_send(drafts)
        done = Done()
        return self._ask(SubQueue.MAIN, done, core.Send(tuple(drafts), done))

    def schedule(self, drafts: list[MessageDraft]) -> Numbers:
        """ScheduleMessage: answered with the sequence numbers once the messages are durable."""
        self._check_send(drafts)
        numbers = Numbers()
        return self._ask(SubQueue.MAIN, numbers, core.Schedule(tuple(drafts), numbers))

    def cancel_scheduled(self, sequence_numbers: list[int]) -> Done:
        """All or none: MessageNotFound (nothing cancelled) unless every number is a scheduled message."""
        done = Done()
        return self._ask(SubQueue.MAIN, done, core.CancelScheduled(tuple(sequence_numbers), done))

    def submit_publish(self, entries: tuple[core.PublishEntry, ...], complete: uuid.UUID | None = None) -> Done:
        """Store copies planned by ``self.landing.entries`` in one batch of this core (``core_copies``)."""
        done = Done()
        return self._ask(SubQueue.MAIN, done, core.Publish(entries, done, complete=complete))

    def send_to_transfer_dead_letter(self, drafts: list[MessageDraft], reason: str, description: str) -> Done:
        """Messages whose forwarding ended here (the hop limit): into the transfer dead-letter queue,
        with the reason, acknowledged once stored."""
        self._check_send(drafts)
        now = self.clock.now()
        planned = [(None, [(self, SubQueue.TRANSFER_DEAD_LETTER,
                            wire.dead_lettered(core.record_for(d, now, None), reason, description))])
                   for d in without_pings(drafts)[0]]
        return self.submit_publish(self.landing.entries(planned))

    def note_activity(self) -> None:
        self._note_use()
        if self.available and SubQueue.MAIN in self.runners:
            self.runners[SubQueue.MAIN].submit(core.Touch())

    # ---- settling ---------------------------------------------------------------------------------

    def holds(self, token: uuid.UUID) -> bool:
        return token in self.holders

    def _settle(self, token: uuid.UUID, outcome: Outcome, properties: AnnotationEdits | None = None,
                reason: str | None = None, description: str | None = None) -> Done:
        sub = self.holders.get(token)
        if sub is None:
            raise MessageLockLost(LOCK_SUPPLIED_INVALID)
        edits = tuple((str(k), v) for k, v in properties.items()) if properties else ()
        done = Done()
        return self._ask(sub, done, core.Settle(token, outcome, done, edits, reason, description))

    def complete(self, token: uuid.UUID) -> Done:
        return self._settle(token, Outcome.COMPLETE)

    def abandon(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> Done:
        return self._settle(token, Outcome.ABANDON, properties_to_modify)

    def defer(self, token: uuid.UUID, properties_to_modify: AnnotationEdits | None = None) -> Done:
        return self._settle(token, Outcome.DEFER, properties_to_modify)

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None,
                    properties_to_modify: AnnotationEdits | None = None) -> Done:
        return self._settle(token, Outcome.DEAD_LETTER, properties_to_modify, reason, description)

    def release(self, token: uuid.UUID) -> None:
        sub = self.holders.get(token)
        if sub is not None and self.available:
            self.runners[sub].submit(core.Settle(token, Outcome.RELEASE))

    def unsent(self, sub: SubQueue, records: Sequence[MessageRecord]) -> None:
        """ReceiveAndDelete messages taken for a receiver whose transfers were never written (its link,
        session or connection went away first): put back in place (``core.Unsent``), each with the
        record its delivery carried."""
        runner = self.runners.get(sub)
        if runner is None or not records:
            return
        if test_defects.ACTIVE and test_defects.on("rad-drop"):
            return  # test-only: the old defect, the messages dropped instead of put back
        runner.submit(core.Unsent(tuple(records)))
        trace = delivery_trace.current()
        if trace is not None:
            for record in records:
                trace.restored(self.refs[sub].entity, record.sequence_number)

    def renew_lock(self, token: uuid.UUID) -> Until:
        sub = self.holders.get(token)
        if sub is None:
            raise MessageLockLost(LOCK_SUPPLIED_INVALID)
        until = Until()
        return self._ask(sub, until, core.RenewLock(token, until))

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
                         session_id: str | None) -> Received:
        """Receive deferred messages by number, all or none: (record, lock token, locked until) each."""
        self.note_activity()
        mode = core.ReceiveMode.PEEK_LOCK if peek_lock else core.ReceiveMode.RECEIVE_AND_DELETE
        received = Received()
        return self._ask(sub, received, core.ReceiveDeferred(tuple(sequence_numbers), received, mode, session_id))

    def complete_through(self, sub: SubQueue, sequence_number: int) -> Count:
        """Remove the unlocked messages numbered ``sequence_number`` or lower (docs/spark.md); answered
        with how many went, once that is durable."""
        self.note_activity()
        count = Count()
        return self._ask(sub, count, core.CompleteThrough(sequence_number, count))

    async def bounds(self, sub: SubQueue) -> tuple[int | None, int]:
        """(first stored number or None, the number after the highest made visible)."""
        self._runner(sub)
        ref, worker = self.refs[sub], self.worker
        counts = await worker.call(lambda: worker.store.counts(ref))
        # Partition i numbers from (i << 48) + 1 (port.numbering_base), before its first message too.
        return counts.first_sequence_number, max(counts.last_sequence_number, numbering_base(ref)) + 1

    async def fetch(self, sub: SubQueue, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        """The stored rows with these numbers, with their locks (missing ones omitted), from the store."""
        self._runner(sub)
        ref, worker, numbers = self.refs[sub], self.worker, tuple(sequence_numbers)
        return await worker.call(lambda: worker.store.fetch(ref, numbers))

    def move_out(self, sub: SubQueue, items: Sequence[MoveItem], target: PartitionRef | None) -> MovedOut:
        """Move the rows not locked into ``target`` (a partition of this store) or delete them
        (``server/moves.py``); answered, per item, with its number in the target (or its own, deleted)
        or None, once durable."""
        self.note_activity()
        into = None if target is None else (target.entity, target.partition)
        moved = MovedOut()
        return self._ask(sub, moved, core.MoveOut(tuple(items), moved, into))

    # ---- receivers (core_credit.py) -------------------------------------------------------------------

    def add_consumer(self, consumer: Receiver) -> None:
        self._note_use(consumer)
        self.credit.add(consumer)

    def remove_consumer(self, consumer: Receiver) -> None:
        """A receiver left: its credit ends; its locks live on in the store until they expire (a
        session receiver's session is released, and the messages riding on it with it)."""
        self.credit.remove(consumer)

    def credit_changed(self, consumer: Receiver) -> None:
        self._note_use(consumer)
        self.credit.changed(consumer)

    def ready(self, sub: SubQueue) -> int:
        return self.credit.ready(sub)

    def given(self, consumer: Receiver) -> int:
        return self.credit.given_to(consumer)

    def withdraw_credit(self, consumer: Receiver) -> int:
        return self.credit.withdraw(consumer)

    async def caught_up(self, sub: SubQueue) -> None:
        await self.credit.caught_up(sub)

    # ---- sessions ---------------------------------------------------------------------------------

    def accept_session(self, owner: Receiver, session_id: str | None, timeout_ms: int) -> Granted:
        self._note_use()
        wait_until = self.clock.now() + timeout_ms if session_id is None else None
        # The core grants sessions to receivers it knows: register this one (no credit yet).
        self._runner(SubQueue.MAIN).submit(core.Receive(owner, 0, mode_of(owner)))
        granted = Granted()
        self._ask(SubQueue.MAIN, granted, core.AcceptSession(owner, session_id, granted, wait_until))
        if session_id is None and not granted.done():
            self._session_waits[owner] = granted
            granted.add_done_callback(lambda _: self._session_waits.pop(owner, None))
        return granted

    def cancel_session_wait(self, owner: Receiver) -> None:
        """Withdraw ``owner``'s wait for the next session (another partition granted it one): the
        core forgets the receiver (a session granted meanwhile is released) and the wait ends with
        OperationTimeout, so nothing waits for a reply that will not come."""
        granted = self._session_waits.pop(owner, None)
        self.remove_consumer(owner)
        if granted is not None:
            self.requests.fail(granted, OperationTimeout("another partition granted the session"))

    def renew_session_lock(self, session_id: str) -> Until:
        until = Until()
        return self._ask(SubQueue.MAIN, until, core.RenewSessionLock(session_id, until))

    def get_session_state(self, session_id: str) -> asyncio.Future[bytes | None]:
        state = StateRead()
        held = self._ask(SubQueue.MAIN, state, core.GetSessionState(session_id, state))
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

    def set_session_state(self, session_id: str, state: bytes | None) -> Done:
        done = Done()
        return self._ask(SubQueue.MAIN, done, core.SetSessionState(session_id, state, done))

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

    # ---- ForwardDeadLetteredMessagesTo (dead_letter_forwarding.py), as the broker sets it ----------

    def forward_dead_letters(self, target: CoreActor | None, sub: SubQueue = SubQueue.MAIN, *, source: str = "",
                             hop_limit: str | None = None) -> None:
        self.dead_letters.forward_to(target, sub, source=source, hop_limit=hop_limit)

    def relay_dead_letters(self, source: str, default_ttl: int | None, hop_limit: str | None = None) -> None:
        self.dead_letters.relay(source, default_ttl, hop_limit)

    def dead_letter_copy(self, record: MessageRecord, now: int) -> Copy:
        return self.dead_letters.copy(record, now)

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

    def size_in_bytes(self) -> int:
        return sum(runner.size_in_bytes for runner in self.runners.values())

    def activity(self) -> tuple[int, int]:
        """(last activity in ms, receivers attached here): what this node registers for AutoDeleteOnIdle."""
        runner = self.runners.get(SubQueue.MAIN)
        last = self.last_activity if runner is None else max(self.last_activity, runner.view.last_activity)
        return last, len(self.credit.receivers)

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
        if runner is None or self.credit.receivers:
            return False
        last = max(self.last_activity, runner.view.last_activity)
        return now - last >= idle_for and runner.view.counts.scheduled == 0

    drops_locks_on_update = True  # a topic's own locks (its activator's) are no receiver's: kept

    def update_settings(self, settings: EntitySettings) -> asyncio.Future[None]:
        """Rule 7: message locks end as lapsed ones (the delivery counts), released in the store so the
        message is free at once; session holders lose their sessions. Answered once every sub-queue's
        core dropped them."""
        self.settings = settings
        waits: list[Done] = []
        for sub, runner in self.runners.items():
            done = self.requests.add(Done())
            waits.append(done)
            runner.submit(core.UpdateSettings(self._core_settings(sub), done, drop_locks=self.drops_locks_on_update))
        if not waits:  # not loaded (its store offline at start): load() takes the settings
            loaded = Done()
            loaded.set_result(None)
            return loaded
        return without_value(asyncio.gather(*waits))


def without_value(future: asyncio.Future[T]) -> asyncio.Future[None]:
    """``future``'s outcome without its value."""
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
