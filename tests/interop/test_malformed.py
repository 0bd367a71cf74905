"""A malformed frame closes only its own connection; the broker and other clients carry on."""

from __future__ import annotations

import socket

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess
from raw_client import RawClient

from sodalite.amqp import events as ev

pytestmark = pytest.mark.interop

GARBAGE = [
    b"\x00\x00\x00\x10\x02\x00\x00\x00\x00\x53\x10\xff\xff\xff\xff\xff",  # open with an invalid constructor
    b"\x00\x00\x00\x0c\x07\x00\x00\x00\x00\x00\x00\x00",  # data offset beyond the frame
    b"\xff\xff\xff\xff\x02\x00\x00\x00",  # a 4 GB frame: larger than max-frame-size
    b"\x00\x00\x00\x0d\x02\x00\x00\x00\x00\x53\x12\xc0\x00",  # attach whose list is cut short
]


def _send_receive(connection_string: str, body: str) -> str:
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver("queue.1") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(m)
            return str(m)


@pytest.mark.parametrize("garbage", GARBAGE)
def test_malformed_frame_closes_only_its_connection(broker: BrokerProcess, garbage: bytes) -> None:
    bystander = RawClient(broker.port)  # an established connection that must survive
    bystander.wait(lambda e: isinstance(e, ev.SessionBegun))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"AMQP\x00\x01\x00\x00" + garbage)
        received = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break  # the broker closed this connection
            received += chunk
        assert received.startswith(b"AMQP\x00\x01\x00\x00")
    assert b"amqp:" in received  # the close frame names the error

    assert _send_receive(broker.connection_string, "still alive") == "still alive"
    assert not bystander.conn.closed
    bystander.close()


def test_wrong_protocol_header_gets_ours_back(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"HTTP/1.1 GET /\r\n\r\n")
        reply = sock.recv(64)
        assert reply.startswith(b"AMQP")
        assert sock.recv(64) == b""
    assert _send_receive(broker.connection_string, "after http") == "after http"
