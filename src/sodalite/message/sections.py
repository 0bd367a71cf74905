"""One walk over an encoded AMQP message's sections, and a message built from its parts.

:func:`walk` decodes the header, the message annotations, the properties and (when asked) the
application properties once, and keeps everything else as the encoded bytes it was: the sections
after the annotations (properties, application properties, body, footer) as one slice, each body
section's slice, and each annotation that is not the broker's as its encoded map entry. Whoever
rebuilds a message (the reader's ``amqpMessage``, the sink, the syphon) then copies bytes instead of
re-encoding values, and a reader that needs no application properties never decodes them.
"""

from __future__ import annotations

import struct
from typing import Final, SupportsInt, cast

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode_value, encode_value, skip_value
from sodalite.amqp.errors import DecodeError
from sodalite.amqp.types import AmqpMap, AmqpValue, Described, UInt, ULong
from sodalite.message.names import PROPERTY_FIELDS
from sodalite.message.names import SERVICE_OWNED_ANNOTATIONS as SERVICE_OWNED

_u32u32 = struct.Struct(">II")
_i64 = struct.Struct(">q")
_i8 = struct.Struct(">b")
_BODY_CODES: Final = (amqp_message.DATA, amqp_message.AMQP_VALUE, amqp_message.AMQP_SEQUENCE)


class Walked:
    """A message's sections: the decoded ones and the encoded slices the others were."""

    __slots__ = ("annotations", "application", "bodies", "client_annotations", "client_count", "client_entries",
                 "footer", "header", "kept", "payload", "properties")

    def __init__(self, payload: bytes) -> None:
        self.payload = payload
        self.header: list[AmqpValue] = [None, None, None, None, None]  # durable .. delivery-count
        self.annotations: dict[str, AmqpValue] = {}  # every message annotation, keys as text
        self.client_annotations: AmqpMap = {}  # those not set by the broker, keys as decoded
        self.client_entries = b""  # the same, as their encoded map entries
        self.client_count = 0
        self.properties: list[AmqpValue] = [None] * PROPERTY_FIELDS
        self.application: AmqpMap = {}  # keys as decoded; empty unless asked for
        self.kept = b""  # every section after the annotations except delivery annotations, as encoded
        self.bodies: list[amqp_message.Section] = []
        self.footer = b""

    def original(self) -> bytes:
        """The message as its sender encoded it: header without the delivery count, the client's
        annotations, and every later section byte for byte."""
        out = bytearray()
        h = self.header
        if h[0] is not None or h[1] is not None or h[2] is not None:
            ttl = None if h[2] is None else UInt(h[2])  # type: ignore[arg-type]
            out += amqp_message.encode_section(amqp_message.HEADER, [h[0], h[1], ttl])
        if self.client_count:
            out += amqp_message.encode_annotations(self.client_entries, self.client_count)
        out += self.kept
        return bytes(out)

    def body_bytes(self) -> list[bytes]:
        payload = self.payload
        return [payload[s.start : s.end] for s in self.bodies]


