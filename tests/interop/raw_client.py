"""A small blocking AMQP client built on Sodalite's own sans-IO layer, for what the SDK cannot do."""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any

from sodalite.amqp import events as ev
from sodalite.amqp import framing
from sodalite.amqp.codec import encode_value
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import (
    Coordinator,
    Declare,
    Discharge,
    Source,
    Target,
    TransactionalState,
    Transfer,
)
from sodalite.amqp.sasl import SaslClientConfig
from sodalite.amqp.types import Described, Symbol, Timestamp, ULong
from sodalite.server.messages import decode_request


def message(body: bytes, message_id: str | None = None) -> bytes:
    out = bytearray()
    if message_id is not None:
        encode_value(Described(ULong(0x73), [message_id]), out)
    encode_value(Described(ULong(0x75), body), out)
    return bytes(out)


def message_with(body: bytes, *, message_id: str | None = None, session_id: str | None = None,
                 partition_key: str | None = None) -> bytes:
    """A message with the properties that pick a partition: MessageId, SessionId (group-id), PartitionKey."""
    out = bytearray()
    if partition_key is not None:
        encode_value(Described(ULong(0x72), {Symbol("x-opt-partition-key"): partition_key}), out)
    encode_value(Described(ULong(0x73), [message_id, None, None, None, None, None, None, None, None, None,
                                         session_id]), out)
    encode_value(Described(ULong(0x75), body), out)
    return bytes(out)


