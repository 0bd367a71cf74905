"""What one partition knows (:class:`View`), as one sub-record per feature, and :func:`new_view`.

The view belongs to ``decide``: it is updated in place and returned. Each sub-record is the state of
one feature and is changed by that feature's module: :class:`Window` by ``window``, :class:`Locks`
by ``settling`` and the claims, ``credit`` by ``receivers``, :class:`Scheduled` by ``timers``,
:class:`Sessions` by ``sessions``, :class:`Dedup` by ``sending``, :class:`Counts` by whoever commits
a change of state (and by ``maintenance`` when they are read back)."""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sodalite.model.dedup import DuplicateDetector
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition_core.settings import Consumer, CoreSettings, ReceiveMode, ReplyTo

if TYPE_CHECKING:
    from sodalite.model.partition_core.turn import Continuation

LOST_TOKENS = 1024  # session-message tokens remembered as lost (a settlement with one names its session)


@dataclass(slots=True)
class Counts:
    """This partition's counts as the store keeps them (active includes locked), and whether they
    must be read back: after a committed Purge or MoveOut (``stale_after``: the highest such batch id
    whose counts were not read back yet, 0: the counts are the store's; ``read_after``: the last batch
    id the ReadCounts in flight comes after), or when RefreshCounts asked (``refresh``)."""

    active: int = 0
    scheduled: int = 0
    deferred: int = 0
    stale_after: int = 0
    read_after: int | None = None
    refresh: bool = False


@dataclass(slots=True)
class Window:
    """The next ready messages, complete up to ``cursor`` (see "the window" in docs/partition-core.md)."""

    records: dict[int, MessageRecord] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # the window's numbers, ascending
    size: int = 0  # bytes
    expiry_heap: list[tuple[int, int]] = field(default_factory=list)  # (expires_at, seq), lazy
    cursor: int = 0
    at_tail: bool = False
    last_appended: int = 0
    landed_beyond: int = 0  # the highest landed number left for a read (past the cursor, not at the tail)
    read_in_flight: int | None = None  # the count asked for
    read_from: int = 0  # the number the read in flight starts at
    rescan_at: int | None = None  # a row skipped as locked by someone: read again from the start then


@dataclass(slots=True)
class HeldLock:
    token: uuid.UUID
    record: MessageRecord  # as claimed: delivery count already raised
    locked_until: int
    consumer: Consumer
    state: MessageState
    settling: bool = False  # a settlement of it is in a batch not yet answered
    renewing: bool = False  # a renewal of it is in a batch not yet answered
    session_token: uuid.UUID | None = None  # a session's message: the session lock it rides on
    dropped: bool = False  # an UpdateSettings ended it, but its release failed: unusable, it lapses at its time

    @property
    def busy(self) -> bool:
        return self.settling or self.renewing


@dataclass(slots=True)
class Locks:
    """The message locks this core granted, and the rows it is claiming."""

    held: dict[uuid.UUID, HeldLock] = field(default_factory=dict)
    by_seq: dict[int, uuid.UUID] = field(default_factory=dict)
    heap: list[tuple[int, uuid.UUID]] = field(default_factory=list)  # (locked_until, token), lazy
    claiming: set[int] = field(default_factory=set)
    # Tokens of messages whose session lock was lost (the newest LOST_TOKENS): a settlement names the session.
    lost: dict[uuid.UUID, str] = field(default_factory=dict)

    def add(self, lock: HeldLock) -> None:
        self.held[lock.token] = lock
        self.by_seq[lock.record.sequence_number] = lock.token

    def note_lost(self, token: uuid.UUID, session_id: str) -> None:
        self.lost[token] = session_id
        if len(self.lost) > LOST_TOKENS:
            del self.lost[next(iter(self.lost))]


@dataclass(slots=True)
class Credit:
    count: int
    mode: ReceiveMode
    selects: Callable[[MessageRecord], bool] | None = None


@dataclass(slots=True)
class Scheduled:
    """Activation times kept here (a bounded heap; beyond it, the core polls the store) and the
    times the store named (:class:`~sodalite.model.partition_core.commands.DueInStore`)."""

    heap: list[tuple[int, int]] = field(default_factory=list)  # (activation time, seq)
    untracked: bool = False
    poll_at: int | None = None
    activate_in_flight: bool = False
    activate_again: bool = False
    store_due: int | None = None  # the earliest time a DueInStore named, not acted on yet
    store_due_done: int | None = None  # the last such time acted on

    def forget(self, gone: set[int] | None = None, *, above: int | None = None) -> None:
        """Drop the tracked times of rows that left (``gone``) or of every row numbered at most ``above``."""
        if not self.heap:
            return
        kept = [e for e in self.heap if (gone is None or e[1] not in gone) and (above is None or e[1] > above)]
        if len(kept) != len(self.heap):
            heapq.heapify(kept)
            self.heap = kept

    def none_left(self) -> None:
        self.untracked = False
        self.poll_at = None
        self.heap.clear()


