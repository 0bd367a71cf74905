"""Sessions: a sub-machine inside the partition core, with its own state (:class:`~.view.Sessions`).

A receiver takes a session (by id, or the next one with a ready message); only the holder gets its
messages, claimed from the store in order, one claim per session in flight; their locks ride on the
session lock, which renews them and whose lapse ends them. Replies wait for the store's commit."""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass

from sodalite.model.message import MessageState
from sodalite.model.partition import MAX_DELIVERY_COUNT_EXCEEDED
from sodalite.model.partition_core.commands import AcceptSession, GetSessionState, SetSessionState
from sodalite.model.partition_core.dead_letters import dead_letter_settle, service_edit
from sodalite.model.partition_core.replies import (
    Delivered,
    NoSessionAvailable,
    Refused,
    ServerBusy,
    SessionAccepted,
    SessionCannotBeLocked,
    SessionLockLost,
    SessionLost,
    SessionRenewed,
    SessionState,
    SessionStateSet,
)
from sodalite.model.partition_core.settings import NO_REPLY, Consumer, ReceiveMode, ReplyTo
from sodalite.model.partition_core.settling import DeliverTo, release, settle_lock, unbusy
from sodalite.model.partition_core.turn import QUIET, AnswerCtx, Continuation, R, Turn, store_down
from sodalite.model.partition_core.view import HeldLock, HeldSession, View, Waiter, next_token
from sodalite.model.partition_core.window import admit
from sodalite.model.store_ops import (
    Claim,
    Claimed,
    ClaimSession,
    Outcome,
    PutSessionState,
    ReleaseSession,
    Renewed,
    RenewSession,
    SessionClaimed,
    SettleItem,
)


def session_locks(view: View, held: HeldSession) -> list[HeldLock]:
    return [lock for lock in view.locks.held.values() if lock.session_token == held.token]


def held_session(turn: Turn, session_id: str, reply_to: ReplyTo) -> HeldSession | None:
    """The live session lock this core holds for ``session_id``, else a reply says why not."""
    view = turn.view
    if not view.settings.requires_session:
        turn.replies.append(Refused(reply_to, "the entity does not require sessions"))
        return None
    held = view.sessions.held.get(session_id)
    if held is None or held.locked_until <= turn.now:
        turn.replies.append(SessionLockLost(reply_to, session_id))
        return None
    if store_down(turn, reply_to):
        return None
    return held


# ---- taking a session ------------------------------------------------------------------------------


def on_accept(turn: Turn, command: AcceptSession) -> None:
    view, now = turn.view, turn.now
    sessions = view.sessions
    if not view.settings.requires_session:
        turn.replies.append(Refused(command.reply_to, "the entity does not require sessions"))
        return
    if command.consumer in sessions.by_consumer:
        turn.replies.append(Refused(command.reply_to, "this receiver holds a session already"))
        return
    if store_down(turn, command.reply_to):
        return
    waiter = Waiter(command.consumer, command.reply_to, command.wait_until)
    if command.session_id is None:
        sessions.waiters.append(waiter)  # grant_waiters asks the store
        return
    held = sessions.held.get(command.session_id)
    if held is not None and held.locked_until > now:
        turn.replies.append(SessionCannotBeLocked(command.reply_to, command.session_id))
        return
    token = next_token(view)
    until = now + view.settings.lock_duration
    turn.op(ClaimSession(now, token, until, view.settings.owner, command.session_id),
            AcceptCtx(waiter, command.session_id, token, until))


def grant_waiters(turn: Turn) -> None:
    """One next-available ClaimSession at a time, and only when something may have become ready."""
    view, now = turn.view, turn.now
    sessions = view.sessions
    if sessions.waiters:  # the ones whose time came are answered
        kept: list[Waiter] = []
        for waiter in sessions.waiters:
            if waiter.wait_until is not None and waiter.wait_until <= now:
                turn.replies.append(NoSessionAvailable(waiter.reply_to))
            else:
                kept.append(waiter)
        sessions.waiters = kept
    if not sessions.waiters or sessions.accept_in_flight or not sessions.maybe_ready or not view.available:
        return
    waiter = sessions.waiters.pop(0)
    sessions.accept_in_flight = True
    sessions.maybe_ready = False
    token = next_token(view)
    until = now + view.settings.lock_duration
    turn.tail(ClaimSession(now, token, until, view.settings.owner, None), AcceptCtx(waiter, None, token, until))


