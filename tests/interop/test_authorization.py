"""Authorization rules: Send / Listen / Manage rights and entity-level keys, over AMQP and HTTP.

Keys come from Config.json. The SDK (sync and aio) shows what an application sees; the raw client
covers what the SDK will not do (expired tokens, letting a token lapse, $management rule operations).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncClient
from azure.servicebus.exceptions import ServiceBusAuthenticationError, ServiceBusAuthorizationError
from azure.servicebus.management import AccessRights, AuthorizationRule, ServiceBusAdministrationClient
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

from sodalite.amqp import events as ev
from sodalite.amqp.link import RECEIVER, SENDER
from sodalite.client.failover import is_entity_not_found
from sodalite.model.sas import generate_token, sign

pytestmark = pytest.mark.interop

NAMESPACE_RULES = [
    {"KeyName": KEY_NAME, "PrimaryKey": KEY},
    {"KeyName": "sender", "PrimaryKey": "send-key", "Rights": ["Send"]},
    {"KeyName": "listener", "PrimaryKey": "listen-key", "SecondaryKey": "listen-key-2", "Rights": ["Listen"]},
]
QUEUES = [
    {"Name": "open", "Properties": {}},
    {"Name": "other", "Properties": {}},
    {"Name": "expiry", "Properties": {}},
    {"Name": "scoped", "Properties": {"AuthorizationRules": [
        {"KeyName": "scoped-key", "PrimaryKey": "scoped-secret", "Rights": ["Send", "Listen"]},
        {"KeyName": "scoped-admin", "PrimaryKey": "scoped-admin-secret"},
    ]}},
]
TOPICS = [{"Name": "news", "Properties": {"AuthorizationRules": [
    {"KeyName": "news-key", "PrimaryKey": "news-secret", "Rights": ["Send", "Listen"]}]},
    "Subscriptions": [{"Name": "all", "Properties": {}}]}]


def _config(base: Path) -> Path:
    return write_config(base / "Config.json", QUEUES, AuthorizationRules=NAMESPACE_RULES, Topics=TOPICS)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("authorization")
    process = BrokerProcess(base / "data", _config(base)).start()
    yield process
    process.stop()


def _client(broker: BrokerProcess, key_name: str, key: str) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string_with(key, key_name), retry_total=0)


def _admin(broker: BrokerProcess, key_name: str, key: str) -> ServiceBusAdministrationClient:
    connection_string = (broker.admin_connection_string.replace(KEY_NAME, key_name).replace(KEY, key))
    return ServiceBusAdministrationClient.from_connection_string(
        connection_string, connection_verify=broker.admin_certificate, retry_total=0)


def _drain(broker: BrokerProcess, queue: str) -> list[str]:
    with _client(broker, KEY_NAME, KEY) as client, client.get_queue_receiver(queue, max_wait_time=2) as receiver:
        got = receiver.receive_messages(max_message_count=50, max_wait_time=5)
        for m in got:
            receiver.complete_message(m)
        return [str(m) for m in got]


# ---- AMQP: rights ----------------------------------------------------------------------------------


def test_a_send_only_key_sends_but_cannot_receive_or_peek(broker: BrokerProcess) -> None:
    with _client(broker, "sender", "send-key") as client:
        with client.get_queue_sender("open") as sender:
            sender.send_messages(ServiceBusMessage("sent with Send"))
            sender.schedule_messages(ServiceBusMessage("scheduled with Send"),
                                     datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
        with pytest.raises(ServiceBusAuthorizationError), client.get_queue_receiver("open") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)
    assert _drain(broker, "open") == ["sent with Send"]


def test_a_listen_only_key_receives_but_cannot_send_or_schedule(broker: BrokerProcess) -> None:
    with _client(broker, KEY_NAME, KEY) as client, client.get_queue_sender("other") as sender:
        sender.send_messages(ServiceBusMessage("for the listener"))

    async def run() -> None:
        # The secondary key works as well as the primary.
        conn = broker.connection_string_with("listen-key-2", "listener")
        async with AsyncClient.from_connection_string(conn, retry_total=0) as client:
            async with client.get_queue_receiver("other", max_wait_time=5) as receiver:
                [peeked] = await receiver.peek_messages(max_message_count=1)
                assert str(peeked) == "for the listener"
                [m] = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
                await receiver.complete_message(m)
            with pytest.raises(ServiceBusAuthorizationError):
                async with client.get_queue_sender("other") as sender:
                    await sender.send_messages(ServiceBusMessage("refused"))

    asyncio.run(run())
    assert _drain(broker, "other") == []


def _raw(broker: BrokerProcess, key_name: str, key: str, path: str = "", expires_in: int = 300) -> RawClient:
    client = RawClient(broker.port)
    audience = f"sb://localhost:{broker.port}/{path}"
    expiry = int(time.time()) + expires_in
    assert client.put_token(audience, generate_token(audience, key_name, key, expiry), expiry * 1000) == 202
    return client


def test_management_operations_check_their_rights(broker: BrokerProcess) -> None:
    peek = ("com.microsoft:peek-message", {"from-sequence-number": 1, "message-count": 1})
    cancel = ("com.microsoft:cancel-scheduled-message", {"sequence-numbers": [999_999]})
    for key_name, key, refused, allowed in (("sender", "send-key", peek, cancel),
                                            ("listener", "listen-key", cancel, peek)):
        client = _raw(broker, key_name, key)
        try:
            assert client.management("open/$management", *refused)[:2] == (401, "amqp:unauthorized-access")
            assert client.management("open/$management", *allowed)[0] != 401
        finally:
            client.close()


def test_rule_operations_on_management_need_manage(broker: BrokerProcess) -> None:
    node = "news/subscriptions/all/$management"
    listener = _raw(broker, "listener", "listen-key")
    try:
        status, condition, _ = listener.management(node, "com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
        assert (status, condition) == (401, "amqp:unauthorized-access")
        status, _, _ = listener.management(node, "com.microsoft:peek-message",
                                           {"from-sequence-number": 1, "message-count": 1})
        assert status in (200, 204)  # Listen is enough to peek
    finally:
        listener.close()
    root = _raw(broker, KEY_NAME, KEY)
    try:
        status, _, body = root.management(node, "com.microsoft:enumerate-rules", {"top": 10, "skip": 0})
        assert status == 200 and len(body["rules"]) == 1
    finally:
        root.close()


# ---- AMQP: entity-level keys ------------------------------------------------------------------------


def test_an_entity_key_opens_its_own_entity_only(broker: BrokerProcess) -> None:
    with _client(broker, "scoped-key", "scoped-secret") as client:
        with client.get_queue_sender("scoped") as sender:
            sender.send_messages(ServiceBusMessage("scoped"))
        with client.get_queue_receiver("scoped", max_wait_time=5) as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(m)
            assert str(m) == "scoped"
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("open") as sender:
            sender.send_messages(ServiceBusMessage("refused"))
    # A namespace-wide token signed with the entity's key opens nothing else either.
    raw = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/"
        expiry = int(time.time()) + 300
        token = generate_token(audience, "scoped-key", "scoped-secret", expiry)
        assert raw.put_token(audience + "open", token, expiry * 1000) == 401
    finally:
        raw.close()


def test_a_topic_key_covers_its_subscriptions(broker: BrokerProcess) -> None:
    with _client(broker, "news-key", "news-secret") as client:
        with client.get_topic_sender("news") as sender:
            sender.send_messages(ServiceBusMessage("headline"))
        with client.get_subscription_receiver("news", "all", max_wait_time=5) as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(m)
            assert str(m) == "headline"
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_receiver("scoped") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)


# ---- AMQP: token expiry -----------------------------------------------------------------------------


def test_a_link_is_detached_when_its_token_lapses_and_kept_when_renewed(broker: BrokerProcess) -> None:
    address = f"amqps://localhost:{broker.port}/expiry"
    lapsing = _raw(broker, "sender", "send-key", "expiry", expires_in=2)
    renewed = _raw(broker, "sender", "send-key", "expiry", expires_in=2)
    try:
        gone = lapsing.attach(address, SENDER)
        kept = renewed.attach(address, SENDER)
        audience = f"sb://localhost:{broker.port}/expiry"
        expiry = int(time.time()) + 300
        assert renewed.put_token(audience, generate_token(audience, "sender", "send-key", expiry), expiry * 1000) == 202

        detached = lapsing.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is gone, timeout=15)
        assert isinstance(detached, ev.LinkDetached) and detached.error is not None
        assert detached.error.condition == "amqp:unauthorized-access"

        # By now the renewed connection's first token has lapsed as well; its link still sends.
        kept.send_transfer(message(b"still allowed", "renewed-1"), b"\x01", settled=False)
        outcome = renewed.wait(lambda e: isinstance(e, ev.DeliveryUpdated) and e.link is kept)
        assert isinstance(outcome, ev.DeliveryUpdated) and type(outcome.state).__name__ == "Accepted"
    finally:
        lapsing.close()
        renewed.close()
    assert _drain(broker, "expiry") == ["still allowed"]


# ---- put-token for an entity that does not exist ------------------------------------------------------


@pytest.mark.parametrize(("name", "status"), [
    ("", 202),  # the namespace: nothing to look up
    ("open", 202),
    ("Open/$DeadLetterQueue", 202),
    ("open/$Transfer/$DeadLetterQueue", 202),
    ("open/$management", 202),
    ("news", 202),
    ("news/Subscriptions/all", 202),
    ("news/subscriptions/all/$deadletterqueue", 202),
    ("news/subscriptions/all/$management", 202),
    ("missing", 404),
    ("missing/$DeadLetterQueue", 404),
    ("missing/$Transfer/$DeadLetterQueue", 404),
    ("missing/$management", 404),
    ("news/subscriptions/missing", 404),
    ("news/subscriptions/missing/$management", 404),
    ("open/subscriptions/all", 404),
])
def test_put_token_for_an_entity_that_does_not_exist_is_answered_404(broker: BrokerProcess, name: str,
                                                                      status: int) -> None:
    """As Service Bus (the Go SDK's live tests, the Python suite's test_sb_client_bad_entity): the token is
    checked, then the entity its name is about (sub-queues, $management and subscription paths resolved)."""
    client = RawClient(broker.port)
    try:
        expiry = int(time.time()) + 300
        audience = f"sb://localhost:{broker.port}/{name}"
        token = generate_token(f"sb://localhost:{broker.port}/", KEY_NAME, KEY, expiry)
        assert client.put_token(audience, token, expiry * 1000) == status
    finally:
        client.close()


def test_put_token_checks_the_token_before_the_entity(broker: BrokerProcess) -> None:
    client = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/missing"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, "wrong", expiry), expiry * 1000) == 401
        expired = int(time.time()) - 60
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expired), expired * 1000) == 401
        other = generate_token(f"sb://elsewhere:{broker.port}/missing", KEY_NAME, KEY, expiry)
        assert client.put_token(audience, other, expiry * 1000) == 401
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 404
    finally:
        client.close()


def test_a_token_refresh_for_a_deleted_entity_is_answered_404_and_its_links_go(broker: BrokerProcess) -> None:
    admin = _admin(broker, KEY_NAME, KEY)
    admin.create_queue("short-lived")
    client = RawClient(broker.port)
    try:
        audience = f"sb://localhost:{broker.port}/short-lived"
        expiry = int(time.time()) + 300
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        receiver = client.attach(audience, RECEIVER)
        assert receiver.attached
        admin.delete_queue("short-lived")
        detached = client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver)
        assert isinstance(detached, ev.LinkDetached) and detached.error is not None
        assert detached.error.condition == "amqp:not-found"
        assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 404
    finally:
        client.close()


def test_the_sdk_raises_an_authentication_error_for_an_entity_that_does_not_exist(broker: BrokerProcess) -> None:
    """What the released Python suite's test_sb_client_bad_entity expects, with the SDK's default retries."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("invalid") as sender:
            sender.send_messages(ServiceBusMessage("test"))
        with pytest.raises(ServiceBusAuthenticationError) as refused, \
                client.get_subscription_receiver("news", "invalid") as receiver:
            receiver.receive_messages(max_wait_time=1)
        assert is_entity_not_found(refused.value)


