"""The store operations and their answers: the one vocabulary the partition core emits and every
store adapter applies (``docs/store-port.md``). Data only.

The model owns them because the layer contract puts ``sodalite.store`` above ``sodalite.model``;
``store/port.py`` re-exports them beside the :class:`~sodalite.store.port.MessagingStore` protocol.
Every operation on a partition names it in ``ref`` (keyword-only, last). A core decides for one
partition and leaves ``ref`` at :data:`THIS_PARTITION`; its runner names the partition (and the
history partition of a :class:`Gate`) and encodes the :class:`AnnotationEdit` of a settlement or a
move (encoding AMQP is the server's business) before the batch goes to the store. A store refuses
an operation whose partition is unnamed or whose edit is not encoded.

Times are milliseconds since the epoch, always passed in (``now``). A message is *locked at now*
when it carries a lock token and ``locked_until > now``; a lapsed lock is as good as none. Results
come back one per operation, in order.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sodalite.model.message import MessageRecord, MessageState


class PartitionRef(NamedTuple):
    """Names one partition of one entity (path as configured, e.g. ``queue1``). A tuple, so a core
    may name another entity's partition as ``(path, partition)``."""

    entity: str
    partition: int = 0


THIS_PARTITION = PartitionRef("")
"""The partition of the core that emits an operation: its runner names it before the store sees it."""

DEAD_LETTER_SUFFIX = "/$deadletterqueue"


def dead_letter_of(ref: PartitionRef) -> PartitionRef:
    """Where a dead letter of ``ref`` goes: the entity's ``$deadletterqueue`` partition; a dead-letter
    queue's (and a transfer dead-letter queue's) own dead letters stay in it."""
    if ref.entity.endswith(DEAD_LETTER_SUFFIX):
        return ref
    return PartitionRef(ref.entity + DEAD_LETTER_SUFFIX, ref.partition)


