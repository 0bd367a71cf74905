"""``decide(view, command, now) -> Decision``: dispatch to the feature that handles the command, then
what every turn does (timers, deliveries, waiting session accepts), then the batch and the read."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from sodalite.model.partition_core import (
    commands,
    deferral,
    maintenance,
    receivers,
    sending,
    sessions,
    settling,
    timers,
    transactions,
    window,
)
from sodalite.model.partition_core.replies import Decision, ReadCounts, ReadWindow, SettingsUpdated
from sodalite.model.partition_core.turn import Turn
from sodalite.model.partition_core.view import View, touch
from sodalite.model.store_ops import MoveMessages, RenewLocks
from sodalite.model.store_ops import Settle as SettleOp

_Handler = Callable[[Turn, commands.Command], None]
C = TypeVar("C")


def decide(view: View, command: commands.Command, now: int) -> Decision:
    """Decide what ``command`` at ``now`` does to the partition (see the package docstring)."""
    turn = Turn(view, now)
    kind = type(command)
    if kind in _USES:
        touch(view, now)
    _HANDLERS[kind](turn, command)
    sending.restore_again(turn)
    timers.due(turn)
    if view.settings.requires_session:
        if view.available:
            sessions.pump_sessions(turn)
        sessions.grant_waiters(turn)
    elif view.available:
        window.pump(turn)
    return finish(turn)


# ---- the store's answers: each continuation reads its own ------------------------------------------------


def on_results(turn: Turn, command: commands.StoreResults) -> None:
    ctxs = turn.view.pending.pop(command.batch_id, None)
    if ctxs is not None:
        for ctx, result in zip(ctxs, command.results, strict=True):
            if isinstance(result, ctx.reads):  # the result it reads (see Continuation)
                ctx.done(turn, result, command.batch_id)
    _answer_update(turn, command.batch_id)


def on_failed(turn: Turn, command: commands.StoreFailed) -> None:
    """Nothing of the batch happened: say so, and let reads find its messages again."""
    ctxs = turn.view.pending.pop(command.batch_id, None)
    if ctxs is not None:
        lost = transactions.fenced_lock(turn, ctxs, command)
        answered = None if lost is None else lost[0]
        for ctx in ctxs:
            ctx.failed(turn, answered)
        if lost is not None:
            transactions.answer_fenced(turn, lost)
    _answer_update(turn, command.batch_id)


def _answer_update(turn: Turn, batch_id: int) -> None:
    update = turn.view.updates_waiting.pop(batch_id, None)
    if update is not None:
        turn.replies.append(SettingsUpdated(*update))


# ---- the batch ----------------------------------------------------------------------------------------


def finish(turn: Turn) -> Decision:
    """The turn's operations as one batch (claims, then one Settle, one RenewLocks, the moves, then the
    rest), the read to run, the replies and the next time to call."""
    view, now = turn.view, turn.now
    for op, ctx in turn.claims:
        turn.op(op, ctx)
    if turn.settles:
        turn.op(SettleOp(now, tuple(item for item, _ in turn.settles)),
                settling.SettleCtx(tuple(entry for _, entry in turn.settles)))
    if turn.renews:
        turn.op(RenewLocks(now, turn.renews[0][1][2], tuple(item for item, _ in turn.renews)),
                settling.RenewCtx(tuple(entry for _, entry in turn.renews)))
    if turn.dead_letter_moves:
        forward = view.settings.forward_dead_letters
        # Into the dead-letter queue a message keeps its number (as Service Bus's); forwarded, it is new there.
        turn.op(MoveMessages(now, tuple(i for i, _ in turn.dead_letter_moves), forward is None,
                             None if forward is None else forward.target, keep_sequence_numbers=forward is None),
                window.MoveCtx(tuple(r for _, r in turn.dead_letter_moves)))
    if turn.drop_moves:
        turn.op(MoveMessages(now, tuple(i for i, _ in turn.drop_moves), False),
                window.MoveCtx(tuple(r for _, r in turn.drop_moves)))
    for op, ctx in zip(turn.tail_ops, turn.tail_ctxs, strict=True):
        turn.op(op, ctx)
    batch_id: int | None = None
    if turn.ops:
        batch_id = view.next_batch_id
        view.next_batch_id += 1
        view.pending[batch_id] = tuple(turn.ctxs)
    if turn.update is not None:  # answered once the batch that drops its locks is done
        if batch_id is None:
            turn.replies.append(SettingsUpdated(*turn.update))
        else:
            view.updates_waiting[batch_id] = turn.update
    return Decision(view, tuple(turn.ops), batch_id, _read(view, batch_id), tuple(turn.replies),
                    timers.next_due(view, now))


def _read(view: View, batch_id: int | None) -> ReadWindow | ReadCounts | None:
    """At most one read: the counts when they must be read back, else the window's next rows when it
    is below half its cap and not at the tail."""
    read = maintenance.counts_read(view, batch_id)
    if read is not None:
        return read
    win = view.window
    if (view.available and win.read_in_flight is None and not win.at_tail
            and win.size < view.settings.window_bytes // 2):
        win.read_in_flight = view.settings.read_count
        win.read_from = win.cursor + 1
        return ReadWindow(win.read_from, view.settings.read_count)
    return None


# ---- the other commands -----------------------------------------------------------------------------------


def _set_available(available: bool) -> Callable[[Turn, object], None]:
    def handle(turn: Turn, _command: object) -> None:
        turn.view.available = available
    return handle


def _on_arrived(turn: Turn, command: commands.Arrived) -> None:
    """Their numbers may lie below this core's cursor (another node appended while this one's own
    appends moved the cursor on): read again from the start, as a rescan does. Rows already in the
    window, locked here or being claimed are not taken twice, and claims are fenced by the store."""
    view = turn.view
    view.counts.active += max(command.count, 0)
    view.window.cursor = 0
    view.window.at_tail = False
    view.sessions.maybe_ready = True


def _on_refresh_counts(turn: Turn, _command: commands.RefreshCounts) -> None:
    turn.view.counts.refresh = True


def _on_send(turn: Turn, command: commands.Send | commands.Schedule) -> None:
    sending.on_send(turn, command.drafts, command.reply_to)


def _on_renew_session(turn: Turn, command: commands.RenewSessionLock) -> None:
    sessions.on_renew_session(turn, command.session_id, command.reply_to)


def _nothing(_turn: Turn, _command: object) -> None:
    """A Tick or a Touch: what every turn does is all there is to do."""


def _on(kind: type[C], handler: Callable[[Turn, C], None]) -> tuple[type[object], _Handler]:
    """A table entry: ``handler`` takes commands of ``kind`` (checked here, so dispatch needs no test)."""
    return kind, cast(_Handler, handler)


# Requests: each is a use of the entity (AutoDeleteOnIdle).
_REQUESTS: list[tuple[type[object], _Handler]] = [
    _on(commands.Send, _on_send),
    _on(commands.Schedule, _on_send),
    _on(commands.Publish, sending.on_publish),
    _on(commands.CancelScheduled, sending.on_cancel),
    _on(commands.Receive, receivers.on_receive),
    _on(commands.CloseConsumer, receivers.on_close_consumer),
    _on(commands.AcceptSession, sessions.on_accept),
    _on(commands.RenewSessionLock, _on_renew_session),
    _on(commands.GetSessionState, sessions.on_get_state),
    _on(commands.SetSessionState, sessions.on_set_state),
    _on(commands.Settle, settling.on_settle),
    _on(commands.RenewLock, settling.on_renew),
    _on(commands.ReceiveDeferred, deferral.on_receive_deferred),
    _on(commands.CompleteThrough, maintenance.on_complete_through),
    _on(commands.MoveOut, maintenance.on_move_out),
    _on(commands.Transact, transactions.on_transact),
    _on(commands.UpdateSettings, maintenance.on_update_settings),
    _on(commands.Touch, _nothing),
]
_HANDLERS: dict[type[object], _Handler] = dict([
    # the store and time
    _on(commands.StoreResults, on_results),
    _on(commands.StoreFailed, on_failed),
    _on(commands.WindowRead, window.on_window_read),
    _on(commands.CountsRead, maintenance.on_counts_read),
    _on(commands.RefreshCounts, _on_refresh_counts),
    _on(commands.StoreAvailable, _set_available(True)),
    _on(commands.StoreUnavailable, _set_available(False)),
    _on(commands.Arrived, _on_arrived),
    _on(commands.Landed, sending.on_landed),
    _on(commands.DueInStore, timers.on_due_in_store),
    _on(commands.Unsent, sending.on_unsent),
    _on(commands.Tick, _nothing),
    *_REQUESTS,
])
_USES = frozenset(kind for kind, _ in _REQUESTS)
