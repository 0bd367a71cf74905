"""Frames (AMQP 1.0 part 2, section 2.3) and the hot-path performative encoders.

A frame is an 8-byte header (size, data offset in 4-byte words, type, channel), an optional
extended header, and a body. An empty body is a heartbeat. :class:`FrameReader` cuts a byte stream
into frames and enforces the negotiated max-frame-size before buffering a frame, so a peer cannot
make the broker hold more than one frame's worth of bytes.

``encode_transfer``, ``encode_disposition`` and ``encode_flow`` write their frames directly with
``struct``: they run once per message and a generic schema walk costs several times more. They
emit full field lists (sdk-wire-contract.md pitfall 14) and small-ulong descriptors (pitfall 1).
"""

from __future__ import annotations

import struct

from sodalite.amqp.errors import FrameSizeError, FramingError
from sodalite.amqp.performatives import Composite, encode_delivery_state

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
TLS_HEADER = b"AMQP\x02\x01\x00\x00"

FRAME_AMQP = 0
FRAME_SASL = 1

MIN_MAX_FRAME_SIZE = 512  # AMQP 1.0 2.7.1: the smallest max-frame-size a peer may advertise

_header = struct.Struct(">IBBH")
_u32 = struct.Struct(">I")
HEARTBEAT = b"\x00\x00\x00\x08\x02\x00\x00\x00"


def frame(frame_type: int, channel: int, body: bytes | bytearray) -> bytes:
    """A frame with the standard 2-word data offset."""
    return _header.pack(8 + len(body), 2, frame_type, channel) + body


class FrameReader:
    """Cuts a byte stream into ``(type, channel, body)`` frames."""

    __slots__ = ("_buf", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self._buf = b""
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes) -> None:
        self._buf = self._buf + data if self._buf else data

    def take(self, n: int) -> bytes | None:
        """Take exactly ``n`` raw bytes (a protocol header), or None if not yet buffered."""
        if len(self._buf) < n:
            return None
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def pending(self) -> int:
        return len(self._buf)

    def next_frame(self) -> tuple[int, int, bytes] | None:
        buf = self._buf
        if len(buf) < 8:
            return None
        size, doff, ftype, channel = _header.unpack_from(buf, 0)
        if size > self.max_frame_size:
            raise FrameSizeError(f"frame of {size} bytes exceeds max-frame-size {self.max_frame_size}")
        if size < 8 or doff < 2 or doff * 4 > size:
            raise FramingError(f"malformed frame header (size {size}, doff {doff})")
        if len(buf) < size:
            return None
        body = buf[doff * 4 : size]
        self._buf = buf[size:]
        return ftype, channel, body


# ---- hot-path encoders ---------------------------------------------------------------------------


def _uint(value: int, out: bytearray) -> None:
    if value == 0:
        out.append(0x43)
    elif value <= 0xFF:
        out.append(0x52)
        out.append(value)
    else:
        out.append(0x70)
        out += _u32.pack(value)


def _list_frame(channel: int, code: int, fields: bytearray, count: int, payload: bytes = b"") -> bytes:
    n = len(fields)
    if n + 1 <= 0xFF:
        head = bytes((0x00, 0x53, code, 0xC0, n + 1, count))
    else:
        head = bytes((0x00, 0x53, code, 0xD0)) + _u32.pack(n + 4) + _u32.pack(count)
    size = 8 + len(head) + n + len(payload)
    return _header.pack(size, 2, FRAME_AMQP, channel) + head + fields + payload


def transfer_fields(handle: int, delivery_id: int, tag: bytes, message_format: int, settled: bool,
                    more: bool) -> bytearray:
    f = bytearray()
    _uint(handle, f)
    _uint(delivery_id, f)
    n = len(tag)
    if n <= 0xFF:
        f.append(0xA0)
        f.append(n)
    else:
        f.append(0xB0)
        f += _u32.pack(n)
    f += tag
    _uint(message_format, f)
    f.append(0x41 if settled else 0x42)
    f.append(0x41 if more else 0x42)
    f += b"\x40\x40\x40\x40\x40"  # rcv-settle-mode, state, resume, aborted, batchable
    return f


def transfer_overhead(handle: int, delivery_id: int, tag: bytes, message_format: int) -> int:
    """Bytes a transfer frame spends before its payload."""
    n = len(transfer_fields(handle, delivery_id, tag, message_format, False, True))
    return 8 + (6 if n + 1 <= 0xFF else 12) + n


def encode_transfer(channel: int, handle: int, delivery_id: int, tag: bytes, message_format: int,
                    settled: bool, more: bool, payload: bytes) -> bytes:
    fields = transfer_fields(handle, delivery_id, tag, message_format, settled, more)
    return _list_frame(channel, 0x14, fields, 11, payload)


def encode_disposition(channel: int, role: bool, first: int, last: int | None, settled: bool,
                       state: Composite | None) -> bytes:
    f = bytearray()
    f.append(0x41 if role else 0x42)
    _uint(first, f)
    if last is None:
        f.append(0x40)
    else:
        _uint(last, f)
    f.append(0x41 if settled else 0x42)
    encode_delivery_state(state, f)
    f.append(0x40)  # batchable
    return _list_frame(channel, 0x15, f, 6)


def encode_flow(channel: int, next_incoming_id: int | None, incoming_window: int, next_outgoing_id: int,
                outgoing_window: int, handle: int | None = None, delivery_count: int | None = None,
                link_credit: int | None = None, available: int | None = None, drain: bool = False,
                echo: bool = False) -> bytes:
    f = bytearray()
    for v in (next_incoming_id, incoming_window, next_outgoing_id, outgoing_window, handle, delivery_count,
              link_credit, available):
        if v is None:
            f.append(0x40)
        else:
            _uint(v, f)
    f.append(0x41 if drain else 0x42)
    f.append(0x41 if echo else 0x42)
    f.append(0x40)  # properties
    return _list_frame(channel, 0x13, f, 11)
