"""Duplicate detection (also across kill -9), session state across kill -9, and MaxSizeInMegabytes."""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusQuotaExceededError
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def _bodies(client: ServiceBusClient, queue: str) -> list[str]:
    got = []
    # Until a peek finds the entity empty: every message is stored before its send is acknowledged,
    # so nothing more is on its way, and no receive has to wait out an idle timeout to show it.
    with client.get_queue_receiver(queue) as receiver:
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=20, max_wait_time=5):
                got.append(str(m))
                receiver.complete_message(m)
    return got


def test_a_duplicate_message_id_is_accepted_and_dropped(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("dedup") as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="order-1"))
            sender.send_messages(ServiceBusMessage("retry", message_id="order-1"))  # acknowledged, dropped
            sender.send_messages([ServiceBusMessage("x", message_id="order-2"),
                                  ServiceBusMessage("x-again", message_id="order-2")])  # within one batch
            sender.send_messages(ServiceBusMessage("other", message_id="order-3"))
        assert _bodies(client, "dedup") == ["first", "x", "other"]


def test_duplicate_history_and_session_state_survive_kill_9(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    with ServiceBusClient.from_connection_string(fresh_broker.connection_string) as client:
        with client.get_queue_sender("dedup") as sender:
            sender.send_messages(ServiceBusMessage("before", message_id="once"))
        with client.get_queue_sender("sessions") as sender:
            sender.send_messages(ServiceBusMessage("s", session_id="keep"))
        with client.get_queue_receiver("sessions", session_id="keep") as receiver:
            receiver.session.set_state(b"checkpoint-7")
    fresh_broker.kill()
    fresh_broker.start()
    with ServiceBusClient.from_connection_string(fresh_broker.connection_string) as client:
        with client.get_queue_sender("dedup") as sender:
            sender.send_messages(ServiceBusMessage("after", message_id="once"))
        assert _bodies(client, "dedup") == ["before"]
        with client.get_queue_receiver("sessions", session_id="keep") as receiver:
            assert receiver.session.get_state() == b"checkpoint-7"
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(m)


def test_a_full_entity_refuses_sends_with_a_quota_error(broker: BrokerProcess) -> None:
    body = b"q" * 200_000
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("tiny") as sender:
            for _ in range(5):
                sender.send_messages(ServiceBusMessage(body))  # 1,000,000 bytes of 1,048,576
            with pytest.raises(ServiceBusQuotaExceededError):
                sender.send_messages(ServiceBusMessage(body))
        drained = _bodies(client, "tiny")
        assert len(drained) == 5  # what was accepted is kept; the refused one is not there
        with client.get_queue_sender("tiny") as sender:
            sender.send_messages(ServiceBusMessage(body))  # room again once drained
        assert len(_bodies(client, "tiny")) == 1
