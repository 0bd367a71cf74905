"""Two broker nodes on one PostgreSQL database: topics and subscriptions on the partition core
across nodes (issue 18, items 3 and 4).

Both nodes are started as users start them (``scripts/serve --store postgresql://...
--node-id ...``) with the same configuration, on a database of this module's own on the PostgreSQL
server this test process starts (``tests/pg_server.py``); the official SDK is the client, and the
management API (HTTPS, the SDK's administration client) changes entities through node A only.

A topic send's copies for every subscription are one transaction of the topic's store, so they
reach receivers on either node; what node A changes (topics and subscriptions created or deleted,
rules, keys) node B applies through its entity follow, promised within 1 s (issue 18.3). Each test
waits for that within a generous bound (30 s) and never asserts the time taken.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusAuthenticationError
from azure.servicebus.management import (
    AccessRights,
    AuthorizationRule,
    ServiceBusAdministrationClient,
    SqlRuleFilter,
)
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from pg_nodes import node_pair

from sodalite.client.failover import is_entity_not_found
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

BOUND = 30.0  # seconds: generous against the 1 s promise
NAMESPACE_RULES = [{"KeyName": KEY_NAME, "PrimaryKey": KEY},
                   {"KeyName": "sender", "PrimaryKey": "send-key", "Rights": ["Send"]}]
TOPICS = [{"Name": "configured", "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]}]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("topic-nodes")
    yield from node_pair(base, write_config(base / "Config.json", [{"Name": "plain", "Properties": {}}],
                          Topics=TOPICS, AuthorizationRules=NAMESPACE_RULES), database)


def _admin(node: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(node.admin_connection_string,
                                                                 connection_verify=node.admin_certificate)


def _publish(node: BrokerProcess, topic: str, messages: list[ServiceBusMessage],
             connection_string: str | None = None) -> None:
    with ServiceBusClient.from_connection_string(connection_string or node.connection_string,
                                                 retry_total=0) as client, \
            client.get_topic_sender(topic) as sender:
        sender.send_messages(messages)


def _drain(node: BrokerProcess, topic: str, subscription: str, want: int, seconds: float = BOUND) -> list[str]:
    """Receive and complete from a subscription until ``want`` messages came or ``seconds`` passed;
    then wait 2 s more for any message too many."""
    got: list[str] = []
    deadline = time.monotonic() + seconds
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_subscription_receiver(topic, subscription, max_wait_time=2) as receiver:
        while len(got) < want and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=50, max_wait_time=2):
                got.append(str(m))
                receiver.complete_message(m)
        for m in receiver.receive_messages(max_message_count=50, max_wait_time=2):
            got.append(str(m))
            receiver.complete_message(m)
    return got


def _eventually(what: str, attempt: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not attempt():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(0.3)


def _serves_subscription(node: BrokerProcess, topic: str, subscription: str) -> bool:
    try:
        with ServiceBusClient.from_connection_string(node.connection_string, retry_total=0) as client, \
                client.get_subscription_receiver(topic, subscription, max_wait_time=1) as receiver:
            receiver.peek_messages(max_message_count=1)
        return True
    except (MessagingEntityNotFoundError, ServiceBusAuthenticationError) as exc:
        if not is_entity_not_found(exc):  # (the put-token of a missing entity is answered 404)
            raise
        return False


def _topic_made_through_a(a: BrokerProcess, b: BrokerProcess, topic: str,
                          *subscriptions: str) -> ServiceBusAdministrationClient:
    """Create ``topic`` and its ``subscriptions`` through node A's management API, and wait until node B
    serves every one; node A's administration client, for the test to go on with."""
    admin = _admin(a)
    admin.create_topic(topic)
    for name in subscriptions:
        admin.create_subscription(topic, name)
    _eventually(f"node b serves the subscriptions of {topic} made through node a",
                lambda: all(_serves_subscription(b, topic, name) for name in subscriptions))
    return admin


def test_a_topic_created_through_one_node_fans_out_through_both(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admin = _topic_made_through_a(a, b, "made", "one", "two")
    _publish(a, "made", [ServiceBusMessage(f"a{i}") for i in range(20)])
    _publish(b, "made", [ServiceBusMessage(f"b{i}") for i in range(20)])
    everything = sorted([f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)])
    assert sorted(_drain(b, "made", "one", 40)) == everything  # a's sends received through b, and b's own
    assert sorted(_drain(a, "made", "two", 40)) == everything  # ... and the reverse
    admin.delete_topic("made")