def _annotations(payload: bytes, start: int, walked: Walked) -> int:
    code = payload[start]
    if code == 0xC1:
        count, pos, end = payload[start + 2], start + 3, start + 2 + payload[start + 1]
    elif code == 0xD1:
        size, count = _u32u32.unpack_from(payload, start + 1)
        pos, end = start + 9, start + 5 + size
    elif code == 0x40:
        return start + 1
    else:
        raise DecodeError("message annotations are not a map")
    annotations = walked.annotations
    client = walked.client_annotations
    entries: list[bytes] = []
    for _ in range(count // 2):
        if payload[pos] == 0xA3:  # the usual sym8 key; the broker's own values are plain numbers
            middle = pos + 2 + payload[pos + 1]
            text = payload[pos + 2 : middle].decode("ascii")
            if text in SERVICE_OWNED:
                code = payload[middle]
                if code == 0x81 or code == 0x83:
                    annotations[text] = _i64.unpack_from(payload, middle + 1)[0]
                    pos = middle + 9
                    continue
                if code == 0x54 or code == 0x55:
                    annotations[text] = _i8.unpack_from(payload, middle + 1)[0]
                    pos = middle + 2
                    continue
        key, middle = decode_value(payload, pos)
        value, after = decode_value(payload, middle)
        text = key if isinstance(key, str) else str(key)
        annotations[text] = value
        if text not in SERVICE_OWNED:
            client[key] = value
            entries.append(payload[pos:after])
        pos = after
    if pos != end:
        raise DecodeError("message annotations' size does not match their entries")
    if entries:
        walked.client_entries = b"".join(entries)
        walked.client_count = len(entries)
    return end


def walk(payload: bytes, application: bool = True) -> Walked:
    """Walk ``payload`` (a message as sent, or as peek returns it) in one pass, decoding each section it
    needs once; DecodeError if it is not a message."""
    walked = Walked(payload)
    kept_from: int | None = None
    kept_parts: list[bytes] = []
    slow: dict[int, amqp_message.Section] | None = None
    pos, n = 0, len(payload)
    try:
        while pos < n:
            if payload[pos] == 0x00 and payload[pos + 1] == 0x53:  # the usual small-ulong descriptor
                code, value_start = payload[pos + 2], pos + 3
            else:  # a symbolic or long descriptor: let the general slicer name the section
                if slow is None:
                    slow = {s.start: s for s in amqp_message.split_sections(payload)}
                code, value_start = slow[pos].code, slow[pos].value_start
            if code <= amqp_message.MESSAGE_ANNOTATIONS and kept_from is not None:  # out of the usual order
                kept_parts.append(payload[kept_from:pos])
                kept_from = None
            if code == amqp_message.HEADER:
                value, end = decode_value(payload, value_start)
                if isinstance(value, list):
                    walked.header = (value + [None] * 5)[:5]
            elif code == amqp_message.MESSAGE_ANNOTATIONS:
                end = _annotations(payload, value_start, walked)
            elif code == amqp_message.DELIVERY_ANNOTATIONS:
                end = skip_value(payload, value_start)
            else:
                if kept_from is None:
                    kept_from = pos
                if code == amqp_message.PROPERTIES:
                    value, end = decode_value(payload, value_start)
                    if isinstance(value, list):
                        walked.properties = (value + [None] * PROPERTY_FIELDS)[:PROPERTY_FIELDS]
                elif code == amqp_message.APPLICATION_PROPERTIES and application:
                    value, end = decode_value(payload, value_start)
                    if isinstance(value, dict):
                        walked.application = value
                elif code in _BODY_CODES:
                    end = skip_value(payload, value_start)
                    walked.bodies.append(amqp_message.Section(code, pos, value_start, end))
                elif code == amqp_message.FOOTER:
                    end = skip_value(payload, value_start)
                    walked.footer += payload[pos:end]
                elif code == amqp_message.APPLICATION_PROPERTIES:
                    end = skip_value(payload, value_start)
                else:
                    raise DecodeError("unknown message section")
            if end > n:
                raise DecodeError("message section runs past the end")
            pos = end
    except (IndexError, KeyError, struct.error, ValueError, OverflowError, RecursionError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed message: {exc}") from None
    if kept_from is not None:
        kept_parts.append(payload[kept_from:])
    walked.kept = b"".join(kept_parts)
    return walked


def assemble(header: list[AmqpValue], annotations: AmqpMap, properties: list[AmqpValue], application: AmqpMap,
             tail: bytes) -> bytes:
    """A message from its parts: header (durable, priority, ttl), message annotations, properties
    (trailing nulls dropped), application properties, then ``tail`` (body and footer, encoded)."""
    out = bytearray()
    if any(v is not None for v in header):
        out += amqp_message.encode_section(amqp_message.HEADER, header)
    if annotations:
        out += amqp_message.encode_annotations(amqp_message.map_entries(annotations), len(annotations))
    end = len(properties)
    while end and properties[end - 1] is None:
        end -= 1
    encode_value(Described(ULong(amqp_message.PROPERTIES), properties[:end]), out)
    if application:
        encode_value(Described(ULong(amqp_message.APPLICATION_PROPERTIES), application), out)
    out += tail
    return bytes(out)


def number(value: AmqpValue) -> int | None:
    """A decoded annotation or header field as an integer, as ``int()`` reads it; None when absent."""
    return None if value is None else int(cast(SupportsInt, value))
