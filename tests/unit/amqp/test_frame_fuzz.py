"""Frame fuzzing: a server ``Connection`` fed hostile bytes never raises, and fails closed.

A realistic client byte stream is recorded once (SASL, open, begin, attaches, single and
multi-frame transfers, dispositions, flows with credit and drain, a heartbeat, a refused attach,
detach, end, close) by driving a real client against a server whose owner reacts the way the broker
does. The fuzz tests replay it to a fresh server, unchanged in random chunkings, or mutated: random
bytes, bit flips, truncation, insertions, wrong frame sizes, wrong data offsets, unknown frame
types, bogus descriptors, and performatives whose fields have the wrong types.

The invariant (:func:`check_outcome`): ``receive_data`` and the owner's reactions never raise;
everything the server writes cuts into well-formed frames whose performatives lift and carry full
field lists; and the connection either is still going (the input parsed) or is closed, with exactly
one ``ConnectionClosed`` as the last event and, once an open has been sent, a close frame carrying
the AMQP error condition as the last frame written.

Directly on the decoding helpers: ``lift_performative(codec.decode(body), ...)`` returns a
performative whose every field has its declared type, or raises ``ProtocolError``; nothing else.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sodalite.amqp import codec, framing
from sodalite.amqp.connection import Connection
from sodalite.amqp.errors import DecodeError, InvalidField, ProtocolError
from sodalite.amqp.events import (
    ConnectionClosed,
    CreditChanged,
    DeliveryUpdated,
    Event,
    LinkAttachRequested,
    TransferReceived,
)
from sodalite.amqp.link import RECEIVER, SENDER
from sodalite.amqp.performatives import (
    PERFORMATIVE_CODES,
    SASL_CODES,
    Accepted,
    Attach,
    Begin,
    Close,
    Coordinator,
    Declared,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Modified,
    Open,
    Received,
    Rejected,
    Released,
    SaslChallenge,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    Source,
    Target,
    TransactionalState,
    Transfer,
    lift_performative,
)
from sodalite.amqp.sasl import SaslClientConfig, SaslServerConfig
from sodalite.amqp.types import (
    Array,
    Byte,
    Char,
    Decimal32,
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
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
FEW = settings(FUZZ, max_examples=100)

SERVER_MAX_FRAME = 512
FIELD_COUNTS = {
    0x10: 10, 0x11: 8, 0x12: 14, 0x13: 11, 0x14: 11, 0x15: 6, 0x16: 3, 0x17: 1, 0x18: 1,
    0x40: 1, 0x41: 3, 0x42: 1, 0x43: 1, 0x44: 2,
}  # fmt: skip


# --------------------------------------------------------------------------------------------
# The server and its owner
# --------------------------------------------------------------------------------------------


def make_server() -> Connection:
    return Connection(server=True, container_id="fuzz-server", max_frame_size=SERVER_MAX_FRAME,
                      idle_timeout_ms=60_000, session_window=8,
                      sasl_server=SaslServerConfig(plain_validator=lambda user, password: password == "pw"))


class Owner:
    """Reacts to the server's events the way the broker does; none of this may raise either."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.sent = 0

    def handle(self, events: list[Event]) -> None:
        for event in events:
            self.events.append(event)
            if isinstance(event, LinkAttachRequested):
                link = event.link
                if link.name.startswith("refuse"):
                    link.refuse(Error("amqp:not-found", "no such entity", None))
                elif link.role is RECEIVER:
                    link.auto_credit = 4
                    link.max_message_size = 1000
                    link.accept()
                else:
                    link.accept(initial_delivery_count=0)
            elif isinstance(event, CreditChanged):
                link = event.link
                if link.attached and link.link_credit > 0 and self.sent < 20:
                    self.sent += 1
                    link.send_transfer(b"message-%d " % self.sent * 40, b"tag-%d" % self.sent, settled=False)
                if link.drain:
                    link.drained()
            elif isinstance(event, TransferReceived):
                d = event.delivery
                if not d.settled:
                    outcome = (Rejected(Error("amqp:link:message-size-exceeded", "too big", None))
                               if d.oversize else Accepted())
                    event.link.settle(d.delivery_id, outcome)
            elif isinstance(event, DeliveryUpdated) and not event.settled:
                event.link.settle(event.delivery_id, event.state)  # the settlement echo


# --------------------------------------------------------------------------------------------
# Wire helpers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One protocol header or one frame of a recorded stream, as raw bytes."""

    raw: bytes

    @property
    def is_frame(self) -> bool:
        return not self.raw.startswith(b"AMQP")

    @property
    def ftype(self) -> int:
        return self.raw[5]

    @property
    def channel(self) -> int:
        return int(struct.unpack_from(">H", self.raw, 6)[0])

    @property
    def body(self) -> bytes:
        return self.raw[self.raw[4] * 4 :]


