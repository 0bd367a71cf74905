"""Every runtime count equals a recount of the store, while the broker runs and after a restart.

A broker started as users start it (``scripts/serve``), with two SQLite messaging stores, is driven
with the official SDK and the JSON API (the console's): sends, scheduled sends and their
cancellation, dead-lettering, deferral, moves into queues, subscriptions, topics, a partitioned
queue and another store, resubmits from dead-letter queues, purges, and sends to topics. At each
quiescent point, the figures the JSON API lists and those the SDK's
``ServiceBusAdministrationClient`` reads (ATOM) are compared with a recount of the rows in the SQLite
files (``store_recount.py``); then again after a restart. Each test checks its own entities.

(The figures used to drift: a move into another queue left the target's SizeInBytes at 0 while the
broker ran (1,005 after a restart), and dead letters never showed in their queue's size.)
"""

from __future__ import annotations

import datetime
import zlib
from collections.abc import Callable, Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from broker_process import BrokerProcess, write_config
from store_recount import api, assert_counts_true, mismatches

pytestmark = pytest.mark.interop

BODY = "x" * 1000  # about 1 KiB each, so sizes are visible


def _named(prefix: str, store: int) -> str:
    """A name the broker places in store ``store`` of two (its name's hash picks it)."""
    return next(f"{prefix}-{i}" for i in range(100) if zlib.crc32(f"{prefix}-{i}".encode()) % 2 == store)


# One family of entities per test, so each test's check covers only its own.
MOVE_SRC, MOVE_DST, MOVE_FAR = _named("mv-src", 0), _named("mv-dst", 0), _named("mv-far", 1)
MOVE_PARTITIONED = "mv-part"
MOVE_TOPIC = _named("mv-topic", 0)
RESUBMIT = "rs-q"
PURGE = "pg-q"
SETTLE = "st-q"
SCHEDULE = "sc-q"
TOPIC = _named("tp-topic", 0)
EXPIRE = "ex-q"
FWD_SRC, FWD_DST = "fw-src", "fw-dst"
LOOP_A, LOOP_B = "fw-loop-a", "fw-loop-b"
DL_FWD_SRC, DL_FWD_DST = "fw-dl-src", "fw-dl-dst"
PARTITIONED = "pt-q"
SESSIONS = "ss-q"

