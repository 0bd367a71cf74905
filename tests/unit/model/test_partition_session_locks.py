"""Session messages ride on their session's lock (issue 13.3): the pure partition's side of it."""

from __future__ import annotations

import itertools
import uuid

import pytest

from sodalite.errors import InvalidOperation, MessageLockLost
from sodalite.model.message import MessageState, MessageUpdate
from sodalite.model.partition import MessageDraft, Partition

LOCK = 5_000
T0 = 1_700_000_000_000


def _partition() -> Partition:
    counter = itertools.count(1)
    p = Partition([], 0, lambda: uuid.UUID(int=next(counter)), sessions=True)
    drafts = [MessageDraft(f"m{i}", sid, None, None, None, None, None, b"", 0, b"\x00\x53\x75\xa0\x01x")
              for i, sid in enumerate(["a", "a", "b"])]
    p.publish(p.accept(drafts, T0, None))
    return p


def test_a_session_message_has_the_sessions_locked_until_and_no_expiry_of_its_own() -> None:
    p = _partition()
    taken = p.lock_next(T0, LOCK, "holder", "a", session_until=T0 + 9_000)
    assert taken is not None
    _, lock = taken
    assert lock.locked_until == T0 + 9_000
    assert p.next_lock_expiry() is None
    assert p.on_time(T0 + 60_000) == []  # only the session's end ends it
    with pytest.raises(InvalidOperation):
        p.renew(lock.token, T0 + 1, LOCK)


def test_extending_the_session_extends_only_its_messages() -> None:
    p = _partition()
    a = p.lock_next(T0, LOCK, "holder-a", "a", session_until=T0 + LOCK)
    b = p.lock_next(T0, LOCK, "holder-b", "b", session_until=T0 + LOCK)
    assert a is not None and b is not None
    p.extend_session("a", T0 + 20_000)
    assert (a[1].locked_until, b[1].locked_until) == (T0 + 20_000, T0 + LOCK)
    assert p.complete(a[1].token, T0 + 10_000) == a[0].sequence_number


def test_dropping_the_session_unlocks_its_messages_and_counts_the_delivery() -> None:
    p = _partition()
    a = p.lock_next(T0, LOCK, "holder", "a", session_until=T0 + LOCK)
    b = p.lock_next(T0, LOCK, "other", "b", session_until=T0 + LOCK)
    assert a is not None and b is not None
    assert p.drop_session("a") == [MessageUpdate(a[0].sequence_number, 1, MessageState.ACTIVE)]
    with pytest.raises(MessageLockLost):
        p.complete(a[1].token, T0)
    assert set(p.locks) == {b[1].token}
    again = p.lock_next(T0, LOCK, "next", "a", session_until=T0 + LOCK)
    assert again is not None and again[0].sequence_number == a[0].sequence_number


def test_a_deferred_session_message_locked_by_number_rides_on_the_session() -> None:
    p = _partition()
    taken = p.lock_next(T0, LOCK, "holder", "a", session_until=T0 + LOCK)
    assert taken is not None
    p.defer(taken[1].token, T0)
    [(_, lock)] = p.lock_deferred([taken[0].sequence_number], T0, LOCK, "conn", lambda sid: T0 + 7_000)
    assert lock.session_bound and lock.locked_until == T0 + 7_000
