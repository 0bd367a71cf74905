"""AMQP transactions on the partition core, with the raw client as the transaction controller and the
official SDK checking what is visible.

The broker is started as users start it (``scripts/serve``). The scenarios of
``test_transactions.py`` run there (the core is the default and only one; this module used to run
them once more, when there were two cores). What remains here is this module's
own, against ``tx_broker`` (``test_transactions.py``'s configuration and a few queues and a topic
more): the broker's start-up lines name every entity on the core; a transaction's send to the queue
it settles on under duplicate detection, the combinations one core cannot commit (refused as not
built), a transaction that sends to a topic first, and a discharged transaction under kill -9.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from raw_client import message
from test_transactions import (
    QUEUES,
    TOPICS,
    _address,
    _begun,
    _condition,
    _declare,
    _enlist,
    _left_open,
    _locked,
    _peek,
    _raw,
)

from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Accepted, TransactionalState
from sodalite.errors import NotImplementedOperation

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]
EXTRA_QUEUES = [{"Name": "tx-v2-dedup", "Properties": {"RequiresDuplicateDetection": True}},
                {"Name": "tx-v2-other", "Properties": {}}, {"Name": "tx-v2-one", "Properties": {}},
                {"Name": "tx-v2-two", "Properties": {}}]
EXTRA_TOPICS = [{"Name": "tx-v2-topic", "Properties": {}, "Subscriptions": [
    {"Name": "s1", "Properties": {}}, {"Name": "s2", "Properties": {}}]}]


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-transactions")
    config = write_config(base / "Config.json", QUEUES + EXTRA_QUEUES, Topics=TOPICS + EXTRA_TOPICS)
    broker = BrokerProcess(base / "data", config, extra_args=[*V2, "--log-level", "INFO"]).start()
    yield broker
    broker.stop()


def test_every_entity_of_the_transaction_scenarios_runs_on_the_core(tx_broker: BrokerProcess) -> None:
    """The broker names each entity it runs on the core (test_transactions.py's configuration): every queue,
    the partitioned ones with their partitions, the topic and its subscriptions."""
    on_core = dict(re.findall(r"serving (\S+) \((\d+) partitions\)", "".join(tx_broker.output)))
    names = [q["Name"] for q in QUEUES + EXTRA_QUEUES] + ["tx-topic", "tx-topic/subscriptions/s1",
                                                           "tx-topic/subscriptions/s2"]
    partitioned = {q["Name"] for q in QUEUES if q["Properties"].get("EnablePartitioning")}
    assert {name: on_core.get(name) for name in names} == {
        name: "16" if name in partitioned else "1" for name in names}


def test_a_received_message_is_completed_and_forwarded_to_the_same_queue_once(tx_broker: BrokerProcess) -> None:
    """The home core's own duplicate detection applies to the transaction's sends to its queue, and a
    waiting receiver gets a committed send without a poll."""
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        with sdk.get_queue_sender("tx-v2-dedup") as sender:
            sender.send_messages(ServiceBusMessage("first", message_id="known"))
        raw = _raw(tx_broker)
        try:
            receiver, first, controller, txn, link = _begun(raw, tx_broker, "tx-v2-dedup", "tx-v2-dedup")
            accepted = TransactionalState(txn, Accepted())
            assert raw.send_in_transaction(link, message(b"again", "known"), txn) == accepted
            assert raw.send_in_transaction(link, message(b"next", "next"), txn) == accepted
            assert raw.settle(receiver, first, accepted) == accepted
            assert raw.discharge(controller, txn) == Accepted()
        finally:
            raw.close()
        assert _peek(sdk, "tx-v2-dedup") == ["next"]  # "known" was seen: dropped, as a plain send would be
        with sdk.get_queue_receiver("tx-v2-dedup") as sdk_receiver:
            [got] = sdk_receiver.receive_messages(max_message_count=1, max_wait_time=30)
            assert str(got) == "next"
            sdk_receiver.complete_message(got)


def test_a_send_to_another_entity_with_duplicate_detection_is_refused_as_not_built(tx_broker: BrokerProcess) -> None:
    """Its history lives in another core: refused at once (amqp:not-implemented); the transaction stays
    usable and commits what it did enlist."""
    raw = _raw(tx_broker)
    try:
        controller = raw.coordinator()
        txn = _declare(raw, controller)
        other = raw.attach(_address(tx_broker, "tx-v2-other"), SENDER)
        dedup = raw.attach(_address(tx_broker, "tx-v2-dedup"), SENDER)
        accepted = TransactionalState(txn, Accepted())
        assert raw.send_in_transaction(other, message(b"kept"), txn) == accepted
        refused = raw.send_in_transaction(dedup, message(b"refused", "r"), txn)
        assert _condition(refused) == NotImplementedOperation.condition
        assert raw.discharge(controller, txn) == Accepted()
    finally:
        raw.close()
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        assert _peek(sdk, "tx-v2-dedup") == []
        assert _peek(sdk, "tx-v2-other") == ["kept"]
        with sdk.get_queue_receiver("tx-v2-other") as receiver:
            [got] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.complete_message(got)


def test_settling_messages_of_two_queues_in_one_transaction_is_refused_as_not_built(
        tx_broker: BrokerProcess) -> None:
    """One core decides the commit, and it holds the locks of one queue only: the second queue's
    settlement is refused at once (amqp:not-implemented), still locked; the rest commits."""
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        for name in ("tx-v2-one", "tx-v2-two"):
            with sdk.get_queue_sender(name) as sender:
                sender.send_messages(ServiceBusMessage(f"in {name}"))
        raw = _raw(tx_broker)
        try:
            one, first = _locked(raw, tx_broker, "tx-v2-one")
            two, second = _locked(raw, tx_broker, "tx-v2-two")
            controller = raw.coordinator()
            txn = _declare(raw, controller)
            accepted = TransactionalState(txn, Accepted())
            assert raw.settle(one, first, accepted) == accepted
            assert _condition(raw.settle(two, second, accepted)) == NotImplementedOperation.condition
            assert raw.discharge(controller, txn) == Accepted()
            assert _peek(sdk, "tx-v2-one") == []
            assert _peek(sdk, "tx-v2-two") == ["in tx-v2-two"]
        finally:
            raw.close()


def test_a_transaction_that_sends_to_a_topic_first_commits_on_the_topic(tx_broker: BrokerProcess) -> None:
    """Settling nothing, the transaction is decided by its first send's core, here the topic's: the
    subscriptions' copies and the queue's message are one batch of the topic's store."""
    raw = _raw(tx_broker)
    try:
        controller = raw.coordinator()
        txn = _declare(raw, controller)
        topic = raw.attach(_address(tx_broker, "tx-v2-topic"), SENDER)
        queue = raw.attach(_address(tx_broker, "tx-v2-other"), SENDER)
        accepted = TransactionalState(txn, Accepted())
        assert raw.send_in_transaction(topic, message(b"to all"), txn) == accepted
        assert raw.send_in_transaction(queue, message(b"to one"), txn) == accepted
        with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
            assert _peek(sdk, "tx-v2-other") == []
            assert raw.discharge(controller, txn) == Accepted()
            assert _peek(sdk, "tx-v2-other") == ["to one"]
            for name in ("s1", "s2"):
                with sdk.get_subscription_receiver("tx-v2-topic", name) as receiver:
                    got = receiver.receive_messages(max_message_count=5, max_wait_time=30)
                    assert [str(m) for m in got] == ["to all"]
                    for m in got:
                        receiver.complete_message(m)
            with sdk.get_queue_receiver("tx-v2-other") as receiver:
                [got_one] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
                receiver.complete_message(got_one)
    finally:
        raw.close()


def test_a_discharged_transaction_survives_kill_9_and_an_open_one_leaves_nothing(tmp_path: Path) -> None:
    queues = [{"Name": "tx-durable", "Properties": {}}, {"Name": "tx-source", "Properties": {}}]
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", queues), extra_args=V2).start()
    try:
        with ServiceBusClient.from_connection_string(broker.connection_string) as sdk, \
                sdk.get_queue_sender("tx-source") as sender:
            sender.send_messages([ServiceBusMessage("done"), ServiceBusMessage("open")])
        raw = _raw(broker)
        try:
            receiver, done, controller, txn, link = _begun(raw, broker, "tx-source", "tx-durable")
            _enlist(raw, txn, link, [b"d1", b"d2"], receiver, done)
            assert raw.discharge(controller, txn) == Accepted()
            # A second transaction is left open when the broker dies: none of it may show.
            _left_open(raw, controller, receiver, link)
            broker.kill()  # the first discharge was accepted, so its sends and complete are on disk
        finally:
            raw.close()
        broker.start()
        with ServiceBusClient.from_connection_string(broker.connection_string) as sdk:
            with sdk.get_queue_receiver("tx-durable") as sdk_receiver:
                got = sdk_receiver.receive_messages(max_message_count=3, max_wait_time=10)
                while len(got) < 2 and (more := sdk_receiver.receive_messages(max_message_count=3, max_wait_time=5)):
                    got += more
                assert sorted(str(m) for m in got) == ["d1", "d2"]
            # "done" was completed; "open" was never settled (its lock outlived the broker, or lapsed).
            assert _peek(sdk, "tx-source") == ["open"]
    finally:
        broker.stop()
