-- Schema version 1: messages, the partitions' counters (high-water marks), entity records.
CREATE TABLE IF NOT EXISTS messages (
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
    PRIMARY KEY (entity, partition, sequence_number)
);

CREATE TABLE IF NOT EXISTS partitions (
    entity               TEXT    NOT NULL COLLATE NOCASE,
    partition            INTEGER NOT NULL,
    last_sequence_number INTEGER NOT NULL,
    PRIMARY KEY (entity, partition)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS entities (
    path       TEXT NOT NULL PRIMARY KEY COLLATE NOCASE,
    kind       TEXT NOT NULL,
    properties TEXT NOT NULL
) WITHOUT ROWID;
