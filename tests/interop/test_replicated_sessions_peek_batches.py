"""ReplicatedClient beyond plain receivers (issue 15): SDK-style batches, session receivers (a named
session, the next available one, subscription sessions), peek, and the request/reply pair switching
on a reply timeout; sync and asyncio, against two real brokers (`scripts/serve`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusClient, ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.exceptions import OperationTimeoutError
from broker_process import BrokerProcess, write_config

from sodalite.client import ReplicatedClient, ReplicationMode
from sodalite.client import aio as client_aio
from sodalite.errors import NotImplementedOperation

pytestmark = [pytest.mark.interop, pytest.mark.timeout(240)]

PLAIN = {"LockDuration": "PT5S", "MaxDeliveryCount": 50}
SESSIONS = {**PLAIN, "RequiresSession": True}
QUEUES = [{"Name": n, "Properties": PLAIN} for n in ("g-batch", "g-peek", "g-req-a", "g-req-b", "g-replies",
                                                      "ga-batch", "ga-req-a", "ga-req-b", "ga-replies")]
QUEUES += [{"Name": n, "Properties": SESSIONS} for n in ("g-sessions", "g-next", "ga-sessions", "g-down")]
TOPICS = [{"Name": "g-news", "Properties": {},
           "Subscriptions": [{"Name": "by-session", "Properties": {"RequiresSession": True}}]}]
SDK_RETRIES = {"retry_total": 1, "retry_backoff_factor": 0.1, "retry_backoff_max": 0.5}


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    brokers = []
    for name in ("primary", "secondary"):
        base: Path = tmp_path_factory.mktemp(f"gaps-{name}")
        brokers.append(BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES, Topics=TOPICS)))
    try:
        for broker in brokers:
            broker.start()
        yield brokers[0], brokers[1]
    finally:
        for broker in brokers:
            broker.stop()


def _client(pair: tuple[BrokerProcess, BrokerProcess], mode: ReplicationMode = ReplicationMode.ACTIVE,
            ) -> ReplicatedClient:
    return ReplicatedClient(pair[0].connection_string, pair[1].connection_string, mode=mode, **SDK_RETRIES)


def _peek_ids(broker: BrokerProcess, queue: str, session_id: str | None = None) -> list[str]:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue, session_id=session_id) as receiver:
            return [str(m.message_id) for m in receiver.peek_messages(max_message_count=500)]


def _drain(receiver: object, idle: float = 2.0) -> list[str]:
    got: list[str] = []
    for _ in range(50):  # bounded
        batch = receiver.receive_messages(max_message_count=50, max_wait_time=idle)  # type: ignore[attr-defined]
        if not batch:
            break
        for message in batch:
            got.append(str(message.message_id))
            receiver.complete_message(message)  # type: ignore[attr-defined]
    return got


def test_a_batch_from_create_message_batch_goes_to_both_namespaces_with_one_message_id_each(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair) as client:
        with client.get_queue_sender("g-batch") as sender:
            batch = sender.create_message_batch()
            assert isinstance(batch, ServiceBusMessageBatch)
            batch.add_message(ServiceBusMessage("named", message_id="b-named"))
            for i in range(4):
                batch.add_message(ServiceBusMessage(f"anonymous {i}"))  # each gets a MessageId as it is added
            sender.send_messages(batch)
            foreign = ServiceBusMessageBatch()
            foreign.add_message(ServiceBusMessage("made elsewhere"))
            with pytest.raises(TypeError, match="create_message_batch"):
                sender.send_messages(foreign)
        in_primary, in_secondary = _peek_ids(pair[0], "g-batch"), _peek_ids(pair[1], "g-batch")
        assert len(in_primary) == 5 and "b-named" in in_primary
        assert in_primary == in_secondary
        with client.get_queue_receiver("g-batch") as receiver:
            assert sorted(_drain(receiver)) == sorted(in_primary)
    assert (_peek_ids(pair[0], "g-batch"), _peek_ids(pair[1], "g-batch")) == ([], [])


def test_passive_sends_a_batch_to_the_active_namespace_only(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair, ReplicationMode.PASSIVE) as client, client.get_queue_sender("g-batch") as sender:
        batch = sender.create_message_batch()
        batch.add_message(ServiceBusMessage("p", message_id="passive-batch"))
        sender.send_messages(batch)
    assert (_peek_ids(pair[0], "g-batch"), _peek_ids(pair[1], "g-batch")) == (["passive-batch"], [])
    with _client(pair) as client, client.get_queue_receiver("g-batch") as receiver:
        assert _drain(receiver) == ["passive-batch"]


def test_session_receivers_read_one_session_from_both_namespaces(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair) as client:
        with client.get_queue_sender("g-sessions") as sender:
            sender.send_messages([ServiceBusMessage(f"{s}{i}", message_id=f"{s}-{i}", session_id=s)
                                  for s in ("s1", "s2") for i in range(3)])
        with client.get_queue_receiver("g-sessions", session_id="s1") as receiver:
            assert receiver.session.session_id == "s1"
            receiver.session.set_state(b"checkpoint")
            assert receiver.session.get_state() == b"checkpoint"
            assert receiver.session.renew_lock() is not None
            assert _drain(receiver) == ["s1-0", "s1-1", "s1-2"]  # in order, each once
        with client.get_queue_receiver("g-sessions", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=3) as receiver:
            assert receiver.session.session_id == "s2"
            assert _drain(receiver) == ["s2-0", "s2-1", "s2-2"]
    for broker in pair:  # the second copies were completed too, and the state went to both
        for session in ("s1", "s2"):
            assert _peek_ids(broker, "g-sessions", session) == []
        with ServiceBusClient.from_connection_string(broker.connection_string) as plain:
            with plain.get_queue_receiver("g-sessions", session_id="s1") as receiver:
                assert receiver.session.get_state() == b"checkpoint"


def test_next_available_session_found_only_in_the_secondary_and_none_anywhere(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with ServiceBusClient.from_connection_string(pair[1].connection_string) as plain:
        with plain.get_queue_sender("g-next") as sender:  # as if sent while the primary was down
            sender.send_messages(ServiceBusMessage("late", message_id="only-b", session_id="sb"))
    with _client(pair) as client:
        with client.get_queue_receiver("g-next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2) as receiver:
            assert receiver.session.session_id == "sb"
            assert _drain(receiver) == ["only-b"]
        with pytest.raises(OperationTimeoutError):
            with client.get_queue_receiver("g-next", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2):
                pass


def test_subscription_session_receiver(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair) as client:
        with client.get_topic_sender("g-news") as sender:
            sender.send_messages([ServiceBusMessage(f"n{i}", message_id=f"news-{i}", session_id="topic-s")
                                  for i in range(3)])
        with client.get_subscription_receiver("g-news", "by-session", session_id="topic-s") as receiver:
            assert _drain(receiver) == ["news-0", "news-1", "news-2"]


def test_peek_shows_each_message_id_once_and_continues(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    with _client(pair) as client:
        with client.get_queue_sender("g-peek") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"peek-{i}") for i in range(5)])
        with ServiceBusClient.from_connection_string(pair[1].connection_string) as plain:
            with plain.get_queue_sender("g-peek") as sender:
                sender.send_messages(ServiceBusMessage("b only", message_id="peek-b-only"))
        with client.get_queue_receiver("g-peek") as receiver:
            first = [str(m.message_id) for m in receiver.peek_messages(max_message_count=3)]
            assert first == ["peek-0", "peek-1", "peek-2"]
            rest: list[str] = []
            for _ in range(10):  # bounded: continues where the last peek stopped, in each namespace
                more = [str(m.message_id) for m in receiver.peek_messages(max_message_count=3)]
                rest += more
                if not more and len(rest) >= 3:
                    break
            assert rest == ["peek-3", "peek-4", "peek-b-only"]
            with pytest.raises(NotImplementedOperation):
                receiver.receive_deferred_messages([1])
            assert sorted(_drain(receiver)) == sorted(first + rest)  # peeking consumed nothing


def _serve(broker: BrokerProcess, queue: str, stop: threading.Event, served: list[str]) -> threading.Thread:
    """A plain SDK service answering the requests of one queue until ``stop``."""
    def serve() -> None:
        with ServiceBusClient.from_connection_string(broker.connection_string) as service:
            with service.get_queue_receiver(queue) as requests:
                while not stop.is_set():
                    for request in requests.receive_messages(max_message_count=5, max_wait_time=1):
                        served.append(str(request.message_id))
                        with service.get_queue_sender(str(request.reply_to)) as replies:
                            replies.send_messages(ServiceBusMessage(f"re: {request}",
                                                                    correlation_id=request.message_id))
                        requests.complete_message(request)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    return server


def test_request_reply_reissues_to_the_backup_when_no_reply_comes(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    """The relay pattern on a reply timeout: the service listens only on the secondary's queue."""
    stop = threading.Event()
    served: list[str] = []
    server = _serve(pair[1], "g-req-b", stop, served)
    try:
        with _client(pair, ReplicationMode.PASSIVE) as client:
            with client.get_request_sender("g-req-a", secondary_queue_name="g-req-b",
                                           reply_queue_name="g-replies") as requester:
                requester.active = 0  # the endpoint nobody serves
                reply = requester.request(ServiceBusMessage("hello", message_id="req-1"), timeout=3)
                assert str(reply) == "re: hello"
                assert requester.active == 1  # roles switched
                reply = requester.request(ServiceBusMessage("again", message_id="req-2"), timeout=10)
                assert str(reply) == "re: again" and requester.active == 1
        stop.set()
        server.join(30)
        with _client(pair, ReplicationMode.PASSIVE) as client:  # nobody serves either: roles stay
            with client.get_request_sender("g-req-a", secondary_queue_name="g-req-b",
                                           reply_queue_name="g-replies") as requester:
                requester.active = 0
                with pytest.raises(OperationTimeoutError):
                    requester.request(ServiceBusMessage("unheard", message_id="req-3"), timeout=1)
                assert requester.active == 0
    finally:
        stop.set()
        server.join(30)
    assert served == ["req-1", "req-2"]
    assert _peek_ids(pair[0], "g-req-a") == ["req-1", "req-3"]  # the unanswered copies wait there


