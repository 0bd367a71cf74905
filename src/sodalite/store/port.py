"""The store port: the only way the broker reaches durable storage.

The port is narrow and batch-oriented. A partition actor collects the effects of many commands
and hands them to :meth:`MessagingStore.apply` as one batch, which the adapter commits in one
transaction (group commit): either every operation in the batch is durable when ``apply``
returns, or none is and it raises :class:`~sodalite.errors.StoreUnavailable`. New needs become new
operation kinds, not new methods. No driver type or driver exception crosses the port.

Version 2 of the port (``docs/store-port.md``, issue 14) makes the store the truth about message
state: the store assigns sequence numbers (:class:`Append`), claims ready messages under a lock
token (:class:`Claim`), settles them fenced by that token (:class:`Settle`), and keeps counters and
the next due time readable without loading a partition's messages (:meth:`MessagingStore.counts`,
:meth:`MessagingStore.next_due`). ``apply`` returns one :data:`OpResult` per operation. The
operations kept from version 1, none of which touches messages (entity records, duplicate history,
session state, move keys, activity), return :class:`Done`; version 1's message operations
(``AppendMessages``, ``DeleteMessages``, ``UpdateMessages``) and ``load_partition`` are gone with the
partition actor that used them.

Times are milliseconds since the epoch, always passed in (``now``): no adapter reads a clock. Lock
tokens are chosen by the caller, so a run is deterministic. A message is *locked at now* when it
carries a lock token and ``locked_until > now``; a lapsed lock is as good as none.

Adapters are not thread-safe: the server gives each store one worker thread and calls it only
from there.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from sodalite.model import store_ops as _shared
from sodalite.model.message import MessageRecord, MessageState

# Defined once in the model, where the pure partition core reads them; the port's own names.
Activated = _shared.Activated
Appended = _shared.Appended
Claimed = _shared.Claimed
Done = _shared.Done
IdsClaimed = _shared.IdsClaimed
Moved = _shared.Moved
Outcome = _shared.Outcome
Renewed = _shared.Renewed
Restored = _shared.Restored
SessionClaimed = _shared.SessionClaimed
Settled = _shared.Settled
StoredMessage = _shared.StoredMessage
Unscheduled = _shared.Unscheduled


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """Names one partition of one entity (path as configured, e.g. ``queue1``)."""

    entity: str
    partition: int = 0


# A sequence number's upper 16 bits name its partition (partitioned-entities seed; the Spark reader
# and the partitioned actors route by them): the store numbers partition i after i << 48.
PARTITION_SHIFT = 48


def numbering_base(ref: PartitionRef) -> int:
    """The number partition ``ref`` counts up from: its first message gets this + 1 (0 for partition
    0 and every non-partitioned entity). Every adapter numbers ``max(high-water mark, base) + 1, ...``,
    so counters written by the earlier version-1 actor, which already started there, need no migration."""
    return ref.partition << PARTITION_SHIFT


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """An entity's definition as stored: its path, kind and JSON-able properties."""

    path: str
    kind: str  # "queue", later "topic", "subscription", "rule"
    properties: dict[str, Any]


# The kind of a subscription's record, whose rules are rows of their own (PutRule, DeleteRule).
SUBSCRIPTION_KIND = "subscription"


@dataclass(frozen=True, slots=True)
class PutEntity:
    """Create or replace an entity definition.

    A subscription's rules are rows of their own (:class:`PutRule`, :class:`DeleteRule`), so two
    nodes changing different rules of one subscription at once both keep their change, and a
    change of its properties leaves its rules alone: a subscription record (kind
    :data:`SUBSCRIPTION_KIND`) is stored without a ``"Rules"`` key. When its properties carry one
    (a list of rule objects, each with a ``"Name"``), the subscription's rule rows are replaced by
    those rules in that order (a whole set, as a new subscription or an import writes it);
    without one its rule rows stay as they are. :meth:`MessagingStore.load_entities` gives every
    subscription record a ``"Rules"`` list read from its rule rows.
    """

    entity: EntityRecord


