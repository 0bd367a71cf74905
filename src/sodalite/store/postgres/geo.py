"""Namespace geo-replication on PostgreSQL: asking a site's database where it stands, and promoting.

Theory of operation. Each site's database is asked the same few questions (:func:`probe`): is it in
recovery, its timeline and WAL position (written on a primary, replayed on a standby), its last
replayed transaction's time, whether it is read-only, which standbys stream from it, and the
namespace's geo record: one row of ``sodalite_geo`` naming the primary site and the epoch (the
number of promotions), written on the primary and replicated like everything else. The first
primary's nodes write it (:func:`claim`); a promotion rewrites it. What a node makes of the two
answers is :func:`sodalite.model.geo.decide_role`.

A planned promotion (:func:`promote`, ``PLANNED``): the record on the primary names the target
(its nodes see it and stop serving), the primary becomes read-only (``default_transaction_read_only``
with a reload) and every other session on its database is ended, so nothing more commits there;
the secondary replays up to the primary's last WAL position, ``pg_promote()`` makes it the primary,
and its nodes, which read the same record, serve. Nothing committed on the old primary is lost. If
the secondary does not catch up in time, everything is put back as it was and the promotion fails.

A forced promotion (``FORCED``): the target is promoted at once; the bound is the last transaction
it replayed (its LSN and commit time): what the old primary committed after it may be lost, nothing
before it. Before its nodes serve (the record still names the old site, so they wait), one
transaction moves every partition's counter to the start of the epoch after next
(:func:`~sodalite.model.geo.counter_after_forced_promotion`, the same arithmetic in SQL) and
rewrites the record with the new epoch: a sequence number the old primary may have given is
never given again. The old primary, if it answers, is fenced first as in a planned promotion.

Only the default store's database is covered: further ``MessagingStores`` databases are not
promoted by this module. Every psycopg failure is reported as StoreUnavailable; no psycopg type
leaves this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Final

import psycopg
from psycopg.rows import TupleRow

from sodalite.errors import ArgumentError, StoreUnavailable
from sodalite.model.geo import (
    EPOCH_BITS,
    EPOCHS_PER_FORCED_PROMOTION,
    PARTITION_SHIFT,
    DatabaseView,
    PromotionMode,
    check_promotion,
    format_lsn,
    parse_lsn,
)
from sodalite.store.postgres.values import redact

__all__ = ["Lag", "PromotionReport", "SiteStatus", "Standby", "claim", "lag", "move_counters", "probe", "promote",
           "redact"]

CREATE_RECORD: Final = """
    CREATE TABLE IF NOT EXISTS sodalite_geo (
        singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        primary_site text    NOT NULL,
        epoch        bigint  NOT NULL,
        changed_at   bigint  NOT NULL,
        mode         text    NOT NULL,
        bound_lsn    text,
        bound_time   bigint
    )
"""
_SUB_QUEUES: Final = ("", "/$deadletterqueue", "/$transfer/$deadletterqueue")
_STANDBY_QUERY: Final = (
    "SELECT application_name, state, sync_state, replay_lsn::text, "
    "extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication ORDER BY application_name"
)


@dataclass(frozen=True, slots=True)
class Standby:
    name: str  # its application_name (a geo secondary's: its site name)
    state: str
    sync_state: str
    replay_lsn: str | None
    replay_lag_seconds: float | None


@dataclass(frozen=True, slots=True)
class SiteStatus:
    """One site's database as :func:`probe` found it."""

    url: str  # without its password
    reachable: bool
    error: str | None = None
    in_recovery: bool = False
    read_only: bool = False
    timeline: int | None = None
    lsn: str | None = None  # a primary's current WAL position; a standby's last replayed one
    receive_lsn: str | None = None  # a standby's last received
    last_replay_time: float | None = None  # a standby's last replayed transaction's commit time (s)
    server_time: float | None = None
    primary_site: str | None = None
    epoch: int = 0
    record_mode: str | None = None
    bound_lsn: str | None = None
    bound_time: float | None = None
    synchronous_standby_names: str = ""
    standbys: tuple[Standby, ...] = ()
    stream_name: str | None = None  # a standby's application_name, as its primary's walsender shows it

    def view(self) -> DatabaseView:
        return DatabaseView(self.reachable, self.in_recovery, self.read_only, self.primary_site, self.epoch)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _connect(url: str, timeout: float) -> psycopg.Connection[TupleRow]:
    return psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout)),
                           application_name="sodalite geo")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def probe(url: str, *, timeout: float = 3.0) -> SiteStatus:
    """Where ``url``'s database stands; ``reachable`` False (with the error) when it does not answer."""
    try:
        with _connect(url, timeout) as conn:
            return _probe(conn, url)
    except psycopg.Error as exc:
        return SiteStatus(redact(url), False, error=_describe(exc))


