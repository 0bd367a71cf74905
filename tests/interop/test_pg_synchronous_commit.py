"""The PostgreSQL store commits with ``synchronous_commit = on`` even where the server's default is off.

With ``synchronous_commit = off`` PostgreSQL acknowledges a ``COMMIT`` before its WAL is flushed (the
WAL writer flushes it up to ``wal_writer_delay`` later), so a send the broker acknowledged could be
lost with the server. The broker, started as users start it (``scripts/serve --store postgresql://…``),
runs against a real server on a database whose default is ``off`` (``ALTER DATABASE … SET``). After
each acknowledged send the test asks the server whether everything written to its WAL is flushed:
with ``on`` the commit's record was flushed before the broker acknowledged, so it is; with ``off`` it
is not, until the WAL writer's next round.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

from pg_server import shared_server

pytestmark = pytest.mark.interop

SENDS = 12


@pytest.fixture
def async_default_database() -> Iterator[str]:
    try:
        server = shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    url = server.create_database("synccommit")
    with psycopg.connect(url, autocommit=True) as conn:
        name = url.rsplit("/", 1)[1]
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')  # type: ignore[arg-type]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row[0] == "off"  # the default a new session of this database gets
    yield url
    server.drop_database(url)


def test_acknowledged_sends_are_flushed_though_the_database_default_is_off(
        async_default_database: str, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", [{"Name": "flushed"}]),
                           extra_args=["--store", async_default_database, "--node-id", "sync-commit"]).start()
    unflushed = 0
    try:
        with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
                client.get_queue_sender("flushed") as sender, \
                psycopg.connect(async_default_database, autocommit=True) as probe:
            sender.send_messages(ServiceBusMessage(b"warm-up"))
            for i in range(SENDS):
                sender.send_messages(ServiceBusMessage(f"m-{i}".encode() + b"x" * 1000))
                row = probe.execute("SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()").fetchone()
                assert row is not None
                unflushed += not row[0]
    finally:
        broker.stop()
    # Another session's WAL (autovacuum, a checkpoint record) may now and then be in flight; the
    # broker's own commits never are.
    assert unflushed <= 2, f"{unflushed} of {SENDS} acknowledged sends were not yet flushed to the WAL"
