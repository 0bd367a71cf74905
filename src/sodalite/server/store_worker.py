"""One worker thread per messaging store.

Store adapters are synchronous and not thread-safe; SQLite's commit waits for fsync. Running each
store's calls on its own single thread keeps the event loop free while a commit is in flight and
serialises the store's calls without locks. ``on_commit`` (the metrics' latency histogram) hears
how long each ``apply`` took on the store's thread, queueing excluded.

A second after a batch the worker calls the store's ``maintain`` (WAL checkpoint, free pages
returned). When a batch fails with StoreFull the worker is ``full``: the partitions refuse new
messages at once, receives go on, and ``maintain`` is tried every second until the store says it
has room again, with no restart.

Group commit across partitions: :meth:`StoreWorker.commit` is how the partition runners of the
partition core hand in their batches. Batches that arrive while a transaction is in flight, or in
the same event-loop turn, leave together as ONE ``apply`` (one transaction, one fsync) when the
previous one is done, whichever partition of this store they belong to; each caller gets back the
results of its own operations, in order. A transaction that raises applied nothing, and every batch
in it fails with that error (each runner answers its requests ServerBusy). A batch with an all-or-none
``Settle`` (an AMQP transaction's) is never merged: its fence may roll back its transaction
(``SettleFenced``), which must not take other partitions' batches with it. A store other nodes write
too (``shared``) is not merged: there two nodes' transactions could take the partitions' counter
rows in opposite orders and deadlock, so each batch stays its own transaction.

The hand-off costs one wake-up each way and nothing more: :meth:`StoreWorker.commit_soon` (what the
runners use; :meth:`commit` is the same with a future) queues the batch with a callback, one group
is on the store's thread at a time, and the thread posts the transaction's outcome back with ONE
``call_soon_threadsafe``, whose handler splits the results and calls every caller's callback in
that same turn, then sends the next group (what queued meanwhile) at once. No task, future chain
or extra event-loop turn per transaction; :meth:`call_soon` does the same for a read.

Several nodes on one store (``shared``): the store's optional change feed (``feed``, PostgreSQL's
LISTEN/NOTIFY, wired by the composition root) announces other nodes' commits from a thread of its
own. The worker is its sink: it hands each announcement to the event loop, where a partition that
``watch``-es its reference is told (``ready``) and ``on_entities_changed`` (the broker's entity
follow) is called; a (re)connected feed calls every watcher and the entity follow once, since what
happened while it was away was not announced. ``poll_seconds`` is how often a waiting receiver's
partition still looks by itself for what no announcement covers (a lock of a dead node lapsing):
``notified_poll_seconds`` while the feed is live, :data:`SHARED_POLL_SECONDS` without one;
``follow_seconds`` likewise for the broker's re-reading of entity records. Another node's scheduled
messages are announced with their time (``due``: the watcher's ``on_due``); every ``due_seconds``
the worker also reads the store's ``next_due`` of every partition watched with an ``on_due`` (what a
node that died before announcing, or a feed that was down, left untold), all in one read
(``next_due_many``), and hands each its time: :data:`DUE_REREAD_SECONDS` while the feed is live,
``SHARED_POLL_SECONDS`` four times over without one. Counters move with other nodes' sends
and settlements, which no announcement covers: every :data:`SHARED_COUNTS_SECONDS` the worker reads
the counters of every partition that ``watch_counts`` it in ONE read (``counts_many``, one round
trip whatever the number of entities), only while the store answers, and hands each its counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import string
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, TypeVar

from sodalite.errors import SodaliteError, StoreFull, StoreUnavailable
from sodalite.store.port import (
    ChangeFeed,
    MessagingStore,
    OpResult,
    PartitionCounts,
    PartitionRef,
    Settle,
    StoreOp,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
# How a commit's outcome is handed back: (results, None) after the commit, (None, error) when it failed.
Committed = Callable[[tuple[OpResult, ...] | None, BaseException | None], None]
MAX_GROUP_OPS = 4096  # operations merged into one transaction at most (a batch is never split)
MAINTENANCE_DELAY = 1.0  # seconds after a batch (and between tries while the store is full)
SHARED_POLL_SECONDS = 0.25  # a waiting receiver looks for other nodes' rows this often without a live feed
NOTIFIED_POLL_SECONDS = 2.0  # ... and this often while the feed is live (only what no notification announces)
ENTITY_FOLLOW_SECONDS = 1.0  # a node re-reads the entity records this often in any case (the feed wakes it sooner)
DUE_REREAD_SECONDS = 10.0  # a partition re-reads the store's next due time this often while the feed is live
# On a store other nodes write: how often every watched partition's counters are read back (one read
# for all; management answers follow other nodes' sends and settlements within about this long).
SHARED_COUNTS_SECONDS = 0.5
PARK_LIMIT_SECONDS = 60.0  # park(): the longest a store thread is held for a backup's point in time
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


class CrossStoreGate:
    """What a backup waits for: operations that write several stores in steps (a cross-store move,
    a dead letter relayed into another store, a topic send with copies in other stores) hold the
    gate open while they run (:meth:`spanning`); a backup closes it (:meth:`closed`): new such
    operations wait, those under way finish, and then every store is at a point where each of
    them is wholly in one place. The broker gives all its store workers one gate.

    Reentrant per task: an operation already inside a span (or a task it started) never waits for
    the gate, so a nested span cannot deadlock against a backup waiting for the outer one."""

    def __init__(self) -> None:
        self._active = 0
        self._closed: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._inside: contextvars.ContextVar[bool] = contextvars.ContextVar("cross_store_span", default=False)

    @contextlib.asynccontextmanager
    async def spanning(self) -> AsyncIterator[None]:
        if self._inside.get():
            yield
            return
        while self._closed is not None:
            await asyncio.shield(self._closed)
        self._active += 1
        token = self._inside.set(True)
        try:
            yield
        finally:
            self._inside.reset(token)
            self._active -= 1
            if self._active == 0 and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)

    @contextlib.asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        """Inside: no span runs, and none starts until the block ends. One closer at a time."""
        while self._closed is not None:
            await asyncio.shield(self._closed)
        loop = asyncio.get_running_loop()
        self._closed = loop.create_future()
        try:
            while self._active:
                self._drained = loop.create_future()
                await self._drained
            yield
        finally:
            opened, self._closed, self._drained = self._closed, None, None
            opened.set_result(None)


def _alone(batch: Sequence[StoreOp]) -> bool:
    """A batch committed in a transaction of its own (module docstring)."""
    return any(isinstance(op, Settle) and op.all_or_none for op in batch)


def _key(ref: PartitionRef) -> tuple[str, int]:
    """Entity paths compare case-insensitively (ASCII letters), as the stores key them."""
    return ref.entity.translate(_ASCII_LOWER), ref.partition


class StoreThread(Executor):
    """The store's one thread: jobs run one at a time, in the order given.

    :meth:`put` is the per-commit hand-off: one ``SimpleQueue.put`` that wakes the thread, without the
    future, work item, locks and thread-count check of ``ThreadPoolExecutor.submit``. A job given to
    :meth:`put` reports its own outcome (the callers post it back to the event loop). :meth:`submit`
    makes it an ``Executor`` for ``run_in_executor``. The thread is a daemon: a process that exits
    without closing the broker does not wait for it (an interrupted transaction is rolled back by the
    store and was never acknowledged)."""

    def __init__(self, name: str) -> None:
        self._jobs: SimpleQueue[Callable[[], None] | None] = SimpleQueue()
        self._shut = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, job: Callable[[], None]) -> None:
        if self._shut:
            raise RuntimeError("cannot schedule new jobs after shutdown")
        self._jobs.put(job)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.put(job)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not self._shut:
            self._shut = True
            self._jobs.put(None)
        if wait and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except BaseException:  # a job reports its own errors; the thread goes on whatever happens
                log.exception("a job on a store's thread failed")


class StoreWorker:
    def __init__(self, store: MessagingStore, name: str) -> None:
        self.store = store
        self.name = name
        self._executor = StoreThread(f"store-{name}")
        self.on_commit: Callable[[float], None] | None = None
        # The operator's outage switch: while set, every call fails as an unreachable store's would.
        self.offline = False
        # Other broker nodes may write this store (PostgreSQL): partitions on the partition core look
        # for rows they did not append themselves (server/core_actor.py).
        self.shared = False
        self.full = False  # the store's disk is full: sends are refused until maintain() finds room
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)  # ms; the broker sets its own
        # The last call reached the store (False after a StoreUnavailable): optional reads, such as a
        # shared store's count refresh, wait until something else got through again.
        self.reachable = True
        # Other nodes' commits, announced (module docstring); set before open().
        self.feed: ChangeFeed | None = None
        self.notified_poll_seconds = NOTIFIED_POLL_SECONDS
        self.notified_follow_seconds = ENTITY_FOLLOW_SECONDS
        self.on_entities_changed: Callable[[], None] | None = None
        self._watchers: dict[tuple[str, int], list[Callable[[], None]]] = {}
        self._due_watchers: dict[tuple[str, int], list[Callable[[int], None]]] = {}
        self._count_watchers: dict[tuple[str, int], tuple[PartitionRef, list[Callable[[PartitionCounts], None]]]] = {}
        self._counts_task: asyncio.Task[None] | None = None
        self._due_refs: dict[tuple[str, int], PartitionRef] = {}  # what the due reread reads
        self._due_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._maintenance: asyncio.TimerHandle | None = None
        self._closing = False
        self._queued: deque[tuple[Sequence[StoreOp], Committed]] = deque()
        self._in_flight = False  # a group is on the store's thread
        self._flush_scheduled = False
        self.transactions = 0  # group commits carried out (one store transaction each)
        self.gate = CrossStoreGate()  # the broker gives all its workers one (CrossStoreGate)

    def park(self, on_thread: Callable[[], T], release: threading.Event) -> asyncio.Future[T]:
        """Run ``on_thread`` on the store's thread between two of its calls, then keep that thread
        until ``release`` is set: no transaction or read of this store runs meanwhile (they queue,
        as behind a long commit). The future has ``on_thread``'s result (or error) as soon as it
        returned, before the release. Call on the event loop."""
        loop = asyncio.get_running_loop()
        arrived: asyncio.Future[T] = loop.create_future()

        def settle(value: T | None, error: BaseException | None) -> None:
            if arrived.done():
                return
            if error is not None:
                arrived.set_exception(error)
            else:
                arrived.set_result(value)  # type: ignore[arg-type]

        def job() -> None:
            self._run_posting(loop, on_thread, settle)
            release.wait(PARK_LIMIT_SECONDS)  # never kept longer, whatever the caller does

        try:
            self._executor.put(job)
        except RuntimeError as error:
            arrived.set_exception(StoreUnavailable(f"the messaging store '{self.name}' is closed: {error}"))
        return arrived

    async def call(self, fn: Callable[[], T]) -> T:
        if self.offline:
            raise StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly")
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, fn)
        except StoreUnavailable as exc:
            if not isinstance(exc, StoreFull):
                self.reachable = False
            raise
        self.reachable = True
        return result

    async def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        """Commit ``batch`` as one transaction on the store's thread; the port's results, one per op."""
        try:
            seconds, results = await self.call(lambda: self._timed_apply(batch))
        except StoreFull:
            self.full = True
            self._schedule_maintenance()
            raise
        self._schedule_maintenance()
        if self.on_commit is not None:
            self.on_commit(seconds)
        return results

    async def commit(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        """Commit ``batch`` in the store's next transaction, together with the batches of other
        partitions that queue up meanwhile (module docstring); the results of ``batch``'s ops."""
        future: asyncio.Future[tuple[OpResult, ...]] = asyncio.get_running_loop().create_future()

        def done(results: tuple[OpResult, ...] | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                assert results is not None
                future.set_result(results)

        self.commit_soon(batch, done)
        return await future

    def commit_soon(self, batch: Sequence[StoreOp], done: Committed) -> None:
        """:meth:`commit` without a future: ``done(results, None)`` or ``done(None, error)`` is called
        on the event loop once the transaction holding ``batch`` committed or failed, never before
        this call returned. Call on the event loop."""
        loop = asyncio.get_running_loop()
        if self.offline:
            loop.call_soon(done, None, StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly"))
            return
        self._queued.append((batch, done))
        if not self._in_flight and not self._flush_scheduled:
            # Wait for the end of this event-loop turn: what else queues in it leaves together.
            self._flush_scheduled = True
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send the next group to the store's thread (on the loop; at most one group in flight)."""
        self._flush_scheduled = False
        if self._in_flight or not self._queued:
            return
        group: list[tuple[Sequence[StoreOp], Committed]] = []
        size = 0
        while self._queued and (not group or size + len(self._queued[0][0]) <= MAX_GROUP_OPS):
            alone = _alone(self._queued[0][0])
            if group and alone:
                break
            entry = self._queued.popleft()
            group.append(entry)
            size += len(entry[0])
            if alone or self.shared:  # a shared store's batches stay transactions of their own
                break
        loop = asyncio.get_running_loop()
        if self.offline:
            error = StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly")
            loop.call_soon(self._committed, group, None, error, 0.0)
            self._in_flight = True
            return
        ops = [op for batch, _ in group for op in batch]
        store = self.store

        def job() -> None:  # on the store's thread: one transaction, then ONE hand-off back to the loop
            started = time.perf_counter()
            try:
                results = store.apply(ops)
            except BaseException as error:  # the transaction applied nothing
                self._post(loop, self._committed, group, None, error, 0.0)
            else:
                self._post(loop, self._committed, group, results, None, time.perf_counter() - started)

        try:
            self._executor.put(job)
        except RuntimeError as error:  # the worker closed (executor shut down)
            loop.call_soon(self._committed, group, None, StoreUnavailable(f"the messaging store '{self.name}' "
                                                                         f"is closed: {error}"), 0.0)
        self._in_flight = True

    @staticmethod
    def _post(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: object) -> None:
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed meanwhile: nobody is left to hear of the outcome
            pass

    def _run_posting(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T],
                     callback: Callable[[T | None, BaseException | None], None]) -> None:
        """On the store's thread: run ``fn``, then post its value, or its error, to ``callback`` on ``loop``."""
        try:
            value = fn()
        except BaseException as error:
            self._post(loop, callback, None, error)
        else:
            self._post(loop, callback, value, None)

    def _committed(self, group: list[tuple[Sequence[StoreOp], Committed]], results: tuple[OpResult, ...] | None,
                   error: BaseException | None, seconds: float) -> None:
        self._in_flight = False
        if error is None:
            assert results is not None
            self.reachable = True
            self.transactions += 1
            self._schedule_maintenance()
            if self.on_commit is not None:
                self.on_commit(seconds)
            at = 0
            for batch, done in group:
                self._tell(done, results[at:at + len(batch)], None)
                at += len(batch)
        else:
            if isinstance(error, StoreFull):
                self.full = True
                self._schedule_maintenance()
            elif isinstance(error, StoreUnavailable):
                self.reachable = False
            for _, done in group:
                self._tell(done, None, error)
        if self._queued:  # what queued while this transaction was in flight leaves together now
            self._flush()

    def _tell(self, done: Committed, results: tuple[OpResult, ...] | None, error: BaseException | None) -> None:
        try:
            done(results, error)
        except Exception:
            log.exception("store %s: a commit's outcome could not be handed on", self.name)

    def call_soon(self, fn: Callable[[], T], done: Callable[[T | None, BaseException | None], None]) -> None:
        """:meth:`call` without a future: runs ``fn`` on the store's thread, then ``done(value, None)``
        or ``done(None, error)`` on the event loop (never before this call returned)."""
        loop = asyncio.get_running_loop()
        if self.offline:
            loop.call_soon(done, None, StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly"))
            return

        def answered(value: T | None, error: BaseException | None) -> None:
            if isinstance(error, StoreUnavailable) and not isinstance(error, StoreFull):
                self.reachable = False
            elif error is None:
                self.reachable = True
            done(value, error)

        try:
            self._executor.put(lambda: self._run_posting(loop, fn, answered))
        except RuntimeError as error:
            loop.call_soon(done, None, StoreUnavailable(f"the messaging store '{self.name}' is closed: {error}"))

    def _timed_apply(self, batch: Sequence[StoreOp]) -> tuple[float, tuple[OpResult, ...]]:
        started = time.perf_counter()
        results = self.store.apply(batch)
        return time.perf_counter() - started, results

    def _schedule_maintenance(self) -> None:
        if self._maintenance is None and not self._closing:
            loop = asyncio.get_running_loop()
            self._maintenance = loop.call_later(MAINTENANCE_DELAY, lambda: loop.create_task(self._maintain()))

    async def _maintain(self) -> None:
        try:
            room = await self.call(self.store.maintain)
        except SodaliteError:
            room = not self.full  # offline or closing: try again later
        finally:
            self._maintenance = None
        self.full = not room
        if self.full:
            self._schedule_maintenance()

    async def open(self) -> None:
        # Opening works offline too (a store configured offline is there, only out of service).
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(self._executor, self.store.open)
        if self.feed is not None:
            self.feed.start(self)

    # ---- other nodes' changes (the feed's sink; called on the feed's thread) ------------------------

    @property
    def poll_seconds(self) -> float:
        """How often a partition with a waiting receiver looks for other nodes' rows by itself."""
        return self.notified_poll_seconds if self.feed is not None and self.feed.live else SHARED_POLL_SECONDS

    @property
    def follow_seconds(self) -> float:
        """How often the broker re-reads the entity records by itself."""
        return self.notified_follow_seconds if self.feed is not None and self.feed.live else ENTITY_FOLLOW_SECONDS

    @property
    def due_seconds(self) -> float:
        """How often a partition reads the store's next due time by itself."""
        return DUE_REREAD_SECONDS if self.feed is not None and self.feed.live else 4 * SHARED_POLL_SECONDS

    def watch(self, ref: PartitionRef, on_ready: Callable[[], None],
              on_due: Callable[[int], None] | None = None) -> Callable[[], None]:
        """Call ``on_ready`` (on the loop) when another node makes messages ready in ``ref``, and
        ``on_due(at)`` when it schedules messages there; returns the function that stops both."""
        key = _key(ref)
        self._watchers.setdefault(key, []).append(on_ready)
        if on_due is not None:
            self._due_watchers.setdefault(key, []).append(on_due)
            self._due_refs[key] = ref
            if self._due_task is None or self._due_task.done():
                self._due_task = asyncio.get_running_loop().create_task(self._reread_due(),
                                                                        name=f"store {self.name}: due times")

        def unwatch() -> None:
            callbacks = self._watchers.get(key, [])
            if on_ready in callbacks:
                callbacks.remove(on_ready)
            if not callbacks:
                self._watchers.pop(key, None)
            dues = self._due_watchers.get(key, [])
            if on_due in dues:
                dues.remove(on_due)
            if not dues:
                self._due_watchers.pop(key, None)
                self._due_refs.pop(key, None)

        return unwatch

    def watch_counts(self, ref: PartitionRef, on_counts: Callable[[PartitionCounts], None]) -> Callable[[], None]:
        """Call ``on_counts`` (on the loop) with ``ref``'s counters as the store has them, every
        :data:`SHARED_COUNTS_SECONDS`, read together with every other watched partition's; returns
        the function that stops it. Call on the event loop."""
        key = _key(ref)
        self._count_watchers.setdefault(key, (ref, []))[1].append(on_counts)
        if self._counts_task is None or self._counts_task.done():
            self._counts_task = asyncio.get_running_loop().create_task(self._read_counts(),
                                                                       name=f"store {self.name}: counters")

        def unwatch() -> None:
            entry = self._count_watchers.get(key)
            if entry is not None and on_counts in entry[1]:
                entry[1].remove(on_counts)
                if not entry[1]:
                    del self._count_watchers[key]

        return unwatch

    async def _read_counts(self) -> None:
        while self._count_watchers and not self._closing:
            await asyncio.sleep(SHARED_COUNTS_SECONDS)
            if self.offline or not self.reachable or not self._count_watchers:
                continue  # optional: wait until something else got through again
            refs = [ref for ref, _ in self._count_watchers.values()]
            try:
                read = await self.call(functools.partial(self.store.counts_many, refs))
            except SodaliteError:
                continue
            for ref, counts in zip(refs, read, strict=True):
                entry = self._count_watchers.get(_key(ref))
                for callback in list(entry[1]) if entry is not None else ():
                    try:
                        callback(counts)
                    except Exception:
                        log.exception("store %s: a partition's counters could not be handed on", self.name)

    async def _reread_due(self) -> None:
        while self._due_refs and not self._closing:
            await asyncio.sleep(self.due_seconds)
            if self.offline or not self._due_refs:
                continue
            refs = list(self._due_refs.values())
            try:
                read = await self.call(functools.partial(self.store.next_due_many, refs, self.clock()))
            except SodaliteError:
                continue  # the store is away: the partitions hear of it from their batches
            for ref, at in zip(refs, read, strict=True):
                if at is not None:
                    self._tell_due(_key(ref), at)

    def ready(self, ref: PartitionRef) -> None:
        self._on_loop(lambda: self._notify(_key(ref)))

    def due(self, ref: PartitionRef, at: int) -> None:
        self._on_loop(lambda: self._tell_due(_key(ref), at))

    def _tell_due(self, key: tuple[str, int], at: int) -> None:
        for callback in list(self._due_watchers.get(key, ())):
            try:
                callback(at)
            except Exception:
                log.exception("store %s: a partition's due time could not be handed on", self.name)

    def entities_changed(self) -> None:
        self._on_loop(self._entities_changed)

    def resynced(self) -> None:
        def everything() -> None:
            for key in list(self._watchers):
                self._notify(key)
            self._entities_changed()

        self._on_loop(everything)

    def _on_loop(self, call: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._closing:
            loop.call_soon_threadsafe(call)

    def _notify(self, key: tuple[str, int]) -> None:
        for callback in list(self._watchers.get(key, ())):
            try:
                callback()
            except Exception:
                log.exception("store %s: a partition's wake-up failed", self.name)

    def _entities_changed(self) -> None:
        if self.on_entities_changed is not None:
            self.on_entities_changed()

    async def close(self) -> None:
        self._closing = True
        for task in (self._counts_task, self._due_task):
            if task is not None:
                task.cancel()
        if self._maintenance is not None:
            self._maintenance.cancel()
        if self.feed is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.feed.stop)
        # Closing works offline too: the switch simulates an outage, the file is still there.
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
