"""The memory store's state (partitions of plain dictionaries) and one handler per store operation, in
a table (:data:`HANDLERS`): plain loops, written to be obviously right rather than fast."""

from __future__ import annotations

import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, assert_never

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageRecord, MessageState
from sodalite.store import port

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

_PartitionKey = tuple[str, int]


def _fold(path: str) -> str:
    """The comparison key of an entity path: ASCII letters lower-cased, like SQLite's NOCASE."""
    return path.translate(_ASCII_LOWER)




def _apply_rule(rules: dict[tuple[str, str], tuple[int, str]], op: port.PutRule | port.DeleteRule) -> port.RuleWritten:
    _check_text(op.subscription, "subscription path")
    _check_text(op.name, "rule name")
    key = (_fold(op.subscription), _fold(op.name))
    if isinstance(op, port.DeleteRule):
        return port.RuleWritten(rules.pop(key, None) is not None)
    encoded = port.encode_properties(port.EntityRecord(op.subscription, port.SUBSCRIPTION_KIND, {}), op.rule)
    if op.replace:
        if key not in rules:
            return port.RuleWritten(False)
        rules[key] = (rules[key][0], encoded)
        return port.RuleWritten(True)
    if key in rules:
        return port.RuleWritten(False)
    rules[key] = (max((p for (s, _), (p, _) in rules.items() if s == key[0]), default=0) + 1, encoded)
    return port.RuleWritten(True)


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


def _key(ref: port.PartitionRef) -> _PartitionKey:
    _check_int64(ref.partition, f"partition number of {ref.entity!r}")
    return (_fold(ref.entity), ref.partition)


def _check_record(ref: port.PartitionRef, m: MessageRecord) -> None:
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

    def stored(self, n: int) -> port.StoredMessage:
        lock = self.locks.get(n)
        if lock is None:
            return port.StoredMessage(self.messages[n], None, None, None)
        return port.StoredMessage(self.messages[n], lock.token, lock.until, lock.owner)

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


class _Batch:
    """A batch's working copy of the store: the dictionaries are copied, and a partition is copied
    the first time the batch writes it (:meth:`writable`), so a batch that raises changes nothing."""

    def __init__(self, partitions: dict[_PartitionKey, _Partition], entities: dict[str, _StoredEntity],
                 activity: dict[tuple[str, str], tuple[int, int, int]],
                 rules: dict[tuple[str, str], tuple[int, str]]) -> None:
        self.partitions = dict(partitions)
        self.entities = dict(entities)
        self.activity = dict(activity)
        self.rules = dict(rules)
        self.copied: set[_PartitionKey] = set()
        self.claims: dict[tuple[_PartitionKey, str], uuid.UUID] = {}  # ids taken by this batch's ClaimMessageIds

    def writable(self, ref: port.PartitionRef) -> _Partition:
        key = _key(ref)
        if key not in self.copied:
            old = self.partitions.get(key)
            self.partitions[key] = old.copy() if old else _Partition()
            self.copied.add(key)
        return self.partitions[key]


# ---- one handler per operation -------------------------------------------------------------------------


def _append(t: _Batch, op: port.Append) -> port.OpResult:
    part = t.writable(op.ref)
    numbers = []
    gate_ids = (None,) * len(op.messages) if op.gate is None else op.gate.message_ids
    for m, gate_id in zip(op.messages, gate_ids, strict=True):
        _check_record(op.ref, replace(m, sequence_number=0))
        if (op.gate is not None and gate_id is not None
                and t.claims.get((_key(op.gate.ref), gate_id)) != op.gate.claim):
            numbers.append(0)  # a duplicate: its id was not taken by this claim
            continue
        n = part.append(m, port.numbering_base(op.ref))
        if op.numbered_by is not None:
            # above both counters, both raised: it takes nothing either partition holds or gave
            counter = t.writable(op.numbered_by)
            n = max(n - 1, counter.last_sequence_number, port.numbering_base(op.numbered_by)) + 1
            part.messages[n] = replace(part.messages.pop(part.last_sequence_number), sequence_number=n)
            part.last_sequence_number = counter.last_sequence_number = n
        numbers.append(n)
    _check_int64(part.last_sequence_number, f"last sequence number of {op.ref.entity!r}")
    return port.Appended(tuple(numbers))



