"""Paired namespaces: sends that fail over to backlog queues in a secondary namespace (sync form).

Theory of operation (paired-namespaces seed; clarifications, issue 15; the state machine itself is
``failover.FailoverBook``):

- Opening the client checks the secondary namespace's backlog queues through
  ``ServiceBusAdministrationClient`` and creates the missing ones with the seed's properties.
  Extra or differently configured backlog queues are left as they are.
- ``get_queue_sender`` / ``get_topic_sender`` give a ``PairedSender``. While the primary works it
  is a plain sender. After a failover error it retries the primary until ``failover_interval`` has
  passed without a success, then rewrites the message (``backlog``) into its backlog queue; the
  caller sees an error only when the primary and every backlog queue have failed.
- A failed-over entity is pinged (``application/vnd.ms-servicebus-ping``, 1 s TTL) every
  ``ping_primary_interval`` by one thread; a successful ping sends everyone back to the primary.
- With ``enable_syphon``, one ``Syphon`` thread per backlog queue long-polls it and moves each
  message to its ``x-ms-path`` entity in the primary, completing it only after that send succeeded.
- Close/fault coordination: closing or faulting either namespace client (``client.primary``,
  ``client.secondary``) closes the other at once, and the paired client then refuses work with
  ``PairedClientClosed``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSender,
)
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
)
from azure.servicebus.management import ServiceBusAdministrationClient

from sodalite.client import backlog
from sodalite.client.batch import KeepingMessageBatch
from sodalite.client.failover import FailoverBook, is_failover_error
from sodalite.client.paired_messages import as_list, ping_message, plan_syphon_batch, refusal, to_backlog_message
from sodalite.errors import BacklogQueueSetupFailed, FailoverExhausted, PairedClientClosed, SecondaryUnavailable

log = logging.getLogger(__name__)

SYPHON_BATCH = 100
RETRY_PAUSE = (0.1, 1.0)  # first and longest pause between retries of the primary while the timer runs


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


def ensure_backlog_queues(secondary_connection_string: str, names: list[str], **kwargs: Any) -> None:
    """Create the backlog queues that do not exist; leave existing ones as they are."""
    admin = ServiceBusAdministrationClient.from_connection_string(secondary_connection_string, **kwargs)
    with admin:
        for name in names:
            try:
                try:
                    admin.get_queue(name)
                    continue
                except ResourceNotFoundError:
                    pass
                try:
                    admin.create_queue(name, **backlog.BACKLOG_QUEUE_PROPERTIES.as_kwargs())
                except ResourceExistsError:
                    pass  # another client created it meanwhile
            except (ClientAuthenticationError, HttpResponseError, ServiceRequestError) as exc:
                raise backlog_setup_error(name, exc) from exc


def backlog_setup_error(name: str, exc: Exception) -> BacklogQueueSetupFailed | SecondaryUnavailable:
    """The clear error for a management call about backlog queue ``name`` that failed with ``exc``."""
    status = exc.status_code if isinstance(exc, HttpResponseError) else None
    if isinstance(exc, ClientAuthenticationError) or status in (401, 403):
        return BacklogQueueSetupFailed(
            f"backlog queue '{name}' could not be read or created in the secondary namespace: "
            f"{_first_line(exc)} (the key needs Manage rights)")
    if isinstance(exc, ServiceRequestError):
        return SecondaryUnavailable(f"the secondary namespace cannot be reached to set up backlog queue "
                                    f"'{name}': {_first_line(exc)}")
    return SecondaryUnavailable(f"the secondary namespace refused backlog queue '{name}': {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class NamespaceSide:
    """One of the two namespace clients; closing or faulting it closes the other (coordination)."""

    def __init__(self, role: str, client: ServiceBusClient, on_down: Callable[[NamespaceSide], None],
                 before_close: Callable[[], None] = lambda: None) -> None:
        self.role = role
        self.client = client
        self.closed = False
        self.fault: BaseException | None = None
        self._on_down = on_down
        self._before_close = before_close
        self._lock = threading.Lock()

    def close(self) -> None:
        self._down(None)

    def set_fault(self, exc: BaseException) -> None:
        self._down(exc)

    def _down(self, fault: BaseException | None) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self.fault = fault
        self._before_close()  # stop the pumps first: they open receivers on this client
        try:
            close_sdk_client(self.client)
        finally:
            self._on_down(self)


def close_sdk_client(client: ServiceBusClient) -> None:
    """Close an SDK client whose handlers other threads may still be opening.

    ``ServiceBusClient.close`` iterates a set of handlers that a thread opening a receiver changes;
    the pumps are told to stop first, so a retry or two finds the set still.
    """
    for attempt in range(20):
        try:
            client.close()
            return
        except RuntimeError:  # "Set changed size during iteration"
            if attempt == 19:
                raise
            time.sleep(0.05)


class PairedMessageBatch(KeepingMessageBatch):
    """What ``PairedSender.create_message_batch`` returns: an SDK ``ServiceBusMessageBatch`` that keeps its
    messages, so a failover can rewrite them for a backlog queue."""


Sendable = ServiceBusMessage | Iterable[ServiceBusMessage] | PairedMessageBatch | ServiceBusMessageBatch


class PairedSender:
    """A sender to one entity of the primary namespace that fails over to the backlog queues."""

    def __init__(self, client: PairedNamespaceClient, path: str, topic: bool) -> None:
        self._client = client
        self.entity_path = path
        self._topic = topic
        self._primary: ServiceBusSender | None = None
        self._backlog_index: int | None = None
        self._backlog_senders: dict[int, ServiceBusSender] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> PairedSender:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> PairedMessageBatch:
        """As the SDK's: a ``ServiceBusMessageBatch`` that keeps its messages, so a failover can rewrite
        them. Its limit is the primary entity's (as the SDK asks its link) while the entity is not
        failed over and the primary answers, else ``max_size_in_bytes`` or 256 KB."""
        with self._lock:
            self._client.check_open()
            limit = max_size_in_bytes
            if not self._client.book.failed_over(self.entity_path):
                try:
                    limit = self._primary_sender().create_message_batch(max_size_in_bytes).max_size_in_bytes
                except Exception as exc:
                    if not is_failover_error(exc):
                        raise  # e.g. a max_size_in_bytes above the entity's limit (ValueError)
                    self._drop_primary()
            return PairedMessageBatch(limit)

    def _primary_sender(self) -> ServiceBusSender:
        if self._primary is None:
            side = self._client.primary.client
            self._primary = (side.get_topic_sender(self.entity_path) if self._topic
                             else side.get_queue_sender(self.entity_path))
        return self._primary

    def _drop_primary(self) -> None:
        sender, self._primary = self._primary, None
        if sender is not None:
            try:
                sender.close()
            except Exception:  # a broken link may fail to close; it is gone either way
                log.debug("closing a broken primary sender failed", exc_info=True)

    def send_messages(self, message: Sendable, *, timeout: float | None = None) -> None:
        """Send to the primary, or, once the entity is failed over, to a backlog queue."""
        with self._lock:
            self._client.check_open()
            raw_batch: ServiceBusMessageBatch | None = None
            if isinstance(message, KeepingMessageBatch):
                messages: list[ServiceBusMessage] = message.messages
            elif isinstance(message, ServiceBusMessageBatch):
                raw_batch, messages = message, []  # made elsewhere: it goes as it is, or not at all
            else:
                messages = as_list(message)
            if raw_batch is None and not messages:
                return
            book = self._client.book
            if not book.failed_over(self.entity_path):
                pause = RETRY_PAUSE[0]
                while True:
                    try:
                        self._primary_sender().send_messages(raw_batch if raw_batch is not None else messages,
                                                             timeout=timeout)
                        book.primary_succeeded(self.entity_path)
                        return
                    except Exception as exc:
                        self._client.note_primary_error(exc)  # an authentication failure faults the pair
                        if not is_failover_error(exc):
                            raise
                        self._drop_primary()
                        if book.primary_failed(self.entity_path, time.monotonic()):
                            log.warning("entity '%s' fails over to the backlog queues: %s", self.entity_path,
                                        _first_line(exc))
                            if raw_batch is not None:
                                raise FailoverExhausted(
                                    "the primary is unavailable and an SDK ServiceBusMessageBatch cannot be "
                                    "redirected to a backlog queue (its messages cannot be read back); "
                                        "make it with this sender's create_message_batch()") from exc
                            break
                        self._client.check_open()
                        time.sleep(min(pause, max(0.01, book.time_left(self.entity_path, time.monotonic()))))
                        pause = min(pause * 2, RETRY_PAUSE[1])
            elif raw_batch is not None:
                raise FailoverExhausted("the entity is failed over and an SDK ServiceBusMessageBatch cannot be "
                                        "redirected to a backlog queue (its messages cannot be read back); "
                                        "make it with this sender's create_message_batch()")
            self._client.start_pinging(self.entity_path)
            self._send_to_backlog(messages, timeout)

    def _send_to_backlog(self, messages: list[ServiceBusMessage], timeout: float | None) -> None:
        rewritten = [to_backlog_message(m, self.entity_path) for m in messages]
        book = self._client.book
        last: BaseException | None = None
        tried: set[int] = set()
        while True:
            self._client.check_open()
            index = book.pick_backlog(self._backlog_index, tried)
            if index is None:
                raise FailoverExhausted(
                    f"neither the primary entity '{self.entity_path}' nor any backlog queue took the message"
                    + (f": {_first_line(last)}" if last is not None else "")) from last
            self._backlog_index = index
            sender = self._backlog_senders.get(index)
            if sender is None:
                sender = self._client.secondary.client.get_queue_sender(self._client.backlog_names[index])
                self._backlog_senders[index] = sender
            tried.add(index)
            try:
                sender.send_messages(rewritten, timeout=timeout)
                book.backlog_succeeded(index)
                return
            except Exception as exc:
                if not is_failover_error(exc):
                    raise
                last = exc
                log.warning("backlog queue '%s' leaves the rotation: %s", self._client.backlog_names[index],
                            _first_line(exc))
                book.drop_backlog(index)
                self._backlog_senders.pop(index, None)
                try:
                    sender.close()
                except Exception:
                    log.debug("closing a broken backlog sender failed", exc_info=True)

    def close(self) -> None:
        with self._lock:
            self._drop_primary()
            for sender in self._backlog_senders.values():
                try:
                    sender.close()
                except Exception:
                    log.debug("closing a backlog sender failed", exc_info=True)
            self._backlog_senders.clear()


@dataclass(slots=True)
class SyphonCounters:
    moved: int = 0
    dead_lettered: int = 0
    pings_dropped: int = 0


class Syphon:
    """Moves messages from one backlog queue to their entities in the primary namespace."""

    def __init__(self, primary: ServiceBusClient, secondary: ServiceBusClient, backlog_queue: str,
                 receive_wait: timedelta, retry_pause: timedelta, stop: threading.Event,
                 on_fault: Callable[[str, BaseException], None] | None = None,
                 on_progress: Callable[[str, SyphonCounters], None] | None = None) -> None:
        self.primary = primary
        self.secondary = secondary
        self.backlog_queue = backlog_queue
        self.receive_wait = receive_wait
        self.retry_pause = retry_pause
        self.stop = stop
        self.counters = SyphonCounters()
        self._on_fault = on_fault
        self._on_progress = on_progress
        self._senders: dict[str, ServiceBusSender] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with self.secondary.get_queue_receiver(self.backlog_queue) as receiver:
                    while not self.stop.is_set():
                        received = receiver.receive_messages(max_message_count=SYPHON_BATCH,
                                                             max_wait_time=self.receive_wait.total_seconds())
                        if received:
                            self.move(receiver, received)
                            if self._on_progress is not None:
                                self._on_progress(self.backlog_queue, self.counters)
            except ServiceBusAuthenticationError as exc:
                if self._on_fault is not None:
                    self._on_fault("secondary", exc)
                return
            except Exception as exc:
                if self.stop.is_set():
                    return
                log.info("syphon of '%s' pauses: %s", self.backlog_queue, _first_line(exc))
                self._close_senders()
                self.stop.wait(self.retry_pause.total_seconds())
        self._close_senders()

    def _close_senders(self) -> None:
        for sender in self._senders.values():
            try:
                sender.close()
            except Exception:
                log.debug("closing a syphon sender failed", exc_info=True)
        self._senders.clear()

    def move(self, receiver: ServiceBusReceiver, received: list[ServiceBusReceivedMessage]) -> None:
        """Send each message to its entity in the primary, then complete it in the backlog.

        Consecutive messages for one entity go in one send. A failover error abandons the rest and
        raises (the caller pauses); a target that is gone dead-letters that group.
        """
        plan = plan_syphon_batch(received, datetime.now(UTC))
        for ping in plan.pings:
            receiver.complete_message(ping)
            self.counters.pings_dropped += 1
        for message, reason, description in plan.dead_letters:
            receiver.dead_letter_message(message, reason=reason, error_description=description)
            self.counters.dead_lettered += 1
        for position, (path, pairs) in enumerate(plan.groups):
            try:
                self._sender(path).send_messages([restored for _, restored in pairs])
            except Exception as exc:
                self._drop_sender(path)
                refused = refusal(path, exc)
                if refused is None:
                    for _, rest in plan.groups[position:]:
                        for message, _ in rest:
                            try:
                                receiver.abandon_message(message)
                            except Exception:
                                log.debug("abandon failed; the lock will expire", exc_info=True)
                    raise
                for message, _ in pairs:
                    receiver.dead_letter_message(message, reason=refused[0], error_description=refused[1])
                    self.counters.dead_lettered += 1
                continue
            for message, _ in pairs:
                receiver.complete_message(message)
                self.counters.moved += 1

    def _sender(self, path: str) -> ServiceBusSender:
        sender = self._senders.get(path.lower())
        if sender is None:
            sender = self.primary.get_queue_sender(path)  # a queue's or a topic's address alike
            self._senders[path.lower()] = sender
        return sender

    def _drop_sender(self, path: str) -> None:
        sender = self._senders.pop(path.lower(), None)
        if sender is not None:
            try:
                sender.close()
            except Exception:
                log.debug("closing a syphon sender failed", exc_info=True)


class PairedNamespaceClient:
    """A primary namespace paired with a secondary one that holds its backlog queues."""

    def __init__(self, primary_connection_string: str, options: PairedNamespaceOptions, **kwargs: Any) -> None:
        """``kwargs`` (``connection_verify``, ``retry_total``, ...) go to every client made here."""
        self.options = options
        self.primary_namespace = options.primary_namespace or backlog.namespace_of(primary_connection_string)
        self.backlog_names = backlog.backlog_queue_names(self.primary_namespace, options.backlog_queue_count)
        self.book = FailoverBook(options.failover_interval, options.backlog_queue_count,
                                 backlog_retry_after=options.ping_primary_interval)
        self._kwargs = kwargs
        self._primary_connection_string = primary_connection_string
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed: PairedClientClosed | None = None
        self.syphons: list[Syphon] = []
        ensure_backlog_queues(options.secondary_connection_string, self.backlog_names, **kwargs)
        self.primary = NamespaceSide(
            "primary", ServiceBusClient.from_connection_string(primary_connection_string, **kwargs), self._side_down,
            self._stop.set)
        self.secondary = NamespaceSide(
            "secondary", ServiceBusClient.from_connection_string(options.secondary_connection_string, **kwargs),
            self._side_down, self._stop.set)
        if options.enable_syphon:
            for name in self.backlog_names:
                syphon = Syphon(self.primary.client, self.secondary.client, name, options.syphon_receive_wait,
                                options.ping_primary_interval, self._stop, on_fault=self._fault_from)
                self.syphons.append(syphon)
                self._spawn(syphon.run, f"syphon {name}")

    def __enter__(self) -> PairedNamespaceClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # ---- close/fault coordination ---------------------------------------------------------------

    def _side_down(self, side: NamespaceSide) -> None:
        other = self.secondary if side is self.primary else self.primary
        reason = f"the {side.role} namespace client " + (
            f"faulted: {_first_line(side.fault)}" if side.fault is not None else "closed")
        with self._lock:
            if self._closed is None:
                self._closed = PairedClientClosed(reason)
        self._stop.set()
        if not other.closed:
            other.set_fault(PairedClientClosed(reason))

    def _fault_from(self, role: str, exc: BaseException) -> None:
        (self.primary if role == "primary" else self.secondary).set_fault(exc)

    def note_primary_error(self, exc: BaseException) -> None:
        if isinstance(exc, ServiceBusAuthenticationError):
            self.primary.set_fault(exc)

    def check_open(self) -> None:
        closed = self._closed
        if closed is not None:
            raise PairedClientClosed(closed.description)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def close(self) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = PairedClientClosed("the paired client is closed")
        self._stop.set()
        for side in (self.primary, self.secondary):
            if not side.closed:
                side.close()
        for thread in self._threads:
            thread.join(timeout=5)

    # ---- senders and pings ------------------------------------------------------------------------

    def get_queue_sender(self, queue_name: str) -> PairedSender:
        self.check_open()
        return PairedSender(self, queue_name, topic=False)

    def get_topic_sender(self, topic_name: str) -> PairedSender:
        self.check_open()
        return PairedSender(self, topic_name, topic=True)

    def start_pinging(self, path: str) -> None:
        if self.book.start_pinging(path):
            self._spawn(lambda: self._ping_until_back(path), f"ping {path}")

    def _ping_until_back(self, path: str) -> None:
        interval = self.options.ping_primary_interval.total_seconds()
        try:
            while not self._stop.wait(interval):
                try:
                    with self.primary.client.get_queue_sender(path) as sender:
                        sender.send_messages(ping_message())
                except Exception as exc:
                    log.info("ping of '%s' failed: %s", path, _first_line(exc))
                    continue
                log.warning("entity '%s' answers again; sends go to the primary", path)
                self.book.ping_succeeded(path)
                return
        finally:
            self.book.ping_stopped(path)
