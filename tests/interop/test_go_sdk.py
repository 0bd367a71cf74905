"""The official Go SDK, ``azservicebus`` from the Go module proxy, against the broker.

The scenarios are Go (``tests/go``), built by ``scripts/test``, or here when the binary is missing or
older than its sources (``sdk_builds``). Each test runs one scenario with the emulator connection
string of the one broker this module starts and asserts that it printed ``PASS``; the scenario
checks what the SDK returns, and where it leaves messages behind, the Python SDK checks them from the
other side. Two things only Go showed: its AMQP open names the host with its port (``localhost:5672``),
which the token check must accept, and it sends and reads the session filter as a described value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import sdk_builds
from azure.servicebus import ServiceBusClient
from broker_process import BrokerProcess, write_config

GO = shutil.which("go")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(GO is None, reason="go is not installed: the Go SDK tests need Go 1.25 or later"),
]

QUEUES = [
    {"Name": "go-msg", "Properties": {}},
    {"Name": "go-sessions", "Properties": {"RequiresSession": True}},
    {"Name": "go-states", "Properties": {}},
    {"Name": "go-texts", "Properties": {}},
    {"Name": "go-counts", "Properties": {}},
]


@pytest.fixture(scope="module")
def go_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    sdk_builds.ensure_built(sdk_builds.GO)
    base = tmp_path_factory.mktemp("go-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def run_scenario(broker: BrokerProcess, scenario: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run([str(sdk_builds.GO.path(sdk_builds.GO.outputs[0])), broker.connection_string, scenario],
                          capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout.splitlines(), output[-4000:]


def test_go_messaging_send_peek_receive_renew_abandon_complete(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "messaging")
    with ServiceBusClient.from_connection_string(go_broker.connection_string) as client:
        with client.get_queue_receiver("go-msg") as receiver:
            assert receiver.peek_messages(max_message_count=10) == []  # Go took every one


def test_go_sessions_named_and_next_with_state(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "sessions")
    with ServiceBusClient.from_connection_string(go_broker.connection_string) as client:
        with client.get_queue_receiver("go-sessions", session_id="go-a") as receiver:
            assert receiver.session.get_state() == b"step-3"  # the state Go set, read by Python
            assert receiver.peek_messages(max_message_count=10) == []


def test_go_schedule_cancel_defer_and_dead_letter(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "schedule-defer-dead-letter")
    with ServiceBusClient.from_connection_string(go_broker.connection_string) as client:
        with client.get_queue_receiver("go-states") as receiver:
            left = receiver.peek_messages(max_message_count=10)
    assert [m.message_id for m in left] == ["sched-kept"]  # still scheduled; the cancelled one is gone


def test_go_error_texts_in_service_bus_words(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "error-texts")


def test_go_missing_entity_is_not_found_at_put_token(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "missing-entity")


def test_go_connection_string_with_a_host_port_shared_access_signature(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "embedded-sas")


def test_go_amqp_over_a_websocket_with_the_subprotocol_amqp(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "websocket",
                 {"SODALITE_WS_URL": f"ws://localhost:{go_broker.http_port}/$servicebus/websocket"})


def test_go_delivery_count_kept_by_a_dead_lettering(go_broker: BrokerProcess) -> None:
    run_scenario(go_broker, "delivery-count")
