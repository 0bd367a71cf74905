"""A real PostgreSQL cluster for the failover tests: a primary and streaming standbys on loopback.

:class:`PgCluster` starts one primary and ``standbys`` streaming standbys (1 or 2) from the Debian
binaries (:func:`pg_server.find_bin_dir`), each in a directory of its own under one temporary base,
run as the ``postgres`` user when the tests run as root (``runuser -u postgres --``, as
tests/pg_server.py does), listening on 127.0.0.1 on a port of its own that it keeps for its life.

Replication policy (docs/postgresql.md, "High availability"): every server runs with
``synchronous_commit = on``, ``wal_log_hints = on`` (what ``pg_rewind`` needs) and
``synchronous_standby_names = 'ANY 1 (n0, n1, n2)'``: servers are named ``n0``, ``n1``, ``n2`` (the
``application_name`` each standby gives its primary), every server lists them all, and a server never
counts itself, so whichever is primary a commit waits for one of the others.

What a test does with it (all blocking, all bounded):

- :meth:`PgCluster.url`: a multi-host URL naming every server (or the ones given), as a node takes it.
- :meth:`PgCluster.kill`: ``kill -9`` of a server's whole process group (postmaster and backends:
  a crash, nothing flushed beyond what was).
- :meth:`PgCluster.promote`: ``pg_ctl promote`` of a standby (waits until it accepts writes);
  :meth:`PgCluster.best_standby`: the live standby that received the most WAL (the one a promoter
  picks: it has every commit any standby acknowledged).
- :meth:`PgCluster.set_synchronous`: change a primary's ``synchronous_standby_names`` (``""`` while
  a one-standby cluster's only standby is rebuilt: otherwise every commit waits for it).
- :meth:`PgCluster.follow`: point a live standby at a new primary (reloads ``primary_conninfo``;
  it follows the new timeline).
- :meth:`PgCluster.rewind`: rebuild a killed (or stopped) old primary as a standby of the current
  primary with ``pg_rewind`` and start it.
- :meth:`PgCluster.start_as_primary`: restart a killed old primary *as a primary*, un-rewound (the
  operator error the nodes must fence: it is on an older timeline).
- :meth:`PgCluster.stop`: stop every server and remove the directory (also at exit).

A node's :attr:`PgNode.role` is what the cluster made of it (``primary``, ``standby``, ``down``,
``stale-primary``); :meth:`PgCluster.primary` asks the servers themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pg_server import _free_port, find_bin_dir

NAMES = ("n0", "n1", "n2")
SYNC_NAMES = "ANY 1 (n0, n1, n2)"
START_WAIT = 60.0


class PgNode:
    """One server of the cluster: its name, port, data directory and process."""

    def __init__(self, cluster: PgCluster, name: str, port: int) -> None:
        self.cluster = cluster
        self.name = name
        self.port = port
        self.data = cluster.base / name
        self.log = cluster.base / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.role = "down"

    @property
    def host(self) -> str:
        """``127.0.0.1:port``, as it appears in a multi-host URL."""
        return f"127.0.0.1:{self.port}"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def query(self, statement: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement on this server alone (autocommit); its rows."""
        import psycopg

        with psycopg.connect(self.dsn(database), autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]  # the tests' own statements
            return cur.fetchall() if cur.description is not None else []

    def in_recovery(self) -> bool:
        return bool(self.query("SELECT pg_is_in_recovery()")[0][0])

    def timeline(self) -> int:
        """The server's current timeline (a primary's: the one it writes WAL on)."""
        row = self.query("SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint()) "
                         "ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END")
        return int(row[0][0])

    def received_lsn(self) -> int:
        """A standby's WAL received (or replayed) so far, as a number (0 when unknown)."""
        row = self.query("SELECT coalesce(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) - '0/0'::pg_lsn")
        return int(row[0][0] or 0)

    def __repr__(self) -> str:
        return f"PgNode({self.name}, port {self.port}, {self.role})"


