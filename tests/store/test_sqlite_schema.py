"""The SQLite store's schema files agree: a new file gets the declared schema (schema.sql), and a
file taken through every numbered migration from nothing ends with the same tables, columns, keys,
collations and indexes; each migration leaves the file at its version, and the declared version is
the last migration's."""

from __future__ import annotations

import pathlib
import re
import sqlite3
from typing import Any

from sodalite.store import sql_files
from sodalite.store.sqlite import SCHEMA_VERSION, SqliteStore, schema


def _shape(conn: sqlite3.Connection) -> dict[str, Any]:
    """Everything about the schema that matters, as comparable data (not the stored DDL text, which
    ALTER TABLE rewrites)."""
    shape: dict[str, Any] = {}
    tables = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
    for table in tables:
        columns = [tuple(row[1:]) for row in conn.execute(f"PRAGMA table_xinfo({table})")]
        without_rowid = conn.execute(
            "SELECT sql LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        indexes = {}
        for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({table})"):
            keys = [tuple(row) for row in conn.execute(f"PRAGMA index_xinfo({name})")]
            row = conn.execute("SELECT coalesce(sql, '') FROM sqlite_master WHERE name = ?", (name,)).fetchone()
            sql = "" if row is None else row[0]
            where = re.sub(r"\s+", " ", sql.split(" WHERE ", 1)[1]) if " WHERE " in sql else None
            indexes[name if origin == "c" else f"{table}:{origin}"] = (unique, origin, partial, keys, where)
        shape[table] = {"columns": columns, "without_rowid": without_rowid, "indexes": indexes}
    return shape


def _migrated_step_by_step(path: pathlib.Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    for number, _, statements in schema.MIGRATIONS:
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number:d}")
    for statement in schema.EVERY_OPEN:
        conn.execute(statement)
    return conn


def test_migrations_produce_the_declared_schema(tmp_path: pathlib.Path) -> None:
    store = SqliteStore(tmp_path / "new.db")
    store.open()
    store.close()
    declared = sqlite3.connect(tmp_path / "new.db")
    migrated = _migrated_step_by_step(tmp_path / "old.db")
    try:
        assert _shape(declared) == _shape(migrated)
        assert set(_shape(declared)) == {"activity", "duplicate_history", "entities", "messages", "move_keys",
                                         "partitions", "rules", "session_locks", "session_states"}
        assert declared.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        declared.close()
        migrated.close()


def test_an_old_file_opens_migrated_to_the_declared_schema(tmp_path: pathlib.Path) -> None:
    """A file at each older version (made by the migrations up to it) is migrated by ``open`` to
    the same shape as a new file."""
    new = SqliteStore(tmp_path / "new.db")
    new.open()
    new.close()
    with sqlite3.connect(tmp_path / "new.db") as conn:
        expected = _shape(conn)
    for version in range(1, SCHEMA_VERSION):
        path = tmp_path / f"v{version}.db"
        conn = sqlite3.connect(path, isolation_level=None)
        for _, _, statements in schema.MIGRATIONS[:version]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version:d}")
        conn.close()
        store = SqliteStore(path)
        store.open()
        store.close()
        with sqlite3.connect(path) as conn:
            assert _shape(conn) == expected, f"from version {version}"
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_migration_files_are_numbered_without_gaps() -> None:
    assert [n for n, _, _ in schema.MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", name) for _, name, _ in schema.MIGRATIONS)
    assert sql_files.statements("SELECT 1;\n-- a comment\nSELECT\n  2;") == ["SELECT 1", "SELECT\n  2"]


def test_every_statement_the_adapter_names_is_in_its_catalogue_and_every_one_is_used() -> None:
    from sodalite.store.sqlite.rows import SQL

    package = pathlib.Path(schema.__file__).parent
    source = "\n".join(path.read_text() for path in package.glob("*.py"))
    named = set(re.findall(r'SQL\["([a-z0-9_]+)"\]', source))
    assert named - set(SQL) == set()
    composed = {name for name in SQL if re.fullmatch(r"(settle|delete_entity|delete_sub_queues)_[a-z_]+", name)}
    assert set(SQL) - named - composed == set()
