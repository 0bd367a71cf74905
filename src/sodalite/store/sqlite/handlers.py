"""One handler per store operation, in a table (:data:`HANDLERS`): each applies its operation inside
the batch's transaction and returns its result. The statements are the catalogue's (``queries.sql``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from sodalite.model.message import MessageRecord, MessageState
from sodalite.store import port
from sodalite.store.sqlite.rows import (
    COMPLETE_ONE_BY_ONE,
    INT64_MAX,
    SQL,
    Claims,
    Counts,
    append,
    append_kept,
    claim_key,
    claim_statement,
    complete_locked,
    count_records,
    delete_counted,
    message_row,
    put_entity,
    replaced,
    select_locks,
    select_rows,
    stored_from_row,
)

Handler = Callable[[sqlite3.Connection, Any, Claims], port.OpResult]
# The tables that hold what is stored per partition: DeleteEntity empties them for the entity.
_PARTITION_TABLES: Final = ("messages", "partitions", "duplicate_history", "session_states", "move_keys",
                            "session_locks")


def apply(conn: sqlite3.Connection, op: port.StoreOp, claims: Claims) -> port.OpResult:
    """Apply ``op`` in the open transaction; ``claims`` holds the ids this batch's ClaimMessageIds took."""
    return HANDLERS[type(op)](conn, op, claims)


# ---- messages ---------------------------------------------------------------------------------------


def _append(conn: sqlite3.Connection, op: port.Append, claims: Claims) -> port.Appended:
    gate = op.gate
    if gate is None:
        return port.Appended(tuple(append(conn, op.ref, op.messages, op.numbered_by)))
    passes = [gate_id is None or claims.get(claim_key(gate.ref, gate_id)) == gate.claim
              for gate_id in gate.message_ids]
    numbers = iter(append(conn, op.ref, [m for m, ok in zip(op.messages, passes, strict=True) if ok],
                          op.numbered_by))
    return port.Appended(tuple(next(numbers) if ok else 0 for ok in passes))


def _append_to(conn: sqlite3.Connection, op: port.AppendTo, claims: Claims) -> port.Appended:
    return _append(conn, op.as_append(), claims)


def _claim(conn: sqlite3.Connection, op: port.Claim, claims: Claims) -> port.Claimed:
    if not op.tokens:
        return port.Claimed(())
    rows = conn.execute(*claim_statement(op)).fetchall()
    return port.Claimed(tuple(sorted((stored_from_row(r) for r in rows), key=lambda s: s.record.sequence_number)))


def _settle(conn: sqlite3.Connection, op: port.Settle, claims: Claims) -> port.Settled:
    if len(op.items) <= COMPLETE_ONE_BY_ONE and all(item.outcome is port.Outcome.COMPLETE for item in op.items):
        return complete_locked(conn, op)
    ref = op.ref
    key = (ref.entity, ref.partition)
    locks = select_locks(conn, ref, [item.sequence_number for item in op.items])
    applied: list[bool] = []
    by_outcome: dict[port.Outcome, list[tuple[object, ...]]] = {}
    annotate: list[tuple[object, ...]] = []
    dead: list[port.SettleItem] = []
    counts = Counts()
    for item in op.items:
        n = item.sequence_number
        token, until, state, annotations_size, tail_size = locks.get(n, (None, None, 0, 0, 0))
        ok = token == item.lock_token.bytes and until is not None and until > op.now
        applied.append(ok)
        if not ok:
            continue
        del locks[n]  # settled: a second item for it finds no lock
        by_outcome.setdefault(item.outcome, []).append((*key, n))
        if item.outcome in (port.Outcome.COMPLETE, port.Outcome.DEAD_LETTER):
            # the row leaves as it is; a dead-lettered copy takes the replacements (below)
            counts.add(state, annotations_size + tail_size, -1)
        elif item.annotations is not None or item.tail is not None:
            annotate.append((item.annotations, None if item.annotations is None else item.annotation_count,
                             item.tail, *key, n))
            counts.size += _size_change(item, annotations_size, tail_size)
        if item.outcome is port.Outcome.DEFER:
            counts.move(state, int(MessageState.DEFERRED))
        if item.outcome is port.Outcome.DEAD_LETTER:
            dead.append(item)
    conn.executemany(SQL["set_parts"], annotate)
    dying = select_rows(conn, ref, [item.sequence_number for item in dead]) if dead else {}
    for outcome, params in by_outcome.items():
        conn.executemany(SQL[f"settle_{outcome.value}"], params)
    counts.write(conn, ref)
    _dead_letter(conn, op, dead, {n: stored.record for n, stored in dying.items()})
    return port.Settled(tuple(applied))


