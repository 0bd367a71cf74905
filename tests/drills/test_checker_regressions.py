"""The fault checker's regression scripts (docs/reliability.md): each failure the checker found, and each
known defect it must catch, kept as a deterministic script (tests/checker/script.py) replayed against a
fresh broker and checked with the sweep's promise checks, strictly.

- The known defects re-enabled by the test-only ``SODALITE_TEST_DEFECT`` switches are caught (the proof
  that the checker can fail).
- The scripts minimized from the sweep's findings (and the defects known when the checker was built:
  SizeInBytes after a move, a resubmit or a dead-letter; connections that never authenticate locking
  out a client with a key) pass: each failed before its fix. A defect found and not yet fixed is marked
  xfail(strict=True) with its reason, so its fix turns the mark into a failure to remove.
"""

from __future__ import annotations

import os

import pytest
from sdk_builds import GO, ensure_built

from checker.runner import HAS_TRACE, PARTITIONED, PLAIN, SESSIONS, TARGET
from checker.script import play
from pg_server import find_bin_dir

pytestmark = pytest.mark.interop


def _promises(violations: list[object]) -> set[str]:
    return {v.promise for v in violations}  # type: ignore[attr-defined]


def test_the_checker_catches_a_send_acknowledged_before_its_commit() -> None:
    _history, violations = play([("send", PLAIN, 8)], defect="ack-before-commit")
    assert "durable" in _promises(violations), violations


def test_the_checker_catches_a_complete_acknowledged_but_not_committed() -> None:
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "complete"),
                                 ("wait", 5.5), ("receive", PLAIN, "peeklock", 3, "complete")],
                                defect="complete-not-committed")
    assert "peeklock" in _promises(violations), violations


def test_kill9_with_messages_locked_keeps_every_promise() -> None:
    """Locked, then the broker killed: each message comes back once, its delivery count one higher."""
    _history, violations = play([("send", PLAIN, 5), ("receive", PLAIN, "peeklock", 5, "leave"), ("kill9",),
                                 ("recount", "after a restart"), ("wait", 5.5),
                                 ("receive", PLAIN, "peeklock", 5, "abandon"),
                                 ("receive", PLAIN, "peeklock", 5, "complete")])
    assert violations == []


def test_size_in_bytes_after_a_move_equals_the_store() -> None:
    """Minimized from the sweep (seed 1): dead-letter, move the dead-letter queue to another queue, recount."""
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "deadletter"),
                                 ("move", PLAIN, TARGET), ("recount", "after the move")])
    assert violations == []


def test_size_in_bytes_after_a_resubmit_equals_the_store() -> None:
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "deadletter"),
                                 ("move", PLAIN, None), ("recount", "after the resubmit")])
    assert violations == []


def test_size_in_bytes_after_a_dead_letter_equals_the_store() -> None:
    """Minimized from the sweep (seed 7, no faults): a PeekLock dead-letter, then a quiescent recount."""
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "deadletter"),
                                 ("recount", "after the dead-letter")])
    assert violations == []


def test_counts_after_a_dead_letter_purge_equal_the_store() -> None:
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "deadletter"),
                                 ("purge", PLAIN), ("recount", "after the purge")])
    assert violations == []


@pytest.mark.skipif(not HAS_TRACE, reason="needs the broker's test-only delivery trace (serve --delivery-trace)")
def test_a_receive_and_delete_receiver_closed_mid_stream_loses_nothing() -> None:
    """Counted against the broker's delivery trace: every message is received, stored, or written."""
    history, violations = play([("batch", PLAIN, 30, {"size": 4096}), ("batch", PLAIN, 30, {"size": 4096}),
                                ("midstream", PLAIN, 50)])
    assert [op.result for op in history.ops if op.kind in ("send", "receive")] == ["ok", "ok", "ok"]
    assert violations == []


def test_connections_that_never_authenticate_do_not_lock_out_a_client_with_a_key() -> None:
    """The checker's "unauthenticated" fault at its worst: connections held open without a token, then a
    client with the Root key sends; its send must be acknowledged."""
    # The wait outlasts the broker's one second before the longest-waiting unauthenticated connection
    # gives way, counted from when the broker took each connection (later than the client's open on a
    # busy machine): 1 s was too short under load.
    history, violations = play([("unauthenticated", 30), ("opened-unauthenticated", 30), ("wait", 3),
                                ("send", PLAIN, 1)], broker_args=("--max-connections", "20"))
    sends = [op for op in history.ops if op.kind == "send"]
    assert [op.result for op in sends] == ["ok"], [op.error for op in sends]
    assert violations == []


def test_a_link_detached_under_settlements_keeps_every_promise() -> None:
    """The checker's "detach" fault at a named point: a PeekLock message received, its link detached (the
    connection stays), then completed (the SDK reports it did not happen); the message comes back after its
    lock lapses, its delivery count one higher."""
    history, violations = play([("send", PLAIN, 2), ("detach", PLAIN, "complete"), ("wait", 5.5),
                                ("receive", PLAIN, "peeklock", 2, "complete")])
    counts = [d.count for op in history.ops if op.kind == "receive" for d in op.deliveries]
    assert sorted(counts) == [0, 0, 1], counts
    assert violations == []


