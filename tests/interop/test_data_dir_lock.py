"""One broker per data directory: a second ``scripts/serve`` on it is refused; nobody removes another's endpoints.

The first broker holds an OS lock (``flock`` on ``<data dir>/broker.lock``) for its lifetime; a
second one started on the same directory exits at once, non-zero, with one line naming the directory
and the first one's PID, and without touching anything there (the first keeps serving and its
``endpoints.json`` stays). The client commands, which read ``endpoints.json`` to find the broker,
take no lock and work beside it. A broker removes ``endpoints.json`` on exit only when it wrote it
itself; ``kill -9`` releases the lock, so a broker starts again on the directory at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import SERVE, BrokerProcess, write_config

pytestmark = pytest.mark.interop

QUEUES = [{"Name": "q", "Properties": {}}]


def _serve_again(data_dir: Path, config: Path) -> tuple[int, str, str]:
    """A second ``scripts/serve`` on ``data_dir``: (exit code, stdout, stderr). One that is still
    running after 60 s was not refused: it is stopped (SIGTERM) and the test fails."""
    proc = subprocess.Popen([str(SERVE), "--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
                             "--amqps-port", "0", "--http-port", "0", "--data-dir", str(data_dir),
                             "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        raise AssertionError("a second broker on the same data directory was not refused:\n" + out + err) from None
    return proc.returncode, out, err


def _send_and_receive(broker: BrokerProcess, body: str) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver("q", max_wait_time=10) as receiver:
            [got] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(got) == body
            receiver.complete_message(got)


def test_a_second_broker_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", QUEUES)
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir, config).start()
    try:
        assert first.proc is not None
        endpoints = data_dir / "endpoints.json"
        written = endpoints.read_text(encoding="utf-8")
        code, out, err = _serve_again(data_dir, config)
        assert code != 0, out + err
        assert "Traceback" not in err and "Connection string" not in out
        lines = [line for line in err.splitlines() if line.startswith("sodalite:")]
        assert len(lines) == 1, err
        assert str(data_dir.resolve()) in lines[0] and f"process {first.proc.pid}" in lines[0], lines[0]
        # The first broker is untouched: its endpoints.json (which names it) is its own, and it still serves.
        assert endpoints.read_text(encoding="utf-8") == written
        assert json.loads(written)["pid"] == first.proc.pid
        _send_and_receive(first, "still serving")
        # The client commands read endpoints.json beside the running broker: they take no lock.
        env = {k: v for k, v in os.environ.items() if k != "SODALITE_CONNECTION_STRING"}
        sent = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "send", "q", "--body", "from the cli",
                               "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60, env=env)
        assert sent.returncode == 0, sent.stderr
        peeked = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "peek", "q", "--data-dir", str(data_dir)],
                                capture_output=True, text=True, timeout=60, env=env)
        assert peeked.returncode == 0 and "from the cli" in peeked.stdout, peeked.stdout + peeked.stderr
    finally:
        first.stop()
    assert not (data_dir / "endpoints.json").exists()  # its own, removed on a clean stop


def test_a_broker_leaves_an_endpoints_file_another_process_wrote(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", QUEUES)
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, config).start()
    endpoints = data_dir / "endpoints.json"
    try:
        theirs = {**json.loads(endpoints.read_text(encoding="utf-8")), "pid": os.getpid()}
        endpoints.write_text(json.dumps(theirs), encoding="utf-8")  # another process wrote it since
    finally:
        broker.stop()
    assert json.loads(endpoints.read_text(encoding="utf-8")) == theirs


def test_the_lock_ends_with_its_process_even_after_kill_9(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", QUEUES)
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir, config).start()
    try:
        broker.kill()
        broker.start()  # the kernel released the lock with the process: no stale lock to remove
        _send_and_receive(broker, "after kill -9")
    finally:
        broker.stop()
