"""Test-only: a tiny in-memory application of the store ops of model/store_ops.py (docs/store-port.md),
a harness that runs the pure partition core against it the way the actor will (batches and reads one
at a time, answers fed back in order), and the base of the core's Hypothesis state machines. Not a
store adapter: the real reference adapter is store/memory.py (port v2); this exists so the core's
tests do not wait for it."""

from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, replace

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MessageDraft
from sodalite.model.partition_core import (
    Command,
    CountsRead,
    Decision,
    ReadCounts,
    ReadWindow,
    Reply,
    SettingsUpdated,
    StoreAvailable,
    StoreFailed,
    StoreResults,
    StoreUnavailable,
    Tick,
    UpdateSettings,
    View,
    WindowRead,
    decide,
)
from sodalite.model.store_ops import (
    Activate,
    Activated,
    AnnotationEdit,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    Done,
    ForgetMessageIds,
    Gate,
    IdsClaimed,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PruneMessageIds,
    Purge,
    Purged,
    PutSessionState,
    ReleaseSession,
    RememberMessageIds,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    SessionClaimed,
    Settle,
    Settled,
    StoredMessage,
    StoreOp,
    Unscheduled,
)


@dataclass
class Row:
    record: MessageRecord
    lock_token: uuid.UUID | None = None
    locked_until: int | None = None
    lock_owner: str | None = None
    edit: AnnotationEdit | None = None
    origin: int = 0  # in the dead-letter queue: the number it had in the partition

    def locked_at(self, now: int) -> bool:
        return self.lock_token is not None and self.locked_until is not None and self.locked_until > now

    def stored(self) -> StoredMessage:
        return StoredMessage(self.record, self.lock_token, self.locked_until, self.lock_owner)


