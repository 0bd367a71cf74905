"""`sodalite backup` under load and `sodalite restore` into a new data directory.

A broker on three SQLite stores (``three_stores``) serves while the backup is taken: messages move
back and forth between two queues in different stores (the keyed cross-store move), a topic fans
sends out into a queue in another store (its subscription forwards there), and a third queue is
sent to and received from all the time. The backup is restored into a new directory and a broker
started on it (as users start it) must hold every message that was acknowledged and not settled
before the backup began exactly once, wherever the moves had taken it, and number new sends above
every number the source broker gave, also after the backup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess
from test_console_resubmit_kill9 import call
from three_stores import start

from sodalite.server.partitioned_actor import partition_index

pytestmark = pytest.mark.interop

PARTITION_SHIFT = 48
LEFT, RIGHT = "bk-a", "bk-x"  # in stores 1 and 0: a move between them is a cross-store move
FANNED = "bk-fan"  # store 2: the topic's forwarding subscription stores its copies there
CHURN = "bk-churn"
PARTITIONED = "bk-p"
QUEUES = [{"Name": LEFT, "Properties": {}}, {"Name": RIGHT, "Properties": {}}, {"Name": FANNED, "Properties": {}},
          {"Name": CHURN, "Properties": {}}, {"Name": PARTITIONED, "Properties": {"EnablePartitioning": True}}]
TOPICS = [{"Name": "bk-topic", "Properties": {}, "Subscriptions": [
    {"Name": "keep", "Properties": {}}, {"Name": "fwd", "Properties": {"ForwardTo": FANNED}}]}]
KEEP = "bk-topic/subscriptions/keep"
EVERY_QUEUE = [LEFT, RIGHT, FANNED, CHURN, PARTITIONED, KEEP]
PRE = 150  # messages of each kind acknowledged before the backup


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    assert len({partition_index(q, 3) for q in (LEFT, RIGHT, FANNED)}) == 3  # three stores
    broker = start(tmp_path_factory.mktemp("backup-source"), QUEUES, TOPICS)
    yield broker
    broker.stop()


def sodalite(*args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "sodalite.cli.main", *args], capture_output=True, text=True,
                            timeout=120, env={**os.environ})
    assert result.returncode == expect, (result.stdout, result.stderr)
    return result


def messages(broker: BrokerProcess, path: str) -> list[dict[str, Any]]:
    """Every message of ``path``'s active sub-queue (any state but dead-lettered), through the JSON API."""
    found: list[dict[str, Any]] = []
    for sub_queue in ("active", "deferred", "scheduled"):
        start_at = 0
        while True:
            page = call(broker, "GET", f"/entities/{path}/$messages?subQueue={sub_queue}&count=100"
                                       f"&fromSequenceNumber={start_at}")
            found += page["messages"]
            if page["nextSequenceNumber"] is None:
                break
            start_at = page["nextSequenceNumber"]
    return found


def highest_numbers(found: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, int], int]:
    """Per (entity, partition): the highest sequence number seen."""
    top: dict[tuple[str, int], int] = {}
    for path, listed in found.items():
        for m in listed:
            key = (path, m["sequenceNumber"] >> PARTITION_SHIFT)
            top[key] = max(top.get(key, 0), m["sequenceNumber"])
    return top


