"""The PostgreSQL store's schema files agree: a database the store migrates (from nothing, and from
each older version, one migration after another) has exactly the declared schema (schema.sql):
tables, columns, keys, indexes, partitions, storage options, the function, and the ring's row."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from sodalite.store import sql_files
from sodalite.store.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore
from sodalite.store.postgres.schema import DECLARED

pytestmark = pytest.mark.timeout(300)


def _shape(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        (schema,) = conn.execute("SELECT current_schema()").fetchone() or ("",)

        def rows(sql: str) -> list[tuple[Any, ...]]:
            found = conn.execute(sql, {"s": schema}).fetchall()  # type: ignore[call-overload]
            return [tuple(str(v).replace(f"{schema}.", "") if isinstance(v, str) else v for v in row) for row in found]

        return {
            "relations": rows("SELECT c.relname, c.relkind, c.reloptions::text, pg_get_expr(c.relpartbound, c.oid), "
                              "CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END FROM pg_class c "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s ORDER BY 1"),
            "columns": rows("SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
                            "pg_get_expr(d.adbin, d.adrelid), row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) "
                            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                            "JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                            "WHERE n.nspname = %(s)s AND a.attnum > 0 AND NOT a.attisdropped "
                            "AND c.relkind IN ('r', 'p') "
                            "ORDER BY 1, 6"),
            "constraints": rows("SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
                                "JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = %(s)s ORDER BY 1, 2"),
            "indexes": rows("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s "
                            "ORDER BY 1, 2"),
            "functions": rows("SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
                              "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s ORDER BY 1"),
            "ring": rows("SELECT generation, history_generation FROM sodalite_ring"),
        }


def _declared(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for statement in DECLARED:
            conn.execute(statement)  # type: ignore[call-overload]


def test_migrations_produce_the_declared_schema(database: str, url: str) -> None:
    from pg_server import fresh_schema_url

    store = PostgresStore(url)
    store.open()
    store.close()
    declared = fresh_schema_url(database)
    _declared(declared)
    expected = _shape(declared)
    assert _shape(url) == expected
    assert {name for name, *_ in expected["relations"]} >= {"sodalite_messages", "sodalite_ring", "sodalite_rules"}


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_database_of_each_older_version_is_migrated_to_the_declared_schema(database: str, url: str,
                                                                             version: int) -> None:
    from pg_server import fresh_schema_url

    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("CREATE TABLE sodalite_schema_version (singleton boolean PRIMARY KEY DEFAULT true "
                     "CHECK (singleton), version integer NOT NULL)")
        for statements in MIGRATIONS[:version]:
            for statement in statements:
                conn.execute(statement)  # type: ignore[call-overload]
        conn.execute("INSERT INTO sodalite_schema_version (version) VALUES (%s)", (version,))
    store = PostgresStore(url)
    store.open()
    store.close()
    declared = fresh_schema_url(database)
    _declared(declared)
    assert _shape(url) == _shape(declared)


def test_migration_files_are_numbered_and_split_whole() -> None:
    assert len(MIGRATIONS) == SCHEMA_VERSION
    function = [s for statements in MIGRATIONS for s in statements if "LANGUAGE plpgsql" in s]
    assert len(function) == 1 and function[0].rstrip().endswith("$$")  # its body's ';' did not split it
    assert sql_files.statements("SELECT 1;\nDO $$ BEGIN\n  PERFORM 1;\nEND $$;") == ["SELECT 1",
                                                                                   "DO $$ BEGIN\n  PERFORM 1;\nEND $$"]
    assert not re.search(r"(?m)^\s*CREATE SCHEMA", "\n".join(DECLARED))


def test_every_statement_the_adapter_names_is_in_its_catalogue_and_every_one_is_used() -> None:
    from pathlib import Path

    from sodalite.store.postgres.statements import SQL

    source = "\n".join(path.read_text() for path in (Path(sql_files.__file__).parent / "postgres").glob("*.py"))
    named = set(re.findall(r'SQL\["([a-z0-9_]+)"', source))
    assert named - set(SQL) == set()
    # names composed in code: a claim's variants, purge's two forms, DeleteEntity's one per table
    composed = {name for name in SQL
                if re.fullmatch(r"claim(_in_session)?(_by_numbers)?|purge_(all|through)|delete_entity_rows_[a-z_]+",
                                name)}
    assert set(SQL) - named - composed == set()