def test_aio_batches_sessions_and_peek(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    async def run() -> None:
        async with client_aio.ReplicatedClient(pair[0].connection_string, pair[1].connection_string,
                                               **SDK_RETRIES) as client:
            async with client.get_queue_sender("ga-batch") as sender:
                batch = await sender.create_message_batch()
                for i in range(3):
                    batch.add_message(ServiceBusMessage(f"{i}"))
                await sender.send_messages(batch)
            async with client.get_queue_sender("ga-sessions") as sender:
                await sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"as-{i}", session_id="as")
                                            for i in range(3)])
            async with client.get_queue_receiver("ga-batch") as receiver:
                peeked = [str(m.message_id) for m in await receiver.peek_messages(max_message_count=10)]
                assert len(peeked) == 3 and len(set(peeked)) == 3
                assert await receiver.peek_messages(max_message_count=10) == []
                with pytest.raises(NotImplementedOperation):
                    await receiver.receive_deferred_messages([1])
                got: list[str] = []
                while batch_in := await receiver.receive_messages(max_message_count=10, max_wait_time=2):
                    for m in batch_in:
                        got.append(str(m.message_id))
                        await receiver.complete_message(m)
                assert sorted(got) == sorted(peeked)
            async with client.get_queue_receiver("ga-sessions", session_id=NEXT_AVAILABLE_SESSION,
                                                 max_wait_time=3) as receiver:
                assert receiver.session.session_id == "as"
                await receiver.session.set_state(b"aio")
                assert await receiver.session.get_state() == b"aio"
                got = []
                while batch_in := await receiver.receive_messages(max_message_count=10, max_wait_time=2):
                    for m in batch_in:
                        got.append(str(m.message_id))
                        await receiver.complete_message(m)
                assert got == ["as-0", "as-1", "as-2"]

    asyncio.run(asyncio.wait_for(run(), 120))
    for broker in pair:
        assert _peek_ids(broker, "ga-batch") == []
        assert _peek_ids(broker, "ga-sessions", "as") == []