@dataclass(frozen=True, slots=True)
class AcceptCtx(Continuation[SessionClaimed]):
    waiter: Waiter
    session_id: str | None  # None: next available
    token: uuid.UUID
    locked_until: int

    def done(self, turn: Turn, result: SessionClaimed, batch_id: int) -> None:
        sessions = turn.view.sessions
        waiter = self.waiter
        if self.session_id is None:
            sessions.accept_in_flight = False
        sid = result.session_id
        if sid is None:
            if self.session_id is not None:
                turn.replies.append(SessionCannotBeLocked(waiter.reply_to, self.session_id))
            else:
                sessions.waiters.insert(0, waiter)  # nothing free with a ready message: wait for one
            return
        if self.locked_until <= turn.now:  # the claim came back too late: the lock has lapsed already
            sessions.maybe_ready = True
            if self.session_id is None:
                sessions.waiters.insert(0, waiter)  # ask again
            else:
                turn.replies.append(ServerBusy(waiter.reply_to))
            return
        if waiter.consumer not in turn.view.credit or waiter.consumer in sessions.by_consumer:
            # The receiver left (or took another session) while the claim was in flight: give it back.
            turn.tail(ReleaseSession(sid, self.token), QUIET)
            sessions.maybe_ready = True
            return
        held = HeldSession(sid, self.token, self.locked_until, waiter.consumer)
        sessions.held[sid] = held
        sessions.by_consumer[waiter.consumer] = sid
        heapq.heappush(sessions.heap, (held.locked_until, sid))
        if self.session_id is None:
            sessions.maybe_ready = True  # the next waiter may find another session
        turn.replies.append(SessionAccepted(waiter.reply_to, waiter.consumer, sid, held.locked_until))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        if self.session_id is None:  # the claim never looked: the next one must
            turn.view.sessions.accept_in_flight = False
            turn.view.sessions.maybe_ready = True
        turn.replies.append(ServerBusy(self.waiter.reply_to))


# ---- delivering a session's messages ------------------------------------------------------------------


def pump_sessions(turn: Turn) -> None:
    """Each session holder claims its session's next messages from the store (the lowest ready rows,
    so in sequence order), one claim per session in flight."""
    view, now = turn.view, turn.now
    for consumer, credit in view.credit.items():
        held = view.sessions.of(consumer)
        if held is None or credit.count <= 0 or held.claiming or not held.more or held.locked_until <= now:
            continue
        until = held.renew_until if held.renewing else held.locked_until
        count = credit.count
        credit.count = 0
        held.claiming = True
        tokens = tuple(next_token(view) for _ in range(count))
        turn.claims.append((Claim(now, until, view.settings.owner, tokens, None, MessageState.ACTIVE,
                                  held.session_id),
                            SessionClaimCtx(held.session_id, held.token, consumer, count, credit.mode)))


@dataclass(frozen=True, slots=True)
class SessionCtx(Continuation[R]):
    """An operation under the lock ``session_token`` of the session ``session_id``."""

    session_id: str
    session_token: uuid.UUID

    def current(self, view: View) -> HeldSession | None:
        """The session, if this core still holds it under that lock."""
        held = view.sessions.held.get(self.session_id)
        return held if held is not None and held.token == self.session_token else None


