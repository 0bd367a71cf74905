"""Service Bus messages on the wire: slicing received transfers, building deliveries, lock-token tags.

Messages are built with the project's own codec, section by section, so each test states exactly
which bytes the broker was given; the delivered payload is decoded the same way to check what a
client would read (sdk-wire-contract.md 3.2, 3.3, 4.2, 4.4).
"""

from __future__ import annotations

import decimal
import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sodalite.amqp import message as amqp_message
from sodalite.amqp.codec import decode, encode
from sodalite.amqp.types import (
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Int,
    Long,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
)
from sodalite.errors import ArgumentError, MessageSizeExceeded
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.model.partition_core import record_for
from sodalite.server import wire

BATCH = 0x80013700
LIMIT = 256 * 1024
T0 = 1_700_000_000_000

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78


def section(code: int, value: Any) -> bytes:
    return encode(Described(ULong(code), value))


def header(durable: bool | None = None, priority: int | None = None, ttl: Any = None,
           first_acquirer: bool | None = None, delivery_count: int | None = None) -> bytes:
    return section(HEADER, [durable, None if priority is None else UByte(priority), ttl, first_acquirer,
                            None if delivery_count is None else UInt(delivery_count)])


def msg_annotations(entries: dict[Any, Any]) -> bytes:
    return section(MESSAGE_ANNOTATIONS, entries)


def properties(message_id: Any = None, group_id: str | None = None, **extra: Any) -> bytes:
    fields: list[Any] = [None] * 13
    fields[0] = message_id
    fields[10] = group_id
    names = ["message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
             "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
             "reply_to_group_id"]
    for name, value in extra.items():
        fields[names.index(name)] = value
    while fields and fields[-1] is None:
        fields.pop()
    return section(PROPERTIES, fields)


def app_properties(values: dict[str, Any]) -> bytes:
    return section(APPLICATION_PROPERTIES, values)


def data(body: bytes) -> bytes:
    return section(DATA, body)


def parse_one(payload: bytes, limit: int = LIMIT) -> MessageDraft:
    [draft] = wire.parse_transfer(payload, 0, limit)
    assert wire.parse_message(payload, limit) == draft
    return draft


# ---- a message as the Python SDK sends it ----------------------------------------------------------

SDK_PROPERTIES = properties(
    "msg-1", "sess-A", to="to-addr", subject="subj", reply_to="reply", correlation_id="corr",
    content_type=Symbol("application/json"), absolute_expiry_time=Timestamp(T0 + 90_000),
    creation_time=Timestamp(T0), reply_to_group_id="reply-sess")
SDK_APP = app_properties({"color": "blue", "n": Int(54), "ok": True, "ratio": 0.5})
SDK_BODY = data(b"body-1")
SDK_ANNOTATIONS = {Symbol("x-opt-scheduled-enqueue-time"): Timestamp(T0 + 60_000),
                   Symbol("x-opt-partition-key"): "sess-A"}


def sdk_message(*, delivery_annotations: bool = True) -> bytes:
    """Header, annotations, properties, application-properties, data, then delivery-annotations last."""
    out = header(ttl=UInt(90_000)) + msg_annotations(SDK_ANNOTATIONS) + SDK_PROPERTIES + SDK_APP + SDK_BODY
    if delivery_annotations:
        out += section(DELIVERY_ANNOTATIONS, {Symbol("x-opt-lock-token"): uuid.uuid4()})
    return out


def test_sdk_message() -> None:
    d = parse_one(sdk_message())
    assert d.message_id == "msg-1"
    assert d.session_id == "sess-A"
    assert d.partition_key == "sess-A"
    assert d.scheduled_enqueue_time == T0 + 60_000
    assert d.time_to_live == 90_000
    assert d.durable is None and d.priority is None
    assert d.tail == SDK_PROPERTIES + SDK_APP + SDK_BODY
    assert d.annotation_count == 2
    assert decode(b"\xc1" + bytes((len(d.annotations) + 1, 4)) + d.annotations) == SDK_ANNOTATIONS
    assert d.size == len(d.annotations) + len(d.tail)


# ---- message ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("message_id", "text"), [
    ("msg-1", "msg-1"),
    ("", ""),
    (uuid.UUID("12345678-1234-5678-1234-567812345678"), "12345678-1234-5678-1234-567812345678"),
    (ULong(12345), "12345"),
    (ULong(2**64 - 1), str(2**64 - 1)),
    (b"\x01\xab\xff", "01abff"),
    (b"", ""),
    (None, None),
])
def test_message_id_types(message_id: Any, text: str | None) -> None:
    d = parse_one(properties(message_id) + data(b"x"))
    assert d.message_id == text
    assert d.message_id is None or type(d.message_id) is str


