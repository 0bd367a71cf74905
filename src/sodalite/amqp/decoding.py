"""Decoder for the AMQP 1.0 type system (AMQP 1.0 part 1, section 1.6).

Table-driven: one body decoder per constructor byte. Rules:

- every decoder checks its bounds explicitly (slicing past the end of ``bytes`` would silently
  truncate);
- every count is checked against the bytes that could hold it, and nesting stops at
  :data:`MAX_NESTING`, so hostile input cannot make the decoder loop or allocate without limit;
- any malformed input raises :class:`DecodeError`, nothing else;
- a decoded value keeps its AMQP type (a ``uint`` comes back as :class:`UInt`), so it re-encodes
  to exactly the bytes it came from.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from sodalite.amqp.errors import DecodeError
from sodalite.amqp.packing import F32, F64, I8, I16, I32, I64, U8, U8U8, U16, U32, U32U32, U64
from sodalite.amqp.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

MAX_NESTING = 64  # deeper structures are refused: no peer has a reason to send them


# A body decoder reads the value after its constructor byte: (buffer, offset, depth) -> (value, end).
BodyDecoder = Callable[[bytes, int, int], tuple[object, int]]


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise DecodeError("value runs past the end of the buffer")


def _null(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    return None, pos


def _true(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    return True, pos


def _false(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    return False, pos


def _boolean(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    _need(buf, pos + 1)
    b = buf[pos]
    if b > 1:
        raise DecodeError(f"invalid boolean byte {b:#x}")
    return b == 1, pos + 1


def _fixed(st: struct.Struct, wrap: Callable[[int], object]) -> BodyDecoder:
    size = st.size
    unpack = st.unpack_from

    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        end = pos + size
        if end > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        return wrap(unpack(buf, pos)[0]), end

    return dec


def _zero(wrap: Callable[[int], object]) -> BodyDecoder:
    value = wrap(0)

    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        return value, pos

    return dec


def _plain_int(v: int) -> int:
    return v


def _char(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    _need(buf, pos + 4)
    cp = U32.unpack_from(buf, pos)[0]
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise DecodeError(f"invalid char code point {cp:#x}")
    return Char(chr(cp)), pos + 4


def _raw(n: int, wrap: Callable[[bytes], object]) -> BodyDecoder:
    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        end = pos + n
        if end > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        return wrap(bytes(buf[pos:end])), end

    return dec


def _uuid(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    end = pos + 16
    if end > len(buf):
        raise DecodeError("uuid runs past the end of the buffer")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _variable(what: str, wide: bool, read: Callable[[bytes], object] | None = None) -> BodyDecoder:
    """binary, string or symbol: its size (one byte, or four), then that many bytes, read by ``read``
    (None: as UTF-8 text, strict)."""
    width = 4 if wide else 1

    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        start = pos + width
        if start > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        end = start + (U32.unpack_from(buf, pos)[0] if wide else buf[pos])
        if end > len(buf):
            raise DecodeError(f"{what} runs past the end of the buffer")
        if read is not None:
            return read(buf[start:end]), end
        try:
            return str(buf[start:end], "utf-8"), end
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not UTF-8: {exc.reason}") from None

    return dec


def _symbol(data: bytes) -> Symbol:
    try:
        return Symbol(str(data, "ascii"))
    except UnicodeDecodeError:
        raise DecodeError("symbol is not ASCII") from None


def _list0(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    return [], pos


def _items(buf: bytes, pos: int, end: int, count: int, depth: int) -> list[object]:
    if count > end - pos:
        raise DecodeError("compound count exceeds its size")
    if depth >= MAX_NESTING:
        raise DecodeError("values nested too deeply")
    out: list[object] = []
    append = out.append
    for _ in range(count):
        if pos >= end:
            raise DecodeError("compound ends before its last element")
        dec = _DECODERS[buf[pos]]
        value, pos = dec(buf, pos + 1, depth + 1)
        append(value)
    if pos != end:
        raise DecodeError("compound size does not match its elements")
    return out


def _map(buf: bytes, pos: int, end: int, count: int, depth: int) -> dict[object, object]:
    items = _items(buf, pos, end, count, depth)
    if len(items) % 2:
        raise DecodeError("map has an odd number of elements")
    it = iter(items)
    try:
        return dict(zip(it, it, strict=True))
    except TypeError:
        raise DecodeError("map key is not hashable") from None


def _element_constructor(buf: bytes, pos: int, depth: int) -> tuple[int, ULong | Symbol | None, int]:
    """Read an array's element constructor: a code, or ``00 descriptor code``."""
    _need(buf, pos + 1)
    code = buf[pos]
    if code != 0x00:
        return code, None, pos + 1
    if depth >= MAX_NESTING:
        raise DecodeError("values nested too deeply")
    descriptor, pos = decode_value(buf, pos + 1, depth + 1)
    if not isinstance(descriptor, ULong | Symbol):
        raise DecodeError("descriptor must be a ulong or a symbol")
    _need(buf, pos + 1)
    inner = buf[pos]
    if inner == 0x00:
        raise DecodeError("nested descriptors in an array constructor")
    return inner, descriptor, pos + 1


