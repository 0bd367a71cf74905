"""``sodalite restore`` refuses a data directory a broker holds (cli/backup.py ``broker_holding``)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from sodalite.cli.backup import broker_holding


def _endpoints(data_dir: Path, pid: int | None) -> None:
    noted = {"amqp_port": 5672} | ({"pid": pid} if pid is not None else {})
    (data_dir / "endpoints.json").write_text(json.dumps(noted))


def test_a_directory_without_a_broker_is_free(tmp_path: Path) -> None:
    assert broker_holding(tmp_path) is None
    assert broker_holding(tmp_path / "not-there-yet") is None


def test_a_live_broker_process_holds_it_and_a_dead_one_does_not(tmp_path: Path) -> None:
    _endpoints(tmp_path, os.getpid())
    held = broker_holding(tmp_path)
    assert held is not None and str(os.getpid()) in held
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _endpoints(tmp_path, int(gone.stdout))  # that process has exited: a broker killed without cleaning up
    assert broker_holding(tmp_path) is None


def test_endpoints_without_a_process_id_count_as_held(tmp_path: Path) -> None:
    _endpoints(tmp_path, None)
    assert broker_holding(tmp_path) is not None


def test_a_held_lock_file_counts_as_held(tmp_path: Path) -> None:
    lock = tmp_path / "broker.lock"
    lock.write_text("")
    assert broker_holding(tmp_path) is None  # there, but nobody holds it
    fd = os.open(lock, os.O_RDWR)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              pass_fds=(fd,))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)  # the child keeps the description open, and with it the lock
        held = broker_holding(tmp_path)
        assert held is not None and "lock" in held
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    assert broker_holding(tmp_path) is None