def test_message_id_text() -> None:
    assert wire.message_id_text(None) is None
    assert wire.message_id_text(Symbol("sym")) == "sym"
    assert wire.message_id_text(b"\x00\x10") == "0010"


def test_session_id_is_the_group_id() -> None:
    assert parse_one(properties("m", "my-session") + data(b"x")).session_id == "my-session"
    assert parse_one(properties("m") + data(b"x")).session_id is None
    assert parse_one(properties("m", reply_to_group_id="r") + data(b"x")).session_id is None


def test_properties_list_may_be_short_or_empty() -> None:
    assert parse_one(section(PROPERTIES, []) + data(b"x")).message_id is None
    assert parse_one(section(PROPERTIES, ["only-id"]) + data(b"x")).message_id == "only-id"


def test_no_sections_but_properties() -> None:
    # ServiceBusMessage(None) sends no body at all (contract 3.2).
    payload = properties("m")
    d = parse_one(payload)
    assert d.tail == payload and d.annotations == b"" and d.annotation_count == 0


# ---- header --------------------------------------------------------------------------------------


def test_header_fields() -> None:
    d = parse_one(header(durable=True, priority=7, ttl=UInt(1234), first_acquirer=True, delivery_count=3)
                  + data(b"x"))
    assert (d.durable, d.priority, d.time_to_live) == (True, 7, 1234)
    d = parse_one(header(durable=False) + data(b"x"))
    assert (d.durable, d.priority, d.time_to_live) == (False, None, None)
    d = parse_one(section(HEADER, []) + data(b"x"))
    assert (d.durable, d.priority, d.time_to_live) == (None, None, None)


def test_header_is_not_in_the_tail() -> None:
    body = data(b"x")
    assert parse_one(header(ttl=UInt(5)) + body).tail == body


def test_ttl_in_a_wider_integer_type_is_accepted() -> None:
    assert parse_one(header(ttl=ULong(90_000)) + data(b"x")).time_to_live == 90_000
    assert parse_one(header(ttl=UInt(2**32 - 1)) + data(b"x")).time_to_live == 2**32 - 1


@pytest.mark.parametrize("ttl", [Long(-1), Long(2**32), ULong(2**64 - 1)])
def test_ttl_outside_the_uint_range_is_refused(ttl: int) -> None:
    # header.ttl is a uint; a value that does not fit one could never be written back on delivery.
    with pytest.raises(ArgumentError):
        wire.parse_transfer(header(ttl=ttl) + data(b"x"), 0, LIMIT)


@pytest.mark.parametrize("priority", [Long(-1), Long(256), ULong(2**64 - 1)])
def test_priority_outside_the_ubyte_range_is_refused(priority: int) -> None:
    payload = section(HEADER, [None, priority]) + data(b"x")
    with pytest.raises(ArgumentError):
        wire.parse_transfer(payload, 0, LIMIT)


def test_priority_in_a_wider_integer_type_is_accepted() -> None:
    assert parse_one(section(HEADER, [None, Long(255)]) + data(b"x")).priority == 255
    assert parse_one(section(HEADER, [None, "high"]) + data(b"x")).priority is None


def test_header_that_is_not_a_list() -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(section(HEADER, "not a list") + data(b"x"), 0, LIMIT)


# ---- message annotations ---------------------------------------------------------------------------


SERVICE_OWNED = {
    "x-opt-sequence-number": Long(99), "x-opt-enqueued-time": Long(T0),
    "x-opt-locked-until": Timestamp(T0), "x-opt-lock-token": uuid.uuid4(),
    "x-opt-deadletter-source": "q", "x-opt-enqueue-sequence-number": Long(5),
    "x-opt-message-state": Int(1), "x-opt-partition-id": Int(0),
}


def test_service_owned_annotations_are_stripped() -> None:
    client = {Symbol("x-opt-partition-key"): "pk", Symbol("custom"): "kept", ULong(7): "ulong key"}
    entries: dict[Any, Any] = {**{Symbol(k): v for k, v in SERVICE_OWNED.items()}, **client}
    d = parse_one(msg_annotations(entries) + data(b"x"))
    assert d.annotation_count == 3
    assert decode(b"\xc1" + bytes((len(d.annotations) + 1, 6)) + d.annotations) == client
    assert d.partition_key == "pk"


def test_only_service_owned_annotations_leaves_none() -> None:
    d = parse_one(msg_annotations({Symbol(k): v for k, v in SERVICE_OWNED.items()}) + data(b"x"))
    assert (d.annotations, d.annotation_count) == (b"", 0)


def test_annotations_are_not_in_the_tail() -> None:
    tail = properties("m") + data(b"x")
    assert parse_one(msg_annotations({Symbol("a"): 1}) + tail).tail == tail


