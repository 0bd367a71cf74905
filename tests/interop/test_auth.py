"""SAS authentication through $cbs: a wrong key, an expired token and a foreign audience are refused."""

from __future__ import annotations

import time
from urllib.parse import quote_plus

import pytest
from azure.core.credentials import AzureSasCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusError
from broker_process import KEY, KEY_NAME, BrokerProcess
from raw_client import RawClient

from sodalite.amqp import events as ev
from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Source, Target
from sodalite.model.sas import generate_token, sign

pytestmark = pytest.mark.interop


def _send_with(broker: BrokerProcess, token: str) -> None:
    client = ServiceBusClient(f"localhost:{broker.port}", AzureSasCredential(token), use_tls=False, retry_total=0)
    with client, client.get_queue_sender("misc") as sender:
        sender.send_messages(ServiceBusMessage("should not arrive"))


def test_wrong_key_is_refused(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string_with(key="not-the-key"),
                                                 retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("misc") as sender:
            sender.send_messages(ServiceBusMessage("x"))


def test_unknown_key_name_is_refused(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string_with(key_name="SomeoneElse"),
                                                 retry_total=0) as client:
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("misc") as sender:
            sender.send_messages(ServiceBusMessage("x"))


def test_valid_sas_token_credential_is_accepted(broker: BrokerProcess) -> None:
    token = generate_token(f"sb://localhost:{broker.port}/misc", KEY_NAME, KEY, int(time.time()) + 300)
    _send_with(broker, token)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver("misc") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(m)
            assert str(m) == "should not arrive"  # it did arrive: the token was good


def test_expired_token_is_refused_by_the_broker(broker: BrokerProcess) -> None:
    # The SDK refuses to send an expired token itself, so a raw client sends it to prove the broker checks.
    audience = f"sb://localhost:{broker.port}/misc"
    client = RawClient(broker.port)
    try:
        expired = int(time.time()) - 60
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expired), expired * 1000) == 401
        assert _attach_error(client, broker.port) == "amqp:unauthorized-access"
        valid = int(time.time()) + 60
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, valid), valid * 1000) == 202
        assert _attach_error(client, broker.port) is None
    finally:
        client.close()


def _attach_error(client: RawClient, port: int) -> str | None:
    """Attach a sender to 'misc'; the refusal's condition, or None if the broker accepted it."""
    link = client.session.attach(f"l-{time.monotonic()}", SENDER, Source("x"), Target(f"amqps://localhost:{port}/misc"))
    client.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is link)
    if link.state == "attached":
        return None
    detached = client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is link)
    assert isinstance(detached, ev.LinkDetached) and detached.error is not None
    return detached.error.condition


def test_entity_link_without_a_token_is_refused(broker: BrokerProcess) -> None:
    client = RawClient(broker.port)
    try:
        assert _attach_error(client, broker.port) == "amqp:unauthorized-access"
    finally:
        client.close()


def test_expired_token_credential_fails_in_the_sdk(broker: BrokerProcess) -> None:
    token = generate_token(f"sb://localhost:{broker.port}/misc", KEY_NAME, KEY, int(time.time()) - 60)
    with pytest.raises(ServiceBusError):
        _send_with(broker, token)


def test_audience_outside_the_namespace_is_refused(broker: BrokerProcess) -> None:
    token = generate_token("sb://elsewhere.example:5672/misc", KEY_NAME, KEY, int(time.time()) + 300)
    with pytest.raises(ServiceBusAuthenticationError):
        _send_with(broker, token)


def _go_style_token(audience: str, expiry: int) -> str:
    """A token as the Go SDK's ``sas.CreateConnectionStringWithSASUsingExpiry`` makes it: ``sr`` is the
    namespace as ``host:port`` (no scheme), lower-cased and query-escaped, signed as written."""
    escaped = quote_plus(audience).lower()
    signature = quote_plus(sign(escaped, expiry, KEY))
    return f"SharedAccessSignature sr={escaped}&sig={signature}&se={expiry}&skn={KEY_NAME}"


@pytest.mark.parametrize("audience", ["localhost:{port}", "localhost:{port}/misc", "localhost", "localhost/misc"])
def test_scheme_less_host_port_audience_is_accepted(broker: BrokerProcess, audience: str) -> None:
    _send_with(broker, _go_style_token(audience.format(port=broker.port), int(time.time()) + 300))
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver("misc") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(m)
            assert str(m) == "should not arrive"  # it did arrive: the token was good


@pytest.mark.parametrize("audience", ["elsewhere.example:{port}", "elsewhere.example:{port}/misc"])
def test_scheme_less_audience_of_another_host_is_refused(broker: BrokerProcess, audience: str) -> None:
    with pytest.raises(ServiceBusAuthenticationError):
        _send_with(broker, _go_style_token(audience.format(port=broker.port), int(time.time()) + 300))


def test_token_for_another_entity_does_not_open_this_one(broker: BrokerProcess) -> None:
    token = generate_token(f"sb://localhost:{broker.port}/orders", KEY_NAME, KEY, int(time.time()) + 300)
    with pytest.raises(ServiceBusAuthenticationError):
        _send_with(broker, token)