def _probe(conn: psycopg.Connection[TupleRow], url: str) -> SiteStatus:
    row = conn.execute(
        "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only') = 'on', "
        # A primary's timeline is the one it writes WAL on (its control file says so only after the
        # first checkpoint since its promotion); a standby's is corrected below.
        "CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint()) "
        "ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END, "
        "CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text, "
        "pg_last_wal_receive_lsn()::text, extract(epoch FROM pg_last_xact_replay_timestamp())::float8, "
        "extract(epoch FROM now())::float8, current_setting('synchronous_standby_names'), "
        "to_regclass('sodalite_geo') IS NOT NULL").fetchone()
    assert row is not None
    in_recovery, read_only, timeline, lsn, receive_lsn, replayed, now, sync_names, has_record = row
    if in_recovery:
        # A standby's checkpoint timeline lags behind; the timeline it receives on is current.
        received = conn.execute("SELECT received_tli, conninfo FROM pg_stat_wal_receiver").fetchone()
        if received is not None and received[0]:
            timeline = received[0]
        # The name its primary knows its stream by (pg_stat_replication.application_name).
        stream_name = _application_name(received[1] if received is not None else None) \
            or str(conn.execute("SELECT current_setting('cluster_name')").fetchone()[0] or "") or None  # type: ignore[index]
    else:
        stream_name = None
    record: TupleRow | None = None
    if has_record:
        record = conn.execute("SELECT primary_site, epoch, mode, bound_lsn, bound_time FROM sodalite_geo").fetchone()
    standbys = tuple(Standby(str(r[0]), str(r[1]), str(r[2]), r[3], r[4])
                     for r in conn.execute(_STANDBY_QUERY).fetchall())
    return SiteStatus(
        redact(url), True, None, bool(in_recovery), bool(read_only), int(timeline) if timeline else None,
        lsn, receive_lsn, replayed, now,
        primary_site=None if record is None else str(record[0]), epoch=0 if record is None else int(record[1]),
        record_mode=None if record is None else str(record[2]), bound_lsn=None if record is None else record[3],
        bound_time=None if record is None or record[4] is None else int(record[4]) / 1000,
        synchronous_standby_names=str(sync_names), standbys=standbys, stream_name=stream_name)


def _application_name(conninfo: str | None) -> str | None:
    for part in (conninfo or "").split():
        key, sep, value = part.partition("=")
        if sep and key == "application_name":
            return value.strip("'") or None
    return None


def claim(url: str, site: str, *, timeout: float = 3.0) -> None:
    """The first primary's record: names ``site`` unless a record exists already."""
    try:
        with _connect(url, timeout) as conn, conn.transaction():
            conn.execute(CREATE_RECORD)
            conn.execute("INSERT INTO sodalite_geo (primary_site, epoch, changed_at, mode) "
                         "VALUES (%s, 0, %s, 'first') ON CONFLICT DO NOTHING", (site, _now_ms()))
    except psycopg.Error as exc:
        raise StoreUnavailable(f"geo record on {redact(url)}: cannot write it: {_describe(exc)}") from exc


