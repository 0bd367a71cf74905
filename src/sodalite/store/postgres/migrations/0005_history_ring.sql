-- Version 5: the duplicate-detection history moves into a ring of its own (see "The history's
-- ring" in the module docstring), with the claim column of ClaimMessageIds; the rows are kept.
-- PruneMessageIds: a partition's entries by time.

ALTER TABLE sodalite_duplicate_history RENAME TO sodalite_duplicate_history_v3;

ALTER INDEX sodalite_duplicate_history_pkey RENAME TO sodalite_duplicate_history_v3_pkey;

ALTER TABLE sodalite_ring ADD COLUMN history_generation smallint NOT NULL DEFAULT 0;

CREATE TABLE sodalite_duplicate_history (
    generation smallint NOT NULL,
    entity     bytea    NOT NULL,
    partition  bigint   NOT NULL,
    message_id bytea    NOT NULL,
    seen_at    bigint   NOT NULL,
    claim      uuid,
    PRIMARY KEY (entity, partition, message_id, generation)
) PARTITION BY LIST (generation);

CREATE TABLE sodalite_duplicate_history_g0 PARTITION OF sodalite_duplicate_history
    FOR VALUES IN (0) WITH (autovacuum_vacuum_scale_factor = 0.01);

CREATE TABLE sodalite_duplicate_history_g1 PARTITION OF sodalite_duplicate_history
    FOR VALUES IN (1) WITH (autovacuum_vacuum_scale_factor = 0.01);

CREATE TABLE sodalite_duplicate_history_g2 PARTITION OF sodalite_duplicate_history
    FOR VALUES IN (2) WITH (autovacuum_vacuum_scale_factor = 0.01);

CREATE TABLE sodalite_duplicate_history_g3 PARTITION OF sodalite_duplicate_history
    FOR VALUES IN (3) WITH (autovacuum_vacuum_scale_factor = 0.01);

INSERT INTO sodalite_duplicate_history (generation, entity, partition, message_id, seen_at) SELECT 0, entity, partition, message_id, seen_at FROM sodalite_duplicate_history_v3;

DROP TABLE sodalite_duplicate_history_v3;

CREATE INDEX sodalite_duplicate_history_seen ON sodalite_duplicate_history (entity, partition, seen_at);
