"""The PostgreSQL messaging store: one database, one transaction per ``apply``, on psycopg 3.

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

Schema. Numbered migrations (:data:`MIGRATIONS`), recorded in ``sodalite_schema_version``, run by
``open`` in one transaction under a transaction-scoped advisory lock, so several brokers starting on
one database migrate it once. A database whose schema is newer than this code knows makes ``open``
raise StoreUnavailable naming what to do (upgrade Sodalite, or point it at another database).
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

from __future__ import annotations

import hashlib
import json
import logging
import string
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, assert_never
from urllib.parse import urlsplit

import psycopg
import psycopg.errors
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from sodalite.errors import ConfigurationError, StoreFull, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store import pg_failover
from sodalite.store.port import (
    PARTITION_SHIFT,
    SUBSCRIPTION_KIND,
    Activate,
    Activated,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    ChangeSink,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    Done,
    EntityRecord,
    ForgetMessageIds,
    ForgetMoveKeys,
    IdleDeleted,
    IdsClaimed,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionCounts,
    PartitionMeta,
    PartitionRef,
    PartitionStats,
    PruneMessageIds,
    Purge,
    Purged,
    PutEntity,
    PutRule,
    PutSessionState,
    RecordActivity,
    ReleaseSession,
    RememberMessageIds,
    RememberMoveKeys,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    RuleWritten,
    SessionClaimed,
    Settle,
    Settled,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
    check_all_or_none,
    prepare_batch,
    split_rules,
)

log = logging.getLogger(__name__)

URL_SCHEMES: Final = ("postgresql", "postgres")
_ASCII_LOWER: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# Any constant shared by every Sodalite: the advisory lock that serializes migrations.
MIGRATION_LOCK_KEY: Final = 0x50D4_117E_0001
DEFAULT_CONNECT_TIMEOUT: Final = 5.0  # seconds open() waits for the database at start
# Seconds a call waits for the pooled connection while it is being re-established: short, because
# the store's one worker thread waits meanwhile, and the partitions retry their reload anyway.
CALL_WAIT: Final = 2.0
GENERATIONS: Final = 4  # tables in the ring of message tables
# The current generation's table is left for the next once it is this large (and the next is empty).
DEFAULT_ROTATE_BYTES: Final = 2 * 1024 * 1024
MOVE_LIMIT: Final = 1000  # a generation holding at most this many live rows is moved on and truncated
ANALYZE_AFTER: Final = 1000  # rows changed in the current generation before maintain() re-analyzes it
LOCK_TIMEOUT_MS: Final = 100  # how long the maintenance waits for the lock TRUNCATE needs
# The current generation is also left for the next once its counter table is this large: a run of
# settlements that only delete (a backlog drained under a long transaction) grows it, not the messages.
COUNTER_ROTATE_BYTES: Final = 64 * 1024
# The duplicate-detection history has a ring of its own (its rows drain by the window, not by
# consumption): new ids go to the next table once the current one is this large and the next is empty.
HISTORY_ROTATE_BYTES: Final = 256 * 1024
# LISTEN/NOTIFY: how long the listening thread waits for notifications before it looks whether it
# should stop, and the longest pause between two attempts to reconnect after the connection is lost.
LISTEN_POLL: Final = 0.5
LISTEN_RETRY_MAX: Final = 2.0

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE sodalite_messages (
            entity                 bytea    NOT NULL,
            partition              bigint   NOT NULL,
            sequence_number        bigint   NOT NULL,
            enqueued_time          bigint   NOT NULL,
            message_id             bytea,
            session_id             bytea,
            partition_key          bytea,
            time_to_live           bigint,
            expires_at             bigint,
            scheduled_enqueue_time bigint,
            delivery_count         bigint   NOT NULL,
            state                  smallint NOT NULL,
            durable                boolean,
            priority               bigint,
            annotations            bytea    NOT NULL,
            annotation_count       bigint   NOT NULL,
            tail                   bytea    NOT NULL,
            PRIMARY KEY (entity, partition, sequence_number)
        )
        """,
        """
        CREATE TABLE sodalite_partitions (
            entity               bytea  NOT NULL,
            partition            bigint NOT NULL,
            last_sequence_number bigint NOT NULL,
            PRIMARY KEY (entity, partition)
        )
        """,
        """
        CREATE TABLE sodalite_entities (
            path_key   bytea NOT NULL PRIMARY KEY,
            path       text  NOT NULL,
            kind       text  NOT NULL,
            properties text  NOT NULL
        )
        """,
        """
        CREATE TABLE sodalite_duplicate_history (
            entity     bytea  NOT NULL,
            partition  bigint NOT NULL,
            message_id bytea  NOT NULL,
            seen_at    bigint NOT NULL,
            PRIMARY KEY (entity, partition, message_id)
        )
        """,
        """
        CREATE TABLE sodalite_session_states (
            entity     bytea  NOT NULL,
            partition  bigint NOT NULL,
            session_id bytea  NOT NULL,
            state      bytea  NOT NULL,
            updated_at bigint NOT NULL,
            PRIMARY KEY (entity, partition, session_id)
        )
        """,
        """
        CREATE TABLE sodalite_move_keys (
            entity    bytea  NOT NULL,
            partition bigint NOT NULL,
            move_key  bytea  NOT NULL,
            PRIMARY KEY (entity, partition, move_key)
        )
        """,
        # The hot table: rows come and go all the time, so let autovacuum visit it early.
        """
        ALTER TABLE sodalite_messages SET (autovacuum_vacuum_scale_factor = 0.01,
                                           autovacuum_vacuum_insert_scale_factor = 0.05)
        """,
    ),
    # Version 2 (store port v2): the messages move into a ring of generation tables (see the module
    # docstring), with lock columns; counters, session locks and the indexes the v2 reads use.
    (
        "ALTER TABLE sodalite_messages RENAME TO sodalite_messages_v1",
        "ALTER INDEX sodalite_messages_pkey RENAME TO sodalite_messages_v1_pkey",
        """
        CREATE TABLE sodalite_ring (
            singleton  boolean  PRIMARY KEY DEFAULT true CHECK (singleton),
            generation smallint NOT NULL
        )
        """,
        "INSERT INTO sodalite_ring (generation) VALUES (0)",
        """
        CREATE TABLE sodalite_messages (
            generation             smallint NOT NULL,
            entity                 bytea    NOT NULL,
            partition              bigint   NOT NULL,
            sequence_number        bigint   NOT NULL,
            enqueued_time          bigint   NOT NULL,
            message_id             bytea,
            session_id             bytea,
            partition_key          bytea,
            time_to_live           bigint,
            expires_at             bigint,
            scheduled_enqueue_time bigint,
            delivery_count         bigint   NOT NULL,
            state                  smallint NOT NULL,
            durable                boolean,
            priority               bigint,
            annotations            bytea    NOT NULL,
            annotation_count       bigint   NOT NULL,
            tail                   bytea    NOT NULL,
            lock_token             uuid,
            locked_until           bigint,
            lock_owner             text,
            PRIMARY KEY (entity, partition, sequence_number, generation)
        ) PARTITION BY LIST (generation)
        """,
        *(f"""
        CREATE TABLE sodalite_messages_g{g} PARTITION OF sodalite_messages FOR VALUES IN ({g})
            WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05)
        """ for g in range(GENERATIONS)),
        # The ready scan of a claim; the session scan; the due scans of next_due and Activate.
        "CREATE INDEX sodalite_messages_ready ON sodalite_messages (entity, partition, state, sequence_number)",
        """
        CREATE INDEX sodalite_messages_session ON sodalite_messages (entity, partition, session_id, sequence_number)
            WHERE session_id IS NOT NULL
        """,
        """
        CREATE INDEX sodalite_messages_scheduled
            ON sodalite_messages (entity, partition, scheduled_enqueue_time, sequence_number) WHERE state = 2
        """,
        "CREATE INDEX sodalite_messages_expires ON sodalite_messages (entity, partition, expires_at) "
        "WHERE expires_at IS NOT NULL",
        "CREATE INDEX sodalite_messages_locked ON sodalite_messages (entity, partition, locked_until) "
        "WHERE locked_until IS NOT NULL",
        """
        INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time, message_id,
            session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state,
            durable, priority, annotations, annotation_count, tail)
        SELECT 0, entity, partition, sequence_number, enqueued_time, message_id, session_id, partition_key,
            time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority,
            annotations, annotation_count, tail
        FROM sodalite_messages_v1
        """,
        "DROP TABLE sodalite_messages_v1",
        """
        ALTER TABLE sodalite_partitions
            ADD COLUMN active        bigint NOT NULL DEFAULT 0,
            ADD COLUMN scheduled     bigint NOT NULL DEFAULT 0,
            ADD COLUMN deferred      bigint NOT NULL DEFAULT 0,
            ADD COLUMN size_in_bytes bigint NOT NULL DEFAULT 0
        """,
        # Room on each page for the next version of a counter row, so its updates stay HOT.
        "ALTER TABLE sodalite_partitions SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, "
        "autovacuum_vacuum_threshold = 1000)",
        # The counters, computed once from the rows (a partition with messages always had its row).
        """
        INSERT INTO sodalite_partitions AS p (entity, partition, last_sequence_number, active, scheduled, deferred,
                                              size_in_bytes)
        SELECT entity, partition, max(sequence_number), count(*) FILTER (WHERE state = 0),
               count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 1),
               sum(length(annotations) + length(tail))
        FROM sodalite_messages GROUP BY entity, partition
        ON CONFLICT (entity, partition) DO UPDATE SET
            last_sequence_number = GREATEST(p.last_sequence_number, excluded.last_sequence_number),
            active = excluded.active, scheduled = excluded.scheduled, deferred = excluded.deferred,
            size_in_bytes = excluded.size_in_bytes
        """,
        """
        CREATE TABLE sodalite_session_locks (
            entity       bytea  NOT NULL,
            partition    bigint NOT NULL,
            session_id   bytea  NOT NULL,
            token        uuid   NOT NULL,
            locked_until bigint NOT NULL,
            owner        text   NOT NULL,
            PRIMARY KEY (entity, partition, session_id)
        )
        """,
        "CREATE INDEX sodalite_session_locks_due ON sodalite_session_locks (entity, partition, locked_until)",
        # Raised by a caller-numbered append whose number another generation already holds (the
        # primary key, which must include the generation, only sees its own generation).
        """
        CREATE FUNCTION sodalite_duplicate_sequence_number(n bigint) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'sequence number % is already stored in this partition', n
                USING ERRCODE = 'unique_violation';
        END
        $$
        """,
    ),
    # Version 3: the counters move into the ring too (see "Counters in the ring" in the module
    # docstring). The rows of sodalite_partitions stay as they are: the base values, locked by
    # every numbering statement and no longer updated; what changes goes into sodalite_counters.
    (
        """
        CREATE TABLE sodalite_counters (
            generation           smallint NOT NULL,
            entity               bytea    NOT NULL,
            partition            bigint   NOT NULL,
            last_sequence_number bigint   NOT NULL,
            active               bigint   NOT NULL,
            scheduled            bigint   NOT NULL,
            deferred             bigint   NOT NULL,
            size_in_bytes        bigint   NOT NULL,
            PRIMARY KEY (entity, partition, generation)
        ) PARTITION BY LIST (generation)
        """,
        # Room on each page for the next version of a row, so its updates stay HOT while VACUUM works.
        *(f"""
        CREATE TABLE sodalite_counters_g{g} PARTITION OF sodalite_counters FOR VALUES IN ({g})
            WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000)
        """ for g in range(GENERATIONS)),
    ),
    # Version 4: AutoDeleteOnIdle across nodes. Each node's registration of each entity with an idle
    # time (RecordActivity, a few rows per node refreshed every few seconds: room for HOT updates);
    # the idle sweep's fenced deletion (DeleteIdleEntity) reads the entity's rows.
    (
        """
        CREATE TABLE sodalite_activity (
            entity        bytea  NOT NULL,
            node          text   NOT NULL,
            last_activity bigint NOT NULL,
            receivers     bigint NOT NULL,
            refreshed_at  bigint NOT NULL,
            PRIMARY KEY (entity, node)
        ) WITH (fillfactor = 50)
        """,
    ),
    # Version 5: the duplicate-detection history moves into a ring of its own (see "The history's
    # ring" in the module docstring), with the claim column of ClaimMessageIds; the rows are kept.
    (
        "ALTER TABLE sodalite_duplicate_history RENAME TO sodalite_duplicate_history_v3",
        "ALTER INDEX sodalite_duplicate_history_pkey RENAME TO sodalite_duplicate_history_v3_pkey",
        "ALTER TABLE sodalite_ring ADD COLUMN history_generation smallint NOT NULL DEFAULT 0",
        """
        CREATE TABLE sodalite_duplicate_history (
            generation smallint NOT NULL,
            entity     bytea    NOT NULL,
            partition  bigint   NOT NULL,
            message_id bytea    NOT NULL,
            seen_at    bigint   NOT NULL,
            claim      uuid,
            PRIMARY KEY (entity, partition, message_id, generation)
        ) PARTITION BY LIST (generation)
        """,
        *(f"""
        CREATE TABLE sodalite_duplicate_history_g{g} PARTITION OF sodalite_duplicate_history
            FOR VALUES IN ({g}) WITH (autovacuum_vacuum_scale_factor = 0.01)
        """ for g in range(GENERATIONS)),
        "INSERT INTO sodalite_duplicate_history (generation, entity, partition, message_id, seen_at) "
        "SELECT 0, entity, partition, message_id, seen_at FROM sodalite_duplicate_history_v3",
        "DROP TABLE sodalite_duplicate_history_v3",
        # PruneMessageIds: a partition's entries by time.
        "CREATE INDEX sodalite_duplicate_history_seen ON sodalite_duplicate_history (entity, partition, seen_at)",
    ),
    # Version 6: a subscription's rules become rows of their own (PutRule, DeleteRule), keyed by the
    # folded subscription path and rule name, so two nodes changing rules of one subscription at once
    # keep both changes; the rules of existing subscription records move there, in their order.
    (
        """
        CREATE TABLE sodalite_rules (
            subscription bytea  NOT NULL,
            name_key     bytea  NOT NULL,
            name         text   NOT NULL,
            position     bigint NOT NULL,
            rule         text   NOT NULL,
            PRIMARY KEY (subscription, name_key)
        )
        """,
        f"""
        INSERT INTO sodalite_rules (subscription, name_key, name, position, rule)
        SELECT e.path_key, convert_to(translate(r.value->>'Name', '{string.ascii_uppercase}',
                                                '{string.ascii_lowercase}'), 'UTF8'),
               r.value->>'Name', r.position, r.value::text
        FROM sodalite_entities e,
             jsonb_array_elements(CASE WHEN jsonb_typeof(e.properties::jsonb->'Rules') = 'array'
                                       THEN e.properties::jsonb->'Rules' ELSE '[]'::jsonb END)
                 WITH ORDINALITY AS r(value, position)
        WHERE e.kind = '{SUBSCRIPTION_KIND}' AND jsonb_typeof(r.value->'Name') = 'string'
        ON CONFLICT (subscription, name_key) DO UPDATE SET name = excluded.name, position = excluded.position,
            rule = excluded.rule
        """,
        f"""
        UPDATE sodalite_entities SET properties = (properties::jsonb - 'Rules')::text
        WHERE kind = '{SUBSCRIPTION_KIND}' AND jsonb_exists(properties::jsonb, 'Rules')
        """,
    ),
    pg_failover.MIGRATION,  # version 7: one row per batch, for the outcome of an unanswered COMMIT
)
SCHEMA_VERSION: Final = len(MIGRATIONS)

