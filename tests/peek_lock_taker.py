"""A PeekLock receiver link as a partition core sees one, for the unit tests that need messages locked.

It takes what it is given, up to the credit it was created with, and keeps each record with its lock
(``got``; ``locks`` the locks alone). Shared by the console and JSON API tests that lock messages in
order to dead-letter or hold them.
"""

from __future__ import annotations

from sodalite.model.message import MessageRecord
from sodalite.model.partition import Lock
from sodalite.server.entity_settings import SubQueue


class Taker:
    """A PeekLock receiver that takes what it is given, up to its credit."""

    peek_lock, sub_queue, session_id, reserved = True, SubQueue.MAIN, None, 0

    def __init__(self, credit: int) -> None:
        self.left = credit
        self.got: list[tuple[MessageRecord, Lock]] = []

    @property
    def locks(self) -> list[Lock]:
        return [lock for _, lock in self.got]

    def credit(self) -> int:
        return self.left

    def deliver(self, record: MessageRecord, lock: Lock | None) -> None:
        assert lock is not None
        self.left -= 1
        self.got.append((record, lock))

    def drain_requested(self) -> bool:
        return False

    def drained(self) -> None:
        pass

    def session_lost(self) -> None:
        pass
