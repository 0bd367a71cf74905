"""How the client library keeps an application moving while one namespace is down (sync and asyncio).

Theory of operation. The SDK's retry options are the application's, and its default chain (three
retries, backing off 1.6, 3.2 and 6.4 s) makes the first send after a namespace died wait about
11 s before it says so. The library's own sends therefore go through an *attempt client* per
namespace: the same connection string and keyword arguments, with the library's short retry policy
(``ATTEMPT_RETRIES``) in place of the application's. Receivers and everything else keep the
application's client and options.

- **Attempt timeouts** (``attempt_timeout``): a send to a namespace *in doubt* (one whose last send
  failed with a failover error) is given at most ``short`` seconds; a healthy namespace gets the
  application's ``timeout``. The application's own ``timeout`` wins whenever it is shorter.
- **Marks** (``Availability``, active replication): a namespace whose send failed with a failover
  error (``failover.is_failover_error``: not a bad message, not a missing entity) is marked
  unavailable for that entity at once. While it is marked, sends go to the other namespace only
  (``targets``), one copy, counted in ``single_copy_sends``. One probe per marked pair (started by
  the caller that ``mark`` answered True) opens a link to the entity without sending a message and
  ``clear``s the mark when that succeeds. With both namespaces marked, sends try both.
- **Closing** (``CLOSE_BUDGET``): background work (probes, pingers, syphon pumps) is told to stop and
  given this long to finish what it is doing before the SDK clients under it are closed, so no
  handler is closed under a thread or task still using it.

The book is plain data guarded by a lock (the sync client's threads share it; under asyncio it is
never contended). Time comes from the caller.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from sodalite.client.failover import is_failover_error

# The library's own attempt policy: one quick retry (a broken connection is reopened once), so a
# namespace that refuses connections answers within a fraction of a second.
# Keyword arguments for an SDK client (``connection_verify``, ``retry_total``, ...), passed through as they are.
ClientOptions = Mapping[str, object]
ATTEMPT_RETRIES: dict[str, object] = {"retry_total": 1, "retry_backoff_factor": 0.05, "retry_backoff_max": 0.2}
# The SDK's knobs that the attempt policy replaces (the application's values stay on its own client).
_RETRY_KEYS = ("retry_total", "retry_backoff_factor", "retry_backoff_max", "retry_mode")
SHORT_ATTEMPT = 2.0  # seconds a send to a namespace in doubt may take (the default of ``attempt_timeout``)
CLOSE_BUDGET = 1.5  # seconds background work gets to stop before the clients under it are closed
PUMP_SLICE = 0.5  # the longest single receive of a background pump, so it sees a stop within this


def attempt_client_kwargs(client_kwargs: ClientOptions, retries: ClientOptions | None = None) -> dict[str, object]:
    """The keyword arguments of a namespace's attempt client: the application's, retries replaced."""
    kept = {k: v for k, v in client_kwargs.items() if k not in _RETRY_KEYS}
    return {**kept, **(ATTEMPT_RETRIES if retries is None else retries)}


def namespace_kwargs(shared: ClientOptions, own: ClientOptions | None) -> tuple[dict[str, object], dict[str, object]]:
    """One namespace's SDK client keyword arguments (the shared ones, its own over them: each broker's
    CA file as ``connection_verify``, say) and those of its attempt client."""
    merged = {**shared, **(own or {})}
    return merged, attempt_client_kwargs(merged)


C = TypeVar("C")


def sdk_client(make: Callable[..., C], connection_string: str, options: ClientOptions) -> C:
    """``make(connection_string, **options)``: the options reach the SDK as the application gave them
    (the SDK checks them)."""
    return make(connection_string, **options)


def namespace_clients(make: Callable[..., C], connection_string: str, shared: ClientOptions,
                      own: ClientOptions | None) -> tuple[C, C]:
    """A namespace's SDK client (``shared`` options, ``own`` over them) and its attempt client."""
    merged, attempts = namespace_kwargs(shared, own)
    return sdk_client(make, connection_string, merged), sdk_client(make, connection_string, attempts)


def attempt_timeout(app_timeout: float | None, in_doubt: bool, short: float) -> float | None:
    """The ``timeout`` of one send attempt: the application's, at most ``short`` while in doubt."""
    if not in_doubt:
        return app_timeout
    return short if app_timeout is None else min(app_timeout, short)


def bounded_wait(app_timeout: float | None, limit: float) -> float:
    """An attempt's timeout that never passes ``limit`` seconds (e.g. the failover timer's rest)."""
    limit = max(0.05, limit)
    return limit if app_timeout is None else min(app_timeout, limit)


@dataclass(slots=True)
class Availability:
    """Which namespace is marked unavailable, per entity key (``key``, namespace index)."""

    _marked: dict[tuple[str, int], float] = field(default_factory=dict)  # -> since (monotonic)
    _probing: set[tuple[str, int]] = field(default_factory=set)
    single_copy_sends: int = 0
    marks: int = 0
    clears: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def marked(self, key: str, index: int) -> bool:
        with self._lock:
            return (key, index) in self._marked

    def targets(self, key: str) -> list[int]:
        """The namespaces an active send goes to: the unmarked ones (both when both are marked)."""
        with self._lock:
            up = [i for i in (0, 1) if (key, i) not in self._marked]
            if len(up) == 1:
                self.single_copy_sends += 1
            return up or [0, 1]

    def failed(self, key: str, index: int, error: BaseException, now: float) -> bool:
        """A send to namespace ``index`` failed. A failover error marks it; True for the one caller that
        should start its probe (newly marked, no probe running)."""
        if not is_failover_error(error):
            return False
        with self._lock:
            if (key, index) not in self._marked:
                self._marked[(key, index)] = now
                self.marks += 1
            if (key, index) in self._probing:
                return False
            self._probing.add((key, index))
            return True

    def succeeded(self, key: str, index: int) -> None:
        """A send to it succeeded: it is not in doubt any more."""
        with self._lock:
            if self._marked.pop((key, index), None) is not None:
                self.clears += 1

    def clear(self, key: str, index: int) -> float | None:
        """The probe succeeded: sends go to both again. Returns when it was marked (None if it was not)."""
        with self._lock:
            self._probing.discard((key, index))
            since = self._marked.pop((key, index), None)
            if since is not None:
                self.clears += 1
            return since

    def copy_failed(self, key: str, index: int, error: BaseException, now: float, *, probes: bool) -> bool:
        """What a replicated sender does with a failed copy: True when the caller starts the probe of
        ``index`` (a failover error newly marked it and the client ``probes``: active mode); a client
        that does not probe (passive mode) keeps the mark as "in doubt" only."""
        start = self.failed(key, index, error, now)
        if start and not probes:
            self.probe_stopped(key, index)
            return False
        return start

    def probe_stopped(self, key: str, index: int) -> None:
        with self._lock:
            self._probing.discard((key, index))

    def marked_pairs(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._marked)