@dataclass(frozen=True, slots=True)
class SessionClaimCtx(SessionCtx[Claimed]):
    consumer: Consumer
    count: int
    mode: ReceiveMode

    def done(self, turn: Turn, result: Claimed, batch_id: int) -> None:
        view = turn.view
        held = view.sessions.held.get(self.session_id)
        current = held is not None and held.token == self.session_token
        if held is not None and current:
            held.claiming = False
            if len(result.messages) < self.count:
                held.more = False  # the session has nothing more ready now; a send or a return says when
        credit = view.credit.get(self.consumer)
        missed = self.count - len(result.messages)
        for row in result.messages:
            assert row.lock_token is not None and row.locked_until is not None
            record = row.record
            seq = record.sequence_number
            window = view.window
            if seq in window.records:  # a read had seen it ready: it is locked now
                window.order.remove(seq)
                window.size -= window.records.pop(seq).size
            if row.locked_until <= turn.now:  # the claim came back too late: its lock has already lapsed
                missed += 1
                admit(turn, record)
                continue
            lock = HeldLock(row.lock_token, record, row.locked_until, self.consumer, record.state,
                            session_token=self.session_token)
            view.locks.add(lock)
            heapq.heappush(view.locks.heap, (lock.locked_until, lock.token))
            missed += self._hand_out(turn, lock, current and credit is not None, held if current else None)
        if missed and credit is not None:
            credit.count += missed

    def _hand_out(self, turn: Turn, lock: HeldLock, wanted: bool, held: HeldSession | None) -> int:
        """Deliver one claimed message (or give it back, or dead-letter it); 1 if the credit comes back."""
        record = lock.record
        if not wanted:
            # The session or its receiver is gone: hand the message back, its delivery not counted.
            release(turn, lock)
            return 1
        if record.delivery_count > turn.view.settings.max_delivery_count:  # counted one past the maximum
            lock.settling = True
            edit = service_edit(record, MAX_DELIVERY_COUNT_EXCEEDED, f"delivered {record.delivery_count - 1} times")
            turn.settles.append((dead_letter_settle(turn.view, turn.now, record, lock.token, edit, give_back=True),
                                 (NO_REPLY, lock.token, Outcome.DEAD_LETTER, Outcome.DEAD_LETTER)))
            if held is not None:
                held.more = True  # it may have more behind this one
            return 1
        if self.mode is ReceiveMode.RECEIVE_AND_DELETE:
            lock.settling = True
            turn.settles.append((SettleItem(record.sequence_number, lock.token, Outcome.COMPLETE),
                                 (DeliverTo(self.consumer, self.session_id), lock.token, Outcome.COMPLETE,
                                  Outcome.COMPLETE)))
            return 0
        turn.replies.append(Delivered(self.consumer, record, lock.token, lock.locked_until))
        return 0

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        view = turn.view
        held = self.current(view)
        if held is not None:
            held.claiming = False
        credit = view.credit.get(self.consumer)
        if credit is not None:
            credit.count += self.count


# ---- renewing, losing and releasing a session ----------------------------------------------------------


def on_renew_session(turn: Turn, session_id: str, reply_to: ReplyTo) -> None:
    quiet = reply_to is NO_REPLY
    view, now = turn.view, turn.now
    held = view.sessions.held.get(session_id)
    if held is None or held.locked_until <= now or held.renewing:
        if not quiet:
            turn.replies.append(SessionLockLost(reply_to, session_id))
        return
    if not view.available:
        if not quiet:
            turn.replies.append(ServerBusy(reply_to))
        return
    until = now + view.settings.lock_duration
    held.renewing = True
    held.renew_until = until
    turn.tail(RenewSession(now, session_id, held.token, until), SessionRenewCtx(session_id, held.token, until,
                                                                                reply_to))
    for lock in session_locks(view, held):  # its messages' locks ride on it
        if not lock.busy:
            lock.renewing = True
            turn.renews.append(((lock.record.sequence_number, lock.token), (NO_REPLY, lock.token, until)))


@dataclass(frozen=True, slots=True)
class SessionRenewCtx(SessionCtx[Renewed]):
    locked_until: int
    reply_to: ReplyTo

    def done(self, turn: Turn, result: Renewed, batch_id: int) -> None:
        view = turn.view
        held = self.current(view)
        quiet = self.reply_to is NO_REPLY
        if held is None:
            if not quiet:
                turn.replies.append(SessionLockLost(self.reply_to, self.session_id))
            return
        held.renewing = False
        if result.applied and result.applied[0]:
            held.locked_until = self.locked_until
            heapq.heappush(view.sessions.heap, (held.locked_until, held.session_id))
            if not quiet:
                turn.replies.append(SessionRenewed(self.reply_to, self.session_id, held.locked_until))
            return
        if not quiet:
            turn.replies.append(SessionLockLost(self.reply_to, self.session_id))
        end_session(turn, held)  # the store says it is not ours

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        view = turn.view
        held = self.current(view)
        if held is not None:
            held.renewing = False
            heapq.heappush(view.sessions.heap, (held.locked_until, held.session_id))
            for lock in session_locks(view, held):
                unbusy(view, lock.token, settling=False)
        if self.reply_to is not NO_REPLY:
            turn.replies.append(ServerBusy(self.reply_to))


