"""Deferred messages received by number ($management receive-by-sequence-number): all of them or
none. One ``Claim(state=DEFERRED)``; PeekLock answers once it committed, ReceiveAndDelete completes
the rows in the next batch and answers after that delete. (Deferring itself is a settlement.)"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass

from sodalite.model.message import MessageState
from sodalite.model.partition_core.commands import ReceiveDeferred
from sodalite.model.partition_core.replies import (
    DeferredMessage,
    DeferredReceived,
    MessageNotFound,
    Refused,
    ServerBusy,
    SessionLockLost,
)
from sodalite.model.partition_core.sessions import held_session
from sodalite.model.partition_core.settings import Consumer, ReceiveMode, ReplyTo
from sodalite.model.partition_core.settling import release, unbusy
from sodalite.model.partition_core.turn import AnswerCtx, Turn, store_down
from sodalite.model.partition_core.view import HeldLock, next_token
from sodalite.model.store_ops import Claim, Claimed, Outcome, Settled, SettleItem, StoredMessage
from sodalite.model.store_ops import Settle as SettleOp


def on_receive_deferred(turn: Turn, command: ReceiveDeferred) -> None:
    """One Claim(state=DEFERRED) of the numbers asked; :class:`DeferredClaimCtx` reads it."""
    view, now = turn.view, turn.now
    session_token: uuid.UUID | None = None
    until = now + view.settings.lock_duration
    if command.session_id is not None or view.settings.requires_session:
        if command.session_id is None:
            turn.replies.append(Refused(command.reply_to, "a session's deferred messages are received by the "
                                                          "holder of the session: name it"))
            return
        held = held_session(turn, command.session_id, command.reply_to)
        if held is None:
            return
        session_token = held.token
        until = held.renew_until if held.renewing else held.locked_until  # the locks ride on the session's
    elif store_down(turn, command.reply_to):
        return
    numbers = tuple(dict.fromkeys(command.sequence_numbers))
    if not numbers:
        turn.replies.append(DeferredReceived(command.reply_to, ()))
        return
    tokens = tuple(next_token(view) for _ in numbers)
    turn.op(Claim(now, until, view.settings.owner, tokens, numbers, MessageState.DEFERRED, command.session_id),
            DeferredClaimCtx(command.reply_to, numbers, command.mode, command.consumer, command.session_id,
                             session_token))


@dataclass(frozen=True, slots=True)
class DeferredClaimCtx(AnswerCtx[Claimed]):
    numbers: tuple[int, ...]  # as asked, each once
    mode: ReceiveMode
    consumer: Consumer
    session_id: str | None
    session_token: uuid.UUID | None  # the session lock the locks ride on

    def done(self, turn: Turn, result: Claimed, batch_id: int) -> None:
        """All taken: PeekLock answers now (the locks are durable), ReceiveAndDelete completes them first.
        Some missing (or the session lost, or the claim back too late): the ones taken are released
        (their deliveries given back) and nothing was received."""
        rows = {row.record.sequence_number: row for row in result.messages}
        missing = tuple(n for n in self.numbers if n not in rows)
        locks, late = self._hold(turn, result.messages)
        session_lost = self._session_lost(turn)
        if missing or late or session_lost:
            for lock in locks:
                release(turn, lock)
            if session_lost:
                turn.replies.append(SessionLockLost(self.reply_to, self.session_id or ""))
            elif missing:
                turn.replies.append(MessageNotFound(self.reply_to, missing))
            else:
                turn.replies.append(ServerBusy(self.reply_to))
            return
        ordered = [rows[n] for n in self.numbers]
        if self.mode is ReceiveMode.PEEK_LOCK:
            turn.replies.append(DeferredReceived(self.reply_to, tuple(
                DeferredMessage(row.record, row.lock_token, row.locked_until) for row in ordered)))
            return
        items: list[SettleItem] = []
        for row in ordered:
            assert row.lock_token is not None
            turn.view.locks.held[row.lock_token].settling = True
            items.append(SettleItem(row.record.sequence_number, row.lock_token, Outcome.COMPLETE))
        turn.tail(SettleOp(turn.now, tuple(items)), DeferredTakeCtx(self.reply_to,
                                                                    tuple(item.lock_token for item in items)))

    def _session_lost(self, turn: Turn) -> bool:
        if self.session_token is None:
            return False
        held = turn.view.sessions.held.get(self.session_id or "")
        return held is None or held.token != self.session_token or held.locked_until <= turn.now

    def _hold(self, turn: Turn, messages: tuple[StoredMessage, ...]) -> tuple[list[HeldLock], bool]:
        """The locks the claim took (held here like any other); True if one came back lapsed already."""
        view = turn.view
        late = False
        locks: list[HeldLock] = []
        for row in messages:
            assert row.lock_token is not None and row.locked_until is not None
            if row.locked_until <= turn.now:  # its lock lapsed already: it stays deferred, nothing to hold
                late = True
                continue
            lock = HeldLock(row.lock_token, row.record, row.locked_until, self.consumer, row.record.state,
                            session_token=self.session_token)
            view.locks.add(lock)
            heapq.heappush(view.locks.heap, (lock.locked_until, lock.token))
            locks.append(lock)
        return locks, late


@dataclass(frozen=True, slots=True)
class DeferredTakeCtx(AnswerCtx[Settled]):
    """The COMPLETE of a ReceiveAndDelete by number, after its claim took every number asked."""

    tokens: tuple[uuid.UUID, ...]

    def done(self, turn: Turn, result: Settled, batch_id: int) -> None:
        """Every message deleted is handed out (it exists nowhere else)."""
        view = turn.view
        out: list[DeferredMessage] = []
        for token, ok in zip(self.tokens, result.applied, strict=True):
            lock = view.locks.held.pop(token, None)
            if lock is None:  # cannot happen: a settling lock is only removed here
                continue
            view.locks.by_seq.pop(lock.record.sequence_number, None)
            if ok:
                view.counts.deferred -= 1
                out.append(DeferredMessage(lock.record, None, None))
        if out or not self.tokens:
            turn.replies.append(DeferredReceived(self.reply_to, tuple(out)))
        else:  # none deleted (their locks lapsed first): they are still deferred
            turn.replies.append(ServerBusy(self.reply_to))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        for token in self.tokens:  # not deleted: the locks lapse and the messages stay deferred
            unbusy(turn.view, token, settling=True)
        turn.replies.append(ServerBusy(self.reply_to))
