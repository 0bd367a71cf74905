"""The AMQP port's listener, which can also serve the management API on the same port.

Theory of operation: ``ServiceBusAdministrationClient`` (azure-servicebus 7.15) always speaks HTTPS
to the host and port of its connection string, and for the emulator's connection string that port
is the AMQP port (clarifications, issue 15, "Management endpoint"). So the listener accepts each
socket itself and peeks at its first byte without consuming it (``MSG_PEEK``):

- ``0x16``, a TLS handshake record (ClientHello): TLS with the broker's certificate, then HTTP;
- an HTTP method and a space (``GET``, ``PUT``, ``POST``, ``DELETE``, ``HEAD``, ``OPTIONS``,
  ``PATCH``): plain HTTP;
- anything else (``AMQP`` in practice): an AMQP connection, which answers a wrong protocol header
  with its own, as before.

The peek waits only while the bytes so far could still begin a method (``P``, ``DE``, ...), so an
AMQP header is decided on its first byte. Since nothing was read, the chosen protocol sees the
stream from its first byte. Without an HTTP protocol factory the listener is a plain AMQP
listener. A socket that has not decided within the handshake timeout (``SNIFF_TIMEOUT`` unless the
broker says otherwise) is closed. A failed accept goes to the loop's exception handler (which reports
running out of descriptors once per interval, ``limits.AcceptFailureLog``) and pauses accepting, a
second when the process is out of resources.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable

from sodalite.server.limits import OUT_OF_RESOURCES

log = logging.getLogger(__name__)

TLS_HANDSHAKE = 0x16
HTTP_METHODS = (b"GET ", b"PUT ", b"POST ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")
PEEK = max(len(m) for m in HTTP_METHODS)
PARTIAL_PAUSE = 0.01  # seconds between peeks while the bytes so far are an incomplete method
SNIFF_TIMEOUT = 30.0
ACCEPT_PAUSE = 0.1  # seconds after a failed accept; OUT_OF_RESOURCES_PAUSE when out of descriptors
OUT_OF_RESOURCES_PAUSE = 1.0  # as asyncio's own servers do

ProtocolFactory = Callable[[], asyncio.Protocol]


class ListenFailed(OSError):
    """A listener could not bind its address; ``listener`` says which one (``amqp``, ``amqps``), so the
    command line can name the option that chose the port."""

    def __init__(self, listener: str, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.listener, self.host, self.port, self.cause = listener, host, port, cause


class SniffingListener:
    """Accepts on one socket; each connection goes to AMQP, HTTPS or HTTP by its first byte."""

    def __init__(self, sock: socket.socket, amqp: ProtocolFactory, http: ProtocolFactory | None,
                 tls: ssl.SSLContext | None, sniff_timeout: float = SNIFF_TIMEOUT) -> None:
        self.sock = sock
        self._sniff_timeout = sniff_timeout
        self._amqp = amqp
        self._http = http
        self._tls = tls
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(cls, host: str, port: int, amqp: ProtocolFactory, http: ProtocolFactory | None = None,
                    tls: ssl.SSLContext | None = None, sniff_timeout: float = SNIFF_TIMEOUT) -> SniffingListener:
        sock = socket.create_server((host, port), reuse_port=False, backlog=128)
        sock.setblocking(False)
        listener = cls(sock, amqp, http, tls, sniff_timeout)
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
            except OSError as exc:  # out of descriptors, say: report (rate-limited) and keep listening
                loop.call_exception_handler({"message": "socket.accept() out of system resource on the AMQP port",
                                             "exception": exc, "socket": self.sock})
                await asyncio.sleep(OUT_OF_RESOURCES_PAUSE if exc.errno in OUT_OF_RESOURCES else ACCEPT_PAUSE)
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
            kind = await asyncio.wait_for(_sniff(conn), self._sniff_timeout)
        except (TimeoutError, OSError):
            conn.close()
            return
        except asyncio.CancelledError:
            conn.close()
            raise
        if kind is None:  # closed before it was decided
            conn.close()
            return
        assert self._http is not None
        if kind == "tls" and self._tls is not None:
            await self._hand_over(conn, self._http, self._tls)
        elif kind == "http":
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


def classify(head: bytes) -> str | None:
    """``tls``, ``http`` or ``amqp`` for a connection's first bytes; None while they could still be a method."""
    if head[:1] == bytes([TLS_HANDSHAKE]):
        return "tls"
    if any(head.startswith(method) for method in HTTP_METHODS):
        return "http"
    if any(method.startswith(head) for method in HTTP_METHODS) and len(head) < PEEK:
        return None
    return "amqp"


async def _sniff(conn: socket.socket) -> str | None:
    """How to serve the connection, from its first bytes, left unread; None when it closed first."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            head = conn.recv(PEEK, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(conn.fileno(), _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(conn.fileno())
            continue
        if not head:
            return None
        kind = classify(head)
        if kind is not None:
            return kind
        await asyncio.sleep(PARTIAL_PAUSE)  # the rest of a method is on its way; the bytes stay unread


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
