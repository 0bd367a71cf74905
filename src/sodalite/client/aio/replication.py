"""The asyncio ReplicatedClient: the same modes and rules as ``sodalite.client.replication``.

Theory of operation: as in the sync module, except that an active send awaits both copies
concurrently (``asyncio.gather``) and a receiver's turns are awaits. The decisions (MessageIds,
duplicate verdicts, which errors mean "namespace unavailable") come from ``replication_core``,
shared with the sync client, so both behave the same.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSessionFilter,
)
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver, ServiceBusSender
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

_log = logging.getLogger("sodalite.client.aio.replication")
T = TypeVar("T")
PRIMARY, SECONDARY = 0, 1
_Factories = tuple[Callable[[], ServiceBusReceiver], Callable[[], ServiceBusReceiver]]
_SessionMakers = tuple[Callable[[str | ServiceBusSessionFilter], ServiceBusReceiver],
                       Callable[[str | ServiceBusSessionFilter], ServiceBusReceiver]]


class _Roles:
    """Which namespace is active, per entity (one event loop: no lock needed)."""

    def __init__(self) -> None:
        self._active: dict[str, int] = {}

    def active(self, key: str) -> int:
        return self._active.setdefault(key, PRIMARY)

    def switch_from(self, key: str, failed: int) -> None:
        if self._active.get(key, PRIMARY) == failed:
            self._active[key] = 1 - failed


class ReplicatedClient:
    """Two namespaces, one asyncio client. ``client_kwargs`` go to both ``ServiceBusClient``s."""

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

    def get_queue_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                           duplicate_filter: DuplicateFilter | None = None, **kwargs: Any) -> ReplicatedReceiver:
        names = (queue_name, secondary_queue_name or queue_name)
        session = kwargs.pop("session_id", None)
        if session is not None:
            makers: _SessionMakers = (
                lambda sid: self._clients[0].get_queue_receiver(names[0], session_id=sid, **kwargs),
                lambda sid: self._clients[1].get_queue_receiver(names[1], session_id=sid, **kwargs))
            return self._keep(ReplicatedSessionReceiver(self, makers, session, duplicate_filter, kwargs))
        factories: _Factories = (lambda: self._clients[0].get_queue_receiver(names[0], **kwargs),
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
        factories: _Factories = (
            lambda: self._clients[0].get_subscription_receiver(topic_name, subscription_name, **kwargs),
            lambda: self._clients[1].get_subscription_receiver(second[0], second[1], **kwargs))
        return self._keep(ReplicatedReceiver(self, factories, duplicate_filter, kwargs))

    def get_request_sender(self, queue_name: str, *, reply_queue_name: str, secondary_queue_name: str | None = None,
                           secondary_reply_queue_name: str | None = None) -> ReplicatedRequestSender:
        requests = (self._clients[0].get_queue_sender(queue_name),
                    self._clients[1].get_queue_sender(secondary_queue_name or queue_name))
        reply_names = (reply_queue_name, secondary_reply_queue_name or reply_queue_name)
        replies = (self._clients[0].get_queue_receiver(reply_names[0]),
                   self._clients[1].get_queue_receiver(reply_names[1]))
        return self._keep(ReplicatedRequestSender(requests, replies, reply_names))

    def get_request_receiver(self, queue_name: str, *, secondary_queue_name: str | None = None,
                             duplicate_filter: DuplicateFilter | None = None, **kwargs: Any) -> ReplicatedReceiver:
        return self.get_queue_receiver(queue_name, secondary_queue_name=secondary_queue_name,
                                       duplicate_filter=duplicate_filter, **kwargs)

    def _client(self, index: int) -> ServiceBusClient:
        return self._clients[index]

    def _keep(self, handler: T) -> T:
        self._handlers.append(handler)  # type: ignore[arg-type]
        return handler

    async def close(self) -> None:
        for handler in self._handlers:
            try:
                await handler.close()
            except Exception:
                _log.debug("closing a replicated handler failed", exc_info=True)
        self._handlers.clear()
        for client in self._clients:
            await client.close()

    async def __aenter__(self) -> ReplicatedClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class ReplicatedSender:
    def __init__(self, client: ReplicatedClient, senders: tuple[ServiceBusSender, ServiceBusSender], key: str) -> None:
        self._client = client
        self._senders = senders
        self._key = key

    @property
    def active_namespace(self) -> int:
        return self._client._roles.active(self._key)

    async def create_message_batch(self, max_size_in_bytes: int | None = None) -> KeepingMessageBatch:
        """A batch for this sender, as the SDK's (a coroutine): its size limit is the smaller of the two
        entities' (a namespace that cannot be reached is left out), and each message gets a MessageId
        as it is added, so both copies share it."""
        limits: list[int] = []
        first_error: Exception | None = None
        for sender in self._senders:
            try:
                limits.append((await sender.create_message_batch(max_size_in_bytes)).max_size_in_bytes)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                first_error = first_error or error
        if not limits:
            assert first_error is not None
            raise first_error
        return KeepingMessageBatch(min(limits), set_message_ids=True)

    async def send_messages(self, message: ServiceBusMessage | Iterable[ServiceBusMessage] | KeepingMessageBatch,
                            *, timeout: float | None = None) -> None:
        batch = messages_of(message)
        if not batch:
            return
        if self._client.mode is ReplicationMode.ACTIVE:
            raw = [m.raw_amqp_message for m in batch]  # the secondary's copies: no shared object is mutated
            first, second = await asyncio.gather(self._senders[PRIMARY].send_messages(batch, timeout=timeout),
                                                 self._senders[SECONDARY].send_messages(raw, timeout=timeout),
                                                 return_exceptions=True)
            if isinstance(first, BaseException) and isinstance(second, BaseException):
                raise second from first
            for index, outcome in ((PRIMARY, first), (SECONDARY, second)):
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, Exception):
                        raise outcome
                    _log.warning("copy %d was not sent (the other was): %s", index, outcome)
            return
        active = self._client._roles.active(self._key)
        try:
            await self._senders[active].send_messages(batch, timeout=timeout)
            return
        except Exception as error:
            if not signals_unavailable(error):
                raise
            first_error = error
        try:
            await self._senders[1 - active].send_messages(batch, timeout=timeout)
        except Exception as error:
            raise error from first_error
        _log.warning("namespace %d unavailable (%s); the backup takes the active role", active, first_error)
        self._client._roles.switch_from(self._key, active)

    async def close(self) -> None:
        for sender in self._senders:
            try:
                await sender.close()
            except Exception:
                _log.debug("closing a sender failed", exc_info=True)

    async def __aenter__(self) -> ReplicatedSender:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class ReplicatedReceiver:
    def __init__(self, client: ReplicatedClient, factories: _Factories, duplicate_filter: DuplicateFilter | None,
                 kwargs: dict[str, Any]) -> None:
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
        self.probe_wait = 0.5
        self._peeked = PeekMemory(self.duplicate_filter)

    async def receive_messages(self, max_message_count: int | None = 1,
                               max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        wanted = max(1, max_message_count or 1)
        wait = max_wait_time if max_wait_time is not None else self._max_wait_time
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            delivered = await self._one_round(wanted, deadline)
            if delivered:
                return delivered
            if deadline is not None and time.monotonic() >= deadline:
                return []

    async def _one_round(self, wanted: int, deadline: float | None) -> list[ServiceBusReceivedMessage]:
        self._calls += 1
        order = [self._next, 1 - self._next]
        if self._calls % 4 == 0:
            order.reverse()
        for index in order:
            now = time.monotonic()
            if self._down_until[index] > now:
                continue
            slice_ = self.probe_wait if deadline is None else max(0.05, min(self.probe_wait, deadline - now))
            receiver = self._receivers[index]
            try:
                if not self._opened[index]:
                    await receiver.__aenter__()  # open before a short probe (opening counts against it)
                    self._opened[index] = True
                copies = await receiver.receive_messages(max_message_count=wanted, max_wait_time=slice_)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                await self._namespace_down(index, error)
                continue
            delivered: list[ServiceBusReceivedMessage] = []
            for copy in copies:
                verdict = self._tracker.admit(copy, (index, receiver))
                if verdict is Verdict.DELIVER:
                    delivered.append(copy)
                elif verdict is Verdict.SETTLE_QUIETLY:
                    await self._settle(receiver, copy, Outcome.COMPLETE, {})
            if delivered:
                self._next = index
                return delivered
        if all(until > time.monotonic() for until in self._down_until):
            await asyncio.sleep(min(0.2, self._client.retry_interval.total_seconds()))
        return []

    async def _namespace_down(self, index: int, error: BaseException) -> None:
        _log.warning("receiving from namespace %d failed (%s); retrying it in %s", index, error,
                     self._client.retry_interval)
        self._down_until[index] = time.monotonic() + self._client.retry_interval.total_seconds()
        old = self._receivers[index]
        self._tracker.forget_source((index, old))
        try:
            await old.close()
        except Exception:
            _log.debug("closing a failed receiver failed", exc_info=True)
        self._receivers[index] = self._factories[index]()
        self._opened[index] = False

    async def _settle(self, receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage, outcome: Outcome,
                      options: dict[str, Any], *, raise_errors: bool = False) -> None:
        try:
            if outcome is Outcome.COMPLETE:
                await receiver.complete_message(message)
            elif outcome is Outcome.ABANDON:
                await receiver.abandon_message(message)
            elif outcome is Outcome.DEAD_LETTER:
                await receiver.dead_letter_message(message, **options)
            else:
                await receiver.defer_message(message)
        except Exception as error:
            if raise_errors and not settlement_outcome_is_assured(error):
                raise
            _log.info("settling a copy (%s) failed: %s", outcome.value, error)

    async def _settle_app_copy(self, message: ServiceBusReceivedMessage, outcome: Outcome, **options: Any) -> None:
        index, receiver = self._tracker.source_of(message)
        held = self._tracker.settled(message, outcome)
        try:
            if receiver is self._receivers[index]:
                await self._settle(receiver, message, outcome, options, raise_errors=True)
        finally:
            for copy, source in held:
                if source[1] is self._receivers[source[0]]:
                    await self._settle(source[1], copy, outcome, options)

    async def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle_app_copy(message, Outcome.COMPLETE)

    async def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle_app_copy(message, Outcome.ABANDON)

    async def dead_letter_message(self, message: ServiceBusReceivedMessage, reason: str | None = None,
                                  error_description: str | None = None) -> None:
        await self._settle_app_copy(message, Outcome.DEAD_LETTER, reason=reason, error_description=error_description)

    async def defer_message(self, message: ServiceBusReceivedMessage) -> None:
        await self._settle_app_copy(message, Outcome.DEFER)

    async def renew_message_lock(self, message: ServiceBusReceivedMessage, *, timeout: float | None = None) -> Any:
        return await self._tracker.source_of(message)[1].renew_message_lock(message, timeout=timeout)

    async def peek_messages(self, max_message_count: int = 1, *, sequence_number: int | None = None,
                            timeout: float | None = None) -> list[ServiceBusReceivedMessage]:
        """Peek both namespaces, each MessageId once (as the sync receiver's ``peek_messages``)."""
        refuse_sequence_number(sequence_number)
        wanted = max(1, max_message_count)
        found: list[ServiceBusReceivedMessage] = []
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            if len(found) >= wanted:
                break
            try:
                receiver = await self._open(index)
                copies = await receiver.peek_messages(max_message_count=wanted - len(found), timeout=timeout)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
                continue
            found += self._peeked.fresh(copies)
        if len(errors) == 2:
            raise errors[1] from errors[0]
        return found

    async def receive_deferred_messages(self, sequence_numbers: int | list[int], **kwargs: Any) -> NoReturn:
        """Not built: a deferred message has a different sequence number in each namespace."""
        raise NotImplementedOperation(DEFERRED_NOT_BUILT)

    async def _open(self, index: int) -> ServiceBusReceiver:
        receiver = self._receivers[index]
        if not self._opened[index]:
            await receiver.__aenter__()
            self._opened[index] = True
        return receiver

    async def reply(self, request: ServiceBusReceivedMessage, reply: ServiceBusMessage) -> None:
        if not request.reply_to:
            raise ConfigurationError("the request has no ReplyTo; there is nowhere to send the reply")
        index, _ = self._tracker.source_of(request)
        reply.correlation_id = request.message_id
        async with self._client._client(index).get_queue_sender(request.reply_to) as sender:
            await sender.send_messages(reply)

    def __aiter__(self) -> AsyncIterator[ServiceBusReceivedMessage]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ServiceBusReceivedMessage]:
        while True:
            batch = await self.receive_messages(max_message_count=1)
            if not batch and self._max_wait_time is not None:
                return
            for message in batch:
                yield message

    async def close(self) -> None:
        for receiver in self._receivers:
            try:
                await receiver.close()
            except Exception:
                _log.debug("closing a receiver failed", exc_info=True)
        if self._owns_filter:
            self.duplicate_filter.close()

    async def __aenter__(self) -> ReplicatedReceiver:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class ReplicatedSessionReceiver(ReplicatedReceiver):
    """One session, received from both namespaces (as the sync ``ReplicatedSessionReceiver``)."""

    def __init__(self, client: ReplicatedClient, makers: _SessionMakers, session: str | ServiceBusSessionFilter,
                 duplicate_filter: DuplicateFilter | None, kwargs: dict[str, Any]) -> None:
        self._makers = makers
        self._session_id: str | None = None if session == NEXT_AVAILABLE_SESSION else str(session)
        super().__init__(client, (lambda: makers[0](self._session_or_next()),
                                  lambda: makers[1](self._session_or_next())), duplicate_filter, kwargs)

    def _session_or_next(self) -> str | ServiceBusSessionFilter:
        return NEXT_AVAILABLE_SESSION if self._session_id is None else self._session_id

    @property
    def session_id(self) -> str | None:
        """The session's id; None until a NEXT_AVAILABLE_SESSION receiver has opened."""
        return self._session_id

    @property
    def session(self) -> ReplicatedSession:
        """The session in both namespaces (open the receiver first: ``async with``)."""
        if self._session_id is None:
            raise ValueError("the receiver has not picked its session yet; open it first (async with)")
        return ReplicatedSession(self)

    async def _resolve(self) -> None:
        if self._session_id is not None:
            return
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = await self._open(index)
            except Exception as error:
                if not signals_unavailable(error):  # OperationTimeoutError: no session free there
                    raise
                errors.append(error)
                await self._replace(index)
                continue
            self._session_id = receiver.session.session_id
            other = 1 - index
            await self._replace(other)
            if errors:
                self._down_until[other] = time.monotonic() + self._client.retry_interval.total_seconds()
            return
        raise errors[-1] from errors[0]

    async def _replace(self, index: int) -> None:
        old = self._receivers[index]
        try:
            await old.close()
        except Exception:
            _log.debug("closing a session receiver failed", exc_info=True)
        self._receivers[index] = self._factories[index]()
        self._opened[index] = False

    async def receive_messages(self, max_message_count: int | None = 1,
                               max_wait_time: float | None = None) -> list[ServiceBusReceivedMessage]:
        await self._resolve()
        return await super().receive_messages(max_message_count, max_wait_time)

    async def peek_messages(self, max_message_count: int = 1, *, sequence_number: int | None = None,
                            timeout: float | None = None) -> list[ServiceBusReceivedMessage]:
        await self._resolve()
        return await super().peek_messages(max_message_count, sequence_number=sequence_number, timeout=timeout)

    async def __aenter__(self) -> ReplicatedSessionReceiver:
        await self._resolve()
        return self


