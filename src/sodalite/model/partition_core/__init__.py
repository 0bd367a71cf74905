"""The pure partition core of a queue, sessions included: ``decide(view, command, now) -> Decision``.

Theory of operation (storage-and-scale.md sections 1-3, the rabbit_fifo model in style.md). The
store holds every message and every lock; this core decides, and its caller does the I/O. Each call
takes the partition's :class:`View`, one command and the time, and returns a :class:`Decision`:
the store operations to apply as ONE transaction (``store_ops``, named by ``batch_id``), at most one
read to run (``read``), the replies to send now, and ``next_due``, the time at which the caller
must call again with :class:`Tick` (``None``: no timer). Nothing here reads a clock or does I/O;
the caller answers a batch with :class:`StoreResults` (the port's results, one per op) or
:class:`StoreFailed`, and a read with :class:`WindowRead`.

The caller's contract: it applies batches and runs reads one at a time in the order decisions
emitted them (a decision's batch before its read), and feeds their answers back in that order.
The view belongs to ``decide``: it is updated in place and returned (copying a window per command
would cost O(window)); keep no reference to an earlier view.

Durability before replies: a reply that says something happened waits in the batch that makes it
durable and is released by that batch's :class:`StoreResults`: a send's acceptance (with its
sequence numbers, which the store assigns) after its ``Append`` committed, a delivery after its
``Claim`` committed (ReceiveAndDelete: after the delete committed too, so a crash never delivers
twice), a settlement echo or a renewal after its fenced ``Settle``/``RenewLocks`` applied. A fenced
operation the store refused becomes :class:`LockLost`, a reply value, never an exception. A failed
batch changes nothing in the store; its replies become :class:`ServerBusy` and its messages are
found again by the next window read.

Memory is bounded, not the backlog: the view keeps a window of the next ready messages (capped in
bytes), the locks it granted (token -> message), the consumers' credit, duplicate-detection history
within its time window, a bounded list of scheduled activation times, counters and a few ints. The
window is complete up to ``cursor``: every ready, unlocked message numbered at most ``cursor`` that
this core has not claimed is in it. Below half its cap (and not ``at_tail``) the core asks for a
read of the next rows after ``cursor``; a short read means the window reached the end of the
queue (``at_tail``), after which committed appends enter the window directly. A message that comes
back (abandon, release, lapsed lock, activation) is inserted by number, so it is the next one
delivered, as Service Bus does; over the cap, the highest numbers are evicted and ``cursor`` moves
below them. A read stops adding rows once the window is full (so the window may pass its cap by
less than one message, and a message larger than the cap still gets through alone).
Claims name sequence numbers and the store fences them (a row gone or locked by someone
else is skipped, and the window is read again from the start, which finds a row locked elsewhere
and reads again at its locked-until), so a stale window can never deliver a message twice. A
read's answer counts only if ``cursor`` is still where the read began: a failed batch, an eviction
or a rescan that moved ``cursor`` below it while it was in flight makes it stale (it would skip
the rows between), and it is dropped.

Service Bus rules kept (as the deleted in-memory partition of the version-1 path kept them):
- expiry (message-expiration seed): a message past ``expires_at`` is never handed out. It leaves
  when a receive meets it in the window, when its expiry time comes while it is in the window (a
  ``Tick``), or when the lock it was under ends (lapse, abandon, release); to the dead-letter queue
  with reason ``TTLExpiredException`` when the entity dead-letters on expiration, else dropped. A
  locked message is unaffected until its lock ends.
- MaxDeliveryCount: the store counts a delivery when it claims (before hand-out, issue 13.11), so a
  crash counts it as a lapsed delivery. A message whose count has reached the maximum is
  dead-lettered (``MaxDeliveryCountExceeded``) when its lock ends by abandon or lapse, and when a
  receive meets it; never handed out again.
- a message dead-lettered into the entity's own dead-letter queue (by a client, MaxDeliveryCount,
  expiry) keeps its sequence number there: the ``Settle`` item or ``MoveMessages`` says so
  (``keep_sequence_number(s)``); one forwarded elsewhere (ForwardDeadLetteredMessagesTo) is new
  there. The dead-letter queue's core finds such a row below its cursor by reading again from the
  start when told :class:`Arrived`.
- release (AMQP ``released``: the receiver never saw it) gives the delivery back; abandon keeps it.
- defer parks the message (state DEFERRED); it is not in the window.
- pings (ContentType application/vnd.ms-servicebus-ping) are accepted and never stored.
- duplicate detection: a MessageId seen within the window is acknowledged and dropped. On a store
  only this node writes, the view's detector decides and the history is stored with the append
  (``RememberMessageIds``). On a store other nodes write too (``shared_store``) the store decides:
  the append's batch takes the ids first (``ClaimMessageIds``, marked with a fresh claim token) and
  the ``Append`` stores only the messages whose id that claim took; a duplicate's number comes back
  0 and is left out of the reply. The detector is then only a first filter of the ids this core
  took: an id the store refused leaves it. ``Tick`` prunes the history: ``ForgetMessageIds`` of the
  ids the detector drops; on a shared store ``PruneMessageIds`` of every entry seen before the
  window, whichever node took it (an id another node took again since stays), at least once per
  window, so the ids of a node that stopped go too.
- scheduled messages are appended SCHEDULED with their number (returned to ScheduleMessage) and
  activated by ``Activate`` when their time comes. A cancel is all or none, as Service Bus and the
  deleted version-1 path answer: ONE ``CancelScheduled`` op deletes the rows only if every number
  names a SCHEDULED row free to take (so a cancel never deletes an active or deferred message);
  otherwise nothing changes and the reply is :class:`MessageNotFound` naming the others (number 0,
  a scheduled ping's, is refused so before the store is asked). The store decides it in one
  transaction, so another node activating or cancelling the same rows at once cannot split it. Times the
  core does not track (rows another node scheduled, told by :class:`DueInStore`) are acted on at
  that time the same way, with a window read; the store fences ``Activate``, so each message is
  activated once however many nodes act on its time.
- AutoDeleteOnIdle: with no send, receive, settlement or management for the idle time, no
  receiver attached and nothing scheduled, the core replies :class:`IdleExpired` once.
- an update of the entity's properties (:class:`UpdateSettings`, as the version-1 path did) ends
  every lock granted here: message locks end as lapsed ones do (the delivery counts; used up or
  expired, the message is dead-lettered or dropped), in the store by one fenced ``Settle``
  (ABANDON) so another receiver may take the message at once; sessions held here are released and
  their holders told :class:`SessionLost`. A settlement decided before the update still applies; a
  claim in flight at the update delivers with the lock it was claimed with. :class:`SettingsUpdated`
  answers after that batch; its tokens are unusable even if the batch failed or the store was down
  (the locks are kept, marked ``dropped``, until they lapse at their time, as the store's do).

Sessions (``CoreSettings.requires_session``; transfers-locks-settlement seed, sdk-wire-contract.md
section 4.3). Every stored message needs a SessionId (a
send without one is :class:`Refused`; pings need none). A receiver takes a session with
:class:`AcceptSession`: by id (``ClaimSession`` of that id; held elsewhere:
:class:`SessionCannotBeLocked`) or the next available one (``ClaimSession(None)``: the store picks
the free session with the lowest ready message). Waiting accepts are asked for one at a time and
only after something became ready (a send committed, a message came back, a session was let go),
and answered :class:`NoSessionAvailable` at their ``wait_until``. The reply comes after the session
lock is in the store. Only the holder gets the session's messages: it claims them from the store
(``Claim(session_id=...)``), which takes the lowest ready rows; batches apply in order, so the rows
of a failed claim are the first the next claim takes and nothing overtakes them. One claim per
session is in flight at a time (credit given meanwhile joins the next one). The global window
still reads every ready row, but only to drop expired ones and dead-letter used-up ones at their
time. A message's lock rides on
its session's: it ends when the session's does, and renewing the session (:class:`RenewSessionLock`,
or the holder asking for more messages, as the old path does) renews them in the same batch; a
session's message has no lock of its own to renew (:class:`Refused`). The session lock is a timer:
at its time the holder gets :class:`SessionLost` and its messages' locks lapse (their deliveries
count); a settlement after that is :class:`SessionLockLost`. Closing the receiver releases the
session (``ReleaseSession``) and abandons its messages. Session state is read from the view (the
store's states at start, then every committed change) and set with ``PutSessionState``
(:class:`SessionStateSet` after it commits); both need the session held. MaxDeliveryCount, TTL and
deferral apply as for queues; a row that a session claim finds already at the maximum is
dead-lettered by a fenced Settle instead of being delivered (its stored count then includes that
claim).

Deferred messages by number (:class:`ReceiveDeferred`, $management receive-by-sequence-number):
one ``Claim(state=DEFERRED, sequence_numbers=...)``. All or none, as the deleted version-1 path
and Service Bus answer: if the claim did not take every
number asked (gone, not deferred, locked), the rows it took are released (their delivery given
back) and the reply is :class:`MessageNotFound` naming the missing ones. PeekLock answers
:class:`DeferredReceived` once the claim committed; its locks are :class:`HeldLock` s like any
other (settle, renew, lapse), but a deferred message whose lock ends without a settlement
(abandon, release, lapse) stays deferred and never enters the window. ReceiveAndDelete completes
the rows in the next batch, once the claim took them all, and answers after that delete
committed (a delete that applied only in part still hands out what it deleted). On a session
entity ``session_id`` must name a session held here (any receiver of this core; else
:class:`SessionLockLost`, none named: :class:`Refused`): the claim takes only that session's rows
and their locks ride on the session's lock. Known differences from the version-1 path: a
deferred message is never dead-lettered for MaxDeliveryCount or TTL when its lock ends (the
version-1 path does both on abandon and lapse), and the store never claims an expired deferred
row (so it is not found).

ReceiveAndDelete transfers never written (:class:`Unsent`). A ReceiveAndDelete delivery is
deleted before it is handed out (a crash loses at most the transfers in flight, never delivers one
twice). When the caller finds it could not write the transfer (the receiver's link, session or
connection went away first, or its credit was gone), it hands the records back: one ``Restore``
puts each row back under its own number with its state and the delivery count it had before the
claim (a transfer never written was no delivery), unlocked; after the commit it is counted again
and a ready one rejoins the window by number (or is found by the next read), so it is the next
one delivered, as a released message is. A restored number lies below numbers already handed
out, which is why the Spark reader removes exactly the numbers it read (a ``MoveOut`` of them,
docs/spark.md), never everything through a number.

Complete-through (:class:`CompleteThrough`, a Sodalite extension for the Spark reader): one
``Purge(through)``, the port's semantics and the version-1 ``complete_through``'s (every row
numbered <= N in any state, except rows locked at ``now``); :class:`CompletedThrough` with the
store's count after it commits. The window forgets its rows <= N, and moves ``cursor`` below them,
when the purge is decided and again when it commits (a lock that kept a row, and lapsed in
between, put it back; the read finds it again). A lock that had lapsed by the purge's time kept
nothing: when it is still held here at the commit (it was busy at its time, a renewal in flight,
and the store was down when that answered, so it never lapsed), it goes with its row then, never
lapsing back into the window. ``Purged`` is one total, so once a purge with a
count committed, or when told :class:`RefreshCounts` (on a store other nodes write, whose
sends and settlements this core does not see), the core asks for :class:`ReadCounts` (a read
like :class:`ReadWindow`, at most one per decision, taking precedence) and replaces its counts
with the :class:`CountsRead` answer: the read runs after every batch decided before it and its answer comes before the
results of any decided after it, so the replacement is exact. Until it comes,
``View.counts_stale_after`` says the counts may be off by what the purge took.

Topics (:class:`Publish`, :class:`Landed`): a topic's core stores nothing of a plain send; the
caller plans each message's copies (rules and actions are the server's), this core applies the
topic's duplicate detection and puts every copy in ONE batch (``AppendTo`` each subscription's
partition, with the history), and :class:`Published` answers after that commit. A scheduled
message waits in the topic's own partition; once due and handed to the caller's activator (an
ordinary PeekLock delivery), ``Publish(complete=token)`` stores its copies and completes it in one
batch. A copy the caller plans into a subscription's dead-letter queue (a filter error) names the
subscription's partition as ``numbered_by``, so it is numbered there, as version 1 numbers it, and
never takes a number a message dead-lettered later keeps. A subscription's core learns of its
copies by :class:`Landed` (numbered, committed rows),
taken in like its own appends; a read in flight that may have run before their commit does not
let the core conclude it reached the tail.

Moving rows out (:class:`MoveOut`: the console's and the CLI's resubmit, move and purge by number,
server/moves.py): one ``MoveMessages`` of the named rows, whatever their state, fenced by the
store (a row locked at ``now`` stays), to another partition of the same store (``target``, with the
edits the server encoded into each item: dead-letter properties removed, count reset, new times)
or deleted. Rows this core holds locked or is claiming are not sent (someone is working on them);
the others leave the window when the move is decided, so nothing claims them meanwhile, and again
when it commits (a read in flight may have brought one back). A row the store did not move moves
the cursor below it (if it is still there, a read finds it). :class:`MovedOut` answers after the
commit, per item its number in the target or None; the counts are read back as after a
complete-through (the rows' states are the store's). The target's core is told ``Arrived`` by the
caller after the commit; the target's duplicate detection does not see a move.

AMQP transactions (:class:`Transact`, server/transactions.py): the core of the partition whose
locks the transaction settles (or, settling none, of its first send's partition) commits it. It
checks every lock is usable now (else it refuses and nothing changes), applies its own duplicate
detection to the sends addressed to its entity (on a shared store the batch takes their ids in the
store and gates their copies, as a ``Publish`` does), and emits ONE batch: the settlements and an
``AppendTo`` per partition the sends' copies go to (a topic's planned into its subscriptions by the
caller, as for ``Publish``; this partition's own included). The answer comes after the commit; the
caller then tells each target's core the rows ``Landed``, so everything shows at once. A failed
batch leaves the locks held and stores nothing. The settlements are one ``Settle`` with
``all_or_none``: on a store other nodes share, a lock usable at the decision may have lapsed and
been claimed by another node before the batch applies; the store then rolls the whole batch back
and names the item (``StoreFailed.fenced``): that lock is lost (``LockLost``/``SessionLockLost``
answers the transaction, which rolls back), the others stay held, and no send is stored.

Forwarding dead letters (``CoreSettings.forward_dead_letters``, a :class:`DeadLetterForward` the
caller resolved from ForwardDeadLetteredMessagesTo: a partition of the same store). Every
dead-lettering this core decides (a client's, MaxDeliveryCount, expiry with
``dead_letter_on_expiration``) goes there instead of the dead-letter queue, in the same operation:
the fenced ``Settle`` item names the target (a lock lost forwards nothing), or the ``MoveMessages``
of unlocked rows moves them there. The copy keeps its properties, carries the dead-letter reason
and description and its source (``x-opt-deadletter-source``), starts with delivery count 0 (so the
target does not dead-letter it again at once), is enqueued now and expires by its time-to-live
capped by the target's default (:func:`forwarded_expiry`). Where the target's forwarding reached the
hop limit the caller names that entity's transfer dead-letter queue: reason
MaxTransferHopCountExceeded, no expiry. The caller tells the target's core ``Arrived``. A target
in another store (``DeadLetterForward.relayed``): the caller names this entity's own dead-letter
queue, where the copy waits, marked and without expiry, for the server's relay to carry it over.

Not decided here: peek and list-sessions (``server/core_actor.py`` reads the store for them) and the
entity size quota (checked by ``server/core_actor.py`` before a send is submitted).
"""

