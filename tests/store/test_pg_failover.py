"""The PostgreSQL store on a primary and a streaming standby (tests/pg_cluster.py): which server a
multi-host URL writes to, the fence by timeline, what happens to a batch whose COMMIT went
unanswered, and the errors at start (no reachable host, a standby alone).

Each test starts a cluster of its own (a primary ``n0`` and a standby ``n1``, synchronous commit
under ``ANY 1``) and breaks it its own way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pg_cluster import PgCluster, PgNode
from pg_server import _free_port, find_bin_dir
from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, Appended, PartitionRef
from sodalite.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(find_bin_dir() is None, reason="PostgreSQL is not installed")
Q = PartitionRef("q", 0)


def _record(name: str) -> MessageRecord:
    return MessageRecord(sequence_number=0, enqueued_time=1, message_id=name, session_id=None,
                         partition_key=None, time_to_live=None, expires_at=None, scheduled_enqueue_time=None,
                         delivery_count=0, state=MessageState.ACTIVE, durable=True, priority=None,
                         annotations=b"", annotation_count=0, tail=b"body")


def _append(store: PostgresStore, name: str) -> Any:
    return store.apply([Append((_record(name),), ref=Q)])


def _stored(node: PgNode, database: str) -> list[str]:
    rows = node.query("SELECT convert_from(message_id, 'UTF8') FROM sodalite_messages ORDER BY sequence_number",
                      database)
    return [str(r[0]) for r in rows]


def _until(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (StoreUnavailable, psycopg.Error):  # not yet (a standby behind, no primary yet)
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError("not within the time")
        time.sleep(0.2)


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    c = PgCluster(standbys=1).start()
    try:
        yield c
    finally:
        c.stop()


def test_an_old_primary_restarted_before_rewind_is_never_written_to(cluster: PgCluster) -> None:
    old, new = cluster.nodes
    db = cluster.create_database()
    cluster.wait_streaming(old, 1)
    store = PostgresStore(cluster.url(db), connect_timeout=2)  # the old primary first, as libpq would try it
    store.open()
    try:
        _append(store, "before")
        assert store.status().writable and store.status().host == old.host
        cluster.kill(old)
        cluster.promote(new)
        cluster.set_synchronous(new, "")  # its only standby is gone (a promoter relaxes while it is rebuilt)
        _until(lambda: _append(store, "after promotion"))
        assert store.status().host == new.host and store.status().timeline == 2
        # The old primary comes back as a primary on timeline 1 (not rewound), first in the URL.
        cluster.start_as_primary(old)
        assert not old.in_recovery()
        # The node's connection to the new primary breaks: it reconnects, and chooses the new one.
        new.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'sodalite'")
        _until(lambda: _append(store, "after the old primary came back"))
        assert store.status().host == new.host
        # Now the new primary dies too: the only server that accepts writes is the stale one.
        cluster.kill(new)
        with pytest.raises(StoreUnavailable):
            _append(store, "never written")
        for _ in range(3):
            with pytest.raises(StoreUnavailable):
                _append(store, "never written")
        status = store.probe()
        assert not status.writable and status.role == "fenced", status
        assert "older timeline" in status.reason
        assert _stored(old, db) == ["before"]  # nothing written to the old primary after the failover
    finally:
        store.close()


def test_a_batch_whose_commit_went_unanswered_but_committed_is_reported_applied(cluster: PgCluster) -> None:
    primary, standby = cluster.nodes
    db = cluster.create_database()
    store = PostgresStore(cluster.url(db, [primary]), connect_timeout=2)  # one host: a restart is the same
    store.open()
    try:
        _append(store, "first")
        # With its synchronous standby gone, a COMMIT is written locally and waits; the backend is then
        # terminated: the client never hears the answer, but the batch committed.
        cluster.halt(standby)
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                outcome["results"] = _append(store, "unanswered")
            except Exception as exc:
                outcome["error"] = exc

        sender = threading.Thread(target=send)
        sender.start()
        _until(lambda: primary.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")[0][0])
        primary.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        sender.join(60)
        assert "error" not in outcome, outcome
        (appended,) = outcome["results"]
        assert isinstance(appended, Appended) and appended.sequence_numbers == (2,)
        assert store.outcome_lookups == 1 and store.outcomes_committed == 1
        assert _stored(primary, db) == ["first", "unanswered"]  # once: acknowledged, not retried
    finally:
        cluster.start_standby(standby, primary)
        store.close()


def test_a_batch_whose_commit_never_reached_the_promoted_standby_is_refused(cluster: PgCluster) -> None:
    primary, standby = cluster.nodes
    db = cluster.create_database()
    store = PostgresStore(cluster.url(db), connect_timeout=2)
    store.open()
    try:
        _append(store, "first")
        cluster.halt(standby)  # the COMMIT below is written on the primary alone, then the primary dies
        outcome: dict[str, Any] = {}

        def send() -> None:
            try:
                outcome["results"] = _append(store, "lost with the primary")
            except Exception as exc:
                outcome["error"] = exc

        sender = threading.Thread(target=send)
        sender.start()
        _until(lambda: primary.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")[0][0])
        cluster.kill(primary)
        cluster.start_standby(standby, primary)  # it never received the commit
        cluster.promote(standby)
        cluster.set_synchronous(standby, "")
        sender.join(60)
        assert isinstance(outcome.get("error"), StoreUnavailable), outcome
        assert "did not commit" in str(outcome["error"])
        assert _stored(standby, db) == ["first"]
        _append(store, "retried")  # the client's retry goes to the new primary
        assert _stored(standby, db) == ["first", "retried"]
    finally:
        store.close()


def test_a_standby_given_as_the_only_host_is_refused_at_start(cluster: PgCluster) -> None:
    _, standby = cluster.nodes
    db = cluster.create_database()
    cluster.wait_streaming(cluster.nodes[0], 1)
    _until(lambda: standby.query(f"SELECT 1 FROM pg_database WHERE datname = '{db}'"))
    store = PostgresStore(cluster.url(db, [standby]), connect_timeout=2)
    with pytest.raises(StoreUnavailable, match=r"refused.*standby.*read-only") as caught:
        store.open()
    assert standby.host in str(caught.value)
    assert store.status().role == "standby"


def test_a_url_with_no_reachable_host_at_start_names_every_host() -> None:
    ports = [_free_port(), _free_port()]
    url = f"postgresql://u:pw@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/db?target_session_attrs=read-write"
    store = PostgresStore(url, connect_timeout=2)
    with pytest.raises(StoreUnavailable, match="cannot connect") as caught:
        store.open()
    for port in ports:
        assert f"127.0.0.1:{port}" in str(caught.value)
    assert "pw@" not in str(caught.value)
    assert store.status().role == "unreachable"


def test_a_store_opened_on_a_standby_writes_nothing_until_it_is_promoted(cluster: PgCluster) -> None:
    """``standby_ok`` (a geo-replication secondary's nodes): the store opens on a standby, answers
    every batch with StoreUnavailable (server-busy) and says why, and writes once the standby is
    promoted, without being reopened."""
    primary, standby = cluster.nodes
    db = cluster.create_database()
    first = PostgresStore(cluster.url(db, [primary]), connect_timeout=2)
    first.open()  # the schema, created on the primary, replicated
    first.close()
    cluster.wait_streaming(primary, 1)
    _until(lambda: standby.query("SELECT count(*) FROM sodalite_schema_version", db)[0][0])
    store = PostgresStore(cluster.url(db, [standby]), connect_timeout=2, standby_ok=True)
    store.open()
    try:
        with pytest.raises(StoreUnavailable):
            _append(store, "refused")
        status = store.status()
        assert not status.writable and status.role == "standby", status
        cluster.kill(primary)
        cluster.promote(standby)
        cluster.set_synchronous(standby, "")
        _until(lambda: _append(store, "after promotion"))
        assert store.status().writable and store.status().host == standby.host
        assert _stored(standby, db) == ["after promotion"]
    finally:
        store.close()
