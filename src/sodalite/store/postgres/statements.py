"""The PostgreSQL store's statements: the catalogue ``queries.sql`` (set-based statements over
``unnest`` arrays, each under its name), and the column lists and codes the plans and the ring's
maintenance compose with."""

from __future__ import annotations

from typing import Final

from sodalite.store import sql_files
from sodalite.store.port import (
    Outcome,
)

_PARTITION_TABLES: Final = ("sodalite_messages", "sodalite_partitions", "sodalite_counters",
                            "sodalite_duplicate_history", "sodalite_session_states", "sodalite_move_keys",
                            "sodalite_session_locks")


SQL: Final = sql_files.catalogue(sql_files.read(__package__ or "sodalite.store.postgres", "queries.sql"))

# The message fields after the sequence number, with their column types (for unnest arrays).
_FIELDS: Final = (
    ("enqueued_time", "bigint"), ("message_id", "bytea"), ("session_id", "bytea"), ("partition_key", "bytea"),
    ("time_to_live", "bigint"), ("expires_at", "bigint"), ("scheduled_enqueue_time", "bigint"),
    ("delivery_count", "bigint"), ("state", "smallint"), ("durable", "boolean"), ("priority", "bigint"),
    ("annotations", "bytea"), ("annotation_count", "bigint"), ("tail", "bytea"),
)


_FIELD_NAMES: Final = tuple(name for name, _ in _FIELDS)


_MESSAGE_COLUMNS: Final = "sequence_number, " + ", ".join(_FIELD_NAMES)


_LOCK_COLUMNS: Final = ("lock_token", "locked_until", "lock_owner")


_STORED_COLUMNS: Final = _MESSAGE_COLUMNS + ", " + ", ".join(_LOCK_COLUMNS)


_ALL_COLUMNS: Final = "generation, entity, partition, " + _STORED_COLUMNS


_COUNTER_COLUMNS: Final = (
    "generation, entity, partition, last_sequence_number, active, scheduled, deferred, size_in_bytes"
)


# Adds the inserted values to the partition's counter row of that generation, if there is one.
_ADD_COUNTERS: Final = (
    "ON CONFLICT (entity, partition, generation) DO UPDATE SET "
    "last_sequence_number = GREATEST(c.last_sequence_number, excluded.last_sequence_number), "
    "active = c.active + excluded.active, scheduled = c.scheduled + excluded.scheduled, "
    "deferred = c.deferred + excluded.deferred, size_in_bytes = c.size_in_bytes + excluded.size_in_bytes"
)


_CODE: Final = {Outcome.ABANDON: 0, Outcome.RELEASE: 1, Outcome.DEFER: 2, Outcome.COMPLETE: 3, Outcome.DEAD_LETTER: 4}