def _prune_message_ids(t: _Batch, op: port.PruneMessageIds) -> port.OpResult:
    _check_int64(op.seen_before, "seen_before")
    part = t.writable(op.ref)
    for message_id in [m for m, at in part.history.items() if at < op.seen_before]:
        del part.history[message_id]
    return port.Done()



def _claim_message_ids(t: _Batch, op: port.ClaimMessageIds) -> port.OpResult:
    part = t.writable(op.ref)
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
        t.claims[(_key(op.ref), message_id)] = op.claim
        fresh.append(True)
    return port.IdsClaimed(tuple(fresh))



def _claim(t: _Batch, op: port.Claim) -> port.OpResult:
    part = t.writable(op.ref)
    wanted = None if op.sequence_numbers is None else set(op.sequence_numbers)
    taken: list[port.StoredMessage] = []
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
    return port.Claimed(tuple(taken))



def _settle(t: _Batch, op: port.Settle) -> port.OpResult:
    part = t.writable(op.ref)
    applied: list[bool] = []
    kept: dict[port.PartitionRef, list[MessageRecord]] = {}  # dead letters keeping their numbers, per target
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
        if item.outcome is port.Outcome.COMPLETE:
            part.delete(n)
        elif item.outcome is port.Outcome.ABANDON:
            part.messages[n] = m
        elif item.outcome is port.Outcome.RELEASE:
            part.messages[n] = replace(m, delivery_count=max(0, m.delivery_count - 1))
        elif item.outcome is port.Outcome.DEFER:
            # a deferral is not a delivery attempt: the claim's count is given back, as by RELEASE
            part.messages[n] = replace(m, state=MessageState.DEFERRED,
                                       delivery_count=max(0, m.delivery_count - 1))
        elif item.outcome is port.Outcome.DEAD_LETTER:
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
                t.writable(target).append(copy, port.numbering_base(target))
        else:
            assert_never(item.outcome)
    for ref, records in kept.items():
        t.writable(ref).keep(records, port.numbering_base(ref))
    return port.Settled(tuple(applied))



def _renew_locks(t: _Batch, op: port.RenewLocks) -> port.OpResult:
    part = t.writable(op.ref)
    renewed: list[bool] = []
    for n, token in op.items:
        ok = part.holds(n, token, op.now)
        if ok:
            part.locks[n] = replace(part.locks[n], until=op.locked_until)
        renewed.append(ok)
    return port.Renewed(tuple(renewed))



def _move_messages(t: _Batch, op: port.MoveMessages) -> port.OpResult:
    part = t.writable(op.ref)
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
            moved.append(t.writable(destination).append(gone, port.numbering_base(destination)))
    if keeping and destination is not None:
        numbers = t.writable(destination).keep([m for _, m in keeping], port.numbering_base(destination))
        for (index, _), number in zip(keeping, numbers, strict=True):
            moved[index] = number
    return port.Moved(tuple(moved))



def _activate(t: _Batch, op: port.Activate) -> port.OpResult:
    part = t.writable(op.ref)
    due = sorted(
        (m.scheduled_enqueue_time, n) for n, m in part.messages.items()
        if m.state == MessageState.SCHEDULED and m.scheduled_enqueue_time is not None
        and m.scheduled_enqueue_time <= op.now
    )[:max(op.limit, 0)]
    for _, n in due:
        part.messages[n] = replace(part.messages[n], state=MessageState.ACTIVE)
    return port.Activated(tuple(part.stored(n) for _, n in due))



