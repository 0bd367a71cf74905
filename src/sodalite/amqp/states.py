"""Endpoint states of AMQP 1.0: every legal transition of a connection, a session and a link.

Theory of operation. All state changes of the three endpoints happen through :func:`advance`, and
the legal ones are the dictionary literals below: state → event → new state (for the connection
also keyed by role, since a client and a server walk the handshake differently). An event a table
does not list for the current state is illegal and raises :class:`IllegalTransition`, one uniform
protocol error (``amqp:illegal-state``) that names the endpoint, the state and the event; raised
while reading the peer's frames it closes the connection like any other protocol error. Some
events are legal but change nothing (a second ``END_SENT`` after ``end``, a late ``ACCEPT`` on a
link the peer has already detached): they map a state to itself, so "ignored" is written down
rather than left to an ``if``.

Events are named for what happened at this endpoint, in the past tense: ``*_SENT`` for a
performative this side sent, ``*_RECEIVED`` for one the peer sent; ``FORGOTTEN`` and ``TORN_DOWN``
for endings that involve no frame of their own (the session ended under a link, the transport went).

Connection (AMQP 1.0 part 2, 2.4.1 and part 5, 5.3.2), server role::

    HEADER --SASL_HEADER_RECEIVED--> SASL_INIT --SASL_INIT_RECEIVED--> AMQP_HEADER_EXPECTED
    HEADER | AMQP_HEADER_EXPECTED --AMQP_HEADER_RECEIVED--> OPEN --OPEN_RECEIVED--> OPENED

client role::

    START --SASL_HEADER_SENT--> SASL_HEADER --SASL_HEADER_RECEIVED--> SASL_MECHANISMS
          --SASL_INIT_SENT--> SASL_OUTCOME --SASL_OUTCOME_RECEIVED--> AMQP_HEADER
    START --AMQP_HEADER_SENT--> AMQP_HEADER --AMQP_HEADER_RECEIVED--> OPEN --OPEN_RECEIVED--> OPENED

and from any state ``TORN_DOWN`` leads to CLOSED. Session (2.5.5)::

    UNMAPPED --BEGIN_SENT--> BEGIN_SENT --BEGIN_RECEIVED--> MAPPED --END_SENT--> END_SENT
    BEGIN_SENT | MAPPED | END_SENT --END_RECEIVED / TORN_DOWN--> ENDED

Link (2.6.3), attached by this side or by the peer::

    DETACHED --ATTACH_SENT--> ATTACH_SENT --ATTACH_RECEIVED--> ATTACHED (or REFUSED: null terminus)
    DETACHED --ATTACH_RECEIVED--> ATTACH_RECEIVED --ACCEPTED--> ATTACHED
                                                  --REFUSED--> DETACH_SENT (null attach + detach)
    any attached state --DETACH_SENT / DETACH_RECEIVED--> DETACH_SENT --FORGOTTEN--> DETACHED
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final, TypeVar

from sodalite.amqp.errors import IllegalState


class IllegalTransition(IllegalState):
    """An event the endpoint's transition table does not allow in its current state."""

    def __init__(self, endpoint: str, state: enum.Enum, event: enum.Enum) -> None:
        super().__init__(f"{endpoint}: {event.value} is not allowed in state {state.value}")
        self.endpoint = endpoint
        self.state = state
        self.event = event


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


# ---- connection ----------------------------------------------------------------------------------


class ConnectionState(enum.StrEnum):
    START = "start"  # client: nothing sent yet
    HEADER = "header"  # server: waiting for the peer's protocol header
    SASL_HEADER = "sasl-header"  # client: sent the SASL header, waiting for the server's
    SASL_MECHANISMS = "sasl-mechanisms"  # client: waiting for sasl-mechanisms
    SASL_INIT = "sasl-init"  # server: offered mechanisms, waiting for sasl-init
    SASL_OUTCOME = "sasl-outcome"  # client: sent sasl-init, waiting for the outcome
    AMQP_HEADER_EXPECTED = "amqp-header-expected"  # server: SASL done, waiting for the AMQP header
    AMQP_HEADER = "amqp-header"  # client: sent the AMQP header (and open), waiting for the server's
    OPEN = "open"  # waiting for the peer's open
    OPENED = "opened"
    CLOSED = "closed"


