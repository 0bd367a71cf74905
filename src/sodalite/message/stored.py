"""A stored message's parts walked for what is asked of them: the columnar pages' reader.

A store keeps a message as fields (sequence number, times, counts, the ids the broker rendered at
append), the sender's annotation entries (encoded, with their count) and the tail (the sender's
delivery-annotations if any, then properties .. footer as sent). :class:`StoredTail` walks the tail
only as far as asked (the properties list, the application properties, the body sections);
:class:`StoredAnnotations` decodes the annotation entries only when a value is asked for or a
service-owned one must be dropped; :func:`original_header` is the header the sender wrote. Each
reads the bytes as the row path (:mod:`.sections`) reads a peeked message, so both give the same
columns.
"""

from __future__ import annotations

import functools
import struct
from typing import Final

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode_value, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import AmqpMap, AmqpValue, UInt
from sodalite.message.edits import DELIVERY_ANNOTATIONS_PREFIX
from sodalite.message.names import PROPERTY_FIELDS, SERVICE_OWNED_ANNOTATIONS

_OWNED_KEYS: Final = tuple(key.encode() for key in SERVICE_OWNED_ANNOTATIONS)  # as they appear in encoded entries
_BODIES: Final = (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE)
_u32u32: Final = struct.Struct(">II")


@functools.lru_cache(maxsize=256)
def original_header(durable: bool | None, priority: int | None, ttl: int | None) -> bytes:
    """The header ``amqpMessage`` carries, as the row path re-encodes it from the peeked header:
    durable, priority and ttl (no delivery count), or nothing when all three are absent."""
    if durable is None and priority is None and ttl is None:
        return b""
    value, _ = decode_value(amqp_message.encode_header(durable, priority, ttl, None, 0), 3)
    h = (list(value) + [None] * 3)[:3]
    if h[0] is None and h[1] is None and h[2] is None:
        return b""
    return amqp_message.encode_section(amqp_message.HEADER, [h[0], h[1], None if h[2] is None else UInt(h[2])])


class StoredAnnotations:
    """A record's client annotations: the entries not set by the broker (for ``amqpMessage``) and, when
    asked for, their values by key text."""

    __slots__ = ("count", "entries", "values")

    def __init__(self, entries: bytes, count: int, values: bool) -> None:
        self.values: dict[str, AmqpValue] = {}
        self.entries = entries
        self.count = count
        if not count or not (values or any(key in entries for key in _OWNED_KEYS)):
            return
        pos, kept, dropped = 0, [], False
        for _ in range(count):
            key, middle = decode_value(entries, pos)
            value, after = decode_value(entries, middle)
            text = key if isinstance(key, str) else str(key)
            self.values[text] = value
            if text in SERVICE_OWNED_ANNOTATIONS:
                dropped = True
            else:
                kept.append(entries[pos:after])
            pos = after
        if dropped:
            self.entries, self.count = b"".join(kept), len(kept)

    def section(self) -> bytes:
        """The kept entries as a message-annotations section (nothing when there are none)."""
        return amqp_message.encode_annotations(self.entries, self.count)


class StoredTail:
    """A record's tail (properties .. footer), walked for what the columns need; ``kept`` is the tail
    without the sender's delivery annotations (which are not part of the message)."""

    __slots__ = ("application", "bodies", "kept", "properties")

    def __init__(self, tail: bytes, properties: bool, application: bool, body: bool) -> None:
        if tail.startswith(DELIVERY_ANNOTATIONS_PREFIX):
            tail = tail[skip_value(tail, 3):]
        self.kept = tail
        self.properties: list[AmqpValue] = [None] * PROPERTY_FIELDS
        self.application: AmqpMap = {}
        self.bodies: list[amqp_message.Section] = []
        if not (properties or application or body):
            return
        pos, n = 0, len(tail)
        while pos < n:
            if tail[pos] == 0x00 and tail[pos + 1] == 0x53:
                code, value_start = tail[pos + 2], pos + 3
            else:  # a symbolic or long descriptor: the general slicer names every section
                self._slow(tail, properties, application)
                return
            if code == amqp_message.PROPERTIES and properties:
                self.properties, end = read_properties(tail, value_start)
            elif code == amqp_message.APPLICATION_PROPERTIES and application:
                value, end = decode_value(tail, value_start)
                if isinstance(value, dict):
                    self.application = value
            else:
                end = skip_value(tail, value_start)
                if code in _BODIES:
                    self.bodies.append(amqp_message.Section(code, pos, value_start, end))
            pos = end

    def _slow(self, tail: bytes, properties: bool, application: bool) -> None:
        self.bodies = []
        for s in amqp_message.split_sections(tail):
            if s.code == amqp_message.PROPERTIES and properties:
                value = amqp_message.section_value(tail, s)
                if isinstance(value, list):
                    self.properties = (value + [None] * PROPERTY_FIELDS)[:PROPERTY_FIELDS]
            elif s.code == amqp_message.APPLICATION_PROPERTIES and application:
                value = amqp_message.section_value(tail, s)
                if isinstance(value, dict):
                    self.application = value
            elif s.code in _BODIES:
                self.bodies.append(s)


def read_properties(tail: bytes, pos: int) -> tuple[list[AmqpValue], int]:
    """The properties list (13 fields, padded) and where it ends: nulls and short strings and symbols
    (nearly every field a client sets) read here, anything else by the codec, as the row path reads it."""
    code = tail[pos]
    if code == 0xC0:
        size, count, at = tail[pos + 1], tail[pos + 2], pos + 3
        end = pos + 2 + size
    elif code == 0xD0:
        size, count = _u32u32.unpack_from(tail, pos + 1)
        at, end = pos + 9, pos + 5 + size
    else:
        value, end = decode_value(tail, pos)
        fields = (value + [None] * PROPERTY_FIELDS)[:PROPERTY_FIELDS] if isinstance(value, list) \
            else [None] * PROPERTY_FIELDS
        return fields, end
    fields = [None] * max(PROPERTY_FIELDS, count)
    for index in range(count):
        kind = tail[at]
        if kind == 0x40:
            at += 1
        elif kind == 0xA1 or kind == 0xA3:
            length = tail[at + 1]
            fields[index] = tail[at + 2 : at + 2 + length].decode("utf-8" if kind == 0xA1 else "ascii")
            at += 2 + length
        else:
            fields[index], at = decode_value(tail, at)
    if at != end:
        raise DecodeError("the properties list's size does not match its fields")
    return fields[:PROPERTY_FIELDS], end