_CREATE_VERSION_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS sodalite_schema_version (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version   integer NOT NULL
    )
"""
_PARTITION_TABLES: Final = ("sodalite_messages", "sodalite_partitions", "sodalite_counters",
                            "sodalite_duplicate_history", "sodalite_session_states", "sodalite_move_keys",
                            "sodalite_session_locks")
# The message fields after the sequence number, with their column types (for unnest arrays).
_FIELDS: Final = (
    ("enqueued_time", "bigint"), ("message_id", "bytea"), ("session_id", "bytea"), ("partition_key", "bytea"),
    ("time_to_live", "bigint"), ("expires_at", "bigint"), ("scheduled_enqueue_time", "bigint"),
    ("delivery_count", "bigint"), ("state", "smallint"), ("durable", "boolean"), ("priority", "bigint"),
    ("annotations", "bytea"), ("annotation_count", "bigint"), ("tail", "bytea"),
)
_FIELD_NAMES: Final = tuple(name for name, _ in _FIELDS)
_MESSAGE_COLUMNS: Final = "sequence_number, " + ", ".join(_FIELD_NAMES)
_LOCK_COLUMNS: Final = ("lock_token", "locked_until", "lock_owner")
_STORED_COLUMNS: Final = _MESSAGE_COLUMNS + ", " + ", ".join(_LOCK_COLUMNS)
_ALL_COLUMNS: Final = "generation, entity, partition, " + _STORED_COLUMNS


def _qualified(alias: str) -> str:
    return ", ".join(f"{alias}.{c}" for c in _STORED_COLUMNS.split(", "))


_CURRENT_GENERATION: Final = "(SELECT generation FROM sodalite_ring)"
_PARTITION: Final = "m.entity = %(e)s AND m.partition = %(p)s"
_UNLOCKED: Final = "(m.lock_token IS NULL OR m.locked_until <= %(now)s)"
# The rows an item array names: an index condition on the numbers, then the join to the items.
_ITEM_ROWS: Final = "m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = i.seq"
_FENCED: Final = "m.lock_token = i.tok AND m.locked_until > %(now)s"
_SIZE: Final = "length(m.annotations) + length(m.tail)"
# Per removed row: what it takes off the partition's counters.
_GONE: Final = (f"-(m.state = 0)::int AS da, -(m.state = 2)::int AS ds, -(m.state = 1)::int AS dd, "
                f"-({_SIZE}) AS dz")


_COUNTER_COLUMNS: Final = (
    "generation, entity, partition, last_sequence_number, active, scheduled, deferred, size_in_bytes"
)
# Adds the inserted values to the partition's counter row of that generation, if there is one.
_ADD_COUNTERS: Final = (
    "ON CONFLICT (entity, partition, generation) DO UPDATE SET "
    "last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number), "
    "active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled, "
    "deferred = c.deferred + excluded.deferred, size_in_bytes = c.size_in_bytes + excluded.size_in_bytes"
)


def _adjust(source: str, condition: str = "") -> str:
    """A data-modifying CTE body adding the per-row deltas (da, ds, dd, dz) of ``source`` to the
    partition's counter row of the current generation; writes nothing when they sum to zero (or
    when the extra SQL ``condition`` is false)."""
    return (
        f"INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
        f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, 0, x.a, x.s, x.d, x.z "
        "FROM (SELECT coalesce(sum(da), 0) AS a, coalesce(sum(ds), 0) AS s, coalesce(sum(dd), 0) AS d, "
        f"coalesce(sum(dz), 0) AS z FROM {source}) x "
        f"WHERE (x.a <> 0 OR x.s <> 0 OR x.d <> 0 OR x.z <> 0){condition} {_ADD_COUNTERS}"
    )


def _counter_rows(columns: str, e: str = "e", p: str = "p") -> str:
    """The partition's base row and its counter rows of every generation (``columns`` of each)."""
    return (f"SELECT {columns} FROM sodalite_partitions WHERE entity = %({e})s AND partition = %({p})s "
            f"UNION ALL SELECT {columns} FROM sodalite_counters WHERE entity = %({e})s AND partition = %({p})s")


def _numbered_after(e: str = "e", p: str = "p") -> str:
    """One row, ``top``: where the partition's next numbers start after, the high-water mark but
    never below ``partition << PARTITION_SHIFT`` (port.numbering_base)."""
    return (f"SELECT GREATEST(coalesce(max(last_sequence_number), 0), %({p})s::bigint << {PARTITION_SHIFT:d}) AS top "
            f"FROM ({_counter_rows('last_sequence_number', e, p)}) h")


# Lock a partition's base row (creating it the first time) without writing a new version of it: ON
# CONFLICT DO UPDATE locks the row it finds even when its WHERE clause updates nothing. A batch takes
# the rows of every partition it numbers in first statements of their own, in one global order (no
# deadlock between two batches, nor with a counter row of the current generation that an earlier
# statement of the batch changed), so the statements that number see, each with its own READ
# COMMITTED snapshot, what the previous holder committed.
_TAKE_PARTITION: Final = (
    "INSERT INTO sodalite_partitions AS c (entity, partition, last_sequence_number) VALUES (%(e)s, %(p)s, 0) "
    "ON CONFLICT (entity, partition) DO UPDATE SET last_sequence_number = c.last_sequence_number WHERE false"
)


_UNNEST_MESSAGES: Final = (
    "unnest(%(seq)s::bigint[], " + ", ".join(f"%({n})s::{t}[]" for n, t in _FIELDS) + ") WITH ORDINALITY "
    f"AS m(sequence_number, {', '.join(_FIELD_NAMES)}, ord)"
)
_COUNTS_OF_NEW: Final = (
    "count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 1), "
    "coalesce(sum(length(annotations) + length(tail)), 0)"
)
# v2 append, after _TAKE_PARTITION: numbered above the partition's high-water mark, which the
# current generation's counter row raises by the batch's size in the same statement.
_APPEND: Final = (
    f"WITH hw AS ({_numbered_after()}), "
    f"bump AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + %(n)s, %(da)s, %(ds)s, %(dd)s, %(dz)s FROM hw "
    f"{_ADD_COUNTERS}) "
    f"INSERT INTO sodalite_messages ({_ALL_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + m.ord, "
    + ", ".join(f"m.{n}" for n in _FIELD_NAMES) + ", NULL, NULL, NULL "
    f"FROM hw, {_UNNEST_MESSAGES} RETURNING sequence_number"
)
# An append with a Gate: only the messages without an id, or whose id the batch's
# ClaimMessageIds of the gate's partition took (marked with its claim), are numbered and stored;
# the rows returned are (place in the batch, number) of those.
_APPEND_GATED: Final = (
    f"WITH hw AS ({_numbered_after()}), "
    f"g AS (SELECT m.*, row_number() OVER (ORDER BY m.ord) AS rn FROM {_UNNEST_MESSAGES} "
    "JOIN unnest(%(gid)s::bytea[]) WITH ORDINALITY AS gi(mid, ord) ON gi.ord = m.ord "
    "WHERE gi.mid IS NULL OR EXISTS (SELECT 1 FROM sodalite_duplicate_history h WHERE h.entity = %(ge)s "
    "AND h.partition = %(gp)s AND h.message_id = gi.mid AND h.claim = %(claim)s)), "
    f"ins AS (INSERT INTO sodalite_messages ({_ALL_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + g.rn, "
    + ", ".join(f"g.{n}" for n in _FIELD_NAMES) + ", NULL, NULL, NULL "
    "FROM hw, g RETURNING state, annotations, tail), "
    f"bump AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + x.n, x.a, x.s, x.d, x.z "
    f"FROM hw, (SELECT count(*), {_COUNTS_OF_NEW} FROM ins) x(n, a, s, d, z) WHERE x.n > 0 "
    f"{_ADD_COUNTERS}) "
    "SELECT g.ord, hw.top + g.rn FROM hw, g"
)
# v2 append numbered by another partition's counter too (%(ne)s, %(np)s; Append.numbered_by: a dead
# letter a topic's fan-out makes for a subscription, numbered by the subscription's partition),
# after _TAKE_PARTITION of both: numbered above both high-water marks, both raised to the last number
# (so it takes nothing either partition holds or gave); the target's counter row takes the counts.
# Rows (place, number).
_APPEND_NUMBERED_BY: Final = (
    f"WITH hw AS (SELECT GREATEST(a.top, b.top) AS top FROM ({_numbered_after('ne', 'np')}) a, "
    f"({_numbered_after()}) b), "
    f"g AS (SELECT m.*, row_number() OVER (ORDER BY m.ord) AS rn FROM {_UNNEST_MESSAGES} "
    "LEFT JOIN unnest(%(gid)s::bytea[]) WITH ORDINALITY AS gi(mid, ord) ON gi.ord = m.ord "
    "WHERE NOT %(gated)s OR gi.mid IS NULL OR EXISTS (SELECT 1 FROM sodalite_duplicate_history h "
    "WHERE h.entity = %(ge)s AND h.partition = %(gp)s AND h.message_id = gi.mid AND h.claim = %(claim)s)), "
    f"ins AS (INSERT INTO sodalite_messages ({_ALL_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + g.rn, "
    + ", ".join(f"g.{n}" for n in _FIELD_NAMES) + ", NULL, NULL, NULL "
    "FROM hw, g RETURNING state, annotations, tail), "
    f"counted AS (SELECT count(*), {_COUNTS_OF_NEW} FROM ins), "
    f"src AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(ne)s, %(np)s, hw.top + x.n, 0, 0, 0, 0 "
    f"FROM hw, counted x(n, a, s, d, z) WHERE x.n > 0 {_ADD_COUNTERS}), "
    f"bump AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, hw.top + x.n, x.a, x.s, x.d, x.z "
    f"FROM hw, counted x(n, a, s, d, z) WHERE x.n > 0 {_ADD_COUNTERS}) "
    "SELECT g.ord, hw.top + g.rn FROM hw, g"
)