@pytest.mark.parametrize(("value", "expected"), [
    (Timestamp(T0), T0), (Long(T0), T0), ("tomorrow", None), (True, None), (None, None),
])
def test_scheduled_enqueue_time(value: Any, expected: int | None) -> None:
    d = parse_one(msg_annotations({Symbol("x-opt-scheduled-enqueue-time"): value}) + data(b"x"))
    assert d.scheduled_enqueue_time == expected


@pytest.mark.parametrize("value", [ULong(2**63), ULong(2**64 - 1)])
def test_scheduled_enqueue_time_beyond_a_timestamp_is_refused(value: int) -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(msg_annotations({Symbol("x-opt-scheduled-enqueue-time"): value}) + data(b"x"), 0, LIMIT)


def test_partition_key_must_be_a_string() -> None:
    assert parse_one(msg_annotations({Symbol("x-opt-partition-key"): Int(5)}) + data(b"x")).partition_key is None


def test_annotations_that_are_not_a_map() -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(section(MESSAGE_ANNOTATIONS, ["a", "list"]) + data(b"x"), 0, LIMIT)


# ---- delivery annotations, section order, verbatim tail ----------------------------------------------


@pytest.mark.parametrize("where", ["first", "after-body", "after-footer", "twice"])
def test_delivery_annotations_are_kept_in_front_wherever_they_are(where: str) -> None:
    da = section(DELIVERY_ANNOTATIONS, {Symbol("x-opt-lock-token"): uuid.uuid4(), Symbol("hop"): "x"})
    props, app, body = properties("m"), app_properties({"k": "v"}), data(b"payload")
    footer = section(FOOTER, {Symbol("hash"): b"\x00" * 4})
    payload = {
        "first": header(ttl=UInt(1)) + da + props + app + body + footer,
        "after-body": header(ttl=UInt(1)) + props + app + body + da + footer,
        "after-footer": header(ttl=UInt(1)) + props + app + body + footer + da,
        "twice": da + header(ttl=UInt(1)) + props + app + body + footer + da,
    }[where]
    d = parse_one(payload)
    kept = section(DELIVERY_ANNOTATIONS, {Symbol("hop"): "x"})  # the service's own lock token is dropped
    assert d.tail == kept + props + app + body + footer
    assert d.message_id == "m" and d.time_to_live == 1


def test_tail_is_verbatim_for_every_body_kind() -> None:
    props = properties("m")
    app = app_properties({"s": "é", "i": Int(-1), "d": 1.5, "u": uuid.UUID(int=1), "b": b"\x00",
                          "t": Timestamp(T0), "n": None})
    bodies = [
        data(b"a") + data(b"b" * 300),  # several data sections, one vbin32
        section(AMQP_SEQUENCE, [1, "two"]) + section(AMQP_SEQUENCE, []),
        section(AMQP_VALUE, {"nested": [1, {"x": None}]}),
        section(AMQP_VALUE, None),
    ]
    footer = section(FOOTER, {Symbol("f"): "v"})
    for body in bodies:
        for tail in (props + app + body + footer, props + body, body, app + body):
            assert parse_one(header(priority=4) + msg_annotations({Symbol("a"): "b"}) + tail).tail == tail
            assert parse_one(tail).tail == tail


def test_non_canonical_encodings_in_the_tail_are_kept_byte_for_byte() -> None:
    # A str32 where a str8 would do, a list32 where list0 would do: the broker must not "fix" them.
    app = b"\x00\x53\x74" + b"\xd1\x00\x00\x00\x0d\x00\x00\x00\x02" + b"\xa1\x01k" + b"\xb1\x00\x00\x00\x01v"
    body = b"\x00\x53\x77" + b"\xd0\x00\x00\x00\x04\x00\x00\x00\x00"
    assert decode(app) == Described(ULong(APPLICATION_PROPERTIES), {"k": "v"})
    assert parse_one(app + body).tail == app + body


def test_sections_with_long_or_symbolic_descriptors() -> None:
    ulong_header = b"\x00\x80" + (0x70).to_bytes(8, "big") + encode([None, None, UInt(42)])
    symbolic_props = encode(Described(Symbol("amqp:properties:list"), ["sym-id"]))
    symbolic_body = encode(Described(Symbol("amqp:data:binary"), b"xyz"))
    d = parse_one(ulong_header + symbolic_props + symbolic_body)
    assert (d.time_to_live, d.message_id) == (42, "sym-id")
    assert d.tail == symbolic_props + symbolic_body


# ---- batches -------------------------------------------------------------------------------------


