"""A real PostgreSQL server for the tests: started in a temporary directory, stopped at exit.

One server per test process (a pytest-xdist worker, or the whole run without xdist), started on
first use by :func:`shared_server`; each test module asks it for a database of its own
(:meth:`PgServer.create_database`). The server runs as the ``postgres`` user when the tests run as
root (``initdb`` and ``postgres`` refuse root), listens on 127.0.0.1 on a free port and on a
Unix socket in its directory, and trusts local connections (a throwaway cluster, nothing else
reaches it). ``scripts/test`` installs the Debian ``postgresql`` package when it is missing; a test
that needs the server and finds no binaries is skipped with the reason.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

_lock = threading.Lock()
# Polls the test process; once it is gone, stops the server's process group (fast shutdown) and
# removes its directory. Exits by itself when the server is already gone.
_WATCHDOG = """
import os, shutil, signal, sys, time
parent, server, base = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
while alive(parent) and alive(server):
    time.sleep(1)
if alive(server):
    try:
        os.killpg(server, signal.SIGINT)
    except ProcessLookupError:
        pass
    for _ in range(30):
        if not alive(server):
            break
        time.sleep(1)
shutil.rmtree(base, ignore_errors=True)
"""
_shared: PgServer | None = None


def find_bin_dir() -> Path | None:
    """The directory of ``initdb``/``postgres``: the newest Debian /usr/lib/postgresql/<ver>/bin, or PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                        if Path(p).parent.name.isdigit() else 0)
    for directory in reversed(candidates):
        if (Path(directory) / "initdb").exists() and (Path(directory) / "postgres").exists():
            return Path(directory)
    initdb = shutil.which("initdb")
    return Path(os.path.realpath(initdb)).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgServer:
    """One throwaway PostgreSQL cluster (see the module docstring)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.base = Path(tempfile.mkdtemp(prefix="sodalite-pg-"))
        self.data = self.base / "data"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as_user, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> PgServer:
        self._run(str(self.bin_dir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
        self.port = _free_port()
        return self.resume()

    def resume(self) -> PgServer:
        """Start the server on its data directory and port (after :meth:`halt`, or the first time)."""
        log = open(self.base / "server.log", "ab")  # noqa: SIM115 - the server's child keeps it
        self.proc = subprocess.Popen(
            [*self._as_user, str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base}",
             "-c", "max_connections=200", "-c", "shared_buffers=32MB"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.base / 'server.log').read_text(errors='replace')}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                if self._ready():
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self._stop_process()
        raise RuntimeError("postgres did not accept connections within 60 s")

    def _ready(self) -> bool:
        done = subprocess.run([str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                              capture_output=True, timeout=10)
        return done.returncode == 0

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        import psycopg  # the tests' dependency (the postgresql extra), imported only when needed

        name = f"{prefix}_{uuid.uuid4().hex[:12]}".lower()
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]  # name is ours, not input
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]

    def watch_parent(self) -> None:
        """Stop the server and remove its directory if this process dies without running atexit
        (killed by a timeout, or by its xdist controller): a small watchdog process does it."""
        if self.proc is None:
            return
        subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(self.proc.pid), str(self.base)],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)

    def halt(self) -> None:
        """Stop the server (fast shutdown) but keep its data: :meth:`resume` starts it again."""
        self._stop_process()

    def stop(self) -> None:
        self._stop_process()
        shutil.rmtree(self.base, ignore_errors=True)

    def _stop_process(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            # SIGINT is "fast shutdown": roll back, disconnect clients, stop cleanly.
            try:
                os.killpg(proc.pid, 2)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def shared_server() -> PgServer:
    """This process's server, started on first use and stopped when the process exits.

    Raises RuntimeError when no PostgreSQL binaries are installed (``scripts/test`` installs them).
    """
    global _shared
    with _lock:
        if _shared is None:
            bin_dir = find_bin_dir()
            if bin_dir is None:
                raise RuntimeError("PostgreSQL is not installed: run scripts/test, which installs the "
                                   "Debian postgresql package, or apt-get install postgresql")
            server = PgServer(bin_dir).start()
            atexit.register(server.stop)
            server.watch_parent()
            _shared = server
        return _shared


def module_database(prefix: str) -> Iterator[str]:
    """A database of the caller's own on this process's server, dropped afterwards (for a module
    fixture: ``yield from module_database("name")``); the test is skipped when PostgreSQL is missing."""
    import pytest

    try:
        server = shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    url = server.create_database(prefix)
    yield url
    server.drop_database(url)


def fresh_schema_url(database: str) -> str:
    """``database``'s URL with a new, empty schema of its own first on the search path."""
    import psycopg

    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    return f"{database}?options=-csearch_path%3D{schema}"
