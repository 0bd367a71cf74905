"""Bare and annotated messages as section slices (AMQP 1.0 part 3, section 3.2).

A message is a sequence of described sections. :func:`split_sections` finds each section's
descriptor code and byte range without decoding its value, so a broker can decode the few
sections it needs (header, annotations, properties) and carry the rest, the body above all,
verbatim. Sections are accepted in any order: the Python SDK writes delivery-annotations after
the body (sdk-wire-contract.md pitfall 10).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from sodalite.amqp.codec import decode, decode_value, encode_value, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import AmqpMap, AmqpValue, Symbol, ULong

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

BATCH_MESSAGE_FORMAT = 0x80013700  # the Service Bus batch: one data section per inner message

_SYMBOLIC_SECTIONS = {
    "amqp:header:list": HEADER, "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS, "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES, "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE, "amqp:amqp-value:*": AMQP_VALUE, "amqp:footer:map": FOOTER,
}


@dataclass(frozen=True, slots=True)
class Section:
    code: int
    start: int  # first byte of the section (its 0x00 descriptor constructor)
    value_start: int  # first byte of the section's value
    end: int


def split_sections(payload: bytes) -> list[Section]:
    """Slice an encoded message into its sections; raise DecodeError if it is not one."""
    sections: list[Section] = []
    pos = 0
    n = len(payload)
    try:
        while pos < n:
            if payload[pos] != 0x00:
                raise DecodeError("message section is not a described value")
            if payload[pos + 1] == 0x53 and pos + 2 < n:  # the common small-ulong descriptor
                code, value_start = payload[pos + 2], pos + 3
            else:
                descriptor, value_start = decode_value(payload, pos + 1)
                if isinstance(descriptor, str):
                    code = _SYMBOLIC_SECTIONS.get(descriptor, -1)
                elif isinstance(descriptor, ULong):
                    code = int(descriptor)
                else:
                    code = -1
            if not HEADER <= code <= FOOTER:
                raise DecodeError("unknown message section")
            end = skip_value(payload, value_start)
            sections.append(Section(code, pos, value_start, end))
            pos = end
    except IndexError:
        raise DecodeError("message section runs past the end") from None
    return sections


def section_value(payload: bytes, section: Section) -> Any:
    """Decode one section's value."""
    return decode(payload[section.value_start : section.end])


def properties_of(payload: bytes) -> tuple[list[AmqpValue], dict[str, AmqpValue]]:
    """The properties list, padded with None to its 13 fields (AMQP 1.0 part 3, 3.2.4), and the
    application properties with their keys as strings; each empty where its section is absent or
    not of its type."""
    fields: list[AmqpValue] = []
    user: dict[str, AmqpValue] = {}
    for section in split_sections(payload):
        if section.code == PROPERTIES:
            value = section_value(payload, section)
            fields = list(value) if isinstance(value, list) else []
        elif section.code == APPLICATION_PROPERTIES:
            value = section_value(payload, section)
            user = {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}
    return fields + [None] * (13 - len(fields)), user


def binary_value(payload: bytes, section: Section) -> bytes:
    """The bytes of a data section (vbin8 or vbin32) without copying through the generic decoder."""
    code = payload[section.value_start]
    if code == 0xA0:
        return payload[section.value_start + 2 : section.end]
    if code == 0xB0:
        return payload[section.value_start + 5 : section.end]
    raise DecodeError("data section does not hold binary")


# ---- building messages on delivery ------------------------------------------------------------

_u32 = struct.Struct(">I")
_u32u32 = struct.Struct(">II")
_i64 = struct.Struct(">q")


def encode_header(durable: bool | None, priority: int | None, ttl: int | None, first_acquirer: bool | None,
                  delivery_count: int) -> bytes:
    """A header section with every field written (delivery-count is always present)."""
    out = bytearray(b"\x00\x53\x70")
    body = bytearray()
    body.append(0x40 if durable is None else (0x41 if durable else 0x42))
    if priority is None:
        body.append(0x40)
    else:
        body += bytes((0x50, priority & 0xFF))
    if ttl is None:
        body.append(0x40)
    else:
        body.append(0x70)
        body += _u32.pack(min(ttl, 0xFFFFFFFF))  # header.ttl is a uint: longer ones are shown at its maximum
    body.append(0x40 if first_acquirer is None else (0x41 if first_acquirer else 0x42))
    body.append(0x70)
    body += _u32.pack(delivery_count)
    out.append(0xC0)
    out.append(len(body) + 1)
    out.append(5)
    out += body
    return bytes(out)


def annotation_entry_long(key: bytes, value: int) -> bytes:
    """One ``symbol -> long`` map entry; ``key`` is the symbol's ASCII bytes (< 256)."""
    return b"\xa3" + bytes((len(key),)) + key + b"\x81" + _i64.pack(value)


def annotation_entry_timestamp(key: bytes, value: int) -> bytes:
    return b"\xa3" + bytes((len(key),)) + key + b"\x83" + _i64.pack(value)


def annotation_entry(key: str, value: object) -> bytes:
    out = bytearray()
    encode_value(Symbol(key), out)
    encode_value(value, out)
    return bytes(out)


def encode_annotations(entries: bytes, count: int) -> bytes:
    """A message-annotations section around already-encoded map entries (``count`` keys)."""
    if not count:
        return b""
    if len(entries) + 1 <= 0xFF and 2 * count <= 0xFF:
        return b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, 2 * count)) + entries
    return b"\x00\x53\x72\xd1" + _u32u32.pack(len(entries) + 4, 2 * count) + entries


def encode_section(code: int, value: object) -> bytes:
    """One section: the small-ulong descriptor ``code`` and its encoded value."""
    out = bytearray(b"\x00\x53")
    out.append(code)
    encode_value(value, out)
    return bytes(out)


def map_entries(value: AmqpMap) -> bytes:
    """Encode a map's entries (no constructor, size or count) for :func:`encode_annotations`."""
    out = bytearray()
    for k, v in value.items():
        encode_value(k, out)
        encode_value(v, out)
    return bytes(out)