class FakeStore:
    """One partition and its dead-letter queue; every apply is all-or-nothing (it cannot fail
    half-way here: ``fail_next`` makes the next apply fail before it changes anything)."""

    def __init__(self) -> None:
        self.rows: dict[int, Row] = {}
        self.dead: dict[int, Row] = {}
        self.last = 0
        self.dead_last = 0
        self.message_ids: dict[str, int] = {}
        self.claims: dict[str, uuid.UUID] = {}  # ids this batch's ClaimMessageIds took (a gate's test)
        self.appended_ids: list[tuple[str, int]] = []  # (message id, enqueued time) of every stored message with one
        self.applied_batches = 0
        self.gone: dict[int, str] = {}  # numbers deleted from the partition, and how
        # rows moved into another partition: (target, the row as it left, the move item); number = index + 1
        self.moved_out: list[tuple[tuple[str, int], MessageRecord, MoveItem]] = []
        self.session_locks: dict[str, tuple[uuid.UUID, int, str]] = {}  # id -> (token, until, owner)
        self.session_states: dict[str, tuple[bytes, int]] = {}
        self.others: dict[object, FakeStore] = {}  # partitions an AppendTo names (a topic's subscriptions)
        self.refused_cancels: list[tuple[int, ...]] = []  # the missing numbers of each CancelScheduled refused

    def other(self, target: object) -> FakeStore:
        return self.others.setdefault(target, FakeStore())

    def session_free(self, session_id: str, now: int) -> bool:
        lock = self.session_locks.get(session_id)
        return lock is None or lock[1] <= now

    def fenced(self, ops: tuple[StoreOp, ...]) -> tuple[int, int] | None:
        """(op, item) of the first item of an all-or-none Settle whose lock is not held as it names:
        such a batch is rolled back by the store (``apply`` is then not called)."""
        for i, op in enumerate(ops):
            if isinstance(op, Settle) and op.all_or_none:
                for j, item in enumerate(op.items):
                    row = self.rows.get(item.sequence_number)
                    if row is None or row.lock_token != item.lock_token or not row.locked_at(op.now):
                        return i, j
        return None

    def apply(self, ops: tuple[StoreOp, ...]) -> tuple[OpResult, ...]:
        self.applied_batches += 1
        self.claims = {}
        return tuple(self._one(op) for op in ops)

    def _gated(self, messages: tuple[MessageRecord, ...], gate: Gate | None) -> list[MessageRecord | None]:
        """The messages an append stores (None: a duplicate the store skips), as the port's DedupGate."""
        if gate is None:
            return list(messages)
        return [m if mid is None or self.claims.get(mid) == gate.claim else None
                for m, mid in zip(messages, gate.message_ids, strict=True)]

    def _dead_letter(self, row: Row, edit: AnnotationEdit | None, keep: bool = False) -> int:
        """Into the dead-letter queue: under the row's own number when the op says so (the port's
        keep flag), else the next number there; the counter becomes the greater of the two."""
        number = row.record.sequence_number if keep else self.dead_last + 1
        assert number not in self.dead, f"dead-letter number {number} taken"
        self.dead_last = max(self.dead_last, number)
        self.dead[number] = Row(replace(row.record, sequence_number=number, state=MessageState.ACTIVE),
                                edit=edit, origin=row.record.sequence_number)
        return number

    def _one(self, op: StoreOp) -> OpResult:
        match op:
            case Append():
                seqs = []
                for maybe in self._gated(op.messages, op.gate):
                    if maybe is None:
                        seqs.append(0)
                        continue
                    record = maybe
                    if record.message_id is not None:
                        self.appended_ids.append((record.message_id, record.enqueued_time))
                    self.last += 1
                    self.rows[self.last] = Row(replace(record, sequence_number=self.last))
                    seqs.append(self.last)
                return Appended(tuple(seqs))
            case AppendTo():
                kept = self._gated(op.messages, op.gate)
                if op.numbered_by is not None:  # numbered by that partition's counter (a fan-out's dead letter)
                    counter, target = self.other(op.numbered_by), self.other(op.target)
                    placed = []
                    for m in kept:
                        if m is not None:
                            counter.last += 1
                            target.rows[counter.last] = Row(replace(m, sequence_number=counter.last))
                            target.last = max(target.last, counter.last)
                        placed.append(0 if m is None else counter.last)
                    return Appended(tuple(placed))
                landed = self.other(op.target)._one(Append(tuple(m for m in kept if m is not None)))
                assert isinstance(landed, Appended)
                numbers = iter(landed.sequence_numbers)
                return Appended(tuple(0 if m is None else next(numbers) for m in kept))
            case ClaimMessageIds():
                fresh = []
                for mid in op.message_ids:
                    seen = self.message_ids.get(mid)
                    fresh.append(seen is None or seen < op.now - op.window_ms)
                    if fresh[-1]:
                        self.message_ids[mid] = op.now
                        self.claims[mid] = op.claim
                return IdsClaimed(tuple(fresh))
            case Claim():
                wanted = None if op.sequence_numbers is None else set(op.sequence_numbers)
                taken: list[StoredMessage] = []
                for seq in sorted(self.rows):
                    if len(taken) == len(op.tokens):
                        break
                    row = self.rows[seq]
                    r = row.record
                    if (r.state != op.state or row.locked_at(op.now) or (wanted is not None and seq not in wanted)
                            or (r.expires_at is not None and r.expires_at <= op.now)
                            or (op.session_id is not None and r.session_id != op.session_id)):
                        continue
                    if op.state == MessageState.ACTIVE and r.state == MessageState.SCHEDULED:
                        continue
                    row.lock_token = op.tokens[len(taken)]
                    row.locked_until, row.lock_owner = op.locked_until, op.owner
                    row.record = r.with_delivery_count(r.delivery_count + 1)
                    taken.append(row.stored())
                return Claimed(tuple(taken))
            case Settle():
                flags = []
                for item in op.items:
                    row = self.rows.get(item.sequence_number)
                    ok = row is not None and row.lock_token == item.lock_token and row.locked_at(op.now)
                    flags.append(ok)
                    if not ok or row is None:
                        continue
                    row.lock_token = row.locked_until = row.lock_owner = None
                    if item.edit is not None:
                        row.edit = item.edit
                    if item.outcome is Outcome.COMPLETE:
                        del self.rows[item.sequence_number]
                        self.gone[item.sequence_number] = "complete"
                    elif item.outcome is Outcome.RELEASE:
                        row.record = row.record.with_delivery_count(max(row.record.delivery_count - 1, 0))
                    elif item.outcome is Outcome.DEFER:
                        row.record = replace(row.record, state=MessageState.DEFERRED,
                                             delivery_count=max(row.record.delivery_count - 1, 0))
                    elif item.outcome is Outcome.DEAD_LETTER and item.target is not None:  # forwarded
                        del self.rows[item.sequence_number]
                        self.gone[item.sequence_number] = "forwarded"
                        record = replace(row.record, state=MessageState.ACTIVE, expires_at=item.expires_at,
                                         enqueued_time=row.record.enqueued_time if item.enqueued_time is None
                                         else item.enqueued_time,
                                         delivery_count=0 if item.reset_delivery_count
                                         else max(row.record.delivery_count - 1, 0) if item.give_back_delivery
                                         else row.record.delivery_count)
                        other = self.other(item.target)
                        other.last += 1
                        other.rows[other.last] = Row(replace(record, sequence_number=other.last), edit=item.edit,
                                                     origin=item.sequence_number)
                    elif item.outcome is Outcome.DEAD_LETTER:
                        del self.rows[item.sequence_number]
                        if item.give_back_delivery:
                            row.record = row.record.with_delivery_count(max(row.record.delivery_count - 1, 0))
                        self._dead_letter(row, item.edit, item.keep_sequence_number)
                return Settled(tuple(flags))
            case RenewLocks():
                flags = []
                for seq, token in op.items:
                    row = self.rows.get(seq)
                    ok = row is not None and row.lock_token == token and row.locked_at(op.now)
                    flags.append(ok)
                    if ok and row is not None:
                        row.locked_until = op.locked_until
                return Renewed(tuple(flags))
            case MoveMessages():
                moved: list[int | None] = []
                for item in op.items:
                    row = self.rows.get(item.sequence_number)
                    if row is None or row.locked_at(op.now):
                        moved.append(None)
                        continue
                    del self.rows[item.sequence_number]
                    if op.target is not None:  # into another partition (a resubmit or move): it left this one
                        self.gone[item.sequence_number] = "moved"
                        self.moved_out.append((op.target, row.record, item))
                        moved.append(len(self.moved_out))
                        continue
                    if not op.to_dead_letter:
                        self.gone[item.sequence_number] = "dropped"
                    moved.append(self._dead_letter(row, item.edit, op.keep_sequence_numbers) if op.to_dead_letter
                                 else item.sequence_number)
                return Moved(tuple(moved))
            case Activate():
                due = sorted((row.record.scheduled_enqueue_time or 0, seq) for seq, row in self.rows.items()
                             if row.record.state == MessageState.SCHEDULED
                             and (row.record.scheduled_enqueue_time or 0) <= op.now)[:op.limit]
                out = []
                for _, seq in due:
                    row = self.rows[seq]
                    row.record = replace(row.record, state=MessageState.ACTIVE)
                    out.append(row.stored())
                return Activated(tuple(out))
            case RememberMessageIds():
                self.message_ids.update(op.entries)
                return Done()
            case PruneMessageIds():
                self.message_ids = {mid: at for mid, at in self.message_ids.items() if at >= op.seen_before}
                return Done()
            case ForgetMessageIds():
                for mid in op.message_ids:
                    if op.seen_before is None or self.message_ids.get(mid, op.seen_before) < op.seen_before:
                        self.message_ids.pop(mid, None)
                return Done()
            case ClaimSession():
                chosen = op.session_id
                if chosen is None:
                    for seq in sorted(self.rows):
                        row = self.rows[seq]
                        r = row.record
                        if (r.session_id is not None and r.state == MessageState.ACTIVE and not row.locked_at(op.now)
                                and not (r.expires_at is not None and r.expires_at <= op.now)
                                and self.session_free(r.session_id, op.now)):
                            chosen = r.session_id
                            break
                if chosen is None or not self.session_free(chosen, op.now):
                    return SessionClaimed(None)
                self.session_locks[chosen] = (op.token, op.locked_until, op.owner)
                return SessionClaimed(chosen)
            case RenewSession():
                lock = self.session_locks.get(op.session_id)
                ok = lock is not None and lock[0] == op.token and lock[1] > op.now
                if ok and lock is not None:
                    self.session_locks[op.session_id] = (lock[0], op.locked_until, lock[2])
                return Renewed((ok,))
            case ReleaseSession():
                lock = self.session_locks.get(op.session_id)
                ok = lock is not None and lock[0] == op.token
                if ok:
                    del self.session_locks[op.session_id]
                return Renewed((ok,))
            case PutSessionState():
                if op.state is None:
                    self.session_states.pop(op.session_id, None)
                else:
                    self.session_states[op.session_id] = (op.state, op.updated_at)
                return Done()
            case Purge():
                doomed = [seq for seq, row in self.rows.items()
                          if seq <= op.through_sequence_number and not row.locked_at(op.now)]
                for seq in doomed:
                    del self.rows[seq]
                    self.gone[seq] = "purged"
                return Purged(len(doomed))
            case CancelScheduled():
                asked = list(dict.fromkeys(op.sequence_numbers))
                missing = tuple(seq for seq in asked if seq not in self.rows
                                or self.rows[seq].record.state != MessageState.SCHEDULED
                                or self.rows[seq].locked_at(op.now))
                if not missing:
                    for seq in asked:
                        del self.rows[seq]
                        self.gone[seq] = "cancelled"
                else:
                    self.refused_cancels.append(missing)
                return Unscheduled(missing)
            case Restore():
                back = []
                for record in op.messages:
                    ok = record.sequence_number > 0 and record.sequence_number not in self.rows
                    if ok:
                        self.rows[record.sequence_number] = Row(record)
                        self.gone.pop(record.sequence_number, None)
                    back.append(ok)
                return Restored(tuple(back))
        raise AssertionError(op)

    def peek(self, from_seq: int, count: int) -> tuple[StoredMessage, ...]:
        seqs = sorted(s for s, row in self.rows.items() if s >= from_seq and row.record.state == MessageState.ACTIVE)
        return tuple(self.rows[s].stored() for s in seqs[:count])

    def count(self, state: MessageState) -> int:
        return sum(1 for row in self.rows.values() if row.record.state == state)

    def counts(self) -> tuple[int, int, int]:
        return self.count(MessageState.ACTIVE), self.count(MessageState.SCHEDULED), self.count(MessageState.DEFERRED)