# ---- HTTP -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key_name", "key"), [("sender", "send-key"), ("listener", "listen-key"),
                                               ("scoped-key", "scoped-secret")])
def test_the_management_api_needs_manage(broker: BrokerProcess, key_name: str, key: str) -> None:
    with pytest.raises(ClientAuthenticationError):
        _admin(broker, key_name, key).get_queue("scoped")


def test_an_entity_manage_key_manages_its_entity_only(broker: BrokerProcess) -> None:
    admin = _admin(broker, "scoped-admin", "scoped-admin-secret")
    assert admin.get_queue("scoped").name == "scoped"
    assert admin.get_queue_runtime_properties("scoped").name == "scoped"
    with pytest.raises(ClientAuthenticationError):
        admin.get_queue("open")
    with pytest.raises(ClientAuthenticationError):
        list(admin.list_queues())
    assert _admin(broker, KEY_NAME, KEY).get_queue("open").name == "open"


def _status_line_and_detail(broker: BrokerProcess, method: str, path: str, token: str) -> tuple[int, str, str]:
    """(status, reason phrase, the body's Detail) of a management API request."""
    request = urllib.request.Request(f"https://localhost:{broker.admin_port}{path}", method=method,
                                     data=b"" if method == "PUT" else None,
                                     headers={"Authorization": token, "Content-Type": "application/atom+xml"})
    context = ssl.create_default_context(cafile=broker.admin_certificate)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.reason, response.read().decode()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode()
        detail = body.split("<Detail>", 1)[-1].split("</Detail>", 1)[0]
        return exc.code, exc.reason, detail


