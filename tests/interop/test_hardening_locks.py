"""Locks past their link (issue 13.2) and session messages riding on the session lock (13.3).

Official ``azure-servicebus`` SDK against a broker of this module's own; the raw client only where the SDK
refuses to send the request (renew-lock for a session message is refused client-side).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "outlive", "Properties": {"LockDuration": "PT1M"}},
    {"Name": "outlive-conn", "Properties": {"LockDuration": "PT1M"}},
    {"Name": "sess", "Properties": {"RequiresSession": True, "LockDuration": "PT5S"}},
    {"Name": "sess-rad", "Properties": {"RequiresSession": True, "LockDuration": "PT5S"}},
    {"Name": "sess-close", "Properties": {"RequiresSession": True, "LockDuration": "PT1M"}},
]


@pytest.fixture(scope="module")
def locks_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("hardening-locks")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _receive(receiver: object, count: int) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got.extend(receiver.receive_messages(max_message_count=count - len(got), max_wait_time=5))  # type: ignore[attr-defined]
    assert len(got) == count
    return got


def test_locks_outlive_the_receiving_connection_and_settle_by_token(locks_broker: BrokerProcess) -> None:
    conn = locks_broker.connection_string
    with ServiceBusClient.from_connection_string(conn) as client, client.get_queue_sender("outlive") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
    # The first client receives four and goes away, link and connection, leaving them unsettled.
    with ServiceBusClient.from_connection_string(conn) as first, first.get_queue_receiver("outlive") as receiver:
        held = _receive(receiver, 4)
    assert sorted(str(m) for m in held) == ["m0", "m1", "m2", "m3"]
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_receiver("outlive") as other:
            # A second receiver does not see what the first left locked (the lock is one minute).
            rest = other.receive_messages(max_message_count=5, max_wait_time=3)
            assert [str(m) for m in rest] == ["m4"]
            other.complete_message(rest[0])
            # Renew, complete, abandon, dead-letter and defer by lock token, through $management.
            before = held[0].locked_until_utc
            time.sleep(1)
            assert other.renew_message_lock(held[0]) > before
            other.complete_message(held[0])
            other.abandon_message(held[1])
            other.dead_letter_message(held[2], reason="kept", error_description="settled after its link")
            other.defer_message(held[3])
            [again] = _receive(other, 1)
            assert (str(again), again.delivery_count) == (str(held[1]), 1)
            other.complete_message(again)
            [deferred] = other.receive_deferred_messages([held[3].sequence_number])
            assert str(deferred) == str(held[3])
            other.complete_message(deferred)
            assert other.receive_messages(max_message_count=5, max_wait_time=2) == []
        with client.get_queue_receiver("outlive", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [letter] = _receive(dead, 1)
            assert (str(letter), letter.dead_letter_reason) == (str(held[2]), "kept")
            dead.complete_message(letter)


def test_a_closed_receivers_lock_still_holds_on_the_same_connection(locks_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(locks_broker.connection_string) as client:
        with client.get_queue_sender("outlive-conn") as sender:
            sender.send_messages(ServiceBusMessage("left behind"))
        with client.get_queue_receiver("outlive-conn") as receiver:
            [held] = _receive(receiver, 1)
        with client.get_queue_receiver("outlive-conn") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=3) == []
            receiver.complete_message(held)
        with client.get_queue_receiver("outlive-conn") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == []
