-- The PostgreSQL store's schema as it stands (schema version 7), as a database migrated by the
-- numbered migrations (migrations/NNNN_*.sql) holds it: tests/store/test_pg_schema.py checks that
-- the migrations produce exactly this (tables, columns, keys, indexes, partitions, storage options,
-- the function) and the ring's first row. The store creates a new database with the migrations;
-- this file is the declared shape they must reach. Tables are those of the first schema of the
-- connection's search_path.

CREATE FUNCTION sodalite_duplicate_sequence_number(n bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'sequence number % is already stored in this partition', n
        USING ERRCODE = 'unique_violation';
END
$$;

CREATE TABLE sodalite_activity (
    entity bytea NOT NULL,
    node text NOT NULL,
    last_activity bigint NOT NULL,
    receivers bigint NOT NULL,
    refreshed_at bigint NOT NULL
)
WITH (fillfactor='50');

CREATE TABLE sodalite_batch_outcomes (
    id uuid NOT NULL,
    committed boolean NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE sodalite_counters (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint NOT NULL,
    scheduled bigint NOT NULL,
    deferred bigint NOT NULL,
    size_in_bytes bigint NOT NULL
)
PARTITION BY LIST (generation);

CREATE TABLE sodalite_counters_g0 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint NOT NULL,
    scheduled bigint NOT NULL,
    deferred bigint NOT NULL,
    size_in_bytes bigint NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='1000');

CREATE TABLE sodalite_counters_g1 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint NOT NULL,
    scheduled bigint NOT NULL,
    deferred bigint NOT NULL,
    size_in_bytes bigint NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='1000');

CREATE TABLE sodalite_counters_g2 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint NOT NULL,
    scheduled bigint NOT NULL,
    deferred bigint NOT NULL,
    size_in_bytes bigint NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='1000');

CREATE TABLE sodalite_counters_g3 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint NOT NULL,
    scheduled bigint NOT NULL,
    deferred bigint NOT NULL,
    size_in_bytes bigint NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='1000');

CREATE TABLE sodalite_duplicate_history (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    message_id bytea NOT NULL,
    seen_at bigint NOT NULL,
    claim uuid
)
PARTITION BY LIST (generation);

CREATE TABLE sodalite_duplicate_history_g0 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    message_id bytea NOT NULL,
    seen_at bigint NOT NULL,
    claim uuid
)
WITH (autovacuum_vacuum_scale_factor='0.01');

CREATE TABLE sodalite_duplicate_history_g1 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    message_id bytea NOT NULL,
    seen_at bigint NOT NULL,
    claim uuid
)
WITH (autovacuum_vacuum_scale_factor='0.01');

CREATE TABLE sodalite_duplicate_history_g2 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    message_id bytea NOT NULL,
    seen_at bigint NOT NULL,
    claim uuid
)
WITH (autovacuum_vacuum_scale_factor='0.01');

CREATE TABLE sodalite_duplicate_history_g3 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    message_id bytea NOT NULL,
    seen_at bigint NOT NULL,
    claim uuid
)
WITH (autovacuum_vacuum_scale_factor='0.01');

CREATE TABLE sodalite_entities (
    path_key bytea NOT NULL,
    path text NOT NULL,
    kind text NOT NULL,
    properties text NOT NULL
);

CREATE TABLE sodalite_messages (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    sequence_number bigint NOT NULL,
    enqueued_time bigint NOT NULL,
    message_id bytea,
    session_id bytea,
    partition_key bytea,
    time_to_live bigint,
    expires_at bigint,
    scheduled_enqueue_time bigint,
    delivery_count bigint NOT NULL,
    state smallint NOT NULL,
    durable boolean,
    priority bigint,
    annotations bytea NOT NULL,
    annotation_count bigint NOT NULL,
    tail bytea NOT NULL,
    lock_token uuid,
    locked_until bigint,
    lock_owner text
)
PARTITION BY LIST (generation);

