"""One sub-queue of one partition of an entity: ordering, states, locks, expiry. Pure and clock-free.

Theory of operation: the partition holds its stored messages by sequence number. Active ones wait
in a heap a receiver takes from; scheduled ones wait in a heap by activation time; deferred ones
wait only to be asked for by sequence number (transfers-locks-settlement seed, message-expiration
seed). ``accept`` assigns sequence numbers; records become visible only once ``publish`` is called
after their store transaction has committed, so no receiver ever sees a message whose send was not
acknowledged. A PeekLock receive moves a message into ``locks``; complete removes it, abandon and
lock expiry put it back with the delivery count raised, release puts it back unchanged (the SDK's
unsolicited pre-settled ``released``, sdk-wire-contract.md pitfall 18), defer parks it. Because the
heap is ordered by sequence number, a message put back is the next one delivered, as Service Bus
does.

Expiry (message-expiration seed): a message past ``expires_at`` is never handed out. Expired
messages leave at the first of: a receive that meets them, the timer sweep (``expire``), or the
end of a lock they were under; a locked message is unaffected until then. A message whose delivery
count reaches MaxDeliveryCount leaves the same way. Leaving messages go to ``outbox`` as effects;
the caller moves them to the dead-letter sub-queue or deletes them, and stores that.

Every method that changes what a restart must see returns what to store, or puts it in the outbox.
Locks are volatile, as in Service Bus: they live here only. Time is always an argument (ms).

The delivery count survives a crash: before a locked message is handed out the caller stores
``claim`` (the count as the end of this lock will make it), so a broker killed while the message
is locked restarts with the delivery counted, as if the lock had expired. A release (the receiver
never looked at it) stores the count back. A message whose stored count has reached
MaxDeliveryCount is dead-lettered when a receive meets it, not handed out again.

A lock taken for a transfer (``lock_next(..., in_flight=True)``) is in flight until the caller says
the message has left (``sent``): its claim may still be committing. An in-flight lock has no expiry
(its clock starts when the message leaves, so a slow commit cannot make it lapse before the
receiver could see it), and if it ends before the message left (the receiver went, the session
ended, the entity changed) the delivery does not count: a message never transferred is never
dead-lettered for MaxDeliveryCount.

Session messages (a session entity's own sub-queue) ride on their session's lock: they have no
expiry of their own, their locked-until is the session's (``extend_session`` keeps them in step
when the caller renews the session), ``renew`` refuses them, and they end with the session
(``drop_session``).
"""

from __future__ import annotations

import heapq
import uuid
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from sodalite.errors import InvalidOperation, MessageLockLost, MessageNotFound
from sodalite.model.message import MessageRecord, MessageState, MessageUpdate

TokenFactory = Callable[[], uuid.UUID]

MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"  # dead-letter reasons the service sets
TTL_EXPIRED = "TTLExpiredException"
MAX_TRANSFER_HOP_COUNT_EXCEEDED = "MaxTransferHopCountExceeded"
# The paired-namespace ping (paired-namespaces seed): every entity accepts it, session-enabled ones
# without a SessionId, and it is then dropped: never stored, delivered, peeked, counted, fanned out,
# forwarded, scheduled or dead-lettered. It counts only as a send for authorization and idle time.
PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"


@dataclass(frozen=True, slots=True)
class MessageDraft:
    """A message as a sender gave it, before the broker assigned a sequence number."""

    message_id: str | None
    session_id: str | None
    partition_key: str | None
    time_to_live: int | None
    scheduled_enqueue_time: int | None
    durable: bool | None
    priority: int | None
    annotations: bytes
    annotation_count: int
    tail: bytes
    ping: bool = False  # ContentType application/vnd.ms-servicebus-ping: accepted, never stored (PING)

    @property
    def size(self) -> int:
        return len(self.annotations) + len(self.tail)


@dataclass(slots=True)
class Lock:
    token: uuid.UUID
    sequence_number: int
    locked_until: int
    owner: Any  # whoever received it (a receiver link); the lock outlives it, until it expires
    deferred: bool = False  # a deferred message goes back to deferred, not to the receivable heap
    session_bound: bool = False  # held under its session's lock: no expiry of its own
    in_flight: bool = False  # taken for a transfer not yet sent: no expiry, and its end counts no delivery


@dataclass(frozen=True, slots=True)
class Expired:
    """The message expired and left the partition."""

    record: MessageRecord


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """The service dead-lettered the message (MaxDeliveryCount); it left the partition."""

    record: MessageRecord
    reason: str
    description: str


