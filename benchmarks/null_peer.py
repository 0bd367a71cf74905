"""A null peer: the least an AMQP 1.0 server must do for the official SDK to send, receive and complete.

It is the ceiling for the SDK on this machine: the benchmark goal for Sodalite is that no phase of an
SDK client against Sodalite is slower than 90% of the same client against this peer. It is built on
Sodalite's own sans-IO AMQP layer (``sodalite.amqp``) and speaks just enough of the Service Bus dialect
(sdk-wire-contract.md section 0):

- SASL (ANONYMOUS, PLAIN or MSSBCBS, all accepted), open, begin;
- ``$cbs``: every put-token is settled ``accepted`` and answered ``status-code 200``;
- a client sender's transfers (single messages or batches) are split into their messages, kept in a
  per-address in-memory deque and settled ``accepted`` at once: nothing is written anywhere;
- a client receiver gets those messages back, unsettled in PeekLock (a fresh 16-byte lock token as
  delivery tag, a header with delivery-count and the sequence-number, enqueued-time and locked-until
  annotations) or settled in ReceiveAndDelete; a settlement is echoed at once with the outcome asked
  for. ``accepted`` forgets the message, ``released`` and ``modified`` put it back at the front.

Nothing else is implemented (no ``$management``, sessions, expiry, dead-lettering or persistence).
Run it alone with ``python benchmarks/null_peer.py --port 5672``; it prints a connection string.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
import uuid
from collections import deque
from typing import Any

from sodalite.amqp import events as ev
from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import encode_value
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import Accepted, Modified, Rejected, Released
from sodalite.amqp.sasl import SaslServerConfig
from sodalite.amqp.types import Described, Int, ULong

CBS = "$cbs"
MAX_MESSAGE = 256 * 1024
LOCK_MS = 60_000
_SEQ = b"x-opt-sequence-number"
_ENQ = b"x-opt-enqueued-time"
_LOCKED = b"x-opt-locked-until"


def entity_of(address: Any) -> str:
    """``amqps://host:port/queue`` -> ``queue``."""
    text = str(address or "")
    if "://" in text:
        text = text.split("://", 1)[1].split("/", 1)[1] if "/" in text.split("://", 1)[1] else ""
    return text.strip("/").lower()


class Stored:
    __slots__ = ("enqueued", "sequence", "tail")

    def __init__(self, sequence: int, enqueued: int, tail: bytes) -> None:
        self.sequence, self.enqueued, self.tail = sequence, enqueued, tail


class Peer:
    def __init__(self) -> None:
        self.queues: dict[str, deque[Stored]] = {}
        self.consumers: dict[str, list[PeerConnection]] = {}
        self.sequence = 0

    def queue(self, name: str) -> deque[Stored]:
        return self.queues.setdefault(name, deque())

    def append(self, name: str, payload: bytes, message_format: int) -> None:
        if message_format == amqp_message.BATCH_MESSAGE_FORMAT:
            inner = [amqp_message.binary_value(payload, s) for s in amqp_message.split_sections(payload)
                     if s.code == amqp_message.DATA]
        else:
            inner = [payload]
        now = int(time.time() * 1000)
        q = self.queue(name)
        for m in inner:
            # keep what a receiver gets back: every section but header and annotations
            tail = b"".join(m[s.start : s.end] for s in amqp_message.split_sections(m)
                            if s.code not in (amqp_message.HEADER, amqp_message.MESSAGE_ANNOTATIONS,
                                              amqp_message.DELIVERY_ANNOTATIONS))
            self.sequence += 1
            q.append(Stored(self.sequence, now, tail))
        for conn in self.consumers.get(name, ()):
            conn.pump()


