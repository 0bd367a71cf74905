"""ForwardDeadLetteredMessagesTo from partitioned entities on the partition core, through the official SDK.

The broker is started as users start it (``scripts/serve``) with the three SQLite
messaging stores of ``test_partitioning`` (partition i of every partitioned entity in store i mod
3), and its start-up log says every entity runs on the core. Partition i of a partitioned queue or
of a partitioned topic's subscription dead-letters into partition i of a partitioned target, in
the dead-lettering's own transaction (the copy's sequence number names the partition it is in). A
partitioned queue forwarding into a non-partitioned one (created at runtime: a configured group
mixing them stays on version 1) forwards in one transaction from the partition in the target's
store and through the relay (``server/dead_letter_relay.py``: the source's own dead-letter queue,
then an append under move keys, then the delete) from the others; so does a non-partitioned
subscription into a queue in another store (a failed filter's copy too); with the target's store offline
the dead letter waits in the source's dead-letter queue and arrives once the store is back; a kill
-9 meanwhile does not lose it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.management import SqlRuleFilter
from broker_process import BrokerProcess
from test_partitioning import PARTITIONS, STORES, _switch, key_in_store, partition
from three_stores import admin as _admin
from three_stores import serve, start

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop

STRICT = [{"Name": "sum", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "quantity + 1 > 0"}}}]
QUEUES = [
    {"Name": "pdl-src", "Properties": {"EnablePartitioning": True, "MaxDeliveryCount": 2,
                                       "ForwardDeadLetteredMessagesTo": "pdl-dst"}},
    {"Name": "pdl-dst", "Properties": {"EnablePartitioning": True}},
    {"Name": "pdl-catch", "Properties": {"EnablePartitioning": True}},
    {"Name": "pdl-plain-src", "Properties": {"EnablePartitioning": True}},
]
TOPICS = [{"Name": "pdl-orders", "Properties": {"EnablePartitioning": True}, "Subscriptions": [
    {"Name": "strict", "Properties": {"ForwardDeadLetteredMessagesTo": "pdl-catch"}, "Rules": STRICT}]},
          {"Name": "pdl-single-topic", "Properties": {}}]


def home_of(name: str) -> str:
    """The store a non-partitioned entity lives in (its name's hash picks one of the three)."""
    return STORES[partition_index(name.lower(), len(STORES))]


def named_in(store: str, prefix: str) -> str:
    return next(f"{prefix}-{i}" for i in range(100) if home_of(f"{prefix}-{i}") == store)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(tmp_path_factory.mktemp("core-v2-partitioned-fdlq"), QUEUES, TOPICS)


def _dead_letter_one_per_store(broker: BrokerProcess, queue: str, tag: str) -> dict[str, str]:
    """Send one message per store (a partition key whose partition lives there) and dead-letter each;
    returns partition key -> body."""
    sent = {key_in_store(store): f"{tag} via {store}" for store in STORES}
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            for key, body in sent.items():
                sender.send_messages(ServiceBusMessage(body, partition_key=key, message_id=body))
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            left = len(sent)
            deadline = time.monotonic() + 30
            while left and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=left, max_wait_time=5):
                    receiver.dead_letter_message(m, reason=f"{tag} reason", error_description="why not")
                    left -= 1
            assert left == 0
    return sent


def _drain(client: ServiceBusClient, queue: str, want: int, **kwargs: Any) -> list[ServiceBusReceivedMessage]:
    """Receive and complete until ``want`` messages came (within 30 s), then look 2 s more for any too many."""
    got: list[ServiceBusReceivedMessage] = []
    with client.get_queue_receiver(queue, **kwargs) as receiver:
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=want - len(got), max_wait_time=5)
            for m in batch:
                receiver.complete_message(m)
            got += batch
        for m in receiver.receive_messages(max_message_count=10, max_wait_time=2):
            receiver.complete_message(m)
            got.append(m)
    return got


def _dead_letter_queue_empty(client: ServiceBusClient, queue: str) -> bool:
    """Whether ``queue``'s dead-letter queue is (or within 30 s becomes) empty."""
    deadline = time.monotonic() + 30
    while True:
        with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
            if receiver.peek_messages(max_message_count=10) == []:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def test_each_partition_dead_letters_into_the_same_partition_of_a_partitioned_target(broker: BrokerProcess) -> None:
    sent = _dead_letter_one_per_store(broker, "pdl-src", "client")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        got = _drain(client, "pdl-dst", len(sent))
        assert sorted(str(m) for m in got) == sorted(sent.values())
        for m in got:
            assert (m.dead_letter_reason, m.dead_letter_error_description) == ("client reason", "why not")
            assert m.dead_letter_source == "pdl-src" and m.delivery_count == 0
            assert m.sequence_number is not None and m.partition_key is not None
            assert partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)
        assert _dead_letter_queue_empty(client, "pdl-src")


