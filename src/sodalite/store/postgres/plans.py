"""One plan per store operation, in a table (:data:`PLANNERS`): the statements an operation sends (steps,
with their parameters) and how its result is read from their rows; several completes of one
partition in a row become one statement (:func:`_plans`).

Sequence numbers and counters. A partition's counters (the high-water mark, the active, scheduled
and deferred counts and the total size) are the sum of its base row (``sodalite_partitions``) and
of its row in each generation of ``sodalite_counters`` (the high-water mark: their maximum), so
:meth:`PostgresStore.counts` reads at most five rows. An :class:`Append` first takes the base row
(a statement of its own that locks it without writing it: ``ON CONFLICT DO UPDATE … WHERE
false``), then, in the next statement, whose snapshot sees what the previous holder committed,
numbers the messages above the high-water mark and raises its current generation's row by the
batch (``INSERT … ON CONFLICT DO UPDATE``): the lock is held until the commit, so a higher number
never becomes visible before a lower one, whichever node appends (not a ``SEQUENCE``, whose numbers
can commit out of order). Dead-letters and moves take their target's base row the same way. Every
statement that adds, removes or changes the state or size of messages adds its changes to the
partition's row of the current generation in the same statement (a data-modifying ``WITH``).

Claims and fencing. A :class:`Claim` is one ``UPDATE … FROM (SELECT … ORDER BY sequence_number
LIMIT n FOR UPDATE SKIP LOCKED)`` over the ready index (entity, partition, state, sequence
number): two transactions never take the same row, and one never waits for another's rows.
Settlements and renewals are set-based statements joined to ``unnest`` arrays of (sequence number,
token), with the fence (the row carries the token and ``locked_until > now``) in the ``WHERE``
clause; the rows they return say which items applied. Session locks are rows of
``sodalite_session_locks`` taken with an upsert that only replaces a lapsed lock.

Plans. Settlements and renewals run on their prepared statement's generic plan (:data:`_GENERIC_PLAN`,
switched transaction-locally in the pipeline), which PostgreSQL would otherwise re-plan at each
execution. Settle operations of one partition that follow each other in a batch and only complete
distinct messages (a group commit of receivers' completes) are one statement (:func:`_plans`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, TypeVar

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store import port
from sodalite.store.postgres.statements import (
    _CODE,
    _FIELD_NAMES,
    _PARTITION_TABLES,
    SQL,
)
from sodalite.store.postgres.values import (
    _fold,
    _int64,
    _key,
    _opt_utf8,
    _Params,
    _partition_params,
    _Rows,
    _stored_from_row,
    _text,
    _time,
    _utf8,
)

_K = TypeVar("_K", bound=Hashable)  # what groups settle items into one statement


def _done(_: list[_Rows]) -> port.OpResult:
    return port.Done()


@dataclass(slots=True)
class _Step:
    """One statement of a batch: run once with ``params``, or with ``executemany`` over ``many``."""

    sql: str
    params: Mapping[str, object] | None = None
    many: list[_Params] | None = None
    rows: bool = False  # keep the rows it returns for the operation's result
    # Run with the prepared statement's generic plan (plan_cache_mode): see _GENERIC_PLAN.
    generic: bool = False


@dataclass(slots=True)
class _Plan:
    """What one operation becomes: its statements, and how their rows make its result."""

    steps: list[_Step] = field(default_factory=list)
    # Called with the rows of the steps that keep theirs (``rows=True``), in order.
    finish: Callable[[list[_Rows]], port.OpResult] = _done
    # The partitions it numbers messages of, whose base rows the batch takes first (SQL["take_partition"]).
    takes: set[tuple[bytes, int]] = field(default_factory=set)
    # A plan for several operations (_merged_complete_plan): their results, in order, instead of finish.
    results: Callable[[list[_Rows]], list[port.OpResult]] | None = None


def _message_arrays(ref: port.PartitionRef, messages: Sequence[MessageRecord],
                    numbered: bool) -> dict[str, list[object]]:
    """The messages as one array per column (for ``unnest``), each value checked."""
    arrays: dict[str, list[object]] = {"seq": [], **{name: [] for name in _FIELD_NAMES}}
    for m in messages:
        where = f"message {m.sequence_number} of {ref.entity!r} partition {ref.partition}:"
        arrays["seq"].append(_int64(m.sequence_number, f"{where} sequence_number") if numbered else 0)
        arrays["enqueued_time"].append(_int64(m.enqueued_time, f"{where} enqueued_time"))
        arrays["message_id"].append(_opt_utf8(m.message_id, f"{where} message_id"))
        arrays["session_id"].append(_opt_utf8(m.session_id, f"{where} session_id"))
        arrays["partition_key"].append(_opt_utf8(m.partition_key, f"{where} partition_key"))
        arrays["time_to_live"].append(_int64(m.time_to_live, f"{where} time_to_live"))
        arrays["expires_at"].append(_int64(m.expires_at, f"{where} expires_at"))
        arrays["scheduled_enqueue_time"].append(_int64(m.scheduled_enqueue_time, f"{where} scheduled_enqueue_time"))
        arrays["delivery_count"].append(_int64(m.delivery_count, f"{where} delivery_count"))
        arrays["state"].append(int(m.state))
        arrays["durable"].append(m.durable)
        arrays["priority"].append(_int64(m.priority, f"{where} priority"))
        arrays["annotations"].append(bytes(m.annotations))
        arrays["annotation_count"].append(_int64(m.annotation_count, f"{where} annotation_count"))
        arrays["tail"].append(bytes(m.tail))
    return arrays


def _item_arrays(items: Sequence[tuple[int, uuid.UUID | None, int, bytes | None, int, bytes | None, bool]],
                 times: Sequence[tuple[int | None, int | None]] | None = None,
                 backs: Sequence[bool] | None = None) -> dict[str, object]:
    """Settle and move items as arrays: (number, token, outcome code, annotations, count, tail, reset),
    a moved copy's (enqueued time, expiry time), both None for settlements, and whether a dead letter
    gives its delivery back (count - 1: :attr:`SettleItem.give_back_delivery`)."""
    times = times if times is not None else [(None, None)] * len(items)
    return {
        "back": list(backs) if backs is not None else [False] * len(items),
        "enq": [None if enq is None else _time(enq, "enqueued_time") for enq, _ in times],
        "exp": [None if exp is None else _time(exp, "expires_at") for _, exp in times],
        "seq": [_int64(seq, "sequence number") for seq, *_ in items],
        "tok": [tok for _, tok, *_ in items],
        "code": [code for _, _, code, *_ in items],
        "ann": [None if ann is None else bytes(ann) for _, _, _, ann, _, _, _ in items],
        "annc": [_int64(count, "annotation count") for *_, count, _, _ in items],
        "tl": [None if tail is None else bytes(tail) for *_, tail, _ in items],
        "reset": [reset for *_, reset in items],
    }


def _unique(numbers: Sequence[int]) -> bool:
    return len(set(numbers)) == len(numbers)


def _append_plan(op: port.Append) -> _Plan:
    if not op.messages:
        return _Plan(finish=lambda _: port.Appended(()))
    if op.numbered_by is not None and _key(op.numbered_by) != _key(op.ref):
        gate_entity, gate_partition = (None, None) if op.gate is None else _key(op.gate.ref)
        counter_entity, counter_partition = _key(op.numbered_by)
        params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
                  "ne": counter_entity, "np": counter_partition, "gated": op.gate is not None,
                  "ge": gate_entity, "gp": gate_partition, "claim": None if op.gate is None else op.gate.claim,
                  "gid": [None] * len(op.messages) if op.gate is None
                  else [_opt_utf8(mid, "gate message id") for mid in op.gate.message_ids]}

        def placed(rows: list[_Rows]) -> port.OpResult:
            by_place = {int(place): int(number) for place, number in rows[0]}
            return port.Appended(tuple(by_place.get(place, 0) for place in range(1, len(op.messages) + 1)))

        return _Plan([_Step(SQL["append_numbered_by"], params, rows=True)], placed,
                     takes={_key(op.ref), _key(op.numbered_by)})
    if op.gate is not None:
        gate_entity, gate_partition = _key(op.gate.ref)
        gated = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
                 "ge": gate_entity, "gp": gate_partition, "claim": op.gate.claim,
                 "gid": [_opt_utf8(mid, "gate message id") for mid in op.gate.message_ids]}

        def numbered(rows: list[_Rows]) -> port.OpResult:
            by_place = {int(place): int(number) for place, number in rows[0]}
            return port.Appended(tuple(by_place.get(place, 0) for place in range(1, len(op.messages) + 1)))

        return _Plan([_Step(SQL["append_gated"], gated, rows=True)], numbered, takes={_key(op.ref)})
    params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=False),
              "n": len(op.messages),
              "da": sum(1 for m in op.messages if m.state == MessageState.ACTIVE),
              "ds": sum(1 for m in op.messages if m.state == MessageState.SCHEDULED),
              "dd": sum(1 for m in op.messages if m.state == MessageState.DEFERRED),
              "dz": sum(m.size for m in op.messages)}
    return _Plan([_Step(SQL["append"], params, rows=True)],
                 lambda rows: port.Appended(tuple(sorted(int(r[0]) for r in rows[0]))), takes={_key(op.ref)})


def _claim_ids_plan(op: port.ClaimMessageIds) -> _Plan:
    if not op.message_ids:
        return _Plan(finish=lambda _: port.IdsClaimed(()))
    now = _time(op.now, "now")
    params = {**_partition_params(op.ref), "ids": [_utf8(mid, "message id") for mid in op.message_ids],
              "now": now, "since": _time(now - op.window_ms, "now - window_ms"), "claim": op.claim}

    def fresh(rows: list[_Rows]) -> port.OpResult:
        taken = {int(r[0]) for r in rows[0]}
        return port.IdsClaimed(tuple(place in taken for place in range(1, len(op.message_ids) + 1)))

    return _Plan([_Step(SQL["claim_ids"], params, rows=True)], fresh, takes={_key(op.ref)})


def _claim_plan(op: port.Claim) -> _Plan:
    if not op.tokens or (op.sequence_numbers is not None and not op.sequence_numbers):
        return _Plan(finish=lambda _: port.Claimed(()))
    params = {**_partition_params(op.ref), "state": int(op.state), "now": _time(op.now, "now"),
              "n": len(op.tokens), "tokens": list(op.tokens), "until": _time(op.locked_until, "locked_until"),
              "owner": op.owner,
              "sid": None if op.session_id is None else _utf8(op.session_id, "session id"),
              "seqs": None if op.sequence_numbers is None else [_int64(n, "sequence number")
                                                                 for n in op.sequence_numbers]}
    sql = SQL["claim" + ("_in_session" if op.session_id is not None else "")
              + ("_by_numbers" if op.sequence_numbers is not None else "")]
    return _Plan([_Step(sql, params, rows=True)], lambda rows: port.Claimed(
        tuple(sorted((_stored_from_row(r) for r in rows[0]), key=lambda s: s.record.sequence_number))))


def _flags(items_numbers: Sequence[int], groups: list[list[int]], rows: list[_Rows]) -> tuple[bool, ...]:
    """Per item: did the statement that carried it return its number?"""
    applied = [False] * len(items_numbers)
    for indexes, returned in zip(groups, rows, strict=True):
        numbers = {int(r[0]) for r in returned}
        for index in indexes:
            applied[index] = items_numbers[index] in numbers
    return tuple(applied)


def _batches(keys: Sequence[_K], numbers: Sequence[int], one_by_one: bool = False) -> list[tuple[_K, list[int]]]:
    """Item indexes grouped by key into one statement each when every number appears once; else
    (or when asked) one statement per item, in order (a later item sees what an earlier one did)."""
    if one_by_one or not _unique(numbers):
        return [(key, [index]) for index, key in enumerate(keys)]
    grouped: dict[_K, list[int]] = {}
    for index, key in enumerate(keys):
        grouped.setdefault(key, []).append(index)
    return list(grouped.items())


class _SettleGroup(NamedTuple):
    """The items of a settlement one statement carries: completes, unlocks, or dead letters to one
    target (its key) under their own numbers or not."""

    kind: Literal["complete", "unlock", "dead-letter"]
    target: tuple[bytes, int] | None = None
    keep: bool = False


def _settle_plan(op: port.Settle) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now")}
    numbers = [item.sequence_number for item in op.items]

    def key(item: port.SettleItem) -> _SettleGroup:
        if item.outcome is port.Outcome.COMPLETE:
            return _SettleGroup("complete")
        if item.outcome is port.Outcome.DEAD_LETTER:
            return _SettleGroup("dead-letter", _key(op.dead_letter_target(item)), item.keep_sequence_number)
        return _SettleGroup("unlock")

    steps: list[_Step] = []
    groups: list[list[int]] = []
    takes: set[tuple[bytes, int]] = set()
    for group_key, indexes in _batches([key(item) for item in op.items], numbers):
        items = [op.items[i] for i in indexes]
        params = {**base, **_item_arrays([(it.sequence_number, it.lock_token, _CODE[it.outcome], it.annotations,
                                           it.annotation_count, it.tail, it.reset_delivery_count) for it in items],
                                         [(it.enqueued_time, it.expires_at) for it in items],
                                         [it.give_back_delivery for it in items])}
        if group_key.target is None:
            sql = SQL["complete"] if group_key.kind == "complete" else SQL["unlock"]
        else:
            sql = SQL["dead_letter"]
            params |= {"te": group_key.target[0], "tp": group_key.target[1], "same": group_key.target == _key(op.ref),
                       "keep": group_key.keep}
            takes.add(group_key.target)
        steps.append(_Step(sql, params, rows=True, generic=True))
        groups.append(indexes)
    return _Plan(steps, lambda rows: port.Settled(_flags(numbers, groups, rows)), takes)


def _results(plans: list[_Plan], fetched: list[_Rows], position: int) -> tuple[port.OpResult, ...]:
    """One result per operation from the rows of the plans' steps (those from ``position`` on)."""
    results: list[port.OpResult] = []
    for plan in plans:
        mine = [rows for step, rows in zip(plan.steps, fetched[position:position + len(plan.steps)], strict=True)
                if step.rows]
        position += len(plan.steps)
        if plan.results is not None:
            results.extend(plan.results(mine))
        else:
            results.append(plan.finish(mine))
    return tuple(results)