class Outcome(enum.Enum):
    """How a :class:`SettleItem` ends a locked message's delivery."""

    COMPLETE = "complete"  # delete the message
    ABANDON = "abandon"  # clear the lock; the delivery still counts
    RELEASE = "release"  # clear the lock and give the delivery back (count - 1, not below 0)
    DEFER = "defer"  # clear the lock; the message becomes DEFERRED
    DEAD_LETTER = "dead_letter"  # delete here, append to the target (its own number, or a new one)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A stored message with its lock as the store holds it now.

    ``record.delivery_count`` is the count as stored (a claim has already incremented it). The lock
    fields are all None when the message was never claimed or its lock was cleared; a lapsed lock
    (``locked_until <= now``) may still be shown here, and is as good as no lock.
    """

    record: MessageRecord
    lock_token: uuid.UUID | None = None
    locked_until: int | None = None
    lock_owner: str | None = None

    def locked_at(self, now: int) -> bool:
        return self.lock_token is not None and self.locked_until is not None and self.locked_until > now


@dataclass(frozen=True, slots=True)
class AnnotationEdit:
    """What to write over a row: ``base`` (the row's encoded client annotations, ``base_count``
    entries), ``properties`` to set (properties-to-modify, opaque to the core) and, when given, the
    dead-letter reason and description the service or the client set. Service Bus carries all of
    them as application properties, which live in the row's tail: ``base_tail`` is that tail as the
    core read it, for the runner to write them into (an edit that sets any and has no ``base_tail``
    cannot be written)."""

    base: bytes
    base_count: int
    properties: tuple[tuple[str, object], ...] = ()
    dead_letter_reason: str | None = None
    dead_letter_description: str | None = None
    base_tail: bytes | None = None
    dead_letter_source: str | None = None  # written as x-opt-deadletter-source (a forwarded dead letter)


# ---- messages ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gate:
    """Where an append's messages were checked for duplicates: the partition (``ref``) whose history
    a :class:`ClaimMessageIds` of the same batch wrote with ``claim`` (the queue partition itself, or
    a topic for its subscriptions' copies), and per message the id it was checked under (None: stored
    whatever; a topic's copy is checked under the sent message's id, which a rule action may have
    changed in the copy)."""

    claim: uuid.UUID
    message_ids: tuple[str | None, ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Append:
    """Append messages with sequence numbers the store assigns: last+1, last+2, ... in order.

    The numbers come from the partition's high-water mark (the one every append raises), in the
    same transaction, so they are strictly increasing per partition and never reused, also after
    deletes and restarts. ``last`` is never below ``partition << 48``
    (:func:`~sodalite.store.port.numbering_base`): partition i's first number is ``(i << 48) + 1``;
    the same holds for the numbers a dead-letter settlement or a move gives in its target
    partition. Each record's own ``sequence_number`` is ignored (pass 0); its lock starts cleared.
    Result: :class:`Appended`.

    With a ``gate``, a message whose gate id is not None is stored only when a
    :class:`ClaimMessageIds` earlier in the same batch, on ``gate.ref`` with ``gate.claim``, took
    that id; the others are duplicates, skipped and not numbered: their number is 0.

    ``numbered_by``: another partition whose counter numbers the messages too (None: ``ref``'s
    alone): a dead letter made for a subscription at a topic's fan-out is numbered by the
    subscription's partition. The numbers go on above both counters, and both are raised to the
    last: they take nothing either partition holds or gave.
    """

    messages: tuple[MessageRecord, ...]
    gate: Gate | None = None
    numbered_by: PartitionRef | None = None
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)

    def __post_init__(self) -> None:
        if self.gate is not None and len(self.gate.message_ids) != len(self.messages):
            raise ValueError("Append: a gate names one id (or None) per message")


@dataclass(frozen=True, slots=True)
class AppendTo:
    """An :class:`Append` into another partition, named by the core: a topic's copies for its
    subscriptions, in the topic's transaction. ``target`` (and ``numbered_by``) must be a
    :class:`PartitionRef` when the store applies it; the gate's history is the emitting core's.
    Answered by :class:`Appended`."""

    target: Hashable
    messages: tuple[MessageRecord, ...]
    gate: Gate | None = None
    numbered_by: Hashable | None = None

    def as_append(self) -> Append:
        """The :class:`Append` the store carries out (TypeError: a partition not named by a ref)."""
        if not isinstance(self.target, PartitionRef):
            raise TypeError(f"an AppendTo names its partition by a PartitionRef, not {self.target!r}")
        if self.numbered_by is not None and not isinstance(self.numbered_by, PartitionRef):
            raise TypeError(f"an AppendTo names its numbering partition by a PartitionRef, not {self.numbered_by!r}")
        return Append(self.messages, self.gate, self.numbered_by, ref=self.target)


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
    with ``sequence_numbers`` (a claim of scheduled messages by number). Scheduled messages are
    never claimed for delivery: a SCHEDULED claim without numbers is refused (ValueError); due
    ones become ACTIVE through :class:`Activate`. Result: :class:`Claimed`.
    """

    now: int
    locked_until: int
    owner: str
    tokens: tuple[uuid.UUID, ...]
    sequence_numbers: tuple[int, ...] | None = None
    state: MessageState = MessageState.ACTIVE
    session_id: str | None = None
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)

    def __post_init__(self) -> None:
        if self.state == MessageState.SCHEDULED and self.sequence_numbers is None:
            raise ValueError("Claim: scheduled messages are claimed only by sequence number (to cancel "
                             "them); activate due ones instead")


