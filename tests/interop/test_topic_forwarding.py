"""Topics, subscriptions and auto-forwarding on the partition core, through the official SDK.

The broker is started as users start it (``scripts/serve``). A topic on the core stores a send's
copies for all its subscriptions in one transaction of the topic's store
(``server/topic_actor.py``), following a subscription's ForwardTo into queues and other topics on
the core; each subscription is a queue on the core. The scenarios of ``test_topics.py`` run there
(the core is the default and only one). What remains here is this module's own: forwarding into a
partitioned queue, a receiver already waiting, duplicate detection and kill -9 on a topic.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.exceptions import ServiceBusError
from broker_process import BrokerProcess, write_config
from test_topics import QUEUES, TOPICS, _drain

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-topics")
    broker = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS),
                           extra_args=[*V2, "--log-level", "INFO"]).start()
    yield broker
    broker.stop()


def test_forwarding_from_a_topic_on_the_core_into_a_partitioned_queue(shop: BrokerProcess) -> None:
    """A subscription's forwarded copies into a partitioned queue (on the core, one core per
    partition) go to the partition each message's key picks, as a send's would (issue 14; this
    scenario asserted the refusal, amqp:not-implemented, before that was built). The copies are
    sent through a topic of their own, so the shop's subscriptions get none."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    from sodalite.server.partitioned_actor import partition_index

    admin = ServiceBusAdministrationClient.from_connection_string(
        shop.admin_connection_string, connection_verify=shop.admin_certificate)
    admin.create_queue("partitioned-target", enable_partitioning=True)
    admin.create_subscription("shop", "fwd-later", forward_to="partitioned-target")
    assert "fwd-later" in [s.name for s in admin.list_subscriptions("shop")]
    admin.delete_subscription("shop", "fwd-later")
    admin.create_topic("to-partitioned")
    admin.create_subscription("to-partitioned", "fwd", forward_to="partitioned-target")
    got: list[ServiceBusReceivedMessage] = []
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("to-partitioned") as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}", partition_key=f"key{i}") for i in range(4)])
        with client.get_queue_receiver("partitioned-target", max_wait_time=5) as receiver:
            deadline = time.monotonic() + 30
            while len(got) < 4 and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=10, max_wait_time=5):
                    receiver.complete_message(m)
                    got.append(m)
    assert sorted(str(m) for m in got) == ["p0", "p1", "p2", "p3"]
    assert all(m.sequence_number >> 48 == partition_index(str(m.partition_key), 16) for m in got)
    admin.create_subscription("shop", "fwd-ok", forward_to="from-topic")  # a queue on the core: fine
    admin.delete_subscription("shop", "fwd-ok")


def test_a_waiting_subscription_receiver_gets_a_copy_at_once(shop: BrokerProcess) -> None:
    """The copies reach a receiver already waiting on the subscription (no poll between)."""
    with ServiceBusClient.from_connection_string(shop.connection_string) as client, \
            client.get_subscription_receiver("later", "a") as receiver:
        receiver.receive_messages(max_message_count=1, max_wait_time=1)  # the link is up, with credit
        with client.get_topic_sender("later") as sender:
            sender.send_messages(ServiceBusMessage("now", application_properties={"n": 1}))
        got = receiver.receive_messages(max_message_count=1, max_wait_time=30)
        assert [str(m) for m in got] == ["now"]
        receiver.complete_message(got[0])


def test_duplicate_detection_on_a_topic_on_the_core(tmp_path: Path) -> None:
    topics = [{"Name": "dedup", "Properties": {"RequiresDuplicateDetection": True,
                                               "DuplicateDetectionHistoryTimeWindow": "PT10M"},
               "Subscriptions": [{"Name": "s", "Properties": {}}]}]
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [], Topics=topics),
                           extra_args=V2).start()
    try:
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_topic_sender("dedup") as sender:
                sender.send_messages(ServiceBusMessage("first", message_id="same"))
                sender.send_messages(ServiceBusMessage("second", message_id="same"))
                sender.send_messages(ServiceBusMessage("other", message_id="different"))
            assert [str(m) for m in _drain(client, "s", topic="dedup")] == ["first", "other"]
        # The history is durable: after kill -9 the id is still known.
        broker.kill()
        broker.start()
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_topic_sender("dedup") as sender:
                sender.send_messages(ServiceBusMessage("third", message_id="same"))
                sender.send_messages(ServiceBusMessage("new", message_id="new"))
            assert [str(m) for m in _drain(client, "s", topic="dedup")] == ["new"]
    finally:
        broker.stop()


def test_acknowledged_copies_and_due_schedules_survive_kill_9(tmp_path: Path) -> None:
    topics = [{"Name": "t", "Properties": {}, "Subscriptions": [
        {"Name": "a", "Properties": {}}, {"Name": "b", "Properties": {}}]}]
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [], Topics=topics),
                           extra_args=V2).start()
    try:
        soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3)
        with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_topic_sender("t") as sender:
            for i in range(10):
                sender.send_messages([ServiceBusMessage(f"m{i}-{j}") for j in range(20)])
            [scheduled] = sender.schedule_messages(ServiceBusMessage("scheduled"), soon)
        assert scheduled > 0
        broker.kill()
        # Restart once the scheduled message is due: the topic must not publish it before its
        # subscriptions are loaded again.
        time.sleep(max((soon - datetime.datetime.now(datetime.UTC)).total_seconds(), 0) + 0.5)
        broker.start()
        want = sorted([f"m{i}-{j}" for i in range(10) for j in range(20)] + ["scheduled"])
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            for name in ("a", "b"):
                got: list[str] = []
                deadline = time.monotonic() + 60
                while len(got) < len(want) and time.monotonic() < deadline:
                    got += [str(m) for m in _drain(client, name, topic="t")]
                assert sorted(got) == want, name
    finally:
        broker.stop()


def test_a_topic_send_to_a_subscription_path_is_refused(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusError), client.get_queue_sender("shop/subscriptions/all") as sender:
            sender.send_messages(ServiceBusMessage("nope"))
