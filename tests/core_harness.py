"""Test harness: the pure partition core run against the memory store (``sodalite.store.memory``)
the way its runner runs it: batches and reads one at a time, each operation bound to the partition
and its edits encoded (``server.partition_runner.bind``), answers fed back in order; and the base of
the core's Hypothesis state machines.

What a test reads of a partition (its rows and locks, its dead letters, its history and session
locks) is read from the memory store. What no store keeps, the harness records from the operations
it applied and their results: why a number left the partition (``gone``), which number a dead letter
or a moved copy had (``Row.origin``), the copies a move took out (``moved_out``), the ids stored
(``appended_ids``), the cancels refused, and the annotation edits (encoded as a key into ``edits``,
so ``Row.edit`` is the edit the core made)."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

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
    record_for,
)
from sodalite.model.store_ops import (
    AnnotationEdit,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimSession,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionRef,
    Purge,
    RememberMessageIds,
    Restore,
    SessionClaimed,
    Settle,
    Settled,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
    dead_letter_of,
)
from sodalite.server.partition_runner import bind
from sodalite.store.memory import MemoryStore
from sodalite.store.port import SettleFenced

QUEUE = PartitionRef("queue", 0)
_ALL = 1 << 62


def as_ref(target: Hashable) -> PartitionRef:
    """A partition a test names: a PartitionRef, an (entity, partition) pair or an entity path."""
    if isinstance(target, PartitionRef):
        return target
    if isinstance(target, tuple):
        return PartitionRef(*target)
    return PartitionRef(str(target), 0)


@dataclass(frozen=True)
class Row:
    """One stored message as a test reads it."""

    record: MessageRecord
    lock_token: uuid.UUID | None = None
    locked_until: int | None = None
    lock_owner: str | None = None
    edit: AnnotationEdit | None = None  # the last edit a settlement or move applied to it
    origin: int = 0  # a dead letter's or moved copy's number in the partition it left

    def locked_at(self, now: int) -> bool:
        return self.lock_token is not None and self.locked_until is not None and self.locked_until > now

    def stored(self) -> StoredMessage:
        return StoredMessage(self.record, self.lock_token, self.locked_until, self.lock_owner)


@dataclass
class _Book:
    """What the harness records from the operations it applied (shared by the views of one store)."""

    edits: dict[bytes, AnnotationEdit] = field(default_factory=dict)
    gone: dict[PartitionRef, dict[int, str]] = field(default_factory=dict)
    origin: dict[tuple[PartitionRef, int], int] = field(default_factory=dict)
    moved_out: dict[PartitionRef, list[tuple[tuple[str, int], MessageRecord, MoveItem]]] = field(default_factory=dict)
    appended_ids: dict[PartitionRef, list[tuple[str, int]]] = field(default_factory=dict)
    refused_cancels: dict[PartitionRef, list[tuple[int, ...]]] = field(default_factory=dict)
    named: dict[PartitionRef, Hashable] = field(default_factory=dict)  # other partitions, as the ops named them

    def encode(self, edit: AnnotationEdit) -> tuple[bytes, int, bytes | None]:
        key = f"edit-{len(self.edits) + 1}".encode()
        self.edits[key] = edit
        return key, 1, None


class PartitionStore:
    """One partition of a memory store, as the core's tests read it and apply to it."""

    def __init__(self, memory: MemoryStore | None = None, ref: PartitionRef = QUEUE, book: _Book | None = None,
                 now: int = 0) -> None:
        if memory is None:
            memory = MemoryStore()
            memory.open()
        self.memory = memory
        self.ref = ref
        self.book = book or _Book()
        self.now = now  # the clock rows are read at (a view's locks are as stored; see Row.locked_at)

    # -- reads ---------------------------------------------------------------------------------

    @property
    def rows(self) -> dict[int, Row]:
        return {m.record.sequence_number: self._row(m) for m in self.memory.peek(self.ref, 0, _ALL)}

    @property
    def dead(self) -> dict[int, Row]:
        return self.other(dead_letter_of(self.ref)).rows

    @property
    def last(self) -> int:
        return self.memory.counts(self.ref).last_sequence_number

    @property
    def message_ids(self) -> dict[str, int]:
        return dict(self.memory.partition_meta(self.ref).duplicate_history)

    @property
    def session_states(self) -> dict[str, tuple[bytes, int]]:
        return {sid: (state, at) for sid, state, at in self.memory.partition_meta(self.ref).session_states}

    @property
    def session_locks(self) -> dict[str, tuple[uuid.UUID, int, str]]:
        """Session id -> (token, locked until, owner); no port read names them, so the memory store's own."""
        part = self.memory._read(self.ref)
        return {sid: (lock.token, lock.until, lock.owner) for sid, lock in part.session_locks.items()}

    @property
    def gone(self) -> dict[int, str]:
        """Numbers that left this partition and how: complete, forwarded, moved, dropped, purged, cancelled."""
        return self.book.gone.setdefault(self.ref, {})

    @property
    def moved_out(self) -> list[tuple[tuple[str, int], MessageRecord, MoveItem]]:
        """Rows a move took into another partition: (target, the row as it left, the move item)."""
        return self.book.moved_out.setdefault(self.ref, [])

    @property
    def appended_ids(self) -> list[tuple[str, int]]:
        """(message id, enqueued time) of every message with an id stored here, in order."""
        return self.book.appended_ids.setdefault(self.ref, [])

    @property
    def refused_cancels(self) -> list[tuple[int, ...]]:
        return self.book.refused_cancels.setdefault(self.ref, [])

    @property
    def others(self) -> dict[Hashable, PartitionStore]:
        """The other partitions this one's operations wrote to and that hold messages, by the name used."""
        return {name: self.other(name) for ref, name in self.book.named.items()
                if ref not in (self.ref, dead_letter_of(self.ref)) and self.memory.peek(ref, 0, 1)}

    def other(self, target: Hashable) -> PartitionStore:
        return PartitionStore(self.memory, as_ref(target), self.book)

    def peek(self, from_seq: int, count: int) -> tuple[StoredMessage, ...]:
        return self.memory.peek(self.ref, from_seq, count, frozenset({MessageState.ACTIVE}))

    def count(self, state: MessageState) -> int:
        return len(self.memory.peek(self.ref, 0, _ALL, frozenset({state})))

    def counts(self) -> tuple[int, int, int]:
        return self.count(MessageState.ACTIVE), self.count(MessageState.SCHEDULED), self.count(MessageState.DEFERRED)

    def _row(self, m: StoredMessage) -> Row:
        return Row(m.record, m.lock_token, m.locked_until, m.lock_owner, self.book.edits.get(m.record.annotations),
                   self.book.origin.get((self.ref, m.record.sequence_number), 0))

    # -- writes --------------------------------------------------------------------------------

    # What another node sharing the store, or a crash, does behind a core's back: store operations too.

    def remember_ids(self, *entries: tuple[str, int]) -> None:
        """Another node accepted messages with these ids (its copies are not in this partition)."""
        self.apply((RememberMessageIds(tuple(entries)),))

    def lock_elsewhere(self, sequence_number: int, token: uuid.UUID, locked_until: int, *, now: int = 0,
                       owner: str = "elsewhere") -> None:
        """Another node claims this row (its delivery counts, as any claim's); a row locked now is
        claimed when its lock lapses (that node's clock is past it)."""
        row = self.rows[sequence_number]
        at = max(now, row.locked_until or 0) if row.lock_token is not None else now
        (claimed,) = self.apply((Claim(at, locked_until, owner, (token,), (sequence_number,), row.record.state),))
        assert isinstance(claimed, Claimed) and len(claimed.messages) == 1, claimed

    def complete_elsewhere(self, sequence_number: int, *, now: int = 0) -> None:
        """Another node receives this row and completes it."""
        token = uuid.uuid4()
        self.lock_elsewhere(sequence_number, token, now + 1, now=now)
        (settled,) = self.apply((Settle(now, (SettleItem(sequence_number, token, Outcome.COMPLETE),)),))
        assert isinstance(settled, Settled) and settled.applied == (True,), settled

    def lapsed_deliveries(self, sequence_number: int, count: int, *, now: int = 0) -> None:
        """``count`` deliveries whose locks lapsed without a settlement (a receiver's node crashed)."""
        for _ in range(count):
            self.lock_elsewhere(sequence_number, uuid.uuid4(), now, now=now)

    def lock_session_elsewhere(self, session_id: str, token: uuid.UUID, locked_until: int, *, now: int = 0) -> None:
        (claimed,) = self.apply((ClaimSession(now, token, locked_until, "elsewhere", session_id),))
        assert isinstance(claimed, SessionClaimed) and claimed.session_id == session_id, claimed

    def numbers_given(self, last: int, *, now: int = 0) -> None:
        """The partition's counter reaches ``last`` (messages another node stored and removed)."""
        count = last - self.last
        if count > 0:
            blank = record_for(draft(), now, None)
            self.apply((Append((blank,) * count), Purge(now, last)))
            for n in range(last - count + 1, last + 1):
                self.gone.pop(n, None)

    def apply(self, ops: tuple[StoreOp, ...]) -> tuple[OpResult, ...]:
        """Apply a core's operations as its runner does (SettleFenced: nothing applied)."""
        bound = [bind(self._named(op), self.ref, self.book.encode) for op in ops]
        before = {ref: {m.record.sequence_number: m.record for m in self.memory.peek(ref, 0, _ALL)}
                  for ref in self._touched(bound)}
        results = self.memory.apply(bound)
        for op, result in zip(bound, results, strict=True):
            self._record(op, result, before)
        self._record_origins(bound, results, before)
        return results

    def _named(self, op: StoreOp) -> StoreOp:
        if isinstance(op, AppendTo):
            self.book.named.setdefault(as_ref(op.target), op.target)
            return replace(op, target=as_ref(op.target),
                           numbered_by=None if op.numbered_by is None else as_ref(op.numbered_by))
        if isinstance(op, Settle):
            for item in op.items:
                if item.target is not None:
                    self.book.named.setdefault(as_ref(item.target), item.target)
        if isinstance(op, MoveMessages) and op.target is not None:
            self.book.named.setdefault(as_ref(op.target), op.target)
        return op

    def _touched(self, ops: list[StoreOp]) -> set[PartitionRef]:
        refs = {self.ref, dead_letter_of(self.ref)}
        for op in ops:
            if isinstance(op, Settle):
                refs |= {op.dead_letter_target(item) for item in op.items}
            if isinstance(op, MoveMessages) and op.target is not None:
                refs.add(as_ref(op.target))
        return refs

    def _record(self, op: StoreOp, result: OpResult, before: dict[PartitionRef, dict[int, MessageRecord]]) -> None:
        gone = self.book.gone.setdefault(op.ref, {}) if hasattr(op, "ref") else {}
        if isinstance(op, Append) and isinstance(result, Appended):
            ids = self.book.appended_ids.setdefault(op.ref, [])
            ids.extend((m.message_id, m.enqueued_time) for m, n in zip(op.messages, result.sequence_numbers,
                                                                        strict=True) if n and m.message_id is not None)
        elif isinstance(op, Settle) and isinstance(result, Settled):
            for item, ok in zip(op.items, result.applied, strict=True):
                if ok and item.outcome is Outcome.COMPLETE:
                    gone[item.sequence_number] = "complete"
                elif ok and item.outcome is Outcome.DEAD_LETTER and item.target is not None:
                    gone[item.sequence_number] = "forwarded"
        elif isinstance(op, MoveMessages) and isinstance(result, Moved):
            for moved, new in zip(op.items, result.sequence_numbers, strict=True):
                if new is None:
                    continue
                if op.target is not None:
                    gone[moved.sequence_number] = "moved"
                    self.book.moved_out.setdefault(op.ref, []).append(
                        (op.target, before[op.ref][moved.sequence_number], moved))
                    self.book.origin[(as_ref(op.target), new)] = moved.sequence_number
                elif op.to_dead_letter:
                    self.book.origin[(dead_letter_of(op.ref), new)] = moved.sequence_number
                else:
                    gone[moved.sequence_number] = "dropped"
        elif isinstance(op, Purge):
            after = {m.record.sequence_number for m in self.memory.peek(op.ref, 0, _ALL)}
            through = _ALL if op.through_sequence_number is None else op.through_sequence_number
            for n in before.get(op.ref, {}):
                if n not in after and n <= through:
                    gone.setdefault(n, "purged")
        elif isinstance(op, CancelScheduled) and isinstance(result, Unscheduled):
            if result.missing:
                self.book.refused_cancels.setdefault(op.ref, []).append(result.missing)
            else:
                for n in op.sequence_numbers:
                    gone[n] = "cancelled"
        elif isinstance(op, Restore):
            for m in op.messages:
                gone.pop(m.sequence_number, None)

    def _record_origins(self, ops: list[StoreOp], results: tuple[OpResult, ...],
                        before: dict[PartitionRef, dict[int, MessageRecord]]) -> None:
        """Which number each dead letter a settlement made had here: one kept is its own; the others
        take the target's next numbers in the order of the items."""
        pending: dict[PartitionRef, list[int]] = {}
        placed: dict[PartitionRef, set[int]] = {}
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, Append) and isinstance(result, Appended):
                placed.setdefault(op.ref, set()).update(result.sequence_numbers)
            elif isinstance(op, MoveMessages) and isinstance(result, Moved):
                target = as_ref(op.target) if op.target is not None else dead_letter_of(op.ref)
                placed.setdefault(target, set()).update(n for n in result.sequence_numbers if n is not None)
            elif isinstance(op, Settle) and isinstance(result, Settled):
                for item, ok in zip(op.items, result.applied, strict=True):
                    if not ok or item.outcome is not Outcome.DEAD_LETTER:
                        continue
                    target = op.dead_letter_target(item)
                    if item.keep_sequence_number:
                        self.book.origin[(target, item.sequence_number)] = item.sequence_number
                        placed.setdefault(target, set()).add(item.sequence_number)
                    else:
                        pending.setdefault(target, []).append(item.sequence_number)
        for target, origins in pending.items():
            after = {m.record.sequence_number for m in self.memory.peek(target, 0, _ALL)}
            new = sorted(after - set(before.get(target, {})) - placed.get(target, set()))
            for number, origin in zip(new, origins, strict=False):
                self.book.origin[(target, number)] = origin


class Harness:
    """Runs decide like the actor: effects queue in order; ``step`` carries them out one by one."""

    def __init__(self, view: View, store: PartitionStore | None = None, now: int = 0) -> None:
        self.view = view
        self.store = store or PartitionStore()
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
        try:
            results = self.store.apply(ops)
        except SettleFenced as fenced:  # rolled back by the store, as the runner answers it
            return self.run(StoreFailed(batch_id, str(fenced), (fenced.op_index, fenced.item_index)))
        return self.run(StoreResults(batch_id, results))

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