def _claim_sql(by_session: bool, by_numbers: bool) -> str:
    where = [_PARTITION, "m.state = %(state)s", _UNLOCKED, "(m.expires_at IS NULL OR m.expires_at > %(now)s)"]
    if by_session:
        where.append("m.session_id = %(sid)s")
    if by_numbers:
        where.append("m.sequence_number = ANY(%(seqs)s::bigint[])")
    return (
        "WITH picked AS (SELECT sequence_number, row_number() OVER (ORDER BY sequence_number) AS ord FROM ("
        f"SELECT m.sequence_number FROM sodalite_messages m WHERE {' AND '.join(where)} "
        "ORDER BY m.sequence_number LIMIT %(n)s FOR UPDATE SKIP LOCKED) s), "
        "tok AS (SELECT t, ord FROM unnest(%(tokens)s::uuid[]) WITH ORDINALITY AS x(t, ord)) "
        "UPDATE sodalite_messages m SET lock_token = tok.t, locked_until = %(until)s, lock_owner = %(owner)s, "
        "delivery_count = m.delivery_count + 1 FROM picked JOIN tok USING (ord) "
        f"WHERE {_PARTITION} AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM picked)) "
        f"AND m.sequence_number = picked.sequence_number RETURNING {_qualified('m')}"
    )


_CLAIM_SQL: Final = {(s, n): _claim_sql(s, n) for s in (False, True) for n in (False, True)}
_SETTLE_ITEMS: Final = (
    "i AS (SELECT * FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(code)s::smallint[], %(ann)s::bytea[], "
    "%(annc)s::bigint[], %(tl)s::bytea[], %(reset)s::boolean[], %(enq)s::bigint[], %(exp)s::bigint[], "
    "%(back)s::boolean[]) WITH ORDINALITY AS i(seq, tok, code, ann, annc, tl, reset, enq, exp, back, ord))"
)
_CODE: Final = {Outcome.ABANDON: 0, Outcome.RELEASE: 1, Outcome.DEFER: 2, Outcome.COMPLETE: 3, Outcome.DEAD_LETTER: 4}
_COMPLETE: Final = (
    f"WITH {_SETTLE_ITEMS}, d AS (DELETE FROM sodalite_messages m USING i WHERE {_PARTITION} "
    f"AND {_ITEM_ROWS} AND {_FENCED} RETURNING m.sequence_number, {_GONE}), "
    f"adj AS ({_adjust('d')}) SELECT sequence_number FROM d"
)
# Several Settle operations of one partition, back to back in a batch, all COMPLETE (a group commit
# of receivers' completes): one statement, each item fenced at its own operation's now.
_COMPLETE_MERGED: Final = (
    "WITH i AS (SELECT * FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[], %(nows)s::bigint[]) AS i(seq, tok, now)), "
    f"d AS (DELETE FROM sodalite_messages m USING i WHERE {_PARTITION} AND {_ITEM_ROWS} "
    f"AND m.lock_token = i.tok AND m.locked_until > i.now RETURNING m.sequence_number, {_GONE}), "
    f"adj AS ({_adjust('d')}) SELECT sequence_number FROM d"
)
# ABANDON, RELEASE and DEFER clear the lock; RELEASE gives the delivery back, DEFER defers.
_UNLOCK: Final = (
    f"WITH {_SETTLE_ITEMS}, old AS (SELECT m.sequence_number, m.state, {_SIZE} AS size, i.code, i.ann, i.annc, i.tl "
    f"FROM sodalite_messages m JOIN i ON m.sequence_number = i.seq WHERE {_PARTITION} "
    f"AND m.sequence_number = ANY(%(seq)s::bigint[]) AND {_FENCED} "
    "FOR UPDATE OF m), "
    "upd AS (UPDATE sodalite_messages m SET lock_token = NULL, locked_until = NULL, lock_owner = NULL, "
    "delivery_count = CASE WHEN old.code IN (1, 2) THEN GREATEST(m.delivery_count - 1, 0) ELSE m.delivery_count END, "
    "state = CASE WHEN old.code = 2 THEN 1 ELSE m.state END, annotations = coalesce(old.ann, m.annotations), "
    "annotation_count = CASE WHEN old.ann IS NULL THEN m.annotation_count ELSE old.annc END, "
    "tail = coalesce(old.tl, m.tail) FROM old "
    f"WHERE {_PARTITION} AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.sequence_number = old.sequence_number "
    "RETURNING m.sequence_number, "
    "(m.state = 0)::int - (old.state = 0)::int AS da, (m.state = 2)::int - (old.state = 2)::int AS ds, "
    f"(m.state = 1)::int - (old.state = 1)::int AS dd, {_SIZE} - old.size AS dz), "
    f"adj AS ({_adjust('upd')}) SELECT sequence_number FROM upd"
)


def _transfer_sql(fence: str) -> str:
    """Delete the fenced rows named by the items here and append them to the target partition
    (%(te)s, %(tp)s, taken by _TAKE_PARTITION before) with its next numbers, in item order, or with
    %(keep)s under their own numbers (the counter row then takes the highest of them): unlocked,
    ACTIVE, with the item's expiry time (none for a settlement: it lands in a dead-letter queue,
    where no time-to-live is observed) and enqueued time (the row's when the item gives none),
    annotations and tail replaced and delivery count reset as each item says. Returns
    (old number, new number) per moved row."""
    copied = ", ".join(
        f"CASE WHEN i.reset THEN 0 WHEN i.back THEN GREATEST(m.{n} - 1, 0) ELSE m.{n} END AS {n}"
        if n == "delivery_count"
        else f"coalesce(i.ann, m.{n}) AS {n}" if n == "annotations"
        else f"CASE WHEN i.ann IS NULL THEN m.{n} ELSE i.annc END AS {n}" if n == "annotation_count"
        else f"coalesce(i.tl, m.{n}) AS {n}" if n == "tail"
        else f"i.exp AS {n}" if n == "expires_at"
        else f"coalesce(i.enq, m.{n}) AS {n}" if n == "enqueued_time"
        else f"m.{n}"
        for n in _FIELD_NAMES if n != "state")
    return (
        f"WITH {_SETTLE_ITEMS}, d AS (DELETE FROM sodalite_messages m USING i WHERE {_PARTITION} "
        f"AND {_ITEM_ROWS} AND {fence} RETURNING i.ord, m.sequence_number AS old_seq, {copied}, "
        f"{_GONE}), "
        f"src AS ({_adjust('d', ' AND NOT %(same)s')}), "
        f"hw AS ({_numbered_after('te', 'tp')}), "
        # Kept numbers (a dead letter into its own dead-letter partition): the row's own number, unless
        # the target holds it already (numbered there by an earlier release): then one above the target's
        # counter and every number kept, in item order.
        "tk AS (SELECT d.*, %(keep)s AND EXISTS (SELECT 1 FROM sodalite_messages t WHERE t.entity = %(te)s "
        "AND t.partition = %(tp)s AND t.sequence_number = d.old_seq) AS taken FROM d), "
        "nums AS (SELECT tk.*, CASE WHEN NOT %(keep)s THEN hw.top + row_number() OVER (ORDER BY tk.ord) "
        "WHEN tk.taken THEN GREATEST(hw.top, max(tk.old_seq) OVER ()) "
        "+ sum(tk.taken::int) OVER (ORDER BY tk.ord ROWS UNBOUNDED PRECEDING) "
        "ELSE tk.old_seq END AS new_seq FROM tk, hw), "
        f"tgt AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
        # Into the partition it came from (a resubmit): the removal's deltas go into this one row.
        f"SELECT {_CURRENT_GENERATION}, %(te)s, %(tp)s, max(new_seq), "
        "count(*) + CASE WHEN %(same)s THEN sum(da) ELSE 0 END, "
        "CASE WHEN %(same)s THEN sum(ds) ELSE 0 END, CASE WHEN %(same)s THEN sum(dd) ELSE 0 END, "
        "coalesce(sum(length(annotations) + length(tail)), 0) + CASE WHEN %(same)s THEN sum(dz) ELSE 0 END "
        f"FROM nums HAVING count(*) > 0 {_ADD_COUNTERS}), "
        f"ins AS (INSERT INTO sodalite_messages ({_ALL_COLUMNS}) SELECT {_CURRENT_GENERATION}, %(te)s, %(tp)s, "
        "new_seq, " + ", ".join("0" if n == "state" else n for n in _FIELD_NAMES) + ", NULL, NULL, NULL FROM nums) "
        "SELECT old_seq, new_seq FROM nums"
    )


