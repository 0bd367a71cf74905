"""Backlog queues of paired namespaces: their names, their properties, and the message rewriting.

Pure functions on plain values (no SDK objects, no clock), so the paired client, the ``sodalite
syphon`` command and the Spark syphon pipeline rewrite messages the same way.

When a sender fails over, a message bound for ``path`` in the primary namespace goes to a backlog
queue ``<primary namespace>/x-servicebus-transfer/<i>`` in the secondary namespace instead. Its
properties that the backlog queue would act on move into application properties (the
paired-namespaces seed's table; the seed names ``x-ms-path`` twice, the scheduled time keeps its
own name here):

=========================  ===============================  ======================================
property                   application property             encoding
=========================  ===============================  ======================================
SessionId                  ``x-ms-sessionid``               string
TimeToLive                 ``x-ms-timetolive``              milliseconds: int, or double past 2^31
ScheduledEnqueueTimeUtc    ``x-ms-scheduledenqueuetimeutc`` timestamp (ms since the epoch)
the target entity's path   ``x-ms-path``                    string
=========================  ===============================  ======================================

(The Python SDK encodes every ``int`` as a 32-bit AMQP int, so a longer time-to-live travels as a
double, exact to the millisecond for any TimeSpan; readers accept int, long and double.)

The syphon restores them: the SessionId and scheduled time as they were, the time-to-live less
the time the message already spent (from its enqueue in the backlog, or from its scheduled time
if that is later). MessageId and every other property travel unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

SESSION_ID = "x-ms-sessionid"
TIME_TO_LIVE = "x-ms-timetolive"
SCHEDULED_ENQUEUE_TIME = "x-ms-scheduledenqueuetimeutc"
PATH = "x-ms-path"
BACKLOG_KEYS = (SESSION_ID, TIME_TO_LIVE, SCHEDULED_ENQUEUE_TIME, PATH)

TRANSFER_SEGMENT = "x-servicebus-transfer"
PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
PING_TIME_TO_LIVE = timedelta(seconds=1)

# Dead-letter reasons the syphon gives a backlog message it cannot move.
TARGET_NOT_FOUND = "TargetEntityNotFound"
NOT_A_BACKLOG_MESSAGE = "NotABacklogMessage"
TTL_EXPIRED = "TTLExpiredException"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT_MAX = 2**31 - 1
# .NET's TimeSpan.MaxValue (10675199 days 02:48:05.4775807), the seed's "max" for TTL and idle.
TIMESPAN_MAX = timedelta(days=10675199, hours=2, minutes=48, seconds=5, microseconds=477580)


@dataclass(frozen=True, slots=True)
class BacklogQueueProperties:
    """The properties a backlog queue is created with (paired-namespaces seed); the rest default."""

    max_size_in_megabytes: int = 5120
    max_delivery_count: int = _INT_MAX
    default_message_time_to_live: timedelta = TIMESPAN_MAX
    auto_delete_on_idle: timedelta = TIMESPAN_MAX
    lock_duration: timedelta = timedelta(minutes=1)
    dead_lettering_on_message_expiration: bool = True
    enable_batched_operations: bool = True

    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``ServiceBusAdministrationClient.create_queue``."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


BACKLOG_QUEUE_PROPERTIES = BacklogQueueProperties()


@dataclass(frozen=True, slots=True)
class Routing:
    """What a backlog message carries about its real destination."""

    path: str
    session_id: str | None = None
    time_to_live: timedelta | None = None
    scheduled_enqueue_time_utc: datetime | None = None


class NotABacklogMessage(ValueError):
    """The message lacks ``x-ms-path`` or carries a malformed backlog property."""


def backlog_queue_name(primary_namespace: str, index: int) -> str:
    return f"{primary_namespace}/{TRANSFER_SEGMENT}/{index}"


def backlog_queue_names(primary_namespace: str, count: int) -> list[str]:
    if count < 1:
        raise ValueError(f"backlog_queue_count must be at least 1, got {count}")
    return [backlog_queue_name(primary_namespace, i) for i in range(count)]


class MalformedField(ValueError):
    """A connection string field that is not ``key=value``; ``part`` is the field as written."""

    def __init__(self, part: str) -> None:
        super().__init__(f"malformed connection string field {part.strip()!r}")
        self.part = part


def connection_string_fields(connection_string: str) -> dict[str, str]:
    """The ``key=value`` fields of a Service Bus connection string, keys as written (MalformedField
    for a field without ``=``)."""
    fields: dict[str, str] = {}
    for part in connection_string.split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise MalformedField(part)
        fields[key.strip()] = value.strip()
    return fields


def namespace_of(connection_string: str) -> str:
    """The namespace a connection string names: the first label of its endpoint's host name."""
    endpoint = next((v for k, v in connection_string_fields(connection_string).items() if k.lower() == "endpoint"),
                    None)
    if not endpoint:
        raise ValueError("the connection string has no Endpoint")
    host = urlsplit(endpoint if "://" in endpoint else f"sb://{endpoint}").hostname
    if not host:
        raise ValueError(f"the connection string's Endpoint {endpoint!r} has no host name")
    return host.split(".", 1)[0]