# -- status -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Lag:
    bytes: int | None
    seconds: float | None
    mode: str  # synchronous | asynchronous | unknown


def lag(primary: SiteStatus, secondary: SiteStatus, secondary_site: str) -> Lag:
    """How far ``secondary`` is behind ``primary``: bytes of WAL not yet replayed, and seconds
    (PostgreSQL's replay_lag of the secondary's stream, found by its application_name; else the time since
    its last replayed transaction when bytes remain); the mode is the walsender's sync state."""
    walsender = next((s for s in primary.standbys if s.name in (secondary.stream_name, secondary_site)), None)
    if walsender is None and len(primary.standbys) == 1:  # one standby streams: it is the secondary
        walsender = primary.standbys[0]
    mode = "unknown"
    if primary.reachable:
        mode = "synchronous" if walsender is not None and walsender.sync_state in ("sync", "quorum") \
            else "asynchronous"
    if not (primary.reachable and secondary.reachable and primary.lsn and secondary.lsn) or primary.in_recovery:
        return Lag(None, None, mode)
    behind = max(parse_lsn(primary.lsn) - parse_lsn(secondary.lsn), 0)
    seconds: float | None = 0.0
    if behind:
        if walsender is not None and walsender.replay_lag_seconds is not None:
            seconds = walsender.replay_lag_seconds
        elif secondary.last_replay_time is not None and primary.server_time is not None:
            seconds = max(primary.server_time - secondary.last_replay_time, 0.0)
        else:
            seconds = None
    return Lag(behind, seconds, mode)


