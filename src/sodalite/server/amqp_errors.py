"""The edge where Sodalite errors become AMQP errors (and the only place that happens).

Every error a client sees carries ``TrackingId:<id>`` in its description, as Service Bus does, and
is logged here once, with the same id, its condition, the entity and the connection, so a client's
report can be matched to the broker's log line. It is also counted, by condition, in the broker's
metrics.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from sodalite.amqp.performatives import Error
from sodalite.errors import SodaliteError

if TYPE_CHECKING:
    from sodalite.server.metrics import BrokerMetrics

log = logging.getLogger(__name__)

# Conditions a healthy client meets in normal work (an entity gone, a lock that ran out, no session
# free to lock): logged at INFO. Every other error a client is sent is logged at WARNING.
EXPECTED_CONDITIONS = frozenset({
    "amqp:not-found",
    "com.microsoft:message-not-found",
    "com.microsoft:message-lock-lost",
    "com.microsoft:session-lock-lost",
    "com.microsoft:session-cannot-be-locked",
    "com.microsoft:entity-already-exists",
    "com.microsoft:timeout",
})


def new_tracking_id() -> str:
    return uuid.uuid4().hex


def to_amqp_error(exc: SodaliteError, tracking_id: str | None = None) -> Error:
    """An AMQP error with all three fields written (sdk-wire-contract.md pitfall 21)."""
    return Error(exc.condition, tracked_description(exc, tracking_id or new_tracking_id()), None)


def tracked_description(exc: SodaliteError, tracking_id: str) -> str:
    return f"{exc.description} TrackingId:{tracking_id}"


def as_sodalite_error(exc: BaseException) -> SodaliteError:
    """A client sees an unexpected exception as an internal error (the base class's condition)."""
    return exc if isinstance(exc, SodaliteError) else SodaliteError(f"internal error: {exc}")


def report(exc: BaseException, metrics: BrokerMetrics | None, connection: str | None, entity: str | None,
           kind: str) -> tuple[SodaliteError, str]:
    """Log and count one error about to be sent to a client; return it and its description.

    ``kind`` says how the client gets it: ``link`` (attach refused or link detached), ``rejected``
    (a disposition), ``management`` (a ``$management`` response).
    """
    error = as_sodalite_error(exc)
    tracking_id = new_tracking_id()
    if not isinstance(exc, SodaliteError):
        level = logging.ERROR
    elif error.condition in EXPECTED_CONDITIONS:
        level = logging.INFO
    else:
        level = logging.WARNING
    log.log(level, "%s error sent to %s on %s: %s %s TrackingId:%s", kind, connection, entity, error.condition,
            error.description, tracking_id,
            exc_info=exc if level == logging.ERROR else None,
            extra={"tracking_id": tracking_id, "condition": error.condition, "entity": entity,
                   "connection": connection, "kind": kind})
    if metrics is not None:
        metrics.error_sent(error.condition)
    return error, tracked_description(error, tracking_id)


def client_error(exc: BaseException, metrics: BrokerMetrics | None, connection: str | None, entity: str | None,
                 kind: str = "link") -> Error:
    """The AMQP error to send for ``exc``, logged and counted (see :func:`report`)."""
    error, description = report(exc, metrics, connection, entity, kind)
    return Error(error.condition, description, None)
