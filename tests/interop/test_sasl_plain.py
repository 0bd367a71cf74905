"""SASL PLAIN with a shared access rule's key name and key, as JMS clients log in (Service Bus Premium).

The rule's rights govern the connection with no ``$cbs`` token: a namespace rule's on every entity, an
entity's own rule's on that entity only. A wrong key fails the SASL outcome. PLAIN is offered over TLS
and on loopback; on plain TCP from another host only with ``--allow-plain-sasl-without-tls``. A
connection that logged in with a key that is then regenerated is closed.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import Accepted
from sodalite.amqp.sasl import SaslClientConfig
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

NAMESPACE_RULES = [
    {"KeyName": KEY_NAME, "PrimaryKey": KEY},
    {"KeyName": "sender", "PrimaryKey": "send-key", "SecondaryKey": "send-key-2", "Rights": ["Send"]},
]
QUEUES = [
    {"Name": "plain-open", "Properties": {}},
    {"Name": "plain-scoped", "Properties": {"AuthorizationRules": [
        {"KeyName": "scoped-listen", "PrimaryKey": "scoped-secret", "Rights": ["Listen"]}]}},
]


def _start(base: Path, *extra: str) -> BrokerProcess:
    base.mkdir(parents=True, exist_ok=True)
    config = write_config(base / "Config.json", QUEUES, AuthorizationRules=NAMESPACE_RULES)
    return BrokerProcess(base / "data", config, extra_args=list(extra)).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _start(tmp_path_factory.mktemp("sasl-plain"))
    yield process
    process.stop()


def _plain(key_name: str, key: str) -> SaslClientConfig:
    return SaslClientConfig(mechanism="PLAIN", username=key_name, password=key)


def _login(port: int, key_name: str, key: str, **kwargs: object) -> tuple[RawClient, bool]:
    client = RawClient(port, sasl=_plain(key_name, key), **kwargs)  # type: ignore[arg-type]
    try:
        done = client.wait(lambda e: isinstance(e, ev.SaslCompleted | ev.ConnectionClosed))
    except ConnectionError:
        return client, False
    return client, isinstance(done, ev.SaslCompleted) and done.succeeded


def _refusal(client: RawClient, link: Link) -> str | None:
    """The condition the broker detached ``link`` with just after attaching it, or None if it stays."""
    try:
        got = client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is link, timeout=1.0)
    except TimeoutError:
        return None
    assert isinstance(got, ev.LinkDetached) and got.error is not None
    return str(got.error.condition)


def _send(client: RawClient, link: Link, body: bytes) -> object:
    delivery_id = link.send_transfer(message(body), b"t", settled=False)
    return client.outcome(link, delivery_id)


def test_a_wrong_key_fails_the_sasl_outcome(broker: BrokerProcess) -> None:
    for key_name, key in ((KEY_NAME, "not-the-key"), ("nobody", KEY), ("scoped-listen", "wrong")):
        client, ok = _login(broker.port, key_name, key)
        client.close()
        assert not ok, (key_name, key)


def test_a_namespace_key_sends_and_receives_with_no_token(broker: BrokerProcess) -> None:
    client, ok = _login(broker.port, KEY_NAME, KEY)
    try:
        assert ok
        sender = client.attach("plain-open", SENDER)
        assert _refusal(client, sender) is None
        assert isinstance(_send(client, sender, b"hello"), Accepted)
        receiver = client.attach("plain-open", RECEIVER)
        receiver.issue_credit(1)
        assert client.receive(receiver).payload.endswith(b"hello")
    finally:
        client.close()


def test_a_rule_grants_only_its_rights_and_an_entity_rule_only_its_entity(broker: BrokerProcess) -> None:
    client, ok = _login(broker.port, "sender", "send-key-2")  # the secondary key logs in too
    try:
        assert ok
        assert _refusal(client, client.attach("plain-scoped", SENDER)) is None
        assert _refusal(client, client.attach("plain-open", RECEIVER)) == "amqp:unauthorized-access"
    finally:
        client.close()
    client, ok = _login(broker.port, "scoped-listen", "scoped-secret")
    try:
        assert ok
        assert _refusal(client, client.attach("plain-scoped", RECEIVER)) is None
        assert _refusal(client, client.attach("plain-scoped", SENDER)) == "amqp:unauthorized-access"
        assert _refusal(client, client.attach("plain-open", RECEIVER)) == "amqp:unauthorized-access"
    finally:
        client.close()


def test_a_regenerated_key_closes_the_connections_it_authorized(broker: BrokerProcess) -> None:
    import test_authorization as admin  # the HTTPS management helpers

    others, ok = _login(broker.port, KEY_NAME, KEY)
    client, ok2 = _login(broker.port, "sender", "send-key")
    try:
        assert ok and ok2
        sender = client.attach("plain-open", SENDER)
        assert isinstance(_send(client, sender, b"before"), Accepted)
        root = admin._http_token(broker, KEY_NAME, KEY)
        status, _ = admin._http(broker, "POST", "/$authorizationrules/sender/regeneratekeys", root,
                                {"keyType": "PrimaryKey"})
        assert status == 200
        closed = client.wait(lambda e: isinstance(e, ev.ConnectionClosed), timeout=10)
        assert isinstance(closed, ev.ConnectionClosed) and closed.error is not None
        assert closed.error.condition == "amqp:unauthorized-access"
        # A connection on another rule's key stays.
        assert _refusal(others, others.attach("plain-open", SENDER)) is None
        # The old primary key no longer logs in; the secondary, untouched, still does.
        assert not _login(broker.port, "sender", "send-key")[1]
        assert _login(broker.port, "sender", "send-key-2")[1]
    finally:
        client.close()
        others.close()


def test_a_token_connection_still_works(broker: BrokerProcess) -> None:
    client = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/plain-open"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        assert _refusal(client, client.attach("plain-open", SENDER)) is None
    finally:
        client.close()


def _outside_address() -> str | None:
    """An address of this machine that is not loopback (a client 'from elsewhere'), if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_plain_is_refused_on_plain_tcp_from_elsewhere_unless_allowed(tmp_path: Path) -> None:
    address = _outside_address()
    if address is None:
        pytest.skip("this machine has no address other than loopback")
    process = _start(tmp_path / "strict", "--host", "0.0.0.0")
    try:
        client, ok = _login(process.port, KEY_NAME, KEY, host=address)
        client.close()
        assert not ok  # PLAIN is not even offered: the key never crosses the network in clear
        context = ssl.create_default_context(cafile=process.tls_certificate)
        context.check_hostname = False
        client, ok = _login(process.amqps_port, KEY_NAME, KEY, host=address, tls=context)
        client.close()
        assert ok  # over TLS it is
    finally:
        process.stop()
    process = _start(tmp_path / "allowed", "--host", "0.0.0.0", "--allow-plain-sasl-without-tls")
    try:
        client, ok = _login(process.port, KEY_NAME, KEY, host=address)
        client.close()
        assert ok
    finally:
        process.stop()


def test_a_key_login_counts_as_authenticated_for_the_authentication_deadline(tmp_path: Path) -> None:
    process = _start(tmp_path, "--auth-timeout", "1")
    try:
        client, ok = _login(process.port, KEY_NAME, KEY)
        try:
            assert ok
            client.wait(lambda e: isinstance(e, ev.ConnectionOpened))
            time.sleep(2.5)  # past the deadline: a connection without a token would be closed by now
            sender = client.attach("plain-open", SENDER)
            assert isinstance(_send(client, sender, b"still here"), Accepted)
        finally:
            client.close()
        anonymous = RawClient(process.port)  # no token, no key: closed at the deadline
        try:
            closed = anonymous.wait(lambda e: isinstance(e, ev.ConnectionClosed), timeout=10)
            assert isinstance(closed, ev.ConnectionClosed)
        finally:
            anonymous.sock.close()
    finally:
        process.stop()