RED = [{"Name": "red", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = 'red'"}}}]
SUBSCRIPTIONS = [{"Name": "all", "Properties": {}}, {"Name": "red", "Properties": {}, "Rules": RED}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("runtime-counts")
    queues = [{"Name": name, "Properties": {}} for name in (MOVE_SRC, MOVE_DST, MOVE_FAR, RESUBMIT, PURGE,
                                                            SETTLE, SCHEDULE)]
    queues += [{"Name": MOVE_PARTITIONED, "Properties": {"EnablePartitioning": True}},
               {"Name": EXPIRE, "Properties": {"DeadLetteringOnMessageExpiration": True}},
               {"Name": FWD_SRC, "Properties": {"ForwardTo": FWD_DST}}, {"Name": FWD_DST, "Properties": {}},
               {"Name": LOOP_A, "Properties": {"ForwardTo": LOOP_B}},
               {"Name": LOOP_B, "Properties": {"ForwardTo": LOOP_A}},
               {"Name": DL_FWD_SRC, "Properties": {"ForwardDeadLetteredMessagesTo": DL_FWD_DST, "MaxDeliveryCount": 1}},
               {"Name": DL_FWD_DST, "Properties": {}},
               {"Name": PARTITIONED, "Properties": {"EnablePartitioning": True, "MaxDeliveryCount": 2}},
               {"Name": SESSIONS, "Properties": {"RequiresSession": True}}]
    topics = [{"Name": MOVE_TOPIC, "Properties": {}, "Subscriptions": SUBSCRIPTIONS},
              {"Name": TOPIC, "Properties": {}, "Subscriptions": SUBSCRIPTIONS}]
    process = BrokerProcess(base / "data", write_config(
        base / "Config.json", queues, Topics=topics, MessagingStores=[{"Name": "spare", "Path": "stores/spare.db"}]))
    process.start()
    yield process
    process.stop()


def _family(*names: str) -> Callable[[str], bool]:
    lowered = tuple(n.lower() for n in names)
    return lambda path: path.lower().startswith(lowered)


def _send(client: ServiceBusClient, queue: str, count: int, color: str = "blue", prefix: str = "m") -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(BODY, message_id=f"{prefix}{i}",
                                                application_properties={"color": color}) for i in range(count)])


def _take(client: ServiceBusClient, queue: str, count: int, subscription: str | None = None,
          sub_queue: ServiceBusSubQueue | None = None) -> tuple[object, list[ServiceBusReceivedMessage]]:
    receiver = (client.get_queue_receiver(queue, sub_queue=sub_queue) if subscription is None
                else client.get_subscription_receiver(queue, subscription, sub_queue=sub_queue))
    receiver.__enter__()
    got: list[ServiceBusReceivedMessage] = []
    while len(got) < count:
        batch = receiver.receive_messages(max_message_count=count - len(got), max_wait_time=10)
        assert batch, f"only {len(got)} of {count} messages came from {queue}"
        got += batch
    return receiver, got


def _dead_letter(client: ServiceBusClient, queue: str, count: int, subscription: str | None = None) -> None:
    receiver, got = _take(client, queue, count, subscription)
    try:
        for m in got:
            receiver.dead_letter_message(m, reason="Bad", error_description="for the test")  # type: ignore[attr-defined]
    finally:
        receiver.__exit__(None, None, None)  # type: ignore[attr-defined]


def _move(broker: BrokerProcess, source: str, target: str | None, sub_queue: str, expected: int) -> None:
    body: dict[str, object] = {"subQueue": sub_queue, "all": True}
    if target is not None:
        body["target"] = target
    result = api(broker, "POST", f"/entities/{source}/$move", body)
    assert result["moved"] == expected, result


def test_moves_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(MOVE_SRC, MOVE_DST, MOVE_FAR, MOVE_PARTITIONED, MOVE_TOPIC)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, MOVE_SRC, 9, color="red")
        assert_counts_true(broker, "after sends", only=only)
        _dead_letter(client, MOVE_SRC, 9)
        assert_counts_true(broker, "after dead-lettering", only=only)
        # Into a queue in the same store (one transaction), a queue in another store (keyed), a
        # partitioned queue (keyed, spread over both stores) and a topic (its activator fans out).
        for target, count in ((MOVE_DST, 2), (MOVE_FAR, 2), (MOVE_PARTITIONED, 2), (MOVE_TOPIC, 3)):
            numbers = [m["sequenceNumber"] for m in api(broker, "GET", f"/entities/{MOVE_SRC}/$messages"
                                                        f"?subQueue=deadletter&count={count}")["messages"]]
            result = api(broker, "POST", f"/entities/{MOVE_SRC}/$move",
                         {"subQueue": "deadletter", "sequenceNumbers": numbers, "target": target})
            assert result["moved"] == count, result
            assert_counts_true(broker, f"after a move into {target}", only=only)
        # On from there: active messages of a queue, a subscription's dead letters, another store's queue.
        _move(broker, MOVE_DST, MOVE_FAR, "active", 2)
        assert_counts_true(broker, "after a move of active messages into another store", only=only)
        _dead_letter(client, MOVE_TOPIC, 3, subscription="red")
        _move(broker, f"{MOVE_TOPIC}/subscriptions/red", MOVE_DST, "deadletter", 3)
        assert_counts_true(broker, "after a move from a subscription's dead-letter queue", only=only)
        _move(broker, MOVE_FAR, MOVE_SRC, "active", 4)
        _move(broker, MOVE_PARTITIONED, MOVE_DST, "active", 2)
        assert_counts_true(broker, "after moves back", only=only)


def test_resubmits_from_the_dead_letter_queue_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(RESUBMIT)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, RESUBMIT, 5)
        _dead_letter(client, RESUBMIT, 5)
        assert_counts_true(broker, "after dead-lettering", only=only)
        _move(broker, RESUBMIT, None, "deadletter", 5)
        assert_counts_true(broker, "after a resubmit", only=only)
        _dead_letter(client, RESUBMIT, 5)
        _move(broker, RESUBMIT, None, "deadletter", 5)
        assert_counts_true(broker, "after a second dead-lettering and resubmit", only=only)