@dataclass(frozen=True, slots=True)
class SettleItem:
    """One settlement: the message, the lock token it must carry, and what to do.

    ``edit`` is what the core writes over the row (the runner encodes it into ``annotations``,
    ``annotation_count`` and ``tail``; a store refuses an edit not encoded). ``annotations``, when
    not None, replaces the message's annotations before the outcome (properties to modify);
    ``tail``, when not None, replaces its tail (the dead-letter reason and description are
    application properties). The partition's ``size_in_bytes`` follows the new size.

    A DEAD_LETTER item goes to ``target`` ((entity path, partition) of the same store:
    ForwardDeadLetteredMessagesTo), or without one to the entity's dead-letter queue
    (:func:`dead_letter_of`), with its new annotations and tail, its delivery count reset if asked,
    the copy's ``enqueued_time`` (None: the row's) and ``expires_at`` (None: never).
    ``keep_sequence_number`` (into the entity's own dead-letter queue): the copy keeps its number
    there, as Service Bus keeps it, and that partition's counter becomes the greater of its own and
    the number; a number the target holds already is replaced by one above the target's counter and
    every number the operation keeps there, in item order. ``give_back_delivery``: the copy's count
    is the row's minus one (not below 0): the delivery the claim counted ended without counting (a
    client's dead-lettering). Ignored with ``reset_delivery_count``.
    """

    sequence_number: int
    lock_token: uuid.UUID
    outcome: Outcome
    edit: AnnotationEdit | None = None
    target: tuple[str, int] | None = None
    reset_delivery_count: bool = False
    enqueued_time: int | None = None
    expires_at: int | None = None
    keep_sequence_number: bool = False
    give_back_delivery: bool = False
    annotations: bytes | None = None
    annotation_count: int = 0
    tail: bytes | None = None


@dataclass(frozen=True, slots=True)
class Settle:
    """Settle locked messages, each fenced by its lock token.

    An item applies only when its row exists, carries exactly ``lock_token`` and
    ``locked_until > now``; otherwise it changes nothing and its flag is False (a stale token, a
    lapsed lock, a message already settled: the caller answers "lock lost"). Items apply in order,
    so a second item for the same message finds it settled (False). A dead-lettered message is
    appended to its target unlocked, state ACTIVE, with its delivery count. Result: :class:`Settled`.

    ``all_or_none`` (an AMQP transaction's settlements, whose sends commit in the same batch): an
    item that does not apply fails the whole batch instead: ``apply`` raises
    :class:`~sodalite.store.port.SettleFenced` naming the operation and the item, and nothing of the
    batch is applied.
    """

    now: int
    items: tuple[SettleItem, ...]
    all_or_none: bool = False
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)

    def dead_letter_target(self, item: SettleItem) -> PartitionRef:
        """Where ``item``'s dead letter goes."""
        return dead_letter_of(self.ref) if item.target is None else PartitionRef(*item.target)


@dataclass(frozen=True, slots=True)
class RenewLocks:
    """Extend message locks: each (sequence number, token) item is fenced as in :class:`Settle`
    and, when it applies, gets ``locked_until``. Result: :class:`Renewed`."""

    now: int
    locked_until: int
    items: tuple[tuple[int, uuid.UUID], ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class MoveItem:
    """One row to move: ``edit`` when the core writes a dead-letter reason (the runner encodes it),
    or the copy's replacement ``annotations`` (with ``annotation_count``) and ``tail`` already
    encoded, each None to keep the row's (they apply to the copy in the target, counted at its new
    size); whether its delivery count starts again at 0; its ``enqueued_time`` in the target (None:
    the row's) and ``expires_at`` (None: it never expires, as in a dead-letter queue). Without a
    target only the number counts."""

    sequence_number: int
    edit: AnnotationEdit | None = None
    annotations: bytes | None = None
    annotation_count: int = 0
    tail: bytes | None = None
    reset_delivery_count: bool = False
    enqueued_time: int | None = None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class MoveMessages:
    """Move unlocked messages to another partition of the same store, or delete them.

    For each item whose row exists and is not locked at ``now``: delete it here and append it to
    the entity's dead-letter queue (``to_dead_letter``) or to ``target`` (entity path, partition),
    with the target's next number, or its own number with ``keep_sequence_numbers`` (the target is
    the entity's own dead-letter partition: as :attr:`SettleItem.keep_sequence_number` says), state
    ACTIVE, lock cleared, count reset if asked, the item's enqueued and expiry times; with neither,
    just delete it. Used for expiry, MaxDeliveryCount dead-lettering of an unlocked message, purges
    by number, and moves, resubmits and redrives into another queue of the same store (one
    transaction: the copy exists in the target exactly when the row left the source).
    Result: :class:`Moved`.
    """

    now: int
    items: tuple[MoveItem, ...]
    to_dead_letter: bool = False
    target: tuple[str, int] | None = None
    keep_sequence_numbers: bool = False
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)

    def __post_init__(self) -> None:
        if self.to_dead_letter and self.target is not None:
            raise ValueError("a move goes to the dead-letter queue or to a target, not both")
        if self.keep_sequence_numbers and not self.to_dead_letter and self.target is None:
            raise ValueError("MoveMessages: keep_sequence_numbers needs a target")

    @property
    def destination(self) -> PartitionRef | None:
        """The partition the rows go to (None: they are deleted)."""
        if self.to_dead_letter:
            return dead_letter_of(self.ref)
        return None if self.target is None else PartitionRef(*self.target)


