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
    """Remove an entity definition and every message of every partition of it."""

    path: str


StoreOp = AppendMessages | DeleteMessages | UpdateMessages | PutEntity | DeleteEntity


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """Everything needed to rebuild a partition after a restart."""

    messages: tuple[MessageRecord, ...]  # in sequence-number order
    last_sequence_number: int  # highest number ever assigned; 0 when none


@dataclass(frozen=True, slots=True)
class PartitionStats:
    message_count: int
    size_in_bytes: int


class MessagingStore(Protocol):
    """What every adapter (memory, SQLite, later PostgreSQL) provides; one contract suite tests it."""

    def open(self) -> None:
        """Create or migrate the schema; idempotent."""

    def apply(self, batch: Sequence[StoreOp]) -> None:
        """Commit every operation in one transaction, durably, or raise StoreUnavailable."""

    def load_partition(self, ref: PartitionRef) -> PartitionSnapshot:
        """Return the partition's messages and high-water mark (empty if never written)."""

    def load_entities(self) -> list[EntityRecord]:
        """Return every stored entity definition, ordered by path."""

    def stats(self, ref: PartitionRef) -> PartitionStats:
        """Count and total size of the partition's stored messages."""

    def close(self) -> None:
        """Release the store; later calls raise StoreUnavailable."""
