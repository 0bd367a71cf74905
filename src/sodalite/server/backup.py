"""A consistent copy of every messaging store of a running broker (``sodalite backup``).

Theory of operation. A backup is one point in time across all stores, taken while the broker
serves, in three steps:

1. The cross-store gate closes (:class:`~sodalite.server.store_worker.CrossStoreGate`): operations
   that write several stores in steps (a move or a relayed dead letter into another store, a topic
   send with copies in other stores) that are under way finish, new ones wait. Each of them is then
   wholly in one place: in its source, or in its target(s).
2. Every store's thread is parked between two transactions (:meth:`StoreWorker.park`), each one
   opening its snapshot (a read transaction, :class:`~sodalite.store.port.Snapshots`) before it
   waits. Once every store has one, all are released and the gate opens again. Nothing committed
   in any store between the first and the last park, so the snapshots are one point in time: a
   send acknowledged before it is in the copy, a settlement committed after it is not. The broker
   stands still for the longest transaction in flight plus the snapshots' opening (milliseconds).
3. Each snapshot is copied whole (SQLite's backup API, one step, from the snapshot: the writers
   that go on meanwhile never restart it) on a thread of its own, while the broker serves.

The composition root (``cli/backup.py``) says where each store's copy goes and adds the
configuration and the manifest.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from sodalite.errors import ArgumentError, StoreUnavailable
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import Snapshots, StoreSnapshot

log = logging.getLogger(__name__)
BARRIER_TIMEOUT_SECONDS = 30.0  # a store whose thread does not come free within this fails the backup


async def back_up(workers: Sequence[StoreWorker], destinations: Mapping[str, Path], clock_ms: int | None = None
                  ) -> int:
    """Copy every store of ``workers`` (by name) into ``destinations[name]`` as of one point in time
    (module docstring); returns that time (ms since the epoch)."""
    for worker in workers:
        if not isinstance(worker.store, Snapshots):
            raise ArgumentError(f"the messaging store '{worker.name}' is not a SQLite file: back it up with its "
                                "database's own tools (docs/operations.md)")
        if worker.name not in destinations:
            raise ArgumentError(f"no destination for the messaging store '{worker.name}'")
    if not workers:
        raise ArgumentError("the broker has no messaging store")
    began = time.perf_counter()
    snapshots = await _snapshots(workers)
    held = time.perf_counter() - began
    taken_at = clock_ms if clock_ms is not None else int(time.time() * 1000)
    try:
        await asyncio.gather(*(asyncio.to_thread(_copy, snapshot, destinations[worker.name])
                               for worker, snapshot in zip(workers, snapshots, strict=True)))
    finally:
        for snapshot in snapshots:
            snapshot.close()
    log.info("backup of %d stores: their point in time took %.1f ms (commits waited meanwhile), the copies "
             "%.2f s while serving", len(workers), held * 1000, time.perf_counter() - began - held)
    return taken_at


async def _snapshots(workers: Sequence[StoreWorker]) -> list[StoreSnapshot]:
    """Steps 1 and 2: every store's snapshot at one point in time."""
    gate = workers[0].gate
    release = threading.Event()
    async with gate.closed():
        parked = [worker.park(_snapshot_of(worker), release) for worker in workers]
        try:
            _, pending = await asyncio.wait(parked, timeout=BARRIER_TIMEOUT_SECONDS)
        finally:
            release.set()
    taken: list[StoreSnapshot] = [f.result() for f in parked if f.done() and f.exception() is None]
    failed = [f.exception() for f in parked if f.done() and f.exception() is not None]
    if pending or failed:
        for snapshot in taken:
            snapshot.close()
        for future in pending:
            future.add_done_callback(_close_late)
        if failed and isinstance(failed[0], BaseException):
            raise failed[0]
        raise StoreUnavailable(f"the backup could not find every messaging store between two transactions within "
                               f"{BARRIER_TIMEOUT_SECONDS:.0f} s; nothing was copied, try again")
    return taken


def _snapshot_of(worker: StoreWorker) -> Callable[[], StoreSnapshot]:
    store = worker.store
    assert isinstance(store, Snapshots)
    return store.snapshot


def _close_late(future: asyncio.Future[StoreSnapshot]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def _copy(snapshot: StoreSnapshot, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    partial.unlink(missing_ok=True)
    snapshot.copy_to(str(partial))
    partial.replace(destination)
