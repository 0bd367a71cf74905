"""Rule management through $management (add-rule, remove-rule, enumerate-rules), as .NET and Java send it.

The Python SDK manages rules over HTTP only (contract 6.11), so a raw AMQP client drives these.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.amqp.types import Described
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop
NODE = "events/subscriptions/audit/$management"


def _client(broker: BrokerProcess) -> RawClient:
    client = RawClient(broker.port)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    return client


def _rules(client: RawClient) -> dict[str, tuple[object, object]]:
    status, _, body = client.management(NODE, "com.microsoft:enumerate-rules", {"top": 100, "skip": 0})
    if status == 204:
        return {}
    assert status == 200
    out = {}
    for entry in body["rules"]:
        described = entry["rule-description"]
        assert isinstance(described, Described) and described.descriptor == 0x0000013700000004
        filter_, action, name = described.value
        out[name] = (filter_, action)
    return out


def _bodies(broker: BrokerProcess) -> list[tuple[str, dict[bytes, object]]]:
    got = []
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb, \
            sb.get_subscription_receiver("events", "audit") as receiver:
        # Until a peek finds the subscription empty: every copy is stored before its send is
        # acknowledged, so nothing more is on its way.
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=20, max_wait_time=5):
                got.append((str(m), dict(m.application_properties or {})))
                receiver.complete_message(m)
    return got


def test_rules_are_added_enumerated_removed_and_kept_across_restarts(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [], Topics=[
        {"Name": "events", "Properties": {}, "Subscriptions": [{"Name": "audit", "Properties": {}}]}])
    broker = BrokerProcess(tmp_path / "data", config).start()
    try:
        client = _client(broker)
        assert set(_rules(client)) == {"$Default"}
        status, condition, _ = client.management(NODE, "com.microsoft:add-rule", {
            "rule-name": "vip", "rule-description": {
                "sql-filter": {"expression": "tier = 'gold'"}, "sql-rule-action": {"expression": "SET seen = 1"}}})
        assert status == 200, condition
        status, condition, _ = client.management(NODE, "com.microsoft:add-rule", {
            "rule-name": "broken", "rule-description": {"sql-filter": {"expression": "tier = = 'x'"}}})
        assert (status, condition) == (400, "com.microsoft:argument-error")
        status, condition, _ = client.management(NODE, "com.microsoft:add-rule", {
            "rule-name": "VIP", "rule-description": {"correlation-filter": {"label": "x"}}})
        assert (status, condition) == (409, "com.microsoft:entity-already-exists")
        status, _, _ = client.management(NODE, "com.microsoft:remove-rule", {"rule-name": "$Default"})
        assert status == 200
        rules = _rules(client)
        assert set(rules) == {"vip"}
        filter_, action = rules["vip"]
        assert isinstance(filter_, Described) and filter_.value == ["tier = 'gold'"]
        assert isinstance(action, Described) and action.value == ["SET seen = 1"]
        # The codes the SDKs decode (Java ServiceBusConstants, JS descriptorCodes): SQL filter and SQL
        # action differ.
        assert (filter_.descriptor, action.descriptor) == (0x0000001370000006, 0x0000013700000006)
        client.close()

        broker.kill()
        broker.start()  # the rules were stored: they come back
        client = _client(broker)
        assert set(_rules(client)) == {"vip"}
        with ServiceBusClient.from_connection_string(broker.connection_string) as sb, \
                sb.get_topic_sender("events") as sender:
            sender.send_messages([ServiceBusMessage("gold", application_properties={"tier": "gold"}),
                                  ServiceBusMessage("plain", application_properties={"tier": "tin"})])
        [(body, props)] = _bodies(broker)
        assert body == "gold" and props[b"seen"] == 1 and props[b"RuleName"] == b"vip"
        status, condition, _ = client.management(NODE, "com.microsoft:remove-rule", {"rule-name": "nope"})
        assert (status, condition) == (404, "amqp:not-found")
        client.close()
    finally:
        broker.stop()