# Restore: rows put back under their own numbers (each number once, none the partition holds in any
# generation), unlocked, counted in the current generation's counter row. Returns the numbers put back.
_RESTORE: Final = (
    "WITH fresh AS (SELECT DISTINCT ON (m.sequence_number) m.* "
    f"FROM {_UNNEST_MESSAGES} WHERE m.sequence_number > 0 AND NOT EXISTS (SELECT 1 FROM sodalite_messages t "
    "WHERE t.entity = %(e)s AND t.partition = %(p)s AND t.sequence_number = m.sequence_number) "
    "ORDER BY m.sequence_number, m.ord), "
    f"ins AS (INSERT INTO sodalite_messages ({_ALL_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, fresh.sequence_number, "
    + ", ".join(f"fresh.{n}" for n in _FIELD_NAMES) + ", NULL, NULL, NULL "
    "FROM fresh RETURNING sequence_number, state, annotations, tail), "
    f"bump AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, x.top, x.a, x.s, x.d, x.z "
    f"FROM (SELECT count(*), max(sequence_number), {_COUNTS_OF_NEW} FROM ins) x(n, top, a, s, d, z) "
    f"WHERE x.n > 0 {_ADD_COUNTERS}) "
    "SELECT sequence_number FROM ins"
)
_DEAD_LETTER: Final = _transfer_sql(_FENCED)
_MOVE_TO: Final = _transfer_sql(_UNLOCKED)
_MOVE_AWAY: Final = (
    f"WITH {_SETTLE_ITEMS}, d AS (DELETE FROM sodalite_messages m USING i WHERE {_PARTITION} "
    f"AND {_ITEM_ROWS} AND {_UNLOCKED} RETURNING m.sequence_number, {_GONE}), "
    f"adj AS ({_adjust('d')}) SELECT sequence_number, sequence_number FROM d"
)
_RENEW: Final = (
    "UPDATE sodalite_messages m SET locked_until = %(until)s "
    "FROM unnest(%(seq)s::bigint[], %(tok)s::uuid[]) AS i(seq, tok) "
    f"WHERE {_PARTITION} AND {_ITEM_ROWS} AND {_FENCED} RETURNING m.sequence_number"
)
_ACTIVATE: Final = (
    "WITH due AS (SELECT m.sequence_number FROM sodalite_messages m WHERE "
    f"{_PARTITION} AND m.state = 2 AND m.scheduled_enqueue_time <= %(now)s "
    "ORDER BY m.scheduled_enqueue_time, m.sequence_number LIMIT %(n)s FOR UPDATE SKIP LOCKED), "
    "upd AS (UPDATE sodalite_messages m SET state = 0 FROM due "
    f"WHERE {_PARTITION} AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM due)) "
    f"AND m.sequence_number = due.sequence_number RETURNING {_qualified('m')}), "
    f"adj AS (INSERT INTO sodalite_counters AS c ({_COUNTER_COLUMNS}) "
    f"SELECT {_CURRENT_GENERATION}, %(e)s, %(p)s, 0, count(*), -count(*), 0, 0 FROM upd HAVING count(*) > 0 "
    f"{_ADD_COUNTERS}) "
    "SELECT * FROM upd"
)
_PURGE: Final = {
    bounded: (
        f"WITH d AS (DELETE FROM sodalite_messages m WHERE {_PARTITION} AND {_UNLOCKED}"
        + (" AND m.sequence_number <= %(through)s" if bounded else "")
        + f" RETURNING {_GONE}), adj AS ({_adjust('d')}) SELECT count(*) FROM d"
    )
    for bounded in (False, True)
}
# CancelScheduled, all or none in one statement: the rows named that are SCHEDULED and unlocked are
# locked (FOR UPDATE: a node activating or cancelling one at the same moment goes first, and the row,
# read again after its commit, no longer qualifies); the numbers asked that none of them is are
# returned, in the order asked, and the rows are deleted (and counted off) only when there is none.
_CANCEL_SCHEDULED: Final = (
    "WITH asked AS (SELECT DISTINCT ON (seq) seq, ord FROM unnest(%(seq)s::bigint[]) WITH ORDINALITY AS a(seq, ord) "
    "ORDER BY seq, ord), "
    f"found AS (SELECT m.sequence_number FROM sodalite_messages m WHERE {_PARTITION} "
    f"AND m.sequence_number = ANY(%(seq)s::bigint[]) AND m.state = 2 AND {_UNLOCKED} FOR UPDATE OF m), "
    "missing AS (SELECT asked.seq, asked.ord FROM asked "
    "WHERE NOT EXISTS (SELECT 1 FROM found WHERE found.sequence_number = asked.seq)), "
    f"d AS (DELETE FROM sodalite_messages m WHERE {_PARTITION} "
    "AND m.sequence_number = ANY(ARRAY(SELECT sequence_number FROM found)) AND NOT EXISTS (SELECT 1 FROM missing) "
    f"RETURNING {_GONE}), "
    f"adj AS ({_adjust('d')}) "
    "SELECT seq FROM missing ORDER BY ord"
)
_CLAIM_NAMED_SESSION: Final = (
    "INSERT INTO sodalite_session_locks AS s (entity, partition, session_id, token, locked_until, owner) "
    "VALUES (%(e)s, %(p)s, %(sid)s, %(tok)s, %(until)s, %(owner)s) "
    "ON CONFLICT (entity, partition, session_id) DO UPDATE SET token = excluded.token, "
    "locked_until = excluded.locked_until, owner = excluded.owner WHERE s.locked_until <= %(now)s "
    "RETURNING s.session_id"
)
# The session, not locked, of the lowest-numbered ACTIVE, unlocked, unexpired message.
_CLAIM_NEXT_SESSION: Final = (
    "WITH cand AS (SELECT m.session_id FROM sodalite_messages m "
    f"WHERE {_PARTITION} AND m.state = 0 AND m.session_id IS NOT NULL AND {_UNLOCKED} "
    "AND (m.expires_at IS NULL OR m.expires_at > %(now)s) AND NOT EXISTS (SELECT 1 FROM sodalite_session_locks s "
    "WHERE s.entity = m.entity AND s.partition = m.partition AND s.session_id = m.session_id "
    "AND s.locked_until > %(now)s) ORDER BY m.sequence_number LIMIT 1) "
    "INSERT INTO sodalite_session_locks AS s (entity, partition, session_id, token, locked_until, owner) "
    "SELECT %(e)s, %(p)s, cand.session_id, %(tok)s, %(until)s, %(owner)s FROM cand "
    "ON CONFLICT (entity, partition, session_id) DO UPDATE SET token = excluded.token, "
    "locked_until = excluded.locked_until, owner = excluded.owner WHERE s.locked_until <= %(now)s "
    "RETURNING s.session_id"
)
_RENEW_SESSION: Final = (
    "UPDATE sodalite_session_locks SET locked_until = %(until)s WHERE entity = %(e)s AND partition = %(p)s "
    "AND session_id = %(sid)s AND token = %(tok)s AND locked_until > %(now)s RETURNING 1"
)
_RELEASE_SESSION: Final = (
    "DELETE FROM sodalite_session_locks WHERE entity = %(e)s AND partition = %(p)s AND session_id = %(sid)s "
    "AND token = %(tok)s RETURNING 1"
)
_RECORD_ACTIVITY: Final = (
    "INSERT INTO sodalite_activity AS a (entity, node, last_activity, receivers, refreshed_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (entity, node) DO UPDATE SET "
    "last_activity = greatest(a.last_activity, excluded.last_activity), receivers = excluded.receivers, "
    "refreshed_at = excluded.refreshed_at"
)
# Deletes the definition only if no registration says the entity is in use; a second sweeper's
# DELETE waits for the first's row lock and then finds the row gone (deleted once).
_DELETE_IDLE: Final = (
    "WITH busy AS (SELECT 1 FROM sodalite_activity WHERE entity = %(k)s AND (last_activity > %(active)s "
    "OR (receivers > 0 AND refreshed_at > %(live)s)) LIMIT 1), "
    "gone AS (DELETE FROM sodalite_entities WHERE path_key = %(k)s AND NOT EXISTS (SELECT 1 FROM busy) "
    "RETURNING 1), "
    "regs AS (DELETE FROM sodalite_activity WHERE entity = %(k)s AND EXISTS (SELECT 1 FROM gone)) "
    "SELECT count(*) FROM gone"
)
# Added after the subscription's other rules only when no rule of that name exists: a concurrent
# insert of the same key waits for the first to commit, then finds the conflict (one of two succeeds).
_ADD_RULE: Final = (
    "INSERT INTO sodalite_rules (subscription, name_key, name, position, rule) "
    "SELECT %(s)s, %(k)s, %(n)s, coalesce(max(position), 0) + 1, %(rule)s FROM sodalite_rules "
    "WHERE subscription = %(s)s ON CONFLICT (subscription, name_key) DO NOTHING RETURNING 1"
)
_REPLACE_RULE: Final = (
    "UPDATE sodalite_rules SET name = %(n)s, rule = %(rule)s WHERE subscription = %(s)s AND name_key = %(k)s "
    "RETURNING 1"
)
_DELETE_RULE: Final = "DELETE FROM sodalite_rules WHERE subscription = %(s)s AND name_key = %(k)s RETURNING 1"
_DELETE_RULES: Final = "DELETE FROM sodalite_rules WHERE subscription = %s"
_PUT_RULE_AT: Final = (
    "INSERT INTO sodalite_rules (subscription, name_key, name, position, rule) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (subscription, name_key) DO UPDATE SET name = excluded.name, position = excluded.position, "
    "rule = excluded.rule"
)
_SELECT_RULES: Final = "SELECT subscription, rule FROM sodalite_rules ORDER BY subscription, position, name_key"
_PUT_ENTITY: Final = (
    "INSERT INTO sodalite_entities (path_key, path, kind, properties) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (path_key) DO UPDATE SET path = excluded.path, kind = excluded.kind, "
    "properties = excluded.properties"
)
_CURRENT_HISTORY: Final = "(SELECT history_generation FROM sodalite_ring)"
# An upsert in the history's current generation; the id's rows in other generations go (the new
# time is the id's time, even an earlier one).
_REMEMBER_ID: Final = (
    "WITH old AS (DELETE FROM sodalite_duplicate_history WHERE entity = %(e)s AND partition = %(p)s "
    f"AND message_id = %(mid)s AND generation <> {_CURRENT_HISTORY}) "
    "INSERT INTO sodalite_duplicate_history AS h (generation, entity, partition, message_id, seen_at) "
    f"VALUES ({_CURRENT_HISTORY}, %(e)s, %(p)s, %(mid)s, %(at)s) "
    "ON CONFLICT (entity, partition, message_id, generation) DO UPDATE SET seen_at = excluded.seen_at, claim = NULL"
)
_FORGET_IDS: Final = (
    "DELETE FROM sodalite_duplicate_history WHERE entity = %(e)s AND partition = %(p)s "
    "AND message_id = ANY(%(ids)s::bytea[]) AND (%(before)s::bigint IS NULL OR seen_at < %(before)s::bigint)"
)
_PRUNE_IDS: Final = (
    "DELETE FROM sodalite_duplicate_history WHERE entity = %(e)s AND partition = %(p)s AND seen_at < %(before)s"
)
# ClaimMessageIds, after _TAKE_PARTITION of its partition (so of two batches taking one id, the
# second's statement sees the first's row): the ids not seen since ``since`` (the first of each) are
# written to the current generation, marked with the claim; the rows returned name their places.
_CLAIM_IDS: Final = (
    "WITH i AS (SELECT DISTINCT ON (mid) mid, ord FROM unnest(%(ids)s::bytea[]) WITH ORDINALITY AS u(mid, ord) "
    "ORDER BY mid, ord), "
    "fresh AS (SELECT i.mid, i.ord FROM i WHERE NOT EXISTS (SELECT 1 FROM sodalite_duplicate_history h "
    "WHERE h.entity = %(e)s AND h.partition = %(p)s AND h.message_id = i.mid AND h.seen_at >= %(since)s)), "
    "ins AS (INSERT INTO sodalite_duplicate_history AS h (generation, entity, partition, message_id, seen_at, claim) "
    f"SELECT {_CURRENT_HISTORY}, %(e)s, %(p)s, fresh.mid, %(now)s, %(claim)s FROM fresh "
    "ON CONFLICT (entity, partition, message_id, generation) DO UPDATE SET seen_at = excluded.seen_at, "
    "claim = excluded.claim) "
    "SELECT ord FROM fresh"
)
_PUT_SESSION_STATE: Final = (
    "INSERT INTO sodalite_session_states (entity, partition, session_id, state, updated_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (entity, partition, session_id) "
    "DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at"
)
_CLEAR_SESSION_STATE: Final = (
    "DELETE FROM sodalite_session_states WHERE entity = %s AND partition = %s AND session_id = %s"
)
_REMEMBER_MOVE_KEY: Final = (
    "INSERT INTO sodalite_move_keys (entity, partition, move_key) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
)
_FORGET_MOVE_KEY: Final = (
    "DELETE FROM sodalite_move_keys WHERE entity = %s AND partition = %s AND move_key = %s"
)
# An entity's own partitions and its sub-queues' ('<path>/$...'): bytewise, '$' < '%'.
_DELETE_ENTITY_ROWS: Final = tuple(
    f"DELETE FROM {table} WHERE entity = %s OR (entity >= %s AND entity < %s)" for table in _PARTITION_TABLES
)
_SELECT_HISTORY: Final = (
    "SELECT message_id, max(seen_at) AS at FROM sodalite_duplicate_history WHERE entity = %s AND partition = %s "
    "GROUP BY message_id ORDER BY at, message_id"
)
_SELECT_SESSION_STATES: Final = (
    "SELECT session_id, state, updated_at FROM sodalite_session_states WHERE entity = %s AND partition = %s "
    "ORDER BY session_id"
)
_SELECT_MOVE_KEYS: Final = (
    "SELECT move_key FROM sodalite_move_keys WHERE entity = %s AND partition = %s ORDER BY move_key"
)
_SELECT_COUNTS: Final = (
    "SELECT coalesce(sum(active), 0), coalesce(sum(scheduled), 0), coalesce(sum(deferred), 0), "
    "coalesce(sum(size_in_bytes), 0), coalesce(max(last_sequence_number), 0), "
    "(SELECT min(sequence_number) FROM sodalite_messages WHERE entity = %(e)s AND partition = %(p)s) "
    f"FROM ({_counter_rows('active, scheduled, deferred, size_in_bytes, last_sequence_number')}) c"
)
_COUNT_COLUMNS: Final = "active, scheduled, deferred, size_in_bytes, last_sequence_number"
_SELECT_COUNTS_MANY: Final = (  # counts_many: every partition asked, in order, in one statement
    "SELECT coalesce(sum(c.active), 0), coalesce(sum(c.scheduled), 0), coalesce(sum(c.deferred), 0), "
    "coalesce(sum(c.size_in_bytes), 0), coalesce(max(c.last_sequence_number), 0) "
    "FROM unnest(%(es)s::bytea[], %(ps)s::bigint[]) WITH ORDINALITY AS r(e, p, i) "
    f"LEFT JOIN LATERAL (SELECT {_COUNT_COLUMNS} FROM sodalite_partitions WHERE entity = r.e AND partition = r.p "
    f"UNION ALL SELECT {_COUNT_COLUMNS} FROM sodalite_counters WHERE entity = r.e AND partition = r.p) c ON true "
    "GROUP BY r.i ORDER BY r.i"
)
_SELECT_FETCH: Final = (
    f"SELECT {_STORED_COLUMNS} FROM sodalite_messages WHERE entity = %(e)s AND partition = %(p)s "
    "AND sequence_number = ANY(%(seq)s::bigint[]) ORDER BY sequence_number"
)
_SELECT_NEXT_DUE: Final = (
    "SELECT LEAST("
    "(SELECT min(scheduled_enqueue_time) FROM sodalite_messages m WHERE "
    f"{_PARTITION} AND m.state = 2), "
    "(SELECT min(expires_at) FROM sodalite_messages m WHERE "
    f"{_PARTITION} AND m.expires_at IS NOT NULL AND {_UNLOCKED}), "
    "(SELECT min(locked_until) FROM sodalite_messages m WHERE "
    f"{_PARTITION} AND m.locked_until > %(now)s AND m.lock_token IS NOT NULL), "
    "(SELECT min(locked_until) FROM sodalite_session_locks m WHERE "
    f"{_PARTITION} AND m.locked_until > %(now)s))"
)
_SELECT_NEXT_DUE_MANY: Final = (  # next_due_many: every partition asked, in order, in one statement
    "SELECT (" + _SELECT_NEXT_DUE.replace("%(e)s", "r.e").replace("%(p)s", "r.p") + ") "
    "FROM unnest(%(es)s::bytea[], %(ps)s::bigint[]) WITH ORDINALITY AS r(e, p, i) ORDER BY r.i"
)
_SELECT_ENTITIES: Final = "SELECT path, kind, properties, path_key FROM sodalite_entities ORDER BY path_key"
_SELECT_RING: Final = (
    "SELECT generation, " + ", ".join(f"pg_relation_size('sodalite_messages_g{g}')" for g in range(GENERATIONS))
    + ", " + ", ".join(f"pg_relation_size('sodalite_counters_g{g}')" for g in range(GENERATIONS))
    + ", history_generation, "
    + ", ".join(f"pg_relation_size('sodalite_duplicate_history_g{g}')" for g in range(GENERATIONS))
    + " FROM sodalite_ring"
)



