"""One worker thread per messaging store.

Store adapters are synchronous and not thread-safe; SQLite's commit waits for fsync. Running each
store's calls on its own single thread keeps the event loop free while a commit is in flight and
serialises the store's calls without locks. ``on_commit`` (the metrics' latency histogram) hears
how long each ``apply`` took on the store's thread, queueing excluded.

A second after a batch the worker calls the store's ``maintain`` (WAL checkpoint, free pages
returned). When a batch fails with StoreFull the worker is ``full``: the partitions refuse new
messages at once, receives go on, and ``maintain`` is tried every second until the store says it
has room again, with no restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sodalite.errors import SodaliteError, StoreFull, StoreUnavailable
from sodalite.store.port import MessagingStore, OpResult, PartitionRef, PartitionSnapshot, StoreOp

T = TypeVar("T")
MAINTENANCE_DELAY = 1.0  # seconds after a batch (and between tries while the store is full)


class StoreWorker:
    def __init__(self, store: MessagingStore, name: str) -> None:
        self.store = store
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{name}")
        self.on_commit: Callable[[float], None] | None = None
        # The operator's outage switch: while set, every call fails as an unreachable store's would.
        self.offline = False
        # Other broker nodes may write this store (PostgreSQL): partitions on the version-2 core look
        # for rows they did not append themselves (server/core_actor.py).
        self.shared = False
        self.full = False  # the store's disk is full: sends are refused until maintain() finds room
        self._maintenance: asyncio.TimerHandle | None = None
        self._closing = False

    async def call(self, fn: Callable[[], T]) -> T:
        if self.offline:
            raise StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

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

    async def load_partition(self, ref: PartitionRef) -> PartitionSnapshot:
        return await self.call(lambda: self.store.load_partition(ref))

    async def open(self) -> None:
        # Opening works offline too (a store configured offline is there, only out of service).
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.open)

    async def close(self) -> None:
        self._closing = True
        if self._maintenance is not None:
            self._maintenance.cancel()
        # Closing works offline too: the switch simulates an outage, the file is still there.
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
