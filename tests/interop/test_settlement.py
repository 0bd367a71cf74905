"""Dead-lettering, the dead-letter queue, MaxDeliveryCount, defer, scheduling and expiry, through the SDK."""

from __future__ import annotations

import datetime
import re
import time

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.exceptions import MessageNotFoundError
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def _utc_in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def test_dead_letter_with_reason_then_receive_it_from_the_dead_letter_queue(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("dlq") as sender:
            sender.send_messages(ServiceBusMessage("poison", application_properties={"k": "v"}))
        with client.get_queue_receiver("dlq") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(m, reason="bad-format", error_description="field x missing")
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        with client.get_queue_receiver("dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [peeked] = dlq.peek_messages(max_message_count=5)
            assert peeked.dead_letter_reason == "bad-format"
            [d] = dlq.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(d) == "poison" and d.sequence_number == m.sequence_number
            assert d.dead_letter_reason == "bad-format"
            assert d.dead_letter_error_description == "field x missing"
            assert d.application_properties[b"k"] == b"v"
            dlq.complete_message(d)
            assert dlq.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_max_delivery_count_moves_the_message_to_the_dead_letter_queue(broker: BrokerProcess) -> None:
    # "dlq" has MaxDeliveryCount 2.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("dlq") as sender:
            sender.send_messages(ServiceBusMessage("unlucky"))
        with client.get_queue_receiver("dlq") as receiver:
            for _ in range(2):
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                receiver.abandon_message(m)
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        with client.get_queue_receiver("dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [d] = dlq.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(d) == "unlucky"
            assert d.dead_letter_reason == "MaxDeliveryCountExceeded"
            assert d.delivery_count == 2
            dlq.complete_message(d)


def test_defer_then_receive_deferred_and_settle_by_sequence_number(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("defer") as sender:
            sender.send_messages([ServiceBusMessage("later"), ServiceBusMessage("now")])
        with client.get_queue_receiver("defer") as receiver:
            [first] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.defer_message(first)
            [second] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(second) == "now"
            receiver.complete_message(second)
            assert receiver.receive_messages(max_message_count=1, max_wait_time=1) == []  # deferred is hidden
            [peeked] = receiver.peek_messages(max_message_count=5, sequence_number=first.sequence_number)
            assert peeked.state == ServiceBusMessageState.DEFERRED
            [deferred] = receiver.receive_deferred_messages([first.sequence_number])
            assert str(deferred) == "later" and deferred.lock_token is not None
            receiver.complete_message(deferred)  # settled through update-disposition
            with pytest.raises(MessageNotFoundError):
                receiver.receive_deferred_messages([first.sequence_number], timeout=10)
            assert receiver.peek_messages(max_message_count=5, sequence_number=first.sequence_number) == []


def test_scheduled_messages_appear_at_their_time_and_can_be_cancelled(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("sched") as sender:
            [keep, cancel] = sender.schedule_messages(
                [ServiceBusMessage("scheduled"), ServiceBusMessage("cancelled")], _utc_in(3))
            sender.send_messages(ServiceBusMessage("via-annotation", scheduled_enqueue_time_utc=_utc_in(3)))
            sender.cancel_scheduled_messages(cancel)
        with client.get_queue_receiver("sched") as receiver:
            states = {str(m): m.state for m in receiver.peek_messages(max_message_count=10, sequence_number=1)}
            assert states == {"scheduled": ServiceBusMessageState.SCHEDULED,
                              "via-annotation": ServiceBusMessageState.SCHEDULED}
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []  # not yet
            time.sleep(2.5)
            got = []
            while len(got) < 2:
                batch = receiver.receive_messages(max_message_count=5, max_wait_time=10)
                assert batch, f"got {len(got)} of 2 scheduled messages"
                got.extend(batch)
            assert sorted(str(m) for m in got) == ["scheduled", "via-annotation"]
            assert any(m.sequence_number == keep for m in got)
            for m in got:
                receiver.complete_message(m)
            assert receiver.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_cancelling_an_unknown_scheduled_number_cancels_nothing_and_raises_not_found(broker: BrokerProcess) -> None:
    """All or none, as Service Bus answers it (Azure/azure-service-bus#239): a number that is not a
    scheduled message makes the whole cancel fail with message-not-found, and the scheduled message
    named with it in the same call is still delivered at its time. The SDK retries a management
    operation's message-not-found (the condition is not in its no-retry list), the same cancel each
    time, for about 11 s; this client does not retry, so the message can be due soon after."""
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        with client.get_queue_sender("sched") as sender:
            [kept] = sender.schedule_messages(ServiceBusMessage("kept despite the cancel"), _utc_in(3))
            unknown = kept + 1_000_000
            with pytest.raises(MessageNotFoundError) as refused:
                sender.cancel_scheduled_messages([kept, unknown])
            named = re.search(r"Missing sequence numbers: ([\d, ]+)", str(refused.value))
            assert named is not None and named.group(1).strip() == str(unknown), str(refused.value)
        with client.get_queue_receiver("sched") as receiver:
            [peeked] = receiver.peek_messages(max_message_count=1, sequence_number=kept)
            assert (peeked.sequence_number, peeked.state) == (kept, ServiceBusMessageState.SCHEDULED)
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = receiver.receive_messages(max_message_count=5, max_wait_time=10)
            assert [(str(m), m.sequence_number) for m in got] == [("kept despite the cancel", kept)]
            assert got[0].scheduled_enqueue_time_utc is not None
            receiver.complete_message(got[0])


def test_expired_messages_are_dead_lettered_or_dropped_per_the_entity(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        for queue in ("ttl", "ttl-drop"):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages([ServiceBusMessage("short", time_to_live=datetime.timedelta(seconds=1)),
                                      ServiceBusMessage("long", time_to_live=datetime.timedelta(hours=1))])
        time.sleep(2)
        for queue in ("ttl", "ttl-drop"):
            with client.get_queue_receiver(queue) as receiver:
                got = receiver.receive_messages(max_message_count=5, max_wait_time=5)
                assert [str(m) for m in got] == ["long"]  # an expired message is never received
                receiver.complete_message(got[0])
        with client.get_queue_receiver("ttl", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [d] = dlq.receive_messages(max_message_count=5, max_wait_time=10)
            assert str(d) == "short" and d.dead_letter_reason == "TTLExpiredException"
            dlq.complete_message(d)
        with client.get_queue_receiver("ttl-drop", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            assert dlq.receive_messages(max_message_count=5, max_wait_time=1) == []


def test_the_entity_default_ttl_is_also_the_ceiling(broker: BrokerProcess) -> None:
    # "ttl-cap" has DefaultMessageTimeToLive PT1M.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("ttl-cap") as sender:
            sender.send_messages([ServiceBusMessage("long", time_to_live=datetime.timedelta(hours=1)),
                                  ServiceBusMessage("short", time_to_live=datetime.timedelta(seconds=30)),
                                  ServiceBusMessage("none")])
        with client.get_queue_receiver("ttl-cap") as receiver:
            got = receiver.receive_messages(max_message_count=3, max_wait_time=10)
            while len(got) < 3:
                got += receiver.receive_messages(max_message_count=3, max_wait_time=10)
            ttls = {str(m): m.time_to_live for m in got}
            assert ttls == {"long": datetime.timedelta(minutes=1), "short": datetime.timedelta(seconds=30),
                            "none": datetime.timedelta(minutes=1)}
            for m in got:
                assert m.expires_at_utc == m.enqueued_time_utc + m.time_to_live
                receiver.complete_message(m)
