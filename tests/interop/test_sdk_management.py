"""$management operations through the official SDK: peek and renew-lock; unbuilt ones fail clearly."""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageState
from broker_process import KEY, KEY_NAME, BrokerProcess
from raw_client import RawClient

from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop


def test_peek_shows_messages_without_locking_or_removing_them(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("peek") as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}", application_properties={"i": i}) for i in range(5)])
        with client.get_queue_receiver("peek") as receiver:
            first = receiver.peek_messages(max_message_count=3)
            rest = receiver.peek_messages(max_message_count=10)  # continues after the last peeked
            assert [str(m) for m in first] == ["p0", "p1", "p2"]
            assert [str(m) for m in rest] == ["p3", "p4"]
            assert all(m.state == ServiceBusMessageState.ACTIVE for m in first + rest)
            assert [m.application_properties[b"i"] for m in first + rest] == list(range(5))
            assert receiver.peek_messages(max_message_count=5) == []  # past the end: 204, no error
            again = receiver.peek_messages(max_message_count=1, sequence_number=first[1].sequence_number)
            assert [str(m) for m in again] == ["p1"]
            # Peek neither locks nor removes: a locked message is still shown, and all five are receivable.
            got = receiver.receive_messages(max_message_count=5, max_wait_time=10)
            while len(got) < 5:
                got += receiver.receive_messages(max_message_count=5, max_wait_time=10)
            assert [str(m) for m in receiver.peek_messages(max_message_count=5, sequence_number=1)] == [
                f"p{i}" for i in range(5)]
            for m in got:
                receiver.complete_message(m)
            assert receiver.peek_messages(max_message_count=5, sequence_number=1) == []


def test_renew_lock_extends_it_past_the_lock_duration(broker: BrokerProcess) -> None:
    # "renew" has LockDuration PT5S.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("renew") as sender:
            sender.send_messages(ServiceBusMessage("long job"))
        with client.get_queue_receiver("renew") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            original = m.locked_until_utc
            for _ in range(3):
                time.sleep(2)
                new_until = receiver.renew_message_lock(m)
                assert new_until > original
            # 6 s after receipt, past the 5 s lock: completing works only because the lock was renewed.
            receiver.complete_message(m)


def test_unbuilt_management_operation_fails_clearly(broker: BrokerProcess) -> None:
    # Batch delete is not built; the Python SDK never sends it (contract 6.11), so a raw client shows
    # what the broker answers.
    client = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/misc"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        status, condition, _ = client.management("misc/$management", "com.microsoft:delete-messages",
                                                 {"message-count": 1})
        assert (status, condition) == (501, "amqp:not-implemented")
        status, _, _ = client.management("misc/$management", "com.microsoft:peek-message",
                                         {"from-sequence-number": 1, "message-count": 1})
        assert status in (200, 204)  # the same node answers what is built
    finally:
        client.close()