def split_units(data: bytes) -> list[Unit]:
    units = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            units.append(Unit(data[pos : pos + 8]))
            pos += 8
            continue
        size, doff = struct.unpack_from(">IB", data, pos)
        assert size >= 8 and doff >= 2 and doff * 4 <= size and pos + size <= len(data), data[pos:].hex()
        units.append(Unit(data[pos : pos + size]))
        pos += size
    return units


def allowed_for(unit: Unit) -> frozenset[int]:
    return SASL_CODES if unit.ftype == framing.FRAME_SASL else PERFORMATIVE_CODES


def rebuild(unit: Unit, body: bytes) -> Unit:
    return Unit(framing.frame(unit.ftype, unit.channel, body))


@dataclass(frozen=True)
class Recording:
    chunks: tuple[bytes, ...]  # what the client wrote, write by write
    server_out: bytes  # everything the server wrote back


@functools.cache
def recorded_stream() -> tuple[Unit, ...]:
    """What a well-behaved client writes through a whole conversation with the fuzz server."""
    return tuple(split_units(b"".join(recording().chunks)))


@functools.cache
def recording() -> Recording:
    client = Connection(server=False, container_id="fuzz-client", hostname="localhost", max_frame_size=512,
                        sasl_client=SaslClientConfig(hostname="localhost"))
    server = make_server()
    owner = Owner()
    chunks: list[bytes] = []
    server_out = bytearray()
    client_events: list[Event] = []

    def pump() -> None:
        for _ in range(1000):
            c = client.data_to_send()
            s = server.data_to_send()
            if not c and not s:
                return
            if c:
                chunks.append(c)
                owner.handle(server.receive_data(c))
            if s:
                server_out.extend(s)
                client_events.extend(client.receive_data(s))
        raise AssertionError("no quiet")

    client.start()
    session = client.begin()
    snd = session.attach("snd", SENDER, Source("local"), Target("amqps://localhost/queue1"))
    rcv = session.attach("rcv", RECEIVER, Source("amqps://localhost/queue1"), Target("local"),
                         snd_settle_mode=0, rcv_settle_mode=1)
    pump()
    snd.send_transfer(b"small", b"t0", settled=False)
    snd.send_transfer(bytes(range(256)) * 3, b"t1", settled=False)  # three frames at 512
    snd.send_transfer(bytes(1500), b"t2", settled=False)  # over the 1000-byte max-message-size
    snd.send_transfer(b"pre-settled", b"t3", settled=True, message_format=0x80013700)
    pump()
    chunks.append(framing.HEARTBEAT)
    owner.handle(server.receive_data(framing.HEARTBEAT))
    rcv.issue_credit(2)
    pump()
    for event in client_events:
        if isinstance(event, TransferReceived):
            state = Modified(True, False, {Symbol("x-opt-a"): 1})
            rcv.settle(event.delivery.delivery_id, state, settled=False)
    pump()
    rcv.issue_credit(3, drain=True)
    pump()
    refused = client.begin().attach("refuse-me", SENDER, Source("local"), Target("nowhere"))
    pump()
    rcv.settle(99, Rejected(Error("com.microsoft:dead-letter", None, None)))
    snd.detach(Error("x:done", "sender done", {Symbol("k"): "v"}))
    pump()
    session.end()
    pump()
    client.close()
    pump()
    assert refused.state == "detached"
    assert client.closed and server.closed
    names = [type(e).__name__ for e in owner.events]
    assert names.count("TransferReceived") == 4 and names[-1] == "ConnectionClosed"
    assert any(isinstance(e, TransferReceived) and e.delivery.oversize for e in owner.events)
    assert any(isinstance(e, DeliveryUpdated) for e in owner.events)
    return Recording(tuple(chunks), bytes(server_out))


def joined(units: Iterable[Unit]) -> bytes:
    return b"".join(u.raw for u in units)


# --------------------------------------------------------------------------------------------
# The invariant
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    server: Connection
    events: list[Event]
    out: bytes

    @property
    def closed(self) -> ConnectionClosed | None:
        found = [e for e in self.events if isinstance(e, ConnectionClosed)]
        return found[0] if found else None


def run(chunks: Iterable[bytes]) -> Outcome:
    server = make_server()
    owner = Owner()
    out = bytearray()
    for chunk in chunks:
        owner.handle(server.receive_data(chunk))
        out += server.data_to_send()
    outcome = Outcome(server, owner.events, bytes(out))
    check_outcome(outcome)
    return outcome


