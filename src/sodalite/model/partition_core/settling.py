"""Message locks: settling them (complete, abandon, release, defer, dead-letter), renewing them, and
their lapse. One fenced ``Settle`` and one ``RenewLocks`` per batch; a reply waits for its commit."""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass

from sodalite.model.message import MessageState
from sodalite.model.partition import MAX_DELIVERY_COUNT_EXCEEDED, TTL_EXPIRED
from sodalite.model.partition_core.commands import RenewLock, Settle
from sodalite.model.partition_core.dead_letters import dead_letter_settle, service_edit
from sodalite.model.partition_core.replies import (
    Delivered,
    LockLost,
    LockRenewed,
    Refused,
    ServerBusy,
    SessionLockLost,
    SettlementDone,
)
from sodalite.model.partition_core.settings import DROPPED, NO_REPLY, Consumer, ReplyTo
from sodalite.model.partition_core.turn import Continuation, Turn
from sodalite.model.partition_core.view import HeldLock, View, expired, session_ready
from sodalite.model.partition_core.window import admit, forget
from sodalite.model.store_ops import AnnotationEdit, Outcome, Renewed, Settled, SettleItem


def usable_lock(turn: Turn, token: uuid.UUID, reply_to: ReplyTo, *, renewal: bool) -> HeldLock | None:
    """The lock ``token`` names if a settlement or renewal may use it now, else a reply says why not.

    A settlement may follow a renewal still in flight (it was sent while the lock held, and the
    batches apply in order); nothing may follow a settlement."""
    view = turn.view
    lock = view.locks.held.get(token)
    if lock is None:
        lost = view.locks.lost.get(token)
        if lost is not None:
            turn.replies.append(SessionLockLost(reply_to, lost, token))
            return None
    elif lock.session_token is not None:
        sid = lock.record.session_id or ""
        held = view.sessions.held.get(sid)
        if held is None or held.token != lock.session_token or held.locked_until <= turn.now:
            turn.replies.append(SessionLockLost(reply_to, sid, token))
            return None
        if renewal:
            turn.replies.append(Refused(reply_to, "a message of a session has no lock of its own to renew; "
                                                  "renew the session lock"))
            return None
    if (lock is None or lock.settling or lock.dropped or (renewal and lock.renewing)
            or lock.locked_until <= turn.now):
        turn.replies.append(LockLost(reply_to, token))
        return None
    if not view.available:
        turn.replies.append(ServerBusy(reply_to))
        return None
    return lock


def on_settle(turn: Turn, command: Settle) -> None:
    lock = usable_lock(turn, command.token, command.reply_to, renewal=False)
    if lock is None:
        return
    settle_lock(turn, lock, command.outcome, command.reply_to, command.properties_to_modify, command.reason,
                command.description)


def _applied(view: View, now: int, lock: HeldLock, asked: Outcome,
             properties_to_modify: tuple[tuple[str, object], ...],
             edit: AnnotationEdit | None) -> tuple[Outcome, AnnotationEdit | None]:
    """What an abandon or release does when the lock ends: an expired message leaves now, and one
    whose deliveries are used up too; in a dead-letter queue an abandon does not count."""
    record = lock.record
    if expired(record, now):
        if view.settings.dead_letter_on_expiration:
            # properties to modify stay, as v1 stores them before the abandon finds it expired
            return Outcome.DEAD_LETTER, service_edit(record, TTL_EXPIRED, "the message expired", properties_to_modify)
        return Outcome.COMPLETE, None
    if asked is Outcome.ABANDON and record.delivery_count >= view.settings.max_delivery_count:
        return Outcome.DEAD_LETTER, service_edit(record, MAX_DELIVERY_COUNT_EXCEEDED,
                                                 f"delivered {record.delivery_count} times", properties_to_modify)
    if asked is Outcome.ABANDON and not view.settings.abandon_counts:
        return Outcome.RELEASE, edit
    return asked, edit