def _completes_only(op: port.StoreOp) -> bool:
    return isinstance(op, port.Settle) and bool(op.items) and all(i.outcome is port.Outcome.COMPLETE for i in op.items)


def _plans(batch: Sequence[port.StoreOp]) -> list[_Plan]:
    """One plan per operation, except that Settle operations of one partition that follow each other
    and only complete distinct messages become one plan (one statement) for all of them."""
    plans: list[_Plan] = []
    index = 0
    while index < len(batch):
        op = batch[index]
        index += 1
        if not (isinstance(op, port.Settle) and _completes_only(op)):
            plans.append(_plan(op))
            continue
        run = [op]
        numbers = {item.sequence_number for item in op.items}
        unique = len(numbers) == len(op.items)
        while unique and index < len(batch):
            nxt = batch[index]
            if not (isinstance(nxt, port.Settle) and _completes_only(nxt) and _key(nxt.ref) == _key(op.ref)):
                break
            mine = {item.sequence_number for item in nxt.items}
            if len(mine) != len(nxt.items) or mine & numbers:
                break
            numbers |= mine
            run.append(nxt)
            index += 1
        plans.append(_plan(op) if len(run) == 1 else _merged_complete_plan(run))
    return plans


def _merged_complete_plan(ops: list[port.Settle]) -> _Plan:
    items = [(item, op.now) for op in ops for item in op.items]
    params = {**_partition_params(ops[0].ref),
              "seq": [_int64(item.sequence_number, "sequence number") for item, _ in items],
              "tok": [item.lock_token for item, _ in items], "nows": [_time(now, "now") for _, now in items]}

    def results(rows: list[_Rows]) -> list[port.OpResult]:
        done = {int(r[0]) for r in rows[0]}
        return [port.Settled(tuple(item.sequence_number in done for item in op.items)) for op in ops]

    return _Plan([_Step(SQL["complete_merged"], params, rows=True, generic=True)], results=results)


