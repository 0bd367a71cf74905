"""What one client may hold before it has proved anything, and how the broker survives running out.

Theory of operation: a connection must finish its AMQP/SASL handshake and open within
``handshake_timeout`` seconds of its TCP accept, or it is closed. Past ``max_connections`` open
connections, a new one is let through the handshake only to be closed with
``amqp:resource-limit-exceeded`` and a description naming the limit (a refusal a client can read,
rather than a reset). Each connection may begin at most ``max_sessions`` sessions (the channel-max
the broker advertises; one more closes the connection) and attach at most ``max_links`` links: one
more is refused with ``amqp:resource-limit-exceeded``, and a peer that keeps attaching past refusals
is disconnected. When accept fails because the process is out of file descriptors, asyncio already
stops accepting on that listener for a second; :class:`AcceptFailureLog` reports it once per
interval (with how many were not reported) instead of one traceback per failed accept.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    handshake_timeout: float = 30.0  # seconds from accept to an open connection
    max_connections: int = 5000
    max_sessions: int = 64  # per connection
    max_links: int = 1000  # per connection, over all its sessions


class AcceptFailureLog:
    """An event-loop exception handler that reports accept failures for lack of resources once per
    ``interval`` seconds; everything else goes to the handler it wraps (the loop's default)."""

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.suppressed = 0
        self._last: float | None = None

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES and "accept" in str(context.get("message")):
            now = self.clock()
            if self._last is not None and now - self._last < self.interval:
                self.suppressed += 1
                return
            self._last = now
            more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
            self.suppressed = 0
            log.error("cannot accept connections: %s; retrying every second, reported every %.0f s%s",
                      exc.strerror or exc, self.interval, more, extra={"kind": "accept"})
            return
        loop.default_exception_handler(context)