@dataclass(frozen=True, slots=True)
class Activate:
    """Make due scheduled messages ACTIVE: rows of state SCHEDULED with ``scheduled_enqueue_time <=
    now``, at most ``limit``, in order of that time then sequence number. They keep their number
    (assigned at schedule time). Result: :class:`Activated`, so a topic can fan them out."""

    now: int
    limit: int
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete every message numbered <= ``through_sequence_number`` (every one when None), in any
    state, except those locked at ``now`` (complete-through). Result: :class:`Purged`."""

    now: int
    through_sequence_number: int | None
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class CancelScheduled:
    """Cancel scheduled messages, all or none: delete the rows ``sequence_numbers`` names if every
    one of them is a SCHEDULED row of the partition not locked at ``now``; if one is not (never
    there, gone, activated, deferred, locked), change nothing. Result: :class:`Unscheduled` naming
    those (each once, in the order asked; empty when the rows were deleted). The check and the
    delete are one statement or transaction, so a node that activates or cancels the same row at
    the same moment either goes first (and this one finds it missing) or finds it gone."""

    now: int
    sequence_numbers: tuple[int, ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class Restore:
    """Put messages back exactly as they were: each record under its own ``sequence_number`` (one
    the partition gave it, at most its high-water mark, so never a reuse: nothing moves the mark),
    with its state, delivery count, times, annotations and tail, lock cleared, counted. A number
    the partition holds already is left as it is. Used for ReceiveAndDelete deliveries whose delete
    committed but whose transfer was never written (the receiver left first). Result:
    :class:`Restored`, one flag per message."""

    messages: tuple[MessageRecord, ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


# ---- duplicate detection ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RememberMessageIds:
    """Record MessageIds for duplicate detection: (message id, seen-at time in ms) pairs. An upsert:
    an id the partition already holds takes the new time; within one operation the last pair of an
    id wins. Result: :class:`Done`."""

    entries: tuple[tuple[str, int], ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class ForgetMessageIds:
    """Drop MessageIds from the partition's history; unknown ids are ignored. With ``seen_before``,
    only entries seen before that time go: a node pruning the ids it saw leaves alone an entry
    another node sharing the store took again since. Result: :class:`Done`."""

    message_ids: tuple[str, ...]
    seen_before: int | None = None
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class PruneMessageIds:
    """Drop every history entry seen before ``seen_before``, whichever node took it (a node knows
    only the ids it took, and one that stopped forgets none). Result: :class:`Done`."""

    seen_before: int
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class ClaimMessageIds:
    """Duplicate detection decided by the store: take each MessageId not seen within the window.

    For each id, in order: when the partition's history holds it seen at or after
    ``now - window_ms``, or an earlier id of this operation is the same, it is a duplicate and
    nothing changes; otherwise the history takes it, seen at ``now`` and marked with ``claim`` (an
    upsert). A later append of the same batch whose :class:`Gate` names this partition and this
    ``claim`` stores only the messages whose gate id this operation took. ``claim`` must be new for
    each operation. The decision is made in the batch's transaction (on a database several nodes
    share, under the partition's lock), so of two batches taking one id, on one node or two,
    exactly one gets it. Result: :class:`IdsClaimed`.
    """

    now: int
    window_ms: int
    claim: uuid.UUID
    message_ids: tuple[str, ...]
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


# ---- sessions -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimSession:
    """Take a session lock (one per entity, partition and session id).

    With ``session_id``: take that session's lock unless someone holds it at ``now`` (the session
    need not have messages). With None: take the session, not locked at ``now``, that has the
    lowest-numbered ACTIVE, unlocked, unexpired message; nothing when there is none. The lock gets
    ``token``, ``locked_until`` and ``owner``. Result: :class:`SessionClaimed`.
    """

    now: int
    token: uuid.UUID
    locked_until: int
    owner: str
    session_id: str | None
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class RenewSession:
    """Extend a session lock held with ``token`` and not lapsed at ``now``. Result: :class:`Renewed`
    with one flag."""

    now: int
    session_id: str
    token: uuid.UUID
    locked_until: int
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class ReleaseSession:
    """Drop a session lock held with ``token`` (fenced by the token only: releasing a lapsed lock
    that nobody took over is fine). Result: :class:`Renewed` with one flag."""

    session_id: str
    token: uuid.UUID
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


@dataclass(frozen=True, slots=True)
class PutSessionState:
    """Set a session's state (with the time it changed) or clear it (``state`` None). Result: :class:`Done`."""

    session_id: str
    state: bytes | None
    updated_at: int
    ref: PartitionRef = field(default=THIS_PARTITION, kw_only=True)


