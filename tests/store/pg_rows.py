"""What the PostgreSQL store tests write and read: a message record to append, and one number from
a query (a table's size, a count). The fixtures that open the database are in conftest.py. Imported
as ``store.pg_rows`` (``tests`` is on the pytest path, as for ``pg_server``).
"""

from __future__ import annotations

import psycopg

from sodalite.model.message import MessageRecord, MessageState


def record(**changes: object) -> MessageRecord:
    """An active message with a body and one annotation, numbered by the store; ``changes`` replace fields."""
    fields: dict[str, object] = dict(
        sequence_number=0, enqueued_time=1_000, message_id="m", session_id=None, partition_key=None,
        time_to_live=None, expires_at=None, scheduled_enqueue_time=None, delivery_count=0,
        state=MessageState.ACTIVE, durable=True, priority=None, annotations=b"ann", annotation_count=1,
        tail=b"body")
    fields.update(changes)
    return MessageRecord(**fields)  # type: ignore[arg-type]


def one(conn: psycopg.Connection[tuple[object, ...]], sql: str) -> int:
    """The integer a query of one row and one column returns."""
    row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]
