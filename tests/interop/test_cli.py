"""The command line's client commands (send, peek, queue/topic/subscription/rule) against a running broker.

Each command runs as a user runs it, in its own process; what it did is checked with the official SDK.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, TransportType
from azure.servicebus.management import ServiceBusAdministrationClient, SqlRuleAction, SqlRuleFilter
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

pytestmark = pytest.mark.interop


def cli(broker: BrokerProcess, cwd: Path, *args: str, admin: bool = False,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--admin-port", str(broker.admin_port), "--ca-file", broker.admin_certificate] if admin else []
    env = {**os.environ, "SODALITE_CONNECTION_STRING": broker.connection_string}
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", *args, *extra], cwd=cwd, env=env,
                          input=stdin, capture_output=True, text=True, timeout=60)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def sdk_admin(broker: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)


def own_queue(broker: BrokerProcess, name: str, **properties: Any) -> str:
    """A queue of this test's own on the shared broker (others' leftovers cannot confuse it)."""
    admin = sdk_admin(broker)
    if name in {q.name for q in admin.list_queues()}:
        admin.delete_queue(name)
    admin.create_queue(name, **properties)
    return name


def test_send_sets_what_the_sdk_reads(broker: BrokerProcess, tmp_path: Path) -> None:
    queue = own_queue(broker, "cli-props")
    ok(cli(broker, tmp_path, "send", queue, "--body", "héllo", "--message-id", "m-1", "--subject", "greeting",
           "--correlation-id", "c-9", "--content-type", "text/plain", "--ttl", "PT1H",
           "--property", "colour=red", "--property", "size:=5", "--property", "urgent:=true"))
    ok(cli(broker, tmp_path, "send", queue, stdin="from stdin"))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue, max_wait_time=10) as receiver:
            first, second = receiver.receive_messages(max_message_count=2, max_wait_time=10)
            if len(receiver.receive_messages(max_message_count=1, max_wait_time=1)):
                pytest.fail("more messages than sent")
            for message in (first, second):
                receiver.complete_message(message)
    assert (str(first), first.message_id, first.subject, first.correlation_id, first.content_type) == (
        "héllo", "m-1", "greeting", "c-9", "text/plain")
    assert first.time_to_live == datetime.timedelta(hours=1)
    # The SDK hands string values back as bytes.
    assert first.application_properties == {b"colour": b"red", b"size": 5, b"urgent": True}
    assert str(second) == "from stdin"


def test_peek_shows_messages_and_the_dead_letter_queue(broker: BrokerProcess, tmp_path: Path) -> None:
    queue = own_queue(broker, "cli-peek")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}", application_properties={"i": i}) for i in range(3)])
        with client.get_queue_receiver(queue, max_wait_time=10) as receiver:
            [taken] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(taken, reason="bad", error_description="no such customer")
    shown = [json.loads(line) for line in ok(cli(broker, tmp_path, "peek", queue, "--json")).splitlines()]
    assert [m["body"] for m in shown] == ["p1", "p2"]
    assert [m["application_properties"]["i"] for m in shown] == [1, 2]
    assert shown[0]["sequence_number"] < shown[1]["sequence_number"]
    one = [json.loads(line) for line in ok(cli(broker, tmp_path, "peek", queue, "--json", "--count", "1",
                                               "--from-sequence", str(shown[1]["sequence_number"]))).splitlines()]
    assert [m["body"] for m in one] == ["p2"]
    dead = [json.loads(line) for line in ok(cli(broker, tmp_path, "peek", queue, "--dead-letter",
                                                "--json")).splitlines()]
    assert [m["body"] for m in dead] == ["p0"]
    assert dead[0]["application_properties"]["DeadLetterReason"] == "bad"
    assert "(2 messages)" in ok(cli(broker, tmp_path, "peek", queue))
    # The text output says why a message was dead-lettered.
    text = ok(cli(broker, tmp_path, "peek", queue, "--dead-letter")).splitlines()
    assert 'reason="bad" description="no such customer"' in text[0] and text[0].endswith('"p0"'), text


def test_refusals_are_reported_with_their_condition(broker: BrokerProcess, tmp_path: Path) -> None:
    missing = cli(broker, tmp_path, "send", "no-such-queue", "--body", "x")
    assert missing.returncode == 1 and "amqp:not-found" in missing.stderr
    wrong_key = broker.connection_string.replace("SAS_KEY_VALUE", "wrong")
    refused = cli(broker, tmp_path, "send", "misc", "--body", "x", "--connection-string", wrong_key)
    assert refused.returncode == 1 and "unauthorized" in refused.stderr.lower()
    bad_property = cli(broker, tmp_path, "queue", "create", "cli-bad", "--set", "MaxDeliveryCount=0", admin=True)
    assert bad_property.returncode == 1 and "MaxDeliveryCount" in bad_property.stderr
    assert cli(broker, tmp_path, "queue", "show", "cli-bad", admin=True).returncode == 1


def test_queue_commands_round_trip_through_the_management_api(broker: BrokerProcess, tmp_path: Path) -> None:
    ok(cli(broker, tmp_path, "queue", "create", "cli-q", "--set", "LockDuration=PT45S", "--set", "MaxDeliveryCount=4",
           "--set", "RequiresSession=true", admin=True))
    got = sdk_admin(broker).get_queue("cli-q")
    assert (got.lock_duration, got.max_delivery_count, got.requires_session) == (
        datetime.timedelta(seconds=45), 4, True)
    exists = cli(broker, tmp_path, "queue", "create", "cli-q", admin=True)
    assert exists.returncode == 1 and "409" in exists.stderr

    ok(cli(broker, tmp_path, "queue", "update", "cli-q", "--set", "MaxDeliveryCount=9", admin=True))
    got = sdk_admin(broker).get_queue("cli-q")
    assert (got.max_delivery_count, got.lock_duration) == (9, datetime.timedelta(seconds=45))  # others kept

    shown = json.loads(ok(cli(broker, tmp_path, "queue", "show", "cli-q", "--json", admin=True)))
    assert shown["Name"] == "cli-q" and shown["MaxDeliveryCount"] == 9 and shown["RequiresSession"] is True
    listed: list[dict[str, Any]] = json.loads(ok(cli(broker, tmp_path, "queue", "list", "--json", admin=True)))
    assert {"cli-q", "queue.1", "orders"} <= {row["name"] for row in listed}
    assert "cli-q" in ok(cli(broker, tmp_path, "queue", "list", admin=True))

    ok(cli(broker, tmp_path, "queue", "delete", "cli-q", admin=True))
    assert "cli-q" not in {q.name for q in sdk_admin(broker).list_queues()}


def test_topic_subscription_and_rule_commands_route_messages(broker: BrokerProcess, tmp_path: Path) -> None:
    ok(cli(broker, tmp_path, "topic", "create", "cli-t", "--set", "DefaultMessageTimeToLive=P1D", admin=True))
    ok(cli(broker, tmp_path, "subscription", "create", "cli-t", "red", "--sql-filter", "colour = 'red'",
           "--set", "MaxDeliveryCount=3", admin=True))
    ok(cli(broker, tmp_path, "subscription", "create", "cli-t", "vip", admin=True))
    ok(cli(broker, tmp_path, "rule", "create", "cli-t", "vip", "gold", "--correlation", "Label=gold",
           "--correlation", "tier:=1", admin=True))
    ok(cli(broker, tmp_path, "rule", "delete", "cli-t", "vip", "$Default", admin=True))
    rules = json.loads(ok(cli(broker, tmp_path, "rule", "list", "cli-t", "vip", "--json", admin=True)))
    assert [row["name"] for row in rules] == ["gold"]
    subscriptions = json.loads(ok(cli(broker, tmp_path, "subscription", "list", "cli-t", "--json", admin=True)))
    assert sorted(row["name"] for row in subscriptions) == ["red", "vip"]
    admin = sdk_admin(broker)
    assert admin.get_subscription("cli-t", "red").max_delivery_count == 3
    assert admin.get_topic("cli-t").default_message_time_to_live == datetime.timedelta(days=1)

    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("cli-t") as sender:
            sender.send_messages([
                ServiceBusMessage("red", application_properties={"colour": "red"}),
                ServiceBusMessage("gold", subject="gold", application_properties={"tier": 1}),
                ServiceBusMessage("neither", subject="gold", application_properties={"tier": 2}),
            ])
    counts = {row["name"]: row["active"] for row in json.loads(
        ok(cli(broker, tmp_path, "subscription", "list", "cli-t", "--json", admin=True)))}
    assert counts == {"red": 1, "vip": 1}
    assert [json.loads(line)["body"] for line in
            ok(cli(broker, tmp_path, "peek", "cli-t/subscriptions/vip", "--json")).splitlines()] == ["gold"]
    ok(cli(broker, tmp_path, "topic", "delete", "cli-t", admin=True))


def test_send_over_amqps_trusting_the_generated_certificate(broker: BrokerProcess, tmp_path: Path) -> None:
    queue = own_queue(broker, "cli-tls")
    tls_string = (f"Endpoint=sb://localhost:{broker.amqps_port}/;SharedAccessKeyName=RootManageSharedAccessKey;"
                  "SharedAccessKey=SAS_KEY_VALUE")
    ok(cli(broker, tmp_path, "send", queue, "--body", "over tls", "--connection-string", tls_string,
           "--ca-file", broker.tls_certificate))
    untrusted = cli(broker, tmp_path, "send", queue, "--body", "x", "--connection-string", tls_string)
    assert untrusted.returncode == 1 and "certificate" in untrusted.stderr.lower()
    with ServiceBusClient.from_connection_string(broker.connection_string,
                                                 transport_type=TransportType.Amqp) as client:
        with client.get_queue_receiver(queue, max_wait_time=10) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(message)
    assert str(message) == "over tls"


def test_namespace_export_loads_into_a_new_broker(fresh_broker: BrokerProcess, tmp_path: Path) -> None:
    fresh_broker.start()
    admin = sdk_admin(fresh_broker)
    admin.create_queue("exp-q", max_delivery_count=3, lock_duration=datetime.timedelta(seconds=20))
    admin.create_topic("exp-t", default_message_time_to_live=datetime.timedelta(hours=2))
    admin.create_subscription("exp-t", "exp-s", forward_to="exp-q", requires_session=False)
    admin.create_rule("exp-t", "exp-s", "blue", filter=SqlRuleFilter("colour = 'blue'"),
                      action=SqlRuleAction("SET seen = 1"))
    exported = tmp_path / "Exported.json"
    ok(cli(fresh_broker, tmp_path, "namespace", "export", "--output", str(exported), admin=True))

    copy = BrokerProcess(tmp_path / "copy-data", exported).start()
    try:
        again = sdk_admin(copy)
        queue = again.get_queue("exp-q")
        assert (queue.max_delivery_count, queue.lock_duration) == (3, datetime.timedelta(seconds=20))
        assert again.get_topic("exp-t").default_message_time_to_live == datetime.timedelta(hours=2)
        assert again.get_subscription("exp-t", "exp-s").forward_to.endswith("/exp-q")
        rules = {rule.name: rule for rule in again.list_rules("exp-t", "exp-s")}
        assert set(rules) == {"$Default", "blue"}
        assert rules["blue"].filter.sql_expression == "colour = 'blue'"
        assert rules["blue"].action.sql_expression == "SET seen = 1"
        assert {q.name for q in again.list_queues()} == {q.name for q in admin.list_queues()}
    finally:
        copy.stop()


def test_entity_commands_work_over_the_plain_http_api(broker: BrokerProcess, tmp_path: Path) -> None:
    assert broker.http_port not in (0, broker.admin_port)
    env = {**os.environ, "SODALITE_CONNECTION_STRING": broker.connection_string}
    listed = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "queue", "list", "--json", "--http",
                             "--admin-port", str(broker.http_port)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "queue.1" in {row["name"] for row in json.loads(listed.stdout)}


def test_key_regenerate_replaces_a_namespace_key(tmp_path: Path) -> None:
    rules = [{"KeyName": KEY_NAME, "PrimaryKey": KEY}, {"KeyName": "ops", "PrimaryKey": "ops-key"}]
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [{"Name": "q", "Properties": {}}],
                                                            AuthorizationRules=rules)).start()
    try:
        answer = json.loads(ok(cli(process, tmp_path, "key", "regenerate", "ops", "--json", admin=True)))
        new_key = answer["primaryKey"]
        assert answer["keyName"] == "ops" and new_key != "ops-key" and len(new_key) >= 32
        old = cli(process, tmp_path, "send", "q", "--body", "x",
                  "--connection-string", process.connection_string_with("ops-key", "ops"))
        assert old.returncode == 1 and "unauthorized" in old.stderr.lower()
        ok(cli(process, tmp_path, "send", "q", "--body", "x",
               "--connection-string", process.connection_string_with(new_key, "ops")))
        ok(cli(process, tmp_path, "send", "q", "--body", "y", "--connection-string", answer["primaryConnectionString"]))
    finally:
        process.stop()
