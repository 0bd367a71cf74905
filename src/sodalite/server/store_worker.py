"""One worker thread per messaging store.

Store adapters are synchronous and not thread-safe; SQLite's commit waits for fsync. Running each
store's calls on its own single thread keeps the event loop free while a commit is in flight and
serialises the store's calls without locks. ``on_commit`` (the metrics' latency histogram) hears
how long each ``apply`` took on the store's thread, queueing excluded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sodalite.errors import StoreUnavailable
from sodalite.store.port import MessagingStore, PartitionRef, PartitionSnapshot, StoreOp

T = TypeVar("T")


class StoreWorker:
    def __init__(self, store: MessagingStore, name: str) -> None:
        self.store = store
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{name}")
        self.on_commit: Callable[[float], None] | None = None
        # The operator's outage switch: while set, every call fails as an unreachable store's would.
        self.offline = False

    async def call(self, fn: Callable[[], T]) -> T:
        if self.offline:
            raise StoreUnavailable(f"the messaging store '{self.name}' is offline; retry shortly")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def apply(self, batch: Sequence[StoreOp]) -> None:
        seconds = await self.call(lambda: self._timed_apply(batch))
        if self.on_commit is not None:
            self.on_commit(seconds)

    def _timed_apply(self, batch: Sequence[StoreOp]) -> float:
        started = time.perf_counter()
        self.store.apply(batch)
        return time.perf_counter() - started

    async def load_partition(self, ref: PartitionRef) -> PartitionSnapshot:
        return await self.call(lambda: self.store.load_partition(ref))

    async def open(self) -> None:
        # Opening works offline too (a store configured offline is there, only out of service).
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.open)

    async def close(self) -> None:
        # Closing works offline too: the switch simulates an outage, the file is still there.
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