def _renew_plan(op: port.RenewLocks) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now"),
            "until": _time(op.locked_until, "locked_until")}
    numbers = [seq for seq, _ in op.items]
    steps: list[_Step] = []
    groups: list[list[int]] = []
    for _, indexes in _batches([()] * len(op.items), numbers):
        items = [op.items[i] for i in indexes]
        steps.append(_Step(SQL["renew"], {**base, "seq": [_int64(s, "sequence number") for s, _ in items],
                                    "tok": [t for _, t in items]}, rows=True, generic=True))
        groups.append(indexes)
    return _Plan(steps, lambda rows: port.Renewed(_flags(numbers, groups, rows)))


def _move_plan(op: port.MoveMessages) -> _Plan:
    base = {**_partition_params(op.ref), "now": _time(op.now, "now")}
    target = op.destination
    if target is not None:
        base["te"], base["tp"] = _key(target)
        base["same"] = _key(target) == _key(op.ref)
        base["keep"] = op.keep_sequence_numbers
    numbers = [item.sequence_number for item in op.items]
    steps: list[_Step] = []
    groups: list[list[int]] = []
    # Into the partition it came from, a moved message gets a new number that a later item may name.
    same = target is not None and _key(target) == _key(op.ref)
    for _, indexes in _batches([()] * len(op.items), numbers, one_by_one=same):
        items: list[port.MoveItem] = [op.items[i] for i in indexes]
        params = {**base, **_item_arrays([(it.sequence_number, None, 0, it.annotations, it.annotation_count,
                                           it.tail, it.reset_delivery_count) for it in items],
                                         [(it.enqueued_time, it.expires_at) for it in items])}
        steps.append(_Step(SQL["move_away"] if target is None else SQL["move_to"], params, rows=True))
        groups.append(indexes)

    def finish(rows: list[_Rows]) -> port.OpResult:
        moved: list[int | None] = [None] * len(numbers)
        for indexes, returned in zip(groups, rows, strict=True):
            new = {int(old): int(seq) for old, seq in returned}
            for index in indexes:
                moved[index] = new.get(numbers[index])
        return port.Moved(tuple(moved))

    return _Plan(steps, finish, set() if target is None else {_key(target)})


