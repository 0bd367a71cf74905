"""How the asyncio client waits, and runs work beside its caller: with tasks.

The client modules of ``sodalite.client.aio`` are written once, for asyncio; ``scripts/unasync``
turns them into the sync modules of ``sodalite.client``, where each name used from here means its
counterpart in ``sodalite.client.concurrency`` (threads). Only these two modules differ by hand:

- ``Lock``, ``Event``: asyncio's; ``sleep``; ``wait(event, timeout)``: True once the event is set.
- ``run_blocking(call, *args)``: a short blocking call (a SQLite transaction) in a worker thread,
  so the loop never waits on a disk flush.
- ``Workers``: the client's background work (probes, pings, syphon pumps, the outbox forwarder).
  ``stop(budget)`` tells nothing itself (the work watches its client's stop event); it waits up to
  ``budget`` seconds for the work to end and cancels what is left; with ``budget`` None it cancels
  at once. Never the calling task, nor work started with ``start_closing`` (it ends by itself).
- ``SideBySide``: two calls at once (the two copies of an active send), their errors as results.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

__all__ = ["Event", "Lock", "SideBySide", "Workers", "run_blocking", "sleep", "wait"]

P = ParamSpec("P")
T = TypeVar("T")
Lock = asyncio.Lock
Event = asyncio.Event
Work = Callable[[], Awaitable[None]]


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


async def wait(event: Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds have passed; True when it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


async def run_blocking(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await asyncio.to_thread(call, *args, **kwargs)


class Workers:
    """The background tasks of one client."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()

    def spawn(self, work: Work, name: str) -> None:
        self._start(work, name)

    def start_closing(self, work: Work, name: str) -> None:
        """Close something beside the caller (a callback that cannot wait); ``stop`` leaves it be."""
        task = self._start(work, name)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _start(self, work: Work, name: str) -> asyncio.Task[None]:
        async def run() -> None:
            await work()

        task = asyncio.get_running_loop().create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self, budget: float | None) -> None:
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current and task not in self._closing]
        if not tasks:
            return
        pending: set[asyncio.Task[None]] = set(tasks)
        if budget is not None:
            _, pending = await asyncio.wait(tasks, timeout=budget)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=0.5)


class SideBySide:
    """Runs two calls at once and returns what each raised (None for a success); a cancellation
    is raised, not returned."""

    async def run(self, first: Work, second: Work) -> tuple[Exception | None, Exception | None]:
        outcomes = await asyncio.gather(first(), second(), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome
        one, two = (outcome if isinstance(outcome, Exception) else None for outcome in outcomes)
        return one, two

    async def close(self) -> None:
        """Nothing to release: the calls ran on the caller's loop."""