def test_batch_splits_into_inner_messages() -> None:
    first = header(ttl=UInt(1000)) + msg_annotations({Symbol("x-opt-partition-key"): "p1"}) \
        + properties("m1", "s1") + app_properties({"i": Int(1)}) + data(b"one")
    second = properties("m2", "s2") + data(b"two" * 200)  # > 255 bytes: a vbin32 data section
    third = sdk_message()
    envelope = properties("m1", "s1") + msg_annotations({Symbol("x-opt-partition-key"): "p1"})
    payload = envelope + data(first) + data(second) + data(third)
    drafts = wire.parse_transfer(payload, BATCH, LIMIT)
    assert [d.message_id for d in drafts] == ["m1", "m2", "msg-1"]
    assert [d.session_id for d in drafts] == ["s1", "s2", "sess-A"]
    assert [d.partition_key for d in drafts] == ["p1", None, "sess-A"]
    assert [d.time_to_live for d in drafts] == [1000, None, 90_000]
    assert drafts[0].tail == properties("m1", "s1") + app_properties({"i": Int(1)}) + data(b"one")
    assert drafts[1].tail == second
    assert drafts == [wire.parse_message(m, LIMIT) for m in (first, second, third)]


def test_batch_of_one() -> None:
    inner = properties("only") + data(b"x")
    assert [d.message_id for d in wire.parse_transfer(properties("only") + data(inner), BATCH, LIMIT)] == ["only"]


def test_batch_without_messages() -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(properties("m"), BATCH, LIMIT)


def test_batch_data_section_that_is_not_binary() -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(properties("m") + section(DATA, "a string"), BATCH, LIMIT)


def test_batch_with_a_garbage_inner_message() -> None:
    with pytest.raises(ArgumentError):
        wire.parse_transfer(data(properties("ok") + data(b"x")) + data(b"\x00\x53\x99\x40"), BATCH, LIMIT)


def test_non_batch_format_is_one_message() -> None:
    # With the ordinary format a data section holding a message is just a body.
    inner = properties("inner") + data(b"x")
    [d] = wire.parse_transfer(data(inner), 0, LIMIT)
    assert d.message_id is None and d.tail == data(inner)


# ---- size ----------------------------------------------------------------------------------------


def test_message_at_the_limit_is_accepted() -> None:
    payload = properties("m") + data(b"x" * 1000)
    assert parse_one(payload, limit=len(payload)).message_id == "m"


def test_oversize_message() -> None:
    payload = properties("m") + data(b"x" * 1000)
    with pytest.raises(MessageSizeExceeded):
        wire.parse_transfer(payload, 0, len(payload) - 1)
    with pytest.raises(MessageSizeExceeded):
        wire.parse_message(payload, len(payload) - 1)


def test_oversize_message_inside_a_batch() -> None:
    small, large = properties("s") + data(b"x"), properties("l") + data(b"x" * 2000)
    with pytest.raises(MessageSizeExceeded):
        wire.parse_transfer(data(small) + data(large), BATCH, 1000)


def test_oversize_garbage_is_refused_for_its_size() -> None:
    with pytest.raises(MessageSizeExceeded):
        wire.parse_transfer(b"\xff" * 11, 0, 10)


# ---- garbage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [
    b"\x40",  # not a described value
    b"\x00",  # a descriptor constructor and nothing else
    b"\x00\x53",
    b"\x00\x53\x70",  # a header section without a value
    b"\x00\x53\x99\x40",  # no such section
    b"\x00\x53\x01\x40",
    b"\x00\xa3\x05hello\x40",  # unknown symbolic section
    b"\x00\x40\x40",  # null descriptor
    b"\x00\x53\x75\xa0\x10abc",  # data runs past the end
    b"\x00\x53\x70\xc0\x03\x05\x40",  # list count larger than its size
    b"\x00\x53\x73\xc0\x02\x01\xa1",  # properties list with a truncated string
    b"\x00\x53\x72\xc1\x02\x01\x40",  # a map with an odd element count
    b"\x00\x53\x72\xc1\x05\x02\xa1\x02\xc3\x28\x40",  # invalid UTF-8 in a key
    b"\x00\x53\x72\xc1\x04\x02\x45\x40",  # list0 as a map key: unhashable
    b"\x00\x53\x73\x45" + b"\x00" * 5,  # good section followed by garbage
    b"\x00" * 200,  # deeply nested descriptors
    data(b"x") + b"\x00\x53",  # truncated second section
])
def test_garbage_is_an_argument_error(payload: bytes) -> None:
    for message_format in (0, BATCH):
        with pytest.raises(ArgumentError):
            wire.parse_transfer(payload, message_format, LIMIT)


def _check_only_argument_errors(payload: bytes) -> None:
    for message_format in (0, BATCH):
        try:
            drafts = wire.parse_transfer(payload, message_format, LIMIT)
        except ArgumentError:
            continue
        for d in drafts:
            assert isinstance(d, MessageDraft)
            # whatever was accepted must be storable (64-bit integers) and deliverable
            record = record_for(d, T0, None)  # as the partition core stores it
            for n in (record.time_to_live, record.expires_at, record.scheduled_enqueue_time, record.priority):
                assert n is None or -(2**63) <= n < 2**63
            decode_delivery(wire.delivery_payload(record, T0))


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(payload: bytes) -> None:
    _check_only_argument_errors(payload)


