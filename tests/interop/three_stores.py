"""A broker on the partition core over three SQLite messaging stores (the data directory's, ``disk1``
and ``disk2``, as in test_partitioning), started as users start it (``scripts/serve``), and
the SDK calls of the modules that use one (test_forwarding_across_stores, test_partitioned_topics,
test_partitioned_dead_letter_forwarding, test_partitioned_moves).

``serve`` is the body of a module fixture (``yield from serve(base, QUEUES, TOPICS)``: started, yielded,
stopped); ``start`` starts one for a test that stops it itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

Entities = list[dict[str, Any]]


def start(base: Path, queues: Entities, topics: Entities) -> BrokerProcess:
    stores = [{"Name": "disk1", "Path": "stores/disk1.db"}, {"Name": "disk2", "Path": "stores/disk2.db"}]
    config = write_config(base / "Config.json", queues, Topics=topics, MessagingStores=stores)
    return BrokerProcess(base / "data", config, extra_args=["--log-level", "INFO"]).start()


def serve(base: Path, queues: Entities, topics: Entities) -> Iterator[BrokerProcess]:
    process = start(base, queues, topics)
    yield process
    process.stop()


def admin(broker: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(broker.admin_connection_string,
                                                                 connection_verify=broker.admin_certificate)


def send_each(broker: BrokerProcess, topic: str, messages: list[ServiceBusMessage]) -> None:
    """Send ``messages`` to ``topic`` one send at a time."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_topic_sender(topic) as sender:
        for message in messages:
            sender.send_messages(message)


def drain(broker: BrokerProcess, entity: str, want: int, subscription: str | None = None) -> list[Any]:
    """Receive and complete from a queue, or from ``subscription`` of a topic, until ``want`` messages
    came (within 30 s), then look 2 s more for any too many."""
    got: list[Any] = []
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        receiver = (client.get_queue_receiver(entity, max_wait_time=5) if subscription is None
                    else client.get_subscription_receiver(entity, subscription, max_wait_time=5))
        with receiver:
            deadline = time.monotonic() + 30
            while len(got) < want and time.monotonic() < deadline:
                batch = receiver.receive_messages(max_message_count=50, max_wait_time=5)
                for message in batch:
                    receiver.complete_message(message)
                got += batch
            for message in receiver.receive_messages(max_message_count=10, max_wait_time=2):
                receiver.complete_message(message)
                got.append(message)
    return got
