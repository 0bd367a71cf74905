"""Two broker nodes on one PostgreSQL database change the rules of one subscription at the same
moment, and nothing is lost (issues 14.1 and 18).

A subscription's rules are rows of their own in the store, so a rule added through one node never
overwrites one added through the other (before, each node rewrote the subscription's whole record
from the rules it knew, and the last write won). Whether a rule's name is taken is decided by the
store: of two nodes adding one name at once, exactly one succeeds and the other answers as Service
Bus does (409, the SDK's ResourceExistsError).

Both nodes are started as users start them (``scripts/serve --store postgresql://...
--node-id ...``) on a database of this module's own on the PostgreSQL server this test process
starts (``tests/pg_server.py``); the official SDK's ServiceBusAdministrationClient, one per node, is
the client, called from threads. Waits for the other node's follow (promised within 1 s, issue 18.3)
are bounded generously (30 s) and never timed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient, SqlRuleFilter
from broker_process import BrokerProcess, write_config
from pg_nodes import node_pair

pytestmark = pytest.mark.interop

BOUND = 30.0  # seconds: generous against the 1 s promise
TOPIC = "rules"
TOPICS = [{"Name": TOPIC, "Properties": {},
           "Subscriptions": [{"Name": "many", "Properties": {}}, {"Name": "contested", "Properties": {}}]}]


@pytest.fixture(scope="module")
def nodes(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("rule-nodes")
    yield from node_pair(base, write_config(base / "Config.json", [], Topics=TOPICS), database)


def _admin(node: BrokerProcess) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(node.admin_connection_string,
                                                                 connection_verify=node.admin_certificate)


def _rules(node: BrokerProcess, subscription: str) -> dict[str, str]:
    """The subscription's rules as the node lists them: name -> SQL expression."""
    with _admin(node) as admin:
        return {r.name: getattr(r.filter, "sql_expression", "") for r in admin.list_rules(TOPIC, subscription)}


def _eventually(what: str, attempt: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND
    while not attempt():
        assert time.monotonic() < deadline, f"not within {BOUND} s: {what}"
        time.sleep(0.3)


def test_rules_added_through_both_nodes_at_once_all_survive(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admins = [_admin(a), _admin(b)]
    start = threading.Barrier(8)

    def add(worker: int) -> list[str]:
        admin = admins[worker % 2]  # even workers through node a, odd ones through node b
        start.wait()
        added = []
        for i in range(6):
            name = f"w{worker}-r{i}"
            admin.create_rule(TOPIC, "many", name, filter=SqlRuleFilter(f"n = {worker * 100 + i}"))
            added.append(name)
        return added

    try:
        with ThreadPoolExecutor(8) as pool:
            added = [name for names in pool.map(add, range(8)) for name in names]
    finally:
        for admin in admins:
            admin.close()
    assert len(added) == 48
    want = {"$Default": "1=1", **{f"w{w}-r{i}": f"n = {w * 100 + i}" for w in range(8) for i in range(6)}}
    _eventually("both nodes list every rule added through either", lambda: _rules(a, "many") == want
                and _rules(b, "many") == want)
    # The rules filter on both nodes: a message only one added rule matches reaches the subscription.
    for node, n in ((a, 301), (b, 704)):
        with ServiceBusClient.from_connection_string(node.connection_string) as client:
            with client.get_topic_sender(TOPIC) as sender:
                sender.send_messages(ServiceBusMessage(f"n{n}", application_properties={"n": n}))
    with _admin(a) as admin:
        admin.delete_rule(TOPIC, "many", "$Default")
    _eventually("node b drops $Default", lambda: "$Default" not in _rules(b, "many"))
    with ServiceBusClient.from_connection_string(b.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages([ServiceBusMessage("kept", application_properties={"n": 502}),
                                  ServiceBusMessage("dropped", application_properties={"n": 9999})])
        got = []
        with client.get_subscription_receiver(TOPIC, "many", max_wait_time=5) as receiver:
            for message in receiver.receive_messages(max_message_count=10, max_wait_time=5):
                got.append(str(message))
                receiver.complete_message(message)
    assert sorted(got) == ["kept", "n301", "n704"]


def test_one_name_added_through_both_nodes_at_once_is_added_once(nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    admins = [_admin(a), _admin(b)]
    try:
        for round_ in range(6):
            name = f"same-{round_}"
            start = threading.Barrier(2)

            def add(index: int, name: str = name, start: threading.Barrier = start) -> str:
                start.wait()
                try:
                    admins[index].create_rule(TOPIC, "contested", name, filter=SqlRuleFilter(f"node = {index}"))
                except ResourceExistsError:
                    return "exists"
                return "created"

            with ThreadPoolExecutor(2) as pool:
                outcomes = list(pool.map(add, range(2)))
            assert sorted(outcomes) == ["created", "exists"], (round_, outcomes)
            winner = outcomes.index("created")
            _eventually(f"both nodes list {name} as node {winner} added it",
                        lambda name=name, winner=winner: _rules(a, "contested").get(name) == f"node = {winner}"
                        and _rules(b, "contested").get(name) == f"node = {winner}")
        # Removed through both at once: one removes it, the other finds none.
        start = threading.Barrier(2)

        def remove(index: int) -> str:
            start.wait()
            try:
                admins[index].delete_rule(TOPIC, "contested", "same-0")
            except ResourceNotFoundError:
                return "missing"
            return "deleted"

        with ThreadPoolExecutor(2) as pool:
            assert sorted(pool.map(remove, range(2))) == ["deleted", "missing"]
    finally:
        for admin in admins:
            admin.close()
    _eventually("both nodes drop the removed rule", lambda: "same-0" not in _rules(a, "contested")
                and "same-0" not in _rules(b, "contested"))
