"""Two broker nodes on one PostgreSQL database learn of each other's work through LISTEN/NOTIFY
(issue 18, storage-and-scale.md section 4), not through their polls.

Both nodes run as users run them (``scripts/serve --store postgresql://...``), with the
fallback polls set to a minute (``--shared-poll-seconds 60``): a message sent through node A must
reach a receiver already waiting on node B, and a queue created through A's management API must be
usable through B, each well before a poll could have found it (the bound is a generous 30 s; the
times taken are printed, not asserted).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

POLL = "60"  # the fallback polls: far longer than any bound below
BOUND = 30.0


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("notify-nodes")
    config = write_config(base / "Config.json",
                          [{"Name": "woken", "Properties": {}}, {"Name": "known", "Properties": {}}])
    yield from node_pair(base, config, database, ["--shared-poll-seconds", POLL, "--metrics-port", "0"])


def _round_trips(node: BrokerProcess) -> int:
    with urllib.request.urlopen(node.metrics_url, timeout=10) as response:
        text = response.read().decode()
    found = re.search(r'^sodalite_store_round_trips_total\{store="default"\} (\S+)$', text, re.MULTILINE)
    assert found is not None, text
    return int(float(found.group(1)))


def test_a_receiver_waiting_on_one_node_is_woken_by_a_send_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    got: list[tuple[str, float]] = []
    waiting = threading.Event()

    def receive() -> None:
        with ServiceBusClient.from_connection_string(b.connection_string) as client, \
                client.get_queue_receiver("woken", max_wait_time=BOUND) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=1)  # the link is up, credit given
            waiting.set()
            deadline = time.monotonic() + BOUND
            while len(got) < 3 and time.monotonic() < deadline:
                for m in receiver.receive_messages(max_message_count=3, max_wait_time=deadline - time.monotonic()):
                    got.append((str(m), time.monotonic()))
                    receiver.complete_message(m)

    thread = threading.Thread(target=receive)
    thread.start()
    assert waiting.wait(BOUND)
    time.sleep(1)  # node b's core has read the empty queue and waits, credit in hand
    before = _round_trips(a)
    sent_at = time.monotonic()
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_sender("woken") as sender:
        sender.send_messages([ServiceBusMessage(f"w{i}") for i in range(3)])
    assert _round_trips(a) > before  # the send's batch is counted in /metrics (the cycle benchmark reads it)
    thread.join()
    assert sorted(body for body, _ in got) == ["w0", "w1", "w2"]
    print(f"sent through node a, received through node b after {got[0][1] - sent_at:.3f} s "
          f"(fallback poll {POLL} s)")


def test_a_queue_created_through_one_node_is_usable_through_the_other(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    """Node b takes the queue up when the store announces it, not at its next poll: b's management API
    (which reads what b serves) shows it well before a poll. (A client's put-token does not need that: before
    answering 404, a node reads the store itself.)"""
    from azure.core.exceptions import ResourceNotFoundError
    from azure.servicebus.exceptions import ServiceBusAuthenticationError
    from azure.servicebus.management import ServiceBusAdministrationClient

    from sodalite.client.failover import is_entity_not_found

    a, b = nodes
    admin = ServiceBusAdministrationClient.from_connection_string(a.admin_connection_string,
                                                                  connection_verify=a.admin_certificate)
    seen_by_b = ServiceBusAdministrationClient.from_connection_string(b.admin_connection_string,
                                                                      connection_verify=b.admin_certificate)
    admin.create_queue("made-on-a")
    created_at = time.monotonic()
    deadline = created_at + BOUND
    while True:
        try:
            seen_by_b.get_queue("made-on-a")
            break
        except ResourceNotFoundError:
            assert time.monotonic() < deadline, "node b never took up the queue created through node a"
            time.sleep(0.05)
    print(f"queue created through node a, taken up by node b {time.monotonic() - created_at:.3f} s later "
          f"(fallback entity follow {POLL} s)")
    with ServiceBusClient.from_connection_string(b.connection_string, retry_total=0) as client, \
            client.get_queue_sender("made-on-a") as sender:
        sender.send_messages(ServiceBusMessage("hello from b"))
    with ServiceBusClient.from_connection_string(a.connection_string) as client, \
            client.get_queue_receiver("made-on-a", max_wait_time=5) as receiver:
        received = receiver.receive_messages(max_message_count=1, max_wait_time=BOUND)
        assert [str(m) for m in received] == ["hello from b"]
        receiver.complete_message(received[0])
    admin.delete_queue("made-on-a")
    deadline = time.monotonic() + BOUND
    with pytest.raises(ServiceBusAuthenticationError) as refused, \
            ServiceBusClient.from_connection_string(b.connection_string, retry_total=0) as client:
        while time.monotonic() < deadline:
            with client.get_queue_sender("made-on-a") as sender:
                sender.send_messages(ServiceBusMessage("too late"))
            time.sleep(0.05)
    assert is_entity_not_found(refused.value)  # its put-token answered 404
