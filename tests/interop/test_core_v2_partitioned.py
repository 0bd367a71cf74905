"""The partitioning scenarios once more, against a broker whose partitioned queues and topics run on
the version-2 core.

The broker is started as users start it, with ``--core v2`` and the three SQLite messaging stores of
``test_partitioning``: each partition of a partitioned queue is a ``CoreActor`` (partition i in store
i mod 3) behind ``PartitionedCoreActor`` (``server/partitioned_actor.py``), numbered by the store
from ``i << 48``; a partitioned topic is a ``TopicActor`` per partition behind
``PartitionedTopicActor`` (``server/topic_actor.py``), its subscriptions partitioned queues on the
core, the copies of topic partition i stored in partition i of each subscription (same store).
The scenarios are the existing interop tests, imported unchanged, so their assertions are the ones
the version-1 path passes; the module-scoped ``broker`` fixture here serves the tests that take
one, and the tests that start brokers of their own (store outages, kill -9, quotas, a store offline
at start) get ``--core v2`` through the autouse fixture below, which hands ``test_partitioning`` a
``BrokerProcess`` that adds it.

Every entity of that configuration is on the core, the partitioned topic
(``test_a_partitioned_topic_fans_out_and_counts_add_up``) and the forwarding queues
(``test_forwarding_keeps_the_partition_key``: ``pq-fwd`` forwards, ``pq-fwd-dst`` is forwarded into)
included: until the partitioned topics came to the core, those stayed on version 1 (a deliberate
change of ``Broker._kept_on_v1``'s rule, ``model/placement.py``). Every partitioning scenario of
``test_partitioning`` is here; partitioned topics' own scenarios (keys, duplicate detection,
schedules, forwarding, outages) are in ``test_core_v2_partitioned_topics.py``.

The Spark reader's per-partition ``$management`` operations (bounds, peek and complete-through in
one partition) run too: ``test_spark_broker_extension``'s partitioned scenario, with its own broker
fixture (``ext_broker``) on the core.

Two tests of this module's own: the broker's log names the queues it put on the core (so the
scenarios ran where this module says), and a partitioned queue written by a version-1 broker is
served by the core from the same files (no migration of sequence numbers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_partitioning
import test_spark_broker_extension
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from test_partitioning import (  # noqa: F401 - the scenarios, collected here with this module's fixtures
    _config,
    drain,
    partition,
    test_a_partitioned_topic_fans_out_and_counts_add_up,
    test_a_store_configured_offline_starts_out_of_service,
    test_a_store_outage_keeps_keyless_sends_going_and_loses_nothing,
    test_forwarding_keeps_the_partition_key,
    test_keyless_sends_spread_over_partitions_and_come_back_exactly_once,
    test_one_partition_key_pins_messages_to_one_partition,
    test_partitioned_messages_in_every_store_survive_a_kill,
    test_peek_continues_partition_by_partition_and_deferral_works,
    test_quotas_on_partitioned_entities,
    test_scheduled_messages_on_a_partitioned_queue,
    test_session_and_partition_key_must_agree,
    test_sessions_on_a_partitioned_queue_keep_their_order,
)
from test_spark_broker_extension import (  # noqa: F401 - the Spark reader's per-partition operations
    test_partitioned_entity_bounds_peek_and_complete_per_partition,
)

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


class CoreV2BrokerProcess(BrokerProcess):
    """A broker process served with ``--core v2`` (what the scenarios' own brokers become here)."""

    def __init__(self, data_dir: Path, config: Path | None, port: int = 0, extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, config, port, [*(extra_args or []), *V2])


@pytest.fixture(autouse=True)
def _brokers_on_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_partitioning, "BrokerProcess", CoreV2BrokerProcess)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-partitioning")
    process = CoreV2BrokerProcess(base / "data", _config(base), extra_args=["--log-level", "INFO"]).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def ext_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """test_spark_broker_extension's broker, on the core."""
    base = tmp_path_factory.mktemp("core-v2-spark-ext")
    config = write_config(base / "Config.json", test_spark_broker_extension.QUEUES,
                          AuthorizationRules=test_spark_broker_extension.RULES)
    process = CoreV2BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def test_partitioned_queues_and_topics_run_on_the_core(broker: BrokerProcess) -> None:
    """The broker names the entities it runs on the core: every partitioned queue, the forwarding
    ones included, the partitioned topic and its subscriptions, each with its 16 partitions, and
    none on the version-1 path (so the scenarios above ran where they say)."""
    output = "".join(broker.output)
    on_core = dict(re.findall(r"(\S+) runs on the version-2 core \((\d+) partitions\)", output))
    names = ("pq", "pq-keys", "pq-sessions", "pq-defer", "pq-fwd", "pq-fwd-dst", "pq-outage", "pt",
             "pt/subscriptions/all", "pt/subscriptions/red")
    assert {name: on_core.get(name) for name in names} == dict.fromkeys(names, "16")
    assert re.search(r"on the version-1 path \([^)]*\): none", output)


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
