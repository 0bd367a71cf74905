"""MaxMessageSizeInKilobytes in a namespace configured Premium (issue 13, item 7)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.core.exceptions import HttpResponseError
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus.management import ApiVersion, ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def premium_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("conformance-premium")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [], Sku="Premium")).start()
    yield process
    process.stop()


def _admin(broker: BrokerProcess, **kwargs: object) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate, **kwargs)


def test_a_premium_namespace_accepts_max_message_size_and_honours_it(premium_broker: BrokerProcess) -> None:
    admin = _admin(premium_broker)
    admin.create_queue("big", max_message_size_in_kilobytes=1024)
    admin.create_topic("big-topic", max_message_size_in_kilobytes=2048)
    assert admin.get_queue("big").max_message_size_in_kilobytes == 1024
    assert admin.get_topic("big-topic").max_message_size_in_kilobytes == 2048
    body = b"x" * (600 * 1024)  # above Standard's 256 KB, within this queue's 1024 KB
    with ServiceBusClient.from_connection_string(premium_broker.connection_string) as client:
        with client.get_queue_sender("big") as sender:
            sender.send_messages(ServiceBusMessage(body, message_id="big-1"))
        with client.get_queue_receiver("big", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert b"".join(message.body) == body


def test_api_version_2017_04_cannot_set_it_even_in_premium(premium_broker: BrokerProcess) -> None:
    with pytest.raises(HttpResponseError) as info:
        _admin(premium_broker, api_version=ApiVersion.V2017_04).create_queue("old", max_message_size_in_kilobytes=1024)
    assert info.value.status_code == 400 and "2017-04" in str(info.value)
