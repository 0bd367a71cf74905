"""A receiver link as a core actor sees one, for the unit and store tests that attach receivers to
actors without an AMQP connection.

It takes what it is given, up to the credit it holds (``link_credit``, which a test may raise as a
flow would), and keeps each record with its lock (``got``; ``records`` the records alone, ``locks``
the locks alone). PeekLock by default (every delivery then carries a lock); ``peek_lock=False`` for
ReceiveAndDelete, ``session_id`` for a receiver that holds a session. A test asks it to drain by
setting ``drain``: once the actor has drained it, its credit is spent and ``was_drained`` counts up.
With no credit it is an attached receiver that is given nothing, which keeps its entity in use.
Shared by the console, JSON API, actor, lifecycle and dead-letter relay unit tests and the
idle-nodes store test.
"""

from __future__ import annotations

from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock
from sodalite.server.entity_settings import SubQueue


class Taker:
    """A receiver that takes what it is given, up to its credit."""

    sub_queue, reserved = SubQueue.MAIN, 0

    def __init__(self, credit: int, *, peek_lock: bool = True, session_id: str | None = None) -> None:
        self.link_credit = credit
        self.peek_lock = peek_lock
        self.session_id = session_id
        self.drain = False
        self.was_drained = 0
        self.got: list[tuple[MessageRecord, Lock | None]] = []

    @property
    def records(self) -> list[MessageRecord]:
        return [record for record, _ in self.got]

    @property
    def locks(self) -> list[Lock]:
        return [lock for _, lock in self.got if lock is not None]

    def credit(self) -> int:
        return self.link_credit

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        assert self.link_credit > 0, "delivered beyond the link's credit"
        assert lock is not None or not self.peek_lock, "a PeekLock delivery without a lock"
        self.link_credit -= 1
        self.got.append((record, lock))

    def drain_requested(self) -> bool:
        return self.drain and self.link_credit > 0

    def drained(self) -> None:
        self.link_credit = 0
        self.drain = False
        self.was_drained += 1

    def session_lost(self) -> None:
        pass