def settle_lock(turn: Turn, lock: HeldLock, asked: Outcome, reply_to: ReplyTo,
                properties_to_modify: tuple[tuple[str, object], ...] = (), reason: str | None = None,
                description: str | None = None) -> None:
    """Settle ``lock`` in this turn's ``Settle``; ``reply_to`` hears after the commit."""
    view, now = turn.view, turn.now
    record = lock.record
    applied = asked
    edit: AnnotationEdit | None = None
    if properties_to_modify or asked is Outcome.DEAD_LETTER:
        edit = AnnotationEdit(record.annotations, record.annotation_count, properties_to_modify,
                              reason if asked is Outcome.DEAD_LETTER else None,
                              description if asked is Outcome.DEAD_LETTER else None, base_tail=record.tail)
    if asked in (Outcome.ABANDON, Outcome.RELEASE) and lock.state is MessageState.ACTIVE:
        applied, edit = _applied(view, now, lock, asked, properties_to_modify, edit)
    lock.settling = True
    # A client's dead-lettering ends the delivery without counting it (as a complete or a defer); one
    # decided here for an abandon (deliveries used up, or expired) keeps the abandon's count.
    item = (dead_letter_settle(view, now, record, lock.token, edit, give_back=asked is Outcome.DEAD_LETTER)
            if applied is Outcome.DEAD_LETTER else SettleItem(record.sequence_number, lock.token, applied, edit))
    turn.settles.append((item, (reply_to, lock.token, asked, applied)))


def release(turn: Turn, lock: HeldLock) -> None:
    """Give ``lock``'s delivery back at once (nobody is there to take it), in this turn's ``Settle``."""
    lock.settling = True
    turn.settles.append((SettleItem(lock.record.sequence_number, lock.token, Outcome.RELEASE),
                         (NO_REPLY, lock.token, Outcome.RELEASE, Outcome.RELEASE)))


def on_renew(turn: Turn, command: RenewLock) -> None:
    lock = usable_lock(turn, command.token, command.reply_to, renewal=True)
    if lock is None:
        return
    until = turn.now + turn.view.settings.lock_duration
    lock.renewing = True
    turn.renews.append(((lock.record.sequence_number, lock.token), (command.reply_to, lock.token, until)))


# ---- a lock ends --------------------------------------------------------------------------------------


def unbusy(view: View, token: uuid.UUID, *, settling: bool) -> None:
    """The settlement (or renewal) of a lock did not happen: it is as it was, and may lapse."""
    lock = view.locks.held.get(token)
    if lock is not None:
        if settling:
            lock.settling = False
        else:
            lock.renewing = False
        heapq.heappush(view.locks.heap, (lock.locked_until, token))


def drop_lock(view: View, lock: HeldLock) -> None:
    """The lock is no longer held here (lapsed, or its row purged); a session's is remembered as lost."""
    locks = view.locks
    del locks.held[lock.token]
    if lock.session_token is not None and lock.record.session_id is not None:
        locks.note_lost(lock.token, lock.record.session_id)
    locks.by_seq.pop(lock.record.sequence_number, None)


def _let_go(view: View, lock: HeldLock) -> None:
    """The store says the lock is not this core's any more: its row is read again if still there."""
    del view.locks.held[lock.token]
    view.locks.by_seq.pop(lock.record.sequence_number, None)
    forget(view, (lock.record,))


def lapse_due(turn: Turn) -> None:
    """Locks that lapsed: the message is ready again (or leaves), its delivery already counted."""
    view, now = turn.view, turn.now
    heap = view.locks.heap
    while heap and heap[0][0] <= now:
        until, token = heapq.heappop(heap)
        lock = view.locks.held.get(token)
        if lock is None or lock.locked_until != until or lock.busy:
            continue  # settled, renewed, or its batch will say (and push it again)
        drop_lock(view, lock)
        if lock.state is MessageState.ACTIVE:
            admit(turn, lock.record)


def next_lapse(view: View) -> int | None:
    heap = view.locks.heap
    while heap:
        until, token = heap[0]
        lock = view.locks.held.get(token)
        if lock is None or lock.locked_until != until or lock.busy:
            heapq.heappop(heap)  # a busy lock is pushed again when its batch answers
            continue
        return until
    return None


# ---- the store's answers ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliverTo:
    """A settle entry's ``reply_to`` for a ReceiveAndDelete of a session's message: deliver when it applies."""

    consumer: Consumer
    session_id: str