from __future__ import annotations

import enum
import heapq
import uuid
from bisect import bisect_right, insort
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

from sodalite.model.dedup import DuplicateDetector
from sodalite.model.message import MessageRecord, MessageState
from sodalite.model.partition import (
    LAST_INSTANT_MS,
    MAX_DELIVERY_COUNT_EXCEEDED,
    MAX_TRANSFER_HOP_COUNT_EXCEEDED,
    TTL_EXPIRED,
    MessageDraft,
)
from sodalite.model.store_ops import (
    Activate,
    Activated,
    AnnotationEdit,
    Append,
    Appended,
    AppendTo,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    ForgetMessageIds,
    Gate,
    IdsClaimed,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PruneMessageIds,
    Purge,
    Purged,
    PutSessionState,
    ReleaseSession,
    RememberMessageIds,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    SessionClaimed,
    Settled,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
)
from sodalite.model.store_ops import CancelScheduled as CancelScheduledOp
from sodalite.model.store_ops import Settle as SettleOp

Consumer = Hashable  # whoever receives: a receiver link's id, opaque to the core
ReplyTo = Hashable  # what a reply answers: a delivery tag, a management request id, ...
_NO_REPLY: ReplyTo = ("sodalite.partition_core", "no reply")  # a settlement the core made itself
_DROPPED: ReplyTo = ("sodalite.partition_core", "dropped")  # a lock an UpdateSettings ended (no reply either)


class ReceiveMode(enum.Enum):
    PEEK_LOCK = "peek_lock"
    RECEIVE_AND_DELETE = "receive_and_delete"


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """The entity's settings as the core needs them (all times in ms)."""

    lock_duration: int = 60_000
    default_ttl: int | None = None
    max_delivery_count: int = 10
    dead_letter_on_expiration: bool = False
    duplicate_window: int | None = None  # None: no duplicate detection
    auto_delete_on_idle: int | None = None
    owner: str = "node"  # this node's id, written with every lock
    window_bytes: int = 1 << 20  # cap of the ready-message window
    read_count: int = 256  # rows asked for by one window read
    activate_limit: int = 256  # rows one Activate may turn ACTIVE
    scheduled_tracked: int = 4096  # activation times kept in memory; beyond, poll
    scheduled_poll: int = 1_000  # how often to try Activate for times not kept in memory
    requires_session: bool = False  # a session-enabled entity (see "Sessions" in the module docstring)
    shared_store: bool = False  # other nodes write the store: it decides duplicates (see "duplicate detection")
    forward_dead_letters: DeadLetterForward | None = None  # ForwardDeadLetteredMessagesTo (module docstring)
    # Whether an abandon raises the delivery count. Not in a dead-letter queue: Service Bus keeps a dead
    # letter's count as it was dead-lettered however often it is abandoned there (the Go SDK's live
    # TestMessageSettlementUsingReceiver); the abandon is then a release with its properties kept.
    abandon_counts: bool = True


@dataclass(frozen=True, slots=True)
class DeadLetterForward:
    """ForwardDeadLetteredMessagesTo as the caller resolved it: this entity's dead letters go to
    ``target`` (entity path, partition: a partition of the same store) instead of its dead-letter
    queue. ``source`` is this entity's name (the copy's ``x-opt-deadletter-source``), ``default_ttl``
    the target's DefaultMessageTimeToLive. With ``hop_limit`` (its description) the target's
    forwarding chain reached the hop limit and ``target`` is the transfer dead-letter queue where it
    stopped: the copy goes there with reason MaxTransferHopCountExceeded and never expires. With
    ``relayed`` the target is this entity's own dead-letter queue, where the copy waits for the
    server's relay into another store (``server/dead_letter_relay.py``): it does not expire there
    (the relay gives it its expiry in the target, counted from the forwarding)."""

    target: tuple[str, int]
    source: str
    default_ttl: int | None = None
    hop_limit: str | None = None
    relayed: bool = False


# ---- commands ---------------------------------------------------------------------------------------


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


# ---- replies and effects ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivered:
    """Hand ``message`` to ``consumer``; ``lock_token`` None for ReceiveAndDelete."""

    consumer: Consumer
    message: MessageRecord
    lock_token: uuid.UUID | None
    locked_until: int | None


@dataclass(frozen=True, slots=True)
class SendAccepted:
    """The send (or schedule) is durable; ``sequence_numbers`` of the messages stored (no duplicate
    or ping has one)."""

    reply_to: ReplyTo
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Published:
    """A :class:`Publish` is durable: per target, its copies as the store numbered them
    (duplicates left out; empty when nothing was stored)."""

    reply_to: ReplyTo
    stored: tuple[tuple[Hashable, tuple[MessageRecord, ...]], ...]


@dataclass(frozen=True, slots=True)
class SettlementDone:
    reply_to: ReplyTo
    token: uuid.UUID
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class LockLost:
    reply_to: ReplyTo
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class LockRenewed:
    reply_to: ReplyTo
    token: uuid.UUID
    locked_until: int


@dataclass(frozen=True, slots=True)
class ScheduledCancelled:
    reply_to: ReplyTo
    sequence_numbers: tuple[int, ...]  # every number asked, each once: all were scheduled and are now gone


@dataclass(frozen=True, slots=True)
class ServerBusy:
    """The store is unavailable or the batch failed: nothing of this request happened."""

    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class SettingsUpdated:
    """An :class:`UpdateSettings` is in force; ``dropped`` are the lock tokens it ended (their release
    committed, or, if its batch failed or the store was down, unusable until they lapse at their time)."""

    reply_to: ReplyTo
    dropped: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class IdleExpired:
    """AutoDeleteOnIdle came: the caller deletes the entity."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The request is not valid here (InvalidOperation): nothing of it happened."""

    reply_to: ReplyTo
    reason: str


@dataclass(frozen=True, slots=True)
class SessionAccepted:
    """``consumer`` holds ``session_id`` until ``locked_until`` (the lock is durable)."""

    reply_to: ReplyTo
    consumer: Consumer
    session_id: str
    locked_until: int


@dataclass(frozen=True, slots=True)
class SessionCannotBeLocked:
    """The named session is locked by another receiver (com.microsoft:session-cannot-be-locked)."""

    reply_to: ReplyTo
    session_id: str


@dataclass(frozen=True, slots=True)
class NoSessionAvailable:
    """No session with a ready message came before ``wait_until`` (com.microsoft:timeout)."""

    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class SessionLockLost:
    """A request needed a session lock that is not held (com.microsoft:session-lock-lost); ``token``
    names the message of a refused settlement."""

    reply_to: ReplyTo
    session_id: str
    token: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class SessionLost:
    """``consumer`` lost its session (the lock lapsed or the store refused a renewal): the caller
    detaches it with com.microsoft:session-lock-lost."""

    consumer: Consumer
    session_id: str


@dataclass(frozen=True, slots=True)
class SessionRenewed:
    reply_to: ReplyTo
    session_id: str
    locked_until: int


@dataclass(frozen=True, slots=True)
class SessionState:
    reply_to: ReplyTo
    session_id: str
    state: bytes | None


@dataclass(frozen=True, slots=True)
class SessionStateSet:
    """The new state is durable."""

    reply_to: ReplyTo
    session_id: str


@dataclass(frozen=True, slots=True)
class DeferredMessage:
    """One message of a :class:`DeferredReceived`: PeekLock gives its lock (``lock_token``,
    ``locked_until``), ReceiveAndDelete None for both (it is deleted already)."""

    message: MessageRecord
    lock_token: uuid.UUID | None
    locked_until: int | None


@dataclass(frozen=True, slots=True)
class DeferredReceived:
    """The answer to :class:`ReceiveDeferred`, in the order asked (each number once): the locks are
    durable (PeekLock), or the messages are deleted (ReceiveAndDelete)."""

    reply_to: ReplyTo
    messages: tuple[DeferredMessage, ...]


@dataclass(frozen=True, slots=True)
class MessageNotFound:
    """``sequence_numbers`` name no deferred message that is free to take (gone, not deferred, or
    locked): nothing of the :class:`ReceiveDeferred` happened (com.microsoft:message-not-found). Also
    the answer to a :class:`CancelScheduled` naming a number that is not a scheduled message free to
    take (below 1, as a scheduled ping's 0; unknown, gone, activated, deferred): nothing of it happened."""

    reply_to: ReplyTo
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CompletedThrough:
    """The :class:`CompleteThrough` is durable: ``count`` messages went (all states together)."""

    reply_to: ReplyTo
    count: int


@dataclass(frozen=True, slots=True)
class MovedOut:
    """The :class:`MoveOut` is durable: per item, in order, the message's number in the target (its
    old number when deleted), or None when it was not taken (gone, locked, or named twice)."""

    reply_to: ReplyTo
    sequence_numbers: tuple[int | None, ...]


Reply = (Delivered | SendAccepted | SettlementDone | LockLost | LockRenewed | ScheduledCancelled | ServerBusy
         | IdleExpired | Refused | SessionAccepted | SessionCannotBeLocked | NoSessionAvailable | SessionLockLost
         | SessionLost | SessionRenewed | SessionState | SessionStateSet
         | DeferredReceived | MessageNotFound | CompletedThrough | Published | MovedOut | SettingsUpdated)


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """Read ``count`` ACTIVE rows numbered from ``from_sequence_number`` on and answer with WindowRead."""

    from_sequence_number: int
    count: int


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """Read the partition's counters (``store.counts(ref)``) and answer with :class:`CountsRead`. Asked
    for after a :class:`~sodalite.model.store_ops.Purge` committed: its result is one total, so the
    counts per state are read back (the read runs after every batch decided before it, and its
    answer comes before any decided after it, so it replaces the view's counts exactly)."""


@dataclass(frozen=True, slots=True)
class Decision:
    view: View
    store_ops: tuple[StoreOp, ...]
    batch_id: int | None  # names store_ops in StoreResults / StoreFailed; None when there are none
    read: ReadWindow | ReadCounts | None  # at most one read
    replies: tuple[Reply, ...]
    next_due: int | None


# ---- the view ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Counts:
    """This partition's counts as the store keeps them (active includes locked)."""

    active: int = 0
    scheduled: int = 0
    deferred: int = 0


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
class _Credit:
    count: int
    mode: ReceiveMode
    selects: Callable[[MessageRecord], bool] | None = None


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
class _Waiter:
    consumer: Consumer
    reply_to: ReplyTo
    wait_until: int | None


@dataclass(frozen=True, slots=True)
class _DeliverTo:
    """A settle entry's ``reply_to`` for a ReceiveAndDelete of a session's message: deliver when it applies."""

    consumer: Consumer
    session_id: str


# Per-op context kept with a batch to read its results (one per op, same order).
@dataclass(frozen=True, slots=True)
class _AppendCtx:
    reply_to: ReplyTo
    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class _PublishCtx:
    """One op of a Publish: an ``AppendTo`` (``target``), or the history op of a publish that stores
    no copy (``target`` None, ``forget``: the ids to drop from the detector if it fails). The
    publish's ops share ``stored``; the ``first`` answers a failure, the ``last`` the success."""

    reply_to: ReplyTo
    target: Hashable | None
    records: tuple[MessageRecord, ...]
    stored: list[tuple[Hashable, tuple[MessageRecord, ...]]]
    first: bool
    last: bool
    forget: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _ClaimCtx:
    consumer: Consumer
    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class _QuietCtx:
    """An op whose result needs nothing (a ReceiveAndDelete claim: its settle reads it)."""


@dataclass(frozen=True, slots=True)
class _TakeCtx:
    """The COMPLETE that follows per-message claims: ReceiveAndDelete deliveries."""

    consumer: Consumer
    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class _CancelCtx:
    """A cancel's one ``CancelScheduled`` op: the numbers asked, each once."""

    reply_to: ReplyTo
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _SettleCtx:
    entries: tuple[tuple[ReplyTo, uuid.UUID, Outcome, Outcome], ...]  # reply_to, token, asked, applied
    transaction: ReplyTo | None = None  # a Transact's all-or-none Settle: who hears a fenced failure


@dataclass(frozen=True, slots=True)
class _RenewCtx:
    entries: tuple[tuple[ReplyTo, uuid.UUID, int], ...]


@dataclass(frozen=True, slots=True)
class _MoveCtx:
    records: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class _ActivateCtx:
    limit: int
    at: int  # the op's now: what was due by then is all it activates