@dataclass(frozen=True, slots=True)
class PutRule:
    """Add or replace one rule of a subscription: a row of its own, keyed by the subscription's path
    and the rule's name (both compare case-insensitively, ASCII letters). ``rule`` is the rule's
    JSON object (``RuleDescription.to_json``). Decided by the store, so on a store several nodes
    share two nodes adding one name at once get one success: without ``replace`` the rule is added
    (after the subscription's other rules) only when no rule of that name exists; with ``replace``
    an existing rule of that name is replaced in its place, and nothing happens when there is none.
    The subscription's record is not checked. Result: :class:`RuleWritten` (applied or not)."""

    subscription: str
    name: str
    rule: dict[str, Any]
    replace: bool = False


@dataclass(frozen=True, slots=True)
class DeleteRule:
    """Remove one rule of a subscription. Result: :class:`RuleWritten` (False: there was none)."""

    subscription: str
    name: str


def split_rules(entity: EntityRecord) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]] | None]:
    """What an adapter stores for :class:`PutEntity`: the record's properties without ``"Rules"``,
    and for a subscription record that carries them, its rules as (name, rule) pairs in order (None:
    leave its rule rows alone). A rule without a string ``"Name"`` is refused (ValueError)."""
    if entity.kind != SUBSCRIPTION_KIND or "Rules" not in entity.properties:
        return entity.properties, None
    properties = {k: v for k, v in entity.properties.items() if k != "Rules"}
    rules: list[tuple[str, dict[str, Any]]] = []
    for rule in entity.properties["Rules"] or ():
        name = rule.get("Name") if isinstance(rule, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"subscription {entity.path!r}: a rule without a name: {rule!r}")
        rules.append((name, rule))
    return properties, rules


@dataclass(frozen=True, slots=True)
class RuleWritten:
    """Whether a :class:`PutRule` or :class:`DeleteRule` changed something (see each)."""

    applied: bool


@dataclass(frozen=True, slots=True)
class DeleteEntity:
    """Remove an entity definition and everything stored for it.

    Everything: the messages, high-water marks and duplicate-detection history of every partition
    of ``path`` and of its sub-queues, which are stored under refs whose entity starts with
    ``<path>/$`` (``<path>/$deadletterqueue``, ``<path>/$transfer/$deadletterqueue``); paths
    compare case-insensitively. Another entity whose path merely starts with ``<path>/`` (a queue
    ``orders/eu`` beside ``orders``) is untouched: entity names cannot contain ``$``, so only
    sub-queues match. The definition removed is the one of ``path`` alone, with its rule rows
    (:class:`PutRule`).
    """

    path: str


@dataclass(frozen=True, slots=True)
class RememberMessageIds:
    """Record MessageIds for duplicate detection: (message id, seen-at time in ms) pairs.

    An upsert: an id the partition already holds takes the new time; within one operation the
    last pair of an id wins.
    """

    ref: PartitionRef
    entries: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ForgetMessageIds:
    """Drop MessageIds from the partition's duplicate-detection history; unknown ids are ignored.

    With ``seen_before``, only entries seen before that time go: a node pruning the ids it saw
    leaves alone an entry another node sharing the store took again since (:class:`ClaimMessageIds`).
    """

    ref: PartitionRef
    message_ids: tuple[str, ...]
    seen_before: int | None = None


@dataclass(frozen=True, slots=True)
class PutSessionState:
    """Set a session's state (bytes, with the time it changed) or clear it (``state`` None)."""

    ref: PartitionRef
    session_id: str
    state: bytes | None
    updated_at: int


@dataclass(frozen=True, slots=True)
class RememberMoveKeys:
    """Record, in a move's target partition, the keys of messages moved in from another store.

    A key names the source copy (``<source store>/<source partition's entity>/<partition>/<sequence
    number>``). The target appends the message and remembers its key in one transaction; the source
    then deletes its copy. A retry after a crash in between finds the key and does not append again,
    so a move across stores never doubles a message. Keys are kept apart from the user's
    duplicate-detection history, which a move does not observe. An upsert: a known key is fine.
    """

    ref: PartitionRef
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ForgetMoveKeys:
    """Drop move keys once the source copy is gone for good; unknown keys are ignored."""

    ref: PartitionRef
    keys: tuple[str, ...]