def test_max_delivery_count_forwards_from_the_partition(broker: BrokerProcess) -> None:
    key = key_in_store("disk2")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("pdl-src") as sender:
            sender.send_messages(ServiceBusMessage("too often", partition_key=key))
        with client.get_queue_receiver("pdl-src") as receiver:
            for _ in range(2):
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.abandon_message(m)
        [f] = _drain(client, "pdl-dst", 1)
        assert (str(f), f.dead_letter_reason, f.dead_letter_source) == (
            "too often", "MaxDeliveryCountExceeded", "pdl-src")
        assert f.sequence_number is not None and partition(f.sequence_number) == partition_index(key, PARTITIONS)
        assert _dead_letter_queue_empty(client, "pdl-src")


def test_a_partitioned_subscription_forwards_its_dead_letters_and_failed_filters(broker: BrokerProcess) -> None:
    keys = [key_in_store(store) for store in STORES]
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("pdl-orders") as sender:
            for key in keys:
                sender.send_messages([
                    ServiceBusMessage(f"text {key}", partition_key=key, application_properties={"quantity": "x"}),
                    ServiceBusMessage(f"num {key}", partition_key=key, application_properties={"quantity": 1})])
        with client.get_subscription_receiver("pdl-orders", "strict", max_wait_time=5) as receiver:
            refused: list[ServiceBusReceivedMessage] = []
            deadline = time.monotonic() + 30
            while len(refused) < len(keys) and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=len(keys), max_wait_time=5):
                    receiver.dead_letter_message(m, reason="no stock")
                    refused.append(m)
        assert sorted(str(m) for m in refused) == sorted(f"num {k}" for k in keys)
        got = _drain(client, "pdl-catch", 2 * len(keys))
        assert sorted(str(m) for m in got) == sorted([f"num {k}" for k in keys] + [f"text {k}" for k in keys])
        for m in got:
            assert m.dead_letter_source == "pdl-orders/subscriptions/strict"
            assert m.dead_letter_reason == ("no stock" if str(m).startswith("num") else "FilterEvaluationException")
            assert m.sequence_number is not None and m.partition_key is not None
            assert partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)
        with client.get_subscription_receiver("pdl-orders", "strict",
                                              sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            assert dead.peek_messages(max_message_count=10) == []


def test_into_a_non_partitioned_target_in_one_store_from_every_partition(broker: BrokerProcess) -> None:
    """Created at runtime, the partitioned source runs on the core: its partitions in the target's
    store forward in the dead-lettering's transaction, the others through the relay."""
    admin = _admin(broker)
    target = named_in("disk1", "pdl-plain")
    admin.create_queue(target)
    admin.create_queue("pdl-later", enable_partitioning=True, forward_dead_lettered_messages_to=target)
    assert any("serving pdl-later (" in line for line in broker.output)
    sent = _dead_letter_one_per_store(broker, "pdl-later", "later")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        got = _drain(client, target, len(sent))
        assert sorted(str(m) for m in got) == sorted(sent.values())
        for m in got:
            assert (m.dead_letter_reason, m.dead_letter_source, m.delivery_count) == ("later reason", "pdl-later", 0)
        assert _dead_letter_queue_empty(client, "pdl-later")


def test_forwarding_set_on_a_partitioned_queue_at_runtime(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    target = named_in("default", "pdl-upd")
    admin.create_queue(target)
    queue = admin.get_queue("pdl-plain-src")
    queue.forward_dead_lettered_messages_to = target
    admin.update_queue(queue)
    sent = _dead_letter_one_per_store(broker, "pdl-plain-src", "updated")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        got = _drain(client, target, len(sent))
        assert sorted(str(m) for m in got) == sorted(sent.values())
        assert {m.dead_letter_source for m in got} == {"pdl-plain-src"}
        assert _dead_letter_queue_empty(client, "pdl-plain-src")


def test_forwarding_set_on_a_partitioned_subscription_at_runtime(broker: BrokerProcess) -> None:
    """(Refused as not built before issue 14's partitioned forwarding.)"""
    admin = _admin(broker)
    admin.create_topic("pdl-later-topic", enable_partitioning=True)
    admin.create_subscription("pdl-later-topic", "later")
    subscription = admin.get_subscription("pdl-later-topic", "later")
    subscription.forward_dead_lettered_messages_to = "pdl-dst"
    admin.update_subscription("pdl-later-topic", subscription)
    assert admin.get_subscription("pdl-later-topic", "later").forward_dead_lettered_messages_to is not None
    keys = [key_in_store(store) for store in STORES]
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("pdl-later-topic") as sender:
            for key in keys:
                sender.send_messages(ServiceBusMessage(f"sub {key}", partition_key=key))
        with client.get_subscription_receiver("pdl-later-topic", "later", max_wait_time=5) as receiver:
            left, deadline = len(keys), time.monotonic() + 30
            while left and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=left, max_wait_time=5):
                    receiver.dead_letter_message(m, reason="later")
                    left -= 1
        got = _drain(client, "pdl-dst", len(keys))
        assert sorted(str(m) for m in got) == sorted(f"sub {k}" for k in keys)
        for m in got:
            assert (m.dead_letter_reason, m.dead_letter_source) == ("later", "pdl-later-topic/subscriptions/later")
            assert m.sequence_number is not None and m.partition_key is not None
            assert partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)


