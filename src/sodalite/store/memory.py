"""A messaging store kept in dictionaries: for tests, development and fault injection.

It enforces the same rules as the durable adapters so that the contract suite can hold every
adapter to one behaviour:

* ``apply`` is all-or-nothing: the batch is applied to copies, which replace the live state only
  when every operation succeeded;
* appending a sequence number that the partition already holds fails the whole batch (the
  durable adapters reject it as a primary-key violation);
* every integer must fit a signed 64-bit column, and every message id of the duplicate-detection
  history must be encodable as UTF-8 (a lone surrogate is not);
* entity properties are stored as JSON text and decoded afresh on every load, so what comes back
  is what a durable adapter would return (tuples become lists, a caller mutating a loaded dict
  changes nothing);
* entity paths compare case-insensitively (ASCII only, like SQLite's ``NOCASE``), both for
  entity definitions and for the partitions that hold their messages and duplicate-detection
  history; deleting an entity also deletes its sub-queues' partitions (``<path>/$...``).

* the store port v2 operations and reads are plain loops over these dictionaries, written to be
  obviously right rather than fast: this adapter is the reference the contract suite's
  differential test holds the durable adapters to (counts and next-due times are recomputed
  from the messages on every read).

Nothing survives the process, of course: a new ``MemoryStore`` starts empty.
"""

from __future__ import annotations

import json
import string
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import assert_never

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store.port import (
    SUBSCRIPTION_KIND,
    Activate,
    Activated,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    Done,
    EntityRecord,
    ForgetMessageIds,
    ForgetMoveKeys,
    IdleDeleted,
    IdsClaimed,
    MessageOp,
    Moved,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionCounts,
    PartitionMeta,
    PartitionRef,
    PartitionStats,
    PruneMessageIds,
    Purge,
    Purged,
    PutEntity,
    PutRule,
    PutSessionState,
    RecordActivity,
    RecordOp,
    ReleaseSession,
    RememberMessageIds,
    RememberMoveKeys,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    RuleWritten,
    SessionClaimed,
    Settle,
    Settled,
    StoredMessage,
    StoreOp,
    Unscheduled,
    check_all_or_none,
    numbering_base,
    prepare_batch,
    split_rules,
)

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_PartitionKey = tuple[str, int]


def _fold(path: str) -> str:
    """The comparison key of an entity path: ASCII letters lower-cased, like SQLite's NOCASE."""
    return path.translate(_ASCII_LOWER)


