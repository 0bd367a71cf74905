"""Fixtures for the store tests that run on PostgreSQL (a real server, ``tests/pg_server.py``).

``database``: a database of the module's own on this process's server (named after the module),
dropped after the module; a test that asks for it is skipped when PostgreSQL is missing.
``url``: a new, empty schema of the test's own in that database. ``store``: a PostgresStore
opened on that schema, closed after the test. A module's own fixture of one of these names is
the one its tests get (test_contract.py's ``store`` serves every adapter, for one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from pg_server import fresh_schema_url, module_database

if TYPE_CHECKING:
    from sodalite.store.postgres import PostgresStore


@pytest.fixture(scope="module")
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    module = request.module.__name__.rpartition(".")[2]
    yield from module_database(module.removeprefix("test_pg_").removeprefix("test_"))


@pytest.fixture
def url(database: str) -> str:
    return fresh_schema_url(database)


@pytest.fixture
def store(url: str) -> Iterator[PostgresStore]:
    from sodalite.store.postgres import PostgresStore  # psycopg, which only these tests need

    store = PostgresStore(url)
    store.open()
    yield store
    store.close()
