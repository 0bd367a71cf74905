"""Failover bookkeeping of a paired-namespace client, shared by its sync and asyncio forms.

Theory of operation (paired-namespaces seed; clarifications, issue 15): per entity of the primary
namespace the client keeps one record, shared by all its senders to that entity.

- HEALTHY: sends go to the primary. A send that fails with a failover error (``is_failover_error``:
  the SDK gave up on a connection, communication, timeout, server-busy, quota or internal error)
  starts the timer (``failing_since``) if it is not running; any success stops it.
- While the timer runs, a send keeps retrying the primary; once ``failover_interval`` has passed
  without a success, the entity is FAILED_OVER: every send of the client to it goes to a backlog
  queue, and one pinger per entity pings the primary every ``ping_primary_interval``.
- A successful ping makes the entity HEALTHY again, for every sender at once.

Backlog queues are a rotation shared by the client: each sender picks one at random and keeps it;
a backlog queue whose send failed with a failover error leaves the rotation for all senders, and
the sender picks another. With the rotation empty, the send fails. The seed says nothing of a
dropped queue's return; a secondary namespace recovers too, so a dropped queue comes back into the
rotation after a back-off (``backlog_retry_after``, doubled each time it is dropped again without a
success in between, at most 16 times as long); a send that succeeds resets its back-off. Errors about the message or the
caller never start the timer and never drop a backlog queue; they reach the caller unchanged.

The book is plain data guarded by a lock; time comes from the caller (monotonic seconds).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta

from azure.servicebus.exceptions import (
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)

FAILOVER_ERRORS: tuple[type[Exception], ...] = (
    ServiceBusConnectionError, ServiceBusCommunicationError, OperationTimeoutError, ServiceBusServerBusyError,
    ServiceBusQuotaExceededError, TimeoutError,
)
# The SDK keeps an error's AMQP condition private but writes it into the message, its public text.
INTERNAL_ERROR_TEXT = "amqp:internal-error"


def is_failover_error(exc: BaseException) -> bool:
    """An error after which the namespace may be unavailable (clarifications, issue 15, item 2)."""
    if isinstance(exc, FAILOVER_ERRORS):
        return True
    return isinstance(exc, ServiceBusError) and INTERNAL_ERROR_TEXT in str(exc)


def is_entity_not_found(exc: BaseException) -> bool:
    """The entity does not exist: refused at attach (MessagingEntityNotFoundError), or its put-token answered
    404, as Service Bus answers for a missing entity (the SDK raises ServiceBusAuthenticationError then, with
    the put-token's status on the AMQP error it wraps)."""
    if isinstance(exc, MessagingEntityNotFoundError):
        return True
    if not isinstance(exc, ServiceBusAuthenticationError):
        return False
    inner = getattr(exc, "inner_exception", None) or exc.__cause__
    return getattr(inner, "status_code", None) == 404


def is_namespace_auth_fault(exc: BaseException) -> bool:
    """The namespace refused our credentials (a fault of the whole namespace client); a put-token refused
    only because its entity does not exist is not one."""
    return isinstance(exc, ServiceBusAuthenticationError) and not is_entity_not_found(exc)


@dataclass(slots=True)
class EntityRecord:
    failing_since: float | None = None
    failed_over: bool = False
    pinging: bool = False
    failovers: int = 0


@dataclass(slots=True)
class FailoverBook:
    failover_interval: timedelta
    backlog_count: int
    rng: random.Random = field(default_factory=random.Random)
    backlog_retry_after: timedelta = timedelta(minutes=1)
    clock: Callable[[], float] = time.monotonic
    _entities: dict[str, EntityRecord] = field(default_factory=dict)
    _available: set[int] = field(default_factory=set)
    _dropped: dict[int, tuple[float, int]] = field(default_factory=dict)  # index -> (back until, strikes)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._available = set(range(self.backlog_count))

    def _record(self, path: str) -> EntityRecord:
        return self._entities.setdefault(path.lower(), EntityRecord())

    def failed_over(self, path: str) -> bool:
        with self._lock:
            return self._record(path).failed_over

    def primary_succeeded(self, path: str) -> None:
        with self._lock:
            record = self._record(path)
            record.failing_since = None

    def primary_failed(self, path: str, now: float, began: float | None = None) -> bool:
        """Note a failover error of an attempt that ``began`` then (``now`` if not given; the first
        failure starts the timer when its attempt began); True once the entity is failed over."""
        with self._lock:
            record = self._record(path)
            if record.failed_over:
                return True
            if record.failing_since is None:
                record.failing_since = now if began is None else min(began, now)
            if now - record.failing_since >= self.failover_interval.total_seconds():
                record.failed_over = True
                record.failovers += 1
                return True
            return False

    def failing(self, path: str) -> bool:
        """True while the entity's failover timer runs (a failover error, no success since)."""
        with self._lock:
            return self._record(path).failing_since is not None

    def time_left(self, path: str, now: float) -> float:
        """Seconds until the running timer fails the entity over (the full interval when none runs)."""
        with self._lock:
            record = self._record(path)
            if record.failing_since is None:
                return self.failover_interval.total_seconds()
            return max(0.0, self.failover_interval.total_seconds() - (now - record.failing_since))

    def start_pinging(self, path: str) -> bool:
        """True for the one caller that should start the entity's pinger."""
        with self._lock:
            record = self._record(path)
            if not record.failed_over or record.pinging:
                return False
            record.pinging = True
            return True

    def ping_succeeded(self, path: str) -> None:
        with self._lock:
            record = self._record(path)
            record.failed_over = False
            record.failing_since = None
            record.pinging = False

    def ping_stopped(self, path: str) -> None:
        with self._lock:
            self._record(path).pinging = False

    def failed_over_entities(self) -> list[str]:
        with self._lock:
            return sorted(p for p, r in self._entities.items() if r.failed_over)

    # ---- backlog rotation ---------------------------------------------------------------------

    def _readmit(self) -> None:
        now = self.clock()
        for index, (until, _) in self._dropped.items():
            if until <= now:
                self._available.add(index)

    def pick_backlog(self, current: int | None, exclude: Collection[int] = ()) -> int | None:
        """The sender's backlog queue: ``current`` while it is in the rotation, else a random one
        (never one in ``exclude``: those one send has tried already)."""
        with self._lock:
            self._readmit()
            if current is not None and current in self._available and current not in exclude:
                return current
            candidates = sorted(self._available.difference(exclude))
            if not candidates:
                return None
            return self.rng.choice(candidates)

    def drop_backlog(self, index: int) -> None:
        """A send to it failed over: out of the rotation until its back-off has passed."""
        with self._lock:
            if index not in self._available:
                return  # another sender dropped it already; one failure, one strike
            self._available.discard(index)
            strikes = self._dropped.get(index, (0.0, 0))[1] + 1
            pause = self.backlog_retry_after.total_seconds() * min(16, 2 ** (strikes - 1))
            self._dropped[index] = (self.clock() + pause, strikes)

    def backlog_succeeded(self, index: int) -> None:
        """A send to it succeeded: its next drop starts the back-off afresh."""
        with self._lock:
            if index in self._available:
                self._dropped.pop(index, None)

    def available_backlogs(self) -> list[int]:
        with self._lock:
            self._readmit()
            return sorted(self._available)
