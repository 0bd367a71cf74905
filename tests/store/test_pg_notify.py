"""LISTEN/NOTIFY on the PostgreSQL store (issue 18, storage-and-scale.md section 4): a batch that
makes messages ready in a partition, or changes entity records, announces it when it commits (one
notification per partition and transaction, none on a rollback), and the store's change feed hands
other stores' announcements to its sink, skips its own, and listens again after its connection is
lost or the database restarted.

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own
in this module's database (notification channels are per schema).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from pg_server import PgServer, find_bin_dir
from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.store.port import (
    Activate,
    Append,
    Claim,
    Claimed,
    EntityRecord,
    Outcome,
    PartitionRef,
    PutEntity,
    Settle,
    SettleItem,
)
from sodalite.store.postgres import PostgresStore, channel_name
from store.pg_rows import record

Q = PartitionRef("orders", 0)
Q1 = PartitionRef("orders", 1)
DLQ = PartitionRef("orders/$deadletterqueue", 0)
WAIT = 30.0  # a generous bound for anything asynchronous


class Listener:
    """A plain psycopg session LISTENing on the schema's channel, as another node would."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        row = self.conn.execute("SELECT current_schema()").fetchone()
        assert row is not None
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(str(row[0])))))

    def payloads(self, seconds: float = 1.0) -> list[str]:
        """Every notification that arrives within ``seconds``."""
        return [n.payload for n in self.conn.notifies(timeout=seconds)]

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def listener(url: str) -> Iterator[Listener]:
    one = Listener(url)
    yield one
    one.close()


def _ready(payloads: list[str]) -> list[tuple[int, str]]:
    """(partition, entity) of each message-ready payload ("r <origin> <partition> <entity>")."""
    out = []
    for payload in payloads:
        kind, _, partition, entity = payload.split(" ", 3)
        assert kind == "r"
        out.append((int(partition), entity))
    return out


def test_a_committed_append_sends_one_notification_naming_its_partition(
        store: PostgresStore, listener: Listener) -> None:
    # two appends to one partition in one batch, 150 messages: still one notification for it
    store.apply([Append(tuple(record() for _ in range(100)), ref=Q), Append(tuple(record() for _ in range(50)), ref=Q)])
    assert _ready(listener.payloads()) == [(0, "orders")]
    # another partition in the same batch gets its own
    store.apply([Append((record(),), ref=Q), Append((record(),), ref=Q1)])
    assert sorted(_ready(listener.payloads())) == [(0, "orders"), (1, "orders")]
    # the notification carries the store's origin, so its own node can skip it
    store.apply([Append((record(),), ref=Q)])
    (payload,) = listener.payloads()
    assert payload.split(" ")[1] == store.origin


def test_a_rolled_back_batch_sends_none(store: PostgresStore, listener: Listener) -> None:
    store.apply([Append((record(),), ref=Q)])
    assert len(listener.payloads()) == 1
    # a value that does not fit 64 bits fails the whole batch: it rolls back
    with pytest.raises(StoreUnavailable):
        store.apply([Append((record(),), ref=Q), PutEntity(EntityRecord("orders", "queue", {})),
                     Append((record(enqueued_time=2**63),), ref=Q)])
    assert listener.payloads() == []
    assert store.counts(Q).active == 1  # nothing of it was stored either


def test_only_batches_that_make_messages_ready_announce_them(store: PostgresStore, listener: Listener) -> None:
    now = 10_000
    store.apply([Append((record(state=MessageState.SCHEDULED, scheduled_enqueue_time=now),), ref=Q)])
    assert listener.payloads() == []  # a scheduled message is not ready
    store.apply([Activate(now, 10, ref=Q)])
    assert _ready(listener.payloads()) == [(0, "orders")]
    store.apply([Append((record(), record(), record()), ref=Q,)])
    listener.payloads()
    tokens = tuple(uuid.uuid4() for _ in range(4))
    (claimed,) = store.apply([Claim(now, now + 60_000, "node", tokens, ref=Q)])
    assert isinstance(claimed, Claimed) and len(claimed.messages) == 4
    assert listener.payloads() == []  # a claim makes nothing ready
    first, second, third, fourth = claimed.messages
    store.apply([Settle(now, (SettleItem(first.record.sequence_number, first.lock_token or tokens[0],
                                            Outcome.COMPLETE),), ref=Q)])
    assert listener.payloads() == []  # neither does a complete
    store.apply([Settle(now, (SettleItem(second.record.sequence_number, second.lock_token or tokens[1],
                                            Outcome.ABANDON),), ref=Q)])
    assert _ready(listener.payloads()) == [(0, "orders")]
    store.apply([Settle(now, (SettleItem(third.record.sequence_number, third.lock_token or tokens[2],
                                            Outcome.DEAD_LETTER, target=DLQ),), ref=Q)])
    assert _ready(listener.payloads()) == [(0, "orders/$deadletterqueue")]
    store.apply([Settle(now, (SettleItem(fourth.record.sequence_number, fourth.lock_token or tokens[3],
                                            Outcome.RELEASE),), ref=Q)])
    assert _ready(listener.payloads()) == [(0, "orders")]
    store.apply([PutEntity(EntityRecord("orders", "queue", {}))])
    (payload,) = listener.payloads()
    assert payload == f"e {store.origin}"