def check_outcome(o: Outcome) -> None:
    closes = [e for e in o.events if isinstance(e, ConnectionClosed)]
    assert len(closes) <= 1
    # Everything written is well-formed: headers and frames, performatives that lift, full lists.
    units = split_units(o.out)
    written: list[Any] = []
    for unit in units:
        if not unit.is_frame:
            assert unit.raw in (framing.SASL_HEADER, framing.AMQP_HEADER)
            continue
        assert len(unit.raw) <= max(o.server.remote_max_frame_size, framing.MIN_MAX_FRAME_SIZE)
        if not unit.body:
            written.append(None)  # heartbeat
            continue
        assert unit.body[:2] == b"\x00\x53"
        value, _ = codec.decode_value(unit.body, 0)
        assert len(value.value) == FIELD_COUNTS[unit.body[2]]
        written.append(lift_performative(value, allowed_for(unit)))
    close_frames = [p for p in written if isinstance(p, Close)]
    assert len(close_frames) <= 1
    if close_frames:
        assert written[-1] is close_frames[0], "a frame follows the close"
    if not o.server.closed:
        assert not closes
        return
    assert closes and o.events[-1] is closes[0]
    closed = closes[0]
    open_sent = any(isinstance(p, Open) for p in written)
    if closed.by_peer:
        assert close_frames and close_frames[0].error is None
        return
    assert closed.error is not None
    assert isinstance(closed.error.condition, str) and closed.error.condition.startswith("amqp:")
    # 2.4.1/2.8: once this side has sent an open, the reason goes out in a close frame.
    assert bool(close_frames) == open_sent
    if close_frames:
        error = close_frames[0].error
        assert error is not None and error.condition == closed.error.condition


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# --------------------------------------------------------------------------------------------
# The recorded stream, unchanged
# --------------------------------------------------------------------------------------------


def test_recorded_stream_covers_every_performative() -> None:
    units = recorded_stream()
    codes = {u.body[2] for u in units if u.is_frame and u.body}
    assert codes >= {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x41}
    assert sum(1 for u in units if u.is_frame and not u.body) == 1
    transfers = [codec.decode_value(u.body, 0)[0].value
                 for u in units if u.is_frame and u.body[2:3] == b"\x14"]
    assert [t[5] for t in transfers].count(True) >= 3  # continuation frames: more=true


def test_replaying_the_recording_is_deterministic() -> None:
    outcome = run(recording().chunks)
    assert outcome.out == recording().server_out
    assert outcome.closed is not None and outcome.closed.by_peer and outcome.closed.error is None


def assert_clean_run(outcome: Outcome) -> None:
    assert outcome.closed is not None and outcome.closed.by_peer and outcome.closed.error is None
    assert sum(isinstance(e, TransferReceived) for e in outcome.events) == 4


def test_recorded_stream_parses_in_one_chunk() -> None:
    """All of it at once: the owner's answers come after the client's close and are dropped."""
    outcome = run([joined(recorded_stream())])
    assert_clean_run(outcome)
    written = [lift_performative(codec.decode_value(u.body, 0)[0], PERFORMATIVE_CODES)
               for u in split_units(outcome.out)[4:]]
    names = [type(p).__name__ for p in written]
    assert names[:2] == ["Open", "Begin"] and names[-1] == "Close"
    assert "Transfer" not in names and "Disposition" not in names
    # Links detached before the owner answered get a null-terminus attach ahead of the detach reply.
    attaches = [p for p in written if isinstance(p, Attach)]
    assert attaches and all(a.source is None and a.target is None for a in attaches)
    assert names.count("Detach") >= len(attaches)


@FEW
@given(st.lists(st.integers(0, 10_000), max_size=12))
def test_recorded_stream_parses_in_any_chunking(cuts: list[int]) -> None:
    assert_clean_run(run(chunked(joined(recorded_stream()), cuts)))


def test_recorded_stream_byte_by_byte() -> None:
    data = joined(recorded_stream())
    assert_clean_run(run([data[i : i + 1] for i in range(len(data))]))


def test_every_prefix_of_the_stream_is_handled() -> None:
    """Truncation anywhere: the server waits for more, and never closes on a clean cut."""
    data = joined(recorded_stream())
    for end in range(0, len(data) - 20, 7):
        outcome = run([data[:end]])
        assert not outcome.server.closed or (outcome.closed is not None and outcome.closed.by_peer)


# --------------------------------------------------------------------------------------------
# Random and mutated streams
# --------------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    run([data])


@FUZZ
@given(st.sampled_from([framing.SASL_HEADER, framing.AMQP_HEADER, b""]), st.binary(max_size=400))
def test_random_bytes_after_a_protocol_header(header: bytes, data: bytes) -> None:
    run([header + data])


@FUZZ
@given(st.data())
def test_random_bytes_after_a_valid_prefix(data: st.DataObject) -> None:
    units = recorded_stream()
    k = data.draw(st.integers(0, len(units)))
    tail = data.draw(st.binary(max_size=200) | st.binary(min_size=8, max_size=8).map(
        lambda b: struct.pack(">IBBH", 8 + len(b), 2, 0, 0) + b))
    run([joined(units[:k]), tail])


@FUZZ
@given(st.data())
def test_bit_flips(data: st.DataObject) -> None:
    buf = bytearray(joined(recorded_stream()))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= 1 << data.draw(st.integers(0, 7))
    run([bytes(buf)])