Effect = Expired | DeadLettered


# The latest expiry a store can hold (a signed 64-bit count of milliseconds): a message scheduled near
# the end of time with a TTL expires there rather than overflowing the store's column.
LAST_INSTANT_MS = 2**63 - 1


class Partition:
    def __init__(self, messages: Iterable[MessageRecord], last_sequence_number: int,
                 token_factory: TokenFactory = uuid.uuid4, *, max_delivery_count: int | None = None,
                 sessions: bool = False) -> None:
        self.messages: dict[int, MessageRecord] = {}
        self.max_delivery_count = max_delivery_count
        # A session entity keeps one receivable heap per session id; any other entity one heap (key None).
        self.sessions = sessions
        self.locks: dict[uuid.UUID, Lock] = {}
        self.outbox: list[Effect] = []
        self.last_sequence_number = last_sequence_number
        self._new_token = token_factory
        self._locked_seq: set[int] = set()
        self._available: dict[str | None, list[int]] = {}
        self._receivable: Counter[str | None] = Counter()  # active, unlocked messages per heap key
        self._scheduled: list[tuple[int, int]] = []  # (activation time, seq)
        self._ttl: list[tuple[int, int]] = []  # (expires_at, seq)
        self._expiries: list[tuple[int, uuid.UUID]] = []  # lock expiries; stale entries skipped
        self._order: list[int] = []  # sequence numbers for peek, ascending; removed ones skipped lazily
        self._removed_in_order = 0
        self._state_counts = {state: 0 for state in MessageState}
        self.size_in_bytes = 0  # of every stored message here, for MaxSizeInMegabytes
        records = sorted(messages, key=lambda r: r.sequence_number)
        for record in records:
            self.last_sequence_number = max(self.last_sequence_number, record.sequence_number)
        # The highest number ever made visible here: everything the store held at load was committed.
        self.visible_through = self.last_sequence_number
        # Numbers accepted here whose records are not published yet (their commit is in flight).
        self._unpublished: set[int] = set()
        self.publish(records)

    # ---- sending ----------------------------------------------------------------------------

    def accept(self, drafts: Iterable[MessageDraft], now: int, default_ttl: int | None) -> list[MessageRecord]:
        """Assign sequence numbers and times; the records still need committing, then ``publish``.

        A message scheduled for later is enqueued at its scheduled time, and its time-to-live counts
        from then (message-expiration seed).
        """
        records: list[MessageRecord] = []
        seq = self.last_sequence_number
        for d in drafts:
            seq += 1
            ttl = d.time_to_live
            effective = default_ttl if ttl is None else (ttl if default_ttl is None else min(ttl, default_ttl))
            scheduled = d.scheduled_enqueue_time is not None and d.scheduled_enqueue_time > now
            enqueued = d.scheduled_enqueue_time if scheduled and d.scheduled_enqueue_time is not None else now
            # The entity's default is also the ceiling: a longer TTL is silently reduced, and the
            # message carries the TTL that applies (message-expiration seed).
            records.append(MessageRecord(
                seq, enqueued, d.message_id, d.session_id, d.partition_key, effective,
                None if effective is None else min(enqueued + effective, LAST_INSTANT_MS), d.scheduled_enqueue_time, 0,
                MessageState.SCHEDULED if scheduled else MessageState.ACTIVE, d.durable, d.priority,
                d.annotations, d.annotation_count, d.tail,
            ))
        self.last_sequence_number = seq
        self._unpublished.update(r.sequence_number for r in records)
        return records

    def publish(self, records: Iterable[MessageRecord]) -> None:
        """Make committed records visible: receivable, scheduled or deferred by their state."""
        order = self._order
        for record in records:
            seq = record.sequence_number
            previous = self.messages.get(seq)
            if previous is not None:
                self._state_counts[previous.state] -= 1
                self.size_in_bytes -= previous.size
            self.messages[seq] = record
            self.size_in_bytes += record.size
            if seq > self.visible_through:
                self.visible_through = seq
            self._unpublished.discard(seq)
            self._state_counts[record.state] += 1
            key = self._key(record)
            if previous is not None and previous.state == MessageState.ACTIVE and seq not in self._locked_seq:
                self._receivable[key] -= 1
            if record.state == MessageState.ACTIVE and seq not in self._locked_seq:
                self._receivable[key] += 1
            if previous is None:
                if not order or order[-1] < seq:
                    order.append(seq)
                else:
                    insort(order, seq)  # a message moved in from elsewhere keeps its older number
            if record.state == MessageState.ACTIVE:
                heapq.heappush(self._available.setdefault(key, []), seq)
            elif record.state == MessageState.SCHEDULED and record.scheduled_enqueue_time is not None:
                heapq.heappush(self._scheduled, (record.scheduled_enqueue_time, seq))
            if record.expires_at is not None:
                heapq.heappush(self._ttl, (record.expires_at, seq))

    # ---- counts and peek ----------------------------------------------------------------------

    def _key(self, record: MessageRecord) -> str | None:
        return record.session_id if self.sessions else None

    @property
    def available_count(self) -> int:
        """Active messages not under a lock: what a receiver could take now (expired ones aside)."""
        return sum(self._receivable.values())

    def session_available(self, session_id: str | None) -> int:
        """Receivable messages of one session (session entities)."""
        return self._receivable[session_id]

    def sessions_with_messages(self) -> list[str]:
        """Session ids with receivable messages, oldest first message first."""
        firsts = []
        for key, count in self._receivable.items():
            if count > 0 and key is not None:
                heap = self._available.get(key)
                firsts.append((heap[0] if heap else 0, key))
        return [key for _, key in sorted(firsts)]

    def session_ids(self) -> set[str]:
        """Every session id that has a message here, in any state."""
        return {r.session_id for r in self.messages.values() if r.session_id is not None}

    def count(self, state: MessageState) -> int:
        """Messages in ``state``, locked or not (Service Bus counts locked messages as active)."""
        return self._state_counts[state]

    def has_available(self, session_id: str | None = None) -> bool:
        """Anything receivable: in the whole partition, or in one session of a session entity."""
        if self.sessions and session_id is not None:
            return self._receivable[session_id] > 0
        return self.available_count > 0

    def peek(self, from_sequence_number: int, count: int, session_id: str | None = None) -> list[MessageRecord]:
        """Up to ``count`` stored messages from ``from_sequence_number`` on, in any state, locked or not."""
        order, messages = self._order, self.messages
        out: list[MessageRecord] = []
        i = bisect_left(order, from_sequence_number)
        while i < len(order) and len(out) < count:
            record = messages.get(order[i])
            if record is not None and (session_id is None or record.session_id == session_id):
                out.append(record)
            i += 1
        return out

    def forget_unpublished(self, sequence_numbers: Iterable[int]) -> None:
        """Numbers accepted here that will never be published here (stored in another sub-queue, or
        their commit failed)."""
        self._unpublished.difference_update(sequence_numbers)

    @property
    def next_visible(self) -> int:
        """A number such that every message numbered below it that will ever be visible here is
        visible now: one past the highest visible, or the lowest number still being committed.
        Commits that land in another actor's batch (transactions, fan-out) can publish out of order,
        so the lowest unpublished number bounds it."""
        return min(min(self._unpublished, default=self.visible_through + 1), self.visible_through + 1)

    def first_sequence_number(self) -> int | None:
        """The lowest sequence number stored here, in any state; None when the partition is empty."""
        return next((seq for seq in self._order if seq in self.messages), None)

    # ---- completing through a sequence number (a Sodalite extension, docs/spark.md) -----------

    def complete_through(self, sequence_number: int) -> list[int]:
        """Remove every stored message numbered ``sequence_number`` or lower, in any state, except
        locked ones (a receiver holds them; they stay theirs to settle). Returns the numbers removed,
        for the store delete; calling it again removes nothing more."""
        removed: list[int] = []
        for seq in self._order[: bisect_right(self._order, sequence_number)]:
            if seq in self.messages and seq not in self._locked_seq:
                self._remove(seq)
                removed.append(seq)
        return removed

    # ---- receiving --------------------------------------------------------------------------

    def _next_receivable(self, now: int | None, session_id: str | None) -> MessageRecord | None:
        """Pop the first active, unlocked, unexpired message off the heap; expired ones leave."""
        available = self._available.get(session_id if self.sessions else None)
        messages = self.messages
        while available:
            seq = heapq.heappop(available)
            record = messages.get(seq)
            if record is None or seq in self._locked_seq or record.state != MessageState.ACTIVE:
                continue  # stale heap entry
            if now is not None and record.expires_at is not None and record.expires_at <= now:
                self._remove(seq)
                self.outbox.append(Expired(record))
                continue
            if self.max_delivery_count is not None and record.delivery_count >= self.max_delivery_count:
                self._remove(seq)  # every delivery so far ended without a settlement (a crash, say)
                self.outbox.append(DeadLettered(record, MAX_DELIVERY_COUNT_EXCEEDED,
                                                f"delivered {record.delivery_count} times"))
                continue
            return record
        return None

    def lock_next(self, now: int, lock_duration: int, owner: Any, session_id: str | None = None,
                  session_until: int | None = None, in_flight: bool = False) -> tuple[MessageRecord, Lock] | None:
        """PeekLock: lock the first receivable message (of ``session_id`` in a session entity).

        With ``session_until`` (the session's locked-until) the lock rides on the session lock. With
        ``in_flight`` the lock's clock starts only at ``sent`` (see the module docstring)."""
        record = self._next_receivable(now, session_id)
        if record is None:
            return None
        return record, self._new_lock(record.sequence_number, now, lock_duration, owner, deferred=False,
                                      session_until=session_until, in_flight=in_flight)

    def sent(self, token: uuid.UUID, now: int, lock_duration: int) -> Lock | None:
        """The in-flight lock's message leaves now: its lock runs from here (a session message's
        still rides on its session). None if the lock ended while in flight."""
        lock = self.locks.get(token)
        if lock is None:
            return None
        if lock.in_flight:
            lock.in_flight = False
            if not lock.session_bound:
                lock.locked_until = now + lock_duration
                heapq.heappush(self._expiries, (lock.locked_until, lock.token))
        return lock

    def take_next(self, now: int | None = None, session_id: str | None = None) -> MessageRecord | None:
        """ReceiveAndDelete: remove the first receivable message (the caller deletes it in the store)."""
        record = self._next_receivable(now, session_id)
        if record is not None:
            self._remove(record.sequence_number)
        return record

    def _new_lock(self, seq: int, now: int, lock_duration: int, owner: Any, deferred: bool,
                  session_until: int | None = None, in_flight: bool = False) -> Lock:
        bound = session_until is not None
        until = session_until if session_until is not None else now + lock_duration
        lock = Lock(self._new_token(), seq, until, owner, deferred, bound, in_flight)
        self.locks[lock.token] = lock
        self._locked_seq.add(seq)
        if not deferred:
            self._receivable[self._key(self.messages[seq])] -= 1
        if not bound and not in_flight:
            heapq.heappush(self._expiries, (lock.locked_until, lock.token))
        return lock

    def _deferred(self, seq: int) -> MessageRecord:
        record = self.messages.get(seq)
        if record is None or record.state != MessageState.DEFERRED or seq in self._locked_seq:
            raise MessageNotFound(f"no deferred message with sequence number {seq} is available")
        return record

    def lock_deferred(self, sequence_numbers: Iterable[int], now: int, lock_duration: int, owner: Any,
                      session_until: Callable[[str], int] | None = None) -> list[tuple[MessageRecord, Lock]]:
        """Receive deferred messages by sequence number under PeekLock (all or none).

        ``session_until`` gives a session's locked-until (raising if the session is not held): a
        session message's lock rides on it."""
        records = [self._deferred(seq) for seq in dict.fromkeys(sequence_numbers)]
        untils = [session_until(r.session_id) if session_until is not None and r.session_id is not None else None
                  for r in records]
        return [(r, self._new_lock(r.sequence_number, now, lock_duration, owner, deferred=True,
                                   session_until=until))
                for r, until in zip(records, untils, strict=True)]

    def take_deferred(self, sequence_numbers: Iterable[int]) -> list[MessageRecord]:
        """Receive deferred messages by sequence number, removing them (ReceiveAndDelete)."""
        records = [self._deferred(seq) for seq in dict.fromkeys(sequence_numbers)]
        for record in records:
            self._remove(record.sequence_number)
        return records

    # ---- settlement -------------------------------------------------------------------------

    def _lock(self, token: uuid.UUID, now: int) -> Lock:
        lock = self.locks.get(token)
        if lock is None:
            raise MessageLockLost("the lock token is unknown or the lock was lost")
        if lock.locked_until <= now:
            raise MessageLockLost("the lock has expired")
        return lock

    def complete(self, token: uuid.UUID, now: int) -> int:
        """Remove the locked message; return its sequence number for the store delete."""
        lock = self._lock(token, now)
        self._drop_lock(lock)
        self._remove(lock.sequence_number)
        return lock.sequence_number

    def dead_letter(self, token: uuid.UUID, now: int) -> MessageRecord:
        """Remove the locked message for the caller to move to the dead-letter sub-queue."""
        lock = self._lock(token, now)
        self._drop_lock(lock)
        return self._remove(lock.sequence_number)

    def abandon(self, token: uuid.UUID, now: int) -> MessageUpdate:
        """Unlock and make receivable again with the delivery count raised."""
        return self._unlock(self._lock(token, now), count_delivery=True, now=now)

    def modify_locked(self, token: uuid.UUID, now: int, annotations: bytes, annotation_count: int) -> MessageRecord:
        """Replace the locked message's annotations (abandon or defer with properties to modify)."""
        lock = self._lock(token, now)
        record = replace(self.messages[lock.sequence_number], annotations=annotations,
                         annotation_count=annotation_count)
        self._replace(record)
        return record

    def _replace(self, record: MessageRecord) -> None:
        previous = self.messages[record.sequence_number]
        self.size_in_bytes += record.size - previous.size
        self.messages[record.sequence_number] = record

    def defer(self, token: uuid.UUID, now: int) -> MessageUpdate:
        """Park the locked message: only a receive by its sequence number gets it again."""
        lock = self._lock(token, now)
        self._drop_lock(lock)
        record = replace(self.messages[lock.sequence_number], state=MessageState.DEFERRED)
        self.publish([record])
        return MessageUpdate(record.sequence_number, record.delivery_count, record.state)

    def release(self, token: uuid.UUID) -> MessageUpdate | None:
        """Unlock without counting a delivery (the receiver never looked at the message); the update
        stores the count back to what it was before ``claim``."""
        lock = self.locks.get(token)
        if lock is None:
            return None
        return self._unlock(lock, count_delivery=False, now=None)

    @staticmethod
    def claim(record: MessageRecord) -> MessageUpdate:
        """What to store before handing out a locked message: its delivery already counted."""
        return MessageUpdate(record.sequence_number, record.delivery_count + 1, record.state)

    def renew(self, token: uuid.UUID, now: int, lock_duration: int) -> int:
        lock = self._lock(token, now)
        if lock.session_bound:
            raise InvalidOperation("a message of a session has no lock of its own to renew; "
                                   "renew the session lock (renew-session-lock)")
        lock.locked_until = now + lock_duration
        heapq.heappush(self._expiries, (lock.locked_until, lock.token))
        return lock.locked_until

    def extend_session(self, session_id: str, until: int) -> None:
        """The session's lock now runs to ``until``: so do the locks of its messages."""
        for lock in self.locks.values():
            if lock.session_bound and self.messages[lock.sequence_number].session_id == session_id:
                lock.locked_until = until

    def drop_session(self, session_id: str) -> list[MessageUpdate]:
        """The session's lock ended (released, lost or expired): its messages' locks end as expired."""
        gone = [lock for lock in self.locks.values()
                if lock.session_bound and self.messages[lock.sequence_number].session_id == session_id]
        return [self._unlock(lock, count_delivery=not lock.in_flight, now=None) for lock in gone]

    def drop_owner(self, owner: Any) -> list[MessageUpdate]:
        """The receiver went away (link detached, connection lost): its locks end as expired."""
        gone = [lock for lock in self.locks.values() if lock.owner is owner]
        return [self._unlock(lock, count_delivery=not lock.in_flight, now=None) for lock in gone]

    # ---- scheduling ---------------------------------------------------------------------------

    def cancel_scheduled(self, sequence_numbers: Iterable[int]) -> list[int]:
        """Remove scheduled messages (all or none); return their numbers for the store delete."""
        numbers = list(dict.fromkeys(sequence_numbers))
        for seq in numbers:
            record = self.messages.get(seq)
            if record is None or record.state != MessageState.SCHEDULED:
                raise MessageNotFound(f"no scheduled message with sequence number {seq}")
        for seq in numbers:
            self._remove(seq)
        return numbers

    def take_unlocked(self, sequence_numbers: Iterable[int],
                      states: frozenset[MessageState] | None = None) -> list[MessageRecord]:
        """Remove the named messages that are here, unlocked and (if ``states`` is given) in one of
        those states; others are skipped. For moves and purges: the caller deletes them in the store."""
        taken: list[MessageRecord] = []
        for seq in dict.fromkeys(sequence_numbers):
            record = self.messages.get(seq)
            if record is None or seq in self._locked_seq or (states is not None and record.state not in states):
                continue
            taken.append(self._remove(seq))
        return taken

    # ---- time ---------------------------------------------------------------------------------

    def on_time(self, now: int) -> list[MessageUpdate]:
        """Everything due at ``now``: lock expiries, scheduled activations, message expiries."""
        return self.expire_locks(now) + self.activate(now) + self._expire(now)

    def expire_locks(self, now: int) -> list[MessageUpdate]:
        """Locks past their time end as an abandon would (Service Bus counts the delivery)."""
        updates: list[MessageUpdate] = []
        while self._expiries and self._expiries[0][0] <= now:
            until, token = heapq.heappop(self._expiries)
            lock = self.locks.get(token)
            if lock is not None and lock.locked_until == until:
                updates.append(self._unlock(lock, count_delivery=True, now=now))
        return updates

    def activate(self, now: int) -> list[MessageUpdate]:
        """Scheduled messages whose time has come become active."""
        updates: list[MessageUpdate] = []
        while self._scheduled and self._scheduled[0][0] <= now:
            _, seq = heapq.heappop(self._scheduled)
            record = self.messages.get(seq)
            if record is None or record.state != MessageState.SCHEDULED:
                continue
            record = replace(record, state=MessageState.ACTIVE)
            self.publish([record])
            updates.append(MessageUpdate(seq, record.delivery_count, record.state))
        return updates

    def _expire(self, now: int) -> list[MessageUpdate]:
        """Expired messages not under a lock leave (into the outbox)."""
        while self._ttl and self._ttl[0][0] <= now:
            expires_at, seq = heapq.heappop(self._ttl)
            record = self.messages.get(seq)
            if record is None or record.expires_at != expires_at or seq in self._locked_seq:
                continue  # gone, replaced, or locked: its unlock will judge it
            if record.state == MessageState.SCHEDULED:
                continue  # not yet enqueued (an expiry at or before activation is judged then)
            self._remove(seq)
            self.outbox.append(Expired(record))
        return []

    def next_due(self) -> int | None:
        """The earliest time ``on_time`` has something to do."""
        candidates = [t for t in (self.next_lock_expiry(),
                                  self._scheduled[0][0] if self._scheduled else None,
                                  self._ttl[0][0] if self._ttl else None) if t is not None]
        return min(candidates, default=None)

    def next_lock_expiry(self) -> int | None:
        expiries = self._expiries
        while expiries:
            until, token = expiries[0]
            lock = self.locks.get(token)
            if lock is not None and lock.locked_until == until:
                return until
            heapq.heappop(expiries)  # settled, released or renewed since
        return None

    def take_outbox(self) -> list[Effect]:
        effects, self.outbox = self.outbox, []
        return effects

    # ---- internals ----------------------------------------------------------------------------

    def _drop_lock(self, lock: Lock) -> None:
        """Forget the lock; the message counts as receivable again until the caller says otherwise."""
        del self.locks[lock.token]
        self._locked_seq.discard(lock.sequence_number)
        if not lock.deferred:
            self._receivable[self._key(self.messages[lock.sequence_number])] += 1

    def _remove(self, seq: int) -> MessageRecord:
        record = self.messages.pop(seq)
        self._state_counts[record.state] -= 1
        self.size_in_bytes -= record.size
        if record.state == MessageState.ACTIVE and seq not in self._locked_seq:
            self._receivable[self._key(record)] -= 1
        self._removed_in_order += 1
        if self._removed_in_order > 1024 and self._removed_in_order * 2 > len(self._order):
            self._order = [s for s in self._order if s in self.messages]
            self._removed_in_order = 0
        return record

    def _unlock(self, lock: Lock, count_delivery: bool, now: int | None) -> MessageUpdate:
        self._drop_lock(lock)
        seq = lock.sequence_number
        record = self.messages[seq]
        if count_delivery:
            record = replace(record, delivery_count=record.delivery_count + 1)
        update = MessageUpdate(seq, record.delivery_count, record.state)
        if self.max_delivery_count is not None and record.delivery_count >= self.max_delivery_count:
            self._remove(seq)
            self.outbox.append(DeadLettered(record, MAX_DELIVERY_COUNT_EXCEEDED,
                                            f"delivered {record.delivery_count} times"))
        elif now is not None and record.expires_at is not None and record.expires_at <= now:
            self._remove(seq)
            self.outbox.append(Expired(record))
        elif count_delivery or lock.deferred:
            self.publish([record])  # back to the heap, or back to deferred
        else:
            heapq.heappush(self._available.setdefault(self._key(record), []), seq)
            if record.expires_at is not None:  # the sweep skipped it while locked: it judges it again
                heapq.heappush(self._ttl, (record.expires_at, seq))
        return update
