"""Topics and subscriptions on the version-2 core, through the official SDK.

The broker is started as users start it (``scripts/serve --core v2``). A topic on the core stores a
send's copies for all its subscriptions in one transaction of the topic's store
(``server/topic_actor.py``), and each subscription is a queue on the core. The topic scenarios of
``test_topics.py`` are imported unchanged where they do not need auto-forwarding from a
subscription (a topic with such a subscription stays on version 1); this module's ``shop`` fixture
serves them the same topics without the forwarding subscriptions, so every topic here runs on the
core (the module checks that). Left out, for that reason: ``test_each_subscription_gets_exactly_the_matching_messages``
(its ``fwd`` subscription forwards), ``test_sessions_on_a_subscription_and_forwarding_into_the_topic``
and ``test_a_subscription_can_forward_into_another_topic``; the first is restated below without its
forwarding assertion.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError
from broker_process import BrokerProcess, write_config
from test_topics import (  # noqa: F401
    TOPICS,
    _drain,
    test_a_filter_that_fails_dead_letters_per_the_subscription_and_the_send_succeeds,
    test_an_action_changes_only_its_subscriptions_copy,
    test_messages_scheduled_on_a_topic_reach_its_subscriptions_when_due,
    test_the_topics_smaller_ttl_applies_to_its_subscriptions,
    test_topics_and_subscriptions_refuse_the_wrong_direction,
)

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]


def _without_forwarding(topics: list[dict[str, object]]) -> list[dict[str, object]]:
    out = []
    for topic in topics:
        subs = [s for s in topic["Subscriptions"] if isinstance(s, dict)  # type: ignore[attr-defined]
                and "ForwardTo" not in s["Properties"]]
        out.append({**topic, "Subscriptions": subs})
    return out


V2_TOPICS = _without_forwarding(TOPICS)
V2_QUEUES = [{"Name": "from-topic", "Properties": {}}]


def _start(base: Path) -> BrokerProcess:
    return BrokerProcess(base / "data", write_config(base / "Config.json", V2_QUEUES, Topics=V2_TOPICS),
                         extra_args=V2).start()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = _start(tmp_path_factory.mktemp("core-v2-topics"))
    yield broker
    broker.stop()


def test_a_forwarding_subscription_on_a_topic_on_the_core_is_refused_as_not_built(shop: BrokerProcess) -> None:
    """Forwarding from a subscription is not on the core yet: a topic with such a subscription stays
    on version 1, and a new one on a topic on the core is refused, naming why, and not created."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    admin = ServiceBusAdministrationClient.from_connection_string(
        shop.admin_connection_string, connection_verify=shop.admin_certificate)
    with pytest.raises(Exception) as refused:
        admin.create_subscription("shop", "fwd-later", forward_to="from-topic")
    assert "version-2 core" in str(refused.value)
    assert "fwd-later" not in [s.name for s in admin.list_subscriptions("shop")]


def test_each_subscription_gets_exactly_its_copies(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("shop") as sender:
            sender.send_messages([
                ServiceBusMessage("m1", subject="order", correlation_id="c-1",
                                  application_properties={"color": "red", "quantity": 5, "region": "eu"}),
                ServiceBusMessage("m2", subject="order", application_properties={"color": "blue", "quantity": 20}),
                ServiceBusMessage("m3"),
            ])
        assert [str(m) for m in _drain(client, "all")] == ["m1", "m2", "m3"]
        assert [str(m) for m in _drain(client, "red")] == ["m1"]
        assert [str(m) for m in _drain(client, "big")] == ["m2"]
        assert [str(m) for m in _drain(client, "corr")] == ["m1"]
        assert _drain(client, "none") == []
        [tagged] = _drain(client, "tagged")
        props = tagged.application_properties  # type: ignore[attr-defined]
        assert (props[b"tagged"], props[b"doubled"], props[b"RuleName"]) == (b"yes", 10, b"tag-red")
        dead = _drain(client, "sess", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert sorted(str(m) for m in dead) == ["m1", "m2", "m3"]
        assert {m.dead_letter_reason for m in dead} == {"Session ID is null."}  # type: ignore[attr-defined]
        for name in ("strict", "lenient"):
            _drain(client, name)


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
