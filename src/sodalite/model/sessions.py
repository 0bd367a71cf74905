"""Session locks and session state for a session-enabled entity. Pure and clock-free.

Theory of operation: a receiver that accepts a session holds its lock; while it does, no other
receiver gets that session, so messages of a session are processed one at a time and in order
(transfers-locks-settlement seed). The lock lasts the entity's lock duration and is renewed by
the holder; once it expires the holder has lost the session (the SDK's SessionLockLostError) and
the session is free again. Locks are volatile, as message locks are; session state is durable
and the caller stores every change. Time is always an argument (ms since the epoch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sodalite.errors import SessionCannotBeLocked, SessionLockLost


@dataclass(slots=True)
class SessionLock:
    session_id: str
    owner: Any
    locked_until: int


class SessionRegistry:
    def __init__(self, states: dict[str, tuple[bytes, int]] | None = None) -> None:
        self.locks: dict[str, SessionLock] = {}
        self.states: dict[str, tuple[bytes, int]] = dict(states or {})  # id -> (state, updated at)

    def holder(self, session_id: str, now: int) -> SessionLock | None:
        lock = self.locks.get(session_id)
        return lock if lock is not None and lock.locked_until > now else None

    def lock(self, session_id: str, owner: Any, now: int, duration: int) -> SessionLock:
        held = self.holder(session_id, now)
        if held is not None and held.owner is not owner:
            raise SessionCannotBeLocked(f"the session '{session_id}' is locked by another receiver")
        lock = SessionLock(session_id, owner, now + duration)
        self.locks[session_id] = lock
        return lock

    def check(self, session_id: str, owner: Any, now: int) -> SessionLock:
        """The holder's live lock, or SessionLockLost."""
        lock = self.holder(session_id, now)
        if lock is None or (owner is not None and lock.owner is not owner):
            raise SessionLockLost(f"the lock on session '{session_id}' is lost")
        return lock

    def renew(self, session_id: str, owner: Any, now: int, duration: int) -> int:
        lock = self.check(session_id, owner, now)
        lock.locked_until = now + duration
        return lock.locked_until

    def release(self, owner: Any) -> list[str]:
        """The owner went away: free its sessions."""
        gone = [sid for sid, lock in self.locks.items() if lock.owner is owner]
        for sid in gone:
            del self.locks[sid]
        return gone

    def expire(self, now: int) -> list[SessionLock]:
        """Locks past their time: removed and returned, so their holders can be told."""
        expired = [lock for lock in self.locks.values() if lock.locked_until <= now]
        for lock in expired:
            del self.locks[lock.session_id]
        return expired

    def next_expiry(self) -> int | None:
        return min((lock.locked_until for lock in self.locks.values()), default=None)

    def is_free(self, session_id: str, now: int) -> bool:
        return self.holder(session_id, now) is None

    def get_state(self, session_id: str) -> bytes | None:
        entry = self.states.get(session_id)
        return entry[0] if entry is not None else None

    def set_state(self, session_id: str, state: bytes | None, now: int) -> None:
        if state is None:
            self.states.pop(session_id, None)
        else:
            self.states[session_id] = (state, now)

    def sessions_with_state(self, updated_after: int | None = None) -> list[str]:
        return sorted(sid for sid, (_, at) in self.states.items() if updated_after is None or at > updated_after)