def _array(buf: bytes, pos: int, end: int, count: int, depth: int) -> Array:
    if count > end - pos:
        raise DecodeError("array count exceeds its size")
    if depth >= MAX_NESTING:
        raise DecodeError("values nested too deeply")
    code, descriptor, pos = _element_constructor(buf, pos, depth)
    element = _CODE_ELEMENT.get(code)
    if element is None:
        raise DecodeError(f"invalid array element constructor {code:#x}")
    dec = _DECODERS[code]
    items: list[object] = []
    append = items.append
    for _ in range(count):
        value, pos = dec(buf, pos, depth + 1)
        if pos > end:
            raise DecodeError("array element runs past the array")
        append(value)
    if pos != end:
        raise DecodeError("array size does not match its elements")
    if descriptor is not None:
        return Array("described", tuple(Described(descriptor, v) for v in items), descriptor, element)
    return Array(element, tuple(items))


# A compound's elements from (buffer, first element, end, count, depth).
CompoundBody = Callable[[bytes, int, int, int, int], object]


def _compound(name: str, wide: bool, body: CompoundBody) -> BodyDecoder:
    """The decoder of a list, map or array: its size and count (one byte each, or four), then ``body``."""
    counts = U32U32 if wide else U8U8
    width = 4 if wide else 1  # of the size, which counts the bytes after it (the count's included)
    first = 2 * width

    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        if pos + first > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        size, count = counts.unpack_from(buf, pos)
        end = pos + width + size
        if end > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        if size < width:
            raise DecodeError(f"{name} size too small")
        return body(buf, pos + first, end, count, depth), end

    return dec


