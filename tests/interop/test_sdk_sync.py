"""The official azure-servicebus SDK (sync) against a broker started by scripts/serve."""

from __future__ import annotations

import datetime
import uuid

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from broker_process import BrokerProcess

from sodalite.client.failover import is_entity_not_found

pytestmark = pytest.mark.interop


def drain(client: ServiceBusClient, queue: str, mode: ServiceBusReceiveMode = ServiceBusReceiveMode.RECEIVE_AND_DELETE,
          expect: int | None = None, wait: float = 2.0) -> list[object]:
    out: list[object] = []
    with client.get_queue_receiver(queue, receive_mode=mode) as receiver:
        while expect is None or len(out) < expect:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=wait)
            if not batch:
                break
            out.extend(batch)
    return out


def test_send_one_and_receive_it(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages(ServiceBusMessage("hello sodalite", message_id="one"))
        with client.get_queue_receiver("queue.1") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(message) == "hello sodalite"
            assert message.message_id == "one"
            assert message.delivery_count == 0
            assert message.sequence_number >= 1
            assert message.locked_until_utc > message.enqueued_time_utc
            receiver.complete_message(message)
        assert drain(client, "queue.1") == []


def test_batch_of_100_in_order_with_bodies_and_properties(broker: BrokerProcess) -> None:
    sent_at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    uid = uuid.uuid4()
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            batch = sender.create_message_batch()
            for i in range(100):
                batch.add_message(ServiceBusMessage(
                    f"order-{i}".encode(), message_id=f"id-{i}", correlation_id=f"corr-{i}", subject="orders",
                    content_type="application/json", to="warehouse", reply_to="replies",
                    application_properties={"i": i, "s": f"v{i}", "f": i / 2, "b": i % 2 == 0, "u": uid,
                                            "t": sent_at, "bytes": b"raw"},
                ))
            sender.send_messages(batch)
        with client.get_queue_receiver("orders") as receiver:
            received = []
            while len(received) < 100:
                got = receiver.receive_messages(max_message_count=100, max_wait_time=10)
                assert got, f"only {len(received)} of 100 arrived"
                received.extend(got)
            for m in received:
                receiver.complete_message(m)
    assert [str(m) for m in received] == [f"order-{i}" for i in range(100)]
    sequence_numbers = [m.sequence_number for m in received]
    assert sequence_numbers == sorted(sequence_numbers) and len(set(sequence_numbers)) == 100
    for i, m in enumerate(received):
        assert m.message_id == f"id-{i}"
        assert m.correlation_id == f"corr-{i}"
        assert m.subject == "orders"
        assert m.content_type == "application/json"
        assert m.to == "warehouse"
        assert m.reply_to == "replies"
        props = m.application_properties
        assert props[b"i"] == i and props[b"s"] == f"v{i}".encode() and props[b"f"] == i / 2
        assert props[b"b"] is (i % 2 == 0)
        assert props[b"u"] == uid
        assert props[b"bytes"] == b"raw"  # the SDK sends bytes as a string (contract 3.2)
        assert props[b"t"] == int(sent_at.timestamp() * 1000)


def test_body_kinds_round_trip(broker: BrokerProcess) -> None:
    messages = [
        AmqpAnnotatedMessage(data_body=[b"part-1", b"part-2"]),
        AmqpAnnotatedMessage(value_body={"k": [1, 2.5, "x"]}),
        AmqpAnnotatedMessage(sequence_body=[[1, "two"], [3.0]]),
        ServiceBusMessage(None),
    ]
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("props") as sender:
            for m in messages:
                sender.send_messages(m)
        got = drain(client, "props", expect=4)
    assert len(got) == 4
    data, value, sequence, empty = (m.raw_amqp_message for m in got)  # type: ignore[attr-defined]
    assert data.body_type == AmqpMessageBodyType.DATA and list(data.body) == [b"part-1", b"part-2"]
    assert value.body_type == AmqpMessageBodyType.VALUE and value.body == {b"k": [1, 2.5, b"x"]}
    assert sequence.body_type == AmqpMessageBodyType.SEQUENCE and list(sequence.body) == [[1, b"two"], [3.0]]
    assert empty.body is None or list(empty.body) == []


def test_receive_and_delete(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("rnd") as sender:
            sender.send_messages([ServiceBusMessage(f"r{i}") for i in range(5)])
        got = drain(client, "rnd", expect=5)
        assert [str(m) for m in got] == [f"r{i}" for i in range(5)]
        assert all(m.lock_token is None for m in got)  # type: ignore[attr-defined]
        # Removed on delivery: nothing comes back, not even in PeekLock.
        assert drain(client, "rnd", mode=ServiceBusReceiveMode.PEEK_LOCK, wait=1.0) == []


def test_abandon_redelivers_with_delivery_count_one(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("misc") as sender:
            sender.send_messages(ServiceBusMessage("try me"))
        with client.get_queue_receiver("misc") as receiver:
            [first] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert first.delivery_count == 0
            receiver.abandon_message(first)
            [again] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert again.sequence_number == first.sequence_number
            assert again.delivery_count == 1
            assert again.lock_token != first.lock_token
            receiver.complete_message(again)


def test_unknown_queue_is_refused_at_put_token(broker: BrokerProcess) -> None:
    """As Service Bus: the put-token for an entity that does not exist is answered 404, which the SDK raises as
    ServiceBusAuthenticationError (its released suite's test_sb_client_bad_entity expects that)."""
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError) as refused, \
                client.get_queue_sender("no-such-queue") as sender:
            sender.send_messages(ServiceBusMessage("lost"))
        assert is_entity_not_found(refused.value) and "'no-such-queue' could not be found" in str(
            refused.value.inner_exception)
        with pytest.raises(ServiceBusAuthenticationError) as refused, \
                client.get_queue_receiver("no-such-queue") as receiver:
            receiver.receive_messages(max_wait_time=1)
        assert is_entity_not_found(refused.value)


def test_entity_names_match_case_insensitively(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("MISC") as sender:
            sender.send_messages(ServiceBusMessage("upper"))
        assert [str(m) for m in drain(client, "misc", expect=1)] == ["upper"]
