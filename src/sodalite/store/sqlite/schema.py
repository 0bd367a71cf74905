"""The SQLite store's schema: declared in ``schema.sql`` (what a new file gets), reached by an older
file through the numbered migrations in ``migrations/`` (each run, in order, when the file's
``PRAGMA user_version`` is below its number), with ``every_open.sql`` run at every open. One
transaction: a file is migrated whole or not at all; a newer file is refused.

Versions: 1 had ``messages``, ``partitions`` and ``entities``; 2 adds ``duplicate_history``; 3
``session_states``; 4 ``move_keys``; 5 (the store is the truth about message state) the lock
columns of ``messages``, the counters of the ``partitions`` row (computed once from an older
file's rows), ``session_locks`` and the indexes of the ready, session and due scans; 6 the
``rules`` table (an older file's subscription records give their rules to it).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping
from typing import Final

from sodalite.errors import StoreUnavailable
from sodalite.store import sql_files

_PACKAGE: Final = __package__ or "sodalite.store.sqlite"
MIGRATIONS: Final = sql_files.migrations(_PACKAGE)
SCHEMA_VERSION: Final = MIGRATIONS[-1][0]
DECLARED: Final = sql_files.statements(sql_files.read(_PACKAGE, "schema.sql"))
EVERY_OPEN: Final = sql_files.statements(sql_files.read(_PACKAGE, "every_open.sql"))

Step = Callable[[sqlite3.Connection], None]


_ADD_COLUMN: Final = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", re.IGNORECASE)


def _adds_a_column_there_already(conn: sqlite3.Connection, statement: str) -> bool:
    """Every migration statement is idempotent: a CREATE says IF NOT EXISTS, and an ADD COLUMN of a
    column the table has already (a file an earlier release half-knew) is skipped."""
    match = _ADD_COLUMN.match(statement)
    if match is None:
        return False
    table, column = match.groups()
    return any(row[1] == column for row in conn.execute(f"PRAGMA table_info({table})"))


def migrate(conn: sqlite3.Connection, where: str, steps: Mapping[int, Step] = {}) -> None:
    """Bring the file to :data:`SCHEMA_VERSION` in one transaction: a new file gets the declared
    schema, an older one the migrations above its version (and the Python ``steps`` of those
    versions, after the version's file)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"SQLite store {where}: schema version {version} is newer than this "
                f"Sodalite supports ({SCHEMA_VERSION}); upgrade Sodalite"
            )
        fresh = version == 0 and conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None
        if fresh:
            for statement in DECLARED:
                conn.execute(statement)
        else:
            for number, _, statements in MIGRATIONS:
                if number > version:
                    for statement in statements:
                        if not _adds_a_column_there_already(conn, statement):
                            conn.execute(statement)
                    if number in steps:
                        steps[number](conn)
        for statement in EVERY_OPEN:
            conn.execute(statement)
        if version != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
        conn.execute("COMMIT")
    except BaseException:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
