-- Version 7: one row per batch, its id, inserted in the batch's own transaction, so the outcome of a
-- batch whose COMMIT went unanswered can be looked up on the primary (sodalite.store.pg_failover).
CREATE TABLE sodalite_batch_outcomes (
    id        uuid        PRIMARY KEY,
    committed boolean     NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sodalite_batch_outcomes_at ON sodalite_batch_outcomes (at);
