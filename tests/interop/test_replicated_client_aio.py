"""The asyncio twins (sodalite.client.aio) against two real brokers: same rules as the sync client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError
from broker_process import BrokerProcess, write_config
from replication_ports import with_stable_ports

from sodalite.client.aio import DuplicateFilter, Outbox, ReplicatedClient, ReplicationMode

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

QUEUES = [{"Name": name, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 50}}
          for name in ("a-sales", "a-passive", "a-drill", "a-outbox", "a-req-1", "a-req-2", "a-replies")]
TOPICS = [{"Name": "a-news", "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]}]
SDK_RETRIES = {"retry_total": 1, "retry_backoff_factor": 0.1, "retry_backoff_max": 0.5}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    brokers = []
    for name in ("primary", "secondary"):
        base: Path = tmp_path_factory.mktemp(f"aio-replication-{name}")
        brokers.append(with_stable_ports(
            BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS))))
    try:
        for broker in brokers:
            broker.start()
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            broker.stop()


async def _up(broker: BrokerProcess) -> None:
    if broker.proc is None or broker.proc.poll() is not None:
        await asyncio.to_thread(broker.start)


def _peek_all(broker: BrokerProcess, queue: str, sub_queue: ServiceBusSubQueue | None = None) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue, sub_queue=sub_queue) as receiver:
            return [str(m.message_id) for m in receiver.peek_messages(max_message_count=5000)]


def _client(pair: tuple[BrokerProcess, BrokerProcess], mode: ReplicationMode) -> ReplicatedClient:
    return ReplicatedClient(pair[0].connection_string, pair[1].connection_string, mode=mode, **SDK_RETRIES)


async def _drain(receiver: object, idle: float = 3.0) -> list[str]:
    got: list[str] = []
    while batch := await receiver.receive_messages(max_message_count=50, max_wait_time=idle):  # type: ignore[attr-defined]
        for message in batch:
            got.append(str(message.message_id))
            await receiver.complete_message(message)  # type: ignore[attr-defined]
    return got


def test_aio_active_two_copies_one_delivery_and_topics(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    async def run() -> tuple[list[str], list[str]]:
        async with _client(pair, ReplicationMode.ACTIVE) as client:
            async with client.get_queue_sender("a-sales") as sender:
                await sender.send_messages([ServiceBusMessage(f"{i}") for i in range(10)])
            assert _peek_all(pair[0], "a-sales") == _peek_all(pair[1], "a-sales")
            async with client.get_topic_sender("a-news") as topic:
                await topic.send_messages(ServiceBusMessage("news", message_id="a-news-1"))
            async with client.get_queue_receiver("a-sales") as receiver:
                queue = await _drain(receiver)
            async with client.get_subscription_receiver("a-news", "all") as subscription:
                news = await _drain(subscription)
            return queue, news

    queue, news = asyncio.run(run())
    assert len(queue) == 10 and len(set(queue)) == 10
    assert news == ["a-news-1"]
    for broker in pair:
        assert _peek_all(broker, "a-sales") == []
        assert _peek_all(broker, "a-sales", ServiceBusSubQueue.DEAD_LETTER) == []


def test_aio_passive_switches_roles_and_keeps_them_when_both_fail(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = pair

    async def run() -> None:
        async with _client(pair, ReplicationMode.PASSIVE) as client, client.get_queue_sender("a-passive") as sender:
            await sender.send_messages(ServiceBusMessage("1", message_id="ap-1"))
            primary.kill()
            try:
                await sender.send_messages(ServiceBusMessage("2", message_id="ap-2"))
                assert sender.active_namespace == 1
                secondary.kill()
                with pytest.raises(ServiceBusError):
                    await sender.send_messages(ServiceBusMessage("3", message_id="ap-3"))
                assert sender.active_namespace == 1
            finally:
                await _up(primary)
                await _up(secondary)
        async with _client(pair, ReplicationMode.PASSIVE) as client, client.get_queue_receiver("a-passive") as receiver:
            assert sorted(await _drain(receiver)) == ["ap-1", "ap-2"]

    asyncio.run(run())
    assert (_peek_all(primary, "a-passive"), _peek_all(secondary, "a-passive")) == ([], [])


def test_aio_drill_one_broker_killed_twice_while_messages_flow(pair: tuple[BrokerProcess, BrokerProcess],
                                                               tmp_path: Path) -> None:
    total = 400
    ids = [f"a-drill-{i}-{uuid.uuid4()}" for i in range(total)]

    async def run() -> list[str]:
        delivered: list[str] = []
        sent = 0

        async def send_all() -> None:
            nonlocal sent
            async with _client(pair, ReplicationMode.ACTIVE) as client, client.get_queue_sender("a-drill") as sender:
                for message_id in ids:
                    for _attempt in range(600):
                        try:
                            await sender.send_messages(ServiceBusMessage(message_id, message_id=message_id),
                                                       timeout=20)
                            break
                        except ServiceBusError:
                            await asyncio.sleep(0.2)
                    else:
                        raise AssertionError("no namespace took the message")
                    sent += 1

        async def chaos() -> None:
            for round_, threshold in enumerate((total // 3, 2 * total // 3)):
                while sent < threshold:
                    await asyncio.sleep(0.05)
                victim = pair[round_ % 2]
                victim.kill()
                await asyncio.sleep(1.0)
                await _up(victim)

        tasks = [asyncio.create_task(send_all()), asyncio.create_task(chaos())]
        async with _client(pair, ReplicationMode.ACTIVE) as client, \
                client.get_queue_receiver("a-drill", duplicate_filter=DuplicateFilter(path=tmp_path / "seen")) as rx:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 200
            while loop.time() < deadline and not (all(t.done() for t in tasks) and len(set(delivered)) >= total):
                for message in await rx.receive_messages(max_message_count=50, max_wait_time=1):
                    delivered.append(str(message.message_id))
                    await rx.complete_message(message)
            for task in tasks:
                await task  # re-raises a failure of the sender or the chaos task
            for broker in pair:
                await _up(broker)
            await asyncio.sleep(6)  # locks from before the last kill expire
            delivered += await _drain(rx)
        return delivered

    try:
        delivered = asyncio.run(run())
    finally:
        for broker in pair:
            if broker.proc is None or broker.proc.poll() is not None:
                broker.start()
    assert len(delivered) == len(set(delivered)), "a MessageId was delivered twice"
    assert set(delivered) == set(ids)


def test_aio_outbox_accepts_while_both_are_down_and_forwards_through_the_replicated_client(
        pair: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    async def run() -> None:
        for broker in pair:
            broker.kill()
        try:
            async with _client(pair, ReplicationMode.PASSIVE) as client, \
                    Outbox(tmp_path / "outbox.sqlite", client, retry_interval=timedelta(milliseconds=200)) as outbox:
                async with outbox.get_queue_sender("a-outbox") as sender:
                    for i in range(20):
                        await sender.send_messages(ServiceBusMessage(f"{i}", message_id=f"ao-{i}"))
                assert await outbox.forward() == 0
                assert await outbox.pending_count() == 20
                outbox.start()
                for broker in pair:
                    await _up(broker)
                for _ in range(300):
                    if await outbox.pending_count() == 0:
                        break
                    await asyncio.sleep(0.1)
                assert await outbox.pending_count() == 0
        finally:
            for broker in pair:
                await _up(broker)

    asyncio.run(run())
    assert _peek_all(pair[0], "a-outbox") == [f"ao-{i}" for i in range(20)]  # passive: primary only, in order
    assert _peek_all(pair[1], "a-outbox") == []


def test_aio_request_reply_pair(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    async def run() -> None:
        stop = asyncio.Event()

        async def serve() -> None:
            async with _client(pair, ReplicationMode.PASSIVE) as service, \
                    service.get_request_receiver("a-req-1", secondary_queue_name="a-req-2") as requests:
                while not stop.is_set():
                    for request in await requests.receive_messages(max_message_count=5, max_wait_time=1):
                        await requests.reply(request, ServiceBusMessage(f"re: {request}"))
                        await requests.complete_message(request)

        server = asyncio.create_task(serve())
        try:
            async with _client(pair, ReplicationMode.PASSIVE) as client, \
                    client.get_request_sender("a-req-1", secondary_queue_name="a-req-2",
                                              reply_queue_name="a-replies") as requester:
                assert str(await requester.request(ServiceBusMessage("ping?"), timeout=60)) == "re: ping?"
                was_active = requester.active
                pair[was_active].kill()
                try:
                    assert str(await requester.request(ServiceBusMessage("again"), timeout=60)) == "re: again"
                    assert requester.active == 1 - was_active
                finally:
                    await _up(pair[was_active])
        finally:
            stop.set()
            await asyncio.wait_for(server, 60)

    asyncio.run(run())