@FUZZ
@given(st.data())
def test_truncated_inserted_and_deleted_bytes(data: st.DataObject) -> None:
    buf = bytearray(joined(recorded_stream()))
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["insert", "delete", "truncate", "duplicate", "set"]))
        i = data.draw(st.integers(0, len(buf) - 1))
        if op == "insert":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[i : i + data.draw(st.integers(1, 16))]
        elif op == "truncate":
            del buf[i:]
        elif op == "duplicate":
            j = data.draw(st.integers(i, min(len(buf), i + 64)))
            buf[i:i] = buf[i:j]
        else:
            buf[i] = data.draw(st.sampled_from([0x00, 0x40, 0x45, 0xA1, 0xB0, 0xD0, 0xF0, 0xFF]))
        if not buf:
            break
    run(chunked(bytes(buf), data.draw(st.lists(st.integers(0, 5000), max_size=3))))


@st.composite
def frame_index(draw: st.DrawFn, *, body: bool = False) -> int:
    units = recorded_stream()
    choices = [i for i, u in enumerate(units) if u.is_frame and (u.body or not body)]
    return draw(st.sampled_from(choices))


def with_unit(i: int, unit: Unit | None) -> bytes:
    units = list(recorded_stream())
    if unit is None:
        del units[i]
    else:
        units[i] = unit
    return joined(units)


@FUZZ
@given(frame_index(), st.data())
def test_wrong_frame_sizes(i: int, data: st.DataObject) -> None:
    unit = recorded_stream()[i]
    size = len(unit.raw)
    new = data.draw(st.integers(0, 16) | st.integers(size - 8, size + 8).filter(lambda n: n >= 0)
                    | st.integers(0, 2**32 - 1) | st.sampled_from([SERVER_MAX_FRAME, SERVER_MAX_FRAME + 1]))
    assume(new != size)
    outcome = run([with_unit(i, Unit(struct.pack(">I", new) + unit.raw[4:]))])
    if new > SERVER_MAX_FRAME or new < 8:
        assert outcome.closed is not None and not outcome.closed.by_peer
        assert outcome.closed.error is not None
        assert outcome.closed.error.condition == "amqp:connection:framing-error"


@FUZZ
@given(frame_index(), st.integers(0, 255))
def test_wrong_data_offsets(i: int, doff: int) -> None:
    unit = recorded_stream()[i]
    assume(doff != unit.raw[4])
    outcome = run([with_unit(i, Unit(unit.raw[:4] + bytes([doff]) + unit.raw[5:]))])
    if doff < 2 or doff * 4 > len(unit.raw):
        assert outcome.closed is not None and outcome.closed.error is not None
        assert outcome.closed.error.condition == "amqp:connection:framing-error"


@FUZZ
@given(frame_index(), st.integers(0, 255))
def test_unknown_or_swapped_frame_types(i: int, ftype: int) -> None:
    unit = recorded_stream()[i]
    assume(ftype != unit.ftype)
    outcome = run([with_unit(i, Unit(unit.raw[:5] + bytes([ftype]) + unit.raw[6:]))])
    if unit.body:  # heartbeats are skipped whatever their type
        assert outcome.closed is not None and not outcome.closed.by_peer
        assert outcome.closed.error is not None
        assert outcome.closed.error.condition == "amqp:connection:framing-error"


@FUZZ
@given(frame_index(body=True), st.data())
def test_bogus_performative_descriptors(i: int, data: st.DataObject) -> None:
    unit = recorded_stream()[i]
    body = unit.body
    value, end = codec.decode_value(body, 0)
    kind = data.draw(st.sampled_from(["code", "ulong64", "symbolic", "not-described", "other-composite"]))
    if kind == "code":
        code = data.draw(st.integers(0, 255))
        assume(code != body[2])
        new = body[:2] + bytes([code]) + body[3:]
    elif kind == "ulong64":  # the same code as an 8-byte ulong, perhaps with a non-zero domain
        domain = data.draw(st.integers(0, 2**32 - 1))
        new = b"\x00\x80" + struct.pack(">Q", (domain << 32) | body[2]) + body[3:]
    elif kind == "symbolic":
        symbol = data.draw(st.sampled_from(["amqp:open:list", "amqp:transfer:list", "amqp:error:list", ""]))
        new = codec.encode(Described(Symbol(symbol), value.value)) + body[end:]
    elif kind == "not-described":
        new = codec.encode(value.value) + body[end:]
    else:
        new = codec.encode(Described(ULong(data.draw(st.sampled_from([0x1D, 0x23, 0x24, 0x28, 0x29, 0x30]))),
                                     value.value)) + body[end:]
    new_unit = rebuild(unit, new)
    outcome = run([with_unit(i, new_unit)])
    try:
        lift_performative(codec.decode_value(new, 0)[0], allowed_for(unit))
    except ProtocolError:
        assert outcome.closed is not None and not outcome.closed.by_peer
        if len(new_unit.raw) <= SERVER_MAX_FRAME:
            assert outcome.closed.error is not None
            assert outcome.closed.error.condition in ("amqp:decode-error", "amqp:invalid-field")


