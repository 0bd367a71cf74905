"""Drill (issue 13.12): a full disk, for real, and the SQLite WAL kept small.

The data directory of this module's broker lives on a 48 MB tmpfs mounted for the test (root is
needed; the test is skipped, saying why, where mounting is impossible). The official SDK sends until
the broker refuses for lack of space, receives what is stored while the disk is full, and sends again
once the test frees space, with no restart; every acknowledged message is still there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusQuotaExceededError
from broker_process import BrokerProcess, write_config

pytestmark = pytest.mark.interop

BODY = b"x" * 100_000


@pytest.fixture(scope="module")
def small_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mount = tmp_path_factory.mktemp("small-disk")
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], check=True,
                       capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else exc
        pytest.skip(f"cannot mount a small tmpfs for the data directory: {detail}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def disk_broker(small_disk: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = write_config(tmp_path_factory.mktemp("disk-config") / "Config.json",
                          [{"Name": "wal", "Properties": {}}, {"Name": "fill", "Properties": {}}])
    process = BrokerProcess(small_disk / "data", config).start()
    yield process
    process.stop()


def _eventually(check: object, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


def _drain(client: ServiceBusClient, queue: str) -> list[str]:
    ids: list[str] = []
    # Until a peek finds the queue empty: every message is stored before its send is acknowledged,
    # so nothing more is on its way, and no receive has to wait out an idle timeout to show it.
    with client.get_queue_receiver(queue) as receiver:
        deadline = time.monotonic() + 60
        while receiver.peek_messages(max_message_count=1, sequence_number=1) and time.monotonic() < deadline:
            for message in receiver.receive_messages(max_message_count=50, max_wait_time=5):
                ids.append(str(message.message_id))
                receiver.complete_message(message)
    return ids


def test_the_wal_is_truncated_and_freed_pages_go_back(disk_broker: BrokerProcess) -> None:
    db = disk_broker.data_dir / "messages.db"
    wal = db.with_name("messages.db-wal")
    with ServiceBusClient.from_connection_string(disk_broker.connection_string) as client:
        with client.get_queue_sender("wal") as sender:
            for i in range(40):
                sender.send_messages([ServiceBusMessage(BODY, message_id=f"w{i}-{j}") for j in range(2)])
        assert _eventually(lambda: not wal.exists() or wal.stat().st_size < 1_000_000), wal.stat().st_size
        peak = db.stat().st_size
        assert peak > 7_000_000
        assert len(_drain(client, "wal")) == 80
    assert _eventually(lambda: db.stat().st_size < peak - 6_000_000), (peak, db.stat().st_size)
    assert _eventually(lambda: not wal.exists() or wal.stat().st_size < 1_000_000)


def test_a_full_disk_refuses_sends_serves_receives_and_recovers_by_itself(
        disk_broker: BrokerProcess, small_disk: Path) -> None:
    filler = small_disk / "filler"
    stat = os.statvfs(small_disk)
    leave = 10 * 1024 * 1024  # room for the reserve and a few messages
    with open(filler, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, max(0, stat.f_bavail * stat.f_frsize - leave))
    acknowledged: list[str] = []
    with ServiceBusClient.from_connection_string(disk_broker.connection_string, retry_total=0) as client:
        with client.get_queue_sender("fill") as sender:
            refusal = None
            for i in range(200):
                try:
                    sender.send_messages(ServiceBusMessage(BODY, message_id=f"f{i}"))
                except ServiceBusQuotaExceededError as exc:
                    refusal = exc
                    break
                acknowledged.append(f"f{i}")
            assert refusal is not None and "full" in str(refusal)
            assert acknowledged
            with pytest.raises(ServiceBusQuotaExceededError):  # refused at once while the disk is full
                sender.send_messages(ServiceBusMessage(b"still full", message_id="refused"))
            # Receiving and settling stored messages goes on.
            with client.get_queue_receiver("fill") as receiver:
                got = receiver.receive_messages(max_message_count=3, max_wait_time=10)
                assert got
                for message in got:
                    receiver.complete_message(message)
            completed = [str(m.message_id) for m in got]
            # Space comes back: sends resume by themselves, no restart.
            filler.unlink()

            def sends_again() -> bool:
                try:
                    sender.send_messages(ServiceBusMessage(b"after", message_id="after"))
                except ServiceBusQuotaExceededError:
                    return False
                return True

            assert _eventually(sends_again)
        left = _drain(client, "fill")
    assert sorted(left) == sorted([a for a in acknowledged if a not in completed] + ["after"])