class Load:
    """Moves between LEFT and RIGHT, topic sends, and send-and-complete on CHURN, until stopped."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.stop = threading.Event()
        self.moves = 0
        self.sends = 0
        self.completed = 0
        self.churn_numbers: list[int] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guarded, args=(fn,), daemon=True)
                        for fn in (self._move, self._send, self._churn)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _guarded(self, fn: Any) -> None:
        try:
            fn()
        except BaseException as error:
            self.errors.append(error)

    def _move(self) -> None:
        source, target = LEFT, RIGHT
        while not self.stop.is_set():
            outcome = call(self.broker, "POST", f"/entities/{source}/$move",
                           {"subQueue": "active", "all": True, "target": target})
            self.moves += outcome["moved"]
            source, target = target, source

    def _send(self) -> None:
        with ServiceBusClient.from_connection_string(self.broker.connection_string) as client, \
                client.get_topic_sender("bk-topic") as topic, client.get_queue_sender(PARTITIONED) as partitioned:
            i = 0
            while not self.stop.is_set():
                topic.send_messages(ServiceBusMessage(f"during-{i}", message_id=f"during-t-{i}"))
                partitioned.send_messages(ServiceBusMessage(f"during-{i}", message_id=f"during-p-{i}"))
                self.sends += 2
                i += 1

    def _churn(self) -> None:
        with ServiceBusClient.from_connection_string(self.broker.connection_string) as client, \
                client.get_queue_sender(CHURN) as sender, \
                client.get_queue_receiver(CHURN, max_wait_time=1, prefetch_count=0) as receiver:
            i = 0
            while not self.stop.is_set():
                sender.send_messages([ServiceBusMessage(f"churn-{i}-{j}", message_id=f"churn-{i}-{j}")
                                      for j in range(5)])
                i += 1
                for message in receiver.receive_messages(max_message_count=5, max_wait_time=1):
                    self.churn_numbers.append(message.sequence_number)
                    receiver.complete_message(message)
                    self.completed += 1


def test_a_backup_under_load_restores_every_unsettled_message_once(source: BrokerProcess, tmp_path: Path) -> None:
    with ServiceBusClient.from_connection_string(source.connection_string) as client:
        with client.get_queue_sender(LEFT) as sender:
            sender.send_messages([ServiceBusMessage(f"pre-{i}", message_id=f"pre-{i}") for i in range(PRE)])
        with client.get_topic_sender("bk-topic") as sender:
            sender.send_messages([ServiceBusMessage(f"pre-t-{i}", message_id=f"pre-t-{i}") for i in range(PRE)])
        with client.get_queue_sender(PARTITIONED) as sender:
            for i in range(PRE):
                sender.send_messages(ServiceBusMessage(f"pre-p-{i}", message_id=f"pre-p-{i}", partition_key=f"k{i}"))
    destination = tmp_path / "backup"
    with Load(source) as load:
        time.sleep(2)  # the load is under way: moves, fan-out, settlements
        moves_before = load.moves
        began = time.monotonic()
        done = sodalite("backup", str(destination), "--data-dir", str(source.data_dir), "--http",
                        "--admin-port", str(source.http_port))
        seconds = time.monotonic() - began
        time.sleep(1)  # and after it: numbers the restore must step over
        moves_after, sends, completed = load.moves, load.sends, load.completed
    assert not load.errors, load.errors
    assert moves_after > moves_before > 0 and sends > 0 and completed > 0
    print(f"backup under load: {seconds:.2f} s; {moves_after} moved, {sends} sent, {completed} completed "
          f"while it ran; {done.stdout.strip()}")
    assert "backed up 3 store(s)" in done.stdout
    print(*(line.strip() for line in source.output if "backup of 3 stores" in line))  # how long commits waited
    manifest = json.loads((destination / "sodalite-backup.json").read_text())
    assert sorted(s["name"] for s in manifest["stores"]) == ["default", "disk1", "disk2"]
    assert (destination / "Config.json").exists()

    # Numbers the source gave, also after the backup (the churn queue's were completed).
    seen = {path: messages(source, path) for path in EVERY_QUEUE}
    top = highest_numbers(seen)
    top[(CHURN, 0)] = max([top.get((CHURN, 0), 0), *load.churn_numbers])

    # The source's data directory is in use: restore refuses it.
    refused = sodalite("restore", str(destination), "--data-dir", str(source.data_dir), "--force", expect=1)
    assert "in use" in refused.stderr, refused.stderr

    restored_dir = tmp_path / "restored"
    sodalite("restore", str(destination), "--data-dir", str(restored_dir))
    restored = BrokerProcess(restored_dir, restored_dir / "Config.json",
                             extra_args=[]).start()
    try:
        found = {path: messages(restored, path) for path in EVERY_QUEUE}
        # No message twice: in each queue, and across the two the moves shuttle between.
        for paths in ([LEFT, RIGHT], [FANNED], [CHURN], [PARTITIONED], [KEEP]):
            ids = Counter(m["messageId"] for path in paths for m in found[path])
            duplicates = {i: n for i, n in ids.items() if n > 1}
            assert not duplicates, (paths, duplicates)
        moved = [m["messageId"] for path in (LEFT, RIGHT) for m in found[path]]
        assert sorted(moved) == sorted(f"pre-{i}" for i in range(PRE))  # each once, wherever the moves took it
        for path, prefix in ((KEEP, "pre-t-"), (FANNED, "pre-t-"), (PARTITIONED, "pre-p-")):
            assert {f"{prefix}{i}" for i in range(PRE)} <= {m["messageId"] for m in found[path]}, path
        # Every message of a topic send is in both places or in neither (the fan-out across stores).
        assert ({m["messageId"] for m in found[KEEP] if m["messageId"].startswith("during-t-")}
                == {m["messageId"] for m in found[FANNED] if m["messageId"].startswith("during-t-")})

        # New sends are numbered above everything the source gave, in every queue and partition.
        with ServiceBusClient.from_connection_string(restored.connection_string) as client:
            for path in (LEFT, RIGHT, FANNED, CHURN):
                with client.get_queue_sender(path) as sender:
                    sender.send_messages(ServiceBusMessage("after", message_id=f"after-{path}"))
            with client.get_queue_sender(PARTITIONED) as sender:
                for i in range(32):
                    sender.send_messages(ServiceBusMessage("after", message_id=f"after-p-{i}", partition_key=f"k{i}"))
        after = {path: [m for m in messages(restored, path) if m["messageId"].startswith("after-")]
                 for path in (LEFT, RIGHT, FANNED, CHURN, PARTITIONED)}
        assert all(after.values())
        for path, listed in after.items():
            for m in listed:
                number = m["sequenceNumber"]
                assert number > top.get((path, number >> PARTITION_SHIFT), 0), (path, number, top)
    finally:
        restored.stop()


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path) -> None:
    (tmp_path / "not-a-backup").mkdir()
    refused = sodalite("restore", str(tmp_path / "not-a-backup"), "--data-dir", str(tmp_path / "data"), expect=1)
    assert "not a complete backup" in refused.stderr
    assert "Traceback" not in refused.stderr
