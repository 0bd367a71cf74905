"""Paired namespaces: sends that fail over to backlog queues in a secondary namespace.

Written once, for asyncio; ``sodalite.client.paired`` is generated from it by ``scripts/unasync``
(threads where this has tasks). The state machine is ``failover.FailoverBook``; the decisions both
forms follow are in ``paired_core``: this module does only the I/O (paired-namespaces seed;
clarifications, issue 15).

- Opening the client checks the secondary namespace's backlog queues through
  ``ServiceBusAdministrationClient`` and creates the missing ones with the seed's properties.
  Extra or differently configured backlog queues are left as they are. The sync client opens in
  its constructor; the asyncio one when it enters its context, is opened (``open()``) or first sends.
- ``get_queue_sender`` / ``get_topic_sender`` give a ``PairedSender``. While the primary works it
  is a plain sender. After a failover error it retries the primary until ``failover_interval`` has
  passed without a success, then rewrites the message (``backlog``) into its backlog queue; the
  caller sees an error only when the primary and every backlog queue have failed.
- A failed-over entity is pinged (``application/vnd.ms-servicebus-ping``, 1 s TTL) every
  ``ping_primary_interval`` in the background; a successful ping sends everyone back to the primary.
- With ``enable_syphon``, one ``Syphon`` per backlog queue long-polls it in the background and moves
  each message to its ``x-ms-path`` entity in the primary, completing it only after that send
  succeeded.
- Close/fault coordination: closing or faulting either namespace client (``client.primary``,
  ``client.secondary``) closes the other at once, and the paired client then refuses work with
  ``PairedClientClosed``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType

from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver, ServiceBusSender
from azure.servicebus.aio.management import ServiceBusAdministrationClient

from sodalite.client import backlog
from sodalite.client import paired_core as core
from sodalite.client.aio import concurrency
from sodalite.client.availability import CLOSE_BUDGET, ClientOptions, namespace_clients, namespace_kwargs, sdk_client
from sodalite.client.failover import is_failover_error, is_namespace_auth_fault
from sodalite.client.paired_core import (
    RETRY_PAUSE,
    SYPHON_BATCH,
    PairedMessageBatch,
    PairedNamespaceOptions,
    Sendable,
    SyphonCounters,
    backlog_setup_error,
)
from sodalite.client.paired_messages import ping_message, plan_syphon_batch, refusal, to_backlog_message
from sodalite.errors import PairedClientClosed

log = logging.getLogger(__name__)

__all__ = ["RETRY_PAUSE", "SYPHON_BATCH", "NamespaceSide", "PairedMessageBatch", "PairedNamespaceClient",
           "PairedNamespaceOptions", "PairedSender", "Sendable", "Syphon", "SyphonCounters", "backlog_setup_error",
           "close_sdk_client", "ensure_backlog_queues"]


async def ensure_backlog_queues(secondary_connection_string: str, names: list[str], **kwargs: object) -> None:
    """Create the backlog queues that do not exist; leave existing ones as they are."""
    admin = sdk_client(ServiceBusAdministrationClient.from_connection_string, secondary_connection_string, kwargs)
    async with admin:
        for name in names:
            try:
                try:
                    await admin.get_queue(name)
                    continue
                except ResourceNotFoundError:
                    pass
                try:
                    await admin.create_queue(name, **backlog.BACKLOG_QUEUE_PROPERTIES.as_kwargs())
                except ResourceExistsError:
                    pass  # another client created it meanwhile
            except core.SETUP_ERRORS as exc:
                raise backlog_setup_error(name, exc) from exc


class NamespaceSide(core.SideState):
    """One of the two namespace clients; closing or faulting it closes the other (coordination).

    ``client`` has the application's options; ``attempts`` (same namespace, the library's short retry
    policy) carries the sends whose failure the library handles itself: the primary's sends, pings and
    the syphon's moves."""

    def __init__(self, role: str, client: ServiceBusClient, on_down: Callable[[NamespaceSide], None],
                 before_close: Callable[[], Awaitable[None]] | None = None,
                 attempts: ServiceBusClient | None = None) -> None:
        super().__init__(role)
        self.client = client
        self.attempts = attempts if attempts is not None else client
        self._on_down = on_down
        self._before_close = before_close

    async def close(self) -> None:
        await self._down(None)

    async def set_fault(self, exc: BaseException) -> None:
        await self._down(exc)

    async def _down(self, fault: BaseException | None) -> None:
        if not self._goes_down(fault):
            return
        if self._before_close is not None:
            await self._before_close()  # stop the pumps first: they open receivers on this client
        try:
            if self.attempts is not self.client:
                await close_sdk_client(self.attempts)
            await close_sdk_client(self.client)
        finally:
            self._on_down(self)


