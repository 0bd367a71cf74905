"""The sink's path for a row that is a stored message and nothing else (what replicate writes).

A row whose only non-null columns are ``amqpMessage`` and where it came from (``sequenceNumber``,
``partition``, ``entity``, ``sourceEntity``) is sent as its ``amqpMessage`` bytes, undecoded: the
sections are not walked into values and not encoded again, so the target stores the sender's bytes.
The one edit is the MessageId a message without one needs (exactly-once into a target with duplicate
detection depends on it): the derived ``<sourceEntity>:<partition>:<sequenceNumber>``, written into
the properties section (added when there is none), every other byte kept. Annotations the broker
owns (sequence number, enqueued time, ...) are not looked for: the target drops them on append.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode_value, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.spark import rows

#: The columns a verbatim row may have non-null besides ``amqpMessage``: where the message came from and goes.
PROVENANCE: Final = frozenset({"sequenceNumber", "partition", "entity", "sourceEntity"})
_LIST0, _LIST8, _LIST32, _NULL = 0x45, 0xC0, 0xD0, 0x40


def is_verbatim(row: dict[str, Any]) -> bool:
    """Whether the row is a stored message and where it came from, nothing that would change it."""
    if row.get("amqpMessage") is None:
        return False
    return all(value is None or name == "amqpMessage" or name in PROVENANCE for name, value in row.items())


def _sections(payload: bytes) -> list[tuple[int, int, int, int]]:
    """Each section as (code, start, value start, end), read from the descriptors without decoding values."""
    found = []
    pos, n = 0, len(payload)
    while pos < n:
        if payload[pos] == 0x00 and pos + 2 < n and payload[pos + 1] == 0x53:  # the usual small-ulong descriptor
            code, value_start = payload[pos + 2], pos + 3
            end = skip_value(payload, value_start)
            found.append((code, pos, value_start, end))
        else:  # another descriptor form: the general slicer
            return [(s.code, s.start, s.value_start, s.end) for s in amqp_message.split_sections(payload)]
        pos = end
    if pos != n:
        raise DecodeError("message section runs past the end")
    return found


def _has_message_id(payload: bytes, value_start: int) -> bool:
    code = payload[value_start]
    if code == _LIST0:
        return False
    if code == _LIST8:
        count, first = payload[value_start + 2], value_start + 3
    elif code == _LIST32:
        count, first = int.from_bytes(payload[value_start + 5 : value_start + 9], "big"), value_start + 9
    else:
        raise DecodeError("message properties is not a list")
    return count > 0 and payload[first] != _NULL


def verbatim_message(row: dict[str, Any], source: str) -> bytes:
    """The bytes to send for a verbatim row (:func:`is_verbatim`): ``amqpMessage`` as it is, or with the
    derived MessageId written in when it has none. ValueError when it is not an AMQP message."""
    original = row["amqpMessage"]
    payload = original if isinstance(original, bytes) else bytes(original)
    try:
        sections = _sections(payload)
        properties = next((s for s in sections if s[0] == amqp_message.PROPERTIES), None)
        if properties is not None and _has_message_id(payload, properties[2]):
            return payload
        message_id = rows.derived_message_id(source, row) or str(uuid.uuid4())
        if properties is None:  # after the header and the annotations, before everything else
            later = (start for code, start, _, _ in sections if code > amqp_message.MESSAGE_ANNOTATIONS)
            at = next(later, len(payload))
            return payload[:at] + amqp_message.encode_section(amqp_message.PROPERTIES, [message_id]) + payload[at:]
        _, start, value_start, end = properties
        fields, _ = decode_value(payload, value_start)
        if not isinstance(fields, list):
            raise DecodeError("message properties is not a list")
        fields = [message_id, *fields[1:]]
        return payload[:start] + amqp_message.encode_section(amqp_message.PROPERTIES, fields) + payload[end:]
    except (DecodeError, IndexError, ValueError, OverflowError) as exc:
        raise ValueError(f"'amqpMessage' is not an AMQP message: {exc}") from None
