"""A Hypothesis state machine drives the pure partition core with random commands, a fake clock and
batches that commit or fail in the actor's order, applying its store ops to the test-only in-memory
store, and checks after every step: no message lost or doubled, at most one lock per message, every
lock the core holds is the store's, counts equal the store's; and at the end, that every ready
message can still be delivered (nothing is stuck outside the window)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from partition_core_store import CoreMachine, Harness, draft
from sodalite.model.partition_core import (
    CancelScheduled,
    CloseConsumer,
    CoreSettings,
    Delivered,
    Receive,
    ReceiveMode,
    RenewLock,
    Reply,
    Schedule,
    Send,
    SendAccepted,
    Settle,
    SettlementDone,
    new_view,
)
from sodalite.model.store_ops import Outcome

LOCK = 1_000
CONSUMERS = ("c1", "c2")


class PartitionCoreMachine(CoreMachine):
    @initialize(dead_letter=st.booleans(), dedup=st.booleans(), window=st.sampled_from([60, 250, 1 << 20]),
                read_count=st.sampled_from([1, 2, 5]), max_delivery=st.integers(1, 3))
    def start(self, dead_letter: bool, dedup: bool, window: int, read_count: int, max_delivery: int) -> None:
        core = CoreSettings(lock_duration=LOCK, max_delivery_count=max_delivery, dead_letter_on_expiration=dead_letter,
                            duplicate_window=5_000 if dedup else None, window_bytes=window, read_count=read_count,
                            scheduled_poll=500, scheduled_tracked=2)
        self.h = Harness(new_view(core, 0, token_seed=3))

    # ---- commands ----

    def _observe(self, replies: list[Reply]) -> None:
        h = self.harness
        for reply in replies:
            if isinstance(reply, SendAccepted):
                for seq in reply.sequence_numbers:
                    assert seq not in self.accepted
                    self.accepted.add(seq)
            elif isinstance(reply, Delivered):
                seq = reply.message.sequence_number
                assert seq not in self.completed, f"{seq} delivered after it was completed"
                if reply.lock_token is None:  # received and deleted: gone from the store already
                    assert seq not in h.store.rows
                    self.completed.add(seq)
                else:  # the store holds exactly this lock now
                    row = h.store.rows[seq]
                    assert row.lock_token == reply.lock_token and row.locked_at(h.now)
                    self.delivered_tokens.append(reply.lock_token)
            elif isinstance(reply, SettlementDone) and reply.outcome is Outcome.COMPLETE:
                seq = next(s for s, r in h.store.gone.items() if r == "complete" and s not in self.completed)
                self.completed.add(seq)

    @rule(n=st.integers(1, 3), ttl=st.sampled_from([None, 1, 700, 3_000]), mid=st.sampled_from([None, "a", "b", "c"]),
          size=st.sampled_from([1, 40, 120]))
    def send(self, n: int, ttl: int | None, mid: str | None, size: int) -> None:
        drafts = tuple(draft(mid if i == 0 else None, ttl=ttl, body=b"x" * size) for i in range(n))
        self._run(Send(drafts, "s"))

    @rule(delay=st.sampled_from([0, 1, 600, 2_500]), ping=st.booleans())
    def schedule(self, delay: int, ping: bool) -> None:
        self._run(Schedule((draft(None, scheduled=self.harness.now + delay, ping=ping),), "sch"))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        seqs = sorted(self.accepted) or [1]
        self._run(CancelScheduled((data.draw(st.sampled_from(seqs)),), "cancel"))

    @rule(consumer=st.sampled_from(CONSUMERS), n=st.integers(0, 3), mode=st.sampled_from(list(ReceiveMode)))
    def receive(self, consumer: str, n: int, mode: ReceiveMode) -> None:
        self._run(Receive(consumer, n, mode))

    @rule(consumer=st.sampled_from(CONSUMERS))
    def close(self, consumer: str) -> None:
        self._run(CloseConsumer(consumer))

    @precondition(lambda self: bool(self.delivered_tokens))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle(self, data: st.DataObject, outcome: Outcome) -> None:
        token = data.draw(st.sampled_from(self.delivered_tokens))
        self._run(Settle(token, outcome, "t"))

    @precondition(lambda self: bool(self.delivered_tokens))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        self._run(RenewLock(data.draw(st.sampled_from(self.delivered_tokens)), "r"))

    # ---- invariants ----

    @invariant()
    def one_lock_per_message_and_the_store_holds_it(self) -> None:
        if self.h is None:
            return
        h = self.harness
        view, store = h.view, h.store
        seqs = [lock.record.sequence_number for lock in view.locks.values()]
        assert len(seqs) == len(set(seqs))
        for token, lock in view.locks.items():
            row = store.rows.get(lock.record.sequence_number)
            assert row is not None and row.lock_token == token
        for seq, row in store.rows.items():
            if row.locked_at(h.now):
                assert row.lock_token in view.locks, f"row {seq} locked by a token the core does not hold"
        assert not (set(view.window) & set(view.locked_seqs))
        assert view.window_size == sum(r.size for r in view.window.values())
        assert len(view.window) <= 1 or view.window_size < view.settings.window_bytes + 120  # + one message

    def teardown(self) -> None:
        """Liveness: with the store up and time moved past every lock, every ready, unexpired message
        is delivered to a receiver with enough credit."""
        if self.h is None:
            return
        self.settle_down(LOCK)
        self._run(Receive("final", 10_000, ReceiveMode.PEEK_LOCK))
        self.carry_out_all()
        held = {lock.record.sequence_number for lock in self.harness.view.locks.values() if lock.consumer == "final"}
        ready = self.ready()
        assert ready <= held, f"stuck: {sorted(ready - held)}"


PartitionCoreMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                                  suppress_health_check=[HealthCheck.too_slow])
TestPartitionCoreMachine = PartitionCoreMachine.TestCase
