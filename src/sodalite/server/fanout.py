"""A topic message's copies for a subscription, as messages: the plan is ``model/fanout.py``'s.

This module shows a message to the filters (:func:`message_view`, :func:`record_view`: only the
properties and application-properties sections are decoded, never the body) and writes what an
action changed into the copy (:func:`apply_view`, with the ``RuleName`` application property).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import cast

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, encode_value
from sodalite.amqp.types import AmqpValue, Described, Symbol, ULong
from sodalite.model.fanout import CompiledRule, plan, session_after
from sodalite.model.filters import MessageView
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.server import wire

__all__ = ["RULE_NAME", "CompiledRule", "Copy", "apply_view", "copies_for", "message_view", "record_view"]

RULE_NAME = "RuleName"

# System properties a filter may read, by their index in the AMQP properties list.
_PROPERTY_FIELDS = {
    "MessageId": 0, "To": 2, "Label": 3, "ReplyTo": 4, "CorrelationId": 5, "ContentType": 6, "SessionId": 10,
    "ReplyToSessionId": 12,
}


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy for a subscription; ``dead_letter`` holds (reason, description) when it goes to the DLQ."""

    draft: MessageDraft
    dead_letter: tuple[str, str] | None = None


def _view(message: MessageDraft | MessageRecord,
          delivery_count: int) -> tuple[dict[str, object], dict[str, AmqpValue]]:
    """The system properties a draft and a stored message share, and the application properties."""
    fields, user = amqp_message.properties_of(message.tail)
    system: dict[str, object] = {name: fields[i] for name, i in _PROPERTY_FIELDS.items()}
    ttl, scheduled = message.time_to_live, message.scheduled_enqueue_time
    system["MessageId"] = message.message_id
    system["PartitionKey"] = message.partition_key
    system["Size"] = message.size
    system["TimeToLive"] = None if ttl is None else timedelta(milliseconds=ttl)
    system["ScheduledEnqueueTimeUtc"] = None if scheduled is None else datetime.fromtimestamp(scheduled / 1000, UTC)
    system["DeliveryCount"] = delivery_count
    return system, user


def message_view(draft: MessageDraft) -> MessageView:
    """A message being sent as a filter sees it."""
    system, user = _view(draft, 0)
    return MessageView(system, user)


def record_view(record: MessageRecord) -> MessageView:
    """A stored message as a filter sees it (a JMS browser's selector reads it so)."""
    system, user = _view(record, record.delivery_count)
    system["EnqueuedTimeUtc"] = datetime.fromtimestamp(record.enqueued_time / 1000, UTC)
    system["SequenceNumber"] = record.sequence_number
    return MessageView(system, user)


def apply_view(draft: MessageDraft, before: MessageView, after: MessageView, rule_name: str) -> MessageDraft:
    """The draft with an action's changes: application properties, and settable system properties."""
    user = cast("dict[str, AmqpValue]", dict(after.user))  # the filter language's values are AMQP values
    user[RULE_NAME] = rule_name
    tail = wire.replace_application_properties(draft.tail, user)
    changed = {name: value for name, value in after.system.items()
               if name in _PROPERTY_FIELDS and before.system.get(name) != value}
    if changed:
        tail = _replace_properties(tail, changed)
    return replace(draft, tail=tail, session_id=session_after(before, after, draft.session_id))


def _replace_properties(tail: bytes, changed: dict[str, object]) -> bytes:
    sections = amqp_message.split_sections(tail)
    existing = next((s for s in sections if s.code == amqp_message.PROPERTIES), None)
    fields: list[object] = [None] * 13
    if existing is not None:
        value = decode(tail[existing.value_start : existing.end])
        if isinstance(value, list):
            fields = value + [None] * (13 - len(value))
    for name, value in changed.items():
        index = _PROPERTY_FIELDS[name]
        fields[index] = Symbol(value) if index == 6 and isinstance(value, str) else value
    out = bytearray()
    encode_value(Described(ULong(amqp_message.PROPERTIES), fields), out)
    if existing is not None:
        return tail[: existing.start] + bytes(out) + tail[existing.end :]
    at = wire.properties_position(tail)
    return tail[:at] + bytes(out) + tail[at:]


def copies_for(rules: list[CompiledRule], draft: MessageDraft, dead_letter_on_errors: bool,
               requires_session: bool) -> list[Copy]:
    """The copies one subscription gets of one message (none if no rule matches), as ``model.fanout``
    plans them."""
    view = message_view(draft)
    return [Copy(draft if c.after is None or c.rule is None else apply_view(draft, view, c.after, c.rule),
                 c.dead_letter) for c in plan(rules, view, draft.session_id, dead_letter_on_errors, requires_session)]