class PgCluster:
    """A primary and ``standbys`` streaming standbys on loopback (see the module docstring)."""

    def __init__(self, standbys: int = 2, *, extra_settings: dict[str, str] | None = None) -> None:
        if not 1 <= standbys <= 2:
            raise ValueError("PgCluster: 1 or 2 standbys")
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql")
        self.bin_dir = bin_dir
        self.base = Path(tempfile.mkdtemp(prefix="sodalite-pgc-"))
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.settings = {
            "listen_addresses": "'127.0.0.1'", "max_connections": "200", "shared_buffers": "'32MB'",
            "wal_level": "replica", "max_wal_senders": "10", "max_replication_slots": "10",
            "wal_keep_size": "'512MB'", "hot_standby": "on", "wal_log_hints": "on",
            "synchronous_commit": "on", "synchronous_standby_names": f"'{SYNC_NAMES}'",
            "wal_receiver_status_interval": "'1s'", "wal_sender_timeout": "'10s'", "wal_receiver_timeout": "'10s'",
            "checkpoint_timeout": "'5min'", "wal_retrieve_retry_interval": "'500ms'",
            "unix_socket_directories": f"'{self.base}'",
            **(extra_settings or {}),
        }
        self.nodes = [PgNode(self, name, _free_port()) for name in NAMES[:standbys + 1]]
        self._stopped = False
        atexit.register(self.stop)

    # -- life --------------------------------------------------------------------------------------

    def start(self) -> PgCluster:
        """initdb the first node, start it as primary, clone and start the standbys; wait until each
        streams."""
        first = self.nodes[0]
        self._run(str(self.bin_dir / "initdb"), "-D", str(first.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
        self._write_settings(first)
        self._launch(first)
        first.role = "primary"
        for node in self.nodes[1:]:
            self._run(str(self.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(first.port), "-U", "postgres",
                      "-D", str(node.data), "-X", "stream", "--no-sync")
            self._write_settings(node)
            self._make_standby(node, first)
            self._launch(node)
            node.role = "standby"
        self.wait_streaming(first, len(self.nodes) - 1)
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for node in self.nodes:
            self._terminate(node, signal.SIGINT)
        shutil.rmtree(self.base, ignore_errors=True)

    # -- what a test asks --------------------------------------------------------------------------

    def url(self, database: str = "postgres", nodes: list[PgNode] | None = None,
            target_session_attrs: str | None = "read-write") -> str:
        """The multi-host URL of ``nodes`` (every node by default), in the cluster's order."""
        hosts = ",".join(node.host for node in (nodes or self.nodes))
        query = f"?target_session_attrs={target_session_attrs}" if target_session_attrs else ""
        return f"postgresql://postgres@{hosts}/{database}{query}"

    def create_database(self, prefix: str = "t") -> str:
        """A new database on the current primary (replicated to the standbys); its name."""
        import uuid

        name = f"{prefix}_{uuid.uuid4().hex[:12]}".lower()
        self.primary().query(f'CREATE DATABASE "{name}"')
        return name

    def primary(self) -> PgNode:
        """The running server that is not in recovery and on the highest timeline (asked now)."""
        best: tuple[int, PgNode] | None = None
        for node in self.nodes:
            if not node.running:
                continue
            try:
                if node.in_recovery():
                    continue
                timeline = node.timeline()
            except Exception:
                continue
            if best is None or timeline > best[0]:
                best = (timeline, node)
        if best is None:
            raise RuntimeError("no primary is running")
        return best[1]

    def standbys(self) -> list[PgNode]:
        return [node for node in self.nodes if node.role == "standby" and node.running]

    def best_standby(self) -> PgNode:
        """The live standby that has received the most WAL (what a promoter promotes)."""
        candidates = []
        for node in self.standbys():
            try:
                candidates.append((node.received_lsn(), node))
            except Exception:
                continue
        if not candidates:
            raise RuntimeError("no live standby to promote")
        return max(candidates, key=lambda c: c[0])[1]

    def wait_streaming(self, primary: PgNode, count: int, timeout: float = START_WAIT) -> None:
        """Wait until ``count`` standbys stream from ``primary``."""
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            try:
                seen = int(primary.query("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")[0][0])
            except Exception:
                seen = -1
            if seen >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{primary.name}: {seen} standbys streaming after {timeout} s, expected {count}")

    # -- faults and repairs ------------------------------------------------------------------------

    def kill(self, node: PgNode) -> None:
        """``kill -9`` the server's process group (postmaster and every backend)."""
        self._terminate(node, signal.SIGKILL)

    def halt(self, node: PgNode) -> None:
        """Stop a server cleanly (fast shutdown)."""
        self._terminate(node, signal.SIGINT)

    def promote(self, node: PgNode, timeout: float = 60.0) -> None:
        """Promote a standby (``pg_ctl promote``) and wait until it accepts writes."""
        self._run(str(self.bin_dir / "pg_ctl"), "promote", "-D", str(node.data), "-w", "-t", str(int(timeout)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not node.in_recovery():
                    node.role = "primary"
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{node.name} still in recovery {timeout} s after pg_ctl promote")

    def set_synchronous(self, node: PgNode, names: str = SYNC_NAMES) -> None:
        """Set a primary's ``synchronous_standby_names`` (``""``: commits wait for no standby, what a
        promoter does while the last standby is being rebuilt, unless told to be strict) and reload."""
        node.query(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        node.query("SELECT pg_reload_conf()")

    def follow(self, node: PgNode, primary: PgNode) -> None:
        """Point a running standby at ``primary`` (``primary_conninfo`` reloaded; it follows the
        new timeline, ``recovery_target_timeline = 'latest'``)."""
        node.query(f"ALTER SYSTEM SET primary_conninfo = '{self._conninfo(node, primary)}'")
        node.query("SELECT pg_reload_conf()")

    def rewind(self, node: PgNode, primary: PgNode | None = None) -> None:
        """Rebuild a stopped (or killed) old primary as a standby of ``primary`` (the current one
        by default) with ``pg_rewind``, and start it."""
        source = primary or self.primary()
        self._terminate(node, signal.SIGINT)
        # pg_rewind takes the source's timeline from its control file, which a freshly promoted server
        # updates only at its next checkpoint: make it now.
        source.query("CHECKPOINT")
        # Crash recovery first, if needed (pg_rewind does it in single-user mode); then copy what diverged.
        self._run(str(self.bin_dir / "pg_rewind"), "--target-pgdata", str(node.data),
                  "--source-server", f"host=127.0.0.1 port={source.port} user=postgres dbname=postgres",
                  "--no-sync", timeout=300)
        self._make_standby(node, source)
        self._launch(node)
        node.role = "standby"

    def start_as_primary(self, node: PgNode) -> None:
        """Start a killed old primary as it is, without a standby.signal: a primary on its old
        timeline, un-rewound (the operator error nodes must fence)."""
        (node.data / "standby.signal").unlink(missing_ok=True)
        self._launch(node)
        node.role = "stale-primary"

    def start_standby(self, node: PgNode, primary: PgNode | None = None) -> None:
        """(Re)start a stopped standby following ``primary`` (the current one by default)."""
        self._make_standby(node, primary or self.primary())
        self._launch(node)
        node.role = "standby"

    # -- internals ---------------------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run([*self._as_user, *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def _conninfo(self, node: PgNode, primary: PgNode) -> str:
        return f"host=127.0.0.1 port={primary.port} user=postgres application_name={node.name}"

    def _write_settings(self, node: PgNode) -> None:
        lines = [f"{key} = {value}" for key, value in self.settings.items()]
        (node.data / "postgresql.conf").write_text(
            (node.data / "postgresql.conf").read_text() + "\n# sodalite PgCluster\n" + "\n".join(lines) + "\n")

    def _make_standby(self, node: PgNode, primary: PgNode) -> None:
        auto = node.data / "postgresql.auto.conf"
        kept = [line for line in (auto.read_text().splitlines() if auto.exists() else [])
                if not line.startswith(("primary_conninfo", "primary_slot_name"))]
        kept.append(f"primary_conninfo = '{self._conninfo(node, primary)}'")
        kept.append("recovery_target_timeline = 'latest'")
        self._write_as_owner(auto, "\n".join(kept) + "\n")
        self._write_as_owner(node.data / "standby.signal", "")

    def _write_as_owner(self, path: Path, text: str) -> None:
        path.write_text(text)
        if self._as_user:
            user = pwd.getpwnam("postgres")
            os.chown(path, user.pw_uid, user.pw_gid)
            os.chmod(path, 0o600)

    def _launch(self, node: PgNode) -> None:
        if node.running:
            return
        log = open(node.log, "ab")  # noqa: SIM115 - the server's child keeps it
        node.proc = subprocess.Popen([*self._as_user, str(self.bin_dir / "postgres"), "-D", str(node.data),
                                      # on the command line: pg_rewind copies the source's configuration files
                                      "-p", str(node.port), "-c", f"cluster_name={node.name}"],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(f"{node.name} exited: {node.log.read_text(errors='replace')[-3000:]}")
            done = subprocess.run([str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(node.port)],
                                  capture_output=True, timeout=10)
            if done.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{node.name} did not accept connections within {START_WAIT} s")

    def _terminate(self, node: PgNode, sig: signal.Signals) -> None:
        proc, node.proc = node.proc, None
        node.role = "down"
        if proc is None or proc.poll() is not None:
            return
        # runuser, our child, forwards SIGINT to the postmaster, but SIGKILL cannot be forwarded: a
        # crash kills the postmaster and each of its children (each in a session of its own) directly,
        # and runuser, left alive, reaps the postmaster (a zombie postmaster would keep its pid file valid).
        postmaster = _postmaster_pid(node)
        try:
            if sig == signal.SIGKILL and postmaster is not None:
                children = _children(postmaster)
                os.kill(postmaster, signal.SIGKILL)
                for child in children:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGKILL)
            else:
                os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if sig == signal.SIGKILL:
            # The backends are in the group too, but wait until the port is free of them all.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (node.data / "postmaster.pid").exists() and _listening(node.port):
                time.sleep(0.05)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _postmaster_pid(node: PgNode) -> int | None:
    try:
        return int((node.data / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
