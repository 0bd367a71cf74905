"""The official Java SDK, ``azure-messaging-servicebus`` from Maven Central, against the broker.

The scenarios are Java (``tests/java``, ``sodalite.interop.Scenarios``), built with Maven by
``scripts/test``, or here when the build is missing or older than its sources (``sdk_builds``).
Each test runs one scenario in its own JVM with the emulator connection string of the one broker
this module starts, and asserts that it printed ``PASS``; the scenario checks what the SDK returns,
and where it leaves messages behind, the Python SDK checks them from the other side. Transactions are the reason for
this module: the Python SDK has none, .NET's and Java's do.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
import sdk_builds
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from azure.servicebus.management import FalseRuleFilter, ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

JAVA = shutil.which("java")
MVN = shutil.which("mvn")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(JAVA is None or MVN is None,
                       reason="java and mvn are not installed: the Java SDK tests need a JDK 17 and Maven"),
]

QUEUES = [
    {"Name": "java-msg", "Properties": {}},
    {"Name": "java-tx", "Properties": {"LockDuration": "PT5S"}},  # a rolled-back complete comes back soon
    {"Name": "java-tx-out", "Properties": {}},
    {"Name": "java-sessions", "Properties": {"RequiresSession": True}},
    {"Name": "java-states", "Properties": {}},
    {"Name": "java-via-in", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "java-via-out", "Properties": {}},
    {"Name": "java-via-out-2", "Properties": {}},
    {"Name": "java-processed", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "java-peek", "Properties": {}},
]
TOPICS = [{"Name": "java-topic", "Properties": {},
           "Subscriptions": [{"Name": "java-red", "Properties": {}}, {"Name": "java-all", "Properties": {}}]},
          {"Name": "java-rules", "Properties": {}, "Subscriptions": [{"Name": "java-rules-sub", "Properties": {}}]}]


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    sdk_builds.ensure_built(sdk_builds.JAVA)
    base = tmp_path_factory.mktemp("java-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS)).start()
    yield process
    process.stop()


def run_scenario(broker: BrokerProcess, scenario: str, *properties: str) -> str:
    assert JAVA is not None
    command = [JAVA, *properties, "-cp", sdk_builds.java_classpath(), "sodalite.interop.Scenarios",
               broker.connection_string, scenario]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout.splitlines(), output[-4000:]
    return output


def _drain(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue, max_wait_time=3) as receiver:
            ids: list[str] = []
            for message in receiver:
                ids.append(str(message.message_id))
                receiver.complete_message(message)
            return ids


def _peek_count(broker: BrokerProcess, queue: str) -> int:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            return len(receiver.peek_messages(max_message_count=50))


def test_java_messaging_send_peek_receive_renew_abandon_complete(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "messaging")
    assert _peek_count(java_broker, "java-msg") == 0  # Java completed or received-and-deleted every one


def test_java_transactions_commit_and_roll_back(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "transactions")
    assert _peek_count(java_broker, "java-tx") == 0
    # Only the committed transaction's two sends are there; the rolled-back one never was.
    assert sorted(_drain(java_broker, "java-tx-out")) == ["java-tx-1", "java-tx-2"]


def test_java_sessions_in_order_with_state(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "sessions")
    with ServiceBusClient.from_connection_string(java_broker.connection_string) as client:
        with client.get_queue_receiver("java-sessions", session_id="java-a") as receiver:
            assert receiver.session.get_state() == b"step-3"  # the state Java set, read by Python
            assert receiver.peek_messages(max_message_count=10) == []


def test_java_schedule_cancel_defer_and_dead_letter(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "schedule-defer-dead-letter")
    with ServiceBusClient.from_connection_string(java_broker.connection_string) as client:
        with client.get_queue_receiver("java-states") as receiver:
            left = receiver.peek_messages(max_message_count=10)
    assert [m.message_id for m in left] == ["sched-kept"]  # still scheduled; the cancelled one is gone


def test_java_administration_client(java_broker: BrokerProcess) -> None:
    # The Java administration client always dials https on port 443; the scenario adds a pipeline
    # policy that sends its requests to the broker's plain-HTTP management port instead.
    endpoint = f"http://127.0.0.1:{java_broker.http_port}"
    run_scenario(java_broker, "administration", f"-Dsodalite.admin.endpoint={endpoint}")
    with ServiceBusClient.from_connection_string(java_broker.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError):  # the queue Java made and deleted is gone (404)
            with client.get_queue_sender("java-made") as sender:
                sender.send_messages(ServiceBusMessage("x"))


def test_java_cross_entity_transactions_send_via_the_first_entity(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "cross-entity-transactions")
    # The committed transaction: via-2 completed, its two copies stored; the rolled-back one: via-1 kept
    # (it comes back when its lock lapses), its copy never stored.
    assert _drain(java_broker, "java-via-out") == ["via-forwarded"]
    assert _drain(java_broker, "java-via-out-2") == ["via-forwarded-2"]
    assert _drain(java_broker, "java-via-in") == ["via-1"]


def test_java_processor_client_and_a_topic_filtered_by_a_rule(java_broker: BrokerProcess) -> None:
    endpoint = f"http://127.0.0.1:{java_broker.http_port}"
    run_scenario(java_broker, "processor-and-topics", f"-Dsodalite.admin.endpoint={endpoint}")
    admin = ServiceBusAdministrationClient.from_connection_string(
        java_broker.admin_connection_string, connection_verify=java_broker.admin_certificate)
    rules = {rule.name: rule.filter.sql_expression for rule in admin.list_rules("java-topic", "java-red")}
    assert rules == {"red-only": "color = 'red' AND size > 2"}  # the rule Java made, read by Python


def test_java_rule_manager_lists_creates_and_deletes_rules(java_broker: BrokerProcess) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(
        java_broker.admin_connection_string, connection_verify=java_broker.admin_certificate)
    # A FalseFilter can be made only through the administration API (Java's rule manager sends SQL "1=0").
    admin.create_rule("java-rules", "java-rules-sub", "never", filter=FalseRuleFilter())
    run_scenario(java_broker, "rule-manager")
    assert sorted(rule.name for rule in admin.list_rules("java-rules", "java-rules-sub")) == ["big", "orders", "red"]


def test_java_peek_by_sequence_number(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "peek-by-sequence-number")
    assert _peek_count(java_broker, "java-peek") == 0


def test_java_session_state_cleared_by_null_and_by_an_empty_array(java_broker: BrokerProcess) -> None:
    run_scenario(java_broker, "session-state")
    with ServiceBusClient.from_connection_string(java_broker.connection_string) as client:
        with client.get_queue_receiver("java-sessions", session_id="java-state") as receiver:
            assert receiver.session.get_state() is None


def test_java_administration_client_on_the_messaging_connection_string(java_broker: BrokerProcess) -> None:
    endpoint = f"http://127.0.0.1:{java_broker.http_port}"
    run_scenario(java_broker, "administration-on-the-messaging-connection-string",
                 f"-Dsodalite.admin.endpoint={endpoint}")
