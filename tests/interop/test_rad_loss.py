"""ReceiveAndDelete is at most once, and a message whose transfer was never written is not lost.

A ReceiveAndDelete message is deleted before its transfer; if the receiver's link, session or
connection goes before the transfer is written, the broker puts it back in place. The SDKs drop what
they prefetched when a receiver closes, so these tests count on the broker's side, against the
delivery trace it writes under the test-only ``--delivery-trace`` option: every message sent is
either still stored or was written to a receiver's socket (0 unaccounted), and a client never
receives more than was written. The Go SDK's own scenario (a receiver at its default credit closing
while the broker streams) runs 20 times; the Python SDK and a raw AMQP receiver detaching with
credit outstanding once each.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sdk_builds
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

from sodalite.amqp import events as ev
from sodalite.amqp.codec import encode_value
from sodalite.amqp.link import RECEIVER, SENDER
from sodalite.amqp.performatives import Source, Target
from sodalite.amqp.types import Array, Described, Long, Symbol, UInt, ULong
from sodalite.model.sas import generate_token

pytestmark = pytest.mark.interop

GO = shutil.which("go")
GO_RUNS = 20  # alternately: the receiver closes, and the whole connection closes, while the broker streams
GO_MESSAGES = 1100  # more than the broker's window of ready messages holds (1 MiB of these): a read is in flight
PLAIN = ("py-rad", "raw-rad", "mgmt-rad", "raw-peek-lock", "spark-restore", *(f"go-rad-{i}" for i in range(GO_RUNS)))
QUEUES = [{"Name": "sess-rad", "Properties": {"RequiresSession": True}},
          *({"Name": name, "Properties": {}} for name in PLAIN)]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    base = tmp_path_factory.mktemp("rad-loss")
    trace = base / "trace.jsonl"
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES),
                            extra_args=["--delivery-trace", str(trace)]).start()
    try:
        yield process, trace
    finally:
        for client in _clients.values():
            client.close()
        _clients.clear()
        process.stop()


def _trace(path: Path, entity: str) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [entry for entry in lines if entry["entity"] == entity]


def _written(entries: list[dict[str, object]]) -> tuple[int, int]:
    """(ReceiveAndDelete transfers written, of them written after their link's detach was processed)."""
    detached: set[object] = set()
    written = after = 0
    for entry in entries:
        if entry["event"] == "detached":
            detached.add(entry["link"])
        elif entry["event"] == "written":
            written += 1
            after += entry["link"] in detached
    return written, after


_clients: dict[str, ServiceBusClient] = {}  # one SDK connection per broker for the counts (module's own)


def _stored(broker: BrokerProcess, queue: str) -> int:
    """How many messages ``queue`` holds, by peeking them all (the store's truth, not a counter)."""
    client = _clients.get(broker.connection_string)
    if client is None:
        client = _clients[broker.connection_string] = ServiceBusClient.from_connection_string(broker.connection_string)
    with client.get_queue_receiver(queue) as receiver:
        count, next_number = 0, 0
        while True:
            page = receiver.peek_messages(max_message_count=250, sequence_number=next_number)
            if not page:
                return count
            count += len(page)
            next_number = page[-1].sequence_number + 1


def _accounted(traced: tuple[BrokerProcess, Path], queue: str, sent: int, received: int) -> tuple[int, int, int]:
    """Wait until the broker's books settle, then check them: (written, written after detach, stored)."""
    broker, path = traced
    deadline = time.monotonic() + 30
    while True:
        written, after = _written(_trace(path, queue))
        stored = _stored(broker, queue)
        if written + stored == sent or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert written + stored == sent, f"unaccounted: {sent - written - stored} (sent {sent}, written {written}, " \
                                     f"stored {stored}, received {received})"
    assert received <= written
    return written, after, stored


@pytest.mark.skipif(GO is None, reason="go is not installed: the Go SDK tests need Go 1.25 or later")
def test_go_receive_and_delete_receiver_closing_while_streaming_loses_nothing(
        traced: tuple[BrokerProcess, Path]) -> None:
    sdk_builds.ensure_built(sdk_builds.GO)
    broker, _ = traced
    for run in range(GO_RUNS):
        scenario, queue = ("rad-close", "rad-close-connection")[run % 2], f"go-rad-{run}"
        proc = subprocess.run([str(sdk_builds.GO.path(sdk_builds.GO.outputs[0])), broker.connection_string,
                               scenario, queue, str(GO_MESSAGES)], capture_output=True, text=True, timeout=120)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0 and f"PASS {scenario}" in proc.stdout.splitlines(), output[-4000:]
        received = int(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("RECEIVED ")))
        _, after, stored = _accounted(traced, queue, GO_MESSAGES, received)
        if scenario == "rad-close":
            # The receiver drained its credit before its detach: it holds every transfer written before
            # the detach was processed, so sent = received + still stored + written after the detach.
            assert received + stored + after == GO_MESSAGES, \
                f"run {run}: received {received}, stored {stored}, written after the detach {after}"


