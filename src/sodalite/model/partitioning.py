"""Which partition of a partitioned entity a message, a sequence number or a session belongs to.

A message goes where its partition key says: its SessionId, else its PartitionKey (the two must
agree), else its MessageId when duplicate detection is on; keyless messages are the caller's to
spread. A key picks its partition by CRC-32, stable across restarts and processes. A sequence
number names its partition in its upper 16 bits (the store numbers partition i after ``i << 48``)."""

from __future__ import annotations

import zlib
from typing import Final

from sodalite.errors import InvalidOperation
from sodalite.model.partition import MessageDraft

PARTITION_SHIFT: Final = 48  # a sequence number's upper 16 bits name its partition (store/port.py numbers so)


def partition_index(key: str, count: int) -> int:
    """The partition a key pins a message to; stable across restarts and processes."""
    return zlib.crc32(key.encode("utf-8")) % count


def partition_of_sequence_number(sequence_number: int) -> int:
    return sequence_number >> PARTITION_SHIFT


def first_sequence_number(partition: int) -> int:
    """The number partition ``partition``'s numbers count up from (its first message gets this + 1)."""
    return partition << PARTITION_SHIFT


def partition_key(draft: MessageDraft, duplicate_detection: bool) -> str | None:
    """The seed's partition key: SessionId, else PartitionKey, else MessageId under duplicate detection.

    Raises InvalidOperation when SessionId and PartitionKey are both set and differ.
    """
    if draft.session_id is not None:
        if draft.partition_key is not None and draft.partition_key != draft.session_id:
            raise InvalidOperation(
                f"the PartitionKey '{draft.partition_key}' differs from the SessionId '{draft.session_id}'")
        return draft.session_id
    if draft.partition_key is not None:
        return draft.partition_key
    if duplicate_detection and draft.message_id is not None:
        return str(draft.message_id)
    return None
