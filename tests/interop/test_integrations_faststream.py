"""FastStream with faststream-azure-servicebus's ``ServiceBusBroker`` against ``sodalite serve``.

FastStream itself ships no Service Bus broker (its extras are Kafka, Confluent, RabbitMQ, NATS, Redis
and MQTT); the ``faststream-azure-servicebus`` package on PyPI provides one on top of the official SDK.
``faststream run`` serves integration_apps/faststream_shop.py; this module publishes to it with a
FastStream broker of its own and reads what comes back with the official SDK: a handler's published
result, a request's reply, a topic subscription's event, a failing handler's dead-lettered message, and
a batch, scheduled or not, worked through by concurrent handlers.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusSubQueue
from broker_process import BrokerProcess
from faststream_azure_servicebus import ServiceBusBroker
from integration_apps.workers import WorkerProcess

pytestmark = pytest.mark.interop

BIN = Path(sys.executable).parent


def _config(path: Path) -> Path:
    names = ("fs-orders", "fs-shipped", "fs-rpc", "fs-replies", "fs-lines")
    queues: list[dict[str, Any]] = [{"Name": name, "Properties": {}} for name in names]
    queues.append({"Name": "fs-invalid", "Properties": {"MaxDeliveryCount": 3}})
    topics = [{"Name": "fs-events", "Properties": {}, "Subscriptions": [{"Name": "audit", "Properties": {}}]}]
    config = {"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": queues, "Topics": topics}]}}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("faststream")
    process = BrokerProcess(base / "data", _config(base / "Config.json")).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faststream-records") / "records.jsonl"


@pytest.fixture(scope="module")
def app(broker: BrokerProcess, records: Path) -> Iterator[WorkerProcess]:
    env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": broker.connection_string, "SHOP_RECORDS": str(records)}
    process = WorkerProcess([str(BIN / "faststream"), "run", "faststream_shop:app"], env)
    try:
        process.start("started successfully")
        yield process
    finally:
        process.stop()


def _publish(connection_string: str, body: dict[str, Any], **destination: str) -> None:
    async def publish() -> None:
        async with ServiceBusBroker(connection_string) as producer:
            await producer.publish(body, **destination)

    asyncio.run(publish())


def _records_of(records: Path, handler: str, count: int, timeout: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        lines = records.read_text(encoding="utf-8").splitlines() if records.exists() else []
        found = [record["body"] for record in map(json.loads, lines) if record["handler"] == handler]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _receive_one(connection_string: str, queue: str, **receiver: Any) -> Any:
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue, max_wait_time=30, **receiver) as queue_receiver:
            [message] = queue_receiver.receive_messages(max_message_count=1, max_wait_time=30)
            queue_receiver.complete_message(message)
            return message


def test_handler_result_is_published_onwards(broker: BrokerProcess, app: WorkerProcess) -> None:
    _publish(broker.connection_string, {"id": 7}, queue="fs-orders")
    shipped = _receive_one(broker.connection_string, "fs-shipped")
    assert json.loads(str(shipped)) == {"id": 7, "shipped": True, "pid": app.pid}
    assert shipped.content_type == "application/json"


def test_request_gets_its_reply(broker: BrokerProcess, app: WorkerProcess) -> None:
    async def request() -> Any:
        async with ServiceBusBroker(broker.connection_string) as requester:
            await requester.start()
            reply = await requester.request({"value": 21}, queue="fs-rpc", reply_to="fs-replies", timeout=30)
            return reply.correlation_id, await reply.decode()

    correlation_id, answer = asyncio.run(request())
    assert answer == {"answer": 42}
    assert correlation_id


def test_topic_subscription_receives_events(broker: BrokerProcess, app: WorkerProcess, records: Path) -> None:
    _publish(broker.connection_string, {"kind": "created", "order": "7"}, topic="fs-events")
    assert _records_of(records, "audit", 1) == [{"kind": "created", "order": "7"}]


def test_failing_handler_dead_letters_its_message(broker: BrokerProcess, app: WorkerProcess) -> None:
    _publish(broker.connection_string, {"id": 9}, queue="fs-invalid")
    dead = _receive_one(broker.connection_string, "fs-invalid", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    assert json.loads(str(dead)) == {"id": 9}
    # Rejected by the handler's failure on its first delivery, not worn out by redeliveries.
    print("DLQ", dead.delivery_count, dead.dead_letter_reason, dead.dead_letter_error_description)
    assert dead.delivery_count is not None and dead.delivery_count <= 1


def test_batches_and_scheduled_messages_reach_concurrent_handlers(broker: BrokerProcess, app: WorkerProcess,
                                                                  records: Path) -> None:
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)

    async def publish() -> None:
        async with ServiceBusBroker(broker.connection_string) as producer:
            await producer.publish_batch(*({"line": n} for n in range(10)), queue="fs-lines")
            await producer.publish_batch(*({"line": n} for n in range(10, 13)), queue="fs-lines",
                                         scheduled_enqueue_time=later)

    asyncio.run(publish())
    picked = _records_of(records, "pick", 13)
    assert sorted(body["line"] for body in picked) == list(range(13))
    assert _queue_drains(broker.connection_string, "fs-lines")


def _queue_drains(connection_string: str, queue: str, timeout: float = 30.0) -> bool:
    """Whether the queue ends up empty (handlers settle after they ran); peek sees locked and scheduled
    messages too."""
    deadline = time.monotonic() + timeout
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            while receiver.peek_messages(max_message_count=20, sequence_number=1):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)
    return True
