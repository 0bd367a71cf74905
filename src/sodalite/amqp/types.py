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
from dataclasses import dataclass
from typing import Any


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


class Decimal32(bytes):
    """AMQP decimal32, kept as its 4 raw IEEE 754 decimal bytes."""

    __slots__ = ()


class Decimal64(bytes):
    """AMQP decimal64, kept as its 8 raw IEEE 754 decimal bytes."""

    __slots__ = ()


class Decimal128(bytes):
    """AMQP decimal128, kept as its 16 raw IEEE 754 decimal bytes."""

    __slots__ = ()

    def to_decimal(self) -> decimal.Decimal:
        """The value, read as IEEE 754-2008 decimal128 in binary integer decoding (BID).

        Sign bit; then, unless the two bits after it are both set, a 14-bit exponent biased by
        6176 and a 113-bit significand. ``11`` then ``11`` marks infinity (``0``) or NaN (``1``);
        ``11`` otherwise means a significand of at least 2**113, beyond 34 digits: non-canonical,
        read as zero as the standard says.
        """
        bits = int.from_bytes(self[:16], "big")
        sign = bits >> 127
        if (bits >> 125) & 0b11 == 0b11:
            if (bits >> 123) & 0b1111 == 0b1111:
                return decimal.Decimal("NaN") if (bits >> 122) & 1 else decimal.Decimal("-Infinity" if sign
                                                                                          else "Infinity")
            exponent, significand = ((bits >> 111) & 0x3FFF) - 6176, 0
        else:
            exponent, significand = ((bits >> 113) & 0x3FFF) - 6176, bits & ((1 << 113) - 1)
            if significand >= 10**34:
                significand = 0
        digits = tuple(int(d) for d in str(significand))
        return decimal.Decimal((sign, digits, exponent))


@dataclass(frozen=True, slots=True)
class Described:
    """A described type: a descriptor (ulong or symbol) and the value it describes."""

    descriptor: Any
    value: Any


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
    items: tuple[Any, ...]
    descriptor: Any = None
    inner: str | None = None

    def __iter__(self) -> Any:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]
