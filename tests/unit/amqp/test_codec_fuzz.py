"""Decoder fuzzing: malformed input may only ever raise ``DecodeError``, and never slowly.

Every input goes through :func:`codec.decode`, :func:`codec.decode_value` and :func:`codec.skip_value`.
Any exception other than :class:`DecodeError` (``IndexError``, ``struct.error``, ``RecursionError``,
``MemoryError``, ``TypeError`` ...) fails the test.
"""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sodalite.amqp import codec
from sodalite.amqp.errors import DecodeError, ProtocolError
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

FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Every constructor byte the decoder knows, to start random inputs with something it will follow.
KNOWN_CODES = sorted(
    {
        0x00, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x60, 0x61,
        0x70, 0x71, 0x72, 0x73, 0x74, 0x80, 0x81, 0x82, 0x83, 0x84, 0x94, 0x98, 0xA0, 0xA1, 0xA3, 0xB0,
        0xB1, 0xB3, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0,
    }
)  # fmt: skip


def same(a: Any, b: Any) -> bool:
    """Equal in value and exact type, recursively; floats by bit pattern."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if isinstance(a, Array):
        return (
            a.element == b.element
            and a.inner == b.inner
            and same(a.descriptor, b.descriptor)
            and same(a.items, b.items)
        )
    return bool(a == b)


def check(buf: bytes) -> None:
    """The decoder either succeeds consistently or raises DecodeError; nothing else."""
    try:
        value = codec.decode(buf)
    except DecodeError:
        decoded = False
    else:
        decoded = True
        # A buffer that decodes is skipped in one go, and its value survives a re-encode.
        assert codec.skip_value(buf, 0) == len(buf)
        again = codec.decode(codec.encode(value))
        assert same(value, again), (value, again)

    try:
        _, end = codec.decode_value(buf, 0)
    except DecodeError:
        assert not decoded
    else:
        assert 0 < end <= len(buf)
        assert decoded or end < len(buf)

    try:
        end = codec.skip_value(buf, 0)
    except DecodeError:
        pass
    else:
        assert 0 < end <= len(buf)


# --------------------------------------------------------------------------------------------
# (a) random bytes
# --------------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(buf: bytes) -> None:
    check(buf)


@FUZZ
@given(st.sampled_from(KNOWN_CODES), st.binary(max_size=64))
def test_random_bytes_after_a_known_constructor(code: int, rest: bytes) -> None:
    check(bytes([code]) + rest)


@FUZZ
@given(
    st.sampled_from([0xC0, 0xC1, 0xE0, 0xD0, 0xD1, 0xF0]),
    st.integers(0, 40),
    st.integers(0, 40),
    st.lists(st.sampled_from(KNOWN_CODES) | st.integers(0, 255), max_size=40),
)
def test_random_compounds_with_plausible_headers(code: int, size: int, count: int, body: list[int]) -> None:
    """Compound headers whose size and count are small, so the decoder looks inside."""
    if code in (0xC0, 0xC1, 0xE0):
        head = bytes([code, size, count])
    else:
        head = bytes([code]) + struct.pack(">II", size, count)
    check(head + bytes(body))


# --------------------------------------------------------------------------------------------
# (b) valid encodings, mutated
# --------------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(0, 0xFF).map(UByte),
    st.integers(0, 0xFFFF).map(UShort),
    st.integers(0, 0xFFFFFFFF).map(UInt),
    st.integers(0, 2**64 - 1).map(ULong),
    st.integers(-128, 127).map(Byte),
    st.integers(-32768, 32767).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32).map(Float),
    st.floats(),
    st.binary(min_size=4, max_size=4).map(Decimal32),
    st.binary(min_size=8, max_size=8).map(Decimal64),
    st.binary(min_size=16, max_size=16).map(Decimal128),
    st.characters(exclude_categories=("Cs",)).map(Char),
    st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    st.uuids(),
    st.binary(max_size=20),
    st.text(max_size=20),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=20).map(Symbol),
)
_descriptors = st.one_of(st.integers(0, 2**64 - 1).map(ULong), st.text("abc:", max_size=8).map(Symbol))
_scalar_arrays = st.one_of(
    st.lists(st.integers(-(2**31), 2**31 - 1).map(Int), max_size=5).map(lambda xs: Array("int", tuple(xs))),
    st.lists(st.text(max_size=5), max_size=5).map(lambda xs: Array("string", tuple(xs))),
    st.lists(st.booleans(), max_size=5).map(lambda xs: Array("boolean", tuple(xs))),
    st.builds(
        lambda d, xs: Array("described", tuple(Described(d, UInt(x)) for x in xs), d, "uint"),
        _descriptors,
        st.lists(st.integers(0, 0xFFFFFFFF), max_size=4),
    ),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(_scalars, children, max_size=5),
        st.builds(Described, _descriptors, children),
        st.lists(st.lists(children, max_size=3), max_size=3).map(lambda xs: Array("list", tuple(xs))),
        st.lists(_scalar_arrays, max_size=3).map(lambda xs: Array("array", tuple(xs))),
    )


fuzz_values = st.recursive(st.one_of(_scalars, _scalar_arrays), _extend, max_leaves=20)


@st.composite
def mutated_encodings(draw: st.DrawFn) -> bytes:
    buf = bytearray(codec.encode(draw(fuzz_values)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate"]))
        if not buf:
            buf.append(draw(st.integers(0, 255)))
            continue
        i = draw(st.integers(0, len(buf) - 1))
        if op == "flip":
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]) | st.integers(0, 255))
        elif op == "insert":
            buf.insert(i, draw(st.integers(0, 255)))
        elif op == "delete":
            del buf[i]
        elif op == "truncate":
            del buf[i:]
        else:
            j = draw(st.integers(i, len(buf)))
            buf[i:i] = buf[i:j]
    return bytes(buf)


@FUZZ
@given(mutated_encodings())
def test_mutated_valid_encodings(buf: bytes) -> None:
    check(buf)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzz_values)
def test_every_single_byte_truncation_and_flip(value: Any) -> None:
    data = codec.encode(value)
    for i in range(len(data)):
        check(data[:i])
        check(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :])


# --------------------------------------------------------------------------------------------
# Hand-crafted hostile inputs
# --------------------------------------------------------------------------------------------


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def c8(code: int, count: int, body: bytes) -> bytes:
    """A list8/map8/array8 whose size byte is right for ``body``."""
    return bytes([code, len(body) + 1, count]) + body


def c32(code: int, count: int, body: bytes) -> bytes:
    """A list32/map32/array32 whose size field is right for ``body``."""
    return bytes([code]) + u32(len(body) + 4) + u32(count) + body


def nested_list32(levels: int) -> bytes:
    data = b"\x45"
    for _ in range(levels):
        data = c32(0xD0, 1, data)
    return data


def nested_list8(levels: int) -> bytes:
    data = b"\x45"
    for _ in range(levels):
        data = c8(0xC0, 1, data)
    return data


def nested_map32(levels: int) -> bytes:
    data = b"\x40"
    for _ in range(levels):
        data = c32(0xD1, 2, b"\x40" + data)
    return data


def nested_array32(levels: int) -> bytes:
    data = c32(0xF0, 1, b"\x50\x01")
    for _ in range(levels):
        data = c32(0xF0, 1, data)
    return data


def nested_described_values(levels: int) -> bytes:
    return b"\x00\x53\x10" * levels + b"\x40"


HOSTILE: dict[str, bytes] = {
    # Counts far larger than the bytes that could hold the elements.
    "list32 count 0xffffffff": b"\xd0" + u32(4) + u32(0xFFFFFFFF),
    "list32 count 0xffffffff, some body": b"\xd0" + u32(8) + u32(0xFFFFFFFF) + b"\x40\x40\x40\x40",
    "map32 count 0xffffffff": b"\xd1" + u32(4) + u32(0xFFFFFFFF),
    "map32 count 0xfffffffe, some body": b"\xd1" + u32(8) + u32(0xFFFFFFFE) + b"\x40\x40\x40\x40",
    "array32 count 0xffffffff of ubyte": b"\xf0" + u32(5) + u32(0xFFFFFFFF) + b"\x50",
    "array32 count 0xffffffff of true": b"\xf0" + u32(5) + u32(0xFFFFFFFF) + b"\x41",
    "array32 count 0xffffffff of null": b"\xf0" + u32(5) + u32(0xFFFFFFFF) + b"\x40",
    "array32 count 0xffffffff of list0": b"\xf0" + u32(5) + u32(0xFFFFFFFF) + b"\x45",
    "array32 count 0xffffffff of uint0": b"\xf0" + u32(5) + u32(0xFFFFFFFF) + b"\x43",
    "array32 count 0xffffffff described": b"\xf0" + u32(7) + u32(0xFFFFFFFF) + b"\x00\x53\x01\x41",
    "array8 count 0xff of true": b"\xe0\x02\xff\x41",
    "list8 count 0xff": b"\xc0\x01\xff",
    # Sizes larger than the buffer.
    "list32 size 0xffffffff": b"\xd0" + u32(0xFFFFFFFF) + u32(1) + b"\x40",
    "map32 size 0xffffffff": b"\xd1" + u32(0xFFFFFFFF) + u32(2) + b"\x40\x40",
    "array32 size 0xffffffff": b"\xf0" + u32(0xFFFFFFFF) + u32(1) + b"\x50\x01",
    "vbin32 length 0xffffffff": b"\xb0" + u32(0xFFFFFFFF) + b"abc",
    "str32 length 0xffffffff": b"\xb1" + u32(0xFFFFFFFF) + b"abc",
    "sym32 length 0xffffffff": b"\xb3" + u32(0xFFFFFFFF) + b"abc",
    "list8 size 0xff, short buffer": b"\xc0\xff\x01\x40",
    # Sizes too small to hold their own count.
    "list8 size 0": b"\xc0\x00\x00",
    "list32 size 0": b"\xd0" + u32(0) + u32(0),
    "list32 size 3": b"\xd0" + u32(3) + u32(0),
    "map8 size 0": b"\xc1\x00\x00",
    "array8 size 0": b"\xe0\x00\x00\x50",
    "array32 size 3": b"\xf0" + u32(3) + u32(0) + b"\x50",
    "array8 without element constructor": b"\xe0\x01\x00",
    # Sizes that disagree with the elements.
    "list8 size too big for its elements": b"\xc0\x03\x01\x40\x40",
    "list8 element overruns its size": b"\xc0\x02\x01\x52\x01",
    "array8 element overruns its size": b"\xe0\x03\x01\x70\x00\x00\x00\x01",
    # Deep nesting.
    "1000 nested list32": nested_list32(1000),
    "84 nested list8": nested_list8(84),
    "1000 levels of c0 ff 01": b"\xc0\xff\x01" * 1000 + b"\x45" * 255,
    "1000 nested map32": nested_map32(1000),
    "1000 nested array32": nested_array32(1000),
    "10000 nested described values": nested_described_values(10_000),
    "10000 nested descriptors": b"\x00" * 10_000 + b"\x53\x01\x40" * 10_000,
    "described chain of lists": (b"\x00\x53\x01" + b"\xd0" + u32(0xFF) + u32(1)) * 2000,
    "described chain of bare 00": b"\x00" * 100_000,
    "list of 1000 nested described": c32(0xD0, 1, nested_described_values(1000)),
    # Descriptors that are neither ulong nor symbol.
    "descriptor is a list": b"\x00\x45\x40",
    "descriptor is a string": b"\x00\xa1\x01x\x40",
    "descriptor is a uint": b"\x00\x52\x01\x40",
    "descriptor is described": b"\x00\x00\x53\x01\x40\x40",
    "descriptor missing": b"\x00",
    "described value missing": b"\x00\x53\x01",
    # Arrays with a bad element constructor.
    "array of described, descriptor is a list": c8(0xE0, 1, b"\x00\x45\x50\x07"),
    "array of described, descriptor is a list8": c8(0xE0, 1, b"\x00\xc0\x03\x01\x53\x01\x50\x07"),
    "array of described, descriptor is a map": c8(0xE0, 1, b"\x00\xc1\x01\x00\x50\x07"),
    "array of described, descriptor is described": c8(0xE0, 1, b"\x00\x00\x53\x01\x53\x01\x50\x07"),
    "array of described, descriptor is null": c8(0xE0, 1, b"\x00\x40\x50\x07"),
    "array of described, descriptor is an array": c8(0xE0, 1, b"\x00\xe0\x03\x01\x50\x01\x50\x07"),
    "array of described, nested descriptor": c8(0xE0, 1, b"\x00\x53\x01\x00\x53\x02\x50\x07"),
    "array of described, constructor truncated": b"\xe0\x03\x01\x00\x53",
    "array of null": c8(0xE0, 1, b"\x40"),
    "array of 0xff": c8(0xE0, 1, b"\xff\x00"),
    "array of 1000 nested described arrays": b"".join(
        b"\xf0" + u32(0xFFFF) + u32(1) + b"\x00\x53\x01" for _ in range(1000)
    ),
    # Invalid text.
    "str8 invalid utf-8": b"\xa1\x02\xc3\x28",
    "str8 lone continuation byte": b"\xa1\x01\x80",
    "str8 overlong nul": b"\xa1\x02\xc0\x80",
    "str8 encoded surrogate": b"\xa1\x03\xed\xa0\x80",
    "str8 beyond U+10FFFF": b"\xa1\x04\xf4\x90\x80\x80",
    "str8 truncated sequence": b"\xa1\x02\xe2\x82",
    "str32 invalid utf-8": b"\xb1" + u32(2) + b"\xff\xfe",
    "sym8 non-ascii": b"\xa3\x01\x80",
    "sym8 utf-8 letter": b"\xa3\x02\xc3\xa9",
    "sym32 non-ascii": b"\xb3" + u32(3) + b"ab\xff",
    "described with non-ascii symbol descriptor": b"\x00\xa3\x01\xff\x40",
    "array of sym8 non-ascii": c8(0xE0, 1, b"\xa3\x01\x80"),
    "array of str32 invalid utf-8": c8(0xE0, 1, b"\xb1" + u32(1) + b"\xff"),
    # Invalid chars.
    "char above U+10FFFF": b"\x73" + u32(0x110000),
    "char 0xffffffff": b"\x73" + u32(0xFFFFFFFF),
    "char high surrogate": b"\x73" + u32(0xD800),
    "char low surrogate": b"\x73" + u32(0xDFFF),
    "array of invalid char": c8(0xE0, 2, b"\x73" + u32(0x41) + u32(0xDC00)),
    # Malformed maps.
    "map8 odd count": c8(0xC1, 1, b"\x40"),
    "map8 count 3": c8(0xC1, 3, b"\x40\x40\x40"),
    "map32 odd count": c32(0xD1, 3, b"\x40\x40\x40"),
    "map with list0 key": c8(0xC1, 2, b"\x45\x40"),
    "map with list8 key": c8(0xC1, 2, b"\xc0\x02\x01\x40\x40"),
    "map with map key": c8(0xC1, 2, b"\xc1\x01\x00\x40"),
    "map with key an array of lists": c8(0xC1, 2, b"\xe0\x02\x01\x45\x40"),
    "map with key described list": c8(0xC1, 2, b"\x00\x53\x01\x45\x40"),
    "array of maps with odd count": c8(0xE0, 1, b"\xc1\x02\x01\x40"),
    "array of maps with list keys": c8(0xE0, 1, b"\xc1\x03\x02\x45\x40"),
    # Invalid booleans and constructors.
    "boolean byte 0x02": b"\x56\x02",
    "boolean byte 0xff": b"\x56\xff",
    "array of boolean byte 0x02": c8(0xE0, 2, b"\x56\x01\x02"),
    "reserved constructor 0x01": b"\x01",
    "reserved constructor 0xff": b"\xff",
    "reserved constructor 0x57": b"\x57\x00",
    "list containing a reserved constructor": c8(0xC0, 1, b"\x99"),
    # Truncated fixed-width values.
    "truncated uint": b"\x70\x00\x00",
    "truncated ulong": b"\x80\x00",
    "truncated uuid": b"\x98" + b"\x00" * 15,
    "truncated decimal128": b"\x94" + b"\x00" * 15,
    "truncated double": b"\x82\x00\x00\x00",
    "truncated vbin8": b"\xa0\x05abc",
    "truncated boolean": b"\x56",
    "truncated list32 header": b"\xd0\x00\x00",
}


@pytest.mark.parametrize("buf", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_input_raises_decode_error_quickly(buf: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(DecodeError) as info:
        codec.decode(buf)
    assert isinstance(info.value, ProtocolError)
    assert info.value.condition == "amqp:decode-error"
    with pytest.raises(DecodeError):
        codec.decode_value(buf, 0)
    # skip_value does not look inside compounds, so it may accept some of these; it must not crash.
    try:
        end = codec.skip_value(buf, 0)
    except DecodeError:
        pass
    else:
        assert 0 < end <= len(buf)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    "buf",
    [
        nested_described_values(10_000),
        b"\x00" * 10_000 + b"\x53\x01\x40" * 10_000,
        b"\x00" * 100_000,
        b"\x00\x53\x01" * 3000,
    ],
    ids=["described values", "described descriptors", "bare 00s", "unterminated chain"],
)
def test_skip_value_refuses_deep_described_chains(buf: bytes) -> None:
    started = time.perf_counter()
    with pytest.raises(DecodeError):
        codec.skip_value(buf, 0)
    assert time.perf_counter() - started < 1.0


def test_nesting_just_inside_the_limit_decodes() -> None:
    """The depth limit refuses hostile nesting, not the ordinary nesting of real messages."""
    value = codec.decode(nested_list32(20))
    for _ in range(20):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
    described = codec.decode(nested_described_values(20))
    assert isinstance(described, Described)
    assert codec.skip_value(nested_described_values(20), 0) == 3 * 20 + 1


def test_hostile_inputs_are_all_checked_by_the_generic_checker() -> None:
    for buf in HOSTILE.values():
        check(buf)
        check(buf + b"\x40")
        check(b"\x00\x53\x01" + buf)


def test_uuid_decodes_to_uuid() -> None:
    assert codec.decode(b"\x98" + bytes(16)) == uuid.UUID(int=0)