def test_python_receive_and_delete_receiver_closing_while_streaming_loses_nothing(
        traced: tuple[BrokerProcess, Path]) -> None:
    broker, _ = traced
    sent = 3000
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("py-rad") as sender:
            for _ in range(0, sent, 50):
                sender.send_messages([ServiceBusMessage(b"x" * 4096) for _ in range(50)])
        received = 0
        for _ in range(3):  # each receiver prefetches more than arrives before it closes, after its first message
            with client.get_queue_receiver("py-rad", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE,
                                           prefetch_count=1000) as receiver:
                received += len(receiver.receive_messages(max_message_count=1, max_wait_time=5))
    written, _, stored = _accounted(traced, "py-rad", sent, received)
    assert 0 < received <= written and stored > 0, (received, written, stored)


def test_raw_receive_and_delete_link_detached_with_credit_outstanding_loses_nothing(
        traced: tuple[BrokerProcess, Path]) -> None:
    broker, _ = traced
    # A small session window: the broker can write only this many transfers until the client reads
    # them, so the rest wait in the broker's session when the link detaches.
    client = RawClient(broker.port, session_window=16)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    address = f"amqps://localhost:{broker.port}/raw-rad"
    sent = 500
    try:
        sender = client.attach(address, SENDER)
        for i in range(sent):
            sender.send_transfer(message(b"m%d" % i), b"%d" % i, settled=True)
        client.flush()
        deadline = time.monotonic() + 30
        while _stored(broker, "raw-rad") < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        # Credit for everything, and a detach once the broker has used the session window: whatever it had
        # claimed and not written (queued in its session, or not handed over yet) must be put back.
        receiver = client.attach(address, RECEIVER, snd_settle_mode=1)
        receiver.issue_credit(sent)
        client.flush()
        # Nothing read meanwhile (the window stays closed) until the broker has begun to stream (a loaded
        # machine may take more than a second), and a moment more for its claims to run ahead of it.
        _, path = traced
        deadline = time.monotonic() + 30
        while not _written(_trace(path, "raw-rad"))[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        receiver.detach(None)
        client.flush()
        client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver, timeout=30)
        received = 0  # not counted here: what the raw client got before its detach is in the trace
    finally:
        client.close()
    written, _, stored = _accounted(traced, "raw-rad", sent, received)
    assert stored > 0 and written > 0, (written, stored)  # the detach came while the broker streamed