# Values of every AMQP type, for fields that should not hold them.
scalars = st.one_of(
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
    st.floats(allow_nan=False),
    st.binary(min_size=4, max_size=4).map(Decimal32),
    st.characters(exclude_categories=("Cs",)).map(Char),
    st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    st.uuids(),
    st.binary(max_size=12),
    st.text(max_size=12),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12).map(Symbol),
)
descriptors = st.one_of(
    st.sampled_from([0x10, 0x12, 0x14, 0x1D, 0x23, 0x24, 0x25, 0x27, 0x28, 0x29, 0x30, 0x99]).map(ULong),
    st.sampled_from(["amqp:error:list", "amqp:source:list", "amqp:accepted:list", "x:y"]).map(Symbol),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(scalars.filter(lambda k: not isinstance(k, float)), children, max_size=3),
        st.builds(Described, descriptors, children),
        st.builds(Described, descriptors, st.lists(children, max_size=6)),
        st.lists(st.text(alphabet="abc", max_size=3).map(Symbol), max_size=3).map(
            lambda xs: Array("symbol", tuple(xs))),
        st.lists(st.integers(0, 9).map(UInt), max_size=3).map(lambda xs: Array("uint", tuple(xs))),
    )


amqp_values = st.recursive(scalars, _extend, max_leaves=8)


@FUZZ
@given(frame_index(body=True), st.data())
def test_performatives_with_wrong_field_types(i: int, data: st.DataObject) -> None:
    unit = recorded_stream()[i]
    body = unit.body
    value, end = codec.decode_value(body, 0)
    items = list(value.value)
    index = data.draw(st.integers(0, len(items) + 1))
    replacement = data.draw(amqp_values)
    if index < len(items):
        items[index] = replacement
    else:
        items.append(replacement)
    new = codec.encode(Described(value.descriptor, items)) + body[end:]
    new_unit = rebuild(unit, new)
    outcome = run([with_unit(i, new_unit)])
    try:
        lift_performative(codec.decode_value(new, 0)[0], allowed_for(unit))
    except ProtocolError as exc:
        assert outcome.closed is not None and not outcome.closed.by_peer
        assert outcome.closed.error is not None
        expected = exc.condition if len(new_unit.raw) <= SERVER_MAX_FRAME else "amqp:connection:framing-error"
        assert outcome.closed.error.condition == expected


def wire(perf_code: int, fields_: list[Any], channel: int = 0) -> bytes:
    return framing.frame(0, channel, codec.encode(Described(ULong(perf_code), fields_)))


