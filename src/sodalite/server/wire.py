"""Service Bus messages on the wire, bound to the model's records: :mod:`sodalite.message` with the
model's ``MessageDraft`` as the draft a transfer becomes, and the edits that make one stored record
from another (dead-lettering, forwarding).

The knowledge of the sections themselves (what is decoded on receipt, what a delivery carries, how
a property is changed) is in :mod:`sodalite.message`; the names below are that package's, kept here
for the server's modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sodalite.message import received
from sodalite.message.delivery import (
    PYTHON_SDK_PRODUCT,
    decimal_properties_for_python_sdk,
    delivery_payload,
    lock_token_tag,
    python_sdk_decimal128,
    python_sdk_decimals,
    tag_lock_token,
)
from sodalite.message.edits import (
    application_properties,
    dead_letter_source_entry,
    dead_letter_tail,
    merged_annotation_entries,
    properties_position,
    replace_application_properties,
    with_application_properties,
    with_dead_letter_source,
)
from sodalite.message.names import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    JMS_DELIVERY_TIME,
    PARTITION_KEY,
    SCHEDULED_ENQUEUE_TIME,
    SERVICE_OWNED_ANNOTATIONS,
)
from sodalite.message.received import given_message_id, message_id_text
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft

__all__ = [
    "DEAD_LETTER_DESCRIPTION", "DEAD_LETTER_REASON", "DEAD_LETTER_SOURCE", "JMS_DELIVERY_TIME", "PARTITION_KEY",
    "PYTHON_SDK_PRODUCT", "SCHEDULED_ENQUEUE_TIME", "SERVICE_OWNED_ANNOTATIONS", "application_properties",
    "dead_letter_tail", "dead_lettered", "decimal_properties_for_python_sdk", "delivery_payload",
    "forwarded_draft", "lock_token_tag", "merged_annotation_entries", "merged_annotations", "message_id_text",
    "parse_message", "parse_transfer", "properties_position", "python_sdk_decimal128", "python_sdk_decimals",
    "received_messages", "replace_application_properties", "tag_lock_token", "with_application_properties",
    "with_dead_letter_source", "with_message_id",
]


def received_messages(payload: bytes, message_format: int, max_message_size: int) -> list[MessageDraft]:
    """What a client sent, as the drafts to store: each message of the transfer, given a MessageId."""
    return received.parse_transfer(payload, message_format, max_message_size, MessageDraft, True)


def parse_transfer(payload: bytes, message_format: int, max_message_size: int) -> list[MessageDraft]:
    """Drafts for every message in a transfer, as sent (no MessageId given)."""
    return received.parse_transfer(payload, message_format, max_message_size, MessageDraft)


def parse_message(payload: bytes, max_message_size: int) -> MessageDraft:
    """One message as a draft, as sent (DecodeError if it is not AMQP)."""
    return received.parse_message(payload, max_message_size, MessageDraft)


def with_message_id(draft: MessageDraft) -> MessageDraft:
    """The draft itself if it has a MessageId; else the draft given a fresh one."""
    if draft.message_id is not None:
        return draft
    message_id, tail = given_message_id(draft.tail)
    return replace(draft, message_id=message_id, tail=tail)


def dead_lettered(record: MessageRecord, reason: str | None, description: str | None) -> MessageRecord:
    """The record as it enters a dead-letter sub-queue: reason and description set, no expiry.

    Time-to-live is not observed in a dead-letter queue (Service Bus DLQ overview).
    """
    return replace(record, tail=dead_letter_tail(record.tail, reason, description), expires_at=None,
                   state=MessageState.ACTIVE)


def forwarded_draft(record: MessageRecord, dead_letter_source: str | None = None) -> MessageDraft:
    """A stored message as a draft for another entity, keeping every property (auto-forwarding)."""
    annotations, count = record.annotations, record.annotation_count
    if dead_letter_source is not None:
        annotations += dead_letter_source_entry(dead_letter_source)
        count += 1
    return MessageDraft(record.message_id, record.session_id, record.partition_key, record.time_to_live, None,
                        record.durable, record.priority, annotations, count, record.tail)


def merged_annotations(record: MessageRecord, updates: Mapping[str, object]) -> tuple[bytes, int]:
    """The record's annotation entries with ``updates`` merged in (keys as symbols), and their count.

    Service-owned annotations cannot be set this way, as on input.
    """
    return merged_annotation_entries(record.annotations, record.annotation_count, updates)
