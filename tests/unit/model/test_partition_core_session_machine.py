"""A Hypothesis state machine for a session-enabled partition core: random sends and schedules to a few sessions,
accepts by id and next available, receives in both modes, deferred receives by number (by a
session's holder), complete-through, settlements, session renewals, state
changes, receivers closing, time passing and batches that commit or fail, all against the
memory store (tests/core_harness.py). After every step: no message lost or doubled,
every message lock and session lock the core holds is the store's, a delivery goes only to the
holder of its session, a consumer holds at most one session, counts equal the store's; at the end,
a holder gets its session's messages in sequence order (first deliveries); at the end, every ready
message of every session can still be delivered once its session is accepted."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from core_harness import CoreMachine, Harness, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    AcceptSession,
    CloseConsumer,
    CompleteThrough,
    CoreSettings,
    DeadLetterForward,
    DeferredReceived,
    Delivered,
    Receive,
    ReceiveDeferred,
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
        self.deferred_asks: dict[object, str] = {}  # a ReceiveDeferred's reply_to -> the session it named
        # A receiver's mode is its link's, fixed from its first credit until it closes (as on the wire).
        self.modes: dict[str, ReceiveMode] = {}

    def _in_order(self, reply: Delivered) -> None:
        """A holder gets its session's messages first time in sequence order (redeliveries aside)."""
        seq = reply.message.sequence_number
        first = seq not in self.ever_delivered
        self.ever_delivered.add(seq)
        held = self.harness.view.sessions.held.get(reply.message.session_id or "")
        if not first or held is None or held.consumer != reply.consumer:
            return
        if reply.message.scheduled_enqueue_time is not None:
            return  # ready only once activated: a higher number sent meanwhile may rightly come first
        key = (reply.consumer, held.token)
        assert self.last_first.get(key, 0) < seq, f"{seq} delivered after {self.last_first[key]}"
        self.last_first[key] = seq

    @initialize(dead_letter=st.booleans(), window=st.sampled_from([60, 1 << 20]), read_count=st.sampled_from([1, 4]),
                max_delivery=st.integers(1, 3), forward=st.booleans())
    def start(self, dead_letter: bool, window: int, read_count: int, max_delivery: int, forward: bool) -> None:
        # forward: ForwardDeadLetteredMessagesTo, so every dead letter leaves for another partition
        core = CoreSettings(lock_duration=LOCK, max_delivery_count=max_delivery, dead_letter_on_expiration=dead_letter,
                            window_bytes=window, read_count=read_count, requires_session=True, scheduled_tracked=2,
                            scheduled_poll=500,
                            forward_dead_letters=DeadLetterForward(("fdlq", 0), "src", None) if forward else None)
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
                    held = h.view.sessions.by_consumer.get(reply.consumer)
                    assert held == reply.message.session_id, "delivered to a receiver not holding its session"
                    self.delivered_tokens.append(reply.lock_token)
            elif isinstance(reply, SettlementDone) and reply.outcome is Outcome.COMPLETE:
                seq = next(s for s, r in h.store.gone.items() if r == "complete" and s not in self.completed)
                self.completed.add(seq)
            elif isinstance(reply, SessionAccepted):
                token, _until, _owner = h.store.session_locks[reply.session_id]
                assert h.view.sessions.held[reply.session_id].token == token
            elif isinstance(reply, SessionStateSet):
                self.states[reply.session_id] = self.asked_states[reply.reply_to][1]
            elif isinstance(reply, SessionState):
                assert reply.state == self.states.get(reply.session_id)
            elif isinstance(reply, DeferredReceived):
                self._observe_deferred(reply)

    def _observe_deferred(self, reply: DeferredReceived) -> None:
        """Received by number: only the asked session's messages, only while this core holds it; a
        PeekLock lock is the store's and rides on the session lock."""
        h = self.harness
        session = self.deferred_asks[reply.reply_to]
        held = h.view.sessions.held.get(session)
        for m in reply.messages:
            seq = m.message.sequence_number
            assert m.message.session_id == session and m.message.state is MessageState.DEFERRED
            if m.lock_token is None:
                assert seq not in h.store.rows and h.store.gone.get(seq) == "complete"
                self.completed.add(seq)
            else:
                assert held is not None, "a deferred message locked for a session not held here"
                assert seq not in self.completed
                row = h.store.rows[seq]
                assert row.lock_token == m.lock_token and row.locked_at(h.now)
                assert h.view.locks.held[m.lock_token].session_token == held.token
                self.delivered_tokens.append(m.lock_token)

    @rule(sessions=st.lists(st.sampled_from(SESSIONS), min_size=1, max_size=3),
          ttl=st.sampled_from([None, 1, 700, 3_000]))
    def send(self, sessions: list[str], ttl: int | None) -> None:
        self._run(Send(tuple(draft(None, ttl=ttl, session=s) for s in sessions), "s"))

    @rule(session=st.sampled_from(SESSIONS), delay=st.sampled_from([0, 1, 600, 2_500]))
    def schedule(self, session: str, delay: int) -> None:
        self._run(Schedule((draft(None, scheduled=self.harness.now + delay, session=session),), "sch"))

    @rule(consumer=st.sampled_from(CONSUMERS), session=st.sampled_from([None, *SESSIONS]),
          wait=st.sampled_from([None, 0, 500, 5_000]), mode=st.sampled_from(list(ReceiveMode)))
    def accept(self, consumer: str, session: str | None, wait: int | None, mode: ReceiveMode) -> None:
        h = self.harness
        self._run(Receive(consumer, 0, self.modes.setdefault(consumer, mode)))
        self._run(AcceptSession(consumer, session, ("accept", consumer), None if wait is None else h.now + wait))

    @rule(consumer=st.sampled_from(CONSUMERS), n=st.integers(0, 3), mode=st.sampled_from(list(ReceiveMode)))
    def receive(self, consumer: str, n: int, mode: ReceiveMode) -> None:
        self._run(Receive(consumer, n, self.modes.setdefault(consumer, mode)))

    @rule(consumer=st.sampled_from(CONSUMERS))
    def close(self, consumer: str) -> None:
        self._run(CloseConsumer(consumer))
        self.modes.pop(consumer, None)

    @precondition(lambda self: bool(self.delivered_tokens))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle(self, data: st.DataObject, outcome: Outcome) -> None:
        self._run(Settle(data.draw(st.sampled_from(self.delivered_tokens)), outcome, "t"))

    @rule(data=st.data(), session=st.sampled_from(SESSIONS), mode=st.sampled_from(list(ReceiveMode)),
          stray=st.sampled_from([False, False, False, True]))
    def receive_deferred(self, data: st.DataObject, session: str, mode: ReceiveMode, stray: bool) -> None:
        held = sorted(self.harness.view.sessions.held)
        if held and data.draw(st.booleans()):  # mostly a session held here: its holder asks
            session = data.draw(st.sampled_from(held))
        h = self.harness
        store = h.store
        free = sorted(seq for seq, row in store.rows.items()
                      if row.record.state is MessageState.DEFERRED and not row.locked_at(h.now)
                      and row.record.session_id == session)
        numbers = data.draw(st.lists(st.sampled_from(free), min_size=1, max_size=3, unique=True)) if free else []
        if stray or not numbers:  # gone, active, of another session, or locked
            numbers.append(data.draw(st.integers(1, store.last + 1)))
        key = ("rd", len(self.deferred_asks))
        self.deferred_asks[key] = session
        self._run(ReceiveDeferred(tuple(numbers), key, mode, session_id=session, consumer="mgmt"))

    @rule(session=st.sampled_from(SESSIONS), then=st.sampled_from([None, *ReceiveMode]))
    def defer_one(self, session: str, then: ReceiveMode | None) -> None:
        """Send to ``session``, take it, receive and defer a message, every batch committing (see the
        queue machine's rule of the same name)."""
        h = self.harness
        self._run(Send((draft(None, session=session),), "s"))
        self.carry_out_all()
        holder = next((c for c, sid in h.view.sessions.by_consumer.items() if sid == session), None)
        if holder is None:  # a receiver of its own takes the session (and keeps it: receive_deferred needs a holder)
            holder = f"deferrer{len(self.deferred_asks)}-{session}"
            self._run(Receive(holder, 0, self.modes.setdefault(holder, ReceiveMode.PEEK_LOCK)))
            self._run(AcceptSession(holder, session, ("accept", holder)))
            self.carry_out_all()
        before = len(self.delivered_tokens)
        self._run(Receive(holder, 1, self.modes.get(holder, ReceiveMode.PEEK_LOCK)))
        self.carry_out_all()
        for token in self.delivered_tokens[before:]:
            lock = h.view.locks.held.get(token)
            if lock is not None and lock.consumer == holder:
                self._run(Settle(token, Outcome.DEFER, "defer"))
        self.carry_out_all()
        held = h.view.sessions.by_consumer.get(holder)
        if then is not None and held is not None:  # its holder asks for them by number (answers left to the rules)
            numbers = tuple(seq for seq, row in h.store.rows.items() if row.record.state is MessageState.DEFERRED
                            and row.record.session_id == held and not row.locked_at(h.now))
            key = ("rd", len(self.deferred_asks))
            self.deferred_asks[key] = held
            self._run(ReceiveDeferred(numbers, key, then, session_id=held, consumer="mgmt"))

    @rule(data=st.data())
    def complete_through(self, data: st.DataObject) -> None:
        self._run(CompleteThrough(data.draw(st.integers(0, self.harness.store.last + 1)), "ct"))

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
        for token, lock in view.locks.held.items():
            row = store.rows.get(lock.record.sequence_number)
            assert row is not None and row.lock_token == token
        for seq, row in store.rows.items():
            if row.locked_at(h.now):
                assert row.lock_token in view.locks.held, f"row {seq} locked by a token the core does not hold"
        for sid, held in view.sessions.held.items():
            assert store.session_locks[sid][0] == held.token, f"session {sid} held here but not in the store"
            assert view.sessions.by_consumer[held.consumer] == sid
        assert len(view.sessions.by_consumer) == len(set(view.sessions.by_consumer.values())) == len(view.sessions.held)

    def teardown(self) -> None:
        """Liveness: every receiver gone and time past every lock, a new receiver accepting the next
        available session again and again gets every ready, unexpired message."""
        if self.h is None:
            return
        h = self.harness
        self._run(StoreAvailable())
        for consumer in [*CONSUMERS, *h.view.credit]:
            self._run(CloseConsumer(consumer))
        self.settle_down(LOCK)
        got: set[int] = set()
        for i in range(len(SESSIONS) + 1):
            final = f"final{i}"
            self._run(Receive(final, 10_000, ReceiveMode.PEEK_LOCK))
            self._run(AcceptSession(final, None, ("accept", final), None))
            self.carry_out_all()
            got |= {lock.record.sequence_number for lock in h.view.locks.held.values() if lock.consumer == final}
        ready = self.ready()
        assert ready <= got, f"stuck: {sorted(ready - got)}"


SessionCoreMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
TestSessionCoreMachine = SessionCoreMachine.TestCase
