"""AMQP transactions across two broker nodes on one PostgreSQL database (issue 18).

Nodes are started as users start them (``scripts/serve --store postgresql://... --node-id
...``) with one configuration, on a database of this module's own. The raw client drives the
coordinator (the Python SDK has no transactions); the official SDK checks what is stored.

A transaction's settlements are fenced by lock token in the store, all or none: when a message's
lock is no longer the committing node's by the time the commit applies, the whole transaction rolls
back and none of its sends is stored. A lock lapses by the clock of the node that looks, so the
scenario where node A still believes in its lock while node B already took the message is the one
of two nodes whose clocks disagree: node C below runs with its clock two minutes ahead (a
``sitecustomize`` on its PYTHONPATH moves ``time.time``; the broker reads time nowhere else).
"""

from __future__ import annotations

import os
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusReceiver
from broker_process import BrokerProcess, write_config
from raw_client import message
from test_transactions import _address, _begun, _condition, _declare, _enlist, _left_open, _locked, _raw

from pg_server import shared_server
from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Accepted, TransactionalState
from sodalite.errors import TransactionRolledBack

pytestmark = pytest.mark.interop

QUEUES: list[dict[str, Any]] = [
    {"Name": name, "Properties": {}} for name in ("txn-source", "txn-target", "fenced-target", "kill-target",
                                                  "mid-target")
] + [
    {"Name": "lapse-source", "Properties": {"LockDuration": "PT5S"}},
    {"Name": "kill-source", "Properties": {"LockDuration": "PT10S"}},  # node A's locks lapse after its kill
    {"Name": "mid-source", "Properties": {"LockDuration": "PT10S"}},
    {"Name": "lapse-target", "Properties": {}},
    {"Name": "fenced-source", "Properties": {"LockDuration": "PT30S"}},
    {"Name": "dedup", "Properties": {"RequiresDuplicateDetection": True}},
]
SKEW_SECONDS = 120


@pytest.fixture(scope="module")
def database() -> str:
    try:
        return shared_server().create_database("txnodes")
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _node(base: Path, url: str, name: str, skew: float = 0) -> BrokerProcess:
    node = BrokerProcess(base / name, write_config(base / "Config.json", QUEUES),
                         extra_args=["--store", url, "--node-id", name, "--log-level", "INFO"])
    if skew:
        site = base / f"{name}-clock"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(textwrap.dedent(f"""\
            import time
            _time, _time_ns = time.time, time.time_ns
            time.time = lambda: _time() + {skew}
            time.time_ns = lambda: _time_ns() + {int(skew * 1e9)}
            """), encoding="utf-8")
        node.command_prefix = ["env", f"PYTHONPATH={site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"]
    return node


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, database: str) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("tx-two-nodes")
    a = _node(base, database, "node-a").start()
    try:
        b = _node(base, database, "node-b").start()
    except BaseException:
        a.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def _send(node: BrokerProcess, queue: str, *bodies: str) -> None:
    with ServiceBusClient.from_connection_string(node.connection_string) as sdk, sdk.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(body) for body in bodies])


def _peek(node: BrokerProcess, queue: str) -> list[str]:
    with ServiceBusClient.from_connection_string(node.connection_string) as sdk, \
            sdk.get_queue_receiver(queue) as receiver:
        return sorted(str(m) for m in receiver.peek_messages(max_message_count=50))


@contextmanager
def _one_received(sdk: ServiceBusClient, queue: str,
                  seconds: float = 30) -> Iterator[tuple[ServiceBusReceiver, ServiceBusReceivedMessage]]:
    """A peek-lock receiver on ``queue`` and the first message it got, for the block; closed after it."""
    with sdk.get_queue_receiver(queue) as receiver:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=2)
            if got:
                yield receiver, got[0]
                return
    raise AssertionError(f"nothing received from {queue} within {seconds} s")


