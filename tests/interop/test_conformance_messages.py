"""Conformance of messages on the wire, with the official azure-servicebus SDK (issue 13, items 1, 5, 9).

One broker for this module, started by scripts/serve; each test uses its own queue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus._pyamqp._encode import encode_decimal128  # the SDK's own encoding, byte for byte
from azure.servicebus.amqp import AmqpAnnotatedMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.amqp.link import RECEIVER
from sodalite.amqp.message import APPLICATION_PROPERTIES, section_value, split_sections
from sodalite.amqp.types import Decimal128
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

QUEUES = ["da-lock", "da-kept", "da-rad", "mid-none", "mid-kept", "mid-batch", "dec", "dec-raw"]


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


# ---- item 5: every message has a MessageId ---------------------------------------------------------

def test_a_message_sent_without_a_message_id_is_given_one(wire_broker: BrokerProcess) -> None:
    with _client(wire_broker) as client:
        with client.get_queue_sender("mid-none") as sender:
            sender.send_messages(ServiceBusMessage("no id", application_properties={"k": "v"}))
            sender.send_messages(AmqpAnnotatedMessage(value_body={"no": "properties section"}))
        with client.get_queue_receiver("mid-none") as receiver:
            peeked = receiver.peek_messages(max_message_count=2)
            received = receiver.receive_messages(max_message_count=2, max_wait_time=10)
            while len(received) < 2:
                more = receiver.receive_messages(max_message_count=2, max_wait_time=10)
                assert more, "both messages should arrive"
                received.extend(more)
            ids = [m.message_id for m in received]
            assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == 2
            # the id is stored with the message, not made up per delivery
            assert [m.message_id for m in peeked] == ids
            assert str(received[0]) == "no id" and received[0].application_properties == {b"k": b"v"}
            assert received[1].raw_amqp_message.body == {b"no": b"properties section"}
            for m in received:
                receiver.complete_message(m)


def test_a_message_id_that_was_sent_is_kept(wire_broker: BrokerProcess) -> None:
    with _client(wire_broker) as client:
        with client.get_queue_sender("mid-kept") as sender:
            sender.send_messages(ServiceBusMessage("with id", message_id="mine", subject="s", correlation_id="c"))
        with client.get_queue_receiver("mid-kept", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            [message] = r.receive_messages(max_message_count=1, max_wait_time=10)
            assert (message.message_id, message.subject, message.correlation_id) == ("mine", "s", "c")


def test_each_message_of_a_batch_without_ids_gets_its_own(wire_broker: BrokerProcess) -> None:
    with _client(wire_broker) as client:
        with client.get_queue_sender("mid-batch") as sender:
            batch = sender.create_message_batch()
            for i in range(5):
                batch.add_message(ServiceBusMessage(f"m{i}", subject=f"s{i}"))
            sender.send_messages(batch)
        with client.get_queue_receiver("mid-batch", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
            received: list[object] = []
            while len(received) < 5:
                more = r.receive_messages(max_message_count=5, max_wait_time=10)
                assert more
                received.extend(more)
            assert len({m.message_id for m in received}) == 5  # type: ignore[attr-defined]
            assert [m.subject for m in received] == [f"s{i}" for i in range(5)]  # type: ignore[attr-defined]
            assert all(m.message_id for m in received)  # type: ignore[attr-defined]


# ---- item 9: decimal128 application properties ------------------------------------------------------

def test_decimal_application_properties_come_back_readable(wire_broker: BrokerProcess) -> None:
    """The SDK encodes a Decimal as AMQP decimal128 (BID) but its decoder reads the layout Service Bus
    writes, and misreads every non-zero BID one.

    The broker keeps the value as sent and gives the Python SDK each decimal in the layout it reads:
    the Decimal that was sent comes back, as from Service Bus.
    """
    values = {"price": Decimal("1.5"), "neg": Decimal("-2.25"), "big": Decimal("12345678901234567890.123"),
              "zero": Decimal("0"), "plain": 7}
    with _client(wire_broker) as client:
        with client.get_queue_sender("dec") as sender:
            sender.send_messages(ServiceBusMessage("decimals", message_id="d1", application_properties=values))
        with client.get_queue_receiver("dec") as receiver:
            [peeked] = receiver.peek_messages(max_message_count=1)
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for m in (peeked, message):
                props = m.application_properties or {}
                assert {k: props[k.encode()] for k in values} == values
            receiver.complete_message(message)


def test_other_clients_get_the_decimal128_as_sent(wire_broker: BrokerProcess) -> None:
    """A client that is not the Python SDK (here Sodalite's own AMQP layer) gets the decimal128 bytes."""
    sent = Decimal("-12.345")
    encoded = bytearray()
    encode_decimal128(encoded, sent)
    with _client(wire_broker) as client, client.get_queue_sender("dec-raw") as sender:
        sender.send_messages(ServiceBusMessage("d", application_properties={"amount": sent}))
    raw = RawClient(wire_broker.port)
    try:
        audience = f"sb://localhost:{wire_broker.port}/"
        expiry = int(time.time()) + 300
        assert raw.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        link = raw.attach(f"amqps://localhost:{wire_broker.port}/dec-raw", RECEIVER, snd_settle_mode=1)
        link.issue_credit(1)
        raw.flush()
        payload = raw.receive(link).payload
        [props] = [s for s in split_sections(payload) if s.code == APPLICATION_PROPERTIES]
        amount = section_value(payload, props)["amount"]
        assert isinstance(amount, Decimal128) and bytes(amount) == bytes(encoded[1:])
        assert amount.to_decimal() == sent
    finally:
        raw.close()
