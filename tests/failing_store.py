"""A MemoryStore that can be made to fail as a database that went away, for the actor tests that
take a store's partitions out and bring them back (test_partitioned_core_actor,
test_partitioned_topic_actor): while ``down`` is set, every commit (``apply``) and every counts read
raises StoreUnavailable.
"""

from __future__ import annotations

from collections.abc import Sequence

from sodalite.errors import StoreUnavailable
from sodalite.store.memory import MemoryStore
from sodalite.store.port import OpResult, PartitionCounts, PartitionRef, StoreOp


class FailingStore(MemoryStore):
    """A memory store that can be made to fail every commit and read, as a database that went away."""

    down = False

    def apply(self, batch: Sequence[StoreOp]) -> tuple[OpResult, ...]:
        if self.down:
            raise StoreUnavailable("the database went away")
        return super().apply(batch)

    def counts(self, ref: PartitionRef) -> PartitionCounts:
        if self.down:
            raise StoreUnavailable("the database went away")
        return super().counts(ref)