def _purge(t: _Batch, op: port.Purge) -> port.OpResult:
    part = t.writable(op.ref)
    through = op.through_sequence_number
    doomed = [n for n in part.messages
              if (through is None or n <= through) and not part.locked(n, op.now)]
    for n in doomed:
        part.delete(n)
    return port.Purged(len(doomed))



def _restore(t: _Batch, op: port.Restore) -> port.OpResult:
    part = t.writable(op.ref)
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
    return port.Restored(tuple(restored))



def _cancel_scheduled(t: _Batch, op: port.CancelScheduled) -> port.OpResult:
    _check_int64(op.now, "now")
    part = t.writable(op.ref)
    asked = list(dict.fromkeys(op.sequence_numbers))
    for n in asked:
        _check_int64(n, "sequence number")
    missing = tuple(n for n in asked if n not in part.messages
                    or part.messages[n].state != MessageState.SCHEDULED or part.locked(n, op.now))
    if not missing:
        for n in asked:
            part.delete(n)
    return port.Unscheduled(missing)



def _claim_session(t: _Batch, op: port.ClaimSession) -> port.OpResult:
    part = t.writable(op.ref)

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
        return port.SessionClaimed(None)
    _check_text(chosen, f"session id of {op.ref.entity!r}")
    part.session_locks[chosen] = _Lock(op.token, op.locked_until, op.owner)
    return port.SessionClaimed(chosen)



def _renew_session(t: _Batch, op: port.RenewSession) -> port.OpResult:
    part = t.writable(op.ref)
    lock = part.session_locks.get(op.session_id)
    ok = lock is not None and lock.token == op.token and lock.until > op.now
    if ok:
        assert lock is not None
        part.session_locks[op.session_id] = replace(lock, until=op.locked_until)
    return port.Renewed((ok,))



def _release_session(t: _Batch, op: port.ReleaseSession) -> port.OpResult:
    part = t.writable(op.ref)
    lock = part.session_locks.get(op.session_id)
    ok = lock is not None and lock.token == op.token
    if ok:
        del part.session_locks[op.session_id]
    return port.Renewed((ok,))



def _remember_message_ids(t: _Batch, op: port.RememberMessageIds) -> port.OpResult:
    if op.entries:
        part = t.writable(op.ref)
        for message_id, seen_at in op.entries:
            _check_text(message_id, f"message id of {op.ref.entity!r}")
            _check_int64(seen_at, f"seen-at time of message id {message_id!r}")
            part.history[message_id] = seen_at
    return port.Done()


def _forget_message_ids(t: _Batch, op: port.ForgetMessageIds) -> port.OpResult:
    if not op.message_ids:
        return port.Done()
    part = t.writable(op.ref)
    if op.seen_before is not None:
        _check_int64(op.seen_before, "seen_before")
    for message_id in op.message_ids:
        _check_text(message_id, f"message id of {op.ref.entity!r}")
        seen = part.history.get(message_id)
        if seen is not None and (op.seen_before is None or seen < op.seen_before):
            del part.history[message_id]
    return port.Done()


def _put_session_state(t: _Batch, op: port.PutSessionState) -> port.OpResult:
    part = t.writable(op.ref)
    _check_text(op.session_id, f"session id of {op.ref.entity!r}")
    _check_int64(op.updated_at, f"update time of session {op.session_id!r}")
    if op.state is None:
        part.session_states.pop(op.session_id, None)
    else:
        part.session_states[op.session_id] = (bytes(op.state), op.updated_at)
    return port.Done()


def _move_keys(t: _Batch, op: port.RememberMoveKeys | port.ForgetMoveKeys) -> port.OpResult:
    if not op.keys:
        return port.Done()
    part = t.writable(op.ref)
    for move_key in op.keys:
        _check_text(move_key, f"move key of {op.ref.entity!r}")
    if isinstance(op, port.RememberMoveKeys):
        part.move_keys.update(op.keys)
    else:
        part.move_keys.difference_update(op.keys)
    return port.Done()