def _settled_one(turn: Turn, lock: HeldLock, applied: Outcome) -> None:
    """A settlement committed: the counts follow, and an abandoned or released message is ready again."""
    counts = turn.view.counts
    was_active = lock.state is MessageState.ACTIVE
    if applied in (Outcome.COMPLETE, Outcome.DEAD_LETTER):
        if was_active:
            counts.active -= 1
        else:
            counts.deferred -= 1
    elif applied is Outcome.DEFER:
        if was_active:
            counts.active -= 1
            counts.deferred += 1
    elif was_active:  # abandon or release: ready again, first in line
        record = lock.record
        if applied is Outcome.RELEASE:
            record = record.with_delivery_count(max(record.delivery_count - 1, 0))
        admit(turn, record)


@dataclass(frozen=True, slots=True)
class SettleCtx(Continuation[Settled]):
    """A batch's ``Settle``: per item (reply_to, token, asked, applied)."""

    entries: tuple[tuple[ReplyTo, uuid.UUID, Outcome, Outcome], ...]
    transaction: ReplyTo | None = None  # a Transact's all-or-none Settle: who hears a fenced failure

    def done(self, turn: Turn, result: Settled, batch_id: int) -> None:
        view = turn.view
        for (reply_to, token, asked, applied), ok in zip(self.entries, result.applied, strict=True):
            lock = view.locks.held.pop(token, None)
            if lock is None:  # cannot happen: a settling lock is only removed here
                continue
            view.locks.by_seq.pop(lock.record.sequence_number, None)
            if isinstance(reply_to, DeliverTo):  # a session's ReceiveAndDelete: delivered once deleted
                if ok:
                    view.counts.active -= 1
                    turn.replies.append(Delivered(reply_to.consumer, lock.record, None, None))
                else:
                    session_ready(view, reply_to.session_id)
                    forget(view, (lock.record,))
                continue
            quiet = reply_to is NO_REPLY or reply_to is DROPPED
            if not ok:
                if not quiet:
                    turn.replies.append(LockLost(reply_to, token))
                forget(view, (lock.record,))
                continue
            _settled_one(turn, lock, applied)
            if not quiet:
                turn.replies.append(SettlementDone(reply_to, token, asked))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        view = turn.view
        for reply_to, token, _asked, _applied in self.entries:
            unbusy(view, token, settling=True)
            if isinstance(reply_to, DeliverTo):  # not deleted: its lock lapses, the credit is back
                credit = view.credit.get(reply_to.consumer)
                if credit is not None:
                    credit.count += 1
                continue
            if reply_to is DROPPED:  # the update ended it all the same: it lapses at its time
                dropped = view.locks.held.get(token)
                if dropped is not None:
                    dropped.dropped = True
                continue
            if reply_to is not NO_REPLY and reply_to is not answered:
                turn.replies.append(ServerBusy(reply_to))


@dataclass(frozen=True, slots=True)
class RenewCtx(Continuation[Renewed]):
    """A batch's ``RenewLocks``: per item (reply_to, token, until); NO_REPLY for a session's message."""

    entries: tuple[tuple[ReplyTo, uuid.UUID, int], ...]

    def done(self, turn: Turn, result: Renewed, batch_id: int) -> None:
        view = turn.view
        for (reply_to, token, until), ok in zip(self.entries, result.applied, strict=True):
            quiet = reply_to is NO_REPLY  # a session message's lock, renewed with its session
            lock = view.locks.held.get(token)
            if lock is not None:
                lock.renewing = False
                if ok:
                    lock.locked_until = until
                    heapq.heappush(view.locks.heap, (until, token))
                    if not quiet:
                        turn.replies.append(LockRenewed(reply_to, token, until))
                    continue
                if not lock.settling:  # else the settlement behind it says what happened
                    _let_go(view, lock)
            if not quiet:
                turn.replies.append(LockLost(reply_to, token))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        for reply_to, token, _until in self.entries:
            unbusy(turn.view, token, settling=False)
            if reply_to is not NO_REPLY:
                turn.replies.append(ServerBusy(reply_to))