def _activate_plan(op: port.Activate) -> _Plan:
    if op.limit <= 0:
        return _Plan(finish=lambda _: port.Activated(()))
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"), "n": _time(op.limit, "limit")}
    return _Plan([_Step(SQL["activate"], params, rows=True)], lambda rows: port.Activated(tuple(sorted(
        (_stored_from_row(r) for r in rows[0]),
        key=lambda s: (s.record.scheduled_enqueue_time or 0, s.record.sequence_number)))))


def _purge_plan(op: port.Purge) -> _Plan:
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"),
              "through": _int64(op.through_sequence_number, "through_sequence_number")}
    return _Plan([_Step(SQL["purge_through" if op.through_sequence_number is not None else "purge_all"], params,
                        rows=True)],
                 lambda rows: port.Purged(int(rows[0][0][0])))


def _restore_plan(op: port.Restore) -> _Plan:
    if not op.messages:
        return _Plan(finish=lambda _: port.Restored(()))
    params = {**_partition_params(op.ref), **_message_arrays(op.ref, op.messages, numbered=True)}

    def restored(rows: list[_Rows]) -> port.OpResult:
        back = {int(r[0]) for r in rows[0]}
        flags: list[bool] = []
        for m in op.messages:  # a number given twice is put back once: the first
            flags.append(m.sequence_number in back)
            back.discard(m.sequence_number)
        return port.Restored(tuple(flags))

    return _Plan([_Step(SQL["restore"], params, rows=True)], restored)


