"""The management API with the official ServiceBusAdministrationClient, Standard namespace (issue 13, item 7)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
import requests
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import (
    ApiVersion,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
)
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("conformance-admin")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [])).start()
    yield process
    process.stop()


def _admin(broker: BrokerProcess, **kwargs: object) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate, **kwargs)


# ---- DELETE of what is not there ------------------------------------------------------------------------

def test_deleting_a_missing_entity_is_404_with_a_service_bus_error_body(admin_broker: BrokerProcess) -> None:
    admin = _admin(admin_broker)
    for delete in (lambda: admin.delete_queue("never-was"), lambda: admin.delete_topic("never-was")):
        with pytest.raises(ResourceNotFoundError):
            delete()
    admin.create_topic("del-topic")
    admin.create_subscription("del-topic", "sub")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_subscription("del-topic", "never-was")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_rule("del-topic", "sub", "never-was")
    admin.delete_subscription("del-topic", "sub")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_subscription("del-topic", "sub")  # the second delete finds nothing
    admin.delete_topic("del-topic")

    # the body is the service's <Error><Code>404</Code><Detail>...</Detail></Error>
    url = f"https://localhost:{admin_broker.admin_port}/never-was?api-version=2021-05"
    audience = f"https://localhost:{admin_broker.admin_port}"
    token = generate_token(audience, KEY_NAME, KEY, int(time.time()) + 300)
    response = requests.delete(url, headers={"Authorization": token}, verify=admin_broker.admin_certificate,
                               timeout=10)
    assert response.status_code == 404
    assert "<Code>404</Code>" in response.text and "never-was" in response.text


# ---- MaxMessageSizeInKilobytes -----------------------------------------------------------------------------

def test_max_message_size_is_refused_on_a_standard_namespace(admin_broker: BrokerProcess) -> None:
    admin = _admin(admin_broker)
    for create in (admin.create_queue, admin.create_topic):
        with pytest.raises(HttpResponseError) as info:
            create("too-big", max_message_size_in_kilobytes=1024)
        assert info.value.status_code == 400
        assert "MaxMessageSizeInKilobytes" in str(info.value)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue("too-big")
    # an entity as it is read back can be written back
    admin.create_queue("sized")
    queue = admin.get_queue("sized")
    queue.max_delivery_count = 7
    admin.update_queue(queue)
    assert admin.get_queue("sized").max_delivery_count == 7
    admin.delete_queue("sized")


def test_max_message_size_is_refused_with_api_version_2017_04(admin_broker: BrokerProcess) -> None:
    admin = _admin(admin_broker, api_version=ApiVersion.V2017_04)
    admin.create_queue("old-api")
    assert [q.name for q in admin.list_queues()] == ["old-api"]
    admin.delete_queue("old-api")
    with pytest.raises(HttpResponseError) as info:
        admin.create_queue("old-api-sized", max_message_size_in_kilobytes=1024)
    assert info.value.status_code == 400


# ---- rules with parameters -------------------------------------------------------------------------------------

WHEN = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=datetime.UTC)
EVERY_TYPE = {"@s": "red", "@i": 5, "@l": 2**40, "@d": 1.5, "@b": True, "@t": WHEN,
              "@span": datetime.timedelta(minutes=90)}


def test_sql_filters_and_actions_with_parameters_of_every_type(admin_broker: BrokerProcess) -> None:
    admin = _admin(admin_broker)
    admin.create_topic("params")
    admin.create_subscription("params", "filtered")
    admin.delete_rule("params", "filtered", "$Default")
    admin.create_rule("params", "filtered", "typed", filter=SqlRuleFilter(
        "s = @s AND i = @i AND @l > i AND d = @d AND b = @b AND @t IS NOT NULL AND @span IS NOT NULL",
        parameters=EVERY_TYPE))
    admin.create_subscription("params", "acted")
    admin.delete_rule("params", "acted", "$Default")
    admin.create_rule("params", "acted", "tagger", filter=SqlRuleFilter("s = @s", parameters={"@s": "red"}),
                      action=SqlRuleAction("SET tag = @tag; SET n = @n", parameters={"@tag": "tagged", "@n": 7}))

    rule = admin.get_rule("params", "filtered", "typed")
    assert isinstance(rule.filter, SqlRuleFilter) and rule.filter.parameters == EVERY_TYPE
    acted = admin.get_rule("params", "acted", "tagger")
    assert isinstance(acted.action, SqlRuleAction) and acted.action.parameters == {"@tag": "tagged", "@n": 7}

    with ServiceBusClient.from_connection_string(admin_broker.connection_string) as client:
        with client.get_topic_sender("params") as sender:
            sender.send_messages([
                # (the SDK cannot send a long application property: its encoder refuses 2**40)
                ServiceBusMessage("match", application_properties={"s": "red", "i": 5, "d": 1.5, "b": True}),
                ServiceBusMessage("other", application_properties={"s": "blue", "i": 5, "d": 1.5, "b": True}),
            ])
        with client.get_subscription_receiver("params", "filtered", max_wait_time=5) as receiver:
            assert [str(m) for m in receiver.receive_messages(max_message_count=5, max_wait_time=5)] == ["match"]
        with client.get_subscription_receiver("params", "acted", max_wait_time=5) as receiver:
            [message] = receiver.receive_messages(max_message_count=5, max_wait_time=5)
            props = message.application_properties or {}
            assert str(message) == "match" and props[b"tag"] == b"tagged" and props[b"n"] == 7
            receiver.complete_message(message)
    admin.delete_topic("params")