@dataclass(slots=True)
class HeldSession:
    """A session lock this core holds for one consumer."""

    session_id: str
    token: uuid.UUID
    locked_until: int
    consumer: Consumer
    claiming: bool = False  # a Claim of its messages is in a batch not yet answered
    renewing: bool = False  # a RenewSession is in a batch not yet answered
    renew_until: int = 0  # the time that renewal asks for: claims made meanwhile lock their messages to it
    more: bool = True  # it may have ready messages: False after a claim came back short


@dataclass(frozen=True, slots=True)
class Waiter:
    consumer: Consumer
    reply_to: ReplyTo
    wait_until: int | None


@dataclass(slots=True)
class Sessions:
    """The sessions sub-machine's state: the session locks held here and the accepts waiting."""

    held: dict[str, HeldSession] = field(default_factory=dict)
    by_consumer: dict[Consumer, str] = field(default_factory=dict)
    heap: list[tuple[int, str]] = field(default_factory=list)  # (locked_until, session id), lazy
    states: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # id -> (state, updated at)
    waiters: list[Waiter] = field(default_factory=list)  # next-available accepts not yet answered
    accept_in_flight: bool = False  # a next-available ClaimSession is in a batch not yet answered
    maybe_ready: bool = True  # something became ready since a next-available claim found nothing
    # When session locks this core gave up lapse in the store (a release not sent because the store was
    # down, or one that failed): those sessions may be free then, though nothing else says so.
    lapses: list[int] = field(default_factory=list)  # heap of locked-until times

    def of(self, consumer: Consumer) -> HeldSession | None:
        sid = self.by_consumer.get(consumer)
        return None if sid is None else self.held.get(sid)

    def ready(self, session_id: str) -> None:
        """A message of ``session_id`` may be ready now: its holder may claim, a waiter may find it."""
        self.maybe_ready = True
        held = self.held.get(session_id)
        if held is not None:
            held.more = True


@dataclass(slots=True)
class Dedup:
    """Duplicate detection: the detector (None: the entity has none) and, on a shared store, when the
    store's history was last pruned."""

    detector: DuplicateDetector | None
    pruned_at: int = 0


@dataclass(slots=True)
class View:
    """What one partition knows. Build it with :func:`new_view`."""

    settings: CoreSettings
    counts: Counts
    token_seed: int
    last_activity: int
    dedup: Dedup
    window: Window = field(default_factory=Window)
    locks: Locks = field(default_factory=Locks)
    credit: dict[Consumer, Credit] = field(default_factory=dict)
    scheduled: Scheduled = field(default_factory=Scheduled)
    sessions: Sessions = field(default_factory=Sessions)
    available: bool = True
    idle_reported: bool = False
    token_counter: int = 0
    next_batch_id: int = 1
    pending: dict[int, tuple[Continuation[Any], ...]] = field(default_factory=dict)  # batch id -> one per op
    # UpdateSettings answered when the batch that drops its locks is done: batch id -> (reply_to, tokens)
    updates_waiting: dict[int, tuple[ReplyTo, tuple[uuid.UUID, ...]]] = field(default_factory=dict)
    # ReceiveAndDelete messages never written whose Restore failed (the store was down): tried again
    restore_again: list[MessageRecord] = field(default_factory=list)


def new_view(settings: CoreSettings, now: int, *, token_seed: int, active: int = 0, scheduled: int = 0,
             deferred: int = 0, last_sequence_number: int = 0,
             duplicate_history: tuple[tuple[str, int], ...] = (),
             session_states: tuple[tuple[str, bytes, int], ...] = ()) -> View:
    """A partition as it starts: counters and metadata from the store, no messages."""
    detector = None if settings.duplicate_window is None else DuplicateDetector(settings.duplicate_window,
                                                                                duplicate_history)
    view = View(settings, Counts(active, scheduled, deferred), token_seed & ((1 << 64) - 1), now,
                Dedup(detector, now))
    view.window.last_appended = last_sequence_number
    view.sessions.states = {sid: (state, at) for sid, state, at in session_states if state}  # empty: cleared
    if active == 0:  # nothing ready: the window is complete and at the end
        view.window.at_tail, view.window.cursor = True, last_sequence_number
    if scheduled:  # their times are in the store, not here: poll until they are gone
        view.scheduled.untracked, view.scheduled.poll_at = True, now
    return view


def touch(view: View, now: int) -> None:
    """A use of the entity (AutoDeleteOnIdle counts from the last one)."""
    view.last_activity = now
    view.idle_reported = False


def next_token(view: View) -> uuid.UUID:
    view.token_counter += 1
    return uuid.UUID(int=(view.token_seed << 64) | (view.token_counter & ((1 << 64) - 1)))


def expired(record: MessageRecord, now: int) -> bool:
    return record.expires_at is not None and record.expires_at <= now


def session_ready(view: View, session_id: str | None) -> None:
    """A message of ``session_id`` may be ready now (sessions only)."""
    if session_id is not None and view.settings.requires_session:
        view.sessions.ready(session_id)