# What a commit waits for before the server acknowledges it. ``on`` (the server's default) and
# ``remote_apply`` flush the WAL locally (and wait for synchronous standbys); ``off``, ``local`` and
# ``remote_write`` would let an acknowledged send be lost with the server or with its disk. A
# database, role or server configured weaker is overruled for the broker's own sessions.
_DURABLE_COMMITS: Final = ("on", "remote_apply")


def _durable_commits(conn: psycopg.Connection[Any]) -> None:
    """Make ``conn``'s commits wait for the WAL flush (a pool's ``configure`` hook; autocommit)."""
    row = conn.execute("SHOW synchronous_commit").fetchone()
    if row is None or row[0] not in _DURABLE_COMMITS:
        conn.execute("SET synchronous_commit = on")


def check_url(url: str) -> str:
    """A PostgreSQL connection URL, or ConfigurationError saying what is wrong with it."""
    if not isinstance(url, str):
        raise ConfigurationError(f"PostgreSQL store: the URL must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        pg_failover.check_hosts(parts.netloc)  # several hosts: host:port,host:port (each port a number)
        if "," not in parts.netloc:
            parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ConfigurationError(f"PostgreSQL store URL {redact(url)!r} is malformed: {exc}") from None
    if parts.scheme not in URL_SCHEMES:
        raise ConfigurationError(
            f"PostgreSQL store URL {redact(url)!r}: must start with postgresql:// "
            "(for example postgresql://user:password@dbhost:5432/sodalite)")
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise ConfigurationError(
            f"PostgreSQL store URL {redact(url)!r}: name the database (postgresql://host/DATABASE)")
    return url


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<malformed URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _fold(path: str) -> bytes:
    """A partition's key: the entity path with ASCII letters lower-cased, as UTF-8."""
    return _utf8(path.translate(_ASCII_LOWER), "entity path")


def _utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreUnavailable(f"{what} {value!r} cannot be stored as UTF-8 text ({exc})") from exc


def _opt_utf8(value: str | None, what: str) -> bytes | None:
    return None if value is None else _utf8(value, what)


def _int64(value: int | None, what: str) -> int | None:
    if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
        raise StoreUnavailable(f"{what} {value} does not fit a signed 64-bit integer")
    return value


def _text(value: bytes | memoryview | None) -> str | None:
    return None if value is None else bytes(value).decode("utf-8")


def _message_from_row(row: tuple[Any, ...]) -> MessageRecord:
    (seq, enqueued, message_id, session_id, partition_key, ttl, expires_at, scheduled,
     delivery_count, state, durable, priority, annotations, annotation_count, tail) = row  # fmt: skip
    return MessageRecord(
        sequence_number=seq,
        enqueued_time=enqueued,
        message_id=_text(message_id),
        session_id=_text(session_id),
        partition_key=_text(partition_key),
        time_to_live=ttl,
        expires_at=expires_at,
        scheduled_enqueue_time=scheduled,
        delivery_count=delivery_count,
        state=MessageState(state),
        durable=durable,
        priority=priority,
        annotations=bytes(annotations),
        annotation_count=annotation_count,
        tail=bytes(tail),
    )


def _encode_properties(entity: EntityRecord, value: object = None) -> str:
    try:
        return json.dumps(entity.properties if value is None else value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreUnavailable(
            f"cannot store entity {entity.path!r}: its properties are not JSON-serializable ({exc})"
        ) from exc


def _key(ref: PartitionRef) -> tuple[bytes, int]:
    partition = _int64(ref.partition, f"partition number of {ref.entity!r}")
    assert partition is not None
    return _fold(ref.entity), partition


def _describe(exc: BaseException) -> str:
    sqlstate = getattr(exc, "sqlstate", None)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{text} [{sqlstate}]" if sqlstate else text




_Rows = list[tuple[Any, ...]]
_Params = tuple[Any, ...] | dict[str, Any]  # one execution's parameters: positional or named


def _done(_: list[_Rows]) -> OpResult:
    return Done()


@dataclass(slots=True)
class _Step:
    """One statement of a batch: run once with ``params``, or with ``executemany`` over ``many``."""

    sql: str
    params: Mapping[str, Any] | None = None
    many: list[_Params] | None = None
    rows: bool = False  # keep the rows it returns for the operation's result
    # Run with the prepared statement's generic plan (plan_cache_mode): see _GENERIC_PLAN.
    generic: bool = False


@dataclass(slots=True)
class _Plan:
    """What one operation becomes: its statements, and how their rows make its result."""

    steps: list[_Step] = field(default_factory=list)
    # Called with the rows of the steps that keep theirs (``rows=True``), in order.
    finish: Callable[[list[_Rows]], OpResult] = _done
    # The partitions it numbers messages of, whose base rows the batch takes first (_TAKE_PARTITION).
    takes: set[tuple[bytes, int]] = field(default_factory=set)
    # A plan for several operations (_merged_complete_plan): their results, in order, instead of finish.
    results: Callable[[list[_Rows]], list[OpResult]] | None = None


def _stored_from_row(row: tuple[Any, ...]) -> StoredMessage:
    *message, token, until, owner = row
    return StoredMessage(record=_message_from_row(tuple(message)), lock_token=token, locked_until=until,
                         lock_owner=owner)


def _partition_params(ref: PartitionRef) -> dict[str, Any]:
    entity, partition = _key(ref)
    return {"e": entity, "p": partition}


def _time(value: int, what: str) -> int:
    checked = _int64(value, what)
    assert checked is not None
    return checked


def _message_arrays(ref: PartitionRef, messages: Sequence[MessageRecord], numbered: bool) -> dict[str, Any]:
    """The messages as one array per column (for ``unnest``), each value checked."""
    arrays: dict[str, list[Any]] = {"seq": [], **{name: [] for name in _FIELD_NAMES}}
    for m in messages:
        where = f"message {m.sequence_number} of {ref.entity!r} partition {ref.partition}:"
        arrays["seq"].append(_int64(m.sequence_number, f"{where} sequence_number") if numbered else 0)
        arrays["enqueued_time"].append(_int64(m.enqueued_time, f"{where} enqueued_time"))
        arrays["message_id"].append(_opt_utf8(m.message_id, f"{where} message_id"))
        arrays["session_id"].append(_opt_utf8(m.session_id, f"{where} session_id"))
        arrays["partition_key"].append(_opt_utf8(m.partition_key, f"{where} partition_key"))
        arrays["time_to_live"].append(_int64(m.time_to_live, f"{where} time_to_live"))
        arrays["expires_at"].append(_int64(m.expires_at, f"{where} expires_at"))
        arrays["scheduled_enqueue_time"].append(_int64(m.scheduled_enqueue_time, f"{where} scheduled_enqueue_time"))
        arrays["delivery_count"].append(_int64(m.delivery_count, f"{where} delivery_count"))
        arrays["state"].append(int(m.state))
        arrays["durable"].append(m.durable)
        arrays["priority"].append(_int64(m.priority, f"{where} priority"))
        arrays["annotations"].append(bytes(m.annotations))
        arrays["annotation_count"].append(_int64(m.annotation_count, f"{where} annotation_count"))
        arrays["tail"].append(bytes(m.tail))
    return arrays


def _item_arrays(items: Sequence[tuple[int, uuid.UUID | None, int, bytes | None, int, bytes | None, bool]],
                 times: Sequence[tuple[int | None, int | None]] | None = None,
                 backs: Sequence[bool] | None = None) -> dict[str, Any]:
    """Settle and move items as arrays: (number, token, outcome code, annotations, count, tail, reset),
    a moved copy's (enqueued time, expiry time), both None for settlements, and whether a dead letter
    gives its delivery back (count - 1: :attr:`SettleItem.give_back_delivery`)."""
    times = times if times is not None else [(None, None)] * len(items)
    return {
        "back": list(backs) if backs is not None else [False] * len(items),
        "enq": [None if enq is None else _time(enq, "enqueued_time") for enq, _ in times],
        "exp": [None if exp is None else _time(exp, "expires_at") for _, exp in times],
        "seq": [_int64(seq, "sequence number") for seq, *_ in items],
        "tok": [tok for _, tok, *_ in items],
        "code": [code for _, _, code, *_ in items],
        "ann": [None if ann is None else bytes(ann) for _, _, _, ann, _, _, _ in items],
        "annc": [_int64(count, "annotation count") for *_, count, _, _ in items],
        "tl": [None if tail is None else bytes(tail) for *_, tail, _ in items],
        "reset": [reset for *_, reset in items],
    }


def _unique(numbers: Sequence[int]) -> bool:
    return len(set(numbers)) == len(numbers)


def _append_plan(op: Append) -> _Plan:
    if not op.messages:
        return _Plan(finish=lambda _: Appended(()))
    if op.numbered_by is not None and _key(op.numbered_by) != _key(op.ref):
        gate_entity, gate_partition = (None, None) if op.gate is None else _key(op.gate.ref)
        counter_entity, counter_partition = _key(op.numbered_by)
        params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
                  "ne": counter_entity, "np": counter_partition, "gated": op.gate is not None,
                  "ge": gate_entity, "gp": gate_partition, "claim": None if op.gate is None else op.gate.claim,
                  "gid": [None] * len(op.messages) if op.gate is None
                  else [_opt_utf8(mid, "gate message id") for mid in op.gate.message_ids]}

        def placed(rows: list[_Rows]) -> OpResult:
            by_place = {int(place): int(number) for place, number in rows[0]}
            return Appended(tuple(by_place.get(place, 0) for place in range(1, len(op.messages) + 1)))

        return _Plan([_Step(_APPEND_NUMBERED_BY, params, rows=True)], placed,
                     takes={_key(op.ref), _key(op.numbered_by)})
    if op.gate is not None:
        gate_entity, gate_partition = _key(op.gate.ref)
        gated = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
                 "ge": gate_entity, "gp": gate_partition, "claim": op.gate.claim,
                 "gid": [_opt_utf8(mid, "gate message id") for mid in op.gate.message_ids]}

        def numbered(rows: list[_Rows]) -> OpResult:
            by_place = {int(place): int(number) for place, number in rows[0]}
            return Appended(tuple(by_place.get(place, 0) for place in range(1, len(op.messages) + 1)))

        return _Plan([_Step(_APPEND_GATED, gated, rows=True)], numbered, takes={_key(op.ref)})
    params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
              "n": len(op.messages),
              "da": sum(1 for m in op.messages if m.state == MessageState.ACTIVE),
              "ds": sum(1 for m in op.messages if m.state == MessageState.SCHEDULED),
              "dd": sum(1 for m in op.messages if m.state == MessageState.DEFERRED),
              "dz": sum(m.size for m in op.messages)}
    return _Plan([_Step(_APPEND, params, rows=True)],
                 lambda rows: Appended(tuple(sorted(int(r[0]) for r in rows[0]))), takes={_key(op.ref)})


def _claim_ids_plan(op: ClaimMessageIds) -> _Plan:
    if not op.message_ids:
        return _Plan(finish=lambda _: IdsClaimed(()))
    now = _time(op.now, "now")
    params = {**_partition_params(op.ref), "ids": [_utf8(mid, "message id") for mid in op.message_ids],
              "now": now, "since": _time(now - op.window_ms, "now - window_ms"), "claim": op.claim}

    def fresh(rows: list[_Rows]) -> OpResult:
        taken = {int(r[0]) for r in rows[0]}
        return IdsClaimed(tuple(place in taken for place in range(1, len(op.message_ids) + 1)))

    return _Plan([_Step(_CLAIM_IDS, params, rows=True)], fresh, takes={_key(op.ref)})


def _claim_plan(op: Claim) -> _Plan:
    if not op.tokens or (op.sequence_numbers is not None and not op.sequence_numbers):
        return _Plan(finish=lambda _: Claimed(()))
    params = {**_partition_params(op.ref), "state": int(op.state), "now": _time(op.now, "now"),
              "n": len(op.tokens), "tokens": list(op.tokens), "until": _time(op.locked_until, "locked_until"),
              "owner": op.owner,
              "sid": None if op.session_id is None else _utf8(op.session_id, "session id"),
              "seqs": None if op.sequence_numbers is None else [_int64(n, "sequence number")
                                                                 for n in op.sequence_numbers]}
    sql = _CLAIM_SQL[(op.session_id is not None, op.sequence_numbers is not None)]
    return _Plan([_Step(sql, params, rows=True)], lambda rows: Claimed(
        tuple(sorted((_stored_from_row(r) for r in rows[0]), key=lambda s: s.record.sequence_number))))