@pytest.mark.parametrize(
    ("code", "index", "bad"),
    [
        pytest.param(0x12, 1, "zero", id="attach-handle-as-a-string"),
        pytest.param(0x12, 0, 5, id="attach-name-as-a-long"),
        pytest.param(0x12, 2, UInt(1), id="attach-role-not-a-boolean"),
        pytest.param(0x12, 3, UInt(300), id="snd-settle-mode-outside-ubyte"),
        pytest.param(0x12, 5, "queue1", id="source-not-a-composite"),
        pytest.param(0x12, 6, Described(ULong(0x1D), ["amqp:x", None, None]),
                     id="an-error-where-the-target-goes"),
        pytest.param(0x12, 10, -1, id="negative-max-message-size"),
        pytest.param(0x12, 11, [UInt(1)], id="capabilities-that-are-not-symbols"),
        pytest.param(0x12, 13, ["k", "v"], id="properties-as-a-list"),
        pytest.param(0x13, 1, "x", id="flow-incoming-window-as-a-string"),
        pytest.param(0x13, 4, 2**40, id="flow-handle-beyond-uint"),
        pytest.param(0x13, 8, UInt(1), id="flow-drain-not-a-boolean"),
        pytest.param(0x14, 2, "tag", id="transfer-delivery-tag-as-a-string"),
        pytest.param(0x14, 7, Described(ULong(0x99), []), id="transfer-state-of-an-unknown-type"),
        pytest.param(0x15, 0, UInt(1), id="disposition-role-not-a-boolean"),
        pytest.param(0x15, 1, "1", id="disposition-first-as-a-string"),
        pytest.param(0x15, 4, "accepted", id="disposition-state-as-a-string"),
        pytest.param(0x16, 2, "gone", id="detach-error-as-a-string"),
        pytest.param(0x16, 1, UByte(1), id="detach-closed-not-a-boolean"),
        pytest.param(0x17, 0, Described(ULong(0x1D), [UInt(7), None, None]),
                     id="end-error-whose-condition-is-a-number"),
        pytest.param(0x18, 0, Described(ULong(0x1D), "not a list"), id="close-error-that-is-not-a-list"),
        pytest.param(0x11, 1, "x", id="begin-next-outgoing-id-as-a-string"),
        pytest.param(0x11, 0, UInt(70000), id="begin-remote-channel-beyond-ushort"),
    ],
)
def test_specific_wrong_field_types_close_with_invalid_field(code: int, index: int, bad: Any) -> None:
    base = {
        0x11: [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None],
        0x12: ["l", UInt(0), False, UByte(2), UByte(0), Described(ULong(0x28), ["a"]),
               Described(ULong(0x29), ["b"]), None, False, UInt(0), ULong(0), None, None, None],
        0x13: [UInt(0), UInt(100), UInt(0), UInt(100), UInt(0), UInt(0), UInt(5), None, False, False, None],
        0x14: [UInt(0), UInt(0), b"t", UInt(0), True, False, None, None, False, False, False],
        0x15: [True, UInt(0), None, True, Described(ULong(0x24), []), False],
        0x16: [UInt(0), True, None],
        0x17: [None],
        0x18: [None],
    }[code]
    fields_ = list(base)
    fields_[index] = bad
    body = codec.encode(Described(ULong(code), fields_))
    with pytest.raises(InvalidField):
        lift_performative(codec.decode(body), PERFORMATIVE_CODES)
    # On the wire: the session and link exist, so the frame is not ignored for want of them.
    server = make_server()
    owner = Owner()
    prefix = framing.AMQP_HEADER + wire(0x10, ["c", None, UInt(512)] + [None] * 7)
    if code not in (0x11, 0x18):
        prefix += wire(0x11, [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None])
        if code != 0x17:
            prefix += wire(0x12, base if code == 0x12 else [
                "l", UInt(0), False, UByte(2), UByte(0), Described(ULong(0x28), ["a"]),
                Described(ULong(0x29), ["b"]), None, False, UInt(0), None, None, None, None])
    owner.handle(server.receive_data(prefix))
    assert not server.closed
    owner.handle(server.receive_data(framing.frame(0, 0, body)))
    outcome = Outcome(server, owner.events, server.data_to_send())
    check_outcome(outcome)
    assert outcome.closed is not None and outcome.closed.error is not None
    assert outcome.closed.error.condition == "amqp:invalid-field"


def test_sasl_init_with_wrong_field_types_fails_the_sasl_exchange() -> None:
    for fields_ in ([UInt(1), b"", None], [Symbol("PLAIN"), "\x00u\x00pw", None], [Symbol("ANONYMOUS"), 5],
                    ["ANONYMOUS-é", b"", None]):
        server = make_server()
        events = server.receive_data(framing.SASL_HEADER + framing.frame(1, 0, codec.encode(
            Described(ULong(0x41), fields_))))
        closed = [e for e in events if isinstance(e, ConnectionClosed)]
        assert len(closed) == 1 and closed[0].error is not None
        assert closed[0].error.condition == "amqp:invalid-field"
        out = server.data_to_send()
        assert framing.AMQP_HEADER not in out and b"\x00\x53\x18" not in out  # no AMQP close during SASL


# --------------------------------------------------------------------------------------------
# lift_performative on its own: a well-typed performative or ProtocolError
# --------------------------------------------------------------------------------------------

# The declared kind of every field, written out independently of the implementation's schema.
KINDS: dict[type, list[str]] = {
    Open: ["string", "string", "uint", "ushort", "uint", "symbols", "symbols", "symbols", "symbols", "map"],
    Begin: ["ushort", "uint", "uint", "uint", "uint", "symbols", "symbols", "map"],
    Attach: ["string", "uint", "bool", "ubyte", "ubyte", "source", "target", "map", "bool", "uint", "ulong",
             "symbols", "symbols", "map"],
    Flow: ["uint"] * 8 + ["bool", "bool", "map"],
    Transfer: ["uint", "uint", "binary", "uint", "bool", "bool", "ubyte", "state", "bool", "bool", "bool"],
    Disposition: ["bool", "uint", "uint", "bool", "state", "bool"],
    Detach: ["uint", "bool", "error"],
    End: ["error"],
    Close: ["error"],
    SaslMechanisms: ["symbols"],
    SaslInit: ["symbol", "binary", "string"],
    SaslChallenge: ["binary"],
    SaslResponse: ["binary"],
    SaslOutcome: ["ubyte", "binary"],
    Error: ["symbol", "string", "map"],
    Source: ["any", "uint", "symbol", "uint", "bool", "map", "symbol", "map", "state", "symbols", "symbols"],
    Target: ["any", "uint", "symbol", "uint", "bool", "map", "symbols"],
    Coordinator: ["symbols"],
    Received: ["uint", "ulong"],
    Accepted: [],
    Rejected: ["error"],
    Released: [],
    Modified: ["bool", "bool", "map"],
    Declared: ["binary"],
    TransactionalState: ["binary", "state"],
}
MANDATORY: dict[type, tuple[int, ...]] = {
    Open: (0,), Begin: (1, 2, 3), Attach: (0, 1, 2), Flow: (1, 2, 3), Transfer: (0,), Disposition: (0, 1),
    Detach: (0,), End: (), Close: (), SaslMechanisms: (0,), SaslInit: (0,), SaslChallenge: (0,),
    SaslResponse: (0,), SaslOutcome: (0,),
}  # fmt: skip
INT_TOPS = {"ubyte": 0xFF, "ushort": 0xFFFF, "uint": 0xFFFFFFFF, "ulong": 2**64 - 1}
STATES = (Received, Accepted, Rejected, Released, Modified, Declared, TransactionalState)


