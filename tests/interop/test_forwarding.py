"""Auto-forwarding through the official SDK: ForwardTo, the hop limit, ForwardDeadLetteredMessagesTo."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def test_forward_to_moves_messages_with_their_properties(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("fwd-src") as sender:
            sender.send_messages(ServiceBusMessage("forward me", message_id="f-1", subject="s",
                                                   application_properties={"k": 7}))
        with client.get_queue_receiver("fwd-dst") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert (str(m), m.message_id, m.subject, m.application_properties[b"k"]) == ("forward me", "f-1", "s", 7)
            receiver.complete_message(m)
        with client.get_queue_receiver("fwd-src") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_a_forwarding_loop_dead_letters_instead_of_spinning(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("loop-a") as sender:
            sender.send_messages(ServiceBusMessage("round and round"))
        # a -> b -> a -> b -> a: four hops, and a would forward a fifth time, so it stops at a.
        with client.get_queue_receiver("loop-a", sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER) as tdlq:
            [m] = tdlq.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(m) == "round and round"
            assert m.dead_letter_reason == "MaxTransferHopCountExceeded"
            tdlq.complete_message(m)
        for queue in ("loop-a", "loop-b"):
            with client.get_queue_receiver(queue) as receiver:
                assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_dead_lettered_messages_are_forwarded_with_their_source(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("dlfwd-src") as sender:
            sender.send_messages(ServiceBusMessage("to the side"))
        with client.get_queue_receiver("dlfwd-src") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(m, reason="why", error_description="because")
        with client.get_queue_receiver("dlfwd-dst") as receiver:
            [f] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(f) == "to the side"
            assert f.dead_letter_reason == "why" and f.dead_letter_error_description == "because"
            assert f.dead_letter_source == "dlfwd-src"
            receiver.complete_message(f)
        with client.get_queue_receiver("dlfwd-src", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            assert dlq.receive_messages(max_message_count=1, max_wait_time=1) == []