def _flags(items_numbers: Sequence[int], groups: list[list[int]], rows: list[_Rows]) -> tuple[bool, ...]:
    """Per item: did the statement that carried it return its number?"""
    applied = [False] * len(items_numbers)
    for indexes, returned in zip(groups, rows, strict=True):
        numbers = {int(r[0]) for r in returned}
        for index in indexes:
            applied[index] = items_numbers[index] in numbers
    return tuple(applied)


def _batches(keys: Sequence[Any], numbers: Sequence[int], one_by_one: bool = False) -> list[tuple[Any, list[int]]]:
    """Item indexes grouped by key into one statement each when every number appears once; else
    (or when asked) one statement per item, in order (a later item sees what an earlier one did)."""
    if one_by_one or not _unique(numbers):
        return [(key, [index]) for index, key in enumerate(keys)]
    grouped: dict[Any, list[int]] = {}
    for index, key in enumerate(keys):
        grouped.setdefault(key, []).append(index)
    return list(grouped.items())


def _settle_plan(op: Settle) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now")}
    numbers = [item.sequence_number for item in op.items]

    def key(item: SettleItem) -> Any:
        if item.outcome is Outcome.COMPLETE:
            return ("complete",)
        if item.outcome is Outcome.DEAD_LETTER:
            return ("dead-letter", *_key(op.dead_letter_target(item)), item.keep_sequence_number)
        return ("unlock",)

    steps: list[_Step] = []
    groups: list[list[int]] = []
    takes: set[tuple[bytes, int]] = set()
    for group_key, indexes in _batches([key(item) for item in op.items], numbers):
        items = [op.items[i] for i in indexes]
        params = {**base, **_item_arrays([(it.sequence_number, it.lock_token, _CODE[it.outcome], it.annotations,
                                           it.annotation_count, it.tail, it.reset_delivery_count) for it in items],
                                         [(it.enqueued_time, it.expires_at) for it in items],
                                         [it.give_back_delivery for it in items])}
        if group_key[0] == "complete":
            sql = _COMPLETE
        elif group_key[0] == "unlock":
            sql = _UNLOCK
        else:
            sql = _DEAD_LETTER
            params |= {"te": group_key[1], "tp": group_key[2], "same": group_key[1:3] == _key(op.ref),
                       "keep": group_key[3]}
            takes.add(group_key[1:3])
        steps.append(_Step(sql, params, rows=True, generic=True))
        groups.append(indexes)
    return _Plan(steps, lambda rows: Settled(_flags(numbers, groups, rows)), takes)


def _results(plans: list[_Plan], fetched: list[_Rows], position: int) -> tuple[OpResult, ...]:
    """One result per operation from the rows of the plans' steps (those from ``position`` on)."""
    results: list[OpResult] = []
    for plan in plans:
        mine = [rows for step, rows in zip(plan.steps, fetched[position:position + len(plan.steps)], strict=True)
                if step.rows]
        position += len(plan.steps)
        if plan.results is not None:
            results.extend(plan.results(mine))
        else:
            results.append(plan.finish(mine))
    return tuple(results)


def _completes_only(op: StoreOp) -> bool:
    return isinstance(op, Settle) and bool(op.items) and all(i.outcome is Outcome.COMPLETE for i in op.items)


def _plans(batch: Sequence[StoreOp]) -> list[_Plan]:
    """One plan per operation, except that Settle operations of one partition that follow each other
    and only complete distinct messages become one plan (one statement) for all of them."""
    plans: list[_Plan] = []
    index = 0
    while index < len(batch):
        op = batch[index]
        index += 1
        if not (isinstance(op, Settle) and _completes_only(op)):
            plans.append(_plan(op))
            continue
        run = [op]
        numbers = {item.sequence_number for item in op.items}
        unique = len(numbers) == len(op.items)
        while unique and index < len(batch):
            nxt = batch[index]
            if not (isinstance(nxt, Settle) and _completes_only(nxt) and _key(nxt.ref) == _key(op.ref)):
                break
            mine = {item.sequence_number for item in nxt.items}
            if len(mine) != len(nxt.items) or mine & numbers:
                break
            numbers |= mine
            run.append(nxt)
            index += 1
        plans.append(_plan(op) if len(run) == 1 else _merged_complete_plan(run))
    return plans


def _merged_complete_plan(ops: list[Settle]) -> _Plan:
    items = [(item, op.now) for op in ops for item in op.items]
    params = {**_partition_params(ops[0].ref),
              "seq": [_int64(item.sequence_number, "sequence number") for item, _ in items],
              "tok": [item.lock_token for item, _ in items], "nows": [_time(now, "now") for _, now in items]}

    def results(rows: list[_Rows]) -> list[OpResult]:
        done = {int(r[0]) for r in rows[0]}
        return [Settled(tuple(item.sequence_number in done for item in op.items)) for op in ops]

    return _Plan([_Step(_COMPLETE_MERGED, params, rows=True, generic=True)], results=results)


def _renew_plan(op: RenewLocks) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now"),
            "until": _time(op.locked_until, "locked_until")}
    numbers = [seq for seq, _ in op.items]
    steps: list[_Step] = []
    groups: list[list[int]] = []
    for _, indexes in _batches([()] * len(op.items), numbers):
        items = [op.items[i] for i in indexes]
        steps.append(_Step(_RENEW, {**base, "seq": [_int64(s, "sequence number") for s, _ in items],
                                    "tok": [t for _, t in items]}, rows=True, generic=True))
        groups.append(indexes)
    return _Plan(steps, lambda rows: Renewed(_flags(numbers, groups, rows)))


def _move_plan(op: MoveMessages) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now")}
    target = op.destination
    if target is not None:
        base["te"], base["tp"] = _key(target)
        base["same"] = _key(target) == _key(op.ref)
        base["keep"] = op.keep_sequence_numbers
    numbers = [item.sequence_number for item in op.items]
    steps: list[_Step] = []
    groups: list[list[int]] = []
    # Into the partition it came from, a moved message gets a new number that a later item may name.
    same = target is not None and _key(target) == _key(op.ref)
    for _, indexes in _batches([()] * len(op.items), numbers, one_by_one=same):
        items: list[MoveItem] = [op.items[i] for i in indexes]
        params = {**base, **_item_arrays([(it.sequence_number, None, 0, it.annotations, it.annotation_count,
                                           it.tail, it.reset_delivery_count) for it in items],
                                         [(it.enqueued_time, it.expires_at) for it in items])}
        steps.append(_Step(_MOVE_AWAY if target is None else _MOVE_TO, params, rows=True))
        groups.append(indexes)

    def finish(rows: list[_Rows]) -> OpResult:
        moved: list[int | None] = [None] * len(numbers)
        for indexes, returned in zip(groups, rows, strict=True):
            new = {int(old): int(seq) for old, seq in returned}
            for index in indexes:
                moved[index] = new.get(numbers[index])
        return Moved(tuple(moved))

    return _Plan(steps, finish, set() if target is None else {_key(target)})


def _activate_plan(op: Activate) -> _Plan:
    if op.limit <= 0:
        return _Plan(finish=lambda _: Activated(()))
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"), "n": _time(op.limit, "limit")}
    return _Plan([_Step(_ACTIVATE, params, rows=True)], lambda rows: Activated(tuple(sorted(
        (_stored_from_row(r) for r in rows[0]),
        key=lambda s: (s.record.scheduled_enqueue_time or 0, s.record.sequence_number)))))


def _purge_plan(op: Purge) -> _Plan:
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"),
              "through": _int64(op.through_sequence_number, "through_sequence_number")}
    return _Plan([_Step(_PURGE[op.through_sequence_number is not None], params, rows=True)],
                 lambda rows: Purged(int(rows[0][0][0])))


def _restore_plan(op: Restore) -> _Plan:
    if not op.messages:
        return _Plan(finish=lambda _: Restored(()))
    params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=True)}

    def restored(rows: list[_Rows]) -> OpResult:
        back = {int(r[0]) for r in rows[0]}
        flags: list[bool] = []
        for m in op.messages:  # a number given twice is put back once: the first
            flags.append(m.sequence_number in back)
            back.discard(m.sequence_number)
        return Restored(tuple(flags))

    return _Plan([_Step(_RESTORE, params, rows=True)], restored)


def _cancel_plan(op: CancelScheduled) -> _Plan:
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"),
              "seq": [_int64(n, "sequence number") for n in op.sequence_numbers]}
    return _Plan([_Step(_CANCEL_SCHEDULED, params, rows=True)],
                 lambda rows: Unscheduled(tuple(int(r[0]) for r in rows[0])))


def _rule_plan(op: PutRule | DeleteRule) -> _Plan:
    params: dict[str, Any] = {"s": _fold(op.subscription), "k": _fold(op.name)}
    if isinstance(op, DeleteRule):
        sql = _DELETE_RULE
    else:
        sql = _REPLACE_RULE if op.replace else _ADD_RULE
        params |= {"n": op.name, "rule": _encode_properties(EntityRecord(op.subscription, SUBSCRIPTION_KIND, {}),
                                                            op.rule)}
    return _Plan([_Step(sql, params, rows=True)], lambda rows: RuleWritten(bool(rows[0])))


def _session_plan(op: ClaimSession | RenewSession | ReleaseSession) -> _Plan:
    params: dict[str, Any] = {**_partition_params(op.ref), "tok": op.token}
    if isinstance(op, ClaimSession):
        params |= {"now": _time(op.now, "now"), "until": _time(op.locked_until, "locked_until"),
                   "owner": op.owner,
                   "sid": None if op.session_id is None else _utf8(op.session_id, "session id")}
        sql = _CLAIM_NEXT_SESSION if op.session_id is None else _CLAIM_NAMED_SESSION
        return _Plan([_Step(sql, params, rows=True)],
                     lambda rows: SessionClaimed(_text(rows[0][0][0]) if rows[0] else None))
    params["sid"] = _utf8(op.session_id, "session id")
    if isinstance(op, RenewSession):
        params |= {"now": _time(op.now, "now"), "until": _time(op.locked_until, "locked_until")}
        sql = _RENEW_SESSION
    else:
        sql = _RELEASE_SESSION
    return _Plan([_Step(sql, params, rows=True)], lambda rows: Renewed((bool(rows[0]),)))


def _record_plan(op: StoreOp) -> _Plan:
    """The operations of the port's first version that touch no messages (results: Done)."""
    return _Plan([_Step(sql, many=rows) for sql, rows in _v1_statements(op)])


def _v1_statements(op: StoreOp) -> Iterable[tuple[str, list[_Params]]]:
    """The statements of the operations kept from version 1 (none touches messages), each with its parameter rows."""
    if isinstance(op, PutEntity):
        e = op.entity
        properties, rules = split_rules(e)
        folded = _fold(e.path)
        yield _PUT_ENTITY, [(folded, e.path, e.kind, _encode_properties(e, properties))]
        if rules is not None:
            yield _DELETE_RULES, [(folded,)]
            if rules:
                yield _PUT_RULE_AT, [(folded, _fold(name), name, position, _encode_properties(e, rule))
                                     for position, (name, rule) in enumerate(rules, start=1)]
    elif isinstance(op, DeleteEntity):
        folded = _fold(op.path)
        for statement in _DELETE_ENTITY_ROWS:
            yield statement, [(folded, folded + b"/$", folded + b"/%")]
        yield "DELETE FROM sodalite_entities WHERE path_key = %s", [(folded,)]
        yield _DELETE_RULES, [(folded,)]
        yield "DELETE FROM sodalite_activity WHERE entity = %s", [(folded,)]
    elif isinstance(op, RecordActivity):
        if op.entries:
            now = _int64(op.now, "now")
            yield _RECORD_ACTIVITY, [
                (_fold(e.path), op.node, _int64(e.last_activity, f"last activity of {e.path!r}"),
                 _int64(e.receivers, f"receivers of {e.path!r}"), now) for e in op.entries]
    elif isinstance(op, RememberMessageIds):
        if op.entries:
            entity, partition = _key(op.ref)
            yield _REMEMBER_ID, [
                {"e": entity, "p": partition, "mid": _utf8(mid, "message id"),
                 "at": _int64(at, f"seen-at time of message id {mid!r}")}
                for mid, at in op.entries
            ]
    elif isinstance(op, ForgetMessageIds):
        if op.message_ids:
            entity, partition = _key(op.ref)
            ids = [_utf8(mid, "message id") for mid in op.message_ids]
            yield _FORGET_IDS, [{"e": entity, "p": partition, "ids": ids,
                                 "before": _int64(op.seen_before, "seen_before")}]
    elif isinstance(op, PutSessionState):
        entity, partition = _key(op.ref)
        sid = _utf8(op.session_id, "session id")
        if op.state is None:
            yield _CLEAR_SESSION_STATE, [(entity, partition, sid)]
        else:
            updated = _int64(op.updated_at, f"update time of session {op.session_id!r}")
            yield _PUT_SESSION_STATE, [(entity, partition, sid, bytes(op.state), updated)]
    elif isinstance(op, RememberMoveKeys | ForgetMoveKeys):
        if op.keys:
            entity, partition = _key(op.ref)
            rows: list[_Params] = [(entity, partition, _utf8(k, "move key")) for k in op.keys]
            yield (_REMEMBER_MOVE_KEY if isinstance(op, RememberMoveKeys) else _FORGET_MOVE_KEY), rows
    else:
        raise AssertionError(f"not a version-1 operation without messages: {type(op).__name__}")


