-- Schema version 3: session states.
CREATE TABLE IF NOT EXISTS session_states (
    entity     TEXT    NOT NULL COLLATE NOCASE,
    partition  INTEGER NOT NULL,
    session_id TEXT    NOT NULL,
    state      BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
) WITHOUT ROWID;
