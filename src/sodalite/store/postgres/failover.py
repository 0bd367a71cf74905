"""PostgreSQL high availability for the store: which server a node writes to, and what became of a
batch whose COMMIT went unanswered.

Theory of operation. Sodalite never decides which server is the primary: an operator or a standard
tool (Patroni, pg_auto_failover, ``pg_ctl promote``) promotes a standby; a node follows and fences.

Following. The store's URL may name several servers (``postgresql://a:5432,b:5432/db``, libpq's
multi-host form; ``target_session_attrs`` is accepted and implied). Whenever the store needs a new
connection (at start, and after the one it had failed), :meth:`Failover.connect` asks every server
at once (one short connection each, in parallel) whether it is in recovery, which timeline it is on
and which cluster it belongs to (``pg_control_system().system_identifier``), keeps the connection
to the one it will write to and closes the others. libpq alone would take the first server that
accepts writes, which after a failover may be the old primary restarted by mistake.

Fencing by timeline. Every promotion starts a new timeline. The node remembers the highest timeline
it has seen on any server (primary or standby: a standby that follows the new primary shows its
timeline too) and the cluster's system identifier, and writes only to a server that is not in
recovery, is on that highest timeline and belongs to that cluster. An old primary restarted as a
primary before it was rewound is still on its old timeline, so it is never written to, even when it
is the only server that answers (then nothing is written at all: the broker answers
``com.microsoft:server-busy`` until the new primary is reachable). A connection is kept until it
breaks; with several hosts, :meth:`Failover.superseded` (the store's maintenance, every
:data:`RECHECK_EVERY` seconds) asks the others whether one shows a higher timeline, and the store
then lets go of its server (a standby promoted while the old primary still answered). A primary's timeline is read from
its current WAL file name (``pg_walfile_name(pg_current_wal_insert_lsn())``), which changes at the
promotion itself; ``pg_control_checkpoint().timeline_id``, which changes only at the next
checkpoint, and a standby's ``pg_stat_wal_receiver.received_tli`` are taken into account too.

Outcomes. Every batch the store applies inserts one row, its id, into ``sodalite_batch_outcomes``
in its own transaction (schema version 7, ``store/postgres/migrations/0007_batch_outcomes.sql``).
The store sends the batch's statements, reads their results, and only then sends the ``COMMIT``
(so a batch whose ``COMMIT`` is unanswered has its
results already). When the ``COMMIT`` goes unanswered (the server died, the connection broke), the
batch may or may not be durable: :func:`resolve` connects to the primary (the new one after a
failover; waiting at most :data:`OUTCOME_WAIT` seconds) and inserts a tombstone under the same id.
If the batch's own row exists, the tombstone conflicts with it: the batch committed, and the store
returns its results (a send is acknowledged, not retried into a duplicate; a claim delivers what it
locked; a settlement is reported done). If the tombstone goes in, the batch never committed there
and now never can (a transaction still running on that server would wait on the tombstone's key and
then fail): the store raises StoreUnavailable, which the broker answers retryably (server-busy),
and a client's retry is fenced as any other (a settlement by its lock token). The insert waits for
a batch still committing on that server (one waiting for its synchronous standby, say) rather than
guess. When no primary answers within the wait, the outcome stays unknown and the batch is
reported as not applied (at-least-once: its client retries, a send may then be stored twice).
Rows older than :data:`OUTCOME_KEEP` are deleted by the store's maintenance, a few thousand at a time.

Asking "can this store write now?". :meth:`Failover.status` returns the last known
:class:`StoreStatus` at once (no I/O: safe on the event loop): whether the store is writable, the
server's role as this node sees it (``primary``, ``standby``, ``unreachable``, ``fenced``), why
not, and each server's state as last probed. :meth:`Failover.probe` asks the servers now (blocking;
call it off the event loop). The PostgreSQL store exposes both (``PostgresStore.status()`` /
``PostgresStore.probe()``), and :func:`store_status` asks any store (None for stores without one).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypedDict, Unpack

import psycopg
from psycopg.abc import ConnDict
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

log = logging.getLogger(__name__)

Role = Literal["primary", "standby", "unreachable", "fenced", "closed"]
Connection = psycopg.Connection[TupleRow]


class ConnectOptions(TypedDict, total=False):
    """The connection options the store and its feed open connections with (psycopg's keywords)."""

    autocommit: bool
    connect_timeout: int
    application_name: str
    keepalives: int
    keepalives_idle: int
    keepalives_interval: int
    keepalives_count: int

# How long an unanswered COMMIT's outcome is looked for (a primary must be reachable meanwhile).
OUTCOME_WAIT: Final = 15.0
# The lookup's own statement timeout (it may wait on a batch still committing on that server).
OUTCOME_STATEMENT_TIMEOUT_MS: Final = 5000
# Batch ids are kept this long (a lookup comes within OUTCOME_WAIT of its batch), then pruned.
OUTCOME_KEEP: Final = "10 minutes"
PRUNE_LIMIT: Final = 5000  # ids deleted by one maintenance call at most
PRUNE_EVERY: Final = 30.0  # seconds between two prunes by one node
# While connected, a node with several hosts asks the others this often whether one shows a higher
# timeline (a standby promoted while the server written to still answers): then it lets go.
RECHECK_EVERY: Final = 10.0

# The statement every batch carries (last before the COMMIT).
RECORD_BATCH: Final = "INSERT INTO sodalite_batch_outcomes (id, committed) VALUES (%(batch)s, true)"
_TOMBSTONE: Final = ("INSERT INTO sodalite_batch_outcomes (id, committed) VALUES (%s, false) "
                     "ON CONFLICT (id) DO NOTHING RETURNING id")
_LOOKUP: Final = "SELECT committed FROM sodalite_batch_outcomes WHERE id = %s"
_PRUNE: Final = ("DELETE FROM sodalite_batch_outcomes WHERE id IN (SELECT id FROM sodalite_batch_outcomes "
                 f"WHERE at < now() - interval '{OUTCOME_KEEP}' LIMIT {PRUNE_LIMIT})")
# What a probe asks each server: in recovery?, timeline (several sources), cluster.
_PROBE: Final = (
    "SELECT pg_is_in_recovery(), "
    "(SELECT timeline_id FROM pg_control_checkpoint()), "
    "CASE WHEN pg_is_in_recovery() THEN NULL "
    "ELSE ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int END, "
    "(SELECT max(received_tli) FROM pg_stat_wal_receiver), "
    "(SELECT system_identifier FROM pg_control_system())"
)


class NoPrimary(psycopg.OperationalError):
    """No server of the URL can be written to now; the message says what each one is."""


class CommitUnanswered(Exception):
    """The COMMIT of batch ``batch_id`` was sent and went unanswered: its outcome is unknown."""

    def __init__(self, batch_id: uuid.UUID, cause: BaseException) -> None:
        super().__init__(f"the COMMIT of batch {batch_id} went unanswered ({cause})")
        self.batch_id = batch_id


@dataclass(frozen=True, slots=True)
class HostReport:
    """One server as the last probe found it."""

    host: str  # "host:port" as the URL names it
    reachable: bool
    in_recovery: bool | None = None
    timeline: int | None = None
    system_identifier: int | None = None
    error: str | None = None

    def describe(self) -> str:
        if not self.reachable:
            return f"{self.host} unreachable ({self.error})"
        what = "standby (in recovery, read-only)" if self.in_recovery else "primary"
        return f"{self.host} {what} on timeline {self.timeline}"


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """Whether a store can write now, and if not why (see the module docstring)."""

    writable: bool
    role: Role
    reason: str = ""
    host: str | None = None  # the server written to, when writable
    timeline: int | None = None  # the highest timeline seen
    hosts: tuple[HostReport, ...] = ()
    checked_at: float = field(default_factory=time.time)  # seconds since the epoch


def store_status(store: object) -> StoreStatus | None:
    """The last known :class:`StoreStatus` of a store that has one (PostgreSQL), None for others."""
    status = getattr(store, "status", None)
    if callable(status):
        value = status()
        if isinstance(value, StoreStatus):
            return value
    return None


def split_hosts(url: str) -> tuple[ConnDict, list[tuple[str, str]]]:
    """The URL's other parameters, and its (host, port) pairs in order (libpq's defaults when absent)."""
    params = conninfo_to_dict(url)
    hosts = str(params.pop("host", "") or "").split(",")
    ports = str(params.pop("port", "") or "").split(",")
    params.pop("hostaddr", None)
    params.pop("target_session_attrs", None)
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        raise ValueError(f"{len(hosts)} hosts but {len(ports)} ports")
    return params, [(host, port) for host, port in zip(hosts, ports, strict=True)]


def check_hosts(netloc: str) -> None:
    """ValueError when a URL's host list (``user@a:5432,b:5433``) has a port that is not a number."""
    hosts = netloc.rpartition("@")[2]
    if "," not in hosts:
        return
    for host in hosts.split(","):
        if not host:
            raise ValueError("an empty host in the host list")
        if host.startswith("["):  # [IPv6]:port
            port = host.partition("]")[2].removeprefix(":")
        else:
            port = host.partition(":")[2]
        if port and not port.isdigit():
            raise ValueError(f"port {port!r} of host {host!r} is not a number")


def _timeline(*sources: object) -> int | None:
    values = [int(str(value)) for value in sources if value is not None]
    return max(values) if values else None


def _cluster(reports: Sequence[HostReport], known: int | None) -> int | None:
    """The cluster written to: the one on record, or else the only one the reachable servers show
    (None while they show none or several)."""
    if known is not None:
        return known
    systems = {r.system_identifier for r in reports if r.reachable} - {None}
    return next(iter(systems)) if len(systems) == 1 else None


def _refusal(reports: Sequence[HostReport], same: Sequence[HostReport], best: Sequence[HostReport],
             fenced: Sequence[HostReport], highest: int, known: int | None) -> tuple[Role, str]:
    """Why no server is written to (the role this node then shows, and the reason)."""
    if len(best) > 1:
        return "fenced", (f"{len(best)} servers accept writes on timeline {highest} "
                          f"({', '.join(r.host for r in best)}): none is written to until only one does")
    if fenced:
        return "fenced", (f"the only server that accepts writes is on an older timeline than {highest} "
                          "(an old primary restarted before it was rewound): fenced, never written to")
    if same:
        return "standby", "every reachable server is a standby (in recovery, read-only)"
    if any(r.reachable for r in reports):
        return "fenced", f"the reachable servers belong to another cluster than {known}"
    return "unreachable", "no server answers"


class Failover:
    """One store's choice of server and its fence (see the module docstring). Thread-safe."""

    def __init__(self, url: str, *, shown: str, connect_timeout: float, application_name: str) -> None:
        self._shown = shown
        self._params, self._hosts = split_hosts(url)
        self._timeout = connect_timeout
        self._application_name = application_name
        self._lock = threading.Lock()
        self.highest_timeline = 0
        self.system_identifier: int | None = None
        self._status = StoreStatus(writable=False, role="unreachable", reason="not connected yet")
        self.failovers = 0  # times the server written to changed (diagnostics)
        self._written_to: str | None = None
        self._last_prune = 0.0
        self._last_recheck = time.monotonic()

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._name(host, port) for host, port in self._hosts)

    @staticmethod
    def _name(host: str, port: str) -> str:
        return f"{host or 'localhost'}:{port or '5432'}"

    def status(self) -> StoreStatus:
        return self._status

    def lost(self, reason: str) -> None:
        """The connection written to failed: not writable until the next successful connect."""
        with self._lock:
            if self._status.writable:
                self._status = StoreStatus(writable=False, role="unreachable", reason=reason,
                                           timeline=self.highest_timeline or None, hosts=self._status.hosts)

    def closed(self) -> None:
        self._status = StoreStatus(writable=False, role="closed", reason="the store is closed",
                                   timeline=self.highest_timeline or None)

    # -- choosing a server ---------------------------------------------------------------------

    def connect(self, cls: type[Connection] = psycopg.Connection, **kwargs: Unpack[ConnectOptions]) -> Connection:
        """A connection (of ``cls``) to the server to write to; NoPrimary when there is none."""
        reports, connections = self._probe_all(cls, kwargs)
        try:
            return self._choose(reports, connections)
        finally:
            for conn in connections.values():
                if conn is not None:
                    conn.close()

    def connect_standby(self, **kwargs: Unpack[ConnectOptions]) -> Connection:
        """A read-only connection to a standby of the cluster (to read the schema; never written to)."""
        reports, connections = self._probe_all(psycopg.Connection, kwargs)
        chosen = next((r.host for r in reports if r.reachable and r.in_recovery and
                       (self.system_identifier is None or r.system_identifier == self.system_identifier)), None)
        try:
            if chosen is None:
                raise NoPrimary("no standby answers: " + "; ".join(r.describe() for r in reports))
            conn = connections.pop(chosen)
            assert conn is not None  # a reachable server's
            return conn
        finally:
            for conn in connections.values():
                if conn is not None:
                    conn.close()

    def superseded(self) -> bool:
        """At most every RECHECK_EVERY seconds (and only with several hosts): ask every server whether
        one of this cluster shows a timeline above the highest seen. If so, that timeline becomes the
        fence and True says to drop the connection written to (the next one is chosen anew)."""
        now = time.monotonic()
        if len(self._hosts) < 2 or now - self._last_recheck < RECHECK_EVERY:
            return False
        self._last_recheck = now
        reports, connections = self._probe_all(psycopg.Connection, {})
        for conn in connections.values():
            if conn is not None:
                conn.close()
        with self._lock:
            same = [r for r in reports if r.reachable and
                    (self.system_identifier is None or r.system_identifier == self.system_identifier)]
            higher = max([r.timeline or 0 for r in same], default=0)
            if higher <= self.highest_timeline:
                return False
            log.error("PostgreSQL store %s: a server shows timeline %s, above %s of the one written to (%s): a "
                      "standby was promoted; letting go of it", self._shown, higher, self.highest_timeline,
                      self._written_to)
            self.highest_timeline = higher
            self._status = StoreStatus(writable=False, role="fenced", timeline=higher, hosts=tuple(reports),
                                       reason=f"a server shows timeline {higher}: the one written to is fenced")
            return True

    def probe(self) -> StoreStatus:
        """Ask every server now (blocking) and return the resulting status; connections are closed."""
        reports, connections = self._probe_all(psycopg.Connection, {})
        try:
            self._choose(reports, connections)
        except NoPrimary:
            pass
        finally:
            for conn in connections.values():
                if conn is not None:
                    conn.close()
        return self._status

    def _probe_all(self, cls: type[Connection], kwargs: ConnectOptions
                   ) -> tuple[list[HostReport], dict[str, Connection | None]]:
        options = kwargs.copy()
        options["autocommit"] = True
        options.setdefault("connect_timeout", max(1, int(self._timeout)))
        options.setdefault("application_name", self._application_name)

        def ask(host: str, port: str) -> tuple[HostReport, Connection | None]:
            name = self._name(host, port)
            conninfo = make_conninfo("", **{**self._params, "host": host, **({"port": port} if port else {})})
            try:
                conn = cls.connect(conninfo, **options)
            except psycopg.Error as exc:
                return HostReport(name, reachable=False, error=_first_line(exc)), None
            try:
                row = conn.execute(_PROBE).fetchone()
                assert row is not None
                recovery, checkpoint_tl, wal_tl, received_tl, system = row
                report = HostReport(name, reachable=True, in_recovery=bool(recovery),
                                    timeline=_timeline(checkpoint_tl, wal_tl, received_tl),
                                    system_identifier=None if system is None else int(system))
            except psycopg.Error as exc:
                conn.close()
                return HostReport(name, reachable=False, error=_first_line(exc)), None
            return report, conn

        if len(self._hosts) == 1:
            answers = [ask(*self._hosts[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(self._hosts), thread_name_prefix="sodalite-pg-probe") as pool:
                answers = list(pool.map(lambda hp: ask(*hp), self._hosts))
        return [report for report, _ in answers], {report.host: conn for report, conn in answers}

    def _choose(self, reports: Sequence[HostReport], connections: dict[str, Connection | None]) -> Connection:
        """The connection to write to: the one primary of the cluster on the highest timeline seen;
        NoPrimary (with the status saying why) when there is none or more than one."""
        with self._lock:
            known = _cluster(reports, self.system_identifier)
            same = [r for r in reports if r.reachable and (known is None or r.system_identifier == known)]
            highest = max([self.highest_timeline, *[r.timeline or 0 for r in same]])
            primaries = [r for r in same if not r.in_recovery]
            best = [r for r in primaries if (r.timeline or 0) >= highest]
            fenced = [r for r in primaries if (r.timeline or 0) < highest]
            self.highest_timeline = highest
            if best and known is not None:
                self.system_identifier = known
            if len(best) == 1:
                self._write_to(best[0], fenced, highest, tuple(reports))
                conn = connections.pop(best[0].host)
                assert conn is not None  # a reachable server's
                return conn
            role, reason = _refusal(reports, same, best, fenced, highest, known)
            self._status = StoreStatus(writable=False, role=role, reason=reason, timeline=highest or None,
                                       hosts=tuple(reports))
            raise NoPrimary(f"{reason}: {'; '.join(r.describe() for r in reports)}")

    def _write_to(self, chosen: HostReport, fenced: Sequence[HostReport], highest: int,
                  hosts: tuple[HostReport, ...]) -> None:
        """Record the server written to (a change of server is a failover) and name the fenced ones."""
        if self._written_to is not None and self._written_to != chosen.host:
            self.failovers += 1
            log.warning("PostgreSQL store %s: now writing to %s (timeline %s)", self._shown, chosen.host,
                        chosen.timeline)
        self._written_to = chosen.host
        for report in fenced:
            log.error("PostgreSQL store %s: %s accepts writes on timeline %s, below timeline %s: fenced, "
                      "never written to (rewind it with pg_rewind and start it as a standby)",
                      self._shown, report.host, report.timeline, highest)
        self._status = StoreStatus(writable=True, role="primary", host=chosen.host, timeline=highest, hosts=hosts)

    def connection_class(self) -> type[Connection]:
        """A connection class whose ``connect`` (what the pool calls) chooses the server (:meth:`connect`)."""
        failover = self

        class ChosenConnection(Connection):
            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
                return failover.connect(psycopg.Connection, **kwargs)

        return ChosenConnection

    # -- outcomes ------------------------------------------------------------------------------

    def prune_due(self) -> bool:
        now = time.monotonic()
        if now - self._last_prune < PRUNE_EVERY:
            return False
        self._last_prune = now
        return True


def resolve(batch_id: uuid.UUID, connection: Callable[[], AbstractContextManager[Connection]],
            wait: float = OUTCOME_WAIT) -> bool | None:
    """Whether batch ``batch_id`` committed (True), never did and now never will (False), or is
    still unknown after ``wait`` seconds without a primary (None). ``connection()`` gives a
    connection to the primary (the store's pool)."""
    deadline = time.monotonic() + wait
    pause = 0.1
    while True:
        try:
            with connection() as conn:
                with conn.transaction():
                    conn.execute(f"SET LOCAL statement_timeout = {OUTCOME_STATEMENT_TIMEOUT_MS}")
                    inserted = conn.execute(_TOMBSTONE, (batch_id,)).fetchone()
                if inserted is not None:
                    return False
                row = conn.execute(_LOOKUP, (batch_id,)).fetchone()
                if row is not None:
                    return bool(row[0])
        except Exception as exc:  # the primary is not (yet) reachable, or the lookup timed out
            log.debug("batch %s: outcome lookup failed: %s", batch_id, exc)
        if time.monotonic() + pause >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def prune(conn: Connection) -> int:
    """Delete batch ids older than OUTCOME_KEEP (at most PRUNE_LIMIT); how many went."""
    cur = conn.execute(_PRUNE)
    return int(cur.rowcount or 0)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
