"""The window of ready messages and the claims that deliver from it (queues and subscriptions).

The window holds the next ready messages, complete up to ``cursor``; reads fill it, claims take
from it by number and the store fences them, so a stale window never delivers a message twice."""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass

from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import MAX_DELIVERY_COUNT_EXCEEDED, TTL_EXPIRED
from sodalite.model.partition_core.commands import WindowRead
from sodalite.model.partition_core.copies import counted
from sodalite.model.partition_core.dead_letters import dead_letter_move, service_edit
from sodalite.model.partition_core.replies import Delivered
from sodalite.model.partition_core.settings import NO_REPLY, Consumer, ReceiveMode, ReplyTo
from sodalite.model.partition_core.turn import Continuation, R, Turn
from sodalite.model.partition_core.view import HeldLock, View, expired, next_token
from sodalite.model.store_ops import Claim, Claimed, Moved, MoveItem, Outcome, Settled, SettleItem
from sodalite.model.store_ops import Settle as SettleOp

# ---- what enters and leaves the window -------------------------------------------------------------


def admit(turn: Turn, record: MessageRecord, *, evict: bool = True) -> None:
    """A ready message this core knows of: it leaves if expired or out of deliveries, else joins the
    window; over the cap (``evict``), the highest numbers leave the window and are read again later."""
    view, now = turn.view, turn.now
    window, seq = view.window, record.sequence_number
    if seq in window.records or seq in view.locks.by_seq or seq in view.locks.claiming:
        return
    if expired(record, now):
        leave_expired(turn, record)
        return
    if record.delivery_count >= view.settings.max_delivery_count:
        turn.dead_letter_moves.append((dead_letter_move(view, now, record, service_edit(
            record, MAX_DELIVERY_COUNT_EXCEEDED, f"delivered {record.delivery_count} times")), record))
        return
    if record.session_id is not None and view.settings.requires_session:
        view.sessions.ready(record.session_id)
    window.records[seq] = record
    insort(window.order, seq)
    window.size += record.size
    if record.expires_at is not None:
        heapq.heappush(window.expiry_heap, (record.expires_at, seq))
    while evict and window.size > view.settings.window_bytes and len(window.order) > 1:
        evicted = window.order.pop()
        window.size -= window.records.pop(evicted).size
        window.cursor = min(window.cursor, evicted - 1)
        window.at_tail = False


def leave_expired(turn: Turn, record: MessageRecord) -> None:
    """An expired message leaves: to the dead-letter queue if the entity says so, else dropped."""
    if turn.view.settings.dead_letter_on_expiration:
        turn.dead_letter_moves.append((dead_letter_move(turn.view, turn.now, record, service_edit(
            record, TTL_EXPIRED, "the message expired")), record))
    else:
        turn.drop_moves.append((MoveItem(record.sequence_number), record))


def forget(view: View, records: tuple[MessageRecord, ...]) -> None:
    """These rows are unchanged in the store but no longer known here: the next read finds them."""
    window = view.window
    for record in records:
        if record.state is MessageState.ACTIVE:
            window.cursor = min(window.cursor, record.sequence_number - 1)
            window.at_tail = False


def drop_from_window(view: View, seq: int) -> None:
    window = view.window
    record = window.records.pop(seq, None)
    if record is None:
        return
    order = window.order
    del order[bisect_right(order, seq) - 1]
    window.size -= record.size


def forget_window_through(view: View, through: int) -> None:
    """The window's rows numbered <= ``through`` may be gone: they leave it, and the cursor moves
    below them, so the next read finds whichever are still there (a lock kept them)."""
    window = view.window
    order = window.order
    if not order or order[0] > through:
        return
    cut = bisect_right(order, through)
    for seq in order[:cut]:
        window.size -= window.records.pop(seq).size
    window.cursor = min(window.cursor, order[0] - 1)
    window.at_tail = False
    del order[:cut]


def expire_due(turn: Turn) -> None:
    """Window messages whose expiry time came leave it."""
    window, now = turn.view.window, turn.now
    eheap = window.expiry_heap
    while eheap and eheap[0][0] <= now:
        expires_at, seq = heapq.heappop(eheap)
        record = window.records.get(seq)
        if record is None or record.expires_at != expires_at:
            continue
        window.order.remove(seq)
        del window.records[seq]
        window.size -= record.size
        leave_expired(turn, record)


def next_expiry(view: View) -> int | None:
    eheap, records = view.window.expiry_heap, view.window.records
    while eheap:
        expires_at, seq = eheap[0]
        record = records.get(seq)
        if record is None or record.expires_at != expires_at:
            heapq.heappop(eheap)
            continue
        return expires_at
    return None


# ---- reads -------------------------------------------------------------------------------------------


