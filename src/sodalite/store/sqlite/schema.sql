-- The SQLite store's schema as it stands (schema version 6): what a new file gets. An older file
-- gets the same from the numbered migrations (migrations/NNNN_*.sql, each run when the file's
-- PRAGMA user_version is below its number); tests/store/test_sqlite_schema.py checks that both agree.
-- Entity paths compare case-insensitively (NOCASE: ASCII letters only) in every table.

-- Messages. A lock is cleared by setting all three lock columns NULL, so locked_until > now alone
-- says "locked". A rowid table: a WITHOUT ROWID one spills every message larger than about 1/16 of a
-- page to its own overflow page (measured: half the throughput of 1 KiB messages).
CREATE TABLE messages (
    entity                 TEXT    NOT NULL COLLATE NOCASE,
    partition              INTEGER NOT NULL,
    sequence_number        INTEGER NOT NULL,
    enqueued_time          INTEGER NOT NULL,
    message_id             TEXT,
    session_id             TEXT,
    partition_key          TEXT,
    time_to_live           INTEGER,
    expires_at             INTEGER,
    scheduled_enqueue_time INTEGER,
    delivery_count         INTEGER NOT NULL,
    state                  INTEGER NOT NULL,
    durable                INTEGER,
    priority               INTEGER,
    annotations            BLOB    NOT NULL,
    annotation_count       INTEGER NOT NULL,
    tail                   BLOB    NOT NULL,
    lock_token             BLOB,
    locked_until           INTEGER,
    lock_owner             TEXT,
    PRIMARY KEY (entity, partition, sequence_number)
);

-- Per partition: the high-water mark and the counters every operation moves by its deltas.
CREATE TABLE partitions (
    entity               TEXT    NOT NULL COLLATE NOCASE,
    partition            INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    active               INTEGER NOT NULL DEFAULT 0,
    scheduled            INTEGER NOT NULL DEFAULT 0,
    deferred             INTEGER NOT NULL DEFAULT 0,
    size_in_bytes        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (entity, partition)
) WITHOUT ROWID;

CREATE TABLE entities (
    path       TEXT NOT NULL PRIMARY KEY COLLATE NOCASE,
    kind       TEXT NOT NULL,
    properties TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE duplicate_history (
    entity     TEXT    NOT NULL COLLATE NOCASE,
    partition  INTEGER NOT NULL,
    message_id TEXT    NOT NULL,
    seen_at    INTEGER NOT NULL,
    PRIMARY KEY (entity, partition, message_id)
) WITHOUT ROWID;

CREATE TABLE session_states (
    entity     TEXT    NOT NULL COLLATE NOCASE,
    partition  INTEGER NOT NULL,
    session_id TEXT    NOT NULL,
    state      BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
) WITHOUT ROWID;

CREATE TABLE move_keys (
    entity    TEXT    NOT NULL COLLATE NOCASE,
    partition INTEGER NOT NULL,
    move_key  TEXT    NOT NULL,
    PRIMARY KEY (entity, partition, move_key)
) WITHOUT ROWID;

CREATE TABLE session_locks (
    entity       TEXT    NOT NULL COLLATE NOCASE,
    partition    INTEGER NOT NULL,
    session_id   TEXT    NOT NULL,
    token        BLOB    NOT NULL,
    locked_until INTEGER NOT NULL,
    owner        TEXT    NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
) WITHOUT ROWID;

CREATE TABLE rules (
    subscription TEXT    NOT NULL COLLATE NOCASE,
    name         TEXT    NOT NULL COLLATE NOCASE,
    position     INTEGER NOT NULL,
    rule         TEXT    NOT NULL,
    PRIMARY KEY (subscription, name)
) WITHOUT ROWID;

CREATE TABLE activity (
    entity        TEXT    NOT NULL COLLATE NOCASE,
    node          TEXT    NOT NULL,
    last_activity INTEGER NOT NULL,
    receivers     INTEGER NOT NULL,
    refreshed_at  INTEGER NOT NULL,
    PRIMARY KEY (entity, node)
) WITHOUT ROWID;

-- Ready scan (claims): the next unlocked rows of a state in sequence-number order.
CREATE INDEX messages_ready ON messages (entity, partition, state, sequence_number);
-- Session scan: one session's rows in order.
CREATE INDEX messages_session ON messages (entity, partition, session_id, sequence_number) WHERE session_id IS NOT NULL;
-- Due scans: scheduled time (also Activate's order), expiry (covering the lock test), lock expiry.
CREATE INDEX messages_scheduled ON messages (entity, partition, scheduled_enqueue_time, sequence_number) WHERE state = 2;
CREATE INDEX messages_expiry ON messages (entity, partition, expires_at, locked_until) WHERE expires_at IS NOT NULL;
CREATE INDEX messages_locks ON messages (entity, partition, locked_until) WHERE locked_until IS NOT NULL;
CREATE INDEX session_locks_due ON session_locks (entity, partition, locked_until);
