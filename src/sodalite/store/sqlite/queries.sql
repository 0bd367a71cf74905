-- The SQLite store's statements, one per name (sodalite.store.sql_files.catalogue parses them at
-- import; the adapter runs SQL["name"]). Parameters are positional (?) or numbered (?N). The
-- statements composed per call (a claim's filters, a peek's states) are built in rows.py.

-- name: add_rule
-- Added after the subscription's other rules, only when no rule of that name exists.
INSERT OR IGNORE INTO rules (subscription, name, position, rule)
    SELECT ?1, ?2, coalesce(max(position), 0) + 1, ?3
    FROM rules
    WHERE subscription = ?1;

-- name: replace_rule
UPDATE rules
    SET name = ?2, rule = ?3
    WHERE subscription = ?1 AND name = ?2;

-- name: delete_rule
DELETE FROM rules
    WHERE subscription = ? AND name = ?;

-- name: put_rule_at
INSERT OR REPLACE INTO rules (subscription, name, position, rule)
    VALUES (?, ?, ?, ?);

-- name: select_rules
SELECT subscription, rule
    FROM rules
    ORDER BY subscription, position, name;

-- name: record_activity
INSERT INTO activity (entity, node, last_activity, receivers, refreshed_at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (entity, node)
    DO UPDATE
    SET last_activity = max(last_activity, excluded.last_activity), receivers = excluded.receivers, refreshed_at = excluded.refreshed_at;

-- name: activity_busy
SELECT 1
    FROM activity
    WHERE entity = ? AND (last_activity > ? OR (receivers > 0 AND refreshed_at > ?)) LIMIT 1;

-- name: insert_message
INSERT INTO messages (entity, partition, sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count, tail)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: raise_high_water_mark
INSERT INTO partitions (entity, partition, last_sequence_number)
    VALUES (?, ?, ?)
    ON CONFLICT (entity, partition)
    DO UPDATE
    SET last_sequence_number = max(last_sequence_number, excluded.last_sequence_number);

-- name: put_entity
INSERT OR REPLACE INTO entities (path, kind, properties)
    VALUES (?, ?, ?);

-- name: remember_id
INSERT INTO duplicate_history (entity, partition, message_id, seen_at)
    VALUES (?, ?, ?, ?)
    ON CONFLICT (entity, partition, message_id)
    DO UPDATE
    SET seen_at = excluded.seen_at;

-- name: forget_id
DELETE FROM duplicate_history
    WHERE entity = ? AND partition = ? AND message_id = ?;

-- name: forget_id_seen_before
DELETE FROM duplicate_history
    WHERE entity = ? AND partition = ? AND message_id = ? AND seen_at < ?;

-- name: prune_ids
DELETE FROM duplicate_history
    WHERE entity = ? AND partition = ? AND seen_at < ?;

-- name: seen_at
SELECT seen_at
    FROM duplicate_history
    WHERE entity = ? AND partition = ? AND message_id = ?;

-- name: put_session_state
INSERT INTO session_states (entity, partition, session_id, state, updated_at)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (entity, partition, session_id)
    DO UPDATE
    SET state = excluded.state, updated_at = excluded.updated_at;

-- name: remember_move_key
INSERT OR IGNORE INTO move_keys (entity, partition, move_key)
    VALUES (?, ?, ?);

-- name: forget_move_key
DELETE FROM move_keys
    WHERE entity = ? AND partition = ? AND move_key = ?;

-- name: select_move_keys
SELECT move_key
    FROM move_keys
    WHERE entity = ? AND partition = ?
    ORDER BY move_key;

-- name: clear_session_state
DELETE FROM session_states
    WHERE entity = ? AND partition = ? AND session_id = ?;

-- name: select_session_states
SELECT session_id, state, updated_at
    FROM session_states
    WHERE entity = ? AND partition = ?
    ORDER BY session_id;

-- name: delete_entity_messages
-- An entity's own partitions, then its sub-queues': entity >= '<path>/$' AND entity < '<path>/%'
-- (under NOCASE) is exactly "starts with <path>/$", and the range uses the primary-key index.
DELETE FROM messages
    WHERE entity = ?;

-- name: delete_sub_queues_messages
DELETE FROM messages
    WHERE entity >= ? AND entity < ?;

-- name: delete_entity_partitions
DELETE FROM partitions
    WHERE entity = ?;

-- name: delete_sub_queues_partitions
DELETE FROM partitions
    WHERE entity >= ? AND entity < ?;

-- name: delete_entity_duplicate_history
DELETE FROM duplicate_history
    WHERE entity = ?;

-- name: delete_sub_queues_duplicate_history
DELETE FROM duplicate_history
    WHERE entity >= ? AND entity < ?;

-- name: delete_entity_session_states
DELETE FROM session_states
    WHERE entity = ?;

-- name: delete_sub_queues_session_states
DELETE FROM session_states
    WHERE entity >= ? AND entity < ?;

-- name: delete_entity_move_keys
DELETE FROM move_keys
    WHERE entity = ?;

-- name: delete_sub_queues_move_keys
DELETE FROM move_keys
    WHERE entity >= ? AND entity < ?;

-- name: delete_entity_session_locks
DELETE FROM session_locks
    WHERE entity = ?;

-- name: delete_sub_queues_session_locks
DELETE FROM session_locks
    WHERE entity >= ? AND entity < ?;

-- name: select_high_water_mark
SELECT last_sequence_number
    FROM partitions
    WHERE entity = ? AND partition = ?;

-- name: select_history
SELECT message_id, seen_at
    FROM duplicate_history
    WHERE entity = ? AND partition = ?
    ORDER BY seen_at, message_id;

-- name: select_stats
SELECT count(*), coalesce(sum(length(annotations) + length(tail)), 0)
    FROM messages
    WHERE entity = ? AND partition = ?;

-- name: select_entities
SELECT path, kind, properties
    FROM entities
    ORDER BY path;

-- name: fetch
SELECT sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token, locked_until, lock_owner
    FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number IN (SELECT value
    FROM json_each(?))
    ORDER BY sequence_number;

-- name: take_numbers
-- Assign the next numbers: the counter row goes up by n and says where it ended. Partition i's numbers
-- start after i << PARTITION_SHIFT (?4), so a number's upper bits name its partition (port.py).
INSERT INTO partitions (entity, partition, last_sequence_number)
    VALUES (?1, ?2, ?4 + ?3)
    ON CONFLICT (entity, partition)
    DO UPDATE
    SET last_sequence_number = max(last_sequence_number, ?4) + ?3
    RETURNING last_sequence_number;

-- name: settle_complete
DELETE FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: settle_abandon
UPDATE messages
    SET lock_token = NULL, locked_until = NULL, lock_owner = NULL
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: settle_release
UPDATE messages
    SET lock_token = NULL, locked_until = NULL, lock_owner = NULL, delivery_count = max(delivery_count - 1, 0)
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: settle_defer
UPDATE messages
    SET lock_token = NULL, locked_until = NULL, lock_owner = NULL, state = 1, delivery_count = max(delivery_count - 1, 0)
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: settle_dead_letter
DELETE FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: set_parts
-- A settlement's replacements, each kept as it is when NULL (annotations and their count go together).
UPDATE messages
    SET annotations = coalesce(?1, annotations), annotation_count = coalesce(?2, annotation_count), tail = coalesce(?3, tail)
    WHERE entity = ?4 AND partition = ?5 AND sequence_number = ?6;

-- name: select_locks
-- What a settlement needs to know of each row: its lock, and its state and sizes for the counters
-- (length() of a blob is read from the record header, without the blob).
SELECT sequence_number, lock_token, locked_until, state, length(annotations), length(tail)
    FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number IN (SELECT value
    FROM json_each(?));

-- name: locked_row
-- A completion of a row this lock still holds: its state and size (for the counters) only if the
-- token matches and the lock has not lapsed, then the delete by key. (Not one DELETE .. RETURNING:
-- SQLite opens, unlinks and closes a temporary file for that every time, measured.)
SELECT state, length(annotations) + length(tail)
    FROM messages
    WHERE entity = ?1 AND partition = ?2 AND sequence_number = ?3 AND lock_token = ?4 AND locked_until > ?5;

-- name: delete_returning
DELETE FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number IN (SELECT value
    FROM json_each(?))
    RETURNING state, length(annotations) + length(tail);

-- name: bump_counters
-- The counters row moves by deltas the operation computed, once per operation and partition.
INSERT INTO partitions (entity, partition, last_sequence_number, active, scheduled, deferred, size_in_bytes)
    VALUES (?, ?, 0, ?, ?, ?, ?)
    ON CONFLICT (entity, partition)
    DO UPDATE
    SET active = active + excluded.active, scheduled = scheduled + excluded.scheduled, deferred = deferred + excluded.deferred, size_in_bytes = size_in_bytes + excluded.size_in_bytes;

-- name: renew_lock
UPDATE messages
    SET locked_until = ?
    WHERE entity = ? AND partition = ? AND sequence_number = ?;

-- name: activate
WITH picked AS (SELECT sequence_number
    FROM messages
    WHERE entity = ? AND partition = ? AND state = 2 AND scheduled_enqueue_time <= ?
    ORDER BY scheduled_enqueue_time, sequence_number LIMIT ?)
    UPDATE messages
    SET state = 0
    WHERE entity = ? AND partition = ? AND sequence_number IN picked
    RETURNING sequence_number, enqueued_time, message_id, session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority, annotations, annotation_count, tail, lock_token, locked_until, lock_owner;

-- name: purge
DELETE FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number <= ? AND (locked_until IS NULL OR locked_until <= ?)
    RETURNING state, length(annotations) + length(tail);

-- name: take_session
INSERT INTO session_locks (entity, partition, session_id, token, locked_until, owner)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (entity, partition, session_id)
    DO UPDATE
    SET token = excluded.token, locked_until = excluded.locked_until, owner = excluded.owner
    WHERE session_locks.locked_until <= ?
    RETURNING session_id;

-- name: next_free_session
SELECT m.session_id
    FROM messages m
    WHERE m.entity = ?2 AND m.partition = ?3 AND m.state = 0 AND m.session_id IS NOT NULL AND (m.locked_until IS NULL OR m.locked_until <= ?1) AND (m.expires_at IS NULL OR m.expires_at > ?1)
    AND NOT EXISTS (SELECT 1
    FROM session_locks s
    WHERE s.entity = m.entity AND s.partition = m.partition AND s.session_id = m.session_id AND s.locked_until > ?1)
    ORDER BY m.sequence_number LIMIT 1;

-- name: renew_session
UPDATE session_locks
    SET locked_until = ?
    WHERE entity = ? AND partition = ? AND session_id = ? AND token = ? AND locked_until > ?;

-- name: release_session
DELETE FROM session_locks
    WHERE entity = ? AND partition = ? AND session_id = ? AND token = ?;

-- name: select_counts
SELECT coalesce(p.active, 0), coalesce(p.scheduled, 0), coalesce(p.deferred, 0), coalesce(p.size_in_bytes, 0), coalesce(p.last_sequence_number, 0), (SELECT min(sequence_number)
    FROM messages
    WHERE entity = ?1 AND partition = ?2)
    FROM (SELECT 1)
    LEFT JOIN partitions p ON p.entity = ?1 AND p.partition = ?2;

-- name: select_counts_only
SELECT coalesce(p.active, 0), coalesce(p.scheduled, 0), coalesce(p.deferred, 0), coalesce(p.size_in_bytes, 0), coalesce(p.last_sequence_number, 0)
    FROM (SELECT 1)
    LEFT JOIN partitions p ON p.entity = ?1 AND p.partition = ?2;

-- name: select_next_due
-- Each branch is one index probe: scheduled (partial index), the first expiry of an unlocked row
-- (the expiry index covers the lock test, and the walk skips only rows locked now), the first lock
-- to lapse, the first session lock to lapse.
SELECT min(t)
    FROM (SELECT min(scheduled_enqueue_time) AS t
    FROM messages
    WHERE entity = ?1 AND partition = ?2 AND state = 2
    UNION ALL SELECT (SELECT expires_at
    FROM messages
    WHERE entity = ?1 AND partition = ?2 AND expires_at IS NOT NULL AND (locked_until IS NULL OR locked_until <= ?3)
    ORDER BY expires_at LIMIT 1)
    UNION ALL SELECT min(locked_until)
    FROM messages
    WHERE entity = ?1 AND partition = ?2 AND locked_until > ?3
    UNION ALL SELECT min(locked_until)
    FROM session_locks
    WHERE entity = ?1 AND partition = ?2 AND locked_until > ?3);

-- name: delete_entity
-- DeleteEntity and DeleteIdleEntity: the record itself, its rules and its registrations.
DELETE FROM entities
    WHERE path = ?;

-- name: delete_entity_rules
DELETE FROM rules
    WHERE subscription = ?;

-- name: delete_entity_activity
DELETE FROM activity
    WHERE entity = ?;

-- name: select_subscription_records
-- Schema 6: the subscription records whose "Rules" become rule rows.
SELECT path, kind, properties
    FROM entities
    WHERE kind = ?;

-- name: select_numbers_held
-- The numbers of these the partition holds (dead letters kept under their own numbers, restores).
SELECT sequence_number
    FROM messages
    WHERE entity = ? AND partition = ? AND sequence_number IN (SELECT value
    FROM json_each(?));

-- name: drop_message_locks
-- The locks of an earlier run of the broker (one process serves the file).
UPDATE messages
    SET lock_token = NULL, locked_until = NULL, lock_owner = NULL
    WHERE locked_until IS NOT NULL;

-- name: drop_session_locks
DELETE FROM session_locks;
