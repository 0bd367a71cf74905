"""Tests for the AMQP 1.0 type-system codec (``sodalite.amqp.codec``).

Round trips are checked for value *and* exact Python type: a ``UInt`` must come back as a ``UInt``,
a plain ``int`` (AMQP long) as a plain ``int``, a ``Symbol`` as a ``Symbol`` and a ``str`` as a ``str``.
"""

from __future__ import annotations

import functools
import random
import re
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from sodalite.amqp import codec
from sodalite.amqp.errors import DecodeError, EncodeError, ProtocolError
from sodalite.amqp.types import (
    ARRAY_ELEMENT_TYPES,
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Long,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MEDIUM = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------------------------
# Exact comparison: value and type, recursively
# --------------------------------------------------------------------------------------------


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    """Assert ``actual`` equals ``expected`` with identical types all the way down.

    Floats are compared by bit pattern, so NaN equals NaN (of the same payload) and -0.0 differs
    from 0.0.
    """
    assert type(actual) is type(expected), (
        f"{path}: type {type(actual).__name__} != {type(expected).__name__} ({actual!r} vs {expected!r})"
    )
    if isinstance(expected, float):
        assert struct.pack(">d", actual) == struct.pack(">d", expected), f"{path}: {actual!r} != {expected!r}"
    elif isinstance(expected, list | tuple):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_same(e, a, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert len(actual) == len(expected), f"{path}: map size {len(actual)} != {len(expected)}"
        for i, ((ek, ev), (ak, av)) in enumerate(zip(expected.items(), actual.items(), strict=True)):
            assert_same(ek, ak, f"{path}.key[{i}]")
            assert_same(ev, av, f"{path}[{ek!r}]")
    elif isinstance(expected, Described):
        assert_same(expected.descriptor, actual.descriptor, f"{path}.descriptor")
        assert_same(expected.value, actual.value, f"{path}.value")
    elif isinstance(expected, Array):
        assert actual.element == expected.element, f"{path}: element {actual.element} != {expected.element}"
        assert actual.inner == expected.inner, f"{path}: inner {actual.inner} != {expected.inner}"
        assert_same(expected.descriptor, actual.descriptor, f"{path}.descriptor")
        assert_same(expected.items, actual.items, f"{path}.items")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def round_trip(value: Any) -> Any:
    data = codec.encode(value)
    decoded = codec.decode(data)
    assert_same(value, decoded)
    # The encoding of a decoded value is the encoding we started from (canonical and stable).
    assert codec.encode(decoded) == data
    # skip_value agrees with decode_value on where the value ends.
    assert codec.skip_value(data, 0) == codec.decode_value(data, 0)[1] == len(data)
    return decoded


def test_assert_same_is_strict() -> None:
    with pytest.raises(AssertionError):
        assert_same(UInt(1), 1)
    with pytest.raises(AssertionError):
        assert_same("a", Symbol("a"))
    with pytest.raises(AssertionError):
        assert_same([UInt(1)], [ULong(1)])
    with pytest.raises(AssertionError):
        assert_same({Symbol("k"): 1}, {"k": 1})
    with pytest.raises(AssertionError):
        assert_same(0.0, -0.0)
    assert_same(float("nan"), float("nan"))


# --------------------------------------------------------------------------------------------
# Strategies. Each produces values of exactly the type the decoder returns for them.
# --------------------------------------------------------------------------------------------

I64 = (-(2**63), 2**63 - 1)

nulls = st.none()
booleans = st.booleans()
ubytes = st.integers(0, 0xFF).map(UByte)
ushorts = st.integers(0, 0xFFFF).map(UShort)
uints = st.one_of(st.integers(0, 0x1FF), st.integers(0, 0xFFFFFFFF)).map(UInt)
ulongs = st.one_of(st.integers(0, 0x1FF), st.integers(0, 0xFFFFFFFFFFFFFFFF)).map(ULong)
bytes_ = st.integers(-128, 127).map(Byte)
shorts = st.integers(-32768, 32767).map(Short)
ints = st.one_of(st.integers(-300, 300), st.integers(-(2**31), 2**31 - 1)).map(Int)
longs = st.one_of(st.integers(-300, 300), st.integers(*I64))  # plain int is AMQP long
floats32 = st.floats(width=32).map(Float)
doubles = st.floats()
decimal32s = st.binary(min_size=4, max_size=4).map(Decimal32)
decimal64s = st.binary(min_size=8, max_size=8).map(Decimal64)
decimal128s = st.binary(min_size=16, max_size=16).map(Decimal128)
chars = st.characters(exclude_categories=("Cs",)).map(Char)
timestamps = st.integers(*I64).map(Timestamp)
uuids = st.uuids()
binaries = st.binary(max_size=40)
strings = st.text(max_size=40)
ascii_text = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=40)
symbols = ascii_text.map(Symbol)
descriptors = st.one_of(ulongs, symbols)

# AMQP type name -> strategy, for every scalar type.
SCALARS: dict[str, SearchStrategy[Any]] = {
    "null": nulls,
    "boolean": booleans,
    "ubyte": ubytes,
    "ushort": ushorts,
    "uint": uints,
    "ulong": ulongs,
    "byte": bytes_,
    "short": shorts,
    "int": ints,
    "long": longs,
    "float": floats32,
    "double": doubles,
    "decimal32": decimal32s,
    "decimal64": decimal64s,
    "decimal128": decimal128s,
    "char": chars,
    "timestamp": timestamps,
    "uuid": uuids,
    "binary": binaries,
    "string": strings,
    "symbol": symbols,
}

# Array element type -> strategy for one element, for the element types that hold scalars.
SCALAR_ELEMENTS: dict[str, SearchStrategy[Any]] = {
    name: strategy for name, strategy in SCALARS.items() if name != "null"
}
COMPOUND_ELEMENTS = ("list", "map", "array")

assert set(SCALAR_ELEMENTS) | set(COMPOUND_ELEMENTS) | {"described"} == set(ARRAY_ELEMENT_TYPES)

scalars = st.one_of(*SCALARS.values())
map_keys = scalars  # every scalar is hashable


def balanced(*groups: SearchStrategy[Any]) -> SearchStrategy[Any]:
    """Pick one of ``groups`` with equal probability.

    ``st.one_of`` flattens nested ``one_of``s into one list of branches, which would make the
    group with the most alternatives (arrays: one per element type) crowd out the others.
    """
    return st.integers(0, len(groups) - 1).flatmap(groups.__getitem__)


@functools.cache
def values(depth: int) -> SearchStrategy[Any]:
    """Any AMQP value, compounds nested at most ``depth`` levels."""
    if depth == 0:
        return balanced(scalars, arrays(0))
    child = values(depth - 1)
    return balanced(
        scalars,
        st.lists(child, max_size=6),
        st.dictionaries(map_keys, child, max_size=6),
        st.builds(Described, descriptors, child),
        arrays(depth),
    )


@functools.cache
def element_items(element: str, depth: int) -> SearchStrategy[Any]:
    """One element of an array of ``element`` (no descriptor)."""
    if element in SCALAR_ELEMENTS:
        return SCALAR_ELEMENTS[element]
    assert depth > 0, element
    if element == "list":
        return st.lists(values(depth - 1), max_size=4)
    if element == "map":
        return st.dictionaries(map_keys, values(depth - 1), max_size=4)
    if element == "array":
        return arrays(depth - 1)
    raise AssertionError(element)


def _element_names(depth: int) -> tuple[str, ...]:
    return tuple(e for e in ARRAY_ELEMENT_TYPES if depth > 0 or e not in COMPOUND_ELEMENTS)


def _make_described_array(descriptor: Any, inner: str, items: list[Any]) -> Array:
    return Array("described", tuple(Described(descriptor, v) for v in items), descriptor, inner)


@functools.cache
def arrays(depth: int, element: str | None = None) -> SearchStrategy[Array]:
    """Arrays of ``element`` (any element type if None); compound elements nest ``depth`` levels."""
    if element is None:
        return balanced(*(arrays(depth, e) for e in _element_names(depth)))
    if element == "described":
        inners = [e for e in _element_names(depth) if e != "described"]
        return st.one_of(
            *(
                st.builds(
                    functools.partial(_make_described_array, inner=inner),
                    descriptors,
                    items=st.lists(element_items(inner, depth), max_size=5),
                )
                for inner in inners
            )
        )
    return st.lists(element_items(element, depth), max_size=6).map(functools.partial(_make_array, element))


def _make_array(element: str, items: list[Any]) -> Array:
    return Array(element, tuple(items))


any_value = values(3)


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCALARS))
@FAST
@given(data=st.data())
def test_scalar_round_trip(name: str, data: st.DataObject) -> None:
    round_trip(data.draw(SCALARS[name], label=name))


