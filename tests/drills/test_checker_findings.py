"""The sweep's saved findings (tests/checker/findings/*.json.gz), each judged: a broker defect (fixed, and
pinned by a script in test_checker_regressions.py) or a promise the checker read wrongly (fixed in
tests/checker/promises.py, and pinned here by the saved history and by the smallest history that shows
it, pure data checked by the same checks, no broker)."""

from __future__ import annotations

import gzip
from pathlib import Path

from checker.history import INFO, OK, History, Op
from checker.promises import check_all, check_durable

FINDINGS = Path(__file__).resolve().parents[1] / "checker" / "findings"


def _saved(seed: int) -> History:
    return History.loads(gzip.decompress((FINDINGS / f"seed-{seed}-history.json.gz").read_bytes()).decode())


def _promises(history: History) -> set[str]:
    partitioned = frozenset(op.queue for op in history.ops if op.queue.startswith("part-"))
    return {v.promise for v in check_all(history, partitioned=partitioned)}


def _crash_during_a_receive_and_delete(crash_inside: bool) -> History:
    """An acknowledged send, then a ReceiveAndDelete receive (credit 5) that raised: the broker was killed
    (inside it, or after it) before it wrote any transfer; the message is gone and the trace has no line."""
    history = History(seed=1, trace=[])
    history.add(Op(0, 0, "send", "q", start=0.0, end=1.0, result=OK, uids=("u1",)))
    history.add(Op(0, 1, "receive", "q", start=1.5, end=3.0, result=INFO, value={"mode": "rad", "credit": 5}))
    at = 2.0 if crash_inside else 4.0
    history.add(Op(0, -1, "fault", start=at, end=at, result=OK, value="kill9"))
    return history


def test_a_receive_and_delete_receive_under_way_at_a_kill9_may_lose_its_credit() -> None:
    """Seed 2030 (a partitioned queue on SQLite): a send acknowledged just before kill -9, its message taken
    by a ReceiveAndDelete receiver that was waiting with credit, deleted, and the broker killed before the
    transfer was written. The promise allows it (a crash may lose the transfers in flight, at most the
    link's credit); the checker excused only what the trace named, and a message taken and not yet written
    has no trace line."""
    assert "durable" not in _promises(_saved(2030))
    assert check_durable(_crash_during_a_receive_and_delete(crash_inside=True)) == []


def test_a_message_lost_with_no_receive_under_way_at_the_crash_is_still_caught() -> None:
    violations = check_durable(_crash_during_a_receive_and_delete(crash_inside=False))
    assert [v.promise for v in violations] == ["durable"], violations


def test_a_scheduled_message_whose_cancel_raised_at_a_kill9_may_be_gone() -> None:
    """Seed 9286 (SQLite): a message scheduled, its cancel sent 37 ms before a kill -9; the SDK's call raised
    (its retry could not connect), and the message was neither delivered nor stored. The cancel may have
    committed before the crash took its reply: a call that raised is indeterminate, as Jepsen's :info, and
    the check counted only cancels that returned. Judged a misreading; the saved history is clean now."""
    assert "durable" not in _promises(_saved(9286))
