"""ReplicatedClient (issue 15 items 6, 7): active and passive replication between two real brokers.

Two `scripts/serve` brokers for the module; tests that kill one restart it on its data dir before
they return, so the next test finds both up.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.exceptions import ServiceBusError
from broker_process import BrokerProcess, write_config
from replication_ports import with_stable_ports

from sodalite.client import DuplicateFilter, ReplicatedClient, ReplicationMode

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

QUEUE_NAMES = ["sales", "passive", "abandon", "persist", "rad", "drill-active", "drill-passive",
               "req-a", "req-b", "replies"]
QUEUES = [{"Name": name, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 50}} for name in QUEUE_NAMES]
TOPICS = [{"Name": "news", "Properties": {}, "Subscriptions": [{"Name": "all", "Properties": {}}]}]
# Small SDK retries: a killed broker refuses connections at once, so failures surface in about a second.
SDK_RETRIES = {"retry_total": 1, "retry_backoff_factor": 0.1, "retry_backoff_max": 0.5}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    brokers = []
    for name in ("primary", "secondary"):
        base: Path = tmp_path_factory.mktemp(f"replication-{name}")
        brokers.append(with_stable_ports(BrokerProcess(base / "data",
                                                   write_config(base / "Config.json", QUEUES, Topics=TOPICS))))
    try:
        for broker in brokers:
            broker.start()
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            broker.stop()


def _up(broker: BrokerProcess) -> None:
    if broker.proc is None or broker.proc.poll() is not None:
        broker.start()


def _peek_all(broker: BrokerProcess, queue: str, sub_queue: ServiceBusSubQueue | None = None) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue, sub_queue=sub_queue) as receiver:
            return [str(m.message_id) for m in receiver.peek_messages(max_message_count=5000)]


def _client(pair: tuple[BrokerProcess, BrokerProcess], mode: ReplicationMode) -> ReplicatedClient:
    return ReplicatedClient(pair[0].connection_string, pair[1].connection_string, mode=mode, **SDK_RETRIES)


def _drain(receiver: object, idle: float = 3.0) -> list[str]:
    """Receive and complete until nothing comes for ``idle`` seconds; returns the delivered MessageIds."""
    got: list[str] = []
    while batch := receiver.receive_messages(max_message_count=50, max_wait_time=idle):  # type: ignore[attr-defined]
        for message in batch:
            got.append(str(message.message_id))
            receiver.complete_message(message)  # type: ignore[attr-defined]
    return got


def test_active_sends_both_copies_with_one_message_id_and_the_receiver_drops_the_second(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair, ReplicationMode.ACTIVE) as client:
        with client.get_queue_sender("sales") as sender:
            named = ServiceBusMessage("named", message_id="mine")
            sender.send_messages(named)
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(9)])
        in_primary, in_secondary = _peek_all(pair[0], "sales"), _peek_all(pair[1], "sales")
        assert len(in_primary) == 10 and "mine" in in_primary
        assert in_primary == in_secondary  # same MessageIds, same order, one copy in each namespace
        with client.get_queue_receiver("sales") as receiver:
            delivered = _drain(receiver)
    assert sorted(delivered) == sorted(in_primary)
    # The second copies were completed quietly, not abandoned: nothing left, nothing dead-lettered.
    for broker in pair:
        assert _peek_all(broker, "sales") == []
        assert _peek_all(broker, "sales", ServiceBusSubQueue.DEAD_LETTER) == []


def test_topic_sender_and_subscription_receiver_replicate_too(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair, ReplicationMode.ACTIVE) as client:
        with client.get_topic_sender("news") as sender:
            sender.send_messages([ServiceBusMessage(f"n{i}", message_id=f"news-{i}") for i in range(5)])
        with client.get_subscription_receiver("news", "all") as receiver:
            delivered = _drain(receiver)
    assert sorted(delivered) == [f"news-{i}" for i in range(5)]


def test_active_send_succeeds_with_one_namespace_down_and_fails_with_both(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = pair
    with _client(pair, ReplicationMode.ACTIVE) as client, client.get_queue_sender("sales") as sender:
        secondary.kill()
        try:
            sender.send_messages(ServiceBusMessage("one copy", message_id="half"))
            assert _peek_all(primary, "sales") == ["half"]
            primary.kill()
            with pytest.raises(ServiceBusError):
                sender.send_messages(ServiceBusMessage("no copy", message_id="none"))
        finally:
            _up(primary)
            _up(secondary)
    assert _peek_all(secondary, "sales") == []
    with _client(pair, ReplicationMode.ACTIVE) as client, client.get_queue_receiver("sales") as receiver:
        assert _drain(receiver) == ["half"]


def test_passive_uses_one_namespace_switches_roles_on_failure_and_keeps_them_when_both_fail(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary, secondary = pair
    with _client(pair, ReplicationMode.PASSIVE) as client, client.get_queue_sender("passive") as sender:
        sender.send_messages(ServiceBusMessage("p1", message_id="p1"))
        assert (_peek_all(primary, "passive"), _peek_all(secondary, "passive")) == (["p1"], [])
        assert sender.active_namespace == 0
        primary.kill()
        try:
            sender.send_messages(ServiceBusMessage("p2", message_id="p2"))  # primary fails: backup, switch
            assert sender.active_namespace == 1
            secondary.kill()
            with pytest.raises(ServiceBusError):
                sender.send_messages(ServiceBusMessage("p3", message_id="p3"))
            assert sender.active_namespace == 1  # both failed: roles unchanged
        finally:
            _up(primary)
            _up(secondary)
        sender.send_messages(ServiceBusMessage("p4", message_id="p4"))  # the new active one, though both are up
        assert sender.active_namespace == 1
        # Another sender of the same client for the same entity shares the roles.
        with client.get_queue_sender("passive") as other:
            assert other.active_namespace == 1
    assert _peek_all(primary, "passive") == ["p1"]
    assert _peek_all(secondary, "passive") == ["p2", "p4"]
    with _client(pair, ReplicationMode.PASSIVE) as client, client.get_queue_receiver("passive") as receiver:
        assert sorted(_drain(receiver)) == ["p1", "p2", "p4"]


def test_an_abandoned_copy_records_nothing_and_a_recorded_copy_is_completed_not_abandoned(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair, ReplicationMode.ACTIVE) as client:
        with client.get_queue_sender("abandon") as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="twice"))
        with client.get_queue_receiver("abandon") as receiver:
            [first] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.abandon_message(first)
            assert "twice" not in receiver.duplicate_filter
            redelivered = []
            while not redelivered:
                redelivered = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert [m.message_id for m in redelivered] == ["twice"]  # delivered again after the abandon
            receiver.complete_message(redelivered[0])
            assert "twice" in receiver.duplicate_filter
            assert _drain(receiver) == []  # the other copy is dropped ...
    for broker in pair:  # ... and completed: not left to cycle to the dead-letter queue
        assert _peek_all(broker, "abandon") == []
        assert _peek_all(broker, "abandon", ServiceBusSubQueue.DEAD_LETTER) == []


def test_a_persisted_filter_drops_duplicates_after_the_receiver_restarts(
        pair: tuple[BrokerProcess, BrokerProcess], tmp_path: Path) -> None:
    secondary = pair[1]
    path = tmp_path / "seen.sqlite"
    with _client(pair, ReplicationMode.ACTIVE) as client:
        with client.get_queue_sender("persist") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"persist-{i}") for i in range(5)])
        # The first receiver only ever sees the primary: the secondary is down while it runs.
        secondary.kill()
        try:
            with DuplicateFilter(path=path) as seen, client.get_queue_receiver("persist",
                                                                               duplicate_filter=seen) as receiver:
                first_run = _drain(receiver)
        finally:
            _up(secondary)
    assert sorted(first_run) == [f"persist-{i}" for i in range(5)]
    assert len(_peek_all(secondary, "persist")) == 5
    with _client(pair, ReplicationMode.ACTIVE) as client:
        with DuplicateFilter(path=path) as seen, \
                client.get_queue_receiver("persist", duplicate_filter=seen) as receiver:
            assert _drain(receiver) == []
    assert _peek_all(secondary, "persist") == []


def test_the_replicated_receiver_never_hands_out_a_ping(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    # A broker may or may not deliver pings (Sodalite does not, once issue 15.3 is in); either way
    # the replicated receiver must not pass one on, and must not leave it behind.
    with ServiceBusClient.from_connection_string(pair[0].connection_string) as plain, \
            plain.get_queue_sender("rad") as sender:
        sender.send_messages(ServiceBusMessage(b"", content_type="application/vnd.ms-servicebus-ping",
                                               time_to_live=timedelta(seconds=30)))
        sender.send_messages(ServiceBusMessage("real", message_id="after-the-ping"))
    with _client(pair, ReplicationMode.ACTIVE) as client, client.get_queue_receiver("rad") as receiver:
        assert _drain(receiver) == ["after-the-ping"]
    assert _peek_all(pair[0], "rad") == []


def test_receive_and_delete_records_when_handed_to_the_application(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    from azure.servicebus import ServiceBusReceiveMode

    with _client(pair, ReplicationMode.ACTIVE) as client:
        with client.get_queue_sender("rad") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"rad-{i}") for i in range(20)])
        got: list[str] = []
        with client.get_queue_receiver("rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            while batch := receiver.receive_messages(max_message_count=50, max_wait_time=3):
                got.extend(str(m.message_id) for m in batch)
    assert sorted(got) == sorted(f"rad-{i}" for i in range(20))
    for broker in pair:
        assert _peek_all(broker, "rad") == []


def test_request_reply_pair_switches_roles_when_the_active_endpoint_is_down(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    stop = threading.Event()
    served: list[str] = []

    def serve() -> None:
        with _client(pair, ReplicationMode.PASSIVE) as service:
            with service.get_request_receiver("req-a", secondary_queue_name="req-b") as requests:
                while not stop.is_set():
                    for request in requests.receive_messages(max_message_count=5, max_wait_time=1):
                        served.append(str(request.message_id))
                        requests.reply(request, ServiceBusMessage(f"re: {request}"))
                        requests.complete_message(request)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        with _client(pair, ReplicationMode.PASSIVE) as client:
            with client.get_request_sender("req-a", secondary_queue_name="req-b",
                                           reply_queue_name="replies") as requester:
                reply = requester.request(ServiceBusMessage("hello"), timeout=60)
                assert str(reply) == "re: hello"
                was_active = requester.active
                pair[was_active].kill()
                try:
                    reply = requester.request(ServiceBusMessage("again"), timeout=60)
                    assert str(reply) == "re: again"
                    assert requester.active == 1 - was_active
                finally:
                    _up(pair[was_active])
    finally:
        stop.set()
        server.join(60)
    assert len(served) == 2


# -- the drills: 1,000 messages while one broker is killed and restarted repeatedly ------------------

TOTAL = 1000
KILLS = 5


def _drill(pair: tuple[BrokerProcess, BrokerProcess], mode: ReplicationMode, queue: str, victims: list[int]) -> None:
    ids = [f"{queue}-{i}-{uuid.uuid4()}" for i in range(TOTAL)]
    sent = 0
    send_errors = 0
    kills = 0
    done = threading.Event()
    failures: list[BaseException] = []
    # KILLS kills, evenly spread: the sender waits at each threshold until that kill happened, so a
    # fast sender cannot finish before the storm does; messages flow while the victim restarts.
    thresholds = [(k + 1) * TOTAL // (KILLS + 1) for k in range(KILLS)]
    killed = [threading.Event() for _ in thresholds]

    def send_all() -> None:
        nonlocal sent, send_errors
        try:
            with _client(pair, mode) as client, client.get_queue_sender(queue) as sender:
                for index, message_id in enumerate(ids):
                    if index in thresholds:
                        assert killed[thresholds.index(index)].wait(120), "the chaos thread did not kill in time"
                    deadline = time.monotonic() + 120
                    while True:  # the application's retry: the same MessageId again, until one namespace takes it
                        try:
                            sender.send_messages(ServiceBusMessage(message_id, message_id=message_id), timeout=20)
                            break
                        except ServiceBusError:
                            send_errors += 1
                            assert time.monotonic() < deadline, "no namespace took the message for 120 s"
                            time.sleep(0.2)
                    sent += 1
        except BaseException as error:
            failures.append(error)
        finally:
            done.set()

    def chaos() -> None:
        nonlocal kills
        for round_, threshold in enumerate(thresholds):
            while sent < threshold and not done.is_set():
                time.sleep(0.05)
            if done.is_set():
                return
            victim = pair[victims[round_ % len(victims)]]
            victim.kill()
            kills += 1
            killed[round_].set()
            time.sleep(1.0)
            victim.start()

    sender_thread = threading.Thread(target=send_all, daemon=True)
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    delivered: list[str] = []
    started = time.monotonic()
    try:
        sender_thread.start()
        chaos_thread.start()
        deadline = time.monotonic() + 240
        with _client(pair, mode) as client, client.get_queue_receiver(queue) as receiver:
            receiver.probe_wait = 0.3
            while time.monotonic() < deadline and not (done.is_set() and len(set(delivered)) >= TOTAL):
                for message in receiver.receive_messages(max_message_count=50, max_wait_time=1):
                    delivered.append(str(message.message_id))
                    receiver.complete_message(message)
            sender_thread.join(30)
            chaos_thread.join(30)
            # After the storm: both up, anything still in either namespace is a copy of a delivered one.
            for broker in pair:
                _up(broker)
            time.sleep(6)  # locks taken before the last kill (5 s) expire, so those copies come back
            delivered += _drain(receiver, idle=3)
    finally:
        done.set()
        chaos_thread.join(60)
        for broker in pair:
            _up(broker)
    assert not failures, failures
    assert kills == KILLS
    assert len(delivered) == len(set(delivered)), "a MessageId was delivered twice"
    assert set(delivered) == set(ids), f"{len(set(ids) - set(delivered))} lost"
    print(f"{mode.value} drill: {TOTAL} messages, {kills} kills, {send_errors} failed sends retried by the "
          f"application, {time.monotonic() - started:.0f} s including a 6 s wait for locks to expire")


def test_active_drill_1000_messages_while_one_broker_is_killed_repeatedly(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    _drill(pair, ReplicationMode.ACTIVE, "drill-active", victims=[1, 0])


def test_passive_drill_1000_messages_while_one_broker_is_killed_repeatedly(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    _drill(pair, ReplicationMode.PASSIVE, "drill-passive", victims=[0, 1])