def test_management_receive_and_delete_by_number_whose_response_is_never_written_loses_nothing(
        traced: tuple[BrokerProcess, Path]) -> None:
    """receive-by-sequence-number in ReceiveAndDelete mode deletes the deferred message before its
    response is written; when the response link is gone first, the message stays deferred."""
    broker, _ = traced
    with ServiceBusClient.from_connection_string(broker.connection_string) as sdk:
        with sdk.get_queue_sender("mgmt-rad") as sender:
            sender.send_messages(ServiceBusMessage(b"deferred"))
        with sdk.get_queue_receiver("mgmt-rad") as receiver:
            [taken] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            receiver.defer_message(taken)
            number = taken.sequence_number
            assert number is not None
            [before] = receiver.peek_messages(max_message_count=1, sequence_number=number)
    client = RawClient(broker.port)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    node = f"amqps://localhost:{broker.port}/mgmt-rad/$management"
    try:
        response = client.attach(node, RECEIVER)
        response.issue_credit(10)
        request = client.attach(node, SENDER)
        out = bytearray()
        encode_value(Described(ULong(0x73), [uuid.uuid4(), None, None, None, node]), out)
        encode_value(Described(ULong(0x74), {"operation": "com.microsoft:receive-by-sequence-number"}), out)
        encode_value(Described(ULong(0x77), {"sequence-numbers": Array("long", (Long(number),)),
                                             "receiver-settle-mode": UInt(0)}), out)
        request.send_transfer(bytes(out), b"r1", settled=True)
        response.detach(None)  # in the same write as the request: its response can never be written
        client.flush()
        client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is response)
    finally:
        client.close()
    with ServiceBusClient.from_connection_string(broker.connection_string) as sdk, \
            sdk.get_queue_receiver("mgmt-rad") as receiver:
        deadline = time.monotonic() + 30
        while not receiver.peek_messages(max_message_count=10, sequence_number=number) and time.monotonic() < deadline:
            time.sleep(0.2)
        [back] = receiver.receive_deferred_messages([number])
        assert (back.sequence_number, b"".join(back.body)) == (number, b"deferred")
        assert back.delivery_count == before.delivery_count  # the response never written was no delivery
        receiver.complete_message(back)


def test_peek_lock_deliveries_never_written_are_released_with_their_delivery_count(
        traced: tuple[BrokerProcess, Path]) -> None:
    """A PeekLock receiver detaching while transfers wait in the broker's session: those were never
    delivered, so they are free again at once and their delivery count is not raised (the ones written
    stay locked by their receiver until their lock lapses, as in Service Bus)."""
    broker, _ = traced
    sent = 100
    client = RawClient(broker.port, session_window=16)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    address = f"amqps://localhost:{broker.port}/raw-peek-lock"
    try:
        sender = client.attach(address, SENDER)
        for i in range(sent):
            sender.send_transfer(message(b"p%d" % i), b"%d" % i, settled=True)
        client.flush()
        deadline = time.monotonic() + 30
        while _stored(broker, "raw-peek-lock") < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        receiver = client.attach(address, RECEIVER)
        receiver.issue_credit(sent)
        client.flush()
        time.sleep(1.0)  # the session window (16) is used up; the rest wait in the broker's session
        receiver.detach(None)
        client.flush()
        client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver, timeout=30)
    finally:
        client.close()
    with ServiceBusClient.from_connection_string(broker.connection_string) as sdk, \
            sdk.get_queue_receiver("raw-peek-lock") as again:
        got: list[int] = []
        counts: set[int] = set()
        deadline = time.monotonic() + 20
        while len(got) < sent - 16 and time.monotonic() < deadline:  # (the $cbs reply took a window slot too)
            batch = again.receive_messages(max_message_count=sent, max_wait_time=2)
            got += [m.sequence_number or 0 for m in batch]
            counts |= {m.delivery_count or 0 for m in batch}
        # those never written come back at once (not after the 60 s lock), never counted as delivered
        assert len(got) >= sent - 16 and sorted(got) == list(range(sent - len(got) + 1, sent + 1)), got
        assert counts == {0}, counts