@FAST
@given(st.floats(width=32))
def test_float_round_trip_is_bit_exact(x: float) -> None:
    data = codec.encode(Float(x))
    assert data[0] == 0x72 and len(data) == 5
    decoded = codec.decode(data)
    assert type(decoded) is Float
    assert struct.pack(">f", decoded) == struct.pack(">f", x)
    assert struct.pack(">d", decoded) == struct.pack(">d", x)


@FAST
@given(st.floats())
def test_double_round_trip_is_bit_exact(x: float) -> None:
    data = codec.encode(x)
    assert data == b"\x82" + struct.pack(">d", x)
    decoded = codec.decode(data)
    assert type(decoded) is float
    assert struct.pack(">d", decoded) == struct.pack(">d", x)


@pytest.mark.parametrize("bits", [0x7FC00000, 0xFFC00001, 0x7F800001, 0x7FBFFFFF, 0x00000001, 0x80000000])
def test_float_special_bit_patterns(bits: int) -> None:
    """Quiet NaNs, signalling NaNs, denormals and -0.0 on the wire decode without error."""
    data = b"\x72" + struct.pack(">I", bits)
    decoded = codec.decode(data)
    assert type(decoded) is Float
    reencoded = codec.encode(decoded)
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x007FFFFF:  # NaN: stays NaN, payload kept
        (back,) = struct.unpack(">I", reencoded[1:])
        assert (back & 0x7F800000) == 0x7F800000 and back & 0x007FFFFF
        assert (back & 0x003FFFFF) == (bits & 0x003FFFFF)
    else:
        assert reencoded == data


@pytest.mark.parametrize("element", ARRAY_ELEMENT_TYPES)
@MEDIUM
@given(data=st.data())
def test_array_round_trip(element: str, data: st.DataObject) -> None:
    array = data.draw(arrays(2, element), label="array")
    decoded = round_trip(array)
    assert decoded.element == element


@FAST
@given(st.lists(values(2), max_size=8))
def test_list_round_trip(value: list[Any]) -> None:
    round_trip(value)


@FAST
@given(st.dictionaries(map_keys, values(2), max_size=8))
def test_map_round_trip(value: dict[Any, Any]) -> None:
    round_trip(value)


@FAST
@given(ulongs, values(2))
def test_described_ulong_round_trip(descriptor: ULong, inner: Any) -> None:
    round_trip(Described(descriptor, inner))


@FAST
@given(symbols, values(2))
def test_described_symbol_round_trip(descriptor: Symbol, inner: Any) -> None:
    round_trip(Described(descriptor, inner))


@HEAVY
@given(any_value)
def test_any_value_round_trip(value: Any) -> None:
    round_trip(value)


@MEDIUM
@given(st.lists(values(1), min_size=1, max_size=4), st.binary(max_size=8), st.binary(max_size=8))
def test_decode_value_and_skip_value_at_an_offset(items: list[Any], prefix: bytes, suffix: bytes) -> None:
    """A sequence of values laid end to end, surrounded by junk: each is found and skipped in turn."""
    buf = prefix + b"".join(codec.encode(v) for v in items) + suffix
    pos = len(prefix)
    for item in items:
        value, end = codec.decode_value(buf, pos)
        assert_same(item, value)
        assert codec.skip_value(buf, pos) == end
        pos = end
    assert pos == len(buf) - len(suffix)


