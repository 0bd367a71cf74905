"""The management API answering as Service Bus does, where the Go SDK's live tests compare (Standard namespace).

A partitioned entity's MaxSizeInMegabytes is its partition count times the size per partition;
MaxMessageSizeInKilobytes is 256; AccessedAt is zero until the entity is used; an entity's
authorization rules come back as sent; a key without Manage reading an entity that does not exist
gets 404 (401 only for what exists); ForwardTo and ForwardDeadLetteredMessagesTo come back in the
form they were given.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
import requests
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import AccessRights, AuthorizationRule, ServiceBusAdministrationClient
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

NEVER = datetime.datetime(1, 1, 1, tzinfo=datetime.UTC)
NAMESPACE_RULES = [{"KeyName": KEY_NAME, "PrimaryKey": KEY},
                   {"KeyName": "sender", "PrimaryKey": "send-key", "Rights": ["Send"]}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("admin-as-service-bus")
    config = write_config(base / "Config.json", [{"Name": "existing", "Properties": {}}],
                          AuthorizationRules=NAMESPACE_RULES)
    process = BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def _admin(broker: BrokerProcess, key_name: str = KEY_NAME, key: str = KEY) -> ServiceBusAdministrationClient:
    connection_string = broker.admin_connection_string.replace(KEY_NAME, key_name).replace(KEY, key)
    return ServiceBusAdministrationClient.from_connection_string(
        connection_string, connection_verify=broker.admin_certificate, retry_total=0)


def test_a_partitioned_entity_reports_its_size_times_its_partitions(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_queue("parted", enable_partitioning=True, max_size_in_megabytes=1024)
    admin.create_topic("parted-topic", enable_partitioning=True, max_size_in_megabytes=2048)
    admin.create_queue("whole", max_size_in_megabytes=1024)
    queue = admin.get_queue("parted")
    assert queue.max_size_in_megabytes == 16 * 1024
    assert admin.get_topic("parted-topic").max_size_in_megabytes == 16 * 2048
    assert admin.get_queue("whole").max_size_in_megabytes == 1024
    # What was read back can be written back: the size stays what it was.
    queue.max_delivery_count = 3
    admin.update_queue(queue)
    again = admin.get_queue("parted")
    assert (again.max_size_in_megabytes, again.max_delivery_count) == (16 * 1024, 3)


def test_max_message_size_reads_256_on_a_standard_namespace(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_queue("sized-q")
    admin.create_topic("sized-t")
    assert admin.get_queue("sized-q").max_message_size_in_kilobytes == 256
    assert admin.get_topic("sized-t").max_message_size_in_kilobytes == 256
    assert {q.name: q.max_message_size_in_kilobytes for q in admin.list_queues()}["sized-q"] == 256


def test_accessed_at_is_zero_until_the_entity_is_used(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_queue("unused")
    runtime = admin.get_queue_runtime_properties("unused")
    assert runtime.accessed_at_utc == NEVER
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender("unused") as sender:
        sender.send_messages(ServiceBusMessage("used"))
    used = admin.get_queue_runtime_properties("unused").accessed_at_utc
    assert used is not None and used >= runtime.created_at_utc - datetime.timedelta(seconds=1)
    admin.create_topic("unused-topic")
    assert admin.get_topic_runtime_properties("unused-topic").accessed_at_utc == NEVER
    # A subscription shows a time from the start, as Service Bus does (the Go SDK's live tests check it).
    admin.create_subscription("unused-topic", "fresh")
    assert admin.get_subscription_runtime_properties("unused-topic", "fresh").accessed_at_utc != NEVER


def test_entity_authorization_rules_come_back_as_sent(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    sent = AuthorizationRule(key_name="entity-key", primary_key="p" * 44, secondary_key="s" * 44,
                             rights=[AccessRights.SEND, AccessRights.LISTEN])
    admin.create_queue("keyed", authorization_rules=[sent])
    [rule] = admin.get_queue("keyed").authorization_rules or []
    assert (rule.key_name, rule.primary_key, rule.secondary_key) == ("entity-key", "p" * 44, "s" * 44)
    assert sorted(rule.rights or []) == sorted([AccessRights.SEND, AccessRights.LISTEN])
    assert (rule.created_at_utc, rule.modified_at_utc) == (None, None)


def test_a_key_without_manage_is_told_404_for_what_does_not_exist_and_401_for_what_does(
        broker: BrokerProcess) -> None:
    sender = _admin(broker, "sender", "send-key")
    with pytest.raises(ResourceNotFoundError):
        sender.get_queue("nothing-here")
    with pytest.raises(ResourceNotFoundError):
        sender.get_topic("nothing-here")
    with pytest.raises((ClientAuthenticationError, HttpResponseError)) as info:
        sender.get_queue("existing")
    assert getattr(info.value, "status_code", None) == 401
    # A bad key is refused whatever the path names.
    with pytest.raises((ClientAuthenticationError, HttpResponseError)) as bad:
        _admin(broker, "sender", "wrong-key").get_queue("nothing-here")
    assert getattr(bad.value, "status_code", None) == 401


def test_forwarding_targets_come_back_in_the_form_given(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_queue("fwd-target")
    admin.create_queue("fwd-sdk", forward_to="fwd-target")  # the SDK sends sb://<namespace>/fwd-target
    given = admin.get_queue("fwd-sdk").forward_to
    assert given == f"sb://localhost:{broker.admin_port}/fwd-target"
    # An https address (the Go SDK's form) is kept and names its entity too.
    admin.create_queue("fwd-https", forward_to="https://localhost/fwd-target")
    assert admin.get_queue("fwd-https").forward_to == "https://localhost/fwd-target"
    # A bare name, as other clients send it, comes back bare.
    body = ('<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
            '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">'
            "<ForwardTo>fwd-target</ForwardTo><ForwardDeadLetteredMessagesTo>fwd-target</ForwardDeadLetteredMessagesTo>"
            "</QueueDescription></content></entry>")
    audience = f"https://localhost:{broker.admin_port}/fwd-bare"
    token = generate_token(audience, KEY_NAME, KEY, int(time.time()) + 300)
    response = requests.put(f"https://localhost:{broker.admin_port}/fwd-bare?api-version=2021-05", data=body,
                            headers={"Authorization": token, "Content-Type": "application/atom+xml"},
                            verify=broker.admin_certificate, timeout=10)
    assert response.status_code == 201, response.text
    bare = admin.get_queue("fwd-bare")
    assert (bare.forward_to, bare.forward_dead_lettered_messages_to) == ("fwd-target", "fwd-target")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        for source in ("fwd-sdk", "fwd-bare", "fwd-https"):
            with client.get_queue_sender(source) as sender:
                sender.send_messages(ServiceBusMessage(source))
        with client.get_queue_receiver("fwd-target", max_wait_time=5) as receiver:
            got = sorted(str(m) for m in receiver.receive_messages(max_message_count=5, max_wait_time=10))
            while len(got) < 3:
                more = receiver.receive_messages(max_message_count=5, max_wait_time=5)
                assert more, got
                got = sorted(got + [str(m) for m in more])
    assert got == ["fwd-bare", "fwd-https", "fwd-sdk"]  # each forwards


def test_partitioning_cannot_be_changed_in_service_bus_words(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    admin.create_topic("fixed-topic")
    admin.create_queue("fixed-queue")
    topic = admin.get_topic("fixed-topic")
    topic.enable_partitioning = True
    with pytest.raises(HttpResponseError, match=r"Partitioning cannot be changed for Topic\. "):
        admin.update_topic(topic)
    queue = admin.get_queue("fixed-queue")
    queue.enable_partitioning = True
    with pytest.raises(HttpResponseError, match=r"Partitioning cannot be changed for Queue\. "):
        admin.update_queue(queue)
    assert admin.get_topic("fixed-topic").enable_partitioning is False  # nothing changed