def on_window_read(turn: Turn, command: WindowRead) -> None:
    view, now = turn.view, turn.now
    window = view.window
    asked = window.read_in_flight
    window.read_in_flight = None
    if command.rows is None or asked is None:
        return
    if window.cursor < window.read_from - 1:
        # While the read was in flight the cursor moved below where it started (a failed batch gave
        # rows back, the window evicted, a rescan began): the read does not cover the rows between,
        # so neither its rows nor its shortness say anything about them. Drop it; the next read
        # starts at the cursor.
        return
    for row in command.rows:
        record = row.record
        seq = record.sequence_number
        if seq <= window.cursor:
            continue  # the window already knows this far
        if window.size >= view.settings.window_bytes:
            return  # full: the rest is read again later
        window.cursor = seq
        if record.state is not MessageState.ACTIVE:
            continue
        if row.locked_at(now) and seq not in view.locks.by_seq:
            until = row.locked_until if row.locked_until is not None else now
            window.rescan_at = until if window.rescan_at is None else min(window.rescan_at, until)
            continue
        admit(turn, record, evict=False)  # a read never evicts (it would read the same rows again)
    if len(command.rows) < asked:
        # A short read: nothing ready after cursor, and every append whose result came before this
        # read was committed before it (the caller keeps order), so the window reaches the end.
        window.at_tail = True
        window.cursor = max(window.cursor, window.last_appended)
        if window.landed_beyond > window.cursor:
            # Rows another core stored landed past the cursor while this read was in flight; it may
            # have run before their commit: read once more (it starts after they committed).
            window.at_tail = False
        window.landed_beyond = 0


def take_in(turn: Turn, record: MessageRecord) -> None:
    """A ready row stored here by a committed batch: where the window is complete (at the tail, or
    at or below the cursor) it joins the window; past the cursor the next read finds it."""
    window = turn.view.window
    if window.at_tail or record.sequence_number <= window.cursor:
        admit(turn, record)


# ---- delivering --------------------------------------------------------------------------------------


def _take_selected(turn: Turn, count: int, selects: Callable[[MessageRecord], bool]) -> list[MessageRecord]:
    """Up to ``count`` window messages a selector selects, in order; the others stay for other consumers."""
    view, now = turn.view, turn.now
    window = view.window
    taken: list[MessageRecord] = []
    kept: list[int] = []
    order = window.order
    for index, seq in enumerate(order):
        if len(taken) >= count:
            kept.extend(order[index:])
            break
        record = window.records[seq]
        if expired(record, now) or record.delivery_count >= view.settings.max_delivery_count:
            del window.records[seq]
            window.size -= record.size
            admit(turn, record)  # not back into the window: it leaves
        elif selects(record):
            del window.records[seq]
            window.size -= record.size
            taken.append(record)
        else:
            kept.append(seq)
    window.order = kept
    return taken


def _take_in_order(turn: Turn, count: int) -> list[MessageRecord]:
    """Up to ``count`` window messages from the front; expired or used-up ones leave on the way."""
    view, now = turn.view, turn.now
    window = view.window
    taken: list[MessageRecord] = []
    while count > len(taken) and window.order:
        seq = window.order.pop(0)
        record = window.records.pop(seq)
        window.size -= record.size
        if expired(record, now) or record.delivery_count >= view.settings.max_delivery_count:
            admit(turn, record)  # not back into the window: it leaves
            continue
        taken.append(record)
    return taken


def pump(turn: Turn) -> None:
    """Each consumer with credit claims window messages: PeekLock one Claim, ReceiveAndDelete a Claim
    per message and one COMPLETE of them in the same batch (delivered once deleted)."""
    view, now = turn.view, turn.now
    settings = view.settings
    lock_duration = settings.lock_duration
    for consumer, credit in view.credit.items():
        if credit.selects is not None:  # a JMS selector: only what it selects, the rest stays
            taken = _take_selected(turn, credit.count, credit.selects)
        else:
            taken = _take_in_order(turn, credit.count)
        if not taken:
            continue
        credit.count -= len(taken)
        view.locks.claiming.update(r.sequence_number for r in taken)
        if credit.mode is ReceiveMode.PEEK_LOCK:
            tokens = tuple(next_token(view) for _ in taken)
            turn.claims.append((Claim(now, now + lock_duration, settings.owner, tokens,
                                      tuple(r.sequence_number for r in taken)), ClaimCtx(consumer, tuple(taken))))
        else:
            # One claim per message so each token is known to go with its number; the deletes follow
            # in the same transaction, and the deliveries wait for it (at most once, even after a crash).
            items: list[SettleItem] = []
            claimed = TakeClaimCtx({})
            for record in taken:
                token = next_token(view)
                turn.claims.append((Claim(now, now + lock_duration, settings.owner, (token,),
                                          (record.sequence_number,)), claimed))
                items.append(SettleItem(record.sequence_number, token, Outcome.COMPLETE))
            turn.claims.append((SettleOp(now, tuple(items)), TakeCtx(consumer, tuple(taken), claimed.rows)))


