"""One broker per data directory: ``sodalite serve`` holds an OS lock on it for its lifetime.

Theory of operation. Two brokers writing one SQLite file each believe they number, lock and count
its partitions alone; one removing the other's ``endpoints.json`` on exit leaves the client commands
without ports. So ``serve`` takes an exclusive ``flock`` on ``<data dir>/broker.lock`` before it
touches anything else there (the store, the certificate, ``endpoints.json``) and keeps the file
descriptor open until the process ends: the kernel releases the lock however the process ends,
``kill -9`` included, so a stale lock never outlives its broker and never needs removing by hand.
The holder writes its PID into the file, so a second ``serve`` on the directory is refused at once
with one line naming the directory and that PID. The lock file itself stays (deleting it would let
a third process lock a fresh inode while the second still holds the old one).

The client commands (``sodalite messages``, ``send``, ``peek``, ...) only read ``endpoints.json``
and never take the lock. ``endpoints.json`` carries the PID of the broker that wrote it, and a
broker removes it on exit only when it is still its own (:func:`remove_own_endpoints`).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Final

LOCK_FILE: Final = "broker.lock"  # the name `sodalite restore` looks for (cli/backup.py)


class DataDirectoryInUse(RuntimeError):
    """Another process holds the data directory's lock."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(f"the data directory {data_dir} is in use by another broker ({holder} holds "
                         f"{data_dir / LOCK_FILE}); stop it first, or give this one another --data-dir")
        self.data_dir = data_dir
        self.pid = pid


class DataDirectoryLock:
    """The exclusive lock of one data directory, held from :meth:`acquire` until :meth:`release` or exit."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._fd: int | None = None

    def acquire(self) -> DataDirectoryLock:
        """Take the lock (creating the directory if needed), or raise :class:`DataDirectoryInUse`."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirectoryInUse(self.data_dir.resolve(), pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def endpoints_owner(path: Path) -> int | None:
    """The PID recorded in an ``endpoints.json`` (None: no file, unreadable, or none recorded)."""
    try:
        noted = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pid = noted.get("pid") if isinstance(noted, dict) else None
    return pid if isinstance(pid, int) else None


def remove_own_endpoints(path: Path) -> bool:
    """Remove ``endpoints.json`` only when this process wrote it (its PID is in it); True if removed."""
    if endpoints_owner(path) != os.getpid():
        return False
    path.unlink(missing_ok=True)
    return True