# ---- AutoDeleteOnIdle across nodes (clarifications.md, 18) ------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityActivity:
    """One entity as one node sees it: its last activity (ms; for a topic, its subscriptions' too)
    and the receivers attached to it on that node (a topic's: its subscriptions' receivers)."""

    path: str
    last_activity: int
    receivers: int


@dataclass(frozen=True, slots=True)
class RecordActivity:
    """A node's registrations, refreshed at ``now``: per entity (paths compare case-insensitively)
    its row for ``node`` holds the latest ``last_activity`` ever recorded (a smaller one does not
    lower it), the ``receivers`` given and ``refreshed_at = now``. Rows of entities not named stay
    as they are. :class:`DeleteEntity` removes an entity's rows. Result: :class:`Done`."""

    node: str
    now: int
    entries: tuple[EntityActivity, ...]


@dataclass(frozen=True, slots=True)
class DeleteIdleEntity:
    """The idle sweep's fenced deletion of ``path``'s definition (and its registrations), decided
    from the registrations alone: only if the definition exists, no node's row of the path has
    ``last_activity > active_after`` and no row refreshed after ``live_after`` (a node that stopped
    refreshing lapses) has receivers. Two nodes sweeping at once delete it once. The rest of what
    is stored for the path is left to a :class:`DeleteEntity` the caller applies after it.
    Result: :class:`IdleDeleted`."""

    path: str
    active_after: int
    live_after: int


@dataclass(frozen=True, slots=True)
class IdleDeleted:
    deleted: bool


@dataclass(frozen=True, slots=True)
class PruneMessageIds:
    """Drop every entry of the partition's duplicate-detection history seen before ``seen_before``
    (past the window, whichever node took it: a node knows only the ids it took, and one that
    stopped forgets none). Result: :class:`Done`."""

    ref: PartitionRef
    seen_before: int


@dataclass(frozen=True, slots=True)
class ClaimMessageIds:
    """Duplicate detection decided by the store: take each MessageId not seen within the window.

    For each id, in order: when the partition's history holds it seen at or after
    ``now - window_ms``, or an earlier id of this operation is the same, it is a duplicate and
    nothing changes; otherwise the history takes it, seen at ``now`` and marked with ``claim`` (an
    upsert). A later :class:`Append` of the same batch whose ``gate`` names this partition and this
    ``claim`` stores only the messages whose gate id this operation took. ``claim`` must be new for each
    operation (a random or counted UUID): the adapters do not agree on what a gate naming an
    earlier batch's claim lets through. The decision is made in the
    batch's transaction (on a database several nodes share, under the partition's lock), so of two
    batches taking one id, on one node or two, exactly one gets it. Result: :class:`IdsClaimed`.
    """

    ref: PartitionRef
    now: int
    window_ms: int
    claim: uuid.UUID
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DedupGate:
    """Where an :class:`Append`'s messages were checked for duplicates: the partition whose history
    a :class:`ClaimMessageIds` of the same batch wrote (the queue partition itself, or a topic for
    its subscriptions' copies), that operation's ``claim``, and per message the id it was checked
    under (None: not checked; a topic's copy is checked under the sent message's id, which a rule
    action may have changed in the copy)."""

    ref: PartitionRef
    claim: uuid.UUID
    message_ids: tuple[str | None, ...]


StoreOpV1 = (
    PutEntity | DeleteEntity | RememberMessageIds | ForgetMessageIds | PutSessionState | RememberMoveKeys
    | ForgetMoveKeys | RecordActivity
)