def test_aio_request_reply_reissues_to_the_backup_when_no_reply_comes(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    stop = threading.Event()
    served: list[str] = []
    server = _serve(pair[1], "ga-req-b", stop, served)

    async def run() -> None:
        async with client_aio.ReplicatedClient(pair[0].connection_string, pair[1].connection_string,
                                               mode=ReplicationMode.PASSIVE, **SDK_RETRIES) as client:
            async with client.get_request_sender("ga-req-a", secondary_queue_name="ga-req-b",
                                                 reply_queue_name="ga-replies") as requester:
                requester.active = 0
                reply = await requester.request(ServiceBusMessage("hello", message_id="areq-1"), timeout=3)
                assert str(reply) == "re: hello" and requester.active == 1

    try:
        asyncio.run(asyncio.wait_for(run(), 120))
    finally:
        stop.set()
        server.join(30)
    assert served == ["areq-1"]


def test_with_the_primary_unreachable_sessions_and_peek_use_the_secondary(
        pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    dead = "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    with ServiceBusClient.from_connection_string(pair[1].connection_string) as plain:
        with plain.get_queue_sender("g-down") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}", message_id=f"down-{i}", session_id="sd") for i in range(2)])
    with ReplicatedClient(dead, pair[1].connection_string, **SDK_RETRIES) as client:
        with client.get_queue_receiver("g-down", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2) as receiver:
            assert receiver.session.session_id == "sd"
            assert [str(m.message_id) for m in receiver.peek_messages(max_message_count=5)] == ["down-0", "down-1"]
            assert _drain(receiver) == ["down-0", "down-1"]
