"""What the PostgreSQL adapter adds to the contract: its schema migrations, its URL checks, and how
it behaves when the database is absent, refuses, or goes away and comes back.

A real server is started by this process (``tests/pg_server.py``); this module has its own database.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import psycopg
import pytest

from pg_server import PgServer, find_bin_dir
from sodalite.errors import ConfigurationError, StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, PartitionRef
from sodalite.store.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore, redact

Q = PartitionRef("q", 0)


def _record(seq: int) -> MessageRecord:
    return MessageRecord(sequence_number=seq, enqueued_time=1, message_id=f"m{seq}", session_id=None,
                         partition_key=None, time_to_live=None, expires_at=None, scheduled_enqueue_time=None,
                         delivery_count=0, state=MessageState.ACTIVE, durable=True, priority=None,
                         annotations=b"", annotation_count=0, tail=b"body")


def _schema(database: str) -> str:
    schema = f"s_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    return schema


def _in(database: str, schema: str) -> str:
    return f"{database}?options=-csearch_path%3D{schema}"


def test_open_creates_the_schema_and_records_its_version(database: str) -> None:
    schema = _schema(database)
    store = PostgresStore(_in(database, schema))
    store.open()
    store.close()
    with psycopg.connect(_in(database, schema)) as conn:
        assert conn.execute("SELECT version FROM sodalite_schema_version").fetchall() == [(SCHEMA_VERSION,)]
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))}
    assert {"sodalite_messages", "sodalite_partitions", "sodalite_entities", "sodalite_schema_version"} <= tables


def test_every_migration_applies_in_turn_and_keeps_data(database: str) -> None:
    """Each numbered migration runs on a database left at the version before it."""
    schema = _schema(database)
    url = _in(database, schema)
    store = PostgresStore(url)
    store.open()
    store.apply([Append((_record(1),), ref=Q)])
    store.close()
    # Pretend the database is one version older for each migration after the first: reopening
    # must run exactly the missing ones (idempotence is not required of them, so we re-create nothing).
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE sodalite_schema_version SET version = %s", (SCHEMA_VERSION,))
    again = PostgresStore(url)
    again.open()
    assert [m.record.sequence_number for m in again.peek(Q, 0, 10)] == [1]
    again.close()
    assert len(MIGRATIONS) == SCHEMA_VERSION >= 1


def test_a_newer_schema_refuses_to_start_and_says_what_to_do(database: str) -> None:
    schema = _schema(database)
    url = _in(database, schema)
    first = PostgresStore(url)
    first.open()
    first.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE sodalite_schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreUnavailable, match=r"newer than this Sodalite knows.*Upgrade this Sodalite"):
        PostgresStore(url).open()


def test_concurrent_opens_migrate_once(database: str) -> None:
    """The advisory lock serializes migrations: brokers starting together on one database all succeed."""
    url = _in(database, _schema(database))
    errors: list[BaseException] = []
    stores = [PostgresStore(url) for _ in range(4)]

    def open_one(s: PostgresStore) -> None:
        try:
            s.open()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in stores:
        s.close()
    assert errors == []
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM sodalite_schema_version").fetchone() == (1,)


@pytest.mark.parametrize("url", ["mysql://h/db", "postgresql://h", "postgresql://h:port/db", "", "sqlite.db"])
def test_a_wrong_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL store"):
        PostgresStore(url)


def test_messages_never_show_the_password() -> None:
    assert redact("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    with pytest.raises(ConfigurationError) as caught:
        PostgresStore("postgresql://u:s3cret@h:5432")
    assert "s3cret" not in str(caught.value)


def test_an_unreachable_database_fails_open_with_what_to_check() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = PostgresStore(f"postgresql://u:pw@127.0.0.1:{port}/nodb", connect_timeout=2)
    with pytest.raises(StoreUnavailable, match=r"cannot connect.*server is running and reachable") as caught:
        store.open()
    assert "pw@" not in str(caught.value)


def test_a_missing_database_fails_open(database: str) -> None:
    missing = database.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(StoreUnavailable, match="no_such_database"):
        PostgresStore(missing).open()


def test_a_database_lost_at_runtime_fails_calls_then_comes_back_with_everything() -> None:
    """A server of this test's own is stopped and started again under an open store: calls fail with
    StoreUnavailable while it is down (nothing half-applied), and work again once it is back."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed")
    server = PgServer(bin_dir).start()
    try:
        store = PostgresStore(server.create_database("lost"), connect_timeout=2)
        store.open()
        store.apply([Append((_record(1),), ref=Q)])
        server.halt()
        with pytest.raises(StoreUnavailable, match="batch not applied"):
            store.apply([Append((_record(2),), ref=Q)])
        with pytest.raises(StoreUnavailable):
            store.peek(Q, 0, 10)
        server.resume()
        for _ in range(30):  # the pool reconnects in the background
            try:
                store.apply([Append((_record(3),), ref=Q)])
                break
            except StoreUnavailable:
                time.sleep(0.5)
        # the batch the halted server refused stored nothing: messages 1 and 3 (numbered 1 and 2 by the store)
        assert [m.record.message_id for m in store.peek(Q, 0, 10)] == ["m1", "m3"]
        store.close()
    finally:
        server.stop()

