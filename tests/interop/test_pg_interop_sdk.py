"""The official SDK's scenarios once more, against a broker whose messaging store is PostgreSQL.

The broker is started as users start it (``scripts/serve --store postgresql://...``) on a database
of this module's own, on the PostgreSQL server this test process starts (``tests/pg_server.py``).
The scenarios are the existing interop tests, imported unchanged: send/receive/settle, sessions,
scheduling, TTL and dead-lettering, management (peek, renew), and transactions. Each imported
test runs here with this module's ``broker`` / ``tx_broker`` fixture, so it talks to the broker
on PostgreSQL; it also runs in its own module against SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import test_transactions
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import BrokerProcess, write_config

# The scenarios (imported names are collected here, with this module's fixtures).
from test_sdk_management import (  # noqa: F401
    test_peek_shows_messages_without_locking_or_removing_them,
    test_renew_lock_extends_it_past_the_lock_duration,
)
from test_sdk_sync import (  # noqa: F401
    test_abandon_redelivers_with_delivery_count_one,
    test_batch_of_100_in_order_with_bodies_and_properties,
    test_body_kinds_round_trip,
    test_entity_names_match_case_insensitively,
    test_receive_and_delete,
    test_send_one_and_receive_it,
    test_unknown_queue_is_refused_at_put_token,
)
from test_sessions import (  # noqa: F401
    test_a_locked_session_cannot_be_taken_by_a_second_receiver,
    test_a_named_session_gets_only_its_messages_in_order,
    test_session_state_round_trips_and_sessions_are_listed,
)
from test_settlement import (  # noqa: F401
    test_dead_letter_with_reason_then_receive_it_from_the_dead_letter_queue,
    test_defer_then_receive_deferred_and_settle_by_sequence_number,
    test_expired_messages_are_dead_lettered_or_dropped_per_the_entity,
    test_max_delivery_count_moves_the_message_to_the_dead_letter_queue,
    test_scheduled_messages_appear_at_their_time_and_can_be_cancelled,
)
from test_transactions import (  # noqa: F401
    test_commit_makes_every_send_and_complete_visible_at_once,
    test_rollback_leaves_no_send_and_the_message_locked_as_it_was,
)

from conftest import QUEUES
from pg_server import shared_server

pytestmark = pytest.mark.interop


def _database(prefix: str) -> str:
    try:
        return shared_server().create_database(prefix)
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def pg_url() -> str:
    return _database("sdk")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("pg-broker")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES),
                            extra_args=["--store", pg_url, "--node-id", "pg-test-node"]).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("pg-transactions")
    config = write_config(base / "Config.json", test_transactions.QUEUES, Topics=test_transactions.TOPICS)
    process = BrokerProcess(base / "data", config, extra_args=["--store", _database("tx")]).start()
    yield process
    process.stop()


def test_the_messages_are_in_postgresql_and_nothing_in_the_data_directory(
        broker: BrokerProcess, pg_url: str) -> None:
    """The broker really keeps its messages in the database: a message sent and not yet received is a
    row of sodalite_messages, the entities are rows, and the data directory holds no SQLite store."""
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_sender("misc") as sender:
        sender.send_messages(ServiceBusMessage("kept in postgres", message_id="pg-proof"))
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT count(*) FROM sodalite_messages WHERE entity = 'misc' "
                            "AND message_id = 'pg-proof'::bytea").fetchone()
        entities = {r[0] for r in conn.execute("SELECT path FROM sodalite_entities")}
        names = {r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")}
    assert rows == (1,)
    assert {"queue.1", "orders", "sessions"} <= entities
    assert "sodalite pg-test-node" in names  # --node-id is recorded on the connections
    assert not (Path(broker.data_dir) / "messages.db").exists()
    assert any("node pg-test-node" in line for line in broker.output)
    with ServiceBusClient.from_connection_string(broker.connection_string) as client, \
            client.get_queue_receiver("misc", max_wait_time=5) as receiver:
        got = receiver.receive_messages(max_message_count=10, max_wait_time=5)
        assert [str(m) for m in got] == ["kept in postgres"]
        for m in got:
            receiver.complete_message(m)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM sodalite_messages WHERE entity = 'misc'").fetchone() == (0,)


def test_messages_survive_a_broker_restart_on_postgresql(tmp_path: Path) -> None:
    url = _database("restart")
    config = write_config(tmp_path / "Config.json", [{"Name": "keep", "Properties": {}}])
    process = BrokerProcess(tmp_path / "data", config, extra_args=["--store", url]).start()
    try:
        with ServiceBusClient.from_connection_string(process.connection_string) as client, \
                client.get_queue_sender("keep") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(50)])
        process.kill()
        process.start()
        with ServiceBusClient.from_connection_string(process.connection_string) as client, \
                client.get_queue_receiver("keep", max_wait_time=5) as receiver:
            got: list[str] = []
            while len(got) < 50:
                batch = receiver.receive_messages(max_message_count=50, max_wait_time=5)
                if not batch:
                    break
                for m in batch:
                    got.append(str(m))
                    receiver.complete_message(m)
        assert got == [f"m{i}" for i in range(50)]
    finally:
        process.stop()


def _serve_fails(tmp_path: Path, *args: str) -> tuple[int, str]:
    import subprocess

    from broker_process import SERVE

    done = subprocess.run([str(SERVE), "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "d"),
                           "--admin-port", "-1", "--amqps-port", "-1", "--http-port", "-1", *args],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr


def test_a_store_url_that_is_not_postgresql_is_refused(tmp_path: Path) -> None:
    code, err = _serve_fails(tmp_path, "--store", "mysql://u:secret@h/db")
    assert code == 2 and "--store: must be a PostgreSQL URL" in err and "secret" not in err


def test_an_unreachable_database_at_start_says_what_to_check(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, err = _serve_fails(tmp_path, "--store", f"postgresql://u:secret@127.0.0.1:{port}/db")
    assert code == 1, err
    assert "cannot connect" in err and "check that the server is running and reachable" in err
    assert "secret" not in err and "Traceback" not in err


def test_a_store_url_without_a_database_names_the_store(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [], MessagingStores=[{"Name": "pg2", "Url": "postgresql://h:5432"}])
    code, err = _serve_fails(tmp_path, "--config", str(config))
    assert code == 2 and "MessagingStores 'pg2'" in err and "name the database" in err
    code, err = _serve_fails(tmp_path, "--store", "postgresql://u:secret@h:notaport/db")
    assert code == 2 and "--store: PostgreSQL store URL" in err and "secret" not in err
