"""The I/O shell around the pure partition core: one partition's view, its store effects and timers.

Theory of operation. The core (``model/partition_core/``) decides and does no I/O; this runner
is the caller its module docstring describes. It owns one partition's :class:`View` and nothing
else keeps a reference to it. :meth:`PartitionRunner.submit` runs ``decide(view, command, now)``
with ``now`` from the injected :class:`Clock` (milliseconds since the epoch, as the core and the
store port count time), then, in this order: appends the decision's store batch (mapped to port
operations bound to this partition by :func:`bind`) and its window
read to the effect queue, re-arms the timer at ``next_due``, and hands every reply to the
``on_reply`` callback. ``submit`` is synchronous and must be called on the event loop's thread;
decide is cheap and bounded, and the replies it releases at once (refusals, settlements of locks
it no longer holds, ...) need no I/O.

The effect queue is carried out strictly in order, one effect (or one group) at a time, with no
task of its own: the first effect a turn queues is started at the end of that turn (so what else
the turn decides can join its group), on the store's thread through the worker's callback calls
(``StoreWorker.commit_soon`` and ``call_soon``); the callback, on the loop, feeds the answer back
through ``submit`` and starts the next effect. So answers reach the core in the order the
decisions emitted them (the core's contract):

- a window read runs ``store.peek(ref, from, count, {ACTIVE})`` and is answered with
  :class:`WindowRead` (``None`` when the read failed);
- a counts read (asked for after a complete-through's ``Purge`` committed: its result is one
  total) runs ``store.counts(ref)`` and is answered with :class:`CountsRead` (``None`` when it failed);
- store batches are group-committed: the batches queued back to back at the head of the queue
  (no read between them; at most ``max_group`` of them) go to the store as ONE ``apply`` call,
  one transaction. The results come back one per operation, in order, and are split per batch:
  each batch gets its own :class:`StoreResults` under its ``batch_id``, in order. When the
  transaction raises, nothing of it was applied, and every batch of the group gets
  :class:`StoreFailed` (the core answers their requests :class:`ServerBusy` and finds their
  messages again by its next read). A batch whose operations cannot be expressed on the port
  fails alone, without touching the store. The store worker may merge the group further with other
  partitions' batches of the same store into one transaction (``StoreWorker.commit_soon``); the results
  come back split per partition just the same. A batch with an all-or-none ``Settle`` (an AMQP
  transaction's) is committed alone, here and in the worker: when the store finds one of its
  locks no longer this core's, it raises :class:`~sodalite.store.port.SettleFenced`, only that
  batch rolled back, and it is answered :class:`StoreFailed` with ``fenced`` naming the settlement.

The commit window. A settlement of the sync SDK waits for its answer before the next one is sent, so
with N such receivers at most N settlements can share a transaction; started the moment the previous
one committed, a group holds only those that arrived while it was in flight (about N/2: the
receivers fall into step, half of them per transaction). So a group that is smaller than the last
round's (the batches the last transaction held plus those queued when it committed) waits for the
rest, at most ``commit_window`` seconds (1 ms; :data:`COMMIT_WINDOW_SECONDS`) after it could have
started, and leaves as soon as it is that large. Nothing is acknowledged earlier for it: a send,
a settlement and a claim are still answered only by their batch's results, after the commit. A
transaction that fails fails exactly the batches it held (each answered :class:`StoreFailed`, as
without the window); the batches queued behind it go in the next one. A lone caller (the last round
held one batch and nothing queued) never waits, nor does a read or a batch committed alone.

Store I/O runs on the store's one worker thread (:class:`~sodalite.server.store_worker.StoreWorker`),
so the event loop never waits for a commit, and commits that queue up while one is in flight
leave together in the next transaction: the busier the partition, the fewer transactions per
send. A send's acceptance is released only by its batch's results, i.e. after the commit.

Timers: a timer is just a :class:`Tick` submitted at its time. After each decision the runner
asks the clock for a callback at ``next_due`` (cancelling the one armed before if that one is
later or nothing is due; an earlier one stays, and its Tick re-arms); :class:`LoopClock` uses
the event loop, a test's clock fires callbacks when the test moves time on, so tests need no sleeps.

:meth:`drained` waits until the effect queue is empty and no effect is in flight (it raises if
handling an answer failed, which stops the effects). :meth:`close` drops the queue and stops the
timer; an effect in flight then has an outcome nobody hears of, as after a crash
(the store stays the truth: the next runner on the same store starts from what it holds).
The runner does not own the store worker: whoever made it closes it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar, cast

from sodalite.amqp.types import AmqpValue
from sodalite.errors import SodaliteError
from sodalite.model.message import MessageState
from sodalite.model.partition_core import (
    Command,
    CoreSettings,
    CountsRead,
    ReadCounts,
    ReadWindow,
    RefreshCounts,
    Reply,
    StoreFailed,
    StoreResults,
    Tick,
    View,
    WindowRead,
    decide,
    new_view,
)
from sodalite.server import test_defects, wire
from sodalite.server.store_worker import StoreWorker
from sodalite.store.port import (
    AnnotationEdit,
    Append,
    AppendTo,
    EntityOp,
    Gate,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionCounts,
    PartitionRef,
    Restore,
    Settle,
    Settled,
    SettleFenced,
    SettleItem,
    StoredMessage,
    StoreOp,
)

log = logging.getLogger(__name__)

ACTIVE_ONLY = frozenset({MessageState.ACTIVE})
# How long a group of store batches smaller than the last round may wait for the rest (module docstring).
COMMIT_WINDOW_SECONDS = 0.001
SIZE_READ_RETRY = 1.0  # seconds before the byte count is read again after a read that failed (store offline)


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time for the core: ``now()`` in milliseconds since the epoch, and a callback at such a time."""

    def now(self) -> int: ...

    def call_at(self, when: int, callback: Callable[[], None]) -> Timer: ...


