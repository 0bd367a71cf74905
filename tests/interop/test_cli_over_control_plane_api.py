"""The command line's entity, rule, key and store commands over the control plane's JSON API.

Each command runs as a user runs it, in its own process, against a broker started with
scripts/serve (a second messaging store, a queue with its own key); what the command did is
checked with the official SDK, so the JSON API and the ATOM API are seen to change the same things.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [{"Name": "ctl-keyed", "Properties": {"AuthorizationRules": [
    {"KeyName": "keyed-sender", "PrimaryKey": "keyed-secret", "Rights": ["Send"]}]}}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("cli-control-plane")
    stores = [{"Name": "spare", "Path": "stores/spare.db"}]
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, MessagingStores=stores)).start()
    yield process
    process.stop()


def cli(broker: BrokerProcess, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SODALITE_CONNECTION_STRING": broker.connection_string}
    return subprocess.run([sys.executable, "-m", "sodalite.cli.main", *args, "--admin-port", str(broker.admin_port),
                           "--ca-file", broker.admin_certificate], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def sdk_admin(broker: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)


def test_rule_show_and_update_and_a_missing_rule(broker: BrokerProcess, tmp_path: Path) -> None:
    ok(cli(broker, tmp_path, "topic", "create", "ctl-t"))
    ok(cli(broker, tmp_path, "subscription", "create", "ctl-t", "s"))
    ok(cli(broker, tmp_path, "rule", "create", "ctl-t", "s", "big", "--sql", "size > 10", "--action",
           "SET seen = 1"))
    shown = json.loads(ok(cli(broker, tmp_path, "rule", "show", "ctl-t", "s", "BIG", "--json")))
    assert shown["Name"] == "big" and shown["Properties"]["SqlFilter"]["SqlExpression"] == "size > 10"
    assert shown["Properties"]["Action"]["SqlExpression"] == "SET seen = 1"

    ok(cli(broker, tmp_path, "rule", "update", "ctl-t", "s", "big", "--sql", "size > 20"))
    rule = sdk_admin(broker).get_rule("ctl-t", "s", "big")
    assert rule.filter.sql_expression == "size > 20" and rule.action is None  # replaced whole, as ATOM does

    missing = cli(broker, tmp_path, "rule", "show", "ctl-t", "s", "nosuch")
    assert missing.returncode == 1 and "404" in missing.stderr
    bad = cli(broker, tmp_path, "rule", "create", "ctl-t", "s", "broken", "--sql", "size >")
    assert bad.returncode == 1 and "400" in bad.stderr
    assert [r.name for r in sdk_admin(broker).list_rules("ctl-t", "s")] == ["$Default", "big"]  # nothing changed

    shown = json.loads(ok(cli(broker, tmp_path, "topic", "show", "ctl-t", "--json")))
    assert shown["Name"] == "ctl-t" and shown["Runtime"]["SubscriptionCount"] == 1
    wrong_kind = cli(broker, tmp_path, "queue", "show", "ctl-t")
    assert wrong_kind.returncode == 1 and "404" in wrong_kind.stderr
    ok(cli(broker, tmp_path, "topic", "delete", "ctl-t"))
    assert "ctl-t" not in {t.name for t in sdk_admin(broker).list_topics()}
    gone = cli(broker, tmp_path, "topic", "delete", "ctl-t")  # Service Bus answers a missing one with 404
    assert gone.returncode == 1 and "404" in gone.stderr


def test_store_commands_take_a_store_offline_and_back(broker: BrokerProcess, tmp_path: Path) -> None:
    states = {row["name"]: row["state"] for row in json.loads(ok(cli(broker, tmp_path, "store", "list", "--json")))}
    assert states == {"default": "online", "spare": "online"}
    assert "spare  offline" in ok(cli(broker, tmp_path, "store", "offline", "spare"))
    states = {row["name"]: row["state"] for row in json.loads(ok(cli(broker, tmp_path, "store", "list", "--json")))}
    assert states["spare"] == "offline"
    assert "spare  online" in ok(cli(broker, tmp_path, "store", "online", "spare"))
    unknown = cli(broker, tmp_path, "store", "offline", "nosuch")
    assert unknown.returncode == 1 and "404" in unknown.stderr


def test_an_entity_key_regenerated_to_a_given_value(broker: BrokerProcess, tmp_path: Path) -> None:
    answer = json.loads(ok(cli(broker, tmp_path, "key", "regenerate", "keyed-sender", "--entity", "ctl-keyed",
                               "--key", "a-new-secret-of-our-choosing", "--json")))
    assert answer["keyName"] == "keyed-sender" and answer["primaryKey"] == "a-new-secret-of-our-choosing"
    assert "EntityPath=ctl-keyed" in answer["primaryConnectionString"]
    with ServiceBusClient.from_connection_string(answer["primaryConnectionString"]) as client:
        with client.get_queue_sender("ctl-keyed") as sender:
            sender.send_messages(ServiceBusMessage("signed with the new key"))
    assert sdk_admin(broker).get_queue_runtime_properties("ctl-keyed").active_message_count == 1
    unknown = cli(broker, tmp_path, "key", "regenerate", "nosuch", "--entity", "ctl-keyed")
    assert unknown.returncode == 1 and "404" in unknown.stderr