def channel_name(schema: str, kind: str = "") -> str:
    """The notification channel of the Sodalite tables in ``schema``: a channel is database-wide, so
    each schema gets its own and deployments in other schemas of the database are not woken.
    ``kind`` "due_" names the schema's second channel, of scheduled times (:func:`_announcements`)."""
    name = f"sodalite_{kind}{schema}"
    if len(name.encode("utf-8")) <= 63:  # NAMEDATALEN - 1
        return name
    return f"sodalite_{kind}" + hashlib.sha256(schema.encode("utf-8")).hexdigest()[:32]


DUE: Final = "due_"  # the kind of channel_name that carries scheduled times


def _announcements(batch: Sequence[StoreOp], origin: str) -> tuple[list[str], list[str]]:
    """The notification payloads a batch sends when it commits: one per partition it makes messages
    ready in (ACTIVE rows appended, scheduled rows activated, abandoned and released rows, rows
    dead-lettered or moved into it, a session lock released), and one if it changes entity records:
    ``r <origin> <partition> <entity>`` and ``e <origin>``, on the schema's channel; and, on its
    channel of due times (``channel_name(schema, DUE)``), one per partition it appends scheduled
    messages to, naming the earliest of their times (ms): ``d <origin> <partition> <time> <entity>``.
    The origin lets a node skip its own. Returns (channel payloads, due-channel payloads)."""
    ready: dict[tuple[str, int], None] = {}
    due: dict[tuple[str, int], int] = {}
    entities = False
    for op in batch:
        if isinstance(op, Append):
            if any(m.state == MessageState.ACTIVE for m in op.messages):
                ready[(op.ref.entity, op.ref.partition)] = None
            times = [m.scheduled_enqueue_time or 0 for m in op.messages if m.state == MessageState.SCHEDULED]
            if times:
                key = (op.ref.entity, op.ref.partition)
                due[key] = min(times + ([due[key]] if key in due else []))
        elif isinstance(op, Activate):
            if op.limit > 0:
                ready[(op.ref.entity, op.ref.partition)] = None
        elif isinstance(op, Restore):
            if any(m.state == MessageState.ACTIVE for m in op.messages):
                ready[(op.ref.entity, op.ref.partition)] = None
        elif isinstance(op, Settle):
            for item in op.items:
                if item.outcome in (Outcome.ABANDON, Outcome.RELEASE):
                    ready[(op.ref.entity, op.ref.partition)] = None
                elif item.outcome is Outcome.DEAD_LETTER:
                    ready[op.dead_letter_target(item)] = None
        elif isinstance(op, MoveMessages):
            if op.destination is not None and op.items:
                ready[op.destination] = None
        elif isinstance(op, ReleaseSession):
            ready[(op.ref.entity, op.ref.partition)] = None
        elif isinstance(op, PutEntity | DeleteEntity | DeleteIdleEntity | PutRule | DeleteRule):
            entities = True
    payloads = [f"r {origin} {partition} {entity}" for entity, partition in ready]
    if entities:
        payloads.append(f"e {origin}")
    return payloads, [f"d {origin} {partition} {at} {entity}" for (entity, partition), at in due.items()]


def _parse_announcement(payload: str) -> tuple[str, str, PartitionRef | None, int | None] | None:
    """(kind, origin, ref, due time) of a payload :func:`_announcements` made; None for anything else."""
    parts = payload.split(" ", 3)
    if len(parts) == 2 and parts[0] == "e":
        return "e", parts[1], None, None
    if len(parts) == 4 and parts[0] == "r" and parts[2].isdigit():
        return "r", parts[1], PartitionRef(parts[3], int(parts[2])), None
    if parts[0] == "d":
        parts = payload.split(" ", 4)
        if len(parts) == 5 and parts[2].isdigit() and parts[3].isdigit():
            return "d", parts[1], PartitionRef(parts[4], int(parts[2])), int(parts[3])
    return None


# Settlements and renewals join a few arrays to rows found by primary key: their generic plan is as
# good as any custom one, but PostgreSQL's default (plan_cache_mode = auto) keeps choosing a custom
# plan for them and so plans every execution anew, which cost more server CPU than running them (the
# cycle benchmark: 546 against 184 µs of PostgreSQL CPU per message received and completed). Claims
# keep custom plans (their generic plan was slower there). Transaction-local, so it ends with the batch.
_GENERIC_PLAN: Final = {True: "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)",
                        False: "SELECT set_config('plan_cache_mode', 'auto', true)"}
_NOTIFY: Final = ("SELECT pg_notify(channel, payload) "
                  "FROM unnest(%(channels)s::text[], %(payloads)s::text[]) AS n(channel, payload)")


def _plan(op: StoreOp) -> _Plan:
    if isinstance(op, Append):
        return _append_plan(op)
    if isinstance(op, AppendTo):
        return _append_plan(op.as_append())
    if isinstance(op, Claim):
        return _claim_plan(op)
    if isinstance(op, Settle):
        return _settle_plan(op)
    if isinstance(op, RenewLocks):
        return _renew_plan(op)
    if isinstance(op, MoveMessages):
        return _move_plan(op)
    if isinstance(op, Activate):
        return _activate_plan(op)
    if isinstance(op, Purge):
        return _purge_plan(op)
    if isinstance(op, CancelScheduled):
        return _cancel_plan(op)
    if isinstance(op, Restore):
        return _restore_plan(op)
    if isinstance(op, ClaimSession | RenewSession | ReleaseSession):
        return _session_plan(op)
    if isinstance(op, DeleteIdleEntity):
        params = {"k": _fold(op.path), "active": _int64(op.active_after, "active_after"),
                  "live": _int64(op.live_after, "live_after")}
        return _Plan([_Step(_DELETE_IDLE, params, rows=True)], lambda rows: IdleDeleted(int(rows[0][0][0]) == 1))
    if isinstance(op, ClaimMessageIds):
        return _claim_ids_plan(op)
    if isinstance(op, PutRule | DeleteRule):
        return _rule_plan(op)
    if isinstance(op, PruneMessageIds):
        return _Plan([_Step(_PRUNE_IDS, {**_partition_params(op.ref), "before": _time(op.seen_before, "seen_before")})])
    if isinstance(op, PutEntity | DeleteEntity | RememberMessageIds | ForgetMessageIds | PutSessionState
                  | RememberMoveKeys | ForgetMoveKeys | RecordActivity):
        return _record_plan(op)
    assert_never(op)