class LoopClock:
    """``now`` in milliseconds (the wall clock, or the broker's injected clock); callbacks run on the
    running event loop after the time still to go by that clock. A test clock that jumps ahead does
    not fire the timers it jumped past: what is due is decided with the next command (every decision
    first ends what is due at its ``now``); one that stands still re-arms a timer fired early."""

    def __init__(self, now: Callable[[], int] | None = None) -> None:
        self._now = now

    def now(self) -> int:
        return int(time.time() * 1000) if self._now is None else self._now()

    def call_at(self, when: int, callback: Callable[[], None]) -> Timer:
        delay = max(when - self.now(), 0) / 1000
        return asyncio.get_running_loop().call_later(delay, callback)


def encode_edit(edit: AnnotationEdit) -> tuple[bytes, int, bytes | None]:
    """The edit as the port stores it: the annotations (``base``, with ``x-opt-deadletter-source`` for
    a forwarded dead letter), their count, and the new tail when the edit sets application properties,
    else None (the row keeps its tail).

    Service Bus applies a settlement's properties-to-modify (``modified.message-annotations`` of an
    abandon or defer, .NET's and Java's ``propertiesToModify``) to the message's application
    properties, where the next receiver reads them, and carries ``DeadLetterReason`` and
    ``DeadLetterErrorDescription`` there too: all are written into ``base_tail``, the reason and
    description last. A ``dead_letter_source`` (ForwardDeadLetteredMessagesTo) becomes the
    ``x-opt-deadletter-source`` annotation. An edit that sets properties and has no ``base_tail``
    raises ValueError: its batch cannot go to the store (they would be lost)."""
    annotations, count = edit.base, edit.base_count
    if edit.dead_letter_source is not None:  # a forwarded dead letter names the entity it left
        annotations, count = wire.with_dead_letter_source(annotations, count, edit.dead_letter_source)
    # The core keeps them opaque; they were decoded from the client's AMQP map (or set by the service).
    updates: dict[str, AmqpValue] = {str(key): cast("AmqpValue", value) for key, value in edit.properties}
    if edit.dead_letter_reason is not None:
        updates[wire.DEAD_LETTER_REASON] = edit.dead_letter_reason
    if edit.dead_letter_description is not None:
        updates[wire.DEAD_LETTER_DESCRIPTION] = edit.dead_letter_description
    if not updates:
        return annotations, count, None
    if edit.base_tail is None:
        raise ValueError("an edit sets application properties but carries no message tail")
    return annotations, count, wire.with_application_properties(edit.base_tail, updates)


EditEncoder = Callable[[AnnotationEdit], tuple[bytes, int, bytes | None]]
"""An edit as the store keeps it: (encoded annotation map entries, entry count, the new tail or None
to keep the row's)."""


def _checked_results(results: tuple[OpResult, ...], expected: int) -> tuple[OpResult, ...]:
    if len(results) != expected:
        raise RuntimeError(f"the store answered {len(results)} results for {expected} operations")
    return results


