"""The asyncio paired-namespace client against two real brokers: the same failover, ping, syphon and
close/fault coordination as the sync one, at a smaller scale."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.aio import ServiceBusClient as AioServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

from sodalite.client import backlog as bl
from sodalite.client.aio import PairedNamespaceClient, PairedNamespaceOptions
from sodalite.client.aio.paired import Syphon, ensure_backlog_queues
from sodalite.client.paired_core import SyphonCounters
from sodalite.client.paired_messages import to_backlog_message
from sodalite.errors import BacklogQueueSetupFailed, FailoverExhausted, PairedClientClosed

pytestmark = pytest.mark.interop

COUNT = 200
SEND_ONLY = {"KeyName": "sender", "PrimaryKey": "s3nd", "Rights": ["Send", "Listen"]}
ROOT = {"KeyName": "RootManageSharedAccessKey", "PrimaryKey": "SAS_KEY_VALUE"}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("paired-aio")
    primary = BrokerProcess(base / "primary", write_config(base / "p.json", [
        {"Name": "aorders", "Properties": {"RequiresSession": True}}])).start()
    secondary = BrokerProcess(base / "secondary", write_config(base / "s.json", [],
                                                               AuthorizationRules=[ROOT, SEND_ONLY])).start()
    yield primary, secondary
    primary.stop()
    secondary.stop()


def _options(secondary: BrokerProcess, **overrides: object) -> PairedNamespaceOptions:
    values: dict[str, object] = {
        "secondary_connection_string": secondary.connection_string, "backlog_queue_count": 2,
        "failover_interval": timedelta(seconds=1), "ping_primary_interval": timedelta(seconds=1),
        "enable_syphon": True, "primary_namespace": "aiocontoso", "syphon_receive_wait": timedelta(seconds=1)}
    values.update(overrides)
    return PairedNamespaceOptions(**values)  # type: ignore[arg-type]


def _kwargs(secondary: BrokerProcess) -> dict[str, object]:
    return {"connection_verify": str(secondary.data_dir / "admin-cert.pem"), "retry_total": 1,
            "retry_backoff_factor": 0.2}


def _backlog_total(secondary: BrokerProcess) -> int:
    with ServiceBusAdministrationClient.from_connection_string(
            secondary.connection_string, connection_verify=str(secondary.data_dir / "admin-cert.pem")) as admin:
        return sum(admin.get_queue_runtime_properties(n).active_message_count
                   for n in bl.backlog_queue_names("aiocontoso", 2))


def test_aio_failover_syphon_and_recovery(brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = brokers

    async def drill() -> int:
        backlog_seen = 0
        # no syphon while the primary is down, so the backlog can be counted; then one that drains it
        async with PairedNamespaceClient(primary.connection_string, _options(secondary, enable_syphon=False),
                                         **_kwargs(secondary)) as client:
            async with client.get_queue_sender("aorders") as sender:
                for i in range(COUNT):
                    if i == 50:
                        primary.kill()
                    if i == 150:
                        backlog_seen = await asyncio.to_thread(_backlog_total, secondary)
                        await asyncio.to_thread(primary.start)
                        await asyncio.sleep(2.5)
                    await sender.send_messages(ServiceBusMessage(
                        f"b{i}", message_id=f"a{i}", session_id="s", time_to_live=timedelta(hours=1),
                        application_properties={"i": i}))
            assert client.book.failed_over_entities() == []
        async with PairedNamespaceClient(primary.connection_string, _options(secondary),
                                         **_kwargs(secondary)):
            deadline = time.monotonic() + 90
            while await asyncio.to_thread(_backlog_total, secondary) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
        return backlog_seen

    backlog_seen = asyncio.run(asyncio.wait_for(drill(), 240))
    assert backlog_seen >= 100
    assert _backlog_total(secondary) == 0
    ids: set[str] = set()
    started = datetime.now(UTC)
    with ServiceBusClient.from_connection_string(primary.connection_string) as client:
        with client.get_queue_receiver("aorders", session_id="s", max_wait_time=3) as receiver:
            while len(ids) < COUNT and datetime.now(UTC) - started < timedelta(seconds=60):
                batch = receiver.receive_messages(max_message_count=100, max_wait_time=3)
                if not batch:
                    break
                for m in batch:
                    assert m.session_id == "s"
                    assert m.content_type != bl.PING_CONTENT_TYPE
                    receiver.complete_message(m)
                    ids.add(str(m.message_id))
    assert ids == {f"a{i}" for i in range(COUNT)}


def test_aio_bad_key_and_coordination(brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = brokers

    async def run() -> None:
        send_only = secondary.connection_string_with(key="s3nd", key_name="sender")
        with pytest.raises(BacklogQueueSetupFailed):
            async with PairedNamespaceClient(primary.connection_string,
                                             _options(secondary, secondary_connection_string=send_only,
                                                      primary_namespace="aionomanage"),
                                             **_kwargs(secondary)):
                pass
        client = PairedNamespaceClient(primary.connection_string, _options(secondary), **_kwargs(secondary))
        async with client:
            await client.primary.close()
            deadline = time.monotonic() + 30
            while not client.secondary.closed and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert client.secondary.closed
            with pytest.raises(PairedClientClosed, match="primary namespace client closed"):
                client.get_queue_sender("aorders")

    asyncio.run(asyncio.wait_for(run(), 120))


def test_aio_a_batch_from_create_message_batch_fails_over(brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    _, secondary = brokers
    dead_primary = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"

    async def run() -> None:
        options = _options(secondary, primary_namespace="aiobatch", failover_interval=timedelta(0),
                           enable_syphon=False, backlog_queue_count=1)
        async with PairedNamespaceClient(dead_primary, options, **_kwargs(secondary)) as client:
            async with client.get_queue_sender("orders") as sender:
                batch = await sender.create_message_batch()  # a coroutine, as the SDK's
                assert isinstance(batch, ServiceBusMessageBatch)
                for i in range(2):
                    batch.add_message(ServiceBusMessage(f"b{i}", message_id=f"aio-batch-{i}"))
                await sender.send_messages(batch)
                foreign = ServiceBusMessageBatch()
                foreign.add_message(ServiceBusMessage("made elsewhere"))
                with pytest.raises(FailoverExhausted, match="create_message_batch"):
                    await sender.send_messages(foreign)

    asyncio.run(asyncio.wait_for(run(), 120))
    with ServiceBusClient.from_connection_string(secondary.connection_string) as client:
        with client.get_queue_receiver(bl.backlog_queue_name("aiobatch", 0)) as receiver:
            peeked = receiver.peek_messages(max_message_count=10)
    assert [str(m.message_id) for m in peeked] == ["aio-batch-0", "aio-batch-1"]


def test_aio_syphon_reports_its_progress(brokers: tuple[BrokerProcess, BrokerProcess]) -> None:
    """``on_progress`` (once only on the sync Syphon): called after each batch moved, with the counters."""
    primary, secondary = brokers
    names = bl.backlog_queue_names("aioprogress", 1)
    seen: list[tuple[str, int]] = []

    async def drain() -> None:
        await ensure_backlog_queues(secondary.connection_string, names,
                                    connection_verify=str(secondary.data_dir / "admin-cert.pem"))
        stop = asyncio.Event()

        def progress(queue: str, counters: SyphonCounters) -> None:
            seen.append((queue, counters.moved))
            stop.set()

        async with AioServiceBusClient.from_connection_string(secondary.connection_string) as second, \
                AioServiceBusClient.from_connection_string(primary.connection_string) as first:
            async with second.get_queue_sender(names[0]) as sender:
                await sender.send_messages(to_backlog_message(
                    ServiceBusMessage("p", message_id="progress-1", session_id="progress"), "aorders"))
            syphon = Syphon(first, second, names[0], timedelta(seconds=1), timedelta(seconds=1), stop,
                            on_progress=progress)
            await syphon.run()

    asyncio.run(asyncio.wait_for(drain(), 60))
    assert seen == [(names[0], 1)]
    with ServiceBusClient.from_connection_string(primary.connection_string) as client:
        with client.get_queue_receiver("aorders", session_id="progress", max_wait_time=5) as receiver:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert [str(m.message_id) for m in received] == ["progress-1"]
            receiver.complete_message(received[0])