class PostgresStore:
    """The store port over one PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str, *, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 application_name: str = "sodalite", rotate_bytes: int = DEFAULT_ROTATE_BYTES,
                 standby_ok: bool = False) -> None:
        self._url = check_url(url)
        self._shown = redact(url)
        if connect_timeout <= 0:
            raise ConfigurationError(f"connect_timeout: must be > 0, got {connect_timeout}")
        if rotate_bytes <= 0:
            raise ConfigurationError(f"rotate_bytes: must be > 0, got {rotate_bytes}")
        self._timeout = connect_timeout
        self._application_name = application_name
        self._rotate_bytes = rotate_bytes
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = None
        self._closed = False
        # Open on a standby (a geo-replication secondary): every call is refused until a primary answers.
        self._standby_ok = standby_ok
        # Which server of a multi-host URL is written to, fenced by timeline (store/pg_failover.py).
        try:
            self._failover = pg_failover.Failover(url, shown=self._shown, connect_timeout=connect_timeout,
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
        if self._closed:
            raise self._unavailable()
        if self._pool is not None:
            return
        pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self._url, min_size=1, max_size=1, open=False, timeout=min(self._timeout, CALL_WAIT),
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout)),
                    "application_name": self._application_name},
            # A failed reconnection is not retried in the background: the next call asks for a connection
            # and so tries again (the partitions' reload loop makes those calls while the database is away).
            reconnect_timeout=0,
            name=f"sodalite-{self._shown}",
            configure=_durable_commits,
            connection_class=self._failover.connection_class(),  # the primary on the highest timeline
        )
        try:
            # The first connection decides: an unreachable database fails here, with what to do.
            with self._failover.connect(autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                        application_name=self._application_name) as conn:
                _durable_commits(conn)
                self._migrate(conn)
                row = conn.execute("SELECT current_schema()").fetchone()
        except pg_failover.NoPrimary as exc:
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

    def status(self) -> pg_failover.StoreStatus:
        """Whether this store can write now and, if not, why (last known; no I/O: see pg_failover)."""
        return self._failover.status()

    def probe(self) -> pg_failover.StoreStatus:
        """Ask every server of the URL now (blocking) and return the resulting status."""
        return self._failover.probe()

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        pool = self._require()
        batch = prepare_batch(batch)
        plans = _plans(batch)  # validate and encode everything before touching the database
        takes = sorted({key for plan in plans for key in plan.takes})
        steps = [_Step(_TAKE_PARTITION, {"e": e, "p": p}) for e, p in takes]
        steps += [step for plan in plans for step in plan.steps]
        if self._channel is not None and steps:
            ready, due = _announcements(batch, self.origin)
            if ready or due:
                # Queued by the transaction, sent by PostgreSQL when it commits (never on a rollback):
                # one more statement in the pipeline, not one more round trip.
                channels = [self._channel] * len(ready) + [self._due_channel] * len(due)
                steps.append(_Step(_NOTIFY, {"channels": channels, "payloads": ready + due}))
        fetched: list[_Rows] = []
        # An all-or-none Settle (a transaction's) is checked before the COMMIT, which then follows in a
        # second round trip, or a ROLLBACK and SettleFenced.
        fenced = any(isinstance(op, Settle) and op.all_or_none for op in batch)
        # Every batch records its id and sends its COMMIT once its results are in: an unanswered COMMIT's
        # outcome is then looked up by id, and its results are at hand (store/pg_failover.py).
        batch_id = uuid.uuid4()
        if steps:
            steps.append(_Step(pg_failover.RECORD_BATCH, {"batch": batch_id}))
            try:
                with pool.connection() as conn:
                    # BEGIN and the statements go out together, and one sync brings every result back;
                    # then the COMMIT: two round trips. A statement that fails makes the server skip the
                    # rest up to the sync, and the transaction is rolled back, so nothing of the batch is
                    # applied. The COMMIT apart: its results are at hand if it goes unanswered.
                    extra = 0  # plan_cache_mode switches (_GENERIC_PLAN)
                    try:
                        cursors = []
                        with conn.pipeline():
                            # READ COMMITTED: a statement after _TAKE_PARTITION sees what the
                            # partition's previous holder committed.
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
                        fetched = [cur.fetchall() if step.rows else [] for step, cur in zip(steps, cursors,
                                                                                            strict=True)]
                        if fenced:
                            for index, (op, result) in enumerate(zip(batch, _results(plans, fetched, len(takes)),
                                                                     strict=True)):
                                check_all_or_none(index, op, result)  # SettleFenced: rolled back below
                        self.round_trips += 1
                        try:
                            conn.execute("COMMIT")
                        except psycopg.OperationalError as lost:
                            if conn.broken or lost.sqlstate is None or lost.sqlstate.startswith("57P"):
                                raise pg_failover.CommitUnanswered(batch_id, lost) from lost
                            raise
                    except BaseException:
                        self._rollback(conn)
                        raise
                    finally:
                        self.round_trips += 1
                        self.statements += 2 + extra + sum(len(s.many) if s.many is not None else 1 for s in steps)
            except pg_failover.CommitUnanswered as unanswered:
                self._outcome(unanswered)  # returns when the batch committed; StoreUnavailable otherwise
            except (psycopg.Error, PoolTimeout) as exc:
                if isinstance(exc, psycopg.errors.DiskFull):
                    raise StoreFull(
                        f"PostgreSQL store {self._shown}: the database's disk is full: new messages are refused "
                        f"until space is freed; nothing of this batch was stored ({_describe(exc)})") from exc
                if isinstance(exc, psycopg.OperationalError | PoolTimeout):
                    self._failover.lost(_describe(exc))
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: batch not applied: {_describe(exc)}") from exc
        return _results(plans, fetched, len(takes))

    def _outcome(self, unanswered: pg_failover.CommitUnanswered) -> None:
        """A batch whose COMMIT went unanswered: return if it committed (on the primary now), else
        raise StoreUnavailable (not committed, or not known within OUTCOME_WAIT)."""
        self._failover.lost(str(unanswered))
        self.outcome_lookups += 1
        committed = pg_failover.resolve(unanswered.batch_id, self._require().connection)
        if committed:
            self.outcomes_committed += 1
            log.warning("PostgreSQL store %s: %s; it committed: its results stand", self._shown, unanswered)
            return
        what = "it did not commit" if committed is False else "its outcome is unknown (no primary answered)"
        log.warning("PostgreSQL store %s: %s; %s: refused (retryable)", self._shown, unanswered, what)
        raise StoreUnavailable(f"PostgreSQL store {self._shown}: batch not applied: {unanswered}; {what}")

    def load_entities(self) -> list[EntityRecord]:
        rows, rule_rows = self._read("load entities", [(_SELECT_ENTITIES, ()), (_SELECT_RULES, ())])
        rules: dict[bytes, list[Any]] = {}
        for subscription, rule in rule_rows:
            try:
                rules.setdefault(bytes(subscription), []).append(json.loads(rule))
            except ValueError as exc:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: a rule of {_text(subscription)!r} is corrupt: {exc}") from exc
        records: list[EntityRecord] = []
        for path, kind, properties, path_key in rows:
            try:
                decoded = json.loads(properties)
            except ValueError as exc:
                raise StoreUnavailable(
                    f"PostgreSQL store {self._shown}: entity {path!r} has corrupt properties: {exc}") from exc
            if kind == SUBSCRIPTION_KIND:
                decoded["Rules"] = rules.get(bytes(path_key), [])
            records.append(EntityRecord(path=path, kind=kind, properties=decoded))
        return records

    def stats(self, ref: PartitionRef) -> PartitionStats:
        counts = self.counts(ref)
        return PartitionStats(message_count=counts.message_count, size_in_bytes=counts.size_in_bytes)

    # -- version 2 reads --------------------------------------------------------------------------

    def peek(self, ref: PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[StoredMessage, ...]:
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

    def session_ids(self, ref: PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        params = {**_partition_params(ref), "states": sorted(int(s) for s in states)}
        sql = ("SELECT DISTINCT session_id FROM sodalite_messages WHERE entity = %(e)s AND partition = %(p)s "
               "AND session_id IS NOT NULL AND state = ANY(%(states)s::smallint[]) ORDER BY session_id")
        (rows,) = self._read(f"list the sessions of {ref.entity!r} partition {ref.partition}", [(sql, params)])
        return tuple(sorted(str(_text(sid)) for (sid,) in rows))

    def fetch(self, ref: PartitionRef, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        if not sequence_numbers:
            return ()
        params = {**_partition_params(ref), "seq": [_int64(n, "sequence number") for n in sequence_numbers]}
        (rows,) = self._read(f"fetch from {ref.entity!r} partition {ref.partition}", [(_SELECT_FETCH, params)])
        return tuple(_stored_from_row(r) for r in rows)

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        (rows,) = self._read(f"read the counters of {ref.entity!r} partition {ref.partition}",
                             [(_SELECT_COUNTS, _partition_params(ref))])
        return self._counts(rows)

    def next_due_many(self, refs: Sequence[PartitionRef], now: int) -> tuple[int | None, ...]:
        if not refs:
            return ()
        keys = [_key(ref) for ref in refs]
        (rows,) = self._read(f"read the next due times of {len(refs)} partitions",
                             [(_SELECT_NEXT_DUE_MANY, {"es": [e for e, _ in keys], "ps": [p for _, p in keys],
                                                       "now": _time(now, "now")})])
        return tuple(None if due is None else int(due) for (due,) in rows)

    def counts_many(self, refs: Sequence[PartitionRef]) -> tuple[PartitionCounts, ...]:
        if not refs:
            return ()
        keys = [_key(ref) for ref in refs]
        (rows,) = self._read(f"read the counters of {len(refs)} partitions",
                             [(_SELECT_COUNTS_MANY, {"es": [e for e, _ in keys], "ps": [p for _, p in keys]})])
        return tuple(PartitionCounts(active=int(a), scheduled=int(s), deferred=int(d), size_in_bytes=int(b),
                                     last_sequence_number=int(last), first_sequence_number=None)
                     for a, s, d, b, last in rows)

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        (rows,) = self._read(f"read what falls due in {ref.entity!r} partition {ref.partition}",
                             [(_SELECT_NEXT_DUE, {**_partition_params(ref), "now": _time(now, "now")})])
        due = rows[0][0]
        return None if due is None else int(due)

    def partition_meta(self, ref: PartitionRef) -> PartitionMeta:
        key = _key(ref)
        counters, history, states, move_keys = self._read(
            f"read {ref.entity!r} partition {ref.partition}",
            [(_SELECT_COUNTS, _partition_params(ref)), (_SELECT_HISTORY, key), (_SELECT_SESSION_STATES, key),
             (_SELECT_MOVE_KEYS, key)])
        return PartitionMeta(
            counts=self._counts(counters),
            duplicate_history=tuple((bytes(mid).decode("utf-8"), at) for mid, at in history),
            session_states=tuple((bytes(sid).decode("utf-8"), bytes(state), at) for sid, state, at in states),
            move_keys=tuple(bytes(k).decode("utf-8") for (k,) in move_keys),
        )

    @staticmethod
    def _counts(rows: _Rows) -> PartitionCounts:
        if not rows:
            return PartitionCounts(active=0, scheduled=0, deferred=0, size_in_bytes=0, last_sequence_number=0,
                                   first_sequence_number=None)
        active, scheduled, deferred, size, last, first = rows[0]
        return PartitionCounts(active=int(active), scheduled=int(scheduled), deferred=int(deferred),
                               size_in_bytes=int(size), last_sequence_number=int(last),
                               first_sequence_number=None if first is None else int(first))

    # -- housekeeping -----------------------------------------------------------------------------

    def maintain(self) -> bool:
        pool = self._require()
        try:
            with pool.connection() as conn:
                self._turn_ring(conn)
                if self._failover.prune_due():
                    pg_failover.prune(conn)
                if self._failover.superseded():
                    conn.close()  # a standby was promoted meanwhile: the pool drops it, the next call chooses
        except (psycopg.Error, PoolTimeout):
            pass  # housekeeping only: the next call tries again
        return True  # disk-full recovery is the server's

    def _turn_ring(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Truncate drained generations (moving their few live rows on), then switch the current
        generation to the next one once the current table has grown past ``rotate_bytes``."""
        row = conn.execute(_SELECT_RING).fetchone()
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

    def _turn_history(self, conn: psycopg.Connection[tuple[Any, ...]], current: int, sizes: list[int]) -> None:
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

    def _retire_history(self, conn: psycopg.Connection[tuple[Any, ...]], generation: int, current: int) -> bool:
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

    def _analyze(self, conn: psycopg.Connection[tuple[Any, ...]], generation: int) -> None:
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

    def _retire(self, conn: psycopg.Connection[tuple[Any, ...]], generation: int, current: int) -> bool:
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

    def _empty_drained(self, conn: psycopg.Connection[tuple[Any, ...]], table: str, moves: Sequence[str],
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

    def close(self) -> None:
        self._closed = True
        self._failover.closed()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=5)

    # -- internals --------------------------------------------------------------------------------

    def _read(self, what: str, queries: Sequence[tuple[str, Mapping[str, Any] | tuple[Any, ...]]]) -> list[_Rows]:
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
    def _rollback(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """End a failed transaction so the pooled connection is clean; a broken one the pool discards."""
        if conn.broken or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            pass

    def _migrate(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
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

    def _open_on_standby(self) -> tuple[Any, ...] | None:
        """``standby_ok``: the schema as a standby holds it (it must be this Sodalite's: a standby cannot
        migrate), and the schema's name; the store then answers nothing until a primary is reachable."""
        try:
            with self._failover.connect_standby(connect_timeout=max(1, int(self._timeout)),
                                                application_name=self._application_name) as conn:
                found = conn.execute("SELECT to_regclass('sodalite_schema_version') IS NOT NULL").fetchone()
                version = conn.execute("SELECT version FROM sodalite_schema_version").fetchone() if (
                    found is not None and found[0]) else None
                row: tuple[Any, ...] | None = conn.execute("SELECT current_schema()").fetchone()
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

    def _unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(f"PostgreSQL store {self._shown} is closed")

    def _require(self) -> ConnectionPool[psycopg.Connection[tuple[Any, ...]]]:
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise self._unavailable()
        raise StoreUnavailable(f"PostgreSQL store {self._shown} is not open: call open() first")


class PostgresChangeFeed:
    """A node's one listening connection to a PostgreSQL store (the port's ``ChangeFeed``).

    Theory of operation. Every :meth:`PostgresStore.apply` that makes messages ready in a partition,
    or changes entity records, adds ``pg_notify`` to its transaction (:func:`_announcements`: one
    notification per partition and per transaction, whatever the batch holds); PostgreSQL delivers
    them to every listening session when, and only if, the transaction commits, so a listener that
    reads the store on a notification sees what it announces. The notifications of a schema go to
    its channel (:func:`channel_name`).

    This class keeps one connection (autocommit) in a thread of its own, ``LISTEN``\\ s on the
    channel and hands each notification to the sink: ``ready(ref)``, ``due(ref, at)`` or ``entities_changed()``,
    skipping those whose origin is its own store's (this node made them and knows). The thread waits
    for notifications :data:`LISTEN_POLL` at a time, so :meth:`stop` takes effect within that. When
    the connection is lost (the database restarted, the network broke: TCP keepalives find a dead
    peer), it reconnects with a growing pause (up to :data:`LISTEN_RETRY_MAX`) until it succeeds,
    and then calls ``sink.resynced()``, because what was committed while nobody listened was never
    announced; ``live`` is False meanwhile, and the server polls faster. Notifications are hints:
    the store stays the truth, and nothing is lost when one is missed, only found later by a poll.
    """

    def __init__(self, url: str, *, origin: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 application_name: str = "sodalite listen", failover: pg_failover.Failover | None = None) -> None:
        self._url = check_url(url)
        # The store's choice of server: the feed listens on the primary the store writes to.
        self._failover = failover or pg_failover.Failover(url, shown=redact(url), connect_timeout=connect_timeout,
                                                          application_name=application_name)
        self._shown = redact(url)
        self._origin = origin
        self._timeout = connect_timeout
        self._application_name = application_name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = False
        # Diagnostics (tests and benchmarks read them): connections made, notifications handed on.
        self.connections = 0
        self.delivered = 0

    @property
    def live(self) -> bool:
        return self._live

    def start(self, sink: ChangeSink) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(sink,), name="sodalite-pg-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=LISTEN_POLL + self._timeout + 1)

    def _run(self, sink: ChangeSink) -> None:
        pause = 0.1
        while not self._stopping.is_set():
            try:
                with self._failover.connect(autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                            application_name=self._application_name, keepalives=1,
                                            keepalives_idle=10, keepalives_interval=5, keepalives_count=3) as conn:
                    row = conn.execute("SELECT current_schema()").fetchone()
                    if row is None or row[0] is None:
                        raise StoreUnavailable(f"PostgreSQL store {self._shown}: no schema on the search_path")
                    for kind in ("", DUE):
                        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(str(row[0]), kind))))
                    self.connections += 1
                    if self.connections > 1:
                        log.warning("PostgreSQL store %s: listening again for other nodes' changes", self._shown)
                    self._live = True
                    pause = 0.1
                    self._hand(sink.resynced)
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=LISTEN_POLL):
                            self._dispatch(sink, notify.payload)
            except (psycopg.Error, StoreUnavailable) as exc:
                if self._live:
                    log.warning("PostgreSQL store %s: the listening connection was lost (%s); reconnecting",
                                self._shown, _describe(exc))
            finally:
                self._live = False
            self._stopping.wait(pause)
            pause = min(pause * 2, LISTEN_RETRY_MAX)

    def _dispatch(self, sink: ChangeSink, payload: str) -> None:
        parsed = _parse_announcement(payload)
        if parsed is None or parsed[1] == self._origin:
            return
        kind, _, ref, at = parsed
        self.delivered += 1
        if ref is not None and at is not None:
            scheduled: PartitionRef = ref
            due_at: int = at
            self._hand(lambda: sink.due(scheduled, due_at))
        elif ref is not None:
            target: PartitionRef = ref
            self._hand(lambda: sink.ready(target))
        elif kind == "e":
            self._hand(sink.entities_changed)

    @staticmethod
    def _hand(call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # the sink's trouble must not end the listening thread
            log.exception("a change notification could not be handed on")
