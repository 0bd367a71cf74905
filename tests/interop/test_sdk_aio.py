"""The official azure-servicebus SDK's asyncio client against a broker started by scripts/serve."""

from __future__ import annotations

import asyncio

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from broker_process import BrokerProcess

from sodalite.client.failover import is_entity_not_found

pytestmark = pytest.mark.interop


async def _round_trip(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender("aio") as sender:
            await sender.send_messages(ServiceBusMessage("single", application_properties={"n": 0}))
            batch = await sender.create_message_batch()
            for i in range(100):
                batch.add_message(ServiceBusMessage(f"m{i}", application_properties={"n": i + 1}))
            await sender.send_messages(batch)
            # Pipelined sends from one sender share commits but each is acknowledged.
            await asyncio.gather(*(sender.send_messages(ServiceBusMessage(f"p{i}")) for i in range(20)))
        received = []
        async with client.get_queue_receiver("aio") as receiver:
            while len(received) < 121:
                got = await receiver.receive_messages(max_message_count=50, max_wait_time=10)
                assert got, f"only {len(received)} of 121 arrived"
                received.extend(got)
            first = received[0]
            await receiver.abandon_message(first)
            await asyncio.gather(*(receiver.complete_message(m) for m in received[1:]))
            [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert again.sequence_number == first.sequence_number and again.delivery_count == 1
            await receiver.complete_message(again)
        bodies = [str(m) for m in received]
        assert bodies[:101] == ["single"] + [f"m{i}" for i in range(100)]
        assert sorted(bodies[101:]) == sorted(f"p{i}" for i in range(20))
        assert [m.application_properties[b"n"] for m in received[:101]] == list(range(101))
        async with client.get_queue_receiver(
            "aio", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            assert await receiver.receive_messages(max_message_count=10, max_wait_time=1) == []


def test_aio_send_batch_receive_settle(broker: BrokerProcess) -> None:
    asyncio.run(_round_trip(broker.connection_string))


async def _unknown(connection_string: str) -> None:
    """As Service Bus: the put-token for a missing entity is answered 404 (ServiceBusAuthenticationError)."""
    async with ServiceBusClient.from_connection_string(connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError) as refused:
            async with client.get_queue_sender("missing-queue") as sender:
                await sender.send_messages(ServiceBusMessage("x"))
        assert is_entity_not_found(refused.value)


def test_aio_unknown_queue(broker: BrokerProcess) -> None:
    asyncio.run(_unknown(broker.connection_string))
