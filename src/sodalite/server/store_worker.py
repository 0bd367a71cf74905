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

from sodalite.store.port import MessagingStore, PartitionRef, PartitionSnapshot, StoreOp

T = TypeVar("T")


class StoreWorker:
    def __init__(self, store: MessagingStore, name: str) -> None:
        self.store = store
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"store-{name}")
        self.on_commit: Callable[[float], None] | None = None

    async def call(self, fn: Callable[[], T]) -> T:
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

    async def close(self) -> None:
        await self.call(self.store.close)
        self._executor.shutdown(wait=True)
