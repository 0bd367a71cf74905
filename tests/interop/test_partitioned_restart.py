"""Partitioned queues and topics on the partition core: the start-up log, and a restart on the same files.

The partitioning scenarios themselves run in ``test_partitioning.py`` (the core is the default and
only one; this module used to run them once more, when there were two cores) and
the Spark reader's per-partition operations in ``test_spark_broker_extension.py``. Two tests of this
module's own remain, against a broker with the three SQLite messaging stores of
``test_partitioning``: the broker's log names the queues and topic it put on the core, each with its
16 partitions, and a partitioned queue written by an earlier broker is served from the same files
(no migration of sequence numbers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess
from test_partitioning import _config, drain, partition

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


class CoreV2BrokerProcess(BrokerProcess):
    """A broker process served with ``scripts/serve`` (the default, named as a user may name it)."""

    def __init__(self, data_dir: Path, config: Path | None, port: int = 0, extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, config, port, [*(extra_args or []), *V2])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-partitioning")
    process = CoreV2BrokerProcess(base / "data", _config(base), extra_args=["--log-level", "INFO"]).start()
    yield process
    process.stop()


def test_partitioned_queues_and_topics_run_on_the_core(broker: BrokerProcess) -> None:
    """The broker names the entities it runs on the core: every partitioned queue, the forwarding
    ones included, the partitioned topic and its subscriptions, each with its 16 partitions, and
    none on the version-1 path (the configuration of ``test_partitioning``'s scenarios)."""
    output = "".join(broker.output)
    on_core = dict(re.findall(r"serving (\S+) \((\d+) partitions\)", output))
    names = ("pq", "pq-keys", "pq-sessions", "pq-defer", "pq-fwd", "pq-fwd-dst", "pq-outage", "pt",
             "pt/subscriptions/all", "pt/subscriptions/red")
    assert {name: on_core.get(name) for name in names} == dict.fromkeys(names, "16")


def test_a_partitioned_queue_written_by_version_1_is_served_by_the_core(tmp_path: Path) -> None:
    """No migration: the store numbers partition i after max(its counter, i << 48), and version 1
    numbered from there too, so a queue written by a version-1 broker is served by the core as it
    is: every stored message once, with its number, new numbers above the old ones of their
    partition, and partitions version 1 never wrote numbered from their base."""
    v1 = BrokerProcess(tmp_path / "data", _config(tmp_path)).start()  # the default core: version 1
    try:
        with ServiceBusClient.from_connection_string(v1.connection_string) as client:
            with client.get_queue_sender("pq") as sender:
                for i in range(10):  # partitions 0-9 written by version 1, 10-15 never
                    sender.send_messages(ServiceBusMessage(f"v1-{i}"))
            with client.get_queue_receiver("pq", max_wait_time=5) as receiver:
                taken = receiver.receive_messages(max_message_count=4, max_wait_time=5)
                for message in taken:
                    receiver.complete_message(message)  # some numbers gone: the counters say where they ended
                old = {str(m): m.sequence_number for m in receiver.peek_messages(max_message_count=100)}
    finally:
        v1.stop()
    assert taken and len(old) == 10 - len(taken)
    v2 = CoreV2BrokerProcess(tmp_path / "data", _config(tmp_path)).start()
    try:
        with ServiceBusClient.from_connection_string(v2.connection_string) as client:
            with client.get_queue_sender("pq") as sender:
                for i in range(48):
                    sender.send_messages(ServiceBusMessage(f"v2-{i}"))
            got = {str(m): m.sequence_number for m in drain(client, "pq", len(old) + 48)}
    finally:
        v2.stop()
    assert {body: n for body, n in got.items() if body.startswith("v1-")} == old  # each once, its number kept
    new = {body: n for body, n in got.items() if body.startswith("v2-")}
    assert len(new) == 48 and len(set(new.values())) == 48
    highest_old: dict[int, int] = {}
    for n in old.values():
        highest_old[partition(n)] = max(highest_old.get(partition(n), 0), n)
    assert all(n > highest_old.get(partition(n), partition(n) << 48) for n in new.values())
    assert {partition(n) for n in new.values()} == set(range(16))  # fresh partitions numbered from i << 48 too
