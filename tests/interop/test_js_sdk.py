"""The official JavaScript SDK, ``@azure/service-bus`` from npm, against the broker.

The tests themselves are Node's (``tests/js/test/*.test.mjs``, run by ``node --test``): messaging
over plain AMQP with the emulator connection string, ``ServiceBusAdministrationClient`` over the
HTTPS management port, trusting the broker's generated certificate through ``NODE_EXTRA_CA_CERTS``,
and messaging over WebSockets (``webSocketOptions``) on that same port. This module starts one
broker, hands Node its connection strings through the environment, and asserts that every named
Node test ran and passed; where Node leaves something behind (a message, an entity), the Python
SDK checks it from the other side.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import ROOT, BrokerProcess, write_config

JS_DIR = ROOT / "tests" / "js"
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(NODE is None, reason="node is not installed: the JavaScript SDK tests need Node.js 18 or later"),
]

QUEUES = [{"Name": name, "Properties": {}}
          for name in ("js-msg", "js-msg-abandon", "js-msg-rad", "js-from-python", "js-ws")]


@dataclass(frozen=True)
class NodeRun:
    returncode: int
    output: str
    passed: list[str]
    failed: list[str]


def _ensure_packages() -> None:
    """``npm ci`` when the packages are missing (``scripts/test`` does the same before the suite)."""
    if (JS_DIR / "node_modules" / "@azure" / "service-bus").is_dir():
        return
    assert NPM is not None, "npm is missing: install Node.js with npm to run the JavaScript SDK tests"
    subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, check=True, timeout=600)


@pytest.fixture(scope="module")
def js_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    _ensure_packages()
    base = tmp_path_factory.mktemp("js-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def run_node(broker: BrokerProcess, test_file: str) -> NodeRun:
    env = {
        **os.environ,
        "SODALITE_CONNECTION_STRING": broker.connection_string,
        "SODALITE_ADMIN_CONNECTION_STRING": broker.admin_connection_string,
        "NODE_EXTRA_CA_CERTS": broker.admin_certificate,
    }
    assert NODE is not None
    proc = subprocess.run([NODE, "--test", "--test-reporter=tap", str(Path("test") / test_file)], cwd=JS_DIR,
                          env=env, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    # Top-level tests only: TAP writes them unindented, subtests indented.
    passed = re.findall(r"^ok \d+ - (.+?)(?: # .*)?$", proc.stdout, re.MULTILINE)
    failed = re.findall(r"^not ok \d+ - (.+?)(?: # .*)?$", proc.stdout, re.MULTILINE)
    return NodeRun(proc.returncode, output, passed, failed)


def assert_all_passed(run: NodeRun, expected: list[str]) -> None:
    assert run.failed == [] and run.returncode == 0, run.output
    assert sorted(run.passed) == sorted(expected), run.output


def test_js_messaging_over_amqp(js_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(js_broker.connection_string) as client:
        with client.get_queue_sender("js-from-python") as sender:
            sender.send_messages(ServiceBusMessage("sent by python", message_id="py-1",
                                                   application_properties={"origin": "python"}))
    run = run_node(js_broker, "messaging.test.mjs")
    assert_all_passed(run, [
        "send, peek, receive with PeekLock, complete",
        "an abandoned message comes back with its delivery count raised",
        "receive and delete takes the message off the queue",
        "a message the Python SDK sent arrives intact",
    ])
    with ServiceBusClient.from_connection_string(js_broker.connection_string) as client:
        with client.get_queue_receiver("js-msg") as receiver:
            assert receiver.peek_messages(max_message_count=10) == []  # Node completed them all


def test_js_administration_client(js_broker: BrokerProcess) -> None:
    run = run_node(js_broker, "administration.test.mjs")
    assert_all_passed(run, [
        "namespace properties",
        "queues: create, get, update, exists, list, runtime properties, delete",
        "lists come in pages that follow the next link",
        "a queue forwards to the queue its forwardTo names",
        "topics and subscriptions: create, get, update, exists, list, runtime properties, delete",
        "rules: create, get, update, exists, list, delete, and the broker filters by them",
        "an entity created from Node is the one the broker serves",
    ])
    admin = ServiceBusAdministrationClient.from_connection_string(
        js_broker.admin_connection_string, connection_verify=js_broker.admin_certificate)
    made = admin.get_queue("js-made")
    assert (made.max_delivery_count, made.lock_duration) == (4, datetime.timedelta(seconds=20))
    names = {queue.name for queue in admin.list_queues()}
    assert "js-made" in names and not any(name.startswith(("js-adm-", "js-page-", "js-fwd-")) for name in names)
    assert {topic.name for topic in admin.list_topics()}.isdisjoint({"js-adm-t", "js-rules-t"})


def test_js_messaging_over_websockets(js_broker: BrokerProcess) -> None:
    run = run_node(js_broker, "websocket.test.mjs")
    assert_all_passed(run, ["send, receive with PeekLock and complete over a WebSocket"])
