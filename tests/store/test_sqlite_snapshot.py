"""A SQLite store's backup snapshot (``SqliteStore.snapshot``, used by ``server/backup.py``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, PartitionRef, Snapshots
from sodalite.store.sqlite import SqliteStore

REF = PartitionRef("orders", 0)


def _records(n: int, size: int = 100) -> tuple[MessageRecord, ...]:
    return tuple(MessageRecord(0, 1_750_000_000_000, f"m{i}", None, None, None, None, None, 0, MessageState.ACTIVE,
                               True, None, b"", 0, b"x" * size) for i in range(n))


def test_the_copy_is_the_store_as_it_was_at_the_snapshot(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "messages.db")
    store.open()
    assert isinstance(store, Snapshots)
    store.apply([Append(_records(10), ref=REF)])
    snapshot = store.snapshot()
    store.apply([Append(_records(5), ref=REF)])  # after the snapshot: the store goes on committing
    snapshot.copy_to(str(tmp_path / "copy.db"))
    snapshot.close()
    assert store.counts(REF).active == 15
    copy = SqliteStore(tmp_path / "copy.db")
    copy.open()
    assert copy.counts(REF).active == 10
    assert copy.counts(REF).last_sequence_number == 10
    copy.close()
    store.close()


def test_housekeeping_does_not_wait_for_a_snapshot_being_copied(tmp_path: Path) -> None:
    """The WAL checkpoint between batches must not wait for the backup's reader (it would hold the
    store's thread, and every commit behind it, for the whole copy)."""
    store = SqliteStore(tmp_path / "messages.db", busy_timeout_ms=3000)
    store.open()
    store.apply([Append(_records(2000, 1000), ref=REF)])
    snapshot = store.snapshot()
    store.apply([Append(_records(100, 1000), ref=REF)])  # the WAL has frames the reader's snapshot does not
    began = time.monotonic()
    store.maintain()
    took = time.monotonic() - began
    copied = threading.Thread(target=snapshot.copy_to, args=(str(tmp_path / "copy.db"),))
    copied.start()
    copied.join(30)
    snapshot.close()
    assert took < 1.0, f"maintain() waited {took:.1f} s for the snapshot's reader"
    store.maintain()  # with the snapshot closed, the full checkpoint works again
    assert (tmp_path / "messages.db-wal").stat().st_size == 0
    store.close()
