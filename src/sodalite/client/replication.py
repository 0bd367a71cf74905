"""ReplicatedClient: active and passive replication over two namespaces (seed: outages-and-disasters).

Theory of operation. The client holds one official SDK client per namespace. Each entity exists in
both, under the same name unless the caller names the secondary's.

- **Active**: a send goes to both namespaces, the secondary's copy from a worker thread while the
  primary's goes from the caller's; both copies carry the same MessageId (one is set where the
  message has none). The send returns when at least one copy was accepted (the SDK returns only
  after the broker's accept, i.e. once the copy is durable); both failing raises the secondary's
  error chained to the primary's.
- **Passive**: a send goes to the entity that is active for this client (the primary at first).
  If it fails with an error that says the namespace may be unavailable (``signals_unavailable``),
  the same message goes to the backup and, if that succeeds, the two swap roles for every sender
  of this client. If the backup fails too, roles stay and the backup's error is raised.
- **Receiving** (both modes): a receiver reads both namespaces, taking turns, and passes every copy
  through a ``CopyTracker`` that drops duplicates by MessageId with a ``DuplicateFilter``. A
  namespace whose receive fails with an availability error is left alone for ``retry_interval``
  and its receiver recreated; copies the application then settles through the lost link are
  recorded anyway (their settlement may fail silently: the copy comes back and is dropped).
- **Sessions**: a session receiver holds one SDK session receiver per namespace, both on the same
  session; with NEXT_AVAILABLE_SESSION the session is picked on opening (the primary's next free
  one, else the secondary's) and the other namespace then locks that one. Copies go through the
  same ``CopyTracker``. Peeks walk both namespaces, each MessageId once (``PeekMemory``).
- **Request/reply**: ``get_request_sender`` pairs two request queues with the relay pattern: the
  client picks one at random as active, sends each request there and waits for the reply, matched
  by CorrelationId, on its reply queue in the namespace the request went to. The round trip is the
  operation: a failed send or no reply within the timeout reissues the request to the backup, and
  its reply switches the roles; both failing leaves them. ``get_request_receiver`` serves both request queues and
  replies into the namespace each request came from.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSender,
    ServiceBusSessionFilter,
)
from azure.servicebus.exceptions import OperationTimeoutError

from sodalite.client.batch import KeepingMessageBatch
from sodalite.client.dedup import DuplicateFilter
from sodalite.client.replication_core import (
    DEFERRED_NOT_BUILT,
    CopyTracker,
    Outcome,
    PeekMemory,
    ReplicationMode,
    Verdict,
    check_pair,
    messages_of,
    refuse_sequence_number,
    settlement_outcome_is_assured,
    signals_unavailable,
)
from sodalite.errors import ConfigurationError, NotImplementedOperation

__all__ = ["ReplicatedClient", "ReplicatedReceiver", "ReplicatedRequestSender", "ReplicatedSender",
           "ReplicatedSession", "ReplicatedSessionReceiver", "ReplicationMode"]

_log = logging.getLogger("sodalite.client.replication")
T = TypeVar("T")

PRIMARY, SECONDARY = 0, 1
_SessionMakers = tuple[Callable[[str | ServiceBusSessionFilter], ServiceBusReceiver],
                       Callable[[str | ServiceBusSessionFilter], ServiceBusReceiver]]


class _Roles:
    """Which namespace is active, per entity, for one client (passive replication)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, int] = {}

    def active(self, key: str, default: int = PRIMARY) -> int:
        with self._lock:
            return self._active.setdefault(key, default)

    def switch_from(self, key: str, failed: int) -> None:
        with self._lock:
            if self._active.get(key, PRIMARY) == failed:
                self._active[key] = 1 - failed


