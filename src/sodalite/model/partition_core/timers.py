"""Time: what falls due by ``now`` (run on every command, so a late Tick changes nothing) and the next
time the caller must call again. AutoDeleteOnIdle, lock and session lapses, expiry in the window,
scheduled messages' activation, times the store named, the duplicate history's pruning, rescans."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sodalite.model.partition_core.commands import DueInStore
from sodalite.model.partition_core.replies import IdleExpired
from sodalite.model.partition_core.sessions import due_sessions, next_session_due
from sodalite.model.partition_core.settings import ReplyTo
from sodalite.model.partition_core.settling import lapse_due, next_lapse
from sodalite.model.partition_core.turn import QUIET, Continuation, Turn
from sodalite.model.partition_core.view import View, session_ready
from sodalite.model.partition_core.window import expire_due, next_expiry, take_in
from sodalite.model.store_ops import Activate, Activated, ForgetMessageIds, PruneMessageIds


def _idle_at(view: View) -> int | None:
    """When AutoDeleteOnIdle comes: no use for the idle time, no receiver, nothing scheduled."""
    idle = view.settings.auto_delete_on_idle
    if idle is None or view.idle_reported or view.credit or view.counts.scheduled != 0:
        return None
    return view.last_activity + idle


def on_due_in_store(turn: Turn, command: DueInStore) -> None:
    scheduled = turn.view.scheduled
    if command.at != scheduled.store_due_done or command.at > turn.now:
        scheduled.store_due = command.at if scheduled.store_due is None else min(scheduled.store_due, command.at)


def due(turn: Turn) -> None:
    """Everything whose time has come by ``now``."""
    view, now = turn.view, turn.now
    idle_at = _idle_at(view)
    if idle_at is not None and now >= idle_at:
        view.idle_reported = True
        turn.replies.append(IdleExpired())
    due_sessions(turn)
    if not view.available:
        return
    lapse_due(turn)
    expire_due(turn)
    _activate_due(turn)
    _prune_history(turn)
    window = view.window
    if window.rescan_at is not None and window.rescan_at <= now:
        window.rescan_at = None
        window.cursor = 0
        window.at_tail = False


def _activate_due(turn: Turn) -> None:
    """Scheduled messages whose time came, and times the store named: one ``Activate`` at a time."""
    view, now = turn.view, turn.now
    scheduled, settings = view.scheduled, view.settings
    # A time the store named (DueInStore): activate what is due and read the window again.
    if scheduled.store_due is not None and scheduled.store_due <= now:
        scheduled.store_due_done, scheduled.store_due = scheduled.store_due, None
        scheduled.activate_again = True
        view.window.cursor, view.window.at_tail = 0, False
    if scheduled.activate_in_flight:
        return
    ready = scheduled.activate_again or bool(scheduled.heap and scheduled.heap[0][0] <= now)
    if not ready and scheduled.untracked and scheduled.poll_at is not None:
        ready = scheduled.poll_at <= now
    if ready:
        scheduled.activate_again = False
        scheduled.activate_in_flight = True
        if scheduled.untracked:
            scheduled.poll_at = now + settings.scheduled_poll
        turn.tail(Activate(now, settings.activate_limit), ActivateCtx(settings.activate_limit, now))


def _prune_history(turn: Turn) -> None:
    """Duplicate-detection history past its window. On a shared store every entry past it goes (other
    nodes' too: a node that stopped prunes none), at least once per window."""
    view, now = turn.view, turn.now
    dedup = view.dedup
    if dedup.detector is None:
        return
    gone = dedup.detector.prune(now)
    window = dedup.detector.window_ms
    if view.settings.shared_store and (gone or dedup.pruned_at + window <= now):
        dedup.pruned_at = now
        turn.tail(PruneMessageIds(now - window), QUIET)
    elif gone and not view.settings.shared_store:
        turn.tail(ForgetMessageIds(tuple(gone)), QUIET)


def next_due(view: View, now: int) -> int | None:
    """The earliest time something falls due (None: no timer)."""
    candidates = next_session_due(view)
    idle_at = _idle_at(view)
    if idle_at is not None:
        candidates.append(idle_at)
    if view.available:
        for at in (next_lapse(view), next_expiry(view), view.scheduled.store_due, view.window.rescan_at):
            if at is not None:
                candidates.append(at)
        scheduled = view.scheduled
        if not scheduled.activate_in_flight:
            if scheduled.activate_again:
                candidates.append(now)
            if scheduled.heap:
                candidates.append(scheduled.heap[0][0])
            if scheduled.untracked and scheduled.poll_at is not None:
                candidates.append(scheduled.poll_at)
        detector = view.dedup.detector
        if detector is not None:
            expiry = detector.next_expiry()
            if expiry is not None:
                candidates.append(expiry)
            if view.settings.shared_store:
                candidates.append(view.dedup.pruned_at + detector.window_ms)
    return min(candidates) if candidates else None


@dataclass(frozen=True, slots=True)
class ActivateCtx(Continuation[Activated]):
    limit: int
    at: int  # the op's now: what was due by then is all it activates

    def done(self, turn: Turn, result: Activated, batch_id: int) -> None:
        view = turn.view
        scheduled, counts = view.scheduled, view.counts
        scheduled.activate_in_flight = False
        rows = result.messages
        # Rows another node scheduled (DueInStore) were never counted here.
        counts.scheduled = max(counts.scheduled - len(rows), 0)
        counts.active += len(rows)
        activated = {row.record.sequence_number for row in rows}
        if len(rows) >= self.limit:
            scheduled.activate_again = True
        else:  # every tracked time up to the op's now is done (not up to now: the batch may have waited)
            heap = scheduled.heap
            elsewhere = 0  # tracked here, due, and not among the rows: another node activated (or took) it
            while heap and heap[0][0] <= self.at:
                if heapq.heappop(heap)[1] not in activated:
                    elsewhere += 1
            counts.scheduled = max(counts.scheduled - elsewhere, 0)
        if activated:
            scheduled.forget(activated)
        if counts.scheduled <= 0:
            scheduled.none_left()
        for row in rows:
            session_ready(view, row.record.session_id)
            take_in(turn, row.record)

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        scheduled = turn.view.scheduled
        scheduled.activate_in_flight = False
        scheduled.store_due_done = None  # the store's next_due, read again, is acted on
