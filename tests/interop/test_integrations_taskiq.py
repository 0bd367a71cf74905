"""taskiq with taskiq-service-bus's ``ServiceBusBroker`` against ``sodalite serve``: ``taskiq worker`` runs
the tasks a separate producer kicks, at once and delayed (the broker's scheduled messages).

The broker and the worker use the emulator connection string Sodalite prints (plain AMQP on its port);
the producer is another process's view of the same application: a broker object of its own that kicks
tasks by name, as a web service that does not import the worker's code would.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient
from broker_process import BrokerProcess, write_config
from integration_apps.workers import WorkerProcess
from taskiq.kicker import AsyncKicker
from taskiq_service_bus import ServiceBusBroker

pytestmark = pytest.mark.interop

QUEUE = "taskiq-jobs"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("taskiq")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [{"Name": QUEUE, "Properties": {}}]))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("taskiq-runs") / "runs.jsonl"


@pytest.fixture(scope="module")
def worker(broker: BrokerProcess, runs: Path) -> Iterator[WorkerProcess]:
    env = {**os.environ, "SERVICEBUS_CONNECTION_STRING": broker.connection_string, "SHOP_QUEUE": QUEUE,
           "SHOP_RUNS": str(runs)}
    process = WorkerProcess([str(BIN / "taskiq"), "worker", "taskiq_shop:broker", "--workers", "1"], env)
    try:
        process.start("Listening started")
        yield process
    finally:
        process.stop()


def _kick(connection_string: str, task_name: str, *args: Any, **labels: Any) -> str:
    async def kick() -> str:
        producer = ServiceBusBroker(connection_string=connection_string, queue_name=QUEUE)
        await producer.startup()
        try:
            task = await AsyncKicker(task_name=task_name, broker=producer, labels=labels).kiq(*args)
            return task.task_id
        finally:
            await producer.shutdown()

    return asyncio.run(kick())


def _runs_of(runs: Path, task: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        lines = runs.read_text(encoding="utf-8").splitlines() if runs.exists() else []
        found = [run for run in map(json.loads, lines) if run["task"] == task]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _worker_pool_pid(worker: WorkerProcess) -> int:
    line = worker.wait_for(lambda text: "Started process worker-0 with pid" in text, 10, "no worker process")
    return int(line.split("with pid")[1].split()[0])


def _queue_is_empty(connection_string: str, timeout: float = 30.0) -> bool:
    """Whether the queue drains (the worker settles a message after running its task): peek sees every
    message, locked or scheduled ones too."""
    deadline = time.monotonic() + timeout
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(QUEUE) as receiver:
            while receiver.peek_messages(max_message_count=10, sequence_number=1):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)
    return True


def test_worker_runs_a_kicked_task(broker: BrokerProcess, worker: WorkerProcess, runs: Path) -> None:
    _kick(broker.connection_string, "taskiq_shop:add", 2, 3)
    [run] = _runs_of(runs, "add", 1)
    assert run == {"task": "add", "result": 5, "pid": _worker_pool_pid(worker)}
    # The worker completed the message: nothing is left to peek (a scheduled or locked message would show).
    assert _queue_is_empty(broker.connection_string)


def test_delayed_task_is_scheduled_and_runs(broker: BrokerProcess, worker: WorkerProcess, runs: Path) -> None:
    # The "delay" label makes the broker schedule the message (schedule_messages) instead of sending it.
    _kick(broker.connection_string, "shop.greet", "sodalite", delay=2)
    [run] = _runs_of(runs, "greet", 1)
    assert run["result"] == "hello sodalite"
    assert _queue_is_empty(broker.connection_string)
