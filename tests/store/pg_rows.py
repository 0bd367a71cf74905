"""What the PostgreSQL store tests write and read: a message record to append, a cycle of messages
through a partition (appended, claimed, completed), and one number from a query (a table's size, a
count). The fixtures that open the database are in conftest.py. Imported
as ``store.pg_rows`` (``tests`` is on the pytest path, as for ``pg_server``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import Append, Appended, Claim, Claimed, Outcome, PartitionRef, Settle, Settled, SettleItem
from sodalite.store.postgres import PostgresStore


def record(**changes: object) -> MessageRecord:
    """An active message with a body and one annotation, numbered by the store; ``changes`` replace fields."""
    fields: dict[str, object] = dict(
        sequence_number=0, enqueued_time=1_000, message_id="m", session_id=None, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=None, delivery_count=0,
        state=MessageState.ACTIVE, durable=True, priority=None, annotations=b"ann", annotation_count=1,
        tail=b"body")
    fields.update(changes)
    return MessageRecord(**fields)  # type: ignore[arg-type]


def cycle(store: PostgresStore, ref: PartitionRef, now: int, batch: int,
          make: Callable[[], MessageRecord] = record) -> None:
    """Append ``batch`` messages made by ``make`` to ``ref``, claim them and complete them, each step
    all of them."""
    (appended,) = store.apply([Append(tuple(make() for _ in range(batch)), ref=ref)])
    assert isinstance(appended, Appended)
    tokens = tuple(uuid.uuid4() for _ in range(batch))
    (claimed,) = store.apply([Claim(now=now, locked_until=now + 60_000, owner="t", tokens=tokens, ref=ref)])
    assert isinstance(claimed, Claimed) and len(claimed.messages) == batch
    (settled,) = store.apply([Settle(now=now, items=tuple(
        SettleItem(m.record.sequence_number, tokens[i],
                   Outcome.COMPLETE) for i, m in enumerate(claimed.messages)), ref=ref)])
    assert settled == Settled((True,) * batch)


def one(conn: psycopg.Connection[tuple[object, ...]], sql: str) -> int:
    """The integer a query of one row and one column returns."""
    row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]
