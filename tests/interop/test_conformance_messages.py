"""Conformance of messages on the wire, with the official azure-servicebus SDK (issue 13, items 1, 5, 9).

One broker for this module, started by scripts/serve; each test uses its own queue.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.amqp import AmqpAnnotatedMessage
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = ["da-lock", "da-kept", "da-rad", "mid-none", "mid-kept", "mid-batch", "dec"]


@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("conformance-messages")
    config = write_config(base / "Config.json", [{"Name": q, "Properties": {}} for q in QUEUES])
    process = BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def _client(broker: BrokerProcess) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string)


# ---- item 1: delivery annotations -------------------------------------------------------------

def test_peek_lock_delivery_carries_the_lock_token_in_delivery_annotations(wire_broker: BrokerProcess) -> None:
    with _client(wire_broker) as client:
        with client.get_queue_sender("da-lock") as sender:
            sender.send_messages(ServiceBusMessage("locked"))
        with client.get_queue_receiver("da-lock") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            annotations = message.raw_amqp_message.delivery_annotations or {}
            assert annotations.get(b"x-opt-lock-token") == uuid.UUID(str(message.lock_token))
            receiver.complete_message(message)


def test_delivery_annotations_a_client_sends_are_delivered(wire_broker: BrokerProcess) -> None:
    sent = AmqpAnnotatedMessage(data_body=b"annotated",
                                delivery_annotations={"x-custom": "kept", "x-number": 42,
                                                      "x-opt-lock-token": uuid.uuid4()})
    with _client(wire_broker) as client:
        with client.get_queue_sender("da-kept") as sender:
            sender.send_messages(sent)
        with client.get_queue_receiver("da-kept") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            annotations = message.raw_amqp_message.delivery_annotations or {}
            assert annotations.get(b"x-custom") == b"kept"  # the SDK decodes strings here as bytes
            assert annotations.get(b"x-number") == 42
            # a lock token a client sends is not the broker's: the delivery carries the real one
            assert annotations.get(b"x-opt-lock-token") == uuid.UUID(str(message.lock_token))
            assert b"".join(message.body) == b"annotated"
            receiver.complete_message(message)


def test_receive_and_delete_keeps_client_delivery_annotations_without_a_lock_token(
        wire_broker: BrokerProcess) -> None:
    sent = AmqpAnnotatedMessage(data_body=b"x", delivery_annotations={"x-custom": "rad"})
    with _client(wire_broker) as client:
        with client.get_queue_sender("da-rad") as sender:
            sender.send_messages(sent)
        with client.get_queue_receiver("da-rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            annotations = message.raw_amqp_message.delivery_annotations or {}
            assert annotations == {b"x-custom": b"rad"}