CREATE TABLE sodalite_messages_g0 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    sequence_number bigint NOT NULL,
    enqueued_time bigint NOT NULL,
    message_id bytea,
    session_id bytea,
    partition_key bytea,
    time_to_live bigint,
    expires_at bigint,
    scheduled_enqueue_time bigint,
    delivery_count bigint NOT NULL,
    state smallint NOT NULL,
    durable boolean,
    priority bigint,
    annotations bytea NOT NULL,
    annotation_count bigint NOT NULL,
    tail bytea NOT NULL,
    lock_token uuid,
    locked_until bigint,
    lock_owner text
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_insert_scale_factor='0.05');

CREATE TABLE sodalite_messages_g1 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    sequence_number bigint NOT NULL,
    enqueued_time bigint NOT NULL,
    message_id bytea,
    session_id bytea,
    partition_key bytea,
    time_to_live bigint,
    expires_at bigint,
    scheduled_enqueue_time bigint,
    delivery_count bigint NOT NULL,
    state smallint NOT NULL,
    durable boolean,
    priority bigint,
    annotations bytea NOT NULL,
    annotation_count bigint NOT NULL,
    tail bytea NOT NULL,
    lock_token uuid,
    locked_until bigint,
    lock_owner text
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_insert_scale_factor='0.05');

CREATE TABLE sodalite_messages_g2 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    sequence_number bigint NOT NULL,
    enqueued_time bigint NOT NULL,
    message_id bytea,
    session_id bytea,
    partition_key bytea,
    time_to_live bigint,
    expires_at bigint,
    scheduled_enqueue_time bigint,
    delivery_count bigint NOT NULL,
    state smallint NOT NULL,
    durable boolean,
    priority bigint,
    annotations bytea NOT NULL,
    annotation_count bigint NOT NULL,
    tail bytea NOT NULL,
    lock_token uuid,
    locked_until bigint,
    lock_owner text
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_insert_scale_factor='0.05');

CREATE TABLE sodalite_messages_g3 (
    generation smallint NOT NULL,
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    sequence_number bigint NOT NULL,
    enqueued_time bigint NOT NULL,
    message_id bytea,
    session_id bytea,
    partition_key bytea,
    time_to_live bigint,
    expires_at bigint,
    scheduled_enqueue_time bigint,
    delivery_count bigint NOT NULL,
    state smallint NOT NULL,
    durable boolean,
    priority bigint,
    annotations bytea NOT NULL,
    annotation_count bigint NOT NULL,
    tail bytea NOT NULL,
    lock_token uuid,
    locked_until bigint,
    lock_owner text
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_insert_scale_factor='0.05');

CREATE TABLE sodalite_move_keys (
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    move_key bytea NOT NULL
);

CREATE TABLE sodalite_partitions (
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    active bigint DEFAULT 0 NOT NULL,
    scheduled bigint DEFAULT 0 NOT NULL,
    deferred bigint DEFAULT 0 NOT NULL,
    size_in_bytes bigint DEFAULT 0 NOT NULL
)
WITH (fillfactor='50', autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='1000');

CREATE TABLE sodalite_ring (
    singleton boolean DEFAULT true NOT NULL,
    generation smallint NOT NULL,
    history_generation smallint DEFAULT 0 NOT NULL,
    CONSTRAINT sodalite_ring_singleton_check CHECK (singleton)
);

CREATE TABLE sodalite_rules (
    subscription bytea NOT NULL,
    name_key bytea NOT NULL,
    name text NOT NULL,
    "position" bigint NOT NULL,
    rule text NOT NULL
);

CREATE TABLE sodalite_schema_version (
    singleton boolean DEFAULT true NOT NULL,
    version integer NOT NULL,
    CONSTRAINT sodalite_schema_version_singleton_check CHECK (singleton)
);

CREATE TABLE sodalite_session_locks (
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    session_id bytea NOT NULL,
    token uuid NOT NULL,
    locked_until bigint NOT NULL,
    owner text NOT NULL
);

CREATE TABLE sodalite_session_states (
    entity bytea NOT NULL,
    partition bigint NOT NULL,
    session_id bytea NOT NULL,
    state bytea NOT NULL,
    updated_at bigint NOT NULL
);

ALTER TABLE ONLY sodalite_counters ATTACH PARTITION sodalite_counters_g0 FOR VALUES IN ('0');

