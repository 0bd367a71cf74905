"""Cancelling scheduled messages on a PostgreSQL store other nodes write too: all or none, decided in
one statement. While another node's transaction activates or cancels one of the rows named, the
cancel waits for it and then judges the row as that transaction left it: committed, the row is no
longer a scheduled message, so the cancel changes nothing and names it; rolled back, every row is
cancelled. The other node is a plain connection holding its transaction open (what a node's
``Activate`` or cancel does between its statement and its COMMIT).

A real server is started by this process (``tests/pg_server.py``); each test has a schema of its own.
"""

from __future__ import annotations

import threading
import time

import psycopg

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, Appended, CancelScheduled, OpResult, PartitionRef, Unscheduled
from sodalite.store.postgres import PostgresStore
from store.pg_rows import record

Q = PartitionRef("orders", 0)
NOW = 1_000_000
LATER = NOW + 3_600_000


def _scheduled() -> MessageRecord:
    return record(enqueued_time=NOW, scheduled_enqueue_time=LATER, state=MessageState.SCHEDULED, annotations=b"",
                  annotation_count=0)


def _cancel_while_another_node_holds(url: str, change: str, commit: bool) -> tuple[OpResult, list[int], list[int]]:
    """Schedule two messages; another connection runs ``change`` on the first and holds its
    transaction while this store cancels both; then it commits or rolls back. Returns the cancel's
    result, the numbers, and the numbers still stored."""
    store = PostgresStore(url, application_name="cancelling-node")
    store.open()
    try:
        (appended,) = store.apply([Append((_scheduled(), _scheduled()), ref=Q)])
        assert isinstance(appended, Appended)
        first, second = appended.sequence_numbers
        results: list[OpResult] = []
        with psycopg.connect(url) as other, psycopg.connect(url, autocommit=True) as watcher:
            other.execute(change, (first,))  # its transaction stays open: the row is locked by it
            batch = [CancelScheduled(NOW, (first, second), ref=Q)]
            cancel = threading.Thread(target=lambda: results.extend(store.apply(batch)))
            cancel.start()
            deadline = time.monotonic() + 30
            while watcher.execute(  # the cancel's statement waits for the other node's row lock
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cancelling-node' "
                    "AND wait_event_type = 'Lock'").fetchone() != (1,):
                assert time.monotonic() < deadline, "the cancel never waited for the other transaction"
                time.sleep(0.05)
            assert results == []
            if commit:
                other.commit()
            else:
                other.rollback()
            cancel.join(30)
            assert not cancel.is_alive()
        left = sorted(s.record.sequence_number for s in store.peek(Q, 0, 10))
        return results[0], [first, second], left
    finally:
        store.close()


_ACTIVATE = "UPDATE sodalite_messages SET state = 0 WHERE partition = 0 AND sequence_number = %s"
_CANCEL = "DELETE FROM sodalite_messages WHERE partition = 0 AND sequence_number = %s"


def test_a_row_another_node_activates_meanwhile_makes_the_cancel_change_nothing(url: str) -> None:
    result, (first, second), left = _cancel_while_another_node_holds(url, _ACTIVATE, commit=True)
    assert result == Unscheduled((first,))
    assert left == [first, second]  # the second stays scheduled: all or none


def test_a_row_another_node_cancels_meanwhile_makes_the_cancel_change_nothing(url: str) -> None:
    result, (first, second), left = _cancel_while_another_node_holds(url, _CANCEL, commit=True)
    assert result == Unscheduled((first,))
    assert left == [second]


def test_when_the_other_node_rolls_back_the_cancel_takes_every_row(url: str) -> None:
    result, _, left = _cancel_while_another_node_holds(url, _ACTIVATE, commit=False)
    assert result == Unscheduled(())
    assert left == []
