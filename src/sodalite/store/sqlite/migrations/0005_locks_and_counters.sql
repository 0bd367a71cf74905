-- Schema version 5 (the store is the truth about message state): the lock columns of messages (a
-- lock is cleared by setting all three NULL, so locked_until > now alone says "locked"), the
-- counters of the partitions row, session locks, and the indexes of the ready, session and due scans.
ALTER TABLE messages ADD COLUMN lock_token BLOB;
ALTER TABLE messages ADD COLUMN locked_until INTEGER;
ALTER TABLE messages ADD COLUMN lock_owner TEXT;
ALTER TABLE partitions ADD COLUMN active INTEGER NOT NULL DEFAULT 0;
ALTER TABLE partitions ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE partitions ADD COLUMN deferred INTEGER NOT NULL DEFAULT 0;
ALTER TABLE partitions ADD COLUMN size_in_bytes INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS session_locks (
    entity       TEXT    NOT NULL COLLATE NOCASE,
    partition    INTEGER NOT NULL,
    session_id   TEXT    NOT NULL,
    token        BLOB    NOT NULL,
    locked_until INTEGER NOT NULL,
    owner        TEXT    NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
) WITHOUT ROWID;

-- Ready scan (claims): the next unlocked rows of a state in sequence-number order.
CREATE INDEX IF NOT EXISTS messages_ready ON messages (entity, partition, state, sequence_number);
-- Session scan: one session's rows in order.
CREATE INDEX IF NOT EXISTS messages_session ON messages (entity, partition, session_id, sequence_number) WHERE session_id IS NOT NULL;
-- Due scans: scheduled time (also Activate's order), expiry (covering the lock test), lock expiry.
CREATE INDEX IF NOT EXISTS messages_scheduled ON messages (entity, partition, scheduled_enqueue_time, sequence_number) WHERE state = 2;
CREATE INDEX IF NOT EXISTS messages_expiry ON messages (entity, partition, expires_at, locked_until) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_locks ON messages (entity, partition, locked_until) WHERE locked_until IS NOT NULL;
CREATE INDEX IF NOT EXISTS session_locks_due ON session_locks (entity, partition, locked_until);

-- The counters of an older file, computed once from its rows.
INSERT INTO partitions (entity, partition, last_sequence_number)
SELECT entity, partition, max(sequence_number) FROM messages WHERE true GROUP BY entity, partition
ON CONFLICT (entity, partition) DO UPDATE
SET last_sequence_number = max(last_sequence_number, excluded.last_sequence_number);

UPDATE partitions SET (active, scheduled, deferred, size_in_bytes) = (
    SELECT coalesce(sum(m.state = 0), 0), coalesce(sum(m.state = 2), 0), coalesce(sum(m.state = 1), 0),
           coalesce(sum(length(m.annotations) + length(m.tail)), 0)
    FROM messages m WHERE m.entity = partitions.entity AND m.partition = partitions.partition);