@dataclass(frozen=True, slots=True)
class _DedupCtx:
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _AcceptCtx:
    waiter: _Waiter
    session_id: str | None  # None: next available
    token: uuid.UUID
    locked_until: int


@dataclass(frozen=True, slots=True)
class _SessionClaimCtx:
    consumer: Consumer
    session_id: str
    session_token: uuid.UUID
    count: int
    mode: ReceiveMode


@dataclass(frozen=True, slots=True)
class _SessionRenewCtx:
    session_id: str
    token: uuid.UUID
    locked_until: int
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class _StateCtx:
    session_id: str
    state: bytes | None
    updated_at: int
    reply_to: ReplyTo


@dataclass(frozen=True, slots=True)
class _DeferredClaimCtx:
    reply_to: ReplyTo
    numbers: tuple[int, ...]  # as asked, each once
    mode: ReceiveMode
    consumer: Consumer
    session_id: str | None
    session_token: uuid.UUID | None  # the session lock the locks ride on


@dataclass(frozen=True, slots=True)
class _DeferredTakeCtx:
    """The COMPLETE of a ReceiveAndDelete by number, after its claim took every number asked."""

    reply_to: ReplyTo
    tokens: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class _PurgeCtx:
    reply_to: ReplyTo
    through: int
    at: int  # the op's now: a row locked by then stays, others go


@dataclass(frozen=True, slots=True)
class _MoveOutCtx:
    reply_to: ReplyTo
    asked: tuple[int, ...]  # every item's number, in order
    sent: tuple[int, ...]  # the numbers in the MoveMessages (each once, none held here)


@dataclass(frozen=True, slots=True)
class _RestoreCtx:
    records: tuple[MessageRecord, ...]


_Ctx = (_AppendCtx | _ClaimCtx | _QuietCtx | _TakeCtx | _CancelCtx | _SettleCtx | _RenewCtx | _MoveCtx | _ActivateCtx
        | _DedupCtx | _AcceptCtx | _SessionClaimCtx | _SessionRenewCtx | _StateCtx
        | _DeferredClaimCtx | _DeferredTakeCtx | _PurgeCtx | _PublishCtx | _MoveOutCtx | _RestoreCtx)


@dataclass(slots=True)
class View:
    """What one partition knows. Build it with :func:`new_view`."""

    settings: CoreSettings
    counts: Counts
    token_seed: int
    last_activity: int
    dedup: DuplicateDetector | None
    available: bool = True
    window: dict[int, MessageRecord] = field(default_factory=dict)
    window_order: list[int] = field(default_factory=list)  # the window's numbers, ascending
    window_size: int = 0  # bytes
    expiry_heap: list[tuple[int, int]] = field(default_factory=list)  # (expires_at, seq), lazy
    cursor: int = 0
    at_tail: bool = False
    last_appended: int = 0
    landed_beyond: int = 0  # the highest landed number left for a read (past the cursor, not at the tail)
    read_in_flight: int | None = None  # the count asked for
    read_from: int = 0  # the number the read in flight starts at
    rescan_at: int | None = None  # a row skipped as locked by someone: read again from the start then
    locks: dict[uuid.UUID, HeldLock] = field(default_factory=dict)
    locked_seqs: dict[int, uuid.UUID] = field(default_factory=dict)
    lock_heap: list[tuple[int, uuid.UUID]] = field(default_factory=list)  # (locked_until, token), lazy
    claiming: set[int] = field(default_factory=set)
    credit: dict[Consumer, _Credit] = field(default_factory=dict)
    scheduled_heap: list[tuple[int, int]] = field(default_factory=list)  # (activation time, seq)
    scheduled_untracked: bool = False
    scheduled_poll_at: int | None = None
    activate_in_flight: bool = False
    activate_again: bool = False
    store_due: int | None = None  # the earliest time a DueInStore named, not acted on yet
    store_due_done: int | None = None  # the last such time acted on
    idle_reported: bool = False
    token_counter: int = 0
    next_batch_id: int = 1
    pending: dict[int, tuple[tuple[_Ctx, ...], tuple[Reply, ...]]] = field(default_factory=dict)
    sessions: dict[str, HeldSession] = field(default_factory=dict)  # the session locks held here
    consumer_sessions: dict[Consumer, str] = field(default_factory=dict)
    session_heap: list[tuple[int, str]] = field(default_factory=list)  # (locked_until, session id), lazy
    session_states: dict[str, tuple[bytes, int]] = field(default_factory=dict)  # id -> (state, updated at)
    waiters: list[_Waiter] = field(default_factory=list)  # next-available accepts not yet answered
    accept_in_flight: bool = False  # a next-available ClaimSession is in a batch not yet answered
    sessions_maybe_ready: bool = True  # something became ready since a next-available claim found nothing
    # When session locks this core gave up lapse in the store (a release not sent because the store was
    # down, or one that failed): those sessions may be free then, though nothing else says so.
    session_lapses: list[int] = field(default_factory=list)  # heap of locked-until times
    # Tokens of messages whose session lock was lost (the newest _LOST_TOKENS): a settlement names the session.
    lost_tokens: dict[uuid.UUID, str] = field(default_factory=dict)
    # Counts after a Purge: the highest batch id of a committed Purge whose counts were not read back
    # yet (0: the counts are the store's), and the last batch id the ReadCounts in flight comes after.
    counts_stale_after: int = 0
    counts_read_after: int | None = None
    counts_refresh: bool = False  # RefreshCounts asked for a ReadCounts not yet asked for
    history_pruned_at: int = 0  # on a shared store: when the store's history was last pruned
    # UpdateSettings answered when the batch that drops its locks is done: batch id -> (reply_to, tokens)
    updates_waiting: dict[int, tuple[ReplyTo, tuple[uuid.UUID, ...]]] = field(default_factory=dict)
    # ReceiveAndDelete messages never written whose Restore failed (the store was down): tried again
    restore_again: list[MessageRecord] = field(default_factory=list)


_LOST_TOKENS = 1024


def new_view(settings: CoreSettings, now: int, *, token_seed: int, active: int = 0, scheduled: int = 0,
             deferred: int = 0, last_sequence_number: int = 0,
             duplicate_history: tuple[tuple[str, int], ...] = (),
             session_states: tuple[tuple[str, bytes, int], ...] = ()) -> View:
    """A partition as it starts: counters and metadata from the store, no messages."""
    dedup = None if settings.duplicate_window is None else DuplicateDetector(settings.duplicate_window,
                                                                             duplicate_history)
    view = View(settings, Counts(active, scheduled, deferred), token_seed & ((1 << 64) - 1), now, dedup)
    view.last_appended = last_sequence_number
    view.history_pruned_at = now
    view.session_states = {sid: (state, at) for sid, state, at in session_states if state}  # empty: cleared
    if active == 0:  # nothing ready: the window is complete and at the end
        view.at_tail, view.cursor = True, last_sequence_number
    if scheduled:  # their times are in the store, not here: poll until they are gone
        view.scheduled_untracked, view.scheduled_poll_at = True, now
    return view


# ---- decide -----------------------------------------------------------------------------------------


class _Turn:
    """What one call of decide collects."""

    __slots__ = (
        "claims",
        "ctxs",
        "dead_letter_moves",
        "drop_moves",
        "now",
        "ops",
        "renews",
        "replies",
        "settles",
        "tail_ctxs",
        "tail_ops",
        "update",
        "view",
    )

    def __init__(self, view: View, now: int) -> None:
        self.view, self.now = view, now
        self.ops: list[StoreOp] = []
        self.ctxs: list[_Ctx] = []
        self.replies: list[Reply] = []
        self.settles: list[tuple[SettleItem, tuple[ReplyTo, uuid.UUID, Outcome, Outcome]]] = []
        self.renews: list[tuple[tuple[int, uuid.UUID], tuple[ReplyTo, uuid.UUID, int]]] = []
        self.dead_letter_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.drop_moves: list[tuple[MoveItem, MessageRecord]] = []
        self.claims: list[tuple[StoreOp, _Ctx]] = []
        self.tail_ops: list[StoreOp] = []
        self.tail_ctxs: list[_Ctx] = []
        self.update: tuple[ReplyTo, tuple[uuid.UUID, ...]] | None = None  # an UpdateSettings to answer

    def op(self, op: StoreOp, ctx: _Ctx) -> None:
        self.ops.append(op)
        self.ctxs.append(ctx)


def decide(view: View, command: Command, now: int) -> Decision:
    """Decide what ``command`` at ``now`` does to the partition (see the module docstring)."""
    turn = _Turn(view, now)
    match command:
        case CountsRead():
            _on_counts_read(turn, command)
        case RefreshCounts():
            view.counts_refresh = True
        case StoreResults():
            _on_results(turn, command)
            _answer_update(turn, command.batch_id)
        case StoreFailed():
            _on_failed(turn, command)
            _answer_update(turn, command.batch_id)
        case WindowRead():
            _on_window_read(turn, command)
        case StoreAvailable():
            view.available = True
        case StoreUnavailable():
            view.available = False
        case Arrived():
            # Their numbers may lie below this core's cursor (another node appended while this one's
            # own appends moved the cursor on): read again from the start, as a rescan does. Rows
            # already in the window, locked here or being claimed are not taken twice (_admit), and
            # claims are fenced by the store.
            view.counts.active += max(command.count, 0)
            view.cursor = 0
            view.at_tail = False
            view.sessions_maybe_ready = True
        case Landed():
            _on_landed(turn, command.records)
        case DueInStore():
            if command.at != view.store_due_done or command.at > now:
                view.store_due = command.at if view.store_due is None else min(view.store_due, command.at)
        case Tick():
            pass
        case Unsent():
            if command.records:  # as they were before the claim: a transfer never written was no delivery
                records = tuple(r.with_delivery_count(max(r.delivery_count - 1, 0)) for r in command.records)
                turn.op(Restore(records), _RestoreCtx(records))
        case _:
            _touch(view, now)
            match command:
                case Send() | Schedule():
                    _on_send(turn, command.drafts, command.reply_to)
                case Publish():
                    _on_publish(turn, command)
                case CancelScheduled():
                    _on_cancel(turn, command)
                case Receive():
                    credit = view.credit.get(command.consumer)
                    if credit is None:
                        view.credit[command.consumer] = _Credit(max(command.count, 0), command.mode, command.selects)
                    else:
                        credit.count += max(command.count, 0)
                        credit.mode = command.mode
                        credit.selects = command.selects
                    held = _session_of(view, command.consumer)
                    if held is not None and not held.renewing and held.locked_until > now:
                        _on_renew_session(turn, held.session_id, _NO_REPLY)  # asking (any flow) extends the session
                case CloseConsumer():
                    view.credit.pop(command.consumer, None)
                    view.waiters = [w for w in view.waiters if w.consumer != command.consumer]
                    sid = view.consumer_sessions.get(command.consumer)
                    if sid is not None:
                        _release_session(turn, view.sessions[sid])
                case AcceptSession():
                    _on_accept(turn, command)
                case RenewSessionLock():
                    _on_renew_session(turn, command.session_id, command.reply_to)
                case GetSessionState():
                    if _held_session(turn, command.session_id, command.reply_to) is not None:
                        entry = view.session_states.get(command.session_id)
                        turn.replies.append(SessionState(command.reply_to, command.session_id,
                                                         entry[0] if entry is not None and entry[0] else None))
                case SetSessionState():
                    _on_set_state(turn, command)
                case Settle():
                    _on_settle(turn, command)
                case RenewLock():
                    _on_renew(turn, command)
                case ReceiveDeferred():
                    _on_receive_deferred(turn, command)
                case CompleteThrough():
                    _on_complete_through(turn, command)
                case MoveOut():
                    _on_move_out(turn, command)
                case Transact():
                    _on_transact(turn, command)
                case UpdateSettings():
                    _on_update_settings(turn, command)
                case Touch():
                    pass
    if view.restore_again and view.available:
        records, view.restore_again = tuple(view.restore_again), []
        turn.op(Restore(records), _RestoreCtx(records))
    _due(turn)
    _pump(turn)
    if view.settings.requires_session:
        _grant_waiters(turn)
    return _finish(turn)


def _on_update_settings(turn: _Turn, command: UpdateSettings) -> None:
    """New settings from now on; with ``drop_locks`` every lock granted here ends (see UpdateSettings)."""
    view, now = turn.view, turn.now
    view.settings = command.settings
    window = command.settings.duplicate_window
    if view.dedup is not None and window is not None and window != view.dedup.window_ms:
        view.dedup = DuplicateDetector(window, view.dedup.history())
    dropped: list[uuid.UUID] = []
    if command.drop_locks:
        for held in list(view.sessions.values()):
            tokens = [lock.token for lock in _session_locks(view, held)]
            _release_session(turn, held)  # its messages abandoned, the session lock released
            turn.replies.append(SessionLost(held.consumer, held.session_id))
            for token in tokens:  # a settlement with one of them is SessionLockLost, as after a lapse
                _note_lost(view, token, held.session_id)
                view.locks[token].dropped = True
            dropped.extend(tokens)
        for lock in list(view.locks.values()):
            if lock.settling or lock.session_token is not None:
                continue  # a settlement already decided applies; a session's went with its session
            dropped.append(lock.token)
            if lock.locked_until <= now:
                lock.dropped = True  # lapsed already: _due ends it (once the store is up)
                continue
            if view.available:
                _settle_lock(turn, lock, Outcome.ABANDON, _DROPPED)  # ends as a lapse would
            else:
                lock.dropped = True  # the store cannot hear of it: unusable here, it lapses at its time
    turn.update = (command.reply_to, tuple(dropped))


def _answer_update(turn: _Turn, batch_id: int) -> None:
    update = turn.view.updates_waiting.pop(batch_id, None)
    if update is not None:
        turn.replies.append(SettingsUpdated(*update))


def _note_lost(view: View, token: uuid.UUID, session_id: str) -> None:
    view.lost_tokens[token] = session_id
    if len(view.lost_tokens) > _LOST_TOKENS:
        del view.lost_tokens[next(iter(view.lost_tokens))]


def _touch(view: View, now: int) -> None:
    view.last_activity = now
    view.idle_reported = False


