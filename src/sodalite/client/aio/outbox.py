"""The asyncio Outbox: the same file and guarantees as ``sodalite.client.outbox``.

Theory of operation: the file work (each a short fsynced transaction) runs in a worker thread via
``asyncio.to_thread`` so the loop never waits on a disk flush; forwarding awaits the asyncio SDK
(or the asyncio ``ReplicatedClient``). ``start()`` runs the forwarder as a task until ``close()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from azure.servicebus import ServiceBusMessage

from sodalite.client import outbox_core as core
from sodalite.client.outbox_core import FailedMessage, ForwardingClient
from sodalite.client.replication_core import signals_unavailable

__all__ = ["Outbox", "OutboxSender"]

_log = logging.getLogger("sodalite.client.aio.outbox")


class Outbox:
    """A durable queue of outgoing messages in the SQLite file ``path``, forwarded through ``client``.

    Open it with ``await Outbox.open(path, client)`` or ``async with Outbox(path, client)``.
    """

    def __init__(self, path: str | Path, client: ForwardingClient | None = None, *,
                 retry_interval: timedelta = timedelta(seconds=1), batch_size: int = 100,
                 send_timeout: float | None = 30.0) -> None:
        core.check_batch_size(batch_size)
        self.path = Path(path)
        self.client = client
        self.retry_interval = retry_interval
        self.send_timeout = send_timeout
        self._batch_size = batch_size
        self._store: core.OutboxStore | None = None
        self._forward_lock = asyncio.Lock()
        self._senders: dict[tuple[str, str], Any] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: str | Path, client: ForwardingClient | None = None, **options: Any) -> Outbox:
        outbox = cls(path, client, **options)
        await outbox._open()
        return outbox

    async def _open(self) -> core.OutboxStore:
        if self._store is None:
            self._store = await asyncio.to_thread(core.OutboxStore, self.path, self._batch_size)
        return self._store

    def get_queue_sender(self, queue_name: str) -> OutboxSender:
        return OutboxSender(self, "queue", queue_name)

    def get_topic_sender(self, topic_name: str) -> OutboxSender:
        return OutboxSender(self, "topic", topic_name)

    async def send_messages(self, kind: str, entity: str,
                            message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> None:
        """Accept messages for ``entity``; returns once they are durable in the file."""
        core.check_kind(kind)
        store = await self._open()
        await asyncio.to_thread(store.accept, kind, entity, core.batch_of(message))
        self._wake.set()

    async def pending_count(self) -> int:
        store = await self._open()
        return await asyncio.to_thread(store.count)

    async def failed_messages(self) -> list[FailedMessage]:
        store = await self._open()
        return await asyncio.to_thread(store.failed)

    async def forward(self) -> int:
        """Forward in order until empty or no namespace is reachable; returns how many left the outbox."""
        core.check_can_forward(self.client)
        store = await self._open()
        done = 0
        async with self._forward_lock:
            while not self._stopping:
                rows = await asyncio.to_thread(store.head)
                if not rows:
                    return done
                try:
                    done += await self._forward_rows(store, rows)
                except Exception as error:
                    if signals_unavailable(error):
                        _log.info("outbox: no namespace reachable (%s); messages wait", error)
                        return done
                    raise
        return done

    async def _forward_rows(self, store: core.OutboxStore, rows: list[core.PendingRow]) -> int:
        messages = core.decode_rows(rows)
        if isinstance(messages, core.Undecodable):
            await asyncio.to_thread(store.fail, [messages.row], messages.error)
            return 1
        try:
            await self._sender(rows[0].kind, rows[0].entity).send_messages(core.send_payload(messages),
                                                                           timeout=self.send_timeout)
        except Exception as error:
            step = core.after_refusal(rows, error)
            if step is core.AfterRefusal.KEEP:
                raise
            if step is core.AfterRefusal.SPLIT:
                return await self._forward_rows(store, rows[:1])
            _log.warning("outbox: message %s for %s refused: %s", rows[0].seq, rows[0].entity, error)
            await asyncio.to_thread(store.fail, rows, core.refusal_text(error))
            return 1
        await asyncio.to_thread(store.forwarded, rows)
        return len(rows)

    def _sender(self, kind: str, entity: str) -> Any:
        key = (kind, entity)
        if key not in self._senders:
            self._senders[key] = core.make_sender(core.check_can_forward(self.client), kind, entity)
        return self._senders[key]

    def start(self) -> None:
        """Forward in a background task until ``close``."""
        core.check_can_forward(self.client)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                await self.forward()
            except Exception:
                _log.exception("outbox: forwarding failed")
            waited = self.retry_interval.total_seconds()
            if await self.pending_count() and not self._stopping:
                await asyncio.sleep(waited)
            else:
                try:
                    await asyncio.wait_for(self._wake.wait(), waited)
                except TimeoutError:
                    pass

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        async with self._forward_lock:
            for sender in self._senders.values():
                try:
                    await sender.close()
                except Exception:
                    _log.debug("closing an outbox sender failed", exc_info=True)
            self._senders.clear()
        if self._store is not None:
            await asyncio.to_thread(self._store.close)
            self._store = None

    async def __aenter__(self) -> Outbox:
        await self._open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class OutboxSender:
    """The SDK sender's shape over an outbox: ``send_messages`` returns once the messages are durable."""

    def __init__(self, outbox: Outbox, kind: str, entity: str) -> None:
        self._outbox = outbox
        self.kind = kind
        self.entity_name = entity

    async def send_messages(self, message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> None:
        await self._outbox.send_messages(self.kind, self.entity_name, message)

    async def close(self) -> None:
        """Nothing to release: the outbox owns the file."""

    async def __aenter__(self) -> OutboxSender:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
