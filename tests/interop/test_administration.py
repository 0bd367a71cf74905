"""ServiceBusAdministrationClient (sync and aio) against the broker's HTTPS management endpoint."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from azure.core.exceptions import ClientAuthenticationError, ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdmin
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def _admin(broker: BrokerProcess, connection_string: str | None = None) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        connection_string or broker.admin_connection_string, connection_verify=broker.admin_certificate)


def test_queue_lifecycle_and_runtime_counts(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    created = admin.create_queue("adm-q", lock_duration=datetime.timedelta(seconds=45), max_delivery_count=5,
                                 default_message_time_to_live=datetime.timedelta(days=1),
                                 dead_lettering_on_message_expiration=True)
    assert created.name == "adm-q" and created.lock_duration == datetime.timedelta(seconds=45)
    got = admin.get_queue("adm-q")
    assert (got.max_delivery_count, got.default_message_time_to_live) == (5, datetime.timedelta(days=1))
    assert got.dead_lettering_on_message_expiration is True
    assert "adm-q" in [q.name for q in admin.list_queues()]
    got.max_delivery_count = 7
    admin.update_queue(got)
    assert admin.get_queue("adm-q").max_delivery_count == 7
    with pytest.raises(ResourceExistsError):
        admin.create_queue("adm-q")

    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("adm-q") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
        with client.get_queue_receiver("adm-q") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.dead_letter_message(m, reason="r")
    runtime = admin.get_queue_runtime_properties("adm-q")
    assert (runtime.active_message_count, runtime.dead_letter_message_count) == (2, 1)
    assert runtime.total_message_count == 3 and runtime.size_in_bytes > 0

    admin.delete_queue("adm-q")
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue("adm-q")
    assert admin.get_namespace_properties().name == "sbemulatorns"


def test_a_wrong_key_is_refused(broker: BrokerProcess) -> None:
    wrong = broker.admin_connection_string.replace("SAS_KEY_VALUE", "not-the-key")
    with pytest.raises(ClientAuthenticationError):
        _admin(broker, wrong).get_queue("queue.1")


async def _aio(broker: BrokerProcess) -> None:
    async with AsyncAdmin.from_connection_string(broker.admin_connection_string,
                                                 connection_verify=broker.admin_certificate) as admin:
        await admin.create_queue("adm-aio")
        assert (await admin.get_queue("adm-aio")).name == "adm-aio"
        await admin.delete_queue("adm-aio")
        with pytest.raises(ResourceNotFoundError):
            await admin.get_queue("adm-aio")


def test_aio_admin_client(broker: BrokerProcess) -> None:
    asyncio.run(_aio(broker))


def test_a_queue_created_at_runtime_survives_a_restart(fresh_broker: BrokerProcess) -> None:
    fresh_broker.start()
    _admin(fresh_broker).create_queue("made-live", max_delivery_count=3)
    fresh_broker.kill()
    fresh_broker.start()
    assert _admin(fresh_broker).get_queue("made-live").max_delivery_count == 3
