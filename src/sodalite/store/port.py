"""The store port: the only way the broker reaches durable storage.

The port is narrow and batch-oriented. A partition actor collects the effects of many commands
and hands them to :meth:`MessagingStore.apply` as one batch, which the adapter commits in one
transaction (group commit): either every operation in the batch is durable when ``apply``
returns, or none is and it raises :class:`~sodalite.errors.StoreUnavailable`. New needs become new
operation kinds, not new methods. No driver type or driver exception crosses the port.

The store is the truth about message state: it assigns sequence numbers (:class:`Append`), claims
ready messages under a lock token (:class:`Claim`), settles them fenced by that token
(:class:`Settle`), and keeps counters and the next due time readable without loading a partition's
messages (:meth:`MessagingStore.counts`, :meth:`MessagingStore.next_due`). ``apply`` returns one
:data:`OpResult` per operation. The operations and results are the model's
(``model/store_ops.py``): the partition core emits them as they are, and this module re-exports them.

Times are milliseconds since the epoch, always passed in (``now``): no adapter reads a clock. Lock
tokens are chosen by the caller, so a run is deterministic. A message is *locked at now* when it
carries a lock token and ``locked_until > now``; a lapsed lock is as good as none.

Adapters are not thread-safe: the server gives each store one worker thread and calls it only
from there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sodalite.errors import StoreUnavailable
from sodalite.model.message import MessageState
from sodalite.model.store_ops import (  # the vocabulary: defined once in the model, re-exported here
    SUBSCRIPTION_KIND,
    THIS_PARTITION,
    Activate,
    Activated,
    AnnotationEdit,
    Append,
    Appended,
    AppendTo,
    CancelScheduled,
    Claim,
    Claimed,
    ClaimMessageIds,
    ClaimSession,
    DeleteEntity,
    DeleteIdleEntity,
    DeleteRule,
    Done,
    EntityActivity,
    EntityOp,
    EntityRecord,
    ForgetMessageIds,
    ForgetMoveKeys,
    Gate,
    IdleDeleted,
    IdsClaimed,
    Moved,
    MoveItem,
    MoveMessages,
    OpResult,
    Outcome,
    PartitionOp,
    PartitionRef,
    PruneMessageIds,
    Purge,
    Purged,
    PutEntity,
    PutRule,
    PutSessionState,
    RecordActivity,
    ReleaseSession,
    RememberMessageIds,
    RememberMoveKeys,
    Renewed,
    RenewLocks,
    RenewSession,
    Restore,
    Restored,
    RuleWritten,
    SessionClaimed,
    Settle,
    Settled,
    SettleItem,
    StoredMessage,
    StoreOp,
    Unscheduled,
    dead_letter_of,
    split_rules,
)

__all__ = [
    "PARTITION_SHIFT",
    "SUBSCRIPTION_KIND",
    "THIS_PARTITION",
    "Activate",
    "Activated",
    "AnnotationEdit",
    "Append",
    "AppendTo",
    "Appended",
    "CancelScheduled",
    "ChangeFeed",
    "ChangeSink",
    "Claim",
    "ClaimMessageIds",
    "ClaimSession",
    "Claimed",
    "DeleteEntity",
    "DeleteIdleEntity",
    "DeleteRule",
    "Done",
    "EntityActivity",
    "EntityOp",
    "EntityRecord",
    "ForgetMessageIds",
    "ForgetMoveKeys",
    "Gate",
    "IdleDeleted",
    "IdsClaimed",
    "MessageOp",
    "MessagingStore",
    "MoveItem",
    "MoveMessages",
    "Moved",
    "OpResult",
    "Outcome",
    "PartitionCounts",
    "PartitionMeta",
    "PartitionOp",
    "PartitionRef",
    "PartitionStats",
    "PruneMessageIds",
    "Purge",
    "Purged",
    "PutEntity",
    "PutRule",
    "PutSessionState",
    "RecordActivity",
    "RecordOp",
    "ReleaseSession",
    "RememberMessageIds",
    "RememberMoveKeys",
    "RenewLocks",
    "RenewSession",
    "Renewed",
    "Restore",
    "Restored",
    "RuleWritten",
    "ServedByOneProcess",
    "SessionClaimed",
    "Settle",
    "SettleFenced",
    "SettleItem",
    "Settled",
    "Snapshots",
    "StoreOp",
    "StoreSnapshot",
    "StoredMessage",
    "Unscheduled",
    "check_all_or_none",
    "dead_letter_of",
    "encode_properties",
    "numbering_base",
    "prepare_batch",
    "split_rules",
]

RecordOp = (PutEntity | DeleteEntity | RememberMessageIds | ForgetMessageIds | PutSessionState | RememberMoveKeys
            | ForgetMoveKeys | RecordActivity)
"""The operations that write records beside the messages, each answered :class:`Done`."""
MessageOp = (Append | Claim | Settle | RenewLocks | MoveMessages | Activate | Purge | ClaimSession | RenewSession
             | ReleaseSession | ClaimMessageIds | PruneMessageIds | CancelScheduled | Restore)
"""The operations on a partition's messages, locks and history, each answered with a result of its own."""

# A sequence number's upper 16 bits name its partition (the Spark reader and the partitioned actors
# route by them): the store numbers partition i after i << 48.
PARTITION_SHIFT = 48


def numbering_base(ref: PartitionRef) -> int:
    """The number partition ``ref`` counts up from: its first message gets this + 1 (0 for partition
    0 and every non-partitioned entity). Every adapter numbers ``max(high-water mark, base) + 1, ...``."""
    return ref.partition << PARTITION_SHIFT


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


def prepare_batch(batch: Sequence[StoreOp]) -> list[StoreOp]:
    """The batch as an adapter applies it, each :class:`AppendTo` made the :class:`Append` it
    names; refused (ValueError, TypeError) when an operation's partition (or gate partition) is
    unnamed (:data:`THIS_PARTITION`) or an edit is not encoded. Every adapter calls this before it
    writes anything."""
    prepared: list[StoreOp] = []
    for op in batch:
        if isinstance(op, AppendTo):
            op = op.as_append()
        ref = getattr(op, "ref", None)
        if ref is not None and not ref.entity:
            raise ValueError(f"{type(op).__name__} names no partition")
        gate = getattr(op, "gate", None)
        if gate is not None and not gate.ref.entity:
            raise ValueError(f"{type(op).__name__}: its gate names no partition")
        if isinstance(op, Settle | MoveMessages) and any(item.edit is not None for item in op.items):
            raise ValueError(f"{type(op).__name__}: an annotation edit must be encoded before it is stored")
        prepared.append(op)
    return prepared


def encode_properties(entity: EntityRecord, value: object = None) -> str:
    """Entity properties (or ``value``, a rule of the entity) as the JSON text every adapter stores;
    StoreUnavailable if not JSON-able."""
    try:
        return json.dumps(entity.properties if value is None else value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreUnavailable(
            f"cannot store entity {entity.path!r}: its properties are not JSON-serializable ({exc})"
        ) from exc


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
        order (:class:`Done` for the operations on records beside the messages)."""

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
    them); the deliveries they counted stay counted. A store several nodes share
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
