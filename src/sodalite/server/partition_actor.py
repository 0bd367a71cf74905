"""The actor that owns one partition: applies commands serially and group-commits their effects.

Theory of operation: every command (send, settle, credit, timer) runs to completion on the event
loop against the pure :class:`~sodalite.model.partition.Partition`, which returns what must be
stored. The store operations and the replies that depend on them (send acknowledgements,
settlement echoes, ReceiveAndDelete deliveries) wait in the open batch. One commit is in flight at
a time; everything that arrives meanwhile joins the next batch, so a burst of pipelined sends
costs one transaction, not one each (group commit). Only after a batch commits are its replies
released and its new messages made receivable. If a commit fails, its commands fail with a
retryable error and the partition is reloaded from the store, so memory never holds what the
store does not.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sodalite.errors import SodaliteError, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageUpdate
from sodalite.model.partition import Lock, MessageDraft, Partition
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import AppendMessages, DeleteMessages, PartitionRef, StoreOp, UpdateMessages

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # ms since the epoch
RELOAD_RETRY_SECONDS = 1.0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Consumer(Protocol):
    """A receiver link as the actor sees it."""

    peek_lock: bool
    reserved: int  # ReceiveAndDelete deliveries waiting for their delete to commit

    def credit(self) -> int: ...

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None: ...

    def drain_requested(self) -> bool: ...

    def drained(self) -> None: ...


@dataclass(slots=True)
class _Batch:
    ops: list[StoreOp] = field(default_factory=list)
    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    published: list[MessageRecord] = field(default_factory=list)
    deliveries: list[tuple[Consumer, MessageRecord]] = field(default_factory=list)  # ReceiveAndDelete


@dataclass(frozen=True, slots=True)
class EntitySettings:
    """What the actor needs of its entity's properties, in milliseconds and bytes."""

    lock_duration: int
    default_ttl: int | None
    max_message_size: int


