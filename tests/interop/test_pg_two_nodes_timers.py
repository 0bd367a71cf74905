"""Two broker nodes on one PostgreSQL database: what falls due happens once, whichever node is alive
(issue 18, item 3: scheduled activation and dead-lettering on expiry exactly once across nodes).

A message scheduled through node A is announced to the other nodes with its time (the store's
channel of due times), and every node reads the store's next due time now and then besides; at that
time each node's queue asks the store to activate what is due, fenced there, so one of them
activates each message. So a message scheduled through a node that then dies with ``kill -9`` still
comes through the other node, once; and messages that expire while both nodes hold them in their
windows are dead-lettered once. Nodes are started as users start them (``scripts/serve --store
postgresql://... --node-id ...``) on a database of this module's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "later", "Properties": {}},
    {"Name": "later-both", "Properties": {}},
    {"Name": "expires", "Properties": {"DeadLetteringOnMessageExpiration": True}},
    {"Name": "expires-both", "Properties": {"DeadLetteringOnMessageExpiration": True}},
]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("two-nodes-timers")
    yield from node_pair(base, write_config(base / "Config.json", QUEUES), database)


def _receive(node: BrokerProcess, queue: str, want: int, seconds: float,
             sub_queue: ServiceBusSubQueue | None = None,
             both: list[str] | None = None) -> list[tuple[str, int, str | None]]:
    """Receive and complete until ``want`` came, then for 3 s more (a second copy would show), or
    until ``seconds`` passed: (body, sequence number, dead-letter reason) of each. With ``both`` (a
    list the other node's receiver shares), ``want`` counts what the two received together."""
    got: list[tuple[str, int, str | None]] = []
    counted = got if both is None else both
    deadline = time.monotonic() + seconds
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_queue_receiver(queue, sub_queue=sub_queue, max_wait_time=2) as receiver:
        settle_until: float | None = None
        while time.monotonic() < (deadline if settle_until is None else min(deadline, settle_until)):
            for m in receiver.receive_messages(max_message_count=50, max_wait_time=1):
                got.append((str(m), int(m.sequence_number or 0), m.dead_letter_reason))
                if both is not None:
                    both.append(str(m))  # list.append is atomic: the two threads share it
                receiver.complete_message(m)
            if len(counted) >= want and settle_until is None:
                settle_until = time.monotonic() + 3
    return got


def test_a_message_scheduled_through_a_node_that_dies_comes_through_the_other_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_sender("later") as sender:
        (number,) = sender.schedule_messages(ServiceBusMessage("when-a-is-gone"),
                                             datetime.now(UTC) + timedelta(seconds=5))
    a.kill()  # before it is due: node a never activates it
    try:
        got = _receive(b, "later", 1, seconds=30)
        assert got == [("when-a-is-gone", number, None)]
    finally:
        a.start()
    assert _receive(a, "later", 1, seconds=3) == []  # the restarted node finds nothing left either


def test_messages_scheduled_while_both_nodes_run_are_activated_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    due = datetime.now(UTC) + timedelta(seconds=4)
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_sender("later-both") as sender:
        numbers = sender.schedule_messages([ServiceBusMessage(f"s{i}") for i in range(20)], due)
    results: dict[str, list[tuple[str, int, str | None]]] = {}
    both: list[str] = []  # what either node received: each stops 3 s after the two have all 20

    def receive(node: BrokerProcess, name: str) -> None:
        results[name] = _receive(node, "later-both", 20, seconds=25, both=both)

    threads = [threading.Thread(target=receive, args=(node, name)) for node, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    received = sorted((seq, body) for got in results.values() for body, seq, _ in got)
    assert received == sorted(zip(numbers, [f"s{i}" for i in range(20)], strict=True))  # each once


def test_messages_that_expire_after_their_node_died_are_dead_lettered_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    for node, prefix in ((a, "a"), (b, "b")):
        with ServiceBusClient.from_connection_string(node.connection_string) as client, \
                client.get_queue_sender("expires") as sender:
            sender.send_messages([ServiceBusMessage(f"{prefix}{i}", time_to_live=timedelta(seconds=4))
                                  for i in range(5)])
    a.kill()
    try:
        got = _receive(b, "expires", 10, seconds=30, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert sorted(body for body, _, _ in got) == sorted([f"a{i}" for i in range(5)] + [f"b{i}" for i in range(5)])
        assert {reason for _, _, reason in got} == {"TTLExpiredException"}
    finally:
        a.start()
    assert _receive(a, "expires", 1, seconds=3, sub_queue=ServiceBusSubQueue.DEAD_LETTER) == []


def test_messages_that_expire_while_both_nodes_hold_them_are_dead_lettered_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    for node, prefix in ((a, "a"), (b, "b")):
        with ServiceBusClient.from_connection_string(node.connection_string) as client, \
                client.get_queue_sender("expires-both") as sender:
            sender.send_messages([ServiceBusMessage(f"{prefix}{i}", time_to_live=timedelta(seconds=4))
                                  for i in range(10)])
    results: dict[str, list[tuple[str, int, str | None]]] = {}
    both: list[str] = []  # what either node received: each stops 3 s after the two have all 20

    def receive(node: BrokerProcess, name: str) -> None:
        time.sleep(5)  # past their expiry: both nodes' windows held them
        results[name] = _receive(node, "expires-both", 20, seconds=25, sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                 both=both)

    threads = [threading.Thread(target=receive, args=(node, name)) for node, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    received = sorted(body for got in results.values() for body, _, _ in got)
    assert received == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    assert _receive(a, "expires-both", 1, seconds=3) == []  # and none left in the queue itself
