"""Two broker nodes on one PostgreSQL database: partitioned queues and a queue's ForwardTo (issue 18,
item 3), both on the partition core.

Each partition of a partitioned queue is a core of its own on each node, each watching its partition
in the store, so a node's receiver takes what the other node stored in any partition. A queue's
ForwardTo routes a send when it arrives, on whichever node it arrives at, so what is sent to the
source through either node lands in the target and is received through either. Nodes are started as
users start them (``scripts/serve --store postgresql://... --node-id ...``) on a database
of this module's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "parted", "Properties": {"EnablePartitioning": True}},
    {"Name": "parted-later", "Properties": {"EnablePartitioning": True}},
    {"Name": "parted-dies", "Properties": {"EnablePartitioning": True, "LockDuration": "PT5S"}},
    {"Name": "source", "Properties": {"ForwardTo": "target"}},
    {"Name": "target", "Properties": {}},
]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("two-nodes-partitioned")
    yield from node_pair(base, write_config(base / "Config.json", QUEUES), database, ["--log-level", "INFO"])


def _send(node: BrokerProcess, queue: str, bodies: list[str], keyed: bool = False) -> None:
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        for start in range(0, len(bodies), 50):
            batch = bodies[start:start + 50]
            if keyed:  # one key per message: spread over the partitions by key, each send on its own
                for body in batch:
                    sender.send_messages(ServiceBusMessage(body, partition_key=f"k{hash(body) % 7}"))
            else:
                sender.send_messages([ServiceBusMessage(b) for b in batch])


def _drain(node: BrokerProcess, queue: str, want: int, seconds: float = 30,
           both: list[str] | None = None) -> list[tuple[str, int, int]]:
    """Receive and complete until ``want`` came, then 3 s more (a second copy would show), or until
    ``seconds`` passed: (body, sequence number, delivery count) of each. With ``both`` (a list the
    other node's receiver shares), ``want`` counts what the two received together."""
    got: list[tuple[str, int, int]] = []
    counted = got if both is None else both
    deadline = time.monotonic() + seconds
    settle_until: float | None = None
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_queue_receiver(queue, max_wait_time=2) as receiver:
        while time.monotonic() < (deadline if settle_until is None else min(deadline, settle_until)):
            for m in receiver.receive_messages(max_message_count=50, max_wait_time=1):
                got.append((str(m), int(m.sequence_number or 0), m.delivery_count or 0))
                if both is not None:
                    both.append(str(m))  # list.append is atomic: the two threads share it
                receiver.complete_message(m)
            if len(counted) >= want and settle_until is None:
                settle_until = time.monotonic() + 3
    return got


def _both(a: BrokerProcess, b: BrokerProcess, queue: str, want: int, seconds: float = 30) -> list[str]:
    results: dict[str, list[tuple[str, int, int]]] = {}
    both: list[str] = []  # what either node received: each stops 3 s after the two have all ``want``

    def receive(node: BrokerProcess, name: str) -> None:
        results[name] = _drain(node, queue, want, seconds, both)

    threads = [threading.Thread(target=receive, args=(node, name)) for node, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(body for got in results.values() for body, _, _ in got)


def test_the_partitioned_queue_runs_on_the_core_on_both_nodes(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    for node in nodes:
        assert any("serving parted (" in line for line in node.output), node.output[-20:]


def test_a_partitioned_queue_sent_to_through_both_nodes_gives_every_message_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    keyless = [f"a{i}" for i in range(150)]
    keyed = [f"b{i}" for i in range(60)]
    _send(a, "parted", keyless)
    _send(b, "parted", keyed, keyed=True)
    assert _both(a, b, "parted", len(keyless) + len(keyed)) == sorted(keyless + keyed)


def test_a_partitioned_queues_scheduled_message_comes_through_the_other_node_when_its_node_dies(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_sender("parted-later") as sender:
        sender.schedule_messages([ServiceBusMessage(f"later{i}") for i in range(6)],
                                 datetime.now(UTC) + timedelta(seconds=5))
    a.kill()
    try:
        got = _drain(b, "parted-later", 6, seconds=30)
        assert sorted(body for body, _, _ in got) == [f"later{i}" for i in range(6)]
    finally:
        a.start()


def test_a_node_killed_holding_locks_of_a_partitioned_queue_loses_nothing(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(b, "parted-dies", [f"d{i}" for i in range(8)])
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_receiver("parted-dies", max_wait_time=5) as receiver:
        held: list[str] = []
        deadline = time.monotonic() + 20
        while len(held) < 8 and time.monotonic() < deadline:
            held += [str(m) for m in receiver.receive_messages(max_message_count=8, max_wait_time=2)]
        assert sorted(held) == sorted(f"d{i}" for i in range(8))
        a.kill()  # node a dies holding the eight locks (LockDuration 5 s)
    try:
        got = _drain(b, "parted-dies", 8, seconds=30)
        assert sorted(body for body, _, _ in got) == sorted(f"d{i}" for i in range(8))
        assert all(count == 1 for _, _, count in got)  # the dead node's delivery counted
    finally:
        a.start()


def test_forward_to_across_nodes_lands_every_message_once_in_the_target(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    through_a, through_b = [f"fa{i}" for i in range(80)], [f"fb{i}" for i in range(80)]
    _send(a, "source", through_a)
    _send(b, "source", through_b)
    assert _both(a, b, "target", 160) == sorted(through_a + through_b)
    assert _drain(b, "source", 1, seconds=3) == []  # nothing stays in the source
