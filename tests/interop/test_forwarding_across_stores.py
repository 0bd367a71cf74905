"""Forwarding groups across messaging stores, and mixing partitioned and non-partitioned entities,
on the partition core, through the official SDK (issue 14).

The broker is started as users start it (``scripts/serve``) with the three SQLite
messaging stores of ``test_partitioning`` (the data directory's, ``disk1``, ``disk2``): a
non-partitioned entity lives in the store its name hashes to (a subscription in its topic's),
partition i of a partitioned one in store i mod 3. Entity names below are picked so that each lands
where the scenario needs it. A topic on the core stores a send's copies for its own store in one
transaction of that store and those for other stores by one batch of each of them, first; the send
is acknowledged after all of them (``server/topic_actor.py``). The start-up line shows every entity
on the core (none kept on the version-1 path, as these groups were before).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusServerBusyError
from broker_process import BrokerProcess
from test_partitioning import PARTITIONS, STORES, _switch, partition, store_of_partition
from three_stores import admin as _admin
from three_stores import drain as _drain
from three_stores import send_each as _send
from three_stores import serve, start

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop


def named(prefix: str, store: str) -> str:
    """A name whose entity lives in ``store`` (the broker hashes the lower-cased path)."""
    return next(f"{prefix}-{i}" for i in range(1000)
                if STORES[partition_index(f"{prefix}-{i}", len(STORES))] == store)


# (a) no partitioned member, members in different stores.
TOPIC = named("g-topic", "default")  # its subscriptions live with it, in "default"
FAR = named("g-far", "disk1")  # a subscription of TOPIC forwards into it
FAR_TOPIC = named("g-ftopic", "disk2")  # another subscription forwards into this topic's subscriptions
DEDUP = named("g-dedup", "disk2")  # a topic with duplicate detection forwarding into FAR_DEDUP
FAR_DEDUP = named("g-fdedup", "default")
SRC, DST = named("g-src", "disk1"), named("g-dst", "disk2")  # queue -> queue across stores
# (b) mixed partitioned and non-partitioned members.
PLAIN_TOPIC = named("m-topic", "disk1")  # non-partitioned, forwarding into the partitioned PQ
PQ = "m-pq"
PTOPIC = "m-ptopic"  # partitioned, forwarding into SINGLE, which lives in one store
SINGLE = named("m-single", "disk2")
PTOPIC_TO_PLAIN = "m-ptopic2"  # partitioned, forwarding into the non-partitioned FAR_TOPIC
PLAIN_TO_PTOPIC, PTOPIC_FED = named("m-topic2", "disk2"), "m-ptopic3"  # non-partitioned into a partitioned topic
RED = [{"Name": "red", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "colour = 'red'"}}}]

QUEUES = [{"Name": FAR, "Properties": {}}, {"Name": FAR_DEDUP, "Properties": {}},
          {"Name": SRC, "Properties": {"ForwardTo": DST}}, {"Name": DST, "Properties": {}},
          {"Name": PQ, "Properties": {"EnablePartitioning": True}}, {"Name": SINGLE, "Properties": {}}]
TOPICS = [
    {"Name": TOPIC, "Properties": {}, "Subscriptions": [
        {"Name": "near", "Properties": {}},
        {"Name": "fwd", "Properties": {"ForwardTo": FAR}},
        {"Name": "red", "Properties": {"ForwardTo": FAR_TOPIC}, "Rules": RED}]},
    {"Name": FAR_TOPIC, "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]},
    {"Name": DEDUP, "Properties": {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"},
     "Subscriptions": [{"Name": "near", "Properties": {}}, {"Name": "fwd", "Properties": {"ForwardTo": FAR_DEDUP}}]},
    {"Name": PLAIN_TOPIC, "Properties": {}, "Subscriptions": [{"Name": "fwd", "Properties": {"ForwardTo": PQ}}]},
    {"Name": PTOPIC, "Properties": {"EnablePartitioning": True}, "Subscriptions": [
        {"Name": "all", "Properties": {}}, {"Name": "fwd", "Properties": {"ForwardTo": SINGLE}}]},
    {"Name": PTOPIC_TO_PLAIN, "Properties": {"EnablePartitioning": True}, "Subscriptions": [
        {"Name": "fwd", "Properties": {"ForwardTo": FAR_TOPIC}}]},
    {"Name": PLAIN_TO_PTOPIC, "Properties": {},
     "Subscriptions": [{"Name": "fwd", "Properties": {"ForwardTo": PTOPIC_FED}}]},
    {"Name": PTOPIC_FED, "Properties": {"EnablePartitioning": True}, "Subscriptions": [
        {"Name": "a", "Properties": {}}, {"Name": "b", "Properties": {}}]},
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(tmp_path_factory.mktemp("core-v2-groups"), QUEUES, TOPICS)


def _bodies(messages: list[Any]) -> list[str]:
    return sorted(str(m) for m in messages)


def test_the_entities_live_where_the_scenarios_need_them_and_all_run_on_the_core(broker: BrokerProcess) -> None:
    assert len({TOPIC, FAR, FAR_TOPIC}) == 3 and STORES[partition_index(FAR.lower(), 3)] == "disk1"
    output = "".join(broker.output)
    on_core = set(re.findall(r"serving (\S+) \(", output))
    names = [*(q["Name"] for q in QUEUES), *(t["Name"] for t in TOPICS),
             *(f"{t['Name']}/subscriptions/{s['Name']}" for t in TOPICS for s in t["Subscriptions"])]
    assert set(names) <= on_core, set(names) - on_core


def test_a_topics_copies_reach_queues_and_subscriptions_in_other_stores(broker: BrokerProcess) -> None:
    colours = ["red", "blue", "red", "green"]
    _send(broker, TOPIC, [ServiceBusMessage(f"c{i}", application_properties={"colour": c})
                          for i, c in enumerate(colours)])
    everything = [f"c{i}" for i in range(len(colours))]
    assert _bodies(_drain(broker, TOPIC, 4, "near")) == everything
    assert _bodies(_drain(broker, FAR, 4)) == everything  # in disk1
    assert _bodies(_drain(broker, FAR_TOPIC, 2, "all")) == ["c0", "c2"]  # via another topic, in disk2


def test_a_scheduled_message_on_the_topic_reaches_the_other_stores_when_due(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_topic_sender(TOPIC) as sender:
        due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
        sender.schedule_messages(ServiceBusMessage("later", application_properties={"colour": "red"}), due)
    assert _bodies(_drain(broker, FAR, 1)) == ["later"]
    assert _bodies(_drain(broker, FAR_TOPIC, 1, "all")) == ["later"]
    assert _bodies(_drain(broker, TOPIC, 1, "near")) == ["later"]


def test_duplicate_detection_spares_the_other_stores_copies_of_a_resend(broker: BrokerProcess) -> None:
    _send(broker, DEDUP, [ServiceBusMessage("first", message_id="id-1"), ServiceBusMessage("again", message_id="id-1"),
                          ServiceBusMessage("second", message_id="id-2")])
    assert _bodies(_drain(broker, FAR_DEDUP, 2)) == ["first", "second"]
    assert _bodies(_drain(broker, DEDUP, 2, "near")) == ["first", "second"]


def test_a_queues_forward_to_into_another_store(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender(SRC) as sender:
        sender.send_messages([ServiceBusMessage(f"q{i}") for i in range(5)])
    assert _bodies(_drain(broker, DST, 5)) == [f"q{i}" for i in range(5)]
    assert _drain(broker, SRC, 0) == []


def test_a_non_partitioned_topic_forwards_into_the_partition_each_key_picks(broker: BrokerProcess) -> None:
    keys = [f"key-{i}" for i in range(12)]
    _send(broker, PLAIN_TOPIC, [ServiceBusMessage(f"p-{key}", partition_key=key) for key in keys])
    _send(broker, PLAIN_TOPIC, [ServiceBusMessage(f"keyless-{i}") for i in range(6)])
    got = _drain(broker, PQ, len(keys) + 6)
    assert _bodies(got) == sorted([*(f"p-{key}" for key in keys), *(f"keyless-{i}" for i in range(6))])
    keyed = [m for m in got if m.partition_key is not None]
    assert all(partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS) for m in keyed)
    assert {store_of_partition(partition(m.sequence_number)) for m in keyed} == set(STORES)


def test_a_partitioned_topic_forwards_into_a_queue_in_one_store(broker: BrokerProcess) -> None:
    keys = [f"s{i}" for i in range(12)]
    _send(broker, PTOPIC, [ServiceBusMessage(f"m-{key}", session_id=key) for key in keys])
    got = _drain(broker, PTOPIC, len(keys), "all")
    assert {store_of_partition(partition(m.sequence_number)) for m in got} == set(STORES)  # every store sent
    assert _bodies(_drain(broker, SINGLE, len(keys))) == sorted(f"m-{key}" for key in keys)
    _send(broker, PTOPIC_TO_PLAIN, [ServiceBusMessage(f"t-{key}", partition_key=key) for key in keys])
    assert _bodies(_drain(broker, FAR_TOPIC, len(keys), "all")) == sorted(f"t-{key}" for key in keys)


def test_a_non_partitioned_topic_forwards_into_a_partitioned_topics_key_partition(broker: BrokerProcess) -> None:
    """Every subscription of the partitioned topic gets a copy in the one partition the key picks
    (keyless: one partition for all of them, round-robin)."""
    keys = [f"f{i}" for i in range(9)]
    _send(broker, PLAIN_TO_PTOPIC, [ServiceBusMessage(f"x-{key}", partition_key=key) for key in keys])
    _send(broker, PLAIN_TO_PTOPIC, [ServiceBusMessage("keyless")])
    a, b = _drain(broker, PTOPIC_FED, len(keys) + 1, "a"), _drain(broker, PTOPIC_FED, len(keys) + 1, "b")
    assert _bodies(a) == _bodies(b) == sorted([*(f"x-{key}" for key in keys), "keyless"])
    for copies in (a, b):
        assert all(partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)
                   for m in copies if m.partition_key is not None)
    [keyless_a] = [m for m in a if m.partition_key is None]
    [keyless_b] = [m for m in b if m.partition_key is None]
    assert partition(keyless_a.sequence_number) == partition(keyless_b.sequence_number)


def test_a_subscription_created_at_runtime_forwards_into_another_store(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_subscription(TOPIC, "later", forward_to=DST)  # DST lives in disk2, TOPIC in default
    try:
        _send(broker, TOPIC, [ServiceBusMessage("runtime", application_properties={"colour": "blue"})])
        assert _bodies(_drain(broker, DST, 1)) == ["runtime"]
        assert _bodies(_drain(broker, FAR, 1)) == ["runtime"]
        assert _bodies(_drain(broker, TOPIC, 1, "near")) == ["runtime"]
    finally:
        admin.delete_subscription(TOPIC, "later")


def test_an_outage_of_the_target_store_fails_sends_and_loses_nothing(tmp_path: Path) -> None:
    """disk1 (FAR's store, PQ's partitions 1, 4, ...) offline: a send to TOPIC, whose copies go to FAR,
    fails with the retryable server-busy a store outage gives, and stores no copy anywhere; sends
    acknowledged before and after, and a kill -9, lose nothing."""
    process = start(tmp_path, QUEUES, TOPICS)
    try:
        _send(process, TOPIC, [ServiceBusMessage(f"before{i}", application_properties={"colour": "red"})
                               for i in range(3)])
        _switch(process, "disk1", "offline")
        with ServiceBusClient.from_connection_string(process.connection_string, retry_total=0) as client:
            with client.get_topic_sender(TOPIC) as sender, pytest.raises(ServiceBusServerBusyError):
                sender.send_messages(ServiceBusMessage("refused", application_properties={"colour": "red"}))
            key = next(f"k{i}" for i in range(1000) if store_of_partition(partition_index(f"k{i}", PARTITIONS))
                       == "disk1")
            with client.get_topic_sender(PLAIN_TOPIC) as sender, pytest.raises(ServiceBusServerBusyError):
                sender.send_messages(ServiceBusMessage("pinned", partition_key=key))
            with client.get_topic_sender(PTOPIC) as sender:  # SINGLE lives in disk2: partitions elsewhere go on
                sender.send_messages(ServiceBusMessage("ok", partition_key=next(
                    f"k{i}" for i in range(1000)
                    if store_of_partition(partition_index(f"k{i}", PARTITIONS)) == "default")))
        _switch(process, "disk1", "online")
        _send(process, TOPIC, [ServiceBusMessage(f"after{i}", application_properties={"colour": "red"})
                               for i in range(3)])
        process.kill()
        process.start()
        expected = sorted([*(f"before{i}" for i in range(3)), *(f"after{i}" for i in range(3))])
        assert _bodies(_drain(process, TOPIC, 6, "near")) == expected
        assert _bodies(_drain(process, FAR, 6)) == expected
        assert _bodies(_drain(process, FAR_TOPIC, 6, "all")) == expected
        assert _bodies(_drain(process, PQ, 0)) == []
        assert _bodies(_drain(process, SINGLE, 1)) == ["ok"]
    finally:
        process.stop()
