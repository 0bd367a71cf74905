"""A Hypothesis state machine for a session-enabled partition core: random sends and schedules to a few sessions,
accepts by id and next available, receives in both modes, settlements, session renewals, state
changes, receivers closing, time passing and batches that commit or fail, all against the
test-only store of tests/partition_core_store.py. After every step: no message lost or doubled,
every message lock and session lock the core holds is the store's, a delivery goes only to the
holder of its session, a consumer holds at most one session, counts equal the store's; at the end,
a holder gets its session's messages in sequence order (first deliveries); at the end, every ready
message of every session can still be delivered once its session is accepted."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from partition_core_store import CoreMachine, Harness, draft
from sodalite.model.partition_core import (
    AcceptSession,
    CloseConsumer,
    CoreSettings,
    Delivered,
    Receive,
    ReceiveMode,
    RenewSessionLock,
    Reply,
    Schedule,
    Send,
    SendAccepted,
    SessionAccepted,
    SessionState,
    SessionStateSet,
    SetSessionState,
    Settle,
    SettlementDone,
    StoreAvailable,
    new_view,
)
from sodalite.model.store_ops import Outcome

LOCK = 1_000
CONSUMERS = ("r1", "r2", "r3")
SESSIONS = ("a", "b", "c")


class SessionCoreMachine(CoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, bytes | None] = {}  # the state each SessionStateSet confirmed
        self.asked_states: dict[object, tuple[str, bytes | None]] = {}
        self.ever_delivered: set[int] = set()
        self.last_first: dict[tuple[object, uuid.UUID], int] = {}  # (consumer, session lock) -> number

    def _in_order(self, reply: Delivered) -> None:
        """A holder gets its session's messages first time in sequence order (redeliveries aside)."""
        seq = reply.message.sequence_number
        first = seq not in self.ever_delivered
        self.ever_delivered.add(seq)
        held = self.harness.view.sessions.get(reply.message.session_id or "")
        if not first or held is None or held.consumer != reply.consumer:
            return
        key = (reply.consumer, held.token)
        assert self.last_first.get(key, 0) < seq, f"{seq} delivered after {self.last_first[key]}"
        self.last_first[key] = seq

    @initialize(dead_letter=st.booleans(), window=st.sampled_from([60, 1 << 20]), read_count=st.sampled_from([1, 4]),
                max_delivery=st.integers(1, 3))
    def start(self, dead_letter: bool, window: int, read_count: int, max_delivery: int) -> None:
        core = CoreSettings(lock_duration=LOCK, max_delivery_count=max_delivery, dead_letter_on_expiration=dead_letter,
                            window_bytes=window, read_count=read_count, requires_session=True, scheduled_tracked=2,
                            scheduled_poll=500)
        self.h = Harness(new_view(core, 0, token_seed=5))

    def _observe(self, replies: list[Reply]) -> None:
        h = self.harness
        for reply in replies:
            if isinstance(reply, SendAccepted):
                for seq in reply.sequence_numbers:
                    assert seq not in self.accepted
                    self.accepted.add(seq)
            elif isinstance(reply, Delivered):
                self._in_order(reply)
                seq = reply.message.sequence_number
                assert seq not in self.completed, f"{seq} delivered after it was completed"
                if reply.lock_token is None:
                    assert seq not in h.store.rows
                    self.completed.add(seq)
                else:
                    row = h.store.rows[seq]
                    assert row.lock_token == reply.lock_token and row.locked_at(h.now)
                    held = h.view.consumer_sessions.get(reply.consumer)
                    assert held == reply.message.session_id, "delivered to a receiver not holding its session"
                    self.delivered_tokens.append(reply.lock_token)
            elif isinstance(reply, SettlementDone) and reply.outcome is Outcome.COMPLETE:
                seq = next(s for s, r in h.store.gone.items() if r == "complete" and s not in self.completed)
                self.completed.add(seq)
            elif isinstance(reply, SessionAccepted):
                token, _until, _owner = h.store.session_locks[reply.session_id]
                assert h.view.sessions[reply.session_id].token == token
            elif isinstance(reply, SessionStateSet):
                self.states[reply.session_id] = self.asked_states[reply.reply_to][1]
            elif isinstance(reply, SessionState):
                assert reply.state == self.states.get(reply.session_id)

    @rule(sessions=st.lists(st.sampled_from(SESSIONS), min_size=1, max_size=3),
          ttl=st.sampled_from([None, 1, 700, 3_000]))
    def send(self, sessions: list[str], ttl: int | None) -> None:
        self._run(Send(tuple(draft(None, ttl=ttl, session=s) for s in sessions), "s"))

    @rule(session=st.sampled_from(SESSIONS), delay=st.sampled_from([0, 1, 600, 2_500]))
    def schedule(self, session: str, delay: int) -> None:
        self._run(Schedule((draft(None, scheduled=self.harness.now + delay, session=session),), "sch"))

    @rule(consumer=st.sampled_from(CONSUMERS), session=st.sampled_from([None, *SESSIONS]),
          wait=st.sampled_from([None, 0, 500, 5_000]))
    def accept(self, consumer: str, session: str | None, wait: int | None) -> None:
        h = self.harness
        self._run(Receive(consumer, 0))
        self._run(AcceptSession(consumer, session, ("accept", consumer), None if wait is None else h.now + wait))

    @rule(consumer=st.sampled_from(CONSUMERS), n=st.integers(0, 3), mode=st.sampled_from(list(ReceiveMode)))
    def receive(self, consumer: str, n: int, mode: ReceiveMode) -> None:
        self._run(Receive(consumer, n, mode))

    @rule(consumer=st.sampled_from(CONSUMERS))
    def close(self, consumer: str) -> None:
        self._run(CloseConsumer(consumer))

    @precondition(lambda self: bool(self.delivered_tokens))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle(self, data: st.DataObject, outcome: Outcome) -> None:
        self._run(Settle(data.draw(st.sampled_from(self.delivered_tokens)), outcome, "t"))

    @rule(session=st.sampled_from(SESSIONS))
    def renew_session(self, session: str) -> None:
        self._run(RenewSessionLock(session, "rn"))

    @rule(session=st.sampled_from(SESSIONS), state=st.sampled_from([None, b"x", b"y"]))
    def set_state(self, session: str, state: bytes | None) -> None:
        key = ("state", len(self.asked_states))
        self.asked_states[key] = (session, state)
        self._run(SetSessionState(session, state, key))

    # ---- invariants ----

    @invariant()
    def locks_are_the_stores(self) -> None:
        if self.h is None:
            return
        h = self.harness
        view, store = h.view, h.store
        for token, lock in view.locks.items():
            row = store.rows.get(lock.record.sequence_number)
            assert row is not None and row.lock_token == token
        for seq, row in store.rows.items():
            if row.locked_at(h.now):
                assert row.lock_token in view.locks, f"row {seq} locked by a token the core does not hold"
        for sid, held in view.sessions.items():
            assert store.session_locks[sid][0] == held.token, f"session {sid} held here but not in the store"
            assert view.consumer_sessions[held.consumer] == sid
        assert len(view.consumer_sessions) == len(set(view.consumer_sessions.values())) == len(view.sessions)

    def teardown(self) -> None:
        """Liveness: every receiver gone and time past every lock, a new receiver accepting the next
        available session again and again gets every ready, unexpired message."""
        if self.h is None:
            return
        h = self.harness
        self._run(StoreAvailable())
        for consumer in CONSUMERS:
            self._run(CloseConsumer(consumer))
        self.settle_down(LOCK)
        got: set[int] = set()
        for i in range(len(SESSIONS) + 1):
            final = f"final{i}"
            self._run(Receive(final, 10_000, ReceiveMode.PEEK_LOCK))
            self._run(AcceptSession(final, None, ("accept", final), None))
            self.carry_out_all()
            got |= {lock.record.sequence_number for lock in h.view.locks.values() if lock.consumer == final}
        ready = self.ready()
        assert ready <= got, f"stuck: {sorted(ready - got)}"


SessionCoreMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestSessionCoreMachine = SessionCoreMachine.TestCase