# ---- moves across stores --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RememberMoveKeys:
    """Record, in a move's target partition, the keys of messages moved in from another store.

    A key names the source copy (``<source store>/<source partition's entity>/<partition>/<sequence
    number>``). The target appends the message and remembers its key in one transaction; the source
    then deletes its copy. A retry after a crash in between finds the key and does not append again,
    so a move across stores never doubles a message. Keys are kept apart from the user's
    duplicate-detection history, which a move does not observe. An upsert: a known key is fine.
    Result: :class:`Done`.
    """

    keys: tuple[str, ...]
    ref: PartitionRef = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class ForgetMoveKeys:
    """Drop move keys once the source copy is gone for good; unknown keys are ignored. Result: :class:`Done`."""

    keys: tuple[str, ...]
    ref: PartitionRef = field(kw_only=True)


# ---- entities (the broker's, never a core's) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """An entity's definition as stored: its path, kind and JSON-able properties."""

    path: str
    kind: str  # "queue", "topic", "subscription", "rule"
    properties: dict[str, Any]


# The kind of a subscription's record, whose rules are rows of their own (PutRule, DeleteRule).
SUBSCRIPTION_KIND = "subscription"


@dataclass(frozen=True, slots=True)
class PutEntity:
    """Create or replace an entity definition. Result: :class:`Done`.

    A subscription's rules are rows of their own (:class:`PutRule`, :class:`DeleteRule`), so two
    nodes changing different rules of one subscription at once both keep their change, and a
    change of its properties leaves its rules alone: a subscription record (kind
    :data:`SUBSCRIPTION_KIND`) is stored without a ``"Rules"`` key. When its properties carry one
    (a list of rule objects, each with a ``"Name"``), the subscription's rule rows are replaced by
    those rules in that order (a whole set, as a new subscription or an import writes it);
    without one its rule rows stay as they are. ``load_entities`` gives every subscription record
    a ``"Rules"`` list read from its rule rows.
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
class DeleteEntity:
    """Remove an entity definition and everything stored for it. Result: :class:`Done`.

    Everything: the messages, high-water marks and duplicate-detection history of every partition
    of ``path`` and of its sub-queues, which are stored under refs whose entity starts with
    ``<path>/$`` (``<path>/$deadletterqueue``, ``<path>/$transfer/$deadletterqueue``); paths
    compare case-insensitively. Another entity whose path merely starts with ``<path>/`` (a queue
    ``orders/eu`` beside ``orders``) is untouched: entity names cannot contain ``$``, so only
    sub-queues match. The definition removed is the one of ``path`` alone, with its rule rows.
    """

    path: str


@dataclass(frozen=True, slots=True)
class EntityActivity:
    """One entity as one node sees it: its last activity (ms; for a topic, its subscriptions' too)
    and the receivers attached to it on that node (a topic's: its subscriptions' receivers)."""

    path: str
    last_activity: int
    receivers: int


@dataclass(frozen=True, slots=True)
class RecordActivity:
    """A node's registrations, refreshed at ``now`` (AutoDeleteOnIdle across nodes): per entity
    (paths compare case-insensitively) its row for ``node`` holds the latest ``last_activity`` ever
    recorded (a smaller one does not lower it), the ``receivers`` given and ``refreshed_at = now``.
    Rows of entities not named stay as they are. :class:`DeleteEntity` removes an entity's rows.
    Result: :class:`Done`."""

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


PartitionOp = (Append | AppendTo | Claim | Settle | RenewLocks | MoveMessages | Activate | Purge | CancelScheduled
               | Restore | RememberMessageIds | ForgetMessageIds | PruneMessageIds | ClaimMessageIds | ClaimSession
               | RenewSession | ReleaseSession | PutSessionState | RememberMoveKeys | ForgetMoveKeys)
"""The operations on one partition (each names it in ``ref``; AppendTo names its ``target``)."""
EntityOp = PutEntity | DeleteEntity | PutRule | DeleteRule | RecordActivity | DeleteIdleEntity
"""The operations on entity records (the broker's, never a core's)."""
StoreOp = PartitionOp | EntityOp


# ---- results ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """The numbers an append assigned, one per message, in order (0 for a message skipped as a
    duplicate: see :class:`Gate`)."""

    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Claimed:
    """The rows a :class:`Claim` took, in sequence-number order, with their new lock and count."""

    messages: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class ItemsApplied:
    """Per item of the operation, in order: True when it applied."""

    applied: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Settled(ItemsApplied):
    """Per :class:`SettleItem`, in order: True when it applied."""


@dataclass(frozen=True, slots=True)
class Renewed(ItemsApplied):
    """Per item, in order: True when the lock was held and is now renewed (or released)."""


@dataclass(frozen=True, slots=True)
class Moved:
    """Per :class:`MoveItem`: the number in the target (the old number when there is no target),
    or None when the message was gone or locked."""

    sequence_numbers: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Activated:
    """The activated messages, in order of scheduled time then sequence number, as now stored."""

    messages: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class SessionClaimed:
    """The session now locked by :class:`ClaimSession`, or None when it took nothing."""

    session_id: str | None


@dataclass(frozen=True, slots=True)
class Purged:
    """How many rows :class:`Purge` deleted (all states together)."""

    count: int


@dataclass(frozen=True, slots=True)
class Unscheduled:
    """The answer to :class:`CancelScheduled`: the numbers asked (each once, in the order asked) that
    were not SCHEDULED rows free to take. Empty: every row named was deleted; else nothing was."""

    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Restored(ItemsApplied):
    """Per message of :class:`Restore`, in order: True when it was put back (False: its number
    was held already)."""


@dataclass(frozen=True, slots=True)
class Done:
    """The result of an operation that returns nothing."""


@dataclass(frozen=True, slots=True)
class IdsClaimed:
    """Per id of :class:`ClaimMessageIds`, in order: True when it was taken (not a duplicate)."""

    fresh: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class RuleWritten:
    """Whether a :class:`PutRule` or :class:`DeleteRule` changed something (see each)."""

    applied: bool


@dataclass(frozen=True, slots=True)
class IdleDeleted:
    """Whether :class:`DeleteIdleEntity` deleted the definition."""

    deleted: bool


OpResult = (Appended | Claimed | Settled | Renewed | Moved | Activated | SessionClaimed | Done | Purged | IdsClaimed
            | Unscheduled | Restored | RuleWritten | IdleDeleted)
