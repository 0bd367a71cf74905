# Generated from src/sodalite/client/aio/replication.py by scripts/unasync; edit the async source.
"""ReplicatedClient: active and passive replication over two namespaces (seed: outages-and-disasters).

Written once, for asyncio; ``sodalite.client.replication`` is generated from it by ``scripts/unasync``.
The client holds one official SDK client per namespace. Each entity exists in both, under the
same name unless the caller names the secondary's.

- **Active**: a send goes to both namespaces at once (``concurrency.SideBySide``: two awaits
  gathered; in the sync form the secondary's copy goes from a worker thread); both copies carry
  the same MessageId (one is set where the message has none). The send returns when at least one
  copy was accepted (the SDK returns only after the broker's accept, i.e. once the copy is
  durable); both failing raises the secondary's error chained to the primary's.
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
  its reply switches the roles; both failing leaves them. ``get_request_receiver`` serves both
  request queues and replies into the namespace each request came from.

This module does only the I/O. What to do comes from ``replication_core`` (copy verdicts, turns,
roles, which errors mean "namespace unavailable", what a failed attempt leads to), and which SDK
handlers to make from ``replication_shared``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import NoReturn, TypeVar

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSender,
    ServiceBusSessionFilter,
)

from sodalite.client import concurrency
from sodalite.client import replication_core as core
from sodalite.client.availability import CLOSE_BUDGET, ClientOptions, attempt_timeout, namespace_clients
from sodalite.client.batch import KeepingMessageBatch
from sodalite.client.dedup import DuplicateFilter
from sodalite.client.paired_core import first_line
from sodalite.client.replication_core import PRIMARY, SECONDARY, Outcome, ReplicationMode
from sodalite.client.replication_shared import (
    ClientPairs,
    Factories,
    ProbeMakers,
    ReceiverOptions,
    ReceiverState,
    SessionMakers,
    session_factories,
)
from sodalite.errors import NotImplementedOperation

__all__ = ["ReplicatedClient", "ReplicatedReceiver", "ReplicatedRequestSender", "ReplicatedSender",
           "ReplicatedSession", "ReplicatedSessionReceiver", "ReplicationMode"]

_log = logging.getLogger("sodalite.client.replication")
T = TypeVar("T")
_Factories = Factories[ServiceBusReceiver]
_SessionMakers = SessionMakers[ServiceBusReceiver]


def _close_quietly(handler: ServiceBusSender, what: str) -> None:
    try:
        handler.close()
    except Exception:
        _log.debug("closing %s failed", what, exc_info=True)


class ReplicatedClient(ClientPairs[ServiceBusSender, ServiceBusReceiver, "ReplicatedSender", "ReplicatedReceiver",
                                   "ReplicatedRequestSender"]):
    """Two namespaces, one client. ``client_kwargs`` go to both ``ServiceBusClient``s."""

    def __init__(self, primary: str, secondary: str, *, mode: ReplicationMode = ReplicationMode.ACTIVE,
                 retry_interval: timedelta = timedelta(seconds=2), attempt_timeout: timedelta = timedelta(seconds=2),
                 primary_client_kwargs: ClientOptions | None = None,
                 secondary_client_kwargs: ClientOptions | None = None, **client_kwargs: object) -> None:
        super().__init__(primary, secondary, mode, retry_interval, attempt_timeout)
        make = ServiceBusClient.from_connection_string
        first, first_attempts = namespace_clients(make, primary, client_kwargs, primary_client_kwargs)
        second, second_attempts = namespace_clients(make, secondary, client_kwargs, secondary_client_kwargs)
        self._clients = (first, second)
        self._attempt_clients = (first_attempts, second_attempts)
        self._stop = concurrency.Event()
        self._workers = concurrency.Workers()

    @property
    def _sdk(self) -> tuple[ServiceBusClient, ServiceBusClient]:
        return self._clients

    @property
    def _attempt_sdk(self) -> tuple[ServiceBusClient, ServiceBusClient]:
        return self._attempt_clients

    def _new_sender(self, senders: tuple[ServiceBusSender, ServiceBusSender], key: str,
                    probes: ProbeMakers[ServiceBusSender]) -> ReplicatedSender:
        return ReplicatedSender(self, senders, key, probes)

    def _start_probe(self, key: str, index: int, make: Callable[[], ServiceBusSender]) -> None:
        self._workers.spawn(lambda: self._probe(key, index, make), f"probe {index} {key}")

    def _probe(self, key: str, index: int, make: Callable[[], ServiceBusSender]) -> None:
        """Until namespace ``index`` answers for ``key``: open a link to the entity (token, attach), send
        nothing, close it; the first success clears the mark."""
        try:
            while not concurrency.wait(self._stop, self.retry_interval.total_seconds()):
                sender = make()
                try:
                    sender.create_message_batch()  # opens the link and reads its limit; sends nothing
                except Exception as error:
                    _log.info("probe of namespace %d for '%s' failed: %s", index, key, first_line(error))
                    continue
                finally:
                    _close_quietly(sender, "a probe sender")
                since = self.availability.clear(key, index)
                _log.warning("namespace %d answers again for '%s' (marked for %.1f s); sends go to both", index,
                             key, time.monotonic() - since if since is not None else 0.0)
                return
        finally:
            self.availability.probe_stopped(key, index)

    def _new_receiver(self, factories: _Factories, duplicate_filter: DuplicateFilter | None,
                      kwargs: ReceiverOptions) -> ReplicatedReceiver:
        return ReplicatedReceiver(self, factories, duplicate_filter, kwargs)

    def _new_session_receiver(self, makers: _SessionMakers, session: str | ServiceBusSessionFilter,
                              duplicate_filter: DuplicateFilter | None, kwargs: ReceiverOptions) -> ReplicatedReceiver:
        return ReplicatedSessionReceiver(self, makers, session, duplicate_filter, kwargs)

    def _new_request_sender(self, requests: tuple[ServiceBusSender, ServiceBusSender],
                            replies: tuple[ServiceBusReceiver, ServiceBusReceiver],
                            reply_names: tuple[str, str]) -> ReplicatedRequestSender:
        return ReplicatedRequestSender(requests, replies, reply_names)

    def _client(self, index: int) -> ServiceBusClient:
        return self._clients[index]

    def close(self) -> None:
        """Stop the probes first (each finishes its attempt within the budget), then the handlers, then
        the SDK clients under them."""
        self._stop.set()
        self._workers.stop(CLOSE_BUDGET)
        for handler in self._handlers:
            try:
                handler.close()
            except Exception:  # closing what may already be broken must not stop the rest
                _log.debug("closing a replicated handler failed", exc_info=True)
        self._handlers.clear()
        for client in (*self._attempt_clients, *self._clients):
            try:
                client.close()
            except Exception:
                _log.debug("closing an SDK client failed", exc_info=True)

    def __enter__(self) -> ReplicatedClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class ReplicatedSender:
    """Sends to two entities as the client's mode says."""

    def __init__(self, client: ReplicatedClient, senders: tuple[ServiceBusSender, ServiceBusSender], key: str,
                 probes: ProbeMakers[ServiceBusSender]) -> None:
        self._client = client
        self._senders = senders
        self._key = key
        self._probes = probes
        self._side_by_side = concurrency.SideBySide()

    @property
    def active_namespace(self) -> int:
        """0 while the primary is the active entity (passive mode), 1 after a role switch."""
        return self._client._roles.active(self._key)

    def create_message_batch(self, max_size_in_bytes: int | None = None) -> KeepingMessageBatch:
        """A batch for this sender, as the SDK's: its size limit is the smaller of the two entities'
        (each namespace's link is asked; one that cannot be reached is left out), and each message
        gets a MessageId as it is added, so both copies share it."""
        limits: list[int] = []
        attempts = core.Attempts()
        for sender in self._senders:
            try:
                limits.append(sender.create_message_batch(max_size_in_bytes).max_size_in_bytes)
            except Exception as error:
                attempts.failed(error)
        return KeepingMessageBatch(core.batch_limit(limits, attempts), set_message_ids=True)

    def send_messages(self, message: ServiceBusMessage | Iterable[ServiceBusMessage] | KeepingMessageBatch,
                      *, timeout: float | None = None) -> None:
        batch = core.messages_of(message)
        if not batch:
            return
        if self._client.mode is ReplicationMode.ACTIVE:
            self._send_active(batch, timeout)
        else:
            self._send_passive(batch, timeout)

    def _timeout(self, index: int, timeout: float | None) -> float | None:
        return attempt_timeout(timeout, self._client.availability.marked(self._key, index),
                               self._client.attempt_timeout.total_seconds())

    def _sent(self, index: int) -> None:
        self._client.availability.succeeded(self._key, index)

    def _failed(self, index: int, error: BaseException) -> None:
        """A copy failed: a failover error marks its namespace (and, in active mode, starts its probe)."""
        if self._client.availability.copy_failed(self._key, index, error, time.monotonic(),
                                                 probes=self._client.mode is ReplicationMode.ACTIVE):
            _log.warning("namespace %d marked unavailable for '%s' (%s); sends go to the other one until a probe "
                         "answers", index, self._key, first_line(error))
            self._client._start_probe(self._key, index, self._probes[index])

    def _send_active(self, batch: list[ServiceBusMessage], timeout: float | None) -> None:
        targets = self._client.availability.targets(self._key)
        if len(targets) == 1:  # the other namespace is marked unavailable: one copy
            index = targets[0]
            try:
                self._senders[index].send_messages(batch, timeout=self._timeout(index, timeout))
            except Exception as error:
                self._failed(index, error)
                raise
            self._sent(index)
            _log.debug("one copy sent to namespace %d (the other is marked unavailable)", index)
            return
        # The secondary gets the messages' AMQP form: the SDK wraps it anew, so the two copies share no
        # object it mutates.
        raw = [m.raw_amqp_message for m in batch]
        first, second = self._senders
        limits = self._timeout(PRIMARY, timeout), self._timeout(SECONDARY, timeout)
        errors = self._side_by_side.run(lambda: first.send_messages(batch, timeout=limits[PRIMARY]),
                                        lambda: second.send_messages(raw, timeout=limits[SECONDARY]))
        for index in (PRIMARY, SECONDARY):
            failure = errors[index]
            if failure is None:
                self._sent(index)
            else:
                self._failed(index, failure)
        result = core.active_send_result(errors[PRIMARY], errors[SECONDARY])
        if result.error is not None:
            raise result.error from result.cause
        if result.lost is not None:
            _log.warning("copy %d was not sent (the other was): %s", result.lost, result.lost_error)

    def _send_passive(self, batch: list[ServiceBusMessage], timeout: float | None) -> None:
        active = self._client._roles.active(self._key)
        attempts = core.Attempts()
        for index in (active, 1 - active):
            try:
                self._senders[index].send_messages(batch, timeout=self._timeout(index, timeout))
            except Exception as error:
                self._failed(index, error)
                attempts.failed(error)
                continue
            self._sent(index)
            if index != active:
                _log.warning("namespace %d unavailable (%s); the backup takes the active role", active,
                             first_line(attempts.errors[0]))
                self._client._roles.switch_from(self._key, active)
            return
        attempts.give_up()

    def close(self) -> None:
        self._side_by_side.close()
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


