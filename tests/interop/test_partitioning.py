"""Partitioned queues and topics over several messaging stores, and store outages, with the official SDK.

The broker runs with three SQLite stores (the data directory's and two more); a partitioned entity's
16 partitions are spread over them (partition i in store i mod 3). A message's partition is the
upper 16 bits of its sequence number.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError, ServiceBusServerBusyError
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop

STORES = ["default", "disk1", "disk2"]
PARTITIONS = 16
QUEUES = [
    {"Name": "pq", "Properties": {"EnablePartitioning": True}},
    {"Name": "pq-keys", "Properties": {"EnablePartitioning": True}},
    {"Name": "pq-sessions", "Properties": {"EnablePartitioning": True, "RequiresSession": True}},
    {"Name": "pq-defer", "Properties": {"EnablePartitioning": True, "LockDuration": "PT30S"}},
    {"Name": "pq-fwd", "Properties": {"EnablePartitioning": True, "ForwardTo": "pq-fwd-dst"}},
    {"Name": "pq-fwd-dst", "Properties": {"EnablePartitioning": True}},
    {"Name": "pq-outage", "Properties": {"EnablePartitioning": True}},
]
TOPICS = [{"Name": "pt", "Properties": {"EnablePartitioning": True},
           "Subscriptions": [{"Name": "all", "Properties": {}},
                             {"Name": "red", "Properties": {}, "Rules": [
                                 {"Name": "red", "Properties": {"FilterType": "Sql",
                                                                "SqlFilter": {"SqlExpression": "colour = 'red'"}}}]}]}]


def _config(base: Path, queues: list[dict[str, Any]] = QUEUES, disk2_offline: bool = False,
            **namespace: Any) -> Path:
    stores = [{"Name": "disk1", "Path": "stores/disk1.db"},
              {"Name": "disk2", "Path": "stores/disk2.db", "Offline": disk2_offline}]
    return write_config(base / "Config.json", queues, Topics=TOPICS, MessagingStores=stores, **namespace)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("partitioning")
    process = BrokerProcess(base / "data", _config(base)).start()
    yield process
    process.stop()


def partition(sequence_number: int) -> int:
    return sequence_number >> 48


def store_of_partition(index: int) -> str:
    return STORES[index % len(STORES)]


def key_in_store(store: str, avoid: str | None = None) -> str:
    """A partition key whose partition lives in ``store``."""
    for i in range(1000):
        key = f"key-{i}"
        if store_of_partition(partition_index(key, PARTITIONS)) == store:
            return key
    raise AssertionError("no key found")


def drain(client: ServiceBusClient, queue: str, expected: int, **kwargs: Any) -> list[Any]:
    got: list[Any] = []
    with client.get_queue_receiver(queue, max_wait_time=5, **kwargs) as receiver:
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=50, max_wait_time=5)
            for message in batch:
                receiver.complete_message(message)
            got += batch
        got += receiver.receive_messages(max_message_count=10, max_wait_time=1)  # nothing more may come
    return got


def test_keyless_sends_spread_over_partitions_and_come_back_exactly_once(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq") as sender:
            for i in range(64):
                sender.send_messages(ServiceBusMessage(f"m{i}"))
        got = drain(client, "pq", 64)
    assert sorted(str(m) for m in got) == sorted(f"m{i}" for i in range(64))
    assert len({partition(m.sequence_number) for m in got}) >= 8
    assert len({m.sequence_number for m in got}) == 64


def test_one_partition_key_pins_messages_to_one_partition(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-keys") as sender:
            for i in range(10):
                sender.send_messages(ServiceBusMessage(f"k{i}", partition_key="customer-7"))
            sender.send_messages(ServiceBusMessage("other", partition_key="customer-8"))
        got = drain(client, "pq-keys", 11)
    pinned = [m for m in got if m.partition_key == "customer-7"]
    assert [str(m) for m in pinned] == [f"k{i}" for i in range(10)]  # one partition keeps their order
    assert {partition(m.sequence_number) for m in pinned} == {partition_index("customer-7", PARTITIONS)}
    [other] = [m for m in got if m.partition_key == "customer-8"]
    assert partition(other.sequence_number) == partition_index("customer-8", PARTITIONS)


def test_sessions_on_a_partitioned_queue_keep_their_order(broker: BrokerProcess) -> None:
    sessions = [f"s{i}" for i in range(4)]
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-sessions") as sender:
            for n in range(8):
                for session in sessions:
                    sender.send_messages(ServiceBusMessage(f"{session}-{n}", session_id=session))
        seen: dict[str, list[str]] = {}
        for _ in sessions:
            with client.get_queue_receiver("pq-sessions", session_id=NEXT_AVAILABLE_SESSION,
                                           max_wait_time=5) as receiver:
                session_id = receiver.session.session_id
                got = receiver.receive_messages(max_message_count=20, max_wait_time=5)
                for message in got:
                    receiver.complete_message(message)
                seen[session_id] = [str(m) for m in got]
        with client.get_queue_receiver("pq-sessions", session_id="s2") as named:  # a named one finds its partition
            assert named.receive_messages(max_message_count=1, max_wait_time=1) == []
    assert seen == {s: [f"{s}-{n}" for n in range(8)] for s in sessions}


def test_peek_continues_partition_by_partition_and_deferral_works(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-defer") as sender:
            for i in range(20):
                sender.send_messages(ServiceBusMessage(f"d{i}"))
        with client.get_queue_receiver("pq-defer", max_wait_time=5) as receiver:
            peeked = []
            start = 0
            while True:
                page = receiver.peek_messages(max_message_count=7, sequence_number=start)
                if not page:
                    break
                peeked += page
                start = page[-1].sequence_number + 1
            assert sorted(str(m) for m in peeked) == sorted(f"d{i}" for i in range(20))
            numbers = [m.sequence_number for m in peeked]
            assert numbers == sorted(numbers)  # partition by partition, in order within each

            [taken] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.defer_message(taken)
            [again] = receiver.receive_deferred_messages([taken.sequence_number])
            assert str(again) == str(taken)
            receiver.complete_message(again)
        rest = drain(client, "pq-defer", 19)
    assert len(rest) == 19 and str(taken) not in {str(m) for m in rest}


def test_a_partitioned_topic_fans_out_and_counts_add_up(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("pt") as sender:
            for i in range(20):
                sender.send_messages(ServiceBusMessage(f"t{i}", application_properties={
                    "colour": "red" if i % 2 else "blue"}))
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    assert admin.get_subscription_runtime_properties("pt", "all").active_message_count == 20
    assert admin.get_subscription_runtime_properties("pt", "red").active_message_count == 10
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_subscription_receiver("pt", "red", max_wait_time=5) as receiver:
            got = []
            while batch := receiver.receive_messages(max_message_count=20, max_wait_time=3):
                for message in batch:
                    receiver.complete_message(message)
                got += batch
    assert sorted(str(m) for m in got) == sorted(f"t{i}" for i in range(1, 20, 2))
    assert len({partition(m.sequence_number) for m in got}) > 1


def test_forwarding_keeps_the_partition_key(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-fwd") as sender:
            sender.send_messages(ServiceBusMessage("fwd", partition_key="route-me"))
        [message] = drain(client, "pq-fwd-dst", 1)
    assert message.partition_key == "route-me"
    assert partition(message.sequence_number) == partition_index("route-me", PARTITIONS)


def test_session_and_partition_key_must_agree(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-sessions") as sender:
            message = ServiceBusMessage("mismatch", session_id="a")
            message.raw_amqp_message.annotations[b"x-opt-partition-key"] = "b"  # the SDK refuses to set it
            with pytest.raises(ServiceBusError, match="differs"):
                sender.send_messages(message)


def test_a_store_outage_keeps_keyless_sends_going_and_loses_nothing(tmp_path: Path) -> None:
    plain = next(f"plain-{i}" for i in range(100) if STORES[partition_index(f"plain-{i}", len(STORES))] == "disk1")
    queues = [*QUEUES, {"Name": plain, "Properties": {}}]
    process = BrokerProcess(tmp_path / "data", _config(tmp_path, queues)).start()
    admin = ServiceBusAdministrationClient.from_connection_string(
        process.admin_connection_string, connection_verify=process.admin_certificate)
    try:
        sent: list[str] = []
        failures: list[BaseException] = []
        stop = threading.Event()
        outage_started = threading.Event()

        def send_loop() -> None:
            with ServiceBusClient.from_connection_string(process.connection_string) as client, \
                    client.get_queue_sender("pq-outage") as sender:
                i = 0
                while not stop.is_set() and i < 400:
                    body = f"o{i}"
                    try:
                        sender.send_messages(ServiceBusMessage(body))
                        sent.append(body)
                    except BaseException as exc:
                        failures.append(exc)
                    i += 1
                    if i == 20:
                        outage_started.wait(30)

        loop = threading.Thread(target=send_loop)
        loop.start()
        _switch(process, "disk1", "offline")
        outage_started.set()
        time.sleep(1.0)  # let the loop send through the outage
        with ServiceBusClient.from_connection_string(process.connection_string, retry_total=0) as client:
            with client.get_queue_sender("pq-outage") as sender:
                with pytest.raises(ServiceBusServerBusyError):
                    sender.send_messages(ServiceBusMessage("pinned", partition_key=key_in_store("disk1")))
                sender.send_messages(ServiceBusMessage("pinned-ok", partition_key=key_in_store("disk2")))
            with client.get_queue_sender(plain) as sender, pytest.raises(ServiceBusServerBusyError):
                sender.send_messages(ServiceBusMessage("to a queue in the offline store"))
        assert admin.get_queue("pq-outage").availability_status == "Limited"
        runtime = admin.get_queue_runtime_properties("pq-outage")
        assert runtime.active_message_count <= len(sent) + 1  # the partitions that answer
        stop.set()
        loop.join(60)
        assert not failures, failures[:3]
        _switch(process, "disk1", "online")
        deadline = time.monotonic() + 30  # the partitions rebuild themselves from the store
        while admin.get_queue("pq-outage").availability_status != "Available" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert admin.get_queue("pq-outage").availability_status == "Available"
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            got = drain(client, "pq-outage", len(sent) + 1)
        assert sorted(str(m) for m in got) == sorted([*sent, "pinned-ok"])
    finally:
        process.stop()


def test_partitioned_messages_in_every_store_survive_a_kill(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", _config(tmp_path)).start()
    try:
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            with client.get_queue_sender("pq") as sender:
                for i in range(30):
                    sender.send_messages(ServiceBusMessage(f"k{i}"))
        process.kill()
        process.start()
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            got = drain(client, "pq", 30)
        assert sorted(str(m) for m in got) == sorted(f"k{i}" for i in range(30))
        assert {store_of_partition(partition(m.sequence_number)) for m in got} == set(STORES)
    finally:
        process.stop()


def test_quotas_on_partitioned_entities(tmp_path: Path) -> None:
    config = _config(tmp_path, [{"Name": "big", "Properties": {"EnablePartitioning": True}},
                                {"Name": "small", "Properties": {}}],
                     MaxPartitionedEntityCount=2, Sku="Premium", MaxMessageSizeInKilobytes=4096)
    process = BrokerProcess(tmp_path / "data", config).start()
    try:
        admin = ServiceBusAdministrationClient.from_connection_string(
            process.admin_connection_string, connection_verify=process.admin_certificate)
        with pytest.raises(Exception, match="MaxPartitionedEntityCount"):
            admin.create_queue("third", enable_partitioning=True)
        admin.create_queue("unpartitioned-is-fine")
        payload = b"x" * (1536 * 1024)
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            with client.get_queue_sender("small") as sender:
                sender.send_messages(ServiceBusMessage(payload))  # 4 MB namespace limit
            with client.get_queue_sender("big") as sender, pytest.raises(ServiceBusError):
                sender.send_messages(ServiceBusMessage(payload))  # 1 MB for partitioned, Premium-like
    finally:
        process.stop()


def _switch(process: BrokerProcess, store: str, state: str) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SODALITE_CONNECTION_STRING": process.connection_string}
    result = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "store", state, store, "--json",
                             "--admin-port", str(process.admin_port), "--ca-file", process.admin_certificate],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    states = {row["name"]: row["state"] for row in json.loads(result.stdout)}
    assert states[store] == state


def test_scheduled_messages_on_a_partitioned_queue(broker: BrokerProcess) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pq-keys") as sender:
            numbers = [sender.schedule_messages(ServiceBusMessage(f"s{i}", partition_key=f"p{i}"), soon)[0]
                       for i in range(4)]
            sender.cancel_scheduled_messages(numbers[0])
        assert {partition(n) for n in numbers} == {partition_index(f"p{i}", PARTITIONS) for i in range(4)}
        got = drain(client, "pq-keys", 3)
    assert sorted(str(m) for m in got) == ["s1", "s2", "s3"]


def test_a_store_configured_offline_starts_out_of_service(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", _config(tmp_path, disk2_offline=True)).start()
    try:
        with ServiceBusClient.from_connection_string(process.connection_string, retry_total=0) as client:
            with client.get_queue_sender("pq") as sender:
                for i in range(12):
                    sender.send_messages(ServiceBusMessage(f"c{i}"))
                with pytest.raises(ServiceBusServerBusyError):
                    sender.send_messages(ServiceBusMessage("pinned", partition_key=key_in_store("disk2")))
        _switch(process, "disk2", "online")
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            with client.get_queue_sender("pq") as sender:
                deadline = time.monotonic() + 30
                while True:  # the partitions load once their store is back
                    try:
                        sender.send_messages(ServiceBusMessage("pinned", partition_key=key_in_store("disk2")))
                        break
                    except ServiceBusServerBusyError:
                        assert time.monotonic() < deadline
                        time.sleep(0.2)
            got = drain(client, "pq", 13)
        assert sorted(str(m) for m in got) == sorted([*(f"c{i}" for i in range(12)), "pinned"])
        assert "disk2" not in {store_of_partition(partition(m.sequence_number)) for m in got if str(m) != "pinned"}
    finally:
        process.stop()