def symbol_like(v: Any) -> bool:
    return isinstance(v, str) and v.isascii()


def fits(kind: str, v: Any) -> bool:
    """Whether a lifted field value is of its declared kind (None is "absent", always fine)."""
    if v is None or kind == "any":
        return True
    if kind in INT_TOPS:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT_TOPS[kind]
    return {
        "bool": lambda: type(v) is bool,
        "string": lambda: isinstance(v, str),
        "symbol": lambda: symbol_like(v),
        "symbols": lambda: symbol_like(v) or (isinstance(v, Array | list) and all(map(symbol_like, v))),
        "binary": lambda: isinstance(v, bytes),
        "map": lambda: isinstance(v, dict),
        "error": lambda: isinstance(v, Error),
        "source": lambda: isinstance(v, Source),
        "target": lambda: isinstance(v, Target | Coordinator),
        "state": lambda: isinstance(v, STATES),
    }[kind]()


def assert_well_typed(perf: Any) -> None:
    for kind, f in zip(KINDS[type(perf)], fields(perf), strict=True):
        value = getattr(perf, f.name)
        assert fits(kind, value), f"{type(perf).__name__}.{f.name} = {value!r} is not a {kind}"
        if isinstance(value, (Error, Source, Target, Coordinator, *STATES)):
            assert_well_typed(value)
    for index in MANDATORY.get(type(perf), ()):
        assert getattr(perf, fields(perf)[index].name) is not None
    perf.encode()  # whatever lifts re-encodes: the owner echoes termini and states


def lift_or_protocol_error(body: bytes, allowed: frozenset[int]) -> Any:
    try:
        perf = lift_performative(codec.decode(body), allowed)
    except ProtocolError:
        return None
    assert_well_typed(perf)
    return perf


@FUZZ
@given(st.binary(max_size=200))
def test_lift_random_bodies(body: bytes) -> None:
    lift_or_protocol_error(body, PERFORMATIVE_CODES)
    lift_or_protocol_error(body, SASL_CODES)


@FUZZ
@given(st.sampled_from(sorted(PERFORMATIVE_CODES | SASL_CODES)), st.lists(amqp_values, max_size=15))
def test_lift_random_field_lists(code: int, items: list[Any]) -> None:
    body = codec.encode(Described(ULong(code), items))
    lift_or_protocol_error(body, PERFORMATIVE_CODES | SASL_CODES)


def valid_values(kind: str) -> st.SearchStrategy[Any]:
    """Encodable values that decode into something of ``kind``, in every width the check allows."""
    if kind in INT_TOPS:
        top = INT_TOPS[kind]
        return st.sampled_from(sorted(WIDTHS, key=str)).flatmap(
            lambda w: st.integers(0, min(top, WIDTHS[w])).map(w))
    error = st.builds(lambda c, d: Described(ULong(0x1D), [Symbol(c), d, None]),
                      st.text("abc:", min_size=1, max_size=8), st.none() | st.text(max_size=5))
    return {
        "any": amqp_values,
        "bool": st.booleans(),
        "string": st.text(max_size=10) | st.text("ab", max_size=4).map(Symbol),
        "symbol": st.text("abc:", max_size=10).map(Symbol) | st.text("xyz", max_size=4),
        "symbols": st.text("ab", max_size=4).map(Symbol) | st.lists(st.text("ab", max_size=3).map(Symbol),
                                                                     max_size=3).map(
            lambda xs: Array("symbol", tuple(xs))),
        "binary": st.binary(max_size=10),
        "map": st.dictionaries(st.text("k", max_size=3).map(Symbol), scalars, max_size=3),
        "error": error,
        "source": st.sampled_from([
            Described(ULong(0x28), ["amqps://localhost/q"]),
            Described(ULong(0x28), ["q", UInt(1), Symbol("never"), UInt(0), False, None, Symbol("move"),
                                    {Symbol("f"): Described(Symbol("apache.org:selector-filter"), "1")},
                                    Described(ULong(0x26), []), Array("symbol", (Symbol("amqp:released"),)),
                                    None]),
        ]),
        "target": st.sampled_from([
            Described(ULong(0x29), ["q", None, None, None, None, None, None]),
            Described(ULong(0x30), [Array("symbol", (Symbol("amqp:local-transactions"),))]),
        ]),
        "state": st.sampled_from([
            Described(ULong(0x24), []), Described(ULong(0x26), []),
            Described(ULong(0x25), [Described(ULong(0x1D), [Symbol("x:y"), "z", None])]),
            Described(ULong(0x27), [True, False, {Symbol("a"): 1}]),
            Described(ULong(0x23), [UInt(1), ULong(2)]),
        ]),
    }[kind]


