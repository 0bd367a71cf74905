# Generated from src/sodalite/client/aio/outbox.py by scripts/unasync; edit the async source.
"""Outbox: a durable client-side queue in front of Service Bus (seed: outages-and-disasters).

Written once, for asyncio; ``sodalite.client.outbox`` is generated from it by ``scripts/unasync``.
The file format and its guarantees are in ``outbox_core``. ``send_messages`` writes the messages to
the outbox file and returns once the transaction is fsynced: that return is the outbox's
acknowledgement, and it needs no namespace at all. Forwarding moves the oldest rows to Service Bus
in acceptance order through any client with ``get_queue_sender``/``get_topic_sender`` (a
``ServiceBusClient`` or a ``ReplicatedClient``, of the same form): ``forward()`` does it once, until
the outbox is empty or a send fails; ``start()`` forwards in the background (a task; a thread in
the sync form) whenever there is something to forward, and retries every ``retry_interval`` while
no namespace is reachable. An error that says the namespace may be unavailable stops forwarding
and keeps the rows; any other error moves the refused row to the ``failed`` table (see
``failed_messages``). The asyncio form does its file work in a worker thread, so the loop never
waits on a disk flush, and opens the file in ``open()`` or when it enters its context; the sync
form opens it at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Protocol, cast

from azure.servicebus import ServiceBusMessage

from sodalite.client import concurrency
from sodalite.client import outbox_core as core
from sodalite.client.outbox_core import FailedMessage, ForwardingClient
from sodalite.client.replication_core import signals_unavailable

__all__ = ["Outbox", "OutboxSender"]

_log = logging.getLogger("sodalite.client.outbox")


class _Sender(Protocol):
    def send_messages(self, message: ServiceBusMessage | list[ServiceBusMessage], *,
                      timeout: float | None = None) -> None: ...
    def close(self) -> None: ...


class Outbox:
    """A durable queue of outgoing messages in the SQLite file ``path``, forwarded through ``client``.

    Open it with ``Outbox.open(path, client)`` or ``with Outbox(path, client)``.
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
        self._store = core.OutboxStore(self.path, batch_size)  # the sync outbox opens its file at once
        self._forward_lock = concurrency.Lock()
        self._senders: dict[tuple[str, str], _Sender] = {}
        self._wake = concurrency.Event()
        self._stopping = concurrency.Event()
        self._workers = concurrency.Workers()
        self._started = False

    @classmethod
    def open(cls, path: str | Path, client: ForwardingClient | None = None, *,
             retry_interval: timedelta = timedelta(seconds=1), batch_size: int = 100,
             send_timeout: float | None = 30.0) -> Outbox:
        outbox = cls(path, client, retry_interval=retry_interval, batch_size=batch_size, send_timeout=send_timeout)
        outbox._open()
        return outbox

    def _open(self) -> core.OutboxStore:
        if self._store is None:
            self._store = core.OutboxStore(self.path, self._batch_size)
        return self._store

    def _open_now(self) -> core.OutboxStore:
        """The store, opened in the caller's thread if it is not open yet (for ``len``)."""
        if self._store is None:
            self._store = core.OutboxStore(self.path, self._batch_size)
        return self._store

    # -- accepting -------------------------------------------------------------------------------

    def get_queue_sender(self, queue_name: str) -> OutboxSender:
        return OutboxSender(self, "queue", queue_name)

    def get_topic_sender(self, topic_name: str) -> OutboxSender:
        return OutboxSender(self, "topic", topic_name)

    def send_messages(self, kind: str, entity: str,
                      message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> None:
        """Accept messages for ``entity`` (``kind`` "queue" or "topic"); returns once they are durable."""
        core.check_kind(kind)
        store = self._open()
        store.accept(kind, entity, core.batch_of(message))
        self._wake.set()

    def pending_count(self) -> int:
        """Messages accepted and not yet forwarded."""
        store = self._open()
        return store.count()

    def __len__(self) -> int:
        """Messages accepted and not yet forwarded (one short read of the file, in the caller's thread)."""
        return self._open_now().count()

    def failed_messages(self) -> list[FailedMessage]:
        """Messages the broker refused for good (not for unavailability), oldest first, with the error."""
        store = self._open()
        return store.failed()

    # -- forwarding ------------------------------------------------------------------------------

    def forward(self) -> int:
        """Forward pending messages in order until none is left or no namespace is reachable; returns
        how many left the outbox (forwarded, or set aside as failed)."""
        core.check_can_forward(self.client)
        store = self._open()
        done = 0
        with self._forward_lock:
            while not self._stopping.is_set():
                rows = store.head()
                if not rows:
                    return done
                try:
                    done += self._forward_rows(store, rows)
                except Exception as error:
                    if signals_unavailable(error):
                        _log.info("outbox: no namespace reachable (%s); messages wait", error)
                        return done
                    raise
        return done

    def _forward_rows(self, store: core.OutboxStore, rows: list[core.PendingRow]) -> int:
        messages = core.decode_rows(rows)
        if isinstance(messages, core.Undecodable):
            store.fail([messages.row], messages.error)
            return 1
        try:
            self._sender(rows[0].kind, rows[0].entity).send_messages(core.send_payload(messages),
                                                                     timeout=self.send_timeout)
        except Exception as error:
            step = core.after_refusal(rows, error)
            if step is core.AfterRefusal.KEEP:
                raise
            if step is core.AfterRefusal.SPLIT:
                return self._forward_rows(store, rows[:1])
            _log.warning("outbox: message %s for %s refused: %s", rows[0].seq, rows[0].entity, error)
            store.fail(rows, core.refusal_text(error))
            return 1
        store.forwarded(rows)
        return len(rows)

    def _sender(self, kind: str, entity: str) -> _Sender:
        key = (kind, entity)
        sender = self._senders.get(key)
        if sender is None:
            made = core.make_sender(core.check_can_forward(self.client), kind, entity)
            sender = self._senders[key] = cast(_Sender, made)  # the client's own form: sync or asyncio
        return sender

    def start(self) -> None:
        """Forward in the background until ``close``."""
        core.check_can_forward(self.client)
        if not self._started:
            self._started = True
            self._workers.spawn(self._run, "sodalite-outbox")

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.forward()
            except Exception:
                _log.exception("outbox: forwarding failed")
            waited = self.retry_interval.total_seconds()
            if self.pending_count() and not self._stopping.is_set():
                concurrency.wait(self._stopping, waited)
            else:
                concurrency.wait(self._wake, waited)

    def close(self) -> None:
        """Stop the background forwarding (the asyncio form cancels it; the sync form lets the forward
        in progress end), close the senders, then the file."""
        self._stopping.set()
        self._wake.set()
        self._workers.stop(None)
        self._started = False
        with self._forward_lock:
            for sender in self._senders.values():
                try:
                    sender.close()
                except Exception:
                    _log.debug("closing an outbox sender failed", exc_info=True)
            self._senders.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Outbox:
        self._open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class OutboxSender:
    """The SDK sender's shape over an outbox: ``send_messages`` returns once the messages are durable."""

    def __init__(self, outbox: Outbox, kind: str, entity: str) -> None:
        self._outbox = outbox
        self.kind = kind
        self.entity_name = entity

    def send_messages(self, message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> None:
        self._outbox.send_messages(self.kind, self.entity_name, message)

    def close(self) -> None:
        """Nothing to release: the outbox owns the file."""

    def __enter__(self) -> OutboxSender:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