@FUZZ
@given(st.binary(max_size=48), st.sampled_from([HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS,
                                                PROPERTIES, APPLICATION_PROPERTIES, DATA, FOOTER]))
def test_fuzz_section_values(value: bytes, code: int) -> None:
    """A valid section header in front of arbitrary bytes, so the value decoders get exercised."""
    _check_only_argument_errors(bytes((0x00, 0x53, code)) + value)
    _check_only_argument_errors(data(b"x") + bytes((0x00, 0x53, code)) + value)


@FUZZ
@given(st.binary(min_size=1, max_size=40), st.integers(0, 2))
def test_fuzz_annotation_and_header_contents(items: bytes, where: int) -> None:
    """Arbitrary encoded items inside a well-formed list/map wrapper, with plausible counts."""
    count = items[0] % 8
    body = items[1:]
    code = (HEADER, MESSAGE_ANNOTATIONS, PROPERTIES)[where]
    compound = b"\xc1" if code == MESSAGE_ANNOTATIONS else b"\xc0"
    value = compound + bytes((len(body) + 1, count)) + body
    _check_only_argument_errors(bytes((0x00, 0x53, code)) + value + data(b"x"))


AMQP_SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.binary(max_size=5), st.uuids(),
    st.integers(0, 2**8 - 1).map(UByte), st.integers(0, 2**32 - 1).map(UInt),
    st.integers(0, 2**64 - 1).map(ULong), st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1).map(Long), st.integers(-(2**63), 2**63 - 1).map(Timestamp),
)


@FUZZ
@given(st.lists(AMQP_SCALARS, max_size=6), AMQP_SCALARS, AMQP_SCALARS, st.lists(AMQP_SCALARS, max_size=13))
def test_fuzz_field_values(head: list[Any], scheduled: Any, key: Any, props: list[Any]) -> None:
    """Any AMQP value in the fields the broker reads: refused as an argument error, or storable and deliverable."""
    ann = msg_annotations({Symbol("x-opt-scheduled-enqueue-time"): scheduled, Symbol("x-opt-partition-key"): key})
    _check_only_argument_errors(section(HEADER, head) + ann + section(PROPERTIES, props) + data(b"x"))


@FUZZ
@given(st.data())
def test_fuzz_mutated_sdk_message(draw: st.DataObject) -> None:
    payload = bytearray(sdk_message())
    for _ in range(draw.draw(st.integers(1, 4))):
        i = draw.draw(st.integers(0, len(payload) - 1))
        payload[i] = draw.draw(st.integers(0, 255))
    cut = draw.draw(st.integers(0, len(payload)))
    _check_only_argument_errors(bytes(payload))
    _check_only_argument_errors(bytes(payload[:cut]))
    _check_only_argument_errors(properties("m") + data(bytes(payload)))


# ---- delivery ------------------------------------------------------------------------------------


def decode_delivery(payload: bytes) -> tuple[list[Any], dict[Any, Any], bytes]:
    """(header fields, annotations, the rest) of a delivered message; header and annotations come first."""
    sections = amqp_message.split_sections(payload)
    assert sections[0].code == HEADER
    head = decode(payload[sections[0].start:sections[0].end])
    assert isinstance(head, Described) and head.descriptor == HEADER
    rest_start = sections[0].end
    annotations_value: dict[Any, Any] = {}
    if len(sections) > 1 and sections[1].code == MESSAGE_ANNOTATIONS:
        value = decode(payload[sections[1].start:sections[1].end])
        assert isinstance(value, Described) and isinstance(value.value, dict)
        annotations_value = value.value
        rest_start = sections[1].end
    return head.value, annotations_value, payload[rest_start:]


def record_from(payload: bytes, *, seq: int = 7, count: int = 0) -> MessageRecord:
    d = parse_one(payload)
    return MessageRecord(seq, T0, d.message_id, d.session_id, d.partition_key, d.time_to_live, None,
                         d.scheduled_enqueue_time, count, MessageState.ACTIVE, d.durable, d.priority,
                         d.annotations, d.annotation_count, d.tail)