# -- promotion --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PromotionReport:
    site: str
    mode: str
    epoch: int
    lsn: str | None  # planned: the primary's last WAL position, all replayed; forced: the bound
    bound_time: float | None  # forced: the last replayed transaction's commit time (s); else None
    seconds: float  # from the old primary's stop (or the start, forced) to the new one writable
    old_primary_fenced: bool
    steps: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def promote(mode: PromotionMode, target_site: str, target_url: str, other_site: str, other_url: str, *,
            catch_up_seconds: float = 60.0, timeout: float = 3.0,
            say: Callable[[str], None] | None = None) -> PromotionReport:
    """Promote ``target_site`` (its database a standby now) to be the namespace's primary.

    Refused with ArgumentError, nothing changed, when the target is not a standby or does not
    answer, when a planned promotion finds the primary unreachable, or when the target has no geo
    record (the primary site's nodes never ran with ``--geo-site``). StoreUnavailable when a step
    fails; a planned promotion whose secondary does not catch up puts the primary back first."""
    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(text)
        if say is not None:
            say(text)

    if target_site == other_site:
        raise ArgumentError(f"the two sites must have different names (both are '{target_site}')")
    target, other = probe(target_url, timeout=timeout), probe(other_url, timeout=timeout)
    check_promotion(mode, target.view(), other.view())
    if target.primary_site is None:
        raise ArgumentError(
            f"site '{target_site}' has no geo record: start the primary site's nodes with --geo-site "
            "first (they write it, and it replicates): nothing was changed")
    started = time.monotonic()
    fenced = False
    if other.reachable and not other.in_recovery:
        _fence(other_url, target_site, timeout)
        fenced = True
        step(f"site '{other_site}' stopped: read-only, its sessions ended, its record names '{target_site}'")
    if mode is PromotionMode.PLANNED:
        final = _final_lsn(other_url, timeout)
        step(f"site '{other_site}' last WAL position {final}; waiting for '{target_site}' to replay it")
        try:
            _wait_replayed(target_url, final, catch_up_seconds, timeout)
        except (StoreUnavailable, TimeoutError) as exc:
            _unfence(other_url, other_site, timeout)
            raise StoreUnavailable(f"site '{target_site}' did not replay up to {final} within "
                                   f"{catch_up_seconds:g} s ({exc}): site '{other_site}' is the primary "
                                   "again, nothing was promoted") from exc
        step(f"site '{target_site}' replayed up to {final}")
    with _session(target_url, timeout, "promote") as conn:
        conn.execute("SELECT pg_promote(true, 60)")
        row = conn.execute("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
                           "extract(epoch FROM pg_last_xact_replay_timestamp())::float8").fetchone()
        assert row is not None
        if row[0]:
            raise StoreUnavailable(f"site '{target_site}': pg_promote() did not end recovery within 60 s")
        bound_lsn, bound_time = row[1], row[2]
        step(f"site '{target_site}' promoted (pg_promote), last replayed {bound_lsn}")
        # The new primary may require a synchronous standby that streams from nobody yet (the old
        # primary, until it rejoins): the promotion's own transaction is flushed here and not waited on.
        conn.execute("SET synchronous_commit = local")
        with conn.transaction():
            conn.execute(CREATE_RECORD)
            current = conn.execute("SELECT epoch FROM sodalite_geo FOR UPDATE").fetchone()
            epoch = (0 if current is None else int(current[0])) + 1
            if mode is PromotionMode.FORCED:
                moved = move_counters(conn)
                step(f"{moved} partition counters moved to the start of the epoch after next")
            conn.execute(
                "INSERT INTO sodalite_geo (primary_site, epoch, changed_at, mode, bound_lsn, bound_time) "
                "VALUES (%(site)s, %(epoch)s, %(now)s, %(mode)s, %(lsn)s, %(time)s) ON CONFLICT (singleton) "
                "DO UPDATE SET primary_site = excluded.primary_site, epoch = excluded.epoch, "
                "changed_at = excluded.changed_at, mode = excluded.mode, bound_lsn = excluded.bound_lsn, "
                "bound_time = excluded.bound_time",
                {"site": target_site, "epoch": epoch, "now": _now_ms(), "mode": mode.value,
                 "lsn": bound_lsn if mode is PromotionMode.FORCED else None,
                 "time": None if mode is PromotionMode.PLANNED or bound_time is None else int(bound_time * 1000)})
        # A site promoted back carries the read-only setting its own stop wrote: clear it.
        conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")
        # pg_rewind reads the new timeline from the control file, which a promotion updates only at its
        # next checkpoint: without one, rejoining the old primary finds "no rewind required" and fails.
        conn.execute("CHECKPOINT")
    seconds = time.monotonic() - started
    step(f"site '{target_site}' is the primary (epoch {epoch})")
    if fenced:
        # The old primary's shutdown checkpoint would otherwise start exactly where the new primary's
        # timeline forks off, where pg_rewind finds nothing to rewind yet the server cannot follow the
        # new timeline: a checkpoint now puts a record of its own past the fork, and the rejoin rewinds.
        try:
            with _session(other_url, timeout, "checkpoint the old primary") as old:
                old.execute("CHECKPOINT")
        except StoreUnavailable:
            pass
    return PromotionReport(target_site, mode.value, epoch,
                           final if mode is PromotionMode.PLANNED else bound_lsn,
                           None if mode is PromotionMode.PLANNED else bound_time, seconds, fenced, steps)


