-- Version 4: AutoDeleteOnIdle across nodes. Each node's registration of each entity with an idle
-- time (RecordActivity, a few rows per node refreshed every few seconds: room for HOT updates);
-- the idle sweep's fenced deletion (DeleteIdleEntity) reads the entity's rows.

CREATE TABLE sodalite_activity (
    entity        bytea  NOT NULL,
    node          text   NOT NULL,
    last_activity bigint NOT NULL,
    receivers     bigint NOT NULL,
    refreshed_at  bigint NOT NULL,
    PRIMARY KEY (entity, node)
) WITH (fillfactor = 50);
