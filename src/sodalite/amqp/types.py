"""The AMQP 1.0 type system as Python values (AMQP 1.0 part 1, "Types").

Python's own types stand for the AMQP types that are the natural choice on encode:
``None`` null, ``bool`` boolean, ``int`` long, ``float`` double, ``str`` string, ``bytes`` binary,
``uuid.UUID`` uuid, ``list`` list and ``dict`` map. Every other AMQP type has a small wrapper, so a
decoded value re-encodes to exactly the type it came in as (a ``uint`` stays a ``uint``). The integer
and string wrappers subclass ``int`` and ``str``, so they compare and hash like plain values and can
be used as map keys interchangeably with them.
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias


class UByte(int):
    """AMQP ubyte (8-bit unsigned)."""

    __slots__ = ()


class UShort(int):
    """AMQP ushort (16-bit unsigned)."""

    __slots__ = ()


class UInt(int):
    """AMQP uint (32-bit unsigned)."""

    __slots__ = ()


class ULong(int):
    """AMQP ulong (64-bit unsigned)."""

    __slots__ = ()


class Byte(int):
    """AMQP byte (8-bit signed)."""

    __slots__ = ()


class Short(int):
    """AMQP short (16-bit signed)."""

    __slots__ = ()


class Int(int):
    """AMQP int (32-bit signed)."""

    __slots__ = ()


class Long(int):
    """AMQP long (64-bit signed); plain ``int`` encodes the same way."""

    __slots__ = ()


class Float(float):
    """AMQP float (IEEE 754 binary32)."""

    __slots__ = ()


class Timestamp(int):
    """AMQP timestamp: milliseconds since the Unix epoch, 64-bit signed."""

    __slots__ = ()


class Symbol(str):
    """AMQP symbol (ASCII)."""

    __slots__ = ()


class Char(str):
    """AMQP char: a single Unicode code point (UTF-32BE on the wire)."""

    __slots__ = ()


def _bid_decimal(raw: bytes, exponent_bits: int, bias: int) -> decimal.Decimal:
    """An IEEE 754-2008 decimal in binary integer decoding (BID), of any of the three widths.

    Sign bit; then, unless the two bits after it are both set, an exponent of ``exponent_bits``
    biased by ``bias`` and the significand in the remaining bits. ``11`` then ``11`` marks infinity
    (``0``) or NaN (``1``); ``11`` otherwise means a significand too large for the format's digits:
    non-canonical, read as zero as the standard says.
    """
    width = len(raw) * 8
    bits = int.from_bytes(raw, "big")
    sign = bits >> (width - 1)
    significand_bits = width - 1 - exponent_bits
    digits_max = {32: 7, 64: 16, 128: 34}[width]
    if (bits >> (width - 3)) & 0b11 == 0b11:
        if (bits >> (width - 5)) & 0b1111 == 0b1111:
            if (bits >> (width - 6)) & 1:
                return decimal.Decimal("NaN")
            return decimal.Decimal("-Infinity" if sign else "Infinity")
        exponent = (bits >> (significand_bits - 2)) & ((1 << exponent_bits) - 1)
        significand = 0
    else:
        exponent = (bits >> significand_bits) & ((1 << exponent_bits) - 1)
        significand = bits & ((1 << significand_bits) - 1)
        if significand >= 10**digits_max:
            significand = 0
    return decimal.Decimal((sign, tuple(int(d) for d in str(significand)), exponent - bias))


class Decimal32(bytes):
    """AMQP decimal32, kept as its 4 raw IEEE 754 decimal bytes."""

    __slots__ = ()

    def to_decimal(self) -> decimal.Decimal:
        """The value, read as IEEE 754-2008 decimal32 (BID)."""
        return _bid_decimal(self[:4], 8, 101)


class Decimal64(bytes):
    """AMQP decimal64, kept as its 8 raw IEEE 754 decimal bytes."""

    __slots__ = ()

    def to_decimal(self) -> decimal.Decimal:
        """The value, read as IEEE 754-2008 decimal64 (BID)."""
        return _bid_decimal(self[:8], 10, 398)


class Decimal128(bytes):
    """AMQP decimal128, kept as its 16 raw IEEE 754 decimal bytes."""

    __slots__ = ()

    def to_decimal(self) -> decimal.Decimal:
        """The value, read as IEEE 754-2008 decimal128 (BID)."""
        return _bid_decimal(self[:16], 14, 6176)


@dataclass(frozen=True, slots=True)
class Described:
    """A described type: a descriptor (ulong or symbol) and the value it describes."""

    descriptor: object
    value: object


# Element type names an Array may hold; each maps to one fixed constructor in the codec.
ARRAY_ELEMENT_TYPES = (
    "boolean", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long", "float",
    "double", "decimal32", "decimal64", "decimal128", "char", "timestamp", "uuid", "binary",
    "string", "symbol", "list", "map", "array", "described",
)


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: items of one element type, all sharing one constructor.

    ``element`` is one of :data:`ARRAY_ELEMENT_TYPES`. For ``described`` arrays, ``descriptor`` is
    the shared descriptor and ``inner`` the element type of the described values.
    """

    element: str
    items: tuple[object, ...]
    descriptor: object = None
    inner: str | None = None

    def __iter__(self) -> Iterator[object]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> object:
        return self.items[index]


# Any AMQP value as this package decodes and encodes it: the Python types above stand for the
# natural encodings, the wrappers (all subclasses of int, float, str or bytes) for the rest.
AmqpValue: TypeAlias = (
    bool | int | float | str | bytes | uuid.UUID | Described | Array
    | list["AmqpValue"] | dict["AmqpValue", "AmqpValue"] | None
)
# An AMQP map (message-annotations, application-properties, a request body) as decoded.
AmqpMap: TypeAlias = dict[AmqpValue, AmqpValue]
