"""`sodalite pipeline` on a terminal: a pseudo-terminal is the command's stdout, as when a user runs it,
and the status line it rewrites shows messages moved, the rate and the lag, down to 0; Ctrl-C stops it.
(Not on a terminal it prints only its summary unless --progress asks: the other pipeline modules read
their lines with --progress, tests/unit/cli/test_pipeline_progress.py has the three modes.)"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

from ctrl_c import ctrl_c_at_default

pytest.importorskip("pyspark")
from spark_local import cli_env

pytestmark = pytest.mark.interop

COUNT = 40
STATUS = re.compile(r"\rexported (\d+) messages, \d+ msg/s[^\r\n]*\(\d+[^)]*\), "
                    r"lag (\d+)( in (\d+) of (\d+) partitions)?")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("progress")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [
        {"Name": "pl-progress", "Properties": {"EnablePartitioning": True}}])).start()
    yield process
    process.stop()


@pytest.mark.timeout(900)  # a stall guard: a CLI run starts a JVM of its own
def test_on_a_terminal_the_status_line_shows_rows_rate_and_lag(broker: BrokerProcess, tmp_path: Path) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as sb:
        with sb.get_queue_sender("pl-progress") as sender:
            sender.send_messages([ServiceBusMessage(f"p{i}", message_id=f"p{i}", partition_key=f"k{i % 4}")
                                  for i in range(COUNT)])
    leader, follower = pty.openpty()
    args = [sys.executable, "-m", "sodalite.cli.main", "pipeline", "export", "pl-progress",
            "--connection-string", broker.connection_string, "--path", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "c"), "--master", "local[2]", "--trigger", "2 seconds",
            "--max-messages-per-trigger", "2"]  # 20 batches: the status line shows the run's middle
    proc = subprocess.Popen(args, cwd=tmp_path, env=cli_env(), stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=subprocess.DEVNULL, preexec_fn=ctrl_c_at_default)
    os.close(follower)
    shown = ""
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and f"exported {COUNT} messages" not in shown:
            ready, _, _ = select.select([leader], [], [], 5)
            if ready:
                try:
                    shown += os.read(leader, 65536).decode(errors="replace")
                except OSError:  # the command ended: its side of the terminal is gone
                    break
        statuses = [(int(m[1]), int(m[2]), m[4], m[5]) for m in STATUS.finditer(shown)]
        assert statuses, shown[-3000:]
        assert any(moved < COUNT and lag > 0 and lagging is not None and int(lagging) <= int(total)
                   for moved, lag, lagging, total in statuses), sorted(set(statuses))  # mid-run: lag, in how many
        moved, lag, _, _ = statuses[-1]
        assert (moved, lag) == (COUNT, 0), statuses
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        os.close(leader)
    assert proc.returncode == 130
