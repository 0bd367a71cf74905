"""Lock expiry and lock release when a receiver goes away, through the official SDK."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageLockLostError
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def test_expired_lock_redelivers_and_settling_it_fails(broker: BrokerProcess) -> None:
    # "orders" has LockDuration PT5S.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("slow consumer"))
        with client.get_queue_receiver("orders") as receiver:
            [first] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            lock_seconds = (first.locked_until_utc - first.enqueued_time_utc).total_seconds()
            assert 4 <= lock_seconds <= 7
            # No fixed sleep: the receive waits for the redelivery, which comes when the lock expires.
            [again] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            assert again.sequence_number == first.sequence_number
            assert again.delivery_count == 1
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(first)
            receiver.complete_message(again)


def test_closing_a_receiver_keeps_its_locks_until_they_expire(broker: BrokerProcess) -> None:
    # Issue 13.2 (clarifications, "locks outlive their link"): Service Bus keeps the lock after the link
    # goes, so a second receiver does not get the message; it comes back once the lock (5 s on
    # "orders") expires, with the delivery counted.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("left behind"))
        with client.get_queue_receiver("orders") as receiver:
            [held] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert held.delivery_count == 0
        with client.get_queue_receiver("orders") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == []
            [again] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            assert again.sequence_number == held.sequence_number
            assert again.delivery_count == 1
            receiver.complete_message(again)


def test_competing_receivers_never_share_a_locked_message(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("misc") as sender:
            sender.send_messages([ServiceBusMessage(f"c{i}") for i in range(20)])
        with client.get_queue_receiver("misc") as a, client.get_queue_receiver("misc") as b:
            seen_a = a.receive_messages(max_message_count=10, max_wait_time=5)
            seen_b = b.receive_messages(max_message_count=20, max_wait_time=5)
            got_a = {m.sequence_number for m in seen_a}
            got_b = {m.sequence_number for m in seen_b}
            assert not got_a & got_b
            assert len(got_a | got_b) == 20
            for m in seen_a:
                a.complete_message(m)
            for m in seen_b:
                b.complete_message(m)
