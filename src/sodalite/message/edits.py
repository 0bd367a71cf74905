"""Changes to a stored message's parts, each re-encoding only the section it changes.

A stored message is its sender's annotation entries (encoded, with their count) and its tail (the
sender's delivery-annotations if any, then properties .. footer as sent). Dead-lettering sets the
``DeadLetterReason`` and ``DeadLetterErrorDescription`` application properties; forwarding out of a
dead-letter queue sets ``x-opt-deadletter-source``; a rule action or a settlement's annotation edits
merge into the annotations, never over the ones only the service sets.
"""

from __future__ import annotations

from collections.abc import Mapping

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, skip_value
from sodalite.amqp.types import AmqpValue, Symbol
from sodalite.message.names import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    SERVICE_OWNED_ANNOTATIONS,
)

DELIVERY_ANNOTATIONS_PREFIX = b"\x00\x53\x71"  # how the tail of a record with them begins


def properties_position(tail: bytes) -> int:
    """Where a properties section goes in a tail that has none: after the kept delivery-annotations."""
    if not tail.startswith(DELIVERY_ANNOTATIONS_PREFIX):
        return 0
    return skip_value(tail, 3)


def application_properties(tail: bytes) -> dict[str, AmqpValue]:
    """The tail's application-properties: a map with string keys (AMQP 1.0 part 3, 3.2.5), taken as
    decoded (symbol keys stay symbols, which are strings too)."""
    for s in amqp_message.split_sections(tail):
        if s.code == amqp_message.APPLICATION_PROPERTIES:
            value = amqp_message.section_value(tail, s)
            return dict(value) if isinstance(value, dict) else {}
    return {}


def replace_application_properties(tail: bytes, values: Mapping[str, AmqpValue]) -> bytes:
    """The tail with its application-properties set to ``values``; only that section is re-encoded.

    If the message has no application-properties section, one is placed where AMQP puts it: after
    the properties section, before the body.
    """
    sections = amqp_message.split_sections(tail)
    encoded = amqp_message.encode_section(amqp_message.APPLICATION_PROPERTIES, dict(values))
    existing = next((s for s in sections if s.code == amqp_message.APPLICATION_PROPERTIES), None)
    if existing is not None:
        return tail[: existing.start] + encoded + tail[existing.end :]
    after = next((s.end for s in sections if s.code == amqp_message.PROPERTIES), properties_position(tail))
    return tail[:after] + encoded + tail[after:]


def with_application_properties(tail: bytes, updates: Mapping[str, AmqpValue]) -> bytes:
    """The tail with ``updates`` merged into its application-properties."""
    return replace_application_properties(tail, {**application_properties(tail), **updates})


def dead_letter_tail(tail: bytes, reason: str | None, description: str | None) -> bytes:
    """The tail with ``DeadLetterReason`` and ``DeadLetterErrorDescription`` set as application
    properties (each only when given; the tail itself when neither is)."""
    updates: dict[str, AmqpValue] = {}
    if reason is not None:
        updates[DEAD_LETTER_REASON] = reason
    if description is not None:
        updates[DEAD_LETTER_DESCRIPTION] = description
    return with_application_properties(tail, updates) if updates else tail


def dead_letter_source_entry(source: str) -> bytes:
    """The encoded annotation entry ``x-opt-deadletter-source`` = ``source``."""
    return amqp_message.annotation_entry(DEAD_LETTER_SOURCE, source)


def with_dead_letter_source(entries: bytes, count: int, source: str) -> tuple[bytes, int]:
    """Encoded annotation ``entries`` with ``x-opt-deadletter-source`` set to ``source`` (replacing one
    an earlier forwarding wrote)."""
    if count and DEAD_LETTER_SOURCE.encode() in entries:
        current = decode(amqp_message.encode_annotations(entries, count)[3:])
        if isinstance(current, dict):
            kept = {k: v for k, v in current.items() if str(k) != DEAD_LETTER_SOURCE}
            entries, count = amqp_message.map_entries(kept), len(kept)
    return entries + dead_letter_source_entry(source), count + 1


def merged_annotation_entries(entries: bytes, count: int, updates: Mapping[str, object]) -> tuple[bytes, int]:
    """Encoded annotation ``entries`` (``count`` of them) with ``updates`` merged in (keys as symbols),
    and their count. Service-owned annotations cannot be set this way, as on input. The values are as
    the core's edits carry them (``object``: any value the AMQP encoder takes)."""
    # Decode the stored entries as the map they are (past the section's 00 53 72 descriptor).
    current = decode(amqp_message.encode_annotations(entries, count)[3:]) if count else {}
    merged = dict(current) if isinstance(current, dict) else {}
    for key, value in updates.items():
        if str(key) not in SERVICE_OWNED_ANNOTATIONS:
            merged[Symbol(str(key))] = value
    return amqp_message.map_entries(merged), len(merged)
