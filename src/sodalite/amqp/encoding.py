"""Encoder for the AMQP 1.0 type system (AMQP 1.0 part 1, section 1.6).

Rules:

- a value's Python type picks its encoder (:mod:`sodalite.amqp.types`); a subclass of a wrapper (an
  Enum of Symbols, say) takes its base's encoding; any other type raises :class:`EncodeError`;
- the most compact constructor is chosen (``smallulong``, ``str8`` ...), except inside arrays, where
  one constructor must fit every element and the wide forms are used;
- described values whose descriptor is a small ulong are written as ``00 53 xx``, which the official
  Python SDK requires of every performative and message section (sdk-wire-contract.md section 10.1);
- a value out of its type's range, a lone surrogate in a string or a non-ASCII symbol raises
  :class:`EncodeError`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from sodalite.amqp import types
from sodalite.amqp.errors import EncodeError
from sodalite.amqp.packing import F32, F64, I8, I16, I32, I64, U8, U16, U32, U32U32, U64
from sodalite.amqp.types import Array, Described, ULong

# An encoder appends one value of the type it is registered for; the table below picks it by type.
Encoder = Callable[[Any, bytearray], None]


def _range_check(value: int, lo: int, hi: int, name: str) -> None:
    if not lo <= value <= hi:
        raise EncodeError(f"{value} does not fit in an AMQP {name}")


def _enc_null(value: object, out: bytearray) -> None:
    out.append(0x40)


def _enc_bool(value: bool, out: bytearray) -> None:
    out.append(0x41 if value else 0x42)


def _enc_ubyte(value: int, out: bytearray) -> None:
    _range_check(value, 0, 0xFF, "ubyte")
    out += b"\x50" + U8.pack(value)


def _enc_ushort(value: int, out: bytearray) -> None:
    _range_check(value, 0, 0xFFFF, "ushort")
    out += b"\x60" + U16.pack(value)


def _unsigned(zero: int, small: int, wide: int, layout: struct.Struct, name: str) -> Encoder:
    """uint and ulong: a constructor of its own for 0, one byte up to 255, the full width above."""
    top = (1 << (8 * layout.size)) - 1
    small_code, wide_code, pack = bytes((small,)), bytes((wide,)), layout.pack

    def enc(value: int, out: bytearray) -> None:
        if value == 0:
            out.append(zero)
        elif 0 < value <= 0xFF:
            out += small_code + U8.pack(value)
        else:
            _range_check(value, 0, top, name)
            out += wide_code + pack(value)

    return enc


_enc_uint = _unsigned(0x43, 0x52, 0x70, U32, "uint")
_enc_ulong = _unsigned(0x44, 0x53, 0x80, U64, "ulong")


def _enc_byte(value: int, out: bytearray) -> None:
    _range_check(value, -128, 127, "byte")
    out += b"\x51" + I8.pack(value)


def _enc_short(value: int, out: bytearray) -> None:
    _range_check(value, -32768, 32767, "short")
    out += b"\x61" + I16.pack(value)


def _signed(small: int, wide: int, layout: struct.Struct, name: str) -> Encoder:
    """int and long: one signed byte from -128 to 127, the full width beyond."""
    low, high = -(1 << (8 * layout.size - 1)), (1 << (8 * layout.size - 1)) - 1
    small_code, wide_code, pack = bytes((small,)), bytes((wide,)), layout.pack

    def enc(value: int, out: bytearray) -> None:
        if -128 <= value <= 127:
            out += small_code + I8.pack(value)
        else:
            _range_check(value, low, high, name)
            out += wide_code + pack(value)

    return enc


_enc_int = _signed(0x54, 0x71, I32, "int")
_enc_long = _signed(0x55, 0x81, I64, "long")


def _enc_float(value: float, out: bytearray) -> None:
    try:
        out += b"\x72" + F32.pack(value)
    except OverflowError:
        raise EncodeError(f"{value!r} does not fit in an AMQP float") from None


def _enc_double(value: float, out: bytearray) -> None:
    out += b"\x82" + F64.pack(value)


def _enc_decimal(code: int, width: int) -> Encoder:
    def enc(value: bytes, out: bytearray) -> None:
        if len(value) != width:
            raise EncodeError(f"decimal needs exactly {width} bytes")
        out.append(code)
        out += value

    return enc


def _char_code(value: str) -> int:
    if len(value) != 1:
        raise EncodeError("an AMQP char is exactly one code point")
    cp = ord(value)
    if 0xD800 <= cp <= 0xDFFF:
        raise EncodeError(f"an AMQP char cannot be the surrogate {cp:#x}")
    return cp


def _enc_char(value: str, out: bytearray) -> None:
    out += b"\x73" + U32.pack(_char_code(value))


def _enc_timestamp(value: int, out: bytearray) -> None:
    _range_check(value, -(2**63), 2**63 - 1, "timestamp")
    out += b"\x83" + I64.pack(value)


def _enc_uuid(value: uuid.UUID, out: bytearray) -> None:
    out.append(0x98)
    out += value.bytes


def _enc_variable(small: int, large: int, data: bytes, out: bytearray) -> None:
    n = len(data)
    if n <= 0xFF:
        out.append(small)
        out.append(n)
    else:
        out.append(large)
        out += U32.pack(n)
    out += data


def _enc_binary(value: bytes | bytearray | memoryview, out: bytearray) -> None:
    _enc_variable(0xA0, 0xB0, bytes(value), out)


def _utf8(value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"string {value!r} is not valid Unicode (lone surrogate)") from None


def _ascii(value: str) -> bytes:
    try:
        return value.encode("ascii")
    except UnicodeEncodeError:
        raise EncodeError(f"symbol {value!r} is not ASCII") from None


def _enc_string(value: str, out: bytearray) -> None:
    _enc_variable(0xA1, 0xB1, _utf8(value), out)


def _enc_symbol(value: str, out: bytearray) -> None:
    _enc_variable(0xA3, 0xB3, _ascii(value), out)


def _enc_compound(small: int, large: int, count: int, body: bytearray | bytes, out: bytearray) -> None:
    size = len(body)
    if size + 1 <= 0xFF and count <= 0xFF:
        out.append(small)
        out.append(size + 1)
        out.append(count)
    else:
        out.append(large)
        out += U32U32.pack(size + 4, count)
    out += body


def _enc_list(value: list[object] | tuple[object, ...], out: bytearray) -> None:
    if not value:
        out.append(0x45)
        return
    body = bytearray()
    for item in value:
        encode_value(item, body)
    _enc_compound(0xC0, 0xD0, len(value), body, out)


def _enc_map(value: dict[object, object], out: bytearray) -> None:
    body = bytearray()
    for k, v in value.items():
        encode_value(k, body)
        encode_value(v, body)
    _enc_compound(0xC1, 0xD1, 2 * len(value), body, out)


def _enc_described(value: Described, out: bytearray) -> None:
    out.append(0x00)
    d = value.descriptor
    if type(d) is int or isinstance(d, ULong):
        _enc_ulong(d, out)
    elif isinstance(d, str):
        _enc_symbol(d, out)
    else:
        raise EncodeError("descriptor must be an int (ulong) or a str (symbol)")
    encode_value(value.value, out)


# Array element encoders: (constructor code, element body encoder without the constructor).
def _body(st: struct.Struct) -> Encoder:
    pack = st.pack

    def enc(value: object, out: bytearray) -> None:
        try:
            out += pack(value)
        except (struct.error, OverflowError):
            raise EncodeError(f"{value!r} does not fit in its array element type") from None

    return enc


def _body_bool(value: bool, out: bytearray) -> None:
    out.append(1 if value else 0)


def _body_raw(width: int) -> Encoder:
    def enc(value: bytes, out: bytearray) -> None:
        if len(value) != width:
            raise EncodeError(f"array element needs exactly {width} bytes")
        out += value

    return enc


def _body_char(value: str, out: bytearray) -> None:
    out += U32.pack(_char_code(value))


def _body_uuid(value: uuid.UUID, out: bytearray) -> None:
    out += value.bytes


def _body_var32(value: bytes, out: bytearray) -> None:
    out += U32.pack(len(value))
    out += value


def _body_binary(value: bytes, out: bytearray) -> None:
    _body_var32(bytes(value), out)


def _body_string(value: str, out: bytearray) -> None:
    _body_var32(_utf8(value), out)


def _body_symbol(value: str, out: bytearray) -> None:
    _body_var32(_ascii(value), out)


def _body_list(value: list[object], out: bytearray) -> None:
    body = bytearray()
    for item in value:
        encode_value(item, body)
    out += U32U32.pack(len(body) + 4, len(value))
    out += body


def _body_map(value: dict[object, object], out: bytearray) -> None:
    body = bytearray()
    for k, v in value.items():
        encode_value(k, body)
        encode_value(v, body)
    out += U32U32.pack(len(body) + 4, 2 * len(value))
    out += body


def _body_array(value: Array, out: bytearray) -> None:
    body = bytearray()
    _array_contents(value, body)
    out += U32U32.pack(len(body) + 4, len(value.items))
    out += body


_ARRAY_ELEMENTS: dict[str, tuple[int, Encoder]] = {
    "boolean": (0x56, _body_bool),
    "ubyte": (0x50, _body(U8)),
    "ushort": (0x60, _body(U16)),
    "uint": (0x70, _body(U32)),
    "ulong": (0x80, _body(U64)),
    "byte": (0x51, _body(I8)),
    "short": (0x61, _body(I16)),
    "int": (0x71, _body(I32)),
    "long": (0x81, _body(I64)),
    "float": (0x72, _body(F32)),
    "double": (0x82, _body(F64)),
    "decimal32": (0x74, _body_raw(4)),
    "decimal64": (0x84, _body_raw(8)),
    "decimal128": (0x94, _body_raw(16)),
    "char": (0x73, _body_char),
    "timestamp": (0x83, _body(I64)),
    "uuid": (0x98, _body_uuid),
    "binary": (0xB0, _body_binary),
    "string": (0xB1, _body_string),
    "symbol": (0xB3, _body_symbol),
    "list": (0xD0, _body_list),
    "map": (0xD1, _body_map),
    "array": (0xF0, _body_array),
}


def _array_contents(value: Array, out: bytearray) -> None:
    """Element constructor followed by the element bodies (no size or count)."""
    if value.element == "described":
        if value.inner is None or value.inner not in _ARRAY_ELEMENTS:
            raise EncodeError("a described array needs a known inner element type")
        code, body = _ARRAY_ELEMENTS[value.inner]
        out.append(0x00)
        _enc_described_descriptor(value.descriptor, out)
        out.append(code)
        for item in value.items:
            body(item.value if isinstance(item, Described) else item, out)
        return
    entry = _ARRAY_ELEMENTS.get(value.element)
    if entry is None:
        raise EncodeError(f"unknown array element type {value.element!r}")
    code, body = entry
    out.append(code)
    for item in value.items:
        body(item, out)


def _enc_described_descriptor(d: object, out: bytearray) -> None:
    if isinstance(d, int) and not isinstance(d, bool):
        _enc_ulong(d, out)
    elif isinstance(d, str):
        _enc_symbol(d, out)
    else:
        raise EncodeError("descriptor must be an int (ulong) or a str (symbol)")


def _enc_array(value: Array, out: bytearray) -> None:
    body = bytearray()
    _array_contents(value, body)
    count = len(value.items)
    size = len(body)
    if size + 1 <= 0xFF and count <= 0xFF:
        out.append(0xE0)
        out.append(size + 1)
        out.append(count)
    else:
        out.append(0xF0)
        out += U32U32.pack(size + 4, count)
    out += body


_ENCODERS: dict[type, Encoder] = {
    type(None): _enc_null,
    bool: _enc_bool,
    int: _enc_long,
    types.Long: _enc_long,
    types.UByte: _enc_ubyte,
    types.UShort: _enc_ushort,
    types.UInt: _enc_uint,
    ULong: _enc_ulong,
    types.Byte: _enc_byte,
    types.Short: _enc_short,
    types.Int: _enc_int,
    float: _enc_double,
    types.Float: _enc_float,
    types.Decimal32: _enc_decimal(0x74, 4),
    types.Decimal64: _enc_decimal(0x84, 8),
    types.Decimal128: _enc_decimal(0x94, 16),
    types.Char: _enc_char,
    types.Timestamp: _enc_timestamp,
    uuid.UUID: _enc_uuid,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    str: _enc_string,
    types.Symbol: _enc_symbol,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Described: _enc_described,
    Array: _enc_array,
}


def encode_value(value: object, out: bytearray) -> None:
    """Append the encoding of ``value`` to ``out``."""
    enc = _ENCODERS.get(type(value))
    if enc is None:
        enc = _encoder_for_subclass(value)
    enc(value, out)


def _encoder_for_subclass(value: object) -> Encoder:
    # Subclasses of wrapper types (an Enum of Symbols, say) take their base's encoding.
    for base in type(value).__mro__[1:]:
        enc = _ENCODERS.get(base)
        if enc is not None:
            return enc
    raise EncodeError(f"no AMQP encoding for {type(value).__name__}")


def encode(value: object) -> bytes:
    """Return the encoding of ``value``."""
    out = bytearray()
    encode_value(value, out)
    return bytes(out)
