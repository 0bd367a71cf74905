"""Partitioned entities over several PostgreSQL databases, and a database lost at runtime.

Three messaging stores, each a PostgreSQL database: the default one (``serve --store``) and two
``MessagingStores`` entries with a ``Url`` (``disk1``, ``disk2``: the names the partitioning tests
expect). The partitioning scenarios are the existing interop tests, imported unchanged and run with
this module's ``broker``, whose start-up log names the partitioned queues it serves. The outage test
stops a real PostgreSQL server under a running broker.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusServerBusyError
from broker_process import BrokerProcess, write_config
from test_partitioning import (  # noqa: F401 - the scenarios, collected here with this module's broker
    QUEUES,
    TOPICS,
    drain,
    key_in_store,
    test_keyless_sends_spread_over_partitions_and_come_back_exactly_once,
    test_one_partition_key_pins_messages_to_one_partition,
    test_peek_continues_partition_by_partition_and_deferral_works,
    test_scheduled_messages_on_a_partitioned_queue,
    test_sessions_on_a_partitioned_queue_keep_their_order,
)

from pg_server import PgServer, find_bin_dir, shared_server

pytestmark = pytest.mark.interop


def _server() -> PgServer:
    try:
        return shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _config(base: Path, disk1_url: str, disk2_url: str) -> Path:
    stores = [{"Name": "disk1", "Url": disk1_url}, {"Name": "disk2", "Url": disk2_url}]
    return write_config(base / "Config.json", QUEUES, Topics=TOPICS, MessagingStores=stores)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    server = _server()
    base = tmp_path_factory.mktemp("pg-partitioning")
    config = _config(base, server.create_database("disk1"), server.create_database("disk2"))
    process = BrokerProcess(base / "data", config,
                            extra_args=["--store", server.create_database("default"), "--log-level", "INFO"]).start()
    yield process
    process.stop()


def test_the_partitioned_queues_run_on_the_core(broker: BrokerProcess) -> None:
    on_core = set(re.findall(r"serving (\S+) \(16 partitions\)", "".join(broker.output)))
    assert {"pq", "pq-keys", "pq-sessions", "pq-defer", "pq-outage"} <= on_core


def test_a_database_lost_at_runtime_keeps_keyless_sends_going_and_loses_nothing(tmp_path: Path) -> None:
    """disk1's database is on a PostgreSQL server of this test's own, stopped under the running broker:
    a send pinned to one of its partitions is refused as server-busy, keyless sends go on through the
    other databases, and once the server is back every acknowledged message is received exactly once."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed")
    own = PgServer(bin_dir).start()
    shared = _server()
    process = BrokerProcess(tmp_path / "data", _config(tmp_path, own.create_database("disk1"),
                                                       shared.create_database("disk2")),
                            extra_args=["--store", shared.create_database("default")])
    try:
        process.start()
        sent: list[str] = []
        failures: list[BaseException] = []
        outage = threading.Event()

        def send_loop() -> None:
            with ServiceBusClient.from_connection_string(process.connection_string) as client, \
                    client.get_queue_sender("pq-outage") as sender:
                for i in range(120):
                    body = f"o{i}"
                    try:
                        sender.send_messages(ServiceBusMessage(body))
                        sent.append(body)
                    except BaseException as exc:
                        failures.append(exc)
                    if i == 20:
                        outage.wait(30)

        loop = threading.Thread(target=send_loop)
        loop.start()
        while len(sent) < 21 and loop.is_alive() and not failures:
            time.sleep(0.05)
        own.halt()  # the database goes away under the broker
        outage.set()
        with ServiceBusClient.from_connection_string(process.connection_string, retry_total=0) as client, \
                client.get_queue_sender("pq-outage") as sender:
            with pytest.raises(ServiceBusServerBusyError):
                sender.send_messages(ServiceBusMessage("pinned", partition_key=key_in_store("disk1")))
            sender.send_messages(ServiceBusMessage("pinned-ok", partition_key=key_in_store("disk2")))
        loop.join(120)
        assert not loop.is_alive()
        assert not failures, failures[:3]
        own.resume()  # the partitions reload themselves from it once it answers
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            got = drain(client, "pq-outage", len(sent) + 1)
        assert sorted(str(m) for m in got) == sorted([*sent, "pinned-ok"])
    finally:
        process.stop()
        own.stop()
