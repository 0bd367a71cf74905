"""Locks, renewal, scheduling, deferral and dead-lettering through the SDK's asyncio client."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageState, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessageLockLostError, MessageNotFoundError
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "aio-lock", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "aio-renew", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "aio-sched", "Properties": {}},
    {"Name": "aio-defer", "Properties": {}},
    {"Name": "aio-dlq", "Properties": {"MaxDeliveryCount": 5}},
]


@pytest.fixture(scope="module")
def aio_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this module's own, so no other test touches these queues."""
    base = tmp_path_factory.mktemp("aio-semantics")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def _send(client: ServiceBusClient, queue: str, *bodies: str) -> None:
    async with client.get_queue_sender(queue) as sender:
        await sender.send_messages([ServiceBusMessage(body) for body in bodies])


async def _lock_expiry(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        await _send(client, "aio-lock", "slow consumer")
        async with client.get_queue_receiver("aio-lock") as receiver:
            [first] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert first.delivery_count == 0
            assert first.locked_until_utc is not None
            assert 3 <= (first.locked_until_utc - _now()).total_seconds() <= 6  # LockDuration PT5S
            await asyncio.sleep(5.5)
            [again] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert again.sequence_number == first.sequence_number
            assert again.delivery_count == 1
            assert str(again) == "slow consumer"
            with pytest.raises(MessageLockLostError):
                await receiver.complete_message(first)  # the SDK refuses: its copy says the lock ended
            # Make the SDK believe the stale lock is still valid, so that the broker itself has to refuse it.
            first._expiry = _now() + datetime.timedelta(minutes=1)
            with pytest.raises(MessageLockLostError):
                await receiver.complete_message(first)
            with pytest.raises(MessageLockLostError):
                await receiver.renew_message_lock(first)
            await receiver.complete_message(again)  # the stale attempts neither settled nor unlocked it


async def _renew(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        await _send(client, "aio-renew", "long job")
        async with client.get_queue_receiver("aio-renew") as receiver:
            [m] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            original = m.locked_until_utc
            assert original is not None
            await asyncio.sleep(2)
            renewed = await receiver.renew_message_lock(m)
            assert renewed == m.locked_until_utc
            assert renewed - original >= datetime.timedelta(seconds=2)
            assert 4 <= (renewed - _now()).total_seconds() <= 6
            # Past the original lock's end: without the renewal the message would be free again by now.
            await asyncio.sleep(max(0.0, (original - _now()).total_seconds() + 0.5))
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
            assert _now() < renewed
            await receiver.complete_message(m)  # still locked by this receiver: the renewal reached the broker
            assert await receiver.peek_messages(max_message_count=5, sequence_number=1) == []


async def _lock_expiry_and_renewal(connection_string: str) -> None:
    await asyncio.gather(_lock_expiry(connection_string), _renew(connection_string))


def test_aio_lock_expiry_and_renew_message_lock(aio_broker: BrokerProcess) -> None:
    # Each side waits out a five-second lock; on separate queues they share the wait.
    asyncio.run(_lock_expiry_and_renewal(aio_broker.connection_string))


async def _schedule(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender("aio-sched") as sender:
            due = _now() + datetime.timedelta(seconds=3)
            keep, cancel, also_cancel = await sender.schedule_messages(
                [ServiceBusMessage("kept"), ServiceBusMessage("cancelled"), ServiceBusMessage("cancelled too")], due)
            assert keep < cancel < also_cancel
            await sender.cancel_scheduled_messages([cancel, also_cancel])
        async with client.get_queue_receiver("aio-sched") as receiver:
            peeked = await receiver.peek_messages(max_message_count=10, sequence_number=1)
            assert [(m.sequence_number, str(m), m.state) for m in peeked] == [
                (keep, "kept", ServiceBusMessageState.SCHEDULED)]
            assert peeked[0].scheduled_enqueue_time_utc is not None
            assert abs((peeked[0].scheduled_enqueue_time_utc - due).total_seconds()) < 1
            assert await receiver.receive_messages(max_message_count=5, max_wait_time=1) == []  # not yet
            assert _now() < due, "too slow to check that the scheduled message is held back"
            await asyncio.sleep(max(0.0, (due - _now()).total_seconds() - 0.5))
            got = await receiver.receive_messages(max_message_count=5, max_wait_time=10)
            assert [(m.sequence_number, str(m)) for m in got] == [(keep, "kept")]
            assert _now() >= due - datetime.timedelta(milliseconds=500)
            await receiver.complete_message(got[0])
            assert await receiver.receive_messages(max_message_count=5, max_wait_time=1) == []  # cancelled stay gone


def test_aio_schedule_cancel_and_scheduled_delivery(aio_broker: BrokerProcess) -> None:
    asyncio.run(_schedule(aio_broker.connection_string))


async def _defer(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        await _send(client, "aio-defer", "later", "now")
        async with client.get_queue_receiver("aio-defer") as receiver:
            [first] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(first) == "later"
            await receiver.defer_message(first)
            [second] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(second) == "now"
            await receiver.complete_message(second)
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []  # deferred is hidden
            seq = first.sequence_number
            assert seq is not None
            [peeked] = await receiver.peek_messages(max_message_count=5, sequence_number=seq)
            assert peeked.state == ServiceBusMessageState.DEFERRED

            # Abandoning a message received by sequence number leaves it deferred, with its count raised.
            [deferred] = await receiver.receive_deferred_messages([seq])
            assert str(deferred) == "later" and deferred.lock_token is not None
            await receiver.abandon_message(deferred)
            [peeked] = await receiver.peek_messages(max_message_count=5, sequence_number=seq)
            assert peeked.state == ServiceBusMessageState.DEFERRED and peeked.delivery_count == 1
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []

            [deferred] = await receiver.receive_deferred_messages([seq])
            assert str(deferred) == "later" and deferred.sequence_number == seq and deferred.delivery_count == 1
            await receiver.complete_message(deferred)
            with pytest.raises(MessageNotFoundError):
                await receiver.receive_deferred_messages([seq], timeout=2)  # the SDK retries until then
            assert await receiver.peek_messages(max_message_count=5, sequence_number=seq) == []


def test_aio_defer_receive_deferred_and_complete(aio_broker: BrokerProcess) -> None:
    asyncio.run(_defer(aio_broker.connection_string))


async def _dead_letter(connection_string: str) -> None:
    async with ServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender("aio-dlq") as sender:
            await sender.send_messages(ServiceBusMessage("poison", application_properties={"k": "v"}))
        async with client.get_queue_receiver("aio-dlq") as receiver:
            [m] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.dead_letter_message(m, reason="bad-format", error_description="field x missing")
            assert await receiver.receive_messages(max_message_count=1, max_wait_time=1) == []
        async with client.get_queue_receiver("aio-dlq", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            [peeked] = await dlq.peek_messages(max_message_count=5)
            assert peeked.sequence_number == m.sequence_number and peeked.dead_letter_reason == "bad-format"
            [d] = await dlq.receive_messages(max_message_count=5, max_wait_time=10)
            assert str(d) == "poison" and d.sequence_number == m.sequence_number
            assert d.dead_letter_reason == "bad-format"
            assert d.dead_letter_error_description == "field x missing"
            assert d.application_properties is not None and d.application_properties[b"k"] == b"v"
            await dlq.complete_message(d)
            assert await dlq.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_aio_dead_letter_with_reason_and_receive_from_the_dead_letter_queue(aio_broker: BrokerProcess) -> None:
    asyncio.run(_dead_letter(aio_broker.connection_string))