def _logged(node: BrokerProcess, text: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not any(text in line for line in list(node.output)):
        assert time.monotonic() < deadline, f"{text!r} not in the broker's log"
        time.sleep(0.1)


def test_a_transaction_through_node_a_completes_and_sends_atomically_seen_through_node_b(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(b, "txn-source", "work")
    raw = _raw(a)
    try:
        receiver, work, controller, txn, link = _begun(raw, a, "txn-source", "txn-target")
        _enlist(raw, txn, link, [b"r1", b"r2"], receiver, work)
        assert _peek(b, "txn-target") == [] and _peek(b, "txn-source") == ["work"]  # nothing before the discharge
        assert raw.discharge(controller, txn) == Accepted()
    finally:
        raw.close()
    assert _peek(b, "txn-target") == ["r1", "r2"]
    assert _peek(b, "txn-source") == []


def test_a_lock_that_lapsed_and_was_taken_through_node_b_fails_the_discharge_and_stores_no_send(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(a, "lapse-source", "contested")
    raw = _raw(a)
    try:
        receiver, held, controller, txn, link = _begun(raw, a, "lapse-source", "lapse-target")
        _enlist(raw, txn, link, [b"never"], receiver, held)
        # The 5 s lock lapses; node B's receiver takes the message.
        with ServiceBusClient.from_connection_string(b.connection_string) as sdk:
            with _one_received(sdk, "lapse-source") as (b_receiver, taken):
                assert str(taken) == "contested" and taken.delivery_count == 1  # delivered once before, on A
                assert _condition(raw.discharge(controller, txn)) == TransactionRolledBack.condition
                assert _peek(a, "lapse-target") == [] and _peek(b, "lapse-target") == []
                b_receiver.complete_message(taken)  # still node B's lock: the transaction changed nothing
    finally:
        raw.close()
    assert _peek(a, "lapse-source") == [] and _peek(b, "lapse-target") == []


def test_a_lock_taken_through_another_node_while_the_committing_node_still_held_it_rolls_back_in_the_store(
        nodes: tuple[BrokerProcess, BrokerProcess], database: str, tmp_path: Path) -> None:
    """Node A's lock (30 s) is live by A's clock when it commits; node C, whose clock runs two minutes
    ahead, found it lapsed and took the message first. A's core decides the commit, and the store's
    all-or-none settlement finds C's lock token: the whole batch rolls back, the discharge fails."""
    a, b = nodes
    c = _node(tmp_path, database, "node-c", skew=SKEW_SECONDS).start()
    try:
        _send(a, "fenced-source", "contested")
        raw = _raw(a)
        try:
            receiver, held, controller, txn, link = _begun(raw, a, "fenced-source", "fenced-target")
            _enlist(raw, txn, link, [b"never-1", b"never-2"], receiver, held)
            with ServiceBusClient.from_connection_string(c.connection_string) as sdk:
                with _one_received(sdk, "fenced-source") as (c_receiver, taken):
                    assert str(taken) == "contested"
                    # C's clock is ahead (its lock ends two minutes after A's would): the premise holds.
                    assert taken.locked_until_utc is not None
                    assert taken.locked_until_utc > datetime.now(UTC) + timedelta(seconds=SKEW_SECONDS / 2)
                    assert _condition(raw.discharge(controller, txn)) == TransactionRolledBack.condition
                    _logged(a, "is fenced")  # refused by the store's fence, not by A's own clock
                    assert _peek(b, "fenced-target") == []
                    assert _peek(b, "fenced-source") == ["contested"]  # A's complete did not apply either
                    c_receiver.complete_message(taken)  # C's lock is intact
        finally:
            raw.close()
        assert _peek(b, "fenced-source") == [] and _peek(b, "fenced-target") == []
    finally:
        c.stop()


def test_a_transactions_send_whose_message_id_the_other_node_stored_is_a_duplicate(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    with ServiceBusClient.from_connection_string(b.connection_string) as sdk, sdk.get_queue_sender("dedup") as sender:
        sender.send_messages(ServiceBusMessage("first", message_id="id-1"))
    raw = _raw(a)
    try:
        controller = raw.coordinator()
        txn = _declare(raw, controller)
        link = raw.attach(_address(a, "dedup"), SENDER)
        accepted = TransactionalState(txn, Accepted())
        assert raw.send_in_transaction(link, message(b"again", "id-1"), txn) == accepted
        assert raw.send_in_transaction(link, message(b"new", "id-2"), txn) == accepted
        assert raw.discharge(controller, txn) == Accepted()  # a duplicate is accepted and dropped
    finally:
        raw.close()
    assert _peek(b, "dedup") == ["first", "new"]


def test_kill_9_of_node_a_loses_no_committed_transaction_and_stores_no_half_of_one(
        nodes: tuple[BrokerProcess, BrokerProcess]) -> None:
    a, b = nodes
    _send(b, "kill-source", "done", "open")
    _send(b, "mid-source", "racing")
    raw = _raw(a)
    racing: dict[str, Any] = {}
    try:
        receiver, done, controller, txn, link = _begun(raw, a, "kill-source", "kill-target")
        _enlist(raw, txn, link, [b"d1", b"d2"], receiver, done)
        assert raw.discharge(controller, txn) == Accepted()  # committed: must survive
        # A second transaction left open when node A dies: none of it may show.
        _left_open(raw, controller, receiver, link)
        # A third one is being discharged when node A is killed: all of it or nothing.
        mid_receiver, mid = _locked(raw, a, "mid-source")
        mid_link = raw.attach(_address(a, "mid-target"), SENDER)
        mid_txn = _declare(raw, controller)
        _enlist(raw, mid_txn, mid_link, [b"m1", b"m2", b"m3"], mid_receiver, mid)

        def discharge() -> None:
            try:
                racing["outcome"] = raw.discharge(controller, mid_txn)
            except Exception as exc:  # the connection died under it
                racing["outcome"] = exc

        thread = threading.Thread(target=discharge)
        thread.start()
        a.kill()
        thread.join(30)
    finally:
        raw.close()
    # Through node B (the store is the truth): the committed transaction whole, the open one absent.
    assert _peek(b, "kill-target") == ["d1", "d2"]
    assert _peek(b, "kill-source") == ["open"]
    mid_target, mid_source = _peek(b, "mid-target"), _peek(b, "mid-source")
    assert (mid_target, mid_source) in ((["m1", "m2", "m3"], []), ([], ["racing"])), (mid_target, mid_source)
    if racing.get("outcome") == Accepted():  # acknowledged: it must be the whole of it
        assert mid_target == ["m1", "m2", "m3"]
    a.start()
    assert _peek(a, "kill-target") == ["d1", "d2"] and _peek(a, "mid-target") == mid_target
    # "open" was never settled: once node A's lock lapses it is received again, through either node.
    with ServiceBusClient.from_connection_string(b.connection_string) as sdk:
        with _one_received(sdk, "kill-source") as (b_receiver, again):
            assert str(again) == "open"
            b_receiver.complete_message(again)
