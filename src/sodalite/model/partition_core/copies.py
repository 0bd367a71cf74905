"""Copies of a message record with one field changed, on the paths every message takes.

``dataclasses.replace`` walks the record's fields and calls ``__init__`` with keywords: about twice
the cost of calling the constructor with the fields in order. The core makes such a copy for every
message it appends at the tail (its sequence number) and for every delivery (its delivery count), so
these two build the copy directly. Every field is passed, so a field added to ``MessageRecord`` is an
error here (mypy: the constructor's arity), never silently dropped.
"""

from __future__ import annotations

from sodalite.model.message import MessageRecord


def numbered(r: MessageRecord, sequence_number: int) -> MessageRecord:
    """``replace(r, sequence_number=sequence_number)``."""
    return MessageRecord(sequence_number, r.enqueued_time, r.message_id, r.session_id, r.partition_key,
                         r.time_to_live, r.expires_at, r.scheduled_enqueue_time, r.delivery_count, r.state,
                         r.durable, r.priority, r.annotations, r.annotation_count, r.tail)


def counted(r: MessageRecord, delivery_count: int) -> MessageRecord:
    """``replace(r, delivery_count=delivery_count)``."""
    return MessageRecord(r.sequence_number, r.enqueued_time, r.message_id, r.session_id, r.partition_key,
                         r.time_to_live, r.expires_at, r.scheduled_enqueue_time, delivery_count, r.state,
                         r.durable, r.priority, r.annotations, r.annotation_count, r.tail)