def _put_entity(t: _Batch, op: port.PutEntity) -> port.OpResult:
    e = op.entity
    properties, whole_set = port.split_rules(e)
    t.entities[_fold(e.path)] = _StoredEntity(e.path, e.kind, port.encode_properties(e, properties))
    if whole_set is not None:
        folded = _fold(e.path)
        for gone in [k for k in t.rules if k[0] == folded]:
            del t.rules[gone]
        for position, (name, rule) in enumerate(whole_set, start=1):
            t.rules[(folded, _fold(name))] = (position, port.encode_properties(e, rule))
    return port.Done()


def _delete_entity(t: _Batch, op: port.DeleteEntity) -> port.OpResult:
    folded = _fold(op.path)
    sub_queues = folded + "/$"
    t.entities.pop(folded, None)
    for rule_key in [k for k in t.rules if k[0] == folded]:
        del t.rules[rule_key]
    for key in [k for k in t.partitions if k[0] == folded or k[0].startswith(sub_queues)]:
        del t.partitions[key]
        t.copied.discard(key)
    for activity_key in [k for k in t.activity if k[0] == folded]:
        del t.activity[activity_key]
    return port.Done()


def _record_activity(t: _Batch, op: port.RecordActivity) -> port.OpResult:
    _check_int64(op.now, "now")
    for entry in op.entries:
        _check_text(entry.path, "entity path")
        _check_int64(entry.last_activity, f"last activity of {entry.path!r}")
        _check_int64(entry.receivers, f"receivers of {entry.path!r}")
        row = (_fold(entry.path), op.node)
        last = max(entry.last_activity, t.activity[row][0]) if row in t.activity else entry.last_activity
        t.activity[row] = (last, entry.receivers, op.now)
    return port.Done()


def _delete_idle_entity(t: _Batch, op: port.DeleteIdleEntity) -> port.OpResult:
    folded = _fold(op.path)
    rows = [row for (path, _), row in t.activity.items() if path == folded]
    busy = any(last > op.active_after or (receivers > 0 and refreshed > op.live_after)
               for last, receivers, refreshed in rows)
    deleted = not busy and t.entities.pop(folded, None) is not None
    if deleted:
        for gone in [k for k in t.activity if k[0] == folded]:
            del t.activity[gone]
    return port.IdleDeleted(deleted)


def _rule(t: _Batch, op: port.PutRule | port.DeleteRule) -> port.OpResult:
    return _apply_rule(t.rules, op)


def _append_to(t: _Batch, op: port.AppendTo) -> port.OpResult:
    return _append(t, op.as_append())


HANDLERS: Final[dict[type, Callable[[_Batch, Any], port.OpResult]]] = {
    port.Append: _append,
    port.AppendTo: _append_to,
    port.Claim: _claim,
    port.Settle: _settle,
    port.RenewLocks: _renew_locks,
    port.MoveMessages: _move_messages,
    port.Activate: _activate,
    port.Purge: _purge,
    port.Restore: _restore,
    port.CancelScheduled: _cancel_scheduled,
    port.ClaimMessageIds: _claim_message_ids,
    port.PruneMessageIds: _prune_message_ids,
    port.RememberMessageIds: _remember_message_ids,
    port.ForgetMessageIds: _forget_message_ids,
    port.ClaimSession: _claim_session,
    port.RenewSession: _renew_session,
    port.ReleaseSession: _release_session,
    port.PutSessionState: _put_session_state,
    port.RememberMoveKeys: _move_keys,
    port.ForgetMoveKeys: _move_keys,
    port.PutEntity: _put_entity,
    port.DeleteEntity: _delete_entity,
    port.RecordActivity: _record_activity,
    port.DeleteIdleEntity: _delete_idle_entity,
    port.PutRule: _rule,
    port.DeleteRule: _rule,
}