class ReplicatedSession:
    """A session in two namespaces: state written to both, read from the first that answers."""

    def __init__(self, receiver: ReplicatedSessionReceiver) -> None:
        self._receiver = receiver
        self.session_id = receiver._session_id

    async def get_state(self, *, timeout: float | None = None) -> bytes | None:
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = await self._receiver._open(index)
                state: bytes | None = await receiver.session.get_state(timeout=timeout)
                return state
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
        raise errors[-1] from errors[0]

    async def set_state(self, state: str | bytes | bytearray | None, *, timeout: float | None = None) -> None:
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = await self._receiver._open(index)
                await receiver.session.set_state(state, timeout=timeout)
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
        if len(errors) == 2:
            raise errors[1] from errors[0]

    async def renew_lock(self, *, timeout: float | None = None) -> datetime:
        times: list[datetime] = []
        errors: list[BaseException] = []
        for index in (PRIMARY, SECONDARY):
            try:
                receiver = await self._receiver._open(index)
                times.append(await receiver.session.renew_lock(timeout=timeout))
            except Exception as error:
                if not signals_unavailable(error):
                    raise
                errors.append(error)
        if not times:
            raise errors[1] from errors[0]
        return min(times)

    @property
    def locked_until_utc(self) -> datetime | None:
        known = [r.session.locked_until_utc for r, opened in zip(self._receiver._receivers, self._receiver._opened,
                                                                 strict=True) if opened]
        times = [t for t in known if t is not None]
        return min(times) if times else None


