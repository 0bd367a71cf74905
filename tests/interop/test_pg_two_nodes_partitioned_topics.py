"""Two broker nodes on one PostgreSQL database: partitioned topics on the partition core across nodes
(issues 14 and 18).

Both nodes are started as users start them (``scripts/serve --store postgresql://...
--node-id ...``) with the same configuration, on a database of this module's own on the PostgreSQL
server this test process starts (``tests/pg_server.py``); the official SDK is the client. A
partitioned topic is a ``TopicActor`` per partition (``server/topic_actor.py``): a send through
either node is pinned to a topic partition by its key and its copies are stored in that partition
of every subscription in one transaction; the other node's subscription partitions hear of them
from the store's change feed (LISTEN/NOTIFY) and claim them fenced by the store (``FOR UPDATE SKIP
LOCKED``), so a message is locked by one receiver at a time. Each test waits within a generous
bound (30 s) and never asserts the time taken.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop

BOUND = 30.0
PARTITIONS = 16
TOPICS = [{"Name": "spread", "Properties": {"EnablePartitioning": True},
           "Subscriptions": [{"Name": "all", "Properties": {}},
                             {"Name": "even", "Properties": {}, "Rules": [
                                 {"Name": "even", "Properties": {"FilterType": "Sql",
                                                                 "SqlFilter": {"SqlExpression": "n % 2 = 0"}}}]}]},
          {"Name": "contended", "Properties": {"EnablePartitioning": True},
           "Subscriptions": [{"Name": "work", "Properties": {"LockDuration": "PT30S"}}]}]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("partitioned-topic-nodes")
    yield from node_pair(base, write_config(base / "Config.json", [], Topics=TOPICS), database, ["--log-level", "INFO"])


def _send(node: BrokerProcess, topic: str, messages: list[ServiceBusMessage], batch: int = 50) -> None:
    """Send in batches of ``batch`` (a batch's keyless messages go to one partition together)."""
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_topic_sender(topic) as sender:
        for start in range(0, len(messages), batch):
            sender.send_messages(messages[start:start + batch])


def _receive(node: BrokerProcess, topic: str, subscription: str, want: int, out: list[tuple[str, int]],
             stop: threading.Event | None = None) -> None:
    """Receive and complete into ``out`` (body, sequence number) until ``want`` came in all of ``out``
    (or ``stop`` is set, or the bound passed); then look 2 s more for any message too many."""
    deadline = time.monotonic() + BOUND
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_subscription_receiver(topic, subscription, max_wait_time=2) as receiver:
        while len(out) < want and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            for m in receiver.receive_messages(max_message_count=20, max_wait_time=2):
                receiver.complete_message(m)  # refused (MessageLockLost) if another node held it too
                out.append((str(m), m.sequence_number))
        for m in receiver.receive_messages(max_message_count=20, max_wait_time=2):
            receiver.complete_message(m)
            out.append((str(m), m.sequence_number))


def _admin(node: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(node.admin_connection_string,
                                                                 connection_verify=node.admin_certificate)


def test_the_partitioned_topics_run_on_the_core_on_both_nodes(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    for node in nodes:
        output = "".join(node.output)
        on_core = dict(re.findall(r"serving (\S+) \((\d+) partitions\)", output))
        assert on_core.get("spread") == on_core.get("spread/subscriptions/all") == str(PARTITIONS)


def test_a_send_through_one_node_reaches_a_subscription_receiver_on_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    messages = [ServiceBusMessage(f"k{i}", partition_key=f"key-{i}", application_properties={"n": i})
                for i in range(24)]
    _send(a, "spread", messages)
    keyless = [ServiceBusMessage(f"free{i}", application_properties={"n": i}) for i in range(16)]
    _send(a, "spread", keyless, batch=1)  # one by one: round-robin over the partitions
    messages += keyless
    sent = {str(m) for m in messages}
    admin = _admin(a)  # the sending node's counts: every copy, as its topic partitions stored them
    assert admin.get_subscription_runtime_properties("spread", "all").active_message_count == len(sent)
    assert admin.get_subscription_runtime_properties("spread", "even").active_message_count == 12 + 8
    got: list[tuple[str, int]] = []
    _receive(b, "spread", "all", len(sent), got)
    assert sorted(body for body, _ in got) == sorted(sent)
    assert all(number >> 48 == partition_index(f"key-{body[1:]}", PARTITIONS)
               for body, number in got if body.startswith("k"))
    assert len({number >> 48 for body, number in got if body.startswith("free")}) > 1
    even: list[tuple[str, int]] = []
    _receive(b, "spread", "even", 20, even)
    assert sorted(body for body, _ in even) == sorted(
        [f"k{i}" for i in range(0, 24, 2)] + [f"free{i}" for i in range(0, 16, 2)])
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_subscription_receiver("spread", "all", max_wait_time=2) as receiver:
        assert receiver.peek_messages(max_message_count=10) == []  # peek reads the store


def test_receivers_on_both_nodes_never_get_the_same_message(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    sent = [f"w{i}" for i in range(200)]
    got_a: list[tuple[str, int]] = []
    got_b: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def run(node: BrokerProcess, out: list[tuple[str, int]]) -> None:
        try:
            _receive(node, "contended", "work", len(sent), out, stop=done)
        except BaseException as exc:  # a completion refused: the lock was another receiver's
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(node, out)) for node, out in ((a, got_a), (b, got_b))]
    for thread in threads:
        thread.start()
    _send(b, "contended", [ServiceBusMessage(body) for body in sent[:100]])
    _send(a, "contended", [ServiceBusMessage(body) for body in sent[100:]])
    deadline = time.monotonic() + BOUND
    while len(got_a) + len(got_b) < len(sent) and time.monotonic() < deadline and not errors:
        time.sleep(0.2)
    done.set()
    for thread in threads:
        thread.join(BOUND + 10)
    assert not errors, errors[:3]
    bodies = [body for body, _ in got_a + got_b]
    assert sorted(bodies) == sorted(sent)  # every message once: none locked by both nodes
