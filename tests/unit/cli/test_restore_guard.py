"""``sodalite restore`` refuses a data directory a broker holds: it takes the directory's lock as
``serve`` does, and still reads an ``endpoints.json`` written by a broker of a release without a lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sodalite.cli.backup import older_broker_serving
from sodalite.cli.data_dir_lock import DataDirectoryLock
from sodalite.cli.main import main


def _endpoints(data_dir: Path, pid: int | None) -> None:
    noted = {"amqp_port": 5672} | ({"pid": pid} if pid is not None else {})
    (data_dir / "endpoints.json").write_text(json.dumps(noted))


def _backup(tmp_path: Path) -> Path:
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "sodalite-backup.json").write_text(json.dumps(
        {"format": 1, "takenAt": 0, "files": [], "stores": [], "partitionCount": 1}))
    return backup


def test_a_directory_without_a_broker_is_free(tmp_path: Path) -> None:
    assert older_broker_serving(tmp_path) is None
    assert older_broker_serving(tmp_path / "not-there-yet") is None


def test_a_live_older_broker_process_holds_it_and_a_dead_one_does_not(tmp_path: Path) -> None:
    _endpoints(tmp_path, os.getpid())
    held = older_broker_serving(tmp_path)
    assert held is not None and str(os.getpid()) in held
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _endpoints(tmp_path, int(gone.stdout))  # that process has exited: a broker killed without cleaning up
    assert older_broker_serving(tmp_path) is None


def test_endpoints_without_a_process_id_count_as_held(tmp_path: Path) -> None:
    _endpoints(tmp_path, None)
    assert older_broker_serving(tmp_path) is not None


def test_restore_is_refused_while_the_directory_lock_is_held_and_takes_it_itself(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backup, data_dir = _backup(tmp_path), tmp_path / "data"
    held = DataDirectoryLock(data_dir).acquire()  # as a serving broker holds it
    try:
        assert main(["restore", str(backup), "--data-dir", str(data_dir)]) != 0
        assert "in use" in capsys.readouterr().err
    finally:
        held.release()
    assert main(["restore", str(backup), "--data-dir", str(data_dir)]) in (0, None)
    # Released when done: a broker can take the directory afterwards.
    DataDirectoryLock(data_dir).acquire().release()
