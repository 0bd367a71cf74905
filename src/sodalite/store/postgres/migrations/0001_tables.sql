-- The hot table: rows come and go all the time, so let autovacuum visit it early.

CREATE TABLE sodalite_messages (
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
    PRIMARY KEY (entity, partition, sequence_number)
);

CREATE TABLE sodalite_partitions (
    entity               bytea  NOT NULL,
    partition            bigint NOT NULL,
    last_sequence_number bigint NOT NULL,
    PRIMARY KEY (entity, partition)
);

CREATE TABLE sodalite_entities (
    path_key   bytea NOT NULL PRIMARY KEY,
    path       text  NOT NULL,
    kind       text  NOT NULL,
    properties text  NOT NULL
);

CREATE TABLE sodalite_duplicate_history (
    entity     bytea  NOT NULL,
    partition  bigint NOT NULL,
    message_id bytea  NOT NULL,
    seen_at    bigint NOT NULL,
    PRIMARY KEY (entity, partition, message_id)
);

CREATE TABLE sodalite_session_states (
    entity     bytea  NOT NULL,
    partition  bigint NOT NULL,
    session_id bytea  NOT NULL,
    state      bytea  NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (entity, partition, session_id)
);

CREATE TABLE sodalite_move_keys (
    entity    bytea  NOT NULL,
    partition bigint NOT NULL,
    move_key  bytea  NOT NULL,
    PRIMARY KEY (entity, partition, move_key)
);

ALTER TABLE sodalite_messages SET (autovacuum_vacuum_scale_factor = 0.01,
                                   autovacuum_vacuum_insert_scale_factor = 0.05);