def test_map_keys_of_every_scalar_type() -> None:
    value = {
        None: 0,
        True: 1,
        UByte(2): 2,
        UShort(3): 3,
        UInt(4): 4,
        ULong(5): 5,
        Byte(-6): 6,
        Short(-7): 7,
        Int(-8): 8,
        -9: 9,
        Float(1.5): 10,
        2.25: 11,
        Decimal32(b"\x00" * 4): 12,
        Decimal64(b"\x00" * 8): 13,
        Decimal128(b"\x00" * 16): 14,
        Char("x"): 15,
        Timestamp(1700000000000): 16,
        uuid.UUID(int=17): 17,
        b"bin": 18,
        "str": 19,
        Symbol("sym"): 20,
    }
    round_trip(value)


# --------------------------------------------------------------------------------------------
# Normalisations that do not keep the Python type (documented in types.py)
# --------------------------------------------------------------------------------------------


@FAST
@given(st.integers(*I64))
def test_long_wrapper_encodes_as_long_and_decodes_to_plain_int(x: int) -> None:
    assert codec.encode(Long(x)) == codec.encode(x)
    assert_same(x, codec.decode(codec.encode(Long(x))))


def test_other_python_types_encode_as_their_amqp_equivalent() -> None:
    assert_same([1, "a"], codec.decode(codec.encode((1, "a"))))
    assert_same(b"abc", codec.decode(codec.encode(bytearray(b"abc"))))
    assert_same(b"abc", codec.decode(codec.encode(memoryview(b"abc"))))

    class Address(Symbol):
        __slots__ = ()

    class Counter(UInt):
        __slots__ = ()

    assert codec.encode(Address("queue")) == codec.encode(Symbol("queue"))
    assert_same(Symbol("queue"), codec.decode(codec.encode(Address("queue"))))
    assert_same(UInt(7), codec.decode(codec.encode(Counter(7))))


def test_described_array_accepts_bare_items_and_plain_int_descriptor() -> None:
    array = Array("described", (UInt(1), Described(ULong(9), UInt(2))), 9, "uint")
    decoded = codec.decode(codec.encode(array))
    assert_same(
        Array("described", (Described(ULong(9), UInt(1)), Described(ULong(9), UInt(2))), ULong(9), "uint"),
        decoded,
    )


def test_encode_value_appends() -> None:
    out = bytearray(b"\xaa")
    codec.encode_value(UInt(1), out)
    codec.encode_value(None, out)
    assert bytes(out) == b"\xaa\x52\x01\x40"


# --------------------------------------------------------------------------------------------
# Constructor choice and exact byte vectors
# --------------------------------------------------------------------------------------------

