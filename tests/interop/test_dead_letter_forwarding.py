"""ForwardDeadLetteredMessagesTo on the partition core, through the official SDK.

The broker is started as users start it (``scripts/serve``), and its start-up log says
every entity runs on the core (none kept on the version-1 path). A queue's or subscription's dead
letters go to the named entity in the dead-lettering's own store transaction (the core's settle or
move, ``model/partition_core.py``), with their dead-letter reason and description and
``x-opt-deadletter-source``: a client's dead-letter (the version-1 scenario of
``test_forwarding.py``, imported unchanged), MaxDeliveryCount, expiry with
DeadLetteringOnMessageExpiration, a subscription's filter that fails; past the hop limit into the
transfer dead-letter queue where the target's forwarding stopped. Set at runtime through the
administration client too. (The client's dead-letter scenario runs on SQLite in
``test_forwarding.py`` and here on PostgreSQL only; this module used to run it once more on SQLite
when the core was opt-in.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config

# test_forwarding's scenario, unchanged (its dlfwd-src and dlfwd-dst are in QUEUES below): it runs in
# test_forwarding.py on SQLite, and here on PostgreSQL (test_the_same_on_postgresql).
from test_forwarding import test_dead_lettered_messages_are_forwarded_with_their_source as _forwarded_with_source

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "dlfwd-src", "Properties": {"ForwardDeadLetteredMessagesTo": "dlfwd-dst"}},
    {"Name": "dlfwd-dst", "Properties": {}},
    {"Name": "tired", "Properties": {"MaxDeliveryCount": 2, "ForwardDeadLetteredMessagesTo": "side"}},
    {"Name": "stale", "Properties": {"DeadLetteringOnMessageExpiration": True,
                                     "ForwardDeadLetteredMessagesTo": "stale-side"}},
    {"Name": "stale-side", "Properties": {"DeadLetteringOnMessageExpiration": True}},
    {"Name": "side", "Properties": {"MaxDeliveryCount": 2}},
    {"Name": "into-loop", "Properties": {"ForwardDeadLetteredMessagesTo": "loop-a"}},
    {"Name": "loop-a", "Properties": {"ForwardTo": "loop-b"}},
    {"Name": "loop-b", "Properties": {"ForwardTo": "loop-a"}},
    {"Name": "plain", "Properties": {}},
    {"Name": "catch", "Properties": {}},
]
TOPICS = [{"Name": "orders", "Properties": {}, "Subscriptions": [
    {"Name": "strict", "Properties": {"ForwardDeadLetteredMessagesTo": "catch"},
     "Rules": [{"Name": "sum", "Properties": {"FilterType": "Sql",
                                              "SqlFilter": {"SqlExpression": "quantity + 1 > 0"}}}]}]}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("core-v2-fdlq")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS),
                            extra_args=["--log-level", "INFO"]).start()
    yield process
    process.stop()


def _one(client: ServiceBusClient, queue: str, **kwargs: object) -> ServiceBusReceivedMessage:
    with client.get_queue_receiver(queue, **kwargs) as receiver:  # type: ignore[arg-type]
        [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
        receiver.complete_message(m)
        return m


def _empty(client: ServiceBusClient, queue: str, **kwargs: object) -> bool:
    with client.get_queue_receiver(queue, **kwargs) as receiver:  # type: ignore[arg-type]
        return receiver.peek_messages(max_message_count=10) == []


def test_max_delivery_count_forwards_the_message_counted_afresh(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("tired") as sender:
            sender.send_messages(ServiceBusMessage("too often", message_id="t-1", application_properties={"k": 1}))
        with client.get_queue_receiver("tired") as receiver:
            for _ in range(2):
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.abandon_message(m)
        m = _one(client, "side")
        assert (str(m), m.message_id, m.application_properties[b"k"]) == ("too often", "t-1", 1)
        assert m.dead_letter_reason == "MaxDeliveryCountExceeded" and m.dead_letter_source == "tired"
        assert m.delivery_count == 0  # a new message in 'side', whose own MaxDeliveryCount is 2
        assert _empty(client, "tired") and _empty(client, "tired", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_an_expired_message_is_forwarded_where_the_entity_dead_letters_on_expiration(broker: BrokerProcess) -> None:
    """The forwarded copy keeps its time-to-live, counted again from the forwarding (as a forwarded
    message's), so it may expire in the target too, which dead-letters it there: either way it is
    found once, with the source it was forwarded from."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("stale") as sender:
            sender.send_messages(ServiceBusMessage("late", time_to_live=timedelta(seconds=1)))
        time.sleep(1.5)
        with client.get_queue_receiver("stale") as receiver:  # a receive meets it expired: it leaves
            assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == []
        found: list[ServiceBusReceivedMessage] = []
        deadline = time.monotonic() + 30
        while not found and time.monotonic() < deadline:
            for sub_queue in (None, ServiceBusSubQueue.DEAD_LETTER):
                with client.get_queue_receiver("stale-side", sub_queue=sub_queue) as receiver:
                    got = receiver.receive_messages(max_message_count=5, max_wait_time=1)
                    for m in got:
                        receiver.complete_message(m)
                    found += got
        [m] = found
        assert str(m) == "late" and m.dead_letter_reason == "TTLExpiredException"
        assert m.dead_letter_source == "stale"
        assert _empty(client, "stale", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_a_filter_that_fails_forwards_the_subscriptions_copy(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("orders") as sender:
            sender.send_messages([ServiceBusMessage("text-qty", application_properties={"quantity": "many"}),
                                  ServiceBusMessage("num-qty", application_properties={"quantity": 3})])
        m = _one(client, "catch")
        assert str(m) == "text-qty" and m.dead_letter_reason == "FilterEvaluationException"
        assert m.dead_letter_source == "orders/subscriptions/strict"
        with client.get_subscription_receiver("orders", "strict") as receiver:
            assert [str(x) for x in receiver.receive_messages(max_message_count=5, max_wait_time=10)] == ["num-qty"]
        with client.get_subscription_receiver("orders", "strict", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            assert dlq.peek_messages(max_message_count=10) == []


def test_a_subscriptions_dead_letter_is_forwarded(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("refused", application_properties={"quantity": 1}))
        with client.get_subscription_receiver("orders", "strict") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.dead_letter_message(m, reason="no stock", error_description="none left")
        f = _one(client, "catch")
        assert (str(f), f.dead_letter_reason, f.dead_letter_error_description) == ("refused", "no stock", "none left")
        assert f.dead_letter_source == "orders/subscriptions/strict"


def test_past_the_hop_limit_the_dead_letter_lands_in_the_transfer_dead_letter_queue(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("into-loop") as sender:
            sender.send_messages(ServiceBusMessage("nowhere to go"))
        with client.get_queue_receiver("into-loop") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.dead_letter_message(m, reason="why")
        # into-loop -> loop-a -> b -> a -> b -> a: the chain stops at loop-a.
        t = _one(client, "loop-a", sub_queue=ServiceBusSubQueue.TRANSFER_DEAD_LETTER)
        assert str(t) == "nowhere to go" and t.dead_letter_reason == "MaxTransferHopCountExceeded"
        assert t.dead_letter_source == "into-loop"
        assert _empty(client, "into-loop", sub_queue=ServiceBusSubQueue.DEAD_LETTER)


def test_forwarding_set_at_runtime_applies_on_the_core(broker: BrokerProcess) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    admin.create_queue("made-later", forward_dead_lettered_messages_to="catch")
    plain = admin.get_queue("plain")
    plain.forward_dead_lettered_messages_to = "catch"
    admin.update_queue(plain)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        for queue in ("made-later", "plain"):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage(f"from {queue}"))
            with client.get_queue_receiver(queue) as receiver:
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.dead_letter_message(m, reason="later")
            f = _one(client, "catch")
            assert (str(f), f.dead_letter_reason, f.dead_letter_source) == (f"from {queue}", "later", queue)
    assert not any("made-later runs on the version-1" in line for line in broker.output)
    assert any("serving made-later (" in line for line in broker.output)


def test_once_the_target_is_deleted_dead_letters_stay_in_the_entitys_dead_letter_queue(
        broker: BrokerProcess) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(
        broker.admin_connection_string, connection_verify=broker.admin_certificate)
    admin.create_queue("gone-dst")
    admin.create_queue("gone-src", forward_dead_lettered_messages_to="gone-dst")
    admin.delete_queue("gone-dst")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("gone-src") as sender:
            sender.send_messages(ServiceBusMessage("kept"))
        with client.get_queue_receiver("gone-src") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.dead_letter_message(m, reason="no target")
        d = _one(client, "gone-src", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert (str(d), d.dead_letter_reason, d.dead_letter_source) == ("kept", "no target", None)


@pytest.fixture(scope="module")
def pg_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    from pg_server import shared_server

    try:
        url = shared_server().create_database("fdlq")
    except RuntimeError as exc:
        pytest.skip(str(exc))
    base: Path = tmp_path_factory.mktemp("core-v2-fdlq-pg")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS),
                            extra_args=["--store", url, "--log-level", "INFO"]).start()
    yield process
    process.stop()


def test_the_same_on_postgresql(pg_broker: BrokerProcess) -> None:
    """The forwarding settle and move are the PostgreSQL store's transactions too."""
    _forwarded_with_source(pg_broker)
    test_max_delivery_count_forwards_the_message_counted_afresh(pg_broker)
    test_a_filter_that_fails_forwards_the_subscriptions_copy(pg_broker)
    test_past_the_hop_limit_the_dead_letter_lands_in_the_transfer_dead_letter_queue(pg_broker)
