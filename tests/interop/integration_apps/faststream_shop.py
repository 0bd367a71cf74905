"""A FastStream application on faststream-azure-servicebus's ``ServiceBusBroker``, run by ``faststream run``.

- ``fs-orders`` → ``ship`` → its return value is published to ``fs-shipped``;
- ``fs-rpc`` → ``double`` answers requests on their ``reply_to`` queue;
- the ``audit`` subscription of the ``fs-events`` topic → ``audit`` records each event;
- ``fs-invalid`` → ``validate`` fails, so FastStream's default policy rejects (dead-letters) the message;
- ``fs-lines`` → ``pick``, two handlers at a time with a prefetch of four, records each line.

Handlers record what they saw as JSON lines in ``SHOP_RECORDS``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from faststream import FastStream
from faststream_azure_servicebus import ServiceBusBroker

broker = ServiceBusBroker(os.environ["SERVICEBUS_CONNECTION_STRING"])
app = FastStream(broker)


@broker.subscriber(queue="fs-orders")
@broker.publisher(queue="fs-shipped")
async def ship(order: dict[str, int]) -> dict[str, int | bool]:
    return {"id": order["id"], "shipped": True, "pid": os.getpid()}


@broker.subscriber(queue="fs-rpc")
async def double(body: dict[str, int]) -> dict[str, int]:
    return {"answer": body["value"] * 2}


def _record(handler: str, body: object) -> None:
    with Path(os.environ["SHOP_RECORDS"]).open("a", encoding="utf-8") as records:
        records.write(json.dumps({"handler": handler, "body": body}) + "\n")


@broker.subscriber(topic="fs-events", subscription="audit")
async def audit(event: dict[str, str]) -> None:
    _record("audit", event)


@broker.subscriber(queue="fs-lines", max_workers=2, prefetch_count=4)
async def pick(line: dict[str, int]) -> None:
    _record("pick", line)


@broker.subscriber(queue="fs-invalid")
async def validate(order: dict[str, int]) -> None:
    raise ValueError(f"order {order['id']} has no lines")