def _size_change(item: port.SettleItem, annotations_size: int, tail_size: int) -> int:
    change = 0
    if item.annotations is not None:
        change += len(item.annotations) - annotations_size
    if item.tail is not None:
        change += len(item.tail) - tail_size
    return change


def _dead_letter(conn: sqlite3.Connection, op: port.Settle, dead: list[port.SettleItem],
                 records: dict[int, MessageRecord]) -> None:
    """Append the settled items' dead-lettered copies to their targets."""
    kept: dict[port.PartitionRef, list[MessageRecord]] = {}
    for item in dead:
        target = op.dead_letter_target(item)
        record = replaced(records[item.sequence_number], item.annotations, item.annotation_count, item.tail)
        copy = replace(
            record, state=MessageState.ACTIVE, expires_at=item.expires_at,
            enqueued_time=record.enqueued_time if item.enqueued_time is None else item.enqueued_time,
            delivery_count=0 if item.reset_delivery_count
            else max(0, record.delivery_count - 1) if item.give_back_delivery else record.delivery_count)
        if item.keep_sequence_number:
            kept.setdefault(target, []).append(copy)
        else:
            append(conn, target, [copy])
    for target, copies in kept.items():  # each target's kept numbers together (their numbers decide)
        append_kept(conn, target, copies)


def _renew_locks(conn: sqlite3.Connection, op: port.RenewLocks, claims: Claims) -> port.Renewed:
    key = (op.ref.entity, op.ref.partition)
    locks = select_locks(conn, op.ref, [n for n, _ in op.items])
    renewed: list[bool] = []
    for n, token in op.items:
        held, until, state, annotations, tail = locks.get(n, (None, None, 0, 0, 0))
        ok = held == token.bytes and until is not None and until > op.now
        renewed.append(ok)
        if ok:
            locks[n] = (held, op.locked_until, state, annotations, tail)
    conn.executemany(SQL["renew_lock"], [(op.locked_until, *key, n)
                                         for (n, _), ok in zip(op.items, renewed, strict=True) if ok])
    return port.Renewed(tuple(renewed))


def _move_messages(conn: sqlite3.Connection, op: port.MoveMessages, claims: Claims) -> port.Moved:
    destination = op.destination
    present = select_rows(conn, op.ref, [item.sequence_number for item in op.items])
    moved: list[int | None] = []
    leaving: list[MessageRecord] = []
    for move in op.items:
        stored = present.pop(move.sequence_number, None)
        if stored is None or stored.locked_at(op.now):
            moved.append(None)
            continue
        moved.append(move.sequence_number)
        record = replaced(stored.record, move.annotations, move.annotation_count, move.tail)
        leaving.append(replace(record, state=MessageState.ACTIVE,
                               expires_at=move.expires_at if destination is not None else record.expires_at,
                               enqueued_time=record.enqueued_time if move.enqueued_time is None
                               else move.enqueued_time,
                               delivery_count=0 if move.reset_delivery_count else record.delivery_count))
    if leaving:
        delete_counted(conn, op.ref, [m.sequence_number for m in leaving])
    if destination is None:
        return port.Moved(tuple(moved))
    numbers = iter((append_kept if op.keep_sequence_numbers else append)(conn, destination, leaving))
    return port.Moved(tuple(None if n is None else next(numbers) for n in moved))


def _activate(conn: sqlite3.Connection, op: port.Activate, claims: Claims) -> port.Activated:
    if op.limit <= 0:
        return port.Activated(())
    key = (op.ref.entity, op.ref.partition)
    rows = conn.execute(SQL["activate"], (*key, op.now, op.limit, *key)).fetchall()
    stored_rows = [stored_from_row(r) for r in rows]
    counts = Counts()
    for _ in stored_rows:
        counts.move(int(MessageState.SCHEDULED), int(MessageState.ACTIVE))
    counts.write(conn, op.ref)
    stored_rows.sort(key=lambda s: (s.record.scheduled_enqueue_time or 0, s.record.sequence_number))
    return port.Activated(tuple(stored_rows))


