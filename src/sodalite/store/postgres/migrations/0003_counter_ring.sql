-- Version 3: the counters move into the ring too (see "Counters in the ring" in the module
-- docstring). The rows of sodalite_partitions stay as they are: the base values, locked by
-- every numbering statement and no longer updated; what changes goes into sodalite_counters.
-- Room on each page for the next version of a row, so its updates stay HOT while VACUUM works.

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
) PARTITION BY LIST (generation);

CREATE TABLE sodalite_counters_g0 PARTITION OF sodalite_counters FOR VALUES IN (0)
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE TABLE sodalite_counters_g1 PARTITION OF sodalite_counters FOR VALUES IN (1)
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE TABLE sodalite_counters_g2 PARTITION OF sodalite_counters FOR VALUES IN (2)
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);

CREATE TABLE sodalite_counters_g3 PARTITION OF sodalite_counters FOR VALUES IN (3)
    WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000);