def _cancel_plan(op: port.CancelScheduled) -> _Plan:
    params = {**_partition_params(op.ref), "now": _time(op.now, "now"),
              "seq": [_int64(n, "sequence number") for n in op.sequence_numbers]}
    return _Plan([_Step(SQL["cancel_scheduled"], params, rows=True)],
                 lambda rows: port.Unscheduled(tuple(int(r[0]) for r in rows[0])))


def _rule_plan(op: port.PutRule | port.DeleteRule) -> _Plan:
    params: dict[str, object] = {"s": _fold(op.subscription), "k": _fold(op.name)}
    if isinstance(op, port.DeleteRule):
        sql = SQL["delete_rule"]
    else:
        sql = SQL["replace_rule"] if op.replace else SQL["add_rule"]
        owner = port.EntityRecord(op.subscription, port.SUBSCRIPTION_KIND, {})
        params |= {"n": op.name, "rule": port.encode_properties(owner, op.rule)}
    return _Plan([_Step(sql, params, rows=True)], lambda rows: port.RuleWritten(bool(rows[0])))


def _session_plan(op: port.ClaimSession | port.RenewSession | port.ReleaseSession) -> _Plan:
    params: dict[str, object] = {**_partition_params(op.ref), "tok": op.token}
    if isinstance(op, port.ClaimSession):
        params |= {"now": _time(op.now, "now"), "until": _time(op.locked_until, "locked_until"),
                   "owner": op.owner,
                   "sid": None if op.session_id is None else _utf8(op.session_id, "session id")}
        sql = SQL["claim_next_session"] if op.session_id is None else SQL["claim_named_session"]
        return _Plan([_Step(sql, params, rows=True)],
                     lambda rows: port.SessionClaimed(_text(rows[0][0][0]) if rows[0] else None))
    params["sid"] = _utf8(op.session_id, "session id")
    if isinstance(op, port.RenewSession):
        params |= {"now": _time(op.now, "now"), "until": _time(op.locked_until, "locked_until")}
        sql = SQL["renew_session"]
    else:
        sql = SQL["release_session"]
    return _Plan([_Step(sql, params, rows=True)], lambda rows: port.Renewed((bool(rows[0]),)))


