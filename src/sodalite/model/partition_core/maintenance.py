"""Maintenance: the entity's settings changed, complete-through (the Spark reader), rows moved out
(resubmit, move, purge by number) and the counts read back from the store after them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sodalite.model.dedup import DuplicateDetector
from sodalite.model.partition_core.commands import CompleteThrough, CountsRead, MoveOut, UpdateSettings
from sodalite.model.partition_core.replies import CompletedThrough, MovedOut, ReadCounts, ServerBusy, SessionLost
from sodalite.model.partition_core.sessions import release_session, session_locks
from sodalite.model.partition_core.settings import DROPPED, ReplyTo
from sodalite.model.partition_core.settling import drop_lock, settle_lock
from sodalite.model.partition_core.turn import AnswerCtx, Turn, store_down
from sodalite.model.partition_core.view import View
from sodalite.model.partition_core.window import drop_from_window, forget_window_through
from sodalite.model.store_ops import Moved, MoveItem, MoveMessages, Outcome, Purge, Purged

# ---- the entity's settings ------------------------------------------------------------------------------


def on_update_settings(turn: Turn, command: UpdateSettings) -> None:
    """New settings from now on; with ``drop_locks`` every lock granted here ends (see UpdateSettings)."""
    view = turn.view
    view.settings = command.settings
    window = command.settings.duplicate_window
    detector = view.dedup.detector
    if detector is not None and window is not None and window != detector.window_ms:
        view.dedup.detector = DuplicateDetector(window, detector.history())
    dropped: list[uuid.UUID] = []
    if command.drop_locks:
        _drop_sessions(turn, dropped)
        _drop_locks(turn, dropped)
    turn.update = (command.reply_to, tuple(dropped))


def _drop_sessions(turn: Turn, dropped: list[uuid.UUID]) -> None:
    view = turn.view
    for held in list(view.sessions.held.values()):
        tokens = [lock.token for lock in session_locks(view, held)]
        release_session(turn, held)  # its messages abandoned, the session lock released
        turn.replies.append(SessionLost(held.consumer, held.session_id))
        for token in tokens:  # a settlement with one of them is SessionLockLost, as after a lapse
            view.locks.note_lost(token, held.session_id)
            view.locks.held[token].dropped = True
        dropped.extend(tokens)


def _drop_locks(turn: Turn, dropped: list[uuid.UUID]) -> None:
    view, now = turn.view, turn.now
    for lock in list(view.locks.held.values()):
        if lock.settling or lock.session_token is not None:
            continue  # a settlement already decided applies; a session's went with its session
        dropped.append(lock.token)
        if lock.locked_until <= now:
            lock.dropped = True  # lapsed already: the timers end it (once the store is up)
            continue
        if view.available:
            settle_lock(turn, lock, Outcome.ABANDON, DROPPED)  # ends as a lapse would
        else:
            lock.dropped = True  # the store cannot hear of it: unusable here, it lapses at its time


# ---- complete-through -----------------------------------------------------------------------------------


def on_complete_through(turn: Turn, command: CompleteThrough) -> None:
    view = turn.view
    if store_down(turn, command.reply_to):
        return
    forget_window_through(view, command.sequence_number)
    turn.op(Purge(turn.now, command.sequence_number), PurgeCtx(command.reply_to, command.sequence_number, turn.now))


@dataclass(frozen=True, slots=True)
class PurgeCtx(AnswerCtx[Purged]):
    through: int
    at: int  # the op's now: a row locked by then stays, others go

    def done(self, turn: Turn, result: Purged, batch_id: int) -> None:
        view = turn.view
        forget_window_through(view, self.through)  # rows that came back to it while the purge was in flight
        # A lock that had lapsed by the purge's time did not keep its row: the purge deleted it. Such a
        # lock is still here when it was busy at its time (a renewal in flight, answered since without
        # extending it) and the store was down when that answer came (nothing lapses then). It goes now,
        # so the core never holds a lock on a purged row nor lapses it back into the window later. Every
        # batch decided before the purge has been answered, so a lock's time is the store's; a lock busy
        # now is in a batch decided after the purge (a lapsed lock is neither renewed nor settled),
        # whose answer says.
        for lock in [lock for lock in view.locks.held.values() if lock.record.sequence_number <= self.through
                     and lock.locked_until <= self.at and not lock.busy]:
            drop_lock(view, lock)
        view.scheduled.forget(above=self.through)
        if result.count:
            view.counts.stale_after = max(view.counts.stale_after, batch_id)
        turn.replies.append(CompletedThrough(self.reply_to, result.count))


# ---- counts read back -----------------------------------------------------------------------------------


def counts_read(view: View, batch_id: int | None) -> ReadCounts | None:
    """A ReadCounts when a committed Purge left the counts unknown, or RefreshCounts asked, and none is
    in flight."""
    counts = view.counts
    if not (counts.stale_after or counts.refresh) or counts.read_after is not None or not view.available:
        return None
    counts.refresh = False
    counts.read_after = batch_id if batch_id is not None else view.next_batch_id - 1
    return ReadCounts()


def on_counts_read(turn: Turn, command: CountsRead) -> None:
    view = turn.view
    counts = view.counts
    after = counts.read_after
    counts.read_after = None
    if command.counts is None or after is None:
        return  # asked again by the next decision
    counts.active, counts.scheduled, counts.deferred = command.counts
    if after >= counts.stale_after:
        counts.stale_after = 0
    if counts.scheduled <= 0:
        view.scheduled.none_left()


# ---- moving rows out (resubmit, move, purge by number) ----------------------------------------------


def on_move_out(turn: Turn, command: MoveOut) -> None:
    """One fenced MoveMessages of the named rows; rows locked or being claimed here are skipped (the
    store would skip a locked one; a claim decided earlier is applied first), the others leave the
    window now, so no receive in this turn or later claims them while the move is in flight."""
    view = turn.view
    if store_down(turn, command.reply_to):
        return
    sent: list[MoveItem] = []
    seen: set[int] = set()
    for item in command.items:
        seq = item.sequence_number
        if seq in seen or seq in view.locks.by_seq or seq in view.locks.claiming:
            continue
        seen.add(seq)
        sent.append(item)
        drop_from_window(view, seq)
    asked = tuple(item.sequence_number for item in command.items)
    if not sent:
        turn.replies.append(MovedOut(command.reply_to, (None,) * len(asked)))
        return
    turn.op(MoveMessages(turn.now, tuple(sent), False, command.target),
            MoveOutCtx(command.reply_to, asked, tuple(item.sequence_number for item in sent)))


@dataclass(frozen=True, slots=True)
class MoveOutCtx(AnswerCtx[Moved]):
    asked: tuple[int, ...]  # every item's number, in order
    sent: tuple[int, ...]  # the numbers in the MoveMessages (each once, none held here)

    def done(self, turn: Turn, result: Moved, batch_id: int) -> None:
        view = turn.view
        window = view.window
        outcome = dict(zip(self.sent, result.sequence_numbers, strict=True))
        moved = {seq for seq, new in outcome.items() if new is not None}
        for seq, new in outcome.items():
            if new is None:  # locked elsewhere, or gone: if it is still there, a read finds it again
                window.cursor = min(window.cursor, seq - 1)
                window.at_tail = False
            else:
                drop_from_window(view, seq)  # a read in flight may have brought it back
        if moved:
            view.scheduled.forget(moved)
            # The rows' states are the store's (scheduled, deferred, active): read the counts back.
            view.counts.stale_after = max(view.counts.stale_after, batch_id)
        replies: list[int | None] = []
        answered: set[int] = set()
        for seq in self.asked:
            replies.append(None if seq in answered else outcome.get(seq))
            answered.add(seq)
        turn.replies.append(MovedOut(self.reply_to, tuple(replies)))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        window = turn.view.window
        if self.sent:  # nothing moved: the rows taken out of the window are read again
            window.cursor = min(window.cursor, min(self.sent) - 1)
            window.at_tail = False
        turn.replies.append(ServerBusy(self.reply_to))
