"""The store port: the only way the broker reaches durable storage.

The port is narrow and batch-oriented. A partition actor collects the effects of many commands
and hands them to :meth:`MessagingStore.apply` as one batch, which the adapter commits in one
transaction (group commit): either every operation in the batch is durable when ``apply``
returns, or none is and it raises :class:`~sodalite.errors.StoreUnavailable`. New needs become new
operation kinds, not new methods. No driver type or driver exception crosses the port.

Adapters are not thread-safe: the server gives each store one worker thread and calls it only
from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sodalite.model.message import MessageRecord, MessageUpdate


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """Names one partition of one entity (path as configured, e.g. ``queue1``)."""

    entity: str
    partition: int = 0


@dataclass(frozen=True, slots=True)
class AppendMessages:
    """Add messages (sequence numbers already assigned) and raise the partition's high-water mark."""

    ref: PartitionRef
    messages: tuple[MessageRecord, ...]


@dataclass(frozen=True, slots=True)
class DeleteMessages:
    """Remove messages by sequence number; unknown numbers are ignored."""

    ref: PartitionRef
    sequence_numbers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UpdateMessages:
    """Change delivery count and state of stored messages; unknown numbers are ignored."""

    ref: PartitionRef
    updates: tuple[MessageUpdate, ...]


@dataclass(frozen=True, slots=True)
class EntityRecord:
    """An entity's definition as stored: its path, kind and JSON-able properties."""

    path: str
    kind: str  # "queue", later "topic", "subscription", "rule"
    properties: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PutEntity:
    """Create or replace an entity definition."""

    entity: EntityRecord


@dataclass(frozen=True, slots=True)
class DeleteEntity:
    """Remove an entity definition and everything stored for it.

    Everything: the messages, high-water marks and duplicate-detection history of every partition
    of ``path`` and of its sub-queues, which are stored under refs whose entity starts with
    ``<path>/$`` (``<path>/$deadletterqueue``, ``<path>/$transfer/$deadletterqueue``); paths
    compare case-insensitively. Another entity whose path merely starts with ``<path>/`` (a queue
    ``orders/eu`` beside ``orders``) is untouched: entity names cannot contain ``$``, so only
    sub-queues match. The definition removed is the one of ``path`` alone.
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
    """Drop MessageIds from the partition's duplicate-detection history; unknown ids are ignored."""

    ref: PartitionRef
    message_ids: tuple[str, ...]


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


StoreOp = (
    AppendMessages | DeleteMessages | UpdateMessages | PutEntity | DeleteEntity | RememberMessageIds
    | ForgetMessageIds | PutSessionState | RememberMoveKeys | ForgetMoveKeys
)


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """Everything needed to rebuild a partition after a restart."""

    messages: tuple[MessageRecord, ...]  # in sequence-number order
    last_sequence_number: int  # highest number ever assigned; 0 when none
    # (message id, seen-at ms) pairs, ordered by seen-at then id; entries past any window included
    duplicate_history: tuple[tuple[str, int], ...] = ()
    # (session id, state, updated-at ms), ordered by session id
    session_states: tuple[tuple[str, bytes, int], ...] = ()
    # keys of messages moved in from another store whose source copy may still exist, sorted
    move_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionStats:
    message_count: int
    size_in_bytes: int


class MessagingStore(Protocol):
    """What every adapter (memory, SQLite, later PostgreSQL) provides; one contract suite tests it."""

    def open(self) -> None:
        """Create or migrate the schema; idempotent."""

    def apply(self, batch: Sequence[StoreOp]) -> None:
        """Commit every operation in one transaction, durably, or raise StoreUnavailable (StoreFull when
        the disk is full: nothing of the batch was applied)."""

    def load_partition(self, ref: PartitionRef) -> PartitionSnapshot:
        """Return the partition's messages, high-water mark and duplicate-detection history (empty if
        never written)."""

    def load_entities(self) -> list[EntityRecord]:
        """Return every stored entity definition, ordered by path."""

    def stats(self, ref: PartitionRef) -> PartitionStats:
        """Count and total size of the partition's stored messages."""

    def maintain(self) -> bool:
        """Housekeeping between batches (checkpoint, return free space); True when the store has room
        for new messages again after a :class:`~sodalite.errors.StoreFull`."""

    def close(self) -> None:
        """Release the store; later calls raise StoreUnavailable."""
