"""The AMQP port's listener, which can also serve the management API on the same port.

Theory of operation: ``ServiceBusAdministrationClient`` (azure-servicebus 7.15) always speaks HTTPS
to the host and port of its connection string, and for the emulator's connection string that port
is the AMQP port (clarifications, issue 15, "Management endpoint"). So the listener accepts each
socket itself and peeks at its first byte without consuming it (``MSG_PEEK``):

- ``0x16``, a TLS handshake record (ClientHello): TLS with the broker's certificate, then HTTP;
- the first letter of an HTTP method (``GET``, ``PUT``, ``POST``, ``DELETE``, ``HEAD``,
  ``OPTIONS``, ``PATCH``, ``CONNECT``, ``TRACE``): plain HTTP;
- anything else (``AMQP`` in practice): an AMQP connection, which rejects a bad header itself.

No AMQP protocol header starts with those letters, so one byte decides. Since nothing was read,
the chosen protocol sees the stream from its first byte. Without an HTTP protocol factory the
listener is a plain AMQP listener. A socket that sends nothing for ``SNIFF_TIMEOUT`` seconds is
closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16
HTTP_METHOD_INITIALS = frozenset(b"GPDHOCT")
SNIFF_TIMEOUT = 60.0

ProtocolFactory = Callable[[], asyncio.Protocol]


class SniffingListener:
    """Accepts on one socket; each connection goes to AMQP, HTTPS or HTTP by its first byte."""

    def __init__(self, sock: socket.socket, amqp: ProtocolFactory, http: ProtocolFactory | None,
                 tls: ssl.SSLContext | None) -> None:
        self.sock = sock
        self._amqp = amqp
        self._http = http
        self._tls = tls
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(cls, host: str, port: int, amqp: ProtocolFactory, http: ProtocolFactory | None = None,
                    tls: ssl.SSLContext | None = None) -> SniffingListener:
        sock = socket.create_server((host, port), reuse_port=False, backlog=128)
        sock.setblocking(False)
        listener = cls(sock, amqp, http, tls)
        listener._accepting = asyncio.get_running_loop().create_task(listener._accept_forever())
        return listener

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._pending):
            task.cancel()
        self.sock.close()

    async def _accept_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self.sock)
            except OSError as exc:  # out of descriptors, say: keep listening
                log.warning("accept failed on the AMQP port: %s", exc)
                await asyncio.sleep(0.1)
                continue
            conn.setblocking(False)
            if self._http is None:
                await self._hand_over(conn, self._amqp, None)
                continue
            task = loop.create_task(self._route(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _route(self, conn: socket.socket) -> None:
        try:
            first = await asyncio.wait_for(_peek_first_byte(conn), SNIFF_TIMEOUT)
        except (TimeoutError, OSError):
            conn.close()
            return
        except asyncio.CancelledError:
            conn.close()
            raise
        if first is None:  # closed before sending anything
            conn.close()
            return
        assert self._http is not None
        if first == TLS_HANDSHAKE and self._tls is not None:
            await self._hand_over(conn, self._http, self._tls)
        elif first in HTTP_METHOD_INITIALS:
            await self._hand_over(conn, self._http, None)
        else:
            await self._hand_over(conn, self._amqp, None)

    @staticmethod
    async def _hand_over(conn: socket.socket, factory: ProtocolFactory, tls: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            if tls is None:
                await loop.connect_accepted_socket(factory, conn)
            else:
                await loop.connect_accepted_socket(factory, conn, ssl=tls, ssl_handshake_timeout=30.0)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            log.info("connection dropped before it was established: %s", exc)
            with contextlib.suppress(OSError):
                conn.close()


async def _peek_first_byte(conn: socket.socket) -> int | None:
    """The first byte the peer sent, left in the socket; None when it closed first."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = conn.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(conn.fileno(), _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(conn.fileno())
            continue
        return data[0] if data else None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