def test_spark_consume_complete_removes_only_the_numbers_its_batch_read(traced: tuple[BrokerProcess, Path]) -> None:
    """A ReceiveAndDelete message put back in place lands below the Spark reader's position: the
    reader's commit removes the numbers its batch read, not everything below its end, so the message
    put back stays for the receivers that read the queue. (The driver's side of the data source,
    called as Spark calls it; the rows are read as an executor reads them.)"""
    from sodalite.spark.options import source_options
    from sodalite.spark.source import StreamReader, _read

    broker, _ = traced
    queue = "spark-restore"
    with ServiceBusClient.from_connection_string(broker.connection_string) as sdk, sdk.get_queue_sender(queue) as s:
        s.send_messages([ServiceBusMessage(f"s{i}", message_id=f"s{i}") for i in range(10)])
    # A ReceiveAndDelete receiver takes 1, 2 and 3; its session window (2) lets only some be written,
    # so the others wait in the broker's session, deleted, when the reader plans its batch.
    client = RawClient(broker.port, session_window=2)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert client.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    try:
        receiver = client.attach(f"amqps://localhost:{broker.port}/{queue}", RECEIVER, snd_settle_mode=1)
        receiver.issue_credit(3)
        client.flush()
        deadline = time.monotonic() + 30
        while _stored(broker, queue) > 7 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _stored(broker, queue) == 7
        reader = StreamReader(source_options({"connectionstring": broker.connection_string, "entity": queue,
                                              "consume": "complete"}))
        try:
            start = reader.initialOffset()
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
            [part] = reader.partitions(start, end)
            read = [r for batch in _read(reader.broker, reader.options, ("sequenceNumber", "messageId"), part)
                    for r in batch.to_pylist()]
            assert sorted(r["messageId"] for r in read) == [f"s{i}" for i in range(3, 10)]
            receiver.detach(None)  # those never written come back in place, below the reader's end
            client.flush()
            client.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver)
            deadline = time.monotonic() + 30
            restored = [e["sequence_number"] for e in _trace(traced[1], queue) if e["event"] == "restored"]
            while _stored(broker, queue) < 7 + len(restored) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert restored and _stored(broker, queue) == 7 + len(restored)
            reader.commit(end)  # the batch is done: its messages go, and only they
            reader.latestOffset(end, reader.getDefaultReadLimit())
        finally:
            reader.stop()
    finally:
        client.close()
    with ServiceBusClient.from_connection_string(broker.connection_string) as sdk, sdk.get_queue_receiver(queue) as r:
        left = r.peek_messages(max_message_count=20, sequence_number=0)
        assert [m.sequence_number for m in left] == sorted(restored)  # only what the batch read went


def test_session_receive_and_delete_link_detached_while_streaming_loses_nothing_and_keeps_order(
        traced: tuple[BrokerProcess, Path]) -> None:
    """A ReceiveAndDelete session receiver detaching while the broker streams its session (the rest
    waiting behind the client's session window): what was written is a prefix of the session, and
    everything else is still stored, in order (put back under its own numbers)."""
    broker, path = traced
    sent = 100
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender("sess-rad") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}", session_id="s") for i in range(sent)])
    raw = RawClient(broker.port, session_window=16)
    audience = f"sb://localhost:{broker.port}/"
    expiry = int(time.time()) + 300
    assert raw.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
    address = f"amqps://localhost:{broker.port}/sess-rad"
    try:
        receiver = raw.session.attach("sess-rad-receiver", RECEIVER,
                                      Source(address, filter={Symbol("com.microsoft:session-filter"): "s"}),
                                      Target(address), snd_settle_mode=1)
        raw.wait(lambda e: isinstance(e, ev.LinkAttached) and e.link is receiver)
        receiver.issue_credit(sent)
        raw.flush()
        time.sleep(1.0)  # nothing read: the session window closes after a few transfers
        receiver.detach(None)
        raw.flush()
        raw.wait(lambda e: isinstance(e, ev.LinkDetached) and e.link is receiver, timeout=30)
    finally:
        raw.close()
    written = sorted(int(str(e["sequence_number"])) for e in _trace(path, "sess-rad") if e["event"] == "written")
    deadline = time.monotonic() + 30
    while True:
        with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_queue_receiver("sess-rad", session_id="s") as peeker:
            stored = [m.sequence_number or 0 for m in peeker.peek_messages(max_message_count=sent, sequence_number=0)]
        if len(written) + len(stored) == sent or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert written and stored, (len(written), len(stored))
    assert written == list(range(1, len(written) + 1))  # in session order
    assert stored == list(range(len(written) + 1, sent + 1))  # the rest, in place: 0 unaccounted
