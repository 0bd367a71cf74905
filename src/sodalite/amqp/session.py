"""A session endpoint (AMQP 1.0 part 2, section 2.5).

Theory of operation: a session maps the peer's channel to ours, owns its links by handle in both
directions, and keeps the transfer windows of 2.5.6. The incoming window is reopened with a
session flow whenever it falls to half, so a producer never stalls on it; window violations are
tolerated rather than enforced, because the official Python SDK counts one transfer-id per
delivery on send but one per frame on receive (sdk-wire-contract.md 1.5, pitfall 9). Outgoing
transfer frames wait in a queue while the peer's incoming window is closed; when their link goes,
its frames still queued here or in the connection's output are taken back and their delivery-ids
reported (``LinkDetached.unsent``).

Deliveries in flight are tracked per direction (``outgoing_unsettled`` for deliveries this side
sent, ``incoming_unsettled`` for deliveries it received), because delivery-ids are only unique per
direction and a disposition's role says which space it addresses.

The session's state, and the state of each of its links, change only through the transition
tables of ``states``. A session knows its connection only as the :class:`SessionConnection`
protocol below, so this module does not import the connection. The events of a session are
defined here (``events`` gathers them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from sodalite.amqp import framing
from sodalite.amqp.link import (
    RECEIVER,
    SENDER,
    DeliveryUpdated,
    Link,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    LinkEndpointEvent,
)
from sodalite.amqp.performatives import (
    Attach,
    Begin,
    Composite,
    Coordinator,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Source,
    Target,
    Transfer,
)
from sodalite.amqp.states import SESSION_TRANSITIONS, LinkEvent, LinkState, SessionEvent, SessionState, advance

DEFAULT_WINDOW = 5000


@dataclass(frozen=True, slots=True)
class SessionBegun:
    session: Session


@dataclass(frozen=True, slots=True)
class SessionEnded:
    session: Session
    error: Error | None


SessionEndpointEvent = SessionBegun | SessionEnded | LinkEndpointEvent


class SessionConnection(Protocol):
    """What a session needs of its connection (``connection.Connection`` is the one implementation)."""

    remote_max_frame_size: int

    def _emit(self, event: SessionEndpointEvent) -> None: ...

    def _write(self, data: bytes) -> None: ...

    def _write_transfer(self, data: bytes, link: Link, delivery_id: int, last: bool) -> None: ...

    def _withdraw_transfers(self, link: Link) -> tuple[list[int], int]: ...


class Session:
    __slots__ = (
        "_blocked", "channel", "connection", "handle_max", "incoming_unsettled", "incoming_window",
        "links", "max_incoming_window", "next_delivery_id", "next_incoming_id", "next_outgoing_id",
        "outgoing_unsettled", "outgoing_window", "remote_channel", "remote_handle_max",
        "remote_incoming_window", "remote_links", "remote_outgoing_window", "state",
    )

    def __init__(self, connection: SessionConnection, channel: int, next_outgoing_id: int,
                 window: int = DEFAULT_WINDOW, handle_max: int = 255) -> None:
        self.connection = connection
        self.channel = channel
        self.remote_channel: int | None = None
        self.next_outgoing_id = next_outgoing_id
        self.next_delivery_id = next_outgoing_id
        self.next_incoming_id = 0
        self.incoming_window = window
        self.max_incoming_window = window
        self.outgoing_window = window
        self.remote_incoming_window = 0
        self.remote_outgoing_window = 0
        self.handle_max = handle_max
        self.remote_handle_max = 0xFFFFFFFF
        self.links: dict[int, Link] = {}
        self.remote_links: dict[int, Link] = {}
        self.outgoing_unsettled: dict[int, tuple[Link, bytes]] = {}
        self.incoming_unsettled: dict[int, tuple[Link, bytes]] = {}
        # transfer frames waiting for the peer's window: (frame, link, delivery-id, last frame of it)
        self._blocked: deque[tuple[bytes, Link, int, bool]] = deque()
        self.state = SessionState.UNMAPPED

    def _advance(self, event: SessionEvent) -> SessionState:
        """Move to the state ``event`` leads to (``states.SESSION_TRANSITIONS``) and return the old one."""
        old = self.state
        self.state = advance(f"session {self.channel}", SESSION_TRANSITIONS, old, event)
        return old

    # ---- for its links (link.LinkSession) -------------------------------------------------------

    @property
    def remote_max_frame_size(self) -> int:
        return self.connection.remote_max_frame_size

    def _emit(self, event: SessionEndpointEvent) -> None:
        self.connection._emit(event)

    # ---- public API -------------------------------------------------------------------------

    def attach(self, name: str, role: bool, source: Source | None, target: Target | Coordinator | None, *,
               snd_settle_mode: int = 2, rcv_settle_mode: int = 0, initial_delivery_count: int = 0,
               max_message_size: int = 0, properties: dict[Any, Any] | None = None) -> Link:
        """Start attaching a link on this side (client style); ``LinkAttached`` follows."""
        link = Link(self, name, self._allocate_handle(), role)
        link.source, link.target = source, target
        link.snd_settle_mode, link.rcv_settle_mode = snd_settle_mode, rcv_settle_mode
        link.max_message_size = max_message_size
        link.delivery_count = initial_delivery_count
        link.properties = properties
        link._advance(LinkEvent.ATTACH_SENT)
        self.links[link.handle] = link
        self._send_performative(Attach(
            name, link.handle, role, snd_settle_mode, rcv_settle_mode, source, target, None, False,
            initial_delivery_count if role is SENDER else None, max_message_size, None, None, properties))
        return link

    def disposition(self, role: bool, first: int, last: int | None, settled: bool, state: Any) -> None:
        """Send a disposition; settled deliveries leave this side's unsettled map."""
        if settled:
            table = self.outgoing_unsettled if role is SENDER else self.incoming_unsettled
            for delivery_id in _ids_in(table, first, first if last is None else last):
                del table[delivery_id]
        self._write(framing.encode_disposition(self.channel, role, first, last, settled, state))

    def end(self, error: Error | None = None) -> None:
        if self._advance(SessionEvent.END_SENT) in (SessionState.END_SENT, SessionState.ENDED):
            return
        self._send_performative(End(error))

    # ---- frame output -------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self.connection._write(data)

    def _send_performative(self, performative: Composite) -> None:
        self._write(framing.frame(framing.FRAME_AMQP, self.channel, performative.encode()))

    def _send_transfer_frame(self, data: bytes, link: Link, delivery_id: int, last: bool) -> None:
        self.next_outgoing_id = (self.next_outgoing_id + 1) & 0xFFFFFFFF
        if self.remote_incoming_window > 0 and not self._blocked:
            self.remote_incoming_window -= 1
            self.connection._write_transfer(data, link, delivery_id, last)
        else:
            self._blocked.append((data, link, delivery_id, last))

    def _flush_blocked(self) -> None:
        while self._blocked and self.remote_incoming_window > 0:
            self.remote_incoming_window -= 1
            self.connection._write_transfer(*self._blocked.popleft())

    def _withdraw(self, link: Link) -> tuple[int, ...]:
        """Take back the transfer frames of ``link`` not written out yet (blocked here, or waiting in
        the connection's output): the peer never sees them. Transfer-ids are implicit (one per frame),
        so the frames after them are numbered as if they had never been queued. Their delivery-ids."""
        ids, frames = self.connection._withdraw_transfers(link)
        self.remote_incoming_window += frames  # they had used the peer's window
        if self._blocked and any(entry[1] is link for entry in self._blocked):
            kept = deque(entry for entry in self._blocked if entry[1] is not link)
            frames += len(self._blocked) - len(kept)
            ids.extend(entry[2] for entry in self._blocked if entry[1] is link)
            self._blocked = kept
        self.next_outgoing_id = (self.next_outgoing_id - frames) & 0xFFFFFFFF
        return tuple(dict.fromkeys(ids))

    def _allocate_delivery_id(self) -> int:
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) & 0xFFFFFFFF
        return delivery_id

    def _allocate_handle(self) -> int:
        handle = 0
        while handle in self.links:
            handle += 1
        return handle

    def send_session_flow(self) -> None:
        self._write(framing.encode_flow(self.channel, self.next_incoming_id, self.incoming_window,
                                        self.next_outgoing_id, self.outgoing_window))

    # ---- frame input --------------------------------------------------------------------------

    def _begin_sent(self) -> None:
        self._advance(SessionEvent.BEGIN_SENT)
        self._send_performative(Begin(self.remote_channel, self.next_outgoing_id, self.incoming_window,
                                      self.outgoing_window, self.handle_max))

    def _on_begin_reply(self, begin: Begin) -> None:
        self._advance(SessionEvent.BEGIN_RECEIVED)
        self.next_incoming_id = begin.next_outgoing_id
        self.remote_incoming_window = begin.incoming_window
        self.remote_outgoing_window = begin.outgoing_window
        self.remote_handle_max = begin.handle_max

    def _on_attach(self, attach: Attach) -> None:
        if attach.handle in self.remote_links:
            # A handle reused without a detach: the old link is gone.
            self._forget(self.remote_links[attach.handle], None, True)
        for link in self.links.values():
            if (link.name == attach.name and link.remote_handle is None and link.role is not attach.role
                    and link.state in (LinkState.ATTACH_SENT, LinkState.DETACH_SENT)):
                link.remote_handle = attach.handle
                link.remote_attach = attach
                link.remote_max_message_size = attach.max_message_size or 0
                self.remote_links[attach.handle] = link
                refused = attach.source is None and attach.target is None  # a closing detach follows
                if link._advance(LinkEvent.ATTACH_REFUSED_BY_PEER if refused else LinkEvent.ATTACH_RECEIVED) \
                        is LinkState.DETACH_SENT:
                    return  # detached before the answer came: the peer's detach follows
                if not refused and link.role is RECEIVER and attach.initial_delivery_count is not None:
                    link.delivery_count = attach.initial_delivery_count
                self.connection._emit(LinkAttached(link))
                return
        link = Link(self, attach.name, self._allocate_handle(), not attach.role)
        link.remote_handle = attach.handle
        link.remote_attach = attach
        link.snd_settle_mode = attach.snd_settle_mode
        link.rcv_settle_mode = attach.rcv_settle_mode
        link.remote_max_message_size = attach.max_message_size or 0
        if link.role is RECEIVER and attach.initial_delivery_count is not None:
            link.delivery_count = attach.initial_delivery_count
        link._advance(LinkEvent.ATTACH_RECEIVED)
        self.links[link.handle] = link
        self.remote_links[attach.handle] = link
        self.connection._emit(LinkAttachRequested(link))

    def _on_flow(self, flow: Flow) -> None:
        next_incoming = flow.next_incoming_id
        if next_incoming is None:
            next_incoming = self.next_outgoing_id - len(self._blocked)
        sent = (self.next_outgoing_id - len(self._blocked)) & 0xFFFFFFFF
        # Serial arithmetic: a window the peer shrank below what is already in flight is closed,
        # not 2**32 - n wide.
        window = (next_incoming + flow.incoming_window - sent) % 2**32 if flow.incoming_window else 0
        self.remote_incoming_window = window if window < 2**31 else 0
        self.remote_outgoing_window = flow.outgoing_window
        if flow.handle is not None:
            link = self.remote_links.get(flow.handle)
            if link is not None:
                link._on_flow(flow)
        elif flow.echo:
            self.send_session_flow()
        self._flush_blocked()

    def _on_transfer(self, transfer: Transfer, payload: bytes) -> None:
        self.next_incoming_id = (self.next_incoming_id + 1) & 0xFFFFFFFF
        self.incoming_window -= 1
        if self.incoming_window <= self.max_incoming_window // 2:
            self.incoming_window = self.max_incoming_window
            self.send_session_flow()
        link = self.remote_links.get(transfer.handle)
        if link is not None and link.role is RECEIVER:
            link._on_transfer(transfer, payload)

    def _on_disposition(self, d: Disposition) -> None:
        # role=receiver: the peer received what we sent; role=sender: about what we received.
        table = self.outgoing_unsettled if d.role is RECEIVER else self.incoming_unsettled
        emit = self.connection._emit
        for delivery_id in _ids_in(table, d.first, d.first if d.last is None else d.last):
            link, tag = table.pop(delivery_id) if d.settled else table[delivery_id]
            emit(DeliveryUpdated(link, delivery_id, tag, d.settled, d.state))

    def _on_detach(self, detach: Detach) -> None:
        link = self.remote_links.get(detach.handle)
        if link is None:
            return
        old = link._advance(LinkEvent.DETACH_RECEIVED)
        if old is not LinkState.DETACH_SENT:
            if old is LinkState.ATTACH_RECEIVED:
                # Never answered: a detach alone would name a handle the peer has not seen (2.6.4);
                # the SDK closes the connection with session:unattached-handle for that.
                link._send_null_attach()
            self._send_performative(Detach(link.handle, detach.closed, None))
        self._forget(link, detach.error, detach.closed)

    def _forget(self, link: Link, error: Error | None, closed: bool) -> None:
        link._advance(LinkEvent.FORGOTTEN)
        self.links.pop(link.handle, None)
        if link.remote_handle is not None:
            self.remote_links.pop(link.remote_handle, None)
        for table in (self.outgoing_unsettled, self.incoming_unsettled):
            for delivery_id in [i for i, (lk, _) in table.items() if lk is link]:
                del table[delivery_id]
        self.connection._emit(LinkDetached(link, error, closed, self._withdraw(link)))

    def _end_all_links(self, error: Error | None) -> None:
        for link in list(self.links.values()):
            self._forget(link, error, True)


def _ids_in(table: dict[int, Any], first: int, last: int) -> list[int]:
    """The delivery-ids of ``table`` in ``[first, last]``, without walking a huge range."""
    if last - first + 1 <= len(table):
        return [i for i in range(first, last + 1) if i in table]
    return sorted(i for i in table if first <= i <= last)
