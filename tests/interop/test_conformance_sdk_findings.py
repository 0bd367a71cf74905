"""What the official SDKs' own suites found against the broker, as the Python SDK sees it.

One broker for this module (started as ``sodalite serve``); each test uses its own entity. Delivery
counts, session state cleared, list-sessions, application properties, delivery annotations of a
ReceiveAndDelete message, rule actions and rules deleted by the asyncio client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.aio.management import ServiceBusAdministrationClient as AsyncAdministrationClient
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "dc-abandon", "Properties": {"MaxDeliveryCount": 2}},
    {"Name": "dc-client", "Properties": {}},
    {"Name": "dc-direct", "Properties": {}},
    {"Name": "ls-many", "Properties": {"RequiresSession": True}},
    {"Name": "ls-aio", "Properties": {"RequiresSession": True}},
    {"Name": "state-clear", "Properties": {"RequiresSession": True}},
    {"Name": "decimal", "Properties": {}},
    {"Name": "rad-annotations", "Properties": {}},
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("sdk-findings")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _client(broker: BrokerProcess) -> ServiceBusClient:
    return ServiceBusClient.from_connection_string(broker.connection_string)


# ---- delivery count -----------------------------------------------------------------------------


def test_max_delivery_count_reached_by_abandons_keeps_the_count_in_the_dead_letter_queue(
        broker: BrokerProcess) -> None:
    with _client(broker) as client:
        with client.get_queue_sender("dc-abandon") as sender:
            sender.send_messages(ServiceBusMessage("twice", message_id="dc-1"))
        with client.get_queue_receiver("dc-abandon", max_wait_time=10) as receiver:
            for expected in (0, 1):
                [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert message.delivery_count == expected
                receiver.abandon_message(message)
            assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == []
        with client.get_queue_receiver("dc-abandon", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [peeked] = dead.peek_messages(max_message_count=1)
            assert peeked.delivery_count == 2
            [message] = dead.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.message_id == "dc-1"
            assert message.dead_letter_reason == "MaxDeliveryCountExceeded"
            assert message.delivery_count == 2  # two abandons; the dead-lettering did not count
            dead.complete_message(message)


def test_a_client_dead_letter_and_a_defer_do_not_raise_the_count(broker: BrokerProcess) -> None:
    with _client(broker) as client:
        with client.get_queue_sender("dc-client") as sender:
            sender.send_messages(ServiceBusMessage("once", message_id="dc-2"))
        with client.get_queue_receiver("dc-client", max_wait_time=10) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.abandon_message(message)
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.delivery_count == 1
            receiver.defer_message(message)
            [deferred] = receiver.receive_deferred_messages([message.sequence_number])
            assert deferred.delivery_count == 1  # the defer did not count
            receiver.dead_letter_message(deferred, reason="mine")
        with client.get_queue_receiver("dc-client", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [message] = dead.receive_messages(max_message_count=1, max_wait_time=10)
            assert (message.message_id, message.dead_letter_reason) == ("dc-2", "mine")
            assert message.delivery_count == 1  # one abandon: the dead-lettering did not count
            dead.abandon_message(message)
            [message] = dead.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.delivery_count == 1  # an abandon in the dead-letter queue does not count
            dead.complete_message(message)


def test_abandon_once_then_dead_letter_shows_the_second_delivery_count(broker: BrokerProcess) -> None:
    with _client(broker) as client:
        with client.get_queue_sender("dc-direct") as sender:
            sender.send_messages(ServiceBusMessage("direct", message_id="dc-3"))
        with client.get_queue_receiver("dc-direct", max_wait_time=10) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.abandon_message(message)
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.delivery_count == 1
            receiver.dead_letter_message(message, reason="direct")
        with client.get_queue_receiver("dc-direct", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [peeked] = dead.peek_messages(max_message_count=1)
            assert peeked.delivery_count == 1
            [message] = dead.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.delivery_count == 1
            dead.complete_message(message)


# ---- list sessions ------------------------------------------------------------------------------


def _sessions_with_messages_and_one_with_state(broker: BrokerProcess, queue: str) -> None:
    with _client(broker) as client:
        with client.get_queue_sender(queue) as sender:
            batch = sender.create_message_batch()
            for i in range(120):
                batch.add_message(ServiceBusMessage(f"m{i}", session_id=f"s{i:03}"))
            sender.send_messages(batch)
        with client.get_queue_receiver(queue, session_id="state-only") as receiver:
            assert receiver.session is not None
            receiver.session.set_state(b"kept")


def test_list_sessions_names_sessions_with_messages_and_with_state(broker: BrokerProcess) -> None:
    _sessions_with_messages_and_one_with_state(broker, "ls-many")
    with _client(broker) as client:
        listed = list(client.list_queue_sessions("ls-many"))
        assert sorted(listed) == sorted([f"s{i:03}" for i in range(120)] + ["state-only"])
        # With a time: the sessions whose state changed after it (Service Bus's meaning), no others.
        before = datetime.now(UTC)
        time.sleep(0.05)
        with client.get_queue_receiver("ls-many", session_id="s007") as receiver:
            assert receiver.session is not None
            receiver.session.set_state(b"now")
        assert list(client.list_queue_sessions("ls-many", state_updated_after=before)) == ["s007"]


def test_list_sessions_with_the_asyncio_client(broker: BrokerProcess) -> None:
    _sessions_with_messages_and_one_with_state(broker, "ls-aio")

    async def listed() -> list[str]:
        async with AsyncServiceBusClient.from_connection_string(broker.connection_string) as client:
            return [sid async for sid in client.list_queue_sessions("ls-aio")]

    assert len(asyncio.run(listed())) == 121


# ---- session state ------------------------------------------------------------------------------


@pytest.mark.parametrize("cleared", [None, b""], ids=["null", "zero-length"])
def test_session_state_set_to_null_or_empty_clears_it(broker: BrokerProcess, cleared: bytes | None) -> None:
    session = f"clear-{'null' if cleared is None else 'empty'}"
    with _client(broker) as client:
        with client.get_queue_sender("state-clear") as sender:
            sender.send_messages(ServiceBusMessage("x", session_id=session))
        with client.get_queue_receiver("state-clear", session_id=session) as receiver:
            assert receiver.session is not None
            receiver.session.set_state(b"some state")
            assert receiver.session.get_state() == b"some state"
            receiver.session.set_state(cleared)
            assert receiver.session.get_state() is None
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.complete_message(message)
        # Cleared, and no messages left: the session is no longer listed.
        assert session not in list(client.list_queue_sessions("state-clear"))


# ---- what the released Python suite still found -------------------------------------------------


def test_a_decimal_application_property_comes_back_as_the_decimal_sent(broker: BrokerProcess) -> None:
    with _client(broker) as client:
        with client.get_queue_sender("decimal") as sender:
            sender.send_messages(ServiceBusMessage("d", application_properties={"dec": Decimal("1.2345")}))
        with client.get_queue_receiver("decimal") as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert (message.application_properties or {})[b"dec"] == Decimal("1.2345")
            receiver.complete_message(message)


def test_a_receive_and_delete_message_has_empty_delivery_annotations(broker: BrokerProcess) -> None:
    with _client(broker) as client:
        with client.get_queue_sender("rad-annotations") as sender:
            sender.send_messages(ServiceBusMessage(b"body"))
        with client.get_queue_receiver("rad-annotations",
                                       receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert message.raw_amqp_message.delivery_annotations == {}


WHEN = datetime(2020, 7, 5, 11, 12, 13)  # without a time zone, as the released suite sends it


def _rules() -> list[tuple[str, object, SqlRuleAction | None]]:
    correlation = CorrelationRuleFilter(correlation_id="testcid", properties={
        "key_string": "str1", "key_int": 2, "key_long": 2**31 + 2, "key_bool": False, "key_datetime": WHEN,
        "key_duration": timedelta(days=1, hours=2, minutes=3)})
    return [("rule-1", correlation, SqlRuleAction("SET Priority = @param", parameters={"@param": WHEN})),
            ("rule-2", SqlRuleFilter("Priority = @param1", parameters={"@param1": "str1"}), None),
            ("rule-3", TrueRuleFilter(), None)]


def _check_rule_1(rule: object) -> None:
    assert isinstance(rule.filter, CorrelationRuleFilter)  # type: ignore[attr-defined]
    assert rule.action.parameters["@param"] == WHEN  # type: ignore[attr-defined]  # no zone added
    properties = rule.filter.properties  # type: ignore[attr-defined]
    assert properties["key_datetime"] == WHEN and properties["key_long"] == 2**31 + 2
    assert properties["key_duration"] == timedelta(days=1, hours=2, minutes=3)


def test_rule_parameters_without_a_time_zone_come_back_as_sent(broker: BrokerProcess) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    admin.create_topic("rules-sync")
    admin.create_subscription("rules-sync", "sub")
    for name, rule_filter, action in _rules():
        admin.create_rule("rules-sync", "sub", name, filter=rule_filter, action=action)
    _check_rule_1(admin.get_rule("rules-sync", "sub", "rule-1"))
    for name, _, _ in _rules():
        admin.delete_rule("rules-sync", "sub", name)
    assert [r.name for r in admin.list_rules("rules-sync", "sub")] == ["$Default"]


def test_the_asyncio_client_creates_reads_and_deletes_the_same_rules(broker: BrokerProcess) -> None:
    """The released asyncio twin got 404 deleting a rule: its check of rule 1's parameter (given back
    with a time zone) failed first, and its cleanup then deleted rules 2 and 3, never created."""

    async def run() -> list[str]:
        admin = AsyncAdministrationClient.from_connection_string(
            broker.admin_connection_string, connection_verify=broker.admin_certificate)
        async with admin:
            await admin.create_topic("rules-aio")
            await admin.create_subscription("rules-aio", "sub")
            for name, rule_filter, action in _rules():
                await admin.create_rule("rules-aio", "sub", name, filter=rule_filter, action=action)
                if name == "rule-1":
                    _check_rule_1(await admin.get_rule("rules-aio", "sub", name))
            for name, _, _ in _rules():
                await admin.delete_rule("rules-aio", "sub", name)
            return [r.name async for r in admin.list_rules("rules-aio", "sub")]

    assert asyncio.run(run()) == ["$Default"]