class ConnectionEvent(enum.StrEnum):
    SASL_HEADER_SENT = "sasl-header-sent"
    AMQP_HEADER_SENT = "amqp-header-sent"
    SASL_HEADER_RECEIVED = "sasl-header-received"
    AMQP_HEADER_RECEIVED = "amqp-header-received"
    SASL_INIT_SENT = "sasl-init-sent"
    SASL_INIT_RECEIVED = "sasl-init-received"  # and accepted: a refused one tears down
    SASL_OUTCOME_RECEIVED = "sasl-outcome-received"  # and ok
    OPEN_RECEIVED = "open-received"
    TORN_DOWN = "torn-down"  # close exchanged, a protocol error, or the transport went


CS, CE = ConnectionState, ConnectionEvent
_TORN_DOWN: Final = {CE.TORN_DOWN: CS.CLOSED}

CONNECTION_TRANSITIONS: Final[Mapping[Role, Mapping[ConnectionState, Mapping[ConnectionEvent, ConnectionState]]]] = {
    Role.SERVER: {
        CS.HEADER: {CE.SASL_HEADER_RECEIVED: CS.SASL_INIT, CE.AMQP_HEADER_RECEIVED: CS.OPEN, **_TORN_DOWN},
        CS.SASL_INIT: {CE.SASL_INIT_RECEIVED: CS.AMQP_HEADER_EXPECTED, **_TORN_DOWN},
        CS.AMQP_HEADER_EXPECTED: {CE.AMQP_HEADER_RECEIVED: CS.OPEN, **_TORN_DOWN},
        CS.OPEN: {CE.OPEN_RECEIVED: CS.OPENED, **_TORN_DOWN},
        CS.OPENED: {**_TORN_DOWN},
        CS.CLOSED: {**_TORN_DOWN},
    },
    Role.CLIENT: {
        CS.START: {CE.SASL_HEADER_SENT: CS.SASL_HEADER, CE.AMQP_HEADER_SENT: CS.AMQP_HEADER, **_TORN_DOWN},
        CS.SASL_HEADER: {CE.SASL_HEADER_RECEIVED: CS.SASL_MECHANISMS, **_TORN_DOWN},
        CS.SASL_MECHANISMS: {CE.SASL_INIT_SENT: CS.SASL_OUTCOME, **_TORN_DOWN},
        CS.SASL_OUTCOME: {CE.SASL_OUTCOME_RECEIVED: CS.AMQP_HEADER, **_TORN_DOWN},
        CS.AMQP_HEADER: {CE.AMQP_HEADER_RECEIVED: CS.OPEN, **_TORN_DOWN},
        CS.OPEN: {CE.OPEN_RECEIVED: CS.OPENED, **_TORN_DOWN},
        CS.OPENED: {**_TORN_DOWN},
        CS.CLOSED: {**_TORN_DOWN},
    },
}

# States in which a protocol header, not a frame, is the next thing to read.
HEADER_STATES: Final = frozenset({CS.HEADER, CS.SASL_HEADER, CS.AMQP_HEADER_EXPECTED, CS.AMQP_HEADER})
# States of the SASL exchange, where only SASL frames are legal.
SASL_STATES: Final = frozenset({CS.SASL_HEADER, CS.SASL_MECHANISMS, CS.SASL_INIT, CS.SASL_OUTCOME})


# ---- session -------------------------------------------------------------------------------------


class SessionState(enum.StrEnum):
    UNMAPPED = "unmapped"
    BEGIN_SENT = "begin-sent"
    MAPPED = "mapped"
    END_SENT = "end-sent"
    ENDED = "ended"


class SessionEvent(enum.StrEnum):
    BEGIN_SENT = "begin-sent"
    BEGIN_RECEIVED = "begin-received"  # the peer's begin answering ours, or ours answering the peer's
    END_SENT = "end-sent"
    END_RECEIVED = "end-received"
    TORN_DOWN = "torn-down"  # the connection went


SS, SE = SessionState, SessionEvent

