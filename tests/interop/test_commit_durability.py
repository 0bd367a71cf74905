"""A send is acknowledged only after its commit reached the disk: the broker as users start it
(`sodalite serve` with its defaults, so `--sync FULL`), the official SDK sending batches one after
another, each waiting for its acknowledgement, and the broker's fsyncs counted with strace.

SQLite in WAL mode syncs the log on every commit only with ``synchronous = FULL`` (``NORMAL`` syncs
at checkpoints), so a default other than FULL, or an acknowledgement released before the commit,
shows as fewer fsyncs than acknowledged batches. The hot path's commit window and group commit may
put several batches in one transaction only when they were in flight together, never these."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

pytestmark = [pytest.mark.interop,
              pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to count fsyncs")]

BATCHES = 12
SYNCS = re.compile(r"\b(fdatasync|fsync)\(")


def _count_syncs(broker: BrokerProcess, tmp_path: Path, queue: str) -> int:
    assert broker.proc is not None
    trace = tmp_path / "strace.txt"
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=fdatasync,fsync", "-o", str(trace),
                               "-p", str(broker.proc.pid)], stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # attached to every thread
        with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(b"warm-up"))  # the link's own first writes
            time.sleep(0.5)
            before = len(SYNCS.findall(trace.read_text())) if trace.exists() else 0
            for i in range(BATCHES):  # each waits for its acknowledgement
                sender.send_messages([ServiceBusMessage(f"{i}-{j}".encode()) for j in range(5)])
            after = len(SYNCS.findall(trace.read_text()))
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(30)
    return after - before


def test_every_acknowledged_send_batch_waited_for_an_fsync_by_default(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [{"Name": "synced"}])).start()
    try:
        syncs = _count_syncs(broker, tmp_path, "synced")
    finally:
        broker.stop()
    assert syncs >= BATCHES, f"{syncs} fsyncs for {BATCHES} acknowledged batches"