ALTER TABLE ONLY sodalite_counters ATTACH PARTITION sodalite_counters_g1 FOR VALUES IN ('1');

ALTER TABLE ONLY sodalite_counters ATTACH PARTITION sodalite_counters_g2 FOR VALUES IN ('2');

ALTER TABLE ONLY sodalite_counters ATTACH PARTITION sodalite_counters_g3 FOR VALUES IN ('3');

ALTER TABLE ONLY sodalite_duplicate_history ATTACH PARTITION sodalite_duplicate_history_g0 FOR VALUES IN ('0');

ALTER TABLE ONLY sodalite_duplicate_history ATTACH PARTITION sodalite_duplicate_history_g1 FOR VALUES IN ('1');

ALTER TABLE ONLY sodalite_duplicate_history ATTACH PARTITION sodalite_duplicate_history_g2 FOR VALUES IN ('2');

ALTER TABLE ONLY sodalite_duplicate_history ATTACH PARTITION sodalite_duplicate_history_g3 FOR VALUES IN ('3');

ALTER TABLE ONLY sodalite_messages ATTACH PARTITION sodalite_messages_g0 FOR VALUES IN ('0');

ALTER TABLE ONLY sodalite_messages ATTACH PARTITION sodalite_messages_g1 FOR VALUES IN ('1');

ALTER TABLE ONLY sodalite_messages ATTACH PARTITION sodalite_messages_g2 FOR VALUES IN ('2');

ALTER TABLE ONLY sodalite_messages ATTACH PARTITION sodalite_messages_g3 FOR VALUES IN ('3');

ALTER TABLE ONLY sodalite_activity
    ADD CONSTRAINT sodalite_activity_pkey PRIMARY KEY (entity, node);

ALTER TABLE ONLY sodalite_batch_outcomes
    ADD CONSTRAINT sodalite_batch_outcomes_pkey PRIMARY KEY (id);

ALTER TABLE ONLY sodalite_counters
    ADD CONSTRAINT sodalite_counters_pkey PRIMARY KEY (entity, partition, generation);

ALTER TABLE ONLY sodalite_counters_g0
    ADD CONSTRAINT sodalite_counters_g0_pkey PRIMARY KEY (entity, partition, generation);

ALTER TABLE ONLY sodalite_counters_g1
    ADD CONSTRAINT sodalite_counters_g1_pkey PRIMARY KEY (entity, partition, generation);

ALTER TABLE ONLY sodalite_counters_g2
    ADD CONSTRAINT sodalite_counters_g2_pkey PRIMARY KEY (entity, partition, generation);

ALTER TABLE ONLY sodalite_counters_g3
    ADD CONSTRAINT sodalite_counters_g3_pkey PRIMARY KEY (entity, partition, generation);

ALTER TABLE ONLY sodalite_duplicate_history
    ADD CONSTRAINT sodalite_duplicate_history_pkey PRIMARY KEY (entity, partition, message_id, generation);

ALTER TABLE ONLY sodalite_duplicate_history_g0
    ADD CONSTRAINT sodalite_duplicate_history_g0_pkey PRIMARY KEY (entity, partition, message_id, generation);

ALTER TABLE ONLY sodalite_duplicate_history_g1
    ADD CONSTRAINT sodalite_duplicate_history_g1_pkey PRIMARY KEY (entity, partition, message_id, generation);

ALTER TABLE ONLY sodalite_duplicate_history_g2
    ADD CONSTRAINT sodalite_duplicate_history_g2_pkey PRIMARY KEY (entity, partition, message_id, generation);

ALTER TABLE ONLY sodalite_duplicate_history_g3
    ADD CONSTRAINT sodalite_duplicate_history_g3_pkey PRIMARY KEY (entity, partition, message_id, generation);

ALTER TABLE ONLY sodalite_entities
    ADD CONSTRAINT sodalite_entities_pkey PRIMARY KEY (path_key);

ALTER TABLE ONLY sodalite_messages
    ADD CONSTRAINT sodalite_messages_pkey PRIMARY KEY (entity, partition, sequence_number, generation);

