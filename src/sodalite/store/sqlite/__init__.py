"""The SQLite messaging store (see :mod:`sodalite.store.sqlite.store`): one database file, WAL
journal, one transaction per ``apply``. Its schema and migrations are SQL files in this package
(:mod:`sodalite.store.sqlite.schema`)."""

from sodalite.store.sqlite.schema import SCHEMA_VERSION
from sodalite.store.sqlite.store import (
    MIN_SQLITE_VERSION,
    PAGE_SIZE,
    RESERVE_BYTES,
    SYNCHRONOUS_MODES,
    SqliteSnapshot,
    SqliteStore,
)

__all__ = ["MIN_SQLITE_VERSION", "PAGE_SIZE", "RESERVE_BYTES", "SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteSnapshot",
           "SqliteStore"]