def _next_token(view: View) -> uuid.UUID:
    view.token_counter += 1
    return uuid.UUID(int=(view.token_seed << 64) | (view.token_counter & ((1 << 64) - 1)))


def _expired(record: MessageRecord, now: int) -> bool:
    return record.expires_at is not None and record.expires_at <= now


# ---- sends and schedules ------------------------------------------------------------------------------


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


def _on_send(turn: _Turn, drafts: tuple[MessageDraft, ...], reply_to: ReplyTo) -> None:
    view, now = turn.view, turn.now
    if not view.available:
        turn.replies.append(ServerBusy(reply_to))
        return
    if view.settings.requires_session and any(d.session_id is None and not d.ping for d in drafts):
        turn.replies.append(Refused(reply_to, "the entity requires sessions: every message needs a SessionId"))
        return
    default_ttl = view.settings.default_ttl
    records: list[MessageRecord] = []
    remembered: list[str] = []
    for d in drafts:
        if d.ping:
            continue
        if view.dedup is not None and d.message_id is not None:
            if view.dedup.is_duplicate(d.message_id, now):
                continue
            view.dedup.remember(d.message_id, now)
            remembered.append(d.message_id)
        records.append(record_for(d, now, default_ttl))
    if not records:  # only duplicates and pings: nothing to make durable
        turn.replies.append(SendAccepted(reply_to, ()))
        return
    shared = view.settings.shared_store
    claim = _claim_ids(turn, remembered) if shared else None
    gate = None if claim is None else Gate(claim, tuple(r.message_id for r in records))
    turn.op(Append(tuple(records), gate), _AppendCtx(reply_to, tuple(records)))
    if remembered and not shared:
        turn.op(RememberMessageIds(tuple((mid, now) for mid in remembered)), _DedupCtx(tuple(remembered)))


def _claim_ids(turn: _Turn, remembered: list[str], ctx: _Ctx | None = None) -> uuid.UUID | None:
    """The store's duplicate check of the ids ``remembered`` (in the batch before the appends it
    gates): the claim token the appends carry, None when there is nothing to check."""
    view = turn.view
    if not remembered or view.dedup is None:
        return None
    claim = _next_token(view)
    turn.op(ClaimMessageIds(turn.now, view.dedup.window_ms, claim, tuple(remembered)),
            _DedupCtx(tuple(remembered)) if ctx is None else ctx)
    return claim


def _on_cancel(turn: _Turn, command: CancelScheduled) -> None:
    view, now = turn.view, turn.now
    unnumbered = tuple(n for n in dict.fromkeys(command.sequence_numbers) if n < 1)
    if unnumbered:  # 0 (what a scheduled ping was given) names no message: refused, nothing cancelled
        turn.replies.append(MessageNotFound(command.reply_to, unnumbered))
        return
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    numbers = tuple(dict.fromkeys(command.sequence_numbers))
    if not numbers:
        turn.replies.append(ScheduledCancelled(command.reply_to, ()))
        return
    # All or none, decided by the store in one operation: a number that is not a SCHEDULED row free
    # to take (unknown, activated, active, deferred) cancels nothing (see _cancelled).
    turn.op(CancelScheduledOp(now, numbers), _CancelCtx(command.reply_to, numbers))


def _on_publish(turn: _Turn, command: Publish) -> None:
    view, now = turn.view, turn.now
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    by_target: dict[Hashable, list[MessageRecord]] = {}
    checked_under: dict[Hashable, list[str | None]] = {}  # per copy, the id its message was checked under
    numbered_by: dict[Hashable, Hashable | None] = {}  # per target, the partition numbering it
    remembered: list[str] = []
    for entry in command.entries:
        mid = entry.message_id
        if command.complete is None and view.dedup is not None and mid is not None:
            if view.dedup.is_duplicate(mid, now):
                continue
            view.dedup.remember(mid, now)
            remembered.append(mid)
        for copy in entry.copies:
            by_target.setdefault(copy.target, []).append(copy.record)
            numbered_by[copy.target] = copy.numbered_by
            checked_under.setdefault(copy.target, []).append(mid if command.complete is None else None)
    if command.complete is not None:
        lock = _usable_lock(turn, command.complete, command.reply_to, renewal=False)
        if lock is None:
            return
        # No copies: the settlement's own echo answers (after its commit).
        _settle_lock(turn, lock, Outcome.COMPLETE, _NO_REPLY if by_target else command.reply_to)
        if not by_target:
            return
    stored: list[tuple[Hashable, tuple[MessageRecord, ...]]] = []
    parts = list(by_target.items())
    shared = view.settings.shared_store
    # Nothing to store but the history: the history's op answers.
    answer = None if parts else _PublishCtx(command.reply_to, None, (), stored, True, True, tuple(remembered))
    claim = _claim_ids(turn, remembered, answer) if shared else None
    for i, (target, records) in enumerate(parts):
        gate = None if claim is None else Gate(claim, tuple(checked_under[target]))
        turn.op(AppendTo(target, tuple(records), gate, numbered_by[target]),
                _PublishCtx(command.reply_to, target, tuple(records), stored, i == 0, i == len(parts) - 1))
    if remembered and not shared:
        entries = tuple((mid, now) for mid in remembered)
        turn.op(RememberMessageIds(entries), _DedupCtx(tuple(remembered)) if answer is None else answer)
    elif not remembered and not parts:
        turn.replies.append(Published(command.reply_to, ()))


def _track_scheduled(turn: _Turn, record: MessageRecord, seq: int) -> None:
    """A scheduled message stored here: counted, and its activation time kept (up to
    ``scheduled_tracked`` of them; beyond, the core polls the store for due ones)."""
    view = turn.view
    view.counts.scheduled += 1
    if len(view.scheduled_heap) < view.settings.scheduled_tracked:
        heapq.heappush(view.scheduled_heap, (record.scheduled_enqueue_time or 0, seq))
    else:
        view.scheduled_untracked = True
        if view.scheduled_poll_at is None:
            view.scheduled_poll_at = turn.now


def _on_landed(turn: _Turn, records: tuple[MessageRecord, ...]) -> None:
    """Another core's committed rows in this partition: counted, and where the window is complete
    (at the tail, or at or below the cursor) taken in; past the cursor a read finds them."""
    view = turn.view
    for record in records:
        seq = record.sequence_number
        if record.state is MessageState.SCHEDULED:
            _track_scheduled(turn, record, seq)
            continue
        if record.state is MessageState.DEFERRED:
            view.counts.deferred += 1
            continue
        view.counts.active += 1
        _session_ready(view, record.session_id)
        if view.at_tail or seq <= view.cursor:
            if view.at_tail and seq > view.cursor:
                view.cursor = seq
            _admit(turn, record)
        else:
            view.landed_beyond = max(view.landed_beyond, seq)


# ---- settlement and renewal ---------------------------------------------------------------------------


def _usable_lock(turn: _Turn, token: uuid.UUID, reply_to: ReplyTo, *, renewal: bool) -> HeldLock | None:
    """The lock ``token`` names if a settlement or renewal may use it now, else a reply says why not.

    A settlement may follow a renewal still in flight (it was sent while the lock held, and the
    batches apply in order); nothing may follow a settlement."""
    lock = turn.view.locks.get(token)
    lost = turn.view.lost_tokens.get(token)
    if lock is None and lost is not None:
        turn.replies.append(SessionLockLost(reply_to, lost, token))
        return None
    if lock is not None and lock.session_token is not None:
        sid = lock.record.session_id or ""
        held = turn.view.sessions.get(sid)
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
    if not turn.view.available:
        turn.replies.append(ServerBusy(reply_to))
        return None
    return lock


def _on_settle(turn: _Turn, command: Settle) -> None:
    lock = _usable_lock(turn, command.token, command.reply_to, renewal=False)
    if lock is None:
        return
    _settle_lock(turn, lock, command.outcome, command.reply_to, command.properties_to_modify, command.reason,
                 command.description)


def _settle_lock(turn: _Turn, lock: HeldLock, asked: Outcome, reply_to: ReplyTo,
                 properties_to_modify: tuple[tuple[str, object], ...] = (), reason: str | None = None,
                 description: str | None = None) -> None:
    view, now = turn.view, turn.now
    record = lock.record
    applied = asked
    edit: AnnotationEdit | None = None
    if properties_to_modify or asked is Outcome.DEAD_LETTER:
        edit = AnnotationEdit(record.annotations, record.annotation_count, properties_to_modify,
                              reason if asked is Outcome.DEAD_LETTER else None,
                              description if asked is Outcome.DEAD_LETTER else None, base_tail=record.tail)
    if asked in (Outcome.ABANDON, Outcome.RELEASE) and lock.state is MessageState.ACTIVE:
        # The lock ends here: an expired message leaves now, and one whose deliveries are used up too.
        if _expired(record, now):
            if view.settings.dead_letter_on_expiration:
                # properties to modify stay, as v1 stores them before the abandon finds it expired
                applied, edit = Outcome.DEAD_LETTER, _service_edit(record, TTL_EXPIRED, "the message expired",
                                                                   properties_to_modify)
            else:
                applied, edit = Outcome.COMPLETE, None
        elif asked is Outcome.ABANDON and record.delivery_count >= view.settings.max_delivery_count:
            applied = Outcome.DEAD_LETTER
            edit = _service_edit(record, MAX_DELIVERY_COUNT_EXCEEDED,
                                 f"delivered {record.delivery_count} times", properties_to_modify)
        elif asked is Outcome.ABANDON and not view.settings.abandon_counts:
            applied = Outcome.RELEASE
    lock.settling = True
    # A client's dead-lettering ends the delivery without counting it (as a complete or a defer); one
    # decided here for an abandon (deliveries used up, or expired) keeps the abandon's count.
    item = (_dead_letter_settle(view, now, record, lock.token, edit, give_back=asked is Outcome.DEAD_LETTER)
            if applied is Outcome.DEAD_LETTER else SettleItem(record.sequence_number, lock.token, applied, edit))
    turn.settles.append((item, (reply_to, lock.token, asked, applied)))


def _forwarded(view: View, now: int, record: MessageRecord,
               edit: AnnotationEdit | None) -> tuple[AnnotationEdit | None, int | None] | None:
    """A dead letter's edit and expiry where ForwardDeadLetteredMessagesTo sends it (None: no
    forwarding, it goes to the dead-letter queue): it names its source, and expires by the
    time-to-live that applies in the target (the message's, capped by the target's default) counted
    from now; at the hop limit it takes that reason instead and never expires."""
    forward = view.settings.forward_dead_letters
    if forward is None:
        return None
    base = edit if edit is not None else AnnotationEdit(record.annotations, record.annotation_count,
                                                        base_tail=record.tail)
    if forward.hop_limit is not None:
        return replace(base, dead_letter_reason=MAX_TRANSFER_HOP_COUNT_EXCEEDED,
                       dead_letter_description=forward.hop_limit, dead_letter_source=forward.source), None
    return replace(base, dead_letter_source=forward.source), forwarded_expiry(forward, record.time_to_live, now)


def forwarded_expiry(forward: DeadLetterForward, time_to_live: int | None, now: int) -> int | None:
    """When a dead letter forwarded ``now`` expires in the target: the message's time-to-live capped
    by the target's default (None: never; at the hop limit, a transfer dead-letter queue: never;
    waiting for a relay: never, until the relay stores it in the target)."""
    if forward.hop_limit is not None or forward.relayed:
        return None
    cap = forward.default_ttl
    effective = cap if time_to_live is None else (time_to_live if cap is None else min(time_to_live, cap))
    return None if effective is None else min(now + effective, LAST_INSTANT_MS)


def _dead_letter_settle(view: View, now: int, record: MessageRecord, token: uuid.UUID,
                        edit: AnnotationEdit | None, *, give_back: bool) -> SettleItem:
    """A locked message's dead-lettering: to the dead-letter queue, or forwarded (:func:`_forwarded`)
    in the same fenced settle, arriving with its delivery count reset and enqueued now. ``give_back``:
    the delivery the claim counted does not count (the copy keeps the count from before it)."""
    forwarded = _forwarded(view, now, record, edit)
    if forwarded is None:
        return SettleItem(record.sequence_number, token, Outcome.DEAD_LETTER, edit, keep_sequence_number=True,
                          give_back_delivery=give_back)
    forward = view.settings.forward_dead_letters
    assert forward is not None
    return SettleItem(record.sequence_number, token, Outcome.DEAD_LETTER, forwarded[0], forward.target,
                      reset_delivery_count=True, enqueued_time=now, expires_at=forwarded[1])


def _dead_letter_move(view: View, now: int, record: MessageRecord, edit: AnnotationEdit) -> MoveItem:
    """An unlocked message's dead-lettering (expiry, MaxDeliveryCount): a ``MoveMessages`` item to the
    dead-letter queue, or to where ForwardDeadLetteredMessagesTo sends it (``_finish`` picks the target)."""
    forwarded = _forwarded(view, now, record, edit)
    if forwarded is None:
        return MoveItem(record.sequence_number, edit)
    return MoveItem(record.sequence_number, forwarded[0], reset_delivery_count=True, enqueued_time=now,
                    expires_at=forwarded[1])


def _service_edit(record: MessageRecord, reason: str, description: str,
                  properties: tuple[tuple[str, object], ...] = ()) -> AnnotationEdit:
    return AnnotationEdit(record.annotations, record.annotation_count, properties, reason, description,
                          base_tail=record.tail)


def _on_renew(turn: _Turn, command: RenewLock) -> None:
    lock = _usable_lock(turn, command.token, command.reply_to, renewal=True)
    if lock is None:
        return
    until = turn.now + turn.view.settings.lock_duration
    lock.renewing = True
    turn.renews.append(((lock.record.sequence_number, lock.token), (command.reply_to, lock.token, until)))


# ---- the window ---------------------------------------------------------------------------------------