SESSION_TRANSITIONS: Final[Mapping[SessionState, Mapping[SessionEvent, SessionState]]] = {
    SS.UNMAPPED: {SE.BEGIN_SENT: SS.BEGIN_SENT, SE.TORN_DOWN: SS.ENDED},
    SS.BEGIN_SENT: {SE.BEGIN_RECEIVED: SS.MAPPED, SE.END_SENT: SS.END_SENT, SE.END_RECEIVED: SS.ENDED,
                    SE.TORN_DOWN: SS.ENDED},
    SS.MAPPED: {SE.END_SENT: SS.END_SENT, SE.END_RECEIVED: SS.ENDED, SE.TORN_DOWN: SS.ENDED},
    SS.END_SENT: {SE.END_SENT: SS.END_SENT, SE.END_RECEIVED: SS.ENDED, SE.TORN_DOWN: SS.ENDED},
    SS.ENDED: {SE.END_SENT: SS.ENDED, SE.TORN_DOWN: SS.ENDED},
}


# ---- link ----------------------------------------------------------------------------------------


class LinkState(enum.StrEnum):
    DETACHED = "detached"
    ATTACH_SENT = "attach-sent"  # attached by this side, waiting for the peer's attach
    ATTACH_RECEIVED = "attach-received"  # attached by the peer, waiting for the owner's accept or refuse
    ATTACHED = "attached"
    REFUSED = "refused"  # the peer answered our attach with null terminus; its closing detach follows
    DETACH_SENT = "detach-sent"  # waiting for the peer's detach


class LinkEvent(enum.StrEnum):
    ATTACH_SENT = "attach-sent"
    ATTACH_RECEIVED = "attach-received"
    ATTACH_REFUSED_BY_PEER = "attach-refused-by-peer"  # the peer's attach had null source and target
    ACCEPTED = "accepted"  # the owner accepted the peer's attach
    REFUSED = "refused"  # the owner refused the peer's attach
    DETACH_SENT = "detach-sent"
    DETACH_RECEIVED = "detach-received"
    FORGOTTEN = "forgotten"  # the link is gone: detach exchanged, handle reused, session or connection ended


LS, LE = LinkState, LinkEvent
_FORGOTTEN: Final = {LE.FORGOTTEN: LS.DETACHED}

LINK_TRANSITIONS: Final[Mapping[LinkState, Mapping[LinkEvent, LinkState]]] = {
    LS.DETACHED: {LE.ATTACH_SENT: LS.ATTACH_SENT, LE.ATTACH_RECEIVED: LS.ATTACH_RECEIVED,
                  # the peer's detach, end or close came in the same batch of events as its attach:
                  # the owner's answer finds the link gone and changes nothing
                  LE.ACCEPTED: LS.DETACHED, LE.REFUSED: LS.DETACHED, LE.DETACH_SENT: LS.DETACHED, **_FORGOTTEN},
    LS.ATTACH_SENT: {LE.ATTACH_RECEIVED: LS.ATTACHED, LE.ATTACH_REFUSED_BY_PEER: LS.REFUSED,
                     LE.DETACH_SENT: LS.DETACH_SENT, LE.DETACH_RECEIVED: LS.DETACH_SENT, **_FORGOTTEN},
    LS.ATTACH_RECEIVED: {LE.ACCEPTED: LS.ATTACHED, LE.REFUSED: LS.DETACH_SENT, LE.DETACH_SENT: LS.DETACH_SENT,
                         LE.DETACH_RECEIVED: LS.DETACH_SENT, **_FORGOTTEN},
    LS.ATTACHED: {LE.DETACH_SENT: LS.DETACH_SENT, LE.DETACH_RECEIVED: LS.DETACH_SENT, **_FORGOTTEN},
    LS.REFUSED: {LE.DETACH_SENT: LS.DETACH_SENT, LE.DETACH_RECEIVED: LS.DETACH_SENT, **_FORGOTTEN},
    LS.DETACH_SENT: {LE.DETACH_SENT: LS.DETACH_SENT, LE.DETACH_RECEIVED: LS.DETACH_SENT,
                     # our attach crossed the peer's refusal or answer after we detached: the peer's detach follows
                     LE.ATTACH_RECEIVED: LS.DETACH_SENT, LE.ATTACH_REFUSED_BY_PEER: LS.DETACH_SENT, **_FORGOTTEN},
}


# ---- the one door -------------------------------------------------------------------------------

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


def advance(endpoint: str, table: Mapping[S, Mapping[E, S]], state: S, event: E) -> S:
    """The state after ``event``; :class:`IllegalTransition` if the table does not allow it."""
    try:
        return table[state][event]
    except KeyError:
        raise IllegalTransition(endpoint, state, event) from None