class Harness:
    """Runs decide like the actor: effects queue in order; ``pump`` carries them out one by one."""

    def __init__(self, view: View, store: FakeStore | None = None, now: int = 0) -> None:
        self.view = view
        self.store = store or FakeStore()
        self.now = now
        self.effects: deque[tuple[int, tuple[StoreOp, ...]] | ReadWindow | ReadCounts] = deque()
        self.replies: list[Reply] = []
        self.ops: list[StoreOp] = []  # every op emitted, in order
        self.next_due: int | None = None

    def run(self, command: Command) -> list[Reply]:
        decision: Decision = decide(self.view, command, self.now)
        self.view = decision.view
        if decision.batch_id is not None:
            self.effects.append((decision.batch_id, decision.store_ops))
            self.ops.extend(decision.store_ops)
        else:
            assert decision.store_ops == ()
        if decision.read is not None:
            self.effects.append(decision.read)
        self.next_due = decision.next_due
        self.replies.extend(decision.replies)
        return list(decision.replies)

    def step(self, *, fail: bool = False) -> list[Reply]:
        """Carry out the oldest effect (``fail``: the batch fails, nothing of it applied)."""
        effect = self.effects.popleft()
        if isinstance(effect, ReadWindow):
            rows = None if fail else self.store.peek(effect.from_sequence_number, effect.count)
            return self.run(WindowRead(rows))
        if isinstance(effect, ReadCounts):
            return self.run(CountsRead(None if fail else self.store.counts()))
        batch_id, ops = effect
        if fail:
            return self.run(StoreFailed(batch_id, "injected"))
        fenced = self.store.fenced(ops)
        if fenced is not None:
            return self.run(StoreFailed(batch_id, "fenced", fenced))
        return self.run(StoreResults(batch_id, self.store.apply(ops)))

    def drain(self) -> list[Reply]:
        out: list[Reply] = []
        for _ in range(2_000):
            if not self.effects:
                return out
            out.extend(self.step())
        raise AssertionError("the core keeps asking for more effects: a loop")

    def at(self, now: int) -> None:
        assert now >= self.now
        self.now = now