@dataclass(frozen=True, slots=True)
class TakenCtx(Continuation[R]):
    """Window messages being taken for ``consumer`` (a claim, or the complete that follows it)."""

    consumer: Consumer
    records: tuple[MessageRecord, ...]

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        """The batch failed: the rows are read again and the credit is back."""
        view = turn.view
        for record in self.records:
            view.locks.claiming.discard(record.sequence_number)
        forget(view, self.records)
        credit = view.credit.get(self.consumer)
        if credit is not None:
            credit.count += len(self.records)


@dataclass(frozen=True, slots=True)
class ClaimCtx(TakenCtx[Claimed]):
    """A PeekLock claim of window messages for ``consumer``."""

    def done(self, turn: Turn, result: Claimed, batch_id: int) -> None:
        view = turn.view
        taken = {row.record.sequence_number for row in result.messages}
        for record in self.records:
            view.locks.claiming.discard(record.sequence_number)
        missed = len(self.records) - len(taken)
        for row in result.messages:
            assert row.lock_token is not None and row.locked_until is not None
            if row.locked_until <= turn.now:  # the claim came back too late: its lock has already lapsed
                missed += 1
                admit(turn, row.record)
                continue
            lock = HeldLock(row.lock_token, row.record, row.locked_until, self.consumer, row.record.state)
            view.locks.add(lock)
            heapq.heappush(view.locks.heap, (lock.locked_until, lock.token))
            if self.consumer in view.credit:
                turn.replies.append(Delivered(self.consumer, row.record, lock.token, lock.locked_until))
            else:  # the consumer left while the claim was in flight: give the delivery back at once
                lock.settling = True
                turn.settles.append((SettleItem(row.record.sequence_number, lock.token, Outcome.RELEASE),
                                     (NO_REPLY, lock.token, Outcome.RELEASE, Outcome.RELEASE)))
        credit = view.credit.get(self.consumer)
        if missed and credit is not None:
            credit.count += missed
        if len(taken) < len(self.records):
            # Rows the window held that the store did not give (another node took them, or deleted
            # them): they left the window with the claim, and one locked elsewhere comes back when that
            # lock lapses, which only a read sees. Read again from the start: it finds such a row locked
            # and rescans at its locked-until (a node that died holding it never says so).
            view.window.cursor, view.window.at_tail = 0, False


@dataclass(frozen=True, slots=True)
class TakeClaimCtx(Continuation[Claimed]):
    """The claims of one ReceiveAndDelete take (one per message): the rows as the store counted them.
    On a shared store the window's copy may be older than another node's deliveries of the message."""

    rows: dict[int, MessageRecord]

    def done(self, turn: Turn, result: Claimed, batch_id: int) -> None:
        for row in result.messages:
            self.rows[row.record.sequence_number] = row.record


@dataclass(frozen=True, slots=True)
class TakeCtx(TakenCtx[Settled]):
    """The COMPLETE that follows per-message claims: ReceiveAndDelete deliveries."""

    claimed: dict[int, MessageRecord]  # the claims' rows (TakeClaimCtx), answered earlier in the batch

    def done(self, turn: Turn, result: Settled, batch_id: int) -> None:
        view = turn.view
        done = 0
        for record, ok in zip(self.records, result.applied, strict=True):
            view.locks.claiming.discard(record.sequence_number)
            if not ok:
                continue
            done += 1
            view.counts.active -= 1
            # As the claim stored it (it counted this delivery), like every other delivery's record.
            stored = self.claimed.get(record.sequence_number)
            turn.replies.append(Delivered(self.consumer, stored if stored is not None
                                          else counted(record, record.delivery_count + 1), None, None))
        credit = view.credit.get(self.consumer)
        if credit is not None:
            credit.count += len(self.records) - done


@dataclass(frozen=True, slots=True)
class MoveCtx(Continuation[Moved]):
    """The MoveMessages of unlocked rows that leave (dead-lettered or dropped: expiry, MaxDeliveryCount)."""

    records: tuple[MessageRecord, ...]

    def done(self, turn: Turn, result: Moved, batch_id: int) -> None:
        view = turn.view
        for record, new in zip(self.records, result.sequence_numbers, strict=True):
            if new is not None:
                view.counts.active -= 1
            else:
                forget(view, (record,))

    def failed(self, turn: Turn, answered: ReplyTo | None) -> None:
        forget(turn.view, self.records)
