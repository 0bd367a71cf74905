"""The ring of message, counter and history tables: rotation and retirement of drained generations.

Bloat and long transactions (the failure mode of queues on PostgreSQL). A queue inserts, updates
(claims) and deletes every message, so its table and indexes fill with dead row versions that only
VACUUM reclaims, and VACUUM cannot reclaim any version that a still-open transaction might see: a
report or backup holding a snapshot for ten minutes makes every claim walk ten minutes' worth of
dead index entries at the head of the queue. So the messages live in a ring of
:data:`GENERATIONS` tables (``sodalite_messages`` is list-partitioned by ``generation``;
``sodalite_ring`` names the one new rows go to). :meth:`PostgresStore.maintain` (called between
batches) rotates the ring: when the current generation's table has grown past ``rotate_bytes`` and
the next one is empty, new rows go to the next one; a generation that is not current and holds at
most :data:`MOVE_LIMIT` live rows (drained: a queue consumes in order) has them copied into the
current one and is then emptied with ``TRUNCATE``, which drops its dead versions at once, whatever
snapshot is open, instead of waiting for VACUUM. The dead rows any claim can meet are then bounded
by ``rotate_bytes``, and the tables' size stays bounded while the long transaction lasts. While
VACUUM works (no long transaction), the current table never reaches ``rotate_bytes`` and the ring
does not turn. ``TRUNCATE`` needs an ``ACCESS EXCLUSIVE`` lock: the maintenance takes it with a
short ``lock_timeout`` (:data:`LOCK_TIMEOUT_MS`) and tries again at the next call rather than
queue behind a reader of Sodalite's tables (and block every operation queued behind itself).
The maintenance also re-analyzes the current generation after :data:`ANALYZE_AFTER` changes: a
planner without statistics takes a partition for one row and scans all of its rows to find the
numbers a statement names, where an index condition on them is what keeps a batch O(batch).

Counters in the ring. A counter row updated by every batch would leave one version per batch that
a held snapshot keeps VACUUM from removing, and every lookup of the row would walk them. So the
base rows are never updated by a batch (only locked), and what batches change goes into the
partition's row of the current generation of ``sodalite_counters``, list-partitioned like the
messages: retiring a generation adds its counter rows to the current generation's, in the same
transaction as the messages' move, and truncates both tables. The versions a counter row can leave
are then bounded by the batches between two switches; the ring also switches once the current
counter table reaches :data:`COUNTER_ROTATE_BYTES` (a drain that deletes messages grows the
counters, not the message table).

The history's ring. The duplicate-detection history (``sodalite_duplicate_history``) is
list-partitioned by generation too, with a current generation of its own
(``sodalite_ring.history_generation``): its rows leave when their window has passed (the core
forgets them), not when messages are consumed, so its tables drain on a clock of their own. New ids
go to the current table; it is left for the next once it reaches :data:`HISTORY_ROTATE_BYTES` and
the next is empty; a table that is not current and holds at most :data:`MOVE_LIMIT` ids has them
copied on and is truncated, as the messages' are. An id may then be in two tables; it counts at its
latest time. Duplicate detection across nodes: :class:`ClaimMessageIds` takes the partition's base
row first (as an append does), then inserts the ids not seen within the window, marked with the
batch's claim token, and returns them; a gated :class:`Append` stores only the messages whose id
carries that mark (checked in its own statement). The row lock orders two batches taking one id,
and each statement's READ COMMITTED snapshot sees what the previous holder committed, so one takes
it. (A unique key cannot arbitrate: on a partitioned table it would have to include the
generation.) Not in a ring: session state and move keys, and ``sodalite_ring`` itself (one version
per switch). The drill
``benchmarks/pg_long_transaction.py`` measures the tables while a long transaction is open
(docs/postgresql.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
import psycopg.errors
from psycopg.rows import TupleRow

from sodalite.store.postgres.statements import (
    _ADD_COUNTERS,
    _ALL_COLUMNS,
    _COUNTER_COLUMNS,
    _STORED_COLUMNS,
    SQL,
)
from sodalite.store.postgres.values import (
    ANALYZE_AFTER,
    COUNTER_ROTATE_BYTES,
    GENERATIONS,
    HISTORY_ROTATE_BYTES,
    LOCK_TIMEOUT_MS,
    MOVE_LIMIT,
)


class RingMaintenance:
    """The ring's maintenance (see "Bloat and long transactions" in :mod:`sodalite.store.postgres`):
    what :meth:`PostgresStore.maintain` runs between batches. A mixin of the store, whose counters
    (the drill reads them) it moves."""

    _rotate_bytes: int
    round_trips: int
    ring_switches: int
    truncations: int
    lock_timeouts: int
    history_switches: int
    history_truncations: int

    def _turn_ring(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Truncate drained generations (moving their few live rows on), then switch the current
        generation to the next one once the current table has grown past ``rotate_bytes``."""
        row = conn.execute(SQL["select_ring"]).fetchone()
        self.round_trips += 1
        assert row is not None
        current = int(row[0])
        messages = [int(size) for size in row[1:1 + GENERATIONS]]
        counters = [int(size) for size in row[1 + GENERATIONS:1 + 2 * GENERATIONS]]
        self._turn_history(conn, int(row[1 + 2 * GENERATIONS]), [int(size) for size in row[2 + 2 * GENERATIONS:]])
        sizes = [m + c for m, c in zip(messages, counters, strict=True)]
        for step in range(1, GENERATIONS):  # oldest first
            generation = (current + step) % GENERATIONS
            if sizes[generation] > 0 and self._retire(conn, generation, current):
                sizes[generation] = 0
        self._analyze(conn, current)
        following = (current + 1) % GENERATIONS
        grown = messages[current] >= self._rotate_bytes or counters[current] >= COUNTER_ROTATE_BYTES
        if grown and sizes[following] == 0:
            conn.execute("UPDATE sodalite_ring SET generation = %s WHERE generation = %s", (following, current))
            self.round_trips += 1
            self.ring_switches += 1

    def _turn_history(self, conn: psycopg.Connection[TupleRow], current: int, sizes: list[int]) -> None:
        """The history's ring: truncate drained generations (their few live ids moved on), then
        switch to the next table once the current one has grown past HISTORY_ROTATE_BYTES."""
        for step in range(1, GENERATIONS):  # oldest first
            generation = (current + step) % GENERATIONS
            if sizes[generation] > 0 and self._retire_history(conn, generation, current):
                sizes[generation] = 0
        following = (current + 1) % GENERATIONS
        if sizes[current] >= HISTORY_ROTATE_BYTES and sizes[following] == 0:
            conn.execute("UPDATE sodalite_ring SET history_generation = %s WHERE history_generation = %s",
                         (following, current))
            self.round_trips += 1
            self.history_switches += 1

    def _retire_history(self, conn: psycopg.Connection[TupleRow], generation: int, current: int) -> bool:
        """Empty a history generation that is not current once at most MOVE_LIMIT ids are left in it
        (the others were forgotten as their window passed): copy those into the current one (an id
        there too keeps its later time) and TRUNCATE it (:meth:`_empty_drained`)."""
        table = f"sodalite_duplicate_history_g{generation}"
        done = self._empty_drained(conn, table, [
            "INSERT INTO sodalite_duplicate_history AS h (generation, entity, partition, message_id, seen_at, claim) "
            f"SELECT {current:d}, entity, partition, message_id, seen_at, claim FROM {table} "
            "ON CONFLICT (entity, partition, message_id, generation) "
            "DO UPDATE SET seen_at = GREATEST(h.seen_at, excluded.seen_at)"])
        self.history_truncations += done
        return done

    def _analyze(self, conn: psycopg.Connection[TupleRow], generation: int) -> None:
        """Refresh the planner's statistics of the current generation once it has changed enough.

        The statements find messages by (entity, partition, sequence numbers); a planner that
        believes a partition holds one row (a table never analyzed, or an entity newer than its
        statistics) may scan the partition's rows instead of looking the numbers up. Autovacuum's
        ANALYZE comes at most once a minute and not at all for the ring's parent table.
        """
        table = f"sodalite_messages_g{generation}"
        row = conn.execute("SELECT n_mod_since_analyze, n_live_tup FROM pg_stat_user_tables "
                           "WHERE relid = %s::regclass", (table,)).fetchone()
        self.round_trips += 1
        if row is not None and int(row[0]) >= ANALYZE_AFTER and int(row[1]) > 0:
            conn.execute(f"ANALYZE {table}")
            self.round_trips += 1

    def _retire(self, conn: psycopg.Connection[TupleRow], generation: int, current: int) -> bool:
        """Empty a generation that is not current, if it is drained: copy its live rows into the
        current one, add its counter rows to the current one's, and TRUNCATE both tables
        (:meth:`_empty_drained`). True when done."""
        table = f"sodalite_messages_g{generation}"
        counters = f"sodalite_counters_g{generation}"
        done = self._empty_drained(conn, table, [
            f"INSERT INTO sodalite_messages ({_ALL_COLUMNS}) "
            f"SELECT {current:d}, entity, partition, {_STORED_COLUMNS} FROM {table}",
            f"INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
            f"SELECT {current:d}, entity, partition, last_sequence_number, active, scheduled, "
            f"deferred, size_in_bytes FROM {counters} {_ADD_COUNTERS}"], also=counters)
        self.truncations += done
        return done

    def _empty_drained(self, conn: psycopg.Connection[TupleRow], table: str, moves: Sequence[str],
                       also: str | None = None) -> bool:
        """The ring's retirement of one generation: when at most MOVE_LIMIT rows are left in
        ``table``, in one transaction lock it (and ``also``) with a short lock timeout, run ``moves``
        (copying what is left into the current generation) and TRUNCATE them. A lock not had in time
        (a reader of the table, say) gives up until the next maintenance. True when done."""
        live = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT {MOVE_LIMIT + 1}) s").fetchone()
        self.round_trips += 1
        if live is None or int(live[0]) > MOVE_LIMIT:
            return False
        tables = table if also is None else f"{table}, {also}"
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                conn.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
                for move in moves:
                    conn.execute(move)
                conn.execute(f"TRUNCATE {tables}")
        except psycopg.errors.LockNotAvailable:
            self.lock_timeouts += 1
            return False
        finally:
            self.round_trips += 5 + len(moves)  # BEGIN, SET, LOCK, the moves, TRUNCATE, COMMIT
        return True