# ---- version 2: the store is the truth about message state ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Append:
    """Append messages with sequence numbers the store assigns: last+1, last+2, ... in order.

    The numbers come from the partition's high-water mark (the one every append raises),
    in the same transaction, so they are strictly increasing per partition and never reused, also
    after deletes and restarts. ``last`` is never below :func:`numbering_base` (``partition << 48``):
    partition i's first number is ``(i << 48) + 1``; the same holds for the numbers a dead-letter
    settlement or a move gives in its target partition. Each record's own ``sequence_number`` is
    ignored (pass 0); its lock starts cleared. Result: :class:`Appended`.

    With a ``gate``, a message whose gate id (``gate.message_ids``, one per message) is not None
    is stored only when a :class:`ClaimMessageIds` earlier in the same batch, on ``gate.ref`` with
    ``gate.claim``, took that id; the others are duplicates, skipped and not numbered: their place
    in :attr:`Appended.sequence_numbers` is 0.
    """

    ref: PartitionRef
    messages: tuple[MessageRecord, ...]
    gate: DedupGate | None = None
    # Another partition whose counter numbers the messages too (None: ``ref``'s alone): a dead letter
    # made for a subscription at a topic's fan-out is numbered by the subscription's partition, as
    # the dead letters that keep their number (:attr:`SettleItem.keep_sequence_number`) were. The
    # numbers go on above both counters, and both are raised to the last: they take nothing either
    # partition holds or gave.
    numbered_by: PartitionRef | None = None

    def __post_init__(self) -> None:
        if self.gate is not None and len(self.gate.message_ids) != len(self.messages):
            raise ValueError("Append: a gate names one id (or None) per message")


@dataclass(frozen=True, slots=True)
class Claim:
    """Lock the next ready messages of a partition for a receiver.

    Takes at most ``len(tokens)`` rows, in sequence-number order, that are of ``state``, not locked
    at ``now`` and not expired (``expires_at is None or expires_at > now``). With ``session_id``,
    only that session's rows; None means rows whatever their session (for non-session entities:
    the caller holds the session lock, see :class:`ClaimSession`). With ``sequence_numbers``, only
    those rows (deferred receive by number): missing, locked, expired or other-state ones are
    skipped, not errors. The i-th taken row gets ``tokens[i]``, ``locked_until``,
    ``lock_owner = owner`` and ``delivery_count + 1`` (a lapsed lock is taken over, and its count
    already counted the lapsed delivery). ``state`` is ACTIVE, DEFERRED, or SCHEDULED together
    with ``sequence_numbers``: a claim of scheduled messages by number, which a cancel of scheduled
    messages follows with a :class:`Settle` COMPLETE (only a SCHEDULED row can be taken that way,
    so a cancel never removes an active message; the row leaves the scheduled count). Scheduled
    messages are never claimed for delivery: a SCHEDULED claim without numbers is refused
    (ValueError); due ones become ACTIVE through :class:`Activate`. Result: :class:`Claimed`.
    """

    ref: PartitionRef
    now: int
    locked_until: int
    owner: str
    tokens: tuple[uuid.UUID, ...]
    session_id: str | None = None
    sequence_numbers: tuple[int, ...] | None = None
    state: MessageState = MessageState.ACTIVE

    def __post_init__(self) -> None:
        if self.state == MessageState.SCHEDULED and self.sequence_numbers is None:
            raise ValueError("Claim: scheduled messages are claimed only by sequence number (to cancel "
                             "them); activate due ones instead")


