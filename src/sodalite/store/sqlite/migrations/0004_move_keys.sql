-- Schema version 4: the keys of messages moved in from another store.
CREATE TABLE IF NOT EXISTS move_keys (
    entity    TEXT    NOT NULL COLLATE NOCASE,
    partition INTEGER NOT NULL,
    move_key  TEXT    NOT NULL,
    PRIMARY KEY (entity, partition, move_key)
) WITHOUT ROWID;