ALTER TABLE ONLY sodalite_messages_g0
    ADD CONSTRAINT sodalite_messages_g0_pkey PRIMARY KEY (entity, partition, sequence_number, generation);

ALTER TABLE ONLY sodalite_messages_g1
    ADD CONSTRAINT sodalite_messages_g1_pkey PRIMARY KEY (entity, partition, sequence_number, generation);

ALTER TABLE ONLY sodalite_messages_g2
    ADD CONSTRAINT sodalite_messages_g2_pkey PRIMARY KEY (entity, partition, sequence_number, generation);

ALTER TABLE ONLY sodalite_messages_g3
    ADD CONSTRAINT sodalite_messages_g3_pkey PRIMARY KEY (entity, partition, sequence_number, generation);

ALTER TABLE ONLY sodalite_move_keys
    ADD CONSTRAINT sodalite_move_keys_pkey PRIMARY KEY (entity, partition, move_key);

ALTER TABLE ONLY sodalite_partitions
    ADD CONSTRAINT sodalite_partitions_pkey PRIMARY KEY (entity, partition);

ALTER TABLE ONLY sodalite_ring
    ADD CONSTRAINT sodalite_ring_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY sodalite_rules
    ADD CONSTRAINT sodalite_rules_pkey PRIMARY KEY (subscription, name_key);

ALTER TABLE ONLY sodalite_schema_version
    ADD CONSTRAINT sodalite_schema_version_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY sodalite_session_locks
    ADD CONSTRAINT sodalite_session_locks_pkey PRIMARY KEY (entity, partition, session_id);

ALTER TABLE ONLY sodalite_session_states
    ADD CONSTRAINT sodalite_session_states_pkey PRIMARY KEY (entity, partition, session_id);

CREATE INDEX sodalite_batch_outcomes_at ON sodalite_batch_outcomes USING btree (at);

CREATE INDEX sodalite_duplicate_history_seen ON ONLY sodalite_duplicate_history USING btree (entity, partition, seen_at);

CREATE INDEX sodalite_duplicate_history_g0_entity_partition_seen_at_idx ON sodalite_duplicate_history_g0 USING btree (entity, partition, seen_at);

CREATE INDEX sodalite_duplicate_history_g1_entity_partition_seen_at_idx ON sodalite_duplicate_history_g1 USING btree (entity, partition, seen_at);

CREATE INDEX sodalite_duplicate_history_g2_entity_partition_seen_at_idx ON sodalite_duplicate_history_g2 USING btree (entity, partition, seen_at);

CREATE INDEX sodalite_duplicate_history_g3_entity_partition_seen_at_idx ON sodalite_duplicate_history_g3 USING btree (entity, partition, seen_at);

