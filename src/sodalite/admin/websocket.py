"""AMQP over WebSockets: ``wss://host:port/$servicebus/websocket`` on the management API's ports.

Theory of operation: the official SDKs (``TransportType.AmqpOverWebsocket`` in Python and .NET,
``webSocketOptions`` in JavaScript) open a WebSocket to ``/$servicebus/websocket`` asking for the
subprotocol ``AMQPWSB10`` (AMQP WebSocket binding 1.0; the Go SDK asks for ``amqp``, which is
accepted too), then carry the AMQP byte stream, SASL header first, in binary messages. Message
boundaries mean nothing: the bytes of all messages in order are the stream. So a WebSocket
connection here is served exactly like a TCP one: the handler asks its owner for a fresh AMQP
connection protocol (an ``asyncio.Protocol``; the CLI hands in the broker's), gives it a
:class:`WebSocketTransport` that sends what it writes as binary messages, feeds it the payload of
every binary message, and tells it the connection is lost when the WebSocket closes. The AMQP
connection authenticates itself (SASL, then ``$cbs`` tokens), so the management API's Authorization
header is not asked for on this path.

A request without either subprotocol is refused with 400 before the upgrade; a text
message closes the WebSocket with 1003 (unsupported data). Closing the AMQP connection sends what
it wrote last, then closes the WebSocket (1000).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Final, Protocol

from aiohttp import WSCloseCode, WSMsgType, web

from sodalite.errors import ArgumentError

log = logging.getLogger(__name__)

PATH: Final = "/$servicebus/websocket"
SUBPROTOCOL: Final = "AMQPWSB10"
#: Every subprotocol served, in the order the server prefers them: the binding's own name, then the
#: plain ``amqp`` the Go SDK (go-amqp's WebSocket dialer) asks for.
SUBPROTOCOLS: Final = (SUBPROTOCOL, "amqp")
#: The largest WebSocket message taken: clients write a few AMQP frames per message, each at most
#: the broker's max-frame-size (256 KiB); aiohttp buffers a whole message before handing it over.
MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024


class AmqpEndpoint(Protocol):
    """Makes the protocol object that serves one AMQP connection (the broker's, wired by the CLI)."""

    def __call__(self) -> asyncio.Protocol: ...


AMQP: web.AppKey[AmqpEndpoint] = web.AppKey("amqp", AmqpEndpoint)
_OPEN: web.AppKey[set[web.WebSocketResponse]] = web.AppKey("amqp_websockets")


def install(app: web.Application, amqp: AmqpEndpoint) -> None:
    """Serve AMQP over WebSockets on ``app`` (before its catch-all routes take the path)."""
    app[AMQP] = amqp
    app[_OPEN] = set()
    app.router.add_get("/{_:(?i:\\$servicebus/websocket)}", serve)
    app.on_shutdown.append(_close_all)


async def _close_all(app: web.Application) -> None:
    """On shutdown: the WebSockets are closed (going away), so their connections end now, not at a timeout."""
    sockets = app[_OPEN]
    for ws in tuple(sockets):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"the broker is shutting down")


def is_websocket_path(path: str) -> bool:
    return path.lower() == PATH


class WebSocketTransport(asyncio.Transport):
    """The AMQP connection's transport: each ``write`` becomes one binary WebSocket message.

    ``write`` is synchronous, as a socket transport's is; a writer task sends the queued messages
    in order. ``close`` lets the queue drain, then closes the WebSocket; ``abort`` drops the queue.
    ``pause_reading`` holds the reading loop of :func:`serve` before its next message.
    """

    def __init__(self, ws: web.WebSocketResponse, request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport is not None else None
        super().__init__({"peername": peer, "ssl_object": ssl_object, "websocket": True})
        self._ws = ws
        self._outgoing: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._reading = asyncio.Event()
        self._reading.set()
        self._writer = asyncio.get_running_loop().create_task(self._write_forever())

    # ---- writing ---------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if self._closing or not data:
            return
        self._outgoing.append(bytes(data))
        self._queued_bytes += len(data)
        self._wake.set()

    def get_write_buffer_size(self) -> int:
        return self._queued_bytes

    def can_write_eof(self) -> bool:
        return False

    async def _write_forever(self) -> None:
        try:
            while True:
                while self._outgoing:
                    data = self._outgoing.popleft()
                    self._queued_bytes -= len(data)
                    await self._ws.send_bytes(data)
                if self._closing:
                    break
                self._wake.clear()
                await self._wake.wait()
        except (ConnectionError, RuntimeError) as exc:  # the peer went away mid-send
            log.debug("websocket send failed: %s", exc)
        finally:
            self._closing = True
            self._reading.set()
            if not self._ws.closed:
                await self._ws.close(code=WSCloseCode.OK)

    # ---- closing ---------------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._wake.set()  # the writer sends what is queued, then closes the WebSocket

    def abort(self) -> None:
        self._closing = True
        self._outgoing.clear()
        self._queued_bytes = 0
        self._wake.set()

    async def finished(self) -> None:
        """Once the reading loop is over: stop the writer (after it flushed) and wait for it."""
        self.close()
        await asyncio.shield(self._writer)

    # ---- reading ---------------------------------------------------------------------------------

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set()

    async def may_read(self) -> None:
        await self._reading.wait()


async def serve(request: web.Request) -> web.StreamResponse:
    """``GET /$servicebus/websocket``: upgrade, then serve one AMQP connection over the WebSocket."""
    endpoint = request.app[AMQP]
    ws = web.WebSocketResponse(protocols=SUBPROTOCOLS, max_msg_size=MAX_MESSAGE_SIZE, autoping=True)
    ready = ws.can_prepare(request)
    if not ready.ok:
        raise ArgumentError(f"{PATH} serves AMQP over WebSockets: it needs a WebSocket upgrade request "
                            f"with the subprotocol {SUBPROTOCOL} or amqp")
    if ready.protocol not in SUBPROTOCOLS:
        raise ArgumentError(f"{PATH} needs the WebSocket subprotocol {SUBPROTOCOL} or amqp (Sec-WebSocket-Protocol)")
    await ws.prepare(request)
    transport = WebSocketTransport(ws, request)
    protocol = endpoint()
    protocol.connection_made(transport)
    request.app[_OPEN].add(ws)
    try:
        async for message in ws:
            if message.type == WSMsgType.BINARY:
                await transport.may_read()
                if transport.is_closing():
                    break
                protocol.data_received(message.data)
            elif message.type == WSMsgType.TEXT:
                transport.abort()
                await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"AMQP travels in binary messages")
                break
            if transport.is_closing():
                break
    finally:
        try:
            await transport.finished()
        finally:
            request.app[_OPEN].discard(ws)
            protocol.connection_lost(None)
    return ws
