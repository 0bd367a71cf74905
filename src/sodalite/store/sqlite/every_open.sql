-- Run at every open, after the migrations: tables added to a schema version after it shipped,
-- which a file of that version may lack. Idempotent.

-- AutoDeleteOnIdle registrations (RecordActivity, DeleteIdleEntity): added to version 5 without a
-- new version, a table of its own that older releases ignore.
CREATE TABLE IF NOT EXISTS activity (
    entity        TEXT    NOT NULL COLLATE NOCASE,
    node          TEXT    NOT NULL,
    last_activity INTEGER NOT NULL,
    receivers     INTEGER NOT NULL,
    refreshed_at  INTEGER NOT NULL,
    PRIMARY KEY (entity, node)
) WITHOUT ROWID;