def test_purges_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(PURGE)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, PURGE, 6)
        _dead_letter(client, PURGE, 3)
        with client.get_queue_sender(PURGE) as sender:
            sender.schedule_messages([ServiceBusMessage(BODY) for _ in range(2)],
                                     datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
        assert_counts_true(broker, "before the purges", only=only)
        assert api(broker, "POST", f"/entities/{PURGE}/$purge", {"subQueue": "deadletter"})["purged"] == 3
        assert_counts_true(broker, "after purging the dead-letter queue", only=only)
        assert api(broker, "POST", f"/entities/{PURGE}/$purge", {})["purged"] == 3
        assert_counts_true(broker, "after purging the active messages", only=only)
        assert api(broker, "POST", f"/entities/{PURGE}/$purge", {"subQueue": "scheduled"})["purged"] == 2
        assert_counts_true(broker, "after purging the scheduled messages", only=only)


def test_settlements_defer_and_schedule_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(SETTLE, SCHEDULE)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, SETTLE, 6)
        receiver, got = _take(client, SETTLE, 6)
        try:
            receiver.defer_message(got[0])  # type: ignore[attr-defined]
            receiver.defer_message(got[1])  # type: ignore[attr-defined]
            receiver.complete_message(got[2])  # type: ignore[attr-defined]
            receiver.abandon_message(got[3])  # type: ignore[attr-defined]
            receiver.dead_letter_message(got[4], reason="Bad")  # type: ignore[attr-defined]
            # got[5] stays locked: a locked message counts as active
            assert_counts_true(broker, "after complete, abandon, defer and dead-letter", only=only)
            deferred = receiver.receive_deferred_messages([got[0].sequence_number])  # type: ignore[attr-defined]
            receiver.complete_message(deferred[0])  # type: ignore[attr-defined]
            receiver.complete_message(got[5])  # type: ignore[attr-defined]
        finally:
            receiver.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert_counts_true(broker, "after completing a deferred message", only=only)
        _move(broker, SETTLE, None, "deferred", 1)  # a deferred message resubmitted arrives active
        assert_counts_true(broker, "after resubmitting a deferred message", only=only)
        with client.get_queue_sender(SCHEDULE) as sender:
            later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            numbers = sender.schedule_messages([ServiceBusMessage(BODY) for _ in range(4)], later)
            assert_counts_true(broker, "after scheduling", only=only)
            sender.cancel_scheduled_messages(numbers[:2])
            assert_counts_true(broker, "after cancelling scheduled messages", only=only)
            soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
            sender.schedule_messages([ServiceBusMessage(BODY)], soon)
        with client.get_queue_receiver(SCHEDULE) as due:
            assert len(due.receive_messages(max_message_count=1, max_wait_time=15)) == 1
        assert_counts_true(broker, "after a scheduled message came due", only=only)


def test_sends_to_topics_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(TOPIC)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_topic_sender(TOPIC) as sender:
            sender.send_messages([ServiceBusMessage(BODY, application_properties={"color": c})
                                  for c in ("red", "red", "blue")])
            sender.schedule_messages([ServiceBusMessage(BODY, application_properties={"color": "red"})],
                                     datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1))
        assert_counts_true(broker, "after sends to a topic", only=only)
        _dead_letter(client, TOPIC, 2, subscription="red")
        assert_counts_true(broker, "after dead-lettering in a subscription", only=only)
        _move(broker, f"{TOPIC}/subscriptions/red", None, "deadletter", 2)
        assert_counts_true(broker, "after a resubmit in a subscription", only=only)
        receiver, got = _take(client, TOPIC, 3, subscription="all")
        try:
            for m in got:
                receiver.complete_message(m)  # type: ignore[attr-defined]
        finally:
            receiver.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert_counts_true(broker, "after completing a subscription's messages", only=only)


def test_expiry_into_the_dead_letter_queue_keeps_every_count_true(broker: BrokerProcess) -> None:
    only = _family(EXPIRE)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(EXPIRE) as sender:
            sender.send_messages([ServiceBusMessage(BODY, time_to_live=datetime.timedelta(seconds=1))
                                  for _ in range(3)])
        with client.get_queue_receiver(EXPIRE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            got = []
            while len(got) < 3:
                batch = dead.peek_messages(max_message_count=3)
                got = batch if len(batch) > len(got) else got
                if len(got) < 3:
                    with client.get_queue_receiver(EXPIRE) as main:
                        main.receive_messages(max_message_count=1, max_wait_time=2)  # nothing: they expired
        assert_counts_true(broker, "after messages expired into the dead-letter queue", only=only)


def test_forwarding_and_forwarded_dead_letters_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(FWD_SRC, FWD_DST, LOOP_A, LOOP_B, DL_FWD_SRC, DL_FWD_DST)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, FWD_SRC, 3)  # lands in FWD_DST
        _send(client, LOOP_A, 2)  # forwarded round the loop to the hop limit: a transfer dead letter
        _send(client, DL_FWD_SRC, 3)
        receiver, got = _take(client, DL_FWD_SRC, 3)
        try:
            receiver.dead_letter_message(got[0], reason="Bad")  # type: ignore[attr-defined]
            receiver.abandon_message(got[1])  # type: ignore[attr-defined]  # MaxDeliveryCount 1: dead-lettered
            receiver.complete_message(got[2])  # type: ignore[attr-defined]
        finally:
            receiver.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert_counts_true(broker, "after forwarding and forwarded dead letters", only=only)


