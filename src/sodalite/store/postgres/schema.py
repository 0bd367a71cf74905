"""The PostgreSQL store's schema: numbered migrations (``migrations/NNNN_*.sql``, package data,
:data:`MIGRATIONS`) that ``open`` runs in one transaction under a transaction-scoped advisory lock,
so several brokers starting on one database migrate it once, recording the version in
``sodalite_schema_version``; ``schema.sql`` is the declared schema they reach
(tests/store/test_pg_schema.py). A database whose schema is newer than this code knows makes
``open`` raise StoreUnavailable naming what to do (upgrade Sodalite, or point it at another database).
Version 2 moves the messages into the ring in place, adds the lock columns, the
counters (computed once from the rows), the session locks and the indexes. Version 3 adds the
counters' ring (``sodalite_counters``); the version-2 counter rows stay, as the base rows. Version 4
moves the duplicate-detection history into its ring (its rows into generation 0) and adds its
claim column. Version 6 gives subscriptions' rules a table of their own (``sodalite_rules``, one row
per rule: :class:`~sodalite.store.port.PutRule` adds one with ``INSERT … ON CONFLICT DO NOTHING``, so
of two nodes adding one name at once one gets it) and moves the ``"Rules"`` of existing subscription
records there. A node of an older release refuses the migrated database (its schema is newer), so
every node is upgraded together for this step (docs/postgresql.md).
Version 7 adds ``sodalite_batch_outcomes`` (one row per batch, its id: :mod:`sodalite.store.postgres.failover`).
"""

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