EXACT: list[tuple[Any, bytes]] = [
    (None, b"\x40"),
    (True, b"\x41"),
    (False, b"\x42"),
    (UByte(0), b"\x50\x00"),
    (UByte(255), b"\x50\xff"),
    (UShort(0), b"\x60\x00\x00"),
    (UShort(0xFFFF), b"\x60\xff\xff"),
    (UInt(0), b"\x43"),
    (UInt(1), b"\x52\x01"),
    (UInt(255), b"\x52\xff"),
    (UInt(256), b"\x70\x00\x00\x01\x00"),
    (UInt(0xFFFFFFFF), b"\x70\xff\xff\xff\xff"),
    (ULong(0), b"\x44"),
    (ULong(1), b"\x53\x01"),
    (ULong(255), b"\x53\xff"),
    (ULong(256), b"\x80\x00\x00\x00\x00\x00\x00\x01\x00"),
    (ULong(2**64 - 1), b"\x80" + b"\xff" * 8),
    (Byte(-128), b"\x51\x80"),
    (Byte(127), b"\x51\x7f"),
    (Short(-32768), b"\x61\x80\x00"),
    (Short(32767), b"\x61\x7f\xff"),
    (Int(0), b"\x54\x00"),
    (Int(-1), b"\x54\xff"),
    (Int(-128), b"\x54\x80"),
    (Int(127), b"\x54\x7f"),
    (Int(128), b"\x71\x00\x00\x00\x80"),
    (Int(-129), b"\x71\xff\xff\xff\x7f"),
    (Int(2**31 - 1), b"\x71\x7f\xff\xff\xff"),
    (Int(-(2**31)), b"\x71\x80\x00\x00\x00"),
    (0, b"\x55\x00"),
    (-128, b"\x55\x80"),
    (127, b"\x55\x7f"),
    (128, b"\x81\x00\x00\x00\x00\x00\x00\x00\x80"),
    (-129, b"\x81\xff\xff\xff\xff\xff\xff\xff\x7f"),
    (2**63 - 1, b"\x81\x7f" + b"\xff" * 7),
    (-(2**63), b"\x81\x80" + b"\x00" * 7),
    (Float(1.0), b"\x72\x3f\x80\x00\x00"),
    (Float(-0.0), b"\x72\x80\x00\x00\x00"),
    (1.0, b"\x82\x3f\xf0\x00\x00\x00\x00\x00\x00"),
    (Decimal32(b"\x01\x02\x03\x04"), b"\x74\x01\x02\x03\x04"),
    (Decimal64(bytes(range(8))), b"\x84" + bytes(range(8))),
    (Decimal128(bytes(range(16))), b"\x94" + bytes(range(16))),
    (Char("A"), b"\x73\x00\x00\x00\x41"),
    (Char("\U0010ffff"), b"\x73\x00\x10\xff\xff"),
    (Timestamp(0), b"\x83" + b"\x00" * 8),
    (Timestamp(-1), b"\x83" + b"\xff" * 8),
    (uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10), b"\x98" + bytes(range(1, 17))),
    (b"", b"\xa0\x00"),
    (b"\x00" * 255, b"\xa0\xff" + b"\x00" * 255),
    (b"\x00" * 256, b"\xb0\x00\x00\x01\x00" + b"\x00" * 256),
    ("", b"\xa1\x00"),
    ("a" * 255, b"\xa1\xff" + b"a" * 255),
    ("a" * 256, b"\xb1\x00\x00\x01\x00" + b"a" * 256),
    # 128 characters but 256 UTF-8 bytes: the byte length picks the constructor.
    ("\u00e9" * 128, b"\xb1\x00\x00\x01\x00" + "\u00e9".encode() * 128),
    ("\u00e9" * 127 + "a", b"\xa1\xff" + "\u00e9".encode() * 127 + b"a"),
    (Symbol(""), b"\xa3\x00"),
    (Symbol("a" * 255), b"\xa3\xff" + b"a" * 255),
    (Symbol("a" * 256), b"\xb3\x00\x00\x01\x00" + b"a" * 256),
    ([], b"\x45"),
    ([None], b"\xc0\x02\x01\x40"),
    # list body of 254 bytes fits list8 (size byte 255); 255 bytes needs list32.
    ([b"x" * 252], b"\xc0\xff\x01\xa0\xfc" + b"x" * 252),
    ([b"x" * 253], b"\xd0\x00\x00\x01\x03\x00\x00\x00\x01\xa0\xfd" + b"x" * 253),
    ({}, b"\xc1\x01\x00"),
    ({Symbol("k"): None}, b"\xc1\x05\x02\xa3\x01k\x40"),
    ({Symbol(""): b"x" * 250}, b"\xc1\xff\x02\xa3\x00\xa0\xfa" + b"x" * 250),
    ({Symbol(""): b"x" * 251}, b"\xd1\x00\x00\x01\x03\x00\x00\x00\x02\xa3\x00\xa0\xfb" + b"x" * 251),
    (Array("int", ()), b"\xe0\x02\x00\x71"),
    (Array("int", (Int(1), Int(-1))), b"\xe0\x0a\x02\x71\x00\x00\x00\x01\xff\xff\xff\xff"),
    (Array("ubyte", (UByte(7),) * 253), b"\xe0\xff\xfd\x50" + b"\x07" * 253),
    (Array("ubyte", (UByte(7),) * 254), b"\xf0\x00\x00\x01\x03\x00\x00\x00\xfe\x50" + b"\x07" * 254),
    (Array("boolean", (True, False)), b"\xe0\x04\x02\x56\x01\x00"),
    (Array("symbol", (Symbol("a"),)), b"\xe0\x07\x01\xb3\x00\x00\x00\x01a"),
    (Array("list", ([],)), b"\xe0\x0a\x01\xd0\x00\x00\x00\x04\x00\x00\x00\x00"),
    (
        Array("described", (Described(ULong(1), UInt(2)),), ULong(1), "uint"),
        b"\xe0\x09\x01\x00\x53\x01\x70\x00\x00\x00\x02",
    ),
    (
        Array("array", (Array("ubyte", (UByte(1),)),)),
        b"\xe0\x0c\x01\xf0\x00\x00\x00\x06\x00\x00\x00\x01\x50\x01",
    ),
    # Described values: a small ulong descriptor is 00 53 xx, a symbol descriptor 00 a3 ...
    (Described(ULong(0x10), None), b"\x00\x53\x10\x40"),
    (Described(0x10, None), b"\x00\x53\x10\x40"),
    (Described(ULong(0), None), b"\x00\x44\x40"),
    (Described(ULong(0x100), None), b"\x00\x80\x00\x00\x00\x00\x00\x00\x01\x00\x40"),
    (Described(Symbol("amqp:open:list"), None), b"\x00\xa3\x0eamqp:open:list\x40"),
    (Described("x", None), b"\x00\xa3\x01x\x40"),
    (
        Described(ULong(0x10), ["container-id"]),
        b"\x00\x53\x10\xc0\x0f\x01\xa1\x0ccontainer-id",
    ),
    (Described(ULong(0x77), Described(ULong(0x75), b"")), b"\x00\x53\x77\x00\x53\x75\xa0\x00"),
]


@pytest.mark.parametrize(("value", "expected"), EXACT, ids=[repr(v)[:40] for v, _ in EXACT])
def test_exact_encoding(value: Any, expected: bytes) -> None:
    assert codec.encode(value) == expected
    assert codec.skip_value(expected, 0) == len(expected)
    decoded = codec.decode(expected)
    if isinstance(value, Described) and type(value.descriptor) is int:
        value = Described(ULong(value.descriptor), value.value)
    elif isinstance(value, Described) and type(value.descriptor) is str:
        value = Described(Symbol(value.descriptor), value.value)
    assert_same(value, decoded)


@FAST
@given(descriptors, values(1))
def test_described_prefix(descriptor: Any, inner: Any) -> None:
    data = codec.encode(Described(descriptor, inner))
    assert data[0] == 0x00
    if isinstance(descriptor, Symbol):
        assert data[1] in (0xA3, 0xB3)
        head = codec.encode(descriptor)
    elif descriptor == 0:
        assert data[1] == 0x44
        head = b"\x44"
    elif descriptor <= 0xFF:
        assert data[1:3] == bytes([0x53, descriptor])
        head = data[1:3]
    else:
        assert data[1:10] == b"\x80" + struct.pack(">Q", descriptor)
        head = data[1:10]
    assert data[1 + len(head) :] == codec.encode(inner)


def _expected_header(small: int, large: int, count: int, body_len: int) -> bytes:
    if body_len + 1 <= 0xFF and count <= 0xFF:
        return bytes([small, body_len + 1, count])
    return bytes([large]) + struct.pack(">II", body_len + 4, count)


@FAST
@given(st.one_of(st.integers(0, 0xFFFFFFFF), st.integers(0, 0x1FF)))
def test_uint_constructor_choice(x: int) -> None:
    data = codec.encode(UInt(x))
    if x == 0:
        assert data == b"\x43"
    elif x <= 0xFF:
        assert data == bytes([0x52, x])
    else:
        assert data == b"\x70" + struct.pack(">I", x)


