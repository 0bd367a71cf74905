"""The commands :func:`~sodalite.model.partition_core.decide` takes (what a caller, a timer or the store says)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from sodalite.model.message import MessageRecord
from sodalite.model.partition import MessageDraft
from sodalite.model.partition_core.settings import Consumer, CoreSettings, ReceiveMode, ReplyTo
from sodalite.model.store_ops import MoveItem, OpResult, Outcome, StoredMessage


@dataclass(frozen=True, slots=True)
class Send:
    drafts: tuple[MessageDraft, ...]
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class Schedule:
    """ScheduleMessage: drafts carry ``scheduled_enqueue_time``; the reply carries their numbers."""

    drafts: tuple[MessageDraft, ...]
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class CancelScheduled:
    """Cancel scheduled messages, all or none: :class:`ScheduledCancelled` when every number named a
    scheduled message (all deleted), else :class:`MessageNotFound` naming the others (none deleted)."""

    sequence_numbers: tuple[int, ...]
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class Receive:
    """Give ``consumer`` ``count`` more credit (attach it if new).

    ``selects`` (a JMS selector) limits what the consumer is given to the ready messages it selects;
    it sees only those within the window, so a window full of messages it does not select keeps the
    ones behind from it until other consumers take some."""

    consumer: Consumer
    count: int
    mode: ReceiveMode = ReceiveMode.PEEK_LOCK
    selects: Callable[[MessageRecord], bool] | None = None


@dataclass(frozen=True, slots=True)
class CloseConsumer:
    """The consumer detached: no more deliveries to it; its locks live until they end."""

    consumer: Consumer


@dataclass(frozen=True, slots=True)
class Unsent:
    """ReceiveAndDelete deliveries whose delete committed but whose transfer was never written (the
    receiver's link, session or connection went away first, or it had no credit left): each
    ``records`` entry as :class:`Delivered` (or :class:`DeferredReceived`) carried it, with the
    claim counted. They are put back in place, the delivery given back (see "ReceiveAndDelete
    transfers never written" in the module docstring)."""

    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class Settle:
    token: uuid.UUID
    outcome: Outcome
    reply_to: ReplyTo = None
    properties_to_modify: tuple[tuple[str, object], ...] = ()
    reason: str | None = None  # dead-letter reason (DEAD_LETTER only)
    description: str | None = None


@dataclass(frozen=True, slots=True)
class RenewLock:
    token: uuid.UUID
    reply_to: ReplyTo = None


@dataclass(frozen=True, slots=True)
class AcceptSession:
    """``consumer`` (a session receiver) asks for the lock of ``session_id``, or with None for the
    next session with a ready message, waiting until ``wait_until`` (None: answer at once)."""

    consumer: Consumer
    session_id: str | None
    reply_to: ReplyTo
    wait_until: int | None = None


@dataclass(frozen=True, slots=True)
class RenewSessionLock:
    session_id: str
    reply_to: ReplyTo = None


@dataclass(frozen=True, slots=True)
class GetSessionState:
    session_id: str
    reply_to: ReplyTo = None


@dataclass(frozen=True, slots=True)
class SetSessionState:
    session_id: str
    state: bytes | None  # None clears it
    reply_to: ReplyTo = None


@dataclass(frozen=True, slots=True)
class Touch:
    """Something outside counts as use of the entity (management, a rule change)."""


@dataclass(frozen=True, slots=True)
class Tick:
    """A timer: the caller's ``next_due`` came."""


@dataclass(frozen=True, slots=True)
class UpdateSettings:
    """The entity's properties changed (through this node or, on a shared store, another): ``settings``
    apply from now on. With ``drop_locks`` every lock this core granted ends, as Service Bus ends them
    on an update: message locks as if they lapsed (the delivery counts; a message whose deliveries are
    used up or that expired meanwhile is dead-lettered or dropped), released in the store by ONE fenced
    ``Settle`` (ABANDON), and sessions held here are released (their holders get :class:`SessionLost`).
    :class:`SettingsUpdated` answers once that batch is done (at once when there is none)."""

    settings: CoreSettings
    reply_to: ReplyTo = None
    drop_locks: bool = True


@dataclass(frozen=True, slots=True)
class StoreResults:
    batch_id: int
    results: tuple[OpResult, ...]


@dataclass(frozen=True, slots=True)
class StoreFailed:
    batch_id: int
    error: str
    # (op, item) of the batch: an all-or-none Settle (a transaction's) found that item's lock no
    # longer this core's, so the store rolled the batch back: that lock is lost, the rest as failed.
    fenced: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class StoreAvailable:
    pass


@dataclass(frozen=True, slots=True)
class StoreUnavailable:
    pass


@dataclass(frozen=True, slots=True)
class WindowRead:
    """The answer to a :class:`ReadWindow`: ``peek(from, count, states={ACTIVE})``; ``None`` if it failed."""

    rows: tuple[StoredMessage, ...] | None


@dataclass(frozen=True, slots=True)
class Arrived:
    """``count`` ready messages were stored in this partition by someone else (a move into the
    dead-letter queue decided by the entity's own core, another node's send): read the window again
    from the start. ``Arrived(0)`` just asks for that read (the store came back, a poll)."""

    count: int


@dataclass(frozen=True, slots=True)
class DueInStore:
    """Something in this partition falls due at ``at`` that this core may not know of: a message
    another node scheduled (announced by it), or the store's ``next_due`` read again by the caller
    (a slow fallback: a node that died may have scheduled it, or held the lock that lapses then).
    At that time the core asks for ``Activate`` and reads the window again; both are fenced by the
    store, so when several nodes act on one time each message is activated (or expires) once. A
    time already acted on, announced again, changes nothing (what is due then is not this core's
    to act on: say, a deferred message past its expiry)."""

    at: int


@dataclass(frozen=True, slots=True)
class Landed:
    """Rows another core's batch stored in this partition, numbered and committed (a topic's copies
    for this subscription): counted and, where the window reaches them, taken into it, as this
    core's own appends are. No reply; arrivals are no use of the entity (AutoDeleteOnIdle)."""

    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class PublishCopy:
    """One copy of a topic's message for one partition (``target``: a subscription, or its
    dead-letter queue, in the caller's names), as the caller made it (rules and actions are the
    server's business); unnumbered."""

    target: Hashable
    record: MessageRecord
    # The partition whose counter numbers it there (None: the target's own): a subscription's dead
    # letter is numbered by the subscription, as on version 1, so it never meets a kept number.
    numbered_by: Hashable | None = None


@dataclass(frozen=True, slots=True)
class PublishEntry:
    """One message sent to the topic: its MessageId (for duplicate detection) and its copies
    (none when no subscription takes it)."""

    message_id: str | None
    copies: tuple[PublishCopy, ...]


@dataclass(frozen=True, slots=True)
class Publish:
    """A send to the topic this core runs: the entries that are not duplicates within the topic's
    window have their copies appended to their partitions (``AppendTo``), all in ONE batch with
    the duplicate history, and :class:`Published` answers once that committed. With ``complete``
    (the lock of this core's own message being published: a scheduled message that came due),
    that message is completed in the same batch, and duplicate detection does not apply (it did
    when the message was scheduled); if the lock is no longer usable, nothing is published
    (:class:`LockLost`)."""

    entries: tuple[PublishEntry, ...]
    reply_to: ReplyTo
    complete: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class ReceiveDeferred:
    """Receive deferred messages by sequence number ($management com.microsoft:receive-by-sequence-number):
    all of them or none (:class:`MessageNotFound`). PeekLock locks them for ``consumer``;
    ReceiveAndDelete removes them. On a session entity ``session_id`` names the session, which must
    be held here, and the locks ride on its lock (see "Deferred messages" in the module docstring)."""

    sequence_numbers: tuple[int, ...]
    reply_to: ReplyTo
    mode: ReceiveMode = ReceiveMode.PEEK_LOCK
    session_id: str | None = None
    consumer: Consumer = None


@dataclass(frozen=True, slots=True)
class CompleteThrough:
    """Remove every message numbered ``sequence_number`` or lower, in any state, except locked ones
    (a Sodalite extension for the Spark reader, docs/spark.md); answered by :class:`CompletedThrough`."""

    sequence_number: int
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class Transact:
    """Commit an AMQP transaction decided by this core (``server/transactions.py``): every
    settlement (``settles``: locks this core holds; their ``reply_to`` is unused) and every message
    the transaction sends (``entries``: copies for their partitions, as a topic's ``Publish`` has
    them, this partition included) in ONE batch. Every lock must be usable now, else nothing
    happens (:class:`LockLost`, :class:`SessionLockLost`; :class:`ServerBusy` when the store is
    offline). ``deduplicate[i]`` says this core's duplicate detection applies to entry ``i``'s
    MessageId (a send to this entity). Answered after the commit by :class:`Published` (the copies
    as numbered, per target: the caller tells each target's core they ``Landed``), or, with no
    copy stored, by :class:`SettlementDone` of the last settlement. The settlements are one
    all-or-none ``Settle``: a lock the store finds taken by then (another node's claim after it
    lapsed) fails the whole batch, answered :class:`LockLost` (or :class:`SessionLockLost`)."""

    settles: tuple[Settle, ...]
    entries: tuple[PublishEntry, ...]
    reply_to: ReplyTo
    deduplicate: tuple[bool, ...] = ()


@dataclass(frozen=True, slots=True)
class MoveOut:
    """Take the named rows out of this partition, whatever their state, except those locked at
    ``now`` (or locked or being claimed here): appended to ``target`` (entity path, partition: a
    partition of the same store) with each item's edits, or deleted when ``target`` is None (a
    purge by number). One fenced ``MoveMessages``, so the copy exists exactly when the row left;
    answered by :class:`MovedOut` once it committed (resubmit, move, purge: server/moves.py)."""

    items: tuple[MoveItem, ...]
    reply_to: ReplyTo
    target: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class RefreshCounts:
    """Read the counts back from the store (other nodes sharing it send and settle too): the next
    decision asks for :class:`ReadCounts`, whose answer replaces the view's counts exactly."""


@dataclass(frozen=True, slots=True)
class CountsRead:
    """The answer to a :class:`ReadCounts`: (active, scheduled, deferred) as ``store.counts(ref)``
    gives them; ``None`` if the read failed."""

    counts: tuple[int, int, int] | None


Command = (Send | Schedule | CancelScheduled | Receive | CloseConsumer | Settle | RenewLock | Touch | Tick
           | StoreResults | StoreFailed | StoreAvailable | StoreUnavailable | WindowRead | AcceptSession
           | RenewSessionLock | GetSessionState | SetSessionState
           | ReceiveDeferred | CompleteThrough | CountsRead | Arrived | Landed | Publish | MoveOut | Transact
           | DueInStore | RefreshCounts | UpdateSettings | Unsent)