@dataclass(frozen=True, slots=True)
class SettleItem:
    """One settlement: the message, the lock token it must carry, and what to do.

    ``annotations`` (with ``annotation_count``), when not None, replaces the message's annotations
    before the outcome (properties to modify); ``tail``, when not None, replaces its tail
    (properties .. footer: the dead-letter reason and description are application properties).
    The partition's ``size_in_bytes`` follows the new size; a dead-lettered message enters
    ``dead_letter_to`` with its new annotations and tail. ``dead_letter_to`` names the dead-letter
    partition (in the same store) and is required for DEAD_LETTER.
    """

    sequence_number: int
    lock_token: uuid.UUID
    outcome: Outcome
    annotations: bytes | None = None
    annotation_count: int = 0
    dead_letter_to: PartitionRef | None = None
    tail: bytes | None = None
    # The dead-lettered copy (ForwardDeadLetteredMessagesTo into a queue): count reset, enqueued
    # time (None keeps the row's) and expiry (None: it never expires, as in a dead-letter queue).
    reset_delivery_count: bool = False
    enqueued_time: int | None = None
    expires_at: int | None = None
    # DEAD_LETTER into the entity's own dead-letter partition (the caller says so): the copy keeps its
    # sequence number there, as Service Bus keeps it, and that partition's counter becomes the greater
    # of its own and the number. A number the target holds already (numbered there by an earlier
    # release, which gave dead letters the next number) is replaced by one above the target's counter
    # and every number the operation keeps there, in item order. False (a copy forwarded into another
    # queue): the target's next number.
    keep_sequence_number: bool = False
    # DEAD_LETTER: the copy's delivery count is the row's minus one (not below 0): the delivery the claim
    # counted ended without counting (a client's dead-lettering). Ignored with ``reset_delivery_count``.
    give_back_delivery: bool = False

    def __post_init__(self) -> None:
        if self.outcome is Outcome.DEAD_LETTER and self.dead_letter_to is None:
            raise ValueError("SettleItem: DEAD_LETTER needs dead_letter_to")


@dataclass(frozen=True, slots=True)
class Settle:
    """Settle locked messages, each fenced by its lock token.

    An item applies only when its row exists, carries exactly ``lock_token`` and
    ``locked_until > now``; otherwise it changes nothing and its flag is False (a stale token, a
    lapsed lock, a message already settled: the caller answers "lock lost"). Items apply in order,
    so a second item for the same message finds it settled (False). A dead-lettered message is
    appended to ``dead_letter_to`` unlocked, state ACTIVE, with its delivery count, under its own
    number with ``keep_sequence_number`` (else with the next number of that partition). Result:
    :class:`Settled`.

    ``all_or_none`` (an AMQP transaction's settlements, whose sends commit in the same batch): an
    item that does not apply fails the whole batch instead. ``apply`` raises :class:`SettleFenced`
    naming the operation and the item, and nothing of the batch is applied, so the transaction's
    sends are never stored without its settlements (another node may hold the message now).
    """

    ref: PartitionRef
    now: int
    items: tuple[SettleItem, ...]
    all_or_none: bool = False


class SettleFenced(Exception):
    """An ``all_or_none`` :class:`Settle` found an item whose lock is not (or no longer) the
    caller's: the batch was rolled back, nothing of it applied. ``op_index`` is the operation's
    position in the batch given to ``apply``, ``item_index`` the item's in it."""

    def __init__(self, op_index: int, item_index: int, sequence_number: int) -> None:
        super().__init__(f"settlement of message {sequence_number} (operation {op_index}, item {item_index}) is "
                         "fenced: its lock is not the caller's; the batch was rolled back")
        self.op_index = op_index
        self.item_index = item_index
        self.sequence_number = sequence_number


def check_all_or_none(op_index: int, op: StoreOp, result: OpResult) -> None:
    """Raise :class:`SettleFenced` when ``op`` is an ``all_or_none`` Settle an item of which did not
    apply (each adapter calls this on every result, before it commits)."""
    if isinstance(op, Settle) and op.all_or_none and isinstance(result, Settled) and not all(result.applied):
        item = result.applied.index(False)
        raise SettleFenced(op_index, item, op.items[item].sequence_number)


@dataclass(frozen=True, slots=True)
class RenewLocks:
    """Extend message locks: each (sequence number, token) item is fenced as in :class:`Settle`
    and, when it applies, gets ``locked_until``. Result: :class:`Renewed`."""

    ref: PartitionRef
    now: int
    locked_until: int
    items: tuple[tuple[int, uuid.UUID], ...]