# Every integer width, with the largest non-negative value it holds.
WIDTHS: dict[Any, int] = {UByte: 0xFF, UShort: 0xFFFF, UInt: 0xFFFFFFFF, ULong: 2**64 - 1, int: 2**63 - 1,
                          Int: 2**31 - 1, Short: 2**15 - 1, Byte: 127}


def raw_fits(kind: str, v: Any) -> bool:
    """Whether an encodable value might decode into something of ``kind``.

    For composite kinds any described value might (it is lifted first), so none counts as wrong.
    """
    if kind in ("error", "source", "target", "state"):
        return v is None or isinstance(v, Described)
    return fits(kind, v)


PERFORMATIVE_CLASSES = [Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close,
                        SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome]


@FUZZ
@given(st.sampled_from(PERFORMATIVE_CLASSES), st.data())
def test_lift_accepts_every_valid_field_and_rejects_every_wrong_one(cls: type, data: st.DataObject) -> None:
    kinds = KINDS[cls]
    n = data.draw(st.integers(max(MANDATORY[cls], default=-1) + 1, len(kinds)))
    items = [data.draw(valid_values(kind)) for kind in kinds[:n]]
    for index in range(n):
        if index not in MANDATORY[cls] and data.draw(st.booleans()):
            items[index] = None
    wrong = data.draw(st.none() | st.integers(0, n - 1)) if n else None
    if wrong is not None:
        kind = kinds[wrong]
        items[wrong] = data.draw(amqp_values.filter(lambda v: v is not None and not raw_fits(kind, v)))
    extra = data.draw(st.lists(amqp_values, max_size=2))  # trailing fields past the schema are ignored
    body = codec.encode(Described(ULong(cls.CODE), items + extra if n == len(kinds) else items))
    allowed = SASL_CODES if cls.CODE >= 0x40 else PERFORMATIVE_CODES
    if wrong is None:
        perf = lift_performative(codec.decode(body), allowed)
        assert type(perf) is cls
        assert_well_typed(perf)
    else:
        with pytest.raises(ProtocolError):
            lift_performative(codec.decode(body), allowed)


@pytest.mark.parametrize("cls", PERFORMATIVE_CLASSES)
def test_lift_without_a_mandatory_field_raises_invalid_field(cls: type) -> None:
    for index in MANDATORY[cls]:
        items: list[Any] = [None] * len(KINDS[cls])
        for other in MANDATORY[cls]:
            if other != index:
                items[other] = {"uint": UInt(1), "bool": True, "string": "x", "symbol": Symbol("x"),
                                "symbols": Symbol("x"), "binary": b"", "ubyte": UByte(0)}[KINDS[cls][other]]
        with pytest.raises(InvalidField):
            lift_performative(codec.decode(codec.encode(Described(ULong(cls.CODE), items))),
                              PERFORMATIVE_CODES | SASL_CODES)


def test_lift_rejects_bodies_that_are_not_performatives() -> None:
    for value in ("x", [1], Described(ULong(0x10), "x"), Described(ULong(0x1D), ["amqp:x"]),
                  Described(Symbol("amqp:open:list"), ["c"]), Described(ULong(0x10 | 1 << 32), ["c"])):
        with pytest.raises(DecodeError):
            lift_performative(codec.decode(codec.encode(value)), PERFORMATIVE_CODES)
    with pytest.raises(DecodeError):
        sasl_init = codec.encode(Described(ULong(0x41), [Symbol("A")]))
        lift_performative(codec.decode(sasl_init), PERFORMATIVE_CODES)


def test_wide_integers_that_fit_are_accepted() -> None:
    """Integer widths vary between SDKs (contract pitfall 12): a value that fits is fine."""
    flow = lift_performative(codec.decode(codec.encode(Described(ULong(0x13), [
        5, ULong(100), Int(3), UShort(100), UByte(1), 0, ULong(10), None, False, False, None]))),
        PERFORMATIVE_CODES)
    assert isinstance(flow, Flow) and flow.incoming_window == 100 and flow.link_credit == 10
    for bad in (-1, 2**32, Int(-5)):
        with pytest.raises(InvalidField):
            lift_performative(codec.decode(codec.encode(Described(ULong(0x13), [
                None, bad, UInt(0), UInt(0)]))), PERFORMATIVE_CODES)
