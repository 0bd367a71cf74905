"""Drill (issue 13.11): the delivery count survives kill -9 of the broker.

Every delivery of one message ends with the broker killed (SIGKILL) while the message is locked; the
official SDK receives it each time. The count the SDK sees goes 0, 1, 2, and after MaxDeliveryCount
(3) such deliveries the message is dead-lettered, not redelivered forever with count 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [{"Name": "crashy", "Properties": {"MaxDeliveryCount": 3, "LockDuration": "PT1M"}}]


@pytest.fixture(scope="module")
def crash_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("hardening-crash")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES))
    yield process
    process.stop()


def test_a_message_whose_every_delivery_ends_in_a_crash_is_dead_lettered(crash_broker: BrokerProcess) -> None:
    crash_broker.start()
    with ServiceBusClient.from_connection_string(crash_broker.connection_string) as client, \
            client.get_queue_sender("crashy") as sender:
        sender.send_messages(ServiceBusMessage("poison", message_id="poison-1"))
    seen = []
    for _ in range(3):
        with ServiceBusClient.from_connection_string(crash_broker.connection_string, retry_total=0) as client, \
                client.get_queue_receiver("crashy") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            seen.append((str(message), message.delivery_count))
            crash_broker.kill()  # while the message is locked and being processed
        crash_broker.start()
    assert seen == [("poison", 0), ("poison", 1), ("poison", 2)]
    with ServiceBusClient.from_connection_string(crash_broker.connection_string) as client:
        with client.get_queue_receiver("crashy") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=3) == []
        with client.get_queue_receiver("crashy", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [letter] = dead.receive_messages(max_message_count=1, max_wait_time=10)
            assert (letter.message_id, letter.dead_letter_reason) == ("poison-1", "MaxDeliveryCountExceeded")
            assert letter.delivery_count == 3
            dead.complete_message(letter)