_Item = TypeVar("_Item", SettleItem, MoveItem)


def bind(op: StoreOp, ref: PartitionRef, encode: EditEncoder) -> StoreOp:
    """A core's operation as the store applies it: on partition ``ref`` (an ``AppendTo`` on its
    target), its gate on ``ref``'s history, its annotation edits encoded (ValueError, TypeError:
    an operation the store cannot be given)."""
    if isinstance(op, AppendTo):
        return _gated(op.as_append(), ref)
    if isinstance(op, Append):
        return _gated(replace(op, ref=ref), ref)
    if isinstance(op, Settle) and any(item.edit is not None for item in op.items):
        return replace(op, items=tuple(_encoded(item, encode) for item in op.items), ref=ref)
    if isinstance(op, MoveMessages) and any(item.edit is not None for item in op.items):
        return replace(op, items=tuple(_encoded(item, encode) for item in op.items), ref=ref)
    if isinstance(op, EntityOp):
        return op
    return replace(op, ref=ref)


def _gated(op: Append, ref: PartitionRef) -> Append:
    gate = op.gate
    return op if gate is None else replace(op, gate=Gate(gate.claim, gate.message_ids, ref=ref))


def _encoded(item: _Item, encode: EditEncoder) -> _Item:
    if item.edit is None:
        return item
    annotations, count, tail = encode(item.edit)
    return replace(item, edit=None, annotations=annotations, annotation_count=count, tail=tail)


@dataclass(frozen=True, slots=True)
class _Batch:
    batch_id: int
    ops: tuple[StoreOp, ...]
    error: str | None = None  # the core's ops could not be mapped to the port: fail it alone

    @property
    def alone(self) -> bool:
        """Committed in a transaction of its own: an all-or-none Settle may roll back the batch."""
        return any(isinstance(op, Settle) and op.all_or_none for op in self.ops)


