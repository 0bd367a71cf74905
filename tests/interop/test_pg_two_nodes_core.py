"""Two broker nodes on one PostgreSQL database, plain queues on the partition core (issue 18, item 3).

Both nodes are started as users start them (``scripts/serve --store postgresql://...
--node-id ...``) with the same configuration, on a database of this module's own on the PostgreSQL
server this test process starts (``tests/pg_server.py``). The store is the coordinator: sequence
numbers come from the partition's counter row, claims are ``FOR UPDATE SKIP LOCKED``, session locks
are rows, and each node's core looks for rows the other node appended while a receiver waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "shared", "Properties": {}},
    {"Name": "compete", "Properties": {}},
    {"Name": "dies", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "sess", "Properties": {"RequiresSession": True}},
    {"Name": "dlfwd-src", "Properties": {"ForwardDeadLetteredMessagesTo": "dlfwd-dst", "MaxDeliveryCount": 2}},
    {"Name": "dlfwd-dst", "Properties": {}},
    {"Name": "updated", "Properties": {"LockDuration": "PT5M"}},
]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("two-nodes")
    yield from node_pair(base, write_config(base / "Config.json", QUEUES), database)


def _send(node: BrokerProcess, queue: str, bodies: list[str], session_id: str | None = None) -> None:
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        for start in range(0, len(bodies), 100):
            sender.send_messages([ServiceBusMessage(b, session_id=session_id) for b in bodies[start:start + 100]])


def _drain(node: BrokerProcess, queue: str, want: int, seconds: float = 30,
           both: list[str] | None = None) -> list[tuple[str, int, int]]:
    """Receive and complete until ``want`` messages came or ``seconds`` passed: (body, sequence number,
    delivery count) of each. With ``both`` (a list the other node's receiver shares), ``want`` counts
    what the two received together, and each looks 3 s more (a second copy would show)."""
    got: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + seconds
    with ServiceBusClient.from_connection_string(node.connection_string) as client, \
            client.get_queue_receiver(queue, max_wait_time=2) as receiver:
        if both is None:
            while len(got) < want and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=50, max_wait_time=2):
                    got.append((str(m), int(m.sequence_number or 0), m.delivery_count or 0))
                    receiver.complete_message(m)
            return got
        settle_until: float | None = None
        while time.monotonic() < (deadline if settle_until is None else min(deadline, settle_until)):
            for m in receiver.receive_messages(max_message_count=50, max_wait_time=1):
                got.append((str(m), int(m.sequence_number or 0), m.delivery_count or 0))
                both.append(str(m))  # list.append is atomic: the two threads share it
                receiver.complete_message(m)
            if len(both) >= want and settle_until is None:
                settle_until = time.monotonic() + 3
    return got


def test_a_message_sent_through_one_node_is_received_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(a, "shared", [f"a{i}" for i in range(150)])
    _send(b, "shared", [f"b{i}" for i in range(150)])
    got = _drain(b, "shared", 300)
    assert sorted(body for body, _, _ in got) == sorted([f"a{i}" for i in range(150)] + [f"b{i}" for i in range(150)])
    numbers = [seq for _, seq, _ in got]
    assert len(set(numbers)) == 300  # one sequence number per message, whichever node sent it
    # numbers strictly increase in the order each node sent its own messages
    by_body = {body: seq for body, seq, _ in got}
    for prefix in "ab":
        seqs = [by_body[f"{prefix}{i}"] for i in range(150)]
        assert seqs == sorted(seqs)
    assert _drain(a, "shared", 1, seconds=3) == []


def test_receivers_on_both_nodes_never_get_the_same_message(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    bodies = [f"c{i}" for i in range(400)]
    results: dict[str, list[tuple[str, int, int]]] = {}
    both: list[str] = []  # what either node received: each stops 3 s after the two have all 400

    def receive(node: BrokerProcess, name: str) -> None:
        results[name] = _drain(node, "compete", 400, seconds=25, both=both)

    threads = [threading.Thread(target=receive, args=(node, name)) for node, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    _send(a, "compete", bodies[:200])
    _send(b, "compete", bodies[200:])
    for t in threads:
        t.join()
    received = [body for got in results.values() for body, _, _ in got]
    assert sorted(received) == sorted(bodies)  # every message once: none lost, none locked by both nodes


def test_a_node_killed_holding_locks_loses_nothing(nodes: tuple[BrokerProcess, BrokerProcess],
                                                   tmp_path: Path) -> None:
    a, b = nodes
    _send(a, "dies", [f"d{i}" for i in range(5)])
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_receiver("dies", max_wait_time=5) as receiver:
        held: list[str] = []
        deadline = time.monotonic() + 20
        while len(held) < 5 and time.monotonic() < deadline:
            held += [str(m) for m in receiver.receive_messages(max_message_count=5, max_wait_time=2)]
        assert sorted(held) == [f"d{i}" for i in range(5)]
        a.kill()  # node a dies holding the five locks (LockDuration 5 s)
    try:
        got = _drain(b, "dies", 5, seconds=30)  # back after their locks lapse, through node b
        assert sorted(body for body, _, _ in got) == [f"d{i}" for i in range(5)]
        assert all(count == 1 for _, _, count in got)  # the dead node's delivery counted
    finally:
        a.start()


def test_a_session_is_held_by_one_node_at_a_time(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    from azure.servicebus.exceptions import SessionCannotBeLockedError

    a, b = nodes
    _send(b, "sess", ["s0", "s1"], session_id="one")
    with ServiceBusClient.from_connection_string(a.connection_string, retry_total=0) as ca, \
            ca.get_queue_receiver("sess", session_id="one", max_wait_time=5) as holder:
        with ServiceBusClient.from_connection_string(b.connection_string, retry_total=0) as cb, \
                pytest.raises(SessionCannotBeLockedError), \
                cb.get_queue_receiver("sess", session_id="one", max_wait_time=2) as rival:
            rival.receive_messages(max_message_count=1, max_wait_time=2)
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            for m in holder.receive_messages(max_message_count=2, max_wait_time=2):
                got.append(str(m))
                holder.complete_message(m)
        assert got == ["s0", "s1"]


def test_a_queue_created_or_deleted_through_one_node_is_seen_by_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    from azure.servicebus.exceptions import ServiceBusAuthenticationError
    from azure.servicebus.management import ServiceBusAdministrationClient

    from sodalite.client.failover import is_entity_not_found

    a, b = nodes
    admin = ServiceBusAdministrationClient.from_connection_string(a.admin_connection_string,
                                                                  connection_verify=a.admin_certificate)
    admin.create_queue("made-on-a", lock_duration="PT10S")
    # At once: before answering a put-token 404, node b reads the store, where node a's queue already is.
    _send(b, "made-on-a", ["hello from b"])
    assert [body for body, _, _ in _drain(a, "made-on-a", 1)] == ["hello from b"]
    admin.delete_queue("made-on-a")
    deadline = time.monotonic() + 30  # node b drops it when it follows the store (about a second)
    with pytest.raises(ServiceBusAuthenticationError) as refused:  # the put-token answered 404
        while time.monotonic() < deadline:
            _send(b, "made-on-a", ["too late"])
            time.sleep(0.5)
    assert is_entity_not_found(refused.value)


def test_a_put_token_reads_the_store_before_answering_404(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    """A queue created through node a is known to node b's put-token the moment a's create returns: before
    answering 404, b reads the store (it does not wait for the store's announcement or its poll). A raw client
    on b, its $cbs link ready, asks right after each create; then its sender attaches."""
    from azure.servicebus.management import ServiceBusAdministrationClient
    from broker_process import KEY, KEY_NAME
    from raw_client import RawClient

    from sodalite.amqp.link import SENDER
    from sodalite.model.sas import generate_token

    a, b = nodes
    admin = ServiceBusAdministrationClient.from_connection_string(a.admin_connection_string,
                                                                  connection_verify=a.admin_certificate)
    client = RawClient(b.port)
    try:
        expiry = int(time.time()) + 300
        token = generate_token(f"sb://localhost:{b.port}/", KEY_NAME, KEY, expiry)
        assert client.put_token(f"sb://localhost:{b.port}/", token, expiry * 1000) == 202  # the $cbs pair is up
        assert client.put_token(f"sb://localhost:{b.port}/fresh-missing", token, expiry * 1000) == 404
        for i in range(5):
            admin.create_queue(f"fresh-{i}")
            assert client.put_token(f"sb://localhost:{b.port}/fresh-{i}", token, expiry * 1000) == 202, i
            assert client.attach(f"sb://localhost:{b.port}/fresh-{i}", SENDER).attached
    finally:
        client.close()
    for i in range(5):
        admin.delete_queue(f"fresh-{i}")


def test_dead_letters_forwarded_through_either_node_land_in_the_target_once(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    """ForwardDeadLetteredMessagesTo across nodes: what a client dead-letters through one node and
    what MaxDeliveryCount dead-letters through the other both land in the target, once each, with
    their reasons, and nothing stays in the source's own dead-letter queue."""
    a, b = nodes
    _send(a, "dlfwd-src", [f"x{i}" for i in range(10)])
    explicit: list[str] = []
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_receiver("dlfwd-src", max_wait_time=2) as receiver:
        deadline = time.monotonic() + 30
        while len(explicit) < 5 and time.monotonic() < deadline:
            for m in receiver.receive_messages(max_message_count=5 - len(explicit), max_wait_time=2):
                receiver.dead_letter_message(m, reason="rejected-on-a", error_description="by the client")
                explicit.append(str(m))
    assert len(explicit) == 5
    worn: list[str] = []
    with ServiceBusClient.from_connection_string(b.connection_string) as client, \
            client.get_queue_receiver("dlfwd-src", max_wait_time=2) as receiver:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # abandoned twice: MaxDeliveryCount 2 dead-letters each
            got = receiver.receive_messages(max_message_count=10, max_wait_time=2)
            if not got and len(worn) >= 10:
                break
            for m in got:
                worn.append(str(m))
                receiver.abandon_message(m)
    assert sorted(set(worn)) == sorted({f"x{i}" for i in range(10)} - set(explicit))
    reasons: dict[str, str | None] = {}
    for node in (b, a):  # the target through either node; a second copy would show
        with ServiceBusClient.from_connection_string(node.connection_string) as client, \
                client.get_queue_receiver("dlfwd-dst", max_wait_time=2) as receiver:
            deadline = time.monotonic() + 30
            while len(reasons) < 10 and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=10, max_wait_time=2):
                    assert str(m) not in reasons, f"{m} landed twice"
                    reasons[str(m)] = m.dead_letter_reason
                    receiver.complete_message(m)
    assert sorted(reasons) == sorted(f"x{i}" for i in range(10))
    assert {reasons[body] for body in explicit} == {"rejected-on-a"}
    assert {reasons[body] for body in set(worn)} == {"MaxDeliveryCountExceeded"}
    assert _drain(a, "dlfwd-dst", 1, seconds=4) == []
    with ServiceBusClient.from_connection_string(b.connection_string) as client, \
            client.get_queue_receiver("dlfwd-src", sub_queue="deadletter", max_wait_time=2) as receiver:
        assert receiver.receive_messages(max_message_count=10, max_wait_time=3) == []


def test_an_update_through_one_node_drops_the_locks_held_on_both(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Service Bus ends every lock on a queue when its properties change: the node that stores the
    update drops the locks it granted, and the other node drops its own once it learns of the change
    (it follows the store's entity records). Both messages, locked for 5 minutes, are free again at
    once, their deliveries counted, and the other node locks them for the new LockDuration."""
    from datetime import UTC, datetime, timedelta

    from azure.servicebus.exceptions import MessageLockLostError
    from azure.servicebus.management import ServiceBusAdministrationClient

    a, b = nodes
    _send(a, "updated", ["u0", "u1"])
    with ServiceBusClient.from_connection_string(a.connection_string, retry_total=0) as ca, \
            ca.get_queue_receiver("updated", max_wait_time=5) as on_a, \
            ServiceBusClient.from_connection_string(b.connection_string, retry_total=0) as cb, \
            cb.get_queue_receiver("updated", max_wait_time=5) as on_b:
        [held_a] = on_a.receive_messages(max_message_count=1, max_wait_time=10)
        [held_b] = on_b.receive_messages(max_message_count=1, max_wait_time=10)
        assert sorted([str(held_a), str(held_b)]) == ["u0", "u1"]
        admin = ServiceBusAdministrationClient.from_connection_string(a.admin_connection_string,
                                                                      connection_verify=a.admin_certificate)
        queue = admin.get_queue("updated")
        queue.lock_duration = timedelta(seconds=30)
        queue.max_delivery_count = 3
        admin.update_queue(queue)
        back: dict[str, tuple[int, datetime]] = {}
        with cb.get_queue_receiver("updated", max_wait_time=2) as again:
            deadline = time.monotonic() + 30  # the locks held would last 5 minutes
            while len(back) < 2 and time.monotonic() < deadline:
                for m in again.receive_messages(max_message_count=2, max_wait_time=2):
                    assert m.locked_until_utc is not None
                    back[str(m)] = (m.delivery_count or 0, m.locked_until_utc)
                    again.complete_message(m)
        assert sorted(back) == ["u0", "u1"], "a lock held on the updated queue was kept"
        assert all(count == 1 for count, _ in back.values())  # the dropped delivery counted
        soon = datetime.now(UTC) + timedelta(seconds=90)
        assert all(until < soon for _, until in back.values())  # locked by node b for 30 s, not 5 minutes
        for receiver, message in ((on_a, held_a), (on_b, held_b)):
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(message)