def _admit(turn: _Turn, record: MessageRecord, *, evict: bool = True) -> None:
    """A ready message this core knows of: it leaves if expired or out of deliveries, else joins the
    window; over the cap (``evict``), the highest numbers leave the window and are read again later."""
    view, now = turn.view, turn.now
    seq = record.sequence_number
    if seq in view.window or seq in view.locked_seqs or seq in view.claiming:
        return
    if _expired(record, now):
        _leave_expired(turn, record)
        return
    if record.delivery_count >= view.settings.max_delivery_count:
        turn.dead_letter_moves.append((_dead_letter_move(view, now, record, _service_edit(
            record, MAX_DELIVERY_COUNT_EXCEEDED, f"delivered {record.delivery_count} times")), record))
        return
    if record.session_id is not None and view.settings.requires_session:
        view.sessions_maybe_ready = True
        held = view.sessions.get(record.session_id)
        if held is not None:
            held.more = True
    view.window[seq] = record
    insort(view.window_order, seq)
    view.window_size += record.size
    if record.expires_at is not None:
        heapq.heappush(view.expiry_heap, (record.expires_at, seq))
    while evict and view.window_size > view.settings.window_bytes and len(view.window_order) > 1:
        evicted = view.window_order.pop()
        view.window_size -= view.window.pop(evicted).size
        view.cursor = min(view.cursor, evicted - 1)
        view.at_tail = False


def _leave_expired(turn: _Turn, record: MessageRecord) -> None:
    if turn.view.settings.dead_letter_on_expiration:
        turn.dead_letter_moves.append((_dead_letter_move(turn.view, turn.now, record, _service_edit(
            record, TTL_EXPIRED, "the message expired")), record))
    else:
        turn.drop_moves.append((MoveItem(record.sequence_number), record))


def _take_selected(turn: _Turn, count: int, selects: Callable[[MessageRecord], bool]) -> list[MessageRecord]:
    """Up to ``count`` window messages a selector selects, in order; the others stay for other consumers."""
    view, now = turn.view, turn.now
    taken: list[MessageRecord] = []
    kept: list[int] = []
    order = view.window_order
    for index, seq in enumerate(order):
        if len(taken) >= count:
            kept.extend(order[index:])
            break
        record = view.window[seq]
        if _expired(record, now) or record.delivery_count >= view.settings.max_delivery_count:
            del view.window[seq]
            view.window_size -= record.size
            _admit(turn, record)  # not back into the window: it leaves
        elif selects(record):
            del view.window[seq]
            view.window_size -= record.size
            taken.append(record)
        else:
            kept.append(seq)
    view.window_order = kept
    return taken


def _take_from_window(view: View) -> MessageRecord:
    seq = view.window_order.pop(0)
    record = view.window.pop(seq)
    view.window_size -= record.size
    return record


def _forget(view: View, records: tuple[MessageRecord, ...]) -> None:
    """These rows are unchanged in the store but no longer known here: the next read finds them."""
    for record in records:
        if record.state is MessageState.ACTIVE:
            view.cursor = min(view.cursor, record.sequence_number - 1)
            view.at_tail = False


def _on_window_read(turn: _Turn, command: WindowRead) -> None:
    view, now = turn.view, turn.now
    asked = view.read_in_flight
    view.read_in_flight = None
    if command.rows is None or asked is None:
        return
    if view.cursor < view.read_from - 1:
        # While the read was in flight the cursor moved below where it started (a failed batch gave
        # rows back, the window evicted, a rescan began): the read does not cover the rows between,
        # so neither its rows nor its shortness say anything about them. Drop it; the next read
        # starts at the cursor.
        return
    for row in command.rows:
        record = row.record
        seq = record.sequence_number
        if seq <= view.cursor:
            continue  # the window already knows this far
        if view.window_size >= view.settings.window_bytes:
            return  # full: the rest is read again later
        view.cursor = seq
        if record.state is not MessageState.ACTIVE:
            continue
        if row.locked_at(now) and seq not in view.locked_seqs:
            until = row.locked_until if row.locked_until is not None else now
            view.rescan_at = until if view.rescan_at is None else min(view.rescan_at, until)
            continue
        _admit(turn, record, evict=False)  # a read never evicts (it would read the same rows again)
    if len(command.rows) < asked:
        # A short read: nothing ready after cursor, and every append whose result came before this
        # read was committed before it (the caller keeps order), so the window reaches the end.
        view.at_tail = True
        view.cursor = max(view.cursor, view.last_appended)
        if view.landed_beyond > view.cursor:
            # Rows another core stored landed past the cursor while this read was in flight; it may
            # have run before their commit: read once more (it starts after they committed).
            view.at_tail = False
        view.landed_beyond = 0


# ---- delivering -----------------------------------------------------------------------------------------


def _pump(turn: _Turn) -> None:
    view, now = turn.view, turn.now
    if not view.available:
        return
    if view.settings.requires_session:
        _pump_sessions(turn)
        return
    lock_duration = view.settings.lock_duration
    for consumer, credit in view.credit.items():
        taken: list[MessageRecord] = []
        if credit.selects is not None:  # a JMS selector: only what it selects, the rest stays
            taken = _take_selected(turn, credit.count, credit.selects)
        else:
            while credit.count > len(taken) and view.window_order:
                record = _take_from_window(view)
                if _expired(record, now) or record.delivery_count >= view.settings.max_delivery_count:
                    _admit(turn, record)  # not back into the window: it leaves
                    continue
                taken.append(record)
        if not taken:
            continue
        credit.count -= len(taken)
        view.claiming.update(r.sequence_number for r in taken)
        if credit.mode is ReceiveMode.PEEK_LOCK:
            tokens = tuple(_next_token(view) for _ in taken)
            turn.claims.append((Claim(now, now + lock_duration, view.settings.owner, tokens,
                                      tuple(r.sequence_number for r in taken)), _ClaimCtx(consumer, tuple(taken))))
        else:
            # One claim per message so each token is known to go with its number; the deletes follow
            # in the same transaction, and the deliveries wait for it (at most once, even after a crash).
            items: list[SettleItem] = []
            for record in taken:
                token = _next_token(view)
                turn.claims.append((Claim(now, now + lock_duration, view.settings.owner, (token,),
                                          (record.sequence_number,)), _QuietCtx()))
                items.append(SettleItem(record.sequence_number, token, Outcome.COMPLETE))
            turn.claims.append((SettleOp(now, tuple(items)), _TakeCtx(consumer, tuple(taken))))


# ---- timers ---------------------------------------------------------------------------------------------


def _due(turn: _Turn) -> None:
    """Everything whose time has come by ``now``: run on every command, so a late Tick changes nothing."""
    view, now = turn.view, turn.now
    settings = view.settings
    idle = settings.auto_delete_on_idle
    if (idle is not None and not view.idle_reported and now >= view.last_activity + idle and not view.credit
            and view.counts.scheduled == 0):
        view.idle_reported = True
        turn.replies.append(IdleExpired())
    _due_sessions(turn)
    lapses = view.session_lapses
    while lapses and lapses[0] <= now:
        heapq.heappop(lapses)
        view.sessions_maybe_ready = True
    if not view.available:
        return
    # Locks that lapsed: the message is ready again (or leaves), its delivery already counted.
    heap = view.lock_heap
    while heap and heap[0][0] <= now:
        until, token = heapq.heappop(heap)
        lock = view.locks.get(token)
        if lock is None or lock.locked_until != until or lock.busy:
            continue  # settled, renewed, or its batch will say (and push it again)
        _lapse(turn, lock)
    # Window messages that expired.
    eheap = view.expiry_heap
    while eheap and eheap[0][0] <= now:
        expires_at, seq = heapq.heappop(eheap)
        record = view.window.get(seq)
        if record is None or record.expires_at != expires_at:
            continue
        view.window_order.remove(seq)
        del view.window[seq]
        view.window_size -= record.size
        _leave_expired(turn, record)
    # A time the store named (DueInStore): activate what is due and read the window again.
    if view.store_due is not None and view.store_due <= now:
        view.store_due_done, view.store_due = view.store_due, None
        view.activate_again = True
        view.cursor, view.at_tail = 0, False
    # Scheduled messages whose time came.
    if not view.activate_in_flight:
        due = view.activate_again or bool(view.scheduled_heap and view.scheduled_heap[0][0] <= now)
        if not due and view.scheduled_untracked and view.scheduled_poll_at is not None:
            due = view.scheduled_poll_at <= now
        if due:
            view.activate_again = False
            view.activate_in_flight = True
            if view.scheduled_untracked:
                view.scheduled_poll_at = now + settings.scheduled_poll
            turn.tail_ops.append(Activate(now, settings.activate_limit))
            turn.tail_ctxs.append(_ActivateCtx(settings.activate_limit, now))
    # Duplicate-detection history past its window. On a shared store every entry past it goes (other
    # nodes' too: a node that stopped prunes none), at least once per window.
    if view.dedup is not None:
        gone = view.dedup.prune(now)
        window = view.dedup.window_ms
        if view.settings.shared_store and (gone or view.history_pruned_at + window <= now):
            view.history_pruned_at = now
            turn.tail_ops.append(PruneMessageIds(now - window))
            turn.tail_ctxs.append(_QuietCtx())
        elif gone and not view.settings.shared_store:
            turn.tail_ops.append(ForgetMessageIds(tuple(gone)))
            turn.tail_ctxs.append(_QuietCtx())
    if view.rescan_at is not None and view.rescan_at <= now:
        view.rescan_at = None
        view.cursor = 0
        view.at_tail = False


def _lapse(turn: _Turn, lock: HeldLock) -> None:
    _drop_lock(turn.view, lock)
    if lock.state is MessageState.ACTIVE:
        _admit(turn, lock.record)


def _drop_lock(view: View, lock: HeldLock) -> None:
    """The lock is no longer held here (lapsed, or its row purged); a session's is remembered as lost."""
    del view.locks[lock.token]
    if lock.session_token is not None and lock.record.session_id is not None:
        view.lost_tokens[lock.token] = lock.record.session_id
        if len(view.lost_tokens) > _LOST_TOKENS:
            del view.lost_tokens[next(iter(view.lost_tokens))]
    view.locked_seqs.pop(lock.record.sequence_number, None)


def _next_due(view: View, now: int) -> int | None:
    candidates: list[int] = []
    settings = view.settings
    idle = settings.auto_delete_on_idle
    if idle is not None and not view.idle_reported and not view.credit and view.counts.scheduled == 0:
        candidates.append(view.last_activity + idle)
    sheap = view.session_heap
    while sheap:
        until, sid = sheap[0]
        held = view.sessions.get(sid)
        if held is None or held.locked_until != until or held.renewing:
            heapq.heappop(sheap)  # a renewing session is pushed again when its batch answers
            continue
        candidates.append(until)
        break
    candidates.extend(w.wait_until for w in view.waiters if w.wait_until is not None)
    if view.waiters and view.session_lapses:
        candidates.append(view.session_lapses[0])
    if view.available:
        heap = view.lock_heap
        while heap:
            until, token = heap[0]
            lock = view.locks.get(token)
            if lock is None or lock.locked_until != until or lock.busy:
                heapq.heappop(heap)  # a busy lock is pushed again when its batch answers
                continue
            candidates.append(until)
            break
        eheap = view.expiry_heap
        while eheap:
            expires_at, seq = eheap[0]
            record = view.window.get(seq)
            if record is None or record.expires_at != expires_at:
                heapq.heappop(eheap)
                continue
            candidates.append(expires_at)
            break
        if view.store_due is not None:
            candidates.append(view.store_due)
        if not view.activate_in_flight:
            if view.activate_again:
                candidates.append(now)
            if view.scheduled_heap:
                candidates.append(view.scheduled_heap[0][0])
            if view.scheduled_untracked and view.scheduled_poll_at is not None:
                candidates.append(view.scheduled_poll_at)
        if view.dedup is not None:
            expiry = view.dedup.next_expiry()
            if expiry is not None:
                candidates.append(expiry)
            if view.settings.shared_store:
                candidates.append(view.history_pruned_at + view.dedup.window_ms)
        if view.rescan_at is not None:
            candidates.append(view.rescan_at)
    return min(candidates) if candidates else None