def test_delivery_of_an_sdk_message_locked() -> None:
    rec = record_from(sdk_message(), seq=42)
    head, ann, rest = decode_delivery(wire.delivery_payload(rec, T0 + 30_000))
    assert head == [None, None, UInt(90_000), None, UInt(0)]
    assert type(head[4]) is UInt and type(head[2]) is UInt
    expected: dict[Any, Any] = {"x-opt-sequence-number": 42, "x-opt-enqueued-time": T0,
                                "x-opt-locked-until": T0 + 30_000, **SDK_ANNOTATIONS}
    assert ann == expected
    assert all(type(k) is Symbol for k in ann)
    assert type(ann["x-opt-enqueued-time"]) is Timestamp
    assert type(ann["x-opt-locked-until"]) is Timestamp
    assert type(ann["x-opt-scheduled-enqueue-time"]) is Timestamp
    assert rest == rec.tail == SDK_PROPERTIES + SDK_APP + SDK_BODY


def test_delivery_annotations_carry_the_lock_token_then_the_clients() -> None:
    token = uuid.uuid4()
    rec = record_from(properties("m") + data(b"p") + section(DELIVERY_ANNOTATIONS, {Symbol("hop"): "x"}))
    payload = wire.delivery_payload(rec, T0, lock_token=token)
    sections = amqp_message.split_sections(payload)
    assert [s.code for s in sections][:3] == [HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS]
    assert amqp_message.section_value(payload, sections[1]) == {"x-opt-lock-token": token, "hop": "x"}
    assert payload[sections[2].end:] == properties("m") + data(b"p")
    unlocked = wire.delivery_payload(rec, None)
    assert amqp_message.section_value(unlocked, amqp_message.split_sections(unlocked)[1]) == {"hop": "x"}
    plain = record_from(properties("m") + data(b"p"))
    plain_payload = wire.delivery_payload(plain, None)
    assert [s.code for s in amqp_message.split_sections(plain_payload)][:2] == [HEADER, MESSAGE_ANNOTATIONS]


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(st.uuids())
def test_a_lock_token_alone_is_the_generic_encoders_section_byte_for_byte(token: uuid.UUID) -> None:
    # A PeekLock delivery of a message without delivery-annotations of its own (the common case)
    # gets its section from an encoding of the constant part made once, plus the token's bytes.
    rec = record_from(properties("m") + data(b"p"))
    payload = wire.delivery_payload(rec, T0, lock_token=token)
    sections = amqp_message.split_sections(payload)
    expected = amqp_message.encode_section(DELIVERY_ANNOTATIONS, {Symbol("x-opt-lock-token"): token})
    assert payload[sections[1].start:sections[1].end] == expected
    assert amqp_message.section_value(payload, sections[1]) == {"x-opt-lock-token": token}


def test_sequence_number_is_encoded_as_a_long() -> None:
    rec = record_from(properties("m") + data(b"x"), seq=3)
    payload = wire.delivery_payload(rec, None)
    key = b"\xa3\x15x-opt-sequence-number"
    at = payload.index(key) + len(key)
    assert payload[at] == 0x81 and int.from_bytes(payload[at + 1:at + 9], "big", signed=True) == 3
    key = b"\xa3\x13x-opt-enqueued-time"
    at = payload.index(key) + len(key)
    assert payload[at] == 0x83


def test_delivery_unlocked_has_no_locked_until() -> None:
    rec = record_from(properties("m") + data(b"x"))
    head, ann, rest = decode_delivery(wire.delivery_payload(rec, None))
    assert ann == {"x-opt-sequence-number": 7, "x-opt-enqueued-time": T0}
    assert head == [None, None, None, None, UInt(0)]
    assert rest == properties("m") + data(b"x")


def test_delivery_count_and_header_fields() -> None:
    rec = record_from(header(durable=True, priority=9, ttl=UInt(2**32 - 1)) + data(b"x"), count=5)
    head, _, rest = decode_delivery(wire.delivery_payload(rec, T0))
    assert head == [True, UByte(9), UInt(2**32 - 1), None, UInt(5)]
    assert rest == data(b"x")
    rec = record_from(header(durable=False, priority=0) + data(b"x"))
    assert decode_delivery(wire.delivery_payload(rec, T0))[0] == [False, UByte(0), None, None, UInt(0)]


def test_delivery_with_no_tail() -> None:
    rec = record_from(header(ttl=UInt(1)))
    head, ann, rest = decode_delivery(wire.delivery_payload(rec, None))
    assert rest == b"" and head[2] == 1 and set(ann) == {"x-opt-sequence-number", "x-opt-enqueued-time"}


def test_delivery_with_many_client_annotations_uses_a_map32() -> None:
    client = {Symbol(f"custom-{i}"): "v" * 20 for i in range(150)}  # > 255 bytes and > 127 keys
    rec = record_from(msg_annotations(client) + data(b"x"))
    payload = wire.delivery_payload(rec, T0 + 1)
    _, ann, rest = decode_delivery(payload)
    expected: dict[Any, Any] = {"x-opt-sequence-number": 7, "x-opt-enqueued-time": T0,
                                "x-opt-locked-until": T0 + 1, **client}
    assert ann == expected
    assert rest == data(b"x")


