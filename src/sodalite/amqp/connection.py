"""The AMQP 1.0 connection state machine, sans-IO, for both roles.

Theory of operation: the owner feeds received bytes to :meth:`Connection.receive_data`, gets back
a list of events, and writes whatever :meth:`Connection.data_to_send` returns to its transport.
Nothing here reads a clock or touches a socket: times are passed in (``now``, seconds on any
monotonic scale) so idle-timeout handling is testable without sleeping.

Phases: protocol header (SASL or AMQP), SASL exchange, AMQP header, open exchange, open, closed.
A server answers each step as it arrives; a client pipelines SASL init, the AMQP header and open
as soon as it may, as the official SDK does. Sessions the peer begins are answered at once;
links the peer attaches are reported (``LinkAttachRequested``) for the owner to accept or refuse.

Any protocol violation closes the connection with the matching AMQP error (an open frame is sent
first if this side had not sent one, as 2.4.1 requires). Frames for unknown channels or handles
are ignored: after a detach or end crosses one of the peer's frames on the wire, the peer's frame
is harmless and a close would only cost the client a reconnect.

The connection's phase changes only through ``states.CONNECTION_TRANSITIONS`` (one table per role);
sessions and links keep their own tables there. This module imports the session module, which
imports the link module, and neither imports back: each names what it needs of its owner as a
small protocol.
"""

from __future__ import annotations

from typing import Any

from sodalite.amqp import framing
from sodalite.amqp.codec import decode_value
from sodalite.amqp.errors import DecodeError, FramingError, IllegalState, ProtocolError
from sodalite.amqp.events import (
    ConnectionClosed,
    ConnectionOpened,
    Event,
    SaslCompleted,
    SessionBegun,
    SessionEnded,
)
from sodalite.amqp.link import Link
from sodalite.amqp.performatives import (
    PERFORMATIVE_CODES,
    SASL_CODES,
    Attach,
    Begin,
    Close,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Transfer,
    lift_performative,
)
from sodalite.amqp.sasl import SASL_AUTH, SASL_OK, SaslClientConfig, SaslServerConfig, parse_plain
from sodalite.amqp.session import DEFAULT_WINDOW, Session
from sodalite.amqp.states import (
    CONNECTION_TRANSITIONS,
    HEADER_STATES,
    SASL_STATES,
    ConnectionEvent,
    ConnectionState,
    Role,
    SessionEvent,
    SessionState,
    advance,
)
from sodalite.amqp.types import Array, Symbol

_DECODE_FAILURES = (DecodeError, IndexError, ValueError, TypeError, RecursionError, OverflowError)


