"""Two broker nodes on one PostgreSQL database: duplicate detection and counts across nodes (issue 18).

Both nodes are started as users start them (``scripts/serve --store postgresql://...
--node-id ...``) with the same configuration, on a database of this module's own on the PostgreSQL
server this test process starts (``tests/pg_server.py``). The store decides duplicates: the batch
that appends a message with a MessageId first takes the id in the same transaction, under the
partition's lock, so of two nodes sending one id only one stores it and both acknowledge. The
management answers of a node (ATOM runtime properties through the SDK's administration client)
read the counts back from the store, so they show what went through the other node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

DEDUP = {"RequiresDuplicateDetection": True, "DuplicateDetectionHistoryTimeWindow": "PT10M"}
QUEUES = [
    {"Name": "dedup", "Properties": DEDUP},
    {"Name": "counted", "Properties": {"MaxDeliveryCount": 1}},
]
TOPICS = [{"Name": "tdedup", "Properties": DEDUP,
           "Subscriptions": [{"Name": "s1", "Properties": {}}, {"Name": "s2", "Properties": {}}]}]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("two-nodes-dedup")
    yield from node_pair(base, write_config(base / "Config.json", QUEUES, Topics=TOPICS), database)


def _send(node: BrokerProcess, ids: list[str], prefix: str, topic: bool = False, batch: bool = False) -> None:
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            (client.get_topic_sender("tdedup") if topic else client.get_queue_sender("dedup")) as sender:
        messages = [ServiceBusMessage(f"{prefix}-{mid}", message_id=mid) for mid in ids]
        if batch:
            sender.send_messages(messages)
        else:
            for message in messages:
                sender.send_messages(message)


def _drain(node: BrokerProcess, receiver_of: Callable[[ServiceBusClient], object],
           quiet: float = 4) -> list[ServiceBusReceivedMessage]:
    """Receive and complete until nothing came for ``quiet`` seconds (30 s at most)."""
    got: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + 30
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            receiver_of(client) as receiver:  # type: ignore[attr-defined]
        while time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=50, max_wait_time=quiet)
            if not batch:
                break
            for m in batch:
                got.append(m)
                receiver.complete_message(m)
    return got


def _queue(client: ServiceBusClient) -> object:
    return client.get_queue_receiver("dedup", max_wait_time=4)


def _ids(messages: list[ServiceBusReceivedMessage]) -> list[str]:
    return sorted(str(m.message_id) for m in messages)


def test_one_message_id_sent_through_both_nodes_one_after_the_other_is_stored_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(a, ["seq-1", "seq-2"], "a")
    _send(b, ["seq-1", "seq-2", "seq-3"], "b")  # acknowledged, and dropped but for seq-3
    _send(a, ["seq-3"], "a")
    got = _drain(b, _queue)
    assert _ids(got) == ["seq-1", "seq-2", "seq-3"]
    assert sorted(str(m) for m in got) == ["a-seq-1", "a-seq-2", "b-seq-3"]


def test_the_same_message_ids_sent_through_both_nodes_at_once_are_stored_once_each(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    ids = [f"race-{i}" for i in range(60)]
    errors: list[BaseException] = []

    def send(node: BrokerProcess, prefix: str, batch: bool) -> None:
        try:
            _send(node, ids, prefix, batch=batch)
        except BaseException as exc:  # reported below: every send must be acknowledged
            errors.append(exc)

    # Each node gets every id twice over: one by one and in one batch, from two clients each.
    threads = [threading.Thread(target=send, args=(node, f"{name}{k}", k == 1))
               for node, name in ((a, "a"), (b, "b")) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    got = _drain(a, _queue) + _drain(b, _queue, quiet=2)
    assert _ids(got) == sorted(ids)  # exactly one of the four copies of each id


def test_a_topic_publishes_a_message_id_sent_through_both_nodes_at_once_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    ids = [f"topic-{i}" for i in range(40)]
    threads = [threading.Thread(target=_send, args=(node, ids, name), kwargs={"topic": True})
               for node, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for subscription in ("s1", "s2"):
        got = _drain(b, lambda client, s=subscription: client.get_subscription_receiver(  # type: ignore[misc]
            "tdedup", s, max_wait_time=4))
        assert _ids(got) == sorted(ids), subscription


def _admin(node: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(node.admin_connection_string,
                                                                  connection_verify=node.admin_certificate)


def _eventually(read: Callable[[], tuple[int, ...]], want: tuple[int, ...]) -> None:
    deadline = time.monotonic() + 30
    got = read()
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = read()
    assert got == want


def test_runtime_counts_on_one_node_follow_sends_and_settlements_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    with _admin(b) as admin:
        def counts() -> tuple[int, int, int]:
            props = admin.get_queue_runtime_properties("counted")
            return (props.active_message_count, props.dead_letter_message_count,
                    props.total_message_count)

        assert counts() == (0, 0, 0)
        with ServiceBusClient.from_connection_string(a.connection_string) as client:
            with client.get_queue_sender("counted") as sender:
                sender.send_messages([ServiceBusMessage(f"c{i}") for i in range(7)])
            _eventually(counts, (7, 0, 7))
            with client.get_queue_receiver("counted", max_wait_time=5) as receiver:
                taken: list[ServiceBusReceivedMessage] = []
                deadline = time.monotonic() + 30
                while len(taken) < 3 and time.monotonic() < deadline:
                    taken += receiver.receive_messages(max_message_count=3 - len(taken), max_wait_time=5)
                receiver.complete_message(taken[0])
                receiver.complete_message(taken[1])
                receiver.dead_letter_message(taken[2], reason="test")
            _eventually(counts, (4, 1, 5))
        # the SDK's namespace-wide listing through node b shows the same
        (listed,) = [q for q in admin.list_queues_runtime_properties() if q.name == "counted"]
        assert (listed.active_message_count, listed.dead_letter_message_count) == (4, 1)
        # and node a's own answer agrees
        with _admin(a) as admin_a:
            props = admin_a.get_queue_runtime_properties("counted")
            assert (props.active_message_count, props.dead_letter_message_count) == (4, 1)
