"""Sessions through the official SDK, sync and aio: locking, order, state, renewal, expiry, listing."""

from __future__ import annotations

import asyncio
import time

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
    SessionLockLostError,
)
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop


def _send(client: ServiceBusClient, queue: str, pairs: list[tuple[str, str]]) -> None:
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(body, session_id=sid) for sid, body in pairs])


def test_a_named_session_gets_only_its_messages_in_order(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, "sessions", [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2"), ("a", "a3")])
        with client.get_queue_receiver("sessions", session_id="a") as receiver:
            assert receiver.session.session_id == "a"
            got = []
            while len(got) < 3:
                batch = receiver.receive_messages(max_message_count=10, max_wait_time=5)
                assert batch
                got.extend(batch)
            assert [str(m) for m in got] == ["a1", "a2", "a3"]
            assert all(m.session_id == "a" for m in got)
            for m in got:
                receiver.complete_message(m)
        with client.get_queue_receiver("sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5) as receiver:
            assert receiver.session.session_id == "b"
            got = receiver.receive_messages(max_message_count=10, max_wait_time=5)
            assert [str(m) for m in got] == ["b1", "b2"]
            for m in got:
                receiver.complete_message(m)


def test_a_locked_session_cannot_be_taken_by_a_second_receiver(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        _send(client, "sessions", [("held", "h1")])
        with client.get_queue_receiver("sessions", session_id="held") as first:
            with pytest.raises(SessionCannotBeLockedError), \
                    client.get_queue_receiver("sessions", session_id="held") as second:
                second.receive_messages(max_wait_time=1)
            [m] = first.receive_messages(max_message_count=1, max_wait_time=5)
            first.complete_message(m)
        # Released on close: a new receiver gets the (now empty) session at once.
        with client.get_queue_receiver("sessions", session_id="held") as again:
            assert again.receive_messages(max_message_count=1, max_wait_time=1) == []


def test_next_available_times_out_when_no_session_has_messages(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        started = time.monotonic()
        with pytest.raises(OperationTimeoutError), \
                client.get_queue_receiver("sessions-aio", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2) as r:
            r.receive_messages(max_wait_time=1)
        assert time.monotonic() - started < 30


def test_session_state_round_trips_and_sessions_are_listed(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        _send(client, "sessions", [("stateful", "s1")])
        with client.get_queue_receiver("sessions", session_id="stateful") as receiver:
            assert receiver.session.get_state() is None
            receiver.session.set_state(b"step-2")
            assert receiver.session.get_state() == b"step-2"
            assert "stateful" in client.list_queue_sessions("sessions")
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(m)
            receiver.session.set_state(None)
            assert receiver.session.get_state() is None


def test_messages_without_a_session_id_are_refused(broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusError), client.get_queue_sender("sessions") as sender:
            sender.send_messages(ServiceBusMessage("no session"))
        with pytest.raises(ServiceBusError), client.get_queue_receiver("sessions") as receiver:
            receiver.receive_messages(max_wait_time=1)  # a session entity needs a session receiver


def test_session_lock_renewal_and_expiry(broker: BrokerProcess) -> None:
    # "sessions-short" has LockDuration PT5S, which is also the session lock's duration.
    with ServiceBusClient.from_connection_string(broker.connection_string, retry_total=0) as client:
        _send(client, "sessions-short", [("s", "one"), ("s", "two")])
        with client.get_queue_receiver("sessions-short", session_id="s") as receiver:
            first_until = receiver.session.locked_until_utc
            time.sleep(3)
            receiver.session.renew_lock()
            assert receiver.session.locked_until_utc > first_until
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(m)
            time.sleep(6)  # past the renewed lock: the session is lost
            with pytest.raises(SessionLockLostError):
                receiver.receive_messages(max_message_count=1, max_wait_time=3)
        with client.get_queue_receiver("sessions-short", session_id="s") as receiver:
            [m] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(m) == "two"
            receiver.complete_message(m)


async def _aio_sessions(connection_string: str) -> None:
    async with AsyncServiceBusClient.from_connection_string(connection_string) as client:
        async with client.get_queue_sender("sessions-aio") as sender:
            await sender.send_messages([ServiceBusMessage(f"x{i}", session_id="x") for i in range(5)])
        async with client.get_queue_receiver("sessions-aio", session_id=NEXT_AVAILABLE_SESSION,
                                             max_wait_time=5) as receiver:
            assert receiver.session.session_id == "x"
            await receiver.session.set_state(b"aio")
            got = []
            while len(got) < 5:
                batch = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
                assert batch
                got.extend(batch)
            assert [str(m) for m in got] == [f"x{i}" for i in range(5)]
            for m in got:
                await receiver.complete_message(m)
            assert await receiver.session.get_state() == b"aio"


def test_aio_sessions(broker: BrokerProcess) -> None:
    asyncio.run(_aio_sessions(broker.connection_string))
