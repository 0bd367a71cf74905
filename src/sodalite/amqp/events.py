"""What a :class:`~sodalite.amqp.connection.Connection` reports after consuming bytes.

Events are past tense and carry the endpoint objects they concern, so the caller can act on them
(accept an attach, settle a delivery, send on a link) without keeping its own lookup tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sodalite.amqp.performatives import Error, Open

if TYPE_CHECKING:
    from sodalite.amqp.link import Link
    from sodalite.amqp.session import Session


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


@dataclass(frozen=True, slots=True)
class SessionBegun:
    session: Session


@dataclass(frozen=True, slots=True)
class SessionEnded:
    session: Session
    error: Error | None


@dataclass(frozen=True, slots=True)
class LinkAttachRequested:
    """The peer attached a link; call ``link.accept(...)`` or ``link.refuse(error)``."""

    link: Link


@dataclass(frozen=True, slots=True)
class LinkAttached:
    """The peer answered an attach this side started."""

    link: Link


@dataclass(frozen=True, slots=True)
class LinkDetached:
    """The link is gone: the peer detached it, or its session or connection ended. ``unsent``: the
    delivery-ids of transfers this side queued on the link that were never written out (taken back
    from the session's and the connection's outgoing queues: the peer never saw them)."""

    link: Link
    error: Error | None
    closed: bool
    unsent: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CreditChanged:
    """A flow arrived for a link on which this side sends; see ``link.link_credit`` and ``link.drain``."""

    link: Link


@dataclass(frozen=True, slots=True)
class Delivery:
    """A complete incoming delivery, reassembled from all of its transfer frames."""

    delivery_id: int
    delivery_tag: bytes
    payload: bytes
    settled: bool
    message_format: int
    state: Any
    oversize: bool  # larger than the link's max-message-size: payload dropped, reject it


@dataclass(frozen=True, slots=True)
class TransferReceived:
    link: Link
    delivery: Delivery


@dataclass(frozen=True, slots=True)
class DeliveryUpdated:
    """The peer changed the state of, or settled, a delivery on ``link``."""

    link: Link
    delivery_id: int
    delivery_tag: bytes
    settled: bool
    state: Any


Event = (
    SaslCompleted | ConnectionOpened | ConnectionClosed | SessionBegun | SessionEnded | LinkAttachRequested
    | LinkAttached | LinkDetached | CreditChanged | TransferReceived | DeliveryUpdated
)