class PartitionRunner:
    """Runs one partition's core against its store (see the module docstring)."""

    def __init__(self, ref: PartitionRef, view: View, worker: StoreWorker, clock: Clock,
                 on_reply: Callable[[Reply], None], *, edit_encoder: EditEncoder = encode_edit,
                 max_group: int = 64, commit_window: float = COMMIT_WINDOW_SECONDS) -> None:
        self.ref = ref
        self._view = view
        self._worker = worker
        self._clock = clock
        self._on_reply = on_reply
        self._encode = edit_encoder
        self._max_group = max(max_group, 1)
        self._effects: deque[_Batch | ReadWindow | ReadCounts] = deque()
        self._busy = False  # an effect (or a group) is on the store's thread
        self._start_scheduled = False
        self._window = commit_window
        self._round = 1  # batches in the last transaction plus those queued when it committed
        self._hold: asyncio.TimerHandle | None = None  # a small group waits for the rest until this fires
        self._held_out = False  # the window closed: the head group leaves as it is
        self._failure: BaseException | None = None  # an answer's handling raised: drained() raises it
        self._idle = asyncio.Event()
        self._idle.set()
        self._timer: Timer | None = None
        self._timer_at: int | None = None
        self._closed = False
        # Told after a commit that moved rows into another partition (dead-lettering): (target, count).
        self.on_moved: Callable[[PartitionRef, int], None] | None = None
        self._size_read = 0  # the partition's bytes as the store last counted them (read again after commits)
        self._size_appended = 0  # bytes appended since that read began (a removal shows at the next read)
        self._size_in_flight = 0  # bytes appended before the read now in flight began, counted until it lands
        self._size_read_at = 0.0
        self._size_task: asyncio.Task[None] | None = None
        self._size_timer: asyncio.TimerHandle | None = None
        self._size_again = False  # something changed the partition while a read was in flight: read again

    @classmethod
    async def start(cls, ref: PartitionRef, settings: CoreSettings, worker: StoreWorker, clock: Clock,
                    on_reply: Callable[[Reply], None], *, token_seed: int | None = None,
                    max_group: int = 64, commit_window: float = COMMIT_WINDOW_SECONDS) -> PartitionRunner:
        """A runner for ``ref`` as the store holds it now: counters and metadata, no messages."""
        meta = await worker.call(lambda: worker.store.partition_meta(ref))
        counts = meta.counts
        view = new_view(settings, clock.now(), token_seed=secrets.randbits(64) if token_seed is None else token_seed,
                        active=counts.active, scheduled=counts.scheduled, deferred=counts.deferred,
                        last_sequence_number=counts.last_sequence_number,
                        duplicate_history=meta.duplicate_history, session_states=meta.session_states)
        runner = cls(ref, view, worker, clock, on_reply, max_group=max_group, commit_window=commit_window)
        runner._size_read = counts.size_in_bytes
        runner.submit(Tick())  # anything already due (lapsed locks, activations, a first read)
        return runner

    @property
    def size_in_bytes(self) -> int:
        """The partition's bytes (quotas, runtime information): the store's count, read again at most
        every 200 ms after every change (this runner's commits, and rows other runners' batches moved
        in: :meth:`refresh_size`), plus what was appended since. It may run above the truth for up to
        a read's time after a removal, never below it, so a quota is never passed; once nothing
        changes any more, the last read came after the last change, so it is exact."""
        return self._size_read + self._size_in_flight + self._size_appended

    @property
    def view(self) -> View:
        """The core's view, to read (counts, session states); only ``decide`` changes it."""
        return self._view

    @property
    def next_due(self) -> int | None:
        """When the armed timer fires (None: no timer)."""
        return self._timer_at

    def submit(self, command: Command) -> None:
        """Decide ``command`` now; queue its effects, arm its timer and hand out its replies."""
        if self._closed:
            raise RuntimeError(f"the partition runner of {self.ref} is closed")
        decision = decide(self._view, command, self._clock.now())
        self._view = decision.view
        if decision.batch_id is not None:
            self._effects.append(self._bound(decision.batch_id, decision.store_ops))
        if decision.read is not None:
            self._effects.append(decision.read)
        if self._effects:
            self._idle.clear()
            if not self._busy and not self._start_scheduled:
                # At the end of this event-loop turn: what else is decided in it goes with it.
                self._start_scheduled = True
                asyncio.get_running_loop().call_soon(self._scheduled_start)
        self._arm(decision.next_due)
        for reply in decision.replies:
            self._on_reply(reply)

    async def drained(self) -> None:
        """Wait until every queued effect was carried out and answered."""
        await self._idle.wait()
        if self._failure is not None:
            raise RuntimeError(f"the partition runner of {self.ref} stopped") from self._failure

    async def close(self) -> None:
        self._closed = True
        self._release_hold()
        if self._size_timer is not None:
            self._size_timer.cancel()
            self._size_timer = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        self._effects.clear()  # an effect in flight has an outcome nobody hears of
        self._idle.set()

    # ---- effects ------------------------------------------------------------------------------------

    def _bound(self, batch_id: int, ops: tuple[StoreOp, ...]) -> _Batch:
        try:
            return _Batch(batch_id, tuple(bind(op, self.ref, self._encode) for op in ops))
        except (ValueError, TypeError) as error:  # an op the store cannot be given
            log.error("partition %s: batch %d cannot go to the store: %s", self.ref, batch_id, error)
            return _Batch(batch_id, (), f"not expressible on the store port: {error}")

    def _scheduled_start(self) -> None:
        self._start_scheduled = False
        self._next_effect()

    def _next_effect(self) -> None:
        """Start the effect at the head of the queue unless one is on the store's thread already;
        its outcome comes back as a callback on the loop, which answers the core and starts the next."""
        if self._closed:
            return
        if self._failure is not None:  # stopped: drained() raises instead of waiting for ever
            self._idle.set()
            return
        if self._busy:
            return
        if not self._effects:
            self._idle.set()
            return
        effect = self._effects.popleft()
        if isinstance(effect, ReadWindow):
            ref, worker, read = self.ref, self._worker, effect
            self._start(lambda: worker.call_soon(
                lambda: worker.store.peek(ref, read.from_sequence_number, read.count, ACTIVE_ONLY), self._window_read))
            return
        if isinstance(effect, ReadCounts):
            ref, worker = self.ref, self._worker
            self._start(lambda: worker.call_soon(lambda: worker.store.counts(ref), self._counts_read))
            return
        if (effect.error is None and not effect.alone and self._round > 1 and self._window > 0
                and not self._held_out and 1 + self._batches_at_head(self._round - 1) < self._round):
            self._effects.appendleft(effect)  # wait for the rest of the round (module docstring)
            if self._hold is None:
                self._hold = asyncio.get_running_loop().call_later(self._window, self._window_closed)
            return
        self._release_hold()
        group = [effect]
        if effect.error is None and not effect.alone:
            while (len(group) < self._max_group and self._effects and isinstance(self._effects[0], _Batch)
                   and self._effects[0].error is None and not self._effects[0].alone):
                head = self._effects.popleft()
                assert isinstance(head, _Batch)
                group.append(head)
        if group[0].error is not None:
            self._answer(StoreFailed(group[0].batch_id, group[0].error))
            self._next_effect()
            return
        ops = [op for batch in group for op in batch.ops]
        self._start(lambda: self._worker.commit_soon(ops, lambda results, error: self._committed(group, ops, results,
                                                                                                 error)))

    def _batches_at_head(self, enough: int) -> int:
        """How many batches that may share a transaction lead the queue (counting stops at ``enough``)."""
        count = 0
        for effect in self._effects:
            if count >= enough or not isinstance(effect, _Batch) or effect.error is not None or effect.alone:
                break
            count += 1
        return count

    def _window_closed(self) -> None:
        self._hold = None
        self._held_out = True
        self._next_effect()

    def _release_hold(self) -> None:
        self._held_out = False
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None

    def _start(self, hand_over: Callable[[], None]) -> None:
        self._busy = True
        try:
            hand_over()
        except BaseException:
            self._busy = False
            raise

    def _done(self, carry_on: Callable[[], None]) -> None:
        """An effect's outcome arrived: answer the core (``carry_on``), then start the next effect."""
        if self._closed:
            return
        try:
            carry_on()
        except Exception as error:  # a bug: stop carrying out effects, as before: the queue stops
            log.exception("partition %s: handling a store answer raised", self.ref)
            self._failure = error
            self._busy = False
            self._idle.set()
            return
        self._busy = False
        self._next_effect()

    def _window_read(self, rows: tuple[StoredMessage, ...] | None, error: BaseException | None) -> None:
        def carry_on() -> None:
            if error is not None:  # any failed read is answered None; the core reads again
                self._log_failure("window read", error)
                self._answer(WindowRead(None))
            else:
                self._answer(WindowRead(rows))

        self._done(carry_on)

    def _counts_read(self, counts: PartitionCounts | None, error: BaseException | None) -> None:
        def carry_on() -> None:
            if error is not None or counts is None:  # the core asks again
                self._log_failure("counts read", error or RuntimeError("no counts"))
                self._answer(CountsRead(None))
            else:
                self._answer(CountsRead((counts.active, counts.scheduled, counts.deferred)))

        self._done(carry_on)

    def _committed(self, group: list[_Batch], ops: list[StoreOp], port_results: tuple[OpResult, ...] | None,
                   error: BaseException | None) -> None:
        # The next round: this one's batches and those that queued meanwhile (after a failure: none).
        self._round = 1 if error is not None else min(len(group) + self._batches_at_head(self._max_group),
                                                      self._max_group)
        self._done(lambda: self._carry_on_commit(group, ops, port_results, error))

    def _carry_on_commit(self, group: list[_Batch], ops: list[StoreOp], port_results: tuple[OpResult, ...] | None,
                         error: BaseException | None) -> None:
        if isinstance(error, SettleFenced):  # a batch alone (see _Batch.alone), rolled back
            log.info("partition %s: %s", self.ref, error)
            self._answer(StoreFailed(group[0].batch_id, str(error), (error.op_index, error.item_index)))
            return
        results: tuple[OpResult, ...] = ()
        if error is None:
            assert port_results is not None
            try:
                results = _checked_results(port_results, len(ops))
            except Exception as mismatch:
                error = mismatch
        if error is not None:  # a transaction that raised applied nothing
            if not isinstance(error, Exception):
                raise error
            self._log_failure(f"transaction of {len(group)} batch(es)", error)
            for batch in group:
                self._answer(StoreFailed(batch.batch_id, str(error)))
            return
        at = 0
        for batch in group:
            self._answer(StoreResults(batch.batch_id, results[at:at + len(batch.ops)]))
            at += len(batch.ops)
        self._report_moves(ops, results)
        self._size_appended += sum(m.size for op in ops if isinstance(op, Append | Restore) and op.ref == self.ref
                                   for m in op.messages)
        if not (test_defects.ACTIVE and test_defects.on("size-after-move")  # test-only: the old defect
                and any(isinstance(op, MoveMessages) for op in ops)):
            self._refresh_size()

    def note_landed(self, size: int) -> None:
        """Another runner's batch stored ``size`` bytes in this partition (a topic's copies)."""
        self._size_appended += size
        self._refresh_size()

    def _report_moves(self, ops: list[StoreOp], results: tuple[OpResult, ...]) -> None:
        if self.on_moved is None:
            return
        moved: dict[PartitionRef, int] = {}
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, Settle) and isinstance(result, Settled):
                for item, applied in zip(op.items, result.applied, strict=True):
                    if applied and item.outcome is Outcome.DEAD_LETTER:
                        target = op.dead_letter_target(item)
                        moved[target] = moved.get(target, 0) + 1
            elif isinstance(op, MoveMessages) and op.destination is not None and isinstance(result, Moved):
                count = sum(1 for n in result.sequence_numbers if n is not None)  # None: not moved (locked, gone)
                if count:
                    moved[op.destination] = moved.get(op.destination, 0) + count
        for target, count in moved.items():
            try:
                self.on_moved(target, count)
            except Exception:
                log.exception("partition %s: reporting a move to %s raised", self.ref, target)

    def refresh_counts(self) -> None:
        """Read the counts and the byte count back from the store (other nodes write it too)."""
        if self._closed:
            return
        self.submit(RefreshCounts())
        self._refresh_size()

    def refresh_size(self) -> None:
        """Another batch changed this partition's rows (a move or dead-lettering into it, a keyed
        append): read its byte count again (the core is told ``Arrived``, which counts the messages)."""
        self._refresh_size()

    def _refresh_size(self) -> None:
        """Read the partition's byte count again: at once, or at the end of the 200 ms since the last read.
        Asked while a read is in flight, which may have run before the change: once more after it."""
        if self._closed:
            return
        if self._size_task is not None:
            self._size_again = True
            return
        if self._size_timer is not None:
            return
        loop = asyncio.get_running_loop()
        wait = self._size_read_at + 0.2 - time.monotonic()
        if wait > 0:
            self._size_timer = loop.call_later(wait, self._start_size_read)
        else:
            self._start_size_read()

    def _start_size_read(self) -> None:
        self._size_timer = None
        if self._closed:
            return
        self._size_read_at = time.monotonic()
        appended, self._size_appended = self._size_appended, 0
        self._size_in_flight += appended  # still counted while the read is out: its answer includes them
        self._size_task = asyncio.get_running_loop().create_task(self._read_size(appended))

    async def _read_size(self, appended: int) -> None:
        ref, worker = self.ref, self._worker
        failed = False
        try:
            counts = await worker.call(lambda: worker.store.counts(ref))
            self._size_read = counts.size_in_bytes
        except Exception as error:  # the read failed: keep counting what was appended, and read again
            self._size_appended += appended
            failed = True
            log.debug("partition %s: counting bytes failed: %s", self.ref, error)
        finally:
            self._size_in_flight -= appended
            self._size_task = None
            if self._size_again:
                self._size_again = False
                self._refresh_size()
            elif failed and self._size_timer is None and not self._closed:
                # (a removal before the failed read would be counted until the next change otherwise)
                self._size_timer = asyncio.get_running_loop().call_later(SIZE_READ_RETRY, self._start_size_read)

    def _answer(self, command: Command) -> None:
        if self._closed:
            return
        try:
            self.submit(command)
        except Exception:  # a reply callback's bug must not stop the partition's effects
            log.exception("partition %s: answering %s raised", self.ref, type(command).__name__)

    def _log_failure(self, what: str, error: BaseException) -> None:
        if isinstance(error, SodaliteError):
            log.warning("partition %s: %s failed: %s", self.ref, what, error)
        else:
            log.error("partition %s: %s failed unexpectedly", self.ref, what, exc_info=error)

    # ---- timers -------------------------------------------------------------------------------------

    def _arm(self, due: int | None) -> None:
        if due == self._timer_at and (due is None or self._timer is not None):
            return
        if due is not None and self._timer is not None and self._timer_at is not None and self._timer_at <= due:
            # An earlier timer stays: its Tick decides nothing early (decide looks at the time) and
            # re-arms at the then next due time. Each settlement moves the earliest lock's time on,
            # and cancelling and re-arming a loop timer per settlement costs more than that Tick.
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, due
        if due is not None:
            self._timer = self._clock.call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        if not self._closed:
            self.submit(Tick())
