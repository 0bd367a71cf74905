"""AMQP transactions: the settlements and sends of one transaction in ONE batch, all or none."""

from __future__ import annotations

from typing import Any

from sodalite.model.partition_core.commands import StoreFailed, Transact
from sodalite.model.partition_core.replies import LockLost, Refused, SessionLockLost
from sodalite.model.partition_core.sending import plan_copies, store_copies
from sodalite.model.partition_core.settings import NO_REPLY, ReplyTo
from sodalite.model.partition_core.settling import SettleCtx, settle_lock, usable_lock
from sodalite.model.partition_core.turn import Continuation, Turn, store_down
from sodalite.model.partition_core.view import HeldLock
from sodalite.model.partition_core.window import forget
from sodalite.model.store_ops import Settle as SettleOp


def on_transact(turn: Turn, command: Transact) -> None:
    """An AMQP transaction's commit (see :class:`Transact`): all checks first, then one batch.

    The settlements' ``Settle`` is fenced at this decision's time, and batches apply in order, so on
    one node a lock usable now is still this core's when the batch applies. Another node sharing
    the store may claim it once it lapsed, so the ``Settle`` is all-or-none: the store applies every
    settlement and every copy, or (a failed or fenced batch) nothing at all."""
    view, now = turn.view, turn.now
    if store_down(turn, command.reply_to):
        return
    locks: list[HeldLock] = []
    for settle in command.settles:
        lock = usable_lock(turn, settle.token, command.reply_to, renewal=False)
        if lock is None:
            return  # refused: nothing changed
        if any(held is lock for held in locks):
            turn.replies.append(Refused(command.reply_to, "a transaction settles a message once"))
            return
        locks.append(lock)
    deduplicate = command.deduplicate
    plan = plan_copies(view, now, command.entries, lambda i: i < len(deduplicate) and deduplicate[i])
    start = len(turn.settles)
    for j, (lock, settle) in enumerate(zip(locks, command.settles, strict=True)):
        # With no copy to store, the last settlement's echo answers (after the commit).
        answers = not plan.by_target and j == len(locks) - 1
        settle_lock(turn, lock, settle.outcome, command.reply_to if answers else NO_REPLY,
                    settle.properties_to_modify, settle.reason, settle.description)
    mine = turn.settles[start:]
    del turn.settles[start:]
    if mine:
        # All or none: should the store find a lock no longer this core's when the batch applies
        # (another node claimed the message after it lapsed), the whole batch rolls back.
        turn.op(SettleOp(now, tuple(item for item, _ in mine), all_or_none=True),
                SettleCtx(tuple(entry for _, entry in mine), command.reply_to))
    # On a store other nodes share, the store decides duplicates (as for a send): the batch takes the
    # ids and gates the copies by them; a duplicate it finds is left out of the numbers.
    store_copies(turn, plan, command.reply_to, answered_otherwise=bool(locks))


def fenced_lock(turn: Turn, ctxs: tuple[Continuation[Any], ...],
                command: StoreFailed) -> tuple[ReplyTo, HeldLock] | None:
    """A transaction's settlement the store fenced (``StoreFailed.fenced``): its lock is lost here, and
    the transaction is answered so (rolled back) instead of ServerBusy. Returns who to answer, and the lock."""
    fenced = command.fenced
    if fenced is None or not 0 <= fenced[0] < len(ctxs):
        return None
    settle_ctx = ctxs[fenced[0]]
    if (not isinstance(settle_ctx, SettleCtx) or settle_ctx.transaction is None
            or not 0 <= fenced[1] < len(settle_ctx.entries)):
        return None
    view = turn.view
    lock = view.locks.held.pop(settle_ctx.entries[fenced[1]][1], None)
    if lock is None:
        return None
    view.locks.by_seq.pop(lock.record.sequence_number, None)
    forget(view, (lock.record,))
    return settle_ctx.transaction, lock


def answer_fenced(turn: Turn, lost: tuple[ReplyTo, HeldLock]) -> None:
    reply_to, lock = lost
    if lock.session_token is not None:
        turn.replies.append(SessionLockLost(reply_to, lock.record.session_id or "", lock.token))
    else:
        turn.replies.append(LockLost(reply_to, lock.token))