@pytest.mark.parametrize(("method", "path", "words"), [
    ("GET", "/open", "Manage,EntityRead claims required for this operation"),
    ("GET", "/$Resources/queues", "Manage,EntityRead claims required for this operation"),
    ("GET", "/news", "Manage,EntityRead claims required for this operation"),
    ("PUT", "/canneverbecreated", "Authorization failed for specified action: Manage,EntityWrite"),
    ("PUT", "/open", "Authorization failed for specified action: Manage,EntityWrite"),
    ("DELETE", "/open", "Authorization failed for specified action: Manage,EntityDelete."),
])
def test_management_refusals_without_manage_use_service_bus_words(broker: BrokerProcess, method: str, path: str,
                                                                  words: str) -> None:
    """The texts the SDKs' own tests compare (the Go SDK's TestAdminClient_LackPermissions_*): the Detail
    opens with Service Bus's words and still ends with the tracking id."""
    status, _, detail = _status_line_and_detail(broker, method, path, _http_token(broker, "listener", "listen-key"))
    assert status == 401 and detail.startswith(words) and "TrackingId:" in detail, (status, detail)


@pytest.mark.parametrize(("method", "path", "operation"), [
    ("GET", "/news/subscriptions/all", "GetSubscription"),
    ("GET", "/news/subscriptions", "EnumerateSubscriptions"),
    ("PUT", "/news/subscriptions/canneverbecreated", "CreateOrUpdateSubscription"),
    ("DELETE", "/news/subscriptions/all", "DeleteSubscription"),
])
def test_subscription_refusals_without_manage_name_the_operation(broker: BrokerProcess, method: str, path: str,
                                                                 operation: str) -> None:
    """Service Bus names the subscription operation, with a sub-code, in the status line as well (the Go SDK's
    error shows the status line: ``401 SubCode=40100: Unauthorized : Unauthorized access for 'GetSubscription'``)."""
    status, reason, detail = _status_line_and_detail(broker, method, path,
                                                     _http_token(broker, "listener", "listen-key"))
    words = f"SubCode=40100: Unauthorized : Unauthorized access for '{operation}' operation"
    assert (status, reason) == (401, words) and detail.startswith(words), (status, reason, detail)