@dataclass(frozen=True, slots=True)
class MoveItem:
    """One message to move: replacement annotations and tail (each when not None; they apply to the
    copy in the target, counted at its new size), whether the moved copy's delivery count starts
    again at 0, and the copy's times in the target: ``enqueued_time`` (None keeps the row's) and
    ``expires_at`` (None: it never expires, as in a dead-letter queue; a move into a queue passes
    the new enqueued time plus the time-to-live that applies there). Without a target only the
    number counts."""

    sequence_number: int
    annotations: bytes | None = None
    annotation_count: int = 0
    reset_delivery_count: bool = False
    tail: bytes | None = None
    enqueued_time: int | None = None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class MoveMessages:
    """Move unlocked messages to another partition of the same store, or delete them.

    For each item whose row exists and is not locked at ``now``: delete it here and, with a
    ``target``, append it there with the target's next number, or its own number with
    ``keep_sequence_numbers`` (the target is the entity's own dead-letter partition: the target's
    counter becomes the greater of its own and the numbers; a number it holds already is replaced
    as :attr:`SettleItem.keep_sequence_number` says), state ACTIVE, lock cleared, count reset if
    asked, the item's enqueued and expiry times. Used for expiry (to the dead-letter
    queue, or just gone), MaxDeliveryCount dead-lettering of an unlocked message, purges by number
    (no target), and moves, resubmits and redrives into another queue of the same store (one
    transaction: the copy exists in the target exactly when the row left the source).
    Result: :class:`Moved`.
    """

    ref: PartitionRef
    now: int
    items: tuple[MoveItem, ...]
    target: PartitionRef | None
    keep_sequence_numbers: bool = False

    def __post_init__(self) -> None:
        if self.keep_sequence_numbers and self.target is None:
            raise ValueError("MoveMessages: keep_sequence_numbers needs a target")