class ReplicatedClient:
    """Two namespaces, one client. ``client_kwargs`` go to both ``ServiceBusClient``s."""

    def __init__(self, primary: str, secondary: str, *, mode: ReplicationMode = ReplicationMode.ACTIVE,
                 retry_interval: timedelta = timedelta(seconds=2), **client_kwargs: Any) -> None:
        check_pair(primary, secondary)
        if not isinstance(mode, ReplicationMode):
            raise ConfigurationError(f"mode must be a ReplicationMode, not {mode!r}")
        self.mode = mode
        self.retry_interval = retry_interval
        self._clients = (ServiceBusClient.from_connection_string(primary, **client_kwargs),
                         ServiceBusClient.from_connection_string(secondary, **client_kwargs))
        self._roles = _Roles()
        self._handlers: list[ReplicatedSender | ReplicatedReceiver | ReplicatedRequestSender] = []

    # -- senders ---------------------------------------------------------------------------------
    def get_queue_sender(self, queue_name: str, *, secondary_queue_name: str | None = None,
                         **kwargs: Any) -> ReplicatedSender:
        names = (queue_name, secondary_queue_name or queue_name)
        senders = (self._clients[0].get_queue_sender(names[0], **kwargs),
                   self._clients[1].get_queue_sender(names[1], **kwargs))
        return self._keep(ReplicatedSender(self, senders, f"queue:{names[0]}|{names[1]}"))

    def get_topic_sender(self, topic_name: str, *, secondary_topic_name: str | None = None,
                         **kwargs: Any) -> ReplicatedSender:
        names = (topic_name, secondary_topic_name or topic_name)
        senders = (self._clients[0].get_topic_sender(names[0], **kwargs),
                   self._clients[1].get_topic_sender(names[1], **kwargs))
        return self._keep(ReplicatedSender(self, senders, f"topic:{names[0]}|{names[1]}"))

    # -- receivers -------------------------------------------------------------------------------
    def get_queue_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                           duplicate_filter: DuplicateFilter | None = None, **kwargs: Any) -> ReplicatedReceiver:
        names = (queue_name, secondary_queue_name or queue_name)
        session = kwargs.pop("session_id", None)
        if session is not None:
            makers: _SessionMakers = (
                lambda sid: self._clients[0].get_queue_receiver(names[0], session_id=sid, **kwargs),
                lambda sid: self._clients[1].get_queue_receiver(names[1], session_id=sid, **kwargs))
            return self._keep(ReplicatedSessionReceiver(self, makers, session, duplicate_filter, kwargs))
        factories: tuple[Callable[[], ServiceBusReceiver], Callable[[], ServiceBusReceiver]] = (
            lambda: self._clients[0].get_queue_receiver(names[0], **kwargs),
            lambda: self._clients[1].get_queue_receiver(names[1], **kwargs))
        return self._keep(ReplicatedReceiver(self, factories, duplicate_filter, kwargs))

    def get_subscription_receiver(self, topic_name: str, subscription_name: str, *,
                                  secondary_topic_name: str | None = None,
                                  secondary_subscription_name: str | None = None,
                                  duplicate_filter: DuplicateFilter | None = None,
                                  **kwargs: Any) -> ReplicatedReceiver:
        second = (secondary_topic_name or topic_name, secondary_subscription_name or subscription_name)
        session = kwargs.pop("session_id", None)
        if session is not None:
            makers: _SessionMakers = (
                lambda sid: self._clients[0].get_subscription_receiver(topic_name, subscription_name,
                                                                       session_id=sid, **kwargs),
                lambda sid: self._clients[1].get_subscription_receiver(second[0], second[1], session_id=sid,
                                                                       **kwargs))
            return self._keep(ReplicatedSessionReceiver(self, makers, session, duplicate_filter, kwargs))
        factories: tuple[Callable[[], ServiceBusReceiver], Callable[[], ServiceBusReceiver]] = (
            lambda: self._clients[0].get_subscription_receiver(topic_name, subscription_name, **kwargs),
            lambda: self._clients[1].get_subscription_receiver(second[0], second[1], **kwargs))
        return self._keep(ReplicatedReceiver(self, factories, duplicate_filter, kwargs))

    # -- request/reply ---------------------------------------------------------------------------
    def get_request_sender(self, queue_name: str, *, reply_queue_name: str, secondary_queue_name: str | None = None,
                           secondary_reply_queue_name: str | None = None) -> ReplicatedRequestSender:
        """Requests to a pair of queues (role-switching, relay pattern), replies on a reply queue."""
        requests = (self._clients[0].get_queue_sender(queue_name),
                    self._clients[1].get_queue_sender(secondary_queue_name or queue_name))
        reply_names = (reply_queue_name, secondary_reply_queue_name or reply_queue_name)
        replies = (self._clients[0].get_queue_receiver(reply_names[0]),
                   self._clients[1].get_queue_receiver(reply_names[1]))
        return self._keep(ReplicatedRequestSender(requests, replies, reply_names))

    def get_request_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                             duplicate_filter: DuplicateFilter | None = None, **kwargs: Any) -> ReplicatedReceiver:
        """The service's side: both request queues, duplicates dropped; answer with ``receiver.reply``."""
        return self.get_queue_receiver(queue_name, secondary_queue_name=secondary_queue_name,
                                       duplicate_filter=duplicate_filter, **kwargs)

    def _client(self, index: int) -> ServiceBusClient:
        return self._clients[index]

    def _keep(self, handler: T) -> T:
        self._handlers.append(handler)  # type: ignore[arg-type]
        return handler

    def close(self) -> None:
        for handler in self._handlers:
            try:
                handler.close()
            except Exception:  # closing what may already be broken must not stop the rest
                _log.debug("closing a replicated handler failed", exc_info=True)
        self._handlers.clear()
        for client in self._clients:
            client.close()

    def __enter__(self) -> ReplicatedClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ReplicatedSender:
    """Sends to two entities as the client's mode says."""

    def __init__(self, client: ReplicatedClient, senders: tuple[ServiceBusSender, ServiceBusSender], key: str) -> None:
        self._client = client
        self._senders = senders
        self._key = key
        self._pool: ThreadPoolExecutor | None = None

    @property
    def active_namespace(self) -> int:
        """0 while the primary is the active entity (passive mode), 1 after a role switch."""
        return self._client._roles.active(self._key)

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> KeepingMessageBatch:
        """A batch for this sender, as the SDK's: its size limit is the smaller of the two entities'
        (each namespace's link is asked; one that cannot be reached is left out), and each message
        gets a MessageId as it is added, so both copies share it."""
        limits: list[int] = []
        first_error: Exception | None = None
        for sender in self._senders:
            try:
                limits.append(sender.create_message_batch(max_size_in_bytes).max_size_in_bytes)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                first_error = first_error or error
        if not limits:
            assert first_error is not None
            raise first_error
        return KeepingMessageBatch(min(limits), set_message_ids=True)

    def send_messages(self, message: ServiceBusMessage | Iterable[ServiceBusMessage] | KeepingMessageBatch, *,
                      timeout: float | None = None) -> None:
        batch = messages_of(message)
        if not batch:
            return
        if self._client.mode is ReplicationMode.ACTIVE:
            self._send_active(batch, timeout)
        else:
            self._send_passive(batch, timeout)

    def _send_active(self, batch: list[ServiceBusMessage], timeout: float | None) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="replicated-send")
        # The secondary gets the messages' AMQP form: the SDK wraps it anew, so the two threads
        # share no object it mutates.
        raw = [m.raw_amqp_message for m in batch]
        second: Future[None] = self._pool.submit(self._senders[SECONDARY].send_messages, raw, timeout=timeout)
        first_error: BaseException | None = None
        try:
            self._senders[PRIMARY].send_messages(batch, timeout=timeout)
        except Exception as error:
            first_error = error
        try:
            second.result()
        except Exception as error:
            if first_error is not None:
                raise error from first_error
            _log.warning("the secondary copy was not sent (the primary's was): %s", error)
            return
        if first_error is not None:
            _log.warning("the primary copy was not sent (the secondary's was): %s", first_error)

    def _send_passive(self, batch: list[ServiceBusMessage], timeout: float | None) -> None:
        active = self._client._roles.active(self._key)
        try:
            self._senders[active].send_messages(batch, timeout=timeout)
            return
        except Exception as error:
            if not signals_unavailable(error):
                raise
            first_error = error
        try:
            self._senders[1 - active].send_messages(batch, timeout=timeout)
        except Exception as error:
            raise error from first_error
        _log.warning("namespace %d unavailable (%s); the backup takes the active role", active, first_error)
        self._client._roles.switch_from(self._key, active)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        for sender in self._senders:
            try:
                sender.close()
            except Exception:
                _log.debug("closing a sender failed", exc_info=True)

    def __enter__(self) -> ReplicatedSender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ReplicatedReceiver:
    """Receives from both namespaces; each MessageId reaches the application once (within the filter's window)."""

    def __init__(self, client: ReplicatedClient,
                 factories: tuple[Callable[[], ServiceBusReceiver], Callable[[], ServiceBusReceiver]],
                 duplicate_filter: DuplicateFilter | None, kwargs: dict[str, Any]) -> None:
        self._client = client
        self._factories = factories
        self._receivers: list[ServiceBusReceiver] = [factories[0](), factories[1]()]
        self._opened = [False, False]
        self._down_until = [0.0, 0.0]
        self._next = PRIMARY
        self._calls = 0
        self._owns_filter = duplicate_filter is None
        self.duplicate_filter = duplicate_filter if duplicate_filter is not None else DuplicateFilter()
        mode = kwargs.get("receive_mode", ServiceBusReceiveMode.PEEK_LOCK)
        self._tracker: CopyTracker[tuple[int, ServiceBusReceiver]] = CopyTracker(
            self.duplicate_filter, mode in (ServiceBusReceiveMode.RECEIVE_AND_DELETE, "receiveanddelete"))
        self._max_wait_time: float | None = kwargs.get("max_wait_time")
        self.probe_wait = 0.5  # seconds each namespace is given per turn while the other has nothing
        self._peeked = PeekMemory(self.duplicate_filter)

    def receive_messages(self, max_message_count: int | None = 1,
                         max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        wanted = max(1, max_message_count or 1)
        wait = max_wait_time if max_wait_time is not None else self._max_wait_time
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            delivered = self._one_round(wanted, deadline)
            if delivered:
                return delivered
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def _one_round(self, wanted: int, deadline: float | None) -> list[ServiceBusReceivedMessage]:
        self._calls += 1
        order = [self._next, 1 - self._next]
        if self._calls % 4 == 0:
            order.reverse()  # now and then the other namespace goes first, so neither starves
        for index in order:
            now = time.monotonic()
            if self._down_until[index] > now:
                continue
            slice_ = self.probe_wait if deadline is None else max(0.05, min(self.probe_wait, deadline - now))
            receiver = self._receivers[index]
            try:
                if not self._opened[index]:
                    # Opening counts against a receive's max_wait_time in the SDK; a short probe
                    # would time out on a slow open, so open first (what `with receiver:` does).
                    receiver.__enter__()
                    self._opened[index] = True
                copies = receiver.receive_messages(max_message_count=wanted, max_wait_time=slice_)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                self._namespace_down(index, error)
                continue
            delivered = self._admit(copies, (index, receiver))
            if delivered:
                self._next = index
                return delivered
        if all(until > time.monotonic() for until in self._down_until):
            time.sleep(min(0.2, self._client.retry_interval.total_seconds()))
        return []

    def _admit(self, copies: list[ServiceBusReceivedMessage],
               source: tuple[int, ServiceBusReceiver]) -> list[ServiceBusReceivedMessage]:
        delivered: list[ServiceBusReceivedMessage] = []
        for copy in copies:
            verdict = self._tracker.admit(copy, source)
            if verdict is Verdict.DELIVER:
                delivered.append(copy)
            elif verdict is Verdict.SETTLE_QUIETLY:
                self._settle(source[1], copy, Outcome.COMPLETE, {})
        return delivered

    def _namespace_down(self, index: int, error: BaseException) -> None:
        _log.warning("receiving from namespace %d failed (%s); retrying it in %s", index, error,
                     self._client.retry_interval)
        self._down_until[index] = time.monotonic() + self._client.retry_interval.total_seconds()
        old = self._receivers[index]
        self._tracker.forget_source((index, old))
        try:
            old.close()
        except Exception:
            _log.debug("closing a failed receiver failed", exc_info=True)
        self._receivers[index] = self._factories[index]()
        self._opened[index] = False

    def _settle(self, receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, outcome: Outcome,
                options: dict[str, Any], *, raise_errors: bool = False) -> None:
        try:
            if outcome is Outcome.COMPLETE:
                receiver.complete_message(message)
            elif outcome is Outcome.ABANDON:
                receiver.abandon_message(message)
            elif outcome is Outcome.DEAD_LETTER:
                receiver.dead_letter_message(message, **options)
            else:
                receiver.defer_message(message)
        except Exception as error:
            if raise_errors and not settlement_outcome_is_assured(error):
                raise
            _log.info("settling a copy (%s) failed: %s", outcome.value, error)

    def _settle_app_copy(self, message: ServiceBusReceivedMessage, outcome: Outcome, **options: Any) -> None:
        index, receiver = self._tracker.source_of(message)
        held = self._tracker.settled(message, outcome)  # records the MessageId first on complete
        try:
            if receiver is self._receivers[index]:
                self._settle(receiver, message, outcome, options, raise_errors=True)
            else:  # its link is gone with its namespace: the copy comes back when its lock expires
                _log.info("a copy's receiver was replaced after a failure; its settlement (%s) is skipped",
                          outcome.value)
        finally:
            for copy, source in held:
                if source[1] is self._receivers[source[0]]:
                    self._settle(source[1], copy, outcome, options)

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.COMPLETE)

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.ABANDON)

    def dead_letter_message(self, message: ServiceBusReceivedMessage, reason: str | None = None,
                            error_description: str | None = None) -> None:
        self._settle_app_copy(message, Outcome.DEAD_LETTER, reason=reason, error_description=error_description)

    def defer_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.DEFER)

    def renew_message_lock(self, message: ServiceBusReceivedMessage, *, timeout: float | None = None) -> Any:
        return self._tracker.source_of(message)[1].renew_message_lock(message, timeout=timeout)

    def peek_messages(self, max_message_count: int = 1, *, sequence_number: int | None = None,
                      timeout: float | None = None) -> list[ServiceBusReceivedMessage]:
        """Peek both namespaces, each MessageId once: the primary first, the secondary for what is left
        of ``max_message_count``. Each namespace's SDK receiver continues where its last peek stopped;
        a MessageId this receiver peeked before, or whose copy was completed, is left out."""
        refuse_sequence_number(sequence_number)
        wanted = max(1, max_message_count)
        found: list[ServiceBusReceivedMessage] = []
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            if len(found) >= wanted:
                break
            try:
                copies = self._open(index).peek_messages(max_message_count=wanted - len(found), timeout=timeout)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
                continue
            found += self._peeked.fresh(copies)
        if len(errors) == 2:
            raise errors[1] from errors[0]
        return found

    def receive_deferred_messages(self, sequence_numbers: int | list[int], **kwargs: Any) -> NoReturn:
        """Not built: a deferred message has a different sequence number in each namespace."""
        raise NotImplementedOperation(DEFERRED_NOT_BUILT)

    def _open(self, index: int) -> ServiceBusReceiver:
        receiver = self._receivers[index]
        if not self._opened[index]:
            receiver.__enter__()
            self._opened[index] = True
        return receiver

    def reply(self, request: ServiceBusReceivedMessage, reply: ServiceBusMessage) -> None:
        """Send ``reply`` to the request's ReplyTo queue, in the namespace the request came from."""
        if not request.reply_to:
            raise ConfigurationError("the request has no ReplyTo; there is nowhere to send the reply")
        index, _ = self._tracker.source_of(request)
        reply.correlation_id = request.message_id
        with self._client._client(index).get_queue_sender(request.reply_to) as sender:
            sender.send_messages(reply)

    def __iter__(self) -> Iterator[ServiceBusReceivedMessage]:
        while True:
            batch = self.receive_messages(max_message_count=1)
            if not batch and self._max_wait_time is not None:
                return
            yield from batch

    def close(self) -> None:
        for receiver in self._receivers:
            try:
                receiver.close()
            except Exception:
                _log.debug("closing a receiver failed", exc_info=True)
        if self._owns_filter:
            self.duplicate_filter.close()

    def __enter__(self) -> ReplicatedReceiver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ReplicatedSessionReceiver(ReplicatedReceiver):
    """One session, received from both namespaces; each MessageId reaches the application once.

    With a session id, both namespaces' receivers lock that session. With ``NEXT_AVAILABLE_SESSION``,
    the session is picked when the receiver opens (``with``, or the first receive): the primary's
    next available session, else the secondary's (the primary down, or nothing there); the other
    namespace then locks that same session. Neither having one raises the SDK's OperationTimeoutError.
    """

    def __init__(self, client: ReplicatedClient, makers: _SessionMakers, session: str | ServiceBusSessionFilter,
                 duplicate_filter: DuplicateFilter | None, kwargs: dict[str, Any]) -> None:
        self._makers = makers
        self._session_id: str | None = None if session == NEXT_AVAILABLE_SESSION else str(session)
        super().__init__(client, (lambda: makers[0](self._session_or_next()),
                                  lambda: makers[1](self._session_or_next())), duplicate_filter, kwargs)

    def _session_or_next(self) -> str | ServiceBusSessionFilter:
        return NEXT_AVAILABLE_SESSION if self._session_id is None else self._session_id

    @property
    def session_id(self) -> str:
        self._resolve()
        assert self._session_id is not None
        return self._session_id

    @property
    def session(self) -> ReplicatedSession:
        """The session in both namespaces: its state, lock and id (``receiver.session`` in the SDK)."""
        self._resolve()
        return ReplicatedSession(self)

    def _resolve(self) -> None:
        """Pick the session of a NEXT_AVAILABLE_SESSION receiver: the first namespace that has one."""
        if self._session_id is not None:
            return
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = self._open(index)
            except Exception as error:
                if not signals_unavailable(error):  # OperationTimeoutError: no session free there
                    raise
                errors.append(error)
                self._replace(index)
                continue
            self._session_id = receiver.session.session_id
            other = 1 - index
            self._replace(other)  # its NEXT_AVAILABLE receiver (never opened) becomes this session's
            if errors:
                self._down_until[other] = time.monotonic() + self._client.retry_interval.total_seconds()
            return
        raise errors[-1] from errors[0]

    def _replace(self, index: int) -> None:
        old = self._receivers[index]
        try:
            old.close()
        except Exception:
            _log.debug("closing a session receiver failed", exc_info=True)
        self._receivers[index] = self._factories[index]()
        self._opened[index] = False

    def receive_messages(self, max_message_count: int | None = 1,
                         max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        self._resolve()
        return super().receive_messages(max_message_count, max_wait_time)

    def peek_messages(self, max_message_count: int = 1, **kwargs: Any) -> list[ServiceBusReceivedMessage]:
        self._resolve()
        return super().peek_messages(max_message_count, **kwargs)

    def __enter__(self) -> ReplicatedSessionReceiver:
        self._resolve()
        return self


class ReplicatedSession:
    """A session in two namespaces: state written to both, read from the first that answers."""

    def __init__(self, receiver: ReplicatedSessionReceiver) -> None:
        self._receiver = receiver
        self.session_id = receiver.session_id

    def _each(self, call: Callable[[ServiceBusReceiver], T]) -> list[T]:
        """``call`` on both namespaces' session; the results of those that answered (both failing raises)."""
        results: list[T] = []
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                results.append(call(self._receiver._open(index)))
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
        if not results:
            raise errors[-1] from errors[0]
        return results

    def get_state(self, *, timeout: float | None = None) -> bytes | None:
        """The primary's session state, the secondary's when the primary cannot be reached."""
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                state: bytes | None = self._receiver._open(index).session.get_state(timeout=timeout)
                return state
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
        raise errors[-1] from errors[0]

    def set_state(self, state: str | bytes | bytearray | None, *, timeout: float | None = None) -> None:
        """Written to both namespaces; succeeds when one of them took it."""
        self._each(lambda r: r.session.set_state(state, timeout=timeout))

    def renew_lock(self, *, timeout: float | None = None) -> datetime:
        """Renew the session's lock in both namespaces; the earlier of the new expiry times."""
        return min(self._each(lambda r: r.session.renew_lock(timeout=timeout)))

    @property
    def locked_until_utc(self) -> datetime | None:
        times = [r.session.locked_until_utc for r, opened in zip(self._receiver._receivers, self._receiver._opened,
                                                                 strict=True) if opened]
        known = [t for t in times if t is not None]
        return min(known) if known else None


class ReplicatedRequestSender:
    """The relay pattern on a pair of request queues: one active, one backup, roles switch on failure."""

    def __init__(self, requests: tuple[ServiceBusSender, ServiceBusSender],
                 replies: tuple[ServiceBusReceiver, ServiceBusReceiver], reply_names: tuple[str, str]) -> None:
        self._requests = requests
        self._replies = replies
        self._reply_names = reply_names
        self.active = random.choice((PRIMARY, SECONDARY))  # the seed: the client picks one at random

    def request(self, message: ServiceBusMessage, *, timeout: float = 60.0) -> ServiceBusReceivedMessage:
        """Send ``message`` and return its reply (completed). The relay pattern: if the active endpoint
        fails (the send fails with an availability error, or no reply comes within ``timeout``), the
        request is reissued to the backup (same MessageId) and, when its reply comes, the two switch
        roles; both failing raises the backup's error (OperationTimeoutError when no reply came) and
        leaves the roles. So a request takes at most twice ``timeout``."""
        if message.message_id is None:
            message.message_id = str(uuid.uuid4())
        active = self.active
        try:
            return self._round_trip(active, message, timeout)
        except Exception as error:
            if not signals_unavailable(error):  # OperationTimeoutError (no reply) is one of them
                raise
            first_error = error
        _log.warning("request endpoint %d failed (%s); reissuing the request to the backup", active, first_error)
        try:
            reply = self._round_trip(1 - active, message, timeout)
        except Exception as error:
            raise error from first_error
        self.active = 1 - active
        return reply

    def _round_trip(self, index: int, message: ServiceBusMessage, timeout: float) -> ServiceBusReceivedMessage:
        message.reply_to = self._reply_names[index]
        self._requests[index].send_messages(message)
        deadline = time.monotonic() + timeout
        replies = self._replies[index]
        while (left := deadline - time.monotonic()) > 0:
            for reply in replies.receive_messages(max_message_count=1, max_wait_time=min(left, 5.0)):
                replies.complete_message(reply)
                if reply.correlation_id == message.message_id:
                    return reply
                _log.info("dropped a reply to an earlier request (%s)", reply.correlation_id)
        raise OperationTimeoutError(message=f"no reply to request {message.message_id} within {timeout} s "
                                            f"from request endpoint {index}")

    def close(self) -> None:
        for handler in (*self._requests, *self._replies):
            try:
                handler.close()
            except Exception:
                _log.debug("closing a request handler failed", exc_info=True)

    def __enter__(self) -> ReplicatedRequestSender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
