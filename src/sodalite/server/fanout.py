"""Which copies of a topic message each subscription gets (Service Bus "topic filters and actions").

Rules without an action are OR'ed: if any matches, the subscription gets the message once. Each
matching rule with an action gets its own copy, changed by the action and carrying a ``RuleName``
application property. A rule whose filter or action fails to evaluate sends the copy to the
subscription's dead-letter queue when DeadLetteringOnFilterEvaluationExceptions is set, and drops
it otherwise; the send itself never fails for it. A session-enabled subscription dead-letters a
copy without a SessionId, as the service does.

Filters see the message through :class:`~sodalite.model.filters.MessageView`; only the properties
and application-properties sections are decoded for it, never the body.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, encode_value
from sodalite.amqp.types import AmqpValue, Described, Symbol, ULong
from sodalite.errors import FilterEvaluationError
from sodalite.model.entities import RuleDescription
from sodalite.model.filters import CompiledAction, CompiledFilter, MessageView, compile_action, compile_filter
from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.server import wire

RULE_NAME = "RuleName"
SESSION_ID_IS_NULL = "Session ID is null."
FILTER_EVALUATION_FAILED = "FilterEvaluationException"

# System properties a filter may read, by their index in the AMQP properties list.
_PROPERTY_FIELDS = {
    "MessageId": 0, "To": 2, "Label": 3, "ReplyTo": 4, "CorrelationId": 5, "ContentType": 6, "SessionId": 10,
    "ReplyToSessionId": 12,
}


@dataclass(frozen=True, slots=True)
class CompiledRule:
    name: str
    filter: CompiledFilter
    action: CompiledAction | None
    description: RuleDescription

    @classmethod
    def compile(cls, rule: RuleDescription) -> CompiledRule:
        return cls(rule.name, compile_filter(rule.filter), compile_action(rule.action), rule)


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy for a subscription; ``dead_letter`` holds (reason, description) when it goes to the DLQ."""

    draft: MessageDraft
    dead_letter: tuple[str, str] | None = None


def _sections(tail: bytes) -> tuple[list[Any], dict[str, Any]]:
    fields: list[Any] = []
    user: dict[str, Any] = {}
    for s in amqp_message.split_sections(tail):
        if s.code == amqp_message.PROPERTIES:
            value = amqp_message.section_value(tail, s)
            fields = list(value) if isinstance(value, list) else []
        elif s.code == amqp_message.APPLICATION_PROPERTIES:
            value = amqp_message.section_value(tail, s)
            if isinstance(value, dict):
                user = {str(k): v for k, v in value.items()}
    return fields + [None] * (13 - len(fields)), user


def message_view(draft: MessageDraft) -> MessageView:
    fields, user = _sections(draft.tail)
    system: dict[str, Any] = {name: fields[i] for name, i in _PROPERTY_FIELDS.items()}
    system["MessageId"] = draft.message_id
    system["PartitionKey"] = draft.partition_key
    system["Size"] = draft.size
    system["TimeToLive"] = None if draft.time_to_live is None else timedelta(milliseconds=draft.time_to_live)
    system["ScheduledEnqueueTimeUtc"] = (None if draft.scheduled_enqueue_time is None else
                                         datetime.fromtimestamp(draft.scheduled_enqueue_time / 1000, UTC))
    system["DeliveryCount"] = 0
    return MessageView(system, user)


def record_view(record: MessageRecord) -> MessageView:
    """A stored message as a filter sees it (a JMS browser's selector reads it so)."""
    fields, user = _sections(record.tail)
    system: dict[str, Any] = {name: fields[i] for name, i in _PROPERTY_FIELDS.items()}
    system["MessageId"] = record.message_id
    system["PartitionKey"] = record.partition_key
    system["Size"] = record.size
    system["TimeToLive"] = None if record.time_to_live is None else timedelta(milliseconds=record.time_to_live)
    system["ScheduledEnqueueTimeUtc"] = (None if record.scheduled_enqueue_time is None else
                                         datetime.fromtimestamp(record.scheduled_enqueue_time / 1000, UTC))
    system["EnqueuedTimeUtc"] = datetime.fromtimestamp(record.enqueued_time / 1000, UTC)
    system["SequenceNumber"] = record.sequence_number
    system["DeliveryCount"] = record.delivery_count
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
    session = after.system.get("SessionId") if "SessionId" in changed else draft.session_id
    return replace(draft, tail=tail, session_id=session if isinstance(session, str) else None)


def _replace_properties(tail: bytes, changed: dict[str, Any]) -> bytes:
    sections = amqp_message.split_sections(tail)
    existing = next((s for s in sections if s.code == amqp_message.PROPERTIES), None)
    fields: list[Any] = [None] * 13
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
    """The copies one subscription gets of one message (none if no rule matches)."""
    view = message_view(draft)
    plain_match = False
    copies: list[Copy] = []
    for rule in rules:
        try:
            if not rule.filter.matches(view):
                continue
            if rule.action is None:
                plain_match = True
                continue
            copies.append(Copy(apply_view(draft, view, rule.action.apply(view), rule.name)))
        except FilterEvaluationError as exc:
            if dead_letter_on_errors:
                copies.append(Copy(draft, (FILTER_EVALUATION_FAILED, f"rule '{rule.name}': {exc.description}")))
    if plain_match:
        copies.insert(0, Copy(draft))
    if requires_session:
        copies = [c if c.draft.session_id is not None or c.dead_letter else
                  Copy(c.draft, (SESSION_ID_IS_NULL, "the subscription requires sessions")) for c in copies]
    return copies