def test_the_management_api_takes_a_scheme_less_audience_of_its_host(broker: BrokerProcess) -> None:
    """The Go SDK's administration client signs its requests with the connection string's embedded SAS,
    whose sr is the bare namespace (``localhost``, as its CreateConnectionStringWithSASUsingExpiry makes it)."""
    expiry = int(time.time()) + 300
    for audience, path, status in (("localhost", "/open", 200), ("localhost/open", "/open", 200),
                                   ("localhost/open", "/other", 401), ("elsewhere", "/open", 401)):
        escaped = urllib.parse.quote_plus(audience).lower()
        signature = urllib.parse.quote_plus(sign(escaped, expiry, KEY))
        token = f"SharedAccessSignature sr={escaped}&sig={signature}&se={expiry}&skn={KEY_NAME}"
        assert _status_line_and_detail(broker, "GET", path, token)[0] == status, (audience, path)


def test_the_python_admin_client_shows_the_service_bus_words(broker: BrokerProcess) -> None:
    admin = _admin(broker, "listener", "listen-key")
    with pytest.raises(ClientAuthenticationError) as refused:
        admin.get_queue("open")
    assert "Manage,EntityRead claims required for this operation" in str(refused.value)
    with pytest.raises(ClientAuthenticationError) as refused:
        admin.create_queue("canneverbecreated")
    assert "Authorization failed for specified action: Manage,EntityWrite" in str(refused.value)