@dataclass(frozen=True, slots=True)
class Activate:
    """Make due scheduled messages ACTIVE: rows of state SCHEDULED with ``scheduled_enqueue_time <=
    now``, at most ``limit``, in order of that time then sequence number. They keep their number
    (assigned at schedule time). Result: :class:`Activated`, so a topic can fan them out."""

    ref: PartitionRef
    now: int
    limit: int


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete every message numbered <= ``through_sequence_number`` (every one when None), in any
    state, except those locked at ``now``. Result: :class:`Purged`."""

    ref: PartitionRef
    now: int
    through_sequence_number: int | None


@dataclass(frozen=True, slots=True)
class CancelScheduled:
    """Cancel scheduled messages, all or none: delete the rows ``sequence_numbers`` names if every
    one of them is a SCHEDULED row of the partition not locked at ``now``; if one is not (never
    there, gone, activated, deferred, locked), change nothing. Result: :class:`Unscheduled` naming
    those (each once, in the order asked; empty when the rows were deleted). The check and the delete
    are one statement or transaction, so a node that activates or cancels the same row at the same
    moment either goes first (and this one finds it missing) or finds it gone."""

    ref: PartitionRef
    now: int
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Restore:
    """Put messages back exactly as they were: each record under its own ``sequence_number`` (one
    the partition gave it, at most its high-water mark, so never a reuse: nothing moves the mark),
    with its state, delivery count, times, annotations and tail, lock cleared, counted. A number
    the partition holds already is left as it is. Used for ReceiveAndDelete deliveries whose delete
    committed but whose transfer was never written (the receiver left first): the message is back
    in its place. Result: :class:`Restored`, one flag per message."""

    ref: PartitionRef
    messages: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class Purged:
    """How many messages :class:`Purge` deleted."""

    count: int


@dataclass(frozen=True, slots=True)
class ClaimSession:
    """Take a session lock (one per entity, partition and session id).

    With ``session_id``: take that session's lock unless someone holds it at ``now`` (the session
    need not have messages). With None: take the session, not locked at ``now``, that has the
    lowest-numbered ACTIVE, unlocked, unexpired message; nothing when there is none. The lock gets
    ``token``, ``locked_until`` and ``owner``. Result: :class:`SessionClaimed`.
    """

    ref: PartitionRef
    now: int
    token: uuid.UUID
    locked_until: int
    owner: str
    session_id: str | None


@dataclass(frozen=True, slots=True)
class RenewSession:
    """Extend a session lock held with ``token`` and not lapsed at ``now``. Result:
    :class:`Renewed` with one flag."""

    ref: PartitionRef
    now: int
    session_id: str
    token: uuid.UUID
    locked_until: int


@dataclass(frozen=True, slots=True)
class ReleaseSession:
    """Drop a session lock held with ``token`` (fenced by the token only: releasing a lapsed lock
    that nobody took over is fine). Result: :class:`Renewed` with one flag."""

    ref: PartitionRef
    session_id: str
    token: uuid.UUID


StoreOpV2 = (
    Append | Claim | Settle | RenewLocks | MoveMessages | Activate | Purge | ClaimSession | RenewSession
    | ReleaseSession | ClaimMessageIds | PruneMessageIds | CancelScheduled | Restore
)
RuleOp = PutRule | DeleteRule
StoreOp = StoreOpV1 | StoreOpV2 | DeleteIdleEntity | RuleOp
OpResult = (Done | Appended | Claimed | Settled | Renewed | Moved | Activated | Purged | SessionClaimed
            | IdleDeleted | IdsClaimed | RuleWritten | Unscheduled | Restored)


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    """Counters of a partition, kept by the store in the same transactions as the messages.

    ``active`` counts ACTIVE messages, locked ones included (as Service Bus's ActiveMessageCount
    does); ``size_in_bytes`` sums :attr:`MessageRecord.size` over every stored message;
    ``last_sequence_number`` is the high-water mark (0 when none was ever assigned);
    ``first_sequence_number`` the lowest stored number, None when the partition holds nothing.
    """

    active: int
    scheduled: int
    deferred: int
    size_in_bytes: int
    last_sequence_number: int
    first_sequence_number: int | None

    @property
    def message_count(self) -> int:
        return self.active + self.scheduled + self.deferred


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """What a partition needs at start, none of it messages."""

    counts: PartitionCounts
    # (message id, seen-at ms) pairs, ordered by seen-at then id
    duplicate_history: tuple[tuple[str, int], ...]
    # (session id, state, updated-at ms), ordered by session id
    session_states: tuple[tuple[str, bytes, int], ...]
    # keys of messages moved in from another store whose source copy may still exist, sorted
    move_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionStats:
    message_count: int
    size_in_bytes: int


class MessagingStore(Protocol):
    """What every adapter (memory, SQLite, later PostgreSQL) provides; one contract suite tests it."""

    def open(self) -> None:
        """Create or migrate the schema; idempotent."""

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        """Commit every operation in one transaction, durably, or raise StoreUnavailable (StoreFull when
        the disk is full: nothing of the batch was applied). Returns one result per operation, in
        order (:class:`Done` for the operations kept from version 1)."""

    def peek(self, ref: PartitionRef, from_sequence_number: int, count: int,
             states: frozenset[MessageState] | None = None,
             session_id: str | None = None) -> tuple[StoredMessage, ...]:
        """At most ``count`` messages numbered >= ``from_sequence_number``, in sequence-number order,
        locked or not; only of ``states`` when given, only of ``session_id`` when given."""

    def session_ids(self, ref: PartitionRef, states: frozenset[MessageState]) -> tuple[str, ...]:
        """The distinct session ids of the messages of ``states`` stored here, sorted (list-sessions:
        the sessions that have messages, locked or not)."""

    def fetch(self, ref: PartitionRef, sequence_numbers: Sequence[int]) -> tuple[StoredMessage, ...]:
        """The messages with these numbers, in sequence-number order, each once; missing ones are
        omitted."""

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        """The partition's counters (zeros for a partition never written); never a backlog scan."""

    def counts_many(self, refs: Sequence[PartitionRef]) -> tuple[PartitionCounts, ...]:
        """The counters of several partitions, one per ref in order, read together (one round trip):
        what a node on a shared store reads back for every partition it serves. As :meth:`counts`,
        except that ``first_sequence_number`` is None (not read: it would cost an index probe each)."""

    def next_due(self, ref: PartitionRef, now: int) -> int | None:
        """The earliest time something in the partition falls due, None when nothing will: the
        ``scheduled_enqueue_time`` of SCHEDULED messages, the ``expires_at`` of messages (any state)
        not locked at ``now``, the ``locked_until`` of messages locked at ``now``, and the
        ``locked_until`` of session locks held at ``now``. May be <= now (something is due already).
        Served from indexes."""

    def next_due_many(self, refs: Sequence[PartitionRef], now: int) -> tuple[int | None, ...]:
        """:meth:`next_due` of several partitions, one per ref in order, read together (one round
        trip): what a node on a shared store reads back now and then for every partition it serves."""

    def partition_meta(self, ref: PartitionRef) -> PartitionMeta:
        """Counters, duplicate-detection history, session states and move keys, read together."""

    def load_entities(self) -> list[EntityRecord]:
        """Return every stored entity definition, ordered by path; each subscription record's
        properties with a ``"Rules"`` list from its rule rows, in the order they were added."""

    def stats(self, ref: PartitionRef) -> PartitionStats:
        """Count and total size of the partition's stored messages."""

    def maintain(self) -> bool:
        """Housekeeping between batches (checkpoint, return free space); True when the store has room
        for new messages again after a :class:`~sodalite.errors.StoreFull`."""

    def close(self) -> None:
        """Release the store; later calls raise StoreUnavailable."""


