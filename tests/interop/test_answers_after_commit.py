"""What must not change for speed: every answer the broker gives waits for the commit that makes it true.

The broker runs as users start it (``sodalite serve`` with its defaults: SQLite, ``--sync FULL``);
the official SDK does one thing at a time, and strace records the broker's fsyncs and socket writes
(``syscall_order.py``). For each operation, the fsync of its commit comes before the socket write that
answers it:

- a send's accepted disposition comes after the message is on disk;
- a settlement's outcome (complete) after its commit;
- a renew-lock's reply after the new locked-until is on disk;
- a PeekLock delivery after its lock and delivery count are on disk (never counted only in memory);
- a ReceiveAndDelete delivery after its delete is on disk.

And duplicate-detection ids are stored in the append's own transaction: a send acknowledged just
before ``kill -9`` is still recognised as a duplicate after the restart.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import BrokerProcess, write_config
from syscall_order import DISPOSITION, TRANSFER, SyscallTrace, committed_before_answer, hex_escaped

pytestmark = [pytest.mark.interop,
              pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see fsyncs and writes")]

STEPS = 4
QUEUES = [{"Name": "sends"}, {"Name": "completes"}, {"Name": "renews"}, {"Name": "peeklock"}, {"Name": "rad"},
          {"Name": "dedup", "Properties": {"RequiresDuplicateDetection": True,
                                           "DuplicateDetectionHistoryTimeWindow": "PT10M"}}]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, SyscallTrace]]:
    base = tmp_path_factory.mktemp("answers-after-commit")
    broker = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    assert broker.proc is not None
    trace = SyscallTrace(broker.proc.pid, base / "strace.txt")
    try:
        yield broker, trace
    finally:
        trace.close()
        broker.stop()


def _body(queue: str, i: int) -> bytes:
    return f"{queue}-marker-{i:04d}-".encode() + b"x" * 1000


def _fill(broker: BrokerProcess, queue: str) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(_body(queue, i)) for i in range(STEPS)])


def _check(trace: SyscallTrace, mark: int, what: str, *answer: str) -> None:
    ok, described = committed_before_answer(trace.since(mark), *answer)
    assert ok, f"{what}: answered before its commit reached the disk ({described})"


def test_a_send_is_acknowledged_after_its_fsync(traced: tuple[BrokerProcess, SyscallTrace]) -> None:
    broker, trace = traced
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender("sends") as sender:
        sender.send_messages(ServiceBusMessage(b"warm-up"))
        for i in range(STEPS):
            mark = trace.mark()
            sender.send_messages(ServiceBusMessage(_body("sends", i)))
            _check(trace, mark, f"send {i}", DISPOSITION)


def test_a_complete_is_answered_after_its_fsync(traced: tuple[BrokerProcess, SyscallTrace]) -> None:
    broker, trace = traced
    _fill(broker, "completes")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_receiver("completes") as receiver:
        received = []
        while len(received) < STEPS:
            batch = receiver.receive_messages(max_message_count=STEPS - len(received), max_wait_time=10)
            assert batch, "the messages sent were not delivered"
            received += batch
        for message in received:
            mark = trace.mark()
            receiver.complete_message(message)
            _check(trace, mark, f"complete of {message.sequence_number}", DISPOSITION)


def test_a_renew_lock_is_answered_after_its_fsync(traced: tuple[BrokerProcess, SyscallTrace]) -> None:
    broker, trace = traced
    _fill(broker, "renews")
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_receiver("renews") as receiver:
        [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        for i in range(STEPS):
            mark = trace.mark()
            receiver.renew_message_lock(message)
            _check(trace, mark, f"renew-lock {i}", TRANSFER, hex_escaped(b"expirations"))
        receiver.complete_message(message)


@pytest.mark.parametrize("mode", [ServiceBusReceiveMode.PEEK_LOCK, ServiceBusReceiveMode.RECEIVE_AND_DELETE],
                         ids=["peeklock", "rad"])
def test_a_delivery_is_written_after_the_fsync_of_its_lock_or_delete(
        traced: tuple[BrokerProcess, SyscallTrace], mode: ServiceBusReceiveMode) -> None:
    broker, trace = traced
    queue = "peeklock" if mode is ServiceBusReceiveMode.PEEK_LOCK else "rad"
    _fill(broker, queue)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_receiver(queue, receive_mode=mode) as receiver:
        for i in range(STEPS):
            mark = trace.mark()
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert bytes(b"".join(message.body)) == _body(queue, i)
            _check(trace, mark, f"{queue} delivery {i}", TRANSFER, hex_escaped(f"{queue}-marker-{i:04d}-".encode()))


def test_duplicate_ids_are_stored_with_the_append_they_came_with(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES)).start()
    try:
        with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_queue_sender("dedup") as sender:
            for i in range(20):
                sender.send_messages(ServiceBusMessage(f"first-{i}", message_id=f"id-{i}"))
            broker.kill()  # right after the last acknowledgement
        broker.start()
        with ServiceBusClient.from_connection_string(broker.connection_string) as client:
            with client.get_queue_sender("dedup") as sender:
                for i in range(20):
                    sender.send_messages(ServiceBusMessage(f"again-{i}", message_id=f"id-{i}"))
            bodies = []
            with client.get_queue_receiver("dedup", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as r:
                while batch := r.receive_messages(max_message_count=50, max_wait_time=3):
                    bodies += [str(m) for m in batch]
    finally:
        broker.stop()
    assert sorted(bodies) == sorted(f"first-{i}" for i in range(20))
