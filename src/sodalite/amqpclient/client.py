"""A small blocking AMQP client on Sodalite's own sans-IO layer (``sodalite send``/``peek``, the Spark source).

The official SDK is a development dependency only, so the command line and the Spark data source
speak AMQP themselves: one
socket (plain, or TLS-on-connect for amqps), one session, a SAS token put to ``$cbs`` per
entity, unsettled sends that wait for the broker's outcome, and ``$management`` requests.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sodalite.amqp import events as ev
from sodalite.amqp.connection import Connection
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import Accepted, Error, Source, Target
from sodalite.amqp.sasl import SaslClientConfig
from sodalite.amqp.types import AmqpValue, Timestamp
from sodalite.message.requests import decode_control, encode_request
from sodalite.message.sections import number
from sodalite.model import sas

TOKEN_LIFETIME_S = 3600


class ClientError(Exception):
    """The broker refused something; ``condition`` is the AMQP error condition when it sent one."""

    def __init__(self, condition: str | None, description: str, index: int | None = None) -> None:
        super().__init__(f"{condition}: {description}" if condition else description)
        self.condition = condition
        self.description = description
        self.index = index  # in a send, the position of the message the broker refused


@dataclass(frozen=True, slots=True)
class ManagementReply:
    status: int
    condition: str | None
    description: str | None
    body: Any  # the reply's AMQP value, read by each operation's caller as that operation answers


def _error_of(error: Error | None, fallback: str) -> ClientError:
    if error is None:
        return ClientError(None, fallback)
    return ClientError(str(error.condition), str(error.description or fallback))


class AmqpClient:
    def __init__(self, host: str, port: int, key_name: str, key: str, *, tls: ssl.SSLContext | None = None,
                 timeout: float = 30.0) -> None:
        self._host, self._port, self._key_name, self._key = host, port, key_name, key
        self._timeout = timeout
        url = f"{'amqps' if tls is not None else 'amqp'}://{host}:{port}"
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
            self._sock: socket.socket = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        except OSError as exc:
            raise ConnectionError(f"at {url}: {exc.strerror or exc}") from None
        self._conn = Connection(server=False, container_id=f"sodalite-client-{uuid.uuid4()}",
                                sasl_client=SaslClientConfig(), hostname=host)
        self._conn.start()
        self._session = self._conn.begin()
        self._events: list[ev.Event] = []
        self._cbs: tuple[Link, Link] | None = None
        self._management: dict[str, tuple[Link, Link]] = {}
        self._authorised: set[str] = set()

    def __enter__(self) -> AmqpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()
        try:
            self._flush()
        except OSError:
            pass
        self._sock.close()

    # ---- pumping ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data:
            self._sock.sendall(data)

    def _wait(self, predicate: Callable[[ev.Event], bool]) -> ev.Event:
        deadline = time.monotonic() + self._timeout
        while True:
            for i, event in enumerate(self._events):
                if predicate(event):
                    del self._events[: i + 1]
                    return event
                if isinstance(event, ev.ConnectionClosed):
                    raise _error_of(event.error, "the broker closed the connection")
            self._events.clear()
            self._flush()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the broker did not answer in time")
            self._sock.settimeout(remaining)
            data = self._sock.recv(65536)
            if not data:
                self._events.extend(self._conn.connection_lost())
                continue
            self._events.extend(self._conn.receive_data(data))

    def _attach(self, address: str, role: bool) -> Link:
        link = self._session.attach(str(uuid.uuid4()), role, Source(address), Target(address))

        def answered(e: ev.Event) -> bool:
            return isinstance(e, ev.LinkAttached | ev.LinkDetached) and e.link is link

        event = self._wait(answered)
        if isinstance(event, ev.LinkDetached):
            raise _error_of(event.error, f"the broker refused a link to '{address}'")
        remote = link.remote_attach
        terminus = None if remote is None else (remote.target if role == SENDER else remote.source)
        if terminus is None:  # refused: answered with a null terminus, and the detach that follows says why
            detached = self._wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is link)
            assert isinstance(detached, ev.LinkDetached)
            raise _error_of(detached.error, f"the broker refused a link to '{address}'")
        return link

    def _request(self, pair: tuple[Link, Link], message_id: uuid.UUID, application_properties: dict[str, AmqpValue],
                 body: object) -> tuple[dict[str, AmqpValue], AmqpValue]:
        request, response = pair
        request.send_transfer(encode_request(message_id, request.name, application_properties, body),
                              message_id.bytes[:4], settled=False)
        got = self._wait(lambda e: isinstance(e, ev.TransferReceived) and e.link is response)
        assert isinstance(got, ev.TransferReceived)
        response.issue_credit(1)
        reply = decode_control(got.delivery.payload)
        return reply.application_properties, reply.body

    def _pair(self, node: str) -> tuple[Link, Link]:
        response = self._attach(node, RECEIVER)
        response.issue_credit(1)
        return self._attach(node, SENDER), response

    # ---- operations ------------------------------------------------------------------------------

    def authorise(self, entity: str) -> None:
        """Put a SAS token for ``entity`` to ``$cbs`` (once per entity and connection)."""
        if entity in self._authorised:
            return
        if self._cbs is None:
            self._cbs = self._pair("$cbs")
        audience = f"sb://{self._host}/{entity}"
        expiry = int(time.time()) + TOKEN_LIFETIME_S
        token = sas.generate_token(audience, self._key_name, self._key, expiry)
        properties, _ = self._request(self._cbs, uuid.uuid4(), {
            "name": audience, "operation": "put-token", "type": "servicebus.windows.net:sastoken",
            "expiration": Timestamp(expiry * 1000)}, token)
        status = number(properties.get("status-code")) or 0
        if status not in (200, 202):
            # 404: the entity does not exist (Service Bus checks it at put-token, after the token itself)
            raise ClientError("amqp:not-found" if status == 404 else "amqp:unauthorized-access",
                              str(properties.get("status-description") or f"put-token answered {status}"))
        self._authorised.add(entity)

    def send(self, entity: str, payloads: list[bytes]) -> None:
        """Send encoded messages unsettled and wait until the broker has accepted (stored) each one."""
        self.authorise(entity)
        link = self._attach(entity, SENDER)
        try:
            pending: dict[int, int] = {}
            for index, payload in enumerate(payloads):
                while link.link_credit <= 0:
                    self._wait(lambda e: isinstance(e, ev.CreditChanged) and e.link is link)
                pending[link.send_transfer(payload, index.to_bytes(4, "big"), settled=False)] = index
            while pending:
                event = self._wait(lambda e: (isinstance(e, ev.DeliveryUpdated) and e.link is link)
                                   or (isinstance(e, ev.LinkDetached) and e.link is link))
                if isinstance(event, ev.LinkDetached):
                    raise _error_of(event.error, f"the broker detached the link to '{entity}'")
                assert isinstance(event, ev.DeliveryUpdated)
                position = pending.pop(event.delivery_id, -1)
                if not isinstance(event.state, Accepted):
                    error = getattr(event.state, "error", None)
                    refused = _error_of(error if isinstance(error, Error) else None,
                                        f"the broker did not accept the message ({type(event.state).__name__})")
                    refused.index = None if position == -1 else position
                    raise refused
        finally:
            link.detach()
            self._flush()

    def check_sender(self, entity: str) -> None:
        """Raise ClientError unless the broker lets this client send to ``entity`` (it exists, the key has Send)."""
        self.authorise(entity)
        link = self._attach(entity, SENDER)
        link.detach()
        self._flush()

    def management(self, entity: str, operation: str, body: dict[str, object]) -> ManagementReply:
        """One ``$management`` request to ``entity`` (which may name a sub-queue)."""
        self.authorise(entity.split("/$")[0])
        node = f"{entity}/$management"
        if node not in self._management:
            self._management[node] = self._pair(node)
        properties, reply = self._request(self._management[node], uuid.uuid4(), {"operation": operation}, body)
        status = number(properties.get("statusCode", properties.get("status-code"))) or 0
        condition = properties.get("errorCondition")
        description = properties.get("statusDescription")
        return ManagementReply(status, str(condition) if condition is not None else None,
                               str(description) if description is not None else None, reply)