class Connection:
    def __init__(self, *, server: bool, container_id: str, max_frame_size: int = 262144,
                 channel_max: int = 4999, idle_timeout_ms: int | None = None,
                 sasl_server: SaslServerConfig | None = None, sasl_client: SaslClientConfig | None = None,
                 hostname: str | None = None, properties: dict[Any, Any] | None = None,
                 session_window: int = DEFAULT_WINDOW, first_outgoing_id: int = 0,
                 handle_max: int = 255, silence_heartbeat_s: float | None = None,
                 offered_capabilities: tuple[str, ...] = ()) -> None:
        self.server = server
        self.offered_capabilities = offered_capabilities  # sent in our open
        self.container_id = container_id
        self.max_frame_size = max_frame_size
        self.channel_max = channel_max
        self.idle_timeout_ms = idle_timeout_ms
        self.sasl_server = sasl_server
        self.sasl_client = sasl_client
        self.hostname = hostname
        self.properties = properties
        self.session_window = session_window
        self.first_outgoing_id = first_outgoing_id
        self.handle_max = handle_max
        self.silence_heartbeat_s = silence_heartbeat_s
        self.remote_open: Open | None = None
        self.remote_max_frame_size = framing.MIN_MAX_FRAME_SIZE
        self.sasl_mechanism: str | None = None
        self.sasl_username: str | None = None
        self.sessions: dict[int, Session] = {}  # by local channel
        self.remote_sessions: dict[int, Session] = {}  # by the peer's channel
        self._reader = framing.FrameReader(max_frame_size)
        self._out: list[bytes] = []
        # Transfer frames in _out, for a link that goes before they are written: (index, link,
        # delivery-id, last frame of the delivery). Deliveries written by data_to_send: ``written``.
        self._out_transfers: list[tuple[int, Link, int, bool]] = []
        self.written: list[tuple[Link, int]] = []
        self.track_written = False  # the owner reads ``written`` and ``dropped`` (the broker's bookkeeping)
        self.dropped: list[tuple[Link, int]] = []  # transfers queued after our close: never written
        self._deferred: list[bytes] = []
        self._events: list[Event] = []
        self._open_sent = False
        self._close_sent = False
        self.closed = False
        self._last_received = 0.0
        self._last_sent = 0.0
        self.role = Role.SERVER if server else Role.CLIENT
        self.phase = ConnectionState.HEADER if server else ConnectionState.START  # states.CONNECTION_TRANSITIONS

    def _advance(self, event: ConnectionEvent) -> None:
        """Move to the phase ``event`` leads to; IllegalTransition if the role's table forbids it."""
        self.phase = advance(f"{self.role.value} connection", CONNECTION_TRANSITIONS[self.role], self.phase, event)

    # ---- I/O boundary -----------------------------------------------------------------------

    def data_to_send(self, now: float = 0.0) -> bytes:
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out.clear()
        if self._out_transfers:
            if self.track_written:
                self.written.extend((link, delivery_id) for _, link, delivery_id, last in self._out_transfers
                                    if last)
            self._out_transfers.clear()
        self._last_sent = now
        return data

    def receive_data(self, data: bytes, now: float = 0.0) -> list[Event]:
        if self.closed:
            return []
        self._last_received = now
        self._reader.feed(data)
        try:
            self._process()
        except ProtocolError as exc:
            self._fail(exc.condition, exc.description)
        except _DECODE_FAILURES as exc:
            self._fail(DecodeError.condition, f"malformed frame: {exc}")
        return self.events()

    def connection_lost(self) -> list[Event]:
        """The transport ended: tear everything down and report it."""
        if not self.closed:
            self._teardown(Error("amqp:connection:forced", "transport closed", None), by_peer=True)
        return self.events()

    def events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def heartbeat_interval(self) -> float | None:
        """Seconds of our own silence after which we send an empty frame; None: never.

        Half the peer's idle-time-out when it advertised one (2.4.5). A peer that advertised none
        still gets one after ``silence_heartbeat_s``: the Python SDK advertises none, yet its
        sync sender blocks in a socket read until some frame arrives (clarifications.md, 13.4).
        """
        remote = self.remote_open.idle_time_out if self.remote_open else None
        if remote:
            return remote / 2000.0
        return self.silence_heartbeat_s

    def tick(self, now: float) -> list[Event]:
        """Send a heartbeat if one is due; close if the peer has gone silent.

        Silence is judged against twice our advertised idle-time-out: the Python SDK only
        checks its heartbeat timer from its keep-alive loop, so its heartbeats come late
        (sdk-wire-contract.md 1.4).
        """
        if self.closed or self.phase is not ConnectionState.OPENED:
            return []
        interval = self.heartbeat_interval()
        if interval is not None and now - self._last_sent >= interval and not self._out:
            self._out.append(framing.HEARTBEAT)
        if self.idle_timeout_ms and now - self._last_received > 2 * self.idle_timeout_ms / 1000.0:
            self._fail("amqp:resource-limit-exceeded", "idle timeout: no frames from the peer")
        return self.events()

    def next_tick(self, now: float) -> float | None:
        """Seconds from ``now`` until :meth:`tick` has something to do (None: nothing to wait for).

        Before open, nothing: the handshake has no timer here.
        """
        if self.closed or self.phase is not ConnectionState.OPENED:
            return None
        due: list[float] = []
        interval = self.heartbeat_interval()
        if interval is not None:
            due.append(self._last_sent + interval)
        if self.idle_timeout_ms:
            due.append(self._last_received + 2 * self.idle_timeout_ms / 1000.0)
        return max(min(due) - now, 0.0) if due else None

    # ---- public API -------------------------------------------------------------------------

    def start(self) -> None:
        """Client: send the first protocol header (and, without SASL, open)."""
        if self.sasl_client is not None:
            self._advance(ConnectionEvent.SASL_HEADER_SENT)
            self._out.append(framing.SASL_HEADER)
        else:
            self._advance(ConnectionEvent.AMQP_HEADER_SENT)
            self._out.append(framing.AMQP_HEADER)
            self._send_open()

    def begin(self) -> Session:
        """Client style: begin a session; ``SessionBegun`` follows the peer's reply."""
        session = Session(self, self._allocate_channel(), self.first_outgoing_id, self.session_window,
                          self.handle_max)
        self.sessions[session.channel] = session
        session._begin_sent()
        return session

    def close(self, error: Error | None = None) -> None:
        if self._close_sent or self.closed:
            return
        if not self._open_sent:
            self._send_open()
        self._close_sent = True
        self._send_frame(framing.FRAME_AMQP, 0, Close(error).encode())

    # ---- internals --------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self._events.append(event)

    def _write(self, data: bytes) -> None:
        if self._close_sent or self.closed:
            return  # 2.4.3: nothing may follow a close; the owner may still act on earlier events
        if self._open_sent:
            self._out.append(data)
        else:
            self._deferred.append(data)  # a client pipelines begin/attach behind its open

    def _write_transfer(self, data: bytes, link: Link, delivery_id: int, last: bool) -> None:
        """A transfer frame: written like any frame, and remembered until it leaves (data_to_send)."""
        if self._close_sent or self.closed or not self._open_sent:
            if self.track_written and last:
                self.dropped.append((link, delivery_id))
            return
        self._out_transfers.append((len(self._out), link, delivery_id, last))
        self._out.append(data)

    def _withdraw_transfers(self, link: Link) -> tuple[list[int], int]:
        """Take ``link``'s transfer frames out of the output not yet sent: (their delivery-ids, frames)."""
        if not self._out_transfers:
            return [], 0
        ids: list[int] = []
        kept: list[tuple[int, Link, int, bool]] = []
        for entry in self._out_transfers:
            if entry[1] is link:
                self._out[entry[0]] = b""
                ids.append(entry[2])
            else:
                kept.append(entry)
        frames = len(self._out_transfers) - len(kept)
        self._out_transfers = kept
        return ids, frames

    def _send_frame(self, ftype: int, channel: int, body: bytes) -> None:
        self._out.append(framing.frame(ftype, channel, body))

    def _send_open(self) -> None:
        self._open_sent = True
        self._send_frame(framing.FRAME_AMQP, 0, Open(
            self.container_id, None if self.server else self.hostname, self.max_frame_size,
            self.channel_max, self.idle_timeout_ms, None, None,
            Array("symbol", tuple(Symbol(c) for c in self.offered_capabilities)) if self.offered_capabilities else None,
            None, self.properties).encode())
        self._out.extend(self._deferred)
        self._deferred.clear()

    def _allocate_channel(self) -> int:
        channel = 0
        while channel in self.sessions:
            channel += 1
        if channel > self.channel_max:
            raise ProtocolError("no free channel", "amqp:resource-limit-exceeded")
        return channel

    def _fail(self, condition: str, description: str) -> None:
        """Close after a protocol error; only this connection is affected."""
        error = Error(condition, description[:512], None)
        if self.phase in (ConnectionState.OPEN, ConnectionState.OPENED, ConnectionState.AMQP_HEADER) or self._open_sent:
            self.close(error)
        self._teardown(error, by_peer=False)

    def _teardown(self, error: Error | None, by_peer: bool) -> None:
        self.closed = True
        self._advance(ConnectionEvent.TORN_DOWN)
        for session in list(self.sessions.values()):
            session._end_all_links(error)
            session._advance(SessionEvent.TORN_DOWN)
            self._emit(SessionEnded(session, error))
        self.sessions.clear()
        self.remote_sessions.clear()
        self._emit(ConnectionClosed(error, by_peer))

    def _process(self) -> None:
        reader = self._reader
        while not self.closed:
            phase = self.phase
            if phase in HEADER_STATES:
                header = reader.take(8)
                if header is None:
                    return
                self._on_protocol_header(header)
                continue
            frame = reader.next_frame()
            if frame is None:
                return
            ftype, channel, body = frame
            if not body:
                continue  # heartbeat
            if ftype == framing.FRAME_SASL:
                if phase not in SASL_STATES:
                    raise FramingError("SASL frame outside the SASL exchange")
                self._on_sasl_frame(body)
            elif ftype == framing.FRAME_AMQP:
                if phase in SASL_STATES:
                    raise FramingError("AMQP frame during the SASL exchange")
                self._on_amqp_frame(channel, body)
            else:
                raise FramingError(f"unknown frame type {ftype}")

    def _on_protocol_header(self, header: bytes) -> None:
        if self.server:
            if self.phase is ConnectionState.HEADER and header == framing.SASL_HEADER and self.sasl_server is not None:
                self._advance(ConnectionEvent.SASL_HEADER_RECEIVED)
                self._out.append(framing.SASL_HEADER)
                self._send_frame(framing.FRAME_SASL, 0, SaslMechanisms(
                    Array("symbol", tuple(Symbol(m) for m in self.sasl_server.mechanisms))).encode())
            elif header == framing.AMQP_HEADER and (
                self.phase is ConnectionState.AMQP_HEADER_EXPECTED
                or (self.phase is ConnectionState.HEADER
                    and (self.sasl_server is None or not self.sasl_server.require_sasl))
            ):
                self._advance(ConnectionEvent.AMQP_HEADER_RECEIVED)
                self._out.append(framing.AMQP_HEADER)
            else:
                # 2.2: answer with the header we do support, then give up.
                supported = framing.SASL_HEADER if self.sasl_server is not None else framing.AMQP_HEADER
                self._out.append(supported)
                self._teardown(Error("amqp:not-implemented", f"unsupported protocol header {header!r}",
                                     None), by_peer=False)
            return
        sasl = self.phase is ConnectionState.SASL_HEADER
        if header != (framing.SASL_HEADER if sasl else framing.AMQP_HEADER):
            self._teardown(Error("amqp:not-implemented", f"unexpected protocol header {header!r}", None),
                           by_peer=False)
            return
        self._advance(ConnectionEvent.SASL_HEADER_RECEIVED if sasl else ConnectionEvent.AMQP_HEADER_RECEIVED)

    def _on_sasl_frame(self, body: bytes) -> None:
        value, _ = decode_value(body, 0)
        frame = lift_performative(value, SASL_CODES)
        if self.server:
            if not isinstance(frame, SaslInit) or self.sasl_server is None:
                raise IllegalState(f"unexpected SASL frame {type(frame).__name__}")
            mechanism = str(frame.mechanism)
            ok = mechanism in self.sasl_server.mechanisms
            username = None
            if ok and mechanism == "PLAIN":
                creds = parse_plain(frame.initial_response or b"")
                validator = self.sasl_server.plain_validator
                ok = creds is not None and (validator is None or validator(*creds))
                username = creds[0] if creds else None
            self._send_frame(framing.FRAME_SASL, 0, SaslOutcome(SASL_OK if ok else SASL_AUTH, None).encode())
            self._emit(SaslCompleted(mechanism, username, ok))
            if ok:
                self.sasl_mechanism, self.sasl_username = mechanism, username
                self._advance(ConnectionEvent.SASL_INIT_RECEIVED)
            else:
                self._teardown(Error("amqp:unauthorized-access", "SASL authentication failed", None),
                               by_peer=False)
            return
        client = self.sasl_client
        assert client is not None
        if isinstance(frame, SaslMechanisms) and self.phase is ConnectionState.SASL_MECHANISMS:
            offered = frame.sasl_server_mechanisms
            names = {str(m) for m in (offered if isinstance(offered, Array | list) else [offered])}
            if client.mechanism not in names:
                self._teardown(Error("amqp:not-implemented", f"server does not offer {client.mechanism}",
                                     None), by_peer=False)
                return
            self._advance(ConnectionEvent.SASL_INIT_SENT)
            self._send_frame(framing.FRAME_SASL, 0, SaslInit(
                Symbol(client.mechanism), client.initial_response(), client.hostname).encode())
        elif isinstance(frame, SaslOutcome) and self.phase is ConnectionState.SASL_OUTCOME:
            ok = frame.code == SASL_OK
            self._emit(SaslCompleted(client.mechanism, client.username, ok))
            if not ok:
                self._teardown(Error("amqp:unauthorized-access", "SASL authentication failed", None),
                               by_peer=False)
                return
            self._advance(ConnectionEvent.SASL_OUTCOME_RECEIVED)
            self._out.append(framing.AMQP_HEADER)
            self._send_open()
        else:
            raise IllegalState(f"unexpected SASL frame {type(frame).__name__}")

    def _on_amqp_frame(self, channel: int, body: bytes) -> None:
        value, end = decode_value(body, 0)
        perf = lift_performative(value, PERFORMATIVE_CODES)
        if isinstance(perf, Transfer):
            session = self.remote_sessions.get(channel)
            if session is not None:
                session._on_transfer(perf, body[end:])
            return
        if isinstance(perf, Disposition):
            session = self.remote_sessions.get(channel)
            if session is not None:
                session._on_disposition(perf)
            return
        if isinstance(perf, Flow):
            session = self.remote_sessions.get(channel)
            if session is not None:
                session._on_flow(perf)
            return
        if isinstance(perf, Open):
            self._on_open(perf)
            return
        if self.phase is not ConnectionState.OPENED:
            raise IllegalState(f"{type(perf).__name__} before open")
        if isinstance(perf, Begin):
            self._on_begin(channel, perf)
        elif isinstance(perf, Attach):
            session = self.remote_sessions.get(channel)
            if session is not None:
                session._on_attach(perf)
        elif isinstance(perf, Detach):
            session = self.remote_sessions.get(channel)
            if session is not None:
                session._on_detach(perf)
        elif isinstance(perf, End):
            self._on_end(channel, perf)
        elif isinstance(perf, Close):
            self._on_close(perf)

    def _on_open(self, open_: Open) -> None:
        self._advance(ConnectionEvent.OPEN_RECEIVED)  # a second open, or one too early, is illegal
        if open_.max_frame_size < framing.MIN_MAX_FRAME_SIZE:
            raise ProtocolError("max-frame-size below 512", "amqp:invalid-field")
        self.remote_open = open_
        self.remote_max_frame_size = min(open_.max_frame_size, 2**31)
        if not self._open_sent:
            self._send_open()
        self._emit(ConnectionOpened(open_))

    def _on_begin(self, channel: int, begin: Begin) -> None:
        if channel in self.remote_sessions:
            raise IllegalState(f"channel {channel} already in use")
        if begin.remote_channel is not None:
            session = self.sessions.get(begin.remote_channel)
            if session is None:
                raise IllegalState("begin answers no session of ours")
        else:
            session = Session(self, self._allocate_channel(), self.first_outgoing_id, self.session_window,
                              self.handle_max)
            self.sessions[session.channel] = session
            session.remote_channel = channel
            session._begin_sent()
        session._on_begin_reply(begin)  # a second answer to our begin is illegal
        session.remote_channel = channel
        self.remote_sessions[channel] = session
        self._emit(SessionBegun(session))

    def _on_end(self, channel: int, end: End) -> None:
        session = self.remote_sessions.pop(channel, None)
        if session is None:
            return
        if session._advance(SessionEvent.END_RECEIVED) is not SessionState.END_SENT:
            session._send_performative(End(None))
        self.sessions.pop(session.channel, None)
        session._end_all_links(end.error)
        self._emit(SessionEnded(session, end.error))

    def _on_close(self, close: Close) -> None:
        if not self._close_sent:
            self._close_sent = True
            self._send_frame(framing.FRAME_AMQP, 0, Close(None).encode())
        self._teardown(close.error, by_peer=True)
