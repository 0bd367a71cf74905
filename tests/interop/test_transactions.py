"""AMQP transactions (coordinator, declare/discharge, transactional sends and settlements) with the raw
client, which speaks them as a transaction controller does; the official SDK checks what is visible."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message, message_with

from sodalite.amqp.link import RECEIVER, SENDER, Link
from sodalite.amqp.performatives import Accepted, Declared, Modified, Rejected, TransactionalState
from sodalite.amqp.types import Described, ULong
from sodalite.errors import ArgumentError, InvalidOperation, TransactionRolledBack, TransactionUnknown
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

QUEUES: list[dict[str, Any]] = [
    {"Name": name, "Properties": {}} for name in ("tx-a", "tx-b", "tx-roll", "tx-lost", "tx-unknown")
] + [
    {"Name": "tx-conn", "Properties": {"LockDuration": "PT5S"}},  # its lock outlives the connection (13.2)
    {"Name": "tx-part", "Properties": {"EnablePartitioning": True}},
    {"Name": "tx-part-dedup", "Properties": {"EnablePartitioning": True, "RequiresDuplicateDetection": True}},
    {"Name": "tx-part-sess", "Properties": {"EnablePartitioning": True, "RequiresSession": True}},
]
TOPICS = [{"Name": "tx-topic", "Properties": {}, "Subscriptions": [
    {"Name": "s1", "Properties": {}}, {"Name": "s2", "Properties": {}}]}]


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("transactions")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS)).start()
    yield process
    process.stop()


def _raw(broker: BrokerProcess) -> RawClient:
    client = RawClient(broker.port)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    return client


def _address(broker: BrokerProcess, path: str) -> str:
    return f"amqps://localhost:{broker.port}/{path}"


def _declare(raw: RawClient, controller: Link) -> bytes:
    declared = raw.declare(controller)
    assert isinstance(declared, Declared) and declared.txn_id
    return bytes(declared.txn_id)


def _peek(sdk: ServiceBusClient, queue: str) -> list[str]:
    with sdk.get_queue_receiver(queue) as receiver:
        return [str(m) for m in receiver.peek_messages(max_message_count=50)]


def _peek_subscription(sdk: ServiceBusClient, topic: str, subscription: str) -> list[str]:
    with sdk.get_subscription_receiver(topic, subscription) as receiver:
        return [str(m) for m in receiver.peek_messages(max_message_count=50)]


def _condition(outcome: Any) -> str:
    assert isinstance(outcome, Rejected) and outcome.error is not None, outcome
    return str(outcome.error.condition)


def _locked(raw: RawClient, broker: BrokerProcess, queue: str) -> tuple[Link, int]:
    """A peek-lock receiver on ``queue`` and the delivery-id of the message it got."""
    receiver = raw.attach(_address(broker, queue), RECEIVER)
    receiver.issue_credit(1)
    return receiver, raw.receive(receiver).delivery_id


def _begun(raw: RawClient, broker: BrokerProcess, source: str, target: str) -> tuple[Link, int, Link, bytes, Link]:
    """What a transaction that completes a message and sends on starts from: a peek-lock receiver on
    ``source`` and the delivery-id of the message it got, a coordinator and a transaction declared on
    it, and a sender on ``target``."""
    receiver, delivery = _locked(raw, broker, source)
    controller = raw.coordinator()
    txn = _declare(raw, controller)
    return receiver, delivery, controller, txn, raw.attach(_address(broker, target), SENDER)


def _enlist(raw: RawClient, txn: bytes, sender: Link, bodies: Iterable[bytes], receiver: Link, delivery: int) -> None:
    """Send each of ``bodies`` on ``sender``, then complete ``delivery`` on ``receiver``, in ``txn``:
    each is echoed as enlisted in it."""
    in_txn = TransactionalState(txn, Accepted())
    for body in bodies:
        assert raw.send_in_transaction(sender, message(body), txn) == in_txn
    assert raw.settle(receiver, delivery, in_txn) == in_txn


def _left_open(raw: RawClient, controller: Link, receiver: Link, sender: Link) -> None:
    """A further transaction that is left open: it completes the next message ``receiver`` gets and
    sends "never" on ``sender``."""
    receiver.issue_credit(1)
    pending = raw.receive(receiver).delivery_id
    _enlist(raw, _declare(raw, controller), sender, [b"never"], receiver, pending)


def test_commit_makes_every_send_and_complete_visible_at_once(tx_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        with sdk.get_queue_sender("tx-a") as sender:
            sender.send_messages(ServiceBusMessage("old"))
        raw = _raw(tx_broker)
        try:
            receiver, old = _locked(raw, tx_broker, "tx-a")
            controller = raw.coordinator()
            txn = _declare(raw, controller)
            a, b, topic = (raw.attach(_address(tx_broker, path), SENDER) for path in ("tx-a", "tx-b", "tx-topic"))
            for link, body in ((a, b"a1"), (a, b"a2"), (b, b"b1"), (topic, b"t1")):
                assert raw.send_in_transaction(link, message(body), txn) == TransactionalState(txn, Accepted())
            in_txn = TransactionalState(txn, Accepted())
            assert raw.settle(receiver, old, in_txn) == in_txn  # echoed: the complete is enlisted

            # Before the discharge nothing of the transaction shows: no send, and the message is still there.
            assert _peek(sdk, "tx-a") == ["old"]
            assert _peek(sdk, "tx-b") == []
            assert _peek_subscription(sdk, "tx-topic", "s1") == []
            assert _peek_subscription(sdk, "tx-topic", "s2") == []

            assert raw.discharge(controller, txn) == Accepted()  # answered once the commit is durable
            assert _peek(sdk, "tx-a") == ["a1", "a2"]
            assert _peek(sdk, "tx-b") == ["b1"]
            assert _peek_subscription(sdk, "tx-topic", "s1") == ["t1"]
            assert _peek_subscription(sdk, "tx-topic", "s2") == ["t1"]
            # The id is spent: discharging it again is refused.
            assert _condition(raw.discharge(controller, txn)) == TransactionUnknown.condition
        finally:
            raw.close()


def test_rollback_leaves_no_send_and_the_message_locked_as_it_was(tx_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        with sdk.get_queue_sender("tx-roll") as sender:
            sender.send_messages(ServiceBusMessage("keep"))
        raw = _raw(tx_broker)
        try:
            receiver, keep, controller, txn, sender_link = _begun(raw, tx_broker, "tx-roll", "tx-roll")
            _enlist(raw, txn, sender_link, [b"never"], receiver, keep)

            assert raw.discharge(controller, txn, fail=True) == Accepted()
            assert _peek(sdk, "tx-roll") == ["keep"]
            # Still locked by this receiver: abandoning it works (a lost lock would be refused) ...
            assert isinstance(raw.settle(receiver, keep, Modified(delivery_failed=True)), Modified)
            # ... and then it is receivable again, having been delivered once.
            with sdk.get_queue_receiver("tx-roll") as sdk_receiver:
                [again] = sdk_receiver.receive_messages(max_message_count=1, max_wait_time=10)
                assert str(again) == "keep" and again.delivery_count == 1
                sdk_receiver.complete_message(again)
            assert _peek(sdk, "tx-roll") == []
        finally:
            raw.close()


def test_a_commit_whose_lock_was_lost_rolls_back_entirely(tx_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        with sdk.get_queue_sender("tx-lost") as sender:
            sender.send_messages(ServiceBusMessage("locked"))
        raw = _raw(tx_broker)
        try:
            receiver, locked, controller, txn, sender_link = _begun(raw, tx_broker, "tx-lost", "tx-lost")
            _enlist(raw, txn, sender_link, [b"sent"], receiver, locked)
            # Settled outside the transaction: the lock the transaction enlisted is gone.
            assert isinstance(raw.settle(receiver, locked, Modified(delivery_failed=True)), Modified)

            assert _condition(raw.discharge(controller, txn)) == TransactionRolledBack.condition
            assert _peek(sdk, "tx-lost") == ["locked"]  # neither the send nor the complete happened
        finally:
            raw.close()


def test_unknown_transaction_ids_are_refused(tx_broker: BrokerProcess) -> None:
    raw = _raw(tx_broker)
    try:
        controller = raw.coordinator()
        assert _condition(raw.discharge(controller, b"\x00" * 16)) == TransactionUnknown.condition
        malformed = raw._control(controller, Described(ULong(0x32), ["not binary", False]))
        assert _condition(malformed) == ArgumentError.condition
        sender_link = raw.attach(_address(tx_broker, "tx-unknown"), SENDER)
        outcome = raw.send_in_transaction(sender_link, message(b"orphan"), b"no-such-transaction")
        assert _condition(outcome) == TransactionUnknown.condition
        txn = _declare(raw, controller)
        assert raw.discharge(controller, txn, fail=True) == Accepted()
        assert _condition(raw.send_in_transaction(sender_link, message(b"late"), txn)) == TransactionUnknown.condition
    finally:
        raw.close()
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        assert _peek(sdk, "tx-unknown") == []


def test_connection_loss_rolls_back_its_transactions(tx_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        with sdk.get_queue_sender("tx-conn") as sender:
            sender.send_messages(ServiceBusMessage("held"))
        raw = _raw(tx_broker)
        receiver, held, _, txn, sender_link = _begun(raw, tx_broker, "tx-conn", "tx-conn")
        _enlist(raw, txn, sender_link, [b"lost"], receiver, held)
        raw.sock.close()  # no close frame: the connection just goes

        with sdk.get_queue_receiver("tx-conn") as sdk_receiver:
            # The complete never happened; the lock outlived the connection (13.2) and expires after 5 s.
            [again] = sdk_receiver.receive_messages(max_message_count=1, max_wait_time=30)
            assert str(again) == "held"
            assert _peek(sdk, "tx-conn") == ["held"]  # and "lost" was never sent
            sdk_receiver.complete_message(again)
        other = _raw(tx_broker)
        try:  # a transaction belongs to its connection: another one cannot discharge it
            assert _condition(other.discharge(other.coordinator(), txn)) == TransactionUnknown.condition
        finally:
            other.close()


def test_partitioned_entities_follow_the_seed_rules(tx_broker: BrokerProcess) -> None:
    raw = _raw(tx_broker)
    try:
        controller = raw.coordinator()
        part = raw.attach(_address(tx_broker, "tx-part"), SENDER)
        dedup = raw.attach(_address(tx_broker, "tx-part-dedup"), SENDER)
        sessions = raw.attach(_address(tx_broker, "tx-part-sess"), SENDER)
        refused = InvalidOperation.condition

        txn = _declare(raw, controller)
        accepted = TransactionalState(txn, Accepted())
        assert _condition(raw.send_in_transaction(part, message_with(b"no key"), txn)) == refused
        assert raw.send_in_transaction(part, message_with(b"k1", partition_key="k"), txn) == accepted
        assert _condition(raw.send_in_transaction(part, message_with(b"other", partition_key="j"), txn)) == refused
        mismatch = message_with(b"mismatch", session_id="k", partition_key="x")
        assert _condition(raw.send_in_transaction(part, mismatch, txn)) == refused
        assert raw.send_in_transaction(part, message_with(b"k2", partition_key="k"), txn) == accepted  # still usable
        assert raw.discharge(controller, txn) == Accepted()

        txn = _declare(raw, controller)  # a MessageId is the key under duplicate detection
        assert raw.send_in_transaction(dedup, message_with(b"d", message_id="m-1"), txn) == TransactionalState(
            txn, Accepted())
        assert _condition(raw.send_in_transaction(part, message_with(b"no key"), txn)) == refused
        assert raw.discharge(controller, txn) == Accepted()

        txn = _declare(raw, controller)  # one session per transaction
        assert raw.send_in_transaction(sessions, message_with(b"s", session_id="s1"), txn) == TransactionalState(
            txn, Accepted())
        assert _condition(raw.send_in_transaction(sessions, message_with(b"t", session_id="s2"), txn)) == refused
        assert raw.discharge(controller, txn) == Accepted()
    finally:
        raw.close()
    with ServiceBusClient.from_connection_string(tx_broker.connection_string) as sdk:
        assert sorted(_peek(sdk, "tx-part")) == ["k1", "k2"]
        assert _peek(sdk, "tx-part-dedup") == ["d"]
        with sdk.get_queue_receiver("tx-part-sess", session_id="s1") as receiver:
            assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["s"]


def test_a_committed_transaction_survives_kill_9(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [{"Name": "tx-durable", "Properties": {}}])
    process = BrokerProcess(tmp_path / "data", config).start()
    try:
        raw = _raw(process)
        try:
            controller = raw.coordinator()
            txn = _declare(raw, controller)
            sender_link = raw.attach(_address(process, "tx-durable"), SENDER)
            for body in (b"d1", b"d2"):
                assert raw.send_in_transaction(sender_link, message(body), txn) == TransactionalState(txn, Accepted())
            assert raw.discharge(controller, txn) == Accepted()
        finally:
            raw.close()
        process.kill()  # the discharge was accepted, so both messages must be on disk
        process.start()
        with ServiceBusClient.from_connection_string(process.connection_string) as sdk:
            with sdk.get_queue_receiver("tx-durable") as receiver:
                got = receiver.receive_messages(max_message_count=2, max_wait_time=10)
                while len(got) < 2 and (more := receiver.receive_messages(max_message_count=2, max_wait_time=5)):
                    got += more
                assert sorted(str(m) for m in got) == ["d1", "d2"]
    finally:
        process.stop()
