"""Moves from a partitioned queue, and into a partitioned topic, on the partition core.

The broker is started as users start it (``scripts/serve``) with the three SQLite
messaging stores of ``test_partitioning`` (partition i of every partitioned entity in store i mod
3); its start-up log says every entity runs on the core. The CLI and the JSON API drive the moves
(``server/moves.py``): each partition's core moves its own rows; a move into a partitioned topic
plans each message's copies in the topic partition its key picks and stores them, under the
message's move key, in that partition of every subscription whose rule takes it, as a send would.
The command-line scenario of ``test_console_cli`` runs unchanged with its queues created partitioned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import test_console_cli
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from broker_process import BrokerProcess

# The scenario (collected here with this module's cli_broker, whose queues are partitioned).
from test_console_cli import test_resubmit_move_purge_and_counts_from_the_command_line  # noqa: F401
from test_console_resubmit_kill9 import call, message_ids
from test_partitioning import PARTITIONS, STORES, key_in_store, partition
from three_stores import serve

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop

PARTITIONED = {"EnablePartitioning": True}
RED = [{"Name": "red", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = 'red'"}}}]
QUEUES = [
    *({"Name": q["Name"], "Properties": {**q["Properties"], **PARTITIONED}} for q in test_console_cli.QUEUES),
    {"Name": "pmv-src", "Properties": PARTITIONED},
    {"Name": "pmv-dst", "Properties": PARTITIONED},
    {"Name": "pmv-plain", "Properties": {}},
    {"Name": "pmv-single", "Properties": {}},
]
TOPICS = [{"Name": "pmv-topic", "Properties": PARTITIONED, "Subscriptions": [
    {"Name": "all", "Properties": {}}, {"Name": "red", "Properties": {}, "Rules": RED}]}]


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(tmp_path_factory.mktemp("core-v2-partitioned-moves"), QUEUES, TOPICS)


def _dead_letter(broker: BrokerProcess, queue: str, messages: dict[str, str]) -> None:
    """Send each (body -> partition key) message, keyed (so they spread over the stores), with a
    colour ('red' when the body starts with r), and dead-letter them all."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            for body, key in messages.items():
                colour = "red" if body.startswith("r") else "blue"
                sender.send_messages(ServiceBusMessage(body, message_id=body, partition_key=key,
                                                       application_properties={"color": colour}))
        with client.get_queue_receiver(queue, max_wait_time=5) as receiver:
            left, deadline = len(messages), time.monotonic() + 30
            while left and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=left, max_wait_time=5):
                    receiver.dead_letter_message(m, reason="Bad")
                    left -= 1
            assert left == 0


def _spread(*bodies: str) -> dict[str, str]:
    """The bodies, each with a partition key in the next store (round the three)."""
    return {body: key_in_store(STORES[i % len(STORES)]) for i, body in enumerate(bodies)}


def _received(client: ServiceBusClient, entity: str, want: int, subscription: str | None = None,
              sub_queue: ServiceBusSubQueue | None = None) -> list[ServiceBusReceivedMessage]:
    """Receive and complete until ``want`` came (within 30 s), then 2 s more for any too many."""
    receiver = (client.get_queue_receiver(entity, sub_queue=sub_queue) if subscription is None
                else client.get_subscription_receiver(entity, subscription, sub_queue=sub_queue))
    got: list[ServiceBusReceivedMessage] = []
    with receiver:
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


def _move(broker: BrokerProcess, source: str, target: str, expected: int, *selection: str) -> None:
    assert test_console_cli.messages(broker, "move", source, "--to", target, *(selection or ("--all",))) == \
        f"moved {expected} of {expected}\n"


def test_browse_and_move_every_partitions_dead_letters_into_a_queue(cli_broker: BrokerProcess) -> None:
    sent = _spread("b1", "b2", "b3")
    _dead_letter(cli_broker, "pmv-src", sent)
    listed = call(cli_broker, "GET", "/entities/pmv-src/$messages?subQueue=deadletter&count=10")["messages"]
    assert sorted(m["messageId"] for m in listed) == ["b1", "b2", "b3"]
    assert len({partition(m["sequenceNumber"]) for m in listed}) == 3  # three partitions, one per store
    _move(cli_broker, "pmv-src", "pmv-plain", 3)
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        got = _received(client, "pmv-plain", 3)
        assert sorted(str(m) for m in got) == ["b1", "b2", "b3"]
        assert all(m.dead_letter_reason is None and m.delivery_count == 0 for m in got)
    assert message_ids(cli_broker, "pmv-src", "deadletter") == []


def test_move_by_number_resubmit_and_purge_a_partitioned_queue(cli_broker: BrokerProcess) -> None:
    sent = _spread("n1", "n2", "n3", "n4")
    _dead_letter(cli_broker, "pmv-src", sent)
    listed = call(cli_broker, "GET", "/entities/pmv-src/$messages?subQueue=deadletter&count=10")["messages"]
    by_id = {m["messageId"]: m["sequenceNumber"] for m in listed}
    _move(cli_broker, "pmv-src", "pmv-dst", 2, "--sequence", str(by_id["n1"]), str(by_id["n2"]))
    assert test_console_cli.messages(cli_broker, "resubmit", "pmv-src", "--filter", "sys.MessageId = 'n3'") == \
        "moved 1 of 1\n"
    assert message_ids(cli_broker, "pmv-src", "deadletter") == ["n4"]
    assert sorted(message_ids(cli_broker, "pmv-src", "active")) == ["n3"]
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        got = _received(client, "pmv-dst", 2)
        assert sorted(str(m) for m in got) == ["n1", "n2"]
        for m in got:  # a moved message goes to the partition its key picks, as a send
            assert m.sequence_number is not None and m.partition_key is not None
            assert partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)
    assert test_console_cli.messages(cli_broker, "purge", "pmv-src") == "purged 1\n"
    assert test_console_cli.messages(cli_broker, "purge", "pmv-src", "--sub-queue", "deadletter") == "purged 1\n"
    assert message_ids(cli_broker, "pmv-src", "active") == []
    assert message_ids(cli_broker, "pmv-src", "deadletter") == []


def test_a_move_into_a_partitioned_topic_fans_out_in_the_keys_partition(cli_broker: BrokerProcess) -> None:
    """From a partitioned queue and from a non-partitioned one: each message into the topic
    partition its key picks, then to that partition of every subscription whose rule takes it."""
    _dead_letter(cli_broker, "pmv-src", _spread("r1", "b4", "r2"))
    _dead_letter(cli_broker, "pmv-single", _spread("r3", "b5"))
    _move(cli_broker, "pmv-src", "pmv-topic", 3)
    _move(cli_broker, "pmv-single", "pmv-topic", 2)
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        everything = _received(client, "pmv-topic", 5, "all")
        red = _received(client, "pmv-topic", 3, "red")
        assert sorted(str(m) for m in everything) == ["b4", "b5", "r1", "r2", "r3"]
        assert sorted(str(m) for m in red) == ["r1", "r2", "r3"]
        for m in everything + red:
            assert m.dead_letter_reason is None and m.delivery_count == 0
            assert m.sequence_number is not None and m.partition_key is not None
            assert partition(m.sequence_number) == partition_index(m.partition_key, PARTITIONS)
    assert message_ids(cli_broker, "pmv-src", "deadletter") == []
    assert message_ids(cli_broker, "pmv-single", "deadletter") == []
