"""Paired namespaces: what the sync and asyncio clients share that is not I/O.

Theory of operation. A ``PairedSender`` send is one of two things (``outgoing``): messages it can
rewrite for a backlog queue, or an SDK ``ServiceBusMessageBatch`` made elsewhere that can only go to
the primary as it is. While the entity is not failed over, the shell sends to the primary; after a
failover error it asks ``after_primary_failure`` what next: retry the primary after a pause that
doubles up to ``RETRY_PAUSE[1]`` (never past the end of ``failover_interval``), or fail over (the
``FailoverBook`` says when). A failed-over send walks the backlog rotation with a ``BacklogRound``:
each backlog queue at most once, a queue that fails with a failover error leaves the rotation, and
an empty rotation fails the send with ``FailoverExhausted``. ``PairedState`` is the client's own
bookkeeping (names, book, whether it is closed and why); ``SideState`` that of one namespace client
(closing or faulting it once). The shells do only the sends, sleeps, closes and tasks or threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch

from sodalite.client import backlog
from sodalite.client.availability import PUMP_SLICE, SHORT_ATTEMPT, bounded_wait
from sodalite.client.batch import KeepingMessageBatch
from sodalite.client.failover import FailoverBook, is_failover_error
from sodalite.client.paired_messages import as_list
from sodalite.client.replication_core import SdkClient
from sodalite.errors import BacklogQueueSetupFailed, FailoverExhausted, PairedClientClosed, SecondaryUnavailable

log = logging.getLogger("sodalite.client.paired")

SYPHON_BATCH = 100
RETRY_PAUSE = (0.1, 1.0)  # first and longest pause between retries of the primary while the timer runs

W = TypeVar("W")
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class PairedNamespaceOptions:
    """How a paired client behaves (the seed's SendAvailabilityPairedNamespaceOptions)."""

    secondary_connection_string: str
    backlog_queue_count: int = 10
    failover_interval: timedelta = timedelta(seconds=10)
    ping_primary_interval: timedelta = timedelta(minutes=1)
    enable_syphon: bool = True
    primary_namespace: str | None = None  # None: the first label of the primary's host name
    syphon_receive_wait: timedelta = timedelta(minutes=15)  # the syphon's long poll

    def __post_init__(self) -> None:
        if self.backlog_queue_count < 1:
            raise ValueError(f"backlog_queue_count must be at least 1, got {self.backlog_queue_count}")
        for name in ("failover_interval", "ping_primary_interval", "syphon_receive_wait"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")


class PairedMessageBatch(KeepingMessageBatch):
    """What ``PairedSender.create_message_batch`` returns: an SDK ``ServiceBusMessageBatch`` that keeps its
    messages, so a failover can rewrite them for a backlog queue."""


@dataclass(slots=True)
class SyphonCounters:
    moved: int = 0
    dead_lettered: int = 0
    pings_dropped: int = 0


def backlog_setup_error(name: str, exc: Exception) -> BacklogQueueSetupFailed | SecondaryUnavailable:
    """The clear error for a management call about backlog queue ``name`` that failed with ``exc``."""
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    if isinstance(exc, ClientAuthenticationError) or status in (401, 403):
        return BacklogQueueSetupFailed(
            f"backlog queue '{name}' could not be read or created in the secondary namespace: "
            f"{first_line(exc)} (the key needs Manage rights)")
    if isinstance(exc, ServiceRequestError):
        return SecondaryUnavailable(f"the secondary namespace cannot be reached to set up backlog queue "
                                    f"'{name}': {first_line(exc)}")
    return SecondaryUnavailable(f"the secondary namespace refused backlog queue '{name}': {first_line(exc)}")


# The management errors after which setting up a backlog queue failed for good (mapped as above).
SETUP_ERRORS = (ClientAuthenticationError, HttpResponseError, ServiceRequestError)


def first_line(exc: BaseException) -> str:
    """An error's first line, or its type's name when it has no text (for logs and error texts)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def queue_or_topic_sender(client: SdkClient[W, object], path: str, topic: bool) -> W:
    """The SDK sender to the primary entity ``path`` (making one opens nothing)."""
    return client.get_topic_sender(path) if topic else client.get_queue_sender(path)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What one ``send_messages`` carries: ``messages`` (rewritable), or ``raw_batch`` (as it is)."""

    messages: list[ServiceBusMessage]
    raw_batch: ServiceBusMessageBatch | None = None

    @property
    def empty(self) -> bool:
        return self.raw_batch is None and not self.messages

    @property
    def to_primary(self) -> ServiceBusMessageBatch | list[ServiceBusMessage]:
        return self.raw_batch if self.raw_batch is not None else self.messages


Sendable = ServiceBusMessage | Iterable[ServiceBusMessage] | PairedMessageBatch | ServiceBusMessageBatch


def outgoing(message: Sendable) -> Outgoing:
    if isinstance(message, KeepingMessageBatch):
        return Outgoing(message.messages)
    if isinstance(message, ServiceBusMessageBatch):
        return Outgoing([], message)  # made elsewhere: it goes as it is, or not at all
    return Outgoing(as_list(message))


_RAW_BATCH = ("an SDK ServiceBusMessageBatch cannot be redirected to a backlog queue (its messages cannot be "
              "read back); make it with this sender's create_message_batch()")


def raw_batch_cannot_fail_over(*, just_now: bool) -> FailoverExhausted:
    """The error for an SDK batch bound for a failed-over entity (``just_now``: this send failed it over)."""
    if just_now:
        return FailoverExhausted(f"the primary is unavailable and {_RAW_BATCH}")
    return FailoverExhausted(f"the entity is failed over and {_RAW_BATCH}")


@dataclass(frozen=True, slots=True)
class RetryPrimary:
    """Retry the primary after ``wait`` seconds; the pause after that is ``next_pause``."""

    wait: float
    next_pause: float


FAIL_OVER = "fail over"


def attempt_limit(book: FailoverBook, path: str, now: float, app_timeout: float | None) -> float:
    """The timeout of one send to the primary: never past the end of the running failover timer; while
    none runs, the whole interval (at least ``SHORT_ATTEMPT``, so a short interval does not cut healthy
    sends short). The application's own ``timeout`` wins when shorter."""
    if book.failing(path):
        return bounded_wait(app_timeout, book.time_left(path, now))
    return bounded_wait(app_timeout, max(book.failover_interval.total_seconds(), SHORT_ATTEMPT))


def pump_slice(receive_wait: timedelta) -> float:
    """One receive of a syphon's long poll: at most ``PUMP_SLICE``, so a stop is seen that soon."""
    return min(receive_wait.total_seconds(), PUMP_SLICE) or PUMP_SLICE


def after_primary_failure(book: FailoverBook, path: str, now: float, pause: float,
                          began: float | None = None) -> RetryPrimary | str:
    """A send to the primary (an attempt that ``began`` then) failed with a failover error: retry it, or
    ``FAIL_OVER`` once the timer ran out. The timer starts when the first failed attempt began."""
    if book.primary_failed(path, now, began):
        return FAIL_OVER
    return RetryPrimary(min(pause, max(0.01, book.time_left(path, now))), min(pause * 2, RETRY_PAUSE[1]))


class BacklogRound:
    """One failed-over send's walk through the backlog rotation: each queue at most once."""

    def __init__(self, book: FailoverBook, path: str, backlog_names: list[str]) -> None:
        self._book = book
        self._path = path
        self._names = backlog_names
        self._tried: set[int] = set()
        self._last: BaseException | None = None

    def pick(self, current: int | None) -> int:
        """The backlog queue to try next (``current``, the sender's, while it is in the rotation)."""
        index = self._book.pick_backlog(current, self._tried)
        if index is None:
            raise FailoverExhausted(
                f"neither the primary entity '{self._path}' nor any backlog queue took the message"
                + (f": {first_line(self._last)}" if self._last is not None else "")) from self._last
        self._tried.add(index)
        return index

    def succeeded(self, index: int) -> None:
        self._book.backlog_succeeded(index)

    def failed(self, index: int, exc: BaseException) -> None:
        """A send to backlog queue ``index`` failed: re-raise an error about the message; else the queue
        leaves the rotation (the caller drops its sender) and the next pick tries another."""
        if not is_failover_error(exc):
            raise exc
        self._last = exc
        log.warning("backlog queue '%s' leaves the rotation: %s", self._names[index], first_line(exc))
        self._book.drop_backlog(index)


class HandlerCache(Generic[K, W]):
    """SDK senders kept per key and made on first use (making one opens nothing); closing is the caller's."""

    def __init__(self, make: Callable[[K], W], key: Callable[[K], K] = lambda k: k) -> None:
        self._make = make
        self._key = key
        self._handlers: dict[K, W] = {}

    def get(self, key: K) -> W:
        handler = self._handlers.get(self._key(key))
        if handler is None:
            handler = self._handlers[self._key(key)] = self._make(key)
        return handler

    def pop(self, key: K) -> W | None:
        return self._handlers.pop(self._key(key), None)

    def take_all(self) -> list[W]:
        handlers = list(self._handlers.values())
        self._handlers.clear()
        return handlers


class SideState:
    """One namespace client's state: closed (with its fault, if one closed it), at most once."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.closed = False
        self.fault: BaseException | None = None
        self._lock = threading.Lock()

    def _goes_down(self, fault: BaseException | None) -> bool:
        """True for the one caller that closes the side (and must tell the other); False if it is closed."""
        with self._lock:
            if self.closed:
                return False
            self.closed = True
            self.fault = fault
            return True

    def down_reason(self) -> str:
        """Why the paired client refuses work once this side is down."""
        return f"the {self.role} namespace client " + (
            f"faulted: {first_line(self.fault)}" if self.fault is not None else "closed")


class PairedState:
    """A paired client's bookkeeping: its backlog queue names, its failover book, whether it is closed."""

    def __init__(self, primary_connection_string: str, options: PairedNamespaceOptions) -> None:
        self.options = options
        self.primary_namespace = options.primary_namespace or backlog.namespace_of(primary_connection_string)
        self.backlog_names = backlog.backlog_queue_names(self.primary_namespace, options.backlog_queue_count)
        self.book = FailoverBook(options.failover_interval, options.backlog_queue_count,
                                 backlog_retry_after=options.ping_primary_interval)
        self._closed: PairedClientClosed | None = None
        self._state_lock = threading.Lock()

    def _close_with(self, reason: str) -> None:
        """The client is closed from now on; the first reason stays."""
        with self._state_lock:
            if self._closed is None:
                self._closed = PairedClientClosed(reason)

    def check_open(self) -> None:
        closed = self._closed
        if closed is not None:
            raise PairedClientClosed(closed.description)

    @property
    def closed(self) -> bool:
        return self._closed is not None