class RawClient:
    def __init__(self, port: int, hostname: str = "localhost", max_frame_size: int = 262144,
                 session_window: int | None = None, *, sasl: SaslClientConfig | None = None,
                 host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=10)
        self.sock = tls.wrap_socket(sock, server_hostname=hostname) if tls is not None else sock
        window = {} if session_window is None else {"session_window": session_window}
        self.conn = Connection(server=False, container_id=f"raw-{uuid.uuid4()}",
                               sasl_client=sasl or SaslClientConfig(), hostname=hostname,
                               max_frame_size=max_frame_size, **window)
        self.conn.start()
        self.session = self.conn.begin()
        self.events: list[ev.Event] = []
        self._cbs: tuple[Link, Link] | None = None  # one request/response pair, as the SDK keeps
        self._management: dict[str, tuple[Link, Link]] = {}

    def close(self) -> None:
        self.conn.close()
        try:
            self.flush()
        except OSError:
            pass
        self.sock.close()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def wait(self, predicate: Callable[[ev.Event], bool], timeout: float = 10.0) -> ev.Event:
        """Pump until an event matching ``predicate`` arrives; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if predicate(event):
                    del self.events[: i + 1]
                    return event
            self.events.clear()
            self.flush()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no matching event")
            self.sock.settimeout(remaining)
            data = self.sock.recv(65536)
            if not data:
                self.events.extend(self.conn.connection_lost())
                for event in self.events:
                    if predicate(event):
                        return event
                raise ConnectionError("the broker closed the connection")
            self.events.extend(self.conn.receive_data(data))

    def attach(self, address: str, role: bool, **kwargs: Any) -> Link:
        link = self.session.attach(str(uuid.uuid4()), role, Source(address), Target(address), **kwargs)
        self.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is link)
        return link

    def management(self, node: str, operation: str, body: dict[str, Any]) -> tuple[int, Any, Any]:
        """Send one $management request; return (statusCode, errorCondition, body) of the answer."""
        if node not in self._management:
            response = self.attach(node, RECEIVER)
            response.issue_credit(10)
            self._management[node] = (self.attach(node, SENDER), response)
        request, response = self._management[node]
        out = bytearray()
        request_id = uuid.uuid4()
        encode_value(Described(ULong(0x73), [request_id, None, None, None, node]), out)
        encode_value(Described(ULong(0x74), {"operation": operation}), out)
        encode_value(Described(ULong(0x77), body), out)
        request.send_transfer(bytes(out), request_id.bytes[:4], settled=False)
        got = self.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is response)
        assert isinstance(got, ev.TransferReceived)
        decoded = decode_request(got.delivery.payload)
        props = decoded.application_properties
        return int(props["statusCode"]), props.get("errorCondition"), decoded.body

    def put_token(self, audience: str, token: str, expiration_ms: int) -> int:
        """Run a $cbs put-token and return the status-code the broker answered with."""
        if self._cbs is None:
            response = self.attach("$cbs", RECEIVER)
            response.issue_credit(10)
            self._cbs = (self.attach("$cbs", SENDER), response)
        request, response = self._cbs
        out = bytearray()
        request_id = uuid.uuid4()
        encode_value(Described(ULong(0x73), [request_id]), out)
        encode_value(Described(ULong(0x74), {"name": audience, "operation": "put-token", "type": "jwt",
                                             "expiration": Timestamp(expiration_ms)}), out)
        encode_value(Described(ULong(0x77), token), out)
        request.send_transfer(bytes(out), request_id.bytes[:4], settled=False)
        got = self.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is response)
        assert isinstance(got, ev.TransferReceived)
        decoded = decode_request(got.delivery.payload)
        return int(decoded.application_properties["status-code"])

    # ---- transactions (AMQP 1.0 part 4) ----------------------------------------------------------------

    def coordinator(self) -> Link:
        """Attach a transaction controller: a sending link whose target is the Coordinator."""
        link = self.session.attach(str(uuid.uuid4()), SENDER, Source(None),
                                   Coordinator([Symbol("amqp:local-transactions")]))
        self.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is link)
        return link

    def _control(self, coordinator: Link, body: Described) -> Any:
        """Send one Declare or Discharge (an amqp-value message); return the broker's outcome for it."""
        out = bytearray()
        encode_value(Described(ULong(0x77), body), out)
        delivery_id = coordinator.send_transfer(bytes(out), uuid.uuid4().bytes[:4], settled=False)
        return self.outcome(coordinator, delivery_id)

    def declare(self, coordinator: Link) -> Any:
        """Declare a transaction; the outcome is ``Declared(txn_id)`` (or a Rejected)."""
        return self._control(coordinator, Described(ULong(Declare.CODE), []))

    def discharge(self, coordinator: Link, txn_id: bytes, fail: bool = False) -> Any:
        """Commit (``fail`` False) or roll back a transaction; return the broker's outcome."""
        return self._control(coordinator, Described(ULong(Discharge.CODE), [txn_id, fail]))

    def outcome(self, link: Link, delivery_id: int) -> Any:
        got = self.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is link
                        and e.delivery_id == delivery_id)
        assert isinstance(got, ev.DeliveryUpdated)
        return got.state

    def send_in_transaction(self, link: Link, payload: bytes, txn_id: bytes, message_format: int = 0) -> Any:
        """Send one (single-frame) message whose transfer state is TransactionalState(txn_id); return the
        broker's outcome for it."""
        session = link.session
        delivery_id = session._allocate_delivery_id()
        link.delivery_count = (link.delivery_count + 1) & 0xFFFFFFFF
        if link.link_credit > 0:
            link.link_credit -= 1
        tag = uuid.uuid4().bytes
        session.outgoing_unsettled[delivery_id] = (link, tag)
        head = Transfer(link.handle, delivery_id, tag, message_format, False, False, None,
                        TransactionalState(txn_id)).encode()
        session._send_transfer_frame(framing.frame(framing.FRAME_AMQP, session.channel, head + payload), link,
                                     delivery_id, True)
        return self.outcome(link, delivery_id)

    def receive(self, link: Link) -> ev.Delivery:
        """The next delivery on a receiving link (issue credit first)."""
        got = self.wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is link)
        assert isinstance(got, ev.TransferReceived)
        return got.delivery

    def settle(self, link: Link, delivery_id: int, state: Any) -> Any:
        """Send an unsettled disposition for a received delivery; return the state the broker echoes."""
        link.settle(delivery_id, state, settled=False)
        return self.outcome(link, delivery_id)
