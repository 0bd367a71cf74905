"""The endpoint transition tables (``sodalite.amqp.states``) and the endpoints that walk them.

Two kinds of test: the tables themselves (every legal transition gives a state of the same
endpoint, every state is reachable, every event a table leaves out raises the one protocol error
naming endpoint, state and event), and real client/server connections in memory walking them, so
a table and the code that consults it cannot drift apart.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import pytest

from sodalite.amqp import framing
from sodalite.amqp.connection import Connection
from sodalite.amqp.errors import IllegalState, ProtocolError
from sodalite.amqp.events import ConnectionClosed, Event, LinkAttachRequested
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import Error, Open, Source, Target
from sodalite.amqp.sasl import SaslClientConfig, SaslServerConfig
from sodalite.amqp.states import (
    CONNECTION_TRANSITIONS,
    LINK_TRANSITIONS,
    SESSION_TRANSITIONS,
    ConnectionEvent,
    ConnectionState,
    IllegalTransition,
    LinkEvent,
    LinkState,
    Role,
    SessionEvent,
    SessionState,
    advance,
)

CS, CE = ConnectionState, ConnectionEvent
TABLES: list[tuple[str, Mapping[Any, Mapping[Any, Any]], type[enum.Enum], type[enum.Enum], enum.Enum]] = [
    ("server connection", CONNECTION_TRANSITIONS[Role.SERVER], CS, CE, CS.HEADER),
    ("client connection", CONNECTION_TRANSITIONS[Role.CLIENT], CS, CE, CS.START),
    ("session", SESSION_TRANSITIONS, SessionState, SessionEvent, SessionState.UNMAPPED),
    ("link", LINK_TRANSITIONS, LinkState, LinkEvent, LinkState.DETACHED),
]


def _legal() -> list[tuple[str, Any, Any, Any]]:
    return [(name, state, event, new) for name, table, _, _, _ in TABLES
            for state, row in table.items() for event, new in row.items()]


def _illegal() -> list[tuple[str, Any, Any]]:
    return [(name, state, event) for name, table, _, events, _ in TABLES
            for state, row in table.items() for event in events if event not in row]


@pytest.mark.parametrize(("name", "state", "event", "new"), _legal())
def test_every_legal_transition(name: str, state: Any, event: Any, new: Any) -> None:
    table = next(t for n, t, *_ in TABLES if n == name)
    assert advance(name, table, state, event) is new
    assert type(new) is type(state)  # a transition never leaves its endpoint's states


@pytest.mark.parametrize(("name", "state", "event"), _illegal())
def test_every_illegal_event_is_the_one_protocol_error(name: str, state: Any, event: Any) -> None:
    table = next(t for n, t, *_ in TABLES if n == name)
    with pytest.raises(IllegalTransition) as caught:
        advance(name, table, state, event)
    error = caught.value
    assert isinstance(error, IllegalState) and isinstance(error, ProtocolError)
    assert error.condition == "amqp:illegal-state"
    assert (error.endpoint, error.state, error.event) == (name, state, event)
    assert name in error.description and state.value in error.description and event.value in error.description


@pytest.mark.parametrize(("name", "table", "states", "initial"), [(n, t, s, i) for n, t, s, _, i in TABLES])
def test_every_state_is_reachable_and_closing_is_always_legal(name: str, table: Mapping[Any, Mapping[Any, Any]],
                                                              states: type[enum.Enum], initial: enum.Enum) -> None:
    seen, todo = {initial}, [initial]
    while todo:
        for new in table.get(todo.pop(), {}).values():
            if new not in seen:
                seen.add(new)
                todo.append(new)
    assert seen == set(table), f"{name}: unreachable {set(table) - seen}"
    ending = {"server connection": ConnectionEvent.TORN_DOWN, "client connection": ConnectionEvent.TORN_DOWN,
              "session": SessionEvent.TORN_DOWN, "link": LinkEvent.FORGOTTEN}[name]
    assert all(ending in table[s] for s in table)
    if not name.endswith("connection"):  # (each connection role has a part of the connection states)
        assert set(table) == set(states)


# ---- real endpoints walking the tables --------------------------------------------------------------


class Pair:
    """A client and a server connection in memory; ``pump`` moves bytes until both are quiet."""

    def __init__(self, *, server_answers: bool = True) -> None:
        self.client = Connection(server=False, container_id="c", hostname="localhost",
                                 sasl_client=SaslClientConfig(hostname="localhost"))
        self.server = Connection(server=True, container_id="s", sasl_server=SaslServerConfig())
        self.server_events: list[Event] = []
        self.client_events: list[Event] = []
        self.server_answers = server_answers
        self.client_phases: list[ConnectionState] = [self.client.phase]
        self.server_phases: list[ConnectionState] = [self.server.phase]

    def pump(self) -> None:
        for _ in range(1000):
            c, s = self.client.data_to_send(), self.server.data_to_send()
            if not c and not s:
                return
            for chunk in (c[i : i + 1] for i in range(len(c))):  # a byte at a time: every phase is seen
                for event in self.server.receive_data(chunk):
                    self.server_events.append(event)
                    if isinstance(event, LinkAttachRequested) and self.server_answers:
                        event.link.accept()
                if self.server.phase != self.server_phases[-1]:
                    self.server_phases.append(self.server.phase)
            if s:
                self.client_events.extend(self.client.receive_data(s))
            if self.client.phase != self.client_phases[-1]:
                self.client_phases.append(self.client.phase)
        raise AssertionError("never quiet")


def test_connections_walk_their_role_tables_through_sasl_to_opened_and_closed() -> None:
    pair = Pair()
    pair.client.start()
    pair.pump()
    assert pair.server_phases == [ConnectionState.HEADER, ConnectionState.SASL_INIT,
                                  ConnectionState.AMQP_HEADER_EXPECTED, ConnectionState.OPEN, ConnectionState.OPENED]
    assert pair.client_phases[0] is ConnectionState.START and pair.client_phases[-1] is ConnectionState.OPENED
    assert pair.client.role is Role.CLIENT and pair.server.role is Role.SERVER
    pair.client.close()
    pair.pump()
    assert pair.client.phase is pair.server.phase is ConnectionState.CLOSED


def test_a_second_open_is_an_illegal_event_named_in_the_close() -> None:
    pair = Pair()
    pair.client.start()
    pair.pump()
    events = pair.server.receive_data(framing.frame(framing.FRAME_AMQP, 0, Open("again").encode()))
    closed = next(e for e in events if isinstance(e, ConnectionClosed))
    assert closed.error is not None and closed.error.condition == "amqp:illegal-state"
    assert "server connection" in (closed.error.description or "")
    assert "open-received" in (closed.error.description or "") and "opened" in (closed.error.description or "")
    assert pair.server.phase is ConnectionState.CLOSED


def test_a_client_cannot_start_twice() -> None:
    pair = Pair()
    pair.client.start()
    with pytest.raises(IllegalTransition):
        pair.client.start()


def _opened() -> Pair:
    pair = Pair()
    pair.client.start()
    pair.pump()
    return pair


def test_sessions_walk_begin_sent_mapped_end_sent_ended() -> None:
    pair = _opened()
    session = pair.client.begin()
    assert session.state is SessionState.BEGIN_SENT
    pair.pump()
    server_session = pair.server.sessions[0]
    assert session.state is server_session.state is SessionState.MAPPED
    session.end()
    assert session.state is SessionState.END_SENT
    session.end()  # a second end is legal and sends nothing more
    pair.pump()
    assert session.state is server_session.state is SessionState.ENDED


def _link(pair: Pair, role: bool = SENDER) -> tuple[Link, Link]:
    session = pair.client.begin()
    link = session.attach("l", role, Source("q" if role is RECEIVER else "here"),
                          Target("q" if role is SENDER else "here"))
    assert link.state is LinkState.ATTACH_SENT
    pair.pump()
    server_link = next(e for e in pair.server_events if isinstance(e, LinkAttachRequested)).link
    return link, server_link


def test_links_walk_attach_sent_and_attach_received_to_attached_then_detach() -> None:
    pair = _opened()
    link, server_link = _link(pair)
    assert link.state is server_link.state is LinkState.ATTACHED
    with pytest.raises(IllegalTransition, match="accepted is not allowed in state attached"):
        server_link.accept()  # the owner cannot answer an attach twice
    link.detach()
    assert link.state is LinkState.DETACH_SENT
    link.detach()  # legal, and nothing more is sent
    pair.pump()
    assert link.state is server_link.state is LinkState.DETACHED


def test_a_refused_link_goes_detach_sent_then_detached_on_both_sides() -> None:
    pair = Pair(server_answers=False)
    pair.client.start()
    pair.pump()
    link, server_link = _link(pair)
    assert server_link.state is LinkState.ATTACH_RECEIVED
    server_link.refuse(Error("amqp:not-found", "no", None))
    assert server_link.state is LinkState.DETACH_SENT
    pair.pump()
    assert link.state is server_link.state is LinkState.DETACHED
    server_link.accept()  # the answer of an owner that comes too late changes nothing
    assert server_link.state is LinkState.DETACHED


def test_a_peer_refusal_is_the_refused_state_until_its_detach() -> None:
    pair = Pair(server_answers=False)
    pair.client.start()
    pair.pump()
    link, server_link = _link(pair)
    server_link.refuse(Error("amqp:not-found", "no", None))
    reply = pair.server.data_to_send()
    size = int.from_bytes(reply[:4], "big")
    pair.client.receive_data(reply[:size])  # the attach with null source and target
    assert link.state is LinkState.REFUSED
    pair.client.receive_data(reply[size:])  # its closing detach: answered, and the link is gone
    assert link.state is LinkState.DETACHED
    pair.pump()
    assert server_link.state is LinkState.DETACHED