def draft(message_id: str | None = None, *, ttl: int | None = None, scheduled: int | None = None,
          body: bytes = b"x", ping: bool = False, session: str | None = None) -> MessageDraft:
    return MessageDraft(message_id, session, None, ttl, scheduled, None, None, b"", 0, body, ping)


class CoreMachine(RuleBasedStateMachine):
    """What the queue and session state machines share: the harness, time passing, batches that
    commit or fail, the store going down and up, and the invariants that hold for both (nothing
    lost or doubled, counts equal the store's). Each machine says how it reads replies (``_observe``)."""

    def __init__(self) -> None:
        super().__init__()
        self.h: Harness | None = None
        self.accepted: set[int] = set()
        self.completed: set[int] = set()  # settled COMPLETE by a client or received-and-deleted
        self.delivered_tokens: list[uuid.UUID] = []
        self.updates = 0  # UpdateSettings sent

    @property
    def harness(self) -> Harness:
        assert self.h is not None
        return self.h

    def _observe(self, replies: list[Reply]) -> None:
        raise NotImplementedError

    def _run(self, command: Command) -> None:
        self._observe(self.harness.run(command))

    @rule(ms=st.sampled_from([1, 250, 999, 1_000, 4_000]))
    def advance(self, ms: int) -> None:
        self.harness.at(self.harness.now + ms)
        self._run(Tick())

    @precondition(lambda self: self.h is not None and self.h.next_due is not None)
    @rule()
    def until_due(self) -> None:
        h = self.harness
        assert h.next_due is not None
        h.at(max(h.now, h.next_due))
        self._run(Tick())

    @precondition(lambda self: self.h is not None and bool(self.h.effects))
    @rule(fail=st.booleans())
    def carry_out(self, fail: bool) -> None:
        replies = self.harness.step(fail=fail)
        self._observe_update(replies)
        self._observe(replies)

    @rule(up=st.booleans())
    def availability(self, up: bool) -> None:
        self._run(StoreAvailable() if up else StoreUnavailable())

    @rule(max_delivery=st.integers(1, 3), lock_duration=st.sampled_from([None, 700]))
    def update(self, max_delivery: int, lock_duration: int | None) -> None:
        """The entity's properties changed: every lock granted here ends (checked when answered)."""
        h = self.harness
        settings = replace(h.view.settings, max_delivery_count=max_delivery,
                           lock_duration=h.view.settings.lock_duration if lock_duration is None else lock_duration)
        self.updates += 1
        replies = h.run(UpdateSettings(settings, ("update", self.updates)))
        self._observe_update(replies)
        self._observe(replies)

    def _observe_update(self, replies: list[Reply]) -> None:
        """A lock an update ended is never usable again: released in the store, or marked to lapse."""
        h = self.harness
        for reply in replies:
            if isinstance(reply, SettingsUpdated):
                for token in reply.dropped:
                    lock = h.view.locks.held.get(token)
                    if lock is None:  # released: the store no longer holds it either
                        rows = h.store.rows.values()
                        assert not any(row.lock_token == token and row.locked_at(h.now) for row in rows)
                    else:
                        assert lock.dropped or lock.settling, "a lock the update ended is still usable"

    @invariant()
    def nothing_lost_or_doubled(self) -> None:
        if self.h is None:
            return
        store = self.harness.store
        places: dict[int, int] = {}
        for seq in [*store.rows, *(row.origin for row in store.dead.values()), *store.gone]:
            places[seq] = places.get(seq, 0) + 1
        assert all(count == 1 for count in places.values()), places
        assert set(store.rows) <= self.accepted  # nothing stored that no one was told about
        assert self.accepted <= set(places)

    @invariant()
    def counts_are_the_stores(self) -> None:
        """Always, except between a committed Purge (one total) and the ReadCounts it asks for."""
        if self.h is None:
            return
        view, store = self.harness.view, self.harness.store
        counts = view.counts
        if view.counts.stale_after:
            assert view.counts.read_after is not None or not view.available, "counts stale, no read of them asked for"
            return
        assert (counts.active, counts.scheduled, counts.deferred) == store.counts()

    def settle_down(self, lock_duration: int) -> None:
        """The store up, every batch carried out and time moved past every lock, until nothing is left to do."""
        h = self.harness
        self._run(StoreAvailable())
        for _ in range(200):
            self._observe(h.drain())
            h.at(h.now + 10 * lock_duration)
            self._run(Tick())
            if not h.effects:
                break

    def carry_out_all(self) -> None:
        for _ in range(200):
            if not self.harness.effects:
                break
            self._observe(self.harness.step())

    def ready(self) -> set[int]:
        """The stored messages a receiver could get now: active and not expired."""
        h = self.harness
        return {seq for seq, row in h.store.rows.items() if row.record.state == MessageState.ACTIVE
                and not (row.record.expires_at is not None and row.record.expires_at <= h.now)}
