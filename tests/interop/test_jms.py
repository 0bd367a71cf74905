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
from collections.abc import Iterator

import pytest
import sdk_builds
from azure.servicebus import ServiceBusClient
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

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
    ("wrong-key", {}),
)]


@pytest.fixture(scope="module")
def jms_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    sdk_builds.ensure_built(sdk_builds.JMS)
    base = tmp_path_factory.mktemp("jms-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
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


def _peek(broker: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            bodies = [m.body for m in receiver.peek_messages(max_message_count=50)]
            return [b.decode() if isinstance(b, bytes) else str(b) for b in bodies]


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
