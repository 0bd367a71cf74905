"""The PostgreSQL messaging store: the port over one database (see :mod:`sodalite.store.postgres`).

Failures. Every psycopg or pool error, and every use after :meth:`PostgresStore.close`, raises
:class:`~sodalite.errors.StoreUnavailable` (:class:`~sodalite.errors.StoreFull` for PostgreSQL's
``disk_full``), with the driver's exception as ``__cause__``; no psycopg type crosses the port. A
connection lost mid-batch is discarded by the pool and replaced on the next call, so a database
that comes back is used again without a restart. A batch whose ``COMMIT`` was sent but not
acknowledged may or may not be durable: its id is looked up on the primary (the new one after a
failover) and it is reported applied only if it committed, as not applied otherwise
(:mod:`sodalite.store.postgres.failover`, which also chooses the server of a multi-host URL and fences
an old primary by its timeline).
"""


from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import psycopg
import psycopg.errors
from psycopg.abc import Params
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from sodalite.errors import ConfigurationError, StoreFull, StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.store import port
from sodalite.store.lifecycle import OpenOnce
from sodalite.store.postgres import failover
from sodalite.store.postgres.feed import _NOTIFY, DUE, PostgresChangeFeed, _announcements, channel_name
from sodalite.store.postgres.plans import _GENERIC_PLAN, _Plan, _plans, _results, _Step
from sodalite.store.postgres.ring import RingMaintenance
from sodalite.store.postgres.schema import _CREATE_VERSION_TABLE, MIGRATIONS, SCHEMA_VERSION
from sodalite.store.postgres.statements import (
    _STORED_COLUMNS,
    SQL,
)
from sodalite.store.postgres.values import (
    CALL_WAIT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_ROTATE_BYTES,
    MIGRATION_LOCK_KEY,
    _describe,
    _int64,
    _key,
    _partition_params,
    _Rows,
    _stored_from_row,
    _text,
    _time,
    _utf8,
    check_url,
    durable_commits,
    log,
    redact,
)