CREATE INDEX sodalite_messages_expires ON ONLY sodalite_messages USING btree (entity, partition, expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX sodalite_messages_g0_entity_partition_expires_at_idx ON sodalite_messages_g0 USING btree (entity, partition, expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX sodalite_messages_locked ON ONLY sodalite_messages USING btree (entity, partition, locked_until) WHERE (locked_until IS NOT NULL);

CREATE INDEX sodalite_messages_g0_entity_partition_locked_until_idx ON sodalite_messages_g0 USING btree (entity, partition, locked_until) WHERE (locked_until IS NOT NULL);

CREATE INDEX sodalite_messages_scheduled ON ONLY sodalite_messages USING btree (entity, partition, scheduled_enqueue_time, sequence_number) WHERE (state = 2);

CREATE INDEX sodalite_messages_g0_entity_partition_scheduled_enqueue_tim_idx ON sodalite_messages_g0 USING btree (entity, partition, scheduled_enqueue_time, sequence_number) WHERE (state = 2);

CREATE INDEX sodalite_messages_session ON ONLY sodalite_messages USING btree (entity, partition, session_id, sequence_number) WHERE (session_id IS NOT NULL);

CREATE INDEX sodalite_messages_g0_entity_partition_session_id_sequence_n_idx ON sodalite_messages_g0 USING btree (entity, partition, session_id, sequence_number) WHERE (session_id IS NOT NULL);

CREATE INDEX sodalite_messages_ready ON ONLY sodalite_messages USING btree (entity, partition, state, sequence_number);

CREATE INDEX sodalite_messages_g0_entity_partition_state_sequence_number_idx ON sodalite_messages_g0 USING btree (entity, partition, state, sequence_number);

CREATE INDEX sodalite_messages_g1_entity_partition_expires_at_idx ON sodalite_messages_g1 USING btree (entity, partition, expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX sodalite_messages_g1_entity_partition_locked_until_idx ON sodalite_messages_g1 USING btree (entity, partition, locked_until) WHERE (locked_until IS NOT NULL);

CREATE INDEX sodalite_messages_g1_entity_partition_scheduled_enqueue_tim_idx ON sodalite_messages_g1 USING btree (entity, partition, scheduled_enqueue_time, sequence_number) WHERE (state = 2);

CREATE INDEX sodalite_messages_g1_entity_partition_session_id_sequence_n_idx ON sodalite_messages_g1 USING btree (entity, partition, session_id, sequence_number) WHERE (session_id IS NOT NULL);

CREATE INDEX sodalite_messages_g1_entity_partition_state_sequence_number_idx ON sodalite_messages_g1 USING btree (entity, partition, state, sequence_number);

CREATE INDEX sodalite_messages_g2_entity_partition_expires_at_idx ON sodalite_messages_g2 USING btree (entity, partition, expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX sodalite_messages_g2_entity_partition_locked_until_idx ON sodalite_messages_g2 USING btree (entity, partition, locked_until) WHERE (locked_until IS NOT NULL);

CREATE INDEX sodalite_messages_g2_entity_partition_scheduled_enqueue_tim_idx ON sodalite_messages_g2 USING btree (entity, partition, scheduled_enqueue_time, sequence_number) WHERE (state = 2);

CREATE INDEX sodalite_messages_g2_entity_partition_session_id_sequence_n_idx ON sodalite_messages_g2 USING btree (entity, partition, session_id, sequence_number) WHERE (session_id IS NOT NULL);

CREATE INDEX sodalite_messages_g2_entity_partition_state_sequence_number_idx ON sodalite_messages_g2 USING btree (entity, partition, state, sequence_number);

CREATE INDEX sodalite_messages_g3_entity_partition_expires_at_idx ON sodalite_messages_g3 USING btree (entity, partition, expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX sodalite_messages_g3_entity_partition_locked_until_idx ON sodalite_messages_g3 USING btree (entity, partition, locked_until) WHERE (locked_until IS NOT NULL);

CREATE INDEX sodalite_messages_g3_entity_partition_scheduled_enqueue_tim_idx ON sodalite_messages_g3 USING btree (entity, partition, scheduled_enqueue_time, sequence_number) WHERE (state = 2);

CREATE INDEX sodalite_messages_g3_entity_partition_session_id_sequence_n_idx ON sodalite_messages_g3 USING btree (entity, partition, session_id, sequence_number) WHERE (session_id IS NOT NULL);

CREATE INDEX sodalite_messages_g3_entity_partition_state_sequence_number_idx ON sodalite_messages_g3 USING btree (entity, partition, state, sequence_number);

CREATE INDEX sodalite_session_locks_due ON sodalite_session_locks USING btree (entity, partition, locked_until);

ALTER INDEX sodalite_counters_pkey ATTACH PARTITION sodalite_counters_g0_pkey;

ALTER INDEX sodalite_counters_pkey ATTACH PARTITION sodalite_counters_g1_pkey;

ALTER INDEX sodalite_counters_pkey ATTACH PARTITION sodalite_counters_g2_pkey;

ALTER INDEX sodalite_counters_pkey ATTACH PARTITION sodalite_counters_g3_pkey;

ALTER INDEX sodalite_duplicate_history_seen ATTACH PARTITION sodalite_duplicate_history_g0_entity_partition_seen_at_idx;

ALTER INDEX sodalite_duplicate_history_pkey ATTACH PARTITION sodalite_duplicate_history_g0_pkey;

ALTER INDEX sodalite_duplicate_history_seen ATTACH PARTITION sodalite_duplicate_history_g1_entity_partition_seen_at_idx;

ALTER INDEX sodalite_duplicate_history_pkey ATTACH PARTITION sodalite_duplicate_history_g1_pkey;

ALTER INDEX sodalite_duplicate_history_seen ATTACH PARTITION sodalite_duplicate_history_g2_entity_partition_seen_at_idx;

ALTER INDEX sodalite_duplicate_history_pkey ATTACH PARTITION sodalite_duplicate_history_g2_pkey;

ALTER INDEX sodalite_duplicate_history_seen ATTACH PARTITION sodalite_duplicate_history_g3_entity_partition_seen_at_idx;

ALTER INDEX sodalite_duplicate_history_pkey ATTACH PARTITION sodalite_duplicate_history_g3_pkey;

ALTER INDEX sodalite_messages_expires ATTACH PARTITION sodalite_messages_g0_entity_partition_expires_at_idx;

ALTER INDEX sodalite_messages_locked ATTACH PARTITION sodalite_messages_g0_entity_partition_locked_until_idx;

ALTER INDEX sodalite_messages_scheduled ATTACH PARTITION sodalite_messages_g0_entity_partition_scheduled_enqueue_tim_idx;

ALTER INDEX sodalite_messages_session ATTACH PARTITION sodalite_messages_g0_entity_partition_session_id_sequence_n_idx;

ALTER INDEX sodalite_messages_ready ATTACH PARTITION sodalite_messages_g0_entity_partition_state_sequence_number_idx;

ALTER INDEX sodalite_messages_pkey ATTACH PARTITION sodalite_messages_g0_pkey;

ALTER INDEX sodalite_messages_expires ATTACH PARTITION sodalite_messages_g1_entity_partition_expires_at_idx;

ALTER INDEX sodalite_messages_locked ATTACH PARTITION sodalite_messages_g1_entity_partition_locked_until_idx;

ALTER INDEX sodalite_messages_scheduled ATTACH PARTITION sodalite_messages_g1_entity_partition_scheduled_enqueue_tim_idx;

ALTER INDEX sodalite_messages_session ATTACH PARTITION sodalite_messages_g1_entity_partition_session_id_sequence_n_idx;

ALTER INDEX sodalite_messages_ready ATTACH PARTITION sodalite_messages_g1_entity_partition_state_sequence_number_idx;

ALTER INDEX sodalite_messages_pkey ATTACH PARTITION sodalite_messages_g1_pkey;

ALTER INDEX sodalite_messages_expires ATTACH PARTITION sodalite_messages_g2_entity_partition_expires_at_idx;

ALTER INDEX sodalite_messages_locked ATTACH PARTITION sodalite_messages_g2_entity_partition_locked_until_idx;

ALTER INDEX sodalite_messages_scheduled ATTACH PARTITION sodalite_messages_g2_entity_partition_scheduled_enqueue_tim_idx;

ALTER INDEX sodalite_messages_session ATTACH PARTITION sodalite_messages_g2_entity_partition_session_id_sequence_n_idx;

ALTER INDEX sodalite_messages_ready ATTACH PARTITION sodalite_messages_g2_entity_partition_state_sequence_number_idx;

ALTER INDEX sodalite_messages_pkey ATTACH PARTITION sodalite_messages_g2_pkey;

ALTER INDEX sodalite_messages_expires ATTACH PARTITION sodalite_messages_g3_entity_partition_expires_at_idx;

ALTER INDEX sodalite_messages_locked ATTACH PARTITION sodalite_messages_g3_entity_partition_locked_until_idx;

ALTER INDEX sodalite_messages_scheduled ATTACH PARTITION sodalite_messages_g3_entity_partition_scheduled_enqueue_tim_idx;

ALTER INDEX sodalite_messages_session ATTACH PARTITION sodalite_messages_g3_entity_partition_session_id_sequence_n_idx;

ALTER INDEX sodalite_messages_ready ATTACH PARTITION sodalite_messages_g3_entity_partition_state_sequence_number_idx;

ALTER INDEX sodalite_messages_pkey ATTACH PARTITION sodalite_messages_g3_pkey;

INSERT INTO sodalite_ring (generation, history_generation) VALUES (0, 0);
