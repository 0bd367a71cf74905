"""The message size limit: refused by the broker itself, and raised per namespace."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

from sodalite.amqp import events as ev
from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Rejected
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop


def test_an_oversized_message_is_rejected_by_the_broker(broker: BrokerProcess) -> None:
    # The SDK refuses oversized messages itself, so a raw client sends one to the 256 KB default.
    client = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/misc"
        expiry = int(time.time()) + 60
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        sender = client.attach(f"amqps://localhost:{broker.port}/misc", SENDER)
        assert sender.remote_max_message_size == 256 * 1024  # what the SDK sizes its batches by
        sender.send_transfer(message(b"z" * 300_000), b"\x01", settled=False)
        outcome = client.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is sender)
        assert isinstance(outcome, ev.DeliveryUpdated) and isinstance(outcome.state, Rejected)
        assert outcome.state.error is not None
        assert outcome.state.error.condition == "amqp:link:message-size-exceeded"
    finally:
        client.close()


def test_a_namespace_can_allow_larger_messages(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [{"Name": "big", "Properties": {}}],
                          MaxMessageSizeInKilobytes=1024)
    broker = BrokerProcess(tmp_path / "data", config).start()
    try:
        body = b"L" * 600_000
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("big") as sender:
                sender.send_messages(ServiceBusMessage(body))
            with client.get_queue_receiver("big") as receiver:
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert b"".join(m.body) == body
                receiver.complete_message(m)
    finally:
        broker.stop()