def _purge(conn: sqlite3.Connection, op: port.Purge, claims: Claims) -> port.Purged:
    through = INT64_MAX if op.through_sequence_number is None else op.through_sequence_number
    counts = Counts()
    purged = conn.execute(SQL["purge"], (op.ref.entity, op.ref.partition, through, op.now)).fetchall()
    for state, size in purged:
        counts.add(state, size, -1)
    counts.write(conn, op.ref)
    return port.Purged(len(purged))


def _restore(conn: sqlite3.Connection, op: port.Restore, claims: Claims) -> port.Restored:
    ref = op.ref
    own = [m.sequence_number for m in op.messages]
    held = {n for (n,) in conn.execute(SQL["select_numbers_held"], (ref.entity, ref.partition, json.dumps(own)))
            } if own else set()
    back: list[MessageRecord] = []
    restored: list[bool] = []
    for m in op.messages:
        ok = m.sequence_number > 0 and m.sequence_number not in held
        restored.append(ok)
        if ok:
            held.add(m.sequence_number)
            back.append(m)
    if back:
        conn.execute(SQL["raise_high_water_mark"], (ref.entity, ref.partition, max(m.sequence_number for m in back)))
        conn.executemany(SQL["insert_message"], [message_row(ref.entity, ref.partition, m) for m in back])
        count_records(conn, ref, back)
    return port.Restored(tuple(restored))


def _cancel_scheduled(conn: sqlite3.Connection, op: port.CancelScheduled, claims: Claims) -> port.Unscheduled:
    # Under the write transaction (BEGIN IMMEDIATE): nothing changes the rows between the check and the delete.
    asked = list(dict.fromkeys(op.sequence_numbers))
    found = select_locks(conn, op.ref, asked)

    def cancellable(n: int) -> bool:
        if n not in found:
            return False
        token, until, state, _, _ = found[n]
        return state == int(MessageState.SCHEDULED) and (token is None or until is None or until <= op.now)

    missing = tuple(n for n in asked if not cancellable(n))
    if not missing and asked:
        delete_counted(conn, op.ref, asked)
    return port.Unscheduled(missing)


# ---- duplicate detection ------------------------------------------------------------------------------


def _claim_message_ids(conn: sqlite3.Connection, op: port.ClaimMessageIds, claims: Claims) -> port.IdsClaimed:
    key = (op.ref.entity, op.ref.partition)
    fresh: list[bool] = []
    for message_id in op.message_ids:
        row = conn.execute(SQL["seen_at"], (*key, message_id)).fetchone()
        if row is not None and row[0] >= op.now - op.window_ms:
            fresh.append(False)
            continue
        conn.execute(SQL["remember_id"], (*key, message_id, op.now))
        claims[claim_key(op.ref, message_id)] = op.claim
        fresh.append(True)
    return port.IdsClaimed(tuple(fresh))


def _prune_message_ids(conn: sqlite3.Connection, op: port.PruneMessageIds, claims: Claims) -> port.Done:
    conn.execute(SQL["prune_ids"], (op.ref.entity, op.ref.partition, op.seen_before))
    return port.Done()


def _remember_message_ids(conn: sqlite3.Connection, op: port.RememberMessageIds, claims: Claims) -> port.Done:
    entity, partition = op.ref.entity, op.ref.partition
    conn.executemany(SQL["remember_id"],
                     [(entity, partition, message_id, seen_at) for message_id, seen_at in op.entries])
    return port.Done()


def _forget_message_ids(conn: sqlite3.Connection, op: port.ForgetMessageIds, claims: Claims) -> port.Done:
    entity, partition = op.ref.entity, op.ref.partition
    if op.seen_before is None:
        conn.executemany(SQL["forget_id"], [(entity, partition, message_id) for message_id in op.message_ids])
    else:
        conn.executemany(SQL["forget_id_seen_before"],
                         [(entity, partition, message_id, op.seen_before) for message_id in op.message_ids])
    return port.Done()


# ---- sessions -----------------------------------------------------------------------------------------


def _claim_session(conn: sqlite3.Connection, op: port.ClaimSession, claims: Claims) -> port.SessionClaimed:
    key = (op.ref.entity, op.ref.partition)
    session_id = op.session_id
    if session_id is None:
        row = conn.execute(SQL["next_free_session"], (op.now, *key)).fetchone()
        if row is None:
            return port.SessionClaimed(None)
        session_id = row[0]
    taken = conn.execute(SQL["take_session"], (*key, session_id, op.token.bytes, op.locked_until, op.owner,
                                               op.now)).fetchone()
    return port.SessionClaimed(session_id if taken is not None else None)