def test_delivery_annotations_near_the_map8_limit() -> None:
    for n in range(0, 300, 7):
        client = {Symbol("k"): "v" * n}
        rec = record_from(msg_annotations(client) + data(b"x"))
        for locked_until in (None, T0):
            _, ann, rest = decode_delivery(wire.delivery_payload(rec, locked_until))
            assert ann[Symbol("k")] == "v" * n and rest == data(b"x")


def test_delivery_of_a_redelivered_message_replaces_old_service_annotations() -> None:
    # A client re-sending a received message carries the old x-opt-* values (as longs): they are
    # stripped on input, so the delivery holds exactly one, fresh, of each.
    resent = msg_annotations({Symbol("x-opt-sequence-number"): Long(1), Symbol("x-opt-enqueued-time"): Long(5),
                          Symbol("x-opt-locked-until"): Long(6), Symbol("mine"): "m"}) + data(b"x")
    payload = wire.delivery_payload(record_from(resent, seq=100), None)
    assert payload.count(b"x-opt-sequence-number") == 1
    assert payload.count(b"x-opt-locked-until") == 0
    _, ann, _ = decode_delivery(payload)
    assert ann == {"x-opt-sequence-number": 100, "x-opt-enqueued-time": T0, "mine": "m"}


def test_delivery_of_a_record_from_the_partition() -> None:
    [draft] = wire.parse_transfer(sdk_message(), 0, LIMIT)
    # As the partition core stores it (numbered 1), delivered once due (the SDK message is scheduled
    # for T0 + 60 s) under a lock of 30 s taken at T0 + 60_001.
    rec = replace(record_for(draft, T0, None), sequence_number=1, state=MessageState.ACTIVE)
    _, ann, rest = decode_delivery(wire.delivery_payload(rec, T0 + 60_001 + 30_000))
    assert ann["x-opt-sequence-number"] == 1 and ann["x-opt-locked-until"] == T0 + 90_001
    assert rest == SDK_PROPERTIES + SDK_APP + SDK_BODY


# ---- lock tokens as delivery tags ------------------------------------------------------------------


def test_lock_token_tag_is_dotnet_guid_order() -> None:
    token = uuid.UUID("00000000-0000-0000-0000-000000000065")
    assert wire.lock_token_tag(token) == bytes(15) + b"\x65"  # captured, contract 4.2
    token = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
    assert wire.lock_token_tag(token) == bytes([4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16])
    assert wire.lock_token_tag(token) == token.bytes_le != token.bytes


@settings(max_examples=100, deadline=None)
@given(st.uuids())
def test_lock_token_tag_round_trip(token: uuid.UUID) -> None:
    tag = wire.lock_token_tag(token)
    assert len(tag) == 16
    assert wire.tag_lock_token(tag) == token
    assert uuid.UUID(bytes_le=tag) == token  # what the SDK computes from the tag


@pytest.mark.parametrize("tag", [b"", b"\x00" * 4, b"\x00" * 15, b"\x00" * 17])
def test_tags_of_other_lengths_are_not_lock_tokens(tag: bytes) -> None:
    assert wire.tag_lock_token(tag) is None


# ---- a MessageId for every message ---------------------------------------------------------------------


def test_a_message_without_properties_is_given_a_message_id_before_its_other_sections() -> None:
    da = section(DELIVERY_ANNOTATIONS, {Symbol("hop"): "x"})
    [d] = wire.received_messages(da + app_properties({"k": "v"}) + data(b"p"), 0, LIMIT)
    assert isinstance(d.message_id, str) and len(d.message_id) == 32
    codes = [s.code for s in amqp_message.split_sections(d.tail)]
    assert codes == [DELIVERY_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, DATA]
    props = amqp_message.split_sections(d.tail)[1]
    assert amqp_message.section_value(d.tail, props) == [d.message_id]
    assert d.tail.endswith(app_properties({"k": "v"}) + data(b"p"))


def test_a_null_message_id_is_replaced_and_the_other_properties_kept() -> None:
    [d] = wire.received_messages(properties(None, "sess", subject="s") + data(b"p"), 0, LIMIT)
    [again] = wire.received_messages(properties(None, "sess", subject="s") + data(b"p"), 0, LIMIT)
    assert d.message_id and again.message_id and d.message_id != again.message_id
    assert d.session_id == "sess"
    fields = amqp_message.section_value(d.tail, amqp_message.split_sections(d.tail)[0])
    assert fields[0] == d.message_id and fields[3] == "s" and fields[10] == "sess"
    assert d.tail.endswith(data(b"p"))


def test_a_message_id_that_was_sent_is_kept_byte_for_byte() -> None:
    payload = properties("mine") + data(b"p")
    [d] = wire.received_messages(payload, 0, LIMIT)
    assert d.message_id == "mine" and d.tail == payload


