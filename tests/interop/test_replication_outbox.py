"""Outbox (issue 15 item 8): accepts while no namespace is reachable, forwards in order, survives kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config
from replication_ports import with_stable_ports

from sodalite.client import Outbox, ReplicatedClient, ReplicationMode

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

QUEUES = [{"Name": name, "Properties": {}}
          for name in ("ordered", "killed", "killed-forwarding", "refused-after", "replicated")]
SDK_RETRIES = {"retry_total": 1, "retry_backoff_factor": 0.1, "retry_backoff_max": 0.5}


def _broker(base: Path) -> BrokerProcess:
    return with_stable_ports(BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)))


@pytest.fixture(scope="module")
def outbox_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = _broker(tmp_path_factory.mktemp("outbox-broker"))
    try:
        yield broker.start()
    finally:
        broker.stop()


def _up(broker: BrokerProcess) -> None:
    if broker.proc is None or broker.proc.poll() is not None:
        broker.start()


def _receive_all(broker: BrokerProcess, queue: str) -> list[ServiceBusMessage]:
    got = []
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_receiver(queue) as receiver:
            while batch := receiver.receive_messages(max_message_count=100, max_wait_time=3):
                for message in batch:
                    got.append(message)
                    receiver.complete_message(message)
    return got  # type: ignore[return-value]


def test_outbox_accepts_while_the_namespace_is_down_and_forwards_in_order_when_it_is_back(
        outbox_broker: BrokerProcess, tmp_path: Path) -> None:
    outbox_broker.kill()
    try:
        with ServiceBusClient.from_connection_string(outbox_broker.connection_string, **SDK_RETRIES) as client, \
                Outbox(tmp_path / "outbox.sqlite", client) as outbox:
            with outbox.get_queue_sender("ordered") as sender:
                for i in range(30):
                    sender.send_messages(ServiceBusMessage(f"body-{i}", message_id=f"ordered-{i}",
                                                           application_properties={"n": i}))
            assert outbox.forward() == 0  # nobody to forward to: nothing lost, nothing refused
            assert len(outbox) == 30 and outbox.failed_messages() == []
            _up(outbox_broker)
            assert outbox.forward() == 30
            assert len(outbox) == 0
    finally:
        _up(outbox_broker)
    got = _receive_all(outbox_broker, "ordered")
    assert [m.message_id for m in got] == [f"ordered-{i}" for i in range(30)]
    assert [m.application_properties for m in got] == [{b"n": i} for i in range(30)]
    assert [str(m) for m in got] == [f"body-{i}" for i in range(30)]


def test_a_refused_message_is_set_aside_and_does_not_block_the_rest(outbox_broker: BrokerProcess,
                                                                    tmp_path: Path) -> None:
    with ServiceBusClient.from_connection_string(outbox_broker.connection_string, **SDK_RETRIES) as client, \
            Outbox(tmp_path / "outbox.sqlite", client) as outbox:
        outbox.send_messages("queue", "refused-after", ServiceBusMessage("first", message_id="r-1"))
        outbox.send_messages("queue", "no-such-queue", ServiceBusMessage("lost?", message_id="r-2"))
        outbox.send_messages("queue", "refused-after", ServiceBusMessage("third", message_id="r-3"))
        assert outbox.forward() == 3
        [failed] = outbox.failed_messages()
        assert failed.entity == "no-such-queue" and failed.message is not None
        assert failed.message.message_id == "r-2" and "MessagingEntityNotFound" in failed.error
        assert "'no-such-queue' could not be found" in failed.error
    assert [m.message_id for m in _receive_all(outbox_broker, "refused-after")] == ["r-1", "r-3"]


def test_outbox_forwards_through_a_replicated_client(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    brokers = [_broker(tmp_path / "a"), _broker(tmp_path / "b")]
    try:
        for broker in brokers:
            broker.start()
        with ReplicatedClient(brokers[0].connection_string, brokers[1].connection_string,
                              mode=ReplicationMode.ACTIVE, **SDK_RETRIES) as client, \
                Outbox(tmp_path / "outbox.sqlite", client, retry_interval=timedelta(milliseconds=200)) as outbox:
            outbox.start()
            outbox.send_messages("queue", "replicated", [ServiceBusMessage(f"{i}", message_id=f"rep-{i}")
                                                         for i in range(10)])
            deadline = time.monotonic() + 60
            while len(outbox) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(outbox) == 0
        for broker in brokers:
            assert [m.message_id for m in _receive_all(broker, "replicated")] == [f"rep-{i}" for i in range(10)]
    finally:
        for broker in brokers:
            broker.stop()


SENDER = textwrap.dedent("""
    import sys
    from datetime import timedelta
    from azure.servicebus import ServiceBusClient, ServiceBusMessage
    from sodalite.client import Outbox

    path, connection_string, count, queue = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    client = ServiceBusClient.from_connection_string(connection_string, retry_total=1, retry_backoff_factor=0.1)
    outbox = Outbox(path, client, retry_interval=timedelta(milliseconds=100))
    outbox.start()  # forwarding runs in the background while the broker dies and the process is killed
    sender = outbox.get_queue_sender(queue)
    for i in range(count):
        sender.send_messages(ServiceBusMessage(f"body-{i}", message_id=f"killed-{i}"))
        print(f"acked killed-{i}", flush=True)
    print("all acked", flush=True)
    import time
    time.sleep(600)
""")


@pytest.mark.parametrize("broker_dies_at", [200, None], ids=["broker-down-at-the-kill", "forwarding-at-the-kill"])
def test_nothing_the_outbox_acknowledged_is_lost_across_kill_9(outbox_broker: BrokerProcess, tmp_path: Path,
                                                               broker_dies_at: int | None) -> None:
    path = tmp_path / "outbox.sqlite"
    queue = "killed" if broker_dies_at is not None else "killed-forwarding"
    script = tmp_path / "sender.py"
    script.write_text(SENDER, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(script), str(path), outbox_broker.connection_string, "100000",
                                queue], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    acked: list[str] = []
    assert process.stdout is not None
    try:
        deadline = time.monotonic() + 120
        while len(acked) < 600 and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, "the sending process ended early"
            acked.append(line.split()[1])
            if len(acked) == broker_dies_at:
                outbox_broker.kill()  # forwarding now fails; the outbox keeps accepting
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        # Anything it printed before dying was acknowledged too.
        acked += [line.split()[1] for line in process.stdout.read().splitlines() if line.startswith("acked")]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        _up(outbox_broker)
    assert len(acked) >= 600
    with ServiceBusClient.from_connection_string(outbox_broker.connection_string, **SDK_RETRIES) as client, \
            Outbox(path, client) as outbox:
        outbox.forward()
        assert len(outbox) == 0 and outbox.failed_messages() == []
    received = [str(m.message_id) for m in _receive_all(outbox_broker, queue)]
    first_seen = list(dict.fromkeys(received))
    assert first_seen[:len(acked)] == acked  # every acknowledged message, in acceptance order
    # At-least-once: a message forwarded just before a kill may come twice, never more, with its MessageId.
    assert len(received) - len(first_seen) <= 100
    print(f"kill -9 drill: {len(acked)} acknowledged, {len(first_seen)} forwarded, "
          f"{len(received) - len(first_seen)} sent twice")
