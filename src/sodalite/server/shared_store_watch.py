"""What a core actor hears of other nodes writing its store (``StoreWorker.shared``: PostgreSQL).

Rules:

1. Rows another node appended are not in this node's window. Each sub-queue watches its partition
   on the store worker: when another node commits messages made ready there (announced by the
   store's change feed, LISTEN/NOTIFY), its core is told ``Arrived(0)`` and reads the store again.
2. What no announcement covers (a lock held by a dead node lapsing) is found by a poll: while a
   receiver here waits with credit (or, on a session entity, holds a session or waits for one), the
   core is told ``Arrived(0)`` every ``worker.poll_seconds``.
3. Messages another node scheduled are announced with their time, and the store worker reads every
   watched partition's ``next_due`` every ``worker.due_seconds`` besides (the scheduling node may
   have died unannounced): the core is told ``DueInStore`` and activates what is due then, fenced
   by the store.
4. The counts management reads are the cores' views. The store worker reads every watched
   partition's counters back every ``SHARED_COUNTS_SECONDS`` (store_worker.py); where they differ
   from a core's, the core reads them again in order among its batches (``RefreshCounts``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from sodalite.model import partition_core as core
from sodalite.server.entity_settings import SubQueue
from sodalite.store.port import PartitionCounts

if TYPE_CHECKING:
    from sodalite.server.core_actor import CoreActor


class SharedStoreWatch:
    """One core actor's watches and poll on a store other nodes write (see the module docstring)."""

    def __init__(self, actor: CoreActor) -> None:
        self._actor = actor
        self._unwatch: list[Callable[[], None]] = []  # stop the store worker's wake-ups
        self._poller: asyncio.Task[None] | None = None

    def watch(self, sub: SubQueue) -> None:
        """Rules 1 and 3 for ``sub``, whose runner just started."""
        actor = self._actor
        self._unwatch.append(actor.worker.watch(actor.refs[sub], functools.partial(self._arrived, sub),
                                                functools.partial(self._due_in_store, sub)))

    def start(self) -> None:
        """Rules 2 and 4, once every sub-queue is watched."""
        actor = self._actor
        if self._poller is not None:
            return
        loop = asyncio.get_running_loop()
        self._poller = loop.create_task(self._poll(), name=f"shared-store poll {actor.ref.entity}")
        for sub, ref in actor.refs.items():
            self._unwatch.append(actor.worker.watch_counts(ref, functools.partial(self._counts_read, sub)))

    def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch.clear()

    def _arrived(self, sub: SubQueue) -> None:
        runner = self._actor.runners.get(sub)
        if runner is not None and self._actor.available:
            runner.submit(core.Arrived(0))

    def _due_in_store(self, sub: SubQueue, at: int) -> None:
        runner = self._actor.runners.get(sub)
        if runner is not None and self._actor.available:
            runner.submit(core.DueInStore(at))

    def _counts_read(self, sub: SubQueue, counts: PartitionCounts) -> None:
        runner = self._actor.runners.get(sub)
        if runner is None or not self._actor.available:
            return
        mine = runner.view.counts
        if ((counts.active, counts.scheduled, counts.deferred) != (mine.active, mine.scheduled, mine.deferred)
                or counts.size_in_bytes != runner.size_in_bytes):
            runner.refresh_counts()

    async def _poll(self) -> None:
        actor = self._actor
        while not actor.closed:
            await asyncio.sleep(actor.worker.poll_seconds)
            if not actor.available:
                continue
            waiting = actor.credit.waiting()
            if actor.settings.requires_session and (actor.credit.receivers or actor.requests):
                waiting.add(SubQueue.MAIN)  # session holders, and accepts waiting for a session
            for sub in waiting:
                runner = actor.runners.get(sub)
                if runner is not None:
                    runner.submit(core.Arrived(0))
