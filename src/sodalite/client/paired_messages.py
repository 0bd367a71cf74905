"""SDK messages in and out of backlog queues: ``backlog``'s pure rewriting applied to SDK objects."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.amqp import AmqpMessageBodyType
from azure.servicebus.exceptions import MessageSizeExceededError

from sodalite.client import backlog
from sodalite.client.failover import is_entity_not_found


def body_bytes(message: ServiceBusMessage | ServiceBusReceivedMessage) -> bytes:
    """A data body as one byte string (the SDK gives data bodies as a generator of sections)."""
    if message.body_type != AmqpMessageBodyType.DATA:
        raise TypeError(f"only data bodies can go through a backlog queue, not {message.body_type}")
    body: object = message.body
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if not isinstance(body, Iterable):
        raise TypeError(f"a data body is bytes, str or data sections, not {type(body).__name__}")
    return b"".join(bytes(section) for section in body)


def _copy(message: ServiceBusMessage | ServiceBusReceivedMessage, *, application_properties: dict[Any, Any],
          session_id: str | None, time_to_live: timedelta | None, scheduled: datetime | None) -> ServiceBusMessage:
    return ServiceBusMessage(
        body_bytes(message), application_properties=application_properties, session_id=session_id,
        message_id=message.message_id, scheduled_enqueue_time_utc=scheduled, time_to_live=time_to_live,
        content_type=message.content_type, correlation_id=message.correlation_id, subject=message.subject,
        partition_key=message.partition_key if session_id is None or message.partition_key == session_id else None,
        to=message.to, reply_to=message.reply_to, reply_to_session_id=message.reply_to_session_id)


def to_backlog_message(message: ServiceBusMessage, path: str) -> ServiceBusMessage:
    """The copy of ``message`` (bound for ``path``) that goes to a backlog queue."""
    if not isinstance(message, ServiceBusMessage):
        raise TypeError(f"a paired sender sends ServiceBusMessage objects, not {type(message).__name__}")
    routing = backlog.Routing(path, message.session_id, message.time_to_live, message.scheduled_enqueue_time_utc)
    properties = backlog.to_backlog(_text_keys(message.application_properties), routing)
    return _copy(message, application_properties=properties, session_id=None, time_to_live=None, scheduled=None)


def _text_keys(properties: dict[Any, Any] | None) -> dict[str, Any]:
    return {(k.decode("utf-8") if isinstance(k, bytes) else str(k)): v for k, v in (properties or {}).items()}


def from_backlog_message(message: ServiceBusReceivedMessage, now: datetime) -> tuple[str, ServiceBusMessage | None]:
    """The target path and the message to send there; None as the message when its time-to-live is spent.

    Raises ``backlog.NotABacklogMessage`` for a message without ``x-ms-path``.
    """
    properties, routing = backlog.from_backlog(message.application_properties)
    remaining = backlog.remaining_time_to_live(routing, message.enqueued_time_utc or now, now)
    if remaining is not None and remaining.total_seconds() <= 0:
        return routing.path, None
    restored = _copy(message, application_properties=properties, session_id=routing.session_id,
                     time_to_live=remaining, scheduled=routing.scheduled_enqueue_time_utc)
    return routing.path, restored


def ping_message() -> ServiceBusMessage:
    return ServiceBusMessage(b"", content_type=backlog.PING_CONTENT_TYPE, time_to_live=backlog.PING_TIME_TO_LIVE)


def is_ping(message: ServiceBusReceivedMessage | ServiceBusMessage) -> bool:
    return message.content_type == backlog.PING_CONTENT_TYPE


def as_list(message: ServiceBusMessage | Iterable[ServiceBusMessage]) -> list[ServiceBusMessage]:
    if isinstance(message, ServiceBusMessage):
        return [message]
    return list(message)


@dataclass(frozen=True, slots=True)
class SyphonPlan:
    """What the syphon does with one batch received from a backlog queue, in order."""

    pings: list[ServiceBusReceivedMessage]  # completed: a ping is never moved
    dead_letters: list[tuple[ServiceBusReceivedMessage, str, str]]  # message, reason, description
    groups: list[tuple[str, list[tuple[ServiceBusReceivedMessage, ServiceBusMessage]]]]  # one send per group

    def unsent_from(self, position: int) -> list[ServiceBusReceivedMessage]:
        """The messages of group ``position`` and those after it (abandoned when that group's send fails)."""
        return [message for _, pairs in self.groups[position:] for message, _ in pairs]


def plan_syphon_batch(received: list[ServiceBusReceivedMessage], now: datetime) -> SyphonPlan:
    """Restore each message; consecutive messages for one entity form one group (one send)."""
    pings: list[ServiceBusReceivedMessage] = []
    dead: list[tuple[ServiceBusReceivedMessage, str, str]] = []
    groups: list[tuple[str, list[tuple[ServiceBusReceivedMessage, ServiceBusMessage]]]] = []
    for message in received:
        if is_ping(message):
            pings.append(message)
            continue
        try:
            path, restored = from_backlog_message(message, now)
        except (backlog.NotABacklogMessage, TypeError) as exc:
            dead.append((message, backlog.NOT_A_BACKLOG_MESSAGE, str(exc)))
            continue
        if restored is None:
            dead.append((message, backlog.TTL_EXPIRED,
                         f"its time-to-live ran out in the backlog before it reached '{path}'"))
            continue
        if groups and groups[-1][0] == path:
            groups[-1][1].append((message, restored))
        else:
            groups.append((path, [(message, restored)]))
    return SyphonPlan(pings, dead, groups)


def refusal(path: str, exc: BaseException) -> tuple[str, str] | None:
    """Reason and description to dead-letter a group the primary refused for good; None to retry later."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if is_entity_not_found(exc):  # refused at attach, or its put-token answered 404
        return backlog.TARGET_NOT_FOUND, f"the entity '{path}' does not exist in the primary namespace: {first}"
    if isinstance(exc, MessageSizeExceededError):
        return "MessageSizeExceeded", f"the entity '{path}' in the primary refused the message's size: {first}"
    return None
