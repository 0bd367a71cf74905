-- Schema version 6: a subscription's rules, one row each, in the order they were added (position).
-- The subscription records of an older file give their "Rules" to this table (a step in Python).
CREATE TABLE IF NOT EXISTS rules (
    subscription TEXT    NOT NULL COLLATE NOCASE,
    name         TEXT    NOT NULL COLLATE NOCASE,
    position     INTEGER NOT NULL,
    rule         TEXT    NOT NULL,
    PRIMARY KEY (subscription, name)
) WITHOUT ROWID;
