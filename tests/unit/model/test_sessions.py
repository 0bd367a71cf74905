"""Session locks and state (pure), and a session partition's per-session order under random use."""

from __future__ import annotations

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sodalite.errors import SessionCannotBeLocked, SessionLockLost
from sodalite.model.partition import MessageDraft, Partition
from sodalite.model.sessions import SessionRegistry

T0 = 1_700_000_000_000
LOCK = 10_000


def test_one_holder_per_session_until_it_expires() -> None:
    r = SessionRegistry()
    a, b = object(), object()
    r.lock("s", a, T0, LOCK)
    r.lock("s", a, T0 + 1, LOCK)  # the holder may lock again
    with pytest.raises(SessionCannotBeLocked):
        r.lock("s", b, T0 + 1, LOCK)
    assert r.next_expiry() == T0 + 1 + LOCK
    assert r.expire(T0 + LOCK) == []
    [gone] = r.expire(T0 + 1 + LOCK)
    assert gone.owner is a
    r.lock("s", b, T0 + 1 + LOCK, LOCK)


def test_renew_and_check_fail_once_the_lock_is_lost() -> None:
    r = SessionRegistry()
    a = object()
    r.lock("s", a, T0, LOCK)
    assert r.renew("s", a, T0 + 5_000, LOCK) == T0 + 15_000
    with pytest.raises(SessionLockLost):
        r.check("s", object(), T0 + 6_000)  # not the holder
    with pytest.raises(SessionLockLost):
        r.renew("s", a, T0 + 15_000, LOCK)  # expired at T0 + 15 000 exactly


def test_release_frees_only_the_owners_sessions() -> None:
    r = SessionRegistry()
    a, b = object(), object()
    r.lock("s1", a, T0, LOCK)
    r.lock("s2", b, T0, LOCK)
    assert r.release(a) == ["s1"]
    assert r.is_free("s1", T0) and not r.is_free("s2", T0)


def test_state_set_cleared_and_listed_by_update_time() -> None:
    r = SessionRegistry({"old": (b"x", T0)})
    r.set_state("new", b"y", T0 + 10)
    assert r.get_state("old") == b"x" and r.get_state("new") == b"y"
    assert r.sessions_with_state() == ["new", "old"]
    assert r.sessions_with_state(updated_after=T0) == ["new"]
    r.set_state("old", None, T0 + 20)
    assert r.get_state("old") is None and r.sessions_with_state() == ["new"]


# ---- a session partition under random use -------------------------------------------------------

SESSIONS = ["a", "b", "c"]


def draft(session_id: str) -> MessageDraft:
    return MessageDraft(None, session_id, None, None, None, None, None, b"", 0, b"")


class SessionPartitionMachine(RuleBasedStateMachine):
    """Each session is delivered in sequence order; counts per session equal what could be drained."""

    def __init__(self) -> None:
        super().__init__()
        counter = itertools.count(1)
        self.partition = Partition([], 0, lambda: uuid.UUID(int=next(counter)), sessions=True)
        self.pending: dict[str, list[int]] = {s: [] for s in SESSIONS}  # receivable, in order
        self.held: dict[uuid.UUID, tuple[str, int]] = {}

    @rule(session=st.sampled_from(SESSIONS), n=st.integers(1, 3))
    def send(self, session: str, n: int) -> None:
        records = self.partition.accept([draft(session) for _ in range(n)], T0, None)
        self.partition.publish(records)
        self.pending[session].extend(r.sequence_number for r in records)

    @rule(session=st.sampled_from(SESSIONS))
    def receive(self, session: str) -> None:
        taken = self.partition.lock_next(T0, LOCK, "owner", session)
        if not self.pending[session]:
            assert taken is None
            return
        assert taken is not None
        record, lock = taken
        assert record.session_id == session
        assert record.sequence_number == min(self.pending[session])  # order within the session
        self.pending[session].remove(record.sequence_number)
        self.held[lock.token] = (session, record.sequence_number)

    @precondition(lambda self: self.held)
    @rule(data=st.data(), settle=st.sampled_from(["complete", "abandon"]))
    def settle_one(self, data: st.DataObject, settle: str) -> None:
        token = data.draw(st.sampled_from(sorted(self.held)))
        session, seq = self.held.pop(token)
        if settle == "complete":
            self.partition.complete(token, T0)
        else:
            self.partition.abandon(token, T0)
            self.pending[session].append(seq)

    @invariant()
    def counts_match(self) -> None:
        for session in SESSIONS:
            assert self.partition.session_available(session) == len(self.pending[session])
        with_messages = {s for s in SESSIONS if self.pending[s]}
        assert set(self.partition.sessions_with_messages()) == with_messages
        assert self.partition.available_count == sum(len(v) for v in self.pending.values())


SessionPartitionMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestSessionPartitionMachine = SessionPartitionMachine.TestCase