# Every partition the database knows of (its counter rows, and every entity and sub-queue up to the
# highest partition number in use) moved as counter_after_forced_promotion says, in one statement.
_MOVE_COUNTERS: Final = f"""
    WITH highest AS (SELECT coalesce(max(partition), 0) AS p FROM sodalite_partitions),
    keys AS (
        SELECT entity, partition FROM sodalite_partitions
        UNION SELECT entity, partition FROM sodalite_counters
        UNION SELECT e.path_key || convert_to(s.suffix, 'UTF8'), n.p
        FROM sodalite_entities e, unnest(%(subs)s::text[]) AS s(suffix), highest h, generate_series(0, h.p) AS n(p)
    ),
    tops AS (
        SELECT k.entity, k.partition, GREATEST(coalesce(
            (SELECT max(last_sequence_number) FROM (
                SELECT last_sequence_number FROM sodalite_partitions x
                WHERE x.entity = k.entity AND x.partition = k.partition
                UNION ALL SELECT last_sequence_number FROM sodalite_counters x
                WHERE x.entity = k.entity AND x.partition = k.partition) h), 0)
            - (k.partition << {PARTITION_SHIFT}), 0) AS local
        FROM keys k
    )
    INSERT INTO sodalite_counters AS c
        (generation, entity, partition, last_sequence_number, active, scheduled, deferred, size_in_bytes)
    SELECT (SELECT generation FROM sodalite_ring), t.entity, t.partition,
        (t.partition << {PARTITION_SHIFT})
            + (((t.local >> {EPOCH_BITS}) + {EPOCHS_PER_FORCED_PROMOTION}) << {EPOCH_BITS}),
        0, 0, 0, 0
    FROM tops t
    ON CONFLICT (entity, partition, generation) DO UPDATE SET
        last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number)
""".replace("%(subs)s", "'{" + ",".join(f'"{s}"' for s in _SUB_QUEUES) + "}'")


def move_counters(conn: psycopg.Connection[TupleRow]) -> int:
    """Move every partition's counter as :func:`~sodalite.model.geo.counter_after_forced_promotion`
    says (in the caller's transaction); the number of partitions moved."""
    return conn.execute(_MOVE_COUNTERS).rowcount


class _session:
    def __init__(self, url: str, timeout: float, what: str) -> None:
        self._url, self._timeout, self._what = url, timeout, what
        self._conn: psycopg.Connection[TupleRow] | None = None

    def __enter__(self) -> psycopg.Connection[TupleRow]:
        try:
            self._conn = _connect(self._url, self._timeout)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"{redact(self._url)}: cannot {self._what}: {_describe(exc)}") from exc
        return self._conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        assert self._conn is not None
        self._conn.close()
        if isinstance(exc, psycopg.Error):
            raise StoreUnavailable(f"{redact(self._url)}: cannot {self._what}: {_describe(exc)}") from exc


def _fence(url: str, target_site: str, timeout: float) -> None:
    """Stop a primary: its record names ``target_site`` (its nodes stop serving), it is read-only,
    and every other session on it is ended (their open transactions roll back)."""
    with _session(url, timeout, "stop the old primary") as conn:
        with conn.transaction():
            conn.execute(CREATE_RECORD)
            conn.execute("UPDATE sodalite_geo SET primary_site = %s, changed_at = %s", (target_site, _now_ms()))
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")
        _end_other_sessions(conn)


def _end_other_sessions(conn: psycopg.Connection[TupleRow]) -> None:
    others = "pid <> pg_backend_pid() AND backend_type = 'client backend' AND datname = current_database()"
    conn.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {others}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # Sessions that reconnected since are read-only; wait for the ended ones to be gone.
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE " + others
                           + " AND backend_xid IS NOT NULL").fetchone()
        if row is None or row[0] == 0:
            return
        time.sleep(0.05)


def _unfence(url: str, site: str, timeout: float) -> None:
    with _session(url, timeout, "restart the primary") as conn:
        conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("UPDATE sodalite_geo SET primary_site = %s, changed_at = %s", (site, _now_ms()))


def _final_lsn(url: str, timeout: float) -> str:
    with _session(url, timeout, "read the old primary's WAL position") as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])


def _wait_replayed(url: str, lsn: str, seconds: float, timeout: float) -> None:
    goal = parse_lsn(lsn)
    deadline = time.monotonic() + seconds
    with _session(url, timeout, "follow the secondary's replay") as conn:
        while True:
            row = conn.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
            if row is not None and row[0] is not None and parse_lsn(str(row[0])) >= goal:
                return
            if time.monotonic() > deadline:
                replayed = format_lsn(parse_lsn(str(row[0]))) if row is not None and row[0] else "nothing"
                raise TimeoutError(f"replayed {replayed}")
            time.sleep(0.02)


def _now_ms() -> int:
    return int(time.time() * 1000)