class PartitionActor:
    def __init__(self, ref: PartitionRef, settings: EntitySettings, worker: StoreWorker,
                 clock: Clock = wall_clock_ms) -> None:
        self.ref = ref
        self.settings = settings
        self.worker = worker
        self.clock = clock
        self.partition = Partition((), 0)
        self.consumers: list[Consumer] = []
        self._next_consumer = 0
        self._batch = _Batch()
        self._committing = False
        self._lock_timer: asyncio.TimerHandle | None = None
        self._lock_timer_at: int | None = None
        self._closed = False
        self._reloading = False

    async def load(self) -> None:
        snapshot = await self.worker.load_partition(self.ref)
        # Never let the high-water mark go back: numbers handed out before a failed commit stay used.
        last = max(snapshot.last_sequence_number, self.partition.last_sequence_number)
        self.partition = Partition(snapshot.messages, last)

    def _check_available(self) -> None:
        if self._reloading:
            raise StoreUnavailable("the partition is recovering from a store failure; retry shortly")

    # ---- commands -----------------------------------------------------------------------------

    def send(self, drafts: list[MessageDraft]) -> asyncio.Future[None]:
        """Enqueue messages; the future resolves once they are durable."""
        self._check_available()
        records = self.partition.accept(drafts, self.clock(), self.settings.default_ttl)
        batch = self._batch
        batch.ops.append(AppendMessages(self.ref, tuple(records)))
        batch.published.extend(records)
        return self._future_in_batch()

    def complete(self, token: uuid.UUID) -> asyncio.Future[None]:
        self._check_available()
        seq = self.partition.complete(token, self.clock())
        self._batch.ops.append(DeleteMessages(self.ref, (seq,)))
        self._dispatch_soon()
        return self._future_in_batch()

    def abandon(self, token: uuid.UUID) -> asyncio.Future[None]:
        self._check_available()
        update = self.partition.abandon(token, self.clock())
        self._batch.ops.append(UpdateMessages(self.ref, (update,)))
        self._dispatch_soon()
        return self._future_in_batch()

    def release(self, token: uuid.UUID) -> None:
        self.partition.release(token)
        self._dispatch_soon()

    def renew_lock(self, token: uuid.UUID) -> int:
        locked_until = self.partition.renew(token, self.clock(), self.settings.lock_duration)
        self._arm_lock_timer()
        return locked_until

    def peek(self, from_sequence_number: int, count: int) -> list[MessageRecord]:
        self._check_available()
        return self.partition.peek(from_sequence_number, count)

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._dispatch_soon()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        updates = self.partition.drop_owner(consumer)
        self._store_updates(updates)
        self._dispatch_soon()

    def credit_changed(self, consumer: Consumer) -> None:
        self._dispatch_soon()

    async def close(self) -> None:
        self._closed = True
        if self._lock_timer is not None:
            self._lock_timer.cancel()
        while self._committing or self._batch.ops:
            if not self._committing:
                await self._commit()
            else:
                await asyncio.sleep(0.005)

    # ---- delivery -----------------------------------------------------------------------------

    def _dispatch_soon(self) -> None:
        asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        if self._reloading:
            return
        partition = self.partition
        consumers = self.consumers
        if consumers and partition.has_available():
            now = self.clock()
            idle_rounds = 0
            while partition.has_available() and idle_rounds < len(consumers):
                index = self._next_consumer % len(consumers)
                self._next_consumer = index + 1
                consumer = consumers[index]
                if consumer.credit() - consumer.reserved <= 0:
                    idle_rounds += 1
                    continue
                idle_rounds = 0
                if consumer.peek_lock:
                    taken = partition.lock_next(now, self.settings.lock_duration, consumer)
                    if taken is None:
                        break
                    consumer.deliver(taken[0], taken[1])
                else:
                    record = partition.take_next()
                    if record is None:
                        break
                    consumer.reserved += 1
                    self._batch.ops.append(DeleteMessages(self.ref, (record.sequence_number,)))
                    self._batch.deliveries.append((consumer, record))
                    self._schedule_commit()
            self._arm_lock_timer()
        for consumer in consumers:
            if consumer.drain_requested() and not partition.has_available() and not consumer.reserved:
                consumer.drained()

    def _arm_lock_timer(self) -> None:
        expiry = self.partition.next_lock_expiry()
        if expiry is None or self._closed:
            return
        if self._lock_timer is not None and self._lock_timer_at is not None and self._lock_timer_at <= expiry:
            return
        if self._lock_timer is not None:
            self._lock_timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, (expiry - self.clock()) / 1000.0)
        self._lock_timer_at = expiry
        self._lock_timer = loop.call_later(delay, self._on_lock_timer)

    def _on_lock_timer(self) -> None:
        self._lock_timer = None
        self._lock_timer_at = None
        updates = self.partition.expire_locks(self.clock())
        self._store_updates(updates)
        self._dispatch()
        self._arm_lock_timer()

    def _store_updates(self, updates: list[MessageUpdate]) -> None:
        if updates:
            self._batch.ops.append(UpdateMessages(self.ref, tuple(updates)))
            self._schedule_commit()

    # ---- group commit -------------------------------------------------------------------------

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
            await self._reload()
            return
        self.partition.publish(batch.published)
        for consumer, record in batch.deliveries:
            consumer.reserved -= 1
            consumer.deliver(record, None)
        for future in batch.futures:
            if not future.done():
                future.set_result(None)
        self._dispatch()

    def _fail_batch(self, batch: _Batch, exc: SodaliteError) -> None:
        for future in batch.futures:
            if not future.done():
                future.set_exception(exc)
        for consumer, _ in batch.deliveries:
            consumer.reserved -= 1  # not sent: the delete did not commit, the reload brings it back

    async def _reload(self) -> None:
        self._reloading = True
        while not self._closed:
            try:
                await self.load()
                break
            except SodaliteError:
                log.warning("partition %s cannot be reloaded yet; retrying", self.ref)
                await asyncio.sleep(RELOAD_RETRY_SECONDS)
        self._reloading = False
        self._dispatch()
