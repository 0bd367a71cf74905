"""A taskiq application on taskiq-service-bus's broker, pointed at Sodalite by its connection string.

Every run of a task appends a JSON line (its arguments' result and the worker's pid) to ``SHOP_RUNS``:
taskiq-service-bus has no result backend, so that file is how the test sees the worker's work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from taskiq_service_bus import ServiceBusBroker

broker = ServiceBusBroker(connection_string=os.environ["SERVICEBUS_CONNECTION_STRING"],
                          queue_name=os.environ.get("SHOP_QUEUE", "taskiq"))


def _record(**run: object) -> None:
    with Path(os.environ["SHOP_RUNS"]).open("a", encoding="utf-8") as runs:
        runs.write(json.dumps({**run, "pid": os.getpid()}) + "\n")


@broker.task
async def add(x: int, y: int) -> int:
    _record(task="add", result=x + y)
    return x + y


@broker.task(task_name="shop.greet")
async def greet(name: str) -> str:
    _record(task="greet", result=f"hello {name}")
    return f"hello {name}"
