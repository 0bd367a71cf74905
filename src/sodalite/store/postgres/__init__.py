"""The PostgreSQL messaging store: one database, one transaction per ``apply``, on psycopg 3.

Modules: ``store`` (the port), ``plans`` (one plan per operation, in a table), ``statements`` (the
SQL), ``schema`` and ``migrations/`` (numbered SQL files), ``ring`` (the ring's maintenance),
``feed`` (NOTIFY payloads and the LISTEN feed), ``values`` (settings, URLs, values to columns).

Theory of operation. The store keeps what the SQLite store keeps (messages with their locks, each
partition's counters, duplicate-detection history, session state and session locks, move keys,
entity records), in tables prefixed ``sodalite_`` in the first schema of the connection's
``search_path``, so it can share a database the operator already runs and backs up. One ``apply``
is one transaction sent as one pipeline (``BEGIN``, one statement per operation, or a few for a
mixed settlement, ``COMMIT``, then one sync): one network round trip per batch whatever its size,
because every operation is one set-based statement over arrays (``unnest``), not one statement per
message. Reads are likewise one pipelined read-only snapshot each. ``apply`` returns only after
PostgreSQL acknowledged the ``COMMIT``; with the default ``synchronous_commit = on`` the WAL is
flushed (and replicated, if the server requires synchronous standbys).

Sequence numbers and counters. A partition's counters (the high-water mark, the active, scheduled
and deferred counts and the total size) are the sum of its base row (``sodalite_partitions``) and
of its row in each generation of ``sodalite_counters`` (the high-water mark: their maximum), so
:meth:`PostgresStore.counts` reads at most five rows. An :class:`Append` first takes the base row
(a statement of its own that locks it without writing it: ``ON CONFLICT DO UPDATE … WHERE
false``), then, in the next statement, whose snapshot sees what the previous holder committed,
numbers the messages above the high-water mark and raises its current generation's row by the
batch (``INSERT … ON CONFLICT DO UPDATE``): the lock is held until the commit, so a higher number
never becomes visible before a lower one, whichever node appends (not a ``SEQUENCE``, whose numbers
can commit out of order). Dead-letters and moves take their target's base row the same way. Every
statement that adds, removes or changes the state or size of messages adds its changes to the
partition's row of the current generation in the same statement (a data-modifying ``WITH``).

Claims and fencing. A :class:`Claim` is one ``UPDATE … FROM (SELECT … ORDER BY sequence_number
LIMIT n FOR UPDATE SKIP LOCKED)`` over the ready index (entity, partition, state, sequence
number): two transactions never take the same row, and one never waits for another's rows.
Settlements and renewals are set-based statements joined to ``unnest`` arrays of (sequence number,
token), with the fence (the row carries the token and ``locked_until > now``) in the ``WHERE``
clause; the rows they return say which items applied. Session locks are rows of
``sodalite_session_locks`` taken with an upsert that only replaces a lapsed lock.

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

Notifications (several nodes on one database). A batch that makes messages ready in a partition
(ACTIVE appends, activation, abandon and release, dead-letters and moves into it, a released session
lock) or changes entity records ends with one ``pg_notify`` statement queuing one notification per
such partition (and one for the entities) on its schema's channel: PostgreSQL delivers them at
commit, never after a rollback. A batch that appends scheduled messages also names, per partition,
the earliest of their times on the schema's second channel (``channel_name(schema, DUE)``), so every
node acts on that time even if the node that scheduled them died.
Each node listens with :class:`PostgresChangeFeed` (one connection of its own) and reads the store
again for the partition named; see docs/postgresql.md.

Plans. Settlements and renewals run on their prepared statement's generic plan (:data:`_GENERIC_PLAN`,
switched transaction-locally in the pipeline), which PostgreSQL would otherwise re-plan at each
execution. Settle operations of one partition that follow each other in a batch and only complete
distinct messages (a group commit of receivers' completes) are one statement (:func:`_plans`).

Schema. Numbered migrations (``migrations/NNNN_*.sql``, :data:`MIGRATIONS`), recorded in
``sodalite_schema_version``, run by ``open`` in one transaction under a transaction-scoped
advisory lock, so several brokers starting on one database migrate it once. A database whose schema is newer than
this code knows makes ``open`` raise StoreUnavailable naming what to do (upgrade Sodalite, or point
it at another database).
Version 2 (store port v2) moves the messages into the ring in place, adds the lock columns, the
counters (computed once from the rows), the session locks and the indexes. Version 3 adds the
counters' ring (``sodalite_counters``); the version-2 counter rows stay, as the base rows. Version 4
moves the duplicate-detection history into its ring (its rows into generation 0) and adds its
claim column. Version 6 gives subscriptions' rules a table of their own (``sodalite_rules``, one row
per rule: :class:`~sodalite.store.port.PutRule` adds one with ``INSERT … ON CONFLICT DO NOTHING``, so
of two nodes adding one name at once one gets it) and moves the ``"Rules"`` of existing subscription
records there. A node of an older release refuses the migrated database (its schema is newer), so
every node is upgraded together for this step (docs/postgresql.md).

Values. Entity paths compare case-insensitively (ASCII letters, like SQLite's NOCASE): every table
keys a partition by the folded path as UTF-8 bytes (``bytea``), so ranges and order are bytewise,
as in SQLite and the memory store. User text (message, session and partition-key ids, history ids,
move keys) is stored as UTF-8 ``bytea`` too, because PostgreSQL ``text`` cannot hold NUL, which
AMQP strings can. Integers are ``bigint``.

Failures. Every psycopg or pool error, and every use after :meth:`PostgresStore.close`, raises
:class:`~sodalite.errors.StoreUnavailable` (:class:`~sodalite.errors.StoreFull` for PostgreSQL's
``disk_full``), with the driver's exception as ``__cause__``; no psycopg type crosses the port. A
connection lost mid-batch is discarded by the pool and replaced on the next call, so a database
that comes back is used again without a restart. A batch whose ``COMMIT`` was sent but not
acknowledged may or may not be durable: its id is looked up on the primary (the new one after a
failover) and it is reported applied only if it committed, as not applied otherwise
(:mod:`sodalite.store.pg_failover`, which also chooses the server of a multi-host URL and fences
an old primary by its timeline). Schema version 7 adds the batch ids' table.

Not thread-safe: the server calls one store from one worker thread.
"""