class ReplicatedReceiver(ReceiverState[ServiceBusReceiver]):
    """Receives from both namespaces; each MessageId reaches the application once (within the filter's window)."""

    def __init__(self, client: ReplicatedClient, factories: _Factories, duplicate_filter: DuplicateFilter | None,
                 kwargs: ReceiverOptions) -> None:
        super().__init__(client.retry_interval, factories, duplicate_filter, kwargs)
        self._client = client

    def receive_messages(self, max_message_count: int | None = 1,
                         max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        wanted = max(1, max_message_count or 1)
        deadline = core.receive_deadline(max_wait_time, self._max_wait_time, time.monotonic())
        while True:
            delivered = self._one_round(wanted, deadline)
            if delivered or core.expired(deadline, time.monotonic()):
                return delivered

    def _one_round(self, wanted: int, deadline: float | None) -> list[ServiceBusReceivedMessage]:
        for index in self._turns.order():
            slice_ = self._turns.slice_for(index, time.monotonic(), deadline, self.probe_wait)
            if slice_ is None:
                continue
            receiver = self._receivers[index]
            try:
                # Opening counts against a receive's max_wait_time in the SDK; a short probe would time
                # out on a slow open, so open first (what `with receiver:` does).
                copies = self._open(index).receive_messages(max_message_count=wanted,
                                                            max_wait_time=slice_)
            except Exception as error:
                if not core.signals_unavailable(error):
                    raise
                self._namespace_down(index, error)
                continue
            delivered, quiet = core.admit_all(self._tracker, copies, (index, receiver))
            for copy in quiet:
                self._settle(receiver, copy, Outcome.COMPLETE, {})
            if delivered:
                self._turns.delivered(index)
                return delivered
        if pause := self._turns.idle_pause(time.monotonic()):
            concurrency.sleep(pause)
        return []

    def _namespace_down(self, index: int, error: BaseException) -> None:
        _log.warning("receiving from namespace %d failed (%s); retrying it in %s", index, error,
                     self._client.retry_interval)
        self._turns.down(index, time.monotonic())
        self._tracker.forget_source((index, self._receivers[index]))
        self._replace(index)

    def _replace(self, index: int) -> None:
        old = self._receivers[index]
        try:
            old.close()
        except Exception:
            _log.debug("closing a replaced receiver failed", exc_info=True)
        self._renewed(index)

    def _settle(self, receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, outcome: Outcome,
                options: Mapping[str, object], *, raise_errors: bool = False) -> None:
        settle: Callable[..., None] = getattr(receiver, core.settle_method(outcome))
        try:
            settle(message, **core.settle_options(outcome, options))
        except Exception as error:
            if raise_errors and not core.settlement_outcome_is_assured(error):
                raise
            _log.info("settling a copy (%s) failed: %s", outcome.value, error)

    def _settle_app_copy(self, message: ServiceBusReceivedMessage, outcome: Outcome,
                         **options: str | None) -> None:
        index, receiver = self._tracker.source_of(message)
        held = self._tracker.settled(message, outcome)  # records the MessageId first on complete
        try:
            if receiver is self._receivers[index]:
                self._settle(receiver, message, outcome, options, raise_errors=True)
            else:  # its link is gone with its namespace: the copy comes back when its lock expires
                _log.info("a copy's receiver was replaced after a failure; its settlement (%s) is skipped",
                          outcome.value)
        finally:
            for copy, source in core.held_to_settle(held, self._receivers):
                self._settle(source, copy, outcome, options)

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.COMPLETE)

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.ABANDON)

    def dead_letter_message(self, message: ServiceBusReceivedMessage, reason: str | None = None,
                            error_description: str | None = None) -> None:
        self._settle_app_copy(message, Outcome.DEAD_LETTER, reason=reason, error_description=error_description)

    def defer_message(self, message: ServiceBusReceivedMessage) -> None:
        self._settle_app_copy(message, Outcome.DEFER)

    def renew_message_lock(self, message: ServiceBusReceivedMessage, *, timeout: float | None = None
                           ) -> datetime:
        return self._tracker.source_of(message)[1].renew_message_lock(message, timeout=timeout)

    def peek_messages(self, max_message_count: int = 1, *, sequence_number: int | None = None,
                      timeout: float | None = None) -> list[ServiceBusReceivedMessage]:
        """Peek both namespaces, each MessageId once: the primary first, the secondary for what is left
        of ``max_message_count``. Each namespace's SDK receiver continues where its last peek stopped;
        a MessageId this receiver peeked before, or whose copy was completed, is left out."""
        core.refuse_sequence_number(sequence_number)
        wanted = max(1, max_message_count)
        found: list[ServiceBusReceivedMessage] = []
        attempts = core.Attempts()
        for index in (PRIMARY, SECONDARY):
            if len(found) >= wanted:
                break
            try:
                receiver = self._open(index)
                copies = receiver.peek_messages(max_message_count=wanted - len(found), timeout=timeout)
            except Exception as error:
                attempts.failed(error)
                continue
            found += self._peeked.fresh(copies)
        if len(attempts.errors) == 2:
            attempts.give_up()
        return found

    def receive_deferred_messages(self, sequence_numbers: int | list[int], **kwargs: object) -> NoReturn:
        """Not built: a deferred message has a different sequence number in each namespace."""
        raise NotImplementedOperation(core.DEFERRED_NOT_BUILT)

    def _open(self, index: int) -> ServiceBusReceiver:
        receiver = self._receivers[index]
        if not self._opened[index]:
            receiver.__enter__()
            self._opened[index] = True
        return receiver

    def reply(self, request: ServiceBusReceivedMessage, reply: ServiceBusMessage) -> None:
        """Send ``reply`` to the request's ReplyTo queue, in the namespace the request came from."""
        queue = core.reply_queue(request, reply)
        index, _ = self._tracker.source_of(request)
        with self._client._client(index).get_queue_sender(queue) as sender:
            sender.send_messages(reply)

    def __iter__(self) -> Iterator[ServiceBusReceivedMessage]:
        return self._iterate()

    def _iterate(self) -> Iterator[ServiceBusReceivedMessage]:
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
    the session is picked when the receiver opens (``with``, or the first receive): the
    primary's next available session, else the secondary's (the primary down, or nothing there); the
    other namespace then locks that same session. Neither having one raises the SDK's
    OperationTimeoutError. The sync receiver's ``session_id`` and ``session`` pick it too; the
    asyncio receiver's cannot wait (they are properties): open it first.
    """

    def __init__(self, client: ReplicatedClient, makers: _SessionMakers, session: str | ServiceBusSessionFilter,
                 duplicate_filter: DuplicateFilter | None, kwargs: ReceiverOptions) -> None:
        self._makers = makers
        self._session_id = core.session_at_start(session)
        super().__init__(client, session_factories(makers, lambda: self._session_id), duplicate_filter, kwargs)

    @property
    def session_id(self) -> str:
        """The session's id (a NEXT_AVAILABLE_SESSION receiver picks its session first)."""
        self._resolve()
        assert self._session_id is not None
        return self._session_id

    @property
    def session(self) -> ReplicatedSession:
        """The session in both namespaces: its state, lock and id (``receiver.session`` in the SDK)."""
        self._resolve()
        if self._session_id is None:
            raise ValueError("the receiver has not picked its session yet; open it first (with)")
        return ReplicatedSession(self)

    def _resolve(self) -> None:
        """Pick the session of a NEXT_AVAILABLE_SESSION receiver: the first namespace that has one."""
        if self._session_id is not None:
            return
        attempts = core.Attempts()
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = self._open(index)
            except Exception as error:
                attempts.failed(error)  # OperationTimeoutError: no session free there
                self._replace(index)
                continue
            self._session_id = receiver.session.session_id
            self._replace(1 - index)  # its NEXT_AVAILABLE receiver (never opened) becomes this session's
            if attempts.errors:
                self._turns.down(1 - index, time.monotonic())
            return
        attempts.give_up()

    def receive_messages(self, max_message_count: int | None = 1,
                         max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        self._resolve()
        return super().receive_messages(max_message_count, max_wait_time)

    def peek_messages(self, max_message_count: int = 1, *, sequence_number: int | None = None,
                      timeout: float | None = None) -> list[ServiceBusReceivedMessage]:
        self._resolve()
        return super().peek_messages(max_message_count, sequence_number=sequence_number, timeout=timeout)

    def __enter__(self) -> ReplicatedSessionReceiver:
        self._resolve()
        return self


class ReplicatedSession:
    """A session in two namespaces: state written to both, read from the first that answers."""

    def __init__(self, receiver: ReplicatedSessionReceiver) -> None:
        self._receiver = receiver
        session_id = receiver._session_id
        assert session_id is not None  # the receiver's ``session`` checked it
        self.session_id = session_id

    def _each(self, call: Callable[[ServiceBusReceiver], T], *,
              first_only: bool = False) -> list[T]:
        """``call`` on both namespaces' session (or the first that answers); the results of those that
        answered (none answering raises)."""
        results: list[T] = []
        attempts = core.Attempts()
        for index in (PRIMARY, SECONDARY):
            try:
                results.append(call(self._receiver._open(index)))
            except Exception as error:
                attempts.failed(error)
                continue
            if first_only:
                break
        if not results:
            attempts.give_up()
        return results

    def get_state(self, *, timeout: float | None = None) -> bytes | None:
        """The primary's session state, the secondary's when the primary cannot be reached."""
        states: list[bytes | None] = self._each(lambda r: r.session.get_state(timeout=timeout),
                                                first_only=True)
        return states[0]

    def set_state(self, state: str | bytes | bytearray | None, *, timeout: float | None = None) -> None:
        """Written to both namespaces; succeeds when one of them took it."""
        self._each(lambda r: r.session.set_state(state, timeout=timeout))

    def renew_lock(self, *, timeout: float | None = None) -> datetime:
        """Renew the session's lock in both namespaces; the earlier of the new expiry times."""
        return min(self._each(lambda r: r.session.renew_lock(timeout=timeout)))

    @property
    def locked_until_utc(self) -> datetime | None:
        return core.earliest(r.session.locked_until_utc for r, opened in zip(self._receiver._receivers,
                                                                        self._receiver._opened, strict=True)
                        if opened)


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
        core.with_message_id(message)
        active = self.active
        attempts = core.Attempts()
        for index in (active, 1 - active):
            try:
                reply = self._round_trip(index, message, timeout)
            except Exception as error:
                attempts.failed(error)  # OperationTimeoutError (no reply) is one of them
                if index == active:
                    _log.warning("request endpoint %d failed (%s); reissuing the request to the backup", index,
                                 error)
                continue
            self.active = index
            return reply
        attempts.give_up()

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
        raise core.no_reply(message, timeout, index)

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
