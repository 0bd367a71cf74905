"""Topics, subscriptions and rules through the official SDK."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop


def _sub(name: str, rules: list[dict[str, object]] | None = None, **properties: object) -> dict[str, object]:
    entry: dict[str, object] = {"Name": name, "Properties": properties}
    if rules is not None:
        entry["Rules"] = rules
    return entry


def _sql(name: str, expression: str, action: str | None = None) -> dict[str, object]:
    props: dict[str, object] = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
    if action is not None:
        props["Action"] = {"SqlExpression": action}
    return {"Name": name, "Properties": props}


TOPICS = [{"Name": "shop", "Properties": {}, "Subscriptions": [
    _sub("all"),
    _sub("red", [_sql("red", "color = 'red'")]),
    _sub("big", [_sql("big", "quantity > 10 AND sys.Label = 'order'")]),
    _sub("corr", [{"Name": "c", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {
        "CorrelationId": "c-1", "Properties": {"region": "eu"}}}}]),
    _sub("tagged", [_sql("tag-red", "color = 'red'", "SET tagged = 'yes'; SET doubled = quantity * 2")]),
    _sub("none", [{"Name": "f", "Properties": {"FilterType": "False"}}]),
    _sub("sess", None, RequiresSession=True),
    _sub("fwd", None, ForwardTo="from-topic"),
    _sub("to-other", [_sql("blue", "color = 'blue'")], ForwardTo="other"),
    _sub("strict", [_sql("sum", "quantity + 1 > 0")]),
    _sub("lenient", [_sql("sum", "quantity + 1 > 0")], DeadLetteringOnFilterEvaluationExceptions=False),
]}, {"Name": "other", "Properties": {}, "Subscriptions": [_sub("x")]},
    {"Name": "later", "Properties": {}, "Subscriptions": [_sub("a"), _sub("b", [_sql("b", "n = 2")])]},
    {"Name": "short-lived", "Properties": {"DefaultMessageTimeToLive": "PT1M"},
     "Subscriptions": [_sub("long", None, DefaultMessageTimeToLive="PT1H")]}]
QUEUES = [{"Name": "from-topic", "Properties": {}}, {"Name": "to-topic", "Properties": {"ForwardTo": "shop"}}]


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("topics")
    broker = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS)).start()
    yield broker
    broker.stop()


def _drain(client: ServiceBusClient, subscription: str, topic: str = "shop", **kwargs: object) -> list[object]:
    got: list[object] = []
    # Until a peek finds the entity empty: every copy is stored before its send is acknowledged, so
    # nothing more is on its way, and no receive has to wait out an idle timeout to show it.
    with client.get_subscription_receiver(topic, subscription, **kwargs) as receiver:  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=20, max_wait_time=5):
                got.append(m)
                receiver.complete_message(m)
    return got


def test_each_subscription_gets_exactly_the_matching_messages(shop: BrokerProcess) -> None:
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
        [forwarded_1, forwarded_2, forwarded_3] = _queue_bodies(client, "from-topic")
        assert [forwarded_1, forwarded_2, forwarded_3] == ["m1", "m2", "m3"]
        # session subscription: copies without a SessionId are dead-lettered
        dead = _drain(client, "sess", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert sorted(str(m) for m in dead) == ["m1", "m2", "m3"]
        assert {m.dead_letter_reason for m in dead} == {"Session ID is null."}  # type: ignore[attr-defined]


def test_an_action_changes_only_its_subscriptions_copy(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("shop") as sender:
            sender.send_messages(ServiceBusMessage("red-one", application_properties={"color": "red", "quantity": 1}))
        [plain] = _drain(client, "red")
        assert b"tagged" not in plain.application_properties  # type: ignore[attr-defined]
        [tagged] = _drain(client, "tagged")
        assert tagged.application_properties[b"tagged"] == b"yes"  # type: ignore[attr-defined]
        for name in ("all",):
            _drain(client, name)
        _queue_bodies(client, "from-topic")
        _drain(client, "sess", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_sessions_on_a_subscription_and_forwarding_into_the_topic(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_queue_sender("to-topic") as sender:
            sender.send_messages(ServiceBusMessage("via-queue", session_id="s-1"))
        with client.get_subscription_receiver("shop", "sess", session_id="s-1") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(m) == "via-queue" and m.session_id == "s-1"
            receiver.complete_message(m)
        assert [str(m) for m in _drain(client, "all")] == ["via-queue"]
        assert _queue_bodies(client, "from-topic") == ["via-queue"]


def test_topics_and_subscriptions_refuse_the_wrong_direction(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusError), client.get_queue_receiver("shop") as receiver:
            receiver.receive_messages(max_wait_time=1)


def _queue_bodies(client: ServiceBusClient, queue: str) -> list[str]:
    got = []
    # Until a peek finds the entity empty: every copy is stored before its send is acknowledged, so
    # nothing more is on its way, and no receive has to wait out an idle timeout to show it.
    with client.get_queue_receiver(queue) as receiver:
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=20, max_wait_time=5):
                got.append(str(m))
                receiver.complete_message(m)
    return got


def test_a_subscription_can_forward_into_another_topic(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("shop") as sender:
            sender.send_messages([ServiceBusMessage("blue-1", application_properties={"color": "blue"}),
                                  ServiceBusMessage("green-1", application_properties={"color": "green"})])
        bodies = [str(m) for m in _drain(client, "x", topic="other")]
        assert "blue-1" in bodies and "green-1" not in bodies  # earlier tests' blue messages arrive too


def test_a_filter_that_fails_dead_letters_per_the_subscription_and_the_send_succeeds(shop: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("shop") as sender:
            sender.send_messages([ServiceBusMessage("text-qty", application_properties={"quantity": "many"}),
                                  ServiceBusMessage("num-qty", application_properties={"quantity": 3})])
        strict = [str(m) for m in _drain(client, "strict")]  # earlier tests' messages with a quantity too
        lenient = [str(m) for m in _drain(client, "lenient")]
        assert "num-qty" in strict and "text-qty" not in strict
        assert "num-qty" in lenient and "text-qty" not in lenient
        dead = _drain(client, "strict", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert [str(m) for m in dead] == ["text-qty"]
        assert dead[0].dead_letter_reason == "FilterEvaluationException"  # type: ignore[attr-defined]
        assert _drain(client, "lenient", sub_queue=ServiceBusSubQueue.DEAD_LETTER) == []


def test_a_filter_that_does_not_parse_is_refused_with_its_position(tmp_path: Path) -> None:
    import subprocess

    from broker_process import SERVE

    config = write_config(tmp_path / "Config.json", [], Topics=[{"Name": "t", "Properties": {}, "Subscriptions": [
        _sub("s", [_sql("bad", "color = = 'red'")])]}])
    result = subprocess.run([str(SERVE), "--port", "0", "--data-dir", str(tmp_path / "d"), "--config", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "position" in result.stderr and "bad" in result.stderr


def test_the_topics_smaller_ttl_applies_to_its_subscriptions(shop: BrokerProcess) -> None:
    import datetime

    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("short-lived") as sender:
            sender.send_messages(ServiceBusMessage("brief"))
        [m] = _drain(client, "long", topic="short-lived")
        assert m.time_to_live == datetime.timedelta(minutes=1)  # type: ignore[attr-defined]


def test_messages_scheduled_on_a_topic_reach_its_subscriptions_when_due(shop: BrokerProcess) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    with ServiceBusClient.from_connection_string(shop.connection_string) as client:
        with client.get_topic_sender("later") as sender:
            [kept] = sender.schedule_messages(ServiceBusMessage("kept", application_properties={"n": 2}), soon)
            [cancelled] = sender.schedule_messages(ServiceBusMessage("cancelled", application_properties={"n": 2}),
                                                   soon)
            sender.cancel_scheduled_messages(cancelled)
        with client.get_subscription_receiver("later", "a", max_wait_time=15) as receiver:
            got = receiver.receive_messages(max_message_count=2, max_wait_time=15)  # waits for the first
            got += receiver.receive_messages(max_message_count=2, max_wait_time=2)
            for m in got:
                receiver.complete_message(m)
        assert [str(m) for m in got] == ["kept"]
        assert got[0].application_properties[b"n"] == 2
        assert [str(m) for m in _drain(client, "b", topic="later")] == ["kept"]  # filtered as a send is
        with client.get_subscription_receiver("later", "a") as receiver:
            assert receiver.peek_messages(max_message_count=5) == []
    assert kept != cancelled