def _described(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
    if depth >= MAX_NESTING:
        raise DecodeError("values nested too deeply")
    descriptor, pos = decode_value(buf, pos, depth + 1)
    if not isinstance(descriptor, ULong | Symbol):
        raise DecodeError("descriptor must be a ulong or a symbol")
    value, pos = decode_value(buf, pos, depth + 1)
    return Described(descriptor, value), pos


def _invalid(code: int) -> BodyDecoder:
    def dec(buf: bytes, pos: int, depth: int) -> tuple[object, int]:
        raise DecodeError(f"invalid constructor {code:#04x}")

    return dec


_BY_CODE: dict[int, BodyDecoder] = {
    0x00: _described, 0x40: _null, 0x41: _true, 0x42: _false, 0x56: _boolean,
    # unsigned: ubyte, ushort, uint (uint, smalluint, uint0), ulong (ulong, smallulong, ulong0)
    0x50: _fixed(U8, UByte), 0x60: _fixed(U16, UShort),
    0x70: _fixed(U32, UInt), 0x52: _fixed(U8, UInt), 0x43: _zero(UInt),
    0x80: _fixed(U64, ULong), 0x53: _fixed(U8, ULong), 0x44: _zero(ULong),
    # signed: byte, short, int (int, smallint), long (long, smalllong; plain int)
    0x51: _fixed(I8, Byte), 0x61: _fixed(I16, Short), 0x71: _fixed(I32, Int), 0x54: _fixed(I8, Int),
    0x81: _fixed(I64, _plain_int), 0x55: _fixed(I8, _plain_int),
    0x72: _fixed(F32, Float), 0x82: _fixed(F64, float),
    0x74: _raw(4, Decimal32), 0x84: _raw(8, Decimal64), 0x94: _raw(16, Decimal128),
    0x73: _char, 0x83: _fixed(I64, Timestamp), 0x98: _uuid,
    0xA0: _variable("binary", False, bytes), 0xB0: _variable("binary", True, bytes),
    0xA1: _variable("string", False), 0xB1: _variable("string", True),
    0xA3: _variable("symbol", False, _symbol), 0xB3: _variable("symbol", True, _symbol),
    0x45: _list0, 0xC0: _compound("list8", False, _items), 0xD0: _compound("list32", True, _items),
    0xC1: _compound("map8", False, _map), 0xD1: _compound("map32", True, _map),
    0xE0: _compound("array8", False, _array), 0xF0: _compound("array32", True, _array),
}
# One body decoder per constructor byte; the codes AMQP does not define raise DecodeError.
_DECODERS: list[BodyDecoder] = [_BY_CODE[c] if c in _BY_CODE else _invalid(c) for c in range(256)]

# Constructor code -> Array element type name, for decoding arrays.
_CODE_ELEMENT: dict[int, str] = {
    0x41: "boolean", 0x42: "boolean", 0x56: "boolean", 0x50: "ubyte", 0x60: "ushort",
    0x70: "uint", 0x52: "uint", 0x43: "uint", 0x80: "ulong", 0x53: "ulong", 0x44: "ulong",
    0x51: "byte", 0x61: "short", 0x71: "int", 0x54: "int", 0x81: "long", 0x55: "long",
    0x72: "float", 0x82: "double", 0x74: "decimal32", 0x84: "decimal64", 0x94: "decimal128",
    0x73: "char", 0x83: "timestamp", 0x98: "uuid", 0xA0: "binary", 0xB0: "binary",
    0xA1: "string", 0xB1: "string", 0xA3: "symbol", 0xB3: "symbol", 0x45: "list", 0xC0: "list",
    0xD0: "list", 0xC1: "map", 0xD1: "map", 0xE0: "array", 0xF0: "array",
}


def decode_value(buf: bytes, pos: int = 0, depth: int = 0) -> tuple[Any, int]:
    """Decode one value at ``pos``; return it and the offset just past it."""
    if pos >= len(buf):
        raise DecodeError("no value: the buffer ends")
    return _DECODERS[buf[pos]](buf, pos + 1, depth)


def decode(buf: bytes) -> Any:
    """Decode exactly one value that fills ``buf``."""
    try:
        value, end = decode_value(buf, 0)
    except (struct.error, IndexError, RecursionError, ValueError, OverflowError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"malformed value: {exc}") from None
    if end != len(buf):
        raise DecodeError("trailing bytes after the value")
    return value


def skip_value(buf: bytes, pos: int) -> int:
    """Return the offset just past the value at ``pos`` without building compound values.

    Used to slice message sections (bodies above all) without decoding them.
    """
    return _skip(buf, pos, 0)


def _skip(buf: bytes, pos: int, depth: int) -> int:
    _need(buf, pos + 1)
    code = buf[pos]
    pos += 1
    width = _FIXED_WIDTH.get(code)
    if width is not None:
        end = pos + width
    elif code in _SIZED_ONE:
        _need(buf, pos + 1)
        end = pos + 1 + buf[pos]
    elif code in _SIZED_FOUR:
        _need(buf, pos + 4)
        end = pos + 4 + U32.unpack_from(buf, pos)[0]
    elif code == 0x00:
        if depth >= MAX_NESTING:
            raise DecodeError("values nested too deeply")
        return _skip(buf, _skip(buf, pos, depth + 1), depth + 1)
    else:
        raise DecodeError(f"invalid constructor {code:#04x}")
    _need(buf, end)
    return end


# A constructor's upper four bits name its width (AMQP 1.0 part 1, 1.6): 0x4_ holds no bytes,
# 0x5_ one, 0x6_ two, 0x7_ four, 0x8_ eight, 0x9_ sixteen; the fixed-width codes AMQP defines.
_FIXED_WIDTH: dict[int, int] = {code: (0, 1, 2, 4, 8, 16)[(code >> 4) - 4] for code in _BY_CODE if 0x40 <= code < 0xA0}
# 0xA_ (binary, string, symbol), 0xC_ (list, map) and 0xE_ (array) give their size in one byte; 0xB_,
# 0xD_ and 0xF_ in four.
_SIZED_ONE = frozenset(code for code in _BY_CODE if code >> 4 in (0xA, 0xC, 0xE))
_SIZED_FOUR = frozenset(code for code in _BY_CODE if code >> 4 in (0xB, 0xD, 0xF))
