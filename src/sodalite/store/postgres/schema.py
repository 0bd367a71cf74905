"""The PostgreSQL store's schema: numbered migrations, SQL files in ``migrations/`` (package data), run by
``open`` in one transaction under an advisory lock and recorded in ``sodalite_schema_version``
(see "Schema" in :mod:`sodalite.store.postgres`)."""

from __future__ import annotations

from typing import Final

from sodalite.store import sql_files

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = tuple(
    tuple(statements) for _, _, statements in sql_files.migrations(__package__ or "sodalite.store.postgres"))
SCHEMA_VERSION: Final = len(MIGRATIONS)


_CREATE_VERSION_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS sodalite_schema_version (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        version   integer NOT NULL
    )
"""
DECLARED: Final = sql_files.statements(sql_files.read(__package__ or "sodalite.store.postgres", "schema.sql"))