async def close_sdk_client(client: ServiceBusClient) -> None:
    """Close an SDK client whose handlers background work may still be opening.

    ``ServiceBusClient.close`` iterates a set of handlers that opening a receiver changes; the pumps
    are told to stop first, so a retry or two finds the set still.
    """
    for attempt in range(20):
        try:
            await client.close()
            return
        except RuntimeError:  # "Set changed size during iteration"
            if attempt == 19:
                raise
            await concurrency.sleep(0.05)


class PairedSender:
    """A sender to one entity of the primary namespace that fails over to the backlog queues."""

    def __init__(self, client: PairedNamespaceClient, path: str, topic: bool) -> None:
        self._client = client
        self.entity_path = path
        self._topic = topic
        self._primary: ServiceBusSender | None = None
        self._backlog_index: int | None = None
        self._backlog_senders: core.HandlerCache[int, ServiceBusSender] = core.HandlerCache(
            lambda index: client.secondary.client.get_queue_sender(client.backlog_names[index]))
        self._lock = concurrency.Lock()

    async def __aenter__(self) -> PairedSender:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def create_message_batch(self, max_size_in_bytes: int | None = None) -> PairedMessageBatch:
        """As the SDK's: a ``ServiceBusMessageBatch`` that keeps its messages, so a failover can rewrite
        them. Its limit is the primary entity's (as the SDK asks its link) while the entity is not
        failed over and the primary answers, else ``max_size_in_bytes`` or 256 KB."""
        async with self._lock:
            self._client.check_open()
            limit = max_size_in_bytes
            if not self._client.book.failed_over(self.entity_path):
                try:
                    limit = (await self._primary_sender().create_message_batch(max_size_in_bytes)).max_size_in_bytes
                except Exception as exc:
                    if not is_failover_error(exc):
                        raise  # e.g. a max_size_in_bytes above the entity's limit (ValueError)
                    await self._drop_primary()
            return PairedMessageBatch(limit)

    def _primary_sender(self) -> ServiceBusSender:
        if self._primary is None:
            self._primary = core.queue_or_topic_sender(self._client.primary.attempts, self.entity_path, self._topic)
        return self._primary

    async def _drop_primary(self) -> None:
        sender, self._primary = self._primary, None
        if sender is not None:
            await _close_quietly(sender, "a broken primary sender")

    async def send_messages(self, message: Sendable, *, timeout: float | None = None) -> None:
        """Send to the primary, or, once the entity is failed over, to a backlog queue."""
        async with self._lock:
            await self._client.open()
            self._client.check_open()
            send = core.outgoing(message)
            if send.empty:
                return
            if not self._client.book.failed_over(self.entity_path):
                if await self._send_to_primary(send, timeout):
                    return
            elif send.raw_batch is not None:
                raise core.raw_batch_cannot_fail_over(just_now=False)
            self._client.start_pinging(self.entity_path)
            await self._send_to_backlog(send.messages, timeout)

    async def _send_to_primary(self, send: core.Outgoing, timeout: float | None) -> bool:
        """True once the primary took it; False when the entity failed over meanwhile."""
        pause = RETRY_PAUSE[0]
        while True:
            try:
                # Each attempt ends before the failover timer does (the whole interval while none runs).
                began = time.monotonic()
                limit = core.attempt_limit(self._client.book, self.entity_path, began, timeout)
                await self._primary_sender().send_messages(send.to_primary, timeout=limit)
                self._client.book.primary_succeeded(self.entity_path)
                return True
            except Exception as exc:
                await self._client.note_primary_error(exc)  # an authentication failure faults the pair
                if not is_failover_error(exc):
                    raise
                await self._drop_primary()
                step = core.after_primary_failure(self._client.book, self.entity_path, time.monotonic(), pause, began)
                if not isinstance(step, core.RetryPrimary):
                    log.warning("entity '%s' fails over to the backlog queues: %s", self.entity_path,
                                core.first_line(exc))
                    if send.raw_batch is not None:
                        raise core.raw_batch_cannot_fail_over(just_now=True) from exc
                    return False
                self._client.check_open()
                await concurrency.sleep(step.wait)
                pause = step.next_pause

    async def _send_to_backlog(self, messages: list[ServiceBusMessage], timeout: float | None) -> None:
        rewritten = [to_backlog_message(m, self.entity_path) for m in messages]
        walk = core.BacklogRound(self._client.book, self.entity_path, self._client.backlog_names)
        while True:
            self._client.check_open()
            index = self._backlog_index = walk.pick(self._backlog_index)
            sender = self._backlog_senders.get(index)
            try:
                await sender.send_messages(rewritten, timeout=timeout)
            except Exception as exc:
                walk.failed(index, exc)
                self._backlog_senders.pop(index)
                await _close_quietly(sender, "a broken backlog sender")
                continue
            walk.succeeded(index)
            return

    async def close(self) -> None:
        async with self._lock:
            await self._drop_primary()
            for sender in self._backlog_senders.take_all():
                await _close_quietly(sender, "a backlog sender")