@runtime_checkable
class ServedByOneProcess(Protocol):
    """A store that one broker process serves at a time (a SQLite file): the message and session
    locks in it when the broker starts were taken by an earlier run, whose receivers died with it.
    The broker drops them before its cores start (locks do not outlive the process that granted
    them, as on version 1); the deliveries they counted stay counted. A store several nodes share
    (PostgreSQL) is not one: there a dead node's locks lapse at their ``locked_until``."""

    def drop_locks_of_earlier_runs(self) -> int:
        """Clear every message lock and session lock, durably; the number of locks dropped."""
        ...


class StoreSnapshot(Protocol):
    """One point in time of a store, held open (a read transaction) until closed; see :class:`Snapshots`."""

    def copy_to(self, destination: str) -> None:
        """Write the whole store as it was at the snapshot into a new file ``destination``, in one
        step (writers go on meanwhile and never restart it)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Snapshots(Protocol):
    """A store that can be backed up while it serves (a SQLite file): :meth:`snapshot` is called on
    the store's own thread between transactions and returns at once; the copy is made later from
    the snapshot, on another thread, while the store keeps committing (the broker's ``backup``)."""

    def snapshot(self) -> StoreSnapshot:
        ...


class ChangeSink(Protocol):
    """What a :class:`ChangeFeed` tells the broker. Called from the feed's own thread: an
    implementation hands each call over to where it is used (the server: its event loop)."""

    def ready(self, ref: PartitionRef) -> None:
        """Another node committed a batch that made messages ready in ``ref`` (appended ACTIVE,
        activated, abandoned or released, moved or dead-lettered into it) or released a session
        lock there: the partition's reader should look again."""

    def due(self, ref: PartitionRef, at: int) -> None:
        """Another node committed scheduled messages in ``ref``, the earliest due at ``at`` (ms):
        the partition's reader should act on that time (activate what is due then)."""

    def entities_changed(self) -> None:
        """Another node committed a change of entity records (created, changed, deleted; regenerated
        keys and entity times are entity records too) or of a subscription's rule rows."""

    def resynced(self) -> None:
        """The feed (re)connected: changes made while it was not listening were not announced, so
        everything may have changed."""


class ChangeFeed(Protocol):
    """Announcements of other nodes' commits to a store several broker nodes share (PostgreSQL:
    ``LISTEN/NOTIFY``). Optional: a store no other node writes has none. The feed is a hint that
    wakes readers sooner; the store stays the truth, and a reader that misses one finds the rows at
    its next read."""

    @property
    def live(self) -> bool:
        """True while the feed is connected and listening (announcements arrive)."""

    def start(self, sink: ChangeSink) -> None:
        """Start listening (in the background; returns at once) and reconnect whenever the
        connection is lost, calling ``sink.resynced()`` after each (re)connection."""

    def stop(self) -> None:
        """Stop listening and release the connection; may block briefly (call it off the event loop)."""
