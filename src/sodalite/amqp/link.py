"""A link endpoint (AMQP 1.0 part 2, section 2.6).

Theory of operation: a link is either attached by this side (``Session.attach``; the peer's
reply raises ``LinkAttached``) or by the peer (``LinkAttachRequested``; this side answers with
``accept`` or ``refuse``). Refusing follows the Service Bus pattern the SDKs understand: an attach
with null source and target, then a closing detach carrying the error (sdk-wire-contract.md 1.6).

Credit follows 2.6.7. On a link where this side sends, ``link_credit`` is recomputed from every
flow as ``peer.delivery_count + peer.link_credit - delivery_count``; the caller sends while credit
is positive and calls :meth:`drained` when a drain request finds nothing more to send. On a link
where this side receives, ``auto_credit`` keeps the peer's credit topped up without the caller's
help, which is what a broker wants for producer links. Incoming deliveries may span many frames
and are reassembled here; one larger than ``max_message_size`` is consumed but not buffered, and
reported with ``oversize=True`` so the caller can reject it.

The link's state changes only through the transition table ``states.LINK_TRANSITIONS``. A link
knows its session only as the :class:`LinkSession` protocol below, so this module imports neither
the session nor the connection. The events a link reports are defined here (``events`` gathers them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sodalite.amqp import framing
from sodalite.amqp.performatives import Attach, Composite, Coordinator, Detach, Error, Flow, Source, Target, Transfer
from sodalite.amqp.states import LINK_TRANSITIONS, LinkEvent, LinkState, advance

SENDER = False  # AMQP role values
RECEIVER = True


@dataclass(frozen=True, slots=True)
class _OfLink:
    """What every event of a link carries: the link it concerns."""

    link: Link


@dataclass(frozen=True, slots=True)
class LinkAttachRequested(_OfLink):
    """The peer attached a link; call ``link.accept(...)`` or ``link.refuse(error)``."""


@dataclass(frozen=True, slots=True)
class LinkAttached(_OfLink):
    """The peer answered an attach this side started."""


@dataclass(frozen=True, slots=True)
class LinkDetached(_OfLink):
    """The link is gone: the peer detached it, or its session or connection ended. ``unsent``: the
    delivery-ids of transfers this side queued on the link that were never written out (taken back
    from the session's and the connection's outgoing queues: the peer never saw them)."""

    error: Error | None
    closed: bool
    unsent: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CreditChanged(_OfLink):
    """A flow arrived for a link on which this side sends; see ``link.link_credit`` and ``link.drain``."""


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
class TransferReceived(_OfLink):
    delivery: Delivery


@dataclass(frozen=True, slots=True)
class DeliveryUpdated(_OfLink):
    """The peer changed the state of, or settled, a delivery on ``link``."""

    delivery_id: int
    delivery_tag: bytes
    settled: bool
    state: Any


LinkEndpointEvent = (
    LinkAttachRequested | LinkAttached | LinkDetached | CreditChanged | TransferReceived | DeliveryUpdated
)


class LinkSession(Protocol):
    """What a link needs of its session (``session.Session`` is the one implementation)."""

    channel: int
    links: dict[int, Link]
    outgoing_unsettled: dict[int, tuple[Link, bytes]]
    incoming_unsettled: dict[int, tuple[Link, bytes]]
    next_incoming_id: int
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int

    @property
    def remote_max_frame_size(self) -> int: ...

    def disposition(self, role: bool, first: int, last: int | None, settled: bool, state: Any) -> None: ...

    def _emit(self, event: LinkEndpointEvent) -> None: ...

    def _write(self, data: bytes) -> None: ...

    def _send_performative(self, performative: Composite) -> None: ...

    def _send_transfer_frame(self, data: bytes, link: Link, delivery_id: int, last: bool) -> None: ...

    def _allocate_delivery_id(self) -> int: ...


class Link:
    __slots__ = (
        "_partial", "_partial_head", "_partial_oversize", "auto_credit", "context", "delivery_count",
        "drain", "handle", "link_credit", "max_message_size", "name", "properties", "rcv_settle_mode",
        "remote_attach", "remote_handle", "remote_max_message_size", "role", "session", "snd_settle_mode",
        "source", "state", "target",
    )

    def __init__(self, session: LinkSession, name: str, handle: int, role: bool) -> None:
        self.session = session
        self.name = name
        self.handle = handle
        self.role = role  # this side's role
        self.remote_handle: int | None = None
        self.remote_attach: Attach | None = None
        self.source: Source | None = None
        self.target: Target | Coordinator | None = None
        self.properties: dict[Any, Any] | None = None
        self.snd_settle_mode = 2
        self.rcv_settle_mode = 0
        self.max_message_size = 0  # 0 = no limit
        self.remote_max_message_size = 0
        self.delivery_count = 0
        self.link_credit = 0
        self.drain = False
        self.auto_credit: int | None = None
        self.state = LinkState.DETACHED
        self.context: Any = None  # for the owner (the broker's consumer/producer object)
        self._partial: list[bytes] = []
        self._partial_head: Transfer | None = None
        self._partial_oversize = False

    @property
    def is_sender(self) -> bool:
        return self.role is SENDER

    @property
    def attached(self) -> bool:
        return self.state is LinkState.ATTACHED

    def _advance(self, event: LinkEvent) -> LinkState:
        """Move to the state ``event`` leads to (``states.LINK_TRANSITIONS``) and return the old one."""
        old = self.state
        self.state = advance(f"link {self.name!r}", LINK_TRANSITIONS, old, event)
        return old

    # ---- attach / detach --------------------------------------------------------------------

    def accept(self, *, source: Source | None = None, target: Target | Coordinator | None = None,
               properties: dict[Any, Any] | None = None, initial_delivery_count: int = 0,
               max_message_size: int | None = None, snd_settle_mode: int | None = None,
               rcv_settle_mode: int | None = None, offered_capabilities: Any = None) -> None:
        """Answer the peer's attach. Source and target default to an echo of the peer's.

        A no-op if the link is already gone: the peer's detach, end or close may come in the same
        batch of events as its attach.
        """
        if self._advance(LinkEvent.ACCEPTED) is LinkState.DETACHED:
            return
        remote = self.remote_attach
        assert remote is not None
        self.source = source if source is not None else remote.source
        self.target = target if target is not None else remote.target
        self.properties = properties
        if snd_settle_mode is not None:
            self.snd_settle_mode = snd_settle_mode
        if rcv_settle_mode is not None:
            self.rcv_settle_mode = rcv_settle_mode
        if max_message_size is not None:
            self.max_message_size = max_message_size
        self.delivery_count = initial_delivery_count
        self.session._send_performative(Attach(
            self.name, self.handle, self.role, self.snd_settle_mode, self.rcv_settle_mode, self.source,
            self.target, None, False, initial_delivery_count if self.role is SENDER else None,
            self.max_message_size, offered_capabilities, None, properties,
        ))
        if self.role is RECEIVER and self.auto_credit:
            self.issue_credit(self.auto_credit)

    def refuse(self, error: Error) -> None:
        """Refuse the peer's attach: null terminus attach, then a closing detach with ``error``."""
        if self._advance(LinkEvent.REFUSED) is LinkState.DETACHED:
            return  # already gone, as for accept
        self._send_null_attach()
        self.session._send_performative(Detach(self.handle, True, error))

    def _send_null_attach(self) -> None:
        """Answer the peer's attach with null terminus, as the prelude to a detach."""
        self.session._send_performative(Attach(
            self.name, self.handle, self.role, self.snd_settle_mode, self.rcv_settle_mode, None, None,
            None, False, 0 if self.role is SENDER else None, None, None, None, None,
        ))

    def detach(self, error: Error | None = None, closed: bool = True) -> None:
        """Detach this link; the peer's answering detach completes it."""
        if self._advance(LinkEvent.DETACH_SENT) in (LinkState.DETACHED, LinkState.DETACH_SENT):
            return
        self.session._send_performative(Detach(self.handle, closed, error))

    # ---- sending ----------------------------------------------------------------------------

    def send_transfer(self, payload: bytes, delivery_tag: bytes, settled: bool, message_format: int = 0) -> int:
        """Send one delivery, split to the peer's max-frame-size; return its delivery-id."""
        session = self.session
        delivery_id = session._allocate_delivery_id()
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        if self.link_credit > 0:
            self.link_credit -= 1
        if not settled:
            session.outgoing_unsettled[delivery_id] = (self, delivery_tag)
        channel = session.channel
        max_frame = session.remote_max_frame_size
        if 8 + 64 + len(delivery_tag) + len(payload) <= max_frame:
            session._send_transfer_frame(framing.encode_transfer(
                channel, self.handle, delivery_id, delivery_tag, message_format, settled, False, payload),
                self, delivery_id, True)
            return delivery_id
        room = max_frame - framing.transfer_overhead(self.handle, delivery_id, delivery_tag, message_format)
        for start in range(0, len(payload), room):
            chunk = payload[start : start + room]
            more = start + room < len(payload)
            session._send_transfer_frame(framing.encode_transfer(
                channel, self.handle, delivery_id, delivery_tag, message_format, settled, more, chunk),
                self, delivery_id, not more)
        return delivery_id

    def drained(self) -> None:
        """After a drain request found nothing more to send: use up the credit and tell the peer."""
        if not self.drain:
            return
        self.delivery_count = (self.delivery_count + self.link_credit) & 0xFFFFFFFF
        self.link_credit = 0
        self.send_flow()

    # ---- receiving --------------------------------------------------------------------------

    def issue_credit(self, credit: int, drain: bool = False) -> None:
        """Grant the peer ``credit`` deliveries on this receiving link."""
        self.link_credit = credit
        self.drain = drain
        self.send_flow()

    def settle(self, delivery_id: int, state: Any, settled: bool = True) -> None:
        """Send a disposition for one delivery of this link."""
        self.session.disposition(self.role, delivery_id, None, settled, state)

    def send_flow(self, echo: bool = False) -> None:
        s = self.session
        s._write(framing.encode_flow(
            s.channel, s.next_incoming_id, s.incoming_window, s.next_outgoing_id, s.outgoing_window,
            self.handle, self.delivery_count, self.link_credit, None, self.drain, echo))

    # ---- called by the session ----------------------------------------------------------------

    def _on_flow(self, flow: Flow) -> None:
        if self.role is SENDER:
            if flow.link_credit is not None:
                peer_dc = flow.delivery_count if flow.delivery_count is not None else self.delivery_count
                self.link_credit = max(0, (peer_dc + flow.link_credit - self.delivery_count + 2**31) % 2**32
                                       - 2**31)
            self.drain = flow.drain
            self.session._emit(CreditChanged(self))
        elif flow.delivery_count is not None:
            # The sender advanced its delivery-count (drain): our credit shrinks by as much.
            advanced = (flow.delivery_count - self.delivery_count) % 2**32
            if advanced < 2**31:
                self.delivery_count = flow.delivery_count
                self.link_credit = max(0, self.link_credit - advanced)
        if flow.echo:
            self.send_flow()

    def _on_transfer(self, t: Transfer, payload: bytes) -> None:
        head = self._partial_head
        if head is None:
            head = self._partial_head = t
            self._partial_oversize = False
        if t.aborted:
            self._reset_partial()
            return
        if not self._partial_oversize:
            self._partial.append(payload)
            if self.max_message_size and sum(map(len, self._partial)) > self.max_message_size:
                self._partial_oversize = True
                self._partial.clear()
        if t.more:
            return
        body = b"".join(self._partial) if len(self._partial) != 1 else self._partial[0]
        oversize = self._partial_oversize
        self._reset_partial()
        settled = bool(head.settled) or bool(t.settled)
        delivery_id = head.delivery_id if head.delivery_id is not None else 0
        if not settled:
            self.session.incoming_unsettled[delivery_id] = (self, head.delivery_tag or b"")
        self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
        if self.link_credit > 0:
            self.link_credit -= 1
        if self.auto_credit and self.link_credit <= self.auto_credit // 2:
            self.issue_credit(self.auto_credit)
        self.session._emit(TransferReceived(self, Delivery(
            delivery_id, head.delivery_tag or b"", b"" if oversize else body, settled,
            head.message_format or 0, t.state if t.state is not None else head.state, oversize)))

    def _reset_partial(self) -> None:
        self._partial = []
        self._partial_head = None
        self._partial_oversize = False