def _renew_session(conn: sqlite3.Connection, op: port.RenewSession, claims: Claims) -> port.Renewed:
    cur = conn.execute(SQL["renew_session"], (op.locked_until, op.ref.entity, op.ref.partition, op.session_id,
                                              op.token.bytes, op.now))
    return port.Renewed((cur.rowcount == 1,))


def _release_session(conn: sqlite3.Connection, op: port.ReleaseSession, claims: Claims) -> port.Renewed:
    cur = conn.execute(SQL["release_session"], (op.ref.entity, op.ref.partition, op.session_id, op.token.bytes))
    return port.Renewed((cur.rowcount == 1,))


def _put_session_state(conn: sqlite3.Connection, op: port.PutSessionState, claims: Claims) -> port.Done:
    key = (op.ref.entity, op.ref.partition, op.session_id)
    if op.state is None:
        conn.execute(SQL["clear_session_state"], key)
    else:
        conn.execute(SQL["put_session_state"], (*key, op.state, op.updated_at))
    return port.Done()


# ---- move keys ----------------------------------------------------------------------------------------


def _remember_move_keys(conn: sqlite3.Connection, op: port.RememberMoveKeys, claims: Claims) -> port.Done:
    conn.executemany(SQL["remember_move_key"], [(op.ref.entity, op.ref.partition, k) for k in op.keys])
    return port.Done()


def _forget_move_keys(conn: sqlite3.Connection, op: port.ForgetMoveKeys, claims: Claims) -> port.Done:
    conn.executemany(SQL["forget_move_key"], [(op.ref.entity, op.ref.partition, k) for k in op.keys])
    return port.Done()


# ---- entities -----------------------------------------------------------------------------------------


def _put_entity(conn: sqlite3.Connection, op: port.PutEntity, claims: Claims) -> port.Done:
    put_entity(conn, op.entity)
    return port.Done()


def _delete_entity(conn: sqlite3.Connection, op: port.DeleteEntity, claims: Claims) -> port.Done:
    path = op.path
    for table in _PARTITION_TABLES:
        conn.execute(SQL[f"delete_entity_{table}"], (path,))
        conn.execute(SQL[f"delete_sub_queues_{table}"], (path + "/$", path + "/%"))
    conn.execute(SQL["delete_entity"], (path,))
    conn.execute(SQL["delete_entity_rules"], (path,))
    conn.execute(SQL["delete_entity_activity"], (path,))
    return port.Done()


def _record_activity(conn: sqlite3.Connection, op: port.RecordActivity, claims: Claims) -> port.Done:
    conn.executemany(SQL["record_activity"], [(e.path, op.node, e.last_activity, e.receivers, op.now)
                                              for e in op.entries])
    return port.Done()


def _delete_idle_entity(conn: sqlite3.Connection, op: port.DeleteIdleEntity, claims: Claims) -> port.IdleDeleted:
    if conn.execute(SQL["activity_busy"], (op.path, op.active_after, op.live_after)).fetchone() is not None:
        return port.IdleDeleted(False)
    if conn.execute(SQL["delete_entity"], (op.path,)).rowcount != 1:
        return port.IdleDeleted(False)
    conn.execute(SQL["delete_entity_activity"], (op.path,))
    return port.IdleDeleted(True)


def _put_rule(conn: sqlite3.Connection, op: port.PutRule, claims: Claims) -> port.RuleWritten:
    rule = port.encode_properties(port.EntityRecord(op.subscription, port.SUBSCRIPTION_KIND, {}), op.rule)
    cur = conn.execute(SQL["replace_rule"] if op.replace else SQL["add_rule"], (op.subscription, op.name, rule))
    return port.RuleWritten(cur.rowcount == 1)


def _delete_rule(conn: sqlite3.Connection, op: port.DeleteRule, claims: Claims) -> port.RuleWritten:
    cur = conn.execute(SQL["delete_rule"], (op.subscription, op.name))
    return port.RuleWritten(cur.rowcount == 1)


HANDLERS: Final[dict[type, Handler]] = {
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
    port.RememberMoveKeys: _remember_move_keys,
    port.ForgetMoveKeys: _forget_move_keys,
    port.PutEntity: _put_entity,
    port.DeleteEntity: _delete_entity,
    port.RecordActivity: _record_activity,
    port.DeleteIdleEntity: _delete_idle_entity,
    port.PutRule: _put_rule,
    port.DeleteRule: _delete_rule,
}