class PeerConnection(asyncio.Protocol):
    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.amqp = Connection(server=True, container_id="null-peer", max_frame_size=262144,
                               sasl_server=SaslServerConfig(), first_outgoing_id=0x80000000)
        self.transport: asyncio.Transport | None = None
        self.consumer_links: list[Link] = []
        self.locked: dict[bytes, tuple[str, Stored]] = {}  # by delivery tag
        self._flush_scheduled = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for event in self.amqp.receive_data(data, time.monotonic()):
            self.dispatch(event)
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        for event in self.amqp.connection_lost():
            self.dispatch(event)
        for name, stored in self.locked.values():  # locks lapse with the connection here
            self.peer.queue(name).appendleft(stored)
        self.locked.clear()
        for consumers in self.peer.consumers.values():
            if self in consumers:
                consumers.remove(self)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self.transport is None or self.transport.is_closing():
            return
        data = self.amqp.data_to_send(time.monotonic())
        if data:
            self.transport.write(data)
        if self.amqp.closed:
            self.transport.close()

    def flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def dispatch(self, event: ev.Event) -> None:
        if isinstance(event, ev.LinkAttachRequested):
            self.on_attach(event.link)
        elif isinstance(event, ev.TransferReceived):
            self.on_transfer(event.link, event.delivery)
        elif isinstance(event, ev.CreditChanged):
            self.pump()
        elif isinstance(event, ev.DeliveryUpdated):
            self.on_settlement(event)
        elif isinstance(event, ev.LinkDetached) and event.link in self.consumer_links:
            self.consumer_links.remove(event.link)

    def on_attach(self, link: Link) -> None:
        remote = link.remote_attach
        assert remote is not None
        terminus = remote.target if link.role is RECEIVER else remote.source
        name = entity_of(getattr(terminus, "address", None))
        link.context = name
        if name == CBS:
            link.auto_credit = 100 if link.role is RECEIVER else None
            link.accept(initial_delivery_count=0)
        elif link.role is RECEIVER:  # the client sends
            link.auto_credit = 1000
            link.max_message_size = MAX_MESSAGE + 64 * 1024
            link.accept(max_message_size=MAX_MESSAGE)
        else:  # the client receives
            link.accept(source=remote.source, initial_delivery_count=0, max_message_size=0)
            self.consumer_links.append(link)
            consumers = self.peer.consumers.setdefault(name, [])
            if self not in consumers:
                consumers.append(self)

    def on_transfer(self, link: Link, delivery: ev.Delivery) -> None:
        if link.context == CBS:
            self.on_put_token(link, delivery)
            return
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())
        self.peer.append(str(link.context), delivery.payload, delivery.message_format)

    def on_put_token(self, link: Link, delivery: ev.Delivery) -> None:
        if not delivery.settled:
            link.settle(delivery.delivery_id, Accepted())
        message_id: Any = None
        for s in amqp_message.split_sections(delivery.payload):
            if s.code == amqp_message.PROPERTIES:
                fields = amqp_message.section_value(delivery.payload, s)
                message_id = fields[0] if isinstance(fields, list) and fields else None
        out = bytearray()
        encode_value(Described(ULong(amqp_message.PROPERTIES), [None, None, None, None, None, message_id]), out)
        encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES),
                               {"status-code": Int(200), "status-description": "OK"}), out)
        encode_value(Described(ULong(amqp_message.AMQP_VALUE), None), out)
        for other in link.session.links.values():
            if other.role is SENDER and other.context == CBS and other.attached:
                other.send_transfer(bytes(out), uuid.uuid4().bytes, settled=True)
                break

    def pump(self) -> None:
        """Deliver while a receiver has credit and its queue has messages; answer drains."""
        sent = False
        for link in self.consumer_links:
            if not link.attached:
                continue
            q = self.peer.queue(str(link.context))
            peek_lock = link.snd_settle_mode != 1
            now = int(time.time() * 1000)
            while link.link_credit > 0 and q:
                stored = q.popleft()
                entries = [amqp_message.annotation_entry_long(_SEQ, stored.sequence),
                           amqp_message.annotation_entry_timestamp(_ENQ, stored.enqueued)]
                if peek_lock:
                    entries.append(amqp_message.annotation_entry_timestamp(_LOCKED, now + LOCK_MS))
                payload = b"".join((amqp_message.encode_header(True, None, None, None, 0),
                                    amqp_message.encode_annotations(b"".join(entries), len(entries)), stored.tail))
                tag = uuid.uuid4().bytes_le
                if peek_lock:
                    self.locked[tag] = (str(link.context), stored)
                link.send_transfer(payload, tag, settled=not peek_lock)
                sent = True
            if link.drain and link.link_credit > 0 and not q:
                link.drained()
                sent = True
        if sent:
            self.flush_soon()

    def on_settlement(self, event: ev.DeliveryUpdated) -> None:
        entry = self.locked.pop(event.delivery_tag, None)
        state = event.state
        if entry is not None and not isinstance(state, Accepted | Rejected):
            self.peer.queue(entry[0]).appendleft(entry[1])  # released / modified: back to the front
            self.pump()
        if not event.settled:
            echo = Rejected(None) if isinstance(state, Rejected) else state
            if not isinstance(echo, Accepted | Rejected | Released | Modified):
                echo = Accepted()
            event.link.settle(event.delivery_id, echo)
            self.flush_soon()


async def serve(host: str, port: int) -> None:
    peer = Peer()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: PeerConnection(peer), host, port)
    bound = server.sockets[0].getsockname()[1]
    print(f"Null peer listening on {host}:{bound}", flush=True)
    print(f"Connection string: Endpoint=sb://{host}:{bound};SharedAccessKeyName=RootManageSharedAccessKey;"
          "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
