"""How the sync client waits, and runs work beside its caller: with threads.

The sync client modules (``outbox``, ``paired``, ``replication``) are generated from their asyncio
sources by ``scripts/unasync``; each name they use from here is the thread counterpart of the same
name in ``sodalite.client.aio.concurrency``. Only these two modules differ by hand:

- ``Lock``, ``Event``: threading's; ``sleep``; ``wait(event, timeout)``: True once the event is set.
- ``run_blocking(call, *args)`` of the asyncio side has no twin: the generator writes ``call(*args)``.
- ``Workers``: the client's background threads (probes, pings, syphon pumps, the outbox forwarder),
  daemons. ``stop(budget)`` tells nothing itself (the work watches its client's stop event); it
  joins them for up to ``budget`` seconds in all (threads cannot be cancelled; with ``budget`` None
  it waits for them to end), never the calling thread. ``start_closing`` runs its work at once, in
  the caller's thread.
- ``SideBySide``: two calls at once (the two copies of an active send), the second in a worker
  thread of its own, their errors as results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

__all__ = ["Event", "Lock", "SideBySide", "Workers", "sleep", "wait"]

Lock = threading.Lock
Event = threading.Event
Work = Callable[[], None]


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def wait(event: Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds have passed; True when it is set."""
    return event.wait(timeout)


class Workers:
    """The background threads of one client."""

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def spawn(self, work: Work, name: str) -> None:
        thread = threading.Thread(target=work, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def start_closing(self, work: Work, name: str) -> None:
        """Close something beside the caller: a thread may wait, so here it is done at once."""
        work()

    def stop(self, budget: float | None) -> None:
        deadline = None if budget is None else time.monotonic() + budget
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))


class SideBySide:
    """Runs two calls at once, the second in a worker thread, and returns what each raised (None for
    a success)."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def run(self, first: Work, second: Work) -> tuple[Exception | None, Exception | None]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replicated-send")
        beside = self._pool.submit(second)
        one: Exception | None = None
        two: Exception | None = None
        try:
            first()
        except Exception as error:
            one = error
        try:
            beside.result()
        except Exception as error:
            two = error
        return one, two

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