def _record_plan(op: port.StoreOp) -> _Plan:
    """The operations on records beside the messages (results: Done)."""
    return _Plan([_Step(sql, many=rows) for sql, rows in _record_statements(op)])


def _record_statements(op: port.StoreOp) -> Iterable[tuple[str, list[_Params]]]:
    """The statements of an operation on records beside the messages, each with its parameter rows."""
    if isinstance(op, port.PutEntity):
        e = op.entity
        properties, rules = port.split_rules(e)
        folded = _fold(e.path)
        yield SQL["put_entity"], [(folded, e.path, e.kind, port.encode_properties(e, properties))]
        if rules is not None:
            yield SQL["delete_rules"], [(folded,)]
            if rules:
                yield SQL["put_rule_at"], [(folded, _fold(name), name, position, port.encode_properties(e, rule))
                                           for position, (name, rule) in enumerate(rules, start=1)]
    elif isinstance(op, port.DeleteEntity):
        folded = _fold(op.path)
        for statement in [SQL[f"delete_entity_rows_{t.removeprefix('sodalite_')}"] for t in _PARTITION_TABLES]:
            yield statement, [(folded, folded + b"/$", folded + b"/%")]
        yield "DELETE FROM sodalite_entities WHERE path_key = %s", [(folded,)]
        yield SQL["delete_rules"], [(folded,)]
        yield "DELETE FROM sodalite_activity WHERE entity = %s", [(folded,)]
    elif isinstance(op, port.RecordActivity):
        if op.entries:
            now = _int64(op.now, "now")
            yield SQL["record_activity"], [
                (_fold(e.path), op.node, _int64(e.last_activity, f"last activity of {e.path!r}"),
                 _int64(e.receivers, f"receivers of {e.path!r}"), now) for e in op.entries]
    elif isinstance(op, port.RememberMessageIds):
        if op.entries:
            entity, partition = _key(op.ref)
            yield SQL["remember_id"], [
                {"e": entity, "p": partition, "mid": _utf8(mid, "message id"),
                 "at": _int64(at, f"seen-at time of message id {mid!r}")}
                for mid, at in op.entries
            ]
    elif isinstance(op, port.ForgetMessageIds):
        if op.message_ids:
            entity, partition = _key(op.ref)
            ids = [_utf8(mid, "message id") for mid in op.message_ids]
            yield SQL["forget_ids"], [{"e": entity, "p": partition, "ids": ids,
                                 "before": _int64(op.seen_before, "seen_before")}]
    elif isinstance(op, port.PutSessionState):
        entity, partition = _key(op.ref)
        sid = _utf8(op.session_id, "session id")
        if op.state is None:
            yield SQL["clear_session_state"], [(entity, partition, sid)]
        else:
            updated = _int64(op.updated_at, f"update time of session {op.session_id!r}")
            yield SQL["put_session_state"], [(entity, partition, sid, bytes(op.state), updated)]
    elif isinstance(op, port.RememberMoveKeys | port.ForgetMoveKeys):
        if op.keys:
            entity, partition = _key(op.ref)
            rows: list[_Params] = [(entity, partition, _utf8(k, "move key")) for k in op.keys]
            yield (SQL["remember_move_key"] if isinstance(op, port.RememberMoveKeys) else SQL["forget_move_key"]), rows
    else:
        raise AssertionError(f"not an operation on records beside the messages: {type(op).__name__}")


