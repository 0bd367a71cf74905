"""Broker side of paired namespaces (issue 15): pings are accepted and never seen again, and the
management API answers on the AMQP port (HTTPS and plain HTTP), sniffed by the first byte."""

from __future__ import annotations

import http.client
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

PING = "application/vnd.ms-servicebus-ping"
QUEUES = [
    {"Name": "plain", "Properties": {}},
    {"Name": "sessions", "Properties": {"RequiresSession": True}},
    {"Name": "forwarding", "Properties": {"ForwardTo": "plain"}},
    {"Name": "scheduling", "Properties": {}},
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("paired-broker")
    config = write_config(base / "Config.json", QUEUES, Topics=[
        {"Name": "news", "Subscriptions": [{"Name": "all", "Properties": {}}]}])
    process = BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def _ping() -> ServiceBusMessage:
    return ServiceBusMessage(b"", content_type=PING, time_to_live=timedelta(seconds=1))


def _admin(broker: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.connection_string, connection_verify=str(broker.data_dir / "admin-cert.pem"))


def test_pings_are_accepted_everywhere_and_never_delivered_peeked_or_counted(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        for entity in ("plain", "sessions", "forwarding"):
            with client.get_queue_sender(entity) as sender:
                sender.send_messages(_ping())  # a session queue takes it without a SessionId
                sender.send_messages([_ping(), _ping()])
        with client.get_topic_sender("news") as sender:
            sender.send_messages(_ping())
        with client.get_queue_sender("plain") as sender:
            sender.send_messages([ServiceBusMessage("real"), _ping()])  # a batch mixing both
        with client.get_queue_receiver("plain") as receiver:
            assert [str(m) for m in receiver.peek_messages(max_message_count=50)] == ["real"]
            got = receiver.receive_messages(max_message_count=50, max_wait_time=3)
            assert [str(m) for m in got] == ["real"]
            for m in got:
                receiver.complete_message(m)
            assert receiver.receive_messages(max_message_count=10, max_wait_time=2) == []
        with client.get_subscription_receiver("news", "all") as receiver:
            assert receiver.peek_messages(max_message_count=10) == []
            assert receiver.receive_messages(max_message_count=10, max_wait_time=2) == []
        with client.get_queue_receiver("plain", sub_queue="deadletter") as receiver:
            assert receiver.peek_messages(max_message_count=10) == []
    admin = _admin(broker)
    for entity in ("plain", "sessions", "forwarding"):
        runtime = admin.get_queue_runtime_properties(entity)
        assert (runtime.active_message_count, runtime.scheduled_message_count,
                runtime.dead_letter_message_count) == (0, 0, 0)
    assert admin.get_subscription_runtime_properties("news", "all").active_message_count == 0


def test_a_scheduled_ping_is_dropped_as_a_sent_one(broker: BrokerProcess) -> None:
    """Pings are never scheduled: schedule-message through $management drops them, keeps the rest."""
    at = datetime.now(UTC) + timedelta(minutes=10)
    admin = _admin(broker)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("sessions") as sender:
            assert sender.schedule_messages(_ping(), at) == [0]  # no SessionId needed, nothing kept
        assert admin.get_queue_runtime_properties("sessions").scheduled_message_count == 0
        with client.get_queue_sender("scheduling") as sender:
            numbers = sender.schedule_messages([_ping(), ServiceBusMessage("real"), _ping()], at)
            assert numbers[0] == 0 and numbers[2] == 0 and numbers[1] > 0
            assert admin.get_queue_runtime_properties("scheduling").scheduled_message_count == 1
            with client.get_queue_receiver("scheduling") as receiver:
                assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["real"]
            with pytest.raises(ServiceBusError):
                sender.cancel_scheduled_messages(0)  # 0 names no message
            sender.cancel_scheduled_messages(numbers[1])  # the real one's number is its own
        assert admin.get_queue_runtime_properties("scheduling").scheduled_message_count == 0


def test_a_ping_still_needs_the_send_right(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string_with(key="wrong")) as client:
        with pytest.raises(ServiceBusError):
            with client.get_queue_sender("plain") as sender:
                sender.send_messages(_ping())


def test_the_admin_client_works_on_the_amqp_port_with_the_emulator_string(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_queue("contoso/x-servicebus-transfer/0", max_delivery_count=7)
    try:
        assert admin.get_queue("contoso/x-servicebus-transfer/0").max_delivery_count == 7
        # ... and the same port still speaks AMQP to the messaging client
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("contoso/x-servicebus-transfer/0") as sender:
                sender.send_messages(ServiceBusMessage("over amqp"))
        assert admin.get_queue_runtime_properties("contoso/x-servicebus-transfer/0").active_message_count == 1
    finally:
        admin.delete_queue("contoso/x-servicebus-transfer/0")


def test_plain_http_on_the_amqp_port(broker: BrokerProcess) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.port}/health", timeout=10) as response:
        assert response.read() == b"ok"


def test_the_shared_port_can_be_turned_off(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", None, extra_args=["--no-management-on-amqp-port"]).start()
    try:
        assert (tmp_path / "data" / "admin-cert.pem").exists()
        with pytest.raises((OSError, http.client.HTTPException)):  # the AMQP header answers
            urllib.request.urlopen(f"http://127.0.0.1:{process.port}/health", timeout=10)
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            with client.get_queue_sender("queue.1") as sender:
                sender.send_messages(ServiceBusMessage("still amqp"))
    finally:
        process.stop()