@FAST
@given(st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 0x1FF)))
def test_ulong_constructor_choice(x: int) -> None:
    data = codec.encode(ULong(x))
    if x == 0:
        assert data == b"\x44"
    elif x <= 0xFF:
        assert data == bytes([0x53, x])
    else:
        assert data == b"\x80" + struct.pack(">Q", x)


@FAST
@given(st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-300, 300)))
def test_int_constructor_choice(x: int) -> None:
    data = codec.encode(Int(x))
    if -128 <= x <= 127:
        assert data == b"\x54" + struct.pack(">b", x)
    else:
        assert data == b"\x71" + struct.pack(">i", x)


@FAST
@given(st.one_of(st.integers(*I64), st.integers(-300, 300)))
def test_long_constructor_choice(x: int) -> None:
    data = codec.encode(x)
    if -128 <= x <= 127:
        assert data == b"\x55" + struct.pack(">b", x)
    else:
        assert data == b"\x81" + struct.pack(">q", x)


@MEDIUM
@given(st.one_of(st.binary(max_size=20), st.binary(min_size=240, max_size=300)))
def test_binary_constructor_choice(value: bytes) -> None:
    data = codec.encode(value)
    if len(value) <= 0xFF:
        assert data == bytes([0xA0, len(value)]) + value
    else:
        assert data == b"\xb0" + struct.pack(">I", len(value)) + value
    round_trip(value)


@MEDIUM
@given(st.one_of(st.text(max_size=20), st.text(min_size=60, max_size=300)))
def test_string_constructor_choice(value: str) -> None:
    raw = value.encode("utf-8")
    data = codec.encode(value)
    if len(raw) <= 0xFF:
        assert data == bytes([0xA1, len(raw)]) + raw
    else:
        assert data == b"\xb1" + struct.pack(">I", len(raw)) + raw
    round_trip(value)


@MEDIUM
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=200, max_size=300))
def test_symbol_constructor_choice(text: str) -> None:
    raw = text.encode("ascii")
    data = codec.encode(Symbol(text))
    if len(raw) <= 0xFF:
        assert data == bytes([0xA3, len(raw)]) + raw
    else:
        assert data == b"\xb3" + struct.pack(">I", len(raw)) + raw
    round_trip(Symbol(text))


@MEDIUM
@given(st.lists(st.one_of(longs, st.binary(max_size=30), nulls), max_size=60))
def test_list_constructor_choice(value: list[Any]) -> None:
    data = codec.encode(value)
    if not value:
        assert data == b"\x45"
    else:
        body = b"".join(codec.encode(v) for v in value)
        assert data == _expected_header(0xC0, 0xD0, len(value), len(body)) + body
    round_trip(value)


@MEDIUM
@given(st.dictionaries(st.one_of(longs, symbols), st.one_of(longs, st.binary(max_size=30)), max_size=30))
def test_map_constructor_choice(value: dict[Any, Any]) -> None:
    data = codec.encode(value)
    body = b"".join(codec.encode(k) + codec.encode(v) for k, v in value.items())
    assert data == _expected_header(0xC1, 0xD1, 2 * len(value), len(body)) + body
    round_trip(value)


@MEDIUM
@given(st.one_of(st.lists(ubytes, max_size=300), st.lists(ubytes, min_size=250, max_size=300)))
def test_array_constructor_choice(items: list[UByte]) -> None:
    data = codec.encode(Array("ubyte", tuple(items)))
    body = b"\x50" + bytes(items)
    assert data == _expected_header(0xE0, 0xF0, len(items), len(body)) + body
    round_trip(Array("ubyte", tuple(items)))


@MEDIUM
@given(st.lists(st.one_of(longs, ints, uints), min_size=20, max_size=120))
def test_large_lists_round_trip(value: list[Any]) -> None:
    round_trip(value)
    round_trip({i: v for i, v in enumerate(value)})
    round_trip(Described(ULong(0x77), value))


@MEDIUM
@given(st.sampled_from(sorted(SCALAR_ELEMENTS)), st.data())
def test_large_arrays_round_trip(element: str, data: st.DataObject) -> None:
    items = data.draw(st.lists(SCALAR_ELEMENTS[element], min_size=30, max_size=300))
    round_trip(Array(element, tuple(items)))


# --------------------------------------------------------------------------------------------
# The decoder accepts every valid encoding, not only the canonical one
# --------------------------------------------------------------------------------------------

