-- Version 2: the messages move into a ring of generation tables (see ring.py's
-- docstring), with lock columns; counters, session locks and the indexes the reads use.
-- The ready scan of a claim; the session scan; the due scans of next_due and Activate.
-- Room on each page for the next version of a counter row, so its updates stay HOT.
-- The counters, computed once from the rows (a partition with messages always had its row).
-- Raised by a caller-numbered append whose number another generation already holds (the
-- primary key, which must include the generation, only sees its own generation).

ALTER TABLE sodalite_messages RENAME TO sodalite_messages_v1;

ALTER INDEX sodalite_messages_pkey RENAME TO sodalite_messages_v1_pkey;

CREATE TABLE sodalite_ring (
    singleton  boolean  PRIMARY KEY DEFAULT true CHECK (singleton),
    generation smallint NOT NULL
);

INSERT INTO sodalite_ring (generation) VALUES (0);

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
) PARTITION BY LIST (generation);

CREATE TABLE sodalite_messages_g0 PARTITION OF sodalite_messages FOR VALUES IN (0)
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE TABLE sodalite_messages_g1 PARTITION OF sodalite_messages FOR VALUES IN (1)
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE TABLE sodalite_messages_g2 PARTITION OF sodalite_messages FOR VALUES IN (2)
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE TABLE sodalite_messages_g3 PARTITION OF sodalite_messages FOR VALUES IN (3)
    WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE INDEX sodalite_messages_ready ON sodalite_messages (entity, partition, state, sequence_number);

CREATE INDEX sodalite_messages_session ON sodalite_messages (entity, partition, session_id, sequence_number)
    WHERE session_id IS NOT NULL;

CREATE INDEX sodalite_messages_scheduled
    ON sodalite_messages (entity, partition, scheduled_enqueue_time, sequence_number) WHERE state = 2;

CREATE INDEX sodalite_messages_expires ON sodalite_messages (entity, partition, expires_at) WHERE expires_at IS NOT NULL;

CREATE INDEX sodalite_messages_locked ON sodalite_messages (entity, partition, locked_until) WHERE locked_until IS NOT NULL;

INSERT INTO sodalite_messages (generation, entity, partition, sequence_number, enqueued_time, message_id,
    session_id, partition_key, time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state,
    durable, priority, annotations, annotation_count, tail)
SELECT 0, entity, partition, sequence_number, enqueued_time, message_id, session_id, partition_key,
    time_to_live, expires_at, scheduled_enqueue_time, delivery_count, state, durable, priority,
    annotations, annotation_count, tail
FROM sodalite_messages_v1;

DROP TABLE sodalite_messages_v1;

ALTER TABLE sodalite_partitions
    ADD COLUMN active        bigint NOT NULL DEFAULT 0,
    ADD COLUMN scheduled     bigint NOT NULL DEFAULT 0,
    ADD COLUMN deferred      bigint NOT NULL DEFAULT 0,
    ADD COLUMN size_in_bytes bigint NOT NULL DEFAULT 0;

ALTER TABLE sodalite_partitions SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

INSERT INTO sodalite_partitions AS p (entity, partition, last_sequence_number, active, scheduled, deferred,
                                      size_in_bytes)
SELECT entity, partition, max(sequence_number), count(*) FILTER (WHERE state = 0),
       count(*) FILTER (WHERE state = 2), count(*) FILTER (WHERE state = 1),
       sum(length(annotations) + length(tail))
FROM sodalite_messages GROUP BY entity, partition
ON CONFLICT (entity, partition) DO UPDATE SET
    last_sequence_number = GREATEST(p.last_sequence_number, excluded.last_sequence_number),
    active = excluded.active, scheduled = excluded.scheduled, deferred = excluded.deferred,
    size_in_bytes = excluded.size_in_bytes;

CREATE TABLE sodalite_session_locks (
    entity       bytea  NOT NULL,
    partition    bigint NOT NULL,
    session_id   bytea  NOT NULL,
    token        uuid   NOT NULL,
    locked_until bigint NOT NULL,
    owner        text   NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
);

CREATE INDEX sodalite_session_locks_due ON sodalite_session_locks (entity, partition, locked_until);

CREATE FUNCTION sodalite_duplicate_sequence_number(n bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sequence number % is already stored in this partition', n
        USING ERRCODE = 'unique_violation';
END
$$;