def test_a_configured_topic_takes_sends_through_either_node(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _publish(a, "configured", [ServiceBusMessage("from a")])
    _publish(b, "configured", [ServiceBusMessage("from b")])
    assert sorted(_drain(a, "configured", "all", 2)) == ["from a", "from b"]


def test_a_rule_added_through_one_node_filters_sends_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admin = _topic_made_through_a(a, b, "filtered", "red")
    admin.create_rule("filtered", "red", "red-only", filter=SqlRuleFilter("color = 'red'"))
    admin.delete_rule("filtered", "red", "$Default")

    round_number = [0]

    def blue_is_filtered_on_b() -> bool:
        n = round_number[0] = round_number[0] + 1
        _publish(b, "filtered", [ServiceBusMessage(f"blue{n}", application_properties={"color": "blue"}),
                                 ServiceBusMessage(f"red{n}", application_properties={"color": "red"})])
        got = _drain(a, "filtered", "red", 2, seconds=5)
        assert f"red{n}" in got  # whichever rules node b has, a red message passes them
        return f"blue{n}" not in got

    _eventually("node b applies the rules changed through node a", blue_is_filtered_on_b)
    # From then on every send through node b is filtered by the new rule.
    _publish(b, "filtered", [ServiceBusMessage(f"{c}{i}", application_properties={"color": c})
                             for i in range(10) for c in ("red", "blue")])
    assert sorted(_drain(a, "filtered", "red", 10)) == sorted(f"red{i}" for i in range(10))
    admin.delete_topic("filtered")


def test_a_subscription_deleted_through_one_node_gets_no_copies_of_sends_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admin = _topic_made_through_a(a, b, "pruned", "keep", "drop")
    sent: list[str] = []
    stop = threading.Event()

    def send_through_b() -> None:  # one message at a time, until told to stop
        with ServiceBusClient.from_connection_string(b.connection_string) as client, \
                client.get_topic_sender("pruned") as sender:
            while not stop.is_set():
                body = f"m{len(sent)}"
                sender.send_messages(ServiceBusMessage(body))
                sent.append(body)

    sender = threading.Thread(target=send_through_b)
    sender.start()
    try:
        _eventually("sends through node b", lambda: len(sent) >= 50)
        admin.delete_subscription("pruned", "drop")  # while node b sends
        _eventually("node b drops the subscription deleted through node a",
                    lambda: not _serves_subscription(b, "pruned", "drop"))
    finally:
        stop.set()
        sender.join()
    assert sorted(_drain(b, "pruned", "keep", len(sent))) == sorted(sent)
    # A subscription of the same name, made again, starts empty, although node b may have stored copies
    # for the deleted one before it learnt of the deletion.
    admin.create_subscription("pruned", "drop")
    _eventually("node b serves the new subscription", lambda: _serves_subscription(b, "pruned", "drop"))
    assert _drain(a, "pruned", "drop", 0, seconds=0) == []
    assert admin.get_subscription_runtime_properties("pruned", "drop").total_message_count == 0
    admin.delete_topic("pruned")


def test_scheduled_messages_on_a_topic_are_published_once_across_nodes(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admin = _topic_made_through_a(a, b, "later", "s")
    due = datetime.now(UTC) + timedelta(seconds=15)
    for node, name in ((a, "a"), (b, "b")):
        with ServiceBusClient.from_connection_string(node.connection_string) as client, \
                client.get_topic_sender("later") as sender:
            sender.schedule_messages([ServiceBusMessage(f"{name}{i}") for i in range(5)], due)
    # Restarted, node b reads every scheduled message from the store, node a's too: both nodes' topics
    # now wait for the same ten messages, and the store's claim lets one of them publish each.
    b.stop()
    b.start()
    assert datetime.now(UTC) < due, "node b took too long to restart for this test to mean anything"
    got = _drain(b, "later", "s", 10)
    got += _drain(a, "later", "s", 0, seconds=0)  # nothing left for the other node either
    assert sorted(got) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])
    admin.delete_topic("later")


# ---- keys -------------------------------------------------------------------------------------------


def _http(node: BrokerProcess, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    token = generate_token(f"https://localhost:{node.admin_port}", KEY_NAME, KEY, int(time.time()) + 300)
    request = urllib.request.Request(f"https://localhost:{node.admin_port}{path}", data=json.dumps(body).encode(),
                                     method=method, headers={"Authorization": token,
                                                             "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=node.admin_certificate)
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        return response.status, json.loads(response.read())


def _sends(node: BrokerProcess, key_name: str, key: str, topic: str) -> bool:
    try:
        _publish(node, topic, [ServiceBusMessage("probe")], node.connection_string_with(key, key_name))
        return True
    except ServiceBusAuthenticationError:
        return False


def test_a_namespace_key_regenerated_through_one_node_is_the_only_one_the_other_takes(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    assert _sends(b, "sender", "send-key", "configured")
    status, keys = _http(a, "POST", "/$authorizationrules/sender/regeneratekeys", {"keyType": "PrimaryKey"})
    assert status == 200
    new_key = keys["primaryKey"]
    assert new_key != "send-key"
    _eventually("node b takes the key regenerated through node a", lambda: _sends(b, "sender", new_key, "configured"))
    assert not _sends(b, "sender", "send-key", "configured")
    assert not _sends(a, "sender", "send-key", "configured")
    _drain(a, "configured", "all", 2)  # the probes


def test_a_topics_own_rule_added_through_one_node_authenticates_on_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admin = _topic_made_through_a(a, b, "keyed", "s")
    assert not _sends(b, "keyed-send", "keyed-secret", "keyed")
    topic = admin.get_topic("keyed")
    topic.authorization_rules = [AuthorizationRule(claim_type="SharedAccessKey", claim_value="None",
                                                   rights=[AccessRights.send], key_name="keyed-send",
                                                   primary_key="keyed-secret")]
    admin.update_topic(topic)
    _eventually("node b takes the topic's rule added through node a",
                lambda: _sends(b, "keyed-send", "keyed-secret", "keyed"))
    status, _ = _http(a, "POST", "/keyed/$authorizationrules/keyed-send/regeneratekeys",
                      {"keyType": "PrimaryKey", "key": "keyed-secret-2"})
    assert status == 200
    _eventually("node b refuses the topic's old key", lambda: not _sends(b, "keyed-send", "keyed-secret", "keyed"))
    assert _sends(b, "keyed-send", "keyed-secret-2", "keyed")
    admin.delete_topic("keyed")
