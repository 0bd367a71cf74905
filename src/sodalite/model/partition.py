"""One partition of an entity: ordering, locks and settlement, pure and clock-free.

Theory of operation: the partition holds its stored messages by sequence number and a heap of
the ones a receiver may take. ``accept`` assigns sequence numbers to new messages; they become
receivable only once ``publish`` is called after their store transaction has committed, so no
receiver ever sees a message whose send was not acknowledged. A PeekLock receive moves a message
from the heap into ``locks``; complete removes it, abandon and lock expiry put it back (delivery
count raised), release puts it back unchanged (the SDK's unsolicited pre-settled ``released``,
sdk-wire-contract.md pitfall 18). Because the heap is ordered by sequence number, a message put
back is the next one delivered, as Service Bus does.

Every method that changes what a restart must see returns the store operations describing it;
the caller commits them (one batch for many calls) before acknowledging anything. Locks are
volatile, as in Service Bus: they live here only and are gone after a restart. Time is always an
argument (ms since the epoch).
"""

from __future__ import annotations

import heapq
import uuid
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from sodalite.errors import MessageLockLost
from sodalite.model.message import MessageRecord, MessageState, MessageUpdate

TokenFactory = Callable[[], uuid.UUID]


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

    @property
    def size(self) -> int:
        return len(self.annotations) + len(self.tail)


@dataclass(slots=True)
class Lock:
    token: uuid.UUID
    sequence_number: int
    locked_until: int
    owner: Any  # whoever received it (a receiver link); its locks go when it goes