async def _close_quietly(sender: ServiceBusSender, what: str) -> None:
    """Close a sender whose link may be broken: it is gone either way."""
    try:
        await sender.close()
    except Exception:
        log.debug("closing %s failed", what, exc_info=True)


class Syphon:
    """Moves messages from one backlog queue to their entities in the primary namespace."""

    def __init__(self, primary: ServiceBusClient, secondary: ServiceBusClient, backlog_queue: str,
                 receive_wait: timedelta, retry_pause: timedelta, stop: concurrency.Event,
                 on_fault: Callable[[str, BaseException], Awaitable[None]] | None = None,
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
        self._senders: core.HandlerCache[str, ServiceBusSender] = core.HandlerCache(primary.get_queue_sender,
                                                                                    key=str.lower)

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    await self._pump()
                except Exception as exc:
                    if is_namespace_auth_fault(exc):  # (a missing backlog queue is not: it pauses, as below)
                        if self._on_fault is not None:
                            await self._on_fault("secondary", exc)
                        return
                    if self.stop.is_set():
                        return
                    log.info("syphon of '%s' pauses: %s", self.backlog_queue, core.first_line(exc))
                    await self._close_senders()
                    await concurrency.wait(self.stop, self.retry_pause.total_seconds())
        finally:
            await self._close_senders()

    async def _pump(self) -> None:
        async with self.secondary.get_queue_receiver(self.backlog_queue) as receiver:
            while not self.stop.is_set():
                # The long poll in slices, so a close is seen within one (and nothing is closed under a
                # receive in progress).
                received = await receiver.receive_messages(max_message_count=SYPHON_BATCH,
                                                           max_wait_time=core.pump_slice(self.receive_wait))
                if received:
                    await self.move(receiver, received)
                    if self._on_progress is not None:
                        self._on_progress(self.backlog_queue, self.counters)

    async def _close_senders(self) -> None:
        for sender in self._senders.take_all():
            await _close_quietly(sender, "a syphon sender")

    async def move(self, receiver: ServiceBusReceiver, received: list[ServiceBusReceivedMessage]) -> None:
        """Send each message to its entity in the primary, then complete it in the backlog.

        Consecutive messages for one entity go in one send. A failover error abandons the rest and
        raises (the caller pauses); a target that is gone dead-letters that group.
        """
        plan = plan_syphon_batch(received, datetime.now(UTC))
        for ping in plan.pings:
            await receiver.complete_message(ping)
            self.counters.pings_dropped += 1
        for message, reason, description in plan.dead_letters:
            await receiver.dead_letter_message(message, reason=reason, error_description=description)
            self.counters.dead_lettered += 1
        for position, (path, pairs) in enumerate(plan.groups):
            try:
                await self._senders.get(path).send_messages([restored for _, restored in pairs])  # queue or topic
            except Exception as exc:
                sender = self._senders.pop(path)
                if sender is not None:
                    await _close_quietly(sender, "a syphon sender")
                refused = refusal(path, exc)
                if refused is None:
                    for message in plan.unsent_from(position):
                        try:
                            await receiver.abandon_message(message)
                        except Exception:
                            log.debug("abandon failed; the lock will expire", exc_info=True)
                    raise
                for message, _ in pairs:
                    await receiver.dead_letter_message(message, reason=refused[0], error_description=refused[1])
                    self.counters.dead_lettered += 1
                continue
            for message, _ in pairs:
                await receiver.complete_message(message)
                self.counters.moved += 1


class PairedNamespaceClient(core.PairedState):
    """A primary namespace paired with a secondary one that holds its backlog queues."""

    def __init__(self, primary_connection_string: str, options: PairedNamespaceOptions, *,
                 primary_client_kwargs: ClientOptions | None = None,
                 secondary_client_kwargs: ClientOptions | None = None, **kwargs: object) -> None:
        """``kwargs`` (``connection_verify``, ``retry_total``, ...) go to every client made here;
        ``primary_client_kwargs`` / ``secondary_client_kwargs`` to one namespace's only, over them (each
        broker's own CA file as ``connection_verify``, say)."""
        super().__init__(primary_connection_string, options)
        self._kwargs = namespace_kwargs(kwargs, secondary_client_kwargs)[0]  # the administration client's
        self._stop = concurrency.Event()
        self._workers = concurrency.Workers()
        self._opened = False
        self._opening = concurrency.Lock()
        self.syphons: list[Syphon] = []
        make = ServiceBusClient.from_connection_string
        primary, primary_attempts = namespace_clients(make, primary_connection_string, kwargs, primary_client_kwargs)
        self.primary = NamespaceSide("primary", primary, self._side_down, self._stop_background, primary_attempts)
        secondary, secondary_attempts = namespace_clients(make, options.secondary_connection_string, kwargs,
                                                          secondary_client_kwargs)
        self.secondary = NamespaceSide("secondary", secondary, self._side_down, self._stop_background,
                                       secondary_attempts)
        # unasync: sync only {
        # self._open_or_close()  # the sync client opens here
        # unasync: }

    async def open(self) -> None:
        """Check and create the backlog queues, start the syphon; once (``async with`` calls it)."""
        async with self._opening:
            if self._opened:
                return
            self.check_open()
            await ensure_backlog_queues(self.options.secondary_connection_string, self.backlog_names,
                                        **self._kwargs)
            self._opened = True
            if self.options.enable_syphon:
                for name in self.backlog_names:
                    syphon = Syphon(self.primary.attempts, self.secondary.client, name,
                                    self.options.syphon_receive_wait, self.options.ping_primary_interval,
                                    self._stop, on_fault=self._fault_from)
                    self.syphons.append(syphon)
                    self._workers.spawn(syphon.run, f"syphon {name}")

    async def _open_or_close(self) -> None:
        try:
            await self.open()
        except BaseException:
            await self.close()
            raise

    async def __aenter__(self) -> PairedNamespaceClient:
        await self._open_or_close()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # ---- close/fault coordination ---------------------------------------------------------------

    def _side_down(self, side: NamespaceSide) -> None:
        other = self.secondary if side is self.primary else self.primary
        self._close_with(side.down_reason())
        self._stop.set()
        if not other.closed:
            reason = PairedClientClosed(side.down_reason())
            self._workers.start_closing(lambda: other.set_fault(reason), f"close the {other.role} client")

    async def _stop_background(self) -> None:
        """Tell the pumps and pingers to stop and give them the budget to finish what they hold; what is
        left then is cancelled (tasks only: a thread cannot be). Never the caller itself (a pump may be
        the one that faults a side), nor work that is closing a side (it ends by itself)."""
        self._stop.set()
        await self._workers.stop(CLOSE_BUDGET)

    async def _fault_from(self, role: str, exc: BaseException) -> None:
        await (self.primary if role == "primary" else self.secondary).set_fault(exc)

    async def note_primary_error(self, exc: BaseException) -> None:
        if is_namespace_auth_fault(exc):  # a put-token refused for a missing entity is not a namespace fault
            await self.primary.set_fault(exc)

    async def close(self) -> None:
        """Stop the background work first (syphon pumps and pingers finish what they are doing, within
        the budget), then close the namespace clients under them."""
        self._close_with("the paired client is closed")
        await self._stop_background()
        for side in (self.primary, self.secondary):
            if not side.closed:
                await side.close()

    # ---- senders and pings ------------------------------------------------------------------------

    def get_queue_sender(self, queue_name: str) -> PairedSender:
        self.check_open()
        return PairedSender(self, queue_name, topic=False)

    def get_topic_sender(self, topic_name: str) -> PairedSender:
        self.check_open()
        return PairedSender(self, topic_name, topic=True)

    def start_pinging(self, path: str) -> None:
        if self.book.start_pinging(path):
            self._workers.spawn(lambda: self._ping_until_back(path), f"ping {path}")

    async def _ping_until_back(self, path: str) -> None:
        interval = self.options.ping_primary_interval.total_seconds()
        try:
            while not await concurrency.wait(self._stop, interval):
                try:
                    async with self.primary.attempts.get_queue_sender(path) as sender:
                        await sender.send_messages(ping_message())
                except Exception as exc:
                    log.info("ping of '%s' failed: %s", path, core.first_line(exc))
                    continue
                log.warning("entity '%s' answers again; sends go to the primary", path)
                self.book.ping_succeeded(path)
                return
        finally:
            self.book.ping_stopped(path)
