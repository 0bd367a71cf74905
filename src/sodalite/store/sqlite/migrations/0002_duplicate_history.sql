-- Schema version 2: the duplicate-detection history.
CREATE TABLE IF NOT EXISTS duplicate_history (
    entity     TEXT    NOT NULL COLLATE NOCASE,
    partition  INTEGER NOT NULL,
    message_id TEXT    NOT NULL,
    seen_at    INTEGER NOT NULL,
    PRIMARY KEY (entity, partition, message_id)
) WITHOUT ROWID;