ALTERNATIVES: list[tuple[Any, list[bytes]]] = [
    (True, [b"\x41", b"\x56\x01"]),
    (False, [b"\x42", b"\x56\x00"]),
    (UInt(5), [b"\x70\x00\x00\x00\x05", b"\x52\x05"]),
    (UInt(0), [b"\x43", b"\x52\x00", b"\x70\x00\x00\x00\x00"]),
    (UInt(255), [b"\x52\xff", b"\x70\x00\x00\x00\xff"]),
    (ULong(5), [b"\x80" + b"\x00" * 7 + b"\x05", b"\x53\x05"]),
    (ULong(0), [b"\x44", b"\x53\x00", b"\x80" + b"\x00" * 8]),
    (Int(5), [b"\x71\x00\x00\x00\x05", b"\x54\x05"]),
    (Int(-1), [b"\x71\xff\xff\xff\xff", b"\x54\xff"]),
    (Int(-128), [b"\x71\xff\xff\xff\x80", b"\x54\x80"]),
    (5, [b"\x81" + b"\x00" * 7 + b"\x05", b"\x55\x05"]),
    (-1, [b"\x81" + b"\xff" * 8, b"\x55\xff"]),
    (b"ab", [b"\xa0\x02ab", b"\xb0\x00\x00\x00\x02ab"]),
    (b"", [b"\xa0\x00", b"\xb0\x00\x00\x00\x00"]),
    ("ab", [b"\xa1\x02ab", b"\xb1\x00\x00\x00\x02ab"]),
    ("", [b"\xa1\x00", b"\xb1\x00\x00\x00\x00"]),
    (Symbol("ab"), [b"\xa3\x02ab", b"\xb3\x00\x00\x00\x02ab"]),
    ([], [b"\x45", b"\xc0\x01\x00", b"\xd0\x00\x00\x00\x04\x00\x00\x00\x00"]),
    (
        [5, UInt(5)],
        [
            b"\xc0\x05\x02\x55\x05\x52\x05",
            b"\xd0\x00\x00\x00\x12\x00\x00\x00\x02"
            + b"\x81\x00\x00\x00\x00\x00\x00\x00\x05"
            + b"\x70\x00\x00\x00\x05",
        ],
    ),
    ({}, [b"\xc1\x01\x00", b"\xd1\x00\x00\x00\x04\x00\x00\x00\x00"]),
    (
        {Symbol("k"): UInt(1)},
        [
            b"\xc1\x06\x02\xa3\x01k\x52\x01",
            b"\xd1\x00\x00\x00\x0f\x00\x00\x00\x02\xb3\x00\x00\x00\x01k\x70\x00\x00\x00\x01",
        ],
    ),
    (
        Array("uint", (UInt(5), UInt(7))),
        [
            b"\xe0\x0a\x02\x70\x00\x00\x00\x05\x00\x00\x00\x07",
            b"\xe0\x04\x02\x52\x05\x07",
            b"\xf0\x00\x00\x00\x07\x00\x00\x00\x02\x52\x05\x07",
        ],
    ),
    (Array("uint", (UInt(0),)), [b"\xe0\x02\x01\x43", b"\xe0\x03\x01\x52\x00"]),
    (Array("ulong", (ULong(9),)), [b"\xe0\x03\x01\x53\x09", b"\xe0\x0a\x01\x80" + b"\x00" * 7 + b"\x09"]),
    (Array("int", (Int(-2),)), [b"\xe0\x03\x01\x54\xfe", b"\xe0\x06\x01\x71\xff\xff\xff\xfe"]),
    (Array("long", (-2,)), [b"\xe0\x03\x01\x55\xfe", b"\xe0\x0a\x01\x81" + b"\xff" * 7 + b"\xfe"]),
    (Array("boolean", (True,)), [b"\xe0\x02\x01\x41", b"\xe0\x03\x01\x56\x01"]),
    (Array("boolean", (False,)), [b"\xe0\x02\x01\x42", b"\xe0\x03\x01\x56\x00"]),
    (
        Array("string", ("a", "")),
        [b"\xe0\x05\x02\xa1\x01a\x00", b"\xe0\x0b\x02\xb1\x00\x00\x00\x01a\x00\x00\x00\x00"],
    ),
    (Array("binary", (b"a",)), [b"\xe0\x04\x01\xa0\x01a", b"\xe0\x07\x01\xb0\x00\x00\x00\x01a"]),
    (Array("symbol", (Symbol("a"),)), [b"\xe0\x04\x01\xa3\x01a", b"\xe0\x07\x01\xb3\x00\x00\x00\x01a"]),
    (Array("list", ([],)), [b"\xe0\x02\x01\x45", b"\xe0\x04\x01\xc0\x01\x00"]),
    (Array("list", ([None],)), [b"\xe0\x05\x01\xc0\x02\x01\x40"]),
    (Array("map", ({None: None},)), [b"\xe0\x06\x01\xc1\x03\x02\x40\x40"]),
    (Array("array", (Array("ubyte", (UByte(1),)),)), [b"\xe0\x06\x01\xe0\x03\x01\x50\x01"]),
    (
        Array("described", (Described(ULong(1), UInt(2)),), ULong(1), "uint"),
        [
            b"\xe0\x06\x01\x00\x53\x01\x52\x02",
            b"\xe0\x0d\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x01\x52\x02",
        ],
    ),
    (
        Array("described", (Described(Symbol("d"), UByte(2)),), Symbol("d"), "ubyte"),
        [b"\xe0\x0a\x01\x00\xb3\x00\x00\x00\x01d\x50\x02"],
    ),
    (
        Described(ULong(0x10), None),
        [b"\x00\x53\x10\x40", b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x10\x40"],
    ),
    (
        Described(Symbol("x"), UInt(1)),
        [b"\x00\xa3\x01x\x52\x01", b"\x00\xb3\x00\x00\x00\x01x\x70\x00\x00\x00\x01"],
    ),
]


@pytest.mark.parametrize(
    ("value", "encoding"),
    [(v, e) for v, encodings in ALTERNATIVES for e in encodings],
    ids=[f"{v!r}:{e.hex()}"[:60] for v, encodings in ALTERNATIVES for e in encodings],
)
def test_decoder_accepts_alternative_encodings(value: Any, encoding: bytes) -> None:
    assert_same(value, codec.decode(encoding))
    assert codec.skip_value(encoding, 0) == len(encoding)


def _alt_variable(small: int, large: int, data: bytes, rnd: random.Random) -> bytes:
    options = [bytes([large]) + struct.pack(">I", len(data)) + data]
    if len(data) <= 0xFF:
        options.append(bytes([small, len(data)]) + data)
    return rnd.choice(options)


def _alt_compound(small: int, large: int, count: int, body: bytes, rnd: random.Random) -> bytes:
    options = [bytes([large]) + struct.pack(">II", len(body) + 4, count) + body]
    if len(body) + 1 <= 0xFF and count <= 0xFF:
        options.append(bytes([small, len(body) + 1, count]) + body)
    return rnd.choice(options)


def _alt_int(value: int, options: list[tuple[int, str, int, int]]) -> list[bytes]:
    """Encodings from ``(code, struct format, lo, hi)`` whose range holds ``value``."""
    out = []
    for code, fmt, lo, hi in options:
        if lo <= value <= hi:
            out.append(bytes([code]) + (struct.pack(fmt, value) if fmt else b""))
    return out


_INT_FORMS: dict[type, list[tuple[int, str, int, int]]] = {
    UByte: [(0x50, ">B", 0, 0xFF)],
    UShort: [(0x60, ">H", 0, 0xFFFF)],
    UInt: [(0x70, ">I", 0, 0xFFFFFFFF), (0x52, ">B", 0, 0xFF), (0x43, "", 0, 0)],
    ULong: [(0x80, ">Q", 0, 2**64 - 1), (0x53, ">B", 0, 0xFF), (0x44, "", 0, 0)],
    Byte: [(0x51, ">b", -128, 127)],
    Short: [(0x61, ">h", -32768, 32767)],
    Int: [(0x71, ">i", -(2**31), 2**31 - 1), (0x54, ">b", -128, 127)],
    int: [(0x81, ">q", *I64), (0x55, ">b", -128, 127)],
    Timestamp: [(0x83, ">q", *I64)],
}


def alt_encode(value: Any, rnd: random.Random) -> bytes:
    """A randomly chosen valid encoding of ``value``; not necessarily the canonical one."""
    t = type(value)
    if value is None:
        return b"\x40"
    if t is bool:
        return rnd.choice([b"\x41" if value else b"\x42", b"\x56\x01" if value else b"\x56\x00"])
    if t in _INT_FORMS:
        return rnd.choice(_alt_int(value, _INT_FORMS[t]))
    if t is Float:
        return b"\x72" + struct.pack(">f", value)
    if t is float:
        return b"\x82" + struct.pack(">d", value)
    if t is Decimal32:
        return b"\x74" + value
    if t is Decimal64:
        return b"\x84" + value
    if t is Decimal128:
        return b"\x94" + value
    if t is Char:
        return b"\x73" + struct.pack(">I", ord(value))
    if t is uuid.UUID:
        return b"\x98" + value.bytes
    if t is bytes:
        return _alt_variable(0xA0, 0xB0, value, rnd)
    if t is str:
        return _alt_variable(0xA1, 0xB1, value.encode("utf-8"), rnd)
    if t is Symbol:
        return _alt_variable(0xA3, 0xB3, value.encode("ascii"), rnd)
    if t is list:
        body = b"".join(alt_encode(v, rnd) for v in value)
        if not value and rnd.random() < 0.5:
            return b"\x45"
        return _alt_compound(0xC0, 0xD0, len(value), body, rnd)
    if t is dict:
        body = b"".join(alt_encode(k, rnd) + alt_encode(v, rnd) for k, v in value.items())
        return _alt_compound(0xC1, 0xD1, 2 * len(value), body, rnd)
    if t is Described:
        return b"\x00" + alt_encode(value.descriptor, rnd) + alt_encode(value.value, rnd)
    if t is Array:
        return _alt_compound(0xE0, 0xF0, len(value.items), _alt_array_contents(value, rnd), rnd)
    raise AssertionError(f"no alternative encoder for {t}")


_FIXED_ELEMENT: dict[str, tuple[int, str]] = {
    "ubyte": (0x50, ">B"),
    "ushort": (0x60, ">H"),
    "byte": (0x51, ">b"),
    "short": (0x61, ">h"),
    "float": (0x72, ">f"),
    "double": (0x82, ">d"),
    "char": (0x73, ">I"),
    "timestamp": (0x83, ">q"),
}
# Element types with a wide form and a one-byte form (for values that fit in it).
_WIDE_OR_SMALL: dict[str, tuple[int, str, int, str, int, int]] = {
    "uint": (0x70, ">I", 0x52, ">B", 0, 0xFF),
    "ulong": (0x80, ">Q", 0x53, ">B", 0, 0xFF),
    "int": (0x71, ">i", 0x54, ">b", -128, 127),
    "long": (0x81, ">q", 0x55, ">b", -128, 127),
}
_RAW_ELEMENT = {"decimal32": 0x74, "decimal64": 0x84, "decimal128": 0x94}
_VARIABLE_ELEMENT = {"binary": (0xA0, 0xB0), "string": (0xA1, 0xB1), "symbol": (0xA3, 0xB3)}


def _alt_array_contents(array: Array, rnd: random.Random) -> bytes:
    """Element constructor and element bodies, with a randomly chosen valid constructor."""
    if array.element == "described":
        head = b"\x00" + alt_encode(array.descriptor, rnd)
        element = array.inner
        assert element is not None
        items = tuple(item.value for item in array.items)
    else:
        head = b""
        element = array.element
        items = array.items
    return head + _alt_elements(element, items, rnd)


def _alt_elements(element: str, items: tuple[Any, ...], rnd: random.Random) -> bytes:
    if element == "boolean":
        return b"\x56" + bytes(1 if v else 0 for v in items)
    if element in _FIXED_ELEMENT:
        code, fmt = _FIXED_ELEMENT[element]
        return bytes([code]) + b"".join(struct.pack(fmt, ord(v) if element == "char" else v) for v in items)
    if element in _WIDE_OR_SMALL:
        wide, wide_fmt, small, small_fmt, lo, hi = _WIDE_OR_SMALL[element]
        if all(lo <= v <= hi for v in items) and rnd.random() < 0.5:
            return bytes([small]) + b"".join(struct.pack(small_fmt, v) for v in items)
        return bytes([wide]) + b"".join(struct.pack(wide_fmt, v) for v in items)
    if element in _RAW_ELEMENT:
        return bytes([_RAW_ELEMENT[element]]) + b"".join(items)
    if element == "uuid":
        return b"\x98" + b"".join(v.bytes for v in items)
    if element in _VARIABLE_ELEMENT:
        small, large = _VARIABLE_ELEMENT[element]
        raw = [v if element == "binary" else v.encode("utf-8") for v in items]
        if all(len(r) <= 0xFF for r in raw) and rnd.random() < 0.5:
            return bytes([small]) + b"".join(bytes([len(r)]) + r for r in raw)
        return bytes([large]) + b"".join(struct.pack(">I", len(r)) + r for r in raw)
    if element in ("list", "map", "array"):
        small, large = {"list": (0xC0, 0xD0), "map": (0xC1, 0xD1), "array": (0xE0, 0xF0)}[element]
        bodies: list[tuple[int, bytes]] = []
        for v in items:
            if element == "list":
                bodies.append((len(v), b"".join(alt_encode(x, rnd) for x in v)))
            elif element == "map":
                pairs = b"".join(alt_encode(k, rnd) + alt_encode(x, rnd) for k, x in v.items())
                bodies.append((2 * len(v), pairs))
            else:
                bodies.append((len(v.items), _alt_array_contents(v, rnd)))
        if all(len(b) + 1 <= 0xFF and n <= 0xFF for n, b in bodies) and rnd.random() < 0.5:
            return bytes([small]) + b"".join(bytes([len(b) + 1, n]) + b for n, b in bodies)
        return bytes([large]) + b"".join(struct.pack(">II", len(b) + 4, n) + b for n, b in bodies)
    raise AssertionError(element)


@HEAVY
@given(any_value, st.randoms(use_true_random=False))
def test_decoder_accepts_randomly_chosen_valid_encodings(value: Any, rnd: random.Random) -> None:
    data = alt_encode(value, rnd)
    assert_same(value, codec.decode(data))
    assert codec.skip_value(data, 0) == codec.decode_value(data, 0)[1] == len(data)
    # Re-encoding normalises to the canonical form.
    assert codec.encode(codec.decode(data)) == codec.encode(value)


# --------------------------------------------------------------------------------------------
# Encode errors
# --------------------------------------------------------------------------------------------

UNENCODABLE: list[Any] = [
    UInt(-1),
    UInt(2**32),
    UByte(256),
    UByte(-1),
    UShort(0x10000),
    UShort(-1),
    ULong(-1),
    ULong(2**64),
    Byte(128),
    Byte(-129),
    Short(32768),
    Short(-32769),
    Int(2**31),
    Int(-(2**31) - 1),
    2**63,
    -(2**63) - 1,
    Long(2**63),
    Timestamp(2**63),
    Timestamp(-(2**63) - 1),
    Float(1e300),
    Float(-1e300),
    Symbol("caf\u00e9"),
    Symbol("\u2603"),
    Char("ab"),
    Char(""),
    Char("\ud800"),
    Char("\udfff"),
    "lone \udc80 surrogate",
    Decimal32(b"abc"),
    Decimal64(b"x" * 9),
    Decimal128(b""),
    object(),
    {1, 2},
    Described(1.5, None),
    Described(True, None),
    Described(-1, None),
    Described(2**64, None),
    Described(Symbol("\u00e9"), None),
    Described(ULong(1), UInt(-1)),
    [1, UByte(300)],
    {Symbol("k"): Int(2**40)},
    {UInt(-5): None},
    Array("no-such-type", ()),
    Array("described", (), ULong(1), None),
    Array("described", (), ULong(1), "described"),
    Array("described", (), 1.5, "int"),
    Array("described", (), -1, "int"),
    Array("uint", (UInt(-1),)),
    Array("uint", (2**32,)),
    Array("ubyte", (256,)),
    Array("byte", (128,)),
    Array("int", (2**31,)),
    Array("long", (2**63,)),
    Array("ulong", (-1,)),
    Array("timestamp", (2**63,)),
    Array("float", (1e300,)),
    Array("decimal64", (b"1234567",)),
    Array("char", ("ab",)),
    Array("char", ("\ud800",)),
    Array("symbol", ("caf\u00e9",)),
    Array("string", ("\ud800",)),
    Array("list", ([UInt(-1)],)),
    Array("array", (Array("ubyte", (999,)),)),
    Array("described", (UInt(2**32),), ULong(1), "uint"),
]


@pytest.mark.parametrize("value", UNENCODABLE, ids=[re.sub(r" at 0x[0-9a-f]+", "", repr(v))[:50] for v in UNENCODABLE])
def test_unencodable_values_raise_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        codec.encode(value)


@FAST
@given(
    st.one_of(
        st.integers(max_value=-1).map(UInt),
        st.integers(min_value=2**32).map(UInt),
        st.integers(max_value=-1).map(UByte),
        st.integers(min_value=256).map(UByte),
        st.integers(max_value=-1).map(ULong),
        st.integers(min_value=2**64).map(ULong),
        st.integers(min_value=2**31).map(Int),
        st.integers(max_value=-(2**31) - 1).map(Int),
        st.integers(min_value=2**63),
        st.integers(min_value=128).map(Byte),
        st.integers(min_value=32768).map(Short),
        st.text(min_size=2).map(Char),
        st.tuples(ascii_text, st.characters(min_codepoint=0x80, exclude_categories=("Cs",)), ascii_text).map(
            lambda parts: Symbol("".join(parts))
        ),
    )
)
def test_out_of_range_values_raise_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError):
        codec.encode(value)