class ReplicatedRequestSender:
    def __init__(self, requests: tuple[ServiceBusSender, ServiceBusSender],
                 replies: tuple[ServiceBusReceiver, ServiceBusReceiver], reply_names: tuple[str, str]) -> None:
        self._requests = requests
        self._replies = replies
        self._reply_names = reply_names
        self.active = random.choice((PRIMARY, SECONDARY))

    async def request(self, message: ServiceBusMessage, *, timeout: float = 60.0) -> ServiceBusReceivedMessage:
        """Send ``message`` and return its reply (completed). The relay pattern: if the active endpoint
        fails (the send fails with an availability error, or no reply comes within ``timeout``), the
        request is reissued to the backup (same MessageId) and, when its reply comes, the two switch
        roles; both failing raises the backup's error (OperationTimeoutError when no reply came) and
        leaves the roles. So a request takes at most twice ``timeout``."""
        if message.message_id is None:
            message.message_id = str(uuid.uuid4())
        active = self.active
        try:
            return await self._round_trip(active, message, timeout)
        except Exception as error:
            if not signals_unavailable(error):  # OperationTimeoutError (no reply) is one of them
                raise
            first_error = error
        _log.warning("request endpoint %d failed (%s); reissuing the request to the backup", active, first_error)
        try:
            reply = await self._round_trip(1 - active, message, timeout)
        except Exception as error:
            raise error from first_error
        self.active = 1 - active
        return reply

    async def _round_trip(self, index: int, message: ServiceBusMessage, timeout: float) -> ServiceBusReceivedMessage:
        message.reply_to = self._reply_names[index]
        await self._requests[index].send_messages(message)
        deadline = time.monotonic() + timeout
        replies = self._replies[index]
        while (left := deadline - time.monotonic()) > 0:
            for reply in await replies.receive_messages(max_message_count=1, max_wait_time=min(left, 5.0)):
                await replies.complete_message(reply)
                if reply.correlation_id == message.message_id:
                    return reply
                _log.info("dropped a reply to an earlier request (%s)", reply.correlation_id)
        raise OperationTimeoutError(message=f"no reply to request {message.message_id} within {timeout} s "
                                            f"from request endpoint {index}")

    async def close(self) -> None:
        for handler in (*self._requests, *self._replies):
            try:
                await handler.close()
            except Exception:
                _log.debug("closing a request handler failed", exc_info=True)

    async def __aenter__(self) -> ReplicatedRequestSender:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