def _http(broker: BrokerProcess, method: str, path: str, token: str | None,
          body: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Authorization": token} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"https://localhost:{broker.admin_port}{path}", data=data, method=method,
                                     headers={**headers, "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=broker.admin_certificate)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw.startswith(b"{") else raw
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _http_token(broker: BrokerProcess, key_name: str, key: str, expires_in: int = 300) -> str:
    return generate_token(f"https://localhost:{broker.admin_port}", key_name, key, int(time.time()) + expires_in)


def test_http_refuses_expired_and_wrongly_signed_tokens_but_not_probes(broker: BrokerProcess) -> None:
    assert _http(broker, "GET", "/open", _http_token(broker, KEY_NAME, KEY))[0] == 200
    assert _http(broker, "GET", "/open", _http_token(broker, KEY_NAME, KEY, expires_in=-60))[0] == 401
    assert _http(broker, "GET", "/open", _http_token(broker, KEY_NAME, "not-the-key"))[0] == 401
    assert _http(broker, "GET", "/open", None)[0] == 401
    assert _http(broker, "GET", "/health", None)[0] == 200


# ---- key regeneration -------------------------------------------------------------------------------


def _sends(broker: BrokerProcess, key_name: str, key: str, queue: str) -> bool:
    try:
        with _client(broker, key_name, key) as client, client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage("probe"))
        return True
    except ServiceBusAuthenticationError:
        return False


def test_regenerated_keys_replace_the_old_and_survive_a_kill(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", _config(tmp_path)).start()
    try:
        root = _http_token(process, KEY_NAME, KEY)
        # Regenerating needs Manage.
        assert _http(process, "POST", "/$authorizationrules/sender/regeneratekeys",
                     _http_token(process, "sender", "send-key"), {"keyType": "PrimaryKey"})[0] == 401
        status, keys = _http(process, "POST", "/$authorizationrules/sender/regeneratekeys", root,
                             {"keyType": "PrimaryKey"})
        assert status == 200 and keys["keyName"] == "sender" and keys["secondaryKey"] is None
        new_key = keys["primaryKey"]
        assert new_key != "send-key" and f"SharedAccessKey={new_key};" in keys["primaryConnectionString"]
        status, scoped = _http(process, "POST", "/scoped/$authorizationrules/scoped-key/regeneratekeys", root,
                               {"keyType": "SecondaryKey", "key": "scoped-second"})
        assert status == 200 and (scoped["primaryKey"], scoped["secondaryKey"]) == ("scoped-secret", "scoped-second")
        assert "EntityPath=scoped;" in scoped["secondaryConnectionString"]
        assert _http(process, "POST", "/scoped/$authorizationrules/nobody/regeneratekeys", root,
                     {"keyType": "PrimaryKey"})[0] == 404

        assert not _sends(process, "sender", "send-key", "open")
        assert _sends(process, "sender", new_key, "open")
        assert _sends(process, "scoped-key", "scoped-second", "scoped")

        process.kill()
        process.start()
        assert not _sends(process, "sender", "send-key", "open")
        assert _sends(process, "sender", new_key, "open")
        assert _sends(process, "scoped-key", "scoped-second", "scoped")
        assert _sends(process, "scoped-key", "scoped-secret", "scoped")  # the primary was not touched
    finally:
        process.stop()


# ---- entity rules through the management API --------------------------------------------------------


def test_the_admin_client_sets_and_reads_an_entitys_own_keys(broker: BrokerProcess) -> None:
    admin = _admin(broker, KEY_NAME, KEY)
    rule = AuthorizationRule(claim_type="SharedAccessKey", claim_value="None", rights=[AccessRights.send],
                             key_name="made-send", primary_key="made-secret", secondary_key="made-secret-2")
    admin.create_queue("made", authorization_rules=[rule])
    [read] = admin.get_queue("made").authorization_rules
    assert (read.key_name, read.primary_key, read.secondary_key, read.rights) == (
        "made-send", "made-secret", "made-secret-2", ["Send"])
    assert _sends(broker, "made-send", "made-secret", "made")
    with _client(broker, "made-send", "made-secret") as client:
        with pytest.raises(ServiceBusAuthorizationError), client.get_queue_receiver("made") as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=2)
    assert not _sends(broker, "made-send", "made-secret", "open")  # good for its own queue only

    queue = admin.get_queue("made")  # an update that echoes the rules keeps them; one that drops them revokes
    queue.max_delivery_count = 3
    admin.update_queue(queue)
    assert [r.key_name for r in admin.get_queue("made").authorization_rules] == ["made-send"]
    queue = admin.get_queue("made")
    queue.authorization_rules = []
    admin.update_queue(queue)
    assert not admin.get_queue("made").authorization_rules  # the SDK reads an empty list as None
    assert not _sends(broker, "made-send", "made-secret", "made")
    admin.delete_queue("made")
