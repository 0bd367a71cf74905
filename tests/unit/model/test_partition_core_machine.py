"""A Hypothesis state machine drives the pure partition core with random commands (deferred receives
by number, complete-through, moves out by number, rows landed by another core's batch and
transactions' commits among them), a fake clock and
batches that commit or fail in the actor's order, applying its store ops to the test-only in-memory
store, and checks after every step: no message lost or doubled, at most one lock per message, every
lock the core holds is the store's, counts equal the store's; a transaction's commit applied all of
its settlements and copies or none; and at the end, that every ready message can still be delivered
(nothing is stuck outside the window)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from core_harness import CoreMachine, Harness, draft
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    CancelScheduled,
    CloseConsumer,
    CompleteThrough,
    CoreSettings,
    DeadLetterForward,
    DeferredReceived,
    Delivered,
    Landed,
    MessageNotFound,
    MovedOut,
    MoveOut,
    PublishCopy,
    Published,
    PublishEntry,
    ReadWindow,
    Receive,
    ReceiveDeferred,
    ReceiveMode,
    RenewLock,
    Reply,
    Schedule,
    ScheduledCancelled,
    Send,
    SendAccepted,
    Settle,
    SettlementDone,
    Transact,
    WindowRead,
    new_view,
    record_for,
)
from sodalite.model.store_ops import Append, Appended, MoveItem, Outcome

LOCK = 1_000
CONSUMERS = ("c1", "c2")
TX_TARGET = "tx-target"  # another partition a transaction's sends go to


class PartitionCoreMachine(CoreMachine):
    @initialize(dead_letter=st.booleans(), dedup=st.booleans(), window=st.sampled_from([60, 250, 1 << 20]),
                read_count=st.sampled_from([1, 2, 5]), max_delivery=st.integers(1, 3), forward=st.booleans(),
                shared=st.booleans())
    def start(self, dead_letter: bool, dedup: bool, window: int, read_count: int, max_delivery: int,
              forward: bool, shared: bool) -> None:
        # forward: ForwardDeadLetteredMessagesTo, so every dead letter leaves for another partition
        core = CoreSettings(lock_duration=LOCK, max_delivery_count=max_delivery, dead_letter_on_expiration=dead_letter,
                            duplicate_window=5_000 if dedup else None, window_bytes=window, read_count=read_count,
                            scheduled_poll=500, scheduled_tracked=2, shared_store=shared,
                            forward_dead_letters=DeadLetterForward(("fdlq", 0), "src", 60_000) if forward else None)
        self.h = Harness(new_view(core, 0, token_seed=3))
        self.moving: dict[object, tuple[tuple[int, ...], tuple[str, int] | None]] = {}
        self.moved_out: set[int] = set()
        self.requests = 0
        # transactions in flight: reply_to -> (the settled locks as (sequence number, token), the copies' bodies)
        self.transacting: dict[object, tuple[tuple[tuple[int, object], ...], tuple[bytes, ...]]] = {}
        self.refused_bodies: set[bytes] = set()  # copies of transactions refused or failed

    # ---- commands ----

    def _observe(self, replies: list[Reply]) -> None:
        h = self.harness
        for reply in replies:
            if getattr(reply, "reply_to", None) in self.transacting:
                self._observe_transaction(reply)
            if isinstance(reply, SendAccepted):
                for seq in reply.sequence_numbers:
                    assert seq not in self.accepted
                    self.accepted.add(seq)
            elif isinstance(reply, Delivered):
                seq = reply.message.sequence_number
                assert seq not in self.completed, f"{seq} delivered after it was completed"
                assert seq not in self.moved_out, f"{seq} delivered after it was moved out"
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
            elif isinstance(reply, DeferredReceived):
                self._observe_deferred(reply)
            elif isinstance(reply, MovedOut):
                self._observe_moved_out(reply)
            elif isinstance(reply, ScheduledCancelled):  # all of them went, by this cancel
                for seq in reply.sequence_numbers:
                    assert seq not in h.store.rows and h.store.gone.get(seq) == "cancelled"
            elif isinstance(reply, MessageNotFound) and reply.reply_to == "cancel":  # none went: the store said so
                assert reply.sequence_numbers in h.store.refused_cancels or all(n < 1 for n in reply.sequence_numbers)

    def _observe_transaction(self, reply: Reply) -> None:
        """Committed (``Published``, or the last settlement's echo): every settlement applied (the row
        no longer carries the lock) and every copy is stored; refused or failed: no copy is stored."""
        h = self.harness
        settled, bodies = self.transacting.pop(getattr(reply, "reply_to", None))
        stored = [row.record.tail for row in h.store.other(TX_TARGET).rows.values()]
        if isinstance(reply, Published | SettlementDone):
            for seq, token in settled:
                row = h.store.rows.get(seq)
                assert row is None or row.lock_token != token, f"{seq} still locked after its transaction"
            assert all(body in stored for body in bodies)
        else:  # never stored, now or later
            self.refused_bodies.update(bodies)
            assert not any(body in stored for body in bodies), f"a refused transaction stored copies: {reply}"

    def _observe_moved_out(self, reply: MovedOut) -> None:
        """Each number the reply names left the store by this move (deleted or in the target) and is
        never delivered again; each None is a row the move did not take."""
        h = self.harness
        asked, target = self.moving.pop(reply.reply_to)
        assert len(reply.sequence_numbers) == len(asked)
        for seq, new in zip(asked, reply.sequence_numbers, strict=True):
            if new is None:
                continue
            assert seq not in h.store.rows and seq not in self.moved_out
            if target is None:
                assert new == seq and h.store.gone[seq] == "dropped"
            else:
                assert h.store.other(target).rows[new].origin == seq  # the target holds it, from here
                assert any(to == target and record.sequence_number == seq for to, record, _ in h.store.moved_out)
            self.moved_out.add(seq)

    def _observe_deferred(self, reply: DeferredReceived) -> None:
        """Received by number: PeekLock holds exactly the store's lock; ReceiveAndDelete only what
        the store deleted (once: a row deleted is never handed out again)."""
        h = self.harness
        assert len({m.message.sequence_number for m in reply.messages}) == len(reply.messages)
        for m in reply.messages:
            seq = m.message.sequence_number
            assert m.message.state is MessageState.DEFERRED
            if m.lock_token is None:
                assert seq not in h.store.rows and h.store.gone.get(seq) == "complete"
                self.completed.add(seq)
            else:
                assert seq not in self.completed, f"{seq} received by number after it was completed"
                row = h.store.rows[seq]
                assert row.lock_token == m.lock_token and row.locked_at(h.now)
                self.delivered_tokens.append(m.lock_token)

    @rule(data=st.data(), mode=st.sampled_from(list(ReceiveMode)),
          stray=st.sampled_from([False, False, False, True]))
    def receive_deferred(self, data: st.DataObject, mode: ReceiveMode, stray: bool) -> None:
        h = self.harness
        store = h.store
        free = sorted(seq for seq, row in store.rows.items()
                      if row.record.state is MessageState.DEFERRED and not row.locked_at(h.now))
        numbers = data.draw(st.lists(st.sampled_from(free), min_size=1, max_size=3, unique=True)) if free else []
        if stray or not numbers:  # a number that may be gone, active, scheduled or locked
            numbers.append(data.draw(st.integers(1, store.last + 1)))
        self._run(ReceiveDeferred(tuple(numbers), "rd", mode, consumer="mgmt"))

    @rule(size=st.sampled_from([1, 40]))
    def defer_one(self, size: int) -> None:
        """Send, receive and defer a message, every batch committing: a deferred row otherwise needs a
        chain of steps random rules rarely line up, and receive_deferred would seldom find one."""
        h = self.harness
        self._run(Send((draft(None, body=b"d" * size),), "s"))
        self.carry_out_all()
        before = len(self.delivered_tokens)
        self._run(Receive("deferrer", 1))
        self.carry_out_all()
        for token in self.delivered_tokens[before:]:
            lock = h.view.locks.held.get(token)
            if lock is not None and lock.consumer == "deferrer":
                self._run(Settle(token, Outcome.DEFER, "defer"))
        self.carry_out_all()
        self._run(CloseConsumer("deferrer"))

    @rule(data=st.data(), into=st.sampled_from([None, ("other", 0)]))
    def move_out(self, data: st.DataObject, into: tuple[str, int] | None) -> None:
        """A resubmit or move (into another partition) or a purge by number, of any rows, in any state."""
        numbers = data.draw(st.lists(st.integers(1, self.harness.store.last + 1), max_size=4))
        self.requests += 1
        key = ("mo", self.requests)
        self.moving[key] = (tuple(numbers), into)
        self._run(MoveOut(tuple(MoveItem(n, reset_delivery_count=True) for n in numbers), key, into))

    @rule(data=st.data())
    def complete_through(self, data: st.DataObject) -> None:
        self._run(CompleteThrough(data.draw(st.integers(0, self.harness.store.last + 1)), "ct"))

    @rule(n=st.integers(1, 3), ttl=st.sampled_from([None, 1, 700, 3_000]), mid=st.sampled_from([None, "a", "b", "c"]),
          size=st.sampled_from([1, 40, 120]))
    def send(self, n: int, ttl: int | None, mid: str | None, size: int) -> None:
        drafts = tuple(draft(mid if i == 0 else None, ttl=ttl, body=b"x" * size) for i in range(n))
        self._run(Send(drafts, "s"))

    @precondition(lambda self: self.h is not None and self.h.view.settings.shared_store)
    @rule(mid=st.sampled_from(["a", "b", "c"]))
    def another_node_takes_an_id(self, mid: str) -> None:
        """Another node sharing the store accepted a message with this id (its copy is not here)."""
        h = self.harness
        if mid in h.store.message_ids and h.store.message_ids[mid] >= h.now - (h.view.settings.duplicate_window or 0):
            return  # the other node's send was a duplicate too
        h.store.remember_ids((mid, h.now))
        h.store.appended_ids.append((mid, h.now))

    @rule(delay=st.sampled_from([0, 1, 600, 2_500]), ping=st.booleans())
    def schedule(self, delay: int, ping: bool) -> None:
        self._run(Schedule((draft(None, scheduled=self.harness.now + delay, ping=ping),), "sch"))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """All or none: one to three numbers, scheduled or not (a number no message has among them), or
        only numbers the store holds scheduled now."""
        seqs = sorted(self.accepted) or [1]
        rows = self.harness.store.rows
        scheduled = sorted(n for n, row in rows.items() if row.record.state == MessageState.SCHEDULED)
        pool = scheduled if scheduled and data.draw(st.booleans()) else [*seqs, max(seqs) + 7]
        numbers = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        self._run(CancelScheduled(tuple(numbers), "cancel"))

    @rule(n=st.integers(1, 3), delay=st.sampled_from([0, 600]), size=st.sampled_from([1, 40, 120]),
          race=st.booleans())
    def land(self, n: int, delay: int, size: int, race: bool) -> None:
        """Rows another core's batch stored here (a topic's copies), then ``Landed``. With ``race``
        and a window read next in line, that read runs before the commit and is answered after the
        Landed (it cannot see the rows, and may come back short)."""
        h = self.harness
        before = None
        if race and h.effects and isinstance(h.effects[0], ReadWindow):
            read = h.effects.popleft()
            assert isinstance(read, ReadWindow)
            before = h.store.peek(read.from_sequence_number, read.count)
        records = []
        for _ in range(n):
            record = record_for(draft(None, scheduled=h.now + delay if delay else None, body=b"x" * size), h.now, None)
            (result,) = h.store.apply((Append((record,)),))
            assert isinstance(result, Appended)
            records.append(replace(record, sequence_number=result.sequence_numbers[0]))
            self.accepted.add(result.sequence_numbers[0])
        self._run(Landed(tuple(records)))
        if before is not None:
            self._run(WindowRead(before))

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
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)), copies=st.integers(0, 2))
    def transact(self, data: st.DataObject, outcome: Outcome, copies: int) -> None:
        """A transaction's commit: some locks (perhaps lapsed, settled or unknown by now) and copies
        into another partition; all of it applies or none (checked in ``_observe_transaction``)."""
        h = self.harness
        tokens = data.draw(st.lists(st.sampled_from(self.delivered_tokens), min_size=1, max_size=2, unique=True))
        self.requests += 1
        key = ("tx", self.requests)
        bodies = tuple(f"tx{self.requests}-{i}".encode() for i in range(copies))
        copy_records = tuple(PublishCopy(TX_TARGET, record_for(draft(None, body=b), h.now, None)) for b in bodies)
        settled = tuple((h.view.locks.held[t].record.sequence_number, t) for t in tokens if t in h.view.locks.held)
        self.transacting[key] = (settled, bodies)
        self._run(Transact(tuple(Settle(t, outcome) for t in tokens), (PublishEntry(None, copy_records),), key))

    @precondition(lambda self: bool(self.delivered_tokens))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        self._run(RenewLock(data.draw(st.sampled_from(self.delivered_tokens)), "r"))

    # ---- invariants ----

    @invariant()
    def no_message_id_stored_twice_within_the_window(self) -> None:
        if self.h is None or self.h.view.settings.duplicate_window is None:
            return
        window = self.h.view.settings.duplicate_window
        last: dict[str, int] = {}
        for mid, at in self.h.store.appended_ids:
            assert mid not in last or at - last[mid] > window, (mid, last[mid], at)
            last[mid] = at

    @invariant()
    def one_lock_per_message_and_the_store_holds_it(self) -> None:
        if self.h is None:
            return
        h = self.harness
        view, store = h.view, h.store
        seqs = [lock.record.sequence_number for lock in view.locks.held.values()]
        assert len(seqs) == len(set(seqs))
        for token, lock in view.locks.held.items():
            row = store.rows.get(lock.record.sequence_number)
            assert row is not None and row.lock_token == token
        for seq, row in store.rows.items():
            if row.locked_at(h.now):
                assert row.lock_token in view.locks.held, f"row {seq} locked by a token the core does not hold"
        assert not (set(view.window.records) & set(view.locks.by_seq))
        assert view.window.size == sum(r.size for r in view.window.records.values())
        assert len(view.window.records) <= 1 or view.window.size < view.settings.window_bytes + 120  # + one message

    @invariant()
    def a_refused_transaction_never_stores_a_copy(self) -> None:
        if self.h is None:
            return
        stored = {row.record.tail for row in self.harness.store.other(TX_TARGET).rows.values()}
        assert not stored & self.refused_bodies

    def teardown(self) -> None:
        """Liveness: with the store up and time moved past every lock, every ready, unexpired message
        is delivered to a receiver with enough credit."""
        if self.h is None:
            return
        self.settle_down(LOCK)
        self._run(Receive("final", 10_000, ReceiveMode.PEEK_LOCK))
        self.carry_out_all()
        held = {lock.record.sequence_number for lock in self.harness.view.locks.held.values()
                if lock.consumer == "final"}
        ready = self.ready()
        assert ready <= held, f"stuck: {sorted(ready - held)}"


PartitionCoreMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                                  suppress_health_check=[HealthCheck.too_slow])
TestPartitionCoreMachine = PartitionCoreMachine.TestCase