class PostgresStore(RingMaintenance, OpenOnce):
    """The store port over one PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 application_name: str = "sodalite", rotate_bytes: int = DEFAULT_ROTATE_BYTES,
                 standby_ok: bool = False) -> None:
        self._url = check_url(url)
        self._shown = redact(url)
        self._label = f"PostgreSQL store {self._shown}"
        if connect_timeout <= 0:
            raise ConfigurationError(f"connect_timeout: must be > 0, got {connect_timeout}")
        if rotate_bytes <= 0:
            raise ConfigurationError(f"rotate_bytes: must be > 0, got {rotate_bytes}")
        self._timeout = connect_timeout
        self._application_name = application_name
        self._rotate_bytes = rotate_bytes
        self._pool: ConnectionPool[psycopg.Connection[TupleRow]] | None = None
        self._closed = False
        # Open on a standby (a geo-replication secondary): every call is refused until a primary answers.
        self._standby_ok = standby_ok
        # Which server of a multi-host URL is written to, fenced by timeline (failover.py).
        try:
            self._failover = failover.Failover(url, shown=self._shown, connect_timeout=connect_timeout,
                                                  application_name=application_name)
        except (ValueError, psycopg.Error) as exc:
            raise ConfigurationError(f"PostgreSQL store URL {self._shown!r}: {exc}") from None
        # LISTEN/NOTIFY: this store's name in its own notifications (so its node skips them) and the
        # channel of its schema (known once open() has connected).
        self.origin = uuid.uuid4().hex[:12]
        self._channel: str | None = None
        self._due_channel = ""
        # Diagnostics (the drill reads them): network round trips (pipeline syncs and single
        # statements) and statements sent; ring switches, generations truncated, and truncations
        # put off because a lock was not granted within LOCK_TIMEOUT_MS; the same for the history's ring.
        self.round_trips = 0
        self.statements = 0
        self.ring_switches = 0
        self.truncations = 0
        self.lock_timeouts = 0
        self.history_switches = 0
        self.history_truncations = 0
        self.outcome_lookups = 0  # COMMITs unanswered, looked up by batch id ...
        self.outcomes_committed = 0  # ... and found committed

    @property
    def url(self) -> str:
        """The URL without its password."""
        return self._shown

    # -- the port ---------------------------------------------------------------------------------

    def open(self) -> None:
        if self._is_open(self._pool):
            return
        pool: ConnectionPool[psycopg.Connection[TupleRow]] = ConnectionPool(
            self._url, min_size=1, max_size=1, open=False, timeout=min(self._timeout, CALL_WAIT),
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout)),
                    "application_name": self._application_name},
            # A failed reconnection is not retried in the background: the next call asks for a connection
            # and so tries again (the partitions' reload loop makes those calls while the database is away).
            reconnect_timeout=0,
            name=f"sodalite-{self._shown}",
            configure=durable_commits,
            connection_class=self._failover.connection_class(),  # the primary on the highest timeline
        )
        try:
            # The first connection decides: an unreachable database fails here, with what to do.
            with self._failover.connect(autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                        application_name=self._application_name) as conn:
                durable_commits(conn)
                self._migrate(conn)
                row = conn.execute("SELECT current_schema()").fetchone()
        except failover.NoPrimary as exc:
            if self._standby_ok and self._failover.status().role == "standby":
                row = self._open_on_standby()
            elif self._failover.status().role == "unreachable":
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: cannot connect to any of {', '.join(self._failover.hosts)}: "
                    f"{exc}; check that the server is running and reachable, and that the URL's user, password "
                    "and database are right") from exc
            else:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: refused: {exc}. Sodalite writes only to a primary: name the "
                    "primary among the URL's hosts (a standby is read-only)") from exc
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: cannot connect: {_describe(exc)}; check that the server "
                "is running and reachable, and that the URL's user, password and database are right"
            ) from exc
        pool.open(wait=False)
        self._pool = pool
        self._channel = channel_name(str(row[0])) if row is not None and row[0] is not None else None
        self._due_channel = channel_name(str(row[0]), DUE) if row is not None and row[0] is not None else ""

    def change_feed(self, *, application_name: str | None = None) -> PostgresChangeFeed:
        """A listener for the notifications other stores on this database and schema send (one
        connection of its own; see :class:`PostgresChangeFeed`), skipping this store's own."""
        return PostgresChangeFeed(self._url, origin=self.origin, connect_timeout=self._timeout,
                                  application_name=application_name or f"{self._application_name} listen"[:63],
                                  failover=self._failover)

    def status(self) -> failover.StoreStatus:
        """Whether this store can write now and, if not, why (last known; no I/O: see failover.py)."""
        return self._failover.status()

    def probe(self) -> failover.StoreStatus:
        """Ask every server of the URL now (blocking) and return the resulting status."""
        return self._failover.probe()

    def apply(self, batch: Sequence[port.StoreOp]) -> tuple[port.OpResult, ...]:
        pool = self._require()
        batch = port.prepare_batch(batch)
        plans = _plans(batch)  # validate and encode everything before touching the database
        takes = sorted({key for plan in plans for key in plan.takes})
        steps = self._steps(batch, plans, takes)
        if not steps:
            return _results(plans, [], len(takes))
        # An all-or-none Settle (a transaction's) is checked before the COMMIT, which then follows, or a
        # ROLLBACK and SettleFenced.
        fenced = any(isinstance(op, port.Settle) and op.all_or_none for op in batch)
        # Every batch records its id and sends its COMMIT once its results are in: an unanswered COMMIT's
        # outcome is then looked up by id, and its results are at hand (store/failover.py).
        batch_id = uuid.uuid4()
        steps.append(_Step(failover.RECORD_BATCH, {"batch": batch_id}))
        results: tuple[port.OpResult, ...] = ()
        try:
            with pool.connection() as conn:
                try:
                    results = _results(plans, self._send(conn, steps), len(takes))
                    if fenced:
                        for index, (op, result) in enumerate(zip(batch, results, strict=True)):
                            port.check_all_or_none(index, op, result)  # SettleFenced: rolled back below
                    self._commit(conn, batch_id)
                except BaseException:
                    self._rollback(conn)
                    raise
        except failover.CommitUnanswered as unanswered:
            self._outcome(unanswered)  # returns when the batch committed; StoreUnavailable otherwise
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._not_applied(exc) from exc
        return results

    def _steps(self, batch: Sequence[port.StoreOp], plans: Sequence[_Plan],
               takes: Sequence[tuple[bytes, int]]) -> list[_Step]:
        """The batch's statements: the partitions' base rows taken (in key order, so two batches never
        wait on each other in a cycle), each operation's statements, and its notifications."""
        steps = [_Step(SQL["take_partition"], {"e": e, "p": p}) for e, p in takes]
        steps += [step for plan in plans for step in plan.steps]
        if self._channel is not None and steps:
            steps += self._notifications(batch, self._channel)
        return steps

    def _send(self, conn: psycopg.Connection[TupleRow], steps: Sequence[_Step]) -> list[_Rows]:
        """BEGIN and the statements go out together, and one sync brings every result back (one round
        trip); the COMMIT follows apart (:meth:`_commit`), so the results are at hand if it goes
        unanswered. A statement that fails makes the server skip the rest up to the sync; the caller
        rolls the transaction back, so nothing of the batch is applied."""
        extra = 0  # plan_cache_mode switches (_GENERIC_PLAN)
        try:
            cursors = []
            with conn.pipeline():
                # READ COMMITTED: a statement after SQL["take_partition"] sees what the partition's
                # previous holder committed.
                conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                generic = False
                for step in steps:
                    if step.generic != generic:
                        conn.execute(_GENERIC_PLAN[step.generic])
                        generic = step.generic
                        extra += 1
                    cur = conn.cursor()
                    if step.many is not None:
                        cur.executemany(step.sql, step.many)
                    else:
                        cur.execute(step.sql, step.params)
                    cursors.append(cur)
            return [cur.fetchall() if step.rows else [] for step, cur in zip(steps, cursors, strict=True)]
        finally:
            self.round_trips += 1
            self.statements += 2 + extra + sum(len(s.many) if s.many is not None else 1 for s in steps)

    def _commit(self, conn: psycopg.Connection[TupleRow], batch_id: uuid.UUID) -> None:
        """COMMIT; a COMMIT that the connection's loss or the server's shutdown left unanswered raises
        :class:`~sodalite.store.failover.CommitUnanswered` (its outcome is then looked up)."""
        self.round_trips += 1
        try:
            conn.execute("COMMIT")
        except psycopg.OperationalError as lost:
            if conn.broken or lost.sqlstate is None or lost.sqlstate.startswith("57P"):
                raise failover.CommitUnanswered(batch_id, lost) from lost
            raise

    def _not_applied(self, exc: psycopg.Error | PoolTimeout) -> StoreUnavailable | StoreFull:
        """What a batch that failed before its COMMIT reports: StoreFull on a full disk, else
        StoreUnavailable (a lost connection also tells the failover to choose a server again)."""
        if isinstance(exc, psycopg.errors.DiskFull):
            return StoreFull(
                f"PostgreSQL store {self._shown}: the database's disk is full: new messages are refused "
                f"until space is freed; nothing of this batch was stored ({_describe(exc)})")
        if isinstance(exc, psycopg.OperationalError | PoolTimeout):
            self._failover.lost(_describe(exc))
        return StoreUnavailable(f"PostgreSQL store {self._shown}: batch not applied: {_describe(exc)}")

    def _outcome(self, unanswered: failover.CommitUnanswered) -> None:
        """A batch whose COMMIT went unanswered: return if it committed (on the primary now), else
        raise StoreUnavailable (not committed, or not known within OUTCOME_WAIT)."""
        self._failover.lost(str(unanswered))
        self.outcome_lookups += 1
        committed = failover.resolve(unanswered.batch_id, self._require().connection)
        if committed:
            self.outcomes_committed += 1
            log.warning("PostgreSQL store %s: %s; it committed: its results stand", self._shown, unanswered)
            return
        what = "it did not commit" if committed is False else "its outcome is unknown (no primary answered)"
        log.warning("PostgreSQL store %s: %s; %s: refused (retryable)", self._shown, unanswered, what)
        raise StoreUnavailable(f"PostgreSQL store {self._shown}: batch not applied: {unanswered}; {what}")

    def _notifications(self, batch: Sequence[port.StoreOp], channel: str) -> list[_Step]:
        """The batch's notifications: queued by the transaction, sent by PostgreSQL when it commits
        (never on a rollback): one more statement in the pipeline, not one more round trip."""
        ready, due = _announcements(batch, self.origin)
        if not ready and not due:
            return []
        channels = [channel] * len(ready) + [self._due_channel] * len(due)
        return [_Step(_NOTIFY, {"channels": channels, "payloads": ready + due})]

    def load_entities(self) -> list[port.EntityRecord]:
        rows, rule_rows = self._read("load entities", [(SQL["select_entities"], ()), (SQL["select_rules"], ())])
        rules: dict[bytes, list[object]] = {}
        for subscription, rule in rule_rows:
            try:
                rules.setdefault(bytes(subscription), []).append(json.loads(rule))
            except ValueError as exc:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: a rule of {_text(subscription)!r} is corrupt: {exc}") from exc
        records: list[port.EntityRecord] = []
        for path, kind, properties, path_key in rows:
            try:
                decoded = json.loads(properties)
            except ValueError as exc:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: entity {path!r} has corrupt properties: {exc}") from exc
            if kind == port.SUBSCRIPTION_KIND:
                decoded["Rules"] = rules.get(bytes(path_key), [])
            records.append(port.EntityRecord(path=path, kind=kind, properties=decoded))
        return records

    def stats(self, ref: port.PartitionRef) -> port.PartitionStats:
        counts = self.counts(ref)
        return port.PartitionStats(message_count=counts.message_count, size_in_bytes=counts.size_in_bytes)

    # -- reads ----------------------------------------------------------------------------------

    def peek(self, ref: port.PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[port.StoredMessage, ...]:
        if count <= 0:
            return ()
        params = {**_partition_params(ref), "from": _time(from_sequence_number, "from_sequence_number"),
                  "n": _time(count, "count")}
        sql = (f"SELECT {_STORED_COLUMNS} FROM sodalite_messages WHERE entity = %(e)s AND partition = %(p)s "
               "AND sequence_number >= %(from)s")
        if states is not None:
            sql += " AND state = ANY(%(states)s::smallint[])"
            params["states"] = sorted(int(s) for s in states)
        if session_id is not None:
            sql += " AND session_id = %(sid)s"
            params["sid"] = _utf8(session_id, "session id")
        sql += " ORDER BY sequence_number LIMIT %(n)s"
        (rows,) = self._read(f"peek {ref.entity!r} partition {ref.partition}", [(sql, params)])
        return tuple(_stored_from_row(r) for r in rows)

    def session_ids(self, ref: port.PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        params = {**_partition_params(ref), "states": sorted(int(s) for s in states)}
        sql = ("SELECT DISTINCT session_id FROM sodalite_messages WHERE entity = %(e)s AND partition = %(p)s "
               "AND session_id IS NOT NULL AND state = ANY(%(states)s::smallint[]) ORDER BY session_id")
        (rows,) = self._read(f"list the sessions of {ref.entity!r} partition {ref.partition}", [(sql, params)])
        return tuple(sorted(str(_text(sid)) for (sid,) in rows))

    def fetch(self, ref: port.PartitionRef, sequence_numbers: Sequence[int]) -> tuple[port.StoredMessage, ...]:
        if not sequence_numbers:
            return ()
        params = {**_partition_params(ref), "seq": [_int64(n, "sequence number") for n in sequence_numbers]}
        (rows,) = self._read(f"fetch from {ref.entity!r} partition {ref.partition}", [(SQL["select_fetch"], params)])
        return tuple(_stored_from_row(r) for r in rows)

    def counts(self, ref: port.PartitionRef) -> port.PartitionCounts:
        (rows,) = self._read(f"read the counters of {ref.entity!r} partition {ref.partition}",
                             [(SQL["select_counts"], _partition_params(ref))])
        return self._counts(rows)

    def next_due_many(self, refs: Sequence[port.PartitionRef], now: int) -> tuple[int | None, ...]:
        if not refs:
            return ()
        keys = [_key(ref) for ref in refs]
        (rows,) = self._read(f"read the next due times of {len(refs)} partitions",
                             [(SQL["select_next_due_many"], {"es": [e for e, _ in keys], "ps": [p for _, p in keys],
                                                       "now": _time(now, "now")})])
        return tuple(None if due is None else int(due) for (due,) in rows)

    def counts_many(self, refs: Sequence[port.PartitionRef]) -> tuple[port.PartitionCounts, ...]:
        if not refs:
            return ()
        keys = [_key(ref) for ref in refs]
        (rows,) = self._read(f"read the counters of {len(refs)} partitions",
                             [(SQL["select_counts_many"], {"es": [e for e, _ in keys], "ps": [p for _, p in keys]})])
        return tuple(port.PartitionCounts(active=int(a), scheduled=int(s), deferred=int(d), size_in_bytes=int(b),
                                          last_sequence_number=int(last), first_sequence_number=None)
                     for a, s, d, b, last in rows)

    def next_due(self, ref: port.PartitionRef, now: int) -> int | None:
        (rows,) = self._read(f"read what falls due in {ref.entity!r} partition {ref.partition}",
                             [(SQL["select_next_due"], {**_partition_params(ref), "now": _time(now, "now")})])
        due = rows[0][0]
        return None if due is None else int(due)

    def partition_meta(self, ref: port.PartitionRef) -> port.PartitionMeta:
        key = _key(ref)
        counters, history, states, move_keys = self._read(
            f"read {ref.entity!r} partition {ref.partition}",
            [(SQL["select_counts"], _partition_params(ref)), (SQL["select_history"], key),
             (SQL["select_session_states"], key),
             (SQL["select_move_keys"], key)])
        return port.PartitionMeta(
            counts=self._counts(counters),
            duplicate_history=tuple((bytes(mid).decode("utf-8"), at) for mid, at in history),
            session_states=tuple((bytes(sid).decode("utf-8"), bytes(state), at) for sid, state, at in states),
            move_keys=tuple(bytes(k).decode("utf-8") for (k,) in move_keys),
        )

    @staticmethod
    def _counts(rows: _Rows) -> port.PartitionCounts:
        if not rows:
            return port.PartitionCounts(active=0, scheduled=0, deferred=0, size_in_bytes=0, last_sequence_number=0,
                                        first_sequence_number=None)
        active, scheduled, deferred, size, last, first = rows[0]
        return port.PartitionCounts(active=int(active), scheduled=int(scheduled), deferred=int(deferred),
                                    size_in_bytes=int(size), last_sequence_number=int(last),
                                    first_sequence_number=None if first is None else int(first))

    # -- housekeeping -----------------------------------------------------------------------------

    def maintain(self) -> bool:
        pool = self._require()
        try:
            with pool.connection() as conn:
                self._turn_ring(conn)
                if self._failover.prune_due():
                    failover.prune(conn)
                if self._failover.superseded():
                    conn.close()  # a standby was promoted meanwhile: the pool drops it, the next call chooses
        except (psycopg.Error, PoolTimeout):
            pass  # housekeeping only: the next call tries again
        return True  # disk-full recovery is the server's

    def close(self) -> None:
        self._closed = True
        self._failover.closed()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5)

    # -- internals --------------------------------------------------------------------------------

    def _read(self, what: str, queries: Sequence[tuple[str, Params]]) -> list[_Rows]:
        """Run read queries in one snapshot (one pipeline); their rows in order."""
        pool = self._require()
        try:
            with pool.connection() as conn:
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                        cursors = [conn.execute(statement, params) for statement, params in queries]
                        conn.execute("COMMIT")
                except BaseException:
                    self._rollback(conn)
                    raise
                finally:
                    self.round_trips += 1
                    self.statements += 2 + len(queries)
                return [cur.fetchall() for cur in cursors]
        except (psycopg.Error, PoolTimeout, UnicodeDecodeError) as exc:
            if isinstance(exc, psycopg.OperationalError | PoolTimeout):
                self._failover.lost(_describe(exc))
            raise StoreUnavailable(f"PostgreSQL store {self._shown}: cannot {what}: {_describe(exc)}") from exc

    @staticmethod
    def _rollback(conn: psycopg.Connection[TupleRow]) -> None:
        """End a failed transaction so the pooled connection is clean; a broken one the pool discards."""
        if conn.broken or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _migrate(self, conn: psycopg.Connection[TupleRow]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(_CREATE_VERSION_TABLE)
            row = conn.execute("SELECT version FROM sodalite_schema_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: the database's Sodalite schema is version {version}, "
                    f"newer than this Sodalite knows ({SCHEMA_VERSION}): a newer Sodalite has used it. "
                    "Upgrade this Sodalite to that release (or newer), or point it at another database")
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    conn.execute(statement)
            if version == 0:
                conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                conn.execute("UPDATE sodalite_schema_version SET version = %s", (SCHEMA_VERSION,))

    def _open_on_standby(self) -> TupleRow | None:
        """``standby_ok``: the schema as a standby holds it (it must be this Sodalite's: a standby cannot
        migrate), and the schema's name; the store then answers nothing until a primary is reachable."""
        try:
            with self._failover.connect_standby(connect_timeout=max(1, int(self._timeout)),
                                                application_name=self._application_name) as conn:
                found = conn.execute("SELECT to_regclass('sodalite_schema_version') IS NOT NULL").fetchone()
                version = conn.execute("SELECT version FROM sodalite_schema_version").fetchone() if (
                    found is not None and found[0]) else None
                row: TupleRow | None = conn.execute("SELECT current_schema()").fetchone()
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: cannot read the standby: {_describe(exc)}") from exc
        if version is None or int(version[0]) != SCHEMA_VERSION:
            raise StoreUnavailable(
                f"PostgreSQL store {self._shown}: the standby's Sodalite schema is "
                f"{'absent' if version is None else f'version {version[0]}'}, not {SCHEMA_VERSION}: start this "
                "Sodalite on the primary first (a standby cannot be migrated)")
        log.warning("PostgreSQL store %s: opened on a standby: %s; nothing is written until a primary answers",
                    self._shown, self._failover.status().reason)
        return row

    def _require(self) -> ConnectionPool[psycopg.Connection[TupleRow]]:
        if self._pool is None:
            raise self._missing()
        return self._pool
