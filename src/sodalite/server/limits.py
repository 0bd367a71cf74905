"""What one client may hold before it has proved anything, and how the broker survives running out.

Theory of operation: a connection must finish its AMQP/SASL handshake and open within
``handshake_timeout`` seconds of its TCP accept, or it is closed; then it must have a token accepted
on ``$cbs`` within ``auth_timeout`` seconds of its open (the handshake timeout unless set), or it is
closed with ``amqp:unauthorized-access``. (SASL PLAIN proves nothing here: the broker grants rights
only for ``$cbs`` tokens.) Connections not yet authenticated have an allowance of their own,
``max_unauthenticated`` (:meth:`ConnectionLimits.unauthenticated_allowance`: never more than
``max_connections - 1``), so they can never take the capacity authenticated clients need.
:func:`admit` decides at each accept: within both limits the connection is admitted; when the
allowance is full (or every connection slot is taken and some are unauthenticated), the
unauthenticated connection that has waited longest gives way, if it has waited at least
``EVICT_AFTER_S`` (a client that authenticates does so within milliseconds of its open, so one
still waiting after that has had its chance); otherwise the newcomer is refused. So an idle flood
holds at most the allowance, and a client with a key still gets in. Past ``max_connections`` open
connections, all authenticated, a new one is let through the handshake only to be closed with
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
import enum
import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


EVICT_AFTER_S = 1.0  # an unauthenticated connection that waited this long gives way to a newcomer


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    handshake_timeout: float = 30.0  # seconds from accept to an open connection
    max_connections: int = 5000
    max_sessions: int = 64  # per connection
    max_links: int = 1000  # per connection, over all its sessions
    max_unauthenticated: int = 500  # connections waiting for their first accepted token, at most
    auth_timeout: float | None = None  # seconds from open to an accepted token (None: handshake_timeout)

    @property
    def authentication_deadline(self) -> float:
        return self.handshake_timeout if self.auth_timeout is None else self.auth_timeout

    def unauthenticated_allowance(self) -> int:
        """The allowance in force: ``max_unauthenticated``, below ``max_connections`` (at least 1)."""
        return max(1, min(self.max_unauthenticated, self.max_connections - 1))


class Admission(enum.Enum):
    ADMIT = "admit"
    EVICT_OLDEST = "evict the unauthenticated connection that waited longest, then admit"
    REFUSE_UNAUTHENTICATED = "refuse: too many connections are waiting to authenticate"
    REFUSE_FULL = "refuse: the connection limit is reached"


def admit(limits: ConnectionLimits, connections: int, unauthenticated: int, oldest_wait: float | None) -> Admission:
    """What a new connection (unauthenticated, as every connection starts) gets, with ``connections``
    open (counted ones, ``unauthenticated`` of them not yet authenticated, the longest waiting for
    ``oldest_wait`` seconds)."""
    allowance_full = unauthenticated >= limits.unauthenticated_allowance()
    slots_full = connections >= limits.max_connections
    if not allowance_full and not slots_full:
        return Admission.ADMIT
    if unauthenticated > 0 and oldest_wait is not None and oldest_wait >= EVICT_AFTER_S:
        return Admission.EVICT_OLDEST
    return Admission.REFUSE_UNAUTHENTICATED if allowance_full else Admission.REFUSE_FULL


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
