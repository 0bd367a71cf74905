"""Sending: sends and schedules, a topic's publish, cancels, rows other cores landed here, and
ReceiveAndDelete deliveries put back. Duplicate detection is applied here; a send is acknowledged
once its ``Append`` committed, with the numbers the store gave."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from sodalite.model.dedup import DuplicateDetector
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import LAST_INSTANT_MS, MessageDraft
from sodalite.model.partition_core.commands import CancelScheduled, Landed, Publish, PublishEntry, Unsent
from sodalite.model.partition_core.copies import numbered
from sodalite.model.partition_core.replies import (
    MessageNotFound,
    Published,
    Refused,
    ScheduledCancelled,
    SendAccepted,
    ServerBusy,
)
from sodalite.model.partition_core.settings import NO_REPLY, ReplyTo
from sodalite.model.partition_core.settling import settle_lock, usable_lock
from sodalite.model.partition_core.turn import AnswerCtx, Continuation, Turn, store_down
from sodalite.model.partition_core.view import View, next_token, session_ready
from sodalite.model.partition_core.window import admit, take_in
from sodalite.model.store_ops import (
    Append,
    Appended,
    AppendTo,
    ClaimMessageIds,
    Gate,
    IdsClaimed,
    Outcome,
    RememberMessageIds,
    Restore,
    Restored,
    Unscheduled,
)
from sodalite.model.store_ops import CancelScheduled as CancelScheduledOp


def record_for(draft: MessageDraft, now: int, default_ttl: int | None) -> MessageRecord:
    """The unnumbered record a send stores for ``draft`` at ``now``. The entity's default
    time-to-live is also the ceiling (a longer one is reduced, and the message carries the one that
    applies); a message scheduled for later is enqueued, and its time-to-live counts, from its
    scheduled time (message-expiration seed)."""
    ttl = draft.time_to_live
    effective = default_ttl if ttl is None else (ttl if default_ttl is None else min(ttl, default_ttl))
    scheduled = draft.scheduled_enqueue_time is not None and draft.scheduled_enqueue_time > now
    enqueued = draft.scheduled_enqueue_time if scheduled and draft.scheduled_enqueue_time is not None else now
    return MessageRecord(
        0, enqueued, draft.message_id, draft.session_id, draft.partition_key, effective,
        None if effective is None else min(enqueued + effective, LAST_INSTANT_MS), draft.scheduled_enqueue_time,
        0, MessageState.SCHEDULED if scheduled else MessageState.ACTIVE, draft.durable, draft.priority,
        draft.annotations, draft.annotation_count, draft.tail)


def _first_seen(view: View, message_id: str | None, now: int, remembered: list[str]) -> bool:
    """Duplicate detection of one message: False for a duplicate within the window, else the id is
    remembered (in the detector now, in ``remembered`` for the store's history)."""
    detector = view.dedup.detector
    if detector is None or message_id is None:
        return True
    if detector.is_duplicate(message_id, now):
        return False
    detector.remember(message_id, now)
    remembered.append(message_id)
    return True


def on_send(turn: Turn, drafts: tuple[MessageDraft, ...], reply_to: ReplyTo) -> None:
    """Send or Schedule: one ``Append`` of the messages that are not pings or duplicates."""
    view, now = turn.view, turn.now
    if not view.available:
        turn.replies.append(ServerBusy(reply_to))
        return
    if view.settings.requires_session and any(d.session_id is None and not d.ping for d in drafts):
        turn.replies.append(Refused(reply_to, "the entity requires sessions: every message needs a SessionId"))
        return
    default_ttl = view.settings.default_ttl
    remembered: list[str] = []
    records = tuple(record_for(d, now, default_ttl) for d in drafts
                    if not d.ping and _first_seen(view, d.message_id, now, remembered))
    if not records:  # only duplicates and pings: nothing to make durable
        turn.replies.append(SendAccepted(reply_to, ()))
        return
    shared = view.settings.shared_store
    claim = claim_ids(turn, remembered) if shared else None
    gate = None if claim is None else Gate(claim, tuple(r.message_id for r in records))
    turn.op(Append(records, gate), AppendCtx(reply_to, records))
    if remembered and not shared:
        turn.op(RememberMessageIds(tuple((mid, now) for mid in remembered)), DedupCtx(tuple(remembered)))


def claim_ids(turn: Turn, remembered: list[str], ctx: Continuation[Any] | None = None) -> uuid.UUID | None:
    """The store's duplicate check of the ids ``remembered`` (in the batch before the appends it
    gates): the claim token the appends carry, None when there is nothing to check."""
    view = turn.view
    detector = view.dedup.detector
    if not remembered or detector is None:
        return None
    claim = next_token(view)
    turn.op(ClaimMessageIds(turn.now, detector.window_ms, claim, tuple(remembered)),
            DedupCtx(tuple(remembered)) if ctx is None else ctx)
    return claim


def drop_ids(view: View, message_ids: tuple[str, ...], result: IdsClaimed | None = None) -> None:
    """Take ids out of the detector: all of them (their batch failed), or those the store found
    already taken (another node's: the store decides again next time)."""
    dropped = set(message_ids if result is None else
                  (mid for mid, fresh in zip(message_ids, result.fresh, strict=True) if not fresh))
    detector = view.dedup.detector
    if dropped and detector is not None:
        view.dedup.detector = DuplicateDetector(detector.window_ms,
                                                [h for h in detector.history() if h[0] not in dropped])


def track_scheduled(turn: Turn, record: MessageRecord, seq: int) -> None:
    """A scheduled message stored here: counted, and its activation time kept (up to
    ``scheduled_tracked`` of them; beyond, the core polls the store for due ones)."""
    view, scheduled = turn.view, turn.view.scheduled
    view.counts.scheduled += 1
    if len(scheduled.heap) < view.settings.scheduled_tracked:
        heapq.heappush(scheduled.heap, (record.scheduled_enqueue_time or 0, seq))
    else:
        scheduled.untracked = True
        if scheduled.poll_at is None:
            scheduled.poll_at = turn.now


def on_cancel(turn: Turn, command: CancelScheduled) -> None:
    numbers = tuple(dict.fromkeys(command.sequence_numbers))
    unnumbered = tuple(n for n in numbers if n < 1)
    if unnumbered:  # 0 (what a scheduled ping was given) names no message: refused, nothing cancelled
        turn.replies.append(MessageNotFound(command.reply_to, unnumbered))
        return
    if store_down(turn, command.reply_to):
        return
    if not numbers:
        turn.replies.append(ScheduledCancelled(command.reply_to, ()))
        return
    # All or none, decided by the store in one operation: a number that is not a SCHEDULED row free
    # to take (unknown, activated, active, deferred) cancels nothing (see CancelCtx).
    turn.op(CancelScheduledOp(turn.now, numbers), CancelCtx(command.reply_to, numbers))


# ---- copies for other partitions (a topic's publish, a transaction's sends) -----------------------------


@dataclass(slots=True)
class CopyPlan:
    """The copies of the entries that are not duplicates, per target partition."""

    by_target: dict[Hashable, list[MessageRecord]]
    checked_under: dict[Hashable, list[str | None]]  # per copy, the id its message was checked under
    numbered_by: dict[Hashable, Hashable | None]  # per target, the partition numbering it
    remembered: list[str]


def plan_copies(view: View, now: int, entries: tuple[PublishEntry, ...], checks: Callable[[int], bool]) -> CopyPlan:
    """Group the entries' copies by target; entry ``i`` is checked for duplicates when ``checks(i)``."""
    plan = CopyPlan({}, {}, {}, [])
    for i, entry in enumerate(entries):
        mid = entry.message_id
        checked = checks(i) and view.dedup.detector is not None
        if checked and not _first_seen(view, mid, now, plan.remembered):
            continue
        for copy in entry.copies:
            plan.by_target.setdefault(copy.target, []).append(copy.record)
            plan.numbered_by[copy.target] = copy.numbered_by
            plan.checked_under.setdefault(copy.target, []).append(mid if checked else None)
    return plan


def store_copies(turn: Turn, plan: CopyPlan, reply_to: ReplyTo, *, answered_otherwise: bool) -> None:
    """One ``AppendTo`` per target (gated by the store's duplicate check on a shared store) and the
    history; :class:`Published` answers after the commit (or at once when there is nothing to store).
    ``answered_otherwise``: a settlement in the batch answers when there is no copy."""
    view, now = turn.view, turn.now
    stored: list[tuple[Hashable, tuple[MessageRecord, ...]]] = []
    parts = list(plan.by_target.items())
    remembered = plan.remembered
    shared = view.settings.shared_store
    # Nothing to store but the history: the history's op answers.
    answer = (None if parts or answered_otherwise else
              PublishCtx(reply_to, None, (), stored, True, True, tuple(remembered)))
    claim = claim_ids(turn, remembered, answer) if shared else None
    for i, (target, records) in enumerate(parts):
        gate = None if claim is None else Gate(claim, tuple(plan.checked_under[target]))
        turn.op(AppendTo(target, tuple(records), gate, numbered_by=plan.numbered_by[target]),
                PublishCtx(reply_to, target, tuple(records), stored, i == 0, i == len(parts) - 1))
    if remembered and not shared:
        history = tuple((mid, now) for mid in remembered)
        turn.op(RememberMessageIds(history), DedupCtx(tuple(remembered)) if answer is None else answer)
    elif not remembered and not parts and not answered_otherwise:
        turn.replies.append(Published(reply_to, ()))


def on_publish(turn: Turn, command: Publish) -> None:
    """A topic's send: its copies into the subscriptions' partitions in one batch (see Publish)."""
    view = turn.view
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    complete = command.complete
    plan = plan_copies(view, turn.now, command.entries, lambda _i: complete is None)
    if complete is not None:
        lock = usable_lock(turn, complete, command.reply_to, renewal=False)
        if lock is None:
            return
        # No copies: the settlement's own echo answers (after its commit).
        settle_lock(turn, lock, Outcome.COMPLETE, NO_REPLY if plan.by_target else command.reply_to)
        if not plan.by_target:
            return
    store_copies(turn, plan, command.reply_to, answered_otherwise=False)


def on_landed(turn: Turn, command: Landed) -> None:
    """Another core's committed rows in this partition: counted, and where the window is complete
    (at the tail, or at or below the cursor) taken in; past the cursor a read finds them."""
    view = turn.view
    window = view.window
    for record in command.records:
        seq = record.sequence_number
        if record.state is MessageState.SCHEDULED:
            track_scheduled(turn, record, seq)
            continue
        if record.state is MessageState.DEFERRED:
            view.counts.deferred += 1
            continue
        view.counts.active += 1
        session_ready(view, record.session_id)
        if window.at_tail or seq <= window.cursor:
            if window.at_tail and seq > window.cursor:
                window.cursor = seq
            admit(turn, record)
        else:
            window.landed_beyond = max(window.landed_beyond, seq)


def on_unsent(turn: Turn, command: Unsent) -> None:
    """ReceiveAndDelete deliveries never written: put back as they were before the claim (a transfer
    never written was no delivery)."""
    if command.records:
        records = tuple(r.with_delivery_count(max(r.delivery_count - 1, 0)) for r in command.records)
        turn.op(Restore(records), RestoreCtx(records))


def restore_again(turn: Turn) -> None:
    """Restores that failed are tried again once the store is there."""
    view = turn.view
    if view.restore_again and view.available:
        records, view.restore_again = tuple(view.restore_again), []
        turn.op(Restore(records), RestoreCtx(records))


# ---- the store's answers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppendCtx(AnswerCtx[Appended]):
    records: tuple[MessageRecord, ...]

    def done(self, turn: Turn, result: Appended, batch_id: int) -> None:
        view = turn.view
        window = view.window
        for record, seq in zip(self.records, result.sequence_numbers, strict=True):
            if not seq:  # a duplicate the store found (another node took its id)
                continue
            window.last_appended = max(window.last_appended, seq)
            if record.state is MessageState.SCHEDULED:
                track_scheduled(turn, record, seq)
                continue
            view.counts.active += 1
            session_ready(view, record.session_id)
            if window.at_tail and seq > window.cursor:
                window.cursor = seq
                admit(turn, numbered(record, seq))
        turn.replies.append(SendAccepted(self.reply_to, tuple(n for n in result.sequence_numbers if n)))


@dataclass(frozen=True, slots=True)
class PublishCtx(AnswerCtx[object]):
    """One op of a Publish: an ``AppendTo`` (``target``), or the history op of a publish that stores
    no copy (``target`` None, ``forget``: the ids to drop from the detector if it fails). The
    publish's ops share ``stored``; the ``first`` answers a failure, the ``last`` the success."""

    target: Hashable | None
    records: tuple[MessageRecord, ...]
    stored: list[tuple[Hashable, tuple[MessageRecord, ...]]]
    first: bool
    last: bool
    forget: tuple[str, ...] = ()

    def done(self, turn: Turn, result: object, batch_id: int) -> None:
        if isinstance(result, Appended) and self.target is not None:
            copies = tuple(numbered(r, n) for r, n in
                           zip(self.records, result.sequence_numbers, strict=True) if n)
            if copies:
                self.stored.append((self.target, copies))
        elif isinstance(result, IdsClaimed):
            drop_ids(turn.view, self.forget, result)
        if self.last:
            turn.replies.append(Published(self.reply_to, tuple(self.stored)))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        if self.first and self.reply_to is not answered:
            turn.replies.append(ServerBusy(self.reply_to))
        drop_ids(turn.view, self.forget)


@dataclass(frozen=True, slots=True)
class DedupCtx(Continuation[IdsClaimed]):
    """The history of a send's ids (``RememberMessageIds``), or the store's check of them (``ClaimMessageIds``)."""

    message_ids: tuple[str, ...]

    def done(self, turn: Turn, result: IdsClaimed, batch_id: int) -> None:
        drop_ids(turn.view, self.message_ids, result)

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        drop_ids(turn.view, self.message_ids)


@dataclass(frozen=True, slots=True)
class CancelCtx(AnswerCtx[Unscheduled]):
    """A cancel's one ``CancelScheduled`` op: the numbers asked, each once."""

    sequence_numbers: tuple[int, ...]

    def done(self, turn: Turn, result: Unscheduled, batch_id: int) -> None:
        """The store deleted every row asked, or none (``result.missing`` names why not)."""
        if result.missing:
            turn.replies.append(MessageNotFound(self.reply_to, result.missing))
            return
        view = turn.view
        view.counts.scheduled -= len(self.sequence_numbers)
        if view.scheduled.heap:  # cancelled: their times are no longer this core's to count
            view.scheduled.forget(set(self.sequence_numbers))
        turn.replies.append(ScheduledCancelled(self.reply_to, self.sequence_numbers))


@dataclass(frozen=True, slots=True)
class RestoreCtx(Continuation[Restored]):
    records: tuple[MessageRecord, ...]

    def done(self, turn: Turn, result: Restored, batch_id: int) -> None:
        """Deliveries never written are back in the store: counted again, and ready ones are first in
        line again (by number), as a released message is."""
        view = turn.view
        for record, ok in zip(self.records, result.applied, strict=True):
            if not ok:
                continue
            if record.state is MessageState.DEFERRED:
                view.counts.deferred += 1
                continue
            view.counts.active += 1
            session_ready(view, record.session_id)
            take_in(turn, record)  # else the next read finds it

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        # still deleted: put back once the store answers again (Restore is idempotent)
        turn.view.restore_again.extend(self.records)