from sodalite.store.postgres.feed import (
    DUE,
    PostgresChangeFeed,
    channel_name,
)
from sodalite.store.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
)
from sodalite.store.postgres.store import (
    PostgresStore,
)
from sodalite.store.postgres.values import (
    ANALYZE_AFTER,
    CALL_WAIT,
    COUNTER_ROTATE_BYTES,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_ROTATE_BYTES,
    GENERATIONS,
    HISTORY_ROTATE_BYTES,
    LISTEN_POLL,
    LISTEN_RETRY_MAX,
    LOCK_TIMEOUT_MS,
    MIGRATION_LOCK_KEY,
    MOVE_LIMIT,
    URL_SCHEMES,
    check_url,
    redact,
)

__all__ = [
    "ANALYZE_AFTER",
    "CALL_WAIT",
    "COUNTER_ROTATE_BYTES",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_ROTATE_BYTES",
    "DUE",
    "GENERATIONS",
    "HISTORY_ROTATE_BYTES",
    "LISTEN_POLL",
    "LISTEN_RETRY_MAX",
    "LOCK_TIMEOUT_MS",
    "MIGRATIONS",
    "MIGRATION_LOCK_KEY",
    "MOVE_LIMIT",
    "SCHEMA_VERSION",
    "URL_SCHEMES",
    "PostgresChangeFeed",
    "PostgresStore",
    "channel_name",
    "check_url",
    "redact",
]