class Sink:
    """Records what a change feed hands on (called on the feed's thread)."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self.changed = threading.Condition()

    def _add(self, call: object) -> None:
        with self.changed:
            self.calls.append(call)
            self.changed.notify_all()

    def ready(self, ref: PartitionRef) -> None:
        self._add(ref)

    def entities_changed(self) -> None:
        self._add("entities")

    def resynced(self) -> None:
        self._add("resynced")

    def wait_for(self, check: Callable[[list[object]], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: check(self.calls), timeout=WAIT), f"{what}: got {self.calls}"


def test_the_feed_hands_on_other_stores_announcements_and_skips_its_own(url: str, store: PostgresStore) -> None:
    other = PostgresStore(url)
    other.open()
    feed = store.change_feed()
    sink = Sink()
    feed.start(sink)
    try:
        sink.wait_for(lambda calls: "resynced" in calls, "the feed never connected")
        assert feed.live
        store.apply([Append((record(),), ref=Q), PutEntity(EntityRecord("mine", "queue", {}))])  # its own store
        other.apply([Append((record(),), ref=Q1)])
        other.apply([PutEntity(EntityRecord("theirs", "queue", {}))])
        sink.wait_for(lambda calls: "entities" in calls, "the other store's entity change never came")
        # The own store's batch committed first: had it been handed on, it would be here by now.
        assert sink.calls == ["resynced", PartitionRef("orders", 1), "entities"]
    finally:
        feed.stop()
        other.close()
    assert not feed.live


def _terminate_listener(url: str, application_name: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE application_name = %s", (application_name,)).fetchone()
    assert row is not None
    return int(row[0])


def test_the_feed_listens_again_after_its_connection_is_killed(url: str, store: PostgresStore) -> None:
    other = PostgresStore(url)
    other.open()
    name = f"listen-{uuid.uuid4().hex[:8]}"
    feed = store.change_feed(application_name=name)
    sink = Sink()
    feed.start(sink)
    try:
        sink.wait_for(lambda calls: calls.count("resynced") == 1, "the feed never connected")
        assert _terminate_listener(url, name) == 1
        # it reconnects and says so: what was committed meanwhile was never announced
        sink.wait_for(lambda calls: calls.count("resynced") == 2, "the feed did not reconnect")
        other.apply([Append((record(),), ref=Q)])
        sink.wait_for(lambda calls: PartitionRef("orders", 0) in calls, "no notification after reconnecting")
    finally:
        feed.stop()
        other.close()


def test_the_feed_listens_again_after_the_database_restarts(tmp_path: object) -> None:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed")
    own = PgServer(bin_dir).start()
    try:
        url = own.create_database("restart")
        store, other = PostgresStore(url), PostgresStore(url)
        store.open()
        other.open()
        feed = store.change_feed()
        sink = Sink()
        feed.start(sink)
        try:
            sink.wait_for(lambda calls: calls.count("resynced") == 1, "the feed never connected")
            own.halt()
            deadline = time.monotonic() + WAIT
            while feed.live and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not feed.live  # it noticed the database went away
            own.resume()
            sink.wait_for(lambda calls: calls.count("resynced") == 2, "the feed did not reconnect")
            # the stores' pooled connections died with the server; a retry gets a new one
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    other.apply([Append((record(),), ref=Q)])
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            sink.wait_for(lambda calls: PartitionRef("orders", 0) in calls, "no notification after the restart")
        finally:
            feed.stop()
            store.close()
            other.close()
    finally:
        own.stop()


def test_the_store_worker_wakes_its_watchers_on_the_loop(url: str) -> None:
    """The server's side (server/store_worker.py): another store's commits reach a watching partition
    and the entity follow on the event loop; the fallback poll is slow only while the feed is live."""
    import asyncio

    from sodalite.server.store_worker import NOTIFIED_POLL_SECONDS, SHARED_POLL_SECONDS, StoreWorker

    async def run() -> None:
        mine, other = PostgresStore(url), PostgresStore(url)
        other.open()
        worker = StoreWorker(mine, "default")
        worker.shared = True
        worker.feed = mine.change_feed()
        loop = asyncio.get_running_loop()
        woken: asyncio.Queue[str] = asyncio.Queue()

        def on_loop(what: str) -> None:
            assert asyncio.get_running_loop() is loop  # handed over to the loop, not run on the feed's thread
            woken.put_nowait(what)

        worker.on_entities_changed = lambda: on_loop("entities")
        unwatch = worker.watch(PartitionRef("Orders", 0), lambda: on_loop("orders"))  # paths fold case
        worker.watch(PartitionRef("elsewhere", 0), lambda: on_loop("elsewhere"))
        await worker.open()
        try:
            # connecting wakes everyone once (what happened before was never announced)
            assert sorted([await asyncio.wait_for(woken.get(), WAIT) for _ in range(3)]) == \
                ["elsewhere", "entities", "orders"]
            assert worker.poll_seconds == NOTIFIED_POLL_SECONDS
            other.apply([Append((record(),), ref=Q)])
            assert await asyncio.wait_for(woken.get(), WAIT) == "orders"
            other.apply([PutEntity(EntityRecord("made", "queue", {}))])
            assert await asyncio.wait_for(woken.get(), WAIT) == "entities"
            unwatch()
            other.apply([Append((record(),), ref=Q), Append((record(),), ref=PartitionRef("elsewhere", 0))])
            assert await asyncio.wait_for(woken.get(), WAIT) == "elsewhere"  # no longer "orders"
            await loop.run_in_executor(None, worker.feed.stop)
            assert worker.poll_seconds == SHARED_POLL_SECONDS  # no feed listening: poll fast again
            assert woken.empty()
        finally:
            await worker.close()
            other.close()

    asyncio.run(run())
