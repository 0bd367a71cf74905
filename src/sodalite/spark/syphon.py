"""The syphon's message rewriting on encoded AMQP messages (a backlog copy in, the primary's message out).

A message in a backlog queue ``<primary namespace>/x-servicebus-transfer/<i>`` of the secondary
namespace carries its real destination and the properties the backlog queue must not act on as
``x-ms-*`` application properties (:mod:`sodalite.client.backlog`). :func:`restore` reads them with
that module's own functions (``from_backlog``, ``remaining_time_to_live``), so the Spark syphon and
the paired client restore a message identically: the SessionId and the scheduled enqueue time as
they were, the time-to-live less the time already spent, the ``x-ms-*`` properties removed, and
everything else (MessageId, typed application properties, body) byte for byte as the sender wrote it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sodalite.amqp.types import Symbol, Timestamp, UInt
from sodalite.client import backlog
from sodalite.message import sections
from sodalite.message.names import CONTENT_TYPE as _CONTENT_TYPE
from sodalite.message.names import MESSAGE_ID as _MESSAGE_ID
from sodalite.message.names import SCHEDULED_ENQUEUE_TIME
from sodalite.message.names import SESSION_ID as _SESSION_ID

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UINT_MAX = 0xFFFFFFFF


def _ms(value: timedelta) -> int:
    return value.days * 86_400_000 + value.seconds * 1000 + value.microseconds // 1000


def restore(payload: bytes, enqueued_ms: int, now: datetime) -> tuple[bytes, str] | None:
    """The message to send to the primary and its entity path, from a backlog copy (``amqpMessage``)
    enqueued in the backlog queue at ``enqueued_ms``; None for a ping or a message whose time-to-live
    ran out in the backlog.

    Raises ``backlog.NotABacklogMessage`` (a ValueError) naming the message when it has no ``x-ms-path``
    or a malformed ``x-ms-*`` property.
    """
    w = sections.walk(payload)
    header = w.header[:3]
    annotations = dict(w.client_annotations)
    properties = list(w.properties)
    application = w.application
    if str(properties[_CONTENT_TYPE]) == backlog.PING_CONTENT_TYPE:
        return None
    try:
        kept, routing = backlog.from_backlog(application)
    except backlog.NotABacklogMessage as exc:
        raise backlog.NotABacklogMessage(f"backlog message {properties[_MESSAGE_ID]!r}: {exc}") from None
    enqueued = _EPOCH + timedelta(milliseconds=enqueued_ms)
    remaining = backlog.remaining_time_to_live(routing, enqueued, now)
    if remaining is not None and remaining <= timedelta(0):
        return None
    # from_backlog gives keys as text; keep the original key objects of what it kept
    application = {k: v for k, v in application.items()
                   if (k.decode("utf-8") if isinstance(k, bytes) else str(k)) in kept}
    header[2] = None if remaining is None else UInt(min(max(1, _ms(remaining)), UINT_MAX))
    properties[_SESSION_ID] = routing.session_id
    annotations = {k: v for k, v in annotations.items() if str(k) != SCHEDULED_ENQUEUE_TIME}
    if routing.scheduled_enqueue_time_utc is not None:
        annotations[Symbol(SCHEDULED_ENQUEUE_TIME)] = Timestamp(
            _ms(routing.scheduled_enqueue_time_utc - _EPOCH))
    tail = b"".join(w.body_bytes()) + w.footer
    return sections.assemble(header, annotations, properties, application, tail), routing.path


def restore_row(payload: bytes | bytearray | None, enqueued_ms: int | None) -> tuple[bytes, str] | None:
    """:func:`restore` as the syphon pipeline's Spark UDF calls it (now is the task's clock)."""
    if payload is None:
        return None
    now = datetime.now(UTC)
    enqueued = int(now.timestamp() * 1000) if enqueued_ms is None else int(enqueued_ms)
    return restore(bytes(payload), enqueued, now)
