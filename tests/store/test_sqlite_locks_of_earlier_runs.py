"""A SQLite file is served by one broker process at a time: at start the broker drops the message
and session locks an earlier run left in it (store/port.py ``ServedByOneProcess``), and the
deliveries those locks counted stay counted."""

from __future__ import annotations

import uuid
from pathlib import Path

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    Append,
    Claim,
    Claimed,
    ClaimSession,
    PartitionRef,
    ServedByOneProcess,
    SessionClaimed,
)
from sodalite.store.sqlite import SqliteStore

Q = PartitionRef("queue1", 0)
T0 = 1_700_000_000_000
HOUR = 3_600_000


def _message(session_id: str | None) -> MessageRecord:
    return MessageRecord(
        sequence_number=0, enqueued_time=T0, message_id="m", session_id=session_id, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=None, delivery_count=0,
        state=MessageState.ACTIVE, durable=True, priority=None, annotations=b"", annotation_count=0, tail=b"")


def test_locks_left_by_an_earlier_run_are_dropped_and_their_deliveries_stay_counted(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "messages.db")
    store.open()
    store.apply([Append((_message(None), _message("s")), ref=Q)])
    [claimed] = store.apply([Claim(T0, T0 + HOUR, "old-run", (uuid.UUID(int=1),), sequence_numbers=(1,), ref=Q)])
    assert isinstance(claimed, Claimed) and len(claimed.messages) == 1
    assert store.apply([ClaimSession(T0, uuid.UUID(int=2), T0 + HOUR, "old-run", "s", ref=Q)]) == (SessionClaimed("s"),)
    store.close()

    store = SqliteStore(tmp_path / "messages.db")  # the next run
    store.open()
    assert isinstance(store, ServedByOneProcess)
    assert store.drop_locks_of_earlier_runs() == 2
    # Long before the old locks' time is up, the message and the session are free again.
    [again] = store.apply([Claim(T0 + 1, T0 + HOUR, "new-run", (uuid.UUID(int=3),), sequence_numbers=(1,), ref=Q)])
    assert isinstance(again, Claimed) and [r.record.delivery_count for r in again.messages] == [2]
    assert store.apply([ClaimSession(T0 + 1, uuid.UUID(int=4), T0 + HOUR, "new-run", "s", ref=Q)]) == (
        SessionClaimed("s"),)
    assert store.drop_locks_of_earlier_runs() == 2  # the new run's own locks, were it to restart now
    store.close()