def _finish(turn: _Turn) -> Decision:
    view, now = turn.view, turn.now
    for op, ctx in turn.claims:
        turn.op(op, ctx)
    if turn.settles:
        turn.op(SettleOp(now, tuple(item for item, _ in turn.settles)),
                _SettleCtx(tuple(entry for _, entry in turn.settles)))
    if turn.renews:
        turn.op(RenewLocks(now, turn.renews[0][1][2], tuple(item for item, _ in turn.renews)),
                _RenewCtx(tuple(entry for _, entry in turn.renews)))
    if turn.dead_letter_moves:
        forward = view.settings.forward_dead_letters
        # Into the dead-letter queue a message keeps its number (as Service Bus's); forwarded, it is new there.
        turn.op(MoveMessages(now, tuple(i for i, _ in turn.dead_letter_moves), forward is None,
                             None if forward is None else forward.target, keep_sequence_numbers=forward is None),
                _MoveCtx(tuple(r for _, r in turn.dead_letter_moves)))
    if turn.drop_moves:
        turn.op(MoveMessages(now, tuple(i for i, _ in turn.drop_moves), False),
                _MoveCtx(tuple(r for _, r in turn.drop_moves)))
    for op, ctx in zip(turn.tail_ops, turn.tail_ctxs, strict=True):
        turn.op(op, ctx)
    batch_id: int | None = None
    if turn.ops:
        batch_id = view.next_batch_id
        view.next_batch_id += 1
        view.pending[batch_id] = (tuple(turn.ctxs), ())
    if turn.update is not None:  # answered once the batch that drops its locks is done
        if batch_id is None:
            turn.replies.append(SettingsUpdated(*turn.update))
        else:
            view.updates_waiting[batch_id] = turn.update
    read: ReadWindow | ReadCounts | None = _counts_read(view, batch_id)
    if (read is None and view.available and view.read_in_flight is None and not view.at_tail
            and view.window_size < view.settings.window_bytes // 2):
        read = ReadWindow(view.cursor + 1, view.settings.read_count)
        view.read_in_flight = view.settings.read_count
        view.read_from = read.from_sequence_number
    return Decision(view, tuple(turn.ops), batch_id, read, tuple(turn.replies), _next_due(view, now))


# ---- the store's answers -----------------------------------------------------------------------------


def _on_results(turn: _Turn, command: StoreResults) -> None:
    view = turn.view
    entry = view.pending.pop(command.batch_id, None)
    if entry is None:
        return
    ctxs, _ = entry
    for ctx, result in zip(ctxs, command.results, strict=True):
        match ctx, result:
            case _AppendCtx(), Appended():
                _appended(turn, ctx, result)
            case _ClaimCtx(), Claimed():
                _claimed(turn, ctx, result)
            case _TakeCtx(), Settled():
                _taken(turn, ctx, result)
            case _CancelCtx(), Unscheduled():
                _cancelled(turn, ctx, result)
            case _SettleCtx(), Settled():
                _settled(turn, ctx, result)
            case _RenewCtx(), Renewed():
                _renewed(turn, ctx, result)
            case _MoveCtx(), Moved():
                for record, new in zip(ctx.records, result.sequence_numbers, strict=True):
                    if new is not None:
                        view.counts.active -= 1
                    else:
                        _forget(view, (record,))
            case _ActivateCtx(), Activated():
                _activated(turn, ctx, result)
            case _AcceptCtx(), SessionClaimed():
                _session_claimed(turn, ctx, result)
            case _SessionClaimCtx(), Claimed():
                _session_messages_claimed(turn, ctx, result)
            case _SessionRenewCtx(), Renewed():
                _session_renewed(turn, ctx, result)
            case _StateCtx(), _:
                if ctx.state is None:
                    view.session_states.pop(ctx.session_id, None)
                else:
                    view.session_states[ctx.session_id] = (ctx.state, ctx.updated_at)
                turn.replies.append(SessionStateSet(ctx.reply_to, ctx.session_id))
            case _DeferredClaimCtx(), Claimed():
                _deferred_claimed(turn, ctx, result)
            case _DeferredTakeCtx(), Settled():
                _deferred_taken(turn, ctx, result)
            case _PurgeCtx(), Purged():
                _purged(turn, ctx, result, command.batch_id)
            case _PublishCtx(), _:
                if isinstance(result, Appended) and ctx.target is not None:
                    copies = tuple(replace(r, sequence_number=n) for r, n in
                                   zip(ctx.records, result.sequence_numbers, strict=True) if n)
                    if copies:
                        ctx.stored.append((ctx.target, copies))
                elif isinstance(result, IdsClaimed):
                    _drop_ids(view, ctx.forget, result)
                if ctx.last:
                    turn.replies.append(Published(ctx.reply_to, tuple(ctx.stored)))
            case _MoveOutCtx(), Moved():
                _moved_out(turn, ctx, result, command.batch_id)
            case _RestoreCtx(), Restored():
                _restored(turn, ctx, result)
            case _DedupCtx(), IdsClaimed():
                _drop_ids(view, ctx.message_ids, result)
            case _:
                pass  # claims read by the settle after them, dedup history, session releases


def _drop_ids(view: View, message_ids: tuple[str, ...], result: IdsClaimed | None = None) -> None:
    """Take ids out of the detector: all of them (their batch failed), or those the store found
    already taken (another node's: the store decides again next time)."""
    dropped = set(message_ids if result is None else
                  (mid for mid, fresh in zip(message_ids, result.fresh, strict=True) if not fresh))
    if dropped and view.dedup is not None:
        view.dedup = DuplicateDetector(view.dedup.window_ms, [h for h in view.dedup.history() if h[0] not in dropped])


def _appended(turn: _Turn, ctx: _AppendCtx, result: Appended) -> None:
    view = turn.view
    for record, seq in zip(ctx.records, result.sequence_numbers, strict=True):
        if not seq:  # a duplicate the store found (another node took its id)
            continue
        numbered = replace(record, sequence_number=seq)
        view.last_appended = max(view.last_appended, seq)
        if record.state is MessageState.SCHEDULED:
            _track_scheduled(turn, record, seq)
            continue
        view.counts.active += 1
        _session_ready(view, record.session_id)
        if view.at_tail and seq > view.cursor:
            view.cursor = seq
            _admit(turn, numbered)
    turn.replies.append(SendAccepted(ctx.reply_to, tuple(n for n in result.sequence_numbers if n)))


def _claimed(turn: _Turn, ctx: _ClaimCtx, result: Claimed) -> None:
    view = turn.view
    taken = {row.record.sequence_number for row in result.messages}
    for record in ctx.records:
        view.claiming.discard(record.sequence_number)
    missed = len(ctx.records) - len(taken)
    for row in result.messages:
        assert row.lock_token is not None and row.locked_until is not None
        if row.locked_until <= turn.now:  # the claim came back too late: its lock has already lapsed
            missed += 1
            _admit(turn, row.record)
            continue
        lock = HeldLock(row.lock_token, row.record, row.locked_until, ctx.consumer, row.record.state)
        view.locks[lock.token] = lock
        view.locked_seqs[row.record.sequence_number] = lock.token
        heapq.heappush(view.lock_heap, (lock.locked_until, lock.token))
        if ctx.consumer in view.credit:
            turn.replies.append(Delivered(ctx.consumer, row.record, lock.token, lock.locked_until))
        else:  # the consumer left while the claim was in flight: give the delivery back at once
            lock.settling = True
            turn.settles.append((SettleItem(row.record.sequence_number, lock.token, Outcome.RELEASE),
                                 (_NO_REPLY, lock.token, Outcome.RELEASE, Outcome.RELEASE)))
    credit = view.credit.get(ctx.consumer)
    if missed and credit is not None:
        credit.count += missed
    if len(taken) < len(ctx.records):
        # Rows the window held that the store did not give (another node took them, or deleted
        # them): they left the window with the claim, and one locked elsewhere comes back when that
        # lock lapses, which only a read sees. Read again from the start: it finds such a row locked
        # and rescans at its locked-until (a node that died holding it never says so).
        view.cursor, view.at_tail = 0, False


def _taken(turn: _Turn, ctx: _TakeCtx, result: Settled) -> None:
    view = turn.view
    done = 0
    for record, ok in zip(ctx.records, result.applied, strict=True):
        view.claiming.discard(record.sequence_number)
        if not ok:
            continue
        done += 1
        view.counts.active -= 1
        # As the claim stored it (it counted this delivery), like every other delivery's record.
        turn.replies.append(Delivered(ctx.consumer, record.with_delivery_count(record.delivery_count + 1), None, None))
    credit = view.credit.get(ctx.consumer)
    if credit is not None:
        credit.count += len(ctx.records) - done


def _restored(turn: _Turn, ctx: _RestoreCtx, result: Restored) -> None:
    """Deliveries never written are back in the store: counted again, and ready ones are first in
    line again (by number), as a released message is."""
    view = turn.view
    for record, ok in zip(ctx.records, result.applied, strict=True):
        if not ok:
            continue
        if record.state is MessageState.DEFERRED:
            view.counts.deferred += 1
            continue
        view.counts.active += 1
        _session_ready(view, record.session_id)
        if view.at_tail or record.sequence_number <= view.cursor:  # else the next read finds it
            _admit(turn, record)


def _cancelled(turn: _Turn, ctx: _CancelCtx, result: Unscheduled) -> None:
    """The store deleted every row asked, or none (``result.missing`` names why not)."""
    view = turn.view
    if result.missing:
        turn.replies.append(MessageNotFound(ctx.reply_to, result.missing))
        return
    view.counts.scheduled -= len(ctx.sequence_numbers)
    if view.scheduled_heap:  # cancelled: their times are no longer this core's to count
        cancelled = set(ctx.sequence_numbers)
        view.scheduled_heap = [entry for entry in view.scheduled_heap if entry[1] not in cancelled]
        heapq.heapify(view.scheduled_heap)
    turn.replies.append(ScheduledCancelled(ctx.reply_to, ctx.sequence_numbers))


def _settled(turn: _Turn, ctx: _SettleCtx, result: Settled) -> None:
    view = turn.view
    counts = view.counts
    for (reply_to, token, asked, applied), ok in zip(ctx.entries, result.applied, strict=True):
        lock = view.locks.pop(token, None)
        if lock is None:  # cannot happen: a settling lock is only removed here
            continue
        view.locked_seqs.pop(lock.record.sequence_number, None)
        if isinstance(reply_to, _DeliverTo):  # a session's ReceiveAndDelete: delivered once deleted
            if ok:
                counts.active -= 1
                turn.replies.append(Delivered(reply_to.consumer, lock.record, None, None))
            else:
                _session_ready(view, reply_to.session_id)
                _forget(view, (lock.record,))
            continue
        if not ok:
            if reply_to is not _NO_REPLY and reply_to is not _DROPPED:
                turn.replies.append(LockLost(reply_to, token))
            _forget(view, (lock.record,))
            continue
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
            _admit(turn, record)
        if reply_to is not _NO_REPLY and reply_to is not _DROPPED:
            turn.replies.append(SettlementDone(reply_to, token, asked))


def _renewed(turn: _Turn, ctx: _RenewCtx, result: Renewed) -> None:
    view = turn.view
    for (reply_to, token, until), ok in zip(ctx.entries, result.applied, strict=True):
        quiet = reply_to is _NO_REPLY  # a session message's lock, renewed with its session
        lock = view.locks.get(token)
        if lock is None:
            if not quiet:
                turn.replies.append(LockLost(reply_to, token))
            continue
        lock.renewing = False
        if ok:
            lock.locked_until = until
            heapq.heappush(view.lock_heap, (until, token))
            if not quiet:
                turn.replies.append(LockRenewed(reply_to, token, until))
        elif lock.settling:  # the settlement behind it will say what happened (and answer its sender)
            if not quiet:
                turn.replies.append(LockLost(reply_to, token))
        else:
            del view.locks[token]
            view.locked_seqs.pop(lock.record.sequence_number, None)
            _forget(view, (lock.record,))
            if not quiet:
                turn.replies.append(LockLost(reply_to, token))


def _activated(turn: _Turn, ctx: _ActivateCtx, result: Activated) -> None:
    view = turn.view
    view.activate_in_flight = False
    rows = result.messages
    # Rows another node scheduled (DueInStore) were never counted here.
    view.counts.scheduled = max(view.counts.scheduled - len(rows), 0)
    view.counts.active += len(rows)
    activated = {row.record.sequence_number for row in rows}
    if len(rows) >= ctx.limit:
        view.activate_again = True
    else:  # every tracked time up to the op's now is done (not up to now: the batch may have waited)
        heap = view.scheduled_heap
        elsewhere = 0  # tracked here, due, and not among the rows: another node activated (or took) it
        while heap and heap[0][0] <= ctx.at:
            if heapq.heappop(heap)[1] not in activated:
                elsewhere += 1
        view.counts.scheduled = max(view.counts.scheduled - elsewhere, 0)
    if activated and view.scheduled_heap:
        kept = [entry for entry in view.scheduled_heap if entry[1] not in activated]
        if len(kept) != len(view.scheduled_heap):
            heapq.heapify(kept)
            view.scheduled_heap = kept
    if view.counts.scheduled <= 0:
        view.scheduled_untracked = False
        view.scheduled_poll_at = None
        view.scheduled_heap.clear()
    for row in rows:
        record = row.record
        _session_ready(view, record.session_id)
        if view.at_tail or record.sequence_number <= view.cursor:
            _admit(turn, record)


def _on_failed(turn: _Turn, command: StoreFailed) -> None:
    """Nothing of the batch happened: say so, and let reads find its messages again."""
    view = turn.view
    entry = view.pending.pop(command.batch_id, None)
    if entry is None:
        return
    ctxs, _ = entry
    # A transaction's settlement the store fenced (StoreFailed.fenced): its lock is lost, and the
    # transaction is answered so (rolled back) instead of ServerBusy.
    fenced = command.fenced
    lost: tuple[ReplyTo, HeldLock] | None = None
    if fenced is not None and 0 <= fenced[0] < len(ctxs):
        settle_ctx = ctxs[fenced[0]]
        if (isinstance(settle_ctx, _SettleCtx) and settle_ctx.transaction is not None
                and 0 <= fenced[1] < len(settle_ctx.entries)):
            token = settle_ctx.entries[fenced[1]][1]
            lock = view.locks.pop(token, None)
            if lock is not None:
                view.locked_seqs.pop(lock.record.sequence_number, None)
                _forget(view, (lock.record,))
                lost = settle_ctx.transaction, lock
    answered = None if lost is None else lost[0]
    for ctx in ctxs:
        match ctx:
            case _AppendCtx():
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _PublishCtx():
                if ctx.first and ctx.reply_to is not answered:
                    turn.replies.append(ServerBusy(ctx.reply_to))
                _drop_ids(view, ctx.forget)
            case _DedupCtx():
                _drop_ids(view, ctx.message_ids)
            case _ClaimCtx() | _TakeCtx():
                for record in ctx.records:
                    view.claiming.discard(record.sequence_number)
                _forget(view, ctx.records)
                credit = view.credit.get(ctx.consumer)
                if credit is not None:
                    credit.count += len(ctx.records)
            case _CancelCtx():
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _SettleCtx():
                for reply_to, token, _asked, _applied in ctx.entries:
                    if isinstance(reply_to, _DeliverTo):  # not deleted: its lock lapses, the credit is back
                        _unbusy(view, token, settling=True)
                        credit = view.credit.get(reply_to.consumer)
                        if credit is not None:
                            credit.count += 1
                        continue
                    _unbusy(view, token, settling=True)
                    if reply_to is _DROPPED:  # the update ended it all the same: it lapses at its time
                        dropped = view.locks.get(token)
                        if dropped is not None:
                            dropped.dropped = True
                        continue
                    if reply_to is not _NO_REPLY and reply_to is not answered:
                        turn.replies.append(ServerBusy(reply_to))
            case _RenewCtx():
                for reply_to, token, _until in ctx.entries:
                    _unbusy(view, token, settling=False)
                    if reply_to is not _NO_REPLY:
                        turn.replies.append(ServerBusy(reply_to))
            case _MoveCtx():
                _forget(view, ctx.records)
            case _ActivateCtx():
                view.activate_in_flight = False
                view.store_due_done = None  # the store's next_due, read again, is acted on
            case _AcceptCtx():
                if ctx.session_id is None:  # the claim never looked: the next one must
                    view.accept_in_flight = False
                    view.sessions_maybe_ready = True
                turn.replies.append(ServerBusy(ctx.waiter.reply_to))
            case _SessionClaimCtx():
                held = view.sessions.get(ctx.session_id)
                if held is not None and held.token == ctx.session_token:
                    held.claiming = False
                credit = view.credit.get(ctx.consumer)
                if credit is not None:
                    credit.count += ctx.count
            case _SessionRenewCtx():
                held = view.sessions.get(ctx.session_id)
                if held is not None and held.token == ctx.token:
                    held.renewing = False
                    heapq.heappush(view.session_heap, (held.locked_until, held.session_id))
                    for lock in _session_locks(view, held):
                        _unbusy(view, lock.token, settling=False)
                if ctx.reply_to is not _NO_REPLY:
                    turn.replies.append(ServerBusy(ctx.reply_to))
            case _StateCtx():
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _DeferredClaimCtx() | _PurgeCtx():
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _MoveOutCtx():  # nothing moved: the rows taken out of the window are read again
                if ctx.sent:
                    view.cursor = min(view.cursor, min(ctx.sent) - 1)
                    view.at_tail = False
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _RestoreCtx():  # still deleted: put back once the store answers again (Restore is idempotent)
                view.restore_again.extend(ctx.records)
            case _DeferredTakeCtx():
                for token in ctx.tokens:  # not deleted: the locks lapse and the messages stay deferred
                    _unbusy(view, token, settling=True)
                turn.replies.append(ServerBusy(ctx.reply_to))
            case _:
                pass
    if lost is not None:
        reply_to, lock = lost
        if lock.session_token is not None:
            turn.replies.append(SessionLockLost(reply_to, lock.record.session_id or "", lock.token))
        else:
            turn.replies.append(LockLost(reply_to, lock.token))


def _unbusy(view: View, token: uuid.UUID, *, settling: bool) -> None:
    lock = view.locks.get(token)
    if lock is not None:
        if settling:
            lock.settling = False
        else:
            lock.renewing = False
        heapq.heappush(view.lock_heap, (lock.locked_until, token))


# ---- sessions -------------------------------------------------------------------------------------------


def _session_of(view: View, consumer: Consumer) -> HeldSession | None:
    sid = view.consumer_sessions.get(consumer)
    return None if sid is None else view.sessions.get(sid)


def _session_ready(view: View, session_id: str | None) -> None:
    """A message of ``session_id`` may be ready now: its holder may claim, a waiter may find it."""
    if session_id is None or not view.settings.requires_session:
        return
    view.sessions_maybe_ready = True
    held = view.sessions.get(session_id)
    if held is not None:
        held.more = True


def _session_locks(view: View, held: HeldSession) -> list[HeldLock]:
    return [lock for lock in view.locks.values() if lock.session_token == held.token]


def _held_session(turn: _Turn, session_id: str, reply_to: ReplyTo) -> HeldSession | None:
    """The live session lock this core holds for ``session_id``, else a reply says why not."""
    view = turn.view
    if not view.settings.requires_session:
        turn.replies.append(Refused(reply_to, "the entity does not require sessions"))
        return None
    held = view.sessions.get(session_id)
    if held is None or held.locked_until <= turn.now:
        turn.replies.append(SessionLockLost(reply_to, session_id))
        return None
    if not view.available:
        turn.replies.append(ServerBusy(reply_to))
        return None
    return held


def _on_accept(turn: _Turn, command: AcceptSession) -> None:
    view, now = turn.view, turn.now
    if not view.settings.requires_session:
        turn.replies.append(Refused(command.reply_to, "the entity does not require sessions"))
        return
    if command.consumer in view.consumer_sessions:
        turn.replies.append(Refused(command.reply_to, "this receiver holds a session already"))
        return
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    waiter = _Waiter(command.consumer, command.reply_to, command.wait_until)
    if command.session_id is None:
        view.waiters.append(waiter)  # _grant_waiters asks the store
        return
    held = view.sessions.get(command.session_id)
    if held is not None and held.locked_until > now:
        turn.replies.append(SessionCannotBeLocked(command.reply_to, command.session_id))
        return
    token = _next_token(view)
    until = now + view.settings.lock_duration
    turn.op(ClaimSession(now, token, until, view.settings.owner, command.session_id),
            _AcceptCtx(waiter, command.session_id, token, until))


def _grant_waiters(turn: _Turn) -> None:
    """One next-available ClaimSession at a time, and only when something may have become ready."""
    view, now = turn.view, turn.now
    if view.waiters:  # the ones whose time came are answered
        kept: list[_Waiter] = []
        for waiter in view.waiters:
            if waiter.wait_until is not None and waiter.wait_until <= now:
                turn.replies.append(NoSessionAvailable(waiter.reply_to))
            else:
                kept.append(waiter)
        view.waiters = kept
    if not view.waiters or view.accept_in_flight or not view.sessions_maybe_ready or not view.available:
        return
    waiter = view.waiters.pop(0)
    view.accept_in_flight = True
    view.sessions_maybe_ready = False
    token = _next_token(view)
    until = now + view.settings.lock_duration
    turn.tail_ops.append(ClaimSession(now, token, until, view.settings.owner, None))
    turn.tail_ctxs.append(_AcceptCtx(waiter, None, token, until))


def _session_claimed(turn: _Turn, ctx: _AcceptCtx, result: SessionClaimed) -> None:
    view = turn.view
    waiter = ctx.waiter
    if ctx.session_id is None:
        view.accept_in_flight = False
    sid = result.session_id
    if sid is None:
        if ctx.session_id is not None:
            turn.replies.append(SessionCannotBeLocked(waiter.reply_to, ctx.session_id))
        else:
            view.waiters.insert(0, waiter)  # nothing free with a ready message: wait for one
        return
    if ctx.locked_until <= turn.now:  # the claim came back too late: the lock has lapsed already
        view.sessions_maybe_ready = True
        if ctx.session_id is None:
            view.waiters.insert(0, waiter)  # ask again
        else:
            turn.replies.append(ServerBusy(waiter.reply_to))
        return
    if waiter.consumer not in view.credit or waiter.consumer in view.consumer_sessions:
        # The receiver left (or took another session) while the claim was in flight: give it back.
        turn.tail_ops.append(ReleaseSession(sid, ctx.token))
        turn.tail_ctxs.append(_QuietCtx())
        view.sessions_maybe_ready = True
        return
    held = HeldSession(sid, ctx.token, ctx.locked_until, waiter.consumer)
    view.sessions[sid] = held
    view.consumer_sessions[waiter.consumer] = sid
    heapq.heappush(view.session_heap, (held.locked_until, sid))
    if ctx.session_id is None:
        view.sessions_maybe_ready = True  # the next waiter may find another session
    turn.replies.append(SessionAccepted(waiter.reply_to, waiter.consumer, sid, held.locked_until))


def _pump_sessions(turn: _Turn) -> None:
    """Each session holder claims its session's next messages from the store (the lowest ready rows,
    so in sequence order), one claim per session in flight."""
    view, now = turn.view, turn.now
    for consumer, credit in view.credit.items():
        held = _session_of(view, consumer)
        if held is None or credit.count <= 0 or held.claiming or not held.more or held.locked_until <= now:
            continue
        until = held.renew_until if held.renewing else held.locked_until
        count = credit.count
        credit.count = 0
        held.claiming = True
        tokens = tuple(_next_token(view) for _ in range(count))
        turn.claims.append((Claim(now, until, view.settings.owner, tokens, None, MessageState.ACTIVE,
                                  held.session_id),
                            _SessionClaimCtx(consumer, held.session_id, held.token, count, credit.mode)))


def _session_messages_claimed(turn: _Turn, ctx: _SessionClaimCtx, result: Claimed) -> None:
    view = turn.view
    held = view.sessions.get(ctx.session_id)
    current = held is not None and held.token == ctx.session_token
    if held is not None and current:
        held.claiming = False
        if len(result.messages) < ctx.count:
            held.more = False  # the session has nothing more ready now; a send or a return says when
    credit = view.credit.get(ctx.consumer)
    missed = ctx.count - len(result.messages)
    max_count = view.settings.max_delivery_count
    for row in result.messages:
        assert row.lock_token is not None and row.locked_until is not None
        record = row.record
        seq = record.sequence_number
        if seq in view.window:  # a read had seen it ready: it is locked now
            view.window_order.remove(seq)
            view.window_size -= view.window.pop(seq).size
        if row.locked_until <= turn.now:  # the claim came back too late: its lock has already lapsed
            missed += 1
            _admit(turn, record)
            continue
        lock = HeldLock(row.lock_token, record, row.locked_until, ctx.consumer, record.state,
                        session_token=ctx.session_token)
        view.locks[lock.token] = lock
        view.locked_seqs[seq] = lock.token
        heapq.heappush(view.lock_heap, (lock.locked_until, lock.token))
        if not current or credit is None:
            # The session or its receiver is gone: hand the message back, its delivery not counted.
            lock.settling = True
            turn.settles.append((SettleItem(seq, lock.token, Outcome.RELEASE),
                                 (_NO_REPLY, lock.token, Outcome.RELEASE, Outcome.RELEASE)))
            missed += 1
        elif record.delivery_count > max_count:  # the claim counted one delivery past the maximum
            lock.settling = True
            edit = _service_edit(record, MAX_DELIVERY_COUNT_EXCEEDED, f"delivered {record.delivery_count - 1} times")
            turn.settles.append((_dead_letter_settle(view, turn.now, record, lock.token, edit, give_back=True),
                                 (_NO_REPLY, lock.token, Outcome.DEAD_LETTER, Outcome.DEAD_LETTER)))
            missed += 1
            if held is not None and current:
                held.more = True  # it may have more behind this one
        elif ctx.mode is ReceiveMode.RECEIVE_AND_DELETE:
            lock.settling = True
            turn.settles.append((SettleItem(seq, lock.token, Outcome.COMPLETE),
                                 (_DeliverTo(ctx.consumer, ctx.session_id), lock.token, Outcome.COMPLETE,
                                  Outcome.COMPLETE)))
        else:
            turn.replies.append(Delivered(ctx.consumer, record, lock.token, lock.locked_until))
    if missed and credit is not None:
        credit.count += missed


def _on_renew_session(turn: _Turn, session_id: str, reply_to: ReplyTo) -> None:
    quiet = reply_to is _NO_REPLY
    view, now = turn.view, turn.now
    held = view.sessions.get(session_id)
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
    turn.tail_ops.append(RenewSession(now, session_id, held.token, until))
    turn.tail_ctxs.append(_SessionRenewCtx(session_id, held.token, until, reply_to))
    for lock in _session_locks(view, held):  # its messages' locks ride on it
        if not lock.busy:
            lock.renewing = True
            turn.renews.append(((lock.record.sequence_number, lock.token), (_NO_REPLY, lock.token, until)))


def _session_renewed(turn: _Turn, ctx: _SessionRenewCtx, result: Renewed) -> None:
    view = turn.view
    held = view.sessions.get(ctx.session_id)
    if held is None or held.token != ctx.token:
        if ctx.reply_to is not _NO_REPLY:
            turn.replies.append(SessionLockLost(ctx.reply_to, ctx.session_id))
        return
    held.renewing = False
    if result.applied and result.applied[0]:
        held.locked_until = ctx.locked_until
        heapq.heappush(view.session_heap, (held.locked_until, held.session_id))
        if ctx.reply_to is not _NO_REPLY:
            turn.replies.append(SessionRenewed(ctx.reply_to, ctx.session_id, held.locked_until))
        return
    if ctx.reply_to is not _NO_REPLY:
        turn.replies.append(SessionLockLost(ctx.reply_to, ctx.session_id))
    _end_session(turn, held)  # the store says it is not ours


def _end_session(turn: _Turn, held: HeldSession) -> None:
    """The session is no longer held here: its receiver is told; its messages' locks lapse on their own."""
    view = turn.view
    view.sessions.pop(held.session_id, None)
    view.consumer_sessions.pop(held.consumer, None)
    view.sessions_maybe_ready = True
    turn.replies.append(SessionLost(held.consumer, held.session_id))


def _release_session(turn: _Turn, held: HeldSession) -> None:
    """The receiver closed: its session is released and the messages it held are abandoned (their
    deliveries count, as when a lock lapses)."""
    view = turn.view
    view.sessions.pop(held.session_id, None)
    view.consumer_sessions.pop(held.consumer, None)
    view.sessions_maybe_ready = True
    # Should the release not reach the store, the session is free only when its lock lapses there.
    heapq.heappush(view.session_lapses, held.locked_until)
    if not view.available:
        return  # both locks lapse on their own
    for lock in _session_locks(view, held):
        if not lock.settling and lock.locked_until > turn.now:
            _settle_lock(turn, lock, Outcome.ABANDON, _NO_REPLY)
    turn.tail_ops.append(ReleaseSession(held.session_id, held.token))
    turn.tail_ctxs.append(_QuietCtx())


def _on_set_state(turn: _Turn, command: SetSessionState) -> None:
    held = _held_session(turn, command.session_id, command.reply_to)
    if held is None:
        return
    # A zero-length state clears it, as null does: Service Bus reads either back as null.
    state = command.state if command.state else None
    turn.tail_ops.append(PutSessionState(command.session_id, state, turn.now))
    turn.tail_ctxs.append(_StateCtx(command.session_id, state, turn.now, command.reply_to))


def _due_sessions(turn: _Turn) -> None:
    """Session locks that lapsed: their holders lost them."""
    view, now = turn.view, turn.now
    heap = view.session_heap
    while heap and heap[0][0] <= now:
        until, sid = heapq.heappop(heap)
        held = view.sessions.get(sid)
        if held is None or held.locked_until != until or held.renewing:
            continue
        _end_session(turn, held)


# ---- deferred messages by number, complete-through, counts read back -------------------------------------


def _on_receive_deferred(turn: _Turn, command: ReceiveDeferred) -> None:
    """One Claim(state=DEFERRED) of the numbers asked; :func:`_deferred_claimed` reads it."""
    view, now = turn.view, turn.now
    session_token: uuid.UUID | None = None
    until = now + view.settings.lock_duration
    if command.session_id is not None or view.settings.requires_session:
        if command.session_id is None:
            turn.replies.append(Refused(command.reply_to, "a session's deferred messages are received by the "
                                                          "holder of the session: name it"))
            return
        held = _held_session(turn, command.session_id, command.reply_to)
        if held is None:
            return
        session_token = held.token
        until = held.renew_until if held.renewing else held.locked_until  # the locks ride on the session's
    elif not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    numbers = tuple(dict.fromkeys(command.sequence_numbers))
    if not numbers:
        turn.replies.append(DeferredReceived(command.reply_to, ()))
        return
    tokens = tuple(_next_token(view) for _ in numbers)
    turn.op(Claim(now, until, view.settings.owner, tokens, numbers, MessageState.DEFERRED, command.session_id),
            _DeferredClaimCtx(command.reply_to, numbers, command.mode, command.consumer, command.session_id,
                              session_token))


def _deferred_claimed(turn: _Turn, ctx: _DeferredClaimCtx, result: Claimed) -> None:
    """All taken: PeekLock answers now (the locks are durable), ReceiveAndDelete completes them first.
    Any missing (or the session lost, or the claim back too late): the ones taken are released
    (their deliveries given back) and nothing was received."""
    view, now = turn.view, turn.now
    rows = {row.record.sequence_number: row for row in result.messages}
    missing = tuple(n for n in ctx.numbers if n not in rows)
    session_lost = False
    if ctx.session_token is not None:
        held = view.sessions.get(ctx.session_id or "")
        session_lost = held is None or held.token != ctx.session_token or held.locked_until <= now
    late = False
    locks: list[HeldLock] = []
    for row in result.messages:
        assert row.lock_token is not None and row.locked_until is not None
        if row.locked_until <= now:  # its lock lapsed already: it stays deferred, nothing to hold
            late = True
            continue
        lock = HeldLock(row.lock_token, row.record, row.locked_until, ctx.consumer, row.record.state,
                        session_token=ctx.session_token)
        view.locks[lock.token] = lock
        view.locked_seqs[row.record.sequence_number] = lock.token
        heapq.heappush(view.lock_heap, (lock.locked_until, lock.token))
        locks.append(lock)
    if missing or late or session_lost:
        for lock in locks:
            lock.settling = True
            turn.settles.append((SettleItem(lock.record.sequence_number, lock.token, Outcome.RELEASE),
                                 (_NO_REPLY, lock.token, Outcome.RELEASE, Outcome.RELEASE)))
        if session_lost:
            turn.replies.append(SessionLockLost(ctx.reply_to, ctx.session_id or ""))
        elif missing:
            turn.replies.append(MessageNotFound(ctx.reply_to, missing))
        else:
            turn.replies.append(ServerBusy(ctx.reply_to))
        return
    ordered = [rows[n] for n in ctx.numbers]
    if ctx.mode is ReceiveMode.PEEK_LOCK:
        turn.replies.append(DeferredReceived(ctx.reply_to, tuple(
            DeferredMessage(row.record, row.lock_token, row.locked_until) for row in ordered)))
        return
    items: list[SettleItem] = []
    for row in ordered:
        assert row.lock_token is not None
        view.locks[row.lock_token].settling = True
        items.append(SettleItem(row.record.sequence_number, row.lock_token, Outcome.COMPLETE))
    turn.tail_ops.append(SettleOp(now, tuple(items)))
    turn.tail_ctxs.append(_DeferredTakeCtx(ctx.reply_to, tuple(item.lock_token for item in items)))


def _deferred_taken(turn: _Turn, ctx: _DeferredTakeCtx, result: Settled) -> None:
    """A ReceiveAndDelete by number: every message deleted is handed out (it exists nowhere else)."""
    view = turn.view
    out: list[DeferredMessage] = []
    for token, ok in zip(ctx.tokens, result.applied, strict=True):
        lock = view.locks.pop(token, None)
        if lock is None:  # cannot happen: a settling lock is only removed here
            continue
        view.locked_seqs.pop(lock.record.sequence_number, None)
        if ok:
            view.counts.deferred -= 1
            out.append(DeferredMessage(lock.record, None, None))
    if out or not ctx.tokens:
        turn.replies.append(DeferredReceived(ctx.reply_to, tuple(out)))
    else:  # none deleted (their locks lapsed first): they are still deferred
        turn.replies.append(ServerBusy(ctx.reply_to))


def _on_complete_through(turn: _Turn, command: CompleteThrough) -> None:
    view = turn.view
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    _forget_window_through(view, command.sequence_number)
    turn.op(Purge(turn.now, command.sequence_number),
            _PurgeCtx(command.reply_to, command.sequence_number, turn.now))


def _forget_window_through(view: View, through: int) -> None:
    """The window's rows numbered <= ``through`` may be gone: they leave it, and the cursor moves
    below them, so the next read finds whichever are still there (a lock kept them)."""
    order = view.window_order
    if not order or order[0] > through:
        return
    cut = bisect_right(order, through)
    for seq in order[:cut]:
        view.window_size -= view.window.pop(seq).size
    view.cursor = min(view.cursor, order[0] - 1)
    view.at_tail = False
    del order[:cut]


def _purged(turn: _Turn, ctx: _PurgeCtx, result: Purged, batch_id: int) -> None:
    view = turn.view
    _forget_window_through(view, ctx.through)  # rows that came back to it while the purge was in flight
    # A lock that had lapsed by the purge's time did not keep its row: the purge deleted it. Such a lock
    # is still here when it was busy at its time (a renewal in flight, answered since without extending
    # it) and the store was down when that answer came (nothing lapses then). It goes now, so the core
    # never holds a lock on a purged row nor lapses it back into the window later. Every batch decided
    # before the purge has been answered, so a lock's time is the store's; a lock busy now is in a batch
    # decided after the purge (a lapsed lock is neither renewed nor settled), whose answer says.
    for lock in [lock for lock in view.locks.values() if lock.record.sequence_number <= ctx.through
                 and lock.locked_until <= ctx.at and not lock.busy]:
        _drop_lock(view, lock)
    if view.scheduled_heap:
        kept = [entry for entry in view.scheduled_heap if entry[1] > ctx.through]
        if len(kept) != len(view.scheduled_heap):
            heapq.heapify(kept)
            view.scheduled_heap = kept
    if result.count:
        view.counts_stale_after = max(view.counts_stale_after, batch_id)
    turn.replies.append(CompletedThrough(ctx.reply_to, result.count))


def _counts_read(view: View, batch_id: int | None) -> ReadCounts | None:
    """A ReadCounts when a committed Purge left the counts unknown, or RefreshCounts asked, and none is
    in flight."""
    if not (view.counts_stale_after or view.counts_refresh) or view.counts_read_after is not None \
            or not view.available:
        return None
    view.counts_refresh = False
    view.counts_read_after = batch_id if batch_id is not None else view.next_batch_id - 1
    return ReadCounts()


def _on_counts_read(turn: _Turn, command: CountsRead) -> None:
    view = turn.view
    after = view.counts_read_after
    view.counts_read_after = None
    if command.counts is None or after is None:
        return  # asked again by the next decision
    counts = view.counts
    counts.active, counts.scheduled, counts.deferred = command.counts
    if after >= view.counts_stale_after:
        view.counts_stale_after = 0
    if counts.scheduled <= 0:
        view.scheduled_untracked = False
        view.scheduled_poll_at = None
        view.scheduled_heap.clear()


# ---- moving rows out (resubmit, move, purge by number) ----------------------------------------------


def _on_move_out(turn: _Turn, command: MoveOut) -> None:
    """One fenced MoveMessages of the named rows; rows locked or being claimed here are skipped (the
    store would skip a locked one; a claim decided earlier is applied first), the others leave the
    window now, so no receive in this turn or later claims them while the move is in flight."""
    view = turn.view
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    sent: list[MoveItem] = []
    seen: set[int] = set()
    for item in command.items:
        seq = item.sequence_number
        if seq in seen or seq in view.locked_seqs or seq in view.claiming:
            continue
        seen.add(seq)
        sent.append(item)
        _drop_from_window(view, seq)
    asked = tuple(item.sequence_number for item in command.items)
    if not sent:
        turn.replies.append(MovedOut(command.reply_to, (None,) * len(asked)))
        return
    turn.op(MoveMessages(turn.now, tuple(sent), False, command.target),
            _MoveOutCtx(command.reply_to, asked, tuple(item.sequence_number for item in sent)))


def _drop_from_window(view: View, seq: int) -> None:
    record = view.window.pop(seq, None)
    if record is None:
        return
    order = view.window_order
    del order[bisect_right(order, seq) - 1]
    view.window_size -= record.size


def _moved_out(turn: _Turn, ctx: _MoveOutCtx, result: Moved, batch_id: int) -> None:
    view = turn.view
    outcome = dict(zip(ctx.sent, result.sequence_numbers, strict=True))
    moved = {seq for seq, new in outcome.items() if new is not None}
    for seq, new in outcome.items():
        if new is None:  # locked elsewhere, or gone: if it is still there, a read finds it again
            view.cursor = min(view.cursor, seq - 1)
            view.at_tail = False
        else:
            _drop_from_window(view, seq)  # a read in flight may have brought it back
    if moved:
        if view.scheduled_heap:
            kept = [entry for entry in view.scheduled_heap if entry[1] not in moved]
            if len(kept) != len(view.scheduled_heap):
                heapq.heapify(kept)
                view.scheduled_heap = kept
        # The rows' states are the store's (scheduled, deferred, active): read the counts back.
        view.counts_stale_after = max(view.counts_stale_after, batch_id)
    replies: list[int | None] = []
    answered: set[int] = set()
    for seq in ctx.asked:
        replies.append(None if seq in answered else outcome.get(seq))
        answered.add(seq)
    turn.replies.append(MovedOut(ctx.reply_to, tuple(replies)))


# ---- transactions -------------------------------------------------------------------------------------


def _on_transact(turn: _Turn, command: Transact) -> None:
    """An AMQP transaction's commit (see :class:`Transact`): all checks first, then one batch.

    The settlements' ``Settle`` is fenced at this decision's time, and batches apply in order, so on
    one node a lock usable now is still this core's when the batch applies. Another node sharing
    the store may claim it once it lapsed, so the ``Settle`` is all-or-none: the store applies every
    settlement and every copy, or (a failed or fenced batch) nothing at all."""
    view, now = turn.view, turn.now
    if not view.available:
        turn.replies.append(ServerBusy(command.reply_to))
        return
    locks: list[HeldLock] = []
    for settle in command.settles:
        lock = _usable_lock(turn, settle.token, command.reply_to, renewal=False)
        if lock is None:
            return  # refused: nothing changed
        if any(held is lock for held in locks):
            turn.replies.append(Refused(command.reply_to, "a transaction settles a message once"))
            return
        locks.append(lock)
    by_target: dict[Hashable, list[MessageRecord]] = {}
    checked_under: dict[Hashable, list[str | None]] = {}  # per copy, the id its message was checked under
    numbered_by: dict[Hashable, Hashable | None] = {}
    remembered: list[str] = []
    for i, entry in enumerate(command.entries):
        mid = entry.message_id
        checked = i < len(command.deduplicate) and command.deduplicate[i] and view.dedup is not None
        if checked and mid is not None:
            assert view.dedup is not None
            if view.dedup.is_duplicate(mid, now):
                continue
            view.dedup.remember(mid, now)
            remembered.append(mid)
        for copy in entry.copies:
            by_target.setdefault(copy.target, []).append(copy.record)
            checked_under.setdefault(copy.target, []).append(mid if checked else None)
            numbered_by[copy.target] = copy.numbered_by
    parts = list(by_target.items())
    start = len(turn.settles)
    for j, (lock, settle) in enumerate(zip(locks, command.settles, strict=True)):
        # With no copy to store, the last settlement's echo answers (after the commit).
        answers = not parts and j == len(locks) - 1
        _settle_lock(turn, lock, settle.outcome, command.reply_to if answers else _NO_REPLY,
                     settle.properties_to_modify, settle.reason, settle.description)
    mine = turn.settles[start:]
    del turn.settles[start:]
    if mine:
        # All or none: should the store find a lock no longer this core's when the batch applies
        # (another node claimed the message after it lapsed), the whole batch rolls back.
        turn.op(SettleOp(now, tuple(item for item, _ in mine), all_or_none=True),
                _SettleCtx(tuple(entry for _, entry in mine), command.reply_to))
    stored: list[tuple[Hashable, tuple[MessageRecord, ...]]] = []
    # Only the history to store: its op answers.
    answer = None if parts or locks else _PublishCtx(command.reply_to, None, (), stored, True, True,
                                                      tuple(remembered))
    # On a store other nodes share, the store decides duplicates (as for a send): the batch takes the
    # ids and gates the copies by them; a duplicate it finds is left out of the numbers.
    claim = _claim_ids(turn, remembered, answer) if view.settings.shared_store else None
    for i, (target, records) in enumerate(parts):
        gate = None if claim is None else Gate(claim, tuple(checked_under[target]))
        turn.op(AppendTo(target, tuple(records), gate, numbered_by=numbered_by[target]),
                _PublishCtx(command.reply_to, target, tuple(records), stored, i == 0, i == len(parts) - 1))
    if remembered and not view.settings.shared_store:
        history = tuple((mid, now) for mid in remembered)
        turn.op(RememberMessageIds(history), _DedupCtx(tuple(remembered)) if answer is None else answer)
    elif not remembered and not parts and not locks:
        turn.replies.append(Published(command.reply_to, ()))