def test_partitioned_queues_sessions_and_receive_and_delete_keep_every_count_true(broker: BrokerProcess) -> None:
    only = _family(PARTITIONED, SESSIONS)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, PARTITIONED, 8)
        receiver, got = _take(client, PARTITIONED, 4)
        try:
            for m in got[:2]:
                receiver.dead_letter_message(m, reason="Bad")  # type: ignore[attr-defined]
            receiver.defer_message(got[2])  # type: ignore[attr-defined]
            receiver.abandon_message(got[3])  # type: ignore[attr-defined]
        finally:
            receiver.__exit__(None, None, None)  # type: ignore[attr-defined]
        assert_counts_true(broker, "after settlements in a partitioned queue", only=only)
        _move(broker, PARTITIONED, None, "deadletter", 2)
        assert_counts_true(broker, "after a resubmit in a partitioned queue", only=only)
        with client.get_queue_receiver(PARTITIONED, receive_mode="receiveanddelete") as taker:
            taken = taker.receive_messages(max_message_count=3, max_wait_time=10)
            assert taken
        assert_counts_true(broker, "after receive-and-delete", only=only)
        with client.get_queue_sender(SESSIONS) as sender:
            sender.send_messages([ServiceBusMessage(BODY, session_id=f"s{i % 2}") for i in range(4)])
        with client.get_queue_receiver(SESSIONS, session_id="s0") as session:
            for m in session.receive_messages(max_message_count=2, max_wait_time=10):
                session.complete_message(m)
            session.session.set_state(b"some state")
        assert_counts_true(broker, "after a session's messages were completed", only=only)


def test_every_count_is_true_after_a_restart(broker: BrokerProcess) -> None:
    """Last in the module: every entity the tests above left, after a clean stop and start."""
    assert_counts_true(broker, "before the restart")
    broker.stop()
    broker.start()
    assert mismatches(broker) == [], "runtime counts differ from the store right after a restart"
    assert_counts_true(broker, "after the restart")


# ---- PostgreSQL: the same runners over a PostgreSQL messaging store ------------------------------------------

PG_SRC, PG_DST, PG_TOPIC = "pg-src", "pg-dst", "pg-topic"


@pytest.fixture(scope="module")
def pg_broker(tmp_path_factory: pytest.TempPathFactory, database: str) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("runtime-counts-pg")
    queues = [{"Name": PG_SRC, "Properties": {}}, {"Name": PG_DST, "Properties": {}}]
    topics = [{"Name": PG_TOPIC, "Properties": {}, "Subscriptions": SUBSCRIPTIONS}]
    process = BrokerProcess(base / "data", write_config(base / "Config.json", queues, Topics=topics),
                            extra_args=["--store", database])
    process.start()
    yield process
    process.stop()


def test_every_count_is_true_on_postgresql(pg_broker: BrokerProcess, database: str) -> None:
    """Dead-lettering, a move, a resubmit, a purge and a topic's sends on a PostgreSQL store, and a restart."""
    def check(when: str) -> None:
        assert_counts_true(pg_broker, when, store_url=database)

    with ServiceBusClient.from_connection_string(pg_broker.connection_string) as client:
        _send(client, PG_SRC, 6)
        _dead_letter(client, PG_SRC, 6)
        check("after dead-lettering")
        numbers = [m["sequenceNumber"] for m in api(pg_broker, "GET", f"/entities/{PG_SRC}/$messages"
                                                    "?subQueue=deadletter&count=3")["messages"]]
        assert api(pg_broker, "POST", f"/entities/{PG_SRC}/$move",
                   {"subQueue": "deadletter", "sequenceNumbers": numbers, "target": PG_DST})["moved"] == 3
        check("after a move into another queue")
        _move(pg_broker, PG_SRC, None, "deadletter", 3)
        check("after a resubmit")
        assert api(pg_broker, "POST", f"/entities/{PG_SRC}/$purge", {})["purged"] == 3
        check("after a purge")
        with client.get_topic_sender(PG_TOPIC) as sender:
            sender.send_messages([ServiceBusMessage(BODY, application_properties={"color": "red"})
                                  for _ in range(2)])
        _dead_letter(client, PG_TOPIC, 1, subscription="red")
        check("after sends to a topic and a dead letter in a subscription")
    pg_broker.stop()
    pg_broker.start()
    assert mismatches(pg_broker, store_url=database) == [], "runtime counts differ from the store after a restart"