def _ms(value: timedelta) -> int:
    return (value.days * 86_400_000) + (value.seconds * 1000) + (value.microseconds // 1000)


def to_backlog(application_properties: Mapping[str, Any] | None, routing: Routing) -> dict[str, Any]:
    """The application properties of the backlog copy of a message bound for ``routing.path``."""
    out = {str(k): v for k, v in (application_properties or {}).items() if str(k) not in BACKLOG_KEYS}
    out[PATH] = routing.path
    if routing.session_id is not None:
        out[SESSION_ID] = routing.session_id
    if routing.time_to_live is not None:
        ms = _ms(routing.time_to_live)
        out[TIME_TO_LIVE] = ms if -(2**31) <= ms < 2**31 else float(ms)
    if routing.scheduled_enqueue_time_utc is not None:
        when = routing.scheduled_enqueue_time_utc
        out[SCHEDULED_ENQUEUE_TIME] = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return out


def _text(value: object, key: str) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str) or not value:
        raise NotABacklogMessage(f"{key} must be a non-empty string, got {value!r}")
    return value


def _milliseconds(value: object, key: str) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise NotABacklogMessage(f"{key} must be a whole number of milliseconds, got {value!r}")
    return value


def _instant(value: object, key: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return _EPOCH + timedelta(milliseconds=_milliseconds(value, key))


def from_backlog(application_properties: Mapping[Any, Any] | None) -> tuple[dict[str, Any], Routing]:
    """The original application properties and the routing of a backlog message.

    Raises NotABacklogMessage when ``x-ms-path`` is missing or a backlog property is malformed.
    """
    props = {(k.decode("utf-8") if isinstance(k, bytes) else str(k)): v
             for k, v in (application_properties or {}).items()}
    if PATH not in props:
        raise NotABacklogMessage(f"the message has no {PATH} application property")
    path = _text(props[PATH], PATH)
    session = props.get(SESSION_ID)
    ttl = props.get(TIME_TO_LIVE)
    scheduled = props.get(SCHEDULED_ENQUEUE_TIME)
    routing = Routing(
        path=path,
        session_id=None if session is None else _text(session, SESSION_ID),
        time_to_live=None if ttl is None else timedelta(milliseconds=_milliseconds(ttl, TIME_TO_LIVE)),
        scheduled_enqueue_time_utc=None if scheduled is None else _instant(scheduled, SCHEDULED_ENQUEUE_TIME),
    )
    return {k: v for k, v in props.items() if k not in BACKLOG_KEYS}, routing


def remaining_time_to_live(routing: Routing, enqueued_time_utc: datetime, now: datetime) -> timedelta | None:
    """The time-to-live left for the primary: None when the message had none, zero or less once spent.

    The clock starts at the backlog enqueue, or at the scheduled time when that is later (a
    scheduled message's time-to-live counts from when it becomes active).
    """
    if routing.time_to_live is None:
        return None
    start = enqueued_time_utc if enqueued_time_utc.tzinfo else enqueued_time_utc.replace(tzinfo=UTC)
    scheduled = routing.scheduled_enqueue_time_utc
    if scheduled is not None and scheduled > start:
        start = scheduled
    spent = max(timedelta(0), (now if now.tzinfo else now.replace(tzinfo=UTC)) - start)
    return routing.time_to_live - spent
