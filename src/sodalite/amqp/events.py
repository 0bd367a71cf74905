"""What a :class:`~sodalite.amqp.connection.Connection` reports after consuming bytes.

Events are past tense and carry the endpoint objects they concern, so the caller can act on them
(accept an attach, settle a delivery, send on a link) without keeping its own lookup tables.

Each event is defined beside the endpoint it concerns, so no endpoint module imports upwards: the
connection's here, a session's in ``session`` and a link's in ``link``. This module gathers them
all (import them from here) into :data:`Event`, the union ``Connection.events`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from sodalite.amqp.link import (
    CreditChanged,
    Delivery,
    DeliveryUpdated,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    TransferReceived,
)
from sodalite.amqp.performatives import Error, Open
from sodalite.amqp.session import SessionBegun, SessionEnded

__all__ = [
    "ConnectionClosed", "ConnectionOpened", "CreditChanged", "Delivery", "DeliveryUpdated", "Event",
    "LinkAttachRequested", "LinkAttached", "LinkDetached", "SaslCompleted", "SessionBegun", "SessionEnded",
    "TransferReceived",
]


@dataclass(frozen=True, slots=True)
class SaslCompleted:
    """SASL finished; ``mechanism`` was used, ``username`` is set for PLAIN."""

    mechanism: str
    username: str | None
    succeeded: bool


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """Both open frames have been exchanged."""

    remote: Open


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is closed (by the peer, by a protocol error, or because the transport ended).

    ``error`` is what the peer sent, or what this side closed with after a protocol error.
    """

    error: Error | None
    by_peer: bool


Event = (
    SaslCompleted | ConnectionOpened | ConnectionClosed | SessionBegun | SessionEnded | LinkAttachRequested
    | LinkAttached | LinkDetached | CreditChanged | TransferReceived | DeliveryUpdated
)