def test_a_subscription_forwards_into_another_store_through_the_relay(broker: BrokerProcess) -> None:
    """A non-partitioned topic's subscription (in the topic's store) forwarding its dead letters into
    a queue in another store: a failed filter's copy and a client's dead letter both arrive there."""
    admin = _admin(broker)
    target = next(named_in(store, "pdl-elsewhere") for store in STORES if store != home_of("pdl-single-topic"))
    admin.create_queue(target)
    admin.create_subscription("pdl-single-topic", "strict", forward_dead_lettered_messages_to=target)
    admin.create_rule("pdl-single-topic", "strict", "sum", filter=SqlRuleFilter("quantity + 1 > 0"))
    admin.delete_rule("pdl-single-topic", "strict", "$Default")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender("pdl-single-topic") as sender:
            sender.send_messages([ServiceBusMessage("text", application_properties={"quantity": "x"}),
                                  ServiceBusMessage("num", application_properties={"quantity": 1})])
        with client.get_subscription_receiver("pdl-single-topic", "strict") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.dead_letter_message(m, reason="no stock")
        got = _drain(client, target, 2)
        assert sorted((str(m), m.dead_letter_reason, m.dead_letter_source) for m in got) == [
            ("num", "no stock", "pdl-single-topic/subscriptions/strict"),
            ("text", "FilterEvaluationException", "pdl-single-topic/subscriptions/strict")]
        deadline = time.monotonic() + 30
        while True:
            with client.get_subscription_receiver("pdl-single-topic", "strict",
                                                  sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
                if dead.peek_messages(max_message_count=10) == []:
                    break
            assert time.monotonic() < deadline, "the relayed dead letters stayed in the dead-letter queue"
            time.sleep(0.5)


def test_a_dead_letter_waiting_for_the_relay_survives_a_kill(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The target's store offline: the relay cannot append, so the dead letter stays in the source's
    dead-letter queue, marked with its source (never lost). Killed (-9) and started again with the
    store back, it is found once: in the target (where a relay at start carries it) or still in
    the source's dead-letter queue (should the relay not have run yet)."""
    base = tmp_path_factory.mktemp("core-v2-partitioned-fdlq-kill")
    target = named_in("disk2", "pdl-far")
    process = start(base, [], [])
    try:
        admin = _admin(process)
        admin.create_queue(target)
        admin.create_queue("pdl-away", enable_partitioning=True, forward_dead_lettered_messages_to=target)
        _switch(process, "disk2", "offline")
        key = key_in_store("disk1")
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            with client.get_queue_sender("pdl-away") as sender:
                sender.send_messages(ServiceBusMessage("waiting", partition_key=key))
            with client.get_queue_receiver("pdl-away") as receiver:
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.dead_letter_message(m, reason="offline target")
            with client.get_queue_receiver("pdl-away", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
                [kept] = dead.peek_messages(max_message_count=10)
                assert str(kept) == "waiting" and kept.dead_letter_source == "pdl-away"
        process.kill()
        process.start()
        with ServiceBusClient.from_connection_string(process.connection_string) as client:
            found = [*_drain(client, target, 1),
                     *_drain(client, "pdl-away", 0, sub_queue=ServiceBusSubQueue.DEAD_LETTER)]
            assert [(str(f), f.dead_letter_reason, f.dead_letter_source) for f in found] == [
                ("waiting", "offline target", "pdl-away")]
    finally:
        process.stop()


def test_with_the_targets_store_offline_the_dead_letter_arrives_once_it_is_back(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    target = named_in("disk2", "pdl-back")
    admin.create_queue(target)
    admin.create_queue("pdl-back-src", enable_partitioning=True, forward_dead_lettered_messages_to=target)
    _switch(broker, "disk2", "offline")
    try:
        key = key_in_store("disk1")
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("pdl-back-src") as sender:
                sender.send_messages(ServiceBusMessage("held", partition_key=key))
            with client.get_queue_receiver("pdl-back-src") as receiver:
                [m] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.dead_letter_message(m, reason="later")
    finally:
        _switch(broker, "disk2", "online")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        [f] = _drain(client, target, 1)
        assert (str(f), f.dead_letter_reason, f.dead_letter_source) == ("held", "later", "pdl-back-src")
        assert _dead_letter_queue_empty(client, "pdl-back-src")
