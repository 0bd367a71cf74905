"""Locks past their link (issue 13.2) and session messages riding on the session lock (13.3).

Official ``azure-servicebus`` SDK against a broker of this module's own; the raw client only where the SDK
refuses to send the request (renew-lock for a session message is refused client-side).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode, ServiceBusSubQueue
from azure.servicebus.exceptions import MessageLockLostError, SessionCannotBeLockedError, SessionLockLostError
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient

from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

QUEUES = [
    {"Name": "outlive", "Properties": {"LockDuration": "PT1M"}},
    {"Name": "outlive-conn", "Properties": {"LockDuration": "PT1M"}},
    {"Name": "sess", "Properties": {"RequiresSession": True, "LockDuration": "PT5S"}},
    {"Name": "sess-rad", "Properties": {"RequiresSession": True, "LockDuration": "PT5S"}},
    {"Name": "sess-close", "Properties": {"RequiresSession": True, "LockDuration": "PT1M"}},
]


@pytest.fixture(scope="module")
def locks_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base: Path = tmp_path_factory.mktemp("hardening-locks")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def _receive(receiver: object, count: int) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got.extend(receiver.receive_messages(max_message_count=count - len(got), max_wait_time=5))  # type: ignore[attr-defined]
    assert len(got) == count
    return got


def test_locks_outlive_the_receiving_connection_and_settle_by_token(locks_broker: BrokerProcess) -> None:
    conn = locks_broker.connection_string
    with ServiceBusClient.from_connection_string(conn) as client, client.get_queue_sender("outlive") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(5)])
    # The first client receives four and goes away, link and connection, leaving them unsettled.
    with ServiceBusClient.from_connection_string(conn) as first, first.get_queue_receiver("outlive") as receiver:
        held = _receive(receiver, 4)
    assert sorted(str(m) for m in held) == ["m0", "m1", "m2", "m3"]
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_receiver("outlive") as other:
            # A second receiver does not see what the first left locked (the lock is one minute).
            rest = other.receive_messages(max_message_count=5, max_wait_time=3)
            assert [str(m) for m in rest] == ["m4"]
            other.complete_message(rest[0])
            # Renew, complete, abandon, dead-letter and defer by lock token, through $management.
            before = held[0].locked_until_utc
            time.sleep(1)
            assert other.renew_message_lock(held[0]) > before
            other.complete_message(held[0])
            other.abandon_message(held[1])
            other.dead_letter_message(held[2], reason="kept", error_description="settled after its link")
            other.defer_message(held[3])
            [again] = _receive(other, 1)
            assert (str(again), again.delivery_count) == (str(held[1]), 1)
            other.complete_message(again)
            [deferred] = other.receive_deferred_messages([held[3].sequence_number])
            assert str(deferred) == str(held[3])
            other.complete_message(deferred)
            assert other.receive_messages(max_message_count=5, max_wait_time=2) == []
        with client.get_queue_receiver("outlive", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            [letter] = _receive(dead, 1)
            assert (str(letter), letter.dead_letter_reason) == (str(held[2]), "kept")
            dead.complete_message(letter)


def test_a_closed_receivers_lock_still_holds_on_the_same_connection(locks_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(locks_broker.connection_string) as client:
        with client.get_queue_sender("outlive-conn") as sender:
            sender.send_messages(ServiceBusMessage("left behind"))
        with client.get_queue_receiver("outlive-conn") as receiver:
            [held] = _receive(receiver, 1)
        with client.get_queue_receiver("outlive-conn") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=3) == []
            receiver.complete_message(held)
        with client.get_queue_receiver("outlive-conn") as receiver:
            assert receiver.receive_messages(max_message_count=1, max_wait_time=2) == []


def _send_session(conn: str, queue: str, session_id: str, bodies: list[str]) -> None:
    with ServiceBusClient.from_connection_string(conn) as client, client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(b, session_id=session_id) for b in bodies])


def test_session_messages_ride_on_the_session_lock(locks_broker: BrokerProcess) -> None:
    # "sess" has LockDuration PT5S: a message lock of its own would be gone after 5 s.
    conn = locks_broker.connection_string
    _send_session(conn, "sess", "ride", ["r0", "r1"])
    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with client.get_queue_receiver("sess", session_id="ride") as receiver:
            [first] = _receive(receiver, 1)
            for _ in range(3):  # 6 s (past the 5 s), the session renewed every 2 s: its messages stay locked with it
                time.sleep(2)
                receiver.session.renew_lock()
            receiver.complete_message(first)
            [second] = _receive(receiver, 1)
            assert (str(first), str(second)) == ("r0", "r1")
            assert second.delivery_count == 0
            # renew-lock on a session message is refused (the SDK refuses it itself; a raw client asks).
            raw = RawClient(locks_broker.port)
            try:
                audience = f"sb://localhost:{locks_broker.port}/"
                expiry = int(time.time()) + 300
                assert raw.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
                status, condition, _ = raw.management("sess/$management", "com.microsoft:renew-lock",
                                                      {"lock-tokens": [uuid.UUID(str(second.lock_token))]})
                assert (status, condition) == (400, "amqp:not-allowed")
            finally:
                raw.close()
            receiver.complete_message(second)


def test_session_expiry_takes_its_messages_locks(locks_broker: BrokerProcess) -> None:
    conn = locks_broker.connection_string
    _send_session(conn, "sess", "lapse", ["l0"])
    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with client.get_queue_receiver("sess", session_id="lapse") as receiver:
            [held] = _receive(receiver, 1)
            time.sleep(7)  # past the session lock (5 s, extended by the delivery), not renewed
            with pytest.raises((SessionLockLostError, MessageLockLostError)):
                receiver.complete_message(held)
        with client.get_queue_receiver("sess", session_id="lapse") as receiver:
            [again] = _receive(receiver, 1)
            assert (str(again), again.delivery_count) == ("l0", 1)
            receiver.complete_message(again)


def test_delivering_from_a_session_extends_its_lock(locks_broker: BrokerProcess) -> None:
    # ReceiveAndDelete, 5 s session lock, never renewed: accepted at t0, messages delivered at about
    # t0 + 3.5, iterated until about t0 + 5, then a wait. At about t0 + 6.7 the session is still held
    # (the deliveries extended its lock to about t0 + 8.5): a second receiver cannot take it.
    conn = locks_broker.connection_string
    _send_session(conn, "sess-rad", "rad", [f"d{i}" for i in range(5)])
    with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
        with client.get_queue_receiver("sess-rad", session_id="rad", max_wait_time=1.5,
                                       receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            time.sleep(3.5)
            assert [str(m) for m in receiver] == [f"d{i}" for i in range(5)]
            time.sleep(1.5)
            with ServiceBusClient.from_connection_string(conn, retry_total=0) as rival, \
                    pytest.raises(SessionCannotBeLockedError):
                with rival.get_queue_receiver("sess-rad", session_id="rad", max_wait_time=1) as second:
                    second.receive_messages(max_message_count=1, max_wait_time=1)


def test_a_receive_and_delete_session_receiver_iterates_past_its_lock_duration(locks_broker: BrokerProcess) -> None:
    # The case: a 5 s session lock, the iterator waiting 5 s after the last message. The receiver
    # keeps asking for messages (its credit), so it keeps its session: the iteration ends without
    # SessionLockLostError, three times over.
    conn = locks_broker.connection_string
    for attempt in range(3):
        session_id = f"iterate-{attempt}"
        _send_session(conn, "sess-rad", session_id, [f"i{i}" for i in range(10)])
        with ServiceBusClient.from_connection_string(conn, retry_total=0) as client:
            with client.get_queue_receiver("sess-rad", session_id=session_id, max_wait_time=5,
                                           receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
                assert [str(m) for m in receiver] == [f"i{i}" for i in range(10)]


def test_closing_a_session_receiver_releases_the_session_and_its_messages(locks_broker: BrokerProcess) -> None:
    conn = locks_broker.connection_string
    _send_session(conn, "sess-close", "c", ["c0", "c1"])
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_receiver("sess-close", session_id="c") as receiver:
            held = _receive(receiver, 2)
        with client.get_queue_receiver("sess-close", session_id="c") as receiver:  # one minute lock: not waited for
            again = _receive(receiver, 2)
            assert [str(m) for m in again] == [str(m) for m in held]
            for m in again:
                receiver.complete_message(m)
