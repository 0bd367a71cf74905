"""JMS 2.0 through Apache Qpid JMS (``org.apache.qpid:qpid-jms-client`` from Maven Central) against the broker.

An application written for Service Bus Premium connects with a shared access rule's key name and key as
user name and password (SASL PLAIN) and sends no token. The scenarios are Java (``tests/jms``,
``sodalite.jms.Scenarios``), built with Maven by ``scripts/test`` or here when the build is missing or
older than its sources (``sdk_builds``); each test runs one in its own JVM against the one broker this
module starts and asserts it printed ``PASS``. Where a scenario leaves messages behind, the Python SDK
checks them from the other side.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sdk_builds
from azure.servicebus import ServiceBusClient, ServiceBusReceiver
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER, SENDER
from sodalite.amqp.performatives import Source, Target
from sodalite.amqp.sasl import SaslClientConfig
from sodalite.amqp.types import Array, Symbol

JAVA = shutil.which("java")
MVN = shutil.which("mvn")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(JAVA is None or MVN is None,
                       reason="java and mvn are not installed: the JMS tests need a JDK 17 and Maven"),
]

QUEUES = [{"Name": f"jms-{name}", "Properties": properties} for name, properties in (
    ("send-receive", {}),
    ("replies", {}),
    ("browser", {}),
    ("transacted", {"LockDuration": "PT5S"}),
    ("client-ack", {"LockDuration": "PT5S"}),
    ("ttl", {}),
    ("delivery-delay", {}),
    ("requests", {}),
    ("selectors", {}),
    ("wrong-key", {}),
)]


TOPICS = [{"Name": "jms-topic", "Properties": {}, "Subscriptions": []},
          {"Name": "jms-selector-topic", "Properties": {}, "Subscriptions": []}]
LISTEN_ONLY = ("listen-only", "listen-only-key")
NAMESPACE_RULES = [{"KeyName": KEY_NAME, "PrimaryKey": KEY},
                   {"KeyName": LISTEN_ONLY[0], "PrimaryKey": LISTEN_ONLY[1], "Rights": ["Listen"]}]


@pytest.fixture(scope="module")
def jms_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    sdk_builds.ensure_built(sdk_builds.JMS)
    base = tmp_path_factory.mktemp("jms-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS,
                                                                 AuthorizationRules=NAMESPACE_RULES)).start()
    yield process
    process.stop()


def run_scenario(broker: BrokerProcess, scenario: str, key_name: str = KEY_NAME, key: str = KEY) -> str:
    assert JAVA is not None
    uri = f"amqp://127.0.0.1:{broker.port}?amqp.idleTimeout=120000"
    command = [JAVA, "-cp", sdk_builds.java_classpath(sdk_builds.JMS), "sodalite.jms.Scenarios", uri, key_name, key,
               scenario]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout.splitlines(), output[-4000:]
    return output


def _texts(receiver: ServiceBusReceiver) -> list[str]:
    bodies = [m.body for m in receiver.peek_messages(max_message_count=50)]
    return [b.decode() if isinstance(b, bytes) else str(b) for b in bodies]


def _peek(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            return _texts(receiver)


def _peek_subscription(broker: BrokerProcess, topic: str, subscription: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_subscription_receiver(topic, subscription) as receiver:
            return _texts(receiver)


def test_jms_send_and_receive_every_message_and_property_type(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "send-receive")
    assert _peek(jms_broker, "jms-send-receive") == []


def test_jms_browser_sees_everything_and_takes_nothing(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "browser")
    assert _peek(jms_broker, "jms-browser") == []  # the scenario's consumer took them after browsing


def test_jms_transacted_session_commits_and_rolls_back(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "transacted")
    assert _peek(jms_broker, "jms-transacted") == []


def test_jms_client_acknowledge_and_recover(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "client-ack-recover")
    assert _peek(jms_broker, "jms-client-ack") == []


def test_jms_time_to_live(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "ttl")


def test_jms_delivery_delay_schedules_the_message(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "delivery-delay")


def test_jms_wrong_key_is_refused(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "wrong-key")
    assert _peek(jms_broker, "jms-wrong-key") == ["ok"]  # only the right key's message


def _subscriptions(broker: BrokerProcess, topic: str) -> list[str]:
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    with admin:
        return sorted(s.name for s in admin.list_subscriptions(topic))


def test_jms_topic_consumers_of_each_kind(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "topics")
    # The durable subscriptions stay, holding what was sent last; the non-durable ones went with
    # their consumers.
    deadline = time.monotonic() + 10
    while (names := _subscriptions(jms_broker, "jms-topic")) != ["durable-one", "shared-durable"]:
        assert time.monotonic() < deadline, names
        time.sleep(0.2)
    # durable-one also kept what was sent to the topic after its consumer closed.
    assert _peek_subscription(jms_broker, "jms-topic", "durable-one") == ["kept-for-shared", "left-for-later"]
    assert _peek_subscription(jms_broker, "jms-topic", "shared-durable") == ["left-for-later"]


def test_jms_temporary_queues_and_topics_go_with_their_connection(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "temporary")
    admin = ServiceBusAdministrationClient.from_connection_string(
        jms_broker.admin_connection_string, connection_verify=jms_broker.admin_certificate)
    deadline = time.monotonic() + 10
    with admin:
        while left := [e.name for e in [*admin.list_queues(), *admin.list_topics()] if e.name.startswith("jms-temp-")]:
            assert time.monotonic() < deadline, left
            time.sleep(0.2)


def test_jms_selectors_on_browsers_and_topic_consumers(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "selectors")


def test_jms_unsubscribe_deletes_a_durable_subscription(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "unsubscribe")
    assert "to-be-removed" not in _subscriptions(jms_broker, "jms-selector-topic")


def test_jms_topic_consumer_needs_manage(jms_broker: BrokerProcess) -> None:
    run_scenario(jms_broker, "topic-needs-manage", *LISTEN_ONLY)


def _queues(broker: BrokerProcess) -> list[str]:
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    with admin:
        return sorted(q.name for q in admin.list_queues())


def _login(broker: BrokerProcess) -> RawClient:
    return RawClient(broker.port, sasl=SaslClientConfig(mechanism="PLAIN", username=KEY_NAME, password=KEY))


def test_what_a_killed_broker_left_of_temporary_destinations_and_subscriptions_is_swept_at_start(
        tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [], Topics=TOPICS)
    process = BrokerProcess(tmp_path / "data", config).start()
    try:
        client = _login(process)
        source = Source("jms-topic", capabilities=Array("symbol", (Symbol("topic"),)))
        link = client.session.attach("jms-volatile-probe", RECEIVER, source, Target(None))
        client.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is link)
        anchor = client.session.attach("temp-anchor", SENDER, Source(None), Target(
            None, dynamic=True, capabilities=Array("symbol", (Symbol("temporary-queue"),))))
        attached = client.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is anchor)
        assert isinstance(attached, ev.LinkAttached)
        deadline = time.monotonic() + 10
        while not (names := _subscriptions(process, "jms-topic")):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert len(names) == 1 and names[0].startswith("jms-volatile-"), names
        [temp] = [q for q in _queues(process) if q.startswith("jms-temp-")]
        # Only the connection that made a temporary queue may consume from it.
        other = _login(process)
        refused = other.attach(temp, RECEIVER)
        detached = other.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is refused)
        assert isinstance(detached, ev.LinkDetached) and detached.error is not None
        assert detached.error.condition == "amqp:unauthorized-access"
        other.close()
        process.kill()  # the consumer's connection never closes: what it made stays in the store
        client.sock.close()
        process.start()
        assert _subscriptions(process, "jms-topic") == []
        assert not [q for q in _queues(process) if q.startswith("jms-temp-")]
    finally:
        process.stop()
