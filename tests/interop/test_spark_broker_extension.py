"""The Sodalite `$management` extensions the Spark data source uses (docs/spark.md), through the project's own
AMQP client (the official SDK cannot send them): complete through a sequence number in a partition,
partition bounds, and peek within one partition. Messages are sent and locked with the official SDK.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config

from sodalite.amqpclient import AmqpClient

pytestmark = pytest.mark.interop

COMPLETE_THROUGH = "com.sodalite:complete-through-sequence-number"
BOUNDS = "com.sodalite:partition-bounds"
PEEK_PARTITION = "com.sodalite:peek-partition"
PARTITION_SHIFT = 48

QUEUES = [
    {"Name": "ext-plain", "Properties": {"LockDuration": "PT1M"}},
    {"Name": "ext-idem", "Properties": {}},
    {"Name": "ext-part", "Properties": {"EnablePartitioning": True}},
    {"Name": "ext-dlq", "Properties": {}},
    {"Name": "ext-auth", "Properties": {}},
]
RULES = [
    {"KeyName": KEY_NAME, "PrimaryKey": KEY},
    {"KeyName": "sender", "PrimaryKey": "send-key", "Rights": ["Send"]},
    {"KeyName": "listener", "PrimaryKey": "listen-key", "Rights": ["Listen"]},
]


@pytest.fixture(scope="module")
def ext_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("spark-ext")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES,
                                                         AuthorizationRules=RULES)).start()
    yield process
    process.stop()


def client(broker: BrokerProcess, key_name: str = KEY_NAME, key: str = KEY) -> AmqpClient:
    return AmqpClient("localhost", broker.port, key_name, key, timeout=30)


def send(broker: BrokerProcess, queue: str, count: int, **kwargs: str) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}", **kwargs) for i in range(count)])  # type: ignore[arg-type]


def peeked_numbers(broker: BrokerProcess, queue: str) -> list[int]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_receiver(queue) as receiver:
            return [m.sequence_number for m in receiver.peek_messages(max_message_count=100)]  # type: ignore[misc]


def test_complete_through_removes_up_to_n_and_skips_locked(ext_broker: BrokerProcess) -> None:
    send(ext_broker, "ext-plain", 6)
    numbers = peeked_numbers(ext_broker, "ext-plain")
    assert len(numbers) == 6
    with ServiceBusClient.from_connection_string(ext_broker.connection_string) as sb:
        with sb.get_queue_receiver("ext-plain", max_wait_time=10) as receiver:
            locked = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [m.sequence_number for m in locked] == [numbers[0]]
            with client(ext_broker) as c:
                reply = c.management("ext-plain", COMPLETE_THROUGH, {"partition": 0, "sequence-number": numbers[3]})
                assert reply.status == 200
                assert reply.body == {"count": 3}  # numbers[1..3]; numbers[0] is locked, so it stays
            assert peeked_numbers(ext_broker, "ext-plain") == [numbers[0], numbers[4], numbers[5]]
            receiver.complete_message(locked[0])  # the lock holder can still settle what was skipped
    assert peeked_numbers(ext_broker, "ext-plain") == [numbers[4], numbers[5]]


def test_complete_through_is_idempotent_and_durable(ext_broker: BrokerProcess, tmp_path: Path) -> None:
    send(ext_broker, "ext-idem", 4)
    numbers = peeked_numbers(ext_broker, "ext-idem")
    with client(ext_broker) as c:
        first = c.management("ext-idem", COMPLETE_THROUGH, {"partition": 0, "sequence-number": numbers[1]})
        again = c.management("ext-idem", COMPLETE_THROUGH, {"partition": 0, "sequence-number": numbers[1]})
    assert (first.body, again.body) == ({"count": 2}, {"count": 0})
    ext_broker.stop()  # the reply came after the store commit: a restart keeps the removal
    ext_broker.start()
    assert peeked_numbers(ext_broker, "ext-idem") == numbers[2:]


def test_partitioned_entity_bounds_peek_and_complete_per_partition(ext_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(ext_broker.connection_string) as sb:
        with sb.get_queue_sender("ext-part") as sender:
            for key in ("a", "b", "c", "d", "e"):
                sender.send_messages([ServiceBusMessage(f"{key}{i}", partition_key=key) for i in range(3)])
    with client(ext_broker) as c:
        bounds = c.management("ext-part", BOUNDS, {}).body["partitions"]
        assert len(bounds) == 16
        assert [b["partition"] for b in bounds] == list(range(16))
        used = [b for b in bounds if b["first-sequence-number"] is not None]
        assert sum(b["next-sequence-number"] - b["first-sequence-number"] for b in used) == 15
        for b in bounds:
            base = b["partition"] << PARTITION_SHIFT
            assert b["next-sequence-number"] > base
            if b["first-sequence-number"] is None:
                assert b["next-sequence-number"] == base + 1
        target = used[0]
        index, first, end = target["partition"], target["first-sequence-number"], target["next-sequence-number"]
        peeked = c.management("ext-part", PEEK_PARTITION, {"partition": index, "from-sequence-number": 0,
                                                           "message-count": 100}).body["messages"]
        assert len(peeked) == end - first  # only that partition's messages, nothing of the next one
        removed = c.management("ext-part", COMPLETE_THROUGH, {"partition": index, "sequence-number": end})
        assert removed.body == {"count": end - first}
        after = c.management("ext-part", BOUNDS, {}).body["partitions"][index]
        assert after["first-sequence-number"] is None
        assert after["next-sequence-number"] == end  # removing never moves the next number back
        total = sum(len(c.management("ext-part", PEEK_PARTITION, {"partition": i, "message-count": 100})
                        .body["messages"]) for i in range(16))
        assert total == 15 - (end - first)
        bad = c.management("ext-part", COMPLETE_THROUGH, {"partition": 16, "sequence-number": 1})
        assert bad.status == 400 and "partition" in (bad.description or "")
        missing = c.management("ext-part", COMPLETE_THROUGH, {"partition": 0})
        assert missing.status == 400 and "sequence-number" in (missing.description or "")


def test_dead_letter_sub_queue(ext_broker: BrokerProcess) -> None:
    send(ext_broker, "ext-dlq", 3)
    with ServiceBusClient.from_connection_string(ext_broker.connection_string) as sb:
        with sb.get_queue_receiver("ext-dlq", max_wait_time=10) as receiver:
            for m in receiver.receive_messages(max_message_count=3, max_wait_time=10):
                receiver.dead_letter_message(m, reason="bad")
    with client(ext_broker) as c:
        bounds = c.management("ext-dlq/$deadletterqueue", BOUNDS, {}).body["partitions"]
        first = bounds[0]["first-sequence-number"]
        assert first is not None
        removed = c.management("ext-dlq/$deadletterqueue", COMPLETE_THROUGH,
                               {"partition": 0, "sequence-number": first})
        assert removed.body == {"count": 1}
        left = c.management("ext-dlq/$deadletterqueue", PEEK_PARTITION, {"message-count": 10}).body["messages"]
        assert len(left) == 2
        assert c.management("ext-dlq", PEEK_PARTITION, {"message-count": 10}).body["messages"] == []


def test_complete_through_needs_listen(ext_broker: BrokerProcess) -> None:
    send(ext_broker, "ext-auth", 2)
    with client(ext_broker, "sender", "send-key") as c:
        refused = c.management("ext-auth", COMPLETE_THROUGH, {"partition": 0, "sequence-number": 2**47})
        assert refused.status == 401 and refused.condition == "amqp:unauthorized-access"
    assert len(peeked_numbers(ext_broker, "ext-auth")) == 2
    with client(ext_broker, "listener", "listen-key") as c:
        done = c.management("ext-auth", COMPLETE_THROUGH, {"partition": 0, "sequence-number": 2**47})
        assert done.body == {"count": 2}
