"""Acknowledged messages and increasing sequence numbers survive kill -9 and a restart."""

from __future__ import annotations

import asyncio

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def _receive_all(connection_string: str, queue: str, expect: int) -> list[tuple[int, str]]:
    got: list[tuple[int, str]] = []
    with ServiceBusClient.from_connection_string(connection_string) as client:
        with client.get_queue_receiver(queue, receive_mode=ServiceBusReceiveMode.PEEK_LOCK, prefetch_count=50) as r:
            while True:
                batch = r.receive_messages(max_message_count=100, max_wait_time=3 if len(got) >= expect else 10)
                if not batch:
                    break
                for m in batch:
                    got.append((m.sequence_number, str(m)))
                    r.complete_message(m)
    return got


def test_thousand_messages_survive_kill_9(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    with ServiceBusClient.from_connection_string(fresh_broker.connection_string) as client:
        with client.get_queue_sender("durable") as sender:
            for start in range(0, 1000, 100):
                sender.send_messages([ServiceBusMessage(f"msg-{i}") for i in range(start, start + 100)])
    fresh_broker.kill()  # every send above was acknowledged, so every message must be on disk

    fresh_broker.start()
    got = _receive_all(fresh_broker.connection_string, "durable", 1000)
    bodies = [body for _, body in got]
    assert len(bodies) == 1000, f"received {len(bodies)}"
    assert sorted(bodies) == sorted(f"msg-{i}" for i in range(1000))  # each exactly once
    last = max(seq for seq, _ in got)

    # The queue is empty now; sequence numbers keep increasing across another hard restart.
    fresh_broker.kill()
    fresh_broker.start()
    with ServiceBusClient.from_connection_string(fresh_broker.connection_string) as client:
        with client.get_queue_sender("durable") as sender:
            sender.send_messages(ServiceBusMessage("after"))
    [(seq, body)] = _receive_all(fresh_broker.connection_string, "durable", 1)
    assert body == "after" and seq > last


async def _pipelined_sends(connection_string: str, count: int) -> None:
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender("durable") as sender:
            await asyncio.gather(*(sender.send_messages(ServiceBusMessage(f"p-{i}")) for i in range(count)))


def test_group_committed_sends_survive_kill_9(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    asyncio.run(_pipelined_sends(fresh_broker.connection_string, 300))
    fresh_broker.kill()
    fresh_broker.start()
    bodies = sorted(body for _, body in _receive_all(fresh_broker.connection_string, "durable", 300))
    assert bodies == sorted(f"p-{i}" for i in range(300))