# ---- decimal128 for receivers that cannot read it ----------------------------------------------------


def _decimal128(sign: int, exponent: int, significand: int) -> Decimal128:
    return Decimal128(((sign << 127) | ((exponent + 6176) << 113) | significand).to_bytes(16, "big"))


@pytest.mark.parametrize(("sign", "exponent", "significand", "text"), [
    (0, -1, 15, "1.5"), (1, -2, 225, "-2.25"), (0, 0, 0, "0"), (0, -2, 0, "0.00"),
    (0, 3, 7, "7E+3"), (0, -6176, 1, "1E-6176"), (0, 0, 10**34 - 1, "9" * 34),
])
def test_decimal128_is_read_as_ieee_754_bid(sign: int, exponent: int, significand: int, text: str) -> None:
    assert str(_decimal128(sign, exponent, significand).to_decimal()) == text


def test_decimal128_special_values() -> None:
    assert Decimal128(bytes([0x78]) + bytes(15)).to_decimal() == decimal.Decimal("Infinity")
    assert Decimal128(bytes([0xF8]) + bytes(15)).to_decimal() == decimal.Decimal("-Infinity")
    assert Decimal128(bytes([0x7C]) + bytes(15)).to_decimal().is_nan()
    assert _decimal128(0, 0, 10**34).to_decimal() == 0  # non-canonical significand


def _python_sdk_reads(value: object) -> object:
    """What the Python SDK's own decoder makes of a decimal128 the broker gives it."""
    from azure.servicebus._pyamqp._decode import _decode_decimal128
    return _decode_decimal128(memoryview(bytes(value)))[1] if isinstance(value, Decimal128) else value  # type: ignore[arg-type]


def test_decimal_properties_are_given_as_the_python_sdk_reads_them_and_nothing_else_changes() -> None:
    tail = properties("m") + app_properties({"d": _decimal128(0, -1, 15), "i": Int(3)}) + data(b"p")
    out = wire.decimal_properties_for_python_sdk(tail)
    given = wire.application_properties(out)
    assert {k: _python_sdk_reads(v) for k, v in given.items()} == {"d": decimal.Decimal("1.5"), "i": 3}
    assert out.startswith(properties("m")) and out.endswith(data(b"p"))
    plain = properties("m") + app_properties({"i": Int(3)}) + data(b"\x94")
    assert wire.decimal_properties_for_python_sdk(plain) is plain


def test_only_the_python_sdk_is_given_python_sdk_decimals() -> None:
    assert wire.python_sdk_decimals({Symbol("product"): "azsdk-python-servicebus", Symbol("version"): "7.15.0"})
    assert not wire.python_sdk_decimals({Symbol("product"): "MSJSClient"})
    assert not wire.python_sdk_decimals(None)


def test_decimal32_and_decimal64_are_read_as_bid_and_given_as_the_python_sdk_reads_them() -> None:
    d64 = Decimal64(((1 << 63) | ((-2 + 398) << 53) | 225).to_bytes(8, "big"))
    d32 = Decimal32((((3 + 101) << 23) | 7).to_bytes(4, "big"))
    assert (str(d64.to_decimal()), str(d32.to_decimal())) == ("-2.25", "7E+3")
    tail = app_properties({"a": d64, "b": d32}) + data(b"p")
    given = wire.application_properties(wire.decimal_properties_for_python_sdk(tail))
    assert {k: _python_sdk_reads(v) for k, v in given.items()} == {"a": decimal.Decimal("-2.25"),
                                                                  "b": decimal.Decimal("7E+3")}


@pytest.mark.parametrize("text", ["1.2345", "-2.25", "0", "-0.00", "12345678901234567890.123", "9" * 24, "1E+95",
                                  "1E-32"])
def test_the_python_sdk_reads_back_each_decimal_it_can_hold(text: str) -> None:
    assert _python_sdk_reads(wire.python_sdk_decimal128(decimal.Decimal(text))) == decimal.Decimal(text)


@pytest.mark.parametrize("text", ["9" * 25, "1E+96", "1E-33", "NaN", "-Infinity"])
def test_a_decimal_the_python_sdk_cannot_read_is_given_as_its_text(text: str) -> None:
    assert wire.python_sdk_decimal128(decimal.Decimal(text)) == text


def test_a_message_scheduled_at_the_end_of_time_with_a_ttl_keeps_a_storable_expiry() -> None:
    """Found by test_fuzz_field_values: scheduled at 2**63-1 ms with a TTL overflowed 64 bits."""
    ann = msg_annotations({Symbol("x-opt-scheduled-enqueue-time"): Timestamp(2**63 - 1)})
    _check_only_argument_errors(section(HEADER, [True, None, UInt(1)]) + ann + data(b"x"))