class Partition:
    def __init__(self, messages: Iterable[MessageRecord], last_sequence_number: int,
                 token_factory: TokenFactory = uuid.uuid4) -> None:
        self.messages: dict[int, MessageRecord] = {}
        self._order: list[int] = []  # sequence numbers for peek, ascending; removed ones skipped lazily
        self._removed_in_order = 0
        self._available: list[int] = []
        self.locks: dict[uuid.UUID, Lock] = {}
        self._expiries: list[tuple[int, uuid.UUID]] = []  # (locked_until, token); stale entries skipped
        self._locked_seq: set[int] = set()
        self.last_sequence_number = last_sequence_number
        self._new_token = token_factory
        for record in messages:
            self.messages[record.sequence_number] = record
            if record.state == MessageState.ACTIVE:
                self._available.append(record.sequence_number)
            self.last_sequence_number = max(self.last_sequence_number, record.sequence_number)
        heapq.heapify(self._available)
        self._order = sorted(self.messages)

    # ---- sending ----------------------------------------------------------------------------

    def accept(self, drafts: Iterable[MessageDraft], now: int, default_ttl: int | None) -> list[MessageRecord]:
        """Assign sequence numbers and enqueued times; the records still need committing."""
        records: list[MessageRecord] = []
        seq = self.last_sequence_number
        for d in drafts:
            seq += 1
            ttl = d.time_to_live
            effective = default_ttl if ttl is None else (ttl if default_ttl is None else min(ttl, default_ttl))
            records.append(MessageRecord(
                seq, now, d.message_id, d.session_id, d.partition_key, ttl,
                None if effective is None else now + effective, d.scheduled_enqueue_time, 0,
                MessageState.ACTIVE, d.durable, d.priority, d.annotations, d.annotation_count, d.tail,
            ))
        self.last_sequence_number = seq
        return records

    def publish(self, records: Iterable[MessageRecord]) -> None:
        """Make committed records receivable."""
        order = self._order
        for record in records:
            seq = record.sequence_number
            self.messages[seq] = record
            if not order or order[-1] < seq:
                order.append(seq)
            else:
                insort(order, seq)  # a message moved in from elsewhere keeps its older number
            if record.state == MessageState.ACTIVE:
                heapq.heappush(self._available, seq)

    # ---- receiving --------------------------------------------------------------------------

    @property
    def available_count(self) -> int:
        return len(self._available)

    def has_available(self) -> bool:
        return bool(self._available)

    def peek(self, from_sequence_number: int, count: int) -> list[MessageRecord]:
        """Up to ``count`` stored messages from ``from_sequence_number`` on, locked or not (no side effects)."""
        order, messages = self._order, self.messages
        out: list[MessageRecord] = []
        i = bisect_left(order, from_sequence_number)
        while i < len(order) and len(out) < count:
            record = messages.get(order[i])
            if record is not None:
                out.append(record)
            i += 1
        return out

    def _removed(self) -> None:
        """Note a message gone from ``messages``; compact the peek index once it is mostly stale."""
        self._removed_in_order += 1
        if self._removed_in_order > 1024 and self._removed_in_order * 2 > len(self._order):
            self._order = [seq for seq in self._order if seq in self.messages]
            self._removed_in_order = 0

    def lock_next(self, now: int, lock_duration: int, owner: Any) -> tuple[MessageRecord, Lock] | None:
        """PeekLock: lock the first receivable message."""
        while self._available:
            seq = heapq.heappop(self._available)
            record = self.messages.get(seq)
            if record is None or seq in self._locked_seq:
                continue  # stale heap entry
            lock = Lock(self._new_token(), seq, now + lock_duration, owner)
            self.locks[lock.token] = lock
            heapq.heappush(self._expiries, (lock.locked_until, lock.token))
            self._locked_seq.add(seq)
            return record, lock
        return None

    def take_next(self) -> MessageRecord | None:
        """ReceiveAndDelete: remove the first receivable message (the caller deletes it in the store)."""
        while self._available:
            seq = heapq.heappop(self._available)
            if seq in self._locked_seq:
                continue
            record = self.messages.pop(seq, None)
            if record is not None:
                self._removed()
                return record
        return None

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
        del self.locks[token]
        self._locked_seq.discard(lock.sequence_number)
        if self.messages.pop(lock.sequence_number, None) is not None:
            self._removed()
        return lock.sequence_number

    def abandon(self, token: uuid.UUID, now: int) -> MessageUpdate:
        """Unlock and make receivable again with the delivery count raised."""
        lock = self._lock(token, now)
        return self._unlock(lock, count_delivery=True)

    def release(self, token: uuid.UUID) -> MessageUpdate | None:
        """Unlock without counting a delivery (the receiver never looked at the message)."""
        lock = self.locks.get(token)
        if lock is None:
            return None
        self._unlock(lock, count_delivery=False)
        return None

    def renew(self, token: uuid.UUID, now: int, lock_duration: int) -> int:
        lock = self._lock(token, now)
        lock.locked_until = now + lock_duration
        heapq.heappush(self._expiries, (lock.locked_until, lock.token))
        return lock.locked_until

    def expire_locks(self, now: int) -> list[MessageUpdate]:
        """Locks past their time end as an abandon would (Service Bus counts the delivery)."""
        updates: list[MessageUpdate] = []
        while self._expiries and self._expiries[0][0] <= now:
            until, token = heapq.heappop(self._expiries)
            lock = self.locks.get(token)
            if lock is not None and lock.locked_until == until:
                updates.append(self._unlock(lock, count_delivery=True))
        return updates

    def drop_owner(self, owner: Any) -> list[MessageUpdate]:
        """The receiver went away (link detached, connection lost): its locks end as expired."""
        gone = [lock for lock in self.locks.values() if lock.owner is owner]
        return [self._unlock(lock, count_delivery=True) for lock in gone]

    def next_lock_expiry(self) -> int | None:
        expiries = self._expiries
        while expiries:
            until, token = expiries[0]
            lock = self.locks.get(token)
            if lock is not None and lock.locked_until == until:
                return until
            heapq.heappop(expiries)  # settled, released or renewed since
        return None

    def _unlock(self, lock: Lock, count_delivery: bool) -> MessageUpdate:
        del self.locks[lock.token]
        self._locked_seq.discard(lock.sequence_number)
        record = self.messages[lock.sequence_number]
        if count_delivery:
            record = replace(record, delivery_count=record.delivery_count + 1)
            self.messages[lock.sequence_number] = record
        heapq.heappush(self._available, lock.sequence_number)
        return MessageUpdate(record.sequence_number, record.delivery_count, record.state)