def test_encode_error_is_not_a_protocol_error() -> None:
    assert issubclass(EncodeError, ValueError)
    assert not issubclass(EncodeError, ProtocolError)
    assert issubclass(DecodeError, ProtocolError)


# --------------------------------------------------------------------------------------------
# Decode errors on framing of the whole buffer
# --------------------------------------------------------------------------------------------


@MEDIUM
@given(values(2), st.binary(min_size=1, max_size=16))
def test_trailing_bytes_raise_decode_error(value: Any, extra: bytes) -> None:
    data = codec.encode(value)
    with pytest.raises(DecodeError):
        codec.decode(data + extra)
    # decode_value reads just the one value and reports where it ends.
    assert codec.decode_value(data + extra, 0)[1] == len(data)


def test_empty_buffer_raises_decode_error() -> None:
    with pytest.raises(DecodeError):
        codec.decode(b"")
    with pytest.raises(DecodeError):
        codec.decode_value(b"", 0)
    with pytest.raises(DecodeError):
        codec.skip_value(b"", 0)
    with pytest.raises(DecodeError):
        codec.skip_value(b"\x40", 1)


@MEDIUM
@given(values(2))
def test_every_truncation_raises_decode_error(value: Any) -> None:
    data = codec.encode(value)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            codec.decode(data[:cut])
        with pytest.raises(DecodeError):
            codec.skip_value(data[:cut], 0)