# Settlements and renewals join a few arrays to rows found by primary key: their generic plan is as
# good as any custom one, but PostgreSQL's default (plan_cache_mode = auto) keeps choosing a custom
# plan for them and so plans every execution anew, which cost more server CPU than running them (the
# cycle benchmark: 546 against 184 µs of PostgreSQL CPU per message received and completed). Claims
# keep custom plans (their generic plan was slower there). Transaction-local, so it ends with the batch.
_GENERIC_PLAN: Final = {True: "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)",
                        False: "SELECT set_config('plan_cache_mode', 'auto', true)"}


def _delete_idle_plan(op: port.DeleteIdleEntity) -> _Plan:
    params = {"k": _fold(op.path), "active": _int64(op.active_after, "active_after"),
              "live": _int64(op.live_after, "live_after")}
    return _Plan([_Step(SQL["delete_idle"], params, rows=True)], lambda rows: port.IdleDeleted(int(rows[0][0][0]) == 1))


def _prune_ids_plan(op: port.PruneMessageIds) -> _Plan:
    return _Plan([_Step(SQL["prune_ids"], {**_partition_params(op.ref), "before": _time(op.seen_before,
                                                                                        "seen_before")})])


def _append_to_plan(op: port.AppendTo) -> _Plan:
    return _append_plan(op.as_append())


PLANNERS: Final[dict[type, Callable[[Any], _Plan]]] = {
    port.Append: _append_plan,
    port.AppendTo: _append_to_plan,
    port.Claim: _claim_plan,
    port.Settle: _settle_plan,
    port.RenewLocks: _renew_plan,
    port.MoveMessages: _move_plan,
    port.Activate: _activate_plan,
    port.Purge: _purge_plan,
    port.CancelScheduled: _cancel_plan,
    port.Restore: _restore_plan,
    port.ClaimSession: _session_plan,
    port.RenewSession: _session_plan,
    port.ReleaseSession: _session_plan,
    port.DeleteIdleEntity: _delete_idle_plan,
    port.ClaimMessageIds: _claim_ids_plan,
    port.PutRule: _rule_plan,
    port.DeleteRule: _rule_plan,
    port.PruneMessageIds: _prune_ids_plan,
    port.PutEntity: _record_plan,
    port.DeleteEntity: _record_plan,
    port.RememberMessageIds: _record_plan,
    port.ForgetMessageIds: _record_plan,
    port.PutSessionState: _record_plan,
    port.RememberMoveKeys: _record_plan,
    port.ForgetMoveKeys: _record_plan,
    port.RecordActivity: _record_plan,
}


def _plan(op: port.StoreOp) -> _Plan:
    return PLANNERS[type(op)](op)