def test_an_entity_update_mid_run_keeps_the_counts_true() -> None:
    """The checker's "entity-update" fault: MaxDeliveryCount lowered under abandoned messages, which are then
    dead-lettered on their next abandon; the counts equal the store's."""
    _history, violations = play([("send", PLAIN, 3), ("receive", PLAIN, "peeklock", 3, "abandon"),
                                 ("update", PLAIN, {"MaxDeliveryCount": 2}),
                                 ("receive", PLAIN, "peeklock", 3, "abandon"), ("recount", "after the update")])
    assert violations == []


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the small filesystem for the data directory needs root")
def test_a_full_disk_refuses_sends_and_keeps_the_counts_true() -> None:
    """The checker's "disk-full" fault at named points: sends refused while the data directory's filesystem
    is full, accepted again once it is freed; every acknowledged send is stored, the counts are true."""
    # Freed space is found by the store's maintenance pass, a second after the last refusal at most
    # (server/store_worker.py, MAINTENANCE_DELAY): a send at once after the free may still be refused.
    history, violations = play([("send", PARTITIONED, 2), ("disk-full",), ("send", PARTITIONED, 3, {"size": 100000}),
                                ("disk-free",), ("wait", 1.5), ("send", PARTITIONED, 2),
                                ("recount", "after the disk was freed")], disk=True)
    results = [op.result for op in history.ops if op.kind == "send"]
    assert results[:2] == ["ok", "ok"] and results[-2:] == ["ok", "ok"] and "info" in results[2:5], results
    assert violations == []


@pytest.mark.skipif(find_bin_dir() is None, reason="PostgreSQL is not installed")
def test_a_session_state_set_through_one_node_is_read_through_the_other() -> None:
    """Minimized from the sweep (seeds 2037, 2056, 2064 and 2101, two nodes on PostgreSQL): a session's
    state set through the first node, then the session accepted through the second, whose read of the state
    came from what its core had loaded when it started serving the queue (None)."""
    history, violations = play([("send", SESSIONS, 1, {"session": "s1"}),
                                ("session", SESSIONS, "s1", 0, "v1", {"node": "a"}),
                                ("session", SESSIONS, "s1", 1, None)], pg=True)
    gets = [op.value for op in history.ops if op.kind == "session_get"]
    assert gets == [None, "v1"], gets
    assert violations == []


def test_a_go_complete_refused_while_the_store_is_offline_is_not_reported_done() -> None:
    """Minimized from the sweep (seeds 2104 and 2128, the official Go SDK): a message received, the store
    taken offline, then completed. The broker rejected the complete as server-busy; the Go SDK took the
    rejection as the delivery's settlement, retried the complete (server-busy is retryable) as a no-op, and
    reported success; the message came back when its lock lapsed. Now the broker holds the outcome back and
    carries the complete out again until the store is back (or answers lock lost once the lock has lapsed)."""
    try:
        ensure_built(GO)
    except Exception as exc:
        pytest.skip(f"no Go SDK build: {exc}")
    history, violations = play([("send", PLAIN, 1), ("go", PLAIN, 1, "complete", 2.0), ("wait", 5.5),
                                ("receive", PLAIN, "peeklock", 1, "complete")])
    assert "peeklock" not in _promises(violations), violations
    completes = [op.result for op in history.ops if op.kind == "complete"]
    assert completes[:1] == ["ok"], completes  # the store came back within the lock: completed for real
    assert violations == []


@pytest.mark.parametrize(("queue", "pg"), [
    (PLAIN, False), (PARTITIONED, False),
    pytest.param(PARTITIONED, True, marks=pytest.mark.skipif(find_bin_dir() is None,
                                                             reason="PostgreSQL is not installed"))])
def test_an_abandon_raises_the_count_across_a_receive_and_delete_transfer_never_written(queue: str, pg: bool) -> None:
    """Reduced from the sweep (seed 2004 on SQLite; seeds 1004 and 5004 on two PostgreSQL nodes): a message
    abandoned, then taken for a ReceiveAndDelete link whose transfer was never written (the link detached
    first), and put back; its next PeekLock delivery showed the count from before the abandon. The link put
    it back with the record as the receiver would have been shown it (the claim's count already taken off),
    and the core took the claim's count off again."""
    history, violations = play([("send", queue, 1), ("receive", queue, "peeklock", 1, "abandon"),
                                ("unwritten", queue, 1), ("receive", queue, "peeklock", 1, "complete")], pg=pg)
    if HAS_TRACE:  # the named point: the message was taken for the link, and put back unwritten
        assert [t["event"] for t in history.trace or [] if "sequence_number" in t] == ["restored"], history.trace
    counts = [d.count for op in history.ops if op.kind == "receive" for d in op.deliveries]
    assert counts == [0, 1], counts
    assert violations == []


@pytest.mark.skipif(find_bin_dir() is None, reason="PostgreSQL is not installed")
def test_a_receive_and_delete_take_on_a_node_whose_window_is_older_keeps_the_count() -> None:
    """Reduced from the sweep (seed 8003, two PostgreSQL nodes: a count read 0, 0 around an abandon, the
    message put back between the reads): a node takes a message for a ReceiveAndDelete link as its window
    holds it, while the other node has since delivered and abandoned it; the link goes before the transfer
    is written, and the message was put back with the count that node's window held. The delivery (and so
    the put-back) now carries the row as the store's claim counted it."""
    history, violations = play([("send", PLAIN, 1),
                                ("receive", PLAIN, "peeklock", 1, "abandon"),  # node-b: its window holds it
                                ("via-a", ("receive", PLAIN, "peeklock", 1, "abandon")),  # node-a: b's copy is older
                                ("unwritten", PLAIN, 1),  # node-b takes it as its window holds it, puts it back
                                ("receive", PLAIN, "peeklock", 1, "complete")], pg=True)
    if HAS_TRACE:
        assert [t["event"] for t in history.trace or [] if "sequence_number" in t] == ["restored"], history.trace
    counts = [d.count for op in history.ops if op.kind == "receive" for d in op.deliveries]
    assert counts == [0, 1, 2], counts
    assert violations == []