def _encode_properties(entity: EntityRecord, value: object = None) -> str:
    """Entity properties (or ``value``, a rule of the entity) as the JSON text every adapter stores;
    StoreUnavailable if not JSON-able."""
    try:
        return json.dumps(entity.properties if value is None else value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreUnavailable(
            f"cannot store entity {entity.path!r}: its properties are not JSON-serializable ({exc})"
        ) from exc


def _apply_rule(rules: dict[tuple[str, str], tuple[int, str]], op: PutRule | DeleteRule) -> RuleWritten:
    _check_text(op.subscription, "subscription path")
    _check_text(op.name, "rule name")
    key = (_fold(op.subscription), _fold(op.name))
    if isinstance(op, DeleteRule):
        return RuleWritten(rules.pop(key, None) is not None)
    encoded = _encode_properties(EntityRecord(op.subscription, SUBSCRIPTION_KIND, {}), op.rule)
    if op.replace:
        if key not in rules:
            return RuleWritten(False)
        rules[key] = (rules[key][0], encoded)
        return RuleWritten(True)
    if key in rules:
        return RuleWritten(False)
    rules[key] = (max((p for (s, _), (p, _) in rules.items() if s == key[0]), default=0) + 1, encoded)
    return RuleWritten(True)


def _check_int64(value: int | None, what: str) -> None:
    if value is not None and not _INT64_MIN <= value <= _INT64_MAX:
        raise StoreUnavailable(f"{what} {value} does not fit a signed 64-bit integer")


def _check_text(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreUnavailable(f"{what} {value!r} cannot be stored as UTF-8 text ({exc})") from exc


def _expired(m: MessageRecord, now: int) -> bool:
    return m.expires_at is not None and m.expires_at <= now


def _key(ref: PartitionRef) -> _PartitionKey:
    _check_int64(ref.partition, f"partition number of {ref.entity!r}")
    return (_fold(ref.entity), ref.partition)


def _check_record(ref: PartitionRef, m: MessageRecord) -> None:
    where = f"message {m.sequence_number} of {ref.entity!r} partition {ref.partition}:"
    _check_int64(m.sequence_number, f"{where} sequence_number")
    _check_int64(m.enqueued_time, f"{where} enqueued_time")
    _check_int64(m.time_to_live, f"{where} time_to_live")
    _check_int64(m.expires_at, f"{where} expires_at")
    _check_int64(m.scheduled_enqueue_time, f"{where} scheduled_enqueue_time")
    _check_int64(m.delivery_count, f"{where} delivery_count")
    _check_int64(m.priority, f"{where} priority")
    _check_int64(m.annotation_count, f"{where} annotation_count")


@dataclass(slots=True)
class _Partition:
    messages: dict[int, MessageRecord] = field(default_factory=dict)
    last_sequence_number: int = 0
    history: dict[str, int] = field(default_factory=dict)  # duplicate detection: message id -> seen at
    session_states: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # id -> (state, updated at)
    move_keys: set[str] = field(default_factory=set)
    locks: dict[int, _Lock] = field(default_factory=dict)  # sequence number -> lock (lapsed ones too)
    session_locks: dict[str, _Lock] = field(default_factory=dict)  # session id -> lock

    def copy(self) -> _Partition:
        return _Partition(dict(self.messages), self.last_sequence_number, dict(self.history),
                          dict(self.session_states), set(self.move_keys), dict(self.locks),
                          dict(self.session_locks))

    def stored(self, n: int) -> StoredMessage:
        lock = self.locks.get(n)
        if lock is None:
            return StoredMessage(self.messages[n], None, None, None)
        return StoredMessage(self.messages[n], lock.token, lock.until, lock.owner)

    def locked(self, n: int, now: int) -> bool:
        lock = self.locks.get(n)
        return lock is not None and lock.until > now

    def holds(self, n: int, token: uuid.UUID, now: int) -> bool:
        """The fencing rule: the row exists, carries ``token``, and its lock has not lapsed."""
        lock = self.locks.get(n)
        return n in self.messages and lock is not None and lock.token == token and lock.until > now

    def append(self, m: MessageRecord, base: int) -> int:
        """Store ``m`` under the next number: above the high-water mark and above ``base``
        (:func:`~sodalite.store.port.numbering_base`)."""
        n = max(self.last_sequence_number, base) + 1
        self.messages[n] = replace(m, sequence_number=n)
        self.locks.pop(n, None)
        self.last_sequence_number = n
        return n

    def keep(self, records: list[MessageRecord], base: int) -> list[int]:
        """Store dead letters kept in their dead-letter partition under their own numbers; one this
        partition holds already (numbered here by an earlier release) gets a number above the
        high-water mark, ``base`` and every number of ``records``, in order. The high-water mark
        becomes the greatest number stored. The numbers, in order."""
        above = max([self.last_sequence_number, base, *(m.sequence_number for m in records)])
        numbers = []
        for m in records:
            n = m.sequence_number
            if n in self.messages:
                above += 1
                n = above
            self.messages[n] = replace(m, sequence_number=n)
            self.locks.pop(n, None)
            self.last_sequence_number = max(self.last_sequence_number, n)
            numbers.append(n)
        return numbers

    def delete(self, n: int) -> MessageRecord | None:
        self.locks.pop(n, None)
        return self.messages.pop(n, None)


@dataclass(frozen=True, slots=True)
class _Lock:
    token: uuid.UUID
    until: int
    owner: str


@dataclass(frozen=True, slots=True)
class _StoredEntity:
    path: str
    kind: str
    properties_json: str


class MemoryStore:
    """The store port over plain dictionaries; see the module docstring for the rules it enforces."""

    def __init__(self) -> None:
        self._opened = False
        self._closed = False
        self._partitions: dict[_PartitionKey, _Partition] = {}
        self._entities: dict[str, _StoredEntity] = {}  # keyed by _fold(path)
        # Subscriptions' rules: (_fold(subscription path), _fold(rule name)) -> (position, rule JSON)
        self._rules: dict[tuple[str, str], tuple[int, str]] = {}
        # AutoDeleteOnIdle registrations: (_fold(path), node) -> (last activity, receivers, refreshed at)
        self._activity: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._fail_next: Exception | None = None

    # -- test hooks -------------------------------------------------------------------------------

    def fail_next_apply(self, exc: Exception) -> None:
        """Make the next :meth:`apply` raise StoreUnavailable (caused by ``exc``) and apply nothing."""
        self._fail_next = exc

    # -- the port ---------------------------------------------------------------------------------

    def open(self) -> None:
        if self._closed:
            raise StoreUnavailable("the memory store is closed")
        self._opened = True

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        self._require_open()
        batch = prepare_batch(batch)
        if self._fail_next is not None:
            exc, self._fail_next = self._fail_next, None
            if isinstance(exc, StoreUnavailable):
                raise exc
            raise StoreUnavailable(f"injected store failure: {exc}") from exc

        partitions = dict(self._partitions)
        entities = dict(self._entities)
        activity = dict(self._activity)
        rules = dict(self._rules)
        copied: set[_PartitionKey] = set()

        def writable(ref: PartitionRef) -> _Partition:
            key = _key(ref)
            if key not in copied:
                old = partitions.get(key)
                partitions[key] = old.copy() if old else _Partition()
                copied.add(key)
            return partitions[key]

        results: list[OpResult] = []
        claims: dict[tuple[_PartitionKey, str], uuid.UUID] = {}  # ids taken by this batch's ClaimMessageIds
        for index, op in enumerate(batch):
            if isinstance(op, DeleteIdleEntity):
                folded = _fold(op.path)
                rows = [row for (path, _), row in activity.items() if path == folded]
                busy = any(last > op.active_after or (receivers > 0 and refreshed > op.live_after)
                           for last, receivers, refreshed in rows)
                deleted = not busy and entities.pop(folded, None) is not None
                if deleted:
                    for gone in [k for k in activity if k[0] == folded]:
                        del activity[gone]
                results.append(IdleDeleted(deleted))
                continue
            if isinstance(op, PutRule | DeleteRule):
                results.append(_apply_rule(rules, op))
                continue
            if isinstance(op, AppendTo):
                op = op.as_append()
            if not isinstance(op, RecordOp):
                results.append(self._apply_message_op(op, writable, claims))
                check_all_or_none(index, op, results[-1])  # raising leaves the store as it was
                continue
            results.append(Done())
            if isinstance(op, PutEntity):
                e = op.entity
                properties, whole_set = split_rules(e)
                entities[_fold(e.path)] = _StoredEntity(e.path, e.kind, _encode_properties(e, properties))
                if whole_set is not None:
                    folded = _fold(e.path)
                    for gone in [k for k in rules if k[0] == folded]:
                        del rules[gone]
                    for position, (name, rule) in enumerate(whole_set, start=1):
                        rules[(folded, _fold(name))] = (position, _encode_properties(e, rule))
            elif isinstance(op, DeleteEntity):
                folded = _fold(op.path)
                sub_queues = folded + "/$"
                entities.pop(folded, None)
                for rule_key in [k for k in rules if k[0] == folded]:
                    del rules[rule_key]
                for key in [k for k in partitions if k[0] == folded or k[0].startswith(sub_queues)]:
                    del partitions[key]
                    copied.discard(key)
                for activity_key in [k for k in activity if k[0] == folded]:
                    del activity[activity_key]
            elif isinstance(op, RecordActivity):
                _check_int64(op.now, "now")
                for entry in op.entries:
                    _check_text(entry.path, "entity path")
                    _check_int64(entry.last_activity, f"last activity of {entry.path!r}")
                    _check_int64(entry.receivers, f"receivers of {entry.path!r}")
                    row = (_fold(entry.path), op.node)
                    last = max(entry.last_activity, activity[row][0]) if row in activity else entry.last_activity
                    activity[row] = (last, entry.receivers, op.now)
            elif isinstance(op, RememberMessageIds):
                if not op.entries:
                    continue
                part = writable(op.ref)
                for message_id, seen_at in op.entries:
                    _check_text(message_id, f"message id of {op.ref.entity!r}")
                    _check_int64(seen_at, f"seen-at time of message id {message_id!r}")
                    part.history[message_id] = seen_at
            elif isinstance(op, ForgetMessageIds):
                if not op.message_ids:
                    continue
                part = writable(op.ref)
                if op.seen_before is not None:
                    _check_int64(op.seen_before, "seen_before")
                for message_id in op.message_ids:
                    _check_text(message_id, f"message id of {op.ref.entity!r}")
                    seen = part.history.get(message_id)
                    if seen is not None and (op.seen_before is None or seen < op.seen_before):
                        del part.history[message_id]
            elif isinstance(op, PutSessionState):
                part = writable(op.ref)
                _check_text(op.session_id, f"session id of {op.ref.entity!r}")
                _check_int64(op.updated_at, f"update time of session {op.session_id!r}")
                if op.state is None:
                    part.session_states.pop(op.session_id, None)
                else:
                    part.session_states[op.session_id] = (bytes(op.state), op.updated_at)
            elif isinstance(op, RememberMoveKeys | ForgetMoveKeys):
                if not op.keys:
                    continue
                part = writable(op.ref)
                for move_key in op.keys:
                    _check_text(move_key, f"move key of {op.ref.entity!r}")
                if isinstance(op, RememberMoveKeys):
                    part.move_keys.update(op.keys)
                else:
                    part.move_keys.difference_update(op.keys)
            else:
                assert_never(op)

        # Every operation succeeded: publish the new state in one step.
        self._partitions = partitions
        self._entities = entities
        self._activity = activity
        self._rules = rules
        return tuple(results)

    @staticmethod
    def _apply_message_op(op: MessageOp, writable: Callable[[PartitionRef], _Partition],
                  claims: dict[tuple[_PartitionKey, str], uuid.UUID]) -> OpResult:
        if isinstance(op, Append):
            part = writable(op.ref)
            numbers = []
            gate_ids = (None,) * len(op.messages) if op.gate is None else op.gate.message_ids
            for m, gate_id in zip(op.messages, gate_ids, strict=True):
                _check_record(op.ref, replace(m, sequence_number=0))
                if (op.gate is not None and gate_id is not None
                        and claims.get((_key(op.gate.ref), gate_id)) != op.gate.claim):
                    numbers.append(0)  # a duplicate: its id was not taken by this claim
                    continue
                n = part.append(m, numbering_base(op.ref))
                if op.numbered_by is not None:
                    # above both counters, both raised: it takes nothing either partition holds or gave
                    counter = writable(op.numbered_by)
                    n = max(n - 1, counter.last_sequence_number, numbering_base(op.numbered_by)) + 1
                    part.messages[n] = replace(part.messages.pop(part.last_sequence_number), sequence_number=n)
                    part.last_sequence_number = counter.last_sequence_number = n
                numbers.append(n)
            _check_int64(part.last_sequence_number, f"last sequence number of {op.ref.entity!r}")
            return Appended(tuple(numbers))
        if isinstance(op, PruneMessageIds):
            _check_int64(op.seen_before, "seen_before")
            part = writable(op.ref)
            for message_id in [m for m, at in part.history.items() if at < op.seen_before]:
                del part.history[message_id]
            return Done()
        if isinstance(op, ClaimMessageIds):
            part = writable(op.ref)
            _check_int64(op.now, "now")
            _check_int64(op.window_ms, "window_ms")
            fresh: list[bool] = []
            for message_id in op.message_ids:
                _check_text(message_id, f"message id of {op.ref.entity!r}")
                seen_at = part.history.get(message_id)
                if (seen_at is not None and seen_at >= op.now - op.window_ms):
                    fresh.append(False)
                    continue
                part.history[message_id] = op.now
                claims[(_key(op.ref), message_id)] = op.claim
                fresh.append(True)
            return IdsClaimed(tuple(fresh))
        if isinstance(op, Claim):
            part = writable(op.ref)
            wanted = None if op.sequence_numbers is None else set(op.sequence_numbers)
            taken: list[StoredMessage] = []
            for n in sorted(part.messages):
                if len(taken) == len(op.tokens):
                    break
                m = part.messages[n]
                if (m.state != op.state or part.locked(n, op.now) or _expired(m, op.now)
                        or (op.session_id is not None and m.session_id != op.session_id)
                        or (wanted is not None and n not in wanted)):
                    continue
                part.messages[n] = replace(m, delivery_count=m.delivery_count + 1)
                part.locks[n] = _Lock(op.tokens[len(taken)], op.locked_until, op.owner)
                taken.append(part.stored(n))
            return Claimed(tuple(taken))
        if isinstance(op, Settle):
            part = writable(op.ref)
            applied: list[bool] = []
            kept: dict[PartitionRef, list[MessageRecord]] = {}  # dead letters keeping their numbers, per target
            for item in op.items:
                n = item.sequence_number
                if not part.holds(n, item.lock_token, op.now):
                    applied.append(False)
                    continue
                applied.append(True)
                m = part.messages[n]
                if item.annotations is not None:
                    m = replace(m, annotations=item.annotations, annotation_count=item.annotation_count)
                if item.tail is not None:
                    m = replace(m, tail=item.tail)
                del part.locks[n]
                if item.outcome is Outcome.COMPLETE:
                    part.delete(n)
                elif item.outcome is Outcome.ABANDON:
                    part.messages[n] = m
                elif item.outcome is Outcome.RELEASE:
                    part.messages[n] = replace(m, delivery_count=max(0, m.delivery_count - 1))
                elif item.outcome is Outcome.DEFER:
                    # a deferral is not a delivery attempt: the claim's count is given back, as by RELEASE
                    part.messages[n] = replace(m, state=MessageState.DEFERRED,
                                               delivery_count=max(0, m.delivery_count - 1))
                elif item.outcome is Outcome.DEAD_LETTER:
                    target = op.dead_letter_target(item)
                    part.delete(n)
                    copy = replace(m, state=MessageState.ACTIVE, expires_at=item.expires_at,
                                   enqueued_time=m.enqueued_time if item.enqueued_time is None else item.enqueued_time,
                                   delivery_count=0 if item.reset_delivery_count
                                   else max(0, m.delivery_count - 1) if item.give_back_delivery
                                   else m.delivery_count)
                    if item.keep_sequence_number:
                        kept.setdefault(target, []).append(copy)
                    else:
                        writable(target).append(copy, numbering_base(target))
                else:
                    assert_never(item.outcome)
            for ref, records in kept.items():
                writable(ref).keep(records, numbering_base(ref))
            return Settled(tuple(applied))
        if isinstance(op, RenewLocks):
            part = writable(op.ref)
            renewed: list[bool] = []
            for n, token in op.items:
                ok = part.holds(n, token, op.now)
                if ok:
                    part.locks[n] = replace(part.locks[n], until=op.locked_until)
                renewed.append(ok)
            return Renewed(tuple(renewed))
        if isinstance(op, MoveMessages):
            part = writable(op.ref)
            destination = op.destination
            moved: list[int | None] = []
            keeping: list[tuple[int, MessageRecord]] = []  # (place in the result, row) kept in the target
            for move in op.items:
                n = move.sequence_number
                if n not in part.messages or part.locked(n, op.now):
                    moved.append(None)
                    continue
                gone = part.delete(n)
                assert gone is not None
                if destination is None:
                    moved.append(n)
                    continue
                if move.annotations is not None:
                    gone = replace(gone, annotations=move.annotations, annotation_count=move.annotation_count)
                if move.tail is not None:
                    gone = replace(gone, tail=move.tail)
                gone = replace(gone, state=MessageState.ACTIVE, expires_at=move.expires_at,
                               enqueued_time=gone.enqueued_time if move.enqueued_time is None else move.enqueued_time,
                               delivery_count=0 if move.reset_delivery_count else gone.delivery_count)
                if op.keep_sequence_numbers:
                    keeping.append((len(moved), gone))
                    moved.append(None)
                else:
                    moved.append(writable(destination).append(gone, numbering_base(destination)))
            if keeping and destination is not None:
                numbers = writable(destination).keep([m for _, m in keeping], numbering_base(destination))
                for (index, _), number in zip(keeping, numbers, strict=True):
                    moved[index] = number
            return Moved(tuple(moved))
        if isinstance(op, Activate):
            part = writable(op.ref)
            due = sorted(
                (m.scheduled_enqueue_time, n) for n, m in part.messages.items()
                if m.state == MessageState.SCHEDULED and m.scheduled_enqueue_time is not None
                and m.scheduled_enqueue_time <= op.now
            )[:max(op.limit, 0)]
            for _, n in due:
                part.messages[n] = replace(part.messages[n], state=MessageState.ACTIVE)
            return Activated(tuple(part.stored(n) for _, n in due))
        if isinstance(op, Purge):
            part = writable(op.ref)
            through = op.through_sequence_number
            doomed = [n for n in part.messages
                      if (through is None or n <= through) and not part.locked(n, op.now)]
            for n in doomed:
                part.delete(n)
            return Purged(len(doomed))
        if isinstance(op, Restore):
            part = writable(op.ref)
            restored: list[bool] = []
            for m in op.messages:
                _check_record(op.ref, m)
                n = m.sequence_number
                if n <= 0 or n in part.messages:
                    restored.append(False)
                    continue
                part.messages[n] = m
                part.locks.pop(n, None)
                part.last_sequence_number = max(part.last_sequence_number, n)
                restored.append(True)
            return Restored(tuple(restored))
        if isinstance(op, CancelScheduled):
            _check_int64(op.now, "now")
            part = writable(op.ref)
            asked = list(dict.fromkeys(op.sequence_numbers))
            for n in asked:
                _check_int64(n, "sequence number")
            missing = tuple(n for n in asked if n not in part.messages
                            or part.messages[n].state != MessageState.SCHEDULED or part.locked(n, op.now))
            if not missing:
                for n in asked:
                    part.delete(n)
            return Unscheduled(missing)
        if isinstance(op, ClaimSession):
            part = writable(op.ref)

            def free(sid: str) -> bool:
                lock = part.session_locks.get(sid)
                return lock is None or lock.until <= op.now

            chosen = op.session_id
            if chosen is None:
                for n in sorted(part.messages):
                    m = part.messages[n]
                    if (m.session_id is not None and m.state == MessageState.ACTIVE
                            and not part.locked(n, op.now) and not _expired(m, op.now) and free(m.session_id)):
                        chosen = m.session_id
                        break
            if chosen is None or not free(chosen):
                return SessionClaimed(None)
            _check_text(chosen, f"session id of {op.ref.entity!r}")
            part.session_locks[chosen] = _Lock(op.token, op.locked_until, op.owner)
            return SessionClaimed(chosen)
        if isinstance(op, RenewSession):
            part = writable(op.ref)
            lock = part.session_locks.get(op.session_id)
            ok = lock is not None and lock.token == op.token and lock.until > op.now
            if ok:
                assert lock is not None
                part.session_locks[op.session_id] = replace(lock, until=op.locked_until)
            return Renewed((ok,))
        if isinstance(op, ReleaseSession):
            part = writable(op.ref)
            lock = part.session_locks.get(op.session_id)
            ok = lock is not None and lock.token == op.token
            if ok:
                del part.session_locks[op.session_id]
            return Renewed((ok,))
        assert_never(op)

    def load_entities(self) -> list[EntityRecord]:
        self._require_open()
        records = []
        for folded, e in sorted(self._entities.items()):
            properties = json.loads(e.properties_json)
            if e.kind == SUBSCRIPTION_KIND:
                mine = sorted((position, name, rule) for (sub, name), (position, rule) in self._rules.items()
                              if sub == folded)
                properties["Rules"] = [json.loads(rule) for _, _, rule in mine]
            records.append(EntityRecord(path=e.path, kind=e.kind, properties=properties))
        return records

    def stats(self, ref: PartitionRef) -> PartitionStats:
        self._require_open()
        part = self._partitions.get(_key(ref))
        if part is None:
            return PartitionStats(message_count=0, size_in_bytes=0)
        return PartitionStats(
            message_count=len(part.messages),
            size_in_bytes=sum(m.size for m in part.messages.values()),
        )

    # -- version 2 reads: plain scans, the reference the durable adapters are held to -------------

    def peek(self, ref: PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[StoredMessage, ...]:
        part = self._read(ref)
        found: list[StoredMessage] = []
        for n in sorted(part.messages):
            if len(found) >= count:
                break
            m = part.messages[n]
            if (n >= from_sequence_number and (states is None or m.state in states)
                    and (session_id is None or m.session_id == session_id)):
                found.append(part.stored(n))
        return tuple(found)

    def session_ids(self, ref: PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        part = self._read(ref)
        return tuple(sorted({m.session_id for m in part.messages.values()
                             if m.session_id is not None and m.state in states}))

    def fetch(self, ref: PartitionRef, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        part = self._read(ref)
        return tuple(part.stored(n) for n in sorted(set(sequence_numbers)) if n in part.messages)

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        part = self._read(ref)
        states = [m.state for m in part.messages.values()]
        return PartitionCounts(
            active=states.count(MessageState.ACTIVE),
            scheduled=states.count(MessageState.SCHEDULED),
            deferred=states.count(MessageState.DEFERRED),
            size_in_bytes=sum(m.size for m in part.messages.values()),
            last_sequence_number=part.last_sequence_number,
            first_sequence_number=min(part.messages, default=None),
        )

    def next_due_many(self, refs: Sequence[PartitionRef], now: int) -> tuple[int | None, ...]:
        return tuple(self.next_due(ref, now) for ref in refs)

    def counts_many(self, refs: Sequence[PartitionRef]) -> tuple[PartitionCounts, ...]:
        return tuple(replace(self.counts(ref), first_sequence_number=None) for ref in refs)

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        part = self._read(ref)
        times: list[int] = []
        for n, m in part.messages.items():
            if m.state == MessageState.SCHEDULED and m.scheduled_enqueue_time is not None:
                times.append(m.scheduled_enqueue_time)
            lock = part.locks.get(n)
            if lock is not None and lock.until > now:
                times.append(lock.until)
            elif m.expires_at is not None:
                times.append(m.expires_at)
        times.extend(lock.until for lock in part.session_locks.values() if lock.until > now)
        return min(times, default=None)

    def partition_meta(self, ref: PartitionRef) -> PartitionMeta:
        part = self._read(ref)
        return PartitionMeta(
            counts=self.counts(ref),
            duplicate_history=tuple(sorted(part.history.items(), key=lambda item: (item[1], item[0]))),
            session_states=tuple((sid, state, at) for sid, (state, at) in sorted(part.session_states.items())),
            move_keys=tuple(sorted(part.move_keys)),
        )

    def _read(self, ref: PartitionRef) -> _Partition:
        self._require_open()
        return self._partitions.get(_key(ref)) or _Partition()

    def maintain(self) -> bool:
        return True  # memory is never full here

    def close(self) -> None:
        self._closed = True
        self._partitions = {}
        self._entities = {}
        self._rules = {}

    # -- internals --------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise StoreUnavailable("the memory store is closed")
        if not self._opened:
            raise StoreUnavailable("the memory store is not open: call open() first")
