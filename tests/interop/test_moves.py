"""Resubmit, move, purge and the console's browsing, against a broker whose queues run on the partition core.

The broker is started as users start it (``scripts/serve``). Browsing (the console's and
the JSON API's listing of a queue or its dead-letter queue, and the selection of a move) reads the
store; purges and moves go through the source queue's core as one fenced ``MoveMessages`` each
chunk (``server/moves.py``, ``MoveOut`` in ``model/partition_core.py``). The console CLI, browser
and kill -9 resubmit scenarios (``test_console_cli``, ``test_console_browser``,
``test_console_resubmit_kill9``) run in their own modules on the core, the default and only one
(this module used to run them once more, when there were two cores), and Spark's
redrive (the same JSON API move) in ``test_spark_syphon_redrive.py``. What remains here is this
module's own: a move from a queue on the core into a topic, a transactional send, and the moves
between stores below.

Moves the source's transaction cannot cover run against ``mixed``, a ``scripts/serve`` broker with two
messaging stores (``MessagingStores``) and the ``mv-v1*`` entities (a queue that forwards its dead
letters into a partitioned queue; a partitioned topic joined by forwarding to it), which stayed on
the version-1 path until every forwarding group ran on the core; they are on the core now, and the
moves into and out of them are moves between core entities across stores and partitions. A move
from a queue on the core into a topic on the core in its store is one transaction (into the topic's
own partition; its activator fans them out); into another store, the target appends the messages
(a topic: their copies, in its subscriptions) under their move keys first, then the source deletes
them (a crash in between leaves the source copy, which a repeat of the move removes without copying
it again). (A transactional send to a queue on the core, pinned here as not built until
transactions came to the core, is stored at the discharge: ``test_transactions.py`` runs
the transaction scenarios.)
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import test_console_cli
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Accepted, Declared, TransactionalState
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

PIN_QUEUE, PIN_TOPIC = "v2-pin", "v2-pin-topic"


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-console-cli")
    queues = [*test_console_cli.QUEUES, {"Name": PIN_QUEUE, "Properties": {}}]
    topics = [{"Name": PIN_TOPIC, "Properties": {}, "Subscriptions": [{"Name": "s", "Properties": {}}]}]
    process = BrokerProcess(base / "data", write_config(base / "Config.json", queues, Topics=topics),
                            extra_args=[]).start()
    yield process
    process.stop()


# ---- moves into a topic, the version-1 path, another store, and from the version-1 path ------------------


def test_a_move_from_a_queue_on_the_core_into_a_topic_fans_out_to_its_subscriptions(
        cli_broker: BrokerProcess) -> None:
    """The rows move into the topic's own partition in the source's transaction; the topic's
    activator fans them out to its subscriptions as a send would (server/topic_actor.py)."""
    test_console_cli.dead_letter(cli_broker, PIN_QUEUE, [("p1", "green")])
    assert test_console_cli.messages(cli_broker, "move", PIN_QUEUE, "--to", PIN_TOPIC, "--all") == "moved 1 of 1\n"
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        with client.get_subscription_receiver(PIN_TOPIC, "s") as subscription:
            [m] = subscription.receive_messages(max_message_count=1, max_wait_time=30)
            assert (m.message_id, m.application_properties[b"color"]) == ("p1", b"green")
            assert m.dead_letter_reason is None and m.delivery_count == 0
            subscription.complete_message(m)
        with client.get_queue_receiver(PIN_QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            assert dead.peek_messages(max_message_count=10) == []


def test_a_transactional_send_to_a_queue_on_the_core_is_stored_at_the_discharge(cli_broker: BrokerProcess) -> None:
    raw = RawClient(cli_broker.port)
    try:
        audience = f"sb://localhost:{cli_broker.port}/"
        expiry = int(time.time()) + 300
        assert raw.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        controller = raw.coordinator()
        declared = raw.declare(controller)
        assert isinstance(declared, Declared) and declared.txn_id
        txn = bytes(declared.txn_id)
        sender = raw.attach(f"amqps://localhost:{cli_broker.port}/{PIN_QUEUE}", SENDER)
        outcome: Any = raw.send_in_transaction(sender, message(b"in a transaction"), txn)
        assert outcome == TransactionalState(txn, Accepted())
        with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client, \
                client.get_queue_receiver(PIN_QUEUE) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []  # nothing of it before the discharge
            assert raw.discharge(controller, txn) == Accepted()
            assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["in a transaction"]
            [got] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.complete_message(got)
    finally:
        raw.close()


# ---- two stores and the version-1 path ---------------------------------------------------------------------


def _named(prefix: str, store: int) -> str:
    """A name the broker places in store ``store`` of two (its name's hash picks it)."""
    return next(f"{prefix}-{i}" for i in range(100) if zlib.crc32(f"{prefix}-{i}".encode()) % 2 == store)


SRC, NEAR, FAR = _named("mv-src", 0), _named("mv-near", 0), _named("mv-far", 1)
TOPIC_NEAR, TOPIC_FAR = _named("mv-topic", 0), _named("mv-ftopic", 1)
V1_QUEUE, V1_PARTITIONED, V1_TOPIC = "mv-v1", "mv-v1-partitioned", "mv-v1-topic"
PARTITIONED = "mv-partitioned"  # alone: on the core, one core per partition over both stores
NONE = [{"Name": "none", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1 = 0"}}}]
RED = [{"Name": "red", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = 'red'"}}}]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-moves-mixed")
    queues = [{"Name": SRC, "Properties": {}}, {"Name": NEAR, "Properties": {}}, {"Name": FAR, "Properties": {}},
              # Joined by forwarding to a partitioned queue (once kept on the version-1 path for it).
              {"Name": V1_QUEUE, "Properties": {"ForwardDeadLetteredMessagesTo": V1_PARTITIONED}},
              {"Name": V1_PARTITIONED, "Properties": {"EnablePartitioning": True}},
              {"Name": PARTITIONED, "Properties": {"EnablePartitioning": True}}]
    subscriptions = [{"Name": "all", "Properties": {}}, {"Name": "red", "Properties": {}, "Rules": RED}]
    topics = [{"Name": TOPIC_NEAR, "Properties": {}, "Subscriptions": subscriptions},
              {"Name": TOPIC_FAR, "Properties": {}, "Subscriptions": subscriptions},
              # Partitioned, and joined by a forwarding subscription (that takes nothing) to the
              # group above: a group mixing partitioned and non-partitioned entities.
              {"Name": V1_TOPIC, "Properties": {"EnablePartitioning": True}, "Subscriptions": [
                  *subscriptions, {"Name": "none", "Properties": {"ForwardTo": V1_QUEUE}, "Rules": NONE}]}]
    stores = [{"Name": "spare", "Path": "stores/spare.db"}]
    process = BrokerProcess(base / "data", write_config(base / "Config.json", queues, Topics=topics,
                                                        MessagingStores=stores),
                            extra_args=["--log-level", "INFO"]).start()
    yield process
    process.stop()


def _received(client: ServiceBusClient, entity: str, subscription: str | None = None,
              sub_queue: ServiceBusSubQueue | None = None, wait: float = 10) -> list[tuple[str | None, str]]:
    """(MessageId, body) of every message there, completed; waits ``wait`` s for the first."""
    receiver = (client.get_queue_receiver(entity, sub_queue=sub_queue) if subscription is None
                else client.get_subscription_receiver(entity, subscription, sub_queue=sub_queue))
    found: list[tuple[str | None, str]] = []
    with receiver:
        while True:
            got = receiver.receive_messages(max_message_count=50, max_wait_time=wait if not found else 2)
            if not got:
                return sorted(found, key=lambda f: f[0] or "")
            for m in got:
                assert m.dead_letter_reason is None and m.delivery_count == 0
                found.append((m.message_id, str(m)))
                receiver.complete_message(m)


def _move(broker: BrokerProcess, source: str, target: str, expected: int, *selection: str) -> None:
    assert test_console_cli.messages(broker, "move", source, "--to", target, *(selection or ("--all",))) == \
        f"moved {expected} of {expected}\n"


def _dead(broker: BrokerProcess, queue: str, *ids: str) -> None:
    test_console_cli.dead_letter(broker, queue, [(i, "red" if i.startswith("r") else "blue") for i in ids])


def test_the_mixed_broker_runs_every_entity_on_the_core(mixed: BrokerProcess) -> None:
    """The ``mv-v1*`` group (a queue forwarding its dead letters into a partitioned queue, and a
    partitioned topic joined to it) stayed on the version-1 path until forwarding groups mixing
    partitioned and non-partitioned entities, and dead letters forwarded through a relay, ran on the
    core (issue 14); this test asserted that placement, and now that none is left behind. The moves
    below into and out of those entities are then moves between entities on the core."""
    on_core = " ".join(line for line in mixed.output if line.startswith("serving ") or " serving " in line)
    for name in (SRC, NEAR, FAR, TOPIC_NEAR, TOPIC_FAR, PARTITIONED, V1_QUEUE, V1_PARTITIONED, V1_TOPIC):
        assert f"serving {name} (" in on_core


def test_a_move_into_a_queue_in_another_store(mixed: BrokerProcess) -> None:
    _dead(mixed, SRC, "b1", "b2")
    _move(mixed, SRC, FAR, 2)
    with ServiceBusClient.from_connection_string(mixed.connection_string) as client:
        assert _received(client, FAR) == [("b1", "b1"), ("b2", "b2")]
        assert _received(client, SRC, sub_queue=ServiceBusSubQueue.DEAD_LETTER, wait=1) == []


def test_a_move_into_a_topic_in_the_same_store_and_in_another(mixed: BrokerProcess) -> None:
    for topic in (TOPIC_NEAR, TOPIC_FAR):
        _dead(mixed, SRC, "r1", "b3")
        _move(mixed, SRC, topic, 2)
        with ServiceBusClient.from_connection_string(mixed.connection_string) as client:
            assert _received(client, topic, "all") == [("b3", "b3"), ("r1", "r1")], topic
            assert _received(client, topic, "red") == [("r1", "r1")], topic
            assert _received(client, SRC, sub_queue=ServiceBusSubQueue.DEAD_LETTER, wait=1) == []


def test_a_move_into_the_version_1_path(mixed: BrokerProcess) -> None:
    _dead(mixed, SRC, "b4")
    _move(mixed, SRC, V1_QUEUE, 1)
    _dead(mixed, SRC, "r2", "b5")
    _move(mixed, SRC, V1_TOPIC, 2)
    with ServiceBusClient.from_connection_string(mixed.connection_string) as client:
        assert _received(client, V1_QUEUE) == [("b4", "b4")]
        assert _received(client, V1_TOPIC, "all") == [("b5", "b5"), ("r2", "r2")]
        assert _received(client, V1_TOPIC, "red") == [("r2", "r2")]
        assert _received(client, SRC, sub_queue=ServiceBusSubQueue.DEAD_LETTER, wait=1) == []


def test_a_move_from_the_version_1_path_into_the_core(mixed: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(mixed.connection_string) as client, \
            client.get_queue_sender(V1_QUEUE) as sender:
        sender.send_messages([ServiceBusMessage(i, message_id=i, application_properties={"color": c})
                              for i, c in (("b6", "blue"), ("r3", "red"), ("b7", "blue"))])
    _move(mixed, V1_QUEUE, NEAR, 2, "--sub-queue", "active", "--filter", "color = 'blue'")
    _move(mixed, V1_QUEUE, TOPIC_FAR, 1, "--sub-queue", "active", "--all")
    with ServiceBusClient.from_connection_string(mixed.connection_string) as client:
        assert _received(client, NEAR) == [("b6", "b6"), ("b7", "b7")]
        assert _received(client, TOPIC_FAR, "red") == [("r3", "r3")]
        assert _received(client, TOPIC_FAR, "all") == [("r3", "r3")]
        assert _received(client, V1_QUEUE, wait=1) == []


def test_a_move_into_a_partitioned_queue_on_the_core(mixed: BrokerProcess) -> None:
    _dead(mixed, SRC, "b8", "b9", "b10")
    _move(mixed, SRC, PARTITIONED, 3)
    with ServiceBusClient.from_connection_string(mixed.connection_string) as client:
        assert _received(client, PARTITIONED) == [("b10", "b10"), ("b8", "b8"), ("b9", "b9")]
        assert _received(client, SRC, sub_queue=ServiceBusSubQueue.DEAD_LETTER, wait=1) == []
