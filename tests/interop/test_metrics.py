"""Prometheus metrics and structured JSON logs, observed from outside a broker started as users start it.

Counters are compared before and after each test's traffic (the module shares one broker); gauges
are read per entity, each test using its own queue.
"""

from __future__ import annotations

import json
import re
import ssl
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import ResourceExistsError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusError,
)
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.interop

QUEUES: list[dict[str, Any]] = [
    {"Name": "metered", "Properties": {}},
    {"Name": "logged", "Properties": {}},
    {"Name": "logged-sessions", "Properties": {"RequiresSession": True}},
]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("metrics")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES),
                            extra_args=["--metrics-port", "0", "--log-format", "json", "--log-level", "INFO"]).start()
    yield process
    process.stop()


def _parse(text: str) -> Samples:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape(broker: BrokerProcess) -> Samples:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
        return _parse(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_known_traffic(broker: BrokerProcess) -> None:
    before = scrape(broker)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("metered") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
        with client.get_queue_receiver("metered") as receiver:
            received = []
            while len(received) < 4:
                received += receiver.receive_messages(max_message_count=4 - len(received), max_wait_time=10)
            for message in received[:3]:
                receiver.complete_message(message)
            receiver.dead_letter_message(received[3], reason="test")
        with client.get_queue_receiver("metered"):  # one connection held open while scraping
            after = scrape(broker)
            deadline = time.monotonic() + 10  # the first two connections may still be closing on the broker side
            while value(after, "sodalite_connections_open") != 1 and time.monotonic() < deadline:
                time.sleep(0.1)
                after = scrape(broker)
    assert value(after, "sodalite_connections_open") == 1

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("sodalite_messages_in_total", entity="metered") == 5
    assert delta("sodalite_deliveries_total", entity="metered") == 4
    assert delta("sodalite_messages_out_total", entity="metered") == 3  # dead-lettering moves, not removes
    assert value(after, "sodalite_active_messages", entity="metered") == 1
    assert value(after, "sodalite_dead_letter_messages", entity="metered") == 1
    assert value(after, "sodalite_scheduled_messages", entity="metered") == 0
    assert delta("sodalite_connections_total") == 3  # one connection per SDK handler
    assert delta("sodalite_store_commit_seconds_count") > 0


def test_errors_are_counted_by_condition(broker: BrokerProcess) -> None:
    before = value(scrape(broker), "sodalite_errors_total", condition="amqp:not-found")
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        # the put-token for a missing entity is answered 404 (the SDK's authentication error)
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("no-such-queue") as sender:
            sender.send_messages(ServiceBusMessage("x"))
    assert value(scrape(broker), "sodalite_errors_total", condition="amqp:not-found") == before + 1


def test_management_api_serves_metrics(broker: BrokerProcess) -> None:
    # Scrapers carry no SAS token: /metrics is exempt from the management API's check.
    context = ssl.create_default_context(cafile=broker.admin_certificate)
    url = f"https://localhost:{broker.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        samples = _parse(response.read().decode())
    assert ("sodalite_connections_open", frozenset()) in samples
    assert ("sodalite_active_messages", frozenset({("entity", "metered")})) in samples


# ---- structured logs ------------------------------------------------------------------------------

TRACKING_ID = re.compile(r"TrackingId:([0-9a-f]{32})")


def _tracking_id(error: BaseException) -> str:
    match = TRACKING_ID.search(str(error))
    assert match is not None, f"no tracking id in {error}"
    return match.group(1)


def _records(broker: BrokerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in list(broker.output) if line.startswith("{")]


def _logged(broker: BrokerProcess, tracking_id: str) -> list[dict[str, Any]]:
    """The broker's JSON log records carrying ``tracking_id`` (its output is read by another thread)."""
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in _records(broker) if r.get("tracking_id") == tracking_id]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_client_errors_are_logged_once_with_their_tracking_id(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        # A put-token answered 404: the entity does not exist.
        with pytest.raises(ServiceBusAuthenticationError) as not_found, \
                client.get_queue_sender("missing-entity") as sender:
            sender.send_messages(ServiceBusMessage("x"))
        # A rejected send: a session entity refuses a message without a SessionId.
        with pytest.raises(ServiceBusError) as rejected, client.get_queue_sender("logged-sessions") as sender:
            sender.send_messages(ServiceBusMessage("no session id"))
        # A $management error response: no deferred message has this sequence number.
        with pytest.raises(MessageNotFoundError) as management, client.get_queue_receiver("logged") as receiver:
            receiver.receive_deferred_messages([123456789])

    cases = [(not_found.value.inner_exception, "INFO", "amqp:not-found", "missing-entity", "cbs"),
             (rejected.value, "WARNING", "amqp:not-allowed", "logged-sessions", "rejected"),
             (management.value, "INFO", "com.microsoft:message-not-found", "logged", "management")]
    for error, level, condition, entity, kind in cases:
        [record] = _logged(broker, _tracking_id(error))  # exactly one line per error
        observed = (record["level"], record["condition"], record["entity"], record["kind"])
        assert observed == (level, condition, entity, kind)
        assert record["logger"] == "sodalite.server.amqp_errors"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", record["connection"])
        assert record["time"] and record["message"]


def test_refused_put_token_is_logged_with_a_tracking_id(broker: BrokerProcess) -> None:
    # The SDK does not show a put-token's status description, where the id is; the log line still has one.
    def cbs_records() -> list[dict[str, Any]]:
        return [r for r in _records(broker) if r.get("kind") == "cbs"]

    seen = len(cbs_records())
    with ServiceBusClient.from_connection_string(broker.connection_string_with(key="wrong"), retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("logged") as sender:
            sender.send_messages(ServiceBusMessage("x"))
    deadline = time.monotonic() + 10
    while len(cbs_records()) == seen and time.monotonic() < deadline:
        time.sleep(0.05)
    [record] = cbs_records()[seen:]
    assert (record["level"], record["condition"]) == ("WARNING", "amqp:unauthorized-access")
    assert re.fullmatch(r"[0-9a-f]{32}", record["tracking_id"])


def test_management_api_errors_carry_a_logged_tracking_id(broker: BrokerProcess) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(broker.admin_connection_string,
                                                                  connection_verify=broker.admin_certificate)
    with admin, pytest.raises(ResourceExistsError) as error:
        admin.create_queue("logged")
    [record] = _logged(broker, _tracking_id(error.value))
    observed = (record["level"], record["condition"], record["status"], record["kind"])
    assert observed == ("INFO", "com.microsoft:entity-already-exists", 409, "http")