def end_session(turn: Turn, held: HeldSession) -> None:
    """The session is no longer held here: its receiver is told; its messages' locks lapse on their own."""
    sessions = turn.view.sessions
    sessions.held.pop(held.session_id, None)
    sessions.by_consumer.pop(held.consumer, None)
    sessions.maybe_ready = True
    turn.replies.append(SessionLost(held.consumer, held.session_id))


def release_session(turn: Turn, held: HeldSession) -> None:
    """The receiver closed: its session is released and the messages it held are abandoned (their
    deliveries count, as when a lock lapses)."""
    view = turn.view
    sessions = view.sessions
    sessions.held.pop(held.session_id, None)
    sessions.by_consumer.pop(held.consumer, None)
    sessions.maybe_ready = True
    # Should the release not reach the store, the session is free only when its lock lapses there.
    heapq.heappush(sessions.lapses, held.locked_until)
    if not view.available:
        return  # both locks lapse on their own
    for lock in session_locks(view, held):
        if not lock.settling and lock.locked_until > turn.now:
            settle_lock(turn, lock, Outcome.ABANDON, NO_REPLY)
    turn.tail(ReleaseSession(held.session_id, held.token), QUIET)


def due_sessions(turn: Turn) -> None:
    """Session locks that lapsed: their holders lost them; sessions given up may be free in the store."""
    sessions, now = turn.view.sessions, turn.now
    heap = sessions.heap
    while heap and heap[0][0] <= now:
        until, sid = heapq.heappop(heap)
        held = sessions.held.get(sid)
        if held is None or held.locked_until != until or held.renewing:
            continue
        end_session(turn, held)
    lapses = sessions.lapses
    while lapses and lapses[0] <= now:
        heapq.heappop(lapses)
        sessions.maybe_ready = True


def next_session_due(view: View) -> list[int]:
    """The times the sessions sub-machine must be called again at."""
    sessions = view.sessions
    times: list[int] = []
    heap = sessions.heap
    while heap:
        until, sid = heap[0]
        held = sessions.held.get(sid)
        if held is None or held.locked_until != until or held.renewing:
            heapq.heappop(heap)  # a renewing session is pushed again when its batch answers
            continue
        times.append(until)
        break
    times.extend(w.wait_until for w in sessions.waiters if w.wait_until is not None)
    if sessions.waiters and sessions.lapses:
        times.append(sessions.lapses[0])
    return times


# ---- session state --------------------------------------------------------------------------------------


def on_get_state(turn: Turn, command: GetSessionState) -> None:
    if held_session(turn, command.session_id, command.reply_to) is not None:
        entry = turn.view.sessions.states.get(command.session_id)
        turn.replies.append(SessionState(command.reply_to, command.session_id,
                                         entry[0] if entry is not None and entry[0] else None))


def on_set_state(turn: Turn, command: SetSessionState) -> None:
    if held_session(turn, command.session_id, command.reply_to) is None:
        return
    # A zero-length state clears it, as null does: Service Bus reads either back as null.
    state = command.state if command.state else None
    turn.tail(PutSessionState(command.session_id, state, turn.now),
              StateCtx(command.reply_to, command.session_id, state, turn.now))


@dataclass(frozen=True, slots=True)
class StateCtx(AnswerCtx[object]):
    session_id: str
    state: bytes | None
    updated_at: int

    def done(self, turn: Turn, result: object, batch_id: int) -> None:
        states = turn.view.sessions.states
        if self.state is None:
            states.pop(self.session_id, None)
        else:
            states[self.session_id] = (self.state, self.updated_at)
        turn.replies.append(SessionStateSet(self.reply_to, self.session_id))
