"""The sans-IO connection state machine, driven as client and server against each other in memory.

A :class:`Pair` holds a client ``Connection(server=False)`` and a server ``Connection(server=True)``;
``pump()`` moves bytes both ways until neither side has anything to send, records every chunk
written in each direction, and collects each side's events. The server accepts attaches unless a
test installs its own ``on_attach``. Frame-level assertions split the recorded byte streams into
frames and decode the performatives with :mod:`sodalite.amqp.codec`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from sodalite.amqp import codec, framing
from sodalite.amqp.connection import Connection
from sodalite.amqp.events import (
    ConnectionClosed,
    ConnectionOpened,
    CreditChanged,
    DeliveryUpdated,
    Event,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    SaslCompleted,
    SessionBegun,
    SessionEnded,
    TransferReceived,
)
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import (
    Accepted,
    Attach,
    Error,
    Modified,
    Open,
    Rejected,
    Released,
    Source,
    Target,
)
from sodalite.amqp.sasl import SaslClientConfig, SaslServerConfig
from sodalite.amqp.session import Session
from sodalite.amqp.types import Described, Symbol

ANON = SaslClientConfig(hostname="localhost")

# Performative code -> (name, number of fields in its full list).
FIELD_COUNTS = {
    0x10: ("open", 10), 0x11: ("begin", 8), 0x12: ("attach", 14), 0x13: ("flow", 11),
    0x14: ("transfer", 11), 0x15: ("disposition", 6), 0x16: ("detach", 3), 0x17: ("end", 1),
    0x18: ("close", 1), 0x40: ("sasl-mechanisms", 1), 0x41: ("sasl-init", 3), 0x44: ("sasl-outcome", 2),
}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Wire helpers
# --------------------------------------------------------------------------------------------


@dataclass
class Frame:
    size: int
    doff: int
    ftype: int
    channel: int
    body: bytes

    @property
    def heartbeat(self) -> bool:
        return not self.body

    def performative(self) -> tuple[int, list[Any], bytes]:
        """(descriptor code, field list, payload after the performative)."""
        value, end = codec.decode_value(self.body, 0)
        assert isinstance(value, Described)
        assert isinstance(value.value, list)
        return int(value.descriptor), value.value, self.body[end:]


def split_stream(data: bytes) -> tuple[list[bytes], list[Frame]]:
    """Cut a recorded byte stream into protocol headers and frames; it must cut cleanly."""
    headers: list[bytes] = []
    frames: list[Frame] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == b"AMQP":
            headers.append(data[pos : pos + 8])
            pos += 8
            continue
        size, doff, ftype, channel = struct.unpack_from(">IBBH", data, pos)
        assert size >= 8 and doff >= 2 and pos + size <= len(data), "stream does not cut into frames"
        frames.append(Frame(size, doff, ftype, channel, data[pos + doff * 4 : pos + size]))
        pos += size
    return headers, frames


def performatives(data: bytes) -> list[tuple[str, list[Any], bytes]]:
    """Every non-heartbeat frame of a stream as (name, fields, payload)."""
    out = []
    for f in split_stream(data)[1]:
        if f.heartbeat:
            continue
        code, fields, payload = f.performative()
        out.append((FIELD_COUNTS[code][0], fields, payload))
    return out


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def the(events: list[Event], kind: type) -> Any:
    found = of(events, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {events}"
    return found[0]


def condition(error: Error | None) -> str | None:
    return None if error is None else str(error.condition)


# --------------------------------------------------------------------------------------------
# The in-memory pair
# --------------------------------------------------------------------------------------------


class Pair:
    def __init__(self, *, client_sasl: SaslClientConfig | None = ANON,
                 server_sasl: SaslServerConfig | None = None, client: dict[str, Any] | None = None,
                 server: dict[str, Any] | None = None) -> None:
        self.client = Connection(server=False, container_id="the-client", hostname="localhost",
                                 sasl_client=client_sasl, **(client or {}))
        self.server = Connection(server=True, container_id="the-server",
                                 sasl_server=server_sasl or SaslServerConfig(), **(server or {}))
        self.client_events: list[Event] = []
        self.server_events: list[Event] = []
        self.c2s = bytearray()  # everything the client wrote
        self.s2c = bytearray()  # everything the server wrote
        self.c2s_chunks: list[bytes] = []
        self.now = 0.0
        self.on_attach: Callable[[Link], None] = lambda link: link.accept()

    def _server_got(self, events: list[Event]) -> None:
        for event in events:
            self.server_events.append(event)
            if isinstance(event, LinkAttachRequested):
                self.on_attach(event.link)

    def pump(self, max_rounds: int = 100_000) -> None:
        for _ in range(max_rounds):
            c = self.client.data_to_send(self.now)
            s = self.server.data_to_send(self.now)
            if not c and not s:
                return
            if c:
                self.c2s += c
                self.c2s_chunks.append(c)
                self._server_got(self.server.receive_data(c, self.now))
            if s:
                self.s2c += s
                self.client_events.extend(self.client.receive_data(s, self.now))
        raise AssertionError("the pair never went quiet")

    def take_events(self) -> tuple[list[Event], list[Event]]:
        c, s = self.client_events, self.server_events
        self.client_events, self.server_events = [], []
        return c, s

    def open(self) -> None:
        self.client.start()
        self.pump()
        assert the(self.client_events, ConnectionOpened)
        assert the(self.server_events, ConnectionOpened)
        self.take_events()

    def session(self) -> tuple[Session, Session]:
        client_session = self.client.begin()
        self.pump()
        begun = the(self.server_events, SessionBegun)
        assert the(self.client_events, SessionBegun).session is client_session
        self.take_events()
        return client_session, begun.session

    def link(self, session: Session, role: bool, name: str = "link-1", address: str = "queue1",
             **attach: Any) -> tuple[Link, Link]:
        """Attach from the client; return (client link, server link)."""
        client_link = session.attach(name, role, Source(address if role is RECEIVER else "local"),
                                     Target(address if role is SENDER else "local"), **attach)
        self.pump()
        server_link = the(self.server_events, LinkAttachRequested).link
        assert the(self.client_events, LinkAttached).link is client_link
        self.take_events()
        return client_link, server_link


def opened_pair(**kwargs: Any) -> Pair:
    pair = Pair(**kwargs)
    pair.open()
    return pair


# --------------------------------------------------------------------------------------------
# Protocol headers and SASL
# --------------------------------------------------------------------------------------------


def test_sasl_anonymous() -> None:
    pair = Pair()
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    assert the(s, SaslCompleted) == SaslCompleted("ANONYMOUS", None, True)
    assert the(c, SaslCompleted) == SaslCompleted("ANONYMOUS", None, True)
    assert the(c, ConnectionOpened).remote.container_id == "the-server"
    assert the(s, ConnectionOpened).remote.container_id == "the-client"
    assert pair.server.sasl_mechanism == "ANONYMOUS"
    assert pair.client.phase == pair.server.phase == "opened"
    client_headers, _ = split_stream(bytes(pair.c2s))
    server_headers, _ = split_stream(bytes(pair.s2c))
    assert client_headers == server_headers == [framing.SASL_HEADER, framing.AMQP_HEADER]
    assert [n for n, _, _ in performatives(bytes(pair.c2s))] == ["sasl-init", "open"]
    assert [n for n, _, _ in performatives(bytes(pair.s2c))] == ["sasl-mechanisms", "sasl-outcome", "open"]
    mechanisms = performatives(bytes(pair.s2c))[0][1][0]
    assert [str(m) for m in mechanisms] == ["MSSBCBS", "ANONYMOUS", "PLAIN"]
    init = performatives(bytes(pair.c2s))[0][1]
    assert init == [Symbol("ANONYMOUS"), b"", "localhost"]
    assert isinstance(init[0], Symbol)
    assert performatives(bytes(pair.s2c))[1][1] == [0, None]


def test_sasl_plain_accepted() -> None:
    seen: list[tuple[str, str]] = []

    def validator(user: str, password: str) -> bool:
        seen.append((user, password))
        return password == "secret"

    pair = Pair(client_sasl=SaslClientConfig("PLAIN", "alice", "secret"),
                server_sasl=SaslServerConfig(plain_validator=validator))
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    assert seen == [("alice", "secret")]
    assert the(s, SaslCompleted) == SaslCompleted("PLAIN", "alice", True)
    assert the(c, SaslCompleted).succeeded
    assert pair.server.sasl_mechanism == "PLAIN"
    assert pair.server.sasl_username == "alice"
    assert of(c, ConnectionOpened) and of(s, ConnectionOpened)
    assert performatives(bytes(pair.c2s))[0][1][1] == b"\x00alice\x00secret"


def test_sasl_plain_refused() -> None:
    pair = Pair(client_sasl=SaslClientConfig("PLAIN", "alice", "wrong"),
                server_sasl=SaslServerConfig(plain_validator=lambda u, p: p == "secret"))
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    assert the(s, SaslCompleted) == SaslCompleted("PLAIN", "alice", False)
    assert condition(the(s, ConnectionClosed).error) == "amqp:unauthorized-access"
    assert the(c, SaslCompleted).succeeded is False
    assert condition(the(c, ConnectionClosed).error) == "amqp:unauthorized-access"
    assert not of(c, ConnectionOpened) and not of(s, ConnectionOpened)
    assert pair.client.closed and pair.server.closed
    # The outcome says "auth" (1) and nothing AMQP follows it.
    names = [(n, f) for n, f, _ in performatives(bytes(pair.s2c))]
    assert names[-1] == ("sasl-outcome", [1, None])
    assert split_stream(bytes(pair.c2s))[0] == [framing.SASL_HEADER]
    assert pair.server.sasl_username is None


def test_sasl_plain_malformed_response_is_refused() -> None:
    pair = Pair(client_sasl=SaslClientConfig("PLAIN", "al\x00ice", "x"),
                server_sasl=SaslServerConfig(plain_validator=lambda u, p: True))
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    assert the(s, SaslCompleted).succeeded is False
    assert condition(the(c, ConnectionClosed).error) == "amqp:unauthorized-access"


def test_sasl_mechanism_not_offered() -> None:
    pair = Pair(client_sasl=SaslClientConfig("ANONYMOUS"),
                server_sasl=SaslServerConfig(mechanisms=("PLAIN",)))
    pair.client.start()
    pair.pump()
    c, _ = pair.take_events()
    assert condition(the(c, ConnectionClosed).error) == "amqp:not-implemented"
    assert pair.client.closed


def test_no_sasl_bare_amqp_header() -> None:
    pair = Pair(client_sasl=None)
    pair.client.start()
    # Header and open go out at once, before any reply.
    first = pair.client.data_to_send()
    assert first.startswith(framing.AMQP_HEADER)
    assert [n for n, _, _ in performatives(first[8:])] == ["open"]
    pair.c2s += first
    pair._server_got(pair.server.receive_data(first))
    pair.pump()
    c, s = pair.take_events()
    assert not of(s, SaslCompleted)
    assert of(c, ConnectionOpened) and of(s, ConnectionOpened)
    assert split_stream(bytes(pair.s2c))[0] == [framing.AMQP_HEADER]
    assert pair.server.sasl_mechanism is None


def test_no_sasl_server_without_sasl_config() -> None:
    client = Connection(server=False, container_id="c")
    server = Connection(server=True, container_id="s")
    client.start()
    server_events = server.receive_data(client.data_to_send())
    client_events = client.receive_data(server.data_to_send())
    assert of(server_events, ConnectionOpened) and of(client_events, ConnectionOpened)


def test_require_sasl_refuses_a_bare_amqp_header() -> None:
    pair = Pair(client_sasl=None, server_sasl=SaslServerConfig(require_sasl=True))
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    assert condition(the(s, ConnectionClosed).error) == "amqp:not-implemented"
    assert the(s, ConnectionClosed).by_peer is False
    assert not of(s, ConnectionOpened)
    # 2.2: the server answers with the header it does support, and nothing else.
    assert bytes(pair.s2c) == framing.SASL_HEADER
    assert condition(the(c, ConnectionClosed).error) == "amqp:not-implemented"
    assert pair.server.closed and pair.client.closed


def test_server_without_sasl_refuses_a_sasl_header() -> None:
    server = Connection(server=True, container_id="s")
    events = server.receive_data(framing.SASL_HEADER)
    assert condition(the(events, ConnectionClosed).error) == "amqp:not-implemented"
    assert server.data_to_send() == framing.AMQP_HEADER


def test_server_refuses_an_unknown_protocol_header() -> None:
    server = Connection(server=True, container_id="s", sasl_server=SaslServerConfig())
    events = server.receive_data(b"HTTP/1.1")
    assert condition(the(events, ConnectionClosed).error) == "amqp:not-implemented"
    assert server.data_to_send() == framing.SASL_HEADER
    assert server.receive_data(b"more bytes") == []


def test_headers_may_arrive_a_byte_at_a_time() -> None:
    pair = Pair()
    pair.client.start()
    for _ in range(20):
        c = pair.client.data_to_send()
        for i in range(len(c)):
            pair.server_events += pair.server.receive_data(c[i : i + 1])
        s = pair.server.data_to_send()
        for i in range(len(s)):
            pair.client_events += pair.client.receive_data(s[i : i + 1])
        if not c and not s:
            break
    assert of(pair.client_events, ConnectionOpened) and of(pair.server_events, ConnectionOpened)


# --------------------------------------------------------------------------------------------
# Open, begin, attach
# --------------------------------------------------------------------------------------------


def test_open_exchanges_its_fields() -> None:
    pair = Pair(client={"max_frame_size": 1048576, "channel_max": 65535, "idle_timeout_ms": None,
                        "properties": {"product": "test"}},
                server={"max_frame_size": 65536, "channel_max": 4999, "idle_timeout_ms": 120000})
    pair.client.start()
    pair.pump()
    c, s = pair.take_events()
    server_open: Open = the(c, ConnectionOpened).remote
    client_open: Open = the(s, ConnectionOpened).remote
    assert server_open.container_id == "the-server"
    assert server_open.max_frame_size == 65536
    assert server_open.channel_max == 4999
    assert server_open.idle_time_out == 120000
    assert server_open.hostname is None
    assert client_open.container_id == "the-client"
    assert client_open.hostname == "localhost"
    assert client_open.max_frame_size == 1048576
    assert client_open.channel_max == 65535
    assert client_open.idle_time_out is None
    assert client_open.properties == {"product": "test"}
    assert pair.client.remote_max_frame_size == 65536
    assert pair.server.remote_max_frame_size == 1048576
    assert pair.server.remote_open == client_open
    # The wire form: uint max-frame-size, ushort channel-max, uint idle-time-out, symbol keys.
    _, fields, _ = performatives(bytes(pair.s2c))[-1]
    assert [type(v).__name__ for v in fields[:5]] == ["str", "NoneType", "UInt", "UShort", "UInt"]
    _, fields, _ = performatives(bytes(pair.c2s))[-1]
    assert isinstance(next(iter(fields[9])), Symbol)


def test_open_with_max_frame_size_below_512_is_refused() -> None:
    server = Connection(server=True, container_id="s")
    bad = Open("c", None, 100, 10, None, None, None, None, None, None).encode()
    events = server.receive_data(framing.AMQP_HEADER + framing.frame(0, 0, bad))
    assert condition(the(events, ConnectionClosed).error) == "amqp:invalid-field"
    out = server.data_to_send()
    names = [n for n, _, _ in performatives(out[8:])]
    assert names == ["open", "close"]  # 2.4.1: an open goes first even on the way out


def test_server_replies_begin_automatically() -> None:
    pair = opened_pair()
    session = pair.client.begin()
    assert session.state == "begin-sent"
    pair.pump()
    c, s = pair.take_events()
    server_session = the(s, SessionBegun).session
    assert the(c, SessionBegun).session is session
    assert session.state == server_session.state == "mapped"
    assert server_session.remote_channel == session.channel
    assert session.remote_channel == server_session.channel
    begins = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "begin"]
    assert len(begins) == 1
    remote_channel, next_outgoing, incoming_window, outgoing_window, handle_max = begins[0][:5]
    assert remote_channel == session.channel
    assert incoming_window > 0 and outgoing_window > 0 and handle_max > 0
    assert session.remote_incoming_window == incoming_window
    assert session.next_incoming_id == next_outgoing


def test_begin_reply_uses_first_outgoing_id() -> None:
    pair = opened_pair(server={"first_outgoing_id": 0x80000000})
    session, server_session = pair.session()
    assert session.next_incoming_id == 0x80000000
    assert server_session.next_outgoing_id == 0x80000000


def test_attach_accept_echoes_source_and_target() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    source = Source("amqps://localhost/queue1", filter={Symbol("com.microsoft:session-filter"): None})
    target = Target("receiver-link-x")
    client_link = session.attach("recv", RECEIVER, source, target, snd_settle_mode=0, rcv_settle_mode=1)
    pair.pump()
    c, s = pair.take_events()
    server_link = the(s, LinkAttachRequested).link
    assert server_link.role is SENDER and server_link.name == "recv"
    assert server_link.remote_attach is not None
    assert server_link.remote_attach.source == source
    assert server_link.snd_settle_mode == 0 and server_link.rcv_settle_mode == 1
    assert the(c, LinkAttached).link is client_link
    assert client_link.attached and server_link.attached
    reply = client_link.remote_attach
    assert reply is not None
    assert reply.source == source and reply.target == target
    assert reply.role is SENDER
    assert reply.initial_delivery_count == 0  # broker-as-sender must carry it (contract 1.6)
    assert client_link.remote_handle == server_link.handle
    assert server_link.remote_handle == client_link.handle
    attaches = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "attach"]
    assert len(attaches) == 1 and attaches[0][0] == "recv"


def test_attach_sender_link_reply_has_no_initial_delivery_count() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    assert server_link.role is RECEIVER
    assert client_link.remote_attach is not None
    assert client_link.remote_attach.initial_delivery_count is None
    assert client_link.remote_attach.target == Target("queue1")


def test_attach_refused() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    pair.on_attach = lambda link: link.refuse(Error("amqp:not-found", "no such entity", None))
    client_link = session.attach("l", SENDER, Source("local"), Target("nowhere"))
    pair.pump()
    c, s = pair.take_events()
    assert [type(e) for e in c] == [LinkAttached, LinkDetached]
    attached, detached = c
    assert attached.link is client_link and detached.link is client_link
    assert detached.closed is True
    assert detached.error == Error("amqp:not-found", "no such entity", None)
    reply = next(f for n, f, _ in performatives(bytes(pair.s2c)) if n == "attach")
    assert reply[5] is None and reply[6] is None  # null source and target
    assert reply[9] is None  # broker is the receiver: no initial-delivery-count
    detach = next(f for n, f, _ in performatives(bytes(pair.s2c)) if n == "detach")
    assert detach[1] is True
    assert detach[2].value == ["amqp:not-found", "no such entity", None]  # all three error fields
    # The client answered the detach; the server's link is gone too.
    server_link = the(s, LinkAttachRequested).link
    assert the(s, LinkDetached).link is server_link
    assert not session.links and not session.remote_links
    assert client_link.state == server_link.state == "detached"


def test_attach_refused_receiver_carries_initial_delivery_count() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    pair.on_attach = lambda link: link.refuse(Error("amqp:unauthorized-access", "no", None))
    session.attach("l", RECEIVER, Source("queue1"), Target("local"))
    pair.pump()
    reply = next(f for n, f, _ in performatives(bytes(pair.s2c)) if n == "attach")
    assert reply[5] is None and reply[6] is None and reply[9] == 0
    c, _ = pair.take_events()
    assert condition(the(c, LinkDetached).error) == "amqp:unauthorized-access"


def test_attach_handle_reuse_without_detach_forgets_the_old_link() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    first, server_first = pair.link(session, SENDER, "a")
    # Send a second attach with the same handle from a bare frame.
    again = Attach("b", first.handle, SENDER, 2, 0, Source("x"), Target("y"), None, False, 0, None,
                   None, None, None)
    events = pair.server.receive_data(framing.frame(0, session.channel, again.encode()))
    detached = the(events, LinkDetached)
    assert detached.link is server_first
    assert the(events, LinkAttachRequested).link.name == "b"
    assert server_session.remote_links[first.handle].name == "b"


def test_attach_then_detach_before_the_answer() -> None:
    """The peer detaches before the owner answered: the detach reply is preceded by an attach.

    A detach alone would name a handle the peer never saw; the Python SDK closes the whole
    connection with amqp:session:unattached-handle for that.
    """
    pair = opened_pair()
    session, _ = pair.session()
    link = session.attach("l", SENDER, Source("local"), Target("q"))
    link.detach()
    pair.on_attach = lambda server_link: None  # the owner has not answered yet
    pair.pump()
    c, s = pair.take_events()
    server_link = the(s, LinkAttachRequested).link
    assert the(s, LinkDetached).link is server_link
    server_link.accept()  # the owner answers late: nothing happens
    server_link.refuse(Error("amqp:not-found", None, None))
    assert pair.server.data_to_send() == b""
    replies = [(n, f) for n, f, _ in performatives(bytes(pair.s2c)) if n in ("attach", "detach")]
    assert [n for n, _ in replies] == ["attach", "detach"]
    assert replies[0][1][5] is None and replies[0][1][6] is None
    assert the(c, LinkDetached).link is link
    assert not of(c, LinkAttachRequested) and not of(c, LinkAttached)
    assert link.state == "detached" and not session.links and not session.remote_links


def test_owner_answers_after_a_teardown_in_the_same_batch_are_dropped() -> None:
    """Attach and close arrive together: the owner sees the attach first and answers a dead link."""
    pair = Pair(client_sasl=None)
    pair.client.start()
    session = pair.client.begin()
    session.attach("l", RECEIVER, Source("q"), Target("local"))
    pair.client.close()
    events = pair.server.receive_data(pair.client.data_to_send())
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, LinkAttachRequested, LinkDetached,
                                         SessionEnded, ConnectionClosed]
    link = events[2].link
    link.accept(initial_delivery_count=0)
    link.send_transfer(b"late", b"t", settled=False)
    link.settle(0, Accepted())
    link.detach()
    link.session.end()
    pair.server.close()
    out = performatives(pair.server.data_to_send()[8:])
    assert [n for n, _, _ in out] == ["open", "begin", "close"]


def test_nothing_is_written_after_our_own_close() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(5)
    pair.pump()
    pair.server.close(Error("amqp:connection:forced", "shutting down", None))
    server_link.send_transfer(b"x", b"t", settled=True)
    server_link.detach()
    server_link.session.end()
    assert [n for n, _, _ in performatives(pair.server.data_to_send())] == ["close"]
    # The peer's frames crossing our close on the wire are still consumed, and answered with nothing.
    client_link.detach()
    pair.client.data_to_send()
    pair.server.receive_data(framing.encode_flow(session.channel, 0, 10, 0, 10))
    assert pair.server.data_to_send() == b""


# --------------------------------------------------------------------------------------------
# Credit
# --------------------------------------------------------------------------------------------


def test_link_credit_and_credit_changed() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    assert server_link.link_credit == 0
    client_link.issue_credit(5)
    pair.pump()
    _, s = pair.take_events()
    assert the(s, CreditChanged).link is server_link
    assert server_link.link_credit == 5 and not server_link.drain
    for i in range(3):
        server_link.send_transfer(b"m%d" % i, b"t%d" % i, settled=True)
    assert server_link.link_credit == 2 and server_link.delivery_count == 3
    pair.pump()
    c, _ = pair.take_events()
    assert [e.delivery.payload for e in of(c, TransferReceived)] == [b"m0", b"m1", b"m2"]
    assert client_link.link_credit == 2 and client_link.delivery_count == 3
    # New credit is computed against the sender's delivery-count (2.6.7).
    client_link.issue_credit(10)
    pair.pump()
    _, s = pair.take_events()
    assert of(s, CreditChanged)
    assert server_link.link_credit == 10
    flows = [f for n, f, _ in performatives(bytes(pair.c2s)) if n == "flow"]
    assert flows[-1][4] == client_link.handle and flows[-1][5] == 3 and flows[-1][6] == 10


def test_credit_from_a_lagging_delivery_count() -> None:
    """A receiver flow whose delivery-count lags transfers in flight grants only what is left."""
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(4)
    pair.pump()
    for i in range(3):
        server_link.send_transfer(b"x", b"%d" % i, settled=True)
    client_link.issue_credit(4)  # sent before the three transfers arrive: delivery-count 0
    flow = pair.client.data_to_send()
    pair.server.receive_data(flow)
    assert server_link.link_credit == 1  # 0 + 4 - 3


def test_auto_credit_tops_up_a_receiving_link() -> None:
    pair = opened_pair()
    session, _ = pair.session()

    def accept(link: Link) -> None:
        link.auto_credit = 10
        link.accept()

    pair.on_attach = accept
    client_link, server_link = pair.link(session, SENDER)
    c, _ = pair.take_events()
    pair.pump()
    assert client_link.link_credit == 10
    for i in range(4):
        client_link.send_transfer(b"x", b"%d" % i, settled=True)
    pair.pump()
    _, s = pair.take_events()
    assert len(of(s, TransferReceived)) == 4
    assert server_link.link_credit == 6  # above half: no top-up yet
    assert client_link.link_credit == 6
    client_link.send_transfer(b"x", b"4", settled=True)
    pair.pump()
    c, s = pair.take_events()
    assert server_link.link_credit == 10  # fell to half: topped up
    assert of(c, CreditChanged)
    assert client_link.link_credit == 10
    for i in range(50):
        client_link.send_transfer(b"x", b"y%d" % i, settled=True)
        pair.pump()
    assert client_link.link_credit > 5 and server_link.link_credit > 5
    assert server_link.delivery_count == client_link.delivery_count == 55


def test_drain() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(5, drain=True)
    pair.pump()
    _, s = pair.take_events()
    assert the(s, CreditChanged).link is server_link
    assert server_link.drain and server_link.link_credit == 5
    server_link.send_transfer(b"a", b"1", settled=True)
    server_link.send_transfer(b"b", b"2", settled=True)
    server_link.drained()
    assert server_link.link_credit == 0 and server_link.delivery_count == 5
    pair.pump()
    c, _ = pair.take_events()
    assert len(of(c, TransferReceived)) == 2
    assert client_link.delivery_count == 5
    assert client_link.link_credit == 0
    flows = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "flow"]
    assert flows[-1][5] == 5 and flows[-1][6] == 0 and flows[-1][8] is True


def test_drained_without_a_drain_request_sends_nothing() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(3)
    pair.pump()
    server_link.drained()
    assert pair.server.data_to_send() == b""
    assert server_link.link_credit == 3


def test_echo_flow_is_answered() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.send_flow(echo=True)
    pair.pump()
    flows = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "flow"]
    assert flows and flows[-1][4] == server_link.handle and flows[-1][9] is False  # no echo of the echo
    before = len(pair.s2c)
    pair.client._write(framing.encode_flow(session.channel, session.next_incoming_id, 100,
                                           session.next_outgoing_id, 100, echo=True))
    pair.pump()
    names = [n for n, _, _ in performatives(bytes(pair.s2c[before:]))]
    assert names == ["flow"]  # a session flow echo is answered with a session flow


# --------------------------------------------------------------------------------------------
# Deliveries and dispositions
# --------------------------------------------------------------------------------------------


def test_settled_delivery_client_to_server() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    delivery_id = client_link.send_transfer(b"hello", b"tag", settled=True, message_format=0x80013700)
    pair.pump()
    _, s = pair.take_events()
    received = the(s, TransferReceived)
    assert received.link is server_link
    d = received.delivery
    assert (d.delivery_id, d.delivery_tag, d.payload, d.settled, d.message_format, d.oversize) == (
        delivery_id, b"tag", b"hello", True, 0x80013700, False)
    assert not session.outgoing_unsettled and not server_session.incoming_unsettled


def test_unsettled_delivery_client_to_server_settled_by_server() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    delivery_id = client_link.send_transfer(b"payload", b"t1", settled=False)
    assert session.outgoing_unsettled == {delivery_id: (client_link, b"t1")}
    pair.pump()
    _, s = pair.take_events()
    d = the(s, TransferReceived).delivery
    assert not d.settled
    assert server_session.incoming_unsettled == {delivery_id: (server_link, b"t1")}
    server_link.settle(d.delivery_id, Accepted())
    assert not server_session.incoming_unsettled
    pair.pump()
    c, _ = pair.take_events()
    assert the(c, DeliveryUpdated) == DeliveryUpdated(client_link, delivery_id, b"t1", True, Accepted())
    assert not session.outgoing_unsettled
    disposition = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "disposition"][-1]
    assert disposition[0] is RECEIVER and disposition[3] is True


def test_unsettled_delivery_server_to_client_with_settlement_echo() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(1)
    pair.pump()
    delivery_id = server_link.send_transfer(b"msg", b"lock-token-16byt", settled=False)
    pair.pump()
    c, _ = pair.take_events()
    d = the(c, TransferReceived).delivery
    assert d.delivery_id == delivery_id and not d.settled
    assert session.incoming_unsettled == {delivery_id: (client_link, b"lock-token-16byt")}
    state = Modified(True, False, None)
    client_link.settle(d.delivery_id, state, settled=False)  # the SDK's PeekLock pattern
    pair.pump()
    _, s = pair.take_events()
    assert the(s, DeliveryUpdated) == DeliveryUpdated(server_link, delivery_id, b"lock-token-16byt", False,
                                                      state)
    assert delivery_id in server_session.outgoing_unsettled  # unsettled update keeps it
    server_link.settle(delivery_id, state)
    pair.pump()
    c, _ = pair.take_events()
    assert the(c, DeliveryUpdated) == DeliveryUpdated(client_link, delivery_id, b"lock-token-16byt", True,
                                                      state)
    assert not session.incoming_unsettled and not server_session.outgoing_unsettled
    dispositions = [f for n, f, _ in performatives(bytes(pair.c2s)) if n == "disposition"]
    assert dispositions[-1][0] is RECEIVER and dispositions[-1][3] is False
    dispositions = [f for n, f, _ in performatives(bytes(pair.s2c)) if n == "disposition"]
    assert dispositions[-1][0] is SENDER and dispositions[-1][3] is True


def test_disposition_role_picks_the_delivery_id_space() -> None:
    """Delivery-id 0 exists in both directions at once; the role decides which one a disposition means."""
    pair = opened_pair()
    session, server_session = pair.session()
    to_server, server_receiver = pair.link(session, SENDER, "out")
    from_server, server_sender = pair.link(session, RECEIVER, "in")
    from_server.issue_credit(1)
    pair.pump()
    assert to_server.send_transfer(b"up", b"up-tag", settled=False) == 0
    assert server_sender.send_transfer(b"down", b"down-tag", settled=False) == 0
    pair.pump()
    pair.take_events()
    server_receiver.settle(0, Rejected(Error("x:y", "z", None)))
    pair.pump()
    c, _ = pair.take_events()
    update = the(c, DeliveryUpdated)
    assert update.link is to_server and update.delivery_tag == b"up-tag"
    assert update.state == Rejected(Error("x:y", "z", None))
    assert 0 in session.incoming_unsettled and 0 not in session.outgoing_unsettled
    from_server.settle(0, Released())
    pair.pump()
    _, s = pair.take_events()
    update = the(s, DeliveryUpdated)
    assert update.link is server_sender and update.delivery_tag == b"down-tag" and update.settled
    assert update.state == Released()
    assert not server_session.outgoing_unsettled and not server_session.incoming_unsettled


def test_disposition_range_settles_every_delivery_in_it() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, _ = pair.link(session, SENDER)
    ids = [client_link.send_transfer(b"m", b"%d" % i, settled=False) for i in range(5)]
    pair.pump()
    pair.take_events()
    server_session.disposition(RECEIVER, ids[1], ids[3], True, Accepted())
    pair.pump()
    c, _ = pair.take_events()
    updated = [(e.delivery_id, e.delivery_tag) for e in of(c, DeliveryUpdated)]
    assert updated == [(1, b"1"), (2, b"2"), (3, b"3")]
    assert sorted(session.outgoing_unsettled) == [0, 4]
    # A disposition for deliveries nobody knows is ignored.
    server_session.disposition(RECEIVER, 100, 2**32 - 1, True, Accepted())
    pair.pump()
    c, _ = pair.take_events()
    assert not of(c, DeliveryUpdated)


# --------------------------------------------------------------------------------------------
# Multi-frame and oversize deliveries
# --------------------------------------------------------------------------------------------


def transfer_frames(stream: bytes) -> list[tuple[Frame, list[Any], bytes]]:
    out = []
    for f in split_stream(stream)[1]:
        if f.heartbeat:
            continue
        code, fields, payload = f.performative()
        if code == 0x14:
            out.append((f, fields, payload))
    return out


@pytest.mark.parametrize("max_frame", [512, 1024])
def test_multi_frame_transfer_client_to_server(max_frame: int) -> None:
    pair = opened_pair(server={"max_frame_size": max_frame})
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    payload = bytes(i * 7 % 251 for i in range(100 * 1024))
    start = len(pair.c2s)
    delivery_id = client_link.send_transfer(payload, b"big", settled=False)
    pair.pump()
    _, s = pair.take_events()
    d = the(s, TransferReceived).delivery
    assert d.payload == payload
    assert d.delivery_id == delivery_id and d.delivery_tag == b"big" and not d.oversize
    frames = transfer_frames(bytes(pair.c2s[start:]))
    assert len(frames) > 100 * 1024 // max_frame
    assert all(f.size <= max_frame for f, _, _ in frames)
    assert all(f.size <= max_frame for f in split_stream(bytes(pair.c2s))[1])
    assert [fields[5] for _, fields, _ in frames] == [True] * (len(frames) - 1) + [False]
    assert b"".join(p for _, _, p in frames) == payload
    assert all(fields[1] == delivery_id and fields[2] == b"big" for _, fields, _ in frames)


def test_multi_frame_transfer_server_to_client() -> None:
    pair = opened_pair(client={"max_frame_size": 512})
    session, _ = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(1)
    pair.pump()
    payload = bytes(range(256)) * 400
    server_link.send_transfer(payload, b"t" * 16, settled=True)
    pair.pump()
    c, _ = pair.take_events()
    assert the(c, TransferReceived).delivery.payload == payload
    assert all(f.size <= 512 for f in split_stream(bytes(pair.s2c))[1])


def test_multi_frame_transfer_with_a_tiny_session_window() -> None:
    pair = opened_pair(server={"max_frame_size": 512, "session_window": 3})
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    payloads = [bytes([i]) * (5000 + i) for i in range(5)]
    for i, p in enumerate(payloads):
        client_link.send_transfer(p, b"%d" % i, settled=True)
    pair.pump()
    _, s = pair.take_events()
    assert [e.delivery.payload for e in of(s, TransferReceived)] == payloads


def test_frame_boundary_sizes_split_exactly() -> None:
    """Payloads around the single-frame limit and the split size all reassemble."""
    pair = opened_pair(server={"max_frame_size": 512})
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    sizes = list(range(380, 520)) + [2 * 480 + d for d in range(-3, 4)]
    for n in sizes:
        client_link.send_transfer(bytes([n % 256]) * n, b"tag", settled=True)
    pair.pump()
    _, s = pair.take_events()
    assert [len(e.delivery.payload) for e in of(s, TransferReceived)] == sizes
    assert all(f.size <= 512 for f in split_stream(bytes(pair.c2s))[1])


@pytest.mark.parametrize("size", [2000, 100 * 1024])
def test_oversize_delivery_is_reported_without_its_payload(size: int) -> None:
    pair = opened_pair(server={"max_frame_size": 4096})
    session, _ = pair.session()

    def accept(link: Link) -> None:
        link.max_message_size = 1000
        link.auto_credit = 10
        link.accept()

    pair.on_attach = accept
    client_link, server_link = pair.link(session, SENDER)
    assert client_link.remote_attach is not None and client_link.remote_attach.max_message_size == 1000
    client_link.send_transfer(b"z" * size, b"big", settled=False)
    client_link.send_transfer(b"z" * 1000, b"fits", settled=False)
    pair.pump()
    _, s = pair.take_events()
    big, fits = (e.delivery for e in of(s, TransferReceived))
    assert big.oversize and big.payload == b"" and big.delivery_tag == b"big" and not big.settled
    assert not fits.oversize and fits.payload == b"z" * 1000
    assert server_link.session.incoming_unsettled[big.delivery_id] == (server_link, b"big")


def test_aborted_delivery_is_dropped() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    channel = session.channel
    handle = client_link.handle
    first = framing.encode_transfer(channel, handle, 7, b"a", 0, False, True, b"part")
    aborted = bytearray(framing.encode_transfer(channel, handle, 7, b"a", 0, False, False, b""))
    aborted[-2] = 0x41  # aborted = true (second to last field)
    events = pair.server.receive_data(first + bytes(aborted))
    assert not of(events, TransferReceived)
    complete = framing.encode_transfer(channel, handle, 8, b"b", 0, True, False, b"ok")
    events = pair.server.receive_data(complete)
    assert the(events, TransferReceived).delivery.payload == b"ok"


# --------------------------------------------------------------------------------------------
# Session windows
# --------------------------------------------------------------------------------------------


def test_session_window_reopens_so_many_small_transfers_all_arrive() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, _ = pair.link(session, SENDER)
    n = 20_000
    assert n > 2 * server_session.max_incoming_window
    for i in range(n):
        client_link.send_transfer(b"m", i.to_bytes(4, "big"), settled=True)
    pair.pump()
    _, s = pair.take_events()
    got = of(s, TransferReceived)
    assert len(got) == n
    assert [int.from_bytes(e.delivery.delivery_tag, "big") for e in got] == list(range(n))
    session_flows = [f for n_, f, _ in performatives(bytes(pair.s2c)) if n_ == "flow" and f[4] is None]
    assert len(session_flows) >= n // server_session.max_incoming_window
    assert not session._blocked


def test_outgoing_transfers_queue_while_the_peer_window_is_closed() -> None:
    pair = opened_pair(server={"session_window": 3})
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    assert session.remote_incoming_window == 3
    for i in range(10):
        client_link.send_transfer(b"m%d" % i, b"%d" % i, settled=True)
    out = pair.client.data_to_send()
    assert len(transfer_frames(out)) == 3
    assert session.remote_incoming_window == 0 and len(session._blocked) == 7
    assert pair.client.data_to_send() == b""  # nothing more until the window reopens
    events = pair.server.receive_data(out)
    assert len(of(events, TransferReceived)) == 3
    reply = pair.server.data_to_send()
    assert [n for n, _, _ in performatives(reply)] == ["flow"]
    pair.client.receive_data(reply)
    flushed = pair.client.data_to_send()
    assert 0 < len(transfer_frames(flushed)) <= 3
    pair._server_got(pair.server.receive_data(flushed))
    pair.pump()
    got = of(pair.server_events, TransferReceived)
    assert [e.delivery.payload for e in got] == [b"m%d" % i for i in range(3, 10)]
    assert not session._blocked


def test_a_closed_window_holds_every_transfer_until_a_flow() -> None:
    """A peer that begins with incoming-window 0 gets nothing until its flow opens the window."""
    server = Connection(server=True, container_id="s", session_window=0)
    client = Connection(server=False, container_id="c")
    client.start()
    session = client.begin()
    link = session.attach("l", SENDER, Source("a"), Target("b"))
    server_events = server.receive_data(client.data_to_send())
    server_link = the(server_events, LinkAttachRequested).link
    server_link.accept()
    client.receive_data(server.data_to_send())
    assert session.remote_incoming_window == 0
    for i in range(4):
        link.send_transfer(b"x", b"%d" % i, settled=True)
    assert not transfer_frames(client.data_to_send())
    server_session = server_link.session
    server_session.incoming_window = 2
    server_session.send_session_flow()
    client.receive_data(server.data_to_send())
    assert len(transfer_frames(client.data_to_send())) == 2
    assert len(session._blocked) == 2


def test_a_flow_that_shrinks_the_window_below_what_is_in_flight_closes_it() -> None:
    """2.5.6: remote-incoming-window = next-incoming-id + incoming-window - next-outgoing-id, never < 0."""
    pair = opened_pair(server={"session_window": 5})
    session, server_session = pair.session()
    client_link, _ = pair.link(session, SENDER)
    for i in range(12):
        client_link.send_transfer(b"x", b"%d" % i, settled=True)
    in_flight = pair.client.data_to_send()
    assert len(transfer_frames(in_flight)) == 5
    # The server shrinks its window before the five transfers arrive: 0 + 2 - 5 < 0.
    server_session.incoming_window = 2
    server_session.send_session_flow()
    pair.client.receive_data(pair.server.data_to_send())
    assert session.remote_incoming_window == 0
    assert pair.client.data_to_send() == b""
    assert len(session._blocked) == 7
    server_session.incoming_window = 5
    pair._server_got(pair.server.receive_data(in_flight))
    pair.pump()
    assert len(of(pair.server_events, TransferReceived)) == 12


# --------------------------------------------------------------------------------------------
# Detach, end, close, transport loss
# --------------------------------------------------------------------------------------------


def test_client_detaches_with_an_error() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    client_link.detach(Error("x:client-gone", "bye", None))
    pair.pump()
    c, s = pair.take_events()
    assert the(s, LinkDetached) == LinkDetached(server_link, Error("x:client-gone", "bye", None), True)
    assert the(c, LinkDetached) == LinkDetached(client_link, None, True)
    assert not session.links and not server_session.links and not server_session.remote_links


def test_server_detaches_with_an_error_not_closed() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, RECEIVER)
    client_link.issue_credit(2)
    pair.pump()
    server_link.send_transfer(b"m", b"t", settled=False)
    pair.pump()
    assert session.incoming_unsettled
    server_link.detach(Error("amqp:link:stolen", "another receiver", None), closed=False)
    pair.pump()
    c, s = pair.take_events()
    detached = the(c, LinkDetached)
    assert detached.link is client_link and detached.closed is False
    assert condition(detached.error) == "amqp:link:stolen"
    assert the(s, LinkDetached).link is server_link
    assert not session.incoming_unsettled and not server_session.outgoing_unsettled
    reply = [f for n, f, _ in performatives(bytes(pair.c2s)) if n == "detach"][-1]
    assert reply[1] is False  # the answering detach mirrors closed


def test_detach_twice_sends_one_frame() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, _ = pair.link(session, SENDER)
    client_link.detach()
    client_link.detach()
    assert [n for n, _, _ in performatives(pair.client.data_to_send())] == ["detach"]


def test_client_ends_a_session_with_an_error() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    session.end(Error("x:session", "done", None))
    session.end()  # idempotent
    pair.pump()
    c, s = pair.take_events()
    assert the(s, SessionEnded) == SessionEnded(server_session, Error("x:session", "done", None))
    assert the(s, LinkDetached).link is server_link
    assert the(c, SessionEnded) == SessionEnded(session, None)
    assert the(c, LinkDetached).link is client_link
    assert session.state == server_session.state == "ended"
    assert not pair.client.sessions and not pair.server.sessions and not pair.server.remote_sessions
    assert [n for n, _, _ in performatives(bytes(pair.c2s))].count("end") == 1


def test_server_ends_a_session_with_an_error() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, _ = pair.link(session, RECEIVER)
    server_session.end(Error("amqp:session:window-violation", "too much", None))
    pair.pump()
    c, s = pair.take_events()
    assert condition(the(c, SessionEnded).error) == "amqp:session:window-violation"
    detached = the(c, LinkDetached)
    assert detached.link is client_link and condition(detached.error) == "amqp:session:window-violation"
    assert the(s, SessionEnded).session is server_session
    assert not pair.client.sessions and not pair.server.sessions
    # The channel is free again: a new session works.
    new_session, _ = pair.session()
    assert new_session.channel == session.channel


def test_client_closes_with_an_error() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    pair.link(session, SENDER)
    pair.client.close(Error("x:client", "shutting down", None))
    pair.client.close()  # idempotent
    pair.pump()
    c, s = pair.take_events()
    closed = the(s, ConnectionClosed)
    assert closed.by_peer and closed.error == Error("x:client", "shutting down", None)
    assert the(s, SessionEnded).session is server_session
    assert of(s, LinkDetached)
    assert the(c, ConnectionClosed).error is None
    assert the(c, SessionEnded).session is session
    assert pair.client.closed and pair.server.closed
    assert [n for n, _, _ in performatives(bytes(pair.c2s))].count("close") == 1
    assert [n for n, _, _ in performatives(bytes(pair.s2c))].count("close") == 1
    assert pair.server.receive_data(b"\x00" * 16) == []


def test_server_closes_with_an_error() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    client_link, _ = pair.link(session, RECEIVER)
    pair.server.close(Error("amqp:connection:forced", "broker shutting down", None))
    pair.pump()
    c, s = pair.take_events()
    closed = the(c, ConnectionClosed)
    assert closed.by_peer and condition(closed.error) == "amqp:connection:forced"
    assert the(c, SessionEnded).session is session
    assert the(c, LinkDetached).link is client_link
    assert the(s, ConnectionClosed).error is None
    close = next(f for n, f, _ in performatives(bytes(pair.s2c)) if n == "close")
    assert close[0].value == ["amqp:connection:forced", "broker shutting down", None]


def test_connection_lost_tears_everything_down() -> None:
    pair = opened_pair()
    session, server_session = pair.session()
    client_link, server_link = pair.link(session, SENDER)
    events = pair.server.connection_lost()
    assert [type(e) for e in events] == [LinkDetached, SessionEnded, ConnectionClosed]
    assert events[0].link is server_link and events[1].session is server_session
    closed = events[2]
    assert closed.by_peer and condition(closed.error) == "amqp:connection:forced"
    assert pair.server.closed and not pair.server.sessions
    assert pair.server.connection_lost() == []
    assert pair.server.data_to_send() == b""
    events = pair.client.connection_lost()
    assert of(events, ConnectionClosed) and the(events, LinkDetached).link is client_link


def test_connection_lost_before_open() -> None:
    server = Connection(server=True, container_id="s", sasl_server=SaslServerConfig())
    server.receive_data(framing.SASL_HEADER[:4])
    events = server.connection_lost()
    assert [type(e) for e in events] == [ConnectionClosed]


# --------------------------------------------------------------------------------------------
# Idle timeout and heartbeats
# --------------------------------------------------------------------------------------------


def test_heartbeat_when_half_the_peers_idle_timeout_has_passed() -> None:
    pair = opened_pair(client={"idle_timeout_ms": 10_000})
    assert pair.server.remote_open is not None and pair.server.remote_open.idle_time_out == 10_000
    assert pair.server.tick(4.9) == []
    assert pair.server.data_to_send(4.9) == b""
    assert pair.server.tick(5.0) == []
    assert pair.server.data_to_send(5.0) == b"\x00\x00\x00\x08\x02\x00\x00\x00"
    pair.server.tick(9.9)
    assert pair.server.data_to_send(9.9) == b""
    pair.server.tick(10.0)
    assert pair.server.data_to_send(10.0) == framing.HEARTBEAT
    # Other traffic counts as a send and postpones the heartbeat.
    pair.server.close()
    pair.server.data_to_send(12.0)
    pair.server.tick(16.9)
    assert pair.server.data_to_send(16.9) == b""
    # The peer swallows heartbeats without events.
    assert pair.client.receive_data(framing.HEARTBEAT, 11.0) == []


def test_no_heartbeat_without_a_peer_idle_timeout() -> None:
    pair = opened_pair()
    assert pair.server.tick(1e6) == []
    assert pair.server.data_to_send(1e6) == b""


def test_idle_timeout_closes_a_silent_peer() -> None:
    pair = opened_pair(server={"idle_timeout_ms": 1000})
    assert pair.client.remote_open is not None and pair.client.remote_open.idle_time_out == 1000
    assert pair.server.tick(1.9) == []
    pair.server.receive_data(framing.HEARTBEAT, 1.5)
    assert pair.server.tick(3.5) == []  # exactly twice the timeout since the heartbeat: not yet
    assert not pair.server.closed
    events = pair.server.tick(3.6)
    closed = the(events, ConnectionClosed)
    assert condition(closed.error) == "amqp:resource-limit-exceeded" and not closed.by_peer
    assert pair.server.closed
    names = performatives(pair.server.data_to_send(3.6))
    assert [n for n, _, _ in names] == ["close"]
    assert names[0][1][0].value[0] == "amqp:resource-limit-exceeded"
    assert pair.server.tick(100.0) == []


def test_tick_before_open_does_nothing() -> None:
    server = Connection(server=True, container_id="s", idle_timeout_ms=10)
    assert server.tick(1000.0) == []
    assert not server.closed


# --------------------------------------------------------------------------------------------
# Framing errors and pipelining
# --------------------------------------------------------------------------------------------


def test_frame_larger_than_our_max_frame_size_closes_with_framing_error() -> None:
    pair = opened_pair(server={"max_frame_size": 512})
    session, _ = pair.session()
    header_only = struct.pack(">IBBH", 513, 2, 0, session.channel)
    events = pair.server.receive_data(header_only)
    closed = the(events, ConnectionClosed)
    assert condition(closed.error) == "amqp:connection:framing-error" and not closed.by_peer
    assert of(events, SessionEnded)
    close = performatives(pair.server.data_to_send())
    assert [n for n, _, _ in close] == ["close"]
    assert close[0][1][0].value[0] == "amqp:connection:framing-error"


def test_malformed_frame_header_closes_with_framing_error() -> None:
    pair = opened_pair()
    events = pair.server.receive_data(struct.pack(">IBBH", 16, 1, 0, 0) + b"\x00" * 8)
    assert condition(the(events, ConnectionClosed).error) == "amqp:connection:framing-error"


def test_unknown_frame_type_closes_with_framing_error() -> None:
    pair = opened_pair()
    events = pair.server.receive_data(framing.frame(7, 0, b"\x00\x53\x17\x45"))
    assert condition(the(events, ConnectionClosed).error) == "amqp:connection:framing-error"


def test_garbage_performative_closes_with_decode_error() -> None:
    pair = opened_pair()
    events = pair.server.receive_data(framing.frame(0, 0, b"\xa1\x02hi"))
    assert condition(the(events, ConnectionClosed).error) == "amqp:decode-error"
    close = performatives(pair.server.data_to_send())
    assert close[0][1][0].value[0] == "amqp:decode-error"


def test_begin_before_open_is_illegal() -> None:
    server = Connection(server=True, container_id="s")
    begin = framing.frame(0, 0, b"\x00\x53\x11\xc0\x05\x04\x40\x43\x43\x43")
    events = server.receive_data(framing.AMQP_HEADER + begin)
    assert condition(the(events, ConnectionClosed).error) == "amqp:illegal-state"
    names = [n for n, _, _ in performatives(server.data_to_send()[8:])]
    assert names == ["open", "close"]


def test_pipelined_begin_and_attach_wait_behind_open() -> None:
    pair = Pair()
    pair.client.start()
    session = pair.client.begin()
    link = session.attach("cbs", SENDER, Source("local"), Target("$cbs"))
    assert pair.client.data_to_send() == framing.SASL_HEADER  # begin and attach are held back
    pair.c2s += framing.SASL_HEADER
    pair._server_got(pair.server.receive_data(framing.SASL_HEADER))
    pair.pump()
    c, s = pair.take_events()
    assert of(c, ConnectionOpened) and of(s, ConnectionOpened)
    assert the(c, SessionBegun).session is session
    assert the(c, LinkAttached).link is link and link.attached
    assert [n for n, _, _ in performatives(bytes(pair.c2s))] == ["sasl-init", "open", "begin", "attach"]
    # The AMQP header precedes the open in the same write.
    _, frames = split_stream(bytes(pair.c2s))
    assert split_stream(bytes(pair.c2s))[0] == [framing.SASL_HEADER, framing.AMQP_HEADER]
    assert len(frames) == 4


def test_pipelined_open_begin_attach_arrive_in_one_chunk() -> None:
    pair = Pair(client_sasl=None)
    pair.client.start()
    session = pair.client.begin()
    session.attach("l", SENDER, Source("local"), Target("q"))
    chunk = pair.client.data_to_send()
    events = pair.server.receive_data(chunk)
    assert [type(e) for e in events] == [ConnectionOpened, SessionBegun, LinkAttachRequested]
    reply = pair.server.data_to_send()
    assert reply.startswith(framing.AMQP_HEADER)
    assert [n for n, _, _ in performatives(reply[8:])] == ["open", "begin"]
    events[-1].link.accept()
    client_events = pair.client.receive_data(reply + pair.server.data_to_send())
    assert [type(e) for e in client_events] == [ConnectionOpened, SessionBegun, LinkAttached]


# --------------------------------------------------------------------------------------------
# Encoding: full field lists, small-ulong descriptors
# --------------------------------------------------------------------------------------------


def test_every_performative_is_written_with_a_small_ulong_descriptor_and_full_fields() -> None:
    pair = Pair()
    pair.client.start()
    pair.pump()
    session, server_session = pair.session()
    snd, server_rcv = pair.link(session, SENDER, "snd")
    rcv, server_snd = pair.link(session, RECEIVER, "rcv")
    rcv.issue_credit(3, drain=True)
    snd.send_transfer(b"a" * 3000, b"t", settled=False)
    pair.pump()
    server_snd.send_transfer(b"b", b"u", settled=False)
    server_snd.drained()
    server_rcv.settle(0, Rejected(Error("amqp:link:message-size-exceeded", "too big", None)))
    pair.pump()
    rcv.settle(0, Accepted())
    snd.detach(Error("x:y", None, None))
    pair.pump()
    server_session.end()
    pair.pump()
    pair.client.close()
    pair.pump()
    seen: set[str] = set()
    for stream in (bytes(pair.c2s), bytes(pair.s2c)):
        for f in split_stream(stream)[1]:
            if f.heartbeat:
                continue
            assert f.body[:2] == b"\x00\x53", f.body[:8].hex()
            code = f.body[2]
            name, count = FIELD_COUNTS[code]
            _, fields, _ = f.performative()
            assert len(fields) == count, f"{name} has {len(fields)} fields"
            seen.add(name)
            for value in fields:
                if isinstance(value, Described):  # nested composites: errors, termini, states
                    assert isinstance(value.descriptor, int) and value.descriptor < 0x100
            if name in ("detach", "close", "end") and fields[-1 if name != "detach" else 2] is not None:
                error = fields[-1 if name != "detach" else 2]
                assert len(error.value) == 3  # condition, description, info, explicit nulls
            if name == "disposition" and isinstance(fields[4], Described) and fields[4].descriptor == 0x25:
                assert len(fields[4].value) == 1 and len(fields[4].value[0].value) == 3
    assert seen == {name for name, _ in FIELD_COUNTS.values()}


def test_source_and_target_are_encoded_with_all_their_fields() -> None:
    pair = opened_pair()
    session, _ = pair.session()
    pair.link(session, RECEIVER)
    attach = next(f for n, f, _ in performatives(bytes(pair.s2c)) if n == "attach")
    assert attach[5].descriptor == 0x28 and len(attach[5].value) == 11
    assert attach[6].descriptor == 0x29 and len(attach[6].value) == 7


def test_a_peer_that_asked_for_no_heartbeats_gets_one_after_our_own_silence() -> None:
    pair = opened_pair(server={"silence_heartbeat_s": 3.0})
    assert pair.server.remote_open is not None and pair.server.remote_open.idle_time_out is None
    assert pair.server.next_tick(1.0) == pytest.approx(2.0)  # the open went out at 0
    assert pair.server.tick(2.9) == [] and pair.server.data_to_send(2.9) == b""
    pair.server.tick(3.0)
    assert pair.server.data_to_send(3.0) == framing.HEARTBEAT
    assert pair.server.next_tick(3.0) == pytest.approx(3.0)


def test_next_tick_is_the_earlier_of_heartbeat_and_idle_check() -> None:
    pair = opened_pair(client={"idle_timeout_ms": 10_000}, server={"idle_timeout_ms": 1000})
    pair.server.data_to_send(0.0)
    pair.server.receive_data(framing.HEARTBEAT, 0.0)
    assert pair.server.next_tick(0.0) == pytest.approx(2.0)  # the idle check, twice our own timeout
    pair.server.receive_data(framing.HEARTBEAT, 4.0)
    assert pair.server.next_tick(4.0) == pytest.approx(1.0)  # the heartbeat at half of the peer's 10 s
    assert Connection(server=True, container_id="s").next_tick(0.0) is None  # not open: nothing due
